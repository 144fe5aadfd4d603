//! The seeded generator of istio-iptables configurations: command lines, environments and surroundings.
//!
//! Every flag of `crates/sidecar-core/src/flags.rs` that istio-iptables has (Istio's
//! `tools/istio-iptables/pkg/cmd/root.go`, `bindCmdlineFlags`) is drawn with valid and invalid values,
//! in each of pflag's spellings, or through its environment variables; the flags `iptables-init` adds for
//! Istio's surroundings are set the way Istio reads them instead: the environment variables
//! (`ISTIO_OUTBOUND_OWNER_GROUPS`, ...), the namespace's addresses and `/etc/resolv.conf`
//! ([`Surroundings`]). The same case is always the same for the same seed and index.

use std::fmt::Write as _;

/// SplitMix64: a small, fast, seedable generator (no dependency; the sequence only has to be
/// reproducible from the seed).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

/// How the namespace's interfaces are addressed: what Istio's `getLocalIP` (`tools/common/config`)
/// and `iptables-init --ipv6 auto` detect IPv6 from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Addresses {
    /// `eth0` with an IPv4 address.
    V4,
    /// `eth0` with an IPv6 address.
    V6,
    /// `eth0` with an IPv4 and an IPv6 address.
    Dual,
    /// `eth0` with an IPv6 address, `eth1` with an IPv4 one.
    V6ThenV4,
    /// Only `lo`: no usable address (both must refuse, but for `--cleanup-only`).
    None,
}

impl Addresses {
    pub const ALL: [Addresses; 5] = [
        Addresses::V4,
        Addresses::V6,
        Addresses::Dual,
        Addresses::V6ThenV4,
        Addresses::None,
    ];

    /// The `ip` commands that set them up in a fresh namespace (with `lo` up).
    pub fn commands(self) -> Vec<Vec<&'static str>> {
        // A veth pair with both ends inside (the kernel may lack the dummy module); the peer end stays
        // without addresses.
        let link = |name: &'static str| {
            let peer = if name == "eth0" { "peer0" } else { "peer1" };
            vec![
                "ip", "link", "add", name, "type", "veth", "peer", "name", peer,
            ]
        };
        let up = |name| vec!["ip", "link", "set", name, "up"];
        let v4 = |dev| vec!["ip", "addr", "add", "10.20.0.5/24", "dev", dev];
        let v6 = |dev| {
            vec![
                "ip",
                "-6",
                "addr",
                "add",
                "fd00:20::5/64",
                "dev",
                dev,
                "nodad",
            ]
        };
        match self {
            Addresses::V4 => vec![link("eth0"), v4("eth0"), up("eth0")],
            Addresses::V6 => vec![link("eth0"), v6("eth0"), up("eth0")],
            Addresses::Dual => vec![link("eth0"), v4("eth0"), v6("eth0"), up("eth0")],
            Addresses::V6ThenV4 => vec![
                link("eth0"),
                v6("eth0"),
                up("eth0"),
                link("eth1"),
                v4("eth1"),
                up("eth1"),
            ],
            Addresses::None => vec![],
        }
    }
}

/// The `nameserver` lines of the namespace's `/etc/resolv.conf` (Istio reads it for `--redirect-dns`
/// without `--capture-all-dns`, `FillConfigFromEnvironment`).
pub const RESOLV_CONFS: [&str; 6] = [
    "nameserver 10.96.0.10\n",
    "nameserver 127.0.0.53\noptions edns0\n",
    "nameserver fd00:20::a\n",
    "nameserver 10.96.0.10\nnameserver fd00:20::a\nsearch svc.cluster.local\n",
    "search example.com\n",
    "nameserver 1.1.1.1\nnameserver 8.8.8.8\nnameserver 9.9.9.9\n",
];

/// What a run reads besides its arguments and environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Surroundings {
    pub addresses: Addresses,
    /// Index into [`RESOLV_CONFS`].
    pub resolv: usize,
}

/// One generated configuration.
#[derive(Debug, Clone)]
pub struct Case {
    pub seed: u64,
    pub index: u64,
    /// istio-iptables' arguments (after the `istio-iptables` word), without `--dry-run`.
    pub args: Vec<String>,
    /// The environment beside `PATH`.
    pub env: Vec<(String, String)>,
    pub surroundings: Surroundings,
    /// `--native-nftables` is on (set by flag or environment): Istio's nft path applies even in a dry
    /// run (`ProgramNftables` has no dry run), so the case is compared by applying both for real.
    pub nftables: bool,
    /// `--cleanup-only` is on (flag or environment): the case is compared by applying the same
    /// configuration without it first, then each program's cleanup, and comparing what is left (Istio's
    /// dry run records every deletion it would try, iptables-init's only the removal of what it finds).
    pub cleanup: bool,
}

impl Case {
    /// The case without `--cleanup-only`: what is applied before a cleanup case's runs.
    pub fn without_cleanup(&self) -> Case {
        let mut c = self.clone();
        c.args.retain(|a| a != "--cleanup-only");
        c.env.retain(|(k, _)| k != "CLEANUP_ONLY");
        c.cleanup = false;
        c
    }
}

impl Case {
    /// The case as a shell line: environment, then the program and its arguments.
    pub fn shell_line(&self, program: &str, extra: &[&str]) -> String {
        let mut line = String::from("env -i PATH=\"$PATH\"");
        for (k, v) in &self.env {
            let _ = write!(line, " {k}={}", shell_quote(v));
        }
        let _ = write!(line, " {program} istio-iptables");
        for a in self
            .args
            .iter()
            .map(String::as_str)
            .chain(extra.iter().copied())
        {
            line.push(' ');
            line.push_str(&shell_quote(a));
        }
        line
    }
}

/// `s` quoted for a POSIX shell when it needs it.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

const PORTS: &[&str] = &[
    "15001", "15006", "80", "443", "8080", "1", "65535", "15020", "9090",
];
const BAD_PORTS: &[&str] = &[
    "0",
    "65536",
    "-1",
    "abc",
    "",
    "1.5",
    " 80",
    "080",
    "99999999999",
];
const UIDS: &[&str] = &["1337", "0", "1000", "4294967294", "3,4", "1337,1338,1339"];
const BAD_UIDS: &[&str] = &["4294967295", "abc", "-1", " 1337", ",", "1337,", "1e3"];
const CIDRS: &[&str] = &[
    "10.0.0.0/8",
    "192.168.0.0/16",
    "9.9.0.0/16",
    "0.0.0.0/0",
    "127.0.0.1/32",
    "10.1.2.3/32",
    "10.0.0.1/24",
    "fd00::/8",
    "::/0",
    "::1/128",
    "2001:db8::/32",
];
const BAD_CIDRS: &[&str] = &[
    "1.2.3.4",
    "10.0.0.0/33",
    "::/129",
    "foo",
    "10.0.0.0/08",
    "010.0.0.0/8",
    "fe80::1%eth0/64",
    " 10.0.0.0/8",
];
const IFACES: &[&str] = &[
    "eth0",
    "eth1",
    "veth+",
    "not-istio-nic",
    "lo",
    "eth+",
    "br.1",
];
const BAD_IFACES: &[&str] = &["a b", "-x", "verylonginterfacename0", "e+th", "x\"y", "a;b"];
const MARKS: &[&str] = &["1337", "1", "2", "4294967295", "65535"];
const BAD_MARKS: &[&str] = &["0", "1338", "abc", "0x10", "010", "-1", "4294967296"];
const TABLES: &[&str] = &["133", "1", "100", "1000", "252"];
const BAD_TABLES: &[&str] = &["0", "253", "254", "255", "abc", "-1"];
const DURATIONS: &[&str] = &["5s", "1s", "100ms", "1m30s", "0"];
const BAD_DURATIONS: &[&str] = &["abc", "-1s", "5", "1x"];
const GROUPS: &[&str] = &[
    "*",
    "root",
    "0",
    "root,daemon",
    "1000,1001",
    "daemon",
    "65534",
];
const BAD_GROUPS: &[&str] = &["", "a b", "*,root", "1,,2", "x:y"];
const LOOPBACK: &[&str] = &[
    "127.0.0.1/32",
    "127.0.0.0/8",
    "127.0.0.6/32",
    "127.10.0.0/16",
];
const BAD_LOOPBACK: &[&str] = &["127.0.0.1", "10.0.0.1/32", "127.0.0.1/7", "::1/128", "abc"];
const BOOL_WORDS: &[&str] = &["true", "false", "1", "0", "t", "F", "TRUE", "False"];
const BAD_BOOL_WORDS: &[&str] = &["yes", "no", "on", ""];

/// What kind of value a generated flag takes.
#[derive(Debug, Clone, Copy)]
enum Domain {
    Port,
    PortList { wildcard: bool },
    Uids,
    Mode,
    Cidrs { wildcard: bool },
    Ifaces,
    Mark,
    Table,
    Duration,
    Bool,
    NetNsPath,
    IptablesBinary,
    LogLevel,
    LogWords,
}

/// istio-iptables' flags: long name, short name, value domain, environment variables (primary first),
/// and how often a case sets it (percent).
/// One generated flag: long name, short name, value domain, environment variables, percent of cases.
type FlagSpec = (
    &'static str,
    Option<char>,
    Domain,
    &'static [&'static str],
    u64,
);

const FLAGS: &[FlagSpec] = &[
    ("envoy-port", Some('p'), Domain::Port, &[], 30),
    (
        "inbound-capture-port",
        Some('z'),
        Domain::Port,
        &["INBOUND_CAPTURE_PORT"],
        30,
    ),
    (
        "inbound-tunnel-port",
        Some('e'),
        Domain::Port,
        &["INBOUND_TUNNEL_PORT"],
        15,
    ),
    ("proxy-uid", Some('u'), Domain::Uids, &["PROXY_UID"], 50),
    ("proxy-gid", Some('g'), Domain::Uids, &["PROXY_GID"], 40),
    (
        "istio-inbound-interception-mode",
        Some('m'),
        Domain::Mode,
        &["ISTIO_INBOUND_INTERCEPTION_MODE"],
        50,
    ),
    (
        "istio-inbound-ports",
        Some('b'),
        Domain::PortList { wildcard: true },
        &["ISTIO_INBOUND_PORTS"],
        50,
    ),
    (
        "istio-local-exclude-ports",
        Some('d'),
        Domain::PortList { wildcard: false },
        &["ISTIO_LOCAL_EXCLUDE_PORTS"],
        35,
    ),
    (
        "istio-exclude-interfaces",
        Some('c'),
        Domain::Ifaces,
        &["ISTIO_EXCLUDE_INTERFACES"],
        20,
    ),
    (
        "istio-service-cidr",
        Some('i'),
        Domain::Cidrs { wildcard: true },
        &["ISTIO_SERVICE_CIDR"],
        50,
    ),
    (
        "istio-service-exclude-cidr",
        Some('x'),
        Domain::Cidrs { wildcard: false },
        &["ISTIO_SERVICE_EXCLUDE_CIDR"],
        35,
    ),
    (
        "istio-outbound-ports",
        Some('q'),
        Domain::PortList { wildcard: false },
        &["ISTIO_OUTBOUND_PORTS"],
        25,
    ),
    (
        "istio-local-outbound-ports-exclude",
        Some('o'),
        Domain::PortList { wildcard: false },
        &["ISTIO_LOCAL_OUTBOUND_PORTS_EXCLUDE"],
        25,
    ),
    (
        "kube-virt-interfaces",
        Some('k'),
        Domain::Ifaces,
        &["KUBE_VIRT_INTERFACES"],
        20,
    ),
    (
        "istio-inbound-tproxy-mark",
        Some('t'),
        Domain::Mark,
        &["ISTIO_INBOUND_TPROXY_MARK"],
        15,
    ),
    (
        "istio-inbound-tproxy-route-table",
        Some('r'),
        Domain::Table,
        &["ISTIO_INBOUND_TPROXY_ROUTE_TABLE"],
        15,
    ),
    (
        "iptables-probe-port",
        None,
        Domain::Port,
        &["IPTABLES_PROBE_PORT"],
        10,
    ),
    (
        "probe-timeout",
        None,
        Domain::Duration,
        &["PROBE_TIMEOUT"],
        10,
    ),
    (
        "skip-rule-apply",
        None,
        Domain::Bool,
        &["SKIP_RULE_APPLY"],
        3,
    ),
    (
        "redirect-dns",
        None,
        Domain::Bool,
        &["REDIRECT_DNS", "ISTIO_META_DNS_CAPTURE"],
        40,
    ),
    (
        "drop-invalid",
        None,
        Domain::Bool,
        &["DROP_INVALID", "INVALID_DROP"],
        20,
    ),
    (
        "dual-stack",
        None,
        Domain::Bool,
        &["DUAL_STACK", "ISTIO_DUAL_STACK"],
        25,
    ),
    (
        "capture-all-dns",
        None,
        Domain::Bool,
        &["CAPTURE_ALL_DNS"],
        25,
    ),
    (
        "network-namespace",
        None,
        Domain::NetNsPath,
        &["NETWORK_NAMESPACE"],
        8,
    ),
    ("cni-mode", None, Domain::Bool, &["CNI_MODE"], 8),
    ("reconcile", None, Domain::Bool, &["RECONCILE"], 8),
    ("force-apply", None, Domain::Bool, &["FORCE_APPLY"], 8),
    (
        "force-iptables-binary",
        None,
        Domain::IptablesBinary,
        &["FORCE_IPTABLES_BINARY"],
        6,
    ),
    ("log_output_level", None, Domain::LogLevel, &[], 8),
    ("log_as_json", None, Domain::Bool, &[], 4),
    ("log_target", None, Domain::LogWords, &[], 4),
    ("log_caller", None, Domain::LogWords, &[], 4),
    ("log_stacktrace_level", None, Domain::LogLevel, &[], 4),
];

/// The environment-only settings (Istio's `constants.OwnerGroupsInclude`, `OwnerGroupsExclude`,
/// `HostIPv4LoopbackCidr` and `ENVOY_USER`).
const ENV_ONLY: &[(&str, &[&str], &[&str], u64)] = &[
    ("ISTIO_OUTBOUND_OWNER_GROUPS", GROUPS, BAD_GROUPS, 20),
    (
        "ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE",
        GROUPS,
        BAD_GROUPS,
        20,
    ),
    (
        "ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR",
        LOOPBACK,
        BAD_LOOPBACK,
        12,
    ),
    (
        "ENVOY_USER",
        &["root", "nobody", "istio-proxy", "daemon"],
        &["no-such-user"],
        15,
    ),
];

/// Percent of values drawn from a domain's invalid set.
const INVALID_PERCENT: u64 = 12;

fn list(rng: &mut Rng, good: &[&str], bad: &[&str], max: usize) -> String {
    let n = 1 + rng.below(max);
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        if rng.chance(INVALID_PERCENT / 2) {
            items.push(rng.pick(bad).to_string());
        } else {
            items.push(rng.pick(good).to_string());
        }
    }
    let mut s = items.join(",");
    if rng.chance(4) {
        s.push(',');
    }
    s
}

fn one(rng: &mut Rng, good: &[&str], bad: &[&str]) -> String {
    if rng.chance(INVALID_PERCENT) {
        rng.pick(bad).to_string()
    } else {
        rng.pick(good).to_string()
    }
}

fn value(rng: &mut Rng, domain: Domain) -> String {
    match domain {
        Domain::Port => one(rng, PORTS, BAD_PORTS),
        Domain::PortList { wildcard } => {
            if wildcard && rng.chance(40) {
                "*".to_string()
            } else if rng.chance(8) {
                String::new()
            } else {
                list(rng, PORTS, BAD_PORTS, 4)
            }
        }
        Domain::Uids => {
            if rng.chance(INVALID_PERCENT) {
                rng.pick(BAD_UIDS).to_string()
            } else {
                rng.pick(UIDS).to_string()
            }
        }
        Domain::Mode => one(
            rng,
            &["REDIRECT", "TPROXY", ""],
            &["tproxy", "FOO", "redirect"],
        ),
        Domain::Cidrs { wildcard } => {
            if wildcard && rng.chance(40) {
                "*".to_string()
            } else if rng.chance(10) {
                String::new()
            } else if !wildcard && rng.chance(3) {
                "*".to_string()
            } else {
                list(rng, CIDRS, BAD_CIDRS, 3)
            }
        }
        Domain::Ifaces => list(rng, IFACES, BAD_IFACES, 2),
        Domain::Mark => one(rng, MARKS, BAD_MARKS),
        Domain::Table => one(rng, TABLES, BAD_TABLES),
        Domain::Duration => one(rng, DURATIONS, BAD_DURATIONS),
        Domain::Bool => one(rng, BOOL_WORDS, BAD_BOOL_WORDS),
        Domain::NetNsPath => rng.pick(&["/var/run/netns/pod", ""]).to_string(),
        Domain::IptablesBinary => one(rng, &["legacy", "nft", ""], &["foo", "NFT"]),
        Domain::LogLevel => one(
            rng,
            // Not `none`: it would hide the reason of Istio's refusal, which the allow-list reads.
            &["default:info", "debug", "default:debug", "warn"],
            &["bogus", "default:loud"],
        ),
        // Not a file name: Istio would write its log there.
        Domain::LogWords => rng.pick(&["stdout", "stderr"]).to_string(),
    }
}

/// Appends one flag in a spelling pflag accepts (`--long=v`, `--long v`, `-s v`, `-sv`; a boolean as
/// `--long` or `--long=v`).
fn push_flag(
    rng: &mut Rng,
    args: &mut Vec<String>,
    long: &str,
    short: Option<char>,
    domain: Domain,
) {
    if let Domain::Bool = domain {
        if rng.chance(70) {
            args.push(format!("--{long}"));
        } else {
            args.push(format!("--{long}={}", value(rng, domain)));
        }
        return;
    }
    let v = value(rng, domain);
    match (short, rng.below(4)) {
        (_, 0) => args.push(format!("--{long}={v}")),
        (Some(s), 2) => {
            args.push(format!("-{s}"));
            args.push(v);
        }
        (Some(s), 3) if !v.is_empty() && !v.starts_with('-') => args.push(format!("-{s}{v}")),
        _ => {
            args.push(format!("--{long}"));
            args.push(v);
        }
    }
}

/// The case number `index` of the run seeded with `seed`.
pub fn case(seed: u64, index: u64) -> Case {
    let mut rng = Rng::new(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
    // Warm up, so neighbouring indexes do not start alike.
    rng.next_u64();
    let mut args = Vec::new();
    let mut env = Vec::new();
    // Istio's injected arguments are the usual start (`-p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' ...`):
    // half of the cases begin from them, the rest from nothing.
    let injected = rng.chance(50);
    if injected {
        for (flag, v) in [
            ("-p", "15001"),
            ("-z", "15006"),
            ("-u", "1337"),
            ("-m", if rng.chance(30) { "TPROXY" } else { "REDIRECT" }),
            ("-i", "*"),
            ("-x", ""),
            ("-b", "*"),
            ("-d", "15090,15021,15020"),
        ] {
            args.push(flag.to_string());
            args.push(v.to_string());
        }
    }
    let mut flags: Vec<usize> = (0..FLAGS.len()).collect();
    // Flag order matters only for repeated flags (the last wins); shuffle so that both orders are tried.
    for i in (1..flags.len()).rev() {
        flags.swap(i, rng.below(i + 1));
    }
    for i in flags {
        let (long, short, domain, envs, percent) = FLAGS[i];
        if !rng.chance(percent) {
            continue;
        }
        if !envs.is_empty() && rng.chance(25) {
            let name = rng.pick(envs);
            env.push((name.to_string(), value(&mut rng, domain)));
            if rng.chance(20) {
                // Both set: the flag wins over the environment.
                push_flag(&mut rng, &mut args, long, short, domain);
            }
        } else {
            push_flag(&mut rng, &mut args, long, short, domain);
        }
    }
    for (name, good, bad, percent) in ENV_ONLY {
        if rng.chance(*percent) {
            env.push((name.to_string(), one(&mut rng, good, bad)));
        }
    }
    let nftables = rng.chance(15);
    if nftables {
        if rng.chance(80) {
            args.push("--native-nftables".to_string());
        } else {
            env.push(("NATIVE_NFTABLES".to_string(), "true".to_string()));
        }
    }
    let cleanup = rng.chance(4);
    if cleanup {
        if rng.chance(70) {
            args.push("--cleanup-only".to_string());
        } else {
            env.push(("CLEANUP_ONLY".to_string(), "true".to_string()));
        }
    }
    // Stray positional arguments are rare in practice; try a few.
    if rng.chance(2) {
        args.push("stray".to_string());
    }
    let addresses = if rng.chance(3) {
        Addresses::None
    } else {
        Addresses::ALL[rng.below(4)]
    };
    let surroundings = Surroundings {
        addresses,
        resolv: rng.below(RESOLV_CONFS.len()),
    };
    Case {
        seed,
        index,
        args,
        env,
        surroundings,
        nftables,
        cleanup,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_and_index_give_the_same_case() {
        for i in 0..50 {
            let (a, b) = (case(7, i), case(7, i));
            assert_eq!((a.args, a.env), (b.args, b.env));
        }
        assert_ne!(case(7, 1).args, case(8, 1).args);
    }

    #[test]
    fn every_flag_and_both_backends_are_drawn() {
        let cases: Vec<Case> = (0..2000).map(|i| case(1, i)).collect();
        assert!(cases.iter().any(|c| c.cleanup));
        for (long, _, _, envs, _) in FLAGS {
            let seen = cases.iter().any(|c| {
                c.args.iter().any(|a| a.starts_with(&format!("--{long}")))
                    || c.env.iter().any(|(k, _)| envs.contains(&k.as_str()))
            });
            assert!(seen, "--{long} never drawn");
        }
        assert!(cases.iter().any(|c| c.nftables));
        assert!(cases.iter().any(|c| !c.nftables));
        for a in Addresses::ALL {
            assert!(cases.iter().any(|c| c.surroundings.addresses == a), "{a:?}");
        }
    }

    #[test]
    fn shell_lines_quote_what_needs_it() {
        for (input, want) in [
            ("15001", "15001"),
            ("*", "'*'"),
            ("", "''"),
            ("a'b", "'a'\\''b'"),
        ] {
            assert_eq!(shell_quote(input), want, "{input:?}");
        }
    }
}
