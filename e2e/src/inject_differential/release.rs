//! The Istio texts a differential run compares and the Istio peer that runs them: one release's texts
//! (`testdata/istio/releases/<tag>`, issue 30) or a pinned module's own chart texts.
//!
//! Istio's code at the release tags is not in the Go module proxy, so each release runs on the pinned
//! module whose injector knows every field its texts use: `tools/istio` (the release-1.30 branch) for
//! 1.29.6 and 1.30.3, `tools/istio-next` for 1.31.0-rc.0, whose texts use `.ProxyInitImage` (the
//! first module's `inject.SidecarTemplateData` has no such field).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use serde_json::{json, Map, Value};

use super::generate::Case;
use crate::rules_differential::generate::Rng;

/// The pinned `istio.io/istio` module whose binaries run a release's texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// `tools/istio`: `inject-batch`, `istioctl`.
    Pinned,
    /// `tools/istio-next`: `inject-batch-next`, `istioctl-next`.
    Next,
}

impl Peer {
    /// The name `scripts/istio-peers.sh` prints for this module's build of `program`.
    pub fn program(self, program: &str) -> String {
        match self {
            Peer::Pinned => program.to_string(),
            Peer::Next => format!("{program}-next"),
        }
    }
}

/// The texts of a run: a release tag's or a pinned module's own chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// As `--release` takes it.
    pub name: &'static str,
    /// The module whose binaries run the texts.
    pub peer: Peer,
    /// True for a release tag (texts and values from `testdata/istio/releases/<name>`); false for a
    /// module's own chart texts (`inject-batch chart-templates`) over `testdata/istio/inject/base-values.json`.
    pub tag: bool,
}

/// Every choice of `--release`: the two modules' own charts, then the release tags.
pub const RELEASES: [Release; 5] = [
    Release {
        name: "pinned",
        peer: Peer::Pinned,
        tag: false,
    },
    Release {
        name: "pinned-next",
        peer: Peer::Next,
        tag: false,
    },
    Release {
        name: "1.29.6",
        peer: Peer::Pinned,
        tag: true,
    },
    Release {
        name: "1.30.3",
        peer: Peer::Pinned,
        tag: true,
    },
    Release {
        name: "1.31.0-rc.0",
        peer: Peer::Next,
        tag: true,
    },
];

/// The default: `tools/istio`'s own chart texts, what the differential compared before releases.
pub const PINNED: Release = RELEASES[0];

impl Release {
    /// The release named `name`, or an error naming the value and the choices.
    pub fn parse(name: &str) -> Result<Release> {
        match RELEASES.iter().find(|r| r.name == name) {
            Some(r) => Ok(*r),
            None => bail!(
                "--release {name}: expected one of {}",
                RELEASES.map(|r| r.name).join(", ")
            ),
        }
    }

    /// `testdata/istio/releases/<name>` for a release tag.
    pub fn dir(&self) -> Option<PathBuf> {
        self.tag.then(|| {
            test_support::corpus::testdata_dir()
                .join("releases")
                .join(self.name)
        })
    }

    /// The pod templates of the run, `{name: text}`: a tag's four chart files trimmed as the chart's
    /// `trim` does, or what `batch chart-templates` prints from its module.
    pub fn templates(&self, batch: &Path) -> Result<Map<String, Value>> {
        let Some(dir) = self.dir() else {
            return super::chart_templates(batch);
        };
        test_support::corpus::release_texts(self.name)
            .with_context(|| format!("the texts of {}", dir.display()))
    }

    /// The values document the cases' overrides are merged into: for a tag, the part of its chart's
    /// `values.yaml` defaults that `istiod-injector-configmap.yaml` writes into the ConfigMap's `values`
    /// (`global`, `sidecarInjectorWebhook`, `revision`; `pilot` = `cni`, `env`; `gateways` =
    /// `securityContext`, `seccompProfile`); else `None` (the test environment's `base-values.json`).
    pub fn values(&self) -> Result<Option<Value>> {
        let Some(dir) = self.dir() else {
            return Ok(None);
        };
        let path = dir.join("values.yaml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let all = test_support::corpus::yaml(&text, "values.yaml")?;
        // The chart keeps its defaults under this key (`zzz_profile.yaml` merges it into `.Values`).
        let defaults = &all["_internal_defaults_do_not_set"];
        if !defaults.is_object() {
            bail!("{}: no `_internal_defaults_do_not_set` map", path.display());
        }
        let pick = |from: &Value, keys: &[&str]| -> Value {
            Value::Object(
                keys.iter()
                    .filter_map(|k| from.get(*k).map(|v| ((*k).to_string(), v.clone())))
                    .collect(),
            )
        };
        let mut values = pick(defaults, &["global", "sidecarInjectorWebhook", "revision"]);
        if let Some(m) = values.as_object_mut() {
            m.insert("pilot".into(), pick(defaults, &["cni", "env"]));
            m.insert(
                "gateways".into(),
                pick(
                    &defaults["gateways"],
                    &["securityContext", "seccompProfile"],
                ),
            );
        }
        Ok(Some(values))
    }

    /// Adds to a tag's case the inputs the tags' texts differ on, drawn from a second generator of the
    /// case's seed and index, so the pinned runs' cases stay what they were: an OpenTelemetry provider
    /// with `OTEL_SEMANTIC_CONVENTIONS` (1.30's `otelResourceAttributes` env entry), an `app` label that
    /// ends or starts in `-`, `_` or `.` (1.31 trims the canonical name with `trimAll "-_."` where 1.29
    /// and 1.30 `trimSuffix "-"`), and `global.proxy_init.image` (1.31's `.ProxyInitImage`).
    pub fn vary(&self, case: &mut Case) {
        if !self.tag {
            return;
        }
        let mut rng = Rng::new(
            case.seed ^ 0x0072_656c_6561_7365 ^ case.index.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        if rng.chance(25) {
            test_support::corpus::merge(
                &mut case.mesh,
                &json!({"extensionProviders": [{"name": "otel", "opentelemetry": {
                    "service": "otel.istio-system.svc.cluster.local", "port": 4317,
                    "serviceAttributeEnrichment": "OTEL_SEMANTIC_CONVENTIONS"}}]}),
            );
        }
        if rng.chance(20) {
            let image = rng.pick(&["init", "example.com/x/init:1"]);
            test_support::corpus::merge(
                &mut case.values,
                &json!({"global": {"proxy_init": {"image": image}}}),
            );
        }
        if rng.chance(30) {
            let app = rng.pick(&["web_", "-web.", "a.b-"]);
            let docs: Vec<String> = case
                .input
                .trim_end()
                .split("\n---\n")
                .map(|doc| match serde_json::from_str::<Value>(doc) {
                    Ok(mut v) => {
                        label_pods(&mut v, app);
                        v.to_string()
                    }
                    Err(_) => doc.to_string(),
                })
                .collect();
            case.input = docs.join("\n---\n") + "\n";
        }
    }

    /// What ran which texts, for the summary line.
    pub fn describe(&self, batch: &Path, istioctl: &Path) -> String {
        let texts = match self.dir() {
            Some(dir) => format!("release {} texts ({})", self.name, dir.display()),
            None => format!("{} chart texts", self.name),
        };
        format!(
            "{texts} through {} (istioctl sample: {})",
            batch.display(),
            istioctl.display()
        )
    }
}

/// Sets the `app` label of every pod (template) in `v`: each object whose `spec` has `containers`.
fn label_pods(v: &mut Value, app: &str) {
    match v {
        Value::Object(m) => {
            if m.get("spec").is_some_and(|s| s.get("containers").is_some()) {
                let meta = m.entry("metadata").or_insert_with(|| json!({}));
                if let Some(meta) = meta.as_object_mut() {
                    let labels = meta.entry("labels").or_insert_with(|| json!({}));
                    if let Some(labels) = labels.as_object_mut() {
                        labels.insert("app".into(), json!(app));
                    }
                }
            }
            m.values_mut().for_each(|x| label_pods(x, app));
        }
        Value::Array(a) => a.iter_mut().for_each(|x| label_pods(x, app)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tag_has_its_texts_and_values() {
        for r in RELEASES.iter().filter(|r| r.tag) {
            let t = r.templates(Path::new("unused")).expect("the texts");
            assert_eq!(t.len(), 4, "{}", r.name);
            let v = r.values().expect("the values").expect("a tag's values");
            assert!(v["global"]["proxy"]["image"].is_string(), "{}: {v}", r.name);
            assert!(
                v["pilot"].is_object() && v["gateways"].is_object(),
                "{}",
                r.name
            );
        }
    }

    #[test]
    fn only_a_tags_cases_are_varied() {
        use crate::inject_differential::generate::{case, Kind};
        let (mut otel, mut app, mut init) = (0, 0, 0);
        for index in 0..40 {
            let plain = case(Kind::Inject, 21, index);
            let mut pinned = plain.clone();
            PINNED.vary(&mut pinned);
            assert_eq!(pinned.input, plain.input);
            assert_eq!((&pinned.values, &pinned.mesh), (&plain.values, &plain.mesh));
            let mut tagged = plain.clone();
            RELEASES[4].vary(&mut tagged);
            otel += usize::from(tagged.mesh.get("extensionProviders").is_some());
            app += usize::from(tagged.input != plain.input);
            init += usize::from(tagged.values["global"]["proxy_init"]["image"].is_string());
        }
        assert!(otel > 0 && app > 0 && init > 0, "{otel} {app} {init}");
    }

    #[test]
    fn an_unknown_release_names_the_choices() {
        let e = Release::parse("1.2")
            .expect_err("an unknown name")
            .to_string();
        assert!(
            e.contains("--release 1.2") && e.contains("1.31.0-rc.0"),
            "{e}"
        );
        assert_eq!(
            Release::parse("pinned-next").map(|r| r.peer).ok(),
            Some(Peer::Next)
        );
    }
}
