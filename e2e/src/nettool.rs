//! Real traffic through the `nettool` helper (`src/bin/nettool.rs`): listeners and clients run inside a
//! namespace, as root, an application uid or the proxy uid.

use std::io::{BufRead as _, BufReader, Lines};
use std::process::{Child, ChildStdout, Command, Stdio};

use crate::netns::NetNs;

/// The uid an application runs as: its traffic is captured.
pub const APP_UID: u32 = 1000;
/// The uid of the proxy (`-u 1337`): its own traffic is not captured.
pub const PROXY_UID: u32 = 1337;

/// A command running `nettool` inside `ns`, as `uid` (through setpriv) or as root.
pub fn nettool(ns: &NetNs, uid: Option<u32>, args: &[&str]) -> Command {
    nettool_as(ns, uid.map(|u| (u, u)), args)
}

/// A command running `nettool` inside `ns`, as the (uid, gid) of `owner` with no other groups (through
/// setpriv), or as root.
pub fn nettool_as(ns: &NetNs, owner: Option<(u32, u32)>, args: &[&str]) -> Command {
    let tool = crate::bin("nettool");
    let mut cmd = match owner {
        Some((uid, gid)) => {
            let mut c = ns.command("setpriv");
            let (u, g) = (uid.to_string(), gid.to_string());
            c.args(["--reuid", &u, "--regid", &g, "--clear-groups"])
                .arg(tool);
            c
        }
        None => ns.command(tool),
    };
    cmd.args(args);
    cmd
}

/// A running `nettool listen-*`, ready once constructed.
pub struct Listener {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    what: String,
}

impl Listener {
    /// Starts `nettool <args>` as root in `ns` and waits for it to listen.
    pub fn start(ns: &NetNs, args: &[&str]) -> Listener {
        Listener::start_as(ns, None, args)
    }

    /// Starts `nettool <args>` as `uid` (root for `None`) in `ns` and waits for it to listen. Its lifetime
    /// only bounds a listener nobody connects to (one that is to see nothing is stopped, and one that
    /// sees its connection reports at once), so it is [`crate::PATIENCE`]: the client that follows may be
    /// slow to start on a busy machine.
    pub fn start_as(ns: &NetNs, uid: Option<u32>, args: &[&str]) -> Listener {
        let lifetime = u64::try_from(crate::PATIENCE.as_millis()).unwrap_or(u64::MAX);
        Listener::start_for(ns, uid, args, lifetime)
    }

    /// [`Listener::start_as`] with a lifetime of `timeout_ms` (a `serve` runs that long).
    pub fn start_for(ns: &NetNs, uid: Option<u32>, args: &[&str], timeout_ms: u64) -> Listener {
        let mut all = args.to_vec();
        let timeout = timeout_ms.to_string();
        all.extend(["--timeout-ms", &timeout]);
        let mut child = nettool(ns, uid, &all)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn listener");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        assert_eq!(first, "READY", "listener {args:?} did not start");
        Listener {
            child,
            lines,
            what: format!("{args:?} in {}", ns.name()),
        }
    }

    /// The event line the listener reports (`ACCEPTED ...`, `RECEIVED ...` or `TIMEOUT`).
    pub fn event(mut self) -> String {
        let line = self.lines.next().and_then(Result::ok).unwrap_or_default();
        let _ = self.child.wait();
        line
    }

    /// Stops the listener without reading or logging what it saw (its clients tell).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops a listener that must have seen nothing; returns what it saw.
    pub fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let rest: Vec<String> = self.lines.by_ref().map_while(Result::ok).collect();
        eprintln!("listener {} stopped: {rest:?}", self.what);
        rest.join("\n")
    }
}

/// Runs a `nettool` client and returns (exit code, its line).
pub fn client(ns: &NetNs, uid: Option<u32>, args: &[&str]) -> (i32, String) {
    let (code, line, stderr) = quiet_client(ns, uid.map(|u| (u, u)), args);
    eprintln!("client {args:?} as {uid:?}: {code} {line} {stderr}");
    (code, line)
}

/// Runs a `nettool` client as the (uid, gid) of `owner` (root for `None`) and returns (exit code, its
/// line, its stderr) without logging: for tests that send hundreds of connections.
pub fn quiet_client(ns: &NetNs, owner: Option<(u32, u32)>, args: &[&str]) -> (i32, String, String) {
    let out = nettool_as(ns, owner, args)
        .stdin(Stdio::null())
        .output()
        .expect("client");
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    (out.status.code().unwrap_or(-1), line, stderr)
}
