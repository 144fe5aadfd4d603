//! ProxyConfig custom resources (`networking.istio.io/v1beta1` `ProxyConfig`) and the webhook's
//! precedence over them (Istio's `proxy_config.go` `EffectiveProxyConfig` and `mergeWithPrecedence`):
//! mesh `defaultConfig` < root-namespace resource < pod-namespace resource < the `proxy.istio.io/config`
//! annotation < workload resource, one resource (the oldest) per level.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::cow_map::CowMap;
use crate::kube_objects::{self, ObjectsError};
use sidecar_core::fields::{self, Fields};

/// One ProxyConfig resource, converted to the mesh ProxyConfig fields it sets (Istio's
/// `toMeshConfigProxyConfig`: `concurrency`, `environmentVariables` → `proxyMetadata`, `image`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProxyConfigResource {
    pub name: String,
    pub namespace: String,
    /// `metadata.creationTimestamp` in Unix seconds (0 when absent, as Go's zero time sorts first).
    pub created: i64,
    /// `None`: no `selector` (namespace-wide); `Some(labels)`: `selector.matchLabels` (empty: matches
    /// nothing, as Istio ignores such a resource).
    pub selector: Option<BTreeMap<String, String>>,
    /// The mesh ProxyConfig overlay (camelCase JSON).
    pub overlay: Map<String, Value>,
}

/// The resources of a configuration, grouped by namespace, each group oldest first (then by name), as
/// Istio's `sortConfigByCreationTime` orders them. Cheap to clone: a watch replaces the groups that
/// changed and shares the rest with the engines of earlier states.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProxyConfigResources {
    by_namespace: CowMap<String, Arc<[Arc<ProxyConfigResource>]>>,
}

/// Fields of a resource's `spec` (istio/api `networking/v1beta1/proxy_config.proto`).
const SPEC_FIELDS: [&str; 4] = ["selector", "concurrency", "environmentVariables", "image"];
/// The only version of the ProxyConfig resource the API server serves.
const API_VERSION: &str = "networking.istio.io/v1beta1";
/// Istio's limit on an `environmentVariables` value.
const MAX_ENV_VALUE: usize = 2048;

impl ProxyConfigResources {
    /// Reads the resources of a file (`kubectl get proxyconfigs -A -o yaml`).
    pub fn load(path: &Path) -> Result<ProxyConfigResources, ObjectsError> {
        Self::from_objects(
            kube_objects::read("--proxy-configs", path)?,
            &path.display().to_string(),
        )
    }

    /// Validates and indexes parsed objects; `source` names them in errors.
    pub fn from_objects(
        objects: Vec<Value>,
        source: &str,
    ) -> Result<ProxyConfigResources, ObjectsError> {
        let mut resources = Vec::new();
        // The API server keeps one object per namespace/name; two in the file would silently shadow.
        let mut seen: HashMap<(String, String), usize> = HashMap::new();
        for (i, obj) in objects.iter().enumerate() {
            let r = resource(obj).map_err(|(field, reason)| ObjectsError::Invalid {
                path: source.to_string(),
                object: kube_objects::describe(obj, i),
                field,
                reason,
            })?;
            if let Some(first) = seen.insert((r.namespace.clone(), r.name.clone()), i) {
                return Err(ObjectsError::Invalid {
                    path: source.to_string(),
                    object: format!("{} (object #{i})", kube_objects::describe(obj, i)),
                    field: "metadata.name".to_string(),
                    reason: format!(
                        "object #{first} has the same namespace and name; a cluster holds one"
                    ),
                });
            }
            resources.push(r);
        }
        Ok(Self::index(resources))
    }

    /// Groups resources by namespace, each group oldest first, then by name.
    fn index(resources: Vec<ProxyConfigResource>) -> ProxyConfigResources {
        let mut by_namespace: HashMap<String, Vec<Arc<ProxyConfigResource>>> = HashMap::new();
        for r in resources {
            by_namespace
                .entry(r.namespace.clone())
                .or_default()
                .push(Arc::new(r));
        }
        let mut index = ProxyConfigResources::default();
        for (namespace, group) in by_namespace {
            index.set_namespace(namespace, group);
        }
        index
    }

    /// Replaces the resources of `namespace` with `group` (any order; none removes the namespace). A
    /// watch calls this for the namespaces that changed only.
    pub fn set_namespace(&mut self, namespace: String, mut group: Vec<Arc<ProxyConfigResource>>) {
        if group.is_empty() {
            self.by_namespace.remove(&namespace);
            return;
        }
        group.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        self.by_namespace.insert(namespace, group.into());
    }

    /// How many resources `namespace` has.
    pub fn count(&self, namespace: &str) -> usize {
        self.by_namespace.get(namespace).map_or(0, |g| g.len())
    }

    /// The namespaces whose pods can get another ProxyConfig than the mesh-wide one (mesh
    /// `defaultConfig` with the root namespace's namespace-wide resource): every namespace holding a
    /// resource, but the root namespace only when it holds a workload resource. Sorted.
    pub fn namespaces_with_own_config(&self, root_namespace: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .by_namespace
            .iter()
            .filter(|(ns, rs)| *ns != root_namespace || rs.iter().any(|r| r.selector.is_some()))
            .map(|(ns, _)| ns.clone())
            .collect();
        out.sort();
        out
    }

    /// The oldest namespace-wide resource of `namespace`.
    fn namespace_wide(&self, namespace: &str) -> Option<&ProxyConfigResource> {
        self.by_namespace
            .get(namespace)?
            .iter()
            .find(|r| r.selector.is_none())
            .map(|r| &**r)
    }

    /// The oldest resource of `namespace` whose non-empty `matchLabels` are all among `labels`.
    fn workload(
        &self,
        namespace: &str,
        labels: Option<&Map<String, Value>>,
    ) -> Option<&ProxyConfigResource> {
        self.by_namespace
            .get(namespace)?
            .iter()
            .find(|r| {
                r.selector.as_ref().is_some_and(|sel| {
                    !sel.is_empty()
                        && sel.iter().all(|(k, v)| {
                            labels.and_then(|l| l.field(k)).and_then(Value::as_str)
                                == Some(v.as_str())
                        })
                })
            })
            .map(|r| &**r)
    }

    /// The effective ProxyConfig of a pod in `namespace` with `labels` and the parsed
    /// `proxy.istio.io/config` overlay `annotation`, over `base` (built-in defaults ⊕ mesh
    /// `defaultConfig`), as Istio's `EffectiveProxyConfig` computes it.
    pub fn effective(
        &self,
        base: &Value,
        root_namespace: &str,
        namespace: &str,
        labels: Option<&Map<String, Value>>,
        annotation: Option<&Value>,
    ) -> Value {
        let mut pc = base.clone();
        let Some(acc) = pc.as_object_mut() else {
            return pc;
        };
        if !root_namespace.is_empty() {
            if let Some(r) = self.namespace_wide(root_namespace) {
                merge_with_precedence(acc, &r.overlay);
            }
        }
        if namespace != root_namespace {
            if let Some(r) = self.namespace_wide(namespace) {
                merge_with_precedence(acc, &r.overlay);
            }
        }
        if let Some(Value::Object(a)) = annotation {
            merge_with_precedence(acc, a);
        }
        if let Some(r) = self.workload(namespace, labels) {
            merge_with_precedence(acc, &r.overlay);
        }
        pc
    }
}

/// Applies one level onto the accumulated ProxyConfig as Istio's `mergeWithPrecedence` does: the level is
/// serialised to proto JSON first, so only fields that are set take part (a proto3 zero value cannot
/// override); a set field replaces the lower value whole (sub-messages too); `proxyMetadata` merges key
/// by key.
pub fn merge_with_precedence(acc: &mut Map<String, Value>, level: &Map<String, Value>) {
    for (k, v) in level {
        if !is_set(k, v) {
            continue;
        }
        if k == "proxyMetadata" {
            if let (Some(Value::Object(lower)), Value::Object(higher)) = (acc.field_mut(k), v) {
                for (mk, mv) in higher {
                    lower.insert(mk.clone(), mv.clone());
                }
                continue;
            }
        }
        acc.insert(k.clone(), v.clone());
    }
}

/// Whether proto3 JSON would print the field: wrappers and messages whenever present, scalars unless zero,
/// enums unless their first value, lists and maps unless empty.
fn is_set(field: &str, v: &Value) -> bool {
    const WRAPPERS: [&str; 2] = ["concurrency", "holdApplicationUntilProxyStarts"];
    const MAPS: [&str; 2] = ["proxyMetadata", "runtimeValues"];
    const ENUM_ZERO: [(&str, &str); 2] = [
        ("interceptionMode", "REDIRECT"),
        ("controlPlaneAuthPolicy", "NONE"),
    ];
    if v.is_null() {
        return false;
    }
    if WRAPPERS.contains(&field) {
        return true;
    }
    if ENUM_ZERO
        .iter()
        .any(|(f, zero)| *f == field && v.as_str() == Some(zero))
    {
        return false;
    }
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !(MAPS.contains(&field) && o.is_empty()),
        Value::Null => false,
    }
}

impl ProxyConfigResource {
    /// One object of a watch (`serve --kubeconfig`), checked as a file's object is. An object the webhook
    /// cannot use (the CRD keeps unknown fields, so the API server stores some) is an error to log and
    /// leave out while the others still apply, as Istio's `GetProxyConfigs` lists only what its config
    /// store converted.
    pub fn from_watched(obj: &Value, source: &str) -> Result<ProxyConfigResource, ObjectsError> {
        resource(obj).map_err(|(field, reason)| ObjectsError::Invalid {
            path: source.to_string(),
            object: kube_objects::describe(obj, 0),
            field,
            reason,
        })
    }
}

type FieldError = (String, String);

fn invalid(field: &str, reason: impl Into<String>) -> FieldError {
    (field.to_string(), reason.into())
}

fn string_map(v: &Value, field: &str) -> Result<BTreeMap<String, String>, FieldError> {
    match v {
        Value::Null => Ok(BTreeMap::new()),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                other => Err(invalid(
                    &format!("{field}.{k}"),
                    format!("value {other} must be a string"),
                )),
            })
            .collect(),
        other => Err(invalid(
            field,
            format!("must be a mapping of strings, got {other}"),
        )),
    }
}

fn resource(obj: &Value) -> Result<ProxyConfigResource, FieldError> {
    let (name, namespace, created) = metadata(obj)?;
    let empty = Map::new();
    let spec = spec_of(obj)?.unwrap_or(&empty);
    let selector = selector(spec)?;
    let mut overlay = Map::new();
    concurrency(spec, &mut overlay)?;
    environment_variables(spec, &mut overlay)?;
    image(spec, &mut overlay)?;
    Ok(ProxyConfigResource {
        name: name.to_string(),
        namespace: namespace.to_string(),
        created,
        selector,
        overlay,
    })
}

/// The object's type and its name, namespace and creation time (seconds, 0 when unset).
fn metadata(obj: &Value) -> Result<(&str, &str, i64), FieldError> {
    let s = |p: &[&str]| fields::path(obj, p).and_then(Value::as_str);
    // The ProxyConfig CRD serves one version (istio/api `networking/v1beta1/proxy_config.proto`).
    if s(&["apiVersion"]) != Some(API_VERSION) {
        return Err(invalid(
            "apiVersion",
            format!(
                "{} is not {API_VERSION}",
                fields::path(obj, ["apiVersion"]).unwrap_or(&Value::Null)
            ),
        ));
    }
    if s(&["kind"]) != Some("ProxyConfig") {
        return Err(invalid(
            "kind",
            format!(
                "{} is not ProxyConfig",
                fields::path(obj, ["kind"]).unwrap_or(&Value::Null)
            ),
        ));
    }
    let name = s(&["metadata", "name"])
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("metadata.name", "is required"))?;
    let namespace = s(&["metadata", "namespace"])
        .filter(|n| !n.is_empty())
        .ok_or_else(|| invalid("metadata.namespace", "is required (list with -A)"))?;
    let created = match fields::path(obj, ["metadata", "creationTimestamp"]) {
        None | Some(Value::Null) => 0,
        Some(Value::String(t)) => kube_objects::parse_timestamp(t).ok_or_else(|| {
            invalid(
                "metadata.creationTimestamp",
                format!("{t:?} is not an RFC 3339 time"),
            )
        })?,
        Some(other) => {
            return Err(invalid(
                "metadata.creationTimestamp",
                format!("{other} is not an RFC 3339 time"),
            ))
        }
    };
    Ok((name, namespace, created))
}

/// The object's `spec` (`None` when absent), holding only a ProxyConfig's fields.
fn spec_of(obj: &Value) -> Result<Option<&Map<String, Value>>, FieldError> {
    let spec = match obj.field("spec") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(other) => return Err(invalid("spec", format!("must be a mapping, got {other}"))),
    };
    if let Some(k) = spec.keys().find(|k| !SPEC_FIELDS.contains(&k.as_str())) {
        return Err(invalid(
            &format!("spec.{k}"),
            format!(
                "unknown field (a ProxyConfig has {})",
                SPEC_FIELDS.join(", ")
            ),
        ));
    }
    Ok(Some(spec))
}

/// `spec.selector`: the workload labels it matches (`None`: the whole namespace).
fn selector(spec: &Map<String, Value>) -> Result<Option<BTreeMap<String, String>>, FieldError> {
    Ok(match spec.field("selector") {
        None | Some(Value::Null) => None,
        Some(Value::Object(sel)) => {
            if let Some(k) = sel.keys().find(|k| *k != "matchLabels") {
                return Err(invalid(
                    &format!("spec.selector.{k}"),
                    "unknown field (a workload selector has matchLabels only)",
                ));
            }
            Some(string_map(
                sel.field("matchLabels").unwrap_or(&Value::Null),
                "spec.selector.matchLabels",
            )?)
        }
        Some(other) => {
            return Err(invalid(
                "spec.selector",
                format!("must be a mapping, got {other}"),
            ))
        }
    })
}

/// `spec.concurrency`, into the overlay.
fn concurrency(
    spec: &Map<String, Value>,
    overlay: &mut Map<String, Value>,
) -> Result<(), FieldError> {
    match spec.field("concurrency") {
        None | Some(Value::Null) => {}
        Some(v) => match v.as_i64() {
            Some(c) if (0..=i64::from(i32::MAX)).contains(&c) => {
                overlay.insert("concurrency".to_string(), Value::from(c));
            }
            _ => {
                return Err(invalid(
                    "spec.concurrency",
                    format!("{v} is not an integer in 0..{}", i32::MAX),
                ))
            }
        },
    }
    Ok(())
}

/// `spec.environmentVariables`, into the overlay's `proxyMetadata`.
fn environment_variables(
    spec: &Map<String, Value>,
    overlay: &mut Map<String, Value>,
) -> Result<(), FieldError> {
    if let Some(env) = spec.field("environmentVariables").filter(|v| !v.is_null()) {
        let env = string_map(env, "spec.environmentVariables")?;
        if let Some(k) = env
            .keys()
            .find(|k| !sidecar_core::validate::is_env_var_name(k))
        {
            return Err(invalid(
                "spec.environmentVariables",
                format!(
                    "{:?} is not a valid environment variable name (not empty, printable ASCII, \
                     no '=')",
                    k
                ),
            ));
        }
        if let Some((k, v)) = env.iter().find(|(_, v)| v.len() > MAX_ENV_VALUE) {
            return Err(invalid(
                &format!("spec.environmentVariables.{k}"),
                format!(
                    "value is {} characters, at most {MAX_ENV_VALUE} allowed",
                    v.len()
                ),
            ));
        }
        let env: Map<String, Value> = env
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        overlay.insert("proxyMetadata".to_string(), Value::Object(env));
    }
    Ok(())
}

/// `spec.image`, into the overlay.
fn image(spec: &Map<String, Value>, overlay: &mut Map<String, Value>) -> Result<(), FieldError> {
    match spec.field("image") {
        None | Some(Value::Null) => {}
        Some(Value::Object(img)) => {
            if let Some(k) = img.keys().find(|k| *k != "imageType") {
                return Err(invalid(
                    &format!("spec.image.{k}"),
                    "unknown field (an image has imageType only)",
                ));
            }
            match img.field("imageType") {
                None | Some(Value::Null) | Some(Value::String(_)) => {}
                Some(other) => {
                    return Err(invalid(
                        "spec.image.imageType",
                        format!("{other} is not a string"),
                    ))
                }
            }
            // Proto JSON drops an empty imageType: the image is then set but empty, as in Istio.
            let img: Map<String, Value> = img
                .iter()
                .filter(|(_, v)| v.as_str().is_some_and(|t| !t.is_empty()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            overlay.insert("image".to_string(), Value::Object(img));
        }
        Some(other) => {
            return Err(invalid(
                "spec.image",
                format!("must be a mapping, got {other}"),
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn load(text: &str) -> Result<ProxyConfigResources, ObjectsError> {
        ProxyConfigResources::from_objects(kube_objects::parse(text, "pc.yaml").unwrap(), "pc.yaml")
    }

    #[test]
    fn bad_resources_name_the_object_and_field() {
        let head = "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata: {name: x, namespace: ns}\n";
        for (spec, field) in [
            ("spec: {concurrency: -1}", "spec.concurrency"),
            ("spec: {concurrency: two}", "spec.concurrency"),
            (
                "spec: {environmentVariables: {A: 1}}",
                "spec.environmentVariables.A",
            ),
            ("spec: {image: {imageType: 3}}", "spec.image.imageType"),
            ("spec: {image: {hub: x}}", "spec.image.hub"),
            (
                "spec: {selector: {matchExpressions: []}}",
                "spec.selector.matchExpressions",
            ),
            ("spec: {interceptionMode: TPROXY}", "spec.interceptionMode"),
        ] {
            let e = load(&format!("{head}{spec}\n")).unwrap_err().to_string();
            assert!(
                e.starts_with("pc.yaml: ProxyConfig ns/x: field ") && e.contains(field),
                "{spec}: {e}"
            );
        }
        let e = load("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n").unwrap_err();
        assert!(
            e.to_string().contains("ConfigMap c: field apiVersion"),
            "{e}"
        );
        let e = load(
            "apiVersion: networking.istio.io/v1beta1\nkind: ProxyConfig\nmetadata: {name: x}\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("metadata.namespace"), "{e}");
        for name in ["A\\tB", "", "A\\nB", "A=B"] {
            let e = load(&format!(
                "{head}spec: {{environmentVariables: {{\"{name}\": v}}}}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.contains("field spec.environmentVariables: ")
                    && e.contains("not a valid environment variable name"),
                "{name:?}: {e}"
            );
        }
        for api in [
            "networking.istio.io/v9",
            "networking.istio.io/v1",
            "v1beta1",
        ] {
            let e = load(&head.replace("networking.istio.io/v1beta1", api))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("field apiVersion: ") && e.contains(api),
                "{api}: {e}"
            );
        }
        let e = load(&format!(
            "{head}spec: {{concurrency: 1}}\n---\n{head}spec: {{concurrency: 2}}\n"
        ))
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "pc.yaml: ProxyConfig ns/x (object #1): field metadata.name: object #0 has the same \
             namespace and name; a cluster holds one"
        );
        // The same name in two namespaces is two resources.
        load(&format!(
            "{head}---\n{}",
            head.replace("namespace: ns", "namespace: other")
        ))
        .unwrap();
        let long = "x".repeat(2049);
        let e = load(&format!(
            "{head}spec: {{environmentVariables: {{A: {long}}}}}\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("2049 characters"), "{e}");
    }

    #[test]
    fn zero_values_do_not_override_but_wrappers_and_messages_do() {
        let mut acc = json!({"interceptionMode": "TPROXY", "statusPort": 15020,
            "tracing": {"zipkin": {"address": "x"}}, "proxyMetadata": {"A": "1"},
            "holdApplicationUntilProxyStarts": true, "concurrency": 2})
        .as_object()
        .unwrap()
        .clone();
        let level = json!({"interceptionMode": "REDIRECT", "statusPort": 0, "tracing": {"sampling": 10},
            "proxyMetadata": {"B": "2"}, "holdApplicationUntilProxyStarts": false, "concurrency": 0,
            "discoveryAddress": null});
        merge_with_precedence(&mut acc, level.as_object().unwrap());
        assert_eq!(
            Value::Object(acc),
            json!({"interceptionMode": "TPROXY", "statusPort": 15020, "tracing": {"sampling": 10},
                "proxyMetadata": {"A": "1", "B": "2"}, "holdApplicationUntilProxyStarts": false,
                "concurrency": 0})
        );
    }
}
