//! (placeholder: filled in by its owner)

/// `injector serve` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `injector serve`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("serve is not built yet")
}
