//! Where a captured connection was going: `SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST` (the conntrack
//! entry's original tuple after REDIRECT), or the socket's own local address under TPROXY, which does not
//! rewrite the destination.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use nix::sys::socket::{getsockopt, sockopt};
use tokio::net::TcpStream;

/// The original destination of `stream`, whose local address is `local`.
pub fn original_dst(stream: &TcpStream, local: SocketAddr) -> SocketAddr {
    let found = match local {
        SocketAddr::V4(_) => getsockopt(stream, sockopt::OriginalDst).ok().map(|sa| {
            SocketAddr::new(
                Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)).into(),
                u16::from_be(sa.sin_port),
            )
        }),
        SocketAddr::V6(_) => getsockopt(stream, sockopt::Ip6tOriginalDst).ok().map(|sa| {
            SocketAddr::new(
                Ipv6Addr::from(sa.sin6_addr.s6_addr).into(),
                u16::from_be(sa.sin6_port),
            )
        }),
    };
    // No conntrack entry with a NATed tuple (TPROXY, or no netfilter at all): the local address is where
    // the peer was going.
    found.unwrap_or(local)
}

/// Whether relaying to `original` would come straight back to the listener on `own_port`: the
/// connection was made to the listener itself, not redirected to it.
pub fn is_direct(original: SocketAddr, local: SocketAddr, own_port: u16) -> bool {
    original == local && original.port() == own_port
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_to_the_listener_itself_is_direct_and_a_redirected_one_is_not() {
        let local: SocketAddr = "10.0.0.1:15001".parse().unwrap();
        assert!(is_direct(local, local, 15001));
        assert!(!is_direct("10.0.0.2:80".parse().unwrap(), local, 15001));
        // TPROXY: the local address is the original destination, on the application's port.
        let tproxied: SocketAddr = "10.0.0.1:8080".parse().unwrap();
        assert!(!is_direct(tproxied, tproxied, 15006));
    }

    #[tokio::test]
    async fn without_a_redirect_the_original_destination_is_the_local_address() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        assert_eq!(original_dst(&s, s.local_addr().unwrap()), addr);
        drop(c);
    }
}
