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

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::overrides;
use crate::pod::{
    annotation, containers, find_named, find_named_mut, name_of, proxy_container,
    proxy_container_mut, set_annotation, INIT_CONTAINER, INTERCEPTION_MODE_ANNOTATION,
    OVERRIDES_ANNOTATION, STATUS_ANNOTATION, VALIDATION_CONTAINER,
};
use sidecar_core::fields::{ensure_map, Fields};
use sidecar_core::gotypes;

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
    let order_index = KeyIndex::of(&order_ids, order_ids.len());
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
                .and_then(|id| order_index.position(&id))
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
    let server_index = KeyIndex::of(&server_ids, server_ids.len());
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
        match id.as_ref().and_then(|id| order_index.position(id)) {
            Some(i) => patch_items.push((i, item)),
            None => {
                let si = id
                    .as_ref()
                    .and_then(|id| server_index.position(id))
                    .unwrap_or(usize::MAX);
                server_only.push((si, item));
            }
        }
    }
    let sorted = interleave(server_only, patch_items, |item| {
        ident(item).and_then(|id| server_index.position(&id))
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
        ListStrategy::Keyed(key, _) => {
            let mut seen = KeyIndex::with_capacity(items.len());
            items.iter().enumerate().all(|(i, item)| {
                item.as_object().is_some_and(|m| {
                    !m.has_field(DIRECTIVE)
                        && m.field(key).is_some_and(|kv| seen.insert_first(kv, i))
                })
            })
        }
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
    #[cfg(test)]
    work::count();
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// A merge-key value that can be hashed: strings by text, numbers by value (as [`key_eq`] compares
/// them; `-0` is `0`). Other keys (null, booleans, objects, lists) are compared one by one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum HashKey<'a> {
    Str(&'a str),
    Num(u64),
}

fn hash_key(v: &Value) -> Option<HashKey<'_>> {
    match v {
        Value::String(s) => Some(HashKey::Str(s)),
        Value::Number(n) => n.as_f64().map(|f| HashKey::Num((f + 0.0).to_bits())),
        _ => None,
    }
}

/// Lists up to this long are searched by scanning (cheaper than hashing for the usual few items).
const SCAN_KEYS: usize = 16;

/// The first position of each merge key of a list, so that finding an item by key costs O(1) instead of
/// a scan of the list (a scan per item made the merge of a pod's containers quadratic, and Istio's
/// `reapplyOverwrittenContainers`, one merge per container, cubic). Same answers as the first
/// [`key_eq`] match of a scan.
struct KeyIndex<'a> {
    /// Hashable keys of a long list.
    hashed: HashMap<HashKey<'a>, usize>,
    /// Keys of a short list, and the keys that cannot be hashed, in list order.
    scanned: Vec<(&'a Value, usize)>,
    len: usize,
}

impl<'a> KeyIndex<'a> {
    fn with_capacity(n: usize) -> KeyIndex<'a> {
        KeyIndex {
            hashed: if n > SCAN_KEYS {
                HashMap::with_capacity(n)
            } else {
                HashMap::new()
            },
            scanned: Vec::with_capacity(n.min(SCAN_KEYS)),
            len: n,
        }
    }

    /// The index of `keys` (item `i` has key `keys[i]`).
    fn of<I: IntoIterator<Item = &'a Value>>(keys: I, n: usize) -> KeyIndex<'a> {
        let mut index = KeyIndex::with_capacity(n);
        for (i, k) in keys.into_iter().enumerate() {
            index.insert_first(k, i);
        }
        index
    }

    /// Records `k` at `pos` unless an equal key is already recorded; whether it was new.
    fn insert_first(&mut self, k: &'a Value, pos: usize) -> bool {
        #[cfg(test)]
        work::count();
        if self.len > SCAN_KEYS {
            if let Some(h) = hash_key(k) {
                return match self.hashed.entry(h) {
                    std::collections::hash_map::Entry::Occupied(_) => false,
                    std::collections::hash_map::Entry::Vacant(v) => {
                        v.insert(pos);
                        true
                    }
                };
            }
        }
        if self.scanned.iter().any(|(x, _)| key_eq(x, k)) {
            return false;
        }
        self.scanned.push((k, pos));
        true
    }

    /// The first position recorded with a key equal to `k`.
    fn position(&self, k: &Value) -> Option<usize> {
        #[cfg(test)]
        work::count();
        if self.len > SCAN_KEYS {
            if let Some(h) = hash_key(k) {
                return self.hashed.get(&h).copied();
            }
        }
        self.scanned
            .iter()
            .find(|(x, _)| key_eq(x, k))
            .map(|(_, p)| *p)
    }
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
    let server_index = KeyIndex::of(&server_keys, server_keys.len());
    let patch_keys: Vec<Value> = plain.iter().filter_map(|m| m.field(key).cloned()).collect();
    let patch_index = KeyIndex::of(&patch_keys, patch_keys.len());

    // merge by key; `merged` starts as the original items, new patch items are appended. `merged_index`
    // holds each key's first item: a string or number key never changes in a merge (the patch item
    // sets the same key), so it stays right; any other key can (a null key is deleted), so those
    // are looked up in `merged` itself.
    let mut merged: Vec<Value> = std::mem::take(orig);
    let mut merged_index = KeyIndex::of(&server_keys, server_keys.len() + plain.len());
    for (m, kv) in plain.into_iter().zip(patch_keys.iter()) {
        let found = if hash_key(kv).is_some() {
            merged_index.position(kv)
        } else {
            merged
                .iter()
                .position(|o| o.field(key).is_some_and(|ok| key_eq(ok, kv)))
        };
        match found {
            Some(i) => {
                if let Value::Object(om) = &mut merged[i] {
                    merge_map(om, m, ty, field)?;
                }
            }
            None => {
                merged_index.insert_first(kv, merged.len());
                merged.push(Value::Object(m));
            }
        }
    }

    // partition and order
    let mut patch_items: Vec<(usize, Value)> = Vec::new();
    let mut server_only: Vec<(usize, Value)> = Vec::new();
    for item in merged {
        let pi = item.field(key).and_then(|kv| patch_index.position(kv));
        match pi {
            Some(pi) => patch_items.push((pi, item)),
            None => {
                let si = item
                    .field(key)
                    .and_then(|kv| server_index.position(kv))
                    .unwrap_or(usize::MAX);
                server_only.push((si, item));
            }
        }
    }
    *orig = interleave(server_only, patch_items, |item| {
        item.field(key).and_then(|kv| server_index.position(kv))
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
    let server: Vec<Value> = std::mem::take(orig);
    let server_index = KeyIndex::of(&server, server.len());
    let patch_index = KeyIndex::of(&patch, patch.len());
    let mut seen = KeyIndex::with_capacity(server.len() + patch.len());
    let mut merged: Vec<Value> = Vec::with_capacity(server.len() + patch.len());
    for v in server.iter().chain(patch.iter()) {
        if seen.insert_first(v, merged.len()) {
            merged.push(v.clone());
        }
    }
    let mut p = Vec::new();
    let mut s = Vec::new();
    for v in merged {
        match patch_index.position(&v) {
            Some(i) => p.push((i, v)),
            None => s.push((server_index.position(&v).unwrap_or(usize::MAX), v)),
        }
    }
    *orig = interleave(s, p, |v| server_index.position(v));
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
    let saved_containers_by_name = NameIndex::of(&saved_containers);
    let saved_inits_by_name = NameIndex::of(&saved_inits);
    let orig_containers_by_name = NameIndex::of(orig_containers);
    let orig_inits_by_name = NameIndex::of(orig_inits);
    let skip_containers: HashSet<&str> = skip.containers.iter().map(String::as_str).collect();
    let skip_inits: HashSet<&str> = skip.init_containers.iter().map(String::as_str).collect();

    let recorded_containers = overlays(
        template_pod,
        "containers",
        &skip_containers,
        &[&saved_containers_by_name, &orig_containers_by_name],
    );
    reapply_list(final_pod, "containers", &recorded_containers)?;
    let recorded_inits = overlays(
        template_pod,
        "initContainers",
        &skip_inits,
        &[
            &saved_inits_by_name,
            &orig_containers_by_name,
            &orig_inits_by_name,
        ],
    );
    reapply_list(final_pod, "initContainers", &recorded_inits)?;

    if !already_injected {
        if let Some(text) = overrides::build(recorded_containers, recorded_inits) {
            set_annotation(final_pod, OVERRIDES_ANNOTATION, text);
        }
    }
    adjust_init_container_user(final_pod, original, proxy_config);
    Ok(())
}

/// The user's fields to lay over the template's `list`: for each of its containers not in `skip`, the
/// first of `sources` (in Istio's order of lookup) that holds a container of that name.
fn overlays(
    template_pod: &Value,
    list: &str,
    skip: &HashSet<&str>,
    sources: &[&NameIndex<'_>],
) -> Vec<Value> {
    containers(template_pod, list)
        .iter()
        .map(name_of)
        .filter(|name| !skip.contains(name))
        .filter_map(|name| sources.iter().find_map(|s| s.find(name)))
        .map(user_overlay)
        .collect()
}

/// The first item of each name in a list of containers, for [`find_named`] without a scan.
struct NameIndex<'a> {
    items: &'a [Value],
    first: HashMap<&'a str, usize>,
}

impl<'a> NameIndex<'a> {
    fn of(items: &'a [Value]) -> NameIndex<'a> {
        let mut first = HashMap::with_capacity(items.len());
        for (i, c) in items.iter().enumerate() {
            first.entry(name_of(c)).or_insert(i);
        }
        NameIndex { items, first }
    }

    /// `find_named(items, name)`.
    fn find(&self, name: &str) -> Option<&'a Value> {
        self.first.get(name).and_then(|&i| self.items.get(i))
    }
}

/// Strategic-merges each overlay, in order, as `{"spec": {<list>: [overlay]}}` into `final_pod`, as
/// Istio's `reapplyOverwrittenContainers` does one container at a time, in one pass over the list.
///
/// One such merge of an overlay whose name the list already has merges it into the first item of that
/// name and, by `normalizeElementOrder`, stable-sorts the list by the first position of each item's
/// name (a no-op unless a name repeats, and a no-op for every merge after the first); so the sequence
/// is the merges into the first items, then that sort once. Anything else (an overlay whose name is
/// not in the list, an item without a name, a directive) goes through the strategic merge itself, one
/// overlay at a time.
fn reapply_list(
    final_pod: &mut Value,
    list_key: &'static str,
    overlays: &[Value],
) -> Result<(), MergeError> {
    if overlays.is_empty() {
        return Ok(());
    }
    let Some(list) = final_pod
        .field_mut("spec")
        .and_then(|s| s.field_mut(list_key))
        .and_then(Value::as_array_mut)
    else {
        return reapply_one_by_one(final_pod, list_key, overlays);
    };
    // Where each overlay merges, and whether a name repeats; `None` when the fast path does not apply.
    let plan = {
        let keys: Option<Vec<&Value>> = list.iter().map(|c| c.field("name")).collect();
        keys.and_then(|keys| {
            let mut index = KeyIndex::with_capacity(keys.len());
            let mut repeats = false;
            for (i, k) in keys.iter().enumerate() {
                repeats |= !index.insert_first(k, i);
            }
            let targets: Option<Vec<usize>> = overlays
                .iter()
                .map(|o| {
                    let m = o.as_object().filter(|m| !m.has_field(DIRECTIVE))?;
                    let name = m.field("name").filter(|n| n.is_string())?;
                    index.position(name)
                })
                .collect();
            targets.map(|t| (t, repeats))
        })
    };
    let Some((targets, repeats)) = plan else {
        return reapply_one_by_one(final_pod, list_key, overlays);
    };
    let spec_field = FieldPath {
        parent: Some(&ROOT),
        key: "spec",
    };
    let field = FieldPath {
        parent: Some(&spec_field),
        key: list_key,
    };
    for (at, overlay) in targets.into_iter().zip(overlays) {
        if let (Some(Value::Object(item)), Value::Object(m)) = (list.get_mut(at), overlay) {
            merge_map(item, m.clone(), Ty::Container, &field)?;
        }
    }
    if repeats {
        let keys: Vec<Value> = list
            .iter()
            .filter_map(|c| c.field("name").cloned())
            .collect();
        let index = KeyIndex::of(&keys, keys.len());
        let mut keyed: Vec<(usize, Value)> = std::mem::take(list)
            .into_iter()
            .zip(&keys)
            .enumerate()
            .map(|(i, (c, k))| (index.position(k).unwrap_or(i), c))
            .collect();
        keyed.sort_by_key(|(at, _)| *at);
        *list = keyed.into_iter().map(|(_, c)| c).collect();
    }
    Ok(())
}

/// [`reapply_list`] as Istio writes it: one strategic merge of the whole pod per overlay.
fn reapply_one_by_one(
    final_pod: &mut Value,
    list_key: &'static str,
    overlays: &[Value],
) -> Result<(), MergeError> {
    for overlay in overlays {
        let mut spec = Map::new();
        spec.insert(list_key.to_string(), Value::Array(vec![overlay.clone()]));
        let mut patch = Map::new();
        patch.insert("spec".to_string(), Value::Object(spec));
        strategic_merge_pod_owned(final_pod, Value::Object(patch))?;
    }
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
            let uid_flag = sidecar_core::flags::PROXY_UID.short_arg();
            if let Some(i) = args.iter().position(|a| a.as_str() == Some(&uid_flag)) {
                if let Some(slot) = args.get_mut(i + 1) {
                    *slot = Value::String(u.to_string());
                }
            }
        }
    }
}

/// The merge's unit of work in tests: one merge-key comparison or one key-index lookup, counted per
/// thread, so a test can show the merge's cost grows linearly with the pod without timing it.
#[cfg(test)]
pub(crate) mod work {
    thread_local! {
        static STEPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    pub(crate) fn count() {
        STEPS.with(|c| c.set(c.get() + 1));
    }

    /// The steps `f` took.
    pub(crate) fn steps<T>(f: impl FnOnce() -> T) -> (T, u64) {
        let before = STEPS.with(std::cell::Cell::get);
        let out = f();
        (out, STEPS.with(std::cell::Cell::get) - before)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
