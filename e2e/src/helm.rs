//! Helm for the chart's tests: the `helm` built from tools/helm by `scripts/cluster.sh build` (cached
//! outside the clone; a test never builds it and never passes without it), run on
//! `charts/sidecar-injector` and `charts/istio-cni`; and the harness both charts' suites share (a chart's
//! lint, refusals, hostile values, install and uninstall, its rendering in `deploy/`, and what its
//! ServiceAccount may do).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{anyhow, Context};
use k8s_openapi::serde::{de::DeserializeOwned, Serialize};
use serde_json::Value;
use test_support::{semantic, TempDir};

use crate::cluster::Cluster;

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

/// A chart under test: its folder, the release it is installed as, and the release's namespace.
pub struct Chart {
    pub dir: PathBuf,
    pub release: &'static str,
    pub namespace: &'static str,
}

impl Chart {
    /// `charts/sidecar-injector`, released as `sidecar-injector` in its own namespace (as `deploy/` and
    /// `injector certs` default to).
    pub fn injector() -> Chart {
        Chart {
            dir: chart_dir(),
            release: "sidecar-injector",
            namespace: "sidecar-injector",
        }
    }

    /// `charts/istio-cni`, released as `istio-cni` in Istio's namespace, where deploy/istio-cni installs.
    pub fn cni() -> Chart {
        Chart {
            dir: cni_chart_dir(),
            release: "istio-cni",
            namespace: "istio-system",
        }
    }

    fn dir_arg(&self) -> String {
        self.dir.display().to_string()
    }

    /// `helm template` with `set`, the documents parsed.
    pub fn template(&self, helm: &Helm, set: &[&str]) -> Vec<Value> {
        helm.template_chart(&self.dir, self.release, self.namespace, set)
            .unwrap_or_else(|e| panic!("helm template {set:?}: {e:#}"))
    }

    /// `helm lint --strict` with `set` passes, and `helm template` with it renders documents that are all
    /// [`typed`]; the documents.
    pub fn lint_and_template(&self, helm: &Helm, set: &[&str]) -> Vec<Value> {
        let dir = self.dir_arg();
        let mut args = vec!["lint", "--strict", &dir];
        args.extend(set);
        if let Err(e) = helm.run(&args) {
            panic!("helm lint {set:?}: {e:#}");
        }
        let docs = self.template(helm, set);
        docs.iter().for_each(typed);
        docs
    }

    /// `helm template` with each `set` fails, its error naming the reason given with it.
    pub fn assert_refused(&self, helm: &Helm, refused: &[(&[&str], &str)]) {
        let dir = self.dir_arg();
        for (set, reason) in refused {
            let mut args = vec![
                "template",
                self.release,
                &dir,
                "--namespace",
                self.namespace,
            ];
            args.extend(*set);
            let out = helm
                .output(&args)
                .unwrap_or_else(|e| panic!("helm template {set:?}: {e:#}"));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && stderr.contains(reason),
                "helm template {set:?} should fail naming {reason:?}: {stderr}"
            );
        }
    }

    /// The hostile values of [`crate::hostile_values::check_chart`] (with `variants` of values) add no
    /// key, and each value of `refused` (its hostile-case name, and the JSON pointer the schema's refusal
    /// must name) is refused by the schema.
    pub fn assert_hostile_values_held(
        &self,
        helm: &Helm,
        variants: &[Value],
        refused: &[(&str, &str)],
    ) {
        let scratch = TempDir::new(&format!("{}-hostile", self.release));
        let report = crate::hostile_values::check_chart(
            helm,
            &self.dir,
            self.release,
            self.namespace,
            variants,
            scratch.path(),
        );
        report.assert_held(&format!("charts/{}", self.release));
        for (what, pointer) in refused {
            for held in report.held(what, true) {
                assert!(
                    matches!(held, crate::hostile_values::Held::Refused(m) if m.contains(pointer)),
                    "{what}: {held:?}"
                );
            }
        }
    }

    /// `helm install` into `cluster` (its namespace created) with `args` after the chart: the release
    /// deployed; helm's notes.
    pub fn install(&self, cluster: &Cluster, args: &[&str]) -> String {
        let dir = self.dir_arg();
        let mut all = vec!["install", self.release, &dir, "--namespace", self.namespace];
        all.push("--create-namespace");
        all.extend(args);
        let notes = cluster
            .helm()
            .run(&all)
            .unwrap_or_else(|e| panic!("helm install {args:?}: {e:#}"));
        assert!(notes.contains("STATUS: deployed"), "{notes}");
        notes
    }

    /// `helm upgrade --reuse-values` of the installed release with `args`.
    pub fn upgrade(&self, cluster: &Cluster, args: &[&str]) {
        let dir = self.dir_arg();
        let mut all = vec!["upgrade", self.release, &dir, "-n", self.namespace];
        all.push("--reuse-values");
        all.extend(args);
        if let Err(e) = cluster.helm().run(&all) {
            panic!("helm upgrade {args:?}: {e:#}");
        }
    }

    /// `helm uninstall`, after which no object of `kinds` (kubectl's comma-separated list) labelled with
    /// the chart's name is left.
    pub fn assert_uninstall_leaves_nothing(&self, cluster: &Cluster, kinds: &str) {
        if let Err(e) = cluster
            .helm()
            .run(&["uninstall", self.release, "-n", self.namespace])
        {
            panic!("helm uninstall: {e:#}");
        }
        let label = format!("app.kubernetes.io/name={}", self.release);
        let left = cluster
            .kubectl(&["get", kinds, "-l", &label, "-o", "name"], None)
            .unwrap_or_else(|e| panic!("kubectl get {kinds}: {e:#}"));
        assert_eq!(left.trim(), "", "left after uninstall");
    }
}

/// The volume of pod spec `pod` named `name` (a mount's, or one the test names).
pub fn volume<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == name))
        .unwrap_or_else(|| panic!("no volume {name:?} in {pod}"))
}

/// `kubectl auth can-i <args> --as <account>`: the apiserver's own RBAC evaluation of the installed
/// roles.
pub fn can_i(cluster: &Cluster, account: &str, args: &[&str]) -> bool {
    let as_account = format!("--as={account}");
    let mut all = vec!["auth", "can-i"];
    all.extend(args);
    all.push(&as_account);
    let out = cluster
        .kubectl_output(&all, None)
        .unwrap_or_else(|e| panic!("kubectl auth can-i {args:?}: {e:#}"));
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl auth can-i {args:?}: {other} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// `account` may do each of `granted` and none of `denied` ([`can_i`]'s arguments).
pub fn assert_may(cluster: &Cluster, account: &str, granted: &[&[&str]], denied: &[&[&str]]) {
    for args in granted {
        assert!(
            can_i(cluster, account, args),
            "the chart's account may not {args:?}"
        );
    }
    for args in denied {
        assert!(
            !can_i(cluster, account, args),
            "the chart's account may {args:?}"
        );
    }
}

/// Parses `doc` as `T` and writes it back: panics on a value the type refuses or a field it does not
/// know (dropped on the way back, so a misspelled key cannot pass); the typed value.
pub fn typed_as<T: DeserializeOwned + Serialize>(doc: &Value) -> T {
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| {
        panic!(
            "{} {} does not parse as {}: {e}",
            doc["kind"],
            doc["metadata"]["name"],
            std::any::type_name::<T>()
        )
    });
    let back = serde_json::to_value(&t).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        semantic::equal(&back, doc),
        "{} {}: fields the type does not know: {}",
        doc["kind"],
        doc["metadata"]["name"],
        semantic::diff(&back, doc, 10)
    );
    t
}

/// [`typed_as`] the k8s-openapi type of `doc`'s kind: panics on an unknown kind too.
pub fn typed(doc: &Value) {
    use k8s_openapi::api::{admissionregistration, apps, autoscaling, core, policy, rbac};
    fn check<T: DeserializeOwned + Serialize>(doc: &Value) {
        typed_as::<T>(doc);
    }
    match doc["kind"].as_str().unwrap_or_default() {
        "ConfigMap" => check::<core::v1::ConfigMap>(doc),
        "Secret" => check::<core::v1::Secret>(doc),
        "Service" => check::<core::v1::Service>(doc),
        "ServiceAccount" => check::<core::v1::ServiceAccount>(doc),
        "Deployment" => check::<apps::v1::Deployment>(doc),
        "DaemonSet" => check::<apps::v1::DaemonSet>(doc),
        "PodDisruptionBudget" => check::<policy::v1::PodDisruptionBudget>(doc),
        "HorizontalPodAutoscaler" => check::<autoscaling::v2::HorizontalPodAutoscaler>(doc),
        "ClusterRole" => check::<rbac::v1::ClusterRole>(doc),
        "ClusterRoleBinding" => check::<rbac::v1::ClusterRoleBinding>(doc),
        "Role" => check::<rbac::v1::Role>(doc),
        "RoleBinding" => check::<rbac::v1::RoleBinding>(doc),
        "MutatingWebhookConfiguration" => {
            check::<admissionregistration::v1::MutatingWebhookConfiguration>(doc)
        }
        other => panic!("unexpected kind {other:?}"),
    }
}

/// `scripts/render-deploy.sh` into a temporary folder: one subfolder per chart.
pub fn render_deploy() -> TempDir {
    let dir = TempDir::new("render-deploy");
    test_support::process::run_ok(
        Command::new("bash")
            .arg(repo_dir().join("scripts/render-deploy.sh"))
            .arg(dir.path())
            .env("CLUSTER_NO_BUILD", "1"),
        "scripts/render-deploy.sh",
    );
    dir
}

/// Every file rendered into `out` is byte for byte the repository's file under `deployed` (a path from
/// the repository's root), and `deployed` has no generated file that was not rendered; returns the
/// rendered files' names.
pub fn assert_deployed_is_rendered(out: &Path, deployed: &str) -> Vec<String> {
    let repo = repo_dir().join(deployed);
    let rendered = files(out);
    for name in &rendered {
        let want = read(&out.join(name));
        let got = std::fs::read_to_string(repo.join(name)).unwrap_or_default();
        assert!(
            got == want,
            "{deployed}/{name} is not the chart's rendering: run `bash scripts/render-deploy.sh`"
        );
    }
    for name in files(&repo) {
        if read(&repo.join(&name)).starts_with("# Generated by scripts/render-deploy.sh") {
            assert!(
                rendered.contains(&name),
                "{deployed}/{name} is generated but the chart no longer renders it"
            );
        }
    }
    rendered
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the files in `dir`, sorted.
fn files(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut names: Vec<String> = entries
        .map(|e| match e {
            Ok(e) => e.file_name().to_string_lossy().into_owned(),
            Err(e) => panic!("{}: {e}", dir.display()),
        })
        .collect();
    names.sort();
    names
}
