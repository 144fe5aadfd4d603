//! The command line, spelled as istio-iptables spells it (Istio's `tools/istio-iptables/pkg/cmd/root.go`,
//! with pflag's syntax), plus the explicit flags that replace what Istio reads from its surroundings.
//!
//! Every flag is defined once, in [`sidecar_core::flags::FLAGS`]; this module only reads the syntax. Each value
//! is kept as it was written (a string for Istio's string flags, so "not given" differs from "given
//! empty"), and `config::resolve` reads the environment and validates. The environment is *not* read
//! here: Istio's rules for it (a value that does not parse is ignored, and the "also" variables override
//! the primary one) are not clap's, and an injected environment keeps the resolution testable.
//!
//! Go/pflag details reproduced: `-p15001`, `-p 15001`, `-p=15001`, `--envoy-port=15001`; booleans as
//! `--flag` or `--flag=<1|t|T|true|TRUE|True|0|f|F|false|FALSE|False>`; the last occurrence of a flag wins;
//! a value may start with `-`. Stray positional arguments are rejected (Istio silently ignores them, which
//! turns `--dry-run false` into a dry run), except a leading `istio-iptables` word, so Istio's injected
//! arguments work unchanged.

use std::ffi::OsString;
use std::time::Duration;

use sidecar_core::flags::{
    self, parse_go_bool, parse_go_duration, parse_go_port, Flag, Kind, FLAGS,
};

/// The subcommand word Istio's injector writes before its flags.
pub const ISTIO_SUBCOMMAND: &str = "istio-iptables";

/// One flag's value, as written (typed where the command line checks the type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagValue {
    /// [`Kind::Value`] and [`Kind::List`].
    Str(String),
    /// [`Kind::Bool`].
    Bool(bool),
    /// [`Kind::Port`].
    Port(u16),
    /// [`Kind::Duration`].
    Duration(Duration),
    /// [`Kind::Choice`]: the word chosen.
    Choice(&'static str),
}

/// A value [`Args::set_text`] refuses, as the command line would.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value {value:?} for --{flag}: {reason}")]
pub struct FlagValueError {
    /// The flag's long name.
    pub flag: &'static str,
    /// The value as given.
    pub value: String,
    /// Why it does not parse.
    pub reason: String,
}

/// The flags given on the command line, by their position in [`FLAGS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    values: Vec<Option<FlagValue>>,
}

impl Default for Args {
    fn default() -> Self {
        Args {
            values: vec![None; FLAGS.len()],
        }
    }
}

impl Args {
    /// The value of `flag`, if the command line gives it.
    pub fn value(&self, flag: &'static Flag) -> Option<&FlagValue> {
        self.values.get(flag.index()).and_then(Option::as_ref)
    }

    /// Sets `flag` (a later occurrence replaces an earlier one, as in pflag).
    pub fn set(&mut self, flag: &'static Flag, value: FlagValue) {
        if let Some(slot) = self.values.get_mut(flag.index()) {
            *slot = Some(value);
        }
    }

    /// Sets `flag` from its text, checked as the command line checks it (a boolean as Go's
    /// `strconv.ParseBool`, a port, a duration, a choice's word; strings as written): the typed entry
    /// for a caller that fills istio-iptables' settings itself, as Istio's CNI plugin fills
    /// `config.Config` (`cni/pkg/plugin/sidecar_iptables_linux.go` `Program`). Everything else is
    /// checked once, by `config::resolve`.
    pub fn set_text(
        &mut self,
        flag: &'static Flag,
        text: &str,
    ) -> Result<&mut Args, FlagValueError> {
        let refused = |reason: String| FlagValueError {
            flag: flag.long,
            value: text.to_string(),
            reason,
        };
        let value = match flag.kind {
            Kind::Value | Kind::List => FlagValue::Str(text.to_string()),
            Kind::Bool => FlagValue::Bool(parse_go_bool(text).map_err(refused)?),
            Kind::Port => FlagValue::Port(parse_go_port(text).map_err(refused)?),
            Kind::Duration => FlagValue::Duration(parse_go_duration(text).map_err(refused)?),
            Kind::Choice(words) => FlagValue::Choice(
                words
                    .iter()
                    .find(|(w, _)| *w == text)
                    .ok_or_else(|| refused("not one of its choices".to_string()))?
                    .0,
            ),
        };
        self.set(flag, value);
        Ok(self)
    }

    /// Turns a boolean flag on (`--flag`).
    pub fn switch(&mut self, flag: &'static Flag) -> &mut Args {
        debug_assert_eq!(flag.kind, Kind::Bool, "--{} is not a switch", flag.long);
        self.set(flag, FlagValue::Bool(true));
        self
    }

    /// A string or list flag's value.
    pub fn string(&self, flag: &'static Flag) -> Option<&str> {
        match self.value(flag) {
            Some(FlagValue::Str(s)) => Some(s),
            _ => None,
        }
    }

    /// A boolean flag's value.
    pub fn boolean(&self, flag: &'static Flag) -> Option<bool> {
        match self.value(flag) {
            Some(FlagValue::Bool(b)) => Some(*b),
            _ => None,
        }
    }

    /// A port flag's value.
    pub fn port(&self, flag: &'static Flag) -> Option<u16> {
        match self.value(flag) {
            Some(FlagValue::Port(p)) => Some(*p),
            _ => None,
        }
    }

    /// A duration flag's value.
    pub fn duration(&self, flag: &'static Flag) -> Option<Duration> {
        match self.value(flag) {
            Some(FlagValue::Duration(d)) => Some(*d),
            _ => None,
        }
    }

    /// A choice flag's word.
    pub fn choice(&self, flag: &'static Flag) -> Option<&'static str> {
        match self.value(flag) {
            Some(FlagValue::Choice(w)) => Some(w),
            _ => None,
        }
    }

    /// Parses a full command line (`argv[0]` first), dropping a leading `istio-iptables` word.
    pub fn parse_args<I, T>(args: I) -> Result<Args, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        let mut argv: Vec<OsString> = args.into_iter().map(Into::into).collect();
        if argv.get(1).is_some_and(|a| a == ISTIO_SUBCOMMAND) {
            argv.remove(1);
        }
        if let Some(args) = Args::parse_plain(argv.get(1..).unwrap_or_default()) {
            return Ok(args);
        }
        Args::parse_with_clap(argv)
    }

    /// What clap makes of a full command line (`argv[0]` first).
    fn parse_with_clap(argv: Vec<OsString>) -> Result<Args, clap::Error> {
        let matches = command().try_get_matches_from(argv)?;
        let mut args = Args::default();
        for flag in FLAGS {
            let id = flag.long;
            let value = match flag.kind {
                Kind::Bool => matches.get_one::<bool>(id).copied().map(FlagValue::Bool),
                Kind::Value | Kind::List => {
                    matches.get_one::<String>(id).cloned().map(FlagValue::Str)
                }
                Kind::Port => matches.get_one::<u16>(id).copied().map(FlagValue::Port),
                Kind::Duration => matches
                    .get_one::<Duration>(id)
                    .copied()
                    .map(FlagValue::Duration),
                Kind::Choice(words) => matches
                    .get_one::<String>(id)
                    .and_then(|w| words.iter().find(|(word, _)| word == w))
                    .map(|(word, _)| FlagValue::Choice(word)),
            };
            if let Some(value) = value {
                args.set(flag, value);
            }
        }
        Ok(args)
    }

    /// The fast path of [`Args::parse_args`] (`argv[0]` and the subcommand word already dropped): a
    /// command line made only of the plainest spellings — `--flag value`, `--flag=value`, `-f value`,
    /// a boolean's `--flag` / `--flag=<bool>` / `-n`, every value valid and none starting with `-` —
    /// parsed without clap, because building clap's command for ~45 flags (a large stack frame and some
    /// 20 KiB of heap, all first-touch page faults) is a noticeable part of an init container's
    /// millisecond. Anything else (help, version, an unknown flag, a positional, `-p15001`, a value clap
    /// would refuse or that starts with `-`, a non-UTF-8 argument) returns `None`, and clap parses the
    /// whole line, so every message and exit status stays clap's. Where this returns `Some`, the result
    /// is exactly clap's: checked against clap for every flag and on random command lines (tests below).
    fn parse_plain(argv: &[OsString]) -> Option<Args> {
        let mut args = Args::default();
        let mut rest = argv.iter();
        while let Some(token) = rest.next() {
            let token = token.to_str()?;
            let (flag, inline) = if let Some(long) = token.strip_prefix("--") {
                match long.split_once('=') {
                    Some((name, value)) => (flags::by_long(name)?, Some(value)),
                    None => (flags::by_long(long)?, None),
                }
            } else {
                let mut chars = token.strip_prefix('-')?.chars();
                let (Some(short), None) = (chars.next(), chars.next()) else {
                    return None;
                };
                (flags::by_short(short)?, None)
            };
            if flag.kind == Kind::Bool {
                // `require_equals`: a boolean's value is only ever written after '='.
                let value = match inline {
                    None => true,
                    Some(v) => parse_go_bool(v).ok()?,
                };
                args.set(flag, FlagValue::Bool(value));
                continue;
            }
            let value = match inline {
                Some(v) => v,
                None => rest.next()?.to_str()?,
            };
            // Empty after '=' and hyphen values are left to clap: rare, and its rules for them are subtle.
            if value.starts_with('-') || (inline.is_some() && value.is_empty()) {
                return None;
            }
            let value = match flag.kind {
                Kind::Value | Kind::List => FlagValue::Str(value.to_string()),
                Kind::Port => FlagValue::Port(parse_go_port(value).ok()?),
                Kind::Duration => FlagValue::Duration(parse_go_duration(value).ok()?),
                Kind::Choice(words) => {
                    FlagValue::Choice(words.iter().find(|(w, _)| *w == value)?.0)
                }
                Kind::Bool => return None,
            };
            args.set(flag, value);
        }
        Some(args)
    }
}

/// clap's command, built from [`FLAGS`]: it parses what the fast path declines and writes `--help`,
/// `--version` and the error messages.
pub fn command() -> clap::Command {
    use clap::Command;

    Command::new("iptables-init")
        .version(env!("CARGO_PKG_VERSION"))
        .about("Computes, prints (--dry-run) and applies Istio-compatible sidecar interception rules")
        .long_about(
            "Computes, prints (--dry-run) and atomically applies Istio-compatible sidecar interception \
             rules. Accepts istio-iptables' flags and environment unchanged; an optional leading \
             `istio-iptables` word is ignored.\n\n`iptables-init explain [FLAGS] --connection SPEC...` \
             explains where connections would go under the same flags, touching nothing (see \
             `iptables-init explain --help`).\n\nExit status: 0 success, 1 invalid configuration or \
             apply error, 126 --run-validation failed, 255 command-line parse error.",
        )
        .args_override_self(true)
        .disable_help_subcommand(true)
        .args(FLAGS.iter().map(|flag| arg(flag)))
}

/// clap's argument for one flag definition.
fn arg(flag: &'static Flag) -> clap::Arg {
    use clap::builder::{PossibleValue, PossibleValuesParser};
    use clap::{Arg, ArgAction};

    let mut arg = Arg::new(flag.long)
        .long(flag.long)
        .value_name(flag.value_name)
        .help(flag.help_line())
        .action(ArgAction::Set);
    if let Some(short) = flag.short {
        arg = arg.short(short);
    }
    match flag.kind {
        Kind::Bool => arg
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("true")
            .value_parser(parse_go_bool),
        Kind::Value | Kind::List => arg.allow_hyphen_values(true),
        // pflag takes the next argument as the value whatever it starts with.
        Kind::Port => arg.value_parser(parse_go_port).allow_hyphen_values(true),
        Kind::Duration => arg
            .value_parser(parse_go_duration)
            .allow_hyphen_values(true),
        Kind::Choice(words) => arg.value_parser(PossibleValuesParser::new(
            words
                .iter()
                .map(|(w, help)| PossibleValue::new(*w).help(*help)),
        )),
    }
}

/// The `--help` of `iptables-init explain`: its own flags, the spec syntax and defaults, and what it
/// assumes (`about` is the long description, written by `explain`).
pub fn explain_command(about: String) -> clap::Command {
    clap::Command::new("iptables-init explain")
        .about("Explains where connections go under an iptables-init configuration, touching nothing")
        .long_about(about)
        .override_usage(
            "iptables-init explain [ISTIO-IPTABLES FLAGS...] --connection SPEC [--connection SPEC...] [-o text|json]",
        )
        .disable_version_flag(true)
        .args(flags::EXPLAIN_FLAGS.iter().map(|flag| arg(flag)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sidecar_core::flags::*;

    /// The arguments Istio's injector writes for the default `istio-init`, after the subcommand word.
    fn injected() -> Vec<&'static str> {
        let args = test_support::istio_init::injected_args_with(
            &[],
            &[test_support::istio_init::DEFAULT_LOG_LEVEL_ARG],
        );
        args[1..].to_vec()
    }
    use std::time::Duration;

    fn parse(args: &[&str]) -> Args {
        let mut argv = vec!["iptables-init"];
        argv.extend_from_slice(args);
        Args::parse_args(argv).expect("parses")
    }

    fn parse_err(args: &[&str]) -> clap::Error {
        let mut argv = vec!["iptables-init"];
        argv.extend_from_slice(args);
        Args::parse_args(argv).expect_err("must not parse")
    }

    #[test]
    fn istio_injected_arguments_parse_unchanged() {
        let mut argv = vec!["istio-iptables"];
        argv.extend(injected());
        let a = parse(&argv);
        assert_eq!(a.string(&ENVOY_PORT), Some("15001"));
        assert_eq!(a.string(&INBOUND_CAPTURE_PORT), Some("15006"));
        assert_eq!(a.string(&PROXY_UID), Some("1337"));
        assert_eq!(a.string(&INBOUND_INTERCEPTION_MODE), Some("REDIRECT"));
        assert_eq!(a.string(&SERVICE_CIDR), Some("*"));
        assert_eq!(a.string(&SERVICE_EXCLUDE_CIDR), Some(""));
        assert_eq!(a.string(&INBOUND_PORTS), Some("*"));
        assert_eq!(a.string(&LOCAL_EXCLUDE_PORTS), Some("15090,15021,15020"));
        assert_eq!(a.string(&LOG_OUTPUT_LEVEL), Some("default:info"));
        assert_eq!(a.string(&PROXY_GID), None);
    }

    #[test]
    fn pflag_value_forms() {
        assert_eq!(parse(&["-p15001"]).string(&ENVOY_PORT), Some("15001"));
        assert_eq!(parse(&["-p=15001"]).string(&ENVOY_PORT), Some("15001"));
        assert_eq!(
            parse(&["--envoy-port=15001"]).string(&ENVOY_PORT),
            Some("15001")
        );
        assert_eq!(
            parse(&["--envoy-port", "15001"]).string(&ENVOY_PORT),
            Some("15001")
        );
        // The last occurrence wins, as in pflag.
        assert_eq!(
            parse(&["-p", "1", "-p", "2"]).string(&ENVOY_PORT),
            Some("2")
        );
        // A value may start with '-': it reaches validation, which names it.
        assert_eq!(
            parse(&["-d", "-1"]).string(&LOCAL_EXCLUDE_PORTS),
            Some("-1")
        );
    }

    #[test]
    fn go_booleans() {
        assert_eq!(parse(&["--dry-run"]).boolean(&DRY_RUN), Some(true));
        assert_eq!(parse(&["-n"]).boolean(&DRY_RUN), Some(true));
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert_eq!(
                parse(&[&format!("--dry-run={t}")]).boolean(&DRY_RUN),
                Some(true),
                "{t}"
            );
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert_eq!(
                parse(&[&format!("--redirect-dns={f}")]).boolean(&REDIRECT_DNS),
                Some(false),
                "{f}"
            );
        }
        assert_eq!(parse(&["-n=false"]).boolean(&DRY_RUN), Some(false));
        assert_eq!(parse(&[]).boolean(&DRY_RUN), None);
        parse_err(&["--dry-run=yes"]);
        // Istio would treat `false` as an ignored positional and run dry; we refuse.
        parse_err(&["--dry-run", "false"]);
    }

    #[test]
    fn stray_positionals_are_rejected_but_the_subcommand_word_is_not() {
        parse_err(&["-p", "15001", "istio-iptables"]);
        parse_err(&["extra"]);
        parse_err(&["--no-such-flag"]);
        assert_eq!(parse(&["istio-iptables"]).string(&ENVOY_PORT), None);
    }

    #[test]
    fn typed_values() {
        assert_eq!(
            parse(&["--iptables-probe-port=15002"]).port(&IPTABLES_PROBE_PORT),
            Some(15002)
        );
        parse_err(&["--iptables-probe-port=70000"]);
        assert_eq!(
            parse(&["--probe-timeout", "1m30s"]).duration(&PROBE_TIMEOUT),
            Some(Duration::from_secs(90))
        );
        parse_err(&["--probe-timeout", "5"]);
        assert_eq!(parse(&["--ipv6", "auto"]).choice(&IPV6), Some("auto"));
        assert_eq!(parse(&["--ipv6=true"]).choice(&IPV6), Some("true"));
        parse_err(&["--ipv6", "maybe"]);
    }

    /// The typed entry (the CNI plugin's) takes and refuses what the command line takes and refuses,
    /// and gives the same value, for every flag and a spread of texts.
    #[test]
    fn set_text_agrees_with_the_command_line() {
        let texts = [
            "",
            "15001",
            "70000",
            "-1",
            "true",
            "False",
            "yes",
            "1m30s",
            "5",
            "auto",
            "maybe",
            "10.0.0.0/8,fd00::/8",
            "eth0",
            "*",
        ];
        for flag in FLAGS {
            for text in texts {
                let mut typed = Args::default();
                let typed = typed.set_text(flag, text).map(|a| a.clone());
                let line = Args::parse_args([
                    "iptables-init".to_string(),
                    format!("--{}={text}", flag.long),
                ]);
                match (&typed, &line) {
                    (Ok(t), Ok(l)) => assert_eq!(t, l, "--{}={text:?}", flag.long),
                    (Err(e), Err(_)) => {
                        assert!(e.to_string().contains(flag.long), "{e}")
                    }
                    _ => panic!(
                        "--{}={text:?}: typed {typed:?}, command line {line:?}",
                        flag.long
                    ),
                }
            }
        }
        let mut a = Args::default();
        a.switch(&CNI_MODE);
        assert_eq!(a, parse(&["--cni-mode"]));
    }

    /// What clap makes of `argv` (after `argv[0]`), bypassing the fast path.
    fn clap_only(argv: &[&str]) -> Result<Args, clap::Error> {
        Args::parse_with_clap(
            std::iter::once("iptables-init")
                .chain(argv.iter().copied())
                .map(OsString::from)
                .collect(),
        )
    }

    /// The fast path's result for `argv` (after `argv[0]` and the subcommand word).
    fn plain(argv: &[&str]) -> Option<Args> {
        let argv: Vec<OsString> = argv.iter().map(OsString::from).collect();
        Args::parse_plain(&argv)
    }

    /// Where the fast path answers, its answer is clap's.
    fn assert_same_as_clap(argv: &[&str]) {
        if let Some(fast) = plain(argv) {
            let slow = clap_only(argv).unwrap_or_else(|e| panic!("clap refuses {argv:?}: {e}"));
            assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "{argv:?}");
        }
    }

    #[test]
    fn the_fast_path_knows_every_flag_as_clap_does() {
        let command = command();
        let mut flags = 0;
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else {
                panic!("{:?} has no long name", arg.get_id())
            };
            if matches!(long, "help" | "version") {
                continue;
            }
            flags += 1;
            assert!(by_long(long).is_some(), "--{long}");
            if let Some(short) = arg.get_short() {
                assert_eq!(by_short(short).map(|f| f.long), Some(long), "-{short}");
            }
            let boolean = by_long(long).map(|f| f.kind) == Some(Kind::Bool);
            let value = match long {
                "iptables-probe-port" => "15002",
                "probe-timeout" => "1m30s",
                "ipv6" => "auto",
                _ if boolean => "false",
                _ => "a,b:*",
            };
            let spellings = if boolean {
                vec![
                    vec![format!("--{long}")],
                    vec![format!("--{long}={value}")],
                    vec![format!("--{long}=T"), format!("--{long}=0")],
                ]
            } else {
                let mut s = vec![
                    vec![format!("--{long}"), value.to_string()],
                    vec![format!("--{long}={value}")],
                ];
                if let Some(short) = arg.get_short() {
                    s.push(vec![format!("-{short}"), value.to_string()]);
                    s.push(vec![
                        format!("-{short}"),
                        "1".into(),
                        format!("-{short}"),
                        value.into(),
                    ]);
                }
                s
            };
            for argv in spellings {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                assert!(plain(&argv).is_some(), "{argv:?} takes the fast path");
                assert_same_as_clap(&argv);
            }
        }
        assert_eq!(flags, 42);
        for c in ('a'..='z').chain('A'..='Z').chain('0'..='9') {
            if let Some(long) = by_short(c).map(|f| f.long) {
                assert!(
                    command
                        .get_arguments()
                        .any(|a| a.get_short() == Some(c) && a.get_long() == Some(long)),
                    "-{c}"
                );
            }
        }
    }

    #[test]
    fn the_injected_arguments_take_the_fast_path() {
        let mut argv = injected();
        argv.extend_from_slice(&["--ipv6", "false"]);
        assert!(plain(&argv).is_some());
        assert_same_as_clap(&argv);
        // What clap must see: help, version, errors, unusual spellings.
        for odd in [
            &["--help"][..],
            &["-h"],
            &["--version"],
            &["-p15001"],
            &["-p=15001"],
            &["-p"],
            &["-d", "-1"],
            &["--dry-run", "false"],
            &["--dry-run=yes"],
            &["--ipv6", "maybe"],
            &["--iptables-probe-port=+1"],
            &["--envoy-port="],
            &["extra"],
            &["--"],
            &["-"],
            &["--no-such-flag"],
        ] {
            assert!(plain(odd).is_none(), "{odd:?}");
        }
    }

    mod random_lines {
        use super::assert_same_as_clap;
        use proptest::prelude::*;

        /// One odd token: a flag in some spelling, known or not, or a value, plausible or not.
        fn odd() -> impl Strategy<Value = String> {
            prop_oneof![
                prop::sample::select(vec![
                    "-h",
                    "-V",
                    "-y",
                    "--help",
                    "--version",
                    "--envoy",
                    "--",
                    "-",
                    "istio-iptables",
                    "--dry-run=",
                    "--dry-run=no",
                    "--ipv6=True",
                    "-n=false",
                    "-p15001",
                    "-p=1",
                    "--probe-timeout=5",
                    "--iptables-probe-port=70000",
                    "--envoy-port=",
                    "--envoy-port=-1",
                    "--envoy-port==",
                    "--Envoy-port",
                    "-1",
                    "a=b",
                    "",
                ])
                .prop_map(str::to_string),
                "[-=a-z0-9*,:]{0,8}",
            ]
        }

        /// A flag that takes a value, and values for it (valid for its type or not).
        fn pair() -> impl Strategy<Value = Vec<String>> {
            let flag = prop::sample::select(vec![
                "-p",
                "-z",
                "-u",
                "-m",
                "-i",
                "-x",
                "-b",
                "-d",
                "--envoy-port",
                "--dns-servers",
                "--log_output_level",
                "--ipv6",
                "--iptables-probe-port",
                "--probe-timeout",
            ]);
            let value = prop::sample::select(vec![
                "",
                "*",
                "15001",
                "015002",
                "65536",
                "+5",
                "1m",
                "5s",
                "auto",
                "false",
                "true",
                "maybe",
                "a=b",
                "-1",
                "--dry-run",
                "istio-iptables",
            ]);
            (flag, value, any::<bool>()).prop_map(|(f, v, inline)| {
                if inline && f.starts_with("--") {
                    vec![format!("{f}={v}")]
                } else {
                    vec![f.to_string(), v.to_string()]
                }
            })
        }

        /// A boolean flag in one of its spellings.
        fn boolean() -> impl Strategy<Value = String> {
            let flag =
                prop::sample::select(vec!["--dry-run", "--reconcile", "--log_as_json", "-n"]);
            let value = prop::sample::select(vec!["", "=t", "=0", "=TRUE", "=False", "=yes", "="]);
            (flag, value).prop_map(|(f, v)| format!("{f}{v}"))
        }

        fn item() -> impl Strategy<Value = Vec<String>> {
            prop_oneof![
                4 => pair(),
                2 => boolean().prop_map(|b| vec![b]),
                1 => odd().prop_map(|o| vec![o]),
            ]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2048))]
            /// Whatever the command line, the fast path either declines or agrees with clap.
            #[test]
            fn the_fast_path_agrees_with_clap(items in prop::collection::vec(item(), 0..6)) {
                let tokens: Vec<String> = items.into_iter().flatten().collect();
                let argv: Vec<&str> = tokens.iter().map(String::as_str).collect();
                assert_same_as_clap(&argv);
            }
        }
    }
}
