//! The rules differential by hand (`scripts/differential.sh`): generated istio-iptables configurations
//! through Istio's `pilot-agent istio-iptables` and `iptables-init istio-iptables`, every unexplained
//! difference printed with its two command lines.
//!
//! Usage: rules-differential [--seed N] [--cases N] [--minutes M] [--start N] [--apply-every K] [--jobs J]

use anyhow::bail;
use e2e::differential::{by_hand, number, Flags};
use e2e::rules_differential::{require_root, run_cases, Programs};

fn main() -> anyhow::Result<()> {
    let mut apply_every = 20u64;
    let flags = Flags::parse(|flag, value| {
        let n = number(flag, value)?;
        match flag {
            "--apply-every" => apply_every = n,
            _ => bail!("unknown flag {flag}"),
        }
        Ok(())
    })?;
    require_root();
    let programs = Programs::built();
    let seed = flags.seed;
    by_hand(&flags, "", "", move |range, deadline| {
        run_cases(&programs, seed, range, apply_every, deadline)
    })
}
