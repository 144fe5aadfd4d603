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

/// A string flag's input: the command line, else its variables (`string_input`).
type Input<'a> = &'a dyn Fn(&'static Flag) -> Option<Given>;

/// Resolves and validates the whole configuration. Reads `/etc/resolv.conf`, `/etc/passwd` and the
/// interface addresses through `sys`, and only when the flags leave them undecided. The steps run in
/// the flags' order, so the first invalid value is the one reported.
pub fn resolve(args: &Args, env: Env, sys: &dyn System) -> Result<Config, ConfigError> {
    let mut c = Config::default();
    let s = |flag: &'static Flag| string_input(args, flag, env);
    // The backend first: what it accepts bounds the values below.
    c.native_nftables = boolean(args, &flags::NATIVE_NFTABLES, env);
    let limits = Limits::of(c.native_nftables);

    c.proxy_port = port_flag(s(&flags::ENVOY_PORT), c.proxy_port)?;
    c.inbound_capture_port = port_flag(s(&flags::INBOUND_CAPTURE_PORT), c.inbound_capture_port)?;
    c.inbound_tunnel_port = port_flag(s(&flags::INBOUND_TUNNEL_PORT), c.inbound_tunnel_port)?;
    resolve_proxy_ids(&mut c, &s, env, sys, limits)?;
    resolve_traffic(&mut c, &s)?;
    resolve_tproxy(&mut c, &s)?;
    resolve_switches(&mut c, args, env);
    resolve_probe_and_binary(&mut c, args, env, &s)?;
    c.owner_groups = resolve_owner_groups(&s, limits)?;
    resolve_loopback_cidr(&mut c, &s)?;
    resolve_dns_servers(&mut c, args, sys)?;
    resolve_ipv6(&mut c, args, sys)?;
    Ok(c)
}

/// `-u` and `-g`.
fn resolve_proxy_ids(
    c: &mut Config,
    s: Input,
    env: Env,
    sys: &dyn System,
    limits: Limits,
) -> Result<(), ConfigError> {
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

    Ok(())
}

/// What is captured: the interception mode, the port, interface and CIDR lists.
fn resolve_traffic(c: &mut Config, s: Input) -> Result<(), ConfigError> {
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

    Ok(())
}

/// TPROXY's mark and route table.
fn resolve_tproxy(c: &mut Config, s: Input) -> Result<(), ConfigError> {
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
    Ok(())
}

/// The boolean flags, and the dry run's record file.
fn resolve_switches(c: &mut Config, args: &Args, env: Env) {
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
}

/// The validation probe, the network namespace and the forced iptables binary.
fn resolve_probe_and_binary(
    c: &mut Config,
    args: &Args,
    env: Env,
    s: Input,
) -> Result<(), ConfigError> {
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
    Ok(())
}

/// The owner groups' include and exclude lists.
fn resolve_owner_groups(s: Input, limits: Limits) -> Result<OwnerGroups, ConfigError> {
    // Owner groups: include `*` (default) means all-except the exclude list; otherwise the include
    // list alone, the exclude list ignored.
    let include = s(&flags::OUTBOUND_OWNER_GROUPS);
    let exclude = s(&flags::OUTBOUND_OWNER_GROUPS_EXCLUDE);
    Ok(match include {
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
    })
}

/// `--host-ipv4-loopback-cidr`.
fn resolve_loopback_cidr(c: &mut Config, s: Input) -> Result<(), ConfigError> {
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
    Ok(())
}

/// The DNS servers to capture.
fn resolve_dns_servers(c: &mut Config, args: &Args, sys: &dyn System) -> Result<(), ConfigError> {
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
    Ok(())
}

/// The IPv6 mode and the host IP.
fn resolve_ipv6(c: &mut Config, args: &Args, sys: &dyn System) -> Result<(), ConfigError> {
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
    Ok(())
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
mod tests;
