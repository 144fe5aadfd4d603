//! `injector serve --kubeconfig --ca-bundle`: the caBundle of our revision's MutatingWebhookConfigurations
//! patched in a real kube-apiserver (`scripts/cluster.sh`, e2e::cluster) as Istio's `webhookpatch.go`
//! does: on start, after a wrong caBundle is written by someone else, and after the CA file changes;
//! another revision's configuration is never written. One control plane, the steps in order.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use e2e::apiserver::{injector_certs, Injector, TempDir};
use e2e::cluster::{wait_for, Cluster};
use serde_json::json;
use test_support::corpus::Config;

use crate::kube_apiserver::webhook_config;

/// The caBundle (base64, as stored) of every entry of configuration `name`, by entry name.
fn bundles(c: &Cluster, name: &str) -> BTreeMap<String, String> {
    let mwc = c
        .kubectl_json(&["get", "mutatingwebhookconfiguration", name], None)
        .unwrap();
    mwc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["name"].as_str().unwrap().to_string(),
                w["clientConfig"]["caBundle"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// Whether every entry of each configuration carries `want`; else the first that does not.
fn all_carry(c: &Cluster, names: &[String], want: &str) -> Result<(), String> {
    for n in names {
        for (entry, b) in bundles(c, n) {
            if b != want {
                return Err(format!("{n} {entry}: {}", &b[..b.len().min(24)]));
            }
        }
    }
    Ok(())
}

/// Configuration `name` as the apiserver stores it (resourceVersion and managedFields included).
fn stored(c: &Cluster, name: &str) -> String {
    c.kubectl(
        &["get", "mutatingwebhookconfiguration", name, "-o", "json"],
        None,
    )
    .unwrap()
}

fn pem_b64(path: &std::path::Path) -> String {
    base64::engine::general_purpose::STANDARD.encode(std::fs::read(path).unwrap())
}

/// `injector serve`'s arguments for `certs` and configuration `cfg`, keeping `ca_file` in the caBundle of
/// cluster `c`'s configurations, then `extra`.
fn patching_args(
    certs: &e2e::apiserver::CertFiles,
    cfg: &test_support::corpus::ConfigFiles,
    c: &Cluster,
    ca_file: &std::path::Path,
    extra: &[&str],
) -> Vec<String> {
    let mut args = e2e::apiserver::serve_args(&certs.cert, &certs.key, cfg);
    args.extend([
        "--kubeconfig".to_string(),
        c.kubeconfig.display().to_string(),
    ]);
    args.extend(["--ca-bundle".to_string(), ca_file.display().to_string()]);
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

#[test]
fn our_revisions_ca_bundle_is_patched_and_kept_and_no_other_is_touched() {
    let c = Cluster::up();
    let dir = TempDir::new("ca-bundle-patch");
    let ours = injector_certs(&dir.path().join("ours"), &["--san", "127.0.0.1"]).unwrap();
    let theirs = injector_certs(&dir.path().join("theirs"), &[]).unwrap();
    let rotated = injector_certs(&dir.path().join("rotated"), &[]).unwrap();
    let cfg = Config::base()
        .and_then(|c| c.write(&dir.path().join("cfg")))
        .unwrap();

    // The default revision's configuration and a tag's (both labelled istio.io/rev=default), created
    // with another CA's bundle; a canary revision's, which must stay as it is.
    let mut our_names = Vec::new();
    for mwc in webhook_config(&["--tag", "prod"], &theirs) {
        our_names.push(mwc["metadata"]["name"].as_str().unwrap().to_string());
        c.apply(&mwc).unwrap();
    }
    let canary = webhook_config(&["--revision", "canary"], &theirs);
    assert_eq!(canary.len(), 1);
    c.apply(&canary[0]).unwrap();
    let canary_name = canary[0]["metadata"]["name"].as_str().unwrap().to_string();
    let canary_before = stored(&c, &canary_name);
    assert_eq!(our_names.len(), 2, "{our_names:?}");

    let ca_file = dir.path().join("serving-ca.crt");
    std::fs::copy(ours.dir.join("ca.crt"), &ca_file).unwrap();
    let args = patching_args(&ours, &cfg, &c, &ca_file, &["--reload-interval-ms", "100"]);
    // The ProxyConfig CRD is not installed: the cluster watches fail, which must not hold up patching.
    let injector = Injector::start(&args, &BTreeMap::new()).expect("injector serve starts");

    let want = pem_b64(&ours.dir.join("ca.crt"));
    wait_for("our configurations patched on start", e2e::PATIENCE, || {
        all_carry(&c, &our_names, &want)
    });

    // Someone writes a wrong caBundle into one entry: corrected within 2 s.
    let wrong = pem_b64(&theirs.dir.join("ca.crt"));
    let patch =
        json!([{"op": "replace", "path": "/webhooks/0/clientConfig/caBundle", "value": wrong}]);
    c.kubectl(
        &[
            "patch",
            "mutatingwebhookconfiguration",
            &our_names[0],
            "--type=json",
            "-p",
            &patch.to_string(),
        ],
        None,
    )
    .unwrap();
    wait_for("a wrong caBundle corrected", Duration::from_secs(2), || {
        all_carry(&c, &our_names, &want)
    });

    // The serving CA changes (the file is rewritten): every entry of ours follows.
    std::fs::copy(rotated.dir.join("ca.crt"), &ca_file).unwrap();
    let want = pem_b64(&rotated.dir.join("ca.crt"));
    wait_for("the new CA patched in", e2e::PATIENCE, || {
        all_carry(&c, &our_names, &want)
    });

    assert_eq!(
        canary_before,
        stored(&c, &canary_name),
        "another revision's configuration was changed"
    );
    let attempts = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(injector.metric("webhook_patch_attempts_total"))
        .unwrap();
    // Start (2 configurations), the correction, the rotation (2); a conflict may add a retry, but our
    // own patches' watch events must not start a loop.
    assert!(
        (5.0..=7.0).contains(&attempts),
        "{attempts} patches: {}",
        injector.log()
    );
}

/// What a watch of one configuration saw: each version with the instant it arrived.
struct Versions {
    child: std::process::Child,
    seen: std::sync::Arc<std::sync::Mutex<Vec<(std::time::Instant, serde_json::Value)>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Versions {
    /// Starts `kubectl get --watch` of configuration `name`, and waits for its first version.
    fn watch(c: &Cluster, name: &str) -> Versions {
        use std::process::{Command, Stdio};
        let mut child = Command::new(&c.kubectl)
            .arg("--kubeconfig")
            .arg(&c.kubeconfig)
            .args(["get", "mutatingwebhookconfiguration", name])
            .args(["--watch", "--output-watch-events", "-o", "json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = seen.clone();
        let reader = std::thread::spawn(move || {
            let events = serde_json::Deserializer::from_reader(std::io::BufReader::new(stdout))
                .into_iter::<serde_json::Value>();
            for e in events.map_while(Result::ok) {
                sink.lock()
                    .unwrap()
                    .push((std::time::Instant::now(), e["object"].clone()));
            }
        });
        let v = Versions {
            child,
            seen,
            reader: Some(reader),
        };
        wait_for("the watch's first event", e2e::PATIENCE, || {
            (!v.seen.lock().unwrap().is_empty())
                .then_some(())
                .ok_or("none")
        });
        v
    }

    /// Stops the watch once it has seen version `last`: every version seen, in order.
    fn stop(mut self, last: &str) -> Vec<(std::time::Instant, serde_json::Value)> {
        wait_for("the watch to catch up", e2e::PATIENCE, || {
            let seen = self.seen.lock().unwrap();
            let mut rvs = seen.iter().map(|(_, v)| &v["metadata"]["resourceVersion"]);
            rvs.any(|rv| rv == last).then_some(()).ok_or(seen.len())
        });
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(r) = self.reader.take() {
            r.join().unwrap();
        }
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for Versions {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The certificates (DER) of each entry's caBundle.
fn entry_cas(mwc: &serde_json::Value) -> Vec<Vec<Vec<u8>>> {
    mwc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            let b64 = w["clientConfig"]["caBundle"].as_str().unwrap_or_default();
            let pem = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap_or_default();
            rustls_pemfile::certs(&mut pem.as_slice())
                .map_while(Result::ok)
                .map(|c| c.to_vec())
                .collect()
        })
        .collect()
}

fn ca_der(certs: &e2e::apiserver::CertFiles) -> Vec<u8> {
    let pem = std::fs::read(certs.dir.join("ca.crt")).unwrap();
    let der = rustls_pemfile::certs(&mut pem.as_slice())
        .next()
        .unwrap()
        .unwrap();
    der.to_vec()
}

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A rolling update that changes the CA. Replica A serves with CA a; replica B
/// starts with CA b on the same configuration; the API server is routed to B once B is ready, away
/// from A, and A gets SIGTERM. The configuration has two entries, `a.` and `b.` before Istio's
/// webhook name, so that every pod CREATE (failurePolicy Fail, created one after another throughout)
/// calls both: the first at A until A leaves, the second at B from B's readiness on. Nothing may fail.
/// The writes to the configuration (every version a watch sees, less the test's own two) stay at
/// about 10 a second or fewer; while both serve, every version's bundle holds both CAs; after A is
/// gone, exactly B's CA file. Before the fix the two replicas overwrote each other: about 240
/// patches a second, half of them conflicts, and calls failed verification.
#[test]
fn a_ca_rotation_across_two_replicas_loses_no_admission_and_writes_at_most_10_a_second() {
    use crate::kube_apiserver::{corpus_pod, create, injected, install, labels, to_url};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::Instant;

    let c = Cluster::up();
    let dir = TempDir::new("ca-rotation");
    let sans = ["--san", "127.0.0.1"];
    let (ca, cb) = (
        injector_certs(&dir.path().join("a"), &sans).unwrap(),
        injector_certs(&dir.path().join("b"), &sans).unwrap(),
    );
    let (der_a, der_b) = (ca_der(&ca), ca_der(&cb));
    assert_ne!(der_a, der_b);
    let cfg = Config::base()
        .and_then(|c| c.write(&dir.path().join("cfg")))
        .unwrap();
    let start = |certs: &e2e::apiserver::CertFiles| {
        let args = patching_args(
            certs,
            &cfg,
            &c,
            &certs.dir.join("ca.crt"),
            &["--native-sidecars", "true"],
        );
        Injector::start(&args, &BTreeMap::new()).expect("injector serve starts")
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    c.namespace("injected", &labels(&[("istio-injection", "enabled")]))
        .unwrap();

    // A alone, on the configuration as generated with A's CA, its `namespace.` entry twice.
    let mut a = start(&ca);
    let mut mwc = webhook_config(&[], &ca).remove(0);
    let name = mwc["metadata"]["name"].as_str().unwrap().to_string();
    let entry = mwc["webhooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "namespace.sidecar-injector.istio.io")
        .unwrap()
        .clone();
    let mut entries = Vec::new();
    for prefix in ["a.", "b."] {
        let mut e = entry.clone();
        e["name"] = json!(format!("{prefix}namespace.sidecar-injector.istio.io"));
        e["failurePolicy"] = json!("Fail");
        entries.push(e);
    }
    mwc["webhooks"] = json!(entries);
    let path = entry["clientConfig"]["service"]["path"]
        .as_str()
        .unwrap()
        .to_string();
    let mut mwcs = vec![mwc];
    to_url(&mut mwcs, a.https.port(), |_| {});
    install(&c, &mwcs, "injected", |r| r.as_ref().is_ok_and(injected));
    wait_for("A ready", e2e::PATIENCE, || {
        rt.block_on(a.ready())
            .unwrap()
            .then_some(())
            .ok_or("not ready")
    });
    // Routes entry `i` to `port`, as the endpoints of the Service would: the version it wrote.
    let route = |i: usize, port: u16| -> String {
        let patch = json!([{"op": "replace", "path": format!("/webhooks/{i}/clientConfig/url"),
                            "value": format!("https://127.0.0.1:{port}{path}")}]);
        let out = c
            .kubectl_json(
                &[
                    "patch",
                    "mutatingwebhookconfiguration",
                    &name,
                    "--type=json",
                    "-p",
                    &patch.to_string(),
                ],
                None,
            )
            .unwrap();
        out["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };

    let versions = Versions::watch(&c, &name);
    let stop = AtomicBool::new(false);
    let (admitted, attempted) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let (created, t_b, b_ready, routed, unrouted, t_a_gone, converged, conflicts, end) =
        std::thread::scope(|scope| {
            let creator = scope.spawn(|| {
                let mut results = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    let name = format!("p{}", results.len());
                    let r = create(&c, "injected", &corpus_pod("hello.yaml", &name), &[]);
                    let r = r.map(|p| injected(&p)).map_err(|e| format!("{e:#}"));
                    if r == Ok(true) {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    attempted.fetch_add(1, Ordering::SeqCst);
                    results.push((name, r));
                }
                results
            });
            // The creator stops however this ends (a failed wait included).
            let _stop = StopOnDrop(&stop);
            // Waits until `n` more pods were created (or refused).
            let count = |n: usize, of: &AtomicUsize, what: &str| {
                let from = of.load(Ordering::SeqCst);
                wait_for(what, e2e::PATIENCE, || {
                    (of.load(Ordering::SeqCst) >= from + n)
                        .then_some(())
                        .ok_or("waiting")
                });
            };
            count(3, &admitted, "pods admitted by A alone");

            // B starts (the rolling update's surge) and is routed to once ready.
            let t_b = Instant::now();
            let b = start(&cb);
            wait_for("B ready", e2e::PATIENCE, || {
                rt.block_on(b.ready())
                    .unwrap()
                    .then_some(())
                    .ok_or("not ready")
            });
            let b_ready = t_b.elapsed();
            let routed = route(1, b.https.port());
            // Both serve, for at least 5 s and 10 pod creates.
            let overlap = Instant::now();
            count(10, &attempted, "pods created while both replicas serve");
            while overlap.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(100));
            }

            // A leaves: routed away, then SIGTERM.
            let unrouted = route(0, b.https.port());
            let failures = |i: &Injector| {
                rt.block_on(i.metric("webhook_patch_failures_total"))
                    .unwrap()
            };
            let conflicts = failures(&a);
            a.terminate().unwrap();
            let t_a_gone = Instant::now();
            let want = std::fs::read(cb.dir.join("ca.crt")).unwrap();
            wait_for("only B's CA file in both entries", e2e::PATIENCE, || {
                let got: Vec<Vec<u8>> = bundles(&c, &name)
                    .values()
                    .map(|b| base64::engine::general_purpose::STANDARD.decode(b).unwrap())
                    .collect();
                got.iter()
                    .all(|g| *g == want)
                    .then_some(())
                    .ok_or(got.len())
            });
            let converged = t_a_gone.elapsed();
            count(5, &attempted, "pods created with B alone");
            let end = Instant::now();
            stop.store(true, Ordering::SeqCst);
            let conflicts = conflicts + failures(&b);
            (
                creator.join().unwrap(),
                t_b,
                b_ready,
                routed,
                unrouted,
                t_a_gone,
                converged,
                conflicts,
                end,
            )
        });
    let seen = versions.stop(&unrouted);

    // The writes of the injectors: every version seen from B's start, less the test's two.
    let rv = |v: &serde_json::Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let writes: Vec<Instant> = seen
        .iter()
        .filter(|(at, v)| *at >= t_b && *at <= end && rv(v) != routed && rv(v) != unrouted)
        .map(|(at, _)| *at)
        .collect();
    let window = end.duration_since(t_b).as_secs_f64();
    let most_in_a_second = writes
        .iter()
        .map(|t| {
            writes
                .iter()
                .filter(|u| **u >= *t && u.duration_since(*t) < Duration::from_secs(1))
                .count()
        })
        .max()
        .unwrap_or(0);
    let failed: Vec<_> = created.iter().filter(|(_, r)| r != &Ok(true)).collect();
    println!(
        "ca rotation, two replicas: B ready {:.1} s after its start; {} writes in {window:.1} s ({:.1}/s, at most {most_in_a_second} in one second), \
         {conflicts} failed patches (conflicts), only B's CA {:.1} s after A's SIGTERM returned, {} of {} pods admitted ({:.1} s after B started)",
        b_ready.as_secs_f64(),
        writes.len(),
        writes.len() as f64 / window,
        converged.as_secs_f64(),
        created.len() - failed.len(),
        created.len(),
        t_a_gone.duration_since(t_b).as_secs_f64(),
    );

    // While A serves, every version trusts A; from B's routing to A's unrouting, B too.
    let index = |want: &str| {
        seen.iter()
            .position(|(_, v)| rv(v) == want)
            .expect("the watch saw the test's own write")
    };
    let (from, to) = (index(&routed), index(&unrouted));
    for (i, (_, v)) in seen.iter().enumerate().take(to) {
        for (entry, cas) in entry_cas(v).iter().enumerate() {
            assert!(
                cas.contains(&der_a),
                "version {} entry {entry}: A's CA missing",
                rv(v)
            );
            if i >= from {
                assert!(
                    cas.contains(&der_b),
                    "version {} entry {entry}: B's CA missing",
                    rv(v)
                );
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} pod creates failed during the rotation: {:?}",
        failed.len(),
        created.len(),
        &failed[..failed.len().min(5)]
    );
    assert!(
        writes.len() as f64 <= 10.0 * window && most_in_a_second <= 10,
        "{} writes in {window:.1} s, {most_in_a_second} in one second",
        writes.len()
    );
    // A's record left with it: one record, B's.
    let stored = c
        .kubectl_json(&["get", "mutatingwebhookconfiguration", &name], None)
        .unwrap();
    let records: Vec<&String> = stored["metadata"]["annotations"]
        .as_object()
        .map(|a| {
            a.keys()
                .filter(|k| k.starts_with("ca-bundle.sidecar-inject.io/"))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(records.len(), 1, "{records:?}");
}
