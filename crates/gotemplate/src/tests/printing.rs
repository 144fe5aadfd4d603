//! How values print: Go's `fmt` (`%v`, `printf`, `print`), `encoding/json` and the YAML of `toYaml`.

use serde_json::json;

use super::super::error::ExecError;
use super::super::limits::Limits;
use super::super::template::Template;
use super::support::*;

#[test]
fn floats_print_like_go() {
    let n = |k: &str| run(&format!("{{{{ .Values.nums.{k} }}}}"));
    let got: Vec<String> = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"]
        .iter()
        .map(|k| n(k))
        .collect();
    assert_eq!(
        got,
        [
            "0",
            "100",
            "123456",
            "999999",
            "1e+06",
            "1.234567e+06",
            "0.5",
            "0.0001",
            "1e-05",
            "1e+21",
            "-0"
        ]
    );
    assert_eq!(run("{{ .Values.global.proxy.statusPort }}"), "15020");
}

#[test]
fn composites_print_like_go() {
    renders(&[
        ("{{ .Values.list }}", "[a b c]"),
        (
            "{{ .Values.global.proxy.resources }}",
            "map[requests:map[cpu:100m memory:128Mi]]",
        ),
        ("{{ .Values.nested }}", "map[x:1 y:[1 2]]"),
        ("{{ .ObjectMeta.Labels }}", "map[app:hello version:v1]"),
        ("{{ list 1 \"a\" nil true 1.5 }}", "[1 a <nil> true 1.5]"),
        ("{{ .Values.empty }}", "[]"),
    ]);
}

#[test]
fn printf_verbs() {
    renders(&[
        ("{{ printf \"%s\" .Values.global.proxy.statusPort }}", "%!s(float64=15020)"),
        ("{{ printf \"%d\" .Values.global.proxy.statusPort }}", "%!d(float64=15020)"),
        ("{{ printf \"%v\" .Values.global.proxy.statusPort }}", "15020"),
        ("{{ printf \"%5.2f|%-5s|%5s|%05d|%x|%X|%q|%t|%o\" 3.14159 \"ab\" \"cd\" 42 255 \"hi\" \"a\\\"b\" true 8 }}", " 3.14|ab   |   cd|00042|ff|6869|\"a\\\"b\"|true|10"),
        ("{{ printf \"%e|%g|%.3g|%8.3e|%f\" 123456.789 0.000012 1234.5678 1234.5678 1.0 }}", "1.234568e+05|1.2e-05|1.23e+03|1.235e+03|1.000000"),
        ("{{ printf \"%d %d\" 1 }}", "1 %!d(MISSING)"),
        ("{{ printf \"%d\" 1 \"x\" }}", "1%!(EXTRA string=x)"),
        ("{{ printf \"%v %s\" .Values.missing nil }}", "<nil> %!s(<nil>)"),
        ("{{ printf \"%s|%d\" (list nil \"a\") (dict \"k\" nil) }}", "[<nil> a]|map[%!d(string=k):<nil>]"),
        ("{{ printf \"%v\" .Spec.SecurityContext }}", "nil"),
        ("{{ .Spec.SecurityContext | quote }}", "\"nil\""),
    ]);
    assert_unsupported(&[
        "{{ printf \"%d\" .Spec.SecurityContext }}",
        "{{ printf \"%x\" 1.5 }}",
    ]);
    renders(&[
        ("{{ printf \"%z\" 1 }}", "%!z(int=1)"),
        ("{{ printf \"%T %T %T %T %T %T\" 1 .ProxyUID .Values.nums.a .Values.list .Spec.SecurityContext nil }}", "int int64 float64 []interface {} *v1.PodSecurityContext <nil>"),
        ("{{ printf \"%d%%\" 5 }}", "5%"),
        ("{{ printf \"%v\" .Values.list }} {{ printf \"%q\" .Values.list }}", "[a b c] [\"a\" \"b\" \"c\"]"),
        ("{{ printf \"%+d|% d|%c|%U\" 5 5 65 65 }}", "+5| 5|A|U+0041"),
        ("{{ \"x\" | printf \"%s-%s\" \"a\" }}", "a-x"),
    ]);
}

#[test]
fn print_and_println() {
    renders(&[
        ("{{ print 1 2 \"a\" \"b\" 3 }}", "1 2ab3"),
        ("{{ println 1 \"a\" }}", "1 a\n"),
    ]);
}

#[test]
fn to_yaml_and_json() {
    renders(&[
        ("{{ toYaml .Values.global.proxy.resources }}", "requests:\n  cpu: 100m\n  memory: 128Mi\n"),
        ("{{ toYaml .Values.missing }}", "null\n"),
        ("{{ toYaml .Values.nums.e }}", "1000000\n"),
        ("{{ toYaml .Values.list }}", "- a\n- b\n- c\n"),
        ("{{ toYaml \"multi\\nline\" }}", "|-\n  multi\n  line\n"),
        ("{{ toYaml (dict \"a\" \"l1\\nl2\\n\" \"b\" (list (dict \"x\" 1 \"y\" (list 1 2)) (list 3 4)) \"c\" \"\" \"d\" \"yes\" \"e\" \"1.5\" \"f\" nil \"g\" 1e-7) }}", "a: |\n  l1\n  l2\nb:\n- x: 1\n  \"y\":\n  - 1\n  - 2\n- - 3\n  - 4\nc: \"\"\nd: \"yes\"\ne: \"1.5\"\nf: null\ng: 1e-07\n"),
        ("{{ toYaml (dict \"a\" (list 1 \"true\") \"b\" (dict) \"c\" \"x: y\") }}", "a:\n- 1\n- \"true\"\nb: {}\nc: \"x: y\"\n"),
        ("{{ toYaml .ObjectMeta.Labels }}", "app: hello\nversion: v1\n"),
        ("{{ toYaml (index .Spec.Containers 0) }}", "image: hello:1\nname: hello\nports:\n- containerPort: 80\n  name: http\nresources: {}\n"),
        ("{{ toJSON .ObjectMeta.Labels }} {{ toJSON (strdict \"k\" .Values.html) }}", "{\"app\":\"hello\",\"version\":\"v1\"} {\"k\":\"\\u003ca\\u0026b\\u003e\"}"),
        ("{{ toJson .Values.nested }} {{ toJson .Values.nums.j }}", "{\"x\":1,\"y\":[1,2]} 1e+21"),
    ]);
    assert_eq!(
        exec_msg("{{ toJSON .Values.global }}"),
        "wrong type for value; expected map[string]string; got map[string]interface {}"
    );
    assert_unsupported(&["{{ toYaml .ProxyConfig }}"]);
    renders(&[
        ("{{ toJson .ObjectMeta }}", "{\"generateName\":\"hello-\",\"namespace\":\"default\",\"creationTimestamp\":null,\"labels\":{\"app\":\"hello\",\"version\":\"v1\"},\"annotations\":{\"empty\":\"\",\"sidecar.istio.io/proxyCPU\":\"200m\"}}"),
        ("{{ toJson (dict \"s\" (index .Spec.Containers 1).Resources) }}", "{\"s\":{\"requests\":{\"cpu\":\"100m\"}}}"),
        ("{{ toJson .Spec.Volumes }}", "null"),
        ("{{ toJson .DeploymentMeta }}", "{\"Namespace\":\"default\",\"Name\":\"hello\"}"),
        ("{{ toJson (index .Spec.Containers 0) }}", "{\"name\":\"hello\",\"image\":\"hello:1\",\"ports\":[{\"name\":\"http\",\"containerPort\":80}],\"resources\":{}}"),
        ("{{ toYaml .ObjectMeta }}", "annotations:\n  empty: \"\"\n  sidecar.istio.io/proxyCPU: 200m\ncreationTimestamp: null\ngenerateName: hello-\nlabels:\n  app: hello\n  version: v1\nnamespace: default\n"),
    ]);
    assert_unsupported(&["{{ toJson . }}"]);
    assert!(run("{{ toJson .Spec }}").ends_with("}],\"serviceAccountName\":\"default\"}"));
    // resizePolicy is not modelled, so its place among Container's fields in Go's output is unknown.
    let d = json!({"Spec": {"containers": [{"name": "a", "resizePolicy": []}]}});
    let t = Template::parse("t", "{{ toJson .Spec.Containers }}").expect("parse");
    assert!(matches!(
        t.execute(&d, &Limits::default()),
        Err(ExecError::Unsupported { .. })
    ));
    let t = Template::parse("t", "{{ toYaml .Spec.Containers }}").expect("parse");
    assert_eq!(
        t.execute(&d, &Limits::default()).expect("yaml"),
        "- name: a\n  resizePolicy: []\n  resources: {}\n"
    );
    assert!(run("{{ toYaml .Spec }}").contains("\nserviceAccountName: default\n"));
}

/// `resource.Quantity.MarshalJSON` writes a quantity's canonical text, so `toYaml` and `toJson` of a
/// container's resources show `500m` for a pod's `0.5` (Istio's template data is the typed pod).
#[test]
fn quantities_are_written_canonical() {
    let d = json!({"Spec": {"containers": [{"name": "a", "resources": {
        "requests": {"cpu": "0.5", "memory": 1073741824},
        "limits": {"cpu": 2, "memory": "1024Mi"}}}]}});
    let res = "(index .Spec.Containers 0).Resources";
    assert_eq!(
        run_on(&format!("{{{{ toYaml {res} }}}}"), &d),
        "limits:\n  cpu: \"2\"\n  memory: 1Gi\nrequests:\n  cpu: 500m\n  memory: \"1073741824\"\n"
    );
    assert_eq!(
        run_on(&format!("{{{{ toJson {res} }}}}"), &d),
        "{\"limits\":{\"cpu\":\"2\",\"memory\":\"1Gi\"},\"requests\":{\"cpu\":\"500m\",\"memory\":\"1073741824\"}}"
    );
    assert_eq!(
        run_on(&format!("{{{{ toJson (index {res}.Requests \"cpu\") }}}} {{{{ toJson (index {res}.Requests \"nope\") }}}}"), &d),
        "\"500m\" \"0\""
    );
}

/// A probe as Go's `encoding/json` writes a `corev1.Probe`: `grpc.service` and an HTTP header's `name`
/// and `value` have no `omitempty` (written even when absent: `null`, `""`), the `int32` settings have
/// it (a `0` is not written).
#[test]
fn probes_are_written_as_go_types_them() {
    let d = json!({"Spec": {"containers": [{"name": "a",
        "livenessProbe": {"grpc": {"port": 9000}, "initialDelaySeconds": 0, "periodSeconds": 5},
        "readinessProbe": {"httpGet": {"path": "/h", "port": "http", "httpHeaders": [{"name": "X"}]}}}]}});
    assert_eq!(
        run_on("{{ toYaml (index .Spec.Containers 0).LivenessProbe }}", &d),
        "grpc:\n  port: 9000\n  service: null\nperiodSeconds: 5\n"
    );
    assert_eq!(
        run_on("{{ toJson (index .Spec.Containers 0).ReadinessProbe }}", &d),
        "{\"httpGet\":{\"path\":\"/h\",\"port\":\"http\",\"httpHeaders\":[{\"name\":\"X\",\"value\":\"\"}]}}"
    );
}
