//! Thin main: parse the command line and hand over to the library.

use clap::{Parser, Subcommand};

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
    /// Generate a CA, a serving certificate and the MutatingWebhookConfiguration.
    Certs(injector::certs::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::KubeInject(args) => injector::kube_inject::run(args),
        Command::Serve(args) => {
            // The webhook's hot path allocates heavily: run it with a larger glibc tcache (see the module).
            injector::malloc::reexec_with_tuned_malloc();
            injector::server::run(args)
        }
        Command::Certs(args) => injector::certs::run(args),
    }
}
