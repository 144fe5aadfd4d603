//! The injection engine shared by the webhook and `kube-inject` (Istio's `webhook.go` `injectPod` and
//! `inject.go` `RunTemplate`): validate annotations,
//! strip a previous injection, render each selected template, strategic-merge it onto the template pod and
//! the pod, re-apply user-set container fields, post-process, and diff.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde_json::{Map, Value};
use sidecar_core::fields::{self, Fields};

use crate::annotations;
use crate::cluster_state::ClusterState;
use crate::config::Settings;
use crate::decision::{self, Decision};
use crate::merge;
use crate::pod;
use crate::postprocess::{self, PostProcessParams};
use crate::render::{self, TemplateData};
use crate::workload::Workload;

/// Istio's proxy uid/gid off OpenShift (on OpenShift they come from the Namespace, see `openshift`).
pub const PROXY_UID: i64 = crate::openshift::DEFAULT_PROXY_ID;
pub const PROXY_GID: i64 = crate::openshift::DEFAULT_PROXY_ID;

/// A loaded engine: configuration parsed and everything that does not depend on the pod precomputed.
/// Cheap to share (`Arc<Engine>`); replaced whole on configuration reload, and by
/// [`Engine::with_cluster_state`] (sharing the configuration) on a change of the cluster state.
#[derive(Debug)]
pub struct Engine {
    pub settings: Arc<Settings>,
    /// The effective ProxyConfig of a pod without `proxy.istio.io/config` (default ⊕ mesh defaultConfig).
    base_proxy_config: Value,
    /// The `PROXY_CONFIG` env text of `base_proxy_config`, rendered once per configuration (`None` if it
    /// cannot be printed: then the render reports the error per pod, as before).
    base_proxy_config_env: Option<String>,
    /// Names of the compiled-in and user templates, for the "not found" message.
    have_templates: String,
    /// `values.global.multiCluster.clusterName` and `values.global.network`, looked up once.
    values_cluster: Option<String>,
    values_network: Option<String>,
    /// ProxyConfig resources and OpenShift Namespaces (empty unless [`Engine::with_cluster`]).
    cluster: ClusterState,
}

/// Which front end is asking: kube-inject differs in a few documented ways (Istio's `inject.go` `IntoObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Admission webhook: templates from `inject.istio.io/templates` or `defaultTemplates` (aliases
    /// expanded), `injectedAnnotations` applied, the mesh passed to templates as configured.
    Webhook,
    /// `kube-inject`: default templates fixed to `[sidecar]`, no aliases, no `injectedAnnotations`, and the
    /// pod's `proxy.istio.io/config` applied to the mesh's `defaultConfig` the templates see.
    KubeInject,
}

/// One injection request.
#[derive(Debug, Clone)]
pub struct InjectRequest<'a> {
    /// The pod as received (the patch is computed against it).
    pub pod: &'a Value,
    pub workload: &'a Workload,
    /// Environment from the webhook URL path parameters (Istio's `webhook.go` `parseInjectEnvs`); empty for kube-inject.
    pub url_env: BTreeMap<String, String>,
    pub mode: Mode,
}

/// Why injection failed. The messages carry Istio's prefixes (Istio's `webhook.go` `injectPod`).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// Invalid annotations.
    #[error("failed to run injection template: {0}")]
    InvalidAnnotations(#[from] annotations::ValidationError),
    /// `proxy.istio.io/config` (or the saved overrides) could not be used.
    #[error("failed to run injection template: {0}")]
    Template(String),
    /// A template is missing or failed to render.
    #[error("failed to run injection template: {0}")]
    Render(#[from] render::RenderError),
    /// A user template failed to render.
    #[error("failed to run injection template: {0}")]
    UserTemplate(#[from] crate::user_template::RenderError),
    /// The rendered template could not be merged into the pod.
    #[error("failed to run injection template: strategic merge: {0}")]
    Merge(merge::MergeError),
    /// Re-applying user-set container fields failed.
    #[error("failed to re apply container: {0}")]
    Reapply(merge::MergeError),
    /// Post-processing failed.
    #[error("failed to process pod: {0}")]
    PostProcess(#[from] postprocess::PostProcessError),
    /// The object is not a pod.
    #[error("not a pod: {0}")]
    NotAPod(String),
}

impl Engine {
    /// Builds an engine from loaded settings.
    pub fn new(settings: Settings) -> Engine {
        let base_proxy_config =
            crate::effective_proxy_config::effective(settings.mesh.field("defaultConfig"), None)
                .unwrap_or_else(|_| {
                    // Settings::load validated the mesh's defaultConfig, so this cannot fail; fall back to the
                    // built-in default rather than panic.
                    crate::defaults::builtin_proxy_config()
                });
        let base_proxy_config_env = render::proxy_config_env(&base_proxy_config).ok();
        let values_str = |path: &[&str]| {
            fields::path(&settings.values, path)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let values_cluster = values_str(&["global", "multiCluster", "clusterName"]);
        let values_network = values_str(&["global", "network"]);
        Engine {
            base_proxy_config,
            base_proxy_config_env,
            have_templates: render::template_names()
                .iter()
                .copied()
                .chain(settings.user_templates.names())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", "),
            values_cluster,
            values_network,
            settings: Arc::new(settings),
            cluster: ClusterState::default(),
        }
    }

    /// This configuration with another cluster state (a watch's change): nothing is parsed or computed
    /// again, the settings are shared.
    pub fn with_cluster_state(&self, cluster: ClusterState) -> Engine {
        Engine {
            settings: self.settings.clone(),
            base_proxy_config: self.base_proxy_config.clone(),
            base_proxy_config_env: self.base_proxy_config_env.clone(),
            have_templates: self.have_templates.clone(),
            values_cluster: self.values_cluster.clone(),
            values_network: self.values_network.clone(),
            cluster,
        }
    }

    /// The engine with ProxyConfig resources and OpenShift Namespaces (`--proxy-configs`, `--platform`,
    /// `--namespaces`).
    pub fn with_cluster(mut self, cluster: ClusterState) -> Engine {
        self.cluster = cluster;
        self
    }

    /// The namespaces whose ProxyConfig resources can give their pods another ProxyConfig than the
    /// mesh-wide one (`ProxyConfigResources::namespaces_with_own_config`); none without resources.
    pub fn proxy_config_namespaces(&self) -> Vec<String> {
        let root = self
            .settings
            .mesh
            .field("rootNamespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        self.cluster
            .proxy_configs
            .as_ref()
            .map(|p| p.namespaces_with_own_config(root))
            .unwrap_or_default()
    }

    /// Whether the webhook runs Istio's OpenShift steps (`PLATFORM=openshift`).
    pub fn openshift(&self) -> bool {
        self.cluster.openshift
    }

    /// The effective ProxyConfig of a pod with ProxyConfig resources (Istio's `proxy_config.go`
    /// `EffectiveProxyConfig`), in kube-inject too: `namespace` is the pod's (a manifest without one is
    /// taken to be in `default`, where `kubectl apply` would put it).
    fn resource_proxy_config(
        &self,
        resources: &crate::proxy_config_resources::ProxyConfigResources,
        req: &InjectRequest<'_>,
        annotations: Option<&Map<String, Value>>,
    ) -> Result<Value, EngineError> {
        let overlay = match annotations
            .and_then(|a| a.field(pod::PROXY_CONFIG_ANNOTATION))
            .and_then(Value::as_str)
        {
            Some(text) => Some(
                crate::effective_proxy_config::parse_overlay(text)
                    .map_err(EngineError::Template)?,
            ),
            None => None,
        };
        let root = self
            .settings
            .mesh
            .field("rootNamespace")
            .and_then(Value::as_str)
            .unwrap_or("");
        let labels = req
            .pod
            .field("metadata")
            .and_then(|m| m.field("labels"))
            .and_then(Value::as_object);
        let pc = resources.effective(
            &self.base_proxy_config,
            root,
            pod_namespace(req),
            labels,
            overlay.as_ref(),
        );
        crate::effective_proxy_config::validate(&pc).map_err(EngineError::Template)?;
        Ok(pc)
    }

    /// The proxy uid and gid of a pod: from its Namespace on OpenShift (webhook only, as Istio's
    /// kube-inject never looks a Namespace up), else 1337/1337.
    fn proxy_ids(&self, req: &InjectRequest<'_>) -> (i64, i64) {
        match req.mode {
            Mode::Webhook if self.cluster.openshift => {
                self.cluster.namespaces.proxy_ids(pod_namespace(req))
            }
            _ => (PROXY_UID, PROXY_GID),
        }
    }

    /// The native-sidecar decision for a pod: with `auto` and watched Nodes, Istio's
    /// `DetectNativeSidecar` on the pod's `spec.nodeName` (webhook only, as `kube-inject` has no
    /// cluster); else the global one.
    fn native_sidecars(&self, req: &InjectRequest<'_>) -> bool {
        match (&self.cluster.nodes, req.mode) {
            (Some(nodes), Mode::Webhook) if self.settings.native_sidecars_auto => nodes.detect(
                fields::path(req.pod, ["spec", "nodeName"])
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            _ => self.settings.native_sidecars,
        }
    }

    /// Istio's `injectRequired` with this engine's policy and selectors; kube-inject forces policy
    /// `enabled` without selectors (as Istio's `inject.go` `IntoObject`).
    pub fn decide(&self, pod: &Value, mode: Mode) -> Decision {
        match mode {
            Mode::Webhook => decision::injection_required(
                pod,
                &self.settings.injector.policy,
                &self.settings.injector.never_inject_selector,
                &self.settings.injector.always_inject_selector,
            ),
            Mode::KubeInject => {
                decision::injection_required(pod, &decision::Policy::Enabled, &[], &[])
            }
        }
    }

    /// The effective ProxyConfig of a pod (as Istio's `webhook.go` `inject` makes it); borrowed from the engine when the pod has no
    /// `proxy.istio.io/config` (the common case costs no copy).
    pub fn proxy_config(
        &self,
        annotations: Option<&Map<String, Value>>,
    ) -> Result<Cow<'_, Value>, EngineError> {
        match annotations.and_then(|a| a.field(pod::PROXY_CONFIG_ANNOTATION)) {
            None => Ok(Cow::Borrowed(&self.base_proxy_config)),
            Some(_) => crate::effective_proxy_config::effective(
                self.settings.mesh.field("defaultConfig"),
                annotations,
            )
            .map(Cow::Owned)
            // Named, since the pod may not even be injected (kube-inject parses it first).
            .map_err(|e| EngineError::Template(format!("{}: {e}", pod::PROXY_CONFIG_ANNOTATION))),
        }
    }

    /// The template names for a pod: `inject.istio.io/templates` or the defaults, aliases expanded one level.
    pub fn templates(&self, annotations: Option<&Map<String, Value>>, mode: Mode) -> Vec<String> {
        let requested: Vec<String> = match annotations
            .and_then(|a| a.field(pod::TEMPLATES_ANNOTATION))
            .and_then(Value::as_str)
        {
            Some(list) => list.split(',').map(|s| s.trim().to_string()).collect(),
            None => match mode {
                Mode::Webhook => self.settings.injector.default_templates.clone(),
                Mode::KubeInject => vec!["sidecar".to_string()],
            },
        };
        if mode == Mode::KubeInject {
            return requested;
        }
        let mut out = Vec::with_capacity(requested.len());
        for name in requested {
            match self.settings.injector.aliases.get(&name) {
                Some(expansion) => out.extend(expansion.iter().cloned()),
                None => out.push(name),
            }
        }
        out
    }

    /// Runs the injection pipeline (Istio's `webhook.go` `injectPod`) and returns the injected pod. The
    /// caller has already decided that the pod is to be injected.
    pub fn inject(&self, req: &InjectRequest<'_>) -> Result<Value, EngineError> {
        let original = req.pod;
        if !original.is_object() {
            return Err(EngineError::NotAPod(format!(
                "expected a JSON object, got {original}"
            )));
        }
        let annotations_map = original
            .field("metadata")
            .and_then(|m| m.field("annotations"))
            .and_then(Value::as_object);
        annotations::validate(annotations_map)?;

        let proxy_config = match &self.cluster.proxy_configs {
            Some(resources) => {
                Cow::Owned(self.resource_proxy_config(resources, req, annotations_map)?)
            }
            None => self.proxy_config(annotations_map)?,
        };
        let (proxy_uid, proxy_gid) = self.proxy_ids(req);
        let s = &self.settings;

        // kube-inject shows the templates the mesh with the pod's ProxyConfig applied.
        let kube_mesh;
        let mesh = match req.mode {
            Mode::Webhook => &s.mesh,
            Mode::KubeInject => {
                let mut m = s.mesh.clone();
                if let Some(obj) = m.as_object_mut() {
                    obj.insert(
                        "defaultConfig".to_string(),
                        proxy_config.clone().into_owned(),
                    );
                }
                kube_mesh = m;
                &kube_mesh
            }
        };

        let url_env = self.cluster_network_env(req);
        let view = template_view(original, annotations_map, mesh)?;
        let w = req.workload;
        let data = TemplateData {
            kind: &w.kind,
            api_version: &w.api_version,
            deploy_name: &w.name,
            deploy_namespace: &w.namespace,
            pod: &view,
            proxy_config: &proxy_config,
            mesh,
            values: &s.values,
            revision: &s.revision,
            native_sidecars: self.native_sidecars(req),
            proxy_uid,
            proxy_gid,
            compliance_policy: &s.compliance_policy,
            // Precomputed for the engine's own ProxyConfig; a pod's `proxy.istio.io/config` makes its own.
            proxy_config_env: match &proxy_config {
                Cow::Borrowed(_) => self.base_proxy_config_env.as_deref(),
                Cow::Owned(_) => None,
            },
        };
        let (mut merged, template_pod) = self.merge_templates(req, annotations_map, &data)?;

        merge::reapply_overwritten_containers(&mut merged, original, &template_pod, &proxy_config)
            .map_err(EngineError::Reapply)?;

        self.post_process(
            &mut merged,
            req,
            &template_pod,
            mesh,
            &proxy_config,
            &url_env,
        )?;
        Ok(merged)
    }

    /// Istio's `postProcessPod` on the merged pod, with this engine's configuration.
    fn post_process(
        &self,
        merged: &mut Value,
        req: &InjectRequest<'_>,
        template_pod: &Value,
        mesh: &Value,
        proxy_config: &Value,
        url_env: &BTreeMap<String, String>,
    ) -> Result<(), EngineError> {
        let s = &self.settings;
        let no_annotations = BTreeMap::new();
        let params = PostProcessParams {
            values: &s.values,
            mesh,
            proxy_config,
            injected_annotations: match req.mode {
                Mode::Webhook => &s.injector.injected_annotations,
                Mode::KubeInject => &no_annotations,
            },
            revision: &s.revision,
            url_env,
        };
        postprocess::post_process(merged, req.pod, template_pod, &params)?;
        Ok(())
    }

    /// Cluster and network (Istio's `webhook.go` `inject`): the URL path's environment with the resolved
    /// `ISTIO_META_CLUSTER_ID` and `ISTIO_META_NETWORK` added when non-empty (post-processing appends
    /// them to the proxy's env).
    fn cluster_network_env(&self, req: &InjectRequest<'_>) -> BTreeMap<String, String> {
        let mut url_env = req.url_env.clone();
        let cluster = url_env
            .get("ISTIO_META_CLUSTER_ID")
            .cloned()
            .filter(|c| !c.is_empty())
            .or_else(|| self.values_cluster.clone())
            .unwrap_or_default();
        let network = pod::label(req.pod, pod::NETWORK_LABEL)
            .map(str::to_string)
            .filter(|n| !n.is_empty())
            .or_else(|| {
                url_env
                    .get("ISTIO_META_NETWORK")
                    .cloned()
                    .filter(|n| !n.is_empty())
            })
            .or_else(|| self.values_network.clone())
            .unwrap_or_default();
        if !cluster.is_empty() {
            url_env.insert("ISTIO_META_CLUSTER_ID".to_string(), cluster);
        }
        if !network.is_empty() {
            url_env.insert("ISTIO_META_NETWORK".to_string(), network);
        }
        url_env
    }

    /// Renders each selected template and strategic-merges it into a copy of the pod, and its
    /// [`Skeleton`] into the template pod. Returns (merged pod, template pod).
    fn merge_templates(
        &self,
        req: &InjectRequest<'_>,
        annotations_map: Option<&Map<String, Value>>,
        data: &TemplateData<'_>,
    ) -> Result<(Value, Value), EngineError> {
        // Go's rule for moving a user-supplied istio-proxy (Istio's `inject.go` `RunTemplate`): exact
        // "true"/"false" override.
        let native_move = match annotations_map
            .and_then(|a| a.field(pod::NATIVE_SIDECAR_ANNOTATION))
            .and_then(Value::as_str)
        {
            Some("true") => true,
            Some("false") => false,
            _ => self.native_sidecars(req),
        };
        let mut merged = req.pod.clone();
        // `None` while the template pod is still empty.
        let mut template_pod: Option<Value> = None;
        for name in self.templates(annotations_map, req.mode) {
            // A user template of a built-in's name replaces the built-in.
            let user = self.settings.user_templates.get(&name);
            if user.is_none() && !render::template_names().contains(&name.as_str()) {
                return Err(EngineError::Render(render::RenderError::NotFound {
                    name,
                    have: self.have_templates.clone(),
                }));
            }
            let rendered = match user {
                // `.NativeSidecars` is the global decision; the annotation only decides the move.
                Some(u) => u.render(data, data.native_sidecars, req.mode == Mode::Webhook)?,
                None => render::render(&name, data)?,
            };
            apply_template(&mut merged, &mut template_pod, rendered, native_move)?;
        }
        Ok((merged, template_pod.unwrap_or_else(empty_template_pod)))
    }

    /// The RFC 6902 patch from the request's pod to the injected pod, serialised (what the webhook's
    /// AdmissionReview response carries before base64).
    pub fn patch(&self, original: &Value, injected: &Value) -> Result<Vec<u8>, serde_json::Error> {
        crate::patch::create_patch_json(original, injected)
    }
}

/// The pod's namespace (the webhook has already defaulted it to the request's), else the workload's, else
/// `default`.
fn pod_namespace<'a>(req: &InjectRequest<'a>) -> &'a str {
    let workload: &'a Workload = req.workload;
    let ns = req
        .pod
        .field("metadata")
        .and_then(|m| m.field("namespace"))
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(workload.namespace.as_str());
    if ns.is_empty() {
        "default"
    } else {
        ns
    }
}

/// One selected template's step of Istio's `inject.go` `RunTemplate` loop, the same for every template:
/// its [`Skeleton`] strategic-merged into the template pod (`None` while still empty), the native move of a
/// user `istio-proxy`, then the rendered partial pod strategic-merged into the pod, in list order.
fn apply_template(
    merged: &mut Value,
    template_pod: &mut Option<Value>,
    rendered: Value,
    native_move: bool,
) -> Result<(), EngineError> {
    let skeleton = template_skeleton(&rendered);
    let current = match (&*template_pod, skeleton.special) {
        // Merging a skeleton without `$` directives into the empty template pod gives the
        // skeleton itself (a missing merge key is reported by the merge into the pod below).
        (None, false) => template_pod.insert(skeleton.pod),
        _ => {
            let t = template_pod.get_or_insert_with(empty_template_pod);
            merge::strategic_merge_pod_owned(t, skeleton.pod).map_err(EngineError::Merge)?;
            t
        }
    };
    if native_move
        && pod::find_named(
            pod::containers(current, "initContainers"),
            pod::PROXY_CONTAINER,
        )
        .is_some()
    {
        move_proxy_to_init(merged);
    }
    // In place, moving the rendered parts: no copy of the pod per template.
    merge::strategic_merge_pod_owned(merged, rendered).map_err(EngineError::Merge)
}

fn empty_template_pod() -> Value {
    serde_json::json!({"metadata": {}, "spec": {}})
}

/// The template's view of the pod: previous injection stripped, saved overrides re-inserted. Without
/// the status and overrides annotations both steps are no-ops: the pod is borrowed instead of copied
/// (the common case, a pod never injected before).
fn template_view<'a>(
    original: &'a Value,
    annotations_map: Option<&Map<String, Value>>,
    mesh: &Value,
) -> Result<Cow<'a, Value>, EngineError> {
    let has_ann = |k: &str| annotations_map.is_some_and(|a| a.has_field(k));
    if has_ann(pod::STATUS_ANNOTATION) || has_ann(pod::OVERRIDES_ANNOTATION) {
        let mut view = postprocess::strip_pod(original, mesh);
        postprocess::reinsert_overrides(&mut view)?;
        Ok(Cow::Owned(view))
    } else {
        Ok(Cow::Borrowed(original))
    }
}

/// The parts of a rendered template that the steps after the merge read from the template pod: the names
/// in `spec.containers`, `spec.initContainers`, `spec.volumes` and `spec.imagePullSecrets` (status
/// annotation, re-applied user fields, the native move), with every strategic-merge directive kept (`$…`
/// keys in `spec` and in list items), so the lists merge to the same names in the same order. Merging this
/// instead of a copy of the whole rendered pod saves a deep copy per template; the rendered pod itself is
/// merged into the request pod whole.
#[derive(Debug)]
struct Skeleton {
    pod: Value,
    /// Whether merging the skeleton could do more than copy it: a `$` directive, a list that is not an
    /// array of objects, an item without a string name, or a name twice in a list (the merge would
    /// reject, reshape or combine those).
    special: bool,
}

fn template_skeleton(rendered: &Value) -> Skeleton {
    const LISTS: [&str; 4] = [
        "containers",
        "initContainers",
        "volumes",
        "imagePullSecrets",
    ];
    let mut special = false;
    let mut spec = Map::new();
    if let Some(src) = rendered.field("spec").and_then(Value::as_object) {
        for (k, v) in src {
            if k.starts_with('$') {
                special = true;
                spec.insert(k.clone(), v.clone());
            } else if LISTS.contains(&k.as_str()) {
                let skeleton = match v {
                    Value::Array(items) => {
                        // A set, not a scan per item: a template lists every app container (grpc-agent).
                        let mut names: HashSet<&str> = HashSet::with_capacity(items.len());
                        for item in items {
                            match item.field("name").and_then(Value::as_str) {
                                Some(n) if names.insert(n) => {}
                                _ => special = true,
                            }
                        }
                        Value::Array(
                            items
                                .iter()
                                .map(|item| match item.as_object() {
                                    Some(m) => Value::Object(
                                        m.iter()
                                            .filter(|(k, _)| {
                                                let directive = k.starts_with('$');
                                                special |= directive;
                                                *k == "name" || directive
                                            })
                                            .map(|(k, v)| (k.clone(), v.clone()))
                                            .collect(),
                                    ),
                                    None => {
                                        special = true;
                                        item.clone()
                                    }
                                })
                                .collect(),
                        )
                    }
                    other => {
                        special = true;
                        other.clone()
                    }
                };
                spec.insert(k.clone(), skeleton);
            }
        }
    }
    let mut pod = Map::new();
    pod.insert("metadata".to_string(), Value::Object(Map::new()));
    pod.insert("spec".to_string(), Value::Object(spec));
    Skeleton {
        pod: Value::Object(pod),
        special,
    }
}

/// Native move (Istio's `inject.go` `RunTemplate`): a user `istio-proxy` in `containers` follows the proxy into
/// `initContainers` (appended at the end) before the template is merged.
fn move_proxy_to_init(pod: &mut Value) {
    let Some(spec) = pod.field_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(containers) = spec.field_mut("containers").and_then(Value::as_array_mut) else {
        return;
    };
    let Some(idx) = containers
        .iter()
        .position(|c| pod::name_of(c) == pod::PROXY_CONTAINER)
    else {
        return;
    };
    let proxy = containers.remove(idx);
    match spec.field_mut("initContainers") {
        Some(Value::Array(inits)) => inits.push(proxy),
        _ => {
            spec.insert("initContainers".to_string(), Value::Array(vec![proxy]));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_plain_skeleton_is_what_merging_it_into_the_empty_template_pod_gives() {
        let rendered = json!({"metadata": {"labels": {"a": "b"}},
            "spec": {"initContainers": [{"name": "istio-init", "image": "x"}, {"name": "istio-proxy"}],
                     "volumes": [{"name": "v1", "emptyDir": {}}, {"name": "v2"}],
                     "containers": [], "securityContext": {"fsGroup": 1337}}});
        let Skeleton {
            pod: skeleton,
            special,
        } = template_skeleton(&rendered);
        assert!(!special);
        let mut merged = json!({"metadata": {}, "spec": {}});
        merge::strategic_merge_pod_owned(&mut merged, skeleton.clone()).unwrap();
        assert_eq!(
            serde_json::to_string(&merged).unwrap(),
            serde_json::to_string(&skeleton).unwrap()
        );
        for special in [
            json!({"spec": {"$retainKeys": ["volumes"], "volumes": []}}),
            json!({"spec": {"volumes": [{"name": "a", "$patch": "delete"}]}}),
            json!({"spec": {"volumes": [{"name": "a"}, {"name": "a", "emptyDir": {}}]}}),
            json!({"spec": {"volumes": [{"emptyDir": {}}]}}),
            json!({"spec": {"volumes": [{"name": null}]}}),
            json!({"spec": {"volumes": ["a"]}}),
            json!({"spec": {"volumes": null}}),
        ] {
            assert!(template_skeleton(&special).special, "{special}");
        }
    }

    #[test]
    fn a_skeletons_status_annotation_names_what_the_template_added() {
        let rendered = json!({"spec": {"initContainers": [{"name": "istio-init"}, {"name": "istio-proxy"}],
                                       "volumes": [{"name": "v1"}], "imagePullSecrets": [{"name": "s"}]}});
        let sk = template_skeleton(&rendered);
        let want = crate::status::build(&sk.pod, "canary");
        assert!(want.contains("\"revision\":\"canary\""), "{want}");
        assert!(want.contains("\"istio-init\",\"istio-proxy\""), "{want}");
    }

    #[test]
    fn native_move_appends_to_init() {
        let mut pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "istio-proxy", "image": "x"}],
                                       "initContainers": [{"name": "i"}]}});
        move_proxy_to_init(&mut pod);
        assert_eq!(pod["spec"]["containers"], json!([{"name": "a"}]));
        assert_eq!(
            pod["spec"]["initContainers"][1]["name"],
            json!("istio-proxy")
        );
    }

    /// Runs the selected names through `apply_template` with static overlays standing in for templates.
    fn apply_static(
        pod: &Value,
        names: &[String],
        overlays: &BTreeMap<&str, Value>,
    ) -> (Value, Value) {
        let mut merged = pod.clone();
        let mut template_pod = None;
        for name in names {
            apply_template(
                &mut merged,
                &mut template_pod,
                overlays[name.as_str()].clone(),
                true,
            )
            .unwrap();
        }
        (merged, template_pod.unwrap_or_else(empty_template_pod))
    }

    #[test]
    fn multiple_templates_combine_in_list_order_and_an_alias_gives_the_same_pod() {
        // Istio's `TestMultipleInjectionTemplates`: `sidecar` and `init` as static templates, selected as
        // `sidecar,init` and through the alias `both`.
        let overlays: BTreeMap<&str, Value> = [
            (
                "sidecar",
                json!({"spec": {"containers": [{"name": "istio-proxy", "image": "proxy"}]}}),
            ),
            (
                "init",
                json!({"spec": {"initContainers": [{"name": "istio-init"}]}}),
            ),
        ]
        .into_iter()
        .collect();
        let mut s = Settings::default();
        s.injector
            .aliases
            .insert("both".into(), vec!["sidecar".into(), "init".into()]);
        let e = Engine::new(s);
        let pod = json!({"metadata": {"name": "hello"},
                         "spec": {"containers": [{"name": "hello", "image": "fake.docker.io/google-samples/hello-go-gke:1.0"}]}});
        let listed = e.templates(
            json!({pod::TEMPLATES_ANNOTATION: "sidecar,init"}).as_object(),
            Mode::Webhook,
        );
        let aliased = e.templates(
            json!({pod::TEMPLATES_ANNOTATION: "both"}).as_object(),
            Mode::Webhook,
        );
        assert_eq!(listed, aliased);
        let (merged, template_pod) = apply_static(&pod, &listed, &overlays);
        assert_eq!(apply_static(&pod, &aliased, &overlays).0, merged);
        assert_eq!(
            merged["spec"]["containers"],
            json!([{"name": "istio-proxy", "image": "proxy"},
                   {"name": "hello", "image": "fake.docker.io/google-samples/hello-go-gke:1.0"}])
        );
        assert_eq!(
            merged["spec"]["initContainers"],
            json!([{"name": "istio-init"}])
        );
        let status = crate::status::build(&template_pod, "");
        assert!(
            status.contains(r#""initContainers":["istio-init"],"containers":["istio-proxy"]"#),
            "{status}"
        );
    }

    #[test]
    fn a_patch_replace_directive_in_a_template_replaces_the_map() {
        // Istio's `TestStrategicMerge`: `labels: {$patch: replace, foo: bar}` replaces every label, and the
        // injected container comes before the pod's own.
        let overlays: BTreeMap<&str, Value> = [(
            "replace",
            json!({"metadata": {"labels": {"$patch": "replace", "foo": "bar"}},
                   "spec": {"containers": [{"name": "injected", "image": "fake.docker.io/google-samples/hello-go-gke:1.1"}]}}),
        )]
        .into_iter()
        .collect();
        let pod = json!({"metadata": {"name": "hello", "labels": {"app": "hello", "version": "v1"}},
                         "spec": {"containers": [{"name": "hello", "image": "fake.docker.io/google-samples/hello-go-gke:1.0"}]}});
        let (merged, template_pod) = apply_static(&pod, &["replace".to_string()], &overlays);
        assert_eq!(merged["metadata"]["labels"], json!({"foo": "bar"}));
        let names = test_support::pods::names(&merged["spec"]["containers"]);
        assert_eq!(names, ["injected", "hello"]);
        assert_eq!(
            template_pod["spec"]["containers"],
            json!([{"name": "injected"}])
        );
    }

    #[test]
    fn an_unknown_or_empty_template_name_fails_with_istios_text() {
        let e = Engine::new(Settings::default());
        let workload = Workload::default();
        for (annotation, name) in [("sidecar,nope", "nope"), ("sidecar,", ""), ("", "")] {
            let pod = json!({"metadata": {"name": "p", "annotations": {pod::TEMPLATES_ANNOTATION: annotation}},
                             "spec": {"containers": [{"name": "app", "image": "app"}]}});
            for mode in [Mode::Webhook, Mode::KubeInject] {
                let req = InjectRequest {
                    pod: &pod,
                    workload: &workload,
                    url_env: BTreeMap::new(),
                    mode,
                };
                let err = e.inject(&req).unwrap_err().to_string();
                assert_eq!(
                    err,
                    format!(
                        "failed to run injection template: requested template {name:?} not found; \
                         have gateway, grpc-agent, grpc-simple, sidecar"
                    ),
                    "{annotation:?} {mode:?}"
                );
            }
        }
    }

    #[test]
    fn kube_inject_ignores_default_templates_and_the_annotation_replaces_them() {
        let mut s = Settings::default();
        s.injector.default_templates = vec!["sidecar".into(), "grpc-simple".into()];
        let e = Engine::new(s);
        assert_eq!(
            e.templates(None, Mode::Webhook),
            vec!["sidecar", "grpc-simple"]
        );
        assert_eq!(e.templates(None, Mode::KubeInject), vec!["sidecar"]);
        let ann = json!({pod::TEMPLATES_ANNOTATION: "gateway"});
        for mode in [Mode::Webhook, Mode::KubeInject] {
            assert_eq!(e.templates(ann.as_object(), mode), vec!["gateway"]);
        }
    }

    #[test]
    fn aliases_expand_one_level_in_webhook_mode_only() {
        let mut s = Settings::default();
        s.injector
            .aliases
            .insert("both".into(), vec!["sidecar".into(), "init".into()]);
        let e = Engine::new(s);
        let ann = json!({pod::TEMPLATES_ANNOTATION: " both , x"});
        assert_eq!(
            e.templates(ann.as_object(), Mode::Webhook),
            vec!["sidecar", "init", "x"]
        );
        assert_eq!(
            e.templates(ann.as_object(), Mode::KubeInject),
            vec!["both", "x"]
        );
        assert_eq!(e.templates(None, Mode::KubeInject), vec!["sidecar"]);
    }
}
