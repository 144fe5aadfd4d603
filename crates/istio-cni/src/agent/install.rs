//! Putting the plugin on the node and taking it off again: Istio's `cni/pkg/install/install.go`
//! (`installAll`, `checkValidCNIConfig`, `Cleanup`) and `binaries.go` `copyBinaries`, for our one binary.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::atomic_file::{self, Stop};
use super::bounded_read::{self, Links};
use super::cli::Settings;
use super::cni_config::{self, ConfigError};
use super::kubeconfig::{self, KubeconfigError};
use super::metrics::{install_result, Metrics};
use super::watch::Target;

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

/// The installation of one node. Clones share it: an install pass runs on a blocking thread while the
/// agent's loop keeps its clone, so SIGTERM can stop the pass ([`Installer::cleanup`]) without waiting
/// for its I/O.
#[derive(Clone)]
pub struct Installer {
    settings: Settings,
    shared: Arc<Shared>,
}

struct Shared {
    /// The configuration file holding our entry, once written.
    conf_path: Mutex<Option<PathBuf>>,
    /// Set by the cleanup: the pass in progress gives up, and nothing is renamed into place after.
    stop: Stop,
    /// Whether a pass is in progress, for the cleanup to wait (a bounded time) for it to give up.
    busy: Mutex<bool>,
    idle: Condvar,
}

/// How long the cleanup waits for the pass in progress to give up: it does at its next chunk (a few
/// milliseconds) unless the filesystem itself hangs, and then the cleanup goes on without it.
const PASS_STOP_WAIT: Duration = Duration::from_secs(5);

/// Marks a pass in progress while it lives.
struct Busy<'a>(&'a Shared);

impl<'a> Busy<'a> {
    fn enter(shared: &'a Shared) -> Busy<'a> {
        *shared.busy.lock().unwrap_or_else(|e| e.into_inner()) = true;
        Busy(shared)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        *self.0.busy.lock().unwrap_or_else(|e| e.into_inner()) = false;
        self.0.idle.notify_all();
    }
}

impl Installer {
    /// Nothing installed yet.
    pub fn new(settings: Settings) -> Installer {
        Installer {
            settings,
            shared: Arc::new(Shared {
                conf_path: Mutex::new(None),
                stop: Stop::default(),
                busy: Mutex::new(false),
                idle: Condvar::new(),
            }),
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
    pub fn conf_path(&self) -> Option<PathBuf> {
        self.shared
            .conf_path
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_conf_path(&self, path: PathBuf) {
        *self
            .shared
            .conf_path
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(path);
    }

    /// Whether the cleanup has begun (an install pass then ends early).
    pub fn stopped(&self) -> bool {
        self.shared.stop.is_stopped()
    }

    fn chained(&self) -> bool {
        self.settings.args.chained_cni_plugin
    }

    /// Istio's `installAll`: the binary and the kubeconfig are written every pass, the configuration only
    /// when it lacks our entry or is no longer the one the runtime reads. Each failure is counted.
    pub fn install_all(&self, metrics: &Metrics) -> Result<(), InstallError> {
        let _busy = Busy::enter(&self.shared);
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
        // `--plugin-binary` defaults to the /proc/self/exe link; anything but a regular file behind it
        // (a FIFO would block the copy for good) is refused.
        let source = bounded_read::open_regular(from, Links::Follow).map_err(err)?;
        atomic_file::copy(&to, &source, 0o755, &self.shared.stop).map_err(err)
    }

    fn write_kubeconfig(&self) -> Result<(), InstallError> {
        let text = self.settings.kubeconfig.render()?;
        let path = self.kubeconfig_path();
        std::fs::create_dir_all(&self.settings.args.run_dir)
            .map_err(write_error(&self.settings.args.run_dir))?;
        atomic_file::write(&path, text.as_bytes(), 0o600, Some(&self.shared.stop))
            .map_err(write_error(&path))
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
        // A regular file as the folder lists it (as `valid_files`): not a link, a FIFO or a device.
        [path, other]
            .into_iter()
            .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
            .ok_or_else(|| InstallError::NoConfig(dir.clone()))
    }

    /// Istio's `checkValidCNIConfig`: `Err` says why the configuration must be (re)written.
    pub fn check(&self) -> Result<(), String> {
        let Some(ours) = &self.conf_path() else {
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
        let bytes = bounded_read::read(ours, Links::NoFollow)
            .map_err(|e| format!("{}: {e}", ours.display()))?;
        match cni_config::holds_ours(ours, &bytes, self.chained()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(format!(
                "{} does not hold exactly one istio-cni entry",
                ours.display()
            )),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Istio's `writeCNIConfig`: chained, our entry goes into the file (which keeps its mode; a `.conf`
    /// is then renamed `.conflist`); otherwise our own file, mode 0600.
    fn write_config(&self) -> Result<(), InstallError> {
        let path = self.target()?;
        let stop = &self.shared.stop;
        let (bytes, mode) = if self.chained() {
            let existing =
                bounded_read::read(&path, Links::NoFollow).map_err(write_error(&path))?;
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
        atomic_file::write(&path, &bytes, mode, Some(stop)).map_err(write_error(&path))?;
        let mut written = path.clone();
        if self.chained() && path.extension().is_some_and(|e| e == "conf") {
            written = path.with_extension("conflist");
            atomic_file::rename(&path, &written, stop).map_err(write_error(&path))?;
        }
        tracing::info!("wrote the CNI configuration {}", written.display());
        self.set_conf_path(written);
        Ok(())
    }

    /// Whether the binary and the kubeconfig are still there as regular files: a removal between the end
    /// of a pass and the start of its watch is caught by this, not by the watch.
    pub fn files_in_place(&self) -> Result<(), String> {
        for path in [self.binary_path(), self.kubeconfig_path()] {
            if !std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
                return Err(format!("{} is gone", path.display()));
            }
        }
        Ok(())
    }

    /// The folders a change in which needs a new pass (Istio's `sleepWatchInstall` targets): our
    /// binary in the bin dir, the kubeconfig in the run dir (not the plugin's log beside it), every
    /// file of the configuration folder, and the folders of the kubeconfig's inputs.
    pub fn watched(&self) -> Vec<Target> {
        let args = &self.settings.args;
        let mut targets = vec![
            Target {
                dir: args.cni_bin_dir.clone(),
                names: vec![BINARY_NAME.into()],
            },
            Target {
                dir: args.run_dir.clone(),
                names: vec![crate::plugin::conf::KUBECONFIG_NAME.into()],
            },
            Target {
                dir: args.cni_conf_dir.clone(),
                names: vec![],
            },
        ];
        for input in self.settings.kubeconfig.inputs() {
            if let Some(dir) = input.parent().filter(|d| !d.as_os_str().is_empty()) {
                let t = Target {
                    dir: dir.to_path_buf(),
                    names: vec![],
                };
                if !targets.contains(&t) {
                    targets.push(t);
                }
            }
        }
        targets
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
    ///
    /// Unlike Istio's, it first stops the install pass that may be running (it gives up at its next
    /// chunk and renames nothing after this), and it takes every `istio-cni` entry out of every
    /// configuration in the folder, not only the first of our file: an entry left anywhere points the
    /// runtime at the binary and kubeconfig removed here, and fails every sandbox once its file is the
    /// one the runtime reads.
    pub fn cleanup(&self) -> Result<(), InstallError> {
        self.shared.stop.stop();
        self.wait_for_the_pass();
        let mut first: Option<InstallError> = None;
        let mut note = |r: Result<(), InstallError>| {
            if let Err(e) = r {
                tracing::error!("cleanup: {e}");
                first.get_or_insert(e);
            }
        };
        let own = self.conf_path();
        if let Some(path) = own.as_deref().filter(|p| p.symlink_metadata().is_ok()) {
            if self.chained() {
                note(self.remove_entries(path));
            } else {
                tracing::info!("removing the CNI configuration {}", path.display());
                note(std::fs::remove_file(path).map_err(write_error(path)));
            }
        }
        match cni_config::valid_files(&self.settings.args.cni_conf_dir) {
            Ok(files) => {
                for path in files.iter().filter(|p| Some(p.as_path()) != own.as_deref()) {
                    note(self.remove_entries(path));
                }
            }
            // No folder, no entry to take out.
            Err(ConfigError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => note(Err(e.into())),
        }
        for path in [self.kubeconfig_path(), self.binary_path()] {
            note(atomic_file::remove_stale(&path).map_err(write_error(&path)));
            if path.symlink_metadata().is_ok() {
                tracing::info!("removing {}", path.display());
                note(std::fs::remove_file(&path).map_err(write_error(&path)));
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Waits (at most [`PASS_STOP_WAIT`]) for the pass in progress, stopped, to give up: its temporary
    /// file is then gone too.
    fn wait_for_the_pass(&self) {
        let start = Instant::now();
        let busy = self.shared.busy.lock().unwrap_or_else(|e| e.into_inner());
        if !*busy {
            return;
        }
        let (busy, _) = self
            .shared
            .idle
            .wait_timeout_while(busy, PASS_STOP_WAIT, |busy| *busy)
            .unwrap_or_else(|e| e.into_inner());
        if *busy {
            tracing::warn!(
                "the install pass in progress did not stop within {PASS_STOP_WAIT:?} (a hung filesystem?): cleaning up without it"
            );
        } else {
            tracing::info!(
                "stopped the install pass in progress in {:?}",
                start.elapsed()
            );
        }
    }

    /// Every `istio-cni` entry out of the list at `path`, which is written again only if it held one.
    /// A path that is no regular file any more (a FIFO swapped in) holds nothing of ours: left alone.
    fn remove_entries(&self, path: &Path) -> Result<(), InstallError> {
        let existing = match bounded_read::read(path, Links::NoFollow) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                tracing::warn!("not cleaning {}: {e}", path.display());
                return Ok(());
            }
            Err(e) => return Err(write_error(path)(e)),
        };
        if cni_config::entries_of_ours(path, &existing)? == 0 {
            return Ok(());
        }
        tracing::info!("removing the istio-cni entry from {}", path.display());
        let bytes = cni_config::remove(path, &existing)?;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o600);
        atomic_file::write(path, &bytes, mode, None).map_err(write_error(path))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const LIST: &str =
        r#"{"cniVersion":"1.0.0","name":"k8s","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#;

    /// A node's folders in a fresh temporary folder, and an installer over them with `extra` flags.
    struct Node {
        root: PathBuf,
        installer: Installer,
    }

    impl Node {
        fn new(tag: &str, extra: &[&str]) -> Node {
            let root = std::env::temp_dir().join(format!("install-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            for d in ["bin", "net.d", "run", "sa"] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            std::fs::write(root.join("sa/token"), "t").unwrap();
            std::fs::write(root.join("sa/ca.crt"), "ca").unwrap();
            std::fs::write(root.join("plugin"), "binary").unwrap();
            let p = |d: &str| root.join(d).display().to_string();
            let mut argv = vec![
                format!("--cni-bin-dir={}", p("bin")),
                format!("--mounted-cni-net-dir={}", p("net.d")),
                format!("--cni-agent-run-dir={}", p("run")),
                format!("--service-account-dir={}", p("sa")),
                format!("--plugin-binary={}", p("plugin")),
                "--kube-server=https://127.0.0.1:6443".to_string(),
                "--node-name=n".to_string(),
            ];
            argv.extend(extra.iter().map(|a| a.to_string()));
            let settings = super::super::cli::parse(&argv, &|_| None).unwrap();
            Node {
                root,
                installer: Installer::new(settings),
            }
        }

        fn conf(&self, name: &str) -> PathBuf {
            self.root.join("net.d").join(name)
        }

        fn types(&self, name: &str) -> Vec<String> {
            let v: Value =
                serde_json::from_slice(&std::fs::read(self.conf(name)).unwrap()).unwrap();
            v["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["type"].as_str().unwrap().to_string())
                .collect()
        }

        /// Runs `f` on a thread: a blocking file operation fails the test instead of hanging it.
        fn bounded<T: Send + 'static>(&self, f: impl FnOnce(Installer) -> T + Send + 'static) -> T {
            let installer = self.installer.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(f(installer));
            });
            rx.recv_timeout(Duration::from_secs(60))
                .expect("blocked on a file")
        }
    }

    impl Drop for Node {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    /// Before the fix, a list holding `istio-cni` twice kept the second after install, and a
    /// stale entry survived cleanup; so did one in a file the runtime would read next.
    #[test]
    fn install_leaves_one_entry_of_ours_and_cleanup_none_in_any_file() {
        let node = Node::new("dups", &[]);
        let stale = json!({"type": "istio-cni", "cni_agent_run_dir": "/old"});
        let mut v: Value = serde_json::from_str(LIST).unwrap();
        v["plugins"]
            .as_array_mut()
            .unwrap()
            .insert(1, stale.clone());
        v["plugins"].as_array_mut().unwrap().push(stale.clone());
        std::fs::write(node.conf("10-k8s.conflist"), v.to_string()).unwrap();
        std::fs::write(
            node.conf("20-next.conflist"),
            json!({"name": "next", "plugins": [{"type": "ptp"}, stale]}).to_string(),
        )
        .unwrap();

        node.installer.install_all(&Metrics::default()).unwrap();
        node.installer.check().unwrap();
        assert_eq!(
            node.types("10-k8s.conflist"),
            ["bridge", "portmap", "istio-cni"]
        );
        assert_eq!(node.types("20-next.conflist"), ["ptp", "istio-cni"]);
        // A stale entry added back behind the agent's back fails the check (the loop rewrites).
        let mut again: Value =
            serde_json::from_slice(&std::fs::read(node.conf("10-k8s.conflist")).unwrap()).unwrap();
        again["plugins"]
            .as_array_mut()
            .unwrap()
            .insert(0, json!({"type": "istio-cni"}));
        std::fs::write(node.conf("10-k8s.conflist"), again.to_string()).unwrap();
        let why = node.installer.check().unwrap_err();
        assert!(why.contains("exactly one istio-cni entry"), "{why}");

        node.installer.cleanup().unwrap();
        assert_eq!(node.types("10-k8s.conflist"), ["bridge", "portmap"]);
        assert_eq!(node.types("20-next.conflist"), ["ptp"]);
        assert!(!node.installer.binary_path().exists());
        assert!(!node.installer.kubeconfig_path().exists());
    }

    /// A node without a configuration folder has no entry to take out: the cleanup succeeds.
    #[test]
    fn cleanup_without_a_configuration_folder_succeeds() {
        let node = Node::new("nodir", &[]);
        std::fs::remove_dir(node.root.join("net.d")).unwrap();
        node.installer.cleanup().unwrap();
    }

    /// Before the fix, with `CNI_CONF_NAME`, a conflist replaced by a FIFO blocked the agent in
    /// open(2) for good. Check, install and cleanup all refuse it at once.
    #[test]
    fn a_fifo_in_place_of_the_named_conflist_never_blocks() {
        let node = Node::new("fifo", &["--cni-conf-name=10-k8s.conflist"]);
        let conflist = node.conf("10-k8s.conflist");
        std::fs::write(&conflist, LIST).unwrap();
        node.installer.install_all(&Metrics::default()).unwrap();
        std::fs::remove_file(&conflist).unwrap();
        nix::unistd::mkfifo(&conflist, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();

        let why = node.bounded(|i| i.check()).unwrap_err();
        assert!(why.contains("a FIFO, not a regular file"), "{why}");
        let e = node
            .bounded(|i| i.install_all(&Metrics::default()))
            .unwrap_err();
        assert!(matches!(e, InstallError::NoConfig(_)), "{e}");
        node.bounded(|i| i.cleanup()).unwrap();
        assert!(!node.installer.binary_path().exists());
        use std::os::unix::fs::FileTypeExt as _;
        assert!(std::fs::symlink_metadata(&conflist)
            .unwrap()
            .file_type()
            .is_fifo());
    }

    /// Before the fix, a 3 GB copy held SIGTERM for 12 s. The cleanup stops the pass at its next
    /// chunk, waits for it, and nothing of the copy stays.
    #[test]
    fn cleanup_stops_a_pass_in_the_middle_of_its_copy() {
        let node = Node::new("copy", &[]);
        std::fs::write(node.conf("10-k8s.conflist"), LIST).unwrap();
        // Sparse: no disk is used until copied, and each chunk still has to be.
        std::fs::File::create(node.root.join("plugin"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let installer = node.installer.clone();
        let pass = std::thread::spawn(move || installer.install_all(&Metrics::default()));
        // Tied to the work: stop once the copy has visibly started.
        let bin = node.root.join("bin");
        let copying = || {
            std::fs::read_dir(&bin).unwrap().flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("istio-cni.tmp.")
                    && e.metadata().is_ok_and(|m| m.len() > 0)
            })
        };
        while !copying() {
            assert!(!pass.is_finished(), "the copy ended before the cleanup");
            std::thread::sleep(Duration::from_millis(5));
        }
        let start = Instant::now();
        node.bounded(|i| i.cleanup()).unwrap();
        eprintln!("cleaned up {:?} into the copy", start.elapsed());
        // The pass removes its temporary file before it ends, and the cleanup waited for that end.
        let left: Vec<_> = std::fs::read_dir(&bin)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            left.is_empty(),
            "the cleanup did not wait for the pass: {left:?}"
        );
        let e = pass.join().unwrap().unwrap_err();
        assert!(
            matches!(&e, InstallError::Binary { source, .. } if source.kind() == std::io::ErrorKind::Interrupted),
            "{e}"
        );
        let left: Vec<_> = std::fs::read_dir(&bin)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(node.installer.stopped());
    }
}
