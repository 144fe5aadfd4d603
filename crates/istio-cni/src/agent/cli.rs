//! `istio-cni install`'s flags, each also read from the variable Istio's install-cni reads
//! (`cni/pkg/cmd/root.go`, `cni/pkg/constants`), and their resolution into [`Settings`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};

use super::cni_config::PluginEntry;
use super::kubeconfig;
use crate::repair::RepairArgs;

/// Istio's default readiness port (`constants.ReadinessPort`).
const DEFAULT_LISTEN: &str = "0.0.0.0:8000";

/// The node agent: installs the plugin on the node and keeps it installed.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "istio-cni install",
    about = "Install the istio-cni plugin on this node, keep it installed, and repair pods started before it"
)]
pub struct InstallArgs {
    /// Where the container runtime looks for CNI plugins (the host's /opt/cni/bin mounted).
    #[arg(long, value_name = "DIR", default_value = "/host/opt/cni/bin")]
    pub cni_bin_dir: PathBuf,
    /// The host's CNI configuration folder, mounted (Istio's MOUNTED_CNI_NET_DIR).
    #[arg(
        long = "mounted-cni-net-dir",
        alias = "cni-conf-dir",
        env = "MOUNTED_CNI_NET_DIR",
        value_name = "DIR",
        default_value = "/host/etc/cni/net.d"
    )]
    pub cni_conf_dir: PathBuf,
    /// The configuration file to chain into (default: the first valid one, by name) or, not chained,
    /// the file to write (default YYY-istio-cni.conf).
    #[arg(long, env = "CNI_CONF_NAME", value_name = "NAME")]
    pub cni_conf_name: Option<String>,
    /// Append the plugin to the node's configuration list (true) or write a configuration of its own.
    #[arg(long, env = "CHAINED_CNI_PLUGIN", value_name = "BOOL", default_value_t = true,
          action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub chained_cni_plugin: bool,
    /// The agent's folder on the node: the plugin's kubeconfig and log.
    #[arg(
        long = "cni-agent-run-dir",
        env = "CNI_AGENT_RUN_DIR",
        value_name = "DIR",
        default_value = crate::plugin::conf::DEFAULT_RUN_DIR
    )]
    pub run_dir: PathBuf,
    /// Namespaces whose pods the plugin leaves alone, comma-separated.
    #[arg(
        long,
        env = "EXCLUDE_NAMESPACES",
        value_name = "LIST",
        default_value = ""
    )]
    pub exclude_namespaces: String,
    /// The agent's own namespace (its pods pass the plugin without an API call).
    #[arg(long, env = "POD_NAMESPACE", value_name = "NAME", default_value = "")]
    pub pod_namespace: String,
    /// This node's name: the Node untainted and whose pods are repaired (default: the host name).
    #[arg(long, env = "NODE_NAME", value_name = "NAME")]
    pub node_name: Option<String>,
    /// The plugin programs nftables over netlink instead of iptables.
    #[arg(long, env = "NATIVE_NFTABLES", value_name = "BOOL", default_value_t = false,
          action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub native_nftables: bool,
    /// The plugin's log level: debug, info, warn, error or none.
    #[arg(
        long,
        env = "PLUGIN_LOG_LEVEL",
        value_name = "LEVEL",
        default_value = "info"
    )]
    pub plugin_log_level: String,
    /// Where `/readyz`, `/healthz` and `/metrics` are served.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// Write `http=<address>` here once listening (for a test that listens on port 0).
    #[arg(long, value_name = "FILE")]
    pub port_file: Option<PathBuf>,
    /// The service account whose `token` and `ca.crt` go into the plugin's kubeconfig.
    #[arg(
        long,
        value_name = "DIR",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount"
    )]
    pub service_account_dir: PathBuf,
    /// The CA in the plugin's kubeconfig (default: the service account's ca.crt).
    #[arg(long, env = "KUBE_CA_FILE", value_name = "FILE")]
    pub kube_ca_file: Option<PathBuf>,
    /// Write `insecure-skip-tls-verify` into the plugin's kubeconfig instead of a CA.
    #[arg(long, env = "SKIP_TLS_VERIFY", value_name = "BOOL", default_value_t = false,
          action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub skip_tls_verify: bool,
    /// The API server in the plugin's kubeconfig (default: KUBERNETES_SERVICE_PROTOCOL (https),
    /// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, as Istio).
    #[arg(long, value_name = "URL")]
    pub kube_server: Option<String>,
    /// The agent's own client (untaint, repair); default: in-cluster, the pod's service account.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The plugin binary to install (default: this executable).
    #[arg(long, value_name = "FILE", default_value = "/proc/self/exe")]
    pub plugin_binary: PathBuf,
    /// The fallback poll of the installed files and the plugin's log, in milliseconds: changes are
    /// seen at once through inotify; the poll covers what inotify cannot see.
    #[arg(long, value_name = "MS", default_value_t = 5000,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub watch_interval_ms: u64,
    /// Race repair.
    #[command(flatten)]
    pub repair: RepairArgs,
}

/// A flag whose value cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// clap's own message (unknown flag, a value of the wrong type, --help).
    #[error("{0}")]
    Parse(#[from] clap::Error),
    /// `--plugin-log-level` is not a level the plugin knows.
    #[error(
        "--plugin-log-level (PLUGIN_LOG_LEVEL) is {0:?}, expected debug, info, warn, error or none"
    )]
    LogLevel(String),
    /// `--kube-server` is not an http(s) URL.
    #[error("--kube-server is {0:?}, expected https://host:port")]
    Server(String),
    /// Neither `--kube-server` nor the in-cluster variables say where the API server is.
    #[error("--kube-server is not set and KUBERNETES_SERVICE_{0} is not set either: is this not running in a pod?")]
    NoServer(&'static str),
    /// An excluded namespace is empty or not a DNS label.
    #[error(
        "--exclude-namespaces (EXCLUDE_NAMESPACES) holds {0:?}, which is not a namespace name"
    )]
    Namespace(String),
    /// `--cni-agent-run-dir` is relative: it is written into the CNI configuration, and the runtime runs
    /// the plugin from another working directory.
    #[error("--cni-agent-run-dir (CNI_AGENT_RUN_DIR) is {0:?}, expected an absolute path (the plugin reads it from the CNI configuration, in the runtime's working directory)")]
    RelativeRunDir(std::path::PathBuf),
    /// `--node-name` is unset and the host name cannot be read.
    #[error("--node-name (NODE_NAME) is not set and the host name cannot be read: {0}")]
    NodeName(#[source] std::io::Error),
}

/// The resolved settings of a run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The flags as given.
    pub args: InstallArgs,
    /// Our entry in the node's configuration.
    pub entry: PluginEntry,
    /// What the plugin's kubeconfig is made of.
    pub kubeconfig: kubeconfig::Source,
    /// The node's name.
    pub node_name: String,
    /// The fallback poll's interval.
    pub interval: Duration,
}

/// Istio's `SplitExcludeNamespaces`: comma-separated, spaces trimmed, empty parts dropped.
fn namespaces(list: &str) -> Result<Vec<String>, CliError> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let label = s.len() <= 63
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !s.starts_with('-')
                && !s.ends_with('-');
            if label {
                Ok(s.to_string())
            } else {
                Err(CliError::Namespace(s.to_string()))
            }
        })
        .collect()
}

/// Istio's `createKubeConfig` address: `<protocol>://<host>:<port>`, an IPv6 host in brackets.
fn server(args: &InstallArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<String, CliError> {
    if let Some(url) = &args.kube_server {
        let ok = ["https://", "http://"]
            .iter()
            .any(|p| url.strip_prefix(p).is_some_and(|rest| !rest.is_empty()));
        return if ok {
            Ok(url.trim_end_matches('/').to_string())
        } else {
            Err(CliError::Server(url.clone()))
        };
    }
    let get = |k: &'static str| {
        env(&format!("KUBERNETES_SERVICE_{k}"))
            .filter(|v| !v.is_empty())
            .ok_or(CliError::NoServer(k))
    };
    let host = get("HOST")?;
    let port = get("PORT")?;
    let protocol = env("KUBERNETES_SERVICE_PROTOCOL")
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "https".into());
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    Ok(format!("{protocol}://{host}:{port}"))
}

/// Parses `istio-cni install <args>` (`argv` without the program and `install`) and resolves it.
pub fn parse(argv: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Settings, CliError> {
    let args = InstallArgs::try_parse_from(
        std::iter::once("istio-cni install".to_string()).chain(argv.iter().cloned()),
    )?;
    let level = args.plugin_log_level.as_str();
    if !["debug", "info", "warn", "error", "none"].contains(&level) {
        return Err(CliError::LogLevel(args.plugin_log_level.clone()));
    }
    if !args.run_dir.is_absolute() {
        return Err(CliError::RelativeRunDir(args.run_dir.clone()));
    }
    let node_name = match &args.node_name {
        Some(n) if !n.is_empty() => n.clone(),
        _ => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map_err(CliError::NodeName)?
            .trim()
            .to_string(),
    };
    Ok(Settings {
        entry: PluginEntry {
            run_dir: args.run_dir.clone(),
            log_level: args.plugin_log_level.clone(),
            exclude_namespaces: namespaces(&args.exclude_namespaces)?,
            pod_namespace: args.pod_namespace.clone(),
            native_nftables: args.native_nftables,
        },
        kubeconfig: kubeconfig::Source {
            server: server(&args, env)?,
            service_account_dir: args.service_account_dir.clone(),
            ca_file: args.kube_ca_file.clone(),
            skip_tls_verify: args.skip_tls_verify,
        },
        node_name,
        interval: Duration::from_millis(args.watch_interval_ms),
        args,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn in_pod(k: &str) -> Option<String> {
        match k {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".into()),
            "KUBERNETES_SERVICE_PORT" => Some("443".into()),
            _ => None,
        }
    }

    #[test]
    fn defaults_are_istio_s() {
        let s = parse(&argv(&["--node-name", "n1"]), &in_pod).unwrap();
        assert_eq!(s.args.cni_bin_dir, PathBuf::from("/host/opt/cni/bin"));
        assert_eq!(s.args.cni_conf_dir, PathBuf::from("/host/etc/cni/net.d"));
        assert_eq!(s.args.run_dir, PathBuf::from("/var/run/istio-cni"));
        assert_eq!(s.args.listen, "0.0.0.0:8000".parse().unwrap());
        assert!(s.args.chained_cni_plugin);
        assert_eq!(s.kubeconfig.server, "https://[fd00::1]:443");
        assert_eq!(s.interval, Duration::from_secs(5));
        assert!(s.args.repair.repair_enabled);
        assert_eq!(s.args.repair.repair_init_container_exit_code, 126);
        let s = parse(
            &argv(&[
                "--node-name=n1",
                "--kube-server=https://127.0.0.1:6443/",
                "--exclude-namespaces= kube-system, istio-system ,",
                "--chained-cni-plugin=false",
                "--native-nftables",
            ]),
            &no_env,
        )
        .unwrap();
        assert_eq!(s.kubeconfig.server, "https://127.0.0.1:6443");
        assert_eq!(s.entry.exclude_namespaces, ["kube-system", "istio-system"]);
        assert!(!s.args.chained_cni_plugin);
        assert!(s.entry.native_nftables);
    }

    #[test]
    fn bad_values_are_named() {
        let e = |a: &[&str]| parse(&argv(a), &in_pod).unwrap_err().to_string();
        assert_eq!(
            e(&["--node-name=n", "--plugin-log-level=loud"]),
            "--plugin-log-level (PLUGIN_LOG_LEVEL) is \"loud\", expected debug, info, warn, error or none"
        );
        assert_eq!(
            e(&["--node-name=n", "--kube-server=127.0.0.1:6443"]),
            "--kube-server is \"127.0.0.1:6443\", expected https://host:port"
        );
        assert!(e(&["--node-name=n", "--exclude-namespaces=a,B_c"]).contains("\"B_c\""));
        assert!(e(&["--listen=nowhere"]).contains("--listen"));
        assert!(e(&["--chained-cni-plugin=maybe"]).contains("maybe"));
        assert!(e(&["--watch-interval-ms=0"]).contains("--watch-interval-ms"));
        assert!(e(&["--repair-init-container-exit-code=x"]).contains("x"));
        assert!(e(&["--node-name=n", "--cni-agent-run-dir=run"])
            .contains("\"run\", expected an absolute path"));
        let e = parse(&argv(&["--node-name=n"]), &no_env)
            .unwrap_err()
            .to_string();
        assert!(e.contains("KUBERNETES_SERVICE_HOST is not set"), "{e}");
    }
}
