//! The bounds of [`Limits`]: iterations, output size, depth, and the work budget, which counts bytes.

use serde_json::{json, Value};

use super::super::error::{ExecError, ParseError};
use super::super::exec::Cost;
use super::super::limits::{Limits, DEFAULT_MAX_WORK, MAX_PARSE_DEPTH, WORK_PER_STEP};
use super::super::template::Template;
use super::support::*;

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
