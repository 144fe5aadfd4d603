//! Istio's log flags (`--log_output_level`, `--log_as_json`, `--log_target`, `--log_caller`,
//! `--log_stacktrace_level`), and the logger that writes tracing's events in the project's format.
//!
//! Logs always go to stderr: stdout carries the `--dry-run` output and must hold nothing else. Only the
//! `default` scope exists here; other scopes Istio knows (`grpc`, ...) are accepted and ignored.

use std::fmt::{self, Write as _};
use std::io::IsTerminal as _;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;

use crate::cli::Args;
use sidecar_core::flags::{self, Flag};

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

fn parse_level(flag: &Flag, whole: &str, level: &str) -> Result<LevelFilter, LogConfigError> {
    match level {
        "debug" => Ok(LevelFilter::DEBUG),
        "info" => Ok(LevelFilter::INFO),
        "warn" => Ok(LevelFilter::WARN),
        "error" | "fatal" => Ok(LevelFilter::ERROR),
        "none" => Ok(LevelFilter::OFF),
        _ => Err(LogConfigError {
            flag: flag.long,
            value: whole.to_string(),
            reason: format!("unknown level {level:?} (debug, info, warn, error, fatal, none)"),
        }),
    }
}

/// Parses `scope:level,...` (a bare `level` means the default scope) and returns the default scope's
/// level, if the list sets it.
fn parse_levels(flag: &Flag, s: &str) -> Result<Option<LevelFilter>, LogConfigError> {
    let mut default = None;
    for item in s.split(',').filter(|i| !i.is_empty()) {
        let (scope, level) = item.split_once(':').unwrap_or(("default", item));
        let level = parse_level(flag, s, level)?;
        if scope.is_empty() {
            return Err(LogConfigError {
                flag: flag.long,
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
        let level = match args.string(&flags::LOG_OUTPUT_LEVEL) {
            Some(s) => parse_levels(&flags::LOG_OUTPUT_LEVEL, s)?.unwrap_or(LevelFilter::INFO),
            None => LevelFilter::INFO,
        };
        if let Some(s) = args.string(&flags::LOG_STACKTRACE_LEVEL) {
            parse_levels(&flags::LOG_STACKTRACE_LEVEL, s)?;
        }
        let ignored_targets = args
            .string(&flags::LOG_TARGET)
            .unwrap_or("")
            .split(',')
            .filter(|t| !t.is_empty() && *t != "stdout" && *t != "stderr")
            .map(str::to_string)
            .collect();
        Ok(LogConfig {
            level,
            json: args.boolean(&flags::LOG_AS_JSON).unwrap_or(false),
            caller: args
                .string(&flags::LOG_CALLER)
                .is_some_and(|c| !c.is_empty()),
            ignored_targets,
        })
    }

    /// Installs the logger (stderr). A second call in the same process keeps the first one.
    pub fn install(&self) {
        let format = Format {
            json: self.json,
            caller: self.caller,
            ansi: std::io::stderr().is_terminal(),
        };
        let logger = Logger::new(self.level, format, crate::stdio::err);
        let _ = tracing::subscriber::set_global_default(logger);
        for t in &self.ignored_targets {
            tracing::warn!("--log_target {t:?} is not supported; logging to stderr");
        }
    }
}

/// How [`Logger`] writes a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Format {
    /// One JSON object per line instead of text.
    pub json: bool,
    /// The source file and line of each event.
    pub caller: bool,
    /// ANSI colours (text only; when stderr is a terminal).
    pub ansi: bool,
}

/// The logger: each event becomes one line, written with a single `write_all`.
///
/// Text: `<time> <LEVEL> [<file>:<line>: ]<message> <field>=<value> ...`, the time in RFC 3339 UTC
/// with microseconds, the level padded to five characters, a message's terminal control characters
/// escaped. JSON: `{"timestamp":…,"level":…,"fields":{…}[,"filename":…,"line_number":…]}`. These are the
/// bytes tracing-subscriber's fmt subscriber writes with the target and span context off (a test
/// compares them), so logs read as they always have. This program opens no spans, so spans are given
/// ids and otherwise ignored; there is no span registry and no `log` bridge to set up at start-up.
pub struct Logger<W> {
    level: LevelFilter,
    format: Format,
    make_writer: W,
    next_span: std::sync::atomic::AtomicU64,
}

impl<W, T> Logger<W>
where
    W: Fn() -> T + Send + Sync + 'static,
    T: std::io::Write,
{
    pub fn new(level: LevelFilter, format: Format, make_writer: W) -> Logger<W> {
        Logger {
            level,
            format,
            make_writer,
            next_span: std::sync::atomic::AtomicU64::new(1),
        }
    }

    /// The line of `event`.
    fn line(&self, buf: &mut String, event: &tracing::Event<'_>) -> fmt::Result {
        let meta = event.metadata();
        if self.format.json {
            buf.push_str("{\"timestamp\":");
            json_str(buf, &timestamp(std::time::SystemTime::now()));
            buf.push_str(",\"level\":");
            json_str(buf, meta.level().as_str());
            buf.push_str(",\"fields\":{");
            let mut fields = JsonFields { buf, first: true };
            event.record(&mut fields);
            buf.push('}');
            if self.format.caller {
                if let Some(file) = meta.file() {
                    buf.push_str(",\"filename\":");
                    json_str(buf, file);
                }
                if let Some(line) = meta.line() {
                    write!(buf, ",\"line_number\":{line}")?;
                }
            }
            buf.push_str("}\n");
            return Ok(());
        }
        let ansi = self.format.ansi;
        let dimmed = Style(if ansi { "\x1b[2m" } else { "" });
        write!(
            buf,
            "{}{}{} ",
            dimmed.prefix(),
            timestamp(std::time::SystemTime::now()),
            dimmed.suffix()
        )?;
        let (name, colour) = match *meta.level() {
            tracing::Level::TRACE => ("TRACE", "\x1b[35m"),
            tracing::Level::DEBUG => ("DEBUG", "\x1b[34m"),
            tracing::Level::INFO => (" INFO", "\x1b[32m"),
            tracing::Level::WARN => (" WARN", "\x1b[33m"),
            tracing::Level::ERROR => ("ERROR", "\x1b[31m"),
        };
        write!(
            buf,
            "{} ",
            Style(if ansi { colour } else { "" }).paint(name)
        )?;
        if self.format.caller {
            let line = meta.line();
            if let Some(file) = meta.file() {
                let gap = if line.is_some() { "" } else { " " };
                write!(buf, "{}{}{gap}", dimmed.paint(file), dimmed.paint(":"))?;
            }
            if let Some(line) = line {
                write!(buf, "{}{line}:{} ", dimmed.prefix(), dimmed.suffix())?;
            }
        }
        let mut fields = TextFields {
            buf,
            ansi,
            first: true,
            result: Ok(()),
        };
        event.record(&mut fields);
        fields.result?;
        buf.push('\n');
        Ok(())
    }
}

impl<W, T> tracing::Subscriber for Logger<W>
where
    W: Fn() -> T + Send + Sync + 'static,
    T: std::io::Write,
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
        let mut buf = String::new();
        // The same complaints as tracing-subscriber's, for the same failures.
        let (text, what) = if self.line(&mut buf, event).is_ok() {
            (buf, "an event")
        } else {
            let text = format!(
                "Unable to format the following event. Name: {}; Fields: {:?}\n",
                event.metadata().name(),
                event.fields()
            );
            (text, "an \"event formatting error\"")
        };
        if let Err(e) = (self.make_writer)().write_all(text.as_bytes()) {
            eprintln!("[tracing-subscriber] Unable to write {what} to the Writer for this Subscriber! Error: {e}\n");
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

/// `t` as RFC 3339 UTC with microseconds: `2026-11-29T14:18:24.194534Z`.
fn timestamp(t: std::time::SystemTime) -> String {
    let (secs, nanos) = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, d.subsec_nanos()),
        Err(e) => {
            let d = e.duration();
            match d.subsec_nanos() {
                0 => (-(d.as_secs() as i64), 0),
                n => (-(d.as_secs() as i64) - 1, 1_000_000_000 - n),
            }
        }
    };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's `civil_from_days`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let year = if year > 9999 {
        format!("+{year}")
    } else if year < 0 {
        format!("{year:05}")
    } else {
        format!("{year:04}")
    };
    format!(
        "{year}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        nanos / 1_000
    )
}

/// An ANSI style (empty: none).
#[derive(Clone, Copy)]
struct Style(&'static str);

impl Style {
    fn prefix(self) -> &'static str {
        self.0
    }

    fn suffix(self) -> &'static str {
        if self.0.is_empty() {
            ""
        } else {
            "\x1b[0m"
        }
    }

    fn paint(self, text: impl fmt::Display) -> impl fmt::Display {
        struct Painted<T>(Style, T);
        impl<T: fmt::Display> fmt::Display for Painted<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}{}{}", self.0.prefix(), self.1, self.0.suffix())
            }
        }
        Painted(self, text)
    }
}

/// Writes a value with the terminal control characters (ESC, BEL, BS, FF, DEL, C1) escaped, so that a
/// logged value cannot drive the terminal.
struct Escaped<T>(T);

impl<T: fmt::Debug> fmt::Debug for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapingWriter(f), "{:?}", self.0)
    }
}

impl<T: fmt::Display> fmt::Display for Escaped<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(EscapingWriter(f), "{}", self.0)
    }
}

struct EscapingWriter<'a, 'b>(&'a mut fmt::Formatter<'b>);

impl fmt::Write for EscapingWriter<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for ch in s.chars() {
            match ch {
                '\x1b' => self.0.write_str("\\x1b")?,
                '\x07' => self.0.write_str("\\x07")?,
                '\x08' => self.0.write_str("\\x08")?,
                '\x0c' => self.0.write_str("\\x0c")?,
                '\x7f' => self.0.write_str("\\x7f")?,
                '\u{80}'..='\u{9f}' => write!(self.0, "\\u{{{:x}}}", ch as u32)?,
                _ => self.0.write_char(ch)?,
            }
        }
        Ok(())
    }
}

/// An event's fields as text: the message first as written, then `name=value` (Debug), space-separated.
struct TextFields<'a> {
    buf: &'a mut String,
    ansi: bool,
    first: bool,
    result: fmt::Result,
}

impl Visit for TextFields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let italic = Style(if self.ansi { "\x1b[3m" } else { "" });
        let dimmed = Style(if self.ansi { "\x1b[2m" } else { "" });
        match value.source() {
            Some(source) => {
                /// Debug-prints as the text itself, unquoted.
                struct Raw(String);
                impl fmt::Debug for Raw {
                    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(&self.0)
                    }
                }
                let mut sources = Vec::new();
                let mut next = Some(source);
                while let Some(e) = next {
                    sources.push(Escaped(Raw(e.to_string())));
                    next = e.source();
                }
                struct List(Vec<Escaped<Raw>>);
                impl fmt::Display for List {
                    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.debug_list().entries(&self.0).finish()
                    }
                }
                self.record_debug(
                    field,
                    &format_args!(
                        "{} {}{}{}{}",
                        Escaped(value),
                        italic.paint(field.name()),
                        italic.paint(".sources"),
                        dimmed.paint("="),
                        List(sources)
                    ),
                )
            }
            None => self.record_debug(field, &format_args!("{}", Escaped(value))),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // `log` records' metadata, which tracing-subscriber never prints as fields.
        if name.starts_with("log.") {
            return;
        }
        if self.first {
            self.first = false;
        } else {
            self.buf.push(' ');
        }
        let italic = Style(if self.ansi { "\x1b[3m" } else { "" });
        let dimmed = Style(if self.ansi { "\x1b[2m" } else { "" });
        self.result = match name {
            "message" => write!(self.buf, "{:?}", Escaped(value)),
            _ => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                write!(
                    self.buf,
                    "{}{}{value:?}",
                    italic.paint(name),
                    dimmed.paint("=")
                )
            }
        };
    }
}

/// Appends `s` as a JSON string.
fn json_str(buf: &mut String, s: &str) {
    match serde_json::to_string(s) {
        Ok(quoted) => buf.push_str(&quoted),
        Err(_) => buf.push_str("null"),
    }
}

/// An event's fields as the members of a JSON object: numbers and booleans as such, the rest as strings.
struct JsonFields<'a> {
    buf: &'a mut String,
    first: bool,
}

impl JsonFields<'_> {
    fn key(&mut self, field: &Field) {
        if !std::mem::replace(&mut self.first, false) {
            self.buf.push(',');
        }
        json_str(self.buf, field.name());
        self.buf.push(':');
    }

    fn number(&mut self, field: &Field, value: serde_json::Result<String>) {
        self.key(field);
        self.buf.push_str(value.as_deref().unwrap_or("null"));
    }
}

impl Visit for JsonFields<'_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.number(field, Ok(value.to_string()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, Ok(value.to_string()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, Ok(value.to_string()));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.number(field, serde_json::to_string(&value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        json_str(self.buf, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.key(field);
        json_str(self.buf, &format!("{value:?}"));
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
        /// The lines, with each timestamp (`2026-11-29T14:18:24.194534Z`) replaced by `<time>`; the
        /// continuation lines of a multi-line message are kept as they are.
        fn lines(&self) -> Vec<String> {
            let text = String::from_utf8(self.0.lock().expect("lock").clone()).expect("UTF-8");
            text.split_inclusive('\n').map(mask_times).collect()
        }
    }

    /// `line` with every RFC 3339 timestamp replaced by `<time>`.
    fn mask_times(line: &str) -> String {
        let stamp = |b: &[u8]| {
            b.len() >= 27
                && b[4] == b'-'
                && b[10] == b'T'
                && b[19] == b'.'
                && b[26] == b'Z'
                && b[..4].iter().all(u8::is_ascii_digit)
        };
        let mut out = String::new();
        let mut rest = line;
        while !rest.is_empty() {
            if stamp(rest.as_bytes()) {
                out.push_str("<time>");
                rest = &rest[27..];
            } else {
                let c = rest.chars().next().expect("not empty");
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        out
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

    /// Field kinds the samples above leave out: numbers, raw identifiers, an error with its sources, C1
    /// control characters.
    fn emit_more() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "outer \u{1b}[1m")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let outer = Outer(std::io::Error::other("inner"));
        let plain = std::io::Error::other("alone");
        tracing::info!(
            ratio = 1.5,
            nan = f64::NAN,
            neg = -3i64,
            big = u64::MAX,
            r#type = "x",
            "numbers"
        );
        tracing::error!(
            error = &outer as &(dyn std::error::Error + 'static),
            "with a source"
        );
        tracing::error!(
            error = &plain as &(dyn std::error::Error + 'static),
            "without"
        );
        tracing::warn!("c1 \u{85} and \u{7f} and \u{7}");
        tracing::info!(message = "explicit message", extra = true);
    }

    #[test]
    fn every_field_kind_is_written_as_the_fmt_subscriber_writes_it() {
        for json in [false, true] {
            for ansi in [false, true] {
                let format = Format {
                    json,
                    caller: false,
                    ansi,
                };
                let out = Captured::default();
                let writer = out.clone();
                let builder = tracing_subscriber::fmt()
                    .with_writer(move || writer.clone())
                    .with_ansi(ansi)
                    .with_target(false);
                if json {
                    tracing::subscriber::with_default(builder.json().finish(), emit_more);
                } else {
                    tracing::subscriber::with_default(builder.finish(), emit_more);
                }
                let theirs = out.lines();
                let out = Captured::default();
                let writer = out.clone();
                let logger = Logger::new(LevelFilter::INFO, format, move || writer.clone());
                tracing::subscriber::with_default(logger, emit_more);
                assert_eq!(out.lines(), theirs, "{format:?}");
                assert_eq!(theirs.len(), 5, "{theirs:#?}");
            }
        }
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        let at = |secs: u64, nanos: u32| {
            timestamp(std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(951_782_400, 999_999_999), "2000-02-29T00:00:00.999999Z");
        assert_eq!(
            at(1_795_962_504, 194_534_000),
            "2026-11-29T14:28:24.194534Z"
        );
        assert_eq!(at(253_402_300_799, 0), "9999-12-31T23:59:59.000000Z");
        assert_eq!(at(253_402_300_800, 0), "+10000-01-01T00:00:00.000000Z");
        let before = std::time::UNIX_EPOCH - std::time::Duration::new(1, 500_000_000);
        assert_eq!(timestamp(before), "1969-12-31T23:59:58.500000Z");
    }

    /// What tracing-subscriber's fmt subscriber, set up as this program set it up before it had its own
    /// logger, writes for the samples.
    fn fmt_output(level: LevelFilter, format: Format) -> Vec<String> {
        let out = Captured::default();
        let writer = out.clone();
        let builder = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(format.ansi)
            .with_max_level(level)
            .with_target(false)
            .with_file(format.caller)
            .with_line_number(format.caller);
        if format.json {
            tracing::subscriber::with_default(builder.json().finish(), emit_samples);
        } else {
            tracing::subscriber::with_default(builder.finish(), emit_samples);
        }
        out.lines()
    }

    fn logger_output(level: LevelFilter, format: Format) -> Vec<String> {
        let out = Captured::default();
        let writer = out.clone();
        let logger = Logger::new(level, format, move || writer.clone());
        tracing::subscriber::with_default(logger, emit_samples);
        out.lines()
    }

    #[test]
    fn the_logger_writes_what_the_fmt_subscriber_writes() {
        let formats = [false, true].into_iter().flat_map(|json| {
            [false, true].into_iter().flat_map(move |caller| {
                [false, true]
                    .into_iter()
                    .map(move |ansi| Format { json, caller, ansi })
            })
        });
        for format in formats {
            for level in [LevelFilter::DEBUG, LevelFilter::ERROR] {
                let expected = fmt_output(level, format);
                assert_eq!(logger_output(level, format), expected, "{level} {format:?}");
                if level == LevelFilter::DEBUG {
                    // A multi-line message is one JSON line.
                    let lines = if format.json { 8 } else { 9 };
                    assert_eq!(expected.len(), lines, "{expected:#?}");
                }
            }
        }
        let plain = Format::default();
        for level in [
            LevelFilter::TRACE,
            LevelFilter::DEBUG,
            LevelFilter::INFO,
            LevelFilter::WARN,
            LevelFilter::ERROR,
            LevelFilter::OFF,
        ] {
            let expected = fmt_output(level, plain);
            assert_eq!(logger_output(level, plain), expected, "{level}");
            if level == LevelFilter::DEBUG {
                assert_eq!(expected.len(), 9, "{expected:#?}");
            }
        }
        let set = |level| {
            let enabled = |l| {
                tracing::subscriber::with_default(
                    Logger::new(level, Format::default(), std::io::sink),
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
