//! The documentation shows real output: every code block of README.md and of the pages under docs/ whose
//! commands run an offline command ([`REPLAYED`]: `injector explain`, `injector policy`, `iptables-init explain`,
//! `injector kube-inject` of the repository's examples, istio-cni's `VERSION`) is run again with the built
//! binaries (in a scratch directory that sees the repository's `examples/`), and its printed output must
//! be what the block shows, byte for byte. Those commands read nothing but their arguments and the
//! examples, so their output cannot drift from the code unnoticed, wherever the block lives.
//!
//! The blocks a newcomer runs first — the README's opening block and "Run it locally" (found on whichever
//! page holds that heading) — are replayed as scripts, as written, from a scratch directory laid out like
//! the repository's root (`examples/`, and the built binaries where `target/debug/` and `target/release/`
//! would hold them); only their `cargo` build lines and the full test run are left out, which is what this
//! test runs inside.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use test_support::tempdir::TempDir;

/// One `$ command` of a block (continuation lines joined) and the output lines shown under it.
#[derive(Debug)]
struct Step {
    command: String,
    output: String,
}

/// A code block of a page: the line it starts on and its steps.
#[derive(Debug)]
struct Block {
    line: usize,
    steps: Vec<Step>,
}

/// The repository's root.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The pages whose blocks are checked: README.md and every Markdown file under docs/, each with its path
/// relative to the repository's root and its text.
fn pages() -> Vec<(String, String)> {
    let root = repo();
    let mut paths = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let name = p.strip_prefix(&root).unwrap().display().to_string();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// A page's code blocks that show commands (`$ ` lines), in order.
fn console_blocks(readme: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut lines = readme.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        if !line.starts_with("```") {
            continue;
        }
        let mut block = Block {
            line: n + 1,
            steps: Vec::new(),
        };
        let mut continued = false;
        for (_, line) in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            if continued {
                let step = block.steps.last_mut().unwrap();
                step.command.push('\n');
                step.command.push_str(line);
                continued = line.ends_with('\\');
            } else if let Some(command) = line.strip_prefix("$ ") {
                block.steps.push(Step {
                    command: command.to_string(),
                    output: String::new(),
                });
                continued = line.ends_with('\\');
            } else if let Some(step) = block.steps.last_mut() {
                step.output.push_str(line);
                step.output.push('\n');
            }
        }
        if !block.steps.is_empty() {
            blocks.push(block);
        }
    }
    blocks
}

/// The commands whose blocks are replayed: offline, reading only their arguments and `examples/`.
const REPLAYED: &[&str] = &[
    "injector explain ",
    "injector policy ",
    "iptables-init explain ",
    "injector kube-inject -f examples/",
    "echo '{}' | CNI_COMMAND=VERSION istio-cni",
];

/// Whether a block runs one of the [`REPLAYED`] commands (then all its steps are replayed).
fn is_replayed(block: &Block) -> bool {
    block
        .steps
        .iter()
        .any(|s| REPLAYED.iter().any(|p| s.command.starts_with(p)))
}

fn dir_of(path: &Path) -> PathBuf {
    path.parent().unwrap().to_path_buf()
}

/// Whether the output `got` is what the README `shown`: the same lines, where a line `...` in the README
/// stands for any number of lines (the README shortens a repeated list that way).
fn shows(shown: &str, got: &str) -> bool {
    let got: Vec<&str> = got.trim_end().lines().collect();
    let lines: Vec<&str> = shown.trim_end().lines().collect();
    let (mut at, mut i, mut pending_gap) = (0, 0, false);
    while i < lines.len() {
        if lines[i].trim() == "..." {
            pending_gap = true;
            i += 1;
            continue;
        }
        // The run of lines up to the next `...` must appear next (or, after a gap, somewhere later).
        let end = lines[i..]
            .iter()
            .position(|l| l.trim() == "...")
            .map_or(lines.len(), |p| i + p);
        let run = &lines[i..end];
        let found = if pending_gap {
            (at..=got.len().saturating_sub(run.len())).find(|&k| got[k..].starts_with(run))
        } else {
            got[at..].starts_with(run).then_some(at)
        };
        match found {
            Some(k) => at = k + run.len(),
            None => return false,
        }
        pending_gap = false;
        i = end;
    }
    pending_gap || at == got.len()
}

#[test]
fn shown_commands_print_what_the_docs_show() {
    let repo = repo();
    let blocks: Vec<(String, Block)> = pages()
        .into_iter()
        .flat_map(|(page, text)| {
            console_blocks(&text)
                .into_iter()
                .filter(is_replayed)
                .map(move |b| (page.clone(), b))
        })
        .collect();
    // docs/iptables-init.md's explain section has four blocks, docs/explain.md's walk-through three, and
    // the README's tour four.
    let count = |page: &str| blocks.iter().filter(|(p, _)| p == page).count();
    assert!(
        count("docs/iptables-init.md") >= 4 && count("docs/explain.md") >= 3 && count("README.md") >= 4,
        "expected the replayed blocks of docs/iptables-init.md, docs/explain.md and README.md, found {:?}",
        blocks.iter().map(|(p, b)| format!("{p}:{}", b.line)).collect::<Vec<_>>()
    );

    let path = format!(
        "{}:{}:{}:{}",
        dir_of(&e2e::bin("injector")).display(),
        dir_of(&e2e::bin("iptables-init")).display(),
        dir_of(&e2e::bin("istio-cni")).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failures = Vec::new();
    for (page, block) in &blocks {
        // Each block starts from a scratch directory: files one step writes (values.json, mwc.yaml) are
        // seen by the next step of the same block only.
        let scratch = TempDir::new("readme-explain");
        std::os::unix::fs::symlink(repo.join("examples"), scratch.path().join("examples")).unwrap();
        for step in &block.steps {
            let out = Command::new("sh")
                .arg("-c")
                .arg(&step.command)
                .current_dir(scratch.path())
                .env_clear()
                .env("PATH", &path)
                .output()
                .unwrap();
            let got = String::from_utf8_lossy(&out.stdout);
            if !shows(&step.output, &got) {
                failures.push(format!(
                    "{page} block at line {}: `{}` (exit {:?}, stderr {:?})\n--- the page shows\n{}--- the command prints\n{}",
                    block.line,
                    step.command,
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr),
                    step.output,
                    got
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The code block that follows the heading line `heading` (the page's first block for `None`): the
/// line its text starts on and the text.
fn block_after(readme: &str, heading: Option<&str>) -> (usize, String) {
    let mut lines = readme.lines().enumerate();
    if let Some(h) = heading {
        lines
            .by_ref()
            .find(|(_, l)| *l == h)
            .unwrap_or_else(|| panic!("no heading {h:?}"));
    }
    let (n, _) = lines
        .by_ref()
        .find(|(_, l)| l.starts_with("```"))
        .unwrap_or_else(|| panic!("no code block after {heading:?}"));
    let text: Vec<&str> = lines
        .take_while(|(_, l)| !l.starts_with("```"))
        .map(|(_, l)| l)
        .collect();
    (n + 2, text.join("\n") + "\n")
}

/// What a replayed block printed.
struct Replay {
    ok: bool,
    stdout: String,
    stderr: String,
}

/// Runs a page's `sh` block as one bash script (`-e -o pipefail`: the first failing line ends it) in a
/// scratch repository root, with `replace` applied to its text, and cleans up whatever it left running.
fn replay(at: &str, text: &str, replace: &[(&str, String)]) -> Replay {
    let repo = repo();
    let scratch = TempDir::new("readme-replay");
    std::os::unix::fs::symlink(repo.join("examples"), scratch.path().join("examples")).unwrap();
    for (profile, name) in [
        ("debug", "injector"),
        ("debug", "iptables-init"),
        ("debug", "istio-cni"),
        ("release", "injector"),
    ] {
        let dir = scratch.path().join("target").join(profile);
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(e2e::bin(name), dir.join(name)).unwrap();
    }
    // The build lines and the full test run are what this test runs inside.
    let mut script: String = text
        .lines()
        .filter(|l| !l.starts_with("cargo ") && !l.starts_with("bash scripts/test.sh"))
        .map(|l| format!("{l}\n"))
        .collect();
    for (from, to) in replace {
        assert!(script.contains(from), "{at}: no {from:?} to replace");
        script = script.replace(from, to);
    }
    let (out, err) = (scratch.path().join("stdout"), scratch.path().join("stderr"));
    // Its own process group, so a server the block starts in the background is stopped with it even
    // when a line fails before the block's own `kill`.
    let mut child = Command::new("bash")
        .args(["-e", "-o", "pipefail", "-c", &script])
        .current_dir(scratch.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    Replay {
        ok: status.is_some_and(|s| s.success()),
        stdout: std::fs::read_to_string(&out).unwrap(),
        stderr: std::fs::read_to_string(&err).unwrap(),
    }
}

/// A port free on loopback now (the replayed block binds it a moment later).
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

#[test]
fn readme_first_block_runs_as_written() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let (line, text) = block_after(&readme, None);
    let at = format!("README.md:{line}");
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.contains("several minutes")),
        "{at}: the first line should say that the first build takes minutes:\n{text}"
    );
    let r = replay(&at, &text, &[]);
    assert!(r.ok, "{at} failed: {}\n{}", r.stderr, r.stdout);
    // kube-inject's Deployment with the sidecar, then the dry run's rules.
    let injected = r.stdout.find("name: istio-proxy");
    let rules = r.stdout.find("-A ISTIO_OUTPUT");
    assert!(
        injected.is_some() && rules.is_some() && injected < rules,
        "{at}: {}",
        r.stdout
    );
}

#[test]
fn readme_run_it_locally_runs_as_written() {
    // The page that holds the heading: the README's tour today, wherever it moves.
    let heading = "### Run it locally";
    let (page, readme) = pages()
        .into_iter()
        .find(|(_, text)| text.lines().any(|l| l == heading))
        .unwrap_or_else(|| panic!("no page has the heading {heading:?}"));
    let (line, text) = block_after(&readme, Some(heading));
    let at = format!("{page}:{line}");
    let scratch = TempDir::new("readme-local");
    // Fresh ports and certificate directory: other tests (or another checkout's) may run at the same time.
    let r = replay(
        &at,
        &text,
        &[
            ("/tmp/inj", scratch.path().join("inj").display().to_string()),
            ("15017", free_port()),
            ("15014", free_port()),
        ],
    );
    assert!(r.ok, "{at} failed: {}\n{}", r.stderr, r.stdout);
    // /healthz, then the patch of examples/review.json as JSON, then the metrics.
    assert!(r.stdout.starts_with("ok"), "{at}: {}", r.stdout);
    let patch_start = r.stdout.find("\n[").expect("a JSON patch") + 1;
    let patch_end = r.stdout[patch_start..]
        .find("\n]")
        .expect("the patch's end")
        + patch_start
        + 2;
    let patch: serde_json::Value = serde_json::from_str(&r.stdout[patch_start..patch_end]).unwrap();
    // Native sidecars: both arrive as the pod's first init containers.
    let init = patch
        .as_array()
        .unwrap()
        .iter()
        .find(|op| op["op"] == "add" && op["path"] == "/spec/initContainers")
        .unwrap_or_else(|| panic!("{at}: no initContainers in {patch}"));
    let names: Vec<&str> = init["value"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["istio-init", "istio-proxy"], "{at}");
    // The sample configuration was read: its proxy image tag is in the patch.
    assert!(
        r.stdout[patch_start..patch_end].contains("docker.io/istio/proxyv2:1.31.0-rc.0"),
        "{at}: examples/values.json not applied"
    );
    assert!(
        r.stdout[patch_end..].contains("sidecar_injection_requests_total"),
        "{at}: no metrics: {}",
        &r.stdout[patch_end..]
    );
    // serve's log went to a file: no colour codes in it.
    assert!(
        r.stderr.contains("injector webhook listening"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains('\x1b'),
        "ANSI codes in a log file: {:?}",
        r.stderr
    );
}

#[test]
fn console_blocks_split_commands_continuations_and_output() {
    let text = "x\n```console\n$ a \\\n    b\nout 1\nout 2\n$ c > f\n```\n```\nno command\n```\n";
    let blocks = console_blocks(text);
    assert_eq!(blocks.len(), 1);
    assert_eq!(blocks[0].line, 2);
    assert_eq!(blocks[0].steps[0].command, "a \\\n    b");
    assert_eq!(blocks[0].steps[0].output, "out 1\nout 2\n");
    assert_eq!(blocks[0].steps[1].command, "c > f");
    assert_eq!(blocks[0].steps[1].output, "");
}

#[test]
fn an_ellipsis_line_stands_for_any_lines_and_nothing_else_differs() {
    assert!(shows("a\nb\n", "a\nb\n"));
    assert!(shows("a\n  ...\nd\n", "a\nb\nc\nd\n"));
    assert!(shows("a\n...\n", "a\nb\n"));
    assert!(!shows("a\nb\n", "a\nc\n"));
    assert!(!shows("a\n", "a\nb\n"));
    assert!(!shows("a\n...\nd\n", "a\nb\nc\n"));
}
