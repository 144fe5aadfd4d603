//! The injection and template differentials by hand (`scripts/differential.sh --kind inject|template`):
//! generated cases through Istio's kube-inject code and `injector kube-inject`, every unexplained
//! difference printed with its two command lines (the case's files are kept under `--keep`).
//!
//! Usage: inject-differential --kind inject|template [--seed N] [--cases N] [--minutes M] [--start N]
//!        [--istioctl-every K] [--jobs J] [--keep DIR]

use std::path::PathBuf;

use anyhow::bail;
use e2e::differential::{by_hand, Flags};
use e2e::inject_differential::generate::Kind;
use e2e::inject_differential::{kind_name, run_cases, Programs};

fn main() -> anyhow::Result<()> {
    let mut istioctl_every = 50u64;
    let mut kind = Kind::Inject;
    let mut keep = std::env::temp_dir().join("inject-differential");
    let flags = Flags::parse(|flag, value| {
        match flag {
            "--kind" => {
                kind = match value {
                    "inject" => Kind::Inject,
                    "template" => Kind::Template,
                    _ => bail!("--kind {value}: expected inject or template"),
                }
            }
            "--keep" => keep = PathBuf::from(value),
            "--istioctl-every" => istioctl_every = e2e::differential::number(flag, value)?,
            _ => bail!("unknown flag {flag}"),
        }
        Ok(())
    })?;
    let programs = Programs::built();
    let seed = flags.seed;
    by_hand(
        &flags,
        &format!("{} ", kind_name(kind)),
        "\n",
        move |range, deadline| {
            run_cases(
                &programs,
                kind,
                seed,
                range,
                istioctl_every,
                deadline,
                &keep,
            )
        },
    )
}
