//! Where a real connection lands: a [`Pair`] whose pod has interception rules gets a `nettool serve` on
//! each capture port (outbound, inbound, DNS) and on every real destination, and a [`Probe`] sent
//! through it is classified by the server that answered and the destination that server saw.
//!
//! Every server answers with its kind, the port it listens on and the connection's original
//! destination, so the client's one line tells where its traffic went; no listener output is needed.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::netns::{NetNs, Pair};
use crate::nettool::{quiet_client, Listener};

/// The pod's IPv4 address in a [`Pair`].
pub const POD_V4: Ipv4Addr = Ipv4Addr::new(10, 10, 0, 1);
/// The pod's IPv6 address in a [`Pair`].
pub const POD_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);

/// How long a client waits for its connection or reply: long for a veth, short for a miss.
const CLIENT_TIMEOUT_MS: &str = "1500";

/// Which way a probe goes, seen from the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From an application (or the proxy) in the pod.
    Outbound,
    /// From the peer to the pod.
    Inbound,
}

/// The transport of a probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// Where traffic can land; the names are those of `iptables-init explain`'s verdicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    OutboundProxy,
    InboundProxy,
    DnsProxy,
    Bypass,
}

impl Kind {
    /// Every kind, in histogram order.
    pub const ALL: [Kind; 4] = [
        Kind::OutboundProxy,
        Kind::InboundProxy,
        Kind::DnsProxy,
        Kind::Bypass,
    ];

    /// The verdict name (`outbound-proxy`, `inbound-proxy`, `dns-proxy`, `bypass`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::OutboundProxy => "outbound-proxy",
            Kind::InboundProxy => "inbound-proxy",
            Kind::DnsProxy => "dns-proxy",
            Kind::Bypass => "bypass",
        }
    }

    /// The kind a verdict name stands for.
    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One connection to send: outbound ones from the pod as `owner` (uid, gid), inbound ones from the peer
/// as root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub direction: Direction,
    pub protocol: Protocol,
    pub dest: SocketAddr,
    pub owner: (u32, u32),
}

impl Probe {
    /// Whether the real destination is the pod itself (its loopback or its own addresses), reached over
    /// `lo` when outbound.
    pub fn to_the_pod(&self) -> bool {
        self.direction == Direction::Inbound || is_pod_local(self.dest.ip())
    }

    /// The connection in `iptables-init explain`'s spec syntax, with every field spelled out.
    pub fn spec(&self) -> String {
        let head = match self.direction {
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        };
        let mut spec = format!("{head}:{}:{}", self.protocol.name(), self.dest);
        if self.direction == Direction::Outbound {
            spec.push_str(&format!(",uid={},gid={}", self.owner.0, self.owner.1));
            // The pod's own address is routed over lo; the spec's default would be eth0.
            if is_pod_local(self.dest.ip()) && !self.dest.ip().is_loopback() {
                spec.push_str(",iface=lo");
            }
        }
        spec
    }
}

/// Whether `ip` is one of the pod's: loopback or its interface addresses.
pub fn is_pod_local(ip: IpAddr) -> bool {
    ip.is_loopback() || ip == IpAddr::V4(POD_V4) || ip == IpAddr::V6(POD_V6)
}

/// The pod's capture ports (`-p`, `-z`, the DNS agent's 15053).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub outbound: u16,
    pub inbound: u16,
    pub dns: u16,
}

/// What happened to a probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// A server of `kind` on `port` answered and saw the destination the probe dialled.
    Landed { kind: Kind, port: u16 },
    /// A server answered but saw another destination (`saw`).
    Misdirected { kind: Kind, port: u16, saw: String },
    /// No server answered; the client's words.
    Nowhere(String),
}

impl fmt::Display for Observed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Observed::Landed { kind, port } => write!(f, "{kind}:{port}"),
            Observed::Misdirected { kind, port, saw } => write!(f, "{kind}:{port} but saw {saw}"),
            Observed::Nowhere(why) => write!(f, "nowhere ({why})"),
        }
    }
}

/// The servers of a [`Pair`] for a set of probes; they stop when dropped.
pub struct Servers {
    listeners: Vec<Listener>,
}

/// The `serve` items of `protocol` on `port` of both families' wildcard addresses.
fn wildcard(protocol: Protocol, port: u16) -> [String; 2] {
    let p = protocol.name();
    [format!("{p}:0.0.0.0:{port}"), format!("{p}:[::]:{port}")]
}

impl Servers {
    /// Starts, for `probes`: in the pod the outbound, inbound (transparent when `tproxy`) and DNS
    /// servers on `ports` (the DNS one as `dns_uid`, the proxy uid, whose replies the DNS rules un-NAT),
    /// and a bypass server on every real destination, in the pod or at the peer. A lifetime of
    /// `lifetime_ms` bounds a forgotten server. Panics when a real destination in the pod is a capture
    /// port (the landing would be ambiguous).
    pub fn start(
        pair: &Pair,
        ports: Ports,
        tproxy: bool,
        dns_uid: u32,
        probes: &[Probe],
        lifetime_ms: u64,
    ) -> Servers {
        let capture = [ports.outbound, ports.inbound, ports.dns];
        let (mut pod, mut peer) = (BTreeSet::new(), BTreeSet::new());
        for probe in probes {
            let to_pod = probe.to_the_pod();
            let port = probe.dest.port();
            assert!(
                !(to_pod && capture.contains(&port)),
                "{}: a real destination in the pod on a capture port {capture:?}",
                probe.spec()
            );
            let items = if to_pod { &mut pod } else { &mut peer };
            match probe.protocol {
                Protocol::Tcp => items.extend(wildcard(Protocol::Tcp, port)),
                // A UDP reply leaves from the address its socket is bound to: bind the one dialled.
                Protocol::Udp => {
                    items.insert(format!("udp:{}", probe.dest));
                }
            }
        }
        let serve =
            |ns: &NetNs, uid: Option<u32>, name: Kind, items: Vec<String>, extra: &[&str]| {
                let mut args = vec!["serve".to_string(), name.name().to_string()];
                args.extend(items);
                args.extend(extra.iter().map(|s| s.to_string()));
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Listener::start_for(ns, uid, &args, lifetime_ms)
            };
        let transparent: &[&str] = if tproxy { &["--transparent"] } else { &[] };
        let mut dns = wildcard(Protocol::Tcp, ports.dns).to_vec();
        // REDIRECT sends locally generated traffic to the loopback address of its family.
        dns.push(format!("udp:127.0.0.1:{}", ports.dns));
        dns.push(format!("udp:[::1]:{}", ports.dns));
        let mut listeners = vec![
            serve(
                &pair.pod,
                None,
                Kind::OutboundProxy,
                wildcard(Protocol::Tcp, ports.outbound).to_vec(),
                &[],
            ),
            serve(
                &pair.pod,
                None,
                Kind::InboundProxy,
                wildcard(Protocol::Tcp, ports.inbound).to_vec(),
                transparent,
            ),
            serve(&pair.pod, Some(dns_uid), Kind::DnsProxy, dns, &[]),
        ];
        for (ns, items) in [(&pair.pod, pod), (&pair.peer, peer)] {
            if !items.is_empty() {
                listeners.push(serve(
                    ns,
                    None,
                    Kind::Bypass,
                    items.into_iter().collect(),
                    &[],
                ));
            }
        }
        Servers { listeners }
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for listener in self.listeners.drain(..) {
            listener.kill();
        }
    }
}

/// The value of `key=` in a line of space-separated `key=value` words.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Sends `probe` through `pair` (whose [`Servers`] run) and says where it landed.
pub fn send(pair: &Pair, probe: &Probe) -> Observed {
    let dest = probe.dest.to_string();
    let (ns, owner) = match probe.direction {
        Direction::Outbound => (&pair.pod, Some(probe.owner)),
        Direction::Inbound => (&pair.peer, None),
    };
    let command = match probe.protocol {
        Protocol::Tcp => "connect-tcp",
        Protocol::Udp => "send-udp",
    };
    let (code, line, stderr) = quiet_client(
        ns,
        owner,
        &[command, &dest, "--timeout-ms", CLIENT_TIMEOUT_MS],
    );
    // TCP: `CONNECTED local=.. reply=KIND port=N local=L orig=O`; UDP: `REPLY peer=X data=KIND port=N ..`.
    let reply = line
        .split_once(" reply=")
        .or_else(|| line.split_once(" data="))
        .map(|(_, r)| r);
    let parsed = reply.and_then(|r| {
        let kind = Kind::from_name(r.split(' ').next()?)?;
        let port: u16 = field(r, "port")?.parse().ok()?;
        Some((kind, port, r))
    });
    let Some((kind, port, reply)) = parsed else {
        return Observed::Nowhere(format!("exit {code}: {line} {stderr}").trim().to_string());
    };
    let saw = match probe.protocol {
        // A UDP reply comes from the destination the query was sent to only when that is where it went
        // (or, redirected, when the rules undid the NAT on the way back).
        Protocol::Udp => field(&line, "peer").unwrap_or("-"),
        Protocol::Tcp if kind == Kind::Bypass => field(reply, "local").unwrap_or("-"),
        Protocol::Tcp => match field(reply, "orig") {
            // A TPROXYed connection without conntrack's original destination has it as its local one.
            Some("-") | None => field(reply, "local").unwrap_or("-"),
            Some(orig) => orig,
        },
    };
    if saw.parse::<SocketAddr>().ok() == Some(probe.dest) {
        Observed::Landed { kind, port }
    } else {
        Observed::Misdirected {
            kind,
            port,
            saw: saw.to_string(),
        }
    }
}
