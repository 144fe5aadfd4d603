//! Running a program whose success a test depends on.

use std::process::{Command, Output};

/// Runs `cmd` to its end and returns its output. Panics, naming `what`, when it cannot start or exits
/// non-zero (with its stderr), so that a failed setup step fails the test loudly where it happened.
pub fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The stdout of [`run_ok`], which must be UTF-8.
pub fn stdout_ok(cmd: &mut Command, what: &str) -> String {
    String::from_utf8(run_ok(cmd, what).stdout)
        .unwrap_or_else(|e| panic!("{what} wrote non-UTF-8 output: {e}"))
}
