//! Thin main: parse the command line and hand over to the library.

use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator (the default `mimalloc` feature; `--no-default-features`
/// builds with the system allocator): an injection builds and drops about a thousand small JSON nodes,
/// and glibc's malloc/free pair costs several times mimalloc's there (bench/README.md); it also spares the webhook
/// glibc tuning and musl's slow allocator should the binary be built for musl.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "injector",
    version,
    about = "Istio-compatible sidecar injector"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inject sidecars into Kubernetes manifests offline (like `istioctl kube-inject`).
    KubeInject(injector::kube_inject::Args),
    /// Serve the MutatingAdmissionWebhook over HTTPS.
    Serve(injector::server::Args),
    /// Generate a CA, a serving certificate and the MutatingWebhookConfigurations.
    Certs(injector::certs::Args),
    /// Print the MutatingWebhookConfigurations Istio's charts would register for this injector.
    WebhookConfig(injector::webhook_config::CommandArgs),
    /// Check a deployed webhook: caBundle, serving certificate, TLS, a sample review, lock-out risks.
    Doctor(injector::doctor::Args),
    /// Explain offline why each workload of a manifest would or would not be injected, and where its traffic goes.
    Explain(injector::explain::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::KubeInject(args) => injector::kube_inject::run(args),
        Command::Serve(args) => injector::server::run(args),
        Command::Certs(args) => injector::certs::run(args),
        Command::WebhookConfig(args) => injector::webhook_config::run(args),
        Command::Doctor(args) => std::process::exit(i32::from(!injector::doctor::run(args)?)),
        Command::Explain(args) => Ok(injector::explain::run(args)?),
    }
}
