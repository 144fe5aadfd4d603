//! What the rules and the injection differentials share: their counts ([`Tally`]), the flags of their
//! by-hand binaries ([`Flags`]) and the run of a case range split over worker threads ([`by_hand`]).

use std::collections::BTreeMap;
use std::fmt::Display;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// The counts of a run: the cases compared, the same and allowed ones, the unexplained differences
/// (`D`), and the differential's own counts (`E`).
#[derive(Debug, Clone)]
pub struct Tally<E, D> {
    pub cases: u64,
    pub same: u64,
    pub both_refused: u64,
    pub allowed: BTreeMap<String, u64>,
    pub differences: Vec<D>,
    /// What only this differential counts.
    pub own: E,
}

// By hand: a derive would ask `D: Default` of the differences too.
impl<E: Default, D> Default for Tally<E, D> {
    fn default() -> Self {
        Tally {
            cases: 0,
            same: 0,
            both_refused: 0,
            allowed: BTreeMap::new(),
            differences: Vec::new(),
            own: E::default(),
        }
    }
}

/// A differential's own counts, added up over the worker threads.
pub trait Counts {
    /// Adds `other`'s counts to these.
    fn add(&mut self, other: Self);
}

impl<E: Counts, D> Tally<E, D> {
    /// Adds another worker's tally to this one.
    pub fn add(&mut self, other: Tally<E, D>) {
        self.cases += other.cases;
        self.same += other.same;
        self.both_refused += other.both_refused;
        for (k, v) in other.allowed {
            *self.allowed.entry(k).or_default() += v;
        }
        self.differences.extend(other.differences);
        self.own.add(other.own);
    }
}

/// The flags both by-hand binaries take; the others go to the binary's own parser.
#[derive(Debug, Clone)]
pub struct Flags {
    pub seed: u64,
    pub cases: u64,
    pub start: u64,
    pub minutes: Option<u64>,
    pub jobs: u64,
}

impl Flags {
    /// Reads `--seed`, `--cases`, `--start`, `--minutes` and `--jobs` from the command line (defaults:
    /// seed 1, 1000 cases from 0, no time limit, 2 jobs), handing every other flag and its value to `other`.
    pub fn parse(mut other: impl FnMut(&str, &str) -> Result<()>) -> Result<Flags> {
        let mut flags = Flags {
            seed: 1,
            cases: 1000,
            start: 0,
            minutes: None,
            jobs: 2,
        };
        let mut args = std::env::args().skip(1);
        while let Some(flag) = args.next() {
            let value = args
                .next()
                .with_context(|| format!("{flag} needs a value"))?;
            let slot = match flag.as_str() {
                "--seed" => &mut flags.seed,
                "--cases" => &mut flags.cases,
                "--start" => &mut flags.start,
                "--minutes" => flags.minutes.insert(0),
                "--jobs" => &mut flags.jobs,
                _ => {
                    other(&flag, &value)?;
                    continue;
                }
            };
            *slot = number(&flag, &value)?;
        }
        flags.jobs = flags.jobs.max(1);
        Ok(flags)
    }
}

/// A flag's value as a number.
pub fn number(flag: &str, value: &str) -> Result<u64> {
    value.parse().with_context(|| format!("{flag} {value}"))
}

/// Runs the cases `flags` name split over its jobs, each range through `worker` (stopping at the
/// deadline), prints every difference followed by `after`, then `{label}seed …: {tally} in …`; fails
/// when a difference is unexplained.
pub fn by_hand<E, D>(
    flags: &Flags,
    label: &str,
    after: &str,
    worker: impl Fn(Range<u64>, Option<Instant>) -> Result<Tally<E, D>> + Send + Sync + 'static,
) -> Result<()>
where
    E: Counts + Default + Send + 'static,
    D: Display + Send + 'static,
    Tally<E, D>: Display,
{
    let Flags {
        seed,
        cases,
        start,
        minutes,
        jobs,
    } = *flags;
    let deadline = minutes.map(|m| Instant::now() + Duration::from_secs(m * 60));
    let began = Instant::now();
    let per = cases.div_ceil(jobs);
    let worker = Arc::new(worker);
    let handles: Vec<_> = (0..jobs)
        .map(|j| {
            let worker = Arc::clone(&worker);
            let from = start + j * per;
            let to = (from + per).min(start + cases);
            std::thread::spawn(move || worker(from..to, deadline))
        })
        .collect();
    let mut total = Tally::default();
    for h in handles {
        total.add(
            h.join()
                .map_err(|_| anyhow::anyhow!("a worker panicked"))??,
        );
    }
    for d in &total.differences {
        println!("{d}{after}");
    }
    println!(
        "{label}seed {seed}, cases {start}..: {total} in {:.0?}",
        began.elapsed()
    );
    if !total.differences.is_empty() {
        bail!("{} unexplained differences", total.differences.len());
    }
    Ok(())
}
