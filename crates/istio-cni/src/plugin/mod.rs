//! The chained CNI plugin (`istio-cni`, run by the container runtime): Istio's `cni/pkg/plugin`, with the
//! rules applied in-process by iptables-init's code.
//!
//! `run` reads the invocation (`CNI_*` variables, the configuration on standard input), dispatches the
//! command and writes the result or the spec's error JSON. For `ADD`: the sandbox's Kubernetes arguments
//! (`k8s_args`), the pod read from the API server (`pod_fetch`, with the node agent's kubeconfig), the
//! decision (`pod_info`, `decision`), the settings (`redirect`), then the pod's namespace is entered
//! (`netns`) and `iptables_init::apply_in_process` applies the rules (nftables over netlink with
//! `native_nftables`, no host tool needed; iptables-restore otherwise). `prevResult` is passed on (`spec`).

pub mod conf;
pub mod decision;
pub mod k8s_args;
pub mod log;
pub mod netns;
pub mod pod_fetch;
pub mod pod_info;
pub mod redirect;
pub mod spec;

use std::io::{Read, Write};

use serde_json::Value;

use conf::PluginConf;
use decision::Verdict;
use spec::{code, CniError};

/// The process environment as the plugin reads it (a closure, so tests pass their own).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The istio-iptables settings read from the plugin's own environment, as Istio's
/// `FillConfigFromEnvironment` does in the plugin; the flags' other variables are not (Istio sets those
/// fields itself from the pod).
const APPLY_ENV: &[&str] = &[
    "ISTIO_OUTBOUND_OWNER_GROUPS",
    "ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE",
    "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR",
];

/// One invocation's variables.
struct Invocation {
    command: String,
    netns: String,
    args: String,
}

fn required(env: Env, names: &[&str]) -> Result<(), CniError> {
    let missing: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| env(n).is_none_or(|v| v.is_empty()))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(CniError::new(
        code::INVALID_ENVIRONMENT,
        format!("required env variables {missing:?} missing"),
    ))
}

fn read_conf(stdin: &mut dyn Read, version: &mut String) -> Result<PluginConf, CniError> {
    let mut bytes = Vec::new();
    stdin
        .take(conf::MAX_CONF_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("reading the network configuration: {e}"),
            )
        })?;
    if bytes.len() as u64 > conf::MAX_CONF_BYTES {
        return Err(CniError::new(
            code::INVALID_NETWORK_CONFIG,
            format!(
                "the network configuration is larger than {} bytes",
                conf::MAX_CONF_BYTES
            ),
        ));
    }
    // An error about the rest of the configuration is still answered in its version when that one is
    // readable and supported.
    if let Some(v) = conf::version_of(&bytes) {
        if spec::check_supported(&v).is_ok() {
            *version = v;
        }
    }
    conf::parse(&bytes)
}

/// Runs one invocation: the result (or nothing) on `stdout` and exit status 0, or the error JSON and 1.
pub fn run(env: Env, stdin: &mut dyn Read, stdout: &mut dyn Write) -> u8 {
    let mut version = spec::IMPLEMENTED.to_string();
    let outcome = dispatch(env, stdin, &mut version);
    let (out, status) = match outcome {
        Ok(None) => return 0,
        Ok(Some(v)) => (v, 0),
        Err(e) => {
            tracing::error!(code = e.code, details = %e.details, "istio-cni failed: {}", e.msg);
            (e.to_json(&version), 1)
        }
    };
    let text = match serde_json::to_string(&out) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("istio-cni: encoding the result: {e}");
            return 1;
        }
    };
    if let Err(e) = writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        eprintln!("istio-cni: writing the result: {e}");
        return 1;
    }
    status
}

fn dispatch(
    env: Env,
    stdin: &mut dyn Read,
    version: &mut String,
) -> Result<Option<Value>, CniError> {
    required(env, &["CNI_COMMAND"])?;
    let inv = Invocation {
        command: env("CNI_COMMAND").unwrap_or_default(),
        netns: env("CNI_NETNS").unwrap_or_default(),
        args: env("CNI_ARGS").unwrap_or_default(),
    };
    if inv.command == "VERSION" {
        // The runtime writes `{"cniVersion": ...}`; it is read (so the writer never meets a closed pipe)
        // but the answer does not depend on it.
        let mut ignored = Vec::new();
        let _ = stdin.take(conf::MAX_CONF_BYTES).read_to_end(&mut ignored);
        return Ok(Some(spec::version_info()));
    }
    match inv.command.as_str() {
        "ADD" | "CHECK" => required(
            env,
            &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"],
        )?,
        "DEL" => required(env, &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"])?,
        "STATUS" | "GC" => {}
        other => {
            return Err(CniError::new(
                code::INVALID_ENVIRONMENT,
                format!("unknown CNI_COMMAND: {other:?}"),
            ))
        }
    }
    let conf = read_conf(stdin, version)?;
    spec::check_supported(&conf.cni_version)?;
    *version = conf.cni_version.clone();
    log::install(&conf);
    match inv.command.as_str() {
        "ADD" => add(env, &inv, &conf).map(Some),
        // Istio's CmdDelete and CmdCheck do nothing: the rules live in the pod's namespace and go with it.
        "DEL" => Ok(None),
        "CHECK" => {
            if !spec::at_least(&conf.cni_version, (0, 4, 0)) {
                return Err(CniError::new(
                    code::INCOMPATIBLE_VERSION,
                    "config version does not allow CHECK",
                ));
            }
            Ok(None)
        }
        "STATUS" => status(&conf).map(|()| None),
        _ => {
            if !spec::at_least(&conf.cni_version, (1, 1, 0)) {
                return Err(CniError::new(
                    code::INCOMPATIBLE_VERSION,
                    "config version does not allow GC",
                ));
            }
            Ok(None)
        }
    }
}

/// `STATUS` (spec 1.1): ready when the node agent's kubeconfig is there and readable, since without it
/// every `ADD` of a pod outside the excluded namespaces fails. A runtime that asks keeps new pods off
/// the node until then, which closes the start-up race Istio's plugin leaves to the repair controller.
fn status(conf: &PluginConf) -> Result<(), CniError> {
    if !spec::at_least(&conf.cni_version, (1, 1, 0)) {
        return Err(CniError::new(
            code::INCOMPATIBLE_VERSION,
            "config version does not allow STATUS",
        ));
    }
    let path = conf.kubeconfig();
    kube::config::Kubeconfig::read_from(&path)
        .map(|_| ())
        .map_err(|e| {
            CniError::new(
                code::NOT_AVAILABLE,
                format!(
                    "the node agent's kubeconfig {} is not usable: {e}",
                    path.display()
                ),
            )
        })
}

fn add(env: Env, inv: &Invocation, conf: &PluginConf) -> Result<Value, CniError> {
    // The result is built first, so a malformed prevResult is refused before anything is programmed.
    let result = spec::pass_through(conf.prev_result.as_ref(), &conf.cni_version)?;
    // The names are checked as Kubernetes checks them, and the namespace is opened and checked, before
    // the API server is asked anything: a bad value is refused at once.
    let k8s = k8s_args::parse(&inv.args)?;
    let netns = netns::open(&inv.netns)?;
    let pod = format!("{}/{}", k8s.pod_namespace, k8s.pod_name);
    let agent_pod =
        || decision::is_agent_pod(&k8s.pod_name, &k8s.pod_namespace, &conf.entry.pod_namespace);
    if agent_pod() {
        tracing::info!(%pod, "looks like our own agent pod, skipping");
        return Ok(result);
    }
    if k8s.pod_namespace.is_empty() || k8s.pod_name.is_empty() {
        tracing::debug!("not a kubernetes pod");
        return Ok(result);
    }
    if conf.entry.exclude_namespaces.contains(&k8s.pod_namespace) {
        tracing::info!(%pod, "pod namespace {} excluded", k8s.pod_namespace);
        return Ok(result);
    }
    let retries = pod_fetch::Retries {
        attempts: conf.pod_fetch_attempts,
        interval: conf.pod_fetch_interval,
        budget: conf.pod_fetch_timeout,
    };
    let Some(found) = pod_fetch::fetch(
        &conf.kubeconfig(),
        &k8s.pod_namespace,
        &k8s.pod_name,
        retries,
        &agent_pod,
    )?
    else {
        return Ok(result);
    };
    let info = pod_info::PodInfo::from_pod(&found);
    if let Verdict::Skip(why) = decision::decide(&info) {
        tracing::info!(%pod, "{why}");
        return Ok(result);
    }
    let redirect = redirect::Redirect::from_pod(&info)?;
    let args = redirect
        .args(&inv.netns, conf.entry.native_nftables)
        .map_err(|e| {
            CniError::new(
                code::APPLY_FAILED,
                format!("the interception settings of {pod}: {e}"),
            )
        })?;
    tracing::debug!(%pod, ?args, "programming the pod's network namespace");
    let apply_env = |name: &str| {
        if APPLY_ENV.contains(&name) {
            env(name)
        } else {
            None
        }
    };
    // Each annotation was checked by iptables-init as it was read; the whole (the plugin's environment
    // too) is checked before the namespace is entered.
    iptables_init::check_in_process(&args, &apply_env).map_err(|e| {
        CniError::new(
            code::APPLY_FAILED,
            format!("the interception settings of {pod} are refused, nothing applied: {e}"),
        )
    })?;
    netns.enter()?;
    iptables_init::apply_in_process(&args, &apply_env).map_err(|e| {
        CniError::new(
            code::APPLY_FAILED,
            format!("programming the network namespace of {pod}: {e}"),
        )
    })?;
    tracing::info!(%pod, backend = if conf.entry.native_nftables { "nftables" } else { "iptables" }, "programmed");
    Ok(result)
}
