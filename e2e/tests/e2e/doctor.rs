//! `injector doctor` against the real `injector serve` on loopback: a correct setup is all `ok`; a
//! caBundle of another CA, a certificate without the service name, an expired certificate, a stopped
//! server and a server that never answers are errors, each with a fix, and doctor returns within the
//! configuration's timeoutSeconds.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use e2e::apiserver::{injector_certs, serve_args, CertFiles, Injector, TempDir};
use serde_json::{json, Value};
use test_support::corpus::Config;
use test_support::process::run_ok;

/// The TLS name doctor checks: `<service>.<namespace>.svc` of the generated configuration.
pub(crate) const SERVICE_NAME: &str = "sidecar-injector.sidecar-injector.svc";

/// `injector serve` with `cert`/`key` on the base test configuration.
fn serve(dir: &Path, cert: &Path, key: &Path) -> Injector {
    let cfg = Config::with(&Value::Null, &Value::Null, &Value::Null)
        .and_then(|c| c.write(&dir.join("cfg")))
        .expect("config files");
    let args = serve_args(cert, key, &cfg);
    Injector::start(&args, &BTreeMap::new()).expect("injector serve starts")
}

/// `injector webhook-config --ca-bundle ca <extra>` written to `out`.
pub(crate) fn webhook_config(ca: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let o = run_ok(
        Command::new(e2e::bin("injector"))
            .arg("webhook-config")
            .arg("--ca-bundle")
            .arg(ca)
            .args(extra),
        "injector webhook-config",
    );
    std::fs::write(out, &o.stdout).unwrap();
    out.to_path_buf()
}

pub(crate) struct Run {
    pub(crate) code: i32,
    pub(crate) report: Value,
    pub(crate) elapsed: Duration,
}

/// Runs `injector doctor -o json` with `args`; checks the report's shape and that every finding that is
/// not `ok` carries a fix.
pub(crate) fn doctor(args: &[String]) -> Run {
    let start = Instant::now();
    let o = Command::new(e2e::bin("injector"))
        .arg("doctor")
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("injector doctor runs");
    let elapsed = start.elapsed();
    let report: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor output is not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let findings = report["findings"].as_array().expect("findings");
    assert!(!findings.is_empty(), "{report:#}");
    let mut errors = 0;
    for f in findings {
        for k in ["check", "found", "why"] {
            assert!(f[k].as_str().is_some(), "finding without {k}: {f}");
        }
        assert!(!f["entries"].as_array().expect("entries").is_empty(), "{f}");
        match f["level"].as_str().expect("level") {
            "ok" => assert_eq!(f["fix"], Value::Null, "{f}"),
            level => {
                assert!(level == "error" || level == "warning", "{f}");
                errors += usize::from(level == "error");
                let fix = f["fix"].as_str().unwrap_or_default();
                assert!(fix.len() > 10, "finding without a fix: {f}");
            }
        }
    }
    assert_eq!(report["errors"], json!(errors), "{report:#}");
    let code = o.status.code().expect("exit code");
    assert_eq!(
        code,
        i32::from(errors > 0),
        "exit code vs errors: {report:#}"
    );
    Run {
        code,
        report,
        elapsed,
    }
}

/// [`doctor`] on `args`, which must exit 1: an error found.
pub(crate) fn doctor_finds_errors(args: &[String]) -> Run {
    let run = doctor(args);
    assert_eq!(run.code, 1, "{:#}", run.report);
    run
}

pub(crate) fn args(mwc: &Path, tls_cert: Option<&Path>, addr: Option<SocketAddr>) -> Vec<String> {
    let mut a = vec!["--webhook-config".to_string(), mwc.display().to_string()];
    if let Some(c) = tls_cert {
        a.extend(["--tls-cert".to_string(), c.display().to_string()]);
    }
    if let Some(addr) = addr {
        a.extend(["--url".to_string(), format!("https://{addr}")]);
    }
    a
}

/// The findings of `check` at `level`.
pub(crate) fn findings<'a>(run: &'a Run, level: &str, check: &str) -> Vec<&'a Value> {
    run.report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["level"] == json!(level) && f["check"] == json!(check))
        .collect()
}

/// The one error finding of `check`, which must say `found` (the report is printed when it does not).
pub(crate) fn the_error<'a>(run: &'a Run, check: &str, found: &str) -> &'a Value {
    let errs = findings(run, "error", check);
    assert_eq!(errs.len(), 1, "{:#}", run.report);
    let text = errs[0]["found"].as_str().unwrap_or("");
    assert!(text.contains(found), "{}", errs[0]);
    errs[0]
}

fn certs(dir: &Path, extra: &[&str]) -> CertFiles {
    injector_certs(dir, extra).expect("injector certs")
}

#[test]
fn a_correct_setup_is_ok_offline_and_live() {
    let dir = TempDir::new("doctor-ok");
    let c = certs(&dir.path().join("certs"), &[]);
    let server = serve(dir.path(), &c.cert, &c.key);
    // Both generators: the configuration `injector certs` wrote and `webhook-config --ca-bundle`.
    let generated = webhook_config(&c.dir.join("ca.crt"), &dir.path().join("mwc.yaml"), &[]);
    for mwc in [c.dir.join("mutatingwebhookconfiguration.yaml"), generated] {
        let run = doctor(&args(&mwc, Some(&c.cert), Some(server.https)));
        assert_eq!(run.code, 0, "{:#}", run.report);
        assert_eq!(run.report["errors"], json!(0));
        assert_eq!(run.report["warnings"], json!(0), "{:#}", run.report);
        for check in [
            "ca-bundle",
            "certificate-authority",
            "certificate-name",
            "certificate-expiry",
            "served-certificate",
            "tls-version",
            "review",
            "lock-out",
            "timeout",
        ] {
            assert!(
                !findings(&run, "ok", check).is_empty(),
                "no ok {check}: {:#}",
                run.report
            );
        }
        // Offline and live, the certificate checks ran for both sources.
        assert_eq!(findings(&run, "ok", "certificate-authority").len(), 2);
        let name = findings(&run, "ok", "certificate-name");
        assert!(name
            .iter()
            .all(|f| f["found"].as_str().unwrap().contains(SERVICE_NAME)));
        let review = findings(&run, "ok", "review");
        assert!(review[0]["found"]
            .as_str()
            .unwrap()
            .contains("allowed=true"));
    }
    // The text form says the same, with the exit code.
    let o = Command::new(e2e::bin("injector"))
        .arg("doctor")
        .args(args(
            &c.dir.join("mutatingwebhookconfiguration.yaml"),
            Some(&c.cert),
            Some(server.https),
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("OK      review:"), "{text}");
    assert!(text.contains("\n0 error(s), 0 warning(s), "), "{text}");
}

#[test]
fn a_ca_bundle_of_another_ca_is_an_error_naming_the_ca_bundle() {
    let dir = TempDir::new("doctor-ca");
    let c = certs(&dir.path().join("served"), &[]);
    let other = certs(&dir.path().join("other"), &[]);
    let server = serve(dir.path(), &c.cert, &c.key);
    let mwc = other.dir.join("mutatingwebhookconfiguration.yaml");
    let run = doctor(&args(&mwc, Some(&c.cert), Some(server.https)));
    assert_eq!(run.code, 1);
    let errs = findings(&run, "error", "certificate-authority");
    // Offline from --tls-cert and live from the handshake.
    assert_eq!(errs.len(), 2, "{:#}", run.report);
    for f in &errs {
        let found = f["found"].as_str().unwrap();
        assert!(found.contains("caBundle"), "{found}");
        assert!(
            found.contains("x509: certificate signed by unknown authority"),
            "{found}"
        );
        let fix = f["fix"].as_str().unwrap();
        assert!(fix.contains("/clientConfig/caBundle"), "{fix}");
    }
    assert!(errs[0]["found"].as_str().unwrap().contains("--tls-cert"));
    assert!(errs[1]["found"]
        .as_str()
        .unwrap()
        .contains("served at https://"));
    // The rest of the setup is fine: the name, the dates, the review.
    assert!(findings(&run, "error", "certificate-name").is_empty());
    assert!(!findings(&run, "ok", "review").is_empty());
    // The fix, run where the served CA's ca.crt is, makes the configuration verify.
    let fixed = apply_fix(
        errs[0]["fix"].as_str().unwrap(),
        &mwc,
        &c.dir,
        &dir.path().join("fixed.yaml"),
    );
    let run = doctor(&args(&fixed, Some(&c.cert), Some(server.https)));
    assert_eq!(run.code, 0, "{:#}", run.report);
}

/// Runs a `kubectl patch mutatingwebhookconfiguration NAME ...` fix offline on `mwc` (`--local`) in
/// `cwd`, writing the patched configuration to `out`.
fn apply_fix(fix: &str, mwc: &Path, cwd: &Path, out: &Path) -> PathBuf {
    let (prefix, rest) = fix
        .split_once("kubectl patch mutatingwebhookconfiguration ")
        .unwrap_or_else(|| panic!("not a kubectl patch: {fix}"));
    let (_name, rest) = rest.split_once(' ').unwrap();
    let command = format!(
        "{prefix}{} patch --local -o json -f {} {rest}",
        e2e::apiserver::kubectl().display(),
        mwc.display()
    );
    let o = run_ok(
        Command::new("bash")
            .arg("-c")
            .arg(&command)
            .current_dir(cwd),
        &command,
    );
    std::fs::write(out, &o.stdout).unwrap();
    out.to_path_buf()
}

#[test]
fn lock_out_and_timeout_findings_are_fixed_by_their_commands() {
    let dir = TempDir::new("doctor-lockout");
    let c = certs(&dir.path().join("certs"), &[]);
    let generated = webhook_config(
        &c.dir.join("ca.crt"),
        &dir.path().join("mwc.yaml"),
        &["--timeout-seconds", "20"],
    );
    // Istio's own selectors: without this project's exclusion of kube-system and its own namespace.
    let mut mwc: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&generated).unwrap()).unwrap();
    for w in mwc["webhooks"].as_array_mut().unwrap() {
        w["namespaceSelector"]["matchExpressions"]
            .as_array_mut()
            .unwrap()
            .retain(|r| r["key"] != json!("kubernetes.io/metadata.name"));
    }
    mwc["webhooks"][1]["objectSelector"] = Value::Null;
    let mut current = dir.path().join("step0.json");
    std::fs::write(&current, mwc.to_string()).unwrap();
    let run = doctor_finds_errors(&args(&current, None, None));
    // rev.object. without an objectSelector takes every pod of kube-system: an error; object. only the
    // labelled ones: a warning; the namespace-label entries exclude them.
    let err = the_error(
        &run,
        "lock-out",
        "every pod in kube-system and sidecar-injector",
    );
    assert_eq!(
        err["entries"],
        json!(["sidecar-injector/rev.object.sidecar-injector.istio.io"])
    );
    assert_eq!(
        findings(&run, "warning", "lock-out").len(),
        1,
        "{:#}",
        run.report
    );
    assert_eq!(
        findings(&run, "warning", "timeout").len(),
        4,
        "{:#}",
        run.report
    );
    let fixes: Vec<String> = run.report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["level"] != json!("ok"))
        .map(|f| f["fix"].as_str().unwrap().to_string())
        .collect();
    for (i, fix) in fixes.iter().enumerate() {
        let next = dir.path().join(format!("step{}.json", i + 1));
        current = apply_fix(fix, &current, &c.dir, &next);
    }
    let run = doctor(&args(&current, None, None));
    assert_eq!(run.code, 0, "{:#}", run.report);
    assert_eq!(run.report["warnings"], json!(0), "{:#}", run.report);
}

#[test]
fn a_certificate_without_the_service_name_is_an_error() {
    let dir = TempDir::new("doctor-name");
    let c = certs(&dir.path().join("certs"), &["--service", "elsewhere"]);
    let mwc = webhook_config(&c.dir.join("ca.crt"), &dir.path().join("mwc.yaml"), &[]);
    let server = serve(dir.path(), &c.cert, &c.key);
    let run = doctor(&args(&mwc, Some(&c.cert), Some(server.https)));
    assert_eq!(run.code, 1);
    let errs = findings(&run, "error", "certificate-name");
    assert_eq!(errs.len(), 2, "{:#}", run.report);
    for f in errs {
        let found = f["found"].as_str().unwrap();
        assert!(
            found.contains(&format!("not for {SERVICE_NAME}")),
            "{found}"
        );
        assert!(found.contains("elsewhere.sidecar-injector.svc"), "{found}");
        let fix = f["fix"].as_str().unwrap();
        assert!(
            fix.contains("injector certs") && fix.contains("--service sidecar-injector"),
            "{fix}"
        );
    }
    assert!(findings(&run, "error", "certificate-authority").is_empty());
    // --server-name overrides the name checked.
    let mut a = args(&mwc, Some(&c.cert), None);
    a.extend([
        "--server-name".into(),
        "elsewhere.sidecar-injector.svc".into(),
    ]);
    let run = doctor(&a);
    assert_eq!(run.code, 0, "{:#}", run.report);
}

#[test]
fn an_expired_certificate_is_an_error() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let dir = TempDir::new("doctor-expired");
    let now = time::OffsetDateTime::now_utc();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.not_before = now - time::Duration::days(90);
    ca.not_after = now + time::Duration::days(900);
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec![SERVICE_NAME.to_string()]).unwrap();
    leaf.not_before = now - time::Duration::days(60);
    leaf.not_after = now - time::Duration::days(1);
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let (ca_pem, cert_pem, key_pem) = (
        dir.path().join("ca.crt"),
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
    );
    std::fs::write(&ca_pem, ca_cert.pem()).unwrap();
    std::fs::write(&cert_pem, cert.pem()).unwrap();
    std::fs::write(&key_pem, key.serialize_pem()).unwrap();
    let mwc = webhook_config(&ca_pem, &dir.path().join("mwc.yaml"), &[]);
    let server = serve(dir.path(), &cert_pem, &key_pem);
    let run = doctor(&args(&mwc, Some(&cert_pem), Some(server.https)));
    assert_eq!(run.code, 1);
    let errs = findings(&run, "error", "certificate-expiry");
    assert_eq!(errs.len(), 2, "{:#}", run.report);
    for f in errs {
        assert!(f["found"].as_str().unwrap().contains("expired on"), "{f}");
        assert!(f["fix"].as_str().unwrap().contains("injector certs"), "{f}");
    }
    // The chain itself is the caBundle's: only the dates are wrong.
    assert_eq!(
        findings(&run, "ok", "certificate-authority").len(),
        2,
        "{:#}",
        run.report
    );
}

#[test]
fn a_stopped_or_silent_server_is_an_error_within_the_timeout() {
    let dir = TempDir::new("doctor-down");
    let c = certs(&dir.path().join("certs"), &[]);
    let mut server = serve(dir.path(), &c.cert, &c.key);
    let addr = server.https;
    server.terminate().expect("server stops");
    let mwc = c.dir.join("mutatingwebhookconfiguration.yaml");
    let run = doctor(&args(&mwc, None, Some(addr)));
    assert_eq!(run.code, 1);
    let err = the_error(&run, "endpoint", "cannot connect");
    let fix = err["fix"].as_str().unwrap();
    assert!(
        fix.contains("kubectl -n sidecar-injector get endpoints sidecar-injector"),
        "{fix}"
    );
    assert!(findings(&run, "ok", "review").is_empty());

    // A listener that accepts and never answers: doctor gives up after timeoutSeconds (2 here).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mwc = webhook_config(
        &c.dir.join("ca.crt"),
        &dir.path().join("mwc-2s.yaml"),
        &["--timeout-seconds", "2"],
    );
    let run = doctor(&args(&mwc, None, Some(silent.local_addr().unwrap())));
    assert_eq!(run.code, 1);
    the_error(&run, "endpoint", "no answer within timeoutSeconds (2 s)");
    assert!(run.elapsed >= Duration::from_secs(2), "{:?}", run.elapsed);
    // Bounded by the entry's 2 s, not by the 10 s an entry without timeoutSeconds gets: the slack above
    // 2 s is for a busy machine (process start, the listener's accept).
    assert!(run.elapsed < Duration::from_secs(9), "{:?}", run.elapsed);
    drop(silent);
}

#[test]
fn a_server_below_tls_1_2_is_a_tls_version_error() {
    let dir = TempDir::new("doctor-tls10");
    let c = certs(&dir.path().join("certs"), &[]);
    // Answers every ClientHello as a TLS 1.0-only server does: a fatal protocol_version alert.
    let old = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = old.local_addr().unwrap();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut conn in old.incoming().flatten() {
            let mut buf = [0u8; 512];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(&[0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x46]);
        }
    });
    let run = doctor(&args(
        &c.dir.join("mutatingwebhookconfiguration.yaml"),
        None,
        Some(addr),
    ));
    assert_eq!(run.code, 1);
    the_error(&run, "tls-version", "refused TLS 1.2 and 1.3");
    assert!(findings(&run, "ok", "review").is_empty());
}
