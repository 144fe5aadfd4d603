//! Properties over generated texts and data: no panic, every bound held, the work done within the
//! budget.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::super::error::ExecError;
use super::super::limits::{Limits, WORK_PER_STEP};
use super::super::template::Template;
use super::support::*;

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
