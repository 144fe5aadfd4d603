//! The chart's `policy.enabled` (issue 31): the CRD, the MutatingAdmissionPolicy and its bindings are
//! `injector policy`'s for the same revision, tags and options, object for object; the params object is
//! `injector policy`'s name and labels with a spec that injects no pod until the injector writes the
//! compiled one; the injector runs with `--own-policy-params`, and the RBAC grants it exactly the update
//! of that one object, which `helm install` into an API server serving the policy API confirms (the
//! params object is a hook, created after the CRD). Off by default: none of it is rendered.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use e2e::helm::{self, Helm};
use e2e::policy_differential::policy_objects;
use serde_json::{json, Value};
use test_support::semantic;

/// The release's namespace, as `deploy/` and `injector policy` default to.
const NS: &str = "sidecar-injector";

/// `docs`' objects of `kind`, by name.
fn named(docs: &[Value], kind: &str) -> Vec<(String, Value)> {
    let mut v: Vec<(String, Value)> = helm::of_kind(docs, kind)
        .into_iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o.clone(),
            )
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn args_of(docs: &[Value]) -> Vec<String> {
    let deployment = helm::of_kind(docs, "Deployment")[0];
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The ClusterRole's rules for the params kind.
fn params_rules(docs: &[Value]) -> Vec<Value> {
    helm::of_kind(docs, "ClusterRole")
        .into_iter()
        .flat_map(|r| r["rules"].as_array().unwrap().clone())
        .filter(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x == "injectionparams")
        })
        .collect()
}

#[test]
fn chart_policy_is_injector_policys_and_off_by_default() {
    let helm = Helm::offline();
    let canary = ["--revision", "canary"];
    let cases: Vec<(&str, &str, Vec<&str>, Vec<&str>)> = vec![
        ("default revision", NS, vec![], vec![]),
        (
            "a revision with tags",
            NS,
            vec![
                "--set",
                "revision=canary",
                "--set",
                "revisionTags={prod,default}",
            ],
            [&canary[..], &["--tag", "prod", "--tag", "default"]].concat(),
        ),
        (
            "enableNamespacesByDefault",
            NS,
            vec![
                "--set",
                "sidecarInjectorWebhook.enableNamespacesByDefault=true",
            ],
            vec!["--enable-namespaces-by-default"],
        ),
        (
            "path, namespace, the beta API",
            "mesh",
            vec![
                "--set",
                "istiodRemote.injectionPath=/inject/cluster/c1/net/n1",
                "--set",
                "policy.apiVersion=v1beta1",
            ],
            vec![
                "--namespace",
                "mesh",
                "--path",
                "/inject/cluster/c1/net/n1",
                "--api-version",
                "v1beta1",
            ],
        ),
    ];
    for (what, ns, set, flags) in cases {
        let mut args = vec!["--set", "policy.enabled=true"];
        args.extend(&set);
        let chart = helm.template(ns, &args).unwrap();
        let want = policy_objects(&flags).unwrap();
        for kind in [
            "CustomResourceDefinition",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
        ] {
            let (got, want) = (named(&chart, kind), named(&want, kind));
            assert!(!got.is_empty(), "{what}: no {kind}");
            let (got, want): (Vec<Value>, Vec<Value>) = (
                got.into_iter().map(|x| x.1).collect(),
                want.into_iter().map(|x| x.1).collect(),
            );
            assert!(
                got == want,
                "{what}: the chart's {kind}s are not `injector policy {}`'s: {}\n(the chart's files/policy.json is written by `cargo run -p xtask -- docs`)",
                flags.join(" "),
                semantic::compare_documents(&got, &want).err().unwrap_or_default(),
            );
        }
        // The params object: injector policy's name and labels, a spec that injects no pod.
        let (got, want) = (
            named(&chart, "InjectionParams"),
            named(&want, "InjectionParams"),
        );
        assert_eq!(got.len(), 1, "{what}");
        let (name, params) = &got[0];
        assert_eq!(name, &want[0].0, "{what}");
        assert_eq!(
            params["metadata"]["labels"], want[0].1["metadata"]["labels"],
            "{what}"
        );
        assert_eq!(params["spec"]["decision"]["policy"], "refused", "{what}");
        assert_eq!(
            params["metadata"]["annotations"]["helm.sh/hook"],
            "post-install,post-upgrade"
        );
        // The injector owns it, with exactly the rights for that one object.
        let path = set
            .iter()
            .find_map(|s| s.strip_prefix("istiodRemote.injectionPath="))
            .unwrap_or("/inject");
        let serve = args_of(&chart);
        assert!(
            serve.contains(&"--own-policy-params".to_string()),
            "{what}: {serve:?}"
        );
        assert!(
            serve.contains(&format!("--policy-path={path}")),
            "{what}: {serve:?}"
        );
        assert_eq!(
            params_rules(&chart),
            vec![json!({
                "apiGroups": ["policy.sidecar-inject.io"],
                "resources": ["injectionparams"],
                "resourceNames": [name],
                "verbs": ["get", "list", "watch", "update", "patch"],
            })],
            "{what}"
        );
    }

    // Off by default: nothing of the policy, no flag, no right.
    let chart = helm.template(NS, &[]).unwrap();
    for kind in [
        "CustomResourceDefinition",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "InjectionParams",
    ] {
        assert!(helm::of_kind(&chart, kind).is_empty(), "{kind} rendered");
    }
    assert!(!args_of(&chart).iter().any(|a| a.contains("policy")));
    assert!(params_rules(&chart).is_empty());

    // The injector keeps the params from the cluster: without it, refused.
    let out = helm
        .output(&[
            "template",
            "sidecar-injector",
            &helm::chart_dir().display().to_string(),
            "--set",
            "policy.enabled=true,serve.inCluster=false",
        ])
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("policy.enabled needs serve.inCluster"),
        "{stderr}"
    );
}

/// `helm install --set policy.enabled=true` into an API server serving MutatingAdmissionPolicy: the
/// CRD, the policy, its bindings and (the hook, after the CRD) the params object are created, the
/// injector's account may read and update that params object and nothing else of the policy's, and an
/// upgrade runs the hook again.
#[test]
fn helm_install_with_the_policy_grants_its_params_and_nothing_more() {
    let cluster = e2e::cluster::Cluster::up_with(e2e::policy_differential::APISERVER_ARGS);
    let chart = helm::Chart::injector();
    chart.install(&cluster, &["--set", "policy.enabled=true"]);
    let params = |c: &e2e::cluster::Cluster| {
        c.kubectl_json(&["get", "injectionparams", "sidecar-injector"], None)
            .unwrap()
    };
    assert_eq!(params(&cluster)["spec"]["decision"]["policy"], "refused");
    cluster
        .kubectl(
            &["get", "mutatingadmissionpolicy", "sidecar-injector"],
            None,
        )
        .unwrap();
    let bindings = cluster
        .kubectl(
            &[
                "get",
                "mutatingadmissionpolicybindings",
                "-l",
                "istio.io/rev=default",
                "-o",
                "name",
            ],
            None,
        )
        .unwrap();
    assert_eq!(bindings.lines().count(), 4, "{bindings}");

    let account = "system:serviceaccount:sidecar-injector:sidecar-injector";
    let ours = "injectionparams.policy.sidecar-inject.io/sidecar-injector";
    let theirs = "injectionparams.policy.sidecar-inject.io/sidecar-injector-canary";
    helm::assert_may(
        &cluster,
        account,
        &[
            &["get", ours],
            &["watch", ours],
            &["list", ours],
            &["update", ours],
            &["patch", ours],
        ],
        &[
            &["create", "injectionparams.policy.sidecar-inject.io"],
            &["delete", ours],
            &["update", theirs],
            &["patch", theirs],
            &["list", "injectionparams.policy.sidecar-inject.io"],
            &["update", "mutatingadmissionpolicies/sidecar-injector"],
            &[
                "update",
                "mutatingadmissionpolicybindings/sidecar-injector-namespace",
            ],
            &[
                "update",
                "customresourcedefinitions/injectionparams.policy.sidecar-inject.io",
            ],
        ],
    );

    // An upgrade writes the params object again (the hook).
    let before = params(&cluster)["metadata"]["uid"].clone();
    chart.upgrade(&cluster, &[]);
    let after = params(&cluster);
    assert_ne!(
        after["metadata"]["uid"], before,
        "the hook did not run again"
    );
    assert_eq!(after["spec"]["decision"]["policy"], "refused");
}
