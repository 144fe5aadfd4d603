//! Running the built `iptables-init` inside a test namespace, as root.

use std::process::{Output, Stdio};

use crate::netns::NetNs;

/// Runs the built `iptables-init` with `args` inside `ns`; logs its status and stderr.
pub fn init(ns: &NetNs, args: &[&str]) -> Output {
    let out = ns
        .command(crate::bin("iptables-init"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run iptables-init");
    eprintln!(
        "iptables-init {args:?} -> {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`init`], which must succeed.
pub fn init_ok(ns: &NetNs, args: &[&str]) {
    let out = init(ns, args);
    assert!(
        out.status.success(),
        "iptables-init {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}
