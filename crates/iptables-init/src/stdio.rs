//! The process's standard output and error where the library does not write through `print!`: the
//! rules and explanations, clap's messages and the log. Unit tests get writers through `print!` and
//! `eprint!` instead, which the test harness captures per test: what a test provokes on purpose (a
//! usage error, the namespace tests' log lines, an explanation) stays out of the test log, and a failing
//! test still shows it.

#[cfg(not(test))]
pub(crate) fn out() -> std::io::StdoutLock<'static> {
    std::io::stdout().lock()
}

#[cfg(not(test))]
pub(crate) fn err() -> std::io::Stderr {
    std::io::stderr()
}

/// Prints a clap message (an error, the help, the version) where clap prints it.
#[cfg(not(test))]
pub(crate) fn print_clap(e: &clap::Error) {
    let _ = e.print();
}

#[cfg(test)]
pub(crate) fn out() -> Captured {
    Captured { err: false }
}

#[cfg(test)]
pub(crate) fn err() -> Captured {
    Captured { err: true }
}

#[cfg(test)]
pub(crate) fn print_clap(e: &clap::Error) {
    let text = e.render().to_string();
    if e.use_stderr() {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

/// A writer through the captured print macros (unit tests only).
#[cfg(test)]
pub(crate) struct Captured {
    err: bool,
}

#[cfg(test)]
impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        if self.err {
            eprint!("{text}");
        } else {
            print!("{text}");
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    const CHILD: &str = "IPTABLES_INIT_STDIO_CHILD";

    /// Runs this very test again in a child test process, which provokes a usage error, an explanation
    /// and a log line: the harness captures them all, so the child's stderr is empty and its stdout
    /// only the harness's own lines.
    #[test]
    fn what_a_test_provokes_is_captured_by_the_harness() {
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        if std::env::var_os(CHILD).is_some() {
            assert_ne!(
                crate::run(args(&["iptables-init", "--no-such-flag"])),
                std::process::ExitCode::SUCCESS
            );
            let explain = [
                "iptables-init",
                "explain",
                "--connection",
                "outbound:tcp:10.0.0.5:5432",
            ];
            assert_eq!(crate::run(args(&explain)), std::process::ExitCode::SUCCESS);
            // explain installed the logger.
            tracing::warn!("a provoked log line");
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let out = Command::new(exe)
            .args([
                "--exact",
                "stdio::tests::what_a_test_provokes_is_captured_by_the_harness",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("running the test binary");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(
            stdout.contains("1 passed"),
            "the child ran no test: {stdout}"
        );
        assert_eq!(stderr, "", "written past the harness");
        for leaked in ["--no-such-flag", "10.0.0.5", "a provoked log line"] {
            assert!(
                !stdout.contains(leaked),
                "{leaked:?} written past the harness: {stdout}"
            );
        }
    }
}
