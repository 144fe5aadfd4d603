//! `testproxy proxy sidecar …`: the proxy of an injected pod.
//!
//! It listens where Envoy does (15001 outbound, 15006 inbound), reads each connection's original
//! destination and relays it there. Its own connections go out as its uid (1337, from the injected
//! securityContext), which the interception rules return; the inbound relay and the app probes connect
//! from 127.0.0.6 (::6), as Envoy's inbound passthrough and pilot-agent's probes do, so that their
//! connection to the pod's own address over `lo` is not captured again.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};
use tokio::task::JoinHandle;

use crate::admin::{self, Endpoint};
use crate::app_probers::Probers;
use crate::original_dst::{is_direct, original_dst};
use crate::relay::{self, CONNECT_TIMEOUT, IDLE_TIMEOUT};
use crate::stats::{Direction, Stats};
use crate::Error;

/// Envoy's admin port (`/stats`).
pub const ADMIN_PORT: u16 = 15000;
/// The outbound capture port (iptables-init `-p`).
pub const OUTBOUND_PORT: u16 = 15001;
/// The inbound capture port (iptables-init `-z`).
pub const INBOUND_PORT: u16 = 15006;
/// pilot-agent's status port (app probes).
pub const STATUS_PORT: u16 = 15020;
/// Envoy's readiness port (the injected probes).
pub const READY_PORT: u16 = 15021;
/// The uid Istio runs the proxy as; the interception rules let its traffic out uncaptured.
pub const PROXY_UID: u32 = 1337;
/// Relayed connections at once (both directions); a connection beyond waits in the listen backlog.
pub const MAX_RELAYS: usize = 1024;
/// On SIGTERM, open relays get this long to finish before the process exits.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// What the proxy reads from its environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// The rewritten app probes (`ISTIO_KUBE_APP_PROBERS`).
    pub probers: Probers,
    /// Where app probes go: the pod's address (`INSTANCE_IP`), else 127.0.0.1.
    pub app_address: IpAddr,
}

impl Config {
    /// From `ISTIO_KUBE_APP_PROBERS` and `INSTANCE_IP`, as the injector sets them.
    pub fn from_env() -> Result<Config, Error> {
        let probers = Probers::parse(&std::env::var("ISTIO_KUBE_APP_PROBERS").unwrap_or_default())?;
        let app_address = match std::env::var("INSTANCE_IP") {
            Ok(v) if !v.is_empty() => v.parse().map_err(|_| Error::Arg {
                flag: "INSTANCE_IP",
                value: v.clone(),
                reason: "not an IP address",
            })?,
            _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        Ok(Config {
            probers,
            app_address,
        })
    }
}

/// The proxy's shared state.
#[derive(Debug)]
pub struct State {
    pub stats: Stats,
    /// Set by `/drain` and at shutdown: readiness answers 503.
    pub draining: AtomicBool,
    /// Woken by `/quitquitquit`.
    pub quit: Notify,
    pub probers: Probers,
    pub app_address: IpAddr,
    relays: Arc<Semaphore>,
}

impl State {
    pub fn new(config: Config) -> State {
        State {
            stats: Stats::new(),
            draining: AtomicBool::new(false),
            quit: Notify::new(),
            probers: config.probers,
            app_address: config.app_address,
            relays: Arc::new(Semaphore::new(MAX_RELAYS)),
        }
    }

    /// Relayed connections open now.
    pub fn active_relays(&self) -> usize {
        MAX_RELAYS - self.relays.available_permits()
    }
}

/// Binds `port` on 0.0.0.0, and on [::] where the namespace has IPv6 (a failure there is reported and
/// skipped: a pod without IPv6 still gets its IPv4 proxy).
fn listen_both(
    port: u16,
    v4: Ipv4Addr,
    v6: Ipv6Addr,
    transparent: bool,
) -> Result<Vec<TcpListener>, Error> {
    let mut out = vec![crate::http::listen(
        SocketAddr::new(v4.into(), port),
        transparent,
    )?];
    match crate::http::listen(SocketAddr::new(v6.into(), port), transparent) {
        Ok(l) => out.push(l),
        Err(e) => eprintln!("testproxy: no IPv6 listener: {e}"),
    }
    Ok(out)
}

/// Accepts captured connections on `listener` and relays each to its original destination.
async fn accept_loop(listener: TcpListener, direction: Direction, state: Arc<State>) {
    let own_port = listener.local_addr().map_or(0, |a| a.port());
    loop {
        let Ok(permit) = state.relays.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("testproxy: accept on {own_port}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = handle(stream, direction, own_port, &state).await {
                eprintln!("testproxy: {direction:?} connection from {peer}: {e}");
            }
        });
    }
}

async fn handle(
    stream: TcpStream,
    direction: Direction,
    own_port: u16,
    state: &State,
) -> Result<(), Error> {
    let local = stream.local_addr().map_err(|source| Error::Io {
        what: "reading a connection's local address",
        source,
    })?;
    let destination = original_dst(&stream, local);
    if is_direct(destination, local, own_port) {
        // Relaying would connect to this listener again, and again: refuse instead of looping.
        return Err(Error::NotRedirected { destination });
    }
    state.stats.record(direction, destination);
    let source = match direction {
        Direction::Inbound => Some(relay::passthrough_source(destination.ip())),
        Direction::Outbound => None,
    };
    let upstream = relay::connect(destination, source, CONNECT_TIMEOUT).await?;
    relay::relay(stream, upstream, IDLE_TIMEOUT)
        .await
        .map_err(|source| Error::Io {
            what: "relaying",
            source,
        })?;
    Ok(())
}

/// Runs the proxy until SIGTERM/SIGINT or `/quitquitquit`, then lets open relays finish (at most
/// [`DRAIN_LIMIT`]) and returns.
pub async fn run(config: Config) -> Result<(), Error> {
    let uid = nix::unistd::geteuid().as_raw();
    if uid != PROXY_UID {
        eprintln!(
            "testproxy: running as uid {uid}, not {PROXY_UID}: the interception rules will capture the proxy's own connections"
        );
    }
    let state = Arc::new(State::new(config));
    let (any4, any6) = (Ipv4Addr::UNSPECIFIED, Ipv6Addr::UNSPECIFIED);
    let mut tasks: Vec<JoinHandle<()>> = Vec::new();
    for (port, direction) in [
        (OUTBOUND_PORT, Direction::Outbound),
        (INBOUND_PORT, Direction::Inbound),
    ] {
        let transparent = direction == Direction::Inbound;
        for l in listen_both(port, any4, any6, transparent)? {
            tasks.push(tokio::spawn(accept_loop(l, direction, state.clone())));
        }
    }
    for (port, endpoint, v4, v6) in [
        (
            ADMIN_PORT,
            Endpoint::Admin,
            Ipv4Addr::LOCALHOST,
            Ipv6Addr::LOCALHOST,
        ),
        (STATUS_PORT, Endpoint::Status, any4, any6),
        (READY_PORT, Endpoint::Ready, any4, any6),
    ] {
        for l in listen_both(port, v4, v6, false)? {
            let state = state.clone();
            tasks.push(tokio::spawn(crate::http::serve(l, move |req, peer| {
                admin::handle(endpoint, state.clone(), req, peer)
            })));
        }
    }
    eprintln!(
        "testproxy: proxy up (uid {uid}): outbound {OUTBOUND_PORT}, inbound {INBOUND_PORT}, admin {ADMIN_PORT}, status {STATUS_PORT}, ready {READY_PORT}; {} app probers",
        state.probers.len()
    );
    tokio::select! {
        r = crate::signals::terminated() => r?,
        _ = state.quit.notified() => {}
    }
    state
        .draining
        .store(true, std::sync::atomic::Ordering::Relaxed);
    for t in &tasks {
        t.abort();
    }
    let deadline = Instant::now() + DRAIN_LIMIT;
    while state.active_relays() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "testproxy: stopped; {} relays still open",
        state.active_relays()
    );
    Ok(())
}
