//! The allow-list of the rules differential: the classes of difference where Istio is wrong, each
//! recognised here by what the case and the two outcomes show, and documented (reason, Istio's function)
//! in `e2e/rules-differential-allow.tsv`. A difference outside these classes fails the run.

use super::generate::Case;
use super::Outcome;

/// A class of allowed difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Istio accepts the configuration and records rules that `iptables-restore` refuses (so its real
    /// run fails); `iptables-init` refuses the configuration up front.
    IstioRulesRefusedByKernel,
    /// Istio's `--native-nftables` transaction is refused by the kernel (`nft` reports "Could not
    /// process rule" or a syntax error), so Istio's run fails; `iptables-init` applies.
    IstioNftRefusedByKernel,
    /// `-m` is neither `REDIRECT`, `TPROXY` nor empty: Istio silently uses REDIRECT.
    UnknownInterceptionMode,
    /// `-u ,` / `-g ,`: a list with no id; Istio installs no owner exclusion for the proxy.
    EmptyIdList,
    /// A positional argument besides the leading `istio-iptables`: Istio ignores it.
    StrayArgument,
    /// A port 0 or above 65535, a TPROXY mark 0 or 1338, or a reserved route table: values the
    /// kernel takes but that break the pod's traffic.
    ReservedValue,
    /// A value with whitespace or a quote, or an interface name starting with `-`: Istio splices it
    /// into an `iptables-restore` line, whose tokenizer re-splits it.
    RestoreLineInjection,
    /// A value `iptables-init` refuses that appears nowhere in what Istio produced: Istio never used it
    /// (`--skip-rule-apply`, a TPROXY setting in REDIRECT mode) or dropped it silently.
    ValueIstioIgnores,
    /// An interface name with a character outside `A-Z a-z 0-9 . _ - + @` or a `+` before its end.
    InterfaceNameCharset,
    /// `--cleanup-only` in a namespace without a usable address: Istio looks for the pod's address
    /// before it cleans up and fails.
    CleanupWithoutAddress,
    /// `--cleanup-only` with TPROXY: Istio's cleanup adds its policy route again and removes none.
    IstioCleanupAddsRoutes,
    /// A TPROXY mark that is not plain decimal (`0x10`, `010`): Istio's rules and routes read it
    /// differently.
    MarkSpelling,
}

impl Class {
    pub const ALL: &'static [Class] = &[
        Class::IstioRulesRefusedByKernel,
        Class::IstioNftRefusedByKernel,
        Class::UnknownInterceptionMode,
        Class::EmptyIdList,
        Class::StrayArgument,
        Class::ReservedValue,
        Class::RestoreLineInjection,
        Class::ValueIstioIgnores,
        Class::InterfaceNameCharset,
        Class::CleanupWithoutAddress,
        Class::IstioCleanupAddsRoutes,
        Class::MarkSpelling,
    ];

    /// The class's name in the allow-list file.
    pub fn name(self) -> &'static str {
        match self {
            Class::IstioRulesRefusedByKernel => "istio-rules-refused-by-kernel",
            Class::IstioNftRefusedByKernel => "istio-nft-refused-by-kernel",
            Class::UnknownInterceptionMode => "unknown-interception-mode",
            Class::EmptyIdList => "empty-id-list",
            Class::StrayArgument => "stray-argument",
            Class::ReservedValue => "reserved-value",
            Class::RestoreLineInjection => "restore-line-injection",
            Class::ValueIstioIgnores => "value-istio-ignores",
            Class::InterfaceNameCharset => "interface-name-charset",
            Class::CleanupWithoutAddress => "cleanup-without-address",
            Class::IstioCleanupAddsRoutes => "istio-cleanup-adds-routes",
            Class::MarkSpelling => "mark-spelling",
        }
    }
}

/// The allow-list file.
pub fn file() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("rules-differential-allow.tsv")
}

/// The class names the allow-list file lists (rows `class<TAB>Istio function<TAB>reason`, `#` comments).
pub fn listed() -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(file()).expect("e2e/rules-differential-allow.tsv");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let cells: Vec<&str> = l.split('\t').collect();
            assert_eq!(
                cells.len(),
                3,
                "allow-list row {l:?}: class, Istio function, reason"
            );
            (
                cells[0].to_string(),
                cells[1].to_string(),
                cells[2].to_string(),
            )
        })
        .collect()
}

/// The allowed class of a difference between `istio` and `ours` on `case`, if any. Each class is
/// recognised from what the outcomes show: the refusing side's own error message (iptables-init names
/// the flag and the rule it broke) or nft's report in Istio's log.
pub fn classify(case: &Case, istio: &Outcome, ours: &Outcome) -> Option<Class> {
    if istio.ok && ours.ok {
        // Only the routes differ, and only on Istio's side, after a cleanup.
        let routes_only = |r: &String| r.contains("rule show:") || r.contains("route show");
        let extra: Vec<&String> = istio
            .result
            .iter()
            .filter(|l| !ours.result.contains(l))
            .collect();
        let missing = ours.result.iter().any(|l| !istio.result.contains(l));
        let only_routes = !extra.is_empty() && extra.iter().all(|l| routes_only(l)) && !missing;
        return (case.cleanup && only_routes).then_some(Class::IstioCleanupAddsRoutes);
    }
    if !istio.ok && ours.ok {
        if case.cleanup && istio.stderr.contains("no valid local IP address found") {
            return Some(Class::CleanupWithoutAddress);
        }
        let nft_refused = istio.stderr.contains("nftables run failed")
            && (istio.stderr.contains("Error: Could not process rule")
                || istio.stderr.contains("Error: syntax error"));
        return nft_refused.then_some(Class::IstioNftRefusedByKernel);
    }
    if !istio.ok || ours.ok {
        return None;
    }
    let said = |needle: &str| ours.stderr.contains(needle);
    if ours.status.contains("255") && case.args.iter().any(|a| a == "stray") {
        return Some(Class::StrayArgument);
    }
    if said("unknown mode (REDIRECT, TPROXY or empty") {
        return Some(Class::UnknownInterceptionMode);
    }
    if said("mark must be a decimal number without leading zeros")
        || (said("-t/--istio-inbound-tproxy-mark")
            && refused_value(&ours.stderr).is_some_and(|v| v.starts_with("0x")))
    {
        return Some(Class::MarkSpelling);
    }
    if said("no uid in the list") || said("no gid in the list") {
        return Some(Class::EmptyIdList);
    }
    if said("port out of range (1-65535)")
        || said("mark 0 matches unmarked packets")
        || said("are reserved")
    {
        return Some(Class::ReservedValue);
    }
    // The value iptables-init refused, from its message `invalid value "<v>" for ...`.
    let refused = refused_value(&ours.stderr)?;
    if refused
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '\'')
        || (said("interface name") && refused.starts_with('-'))
    {
        return Some(Class::RestoreLineInjection);
    }
    let appears = istio.result.iter().any(|line| {
        line.split(|c: char| c.is_whitespace() || c == ',' || c == '{' || c == '}' || c == '"')
            .any(|w| w == refused)
    });
    if !appears {
        return Some(Class::ValueIstioIgnores);
    }
    if said("interface name") {
        return Some(Class::InterfaceNameCharset);
    }
    None
}

/// The value of iptables-init's `invalid value "<v>" for ...` error, unescaped (its messages quote
/// with Rust's `{:?}`).
fn refused_value(stderr: &str) -> Option<String> {
    // With --log_as_json the message is a JSON string: its quotes come escaped.
    let unescaped;
    let stderr = if stderr.contains("invalid value \\\"") {
        unescaped = stderr.replace("\\\"", "\"");
        unescaped.as_str()
    } else {
        stderr
    };
    let start = stderr.find("invalid value \"")? + "invalid value \"".len();
    let mut out = String::new();
    let mut chars = stderr[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                't' => out.push('\t'),
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refused_value_is_read_back_from_the_message() {
        let msg = "ERROR invalid value \" 1337\" for -g/--proxy-gid: gid must be a decimal number";
        assert_eq!(refused_value(msg).as_deref(), Some(" 1337"));
        let msg = "invalid value \"x\\\"y\" for -c/--istio-exclude-interfaces: not a valid interface name";
        assert_eq!(refused_value(msg).as_deref(), Some("x\"y"));
        assert_eq!(refused_value("no value here"), None);
    }

    #[test]
    fn the_allow_list_file_documents_exactly_the_classes() {
        let rows = listed();
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        let ours: Vec<&str> = Class::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names, ours);
        for (class, function, reason) in rows {
            assert!(
                !function.trim().is_empty() && !reason.trim().is_empty(),
                "{class}"
            );
        }
    }
}
