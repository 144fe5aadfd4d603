//! The guard of tests that need root: they fail loudly, never skip, and never install what is missing.

/// Panics unless the process runs as root and the tools a network-namespace test needs are installed.
pub fn require_root() {
    require_root_with(
        &[
            "ip",
            "iptables-save",
            "iptables-restore",
            "ip6tables-save",
            "ip6tables-restore",
        ],
        "install iptables and iproute2; scripts/test.sh does",
    );
}

/// Panics unless the process runs as root and every one of `tools` is installed; `hint` says how to get
/// them.
pub fn require_root_with(tools: &[&str], hint: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (network namespaces and netfilter); run it as root, it never skips"
    );
    for tool in tools {
        require_tool(tool, hint);
    }
}

/// Panics unless `tool` is installed; `hint` says how to get it.
pub fn require_tool(tool: &str, hint: &str) {
    assert!(
        which(tool),
        "this test needs `{tool}` on PATH ({hint}); it never skips"
    );
}

/// Whether `tool` is an executable file in one of the `PATH` directories (or the sbin directories,
/// which a non-login root shell may lack).
pub fn which(tool: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"])
        .filter(|d| !d.is_empty())
        .any(|d| std::path::Path::new(d).join(tool).is_file());
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_finds_a_shell_and_not_a_made_up_name() {
        assert!(which("sh"));
        assert!(!which("no-such-tool-for-sure"));
    }

    #[test]
    #[should_panic(expected = "never skips")]
    fn a_missing_tool_fails_loudly() {
        require_tool("no-such-tool-for-sure", "it does not exist");
    }
}
