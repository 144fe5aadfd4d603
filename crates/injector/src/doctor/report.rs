//! What doctor reports: findings (a level, what was found, why it matters, a fix), merged when they
//! differ only in their entries, and the report's text form (the JSON form is the serde one).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::shared::webhook_entry::Entry;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warning,
    Ok,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
            Level::Ok => "ok",
        }
    }
}

/// One result of a check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub level: Level,
    /// The check: `client-config`, `ca-bundle`, `certificate-authority`, `certificate-name`,
    /// `certificate-expiry`, `served-certificate`, `tls-version`, `endpoint`, `review`,
    /// `failure-policy`, `lock-out`, `timeout`.
    pub check: &'static str,
    /// The webhook entries concerned, as `<configuration>/<entry>`.
    pub entries: Vec<String>,
    pub found: String,
    pub why: String,
    /// A concrete command (none for `ok`).
    pub fix: Option<String>,
}

/// Everything doctor found, in check order.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// How many entries each configuration has (the text form names a whole configuration once).
    #[serde(skip)]
    pub sizes: BTreeMap<String, usize>,
    pub errors: usize,
    pub warnings: usize,
    pub findings: Vec<Finding>,
}

impl Report {
    pub(super) fn new(hooks: &[Entry], findings: Vec<Finding>) -> Report {
        let findings = merge(findings);
        let mut sizes = BTreeMap::new();
        for h in hooks {
            *sizes.entry(h.config.clone()).or_insert(0) += 1;
        }
        Report {
            sizes,
            errors: findings.iter().filter(|f| f.level == Level::Error).count(),
            warnings: findings
                .iter()
                .filter(|f| f.level == Level::Warning)
                .count(),
            findings,
        }
    }

    /// `entries` with every configuration whose entries are all listed named once.
    fn entries_text(&self, entries: &[String]) -> String {
        let mut out: Vec<String> = Vec::new();
        for (config, size) in &self.sizes {
            let mine: Vec<&String> = entries
                .iter()
                .filter(|e| e.split_once('/').is_some_and(|(c, _)| c == config))
                .collect();
            if mine.len() == *size && *size > 1 {
                out.push(format!("{config} (all {size} entries)"));
            } else {
                out.extend(mine.into_iter().cloned());
            }
        }
        out.join(", ")
    }

    /// The human-readable form.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            out.push_str(&format!(
                "{:<7} {}: {}\n",
                f.level.as_str().to_uppercase(),
                f.check,
                self.entries_text(&f.entries)
            ));
            out.push_str(&format!("  found: {}\n", f.found));
            if f.level != Level::Ok {
                out.push_str(&format!("  why:   {}\n", f.why));
            }
            if let Some(fix) = &f.fix {
                out.push_str(&format!("  fix:   {fix}\n"));
            }
        }
        let ok = self.findings.len() - self.errors - self.warnings;
        out.push_str(&format!(
            "{} error(s), {} warning(s), {ok} ok\n",
            self.errors, self.warnings
        ));
        out
    }
}

/// Findings that differ only in their entries become one.
pub(super) fn merge(findings: Vec<Finding>) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for f in findings {
        let same = out.iter_mut().find(|o| {
            o.level == f.level
                && o.check == f.check
                && o.found == f.found
                && o.why == f.why
                && o.fix == f.fix
        });
        match same {
            Some(o) => {
                for e in f.entries {
                    if !o.entries.contains(&e) {
                        o.entries.push(e);
                    }
                }
            }
            None => out.push(f),
        }
    }
    out
}

/// A JSON-patch command on one configuration.
pub(super) fn patch_fix(config: &str, ops: &[Value]) -> String {
    format!(
        "kubectl patch mutatingwebhookconfiguration {config} --type=json -p '{}'",
        Value::Array(ops.to_vec())
    )
}

pub(super) fn finding(
    level: Level,
    check: &'static str,
    hooks: &[&Entry],
    found: String,
    why: &str,
    fix: Option<String>,
) -> Finding {
    Finding {
        level,
        check,
        entries: hooks.iter().map(|h| h.label()).collect(),
        found,
        why: why.to_string(),
        fix: if level == Level::Ok { None } else { fix },
    }
}
