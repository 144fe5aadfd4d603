//! `injector certs`: a CA, a serving certificate for `<service>.<namespace>.svc` and the
//! MutatingWebhookConfigurations of `injector webhook-config` carrying the CA as their `caBundle` —
//! everything needed to register the webhook without cert-manager.
//!
//! Also writes the pair as a `kubernetes.io/tls` Secret manifest (`secret.yaml`), ready for
//! `kubectl apply` or a kustomize patch.
//!
//! An existing CA in `--out-dir` is reused, so re-running the command rotates the serving certificate while
//! the `caBundle` registered with the API server stays valid.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::shared::webhook_config;

/// File names written to `--out-dir` (the serving pair uses the names of a `kubernetes.io/tls` Secret).
pub const CA_CERT: &str = "ca.crt";
pub const CA_KEY: &str = "ca.key";
pub const TLS_CERT: &str = "tls.crt";
pub const TLS_KEY: &str = "tls.key";
pub const WEBHOOK_CONFIG: &str = "mutatingwebhookconfiguration.yaml";
/// The serving pair as a `kubernetes.io/tls` Secret manifest.
pub const SECRET: &str = "secret.yaml";

/// `injector certs` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Service, namespace, revision, tags and the rest of the MutatingWebhookConfigurations written.
    #[command(flatten)]
    pub webhook: webhook_config::Args,
    /// Extra subject alternative names (DNS names or IP addresses), e.g. `localhost`, `127.0.0.1`.
    #[arg(long = "san")]
    pub sans: Vec<String>,
    /// Validity of the serving certificate, in days.
    #[arg(long, default_value_t = 365, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub validity_days: u32,
    /// Validity of a newly generated CA, in days.
    #[arg(long, default_value_t = 3650, value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub ca_validity_days: u32,
    /// Directory for `ca.crt`, `ca.key`, `tls.crt`, `tls.key` and `mutatingwebhookconfiguration.yaml`.
    #[arg(long, default_value = ".")]
    pub out_dir: PathBuf,
    /// Generate a new CA even when `ca.crt`/`ca.key` exist in `--out-dir`.
    #[arg(long)]
    pub new_ca: bool,
    /// Name of the `kubernetes.io/tls` Secret written to `secret.yaml` (in `--namespace`).
    #[arg(long, default_value = "sidecar-injector-tls")]
    pub secret_name: String,
}

/// What [`generate`] produced, PEM-encoded.
#[derive(Debug, Clone)]
pub struct Generated {
    pub ca_cert_pem: String,
    pub ca_key_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
    /// Whether the CA was generated now (false: reused from `--out-dir`).
    pub new_ca: bool,
}

fn validity(days: u32) -> (time::OffsetDateTime, time::OffsetDateTime) {
    // Backdate a little: clocks in a cluster are rarely exactly in step.
    let now = time::OffsetDateTime::now_utc();
    (
        now - time::Duration::minutes(5),
        now + time::Duration::days(i64::from(days)),
    )
}

fn ca_params(days: u32) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "sidecar-injector CA");
    dn.push(DnType::OrganizationName, "sidecar-inject");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    (params.not_before, params.not_after) = validity(days);
    Ok(params)
}

/// Generates (or reuses, when `existing_ca` is given as PEM cert and key) a CA and signs a serving
/// certificate for the service's DNS names plus `args.sans`.
pub fn generate(args: &Args, existing_ca: Option<(String, String)>) -> anyhow::Result<Generated> {
    let (ca_cert_pem, ca_key, new_ca) = match existing_ca {
        Some((cert_pem, key_pem)) => {
            let key = KeyPair::from_pem(&key_pem).context("parsing the existing CA key")?;
            (cert_pem, key, false)
        }
        None => {
            let key = KeyPair::generate().context("generating the CA key")?;
            let cert = ca_params(args.ca_validity_days)?
                .self_signed(&key)
                .context("signing the CA certificate")?;
            (cert.pem(), key, true)
        }
    };
    let ca_key_pem = ca_key.serialize_pem();
    let issuer =
        Issuer::from_ca_cert_pem(&ca_cert_pem, ca_key).context("reading the CA certificate")?;

    let svc = &args.webhook.service;
    let ns = &args.webhook.scope.namespace;
    let mut names = vec![
        format!("{svc}.{ns}.svc"),
        format!("{svc}.{ns}.svc.cluster.local"),
        format!("{svc}.{ns}"),
        svc.clone(),
    ];
    for s in &args.sans {
        if !names.contains(s) {
            names.push(s.clone());
        }
    }
    let mut params = CertificateParams::new(names.clone())
        .with_context(|| format!("invalid subject alternative name in {names:?}"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, format!("{svc}.{ns}.svc"));
    params.distinguished_name = dn;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    (params.not_before, params.not_after) = validity(args.validity_days);
    let key = KeyPair::generate().context("generating the serving key")?;
    let cert = params
        .signed_by(&key, &issuer)
        .context("signing the serving certificate")?;
    Ok(Generated {
        ca_cert_pem,
        ca_key_pem,
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        new_ca,
    })
}

/// The MutatingWebhookConfigurations for `args` with `ca_pem` as caBundle, as a YAML stream.
pub fn webhook_yaml(args: &Args, ca_pem: &str) -> anyhow::Result<String> {
    Ok(args.webhook.yaml(Some(ca_pem.as_bytes()))?)
}

/// The serving pair as a `kubernetes.io/tls` Secret in the service's namespace, as YAML.
pub fn secret_yaml(args: &Args, cert_pem: &str, key_pem: &str) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;
    let mut data = std::collections::BTreeMap::new();
    data.insert(
        "tls.crt".to_string(),
        ByteString(cert_pem.as_bytes().to_vec()),
    );
    data.insert(
        "tls.key".to_string(),
        ByteString(key_pem.as_bytes().to_vec()),
    );
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(args.secret_name.clone()),
            namespace: Some(args.webhook.scope.namespace.clone()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(data),
        ..Default::default()
    };
    serde_saphyr::to_string(&secret).context("serialising the Secret")
}

fn write_file(path: &Path, contents: &str, mode: u32) -> anyhow::Result<()> {
    // Write beside and rename, so a running server polling the file never reads half of it.
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(contents.as_bytes())
        .with_context(|| format!("writing {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

/// Runs `injector certs`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let ca_cert = args.out_dir.join(CA_CERT);
    let ca_key = args.out_dir.join(CA_KEY);
    let existing = if !args.new_ca && ca_cert.exists() && ca_key.exists() {
        Some((
            inject::input::read_text(&ca_cert)
                .with_context(|| format!("reading {}", ca_cert.display()))?,
            inject::input::read_text(&ca_key)
                .with_context(|| format!("reading {}", ca_key.display()))?,
        ))
    } else {
        None
    };
    let g = generate(&args, existing)?;
    if g.new_ca {
        write_file(&ca_key, &g.ca_key_pem, 0o600)?;
        write_file(&ca_cert, &g.ca_cert_pem, 0o644)?;
    }
    // Key first: a server polling the pair then sees a mismatch for one poll at most, never a stale pair.
    write_file(&args.out_dir.join(TLS_KEY), &g.key_pem, 0o600)?;
    write_file(&args.out_dir.join(TLS_CERT), &g.cert_pem, 0o644)?;
    // The Secret holds the private key: same mode as tls.key.
    write_file(
        &args.out_dir.join(SECRET),
        &secret_yaml(&args, &g.cert_pem, &g.key_pem)?,
        0o600,
    )?;
    let yaml = webhook_yaml(&args, &g.ca_cert_pem)?;
    write_file(&args.out_dir.join(WEBHOOK_CONFIG), &yaml, 0o644)?;
    eprintln!(
        "{} CA, serving certificate for {}.{}.svc, {} and {} written to {}",
        if g.new_ca { "new" } else { "reused" },
        args.webhook.service,
        args.webhook.scope.namespace,
        SECRET,
        WEBHOOK_CONFIG,
        args.out_dir.display()
    );
    Ok(())
}
