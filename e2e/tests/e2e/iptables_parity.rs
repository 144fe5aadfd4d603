//! Parity with Istio golden files: the kernel state from our --dry-run equals that from the goldens.
//!
//! For every row of `testdata/istio/iptables/cases.tsv`: run `iptables-init <args> --dry-run`
//! with the row's environment, apply its IPv4 and IPv6 parts with `iptables-restore --noflush` /
//! `ip6tables-restore --noflush` in a fresh network namespace; apply Istio's golden (converted as the
//! README says) in a second namespace; compare the two namespaces' `iptables-save` / `ip6tables-save`
//! dumps table by table: the chains and each chain's ordered rules, comments and counters ignored.
//! Netfilter canonicalises spelling (`--to-port`, `::127.0.0.53`), so equal dumps mean equal behaviour.
//! Each run also sets `DRY_RUN_FILE_PATH`, whose record must be the golden file's text itself.

use std::process::Command;

use anyhow::{ensure, Context as _, Result};
use e2e::netns::{Family, NetNs};
// Save dumps as table → chain → ordered rules, declared chains included (the rules differential's parser).
use e2e::rules_differential::normalise::{save_chains as parse_dump, Dump};
use test_support::corpus::{load_run_cases, RunCase};
use test_support::groups::ensure_groups;
use test_support::istio_init::{self, injected_args_with};

/// Istio's golden as restore inputs (v4, v6), converted as docs/iptables-init.md says.
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

fn run_case(dir: &std::path::Path, case: &RunCase) -> Result<()> {
    ensure_groups(case.named_groups())?;
    let golden = case.golden_text(dir)?;
    let (gold_v4, gold_v6) = golden_parts(&golden);

    let record = std::env::temp_dir().join(format!(
        "iptables-init-record-{}-{}",
        std::process::id(),
        case.name
    ));
    let mut cmd = Command::new(e2e::bin("iptables-init"));
    cmd.args(&case.args)
        .arg("--dry-run")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("DRY_RUN_FILE_PATH", &record)
        .envs(case.env.iter().map(|(k, v)| (k, v)));
    let out = cmd.output().context("running iptables-init")?;
    ensure!(
        out.status.success(),
        "iptables-init --dry-run failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // DRY_RUN_FILE_PATH: what Istio's recording stub writes, which is the golden file itself.
    let recorded = std::fs::read_to_string(&record)
        .with_context(|| format!("DRY_RUN_FILE_PATH {} not written", record.display()));
    let _ = std::fs::remove_file(&record);
    same_record(&recorded?, &golden).context("DRY_RUN_FILE_PATH record vs the golden file")?;
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

/// The `DRY_RUN_FILE_PATH` record equals Istio's golden text (trailing whitespace trimmed, as Istio's
/// test compares), line for line; a word may differ only in the spelling of the same address
/// (`::127.0.0.53/128` is `::7f00:35/128`: the CLI cannot reproduce the spelling Istio's `TestIptables` in
/// `tools/istio-iptables/pkg/capture/run_test.go` sets directly in its config).
fn same_record(ours: &str, golden: &str) -> Result<()> {
    let (ours, golden) = (ours.trim_end(), golden.trim_end());
    let (a, b): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), golden.lines().collect());
    ensure!(
        a.len() == b.len(),
        "{} lines recorded, the golden has {}",
        a.len(),
        b.len()
    );
    let same_address = |x: &str, y: &str| {
        let parse = |w: &str| {
            let (addr, len) = w.split_once('/')?;
            Some((addr.parse::<std::net::IpAddr>().ok()?, len.to_string()))
        };
        matches!((parse(x), parse(y)), (Some(p), Some(q)) if p == q)
    };
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let (wx, wy): (Vec<&str>, Vec<&str>) = (x.split(' ').collect(), y.split(' ').collect());
        let same = wx.len() == wy.len()
            && wx
                .iter()
                .zip(&wy)
                .all(|(p, q)| p == q || same_address(p, q));
        ensure!(same, "line {}: recorded {x:?}, golden {y:?}", i + 1);
    }
    Ok(())
}

#[test]
fn an_unwritable_dry_run_file_is_an_error_naming_it() {
    let out = Command::new(e2e::bin("iptables-init"))
        .args([
            "-p",
            "15001",
            "-u",
            "1337",
            "-g",
            "1337",
            "--ipv6",
            "false",
            "--dry-run",
        ])
        .env("DRY_RUN_FILE_PATH", "/nonexistent-dir/record")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("DRY_RUN_FILE_PATH=/nonexistent-dir/record"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing printed after the failure");
}

#[test]
fn record_comparison_allows_only_address_spelling() {
    let g = "iptables-save\n-A X -d ::127.0.0.53/128 -j RETURN\n";
    assert!(same_record("iptables-save\n-A X -d ::7f00:35/128 -j RETURN\n", g).is_ok());
    assert!(same_record("iptables-save\n-A X -d ::7f00:36/128 -j RETURN\n", g).is_err());
    assert!(same_record("iptables-save\n-A X -d ::7f00:35/64 -j RETURN\n", g).is_err());
    assert!(same_record("iptables-save\n", g).is_err());
    assert!(same_record("iptables-save\n-A X -d ::127.0.0.53/128 -j RETURN", g).is_ok());
}

#[test]
fn every_golden_case_yields_the_same_kernel_state() {
    test_support::require_root();
    let dir = test_support::corpus::iptables_dir();
    let cases = load_run_cases(&dir).expect("cases.tsv");
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
fn golden_split_at_second_table() {
    let g = "iptables-save\nip6tables-save\n* nat\n-N A\n-A A -j RETURN\nCOMMIT\n* raw\nCOMMIT\n* nat\n-N B\nCOMMIT\niptables-save\n";
    let (v4, v6) = golden_parts(g);
    assert_eq!(
        v4,
        "*nat\n:A - [0:0]\n-A A -j RETURN\nCOMMIT\n*raw\nCOMMIT\n"
    );
    assert_eq!(v6, "*nat\n:B - [0:0]\nCOMMIT\n");
}

/// The command line beyond the goldens: configurations no golden covers are valid netfilter input,
/// `--dry-run` needs no privilege, detection reads the namespace, and bad input stops before anything.
mod cli {
    use super::*;
    use std::os::unix::process::CommandExt as _;

    /// Runs the binary (outside any namespace) with a clean environment.
    fn dry_run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        Command::new(e2e::bin("iptables-init"))
            .args(args)
            .arg("--dry-run")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(env.iter().copied())
            .output()
            .expect("running iptables-init")
    }

    fn stdout(out: &std::process::Output) -> String {
        assert!(
            out.status.success(),
            "iptables-init failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Configurations that no golden of Istio's `TestIptables` (`run_test.go`) covers, and other option
    /// mixes, each without and with IPv6: the kernel accepts every part of the dry-run output.
    #[test]
    fn uncovered_configurations_are_accepted_by_the_kernel() {
        test_support::require_root();
        let configs: &[&[&str]] = &[
            &["-u", "1337", "-o", "7777,8888", "-i", "*"],
            &[
                "-u",
                "1337",
                "-b",
                "*",
                "-d",
                "15090,15021,15020",
                "-i",
                "*",
            ],
            &["-u", "1337", "-m", "TPROXY", "-b", "*", "-d", "15090"],
            &[
                "-u",
                "1337",
                "--redirect-dns",
                "--capture-all-dns",
                "-i",
                "*",
            ],
            &[
                "-u",
                "1337",
                "-c",
                "ex0,ex1",
                "-k",
                "kv0,kv1",
                "-i",
                "10.0.0.0/8,fd00::/8",
            ],
            &["-u", "1337", "--redirect-dns", "--dns-servers", "fd00::53"],
            &[
                "-u",
                "1337",
                "--drop-invalid",
                "-m",
                "TPROXY",
                "-b",
                "80,443",
                "-c",
                "ex0",
            ],
            &[
                "-u",
                "1,2",
                "-g",
                "3",
                "-q",
                "25",
                "-x",
                "10.1.0.0/16,fd01::/16",
                "-i",
                "127.0.0.1/32",
            ],
            &[
                "-u",
                "1337",
                "--outbound-owner-groups-exclude",
                "0,1",
                "--host-ipv4-loopback-cidr",
                "127.0.0.0/8",
            ],
            &["-u", "1337", "--outbound-owner-groups", ""],
        ];
        let runs = configs
            .iter()
            .flat_map(|c| ["false", "true"].map(|ipv6| [*c, &["--ipv6", ipv6]].concat()));
        for args in runs {
            let out = stdout(&dry_run(&args, &[]));
            let (v4, v6) = dry_run_parts(&out);
            let ns = NetNs::new("ipt-cfg").expect("netns");
            ns.restore(Family::V4, &v4)
                .unwrap_or_else(|e| panic!("{args:?}: v4 rejected: {e:#}\n{v4}"));
            if !v6.is_empty() {
                ns.restore(Family::V6, &v6)
                    .unwrap_or_else(|e| panic!("{args:?}: v6 rejected: {e:#}\n{v6}"));
            }
            let dump = parse_dump(&ns.save(Family::V4).expect("save"));
            assert!(
                dump.get("nat")
                    .is_some_and(|t| t.contains_key("ISTIO_OUTPUT")),
                "{args:?}: nothing applied"
            );
        }
    }

    /// `--dry-run` touches nothing and needs no privilege: it works as `nobody`, with Istio's
    /// injected arguments, in both families.
    #[test]
    fn dry_run_works_as_an_ordinary_user() {
        test_support::require_root();
        let injected = injected_args_with(&[], &[istio_init::DEFAULT_LOG_LEVEL_ARG, "--dry-run"]);
        for (ipv6, marker) in [("false", false), ("true", true)] {
            let out = Command::new(e2e::bin("iptables-init"))
                .args(&injected)
                .args(["--ipv6", ipv6])
                .env_clear()
                .uid(65534)
                .gid(65534)
                .output()
                .expect("running iptables-init as nobody");
            let text = stdout(&out);
            assert!(text.starts_with("* nat\n"), "{text}");
            assert!(text.contains("-A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN"));
            assert_eq!(text.contains("# ip6tables-restore\n"), marker, "{text}");
        }
    }

    /// `--ipv6 auto` decides from the namespace's addresses, as Istio does.
    #[test]
    fn ipv6_auto_detection_reads_the_namespace() {
        test_support::require_root();
        let bin = e2e::bin("iptables-init");
        let run = |ns: &NetNs, extra: &[&str]| {
            ns.command(&bin)
                .args(["-u", "1337", "--dry-run"])
                .args(extra)
                .env_clear()
                .output()
                .expect("running iptables-init")
        };
        let ns = NetNs::new("ipt-detect").expect("netns");
        // Only loopback: Istio's "no valid local IP address found", exit 1.
        let out = run(&ns, &[]);
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("no valid local IP address"));
        assert!(out.stdout.is_empty());
        // Explicit --ipv6 needs no address.
        assert!(run(&ns, &["--ipv6", "false"]).status.success());
        // An IPv6 address only: IPv6 on.
        ns.run(&["ip", "addr", "add", "fd00::1/128", "dev", "lo", "nodad"])
            .expect("addr6");
        assert!(stdout(&run(&ns, &[])).contains("# ip6tables-restore\n"));
        // IPv4 comes first in the kernel's dump: IPv4 only, unless --dual-stack.
        ns.run(&["ip", "addr", "add", "240.240.240.240/32", "dev", "lo"])
            .expect("addr4");
        assert!(!stdout(&run(&ns, &[])).contains("ip6tables"));
        let dual = stdout(&run(&ns, &["--dual-stack"]));
        assert!(
            dual.contains("# ip6tables-restore\n")
                && dual.contains("# ip -6 addr add ::6/128 dev lo\n")
        );
    }

    /// Arguments, environment, expected exit status, texts the error must contain.
    type BadInput<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32, &'a [&'a str]);

    /// Invalid input exits with Istio's status and a message naming the flag and value, and the
    /// namespace is untouched (the run is not a dry run).
    #[test]
    fn invalid_input_stops_before_touching_anything() {
        test_support::require_root();
        let ns = NetNs::new("ipt-invalid").expect("netns");
        let bin = e2e::bin("iptables-init");
        let cases: &[BadInput] = &[
            (
                &["-i", "10.0.0.0/33"],
                &[],
                1,
                &["-i/--istio-service-cidr", "10.0.0.0/33"],
            ),
            (&["-x", "*"], &[], 1, &["-x/--istio-service-exclude-cidr"]),
            (&["-p", "70000"], &[], 1, &["-p/--envoy-port", "70000"]),
            (
                &["-b", "80,http"],
                &[],
                1,
                &["-b/--istio-inbound-ports", "http"],
            ),
            (
                &["-m", "tproxy"],
                &[],
                1,
                &["-m/--istio-inbound-interception-mode", "tproxy"],
            ),
            (
                &["-c", "eth0;x"],
                &[],
                1,
                &["-c/--istio-exclude-interfaces"],
            ),
            (&["-u", "root"], &[], 1, &["-u/--proxy-uid", "root"]),
            (
                &[],
                &[("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR", "10.0.0.1/32")],
                1,
                &["ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR"],
            ),
            (
                &[],
                &[("FORCE_IPTABLES_BINARY", "iptables")],
                1,
                &["FORCE_IPTABLES_BINARY"],
            ),
            (&["--no-such-flag"], &[], 255, &["--no-such-flag"]),
            (&["--dry-run=maybe"], &[], 255, &["maybe"]),
            (
                &["--log_output_level=default:loud"],
                &[],
                255,
                &["log_output_level"],
            ),
        ];
        for (args, env, code, needles) in cases {
            let out = ns
                .command(&bin)
                .args(["-u", "1337", "--ipv6", "false"])
                .args(*args)
                .env_clear()
                .envs(env.iter().copied())
                .output()
                .expect("running iptables-init");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(*code), "{args:?} {env:?}: {stderr}");
            for n in *needles {
                assert!(
                    stderr.contains(n),
                    "{args:?} {env:?}: {n:?} not in {stderr}"
                );
            }
            assert!(out.stdout.is_empty(), "{args:?}: printed {:?}", out.stdout);
        }
        for family in [Family::V4, Family::V6] {
            let save = ns.save(family).expect("save");
            assert!(!save.contains("ISTIO"), "{family:?} touched: {save}");
        }
    }
}
