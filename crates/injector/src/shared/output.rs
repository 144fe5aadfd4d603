//! The output format of the subcommands that report (`doctor`, `explain`): text for people, one JSON
//! object for tools, chosen by `-o`.

use serde::Serialize;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

/// Prints `report` on stdout as pretty JSON and a newline (an `{"error": …}` object should it not
/// serialise).
pub fn print_json(report: &impl Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    );
}
