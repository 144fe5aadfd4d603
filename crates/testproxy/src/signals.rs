//! The end of a role: SIGTERM (the kubelet stopping the container) or SIGINT.

use tokio::signal::unix::{signal, SignalKind};

use crate::Error;

/// Resolves when SIGTERM or SIGINT arrives.
pub async fn terminated() -> Result<(), Error> {
    let io = |source| Error::Io {
        what: "installing the signal handlers",
        source,
    };
    let mut term = signal(SignalKind::terminate()).map_err(io)?;
    let mut int = signal(SignalKind::interrupt()).map_err(io)?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
