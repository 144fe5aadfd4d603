//! `testproxy` as the proxy of a pod whose interception rules iptables-init installed, with real traffic
//!.
//!
//! Each test builds the pod/peer pair (`e2e::netns::Pair`), applies Istio's injected istio-init arguments
//! with the built `iptables-init`, and starts `testproxy proxy sidecar …` in the pod as uid 1337 (as the
//! injected securityContext runs it), the echo app (`testproxy echo`) as an application uid, and the client
//! (`testproxy get`) as an application uid. Traffic must reach its destination *through* the proxy, and the
//! proxy's `/stats` must show it with its original destination. Root is required: these tests fail, never
//! skip.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::iptables_init::init_ok;
use e2e::netns::{NetNs, Pair};
use e2e::nettool::{APP_UID, PROXY_UID};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use test_support::istio_init::injected_args_with;
use test_support::process::run_ok;
use test_support::require_root;

/// How long a test waits for a server to come up or a process to end (the machine may be busy).
const DEADLINE: Duration = Duration::from_secs(60);

/// `testproxy ARGS` inside `ns`, as `uid` (setpriv, no other groups) or as root.
fn testproxy(ns: &NetNs, uid: Option<u32>, args: &[&str]) -> Command {
    let bin = e2e::bin("testproxy");
    let mut cmd = match uid {
        Some(uid) => {
            let u = uid.to_string();
            let mut c = ns.command("setpriv");
            c.args(["--reuid", &u, "--regid", &u, "--clear-groups"])
                .arg(bin);
            c
        }
        None => ns.command(bin),
    };
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// A `testproxy` server (proxy or echo) killed when dropped.
struct Server {
    child: Child,
    what: String,
}

impl Server {
    fn start(mut cmd: Command, what: &str) -> Server {
        let child = cmd
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        Server {
            child,
            what: what.to_string(),
        }
    }

    /// Sends SIGTERM and waits for the exit status (`ip netns exec` and setpriv exec, so the child is
    /// testproxy itself).
    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = Pid::from_raw(self.child.id() as i32);
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{} did not exit on SIGTERM",
                self.what
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `testproxy get URL` from `ns` as `uid`.
fn get(ns: &NetNs, uid: Option<u32>, url: &str) -> Output {
    testproxy(ns, uid, &["get", url, "--timeout-seconds", "20"])
        .output()
        .expect("run testproxy get")
}

/// The body of a successful `testproxy get`.
fn get_ok(ns: &NetNs, uid: Option<u32>, url: &str) -> String {
    let out = get(ns, uid, url);
    assert!(
        out.status.success(),
        "get {url} as {uid:?}: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Polls `url` from `ns` (as root) until it answers 2xx.
fn wait_until_up(ns: &NetNs, url: &str) {
    let start = Instant::now();
    loop {
        let out = get(ns, None, url);
        if out.status.success() {
            return;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{url} never answered: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The proxy's `/stats`.
fn stats(pod: &NetNs) -> serde_json::Value {
    let body = get_ok(pod, None, "http://127.0.0.1:15000/stats");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/stats is not JSON ({e}): {body}"))
}

/// The proxy's `/stats`, which must count `inbound` and `outbound` connections.
fn stats_counting(pod: &NetNs, inbound: u64, outbound: u64) -> serde_json::Value {
    let s = stats(pod);
    assert_eq!(
        (s["inbound"].as_u64(), s["outbound"].as_u64()),
        (Some(inbound), Some(outbound)),
        "{s}"
    );
    s
}

/// The proxy counted `inbound` and `outbound` connections, relayed to `to` in that order.
fn assert_relayed(pod: &NetNs, inbound: u64, outbound: u64, to: &[&str]) {
    let s = stats_counting(pod, inbound, outbound);
    assert_eq!(destinations(&s), to, "{s}");
}

/// The injected istio-proxy container's arguments (after the kubelet expanded `$(POD_NAMESPACE)`).
const PROXY_ARGS: &[&str] = &[
    "proxy",
    "sidecar",
    "--domain",
    "demo.svc.cluster.local",
    "--proxyLogLevel=warning",
    "--proxyComponentLogLevel=misc:error",
    "--log_output_level=default:info",
];

/// The rewritten readiness probe of an app container `echo` serving on 8080 (as the injector writes
/// `ISTIO_KUBE_APP_PROBERS`).
const PROBERS: &str = r#"{"/app-health/echo/readyz":{"httpGet":{"path":"/","port":8080,"scheme":"HTTP"},"timeoutSeconds":3}}"#;

/// A pair whose pod has the injected rules (`--ipv6 <ipv6>`), the proxy running as 1337 and ready.
fn pod_with_proxy(name: &str, ipv6: &'static str) -> (Pair, Server) {
    require_root();
    let p = Pair::new(name);
    init_ok(&p.pod, &injected_args_with(&[], &["--ipv6", ipv6]));
    let mut cmd = testproxy(&p.pod, Some(PROXY_UID), PROXY_ARGS);
    cmd.env("INSTANCE_IP", "10.10.0.1")
        .env("ISTIO_KUBE_APP_PROBERS", PROBERS);
    let proxy = Server::start(cmd, "the proxy");
    wait_until_up(&p.pod, "http://127.0.0.1:15021/healthz/ready");
    (p, proxy)
}

/// The echo app in `ns` on 8080 as the application uid, answering `name`, up.
fn echo(ns: &NetNs, name: &str, url: &str) -> Server {
    let mut cmd = testproxy(ns, Some(APP_UID), &["echo", "--port", "8080"]);
    cmd.env("POD_NAME", name);
    let server = Server::start(cmd, name);
    wait_until_up(ns, url);
    server
}

fn destinations(stats: &serde_json::Value) -> Vec<String> {
    stats["destinations"]
        .as_array()
        .expect("destinations")
        .iter()
        .map(|d| d.as_str().expect("a string").to_string())
        .collect()
}

#[test]
fn outbound_and_inbound_go_through_the_proxy_with_their_original_destinations_ipv4() {
    let (p, proxy) = pod_with_proxy("tp-v4", "false");
    // The peer's echo is up before any app traffic: the probe from the peer itself is not counted.
    let _peer_echo = echo(&p.peer, "peer-echo", "http://10.10.0.2:8080/");
    let _pod_echo = echo(&p.pod, "pod-echo", "http://10.10.0.1:8080/");
    let before = stats(&p.pod);
    assert_eq!(
        (before["inbound"].as_u64(), before["outbound"].as_u64()),
        (Some(0), Some(0)),
        "{before}"
    );

    // Outbound: the app's request is captured to 15001 and relayed to where it was going.
    assert_eq!(
        get_ok(&p.pod, Some(APP_UID), "http://10.10.0.2:8080/hello"),
        "peer-echo\n"
    );
    let s = stats(&p.pod);
    assert_eq!(s["outbound"], 1, "{s}");
    assert_eq!(destinations(&s), ["10.10.0.2:8080"], "{s}");

    // Inbound: the peer's request to the pod is captured to 15006 and relayed to the app, from 127.0.0.6
    // (not captured again: inbound stays 1).
    assert_eq!(
        get_ok(&p.peer, None, "http://10.10.0.1:8080/"),
        "pod-echo\n"
    );
    assert_relayed(&p.pod, 1, 1, &["10.10.0.2:8080", "10.10.0.1:8080"]);

    // The kubelet's probe of the rewritten readiness probe: 15020 is not captured (-d), and the proxy
    // runs the app's probe from 127.0.0.6, which is not captured either.
    let answer = get_ok(
        &p.peer,
        None,
        "http://10.10.0.1:15020/app-health/echo/readyz",
    );
    assert_eq!(answer, "pod-echo\n");
    let out = get(
        &p.peer,
        None,
        "http://10.10.0.1:15020/app-health/other/readyz",
    );
    assert!(!out.status.success(), "an unknown probe path was answered");
    stats_counting(&p.pod, 1, 1);

    assert!(
        proxy.terminate().success(),
        "the proxy did not exit 0 on SIGTERM"
    );
}

#[test]
fn outbound_and_inbound_go_through_the_proxy_with_their_original_destinations_ipv6() {
    let (p, proxy) = pod_with_proxy("tp-v6", "true");
    let _peer_echo = echo(&p.peer, "peer-echo", "http://[fd00::2]:8080/");
    let _pod_echo = echo(&p.pod, "pod-echo", "http://[fd00::1]:8080/");

    assert_eq!(
        get_ok(&p.pod, Some(APP_UID), "http://[fd00::2]:8080/"),
        "peer-echo\n"
    );
    assert_eq!(
        get_ok(&p.peer, None, "http://[fd00::1]:8080/"),
        "pod-echo\n"
    );
    assert_relayed(&p.pod, 1, 1, &["[fd00::2]:8080", "[fd00::1]:8080"]);
    assert!(proxy.terminate().success());
}

#[test]
fn tproxy_inbound_goes_through_the_transparent_listener_to_the_app() {
    require_root();
    let p = Pair::new("tp-tproxy");
    init_ok(
        &p.pod,
        &injected_args_with(&[("-m", "TPROXY")], &["--ipv6", "false"]),
    );
    // In TPROXY mode Istio gives the proxy NET_ADMIN (for IP_TRANSPARENT); uid 1337 keeps it as an
    // ambient capability.
    let mut cmd = p.pod.command("setpriv");
    cmd.args([
        "--reuid",
        "1337",
        "--regid",
        "1337",
        "--clear-groups",
        "--inh-caps",
        "+net_admin",
        "--ambient-caps",
        "+net_admin",
    ])
    .arg(e2e::bin("testproxy"))
    .args(PROXY_ARGS)
    .stdin(Stdio::null());
    let proxy = Server::start(cmd, "the proxy");
    wait_until_up(&p.pod, "http://127.0.0.1:15021/healthz/ready");
    let _pod_echo = echo(&p.pod, "pod-echo", "http://10.10.0.1:8080/");
    assert_eq!(
        get_ok(&p.peer, None, "http://10.10.0.1:8080/"),
        "pod-echo\n"
    );
    let s = stats(&p.pod);
    assert_eq!(s["inbound"], 1, "{s}");
    assert_eq!(destinations(&s), ["10.10.0.1:8080"], "{s}");
    assert!(proxy.terminate().success());
}

#[test]
fn a_connection_straight_to_a_capture_port_is_refused_not_relayed_to_itself() {
    let (p, _proxy) = pod_with_proxy("tp-loop", "false");
    // Root's connection to 127.0.0.1 is not captured: it reaches 15001 itself, and its "original
    // destination" is 15001. Relaying it would connect to 15001 again, without end (each hop as 1337,
    // uncaptured), until the relay limit is used up.
    for port in [15001, 15006] {
        let out = get(&p.pod, None, &format!("http://127.0.0.1:{port}/"));
        assert!(
            !out.status.success(),
            "a direct connection to {port} was answered"
        );
    }
    stats_counting(&p.pod, 0, 0);
    // The proxy is still serving.
    get_ok(&p.pod, None, "http://127.0.0.1:15021/healthz/ready");
}

#[test]
fn pilot_agent_s_lifecycle_hooks_wait_and_drain() {
    let (p, proxy) = pod_with_proxy("tp-life", "false");
    // postStart `pilot-agent wait` (its default URL is 15021's /healthz/ready).
    let wait = ["wait", "--timeoutSeconds=30"];
    run_ok(&mut testproxy(&p.pod, Some(PROXY_UID), &wait), "wait");
    // preStop `pilot-agent request --debug-port=15020 POST drain`: readiness then fails.
    let drain = ["request", "--debug-port=15020", "POST", "drain"];
    let out = run_ok(&mut testproxy(&p.pod, Some(PROXY_UID), &drain), "request");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "OK");
    let out = get(&p.pod, None, "http://127.0.0.1:15021/healthz/ready");
    assert!(!out.status.success(), "still ready after drain");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("HTTP 503"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // `wait` on a URL that never answers 200 ends at its bound, non-zero.
    let out = testproxy(
        &p.pod,
        None,
        &[
            "wait",
            "--timeoutSeconds=1",
            "--periodMillis=100",
            "--url",
            "http://127.0.0.1:15021/healthz/ready",
        ],
    )
    .output()
    .expect("wait");
    assert!(!out.status.success());
    // The kubelet sees the same on the status port.
    let out = get(&p.peer, None, "http://10.10.0.1:15020/healthz/ready");
    assert!(!out.status.success(), "ready on 15020 after drain");
    assert!(proxy.terminate().success());
}
