//! `injector serve`'s command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::cluster::config_map_watch::ConfigMapArgs;
use crate::cluster::kube_client::KubeArgs;
use crate::shared::webhook_config::CaBundleArgs;
use inject::cluster_state::{PlatformArgs, ProxyConfigArgs};
use inject::config::ConfigArgs;

use super::limits::{DEFAULT_BODY_BUDGET, MAX_BODY_BYTES};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// `injector serve` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub config: ConfigArgs,
    #[command(flatten)]
    pub proxy_configs: ProxyConfigArgs,
    #[command(flatten)]
    pub platform: PlatformArgs,
    /// With either, ProxyConfigs (and Namespaces with `--platform openshift`, Nodes with
    /// `--native-sidecars auto`) are watched in the cluster instead of read from `--proxy-configs` /
    /// `--namespaces` (`/readyz` fails until the first full list).
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub ca: CaBundleArgs,
    #[command(flatten)]
    pub webhook_config_names: crate::cluster::ca_bundle_patch::WebhookConfigNamesArgs,
    #[command(flatten)]
    pub config_maps: ConfigMapArgs,
    #[command(flatten)]
    pub policy_params: crate::cluster::policy_params::PolicyParamsArgs,
    /// HTTPS address of the webhook (`127.0.0.1:0` picks a free port; see `--port-file`).
    #[arg(long, env = "INJECTOR_LISTEN", default_value = "0.0.0.0:15017", value_parser = listen_address)]
    pub listen: SocketAddr,
    /// PEM certificate chain served (reloaded when the file changes).
    #[arg(long, env = "INJECTOR_TLS_CERT")]
    pub tls_cert: PathBuf,
    /// PEM private key of the certificate (reloaded when the file changes).
    #[arg(long, env = "INJECTOR_TLS_KEY")]
    pub tls_key: PathBuf,
    /// Plain-HTTP address for `/metrics`, `/healthz` and `/readyz`.
    #[arg(
        long,
        env = "INJECTOR_METRICS_LISTEN",
        default_value = "0.0.0.0:15014",
        value_parser = listen_address
    )]
    pub metrics_listen: SocketAddr,
    /// Write the bound addresses here once listening (`https=ADDR` and `metrics=ADDR` lines; written
    /// atomically), for callers that asked for port 0.
    #[arg(long)]
    pub port_file: Option<PathBuf>,
    /// Log format (filter with `RUST_LOG`, default `info`).
    #[arg(long, value_enum, env = "INJECTOR_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
    /// How often the certificate and configuration files are checked for changes, in milliseconds.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(10..))]
    pub reload_interval_ms: u64,
    /// Most HTTPS connections open at once. At the cap, a new connection is accepted and the oldest idle
    /// one (in its TLS handshake or between requests) is closed; only when every connection has a request
    /// in flight do new ones wait in the kernel's accept queue.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,
    /// Seconds a client has to complete the TLS handshake.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_secs: u64,
    /// Seconds a client has to send a request's headers.
    #[arg(long, default_value_t = 10)]
    pub header_timeout_secs: u64,
    /// Seconds a client has to send a request's body.
    #[arg(long, default_value_t = 10)]
    pub body_timeout_secs: u64,
    /// On SIGTERM, keep serving (readiness failing) this long so endpoints are updated before the listener
    /// closes.
    #[arg(long, default_value_t = 0)]
    pub drain_delay_secs: u64,
    /// On SIGTERM, wait at most this long for requests in flight.
    #[arg(long, default_value_t = 20)]
    pub shutdown_timeout_secs: u64,
    /// Worker threads (default: one per CPU).
    #[arg(long)]
    pub worker_threads: Option<usize>,
    /// Injections running at once (default: twice the CPUs, at least 4). Reviews wait for a slot until
    /// their deadline.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_concurrent_injections: Option<u32>,
    /// Of those, injections of bodies of 256 KiB or more (at most a quarter of the slots, at least one):
    /// their working set is many times their body (a 5 MiB review's injection peaks near 100 MiB), so
    /// by default one at a time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_large_injections: u32,
    /// Milliseconds from a review's arrival until it is answered `allowed: false` if its injection has
    /// not finished (or not started); keep it below the webhook entry's `timeoutSeconds` (10 s by
    /// default), so that the API server gets this answer rather than its own timeout.
    #[arg(long, default_value_t = 8000, value_parser = clap::value_parser!(u64).range(1..))]
    pub review_deadline_ms: u64,
    /// Bytes of request bodies held at once across all connections; a request that would pass it is
    /// answered 503 with `Retry-After: 1`. Bodies of 256 KiB or more may use only three quarters of it.
    #[arg(long, default_value_t = DEFAULT_BODY_BUDGET, value_parser = clap::value_parser!(u64).range(MAX_BODY_BYTES as u64..))]
    pub max_body_bytes_in_flight: u64,
    /// No effect: injections always run off the I/O threads now (kept so that existing command lines
    /// still parse).
    #[arg(long, hide = true)]
    pub blocking_pool: bool,
}

/// A listen address, `IP:PORT`: std's parser says only "invalid socket address syntax", so a port out
/// of range or a missing port is named here.
pub(super) fn listen_address(s: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let expected = "expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017";
    // A bare IPv6 address (`::1`) has colons but no port.
    let split = s
        .rsplit_once(':')
        .filter(|_| s.parse::<std::net::Ipv6Addr>().is_err());
    match split {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !port.is_empty() => {
            let host_ok = host.parse::<std::net::Ipv4Addr>().is_ok()
                || host
                    .strip_prefix('[')
                    .and_then(|h| h.strip_suffix(']'))
                    .is_some_and(|h| h.parse::<std::net::Ipv6Addr>().is_ok());
            if host_ok {
                Err(format!("port {port} is out of range (0-65535)"))
            } else {
                Err(format!("{host:?} is not an IP address ({expected})"))
            }
        }
        _ => Err(format!("{expected}, with a port 0-65535")),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_listen_address_out_of_range_names_the_port_range() {
        assert_eq!(
            listen_address("127.0.0.1:15017"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 15017)))
        );
        assert_eq!(
            listen_address("[::1]:0"),
            Ok("[::1]:0".parse().expect("address"))
        );
        for (value, want) in [
            ("127.0.0.1:99999", "port 99999 is out of range (0-65535)"),
            ("[::]:65536", "port 65536 is out of range (0-65535)"),
            (
                "localhost:15017",
                "\"localhost\" is not an IP address (expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017)",
            ),
            (
                "::1",
                "expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017, with a port 0-65535",
            ),
            (
                "127.0.0.1",
                "expected IP:PORT, e.g. 0.0.0.0:15017 or [::]:15017, with a port 0-65535",
            ),
        ] {
            assert_eq!(listen_address(value), Err(want.to_string()), "{value}");
        }
    }
}
