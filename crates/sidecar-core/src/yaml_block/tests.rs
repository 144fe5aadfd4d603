use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::yaml::parse_last_key_wins_full;

/// Asserts that the block reader reads `text` (Some) and as the full parser does.
fn reads(text: &str) -> Value {
    let fast = parse(text).unwrap_or_else(|| panic!("outside the subset: {text:?}"));
    let full = parse_last_key_wins_full(text).unwrap_or_else(|e| panic!("{e}: {text:?}"));
    assert_eq!(fast, full, "{text:?}");
    fast
}

#[test]
fn the_shapes_templates_print() {
    let text = r#"


metadata:
  labels:
    security.istio.io/tlsMode: "istio"
    app: hello
  annotations: {
    istio.io/rev: "default",
    kubectl.kubernetes.io/default-container: 'app',
    empty:,
  }
spec:
  initContainers:
  
  - name: istio-init
    image: "x/proxyv2:1"
    args:
    - istio-iptables
    - "-p"
    -  "1337" 
    - --log_output_level=default:info
    resources:
  
      limits:
        cpu: 2000m
        memory: 1024Mi
    securityContext:
      runAsUser: 0
      privileged: false
      capabilities:
        drop: [ALL, "NET_RAW"]
  - name: istio-proxy
    env:
    - name: PROXY_CONFIG
      value: |
        {"discoveryAddress":"istiod:15012"}
    - name: ISTIO_META_POD_PORTS
      value: |-
        [
            {"containerPort":80}
        ]
    - name: EMPTY
      value: ""
    lifecycle: {}
    volumeMounts: []
    # a comment line
  volumes:
  - emptyDir:
    name: workload-socket
  - name: "0"
    name: v
"#;
    let v = reads(text);
    assert_eq!(v["spec"]["volumes"][1], json!({"name": "v"}));
    assert_eq!(v["metadata"]["annotations"]["empty"], Value::Null);
    assert_eq!(v["spec"]["initContainers"][0]["args"][2], json!("1337"));
}

#[test]
fn doubtful_readings_are_left_to_the_full_parser() {
    for text in [
        "a: yes\n",
        "a: No\n",
        "a: 0755\n",
        "a: 1e3\n",
        "a: .5\n",
        "a: 1_000\n",
        "a: 0x1f\n",
        "a: *ref\n",
        "a: &x 1\n",
        "a: !!str 1\n",
        "a: >\n  folded\n",
        "a: |2\n   x\n",
        "a: b\n  continued\n",
        "a: \"two\n  lines\"\n",
        "? complex\n: key\n",
        "---\na: 1\n",
        "a: 1\n---\nb: 2\n",
        "a:\tb\n",
        "a: b # comment\n",
        "on: 1\n",
        "\"a\\q\": 1\n",
        "just a scalar\n",
        "a: {b: {c: d}}\n",
        "a: [b, [c]]\n",
    ] {
        assert!(parse(text).is_none(), "{text:?} read as {:?}", parse(text));
    }
}

#[test]
fn an_empty_document_is_null() {
    assert_eq!(reads(""), Value::Null);
    assert_eq!(reads("\n\n  \n# only a comment\n"), Value::Null);
}

/// Scalars of every kind: mostly those the reader takes, sometimes one it leaves to the full parser.
fn scalar() -> impl Strategy<Value = String> {
    let taken = prop_oneof![
        Just("true".to_string()),
        Just("false".to_string()),
        Just("null".to_string()),
        Just("~".to_string()),
        Just("2000m".to_string()),
        Just("15090,15021".to_string()),
        Just("--domain".to_string()),
        Just("$(POD_NAMESPACE).svc".to_string()),
        Just("/var/run".to_string()),
        Just("-x".to_string()),
        Just("''".to_string()),
        Just("\"\"".to_string()),
        Just("{}".to_string()),
        Just("[]".to_string()),
        Just("[a, \"b\", 1]".to_string()),
        Just("a#b".to_string()),
        (-1000i64..1000).prop_map(|n| n.to_string()),
        "[a-zA-Z][a-zA-Z0-9._/-]{0,8}",
        "[0-9]{1,3}[a-zA-Z]{1,2}",
        "\"([a-z ]|\\\\n|\\\\\"|\\\\x4[0-9]|\\\\u00e9|')*\"",
        "'([a-z \"]|'')*'",
    ];
    let left = prop_oneof![
        Just("yes".to_string()),
        Just("Off".to_string()),
        Just("0755".to_string()),
        Just("1e3".to_string()),
        Just("-".to_string()),
        Just("a #b".to_string()),
        Just("x: y".to_string()),
    ];
    prop_oneof![30 => taken, 1 => left]
}

/// A key: plain or quoted.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        40 => "[a-z][a-z0-9./-]{0,6}",
        4 => Just("\"q key\"".to_string()),
        4 => Just("'s'".to_string()),
        1 => Just("yes".to_string()),
        1 => Just("1".to_string()),
    ]
}

#[derive(Debug, Clone)]
enum Node {
    Scalar(String),
    Literal(String, Vec<String>),
    Flow(Vec<(String, String)>, bool),
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        4 => scalar().prop_map(Node::Scalar),
        1 => (
            prop_oneof![Just("|"), Just("|-"), Just("|+")],
            prop::collection::vec(prop_oneof!["[a-z {}:#\"]{0,10}", Just(String::new()), Just("  x".to_string())], 1..4)
        )
            .prop_map(|(h, lines)| Node::Literal(h.to_string(), lines)),
        1 => (prop::collection::vec((key(), scalar()), 0..3), any::<bool>()).prop_map(|(e, c)| Node::Flow(e, c)),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec((key(), inner.clone()), 1..4).prop_map(Node::Map),
            prop::collection::vec(inner, 1..4).prop_map(Node::Seq),
        ]
    })
}

/// Writes `node` as the value after `key:` (or `-`) at `indent`, `step` spaces deeper for children;
/// `compact` puts a sequence under a key at the key's own indentation.
fn write(out: &mut String, n: &Node, indent: usize, step: usize, compact: bool, blank: bool) {
    let pad = " ".repeat(indent);
    match n {
        Node::Scalar(s) => {
            out.push(' ');
            out.push_str(s);
            out.push('\n');
        }
        Node::Literal(h, lines) => {
            out.push(' ');
            out.push_str(h);
            out.push('\n');
            for l in lines {
                if !l.is_empty() {
                    out.push_str(&" ".repeat(indent + step));
                }
                out.push_str(l);
                out.push('\n');
            }
        }
        Node::Flow(entries, multiline) => {
            out.push_str(" {");
            for (k, v) in entries {
                if *multiline {
                    out.push('\n');
                    out.push_str(&" ".repeat(indent + step));
                }
                out.push_str(&format!("{k}: {v},"));
            }
            if *multiline {
                out.push('\n');
                out.push_str(&pad);
            }
            out.push_str("}\n");
        }
        Node::Map(entries) => {
            out.push('\n');
            for (k, v) in entries {
                if blank {
                    out.push_str("  \n");
                }
                out.push_str(&" ".repeat(indent + step));
                out.push_str(k);
                out.push(':');
                write(out, v, indent + step, step, compact, blank);
            }
        }
        Node::Seq(items) => {
            out.push('\n');
            let at = if compact { indent } else { indent + step };
            for item in items {
                out.push_str(&" ".repeat(at));
                out.push('-');
                write(out, item, at, step.max(2), compact, blank);
            }
        }
    }
}

/// A generated document's text.
fn document() -> impl Strategy<Value = String> {
    (
        prop::collection::vec((key(), node()), 1..5),
        1usize..4,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(entries, step, compact, blank)| {
            let mut text = String::new();
            for (k, v) in &entries {
                text.push_str(k);
                text.push(':');
                write(&mut text, v, 0, step, compact, blank);
            }
            text
        })
}

/// The generated documents exercise the reader: it reads a good part of them (and agrees on each), so
/// the property below is not vacuous.
#[test]
fn the_reader_takes_a_good_part_of_the_generated_documents() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = document();
    let (mut read, mut total) = (0, 0);
    for _ in 0..1000 {
        let text = strategy.new_tree(&mut runner).unwrap().current();
        total += 1;
        if let Some(fast) = parse(&text) {
            read += 1;
            assert_eq!(fast, parse_last_key_wins_full(&text).unwrap(), "{text}");
        }
    }
    assert!(
        read * 4 >= total,
        "the reader took {read} of {total} documents"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    /// Wherever the block reader answers, the full parser answers the same; a document the full
    /// parser refuses is never read.
    #[test]
    fn the_reader_agrees_with_the_full_parser(
        entries in prop::collection::vec((key(), node()), 1..5),
        step in 1usize..4,
        compact in any::<bool>(),
        blank in any::<bool>(),
    ) {
        let mut text = String::new();
        for (k, v) in &entries {
            text.push_str(k);
            text.push(':');
            write(&mut text, v, 0, step, compact, blank);
        }
        if let Some(fast) = parse(&text) {
            let full = parse_last_key_wins_full(&text);
            prop_assert!(full.is_ok(), "read {:?}, which the full parser refuses: {:?}\n{}", fast, full, text);
            prop_assert_eq!(fast, full.unwrap(), "{}", text);
        }
    }
}
