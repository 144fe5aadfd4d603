//! The policy differential by hand (`scripts/differential.sh --kind policy`): generated pods, and the
//! public corpus' cases, through a real kube-apiserver with the MutatingAdmissionPolicy of `injector
//! policy`, with the webhook, and with both (`e2e::policy_differential`). Prints every unexplained
//! difference and the counts, the covered fractions among them; exits 1 on a difference.
//!
//! `policy-differential [--seed S] [--cases N] [--start I] [--per-config K] [--jobs J] [--corpus 0|1]
//! [--corpus-match TEXT]` (only the corpus cases whose name contains TEXT). The corpus' pods left to the
//! webhook are listed with the subset rule that left them.

use anyhow::{bail, Context as _, Result};
use e2e::policy_differential::{corpus, generated, report, Harness, Tally};

fn main() -> Result<()> {
    let mut seed = 1;
    let mut cases = 1000;
    let mut start = 0;
    let mut per_config = 100;
    let mut jobs = 2;
    let mut with_corpus = true;
    let mut corpus_match = String::new();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let [k, v] = pair else {
            bail!("usage: policy-differential [--seed S] [--cases N] [--start I] [--per-config K] [--jobs J] [--corpus 0|1] [--corpus-match TEXT]")
        };
        let n = || v.parse::<u64>().with_context(|| format!("{k} {v}"));
        match k.as_str() {
            "--seed" => seed = n()?,
            "--cases" => cases = n()?,
            "--start" => start = n()?,
            "--per-config" => per_config = n()?,
            "--jobs" => jobs = n()?.max(1) as usize,
            "--corpus" => with_corpus = v == "1",
            "--corpus-match" => corpus_match = v.clone(),
            other => bail!("unknown flag {other}"),
        }
    }
    let began = std::time::Instant::now();
    let h = Harness::new()?;
    let mut failed = false;
    if with_corpus {
        let mut t = Tally::default();
        for (config, pods) in corpus()? {
            if pods.iter().any(|p| p.name.contains(&corpus_match)) {
                t.add(h.run(&config, &pods, jobs)?);
            }
        }
        for c in &t.left_cases {
            println!("corpus: left to the webhook: {c}");
        }
        print!("{}", report("corpus", &t));
        failed |= !t.differences.is_empty();
    }
    let mut t = Tally::default();
    for (config, pods) in generated(seed, start, start + cases, per_config)? {
        t.add(h.run(&config, &pods, jobs)?);
    }
    print!(
        "{}",
        report(
            &format!("generated (seed {seed}, cases {start}..{})", start + cases),
            &t
        )
    );
    failed |= !t.differences.is_empty();
    println!("in {:.0?}", began.elapsed());
    if failed {
        bail!("unexplained differences");
    }
    Ok(())
}
