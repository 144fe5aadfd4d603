//! The serving chain verified the way the API server verifies it: Go's `crypto/x509`
//! `Certificate.Verify` (verify.go: `Verify`, `buildChains`, `isValid`, `CheckSignatureFrom`), not
//! rustls/webpki's path builder.
//!
//! webpki refuses any path with more than 6 intermediates (`MAX_SUB_CA_COUNT` in rustls-webpki's
//! verify_cert.rs, not configurable), while Go's `buildChains` has no depth limit and bounds the search
//! only by `maxChainSignatureChecks` (100 signature checks); a chain of 20 intermediates that the API
//! server accepts was therefore reported as signed by an unknown authority. The two also differ in what
//! they check besides: Go checks every certificate's validity (roots too), nests the extended key usage
//! down the chain and ignores KeyUsage. So the path is built here, following verify.go step by step,
//! with x509-parser for the fields and the crypto provider's signature algorithms (the ones the TLS
//! handshake uses) for the signatures.

use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::CertificateDer;
use x509_parser::asn1_rs::{Any, FromDer};
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{GeneralName, GeneralSubtree, NameConstraints, ParsedExtension};

/// Go's `maxChainSignatureChecks`: the most signature checks one verification makes.
pub const MAX_SIGNATURE_CHECKS: usize = 100;

/// Go's default `MaxConstraintComparisions`.
const MAX_CONSTRAINT_COMPARISONS: usize = 250_000;

/// Why a chain does not verify, in Go's words (`x509: ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainError {
    /// No certificate of the caBundle (or of the chain) signed certificate `depth` of the chain
    /// (`UnknownAuthorityError`). `wrong_key` names where a CA of the issuer's name but another key was
    /// found (`caBundle` or `chain`).
    UnknownAuthority {
        depth: usize,
        subject: String,
        issuer: String,
        wrong_key: Option<&'static str>,
    },
    /// A certificate of the path fails one of `isValid`'s checks (`CertificateInvalidError`,
    /// `UnhandledCriticalExtension`).
    Invalid { subject: String, reason: String },
    /// More than [`MAX_SIGNATURE_CHECKS`] signature checks were needed.
    Budget,
    /// A certificate is not X.509.
    Parse { index: usize, detail: String },
}

impl std::fmt::Display for ChainError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainError::UnknownAuthority { .. } => {
                write!(f, "x509: certificate signed by unknown authority")
            }
            ChainError::Invalid { subject, reason } => {
                write!(f, "{reason} (certificate {subject})")
            }
            ChainError::Budget => write!(
                f,
                "x509: signature check attempts limit reached while verifying certificate chain"
            ),
            ChainError::Parse { index, detail } => {
                write!(f, "certificate {index} of the chain is not X.509: {detail}")
            }
        }
    }
}

/// A certificate with the raw parts the checks compare.
struct Cert<'a> {
    x: X509Certificate<'a>,
    /// The contents of `signatureAlgorithm` (what `SignatureVerificationAlgorithm::signature_alg_id` is).
    sig_alg: &'a [u8],
    /// The contents of `subjectPublicKeyInfo.algorithm` (`public_key_alg_id`).
    key_alg: &'a [u8],
}

/// The contents of the first element of the DER SEQUENCE `der`.
fn first_inner(der: &[u8]) -> Option<&[u8]> {
    let (_, outer) = Any::from_der(der).ok()?;
    let (_, first) = Any::from_der(outer.data).ok()?;
    Some(first.data)
}

/// The contents of the element after the first one of the DER SEQUENCE `der`.
fn second_inner(der: &[u8]) -> Option<&[u8]> {
    let (_, outer) = Any::from_der(der).ok()?;
    let (rest, _) = Any::from_der(outer.data).ok()?;
    let (_, second) = Any::from_der(rest).ok()?;
    Some(second.data)
}

fn parse(index: usize, der: &[u8]) -> Result<Cert<'_>, ChainError> {
    let bad = |detail: String| ChainError::Parse { index, detail };
    let (_, x) = x509_parser::parse_x509_certificate(der).map_err(|e| bad(e.to_string()))?;
    let sig_alg = second_inner(der).ok_or_else(|| bad("no signatureAlgorithm".into()))?;
    let key_alg = first_inner(x.tbs_certificate.subject_pki.raw)
        .ok_or_else(|| bad("no subjectPublicKeyInfo algorithm".into()))?;
    Ok(Cert {
        x,
        sig_alg,
        key_alg,
    })
}

impl Cert<'_> {
    fn subject(&self) -> String {
        self.x.subject().to_string()
    }

    fn invalid(&self, reason: impl Into<String>) -> ChainError {
        ChainError::Invalid {
            subject: self.subject(),
            reason: reason.into(),
        }
    }

    /// `BasicConstraintsValid`, `IsCA`, `MaxPathLen` (`None` for -1).
    fn basic_constraints(&self) -> Option<(bool, Option<u32>)> {
        self.x
            .basic_constraints()
            .ok()
            .flatten()
            .map(|b| (b.value.ca, b.value.path_len_constraint))
    }

    fn san(&self) -> Option<Vec<GeneralName<'_>>> {
        self.x
            .subject_alternative_name()
            .ok()
            .flatten()
            .map(|s| s.value.general_names.clone())
    }

    fn name_constraints(&self) -> Option<&NameConstraints<'_>> {
        self.x
            .iter_extensions()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::NameConstraints(nc) => Some(nc),
                _ => None,
            })
    }

    fn key_id(&self) -> Option<&[u8]> {
        self.x
            .iter_extensions()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0),
                _ => None,
            })
    }

    fn authority_key_id(&self) -> Option<&[u8]> {
        self.x
            .iter_extensions()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(a) => {
                    a.key_identifier.as_ref().map(|k| k.0)
                }
                _ => None,
            })
    }

    /// Go's parser.go marks a critical extension it does not process as unhandled; `isValid` refuses it.
    fn unhandled_critical(&self) -> bool {
        const HANDLED: &[&str] = &[
            "2.5.29.14",         // subjectKeyIdentifier
            "2.5.29.15",         // keyUsage
            "2.5.29.17",         // subjectAltName
            "2.5.29.19",         // basicConstraints
            "2.5.29.30", // nameConstraints (unless it holds a form Go does not handle, below)
            "2.5.29.31", // cRLDistributionPoints
            "2.5.29.32", // certificatePolicies
            "2.5.29.33", // policyMappings
            "2.5.29.35", // authorityKeyIdentifier
            "2.5.29.36", // policyConstraints
            "2.5.29.37", // extKeyUsage
            "2.5.29.54", // inhibitAnyPolicy
            "1.3.6.1.5.5.7.1.1", // authorityInfoAccess
        ];
        self.x.iter_extensions().any(|e| {
            if !e.critical {
                return false;
            }
            let oid = e.oid.to_id_string();
            if !HANDLED.contains(&oid.as_str()) {
                return true;
            }
            match e.parsed_extension() {
                ParsedExtension::NameConstraints(nc) => nc
                    .permitted_subtrees
                    .iter()
                    .chain(nc.excluded_subtrees.iter())
                    .flatten()
                    .any(|s| {
                        !matches!(
                            s.base,
                            GeneralName::DNSName(_)
                                | GeneralName::IPAddress(_)
                                | GeneralName::RFC822Name(_)
                                | GeneralName::URI(_)
                        )
                    }),
                _ => false,
            }
        })
    }

    /// Go's `isValid` for the extended key usage: a certificate listing EKUs must list serverAuth (or any),
    /// nested down the chain. x509-parser puts the SGC OIDs Go also maps to known usages in `other`;
    /// Go accepts them only when asked for them, and the API server asks for serverAuth only.
    fn eku_allows_server_auth(&self) -> bool {
        match self.x.extended_key_usage() {
            Ok(Some(e)) => e.value.any || e.value.server_auth,
            // A broken EKU extension: Go's parser refuses the certificate altogether.
            Err(_) => false,
            Ok(None) => true,
        }
    }
}

/// `domainToReverseLabels` of verify.go.
fn reverse_labels(domain: &str) -> Option<Vec<&str>> {
    if domain.is_empty() {
        return Some(Vec::new());
    }
    let labels: Vec<&str> = domain.rsplit('.').collect();
    if labels
        .iter()
        .any(|l| l.is_empty() || l.bytes().any(|c| !(33..=126).contains(&c)))
    {
        return None;
    }
    Some(labels)
}

/// `matchDomainConstraint` of verify.go.
fn match_domain(domain: &str, constraint: &str) -> Result<bool, String> {
    if constraint.is_empty() {
        return Ok(true);
    }
    let domain_labels =
        reverse_labels(domain).ok_or_else(|| format!("cannot parse domain {domain:?}"))?;
    let (must_have_subdomains, constraint) = match constraint.strip_prefix('.') {
        Some(c) => (true, c),
        None => (false, constraint),
    };
    let constraint_labels =
        reverse_labels(constraint).ok_or_else(|| format!("cannot parse domain {constraint:?}"))?;
    if domain_labels.len() < constraint_labels.len()
        || (must_have_subdomains && domain_labels.len() == constraint_labels.len())
    {
        return Ok(false);
    }
    Ok(constraint_labels
        .iter()
        .zip(&domain_labels)
        .all(|(c, d)| c.eq_ignore_ascii_case(d)))
}

/// `matchIPConstraint` of verify.go: the constraint is an address and a mask of the same length.
fn match_ip(ip: &[u8], constraint: &[u8]) -> bool {
    let (base, mask) = constraint.split_at(constraint.len() / 2);
    ip.len() == base.len()
        && ip
            .iter()
            .zip(base.iter().zip(mask))
            .all(|(i, (b, m))| i & m == b & m)
}

/// `matchEmailConstraint` of verify.go (the mailbox split at its last `@`).
fn match_email(mailbox: &str, constraint: &str) -> Result<bool, String> {
    let (local, domain) = mailbox
        .rsplit_once('@')
        .ok_or_else(|| format!("cannot parse rfc822Name {mailbox:?}"))?;
    match constraint.rsplit_once('@') {
        Some((c_local, c_domain)) => Ok(local == c_local && domain.eq_ignore_ascii_case(c_domain)),
        None => match_domain(domain, constraint),
    }
}

/// `matchURIConstraint` of verify.go: the host of the URI against a domain constraint.
fn match_uri(uri: &str, constraint: &str) -> Result<bool, String> {
    let host = uri
        .split_once("://")
        .map(|(_, rest)| rest.split(['/', '?', '#']).next().unwrap_or(""))
        .unwrap_or("");
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = if host.starts_with('[') {
        host
    } else {
        host.split(':').next().unwrap_or("")
    };
    if host.is_empty() {
        return Err(format!(
            "URI with empty host ({uri:?}) cannot be matched against constraints"
        ));
    }
    if host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok() {
        return Err(format!(
            "URI with IP ({uri:?}) cannot be matched against constraints"
        ));
    }
    match_domain(host, constraint)
}

/// One name against one constraint of the same form; `None` when the forms differ.
fn match_name(
    name: &GeneralName<'_>,
    constraint: &GeneralName<'_>,
) -> Option<Result<bool, String>> {
    Some(match (name, constraint) {
        (GeneralName::DNSName(n), GeneralName::DNSName(c)) => match_domain(n, c),
        (GeneralName::IPAddress(n), GeneralName::IPAddress(c)) => Ok(match_ip(n, c)),
        (GeneralName::RFC822Name(n), GeneralName::RFC822Name(c)) => match_email(n, c),
        (GeneralName::URI(n), GeneralName::URI(c)) => match_uri(n, c),
        _ => return None,
    })
}

fn name_text(name: &GeneralName<'_>) -> String {
    match name {
        GeneralName::DNSName(n) => format!("DNS name {n:?}"),
        GeneralName::RFC822Name(n) => format!("email address {n:?}"),
        GeneralName::URI(n) => format!("URI {n:?}"),
        GeneralName::IPAddress(ip) => match ip.len() {
            4 => format!(
                "IP address \"{}\"",
                std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap_or([0; 4]))
            ),
            16 => format!(
                "IP address \"{}\"",
                std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap_or([0; 16]))
            ),
            _ => format!("IP address {ip:x?}"),
        },
        other => format!("{other:?}"),
    }
}

/// The names of a name constraint's subtrees.
fn subtree_bases<'n, 'a>(
    subtrees: &'n Option<Vec<GeneralSubtree<'a>>>,
) -> Vec<&'n GeneralName<'a>> {
    subtrees.iter().flatten().map(|s| &s.base).collect()
}

/// `checkNameConstraints` of verify.go for every SAN of the leaf and of `ca` itself.
fn check_name_constraints(ca: &Cert<'_>, leaf: &Cert<'_>) -> Result<(), ChainError> {
    let Some(nc) = ca.name_constraints() else {
        return Ok(());
    };
    let not_authorized = |detail: String| {
        ca.invalid(format!(
            "x509: a root or intermediate certificate is not authorized to sign for this name: {detail}"
        ))
    };
    let mut count = 0usize;
    let excluded = subtree_bases(&nc.excluded_subtrees);
    let permitted = subtree_bases(&nc.permitted_subtrees);
    for names in [leaf.san(), ca.san()].into_iter().flatten() {
        for name in &names {
            if let GeneralName::DNSName(d) = name {
                if reverse_labels(d).is_none() {
                    return Err(ca.invalid(format!("x509: cannot parse dnsName {d:?}")));
                }
            }
            let excluded_same: Vec<_> = excluded
                .iter()
                .filter_map(|c| match_name(name, c).map(|m| (c, m)))
                .collect();
            count += excluded_same.len();
            if count > MAX_CONSTRAINT_COMPARISONS {
                return Err(ca.invalid("x509: too many constraints to check"));
            }
            for (c, m) in excluded_same {
                if m.map_err(&not_authorized)? {
                    return Err(not_authorized(format!(
                        "{} is excluded by constraint {}",
                        name_text(name),
                        name_text(c)
                    )));
                }
            }
            let permitted_same: Vec<_> = permitted
                .iter()
                .filter_map(|c| match_name(name, c))
                .collect();
            count += permitted_same.len();
            if count > MAX_CONSTRAINT_COMPARISONS {
                return Err(ca.invalid("x509: too many constraints to check"));
            }
            let mut ok = permitted_same.is_empty();
            for m in permitted_same {
                if m.map_err(&not_authorized)? {
                    ok = true;
                    break;
                }
            }
            if !ok {
                return Err(not_authorized(format!(
                    "{} is not permitted by any constraint",
                    name_text(name)
                )));
            }
        }
    }
    Ok(())
}

/// What a certificate is to the path (`leafCertificate`, `intermediateCertificate`, `rootCertificate`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Leaf,
    Intermediate,
    Root,
}

/// `isValid` of verify.go: `c` as the next certificate after `path` (the leaf first).
fn is_valid(c: &Cert<'_>, kind: Kind, path: &[&Cert<'_>], at: i64) -> Result<(), ChainError> {
    if c.unhandled_critical() {
        return Err(c.invalid("x509: unhandled critical extension"));
    }
    if let Some(child) = path.last() {
        if child.x.issuer().as_raw() != c.x.subject().as_raw() {
            return Err(
                c.invalid("x509: issuer name does not match subject from issuing certificate")
            );
        }
    }
    let v = c.x.validity();
    if at < v.not_before.timestamp() {
        return Err(c.invalid(format!(
            "x509: certificate has expired or is not yet valid: the time checked is before {}",
            v.not_before
        )));
    }
    if at > v.not_after.timestamp() {
        return Err(c.invalid(format!(
            "x509: certificate has expired or is not yet valid: the time checked is after {}",
            v.not_after
        )));
    }
    if !c.eku_allows_server_auth() {
        return Err(c.invalid("x509: certificate specifies an incompatible key usage"));
    }
    if kind != Kind::Leaf {
        if let Some(leaf) = path.first() {
            check_name_constraints(c, leaf)?;
        }
    }
    let bc = c.basic_constraints();
    if kind == Kind::Intermediate && !bc.is_some_and(|(ca, _)| ca) {
        return Err(c.invalid("x509: certificate is not authorized to sign other certificates"));
    }
    if let Some((_, Some(max))) = bc {
        let intermediates = path.len().saturating_sub(1);
        if intermediates > max as usize {
            return Err(c.invalid("x509: too many intermediates for path length constraint"));
        }
    }
    Ok(())
}

/// `CheckSignatureFrom` of x509.go: `parent` signed `child`.
fn check_signature_from(
    child: &Cert<'_>,
    parent: &Cert<'_>,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<(), String> {
    let bc = parent.basic_constraints();
    let v3 = parent.x.version().0 == 2;
    if (v3 && bc.is_none()) || bc.is_some_and(|(ca, _)| !ca) {
        return Err(
            "x509: invalid signature: parent certificate cannot sign this kind of certificate"
                .to_string(),
        );
    }
    let alg = algs
        .all
        .iter()
        .find(|a| {
            a.signature_alg_id().as_ref() == child.sig_alg
                && a.public_key_alg_id().as_ref() == parent.key_alg
        })
        .ok_or_else(|| "x509: cannot verify signature: algorithm unimplemented".to_string())?;
    alg.verify_signature(
        &parent.x.public_key().subject_public_key.data,
        child.x.tbs_certificate.as_ref(),
        &child.x.signature_value.data,
    )
    .map_err(|_| "x509: invalid signature".to_string())
}

/// `alreadyInChain` of verify.go: same subject, same key and same SAN as a certificate of `path`.
fn already_in_chain(c: &Cert<'_>, path: &[&Cert<'_>]) -> bool {
    let san = |x: &Cert<'_>| {
        x.x.iter_extensions()
            .find(|e| e.oid.to_id_string() == "2.5.29.17")
            .map(|e| e.value.to_vec())
    };
    path.iter().any(|p| {
        p.x.subject().as_raw() == c.x.subject().as_raw()
            && p.x.public_key().raw == c.x.public_key().raw
            && san(p) == san(c)
    })
}

struct Search<'a, 'c> {
    roots: &'a [Cert<'c>],
    intermediates: &'a [Cert<'c>],
    at: i64,
    algs: &'a WebPkiSupportedAlgorithms,
    signature_checks: usize,
}

impl<'a, 'c> Search<'a, 'c> {
    /// `findPotentialParents` of cert_pool.go: the certificates named as `c`'s issuer, those whose key
    /// identifier matches `c`'s authority key identifier first.
    fn parents(&self, pool: &'a [Cert<'c>], c: &Cert<'_>) -> Vec<&'a Cert<'c>> {
        let mut out: Vec<(u8, &Cert<'c>)> = pool
            .iter()
            .filter(|p| p.x.subject().as_raw() == c.x.issuer().as_raw())
            .map(|p| {
                let rank = match (c.authority_key_id(), p.key_id()) {
                    (Some(a), Some(s)) if a == s => 0,
                    (Some(_), Some(_)) => 2,
                    _ => 1,
                };
                (rank, p)
            })
            .collect();
        out.sort_by_key(|(rank, _)| *rank);
        out.into_iter().map(|(_, p)| p).collect()
    }

    /// `buildChains` of verify.go: whether a path from `path`'s last certificate reaches a root.
    fn build(&mut self, path: &mut Vec<&'a Cert<'c>>) -> Result<(), ChainError> {
        let Some(&c) = path.last() else {
            return Ok(());
        };
        let mut err: Option<ChainError> = None;
        let mut wrong_key: Option<&'static str> = None;
        let candidates = self
            .parents(self.roots, c)
            .into_iter()
            .map(|p| (Kind::Root, p))
            .chain(
                self.parents(self.intermediates, c)
                    .into_iter()
                    .map(|p| (Kind::Intermediate, p)),
            )
            .collect::<Vec<_>>();
        for (kind, candidate) in candidates {
            if already_in_chain(candidate, path) {
                continue;
            }
            self.signature_checks += 1;
            if self.signature_checks > MAX_SIGNATURE_CHECKS {
                return Err(ChainError::Budget);
            }
            if check_signature_from(c, candidate, self.algs).is_err() {
                wrong_key.get_or_insert(if kind == Kind::Root {
                    "caBundle"
                } else {
                    "chain"
                });
                continue;
            }
            if let Err(e) = is_valid(candidate, kind, path, self.at) {
                err = Some(e);
                continue;
            }
            match kind {
                Kind::Root => return Ok(()),
                _ => {
                    path.push(candidate);
                    let r = self.build(path);
                    path.pop();
                    match r {
                        Ok(()) => return Ok(()),
                        Err(ChainError::Budget) => return Err(ChainError::Budget),
                        Err(e) => err = Some(e),
                    }
                }
            }
        }
        Err(err.unwrap_or_else(|| ChainError::UnknownAuthority {
            depth: path.len() - 1,
            subject: c.subject(),
            issuer: c.x.issuer().to_string(),
            wrong_key,
        }))
    }
}

/// Verifies `chain` (the leaf first, then the intermediates the server sends, in any order) against the
/// caBundle's `roots` at the Unix time `at`, as Go's `Verify` with `Roots` = the caBundle,
/// `Intermediates` = the rest of the chain and the default key usage (serverAuth). The name is checked
/// separately (`certificate-name`).
pub fn verify(
    chain: &[CertificateDer<'_>],
    roots: &[CertificateDer<'_>],
    at: i64,
    algs: &WebPkiSupportedAlgorithms,
) -> Result<(), ChainError> {
    let Some(leaf_der) = chain.first() else {
        return Err(ChainError::Parse {
            index: 0,
            detail: "empty chain".to_string(),
        });
    };
    let leaf = parse(0, leaf_der)?;
    let intermediates = chain[1..]
        .iter()
        .enumerate()
        .map(|(i, d)| parse(i + 1, d))
        .collect::<Result<Vec<_>, _>>()?;
    // A caBundle certificate that does not parse cannot be a parent, as Go's AppendCertsFromPEM skips it.
    let roots: Vec<Cert<'_>> = roots
        .iter()
        .enumerate()
        .filter_map(|(i, d)| parse(i, d).ok())
        .collect();
    is_valid(&leaf, Kind::Leaf, &[], at)?;
    if roots.iter().any(|r| r.x.as_raw() == leaf.x.as_raw()) {
        return Ok(());
    }
    let mut search = Search {
        roots: &roots,
        intermediates: &intermediates,
        at,
        algs,
        signature_checks: 0,
    };
    search.build(&mut vec![&leaf])
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
        GeneralSubtree, IsCa, Issuer, KeyPair,
    };

    const NAME: &str = "sidecar-injector.istio-system.svc";

    fn now() -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }

    fn params(cn: &str, ca: bool) -> CertificateParams {
        let names = if ca { vec![] } else { vec![NAME.to_string()] };
        let mut p = CertificateParams::new(names).expect("params");
        p.distinguished_name = DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, cn);
        if ca {
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        } else {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        }
        p.not_before = now() - time::Duration::days(10);
        p.not_after = now() + time::Duration::days(400);
        p
    }

    /// A root and `n` intermediates below it, as (root DER, [intermediate n, ..., intermediate 1], the
    /// issuer of the leaf). `tweak(i, params)` changes intermediate `i` (1 = under the root) first.
    fn cas(
        n: usize,
        root: CertificateParams,
        tweak: &dyn Fn(usize, &mut CertificateParams),
    ) -> (
        CertificateDer<'static>,
        Vec<CertificateDer<'static>>,
        Issuer<'static, KeyPair>,
    ) {
        let key = KeyPair::generate().expect("key");
        let root_der = root.self_signed(&key).expect("root").der().clone();
        let mut issuer = Issuer::new(root, key);
        let mut chain = Vec::new();
        for i in 1..=n {
            let mut p = params(&format!("Intermediate {i}"), true);
            tweak(i, &mut p);
            let key = KeyPair::generate().expect("key");
            chain.push(
                p.signed_by(&key, &issuer)
                    .expect("intermediate")
                    .der()
                    .clone(),
            );
            issuer = Issuer::new(p, key);
        }
        chain.reverse();
        (root_der, chain, issuer)
    }

    fn leaf(
        issuer: &Issuer<'_, KeyPair>,
        tweak: &dyn Fn(&mut CertificateParams),
    ) -> CertificateDer<'static> {
        let mut p = params("leaf", false);
        tweak(&mut p);
        let key = KeyPair::generate().expect("key");
        p.signed_by(&key, issuer).expect("leaf").der().clone()
    }

    fn algs() -> WebPkiSupportedAlgorithms {
        crate::shared::tls::crypto_provider().signature_verification_algorithms
    }

    fn run(
        chain: &[CertificateDer<'static>],
        roots: &[CertificateDer<'static>],
    ) -> Result<(), ChainError> {
        verify(chain, roots, now().unix_timestamp(), &algs())
    }

    fn full(
        leaf_der: CertificateDer<'static>,
        intermediates: Vec<CertificateDer<'static>>,
    ) -> Vec<CertificateDer<'static>> {
        let mut chain = vec![leaf_der];
        chain.extend(intermediates);
        chain
    }

    #[test]
    fn twenty_intermediates_verify_as_in_go_and_webpki_refuses_them() {
        let (root, intermediates, issuer) = cas(20, params("Root", true), &|_, _| {});
        let chain = full(leaf(&issuer, &|_| {}), intermediates);
        assert_eq!(run(&chain, std::slice::from_ref(&root)), Ok(()));
        // In any order, as Go's Intermediates pool.
        let mut shuffled = chain.clone();
        shuffled[1..].reverse();
        assert_eq!(run(&shuffled, std::slice::from_ref(&root)), Ok(()));
        // The verifier doctor used before: more than 6 intermediates is an error there.
        let mut store = rustls::RootCertStore::empty();
        store.add(root.clone()).expect("root");
        let parsed = rustls::server::ParsedCertificate::try_from(&chain[0]).expect("parsed");
        let at = rustls::pki_types::UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            now().unix_timestamp() as u64,
        ));
        assert!(rustls::client::verify_server_cert_signed_by_trust_anchor(
            &parsed,
            &store,
            &chain[1..],
            at,
            algs().all
        )
        .is_err());
    }

    #[test]
    fn a_missing_intermediate_or_another_root_is_an_unknown_authority() {
        let (root, intermediates, issuer) = cas(20, params("Root", true), &|_, _| {});
        let mut chain = full(leaf(&issuer, &|_| {}), intermediates);
        // chain[k] is intermediate 21-k: without intermediate 11, intermediate 12 (depth 9) has no issuer.
        let mut broken = chain.clone();
        broken.remove(10);
        match run(&broken, std::slice::from_ref(&root)) {
            Err(ChainError::UnknownAuthority {
                depth: 9,
                subject,
                issuer,
                wrong_key: None,
            }) => {
                assert!(subject.contains("Intermediate 12"), "{subject}");
                assert!(issuer.contains("Intermediate 11"), "{issuer}");
            }
            other => panic!("{other:?}"),
        }
        // A root of the same name and another key: Go's unknown authority too, with the key named.
        let (other_root, _, _) = cas(0, params("Root", true), &|_, _| {});
        assert!(matches!(
            run(&chain, &[other_root]),
            Err(ChainError::UnknownAuthority {
                depth: 20,
                wrong_key: Some("caBundle"),
                ..
            })
        ));
        // No caBundle certificate named as the issuer at all.
        let (stranger, _, _) = cas(0, params("Stranger", true), &|_, _| {});
        assert!(matches!(
            run(&chain, &[stranger]),
            Err(ChainError::UnknownAuthority {
                depth: 20,
                wrong_key: None,
                ..
            })
        ));
        // The leaf itself in the caBundle verifies (Go's `Roots.contains(c)`).
        chain.truncate(1);
        assert_eq!(run(&chain, &chain.clone()), Ok(()));
    }

    #[test]
    fn the_search_stops_after_go_s_100_signature_checks() {
        // `decoys` certificates named as the leaf's issuer but with another key come before the real
        // intermediate, so each costs a signature check: 98 decoys + the intermediate + the root is 100
        // checks, 99 decoys is 101, which Go refuses although a path exists.
        let (root, intermediates, issuer) = cas(1, params("Root", true), &|_, _| {});
        let leaf_der = leaf(&issuer, &|p| {
            p.use_authority_key_identifier_extension = false
        });
        let decoy_key = KeyPair::generate().expect("key");
        let (_, _, decoy_issuer) = cas(0, params("Root", true), &|_, _| {});
        let decoy = |i: usize| {
            let mut p = params("Intermediate 1", true);
            p.serial_number = Some(rcgen::SerialNumber::from(i as u64 + 1000));
            p.signed_by(&decoy_key, &decoy_issuer)
                .expect("decoy")
                .der()
                .clone()
        };
        let with = |decoys: usize| {
            let mut chain = vec![leaf_der.clone()];
            chain.extend((0..decoys).map(decoy));
            chain.extend(intermediates.iter().cloned());
            run(&chain, std::slice::from_ref(&root))
        };
        assert_eq!(with(98), Ok(()));
        assert_eq!(with(99), Err(ChainError::Budget));
        assert!(ChainError::Budget
            .to_string()
            .contains("signature check attempts limit reached"));
    }

    fn invalid_reason(r: Result<(), ChainError>) -> String {
        match r {
            Err(ChainError::Invalid { reason, .. }) => reason,
            other => panic!("not Invalid: {other:?}"),
        }
    }

    #[test]
    fn go_s_is_valid_checks_apply_to_every_certificate_of_the_path() {
        let root_params = params("Root", true);
        // An expired intermediate.
        let (root, inter, issuer) = cas(3, root_params.clone(), &|i, p| {
            if i == 2 {
                p.not_after = now() - time::Duration::days(1);
            }
        });
        let reason = invalid_reason(run(&full(leaf(&issuer, &|_| {}), inter), &[root]));
        assert!(reason.contains("expired or is not yet valid"), "{reason}");
        // An expired root (webpki never looks at a trust anchor's dates; Go does).
        let mut old_root = root_params.clone();
        old_root.not_before = now() - time::Duration::days(20);
        old_root.not_after = now() - time::Duration::days(1);
        let (root, inter, issuer) = cas(1, old_root, &|_, _| {});
        let reason = invalid_reason(run(&full(leaf(&issuer, &|_| {}), inter), &[root]));
        assert!(reason.contains("expired"), "{reason}");
        // An intermediate that is not a CA cannot sign (Go's CheckSignatureFrom): unknown authority.
        let (root, inter, issuer) = cas(2, root_params.clone(), &|i, p| {
            if i == 2 {
                p.is_ca = IsCa::ExplicitNoCa;
            }
        });
        assert!(matches!(
            run(&full(leaf(&issuer, &|_| {}), inter), &[root]),
            Err(ChainError::UnknownAuthority { depth: 0, .. })
        ));
        // A path length constraint of 0 on the root with one intermediate below it.
        let mut short = root_params.clone();
        short.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        let (root, inter, issuer) = cas(1, short, &|_, _| {});
        let reason = invalid_reason(run(&full(leaf(&issuer, &|_| {}), inter), &[root]));
        assert!(reason.contains("too many intermediates"), "{reason}");
        // An intermediate for client authentication only (Go nests the EKU down the chain).
        let (root, inter, issuer) = cas(2, root_params.clone(), &|i, p| {
            if i == 1 {
                p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            }
        });
        let reason = invalid_reason(run(&full(leaf(&issuer, &|_| {}), inter), &[root]));
        assert!(reason.contains("incompatible key usage"), "{reason}");
        // An unknown critical extension on the leaf.
        let (root, inter, issuer) = cas(1, root_params.clone(), &|_, _| {});
        let odd = leaf(&issuer, &|p| {
            let mut e =
                rcgen::CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 99999, 1], vec![5, 0]);
            e.set_criticality(true);
            p.custom_extensions = vec![e];
        });
        let reason = invalid_reason(run(&full(odd, inter), &[root]));
        assert!(reason.contains("unhandled critical extension"), "{reason}");
    }

    #[test]
    fn name_constraints_of_a_ca_bind_the_leaf_s_names() {
        let constrained = |permitted: &[&str], excluded: &[&str]| {
            let permitted: Vec<GeneralSubtree> = permitted
                .iter()
                .map(|d| GeneralSubtree::DnsName(d.to_string()))
                .collect();
            let excluded: Vec<GeneralSubtree> = excluded
                .iter()
                .map(|d| GeneralSubtree::DnsName(d.to_string()))
                .collect();
            let (root, inter, issuer) = cas(2, params("Root", true), &move |i, p| {
                if i == 1 {
                    p.name_constraints = Some(rcgen::NameConstraints {
                        permitted_subtrees: permitted.clone(),
                        excluded_subtrees: excluded.clone(),
                    });
                }
            });
            run(&full(leaf(&issuer, &|_| {}), inter), &[root])
        };
        assert_eq!(constrained(&["svc"], &[]), Ok(()));
        assert_eq!(
            constrained(&["istio-system.svc", "example.org"], &[]),
            Ok(())
        );
        let reason = invalid_reason(constrained(&["example.org"], &[]));
        assert!(
            reason.contains("is not permitted by any constraint"),
            "{reason}"
        );
        let reason = invalid_reason(constrained(&[], &["istio-system.svc"]));
        assert!(reason.contains("is excluded by constraint"), "{reason}");
        // A leading period wants at least one more label.
        assert_eq!(constrained(&[".svc"], &[]), Ok(()));
        assert!(constrained(&[".sidecar-injector.istio-system.svc"], &[]).is_err());
    }

    #[test]
    fn go_s_domain_matching() {
        assert_eq!(match_domain("a.example.com", "example.com"), Ok(true));
        assert_eq!(match_domain("example.com", "example.com"), Ok(true));
        assert_eq!(match_domain("EXAMPLE.com", "example.COM"), Ok(true));
        assert_eq!(match_domain("example.com", ".example.com"), Ok(false));
        assert_eq!(match_domain("notexample.com", "example.com"), Ok(false));
        assert_eq!(match_domain("anything", ""), Ok(true));
        assert!(match_domain("bad..name", "name").is_err());
        assert!(match_ip(&[10, 1, 2, 3], &[10, 0, 0, 0, 255, 0, 0, 0]));
        assert!(!match_ip(&[11, 1, 2, 3], &[10, 0, 0, 0, 255, 0, 0, 0]));
        assert!(!match_ip(&[10, 1, 2, 3], &[0; 32]));
        assert_eq!(match_email("a@example.com", "example.com"), Ok(true));
        assert_eq!(match_email("a@example.com", "b@example.com"), Ok(false));
        assert_eq!(
            match_uri("https://h.example.com:8443/x", "example.com"),
            Ok(true)
        );
        assert!(match_uri("https://10.0.0.1/x", "example.com").is_err());
    }
}
