//! `explain`: where connections go under a configuration, answered offline from the same rule models
//! `iptables-init` applies.
//!
//! The istio-iptables flags are parsed by `cli` and resolved by `config::resolve` exactly as a real run
//! does, but with no environment and with fixed surroundings ([`OFFLINE_ASSUMPTIONS`]); the backend's
//! rule model is then walked for each connection (`walk`, `nft::walk`).

use std::net::IpAddr;

use crate::cli::Args;
use crate::config::{self, ConfigError};
use crate::connection::{Connection, Direction, POD_V4, POD_V6};
use crate::detect::System;
use crate::walk::RuleError;
pub use crate::walk::VerdictKind;
use crate::{nft, rules, walk};

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
source port 40000";

/// The surroundings of an explanation: fixed addresses, empty files.
struct Offline {
    ipv6: bool,
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
        let plan = rules::build(&cfg);
        let walk =
            |c: &Connection| walk::walk(&plan, &c.packet(), c.direction == Direction::Outbound);
        (Backend::Iptables, verdicts(connections, walk)?)
    };
    Ok(Explanation {
        backend,
        connections: verdicts,
    })
}

fn verdicts(
    connections: &[Connection],
    walk: impl Fn(&Connection) -> Result<walk::Outcome, RuleError>,
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
}
