//! (placeholder: filled in by its owner)

/// `injector certs` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `injector certs`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("certs is not built yet")
}
