//! (placeholder: filled in by its owner)

/// `injector kube-inject` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `injector kube-inject`.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("kube-inject is not built yet")
}
