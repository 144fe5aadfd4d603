//! Which iptables does this network namespace use — legacy (x_tables) or nft — and running its binaries.
//!
//! Istio's detection (its `dependencies` package) probes each candidate with `B-save`, `B-save --version` and
//! a write probe (`B -t nat -A INPUT -p 255 -j RETURN` and its delete): up to eight processes per family. The
//! write probe on legacy has a side effect: it instantiates an empty legacy `nat` table, after which a second
//! run sees "legacy has existing rules" (its save prints the empty table) and switches backend, although the
//! first run installed its rules with nft.
//!
//! We decide the same question (prefer legacy only when legacy is already in use, else nft, else plain
//! `iptables`) without writing anything and with fewer processes:
//! * legacy is "in use" only when it holds at least one **rule**; an empty table (left by a module load or
//!   by Istio's probe) does not count. We first read `/proc/net/ip_tables_names` (`ip6_tables_names`),
//!   which lists the legacy tables instantiated in this namespace; when it is missing or empty, legacy
//!   cannot hold rules and `iptables-legacy-save` is not even run;
//! * nft is usable when `iptables-nft-save` succeeds; its output doubles as the state dump, so detecting
//!   nft costs one process that the state check needs anyway;
//! * no write probe: an unusable backend shows up as a failing restore, reported with the backend's name.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use crate::config::Family;

use super::error::ApplyError;

/// The two iptables backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// x_tables (`iptables-legacy`).
    Legacy,
    /// nf_tables (`iptables-nft`).
    Nft,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Legacy => "legacy",
            Kind::Nft => "nf_tables",
        }
    }
}

/// The binaries to use for one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub family: Family,
    pub kind: Kind,
    /// e.g. `iptables-nft-save`.
    pub save: String,
    /// e.g. `iptables-nft-restore`.
    pub restore: String,
    /// Append `--wait=30` to restores (legacy ≥ 1.6.2, which takes the xtables lock).
    pub wait: bool,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.restore, self.kind.as_str())
    }
}

/// A detected backend and the `-save` output read while detecting it (the current state).
#[derive(Debug, Clone)]
pub struct Detected {
    pub backend: Backend,
    pub dump: String,
}

fn base(family: Family) -> &'static str {
    match family {
        Family::V4 => "iptables",
        Family::V6 => "ip6tables",
    }
}

/// Runs `program args`, feeding `stdin` when given; the output is captured.
pub fn run(program: &str, args: &[&str], stdin: Option<&str>) -> std::io::Result<Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    if let Some(input) = stdin {
        if let Some(mut pipe) = child.stdin.take() {
            // A restore that dies early closes its stdin; its exit status and stderr tell why.
            let _ = pipe.write_all(input.as_bytes());
        }
    }
    child.wait_with_output()
}

/// The first `vX.Y[.Z]` in `text`.
pub fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let bytes = text.as_bytes();
    for i in 0..bytes.len() {
        if bytes[i] != b'v' || !bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            continue;
        }
        let rest = &text[i + 1..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let mut parts = rest[..end].split('.').map(|p| p.parse::<u32>().ok());
        let major = parts.next().flatten()?;
        let minor = parts.next().flatten()?;
        let patch = parts.next().flatten().unwrap_or(0);
        return Some((major, minor, patch));
    }
    None
}

/// `--wait` exists in legacy restore from 1.6.2 on.
fn legacy_wait(version: Option<(u32, u32, u32)>) -> bool {
    version.is_some_and(|v| v >= (1, 6, 2))
}

/// Runs `<save>` and returns its stdout, or why it failed.
fn save(program: &str) -> Result<String, String> {
    match run(program, &[], None) {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(out) => Err(format!(
            "{program} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Err(e) => Err(format!("{program}: {e}")),
    }
}

/// The version printed by `<save> --version` (used only when the dump has no header to read it from).
fn version_of(program: &str, dump: &str) -> Option<(u32, u32, u32)> {
    parse_version(dump).or_else(|| {
        let out = run(program, &["--version"], None).ok()?;
        parse_version(&String::from_utf8_lossy(&out.stdout))
    })
}

fn make(family: Family, kind: Kind, save_bin: String, restore: String, dump: String) -> Detected {
    let wait = kind == Kind::Legacy && legacy_wait(version_of(&save_bin, &dump));
    Detected {
        backend: Backend {
            family,
            kind,
            save: save_bin,
            restore,
            wait,
        },
        dump,
    }
}

/// Whether legacy tables are instantiated in this namespace (cheap: a procfs read, no process).
fn legacy_tables_present(family: Family) -> bool {
    let name = match family {
        Family::V4 => "ip_tables_names",
        Family::V6 => "ip6_tables_names",
    };
    // `thread-self`: `/proc/net` follows the thread-group leader, which may sit in another namespace than
    // the calling thread (tests enter namespaces per thread).
    ["/proc/thread-self/net/", "/proc/net/"]
        .iter()
        .find_map(|dir| std::fs::read_to_string(format!("{dir}{name}")).ok())
        .is_some_and(|s| !s.trim().is_empty())
}

/// Detects the backend for `family`. `force` is `FORCE_IPTABLES_BINARY` (`legacy` or `nft`).
pub fn detect(family: Family, force: Option<&str>) -> Result<Detected, ApplyError> {
    let b = base(family);
    let mut tried = Vec::new();
    match force {
        Some(f @ ("legacy" | "nft")) => {
            let kind = if f == "legacy" {
                Kind::Legacy
            } else {
                Kind::Nft
            };
            let save_bin = format!("{b}-{f}-save");
            return match save(&save_bin) {
                Ok(dump) => Ok(make(
                    family,
                    kind,
                    save_bin,
                    format!("{b}-{f}-restore"),
                    dump,
                )),
                Err(e) => Err(ApplyError::NoBackend {
                    family,
                    tried: vec![format!("{e} (forced by FORCE_IPTABLES_BINARY={f})")],
                }),
            };
        }
        Some(other) if !other.is_empty() => {
            return Err(ApplyError::NoBackend {
                family,
                tried: vec![format!(
                    "FORCE_IPTABLES_BINARY={other:?} is neither \"legacy\" nor \"nft\""
                )],
            });
        }
        _ => {}
    }

    if legacy_tables_present(family) {
        let save_bin = format!("{b}-legacy-save");
        match save(&save_bin) {
            Ok(dump) if super::state::Dump::parse(&dump).has_rules() => {
                return Ok(make(
                    family,
                    Kind::Legacy,
                    save_bin,
                    format!("{b}-legacy-restore"),
                    dump,
                ));
            }
            Ok(_) => tried.push(format!("{save_bin}: legacy tables hold no rules")),
            Err(e) => tried.push(e),
        }
    }
    let save_bin = format!("{b}-nft-save");
    match save(&save_bin) {
        Ok(dump) => {
            return Ok(make(
                family,
                Kind::Nft,
                save_bin,
                format!("{b}-nft-restore"),
                dump,
            ))
        }
        Err(e) => tried.push(e),
    }
    let save_bin = format!("{b}-save");
    match save(&save_bin) {
        Ok(dump) => {
            let kind = match run(&save_bin, &["--version"], None) {
                Ok(out) if String::from_utf8_lossy(&out.stdout).contains("nf_tables") => Kind::Nft,
                _ => Kind::Legacy,
            };
            Ok(make(family, kind, save_bin, format!("{b}-restore"), dump))
        }
        Err(e) => {
            tried.push(e);
            Err(ApplyError::NoBackend { family, tried })
        }
    }
}

/// Where `program` is: the first `PATH` directory holding a file of that name (a filesystem check, no
/// process).
fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

/// The backend for the optimistic first attempt, chosen without running any process: nft, when no legacy
/// table is instantiated in this namespace (so legacy cannot hold rules) and the nft binaries are
/// installed, or when nft is forced. `None` means: use [`detect`] (which reads the state).
pub fn detect_without_exec(family: Family, force: Option<&str>) -> Option<Backend> {
    locate_without_exec(family, force).map(|(backend, _)| backend)
}

/// [`detect_without_exec`], plus the restore binary's path when the `PATH` search found it (`None` when
/// nft is forced but not installed: the usual path then reports that). The exec path runs that path
/// directly: a program name would make the exec search `PATH` again, one failing `execve` per directory
/// before the right one.
pub fn locate_without_exec(
    family: Family,
    force: Option<&str>,
) -> Option<(Backend, Option<PathBuf>)> {
    let b = base(family);
    let nft = Backend {
        family,
        kind: Kind::Nft,
        save: format!("{b}-nft-save"),
        restore: format!("{b}-nft-restore"),
        wait: false,
    };
    match force {
        Some("nft") => {
            let path = find_on_path(&nft.restore);
            Some((nft, path))
        }
        Some(f) if !f.is_empty() => None,
        _ if legacy_tables_present(family) => None,
        _ => find_on_path(&nft.restore).map(|path| (nft, Some(path))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(
            parse_version("# Generated by iptables-save v1.8.9 on Sun"),
            Some((1, 8, 9))
        );
        assert_eq!(
            parse_version("iptables-restore v1.6 (legacy)"),
            Some((1, 6, 0))
        );
        assert_eq!(parse_version("nothing here, vX"), None);
        assert!(legacy_wait(Some((1, 6, 2))));
        assert!(!legacy_wait(Some((1, 6, 1))));
        assert!(!legacy_wait(None));
    }

    #[test]
    fn forced_backends_without_a_process() {
        // The machine running the tests has iptables-nft installed (the netns tests need it).
        let (b, path) = locate_without_exec(Family::V4, Some("nft")).expect("nft forced");
        assert_eq!(
            (b.kind, b.restore.as_str()),
            (Kind::Nft, "iptables-nft-restore")
        );
        assert!(
            path.as_deref()
                .is_some_and(|p| p.ends_with("iptables-nft-restore") && p.is_absolute()),
            "{path:?}"
        );
        assert!(locate_without_exec(Family::V4, Some("legacy")).is_none());
        assert!(locate_without_exec(Family::V6, Some("bogus")).is_none());
    }
}
