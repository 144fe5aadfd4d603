//! `testproxy echo --port P …`: the test application. Every request on every port is answered with the
//! pod's name, so a client can tell which replica it reached.

use hyper::StatusCode;

use crate::http::{listen, serve, text};
use crate::Error;

/// Longest name answered (a DNS label set; a pod name is at most 253 bytes).
const MAX_NAME: usize = 253;

/// The pod's name: `$POD_NAME`, else the host name (a pod's host name is its name).
pub fn pod_name() -> String {
    let name = std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .unwrap_or_default();
    let name = name.trim();
    let name = if name.is_empty() { "unknown" } else { name };
    name.chars().take(MAX_NAME).collect()
}

/// Serves until SIGTERM/SIGINT.
pub async fn run(ports: &[u16]) -> Result<(), Error> {
    let name = pod_name();
    let answer = bytes::Bytes::from(format!("{name}\n"));
    let mut tasks = Vec::new();
    for &port in ports {
        let v4 = listen((std::net::Ipv4Addr::UNSPECIFIED, port).into(), false)?;
        let mut listeners = vec![v4];
        match listen((std::net::Ipv6Addr::UNSPECIFIED, port).into(), false) {
            Ok(l) => listeners.push(l),
            Err(e) => eprintln!("testproxy echo: no IPv6 listener: {e}"),
        }
        for l in listeners {
            let answer = answer.clone();
            tasks.push(tokio::spawn(serve(l, move |_req, _peer| {
                let answer = answer.clone();
                async move { text(StatusCode::OK, answer) }
            })));
        }
    }
    eprintln!("testproxy echo: {name} on ports {ports:?}");
    crate::signals::terminated().await?;
    for t in &tasks {
        t.abort();
    }
    Ok(())
}
