//! The real-traffic checks of interception that the iptables and the native nftables backends share:
//! each sends TCP or UDP through a [`Pair`] whose pod already has the rules of Istio's injected arguments
//! (with the variation the check names) and asserts where the traffic lands.

use crate::netns::{NetNs, Pair};
use crate::nettool::{client, Listener, APP_UID, PROXY_UID};

/// Connects over TCP from `from` (as `uid`, or root) to `target`, which must succeed, and returns the
/// first event of `listener`.
fn connect(from: &NetNs, uid: Option<u32>, target: &str, listener: Listener) -> String {
    let (code, line) = client(from, uid, &["connect-tcp", target]);
    assert_eq!(code, 0, "{target}: {line}");
    listener.event()
}

/// An application's outbound TCP to `target` reaches the outbound listener on `listen` (15001) with its
/// original destination.
fn app_outbound_lands_on(pod: &NetNs, listen: &str, target: &str) {
    let proxy = Listener::start(pod, &["listen-tcp", listen]);
    let ev = connect(pod, Some(APP_UID), target, proxy);
    assert!(ev.contains(&format!("orig={target}")), "{ev}");
}

/// The peer's (`peer_ip`) inbound TCP to `target` reaches the inbound listener on `listen` (15006) with
/// its original destination.
fn peer_inbound_lands_on(p: &Pair, listen: &str, target: &str, peer_ip: &str) {
    let inbound = Listener::start(&p.pod, &["listen-tcp", listen]);
    let ev = connect(&p.peer, None, target, inbound);
    assert!(
        ev.starts_with(&format!("ACCEPTED peer={peer_ip}:"))
            && ev.contains(&format!("orig={target}")),
        "{ev}"
    );
}

/// An application's outbound TCP reaches the outbound listener (15001) with its original destination.
pub fn app_outbound_is_captured(pod: &NetNs) {
    app_outbound_lands_on(pod, "0.0.0.0:15001", "10.10.0.2:8080");
}

/// An application's outbound TCP to `target` reaches the peer's listener on `listen` directly.
pub fn app_outbound_bypasses_the_proxy(p: &Pair, target: &str, listen: &str) {
    let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
    let peer = Listener::start(&p.peer, &["listen-tcp", listen]);
    let ev = connect(&p.pod, Some(APP_UID), target, peer);
    assert!(
        ev.starts_with("ACCEPTED"),
        "{target} did not bypass the proxy: {ev}"
    );
    assert_eq!(proxy.stop(), "", "{target} was captured");
}

/// The application's outbound TCP lands on 15001 and not at the peer; the proxy uid's goes to the peer.
pub fn outbound_of_the_app_is_redirected_and_the_proxy_s_is_not(p: &Pair) {
    let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
    let peer = Listener::start(&p.peer, &["listen-tcp", "10.10.0.2:8080"]);
    let ev = connect(&p.pod, Some(APP_UID), "10.10.0.2:8080", proxy);
    assert!(
        ev.starts_with("ACCEPTED") && ev.contains("orig=10.10.0.2:8080"),
        "{ev}"
    );
    assert_eq!(
        peer.stop(),
        "",
        "the app's connection reached the peer uncaptured"
    );

    let proxy = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15001"]);
    let peer = Listener::start(&p.peer, &["listen-tcp", "10.10.0.2:8080"]);
    let ev = connect(&p.pod, Some(PROXY_UID), "10.10.0.2:8080", peer);
    assert!(ev.starts_with("ACCEPTED peer=10.10.0.1:"), "{ev}");
    assert_eq!(proxy.stop(), "", "the proxy's own connection was captured");
}

/// Inbound TCP to an application port lands on 15006; to an excluded port (15090, one of the injected
/// `-d` ports) it is not redirected.
pub fn inbound_lands_on_15006_and_an_excluded_port_does_not(p: &Pair) {
    peer_inbound_lands_on(p, "0.0.0.0:15006", "10.10.0.1:8080", "10.10.0.2");

    let inbound = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15006"]);
    let direct = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15090"]);
    let ev = connect(&p.peer, None, "10.10.0.1:15090", direct);
    // Accepted on the port the peer dialled: not redirected (no NAT, so the "original" is the same).
    assert!(
        ev.starts_with("ACCEPTED") && ev.contains("local=10.10.0.1:15090"),
        "{ev}"
    );
    assert_eq!(inbound.stop(), "", "an excluded inbound port was captured");
}

/// The injected arguments' values [`the_excluded_cidr_and_port_bypass_the_proxy`] replaces.
pub const EXCLUDED_CIDR: &[(&str, &str)] = &[("-x", "10.10.0.3/32")];
/// The arguments [`the_excluded_cidr_and_port_bypass_the_proxy`] adds to the injected ones.
pub const EXCLUDED_PORT: &[&str] = &["-o", "9090", "--ipv6", "false"];

/// With [`EXCLUDED_CIDR`] and [`EXCLUDED_PORT`]: both bypass the proxy, anything else is still captured.
pub fn the_excluded_cidr_and_port_bypass_the_proxy(p: &Pair) {
    for (target, listen) in [
        ("10.10.0.3:8080", "10.10.0.3:8080"),
        ("10.10.0.2:9090", "10.10.0.2:9090"),
    ] {
        app_outbound_bypasses_the_proxy(p, target, listen);
    }
    // Control: anything else is still captured.
    app_outbound_is_captured(&p.pod);
}

/// The arguments [`dns_to_the_configured_server_lands_on_15053`] adds to the injected ones.
pub const DNS_TO_THE_PEER: &[&str] = &[
    "--ipv6",
    "false",
    "--redirect-dns",
    "--dns-servers",
    "10.10.0.2",
];

/// With [`DNS_TO_THE_PEER`]: the application's query lands on the DNS agent (15053)
/// and its reply appears to come from the server it asked.
pub fn dns_to_the_configured_server_lands_on_15053(p: &Pair) {
    // The DNS agent runs as the proxy uid: its replies then enter conntrack zone 2 (the raw table's CT
    // rule), the zone of the app's NATed query, and are un-NATed on the way back.
    let agent = Listener::start_as(&p.pod, Some(PROXY_UID), &["listen-udp", "127.0.0.1:15053"]);
    let server = Listener::start(&p.peer, &["listen-udp", "10.10.0.2:53"]);
    let (code, line) = client(&p.pod, Some(APP_UID), &["send-udp", "10.10.0.2:53"]);
    let ev = agent.event();
    assert!(ev.starts_with("RECEIVED"), "DNS was not captured: {ev}");
    assert_eq!(code, 0, "no reply: {line}");
    assert!(
        line.contains("peer=10.10.0.2:53"),
        "the reply was not un-NATed: {line}"
    );
    assert_eq!(server.stop(), "", "the query reached the real server");
}

/// The TPROXY routing exists once (`ip rule` fwmark 0x539 to table 133, a local default route there).
pub fn tproxy_routing_is_in_place_once(pod: &NetNs) {
    let rules = pod.run(&["ip", "-4", "rule", "show"]).expect("ip rule");
    assert_eq!(
        rules.matches("fwmark 0x539 lookup 133").count(),
        1,
        "{rules}"
    );
    let routes = pod
        .run(&["ip", "-4", "route", "show", "table", "133"])
        .expect("ip route");
    assert!(routes.contains("local default dev lo"), "{routes}");
}

/// With `-m TPROXY`: the routing is in place and inbound TCP reaches a transparent listener on 15006,
/// which sees the original destination as its local address.
pub fn tproxy_inbound_reaches_a_transparent_listener(p: &Pair) {
    tproxy_routing_is_in_place_once(&p.pod);
    let inbound = Listener::start(&p.pod, &["listen-tcp", "0.0.0.0:15006", "--transparent"]);
    let (code, line) = client(&p.peer, None, &["connect-tcp", "10.10.0.1:8080"]);
    assert_eq!(code, 0, "{line}");
    assert!(line.contains("reply=hello"), "{line}");
    let ev = inbound.event();
    assert!(
        ev.starts_with("ACCEPTED peer=10.10.0.2:") && ev.contains("local=10.10.0.1:8080"),
        "{ev}"
    );
}

/// With `--ipv6 true`: IPv6 outbound lands on 15001 and inbound on 15006, each with its original
/// destination.
pub fn ipv6_outbound_and_inbound_are_redirected(p: &Pair) {
    app_outbound_lands_on(&p.pod, "[::]:15001", "[fd00::2]:8080");
    peer_inbound_lands_on(p, "[::]:15006", "[fd00::1]:8080", "[fd00::2]");
}
