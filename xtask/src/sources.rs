//! What the reference pages are generated from: one function per input, each reaching the one definition
//! in the code through its crate's public API. When a definition moves, only its function here changes.

use clap::{Args as _, CommandFactory as _};

pub use sidecar_core::annotations::Annotation;
pub use sidecar_core::flags::{Fallback, Flag, Group, Kind};

/// istio-iptables' flags as `sidecar-core` defines them: iptables-init's parsing, `--help` and resolution
/// read the same table, in `--help`'s order.
pub fn iptables_init_flags() -> &'static [&'static Flag] {
    &sidecar_core::flags::FLAGS
}

/// The flags `iptables-init explain` takes besides a run's.
pub fn iptables_init_explain_flags() -> &'static [&'static Flag] {
    &sidecar_core::flags::EXPLAIN_FLAGS
}

/// iptables-init's exit statuses and their causes (`None`: any other status).
pub fn iptables_init_exit_statuses() -> &'static [(Option<u8>, &'static str)] {
    iptables_init::EXIT_STATUSES
}

/// The clap command of the injector's subcommand `name`, as `crates/injector/src/main.rs` builds it from
/// the library's argument types (the subcommand names are its `Command` variants', kebab-cased).
pub fn injector_subcommand(name: &str) -> Option<clap::Command> {
    use clap::Command;
    Some(match name {
        "kube-inject" => injector::kube_inject::Args::augment_args(Command::new("kube-inject")),
        "serve" => injector::serve::Args::augment_args(Command::new("serve")),
        "certs" => injector::certs::Args::augment_args(Command::new("certs")),
        "webhook-config" => injector::shared::webhook_config::CommandArgs::augment_args(
            Command::new("webhook-config"),
        ),
        "policy" => injector::policy::Args::augment_args(Command::new("policy")),
        "doctor" => injector::doctor::Args::augment_args(Command::new("doctor")),
        "explain" => injector::explain::Args::augment_args(Command::new("explain")),
        _ => return None,
    })
}

/// `istio-cni install`, the node agent's command.
pub fn istio_cni_install() -> clap::Command {
    istio_cni::agent::cli::InstallArgs::command()
}

/// The CNI error codes istio-cni answers with, and when.
pub fn istio_cni_error_codes() -> &'static [(u32, &'static str)] {
    istio_cni::plugin::spec::CODES
}

/// The metrics of `injector serve`, as a fresh registry encodes them (one sample per labelled family).
pub fn injector_metrics() -> String {
    injector::shared::metrics::exposition()
}

/// The metrics of the istio-cni node agent, likewise.
pub fn istio_cni_metrics() -> String {
    istio_cni::agent::metrics::exposition()
}

/// The pod annotations the injector and the CNI plugin share, one row each.
pub fn annotations() -> &'static [&'static Annotation] {
    &sidecar_core::annotations::ANNOTATIONS
}

/// The annotations the injector checks before anything renders (Istio's `validate.go` table and more).
pub fn injector_validated_annotations() -> Vec<&'static str> {
    inject::validated_annotations().collect()
}

/// The chart's `files/policy.json`: the params CRD and the MutatingAdmissionPolicy's spec, which are
/// the same for every configuration, as `injector policy` writes them (compiled here for the built-in
/// configuration).
pub fn chart_policy() -> Result<serde_json::Value, String> {
    use injector::policy::{compile, ApiVersion};
    let settings = inject::config::Settings::from_documents(None, None, None, true, "", "")
        .map_err(|e| e.to_string())?;
    let engine = inject::engine::Engine::new(settings);
    let webhook = injector::shared::webhook_config::Args::for_revision("", false)
        .map_err(|e| e.to_string())?;
    let compiled =
        compile(&engine, &webhook, &[], ApiVersion::V1beta1).map_err(|e| e.to_string())?;
    Ok(serde_json::json!({
        "crd": compiled.crd,
        "policySpec": compiled.policy["spec"],
    }))
}

#[cfg(test)]
mod tests {
    /// Each exposition lists every metric its file registers: a labelled family left without its
    /// sample would be missing from docs/reference/metrics.md.
    #[test]
    fn each_exposition_lists_every_registered_metric() {
        let files: [(&str, &str, &[&str], String); 2] = [
            (
                "crates/injector/src/shared/metrics.rs",
                include_str!("../../crates/injector/src/shared/metrics.rs"),
                &["sidecar_injection_", "injector_", "webhook_patch_"],
                super::injector_metrics(),
            ),
            (
                "crates/istio-cni/src/agent/metrics.rs",
                include_str!("../../crates/istio-cni/src/agent/metrics.rs"),
                &["istio_cni_"],
                super::istio_cni_metrics(),
            ),
        ];
        for (path, source, prefixes, exposition) in files {
            let production = &source[..source.find("#[cfg(test)]").unwrap_or(source.len())];
            let mut registered: Vec<&str> = production
                .split('"')
                .skip(1)
                .step_by(2)
                .filter(|s| {
                    prefixes.iter().any(|p| s.starts_with(p))
                        && s.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
                })
                .collect();
            registered.sort_unstable();
            let mut listed: Vec<&str> = exposition
                .lines()
                .filter_map(|l| l.strip_prefix("# HELP "))
                .filter_map(|l| l.split(' ').next())
                .collect();
            listed.sort_unstable();
            assert_eq!(listed, registered, "{path}");
        }
    }
}
