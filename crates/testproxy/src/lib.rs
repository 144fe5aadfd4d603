//! `testproxy`: a stand-in for Envoy and pilot-agent in the end-to-end tests, where Envoy cannot be had.
//!
//! One static binary with five roles, chosen by its first argument:
//! - `proxy sidecar …` (the injected `istio-proxy` container's arguments, unchanged): the proxy. It
//!   accepts the connections iptables-init's rules capture on 15001 (outbound) and 15006 (inbound),
//!   finds each one's original destination (`SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST`) and relays it
//!   there, counting both directions; `/stats` on the admin port (15000) reports the counts. It also
//!   serves what the kubelet asks of pilot-agent and Envoy in an injected pod: `/healthz/ready` on 15021
//!   and 15020, and the rewritten application probes (`/app-health/…` on 15020, from
//!   `ISTIO_KUBE_APP_PROBERS`).
//! - `wait` and `request` (pilot-agent's, for the injected `lifecycle` hooks `pilot-agent wait` and
//!   `pilot-agent request POST drain`; the image installs the binary under that name too).
//! - `echo --port P …`: the test application, answering every request with its pod's name.
//! - `get URL`: the client, printing the response body.
//!
//! Everything is bounded: connections (a semaphore per listener kind), buffers, timeouts, response sizes
//! and the list of recent destinations.

pub mod admin;
pub mod app_probers;
pub mod cli;
pub mod client;
pub mod echo;
pub mod error;
pub mod http;
pub mod original_dst;
pub mod proxy;
pub mod relay;
pub mod signals;
pub mod stats;

pub use error::Error;

use std::io::Write as _;

/// Runs one command line to its end (the `proxy` and `echo` roles until SIGTERM).
pub async fn run(command: cli::Command) -> Result<(), Error> {
    let print = |body: &[u8]| {
        let mut out = std::io::stdout().lock();
        out.write_all(body)
            .and_then(|()| out.flush())
            .map_err(|source| Error::Io {
                what: "writing the response body to stdout",
                source,
            })
    };
    match command {
        cli::Command::Proxy(_) => proxy::run(proxy::Config::from_env()?).await,
        cli::Command::Echo(args) => echo::run(&args.checked_ports()?).await,
        cli::Command::Get(args) => print(&client::get(&args).await?),
        cli::Command::Wait(args) => client::wait(&args).await,
        cli::Command::Request(args) => print(&client::request(&args).await?),
    }
}
