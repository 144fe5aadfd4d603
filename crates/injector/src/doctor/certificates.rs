//! The certificate checks: the caBundle's certificates, and a serving chain (from `--tls-cert` or a live
//! handshake) against them, its names and its validity, each finding with the command that fixes it.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::ParsedCertificate;
use rustls::RootCertStore;
use serde_json::Value;

use crate::shared::webhook_entry::Entry;
use sidecar_core::fields::Fields;

use super::chain;
use super::report::{finding, Finding, Level};
use super::url::parse_url;

/// A certificate expiring sooner than this is a warning.
const EXPIRY_WARNING_DAYS: i64 = 30;

/// The TLS name the API server checks: `<service>.<namespace>.svc`, or the host of clientConfig.url.
pub(super) fn tls_name(h: &Entry) -> Option<String> {
    if let Some((name, ns, _)) = h.service() {
        return Some(format!("{name}.{ns}.svc"));
    }
    let url = h.client()?.field("url")?.as_str()?;
    parse_url(url).ok().map(|u| u.host)
}

/// A command that re-issues the serving certificate for the service with the CA in `DIR`.
pub(super) fn reissue_fix(h: &Entry) -> String {
    match h.service() {
        Some((name, ns, _)) => format!(
            "injector certs --out-dir DIR --service {name} --namespace {ns} \
             && kubectl -n {ns} apply -f DIR/secret.yaml  # reuses the CA in DIR (ca.crt, ca.key)"
        ),
        None => format!(
            "injector certs --out-dir DIR --san {}  # a certificate for the clientConfig.url host",
            tls_name(h).unwrap_or_else(|| "HOST".to_string())
        ),
    }
}

/// The caBundle fix for `hooks`: every entry of each configuration set to the CA that signed the
/// serving certificate (`ca.crt` as written by `injector certs`).
pub(super) fn ca_bundle_fix(hooks: &[&Entry]) -> String {
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
pub(super) struct CertInfo {
    pub(super) subject: String,
    pub(super) issuer: String,
    pub(super) not_before: i64,
    pub(super) not_after: i64,
    pub(super) not_after_text: String,
    pub(super) names: Vec<String>,
}

pub(super) fn cert_info(der: &CertificateDer<'_>) -> Result<CertInfo, String> {
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

/// The caBundle check of a group of entries (which share one): its certificates as trust roots, when
/// they are usable, and the finding.
pub(super) fn check_ca_bundle(group: &[&Entry]) -> (Option<Vec<CertificateDer<'static>>>, Finding) {
    match parse_ca_bundle(group[0].ca_bundle()) {
        Ok(certs) => {
            let mut roots = RootCertStore::empty();
            let mut bad = None;
            for c in &certs {
                if let Err(e) = roots.add(c.clone()) {
                    bad = Some(e);
                }
            }
            match bad {
                Some(e) => (
                    None,
                    finding(
                        Level::Error,
                        "ca-bundle",
                        group,
                        format!("clientConfig.caBundle holds a certificate unusable as a CA: {e}"),
                        WHY_CA,
                        Some(ca_bundle_fix(group)),
                    ),
                ),
                None => {
                    let subjects: Vec<String> = certs
                        .iter()
                        .filter_map(|c| cert_info(c).ok())
                        .map(|i| i.subject)
                        .collect();
                    let found = finding(
                        Level::Ok,
                        "ca-bundle",
                        group,
                        format!(
                            "clientConfig.caBundle holds {} certificate(s): {}",
                            certs.len(),
                            subjects.join("; ")
                        ),
                        WHY_CA,
                        None,
                    );
                    (Some(certs), found)
                }
            }
        }
        Err(found) => (
            None,
            finding(
                Level::Error,
                "ca-bundle",
                group,
                found,
                "without a usable caBundle the API server verifies the webhook against its own \
                 trust roots, which do not hold the injector's CA: every call fails with `x509: \
                 certificate signed by unknown authority`",
                Some(ca_bundle_fix(group)),
            ),
        ),
    }
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

pub(super) fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64
}

pub(super) const WHY_CA: &str = "the API server verifies the webhook's certificate against clientConfig.caBundle; when it \
does not verify, every call fails with `x509: certificate signed by unknown authority` and, with failurePolicy \
Fail, no pod in a selected namespace can be created";
pub(super) const WHY_NAME: &str =
    "the API server connects to <service>.<namespace>.svc and refuses a certificate that does \
not name it (`x509: certificate is valid for ..., not ...`); every admission call fails";
pub(super) const WHY_EXPIRY: &str =
    "an expired serving certificate fails every TLS handshake from the API server; renew it \
before it expires";

/// What a serving chain is checked against: the caBundle's roots, the TLS name, for which entries.
#[derive(Clone, Copy)]
pub(super) struct Target<'a> {
    /// The caBundle's certificates (`None` when the caBundle is unusable).
    pub(super) roots: Option<&'a [CertificateDer<'static>]>,
    pub(super) name: Option<&'a str>,
    pub(super) hooks: &'a [&'a Entry],
    pub(super) provider: &'a CryptoProvider,
}

/// The caBundle, name and validity checks of a serving chain (`source` says where it came from).
pub(super) fn check_chain(
    source: &str,
    chain: &[CertificateDer<'static>],
    t: &Target<'_>,
) -> Vec<Finding> {
    let Target {
        roots, name, hooks, ..
    } = *t;
    let mut out = Vec::new();
    let fix = reissue_fix(hooks[0]);
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
        out.push(authority_finding(source, chain, roots, &info, now, t));
    }
    if let Some(name) = name {
        out.push(name_finding(source, name, &parsed, &info, t));
    }
    out.push(expiry_finding(source, &info, now, t));
    out
}

/// Whether the caBundle's `roots` verify the chain.
fn authority_finding(
    source: &str,
    chain: &[CertificateDer<'static>],
    roots: &[CertificateDer<'static>],
    info: &CertInfo,
    now: i64,
    t: &Target<'_>,
) -> Finding {
    let Target {
        hooks, provider, ..
    } = *t;
    // Verify the chain at a moment inside the leaf's validity, so an expired leaf is reported by the
    // expiry check and this one answers only "is it signed by the caBundle".
    let at = now.clamp(
        info.not_before + 1,
        (info.not_after - 1).max(info.not_before + 1),
    );
    match chain::verify(
        chain,
        roots,
        at,
        &provider.signature_verification_algorithms,
    ) {
        Ok(()) => finding(
            Level::Ok,
            "certificate-authority",
            hooks,
            format!(
                "the caBundle verifies the serving certificate {source} (issuer {})",
                info.issuer
            ),
            WHY_CA,
            None,
        ),
        Err(e) => {
            let unknown = format!(
                "the caBundle does not verify the serving certificate {source}: x509: certificate \
                 signed by unknown authority"
            );
            let found = match e {
                chain::ChainError::UnknownAuthority {
                    depth: 0,
                    wrong_key: None,
                    ..
                } => format!(
                    "{unknown} (the certificate's issuer is {}, not a CA of the caBundle)",
                    info.issuer
                ),
                // Go's x509 says the same when a CA of the issuer's name but another key is found.
                chain::ChainError::UnknownAuthority {
                    depth: 0,
                    wrong_key: Some(place),
                    ..
                } => format!(
                    "{unknown} (a CA named {} is in the {place}, but it did not sign this \
                     certificate: another key)",
                    info.issuer
                ),
                chain::ChainError::UnknownAuthority {
                    depth,
                    subject,
                    issuer,
                    wrong_key: None,
                } => format!(
                    "{unknown} (certificate {depth} of the chain, {subject}, is issued by {issuer}, \
                     not by a CA of the caBundle or the chain)"
                ),
                chain::ChainError::UnknownAuthority {
                    depth,
                    subject,
                    issuer,
                    wrong_key: Some(place),
                } => format!(
                    "{unknown} (certificate {depth} of the chain, {subject}, is issued by {issuer}: a \
                     CA of that name is in the {place}, but it did not sign it: another key)"
                ),
                other => format!(
                    "the caBundle does not verify the serving certificate {source}: {other}"
                ),
            };
            finding(
                Level::Error,
                "certificate-authority",
                hooks,
                found,
                WHY_CA,
                Some(ca_bundle_fix(hooks)),
            )
        }
    }
}

/// Whether the leaf is valid for the TLS `name`.
fn name_finding(
    source: &str,
    name: &str,
    parsed: &ParsedCertificate<'_>,
    info: &CertInfo,
    t: &Target<'_>,
) -> Finding {
    let hooks = t.hooks;
    let fix = reissue_fix(hooks[0]);
    let result = ServerName::try_from(name.to_string())
        .map_err(|e| rustls::Error::General(e.to_string()))
        .and_then(|sn| rustls::client::verify_server_name(parsed, &sn));
    match result {
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
            Some(fix),
        ),
    }
}

/// Whether the leaf is valid now, and for how long.
fn expiry_finding(source: &str, info: &CertInfo, now: i64, t: &Target<'_>) -> Finding {
    let hooks = t.hooks;
    let fix = reissue_fix(hooks[0]);
    let days_left = (info.not_after - now).div_euclid(86_400);
    if info.not_after < now {
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
    }
}

/// The certificates of a PEM chain (a file's or a Secret's `tls.crt`); at least one.
pub(super) fn parse_chain(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &pem[..])
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    if chain.is_empty() {
        return Err("no PEM CERTIFICATE block".to_string());
    }
    Ok(chain)
}
