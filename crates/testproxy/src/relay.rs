//! Connecting to a destination (optionally from a chosen source address) and relaying bytes both ways,
//! with a bounded buffer per direction and an idle bound on every read and write.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use nix::sys::socket::{setsockopt, sockopt};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

use crate::Error;

/// Bytes buffered per direction of a relayed connection.
pub const BUFFER_BYTES: usize = 16 * 1024;
/// A relayed connection with no bytes either way for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// Connecting to a destination gives up after this long.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Envoy's inbound passthrough source (Istio's `InboundPassthroughBindIpv4`/`Ipv6` in
/// `pilot/pkg/networking/core/listener_address.go`): the interception rules let traffic from it over
/// `lo` through (`-A ISTIO_OUTPUT -s 127.0.0.6/32 -o lo -j RETURN`), so the proxy's own connection to the
/// pod's address is not captured again. pilot-agent's app probes use it too (`UpstreamLocalAddressIPv4`).
pub fn passthrough_source(destination: IpAddr) -> IpAddr {
    match destination {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 6)),
    }
}

/// Connects to `addr` within `timeout`, from `source` (port chosen by the kernel) when given.
pub async fn connect(
    addr: SocketAddr,
    source: Option<IpAddr>,
    timeout: Duration,
) -> Result<TcpStream, Error> {
    let err = |source| Error::Connect { addr, source };
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(err)?;
    if let Some(ip) = source {
        // ::6 exists only once iptables-init added it (with IPv6 rules); freebind lets the bind happen
        // before then, and the connection then fails as it would for Envoy.
        setsockopt(&socket, sockopt::IpFreebind, &true).map_err(|e| err(e.into()))?;
        socket.bind(SocketAddr::new(ip, 0)).map_err(err)?;
    }
    match tokio::time::timeout(timeout, socket.connect(addr)).await {
        Ok(r) => r.map_err(err),
        Err(_) => Err(Error::Timeout {
            what: format!("connecting to {addr}"),
            after: timeout,
        }),
    }
}

/// Copies `from` to `to` until end of stream, then shuts `to`'s write side down. A read or a write
/// that waits longer than `idle` ends it with `TimedOut`.
async fn pump<R, W>(mut from: R, mut to: W, idle: Duration) -> io::Result<u64>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; BUFFER_BYTES];
    let mut total = 0u64;
    let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "idle");
    loop {
        let n = tokio::time::timeout(idle, from.read(&mut buf))
            .await
            .map_err(|_| timed_out())??;
        if n == 0 {
            to.shutdown().await?;
            return Ok(total);
        }
        tokio::time::timeout(idle, to.write_all(&buf[..n]))
            .await
            .map_err(|_| timed_out())??;
        total += n as u64;
    }
}

/// Relays `a` and `b` both ways until both directions ended; an error in either closes both.
pub async fn relay(a: TcpStream, b: TcpStream, idle: Duration) -> io::Result<(u64, u64)> {
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    tokio::try_join!(pump(ar, bw, idle), pump(br, aw, idle))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn relays_both_ways_and_passes_the_half_close_on() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (server_addr, front_addr) = (server.local_addr().unwrap(), front.local_addr().unwrap());
        tokio::spawn(async move {
            let (down, _) = front.accept().await.unwrap();
            let up = connect(server_addr, None, CONNECT_TIMEOUT).await.unwrap();
            relay(down, up, IDLE_TIMEOUT).await.unwrap();
        });
        let mut client = TcpStream::connect(front_addr).await.unwrap();
        let (mut s, _) = server.accept().await.unwrap();
        client.write_all(b"ping").await.unwrap();
        client.shutdown().await.unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"ping");
        s.write_all(b"pong").await.unwrap();
        drop(s);
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong");
    }

    #[tokio::test]
    async fn an_idle_relay_is_closed_after_its_bound() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (server_addr, front_addr) = (server.local_addr().unwrap(), front.local_addr().unwrap());
        let relayed = tokio::spawn(async move {
            let (down, _) = front.accept().await.unwrap();
            let up = connect(server_addr, None, CONNECT_TIMEOUT).await.unwrap();
            relay(down, up, Duration::from_millis(200)).await
        });
        let _client = TcpStream::connect(front_addr).await.unwrap();
        let _s = server.accept().await.unwrap();
        let err = tokio::time::timeout(Duration::from_secs(60), relayed)
            .await
            .expect("the idle bound did not end the relay")
            .unwrap()
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn connecting_from_the_passthrough_source_uses_it() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        let _c = connect(addr, Some(passthrough_source(addr.ip())), CONNECT_TIMEOUT)
            .await
            .unwrap();
        let (_, peer) = server.accept().await.unwrap();
        assert_eq!(peer.ip(), IpAddr::V4(Ipv4Addr::new(127, 0, 0, 6)));
    }
}
