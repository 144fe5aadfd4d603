use super::*;
use std::collections::HashMap;

/// Surroundings for tests: fixed addresses, resolv.conf and passwd.
struct FakeSystem {
    addrs: Result<Vec<IpAddr>, String>,
    resolv: Option<String>,
    passwd: Option<String>,
}

impl Default for FakeSystem {
    fn default() -> Self {
        FakeSystem {
            addrs: Ok(vec!["10.1.1.1".parse().expect("ip")]),
            resolv: None,
            passwd: None,
        }
    }
}

impl System for FakeSystem {
    fn interface_addrs(&self) -> Result<Vec<IpAddr>, String> {
        self.addrs.clone()
    }
    fn resolv_conf(&self) -> std::io::Result<String> {
        self.resolv
            .clone()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
    fn passwd(&self) -> std::io::Result<String> {
        self.passwd
            .clone()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
}

fn resolve_with(
    args: &[&str],
    env: &[(&str, &str)],
    sys: &FakeSystem,
) -> Result<Config, ConfigError> {
    let mut argv = vec!["iptables-init"];
    argv.extend_from_slice(args);
    let parsed = Args::parse_args(argv).expect("parses");
    let map: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |k: &str| map.get(k).cloned();
    resolve(&parsed, &lookup, sys)
}

fn ok(args: &[&str], env: &[(&str, &str)]) -> Config {
    resolve_with(args, env, &FakeSystem::default()).expect("valid")
}

fn err(args: &[&str], env: &[(&str, &str)]) -> ConfigError {
    resolve_with(args, env, &FakeSystem::default()).expect_err("invalid")
}

fn err_text(args: &[&str]) -> String {
    err(args, &[]).to_string()
}

#[test]
fn defaults_match_istio_cli() {
    let c = ok(&[], &[]);
    assert_eq!(c.proxy_port, 15001);
    assert_eq!(c.inbound_capture_port, 15006);
    assert_eq!(c.inbound_tunnel_port, 15008);
    assert_eq!(c.proxy_uids, vec![1337]);
    assert_eq!(c.proxy_gids, vec![1337]);
    assert_eq!(c.owner_groups, OwnerGroups::AllExcept(vec![]));
    assert_eq!(c.loopback_cidr.to_string(), "127.0.0.1/32");
    assert!(!c.ipv6);
    assert_eq!(c.host_ip, Some("10.1.1.1".parse().expect("ip")));
    assert_eq!(c.inbound_ports, InboundPorts::None);
    assert_eq!(
        c.outbound_include,
        OutboundInclude::List(CidrList::default())
    );
    assert_eq!(c.probe_timeout, Duration::from_secs(5));
}

/// The defaults the flag table documents (in `--help` and docs/reference/iptables-init-flags.md) are
/// the ones resolution uses: giving a flag its documented default changes nothing.
#[test]
fn the_flag_table_defaults_are_what_resolve_uses() {
    use sidecar_core::flags::{Fallback, Group, FLAGS};
    let none = ok(&[], &[]);
    let mut checked = 0;
    for flag in FLAGS.iter().filter(|f| f.group != Group::Log) {
        let value = match flag.default {
            Fallback::Value(v) => v,
            Fallback::Off => "false",
            Fallback::Empty => "",
            Fallback::Derived { .. } => continue,
        };
        let arg = format!("--{}={value}", flag.long);
        assert_eq!(ok(&[&arg], &[]), none, "{arg}");
        checked += 1;
    }
    assert_eq!(checked, 33);
}

#[test]
fn env_applies_when_the_flag_is_absent_and_the_flag_wins() {
    let c = ok(
        &[],
        &[
            ("INBOUND_CAPTURE_PORT", "16006"),
            ("ISTIO_INBOUND_PORTS", "*"),
        ],
    );
    assert_eq!(c.inbound_capture_port, 16006);
    assert_eq!(c.inbound_ports, InboundPorts::All);
    let c = ok(&["-z", "17006"], &[("INBOUND_CAPTURE_PORT", "16006")]);
    assert_eq!(c.inbound_capture_port, 17006);
    // -p has no environment variable (ENVOY_PORT is not read by Istio).
    assert_eq!(ok(&[], &[("ENVOY_PORT", "1")]).proxy_port, 15001);
}

#[test]
fn also_env_vars_override_the_primary() {
    let dns = ["--dns-servers", "10.0.0.10"];
    let c = ok(
        &dns,
        &[
            ("REDIRECT_DNS", "false"),
            ("ISTIO_META_DNS_CAPTURE", "true"),
        ],
    );
    assert!(c.redirect_dns);
    let c = ok(
        &dns,
        &[
            ("REDIRECT_DNS", "true"),
            ("ISTIO_META_DNS_CAPTURE", "false"),
        ],
    );
    assert!(!c.redirect_dns);
    // An unparsable value is ignored, the earlier one kept.
    let c = ok(
        &dns,
        &[("REDIRECT_DNS", "true"), ("ISTIO_META_DNS_CAPTURE", "yes")],
    );
    assert!(c.redirect_dns);
    assert!(ok(&[], &[("INVALID_DROP", "1")]).drop_invalid);
    assert!(ok(&[], &[("DROP_INVALID", "T")]).drop_invalid);
    assert!(ok(&[], &[("ISTIO_DUAL_STACK", "True")]).dual_stack);
    // The command line beats both.
    assert!(!ok(&["--drop-invalid=false"], &[("INVALID_DROP", "true")]).drop_invalid);
    // A bad typed env value is ignored, not an error.
    assert_eq!(ok(&[], &[("IPTABLES_PROBE_PORT", "x")]).probe_port, 15002);
    assert_eq!(
        ok(&[], &[("PROBE_TIMEOUT", "2s")]).probe_timeout,
        Duration::from_secs(2)
    );
    assert!(ok(&[], &[("DRY_RUN", "1")]).dry_run);
    assert_eq!(ok(&[], &[("DRY_RUN_FILE_PATH", "")]).dry_run_file, None);
    assert_eq!(
        ok(&[], &[("DRY_RUN_FILE_PATH", "/tmp/x")]).dry_run_file,
        Some(std::path::PathBuf::from("/tmp/x"))
    );
}

#[test]
fn env_only_settings_and_their_flags() {
    let c = ok(&[], &[("ISTIO_OUTBOUND_OWNER_GROUPS", "java,202")]);
    assert_eq!(
        c.owner_groups,
        OwnerGroups::Only(vec!["java".into(), "202".into()])
    );
    // Set and empty counts.
    let c = ok(&[], &[("ISTIO_OUTBOUND_OWNER_GROUPS", "")]);
    assert_eq!(c.owner_groups, OwnerGroups::Only(vec![]));
    let c = ok(&[], &[("ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE", "a,b")]);
    assert_eq!(
        c.owner_groups,
        OwnerGroups::AllExcept(vec!["a".into(), "b".into()])
    );
    // Exclude ignored with a non-* include.
    let c = ok(
        &[
            "--outbound-owner-groups=x",
            "--outbound-owner-groups-exclude=y",
        ],
        &[],
    );
    assert_eq!(c.owner_groups, OwnerGroups::Only(vec!["x".into()]));
    let c = ok(
        &["--outbound-owner-groups", "g1"],
        &[("ISTIO_OUTBOUND_OWNER_GROUPS", "g2")],
    );
    assert_eq!(c.owner_groups, OwnerGroups::Only(vec!["g1".into()]));
    let c = ok(&[], &[("ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR", "127.0.0.0/8")]);
    assert_eq!(c.loopback_cidr.to_string(), "127.0.0.0/8");
    let c = ok(&["--host-ipv4-loopback-cidr", "127.1.2.3/16"], &[]);
    assert_eq!(c.loopback_cidr.to_string(), "127.1.2.3/16");
}

#[test]
fn uid_from_envoy_user_and_gid_from_uid() {
    let sys = FakeSystem {
        passwd: Some("root:x:0:0::/:\nistio-proxy:x:1500:1500::/:\nenvoy:x:101:101::/:\n".into()),
        ..FakeSystem::default()
    };
    let c = resolve_with(&[], &[], &sys).expect("valid");
    assert_eq!((c.proxy_uids, c.proxy_gids), (vec![1500], vec![1500]));
    let c = resolve_with(&["-u", ""], &[("ENVOY_USER", "envoy")], &sys).expect("valid");
    assert_eq!((c.proxy_uids, c.proxy_gids), (vec![101], vec![101]));
    let c = resolve_with(&[], &[("ENVOY_USER", "nobody")], &sys).expect("valid");
    assert_eq!(c.proxy_uids, vec![1337]);
    let c = ok(&["-u", "3,4"], &[]);
    assert_eq!((c.proxy_uids, c.proxy_gids), (vec![3, 4], vec![3, 4]));
    let c = ok(&["-u", "3,4", "-g", "1,2"], &[]);
    assert_eq!(c.proxy_gids, vec![1, 2]);
    let c = ok(&[], &[("PROXY_UID", "7"), ("PROXY_GID", "8")]);
    assert_eq!((c.proxy_uids, c.proxy_gids), (vec![7], vec![8]));
}

#[test]
fn lists_split_on_commas_drop_empties_and_do_not_trim() {
    let c = ok(&["-b", "4000,5000,", "-d", ",6000,,7000,"], &[]);
    assert_eq!(c.inbound_ports, InboundPorts::List(vec![4000, 5000]));
    assert_eq!(c.inbound_exclude_ports, vec![6000, 7000]);
    assert_eq!(c.inbound_ports, InboundPorts::List(vec![4000, 5000]));
    assert!(err_text(&["-b", "4000, 5000"]).contains("\" 5000\""));
    assert_eq!(
        ok(&["-b", ","], &[]).inbound_ports,
        InboundPorts::List(vec![])
    );
}

#[test]
fn cidrs_parse_strictly_and_print_canonically() {
    let c = ok(
        &[
            "-i",
            "10.0.0.1/8,2001:DB8:0::1/64,::ffff:1.2.3.4/128",
            "-x",
            "1.1.0.0/16",
        ],
        &[],
    );
    let OutboundInclude::List(list) = c.outbound_include else {
        panic!("list")
    };
    let v4: Vec<String> = list.v4.iter().map(ToString::to_string).collect();
    let v6: Vec<String> = list.v6.iter().map(ToString::to_string).collect();
    assert_eq!(v4, ["10.0.0.1/8"]);
    assert_eq!(v6, ["2001:db8::1/64", "::ffff:1.2.3.4/128"]);
    assert_eq!(ok(&["-i", "*"], &[]).outbound_include, OutboundInclude::All);
    for bad in [
        "10.0.0.1",
        "10.0.0.0/33",
        " 10.0.0.0/8",
        "fe80::1%eth0/64",
        "10.0.0.0/08",
        "10.0.0.0/-1",
        "*,10.0.0.0/8",
        "2001:db8::/129",
        "10.0.0.0/",
    ] {
        let e = err_text(&["-i", bad]);
        assert!(e.contains("-i/--istio-service-cidr"), "{bad}: {e}");
    }
    let e = err_text(&["-x", "*"]);
    assert!(
        e.contains("-x/--istio-service-exclude-cidr") && e.contains("\"*\""),
        "{e}"
    );
    let e = err(&[], &[("ISTIO_SERVICE_EXCLUDE_CIDR", "1.2.3.4")]).to_string();
    assert!(e.contains("$ISTIO_SERVICE_EXCLUDE_CIDR"), "{e}");
}

#[test]
fn ports_are_validated_in_every_port_flag() {
    for flag in ["-p", "-z", "-e", "-b", "-d", "-q", "-o"] {
        for bad in ["0", "65536", "abc", "-1", "+80", "80:90", "", "080", "00"] {
            if bad.is_empty() && ["-b", "-d", "-q", "-o"].contains(&flag) {
                continue; // an empty list is valid
            }
            let e = err_text(&[flag, bad]);
            assert!(
                e.contains(flag) && e.contains(&format!("{bad:?}")),
                "{flag} {bad}: {e}"
            );
        }
    }
    assert_eq!(ok(&["-p", "65535"], &[]).proxy_port, 65535);
    assert!(err_text(&["--iptables-probe-port", "0"]).contains("--iptables-probe-port"));
    let e = err(&[], &[("INBOUND_TUNNEL_PORT", "99999")]).to_string();
    assert!(
        e.contains("$INBOUND_TUNNEL_PORT (-e/--inbound-tunnel-port)"),
        "{e}"
    );
}

#[test]
fn mode_is_redirect_tproxy_or_empty() {
    assert_eq!(ok(&["-m", "TPROXY"], &[]).mode, InterceptionMode::Tproxy);
    assert_eq!(
        ok(&["-m", "REDIRECT"], &[]).mode,
        InterceptionMode::Redirect
    );
    assert_eq!(ok(&["-m", ""], &[]).mode, InterceptionMode::Redirect);
    let e = err_text(&["-m", "tproxy"]);
    assert!(
        e.contains("-m/--istio-inbound-interception-mode") && e.contains("\"tproxy\""),
        "{e}"
    );
}

#[test]
fn interfaces_ids_and_groups_are_validated() {
    assert_eq!(
        ok(&["-c", "eth0,veth-a.1,ens+,+"], &[]).exclude_interfaces,
        ["eth0", "veth-a.1", "ens+", "+"]
    );
    // `+` is iptables' prefix match only at the end; elsewhere the backends disagree.
    for bad in ["a+b", "++", "+eth", "e++"] {
        for flag in ["-c", "-k"] {
            let e = err_text(&[flag, bad]);
            assert!(
                e.contains(flag)
                    && e.contains(&format!("{bad:?}"))
                    && e.contains("only at the end"),
                "{flag} {bad}: {e}"
            );
        }
    }
    for bad in [
        "a b",
        "x/y",
        "0123456789abcdef",
        "-eth",
        "..",
        "eth0!",
        "a;b",
        "a\"b",
    ] {
        assert!(
            err_text(&["-k", bad]).contains("-k/--kube-virt-interfaces"),
            "{bad}"
        );
        assert!(
            err_text(&["-c", bad]).contains("-c/--istio-exclude-interfaces"),
            "{bad}"
        );
    }
    for bad in ["abc", "-1", "1.5", "4294967296", ","] {
        assert!(err_text(&["-u", bad]).contains("-u/--proxy-uid"), "{bad}");
        assert!(err_text(&["-g", bad]).contains("-g/--proxy-gid"), "{bad}");
    }
    for bad in [
        "a b",
        "-x",
        "g;rm",
        "1x",
        "$",
        "toolonggroupname_toolonggroupname",
    ] {
        let e = err_text(&["--outbound-owner-groups", bad]);
        assert!(e.contains("--outbound-owner-groups"), "{bad}: {e}");
    }
    assert!(matches!(
        err(&["--outbound-owner-groups-exclude", "ok,b@d"], &[]),
        ConfigError::Invalid { .. }
    ));
}

/// Each backend's own limits, measured (see [`Limits`]): one more than the limit is refused with
/// the flag, the value and the limit; the limit itself passes.
#[test]
fn owner_group_count_and_ids_are_bounded_by_the_backend() {
    let groups = |n: usize| {
        (0..n)
            .map(|i| format!("g{i}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    for (backend, max) in [(&[][..], 49), (&["--native-nftables"][..], 63)] {
        let over = groups(max + 1);
        let mut a = vec!["--outbound-owner-groups", &over];
        a.extend_from_slice(backend);
        let e = err(&a, &[]);
        assert!(
            matches!(&e, ConfigError::TooManyOwnerGroups { count, max: m, .. } if *count == max + 1 && *m == max),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("--outbound-owner-groups")
                && text.contains(&format!("{over:?}"))
                && text.contains(&format!("at most {max}")),
            "{text}"
        );
        let at = groups(max);
        let mut a = vec!["--outbound-owner-groups", &at];
        a.extend_from_slice(backend);
        assert!(
            matches!(ok(&a, &[]).owner_groups, OwnerGroups::Only(g) if g.len() == max),
            "{backend:?}"
        );
    }
    let e = err(&[], &[("ISTIO_OUTBOUND_OWNER_GROUPS", &groups(50))]).to_string();
    assert!(
        e.contains("$ISTIO_OUTBOUND_OWNER_GROUPS (--outbound-owner-groups)"),
        "{e}"
    );
    // (uid_t)-1: refused by iptables' owner match, compared as any other id by nf_tables.
    for flag in [
        "-u",
        "-g",
        "--outbound-owner-groups",
        "--outbound-owner-groups-exclude",
    ] {
        let e = err_text(&[flag, "4294967295"]);
        assert!(
            e.contains(flag) && e.contains("\"4294967295\"") && e.contains("0-4294967294"),
            "{flag}: {e}"
        );
        assert!(
            resolve_with(&[flag, "4294967294"], &[], &FakeSystem::default()).is_ok(),
            "{flag}"
        );
        assert!(
            resolve_with(
                &[flag, "4294967295", "--native-nftables"],
                &[],
                &FakeSystem::default()
            )
            .is_ok(),
            "{flag}"
        );
    }
    let e = err(&[], &[("PROXY_UID", "4294967295")]).to_string();
    assert!(e.contains("$PROXY_UID (-u/--proxy-uid)"), "{e}");
    // The environment's backend counts as the flag's.
    assert!(ok(&["-u", "4294967295"], &[("NATIVE_NFTABLES", "true")]).native_nftables);
    // A passwd uid the backend would refuse is not taken.
    let sys = FakeSystem {
        passwd: Some("istio-proxy:x:4294967295:1::/:\n".into()),
        ..FakeSystem::default()
    };
    assert_eq!(
        resolve_with(&[], &[], &sys).expect("valid").proxy_uids,
        [1337]
    );
}

#[test]
fn mark_table_backend_and_loopback_cidr_are_validated() {
    for bad in [
        "0",
        "1338",
        "0x539",
        "0x10",
        "010",
        "-1",
        "abc",
        "4294967296",
        "+7",
    ] {
        assert!(
            err_text(&["-t", bad]).contains("-t/--istio-inbound-tproxy-mark"),
            "{bad}"
        );
    }
    for bad in ["0", "253", "254", "255", "main", "4294967296"] {
        assert!(
            err_text(&["-r", bad]).contains("-r/--istio-inbound-tproxy-route-table"),
            "{bad}"
        );
    }
    assert_eq!(ok(&["-t", "7", "-r", "100"], &[]).tproxy_mark, 7);
    // Istio's rules and routes read `010` differently (octal 8, decimal 10): refused, with the reason.
    assert!(err_text(&["-t", "010"]).contains("leading zeros"));
    assert_eq!(
        ok(&[], &[("FORCE_IPTABLES_BINARY", "nft")])
            .force_binary
            .as_deref(),
        Some("nft")
    );
    assert_eq!(ok(&[], &[("FORCE_IPTABLES_BINARY", "")]).force_binary, None);
    let e = err(&[], &[("FORCE_IPTABLES_BINARY", "nf")]).to_string();
    assert!(e.contains("$FORCE_IPTABLES_BINARY"), "{e}");
    for bad in [
        "10.0.0.1/32",
        "127.0.0.1/7",
        "127.0.0.1",
        "::1/128",
        "127.0.0.1/33",
    ] {
        let e = err_text(&["--host-ipv4-loopback-cidr", bad]);
        assert!(e.contains("--host-ipv4-loopback-cidr"), "{bad}: {e}");
    }
}

#[test]
fn dns_servers_explicit_or_from_resolv_conf_only_when_needed() {
    let c = ok(
        &[
            "--redirect-dns",
            "--dns-servers",
            "127.0.0.53,::127.0.0.53,::ffff:9.9.9.9",
        ],
        &[],
    );
    assert_eq!(
        c.dns_servers_v4,
        [
            "127.0.0.53".parse::<Ipv4Addr>().expect("ip"),
            "9.9.9.9".parse().expect("ip")
        ]
    );
    assert_eq!(
        c.dns_servers_v6,
        ["::7f00:35".parse::<Ipv6Addr>().expect("ip")]
    );
    assert!(c.dns_capture());
    assert!(err_text(&["--dns-servers", "10.0.0.1,nope"]).contains("--dns-servers"));
    // Empty list: none, so DNS capture is off.
    assert!(!ok(&["--redirect-dns", "--dns-servers", ""], &[]).dns_capture());
    assert!(ok(
        &["--redirect-dns", "--capture-all-dns", "--dns-servers="],
        &[]
    )
    .dns_capture());
    // resolv.conf: read only for --redirect-dns without --capture-all-dns; unreadable is an error.
    let sys = FakeSystem {
        resolv: Some("nameserver 10.96.0.10\nnameserver bad\n".into()),
        ..FakeSystem::default()
    };
    let c = resolve_with(&["--redirect-dns"], &[], &sys).expect("valid");
    assert_eq!(
        c.dns_servers_v4,
        ["10.96.0.10".parse::<Ipv4Addr>().expect("ip")]
    );
    let c = resolve_with(&[], &[("ISTIO_META_DNS_CAPTURE", "true")], &sys).expect("valid");
    assert!(c.dns_capture());
    assert!(matches!(
        err(&["--redirect-dns"], &[]),
        ConfigError::ResolvConf(_)
    ));
    assert!(ok(&["--redirect-dns", "--capture-all-dns"], &[])
        .dns_servers_v4
        .is_empty());
    assert!(ok(&[], &[]).dns_servers_v4.is_empty());
}

#[test]
fn ipv6_explicit_or_detected() {
    let v6 = FakeSystem {
        addrs: Ok(vec!["fd00::1".parse().expect("ip")]),
        ..FakeSystem::default()
    };
    assert!(resolve_with(&[], &[], &v6).expect("valid").ipv6);
    assert!(
        !resolve_with(&["--ipv6", "false"], &[], &v6)
            .expect("valid")
            .ipv6
    );
    assert!(ok(&["--ipv6", "true"], &[]).ipv6);
    let dual = FakeSystem {
        addrs: Ok(vec![
            "10.0.0.1".parse().expect("ip"),
            "fd00::1".parse().expect("ip"),
        ]),
        ..FakeSystem::default()
    };
    assert!(!resolve_with(&[], &[], &dual).expect("valid").ipv6);
    assert!(
        resolve_with(&["--dual-stack"], &[], &dual)
            .expect("valid")
            .ipv6
    );
    assert!(
        resolve_with(&[], &[("ISTIO_DUAL_STACK", "true")], &dual)
            .expect("valid")
            .ipv6
    );
    let none = FakeSystem {
        addrs: Ok(vec!["127.0.0.1".parse().expect("ip")]),
        ..FakeSystem::default()
    };
    assert_eq!(resolve_with(&[], &[], &none), Err(ConfigError::NoHostIp));
    // Explicit --ipv6 never needs an address.
    assert!(resolve_with(&["--ipv6", "false"], &[], &none).is_ok());
    let broken = FakeSystem {
        addrs: Err("boom".into()),
        ..FakeSystem::default()
    };
    assert!(matches!(
        resolve_with(&[], &[], &broken),
        Err(ConfigError::Detection(_))
    ));
    assert!(resolve_with(&["--ipv6=true"], &[], &broken).is_ok());
    // A cleanup detects nothing and removes both families' rules of ours.
    for sys in [&none, &broken] {
        let c = resolve_with(&["--cleanup-only"], &[], sys).expect("valid");
        assert!(c.ipv6 && c.host_ip.is_none());
    }
    assert!(
        !resolve_with(&["--cleanup-only", "--ipv6", "false"], &[], &none)
            .expect("valid")
            .ipv6
    );
}

mod prop {
    use super::*;
    use proptest::prelude::*;

    const FLAGS: &[&str] = &[
        "-p",
        "-z",
        "-e",
        "-u",
        "-g",
        "-m",
        "-b",
        "-d",
        "-c",
        "-i",
        "-x",
        "-q",
        "-o",
        "-k",
        "-t",
        "-r",
        "--dns-servers",
        "--outbound-owner-groups",
        "--outbound-owner-groups-exclude",
        "--host-ipv4-loopback-cidr",
    ];

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            // Plausible values, so that many runs get past validation ...
            Just("*".to_string()),
            Just(String::new()),
            "[0-9]{1,5}(,[0-9]{1,5}){0,3},?",
            "(10|127|fd00:)[0-9.:]{0,8}/[0-9]{1,3}",
            "[a-z][a-z0-9]{0,6}",
            // ... and hostile ones.
            "[ -~\t\n]{0,12}",
        ]
    }

    proptest! {
        /// Whatever the input, resolution never panics, and what passes validation yields rules
        /// whose every token is one plain word: nothing unvalidated reaches an iptables argument.
        #[test]
        fn only_plain_tokens_reach_the_rules(
            picks in proptest::collection::vec((0..FLAGS.len(), value()), 0..6),
            ipv6 in any::<bool>(),
            dns in any::<bool>(),
            tproxy in any::<bool>(),
        ) {
            let mut args: Vec<String> = vec!["--ipv6".into(), ipv6.to_string()];
            if dns {
                args.push("--redirect-dns".into());
            }
            if tproxy {
                args.extend(["-m".to_string(), "TPROXY".to_string()]);
            }
            for (i, v) in &picks {
                args.push(format!("{}={v}", FLAGS[*i]));
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut argv = vec!["iptables-init"];
            argv.extend_from_slice(&refs);
            let Ok(parsed) = Args::parse_args(argv) else { return Ok(()) };
            let lookup = |_: &str| None;
            let sys = FakeSystem { resolv: Some(String::new()), ..FakeSystem::default() };
            if let Ok(cfg) = resolve(&parsed, &lookup, &sys) {
                let plan = crate::iptables::model::build(&cfg);
                let all = plan.v4.iter().chain(plan.v6.iter().flatten());
                for rule in all {
                    for t in &rule.tokens {
                        prop_assert!(
                            !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"!*/:._-+@,".contains(&b)),
                            "token {:?} in {:?}", t, rule.tokens
                        );
                    }
                }
            }
        }
    }
}
