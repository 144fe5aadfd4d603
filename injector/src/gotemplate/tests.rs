//! Expected outputs are Go's (`text/template` + sprig + Istio's funcmap) for the same text and data.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

fn data() -> Value {
    json!({
        "TypeMeta": {"kind": "Pod", "apiVersion": "v1"},
        "DeploymentMeta": {"name": "hello", "namespace": "default"},
        "ObjectMeta": {
            "generateName": "hello-",
            "namespace": "default",
            "labels": {"app": "hello", "version": "v1"},
            "annotations": {"sidecar.istio.io/proxyCPU": "200m", "empty": ""}
        },
        "Spec": {
            "containers": [
                {"name": "hello", "image": "hello:1", "ports": [{"name": "http", "containerPort": 80}]},
                {"name": "istio-proxy", "image": "proxy", "resources": {"requests": {"cpu": "100m"}}}
            ],
            "serviceAccountName": "default"
        },
        "ProxyConfig": {
            "discoveryAddress": "istiod.istio-system.svc:15012",
            "concurrency": 2,
            "proxyMetadata": {"DNS_CAPTURE": "true"},
            "statusPort": 15020
        },
        "MeshConfig": {"trustDomain": "cluster.local", "rootNamespace": "istio-system"},
        "Values": {
            "global": {
                "hub": "docker.io/istio",
                "proxy": {"statusPort": 15020, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
                "caName": ""
            },
            "nums": {"a": 0, "b": 100, "c": 123456, "d": 999999, "e": 1000000, "f": 1234567,
                     "g": 0.5, "h": 0.0001, "i": 0.00001, "j": 1e21, "k": -0.0},
            "list": ["a", "b", "c"],
            "nested": {"x": 1, "y": [1, 2]},
            "nullv": null,
            "yes": true,
            "str": "false",
            "empty": [],
            "html": "<a&b>"
        },
        "Revision": "default",
        "NativeSidecars": true,
        "ProxyImage": "docker.io/istio/proxyv2:1.0",
        "ProxyUID": 1337,
        "ProxyGID": 0
    })
}

fn run(text: &str) -> String {
    run_on(text, &data())
}

fn run_on(text: &str, data: &Value) -> String {
    let t = Template::parse("t", text).unwrap_or_else(|e| panic!("parse {text:?}: {e}"));
    t.execute(data, &Limits::default())
        .unwrap_or_else(|e| panic!("execute {text:?}: {e}"))
}

fn exec_err(text: &str) -> ExecError {
    let t = Template::parse("t", text).unwrap_or_else(|e| panic!("parse {text:?}: {e}"));
    match t.execute(&data(), &Limits::default()) {
        Ok(out) => panic!("{text:?} should fail, printed {out:?}"),
        Err(e) => e,
    }
}

fn exec_msg(text: &str) -> String {
    match exec_err(text) {
        ExecError::Eval { message, .. } => message,
        other => panic!("{text:?}: expected an evaluation error, got {other}"),
    }
}

fn parse_err(text: &str) -> ParseError {
    match Template::parse("t", text) {
        Ok(_) => panic!("{text:?} should be refused"),
        Err(e) => e,
    }
}

// ---- lexical rules ----

#[test]
fn trim_markers() {
    assert_eq!(run("a  {{- \"b\" -}}  c"), "abc");
    assert_eq!(run("x {{- 3 }}"), "x3");
    assert_eq!(run("x {{-3}}"), "x -3");
    assert_eq!(run("a\n\t {{- /* c */ -}} \n b"), "ab");
    assert_eq!(run("a {{ 1 -}}\n\n b"), "a 1b");
}

#[test]
fn comments_and_literal_braces() {
    assert_eq!(run("a{{/* x\n y */}}b"), "ab");
    assert_eq!(run("a }} b"), "a }} b");
    assert!(matches!(
        parse_err("{{ /* x */ }}"),
        ParseError::Syntax { .. }
    ));
    match parse_err("{{/*x*/ }}") {
        ParseError::Syntax { message, .. } => {
            assert_eq!(message, "comment ends before closing delimiter")
        }
        other => panic!("{other}"),
    }
    assert!(matches!(parse_err("{{/* x "), ParseError::Syntax { .. }));
}

#[test]
fn literals() {
    assert_eq!(run(r#"{{ "a\tb\"c\x41\u00e9" }}"#), "a\tb\"cAé");
    assert_eq!(run("{{ `raw\\n` }}"), "raw\\n");
    assert_eq!(
        run("{{ 1337 }} {{ 1.0 }} {{ 1e6 }} {{ 0x1F }} {{ 'a' }} {{ true }} {{ -5 }}"),
        "1337 1 1e+06 31 97 true -5"
    );
    assert_eq!(
        run("{{ 1_000 }} {{ 0o17 }} {{ 017 }} {{ 0b101 }}"),
        "1000 15 15 5"
    );
}

#[test]
fn range_body_on_its_own_line() {
    let text =
        "containers:\n  {{- range .Spec.Containers }}\n  - name: {{ .Name }}\n  {{- end}}\nnext";
    assert_eq!(
        run(text),
        "containers:\n  - name: hello\n  - name: istio-proxy\nnext"
    );
}

// ---- fields, missing keys, nil, zero values ----

#[test]
fn missing_keys_and_nil() {
    assert_eq!(
        run("[{{ index .Spec.NodeSelector \"x\" }}][{{ index .ProxyConfig.ProxyMetadata \"x\" }}]"),
        "[][]"
    );
    assert_eq!(run("{{ .Spec.NodeSelector.x }}"), "<no value>");
    assert_eq!(run("{{ .Values.missing }}"), "<no value>");
    assert_eq!(run("{{ .Values.missing.deeper }}"), "<no value>");
    assert_eq!(run("{{ .Values.nullv }}"), "<no value>");
    assert_eq!(run("{{ .ObjectMeta.Labels.nope }}"), "<no value>");
    assert_eq!(
        exec_msg("{{ .Values.nullv.b }}"),
        "nil pointer evaluating interface {}.b"
    );
    assert_eq!(run("{{ index .Values \"missing\" }}"), "<no value>");
    assert_eq!(run("[{{ index .ObjectMeta.Annotations \"nope\" }}]"), "[]");
    assert_eq!(run("{{ if .Values.missing }}y{{ else }}n{{ end }}"), "n");
    assert_eq!(run("{{ .Values.missing | quote }}"), "");
    assert_eq!(run("{{ toJSON .Values.missing }}"), "{}");
}

#[test]
fn struct_fields_and_zero_values() {
    assert_eq!(
        run("{{ .DeploymentMeta.Name }}.{{ .DeploymentMeta.Namespace }}"),
        "hello.default"
    );
    assert_eq!(
        run("[{{ .ObjectMeta.Name }}]{{ .ObjectMeta.GenerateName }}"),
        "[]hello-"
    );
    assert_eq!(
        run("{{ .TypeMeta.APIVersion }} {{ .TypeMeta.Kind }}"),
        "v1 Pod"
    );
    assert_eq!(run("{{ .ObjectMeta.Labels.app }}"), "hello");
    assert_eq!(
        run("{{ index .ObjectMeta.Annotations `sidecar.istio.io/proxyCPU` }}"),
        "200m"
    );
    assert_eq!(run("{{ .ObjectMeta.OwnerReferences }}"), "[]");
    assert_eq!(run("{{ .Spec.NodeSelector }}"), "map[]");
    assert_eq!(run("{{ .Spec.SecurityContext }}"), "<nil>");
    assert_eq!(
        run("{{ .Spec.HostNetwork }} {{ .ProxyGID }} {{ .ProxyUID }}"),
        "false 0 1337"
    );
    assert_eq!(run("{{ (index .Spec.Containers 0).Name }}"), "hello");
    assert_eq!(
        run("{{ (index (index .Spec.Containers 0).Ports 0).ContainerPort }}"),
        "80"
    );
    assert_eq!(
        run("{{ .Spec.ServiceAccountName }} {{ .Revision }} {{ .NativeSidecars }}"),
        "default default true"
    );
    assert_eq!(
        exec_msg("{{ .Spec.SecurityContext.RunAsUser }}"),
        "nil pointer evaluating *v1.PodSecurityContext.RunAsUser"
    );
    assert_eq!(
        exec_msg("{{ .Foo }}"),
        "can't evaluate field Foo in type inject.SidecarTemplateData"
    );
    assert_eq!(
        exec_msg("{{ .Revision.Foo }}"),
        "can't evaluate field Foo in type string"
    );
    assert_eq!(
        exec_msg("{{ index .Spec.Containers 5 }}"),
        "error calling index: index out of range: 5"
    );
    assert!(matches!(
        exec_err("{{ .Spec.Overhead }}"),
        ExecError::Unsupported { .. }
    ));
}

#[test]
fn proxy_config_fields_and_getters() {
    assert_eq!(
        run("{{ printf \"%s|%q|%d|%v\" .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode }}"),
        "REDIRECT|\"REDIRECT\"|0|REDIRECT"
    );
    assert_eq!(
        run("{{ quote .ProxyConfig.InterceptionMode }}"),
        "\"REDIRECT\""
    );
    assert_eq!(run("{{ .ProxyConfig.InterceptionMode }}"), "REDIRECT");
    assert_eq!(
        run("{{ .ProxyConfig.InterceptionMode.String }}"),
        "REDIRECT"
    );
    assert_eq!(run("{{ eq .ProxyConfig.InterceptionMode 0 }}"), "true");
    assert_eq!(run("{{ .ProxyConfig.Concurrency.GetValue }}"), "2");
    assert_eq!(
        run("{{ .ProxyConfig.HoldApplicationUntilProxyStarts.GetValue }}"),
        "false"
    );
    assert_eq!(run("[{{ .ProxyConfig.GetImage.GetImageType }}]"), "[]");
    assert_eq!(
        run("{{ .ProxyConfig.ProxyMetadata.DNS_CAPTURE }} {{ .ProxyConfig.StatusPort }}"),
        "true 15020"
    );
    assert_eq!(
        run("{{ .MeshConfig.TrustDomain }} {{ .MeshConfig.DefaultConfig }}"),
        "cluster.local <nil>"
    );
    assert_eq!(
        run("{{ .MeshConfig.EnablePrometheusMerge.GetValue }}"),
        "false"
    );
    assert!(matches!(
        exec_err("{{ .ProxyConfig }}"),
        ExecError::Unsupported { .. }
    ));
    assert!(matches!(
        exec_err("{{ index .Spec.Containers 0 }}"),
        ExecError::Unsupported { .. }
    ));
}

// ---- how values print ----

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
    assert_eq!(run("{{ .Values.list }}"), "[a b c]");
    assert_eq!(
        run("{{ .Values.global.proxy.resources }}"),
        "map[requests:map[cpu:100m memory:128Mi]]"
    );
    assert_eq!(run("{{ .Values.nested }}"), "map[x:1 y:[1 2]]");
    assert_eq!(run("{{ .ObjectMeta.Labels }}"), "map[app:hello version:v1]");
    assert_eq!(
        run("{{ list 1 \"a\" nil true 1.5 }}"),
        "[1 a <nil> true 1.5]"
    );
    assert_eq!(run("{{ .Values.empty }}"), "[]");
}

// ---- variables and control structures ----

#[test]
fn variable_scopes() {
    assert_eq!(
        run("{{$y := \"outer\"}}{{if true}}{{$y := \"inner\"}}{{end}}{{$y}}"),
        "outer"
    );
    assert_eq!(
        run("{{$y := \"outer\"}}{{if true}}{{$y = \"inner\"}}{{end}}{{$y}}"),
        "inner"
    );
    assert_eq!(run("{{ $first := true }}{{ range .Values.list }}{{ if not $first }},{{ end }}{{ . }}{{ $first = false }}{{ end }}"), "a,b,c");
    assert_eq!(
        run("{{ range .Spec.Containers }}{{ $.Revision }}:{{ .Name }} {{ end }}"),
        "default:hello default:istio-proxy "
    );
    assert_eq!(
        run("{{ $c := list }}{{ range .Values.list }}{{ $c = append $c . }}{{ end }}{{ $c }}"),
        "[a b c]"
    );
}

#[test]
fn if_else_chains() {
    let t = "{{ range list 1 2 3 }}{{ if eq . 1 }}one{{ else if eq . 2 }}two{{ else }}many{{ end }} {{ end }}";
    assert_eq!(run(t), "one two many ");
    assert_eq!(
        run("{{ if $x := .Values.global.hub }}{{ $x }}{{ else }}{{ $x }}!{{ end }}"),
        "docker.io/istio"
    );
}

#[test]
fn truth_values() {
    let cases = [
        ("false", "n"),
        ("0", "n"),
        ("0.0", "n"),
        ("\"\"", "n"),
        ("\"false\"", "y"),
        (".Values.empty", "n"),
        (".Values.list", "y"),
        (".ObjectMeta", "y"),
        (".Spec.SecurityContext", "n"),
        (".Values.missing", "n"),
        ("1", "y"),
    ];
    for (cond, want) in cases {
        assert_eq!(
            run(&format!("{{{{ if {cond} }}}}y{{{{ else }}}}n{{{{ end }}}}")),
            want,
            "{cond}"
        );
    }
}

#[test]
fn with_blocks() {
    assert_eq!(
        run("{{ with .Values.global }}{{ .hub }}{{ end }}"),
        "docker.io/istio"
    );
    assert_eq!(
        run("{{ with .Values.missing }}x{{ else }}none{{ end }}"),
        "none"
    );
    assert_eq!(
        run("{{ with $h := .Values.global.hub }}{{ $h }}{{ end }}"),
        "docker.io/istio"
    );
    assert_eq!(
        run("{{ with .Values.missing }}a{{ else with .Values.yes }}{{ . }}{{ end }}"),
        "true"
    );
}

#[test]
fn range_forms() {
    // Go's walkRange recovers a break in the else list but lets a continue reach the enclosing range.
    assert_eq!(
        run("{{ range .Values.list }}<{{ range $.Values.empty }}{{ else }}e{{ break }}x{{ end }}{{ . }}>{{ end }}"),
        "<ea><eb><ec>"
    );
    assert_eq!(
        run("{{ range .Values.list }}<{{ range $.Values.empty }}{{ else }}e{{ continue }}x{{ end }}{{ . }}>{{ end }}"),
        "<e<e<e"
    );
    assert_eq!(
        run("{{ range $i, $c := .Spec.Containers }}{{ if $i }},{{ end }}{{ $c.Name }}{{ end }}"),
        "hello,istio-proxy"
    );
    assert_eq!(
        run("{{ range $v := .Values.list }}{{ $v }}{{ end }}"),
        "abc"
    );
    assert_eq!(
        run("{{ range $k, $v := .ObjectMeta.Labels }}{{ $k }}={{ $v }};{{ end }}"),
        "app=hello;version=v1;"
    );
    assert_eq!(
        run("{{ range .Values.missing }}x{{ else }}empty{{ end }}"),
        "empty"
    );
    assert_eq!(
        run("{{ range .Values.empty }}x{{ else }}empty{{ end }}"),
        "empty"
    );
    assert_eq!(run("{{ range 3 }}{{ . }}{{ end }}"), "012");
    assert_eq!(
        run("{{ range .Values.list }}{{ if eq . \"b\" }}{{ continue }}{{ end }}{{ . }}{{ end }}"),
        "ac"
    );
    assert_eq!(
        run("{{ range .Values.list }}{{ if eq . \"b\" }}{{ break }}{{ end }}{{ . }}{{ end }}"),
        "a"
    );
    assert_eq!(
        exec_msg("{{ range .Values.global.hub }}{{ end }}"),
        "range can't iterate over docker.io/istio"
    );
    assert_eq!(
        exec_msg("{{ range .Values.nums.b }}{{ end }}"),
        "range can't iterate over 100"
    );
}

// ---- functions ----

#[test]
fn comparisons() {
    assert_eq!(
        exec_msg("{{ eq .Values.global.proxy.statusPort 15020 }}"),
        "error calling eq: incompatible types for comparison"
    );
    assert_eq!(
        run("{{ eq .Values.global.proxy.statusPort 15020.0 }}"),
        "true"
    );
    assert_eq!(
        run("{{ eq .Values.missing \"x\" }} {{ ne .Values.missing \"x\" }}"),
        "false true"
    );
    assert_eq!(run("{{ eq \"b\" \"a\" \"b\" }}"), "true");
    assert_eq!(
        exec_msg("{{ eq \"true\" true }}"),
        "error calling eq: incompatible types for comparison"
    );
    assert_eq!(
        run("{{ lt 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1.5 2.5 }}"),
        "true true true false"
    );
    assert_eq!(
        exec_msg("{{ lt true false }}"),
        "error calling lt: invalid type for comparison"
    );
    assert_eq!(run("{{ eq .ProxyUID 1337 }}"), "true");
}

#[test]
fn and_or_not_len_index() {
    assert_eq!(
        run("{{ or \"\" \"b\" }} {{ and 1 0 2 }} {{ and 1 2 }} {{ or 0 \"\" }}"),
        "b 0 2 "
    );
    assert_eq!(run("{{ not .Values.missing }} {{ not 1 }}"), "true false");
    assert_eq!(run("{{ and .Values.missing .Foo }}"), "<no value>");
    assert_eq!(run("{{ len .Values.list }} {{ len \"héllo\" }} {{ len .ObjectMeta.Labels }} {{ len .Spec.Volumes }}"), "3 6 2 0");
    assert_eq!(
        exec_msg("{{ len .Values.nums.a }}"),
        "error calling len: len of type float64"
    );
    assert_eq!(run("{{ index .Values \"global\" \"hub\" }} {{ index .Values.list 1 }} {{ index \"abc\" 0 }}"), "docker.io/istio b 97");
}

#[test]
fn printf_verbs() {
    assert_eq!(
        run("{{ printf \"%s\" .Values.global.proxy.statusPort }}"),
        "%!s(float64=15020)"
    );
    assert_eq!(
        run("{{ printf \"%d\" .Values.global.proxy.statusPort }}"),
        "%!d(float64=15020)"
    );
    assert_eq!(
        run("{{ printf \"%v\" .Values.global.proxy.statusPort }}"),
        "15020"
    );
    assert_eq!(run("{{ printf \"%5.2f|%-5s|%5s|%05d|%x|%X|%q|%t|%o\" 3.14159 \"ab\" \"cd\" 42 255 \"hi\" \"a\\\"b\" true 8 }}"), " 3.14|ab   |   cd|00042|ff|6869|\"a\\\"b\"|true|10");
    assert_eq!(
        run("{{ printf \"%e|%g|%.3g|%8.3e|%f\" 123456.789 0.000012 1234.5678 1234.5678 1.0 }}"),
        "1.234568e+05|1.2e-05|1.23e+03|1.235e+03|1.000000"
    );
    assert_eq!(run("{{ printf \"%d %d\" 1 }}"), "1 %!d(MISSING)");
    assert_eq!(run("{{ printf \"%d\" 1 \"x\" }}"), "1%!(EXTRA string=x)");
    assert_eq!(
        run("{{ printf \"%v %s\" .Values.missing nil }}"),
        "<nil> %!s(<nil>)"
    );
    assert_eq!(
        run("{{ printf \"%s|%d\" (list nil \"a\") (dict \"k\" nil) }}"),
        "[<nil> a]|map[%!d(string=k):<nil>]"
    );
    assert_eq!(run("{{ printf \"%v\" .Spec.SecurityContext }}"), "<nil>");
    assert!(matches!(
        exec_err("{{ printf \"%d\" .Spec.SecurityContext }}"),
        ExecError::Unsupported { .. }
    ));
    assert!(matches!(
        exec_err("{{ printf \"%x\" 1.5 }}"),
        ExecError::Unsupported { .. }
    ));
    assert_eq!(run("{{ printf \"%z\" 1 }}"), "%!z(int=1)");
    assert_eq!(
        run("{{ printf \"%T %T %T %T %T %T\" 1 .ProxyUID .Values.nums.a .Values.list .Spec.SecurityContext nil }}"),
        "int int64 float64 []interface {} *v1.PodSecurityContext <nil>"
    );
    assert_eq!(run("{{ printf \"%d%%\" 5 }}"), "5%");
    assert_eq!(
        run("{{ printf \"%v\" .Values.list }} {{ printf \"%q\" .Values.list }}"),
        "[a b c] [\"a\" \"b\" \"c\"]"
    );
    assert_eq!(
        run("{{ printf \"%+d|% d|%c|%U\" 5 5 65 65 }}"),
        "+5| 5|A|U+0041"
    );
    assert_eq!(run("{{ \"x\" | printf \"%s-%s\" \"a\" }}"), "a-x");
}

#[test]
fn print_and_println() {
    assert_eq!(run("{{ print 1 2 \"a\" \"b\" 3 }}"), "1 2ab3");
    assert_eq!(run("{{ println 1 \"a\" }}"), "1 a\n");
}

#[test]
fn default_quote_and_friends() {
    assert_eq!(
        run("{{ .ProxyGID | default \"1337\" }} {{ .ProxyUID | default \"1\" }}"),
        "1337 1337"
    );
    assert_eq!(
        run("{{ .Values.global.caName | default \"x\" }} {{ .Values.missing | default 5 }}"),
        "x 5"
    );
    assert!(matches!(
        exec_err("{{ .ObjectMeta | default \"x\" }}"),
        ExecError::Unsupported { .. }
    ));
    assert_eq!(
        run("{{ quote nil }}|{{ quote \"a\\\"b\" 15020 .Values.nums.e true }}"),
        "|\"a\\\"b\" \"15020\" \"1e+06\" \"true\""
    );
    assert_eq!(run("{{ squote \"a\" 1 }}"), "'a' '1'");
    assert_eq!(run("{{ valueOrDefault .Values.global.caName \"d\" }} {{ valueOrDefault 0 \"d\" }} {{ valueOrDefault false \"d\" }}"), "d 0 false");
    assert_eq!(run("{{ empty .Values.list }} {{ empty .Spec }} {{ coalesce \"\" 0 \"c\" }} {{ ternary \"y\" \"n\" true }}"), "false false c y");
}

#[test]
fn to_yaml_and_json() {
    assert_eq!(
        run("{{ toYaml .Values.global.proxy.resources }}"),
        "requests:\n  cpu: 100m\n  memory: 128Mi\n"
    );
    assert_eq!(run("{{ toYaml .Values.missing }}"), "null\n");
    assert_eq!(run("{{ toYaml .Values.nums.e }}"), "1000000\n");
    assert_eq!(run("{{ toYaml .Values.list }}"), "- a\n- b\n- c\n");
    assert_eq!(
        run("{{ toYaml \"multi\\nline\" }}"),
        "|-\n  multi\n  line\n"
    );
    assert_eq!(
        run("{{ toYaml (dict \"a\" \"l1\\nl2\\n\" \"b\" (list (dict \"x\" 1 \"y\" (list 1 2)) (list 3 4)) \"c\" \"\" \"d\" \"yes\" \"e\" \"1.5\" \"f\" nil \"g\" 1e-7) }}"),
        "a: |\n  l1\n  l2\nb:\n- x: 1\n  \"y\":\n  - 1\n  - 2\n- - 3\n  - 4\nc: \"\"\nd: \"yes\"\ne: \"1.5\"\nf: null\ng: 1e-07\n"
    );
    assert_eq!(
        run("{{ toYaml (dict \"a\" (list 1 \"true\") \"b\" (dict) \"c\" \"x: y\") }}"),
        "a:\n- 1\n- \"true\"\nb: {}\nc: \"x: y\"\n"
    );
    assert_eq!(
        run("{{ toYaml .ObjectMeta.Labels }}"),
        "app: hello\nversion: v1\n"
    );
    assert_eq!(
        run("{{ toYaml (index .Spec.Containers 0) }}"),
        "image: hello:1\nname: hello\nports:\n- containerPort: 80\n  name: http\nresources: {}\n"
    );
    assert_eq!(
        run("{{ toJSON .ObjectMeta.Labels }} {{ toJSON (strdict \"k\" .Values.html) }}"),
        "{\"app\":\"hello\",\"version\":\"v1\"} {\"k\":\"\\u003ca\\u0026b\\u003e\"}"
    );
    assert_eq!(
        run("{{ toJson .Values.nested }} {{ toJson .Values.nums.j }}"),
        "{\"x\":1,\"y\":[1,2]} 1e+21"
    );
    assert_eq!(
        exec_msg("{{ toJSON .Values.global }}"),
        "wrong type for value; expected map[string]string; got map[string]interface {}"
    );
    assert!(matches!(
        exec_err("{{ toYaml .ProxyConfig }}"),
        ExecError::Unsupported { .. }
    ));
    assert_eq!(
        run("{{ toJson .ObjectMeta }}"),
        "{\"generateName\":\"hello-\",\"namespace\":\"default\",\"creationTimestamp\":null,\"labels\":{\"app\":\"hello\",\"version\":\"v1\"},\"annotations\":{\"empty\":\"\",\"sidecar.istio.io/proxyCPU\":\"200m\"}}"
    );
    assert_eq!(
        run("{{ toJson (dict \"s\" (index .Spec.Containers 1).Resources) }}"),
        "{\"s\":{\"requests\":{\"cpu\":\"100m\"}}}"
    );
    assert_eq!(run("{{ toJson .Spec.Volumes }}"), "null");
    assert_eq!(
        run("{{ toJson .DeploymentMeta }}"),
        "{\"Namespace\":\"default\",\"Name\":\"hello\"}"
    );
    assert_eq!(
        run("{{ toJson (index .Spec.Containers 0) }}"),
        "{\"name\":\"hello\",\"image\":\"hello:1\",\"ports\":[{\"name\":\"http\",\"containerPort\":80}],\"resources\":{}}"
    );
    assert_eq!(
        run("{{ toYaml .ObjectMeta }}"),
        "annotations:\n  empty: \"\"\n  sidecar.istio.io/proxyCPU: 200m\ncreationTimestamp: null\ngenerateName: hello-\nlabels:\n  app: hello\n  version: v1\nnamespace: default\n"
    );
    assert!(matches!(
        exec_err("{{ toJson . }}"),
        ExecError::Unsupported { .. }
    ));
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

#[test]
fn from_json() {
    assert_eq!(run("{{ fromJSON \"not json\" }}"), "{}");
    assert_eq!(
        run("{{ (fromJSON `{\"a\":[1,2],\"b\":null}`).a }}"),
        "[1 2]"
    );
    assert_eq!(
        run("{{ range $k, $v := fromJSON `{\"b\":1,\"a\":2}` }}{{ $k }}{{ $v }}{{ end }}"),
        "a2b1"
    );
    assert_eq!(
        exec_msg("{{ range fromJSON \"bad\" }}{{ end }}"),
        "range can't iterate over {}"
    );
}

#[test]
fn indentation() {
    assert_eq!(run("{{ indent 2 \"a\\nb\\n\" }}"), "a\n  b\n  ");
    assert_eq!(run("{{ nindent 2 \"a\\nb\" }}"), "\n  a\n  b");
    assert_eq!(
        run("x:{{ toYaml .ObjectMeta.Labels | nindent 2 }}"),
        "x:\n  app: hello\n  version: v1\n  "
    );
    assert_eq!(
        exec_msg("{{ indent .Values.nums.b \"a\" }}"),
        "wrong type for value; expected int; got float64"
    );
}

#[test]
fn istio_helpers() {
    assert_eq!(
        run("{{ range .Spec.Containers }}{{ range .Ports }}{{ structToJSON . }}{{ end }}{{ end }}|{{ structToJSON .Values.missing }}"),
        "{\"name\":\"http\",\"containerPort\":80}|{}"
    );
    assert_eq!(run("{{ isset .ObjectMeta.Annotations \"empty\" }} {{ isset .ObjectMeta.Annotations \"x\" }} {{ isset .Values.missing \"x\" }}"), "true false false");
    assert_eq!(
        exec_msg("{{ isset .Values.global \"hub\" }}"),
        "wrong type for value; expected map[string]string; got map[string]interface {}"
    );
    assert_eq!(
        run("{{ annotation .ObjectMeta `sidecar.istio.io/proxyCPU` \"1\" }}"),
        "200m"
    );
    assert_eq!(run("[{{ annotation .ObjectMeta \"empty\" \"d\" }}]"), "[]");
    assert_eq!(run("{{ annotation .ObjectMeta \"x\" .Values.missing }} {{ annotation .ObjectMeta \"x\" .Values.nums.e }} {{ annotation .ObjectMeta \"x\" .ProxyConfig.InterceptionMode }}"), "<nil> 1e+06 REDIRECT");
    assert_eq!(run("{{ toLower \"AbC\" }} {{ contains \"/\" \"a/b\" }} {{ \"a/b\" | contains \"/\" }} {{ contains \"a/b\" \"/\" }}"), "abc true true false");
    assert_eq!(
        run("{{ omit .ObjectMeta.Labels \"app\" }} {{ strdict \"a\" \"1\" \"b\" }}"),
        "map[version:v1] map[a:1 b:]"
    );
    assert_eq!(
        run("{{ env \"GOTEMPLATE_TEST_UNSET_VARIABLE\" \"dflt\" }}"),
        "dflt"
    );
}

#[test]
fn sprig_lists_and_strings() {
    assert_eq!(run("{{ join \",\" .Values.list }}|{{ .Values.empty | join \",\" }}|{{ join \",\" \"x\" }}|{{ join \",\" (list 1 nil 2.5) }}"), "a,b,c||x|1,2.5");
    assert_eq!(
        exec_msg("{{ append .Values.missing 1 }}"),
        "error calling append: Cannot push on type <nil>"
    );
    assert_eq!(
        run("{{ $l := list 1 }}{{ $m := append $l 2 }}{{ $l }} {{ $m }}"),
        "[1] [1 2]"
    );
    assert_eq!(
        run(
            "{{ get (dict \"a\" 1) \"a\" }}|{{ get (dict) \"a\" }}|{{ hasKey .Values \"global\" }}"
        ),
        "1||true"
    );
    assert_eq!(run("{{ trimSuffix \".svc\" \"a.svc\" }} {{ trimPrefix \"a\" \"ab\" }} {{ hasPrefix \"a\" \"ab\" }} {{ hasSuffix \"a\" \"ab\" }}"), "a b true false");
    assert_eq!(run("{{ replace \"a\" \"b\" \"aXa\" }} {{ upper \"a\" }} {{ trim \"  x \" }} {{ trimAll \"-\" \"--x-\" }} {{ repeat 3 \"ab\" }} {{ trunc 2 \"abc\" }}"), "bXb A x x ababab ab");
    assert_eq!(run("{{ .Values.global.proxy.statusPort | int }} {{ int \"0x1F\" }} {{ int \"012\" }} {{ int \"1.00\" }} {{ int \"x\" }} {{ toString 1.5 }}"), "15020 31 10 1 0 1.5");
    assert_eq!(run("{{ 1000000.0 | int }}"), "1000000");
    assert_eq!(run("{{ split \",\" \"a,b,,c\" }} {{ (split \"/\" \"ns/name\")._1 }} {{ split \"\" \"ab\" }}"), "map[_0:a _1:b _2: _3:c] name map[_0:a _1:b]");
    assert_eq!(run("{{ int \"1.\" }} {{ int \"-012\" }} {{ int \"08\" }} {{ int \"1.50\" }} {{ int true }}"), "0 -10 0 0 1");
    assert_eq!(
        run("[{{ toJson (float64 \"NaN\") }}][{{ toYaml (list (float64 \"+Inf\")) }}][{{ structToJSON (float64 \"NaN\") }}]"),
        "[][][{}]"
    );
    match exec_err("{{ fail \"no\" }}") {
        ExecError::Fail { message, .. } => assert_eq!(message, "no"),
        other => panic!("{other}"),
    }
}

#[test]
fn wrong_arguments_are_errors() {
    assert_eq!(
        exec_msg("{{ toLower .Values.missing }}"),
        "invalid value; expected string"
    );
    assert_eq!(
        exec_msg("{{ toLower 1 }}"),
        "expected string; found a number"
    );
    assert_eq!(
        exec_msg("{{ indent 2 }}"),
        "wrong number of args for indent: want 2 got 1"
    );
}

// ---- refused constructs ----

#[test]
fn refused_actions_name_template_line_and_action() {
    let e = Template::parse("spire", "a\nb\n{{ define \"x\" }}{{ end }}").expect_err("refused");
    assert_eq!(
        e.to_string(),
        "template \"spire\": line 3: unsupported action \"define\""
    );
    for (text, action) in [
        ("{{ template \"x\" . }}", "template"),
        ("\n{{ block \"x\" . }}{{ end }}", "block"),
    ] {
        match parse_err(text) {
            ParseError::UnsupportedAction {
                action: a,
                template,
                ..
            } => {
                assert_eq!(a, action);
                assert_eq!(template, "t");
            }
            other => panic!("{other}"),
        }
    }
}

#[test]
fn refused_functions_name_template_line_and_function() {
    for f in [
        "lookup",
        "include",
        "tpl",
        "required",
        "fromYaml",
        "call",
        "html",
        "js",
        "urlquery",
        "slice",
        "protoToJSON",
        "formatDuration",
        "excludeInboundPort",
        "applicationPorts",
        "keys",
        "set",
        "nosuchfunction",
    ] {
        let text = format!("line1\n{{{{ {f} . }}}}");
        match Template::parse("user", &text) {
            Err(e @ ParseError::UnsupportedFunction { .. }) => {
                assert_eq!(
                    e.to_string(),
                    format!("template \"user\": line 2: unsupported function \"{f}\"")
                );
            }
            other => panic!("{f}: {other:?}"),
        }
    }
    match parse_err("{{ .X | lookup }}") {
        ParseError::UnsupportedFunction { function, .. } => assert_eq!(function, "lookup"),
        other => panic!("{other}"),
    }
}

#[test]
fn syntax_errors() {
    let msg = |t: &str| match parse_err(t) {
        ParseError::Syntax { message, .. } => message,
        other => panic!("{t:?}: {other}"),
    };
    assert_eq!(msg("{{ $x }}"), "undefined variable \"$x\"");
    assert_eq!(msg("{{ $x = 1 }}"), "undefined variable \"$x\"");
    assert_eq!(
        msg("{{ if $x := 1 }}{{ end }}{{ $x }}"),
        "undefined variable \"$x\""
    );
    assert_eq!(msg("{{ break }}"), "{{break}} outside {{range}}");
    assert_eq!(msg("{{ end }}"), "unexpected {{end}}");
    assert_eq!(msg("{{ if 1 }}"), "unexpected EOF in if");
    assert_eq!(msg("{{ nil }}"), "nil is not a command");
    assert_eq!(msg("{{ 1i }}"), "complex number \"1i\" is not supported");
    assert_eq!(msg("{{ .X"), "unclosed action");
    assert_eq!(msg("{{ \"a }}"), "unterminated quoted string");
    assert_eq!(
        msg("{{ . | \"x\" }}"),
        "non executable command in pipeline stage 2"
    );
    assert_eq!(msg("{{ \"x\" 1 }}"), "can't give argument to non-function");
    assert_eq!(msg("{{ $a, $b := 1 }}"), "too many declarations in command");
    assert_eq!(msg("{{ }}"), "missing value for command");
    assert!(msg("{{ (1 }}").contains("paren"));
    let e = parse_err("a\n\n{{ if }}{{ end }}");
    assert_eq!(
        e.to_string(),
        "template \"t\": line 3: missing value for if"
    );
}

/// Parsed templates live in a configuration shared by the server's threads.
#[test]
fn templates_and_errors_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Template>();
    check::<ParseError>();
    check::<ExecError>();
    check::<Limits>();
}

#[test]
fn errors_name_the_line_of_the_action() {
    let e = exec_err("a\nb\n{{ .Values.nullv.x }}");
    assert_eq!(
        e.to_string(),
        "template \"t\": line 3: nil pointer evaluating interface {}.x"
    );
    let e = exec_err("{{ range .Values.list }}\n\n{{ fail \"stop\" }}{{ end }}");
    assert_eq!(e.to_string(), "template \"t\": line 3: fail: stop");
    assert_eq!(
        Limits::default(),
        Limits {
            max_depth: 64,
            max_iterations: 100_000,
            max_output_bytes: 4 << 20,
            max_steps: 2_000_000
        }
    );
}

#[test]
fn static_templates() {
    let t = Template::parse(
        "spire",
        "spec:\n  containers:\n  - name: istio-proxy\n{{/* c */}}",
    )
    .expect("parse");
    assert!(t.is_static());
    assert_eq!(
        t.static_text(),
        Some("spec:\n  containers:\n  - name: istio-proxy\n")
    );
    assert_eq!(
        t.execute(&json!({}), &Limits::default()).expect("exec"),
        "spec:\n  containers:\n  - name: istio-proxy\n"
    );
    assert!(!Template::parse("x", "a {{ .Revision }}")
        .expect("parse")
        .is_static());
    assert!(Template::parse("x", "").expect("parse").is_static());
    assert_eq!(
        Template::parse("x", "a {{- /* c */ -}} b")
            .expect("parse")
            .static_text(),
        Some("ab")
    );
    assert_eq!(
        Template::parse("x", "a {{ .Revision }}")
            .expect("parse")
            .static_text(),
        None
    );
}

// ---- bounds ----

fn limited(text: &str, data: &Value, limits: Limits) -> ExecError {
    let t = Template::parse("p", text).expect("parse");
    t.execute(data, &limits).expect_err("should hit a bound")
}

fn what(e: &ExecError) -> &'static str {
    match e {
        ExecError::Limit { what, .. } => what,
        other => panic!("expected a limit, got {other}"),
    }
}

#[test]
fn nested_ranges_hit_the_iteration_bound() {
    let big: Vec<u32> = (0..1000).collect();
    let d = json!({"Values": {"l": big}});
    let e = limited("{{ range .Values.l }}{{ range $.Values.l }}{{ range $.Values.l }}x{{ end }}{{ end }}{{ end }}", &d, Limits::default());
    assert_eq!(what(&e), "iterations");
    assert_eq!(
        limited("{{ range 1000000000 }}{{ end }}", &d, Limits::default()).to_string(),
        "template \"p\": line 1: iterations limit 100000 exceeded"
    );
}

#[test]
fn huge_printf_widths_hit_the_output_bound() {
    let d = json!({});
    let small = Limits {
        max_output_bytes: 1000,
        ..Limits::default()
    };
    assert_eq!(
        what(&limited("{{ printf \"%5000d\" 1 }}", &d, small)),
        "output bytes"
    );
    assert_eq!(
        what(&limited("{{ printf \"%.5000f\" 1.0 }}", &d, small)),
        "output bytes"
    );
    assert_eq!(
        what(&limited(
            "{{ range 100 }}{{ printf \"%900d\" 1 }}{{ end }}",
            &d,
            Limits::default().with_output(10_000)
        )),
        "output bytes"
    );
    assert_eq!(
        what(&limited("{{ repeat 100000 \"ab\" }}", &d, small)),
        "output bytes"
    );
    assert_eq!(
        what(&limited(
            "{{ $s := \"ab\" }}{{ range 40 }}{{ $s = printf \"%s%s\" $s $s }}{{ end }}",
            &d,
            Limits::default()
        )),
        "output bytes"
    );
    assert_eq!(run("{{ printf \"%2000000d\" 1 }}"), "%!(BADWIDTH)1");
}

impl Limits {
    fn with_output(self, n: usize) -> Limits {
        Limits {
            max_output_bytes: n,
            ..self
        }
    }
}

#[test]
fn deep_nesting_hits_the_depth_bound() {
    let depth = 80;
    let text = "{{ if true }}".repeat(depth) + &"{{ end }}".repeat(depth);
    assert_eq!(
        what(&limited(&text, &json!({}), Limits::default())),
        "depth"
    );
    let too_deep =
        "{{ if true }}".repeat(MAX_PARSE_DEPTH + 1) + &"{{ end }}".repeat(MAX_PARSE_DEPTH + 1);
    assert!(matches!(
        Template::parse("p", &too_deep),
        Err(ParseError::TooDeep {
            limit: MAX_PARSE_DEPTH,
            ..
        })
    ));
    let parens = "{{ ".to_string() + &"(".repeat(200) + "1" + &")".repeat(200) + " }}";
    assert!(matches!(
        Template::parse("p", &parens),
        Err(ParseError::TooDeep { .. })
    ));
    let mut nested = json!(1);
    for _ in 0..100 {
        nested = json!({ "a": nested });
    }
    let d = json!({"Values": {"n": nested}});
    assert_eq!(
        what(&limited("{{ .Values.n }}", &d, Limits::default())),
        "depth"
    );
    assert_eq!(
        what(&limited("{{ toYaml .Values.n }}", &d, Limits::default())),
        "depth"
    );
    let text = format!(
        "{{{{ fromJSON `{}1{}` }}}}",
        "[".repeat(100),
        "]".repeat(100)
    );
    assert_eq!(
        what(&limited(&text, &json!({}), Limits::default())),
        "depth"
    );
}

#[test]
fn template_built_values_cannot_nest_past_the_depth_bound() {
    let d = json!({});
    for text in [
        "{{ $l := list }}{{ range 100000 }}{{ $l = list $l }}{{ end }}",
        "{{ $l := list }}{{ range 100000 }}{{ $l = append (list) $l }}{{ end }}",
        "{{ $l := dict }}{{ range 100000 }}{{ $l = dict \"a\" $l }}{{ end }}",
    ] {
        assert_eq!(
            what(&limited(text, &d, Limits::default())),
            "depth",
            "{text}"
        );
    }
    assert_eq!(
        run("{{ $l := list }}{{ range 3 }}{{ $l = list $l }}{{ end }}{{ $l }}"),
        "[[[[]]]]"
    );
}

#[test]
fn heavy_bodies_hit_the_step_bound() {
    let d = json!({});
    let e = limited(
        "{{ $l := list }}{{ range 20000 }}{{ $l = append $l . }}{{ end }}",
        &d,
        Limits::default(),
    );
    assert_eq!(what(&e), "steps");
    let few = Limits {
        max_steps: 500,
        ..Limits::default()
    };
    assert_eq!(
        what(&limited("{{ range 1000 }}{{ . }}{{ end }}", &d, few)),
        "steps"
    );
}

// ---- Istio's custom-template case ----

const CUSTOM: &str = r#"metadata:
  annotations:
    # Disable the built-in transformations. In the future we may want a template-level API
    prometheus.istio.io/merge-metrics: "false"
    sidecar.istio.io/rewriteAppHTTPProbers: "false"
    foo: bar
spec:
  containers:
  {{- range $index, $container := .Spec.Containers }}
  - name: {{ $container.Name }}
    env:
    - name: SOME_ENV
      value: "true"
    - name: SOME_FILE
      value: /var/lib/data/foo.json
    volumeMounts:
    - mountPath: /var/lib/data/foo.json
      subPath: foo.json
      name: some-injected-file
  {{- end}}
  volumes:
  - name: some-injected-file
    downwardAPI:
      items:
      - path: foo.json
        fieldRef:
          fieldPath: "metadata.annotations['foo']"
"#;

#[test]
fn istio_custom_template_case() {
    let path = test_support::corpus::inject_dir().join("custom-template.yaml");
    let input = std::fs::read_to_string(&path).expect("custom-template.yaml");
    let deployment = crate::yaml::parse(&input).expect("yaml");
    let pod = &deployment["spec"]["template"];
    let root = json!({
        "TypeMeta": {"kind": "Pod", "apiVersion": "v1"},
        "DeploymentMeta": {"name": "hello", "namespace": "default"},
        "ObjectMeta": pod["metadata"],
        "Spec": pod["spec"],
        "Values": {},
        "Revision": "default",
    });
    let t = Template::parse("custom", CUSTOM).expect("parse");
    assert!(!t.is_static());
    let out = t.execute(&root, &Limits::default()).expect("execute");
    let expected = CUSTOM
        .replace(
            "\n  {{- range $index, $container := .Spec.Containers }}",
            "",
        )
        .replace("{{ $container.Name }}", "hello")
        .replace("\n  {{- end}}", "");
    assert_eq!(out, expected);
    assert!(
        out.contains("containers:\n  - name: hello\n    env:\n"),
        "{out}"
    );
    assert!(
        out.contains("name: some-injected-file\n  volumes:\n"),
        "{out}"
    );
    let rendered = crate::yaml::parse(&out).expect("output is YAML");
    assert_eq!(rendered["spec"]["containers"][0]["name"], "hello");
    assert_eq!(rendered["metadata"]["annotations"]["foo"], "bar");
}

// ---- properties ----

const PIECES: &[&str] = &[
    "{{",
    "}}",
    "{{- ",
    " -}}",
    " ",
    "\n",
    "x",
    "range",
    "if",
    "else",
    "end",
    "with",
    "break",
    "continue",
    ".",
    ".Values",
    ".Values.l",
    ".Values.m",
    ".Spec.Containers",
    ".Name",
    "$",
    "$x",
    "$x :=",
    "$i, $v :=",
    "$x =",
    "|",
    "(",
    ")",
    "printf",
    "\"%v\"",
    "\"%0999d\"",
    "\"%s%s\"",
    "1",
    "1000",
    "-1",
    "0.5",
    "nil",
    "true",
    "\"a\"",
    "`b`",
    "index",
    "len",
    "eq",
    "ne",
    "lt",
    "and",
    "or",
    "not",
    "default",
    "quote",
    "toYaml",
    "toJson",
    "indent",
    "nindent",
    "list",
    "append",
    "dict",
    "fromJSON",
    "join",
    "\",\"",
    "/*",
    "*/",
    "'c'",
    ":=",
    "=",
    ",",
];

fn template_text() -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(PIECES), 0..40).prop_map(|v| v.concat())
}

/// Texts built from well-formed actions, so that most of them parse and run.
fn structured_text() -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(
        &[
            "{{ .Values.l }}",
            "{{ printf \"%v-%d\" . 3 }}",
            "{{ $.Values.m | toYaml | indent 2 }}",
            "{{ len $.Values.l }}",
            "{{ index $.Values.l 0 }}",
            "{{ $x := list . . }}{{ $x }}",
            "{{ toJson . }}",
            "{{ . | quote }}",
            "text\n",
            "{{ .Name }}",
            "{{ default \"d\" .missing }}",
            "{{ printf \"%0999d\" 1 }}",
            "{{ eq . 1.0 }}",
        ][..],
    )
    .prop_map(str::to_string);
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a + &b),
            inner
                .clone()
                .prop_map(|a| format!("{{{{ range $.Values.l }}}}{a}{{{{ end }}}}")),
            inner
                .clone()
                .prop_map(|a| format!("{{{{ range $k, $v := $.Values.m }}}}{a}{{{{ end }}}}")),
            inner
                .clone()
                .prop_map(|a| format!("{{{{ if . }}}}{a}{{{{ else }}}}e{{{{ end }}}}")),
            inner.prop_map(|a| format!("{{{{ with $.Values.m }}}}{a}{{{{ end }}}}")),
        ]
    })
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(|i| json!(i)),
        (-1e22f64..1e22).prop_map(|f| json!(f)),
        "[a-z%{}.\\- ]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn root_with(v: Value, l: Value) -> Value {
    json!({"Values": {"l": l, "m": v.clone(), "v": v}, "Spec": {"containers": [{"name": "a"}]}})
}

fn small_limits() -> Limits {
    Limits {
        max_depth: 16,
        max_iterations: 2000,
        max_output_bytes: 64 << 10,
        max_steps: 50_000,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_texts_never_panic(text in template_text(), v in json_value(), l in json_value()) {
        if let Ok(t) = Template::parse("r", &text) {
            let limits = small_limits();
            if let Ok(out) = t.execute(&root_with(v, l), &limits) {
                prop_assert!(out.len() <= limits.max_output_bytes);
            }
        }
    }

    #[test]
    fn structured_texts_stay_within_bounds(text in structured_text(), v in json_value(), l in prop::collection::vec(json_value(), 0..8)) {
        let t = Template::parse("s", &text).expect("structured texts parse");
        let limits = small_limits();
        match t.execute(&root_with(v, Value::Array(l)), &limits) {
            Ok(out) => prop_assert!(out.len() <= limits.max_output_bytes),
            Err(ExecError::Limit { limit, what, .. }) => prop_assert!(
                (what == "depth" && limit == limits.max_depth)
                    || (what == "iterations" && limit == limits.max_iterations)
                    || (what == "output bytes" && limit == limits.max_output_bytes)
                    || (what == "steps" && limit == limits.max_steps)
            ),
            Err(_) => {}
        }
    }

    #[test]
    fn text_without_actions_renders_to_itself(text in "[^{]{0,80}") {
        let t = Template::parse("static", &text).expect("plain text parses");
        prop_assert!(t.is_static());
        prop_assert_eq!(t.static_text(), Some(text.as_str()));
        prop_assert_eq!(t.execute(&json!({}), &Limits::default()).expect("executes"), text);
    }

    #[test]
    fn istio_custom_template_runs_on_random_data(v in json_value()) {
        let t = Template::parse("custom", CUSTOM).expect("parse");
        let root = json!({"Values": v.clone(), "Spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let out = t.execute(&root, &Limits::default()).expect("execute");
        prop_assert!(out.contains("  - name: a\n") && out.contains("  - name: b\n"));
    }

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,60}") {
        if let Ok(t) = Template::parse("a", &text) {
            let _ = t.execute(&json!({}), &small_limits());
        }
    }
}
