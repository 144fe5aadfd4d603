//! Istio's test data (`testdata/istio` in the repository): the injection case table `cases.json`, as
//! `testdata/istio/inject/README.md` describes it, and the `cases.tsv` tables of the `istio-iptables` and
//! nftables goldens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::Error;

/// `testdata/istio`, found from this crate's own directory so that every test and tool reads the same copy.
pub fn testdata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/istio")
}

/// The sidecar-injection cases: inputs, goldens, `cases.json` and the `base-*` documents.
pub fn inject_dir() -> PathBuf {
    testdata_dir().join("inject")
}

/// The `istio-iptables` goldens and `cases.tsv`.
pub fn iptables_dir() -> PathBuf {
    testdata_dir().join("iptables")
}

/// The nftables goldens of Istio's `TestNftables` and their `cases.tsv`.
pub fn nftables_dir() -> PathBuf {
    testdata_dir().join("nftables")
}

/// The text of a file.
pub fn read(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The pod templates of Istio's chart and their files in `releases/<release>/`, as the istiod chart's
/// `istiod-injector-configmap.yaml` names them (`.Files.Get "files/<file>" | trim`); the same map as
/// `chartTemplates` in `tools/istio/cmd/inject-batch/main.go`.
pub const RELEASE_TEXT_FILES: [(&str, &str); 4] = [
    ("sidecar", "injection-template.yaml"),
    ("gateway", "gateway-injection-template.yaml"),
    ("grpc-agent", "grpc-agent.yaml"),
    ("grpc-simple", "grpc-simple.yaml"),
];

/// An Istio release's four pod-template texts from `releases/<release>/`, `{name: text}`, as its chart
/// writes them into the injector ConfigMap: trimmed (`istiod-injector-configmap.yaml`'s `trim`).
pub fn release_texts(release: &str) -> Result<serde_json::Map<String, Value>, Error> {
    let dir = testdata_dir().join("releases").join(release);
    RELEASE_TEXT_FILES
        .iter()
        .map(|(name, file)| {
            let text = read(&dir.join(file))?;
            Ok(((*name).to_string(), Value::String(text.trim().to_string())))
        })
        .collect()
}

/// The text of a file of `inject/`; a golden (`*.injected`) in the shape of the release text the compiled
/// templates are built from ([`as_release_golden`]).
pub fn read_inject(name: &str) -> Result<String, Error> {
    let text = read(&inject_dir().join(name))?;
    Ok(if name.ends_with(".injected") {
        as_release_golden(&text)
    } else {
        text
    })
}

/// A golden of `inject/` (Istio's master of 2026-08-22, whose texts no longer set `GOMAXPROCS`) in the
/// shape of Istio 1.31.0-rc.0's text, which the compiled templates render: every `GOMEMLIMIT` env entry
/// (the proxy's) followed by the `GOMAXPROCS` entry that text writes after it, at the same indent. This is
/// the one difference between the two texts on these cases; `releases.rs` in the injector's tests proves
/// the compiled and the evaluated 1.31 text agree on every case without it.
pub fn as_release_golden(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::with_capacity(text.len() + 1024);
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        out.push_str(line);
        out.push('\n');
        i += 1;
        if line.trim_start() != "- name: GOMEMLIMIT" {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        while i < lines.len() && lines[i].len() - lines[i].trim_start().len() > indent {
            out.push_str(lines[i]);
            out.push('\n');
            i += 1;
        }
        let pad = " ".repeat(indent);
        out.push_str(&format!(
            "{pad}- name: GOMAXPROCS\n{pad}  valueFrom:\n{pad}    resourceFieldRef:\n{pad}      divisor: \"1\"\n{pad}      resource: limits.cpu\n"
        ));
    }
    if !text.ends_with('\n') {
        out.pop();
    }
    out
}

/// Parses one YAML document into JSON; `what` names it in the error.
pub fn yaml(text: &str, what: &str) -> Result<Value, Error> {
    serde_saphyr::from_str::<Value>(text).map_err(|e| Error::Yaml {
        what: what.to_string(),
        message: e.to_string(),
    })
}

/// Parses JSON text; `what` names it in the error.
pub fn json(text: &str, what: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|source| Error::Json {
        what: what.to_string(),
        source,
    })
}

/// Merges `over` into `base` as the case table's overrides merge: maps key by key, recursively; `null`
/// deletes the key; any other value, lists too, replaces (a map over a non-map too).
pub fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    b.remove(k);
                } else if let Some(existing) = b.get_mut(k).filter(|e| e.is_object()) {
                    merge(existing, v);
                } else if v.is_object() {
                    // A new map is merged into an empty one, so that nulls inside it delete nothing
                    // and do not land in the document either.
                    let mut fresh = Value::Object(Map::new());
                    merge(&mut fresh, v);
                    b.insert(k.clone(), fresh);
                } else {
                    b.insert(k.clone(), v.clone());
                }
            }
        }
        (b, o) if !o.is_null() => *b = o.clone(),
        _ => {}
    }
}

/// One entry of `cases.json`.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// The input stream, a file of `inject/`.
    pub input: String,
    /// The expected output, a file of `inject/`; `None` for a rejected input.
    pub golden: Option<String>,
    pub values: Value,
    pub mesh: Value,
    pub injector_config: Value,
    /// Environment of the injector process.
    pub env: BTreeMap<String, String>,
    /// `"true"` or `"false"`, the `--native-sidecars` value.
    pub native_sidecars: String,
    /// `kube-inject` and/or `webhook`.
    pub modes: Vec<String>,
    /// For a rejected input, text its error must contain (case-insensitively).
    pub expected_error: Option<String>,
    /// Namespace objects the injector may look up (`--namespaces`), `None` when the case has none.
    pub namespaces: Option<Value>,
    /// The feature group (`templates/gateway`, `templates/user`, …; may be empty).
    pub feature: String,
}

impl Case {
    /// Whether Istio's test runs this case in `mode` (`kube-inject` or `webhook`).
    pub fn runs_in(&self, mode: &str) -> bool {
        self.modes.iter().any(|m| m == mode)
    }

    /// Key of the injector configuration this case needs: cases with equal keys can share one injector.
    pub fn config_key(&self) -> String {
        json!([
            self.values,
            self.mesh,
            self.injector_config,
            self.env,
            self.native_sidecars,
            self.namespaces
        ])
        .to_string()
    }

    /// The case's three documents: the `base-*` files with its overrides merged in.
    pub fn config(&self) -> Result<Config, Error> {
        Config::with(&self.values, &self.mesh, &self.injector_config)
    }

    /// Writes the case's Namespace objects to `dir` as a `v1 List` (as `kubectl get ns -o yaml` prints
    /// them, in JSON) and returns the file, `None` when the case has none.
    pub fn write_namespaces(&self, dir: &Path) -> Result<Option<PathBuf>, Error> {
        let Some(items) = &self.namespaces else {
            return Ok(None);
        };
        std::fs::create_dir_all(dir).map_err(|source| Error::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join("namespaces.json");
        let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
        std::fs::write(&path, list.to_string()).map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
        Ok(Some(path))
    }

    /// The input stream's text.
    pub fn input_text(&self) -> Result<String, Error> {
        read_inject(&self.input)
    }

    /// The golden's text, `None` for a rejected input.
    pub fn golden_text(&self) -> Result<Option<String>, Error> {
        self.golden.as_deref().map(read_inject).transpose()
    }
}

/// Loads every case of `inject/cases.json` (the `sidecar` template).
pub fn load_cases() -> Result<Vec<Case>, Error> {
    load_table("cases.json")
}

/// Loads every case of `inject/cases-templates.json` (the other built-in templates, user templates and
/// platforms; same format).
pub fn load_template_cases() -> Result<Vec<Case>, Error> {
    load_table("cases-templates.json")
}

/// Loads a case table of `inject/`.
fn load_table(table: &str) -> Result<Vec<Case>, Error> {
    let raw = json(&read_inject(table)?, table)?;
    let list = raw.as_array().ok_or_else(|| Error::Field {
        table: table.to_string(),
        case: 0,
        field: "(the table is not a list)",
    })?;
    list.iter()
        .enumerate()
        .map(|(i, c)| {
            let s = |k: &str| c.get(k).and_then(Value::as_str).map(str::to_string);
            let field = |field| Error::Field {
                table: table.to_string(),
                case: i,
                field,
            };
            Ok(Case {
                name: s("name").ok_or_else(|| field("name"))?,
                input: s("input").ok_or_else(|| field("input"))?,
                golden: s("golden"),
                values: c.get("values").cloned().unwrap_or(Value::Null),
                mesh: c.get("mesh").cloned().unwrap_or(Value::Null),
                injector_config: c.get("injector_config").cloned().unwrap_or(Value::Null),
                env: c
                    .get("env")
                    .and_then(Value::as_object)
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                            .collect()
                    })
                    .unwrap_or_default(),
                native_sidecars: s("native_sidecars").unwrap_or_else(|| "true".to_string()),
                modes: c
                    .get("modes")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
                expected_error: s("expected_error"),
                namespaces: c.get("namespaces").filter(|v| !v.is_null()).cloned(),
                feature: s("feature").unwrap_or_default(),
            })
        })
        .collect()
}

/// One row of a `cases.tsv` (`iptables/` or `nftables/`): a golden's name and the `istio-iptables` run
/// that produces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCase {
    /// The golden is `<name>.golden` beside the table.
    pub name: String,
    /// The command-line arguments, split as sh splits them.
    pub args: Vec<String>,
    /// The environment of the run, in the table's order.
    pub env: Vec<(String, String)>,
}

impl RunCase {
    /// The owner groups the case names by name rather than by id (`java`): they must exist on the host,
    /// as Istio's code and nft resolve them through `/etc/group`.
    pub fn named_groups(&self) -> Vec<&str> {
        self.env
            .iter()
            .filter(|(k, _)| k.starts_with("ISTIO_OUTBOUND_OWNER_GROUPS"))
            .flat_map(|(_, v)| v.split(','))
            .filter(|g| !g.is_empty() && *g != "*" && !g.bytes().all(|b| b.is_ascii_digit()))
            .collect()
    }

    /// The text of the case's golden in `dir`.
    pub fn golden_text(&self, dir: &Path) -> Result<String, Error> {
        read(&dir.join(format!("{}.golden", self.name)))
    }
}

/// Loads every row of `dir/cases.tsv`: a header line, then `name`, `args` (sh words) and `env`
/// (whitespace-separated `NAME=value`) columns separated by tabs; blank lines are skipped.
pub fn load_run_cases(dir: &Path) -> Result<Vec<RunCase>, Error> {
    let path = dir.join("cases.tsv");
    let text = read(&path)?;
    let bad = |line: usize, what: String| Error::Row {
        path: path.clone(),
        line,
        what,
    };
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let mut cols = line.split('\t');
        let name = cols.next().unwrap_or_default().to_string();
        let args = shell_words(cols.next().unwrap_or_default()).map_err(|e| bad(i + 1, e))?;
        let env = cols
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or_else(|| bad(i + 1, format!("env item {kv:?} is not NAME=value")))
            })
            .collect::<Result<Vec<_>, Error>>()?;
        cases.push(RunCase { name, args, env });
    }
    Ok(cases)
}

/// Splits a shell-quoted argument string: whitespace separates words; '…' is literal; "…" and
/// backslash escape as in sh (enough for the quoting the case tables use). The error says what is
/// unterminated.
pub fn shell_words(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    let trailing = || format!("trailing \\ in {s:?}");
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => word.push(x),
                        None => return Err(format!("unterminated ' in {s:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.push(chars.next().ok_or_else(trailing)?),
                        Some(x) => word.push(x),
                        None => return Err(format!("unterminated \" in {s:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next().ok_or_else(trailing)?);
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The three documents an injector is started with: values, MeshConfig, injector config.
#[derive(Debug, Clone)]
pub struct Config {
    pub values: Value,
    pub mesh: Value,
    pub injector_config: Value,
}

/// Paths of a [`Config`] written to files.
#[derive(Debug, Clone)]
pub struct ConfigFiles {
    pub values: PathBuf,
    pub mesh: PathBuf,
    pub injector_config: PathBuf,
}

impl ConfigFiles {
    /// The `--values`, `--mesh-config` and `--injector-config` flags that name these files, as the
    /// injector's `serve`, `kube-inject` and `explain` take them.
    pub fn args(&self) -> Vec<String> {
        let path = |p: &PathBuf| p.display().to_string();
        vec![
            "--values".to_string(),
            path(&self.values),
            "--mesh-config".to_string(),
            path(&self.mesh),
            "--injector-config".to_string(),
            path(&self.injector_config),
        ]
    }
}

impl Config {
    /// The `base-*` documents of the test environment, unchanged.
    pub fn base() -> Result<Config, Error> {
        Ok(Config {
            values: json(&read_inject("base-values.json")?, "base-values.json")?,
            mesh: yaml(&read_inject("base-mesh.yaml")?, "base-mesh.yaml")?,
            injector_config: yaml(
                &read_inject("base-injector-config.yaml")?,
                "base-injector-config.yaml",
            )?,
        })
    }

    /// The `base-*` documents with the given overrides merged in ([`merge`]; `null` for none).
    pub fn with(values: &Value, mesh: &Value, injector_config: &Value) -> Result<Config, Error> {
        let mut c = Config::base()?;
        merge(&mut c.values, values);
        merge(&mut c.mesh, mesh);
        merge(&mut c.injector_config, injector_config);
        Ok(c)
    }

    /// Writes the documents to `dir` (created when missing) as `values.json`, `mesh.yaml` and `config.yaml`.
    /// All three are written as JSON, which is YAML too, so no YAML emitter is involved.
    pub fn write(&self, dir: &Path) -> Result<ConfigFiles, Error> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let write = |name: &str, v: &Value| {
            let path = dir.join(name);
            let text = serde_json::to_vec_pretty(v).map_err(|source| Error::Json {
                what: name.to_string(),
                source,
            })?;
            std::fs::write(&path, text).map_err(|source| Error::Write {
                path: path.clone(),
                source,
            })?;
            Ok(path)
        };
        Ok(ConfigFiles {
            values: write("values.json", &self.values)?,
            mesh: write("mesh.yaml", &self.mesh)?,
            injector_config: write("config.yaml", &self.injector_config)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_case_table_loads_and_names_existing_files() {
        let cases = load_cases().expect("cases.json loads");
        assert_eq!(cases.len(), 74);
        let templates = load_template_cases().expect("cases-templates.json loads");
        assert_eq!(templates.len(), 5);
        for c in &templates {
            assert!(inject_dir().join(&c.input).is_file(), "{}", c.input);
            let golden = c.golden.as_ref().expect("every template case has a golden");
            assert!(inject_dir().join(golden).is_file(), "{golden}");
        }
        for c in &cases {
            assert!(inject_dir().join(&c.input).is_file(), "{}: input", c.name);
            if let Some(g) = &c.golden {
                assert!(inject_dir().join(g).is_file(), "{}: golden", c.name);
            }
            assert!(
                c.runs_in("kube-inject") || c.runs_in("webhook"),
                "{}",
                c.name
            );
        }
        assert!(iptables_dir().join("cases.tsv").is_file());
    }

    #[test]
    fn both_run_case_tables_load_with_a_golden_per_row() {
        for dir in [iptables_dir(), nftables_dir()] {
            let cases = load_run_cases(&dir).expect("cases.tsv loads");
            assert_eq!(cases.len(), 16, "{}", dir.display());
            for c in &cases {
                assert!(!c.args.is_empty(), "{}: no arguments", c.name);
                c.golden_text(&dir).expect("golden");
            }
        }
        let ipt = load_run_cases(&iptables_dir()).expect("cases.tsv");
        assert!(ipt.iter().any(|c| c.named_groups() == ["java"]));
    }

    #[test]
    fn shell_words_handle_the_quoting_cases_use() {
        let w = shell_words(r#"-i '*' -x '' -d 6000,7000, --dns-servers "" a\ b"#).expect("splits");
        assert_eq!(
            w,
            [
                "-i",
                "*",
                "-x",
                "",
                "-d",
                "6000,7000,",
                "--dns-servers",
                "",
                "a b"
            ]
        );
        assert!(shell_words("-x 'open")
            .expect_err("refused")
            .contains("unterminated '"));
        assert!(shell_words("a\\")
            .expect_err("refused")
            .contains("trailing"));
    }

    #[test]
    fn named_groups_leave_out_ids_and_wildcards() {
        let case = RunCase {
            name: "n".into(),
            args: Vec::new(),
            env: vec![
                (
                    "ISTIO_OUTBOUND_OWNER_GROUPS".into(),
                    "java,1337,*,,ftp".into(),
                ),
                ("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE".into(), "mail".into()),
                ("OTHER".into(), "www".into()),
            ],
        };
        assert_eq!(case.named_groups(), ["java", "ftp", "mail"]);
    }

    #[test]
    fn merge_deletes_on_null_and_replaces_lists() {
        let mut doc = json!({"keep": {"cpu": "1", "memory": "2"}, "list": [1, 2], "scalar": 1});
        let over = json!({"keep": {"cpu": null, "new": {"gone": null, "kept": 1}}, "list": [3],
            "scalar": {"now": "a map"}});
        merge(&mut doc, &over);
        let want = json!({"keep": {"memory": "2", "new": {"kept": 1}}, "list": [3],
            "scalar": {"now": "a map"}});
        assert_eq!(doc, want);
        merge(&mut doc, &Value::Null);
        assert_eq!(doc, want, "a null override changes nothing");
    }

    #[test]
    fn overrides_merge_over_the_base_documents() {
        let c = Config::with(
            &json!({"global": {"proxy": {"statusPort": 0}}}),
            &Value::Null,
            &Value::Null,
        )
        .expect("config");
        assert_eq!(c.values["global"]["proxy"]["statusPort"], json!(0));
        assert_eq!(c.mesh, Config::base().expect("base").mesh);
    }
}
