//! What Istio reads from the pod's surroundings: interface addresses (IPv6 enablement and host IP, Istio's
//! `EnableIPv6` and `getLocalIP`), `/etc/resolv.conf` (DNS servers, its `dns.go`) and `/etc/passwd` (`$ENVOY_USER`'s uid).
//!
//! The reading is behind [`System`] so that resolution is testable, and each parser is a pure function.
//! `/etc/passwd` is parsed here rather than through `getpwnam`, because the binary is linked statically
//! and NSS does not work there.

use std::net::IpAddr;

/// Access to the surroundings; [`HostSystem`] reads the real ones.
pub trait System {
    /// The addresses of the current network namespace's interfaces, in the kernel's dump order.
    fn interface_addrs(&self) -> Result<Vec<IpAddr>, String>;
    /// The text of `/etc/resolv.conf`.
    fn resolv_conf(&self) -> std::io::Result<String>;
    /// The text of `/etc/passwd`.
    fn passwd(&self) -> std::io::Result<String>;
}

/// The real surroundings of this process.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSystem;

impl System for HostSystem {
    fn interface_addrs(&self) -> Result<Vec<IpAddr>, String> {
        let addrs =
            nix::ifaddrs::getifaddrs().map_err(|e| format!("listing interface addresses: {e}"))?;
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for ifa in addrs {
            let Some(addr) = ifa.address else { continue };
            if let Some(sin) = addr.as_sockaddr_in() {
                v4.push(IpAddr::V4(sin.ip()));
            } else if let Some(sin6) = addr.as_sockaddr_in6() {
                v6.push(IpAddr::V6(sin6.ip()));
            }
        }
        // Go's net.InterfaceAddrs sees the RTM_GETADDR dump, where every IPv4 address precedes every
        // IPv6 one; getifaddrs groups by interface, so restore that order explicitly.
        v4.extend(v6);
        Ok(v4)
    }

    fn resolv_conf(&self) -> std::io::Result<String> {
        std::fs::read_to_string("/etc/resolv.conf")
    }

    fn passwd(&self) -> std::io::Result<String> {
        std::fs::read_to_string("/etc/passwd")
    }
}

/// The outcome of Istio's IPv6 detection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detected {
    /// Whether IPv6 rules are wanted.
    pub ipv6: bool,
    /// The host IP: the first usable address.
    pub host_ip: IpAddr,
}

/// IPv4-mapped IPv6 addresses count as IPv4 here, as Go's `netip.Addr.Unmap` makes them.
fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether Istio skips `ip` when it looks for the host IP: loopback, link-local unicast and link-local
/// multicast (and the unspecified address, which an interface never really has).
fn skipped(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
                || (a.octets()[0] == 224 && a.octets()[1] == 0 && a.octets()[2] == 0)
        }
        IpAddr::V6(a) => {
            let s = a.segments();
            a.is_loopback()
                || a.is_unspecified()
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xff0f) == 0xff02
        }
    }
}

/// Istio's IPv6 detection (`EnableIPv6`) over `addrs` in dump order. `None` when no usable address exists
/// (Istio then fails with "no valid local IP address found").
pub fn detect_ipv6(addrs: &[IpAddr], dual_stack: bool) -> Option<Detected> {
    let mut usable = addrs.iter().map(|a| unmap(*a)).filter(|a| !skipped(*a));
    let host_ip = usable.next()?;
    let ipv6 = if dual_stack {
        host_ip.is_ipv6() || usable.any(|a| a.is_ipv6())
    } else {
        host_ip.is_ipv6()
    };
    Some(Detected { ipv6, host_ip })
}

/// The nameservers of a resolv.conf text, in order, as miekg/dns reads them: the second field of every
/// `nameserver` line; entries that are not IP addresses are dropped (and returned separately so the
/// caller can warn). IPv4-mapped addresses become IPv4 (Go's `To4`). Scoped addresses (`fe80::1%eth0`)
/// are dropped too: they cannot be written as an iptables address.
pub fn parse_resolv_conf(text: &str) -> (Vec<IpAddr>, Vec<String>) {
    let mut servers = Vec::new();
    let mut dropped = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        if fields.next() != Some("nameserver") {
            continue;
        }
        let Some(entry) = fields.next() else { continue };
        match entry.parse::<IpAddr>() {
            Ok(ip) => servers.push(unmap(ip)),
            Err(_) => dropped.push(entry.to_string()),
        }
    }
    (servers, dropped)
}

/// The uid of `user` in a passwd text, if the user exists and its uid is numeric.
pub fn uid_from_passwd(text: &str, user: &str) -> Option<u32> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let _password = fields.next()?;
            let uid = fields.next()?;
            (name == user).then(|| uid.parse().ok()).flatten()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ips(list: &[&str]) -> Vec<IpAddr> {
        list.iter().map(|s| s.parse().expect("ip")).collect()
    }

    #[test]
    fn ipv6_detection_first_usable_address_decides() {
        let d =
            detect_ipv6(&ips(&["127.0.0.1", "10.0.0.5", "fd00::5", "::1"]), false).expect("found");
        assert_eq!(
            d,
            Detected {
                ipv6: false,
                host_ip: "10.0.0.5".parse().expect("ip")
            }
        );
        let d = detect_ipv6(&ips(&["127.0.0.1", "fe80::1", "fd00::5"]), false).expect("found");
        assert!(d.ipv6);
        // Link-local unicast and multicast, loopback: skipped.
        let d = detect_ipv6(
            &ips(&["169.254.1.1", "224.0.0.1", "ff02::1", "2001:db8::1"]),
            false,
        )
        .expect("found");
        assert!(d.ipv6);
        // A mapped IPv4 address is IPv4.
        let d = detect_ipv6(&ips(&["::ffff:10.1.1.1", "2001:db8::1"]), false).expect("found");
        assert!(!d.ipv6);
        assert_eq!(d.host_ip, "10.1.1.1".parse::<IpAddr>().expect("ip"));
        assert_eq!(
            detect_ipv6(&ips(&["127.0.0.1", "::1", "fe80::2"]), false),
            None
        );
        assert_eq!(detect_ipv6(&[], true), None);
    }

    #[test]
    fn ipv6_detection_dual_stack_any_ipv6() {
        let d = detect_ipv6(&ips(&["10.0.0.5", "fd00::5"]), true).expect("found");
        assert_eq!(
            d,
            Detected {
                ipv6: true,
                host_ip: "10.0.0.5".parse().expect("ip")
            }
        );
        let d = detect_ipv6(&ips(&["10.0.0.5", "fe80::5"]), true).expect("found");
        assert!(!d.ipv6);
        // Istio's tests give a namespace 240.240.240.240/32 on lo.
        let d = detect_ipv6(&ips(&["240.240.240.240"]), true).expect("found");
        assert!(!d.ipv6);
    }

    #[test]
    fn resolv_conf_nameservers() {
        let text = "# comment\nsearch a.svc.cluster.local\nnameserver 10.96.0.10\nnameserver  ::127.0.0.53 # x\n\
                    nameserver bogus\nnameserver fe80::1%eth0\nnameserver ::ffff:1.2.3.4\noptions ndots:5\nnameserver\n";
        let (servers, dropped) = parse_resolv_conf(text);
        assert_eq!(servers, ips(&["10.96.0.10", "::7f00:35", "1.2.3.4"]));
        assert_eq!(
            dropped,
            vec!["bogus".to_string(), "fe80::1%eth0".to_string()]
        );
    }

    #[test]
    fn passwd_lookup() {
        let text = "root:x:0:0:root:/root:/bin/bash\n#istio-proxy:x:1:1::/:/bin/false\nistio-proxy:x:1337:1337::/:/bin/false\nodd:x:abc:1::/:\n";
        assert_eq!(uid_from_passwd(text, "istio-proxy"), Some(1337));
        assert_eq!(uid_from_passwd(text, "root"), Some(0));
        assert_eq!(uid_from_passwd(text, "odd"), None);
        assert_eq!(uid_from_passwd(text, "nobody"), None);
    }
}
