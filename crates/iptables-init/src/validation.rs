//! `--run-validation`: prove interception with a real connection (Istio's
//! `tools/istio-iptables/pkg/validation`).
//!
//! Listeners on `127.0.0.1:P` and `127.0.0.1:Z` (`[::1]` for IPv6) record the original destination
//! (`SO_ORIGINAL_DST`) of every accepted connection; once a second a client connects from `127.0.0.1:0`
//! to `127.0.0.6:<probe port>` (`[::1]:0` → `[::6]`). Only the interception rules can deliver that
//! connection to a listener, so one accepted connection whose original port is the probe port proves
//! them. Everything is bounded by one overall timeout.
//!
//! **Run it as the proxy uid** (`-u`, 1337): the probe is captured by the rule
//! `-o lo ! -d 127.0.0.1/32 ... --uid-owner <proxy uid> -j ISTIO_IN_REDIRECT`; under any other uid the
//! `! --uid-owner ... -j RETURN` rule matches first and the probe is refused until the timeout. Istio's
//! CNI template runs its `istio-validation` container as uid/gid 1337 for this reason. The client binds
//! `127.0.0.1` explicitly because the kernel would otherwise pick `127.0.0.6` as the source, which the
//! `-s 127.0.0.6/32 -j RETURN` rule exempts.

use std::io::{ErrorKind, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::socket::{
    bind, connect, getsockopt, listen, setsockopt, socket, sockopt, AddressFamily, Backlog,
    SockFlag, SockType, SockaddrStorage,
};
use tracing::{debug, info, warn};

/// What validation needs to know.
#[derive(Debug, Clone)]
pub struct ValidationOptions {
    /// The outbound listener port (`-p`).
    pub proxy_port: u16,
    /// The inbound capture port (`-z`).
    pub inbound_port: u16,
    /// `--iptables-probe-port`.
    pub probe_port: u16,
    /// `--probe-timeout`.
    pub timeout: Duration,
    /// Probe over IPv6 (the detected host IP is IPv6).
    pub ipv6: bool,
}

/// Why validation failed (exit status 126).
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// Neither listener could be opened.
    #[error("iptables validation failed: no listener available: {0}")]
    NoListener(String),
    /// No probe connection was redirected within the timeout.
    #[error(
        "iptables validation failed: no connection to {probe} was redirected to {listeners} within {timeout:?} \
         (last probe: {last_probe}); the interception rules are missing or wrong, or validation is not running \
         as the proxy uid (it runs as uid {uid})"
    )]
    Timeout {
        probe: SocketAddr,
        listeners: String,
        timeout: Duration,
        last_probe: String,
        uid: u32,
    },
}

/// A listening socket with `SO_REUSEADDR` and `SO_REUSEPORT` (so a proxy may already hold the port).
fn listener(addr: SocketAddr) -> nix::Result<TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd: OwnedFd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    setsockopt(&fd, sockopt::ReusePort, &true)?;
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr))?;
    listen(&fd, Backlog::new(64).unwrap_or(Backlog::MAXCONN))?;
    let l = TcpListener::from(fd);
    l.set_nonblocking(true).map_err(|_| nix::Error::EINVAL)?;
    Ok(l)
}

/// One probe: connect from `src:0` to `dst`, close at once. Returns how it went, for the log.
fn probe(src: IpAddr, dst: SocketAddr) -> String {
    let family = match dst {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let attempt = || -> nix::Result<()> {
        let fd: OwnedFd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
        bind(
            fd.as_raw_fd(),
            &SockaddrStorage::from(SocketAddr::new(src, 0)),
        )?;
        // Loopback: the connect completes or is refused at once, no timeout needed.
        connect(fd.as_raw_fd(), &SockaddrStorage::from(dst))
    };
    match attempt() {
        Ok(()) => "connected".to_string(),
        Err(e) => e.desc().to_string(),
    }
}

/// The original destination port of a redirected connection.
fn original_port(stream: &TcpStream, ipv6: bool) -> nix::Result<u16> {
    if ipv6 {
        let sa = getsockopt(stream, sockopt::Ip6tOriginalDst)?;
        Ok(u16::from_be(sa.sin6_port))
    } else {
        let sa = getsockopt(stream, sockopt::OriginalDst)?;
        Ok(u16::from_be(sa.sin_port))
    }
}

/// Runs the validation.
pub fn run(opts: &ValidationOptions) -> Result<(), ValidationError> {
    let deadline = Instant::now() + opts.timeout;
    let (local, dst): (IpAddr, IpAddr) = if opts.ipv6 {
        (
            Ipv6Addr::LOCALHOST.into(),
            Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6).into(),
        )
    } else {
        (
            Ipv4Addr::LOCALHOST.into(),
            Ipv4Addr::new(127, 0, 0, 6).into(),
        )
    };
    let probe_addr = SocketAddr::new(dst, opts.probe_port);

    let mut ports = vec![opts.proxy_port];
    if opts.inbound_port != opts.proxy_port {
        ports.push(opts.inbound_port);
    }
    let mut listeners = Vec::new();
    let mut failures = Vec::new();
    for port in ports {
        let addr = SocketAddr::new(local, port);
        match listener(addr) {
            Ok(l) => listeners.push((addr, l)),
            Err(e) => {
                warn!("validation: cannot listen on {addr}: {}", e.desc());
                failures.push(format!("{addr}: {}", e.desc()));
            }
        }
    }
    if listeners.is_empty() {
        return Err(ValidationError::NoListener(failures.join("; ")));
    }
    let names = listeners
        .iter()
        .map(|(a, _)| a.to_string())
        .collect::<Vec<_>>()
        .join(" or ");

    let mut next_probe = Instant::now();
    let mut last_probe = "none sent".to_string();
    loop {
        let now = Instant::now();
        if now >= next_probe {
            last_probe = probe(local, probe_addr);
            debug!("validation probe to {probe_addr}: {last_probe}");
            next_probe = now + Duration::from_secs(1);
        }
        for (addr, l) in &listeners {
            loop {
                match l.accept() {
                    Ok((mut stream, peer)) => {
                        let _ = stream.set_nonblocking(false);
                        match original_port(&stream, opts.ipv6) {
                            Ok(port) => {
                                // Istio's listener answers with the original port; harmless, kept.
                                let _ = stream.write_all(port.to_string().as_bytes());
                                debug!("validation: {addr} accepted {peer}, original port {port}");
                                if port == opts.probe_port {
                                    info!("iptables validation passed: {probe_addr} was redirected to {addr}");
                                    return Ok(());
                                }
                            }
                            Err(e) => debug!("validation: {addr} accepted {peer} without original destination: {}", e.desc()),
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => {
                        debug!("validation: accept on {addr}: {e}");
                        break;
                    }
                }
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(ValidationError::Timeout {
                probe: probe_addr,
                listeners: names,
                timeout: opts.timeout,
                last_probe,
                uid: nix::unistd::geteuid().as_raw(),
            });
        }
        std::thread::sleep(Duration::from_millis(10).min(deadline - now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_out_without_rules() {
        // No rules in this namespace's loopback path: the probe to 127.0.0.6 is refused, never redirected.
        // Ports chosen so nothing else in the test run holds them.
        let opts = ValidationOptions {
            proxy_port: 47_001,
            inbound_port: 47_006,
            probe_port: 47_002,
            timeout: Duration::from_millis(300),
            ipv6: false,
        };
        let start = Instant::now();
        let err = run(&opts).expect_err("no rules, no redirect");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "bounded by the timeout"
        );
        let msg = err.to_string();
        assert!(
            msg.contains("127.0.0.6:47002") && msg.contains("proxy uid"),
            "{msg}"
        );
    }
}
