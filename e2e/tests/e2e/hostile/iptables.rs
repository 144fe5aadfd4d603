//! `iptables-init` flags the kernel or iptables would refuse: refused before anything is applied, and never printed by `--dry-run`.
//!
//! Each check runs the built binary in fresh network namespaces on each backend: iptables-restore through
//! iptables-nft (the default) and iptables-legacy (`FORCE_IPTABLES_BINARY=legacy`), and the native
//! nftables backend (`--native-nftables`, netlink). A value one past a backend's limit exits 1 naming the
//! flag, the value and the limit, `--dry-run` refuses it the same way, and the namespace is unchanged;
//! the limit itself applies for real.

use std::process::{Output, Stdio};

use e2e::interception::app_outbound_bypasses_the_proxy;
use e2e::iptables_init::init_ok;
use e2e::netns::{NetNs, Pair};
use test_support::istio_init::injected_args_with;

fn require_tools() {
    test_support::root::require_root_with(
        &[
            "ip",
            "nft",
            "iptables-nft-save",
            "iptables-legacy-save",
            "ip6tables-legacy-save",
        ],
        "install iptables, nftables and iproute2; scripts/test.sh does",
    );
}

/// The backends a run can use, as the flags and environment select them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    IptablesNft,
    IptablesLegacy,
    Native,
}

const BACKENDS: [Backend; 3] = [
    Backend::IptablesNft,
    Backend::IptablesLegacy,
    Backend::Native,
];

impl Backend {
    /// The most `--outbound-owner-groups` each backend's apply accepts (measured: iptables-restore
    /// refuses 50 with "Parser cannot handle more arguments", the kernel refuses 64 nftables matches
    /// with EINVAL).
    fn max_owner_groups(self) -> usize {
        match self {
            Backend::IptablesNft | Backend::IptablesLegacy => 49,
            Backend::Native => 63,
        }
    }
}

/// Runs the built `iptables-init` in `ns` on `backend` with `args`.
fn run(ns: &NetNs, backend: Backend, args: &[&str]) -> Output {
    let mut cmd = ns.command(e2e::bin("iptables-init"));
    cmd.args(args).stdin(Stdio::null());
    match backend {
        Backend::IptablesNft => {}
        Backend::IptablesLegacy => {
            cmd.env("FORCE_IPTABLES_BINARY", "legacy");
        }
        Backend::Native => {
            cmd.arg("--native-nftables");
        }
    }
    let out = cmd.output().expect("run iptables-init");
    eprintln!(
        "iptables-init {backend:?} {args:?} -> {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Everything a run could change in `ns`: nf_tables (iptables-nft and ours), iptables-legacy, policy
/// routing, routes of every table and addresses; comment lines (timestamps) left out.
fn state(ns: &NetNs) -> String {
    let views: [&[&str]; 8] = [
        &["nft", "list", "ruleset"],
        &["iptables-legacy-save"],
        &["ip6tables-legacy-save"],
        &["ip", "-4", "rule"],
        &["ip", "-6", "rule"],
        &["ip", "-4", "route", "show", "table", "all"],
        &["ip", "-6", "route", "show", "table", "all"],
        &["ip", "addr"],
    ];
    let mut out = String::new();
    for argv in views {
        out.push_str(&format!("$ {}\n", argv.join(" ")));
        let text = ns.run(argv).unwrap_or_else(|e| format!("error: {e:#}\n"));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// What the backend holds of our rules, in its own tool's words.
fn rules(ns: &NetNs, backend: Backend) -> String {
    let argv: &[&str] = match backend {
        Backend::IptablesNft => &["iptables-nft-save"],
        Backend::IptablesLegacy => &["iptables-legacy-save"],
        Backend::Native => &["nft", "list", "ruleset"],
    };
    ns.run(argv).expect("list the rules")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// IPv4 only, every inbound interface captured (`--ipv6 false -i *`), then `extra`.
fn v4_all_interfaces<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["--ipv6", "false", "-i", "*"];
    args.extend_from_slice(extra);
    args
}

/// `args` (and the same with `--dry-run`) exit 1 on `backend` with a message containing each of
/// `needles`, print nothing on stdout, and leave `ns` as it was.
fn refused(ns: &NetNs, backend: Backend, args: &[&str], needles: &[&str]) {
    let before = state(ns);
    for dry in [false, true] {
        let mut a = args.to_vec();
        if dry {
            a.push("--dry-run");
        }
        let out = run(ns, backend, &a);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{backend:?} dry={dry}: {err}");
        for n in needles {
            assert!(err.contains(n), "{backend:?} dry={dry}: {n:?} not in {err}");
        }
        assert!(
            out.stdout.is_empty(),
            "{backend:?} dry={dry} printed rules it refuses:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(
            state(ns),
            before,
            "{backend:?} dry={dry} changed the namespace"
        );
    }
}

/// `args` apply on `backend` (exit 0).
fn applies(ns: &NetNs, backend: Backend, args: &[&str]) {
    let out = run(ns, backend, args);
    assert!(
        out.status.success(),
        "{backend:?} {args:?}: {}",
        stderr(&out)
    );
}

fn groups(n: usize) -> String {
    (1..=n).map(|g| g.to_string()).collect::<Vec<_>>().join(",")
}

/// Point 8: one group more than the backend's one rule can carry is refused up front (it was accepted
/// up to 64 and then refused by iptables-restore from 50, by the kernel at 64); the limit applies.
#[test]
fn owner_groups_beyond_the_backend_limit_are_refused_before_anything_and_the_limit_applies() {
    require_tools();
    for backend in BACKENDS {
        let ns = NetNs::new("hostile-ipt-groups").expect("netns");
        let max = backend.max_owner_groups();
        let over = groups(max + 1);
        let limit = format!("at most {max}");
        let quoted = format!("{over:?}");
        refused(
            &ns,
            backend,
            &v4_all_interfaces(&["--outbound-owner-groups", &over]),
            &["--outbound-owner-groups", &quoted, &limit],
        );
        let at = groups(max);
        applies(
            &ns,
            backend,
            &v4_all_interfaces(&["--outbound-owner-groups", &at]),
        );
        let text = rules(&ns, backend);
        // The owner-group rule: the one line with the first group, carrying them all.
        let needle = match backend {
            Backend::Native => "skgid != ",
            _ => "! --gid-owner ",
        };
        let first = format!("{needle}1 ");
        let line = text.lines().find(|l| l.contains(&first)).unwrap_or("");
        let matches = line.matches(needle).count();
        assert_eq!(matches, max, "{backend:?}:\n{text}");
    }
}

/// Point 8: uid and gid 4294967295, `(u32)-1`, are refused for the iptables backends up front (iptables'
/// owner match refused it after the dry run had printed it); 4294967294 applies; nf_tables takes both.
#[test]
fn uid_and_gid_4294967295_are_refused_where_iptables_refuses_them() {
    require_tools();
    for backend in [Backend::IptablesNft, Backend::IptablesLegacy] {
        let ns = NetNs::new("hostile-ipt-ids").expect("netns");
        for (flag, origin) in [
            ("-u", "-u/--proxy-uid"),
            ("-g", "-g/--proxy-gid"),
            ("--outbound-owner-groups", "--outbound-owner-groups"),
            (
                "--outbound-owner-groups-exclude",
                "--outbound-owner-groups-exclude",
            ),
        ] {
            refused(
                &ns,
                backend,
                &v4_all_interfaces(&[flag, "4294967295"]),
                &[origin, "\"4294967295\"", "0-4294967294"],
            );
        }
        applies(
            &ns,
            backend,
            &v4_all_interfaces(&["-u", "4294967294", "-g", "4294967294"]),
        );
        let text = rules(&ns, backend);
        assert!(
            text.contains("4294967294") && !text.contains("4294967295"),
            "{backend:?}:\n{text}"
        );
    }
    let ns = NetNs::new("hostile-ipt-ids-nft").expect("netns");
    applies(
        &ns,
        Backend::Native,
        &v4_all_interfaces(&["-u", "4294967295"]),
    );
    let text = rules(&ns, Backend::Native);
    assert!(text.contains("skuid 4294967295"), "{text}");
}

/// Point 9: `-c eth+` is iptables' prefix match on both backends. Real traffic: the pod's `eth0`
/// matches, so an application's outbound connection bypasses the proxy (on the native backend it used
/// to be a literal name that matched nothing, and the connection was captured).
#[test]
fn an_interface_prefix_is_excluded_on_both_backends_with_real_traffic() {
    require_tools();
    for backend in BACKENDS {
        let p = Pair::new("hostile-ipt-ifpfx");
        let args = injected_args_with(&[], &["--ipv6", "false", "-c", "eth+"]);
        applies(&p.pod, backend, &args);
        app_outbound_bypasses_the_proxy(&p, "10.10.0.2:8080", "10.10.0.2:8080");
        let text = rules(&p.pod, backend);
        match backend {
            Backend::Native => assert!(
                text.contains("oifname \"eth*\"") && text.contains("iifname \"eth*\""),
                "{text}"
            ),
            _ => assert!(
                text.contains("-A OUTPUT -o eth+ -j RETURN")
                    && text.contains("-A PREROUTING -i eth+ -j RETURN"),
                "{text}"
            ),
        }
    }
    // Without the exclusion the same connection is captured: the bypass above is the exclusion's.
    let p = Pair::new("hostile-ipt-ifcap");
    init_ok(
        &p.pod,
        &injected_args_with(&[], &["--ipv6", "false", "--native-nftables"]),
    );
    e2e::interception::app_outbound_is_captured(&p.pod);
}

/// Point 9: the native `--dry-run` text with `eth+`, `-k` prefixes and names nft would misread is
/// accepted by `nft -f` as printed (it printed `iifname eth+`, a syntax error to nft), and the kernel
/// holds the same wildcard as after a real run.
#[test]
fn the_native_dry_run_with_interface_prefixes_loads_with_nft() {
    require_tools();
    let args = [
        "--ipv6",
        "true",
        "-i",
        "*",
        "-b",
        "*",
        "-c",
        "eth+,veth@x,+",
        "-k",
        "kv+,0kv",
    ];
    let ns = NetNs::new("hostile-ipt-nftdry").expect("netns");
    let mut dry = args.to_vec();
    dry.push("--dry-run");
    let out = run(&ns, Backend::Native, &dry);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains("iifname \"eth*\""), "{text}");
    let file = std::env::temp_dir().join(format!("{}.nft", ns.name()));
    std::fs::write(&file, &text).expect("write");
    let loaded = ns.run(&["nft", "-f", &file.to_string_lossy()]);
    let _ = std::fs::remove_file(&file);
    loaded.expect("nft -f takes the dry run as printed");
    let from_text = ns.run(&["nft", "-s", "list", "ruleset"]).expect("list");

    let real = NetNs::new("hostile-ipt-nftreal").expect("netns");
    applies(&real, Backend::Native, &args);
    let from_netlink = real.run(&["nft", "-s", "list", "ruleset"]).expect("list");
    assert_eq!(from_netlink, from_text);
    for want in [
        "iifname \"kv*\"",
        "oifname \"eth*\"",
        "iifname \"veth@x\"",
        "iifname \"0kv\"",
    ] {
        assert!(from_netlink.contains(want), "{want}:\n{from_netlink}");
    }
}

/// Point 9: `+` inside a name has no common meaning on the two backends; refused on both, with the flag
/// and the value.
#[test]
fn a_plus_inside_an_interface_name_is_refused_on_every_backend() {
    require_tools();
    for backend in BACKENDS {
        let ns = NetNs::new("hostile-ipt-ifplus").expect("netns");
        for (flag, origin) in [
            ("-c", "-c/--istio-exclude-interfaces"),
            ("-k", "-k/--kube-virt-interfaces"),
        ] {
            refused(
                &ns,
                backend,
                &v4_all_interfaces(&[flag, "a+b"]),
                &[origin, "\"a+b\"", "only at the end"],
            );
        }
    }
}

/// Point 10: `--cleanup-only` of TPROXY with IPv6 in a namespace where nothing was applied succeeds
/// and changes nothing, on every backend (iptables exited 1: `ip -6 route del … table 133`: "FIB
/// table does not exist").
#[test]
fn cleanup_of_nothing_is_success_on_every_backend() {
    require_tools();
    for backend in BACKENDS {
        let ns = NetNs::new("hostile-ipt-clean").expect("netns");
        let before = state(&ns);
        let out = run(
            &ns,
            backend,
            &[
                "-m",
                "TPROXY",
                "-b",
                "*",
                "--ipv6",
                "true",
                "--cleanup-only",
            ],
        );
        assert!(out.status.success(), "{backend:?}: {}", stderr(&out));
        assert_eq!(state(&ns), before, "{backend:?}");
    }
}

/// The `--cleanup-only` run the other-backend warning suggests works in a namespace without
/// addresses (it exited 1, "no valid local IP address", detecting IPv6 it does not need): it removes
/// both families' rules and routes of ours.
#[test]
fn cleanup_needs_no_address_detection() {
    require_tools();
    for backend in BACKENDS {
        let ns = NetNs::new("hostile-ipt-noaddr").expect("netns");
        let mut args = injected_args_with(&[("-m", "TPROXY")], &[]);
        let mut applied = args.clone();
        applied.extend(["--ipv6", "true"]);
        applies(&ns, backend, &applied);
        let held = state(&ns);
        assert!(
            held.contains("lookup 133"),
            "{backend:?}: nothing applied\n{held}"
        );
        // The apply's `::6` on lo would be an address to detect; the cleanup leaves it, the test
        // removes it, so the namespace has no address at all.
        ns.run(&["ip", "-6", "addr", "del", "::6/128", "dev", "lo"])
            .expect("remove ::6");
        args.push("--cleanup-only");
        applies(&ns, backend, &args);
        let left = state(&ns);
        for ours in ["ISTIO", "istio-proxy", "lookup 133", "table 133"] {
            assert!(!left.contains(ours), "{backend:?}: {ours} left\n{left}");
        }
    }
}

/// Point 9: `iptables-init explain` gives `eth+` the same verdicts on both backends (the nftables walk
/// read it as a literal name), naming each backend's own rule.
#[test]
fn explain_gives_an_interface_prefix_the_same_verdict_on_both_backends() {
    let specs = [
        ("inbound:tcp:8080,iface=eth3", "bypass"),
        ("outbound:tcp:10.0.0.5:80,iface=eth0", "bypass"),
        ("inbound:tcp:8080,iface=veth0", "inbound-proxy"),
        ("inbound:tcp:10.96.0.20:8080,iface=kv7", "outbound-proxy"),
    ];
    let mut verdicts = Vec::new();
    for native in [false, true] {
        let mut cmd = std::process::Command::new(e2e::bin("iptables-init"));
        cmd.args([
            "explain", "-i", "*", "-b", "*", "-c", "eth+", "-k", "kv+", "-o", "json",
        ]);
        if native {
            cmd.arg("--native-nftables");
        }
        for (spec, _) in specs {
            cmd.args(["--connection", spec]);
        }
        let out = cmd.output().expect("run explain");
        assert!(out.status.success(), "{}", stderr(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let got: Vec<(String, String)> = json["connections"]
            .as_array()
            .expect("connections")
            .iter()
            .map(|c| (c["verdict"].to_string(), c["rule"].to_string()))
            .collect();
        for ((spec, want), (verdict, rule)) in specs.iter().zip(&got) {
            assert_eq!(
                verdict,
                &format!("{want:?}"),
                "native={native} {spec}: {rule}"
            );
        }
        verdicts.push(got.into_iter().map(|(v, _)| v).collect::<Vec<_>>());
    }
    assert_eq!(verdicts[0], verdicts[1]);
}
