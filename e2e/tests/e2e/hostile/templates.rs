//! User templates that try to spend unbounded CPU or render something that is not a Pod.
//!
//! Each case runs the built `injector kube-inject` with a user template from `--injector-config`: the costly
//! ones stop at the evaluator's work budget (it counts the bytes every primitive reads and writes, not only
//! steps), the wrong-typed ones are refused before the merge as Istio's `applyOverlayYAML` refuses them
//! when it decodes the pod, and both exit non-zero naming the template and the limit or the field.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{json, Value};
use test_support::tempdir::TempDir;

/// Writes the pod and an injector config whose template `name` has `text`, then runs kube-inject on them.
fn kube_inject(dir: &Path, pod: &Value, name: &str, text: &str) -> Output {
    let config = json!({"policy": "enabled", "templates": {name: text}});
    let (pod_file, config_file) = (dir.join("pod.json"), dir.join("config.json"));
    std::fs::write(&pod_file, serde_json::to_vec(pod).expect("pod JSON")).expect("write pod");
    std::fs::write(&config_file, config.to_string()).expect("write config");
    Command::new(e2e::bin("injector"))
        .arg("kube-inject")
        .arg("-f")
        .arg(&pod_file)
        .arg("--injector-config")
        .arg(&config_file)
        .env_remove("ENABLE_NATIVE_SIDECARS")
        .env_remove("REVISION")
        .output()
        .expect("run injector")
}

/// A pod selecting template `name`, with `annotations` added and `n` containers.
fn pod(name: &str, annotations: Value, n: usize) -> Value {
    let mut a = json!({"inject.istio.io/templates": name});
    if let Value::Object(extra) = annotations {
        a.as_object_mut().expect("object").extend(extra);
    }
    let containers: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("c{i}"), "image": "nginx"}))
        .collect();
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "hog", "namespace": "default", "annotations": a},
           "spec": {"containers": containers}})
}

fn refused(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!out.status.success(), "kube-inject accepted it: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "half an output: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// `contains` and `eq` over two 4 MiB annotations, 100 000 times: 31–59 s and success when the budget
/// counted steps only; now refused at the work limit.
#[test]
fn byte_heavy_templates_stop_at_the_work_limit() {
    let big = "a".repeat((4 << 20) - 64);
    let mut big2 = big.clone();
    big2.replace_range(0..1, "b");
    let annotations = json!({"big": big, "big2": big2, "same": big.clone()});
    let dir = TempDir::new("hostile-templates-cpu");
    for body in [
        "contains $.ObjectMeta.Annotations.big2 $.ObjectMeta.Annotations.big",
        "eq $.ObjectMeta.Annotations.big $.ObjectMeta.Annotations.same",
    ] {
        let text = format!("{{{{ range 100000 }}}}{{{{ if {body} }}}}x{{{{ end }}}}{{{{ end }}}}");
        let out = kube_inject(
            dir.path(),
            &pod("hog", annotations.clone(), 1),
            "hog",
            &text,
        );
        let stderr = refused(&out);
        for want in [
            "failed to run injection template",
            "template \"hog\": line 1: work limit",
            "exceeded",
        ] {
            assert!(stderr.contains(want), "{want:?} not in {stderr}");
        }
    }
}

/// A template over 4 000 containers renders: the evaluator walks the list in place, in O(1) per element
/// (`index` back into the list included), so its cost is linear and far inside the budget. (It writes
/// one annotation, so the strategic merge of thousands of containers is not what this measures.)
#[test]
fn a_template_over_thousands_of_containers_renders() {
    let dir = TempDir::new("hostile-templates-range");
    let text = "metadata:\n  annotations:\n    seen: \"{{ range $i, $c := .Spec.Containers }}{{ (index $.Spec.Containers $i).Name }}={{ $c.Image }},{{ end }}\"\n";
    let out = kube_inject(dir.path(), &pod("many", Value::Null, 4000), "many", text);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("c0=nginx,c1=nginx,") && stdout.contains("c3999=nginx,"));
}

/// `metadata: [1, 2, 3]` used to wipe the pod's name, namespace, labels and annotations, and
/// `spec: {containers: ""}` to replace the app container with `""`; both must decode as a Pod first.
#[test]
fn a_rendered_pod_of_the_wrong_type_is_refused_naming_the_field() {
    let dir = TempDir::new("hostile-templates-type");
    for (text, want) in [
        (
            "{{ if true }}metadata: [1, 2, 3]{{ end }}\n",
            "template \"bad\": metadata: expected an object, got [1,2,3]",
        ),
        (
            "spec: {containers: {{ quote \"\" }}}\n",
            "template \"bad\": spec.containers: expected a list, got \"\"",
        ),
        (
            "spec:\n  containers:\n  - name: {{ .ObjectMeta.Name }}\n    ports: [{containerPort: \"80\"}]\n",
            "template \"bad\": spec.containers[0].ports[0].containerPort: expected an integer, got \"80\"",
        ),
    ] {
        let out = kube_inject(dir.path(), &pod("bad", Value::Null, 1), "bad", text);
        let stderr = refused(&out);
        assert!(
            stderr.contains("failed applying injection overlay: unmarshal patched pod: ")
                && stderr.contains(want),
            "{want:?} not in {stderr}"
        );
    }
    // A static template is refused when the configuration loads, naming the file and the key.
    let out = kube_inject(
        dir.path(),
        &pod("bad", Value::Null, 1),
        "bad",
        "spec: {containers: \"\"}\n",
    );
    let stderr = refused(&out);
    assert!(
        stderr.contains("config.json")
            && stderr.contains("templates.bad")
            && stderr.contains("spec.containers: expected a list, got \"\""),
        "{stderr}"
    );
}
