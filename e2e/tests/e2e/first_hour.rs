//! What a new user meets in the first hour, run as they would run it: logs read through a pipe or a file
//! (`kubectl logs`, a CI log) carry no colour codes, the messages of a mistyped flag name the flag, the
//! value and what would be accepted (the test log's closing line: test_command.rs).

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::apiserver::{injector_certs, TempDir};

fn assert_no_escape(what: &str, stderr: &[u8]) {
    assert!(
        !stderr.contains(&0x1b),
        "{what}: ANSI escape codes in a log written to a pipe: {:?}",
        String::from_utf8_lossy(stderr)
    );
}

#[test]
fn serve_logs_to_a_pipe_without_colour() {
    let dir = TempDir::new("first-hour-serve");
    let certs = injector_certs(&dir.path().join("certs"), &[]).unwrap();
    let ports = dir.path().join("ports");
    let mut child = Command::new(e2e::bin("injector"))
        .arg("serve")
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .arg("--port-file")
        .arg(&ports)
        .arg("--tls-cert")
        .arg(&certs.cert)
        .arg("--tls-key")
        .arg(&certs.key)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Listening (it has logged that line by then), then SIGTERM: it logs its shutdown and exits.
    let deadline = Instant::now() + e2e::PATIENCE;
    while !ports.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("injector serve exited with {status} before listening");
        }
        assert!(
            Instant::now() < deadline,
            "injector serve did not listen in 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let mut stderr = Vec::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_end(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    let text = String::from_utf8_lossy(&stderr);
    assert!(
        text.contains("injector webhook listening") && text.contains("shutting down"),
        "{text}"
    );
    assert_no_escape("injector serve", &stderr);
}

#[test]
fn iptables_init_logs_to_a_pipe_without_colour() {
    let out = Command::new(e2e::bin("iptables-init"))
        .args([
            "istio-iptables",
            "-p",
            "15001",
            "--ipv6",
            "false",
            "--dry-run",
            "--log_output_level=debug",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("DEBUG"),
        "no log lines to check: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_no_escape("iptables-init", &out.stderr);
    // The final error is a log line too.
    let out = Command::new(e2e::bin("iptables-init"))
        .args(["istio-iptables", "-p", "none", "--dry-run"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    assert_no_escape("iptables-init's error", &out.stderr);
}

#[test]
fn a_listen_port_out_of_range_is_named_with_the_range() {
    for flag in ["--listen", "--metrics-listen"] {
        let out = Command::new(e2e::bin("injector"))
            .args(["serve", flag, "127.0.0.1:99999"])
            .args(["--tls-cert", "none", "--tls-key", "none"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!("invalid value '127.0.0.1:99999' for '{flag} <"))
                && stderr.contains("port 99999 is out of range (0-65535)"),
            "{stderr}"
        );
    }
}

#[test]
fn a_missing_file_is_named_by_its_flag_in_every_command() {
    let dir = TempDir::new("first-hour-missing");
    let missing = dir.path().join("nosuch.yaml").display().to_string();
    for (args, flag) in [
        (vec!["kube-inject", "-f", &missing], "-f"),
        (vec!["explain", "-f", &missing], "-f"),
        (
            vec!["kube-inject", "-f", "-", "--mesh-config", &missing],
            "--mesh-config",
        ),
        (
            vec!["doctor", "--webhook-config", &missing],
            "--webhook-config",
        ),
    ] {
        let out = Command::new(e2e::bin("injector"))
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr,
            format!("Error: {flag} {missing}: No such file or directory (os error 2)\n"),
            "{args:?}"
        );
    }
}
