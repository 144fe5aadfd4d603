//! Istio's log flags (`--log_output_level`, `--log_as_json`, `--log_target`, `--log_caller`,
//! `--log_stacktrace_level`) mapped onto tracing.
//!
//! Logs always go to stderr: stdout carries the `--dry-run` output and must hold nothing else. Only the
//! `default` scope exists here; other scopes Istio knows (`grpc`, ...) are accepted and ignored.

use std::io::IsTerminal as _;

use tracing::level_filters::LevelFilter;

use crate::cli::Args;

/// A log flag that does not parse (exit status 255, as Istio's logging-config errors).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid value {value:?} for --{flag}: {reason}")]
pub struct LogConfigError {
    pub flag: &'static str,
    pub value: String,
    pub reason: String,
}

/// The logging setup derived from the flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// The level of the `default` scope.
    pub level: LevelFilter,
    /// JSON lines instead of text.
    pub json: bool,
    /// Source locations in log lines.
    pub caller: bool,
    /// Targets other than stdout/stderr that were asked for (only warned about).
    pub ignored_targets: Vec<String>,
}

fn parse_level(
    flag: &'static str,
    whole: &str,
    level: &str,
) -> Result<LevelFilter, LogConfigError> {
    match level {
        "debug" => Ok(LevelFilter::DEBUG),
        "info" => Ok(LevelFilter::INFO),
        "warn" => Ok(LevelFilter::WARN),
        "error" | "fatal" => Ok(LevelFilter::ERROR),
        "none" => Ok(LevelFilter::OFF),
        _ => Err(LogConfigError {
            flag,
            value: whole.to_string(),
            reason: format!("unknown level {level:?} (debug, info, warn, error, fatal, none)"),
        }),
    }
}

/// Parses `scope:level,...` (a bare `level` means the default scope) and returns the default scope's
/// level, if the list sets it.
fn parse_levels(flag: &'static str, s: &str) -> Result<Option<LevelFilter>, LogConfigError> {
    let mut default = None;
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (scope, level) = item.split_once(':').unwrap_or(("default", item));
        let level = parse_level(flag, s, level)?;
        if scope.is_empty() {
            return Err(LogConfigError {
                flag,
                value: s.to_string(),
                reason: format!("empty scope in {item:?}"),
            });
        }
        if scope == "default" {
            default = Some(level);
        }
    }
    Ok(default)
}

impl LogConfig {
    /// Reads the log flags.
    pub fn from_args(args: &Args) -> Result<LogConfig, LogConfigError> {
        let level = match &args.log_output_level {
            Some(s) => parse_levels("log_output_level", s)?.unwrap_or(LevelFilter::INFO),
            None => LevelFilter::INFO,
        };
        if let Some(s) = &args.log_stacktrace_level {
            parse_levels("log_stacktrace_level", s)?;
        }
        let ignored_targets = args
            .log_target
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty() && *t != "stdout" && *t != "stderr")
            .map(str::to_string)
            .collect();
        Ok(LogConfig {
            level,
            json: args.log_as_json.unwrap_or(false),
            caller: args.log_caller.as_deref().is_some_and(|c| !c.is_empty()),
            ignored_targets,
        })
    }

    /// Installs the subscriber (stderr). A second call in the same process keeps the first one.
    pub fn install(&self) {
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .with_max_level(self.level)
            .with_target(false)
            .with_file(self.caller)
            .with_line_number(self.caller);
        let _ = if self.json {
            builder.json().try_init()
        } else {
            builder.try_init()
        };
        for t in &self.ignored_targets {
            tracing::warn!("--log_target {t:?} is not supported; logging to stderr");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Args {
        let mut argv = vec!["iptables-init"];
        argv.extend_from_slice(list);
        Args::parse_args(argv).expect("parses")
    }

    #[test]
    fn istio_log_flags() {
        let c = LogConfig::from_args(&args(&["--log_output_level=default:info"])).expect("valid");
        assert_eq!(c.level, LevelFilter::INFO);
        let c = LogConfig::from_args(&args(&["--log_output_level=default:debug,grpc:none"]))
            .expect("valid");
        assert_eq!(c.level, LevelFilter::DEBUG);
        let c = LogConfig::from_args(&args(&["--log_output_level", "warn"])).expect("valid");
        assert_eq!(c.level, LevelFilter::WARN);
        let c = LogConfig::from_args(&args(&["--log_output_level=none", "--log_as_json"]))
            .expect("valid");
        assert_eq!((c.level, c.json), (LevelFilter::OFF, true));
        let c = LogConfig::from_args(&args(&[
            "--log_target=stdout,/tmp/x",
            "--log_caller=default",
        ]))
        .expect("valid");
        assert_eq!(c.ignored_targets, ["/tmp/x"]);
        assert!(c.caller);
        let e = LogConfig::from_args(&args(&["--log_output_level=default:loud"])).expect_err("bad");
        assert_eq!(e.flag, "log_output_level");
        assert!(LogConfig::from_args(&args(&["--log_stacktrace_level=default:x"])).is_err());
        assert!(LogConfig::from_args(&args(&["--log_output_level=:info"])).is_err());
    }
}
