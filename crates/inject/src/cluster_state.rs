//! Cluster state that Istio's webhook reads from the API server, given here as files: ProxyConfig
//! resources (`--proxy-configs`) and, on OpenShift (`--platform openshift`), the Namespaces
//! (`--namespaces`). Loaded with the configuration and replaced whole on reload.

use std::path::PathBuf;

use crate::kube_objects::ObjectsError;
use crate::namespaces::Namespaces;
use crate::native_sidecars::Nodes;
use crate::proxy_config_resources::ProxyConfigResources;

/// `--proxy-configs`, taken by `serve`, `kube-inject` and `explain`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProxyConfigArgs {
    /// ProxyConfig resources (`networking.istio.io/v1beta1`), a YAML stream or a `List` as
    /// `kubectl get proxyconfigs -A -o yaml` prints it; merged into each pod's ProxyConfig with the
    /// webhook's precedence (reloaded by `serve` when the file changes). At most 16 MiB.
    #[arg(long = "proxy-configs", value_name = "FILE")]
    pub proxy_configs: Option<PathBuf>,
}

/// `--platform` and `--namespaces`, taken by `serve` and `explain` (Istio's kube-inject never looks a
/// Namespace up).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PlatformArgs {
    /// The platform (istiod's `PLATFORM`); `openshift` takes the proxy uid/gid from the pod's Namespace.
    #[arg(long = "platform", env = "PLATFORM", default_value = "")]
    pub platform: String,
    /// Namespace objects, a YAML stream or a `List` as `kubectl get ns -o yaml` prints it, for
    /// `--platform openshift` (reloaded when the file changes); `explain` also routes by their labels.
    /// At most 16 MiB.
    #[arg(long = "namespaces", value_name = "FILE")]
    pub namespaces: Option<PathBuf>,
}

impl PlatformArgs {
    /// Istio's `platform.IsOpenShift`: the value is exactly `openshift`.
    pub fn is_openshift(&self) -> bool {
        self.platform == "openshift"
    }
}

/// The loaded cluster state; the default is what an injector without the flags sees.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterState {
    /// `None` without `--proxy-configs`: the ProxyConfig is then computed as before (no precedence
    /// rules of the resources).
    pub proxy_configs: Option<ProxyConfigResources>,
    /// `--platform openshift`.
    pub openshift: bool,
    pub namespaces: Namespaces,
    /// The Nodes' kubelet versions, watched with `serve --kubeconfig`; `None` from files (native
    /// sidecars `auto` is then on, see `native_sidecars`).
    pub nodes: Option<Nodes>,
    /// Flags that have no effect as given.
    pub warnings: Vec<String>,
}

impl ClusterState {
    /// Loads the files the flags name (`platform` is `None` for kube-inject).
    pub fn load(
        proxy_configs: &ProxyConfigArgs,
        platform: Option<&PlatformArgs>,
    ) -> Result<ClusterState, ObjectsError> {
        let mut state = ClusterState::default();
        if let Some(p) = &proxy_configs.proxy_configs {
            state.proxy_configs = Some(ProxyConfigResources::load(p)?);
        }
        if let Some(pa) = platform {
            state.openshift = pa.is_openshift();
            if let Some(p) = &pa.namespaces {
                state.namespaces = Namespaces::load(p)?;
                if !state.openshift {
                    state.warnings.push(format!(
                        "--namespaces {} is only used with --platform openshift (platform is {:?})",
                        p.display(),
                        pa.platform
                    ));
                }
            }
        }
        Ok(state)
    }

    /// The files whose change triggers a reload.
    pub fn watched_paths(
        proxy_configs: &ProxyConfigArgs,
        platform: Option<&PlatformArgs>,
    ) -> Vec<PathBuf> {
        proxy_configs
            .proxy_configs
            .iter()
            .chain(platform.and_then(|p| p.namespaces.as_ref()))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_without_openshift_are_loaded_and_warned_about() {
        let dir = std::env::temp_dir().join(format!("cluster-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ns = dir.join("ns.yaml");
        std::fs::write(
            &ns,
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n",
        )
        .unwrap();
        let none = ProxyConfigArgs::default();
        for (platform, openshift, warned) in [
            ("openshift", true, false),
            ("gcp", false, true),
            ("OpenShift", false, true),
        ] {
            let pa = PlatformArgs {
                platform: platform.into(),
                namespaces: Some(ns.clone()),
            };
            let s = ClusterState::load(&none, Some(&pa)).unwrap();
            assert_eq!(s.openshift, openshift, "{platform}");
            assert_ne!(s.namespaces, Namespaces::default());
            assert_eq!(!s.warnings.is_empty(), warned, "{platform}");
            assert_eq!(
                ClusterState::watched_paths(&none, Some(&pa)),
                vec![ns.clone()]
            );
        }
        std::fs::write(&ns, "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n").unwrap();
        let pa = PlatformArgs {
            platform: "openshift".into(),
            namespaces: Some(ns.clone()),
        };
        let e = ClusterState::load(&none, Some(&pa))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ns.yaml: Pod a: field kind"), "{e}");
        assert_eq!(
            ClusterState::load(&none, None).unwrap(),
            ClusterState::default()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
