//! `injector doctor`: checks a deployed webhook the way Istio's sidecar-injection troubleshooting guide
//! does by hand — the MutatingWebhookConfigurations' `caBundle` against the serving certificate (from its
//! Secret and from a live handshake), the certificate's names and validity, the TLS version, a sample
//! AdmissionReview answered within `timeoutSeconds`, and the settings that lock a cluster out of its own
//! system namespaces when the webhook is down.
//!
//! Every finding carries a level, what was found, why it matters and a concrete fix. Every network call
//! is bounded by the entry's `timeoutSeconds` (as the API server bounds its own call), so doctor never hangs.

//!
//! The checks live by concern: `validation` (what the API server refuses in an entry), `certificates`
//! (the caBundle and the serving chain, with `chain`'s path building), `probe` (the live handshake and
//! sample review), `lockout` (a fail-closed webhook that can block its own recovery); `report` holds the
//! findings and their text, `url` the `https://` URLs doctor takes and reads; `cluster` reads the same
//! inputs from the API server (`--kubeconfig` / `--in-cluster`) and adds the `dryRun=All` pod create.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use crate::cluster::kube_client::KubeArgs;
use crate::cluster::kube_read::{self, SelectArgs};
use crate::shared::output::{self, Output};
use crate::shared::tls;
use crate::shared::webhook_entry::{self, Entry};

mod certificates;
mod chain;
mod cluster;
mod error;
mod lockout;
mod probe;
mod report;
mod url;
mod validation;

pub use certificates::parse_ca_bundle;
pub use error::DoctorError;
pub use lockout::check_lockout;
pub use probe::sample_review;
pub use report::{Finding, Level, Report};
pub use url::{parse_url, Url};
pub use validation::{check_client_config, check_failure_policy, check_timeout};

use certificates::{check_ca_bundle, check_chain, now_unix, parse_chain, tls_name, Target};
use probe::{call, check_live, Live};
use url::UrlArg;
use validation::path_problem;

/// `injector doctor` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The MutatingWebhookConfiguration(s) as the cluster holds them (`kubectl get
    /// mutatingwebhookconfiguration NAME -o yaml`): a YAML stream, or a List. Required unless
    /// --kubeconfig or --in-cluster reads them from the cluster.
    #[arg(
        long,
        required_unless_present_any = ["kubeconfig", "in_cluster"],
        conflicts_with_all = ["kubeconfig", "in_cluster"]
    )]
    pub webhook_config: Option<PathBuf>,
    /// The serving certificate (PEM chain, e.g. the Secret's `tls.crt`), checked offline.
    #[arg(long, conflicts_with = "tls_secret")]
    pub tls_cert: Option<PathBuf>,
    /// With --kubeconfig/--in-cluster: the serving Secret (`[NAMESPACE/]NAME`, the namespace defaulting
    /// to the entries' service namespace), whose `tls.crt` is checked as --tls-cert is; default:
    /// `sidecar-injector-tls` in the service namespace, when it exists.
    #[arg(long, value_name = "[NAMESPACE/]NAME", requires = "KubeArgs")]
    pub tls_secret: Option<String>,
    /// With --kubeconfig/--in-cluster: the namespace of the dry-run pod create; default: the first
    /// namespace (by name) whose pods the entries are called for.
    #[arg(long, value_name = "NAMESPACE", requires = "KubeArgs")]
    pub dry_run_namespace: Option<String>,
    #[command(flatten)]
    pub kube: KubeArgs,
    #[command(flatten)]
    pub select: SelectArgs,
    /// The webhook endpoint (`https://HOST[:PORT][/PATH]`, e.g. a port-forward); without a path, the
    /// configuration's service path is used. A value that is not such a URL (a control character or a
    /// space included) is a usage error.
    #[arg(long, value_parser = UrlArg)]
    pub url: Option<Url>,
    /// The TLS name checked (default: `<service>.<namespace>.svc` of the configuration's clientConfig).
    #[arg(long)]
    pub server_name: Option<String>,
    /// Output format: text, or one JSON object for tools.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

/// The entries that share a caBundle, TLS name, path and timeout are checked together.
fn groups<'a>(hooks: &'a [Entry], server_name: Option<&str>) -> Vec<Vec<&'a Entry>> {
    let mut out: Vec<(String, Vec<&Entry>)> = Vec::new();
    for h in hooks {
        let key = format!(
            "{}|{:?}|{:?}|{}",
            h.ca_bundle().unwrap_or(&Value::Null),
            server_name.map(str::to_string).or_else(|| tls_name(h)),
            h.service_path(),
            h.timeout_seconds()
        );
        match out.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(h),
            None => out.push((key, vec![h])),
        }
    }
    out.into_iter().map(|(_, g)| g).collect()
}

/// Runs every check on `hooks`; `tls_cert` is the serving chain from its Secret.
pub fn diagnose(
    hooks: &[Entry],
    tls_cert: Option<(&Path, &[CertificateDer<'static>])>,
    url: Option<&Url>,
    server_name: Option<&str>,
) -> Result<Report, DoctorError> {
    let source = tls_cert.map(|(p, _)| format!("from --tls-cert {}", p.display()));
    let findings = check_all(
        hooks,
        source.as_deref().zip(tls_cert.map(|(_, c)| c)),
        &|_| url.cloned(),
        server_name,
    )?;
    Ok(Report::new(hooks, findings))
}

/// Every check on `hooks`: `tls_cert` is the serving chain with where it came from (`from …`), `url` the
/// endpoint an entry's live checks call (none: no live check), whether given by `--url` or read from
/// the cluster.
fn check_all(
    hooks: &[Entry],
    tls_cert: Option<(&str, &[CertificateDer<'static>])>,
    url: &dyn Fn(&Entry) -> Option<Url>,
    server_name: Option<&str>,
) -> Result<Vec<Finding>, DoctorError> {
    let provider = tls::crypto_provider();
    let mut findings = Vec::new();
    for h in hooks {
        findings.extend(check_client_config(h));
    }
    let runtime = if hooks.iter().any(|h| url(h).is_some()) {
        Some(
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(DoctorError::Runtime)?,
        )
    } else {
        None
    };
    for (gi, group) in groups(hooks, server_name).into_iter().enumerate() {
        let h = group[0];
        let name = server_name.map(str::to_string).or_else(|| tls_name(h));
        let (roots, ca_bundle) = check_ca_bundle(&group);
        findings.push(ca_bundle);
        let target = Target {
            roots: roots.as_deref(),
            name: name.as_deref(),
            hooks: &group,
            provider: &provider,
        };
        if let Some((source, chain)) = tls_cert {
            findings.extend(check_chain(source, chain, &target));
        }
        let url = url(h);
        let url = url.as_ref();
        // A service path the API server would refuse (reported by check_client_config) is never sent.
        let path_refused = url.is_some_and(|u| u.path.is_none())
            && h.service_path().is_some_and(|p| path_problem(p).is_some());
        if let (Some(url), Some(rt), false) = (url, runtime.as_ref(), path_refused) {
            let path = url
                .path
                .clone()
                .or_else(|| h.service_path().map(str::to_string))
                .unwrap_or_else(|| "/".to_string());
            let tls_name = name.clone().unwrap_or_else(|| url.host.clone());
            let uid = format!("injector-doctor-{}-{}-{gi}", std::process::id(), now_unix());
            let body = sample_review(&uid).to_string();
            let timeout = Duration::from_secs(h.timeout_seconds().clamp(1, 30) as u64);
            let live = rt.block_on(async {
                match tokio::time::timeout(
                    timeout,
                    call(url, &tls_name, &path, body.as_bytes(), provider.clone()),
                )
                .await
                {
                    Ok(live) => live,
                    Err(_) => Live {
                        failure: Some(format!(
                            "no answer within timeoutSeconds ({} s)",
                            timeout.as_secs()
                        )),
                        ..Live::default()
                    },
                }
            });
            findings.extend(check_live(
                &live,
                url,
                &path,
                &uid,
                tls_cert.map(|(_, c)| c),
                &target,
            ));
        }
    }
    if let Some(rt) = runtime {
        // A name lookup still running on the blocking pool after a timeout must not delay the exit.
        rt.shutdown_background();
    }
    for h in hooks {
        findings.extend(check_failure_policy(h));
        findings.push(check_lockout(h));
        findings.push(check_timeout(h));
    }
    Ok(findings)
}

fn read(flag: &'static str, path: &Path) -> Result<String, DoctorError> {
    inject::input::read_text(path).map_err(|source| DoctorError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the serving chain of `--tls-cert`.
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, DoctorError> {
    let pem = read("--tls-cert", path)?;
    parse_chain(pem.as_bytes()).map_err(|detail| DoctorError::Cert {
        path: path.to_path_buf(),
        detail,
    })
}

/// Runs `injector doctor`: prints the report; `Ok(false)` when it holds an error.
pub fn run(args: Args) -> Result<bool, DoctorError> {
    if let Some(n) = &args.server_name {
        if ServerName::try_from(n.clone()).is_err() {
            return Err(DoctorError::ServerName { value: n.clone() });
        }
    }
    let report = match &args.webhook_config {
        Some(path) => {
            let hooks = webhook_entry::load(path)?;
            let chain = args.tls_cert.as_deref().map(read_chain).transpose()?;
            diagnose(
                &hooks,
                args.tls_cert.as_deref().zip(chain.as_deref()),
                args.url.as_ref(),
                args.server_name.as_deref(),
            )?
        }
        None => from_cluster(&args)?,
    };
    match args.output {
        Output::Text => print!("{}", report.text()),
        Output::Json => output::print_json(&report),
    }
    Ok(report.errors == 0)
}

/// `doctor --kubeconfig` / `--in-cluster`: the inputs read from the cluster, today's checks on them, then
/// the dry-run pod create.
fn from_cluster(args: &Args) -> Result<Report, DoctorError> {
    let (rt, client) = kube_read::connect(&args.kube)?;
    let inputs = rt.block_on(cluster::read(
        &client,
        &args.kube,
        &args.select,
        args.tls_secret.as_deref(),
    ))?;
    let file_chain = args.tls_cert.as_deref().map(read_chain).transpose()?;
    let file_source = args
        .tls_cert
        .as_deref()
        .map(|p| format!("from --tls-cert {}", p.display()));
    let chain = match (&file_source, &file_chain, &inputs.chain) {
        (Some(s), Some(c), _) => Some((s.as_str(), c.as_slice())),
        (_, _, Some((s, c))) => Some((s.as_str(), c.as_slice())),
        _ => None,
    };
    // `--url` (a port-forward) wins over the endpoints read, as the file path's `--url` does.
    let url = |h: &Entry| match &args.url {
        Some(u) => Some(u.clone()),
        None => inputs.urls.get(&h.label()).cloned(),
    };
    let mut findings = inputs.findings.clone();
    findings.extend(check_all(
        &inputs.hooks,
        chain,
        &url,
        args.server_name.as_deref(),
    )?);
    findings.push(rt.block_on(cluster::dry_run(
        &client,
        &inputs.hooks,
        args.dry_run_namespace.as_deref(),
    )));
    Ok(Report::new(&inputs.hooks, findings))
}

#[cfg(test)]
mod tests;
