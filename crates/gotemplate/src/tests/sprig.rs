//! sprig's functions (with Istio's `valueOrDefault` beside `default`).

use super::super::error::ExecError;
use super::support::*;

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
