//! Tiny network helper for the netfilter end-to-end tests; run inside a namespace (`ip netns exec`),
//! optionally under another uid (`setpriv`). Prints one line per event on stdout, so a test can wait for
//! `READY` and then read what happened.
//!
//! ```text
//! nettool listen-tcp ADDR [--transparent] [--timeout-ms N]   READY, then ACCEPTED peer=.. local=.. orig=..
//! nettool listen-udp ADDR [--timeout-ms N]                   READY, then RECEIVED peer=.. data=..
//! nettool connect-tcp ADDR [--timeout-ms N]                  CONNECTED local=.. reply=..   (exit 1 if refused)
//! nettool send-udp ADDR [--timeout-ms N]                     REPLY peer=.. data=..         (exit 1 if none)
//! nettool serve NAME tcp:ADDR|udp:ADDR... [--transparent] [--timeout-ms N]
//!                                                            READY, then one line per event
//! ```
//! A listener accepts one connection (or datagram), answers `hello` and exits; with no event before the
//! timeout it prints `TIMEOUT` and exits 2.
//!
//! `serve` listens on every address given until the timeout (then exits 0), and answers each connection
//! or datagram with `NAME port=<listening port> local=<local address> orig=<original destination>`, so
//! the client alone can tell which of several servers its traffic reached and where it was going.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use nix::sys::socket::{
    bind, getsockopt, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag,
    SockType, SockaddrStorage,
};

fn family(addr: &SocketAddr) -> AddressFamily {
    if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

/// The original destination of a NATed (REDIRECT) connection, or `-` when there is none.
fn original_dst(stream: &TcpStream) -> String {
    if let Ok(sa) = getsockopt(stream, sockopt::OriginalDst) {
        let ip = std::net::Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr));
        return SocketAddr::new(ip.into(), u16::from_be(sa.sin_port)).to_string();
    }
    if let Ok(sa) = getsockopt(stream, sockopt::Ip6tOriginalDst) {
        let ip = std::net::Ipv6Addr::from(sa.sin6_addr.s6_addr);
        return SocketAddr::new(ip.into(), u16::from_be(sa.sin6_port)).to_string();
    }
    "-".to_string()
}

fn say(line: &str) {
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn listen_tcp(addr: SocketAddr, transparent: bool, timeout: Duration) -> Result<i32> {
    let fd: OwnedFd = socket(
        family(&addr),
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if transparent {
        // TPROXY delivers connections for foreign addresses; only a transparent socket may accept them.
        setsockopt(&fd, sockopt::IpTransparent, &true)?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).with_context(|| format!("bind {addr}"))?;
    listen(&fd, Backlog::new(16)?)?;
    let listener = TcpListener::from(fd);
    listener.set_nonblocking(true)?;
    say("READY");
    let deadline = Instant::now() + timeout;
    loop {
        match listener.accept() {
            Ok((mut stream, peer)) => {
                let local = stream.local_addr()?;
                say(&format!(
                    "ACCEPTED peer={peer} local={local} orig={}",
                    original_dst(&stream)
                ));
                stream.set_nonblocking(false)?;
                let _ = stream.write_all(b"hello");
                return Ok(0);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        if Instant::now() >= deadline {
            say("TIMEOUT");
            return Ok(2);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits for one datagram on `sock` and says it as `{what} peer=… data=…`; returns its sender.
fn receive(sock: &UdpSocket, what: &str) -> std::io::Result<SocketAddr> {
    let mut buf = [0u8; 512];
    let (n, peer) = sock.recv_from(&mut buf)?;
    say(&format!(
        "{what} peer={peer} data={}",
        String::from_utf8_lossy(&buf[..n])
    ));
    Ok(peer)
}

fn listen_udp(addr: SocketAddr, timeout: Duration) -> Result<i32> {
    let sock = UdpSocket::bind(addr).with_context(|| format!("bind {addr}"))?;
    sock.set_read_timeout(Some(timeout))?;
    say("READY");
    match receive(&sock, "RECEIVED") {
        Ok(peer) => {
            let _ = sock.send_to(b"hello", peer);
            Ok(0)
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            say("TIMEOUT");
            Ok(2)
        }
        Err(e) => Err(e.into()),
    }
}

fn connect_tcp(addr: SocketAddr, timeout: Duration) -> Result<i32> {
    match TcpStream::connect_timeout(&addr, timeout) {
        Ok(mut stream) => {
            stream.set_read_timeout(Some(timeout))?;
            let mut reply = String::new();
            let _ = stream.read_to_string(&mut reply);
            say(&format!(
                "CONNECTED local={} reply={reply}",
                stream.local_addr()?
            ));
            Ok(0)
        }
        Err(e) => {
            say(&format!("FAILED {e}"));
            Ok(1)
        }
    }
}

fn send_udp(addr: SocketAddr, timeout: Duration) -> Result<i32> {
    let any: SocketAddr = if addr.is_ipv4() {
        "0.0.0.0:0".parse()?
    } else {
        "[::]:0".parse()?
    };
    let sock = UdpSocket::bind(any)?;
    sock.set_read_timeout(Some(timeout))?;
    sock.send_to(b"query", addr)?;
    match receive(&sock, "REPLY") {
        Ok(_) => Ok(0),
        Err(e) => {
            say(&format!("FAILED {e}"));
            Ok(1)
        }
    }
}

/// A socket bound for `serve`: an IPv6 one is IPv6-only so the same port can also be served over IPv4.
fn bound(addr: SocketAddr, kind: SockType, transparent: bool) -> Result<OwnedFd> {
    let fd: OwnedFd = socket(family(&addr), kind, SockFlag::SOCK_CLOEXEC, None)?;
    setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    if addr.is_ipv6() {
        setsockopt(&fd, sockopt::Ipv6V6Only, &true)?;
    }
    if transparent {
        setsockopt(&fd, sockopt::IpTransparent, &true)?;
    }
    bind(fd.as_raw_fd(), &SockaddrStorage::from(addr)).with_context(|| format!("bind {addr}"))?;
    Ok(fd)
}

/// Answers every connection on `listener` with the server's name, port and the connection's destination.
fn serve_tcp(name: &str, port: u16, listener: &TcpListener) -> Result<()> {
    loop {
        let (mut stream, peer) = listener.accept()?;
        let local = stream.local_addr()?;
        let orig = original_dst(&stream);
        say(&format!(
            "ACCEPTED name={name} peer={peer} local={local} orig={orig}"
        ));
        let _ =
            stream.write_all(format!("{name} port={port} local={local} orig={orig}").as_bytes());
    }
}

/// Answers every datagram on `sock` with the server's name, port and its own address.
fn serve_udp(name: &str, port: u16, sock: &UdpSocket) -> Result<()> {
    let local = sock.local_addr()?;
    loop {
        let peer = receive(sock, &format!("RECEIVED name={name} local={local}"))?;
        let _ = sock.send_to(
            format!("{name} port={port} local={local} orig=-").as_bytes(),
            peer,
        );
    }
}

fn serve(name: &str, items: &[String], transparent: bool, timeout: Duration) -> Result<i32> {
    let mut servers: Vec<Box<dyn FnOnce() -> Result<()> + Send>> = Vec::new();
    for item in items {
        let (proto, addr) = item
            .split_once(':')
            .with_context(|| format!("serve item {item}: want tcp:ADDR or udp:ADDR"))?;
        let addr: SocketAddr = addr.parse().with_context(|| format!("address {addr}"))?;
        let name = name.to_string();
        match proto {
            "tcp" => {
                let fd = bound(addr, SockType::Stream, transparent)?;
                listen(&fd, Backlog::new(64)?)?;
                let listener = TcpListener::from(fd);
                servers.push(Box::new(move || serve_tcp(&name, addr.port(), &listener)));
            }
            "udp" => {
                let sock = UdpSocket::from(bound(addr, SockType::Datagram, false)?);
                servers.push(Box::new(move || serve_udp(&name, addr.port(), &sock)));
            }
            other => bail!("serve item {item}: unknown protocol {other}"),
        }
    }
    // Every socket is bound before READY, so a client started after it cannot be refused.
    say("READY");
    for server in servers {
        std::thread::spawn(move || {
            if let Err(e) = server() {
                say(&format!("ERROR {e}"));
            }
        });
    }
    std::thread::sleep(timeout);
    Ok(0)
}

/// The options every command takes, and the other arguments in order.
struct Options {
    timeout: Duration,
    transparent: bool,
    positional: Vec<String>,
}

fn options(args: &[String]) -> Result<Options> {
    let mut o = Options {
        timeout: Duration::from_secs(5),
        transparent: false,
        positional: Vec::new(),
    };
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        match a.as_str() {
            "--transparent" => o.transparent = true,
            "--timeout-ms" => {
                let ms: u64 = rest.next().context("--timeout-ms needs a value")?.parse()?;
                o.timeout = Duration::from_millis(ms);
            }
            _ => o.positional.push(a.clone()),
        }
    }
    Ok(o)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(cmd), Some(addr)) = (args.first(), args.get(1)) else {
        bail!("usage: nettool listen-tcp|listen-udp|connect-tcp|send-udp ADDR [--transparent] [--timeout-ms N]");
    };
    if cmd == "serve" {
        return serve_main(addr, &args[2..]);
    }
    let addr: SocketAddr = addr.parse().with_context(|| format!("address {addr}"))?;
    let Options {
        timeout,
        transparent,
        positional,
    } = options(&args[2..])?;
    if let Some(other) = positional.first() {
        bail!("unknown argument {other}");
    }
    let code = match cmd.as_str() {
        "listen-tcp" => listen_tcp(addr, transparent, timeout)?,
        "listen-udp" => listen_udp(addr, timeout)?,
        "connect-tcp" => connect_tcp(addr, timeout)?,
        "send-udp" => send_udp(addr, timeout)?,
        other => bail!("unknown command {other}"),
    };
    std::process::exit(code);
}

/// `nettool serve NAME ITEM... [--transparent] [--timeout-ms N]`.
fn serve_main(name: &str, rest: &[String]) -> Result<()> {
    let o = options(rest)?;
    let code = serve(name, &o.positional, o.transparent, o.timeout)?;
    std::process::exit(code);
}
