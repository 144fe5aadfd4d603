//! A connection to explain: the spec `outbound|inbound:tcp|udp:[ADDRESS:]PORT[,uid=N][,gid=N][,iface=NAME]`
//! and the first packet it sends, with the documented defaults filled in.
//!
//! Defaults: outbound goes to `192.0.2.1` and inbound arrives at the pod's own `192.0.2.2` (both
//! documentation addresses); the socket's uid and gid are `1000` (an application, not the proxy); the
//! interface is `lo` for outbound to a loopback address and `eth0` otherwise.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// Which way a connection goes, seen from the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Opened by a process in the pod (the OUTPUT hooks).
    Outbound,
    /// Opened by a peer towards the pod (the PREROUTING hooks).
    Inbound,
}

/// The transport protocol of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Outbound => "outbound",
            Direction::Inbound => "inbound",
        }
    }
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

/// A connection as a spec gives it; `None` fields take the documented defaults.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Connection {
    pub direction: Direction,
    pub protocol: Protocol,
    /// The destination address; `None`: `192.0.2.1` outbound, `192.0.2.2` (the pod) inbound.
    pub address: Option<IpAddr>,
    /// The destination port.
    pub port: u16,
    /// The owner uid of the sending socket (outbound only); `None`: `1000`.
    pub uid: Option<u32>,
    /// The owner gid of the sending socket (outbound only); `None`: `1000`.
    pub gid: Option<u32>,
    /// The interface the packet leaves (outbound) or arrives on (inbound); `None`: `lo` for outbound to
    /// a loopback address, else `eth0`.
    pub iface: Option<String>,
}

/// Why a connection spec does not parse. Every variant names the whole spec.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ConnectionError {
    /// The spec is not `DIRECTION:PROTOCOL:[ADDRESS:]PORT[,OPTIONS]`.
    #[error("connection {spec:?}: expected DIRECTION:PROTOCOL:[ADDRESS:]PORT[,uid=N][,gid=N][,iface=NAME], e.g. outbound:tcp:10.0.0.5:5432")]
    Shape { spec: String },
    /// A field has a value it cannot take.
    #[error("connection {spec:?}: invalid {field} {value:?}: {reason}")]
    Invalid {
        spec: String,
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    /// An option other than `uid`, `gid` and `iface`, or one given twice.
    #[error("connection {spec:?}: option {option:?}: {reason}")]
    Option {
        spec: String,
        option: String,
        reason: &'static str,
    },
}

/// The pod's own IPv4 address in an explanation (and the inbound default destination).
pub const POD_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 2);
/// The pod's own IPv6 address in an explanation, present when a connection is IPv6.
pub const POD_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);
/// The peer: the default outbound destination, and the source of inbound IPv4 connections.
pub const PEER_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
/// The source of inbound IPv6 connections.
pub const PEER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1);
/// The uid and gid of a connection that gives none: an application, not the proxy.
pub const DEFAULT_OWNER: u32 = 1000;
/// The source port of every explained connection (only conntrack-zone rules look at it).
pub const SOURCE_PORT: u16 = 40000;

impl Connection {
    /// The destination address with the default applied.
    pub fn address_or_default(&self) -> IpAddr {
        self.address.unwrap_or(match self.direction {
            Direction::Outbound => IpAddr::V4(PEER_V4),
            Direction::Inbound => IpAddr::V4(POD_V4),
        })
    }

    /// The interface with the default applied.
    pub fn iface_or_default(&self) -> &str {
        match &self.iface {
            Some(i) => i,
            None if self.direction == Direction::Outbound
                && self.address_or_default().is_loopback() =>
            {
                "lo"
            }
            None => "eth0",
        }
    }

    /// Whether the connection is IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.address_or_default().is_ipv6()
    }

    /// The first packet of the connection, every default applied.
    pub(crate) fn packet(&self) -> Packet {
        let dst = self.address_or_default();
        let iface = self.iface_or_default().to_string();
        // The kernel's source for a loopback destination is the loopback route's preferred source, and
        // for another address reached over lo (one of the pod's own) that address itself.
        let src = match (self.direction, dst) {
            (Direction::Outbound, IpAddr::V4(d)) if d.is_loopback() => {
                IpAddr::V4(Ipv4Addr::LOCALHOST)
            }
            (Direction::Outbound, IpAddr::V6(d)) if d.is_loopback() => {
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            }
            (Direction::Outbound, d) if iface == "lo" => d,
            (Direction::Outbound, IpAddr::V4(_)) => IpAddr::V4(POD_V4),
            (Direction::Outbound, IpAddr::V6(_)) => IpAddr::V6(POD_V6),
            (Direction::Inbound, IpAddr::V4(_)) => IpAddr::V4(PEER_V4),
            (Direction::Inbound, IpAddr::V6(_)) => IpAddr::V6(PEER_V6),
        };
        let outbound = self.direction == Direction::Outbound;
        Packet {
            protocol: self.protocol,
            src,
            dst,
            sport: SOURCE_PORT,
            dport: self.port,
            owner: outbound.then(|| {
                (
                    self.uid.unwrap_or(DEFAULT_OWNER),
                    self.gid.unwrap_or(DEFAULT_OWNER),
                )
            }),
            iif: (!outbound).then(|| iface.clone()),
            oif: outbound.then_some(iface),
        }
    }
}

/// The first packet of a connection as the rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Packet {
    pub protocol: Protocol,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    /// The socket's (uid, gid): outbound packets only.
    pub owner: Option<(u32, u32)>,
    /// The input interface (inbound).
    pub iif: Option<String>,
    /// The output interface (outbound).
    pub oif: Option<String>,
}

impl Packet {
    /// The same packet as it comes back in, when it leaves on `lo`: it arrives on `lo` with its mark
    /// and conntrack entry (the walk carries both) and without the local socket owner matches need.
    pub(crate) fn looped_back(&self) -> Option<Packet> {
        (self.oif.as_deref() == Some("lo")).then(|| Packet {
            iif: Some("lo".to_string()),
            oif: None,
            owner: None,
            ..self.clone()
        })
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Connection {
    /// The canonical spec: what was given, defaults left out, IPv6 in brackets, options in the order
    /// uid, gid, iface.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:", self.direction, self.protocol)?;
        match self.address {
            Some(IpAddr::V4(a)) => write!(f, "{a}:")?,
            Some(IpAddr::V6(a)) => write!(f, "[{a}]:")?,
            None => {}
        }
        write!(f, "{}", self.port)?;
        if let Some(u) = self.uid {
            write!(f, ",uid={u}")?;
        }
        if let Some(g) = self.gid {
            write!(f, ",gid={g}")?;
        }
        if let Some(i) = &self.iface {
            write!(f, ",iface={i}")?;
        }
        Ok(())
    }
}

/// An interface name as Linux takes it, limited to what can be written in a spec: 1 to 15 of
/// `A-Z a-z 0-9 . _ - @`.
fn valid_iface(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 15
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

impl FromStr for Connection {
    type Err = ConnectionError;

    fn from_str(spec: &str) -> Result<Connection, ConnectionError> {
        let invalid =
            |field: &'static str, value: &str, reason: &'static str| ConnectionError::Invalid {
                spec: spec.to_string(),
                field,
                value: value.to_string(),
                reason,
            };
        let shape = || ConnectionError::Shape {
            spec: spec.to_string(),
        };
        let mut parts = spec.split(',');
        let head = parts.next().unwrap_or_default();
        let (direction, rest) = head.split_once(':').ok_or_else(shape)?;
        let (protocol, target) = rest.split_once(':').ok_or_else(shape)?;
        let direction = match direction {
            "outbound" => Direction::Outbound,
            "inbound" => Direction::Inbound,
            _ => {
                return Err(invalid(
                    "direction",
                    direction,
                    "must be outbound or inbound",
                ))
            }
        };
        let protocol = match protocol {
            "tcp" => Protocol::Tcp,
            "udp" => Protocol::Udp,
            _ => return Err(invalid("protocol", protocol, "must be tcp or udp")),
        };
        let (address, port) = if let Some(v6) = target.strip_prefix('[') {
            let (addr, port) = v6.split_once("]:").ok_or_else(shape)?;
            let a: Ipv6Addr = addr.parse().map_err(|_| {
                invalid("address", addr, "not an IPv6 address (written [ADDR]:PORT)")
            })?;
            if a.to_ipv4_mapped().is_some() {
                return Err(invalid(
                    "address",
                    addr,
                    "an IPv4-mapped address; write the IPv4 address",
                ));
            }
            (Some(IpAddr::V6(a)), port)
        } else {
            match target.rsplit_once(':') {
                Some((addr, port)) => {
                    let a: Ipv4Addr = addr.parse().map_err(|_| {
                        invalid(
                            "address",
                            addr,
                            "not an IPv4 address (an IPv6 one is written [ADDR]:PORT)",
                        )
                    })?;
                    (Some(IpAddr::V4(a)), port)
                }
                None => (None, target),
            }
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => p,
            _ => return Err(invalid("port", port, "not a port number (1-65535)")),
        };
        let mut c = Connection {
            direction,
            protocol,
            address,
            port,
            uid: None,
            gid: None,
            iface: None,
        };
        for option in parts {
            let (key, value) = option
                .split_once('=')
                .ok_or_else(|| ConnectionError::Option {
                    spec: spec.to_string(),
                    option: option.to_string(),
                    reason: "expected uid=N, gid=N or iface=NAME",
                })?;
            let twice = |set: bool| {
                if set {
                    Err(ConnectionError::Option {
                        spec: spec.to_string(),
                        option: key.to_string(),
                        reason: "given twice",
                    })
                } else {
                    Ok(())
                }
            };
            let id = |field: &'static str| {
                if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
                    value
                        .parse::<u32>()
                        .map_err(|_| invalid(field, value, "out of range (0-4294967295)"))
                } else {
                    Err(invalid(field, value, "not a decimal number"))
                }
            };
            match key {
                "uid" => {
                    twice(c.uid.is_some())?;
                    c.uid = Some(id("uid")?);
                }
                "gid" => {
                    twice(c.gid.is_some())?;
                    c.gid = Some(id("gid")?);
                }
                "iface" => {
                    twice(c.iface.is_some())?;
                    if !valid_iface(value) {
                        return Err(invalid(
                            "iface",
                            value,
                            "not an interface name (1-15 of A-Z a-z 0-9 . _ - @)",
                        ));
                    }
                    c.iface = Some(value.to_string());
                }
                _ => {
                    return Err(ConnectionError::Option {
                        spec: spec.to_string(),
                        option: key.to_string(),
                        reason: "unknown option (uid, gid or iface)",
                    })
                }
            }
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Connection {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn specs_parse_and_round_trip() {
        let c = parse("outbound:tcp:10.0.0.5:5432");
        assert_eq!(
            c,
            Connection {
                direction: Direction::Outbound,
                protocol: Protocol::Tcp,
                address: Some("10.0.0.5".parse().expect("ip")),
                port: 5432,
                uid: None,
                gid: None,
                iface: None,
            }
        );
        let c = parse("inbound:tcp:8080");
        assert_eq!(
            (c.direction, c.address, c.port),
            (Direction::Inbound, None, 8080)
        );
        let c = parse("outbound:udp:10.96.0.10:53,uid=1000");
        assert_eq!(
            (c.protocol, c.uid, c.gid),
            (Protocol::Udp, Some(1000), None)
        );
        let c = parse("outbound:tcp:[fd00::5]:443,iface=lo,gid=7,uid=1337");
        assert_eq!(c.address, Some("fd00::5".parse().expect("ip")));
        assert_eq!(
            (c.uid, c.gid, c.iface.as_deref()),
            (Some(1337), Some(7), Some("lo"))
        );
        // Display is canonical (options in a fixed order) and parses back to the same connection.
        assert_eq!(
            c.to_string(),
            "outbound:tcp:[fd00::5]:443,uid=1337,gid=7,iface=lo"
        );
        for spec in [
            "outbound:tcp:10.0.0.5:5432",
            "inbound:tcp:8080",
            "outbound:udp:10.96.0.10:53,uid=1000",
            "outbound:tcp:[fd00::5]:443,uid=1337,gid=7,iface=lo",
            "inbound:udp:[::1]:1,iface=eth1",
        ] {
            assert_eq!(parse(spec).to_string(), spec);
            assert_eq!(parse(&parse(spec).to_string()), parse(spec));
        }
    }

    #[test]
    fn defaults() {
        let out = parse("outbound:tcp:443");
        assert_eq!(out.address_or_default(), IpAddr::V4(PEER_V4));
        assert_eq!(out.iface_or_default(), "eth0");
        let p = out.packet();
        assert_eq!(p.owner, Some((1000, 1000)));
        assert_eq!((p.oif.as_deref(), p.iif.as_deref()), (Some("eth0"), None));
        assert_eq!(p.src, IpAddr::V4(POD_V4));
        let lo = parse("outbound:tcp:127.0.0.6:8080");
        assert_eq!(lo.iface_or_default(), "lo");
        assert_eq!(lo.packet().src, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(parse("outbound:tcp:[::1]:8080").iface_or_default(), "lo");
        let own = parse("outbound:tcp:192.0.2.2:8080");
        assert_eq!(own.iface_or_default(), "eth0");
        assert_eq!(own.packet().looped_back(), None);
        // Another address reached over lo is one of the pod's own: the kernel sends from it.
        let own = parse("outbound:tcp:10.10.0.1:8080,uid=1337,iface=lo").packet();
        assert_eq!(own.src, "10.10.0.1".parse::<IpAddr>().expect("ip"));
        let back = own.looped_back().expect("leaves on lo");
        assert_eq!(
            (
                back.iif.as_deref(),
                back.oif,
                back.owner,
                back.src,
                back.dst
            ),
            (Some("lo"), None, None, own.src, own.dst)
        );
        let back = lo.packet().looped_back().expect("leaves on lo");
        assert_eq!(back.src, IpAddr::V4(Ipv4Addr::LOCALHOST));
        let inb = parse("inbound:tcp:8080,uid=1337");
        assert_eq!(inb.address_or_default(), IpAddr::V4(POD_V4));
        assert_eq!(inb.iface_or_default(), "eth0");
        let p = inb.packet();
        assert_eq!(p.owner, None, "inbound ignores uid/gid");
        assert_eq!((p.iif.as_deref(), p.oif), (Some("eth0"), None));
        assert_eq!(p.src, IpAddr::V4(PEER_V4));
        assert!(parse("inbound:tcp:[fd00::2]:80").is_ipv6());
    }

    #[test]
    fn errors_name_the_spec_and_the_field() {
        let err = |s: &str| s.parse::<Connection>().expect_err(s).to_string();
        for (spec, needle) in [
            ("outbound", "expected DIRECTION:PROTOCOL"),
            ("sideways:tcp:80", "invalid direction \"sideways\""),
            ("outbound:icmp:80", "invalid protocol \"icmp\""),
            ("outbound:tcp:10.0.0:80", "invalid address \"10.0.0\""),
            ("outbound:tcp:fd00::5:80", "invalid address \"fd00::5\""),
            ("outbound:tcp:[fd00::5:80", "expected DIRECTION"),
            ("outbound:tcp:[::ffff:1.2.3.4]:80", "IPv4-mapped"),
            ("outbound:tcp:0", "invalid port \"0\""),
            ("outbound:tcp:65536", "invalid port \"65536\""),
            ("outbound:tcp:+80", "invalid port \"+80\""),
            ("outbound:tcp:80,uid=x", "invalid uid \"x\""),
            (
                "outbound:tcp:80,gid=99999999999",
                "invalid gid \"99999999999\"",
            ),
            ("outbound:tcp:80,iface=a/b", "invalid iface \"a/b\""),
            ("outbound:tcp:80,iface=", "invalid iface \"\""),
            ("outbound:tcp:80,uid=1,uid=2", "option \"uid\": given twice"),
            ("outbound:tcp:80,mark=1", "option \"mark\": unknown option"),
            ("outbound:tcp:80,lo", "option \"lo\""),
        ] {
            let e = err(spec);
            assert!(e.contains(&format!("{spec:?}")), "{e}");
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }
}
