//! A caBundle as a set of CA certificates: read bounded from what a configuration holds (anything that
//! is not a PEM certificate is ignored), and written back in one canonical form, so that replicas that
//! agree on the set write the same bytes and never undo each other's write.

/// At most this many certificates in a bundle we write, and in a record.
pub const MAX_CERTS: usize = 32;
/// At most this many bytes in a bundle we write (PEM), besides our own CA file.
pub const MAX_BYTES: usize = 128 * 1024;
/// A bundle read from a configuration that is larger than this is garbage: none of it is kept. The API
/// server stores objects of up to about 1.5 MiB.
const MAX_READ_BYTES: usize = 2 * 1024 * 1024;
/// At most this many certificates are read from one bundle; the rest is ignored.
const MAX_READ_CERTS: usize = 256;

/// One CA certificate: its DER and the SHA-256 fingerprint of that DER (lowercase hex).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cert {
    pub fingerprint: String,
    pub der: Vec<u8>,
}

impl Cert {
    fn new(der: &[u8]) -> Cert {
        Cert {
            fingerprint: sha256_hex(der),
            der: der.to_vec(),
        }
    }

    /// The PEM text of the certificate (64 base64 characters a line, as Go's `pem.Encode` writes).
    fn pem(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        let b64 = base64_simd::STANDARD.encode_to_string(&self.der);
        for line in b64.as_bytes().chunks(64) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        out.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }

    fn pem_len(&self) -> usize {
        let b64 = self.der.len().div_ceil(3) * 4;
        b64 + b64.div_ceil(64) + 28 + 26
    }
}

/// The SHA-256 of `bytes` in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut hex = String::with_capacity(64);
    for b in digest.as_ref() {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The certificates of a caBundle, in order, each once: the `CERTIFICATE` blocks of its PEM. Other
/// blocks and text between blocks are skipped. Reading stops at the first malformed block, and after
/// [`MAX_READ_CERTS`] certificates. A bundle over 2 MiB yields nothing.
pub fn read(bundle: &[u8]) -> Vec<Cert> {
    if bundle.len() > MAX_READ_BYTES {
        return Vec::new();
    }
    let mut certs: Vec<Cert> = Vec::new();
    let mut rest = bundle;
    while certs.len() < MAX_READ_CERTS {
        match rustls_pemfile::read_one(&mut rest) {
            Ok(Some(rustls_pemfile::Item::X509Certificate(der))) => {
                let cert = Cert::new(&der);
                if !certs.iter().any(|c| c.fingerprint == cert.fingerprint) {
                    certs.push(cert);
                }
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
    certs
}

/// Why our own CA file cannot be what we write.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OwnCaError {
    /// No certificate could be read from it.
    #[error("--ca-bundle holds no PEM certificate")]
    Empty,
    /// More certificates than a bundle may hold.
    #[error("--ca-bundle holds {0} certificates; at most {MAX_CERTS} are written into a caBundle")]
    TooManyCerts(usize),
    /// More bytes than a bundle may hold.
    #[error("--ca-bundle is {0} bytes; at most {MAX_BYTES} are written into a caBundle")]
    TooLarge(usize),
}

/// Our own CA: the file's bytes, written as they are when no other replica's CA is needed (as Istio's
/// patcher writes them), and its certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnCa {
    pub pem: Vec<u8>,
    pub certs: Vec<Cert>,
}

impl OwnCa {
    /// Checks our CA file's content against the bundle's bounds.
    pub fn new(pem: &[u8]) -> Result<OwnCa, OwnCaError> {
        if pem.len() > MAX_BYTES {
            return Err(OwnCaError::TooLarge(pem.len()));
        }
        let certs = read(pem);
        match certs.len() {
            0 => Err(OwnCaError::Empty),
            n if n > MAX_CERTS => Err(OwnCaError::TooManyCerts(n)),
            _ => Ok(OwnCa {
                pem: pem.to_vec(),
                certs,
            }),
        }
    }

    /// The sorted fingerprints of our certificates (what our record names).
    pub fn fingerprints(&self) -> Vec<String> {
        let mut f: Vec<String> = self.certs.iter().map(|c| c.fingerprint.clone()).collect();
        f.sort();
        f.dedup();
        f
    }

    pub fn has(&self, fingerprint: &str) -> bool {
        self.certs.iter().any(|c| c.fingerprint == fingerprint)
    }

    /// The bundle of our CA plus `others` (other live replicas' certificates, none of ours). With no
    /// others, our file's bytes. Else every certificate once, sorted by fingerprint, in canonical PEM, so
    /// that each replica computes the same bytes from the same set. Others that would take the bundle
    /// past [`MAX_CERTS`] or [`MAX_BYTES`] are left out, the lowest fingerprints kept.
    pub fn with(&self, others: &[&Cert]) -> Vec<u8> {
        if others.is_empty() {
            return self.pem.clone();
        }
        let mut all: Vec<&Cert> = self.certs.iter().collect();
        let mut bytes: usize = all.iter().map(|c| c.pem_len()).sum();
        let mut others = others.to_vec();
        others.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        for c in others {
            if all.len() >= MAX_CERTS || bytes + c.pem_len() > MAX_BYTES {
                break;
            }
            bytes += c.pem_len();
            all.push(c);
        }
        canonical(all)
    }
}

/// `certs` sorted by fingerprint, each once, in canonical PEM.
pub fn canonical(mut certs: Vec<&Cert>) -> Vec<u8> {
    certs.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
    certs.dedup_by(|a, b| a.fingerprint == b.fingerprint);
    let mut out = Vec::new();
    for c in certs {
        c.pem(&mut out);
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(super) mod tests {
    use super::*;

    /// A self-signed CA certificate in PEM, named `cn`.
    pub(crate) fn ca_pem(cn: &str) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem().into_bytes()
    }

    #[test]
    fn a_bundle_is_read_as_its_certificates_and_garbage_is_ignored() {
        let (a, b) = (ca_pem("a"), ca_pem("b"));
        let both = [
            a.as_slice(),
            b"comment between\n",
            b.as_slice(),
            a.as_slice(),
        ]
        .concat();
        let certs = read(&both);
        assert_eq!(certs.len(), 2, "each certificate once");
        assert_eq!(certs[0], read(&a)[0]);
        // Nothing, text, a private key block, broken base64, a huge bundle: no certificates, no panic.
        for garbage in [
            b"".to_vec(),
            b"not the CA".to_vec(),
            b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".to_vec(),
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec(),
            b"-----BEGIN CERTIFICATE-----\nAAAA".to_vec(),
            [a.as_slice(), &vec![b'x'; MAX_READ_BYTES]].concat(),
        ] {
            assert!(
                read(&garbage).is_empty(),
                "{:.60}",
                String::from_utf8_lossy(&garbage)
            );
        }
        // Reading stops at a malformed block, keeping what came before.
        let broken = [
            a.as_slice(),
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
            b.as_slice(),
        ]
        .concat();
        assert_eq!(read(&broken).len(), 1);
    }

    #[test]
    fn our_ca_alone_is_our_file_and_with_others_a_canonical_set() {
        let (a, b, c) = (ca_pem("a"), ca_pem("b"), ca_pem("c"));
        let ours = OwnCa::new(&[b"# our CA\n".as_slice(), &a].concat()).unwrap();
        assert_eq!(ours.with(&[]), ours.pem, "alone: the file as it is");
        let (b, c) = (read(&b).remove(0), read(&c).remove(0));
        let abc = ours.with(&[&b, &c]);
        assert_eq!(abc, ours.with(&[&c, &b]), "the same set, the same bytes");
        let certs = read(&abc);
        assert_eq!(certs.len(), 3);
        assert!(certs
            .windows(2)
            .all(|w| w[0].fingerprint < w[1].fingerprint));
        // Another replica holding b computes the same bytes for the same three.
        let theirs = OwnCa {
            pem: Vec::new(),
            certs: vec![b.clone()],
        };
        let a_cert = read(&a).remove(0);
        assert_eq!(theirs.with(&[&a_cert, &c]), abc);
    }

    #[test]
    fn bundles_are_bounded() {
        let ours = OwnCa::new(&ca_pem("ours")).unwrap();
        let others: Vec<Cert> = (0..40)
            .map(|i| read(&ca_pem(&format!("o{i}"))).remove(0))
            .collect();
        let refs: Vec<&Cert> = others.iter().collect();
        let bundle = ours.with(&refs);
        let certs = read(&bundle);
        assert_eq!(certs.len(), MAX_CERTS);
        assert!(
            certs.iter().any(|c| ours.has(&c.fingerprint)),
            "ours is always in"
        );
        assert!(bundle.len() <= MAX_BYTES);
        let many = (0..=MAX_CERTS)
            .map(|i| ca_pem(&format!("m{i}")))
            .collect::<Vec<_>>()
            .concat();
        assert_eq!(
            OwnCa::new(&many),
            Err(OwnCaError::TooManyCerts(MAX_CERTS + 1))
        );
        assert_eq!(OwnCa::new(b"x"), Err(OwnCaError::Empty));
        assert_eq!(
            OwnCa::new(&vec![b'x'; MAX_BYTES + 1]),
            Err(OwnCaError::TooLarge(MAX_BYTES + 1))
        );
        // pem_len is exact.
        let mut out = Vec::new();
        others[0].pem(&mut out);
        assert_eq!(out.len(), others[0].pem_len());
    }
}
