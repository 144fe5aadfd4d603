//! The validated configuration: istio-iptables' flags and environment resolved (Istio's `cmd/root.go`
//! and `tools/common/config`), every value checked before anything is touched.
//!
//! Precedence is Istio's: command line, then the environment (for the flags that have a variable; an
//! "also" variable overrides the primary one; a boolean or number that does not parse is ignored with a
//! warning, as Istio ignores it), then the default. Unlike Istio, every value that reaches an iptables
//! argument is validated here and an invalid one is an error naming the flag (or variable) and the value.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use crate::cli::Args;
use crate::detect::{self, System};
use sidecar_core::flags::{self, parse_go_bool, parse_go_duration, Flag};

/// The environment, as a lookup function (the process environment in production, a map in tests).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// What one backend's apply accepts, measured against the kernel and the tools in a fresh network
/// namespace (docs/iptables-init.md, "Validation"); `resolve` refuses what the selected backend would,
/// before anything is applied, so `--dry-run` never prints what the apply would then refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The backend, as errors name it.
    pub backend: &'static str,
    /// The most groups of an `--outbound-owner-groups` list: all of them go into one rule.
    pub max_owner_groups: usize,
    /// The largest uid or gid of `-u`, `-g` and the owner-group lists.
    pub max_id: u32,
    /// Why `max_owner_groups` is what it is.
    pub owner_groups_why: &'static str,
}

impl Limits {
    /// iptables-restore (iptables-nft and legacy alike): the restore parser holds at most 255 words per
    /// line (`MAX_ARGC` in iptables' `xshared.h`), and the owner-group rule has 7 + 5 per group
    /// (`iptables -t nat -A ISTIO_OUTPUT`, `-m owner ! --gid-owner G` each, `-j RETURN`), so 49 fit and
    /// 50 are refused ("Parser cannot handle more arguments"); `libxt_owner` refuses uid and gid
    /// 4294967295, `(uid_t)-1`.
    pub const IPTABLES: Limits = Limits {
        backend: "iptables",
        max_owner_groups: 49,
        max_id: u32::MAX - 1,
        owner_groups_why: "iptables-restore reads at most 255 words per rule (MAX_ARGC)",
    };

    /// Native nftables: the kernel takes at most 128 expressions per rule (`NFT_RULE_MAXEXPRS` in
    /// `nf_tables_api.c`), and the owner-group rule has 2 per group (`meta load skgid`, `cmp`) plus
    /// `counter` and `return`, so 63 fit and 64 get EINVAL; nf_tables compares any 32-bit uid or gid.
    pub const NFTABLES: Limits = Limits {
        backend: "nftables (--native-nftables)",
        max_owner_groups: 63,
        max_id: u32::MAX,
        owner_groups_why: "the kernel takes at most 128 expressions per nftables rule",
    };

    /// The limits of the backend `native_nftables` selects.
    pub fn of(native_nftables: bool) -> Limits {
        if native_nftables {
            Limits::NFTABLES
        } else {
            Limits::IPTABLES
        }
    }
}

/// Why the configuration is invalid (exit status 1; nothing has been touched).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A value that does not fit its flag; `origin` names the flag or environment variable.
    #[error("invalid value {value:?} for {origin}: {reason}")]
    Invalid {
        origin: String,
        value: String,
        reason: String,
    },
    /// More owner groups than the backend's one rule can carry.
    #[error("invalid value {value:?} for {origin}: {count} groups; the {backend} backend takes at most {max} ({why}; or `*`)")]
    TooManyOwnerGroups {
        origin: String,
        value: String,
        count: usize,
        max: usize,
        backend: &'static str,
        why: &'static str,
    },
    /// `--ipv6 auto` found no usable interface address (Istio: "no valid local IP address found").
    #[error("no valid local IP address found: the network namespace has no non-loopback, non-link-local address (use --ipv6 true|false to decide without detection)")]
    NoHostIp,
    /// Listing interface addresses failed.
    #[error("IPv6 detection failed: {0}")]
    Detection(String),
    /// `/etc/resolv.conf` is needed for DNS capture but cannot be read.
    #[error("reading /etc/resolv.conf for --redirect-dns: {0} (pass --dns-servers to set the servers explicitly)")]
    ResolvConf(String),
}

fn invalid(origin: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        origin: origin.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// Inbound interception mode (`-m`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InterceptionMode {
    /// NAT REDIRECT to the inbound port.
    #[default]
    Redirect,
    /// mangle TPROXY with a mark and a policy-routing table.
    Tproxy,
}

/// Inbound ports to capture (`-b`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum InboundPorts {
    /// `-b ""`: no inbound capture.
    #[default]
    None,
    /// `-b '*'`: every port (minus `-d`).
    All,
    /// A port list. It can be empty (`-b ,`): Istio then installs the PREROUTING jump with no ports.
    List(Vec<u16>),
}

/// A CIDR as istio-iptables prints it: the address normalised, the prefix length, host bits kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub len: u8,
}

impl Cidr {
    /// Parses `addr/len` strictly, as Go's `netip.ParsePrefix`: no bare address, no spaces, no zone, a
    /// decimal length without sign or leading zeros, within the family's width.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, len) = s
            .split_once('/')
            .ok_or_else(|| "not a CIDR (expected ADDRESS/LENGTH)".to_string())?;
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{addr:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let valid_digits = !len.is_empty()
            && len.len() <= 3
            && len.bytes().all(|b| b.is_ascii_digit())
            && (len == "0" || !len.starts_with('0'));
        let len: u8 = match len.parse() {
            Ok(n) if valid_digits && n <= max => n,
            _ => return Err(format!("prefix length {len:?} is not 0 to {max}")),
        };
        Ok(Cidr { addr, len })
    }

    /// Loopback as Go sees it: 127/8, `::1`, or an IPv4-mapped 127/8.
    pub fn is_loopback(&self) -> bool {
        match self.addr {
            IpAddr::V4(a) => a.is_loopback(),
            IpAddr::V6(a) => a.is_loopback() || a.to_ipv4_mapped().is_some_and(|m| m.is_loopback()),
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A CIDR list split by family (an IPv4-mapped address counts as IPv6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CidrList {
    pub v4: Vec<Cidr>,
    pub v6: Vec<Cidr>,
}

impl CidrList {
    /// Whether any CIDR of either family is loopback.
    pub fn has_loopback(&self) -> bool {
        self.v4.iter().chain(&self.v6).any(Cidr::is_loopback)
    }
}

/// An IP family: of an iptables rule list (IPv4 rules go to `iptables-restore`, IPv6 rules to
/// `ip6tables-restore`), of a route action, of an nf_tables `ip`/`ip6` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

/// The fixed mark of proxy-owned loopback traffic under TPROXY (both backends' rules).
pub const OUTBOUND_MARK: u32 = 1338;
/// The agent's DNS port (both backends' DNS redirect).
pub const DNS_PROXY_PORT: u16 = 15053;

/// Outbound include (`-i`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutboundInclude {
    /// `*`: everything, both families.
    All,
    /// A CIDR list; an empty family has no outbound redirect at all.
    List(CidrList),
}

impl Default for OutboundInclude {
    fn default() -> Self {
        OutboundInclude::List(CidrList::default())
    }
}

/// Owner-group interception filter (the intercept filter of Istio's `tools/common/config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerGroups {
    /// Include list `*`: capture every group except these (one RETURN rule each).
    AllExcept(Vec<String>),
    /// Capture only these groups: one rule `! --gid-owner G ...` RETURNs the others. An empty list
    /// yields a bare `-j RETURN` (Istio's behaviour for a set-and-empty variable).
    Only(Vec<String>),
}

impl Default for OwnerGroups {
    fn default() -> Self {
        OwnerGroups::AllExcept(Vec::new())
    }
}

/// `--ipv6`: emit IPv6 rules, or detect as Istio does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ipv6Mode {
    /// Istio's detection from the namespace's interface addresses (Istio's `EnableIPv6`).
    Auto,
    /// Always emit IPv6 rules.
    True,
    /// Never emit IPv6 rules.
    False,
}

impl Ipv6Mode {
    /// The mode of `--ipv6`'s word (`auto` when not given).
    fn of(word: Option<&str>) -> Ipv6Mode {
        match word {
            Some("true") => Ipv6Mode::True,
            Some("false") => Ipv6Mode::False,
            _ => Ipv6Mode::Auto,
        }
    }
}

/// Everything a run needs, validated. [`Default`] is Istio's test default configuration
/// (`constructTestConfig` in Istio's `capture/run_test.go`), which the rule tests build on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// `-p`.
    pub proxy_port: u16,
    /// `-z`.
    pub inbound_capture_port: u16,
    /// `-e`.
    pub inbound_tunnel_port: u16,
    /// `-u`, one rule set per uid, in order.
    pub proxy_uids: Vec<u32>,
    /// `-g`.
    pub proxy_gids: Vec<u32>,
    /// `-m`.
    pub mode: InterceptionMode,
    /// `-b`.
    pub inbound_ports: InboundPorts,
    /// `-d` (used only with `-b '*'`).
    pub inbound_exclude_ports: Vec<u16>,
    /// `-c`.
    pub exclude_interfaces: Vec<String>,
    /// `-k`.
    pub kube_virt_interfaces: Vec<String>,
    /// `-i`.
    pub outbound_include: OutboundInclude,
    /// `-x`.
    pub outbound_exclude: CidrList,
    /// `-q`.
    pub outbound_ports: Vec<u16>,
    /// `-o`.
    pub outbound_exclude_ports: Vec<u16>,
    /// `-t`.
    pub tproxy_mark: u32,
    /// `-r`.
    pub tproxy_route_table: u32,
    /// `--redirect-dns` as given (DNS capture is effectively on only with servers or capture-all).
    pub redirect_dns: bool,
    /// `--capture-all-dns`.
    pub capture_all_dns: bool,
    /// IPv4 DNS servers.
    pub dns_servers_v4: Vec<Ipv4Addr>,
    /// IPv6 DNS servers.
    pub dns_servers_v6: Vec<Ipv6Addr>,
    /// `--drop-invalid`.
    pub drop_invalid: bool,
    /// Whether IPv6 rules are generated and applied.
    pub ipv6: bool,
    /// The detected host IP, when detection ran (it decides the validation probe's family).
    pub host_ip: Option<IpAddr>,
    /// Owner-group filter.
    pub owner_groups: OwnerGroups,
    /// The IPv4 loopback CIDR (`LO` in v4 rules).
    pub loopback_cidr: Cidr,
    /// `--dry-run`.
    pub dry_run: bool,
    /// `DRY_RUN_FILE_PATH` (env only, non-empty): with `--dry-run`, also write what Istio's recording stub
    /// records, in its golden-file format (see `render::dry_run_record`).
    pub dry_run_file: Option<std::path::PathBuf>,
    /// `--skip-rule-apply`.
    pub skip_rule_apply: bool,
    /// `--run-validation`.
    pub run_validation: bool,
    /// `--iptables-probe-port`.
    pub probe_port: u16,
    /// `--probe-timeout`.
    pub probe_timeout: Duration,
    /// `--reconcile`.
    pub reconcile: bool,
    /// `--cleanup-only`.
    pub cleanup_only: bool,
    /// `--force-apply`.
    pub force_apply: bool,
    /// `--cni-mode`.
    pub cni_mode: bool,
    /// `--network-namespace`.
    pub network_namespace: Option<String>,
    /// `--native-nftables`: Istio's nftables rules, applied over netlink by the `nft` module.
    pub native_nftables: bool,
    /// `--dual-stack`.
    pub dual_stack: bool,
    /// `FORCE_IPTABLES_BINARY`: `legacy` or `nft`.
    pub force_binary: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            proxy_port: 15001,
            inbound_capture_port: 15006,
            inbound_tunnel_port: 15008,
            proxy_uids: vec![1337],
            proxy_gids: vec![1337],
            mode: InterceptionMode::Redirect,
            inbound_ports: InboundPorts::None,
            inbound_exclude_ports: Vec::new(),
            exclude_interfaces: Vec::new(),
            kube_virt_interfaces: Vec::new(),
            outbound_include: OutboundInclude::default(),
            outbound_exclude: CidrList::default(),
            outbound_ports: Vec::new(),
            outbound_exclude_ports: Vec::new(),
            tproxy_mark: 1337,
            tproxy_route_table: 133,
            redirect_dns: false,
            capture_all_dns: false,
            dns_servers_v4: Vec::new(),
            dns_servers_v6: Vec::new(),
            drop_invalid: false,
            ipv6: false,
            host_ip: None,
            owner_groups: OwnerGroups::default(),
            loopback_cidr: Cidr {
                addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
                len: 32,
            },
            dry_run: false,
            dry_run_file: None,
            skip_rule_apply: false,
            run_validation: false,
            probe_port: 15002,
            probe_timeout: Duration::from_secs(5),
            reconcile: false,
            cleanup_only: false,
            force_apply: false,
            cni_mode: false,
            network_namespace: None,
            native_nftables: false,
            dual_stack: false,
            force_binary: None,
        }
    }
}

impl Config {
    /// Whether DNS capture is effectively on: `--redirect-dns` with servers or `--capture-all-dns`
    /// (Istio silently disables it otherwise).
    pub fn dns_capture(&self) -> bool {
        self.redirect_dns
            && (self.capture_all_dns
                || !self.dns_servers_v4.is_empty()
                || !self.dns_servers_v6.is_empty())
    }
}

/// A value with where it came from, for error messages.
struct Given {
    value: String,
    origin: String,
}

/// Resolves a string flag: the command line, else the last of its variables that is set (set-and-empty
/// counts), else `None`.
fn string_input(args: &Args, flag: &'static Flag, env: Env) -> Option<Given> {
    if let Some(v) = args.string(flag) {
        return Some(Given {
            value: v.to_string(),
            origin: flag.origin(),
        });
    }
    flag.env.iter().rev().find_map(|name| {
        env(name).map(|v| Given {
            value: v,
            origin: format!("${name} ({})", flag.origin()),
        })
    })
}

/// Resolves a typed flag with Istio's environment rule: each variable in order overrides the previous
/// one if it parses; one that does not parse is ignored (with a warning).
fn typed_input<T>(
    cli: Option<T>,
    flag: &'static Flag,
    env: Env,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Option<T> {
    if cli.is_some() {
        return cli;
    }
    let mut out = None;
    for name in flag.env {
        if let Some(raw) = env(name) {
            match parse(&raw) {
                Ok(v) => out = Some(v),
                Err(e) => {
                    tracing::warn!(
                        "ignoring ${name} for --{}: {e} (as istio-iptables does)",
                        flag.long
                    )
                }
            }
        }
    }
    out
}

fn boolean(args: &Args, flag: &'static Flag, env: Env) -> bool {
    typed_input(args.boolean(flag), flag, env, parse_go_bool).unwrap_or(false)
}

/// Splits an istio-iptables list: on `,`, empty items dropped, items not trimmed.
pub fn split_list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').filter(|item| !item.is_empty())
}

/// A TCP/UDP port: decimal, 1 to 65535, without leading zeros (`iptables-restore` refuses `--dport 080`,
/// so Istio's run with `-d 080` fails when it applies; found by the rules differential).
fn parse_port(origin: &str, s: &str) -> Result<u16, ConfigError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(origin, s, "not a port number (1-65535)"));
    }
    if s.len() > 1 && s.starts_with('0') {
        return Err(invalid(
            origin,
            s,
            "not a port number (1-65535, no leading zeros: iptables refuses them)",
        ));
    }
    match s.parse::<u16>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(invalid(origin, s, "port out of range (1-65535)")),
    }
}

fn port_flag(given: Option<Given>, default: u16) -> Result<u16, ConfigError> {
    given.map_or(Ok(default), |g| parse_port(&g.origin, &g.value))
}

fn port_list(given: &Option<Given>) -> Result<Vec<u16>, ConfigError> {
    let Some(g) = given else {
        return Ok(Vec::new());
    };
    split_list(&g.value)
        .map(|item| parse_port(&g.origin, item))
        .collect()
}

/// A uid or gid: a decimal number up to the backend's `max_id`.
fn parse_id(origin: &str, s: &str, what: &str, limits: Limits) -> Result<u32, ConfigError> {
    let id = parse_u32(origin, s, what)?;
    if id > limits.max_id {
        return Err(invalid(
            origin,
            s,
            format!(
                "{what} {id} is -1 as a 32-bit id (the kernel's invalid id), which the {} backend refuses (0-{})",
                limits.backend, limits.max_id
            ),
        ));
    }
    Ok(id)
}

/// A decimal unsigned 32-bit number (uid, gid, mark, table): digits only.
fn parse_u32(origin: &str, s: &str, what: &str) -> Result<u32, ConfigError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(
            origin,
            s,
            format!("{what} must be a decimal number"),
        ));
    }
    s.parse::<u32>()
        .map_err(|_| invalid(origin, s, format!("{what} is out of range (0-4294967295)")))
}

/// A TPROXY mark: decimal, without leading zeros. Istio's mark goes both into iptables rules, which read
/// it with C's `strtoul` base 0, and into `ip rule ... fwmark` through `tproxy.ConfigureRoutes`, which
/// reads it with Go's `strconv.Atoi`: `0x10` makes Istio's real run fail after its rules are in, and `010`
/// marks packets 8 but routes mark 10. Only plain decimal means one mark to both (found by the rules
/// differential).
fn parse_mark(origin: &str, s: &str) -> Result<u32, ConfigError> {
    if s.len() > 1 && s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(
            origin,
            s,
            "mark must be a decimal number without leading zeros (iptables would read it as octal, Istio's routes as decimal)",
        ));
    }
    parse_u32(origin, s, "mark")
}

fn id_list(origin: &str, s: &str, what: &str, limits: Limits) -> Result<Vec<u32>, ConfigError> {
    let ids = split_list(s)
        .map(|item| parse_id(origin, item, what, limits))
        .collect::<Result<Vec<_>, _>>()?;
    if ids.is_empty() {
        return Err(invalid(origin, s, format!("no {what} in the list")));
    }
    Ok(ids)
}

/// A Linux interface name (`dev_valid_name`), restricted to characters that are safe as one iptables
/// token: 1 to 15 of `A-Z a-z 0-9 . _ - + @`, not `.` or `..`, not starting with `-` (which iptables
/// would read as an option). A trailing `+` is iptables' prefix match (`eth+`: every name starting
/// with `eth`), on both backends; anywhere else both would match a literal `+` that no usual interface
/// name has (`eth+0` is a typo, not a pattern), so it is refused.
fn parse_ifname(origin: &str, s: &str) -> Result<String, ConfigError> {
    if s.strip_suffix('+').unwrap_or(s).contains('+') {
        return Err(invalid(
            origin,
            s,
            "`+` is allowed only at the end of an interface name (iptables' prefix match: `eth+`)",
        ));
    }
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'@'));
    if s.is_empty() || s.len() > 15 || s == "." || s == ".." || s.starts_with('-') || !ok_chars {
        return Err(invalid(
            origin,
            s,
            "not a valid interface name (1-15 of A-Z a-z 0-9 . _ - + @, not starting with -)",
        ));
    }
    Ok(s.to_string())
}

fn ifname_list(given: &Option<Given>) -> Result<Vec<String>, ConfigError> {
    let Some(g) = given else {
        return Ok(Vec::new());
    };
    split_list(&g.value)
        .map(|item| parse_ifname(&g.origin, item))
        .collect()
}

fn cidr_list(origin: &str, s: &str) -> Result<CidrList, ConfigError> {
    let mut list = CidrList::default();
    for item in split_list(s) {
        let cidr = Cidr::parse(item).map_err(|reason| invalid(origin, item, reason))?;
        match cidr.addr {
            IpAddr::V4(_) => list.v4.push(cidr),
            IpAddr::V6(_) => list.v6.push(cidr),
        }
    }
    Ok(list)
}

/// A group as `--gid-owner` takes it: a numeric gid or a POSIX-ish group name.
fn parse_group(origin: &str, s: &str, limits: Limits) -> Result<String, ConfigError> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        parse_id(origin, s, "gid", limits)?;
        return Ok(s.to_string());
    }
    let body = s.strip_suffix('$').unwrap_or(s);
    let first_ok = body
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    let rest_ok = body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if !first_ok || !rest_ok || s.len() > 32 {
        return Err(invalid(
            origin,
            s,
            "not a group name or gid (a letter or _, then up to 31 of A-Z a-z 0-9 _ . -)",
        ));
    }
    Ok(s.to_string())
}

fn group_list(origin: &str, s: &str, limits: Limits) -> Result<Vec<String>, ConfigError> {
    split_list(s)
        .map(|g| parse_group(origin, g, limits))
        .collect()
}

/// Resolves and validates the whole configuration. Reads `/etc/resolv.conf`, `/etc/passwd` and the
/// interface addresses through `sys`, and only when the flags leave them undecided.
pub fn resolve(args: &Args, env: Env, sys: &dyn System) -> Result<Config, ConfigError> {
    let mut c = Config::default();
    let s = |flag: &'static Flag| string_input(args, flag, env);
    // The backend first: what it accepts bounds the values below.
    c.native_nftables = boolean(args, &flags::NATIVE_NFTABLES, env);
    let limits = Limits::of(c.native_nftables);

    c.proxy_port = port_flag(s(&flags::ENVOY_PORT), c.proxy_port)?;
    c.inbound_capture_port = port_flag(s(&flags::INBOUND_CAPTURE_PORT), c.inbound_capture_port)?;
    c.inbound_tunnel_port = port_flag(s(&flags::INBOUND_TUNNEL_PORT), c.inbound_tunnel_port)?;

    // -u: empty means $ENVOY_USER's uid, else 1337; -g: empty means the -u list.
    let uid = s(&flags::PROXY_UID).filter(|g| !g.value.is_empty());
    c.proxy_uids = match &uid {
        Some(g) => id_list(&g.origin, &g.value, "uid", limits)?,
        None => {
            let user = env("ENVOY_USER").unwrap_or_else(|| "istio-proxy".to_string());
            let found = sys
                .passwd()
                .ok()
                .and_then(|text| detect::uid_from_passwd(&text, &user))
                // A passwd uid the backend would refuse counts as not found.
                .filter(|&uid| uid <= limits.max_id);
            if found.is_none() {
                tracing::debug!("user {user:?} not found in /etc/passwd; using uid 1337");
            }
            vec![found.unwrap_or(1337)]
        }
    };
    let gid = s(&flags::PROXY_GID).filter(|g| !g.value.is_empty());
    c.proxy_gids = match &gid {
        Some(g) => id_list(&g.origin, &g.value, "gid", limits)?,
        None => c.proxy_uids.clone(),
    };

    if let Some(g) = s(&flags::INBOUND_INTERCEPTION_MODE) {
        c.mode = match g.value.as_str() {
            "" | "REDIRECT" => InterceptionMode::Redirect,
            "TPROXY" => InterceptionMode::Tproxy,
            _ => {
                return Err(invalid(
                    &g.origin,
                    &g.value,
                    "unknown mode (REDIRECT, TPROXY or empty; case-sensitive)",
                ))
            }
        };
    }

    if let Some(g) = s(&flags::INBOUND_PORTS) {
        c.inbound_ports = match g.value.as_str() {
            "" => InboundPorts::None,
            "*" => InboundPorts::All,
            _ => InboundPorts::List(port_list(&Some(g))?),
        };
    }
    c.inbound_exclude_ports = port_list(&s(&flags::LOCAL_EXCLUDE_PORTS))?;
    c.exclude_interfaces = ifname_list(&s(&flags::EXCLUDE_INTERFACES))?;
    c.kube_virt_interfaces = ifname_list(&s(&flags::KUBE_VIRT_INTERFACES))?;

    if let Some(g) = s(&flags::SERVICE_CIDR) {
        c.outbound_include = if g.value == "*" {
            OutboundInclude::All
        } else {
            OutboundInclude::List(cidr_list(&g.origin, &g.value)?)
        };
    }
    if let Some(g) = s(&flags::SERVICE_EXCLUDE_CIDR) {
        if g.value == "*" {
            return Err(invalid(
                &g.origin,
                &g.value,
                "`*` would exclude everything (Istio: invalid value for OUTBOUND_IP_RANGES_EXCLUDE)",
            ));
        }
        c.outbound_exclude = cidr_list(&g.origin, &g.value)?;
    }
    c.outbound_ports = port_list(&s(&flags::OUTBOUND_PORTS))?;
    c.outbound_exclude_ports = port_list(&s(&flags::LOCAL_OUTBOUND_PORTS_EXCLUDE))?;

    if let Some(g) = s(&flags::TPROXY_MARK) {
        let mark = parse_mark(&g.origin, &g.value)?;
        if mark == 0 || mark == 1338 {
            return Err(invalid(
                &g.origin,
                &g.value,
                "mark 0 matches unmarked packets and 1338 is the outbound mark; choose another",
            ));
        }
        c.tproxy_mark = mark;
    }
    if let Some(g) = s(&flags::TPROXY_ROUTE_TABLE) {
        let table = parse_u32(&g.origin, &g.value, "route table")?;
        if matches!(table, 0 | 253..=255) {
            return Err(invalid(
                &g.origin,
                &g.value,
                "route tables 0, 253 (default), 254 (main) and 255 (local) are reserved",
            ));
        }
        c.tproxy_route_table = table;
    }

    c.dry_run = boolean(args, &flags::DRY_RUN, env);
    c.dry_run_file = env("DRY_RUN_FILE_PATH")
        .filter(|p| !p.is_empty())
        .map(std::path::PathBuf::from);
    c.skip_rule_apply = boolean(args, &flags::SKIP_RULE_APPLY, env);
    c.run_validation = boolean(args, &flags::RUN_VALIDATION, env);
    c.redirect_dns = boolean(args, &flags::REDIRECT_DNS, env);
    c.drop_invalid = boolean(args, &flags::DROP_INVALID, env);
    c.dual_stack = boolean(args, &flags::DUAL_STACK, env);
    c.capture_all_dns = boolean(args, &flags::CAPTURE_ALL_DNS, env);
    c.cni_mode = boolean(args, &flags::CNI_MODE, env);
    c.reconcile = boolean(args, &flags::RECONCILE, env);
    c.cleanup_only = boolean(args, &flags::CLEANUP_ONLY, env);
    c.force_apply = boolean(args, &flags::FORCE_APPLY, env);

    let probe_port = typed_input(
        args.port(&flags::IPTABLES_PROBE_PORT),
        &flags::IPTABLES_PROBE_PORT,
        env,
        |v| v.parse::<u16>().map_err(|e| format!("{v:?}: {e}")),
    );
    if let Some(p) = probe_port {
        if p == 0 {
            return Err(invalid(
                &flags::IPTABLES_PROBE_PORT.origin(),
                "0",
                "port out of range (1-65535)",
            ));
        }
        c.probe_port = p;
    }
    if let Some(t) = typed_input(
        args.duration(&flags::PROBE_TIMEOUT),
        &flags::PROBE_TIMEOUT,
        env,
        parse_go_duration,
    ) {
        c.probe_timeout = t;
    }
    c.network_namespace = s(&flags::NETWORK_NAMESPACE)
        .map(|g| g.value)
        .filter(|v| !v.is_empty());

    if let Some(g) = s(&flags::FORCE_IPTABLES_BINARY) {
        c.force_binary = match g.value.as_str() {
            "" => None,
            "legacy" | "nft" => Some(g.value.clone()),
            _ => {
                return Err(invalid(
                    &g.origin,
                    &g.value,
                    "must be `legacy`, `nft` or empty",
                ))
            }
        };
    }

    // Owner groups: include `*` (default) means all-except the exclude list; otherwise the include
    // list alone, the exclude list ignored.
    let include = s(&flags::OUTBOUND_OWNER_GROUPS);
    let exclude = s(&flags::OUTBOUND_OWNER_GROUPS_EXCLUDE);
    c.owner_groups = match include {
        Some(g) if g.value != "*" => {
            let groups = group_list(&g.origin, &g.value, limits)?;
            if groups.len() > limits.max_owner_groups {
                return Err(ConfigError::TooManyOwnerGroups {
                    origin: g.origin,
                    value: g.value,
                    count: groups.len(),
                    max: limits.max_owner_groups,
                    backend: limits.backend,
                    why: limits.owner_groups_why,
                });
            }
            if groups.is_empty() {
                tracing::warn!(
                    "{} is empty: no outbound traffic is captured after the owner-group rule (as in Istio)",
                    g.origin
                );
            }
            if let Some(x) = &exclude {
                if !x.value.is_empty() {
                    tracing::warn!("{} is ignored because {} is not `*`", x.origin, g.origin);
                }
            }
            OwnerGroups::Only(groups)
        }
        _ => OwnerGroups::AllExcept(match &exclude {
            Some(x) => group_list(&x.origin, &x.value, limits)?,
            None => Vec::new(),
        }),
    };

    if let Some(g) = s(&flags::HOST_IPV4_LOOPBACK_CIDR) {
        let cidr = Cidr::parse(&g.value).map_err(|r| invalid(&g.origin, &g.value, r))?;
        match cidr.addr {
            IpAddr::V4(a) if a.is_loopback() && (8..=32).contains(&cidr.len) => {
                c.loopback_cidr = cidr
            }
            _ => {
                return Err(invalid(
                    &g.origin,
                    &g.value,
                    "must be an IPv4 loopback CIDR (127.0.0.0/8) with a prefix length of 8 to 32",
                ))
            }
        }
    }

    // DNS servers: the explicit list, else resolv.conf, read only when DNS capture needs the servers.
    let servers: Vec<IpAddr> = match args.string(&flags::DNS_SERVERS) {
        Some(list) => split_list(list)
            .map(|item| {
                item.parse::<IpAddr>()
                    .map_err(|_| invalid(&flags::DNS_SERVERS.origin(), item, "not an IP address"))
            })
            .collect::<Result<_, _>>()?,
        None if c.redirect_dns && !c.capture_all_dns => {
            let text = sys
                .resolv_conf()
                .map_err(|e| ConfigError::ResolvConf(e.to_string()))?;
            let (servers, dropped) = detect::parse_resolv_conf(&text);
            for d in dropped {
                tracing::warn!(
                    "ignoring nameserver {d:?} in /etc/resolv.conf: not a usable IP address"
                );
            }
            servers
        }
        None => Vec::new(),
    };
    for ip in servers {
        match ip {
            IpAddr::V4(a) => c.dns_servers_v4.push(a),
            IpAddr::V6(a) => match a.to_ipv4_mapped() {
                Some(m) => c.dns_servers_v4.push(m),
                None => c.dns_servers_v6.push(a),
            },
        }
    }
    if c.redirect_dns && !c.dns_capture() {
        tracing::warn!("--redirect-dns is on but there are no DNS servers and --capture-all-dns is off: DNS is not captured");
    }

    // IPv6: explicit, or Istio's detection. The host IP also picks the validation probe's family.
    let ipv6_mode = Ipv6Mode::of(args.choice(&flags::IPV6));
    // A cleanup needs no detection: it removes what is ours in both families (IPv6 included, "not
    // there" counting as removed), so a namespace without addresses can be cleaned up too.
    let detect_ipv6 = ipv6_mode == Ipv6Mode::Auto && !c.cleanup_only;
    if detect_ipv6 || c.run_validation {
        let detected = sys
            .interface_addrs()
            .map_err(ConfigError::Detection)
            .map(|addrs| detect::detect_ipv6(&addrs, c.dual_stack));
        match (detect_ipv6, detected) {
            (true, Err(e)) => return Err(e),
            (true, Ok(None)) => return Err(ConfigError::NoHostIp),
            (true, Ok(Some(d))) => {
                c.ipv6 = d.ipv6;
                c.host_ip = Some(d.host_ip);
            }
            (false, Ok(Some(d))) => c.host_ip = Some(d.host_ip),
            (false, _) => {}
        }
    }
    match ipv6_mode {
        Ipv6Mode::True => c.ipv6 = true,
        Ipv6Mode::False => c.ipv6 = false,
        Ipv6Mode::Auto if c.cleanup_only => c.ipv6 = true,
        Ipv6Mode::Auto => {}
    }
    Ok(c)
}

#[cfg(test)]
impl Config {
    /// The default with what Istio's injection template adds (`-i '*' -b '*' -d 15090,15021,15020`):
    /// the configuration of every injected pod, which several tests check.
    pub fn injected() -> Config {
        Config {
            inbound_ports: InboundPorts::All,
            inbound_exclude_ports: vec![15090, 15021, 15020],
            outbound_include: OutboundInclude::All,
            ..Config::default()
        }
    }
}

#[cfg(test)]
mod tests {
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
            passwd: Some(
                "root:x:0:0::/:\nistio-proxy:x:1500:1500::/:\nenvoy:x:101:101::/:\n".into(),
            ),
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
}
