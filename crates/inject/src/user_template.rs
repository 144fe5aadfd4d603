//! User templates: entries of the injector config's `templates` map (and of
//! `values.sidecarInjectorWebhook.templates`, which Istio's chart renders into it, its
//! `istiod-injector-configmap.yaml`) that are not the chart's built-in texts.
//!
//! Istio executes whatever text is under a name, and so does this injector: each entry is classified once,
//! at load ([`template_source`]). A pod template's text that is exactly the one its compiled template
//! was built from renders compiled; every other text of a pod template, built-in names included, is
//! evaluated; the gateway controller's texts are left alone.
//!
//! A user text is parsed once per configuration with [`gotemplate`](gotemplate): one without
//! actions is a static overlay, its YAML parsed into a partial pod at load; one with actions is evaluated
//! per pod over Istio's `SidecarTemplateData` (as JSON with Go field names) within [`Limits`], and its
//! output parsed as YAML. Anything the evaluator does not support refuses the configuration at load.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::render::TemplateData;
use crate::template_source::{self, RenderPath, GATEWAY_CONTROLLER_TEMPLATES, POD_TEMPLATES};
use gotemplate::{self, Limits, Template};
use sidecar_core::fields::{self, Fields};

mod pod_type;

use pod_type::shown;

/// A user template was refused when the configuration was loaded; names the file, key, template, line and
/// construct.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The entry is not a template text.
    #[error("{file}: key {key}: invalid value {value}: expected a template text (a string)")]
    NotText {
        file: String,
        key: String,
        value: String,
    },
    /// The `templates` key is not a mapping of names to texts.
    #[error(
        "{file}: key {key}: invalid value {value}: expected a mapping of template names to texts"
    )]
    NotMap {
        file: String,
        key: String,
        value: String,
    },
    /// The text is outside the supported Go template subset (or not a valid Go template).
    #[error("{file}: key {key}: {source}")]
    Parse {
        file: String,
        key: String,
        #[source]
        source: gotemplate::ParseError,
    },
    /// A static template (no actions) is not YAML.
    #[error("{file}: key {key}: static template {name:?} is not YAML: {message}")]
    StaticYaml {
        file: String,
        key: String,
        name: String,
        message: String,
    },
    /// A static template is YAML but not a mapping (a partial pod).
    #[error("{file}: key {key}: static template {name:?} is not a partial pod (a YAML mapping): {found}")]
    StaticShape {
        file: String,
        key: String,
        name: String,
        found: String,
    },
    /// A static template's partial pod does not decode as a Pod (a field of the wrong type).
    #[error("{file}: key {key}: static template {name:?} does not decode as a Pod: {error}")]
    StaticType {
        file: String,
        key: String,
        name: String,
        error: pod_type::TypeError,
    },
}

/// Rendering a user template for a pod failed (the engine prefixes Istio's
/// `failed to run injection template: `).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Evaluation failed or crossed a bound.
    #[error(transparent)]
    Exec(#[from] gotemplate::ExecError),
    /// The output is not a YAML mapping (Istio's wording from its `inject.go` `applyOverlayYAML`, then ours).
    #[error("failed applying injection overlay: strategic merge: Invalid JSON document (template {name:?}: {message})")]
    Overlay { name: String, message: String },
    /// The output does not decode as a Pod (Istio's `applyOverlayYAML` wording, then the field and value).
    #[error(
        "failed applying injection overlay: unmarshal patched pod: template {name:?}: {error}"
    )]
    PodType {
        name: String,
        error: pod_type::TypeError,
    },
}

/// The user templates of one configuration, parsed; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct UserTemplates {
    by_name: Arc<BTreeMap<String, UserTemplate>>,
    /// How each configured text renders; a built-in name without a text renders compiled.
    paths: Arc<BTreeMap<String, RenderPath>>,
}

/// One parsed user template.
#[derive(Debug)]
pub struct UserTemplate {
    name: String,
    body: Body,
}

#[derive(Debug)]
enum Body {
    /// No actions: the partial pod every pod gets.
    Static(Value),
    /// Evaluated per pod.
    Actions(Template),
}

#[cfg(test)]
thread_local! {
    /// Texts parsed on this thread, so a test can prove a text is parsed once per configuration.
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Where the template texts of a configuration are: `(file, the templates map)` of the injector config and
/// of the values document.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sources<'a> {
    pub config: Option<(&'a str, &'a Value)>,
    pub values: Option<(&'a str, &'a Value)>,
    /// Evaluate a pod template's text even when it is the one the compiled template was built from.
    pub evaluate_texts: bool,
}

fn texts<'a>(
    file: &str,
    key: &str,
    map: Option<&'a Value>,
) -> Result<BTreeMap<&'a str, &'a str>, LoadError> {
    match map {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(name, text)| match text {
                Value::String(t) => Ok((name.as_str(), t.as_str())),
                other => Err(LoadError::NotText {
                    file: file.to_string(),
                    key: format!("{key}.{name}"),
                    value: shown(other),
                }),
            })
            .collect(),
        Some(other) => Err(LoadError::NotMap {
            file: file.to_string(),
            key: key.to_string(),
            value: shown(other),
        }),
    }
}

impl UserTemplates {
    /// Classifies and parses the texts of a configuration (see [`template_source`]); `warnings` gets
    /// the gateway controller's texts, which are never rendered into pods.
    pub fn load(sources: Sources<'_>, warnings: &mut Vec<String>) -> Result<Self, LoadError> {
        let (config_file, config_map) = sources.config.unzip();
        let (values_file, values_map) = sources.values.unzip();
        let config_file = config_file.unwrap_or("config");
        let values_file = values_file.unwrap_or("values");
        let from_config = texts(config_file, "templates", config_map)?;
        let values_key = "sidecarInjectorWebhook.templates";
        let from_values = texts(values_file, values_key, values_map)?;

        let mut controller_texts = Vec::new();
        let mut paths = BTreeMap::new();
        // (name, text, file, key): the config's text wins, as istiod executes it; a name only in values
        // is used too, as the chart would have rendered it into the config.
        let mut user: Vec<(&str, &str, &str, String)> = Vec::new();
        for (&name, &text) in &from_config {
            if GATEWAY_CONTROLLER_TEMPLATES.contains(&name) && !from_values.contains_key(name) {
                controller_texts.push(format!("templates.{name}"));
                continue;
            }
            if POD_TEMPLATES.contains(&name) && !from_values.contains_key(name) {
                if let Some(release) = template_source::compiled_release(name, text)
                    .filter(|_| !sources.evaluate_texts)
                {
                    tracing::info!(
                        template = name,
                        release,
                        path = "compiled",
                        "{config_file}: templates.{name} is Istio {release}'s text: the compiled template renders it"
                    );
                    paths.insert(name.to_string(), RenderPath::Compiled);
                    continue;
                }
                tracing::info!(
                    template = name,
                    path = "evaluated",
                    "{config_file}: templates.{name}: the configured text renders, through the evaluator"
                );
            }
            user.push((name, text, config_file, format!("templates.{name}")));
        }
        for (&name, &text) in &from_values {
            if !from_config.contains_key(name) {
                user.push((name, text, values_file, format!("{values_key}.{name}")));
            }
        }
        if !controller_texts.is_empty() {
            warnings.push(format!(
                "{config_file}: {}: not used: Istio's gateway controller renders these into Deployments, \
                 never into pods",
                controller_texts.join(", ")
            ));
        }
        let mut by_name = BTreeMap::new();
        for (name, text, file, key) in user {
            let t = UserTemplate::parse(name, text, file, &key)?;
            by_name.insert(name.to_string(), t);
            paths.insert(name.to_string(), RenderPath::Evaluated);
        }
        Ok(UserTemplates {
            by_name: Arc::new(by_name),
            paths: Arc::new(paths),
        })
    }

    /// How the template `name` renders: evaluated when a text of that name is configured and is not the
    /// text its compiled template was built from; compiled otherwise.
    pub fn path(&self, name: &str) -> RenderPath {
        self.paths
            .get(name)
            .copied()
            .unwrap_or(RenderPath::Compiled)
    }

    /// The user template of that name, if any (it replaces a built-in of the same name).
    pub fn get(&self, name: &str) -> Option<&UserTemplate> {
        self.by_name.get(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

impl UserTemplate {
    fn parse(name: &str, text: &str, file: &str, key: &str) -> Result<UserTemplate, LoadError> {
        #[cfg(test)]
        PARSES.with(|p| p.set(p.get() + 1));
        let t = Template::parse(name, text).map_err(|source| LoadError::Parse {
            file: file.to_string(),
            key: key.to_string(),
            source,
        })?;
        let body = match t.static_text() {
            Some(s) => {
                let pod = overlay(name, s).map_err(|(yaml, message)| {
                    if yaml {
                        LoadError::StaticYaml {
                            file: file.to_string(),
                            key: key.to_string(),
                            name: name.to_string(),
                            message,
                        }
                    } else {
                        LoadError::StaticShape {
                            file: file.to_string(),
                            key: key.to_string(),
                            name: name.to_string(),
                            found: message,
                        }
                    }
                })?;
                pod_type::check(&pod).map_err(|error| LoadError::StaticType {
                    file: file.to_string(),
                    key: key.to_string(),
                    name: name.to_string(),
                    error,
                })?;
                Body::Static(pod)
            }
            None => Body::Actions(t),
        };
        Ok(UserTemplate {
            name: name.to_string(),
            body,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// True for a template without actions (its partial pod was parsed at load).
    pub fn is_static(&self) -> bool {
        matches!(self.body, Body::Static(_))
    }

    /// The partial pod this template adds to a pod, to be strategic-merged like a rendered built-in.
    /// `native_sidecars` is the engine's decision for the pod before its `sidecar.istio.io/nativeSidecar`
    /// annotation (Istio's `inject.go` `RunTemplate` puts `params.nativeSidecar` in
    /// `SidecarTemplateData`; the annotation only moves a user `istio-proxy`); `webhook` tells the front end.
    pub fn render(
        &self,
        data: &TemplateData<'_>,
        native_sidecars: bool,
        webhook: bool,
    ) -> Result<Value, RenderError> {
        match &self.body {
            Body::Static(pod) => Ok(pod.clone()),
            Body::Actions(t) => {
                let root = data_root(data, native_sidecars, webhook);
                let text = t.execute(&root, &Limits::default())?;
                let mut pod =
                    overlay(&self.name, &text).map_err(|(_, message)| RenderError::Overlay {
                        name: self.name.clone(),
                        message,
                    })?;
                go_decoded_containers(&mut pod);
                pod_type::check(&pod).map_err(|error| RenderError::PodType {
                    name: self.name.clone(),
                    error,
                })?;
                Ok(pod)
            }
        }
    }
}

/// The containers of a rendered partial pod as Go's typed decode and print leave them: Istio's
/// `applyOverlayYAML` unmarshals the merged pod into a `corev1.Pod`, so a text's `initialDelaySeconds: 0`
/// (an `omitempty` int32), `emptyDir:` (a nil pointer) and a container key no field has never reach the
/// stored pod.
fn go_decoded_containers(pod: &mut Value) {
    let Some(spec) = pod.field_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for list in ["initContainers", "containers"] {
        if let Some(items) = spec.field_mut(list).and_then(Value::as_array_mut) {
            for c in items {
                use sidecar_core::gotypes::{drop_omitted_zeros, CONTAINER};
                drop_omitted_zeros(c, CONTAINER);
                // Go's decoder drops a key no field has; the merge directives (`$patch`, …) stay.
                if let Some(c) = c.as_object_mut() {
                    c.retain(|k, _| k.starts_with('$') || CONTAINER.iter().any(|(n, _)| n == k));
                }
            }
        }
    }
    // A volume's sources are `omitempty` pointers: the texts' `- emptyDir:` (a YAML null) is no source.
    if let Some(volumes) = spec.field_mut("volumes").and_then(Value::as_array_mut) {
        for v in volumes.iter_mut().filter_map(Value::as_object_mut) {
            v.retain(|_, x| !x.is_null());
        }
    }
}

/// A template's output as a partial pod: YAML 1.1, an empty output is no change. Errors are
/// `(is a YAML error, message)`.
fn overlay(name: &str, text: &str) -> Result<Value, (bool, String)> {
    match sidecar_core::yaml::parse_last_key_wins(text) {
        Ok(Value::Null) => Ok(Value::Object(Map::new())),
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err((false, format!("template {name:?} gives {}", shown(&other)))),
        Err(e) => Err((true, e.to_string())),
    }
}

/// Istio's `SidecarTemplateData` (its `inject.go`) as the evaluator's JSON root, keyed by Go field names.
fn data_root(d: &TemplateData<'_>, native_sidecars: bool, webhook: bool) -> Value {
    let part = |k: &str| d.pod.field(k).cloned().unwrap_or_else(|| json!({}));
    let annotations = crate::pod::annotations(d.pod);
    let image_type_annotation = annotations
        .and_then(|a| a.field(crate::pod::PROXY_IMAGE_TYPE_ANNOTATION))
        .and_then(Value::as_str);
    let (proxy_image, proxy_init_image) = images(d, image_type_annotation);
    let inbound =
        match fields::path(d.mesh, ["inboundTrafficPolicy", "mode"]).and_then(Value::as_str) {
            Some("LOCALHOST") => "localhost",
            _ => "passthrough",
        };
    // istiod's revision is `default` for the default revision; kube-inject prints `--revision` as given.
    let revision = if webhook && d.revision.is_empty() {
        "default"
    } else {
        d.revision
    };
    json!({
        "TypeMeta": {"kind": d.kind, "apiVersion": d.api_version},
        "DeploymentMeta": {"name": d.deploy_name, "namespace": d.deploy_namespace},
        "ObjectMeta": part("metadata"),
        "Spec": part("spec"),
        "ProxyConfig": d.proxy_config,
        "MeshConfig": d.mesh,
        "Values": d.values,
        "Revision": revision,
        "NativeSidecars": native_sidecars,
        "ProxyImage": proxy_image,
        "ProxyInitImage": proxy_init_image,
        "ProxyUID": d.proxy_uid,
        "ProxyGID": d.proxy_gid,
        "InboundTrafficPolicyMode": inbound,
        "CompliancePolicy": d.compliance_policy,
    })
}

/// `.ProxyImage` and `.ProxyInitImage` (Istio's `inject.go` `ProxyImage`/`ProxyInitImage`):
/// `<hub>/<image name>:<tag[-type]>`, the type from `sidecar.istio.io/proxyImageType`, else the
/// ProxyConfig's `image.imageType` (proxy only), else `values.global.variant`.
fn images(d: &TemplateData<'_>, image_type_annotation: Option<&str>) -> (String, String) {
    let v = |p: &[&str]| fields::path(d.values, p);
    let s = |p: &[&str]| v(p).and_then(Value::as_str).unwrap_or("");
    let name = |p: &[&str]| Some(s(p)).filter(|n| !n.is_empty()).unwrap_or("proxyv2");
    let tag = crate::render::sprint(v(&["global", "tag"]));
    let hub = s(&["global", "hub"]);
    let variant = s(&["global", "variant"]);
    let pc_type = fields::path(d.proxy_config, ["image", "imageType"])
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    let proxy_type = image_type_annotation.or(pc_type).unwrap_or(variant);
    let init_type = image_type_annotation.unwrap_or(variant);
    (
        crate::render::image::image_url(hub, name(&["global", "proxy", "image"]), &tag, proxy_type),
        crate::render::image::image_url(
            hub,
            name(&["global", "proxy_init", "image"]),
            &tag,
            init_type,
        ),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
