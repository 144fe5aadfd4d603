//! The injection and template differentials in CI: a fixed seed's cases
//! through Istio's own kube-inject code (`inject-batch`, with a sample through the real `istioctl`) and
//! `injector kube-inject` (see `e2e::inject_differential`), with no unexplained difference.
//! `scripts/differential.sh --kind inject|template` runs more by hand.
//!
//! The `every_release_*` tests run each Istio release's own texts (`testdata/istio/releases/<tag>`, issue
//! 30) in the injector config's `templates` of both sides, on the peer of the module that knows them,
//! with the init containers' image compared and the inputs the tags' texts differ on added
//! (`Release::vary`): 1.29.6 and 1.30.3's `istio-init` image is `.ProxyImage`, their canonical name is
//! trimmed with `trimSuffix "-"`, and 1.29.6 has no `OTEL_RESOURCE_ATTRIBUTES`. `injector` evaluates
//! those texts; 1.31.0-rc.0's are the compiled templates', so that release runs twice, compiled and
//! with `--evaluate-texts`.

use e2e::inject_differential::generate::Kind;
use e2e::inject_differential::release::Release;
use e2e::inject_differential::{run_cases, Programs, Tally};

/// The CI seed and case count of each kind: a few hundred cases, bounded by the per-case process runs.
const SEED: u64 = 21;
const CASES: u64 = 300;
/// Every 25th case also through the real istioctl (12 a kind).
const ISTIOCTL_EVERY: u64 = 25;

/// The per-release sample: each release's texts over a smaller run of the same seed.
const RELEASE_CASES: u64 = 60;
/// Every 20th case also through the release's istioctl (3 a release).
const RELEASE_ISTIOCTL_EVERY: u64 = 20;

fn run(kind: Kind) -> Tally {
    run_with(&Programs::built(), kind, CASES, ISTIOCTL_EVERY)
}

fn run_with(programs: &Programs, kind: Kind, cases: u64, istioctl_every: u64) -> Tally {
    let keep = std::env::temp_dir().join("inject-differential-ci");
    let tally = run_cases(programs, kind, SEED, 0..cases, istioctl_every, None, &keep)
        .expect("the differential ran");
    eprintln!("{}: {tally}", programs.describe());
    assert!(
        tally.differences.is_empty(),
        "{}\n{}: {tally}",
        tally.differences.join("\n\n"),
        programs.describe()
    );
    assert_eq!(tally.cases, cases);
    assert_eq!(tally.own.istioctl, cases.div_ceil(istioctl_every));
    tally
}

/// `release`'s texts through its peer and `injector`: no unexplained difference, and most cases compared.
fn release_injects_as_istio_does(release: &str, evaluate_texts: bool) {
    let release = Release::parse(release).expect("a known release");
    let mut programs = Programs::for_release(release);
    programs.evaluate_texts = evaluate_texts;
    let tally = run_with(
        &programs,
        Kind::Inject,
        RELEASE_CASES,
        RELEASE_ISTIOCTL_EVERY,
    );
    assert!(
        tally.same - tally.both_refused > RELEASE_CASES / 3,
        "{tally}"
    );
}

#[test]
fn every_release_injects_as_istio_does_1_29_6() {
    release_injects_as_istio_does("1.29.6", false);
}

#[test]
fn every_release_injects_as_istio_does_1_30_3() {
    release_injects_as_istio_does("1.30.3", false);
}

#[test]
fn every_release_injects_as_istio_does_1_31_0_rc_0() {
    release_injects_as_istio_does("1.31.0-rc.0", false);
}

#[test]
fn every_release_injects_as_istio_does_1_31_0_rc_0_evaluated() {
    release_injects_as_istio_does("1.31.0-rc.0", true);
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
