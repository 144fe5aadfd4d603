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
    let mut args = e2e::apiserver::serve_args(&ours.cert, &ours.key, &cfg);
    for a in [
        "--kubeconfig",
        c.kubeconfig.to_str().unwrap(),
        "--ca-bundle",
        ca_file.to_str().unwrap(),
        "--reload-interval-ms",
        "100",
    ] {
        args.push(a.to_string());
    }
    // The ProxyConfig CRD is not installed: the cluster watches fail, which must not hold up patching.
    let injector = Injector::start(&args, &BTreeMap::new()).expect("injector serve starts");

    let want = pem_b64(&ours.dir.join("ca.crt"));
    wait_for(
        "our configurations patched on start",
        Duration::from_secs(10),
        || all_carry(&c, &our_names, &want),
    );

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
    wait_for("the new CA patched in", Duration::from_secs(10), || {
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
