//! Variables and control structures (`if`, `with`, `range`), and Istio's custom-template test case.

use serde_json::json;

use super::super::limits::Limits;
use super::super::template::Template;
use super::support::*;

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
