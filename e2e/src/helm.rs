//! Helm for the chart's tests: the `helm` built from tools/helm by `scripts/cluster.sh build` (cached
//! outside the clone; a test never builds it and never passes without it), run on
//! `charts/sidecar-injector` and `charts/istio-cni`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{anyhow, Context};
use serde_json::Value;

/// The repository's root.
pub fn repo_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The chart.
pub fn chart_dir() -> PathBuf {
    repo_dir().join("charts/sidecar-injector")
}

/// The istio-cni node agent's chart.
pub fn cni_chart_dir() -> PathBuf {
    repo_dir().join("charts/istio-cni")
}

/// The built `helm`: the second folder `scripts/cluster.sh build` prints, asked with `CLUSTER_NO_BUILD` so
/// that it fails instead of building. Panics when it is not built.
pub fn binary() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_dir().join("scripts/cluster.sh"))
        .arg("build")
        .env("CLUSTER_NO_BUILD", "1")
        .stdin(Stdio::null())
        .output()
        .expect("running scripts/cluster.sh build");
    assert!(
        out.status.success(),
        "this test needs helm: {}(build it once with `bash scripts/cluster.sh build`; scripts/test.sh does; \
         it never skips)",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let folder = text
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("scripts/cluster.sh build printed no helm folder: {text}"));
    let helm = Path::new(folder).join("helm");
    assert!(helm.exists(), "{} missing", helm.display());
    helm
}

/// A `helm` command, with `--kubeconfig` when `kubeconfig` is given.
pub struct Helm {
    pub path: PathBuf,
    pub kubeconfig: Option<PathBuf>,
}

impl Helm {
    /// The built helm, for commands that talk to no cluster (`lint`, `template`).
    pub fn offline() -> Helm {
        Helm {
            path: binary(),
            kubeconfig: None,
        }
    }

    /// `helm <args>`; the raw output. Helm's own state (repositories, cache) goes to a folder of the
    /// test's, so nothing of the user's is read or written.
    pub fn output(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut cmd = Command::new(&self.path);
        if let Some(k) = &self.kubeconfig {
            cmd.arg("--kubeconfig").arg(k);
        }
        let home = std::env::temp_dir().join(format!("e2e-helm-home-{}", std::process::id()));
        cmd.args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .stdin(Stdio::null());
        cmd.output().context("running helm")
    }

    /// `helm <args>` that must succeed; its stdout.
    pub fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        crate::cluster::stdout_of_success("helm", args, self.output(args)?)
    }

    /// `helm template sidecar-injector <chart> --namespace <ns> <args>`, the documents parsed.
    pub fn template(&self, namespace: &str, args: &[&str]) -> anyhow::Result<Vec<Value>> {
        self.template_chart(&chart_dir(), "sidecar-injector", namespace, args)
    }

    /// `helm template <release> <chart> --namespace <ns> <args>`, the documents parsed.
    pub fn template_chart(
        &self,
        chart: &Path,
        release: &str,
        namespace: &str,
        args: &[&str],
    ) -> anyhow::Result<Vec<Value>> {
        let chart = chart.display().to_string();
        let mut all = vec!["template", release, &chart, "--namespace", namespace];
        all.extend(args);
        let text = self.run(&all)?;
        test_support::pods::documents(&text).map_err(|e| anyhow!("helm template's YAML: {e}"))
    }
}

/// The documents of `docs` of kind `kind`.
pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}
