//! Parity with Istio golden files: the kernel state from our --dry-run equals that from the goldens.
//!
//! For every row of `shared/istio-testdata/iptables/cases.tsv`: run `iptables-init <args> --dry-run`
//! with the row's environment, apply its IPv4 and IPv6 parts with `iptables-restore --noflush` /
//! `ip6tables-restore --noflush` in a fresh network namespace; apply Istio's golden (converted as the
//! README says) in a second namespace; compare the two namespaces' `iptables-save` / `ip6tables-save`
//! dumps table by table: the chains and each chain's ordered rules, comments and counters ignored.
//! Netfilter canonicalises spelling (`--to-port`, `::127.0.0.53`), so equal dumps mean equal behaviour.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, ensure, Context as _, Result};
use e2e::netns::{self, Family, NetNs};

/// The shared test data: `../shared` beside the checkout (CI), or beside the worktrees' parent
/// (`/work/wt/<name>` with `/work/shared`); `SHARED_DIR` overrides both.
fn shared_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHARED_DIR") {
        return PathBuf::from(dir);
    }
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        crate_dir.join("../../shared"),
        crate_dir.join("../../../shared"),
    ];
    for c in &candidates {
        if c.join("istio-testdata").is_dir() {
            return c.clone();
        }
    }
    panic!(
        "shared test data not found (looked in {:?}); set SHARED_DIR",
        candidates
    );
}

/// One row of cases.tsv.
#[derive(Debug)]
struct Case {
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// Splits a shell-quoted argument string: whitespace separates words; '…' is literal; "…" and
/// backslash escape as in sh (enough for the quoting cases.tsv uses).
fn shell_words(s: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => word.push(x),
                        None => bail!("unterminated ' in {s:?}"),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => word.push(chars.next().context("trailing \\")?),
                        Some(x) => word.push(x),
                        None => bail!("unterminated \" in {s:?}"),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.push(chars.next().context("trailing \\")?);
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

fn read_cases(dir: &std::path::Path) -> Result<Vec<Case>> {
    let path = dir.join("cases.tsv");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let mut cols = line.split('\t');
        let name = cols.next().context("name column")?.to_string();
        let args = shell_words(cols.next().unwrap_or(""))
            .with_context(|| format!("cases.tsv line {}", i + 1))?;
        let env = cols
            .next()
            .unwrap_or("")
            .split_whitespace()
            .map(|kv| {
                let (k, v) = kv.split_once('=').context("env item is not NAME=value")?;
                Ok((k.to_string(), v.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        cases.push(Case { name, args, env });
    }
    Ok(cases)
}

/// Istio's golden as restore inputs (v4, v6), converted as the README says.
fn golden_parts(golden: &str) -> (String, String) {
    let mut v4 = String::new();
    let mut v6 = String::new();
    let mut seen_tables = Vec::new();
    let mut in_v6 = false;
    for line in golden.lines() {
        if line == "iptables-save" || line == "ip6tables-save" || line.is_empty() {
            continue;
        }
        let line = if let Some(table) = line.strip_prefix("* ") {
            if seen_tables.iter().any(|t| t == table) {
                in_v6 = true;
            }
            seen_tables.push(table.to_string());
            format!("*{table}")
        } else if let Some(chain) = line.strip_prefix("-N ") {
            format!(":{chain} - [0:0]")
        } else {
            line.to_string()
        };
        let out = if in_v6 { &mut v6 } else { &mut v4 };
        out.push_str(&line);
        out.push('\n');
    }
    (v4, v6)
}

/// Our dry-run output split into restore inputs (v4, v6) at the `# ip6tables-restore` line.
fn dry_run_parts(out: &str) -> (String, String) {
    match out.split_once("# ip6tables-restore\n") {
        Some((v4, v6)) => (v4.to_string(), v6.to_string()),
        None => (out.to_string(), String::new()),
    }
}

/// A save dump as table → chain → ordered rules (declared chains included with no rules).
type Dump = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn parse_dump(save: &str) -> Dump {
    let mut dump = Dump::new();
    let mut table = String::new();
    for line in save.lines() {
        if line.starts_with('#') || line.is_empty() || line == "COMMIT" {
            continue;
        }
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
            dump.entry(table.clone()).or_default();
        } else if let Some(decl) = line.strip_prefix(':') {
            let chain = decl
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            dump.entry(table.clone())
                .or_default()
                .entry(chain)
                .or_default();
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let chain = rule
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            dump.entry(table.clone())
                .or_default()
                .entry(chain)
                .or_default()
                .push(line.to_string());
        }
    }
    dump
}

fn describe_diff(family: Family, ours: &Dump, theirs: &Dump) -> String {
    let mut out = String::new();
    let tables: std::collections::BTreeSet<&String> = ours.keys().chain(theirs.keys()).collect();
    for t in tables {
        let (a, b) = (ours.get(t), theirs.get(t));
        if a != b {
            out.push_str(&format!(
                "  {family:?} table {t}:\n    ours:   {a:?}\n    golden: {b:?}\n"
            ));
        }
    }
    out
}

/// Makes sure the groups a case names exist (the goldens use `java`; `ftp` in other cases).
fn ensure_groups(case: &Case) -> Result<()> {
    let groups = case
        .env
        .iter()
        .filter(|(k, _)| k.starts_with("ISTIO_OUTBOUND_OWNER_GROUPS"))
        .flat_map(|(_, v)| v.split(',').map(str::to_string).collect::<Vec<_>>())
        .filter(|g| !g.is_empty() && g != "*" && !g.bytes().all(|b| b.is_ascii_digit()));
    for g in groups {
        let exists = Command::new("getent")
            .args(["group", &g])
            .output()
            .context("running getent")?
            .status
            .success();
        if !exists {
            let st = Command::new("groupadd")
                .arg(&g)
                .status()
                .context("running groupadd")?;
            ensure!(st.success(), "groupadd {g} failed");
        }
    }
    Ok(())
}

fn run_case(dir: &std::path::Path, case: &Case) -> Result<()> {
    ensure_groups(case)?;
    let golden = std::fs::read_to_string(dir.join(format!("{}.golden", case.name)))
        .with_context(|| format!("golden of {}", case.name))?;
    let (gold_v4, gold_v6) = golden_parts(&golden);

    let mut cmd = Command::new(e2e::bin("iptables-init"));
    cmd.args(&case.args)
        .arg("--dry-run")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(case.env.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().context("running iptables-init")?;
    ensure!(
        out.status.success(),
        "iptables-init --dry-run failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).context("dry-run output is not UTF-8")?;
    let (ours_v4, ours_v6) = dry_run_parts(&stdout);
    ensure!(
        gold_v6.is_empty() == ours_v6.is_empty(),
        "IPv6 part present in golden: {}, in ours: {}",
        !gold_v6.is_empty(),
        !ours_v6.is_empty()
    );

    let ours_ns = NetNs::new(&format!("par-o-{}", case.name))?;
    let gold_ns = NetNs::new(&format!("par-g-{}", case.name))?;
    let mut report = String::new();
    for (family, ours_in, gold_in) in [
        (Family::V4, &ours_v4, &gold_v4),
        (Family::V6, &ours_v6, &gold_v6),
    ] {
        if !ours_in.is_empty() {
            ours_ns
                .restore(family, ours_in)
                .with_context(|| format!("applying our {family:?} dry-run output"))?;
        }
        if !gold_in.is_empty() {
            gold_ns
                .restore(family, gold_in)
                .with_context(|| format!("applying the golden's {family:?} part"))?;
        }
        let ours = parse_dump(&ours_ns.save(family)?);
        let theirs = parse_dump(&gold_ns.save(family)?);
        if family == Family::V4 {
            // Guard against a vacuous pass: the v4 state always holds Istio's chains.
            ensure!(
                ours.get("nat")
                    .is_some_and(|t| t.contains_key("ISTIO_OUTPUT")),
                "no nat ISTIO_OUTPUT chain after applying our rules"
            );
        }
        if ours != theirs {
            report.push_str(&describe_diff(family, &ours, &theirs));
        }
    }
    ensure!(report.is_empty(), "kernel state differs:\n{report}");
    Ok(())
}

#[test]
fn every_golden_case_yields_the_same_kernel_state() {
    netns::require_root();
    let dir = shared_dir().join("istio-testdata/iptables");
    let cases = read_cases(&dir).expect("cases.tsv");
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(e) = run_case(&dir, case) {
            failures.push(format!("{}: {e:#}", case.name));
        }
    }
    eprintln!(
        "iptables parity: {}/{} cases equal",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
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
}

#[test]
fn golden_split_at_second_table() {
    let g = "iptables-save\nip6tables-save\n* nat\n-N A\n-A A -j RETURN\nCOMMIT\n* raw\nCOMMIT\n* nat\n-N B\nCOMMIT\niptables-save\n";
    let (v4, v6) = golden_parts(g);
    assert_eq!(
        v4,
        "*nat\n:A - [0:0]\n-A A -j RETURN\nCOMMIT\n*raw\nCOMMIT\n"
    );
    assert_eq!(v6, "*nat\n:B - [0:0]\nCOMMIT\n");
}
