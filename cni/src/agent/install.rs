//! Putting the plugin on the node and taking it off again: Istio's `cni/pkg/install/install.go`
//! (`installAll`, `checkValidCNIConfig`, `Cleanup`) and `binaries.go` `copyBinaries`, for our one binary.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::atomic_file;
use super::cli::Settings;
use super::cni_config::{self, ConfigError};
use super::kubeconfig::{self, KubeconfigError};
use super::metrics::{install_result, Metrics};

/// The installed binary's name: the `type` of our entry.
pub const BINARY_NAME: &str = cni_config::PLUGIN_TYPE;

/// Why an install pass failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// The plugin binary cannot be read or copied.
    #[error("copying {from} to {to}: {source}")]
    Binary {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The kubeconfig's inputs cannot be read.
    #[error("the plugin's kubeconfig: {0}")]
    Kubeconfig(#[from] KubeconfigError),
    /// A file cannot be written or removed.
    #[error("{path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The configuration to chain into is broken.
    #[error("the CNI configuration: {0}")]
    Config(#[from] ConfigError),
    /// Chained, and no configuration to chain into yet (the primary CNI has not written one).
    #[error("no CNI network configuration in {0} yet")]
    NoConfig(PathBuf),
}

fn write_error(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// A file's identity and version as `stat` sees it; a rewrite, a rename over it or a removal changes it.
type Stamp = Option<(u64, u64, i64, i64)>;

fn stamp(path: &Path) -> Stamp {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
}

/// The state of everything the agent installed or reads, compared between polls.
#[derive(Debug, PartialEq, Eq)]
pub struct Snapshot(Vec<(PathBuf, Stamp)>);

/// The installation of one node.
pub struct Installer {
    settings: Settings,
    /// The configuration file holding our entry, once written.
    conf_path: Option<PathBuf>,
}

impl Installer {
    /// Nothing installed yet.
    pub fn new(settings: Settings) -> Installer {
        Installer {
            settings,
            conf_path: None,
        }
    }

    /// `<bin dir>/istio-cni`.
    pub fn binary_path(&self) -> PathBuf {
        self.settings.args.cni_bin_dir.join(BINARY_NAME)
    }

    /// `<run dir>/istio-cni-kubeconfig`.
    pub fn kubeconfig_path(&self) -> PathBuf {
        kubeconfig::path_in(&self.settings.args.run_dir)
    }

    /// The configuration file holding our entry, once written.
    pub fn conf_path(&self) -> Option<&Path> {
        self.conf_path.as_deref()
    }

    fn chained(&self) -> bool {
        self.settings.args.chained_cni_plugin
    }

    /// Istio's `installAll`: the binary and the kubeconfig are written every pass, the configuration only
    /// when it lacks our entry or is no longer the one the runtime reads. Each failure is counted.
    pub fn install_all(&mut self, metrics: &Metrics) -> Result<(), InstallError> {
        self.copy_binary()
            .inspect_err(|_| metrics.install(install_result::COPY_BINARIES_FAILURE))?;
        self.write_kubeconfig()
            .inspect_err(|_| metrics.install(install_result::CREATE_KUBECONFIG_FAILURE))?;
        if let Err(why) = self.check() {
            tracing::info!("(re)writing the CNI configuration: {why}");
            self.write_config().inspect_err(|e| {
                if !matches!(e, InstallError::NoConfig(_)) {
                    metrics.install(install_result::CREATE_CNI_CONFIG_FAILURE);
                }
            })?;
        }
        Ok(())
    }

    fn copy_binary(&self) -> Result<(), InstallError> {
        let from = &self.settings.args.plugin_binary;
        let to = self.binary_path();
        let err = |source| InstallError::Binary {
            from: from.clone(),
            to: to.clone(),
            source,
        };
        atomic_file::remove_stale(&to).map_err(err)?;
        let mut source = std::fs::File::open(from).map_err(err)?;
        atomic_file::write_from(&to, &mut source, 0o755).map_err(err)
    }

    fn write_kubeconfig(&self) -> Result<(), InstallError> {
        let text = self.settings.kubeconfig.render()?;
        let path = self.kubeconfig_path();
        std::fs::create_dir_all(&self.settings.args.run_dir)
            .map_err(write_error(&self.settings.args.run_dir))?;
        atomic_file::write(&path, text.as_bytes(), 0o600).map_err(write_error(&path))
    }

    /// Istio's `getCNIConfigFilepath` without its wait: the file to write, `NoConfig` while there is none.
    fn target(&self) -> Result<PathBuf, InstallError> {
        let dir = &self.settings.args.cni_conf_dir;
        let name = self
            .settings
            .args
            .cni_conf_name
            .as_deref()
            .filter(|n| !n.is_empty());
        if !self.chained() {
            return Ok(dir.join(name.unwrap_or(cni_config::OWN_CONF_NAME)));
        }
        let Some(name) = name else {
            return cni_config::valid_files(dir)?
                .into_iter()
                .next()
                .ok_or_else(|| InstallError::NoConfig(dir.clone()));
        };
        // A .conf we chained into became a .conflist; the name given may be either.
        let path = dir.join(name);
        let other = match name.strip_suffix("list") {
            Some(conf) if name.ends_with(".conflist") => dir.join(conf),
            _ => dir.join(format!("{name}list")),
        };
        [path, other]
            .into_iter()
            .find(|p| p.is_file())
            .ok_or_else(|| InstallError::NoConfig(dir.clone()))
    }

    /// Istio's `checkValidCNIConfig`: `Err` says why the configuration must be (re)written.
    pub fn check(&self) -> Result<(), String> {
        let Some(ours) = &self.conf_path else {
            return Err("not written yet".into());
        };
        let dir = &self.settings.args.cni_conf_dir;
        let first = cni_config::valid_files(dir)
            .map_err(|e| e.to_string())?
            .into_iter()
            .next();
        if self.chained()
            && self.settings.args.cni_conf_name.is_none()
            && first.as_ref() != Some(ours)
        {
            return Err(format!(
                "{} is no longer the first configuration ({})",
                ours.display(),
                first.map_or("none".into(), |p| p.display().to_string())
            ));
        }
        let bytes =
            super::bounded_read::read(ours).map_err(|e| format!("{}: {e}", ours.display()))?;
        match cni_config::holds_ours(ours, &bytes, self.chained()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!("{} lost the istio-cni entry", ours.display())),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Istio's `writeCNIConfig`: chained, our entry goes into the file (which keeps its mode; a `.conf`
    /// is then renamed `.conflist`); otherwise our own file, mode 0600.
    fn write_config(&mut self) -> Result<(), InstallError> {
        let path = self.target()?;
        let (bytes, mode) = if self.chained() {
            let existing = super::bounded_read::read(&path).map_err(write_error(&path))?;
            let mode = std::fs::metadata(&path)
                .map(|m| m.permissions().mode() & 0o7777)
                .unwrap_or(0o600);
            (
                cni_config::insert(&path, &existing, &self.settings.entry)?,
                mode,
            )
        } else {
            (self.settings.entry.standalone(), 0o600)
        };
        atomic_file::write(&path, &bytes, mode).map_err(write_error(&path))?;
        let mut written = path.clone();
        if self.chained() && path.extension().is_some_and(|e| e == "conf") {
            written = path.with_extension("conflist");
            std::fs::rename(&path, &written).map_err(write_error(&path))?;
        }
        tracing::info!("wrote the CNI configuration {}", written.display());
        self.conf_path = Some(written);
        Ok(())
    }

    /// What a change to would need a new pass: the binary, the kubeconfig and its inputs, every file of
    /// the configuration folder.
    pub fn snapshot(&self) -> Snapshot {
        let mut paths = vec![self.binary_path(), self.kubeconfig_path()];
        paths.extend(self.settings.kubeconfig.inputs());
        if let Ok(entries) = std::fs::read_dir(&self.settings.args.cni_conf_dir) {
            let mut names: Vec<PathBuf> =
                entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
            names.sort();
            paths.extend(names);
        }
        Snapshot(
            paths
                .into_iter()
                .map(|p| {
                    let s = stamp(&p);
                    (p, s)
                })
                .collect(),
        )
    }

    /// Istio's `Cleanup`: our entry out of the chained file (or our own file removed), then the
    /// kubeconfig and the binary. Every step is tried; the first failure is returned.
    pub fn cleanup(&self) -> Result<(), InstallError> {
        let mut first: Option<InstallError> = None;
        let mut note = |r: Result<(), InstallError>| {
            if let Err(e) = r {
                tracing::error!("cleanup: {e}");
                first.get_or_insert(e);
            }
        };
        if let Some(path) = self.conf_path.as_deref().filter(|p| p.exists()) {
            note(self.remove_entry(path));
        }
        for path in [self.kubeconfig_path(), self.binary_path()] {
            if path.exists() {
                tracing::info!("removing {}", path.display());
                note(std::fs::remove_file(&path).map_err(write_error(&path)));
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn remove_entry(&self, path: &Path) -> Result<(), InstallError> {
        if !self.chained() {
            tracing::info!("removing the CNI configuration {}", path.display());
            return std::fs::remove_file(path).map_err(write_error(path));
        }
        tracing::info!("removing the istio-cni entry from {}", path.display());
        let existing = super::bounded_read::read(path).map_err(write_error(path))?;
        let bytes = cni_config::remove(path, &existing)?;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o600);
        atomic_file::write(path, &bytes, mode).map_err(write_error(path))
    }
}
