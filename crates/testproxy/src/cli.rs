//! The command line: Istio's `proxy sidecar …` and pilot-agent's `wait` / `request`, accepted as the
//! injector writes them, plus the test application (`echo`) and its client (`get`).

use clap::{Parser, Subcommand, ValueEnum};

/// At most this many `--port`s for `echo` (each is two listeners).
pub const MAX_ECHO_PORTS: usize = 16;

/// testproxy: a stand-in for Envoy (`proxy sidecar`), a test application (`echo`) and its client (`get`).
#[derive(Debug, Parser)]
#[command(name = "testproxy", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The proxy, started with the injected istio-proxy container's arguments (`proxy sidecar --domain …`):
    /// relays what the interception rules capture on 15001 and 15006 to its original destination; admin
    /// (/stats) on 127.0.0.1:15000, status and app probes on 15020, /healthz/ready on 15021.
    Proxy(ProxyArgs),
    /// The test application: an HTTP server answering every request with the pod's name ($POD_NAME, else
    /// the host name).
    Echo(EchoArgs),
    /// The test client: GET the URL, print the response body, exit non-zero on any failure or a non-2xx
    /// status.
    Get(GetArgs),
    /// pilot-agent's `wait` (the injected postStart hook): poll the URL until it answers 200.
    Wait(WaitArgs),
    /// pilot-agent's `request` (the injected preStop hook `request POST drain`): one local HTTP request.
    Request(RequestArgs),
}

/// The proxy's role: Istio writes `sidecar` for injected pods (`router` is a gateway, not served here).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Sidecar,
}

#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// `sidecar`.
    pub role: Role,
    /// pilot-agent's other flags (`--domain`, `--proxyLogLevel`, `--concurrency`, …): accepted and ignored.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub istio_flags: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct EchoArgs {
    /// A port to serve on (IPv4 and, where the namespace has it, IPv6); repeat for more.
    #[arg(long = "port", required = true, value_parser = clap::value_parser!(u16).range(1..))]
    pub ports: Vec<u16>,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// `http://HOST[:PORT][/PATH]`; HOST is a name, an IPv4 address or a bracketed IPv6 address.
    pub url: String,
    /// The bound on the whole request: resolving, connecting, the answer and its body.
    #[arg(long = "timeout-seconds", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub timeout_seconds: u64,
}

/// pilot-agent's `wait` flags, spelled as pilot-agent spells them (`pilot/cmd/pilot-agent/app/wait.go`).
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    #[arg(long = "url", default_value = "http://localhost:15021/healthz/ready")]
    pub url: String,
    #[arg(long = "timeoutSeconds", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout_seconds: u64,
    #[arg(long = "requestTimeoutMillis", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub request_timeout_millis: u64,
    #[arg(long = "periodMillis", default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub period_millis: u64,
}

/// pilot-agent's `request` (`pilot/cmd/pilot-agent/app/request.go`): `request [--debug-port N] METHOD PATH [BODY]`.
#[derive(Debug, clap::Args)]
pub struct RequestArgs {
    /// The local port: 15000 (admin), 15020 (status), 15021 (readiness) or 15004, as pilot-agent allows.
    #[arg(long = "debug-port", default_value_t = 15000, value_parser = parse_debug_port)]
    pub debug_port: u16,
    pub method: String,
    pub path: String,
    pub body: Option<String>,
}

/// The ports pilot-agent's `request` accepts (its `allowedPorts`).
pub const ALLOWED_DEBUG_PORTS: [u16; 4] = [15000, 15004, 15020, 15021];

fn parse_debug_port(s: &str) -> Result<u16, String> {
    let port: u16 = s.parse().map_err(|_| format!("{s:?} is not a port"))?;
    if ALLOWED_DEBUG_PORTS.contains(&port) {
        Ok(port)
    } else {
        Err(format!(
            "debug port {port} is not in the allowed list {ALLOWED_DEBUG_PORTS:?}"
        ))
    }
}

impl EchoArgs {
    /// The ports, refused when there are more than [`MAX_ECHO_PORTS`]; duplicates are dropped.
    pub fn checked_ports(&self) -> Result<Vec<u16>, crate::Error> {
        let mut ports = self.ports.clone();
        ports.sort_unstable();
        ports.dedup();
        if ports.len() > MAX_ECHO_PORTS {
            return Err(crate::Error::Arg {
                flag: "--port",
                value: format!("{} ports", ports.len()),
                reason: "at most 16 ports",
            });
        }
        Ok(ports)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("testproxy").chain(args.iter().copied()))
    }

    #[test]
    fn istio_s_injected_proxy_arguments_parse() {
        // The args of the injected istio-proxy container (templates/, `injector kube-inject`), after the
        // kubelet expanded $(POD_NAMESPACE).
        let cli = parse(&[
            "proxy",
            "sidecar",
            "--domain",
            "demo.svc.cluster.local",
            "--proxyLogLevel=warning",
            "--proxyComponentLogLevel=misc:error",
            "--log_output_level=default:info",
        ])
        .unwrap();
        let Command::Proxy(p) = cli.command else {
            panic!("not proxy")
        };
        assert_eq!(p.role, Role::Sidecar);
        assert_eq!(p.istio_flags.len(), 5);
    }

    #[test]
    fn a_gateway_role_is_refused() {
        let err = parse(&["proxy", "router"]).unwrap_err().to_string();
        assert!(err.contains("router"), "{err}");
    }

    #[test]
    fn echo_takes_repeated_ports_and_refuses_zero_and_too_many() {
        let Command::Echo(e) = parse(&["echo", "--port", "8080", "--port=9090"])
            .unwrap()
            .command
        else {
            panic!("not echo")
        };
        assert_eq!(e.checked_ports().unwrap(), vec![8080, 9090]);
        assert!(parse(&["echo", "--port", "0"]).is_err());
        assert!(parse(&["echo"]).is_err());
        let many: Vec<String> = (1..=17).map(|p| format!("--port={p}")).collect();
        let mut args = vec!["echo"];
        args.extend(many.iter().map(String::as_str));
        let Command::Echo(e) = parse(&args).unwrap().command else {
            panic!("not echo")
        };
        let err = e.checked_ports().unwrap_err().to_string();
        assert!(err.contains("--port 17 ports"), "{err}");
    }

    #[test]
    fn pilot_agent_s_wait_and_request_flags_parse() {
        let Command::Wait(w) = parse(&["wait", "--timeoutSeconds=5", "--periodMillis", "100"])
            .unwrap()
            .command
        else {
            panic!("not wait")
        };
        assert_eq!(
            (
                w.url.as_str(),
                w.timeout_seconds,
                w.period_millis,
                w.request_timeout_millis
            ),
            ("http://localhost:15021/healthz/ready", 5, 100, 500)
        );
        let Command::Request(r) = parse(&["request", "--debug-port=15020", "POST", "drain"])
            .unwrap()
            .command
        else {
            panic!("not request")
        };
        assert_eq!(
            (r.debug_port, r.method.as_str(), r.path.as_str()),
            (15020, "POST", "drain")
        );
        let err = parse(&["request", "--debug-port=8080", "GET", "x"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("not in the allowed list"), "{err}");
    }

    #[test]
    fn get_bounds_its_timeout() {
        assert!(parse(&["get", "http://x/", "--timeout-seconds", "0"]).is_err());
        assert!(parse(&["get", "http://x/", "--timeout-seconds", "601"]).is_err());
    }
}
