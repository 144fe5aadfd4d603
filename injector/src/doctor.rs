//! `injector doctor`: checks a deployed webhook the way Istio's sidecar-injection troubleshooting guide
//! does by hand — the MutatingWebhookConfigurations' `caBundle` against the serving certificate (from its
//! Secret and from a live handshake), the certificate's names and validity, the TLS version, a sample
//! AdmissionReview answered within `timeoutSeconds`, and the settings that lock a cluster out of its own
//! system namespaces when the webhook is down.
//!
//! Every finding carries a level, what was found, why it matters and a concrete fix. Every network call
//! is bounded by the entry's `timeoutSeconds` (as the API server bounds its own call), so doctor never hangs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::decision::LabelSelector;
use crate::{tls, yaml};

/// A certificate expiring sooner than this is a warning.
const EXPIRY_WARNING_DAYS: i64 = 30;
/// The API server's default `timeoutSeconds` for an admission webhook.
const DEFAULT_TIMEOUT_SECONDS: i64 = 10;
/// The label every namespace carries with its own name (set by the API server).
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
/// Namespaces a fail-closed webhook must never select.
const SYSTEM_NAMESPACE: &str = "kube-system";
/// Most bytes of a webhook answer read (Istio's `MaxRequestBodyBytes` is the request's bound).
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// `injector doctor` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The MutatingWebhookConfiguration(s) as the cluster holds them (`kubectl get
    /// mutatingwebhookconfiguration NAME -o yaml`): a YAML stream, or a List.
    #[arg(long)]
    pub webhook_config: PathBuf,
    /// The serving certificate (PEM chain, e.g. the Secret's `tls.crt`), checked offline.
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// The webhook endpoint (`https://HOST[:PORT][/PATH]`, e.g. a port-forward); without a path, the
    /// configuration's service path is used.
    #[arg(long)]
    pub url: Option<String>,
    /// The TLS name checked (default: `<service>.<namespace>.svc` of the configuration's clientConfig).
    #[arg(long)]
    pub server_name: Option<String>,
    /// Output format: text, or one JSON object for tools.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    pub output: Output,
}

/// The input could not be read; findings about the webhook are never errors of this type.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// A file could not be read.
    #[error("{flag} {}: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A document of `--webhook-config` is not YAML.
    #[error("--webhook-config {}: document {doc}: {source}", path.display())]
    Yaml {
        path: PathBuf,
        doc: usize,
        source: yaml::YamlError,
    },
    /// A document of `--webhook-config` is not a MutatingWebhookConfiguration.
    #[error("--webhook-config {}: document {doc} has kind {kind:?}, not MutatingWebhookConfiguration or List", path.display())]
    Kind {
        path: PathBuf,
        doc: usize,
        kind: String,
    },
    /// `--webhook-config` holds no webhook entry at all.
    #[error("--webhook-config {}: no MutatingWebhookConfiguration with webhooks", path.display())]
    Empty { path: PathBuf },
    /// `--tls-cert` holds no PEM certificate, or a broken one.
    #[error("--tls-cert {}: {detail}", path.display())]
    Cert { path: PathBuf, detail: String },
    /// `--url` is not an `https://` URL.
    #[error("--url {value:?}: {reason}")]
    Url { value: String, reason: &'static str },
    /// `--server-name` is neither a DNS name nor an IP address.
    #[error("--server-name {value:?}: not a DNS name or IP address")]
    ServerName { value: String },
    /// The async runtime for the live checks could not start.
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warning,
    Ok,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Ok => "ok",
        }
    }
}

/// One result of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub level: Level,
    /// The check: `ca-bundle`, `certificate-authority`, `certificate-name`, `certificate-expiry`,
    /// `served-certificate`, `tls-version`, `endpoint`, `review`, `lock-out`, `timeout`.
    pub check: &'static str,
    /// The webhook entries concerned, as `<configuration>/<entry>`.
    pub entries: Vec<String>,
    pub found: String,
    pub why: String,
    /// A concrete command (none for `ok`).
    pub fix: Option<String>,
}

/// Everything doctor found, in check order.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// How many entries each configuration has (the text form names a whole configuration once).
    #[serde(skip)]
    pub sizes: BTreeMap<String, usize>,
    pub errors: usize,
    pub warnings: usize,
    pub findings: Vec<Finding>,
}

impl Report {
    fn new(hooks: &[Hook], findings: Vec<Finding>) -> Report {
        let findings = merge(findings);
        let mut sizes = BTreeMap::new();
        for h in hooks {
            *sizes.entry(h.config.clone()).or_insert(0) += 1;
        }
        Report {
            sizes,
            errors: findings.iter().filter(|f| f.level == Level::Error).count(),
            warnings: findings
                .iter()
                .filter(|f| f.level == Level::Warning)
                .count(),
            findings,
        }
    }

    /// `entries` with every configuration whose entries are all listed named once.
    fn entries_text(&self, entries: &[String]) -> String {
        let mut out: Vec<String> = Vec::new();
        for (config, size) in &self.sizes {
            let mine: Vec<&String> = entries
                .iter()
                .filter(|e| e.split_once('/').is_some_and(|(c, _)| c == config))
                .collect();
            if mine.len() == *size && *size > 1 {
                out.push(format!("{config} (all {size} entries)"));
            } else {
                out.extend(mine.into_iter().cloned());
            }
        }
        out.join(", ")
    }

    /// The human-readable form.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            out.push_str(&format!(
                "{:<7} {}: {}\n",
                f.level.as_str().to_uppercase(),
                f.check,
                self.entries_text(&f.entries)
            ));
            out.push_str(&format!("  found: {}\n", f.found));
            if f.level != Level::Ok {
                out.push_str(&format!("  why:   {}\n", f.why));
            }
            if let Some(fix) = &f.fix {
                out.push_str(&format!("  fix:   {fix}\n"));
            }
        }
        let ok = self.findings.len() - self.errors - self.warnings;
        out.push_str(&format!(
            "{} error(s), {} warning(s), {ok} ok\n",
            self.errors, self.warnings
        ));
        out
    }
}

/// Findings that differ only in their entries become one.
fn merge(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for f in findings {
        let same = out.iter_mut().find(|o| {
            o.level == f.level
                && o.check == f.check
                && o.found == f.found
                && o.why == f.why
                && o.fix == f.fix
        });
        match same {
            Some(o) => {
                for e in f.entries {
                    if !o.entries.contains(&e) {
                        o.entries.push(e);
                    }
                }
            }
            None => out.push(f),
        }
    }
    out
}

/// One webhook entry of a configuration.
#[derive(Debug, Clone)]
pub struct Hook {
    /// The configuration's name.
    pub config: String,
    /// The entry's index in `webhooks`.
    pub index: usize,
    pub name: String,
    pub value: Value,
}

impl Hook {
    fn label(&self) -> String {
        format!("{}/{}", self.config, self.name)
    }

    fn client(&self) -> Option<&Map<String, Value>> {
        self.value.get("clientConfig").and_then(Value::as_object)
    }

    /// `(name, namespace, path)` of the clientConfig's service reference.
    fn service(&self) -> Option<(&str, &str, Option<&str>)> {
        let s = self.client()?.get("service")?;
        Some((
            s.get("name")?.as_str()?,
            s.get("namespace")?.as_str()?,
            s.get("path").and_then(Value::as_str),
        ))
    }

    /// The TLS name the API server checks: `<service>.<namespace>.svc`, or the host of clientConfig.url.
    fn tls_name(&self) -> Option<String> {
        if let Some((name, ns, _)) = self.service() {
            return Some(format!("{name}.{ns}.svc"));
        }
        let url = self.client()?.get("url")?.as_str()?;
        parse_url(url).ok().map(|u| u.host)
    }

    fn path(&self) -> Option<&str> {
        if let Some((_, _, path)) = self.service() {
            return path;
        }
        None
    }

    fn timeout_seconds(&self) -> i64 {
        self.value
            .get("timeoutSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
    }

    fn ca_bundle(&self) -> Option<&Value> {
        self.client()?.get("caBundle")
    }

    /// A command that re-issues the serving certificate for the service with the CA in `DIR`.
    fn reissue_fix(&self) -> String {
        match self.service() {
            Some((name, ns, _)) => format!(
                "injector certs --out-dir DIR --service {name} --namespace {ns} \
                 && kubectl -n {ns} apply -f DIR/secret.yaml  # reuses the CA in DIR (ca.crt, ca.key)"
            ),
            None => format!(
                "injector certs --out-dir DIR --san {}  # a certificate for the clientConfig.url host",
                self.tls_name().unwrap_or_else(|| "HOST".to_string())
            ),
        }
    }
}

/// Reads the webhook entries of every configuration in `text` (a YAML stream or a List).
pub fn read_hooks(path: &Path, text: &str) -> Result<Vec<Hook>, DoctorError> {
    let mut configs = Vec::new();
    for (i, doc) in yaml::split_documents(text).into_iter().enumerate() {
        if yaml::is_blank_document(doc) {
            continue;
        }
        let v = yaml::parse(doc).map_err(|source| DoctorError::Yaml {
            path: path.to_path_buf(),
            doc: i + 1,
            source,
        })?;
        if v.is_null() {
            continue;
        }
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "MutatingWebhookConfiguration" => configs.push(v),
            k if k.ends_with("List") => {
                for item in v
                    .get("items")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let k = item.get("kind").and_then(Value::as_str).unwrap_or_default();
                    if k != "MutatingWebhookConfiguration" {
                        return Err(DoctorError::Kind {
                            path: path.to_path_buf(),
                            doc: i + 1,
                            kind: k.to_string(),
                        });
                    }
                    configs.push(item.clone());
                }
            }
            other => {
                return Err(DoctorError::Kind {
                    path: path.to_path_buf(),
                    doc: i + 1,
                    kind: other.to_string(),
                })
            }
        }
    }
    let hooks = hooks_of(&configs);
    if hooks.is_empty() {
        return Err(DoctorError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(hooks)
}

/// The webhook entries of `configs` (MutatingWebhookConfigurations as JSON), in order.
pub fn hooks_of(configs: &[Value]) -> Vec<Hook> {
    let mut hooks = Vec::new();
    for c in configs {
        let config = c
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>")
            .to_string();
        for (index, w) in c
            .get("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            hooks.push(Hook {
                config: config.clone(),
                index,
                name: w
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("<unnamed>")
                    .to_string(),
                value: w.clone(),
            });
        }
    }
    hooks
}

/// A JSON-patch command on one configuration.
fn patch_fix(config: &str, ops: &[Value]) -> String {
    format!(
        "kubectl patch mutatingwebhookconfiguration {config} --type=json -p '{}'",
        Value::Array(ops.to_vec())
    )
}

/// The caBundle fix for `hooks`: every entry of each configuration set to the CA that signed the
/// serving certificate (`ca.crt` as written by `injector certs`).
fn ca_bundle_fix(hooks: &[&Hook]) -> String {
    let mut by_config: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for h in hooks {
        by_config.entry(&h.config).or_default().push(h.index);
    }
    by_config
        .iter()
        .map(|(config, indexes)| {
            let ops: Vec<String> = indexes
                .iter()
                .map(|i| {
                    format!(
                        "{{\"op\":\"replace\",\"path\":\"/webhooks/{i}/clientConfig/caBundle\",\"value\":\"'\"$CA\"'\"}}"
                    )
                })
                .collect();
            format!(
                "CA=$(base64 -w0 < ca.crt) && kubectl patch mutatingwebhookconfiguration {config} \
                 --type=json -p '[{}]'  # ca.crt: the CA that signed the serving certificate",
                ops.join(",")
            )
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// A certificate's facts for the checks and the messages.
#[derive(Debug, Clone)]
struct CertInfo {
    subject: String,
    issuer: String,
    not_before: i64,
    not_after: i64,
    not_after_text: String,
    names: Vec<String>,
}

fn cert_info(der: &CertificateDer<'_>) -> Result<CertInfo, String> {
    let (_, c) = x509_parser::parse_x509_certificate(der.as_ref()).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = c.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push(d.to_string()),
                x509_parser::extensions::GeneralName::IPAddress(ip) => match ip.len() {
                    4 => names.push(
                        std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap_or([0; 4]))
                            .to_string(),
                    ),
                    16 => names.push(
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap_or([0; 16]))
                            .to_string(),
                    ),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    Ok(CertInfo {
        subject: c.subject().to_string(),
        issuer: c.issuer().to_string(),
        not_before: c.validity().not_before.timestamp(),
        not_after: c.validity().not_after.timestamp(),
        not_after_text: c.validity().not_after.to_string(),
        names,
    })
}

/// The certificates of a caBundle, or what is wrong with it.
pub fn parse_ca_bundle(v: Option<&Value>) -> Result<Vec<CertificateDer<'static>>, String> {
    let s = match v {
        None | Some(Value::Null) => return Err("clientConfig.caBundle is missing".to_string()),
        Some(Value::String(s)) if s.trim().is_empty() => {
            return Err("clientConfig.caBundle is empty".to_string())
        }
        Some(Value::String(s)) => s,
        Some(other) => return Err(format!("clientConfig.caBundle is {other}, not a string")),
    };
    let compact: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    let pem = base64_simd::STANDARD
        .decode_to_vec(compact.as_bytes())
        .map_err(|e| format!("clientConfig.caBundle is not valid base64: {e}"))?;
    let mut certs = Vec::new();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        let c = c.map_err(|e| format!("clientConfig.caBundle decodes to broken PEM: {e}"))?;
        certs.push(c);
    }
    if certs.is_empty() {
        return Err(format!(
            "clientConfig.caBundle decodes to {} bytes without a PEM CERTIFICATE block",
            pem.len()
        ));
    }
    for (i, c) in certs.iter().enumerate() {
        cert_info(c).map_err(|e| {
            format!(
                "clientConfig.caBundle certificate {}: not X.509: {e}",
                i + 1
            )
        })?;
    }
    Ok(certs)
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64
}

fn finding(
    level: Level,
    check: &'static str,
    hooks: &[&Hook],
    found: String,
    why: &str,
    fix: Option<String>,
) -> Finding {
    Finding {
        level,
        check,
        entries: hooks.iter().map(|h| h.label()).collect(),
        found,
        why: why.to_string(),
        fix: if level == Level::Ok { None } else { fix },
    }
}

const WHY_CA: &str = "the API server verifies the webhook's certificate against clientConfig.caBundle; when it \
does not verify, every call fails with `x509: certificate signed by unknown authority` and, with failurePolicy \
Fail, no pod in a selected namespace can be created";
const WHY_NAME: &str =
    "the API server connects to <service>.<namespace>.svc and refuses a certificate that does \
not name it (`x509: certificate is valid for ..., not ...`); every admission call fails";
const WHY_EXPIRY: &str =
    "an expired serving certificate fails every TLS handshake from the API server; renew it \
before it expires";

/// What a serving chain is checked against: the caBundle's roots, the TLS name, for which entries.
#[derive(Clone, Copy)]
struct Target<'a> {
    roots: Option<&'a RootCertStore>,
    name: Option<&'a str>,
    hooks: &'a [&'a Hook],
    provider: &'a CryptoProvider,
}

/// The caBundle, name and validity checks of a serving chain (`source` says where it came from).
fn check_chain(source: &str, chain: &[CertificateDer<'static>], t: &Target<'_>) -> Vec<Finding> {
    let Target {
        roots,
        name,
        hooks,
        provider,
    } = *t;
    let mut out = Vec::new();
    let fix = hooks[0].reissue_fix();
    let Some(leaf) = chain.first() else {
        return out;
    };
    let info = match cert_info(leaf) {
        Ok(i) => i,
        Err(e) => {
            out.push(finding(
                Level::Error,
                "certificate-authority",
                hooks,
                format!("the serving certificate {source} is not X.509: {e}"),
                WHY_CA,
                Some(fix),
            ));
            return out;
        }
    };
    let parsed = match ParsedCertificate::try_from(leaf) {
        Ok(p) => p,
        Err(e) => {
            out.push(finding(
                Level::Error,
                "certificate-authority",
                hooks,
                format!("the serving certificate {source} does not parse: {e}"),
                WHY_CA,
                Some(fix),
            ));
            return out;
        }
    };
    let now = now_unix();
    if let Some(roots) = roots {
        // Verify the chain at a moment inside the leaf's validity, so an expired leaf is reported by the
        // expiry check and this one answers only "is it signed by the caBundle".
        let at = now.clamp(
            info.not_before + 1,
            (info.not_after - 1).max(info.not_before + 1),
        );
        let at = UnixTime::since_unix_epoch(Duration::from_secs(at.max(0) as u64));
        match rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            roots,
            &chain[1..],
            at,
            provider.signature_verification_algorithms.all,
        ) {
            Ok(()) => out.push(finding(
                Level::Ok,
                "certificate-authority",
                hooks,
                format!(
                    "the caBundle verifies the serving certificate {source} (issuer {})",
                    info.issuer
                ),
                WHY_CA,
                None,
            )),
            Err(e) => {
                let found = match e {
                    rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
                        "the caBundle does not verify the serving certificate {source}: x509: certificate \
                         signed by unknown authority (the certificate's issuer is {}, not a CA of the caBundle)",
                        info.issuer
                    ),
                    // Go's x509 says the same when a CA of the issuer's name but another key is found.
                    rustls::Error::InvalidCertificate(CertificateError::BadSignature) => format!(
                        "the caBundle does not verify the serving certificate {source}: x509: certificate \
                         signed by unknown authority (a CA named {} is in the caBundle, but it did not sign \
                         this certificate: another key)",
                        info.issuer
                    ),
                    other => format!(
                        "the caBundle does not verify the serving certificate {source}: {other}"
                    ),
                };
                out.push(finding(
                    Level::Error,
                    "certificate-authority",
                    hooks,
                    found,
                    WHY_CA,
                    Some(ca_bundle_fix(hooks)),
                ));
            }
        }
    }
    if let Some(name) = name {
        let result = ServerName::try_from(name.to_string())
            .map_err(|e| rustls::Error::General(e.to_string()))
            .and_then(|sn| rustls::client::verify_server_name(&parsed, &sn));
        out.push(match result {
            Ok(()) => finding(
                Level::Ok,
                "certificate-name",
                hooks,
                format!("the serving certificate {source} is valid for {name}"),
                WHY_NAME,
                None,
            ),
            Err(_) => finding(
                Level::Error,
                "certificate-name",
                hooks,
                format!(
                    "the serving certificate {source} is valid for [{}], not for {name}",
                    info.names.join(", ")
                ),
                WHY_NAME,
                Some(fix.clone()),
            ),
        });
    }
    let days_left = (info.not_after - now).div_euclid(86_400);
    out.push(if info.not_after < now {
        finding(
            Level::Error,
            "certificate-expiry",
            hooks,
            format!(
                "the serving certificate {source} expired on {}",
                info.not_after_text
            ),
            WHY_EXPIRY,
            Some(fix),
        )
    } else if info.not_before > now {
        finding(
            Level::Error,
            "certificate-expiry",
            hooks,
            format!("the serving certificate {source} is not valid yet (notBefore in the future)"),
            WHY_EXPIRY,
            Some(fix),
        )
    } else if days_left < EXPIRY_WARNING_DAYS {
        finding(
            Level::Warning,
            "certificate-expiry",
            hooks,
            format!(
                "the serving certificate {source} expires in {days_left} day(s), on {}",
                info.not_after_text
            ),
            WHY_EXPIRY,
            Some(fix),
        )
    } else {
        finding(
            Level::Ok,
            "certificate-expiry",
            hooks,
            format!(
                "the serving certificate {source} is valid until {} ({days_left} days)",
                info.not_after_text
            ),
            WHY_EXPIRY,
            None,
        )
    });
    out
}

/// The lock-out check of one entry: a fail-closed webhook that selects kube-system or its own namespace
/// blocks the very pods that would bring it back.
pub fn check_lockout(h: &Hook) -> Finding {
    const WHY: &str = "with failurePolicy Fail, a webhook that is down rejects every pod it selects; if it \
selects kube-system or its own namespace, neither the cluster's system pods nor the injector itself can \
start again until the configuration is deleted";
    let hooks = [h];
    let policy = h
        .value
        .get("failurePolicy")
        .and_then(Value::as_str)
        .unwrap_or("Fail");
    if policy == "Ignore" {
        return finding(
            Level::Ok,
            "lock-out",
            &hooks,
            "failurePolicy Ignore: a down webhook cannot block pods (they start without sidecar)"
                .into(),
            WHY,
            None,
        );
    }
    let mut namespaces = vec![SYSTEM_NAMESPACE.to_string()];
    if let Some((_, ns, _)) = h.service() {
        if ns != SYSTEM_NAMESPACE {
            namespaces.push(ns.to_string());
        }
    }
    let selector = |field: &str| {
        LabelSelector::from_json(h.value.get(field).unwrap_or(&Value::Null))
            .map_err(|e| format!("{field} does not parse: {e}"))
    };
    let (ns_sel, obj_sel) = match (selector("namespaceSelector"), selector("objectSelector")) {
        (Ok(n), Ok(o)) => (n, o),
        (Err(e), _) | (_, Err(e)) => {
            return finding(
                Level::Error,
                "lock-out",
                &hooks,
                e,
                WHY,
                Some(format!(
                    "kubectl edit mutatingwebhookconfiguration {}",
                    h.config
                )),
            )
        }
    };
    let mut every_pod = Vec::new();
    let mut labelled_pods = Vec::new();
    for ns in &namespaces {
        let mut labels = Map::new();
        labels.insert(NAMESPACE_NAME.to_string(), Value::String(ns.clone()));
        if ns_sel.matches(Some(&labels)) {
            if obj_sel.matches(None) {
                every_pod.push(ns.clone());
            } else {
                labelled_pods.push(ns.clone());
            }
        }
    }
    if every_pod.is_empty() && labelled_pods.is_empty() {
        return finding(
            Level::Ok,
            "lock-out",
            &hooks,
            format!(
                "failurePolicy {policy}; the namespaceSelector excludes {}",
                namespaces.join(" and ")
            ),
            WHY,
            None,
        );
    }
    let requirement = json!({"key": NAMESPACE_NAME, "operator": "NotIn", "values": namespaces});
    let i = h.index;
    let op = match h.value.get("namespaceSelector") {
        Some(s) if s.get("matchExpressions").is_some_and(Value::is_array) => json!({"op": "add",
            "path": format!("/webhooks/{i}/namespaceSelector/matchExpressions/-"), "value": requirement}),
        Some(s) if s.is_object() => json!({"op": "add",
            "path": format!("/webhooks/{i}/namespaceSelector/matchExpressions"), "value": [requirement]}),
        _ => json!({"op": "add", "path": format!("/webhooks/{i}/namespaceSelector"),
            "value": {"matchExpressions": [requirement]}}),
    };
    let fix = Some(patch_fix(&h.config, &[op]));
    if !every_pod.is_empty() {
        finding(
            Level::Error,
            "lock-out",
            &hooks,
            format!(
                "failurePolicy {policy} and the selectors match every pod in {}",
                every_pod.join(" and ")
            ),
            WHY,
            fix,
        )
    } else {
        finding(
            Level::Warning,
            "lock-out",
            &hooks,
            format!(
                "failurePolicy {policy} and the namespaceSelector does not exclude {}: pods there matching \
                 the objectSelector are blocked while the webhook is down",
                labelled_pods.join(" and ")
            ),
            WHY,
            fix,
        )
    }
}

/// The timeoutSeconds check of one entry.
pub fn check_timeout(h: &Hook) -> Finding {
    const WHY: &str =
        "every pod creation the webhook selects waits up to timeoutSeconds when the webhook \
hangs, and the API server's own request budget is 30 s; Istio's charts use 10";
    let hooks = [h];
    let fix = |v: i64| {
        Some(patch_fix(
            &h.config,
            &[
                json!({"op": "replace", "path": format!("/webhooks/{}/timeoutSeconds", h.index), "value": v}),
            ],
        ))
    };
    match h.value.get("timeoutSeconds") {
        None | Some(Value::Null) => finding(
            Level::Ok,
            "timeout",
            &hooks,
            format!("timeoutSeconds not set: the API server's default {DEFAULT_TIMEOUT_SECONDS}"),
            WHY,
            None,
        ),
        Some(v) => match v.as_i64() {
            Some(t) if !(1..=30).contains(&t) => finding(
                Level::Error,
                "timeout",
                &hooks,
                format!("timeoutSeconds {t} is outside 1..30, which the API server refuses"),
                WHY,
                fix(DEFAULT_TIMEOUT_SECONDS),
            ),
            Some(t) if t > DEFAULT_TIMEOUT_SECONDS => finding(
                Level::Warning,
                "timeout",
                &hooks,
                format!("timeoutSeconds {t} is above {DEFAULT_TIMEOUT_SECONDS}"),
                WHY,
                fix(DEFAULT_TIMEOUT_SECONDS),
            ),
            Some(t) => finding(
                Level::Ok,
                "timeout",
                &hooks,
                format!("timeoutSeconds {t}"),
                WHY,
                None,
            ),
            None => finding(
                Level::Error,
                "timeout",
                &hooks,
                format!("timeoutSeconds {v} is not an integer"),
                WHY,
                fix(DEFAULT_TIMEOUT_SECONDS),
            ),
        },
    }
}

/// An `https://HOST[:PORT][/PATH]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    pub path: Option<String>,
}

/// Parses an `https://` URL (the only scheme an admission webhook may use).
pub fn parse_url(s: &str) -> Result<Url, DoctorError> {
    let bad = |reason| DoctorError::Url {
        value: s.to_string(),
        reason,
    };
    let rest = s
        .strip_prefix("https://")
        .ok_or_else(|| bad("must start with https://"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let end = v6
            .find(']')
            .ok_or_else(|| bad("unclosed '[' in the host"))?;
        let port = v6[end + 1..].strip_prefix(':');
        (&v6[..end], port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    let port = match port {
        Some(p) => p
            .parse()
            .map_err(|_| bad("the port is not a number 1..65535"))?,
        None => 443,
    };
    Ok(Url {
        host: host.to_string(),
        port,
        path: path.map(str::to_string),
    })
}

/// Accepts any certificate and keeps the chain, so doctor can check it itself and still reach the
/// endpoint when the chain is wrong; handshake signatures are still verified.
#[derive(Debug)]
struct Recorder {
    chain: Mutex<Vec<CertificateDer<'static>>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let mut chain = vec![end_entity.clone().into_owned()];
        chain.extend(intermediates.iter().map(|c| c.clone().into_owned()));
        *self.chain.lock().unwrap_or_else(|e| e.into_inner()) = chain;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// What a live call to the endpoint showed.
#[derive(Debug, Default)]
struct Live {
    /// The chain the server presented (empty when the handshake never got that far).
    chain: Vec<CertificateDer<'static>>,
    /// The negotiated TLS version.
    version: Option<rustls::ProtocolVersion>,
    /// The handshake failed for the TLS version.
    version_refused: Option<String>,
    /// The call failed before an HTTP answer (connect, handshake, timeout).
    failure: Option<String>,
    /// The HTTP status and body.
    answer: Option<(u16, Vec<u8>)>,
}

/// A sample AdmissionReview: a pod that must not be injected (`sidecar.istio.io/inject: "false"`) as a
/// dry run, so nothing is created or changed.
pub fn sample_review(uid: &str) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "injector-doctor-probe",
            "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "injector-doctor"},
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "injector-doctor-probe",
                    "namespace": "default",
                    "labels": {"sidecar.istio.io/inject": "false"}
                },
                "spec": {"containers": [{"name": "probe", "image": "registry.k8s.io/pause:3.10"}]}
            },
            "oldObject": null,
            "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

async fn call(
    url: &Url,
    server_name: &str,
    path: &str,
    body: &[u8],
    provider: Arc<CryptoProvider>,
) -> Live {
    let mut live = Live::default();
    let recorder = Arc::new(Recorder {
        chain: Mutex::new(Vec::new()),
        provider: provider.clone(),
    });
    let config = match rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    {
        Ok(b) => b,
        Err(e) => {
            live.failure = Some(format!("TLS client configuration: {e}"));
            return live;
        }
    };
    let mut config = config
        .dangerous()
        .with_custom_certificate_verifier(recorder.clone())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let addr = format!("{}:{}", url.host, url.port);
    let tcp = match tokio::net::TcpStream::connect(addr.as_str()).await {
        Ok(t) => t,
        Err(e) => {
            live.failure = Some(format!("cannot connect to {addr}: {e}"));
            return live;
        }
    };
    let Ok(name) = ServerName::try_from(server_name.to_string()) else {
        live.failure = Some(format!("{server_name:?} is not a TLS server name"));
        return live;
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let handshake = connector.connect(name, tcp).await;
    live.chain = recorder
        .chain
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut tls = match handshake {
        Ok(t) => t,
        Err(e) => {
            let text = e.to_string();
            let version = matches!(
                e.get_ref().and_then(|r| r.downcast_ref::<rustls::Error>()),
                Some(rustls::Error::AlertReceived(
                    rustls::AlertDescription::ProtocolVersion
                )) | Some(rustls::Error::PeerIncompatible(_))
            );
            if version {
                live.version_refused = Some(text);
            } else {
                live.failure = Some(format!("TLS handshake with {addr} failed: {text}"));
            }
            return live;
        }
    };
    live.version = tls.get_ref().1.protocol_version();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {server_name}\r\nContent-Type: application/json\r\nAccept: \
         application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut raw = Vec::new();
    let sent = async {
        tls.write_all(head.as_bytes()).await?;
        tls.write_all(body).await?;
        tls.flush().await?;
        (&mut tls)
            .take(MAX_ANSWER_BYTES as u64)
            .read_to_end(&mut raw)
            .await?;
        Ok::<_, std::io::Error>(())
    }
    .await;
    // A server closing without close_notify after a complete answer is common: what arrived counts.
    match (parse_http(&raw), sent) {
        (Ok(a), _) => live.answer = Some(a),
        (Err(_), Err(e)) => {
            live.failure = Some(format!("sending the AdmissionReview to {addr}: {e}"))
        }
        (Err(e), Ok(())) => live.failure = Some(format!("the answer is not HTTP/1.1: {e}")),
    }
    live
}

/// Status and body of an HTTP/1.1 answer read to the end (`Content-Length` or chunked).
fn parse_http(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of the headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
            if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                chunked = true;
            } else if k == "content-length" {
                length = v.parse::<usize>().ok();
            }
        }
    }
    let mut body = &raw[end + 4..];
    if chunked {
        let mut out = Vec::new();
        loop {
            let eol = body
                .windows(2)
                .position(|w| w == b"\r\n")
                .ok_or("truncated chunk")?;
            let size_text = std::str::from_utf8(&body[..eol]).map_err(|_| "chunk size")?;
            let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                .map_err(|_| format!("chunk size {size_text:?}"))?;
            body = &body[eol + 2..];
            if size == 0 {
                return Ok((status, out));
            }
            if body.len() < size {
                return Err("truncated chunk".into());
            }
            out.extend_from_slice(&body[..size]);
            body = body.get(size + 2..).ok_or("truncated chunk")?;
        }
    }
    if let Some(n) = length {
        if body.len() < n {
            return Err(format!("body of {} bytes, Content-Length {n}", body.len()));
        }
        body = &body[..n];
    }
    Ok((status, body.to_vec()))
}

/// The verdict on an answer to [`sample_review`].
fn check_answer(status: u16, body: &[u8], uid: &str) -> Result<String, String> {
    if status != 200 {
        return Err(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ));
    }
    let v: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    if v.get("apiVersion") != Some(&json!("admission.k8s.io/v1"))
        || v.get("kind") != Some(&json!("AdmissionReview"))
    {
        return Err(format!(
            "not an admission.k8s.io/v1 AdmissionReview (apiVersion {}, kind {})",
            v.get("apiVersion").unwrap_or(&Value::Null),
            v.get("kind").unwrap_or(&Value::Null)
        ));
    }
    let r = v.get("response").unwrap_or(&Value::Null);
    if r.get("uid") != Some(&json!(uid)) {
        return Err(format!(
            "response.uid is {}, not the request's {uid:?}",
            r.get("uid").unwrap_or(&Value::Null)
        ));
    }
    if r.get("allowed") != Some(&json!(true)) {
        return Err(format!(
            "response.allowed is {} (status {})",
            r.get("allowed").unwrap_or(&Value::Null),
            r.get("status").unwrap_or(&Value::Null)
        ));
    }
    if r.get("patch").is_some_and(|p| !p.is_null()) {
        return Err("the pod labelled sidecar.istio.io/inject=false got a patch".to_string());
    }
    Ok("answered the sample AdmissionReview (a pod labelled sidecar.istio.io/inject=false, dry run) \
        with allowed=true, the same uid and no patch"
        .to_string())
}

/// The endpoint fix: look at the service's endpoints and the injector's log.
fn endpoint_fix(h: &Hook, url: &Url, path: &str) -> String {
    let probe = format!(
        "curl -sk --max-time {} https://{}:{}{path}",
        h.timeout_seconds(),
        url.host,
        url.port
    );
    match h.service() {
        Some((name, ns, _)) => format!(
            "kubectl -n {ns} get endpoints {name} && kubectl -n {ns} get pods -o wide && \
             kubectl -n {ns} logs deploy/{name} --tail=50; {probe}"
        ),
        None => probe,
    }
}

/// The live findings of one group of entries.
fn check_live(
    live: &Live,
    url: &Url,
    path: &str,
    uid: &str,
    secret_chain: Option<&[CertificateDer<'static>]>,
    t: &Target<'_>,
) -> Vec<Finding> {
    let hooks = t.hooks;
    const WHY_TLS: &str =
        "the API server speaks TLS 1.2 and 1.3 only; a server offering less cannot be \
called at all";
    const WHY_ENDPOINT: &str = "the API server calls the webhook for every pod it selects and gives up after \
timeoutSeconds; with failurePolicy Fail those pods are rejected, with Ignore they start without sidecar";
    let mut out = Vec::new();
    let h = hooks[0];
    let source = format!("served at https://{}:{}", url.host, url.port);
    if let Some(e) = &live.version_refused {
        out.push(finding(
            Level::Error,
            "tls-version",
            hooks,
            format!("the server refused TLS 1.2 and 1.3: {e}"),
            WHY_TLS,
            Some(format!(
                "openssl s_client -connect {}:{} -tls1_2 </dev/null  # then configure TLS 1.2 or 1.3 \
                 on the server (injector serve offers exactly these)",
                url.host, url.port
            )),
        ));
    }
    if !live.chain.is_empty() {
        out.extend(check_chain(&source, &live.chain, t));
        if let Some(secret) = secret_chain {
            out.push(if secret.first() == live.chain.first() {
                finding(
                    Level::Ok,
                    "served-certificate",
                    hooks,
                    "the server presents the --tls-cert certificate".to_string(),
                    "",
                    None,
                )
            } else {
                finding(
                    Level::Warning,
                    "served-certificate",
                    hooks,
                    "the server presents a different certificate than --tls-cert".to_string(),
                    "the Secret was updated but the server still serves the old pair (the mount is \
                     updated with a delay), or the server mounts another Secret",
                    Some(match h.service() {
                        Some((name, ns, _)) => format!(
                            "kubectl -n {ns} get deploy {name} -o jsonpath='{{.spec.template.spec.volumes}}'  \
                             # compare the Secret it mounts with --tls-cert"
                        ),
                        None => "diff <(openssl x509 -in TLS_CERT) <(openssl s_client -connect HOST:PORT </dev/null | openssl x509)"
                            .to_string(),
                    }),
                )
            });
        }
    }
    if let Some(v) = live.version {
        out.push(finding(
            Level::Ok,
            "tls-version",
            hooks,
            format!("negotiated {}", version_name(v)),
            WHY_TLS,
            None,
        ));
    }
    if let Some(f) = &live.failure {
        out.push(finding(
            Level::Error,
            "endpoint",
            hooks,
            format!("the endpoint does not answer: {f}"),
            WHY_ENDPOINT,
            Some(endpoint_fix(h, url, path)),
        ));
    }
    if let Some((status, body)) = &live.answer {
        out.push(match check_answer(*status, body, uid) {
            Ok(found) => finding(Level::Ok, "review", hooks, found, WHY_ENDPOINT, None),
            Err(e) => finding(
                Level::Error,
                "review",
                hooks,
                format!("the answer to the sample AdmissionReview (uid {uid}) is wrong: {e}"),
                "the API server rejects an answer that is not an AdmissionReview response for its \
                 request; a pod that must not be injected must be allowed unchanged",
                Some(format!(
                    "{}  # look for uid {uid} in the log",
                    endpoint_fix(h, url, path)
                )),
            ),
        });
    }
    out
}

fn version_name(v: rustls::ProtocolVersion) -> String {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => "TLS 1.3".to_string(),
        rustls::ProtocolVersion::TLSv1_2 => "TLS 1.2".to_string(),
        other => format!("{other:?}"),
    }
}

/// The entries that share a caBundle, TLS name, path and timeout are checked together.
fn groups<'a>(hooks: &'a [Hook], server_name: Option<&str>) -> Vec<Vec<&'a Hook>> {
    let mut out: Vec<(String, Vec<&Hook>)> = Vec::new();
    for h in hooks {
        let key = format!(
            "{}|{:?}|{:?}|{}",
            h.ca_bundle().unwrap_or(&Value::Null),
            server_name.map(str::to_string).or_else(|| h.tls_name()),
            h.path(),
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
    hooks: &[Hook],
    tls_cert: Option<(&Path, &[CertificateDer<'static>])>,
    url: Option<&Url>,
    server_name: Option<&str>,
) -> Result<Report, DoctorError> {
    let provider = tls::crypto_provider();
    let mut findings = Vec::new();
    let runtime = if url.is_some() {
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
        let name = server_name.map(str::to_string).or_else(|| h.tls_name());
        let roots = match parse_ca_bundle(h.ca_bundle()) {
            Ok(certs) => {
                let mut roots = RootCertStore::empty();
                let mut bad = None;
                for c in &certs {
                    if let Err(e) = roots.add(c.clone()) {
                        bad = Some(e);
                    }
                }
                match bad {
                    Some(e) => {
                        findings.push(finding(
                            Level::Error,
                            "ca-bundle",
                            &group,
                            format!(
                                "clientConfig.caBundle holds a certificate unusable as a CA: {e}"
                            ),
                            WHY_CA,
                            Some(ca_bundle_fix(&group)),
                        ));
                        None
                    }
                    None => {
                        let subjects: Vec<String> = certs
                            .iter()
                            .filter_map(|c| cert_info(c).ok())
                            .map(|i| i.subject)
                            .collect();
                        findings.push(finding(
                            Level::Ok,
                            "ca-bundle",
                            &group,
                            format!(
                                "clientConfig.caBundle holds {} certificate(s): {}",
                                certs.len(),
                                subjects.join("; ")
                            ),
                            WHY_CA,
                            None,
                        ));
                        Some(roots)
                    }
                }
            }
            Err(found) => {
                findings.push(finding(
                    Level::Error,
                    "ca-bundle",
                    &group,
                    found,
                    "without a usable caBundle the API server verifies the webhook against its own \
                     trust roots, which do not hold the injector's CA: every call fails with `x509: \
                     certificate signed by unknown authority`",
                    Some(ca_bundle_fix(&group)),
                ));
                None
            }
        };
        let target = Target {
            roots: roots.as_ref(),
            name: name.as_deref(),
            hooks: &group,
            provider: &provider,
        };
        if let Some((path, chain)) = tls_cert {
            let source = format!("from --tls-cert {}", path.display());
            findings.extend(check_chain(&source, chain, &target));
        }
        if let (Some(url), Some(rt)) = (url, runtime.as_ref()) {
            let path = url
                .path
                .clone()
                .or_else(|| h.path().map(str::to_string))
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
        findings.push(check_lockout(h));
        findings.push(check_timeout(h));
    }
    Ok(Report::new(hooks, findings))
}

fn read(flag: &'static str, path: &Path) -> Result<String, DoctorError> {
    std::fs::read_to_string(path).map_err(|source| DoctorError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the serving chain of `--tls-cert`.
pub fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, DoctorError> {
    let pem = read("--tls-cert", path)?;
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| DoctorError::Cert {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(DoctorError::Cert {
            path: path.to_path_buf(),
            detail: "no PEM CERTIFICATE block".to_string(),
        });
    }
    Ok(chain)
}

/// Runs `injector doctor`: prints the report; `Ok(false)` when it holds an error.
pub fn run(args: Args) -> Result<bool, DoctorError> {
    let text = read("--webhook-config", &args.webhook_config)?;
    let hooks = read_hooks(&args.webhook_config, &text)?;
    let chain = args.tls_cert.as_deref().map(read_chain).transpose()?;
    let url = args.url.as_deref().map(parse_url).transpose()?;
    if let Some(n) = &args.server_name {
        if ServerName::try_from(n.clone()).is_err() {
            return Err(DoctorError::ServerName { value: n.clone() });
        }
    }
    let report = diagnose(
        &hooks,
        args.tls_cert.as_deref().zip(chain.as_deref()),
        url.as_ref(),
        args.server_name.as_deref(),
    )?;
    match args.output {
        Output::Text => print!("{}", report.text()),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        ),
    }
    Ok(report.errors == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(value: Value) -> Hook {
        Hook {
            config: "cfg".into(),
            index: 2,
            name: "namespace.sidecar-injector.istio.io".into(),
            value,
        }
    }

    fn svc() -> Value {
        json!({"service": {"name": "sidecar-injector", "namespace": "istio-system", "path": "/inject"}})
    }

    #[test]
    fn selector_without_exclusions_is_a_lock_out_error() {
        let f = check_lockout(&hook(
            json!({"clientConfig": svc(), "failurePolicy": "Fail"}),
        ));
        assert_eq!(f.level, Level::Error);
        assert!(
            f.found.contains("kube-system and istio-system"),
            "{}",
            f.found
        );
        let fix = f.fix.expect("fix");
        assert!(
            fix.contains("kubectl patch mutatingwebhookconfiguration cfg"),
            "{fix}"
        );
        assert!(fix.contains("/webhooks/2/namespaceSelector"), "{fix}");
        // The default failurePolicy of admissionregistration/v1 is Fail.
        let f = check_lockout(&hook(json!({"clientConfig": svc()})));
        assert_eq!(f.level, Level::Error);
    }

    #[test]
    fn object_selector_only_narrows_the_lock_out_to_a_warning() {
        let f = check_lockout(&hook(json!({"clientConfig": svc(),
            "namespaceSelector": {"matchExpressions": [{"key": "istio.io/rev", "operator": "DoesNotExist"}]},
            "objectSelector": {"matchLabels": {"sidecar.istio.io/inject": "true"}}})));
        assert_eq!(f.level, Level::Warning, "{f:?}");
        assert!(f
            .fix
            .expect("fix")
            .contains("/webhooks/2/namespaceSelector/matchExpressions/-"));
    }

    #[test]
    fn excluded_namespaces_or_ignore_are_ok() {
        let f = check_lockout(&hook(json!({"clientConfig": svc(),
            "namespaceSelector": {"matchExpressions": [{"key": NAMESPACE_NAME, "operator": "NotIn",
                "values": ["kube-system", "istio-system"]}]}})));
        assert_eq!(f.level, Level::Ok, "{f:?}");
        assert_eq!(f.fix, None);
        // Excluding only kube-system still locks the injector out of its own namespace.
        let f = check_lockout(&hook(json!({"clientConfig": svc(),
            "namespaceSelector": {"matchExpressions": [{"key": NAMESPACE_NAME, "operator": "NotIn",
                "values": ["kube-system"]}]}})));
        assert_eq!(f.level, Level::Error);
        assert!(f.found.ends_with("istio-system"), "{}", f.found);
        let f = check_lockout(&hook(
            json!({"clientConfig": svc(), "failurePolicy": "Ignore"}),
        ));
        assert_eq!(f.level, Level::Ok);
        // A namespace label the system namespaces do not carry excludes them too.
        let f = check_lockout(&hook(json!({"clientConfig": svc(),
            "namespaceSelector": {"matchLabels": {"istio-injection": "enabled"}}})));
        assert_eq!(f.level, Level::Ok);
    }

    #[test]
    fn timeout_seconds_above_ten_warns_and_out_of_range_errors() {
        let level = |v: Value| check_timeout(&hook(json!({"timeoutSeconds": v}))).level;
        assert_eq!(level(json!(10)), Level::Ok);
        assert_eq!(level(json!(1)), Level::Ok);
        assert_eq!(level(json!(11)), Level::Warning);
        assert_eq!(level(json!(30)), Level::Warning);
        assert_eq!(level(json!(31)), Level::Error);
        assert_eq!(level(json!(0)), Level::Error);
        assert_eq!(level(json!("10")), Level::Error);
        assert_eq!(check_timeout(&hook(json!({}))).level, Level::Ok);
        let f = check_timeout(&hook(json!({"timeoutSeconds": 20})));
        assert!(f
            .fix
            .expect("fix")
            .contains(r#"{"op":"replace","path":"/webhooks/2/timeoutSeconds","value":10}"#));
    }

    #[test]
    fn empty_and_unparsable_ca_bundles_are_named() {
        let e = parse_ca_bundle(None).expect_err("missing");
        assert!(e.contains("caBundle is missing"), "{e}");
        let e = parse_ca_bundle(Some(&json!(""))).expect_err("empty");
        assert!(e.contains("caBundle is empty"), "{e}");
        let e = parse_ca_bundle(Some(&json!("not base64!"))).expect_err("base64");
        assert!(e.contains("not valid base64"), "{e}");
        let e = parse_ca_bundle(Some(&json!("aGVsbG8="))).expect_err("no PEM");
        assert!(e.contains("without a PEM CERTIFICATE block"), "{e}");
        let junk = base64_simd::STANDARD.encode_to_string(
            b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n",
        );
        let e = parse_ca_bundle(Some(&json!(junk))).expect_err("not X.509");
        assert!(e.contains("not X.509"), "{e}");
    }

    #[test]
    fn a_generated_ca_bundle_parses_and_an_empty_one_is_an_error_with_a_fix() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = params.self_signed(&key).expect("ca");
        let b64 = base64_simd::STANDARD.encode_to_string(ca.pem().as_bytes());
        assert_eq!(parse_ca_bundle(Some(&json!(b64))).expect("bundle").len(), 1);

        let text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: admissionregistration.k8s.io/v1\n  \
            kind: MutatingWebhookConfiguration\n  metadata: {name: cfg}\n  webhooks:\n  - name: a.example\n    \
            clientConfig: {caBundle: '', service: {name: s, namespace: mesh}}\n    \
            namespaceSelector: {matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, mesh]}]}\n";
        let hooks = read_hooks(Path::new("x.yaml"), text).expect("hooks");
        let report = diagnose(&hooks, None, None, None).expect("report");
        assert_eq!(report.errors, 1, "{}", report.text());
        let f = &report.findings[0];
        assert_eq!((f.level, f.check), (Level::Error, "ca-bundle"));
        assert!(f
            .fix
            .as_deref()
            .expect("fix")
            .contains("/webhooks/0/clientConfig/caBundle"));
    }

    /// A CA and a leaf for `names` valid from `from` to `until` days from now, as (roots, chain).
    fn chain(
        names: &[&str],
        from: i64,
        until: i64,
    ) -> (RootCertStore, Vec<CertificateDer<'static>>) {
        let now = time::OffsetDateTime::now_utc();
        let ca_key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.not_before = now - time::Duration::days(400);
        ca.not_after = now + time::Duration::days(400);
        let ca_cert = ca.self_signed(&ca_key).expect("ca");
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().expect("key");
        let mut leaf =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("params");
        leaf.not_before = now + time::Duration::days(from);
        leaf.not_after = now + time::Duration::days(until);
        let cert = leaf.signed_by(&key, &issuer).expect("leaf");
        let mut roots = RootCertStore::empty();
        roots.add(ca_cert.der().clone()).expect("root");
        (roots, vec![cert.der().clone()])
    }

    fn chain_findings(names: &[&str], from: i64, until: i64) -> Vec<Finding> {
        let (roots, chain) = chain(names, from, until);
        let h = hook(json!({"clientConfig": svc()}));
        let provider = tls::crypto_provider();
        let hooks = [&h];
        let t = Target {
            roots: Some(&roots),
            name: Some("sidecar-injector.istio-system.svc"),
            hooks: &hooks,
            provider: &provider,
        };
        check_chain("from test", &chain, &t)
    }

    fn level_of(findings: &[Finding], check: &str) -> Level {
        findings
            .iter()
            .find(|f| f.check == check)
            .unwrap_or_else(|| panic!("no {check} in {findings:?}"))
            .level
    }

    #[test]
    fn expiry_is_ok_a_warning_within_30_days_and_an_error_once_past() {
        let name = ["sidecar-injector.istio-system.svc"];
        let f = chain_findings(&name, -1, 365);
        assert_eq!(level_of(&f, "certificate-expiry"), Level::Ok);
        assert_eq!(level_of(&f, "certificate-authority"), Level::Ok);
        assert_eq!(level_of(&f, "certificate-name"), Level::Ok);
        let f = chain_findings(&name, -1, 10);
        assert_eq!(level_of(&f, "certificate-expiry"), Level::Warning);
        assert!(f
            .iter()
            .any(|f| f.found.contains("expires in 9 day(s)")
                || f.found.contains("expires in 10 day(s)")));
        let f = chain_findings(&name, -60, -1);
        assert_eq!(level_of(&f, "certificate-expiry"), Level::Error);
        // The chain is still the caBundle's: only the dates are wrong.
        assert_eq!(level_of(&f, "certificate-authority"), Level::Ok);
        let f = chain_findings(&name, 2, 30);
        assert_eq!(level_of(&f, "certificate-expiry"), Level::Error);
    }

    #[test]
    fn a_certificate_for_other_names_is_a_name_error_and_wildcards_count() {
        let f = chain_findings(&["other.istio-system.svc"], -1, 365);
        let n = f
            .iter()
            .find(|f| f.check == "certificate-name")
            .expect("name");
        assert_eq!(n.level, Level::Error);
        assert!(n
            .found
            .contains("[other.istio-system.svc], not for sidecar-injector.istio-system.svc"));
        assert!(n
            .fix
            .as_deref()
            .expect("fix")
            .contains("--service sidecar-injector --namespace istio-system"));
        let f = chain_findings(&["*.istio-system.svc"], -1, 365);
        assert_eq!(level_of(&f, "certificate-name"), Level::Ok);
    }

    #[test]
    fn urls_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_url("https://127.0.0.1:8443/inject").expect("url"),
            Url {
                host: "127.0.0.1".into(),
                port: 8443,
                path: Some("/inject".into())
            }
        );
        assert_eq!(parse_url("https://[::1]").expect("url").host, "::1");
        assert_eq!(parse_url("https://h").expect("url").port, 443);
        assert!(parse_url("http://h").is_err());
        assert!(parse_url("https://h:x").is_err());
    }

    #[test]
    fn answers_are_checked_for_uid_allowed_and_patch() {
        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u", "allowed": true}});
        assert!(check_answer(200, ok.to_string().as_bytes(), "u").is_ok());
        assert!(check_answer(200, ok.to_string().as_bytes(), "v")
            .expect_err("uid")
            .contains("response.uid"));
        assert!(check_answer(500, b"boom", "u").is_err());
        let denied = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u", "allowed": false}});
        assert!(check_answer(200, denied.to_string().as_bytes(), "u")
            .expect_err("denied")
            .contains("allowed"));
        assert_eq!(
            parse_http(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
            )
            .expect("chunked"),
            (200, b"abc".to_vec())
        );
    }
}
