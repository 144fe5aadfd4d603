//! Apply against real netfilter, in a private network namespace per test (the test thread unshares its
//! netns; the iptables processes it spawns inherit it). Needs root: fails loudly, never skips.

use std::process::Command;

use super::*;
use crate::iptables::model::Table;
use crate::routes::RouteAction;
use test_support::process::run_ok;

pub(crate) fn in_fresh_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    assert!(
        nix::unistd::geteuid().is_root(),
        "apply tests need root (network namespaces, netfilter); they never skip"
    );
    std::thread::spawn(move || {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare(CLONE_NEWNET)");
        let st = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("ip link");
        assert!(st.success());
        f()
    })
    .join()
    .expect("test thread panicked")
}

pub(crate) fn sh(script: &str) -> String {
    let out = run_ok(Command::new("sh").args(["-c", script]), script);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `iptables-save` without the comment lines (which carry timestamps).
fn state(bin: &str) -> String {
    sh(bin)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn rules(lines: &[(Table, &str)]) -> Vec<Rule> {
    lines
        .iter()
        .map(|(table, line)| {
            let tokens: Vec<String> = line.split(' ').map(str::to_string).collect();
            Rule {
                table: *table,
                chain: tokens[1].clone(),
                tokens,
            }
        })
        .collect()
}

/// A plan of IPv4 rules alone: no IPv6 rules, no routes.
fn v4_only(v4: Vec<Rule>) -> Plan {
    Plan {
        v4,
        v6: None,
        routes: vec![],
    }
}

/// The default injected configuration (what Istio's injection template gives `istio-init`), optionally
/// with an excluded inbound port list.
pub(super) fn default_rules(exclude: &[&str]) -> Vec<Rule> {
    let mut v = vec![
        (
            Table::Nat,
            "-A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN".to_string(),
        ),
        (
            Table::Nat,
            "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001".to_string(),
        ),
        (
            Table::Nat,
            "-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006".to_string(),
        ),
        (
            Table::Nat,
            "-A PREROUTING -p tcp -j ISTIO_INBOUND".to_string(),
        ),
    ];
    for p in exclude {
        v.push((
            Table::Nat,
            format!("-A ISTIO_INBOUND -p tcp --dport {p} -j RETURN"),
        ));
    }
    for l in [
        "-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT",
        "-A OUTPUT -j ISTIO_OUTPUT",
        "-A ISTIO_OUTPUT -o lo -s 127.0.0.6/32 -j RETURN",
        "-A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT",
        "-A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN",
        "-A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN",
        "-A ISTIO_OUTPUT -d 127.0.0.1/32 -j RETURN",
        "-A ISTIO_OUTPUT -j ISTIO_REDIRECT",
        "-I PREROUTING 1 -i eth7 -j RETURN",
    ] {
        v.push((Table::Nat, l.to_string()));
    }
    v.push((
        Table::Mangle,
        "-A OUTPUT -p tcp -o lo -m mark --mark 1337 -j RETURN".to_string(),
    ));
    let refs: Vec<(Table, &str)> = v.iter().map(|(t, l)| (*t, l.as_str())).collect();
    rules(&refs)
}

/// The plan of Istio's injected arguments (`-p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x "" -b '*'
/// -d 15090,15021,15020`, IPv4): one nat table, what the exec path is for.
pub(crate) fn injected_plan() -> Plan {
    use crate::config::Config;
    crate::iptables::model::build(&Config::injected())
}

fn v6_rules() -> Vec<Rule> {
    rules(&[
        (
            Table::Nat,
            "-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001",
        ),
        (Table::Nat, "-A OUTPUT -j ISTIO_OUTPUT"),
        (Table::Nat, "-A ISTIO_OUTPUT -o lo -s ::6/128 -j RETURN"),
        (Table::Nat, "-A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
    ])
}

/// `--cleanup-only` with `plan`, which must succeed.
fn clean_up(plan: &Plan) {
    let cleanup = ApplyOptions {
        cleanup_only: true,
        ..Default::default()
    };
    apply(plan, &cleanup).expect("cleanup");
}

fn has_ours(text: &str) -> bool {
    text.contains("ISTIO") || text.contains(SCRATCH_PREFIX)
}

#[test]
fn apply_is_idempotent_reconciles_and_cleans_up() {
    in_fresh_netns(|| {
        sh("printf '*nat\\n-A OUTPUT -p tcp --dport 123 -j ACCEPT\\nCOMMIT\\n' | iptables-restore --noflush");
        let original = state("iptables-save");
        let plan = Plan {
            v4: default_rules(&["15090"]),
            v6: Some(v6_rules()),
            routes: vec![],
        };
        apply(&plan, &ApplyOptions::default()).expect("first apply");
        let first = state("iptables-save");
        let first6 = state("ip6tables-save");
        assert!(
            first.contains("-A ISTIO_INBOUND -p tcp -m tcp --dport 15090 -j RETURN"),
            "{first}"
        );
        assert!(first.contains("-A PREROUTING -i eth7 -j RETURN"), "{first}");
        assert!(!first.contains(SCRATCH_PREFIX));

        apply(&plan, &ApplyOptions::default()).expect("second apply is a no-op");
        assert_eq!(state("iptables-save"), first);
        assert_eq!(state("ip6tables-save"), first6);

        // A changed configuration is refused without --reconcile, and nothing changes.
        let changed = Plan {
            v4: default_rules(&["15021", "15020"]),
            v6: Some(v6_rules()),
            routes: vec![],
        };
        let err = apply(&changed, &ApplyOptions::default()).expect_err("diverged");
        assert!(matches!(err, ApplyError::Diverged { .. }), "{err}");
        assert_eq!(state("iptables-save"), first);

        let reconcile = ApplyOptions {
            reconcile: true,
            ..Default::default()
        };
        apply(&changed, &reconcile).expect("reconcile");
        let after = state("iptables-save");
        assert!(
            after.contains("--dport 15021 -j RETURN") && !after.contains("--dport 15090"),
            "{after}"
        );
        assert!(
            after.contains("-A OUTPUT -p tcp -m tcp --dport 123 -j ACCEPT"),
            "{after}"
        );
        assert_eq!(
            after.matches("-A OUTPUT -j ISTIO_OUTPUT").count(),
            1,
            "{after}"
        );
        apply(&changed, &ApplyOptions::default()).expect("no-op after reconcile");
        assert_eq!(state("iptables-save"), after);

        clean_up(&changed);
        let cleaned = state("iptables-save");
        assert!(!has_ours(&cleaned), "{cleaned}");
        assert_eq!(
            cleaned
                .lines()
                .filter(|l| l.starts_with("-A"))
                .collect::<Vec<_>>(),
            original
                .lines()
                .filter(|l| l.starts_with("-A"))
                .collect::<Vec<_>>()
        );
        assert!(!has_ours(&state("ip6tables-save")));
    });
}

#[test]
fn ipv6_failure_rolls_back_ipv4() {
    in_fresh_netns(|| {
        let original = state("iptables-save");
        let mut v6 = v6_rules();
        // Valid for the parser, refused by the kernel side: the chain jumped to does not exist in v6.
        v6.push(rules(&[(Table::Nat, "-A ISTIO_OUTPUT -p tcp --dport 99999 -j RETURN")]).remove(0));
        let plan = Plan {
            v4: default_rules(&[]),
            v6: Some(v6),
            routes: vec![],
        };
        let err = apply(&plan, &ApplyOptions::default()).expect_err("v6 must fail");
        let msg = err.to_string();
        assert!(
            msg.contains(
                "ip6tables-nft-restore (nf_tables) failed applying the IPv6 rules at input line"
            ) && msg.contains("`-A ISTIO_OUTPUT -p tcp --dport 99999 -j RETURN`")
                && msg.contains("invalid port/service `99999'"),
            "{msg}"
        );
        eprintln!("{msg}");
        assert!(!has_ours(&state("iptables-save")), "IPv4 not rolled back");
        assert!(!has_ours(&state("ip6tables-save")));
        let now = state("iptables-save");
        assert_eq!(
            now.lines().filter(|l| l.starts_with("-A")).count(),
            original.lines().filter(|l| l.starts_with("-A")).count()
        );
    });
}

#[test]
fn a_failing_table_rolls_back_the_tables_already_committed() {
    in_fresh_netns(|| {
        // mangle commits before nat; nat then fails on a pre-existing chain of ours.
        sh("printf '*nat\\n-N ISTIO_OUTPUT\\nCOMMIT\\n' | iptables-restore --noflush");
        let plan = v4_only(default_rules(&[]));
        // ISTIO_OUTPUT exists and differs: refused up front.
        assert!(matches!(
            apply(&plan, &ApplyOptions::default()),
            Err(ApplyError::Diverged { .. })
        ));
        let before = state("iptables-save");
        let mut bad = default_rules(&[]);
        bad.push(
            rules(&[(Table::Nat, "-A ISTIO_OUTPUT -p tcp --dport 99999 -j RETURN")]).remove(0),
        );
        let plan = v4_only(bad);
        let opts = ApplyOptions {
            reconcile: true,
            ..Default::default()
        };
        let err = apply(&plan, &opts).expect_err("bad port");
        assert!(err.to_string().contains("99999"), "{err}");
        assert_eq!(
            state("iptables-save"),
            before,
            "state restored after the failed reconcile"
        );
    });
}

#[test]
fn forced_legacy_uses_the_legacy_tables() {
    in_fresh_netns(|| {
        let plan = v4_only(default_rules(&[]));
        let opts = ApplyOptions {
            force_binary: Some("legacy".into()),
            ..Default::default()
        };
        apply(&plan, &opts).expect("legacy apply");
        assert!(state("iptables-legacy-save").contains("ISTIO_OUTPUT"));
        // Auto-detection now sees legacy in use and treats the rerun as a no-op there.
        apply(&plan, &ApplyOptions::default()).expect("auto rerun");
        assert!(!state("iptables-nft-save").contains("ISTIO"));
        clean_up(&plan);
        assert!(!state("iptables-legacy-save").contains("ISTIO"));
    });
}

#[test]
fn routes_are_idempotent() {
    in_fresh_netns(|| {
        let plan = Plan {
            routes: vec![
                RouteAction::AddFwmarkRule {
                    family: Family::V4,
                    mark: 1337,
                    table: 133,
                },
                RouteAction::AddLocalRoute {
                    family: Family::V4,
                    table: 133,
                },
            ],
            ..v4_only(default_rules(&[]))
        };
        apply(&plan, &ApplyOptions::default()).expect("apply");
        apply(&plan, &ApplyOptions::default()).expect("rerun");
        let rules = sh("ip -4 rule show");
        assert_eq!(rules.matches("lookup 133").count(), 1, "{rules}");
        assert!(sh("ip -4 route show table 133").contains("local default dev lo"));
        clean_up(&plan);
        assert!(!sh("ip -4 rule show").contains("lookup 133"));
    });
}

#[test]
fn validation_passes_with_rules_for_our_uid() {
    in_fresh_netns(|| {
        // The test runs as root, so the proxy uid of these rules is 0: the probe is then ours to redirect.
        let v4: Vec<Rule> = default_rules(&[])
            .into_iter()
            .map(|mut r| {
                for t in &mut r.tokens {
                    if t == "1337" {
                        *t = "0".to_string();
                    }
                }
                r
            })
            .collect();
        let opts = crate::validation::ValidationOptions {
            proxy_port: 15001,
            inbound_port: 15006,
            probe_port: 15002,
            timeout: std::time::Duration::from_secs(3),
            ipv6: false,
        };
        let plan = v4_only(v4);
        crate::validation::run(&crate::validation::ValidationOptions {
            timeout: std::time::Duration::from_millis(200),
            ..opts.clone()
        })
        .expect_err("no rules yet");
        apply(&plan, &ApplyOptions::default()).expect("apply");
        crate::validation::run(&opts).expect("validation with rules");
    });
}

#[test]
fn rollback_puts_back_the_previous_rules_of_ours_between_foreign_ones() {
    in_fresh_netns(|| {
        // Ours from an earlier run, with a foreign rule between our rules in a built-in chain.
        let plan = v4_only(default_rules(&["15090"]));
        apply(&plan, &ApplyOptions::default()).expect("apply");
        sh("printf '*nat\\n-I OUTPUT 1 -p tcp --dport 123 -j ACCEPT\\n-A OUTPUT -p udp --dport 124 -j ACCEPT\\n-A OUTPUT -j ISTIO_REDIRECT\\nCOMMIT\\n' | iptables-restore --noflush");
        let before_text = state("iptables-save");
        let d = backend::detect(Family::V4, None).expect("detect");
        let before = Dump::parse(&d.dump);
        let previous = Ours::extract(&before, &BTreeMap::new());
        // A half-done replacement: ours removed, something else of ours added, plus a new hook.
        let broken = assemble(&[
            previous.removal_lines(),
            split_restore_input(
                "* nat\n-N ISTIO_NEW\n-A ISTIO_NEW -j RETURN\n-A PREROUTING -j ISTIO_NEW\nCOMMIT\n",
            ),
        ]);
        restore(&d.backend, &broken).expect("broken state");
        assert_ne!(state("iptables-save"), before_text);
        let fr = FamilyRun {
            backend: d.backend.clone(),
            rules: &[],
            before,
        };
        rollback(&fr, &previous).expect("rollback");
        assert_eq!(
            state("iptables-save"),
            before_text,
            "rollback did not restore the exact previous state"
        );
    });
}
