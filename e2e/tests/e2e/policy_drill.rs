//! The outage drill (issue 31, item 6), through the real kube-apiserver: the MutatingAdmissionPolicy of
//! `injector policy --guard` and the webhook configuration of `injector webhook-config
//! --skip-policy-injected` both installed, and the injector down (its URL refuses connections).
//!
//! - failurePolicy Fail: a pod in the policy's subset is created injected (by the policy); a pod
//!   outside it is rejected with the API server's webhook-failure message.
//! - failurePolicy Ignore, guard on: the subset pod is injected; the outside pod is rejected by the
//!   guard, with its message; pods the webhook would not inject (opted out by annotation or label, on
//!   the host network) are created untouched; and on 120 generated cases' pods (the policy
//!   differential's generator), each also opted out by annotation, on the host network, and with a
//!   label `yes` over the opting-out annotation, the guard rejects exactly those `injector explain
//!   --policy` says a webhook entry selects, the webhook's decision injects and the policy does not.
//! - failurePolicy Ignore, guard off (its bindings deleted): the outside pod is created un-injected,
//!   silently outside the mesh: why the guard exists.
//! - kube-system, labelled `istio-injection=enabled` as by mistake, is never affected: its pods are
//!   created untouched in every phase.
//!
//! Then the injector up again and the guard back: the outside pod is injected by
//! the webhook, and passes the guard.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

use e2e::apiserver::{serve_args, Injector};
use e2e::cluster::Connection;
use e2e::policy_differential::{generated, is_injected, policy_objects, Harness, MARKER};
use serde_json::{json, Value};
use test_support::corpus::Config;

const NS: &str = "drill";
const STATUS: &str = "sidecar.istio.io/status";
/// A namespace none of the entries, bindings or guard bindings select (`istio-injection=disabled`).
const UNSELECTED_NS: &str = "drill-unselected";
/// The generated pods the guard's CEL is checked on (the policy differential's generator).
const GENERATED_SEED: u64 = 31;
const GENERATED_CASES: u64 = 120;

/// What creating a pod gave: the stored pod, or the API server's message.
type Outcome = Result<Value, String>;

fn app(name: &str, meta: Value, spec: Value) -> Value {
    let mut m = meta;
    m["generateName"] = json!(format!("{name}-"));
    m["labels"]["app"] = json!(name);
    // The ServiceAccount admission plugin (off in the test control plane) would set it; the
    // injection's token volume needs it.
    let mut s = json!({"serviceAccountName": "default",
        "containers": [{"name": "app", "image": "app", "ports": [{"containerPort": 8080}]}]});
    if let (Some(s), Some(extra)) = (s.as_object_mut(), spec.as_object()) {
        s.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": m, "spec": s})
}

/// A pod the policy injects.
fn subset_pod() -> Value {
    app("subset", json!({}), json!({}))
}

/// A pod the policy leaves to the webhook: a user volume (an Istio annotation the CEL does not render).
fn outside_pod() -> Value {
    app(
        "outside",
        json!({"annotations": {
            "sidecar.istio.io/userVolume": "{\"extra\":{\"emptyDir\":{}}}",
            "sidecar.istio.io/userVolumeMount": "{\"extra\":{\"mountPath\":\"/extra\"}}",
        }}),
        json!({}),
    )
}

/// Pods the webhook would not inject, though its entries select them (or call it for them).
fn opted_out_pods() -> Vec<Value> {
    vec![
        app(
            "opt-out-annotation",
            json!({"annotations": {"sidecar.istio.io/inject": "false"}}),
            json!({}),
        ),
        app(
            "opt-out-label",
            json!({"labels": {"sidecar.istio.io/inject": "false"}}),
            json!({}),
        ),
        app("host-network", json!({}), json!({"hostNetwork": true})),
    ]
}

/// kube-system's pods: a plain one and one that asks for injection.
fn system_pods() -> Vec<Value> {
    vec![
        app("system", json!({}), json!({})),
        app(
            "system-asking",
            json!({"labels": {"sidecar.istio.io/inject": "true"}}),
            json!({}),
        ),
    ]
}

async fn create(conn: &mut Connection, ns: &str, pod: &Value, dry_run: bool) -> Outcome {
    let query = if dry_run { "?dryRun=All" } else { "" };
    let (status, body) = conn
        .request(
            "POST",
            &format!("/api/v1/namespaces/{ns}/pods{query}"),
            Some(pod),
        )
        .await
        .expect("the API server answers");
    if status.is_success() {
        Ok(body)
    } else {
        Err(body["message"].as_str().unwrap_or_default().to_string())
    }
}

/// Dry runs of `pod` until `ready` holds for the outcome (a configuration change has reached the
/// API server's admission), then the pod created for real.
async fn once(
    conn: &mut Connection,
    ns: &str,
    pod: &Value,
    what: &str,
    ready: impl Fn(&Outcome) -> bool,
) -> Outcome {
    let deadline = std::time::Instant::now() + e2e::PATIENCE;
    loop {
        let o = create(conn, ns, pod, true).await;
        if ready(&o) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not in effect within {:?}: {o:?}",
            e2e::PATIENCE
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    create(conn, ns, pod, false).await
}

fn by_policy(o: &Outcome) -> bool {
    o.as_ref()
        .is_ok_and(|p| is_injected(p) && p["metadata"]["annotations"][MARKER].is_string())
}

fn by_webhook(o: &Outcome) -> bool {
    o.as_ref().is_ok_and(|p| {
        is_injected(p)
            && p["metadata"]["annotations"][STATUS].is_string()
            && !p["metadata"]["annotations"][MARKER].is_string()
    })
}

fn webhook_failure(o: &Outcome) -> bool {
    o.as_ref()
        .is_err_and(|m| m.contains("failed calling webhook"))
}

fn guard_message(o: &Outcome) -> bool {
    o.as_ref().is_err_and(|m| m.contains("was not injected"))
}

/// Created exactly as asked: none of the injection's containers, annotations or volumes.
fn untouched(o: &Outcome, asked: &Value) -> bool {
    o.as_ref().is_ok_and(|p| {
        let names = |l: &Value| -> Vec<String> {
            l.as_array()
                .into_iter()
                .flatten()
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect()
        };
        names(&p["spec"]["containers"]) == names(&asked["spec"]["containers"])
            && names(&p["spec"]["initContainers"]).is_empty()
            && !p["metadata"]["annotations"][STATUS].is_string()
            && !p["metadata"]["annotations"][MARKER].is_string()
            && p["spec"]["volumes"].as_array().is_none_or(|v| {
                v.iter()
                    .all(|v| !v["name"].as_str().unwrap_or("").starts_with("istio"))
            })
    })
}

/// `injector webhook-config --skip-policy-injected` pointed at `https://127.0.0.1:<port>`, with
/// `failure_policy` in every entry.
fn webhook_configuration(h: &Harness, port: u16, failure_policy: &str) -> Vec<Value> {
    let out = Command::new(e2e::bin("injector"))
        .arg("webhook-config")
        .arg("--skip-policy-injected")
        .arg("--ca-bundle")
        .arg(h.certs.dir.join("ca.crt"))
        .output()
        .expect("running injector webhook-config");
    assert!(
        out.status.success(),
        "injector webhook-config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut docs =
        test_support::pods::documents(&String::from_utf8(out.stdout).expect("UTF-8 YAML"))
            .expect("the webhook configuration's documents");
    for mwc in &mut docs {
        for wh in mwc["webhooks"].as_array_mut().into_iter().flatten() {
            let path = wh["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or("/inject")
                .to_string();
            let bundle = wh["clientConfig"]["caBundle"].clone();
            wh["clientConfig"] =
                json!({"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": bundle});
            wh["failurePolicy"] = json!(failure_policy);
        }
    }
    docs
}

/// `injector explain --policy -o json` of `pods` (in [`NS`], labelled `istio-injection=enabled`)
/// under `flags`: one item per pod.
fn explain(flags: &[String], pods: &[Value]) -> Vec<Value> {
    let stream = pods
        .iter()
        .map(|pod| {
            let mut p = pod.clone();
            p["metadata"]["namespace"] = json!(NS);
            if !p["metadata"]["name"].is_string() {
                p["metadata"]["name"] = json!("p");
            }
            p.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n---\n");
    let mut child = Command::new(e2e::bin("injector"))
        .args(["explain", "--policy", "-o", "json", "-f", "-"])
        .args(["--namespace-labels", "istio-injection=enabled"])
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running injector explain");
    child
        .stdin
        .take()
        .expect("explain's stdin")
        .write_all(stream.as_bytes())
        .expect("writing the pods to explain");
    let out = child.wait_with_output().expect("injector explain ran");
    assert!(
        out.status.success(),
        "injector explain --policy: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("explain's JSON");
    let items = v["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), pods.len(), "explain explained every pod");
    items
}

/// Whether `injector explain --policy` says the policy injects `pod` under `flags`, and why not.
fn policy_injects(flags: &[String], pod: &Value) -> (bool, String) {
    let item = explain(flags, std::slice::from_ref(pod)).remove(0);
    let verdict = &item["policy"];
    (
        verdict["injects"].as_bool().unwrap_or(false),
        verdict["reason"].as_str().unwrap_or_default().to_string(),
    )
}

/// Whether the guard rejects a pod `explain` described, with the webhook down under Ignore: a webhook
/// entry selects it, the webhook's decision injects it, the policy does not, and it is not marked
/// injected already.
fn guard_rejects(item: &Value, pod: &Value) -> bool {
    let annotations = &pod["metadata"]["annotations"];
    item["webhook"].is_object()
        && item["decision"]["inject"] == json!(true)
        && item["policy"]["injects"] != json!(true)
        && !annotations[STATUS].is_string()
        && !annotations[MARKER].is_string()
}

/// The guard's CEL against explain's decision on generated pods (the policy differential's
/// generator): with the webhook down under Ignore, each pod is rejected by the guard exactly when
/// [`guard_rejects`] says so. Each generated pod is taken as it is and with the
/// ways of opting out that leave it selected by a webhook entry (the `sidecar.istio.io/inject=false`
/// annotation, the host network, a label `yes` that the annotation does not override), which only the
/// guard's decision conditions tell apart. Returns the counts: pods, rejected by the guard, and
/// accepted though a webhook entry selects them because the webhook's decision declines them.
async fn guard_agrees_on_generated_pods(
    conn: &mut Connection,
    flags: &[String],
) -> (usize, usize, usize) {
    let mut pods = Vec::new();
    for (_, case_pods) in
        generated(GENERATED_SEED, 0, GENERATED_CASES, GENERATED_CASES).expect("generated cases")
    {
        for p in case_pods {
            let mut opted_out = p.pod.clone();
            opted_out["metadata"]["annotations"]["sidecar.istio.io/inject"] = json!("false");
            let mut host = p.pod.clone();
            host["spec"]["hostNetwork"] = json!(true);
            // A label neither true nor false wins over the annotation and means "the default".
            let mut label_yes = opted_out.clone();
            label_yes["metadata"]["labels"]["sidecar.istio.io/inject"] = json!("yes");
            pods.extend([p.pod, opted_out, host, label_yes]);
        }
    }
    // The pods as admission sees them: defaulted by a dry run in a namespace nothing selects.
    let mut admitted = Vec::new();
    for p in &pods {
        if let Ok(a) = create(conn, UNSELECTED_NS, p, true).await {
            let a = e2e::policy_differential::as_admitted(&a, UNSELECTED_NS);
            admitted.push((p.clone(), a));
        }
    }
    let items = explain(
        flags,
        &admitted.iter().map(|(_, a)| a.clone()).collect::<Vec<_>>(),
    );
    let mut rejected = 0;
    let mut declined = 0;
    let mut disagreements = Vec::new();
    for ((p, a), item) in admitted.iter().zip(&items) {
        let want = guard_rejects(item, a);
        let o = create(conn, NS, p, true).await;
        let got = guard_message(&o);
        rejected += usize::from(got);
        declined += usize::from(
            o.is_ok() && item["webhook"].is_object() && item["decision"]["inject"] == json!(false),
        );
        if got != want || (!got && o.is_err()) {
            disagreements.push(format!(
                "want rejected {want}, got {o:?}; explain: webhook {} decision {} policy {}\n  pod {p}",
                item["webhook"], item["decision"], item["policy"]
            ));
        }
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} generated pods: the guard disagrees with explain:\n{}",
        disagreements.len(),
        admitted.len(),
        disagreements.join("\n")
    );
    (admitted.len(), rejected, declined)
}

#[test]
fn with_the_webhook_down_the_policy_injects_its_subset_and_the_guard_stops_the_rest_under_ignore() {
    let h = Harness::new().expect("a control plane with the policy API");
    let cfg = Config::base().expect("the base configuration");
    let files = cfg
        .write(&h.dir.path().join("cfg"))
        .expect("writing the configuration");
    let flags = files.args();

    // The pods are what the drill says they are.
    assert!(policy_injects(&flags, &subset_pod()).0, "the subset pod");
    let (covered, why) = policy_injects(&flags, &outside_pod());
    assert!(
        !covered,
        "the outside pod is in the subset: pick another annotation"
    );
    eprintln!("the outside pod is left to the webhook: {why}");

    // The policy and its guard; the webhook's configuration pointing at an injector that is gone.
    let mut policy_flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    policy_flags.push("--guard");
    let objects = policy_objects(&policy_flags).expect("injector policy --guard");
    let guard_bindings: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
        .collect();
    assert_eq!(guard_bindings.len(), 4, "a guard binding per webhook entry");
    for o in &objects {
        h.cluster.apply(o).expect("the API server takes the object");
    }
    let serve = serve_args(&h.certs.cert, &h.certs.key, &files);
    // The injector's address while it is down: a port bound without listening, so that connections
    // to it are refused and no other process (a test running beside this one) can take it.
    let down = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let held = rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket.bind(down).expect("binding a port");
        socket
    });
    let down_port = held.local_addr().expect("the held port").port();

    h.cluster
        .namespace(
            UNSELECTED_NS,
            &BTreeMap::from([("istio-injection".to_string(), "disabled".to_string())]),
        )
        .expect("the unselected namespace");
    for ns in [NS, "kube-system"] {
        h.cluster
            .namespace(
                ns,
                &BTreeMap::from([("istio-injection".to_string(), "enabled".to_string())]),
            )
            .expect("labelling the namespace");
    }
    let apply_webhook = |port: u16, failure_policy: &str| {
        for m in webhook_configuration(&h, port, failure_policy) {
            h.cluster.apply(&m).expect("the webhook configuration");
        }
    };

    rt.block_on(async {
        let mut conn = h
            .cluster
            .connect()
            .await
            .expect("a connection to the API server");

        // Phase 1: failurePolicy Fail, the webhook down.
        apply_webhook(down_port, "Fail");
        let o = once(&mut conn, NS, &subset_pod(), "the policy", by_policy).await;
        assert!(
            by_policy(&o),
            "Fail: the subset pod is injected by the policy: {o:?}"
        );
        let o = once(
            &mut conn,
            NS,
            &outside_pod(),
            "the webhook (Fail)",
            webhook_failure,
        )
        .await;
        let message = o.as_ref().expect_err("Fail: the outside pod is rejected");
        assert!(
            message.contains("namespace.sidecar-injector.istio.io")
                && message.contains("connection refused"),
            "Fail: the API server names the webhook and its failure: {message}"
        );
        eprintln!("Fail, webhook down, outside the subset: {message}");
        check_system(&mut conn, "Fail").await;

        // Phase 2: failurePolicy Ignore, the guard on.
        apply_webhook(down_port, "Ignore");
        let o = once(
            &mut conn,
            NS,
            &outside_pod(),
            "Ignore with the guard",
            guard_message,
        )
        .await;
        let message = o
            .as_ref()
            .expect_err("Ignore: the guard rejects the outside pod");
        for part in [
            &format!("pod {NS}/outside-"),
            "ValidatingAdmissionPolicy 'sidecar-injector-guard'",
            "was not injected: the sidecar injector webhook",
            "(MutatingWebhookConfiguration sidecar-injector) did not inject it",
            "failurePolicy Ignore",
            "MutatingAdmissionPolicy sidecar-injector",
            "retry when the injector is up",
            "sidecar.istio.io/inject=false",
        ] {
            assert!(
                message.contains(part),
                "Ignore + guard: {part:?} in {message}"
            );
        }
        eprintln!("Ignore + guard, webhook down, outside the subset: {message}");
        let o = create(&mut conn, NS, &subset_pod(), false).await;
        assert!(
            by_policy(&o),
            "Ignore + guard: the subset pod is injected by the policy: {o:?}"
        );
        for p in opted_out_pods() {
            let o = create(&mut conn, NS, &p, false).await;
            assert!(
                untouched(&o, &p),
                "Ignore + guard: {} is created untouched: {o:?}",
                p["metadata"]["generateName"]
            );
        }
        check_system(&mut conn, "Ignore + guard").await;
        let (pods, rejected, declined) = guard_agrees_on_generated_pods(&mut conn, &flags).await;
        eprintln!(
            "Ignore + guard, webhook down: {pods} generated pods, {rejected} rejected by the guard, \
             {declined} selected but accepted as the webhook's decision declines them, each as explain says"
        );
        // Not vacuous: the guard rejected some, and accepted some it selects that the webhook declines.
        assert!(rejected > 0 && declined > 0, "{rejected} rejected, {declined} declined, of {pods}");

        // Phase 3: failurePolicy Ignore, the guard off: the outside pod starts outside the mesh.
        for b in &guard_bindings {
            h.cluster
                .kubectl(
                    &[
                        "delete",
                        "validatingadmissionpolicybinding",
                        b["metadata"]["name"].as_str().expect("a binding's name"),
                    ],
                    None,
                )
                .expect("deleting a guard binding");
        }
        let outside = outside_pod();
        let o = once(&mut conn, NS, &outside, "Ignore without the guard", |o| {
            o.is_ok()
        })
        .await;
        assert!(
            untouched(&o, &outside),
            "Ignore without the guard: the outside pod is created un-injected: {o:?}"
        );
        let o = create(&mut conn, NS, &subset_pod(), false).await;
        assert!(
            by_policy(&o),
            "Ignore without the guard: the subset pod is injected by the policy: {o:?}"
        );
        check_system(&mut conn, "Ignore without the guard").await;

        // The injector up again (the configuration pointed at it, as a service's endpoints come
        // back), the guard back: the webhook injects the outside pod.
        for b in &guard_bindings {
            h.cluster.apply(b).expect("the guard binding back");
        }
        let o = once(
            &mut conn,
            NS,
            &outside_pod(),
            "the guard back",
            guard_message,
        )
        .await;
        assert!(guard_message(&o), "the guard back: {o:?}");
        let injector = Injector::start(&serve, &BTreeMap::new()).expect("injector serve");
        apply_webhook(injector.https.port(), "Ignore");
        let o = once(&mut conn, NS, &outside_pod(), "the webhook up", by_webhook).await;
        assert!(
            by_webhook(&o),
            "webhook up: the outside pod is injected by the webhook: {o:?}"
        );
        let o = create(&mut conn, NS, &subset_pod(), false).await;
        assert!(
            by_policy(&o),
            "webhook up: the subset pod is injected by the policy: {o:?}"
        );
        check_system(&mut conn, "webhook up").await;
        drop(injector);
    });
}

/// kube-system's pods are created untouched.
async fn check_system(conn: &mut Connection, phase: &str) {
    for p in system_pods() {
        let o = create(conn, "kube-system", &p, false).await;
        assert!(untouched(&o, &p), "{phase}: kube-system pod {o:?}");
    }
}
