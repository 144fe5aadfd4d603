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

/// Asserts that each template prints its text on the shared data.
fn renders(cases: &[(&str, &str)]) {
    for (text, want) in cases {
        assert_eq!(run(text), *want, "{text:?}");
    }
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

/// Asserts that each template fails as unsupported: a value or operation whose Go result the evaluator
/// does not reproduce exactly.
fn assert_unsupported(texts: &[&str]) {
    for text in texts {
        assert!(
            matches!(exec_err(text), ExecError::Unsupported { .. }),
            "{text:?}"
        );
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
    renders(&[
        ("a  {{- \"b\" -}}  c", "abc"),
        ("x {{- 3 }}", "x3"),
        ("x {{-3}}", "x -3"),
        ("a\n\t {{- /* c */ -}} \n b", "ab"),
        ("a {{ 1 -}}\n\n b", "a 1b"),
    ]);
}

#[test]
fn comments_and_literal_braces() {
    renders(&[("a{{/* x\n y */}}b", "ab"), ("a }} b", "a }} b")]);
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
    renders(&[
        (r#"{{ "a\tb\"c\x41\u00e9" }}"#, "a\tb\"cAé"),
        ("{{ `raw\\n` }}", "raw\\n"),
        (
            "{{ 1337 }} {{ 1.0 }} {{ 1e6 }} {{ 0x1F }} {{ 'a' }} {{ true }} {{ -5 }}",
            "1337 1 1e+06 31 97 true -5",
        ),
        (
            "{{ 1_000 }} {{ 0o17 }} {{ 017 }} {{ 0b101 }}",
            "1000 15 15 5",
        ),
    ]);
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
    renders(&[
        (
            "[{{ index .Spec.NodeSelector \"x\" }}][{{ index .ProxyConfig.ProxyMetadata \"x\" }}]",
            "[][]",
        ),
        ("{{ .Spec.NodeSelector.x }}", "<no value>"),
        ("{{ .Values.missing }}", "<no value>"),
        ("{{ .Values.missing.deeper }}", "<no value>"),
        ("{{ .Values.nullv }}", "<no value>"),
        ("{{ .ObjectMeta.Labels.nope }}", "<no value>"),
    ]);
    assert_eq!(
        exec_msg("{{ .Values.nullv.b }}"),
        "nil pointer evaluating interface {}.b"
    );
    renders(&[
        ("{{ index .Values \"missing\" }}", "<no value>"),
        ("[{{ index .ObjectMeta.Annotations \"nope\" }}]", "[]"),
        ("{{ if .Values.missing }}y{{ else }}n{{ end }}", "n"),
        ("{{ .Values.missing | quote }}", ""),
        ("{{ toJSON .Values.missing }}", "{}"),
    ]);
}

#[test]
fn struct_fields_and_zero_values() {
    renders(&[
        (
            "{{ .DeploymentMeta.Name }}.{{ .DeploymentMeta.Namespace }}",
            "hello.default",
        ),
        (
            "[{{ .ObjectMeta.Name }}]{{ .ObjectMeta.GenerateName }}",
            "[]hello-",
        ),
        ("{{ .TypeMeta.APIVersion }} {{ .TypeMeta.Kind }}", "v1 Pod"),
        ("{{ .ObjectMeta.Labels.app }}", "hello"),
        (
            "{{ index .ObjectMeta.Annotations `sidecar.istio.io/proxyCPU` }}",
            "200m",
        ),
        ("{{ .ObjectMeta.OwnerReferences }}", "[]"),
        ("{{ .Spec.NodeSelector }}", "map[]"),
    ]);
    // k8s.io/api's generated String() returns "nil" for a nil receiver, and fmt calls it.
    renders(&[
        ("{{ .Spec.SecurityContext }}", "nil"),
        (
            "{{ .Spec.HostNetwork }} {{ .ProxyGID }} {{ .ProxyUID }}",
            "false 0 1337",
        ),
        ("{{ (index .Spec.Containers 0).Name }}", "hello"),
        (
            "{{ (index (index .Spec.Containers 0).Ports 0).ContainerPort }}",
            "80",
        ),
        (
            "{{ .Spec.ServiceAccountName }} {{ .Revision }} {{ .NativeSidecars }}",
            "default default true",
        ),
    ]);
    for (input, want) in [
        (
            "{{ .Spec.SecurityContext.RunAsUser }}",
            "nil pointer evaluating *v1.PodSecurityContext.RunAsUser",
        ),
        (
            "{{ .Foo }}",
            "can't evaluate field Foo in type inject.SidecarTemplateData",
        ),
        (
            "{{ .Revision.Foo }}",
            "can't evaluate field Foo in type string",
        ),
        (
            "{{ index .Spec.Containers 5 }}",
            "error calling index: index out of range: 5",
        ),
    ] {
        assert_eq!(exec_msg(input), want, "{input:?}");
    }
    assert_unsupported(&["{{ .Spec.Overhead }}"]);
}

#[test]
fn proxy_config_fields_and_getters() {
    renders(&[
        ("{{ printf \"%s|%q|%d|%v\" .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode .ProxyConfig.InterceptionMode }}", "REDIRECT|\"REDIRECT\"|0|REDIRECT"),
        ("{{ quote .ProxyConfig.InterceptionMode }}", "\"REDIRECT\""),
        ("{{ .ProxyConfig.InterceptionMode }}", "REDIRECT"),
        ("{{ .ProxyConfig.InterceptionMode.String }}", "REDIRECT"),
        ("{{ eq .ProxyConfig.InterceptionMode 0 }}", "true"),
        ("{{ .ProxyConfig.Concurrency.GetValue }}", "2"),
        ("{{ .ProxyConfig.HoldApplicationUntilProxyStarts.GetValue }}", "false"),
        ("[{{ .ProxyConfig.GetImage.GetImageType }}]", "[]"),
        ("{{ .ProxyConfig.ProxyMetadata.DNS_CAPTURE }} {{ .ProxyConfig.StatusPort }}", "true 15020"),
        ("{{ .MeshConfig.TrustDomain }} {{ .MeshConfig.DefaultConfig }}", "cluster.local <nil>"),
        ("{{ .MeshConfig.EnablePrometheusMerge.GetValue }}", "false"),
    ]);
    assert_unsupported(&["{{ .ProxyConfig }}", "{{ index .Spec.Containers 0 }}"]);
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

// ---- variables and control structures ----

#[test]
fn variable_scopes() {
    renders(&[
        ("{{$y := \"outer\"}}{{if true}}{{$y := \"inner\"}}{{end}}{{$y}}", "outer"),
        ("{{$y := \"outer\"}}{{if true}}{{$y = \"inner\"}}{{end}}{{$y}}", "inner"),
        ("{{ $first := true }}{{ range .Values.list }}{{ if not $first }},{{ end }}{{ . }}{{ $first = false }}{{ end }}", "a,b,c"),
        ("{{ range .Spec.Containers }}{{ $.Revision }}:{{ .Name }} {{ end }}", "default:hello default:istio-proxy "),
        ("{{ $c := list }}{{ range .Values.list }}{{ $c = append $c . }}{{ end }}{{ $c }}", "[a b c]"),
    ]);
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
    renders(&[
        (
            "{{ with .Values.global }}{{ .hub }}{{ end }}",
            "docker.io/istio",
        ),
        ("{{ with .Values.missing }}x{{ else }}none{{ end }}", "none"),
        (
            "{{ with $h := .Values.global.hub }}{{ $h }}{{ end }}",
            "docker.io/istio",
        ),
        (
            "{{ with .Values.missing }}a{{ else with .Values.yes }}{{ . }}{{ end }}",
            "true",
        ),
    ]);
}

#[test]
fn range_forms() {
    // Go's walkRange recovers a break in the else list but lets a continue reach the enclosing range.
    renders(&[
        ("{{ range .Values.list }}<{{ range $.Values.empty }}{{ else }}e{{ break }}x{{ end }}{{ . }}>{{ end }}", "<ea><eb><ec>"),
        ("{{ range .Values.list }}<{{ range $.Values.empty }}{{ else }}e{{ continue }}x{{ end }}{{ . }}>{{ end }}", "<e<e<e"),
        ("{{ range $i, $c := .Spec.Containers }}{{ if $i }},{{ end }}{{ $c.Name }}{{ end }}", "hello,istio-proxy"),
        ("{{ range $v := .Values.list }}{{ $v }}{{ end }}", "abc"),
        ("{{ range $k, $v := .ObjectMeta.Labels }}{{ $k }}={{ $v }};{{ end }}", "app=hello;version=v1;"),
        ("{{ range .Values.missing }}x{{ else }}empty{{ end }}", "empty"),
        ("{{ range .Values.empty }}x{{ else }}empty{{ end }}", "empty"),
        ("{{ range 3 }}{{ . }}{{ end }}", "012"),
        ("{{ range .Values.list }}{{ if eq . \"b\" }}{{ continue }}{{ end }}{{ . }}{{ end }}", "ac"),
        ("{{ range .Values.list }}{{ if eq . \"b\" }}{{ break }}{{ end }}{{ . }}{{ end }}", "a"),
    ]);
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
    renders(&[
        ("{{ eq .Values.global.proxy.statusPort 15020.0 }}", "true"),
        (
            "{{ eq .Values.missing \"x\" }} {{ ne .Values.missing \"x\" }}",
            "false true",
        ),
        ("{{ eq \"b\" \"a\" \"b\" }}", "true"),
    ]);
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
    renders(&[
        ("{{ or \"\" \"b\" }} {{ and 1 0 2 }} {{ and 1 2 }} {{ or 0 \"\" }}", "b 0 2 "),
        ("{{ not .Values.missing }} {{ not 1 }}", "true false"),
        ("{{ and .Values.missing .Foo }}", "<no value>"),
        ("{{ len .Values.list }} {{ len \"héllo\" }} {{ len .ObjectMeta.Labels }} {{ len .Spec.Volumes }}", "3 6 2 0"),
    ]);
    assert_eq!(
        exec_msg("{{ len .Values.nums.a }}"),
        "error calling len: len of type float64"
    );
    assert_eq!(run("{{ index .Values \"global\" \"hub\" }} {{ index .Values.list 1 }} {{ index \"abc\" 0 }}"), "docker.io/istio b 97");
}

/// A `nil` argument of a built-in whose parameter is a `reflect.Value` (`and`, `or`, `not`, `eq`, `ne`,
/// `len`, `index`, `slice`): Go's `evalArg` gives it the zero `reflect.Value` (`canBeNil` holds for
/// that type), which is "no value"; the expected texts are Go 1.26's.
#[test]
fn nil_as_a_reflect_value_argument() {
    assert_eq!(run("{{ or \"\" nil \"z\" }}"), "z");
    assert_eq!(
        run("{{ or \"\" nil }} {{ and 1 nil 2 }} {{ or nil }}"),
        "<no value> <no value> <no value>"
    );
    assert_eq!(run("{{ or \"\" nil | printf \"%v\" }}"), "<nil>");
    assert_eq!(
        run("{{ $x := or \"\" nil }}{{ printf \"%v\" $x }}"),
        "<nil>"
    );
    assert_eq!(
        run("{{ (or 0 nil) | printf \"%T\" }} {{ print (and nil) }}"),
        "<nil> <nil>"
    );
    assert_eq!(run("{{ if or \"\" nil }}y{{ else }}n{{ end }}"), "n");
    assert_eq!(run("{{ range or 0 nil }}x{{ else }}e{{ end }}"), "e");
    assert_eq!(run("{{ with or 0 nil }}x{{ else }}e{{ end }}"), "e");
    assert_eq!(
        run("{{ not nil }} {{ eq nil nil }} {{ eq 1 nil }} {{ ne nil 1 }}"),
        "true true false true"
    );
    assert_eq!(run("{{ eq .Values.missing .Values.nope }} {{ eq nil .Values.missing 1 }} {{ ne .Values.missing nil }}"), "true true false");
    assert!(exec_msg("{{ lt nil 1 }}").contains("invalid type for comparison"));
    assert!(exec_msg("{{ index nil 1 }}").contains("index of untyped nil"));
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
fn default_quote_and_friends() {
    renders(&[
        (
            "{{ .ProxyGID | default \"1337\" }} {{ .ProxyUID | default \"1\" }}",
            "1337 1337",
        ),
        (
            "{{ .Values.global.caName | default \"x\" }} {{ .Values.missing | default 5 }}",
            "x 5",
        ),
    ]);
    assert_unsupported(&["{{ .ObjectMeta | default \"x\" }}"]);
    renders(&[
        ("{{ quote nil }}|{{ quote \"a\\\"b\" 15020 .Values.nums.e true }}", "|\"a\\\"b\" \"15020\" \"1e+06\" \"true\""),
        ("{{ squote \"a\" 1 }}", "'a' '1'"),
        ("{{ valueOrDefault .Values.global.caName \"d\" }} {{ valueOrDefault 0 \"d\" }} {{ valueOrDefault false \"d\" }}", "d 0 false"),
        ("{{ empty .Values.list }} {{ empty .Spec }} {{ coalesce \"\" 0 \"c\" }} {{ ternary \"y\" \"n\" true }}", "false false c y"),
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

#[test]
fn from_json() {
    renders(&[
        ("{{ fromJSON \"not json\" }}", "{}"),
        ("{{ (fromJSON `{\"a\":[1,2],\"b\":null}`).a }}", "[1 2]"),
        (
            "{{ range $k, $v := fromJSON `{\"b\":1,\"a\":2}` }}{{ $k }}{{ $v }}{{ end }}",
            "a2b1",
        ),
    ]);
    assert_eq!(
        exec_msg("{{ range fromJSON \"bad\" }}{{ end }}"),
        "range can't iterate over {}"
    );
}

#[test]
fn indentation() {
    renders(&[
        ("{{ indent 2 \"a\\nb\\n\" }}", "a\n  b\n  "),
        ("{{ nindent 2 \"a\\nb\" }}", "\n  a\n  b"),
        (
            "x:{{ toYaml .ObjectMeta.Labels | nindent 2 }}",
            "x:\n  app: hello\n  version: v1\n  ",
        ),
    ]);
    assert_eq!(
        exec_msg("{{ indent .Values.nums.b \"a\" }}"),
        "wrong type for value; expected int; got float64"
    );
}

#[test]
fn istio_helpers() {
    renders(&[
        ("{{ range .Spec.Containers }}{{ range .Ports }}{{ structToJSON . }}{{ end }}{{ end }}|{{ structToJSON .Values.missing }}", "{\"name\":\"http\",\"containerPort\":80}|{}"),
        ("{{ isset .ObjectMeta.Annotations \"empty\" }} {{ isset .ObjectMeta.Annotations \"x\" }} {{ isset .Values.missing \"x\" }}", "true false false"),
    ]);
    assert_eq!(
        exec_msg("{{ isset .Values.global \"hub\" }}"),
        "wrong type for value; expected map[string]string; got map[string]interface {}"
    );
    renders(&[
        ("{{ annotation .ObjectMeta `sidecar.istio.io/proxyCPU` \"1\" }}", "200m"),
        ("[{{ annotation .ObjectMeta \"empty\" \"d\" }}]", "[]"),
        ("{{ annotation .ObjectMeta \"x\" .Values.missing }} {{ annotation .ObjectMeta \"x\" .Values.nums.e }} {{ annotation .ObjectMeta \"x\" .ProxyConfig.InterceptionMode }}", "<nil> 1e+06 REDIRECT"),
        ("{{ toLower \"AbC\" }} {{ contains \"/\" \"a/b\" }} {{ \"a/b\" | contains \"/\" }} {{ contains \"a/b\" \"/\" }}", "abc true true false"),
        ("{{ omit .ObjectMeta.Labels \"app\" }} {{ strdict \"a\" \"1\" \"b\" }}", "map[version:v1] map[a:1 b:]"),
        ("{{ env \"GOTEMPLATE_TEST_UNSET_VARIABLE\" \"dflt\" }}", "dflt"),
    ]);
}

#[test]
fn sprig_lists_and_strings() {
    assert_eq!(run("{{ join \",\" .Values.list }}|{{ .Values.empty | join \",\" }}|{{ join \",\" \"x\" }}|{{ join \",\" (list 1 nil 2.5) }}"), "a,b,c||x|1,2.5");
    assert_eq!(
        exec_msg("{{ append .Values.missing 1 }}"),
        "error calling append: Cannot push on type <nil>"
    );
    renders(&[
        ("{{ $l := list 1 }}{{ $m := append $l 2 }}{{ $l }} {{ $m }}", "[1] [1 2]"),
        ("{{ get (dict \"a\" 1) \"a\" }}|{{ get (dict) \"a\" }}|{{ hasKey .Values \"global\" }}", "1||true"),
        ("{{ trimSuffix \".svc\" \"a.svc\" }} {{ trimPrefix \"a\" \"ab\" }} {{ hasPrefix \"a\" \"ab\" }} {{ hasSuffix \"a\" \"ab\" }}", "a b true false"),
        ("{{ replace \"a\" \"b\" \"aXa\" }} {{ upper \"a\" }} {{ trim \"  x \" }} {{ trimAll \"-\" \"--x-\" }} {{ repeat 3 \"ab\" }} {{ trunc 2 \"abc\" }}", "bXb A x x ababab ab"),
        ("{{ .Values.global.proxy.statusPort | int }} {{ int \"0x1F\" }} {{ int \"012\" }} {{ int \"1.00\" }} {{ int \"x\" }} {{ toString 1.5 }}", "15020 31 10 1 0 1.5"),
        ("{{ 1000000.0 | int }}", "1000000"),
        ("{{ split \",\" \"a,b,,c\" }} {{ (split \"/\" \"ns/name\")._1 }} {{ split \"\" \"ab\" }}", "map[_0:a _1:b _2: _3:c] name map[_0:a _1:b]"),
        ("{{ int \"1.\" }} {{ int \"-012\" }} {{ int \"08\" }} {{ int \"1.50\" }} {{ int true }}", "0 -10 0 0 1"),
        ("[{{ toJson (float64 \"NaN\") }}][{{ toYaml (list (float64 \"+Inf\")) }}][{{ structToJSON (float64 \"NaN\") }}]", "[][][{}]"),
    ]);
    match exec_err("{{ fail \"no\" }}") {
        ExecError::Fail { message, .. } => assert_eq!(message, "no"),
        other => panic!("{other}"),
    }
}

#[test]
fn wrong_arguments_are_errors() {
    for (input, want) in [
        (
            "{{ toLower .Values.missing }}",
            "invalid value; expected string",
        ),
        ("{{ toLower 1 }}", "expected string; found a number"),
        (
            "{{ indent 2 }}",
            "wrong number of args for indent: want 2 got 1",
        ),
    ] {
        assert_eq!(exec_msg(input), want, "{input:?}");
    }
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
    for (input, want) in [
        ("{{ $x }}", "undefined variable \"$x\""),
        ("{{ $x = 1 }}", "undefined variable \"$x\""),
        (
            "{{ if $x := 1 }}{{ end }}{{ $x }}",
            "undefined variable \"$x\"",
        ),
        ("{{ break }}", "{{break}} outside {{range}}"),
        ("{{ end }}", "unexpected {{end}}"),
        ("{{ if 1 }}", "unexpected EOF in if"),
        ("{{ nil }}", "nil is not a command"),
        ("{{ 1i }}", "complex number \"1i\" is not supported"),
        ("{{ .X", "unclosed action"),
        ("{{ \"a }}", "unterminated quoted string"),
        (
            "{{ . | \"x\" }}",
            "non executable command in pipeline stage 2",
        ),
        ("{{ \"x\" 1 }}", "can't give argument to non-function"),
        ("{{ $a, $b := 1 }}", "too many declarations in command"),
        ("{{ }}", "missing value for command"),
    ] {
        assert_eq!(msg(input), want, "{input:?}");
    }
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
            max_work: 32 << 20
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
            Limits {
                max_work: 1 << 30,
                ..Limits::default()
            }
        )),
        "output bytes"
    );
    // Go's `parse.newNumber` refuses an integer literal beyond 64 bits (at parse time), not a float.
    for lit in [
        "99999999999999999999999",
        "-99999999999999999999999",
        "18446744073709551616",
    ] {
        let err = match Template::parse("t", &format!("{{{{ {lit} }}}}")) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("{lit}: parsed"),
        };
        assert!(err.contains("integer overflow"), "{lit}: {err}");
    }
    assert_eq!(
        run("{{ 18446744073709551615.0 }}"),
        "1.8446744073709552e+19"
    );
    // Go's `parsenum` stops at a digit met above 1e6 and consumes the rest of the format.
    renders(&[
        (
            "{{ printf \"%999999999d|%s\" 1 2 }}",
            "%!(NOVERB)%!(EXTRA int=1, int=2)",
        ),
        (
            "{{ printf \"%.99999999f\" 1.0 }}",
            "%!(NOVERB)%!(EXTRA float64=1)",
        ),
    ]);
    // Seven digits are still a width (2000000 exceeds 1e6 only after the last digit): padded, as Go does.
    assert_eq!(run("{{ printf \"%2000000d\" 1 }}").len(), 2_000_000);
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
    assert_eq!(what(&e), "work");
    let few = Limits {
        max_work: 500 * WORK_PER_STEP,
        ..Limits::default()
    };
    assert_eq!(
        what(&limited("{{ range 1000 }}{{ . }}{{ end }}", &d, few)),
        "work"
    );
}

// ---- the work budget counts bytes ----

/// A root whose `.Values.big` and `.Values.big2` are 4 MiB strings (the size a pod's annotation can reach).
fn big_strings() -> Value {
    let big = "a".repeat((4 << 20) - 64);
    let mut big2 = big.clone();
    big2.push('b');
    big2.remove(0);
    json!({"Values": {"big": big, "big2": big2, "same": "a".repeat((4 << 20) - 64)}})
}

#[test]
fn byte_heavy_primitives_are_charged_per_byte_and_refused() {
    let d = big_strings();
    // Each of these ran 30–60 s and succeeded when only steps were counted; the budget stops them after
    // at most DEFAULT_MAX_WORK bytes (8 calls of 4 MiB).
    for text in [
        "{{ range 100000 }}{{ if contains $.Values.big2 $.Values.big }}{{ end }}{{ end }}",
        "{{ range 100000 }}{{ if eq $.Values.big $.Values.same }}{{ end }}{{ end }}",
        "{{ range 100000 }}{{ if hasPrefix $.Values.same $.Values.big }}{{ end }}{{ end }}",
        "{{ range 100000 }}{{ if lt $.Values.big $.Values.same }}{{ end }}{{ end }}",
        "{{ range 100000 }}{{ $x := replace \"x\" \"y\" $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := toJson $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := printf \"%s\" $.Values.big | len }}{{ end }}",
        "{{ range 100000 }}{{ $x := trimAll \"b\" $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := split \"b\" $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := int $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := upper $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := quote $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := indent 0 $.Values.big }}{{ end }}",
        "{{ range 100000 }}{{ $x := toYaml $.Values.big }}{{ end }}",
    ] {
        let t = Template::parse("hog", text).expect("parse");
        let (res, cost) = t.execute_metered(&d, &Limits::default());
        let e = res.expect_err(text);
        assert_eq!(
            e.to_string(),
            format!("template \"hog\": line 1: work limit {DEFAULT_MAX_WORK} exceeded"),
            "{text}"
        );
        // Refused within one primitive's worth of work past the budget.
        assert!(
            cost.work <= DEFAULT_MAX_WORK + (16 << 20),
            "{text}: {cost:?}"
        );
    }
}

#[test]
fn field_access_and_literals_copy_nothing() {
    // 100 000 reads of a 4 MiB field are 100 000 steps, not 400 GB of copies.
    let d = big_strings();
    let t = Template::parse(
        "f",
        "{{ range 100000 }}{{ $x := $.Values.big }}{{ $y := \"lit\" }}{{ end }}",
    )
    .expect("parse");
    let (res, cost) = t.execute_metered(&d, &Limits::default());
    res.expect("runs");
    assert!(cost.meter < 1 << 20, "{cost:?}");
    assert!(cost.work < 100 * 100_000 * WORK_PER_STEP, "{cost:?}");
}

/// The cost of rendering the Istio custom template's shape, plus an `index` back into the list, over a
/// pod of `n` containers.
fn containers_cost(n: usize) -> Cost {
    let containers: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("c{i}"), "image": "nginx", "env": [{"name": "A", "value": "b"}]}))
        .collect();
    let d = json!({"Spec": {"containers": containers}, "ObjectMeta": {"name": "p"}});
    let text = "spec:\n  containers:\n{{- range $i, $c := .Spec.Containers }}\n  - name: {{ $c.Name }}\n    image: {{ (index $.Spec.Containers $i).Image }}\n    env: {{ toJson $c.Env }}\n{{- end }}\n";
    let t = Template::parse("custom", text).expect("parse");
    let (res, cost) = t.execute_metered(&d, &Limits::default());
    let out = res.expect("renders");
    assert_eq!(out.matches("  - name: c").count(), n);
    cost
}

#[test]
fn ranging_over_containers_is_linear() {
    // `index` into the data list used to materialise the whole list: quadratic in the containers.
    let (small, large) = (containers_cost(500), containers_cost(2000));
    for (a, b) in [(small.work, large.work), (small.meter, large.meter)] {
        assert!(b <= 5 * a, "cost at 4n is {b}, at n {a}");
    }
}

#[test]
fn variable_lookups_are_charged_by_the_variables_scanned() {
    // Thousands of declarations then lookups of the first: each lookup scans them all.
    let decls = "{{ $v := 1 }}".repeat(5000);
    let text =
        format!("{{{{ $first := 0 }}}}{decls}{{{{ range 100000 }}}}{{{{ $first }}}}{{{{ end }}}}");
    assert_eq!(what(&limited(&text, &json!({}), Limits::default())), "work");
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

/// Texts from `leaves` nested (`depth` levels, about `size` actions) in concatenation, `range` over a list
/// and over a map, `with`, and one more action of the caller's (`open`, the text, `close`).
fn nested_text(
    leaves: &'static [&'static str],
    depth: u32,
    size: u32,
    (open, close): (&'static str, &'static str),
) -> impl Strategy<Value = String> {
    let leaf = prop::sample::select(leaves).prop_map(str::to_string);
    leaf.prop_recursive(depth, size, 4, move |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| a + &b),
            inner
                .clone()
                .prop_map(|a| format!("{{{{ range $.Values.l }}}}{a}{{{{ end }}}}")),
            inner
                .clone()
                .prop_map(|a| format!("{{{{ range $k, $v := $.Values.m }}}}{a}{{{{ end }}}}")),
            inner.clone().prop_map(move |a| format!("{open}{a}{close}")),
            inner.prop_map(|a| format!("{{{{ with $.Values.m }}}}{a}{{{{ end }}}}")),
        ]
    })
}

const STRUCTURED_LEAVES: &[&str] = &[
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
];

/// Texts built from well-formed actions, so that most of them parse and run.
fn structured_text() -> impl Strategy<Value = String> {
    nested_text(
        STRUCTURED_LEAVES,
        4,
        32,
        ("{{ if . }}", "{{ else }}e{{ end }}"),
    )
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
        max_work: 50_000 * WORK_PER_STEP,
    }
}

const COSTLY_LEAVES: &[&str] = &[
    "{{ contains $.Values.s $.Values.t }}",
    "{{ eq $.Values.s $.Values.t }}",
    "{{ ne $.Values.s $.Values.t }}",
    "{{ lt $.Values.s $.Values.t }}",
    "{{ hasPrefix $.Values.s $.Values.t }}",
    "{{ hasSuffix $.Values.s $.Values.t }}",
    "{{ replace \"a\" \"bb\" $.Values.s | len }}",
    "{{ trimAll $.Values.t $.Values.s | len }}",
    "{{ trimPrefix $.Values.t $.Values.s | len }}",
    "{{ trim $.Values.s | len }}",
    "{{ upper $.Values.s | len }}",
    "{{ split \"a\" $.Values.s | len }}",
    "{{ quote $.Values.s | len }}",
    "{{ squote $.Values.s | len }}",
    "{{ toJson $.Values | len }}",
    "{{ toYaml $.Values | len }}",
    "{{ toJSON $.Values.m | len }}",
    "{{ $.Values.l }}",
    "{{ printf \"%v %q %x %5.3s\" $.Values.s $.Values.t $.Values.s $.Values.t | len }}",
    "{{ print $.Values.m $.Values.l | len }}",
    "{{ indent 3 $.Values.s | len }}",
    "{{ nindent 2 $.Values.s | len }}",
    "{{ repeat 3 $.Values.t | len }}",
    "{{ int $.Values.s }}",
    "{{ float64 $.Values.t }}",
    "{{ index $.Values.l 0 }}",
    "{{ index $.Values.m \"a\" }}",
    "{{ get $.Values.m $.Values.t }}",
    "{{ hasKey $.Values.m $.Values.s }}",
    "{{ $x := list $.Values.s $.Values.l }}{{ len $x }}",
    "{{ $x := dict $.Values.s $.Values.t }}{{ len $x }}",
    "{{ $x := append $.Values.l $.Values.s }}{{ len $x }}",
    "{{ join $.Values.t $.Values.l | len }}",
    "{{ fromJSON $.Values.j | toJson | len }}",
    "{{ toString $.Values.m | len }}",
    "{{ default $.Values.s .missing | len }}",
    "{{ $v := $.Values.s }}{{ $v = $.Values.t }}{{ len $v }}",
    "{{ strdict \"a\" $.Values.s | toJSON | len }}",
    "{{ omit (strdict \"a\" $.Values.s \"b\" \"c\") \"a\" | len }}",
    "{{ $.Values.s }}",
    "text\n",
];

/// Texts from every construct and function family the evaluator accepts, over strings that may be long,
/// for the cost property below.
fn costly_text() -> impl Strategy<Value = String> {
    nested_text(COSTLY_LEAVES, 3, 24, ("{{ range 50 }}", "{{ end }}"))
}

fn costly_root() -> impl Strategy<Value = Value> {
    (
        (0usize..20_000, "[a-c\\- \n]{1,3}"),
        "[a-c]{0,4}",
        prop::collection::btree_map("[a-c]{1,2}", "[a-c]{0,64}", 0..6),
        prop::collection::vec("[a-c]{0,300}", 1..20),
    )
        .prop_map(|((n, unit), t, m, l)| {
            let s = unit.repeat(n / unit.len().max(1));
            let j = serde_json::to_string(&l).unwrap_or_default();
            json!({"Values": {"s": s, "t": t, "m": m, "l": l, "j": j}})
        })
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
                    || (what == "work" && limit == limits.max_work)
            ),
            Err(_) => {}
        }
    }

    /// The budget bounds the work done: the bytes the primitives measure as read and written never exceed
    /// the work charged by more than one primitive's worth (bounded by the output bound), whether the
    /// evaluation succeeds or stops at a bound.
    #[test]
    fn the_work_done_stays_within_the_budget(text in costly_text(), root in costly_root()) {
        let t = Template::parse("c", &text).expect("costly texts parse");
        let limits = Limits { max_work: 2 << 20, max_output_bytes: 256 << 10, ..Limits::default() };
        let (res, cost) = t.execute_metered(&root, &limits);
        match &res {
            Ok(out) => prop_assert!(out.len() <= limits.max_output_bytes),
            Err(ExecError::Limit { .. } | ExecError::Eval { .. } | ExecError::Unsupported { .. }) => {}
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
        prop_assert!(cost.meter <= cost.work + 4 * limits.max_output_bytes, "{cost:?} for {text}");
        prop_assert!(cost.work <= limits.max_work + 4 * limits.max_output_bytes, "{cost:?} for {text}");
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
