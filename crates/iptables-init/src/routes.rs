//! The policy routing both backends do after their rules (Istio's `tools/common/tproxy/run_linux.go`):
//! the route actions of a configuration ([`build`]), each as the `ip` command that stands for it
//! ([`RouteAction::ip_args`], [`route_command`]). The iptables backend runs them through `ip`
//! (`iptables::apply`'s routes), the nftables backend over rtnetlink (`rtnetlink`); both dry runs
//! print them as `# ip ...` lines.

use crate::config::{Config, Family, InboundPorts, InterceptionMode};

/// A non-iptables action that the TPROXY / IPv6 setup needs (Istio does these through netlink).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteAction {
    /// `ip -6 addr add ::6/128 dev lo` ("File exists" is fine).
    AddLoopbackV6Source,
    /// `ip -4|-6 rule add fwmark MARK lookup TABLE`.
    AddFwmarkRule {
        family: Family,
        mark: u32,
        table: u32,
    },
    /// `ip -4|-6 route add local 0.0.0.0/0|::/0 dev lo table TABLE`.
    AddLocalRoute { family: Family, table: u32 },
}

impl RouteAction {
    /// The `ip` arguments of this action with `verb` (`add`, `del`, or `show` for a rule): one
    /// definition for what `--dry-run` prints and what the apply runs.
    pub fn ip_args(&self, verb: &str) -> Vec<String> {
        let family = |f: &Family| match f {
            Family::V4 => "-4",
            Family::V6 => "-6",
        };
        let (mark, table): (String, String);
        let words = match self {
            RouteAction::AddLoopbackV6Source => vec!["-6", "addr", verb, "::6/128", "dev", "lo"],
            RouteAction::AddFwmarkRule {
                family: f,
                mark: m,
                table: t,
            } => {
                (mark, table) = (m.to_string(), t.to_string());
                vec![family(f), "rule", verb, "fwmark", &mark, "lookup", &table]
            }
            RouteAction::AddLocalRoute {
                family: f,
                table: t,
            } => {
                table = t.to_string();
                let any = match f {
                    Family::V4 => "0.0.0.0/0",
                    Family::V6 => "::/0",
                };
                vec![
                    family(f),
                    "route",
                    verb,
                    "local",
                    any,
                    "dev",
                    "lo",
                    "table",
                    &table,
                ]
            }
        };
        words.into_iter().map(str::to_string).collect()
    }
}

/// A route action as the equivalent `ip` command (what `--dry-run` shows; the apply path does the same
/// through `ip` or netlink).
pub fn route_command(action: &RouteAction) -> String {
    format!("ip {}", action.ip_args("add").join(" "))
}

/// The routes and addresses Istio configures through netlink after either backend's rules (its
/// `tools/common/tproxy/run_linux.go`, `ConfigureRoutes`), in the order they are done.
pub fn build(cfg: &Config) -> Vec<RouteAction> {
    let mut routes = Vec::new();
    if cfg.ipv6 {
        routes.push(RouteAction::AddLoopbackV6Source);
    }
    if cfg.mode == InterceptionMode::Tproxy && cfg.inbound_ports != InboundPorts::None {
        let families: &[Family] = if cfg.ipv6 {
            &[Family::V4, Family::V6]
        } else {
            &[Family::V4]
        };
        for &family in families {
            routes.push(RouteAction::AddFwmarkRule {
                family,
                mark: cfg.tproxy_mark,
                table: cfg.tproxy_route_table,
            });
        }
        for &family in families {
            routes.push(RouteAction::AddLocalRoute {
                family,
                table: cfg.tproxy_route_table,
            });
        }
    }
    routes
}
