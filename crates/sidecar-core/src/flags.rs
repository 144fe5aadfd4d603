//! The definition of every flag, once: names, value kind, environment variables and their precedence,
//! default and help text, in the order `--help` lists them.
//!
//! [`FLAGS`] drives everything a flag is used for: `cli` parses the command line with it (its
//! fast path and clap's command are both built from it), `--help` is generated from it,
//! `config::resolve` reads each flag's environment variables from it, and
//! docs/reference/iptables-init-flags.md is generated from it (`cargo run -p xtask -- docs`). The names
//! and variables are istio-iptables' (Istio's `tools/istio-iptables/pkg/cmd/root.go` binds them); the
//! flags that replace what Istio reads from its surroundings, and the log flags of Istio's
//! `pkg/log/options.go`, are here too.

use std::time::Duration;

/// What a flag's value is, as the command line reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A Go boolean: `--flag`, or `--flag=<bool>` (never `--flag <bool>`).
    Bool,
    /// A string, kept as written; `config::resolve` validates it.
    Value,
    /// A comma-separated list, kept as written; `config::resolve` splits and validates it.
    List,
    /// A port number (0 to 65535 at the command line; `config::resolve` refuses 0).
    Port,
    /// A Go duration.
    Duration,
    /// One of these words (each with its help text).
    Choice(&'static [(&'static str, &'static str)]),
}

/// A flag's value when neither the command line nor the environment sets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// No value: an empty string or list.
    Empty,
    /// Off (booleans).
    Off,
    /// This value (`--help` shows it as `[default: …]`).
    Value(&'static str),
    /// Worked out at run time: `readme` says how, in the reference docs' words, and `help`, when given, is
    /// the `[default: …]` that `--help` shows.
    Derived {
        readme: &'static str,
        help: Option<&'static str>,
    },
}

/// Which of the reference docs' flag tables lists a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// istio-iptables' own flags.
    Istio,
    /// Flags for what Istio reads from its surroundings (interfaces, resolv.conf, the environment only).
    Surroundings,
    /// Istio's log flags.
    Log,
    /// The flags of `iptables-init explain` (not in [`FLAGS`]: a run does not take them).
    Explain,
}

/// One flag.
#[derive(Debug, PartialEq, Eq)]
pub struct Flag {
    pub long: &'static str,
    pub short: Option<char>,
    pub kind: Kind,
    /// The placeholder of the value in `--help`.
    pub value_name: &'static str,
    /// The environment variables read when the flag is not on the command line, in order: each one that
    /// is set overrides the ones before it (Istio's "also" variables come after the primary one).
    pub env: &'static [&'static str],
    pub default: Fallback,
    pub help: &'static str,
    pub group: Group,
}

impl Flag {
    /// How errors name the flag: `-p/--envoy-port`, or `--dry-run` for a flag without a short name.
    pub fn origin(&self) -> String {
        match self.short {
            Some(s) => format!("-{s}/--{}", self.long),
            None => format!("--{}", self.long),
        }
    }

    /// The help line `--help` shows: the help text, the default, the environment variables.
    pub fn help_line(&self) -> String {
        let mut line = self.help.to_string();
        match self.default {
            Fallback::Value(v) | Fallback::Derived { help: Some(v), .. } => {
                line.push_str(&format!(" [default: {v}]"));
            }
            _ => {}
        }
        if let Some((first, also)) = self.env.split_first() {
            line.push_str(&format!(" [env: {first}"));
            for name in also {
                line.push_str(&format!(", overridden by {name}"));
            }
            line.push(']');
        }
        line
    }

    /// The flag as Istio's injection template writes it before its value: `-p`, or `--dry-run` for a
    /// flag without a short name.
    pub fn short_arg(&self) -> String {
        match self.short {
            Some(s) => format!("-{s}"),
            None => format!("--{}", self.long),
        }
    }

    /// This flag's position in [`FLAGS`].
    pub fn index(&'static self) -> usize {
        FLAGS
            .iter()
            .position(|f| std::ptr::eq(*f, self))
            .unwrap_or(usize::MAX)
    }
}

/// An istio-iptables command line built from the definitions here, so that its caller names each flag
/// by its static and never spells it: the injector's `istio-init` arguments (Istio's injection template
/// writes the short names, the value as the next argument). The CNI plugin writes no command line: it
/// fills iptables-init's typed `Args` by flag, as Istio's `Program` fills istio-iptables' `Config`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Argv(Vec<String>);

impl Argv {
    pub fn new() -> Argv {
        Argv::default()
    }

    /// An argument that is not a flag (the `istio-iptables` subcommand).
    pub fn word(&mut self, word: &str) -> &mut Argv {
        self.0.push(word.to_string());
        self
    }

    /// `-p VALUE`: [`Flag::short_arg`] and the value, two arguments.
    pub fn short(&mut self, flag: &Flag, value: &str) -> &mut Argv {
        self.0.push(flag.short_arg());
        self.0.push(value.to_string());
        self
    }

    /// `--long=VALUE`, one argument (an empty value stays an explicit empty value).
    pub fn long(&mut self, flag: &Flag, value: &str) -> &mut Argv {
        self.0.push(format!("--{}={value}", flag.long));
        self
    }

    /// `--long`: a boolean flag turned on.
    pub fn switch(&mut self, flag: &Flag) -> &mut Argv {
        debug_assert_eq!(flag.kind, Kind::Bool, "--{} is not a switch", flag.long);
        self.0.push(format!("--{}", flag.long));
        self
    }

    pub fn into_vec(self) -> Vec<String> {
        self.0
    }
}

/// The flag whose long name is `long`.
pub fn by_long(long: &str) -> Option<&'static Flag> {
    FLAGS.iter().copied().find(|f| f.long == long)
}

/// The flag whose short name is `short`.
pub fn by_short(short: char) -> Option<&'static Flag> {
    FLAGS.iter().copied().find(|f| f.short == Some(short))
}

/// Parses a Go `strconv.ParseBool` boolean.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(format!(
            "invalid boolean {s:?} (use 1, t, T, true, TRUE, True, 0, f, F, false, FALSE or False)"
        )),
    }
}

/// Parses a port as pflag's `uint16` flag does (`strconv.ParseUint(s, 0, 16)`): decimal, or with Go's
/// base prefixes `0x`, `0o`, `0b`, or a leading `0` for octal (so `010` is 8 and `080` is an error, as
/// for `--iptables-probe-port` in Istio; found by the rules differential); `_` may separate
/// digits only after a base prefix.
pub fn parse_go_port(s: &str) -> Result<u16, String> {
    let err = || format!("invalid port {s:?} (0 to 65535, Go integer syntax)");
    let lower = s.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    // Go's underscoreOK: only with a prefix, never first or last (after the prefix) nor doubled.
    if digits.contains('_')
        && (!prefixed
            || digits.starts_with('_')
            || digits.ends_with('_')
            || digits.contains("__")
            || (radix == 8 && !lower.starts_with("0o") && lower[1..].starts_with('_')))
    {
        return Err(err());
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || !clean.chars().all(|c| c.is_digit(radix)) {
        return Err(err());
    }
    u16::from_str_radix(&clean, radix).map_err(|_| err())
}

/// Parses a Go `time.ParseDuration` duration (`5s`, `1m30s`, `250ms`, `1.5h`, `0`). A negative one,
/// which Go accepts, is a timeout that has already expired: zero (Istio takes `--probe-timeout -1s`;
/// found by the rules differential).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("invalid duration {s:?} (Go syntax, e.g. 5s, 1m30s, 250ms)");
    if let Some(negative) = s.strip_prefix('-') {
        if negative.starts_with(['+', '-']) {
            return Err(err());
        }
        return parse_go_duration(negative).map(|_| Duration::ZERO);
    }
    let body = s.strip_prefix('+').unwrap_or(s);
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    if body.is_empty() || body.starts_with('-') {
        return Err(err());
    }
    let mut total_ns: f64 = 0.0;
    let mut rest = body;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(err());
        }
        let value: f64 = num.parse().map_err(|_| err())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        total_ns += value * scale;
        rest = next;
    }
    if !total_ns.is_finite() || total_ns > u64::MAX as f64 {
        return Err(err());
    }
    Ok(Duration::from_nanos(total_ns as u64))
}

/// `--ipv6`'s words.
pub const IPV6_MODES: &[(&str, &str)] = &[
    (
        "auto",
        "Istio's detection from the namespace's interface addresses (Istio's `EnableIPv6`)",
    ),
    ("true", "Always emit IPv6 rules"),
    ("false", "Never emit IPv6 rules"),
];

use Fallback::{Derived, Empty, Off};
use Kind::{Bool, List, Port, Value};

/// An Istio boolean flag without a short name, off unless given: most of Istio's switches.
const fn switch(long: &'static str, env: &'static [&'static str], help: &'static str) -> Flag {
    Flag {
        long,
        short: None,
        kind: Bool,
        value_name: "BOOL",
        env,
        default: Off,
        help,
        group: Group::Istio,
    }
}

pub static ENVOY_PORT: Flag = Flag {
    long: "envoy-port",
    short: Some('p'),
    kind: Value,
    value_name: "PORT",
    env: &[],
    default: Fallback::Value("15001"),
    help: "Outbound listener port: all outbound TCP is redirected to it",
    group: Group::Istio,
};
pub static INBOUND_CAPTURE_PORT: Flag = Flag {
    long: "inbound-capture-port",
    short: Some('z'),
    kind: Value,
    value_name: "PORT",
    env: &["INBOUND_CAPTURE_PORT"],
    default: Fallback::Value("15006"),
    help: "Inbound listener port: captured inbound TCP is redirected to it",
    group: Group::Istio,
};
pub static INBOUND_TUNNEL_PORT: Flag = Flag {
    long: "inbound-tunnel-port",
    short: Some('e'),
    kind: Value,
    value_name: "PORT",
    env: &["INBOUND_TUNNEL_PORT"],
    default: Fallback::Value("15008"),
    help: "Tunnel (HBONE) port, never captured",
    group: Group::Istio,
};
pub static PROXY_UID: Flag = Flag {
    long: "proxy-uid",
    short: Some('u'),
    kind: List,
    value_name: "UIDS",
    env: &["PROXY_UID"],
    default: Derived {
        readme: "uid of `$ENVOY_USER` (default `istio-proxy`) in `/etc/passwd`, else `1337`",
        help: None,
    },
    help:
        "Proxy uid list; empty: uid of $ENVOY_USER (default istio-proxy) in /etc/passwd, else 1337",
    group: Group::Istio,
};
pub static PROXY_GID: Flag = Flag {
    long: "proxy-gid",
    short: Some('g'),
    kind: List,
    value_name: "GIDS",
    env: &["PROXY_GID"],
    default: Derived {
        readme: "the `-u` list",
        help: None,
    },
    help: "Proxy gid list; empty: the uid list",
    group: Group::Istio,
};
pub static INBOUND_INTERCEPTION_MODE: Flag = Flag {
    long: "istio-inbound-interception-mode",
    short: Some('m'),
    kind: Value,
    value_name: "MODE",
    env: &["ISTIO_INBOUND_INTERCEPTION_MODE"],
    default: Derived {
        readme: "empty (= `REDIRECT`)",
        help: None,
    },
    help: "Inbound interception mode: REDIRECT (default) or TPROXY",
    group: Group::Istio,
};
pub static INBOUND_PORTS: Flag = Flag {
    long: "istio-inbound-ports",
    short: Some('b'),
    kind: List,
    value_name: "PORTS",
    env: &["ISTIO_INBOUND_PORTS"],
    default: Empty,
    help: "Inbound ports to capture: `*` for all, empty for none, or a port list",
    group: Group::Istio,
};
pub static LOCAL_EXCLUDE_PORTS: Flag = Flag {
    long: "istio-local-exclude-ports",
    short: Some('d'),
    kind: List,
    value_name: "PORTS",
    env: &["ISTIO_LOCAL_EXCLUDE_PORTS"],
    default: Empty,
    help: "Inbound ports not captured (only with -b '*')",
    group: Group::Istio,
};
pub static EXCLUDE_INTERFACES: Flag = Flag {
    long: "istio-exclude-interfaces",
    short: Some('c'),
    kind: List,
    value_name: "IFACES",
    env: &["ISTIO_EXCLUDE_INTERFACES"],
    default: Empty,
    help: "Interfaces left alone entirely; a trailing + is a prefix (eth+)",
    group: Group::Istio,
};
pub static SERVICE_CIDR: Flag = Flag {
    long: "istio-service-cidr",
    short: Some('i'),
    kind: List,
    value_name: "CIDRS",
    env: &["ISTIO_SERVICE_CIDR"],
    default: Empty,
    help: "Outbound CIDRs to capture: `*` for all, empty for none",
    group: Group::Istio,
};
pub static SERVICE_EXCLUDE_CIDR: Flag = Flag {
    long: "istio-service-exclude-cidr",
    short: Some('x'),
    kind: List,
    value_name: "CIDRS",
    env: &["ISTIO_SERVICE_EXCLUDE_CIDR"],
    default: Empty,
    help: "Outbound CIDRs never captured",
    group: Group::Istio,
};
pub static OUTBOUND_PORTS: Flag = Flag {
    long: "istio-outbound-ports",
    short: Some('q'),
    kind: List,
    value_name: "PORTS",
    env: &["ISTIO_OUTBOUND_PORTS"],
    default: Empty,
    help: "Outbound TCP ports always captured",
    group: Group::Istio,
};
pub static LOCAL_OUTBOUND_PORTS_EXCLUDE: Flag = Flag {
    long: "istio-local-outbound-ports-exclude",
    short: Some('o'),
    kind: List,
    value_name: "PORTS",
    env: &["ISTIO_LOCAL_OUTBOUND_PORTS_EXCLUDE"],
    default: Empty,
    help: "Outbound TCP/UDP ports never captured",
    group: Group::Istio,
};
pub static KUBE_VIRT_INTERFACES: Flag = Flag {
    long: "kube-virt-interfaces",
    short: Some('k'),
    kind: List,
    value_name: "IFACES",
    env: &["KUBE_VIRT_INTERFACES"],
    default: Empty,
    help: "Interfaces whose inbound traffic is treated as outbound; a trailing + is a prefix",
    group: Group::Istio,
};
pub static TPROXY_MARK: Flag = Flag {
    long: "istio-inbound-tproxy-mark",
    short: Some('t'),
    kind: Value,
    value_name: "MARK",
    env: &["ISTIO_INBOUND_TPROXY_MARK"],
    default: Fallback::Value("1337"),
    help: "TPROXY mark",
    group: Group::Istio,
};
pub static TPROXY_ROUTE_TABLE: Flag = Flag {
    long: "istio-inbound-tproxy-route-table",
    short: Some('r'),
    kind: Value,
    value_name: "TABLE",
    env: &["ISTIO_INBOUND_TPROXY_ROUTE_TABLE"],
    default: Fallback::Value("133"),
    help: "TPROXY policy-routing table",
    group: Group::Istio,
};
pub static DRY_RUN: Flag = Flag {
    short: Some('n'),
    ..switch(
        "dry-run",
        &["DRY_RUN"],
        "Print the iptables-restore input instead of applying it; touches nothing",
    )
};
pub static IPTABLES_PROBE_PORT: Flag = Flag {
    long: "iptables-probe-port",
    short: None,
    kind: Port,
    value_name: "PORT",
    env: &["IPTABLES_PROBE_PORT"],
    default: Fallback::Value("15002"),
    help: "Validation: the port the probe connects to",
    group: Group::Istio,
};
pub static PROBE_TIMEOUT: Flag = Flag {
    long: "probe-timeout",
    short: None,
    kind: Kind::Duration,
    value_name: "DURATION",
    env: &["PROBE_TIMEOUT"],
    default: Fallback::Value("5s"),
    help: "Validation: overall timeout, Go duration syntax",
    group: Group::Istio,
};
pub static SKIP_RULE_APPLY: Flag = switch(
    "skip-rule-apply",
    &["SKIP_RULE_APPLY"],
    "Skip detection, rules and routes (with --run-validation in CNI mode)",
);
pub static RUN_VALIDATION: Flag = switch(
    "run-validation",
    &["RUN_VALIDATION"],
    "Prove interception with a real connection after applying",
);
pub static REDIRECT_DNS: Flag = switch(
    "redirect-dns",
    &["REDIRECT_DNS", "ISTIO_META_DNS_CAPTURE"],
    "Capture DNS to the agent on 15053",
);
pub static DROP_INVALID: Flag = switch(
    "drop-invalid",
    &["DROP_INVALID", "INVALID_DROP"],
    "Drop packets in conntrack state INVALID",
);
pub static DUAL_STACK: Flag = switch(
    "dual-stack",
    &["DUAL_STACK", "ISTIO_DUAL_STACK"],
    "IPv6 detection: on if any address is IPv6",
);
pub static CAPTURE_ALL_DNS: Flag = switch(
    "capture-all-dns",
    &["CAPTURE_ALL_DNS"],
    "With --redirect-dns: capture all port-53 traffic, not only to the configured servers",
);
pub static NETWORK_NAMESPACE: Flag = Flag {
    long: "network-namespace",
    short: None,
    kind: Value,
    value_name: "PATH",
    env: &["NETWORK_NAMESPACE"],
    default: Empty,
    help: "Network namespace path (CNI lock file only; does not enter a namespace)",
    group: Group::Istio,
};
pub static CNI_MODE: Flag = switch(
    "cni-mode",
    &["CNI_MODE"],
    "CNI mode: pod-scoped lock, sandboxed commands",
);
pub static RECONCILE: Flag = switch(
    "reconcile",
    &["RECONCILE"],
    "Replace existing rules of ours that differ from the plan",
);
pub static CLEANUP_ONLY: Flag = switch(
    "cleanup-only",
    &["CLEANUP_ONLY"],
    "Remove this configuration's rules and chains; apply nothing",
);
pub static FORCE_APPLY: Flag = switch(
    "force-apply",
    &["FORCE_APPLY"],
    "Apply even when the current state already matches",
);
pub static NATIVE_NFTABLES: Flag = switch(
    "native-nftables",
    &["NATIVE_NFTABLES"],
    "Istio's nftables backend: inet tables applied in-process over netlink",
);
pub static FORCE_IPTABLES_BINARY: Flag = Flag {
    long: "force-iptables-binary",
    short: None,
    kind: Value,
    value_name: "BACKEND",
    env: &["FORCE_IPTABLES_BINARY"],
    default: Empty,
    help: "Force the iptables backend: `legacy` or `nft`",
    group: Group::Istio,
};
pub static IPV6: Flag = Flag {
    long: "ipv6",
    short: None,
    kind: Kind::Choice(IPV6_MODES),
    value_name: "MODE",
    env: &[],
    default: Fallback::Value("auto"),
    help: "Emit IPv6 rules: `auto` detects as Istio does from the interface addresses",
    group: Group::Surroundings,
};
pub static DNS_SERVERS: Flag = Flag {
    long: "dns-servers",
    short: None,
    kind: List,
    value_name: "IPS",
    env: &[],
    default: Derived {
        readme: "nameservers of `/etc/resolv.conf` (read only for `--redirect-dns` without `--capture-all-dns`)",
        help: Some("nameservers of /etc/resolv.conf"),
    },
    help: "DNS servers for --redirect-dns; empty for none",
    group: Group::Surroundings,
};
pub static OUTBOUND_OWNER_GROUPS: Flag = Flag {
    long: "outbound-owner-groups",
    short: None,
    kind: List,
    value_name: "GROUPS",
    env: &["ISTIO_OUTBOUND_OWNER_GROUPS"],
    default: Fallback::Value("*"),
    help: "Groups whose outbound traffic is captured, `*` for all",
    group: Group::Surroundings,
};
pub static OUTBOUND_OWNER_GROUPS_EXCLUDE: Flag = Flag {
    long: "outbound-owner-groups-exclude",
    short: None,
    kind: List,
    value_name: "GROUPS",
    env: &["ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE"],
    default: Empty,
    help: "Groups not captured (only with --outbound-owner-groups '*')",
    group: Group::Surroundings,
};
pub static HOST_IPV4_LOOPBACK_CIDR: Flag = Flag {
    long: "host-ipv4-loopback-cidr",
    short: None,
    kind: Value,
    value_name: "CIDR",
    env: &["ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR"],
    default: Fallback::Value("127.0.0.1/32"),
    help: "IPv4 loopback CIDR never captured",
    group: Group::Surroundings,
};
pub static LOG_OUTPUT_LEVEL: Flag = Flag {
    long: "log_output_level",
    short: None,
    kind: List,
    value_name: "LEVELS",
    env: &[],
    default: Fallback::Value("default:info"),
    help: "Log levels, `scope:level,...` or `level` (debug, info, warn, error, fatal, none)",
    group: Group::Log,
};
pub static LOG_AS_JSON: Flag = Flag {
    long: "log_as_json",
    short: None,
    kind: Bool,
    value_name: "BOOL",
    env: &[],
    default: Off,
    help: "Log as JSON lines",
    group: Group::Log,
};
pub static LOG_TARGET: Flag = Flag {
    long: "log_target",
    short: None,
    kind: List,
    value_name: "TARGETS",
    env: &[],
    default: Empty,
    help: "Log targets; accepted for compatibility, logs always go to stderr (stdout carries --dry-run output)",
    group: Group::Log,
};
pub static LOG_CALLER: Flag = Flag {
    long: "log_caller",
    short: None,
    kind: List,
    value_name: "SCOPES",
    env: &[],
    default: Empty,
    help: "Scopes whose log lines carry the source location",
    group: Group::Log,
};
pub static LOG_STACKTRACE_LEVEL: Flag = Flag {
    long: "log_stacktrace_level",
    short: None,
    kind: List,
    value_name: "LEVELS",
    env: &[],
    default: Fallback::Value("default:none"),
    help: "Accepted for compatibility (no stack traces are logged)",
    group: Group::Log,
};

/// Every flag, in the order `--help` lists them.
pub static FLAGS: [&Flag; 42] = [
    &ENVOY_PORT,
    &INBOUND_CAPTURE_PORT,
    &INBOUND_TUNNEL_PORT,
    &PROXY_UID,
    &PROXY_GID,
    &INBOUND_INTERCEPTION_MODE,
    &INBOUND_PORTS,
    &LOCAL_EXCLUDE_PORTS,
    &EXCLUDE_INTERFACES,
    &SERVICE_CIDR,
    &SERVICE_EXCLUDE_CIDR,
    &OUTBOUND_PORTS,
    &LOCAL_OUTBOUND_PORTS_EXCLUDE,
    &KUBE_VIRT_INTERFACES,
    &TPROXY_MARK,
    &TPROXY_ROUTE_TABLE,
    &DRY_RUN,
    &IPTABLES_PROBE_PORT,
    &PROBE_TIMEOUT,
    &SKIP_RULE_APPLY,
    &RUN_VALIDATION,
    &REDIRECT_DNS,
    &DROP_INVALID,
    &DUAL_STACK,
    &CAPTURE_ALL_DNS,
    &NETWORK_NAMESPACE,
    &CNI_MODE,
    &RECONCILE,
    &CLEANUP_ONLY,
    &FORCE_APPLY,
    &NATIVE_NFTABLES,
    &FORCE_IPTABLES_BINARY,
    &IPV6,
    &DNS_SERVERS,
    &OUTBOUND_OWNER_GROUPS,
    &OUTBOUND_OWNER_GROUPS_EXCLUDE,
    &HOST_IPV4_LOOPBACK_CIDR,
    &LOG_OUTPUT_LEVEL,
    &LOG_AS_JSON,
    &LOG_TARGET,
    &LOG_CALLER,
    &LOG_STACKTRACE_LEVEL,
];

/// `explain -o`'s words.
pub const OUTPUT_FORMATS: &[(&str, &str)] = &[
    ("text", "One block per connection, after the assumptions"),
    (
        "json",
        "One JSON object: {\"backend\", \"connections\": [...]}",
    ),
];

pub static CONNECTION: Flag = Flag {
    long: "connection",
    short: None,
    kind: Value,
    value_name: "SPEC",
    env: &[],
    default: Empty,
    help: "A connection to explain, repeatable: outbound|inbound:tcp|udp:[ADDRESS:]PORT[,uid=N][,gid=N][,iface=NAME]",
    group: Group::Explain,
};
pub static OUTPUT: Flag = Flag {
    long: "output",
    short: Some('o'),
    kind: Kind::Choice(OUTPUT_FORMATS),
    value_name: "FORMAT",
    env: &[],
    default: Fallback::Value("text"),
    help: "Output format; `-o` with another value is istio-iptables' -o (--istio-local-outbound-ports-exclude)",
    group: Group::Explain,
};

/// The flags `iptables-init explain` takes besides those of [`FLAGS`].
pub static EXPLAIN_FLAGS: [&Flag; 2] = [&CONNECTION, &OUTPUT];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_are_written_from_the_definitions() {
        let mut a = Argv::new();
        a.word("istio-iptables")
            .short(&ENVOY_PORT, "15001")
            .short(&LOG_OUTPUT_LEVEL, "info")
            .long(&SERVICE_CIDR, "")
            .switch(&CNI_MODE);
        assert_eq!(
            a.into_vec(),
            [
                "istio-iptables",
                "-p",
                "15001",
                "--log_output_level",
                "info",
                "--istio-service-cidr=",
                "--cni-mode"
            ]
        );
    }

    /// The explain flags are a table of their own: docs/reference/iptables-init-flags.md lists them
    /// apart, and a run does not take them.
    #[test]
    fn explain_flags_are_not_a_runs_flags() {
        let longs: Vec<&str> = EXPLAIN_FLAGS.iter().map(|f| f.long).collect();
        assert_eq!(longs, ["connection", "output"]);
        for flag in EXPLAIN_FLAGS {
            assert_eq!(flag.group, Group::Explain, "--{}", flag.long);
            assert!(flag.env.is_empty(), "--{}", flag.long);
            assert!(
                by_long(flag.long).is_none(),
                "--{} is not a run's flag",
                flag.long
            );
        }
        for flag in FLAGS {
            assert_ne!(
                flag.group,
                Group::Explain,
                "--{}: an explain flag in FLAGS",
                flag.long
            );
        }
    }

    #[test]
    fn names_are_unique_and_indexes_are_positions() {
        for (i, flag) in FLAGS.iter().enumerate() {
            assert_eq!(flag.index(), i, "--{}", flag.long);
            assert_eq!(
                by_long(flag.long).map(Flag::index),
                Some(i),
                "--{}",
                flag.long
            );
            if let Some(s) = flag.short {
                assert_eq!(by_short(s).map(Flag::index), Some(i), "-{s}");
            }
            let value_kinds = !matches!(flag.kind, Kind::Bool) || flag.value_name == "BOOL";
            assert!(value_kinds, "--{}", flag.long);
        }
        let envs: Vec<&str> = FLAGS.iter().flat_map(|f| f.env.iter().copied()).collect();
        let mut unique = envs.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            envs.len(),
            "an environment variable names one flag"
        );
    }

    #[test]
    fn help_lines_carry_the_default_and_the_environment() {
        assert_eq!(
            ENVOY_PORT.help_line(),
            "Outbound listener port: all outbound TCP is redirected to it [default: 15001]"
        );
        assert_eq!(
            REDIRECT_DNS.help_line(),
            "Capture DNS to the agent on 15053 [env: REDIRECT_DNS, overridden by ISTIO_META_DNS_CAPTURE]"
        );
        assert_eq!(
            DNS_SERVERS.help_line(),
            "DNS servers for --redirect-dns; empty for none [default: nameservers of /etc/resolv.conf]"
        );
        assert_eq!(
            PROXY_GID.help_line(),
            "Proxy gid list; empty: the uid list [env: PROXY_GID]"
        );
        assert_eq!(ENVOY_PORT.origin(), "-p/--envoy-port");
        assert_eq!(DRY_RUN.origin(), "-n/--dry-run");
        assert_eq!(REDIRECT_DNS.origin(), "--redirect-dns");
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("1h2m3s"), Ok(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "5", "s", "5x", "1..2s", ".", "--5s", "-x"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
        // Go accepts a negative duration; as a timeout it has already expired.
        assert_eq!(parse_go_duration("-5s"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("-0"), Ok(Duration::ZERO));
    }

    #[test]
    fn go_ports_are_parse_uint_base_0() {
        for (s, want) in [
            ("15001", 15001),
            ("0", 0),
            ("65535", 65535),
            ("010", 8),
            ("0x50", 80),
            ("0X1_F", 31),
            ("0o17", 15),
            ("0b101", 5),
        ] {
            assert_eq!(parse_go_port(s), Ok(want), "{s}");
        }
        for bad in [
            "080", "", "65536", "-1", "+1", "1_000", "0x", "0x_1", "0x1_", "abc", " 1", "1.5",
        ] {
            assert!(parse_go_port(bad).is_err(), "{bad}");
        }
    }
}
