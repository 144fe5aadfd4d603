//! Network-namespace test hosts: create, run commands inside, destroy (owned by the iptables engineers).
//!
//! A [`NetNs`] is a named namespace (`ip netns add`) with `lo` up. Commands run inside it through
//! `ip netns exec`, so any binary (iptables-restore, the built `iptables-init`, a test helper) sees only
//! that namespace's netfilter state. Dropping the value deletes the namespace, so a failing test does not
//! leave rules behind on the host.
//!
//! A [`Pair`] is the two hosts of the real-traffic tests: a "pod" and a "peer" joined by a veth pair.
//!
//! Root is required; `test_support::require_root` panics with a clear message instead of letting a test
//! pass by skipping.

use std::io::Write as _;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{bail, Context as _, Result};

/// A shell fragment that bind-mounts `/bin/false` over every userspace netfilter tool (`nft`, `ip`,
/// `iptables*`, `ip6tables*`): run inside `unshare --mount --propagation private`, it proves a program
/// needs none of them (the native nftables apply, the CNI plugin with `native_nftables`).
pub const MASK_NETFILTER_TOOLS: &str = "for d in /usr/sbin /usr/bin /sbin /bin; do \
  for f in $d/nft $d/ip $d/iptables* $d/ip6tables*; do \
    [ -e \"$f\" ] && mount --bind /bin/false \"$f\"; \
  done; \
done";

/// Which `*-save` to dump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    /// The save binary of this family.
    pub fn save_bin(self) -> &'static str {
        match self {
            Family::V4 => "iptables-save",
            Family::V6 => "ip6tables-save",
        }
    }

    /// The restore binary of this family.
    pub fn restore_bin(self) -> &'static str {
        match self {
            Family::V4 => "iptables-restore",
            Family::V6 => "ip6tables-restore",
        }
    }
}

/// A network namespace that exists as long as this value does.
#[derive(Debug)]
pub struct NetNs {
    name: String,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl NetNs {
    /// Creates a uniquely named namespace (`<prefix>-<pid>-<n>`) and brings `lo` up.
    pub fn new(prefix: &str) -> Result<NetNs> {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        // Namespace names end up as file names under /run/netns; keep them short and plain.
        let prefix: String = prefix
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(24)
            .collect();
        let name = format!("{prefix}-{}-{n}", std::process::id());
        checked(Command::new("ip").args(["netns", "add", &name]))
            .with_context(|| format!("creating network namespace {name}"))?;
        // From here on Drop cleans up, even if bringing lo up fails.
        let ns = NetNs { name };
        ns.run(&["ip", "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (as given to `ip netns exec`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's file, as a CNI runtime passes it in `CNI_NETNS`.
    pub fn path(&self) -> String {
        format!("/run/netns/{}", self.name)
    }

    /// A command that runs `program` inside the namespace; add arguments, env and stdio as needed.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Runs `argv` inside the namespace and returns its stdout; a non-zero exit is an error carrying
    /// the command line, the status and stderr.
    pub fn run(&self, argv: &[&str]) -> Result<String> {
        let (program, args) = argv.split_first().context("empty command")?;
        let mut cmd = self.command(program);
        cmd.args(args);
        checked(&mut cmd)
    }

    /// Runs `argv` inside the namespace with `stdin` fed to it; returns stdout, or an error as [`run`].
    ///
    /// [`run`]: NetNs::run
    pub fn run_with_stdin(&self, argv: &[&str], stdin: &str) -> Result<String> {
        let (program, args) = argv.split_first().context("empty command")?;
        let mut cmd = self.command(program);
        cmd.args(args);
        let out = output_with_stdin(&mut cmd, stdin)?;
        into_stdout(&cmd, out)
    }

    /// Feeds `input` to `iptables-restore --noflush` (or the ip6 variant).
    pub fn restore(&self, family: Family, input: &str) -> Result<()> {
        self.run_with_stdin(&[family.restore_bin(), "--noflush"], input)
            .with_context(|| format!("{} in {}", family.restore_bin(), self.name))?;
        Ok(())
    }

    /// The `iptables-save` (or `ip6tables-save`) dump of the namespace.
    pub fn save(&self, family: Family) -> Result<String> {
        self.run(&[family.save_bin()])
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Best effort: a failure here must not mask the test's own panic.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A "pod" namespace and a "peer" namespace joined by a veth pair: pod `eth0` 10.10.0.1/24 + fd00::1/64,
/// peer `eth0` 10.10.0.2/24 + 10.10.0.3/24 + fd00::2/64.
#[derive(Debug)]
pub struct Pair {
    pub pod: NetNs,
    pub peer: NetNs,
}

/// `ip link add <local> type veth peer name eth0 netns <ns>`: a veth pair whose other end is `eth0` in
/// namespace `ns`.
fn veth_into<'a>(local: &'a str, ns: &'a str) -> [&'a str; 11] {
    [
        "ip", "link", "add", local, "type", "veth", "peer", "name", "eth0", "netns", ns,
    ]
}

impl Pair {
    /// Creates both namespaces (`<name>-pod`, `<name>-peer`) and the link; panics on any failure.
    pub fn new(name: &str) -> Pair {
        let pod = NetNs::new(&format!("{name}-pod")).expect("pod netns");
        let peer = NetNs::new(&format!("{name}-peer")).expect("peer netns");
        pod.run(&veth_into("eth0", peer.name())).expect("veth pair");
        for (ns, v4, v6) in [
            (&pod, &["10.10.0.1/24"][..], "fd00::1/64"),
            (&peer, &["10.10.0.2/24", "10.10.0.3/24"][..], "fd00::2/64"),
        ] {
            for a in v4 {
                ns.run(&["ip", "addr", "add", a, "dev", "eth0"])
                    .expect("v4 address");
            }
            ns.run(&["ip", "-6", "addr", "add", v6, "dev", "eth0", "nodad"])
                .expect("v6");
            ns.run(&["ip", "link", "set", "eth0", "up"])
                .expect("eth0 up");
        }
        Pair { pod, peer }
    }
}

/// A namespace joined to the host's by a veth pair, for a server the host's processes (a kube-apiserver)
/// must reach at an address that is not loopback: host end `198.18.<n>.1/30`, namespace end
/// `198.18.<n>.2/30` (198.18.0.0/15 is the range RFC 2544 sets aside for network tests; only these two
/// ends hold it). Dropping it deletes the namespace, and with it both ends of the pair.
#[derive(Debug)]
pub struct HostLink {
    pub ns: NetNs,
    /// The namespace end's address.
    pub addr: std::net::Ipv4Addr,
}

impl HostLink {
    /// Creates the namespace and the link; panics on any failure.
    pub fn new(name: &str) -> HostLink {
        let ns = NetNs::new(name).expect("netns");
        // A /30 per link: the process id and a counter keep concurrent tests (and test processes) apart.
        let k = COUNTER.fetch_add(1, Ordering::Relaxed);
        let n = (std::process::id() as usize * 7 + k) % 256;
        // Interface names have at most 15 bytes: "vh" + pid (≤ 7 digits) + "x" + counter.
        let host_if = format!("vh{}x{}", std::process::id(), k % 1000);
        let run = |argv: &[&str]| checked(Command::new(argv[0]).args(&argv[1..]));
        run(&veth_into(&host_if, ns.name())).expect("veth pair to the host");
        let host_addr = format!("198.18.{n}.1/30");
        run(&["ip", "addr", "add", &host_addr, "dev", &host_if]).expect("host address");
        run(&["ip", "link", "set", &host_if, "up"]).expect("host end up");
        let addr = std::net::Ipv4Addr::new(198, 18, n as u8, 2);
        ns.run(&["ip", "addr", "add", &format!("{addr}/30"), "dev", "eth0"])
            .expect("namespace address");
        ns.run(&["ip", "link", "set", "eth0", "up"])
            .expect("namespace end up");
        HostLink { ns, addr }
    }
}

/// Runs `cmd` with `stdin` written to it and collects its output.
pub fn output_with_stdin(cmd: &mut Command, stdin: &str) -> Result<Output> {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {cmd:?}"))?;
    if let Some(mut pipe) = child.stdin.take() {
        // A program that refuses its input before reading it (the CNI plugin without CNI_NETNS) may have
        // exited already: the broken pipe is not the test's failure, its exit status and output are.
        match pipe.write_all(stdin.as_bytes()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            other => other.with_context(|| format!("writing stdin of {cmd:?}"))?,
        }
    }
    child
        .wait_with_output()
        .with_context(|| format!("waiting for {cmd:?}"))
}

fn checked(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("spawning {cmd:?}"))?;
    into_stdout(cmd, out)
}

fn into_stdout(cmd: &Command, out: Output) -> Result<String> {
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
