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
        let ansi = std::io::stderr().is_terminal();
        // The init container's case (plain text, no colours, no source locations): the same lines as
        // the fmt subscriber below, without its span registry.
        if !self.json && !self.caller && !ansi {
            let plain = PlainText::new(self.level, std::io::stderr);
            let _ = tracing::subscriber::set_global_default(plain);
            for t in &self.ignored_targets {
                tracing::warn!("--log_target {t:?} is not supported; logging to stderr");
            }
            return;
        }
        let builder = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
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

/// A subscriber that writes each event as the fmt subscriber [`LogConfig::install`] builds otherwise
/// writes it with ANSI colours, the target and source locations off: `<time> <LEVEL> <fields>`, with
/// tracing-subscriber's own timer and field formatter, so the bytes are the same (tested below).
///
/// Why: the fmt subscriber sits on a span registry (a sharded slab of 4096 shard pointers, 32 KiB
/// zeroed at start-up) and registers a `log` bridge, about 30 µs of a run that is over in about a
/// millisecond. This program opens no spans and no dependency of it logs through `log` (the bridge
/// only forwards such records), so neither is needed. Spans would not be shown here: a span added to
/// the code would need its context added below, or the fmt subscriber.
pub struct PlainText<W> {
    level: LevelFilter,
    make_writer: W,
    fields: tracing_subscriber::fmt::format::DefaultFields,
    next_span: std::sync::atomic::AtomicU64,
}

impl<W> PlainText<W>
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    pub fn new(level: LevelFilter, make_writer: W) -> PlainText<W> {
        PlainText {
            level,
            make_writer,
            fields: tracing_subscriber::fmt::format::DefaultFields::new(),
            next_span: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// The line of `event`, as `Format<Full, SystemTime>::format_event` writes it.
    fn format(&self, buf: &mut String, event: &tracing::Event<'_>) -> std::fmt::Result {
        use tracing_subscriber::fmt::format::{FormatFields as _, Writer};
        use tracing_subscriber::fmt::time::FormatTime as _;

        let mut writer = Writer::new(buf);
        if tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut writer)
            .is_err()
        {
            writer.write_str("<unknown time>")?;
        }
        let level = match *event.metadata().level() {
            tracing::Level::TRACE => "TRACE",
            tracing::Level::DEBUG => "DEBUG",
            tracing::Level::INFO => " INFO",
            tracing::Level::WARN => " WARN",
            tracing::Level::ERROR => "ERROR",
        };
        write!(writer, " {level} ")?;
        self.fields.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

impl<W> tracing::Subscriber for PlainText<W>
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        self.level >= *metadata.level()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(self.level)
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let id = self
            .next_span
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::span::Id::from_u64(id.max(1))
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        use std::io::Write as _;
        let mut buf = String::new();
        // The fmt subscriber's internal-error messages, for the same failures (`log_internal_errors`
        // is on in `tracing_subscriber::fmt()`).
        if self.format(&mut buf, event).is_ok() {
            let mut writer = self.make_writer.make_writer_for(event.metadata());
            if let Err(e) = writer.write_all(buf.as_bytes()) {
                eprintln!("[tracing-subscriber] Unable to write an event to the Writer for this Subscriber! Error: {}\n", e);
            }
        } else {
            let err_msg = format!(
                "Unable to format the following event. Name: {}; Fields: {:?}\n",
                event.metadata().name(),
                event.fields()
            );
            let mut writer = self.make_writer.make_writer_for(event.metadata());
            if let Err(e) = writer.write_all(err_msg.as_bytes()) {
                eprintln!("[tracing-subscriber] Unable to write an \"event formatting error\" to the Writer for this Subscriber! Error: {}\n", e);
            }
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
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

    /// A writer into a shared buffer, for both subscribers.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        /// The lines, with each event's leading timestamp (`2026-11-29T14:18:24.194534Z`) cut off;
        /// the continuation lines of a multi-line message are kept as they are.
        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().expect("lock").clone()).expect("UTF-8");
            let stamped = |l: &str| {
                let b = l.as_bytes();
                b.len() > 27 && b[4] == b'-' && b[10] == b'T' && b[19] == b'.' && b[26] == b'Z'
            };
            text.split_inclusive('\n')
                .map(|l| {
                    if stamped(l) {
                        format!("<time>{}", &l[27..])
                    } else {
                        l.to_string()
                    }
                })
                .collect()
        }
    }

    /// Every kind of event this program logs: a message alone, with format arguments, with Display,
    /// Debug and string fields, at every level; text needing escapes; and events filtered out.
    fn emit_samples() {
        #[derive(Debug)]
        #[allow(dead_code)] // only read through Debug
        struct Cfg {
            ports: Vec<u16>,
            name: &'static str,
        }
        let cfg = Cfg {
            ports: vec![15001, 15006],
            name: "a \"quoted\" name",
        };
        let backend = "iptables-nft-restore (nf_tables)";
        tracing::info!("plain message");
        tracing::info!(backend = %backend, "applying the {} rules: {} --noflush", "IPv4", "/usr/sbin/x");
        tracing::warn!(path = %"/tmp/x y", "DRY_RUN_FILE_PATH is not written");
        tracing::warn!("--log_target {:?} is not supported", "/tmp/\u{1b}[31mred");
        tracing::error!("{}", "line one\nline two \u{1b}[0m end");
        tracing::error!(code = 4, ok = false, "with typed fields");
        tracing::debug!(?cfg, "configuration");
        tracing::debug!(text = "a string field", "debug line");
        tracing::trace!("never shown");
        let _ = tracing::enabled!(tracing::Level::DEBUG);
    }

    fn fmt_output(level: LevelFilter) -> Vec<String> {
        let out = Captured::default();
        let writer = out.clone();
        let fmt = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(level)
            .with_target(false)
            .with_file(false)
            .with_line_number(false)
            .finish();
        tracing::subscriber::with_default(fmt, emit_samples);
        out.lines()
    }

    fn plain_output(level: LevelFilter) -> Vec<String> {
        let out = Captured::default();
        let writer = out.clone();
        let plain = PlainText::new(level, move || writer.clone());
        tracing::subscriber::with_default(plain, emit_samples);
        out.lines()
    }

    #[test]
    fn plain_text_writes_what_the_fmt_subscriber_writes() {
        for level in [
            LevelFilter::TRACE,
            LevelFilter::DEBUG,
            LevelFilter::INFO,
            LevelFilter::WARN,
            LevelFilter::ERROR,
            LevelFilter::OFF,
        ] {
            let expected = fmt_output(level);
            assert_eq!(plain_output(level), expected, "{level}");
            if level == LevelFilter::DEBUG {
                assert_eq!(expected.len(), 9, "{expected:#?}");
            }
        }
        let set = |level| {
            let enabled = |l| {
                tracing::subscriber::with_default(
                    PlainText::new(level, std::io::sink),
                    || match l {
                        tracing::Level::DEBUG => tracing::enabled!(tracing::Level::DEBUG),
                        _ => tracing::enabled!(tracing::Level::ERROR),
                    },
                )
            };
            (
                enabled(tracing::Level::DEBUG),
                enabled(tracing::Level::ERROR),
            )
        };
        assert_eq!(set(LevelFilter::INFO), (false, true));
        assert_eq!(set(LevelFilter::DEBUG), (true, true));
        assert_eq!(set(LevelFilter::OFF), (false, false));
    }
}
