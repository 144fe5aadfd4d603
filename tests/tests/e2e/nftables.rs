//! `--native-nftables` end to end: parity with Istio's nftables goldens, and real runs.
//!
//! Parity, for every row of `testdata/istio/nftables/cases.tsv`, each in fresh network namespaces:
//! the golden loaded with `nft -f` in one; (a) our `--native-nftables --dry-run` output loaded with
//! `nft -f` in a second; (b) a real `--native-nftables` run in a third, with `nft`, `iptables*`,
//! `ip6tables*` and `ip` made unavailable to it. The three must give the same `nft -s list ruleset` and
//! the same `nft --debug=netlink list ruleset` (the bytecode) once rule handles and anonymous set
//! numbers are normalised. The same `nft` binary lists every side, so its version cannot matter.
//!
//! The helpers live here for now (namespaces through `ip netns`, commands through `ip netns exec`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, ensure, Context as _, Result};

/// Istio's nftables goldens, checked in beside the crates.
fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/istio/nftables")
}

/// The `iptables-init` under test (`E2E_IPTABLES_INIT` overrides the workspace's debug build).
fn iptables_init() -> PathBuf {
    if let Some(p) = std::env::var_os("E2E_IPTABLES_INIT") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let path = target.join("debug/iptables-init");
    assert!(
        path.exists(),
        "{} not found: run `cargo build -p iptables-init` first",
        path.display()
    );
    path
}

/// Panics unless root with `nft` and `ip` installed: these tests never skip.
fn require_root_and_nft() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (network namespaces, nf_tables); it never skips"
    );
    for tool in ["nft", "ip"] {
        let found = ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
            .iter()
            .any(|d| Path::new(d).join(tool).is_file());
        assert!(
            found,
            "this test needs `{tool}` (install nftables, iproute2); it never skips"
        );
    }
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A named network namespace with `lo` up, deleted on drop.
struct Ns {
    name: String,
}

impl Ns {
    fn new(prefix: &str) -> Ns {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let prefix: String = prefix
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(20)
            .collect();
        let name = format!("{prefix}-{}-{n}", std::process::id());
        checked(Command::new("ip").args(["netns", "add", &name])).expect("ip netns add");
        let ns = Ns { name };
        ns.run(&["ip", "link", "set", "lo", "up"]).expect("lo up");
        ns
    }

    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }

    fn run(&self, argv: &[&str]) -> Result<String> {
        let (p, args) = argv.split_first().context("empty command")?;
        checked(self.command(p).args(args))
    }

    /// Loads `text` with `nft -f`.
    fn nft_load(&self, text: &str) -> Result<()> {
        let file =
            std::env::temp_dir().join(format!("nft-load-{}-{}.nft", self.name, std::process::id()));
        std::fs::write(&file, text)?;
        let r = self.run(&["nft", "-f", &file.to_string_lossy()]);
        let _ = std::fs::remove_file(&file);
        r.map(|_| ())
    }

    /// The two views of the ruleset the comparison uses.
    fn views(&self) -> Result<(String, String)> {
        let list = self.run(&["nft", "-s", "list", "ruleset"])?;
        let netlink =
            normalise_netlink(&self.run(&["nft", "--debug=netlink", "list", "ruleset"])?);
        Ok((list, netlink))
    }
}

impl Drop for Ns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn checked(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    into_stdout(cmd, out)
}

fn into_stdout(cmd: &Command, out: Output) -> Result<String> {
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).context("output is not UTF-8")
}

/// `nft --debug=netlink` output with rule handles (`inet T C <handle> [<prev>]`) cut, anonymous set
/// numbers (`__setN`) unified (both change between otherwise identical loads) and counter values
/// dropped (they count traffic; `nft -s` leaves them out too).
fn normalise_netlink(s: &str) -> String {
    let mut out = String::new();
    for line in s.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let line = if matches!(words.first(), Some(&"inet" | &"ip" | &"ip6"))
            && (words.len() == 4 || words.len() == 5)
            && words[3..]
                .iter()
                .all(|w| w.bytes().all(|b| b.is_ascii_digit()))
        {
            words[..3].join(" ")
        } else {
            line.to_string()
        };
        // Counter values are traffic, not ruleset.
        let line = match (line.find("[ counter pkts "), line.find("counter packets ")) {
            (Some(i), _) => format!("{}[ counter ]", &line[..i]),
            (None, Some(i)) => {
                let tail = line[i..].splitn(6, ' ').nth(5).unwrap_or_default();
                format!("{}counter {tail}", &line[..i])
            }
            (None, None) => line,
        };
        let mut rest = line.as_str();
        while let Some(i) = rest.find("__set") {
            out.push_str(&rest[..i + 5]);
            rest = rest[i + 5..].trim_start_matches(|c: char| c.is_ascii_digit());
            out.push('N');
        }
        out.push_str(rest);
        out.push('\n');
    }
    out
}

/// One row of cases.tsv.
#[derive(Debug, Clone)]
struct Case {
    name: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// Splits the args column: whitespace separates words, `'…'` is literal (all cases.tsv uses).
fn words(s: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
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
            c if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
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
        out.push(word);
    }
    Ok(out)
}

fn read_cases() -> Vec<Case> {
    let path = testdata().join("cases.tsv");
    let text = std::fs::read_to_string(&path).expect("cases.tsv");
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let mut cols = line.split('\t');
            let name = cols.next().unwrap_or_default().to_string();
            let args = words(cols.next().unwrap_or_default()).expect("args column");
            let env = cols
                .next()
                .unwrap_or_default()
                .split_whitespace()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("env item NAME=value");
                    (k.to_string(), v.to_string())
                })
                .collect();
            Case { name, args, env }
        })
        .collect()
}

/// Creates the owner groups a case names by name (`java`), as nft resolves names through `/etc/group`.
fn ensure_groups(case: &Case) {
    for (_, v) in case
        .env
        .iter()
        .filter(|(k, _)| k.starts_with("ISTIO_OUTBOUND_OWNER_GROUPS"))
    {
        for g in v
            .split(',')
            .filter(|g| !g.is_empty() && *g != "*" && !g.bytes().all(|b| b.is_ascii_digit()))
        {
            let exists = Command::new("getent")
                .args(["group", g])
                .output()
                .is_ok_and(|o| o.status.success());
            if !exists {
                let st = Command::new("groupadd")
                    .args(["-f", g])
                    .status()
                    .expect("groupadd");
                assert!(st.success(), "groupadd {g}");
            }
        }
    }
}

/// `iptables-init <case args> --native-nftables <extra>` with only the case's environment.
fn ours(case: &Case, extra: &[&str]) -> Command {
    let mut cmd = Command::new(iptables_init());
    cmd.args(&case.args)
        .arg("--native-nftables")
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(case.env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// The transaction part of a dry run (the `#` route lines dropped).
fn transaction_of(dry_run: &str) -> String {
    dry_run
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn compare(what: &str, ours: &(String, String), golden: &(String, String)) -> Result<()> {
    ensure!(
        ours.0 == golden.0,
        "{what}: `nft -s list ruleset` differs\n--- ours\n{}\n--- golden\n{}",
        ours.0,
        golden.0
    );
    ensure!(
        ours.1 == golden.1,
        "{what}: normalised `nft --debug=netlink list ruleset` differs\n--- ours\n{}\n--- golden\n{}",
        ours.1,
        golden.1
    );
    Ok(())
}

fn dry_run_case(case: &Case) -> Result<()> {
    ensure_groups(case);
    let golden = std::fs::read_to_string(testdata().join(format!("{}.golden", case.name)))?;
    let record =
        std::env::temp_dir().join(format!("nft-record-{}-{}", std::process::id(), case.name));
    let out = ours(case, &["--dry-run"])
        .env("DRY_RUN_FILE_PATH", &record)
        .output()?;
    ensure!(
        out.status.success(),
        "dry run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let recorded = std::fs::read_to_string(&record);
    let _ = std::fs::remove_file(&record);
    ensure!(
        recorded? == golden,
        "DRY_RUN_FILE_PATH does not hold the golden's text"
    );
    let text = transaction_of(&String::from_utf8(out.stdout)?);
    // The printed transaction is Istio's golden text itself.
    ensure!(
        text == golden,
        "dry-run text differs from the golden:\n{text}"
    );
    let g = Ns::new(&format!("nftg-{}", case.name));
    g.nft_load(&golden).context("loading the golden")?;
    let o = Ns::new(&format!("nfto-{}", case.name));
    o.nft_load(&text).context("loading our dry run")?;
    let gv = g.views()?;
    ensure!(
        gv.0.contains("table inet istio-proxy-nat"),
        "the golden loaded nothing"
    );
    compare("dry run", &o.views()?, &gv)
}

#[test]
fn parity_dry_run_loaded_with_nft_equals_every_golden() {
    require_root_and_nft();
    let cases = read_cases();
    assert_eq!(cases.len(), 16, "cases.tsv rows");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| dry_run_case(c).err().map(|e| format!("{}: {e:#}", c.name)))
        .collect();
    eprintln!(
        "nftables dry-run parity: {}/{} cases equal",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The tools a real run must not use: `nft`, `iptables*`, `ip6tables*`, `ip`.
const MASKED: &str = "for d in /usr/sbin /usr/bin /sbin /bin; do \
  for f in $d/nft $d/ip $d/iptables* $d/ip6tables*; do \
    [ -e \"$f\" ] && mount --bind /bin/false \"$f\"; \
  done; \
done";

/// A command that runs `argv` in `ns` inside a private mount namespace in which every tool of
/// [`MASKED`] is `/bin/false`; the sandbox first proves that `nft` and `ip` are gone.
fn sandboxed(ns: &Ns, argv: &[String], env: &[(String, String)]) -> Command {
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let script = format!(
        "set -e; {MASKED}; if nft --version || ip link >/dev/null || iptables -V || ip6tables -V; then echo 'a tool is still usable' >&2; exit 99; fi; exec {}",
        quoted.join(" ")
    );
    let mut cmd = ns.command("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().map(|(k, v)| (k, v)));
    cmd
}

/// A real `--native-nftables` run of `case` (plus `extra`) in `ns`, with no userspace tool available.
fn real_run(ns: &Ns, case: &Case, extra: &[&str]) -> Result<Output> {
    let mut argv = vec![iptables_init().to_string_lossy().into_owned()];
    argv.extend(case.args.iter().cloned());
    argv.push("--native-nftables".into());
    argv.extend(extra.iter().map(|s| s.to_string()));
    let out = sandboxed(ns, &argv, &case.env).output()?;
    ensure!(
        out.status.code() != Some(99),
        "the sandbox left a tool usable: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn real_case(case: &Case) -> Result<()> {
    ensure_groups(case);
    let golden = std::fs::read_to_string(testdata().join(format!("{}.golden", case.name)))?;
    let g = Ns::new(&format!("nftg-{}", case.name));
    g.nft_load(&golden).context("loading the golden")?;
    let o = Ns::new(&format!("nftr-{}", case.name));
    let out = real_run(&o, case, &[])?;
    ensure!(
        out.status.success(),
        "real run failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    compare("real run", &o.views()?, &g.views()?)?;
    // A second run finds everything in place and sends nothing: handles and counters stay.
    let before = o.run(&["nft", "-a", "list", "ruleset"])?;
    let again = real_run(&o, case, &[])?;
    let stderr = String::from_utf8_lossy(&again.stderr);
    ensure!(again.status.success(), "second run failed: {stderr}");
    ensure!(
        stderr.contains("already in place"),
        "the second run changed something: {stderr}"
    );
    ensure!(
        o.run(&["nft", "-a", "list", "ruleset"])? == before,
        "the second run changed the ruleset"
    );
    Ok(())
}

#[test]
fn parity_real_run_without_any_tool_equals_every_golden() {
    require_root_and_nft();
    let cases = read_cases();
    assert_eq!(cases.len(), 16, "cases.tsv rows");
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| real_case(c).err().map(|e| format!("{}: {e:#}", c.name)))
        .collect();
    eprintln!(
        "nftables real-run parity: {}/{} cases equal",
        cases.len() - failures.len(),
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn case(name: &str) -> Case {
    read_cases()
        .into_iter()
        .find(|c| c.name == name)
        .expect("case in cases.tsv")
}

/// The `ip rule` and `ip -6 addr show dev lo` of `ns`: what the route actions touch.
fn routing(ns: &Ns) -> String {
    let rules = ns.run(&["ip", "rule"]).unwrap_or_default()
        + &ns.run(&["ip", "-6", "rule"]).unwrap_or_default();
    let routes = ns
        .run(&[
            "ip", "route", "show", "table", "all", "type", "local", "dev", "lo",
        ])
        .unwrap_or_default();
    let addrs = ns
        .run(&["ip", "-6", "-o", "addr", "show", "dev", "lo"])
        .unwrap_or_default();
    let addrs: String = addrs
        .lines()
        .map(|l| l.split_whitespace().take(4).collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    format!("{rules}{routes}{addrs}")
}

#[test]
fn rerun_changes_nothing_and_routes_are_not_duplicated() {
    require_root_and_nft();
    let c = case("tproxy");
    let ns = Ns::new("nft-rerun");
    let first = real_run(&ns, &c, &[]).expect("first run");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let (views, routes) = (ns.views().expect("views"), routing(&ns));
    assert!(routes.contains("fwmark 0x539 lookup 133"), "{routes}");
    assert!(routes.contains("::6/128"), "{routes}");
    let handles = ns.run(&["nft", "-a", "list", "ruleset"]).expect("list");
    let second = real_run(&ns, &c, &[]).expect("second run");
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(
        ns.views().expect("views"),
        views,
        "a rerun changed the ruleset"
    );
    assert_eq!(
        ns.run(&["nft", "-a", "list", "ruleset"]).expect("list"),
        handles,
        "a rerun re-created rules"
    );
    // A rule someone added to one of our chains makes the next run re-create the tables exactly.
    ns.run(&[
        "nft",
        "add",
        "rule",
        "inet",
        "istio-proxy-nat",
        "istio-output",
        "tcp",
        "dport",
        "4242",
        "accept",
    ])
    .expect("foreign rule");
    let third = real_run(&ns, &c, &[]).expect("third run");
    assert!(
        third.status.success(),
        "{}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert_eq!(
        ns.views().expect("views"),
        views,
        "the foreign rule survived"
    );
    // So does --force-apply, even with nothing to change.
    let forced = real_run(&ns, &c, &["--force-apply"]).expect("forced run");
    assert!(String::from_utf8_lossy(&forced.stderr).contains("ruleset applied"));
    assert_eq!(ns.views().expect("views"), views);
    assert_eq!(routing(&ns), routes, "a rerun changed the routing");
    assert_eq!(
        routes.matches("fwmark 0x539").count(),
        2,
        "one v4 and one v6 rule: {routes}"
    );
}

#[test]
fn a_smaller_configuration_leaves_no_stale_table() {
    require_root_and_nft();
    let ns = Ns::new("nft-shrink");
    let out = real_run(&ns, &case("tproxy"), &[]).expect("tproxy run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = ns.views().expect("views").0;
    assert!(
        list.contains("istio-proxy-mangle") && list.contains("istio-proxy-raw"),
        "{list}"
    );
    // Without --reconcile too: the tables are re-created every run.
    let out = real_run(&ns, &case("empty"), &[]).expect("empty run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fresh = Ns::new("nft-shrink-fresh");
    let out = real_run(&fresh, &case("empty"), &[]).expect("fresh run");
    assert!(out.status.success());
    assert_eq!(
        ns.views().expect("views"),
        fresh.views().expect("views"),
        "state differs from a fresh run"
    );
    let list = ns.views().expect("views").0;
    assert!(
        !list.contains("istio-proxy-mangle") && !list.contains("istio-proxy-raw"),
        "{list}"
    );
}

#[test]
fn cleanup_only_removes_our_tables_and_routes_and_nothing_else() {
    require_root_and_nft();
    let ns = Ns::new("nft-clean");
    ns.nft_load("add table inet foreign\nadd chain inet foreign c { type filter hook output priority 0 ; }\nadd rule inet foreign c counter accept\n")
        .expect("foreign table");
    ns.run(&["ip", "rule", "add", "fwmark", "7", "lookup", "77"])
        .expect("foreign rule");
    let before = (ns.views().expect("views"), routing(&ns));
    let c = case("tproxy");
    let out = real_run(&ns, &c, &[]).expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = real_run(&ns, &c, &["--cleanup-only"]).expect("cleanup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = ns.views().expect("views");
    assert_eq!(
        after, before.0,
        "cleanup left or removed something in nf_tables"
    );
    let routes = routing(&ns);
    assert!(!routes.contains("0x539"), "{routes}");
    assert!(routes.contains("fwmark 0x7 lookup 77"), "{routes}");
    // Cleanup of an empty namespace succeeds too.
    let empty = Ns::new("nft-clean-empty");
    let out = real_run(&empty, &c, &["--cleanup-only"]).expect("cleanup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(empty.views().expect("views").0, "");
}

#[test]
fn a_batch_refused_midway_leaves_the_namespace_as_it_was() {
    require_root_and_nft();
    let ns = Ns::new("nft-fail");
    let out = real_run(&ns, &case("empty"), &[]).expect("first run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A table of the same name owned by another process: nf_tables refuses our delete of it, a
    // message near the end of the batch.
    let mut holder = ns
        .command("nft")
        .arg("-i")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nft -i");
    {
        use std::io::Write as _;
        let stdin = holder.stdin.as_mut().expect("stdin");
        stdin
            .write_all(b"add table inet istio-proxy-raw { flags owner ; }\n")
            .expect("write");
        stdin.flush().expect("flush");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !ns
        .run(&["nft", "list", "tables"])
        .unwrap_or_default()
        .contains("istio-proxy-raw")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the owned table never appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let before = (ns.views().expect("views"), routing(&ns));
    let out = real_run(&ns, &case("tproxy"), &[]).expect("failing run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let after = (ns.views().expect("views"), routing(&ns));
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("add table inet istio-proxy-raw`: EPERM"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    // The routes (::6, the fwmark rules, the local routes) went in before the batch and were taken back.
    assert_eq!(after, before, "the failed run changed something");
}

#[test]
fn without_cap_net_admin_nothing_is_touched() {
    require_root_and_nft();
    let ns = Ns::new("nft-cap");
    let c = case("tproxy");
    let mut argv = vec![
        "setpriv".to_string(),
        "--inh-caps=-all".into(),
        "--bounding-set=-net_admin".into(),
    ];
    argv.push(iptables_init().to_string_lossy().into_owned());
    argv.extend(c.args.iter().cloned());
    argv.push("--native-nftables".into());
    let out = sandboxed(&ns, &argv, &c.env).output().expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("CAP_NET_ADMIN"), "{stderr}");
    assert_eq!(ns.views().expect("views").0, "");
    assert!(!routing(&ns).contains("::6/128"));
}

#[test]
fn normaliser_cuts_handles_and_set_numbers() {
    let s =
        "inet istio-proxy-nat istio-output 17 15\n  [ lookup reg 1 set __set12 0x1 ]\ninet t c 4\n  [ counter pkts 3 bytes 180 ]\n\t\tcounter packets 3 bytes 180 accept\n";
    assert_eq!(
        normalise_netlink(s),
        "inet istio-proxy-nat istio-output\n  [ lookup reg 1 set __setN 0x1 ]\ninet t c\n  [ counter ]\n\t\tcounter accept\n"
    );
    assert_ne!(
        normalise_netlink("[ cmp eq reg 1 0x1 ]"),
        normalise_netlink("[ cmp eq reg 1 0x2 ]")
    );
}

// Real traffic: a "pod" namespace and a "peer" namespace joined by a veth pair (pod `eth0`
// 10.10.0.1/24 + fd00::1/64, peer `eth0` 10.10.0.2/24 + 10.10.0.3/24 + fd00::2/64), rules applied with
// `--native-nftables` in the pod, real TCP/UDP sent with the `nettool` helper as an application uid
// (1000) or the proxy uid (1337).

const APP_UID: u32 = 1000;
const PROXY_UID: u32 = 1337;

/// The arguments Istio's injector writes for a default pod.
const INJECTED: &[&str] = &[
    "istio-iptables",
    "-p",
    "15001",
    "-z",
    "15006",
    "-u",
    "1337",
    "-m",
    "REDIRECT",
    "-i",
    "*",
    "-x",
    "",
    "-b",
    "*",
    "-d",
    "15090,15021,15020",
    "--native-nftables",
];

/// A binary of the workspace's debug build (`nettool` is the e2e crate's own).
fn bin(name: &str) -> PathBuf {
    if name == "iptables-init" {
        return iptables_init();
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("debug").join(name)
}

struct Pair {
    pod: Ns,
    peer: Ns,
}

impl Pair {
    fn new(name: &str) -> Pair {
        require_root_and_nft();
        let pod = Ns::new(&format!("{name}-pod"));
        let peer = Ns::new(&format!("{name}-peer"));
        pod.run(&[
            "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns",
            &peer.name,
        ])
        .expect("veth pair");
        for (ns, addrs) in [
            (&pod, &["10.10.0.1/24"][..]),
            (&peer, &["10.10.0.2/24", "10.10.0.3/24"][..]),
        ] {
            for a in addrs {
                ns.run(&["ip", "addr", "add", a, "dev", "eth0"])
                    .expect("v4 address");
            }
        }
        pod.run(&[
            "ip",
            "-6",
            "addr",
            "add",
            "fd00::1/64",
            "dev",
            "eth0",
            "nodad",
        ])
        .expect("v6");
        peer.run(&[
            "ip",
            "-6",
            "addr",
            "add",
            "fd00::2/64",
            "dev",
            "eth0",
            "nodad",
        ])
        .expect("v6");
        for ns in [&pod, &peer] {
            ns.run(&["ip", "link", "set", "eth0", "up"])
                .expect("eth0 up");
        }
        Pair { pod, peer }
    }
}

fn init(ns: &Ns, args: &[&str]) -> Output {
    let out = ns
        .command(iptables_init())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("iptables-init");
    eprintln!(
        "iptables-init {args:?} -> {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn init_ok(ns: &Ns, args: &[&str]) {
    let out = init(ns, args);
    assert!(
        out.status.success(),
        "iptables-init {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = INJECTED.to_vec();
    v.extend_from_slice(extra);
    v
}

fn nettool(ns: &Ns, uid: Option<u32>, args: &[&str]) -> Command {
    let tool = bin("nettool");
    let mut cmd = match uid {
        Some(uid) => {
            let mut c = ns.command("setpriv");
            let u = uid.to_string();
            c.args(["--reuid", &u, "--regid", &u, "--clear-groups"])
                .arg(tool);
            c
        }
        None => ns.command(tool),
    };
    cmd.args(args);
    cmd
}

/// A running `nettool listen-*`, ready once constructed.
struct Listener {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl Listener {
    fn start(ns: &Ns, args: &[&str]) -> Listener {
        Listener::start_as(ns, None, args)
    }

    fn start_as(ns: &Ns, uid: Option<u32>, args: &[&str]) -> Listener {
        use std::io::BufRead as _;
        let mut all = args.to_vec();
        all.extend(["--timeout-ms", "4000"]);
        let mut child = nettool(ns, uid, &all)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn listener");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = std::io::BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        assert_eq!(first, "READY", "listener {args:?} did not start");
        Listener { child, lines }
    }

    /// The event the listener reports (`ACCEPTED ...`, `RECEIVED ...` or `TIMEOUT`).
    fn event(mut self) -> String {
        let line = self.lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = self.child.wait();
        line
    }

    /// Stops a listener that must have seen nothing; returns what it saw.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let rest: Vec<String> = self.lines.by_ref().map_while(Result::ok).collect();
        rest.join("\n")
    }
}

/// Runs a `nettool` client: (exit code, its line).
fn client(ns: &Ns, uid: Option<u32>, args: &[&str]) -> (i32, String) {
    let out = nettool(ns, uid, args)
        .stdin(Stdio::null())
        .output()
        .expect("client");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.code().unwrap_or(-1), line)
}

#[test]
fn traffic_outbound_goes_to_15001_with_its_original_destination_and_the_proxy_uid_is_not_redirected(
) {
    let p = Pair::new("nft-a");
    init_ok(&p.pod, &with(&["--ipv6", "false"]));
    let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
    let peer = Listener::start(&p.peer, &["listen-tcp", "10.10.0.2:8080"]);
    let (code, line) = client(&p.pod, Some(APP_UID), &["connect-tcp", "10.10.0.2:8080"]);
    assert_eq!(code, 0, "{line}");
    let ev = proxy.event();
    assert!(
        ev.starts_with("ACCEPTED") && ev.contains("orig=10.10.0.2:8080"),
        "{ev}"
    );
    assert_eq!(
        peer.stop(),
        "",
        "the app's connection reached the peer uncaptured"
    );

    let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
    let peer = Listener::start(&p.peer, &["listen-tcp", "10.10.0.2:8080"]);
    let (code, line) = client(&p.pod, Some(PROXY_UID), &["connect-tcp", "10.10.0.2:8080"]);
    assert_eq!(code, 0, "{line}");
    let ev = peer.event();
    assert!(ev.starts_with("ACCEPTED peer=10.10.0.1:"), "{ev}");
    assert_eq!(proxy.stop(), "", "the proxy's own connection was captured");

    // After --cleanup-only nothing is captured any more.
    init_ok(&p.pod, &with(&["--ipv6", "false", "--cleanup-only"]));
    let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
    let peer = Listener::start(&p.peer, &["listen-tcp", "10.10.0.2:8080"]);
    let (code, line) = client(&p.pod, Some(APP_UID), &["connect-tcp", "10.10.0.2:8080"]);
    assert_eq!(code, 0, "{line}");
    assert!(
        peer.event().starts_with("ACCEPTED"),
        "not direct after cleanup"
    );
    assert_eq!(proxy.stop(), "", "captured after cleanup");
}

#[test]
fn traffic_inbound_goes_to_15006_and_an_excluded_port_does_not() {
    let p = Pair::new("nft-b");
    init_ok(&p.pod, &with(&["--ipv6", "false"]));
    let inbound = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15006"]);
    let (code, line) = client(&p.peer, None, &["connect-tcp", "10.10.0.1:8080"]);
    assert_eq!(code, 0, "{line}");
    let ev = inbound.event();
    assert!(
        ev.starts_with("ACCEPTED peer=10.10.0.2:") && ev.contains("orig=10.10.0.1:8080"),
        "{ev}"
    );

    let inbound = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15006"]);
    let direct = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15090"]);
    let (code, line) = client(&p.peer, None, &["connect-tcp", "10.10.0.1:15090"]);
    assert_eq!(code, 0, "{line}");
    let ev = direct.event();
    assert!(
        ev.starts_with("ACCEPTED") && ev.contains("local=10.10.0.1:15090"),
        "{ev}"
    );
    assert_eq!(inbound.stop(), "", "an excluded inbound port was captured");
}

#[test]
fn traffic_excluded_outbound_cidr_and_port_bypass_the_proxy() {
    let p = Pair::new("nft-c");
    init_ok(
        &p.pod,
        &[
            "-p",
            "15001",
            "-z",
            "15006",
            "-u",
            "1337",
            "-m",
            "REDIRECT",
            "-i",
            "*",
            "-x",
            "10.10.0.3/32",
            "-b",
            "*",
            "-o",
            "9090",
            "--ipv6",
            "false",
            "--native-nftables",
        ],
    );
    for (target, listen) in [
        ("10.10.0.3:8080", "10.10.0.3:8080"),
        ("10.10.0.2:9090", "10.10.0.2:9090"),
    ] {
        let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
        let peer = Listener::start(&p.peer, &["listen-tcp", listen]);
        let (code, line) = client(&p.pod, Some(APP_UID), &["connect-tcp", target]);
        assert_eq!(code, 0, "{target}: {line}");
        let ev = peer.event();
        assert!(
            ev.starts_with("ACCEPTED"),
            "{target} did not bypass the proxy: {ev}"
        );
        assert_eq!(proxy.stop(), "", "{target} was captured");
    }
    // Control: anything else is still captured.
    let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
    let (code, line) = client(&p.pod, Some(APP_UID), &["connect-tcp", "10.10.0.2:8080"]);
    assert_eq!(code, 0, "{line}");
    assert!(proxy.event().contains("orig=10.10.0.2:8080"));
}

#[test]
fn traffic_dns_to_the_configured_server_goes_to_15053() {
    let p = Pair::new("nft-d");
    init_ok(
        &p.pod,
        &with(&[
            "--ipv6",
            "false",
            "--redirect-dns",
            "--dns-servers",
            "10.10.0.2",
        ]),
    );
    // The agent runs as the proxy uid, so its replies use conntrack zone 2 like the app's NATed query.
    let agent = Listener::start_as(&p.pod, Some(PROXY_UID), &["listen-udp", "127.0.0.1:15053"]);
    let server = Listener::start(&p.peer, &["listen-udp", "10.10.0.2:53"]);
    let (code, line) = client(&p.pod, Some(APP_UID), &["send-udp", "10.10.0.2:53"]);
    let ev = agent.event();
    assert!(ev.starts_with("RECEIVED"), "DNS was not captured: {ev}");
    assert_eq!(code, 0, "no reply: {line}");
    assert!(
        line.contains("peer=10.10.0.2:53"),
        "the reply was not un-NATed: {line}"
    );
    assert_eq!(server.stop(), "", "the query reached the real server");
}

#[test]
fn traffic_tproxy_inbound_reaches_a_transparent_listener_and_a_rerun_changes_nothing() {
    let p = Pair::new("nft-e");
    let args: Vec<&str> = with(&["--ipv6", "false"])
        .into_iter()
        .map(|a| if a == "REDIRECT" { "TPROXY" } else { a })
        .collect();
    init_ok(&p.pod, &args);
    let rules = p.pod.run(&["ip", "-4", "rule", "show"]).expect("ip rule");
    assert_eq!(
        rules.matches("fwmark 0x539 lookup 133").count(),
        1,
        "{rules}"
    );
    let routes = p
        .pod
        .run(&["ip", "-4", "route", "show", "table", "133"])
        .expect("ip route");
    assert!(routes.contains("local default dev lo"), "{routes}");

    let inbound = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15006", "--transparent"]);
    let (code, line) = client(&p.peer, None, &["connect-tcp", "10.10.0.1:8080"]);
    assert_eq!(code, 0, "{line}");
    assert!(line.contains("reply=hello"), "{line}");
    let ev = inbound.event();
    assert!(
        ev.starts_with("ACCEPTED peer=10.10.0.2:") && ev.contains("local=10.10.0.1:8080"),
        "{ev}"
    );

    // The counters have counted the connection; a rerun leaves them (and the handles) as they are.
    let listing = |ns: &Ns| ns.run(&["nft", "-a", "list", "ruleset"]).expect("list");
    let before = (listing(&p.pod), routing(&p.pod));
    assert!(
        !before.0.contains("istio-tproxy") || before.0.contains("packets 1 "),
        "{}",
        before.0
    );
    init_ok(&p.pod, &args);
    assert_eq!(
        (listing(&p.pod), routing(&p.pod)),
        before,
        "a rerun changed something"
    );
}

#[test]
fn traffic_ipv6_outbound_and_inbound() {
    let p = Pair::new("nft-f");
    init_ok(&p.pod, &with(&["--ipv6", "true"]));
    let proxy = Listener::start(&p.pod, &["listen-tcp", "[::]:15001"]);
    let (code, line) = client(&p.pod, Some(APP_UID), &["connect-tcp", "[fd00::2]:8080"]);
    assert_eq!(code, 0, "{line}");
    let ev = proxy.event();
    assert!(ev.contains("orig=[fd00::2]:8080"), "{ev}");

    let inbound = Listener::start(&p.pod, &["listen-tcp", "[::]:15006"]);
    let (code, line) = client(&p.peer, None, &["connect-tcp", "[fd00::1]:8080"]);
    assert_eq!(code, 0, "{line}");
    let ev = inbound.event();
    assert!(
        ev.starts_with("ACCEPTED peer=[fd00::2]:") && ev.contains("orig=[fd00::1]:8080"),
        "{ev}"
    );
}

#[test]
fn run_validation_passes_after_a_native_apply() {
    require_root_and_nft();
    for (ipv6, probe) in [("false", "127.0.0.6:15002"), ("true", "[::6]:15002")] {
        // One run that applies and validates, as the proxy uid with CAP_NET_ADMIN (the probe is only
        // captured for the proxy uid).
        let ns = Ns::new("nft-val");
        let u = PROXY_UID.to_string();
        let out = ns
            .command("setpriv")
            .args([
                "--reuid",
                &u,
                "--regid",
                &u,
                "--clear-groups",
                "--inh-caps=+net_admin",
                "--ambient-caps=+net_admin",
            ])
            .arg(iptables_init())
            .args(with(&[
                "--ipv6",
                ipv6,
                "--run-validation",
                "--probe-timeout=2s",
            ]))
            .stdin(Stdio::null())
            .output()
            .expect("validation run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains(probe), "{err}");
        assert!(ns.views().expect("views").0.contains("istio-proxy-nat"));
        // Without the rules the same validation fails with 126.
        init_ok(&ns, &with(&["--ipv6", ipv6, "--cleanup-only"]));
        let out = ns
            .command("setpriv")
            .args(["--reuid", &u, "--regid", &u, "--clear-groups"])
            .arg(iptables_init())
            .args(with(&[
                "--ipv6",
                ipv6,
                "--run-validation",
                "--skip-rule-apply",
                "--probe-timeout=1s",
            ]))
            .stdin(Stdio::null())
            .output()
            .expect("validation run");
        assert_eq!(
            out.status.code(),
            Some(126),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Configurations beyond the public goldens (partial-byte and `/0` prefixes, capture-all DNS, `-o`/`-q`
/// ports, TPROXY variants, empty `-b`, a batch beyond the default socket buffers): a real run gives what `nft -f` makes of our own dry run, so
/// the encoder compiles every statement as nft does.
#[test]
fn real_runs_equal_nft_compiling_our_dry_run_beyond_the_goldens() {
    require_root_and_nft();
    let configs: &[&[&str]] = &[
        &["-u", "1337", "-m", "TPROXY", "-b", "", "--ipv6", "true"],
        &["-u", "1337", "-b", ",", "--ipv6", "false"],
        &[
            "-u",
            "1337",
            "--redirect-dns",
            "--capture-all-dns",
            "--ipv6",
            "true",
        ],
        &[
            "-u",
            "1337",
            "-o",
            "9090,9091",
            "-q",
            "80,443",
            "-i",
            "*",
            "--ipv6",
            "true",
        ],
        &[
            "-u",
            "1337",
            "-i",
            "10.16.0.0/12,2001:db8::/33",
            "-x",
            "0.0.0.0/0,10.0.0.1/31,::/0",
            "-k",
            "eth0",
            "--ipv6",
            "true",
        ],
        &["-u", "1337", "-i", "127.0.0.1/32", "--ipv6", "false"],
        &[
            "-u",
            "1337,1338",
            "-g",
            "1337",
            "-m",
            "TPROXY",
            "-b",
            "80,81",
            "-c",
            "eth9",
            "--drop-invalid",
            "-t",
            "7",
            "-r",
            "70",
            "--ipv6",
            "true",
        ],
        &[
            "-u",
            "1337",
            "-b",
            "*",
            "-d",
            "15090,15021",
            "-m",
            "TPROXY",
            "--redirect-dns",
            "--dns-servers",
            "10.0.0.10,fd00::10",
            "-k",
            "eth1",
            "-i",
            "*",
            "--ipv6",
            "true",
        ],
    ];
    let mut all: Vec<Vec<String>> = configs
        .iter()
        .map(|a| a.iter().map(|s| s.to_string()).collect())
        .collect();
    // A batch larger than the default socket buffers (about 1500 messages).
    let many: Vec<String> = (0..1500)
        .map(|i| format!("10.{}.{}.0/24", i / 250, i % 250))
        .collect();
    all.push(
        ["-u", "1337", "-i", "*", "--ipv6", "false", "-x"]
            .iter()
            .map(|s| s.to_string())
            .chain([many.join(",")])
            .collect(),
    );
    let mut failures = Vec::new();
    for args in &all {
        let case = Case {
            name: "extra".into(),
            args: args.clone(),
            env: Vec::new(),
        };
        let result = (|| -> Result<()> {
            let out = ours(&case, &["--dry-run"]).output()?;
            ensure!(
                out.status.success(),
                "dry run: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = transaction_of(&String::from_utf8(out.stdout)?);
            let d = Ns::new("nftx-d");
            d.nft_load(&text).context("nft -f of our dry run")?;
            let r = Ns::new("nftx-r");
            let out = real_run(&r, &case, &[])?;
            ensure!(
                out.status.success(),
                "real run: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            compare(
                "real run vs nft -f of the dry run",
                &r.views()?,
                &d.views()?,
            )
        })();
        if let Err(e) = result {
            let shown: Vec<&str> = args
                .iter()
                .map(|a| if a.len() > 80 { &a[..80] } else { a })
                .collect();
            failures.push(format!("{shown:?}: {e:#}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
