//! The README shows real output: every code block of the README whose commands run `injector explain` or
//! `iptables-init explain` is run again with the built binaries (in a scratch directory that sees the
//! repository's `examples/`), and its printed output must be what the block shows, byte for byte. Those
//! commands read nothing but their arguments, so their output cannot drift from the code unnoticed.

#![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

use std::path::{Path, PathBuf};
use std::process::Command;

use test_support::tempdir::TempDir;

/// One `$ command` of a block (continuation lines joined) and the output lines shown under it.
#[derive(Debug)]
struct Step {
    command: String,
    output: String,
}

/// A code block of the README: the line it starts on and its steps.
#[derive(Debug)]
struct Block {
    line: usize,
    steps: Vec<Step>,
}

/// The README's code blocks that show commands (`$ ` lines), in order.
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

/// Whether a block is one of the explain walk-throughs this test replays.
fn is_explain(block: &Block) -> bool {
    block.steps.iter().any(|s| {
        s.command.starts_with("injector explain ")
            || s.command.starts_with("iptables-init explain ")
    })
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
fn readme_explain_blocks_are_the_real_output() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let blocks: Vec<Block> = console_blocks(&readme)
        .into_iter()
        .filter(is_explain)
        .collect();
    // The iptables-init explain section has four blocks, the injector walk-through three.
    assert!(
        blocks.len() >= 7,
        "expected the README's explain blocks, found {}",
        blocks.len()
    );

    let path = format!(
        "{}:{}:{}",
        dir_of(&e2e::bin("injector")).display(),
        dir_of(&e2e::bin("iptables-init")).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failures = Vec::new();
    for block in &blocks {
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
                    "README.md block at line {}: `{}` (exit {:?}, stderr {:?})\n--- README shows\n{}--- the command prints\n{}",
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
