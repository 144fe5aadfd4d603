//! The command line, spelled as istio-iptables spells it (spec §2–§3), plus the explicit flags that
//! replace what Istio reads from its surroundings.
//!
//! clap only does the syntax here: every value is kept as it was written (`Option<String>` for Istio's
//! string flags, so "not given" differs from "given empty"), and [`crate::config`] resolves the
//! environment and validates. The environment is *not* read by clap: Istio's rules for it (a value that
//! does not parse is ignored, and the "also" variables override the primary one) are not clap's, and an
//! injected environment keeps the resolution testable. The `[env: …]` notes in the help are applied by
//! [`crate::config::resolve`].
//!
//! Go/pflag details reproduced: `-p15001`, `-p 15001`, `-p=15001`, `--envoy-port=15001`; booleans as
//! `--flag` or `--flag=<1|t|T|true|TRUE|True|0|f|F|false|FALSE|False>`; the last occurrence of a flag wins;
//! a value may start with `-`. Stray positional arguments are rejected (Istio silently ignores them, which
//! turns `--dry-run false` into a dry run), except a leading `istio-iptables` word, so Istio's injected
//! arguments work unchanged.

use std::ffi::OsString;

use clap::Parser;

/// The subcommand word Istio's injector writes before its flags.
pub const ISTIO_SUBCOMMAND: &str = "istio-iptables";

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

/// Parses a Go `time.ParseDuration` duration (`5s`, `1m30s`, `250ms`, `1.5h`, `0`). Negative durations
/// are rejected: a timeout cannot be negative.
pub fn parse_go_duration(s: &str) -> Result<std::time::Duration, String> {
    let err = || format!("invalid duration {s:?} (Go syntax, e.g. 5s, 1m30s, 250ms)");
    let body = s.strip_prefix('+').unwrap_or(s);
    if body == "0" {
        return Ok(std::time::Duration::ZERO);
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
    Ok(std::time::Duration::from_nanos(total_ns as u64))
}

/// `--ipv6`: emit IPv6 rules, or detect as Istio does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Ipv6Mode {
    /// Istio's detection from the namespace's interface addresses (spec §4.3).
    Auto,
    /// Always emit IPv6 rules.
    True,
    /// Never emit IPv6 rules.
    False,
}

/// istio-iptables' flags, as written. See the spec §3 for what each one does.
#[derive(Debug, Clone, Default, Parser)]
#[command(
    name = "iptables-init",
    version,
    about = "Computes, prints (--dry-run) and applies Istio-compatible sidecar interception rules",
    long_about = "Computes, prints (--dry-run) and atomically applies Istio-compatible sidecar interception \
                  rules. Accepts istio-iptables' flags and environment unchanged; an optional leading \
                  `istio-iptables` word is ignored.\n\nExit status: 0 success, 1 invalid configuration or \
                  apply error, 126 --run-validation failed, 255 command-line parse error.",
    args_override_self = true,
    disable_help_subcommand = true
)]
pub struct Args {
    /// Outbound listener port: all outbound TCP is redirected to it [default: 15001]
    #[arg(
        short = 'p',
        long = "envoy-port",
        value_name = "PORT",
        allow_hyphen_values = true
    )]
    pub envoy_port: Option<String>,

    /// Inbound listener port: captured inbound TCP is redirected to it [default: 15006] [env: INBOUND_CAPTURE_PORT]
    #[arg(
        short = 'z',
        long = "inbound-capture-port",
        value_name = "PORT",
        allow_hyphen_values = true
    )]
    pub inbound_capture_port: Option<String>,

    /// Tunnel (HBONE) port, never captured [default: 15008] [env: INBOUND_TUNNEL_PORT]
    #[arg(
        short = 'e',
        long = "inbound-tunnel-port",
        value_name = "PORT",
        allow_hyphen_values = true
    )]
    pub inbound_tunnel_port: Option<String>,

    /// Proxy uid list; empty: uid of $ENVOY_USER (default istio-proxy) in /etc/passwd, else 1337 [env: PROXY_UID]
    #[arg(
        short = 'u',
        long = "proxy-uid",
        value_name = "UIDS",
        allow_hyphen_values = true
    )]
    pub proxy_uid: Option<String>,

    /// Proxy gid list; empty: the uid list [env: PROXY_GID]
    #[arg(
        short = 'g',
        long = "proxy-gid",
        value_name = "GIDS",
        allow_hyphen_values = true
    )]
    pub proxy_gid: Option<String>,

    /// Inbound interception mode: REDIRECT (default) or TPROXY [env: ISTIO_INBOUND_INTERCEPTION_MODE]
    #[arg(
        short = 'm',
        long = "istio-inbound-interception-mode",
        value_name = "MODE",
        allow_hyphen_values = true
    )]
    pub inbound_interception_mode: Option<String>,

    /// Inbound ports to capture: `*` for all, empty for none, or a port list [env: ISTIO_INBOUND_PORTS]
    #[arg(
        short = 'b',
        long = "istio-inbound-ports",
        value_name = "PORTS",
        allow_hyphen_values = true
    )]
    pub inbound_ports: Option<String>,

    /// Inbound ports not captured (only with -b '*') [env: ISTIO_LOCAL_EXCLUDE_PORTS]
    #[arg(
        short = 'd',
        long = "istio-local-exclude-ports",
        value_name = "PORTS",
        allow_hyphen_values = true
    )]
    pub local_exclude_ports: Option<String>,

    /// Interfaces left alone entirely [env: ISTIO_EXCLUDE_INTERFACES]
    #[arg(
        short = 'c',
        long = "istio-exclude-interfaces",
        value_name = "IFACES",
        allow_hyphen_values = true
    )]
    pub exclude_interfaces: Option<String>,

    /// Outbound CIDRs to capture: `*` for all, empty for none [env: ISTIO_SERVICE_CIDR]
    #[arg(
        short = 'i',
        long = "istio-service-cidr",
        value_name = "CIDRS",
        allow_hyphen_values = true
    )]
    pub service_cidr: Option<String>,

    /// Outbound CIDRs never captured [env: ISTIO_SERVICE_EXCLUDE_CIDR]
    #[arg(
        short = 'x',
        long = "istio-service-exclude-cidr",
        value_name = "CIDRS",
        allow_hyphen_values = true
    )]
    pub service_exclude_cidr: Option<String>,

    /// Outbound TCP ports always captured [env: ISTIO_OUTBOUND_PORTS]
    #[arg(
        short = 'q',
        long = "istio-outbound-ports",
        value_name = "PORTS",
        allow_hyphen_values = true
    )]
    pub outbound_ports: Option<String>,

    /// Outbound TCP/UDP ports never captured [env: ISTIO_LOCAL_OUTBOUND_PORTS_EXCLUDE]
    #[arg(
        short = 'o',
        long = "istio-local-outbound-ports-exclude",
        value_name = "PORTS",
        allow_hyphen_values = true
    )]
    pub local_outbound_ports_exclude: Option<String>,

    /// Interfaces whose inbound traffic is treated as outbound [env: KUBE_VIRT_INTERFACES]
    #[arg(
        short = 'k',
        long = "kube-virt-interfaces",
        value_name = "IFACES",
        allow_hyphen_values = true
    )]
    pub kube_virt_interfaces: Option<String>,

    /// TPROXY mark [default: 1337] [env: ISTIO_INBOUND_TPROXY_MARK]
    #[arg(
        short = 't',
        long = "istio-inbound-tproxy-mark",
        value_name = "MARK",
        allow_hyphen_values = true
    )]
    pub tproxy_mark: Option<String>,

    /// TPROXY policy-routing table [default: 133] [env: ISTIO_INBOUND_TPROXY_ROUTE_TABLE]
    #[arg(
        short = 'r',
        long = "istio-inbound-tproxy-route-table",
        value_name = "TABLE",
        allow_hyphen_values = true
    )]
    pub tproxy_route_table: Option<String>,

    /// Print the iptables-restore input instead of applying it; touches nothing [env: DRY_RUN]
    #[arg(short = 'n', long = "dry-run", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub dry_run: Option<bool>,

    /// Validation: the port the probe connects to [default: 15002] [env: IPTABLES_PROBE_PORT]
    #[arg(long = "iptables-probe-port", value_name = "PORT")]
    pub iptables_probe_port: Option<u16>,

    /// Validation: overall timeout, Go duration syntax [default: 5s] [env: PROBE_TIMEOUT]
    #[arg(long = "probe-timeout", value_name = "DURATION", value_parser = parse_go_duration)]
    pub probe_timeout: Option<std::time::Duration>,

    /// Skip detection, rules and routes (with --run-validation in CNI mode) [env: SKIP_RULE_APPLY]
    #[arg(long = "skip-rule-apply", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub skip_rule_apply: Option<bool>,

    /// Prove interception with a real connection after applying [env: RUN_VALIDATION]
    #[arg(long = "run-validation", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub run_validation: Option<bool>,

    /// Capture DNS to the agent on 15053 [env: REDIRECT_DNS, overridden by ISTIO_META_DNS_CAPTURE]
    #[arg(long = "redirect-dns", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub redirect_dns: Option<bool>,

    /// Drop packets in conntrack state INVALID [env: DROP_INVALID, overridden by INVALID_DROP]
    #[arg(long = "drop-invalid", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub drop_invalid: Option<bool>,

    /// IPv6 detection: on if any address is IPv6 [env: DUAL_STACK, overridden by ISTIO_DUAL_STACK]
    #[arg(long = "dual-stack", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub dual_stack: Option<bool>,

    /// With --redirect-dns: capture all port-53 traffic, not only to the configured servers [env: CAPTURE_ALL_DNS]
    #[arg(long = "capture-all-dns", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub capture_all_dns: Option<bool>,

    /// Network namespace path (CNI lock file only; does not enter a namespace) [env: NETWORK_NAMESPACE]
    #[arg(
        long = "network-namespace",
        value_name = "PATH",
        allow_hyphen_values = true
    )]
    pub network_namespace: Option<String>,

    /// CNI mode: pod-scoped lock, sandboxed commands [env: CNI_MODE]
    #[arg(long = "cni-mode", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub cni_mode: Option<bool>,

    /// Replace existing rules of ours that differ from the plan [env: RECONCILE]
    #[arg(long = "reconcile", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub reconcile: Option<bool>,

    /// Remove this configuration's rules and chains; apply nothing [env: CLEANUP_ONLY]
    #[arg(long = "cleanup-only", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub cleanup_only: Option<bool>,

    /// Apply even when the current state already matches [env: FORCE_APPLY]
    #[arg(long = "force-apply", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub force_apply: Option<bool>,

    /// Istio's nftables backend: inet tables applied in-process over netlink [env: NATIVE_NFTABLES]
    #[arg(long = "native-nftables", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub native_nftables: Option<bool>,

    /// Force the iptables backend: `legacy` or `nft` [env: FORCE_IPTABLES_BINARY]
    #[arg(
        long = "force-iptables-binary",
        value_name = "BACKEND",
        allow_hyphen_values = true
    )]
    pub force_iptables_binary: Option<String>,

    /// Emit IPv6 rules: `auto` detects as Istio does from the interface addresses [default: auto]
    #[arg(long = "ipv6", value_name = "MODE", value_enum)]
    pub ipv6: Option<Ipv6Mode>,

    /// DNS servers for --redirect-dns; empty for none [default: nameservers of /etc/resolv.conf]
    #[arg(long = "dns-servers", value_name = "IPS", allow_hyphen_values = true)]
    pub dns_servers: Option<String>,

    /// Groups whose outbound traffic is captured, `*` for all [default: *] [env: ISTIO_OUTBOUND_OWNER_GROUPS]
    #[arg(
        long = "outbound-owner-groups",
        value_name = "GROUPS",
        allow_hyphen_values = true
    )]
    pub outbound_owner_groups: Option<String>,

    /// Groups not captured (only with --outbound-owner-groups '*') [env: ISTIO_OUTBOUND_OWNER_GROUPS_EXCLUDE]
    #[arg(
        long = "outbound-owner-groups-exclude",
        value_name = "GROUPS",
        allow_hyphen_values = true
    )]
    pub outbound_owner_groups_exclude: Option<String>,

    /// IPv4 loopback CIDR never captured [default: 127.0.0.1/32] [env: ISTIO_OUTBOUND_IPV4_LOOPBACK_CIDR]
    #[arg(
        long = "host-ipv4-loopback-cidr",
        value_name = "CIDR",
        allow_hyphen_values = true
    )]
    pub host_ipv4_loopback_cidr: Option<String>,

    /// Log levels, `scope:level,...` or `level` (debug, info, warn, error, fatal, none) [default: default:info]
    #[arg(
        long = "log_output_level",
        value_name = "LEVELS",
        allow_hyphen_values = true
    )]
    pub log_output_level: Option<String>,

    /// Log as JSON lines
    #[arg(long = "log_as_json", value_name = "BOOL", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = parse_go_bool)]
    pub log_as_json: Option<bool>,

    /// Log targets; accepted for compatibility, logs always go to stderr (stdout carries --dry-run output)
    #[arg(
        long = "log_target",
        value_name = "TARGETS",
        allow_hyphen_values = true
    )]
    pub log_target: Option<String>,

    /// Scopes whose log lines carry the source location
    #[arg(long = "log_caller", value_name = "SCOPES", allow_hyphen_values = true)]
    pub log_caller: Option<String>,

    /// Accepted for compatibility (no stack traces are logged) [default: default:none]
    #[arg(
        long = "log_stacktrace_level",
        value_name = "LEVELS",
        allow_hyphen_values = true
    )]
    pub log_stacktrace_level: Option<String>,
}

impl Args {
    /// Parses a full command line (`argv[0]` first), dropping a leading `istio-iptables` word.
    pub fn parse_args<I, T>(args: I) -> Result<Args, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
        if argv.get(1).is_some_and(|a| a == ISTIO_SUBCOMMAND) {
            argv.remove(1);
        }
        if let Some(args) = Args::parse_plain(argv.get(1..).unwrap_or_default()) {
            return Ok(args);
        }
        Args::try_parse_from(argv)
    }

    /// The fast path of [`Args::parse_args`] (`argv[0]` and the subcommand word already dropped): a
    /// command line made only of the plainest spellings — `--flag value`, `--flag=value`, `-f value`,
    /// a boolean's `--flag` / `--flag=<bool>` / `-n`, every value valid and none starting with `-` —
    /// parsed without clap. Building clap's command for ~45 flags (a large stack frame and some 20 KiB
    /// of heap, all first-touch page faults) was about a tenth of an init container's run, which is
    /// over in about a millisecond. Anything else (help, version, an unknown flag, a positional, `-p15001`,
    /// a value clap would refuse or that starts with `-`, a non-UTF-8 argument) returns `None`, and clap
    /// parses the whole line, so every message and exit status stays clap's. Where this returns
    /// `Some`, the result is exactly clap's: checked against clap for every flag and on random command
    /// lines (tests below).
    fn parse_plain(argv: &[OsString]) -> Option<Args> {
        let mut args = Args::default();
        let mut rest = argv.iter();
        while let Some(token) = rest.next() {
            let token = token.to_str()?;
            let (name, inline) = if let Some(long) = token.strip_prefix("--") {
                match long.split_once('=') {
                    Some((name, value)) => (name, Some(value)),
                    None => (long, None),
                }
            } else {
                let mut chars = token.strip_prefix('-')?.chars();
                let (Some(short), None) = (chars.next(), chars.next()) else {
                    return None;
                };
                (long_of_short(short)?, None)
            };
            let slot = args.slot(name)?;
            if let Slot::Bool(field) = slot {
                // `require_equals`: a boolean's value is only ever written after '='.
                *field = Some(match inline {
                    None => true,
                    Some(v) => parse_go_bool(v).ok()?,
                });
                continue;
            }
            let value = match inline {
                Some(v) => v,
                None => rest.next()?.to_str()?,
            };
            // Empty after '=' and hyphen values are left to clap: rare, and its rules for them are subtle.
            if value.starts_with('-') || (inline.is_some() && value.is_empty()) {
                return None;
            }
            match slot {
                Slot::Str(field) => *field = Some(value.to_string()),
                Slot::Port(field) => {
                    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                        return None;
                    }
                    *field = Some(value.parse().ok()?);
                }
                Slot::Duration(field) => *field = Some(parse_go_duration(value).ok()?),
                Slot::Ipv6(field) => {
                    *field = Some(match value {
                        "auto" => Ipv6Mode::Auto,
                        "true" => Ipv6Mode::True,
                        "false" => Ipv6Mode::False,
                        _ => return None,
                    })
                }
                Slot::Bool(_) => return None,
            }
        }
        Some(args)
    }

    /// The field of the flag whose long name is `long`, by the kind of its value (same names as the
    /// `#[arg]` attributes above; a test checks both lists against each other).
    fn slot(&mut self, long: &str) -> Option<Slot<'_>> {
        Some(match long {
            "envoy-port" => Slot::Str(&mut self.envoy_port),
            "inbound-capture-port" => Slot::Str(&mut self.inbound_capture_port),
            "inbound-tunnel-port" => Slot::Str(&mut self.inbound_tunnel_port),
            "proxy-uid" => Slot::Str(&mut self.proxy_uid),
            "proxy-gid" => Slot::Str(&mut self.proxy_gid),
            "istio-inbound-interception-mode" => Slot::Str(&mut self.inbound_interception_mode),
            "istio-inbound-ports" => Slot::Str(&mut self.inbound_ports),
            "istio-local-exclude-ports" => Slot::Str(&mut self.local_exclude_ports),
            "istio-exclude-interfaces" => Slot::Str(&mut self.exclude_interfaces),
            "istio-service-cidr" => Slot::Str(&mut self.service_cidr),
            "istio-service-exclude-cidr" => Slot::Str(&mut self.service_exclude_cidr),
            "istio-outbound-ports" => Slot::Str(&mut self.outbound_ports),
            "istio-local-outbound-ports-exclude" => {
                Slot::Str(&mut self.local_outbound_ports_exclude)
            }
            "kube-virt-interfaces" => Slot::Str(&mut self.kube_virt_interfaces),
            "istio-inbound-tproxy-mark" => Slot::Str(&mut self.tproxy_mark),
            "istio-inbound-tproxy-route-table" => Slot::Str(&mut self.tproxy_route_table),
            "dry-run" => Slot::Bool(&mut self.dry_run),
            "iptables-probe-port" => Slot::Port(&mut self.iptables_probe_port),
            "probe-timeout" => Slot::Duration(&mut self.probe_timeout),
            "skip-rule-apply" => Slot::Bool(&mut self.skip_rule_apply),
            "run-validation" => Slot::Bool(&mut self.run_validation),
            "redirect-dns" => Slot::Bool(&mut self.redirect_dns),
            "drop-invalid" => Slot::Bool(&mut self.drop_invalid),
            "dual-stack" => Slot::Bool(&mut self.dual_stack),
            "capture-all-dns" => Slot::Bool(&mut self.capture_all_dns),
            "network-namespace" => Slot::Str(&mut self.network_namespace),
            "cni-mode" => Slot::Bool(&mut self.cni_mode),
            "reconcile" => Slot::Bool(&mut self.reconcile),
            "cleanup-only" => Slot::Bool(&mut self.cleanup_only),
            "force-apply" => Slot::Bool(&mut self.force_apply),
            "native-nftables" => Slot::Bool(&mut self.native_nftables),
            "force-iptables-binary" => Slot::Str(&mut self.force_iptables_binary),
            "ipv6" => Slot::Ipv6(&mut self.ipv6),
            "dns-servers" => Slot::Str(&mut self.dns_servers),
            "outbound-owner-groups" => Slot::Str(&mut self.outbound_owner_groups),
            "outbound-owner-groups-exclude" => Slot::Str(&mut self.outbound_owner_groups_exclude),
            "host-ipv4-loopback-cidr" => Slot::Str(&mut self.host_ipv4_loopback_cidr),
            "log_output_level" => Slot::Str(&mut self.log_output_level),
            "log_as_json" => Slot::Bool(&mut self.log_as_json),
            "log_target" => Slot::Str(&mut self.log_target),
            "log_caller" => Slot::Str(&mut self.log_caller),
            "log_stacktrace_level" => Slot::Str(&mut self.log_stacktrace_level),
            _ => return None,
        })
    }
}

/// A flag's field in [`Args`], for [`Args::parse_plain`].
enum Slot<'a> {
    Str(&'a mut Option<String>),
    Bool(&'a mut Option<bool>),
    Port(&'a mut Option<u16>),
    Duration(&'a mut Option<std::time::Duration>),
    Ipv6(&'a mut Option<Ipv6Mode>),
}

/// The long name of a short flag (same letters as the `#[arg]` attributes above).
fn long_of_short(short: char) -> Option<&'static str> {
    match short {
        'p' => Some("envoy-port"),
        'z' => Some("inbound-capture-port"),
        'e' => Some("inbound-tunnel-port"),
        'u' => Some("proxy-uid"),
        'g' => Some("proxy-gid"),
        'm' => Some("istio-inbound-interception-mode"),
        'b' => Some("istio-inbound-ports"),
        'd' => Some("istio-local-exclude-ports"),
        'c' => Some("istio-exclude-interfaces"),
        'i' => Some("istio-service-cidr"),
        'x' => Some("istio-service-exclude-cidr"),
        'q' => Some("istio-outbound-ports"),
        'o' => Some("istio-local-outbound-ports-exclude"),
        'k' => Some("kube-virt-interfaces"),
        't' => Some("istio-inbound-tproxy-mark"),
        'r' => Some("istio-inbound-tproxy-route-table"),
        'n' => Some("dry-run"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments Istio's injector writes for the default `istio-init`, after the subcommand word.
    const INJECTED: [&str; 17] = [
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
        "--log_output_level=default:info",
    ];
    use std::time::Duration;

    fn parse(args: &[&str]) -> Args {
        let mut argv = vec!["iptables-init"];
        argv.extend_from_slice(args);
        Args::parse_args(argv).expect("parses")
    }

    fn parse_err(args: &[&str]) -> clap::Error {
        let mut argv = vec!["iptables-init"];
        argv.extend_from_slice(args);
        Args::parse_args(argv).expect_err("must not parse")
    }

    #[test]
    fn istio_injected_arguments_parse_unchanged() {
        let mut argv = vec!["istio-iptables"];
        argv.extend_from_slice(&INJECTED);
        let a = parse(&argv);
        assert_eq!(a.envoy_port.as_deref(), Some("15001"));
        assert_eq!(a.inbound_capture_port.as_deref(), Some("15006"));
        assert_eq!(a.proxy_uid.as_deref(), Some("1337"));
        assert_eq!(a.inbound_interception_mode.as_deref(), Some("REDIRECT"));
        assert_eq!(a.service_cidr.as_deref(), Some("*"));
        assert_eq!(a.service_exclude_cidr.as_deref(), Some(""));
        assert_eq!(a.inbound_ports.as_deref(), Some("*"));
        assert_eq!(a.local_exclude_ports.as_deref(), Some("15090,15021,15020"));
        assert_eq!(a.log_output_level.as_deref(), Some("default:info"));
        assert_eq!(a.proxy_gid, None);
    }

    #[test]
    fn pflag_value_forms() {
        assert_eq!(parse(&["-p15001"]).envoy_port.as_deref(), Some("15001"));
        assert_eq!(parse(&["-p=15001"]).envoy_port.as_deref(), Some("15001"));
        assert_eq!(
            parse(&["--envoy-port=15001"]).envoy_port.as_deref(),
            Some("15001")
        );
        assert_eq!(
            parse(&["--envoy-port", "15001"]).envoy_port.as_deref(),
            Some("15001")
        );
        // The last occurrence wins, as in pflag.
        assert_eq!(
            parse(&["-p", "1", "-p", "2"]).envoy_port.as_deref(),
            Some("2")
        );
        // A value may start with '-': it reaches validation, which names it.
        assert_eq!(
            parse(&["-d", "-1"]).local_exclude_ports.as_deref(),
            Some("-1")
        );
    }

    #[test]
    fn go_booleans() {
        assert_eq!(parse(&["--dry-run"]).dry_run, Some(true));
        assert_eq!(parse(&["-n"]).dry_run, Some(true));
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(
                parse(&[&format!("--dry-run={t}")]).dry_run,
                Some(true),
                "{t}"
            );
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(
                parse(&[&format!("--redirect-dns={f}")]).redirect_dns,
                Some(false),
                "{f}"
            );
        }
        assert_eq!(parse(&["-n=false"]).dry_run, Some(false));
        assert_eq!(parse(&[]).dry_run, None);
        parse_err(&["--dry-run=yes"]);
        // Istio would treat `false` as an ignored positional and run dry; we refuse.
        parse_err(&["--dry-run", "false"]);
    }

    #[test]
    fn stray_positionals_are_rejected_but_the_subcommand_word_is_not() {
        parse_err(&["-p", "15001", "istio-iptables"]);
        parse_err(&["extra"]);
        parse_err(&["--no-such-flag"]);
        assert_eq!(parse(&["istio-iptables"]).envoy_port, None);
    }

    #[test]
    fn typed_values() {
        assert_eq!(
            parse(&["--iptables-probe-port=15002"]).iptables_probe_port,
            Some(15002)
        );
        parse_err(&["--iptables-probe-port=70000"]);
        assert_eq!(
            parse(&["--probe-timeout", "1m30s"]).probe_timeout,
            Some(Duration::from_secs(90))
        );
        parse_err(&["--probe-timeout", "5"]);
        assert_eq!(parse(&["--ipv6", "auto"]).ipv6, Some(Ipv6Mode::Auto));
        assert_eq!(parse(&["--ipv6=true"]).ipv6, Some(Ipv6Mode::True));
        parse_err(&["--ipv6", "maybe"]);
    }

    /// What clap makes of `argv` (after `argv[0]`), bypassing the fast path.
    fn clap_only(argv: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("iptables-init").chain(argv.iter().copied()))
    }

    /// The fast path's result for `argv` (after `argv[0]` and the subcommand word).
    fn plain(argv: &[&str]) -> Option<Args> {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        Args::parse_plain(&argv)
    }

    /// Where the fast path answers, its answer is clap's.
    fn assert_same_as_clap(argv: &[&str]) {
        if let Some(fast) = plain(argv) {
            let slow = clap_only(argv).unwrap_or_else(|e| panic!("clap refuses {argv:?}: {e}"));
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{argv:?}");
        }
    }

    #[test]
    fn the_fast_path_knows_every_flag_as_clap_does() {
        use clap::CommandFactory as _;
        let command = Args::command();
        let mut flags = 0;
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else {
                panic!("{:?} has no long name", arg.get_id())
            };
            if matches!(long, "help" | "version") {
                continue;
            }
            flags += 1;
            assert!(Args::default().slot(long).is_some(), "--{long}");
            if let Some(short) = arg.get_short() {
                assert_eq!(long_of_short(short), Some(long), "-{short}");
            }
            let boolean = matches!(Args::default().slot(long), Some(Slot::Bool(_)));
            let value = match long {
                "iptables-probe-port" => "15002",
                "probe-timeout" => "1m30s",
                "ipv6" => "auto",
                _ if boolean => "false",
                _ => "a,b:*",
            };
            let spellings = if boolean {
                vec![
                    vec![format!("--{long}")],
                    vec![format!("--{long}={value}")],
                    vec![format!("--{long}=T"), format!("--{long}=0")],
                ]
            } else {
                let mut s = vec![
                    vec![format!("--{long}"), value.to_string()],
                    vec![format!("--{long}={value}")],
                ];
                if let Some(short) = arg.get_short() {
                    s.push(vec![format!("-{short}"), value.to_string()]);
                    s.push(vec![
                        format!("-{short}"),
                        "1".into(),
                        format!("-{short}"),
                        value.into(),
                    ]);
                }
                s
            };
            for argv in spellings {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                assert!(plain(&argv).is_some(), "{argv:?} takes the fast path");
                assert_same_as_clap(&argv);
            }
        }
        assert_eq!(flags, 42);
        for c in ('a'..='z').chain('A'..='Z').chain('0'..='9') {
            if let Some(long) = long_of_short(c) {
                assert!(
                    command
                        .get_arguments()
                        .any(|a| a.get_short() == Some(c) && a.get_long() == Some(long)),
                    "-{c}"
                );
            }
        }
    }

    #[test]
    fn the_injected_arguments_take_the_fast_path() {
        let mut argv = INJECTED.to_vec();
        argv.extend_from_slice(&["--ipv6", "false"]);
        assert!(plain(&argv).is_some());
        assert_same_as_clap(&argv);
        // What clap must see: help, version, errors, unusual spellings.
        for odd in [
            &["--help"][..],
            &["-h"],
            &["--version"],
            &["-p15001"],
            &["-p=15001"],
            &["-p"],
            &["-d", "-1"],
            &["--dry-run", "false"],
            &["--dry-run=yes"],
            &["--ipv6", "maybe"],
            &["--iptables-probe-port=+1"],
            &["--envoy-port="],
            &["extra"],
            &["--"],
            &["-"],
            &["--no-such-flag"],
        ] {
            assert!(plain(odd).is_none(), "{odd:?}");
        }
    }

    mod random_lines {
        use super::assert_same_as_clap;
        use proptest::prelude::*;

        /// One odd token: a flag in some spelling, known or not, or a value, plausible or not.
        fn odd() -> impl Strategy<Value = String> {
            prop_oneof![
                prop::sample::select(vec![
                    "-h",
                    "-V",
                    "-y",
                    "--help",
                    "--version",
                    "--envoy",
                    "--",
                    "-",
                    "istio-iptables",
                    "--dry-run=",
                    "--dry-run=no",
                    "--ipv6=True",
                    "-n=false",
                    "-p15001",
                    "-p=1",
                    "--probe-timeout=5",
                    "--iptables-probe-port=70000",
                    "--envoy-port=",
                    "--envoy-port=-1",
                    "--envoy-port==",
                    "--Envoy-port",
                    "-1",
                    "a=b",
                    "",
                ])
                .prop_map(str::to_string),
                "[-=a-z0-9*,:]{0,8}",
            ]
        }

        /// A flag that takes a value, and values for it (valid for its type or not).
        fn pair() -> impl Strategy<Value = Vec<String>> {
            let flag = prop::sample::select(vec![
                "-p",
                "-z",
                "-u",
                "-m",
                "-i",
                "-x",
                "-b",
                "-d",
                "--envoy-port",
                "--dns-servers",
                "--log_output_level",
                "--ipv6",
                "--iptables-probe-port",
                "--probe-timeout",
            ]);
            let value = prop::sample::select(vec![
                "",
                "*",
                "15001",
                "015002",
                "65536",
                "+5",
                "1m",
                "5s",
                "auto",
                "false",
                "true",
                "maybe",
                "a=b",
                "-1",
                "--dry-run",
                "istio-iptables",
            ]);
            (flag, value, any::<bool>()).prop_map(|(f, v, inline)| {
                if inline && f.starts_with("--") {
                    vec![format!("{f}={v}")]
                } else {
                    vec![f.to_string(), v.to_string()]
                }
            })
        }

        /// A boolean flag in one of its spellings.
        fn boolean() -> impl Strategy<Value = String> {
            let flag =
                prop::sample::select(vec!["--dry-run", "--reconcile", "--log_as_json", "-n"]);
            let value = prop::sample::select(vec!["", "=t", "=0", "=TRUE", "=False", "=yes", "="]);
            (flag, value).prop_map(|(f, v)| format!("{f}{v}"))
        }

        fn item() -> impl Strategy<Value = Vec<String>> {
            prop_oneof![
                4 => pair(),
                2 => boolean().prop_map(|b| vec![b]),
                1 => odd().prop_map(|o| vec![o]),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2048))]
            /// Whatever the command line, the fast path either declines or agrees with clap.
            #[test]
            fn the_fast_path_agrees_with_clap(items in prop::collection::vec(item(), 0..6)) {
                let tokens: Vec<String> = items.into_iter().flatten().collect();
                let argv: Vec<&str> = tokens.iter().map(String::as_str).collect();
                assert_same_as_clap(&argv);
            }
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("1h2m3s"), Ok(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("10us"), Ok(Duration::from_micros(10)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "5", "s", "-5s", "5x", "1..2s", "."] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }
}
