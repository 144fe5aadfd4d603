//! Istio's functions (with sprig's `nindent` beside Istio's `indent`).

use super::support::*;

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
