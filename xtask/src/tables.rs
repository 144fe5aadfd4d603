//! Markdown tables from the definitions `sources` reaches: flags (iptables-init's own table and clap
//! commands), exit statuses and error codes, metrics, annotations.

use crate::sources::{Annotation, Fallback, Flag, Kind};

/// The reference page that lists iptables-init's flags (annotations link into it).
const FLAGS_PAGE: &str = "iptables-init-flags.md";

/// A Markdown table: the header cells, then one row of cells each. Cells are escaped here.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push_str(&format!("|{}\n", " --- |".repeat(header.len())));
    for row in rows {
        out.push('|');
        for c in row {
            let c = cell(c);
            // An empty cell is `| |`, not `|  |`.
            out.push_str(&if c.is_empty() {
                " |".to_string()
            } else {
                format!(" {c} |")
            });
        }
        out.push('\n');
    }
    out
}

/// Text as one table cell: lines joined with spaces, `|` escaped.
fn cell(text: &str) -> String {
    let joined: Vec<&str> = text.split_whitespace().collect();
    joined.join(" ").replace('|', "\\|")
}

/// `text` in backticks.
fn code(text: &str) -> String {
    format!("`{text}`")
}

/// iptables-init's flags: the columns its flag tables have always had.
pub fn iptables_init_flags(flags: &[&Flag]) -> String {
    let rows: Vec<Vec<String>> = flags
        .iter()
        .map(|f| {
            vec![
                code(&format!("--{}", f.long)),
                f.short.map(|s| code(&format!("-{s}"))).unwrap_or_default(),
                match f.default {
                    Fallback::Empty => "empty".to_string(),
                    Fallback::Off => "false".to_string(),
                    Fallback::Value(v) => code(v),
                    Fallback::Derived { readme, .. } => readme.to_string(),
                },
                if f.env.is_empty() {
                    "(none)".to_string()
                } else {
                    let names: Vec<String> = f.env.iter().map(|e| code(e)).collect();
                    names.join(", then ")
                },
                meaning(f),
            ]
        })
        .collect();
    table(
        &["Long", "Short", "Default", "Environment", "Meaning"],
        &rows,
    )
}

/// A flag's help, with its choices when it has them (as `--help` lists them).
fn meaning(flag: &Flag) -> String {
    let mut text = flag.help.to_string();
    if let Kind::Choice(choices) = flag.kind {
        let listed: Vec<String> = choices
            .iter()
            .map(|(word, help)| format!("{}: {help}", code(word)))
            .collect();
        text.push_str(&format!(". {}", listed.join("; ")));
    }
    text
}

/// The arguments of a clap command (hidden ones and clap's own `--help`/`--version` left out).
pub fn clap_flags(command: &clap::Command) -> String {
    let rows: Vec<Vec<String>> = command
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .map(|a| {
            let takes_value = a.get_action().takes_values();
            let meaning = a
                .get_long_help()
                .or(a.get_help())
                .map(|h| h.to_string())
                .unwrap_or_default();
            // clap drops a one-paragraph help's final period; drop every help's, for one style.
            let mut meaning = meaning.trim_end().trim_end_matches('.').to_string();
            if a.is_required_set() {
                meaning.push_str(" (required)");
            }
            let defaults: Vec<String> = a
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            let default = if !takes_value || defaults.iter().all(String::is_empty) {
                String::new()
            } else {
                code(&defaults.join(","))
            };
            vec![
                flag_usage(a, takes_value),
                default,
                a.get_env()
                    .map(|e| code(&e.to_string_lossy()))
                    .unwrap_or_default(),
                meaning,
            ]
        })
        .collect();
    table(&["Flag", "Default", "Environment", "Meaning"], &rows)
}

/// How a flag is written: `-f`, `--filename FILE`, with its aliases and, for a closed set of values,
/// the values.
fn flag_usage(arg: &clap::Arg, takes_value: bool) -> String {
    let value = if takes_value {
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|p| !p.is_hide_set())
            .map(|p| p.get_name().to_string())
            .collect();
        let name = if !possible.is_empty() && possible != ["true", "false"] {
            possible.join("|")
        } else {
            arg.get_value_names().and_then(|n| n.first()).map_or_else(
                || arg.get_id().to_string().to_uppercase(),
                |n| n.to_string(),
            )
        };
        let optional = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        if optional {
            format!("[={name}]")
        } else {
            format!(" {name}")
        }
    } else {
        String::new()
    };
    let mut names = Vec::new();
    if let Some(s) = arg.get_short() {
        names.push(code(&format!("-{s}")));
    }
    match arg.get_long() {
        Some(long) => names.push(code(&format!("--{long}{value}"))),
        None => names.push(code(value.trim())),
    }
    let mut usage = names.join(", ");
    let aliases = arg.get_all_aliases().unwrap_or_default();
    if !aliases.is_empty() {
        let aliases: Vec<String> = aliases.iter().map(|a| code(&format!("--{a}"))).collect();
        usage.push_str(&format!(" (also {})", aliases.join(", ")));
    }
    usage
}

/// Exit statuses (`None`: any other non-zero status) and their causes.
pub fn exit_statuses(statuses: &[(Option<u8>, &str)]) -> String {
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|(status, cause)| {
            vec![
                status.map_or_else(|| "other non-zero".to_string(), |s| s.to_string()),
                cause.to_string(),
            ]
        })
        .collect();
    table(&["Status", "Cause"], &rows)
}

/// CNI error codes and when each is answered.
pub fn error_codes(codes: &[(u32, &str)]) -> String {
    let rows: Vec<Vec<String>> = codes
        .iter()
        .map(|(c, when)| vec![c.to_string(), when.to_string()])
        .collect();
    table(&["Code", "When"], &rows)
}

/// The metrics of an OpenMetrics exposition, as scraped (counters with their `_total`), with the label
/// names their samples carry (a histogram's `le` aside).
pub fn metrics(exposition: &str) -> Result<String, String> {
    // (scraped name, type, help, label names)
    let mut found: Vec<(String, String, String, Vec<String>)> = Vec::new();
    let mut help: Option<(String, String)> = None;
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name.to_string(), unescape(text)));
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| format!("a TYPE line without a type: {line:?}"))?;
            let text = match help.take() {
                Some((n, text)) if n == name => text,
                _ => return Err(format!("no HELP line before {line:?}")),
            };
            let scraped = if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            };
            found.push((scraped, kind.to_string(), text, Vec::new()));
        } else if !line.starts_with('#') && !line.is_empty() {
            let labels = &mut found
                .last_mut()
                .ok_or_else(|| format!("a sample before any TYPE line: {line:?}"))?
                .3;
            if let Some((_, rest)) = line.split_once('{') {
                let inside = rest.split_once('}').map_or(rest, |(l, _)| l);
                for pair in inside.split(',') {
                    let key = pair.split_once('=').map_or(pair, |(k, _)| k);
                    if key != "le" && !labels.iter().any(|l| l == key) {
                        labels.push(key.to_string());
                    }
                }
            }
        }
    }
    if found.is_empty() {
        return Err("the exposition lists no metric".to_string());
    }
    let rows: Vec<Vec<String>> = found
        .into_iter()
        .map(|(name, kind, text, labels)| {
            let labels: Vec<String> = labels.iter().map(|l| code(l)).collect();
            vec![code(&name), kind, labels.join(", "), text]
        })
        .collect();
    Ok(table(&["Metric", "Type", "Labels", "Meaning"], &rows))
}

/// A HELP text as OpenMetrics escapes it (`\\`, `\n`).
fn unescape(text: &str) -> String {
    text.replace("\\n", "\n").replace("\\\\", "\\")
}

/// The pod annotations both binaries read, in the definition's order, with the istio-iptables flag each
/// value becomes (linked to its row of the flags page).
pub fn annotations(annotations: &[&Annotation]) -> String {
    let rows: Vec<Vec<String>> = annotations
        .iter()
        .map(|a| {
            vec![
                code(a.name),
                a.flag.map_or_else(
                    || "(decides whether the pod is handled)".to_string(),
                    |f| format!("[`--{}`]({FLAGS_PAGE})", f.long),
                ),
            ]
        })
        .collect();
    table(
        &["Annotation", "istio-iptables flag its value becomes"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // Tests: a failed unwrap is a failed test.

    use super::*;

    #[test]
    fn cells_are_one_line_with_bars_escaped() {
        assert_eq!(cell("a |b\n  c"), "a \\|b c");
        let t = table(&["A", "B"], &[vec!["x|y".into(), "z".into()]]);
        assert_eq!(t, "| A | B |\n| --- | --- |\n| x\\|y | z |\n");
    }

    #[test]
    fn metrics_are_listed_as_scraped() {
        let text = "# HELP a_requests Requests.\n# TYPE a_requests counter\n\
                    a_requests_total{type=\"x\",result=\"y\"} 0\n\
                    # HELP b Bytes \\\\ held.\n# TYPE b gauge\nb 0\n\
                    # HELP t Time.\n# TYPE t histogram\nt_bucket{le=\"1.0\"} 0\nt_sum 0\n# EOF\n";
        assert_eq!(
            metrics(text).unwrap(),
            "| Metric | Type | Labels | Meaning |\n| --- | --- | --- | --- |\n\
             | `a_requests_total` | counter | `type`, `result` | Requests. |\n\
             | `b` | gauge | | Bytes \\ held. |\n| `t` | histogram | | Time. |\n"
        );
        assert!(metrics("# TYPE x counter\n").is_err());
        assert!(metrics("# EOF\n").is_err());
    }

    #[test]
    fn clap_flags_show_values_aliases_defaults_and_variables() {
        let cmd = clap::Command::new("t")
            .arg(
                clap::Arg::new("file")
                    .short('f')
                    .long("filename")
                    .value_name("FILE")
                    .required(true)
                    .help("The input."),
            )
            .arg(
                clap::Arg::new("values")
                    .long("values")
                    .alias("valuesFile")
                    .env("VALUES")
                    .default_value("v.json")
                    .help("Values | more"),
            )
            .arg(
                clap::Arg::new("mode")
                    .long("mode")
                    .value_parser(["a", "b"])
                    .default_value("a"),
            )
            .arg(
                clap::Arg::new("on")
                    .long("on")
                    .action(clap::ArgAction::SetTrue)
                    .help("Switch"),
            );
        assert_eq!(
            clap_flags(&cmd),
            "| Flag | Default | Environment | Meaning |\n| --- | --- | --- | --- |\n\
             | `-f`, `--filename FILE` | | | The input (required) |\n\
             | `--values VALUES` (also `--valuesFile`) | `v.json` | `VALUES` | Values \\| more |\n\
             | `--mode a\\|b` | `a` | | |\n\
             | `--on` | | | Switch |\n"
        );
    }
}
