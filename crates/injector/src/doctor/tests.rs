#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::json;

use super::certificates::*;
use super::lockout::*;
use super::probe::*;
use super::report::*;
use super::url::*;
use super::validation::*;
use super::*;

fn hook(value: Value) -> Entry {
    Entry::new("cfg", 2, "namespace.sidecar-injector.istio.io", value)
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
    let junk = base64_simd::STANDARD
        .encode_to_string(b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n");
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
    let hooks = webhook_entry::read(Path::new("x.yaml"), text).expect("hooks");
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
) -> (Vec<CertificateDer<'static>>, Vec<CertificateDer<'static>>) {
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
    (vec![ca_cert.der().clone()], vec![cert.der().clone()])
}

fn chain_findings(names: &[&str], from: i64, until: i64) -> Vec<Finding> {
    let (roots, chain) = chain(names, from, until);
    let h = hook(json!({"clientConfig": svc()}));
    let provider = tls::crypto_provider();
    let hooks = [&h];
    let t = Target {
        roots: Some(&roots[..]),
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
    assert!(f.iter().any(
        |f| f.found.contains("expires in 9 day(s)") || f.found.contains("expires in 10 day(s)")
    ));
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
    // Anything that would end or split the request line: CR, LF, NUL, other C0, DEL, a space.
    for bad in [
        "https://h/inject\r\nX-Injected: 1",
        "https://h/inject\n",
        "https://h/in\0ject",
        "https://h/in\tject",
        "https://h/in\u{7f}ject",
        "https://h/in ject",
        "https://h\r\n:443",
    ] {
        let e = parse_url(bad).expect_err(bad).to_string();
        assert!(e.starts_with(&format!("--url {bad:?}: ")), "{e}");
        assert!(e.contains("control character"), "{e}");
        assert!(!e.contains('\r') && !e.contains('\n'), "{e:?}");
    }
}

/// `exchange` against a peer that reads the request and writes `answer`, then keeps the stream
/// open (the test's end closes it).
fn exchange_with(answer: Vec<u8>) -> Result<(u16, Vec<u8>), ExchangeError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        let peer = tokio::spawn(async move {
            let mut buf = vec![0u8; 64 * 1024];
            let _ = server.read(&mut buf).await;
            let _ = server.write_all(&answer).await;
            // Held open: the client must not wait for the close.
            std::future::pending::<()>().await;
        });
        let r = tokio::time::timeout(
            Duration::from_secs(20),
            exchange(client, "h", "/inject", b"{}"),
        )
        .await
        .expect("the answer is complete before the peer closes");
        peer.abort();
        r
    })
}

#[test]
fn an_answer_is_complete_at_the_end_of_its_body_and_bounded() {
    let ok = exchange_with(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc".to_vec());
    assert_eq!(ok.ok(), Some((200, b"abc".to_vec())));
    let chunked = exchange_with(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".to_vec(),
    );
    assert_eq!(chunked.ok(), Some((200, b"abc".to_vec())));
    let mut big = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
        MAX_ANSWER_BYTES + 1
    )
    .into_bytes();
    big.resize(big.len() + MAX_ANSWER_BYTES + 1, b'x');
    assert!(matches!(exchange_with(big), Err(ExchangeError::TooLarge)));
    let e = exchange_with(b"SMTP ready\r\n\r\n".to_vec()).expect_err("not HTTP");
    assert!(
        e.text("a").starts_with("the answer is not HTTP/1.1"),
        "{}",
        e.text("a")
    );
}

fn client_config(h: &Entry) -> Vec<(Level, String)> {
    check_client_config(h)
        .into_iter()
        .map(|f| {
            assert_eq!(f.check, "client-config");
            assert!(f.fix.is_some(), "{f:?}");
            (f.level, f.found)
        })
        .collect()
}

#[test]
fn control_characters_in_the_path_or_url_and_http_urls_are_errors() {
    assert!(client_config(&hook(json!({"clientConfig": svc()}))).is_empty());
    let path =
        |p: &str| json!({"clientConfig": {"service": {"name": "s", "namespace": "n", "path": p}}});
    let f = client_config(&hook(path("/inject\r\nX-Injected: yes")));
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].0, Level::Error);
    assert!(
        f[0].1.contains(
            "webhook namespace.sidecar-injector.istio.io: clientConfig.service.path \
             \"/inject\\r\\nX-Injected: yes\""
        ),
        "{}",
        f[0].1
    );
    for p in ["/in\0ject", "/in ject", "/inject\u{7f}", "inject"] {
        assert_eq!(client_config(&hook(path(p))).len(), 1, "{p:?}");
    }
    let url = |u: &str| json!({"clientConfig": {"url": u}});
    assert!(client_config(&hook(url("https://injector.example:8443/inject"))).is_empty());
    let f = check_client_config(&hook(url("http://injector.example/inject")));
    assert_eq!(f.len(), 1);
    assert!(
        f[0].found
            .contains("clientConfig.url \"http://injector.example/inject\" is http"),
        "{}",
        f[0].found
    );
    assert!(f[0]
        .fix
        .as_deref()
        .expect("fix")
        .contains(r#""value":"https://injector.example/inject""#));
    let f = client_config(&hook(url("https://h/inject\r\nX: 1")));
    assert!(
        f[0].1.contains(r#""https://h/inject\r\nX: 1""#),
        "{}",
        f[0].1
    );
    assert_eq!(client_config(&hook(url("ftp://h"))).len(), 1);
}

#[test]
fn a_failure_policy_other_than_fail_or_ignore_is_an_error() {
    for ok in [json!("Fail"), json!("Ignore"), Value::Null] {
        assert!(check_failure_policy(&hook(json!({"failurePolicy": ok}))).is_none());
    }
    assert!(check_failure_policy(&hook(json!({}))).is_none());
    for bad in [json!("Maybe"), json!("fail"), json!(1)] {
        let f = check_failure_policy(&hook(json!({ "failurePolicy": bad }))).expect("error");
        assert_eq!((f.level, f.check), (Level::Error, "failure-policy"));
        assert!(
            f.found.contains(&format!("failurePolicy {bad}")),
            "{}",
            f.found
        );
        assert!(f.found.contains("namespace.sidecar-injector.istio.io"));
        assert!(f
            .fix
            .expect("fix")
            .contains(r#"{"op":"replace","path":"/webhooks/2/failurePolicy","value":"Fail"}"#));
    }
}

#[test]
fn answers_are_checked_for_uid_allowed_and_patch() {
    let answer = |response| sidecar_core::admission_review::answer("admission.k8s.io/v1", response);
    let ok = answer(json!({"uid": "u", "allowed": true}));
    assert!(check_answer(200, ok.to_string().as_bytes(), "u").is_ok());
    assert!(check_answer(200, ok.to_string().as_bytes(), "v")
        .expect_err("uid")
        .contains("response.uid"));
    assert!(check_answer(500, b"boom", "u").is_err());
    let denied = answer(json!({"uid": "u", "allowed": false}));
    assert!(check_answer(200, denied.to_string().as_bytes(), "u")
        .expect_err("denied")
        .contains("allowed"));
}
