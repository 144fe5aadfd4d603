//! Thin main: `cargo run -p xtask -- docs [--check]`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "xtask", about = "The project's own tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Write the generated reference pages under docs/reference/ (and the chart's files/policy.json).
    Docs {
        /// Write nothing: report what differs and exit 1 if anything does.
        #[arg(long)]
        check: bool,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    let Task::Docs { check } = Cli::parse().task;
    let root = xtask::docs::workspace_root();
    let pages = xtask::docs::pages();
    if check {
        let report = xtask::docs::drift(&root, &pages);
        if report.is_empty() {
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("{report}regenerate with `{}`", xtask::docs::REGENERATE);
        return Ok(ExitCode::FAILURE);
    }
    for page in &pages {
        let path = root.join(page.path);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(page.text.as_str()) {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(&path, &page.text)?;
            println!("wrote {}", page.path);
        }
    }
    Ok(ExitCode::SUCCESS)
}
