//! Lexical rules, the parser's refusals (actions and functions outside the subset, syntax errors) and
//! static templates. Expected outputs and messages are Go's.

use serde_json::json;

use super::super::error::{ExecError, ParseError};
use super::super::limits::Limits;
use super::super::template::Template;
use super::support::*;

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

#[test]
fn define_and_template_run_the_named_body_in_a_scope_of_its_own() {
    // Go prints "[hello] x=hello": the body sees the pipeline as dot and $, not the caller's variables.
    let text = "{{- define \"n\" }}[{{ .Name }}]{{ end -}}\n{{ $x := 1 }}{{ template \"n\" index .Spec.Containers 0 }} x={{ (index .Spec.Containers 0).Name }}";
    assert_eq!(run(text), "[hello] x=hello");
    // Without a pipeline dot is Go's invalid value; a later non-empty definition replaces an earlier one.
    assert_eq!(
        run("{{ define \"a\" }}1{{ end }}{{ define \"a\" }}<{{ . }}>{{ end }}{{ template \"a\" }}"),
        "<<no value>>"
    );
    // `block` defines and calls at once.
    assert_eq!(
        run("{{ block \"b\" .Revision }}({{ . }}){{ end }}"),
        "(default)"
    );
    let msg = exec_msg("{{ template \"missing\" . }}");
    assert!(msg.contains("template \"missing\" not defined"), "{msg}");
}

#[test]
fn a_template_that_calls_itself_stops_at_the_depth_bound() {
    let e = exec_err("{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" . }}");
    assert!(matches!(e, ExecError::Limit { what: "depth", .. }), "{e}");
}

#[test]
fn refused_actions_name_template_line_and_action() {
    // Go accepts `define` only at the top level.
    let e = Template::parse(
        "spire",
        "a\nb\n{{ if . }}{{ define \"x\" }}{{ end }}{{ end }}",
    )
    .expect_err("refused");
    assert_eq!(
        e.to_string(),
        "template \"spire\": line 3: unsupported action \"define\""
    );
    match parse_err("{{ template . }}") {
        ParseError::Syntax { message, .. } => {
            assert!(message.contains("template clause"), "{message}")
        }
        other => panic!("{other}"),
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
        "formatDuration",
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
