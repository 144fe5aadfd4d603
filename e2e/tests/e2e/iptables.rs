//! netfilter end-to-end tests (real namespaces, real traffic).
//!
//! Each test builds a "pod" namespace and a "peer" namespace joined by a veth pair
//! (pod `eth0` 10.10.0.1/24 + fd00::1/64, peer `eth0` 10.10.0.2/24 + 10.10.0.3/24 + fd00::2/64), applies
//! rules with the built `iptables-init` inside the pod namespace, and sends real TCP/UDP with the
//! `nettool` helper, as an application uid (1000) or the proxy uid (1337) through `setpriv`.
//! Namespaces are uniquely named and deleted on drop. Root is required: these tests fail, never skip.

use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e::interception::{
    app_outbound_is_captured, dns_to_the_configured_server_lands_on_15053,
    inbound_lands_on_15006_and_an_excluded_port_does_not, ipv6_outbound_and_inbound_are_redirected,
    outbound_of_the_app_is_redirected_and_the_proxy_s_is_not,
    the_excluded_cidr_and_port_bypass_the_proxy, tproxy_inbound_reaches_a_transparent_listener,
    tproxy_routing_is_in_place_once, DNS_TO_THE_PEER, EXCLUDED_CIDR, EXCLUDED_PORT,
};
use e2e::iptables_init::{init, init_ok};
use e2e::netns::{Family, NetNs, Pair};
use e2e::nettool::PROXY_UID;
use test_support::istio_init::injected_args_with;
use test_support::process::run_ok;
use test_support::require_root;

/// The pod/peer pair of a test, once root and the tools are checked.
fn pair(name: &str) -> Pair {
    require_root();
    Pair::new(name)
}

/// The arguments Istio's injector writes (hello.yaml), then `extra`.
fn with(extra: &[&'static str]) -> Vec<&'static str> {
    injected_args_with(&[], extra)
}

/// The injected arguments with TPROXY inbound interception, and `--ipv6 <ipv6>`.
fn tproxy(ipv6: &'static str) -> Vec<&'static str> {
    injected_args_with(&[("-m", "TPROXY")], &["--ipv6", ipv6])
}

/// `iptables-save` without comments (timestamps) and counters.
fn saved(ns: &NetNs, family: Family) -> String {
    ns.save(family)
        .expect("save")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| match l.rfind(" [") {
            Some(i) if l.starts_with(':') => format!("{}\n", &l[..i]),
            _ => format!("{l}\n"),
        })
        .collect()
}

/// Only the rules and chain declarations of ours/others, without table headers (tables a run created
/// and left empty do not count as rules).
fn rules_only(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("-A") || (l.starts_with(':') && !l.ends_with("ACCEPT")))
        .map(str::to_string)
        .collect()
}

fn has_ours(text: &str) -> bool {
    text.contains("ISTIO") || text.contains("IPTINIT")
}

#[test]
fn a_outbound_from_app_is_redirected_with_original_destination_and_proxy_is_not() {
    let p = pair("ipt-a");
    init_ok(&p.pod, &with(&["--ipv6", "false"]));
    outbound_of_the_app_is_redirected_and_the_proxy_s_is_not(&p);
}

#[test]
fn b_inbound_to_app_port_lands_on_15006_and_excluded_port_does_not() {
    let p = pair("ipt-b");
    init_ok(&p.pod, &with(&["--ipv6", "false"]));
    inbound_lands_on_15006_and_an_excluded_port_does_not(&p);
}

#[test]
fn c_excluded_outbound_cidr_and_port_bypass_the_proxy() {
    let p = pair("ipt-c");
    init_ok(&p.pod, &injected_args_with(EXCLUDED_CIDR, EXCLUDED_PORT));
    the_excluded_cidr_and_port_bypass_the_proxy(&p);
}

#[test]
fn d_dns_to_the_configured_server_lands_on_15053() {
    let p = pair("ipt-d");
    init_ok(&p.pod, &with(DNS_TO_THE_PEER));
    dns_to_the_configured_server_lands_on_15053(&p);
}

#[test]
fn e_tproxy_inbound_lands_on_a_transparent_listener_and_routes_are_idempotent() {
    let p = pair("ipt-e");
    let args = tproxy("false");
    init_ok(&p.pod, &args);
    tproxy_inbound_reaches_a_transparent_listener(&p);

    // A rerun changes nothing, routes included.
    let before = saved(&p.pod, Family::V4);
    init_ok(&p.pod, &args);
    assert_eq!(saved(&p.pod, Family::V4), before);
    tproxy_routing_is_in_place_once(&p.pod);
}

#[test]
fn f_ipv6_outbound_and_inbound() {
    let p = pair("ipt-f");
    init_ok(&p.pod, &with(&["--ipv6", "true"]));
    let v6 = saved(&p.pod, Family::V6);
    assert!(v6.contains("ISTIO_OUTPUT"), "{v6}");

    ipv6_outbound_and_inbound_are_redirected(&p);
}

/// A foreign rule the namespace had before us; it must survive everything.
fn add_foreign_rules(ns: &NetNs) {
    let foreign = "*nat\n-A OUTPUT -p tcp --dport 123 -j ACCEPT\nCOMMIT\n*filter\n-A INPUT -p tcp --dport 22 -j ACCEPT\nCOMMIT\n";
    ns.restore(Family::V4, foreign).expect("foreign v4 rules");
    ns.restore(
        Family::V6,
        "*nat\n-A OUTPUT -p tcp --dport 123 -j ACCEPT\nCOMMIT\n",
    )
    .expect("foreign v6 rules");
}

#[test]
fn g_rerun_is_a_noop_reconcile_replaces_exactly_and_cleanup_restores_the_original() {
    let p = pair("ipt-g");
    add_foreign_rules(&p.pod);
    let original4 = saved(&p.pod, Family::V4);
    let original6 = saved(&p.pod, Family::V6);

    let first = with(&["--ipv6", "true"]);
    init_ok(&p.pod, &first);
    let s4 = saved(&p.pod, Family::V4);
    let s6 = saved(&p.pod, Family::V6);
    assert!(has_ours(&s4) && has_ours(&s6));

    init_ok(&p.pod, &first);
    assert_eq!(saved(&p.pod, Family::V4), s4, "second run changed IPv4");
    assert_eq!(saved(&p.pod, Family::V6), s6, "second run changed IPv6");

    // A changed configuration without --reconcile is refused and changes nothing.
    let changed = injected_args_with(
        &[("-x", "10.10.0.3/32"), ("-b", "8080,9090")],
        &["-o", "7070", "--ipv6", "true"],
    );
    let out = init(&p.pod, &changed);
    assert!(
        !out.status.success(),
        "a different configuration was applied over ours without --reconcile"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--reconcile"));
    assert_eq!(saved(&p.pod, Family::V4), s4);

    let mut reconcile = changed.to_vec();
    reconcile.push("--reconcile");
    init_ok(&p.pod, &reconcile);
    let r4 = saved(&p.pod, Family::V4);
    let r6 = saved(&p.pod, Family::V6);

    // Exactly what a fresh apply of the new configuration gives in a namespace with the same history.
    let fresh = NetNs::new("ipt-g-fresh").expect("netns");
    add_foreign_rules(&fresh);
    init_ok(&fresh, &changed);
    assert_eq!(
        r4,
        saved(&fresh, Family::V4),
        "reconcile left something else than the new rules (IPv4)"
    );
    assert_eq!(
        r6,
        saved(&fresh, Family::V6),
        "reconcile left something else than the new rules (IPv6)"
    );

    let mut cleanup = changed.to_vec();
    cleanup.push("--cleanup-only");
    init_ok(&p.pod, &cleanup);
    let c4 = saved(&p.pod, Family::V4);
    let c6 = saved(&p.pod, Family::V6);
    assert!(!has_ours(&c4) && !has_ours(&c6), "{c4}{c6}");
    assert_eq!(
        rules_only(&c4),
        rules_only(&original4),
        "cleanup changed foreign IPv4 rules"
    );
    assert_eq!(
        rules_only(&c6),
        rules_only(&original6),
        "cleanup changed foreign IPv6 rules"
    );
}

#[test]
fn h_a_failure_in_the_middle_leaves_no_rules_of_ours() {
    // IPv6 refuses after IPv4 was applied: a chain of ours already exists in ip6tables only.
    let p = pair("ipt-h");
    p.pod
        .restore(
            Family::V6,
            "*nat\n-N ISTIO_INBOUND\n-A ISTIO_INBOUND -p tcp --dport 1 -j RETURN\nCOMMIT\n",
        )
        .expect("conflicting v6 chain");
    let before6 = saved(&p.pod, Family::V6);
    let out = init(&p.pod, &with(&["--ipv6", "true"]));
    assert!(!out.status.success(), "must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("IPv6"), "{err}");
    let v4 = saved(&p.pod, Family::V4);
    assert!(!has_ours(&v4), "IPv4 rules were not rolled back:\n{v4}");
    assert_eq!(saved(&p.pod, Family::V6), before6, "IPv6 changed");

    // The IPv4 rules really were applied and then undone (not merely skipped).
    assert!(
        err.contains("applied the IPv4 rules") && err.contains("rolled back"),
        "{err}"
    );
    assert!(
        err.contains("ip6tables") && err.contains("--reconcile"),
        "{err}"
    );

    // --reconcile replaces the conflicting chain: both families end up with exactly our rules.
    init_ok(&p.pod, &with(&["--ipv6", "true", "--reconcile"]));
    let v6 = saved(&p.pod, Family::V6);
    assert!(
        !v6.contains("--dport 1 -j RETURN")
            && v6.contains("-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"),
        "{v6}"
    );
    assert!(has_ours(&saved(&p.pod, Family::V4)));
}

#[test]
fn i_validation_passes_with_rules_and_fails_with_126_without() {
    require_root();
    // The probe timeout bounds a validation that fails; one that passes ends at its first redirected
    // probe, so its bound is generous (a busy machine may take seconds to run the probe at all).
    let validate = |ns: &NetNs, ipv6: &'static str, timeout: &'static str| {
        let args = with(&[
            "--ipv6",
            ipv6,
            "--run-validation",
            "--skip-rule-apply",
            "--probe-timeout",
            timeout,
        ]);
        let start = Instant::now();
        let u = PROXY_UID.to_string();
        let out = ns
            .command("setpriv")
            .args(["--reuid", &u, "--regid", &u, "--clear-groups"])
            .arg(e2e::bin("iptables-init"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .expect("validation run");
        eprintln!(
            "validation: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.code(),
            start.elapsed(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let bare = NetNs::new("ipt-i-bare").expect("netns");
    let (code, took, err) = validate(&bare, "false", "2s");
    assert_eq!(code, Some(126), "{err}");
    // It waited for its probe timeout, and no longer than the overall bound of a test's wait (without
    // the timeout it would probe forever).
    assert!(err.contains("within 2s"), "{err}");
    assert!(
        took >= Duration::from_secs(2) && took < e2e::PATIENCE,
        "not bounded by --probe-timeout: {took:?}"
    );

    let ruled = NetNs::new("ipt-i-rules").expect("netns");
    init_ok(&ruled, &with(&["--ipv6", "false"]));
    let (code, _, err) = validate(&ruled, "false", "60s");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("127.0.0.6:15002"), "{err}");

    // IPv6: the probe goes from [::1] to [::6] (added to lo by the apply) and is redirected too.
    let ruled6 = NetNs::new("ipt-i-rules6").expect("netns");
    init_ok(&ruled6, &with(&["--ipv6", "true"]));
    let (code, _, err) = validate(&ruled6, "true", "60s");
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("[::6]:15002"), "{err}");
}

#[test]
fn j_without_net_admin_nothing_is_touched() {
    require_root();
    let ns = NetNs::new("ipt-j").expect("netns");
    let out = ns
        .command("setpriv")
        .args(["--bounding-set=-net_admin", "--inh-caps=-net_admin"])
        .arg(e2e::bin("iptables-init"))
        .args(with(&["--ipv6", "false"]))
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("CAP_NET_ADMIN") || err.contains("cap_net_admin"),
        "{err}"
    );
    assert!(!has_ours(&saved(&ns, Family::V4)));
}

#[test]
fn k_backend_choice_is_stable_and_legacy_works_when_forced_or_in_use() {
    // An empty legacy nat table (what Istio's write probe leaves behind) does not make us pick legacy.
    let p = pair("ipt-k");
    p.pod
        .run(&["iptables-legacy", "-t", "nat", "-L", "-n"])
        .expect("instantiate legacy nat");
    let args = with(&["--ipv6", "false"]);
    init_ok(&p.pod, &args);
    let nft = p.pod.run(&["iptables-nft-save"]).expect("nft save");
    assert!(nft.contains("ISTIO_OUTPUT"), "{nft}");
    init_ok(&p.pod, &args);
    assert!(!p
        .pod
        .run(&["iptables-legacy-save"])
        .expect("legacy save")
        .contains("ISTIO"));

    // Forced legacy: rules in the legacy tables, real traffic captured through them, and a later run
    // without forcing sees legacy in use and finds nothing to do.
    let q = pair("ipt-k2");
    run_ok(
        q.pod
            .command(e2e::bin("iptables-init"))
            .args(&args)
            .env("FORCE_IPTABLES_BINARY", "legacy")
            .stdin(Stdio::null()),
        "iptables-init",
    );
    let legacy = q.pod.run(&["iptables-legacy-save"]).expect("legacy save");
    assert!(legacy.contains("ISTIO_OUTPUT"), "{legacy}");
    assert!(!q
        .pod
        .run(&["iptables-nft-save"])
        .expect("nft save")
        .contains("ISTIO"));
    app_outbound_is_captured(&q.pod);
    init_ok(&q.pod, &args);
    assert_eq!(
        q.pod
            .run(&["iptables-legacy-save"])
            .expect("save")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count(),
        legacy.lines().filter(|l| !l.starts_with('#')).count()
    );
    assert!(!q
        .pod
        .run(&["iptables-nft-save"])
        .expect("nft save")
        .contains("ISTIO"));
}

#[test]
fn l_reconcile_from_tproxy_to_redirect_and_cleanup_with_another_configuration() {
    let tproxy = injected_args_with(&[("-m", "TPROXY"), ("-d", "15090")], &["--ipv6", "false"]);
    let p = pair("ipt-l");
    let original = saved(&p.pod, Family::V4);
    init_ok(&p.pod, &tproxy);
    assert!(saved(&p.pod, Family::V4).contains("CONNMARK"));

    // Switching mode: the mangle rules TPROXY put in built-in chains go too (recognised by shape).
    let redirect = with(&["--ipv6", "false", "--reconcile"]);
    init_ok(&p.pod, &redirect);
    let fresh = NetNs::new("ipt-l-fresh").expect("netns");
    init_ok(&fresh, &with(&["--ipv6", "false"]));
    assert_eq!(
        rules_only(&saved(&p.pod, Family::V4)),
        rules_only(&saved(&fresh, Family::V4)),
        "reconcile from TPROXY left rules behind"
    );

    // Cleanup with a configuration other than the applied one still removes everything of ours.
    init_ok(
        &p.pod,
        &[
            "-p",
            "15001",
            "-u",
            "7",
            "-m",
            "TPROXY",
            "-t",
            "9",
            "-i",
            "10.0.0.0/8",
            "-b",
            "",
            "--ipv6",
            "false",
            "--cleanup-only",
        ],
    );
    let c = saved(&p.pod, Family::V4);
    assert!(!has_ours(&c), "{c}");
    assert_eq!(rules_only(&c), rules_only(&original));
}

/// What iptables-init logs when it hands the process over to the restore (the exec path).
const EXEC_NOTE: &str = "replaces this process (exec)";

#[test]
fn m_exec_path_installs_what_the_usual_path_does_then_reruns_are_checked() {
    // The injected IPv4 arguments are the exec path's case: one nat table, no routes, nothing after.
    let p = pair("ipt-m");
    add_foreign_rules(&p.pod);
    let original = saved(&p.pod, Family::V4);
    let args = with(&["--ipv6", "false"]);
    let out = init(&p.pod, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(EXEC_NOTE),
        "the exec path was not taken:\n{err}"
    );
    let applied = saved(&p.pod, Family::V4);
    assert!(has_ours(&applied), "{applied}");
    for foreign in rules_only(&original) {
        assert!(applied.contains(&foreign), "lost {foreign}:\n{applied}");
    }

    // The usual path (debug logging keeps a run on it) gives the same state.
    let usual = NetNs::new("ipt-m-usual").expect("netns");
    add_foreign_rules(&usual);
    let debug = with(&["--ipv6", "false", "--log_output_level=default:debug"]);
    let out = init(&usual, &debug);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains(EXEC_NOTE), "{err}");
    assert_eq!(saved(&usual, Family::V4), applied);

    // A rerun finds our chains (netlink probe), takes the checked path and changes nothing.
    let out = init(&p.pod, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        !err.contains(EXEC_NOTE) && err.contains("already match"),
        "{err}"
    );
    assert_eq!(
        saved(&p.pod, Family::V4),
        applied,
        "second run changed IPv4"
    );

    // The traffic is really intercepted.
    app_outbound_is_captured(&p.pod);
}

#[test]
fn n_a_refused_exec_path_restore_fails_and_changes_nothing() {
    // A nat OUTPUT base chain that iptables-nft cannot use (priority 0 instead of -100): invisible to the
    // probe (no chain of ours), refused by the restore. With one table the restore is one transaction,
    // so nothing is left, and its message names the input line.
    require_root();
    let ns = NetNs::new("ipt-n").expect("netns");
    ns.run(&["nft", "add", "table", "ip", "nat"])
        .expect("nft table");
    ns.run(&[
        "nft",
        "add chain ip nat OUTPUT { type nat hook output priority 0; }",
    ])
    .expect("nft chain");
    let before = ns.run(&["nft", "list", "ruleset"]).expect("ruleset");
    let out = init(&ns, &with(&["--ipv6", "false"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(EXEC_NOTE), "{err}");
    assert!(
        err.contains("iptables-nft-restore") && err.contains("line ") && err.contains("OUTPUT"),
        "{err}"
    );
    assert_eq!(
        ns.run(&["nft", "list", "ruleset"]).expect("ruleset"),
        before
    );
}

#[test]
fn o_cleanup_dry_run_prints_the_removal_a_cleanup_applies() {
    // TPROXY with IPv6: our chains in two tables per family, our rules in built-in chains (jumps and the
    // CONNMARK/MARK rules), and routes.
    let args = tproxy("true");
    let real = pair("ipt-o-real");
    let printed = pair("ipt-o-dry");
    for p in [&real, &printed] {
        add_foreign_rules(&p.pod);
        init_ok(&p.pod, &args);
    }
    let original4 = rules_only(&saved(&printed.pod, Family::V4));
    assert!(original4.iter().any(|l| l.contains("ISTIO_TPROXY")));

    // The dry run touches nothing: it is run here as in the namespace holding the rules.
    let mut dry = args.to_vec();
    dry.extend(["--cleanup-only", "--dry-run"]);
    let out = init(&printed.pod, &dry);
    assert!(out.status.success());
    assert_eq!(rules_only(&saved(&printed.pod, Family::V4)), original4);
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(
        text.contains("# ip -4 rule del fwmark 1337 lookup 133"),
        "{text}"
    );
    let (v4, v6) = text
        .split_once("# ip6tables-restore\n")
        .expect("an IPv6 part");
    assert!(!v4.contains("-A ") && !v6.contains("-A "), "{text}");
    printed
        .pod
        .restore(Family::V4, v4)
        .expect("printed IPv4 removal");
    printed
        .pod
        .restore(Family::V6, v6)
        .expect("printed IPv6 removal");

    let mut cleanup = args.to_vec();
    cleanup.push("--cleanup-only");
    init_ok(&real.pod, &cleanup);
    let lo6 = real
        .pod
        .run(&["ip", "-6", "addr", "show", "dev", "lo"])
        .expect("ip addr");
    assert!(lo6.contains("::6/128"), "{lo6}");
    let rules4 = real
        .pod
        .run(&["ip", "-4", "rule", "show"])
        .expect("ip rule");
    assert!(!rules4.contains("lookup 133"), "{rules4}");
    for family in [Family::V4, Family::V6] {
        let after_printed = saved(&printed.pod, family);
        assert!(!has_ours(&after_printed), "{after_printed}");
        assert_eq!(
            rules_only(&after_printed),
            rules_only(&saved(&real.pod, family)),
            "{family:?}: the printed removal and the cleanup differ"
        );
    }
}
