//! The injection and template differentials by hand (`scripts/differential.sh --kind inject|template`):
//! generated cases through Istio's kube-inject code and `injector kube-inject`, every unexplained
//! difference printed with its two command lines (the case's files are kept under `--keep`).
//!
//! Usage: inject-differential --kind inject|template [--release R] [--evaluate-texts true] [--seed N] [--cases N] [--minutes M]
//!        [--start N] [--istioctl-every K] [--jobs J] [--keep DIR]
//!
//! `--evaluate-texts true` runs `injector --evaluate-texts` (every text through the evaluator, also
//! those the compiled templates render). `--release` picks the texts and the peer: `pinned` (the default; `tools/istio`'s own chart texts),
//! `pinned-next` (`tools/istio-next`'s), or a release tag `1.29.6`, `1.30.3`, `1.31.0-rc.0` (its texts and
//! values defaults from `testdata/istio/releases/<tag>`, run by the module that knows them).

use std::path::PathBuf;

use anyhow::bail;
use e2e::differential::{by_hand, Flags};
use e2e::inject_differential::generate::Kind;
use e2e::inject_differential::release::{self, Release};
use e2e::inject_differential::{kind_name, run_cases, Programs};

fn main() -> anyhow::Result<()> {
    let mut istioctl_every = 50u64;
    let mut kind = Kind::Inject;
    let mut keep = std::env::temp_dir().join("inject-differential");
    let mut release = release::PINNED;
    let mut evaluate_texts = false;
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
            "--release" => release = Release::parse(value)?,
            "--evaluate-texts" => {
                evaluate_texts = match value {
                    "true" => true,
                    "false" => false,
                    _ => bail!("--evaluate-texts {value}: expected true or false"),
                }
            }
            "--istioctl-every" => istioctl_every = e2e::differential::number(flag, value)?,
            _ => bail!("unknown flag {flag}"),
        }
        Ok(())
    })?;
    let mut programs = Programs::for_release(release);
    programs.evaluate_texts = evaluate_texts;
    let seed = flags.seed;
    by_hand(
        &flags,
        &format!("{} [{}] ", kind_name(kind), programs.describe()),
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
