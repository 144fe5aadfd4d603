//! The rule model: what `iptables-init` wants the kernel to hold, independent of how it is printed or applied.
//!
//! Shared contract between `rules` (builds a [`Plan`] from a `Config`), `render` (prints it) and `apply`
//! (installs, checks and removes it).

/// An IP family. IPv4 rules go to `iptables-restore`, IPv6 rules to `ip6tables-restore`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

/// A netfilter table. `Ord` is lexicographic by name, the order tables are rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    Filter,
    Mangle,
    Nat,
    Raw,
}

impl Table {
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Mangle => "mangle",
            Table::Nat => "nat",
            Table::Raw => "raw",
        }
    }
}

/// One rule as Istio records it: its table, its chain, and the tokens of the command, starting with
/// `-A CHAIN ...` or `-I CHAIN POS ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub table: Table,
    pub chain: String,
    pub tokens: Vec<String>,
}

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

/// Everything one run installs: the v4 rules, the v6 rules when IPv6 is on, and the route actions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub v4: Vec<Rule>,
    /// `None` when IPv6 is off: nothing is rendered or applied for IPv6.
    pub v6: Option<Vec<Rule>>,
    pub routes: Vec<RouteAction>,
}
