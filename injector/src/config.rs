//! Configuration in Istio's formats: the `values`, `config` and `mesh` documents of Istio's ConfigMaps,
//! process environment, and the command-line flags shared by `serve` and `kube-inject`.
//! (Contract only; the engine engineer fills it in.)

use std::path::PathBuf;

/// Flags shared by `injector serve` and `injector kube-inject` (flattened into both).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConfigArgs {
    /// The `values` document (JSON or YAML).
    #[arg(long = "values", alias = "valuesFile")]
    pub values: Option<PathBuf>,
    /// The injector `config` document.
    #[arg(long = "injector-config", alias = "injectConfigFile")]
    pub injector_config: Option<PathBuf>,
    /// The MeshConfig document.
    #[arg(long = "mesh-config", alias = "meshConfigFile")]
    pub mesh_config: Option<PathBuf>,
}

/// An invalid configuration document; names the file, key and value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Placeholder until loading exists.
    #[error("configuration loading is not implemented yet")]
    NotImplemented,
}

/// Everything the engine needs, loaded and validated once (not per request).
#[derive(Debug, Clone, Default)]
pub struct Settings {}

impl Settings {
    /// Loads and validates the configuration named by `args` (and the process environment).
    pub fn load(_args: &ConfigArgs) -> Result<Settings, ConfigError> {
        Err(ConfigError::NotImplemented)
    }
}
