//! `injector serve` end to end: the real binary on loopback with certificates from `injector certs`, driven
//! by a client that behaves like the kube-apiserver (verifies the serving certificate against the
//! generated MutatingWebhookConfiguration's caBundle, sends AdmissionReviews v1 and v1beta1 over HTTP/1.1
//! and HTTP/2, applies the patch with the `json-patch` crate).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use e2e::apiserver::{
    apply_patch, injector_certs, webhook_called, ApiServer, CertFiles, Conn, Http, Injector,
    TempDir,
};
use serde_json::{json, Value};
use test_support::corpus::{self, Case, Config, ConfigFiles};
use test_support::{admission_review, pods, semantic};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LOCAL_SANS: &[&str] = &["--san", "localhost", "--san", "127.0.0.1"];

fn serve_args(certs: &CertFiles, cfg: &ConfigFiles, extra: &[&str]) -> Vec<String> {
    let mut a = e2e::apiserver::serve_args(&certs.cert, &certs.key, cfg);
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// A server on the base test configuration (plus overrides) with its API-server client.
struct Fixture {
    server: Injector,
    api: ApiServer,
    certs: CertFiles,
    cfg: ConfigFiles,
    dir: TempDir,
}

fn fixture(values: Value, config: Value, extra: &[&str]) -> Fixture {
    let dir = TempDir::new("webhook");
    let certs = injector_certs(&dir.path().join("certs"), LOCAL_SANS).expect("injector certs");
    let cfg = Config::with(&values, &Value::Null, &config)
        .and_then(|c| c.write(&dir.path().join("cfg")))
        .expect("config files");
    let mut args = serve_args(&certs, &cfg, &["--native-sidecars", "true"]);
    args.extend(extra.iter().map(|s| s.to_string()));
    let server = Injector::start(&args, &BTreeMap::new()).expect("injector serve starts");
    let api = ApiServer::new(&certs.mwc, server.https).expect("api server client");
    Fixture {
        server,
        api,
        certs,
        cfg,
        dir,
    }
}

fn corpus_pod(file: &str) -> Value {
    let text = corpus::read_inject(file).expect("corpus file");
    let docs = pods::injectable_documents(&text).expect("corpus YAML");
    pods::as_typed_pod(pods::to_pod(&docs[0]).expect("pod"))
}

fn hello_pod() -> Value {
    corpus_pod("hello.yaml")
}

fn uid(n: usize) -> String {
    format!("0000{n:04}-e2e0-4000-8000-{:012x}", std::process::id())
}

/// The status of a bodiless `GET path` on an open connection.
async fn get(conn: &mut Conn, path: &str) -> u16 {
    conn.send("GET", path, None, Bytes::new())
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e:#}"))
        .status
        .as_u16()
}

async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

/// Waits (at most [`e2e::PATIENCE`]) until the injector's metric `sample` reaches `at_least`; `what`
/// names the wait.
async fn wait_for_metric(server: &Injector, what: &str, sample: &str, at_least: f64) {
    wait_until(what, e2e::PATIENCE, || async {
        server.metric(sample).await.unwrap_or(0.0) >= at_least
    })
    .await;
}

/// Every public case (`cases.json` and `cases-templates.json`) whose modes include `webhook`: the patched
/// request object equals the golden pod. v1 reviews over HTTP/1.1 and v1beta1 reviews over HTTP/2, one
/// server per distinct configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn golden_cases_through_the_webhook() {
    let mut all = corpus::load_cases().expect("cases.json");
    all.extend(corpus::load_template_cases().expect("cases-templates.json"));
    let webhook_cases: Vec<Case> = all.into_iter().filter(|c| c.runs_in("webhook")).collect();
    assert!(webhook_cases.len() >= 60, "corpus has the webhook cases");
    let mut groups: BTreeMap<String, Vec<Case>> = BTreeMap::new();
    for c in webhook_cases {
        groups.entry(c.config_key()).or_default().push(c);
    }
    let dir = TempDir::new("golden");
    let certs = injector_certs(&dir.path().join("certs"), LOCAL_SANS).expect("injector certs");
    let mut failures = Vec::new();
    let mut checked = 0usize;
    let mut n = 0usize;
    for (gi, group) in groups.values().enumerate() {
        let first = &group[0];
        let cfg = first
            .config()
            .and_then(|c| c.write(&dir.path().join(format!("cfg{gi}"))))
            .expect("config");
        let mut args = serve_args(
            &certs,
            &cfg,
            &["--native-sidecars", first.native_sidecars.as_str()],
        );
        if let Some(ns) = first
            .write_namespaces(&dir.path().join(format!("cfg{gi}")))
            .expect("namespaces")
        {
            args.extend(["--namespaces".to_string(), ns.display().to_string()]);
        }
        let server = Injector::start(&args, &first.env).expect("injector serve starts");
        let api = ApiServer::new(&certs.mwc, server.https).expect("client");
        let mut h1 = api.connect(Http::H1).await.expect("h1 connection");
        let mut h2 = api.connect(Http::H2).await.expect("h2 connection");
        for case in group {
            let input = case.input_text().expect("input");
            let Some(golden_file) = &case.golden else {
                continue;
            };
            let golden = corpus::read_inject(golden_file).expect("golden");
            let ins = pods::injectable_documents(&input).expect("input YAML");
            let outs = pods::injectable_documents(&golden).expect("golden YAML");
            if ins.len() != outs.len() {
                failures.push(format!(
                    "{}: {} input documents, {} golden",
                    case.name,
                    ins.len(),
                    outs.len()
                ));
                continue;
            }
            for (i, (doc_in, doc_out)) in ins.iter().zip(&outs).enumerate() {
                let pod = pods::as_typed_pod(pods::to_pod(doc_in).expect("input pod"));
                let mut want = pods::to_pod(doc_out).expect("golden pod");
                pods::strip_status(&mut want);
                let ns = doc_in
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                for (version, conn) in [("v1", &mut h1), ("v1beta1", &mut h2)] {
                    n += 1;
                    let id = uid(n);
                    let review = pods::review(version, &id, ns, &pod);
                    let label = format!("{} doc {i} ({version})", case.name);
                    let answer = match api.review(conn, &review).await {
                        Ok(a) => a,
                        Err(e) => {
                            failures.push(format!("{label}: {e:#}"));
                            continue;
                        }
                    };
                    let api_version = format!("admission.k8s.io/{version}");
                    let resp = match admission_review::response_to(&answer, &api_version, &id) {
                        Ok(r) => r,
                        Err(e) => {
                            failures.push(format!("{label}: {e}"));
                            continue;
                        }
                    };
                    if resp["allowed"] != json!(true) {
                        failures.push(format!("{label}: not allowed: {resp}"));
                        continue;
                    }
                    let mut got = match apply_patch(resp, &pod) {
                        Ok(p) => p,
                        Err(e) => {
                            failures.push(format!("{label}: {e:#}"));
                            continue;
                        }
                    };
                    pods::strip_status(&mut got);
                    if !semantic::equal(&got, &want) {
                        failures.push(format!(
                            "{label}: differs from {golden_file}:\n{}",
                            semantic::diff(&got, &want, 8)
                        ));
                    } else {
                        checked += 1;
                    }
                }
            }
        }
        drop(server);
    }
    assert!(
        failures.is_empty(),
        "{} of {} reviews failed ({} groups):\n{}",
        failures.len(),
        n,
        groups.len(),
        failures.join("\n")
    );
    assert!(checked >= 130, "checked {checked} reviews");
}

/// Whether the server still holds `s` open without having answered: a read finds neither data nor the
/// end of the stream.
async fn still_open<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> bool {
    let mut b = [0u8; 1];
    tokio::time::timeout(Duration::from_millis(50), s.read(&mut b))
        .await
        .is_err()
}

/// Reads a whole HTTP/1.1 answer from a raw stream until the server closes it (bounded by `timeout`).
async fn read_to_close<S: tokio::io::AsyncRead + Unpin>(s: &mut S, timeout: Duration) -> String {
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(timeout, s.read_to_end(&mut buf)).await;
    String::from_utf8_lossy(&buf).into_owned()
}

async fn raw_tls(
    api: &ApiServer,
    certs: &CertFiles,
    addr: std::net::SocketAddr,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let _ = api;
    let mut roots = rustls::RootCertStore::empty();
    let bundle = certs.mwc.webhooks.as_ref().unwrap()[0]
        .client_config
        .ca_bundle
        .clone()
        .unwrap();
    for c in rustls_pemfile::certs(&mut bundle.0.as_slice()) {
        roots.add(c.unwrap()).unwrap();
    }
    let cfg = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(
            rustls::pki_types::ServerName::try_from("sidecar-injector.sidecar-injector.svc")
                .unwrap(),
            tcp,
        )
        .await
        .unwrap()
}

/// The answer to a v1 review of `pod` over a new HTTP/1.1 connection.
async fn review_v1(api: &ApiServer, uid: &str, namespace: &str, pod: &Value) -> Value {
    let mut conn = api.connect(Http::H1).await.expect("connect");
    api.review(&mut conn, &pods::review("v1", uid, namespace, pod))
        .await
        .unwrap_or_else(|e| panic!("review {uid}: {e:#}"))
}

async fn assert_still_injects(f: &Fixture, tag: &str) {
    let pod = hello_pod();
    let answer = review_v1(&f.api, tag, "default", &pod).await;
    assert_eq!(answer["response"]["uid"], json!(tag), "after {tag}");
    assert_eq!(
        answer["response"]["allowed"],
        json!(true),
        "after {tag}: {answer}"
    );
    assert_eq!(
        answer["response"]["patchType"],
        json!("JSONPatch"),
        "after {tag}"
    );
    let patched = apply_patch(&answer["response"], &pod).expect("patch applies");
    let names: Vec<&str> = patched
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(
            patched
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        )
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        names.contains(&"istio-proxy"),
        "after {tag}: no istio-proxy in {names:?}"
    );
}

/// Bad input is answered as Istio's `serveInject` in `webhook.go` answers it, and the server keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_and_the_server_keeps_serving() {
    let f = fixture(
        Value::Null,
        Value::Null,
        &["--header-timeout-secs", "5", "--body-timeout-secs", "5"],
    );
    let api = &f.api;
    assert_still_injects(&f, "start").await;
    let review = serde_json::to_vec(&pods::review("v1", "bad-1", "default", &hello_pod())).unwrap();

    // Empty body: 400.
    let a = api
        .post("/inject", Some("application/json"), Bytes::new())
        .await
        .unwrap();
    assert_eq!(a.status, 400);
    assert!(String::from_utf8_lossy(&a.body).contains("no body found"));
    assert_still_injects(&f, "empty").await;

    // Wrong Content-Type (also with parameters, which Istio refuses too): 415.
    for ct in [
        Some("text/plain"),
        Some("application/json; charset=utf-8"),
        None,
    ] {
        let a = api.post("/inject", ct, review.clone()).await.unwrap();
        assert_eq!(a.status, 415, "content type {ct:?}");
        assert!(String::from_utf8_lossy(&a.body).contains("invalid Content-Type"));
    }
    assert_still_injects(&f, "content-type").await;

    // 10 MiB: 400, entity too large.
    let big = vec![b' '; 10 * 1024 * 1024];
    let a = api
        .post("/inject", Some("application/json"), big)
        .await
        .unwrap();
    assert_eq!(a.status, 400);
    assert!(
        String::from_utf8_lossy(&a.body).contains("Request entity too large: limit is 6291456"),
        "{:?}",
        a.body
    );
    let mut h2 = api.connect(Http::H2).await.unwrap();
    let a = h2
        .send(
            "POST",
            "/inject",
            Some("application/json"),
            Bytes::from(vec![b' '; 10 << 20]),
        )
        .await
        .unwrap();
    assert_eq!(a.status, 400, "10 MiB over HTTP/2");
    assert_still_injects(&f, "10MiB").await;

    // Undecodable bodies: HTTP 200, allowed false, a message, no uid.
    let nested = "[".repeat(200_000);
    let truncated = &review[..review.len() / 2];
    for (what, body) in [
        ("garbage", b"\x00\xffnot json at all".to_vec()),
        ("truncated", truncated.to_vec()),
        ("nested", nested.into_bytes()),
        ("json but not a review", b"{\"hello\": [1, 2, 3]}".to_vec()),
        (
            "wrong kind",
            br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"}}"#.to_vec(),
        ),
    ] {
        let a = api
            .post("/inject", Some("application/json"), body)
            .await
            .unwrap();
        assert_eq!(a.status, 200, "{what}");
        let v = a.json().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(v["response"]["allowed"], json!(false), "{what}: {v}");
        assert!(
            v["response"]["status"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{what}: no message: {v}"
        );
        assert_still_injects(&f, what).await;
    }

    // A review without an object, and one with a non-Pod object: answered for that uid, not injected.
    let mut no_object = pods::review("v1", "no-object", "default", &Value::Null);
    no_object["request"]
        .as_object_mut()
        .unwrap()
        .remove("object");
    let service = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "svc", "namespace": "default"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "x"}}});
    let not_a_pod = pods::review("v1", "not-a-pod", "default", &service);
    let nested_object = pods::review(
        "v1",
        "nested-object",
        "default",
        &serde_json::from_str::<Value>(&format!("{{\"a\": {}{}}}", "[".repeat(60), "]".repeat(60)))
            .unwrap(),
    );
    for r in [&no_object, &not_a_pod, &nested_object] {
        let id = r["request"]["uid"].as_str().unwrap().to_string();
        let a = api
            .post(
                "/inject",
                Some("application/json"),
                serde_json::to_vec(r).unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(a.status, 200, "{id}");
        let v = a.json().unwrap();
        assert_eq!(v["response"]["uid"], json!(id), "{id}: {v}");
        assert_eq!(v["apiVersion"], json!("admission.k8s.io/v1"), "{id}: {v}");
        if v["response"]["allowed"] == json!(true) {
            // Allowed is acceptable only without a patch or with one that applies.
            apply_patch(&v["response"], &r["request"]["object"])
                .unwrap_or_else(|e| panic!("{id}: {e}"));
        }
        assert_still_injects(&f, &id).await;
    }

    // Health, readiness, unknown paths.
    let mut c = api.connect(Http::H1).await.unwrap();
    for (method, path, status) in [
        ("GET", "/healthz", 200),
        ("GET", "/readyz", 200),
        ("POST", "/other", 404),
    ] {
        let got = c
            .send(method, path, None, Bytes::new())
            .await
            .unwrap()
            .status;
        assert_eq!(got, status, "{method} {path}");
    }

    // Slow clients: half a header block, and headers plus half a body, then silence. Others are served at
    // once while they stall, and the server closes the stalled connections after its timeouts.
    let mut half_headers = raw_tls(api, &f.certs, f.server.https).await;
    half_headers
        .write_all(b"POST /inject HTTP/1.1\r\nHost: x\r\nContent-Ty")
        .await
        .unwrap();
    half_headers.flush().await.unwrap();
    let mut half_body = raw_tls(api, &f.certs, f.server.https).await;
    let head = format!(
        "POST /inject HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        review.len()
    );
    half_body.write_all(head.as_bytes()).await.unwrap();
    half_body
        .write_all(&review[..review.len() / 2])
        .await
        .unwrap();
    half_body.flush().await.unwrap();
    let mut silent = tokio::net::TcpStream::connect(f.server.https)
        .await
        .unwrap();
    for i in 0..5 {
        assert_still_injects(&f, &format!("stalled-{i}")).await;
    }
    // Served while the stalled clients were still connected: the server cuts them off only after their
    // 5 s timeouts, so serving that had waited for them would find them closed by now.
    assert!(
        still_open(&mut half_headers).await && still_open(&mut half_body).await,
        "others were served only after the stalled clients were cut off"
    );
    let t = Instant::now();
    let a = read_to_close(&mut half_body, Duration::from_secs(15)).await;
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "half-body client not cut off"
    );
    assert!(
        a.is_empty() || a.starts_with("HTTP/1.1 400"),
        "half-body answer: {a}"
    );
    let _ = read_to_close(&mut half_headers, Duration::from_secs(15)).await;
    assert!(
        t.elapsed() < Duration::from_secs(12),
        "half-header client not cut off"
    );
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(Duration::from_secs(15), silent.read(&mut b)).await;
    assert!(
        matches!(r, Ok(Ok(0)) | Ok(Err(_))),
        "silent TCP client not cut off: {r:?}"
    );
    assert_still_injects(&f, "after-stall").await;

    // The failures were counted by type.
    let m = f.server.metrics_text().await.unwrap();
    for t in ["empty_body", "content_type", "body_read", "decode"] {
        assert!(
            m.contains(&format!("sidecar_injection_failure_total{{type=\"{t}\"}}")),
            "no failure counter for {t}:\n{m}"
        );
    }
    // No template text is configured: every injected pod rendered the compiled sidecar template.
    assert!(
        m.contains("injector_template_renders_total{template=\"sidecar\",path=\"compiled\"}"),
        "no render-path counter:\n{m}"
    );
    assert!(!m.contains("path=\"evaluated\""), "{m}");
    assert!(
        f.server
            .metric("sidecar_injection_requests_total")
            .await
            .unwrap()
            >= 20.0
    );
    assert!(
        f.server
            .metric("sidecar_injection_success_total")
            .await
            .unwrap()
            >= 10.0
    );
    assert!(
        f.server
            .metric("injector_cert_expiry_seconds")
            .await
            .unwrap()
            > 300.0 * 86400.0
    );
    let _ = (&f.cfg, &f.dir);
}

/// TLS 1.2 works, HTTP/2 is negotiated by ALPN, and the served certificate is the one `injector certs` wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_versions_and_alpn() {
    let f = fixture(Value::Null, Value::Null, &[]);
    let tls12 = f.api.with_tls(|c| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let roots = c.clone();
        *c = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .with_root_certificates(root_store(&f.certs))
            .with_no_client_auth();
        c.alpn_protocols = roots.alpn_protocols;
    });
    let mut c = tls12.connect(Http::H1).await.expect("TLS 1.2 handshake");
    assert_eq!(get(&mut c, "/healthz").await, 200);
    let mut c2 = f.api.connect(Http::H2).await.expect("h2");
    assert_eq!(get(&mut c2, "/readyz").await, 200);
    let leaf = f.api.peer_certificates().await.unwrap();
    assert_eq!(leaf[0].as_ref(), pem_der(&f.certs.cert).as_slice());
}

fn root_store(certs: &CertFiles) -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(certs.dir.join("ca.crt")).unwrap();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(c.unwrap()).unwrap();
    }
    roots
}

fn pem_der(path: &Path) -> Vec<u8> {
    let pem = std::fs::read(path).unwrap();
    let der = rustls_pemfile::certs(&mut pem.as_slice())
        .next()
        .unwrap()
        .unwrap()
        .as_ref()
        .to_vec();
    der
}

/// Replacing the certificate files makes new handshakes present the new certificate (no restart, open
/// connections keep working); a broken pair is refused, counted, and the previous one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_hot_reload() {
    let f = fixture(Value::Null, Value::Null, &["--reload-interval-ms", "100"]);
    let old = pem_der(&f.certs.cert);
    assert_eq!(
        f.api.peer_certificates().await.unwrap()[0].as_ref(),
        old.as_slice()
    );
    let mut open = f.api.connect(Http::H2).await.unwrap();

    // Rotate: same CA (reused from the directory), new serving pair.
    let again = injector_certs(&f.certs.dir, LOCAL_SANS).expect("rotate");
    let new = pem_der(&again.cert);
    assert_ne!(new, old);
    let api = f.api.clone();
    wait_until("new certificate served", e2e::PATIENCE, || {
        let api = api.clone();
        let new = new.clone();
        async move {
            api.peer_certificates()
                .await
                .map(|c| c[0].as_ref() == new.as_slice())
                .unwrap_or(false)
        }
    })
    .await;
    assert_eq!(get(&mut open, "/healthz").await, 200);
    assert!(
        f.server
            .metric("injector_cert_reloads_total{result=\"success\"}")
            .await
            .unwrap()
            >= 2.0
    );

    // Broken: a key that is not the certificate's, then garbage. The old pair stays.
    let ca_key = std::fs::read(f.certs.dir.join("ca.key")).unwrap();
    std::fs::write(&f.certs.key, &ca_key).unwrap();
    wait_for_metric(
        &f.server,
        "mismatched key counted",
        "injector_cert_reloads_total{result=\"failure\"}",
        1.0,
    )
    .await;
    std::fs::write(&f.certs.cert, b"-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    wait_for_metric(
        &f.server,
        "garbage counted",
        "injector_cert_reloads_total{result=\"failure\"}",
        2.0,
    )
    .await;
    assert_eq!(
        f.api.peer_certificates().await.unwrap()[0].as_ref(),
        new.as_slice()
    );
    assert_still_injects(&f, "after-broken-cert").await;
    assert!(f.server.log().contains("certificate reload failed"));
}

fn images(pod: &Value) -> Vec<String> {
    pods::all_containers(pod)
        .filter_map(|c| c["image"].as_str().map(str::to_string))
        .collect()
}

pub(crate) async fn injected_images(api: &ApiServer, tag: &str) -> Vec<String> {
    let pod = hello_pod();
    let a = review_v1(api, tag, "default", &pod).await;
    images(&apply_patch(&a["response"], &pod).unwrap())
}

/// A valid new configuration takes effect without a restart; an invalid one is refused, counted, and the
/// last good one stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_hot_reload() {
    let f = fixture(Value::Null, Value::Null, &["--reload-interval-ms", "100"]);
    let before = injected_images(&f.api, "before").await;
    assert!(before.iter().any(|i| i.ends_with(":latest")), "{before:?}");

    // The same pod twice more: stored on its second sighting, answered from the patch cache on its
    // third, and counted so (the metric family keeps its historical `render_memo` name).
    for tag in ["before-2", "before-3"] {
        assert_eq!(injected_images(&f.api, tag).await, before);
    }
    let cache_metric = |name: &'static str| {
        let server = &f.server;
        async move { server.metric(name).await.unwrap() }
    };
    assert_eq!(
        cache_metric("sidecar_injection_render_memo_misses_total").await,
        2.0
    );
    assert_eq!(
        cache_metric("sidecar_injection_render_memo_stored_total").await,
        1.0
    );
    assert_eq!(
        cache_metric("sidecar_injection_render_memo_hits_total").await,
        1.0
    );
    assert_eq!(
        cache_metric("sidecar_injection_render_memo_entries").await,
        1.0
    );

    // A new tag in the values.
    Config::with(
        &json!({"global": {"tag": "reloaded"}}),
        &Value::Null,
        &Value::Null,
    )
    .and_then(|c| c.write(&f.dir.path().join("cfg")))
    .unwrap();
    let api = f.api.clone();
    wait_until("new values in effect", e2e::PATIENCE, || {
        let api = api.clone();
        async move {
            injected_images(&api, "during")
                .await
                .iter()
                .any(|i| i.ends_with(":reloaded"))
        }
    })
    .await;
    assert!(
        f.server
            .metric("injector_config_reloads_total{result=\"success\"}")
            .await
            .unwrap()
            >= 2.0
    );
    assert!(
        f.server
            .metric("injector_config_last_reload_success_timestamp_seconds")
            .await
            .unwrap()
            > 1.0e9
    );
    // The new configuration is a new generation, so the cached patch of the old one is not used (it
    // would have answered with the old images); the counts go on.
    assert!(cache_metric("sidecar_injection_render_memo_misses_total").await >= 3.0);
    assert!(cache_metric("sidecar_injection_render_memo_hits_total").await >= 1.0);

    // Broken values: refused and counted; injection goes on with the last good configuration.
    std::fs::write(&f.cfg.values, b"{\"global\": {\"tag\": ").unwrap();
    wait_for_metric(
        &f.server,
        "invalid config counted",
        "injector_config_reloads_total{result=\"failure\"}",
        1.0,
    )
    .await;
    let after = injected_images(&f.api, "after").await;
    assert!(after.iter().any(|i| i.ends_with(":reloaded")), "{after:?}");
    assert!(f.server.log().contains("configuration reload failed"));
}

/// The labels of the hello pod as the webhook injects it.
async fn injected_labels(api: &ApiServer, tag: &str) -> Value {
    let pod = hello_pod();
    let a = review_v1(api, tag, "default", &pod).await;
    apply_patch(&a["response"], &pod).unwrap()["metadata"]["labels"].clone()
}

/// A user template outside the supported subset is refused at reload, naming file, template, line and
/// construct; the failure is counted and the previous configuration (with its user template) stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_template_refused_at_reload_keeps_the_old_configuration() {
    let overlay = |v: &str| format!("metadata:\n  labels:\n    user-template: {v}\n");
    let config = |text: String| json!({"defaultTemplates": ["sidecar", "mark"], "templates": {"mark": text}});
    let f = fixture(
        Value::Null,
        config(overlay("one")),
        &["--reload-interval-ms", "100"],
    );
    assert_eq!(
        injected_labels(&f.api, "first").await["user-template"],
        json!("one")
    );

    let bad = "metadata:\n  labels:\n    user-template: {{ include \"x\" . }}\n".to_string();
    Config::with(&Value::Null, &Value::Null, &config(bad))
        .and_then(|c| c.write(&f.dir.path().join("cfg")))
        .unwrap();
    wait_for_metric(
        &f.server,
        "refused user template counted",
        "injector_config_reloads_total{result=\"failure\"}",
        1.0,
    )
    .await;
    let log = f.server.log();
    let config_file = f.cfg.injector_config.display().to_string();
    for want in [
        "configuration reload failed",
        config_file.as_str(),
        "templates.mark",
        "line 3",
        "unsupported function",
        "include",
    ] {
        assert!(log.contains(want), "{want:?} not in the log:\n{log}");
    }
    assert_eq!(
        injected_labels(&f.api, "after").await["user-template"],
        json!("one")
    );

    // A valid user template is taken on the next reload.
    Config::with(&Value::Null, &Value::Null, &config(overlay("two")))
        .and_then(|c| c.write(&f.dir.path().join("cfg")))
        .unwrap();
    let api = f.api.clone();
    wait_until("new user template in effect", e2e::PATIENCE, || {
        let api = api.clone();
        async move { injected_labels(&api, "later").await["user-template"] == json!("two") }
    })
    .await;
}

/// SIGTERM under load: requests in flight complete with valid answers, no answered request is broken, the
/// process exits 0.
/// SIGTERM sends the kept-alive connections elsewhere without a request lost: HTTP/2 is told at once
/// (GOAWAY), HTTP/1 is not closed while idle (a request the client starts writing then meets the closed
/// socket: "write: broken pipe", a pod create lost in `node::no_pod_creation_lost_during_an_injector_rollout`)
/// but retired by its next answer (`Connection: close`). The listener stays open for the drain delay: a
/// connection made then is answered, then closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_sends_kept_alive_connections_elsewhere_without_a_request_lost() {
    let f = fixture(
        Value::Null,
        Value::Null,
        &["--drain-delay-secs", "3600", "--shutdown-timeout-secs", "5"],
    );
    let review = pods::review("v1", "drain", "default", &hello_pod());
    let body = Bytes::from(serde_json::to_vec(&review).unwrap());
    let mut h1 = f.api.connect(Http::H1).await.unwrap();
    let mut h2 = f.api.connect(Http::H2).await.unwrap();
    for c in [&mut h1, &mut h2] {
        let a = c
            .send("POST", &f.api.path, Some("application/json"), body.clone())
            .await
            .unwrap();
        assert_eq!(a.status, 200);
        assert!(!a.connection_close, "closed before any signal");
    }
    f.server.signal_term();
    wait_until(
        "the HTTP/2 connection told to go elsewhere and closed",
        e2e::PATIENCE,
        || async { h2.is_closed() },
    )
    .await;
    // The idle HTTP/1 connection is still open (hyper closes an idle one at once when told, so it would
    // be closed by now), and its next request is answered as its last.
    assert!(
        !h1.is_closed(),
        "an idle HTTP/1 connection was closed while draining"
    );
    let a = h1
        .send("POST", &f.api.path, Some("application/json"), body.clone())
        .await
        .unwrap();
    assert_eq!(a.status, 200, "{:?}", a.body);
    assert!(
        a.connection_close,
        "the answer after SIGTERM is not the connection's last"
    );
    wait_until(
        "the HTTP/1 connection closed after its last answer",
        e2e::PATIENCE,
        || async { h1.is_closed() },
    )
    .await;
    for http in [Http::H1, Http::H2] {
        let mut late = f.api.connect(http).await.unwrap();
        let a = late
            .send("POST", &f.api.path, Some("application/json"), body.clone())
            .await
            .unwrap();
        assert_eq!(a.status, 200, "{:?}", a.body);
        assert_eq!(a.json().unwrap()["response"]["allowed"], json!(true));
        wait_until(
            "a connection made while draining closed after its answer",
            e2e::PATIENCE,
            || async { late.is_closed() },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_requests_in_flight() {
    let mut f = fixture(Value::Null, Value::Null, &["--shutdown-timeout-secs", "10"]);
    let review =
        serde_json::to_vec(&pods::review("v1", "inflight", "default", &hello_pod())).unwrap();

    // Requests whose body is half sent when the signal arrives.
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut s = raw_tls(&f.api, &f.certs, f.server.https).await;
        let head = format!(
            "POST /inject HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            review.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&review[..review.len() / 2]).await.unwrap();
        s.flush().await.unwrap();
        slow.push(s);
    }
    // Load: keep-alive clients on both protocols.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let answered = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut load = Vec::new();
    for i in 0..4 {
        let api = f.api.clone();
        let stop = stop.clone();
        let answered = answered.clone();
        let body = Bytes::from(review.clone());
        load.push(tokio::spawn(async move {
            let mut conn = api
                .connect(if i % 2 == 0 { Http::H1 } else { Http::H2 })
                .await
                .unwrap();
            let (mut ok, mut refused) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                match conn
                    .send("POST", "/inject", Some("application/json"), body.clone())
                    .await
                {
                    Ok(a) => {
                        assert_eq!(a.status, 200, "answered request failed: {:?}", a.body);
                        let v = a.json().unwrap();
                        assert_eq!(v["response"]["allowed"], json!(true));
                        ok += 1;
                        answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    // The connection was closed between requests (keep-alive shutdown): nothing was lost.
                    Err(_) => {
                        refused += 1;
                        break;
                    }
                }
            }
            (ok, refused)
        }));
    }
    // The signal arrives under load (the clients have been answered a few times), and the bodies are
    // finished once it has taken effect (readiness fails).
    wait_until("the load clients answered", e2e::PATIENCE, || async {
        answered.load(std::sync::atomic::Ordering::SeqCst) >= 4
    })
    .await;
    f.server.signal_term();
    wait_until("readiness failing after SIGTERM", e2e::PATIENCE, || async {
        !matches!(f.server.ready().await, Ok(true))
    })
    .await;
    for s in &mut slow {
        s.write_all(&review[review.len() / 2..]).await.unwrap();
        s.flush().await.unwrap();
    }
    for s in &mut slow {
        let a = read_to_close(s, e2e::PATIENCE).await;
        assert!(a.starts_with("HTTP/1.1 200"), "in-flight request got: {a}");
        let body = &a[a.find("\r\n\r\n").unwrap() + 4..];
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["response"]["uid"], json!("inflight"));
        assert_eq!(v["response"]["allowed"], json!(true));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut total = 0;
    for l in load {
        let (ok, _) = l.await.expect("load client");
        total += ok;
    }
    assert!(total >= 4, "load clients made {total} requests");
    let status = f.server.wait(e2e::PATIENCE).expect("exits");
    assert!(status.success(), "exit status {status}");
    // New connections are refused after the exit.
    assert!(tokio::net::TcpStream::connect(f.server.https)
        .await
        .is_err());
}

pub(crate) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The classic 8-row table of istio.io's "Automatic Sidecar Injection" page: the namespace-selector
/// column through the selectors `injector certs` generates, evaluated as the API server does, and the pod
/// column through the engine over HTTP. As with Istio's chart today, row 7 with the override as a pod
/// *label* is injected: the `object.` entry sends pods labelled `sidecar.istio.io/inject=true` from
/// unlabelled namespaces, and the explicit `true` wins over policy `disabled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_row_table_and_decisions_through_http() {
    let enabled = fixture(Value::Null, Value::Null, &[]);
    let disabled = fixture(Value::Null, json!({"policy": "disabled"}), &[]);
    let mwc = &enabled.certs.mwc;
    let yes_ns = labels(&[("istio-injection", "enabled")]);
    let no_ns = labels(&[]);
    // (row, namespace matches, policy enabled, pod override (None = default), via label?, injected?)
    type Row = (u32, bool, bool, Option<&'static str>, bool, bool);
    let rows: Vec<Row> = vec![
        (1, true, true, None, true, true),
        (1, true, true, Some("true"), true, true),
        (2, true, true, Some("false"), true, false),
        (2, true, true, Some("false"), false, false),
        (3, true, false, Some("true"), true, true),
        (3, true, false, Some("true"), false, true),
        (4, true, false, None, true, false),
        (4, true, false, Some("false"), false, false),
        (5, false, true, None, true, false),
        (6, false, true, Some("false"), true, false),
        (7, false, false, Some("true"), false, false),
        (7, false, false, Some("true"), true, true),
        (8, false, false, None, true, false),
    ];
    let mut n = 0;
    for (row, ns_match, policy_enabled, over, via_label, want) in rows {
        let mut pod = hello_pod();
        let mut pod_labels = BTreeMap::new();
        if let Some(v) = over {
            let key = if via_label { "labels" } else { "annotations" };
            let meta = pod["metadata"].as_object_mut().unwrap();
            let m = meta.entry(key).or_insert_with(|| json!({}));
            m["sidecar.istio.io/inject"] = json!(v);
            if via_label {
                pod_labels.insert("sidecar.istio.io/inject".to_string(), v.to_string());
            }
        }
        for (k, v) in pod["metadata"]["labels"].as_object().into_iter().flatten() {
            pod_labels.insert(k.clone(), v.as_str().unwrap_or_default().to_string());
        }
        let ns_labels = if ns_match { &yes_ns } else { &no_ns };
        let called = webhook_called(mwc, "apps", ns_labels, &pod_labels);
        // The objectSelector keeps pods *labelled* inject=false away; an annotation is the engine's business.
        let label_opt_out = via_label && over == Some("false");
        // The `object.` entry takes pods *labelled* inject=true from namespaces without injection labels.
        let label_opt_in = via_label && over == Some("true");
        assert_eq!(
            called,
            (ns_match && !label_opt_out) || (!ns_match && label_opt_in),
            "row {row}: selector verdict"
        );
        let injected = if called {
            n += 1;
            let f = if policy_enabled { &enabled } else { &disabled };
            let mut conn = f.api.connect(Http::H1).await.unwrap();
            let a = f
                .api
                .review(
                    &mut conn,
                    &pods::review("v1", &format!("row-{n}"), "apps", &pod),
                )
                .await
                .unwrap();
            assert_eq!(a["response"]["allowed"], json!(true), "row {row}: {a}");
            a["response"].get("patch").is_some()
        } else {
            false
        };
        assert_eq!(
            injected, want,
            "row {row} (override {over:?}, label {via_label})"
        );
    }

    // The injector's own namespace and kube-system are never sent; a hostNetwork pod is skipped.
    let pod_labels = labels(&[("app", "hello")]);
    assert!(!webhook_called(mwc, "kube-system", &yes_ns, &pod_labels));
    assert!(!webhook_called(
        mwc,
        "sidecar-injector",
        &yes_ns,
        &pod_labels
    ));
    assert!(!webhook_called(
        mwc,
        "apps",
        &labels(&[("istio-injection", "disabled")]),
        &pod_labels
    ));
    let host = corpus_pod("hello-host-network.yaml");
    let mut conn = enabled.api.connect(Http::H2).await.unwrap();
    let a = enabled
        .api
        .review(&mut conn, &pods::review("v1beta1", "host", "apps", &host))
        .await
        .unwrap();
    assert_eq!(a["response"]["allowed"], json!(true));
    assert!(
        a["response"].get("patch").is_none(),
        "hostNetwork pod patched: {a}"
    );
    assert!(
        enabled
            .server
            .metric("sidecar_injection_skip_total")
            .await
            .unwrap()
            >= 1.0
    );

    // A revision's configuration selects `istio.io/rev=<R>` namespaces, and `istio-injection` wins.
    let dir = TempDir::new("rev");
    let rev = injector_certs(
        dir.path(),
        &["--revision", "canary", "--reinvocation-policy", "if-needed"],
    )
    .unwrap();
    let wh = &rev.mwc.webhooks.as_ref().unwrap()[0];
    assert_eq!(wh.reinvocation_policy.as_deref(), Some("IfNeeded"));
    assert!(webhook_called(
        &rev.mwc,
        "apps",
        &labels(&[("istio.io/rev", "canary")]),
        &pod_labels
    ));
    assert!(!webhook_called(
        &rev.mwc,
        "apps",
        &labels(&[("istio.io/rev", "stable")]),
        &pod_labels
    ));
    assert!(!webhook_called(
        &rev.mwc,
        "apps",
        &labels(&[("istio.io/rev", "canary"), ("istio-injection", "enabled")]),
        &pod_labels
    ));
    assert!(!webhook_called(&rev.mwc, "apps", &yes_ns, &pod_labels));
}

/// The generated MutatingWebhookConfiguration has the documented fields.
#[test]
fn generated_webhook_configuration() {
    let dir = TempDir::new("mwc");
    let c = injector_certs(
        dir.path(),
        &["--namespace", "mesh-system", "--service", "inj"],
    )
    .unwrap();
    assert_eq!(c.mwc.metadata.name.as_deref(), Some("sidecar-injector"));
    let wh = &c.mwc.webhooks.as_ref().unwrap()[0];
    assert_eq!(wh.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(wh.side_effects, "None");
    assert_eq!(wh.timeout_seconds, Some(10));
    assert_eq!(wh.admission_review_versions, vec!["v1", "v1beta1"]);
    assert_eq!(wh.reinvocation_policy.as_deref(), Some("Never"));
    let svc = wh.client_config.service.as_ref().unwrap();
    assert_eq!(
        (
            svc.name.as_str(),
            svc.namespace.as_str(),
            svc.path.as_deref(),
            svc.port
        ),
        ("inj", "mesh-system", Some("/inject"), Some(443))
    );
    let ca = std::fs::read(dir.path().join("ca.crt")).unwrap();
    assert_eq!(wh.client_config.ca_bundle.as_ref().unwrap().0, ca);
    let rule = &wh.rules.as_ref().unwrap()[0];
    assert_eq!(
        rule.operations.as_deref(),
        Some(&["CREATE".to_string()][..])
    );
    assert_eq!(rule.resources.as_deref(), Some(&["pods".to_string()][..]));
    let key_mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("tls.key"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(key_mode & 0o077, 0, "private key readable by others");
    // The pair as a kubernetes.io/tls Secret manifest in the service's namespace.
    let secret: Value = corpus::yaml(
        &std::fs::read_to_string(dir.path().join("secret.yaml")).unwrap(),
        "secret.yaml",
    )
    .unwrap();
    let secret = e2e::helm::typed_as::<k8s_openapi::api::core::v1::Secret>(&secret);
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(secret.metadata.namespace.as_deref(), Some("mesh-system"));
    let data = secret.data.unwrap();
    assert_eq!(data["tls.crt"].0, std::fs::read(&c.cert).unwrap());
    assert_eq!(data["tls.key"].0, std::fs::read(&c.key).unwrap());
    assert!(!webhook_called(
        &c.mwc,
        "mesh-system",
        &labels(&[("istio-injection", "enabled")]),
        &BTreeMap::new()
    ));
}

/// URL path parameters (`parseInjectEnvs` in Istio's `webhook.go`) reach the injected proxy's environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_parameters() {
    let f = fixture(Value::Null, Value::Null, &[]);
    let pod = hello_pod();
    let mut conn = f.api.connect(Http::H1).await.unwrap();
    let body = serde_json::to_vec(&pods::review("v1", "params", "default", &pod)).unwrap();
    let a = conn
        .send(
            "POST",
            "/inject/cluster/east--slash--1/net/n1/custom_env/x",
            Some("application/json"),
            body.into(),
        )
        .await
        .unwrap();
    assert_eq!(a.status, 200);
    let v = a.json().unwrap();
    let patched = apply_patch(&v["response"], &pod).unwrap();
    let proxy = pods::container(&patched, "istio-proxy").expect("istio-proxy");
    let env = pods::env_values(proxy);
    assert_eq!(
        env.get("ISTIO_META_CLUSTER_ID").map(String::as_str),
        Some("east/1")
    );
    assert_eq!(
        env.get("ISTIO_META_NETWORK").map(String::as_str),
        Some("n1")
    );
    assert_eq!(env.get("CUSTOM_ENV").map(String::as_str), Some("x"));
}

/// The `istio/gateway` Helm chart's pod (`examples/gateway.yaml`: `inject.istio.io/templates: gateway`,
/// label `sidecar.istio.io/inject: "true"`, one `istio-proxy` with `image: auto`) through `injector serve`
/// with the default configuration: allowed, and the placeholder becomes a router-mode gateway proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_chart_pod_through_serve() {
    let f = fixture(Value::Null, Value::Null, &[]);
    let text = std::fs::read_to_string(e2e::helm::repo_dir().join("examples/gateway.yaml"))
        .expect("example");
    let docs = pods::injectable_documents(&text).expect("example YAML");
    let pod = pods::as_typed_pod(pods::to_pod(&docs[0]).expect("pod"));
    let mut conn = f.api.connect(Http::H1).await.expect("connect");
    let id = uid(9001);
    let answer = f
        .api
        .review(&mut conn, &pods::review("v1", &id, "istio-ingress", &pod))
        .await
        .expect("review");
    let resp = &answer["response"];
    assert_eq!(resp["uid"], json!(id));
    assert_eq!(resp["allowed"], json!(true), "{answer}");
    let patched = apply_patch(resp, &pod).expect("patch applies");
    assert!(
        patched.pointer("/spec/initContainers").is_none(),
        "{patched}"
    );
    let containers = patched["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{patched}");
    let proxy = &containers[0];
    assert_eq!(proxy["name"], "istio-proxy");
    assert_ne!(proxy["image"], "auto");
    assert!(
        proxy["image"]
            .as_str()
            .is_some_and(|i| i.contains("/proxyv2:")),
        "{}",
        proxy["image"]
    );
    assert_eq!(proxy["args"][1], "router");
    assert!(proxy.get("restartPolicy").is_none());
    assert_eq!(
        patched["spec"]["securityContext"]["sysctls"][0]["name"],
        "net.ipv4.ip_unprivileged_port_start"
    );
    let status = patched["metadata"]["annotations"]["sidecar.istio.io/status"]
        .as_str()
        .expect("status annotation");
    let status: Value = serde_json::from_str(status).expect("status JSON");
    assert_eq!(status["containers"], json!(["istio-proxy"]));
    assert_eq!(status["initContainers"], Value::Null);
}

/// `--max-connections` caps the connections open at once. At the cap a new connection is served at once
/// and the oldest idle one is closed; when every connection has a request in flight, a further client
/// waits (in the kernel's backlog, not refused) until a slot frees up, then is served normally.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_cap() {
    let f = fixture(
        Value::Null,
        Value::Null,
        &["--max-connections", "2", "--body-timeout-secs", "60"],
    );
    // Idle connections make room: the oldest goes.
    let mut a = f.api.connect(Http::H1).await.unwrap();
    let mut b = f.api.connect(Http::H2).await.unwrap();
    assert_eq!(get(&mut a, "/healthz").await, 200);
    assert_eq!(get(&mut b, "/healthz").await, 200);
    let mut c = tokio::time::timeout(e2e::PATIENCE, f.api.connect(Http::H1))
        .await
        .expect("a new connection is served at the cap while others are idle")
        .unwrap();
    assert_eq!(get(&mut c, "/readyz").await, 200);
    assert!(
        a.send("GET", "/healthz", None, Bytes::new()).await.is_err(),
        "the oldest idle connection is still open"
    );
    assert_eq!(get(&mut b, "/healthz").await, 200);
    drop((a, b, c));
    wait_until("connections closed", e2e::PATIENCE, || async {
        f.server
            .metric("injector_open_connections")
            .await
            .unwrap_or(1.0)
            == 0.0
    })
    .await;

    // Busy connections (a request in flight each) are not closed: the next client waits.
    let mut busy = Vec::new();
    for _ in 0..2 {
        let mut s = f.api.tls_stream(&[b"http/1.1"]).await.unwrap();
        s.write_all(b"POST /inject HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            .await
            .unwrap();
        s.flush().await.unwrap();
        busy.push(s);
    }
    // Both requests in flight (each has reserved its 100 declared body bytes) before the third client.
    wait_until("two requests in flight", e2e::PATIENCE, || async {
        f.server
            .metric("injector_body_bytes_in_flight")
            .await
            .unwrap_or(0.0)
            >= 200.0
    })
    .await;
    let api = f.api.clone();
    let third = tokio::spawn(async move {
        let mut c = api.connect(Http::H1).await?;
        c.send("GET", "/readyz", None, Bytes::new()).await
    });
    // A window for a violation to show: a correct server never serves it, however long it waits.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(
        !third.is_finished(),
        "a third connection was served beyond the cap"
    );
    drop(busy.pop());
    let answer = tokio::time::timeout(e2e::PATIENCE, third)
        .await
        .expect("the waiting client is served once a slot frees up")
        .unwrap()
        .unwrap();
    assert_eq!(answer.status, 200);
}

/// The `istio-proxy` container of a patched pod (native sidecar: an init container).
fn proxy_container(pod: &Value) -> Value {
    pods::container(pod, "istio-proxy")
        .cloned()
        .expect("an istio-proxy container")
}

/// The `PROXY_CONFIG` the webhook gives the hello pod in `namespace`.
async fn served_proxy_config(api: &ApiServer, tag: &str, namespace: &str) -> Value {
    let mut pod = hello_pod();
    pod["metadata"]["namespace"] = json!(namespace);
    let a = review_v1(api, tag, namespace, &pod).await;
    assert_eq!(a["response"]["allowed"], json!(true), "{a}");
    let proxy = proxy_container(&apply_patch(&a["response"], &pod).unwrap());
    let env = proxy["env"].as_array().unwrap();
    let text = env
        .iter()
        .find(|e| e["name"] == json!("PROXY_CONFIG"))
        .and_then(|e| e["value"].as_str())
        .unwrap();
    serde_json::from_str(text).unwrap()
}

fn proxy_config_resource(namespace: &str, concurrency: u32) -> String {
    format!(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: networking.istio.io/v1beta1\n  kind: ProxyConfig\n  metadata:\n    name: pc\n    namespace: {namespace}\n    creationTimestamp: \"2026-01-01T00:00:00Z\"\n  spec:\n    concurrency: {concurrency}\n"
    )
}

/// `serve --proxy-configs`: the resources reach the pod, a changed file takes effect without a restart, and
/// a broken one is refused, counted, and the last good resources stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_proxy_configs_reload() {
    let files = TempDir::new("proxy-configs");
    let pc = files.path().join("proxyconfigs.yaml");
    std::fs::write(&pc, proxy_config_resource("apps", 3)).unwrap();
    let pc_arg = pc.display().to_string();
    let f = fixture(
        Value::Null,
        Value::Null,
        &["--reload-interval-ms", "100", "--proxy-configs", &pc_arg],
    );
    assert_eq!(
        served_proxy_config(&f.api, "pc-1", "apps").await,
        json!({"concurrency": 3})
    );
    assert_eq!(
        served_proxy_config(&f.api, "pc-2", "other").await,
        json!({})
    );

    std::fs::write(&pc, proxy_config_resource("apps", 4)).unwrap();
    let api = f.api.clone();
    wait_until("changed resources in effect", e2e::PATIENCE, || {
        let api = api.clone();
        async move { served_proxy_config(&api, "pc-3", "apps").await == json!({"concurrency": 4}) }
    })
    .await;

    std::fs::write(
        &pc,
        proxy_config_resource("apps", 4).replace("concurrency: 4", "concurrency: many"),
    )
    .unwrap();
    wait_for_metric(
        &f.server,
        "invalid resources counted",
        "injector_config_reloads_total{result=\"failure\"}",
        1.0,
    )
    .await;
    assert_eq!(
        served_proxy_config(&f.api, "pc-4", "apps").await,
        json!({"concurrency": 4})
    );
    let log = f.server.log();
    assert!(log.contains("configuration reload failed"), "{log}");
    assert!(
        log.contains("ProxyConfig apps/pc: field spec.concurrency"),
        "{log}"
    );
}

/// `serve --platform openshift --namespaces`: the proxy ids come from the Namespace's annotations; a
/// missing or invalid annotation gives 1337 and the pod is still admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_openshift_proxy_ids() {
    let files = TempDir::new("namespaces");
    let ns = files.path().join("namespaces.yaml");
    std::fs::write(
        &ns,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: apps\n    annotations:\n      openshift.io/sa.scc.uid-range: 1000620000/10000\n      openshift.io/sa.scc.supplemental-groups: 1000620000/10000\n- apiVersion: v1\n  kind: Namespace\n  metadata:\n    name: broken\n    annotations:\n      openshift.io/sa.scc.uid-range: not-a-range\n",
    )
    .unwrap();
    let ns_arg = ns.display().to_string();
    let f = fixture(
        Value::Null,
        Value::Null,
        &["--platform", "openshift", "--namespaces", &ns_arg],
    );
    for (namespace, want) in [("apps", 1_000_629_999), ("broken", 1337), ("missing", 1337)] {
        let mut pod = hello_pod();
        pod["metadata"]["namespace"] = json!(namespace);
        let a = review_v1(&f.api, namespace, namespace, &pod).await;
        assert_eq!(a["response"]["allowed"], json!(true), "{namespace}: {a}");
        let proxy = proxy_container(&apply_patch(&a["response"], &pod).unwrap());
        for id in ["runAsUser", "runAsGroup"] {
            assert_eq!(
                proxy["securityContext"][id],
                json!(want),
                "{namespace} {id}"
            );
        }
    }
}
