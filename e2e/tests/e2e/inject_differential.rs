//! The injection and template differentials in CI: a fixed seed's cases
//! through Istio's own kube-inject code (`inject-batch`, with a sample through the real `istioctl`) and
//! `injector kube-inject` (see `e2e::inject_differential`), with no unexplained difference.
//! `scripts/differential.sh --kind inject|template` runs more by hand.

use e2e::inject_differential::generate::Kind;
use e2e::inject_differential::{run_cases, Programs, Tally};

/// The CI seed and case count of each kind: a few hundred cases, bounded by the per-case process runs.
const SEED: u64 = 21;
const CASES: u64 = 300;
/// Every 25th case also through the real istioctl (12 a kind).
const ISTIOCTL_EVERY: u64 = 25;

fn run(kind: Kind) -> Tally {
    let programs = Programs::built();
    let keep = std::env::temp_dir().join("inject-differential-ci");
    let tally = run_cases(&programs, kind, SEED, 0..CASES, ISTIOCTL_EVERY, None, &keep)
        .expect("the differential ran");
    eprintln!("{tally}");
    assert!(
        tally.differences.is_empty(),
        "{}\n{tally}",
        tally.differences.join("\n\n")
    );
    assert_eq!(tally.cases, CASES);
    assert_eq!(tally.own.istioctl, CASES.div_ceil(ISTIOCTL_EVERY));
    tally
}

#[test]
fn generated_workloads_inject_as_istio_does() {
    let tally = run(Kind::Inject);
    // Guard against a vacuous pass: most cases are accepted by both and compared object by object.
    assert!(tally.same - tally.both_refused > CASES / 3, "{tally}");
}

#[test]
fn generated_user_templates_render_as_istio_does() {
    let tally = run(Kind::Template);
    assert!(tally.same - tally.both_refused > CASES / 4, "{tally}");
}
