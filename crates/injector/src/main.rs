//! Thin main: parse the command line and hand over to the library.

use std::process::ExitCode;

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
    // Boxed: serve's flags are most of the enum's size, and it is parsed once.
    Serve(Box<injector::serve::Args>),
    /// Generate a CA, a serving certificate and the MutatingWebhookConfigurations.
    Certs(injector::certs::Args),
    /// Print the MutatingWebhookConfigurations Istio's charts would register for this injector.
    WebhookConfig(injector::shared::webhook_config::CommandArgs),
    /// Print the MutatingAdmissionPolicy (with its params and bindings) that injects, inside the API
    /// server, the pods it can render exactly; the webhook injects the others.
    Policy(injector::policy::Args),
    /// Check a deployed webhook: caBundle, serving certificate, TLS, a sample review, lock-out risks.
    Doctor(injector::doctor::Args),
    /// Explain offline why each workload of a manifest would or would not be injected, and where its traffic goes.
    Explain(injector::explain::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::KubeInject(args) => injector::kube_inject::run(args),
        Command::Serve(args) => injector::serve::run(*args),
        Command::Certs(args) => injector::certs::run(args),
        Command::WebhookConfig(args) => injector::shared::webhook_config::run(args),
        Command::Policy(args) => injector::policy::run(args),
        // doctor's findings decide its status: 1 when one is an error.
        Command::Doctor(args) => match injector::doctor::run(args) {
            Ok(ok) => {
                return if ok {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => Err(e.into()),
        },
        Command::Explain(args) => injector::explain::run(args).map_err(anyhow::Error::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", injector::error_report::error_report(&e));
            ExitCode::FAILURE
        }
    }
}
