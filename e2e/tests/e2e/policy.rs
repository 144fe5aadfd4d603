//! The MutatingAdmissionPolicy of `injector policy` through the real kube-apiserver (issue 31): a sample
//! of the policy differential in CI (`e2e::policy_differential`; `scripts/differential.sh --kind policy`
//! runs the big one). Pods created with the policy and no webhook, with the webhook and no policy, and
//! with both are compared after the apiserver's defaulting; the policy injects exactly the pods
//! `injector explain --policy` says it does, and those as the webhook injects them.

use e2e::policy_differential::{corpus, generated, report, Harness, Tally};

/// The CI seed, its cases and how many share a configuration.
const SEED: u64 = 31;
const CASES: u64 = 120;
const PER_CONFIG: u64 = 30;

fn assert_clean(label: &str, tally: &Tally) {
    eprint!("{}", report(label, tally));
    assert!(tally.differences.is_empty(), "{}", report(label, tally));
}

#[test]
fn generated_pods_and_corpus_cases_are_injected_by_the_policy_as_by_the_webhook() {
    let h = Harness::new().expect("a control plane with the policy API");

    let mut generated_tally = Tally::default();
    for (config, pods) in generated(SEED, 0, CASES, PER_CONFIG).expect("generated cases") {
        generated_tally.add(h.run(&config, &pods, 2).expect("the phases ran"));
    }
    assert_clean("generated", &generated_tally);
    // Not vacuous: the policy injected some pods and left some to the webhook.
    assert!(generated_tally.covered >= 10, "{generated_tally}");
    assert!(!generated_tally.left.is_empty(), "{generated_tally}");

    // Every fourth case of the public corpus (its own configuration each).
    let mut corpus_tally = Tally::default();
    for (config, pods) in corpus().expect("the corpus").into_iter().step_by(4) {
        corpus_tally.add(h.run(&config, &pods, 1).expect("the phases ran"));
    }
    for c in &corpus_tally.left_cases {
        eprintln!("corpus: left to the webhook: {c}");
    }
    assert_clean("corpus", &corpus_tally);
    // The policy injects at least 80 % of the sample's pods the webhook injects (the full corpus:
    // docs/policy-differential.md).
    assert!(
        corpus_tally.covered * 5 >= corpus_tally.webhook_injected * 4 && corpus_tally.covered > 0,
        "{corpus_tally}"
    );
}
