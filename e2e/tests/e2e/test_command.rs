//! The test command tells the whole truth: scripts/test.sh's `step` and `run_tests`
//! (scripts/test-counts.sh) run with the real `cargo test` on scratch crates whose test binaries pass,
//! fail, abort, are filtered, do not compile, or never start because cargo itself was killed. Every
//! binary runs after a failure, the closing line counts every test that ran and names every failed test,
//! every binary that did not compile, finish or run and every failed step, and the exit status is 1
//! whenever anything failed.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use e2e::apiserver::TempDir;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A crate `name` in `dir`, outside any workspace, with `files` (path, text) beside its Cargo.toml.
fn scratch_crate(dir: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let root = dir.join(name);
    let manifest = format!(
        "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [profile.dev]\ndebug = 0\n\n[workspace]\n"
    );
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("Cargo.toml"), manifest).unwrap();
    for (path, text) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    root.join("Cargo.toml")
}

/// `script` run by bash as scripts/test.sh runs its steps (`set -euo pipefail`, test-counts.sh
/// sourced), with the real cargo, its builds in `dir`, offline.
fn with_counts(dir: &Path, script: &str) -> Output {
    let cargo = PathBuf::from(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    let mut path = std::env::var_os("PATH").unwrap_or_default();
    if let Some(bin) = cargo.parent().filter(|p| !p.as_os_str().is_empty()) {
        path = std::env::join_paths(
            std::iter::once(bin.to_path_buf()).chain(std::env::split_paths(&path)),
        )
        .unwrap();
    }
    Command::new("bash")
        .args(["-euo", "pipefail", "-c"])
        .arg(format!("source scripts/test-counts.sh\n{script}"))
        .current_dir(repo())
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env("CARGO_NET_OFFLINE", "true")
        .env("CARGO_TERM_COLOR", "never")
        .output()
        .unwrap()
}

/// The closing line, split into its counts and what went wrong (`; ` between items).
fn closing(out: &Output) -> (String, Vec<String>) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let mut items = last.split("; ").map(str::to_string);
    (items.next().unwrap_or_default(), items.collect())
}

/// Test output of scratch crates, escaped: a failure message here is itself captured test output, and
/// lines in cargo's form inside it must not reach the outer run's log as such.
fn shown(out: &Output) -> String {
    format!(
        "{:?}\nstderr: {:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A workspace run where one binary fails, one aborts, then a filtered run, a run that does not compile
/// and a failed step: every binary ran, each problem is named once, the counts are the sum of what ran.
#[test]
fn the_closing_line_counts_every_test_and_names_every_failure() {
    let dir = TempDir::new("test-command");
    let demo = scratch_crate(
        dir.path(),
        "demo",
        &[
            (
                "src/lib.rs",
                "//! ```\n//! assert_eq!(demo::one(), 1);\n//! ```\npub fn one() -> i32 { 1 }\n\
                 #[cfg(test)]\nmod unit { #[test] fn unit_passes() { assert_eq!(super::one(), 1) } }\n",
            ),
            // Runs first: its abort must not stop the binaries after it.
            (
                "tests/aborting.rs",
                "#[test] fn aborts() { std::process::abort() }\n",
            ),
            // The failed test's captured output holds lines in cargo's and libtest's form, which are
            // neither counted nor taken for a binary (libtest prints it in the failure report, before
            // the binary's own result line; a header after a result line in it would still be taken).
            (
                "tests/failing.rs",
                "#[test] fn passes() {}\n\
                 #[test] fn fails() {\n\
                     println!(\"     Running tests/fake.rs (target/debug/deps/fake-0123456789abcdef)\");\n\
                     println!(\"test fake ... FAILED\");\n\
                     println!(\"test result: ok. 99 passed; 0 failed; 0 ignored; 0 measured\");\n\
                     panic!(\"expected\")\n\
                 }\n",
            ),
            (
                "tests/passing.rs",
                "#[test] fn a() {}\n#[test] fn b() {}\n#[test] #[ignore] fn slow() {}\n",
            ),
        ],
    );
    let broken = scratch_crate(
        dir.path(),
        "broken",
        &[
            ("src/lib.rs", "pub fn f() {}\n"),
            ("tests/bad.rs", "#[test] fn x() { let _: u8 = \"s\"; }\n"),
        ],
    );
    let (demo, broken) = (demo.display(), broken.display());
    let out = with_counts(
        dir.path(),
        &format!(
            "run_tests cargo test --manifest-path {demo}\n\
             run_tests cargo test --manifest-path {demo} --test passing -- --exact a\n\
             run_tests cargo test --manifest-path {broken}\n\
             step false\n\
             tests_summary"
        ),
    );
    let (counts, problems) = closing(&out);
    // Run 1: the unit test, failing's pass, passing's two and the doc test passed, `fails` failed,
    // `slow` was ignored; run 2: `a` again.
    assert_eq!(
        counts,
        "6 passed, 1 failed, 1 ignored in 3 cargo test runs",
        "{}",
        shown(&out)
    );
    let want = [
        "did not finish: aborting tests/aborting.rs (run 1: signal: 6, SIGABRT: process abort signal)",
        "test failed: fails in failing tests/failing.rs (run 1)",
        "did not compile: `broken` (test \"bad\") (run 3: none of its tests ran)",
        "step failed: false (exit 1)",
    ];
    assert_eq!(problems, want, "{}", shown(&out));
    assert_eq!(out.status.code(), Some(1), "{}", shown(&out));
    // Each binary's own output is in the log, as cargo printed it.
    let stdout = String::from_utf8_lossy(&out.stdout);
    for line in [
        "test result: ok. 2 passed; 0 failed; 1 ignored",
        "test result: FAILED. 1 passed; 1 failed; 0 ignored",
        "error: could not compile `broken` (test \"bad\")",
    ] {
        assert!(stdout.contains(line), "{line:?} missing: {}", shown(&out));
    }
}

/// Cargo killed between binaries: the binaries it listed and never started are named, and so is the
/// run; the test that ran before is counted.
#[test]
fn binaries_that_never_started_are_named() {
    let dir = TempDir::new("test-command-killed");
    let killed = scratch_crate(
        dir.path(),
        "killed",
        &[
            ("src/lib.rs", "pub fn f() {}\n"),
            // Test binaries are cargo's children: this one ends its parent, as an OOM kill would.
            (
                "tests/a_kills_cargo.rs",
                "#[test] fn kills() {\n\
                     let cargo = std::os::unix::process::parent_id().to_string();\n\
                     let s = std::process::Command::new(\"kill\").args([\"-KILL\", &cargo]).status();\n\
                     assert!(s.unwrap().success());\n\
                 }\n",
            ),
            ("tests/b_never_runs.rs", "#[test] fn never() {}\n"),
        ],
    );
    let out = with_counts(
        dir.path(),
        &format!(
            "run_tests cargo test --manifest-path {}\ntests_summary",
            killed.display()
        ),
    );
    let (counts, problems) = closing(&out);
    assert_eq!(
        counts,
        "1 passed, 0 failed, 0 ignored in 1 cargo test run",
        "{}",
        shown(&out)
    );
    assert_eq!(
        problems,
        [
            "did not run: b_never_runs tests/b_never_runs.rs (run 1)",
            "cargo test was killed by signal 9 (run 1: its doc tests, if any, did not run)",
        ],
        "{}",
        shown(&out)
    );
    assert_eq!(out.status.code(), Some(1));
}

/// All green: the closing line is the counts alone and the status is 0.
#[test]
fn a_green_run_closes_with_the_counts_alone() {
    let dir = TempDir::new("test-command-green");
    let green = scratch_crate(
        dir.path(),
        "green",
        &[
            (
                "src/lib.rs",
                "#[cfg(test)]\nmod t { #[test] fn one() {} }\n",
            ),
            (
                "tests/it.rs",
                "#[test] fn two() {}\n#[test] fn three() {}\n",
            ),
        ],
    );
    let out = with_counts(
        dir.path(),
        &format!(
            "step true\nrun_tests cargo test --manifest-path {}\ntests_summary",
            green.display()
        ),
    );
    let (counts, problems) = closing(&out);
    assert_eq!(
        counts,
        "3 passed, 0 failed, 0 ignored in 1 cargo test run",
        "{}",
        shown(&out)
    );
    assert!(problems.is_empty(), "{}", shown(&out));
    assert!(out.status.success(), "{}", shown(&out));
}

/// scripts/test.sh sends every `cargo test` through run_tests and every other command that can fail the
/// run through `step`, and ends with the summary.
#[test]
fn scripts_test_sh_runs_every_step_through_the_counts() {
    let script = std::fs::read_to_string(repo().join("scripts/test.sh")).unwrap();
    let source = script
        .find("source scripts/test-counts.sh")
        .expect("scripts/test.sh sources scripts/test-counts.sh");
    let mut continued = false;
    for line in script[source..].lines().skip(1) {
        let top_level = !continued && !line.starts_with([' ', '\t', '#', '}']) && !line.is_empty();
        continued = line.ends_with('\\');
        if !top_level || line.contains("() {") || line.starts_with("E2E_") {
            continue;
        }
        let ok = line.starts_with("step ")
            || line.starts_with("run_tests cargo test ")
            || line == "tests_summary";
        assert!(
            ok,
            "scripts/test.sh runs a command outside step/run_tests: {line}"
        );
    }
    for line in script.lines().filter(|l| l.contains("cargo test")) {
        let l = line.trim_start();
        assert!(
            l.starts_with('#') || l.starts_with("run_tests cargo test"),
            "scripts/test.sh runs `cargo test` outside run_tests: {line}"
        );
    }
    assert_eq!(
        script.trim_end().lines().last(),
        Some("tests_summary"),
        "scripts/test.sh must end with the summary"
    );
}
