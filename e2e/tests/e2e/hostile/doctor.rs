//! `injector doctor` against hostile URLs, paths, servers and chains, each against
//! a real TLS server on 127.0.0.1: a CR/LF in `--url` is a usage error and in `clientConfig.service.path`
//! an error finding, and neither reaches the server; a server that answers completely but keeps the
//! connection open is OK; a chain of 20 intermediates the API server (Go) accepts is OK while a broken
//! one is still an error; `failurePolicy: Maybe` and an `http://` `clientConfig.url` are errors.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use e2e::apiserver::TempDir;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::{json, Value};
use test_support::admission_review;

use crate::doctor::{
    args, doctor, doctor_finds_errors, findings, the_error, webhook_config, SERVICE_NAME,
};

/// How the test server ends its answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// `Content-Length`, then the connection is closed.
    Close,
    /// `Content-Length`, then the connection is held open until the client goes.
    LengthKeepOpen,
    /// Chunked, then the connection is held open until the client goes.
    ChunkedKeepOpen,
}

/// A webhook on 127.0.0.1 that answers every AdmissionReview `allowed: true` with the request's uid
/// and records the connections and the raw requests it got. It reads requests leniently (the head up
/// to the blank line, then `Content-Length` bytes), as a server that does not refuse a broken request
/// line would.
struct Webhook {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Webhook {
    fn start(
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        answer: Answer,
    ) -> Webhook {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (c, r) = (connections.clone(), requests.clone());
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                c.fetch_add(1, Ordering::SeqCst);
                let (config, r) = (config.clone(), r.clone());
                std::thread::spawn(move || {
                    let _ = handle(config, tcp, answer, &r);
                });
            }
        });
        Webhook {
            addr,
            connections,
            requests,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn requests(&self) -> Vec<Vec<u8>> {
        self.requests.lock().unwrap().clone()
    }
}

fn handle(
    config: Arc<rustls::ServerConfig>,
    tcp: TcpStream,
    answer: Answer,
    requests: &Mutex<Vec<Vec<u8>>>,
) -> std::io::Result<()> {
    let conn = rustls::ServerConnection::new(config).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = tls.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .split("\r\n")
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while raw.len() < head_end + length {
        let n = tls.read(&mut buf)?;
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    requests.lock().unwrap().push(raw.clone());
    let review: Value = serde_json::from_slice(&raw[head_end..]).unwrap_or(Value::Null);
    let uid = review["request"]["uid"].as_str().unwrap_or_default();
    let body = admission_review::answer(
        admission_review::API_VERSIONS[0],
        json!({"uid": uid, "allowed": true}),
    )
    .to_string();
    let out = match answer {
        Answer::Close | Answer::LengthKeepOpen => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        Answer::ChunkedKeepOpen => {
            let (a, b) = body.split_at(body.len() / 2);
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n\
                 {:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
                a.len(),
                b.len()
            )
        }
    };
    tls.write_all(out.as_bytes())?;
    tls.flush()?;
    if answer == Answer::Close {
        tls.conn.send_close_notify();
        tls.flush()?;
        return Ok(());
    }
    // Held open: read until the client closes (or forever, which ends with the test process).
    while tls.read(&mut buf)? > 0 {}
    Ok(())
}

/// A CA and the serving pair it issues.
struct Pki {
    dir: PathBuf,
    /// The caBundle: the root.
    ca: PathBuf,
    /// The chain as served: the leaf, then the intermediates from the leaf up.
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Pki {
    /// A root, `intermediates` CAs below it (distinct names, "Intermediate 1" under the root) and a leaf
    /// for the service's TLS name at the bottom.
    fn new(dir: &Path, intermediates: usize) -> Pki {
        let now = time::OffsetDateTime::now_utc();
        let ca_params = |cn: &str| {
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.distinguished_name = DistinguishedName::new();
            p.distinguished_name.push(DnType::CommonName, cn);
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.not_before = now - time::Duration::days(10);
            p.not_after = now + time::Duration::days(400);
            p
        };
        let root_key = KeyPair::generate().unwrap();
        let root = ca_params("doctor test root");
        let root_pem = root.self_signed(&root_key).unwrap().pem();
        let mut issuer = Issuer::new(root, root_key);
        let mut chain = Vec::new();
        for i in 1..=intermediates {
            let p = ca_params(&format!("Intermediate {i}"));
            let key = KeyPair::generate().unwrap();
            chain.push(p.signed_by(&key, &issuer).unwrap().der().clone());
            issuer = Issuer::new(p, key);
        }
        let mut leaf = CertificateParams::new(vec![SERVICE_NAME.to_string()]).unwrap();
        leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        leaf.not_before = now - time::Duration::days(1);
        leaf.not_after = now + time::Duration::days(300);
        let key = KeyPair::generate().unwrap();
        chain.push(leaf.signed_by(&key, &issuer).unwrap().der().clone());
        chain.reverse();
        std::fs::create_dir_all(dir).unwrap();
        let ca = dir.join("ca.crt");
        std::fs::write(&ca, root_pem).unwrap();
        Pki {
            dir: dir.to_path_buf(),
            ca,
            chain,
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        }
    }

    /// `chain` as a PEM file (what `--tls-cert` reads).
    fn pem(&self, name: &str, chain: &[CertificateDer<'static>]) -> PathBuf {
        use base64::Engine;
        let mut pem = String::new();
        for c in chain {
            let b64 = base64::engine::general_purpose::STANDARD.encode(c.as_ref());
            pem.push_str("-----BEGIN CERTIFICATE-----\n");
            for line in b64.as_bytes().chunks(64) {
                pem.push_str(std::str::from_utf8(line).unwrap());
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
        }
        let path = self.dir.join(name);
        std::fs::write(&path, pem).unwrap();
        path
    }

    fn serve(&self, chain: Vec<CertificateDer<'static>>, answer: Answer) -> Webhook {
        Webhook::start(chain, self.key.clone_key(), answer)
    }

    /// `injector webhook-config` for this CA, changed by `edit` and written as JSON.
    fn mwc(&self, name: &str, extra: &[&str], edit: impl FnOnce(&mut Value)) -> PathBuf {
        let yaml = webhook_config(&self.ca, &self.dir.join(format!("{name}.yaml")), extra);
        let mut v: Value = serde_saphyr::from_str(&std::fs::read_to_string(yaml).unwrap()).unwrap();
        edit(&mut v);
        let path = self.dir.join(format!("{name}.json"));
        std::fs::write(&path, v.to_string()).unwrap();
        path
    }
}

/// `injector doctor` with `args` as given (no `-o json`), for the usage errors.
fn doctor_raw(args: &[String]) -> std::process::Output {
    Command::new(e2e::bin("injector"))
        .arg("doctor")
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_control_character_or_space_in_url_is_a_usage_error_and_nothing_is_sent() {
    let dir = TempDir::new("hostile-doctor-url");
    let pki = Pki::new(dir.path(), 0);
    let server = pki.serve(pki.chain.clone(), Answer::Close);
    let mwc = pki.mwc("mwc", &[], |_| {});
    // The clean URL is answered (so the server would take the others too).
    let run = doctor(&args(&mwc, None, Some(server.addr)));
    assert_eq!(run.code, 0, "{:#}", run.report);
    let before = server.connections();
    assert!(before > 0);
    for tail in [
        "/inject\r\nX-Injected: yes",
        "/inject\n",
        "/inject\r",
        "/in ject",
        "/in\tject",
        "/inject\u{7f}",
        "/inject\u{1b}[2J",
    ] {
        let url = format!("https://{}{tail}", server.addr);
        let o = doctor_raw(&[
            "--webhook-config".into(),
            mwc.display().to_string(),
            "--url".into(),
            url.clone(),
        ]);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{url:?}: {stderr}");
        assert!(o.stdout.is_empty(), "{url:?}: a report was printed");
        // The flag and the value, escaped: no raw control character reaches the terminal.
        assert!(
            stderr.contains(&format!("--url {url:?}: ")),
            "{url:?}: {stderr}"
        );
        assert!(stderr.contains("control character"), "{stderr}");
        assert!(
            !stderr.contains(['\r', '\u{7f}', '\u{1b}', '\t']),
            "{stderr:?}"
        );
    }
    assert_eq!(
        server.connections(),
        before,
        "a refused --url reached the server"
    );
}

#[test]
fn a_crlf_in_service_path_is_an_error_finding_and_nothing_is_sent() {
    let dir = TempDir::new("hostile-doctor-path");
    let pki = Pki::new(dir.path(), 0);
    let server = pki.serve(pki.chain.clone(), Answer::Close);
    let injected = "/inject\r\nX-Injected: yes";
    let mwc = pki.mwc("mwc", &[], |v| {
        for w in v["webhooks"].as_array_mut().unwrap() {
            w["clientConfig"]["service"]["path"] = json!(injected);
        }
    });
    let run = doctor_finds_errors(&args(&mwc, None, Some(server.addr)));
    let errs = findings(&run, "error", "client-config");
    let names: Vec<String> = run.report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|f| f["entries"].as_array().unwrap().clone())
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    assert!(!errs.is_empty(), "{:#}", run.report);
    for f in &errs {
        let found = f["found"].as_str().unwrap();
        let entry = f["entries"][0].as_str().unwrap();
        let webhook = entry.split_once('/').unwrap().1;
        assert!(
            found.contains(&format!(
                "webhook {webhook}: clientConfig.service.path {injected:?}"
            )),
            "{found}"
        );
        assert!(!found.contains('\r'), "{found:?}");
    }
    // Every entry is named once.
    let mut entries: Vec<&str> = errs
        .iter()
        .map(|f| f["entries"][0].as_str().unwrap())
        .collect();
    entries.sort();
    entries.dedup();
    assert_eq!(entries.len(), errs.len());
    assert!(
        names.iter().all(|n| entries.contains(&n.as_str())),
        "{names:?}"
    );
    // No request, no connection: doctor sent nothing with that path.
    assert!(findings(&run, "ok", "review").is_empty());
    assert!(server.requests().is_empty());
    assert_eq!(server.connections(), 0);
    // The text form escapes the value as well.
    let o = doctor_raw(&args(&mwc, None, Some(server.addr)));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(r#""/inject\r\nX-Injected: yes""#), "{text}");
    assert!(!text.contains('\r'), "{text:?}");
    assert_eq!(server.connections(), 0);
}

#[test]
fn a_server_that_answers_completely_and_keeps_the_connection_open_is_ok() {
    let dir = TempDir::new("hostile-doctor-keepalive");
    let pki = Pki::new(dir.path(), 0);
    // timeoutSeconds 5: a doctor that reads until the server closes reports "no answer within
    // timeoutSeconds (5 s)" here, whatever the machine's speed.
    let mwc = pki.mwc("mwc", &["--timeout-seconds", "5"], |_| {});
    for answer in [Answer::LengthKeepOpen, Answer::ChunkedKeepOpen] {
        let server = pki.serve(pki.chain.clone(), answer);
        let run = doctor(&args(&mwc, None, Some(server.addr)));
        assert_eq!(run.code, 0, "{:#}", run.report);
        assert!(findings(&run, "error", "endpoint").is_empty());
        let review = findings(&run, "ok", "review");
        assert_eq!(review.len(), 1, "{:#}", run.report);
        assert!(review[0]["found"]
            .as_str()
            .unwrap()
            .contains("allowed=true"));
        // The request went out as one well-formed POST.
        let requests = server.requests();
        assert_eq!(requests.len(), 1);
        let head = String::from_utf8_lossy(&requests[0]);
        assert!(head.starts_with("POST /inject HTTP/1.1\r\n"), "{head}");
    }
}

/// `chain` without the certificate at `index`.
fn without(chain: &[CertificateDer<'static>], index: usize) -> Vec<CertificateDer<'static>> {
    let mut c = chain.to_vec();
    c.remove(index);
    c
}

#[test]
fn twenty_intermediates_are_ok_as_for_the_api_server_and_a_broken_chain_is_not() {
    let dir = TempDir::new("hostile-doctor-chain");
    let pki = Pki::new(dir.path(), 20);
    assert_eq!(pki.chain.len(), 21);
    let mwc = pki.mwc("mwc", &[], |_| {});
    let server = pki.serve(pki.chain.clone(), Answer::Close);
    let tls_cert = pki.pem("tls.crt", &pki.chain);
    let run = doctor(&args(&mwc, Some(&tls_cert), Some(server.addr)));
    assert_eq!(run.code, 0, "{:#}", run.report);
    // Offline from --tls-cert and live from the handshake.
    assert_eq!(
        findings(&run, "ok", "certificate-authority").len(),
        2,
        "{:#}",
        run.report
    );
    assert!(!findings(&run, "ok", "review").is_empty());

    // Intermediate 11 missing (chain[k] is intermediate 21-k): intermediate 12 has no issuer.
    let broken = without(&pki.chain, 10);
    let server = pki.serve(broken.clone(), Answer::Close);
    let tls_cert = pki.pem("broken.crt", &broken);
    let run = doctor_finds_errors(&args(&mwc, Some(&tls_cert), Some(server.addr)));
    let errs = findings(&run, "error", "certificate-authority");
    assert_eq!(errs.len(), 2, "{:#}", run.report);
    for f in errs {
        let found = f["found"].as_str().unwrap();
        assert!(
            found.contains("x509: certificate signed by unknown authority"),
            "{found}"
        );
        assert!(
            found.contains(
                "certificate 9 of the chain, CN=Intermediate 12, is issued by CN=Intermediate 11"
            ),
            "{found}"
        );
    }

    // Another root of the same name in the caBundle: still the unknown authority, with the other key named.
    let other = Pki::new(&dir.path().join("other"), 0);
    let other_mwc = webhook_config(&other.ca, &dir.path().join("other.yaml"), &[]);
    let server = pki.serve(pki.chain.clone(), Answer::Close);
    let run = doctor_finds_errors(&args(&other_mwc, None, Some(server.addr)));
    let err = the_error(
        &run,
        "certificate-authority",
        "x509: certificate signed by unknown authority",
    );
    assert!(
        err["found"].as_str().unwrap().contains("certificate 20 of the chain, CN=Intermediate 1, is issued by CN=doctor test root: a CA of that name is in the caBundle, but it did not sign it: another key"),
        "{err}"
    );
}

#[test]
fn failure_policy_maybe_and_an_http_client_config_url_are_errors() {
    let dir = TempDir::new("hostile-doctor-policy");
    let pki = Pki::new(dir.path(), 0);
    let tls_cert = pki.pem("tls.crt", &pki.chain);
    let mwc = pki.mwc("mwc", &[], |v| {
        let w = v["webhooks"].as_array_mut().unwrap();
        w[0]["failurePolicy"] = json!("Maybe");
        let ca = w[1]["clientConfig"]["caBundle"].clone();
        w[1]["clientConfig"] =
            json!({"url": "http://injector.example:8443/inject", "caBundle": ca});
    });
    let run = doctor_finds_errors(&args(&mwc, Some(&tls_cert), None));
    let policy = findings(&run, "error", "failure-policy");
    assert_eq!(policy.len(), 1, "{:#}", run.report);
    let found = policy[0]["found"].as_str().unwrap();
    let entry = policy[0]["entries"][0].as_str().unwrap();
    assert!(
        found.contains(&format!(
            "webhook {}: failurePolicy \"Maybe\" is neither Fail nor Ignore",
            entry.split_once('/').unwrap().1
        )),
        "{found}"
    );
    assert!(policy[0]["fix"]
        .as_str()
        .unwrap()
        .contains(r#"{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}"#));
    let http = findings(&run, "error", "client-config");
    assert_eq!(http.len(), 1, "{:#}", run.report);
    let found = http[0]["found"].as_str().unwrap();
    assert!(
        found.contains("clientConfig.url \"http://injector.example:8443/inject\" is http"),
        "{found}"
    );
    assert!(http[0]["fix"].as_str().unwrap().contains(
        r#""path":"/webhooks/1/clientConfig/url","value":"https://injector.example:8443/inject""#
    ));
    // Nothing else is wrong: the other entries and checks stay ok.
    assert_eq!(run.report["errors"], json!(2), "{:#}", run.report);
}
