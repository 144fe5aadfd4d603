//! Go's built-in functions: comparisons, `and`, `or`, `not`, `len`, `index`.

use super::support::*;

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
