//! `explain`: where connections go under a configuration, answered offline from the same rule models
//! `iptables-init` applies.
//!
//! The istio-iptables flags are parsed by `cli` and resolved by `config::resolve` exactly as a real run
//! does, but with no environment and with fixed surroundings ([`OFFLINE_ASSUMPTIONS`]); the backend's
//! rule model is then walked for each connection (`iptables::walk`, `nft::walk`, both over the one
//! evaluator in `walk`).

use std::net::IpAddr;

use crate::cli::Args;
use crate::config::{self, ConfigError};
use crate::connection::{Connection, ConnectionError, Direction, POD_V4, POD_V6};
use crate::detect::System;
pub use crate::walk::VerdictKind;
use crate::walk::{Outcome, RuleError};
use crate::{iptables, nft};

/// The rule backend a configuration selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// iptables rules (the default).
    Iptables,
    /// Istio's nftables tables (`--native-nftables`).
    Nftables,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Iptables => "iptables",
            Backend::Nftables => "nftables",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict for one connection.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Verdict {
    /// The connection as given (its canonical spec).
    pub spec: String,
    pub verdict: VerdictKind,
    /// Where it lands: the proxy's, the inbound or the DNS port, or the real destination port for a bypass.
    pub port: u16,
    /// The table of the deciding rule (`nat`, `mangle`; nftables: `istio-proxy-nat`, …); `None` when
    /// the family has no rule at all.
    pub table: Option<String>,
    /// The chain of the deciding rule, or the base chain whose end was reached.
    pub chain: Option<String>,
    /// The deciding rule as `--dry-run` prints it; `None` when the end of a base chain was reached
    /// (policy accept).
    pub rule: Option<String>,
    /// The destination address the walk used (after defaults).
    pub address: IpAddr,
}

/// The verdicts for a configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Explanation {
    pub backend: Backend,
    pub connections: Vec<Verdict>,
}

/// Why an explanation cannot be given.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ExplainError {
    /// The istio-iptables flags do not parse (a real run would exit 255); `message` is the parser's.
    #[error("{message}")]
    Flags { message: String },
    /// The flags parse but the configuration is invalid (a real run would exit 1).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A rule of the model that the walk cannot evaluate.
    #[error("{table}/{chain}: rule `{rule}`: {reason}")]
    Rule {
        table: String,
        chain: String,
        rule: String,
        reason: String,
    },
}

impl From<RuleError> for ExplainError {
    fn from(e: RuleError) -> ExplainError {
        ExplainError::Rule {
            table: e.table,
            chain: e.chain,
            rule: e.rule,
            reason: e.reason,
        }
    }
}

/// What an explanation assumes about the pod, in the words the text output uses.
pub const OFFLINE_ASSUMPTIONS: &str = "no environment variable, file or netfilter state is read; \
the pod's addresses are 192.0.2.2 (and fd00::2 when a connection is IPv6); /etc/resolv.conf is empty \
(pass --dns-servers for DNS capture); /etc/passwd is empty (the proxy uid is 1337 unless -u); a group \
name matches no gid; each connection is the first packet of a new connection (conntrack state NEW) from \
source port 40000: outbound from the pod's address (from 127.0.0.1 or ::1 to a loopback address, from \
the destination itself to another address over lo), inbound from the peer 192.0.2.1 or fd00::1; an \
outbound connection over lo that OUTPUT does not redirect comes back in through raw and mangle \
PREROUTING on lo with its mark (nat PREROUTING does not see it)";

/// [`OFFLINE_ASSUMPTIONS`] one assumption at a time, as the text outputs list them.
pub fn assumptions() -> impl Iterator<Item = &'static str> {
    OFFLINE_ASSUMPTIONS.split("; ")
}

/// The surroundings of an explanation: fixed addresses, empty files.
pub(crate) struct Offline {
    pub(crate) ipv6: bool,
}

impl System for Offline {
    fn interface_addrs(&self) -> Result<Vec<IpAddr>, String> {
        let mut addrs = vec![IpAddr::V4(POD_V4)];
        if self.ipv6 {
            addrs.push(IpAddr::V6(POD_V6));
        }
        Ok(addrs)
    }

    fn resolv_conf(&self) -> std::io::Result<String> {
        Ok(String::new())
    }

    fn passwd(&self) -> std::io::Result<String> {
        Ok(String::new())
    }
}

/// Parses istio-iptables flags as `iptables-init` does (`args` without the program name; a leading
/// `istio-iptables` word is dropped).
pub(crate) fn parse_flags(args: &[String]) -> Result<Args, ExplainError> {
    let argv = std::iter::once("iptables-init".to_string()).chain(args.iter().cloned());
    Args::parse_args(argv).map_err(|e| ExplainError::Flags {
        message: e.render().to_string().trim_end().to_string(),
    })
}

/// [`explain`] over flags already parsed.
pub(crate) fn explain_args(
    args: &Args,
    connections: &[Connection],
) -> Result<Explanation, ExplainError> {
    let sys = Offline {
        ipv6: connections.iter().any(Connection::is_ipv6),
    };
    let no_env = |_: &str| None;
    let cfg = config::resolve(args, &no_env, &sys)?;
    let (backend, verdicts) = if cfg.native_nftables {
        let rs = nft::model::build(&cfg);
        let walk =
            |c: &Connection| nft::walk::walk(&rs, &c.packet(), c.direction == Direction::Outbound);
        (Backend::Nftables, verdicts(connections, walk)?)
    } else {
        let plan = iptables::model::build(&cfg);
        let walk = |c: &Connection| {
            iptables::walk::walk(&plan, &c.packet(), c.direction == Direction::Outbound)
        };
        (Backend::Iptables, verdicts(connections, walk)?)
    };
    Ok(Explanation {
        backend,
        connections: verdicts,
    })
}

fn verdicts(
    connections: &[Connection],
    walk: impl Fn(&Connection) -> Result<Outcome, RuleError>,
) -> Result<Vec<Verdict>, ExplainError> {
    connections
        .iter()
        .map(|c| {
            let o = walk(c)?;
            Ok(Verdict {
                spec: c.to_string(),
                verdict: o.kind,
                port: o.port,
                table: o.table,
                chain: o.chain,
                rule: o.rule,
                address: c.address_or_default(),
            })
        })
        .collect()
}

/// Resolves `args` (istio-iptables flags, exactly as iptables-init takes them, without `explain` and
/// without the program name; a leading `istio-iptables` word is dropped) with no environment and no
/// surroundings read (no interface or resolv.conf detection: see [`OFFLINE_ASSUMPTIONS`]), builds the
/// rule model of the selected backend (`--native-nftables` picks nftables) and walks each connection
/// through it.
pub fn explain(args: &[String], connections: &[Connection]) -> Result<Explanation, ExplainError> {
    explain_args(&parse_flags(args)?, connections)
}

impl Explanation {
    /// The text output: the backend and the assumptions once, then one block per connection with its
    /// spec, the verdict and port, and the deciding `table/chain: rule`.
    pub fn text(&self) -> String {
        let mut out = format!("backend: {}\nassumed:\n", self.backend);
        for a in assumptions() {
            out.push_str(&format!("  - {a}\n"));
        }
        for v in &self.connections {
            // The destination port is the spec's: a redirect's port is where it lands instead.
            let port = v.spec.parse::<Connection>().map_or(v.port, |c| c.port);
            let to = match v.address {
                IpAddr::V4(a) => format!("{a}:{port}"),
                IpAddr::V6(a) => format!("[{a}]:{port}"),
            };
            let lands = match v.verdict {
                VerdictKind::Bypass => format!("bypass: reaches {to} directly"),
                kind => format!("{kind} {} (original destination {to})", v.port),
            };
            let decided = match (&v.table, &v.chain, &v.rule) {
                (Some(t), Some(c), Some(r)) => format!("{t}/{c}: {r}"),
                (Some(t), Some(c), None) => {
                    format!("{t}/{c}: end of the base chain, no rule decided (policy accept)")
                }
                _ => format!(
                    "no {} rules (IPv6 is off)",
                    if v.address.is_ipv6() { "IPv6" } else { "IPv4" }
                ),
            };
            out.push_str(&format!("\n{}\n  {lands}\n  {decided}\n", v.spec));
        }
        out
    }
}

/// The word that selects `explain` on `iptables-init`'s command line.
pub(crate) const SUBCOMMAND: &str = "explain";

/// The output `-o` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

/// The command line of `explain`, its own flags taken out of the istio-iptables ones.
#[derive(Debug, Default, PartialEq, Eq)]
struct Split {
    /// The istio-iptables flags, in order.
    flags: Vec<String>,
    connections: Vec<String>,
    /// `None`: text.
    format: Option<Format>,
    help: bool,
}

/// The format word of `-o`/`--output`, if it is one.
fn format_word(word: &str) -> Option<Format> {
    match word {
        "text" => Some(Format::Text),
        "json" => Some(Format::Json),
        _ => None,
    }
}

/// Takes `--connection`, `-o`/`--output` and `-h`/`--help` out of `argv` (after `explain`), leaving
/// the istio-iptables flags in order. An istio-iptables flag's separate value is kept with it, so a
/// value is never read as a flag; `-o` with a value other than `text` or `json` is istio-iptables'
/// `-o` (ports can never be those words).
fn split(argv: &[String]) -> Result<Split, String> {
    use sidecar_core::flags::{by_long, by_short, Kind, CONNECTION, OUTPUT};
    let mut s = Split::default();
    let mut it = argv.iter();
    let output = |v: &str| {
        format_word(v).ok_or_else(|| {
            format!(
                "invalid value {v:?} for {}: use text or json",
                OUTPUT.origin()
            )
        })
    };
    while let Some(token) = it.next() {
        let t = token.as_str();
        let long = t.strip_prefix("--");
        let (name, inline) = match long.map(|l| l.split_once('=')) {
            Some(Some((n, v))) => (Some(n), Some(v)),
            Some(None) => (long, None),
            None => (None, None),
        };
        if t == "-h" || name == Some("help") {
            s.help = true;
            continue;
        }
        if name == Some(CONNECTION.long) {
            match inline.map(str::to_string).or_else(|| it.next().cloned()) {
                Some(spec) => s.connections.push(spec),
                None => return Err(format!("{} needs a SPEC", CONNECTION.origin())),
            }
            continue;
        }
        if name == Some(OUTPUT.long) {
            let v = inline.map(str::to_string).or_else(|| it.next().cloned());
            s.format = Some(output(&v.unwrap_or_default())?);
            continue;
        }
        if let Some(rest) = t.strip_prefix("-o") {
            let word = rest.strip_prefix('=').unwrap_or(rest);
            if let Some(f) = format_word(word) {
                s.format = Some(f);
                continue;
            }
            if rest.is_empty() {
                if let Some(f) = it.as_slice().first().and_then(|w| format_word(w)) {
                    s.format = Some(f);
                    it.next();
                    continue;
                }
            }
            // A word can never be istio-iptables' port list: it was meant as the output format.
            let value = if rest.is_empty() {
                it.as_slice().first().map_or("", String::as_str)
            } else {
                word
            };
            if value.chars().any(|c| c.is_ascii_alphabetic()) {
                return Err(format!(
                    "invalid value {value:?} for -o: explain's output format is text or json \
                     (istio-iptables' -o takes ports)"
                ));
            }
        }
        s.flags.push(token.clone());
        // A flag written without its value in the same token takes the next one (booleans never do).
        let flag = match (name, inline) {
            (Some(n), None) => by_long(n),
            (None, _) => t
                .strip_prefix('-')
                .filter(|r| r.chars().count() == 1)
                .and_then(|r| r.chars().next())
                .and_then(by_short),
            _ => None,
        };
        if flag.is_some_and(|f| f.kind != Kind::Bool) {
            if let Some(value) = it.next() {
                s.flags.push(value.clone());
            }
        }
    }
    Ok(s)
}

/// The long `--help` text of `explain`.
fn help_text() -> String {
    format!(
        "Explains where connections go under an iptables-init configuration, from the rules it would \
install: the verdict (outbound-proxy, inbound-proxy, dns-proxy or bypass), the port the connection \
lands on, and the table, chain and rule that decided. Pure computation: no privilege, no environment \
variable, file or netfilter state is read or touched; --dry-run is implied and apply-only flags are \
accepted and ignored.

Give the istio-iptables / iptables-init flags as for a run (see iptables-init --help; \
--native-nftables explains the nftables rules), and one --connection SPEC per connection:

  SPEC = outbound|inbound:tcp|udp:[ADDRESS:]PORT[,uid=N][,gid=N][,iface=NAME]
  e.g.   outbound:tcp:10.0.0.5:5432   inbound:tcp:8080   outbound:udp:10.96.0.10:53,uid=1000
         outbound:tcp:[fd00::5]:443

Defaults: ADDRESS is 192.0.2.1 outbound and 192.0.2.2 (the pod) inbound; uid and gid are 1000 (an \
application, not the proxy; inbound ignores them); iface is lo for outbound to a loopback address, \
else eth0 (pass iface=lo to model the pod talking to its own IP). Each connection is its first packet: \
outbound through raw, mangle and nat OUTPUT (over lo, if not redirected there, then back in through raw \
and mangle PREROUTING, where TPROXY can capture it), inbound through raw, mangle and nat PREROUTING.

Assumed: {OFFLINE_ASSUMPTIONS}.

Exit status: 0 explained, 1 an invalid connection or configuration, 255 a command-line parse error."
    )
}

/// `iptables-init explain ARGS...` (`argv` after `explain`): writes the explanation to `out` and
/// errors to `err`, and returns the exit status.
pub(crate) fn main(
    argv: &[std::ffi::OsString],
    out: &mut dyn std::io::Write,
    err: &mut dyn std::io::Write,
) -> u8 {
    let mut fail = |code: u8, msg: &str| {
        let _ = writeln!(err, "iptables-init explain: {msg}");
        code
    };
    let argv: Option<Vec<String>> = argv
        .iter()
        .map(|a| a.to_str().map(str::to_string))
        .collect();
    let Some(argv) = argv else {
        return fail(crate::EXIT_USAGE, "an argument is not valid UTF-8");
    };
    let s = match split(&argv) {
        Ok(s) => s,
        Err(e) => return fail(crate::EXIT_USAGE, &e),
    };
    if s.help {
        let help = crate::cli::explain_command(help_text()).render_long_help();
        let _ = write!(out, "{help}");
        return 0;
    }
    if s.connections.is_empty() {
        return fail(
            crate::EXIT_USAGE,
            "give at least one --connection SPEC (see iptables-init explain --help)",
        );
    }
    let connections: Result<Vec<Connection>, ConnectionError> =
        s.connections.iter().map(|c| c.parse()).collect();
    let connections = match connections {
        Ok(c) => c,
        Err(e) => return fail(crate::EXIT_ERROR, &e.to_string()),
    };
    let argv0 = std::iter::once("iptables-init".to_string());
    let args = match Args::parse_args(argv0.chain(s.flags)) {
        Ok(a) => a,
        Err(e) => return crate::parse_failure(&e),
    };
    match crate::logging::LogConfig::from_args(&args) {
        Ok(log) => log.install(),
        Err(e) => return fail(crate::EXIT_USAGE, &e.to_string()),
    }
    let explanation = match explain_args(&args, &connections) {
        Ok(e) => e,
        Err(e) => return fail(crate::EXIT_ERROR, &e.to_string()),
    };
    let text = match s.format.unwrap_or(Format::Text) {
        Format::Text => explanation.text(),
        Format::Json => match serde_json::to_string_pretty(&explanation) {
            Ok(j) => j + "\n",
            Err(e) => return fail(crate::EXIT_ERROR, &format!("writing JSON: {e}")),
        },
    };
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => fail(crate::EXIT_ERROR, &format!("writing the output: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Istio's injected `istio-init` arguments, the leading `istio-iptables` word included.
    fn injected() -> Vec<String> {
        test_support::istio_init::injected_args_with(&[], &[])
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    fn one(args: &[String], spec: &str) -> Verdict {
        let c: Connection = spec.parse().expect("spec");
        let mut e = explain(args, &[c]).expect("explains");
        assert_eq!(e.connections.len(), 1);
        e.connections.remove(0)
    }

    #[test]
    fn injected_defaults_on_both_backends() {
        let mut nft = injected();
        nft.push("--native-nftables".to_string());
        for (args, backend, table, chain, rule) in [
            (
                injected(),
                Backend::Iptables,
                "nat",
                "ISTIO_OUTPUT",
                "-A ISTIO_OUTPUT -j ISTIO_REDIRECT",
            ),
            (
                nft,
                Backend::Nftables,
                "istio-proxy-nat",
                "istio-output",
                "counter jump istio-redirect",
            ),
        ] {
            let e = explain(
                &args,
                &["outbound:tcp:10.0.0.5:5432".parse().expect("spec")],
            )
            .expect("explains");
            assert_eq!(e.backend, backend);
            let v = &e.connections[0];
            assert_eq!(
                (
                    v.verdict,
                    v.port,
                    v.table.as_deref(),
                    v.chain.as_deref(),
                    v.rule.as_deref()
                ),
                (
                    VerdictKind::OutboundProxy,
                    15001,
                    Some(table),
                    Some(chain),
                    Some(rule)
                ),
                "{backend}"
            );
            assert_eq!(v.address, "10.0.0.5".parse::<IpAddr>().expect("ip"));
            assert_eq!(v.spec, "outbound:tcp:10.0.0.5:5432");
        }
        let v = one(&injected(), "inbound:tcp:15021");
        assert_eq!((v.verdict, v.port), (VerdictKind::Bypass, 15021));
        assert_eq!(
            v.rule.as_deref(),
            Some("-A ISTIO_INBOUND -p tcp --dport 15021 -j RETURN")
        );
    }

    #[test]
    fn verdicts_serialise_as_documented() {
        let v = one(&injected(), "inbound:tcp:8080");
        let json = serde_json::to_value(Explanation {
            backend: Backend::Iptables,
            connections: vec![v],
        })
        .expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "backend": "iptables",
                "connections": [{
                    "spec": "inbound:tcp:8080",
                    "verdict": "inbound-proxy",
                    "port": 15006,
                    "table": "nat",
                    "chain": "ISTIO_INBOUND",
                    "rule": "-A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT",
                    "address": "192.0.2.2",
                }]
            })
        );
        for (kind, text) in [
            (VerdictKind::OutboundProxy, "\"outbound-proxy\""),
            (VerdictKind::InboundProxy, "\"inbound-proxy\""),
            (VerdictKind::DnsProxy, "\"dns-proxy\""),
            (VerdictKind::Bypass, "\"bypass\""),
        ] {
            assert_eq!(serde_json::to_string(&kind).expect("json"), text);
            assert_eq!(format!("\"{kind}\""), text);
        }
        assert_eq!(
            serde_json::to_string(&Backend::Nftables).expect("json"),
            "\"nftables\""
        );
    }

    #[test]
    fn flag_and_config_errors_are_told_apart() {
        let e = explain(&["--no-such-flag".to_string()], &[]).expect_err("bad flag");
        assert!(
            matches!(&e, ExplainError::Flags { message } if message.contains("--no-such-flag")),
            "{e}"
        );
        let e = explain(&["-p".to_string(), "0".to_string()], &[]).expect_err("bad port");
        assert!(matches!(e, ExplainError::Config(_)), "{e}");
        assert!(e.to_string().contains("-p/--envoy-port"), "{e}");
    }

    /// A verdict in one line: `VERDICT PORT TABLE/CHAIN: RULE`, `... TABLE/CHAIN (end)` when the end
    /// of a base chain decided, `VERDICT PORT (no rules)` when the family has none.
    fn line(v: &Verdict) -> String {
        let place = match (&v.table, &v.chain, &v.rule) {
            (Some(t), Some(c), Some(r)) => format!(" {t}/{c}: {r}"),
            (Some(t), Some(c), None) => format!(" {t}/{c} (end)"),
            _ => " (no rules)".to_string(),
        };
        format!("{} {}{place}", v.verdict, v.port)
    }

    /// A table row: the injected arguments' replaced values and extra flags, the spec, the verdict line.
    type Case = (
        &'static [(&'static str, &'static str)],
        &'static [&'static str],
        &'static str,
        &'static str,
    );

    /// The injected arguments with `replace` values and `extra` flags.
    fn args(replace: &[(&str, &'static str)], extra: &[&'static str]) -> Vec<String> {
        test_support::istio_init::injected_args_with(replace, extra)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// The TPROXY configurations of the kernel-agreement test's loopback cases (`explain_kernel`, seeds
    /// 1, 2, 13 and 6): the proxy (or its group) calling the pod's own address over lo is marked 1338
    /// in mangle OUTPUT, not redirected in nat OUTPUT, and captured by TPROXY when it comes back in.
    const LO_TPROXY: &[(&str, &str)] = &[
        ("-p", "15011"),
        ("-m", "TPROXY"),
        ("-i", "10.20.0.0/16,172.16.0.0/12"),
        ("-x", "10.10.0.3/32"),
        ("-b", "8080,15008"),
        ("-d", ""),
    ];
    const LO_TPROXY_EXTRA: &[&str] = &[
        "-g",
        "1337",
        "-o",
        "3306,9090",
        "-q",
        "5432,8080",
        "--ipv6",
        "true",
    ];
    const TPROXY: &[(&str, &str)] = &[("-m", "TPROXY")];
    const ALL_PORTS_TPROXY: &[(&str, &str)] = &[("-m", "TPROXY"), ("-d", "")];
    const GID_EXCLUDE_5432: &[&str] = &["-g", "1337", "-o", "5432"];
    const GID_DNS: &[&str] = &[
        "-g",
        "1337",
        "-o",
        "3306,9090",
        "--redirect-dns",
        "--dns-servers",
        "10.10.0.3,127.0.0.53,fd00::2",
        "--ipv6",
        "true",
    ];
    const DNS_TPROXY: &[(&str, &str)] = &[
        ("-m", "TPROXY"),
        ("-i", "10.20.0.0/16"),
        ("-x", "10.20.0.0/16,fd00::2/128"),
        ("-d", ""),
    ];
    const DNS_LOCAL: &[&str] = &[
        "-o",
        "5432",
        "--redirect-dns",
        "--dns-servers",
        "127.0.0.53",
        "--ipv6",
        "true",
    ];

    /// Hand-checked against the rules each configuration's `--dry-run` prints: what each connection
    /// hits first, in the kernel's order.
    #[test]
    fn verdicts_follow_the_rules_iptables() {
        const NONE: &[(&str, &str)] = &[];
        const DNS: &[&str] = &["--redirect-dns", "--dns-servers", "10.96.0.10"];
        let cases: &[Case] = &[
            (NONE, &[], "outbound:tcp:10.0.0.5:5432", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            (NONE, &["-o", "5432"], "outbound:tcp:10.0.0.5:5432", "bypass 5432 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -p tcp --dport 5432 -j RETURN"),
            (NONE, &["-o", "5432"], "outbound:udp:10.0.0.5:5432", "bypass 5432 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -p udp --dport 5432 -j RETURN"),
            (&[("-x", "10.0.0.0/8")], &[], "outbound:tcp:10.0.0.5:443", "bypass 443 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -d 10.0.0.0/8 -j RETURN"),
            (&[("-x", "10.0.0.0/8")], &[], "outbound:tcp:172.16.0.1:443", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            (&[("-i", "10.96.0.0/12")], &[], "outbound:tcp:10.96.1.1:80", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -d 10.96.0.0/12 -j ISTIO_REDIRECT"),
            (&[("-i", "10.96.0.0/12")], &[], "outbound:tcp:10.0.0.5:80", "bypass 80 nat/OUTPUT (end)"),
            (&[("-i", "10.96.0.0/12")], &["-q", "8443"], "outbound:tcp:10.0.0.5:8443", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -p tcp --dport 8443 -j ISTIO_REDIRECT"),
            (NONE, &[], "outbound:tcp:10.0.0.5:80,uid=1337", "bypass 80 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            (NONE, &[], "outbound:tcp:10.0.0.5:80,gid=1337", "bypass 80 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --gid-owner 1337 -j RETURN"),
            // The proxy talking to the pod's own IP over lo goes to its inbound listener; an app does not.
            (NONE, &[], "outbound:tcp:192.0.2.2:8080,uid=1337,iface=lo", "inbound-proxy 15006 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT"),
            // The uid rules come first: a socket of gid 1337 but another uid leaves over lo uncaptured.
            (NONE, &[], "outbound:tcp:192.0.2.2:8080,gid=1337,iface=lo", "bypass 8080 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN"),
            (NONE, &[], "outbound:tcp:192.0.2.2:8080,iface=lo", "bypass 8080 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN"),
            (&[("-i", "127.0.0.1/32")], &[], "outbound:tcp:192.0.2.2:8080,gid=1337,iface=lo", "inbound-proxy 15006 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --gid-owner 1337 -j ISTIO_IN_REDIRECT"),
            (NONE, &[], "outbound:tcp:192.0.2.2:15008,uid=1337,iface=lo", "bypass 15008 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            (NONE, &[], "outbound:tcp:127.0.0.1:8080,uid=1337", "bypass 8080 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            (NONE, &[], "outbound:tcp:127.0.0.6:8080,uid=1337", "inbound-proxy 15006 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT"),
            (NONE, &[], "outbound:tcp:127.0.0.1:8080", "bypass 8080 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN"),
            // DNS to the configured server goes to the agent, to another server it does not.
            (NONE, DNS, "outbound:udp:10.96.0.10:53", "dns-proxy 15053 nat/ISTIO_OUTPUT_DNS: -A ISTIO_OUTPUT_DNS -p udp --dport 53 -d 10.96.0.10/32 -j REDIRECT --to-port 15053"),
            (NONE, DNS, "outbound:tcp:10.96.0.10:53", "dns-proxy 15053 nat/ISTIO_OUTPUT_DNS: -A ISTIO_OUTPUT_DNS -p tcp --dport 53 -d 10.96.0.10/32 -j REDIRECT --to-ports 15053"),
            (NONE, DNS, "outbound:udp:8.8.8.8:53", "bypass 53 nat/OUTPUT (end)"),
            (NONE, DNS, "outbound:tcp:8.8.8.8:53", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            (NONE, DNS, "outbound:udp:10.96.0.10:53,uid=1337", "bypass 53 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            (NONE, &["--redirect-dns"], "outbound:udp:10.96.0.10:53", "bypass 53 nat/OUTPUT (end)"),
            (NONE, &["--redirect-dns", "--capture-all-dns"], "outbound:udp:8.8.8.8:53", "dns-proxy 15053 nat/ISTIO_OUTPUT_DNS: -A ISTIO_OUTPUT_DNS -p udp --dport 53 -j REDIRECT --to-port 15053"),
            // Inbound: everything but the excluded ports and the tunnel port, or only the listed ports.
            (NONE, &[], "inbound:tcp:7070", "inbound-proxy 15006 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"),
            (NONE, &[], "inbound:tcp:15090", "bypass 15090 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp --dport 15090 -j RETURN"),
            (NONE, &[], "inbound:tcp:15008", "bypass 15008 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp --dport 15008 -j RETURN"),
            (NONE, &[], "inbound:udp:7070", "bypass 7070 nat/PREROUTING (end)"),
            (NONE, &["--drop-invalid"], "inbound:tcp:7070", "inbound-proxy 15006 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"),
            (&[("-b", "8080,9090")], &[], "inbound:tcp:8080", "inbound-proxy 15006 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp --dport 8080 -j ISTIO_IN_REDIRECT"),
            (&[("-b", "8080,9090")], &[], "inbound:tcp:7070", "bypass 7070 nat/PREROUTING (end)"),
            (&[("-b", "8080,9090")], &[], "inbound:tcp:15021", "bypass 15021 nat/PREROUTING (end)"),
            // TPROXY decides inbound in mangle.
            (&[("-m", "TPROXY")], &[], "inbound:tcp:8080", "inbound-proxy 15006 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY"),
            (&[("-m", "TPROXY")], &[], "inbound:tcp:15021", "bypass 15021 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp --dport 15021 -j RETURN"),
            (&[("-m", "TPROXY")], &[], "inbound:tcp:8080,iface=lo", "bypass 8080 mangle/ISTIO_INBOUND: -I ISTIO_INBOUND 3 -p tcp -i lo -m mark ! --mark 1338 -j RETURN"),
            (&[("-m", "TPROXY")], &[], "outbound:tcp:192.0.2.2:8080,uid=1337,iface=lo", "inbound-proxy 15006 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo ! -d 127.0.0.1/32 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT"),
            (&[("-m", "TPROXY"), ("-z", "15007")], &[], "inbound:tcp:8080", "inbound-proxy 15007 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY"),
            // Over lo, what nat OUTPUT leaves alone comes back in with the mark mangle OUTPUT gave it:
            // marked 1338 (the proxy's uid or gid, not to 127.0.0.1) it meets TPROXY in mangle PREROUTING.
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:10.10.0.1:15008,uid=1337,gid=1337,iface=lo", "inbound-proxy 15006 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp --dport 15008 -j ISTIO_TPROXY"),
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:[fd00::1]:15008,uid=1337,iface=lo", "inbound-proxy 15006 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp --dport 15008 -j ISTIO_TPROXY"),
            // Marked, but not an inbound port TPROXY captures: a bypass keeps its outbound explanation.
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:10.10.0.1:9090,uid=1337,gid=1337,iface=lo", "bypass 9090 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -p tcp --dport 9090 -j RETURN"),
            // Unmarked (an application; or to 127.0.0.1): ISTIO_INBOUND's lo rule returns it.
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:10.10.0.1:15008,iface=lo", "bypass 15008 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN"),
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:127.0.0.1:15008,uid=1337", "bypass 15008 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            (TPROXY, GID_EXCLUDE_5432, "outbound:tcp:10.10.0.1:5432,uid=1337,gid=1337,iface=lo", "inbound-proxy 15006 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY"),
            (TPROXY, GID_EXCLUDE_5432, "outbound:udp:10.10.0.1:5432,uid=1337,gid=1337,iface=lo", "bypass 5432 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -p udp --dport 5432 -j RETURN"),
            (ALL_PORTS_TPROXY, GID_DNS, "outbound:tcp:10.10.0.1:8080,uid=1000,gid=1337,iface=lo", "inbound-proxy 15006 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY"),
            (DNS_TPROXY, DNS_LOCAL, "outbound:tcp:127.0.0.53:53,uid=1337,gid=1337", "inbound-proxy 15006 mangle/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_TPROXY"),
            // REDIRECT marks nothing and has no TPROXY rule: the same connections bypass.
            (NONE, GID_EXCLUDE_5432, "outbound:tcp:10.10.0.1:5432,uid=1337,gid=1337,iface=lo", "bypass 5432 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -p tcp --dport 5432 -j RETURN"),
            (NONE, DNS_LOCAL, "outbound:tcp:127.0.0.53:53,uid=1337,gid=1337", "bypass 53 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            (NONE, &["--drop-invalid"], "outbound:tcp:10.10.0.1:15008,uid=1337,iface=lo", "bypass 15008 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --uid-owner 1337 -j RETURN"),
            // IPv6: rules only when IPv6 is on (explicitly, or detected on a dual-stack pod).
            (NONE, &["--ipv6", "true"], "outbound:tcp:[fd00::5]:443", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            (NONE, &["--dual-stack"], "outbound:tcp:[fd00::5]:443", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            (NONE, &["--ipv6", "false"], "outbound:tcp:[fd00::5]:443", "bypass 443 (no rules)"),
            (NONE, &[], "outbound:tcp:[fd00::5]:443", "bypass 443 (no rules)"),
            (NONE, &["--ipv6", "true"], "inbound:tcp:[fd00::2]:8080", "inbound-proxy 15006 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"),
            (NONE, &["--ipv6", "true"], "outbound:tcp:[::1]:8080", "bypass 8080 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo -m owner ! --uid-owner 1337 -j RETURN"),
            (NONE, &["--ipv6", "true"], "outbound:tcp:[fd00::2]:8080,uid=1337,iface=lo", "inbound-proxy 15006 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -o lo ! -d ::1/128 -p tcp ! --dport 15008 -m owner --uid-owner 1337 -j ISTIO_IN_REDIRECT"),
            (NONE, &["--ipv6", "true"], "outbound:tcp:10.0.0.5:80", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            // Interfaces: excluded ones are left alone; kube-virt ones are captured as outbound.
            (NONE, &["-c", "eth1"], "outbound:tcp:10.0.0.5:80,iface=eth1", "bypass 80 nat/OUTPUT: -A OUTPUT -o eth1 -j RETURN"),
            (NONE, &["-c", "eth1"], "inbound:tcp:8080,iface=eth1", "bypass 8080 nat/PREROUTING: -A PREROUTING -i eth1 -j RETURN"),
            (NONE, &["-c", "eth1"], "inbound:tcp:8080", "inbound-proxy 15006 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"),
            (NONE, &["-k", "kv0"], "inbound:tcp:10.96.0.20:8080,iface=kv0", "outbound-proxy 15001 nat/PREROUTING: -I PREROUTING 1 -i kv0 -j ISTIO_REDIRECT"),
            (NONE, &["-c", "eth+"], "inbound:tcp:8080,iface=eth1", "bypass 8080 nat/PREROUTING: -A PREROUTING -i eth+ -j RETURN"),
            (NONE, &["-c", "eth+"], "outbound:tcp:10.0.0.5:80,iface=eth0", "bypass 80 nat/OUTPUT: -A OUTPUT -o eth+ -j RETURN"),
            (NONE, &["-c", "eth+"], "inbound:tcp:8080,iface=veth0", "inbound-proxy 15006 nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT"),
            (NONE, &["-k", "kv+"], "inbound:tcp:10.96.0.20:8080,iface=kv0", "outbound-proxy 15001 nat/PREROUTING: -I PREROUTING 1 -i kv+ -j ISTIO_REDIRECT"),
            (NONE, &["--outbound-owner-groups-exclude", "2000"], "outbound:tcp:10.0.0.5:80,gid=2000", "bypass 80 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner --gid-owner 2000 -j RETURN"),
            (NONE, &["--outbound-owner-groups", "3000"], "outbound:tcp:10.0.0.5:80", "bypass 80 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -m owner ! --gid-owner 3000 -j RETURN"),
            (NONE, &["--outbound-owner-groups", "3000"], "outbound:tcp:10.0.0.5:80,gid=3000", "outbound-proxy 15001 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
            (&[("-p", "15111")], &[], "outbound:tcp:10.0.0.5:80", "outbound-proxy 15111 nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT"),
        ];
        for (replace, extra, spec, expected) in cases {
            let a = args(replace, extra);
            assert_eq!(line(&one(&a, spec)), *expected, "{spec} with {a:?}");
        }
    }

    #[test]
    fn verdicts_follow_the_rules_nftables() {
        const NONE: &[(&str, &str)] = &[];
        let cases: &[Case] = &[
            (NONE, &["-o", "5432"], "outbound:tcp:10.0.0.5:5432", "bypass 5432 istio-proxy-nat/istio-output: tcp dport 5432 counter return"),
            (NONE, &[], "outbound:tcp:192.0.2.2:8080,uid=1337,iface=lo", "inbound-proxy 15006 istio-proxy-nat/istio-output: oifname lo meta l4proto tcp ip daddr != 127.0.0.1/32 tcp dport != 15008 skuid 1337 counter jump istio-in-redirect"),
            (NONE, &["--redirect-dns", "--dns-servers", "10.96.0.10"], "outbound:udp:10.96.0.10:53", "dns-proxy 15053 istio-proxy-nat/istio-output-dns: ip daddr 10.96.0.10/32 udp dport 53 counter redirect to :15053"),
            (NONE, &[], "inbound:tcp:7070", "inbound-proxy 15006 istio-proxy-nat/istio-inbound: meta l4proto tcp counter jump istio-in-redirect"),
            (NONE, &[], "inbound:tcp:15021", "bypass 15021 istio-proxy-nat/istio-inbound: meta l4proto tcp tcp dport 15021 counter return"),
            (&[("-m", "TPROXY")], &[], "inbound:tcp:8080", "inbound-proxy 15006 istio-proxy-mangle/istio-inbound: meta l4proto tcp counter jump istio-tproxy"),
            // Over lo, the 1338-marked connections nat leaves alone meet TPROXY coming back in.
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:10.10.0.1:15008,uid=1337,gid=1337,iface=lo", "inbound-proxy 15006 istio-proxy-mangle/istio-inbound: meta l4proto tcp tcp dport 15008 counter jump istio-tproxy"),
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:[fd00::1]:15008,uid=1337,iface=lo", "inbound-proxy 15006 istio-proxy-mangle/istio-inbound: meta l4proto tcp tcp dport 15008 counter jump istio-tproxy"),
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:10.10.0.1:9090,uid=1337,gid=1337,iface=lo", "bypass 9090 istio-proxy-nat/istio-output: tcp dport 9090 counter return"),
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:10.10.0.1:15008,iface=lo", "bypass 15008 istio-proxy-nat/istio-output: oifname lo skuid != 1337 counter return"),
            (LO_TPROXY, LO_TPROXY_EXTRA, "outbound:tcp:127.0.0.1:15008,uid=1337", "bypass 15008 istio-proxy-nat/istio-output: skuid 1337 counter return"),
            (TPROXY, GID_EXCLUDE_5432, "outbound:tcp:10.10.0.1:5432,uid=1337,gid=1337,iface=lo", "inbound-proxy 15006 istio-proxy-mangle/istio-inbound: meta l4proto tcp counter jump istio-tproxy"),
            (TPROXY, GID_EXCLUDE_5432, "outbound:udp:10.10.0.1:5432,uid=1337,gid=1337,iface=lo", "bypass 5432 istio-proxy-nat/istio-output: udp dport 5432 counter return"),
            (ALL_PORTS_TPROXY, GID_DNS, "outbound:tcp:10.10.0.1:8080,uid=1000,gid=1337,iface=lo", "inbound-proxy 15006 istio-proxy-mangle/istio-inbound: meta l4proto tcp counter jump istio-tproxy"),
            (DNS_TPROXY, DNS_LOCAL, "outbound:tcp:127.0.0.53:53,uid=1337,gid=1337", "inbound-proxy 15006 istio-proxy-mangle/istio-inbound: meta l4proto tcp counter jump istio-tproxy"),
            (NONE, GID_EXCLUDE_5432, "outbound:tcp:10.10.0.1:5432,uid=1337,gid=1337,iface=lo", "bypass 5432 istio-proxy-nat/istio-output: tcp dport 5432 counter return"),
            (NONE, DNS_LOCAL, "outbound:tcp:127.0.0.53:53,uid=1337,gid=1337", "bypass 53 istio-proxy-nat/istio-output: skuid 1337 counter return"),
            (&[("-b", "8080")], &[], "inbound:tcp:7070", "bypass 7070 istio-proxy-nat/prerouting (end)"),
            (&[("-b", "")], &[], "inbound:tcp:7070", "bypass 7070 istio-proxy-nat/prerouting (end)"),
            (NONE, &["-c", "eth1"], "outbound:tcp:10.0.0.5:80,iface=eth1", "bypass 80 istio-proxy-nat/output: oifname eth1 counter return"),
            // `+` is iptables' prefix match here too (the verdicts of the iptables rows on `eth+`).
            (NONE, &["-c", "eth+"], "inbound:tcp:8080,iface=eth1", "bypass 8080 istio-proxy-nat/prerouting: iifname \"eth*\" counter return"),
            (NONE, &["-c", "eth+"], "outbound:tcp:10.0.0.5:80,iface=eth0", "bypass 80 istio-proxy-nat/output: oifname \"eth*\" counter return"),
            (NONE, &["-c", "eth+"], "inbound:tcp:8080,iface=veth0", "inbound-proxy 15006 istio-proxy-nat/istio-inbound: meta l4proto tcp counter jump istio-in-redirect"),
            (NONE, &["-k", "kv+"], "inbound:tcp:10.96.0.20:8080,iface=kv0", "outbound-proxy 15001 istio-proxy-nat/prerouting: iifname \"kv*\" counter jump istio-redirect"),
            (NONE, &["--ipv6", "true"], "outbound:tcp:[fd00::5]:443", "outbound-proxy 15001 istio-proxy-nat/istio-output: counter jump istio-redirect"),
            // Istio's inet tables see IPv6 even with IPv6 off (iptables then has no rule for it).
            (NONE, &["--ipv6", "false"], "outbound:tcp:[fd00::5]:443", "outbound-proxy 15001 istio-proxy-nat/istio-output: counter jump istio-redirect"),
        ];
        for (replace, extra, spec, expected) in cases {
            let mut a = args(replace, extra);
            a.push("--native-nftables".to_string());
            assert_eq!(line(&one(&a, spec)), *expected, "{spec} with {a:?}");
        }
    }

    /// `+` means iptables' prefix match on both backends: every interface of these connections gets
    /// the same verdict from the iptables rules and the nftables ones.
    #[test]
    fn interface_prefixes_decide_alike_on_both_backends() {
        for (flags, spec) in [
            (["-c", "eth+"], "inbound:tcp:8080,iface=eth0"),
            (["-c", "eth+"], "inbound:tcp:8080,iface=eth12"),
            (["-c", "eth+"], "inbound:tcp:8080,iface=veth0"),
            (["-c", "eth+"], "inbound:tcp:8080,iface=et"),
            (["-c", "eth+"], "outbound:tcp:10.0.0.5:80,iface=eth7"),
            (["-c", "eth+"], "outbound:tcp:10.0.0.5:80,iface=lo"),
            (["-c", "+"], "inbound:tcp:8080,iface=anything"),
            (["-k", "kv+"], "inbound:tcp:10.96.0.20:8080,iface=kv0"),
            (["-k", "kv+"], "inbound:tcp:10.96.0.20:8080,iface=k"),
        ] {
            let ipt = args(&[], &flags);
            let mut nft = ipt.clone();
            nft.push("--native-nftables".to_string());
            let (a, b) = (one(&ipt, spec), one(&nft, spec));
            assert_eq!(
                (a.verdict, a.port),
                (b.verdict, b.port),
                "{flags:?} {spec}: {} / {}",
                line(&a),
                line(&b)
            );
        }
        let bypass = |flags: [&'static str; 2], spec| one(&args(&[], &flags), spec).verdict;
        assert_eq!(
            bypass(["-c", "eth+"], "inbound:tcp:8080,iface=eth12"),
            VerdictKind::Bypass
        );
        assert_eq!(
            bypass(["-c", "eth+"], "inbound:tcp:8080,iface=veth0"),
            VerdictKind::InboundProxy
        );
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_command_line_keeps_istio_flags_and_takes_out_its_own() {
        let split_ok = |v: &[&str]| split(&strings(v)).expect("splits");
        let s = split_ok(&[
            "istio-iptables",
            "-p",
            "15001",
            "--connection",
            "outbound:tcp:1",
            "-o",
            "5432",
            "--connection=inbound:tcp:2",
            "-x",
            "--connection",
            "--dry-run",
            "-n",
            "-o",
            "json",
        ]);
        assert_eq!(
            s.flags,
            strings(&[
                "istio-iptables",
                "-p",
                "15001",
                "-o",
                "5432",
                "-x",
                "--connection",
                "--dry-run",
                "-n"
            ])
        );
        assert_eq!(s.connections, strings(&["outbound:tcp:1", "inbound:tcp:2"]));
        assert_eq!(s.format, Some(Format::Json));
        for (argv, format) in [
            (&["-ojson"][..], Format::Json),
            (&["-o=text"], Format::Text),
            (&["--output", "json"], Format::Json),
            (&["--output=text"], Format::Text),
            (&["-o", "json", "-o", "text"], Format::Text),
        ] {
            let s = split_ok(argv);
            assert_eq!((s.format, s.flags.len()), (Some(format), 0), "{argv:?}");
        }
        let s = split_ok(&[
            "-o5432",
            "--istio-local-outbound-ports-exclude",
            "json",
            "-h",
        ]);
        assert_eq!(
            s.flags,
            strings(&["-o5432", "--istio-local-outbound-ports-exclude", "json"])
        );
        assert!(s.help);
        assert_eq!(s.format, None);
        let e = split(&strings(&["--output", "yaml"])).expect_err("yaml");
        assert!(e.contains("\"yaml\" for -o/--output"), "{e}");
        // The short -o with a word is the output format misspelt, not a port list.
        for argv in [&["-o", "yaml"][..], &["-oyaml"], &["-o=Json"]] {
            let e = split(&strings(argv)).expect_err("a word");
            assert!(e.contains("output format is text or json"), "{argv:?}: {e}");
        }
        assert_eq!(
            split_ok(&["-o", "5432,3306"]).flags,
            strings(&["-o", "5432,3306"])
        );
        assert!(split(&strings(&["--connection"])).is_err());
    }

    /// Runs `explain` on `argv` (after the subcommand word): status, stdout, stderr.
    fn main_of(argv: &[&str]) -> (u8, String, String) {
        let argv: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = main(&argv, &mut out, &mut err);
        let text = |b: Vec<u8>| String::from_utf8(b).expect("utf-8");
        (code, text(out), text(err))
    }

    #[test]
    fn text_output_names_the_rule_and_states_the_assumptions_once() {
        let mut argv = test_support::istio_init::injected_args_with(&[("-x", "10.0.0.0/8")], &[]);
        argv.extend([
            "--connection",
            "outbound:tcp:172.16.0.5:5432",
            "--connection",
            "outbound:tcp:10.0.0.5:5432",
            "--connection",
            "inbound:tcp:8080",
            "--connection",
            "outbound:tcp:[fd00::5]:443",
        ]);
        let (code, out, err) = main_of(&argv);
        assert_eq!((code, err.as_str()), (0, ""));
        let expected = format!(
            "backend: iptables\nassumed:\n{}\n\n\
outbound:tcp:172.16.0.5:5432
  outbound-proxy 15001 (original destination 172.16.0.5:5432)
  nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -j ISTIO_REDIRECT

outbound:tcp:10.0.0.5:5432
  bypass: reaches 10.0.0.5:5432 directly
  nat/ISTIO_OUTPUT: -A ISTIO_OUTPUT -d 10.0.0.0/8 -j RETURN

inbound:tcp:8080
  inbound-proxy 15006 (original destination 192.0.2.2:8080)
  nat/ISTIO_INBOUND: -A ISTIO_INBOUND -p tcp -j ISTIO_IN_REDIRECT

outbound:tcp:[fd00::5]:443
  bypass: reaches [fd00::5]:443 directly
  no IPv6 rules (IPv6 is off)
",
            OFFLINE_ASSUMPTIONS
                .split("; ")
                .map(|a| format!("  - {a}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert_eq!(out, expected);
        assert_eq!(out.matches("assumed:").count(), 1);
        let (code, out, _) = main_of(&["-b", "8080", "--connection", "inbound:tcp:7070"]);
        assert_eq!(code, 0);
        assert!(
            out.ends_with("inbound:tcp:7070\n  bypass: reaches 192.0.2.2:7070 directly\n  nat/PREROUTING: end of the base chain, no rule decided (policy accept)\n"),
            "{out}"
        );
    }

    #[test]
    fn json_output_is_one_object() {
        let (code, out, _) = main_of(&[
            "--native-nftables",
            "--redirect-dns",
            "--dns-servers",
            "10.96.0.10",
            "-o",
            "json",
            "--connection",
            "outbound:udp:10.96.0.10:53",
        ]);
        assert_eq!(code, 0);
        let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON object");
        assert_eq!(
            v,
            serde_json::json!({"backend": "nftables", "connections": [{
                "spec": "outbound:udp:10.96.0.10:53",
                "verdict": "dns-proxy",
                "port": 15053,
                "table": "istio-proxy-nat",
                "chain": "istio-output-dns",
                "rule": "ip daddr 10.96.0.10/32 udp dport 53 counter redirect to :15053",
                "address": "10.96.0.10",
            }]})
        );
    }

    #[test]
    fn exit_statuses() {
        let spec = ["--connection", "outbound:tcp:80"];
        let with = |extra: &[&'static str]| {
            let mut v = extra.to_vec();
            v.extend(spec);
            main_of(&v)
        };
        assert_eq!(with(&[]).0, 0);
        let (code, _, err) = main_of(&["--connection", "outbound:tcp:10.0.0.5:0"]);
        assert_eq!(code, 1);
        assert!(
            err.contains("connection \"outbound:tcp:10.0.0.5:0\": invalid port \"0\""),
            "{err}"
        );
        let (code, _, err) = with(&["-z", "x"]);
        assert_eq!(code, 1);
        assert!(err.contains("-z/--inbound-capture-port"), "{err}");
        assert_eq!(with(&["--no-such-flag"]).0, crate::EXIT_USAGE);
        assert_eq!(with(&["--output", "yaml"]).0, crate::EXIT_USAGE);
        let (code, _, err) = main_of(&["-p", "15001"]);
        assert_eq!(code, crate::EXIT_USAGE);
        assert!(err.contains("--connection"), "{err}");
        let (code, out, _) = main_of(&["--help"]);
        assert_eq!(code, 0);
        for needle in [
            "outbound|inbound:tcp|udp:[ADDRESS:]PORT",
            "192.0.2.1",
            "--connection <SPEC>",
            "-o, --output",
        ] {
            assert!(out.contains(needle), "{needle}: {out}");
        }
        // Apply-only flags are accepted and change nothing.
        let plain = with(&[]);
        assert_eq!(
            with(&[
                "--cleanup-only",
                "--reconcile",
                "--run-validation",
                "--dry-run=false"
            ]),
            plain
        );
    }

    /// `iptables-init explain` reads no environment variable and no surroundings, through the same
    /// entry point as a run, which does read them (so the spies below can see a read).
    #[test]
    fn explain_reads_no_environment_and_no_surroundings() {
        use std::cell::RefCell;
        struct Spy(RefCell<Vec<&'static str>>);
        impl System for Spy {
            fn interface_addrs(&self) -> Result<Vec<IpAddr>, String> {
                self.0.borrow_mut().push("interfaces");
                Ok(vec![IpAddr::V4(POD_V4)])
            }
            fn resolv_conf(&self) -> std::io::Result<String> {
                self.0.borrow_mut().push("resolv.conf");
                Ok(String::new())
            }
            fn passwd(&self) -> std::io::Result<String> {
                self.0.borrow_mut().push("passwd");
                Ok(String::new())
            }
        }
        let read: RefCell<Vec<String>> = RefCell::default();
        let env = |name: &str| {
            read.borrow_mut().push(name.to_string());
            (name == "INBOUND_CAPTURE_PORT").then(|| "16000".to_string())
        };
        let sys = Spy(RefCell::default());
        let argv = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let explained = crate::run_with(
            argv(&[
                "iptables-init",
                "explain",
                "-b",
                "*",
                "--connection",
                "inbound:tcp:8080",
                "-o",
                "json",
            ]),
            &env,
            &sys,
        );
        assert_eq!(explained, std::process::ExitCode::SUCCESS);
        assert_eq!(read.borrow().len(), 0, "explain read {:?}", read.borrow());
        assert_eq!(sys.0.borrow().len(), 0, "explain read {:?}", sys.0.borrow());
        let (_, out, _) = main_of(&["-b", "*", "--connection", "inbound:tcp:8080", "-o", "json"]);
        assert!(out.contains("\"port\": 15006"), "{out}");
        // The same flags as a real dry run: the variable and the surroundings are read and apply.
        let args = Args::parse_args(argv(&["iptables-init", "-b", "*"])).expect("parses");
        let cfg = config::resolve(&args, &env, &sys).expect("resolves");
        assert_eq!(cfg.inbound_capture_port, 16000);
        assert!(read.borrow().iter().any(|n| n == "INBOUND_CAPTURE_PORT"));
        assert!(sys.0.borrow().contains(&"passwd"));
    }
}
