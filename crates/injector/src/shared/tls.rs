//! TLS for `injector serve`: the serving certificate, hot-swappable without a restart.
//!
//! Kubernetes mounts the certificate Secret as a volume whose files are symlinks into a `..data` directory
//! that is swapped atomically on update. [`CertStore`] holds the current pair behind a lock and is the
//! server's [`ResolvesServerCert`], so every new handshake picks up the latest pair while established
//! connections keep theirs. A new pair that does not load (bad PEM, key not matching the certificate)
//! leaves the old one in place.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

/// Loading or using the serving certificate failed.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate or key file could not be read; `flag` names it.
    #[error("{flag} {}: {source}", path.display())]
    Read {
        flag: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// The certificate file holds no PEM `CERTIFICATE` block (or a broken one).
    #[error("{path}: no valid PEM certificate found{detail}")]
    NoCertificate { path: PathBuf, detail: String },
    /// The key file holds no PEM private key (PKCS#8, PKCS#1 or SEC1), or a broken one.
    #[error("{path}: no valid PEM private key found{detail}")]
    NoKey { path: PathBuf, detail: String },
    /// The key is not usable with the certificate (unsupported algorithm, or not the certificate's key).
    #[error("certificate {cert} and key {key} do not form a usable pair: {source}")]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        source: rustls::Error,
    },
    /// The leaf certificate's validity could not be read.
    #[error("{path}: cannot read the certificate's validity: {detail}")]
    Validity { path: PathBuf, detail: String },
    /// Building the rustls server configuration failed.
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The ring provider, installed as the process default so nothing else picks another one.
/// Installing twice is harmless (the second call reports the already installed provider).
pub fn crypto_provider() -> Arc<CryptoProvider> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A loaded certificate/key pair with the leaf's `notAfter`.
#[derive(Debug, Clone)]
pub struct LoadedPair {
    pub key: Arc<CertifiedKey>,
    /// The leaf certificate's notAfter, seconds since the Unix epoch.
    pub not_after_unix: i64,
}

/// Reads and checks a PEM certificate chain and its private key.
pub fn load_pair(
    cert_path: &Path,
    key_path: &Path,
    provider: &CryptoProvider,
) -> Result<LoadedPair, TlsError> {
    let cert_pem = inject::input::read_bytes(cert_path).map_err(|source| TlsError::Read {
        flag: "--tls-cert",
        path: cert_path.to_path_buf(),
        source,
    })?;
    let key_pem = inject::input::read_bytes(key_path).map_err(|source| TlsError::Read {
        flag: "--tls-key",
        path: key_path.to_path_buf(),
        source,
    })?;
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut cert_pem.as_slice())
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::NoCertificate {
            path: cert_path.to_path_buf(),
            detail: format!(": {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert_path.to_path_buf(),
            detail: String::new(),
        });
    }
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut key_pem.as_slice())
        .map_err(|e| TlsError::NoKey {
            path: key_path.to_path_buf(),
            detail: format!(": {e}"),
        })?
        .ok_or_else(|| TlsError::NoKey {
            path: key_path.to_path_buf(),
            detail: String::new(),
        })?;
    let not_after_unix = not_after(&certs[0]).map_err(|detail| TlsError::Validity {
        path: cert_path.to_path_buf(),
        detail,
    })?;
    let key = CertifiedKey::from_der(certs, key, provider).map_err(|source| TlsError::Pair {
        cert: cert_path.to_path_buf(),
        key: key_path.to_path_buf(),
        source,
    })?;
    Ok(LoadedPair {
        key: Arc::new(key),
        not_after_unix,
    })
}

/// The certificate's notAfter as Unix seconds.
pub fn not_after(cert: &CertificateDer<'_>) -> Result<i64, String> {
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| e.to_string())?;
    Ok(parsed.validity().not_after.timestamp())
}

/// The serving certificate currently in use; the server's certificate resolver.
#[derive(Debug)]
pub struct CertStore {
    current: RwLock<LoadedPair>,
}

impl CertStore {
    pub fn new(pair: LoadedPair) -> CertStore {
        CertStore {
            current: RwLock::new(pair),
        }
    }

    /// Replaces the pair used by new handshakes.
    pub fn replace(&self, pair: LoadedPair) {
        // A poisoned lock only means a writer panicked mid-assignment of an Arc; the value is still whole.
        let mut guard = self.current.write().unwrap_or_else(|e| e.into_inner());
        *guard = pair;
    }

    /// The pair in use.
    pub fn current(&self) -> LoadedPair {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Seconds until the serving certificate expires (negative once expired).
    pub fn seconds_until_expiry(&self) -> i64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_secs() as i64;
        self.current().not_after_unix - now
    }
}

impl ResolvesServerCert for CertStore {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current().key)
    }
}

/// The server configuration: TLS 1.2 and 1.3 only, ALPN `h2` then `http/1.1`, certificate from `store`.
pub fn server_config(
    store: Arc<CertStore>,
    provider: Arc<CryptoProvider>,
) -> Result<ServerConfig, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(store);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
