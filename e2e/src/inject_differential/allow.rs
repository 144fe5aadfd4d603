//! The allow-list of the injection and template differentials: the classes of difference accepted, each
//! recognised here from the case and the two outcomes, and documented (reason, Istio's function) in
//! `e2e/inject-differential-allow.tsv`. Any other difference fails the run.

use super::generate::{Case, Kind};
use super::Outcome;

/// A class of allowed difference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Istio's code panicked or its process died on the case; `injector` answered (an output or an error).
    IstioCrash,
    /// A user template uses a construct or function outside the `gotemplate` subset, or exceeds one of its
    /// documented bounds (`Limits`): `injector` refuses it, as its module documentation says, where Go's
    /// `text/template` runs it.
    TemplateOutsideSubset,
    /// Version skew: `injector` (with `testdata/istio`'s commit) refuses a `prometheus.io/port` or
    /// `prometheus.istio.io/scrape-targets` port that cannot be scraped; the pinned Istio has no such check
    /// (and no scrape targets) and merges the annotation as it is.
    SkewPrometheusPortCheck,
    /// Version skew: `injector` (with `testdata/istio`'s commit) refuses an invalid
    /// `traffic.sidecar.istio.io/includeOutboundPorts`; the pinned Istio's `validate.go` has no validator
    /// for it and passes the value to `istio-init`, whose `istio-iptables` then fails in the pod.
    SkewIncludeOutboundPortsCheck,
}

/// Every class, in the order of the TSV file.
pub const CLASSES: [Class; 4] = [
    Class::IstioCrash,
    Class::TemplateOutsideSubset,
    Class::SkewPrometheusPortCheck,
    Class::SkewIncludeOutboundPortsCheck,
];

/// The class of a difference, or `None` when it is unexplained.
pub fn classify(case: &Case, istio: &Outcome, ours: &Outcome) -> Option<Class> {
    if !istio.ok && (istio.error.starts_with("panic:") || istio.error.starts_with("crash:")) {
        return Some(Class::IstioCrash);
    }
    if istio.ok && !ours.ok && ours.error.contains("invalid prometheus scrape") {
        return Some(Class::SkewPrometheusPortCheck);
    }
    if istio.ok
        && !ours.ok
        && ours
            .error
            .contains("annotation 'traffic.sidecar.istio.io/includeOutboundPorts'")
    {
        return Some(Class::SkewIncludeOutboundPortsCheck);
    }
    if case.kind == Kind::Template && !ours.ok && subset_refusal(&ours.error) {
        return Some(Class::TemplateOutsideSubset);
    }
    None
}

/// True when `injector`'s error is one of the subset's documented refusals of the user template
/// (`gotemplate::ParseError::Unsupported*`, `nil` as a command, `ExecError::Unsupported`, `ExecError::Limit`).
fn subset_refusal(error: &str) -> bool {
    error.contains("template \"custom\"")
        && (error.contains("unsupported")
            || error.contains("nil is not a command")
            || error.contains("limit") && error.contains("exceeded"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tsv_lists_exactly_the_classes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/inject-differential-allow.tsv");
        let text = std::fs::read_to_string(path).expect("the allow-list file");
        let listed: Vec<String> = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let cols: Vec<&str> = l.split('\t').collect();
                assert_eq!(cols.len(), 3, "class, Istio function, reason: {l}");
                assert!(cols.iter().all(|c| !c.trim().is_empty()), "{l}");
                cols[0].to_string()
            })
            .collect();
        let classes: Vec<String> = CLASSES.iter().map(|c| format!("{c:?}")).collect();
        assert_eq!(listed, classes);
    }
}
