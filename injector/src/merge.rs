//! Strategic merge with the Pod schema's rules (as Istio's `RunTemplate` in `inject.go` merges the
//! rendered template) and re-applying user-set container fields (`reapplyOverwrittenContainers` and
//! `adjustInitContainerUser` in Istio's `webhook.go`).
//!
//! The merge follows Kubernetes' `strategicpatch` package as the injector uses it (parallel-list
//! directives on, unmatched nulls ignored): maps merge recursively and a `null` deletes; lists with a
//! merge key (containers, env, ports, volumeMounts, volumes, …) merge item by item and are then ordered
//! by apimachinery's `normalizeElementOrder` (patch items in patch order interleaved with server-only
//! items; see [`merge_keyed_list`]); `finalizers` is a set union; every other list is replaced;
//! `$patch: replace|delete`, `$retainKeys`, `$deleteFromPrimitiveList/…` and `$setElementOrder/…` are
//! honoured.

use serde_json::{Map, Value};

use crate::fields::{ensure_map, Fields};
use crate::gotypes;
use crate::overrides;
use crate::pod::{
    annotation, containers, find_named, find_named_mut, name_of, proxy_container,
    proxy_container_mut, set_annotation, INIT_CONTAINER, INTERCEPTION_MODE_ANNOTATION,
    OVERRIDES_ANNOTATION, STATUS_ANNOTATION, VALIDATION_CONTAINER,
};

/// Why a merge failed.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// An item of a list merged by key lacks the key (e.g. an `env` entry without `name`).
    #[error("{field}: item {item} does not contain declared merge key: {key}")]
    MissingMergeKey {
        field: String,
        key: &'static str,
        item: String,
    },
    /// An item of a keyed list is not an object.
    #[error("{field}: item {item} is not an object")]
    NotAnObject { field: String, item: String },
    /// A `$patch` directive with an unknown value (or `merge` in a list, which Kubernetes rejects too).
    #[error("{field}: invalid $patch directive {value}")]
    BadDirective { field: String, value: String },
    /// A `$retainKeys` directive that is not a list, or a patch key missing from it.
    #[error("{field}: invalid $retainKeys directive")]
    BadRetainKeys { field: String },
    /// A `$setElementOrder/…` directive that is not a list, or that does not name the patch's items in
    /// their order.
    #[error("{field}: invalid $setElementOrder directive")]
    BadElementOrder { field: String },
    /// The `proxy.istio.io/overrides` annotation is not the JSON Istio writes. (Messages carry no
    /// prefix: the engine adds Istio's `strategic merge:` / `failed to re apply container:`.)
    #[error("{0}")]
    InvalidOverrides(#[from] overrides::InvalidOverrides),
}

/// Which part of the Pod schema a value is, for merge keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Pod,
    Meta,
    Spec,
    Container,
    Volume,
    Other,
}

/// How a list field merges.
#[derive(Debug, Clone, Copy)]
enum ListStrategy {
    Replace,
    Keyed(&'static str, Ty),
    Scalars,
}

fn child_ty(ty: Ty, key: &str) -> Ty {
    match (ty, key) {
        (Ty::Pod, "metadata") => Ty::Meta,
        (Ty::Pod, "spec") => Ty::Spec,
        _ => Ty::Other,
    }
}

/// The patch strategy of list field `key` of a `ty` (k8s.io/api struct tags).
fn list_strategy(ty: Ty, key: &str) -> ListStrategy {
    use ListStrategy::*;
    match (ty, key) {
        (Ty::Meta, "finalizers") => Scalars,
        (Ty::Meta, "ownerReferences") => Keyed("uid", Ty::Other),
        (Ty::Spec, "containers" | "initContainers" | "ephemeralContainers") => {
            Keyed("name", Ty::Container)
        }
        (Ty::Spec, "volumes") => Keyed("name", Ty::Volume),
        (Ty::Spec, "imagePullSecrets" | "schedulingGates" | "resourceClaims") => {
            Keyed("name", Ty::Other)
        }
        (Ty::Spec, "hostAliases") => Keyed("ip", Ty::Other),
        (Ty::Spec, "topologySpreadConstraints") => Keyed("topologyKey", Ty::Other),
        (Ty::Container, "env") => Keyed("name", Ty::Other),
        (Ty::Container, "ports") => Keyed("containerPort", Ty::Other),
        (Ty::Container, "volumeMounts") => Keyed("mountPath", Ty::Other),
        (Ty::Container, "volumeDevices") => Keyed("devicePath", Ty::Other),
        _ => Replace,
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Strategic-merges `patch` (a partial Pod) onto `original` (a Pod), Kubernetes' rules and list order.
#[cfg(test)]
pub fn strategic_merge_pod(original: &Value, patch: &Value) -> Result<Value, MergeError> {
    let mut out = original.clone();
    strategic_merge_pod_owned(&mut out, patch.clone())?;
    Ok(out)
}

/// `strategic_merge_pod` in place (no copy of the pod). On error `pod` may be partly merged: discard it.
#[cfg(test)]
pub fn strategic_merge_pod_into(pod: &mut Value, patch: &Value) -> Result<(), MergeError> {
    strategic_merge_pod_owned(pod, patch.clone())
}

/// The strategic merge consuming the patch: its parts are moved into the pod, not copied (the
/// cheapest form for the last merge of a rendered template). On error `pod` may be partly merged.
pub fn strategic_merge_pod_owned(pod: &mut Value, patch: Value) -> Result<(), MergeError> {
    merge_value(pod, patch, Ty::Pod, &ROOT)
}

/// Where in the pod a merge is, for error messages; built on the stack, printed only on error.
#[derive(Clone, Copy)]
struct FieldPath<'a> {
    parent: Option<&'a FieldPath<'a>>,
    key: &'a str,
}

impl std::fmt::Display for FieldPath<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self.parent {
            if p.parent.is_some() || !p.key.is_empty() {
                write!(f, "{p}.")?;
            }
        }
        f.write_str(self.key)
    }
}

const ROOT: FieldPath<'static> = FieldPath {
    parent: None,
    key: "",
};

fn merge_value(
    orig: &mut Value,
    patch: Value,
    ty: Ty,
    field: &FieldPath<'_>,
) -> Result<(), MergeError> {
    match patch {
        Value::Object(pm) => {
            if !orig.is_object() {
                *orig = Value::Object(Map::new());
            }
            if let Value::Object(om) = orig {
                merge_map(om, pm, ty, field)?;
            }
            Ok(())
        }
        other => {
            *orig = other;
            Ok(())
        }
    }
}

fn merge_map(
    orig: &mut Map<String, Value>,
    mut patch: Map<String, Value>,
    ty: Ty,
    field: &FieldPath<'_>,
) -> Result<(), MergeError> {
    if let Some(d) = patch.field(DIRECTIVE) {
        match d.as_str() {
            Some("replace") => {
                patch.shift_remove(DIRECTIVE);
                *orig = patch;
                return Ok(());
            }
            Some("delete") => {
                orig.clear();
                return Ok(());
            }
            _ => {
                return Err(MergeError::BadDirective {
                    field: field.to_string(),
                    value: d.to_string(),
                })
            }
        }
    }
    if let Some(retain) = patch.shift_remove(RETAIN_KEYS) {
        let keys = retain.as_array().ok_or_else(|| MergeError::BadRetainKeys {
            field: field.to_string(),
        })?;
        let listed = |k: &str| keys.iter().any(|r| r.as_str() == Some(k));
        let patch_ok = patch
            .iter()
            .all(|(k, v)| v.is_null() || k.starts_with('$') || listed(k));
        if !patch_ok {
            return Err(MergeError::BadRetainKeys {
                field: field.to_string(),
            });
        }
        orig.retain(|k, _| listed(k));
    }
    // `$setElementOrder/<list>`: that list is merged and ordered here (and taken out of the patch).
    if patch.keys().any(|k| k.starts_with(SET_ELEMENT_ORDER)) {
        let directives: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for d in directives {
            let order = patch.shift_remove(&d).unwrap_or(Value::Null);
            let list_key = &d[SET_ELEMENT_ORDER.len()..];
            let list = patch.shift_remove(list_key);
            let sub_field = FieldPath {
                parent: Some(field),
                key: list_key,
            };
            apply_element_order(orig, list, list_key, &order, ty, &sub_field)?;
        }
    }
    for (k, pv) in patch {
        if let Some(target) = k.strip_prefix(DELETE_FROM_PRIMITIVE) {
            if let (Some(Value::Array(items)), Some(remove)) =
                (orig.field_mut(target), pv.as_array())
            {
                items.retain(|i| !remove.contains(i));
            }
            continue;
        }
        if pv.is_null() {
            // `shift_remove` keeps the order of the remaining keys (serde_json's preserve_order map)
            orig.shift_remove(&k);
            continue;
        }
        let sub_field = FieldPath {
            parent: Some(field),
            key: &k,
        };
        match (orig.field_mut(&k), pv) {
            (Some(ov @ Value::Object(_)), pv @ Value::Object(_)) => {
                merge_value(ov, pv, child_ty(ty, &k), &sub_field)?;
            }
            (Some(Value::Array(oa)), Value::Array(pa)) => {
                merge_list(oa, pa, list_strategy(ty, &k), &sub_field)?;
            }
            (Some(ov), pv) if !ov.is_null() && !pv.is_object() && !pv.is_array() => {
                *ov = pv;
            }
            (_, pv) => {
                // Absent in the original (or of another type): the patch value, with its directives
                // applied.
                let fresh = match pv {
                    // Nothing to apply (the usual case: a rendered template has no directives): moved
                    // in whole, instead of being rebuilt key by key.
                    pv @ Value::Object(_)
                        if shortcuts() && merges_to_itself(&pv, child_ty(ty, &k)) =>
                    {
                        pv
                    }
                    pv @ Value::Object(_) => {
                        let mut fresh = Value::Object(Map::new());
                        merge_value(&mut fresh, pv, child_ty(ty, &k), &sub_field)?;
                        fresh
                    }
                    Value::Array(pa) => {
                        let mut fa = Vec::new();
                        merge_list(&mut fa, pa, list_strategy(ty, &k), &sub_field)?;
                        Value::Array(fa)
                    }
                    scalar => scalar,
                };
                orig.insert(k, fresh);
            }
        }
    }
    Ok(())
}

/// `mergePatchIntoOriginal` for one `$setElementOrder/<list_key>` directive: the list is merged as usual,
/// then ordered with the directive's order for the items it names (precedence: directive, then the
/// original order for items only the original has).
fn apply_element_order(
    orig: &mut Map<String, Value>,
    patch_list: Option<Value>,
    list_key: &str,
    order: &Value,
    ty: Ty,
    field: &FieldPath<'_>,
) -> Result<(), MergeError> {
    let bad = || MergeError::BadElementOrder {
        field: field.to_string(),
    };
    let order = order.as_array().ok_or_else(bad)?;
    let strategy = list_strategy(ty, list_key);
    let key = match strategy {
        ListStrategy::Keyed(key, _) => Some(key),
        _ => None,
    };
    // what identifies an item: its merge key, or the whole value
    let ident = |v: &'_ Value| -> Option<Value> {
        match key {
            Some(k) => v.field(k).cloned(),
            None => Some(v.clone()),
        }
    };
    let order_ids: Vec<Value> = order.iter().filter_map(ident).collect();
    let order_refs: Vec<&Value> = order_ids.iter().collect();
    let patch_list = match patch_list {
        None => None,
        Some(Value::Array(pl)) => Some(pl),
        Some(_) => return Err(bad()),
    };
    // the patch's items must appear in the directive, in the same relative order
    if let Some(pl) = &patch_list {
        let mut last = None;
        for item in pl.iter().filter(|i| i.field(DIRECTIVE).is_none()) {
            let pos = ident(item)
                .and_then(|id| position(&order_refs, &id))
                .ok_or_else(bad)?;
            if last.is_some_and(|l| pos < l) {
                return Err(bad());
            }
            last = Some(pos);
        }
    }
    let original_list = match orig.shift_remove(list_key) {
        Some(Value::Array(ol)) => Some(ol),
        _ => None,
    };
    let server_ids: Vec<Value> = original_list
        .as_ref()
        .map(|ol| ol.iter().filter_map(ident).collect())
        .unwrap_or_default();
    let server_refs: Vec<&Value> = server_ids.iter().collect();
    let merged: Vec<Value> = match (original_list, patch_list) {
        (None, None) => return Ok(()),
        (Some(ol), None) => ol,
        (None, Some(pl)) => pl
            .into_iter()
            .filter(|i| i.field(DIRECTIVE).is_none())
            .collect(),
        (Some(mut ol), Some(pl)) => {
            merge_list(&mut ol, pl, strategy, field)?;
            ol
        }
    };
    let mut patch_items = Vec::new();
    let mut server_only = Vec::new();
    for item in merged {
        let id = ident(&item);
        match id.as_ref().and_then(|id| position(&order_refs, id)) {
            Some(i) => patch_items.push((i, item)),
            None => {
                let si = id
                    .as_ref()
                    .and_then(|id| position(&server_refs, id))
                    .unwrap_or(usize::MAX);
                server_only.push((si, item));
            }
        }
    }
    let sorted = interleave(server_only, patch_items, |item| {
        ident(item).and_then(|id| position(&server_refs, &id))
    });
    orig.insert(list_key.to_string(), Value::Array(sorted));
    Ok(())
}

/// Whether the shortcuts for values that merge to themselves are taken (always, outside tests: the
/// tests turn them off to compare with the full merge).
#[cfg(not(test))]
fn shortcuts() -> bool {
    true
}

#[cfg(test)]
thread_local! {
    static NO_SHORTCUTS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
fn shortcuts() -> bool {
    !NO_SHORTCUTS.with(std::cell::Cell::get)
}

/// Whether merging `v` (a `ty`) into nothing gives `v` itself: no `$` keys (directives), no nulls
/// (deletions) in its objects, and lists that [`list_merges_to_itself`].
fn merges_to_itself(v: &Value, ty: Ty) -> bool {
    match v {
        Value::Object(m) => m.iter().all(|(k, x)| {
            !k.starts_with('$')
                && match x {
                    Value::Null => false,
                    Value::Object(_) => merges_to_itself(x, child_ty(ty, k)),
                    Value::Array(items) => list_merges_to_itself(items, list_strategy(ty, k)),
                    _ => true,
                }
        }),
        _ => true,
    }
}

/// Whether merging `items` into an empty list gives `items`: always for replaced lists; for keyed
/// lists when every item is an object with its merge key, no `$patch`, and a key no earlier item has
/// (new items are appended whole, in patch order); for scalar lists only when empty (a union drops
/// duplicates).
fn list_merges_to_itself(items: &[Value], strategy: ListStrategy) -> bool {
    match strategy {
        ListStrategy::Replace => true,
        ListStrategy::Scalars => items.is_empty(),
        ListStrategy::Keyed(key, _) => items.iter().enumerate().all(|(i, item)| {
            item.as_object().is_some_and(|m| {
                !m.has_field(DIRECTIVE)
                    && m.field(key).is_some_and(|kv| {
                        !items[..i]
                            .iter()
                            .any(|p| p.field(key).is_some_and(|pk| key_eq(pk, kv)))
                    })
            })
        }),
    }
}

fn merge_list(
    orig: &mut Vec<Value>,
    patch: Vec<Value>,
    strategy: ListStrategy,
    field: &FieldPath<'_>,
) -> Result<(), MergeError> {
    match strategy {
        ListStrategy::Replace => {
            *orig = patch;
            Ok(())
        }
        ListStrategy::Scalars => {
            merge_scalar_list(orig, patch);
            Ok(())
        }
        ListStrategy::Keyed(key, ty) => merge_keyed_list(orig, patch, key, ty, field),
    }
}

/// Merge-key values compare like Go's `interface{}` equality after JSON decoding: numbers by value.
fn key_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn position(keys: &[&Value], k: &Value) -> Option<usize> {
    keys.iter().position(|x| key_eq(x, k))
}

/// `mergeSlice` for lists with a merge key, then `normalizeElementOrder`:
/// 1. `$patch: delete` items remove matching originals; a `$patch: replace` item makes the rest of the
///    patch the whole list;
/// 2. each patch item merges into the first original item with the same key, or is appended whole;
/// 3. the result is split into patch items (key in the patch), sorted by patch position, and
///    server-only items, sorted by original position, and interleaved: the server-only head goes first
///    only when both heads are in the original list and its original index is smaller.
fn merge_keyed_list(
    orig: &mut Vec<Value>,
    patch: Vec<Value>,
    key: &'static str,
    ty: Ty,
    field: &FieldPath<'_>,
) -> Result<(), MergeError> {
    if orig.is_empty() {
        if shortcuts() && list_merges_to_itself(&patch, ListStrategy::Keyed(key, ty)) {
            *orig = patch;
            return Ok(());
        }
        if patch.is_empty() {
            return Ok(());
        }
    }
    let missing_key = |item: &Value| MergeError::MissingMergeKey {
        field: field.to_string(),
        key,
        item: item.to_string(),
    };
    let mut plain: Vec<Map<String, Value>> = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let m = match item {
            Value::Object(m) => m,
            other => {
                return Err(MergeError::NotAnObject {
                    field: field.to_string(),
                    item: other.to_string(),
                })
            }
        };
        match m.field(DIRECTIVE) {
            None => plain.push(m),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let kv = m
                        .field(key)
                        .ok_or_else(|| missing_key(&Value::Object(m.clone())))?;
                    orig.retain(|o| !o.field(key).is_some_and(|ok| key_eq(ok, kv)));
                }
                Some("replace") => replace = true,
                _ => {
                    return Err(MergeError::BadDirective {
                        field: field.to_string(),
                        value: d.to_string(),
                    })
                }
            },
        }
    }
    if replace {
        *orig = plain.into_iter().map(Value::Object).collect();
        return Ok(());
    }
    if let Some(m) = plain.iter().find(|m| !m.has_field(key)) {
        return Err(missing_key(&Value::Object(m.clone())));
    }
    if let Some(o) = orig.iter().find(|o| o.field(key).is_none()) {
        return Err(missing_key(o));
    }
    let server_keys: Vec<Value> = orig.iter().filter_map(|o| o.field(key).cloned()).collect();
    let server_refs: Vec<&Value> = server_keys.iter().collect();
    let patch_keys: Vec<Value> = plain.iter().filter_map(|m| m.field(key).cloned()).collect();
    let patch_refs: Vec<&Value> = patch_keys.iter().collect();

    // merge by key; `merged` starts as the original items, new patch items are appended
    let mut merged: Vec<Value> = std::mem::take(orig);
    for (m, kv) in plain.into_iter().zip(patch_keys.iter()) {
        match merged
            .iter()
            .position(|o| o.field(key).is_some_and(|ok| key_eq(ok, kv)))
        {
            Some(i) => {
                if let Value::Object(om) = &mut merged[i] {
                    merge_map(om, m, ty, field)?;
                }
            }
            None => merged.push(Value::Object(m)),
        }
    }

    // partition and order
    let mut patch_items: Vec<(usize, Value)> = Vec::new();
    let mut server_only: Vec<(usize, Value)> = Vec::new();
    for item in merged {
        let pi = item.field(key).and_then(|kv| position(&patch_refs, kv));
        match pi {
            Some(pi) => patch_items.push((pi, item)),
            None => {
                let si = item
                    .field(key)
                    .and_then(|kv| position(&server_refs, kv))
                    .unwrap_or(usize::MAX);
                server_only.push((si, item));
            }
        }
    }
    *orig = interleave(server_only, patch_items, |item| {
        item.field(key).and_then(|kv| position(&server_refs, kv))
    });
    Ok(())
}

/// `normalizeElementOrder`: `server_only` sorted by original position, `patch_items` by patch position,
/// then merged: the server-only head goes first only when both heads have an original position
/// (`server_index`) and its position is smaller.
fn interleave(
    mut server_only: Vec<(usize, Value)>,
    mut patch_items: Vec<(usize, Value)>,
    server_index: impl Fn(&Value) -> Option<usize>,
) -> Vec<Value> {
    patch_items.sort_by_key(|(pi, _)| *pi);
    server_only.sort_by_key(|(si, _)| *si);
    let mut out = Vec::with_capacity(patch_items.len() + server_only.len());
    let mut left = server_only.into_iter().map(|(_, v)| v).peekable();
    let mut right = patch_items.into_iter().map(|(_, v)| v).peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => match (server_index(l), server_index(r)) {
                (Some(li), Some(ri)) => li < ri,
                _ => false,
            },
        };
        let next = if take_left { left.next() } else { right.next() };
        if let Some(v) = next {
            out.push(v);
        }
    }
    out
}

/// `finalizers`: union without duplicates, ordered like keyed lists (by value).
fn merge_scalar_list(orig: &mut Vec<Value>, patch: Vec<Value>) {
    let server: Vec<Value> = orig.clone();
    let server_refs: Vec<&Value> = server.iter().collect();
    let patch_refs: Vec<&Value> = patch.iter().collect();
    let mut merged: Vec<Value> = Vec::with_capacity(orig.len() + patch.len());
    for v in orig.iter().chain(patch.iter()) {
        if !merged.iter().any(|m| key_eq(m, v)) {
            merged.push(v.clone());
        }
    }
    let mut p = Vec::new();
    let mut s = Vec::new();
    for v in merged {
        match position(&patch_refs, &v) {
            Some(i) => p.push((i, v)),
            None => s.push((position(&server_refs, &v).unwrap_or(usize::MAX), v)),
        }
    }
    *orig = interleave(s, p, |v| position(&server_refs, v));
}

// ---------------------------------------------------------------------------------------------------
// reapplyOverwrittenContainers / adjustInitContainerUser

/// `reapplyOverwrittenContainers` + `adjustInitContainerUser`: fields the user set on a container the
/// template also defines win. `original` is the request pod, `template_pod` the merged template output.
pub fn reapply_overwritten_containers(
    final_pod: &mut Value,
    original: &Value,
    template_pod: &Value,
    proxy_config: &Value,
) -> Result<(), MergeError> {
    let (saved_containers, saved_inits) = match annotation(original, OVERRIDES_ANNOTATION) {
        Some(text) => overrides::parse(text)?,
        None => (Vec::new(), Vec::new()),
    };
    let status = annotation(original, STATUS_ANNOTATION);
    let already_injected = status.is_some();
    let skip = status.and_then(crate::status::parse).unwrap_or_default();

    let orig_containers = containers(original, "containers");
    let orig_inits = containers(original, "initContainers");
    let mut recorded_containers: Vec<Value> = Vec::new();
    let mut recorded_inits: Vec<Value> = Vec::new();

    for c in containers(template_pod, "containers") {
        let name = name_of(c);
        if skip.containers.iter().any(|n| n == name) {
            continue;
        }
        let Some(found) =
            find_named(&saved_containers, name).or_else(|| find_named(orig_containers, name))
        else {
            continue;
        };
        let overlay = user_overlay(found);
        let patch = serde_json::json!({"spec": {"containers": [overlay.clone()]}});
        strategic_merge_pod_owned(final_pod, patch)?;
        recorded_containers.push(overlay);
    }
    for c in containers(template_pod, "initContainers") {
        let name = name_of(c);
        if skip.init_containers.iter().any(|n| n == name) {
            continue;
        }
        let Some(found) = find_named(&saved_inits, name)
            .or_else(|| find_named(orig_containers, name))
            .or_else(|| find_named(orig_inits, name))
        else {
            continue;
        };
        let overlay = user_overlay(found);
        let patch = serde_json::json!({"spec": {"initContainers": [overlay.clone()]}});
        strategic_merge_pod_owned(final_pod, patch)?;
        recorded_inits.push(overlay);
    }

    if !already_injected {
        if let Some(text) = overrides::build(recorded_containers, recorded_inits) {
            set_annotation(final_pod, OVERRIDES_ANNOTATION, text);
        }
    }
    adjust_init_container_user(final_pod, original, proxy_config);
    Ok(())
}

/// The user's container as Istio re-applies it: `image: auto` cleared, printed as a typed Go container.
fn user_overlay(c: &Value) -> Value {
    if c.field("image").and_then(Value::as_str) == Some("auto") {
        let mut copy = c.clone();
        if let Some(m) = copy.as_object_mut() {
            m.insert("image".to_string(), Value::String(String::new()));
        }
        gotypes::go_container(&copy)
    } else {
        gotypes::go_container(c)
    }
}

fn sc_int(c: &Value, k: &str) -> Option<i64> {
    c.field("securityContext")?.field(k)?.as_i64()
}

/// `adjustInitContainerUser`: a user `istio-proxy` `runAsUser`/`runAsGroup` carries over to the init
/// container (`-u` argument, the validation container's identity) and, with TPROXY, makes the proxy root.
fn adjust_init_container_user(final_pod: &mut Value, original: &Value, proxy_config: &Value) {
    let Some(user) = proxy_container(original) else {
        return;
    };
    let run_as_user = sc_int(user, "runAsUser");
    let run_as_group = sc_int(user, "runAsGroup");
    if run_as_user.is_none() && run_as_group.is_none() {
        return;
    }
    let init_name = if find_named(containers(final_pod, "initContainers"), INIT_CONTAINER).is_some()
    {
        INIT_CONTAINER
    } else if find_named(
        containers(final_pod, "initContainers"),
        VALIDATION_CONTAINER,
    )
    .is_some()
    {
        VALIDATION_CONTAINER
    } else {
        return;
    };
    let tproxy = proxy_config
        .field("interceptionMode")
        .and_then(Value::as_str)
        == Some("TPROXY")
        || annotation(final_pod, INTERCEPTION_MODE_ANNOTATION) == Some("TPROXY");

    if tproxy && run_as_user.is_some() {
        if let Some(sc) =
            proxy_container_mut(final_pod).and_then(|p| ensure_map(p, &["securityContext"]))
        {
            sc.insert("runAsUser".to_string(), Value::from(0));
        }
    }
    let Some(init) = find_named_mut(final_pod, "initContainers", init_name) else {
        return;
    };
    if !tproxy && init_name == VALIDATION_CONTAINER {
        if let Some(sc) = ensure_map(init, &["securityContext"]) {
            if let Some(u) = run_as_user {
                sc.insert("runAsUser".to_string(), Value::from(u));
            }
            if let Some(g) = run_as_group {
                sc.insert("runAsGroup".to_string(), Value::from(g));
            }
        }
    }
    if let Some(u) = run_as_user.filter(|u| *u != 0) {
        if let Some(args) = init.field_mut("args").and_then(Value::as_array_mut) {
            if let Some(i) = args.iter().position(|a| a.as_str() == Some("-u")) {
                if let Some(slot) = args.get_mut(i + 1) {
                    *slot = Value::String(u.to_string());
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
