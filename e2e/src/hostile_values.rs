//! Hostile chart values: every value a chart's templates read, set to text that adds a key to
//! the rendered YAML wherever a template writes it unquoted, rendered with `helm template` with Helm's
//! schema check and without it (`--skip-schema-validation`). A chart holds when each rendering either
//! fails with a message naming the value, or parses into objects where the text is only ever a scalar:
//! no mapping anywhere (nor in a ConfigMap's embedded documents) has the key the text tries to add.
//!
//! The values come from the chart itself, so a value added later is covered without editing a test:
//! every leaf, list and map of `values.yaml`, and every `.Values.<path>` the templates name (also through
//! a `$x := .Values.<path>` variable) that `values.yaml` leaves out, such as `pdb.maxUnavailable`.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Map, Value};

use crate::helm::Helm;

/// The key the hostile text tries to add.
pub const INJECTED: &str = "zzinjected";

/// The text that adds [`INJECTED`] where a template writes it unquoted: after a comma (a flow context
/// such as `[{{ . }}]`), on lines of every indentation a chart uses (a block context, plain or inside a
/// block scalar), and after a document separator. Written unquoted anywhere, it either adds the key or
/// breaks the YAML, and both are findings: no site can take it as a scalar unless it is quoted.
pub fn payload() -> String {
    let mut text = format!("1.0, {INJECTED}: true");
    for indent in (0..=16).step_by(2) {
        text.push_str(&format!("\n{}{INJECTED}: true", " ".repeat(indent)));
    }
    text.push_str(&format!("\n---\n{INJECTED}: true"));
    text
}

/// One step of a value's path: a key or a list index.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    Key(String),
    Index(usize),
}

/// A value's path, shown as Helm's `--set` spells it (`a.b[0].c`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ValuePath(pub Vec<Step>);

impl ValuePath {
    fn child(&self, step: Step) -> ValuePath {
        let mut steps = self.0.clone();
        steps.push(step);
        ValuePath(steps)
    }

    /// `a.b[0].c`.
    pub fn dotted(&self) -> String {
        let mut out = String::new();
        for s in &self.0 {
            match s {
                Step::Key(k) if out.is_empty() => out.push_str(k),
                Step::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Step::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// `/a/b/0/c`, as JSON Schema errors name a value.
    pub fn pointer(&self) -> String {
        self.0
            .iter()
            .map(|s| match s {
                Step::Key(k) => format!("/{}", k.replace('~', "~0").replace('/', "~1")),
                Step::Index(i) => format!("/{i}"),
            })
            .collect()
    }

    /// The path without its list indexes at the end (`revisionTags[0]` → `revisionTags`): a template
    /// names a list when one of its items is refused.
    fn list(&self) -> ValuePath {
        let mut steps = self.0.clone();
        while matches!(steps.last(), Some(Step::Index(_))) {
            steps.pop();
        }
        ValuePath(steps)
    }
}

/// One hostile rendering: the chart's values with one value made hostile.
#[derive(Debug, Clone)]
pub struct Case {
    /// What was changed: `tag`, `env{new key}`, `revisionTags[]`.
    pub what: String,
    /// The value's path; a refusal must name it (or its list).
    pub path: ValuePath,
    /// The whole values document rendered with (`helm template -f`).
    pub values: Value,
}

/// The hostile cases of `defaults` (the chart's values.yaml) and of the template paths `referenced`,
/// for `payload`: each scalar set to it, each list replaced by `[payload]` (and its items' values
/// made hostile in turn), each map given the key `payload` with the value `payload`, and each
/// referenced path values.yaml lacks set to it.
pub fn cases(defaults: &Value, referenced: &BTreeSet<ValuePath>, payload: &str) -> Vec<Case> {
    let mut out = Vec::new();
    let mut paths = BTreeSet::new();
    walk(defaults, &ValuePath(Vec::new()), &mut paths);
    for (path, kind) in &paths {
        let mut values = defaults.clone();
        let slot = slot(&mut values, path);
        let what = match kind {
            Kind::Scalar => {
                *slot = Value::String(payload.to_string());
                path.dotted()
            }
            Kind::List => {
                *slot = Value::Array(vec![Value::String(payload.to_string())]);
                format!("{}[]", path.dotted())
            }
            Kind::Map => {
                if let Value::Object(m) = slot {
                    m.insert(payload.to_string(), Value::String(payload.to_string()));
                }
                format!("{}{{new key}}", path.dotted())
            }
        };
        out.push(Case {
            what,
            path: path.clone(),
            values,
        });
    }
    for path in referenced {
        if paths.iter().any(|(p, _)| p == path) || !lacks(defaults, path) {
            continue;
        }
        let mut values = defaults.clone();
        *slot(&mut values, path) = Value::String(payload.to_string());
        out.push(Case {
            what: format!("{} (not in values.yaml)", path.dotted()),
            path: path.clone(),
            values,
        });
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Scalar,
    List,
    Map,
}

fn walk(v: &Value, path: &ValuePath, out: &mut BTreeSet<(ValuePath, Kind)>) {
    match v {
        Value::Object(m) => {
            if !path.0.is_empty() {
                out.insert((path.clone(), Kind::Map));
            }
            for (k, child) in m {
                walk(child, &path.child(Step::Key(k.clone())), out);
            }
        }
        Value::Array(items) => {
            out.insert((path.clone(), Kind::List));
            for (i, child) in items.iter().enumerate() {
                walk(child, &path.child(Step::Index(i)), out);
            }
        }
        _ => {
            out.insert((path.clone(), Kind::Scalar));
        }
    }
}

/// `over` merged into `base` as Helm merges values: maps key by key, anything else replaced.
fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// Whether `path` is missing from `v` (and can be added: only maps on the way).
fn lacks(v: &Value, path: &ValuePath) -> bool {
    let mut at = v;
    for s in &path.0 {
        match (s, at) {
            (Step::Key(k), Value::Object(m)) => match m.get(k) {
                Some(next) => at = next,
                None => return true,
            },
            _ => return false,
        }
    }
    false
}

/// The slot at `path`, maps created on the way.
fn slot<'a>(v: &'a mut Value, path: &ValuePath) -> &'a mut Value {
    let mut at = v;
    for s in &path.0 {
        at = match s {
            Step::Key(k) => {
                if !at.is_object() {
                    *at = Value::Object(Map::new());
                }
                at.as_object_mut()
                    .map(|m| m.entry(k.clone()).or_insert(Value::Null))
                    .unwrap_or_else(|| unreachable!("made an object above"))
            }
            Step::Index(i) => at
                .get_mut(*i)
                .unwrap_or_else(|| panic!("no item {i} at {}", path.dotted())),
        };
    }
    at
}

/// The `.Values.<path>` the chart's templates name, directly, through `.root.Values`/`$.Values`, or
/// through a variable assigned a values path (`{{- $c := .Values.cni }}` … `$c.tag`).
pub fn template_references(chart: &Path) -> BTreeSet<ValuePath> {
    let mut out = BTreeSet::new();
    let dir = chart.join("templates");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.map(|e| e.path()).unwrap_or_default())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "tpl"))
        .collect();
    files.sort();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        // Variables bound to a values path, e.g. `$c := .Values.cni`.
        let mut vars: Vec<(String, String)> = Vec::new();
        for (at, _) in text.match_indices(":= .Values.") {
            let before = text[..at].trim_end();
            let name: String = before
                .chars()
                .rev()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if before[..before.len() - name.len()].ends_with('$') && !name.is_empty() {
                let target = path_at(&text[at + ":= .Values.".len()..]);
                vars.push((format!("${name}."), target));
            }
        }
        let mut refs: Vec<String> = text
            .match_indices(".Values.")
            .map(|(at, m)| path_at(&text[at + m.len()..]))
            .collect();
        for (var, target) in &vars {
            for (at, m) in text.match_indices(var.as_str()) {
                let rest = path_at(&text[at + m.len()..]);
                if !rest.is_empty() {
                    refs.push(format!("{target}.{rest}"));
                }
            }
        }
        for r in refs.into_iter().filter(|r| !r.is_empty()) {
            out.insert(ValuePath(
                r.split('.').map(|k| Step::Key(k.to_string())).collect(),
            ));
        }
    }
    out
}

/// The dotted path at the start of `s` (`cni.tag }}` → `cni.tag`).
fn path_at(s: &str) -> String {
    let p: String = s
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    p.trim_end_matches('.').to_string()
}

/// How one rendering went, when it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Rendered; the text is only a scalar.
    Rendered,
    /// Refused with a message naming the value (the message).
    Refused(String),
}

/// Renders `case` (`helm template <release> <chart> -n <ns> -f <values>`, with `--skip-schema-validation`
/// when `skip_schema`) and judges it; `Err` describes a finding.
pub fn render(
    helm: &Helm,
    chart: &Path,
    release: &str,
    ns: &str,
    case: &Case,
    skip_schema: bool,
    scratch: &Path,
) -> Result<Held, String> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = scratch.join(format!("values-{n}.json"));
    let text = serde_json::to_string(&case.values).map_err(|e| e.to_string())?;
    std::fs::write(&file, text).map_err(|e| format!("writing {}: {e}", file.display()))?;
    let chart = chart.display().to_string();
    let file_arg = file.display().to_string();
    let mut args = vec![
        "template",
        release,
        &chart,
        "--namespace",
        ns,
        "-f",
        &file_arg,
    ];
    if skip_schema {
        args.push("--skip-schema-validation");
    }
    let out = helm.output(&args).map_err(|e| format!("{e:#}"))?;
    let _ = std::fs::remove_file(&file);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        let list = case.path.list();
        let named = [
            case.path.dotted(),
            case.path.pointer(),
            list.dotted(),
            list.pointer(),
        ]
        .iter()
        .any(|n| names(&stderr, n));
        // Without the schema a template may also stop on a value of the wrong type (a function's
        // error); what must not happen is a rendering that is not YAML any more.
        let template_error =
            stderr.contains("execution error at") || stderr.contains(": executing \"");
        // (Helm ends every error with "Use --debug flag to render out invalid YAML".)
        let broken_yaml =
            stderr.contains("YAML parse error") || stderr.contains("error converting YAML");
        return if named && !broken_yaml || skip_schema && template_error && !broken_yaml {
            Ok(Held::Refused(stderr.trim().to_string()))
        } else {
            Err(format!(
                "helm failed without naming the value: {}",
                stderr.trim()
            ))
        };
    }
    let rendered = String::from_utf8_lossy(&out.stdout);
    let docs = test_support::pods::documents(&rendered)
        .map_err(|e| format!("the rendering is not YAML ({e}):\n{rendered}"))?;
    for doc in &docs {
        if let Some(at) = injected(doc) {
            return Err(format!(
                "key {INJECTED} added at {at} of {} {}",
                doc["kind"], doc["metadata"]["name"]
            ));
        }
        // A ConfigMap's entries are documents of their own (the injector's `values`, `config`, `mesh`).
        if doc["kind"] == "ConfigMap" {
            for (k, v) in doc["data"].as_object().into_iter().flatten() {
                let text = v.as_str().unwrap_or_default();
                let inner = test_support::pods::documents(text).map_err(|e| {
                    format!("ConfigMap entry {k} is not YAML any more ({e}):\n{text}")
                })?;
                if let Some(at) = inner.iter().find_map(injected) {
                    return Err(format!(
                        "key {INJECTED} added at {at} of ConfigMap entry {k}"
                    ));
                }
            }
        }
    }
    Ok(Held::Rendered)
}

/// Whether `message` names the value `name` (a dotted path or a pointer) as a word of its own, as
/// Helm's schema errors (`at '/cni/tag'`) and the charts' `fail` messages (`cni.logging.level "loud"`) do.
fn names(message: &str, name: &str) -> bool {
    !name.is_empty()
        && message.match_indices(name).any(|(at, _)| {
            let before = message[..at].chars().next_back();
            let after = message[at + name.len()..].chars().next();
            matches!(before, None | Some(' ' | '\'' | '"' | '(' | '`' | '\n'))
                // `/`: a pointer to an item of the value (`'/global/imagePullSecrets/0'`).
                && matches!(
                    after,
                    None | Some(' ' | '\'' | '"' | ':' | ')' | '`' | ',' | '\n' | '/')
                )
        })
}

/// Where a mapping has the key [`INJECTED`], as a JSON pointer.
fn injected(v: &Value) -> Option<String> {
    match v {
        Value::Object(m) => {
            if m.contains_key(INJECTED) {
                return Some("/".to_string());
            }
            m.iter().find_map(|(k, child)| {
                injected(child).map(|at| format!("/{k}{}", at.trim_end_matches('/')))
            })
        }
        Value::Array(items) => items.iter().enumerate().find_map(|(i, child)| {
            injected(child).map(|at| format!("/{i}{}", at.trim_end_matches('/')))
        }),
        _ => None,
    }
}

/// What [`check_chart`] found: per case and mode, how it held or the finding.
#[derive(Debug, Default)]
pub struct Report {
    pub rendered: usize,
    pub refused: usize,
    /// `(case, schema?, finding)`.
    pub findings: Vec<(String, bool, String)>,
    /// `(case, schema?, how it held)`, for the assertions about particular values.
    pub results: Vec<(String, bool, Held)>,
}

/// Every hostile case of the chart at `chart`, with and without Helm's schema check,
/// rendered a few at a time (each is one `helm template`). The cases are made over values.yaml and
/// again over each of `variants` (values merged over it), so that a part of the chart the defaults
/// leave out (an HPA behind `autoscaleEnabled`) renders its values too.
pub fn check_chart(
    helm: &Helm,
    chart: &Path,
    release: &str,
    ns: &str,
    variants: &[Value],
    scratch: &Path,
) -> Report {
    let values_text = std::fs::read_to_string(chart.join("values.yaml"))
        .unwrap_or_else(|e| panic!("reading {}/values.yaml: {e}", chart.display()));
    let defaults = test_support::pods::documents(&values_text)
        .unwrap_or_else(|e| panic!("{}/values.yaml: {e}", chart.display()))
        .into_iter()
        .next()
        .unwrap_or(Value::Null);
    let referenced = template_references(chart);
    let mut bases = vec![defaults.clone()];
    for v in variants {
        let mut base = defaults.clone();
        merge(&mut base, v);
        bases.push(base);
    }
    let mut jobs = Vec::new();
    let payload = payload();
    for base in &bases {
        for case in cases(base, &referenced, &payload) {
            for skip_schema in [false, true] {
                jobs.push((case.clone(), skip_schema));
            }
        }
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(2, 8);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for t in 0..threads {
            let (jobs, next, results) = (&jobs, &next, &results);
            std::thread::Builder::new()
                .name(format!("hostile-{t}"))
                .spawn_scoped(s, move || loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some((case, skip)) = jobs.get(i) else {
                        break;
                    };
                    let r = render(helm, chart, release, ns, case, *skip, scratch);
                    results.lock().unwrap_or_else(|e| e.into_inner()).push((
                        case.what.clone(),
                        !*skip,
                        r,
                    ));
                })
                .unwrap_or_else(|e| panic!("spawning a thread: {e}"));
        }
    });
    let mut report = Report::default();
    let mut all = results.into_inner().unwrap_or_else(|e| e.into_inner());
    all.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    for (what, schema, r) in all {
        match r {
            Ok(held) => {
                match held {
                    Held::Rendered => report.rendered += 1,
                    Held::Refused(_) => report.refused += 1,
                }
                report.results.push((what, schema, held));
            }
            Err(finding) => report.findings.push((what, schema, finding)),
        }
    }
    report
}

impl Report {
    /// Panics listing every finding, and when nothing was rendered or refused (a broken harness).
    pub fn assert_held(&self, chart: &str) {
        eprintln!(
            "{chart}: {} hostile renderings held as scalars, {} refused naming the value, {} findings",
            self.rendered,
            self.refused,
            self.findings.len()
        );
        assert!(
            self.rendered > 0 && self.refused > 0,
            "{chart}: {} rendered, {} refused: the hostile values were not tried",
            self.rendered,
            self.refused
        );
        let findings: Vec<String> = self
            .findings
            .iter()
            .map(|(what, schema, f)| {
                let mode = if *schema {
                    ""
                } else {
                    " (--skip-schema-validation)"
                };
                format!("{what}{mode}: {f}")
            })
            .collect();
        assert!(
            findings.is_empty(),
            "{chart}: {} of {} hostile renderings added a key or failed without naming the value:\n\n{}",
            findings.len(),
            findings.len() + self.rendered + self.refused,
            findings.join("\n\n")
        );
    }

    /// How the case `what` held (over each base), with the schema (`schema`) or without.
    pub fn held(&self, what: &str, schema: bool) -> Vec<&Held> {
        let held: Vec<&Held> = self
            .results
            .iter()
            .filter(|(w, s, _)| w == what && *s == schema)
            .map(|(_, _, h)| h)
            .collect();
        assert!(!held.is_empty(), "no hostile case {what}");
        held
    }
}
