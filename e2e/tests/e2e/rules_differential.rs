//! The rules differential in CI: a fixed seed's cases through Istio's own
//! `pilot-agent istio-iptables` and `iptables-init istio-iptables` (see `e2e::rules_differential`), with
//! no unexplained difference. `scripts/differential.sh` runs more by hand.

use e2e::rules_differential::{self, run_cases, Programs};

/// The CI seed and case count: a few hundred cases, about a minute on the 2-core machine.
const SEED: u64 = 21;
const CASES: u64 = 300;

#[test]
fn generated_configurations_match_istio() {
    rules_differential::require_root();
    let programs = Programs::built();
    let tally = run_cases(&programs, SEED, 0..CASES, 20, None).expect("the differential ran");
    eprintln!("{tally}");
    let report: Vec<String> = tally.differences.iter().map(ToString::to_string).collect();
    assert!(report.is_empty(), "{}\n{tally}", report.join("\n"));
    // Guard against a vacuous pass: most cases are accepted by both and compared rule by rule, and
    // both backends and real applies were exercised.
    assert_eq!(tally.cases, CASES);
    assert!(tally.same - tally.both_refused > CASES / 3, "{tally}");
    assert!(tally.own.nftables > 10 && tally.own.applied > 5, "{tally}");
}

/// Found by the differential: with `--skip-rule-apply`, Istio's `ProgramIptables` / `ProgramNftables`
/// skip everything, so a dry run prints nothing and writes no `DRY_RUN_FILE_PATH` record.
#[test]
fn a_dry_run_with_skip_rule_apply_records_and_prints_nothing() {
    let dir = test_support::TempDir::new("rdiff-skip");
    for backend in [&[][..], &["--native-nftables"][..]] {
        let record = dir.path().join("record");
        let out = test_support::process::run_ok(
            std::process::Command::new(e2e::bin("iptables-init"))
                .args(["istio-iptables", "-p", "15001", "-u", "1337"])
                .args(["--ipv6", "false"])
                .args(backend)
                .args(["--skip-rule-apply", "--dry-run"])
                .env("DRY_RUN_FILE_PATH", &record),
            "iptables-init",
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{backend:?}");
        assert!(!record.exists(), "{backend:?}: a record was written");
    }
}

/// Istio's iptables goldens (`testdata/istio/iptables/`) against the pinned `pilot-agent` itself: each
/// row of `cases.tsv` with its surroundings flags turned into what Istio reads (`--ipv6 false|true`: a
/// namespace with only an IPv4 or only an IPv6 address; `--dns-servers`: the namespace's resolv.conf),
/// run as `pilot-agent istio-iptables ... --dry-run`; its record must be the golden's text (normalised
/// as the differential does). `testdata/istio/README.md` lists the cases where they disagree:
/// `KNOWN_DISAGREEMENTS`.
#[test]
fn the_pinned_istio_writes_the_iptables_goldens() {
    use e2e::rules_differential::generate::Addresses;
    use e2e::rules_differential::{normalise, Prepared};
    const KNOWN_DISAGREEMENTS: &[&str] = &[];
    test_support::root::require_root();
    let agent = e2e::peers::peer("pilot-agent");
    let dir = test_support::corpus::iptables_dir();
    let cases = test_support::corpus::load_run_cases(&dir).expect("cases.tsv");
    let mut disagree = Vec::new();
    for case in &cases {
        let mut args = Vec::new();
        let (mut addresses, mut resolv) = (Addresses::V4, String::new());
        let mut it = case.args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--ipv6" => {
                    let v = it.next().expect("--ipv6 value");
                    addresses = if v == "true" {
                        Addresses::V6
                    } else {
                        Addresses::V4
                    };
                }
                "--dns-servers" => {
                    let v = it.next().expect("--dns-servers value");
                    for server in v.split(',').filter(|s| !s.is_empty()) {
                        resolv.push_str(&format!("nameserver {server}\n"));
                    }
                }
                _ => args.push(a.clone()),
            }
        }
        let p = Prepared::with("rdiff-gold", addresses, &resolv).expect("namespace");
        let record =
            std::env::temp_dir().join(format!("rdiff-gold-{}-{}", std::process::id(), case.name));
        let out =
            p.ns.command(&agent)
                .arg("istio-iptables")
                .args(&args)
                .arg("--dry-run")
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("DRY_RUN_FILE_PATH", &record)
                .envs(case.env.iter().map(|(k, v)| (k, v)))
                .current_dir(std::env::temp_dir())
                .output()
                .expect("run pilot-agent");
        let text = std::fs::read_to_string(&record).unwrap_or_default();
        let _ = std::fs::remove_file(&record);
        assert!(
            out.status.success(),
            "{}: {}",
            case.name,
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(text.contains("* nat"), "{}: no record written", case.name);
        let golden = case.golden_text(&dir).expect("golden");
        if normalise::record(&text) != normalise::record(&golden) {
            disagree.push(case.name.clone());
        }
    }
    assert!(cases.len() >= 16, "{} cases", cases.len());
    assert_eq!(
        disagree, KNOWN_DISAGREEMENTS,
        "cases where the pinned Istio and its golden disagree"
    );
}
