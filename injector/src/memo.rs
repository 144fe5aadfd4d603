//! A small memo of rendered templates, per engine (so per configuration: a reload builds a new engine
//! and drops the memo with the old one).
//!
//! Admission traffic is mostly replicas: a Deployment scaled to 50 sends 50 pods that are identical
//! (same `generateName`, labels, owner and spec; the name is not assigned yet). Rendering a template
//! is a pure function of the engine's configuration, the template's name, the front end, the workload and
//! the pod as the template sees it, and it is the largest part of an injection (the template text and
//! its parse: ~45% of a `hello` injection, callgrind), while a copy of the parsed result costs about a
//! third of that parse. So the engine looks the rendered partial pod up here, keyed by exactly those
//! inputs, and copies it on a hit. Everything after the render (merge, post-processing, the patch) runs
//! per request as before.
//!
//! * A hit compares the whole key (pod included), never just its hash.
//! * A result is stored only when its key was already seen among the recent misses, so a stream of
//!   distinct pods pays no copy into the memo; the second replica of a workload fills it.
//! * Memory is bounded by weight: string bytes plus a fixed amount per JSON node, about the heap a value
//!   uses, plus the length of the JSON texts kept for the patch writer ([`Texts`]). An entry (pod, result
//!   and texts) weighs at most [`MAX_ENTRY_WEIGHT`], all entries together at most
//!   [`MAX_TOTAL_WEIGHT`], and there are at most [`CAPACITY`]; the oldest make room. So a client sending
//!   large pods twice cannot make the memo hold more than a few MiB. A `hello` entry weighs ~16 Ki, the
//!   bench's large pod (12 containers) ~88 Ki.
//! * A hit copies the stored render, and the request's result later drops the copy. Most of that copy
//!   is the rendered containers and volumes (~75 k instructions of a `hello` injection's ~280 k,
//!   callgrind), and the webhook's patch usually finds them unchanged in the result (it writes their
//!   stored text, after checking them: `json_writer::write_value_known`). So the webhook hands those
//!   checked items back ([`recycle`]) and the entry keeps them as spares, at most [`SPARES`] per item:
//!   the next hit moves a spare in instead of copying the item. A spare is identical to the stored item
//!   (the patch writer compared them, key order included), so a hit's value is the same either way.
//!   Spares count in the entry's weight; an entry too heavy to have them keeps none.
//! * [`MemoCounters`] count hits, misses, stores and evictions, and gauge the entries, for `/metrics`.
//!   The server hands the same counters to every engine it builds, so the counts go on across reloads.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use serde_json::{Map, Value};

use crate::engine::{Mode, Skeleton, Workload};
use crate::fields::Fields;
use crate::json_writer::{self, identical, Known};

/// How a memo is used (shared handles: clones count into the same numbers). The server registers them
/// as `sidecar_injection_render_memo_*`; an engine built without them counts into its own, unread set.
#[derive(Debug, Clone, Default)]
pub struct MemoCounters {
    /// Lookups answered from the memo.
    pub hits: Counter,
    /// Lookups that had to render.
    pub misses: Counter,
    /// Renders stored (a key's second sighting, light enough).
    pub stored: Counter,
    /// Entries dropped to make room.
    pub evicted: Counter,
    /// Entries held by the current engine's memo.
    pub entries: Gauge,
}

/// Results kept at most.
pub const CAPACITY: usize = 64;
/// The heaviest entry stored, in [`weight`] units (about bytes).
pub const MAX_ENTRY_WEIGHT: usize = 1024 * 1024;
/// The weight of all entries together.
pub const MAX_TOTAL_WEIGHT: usize = 4 * 1024 * 1024;
/// What a JSON node costs in [`weight`], besides its string bytes.
const NODE_WEIGHT: usize = 32;
/// Key hashes of recent misses remembered for the second-sighting rule.
const SEEN: usize = 256;
/// Spare copies an entry keeps of each stored item, at most: enough for the injections one entry
/// serves at the same time on a small node (one per worker thread of two), and a bound on the memory
/// an entry may hold beyond its render.
pub const SPARES: usize = 2;

/// What a render depends on besides the engine. Borrowed for lookups.
#[derive(Debug, Clone, Copy)]
pub struct Key<'a> {
    pub template: &'a str,
    pub mode: Mode,
    pub workload: &'a Workload,
    pub pod: &'a Value,
}

impl Key<'_> {
    /// The key's hash and the pod's [`weight`], in one walk.
    fn hash(&self) -> (u64, usize) {
        let mut h = FxHasher::default();
        self.template.hash(&mut h);
        (self.mode == Mode::Webhook).hash(&mut h);
        self.workload.kind.hash(&mut h);
        self.workload.api_version.hash(&mut h);
        self.workload.name.hash(&mut h);
        self.workload.namespace.hash(&mut h);
        let pod_weight = hash_value(self.pod, &mut h);
        (h.finish(), pod_weight)
    }
}

/// One stored result with its full key.
#[derive(Debug)]
struct Entry {
    hash: u64,
    template: String,
    mode: Mode,
    workload: Workload,
    pod: Value,
    rendered: Value,
    /// The render's skeleton (the engine's template pod; built once, shared by every hit).
    skeleton: Arc<Skeleton>,
    /// The JSON text of the rendered containers and volumes (see [`Texts`]).
    texts: Vec<ItemText>,
    /// How many spares of each item in `texts` this entry keeps: [`SPARES`], or 0 when the entry
    /// would be too heavy with them.
    spare_cap: usize,
    /// Spare copies of the items in `texts`, by index: identical to the stored item (see [`recycle`]).
    spares: Mutex<Vec<Vec<Value>>>,
    /// The entry's weight, spares included (as if all were held).
    weight: usize,
}

/// The JSON text of `rendered.spec[list][index]`.
#[derive(Debug)]
struct ItemText {
    list: &'static str,
    index: usize,
    text: String,
    /// The item's [`weight`] (what a spare copy of it costs).
    weight: usize,
}

/// The lists whose items' JSON text an entry keeps: what an injection's patch adds whole.
const TEXT_LISTS: [&str; 3] = ["initContainers", "containers", "volumes"];

/// The JSON text of a stored render's containers and volumes, for the patch writer
/// (`json_writer::write_value_known`): the injected pod's patch adds most of them unchanged.
#[derive(Debug, Clone)]
pub struct Texts(Arc<Entry>);

impl Texts {
    /// The items with their text, each with its index among the entry's items (for [`Reused::item`]).
    pub fn known(&self) -> Vec<(usize, Known<'_>)> {
        self.0
            .texts
            .iter()
            .enumerate()
            .filter_map(|(i, t)| {
                let value = self.0.item(i)?;
                Some((
                    i,
                    Known {
                        value,
                        text: &t.text,
                    },
                ))
            })
            .collect()
    }

    /// The stored render's skeleton (`engine::Skeleton`).
    pub fn skeleton(&self) -> Arc<Skeleton> {
        Arc::clone(&self.0.skeleton)
    }

    /// Keeps `items` (item index, value) as spares, up to the entry's cap; the rest is dropped. Every
    /// value must be identical to the stored item of its index ([`recycle`] hands back only those).
    fn give_back(&self, items: Vec<(usize, Value)>) {
        let e = &self.0;
        if e.spare_cap == 0 || items.is_empty() {
            return;
        }
        debug_assert!(items
            .iter()
            .all(|(i, v)| e.item(*i).is_some_and(|stored| identical(stored, v))));
        // Values that do not fit are dropped after the lock is released.
        let mut surplus = Vec::new();
        if let Ok(mut spares) = e.spares.lock() {
            for (i, v) in items {
                match spares.get_mut(i) {
                    Some(s) if s.len() < e.spare_cap => s.push(v),
                    _ => surplus.push(v),
                }
            }
        }
        drop(surplus);
    }

    /// How many spares the entry holds of each item (for tests).
    #[cfg(test)]
    fn spare_counts(&self) -> Vec<usize> {
        self.0
            .spares
            .lock()
            .map(|s| s.iter().map(Vec::len).collect())
            .unwrap_or_default()
    }
}

/// Where the webhook's patch wrote a stored item's text: the position of the item's [`Texts`] among the
/// request's, the item's index in it ([`Texts::known`]), and the value of the result that the text stood
/// for (compared by address only, never dereferenced).
#[derive(Debug, Clone, Copy)]
pub struct Reused {
    pub texts: usize,
    pub item: usize,
    pub at: *const Value,
}

/// Drops an injection's `result` after its patch was written, handing the containers and volumes that
/// the patch found identical to stored items (`reused`, recorded by the patch writer on this very
/// `result`) back to their entries as spares.
pub fn recycle(mut result: Value, texts: &[Texts], reused: &[Reused]) {
    if reused.is_empty() {
        return;
    }
    let mut back: Vec<Vec<(usize, Value)>> = texts.iter().map(|_| Vec::new()).collect();
    if let Some(spec) = result.field_mut("spec") {
        for list in TEXT_LISTS {
            let Some(items) = spec.field_mut(list).and_then(Value::as_array_mut) else {
                continue;
            };
            for item in items {
                let found = reused.iter().find(|r| std::ptr::eq(r.at, &*item));
                if let Some(r) = found {
                    if let Some(b) = back.get_mut(r.texts) {
                        b.push((r.item, std::mem::take(item)));
                    }
                }
            }
        }
    }
    for (t, items) in texts.iter().zip(back) {
        t.give_back(items);
    }
}

/// The texts [`Entry::texts`] keeps for `rendered`.
fn item_texts(rendered: &Value) -> Vec<ItemText> {
    let mut texts = Vec::new();
    for list in TEXT_LISTS {
        let items = rendered
            .field("spec")
            .and_then(|s| s.field(list))
            .and_then(Value::as_array);
        for (index, item) in items.into_iter().flatten().enumerate() {
            if item.field("name").is_some_and(Value::is_string) {
                let mut out = Vec::new();
                json_writer::write_value(&mut out, item);
                // The writer only writes UTF-8 (the value's strings and ASCII syntax).
                if let Ok(text) = String::from_utf8(out) {
                    let weight = weight(item, MAX_ENTRY_WEIGHT).unwrap_or(MAX_ENTRY_WEIGHT);
                    texts.push(ItemText {
                        list,
                        index,
                        text,
                        weight,
                    });
                }
            }
        }
    }
    texts
}

impl Entry {
    /// The stored item of index `i` (of `texts`).
    fn item(&self, i: usize) -> Option<&Value> {
        let t = self.texts.get(i)?;
        self.rendered
            .field("spec")?
            .field(t.list)?
            .as_array()?
            .get(t.index)
    }

    /// A copy of the render for a hit, with the items that have a spare moved in instead of copied.
    fn copy_rendered(&self) -> Value {
        let mut taken: Vec<Option<Value>> = Vec::new();
        if self.spare_cap > 0 {
            if let Ok(mut spares) = self.spares.lock() {
                taken = spares.iter_mut().map(Vec::pop).collect();
            }
        }
        if taken.iter().all(Option::is_none) {
            return self.rendered.clone();
        }
        // Rebuilt in the stored key order: top level, `spec`, then the item lists.
        let Value::Object(top) = &self.rendered else {
            return self.rendered.clone();
        };
        let mut out = Map::with_capacity(top.len());
        for (k, v) in top {
            let copy = match (k.as_str(), v) {
                ("spec", Value::Object(spec)) => {
                    let mut s = Map::with_capacity(spec.len());
                    for (list, value) in spec {
                        let copy = match value {
                            Value::Array(items) if TEXT_LISTS.contains(&list.as_str()) => {
                                Value::Array(
                                    items
                                        .iter()
                                        .enumerate()
                                        .map(|(index, item)| {
                                            self.texts
                                                .iter()
                                                .position(|t| t.list == list && t.index == index)
                                                .and_then(|i| taken.get_mut(i)?.take())
                                                .unwrap_or_else(|| item.clone())
                                        })
                                        .collect(),
                                )
                            }
                            _ => value.clone(),
                        };
                        s.insert(list.clone(), copy);
                    }
                    Value::Object(s)
                }
                _ => v.clone(),
            };
            out.insert(k.clone(), copy);
        }
        Value::Object(out)
    }

    fn matches(&self, key: &Key<'_>) -> bool {
        self.template == key.template
            && self.mode == key.mode
            && self.workload == *key.workload
            && identical(&self.pod, key.pod)
    }
}

#[derive(Debug, Default)]
struct Inner {
    entries: VecDeque<Arc<Entry>>,
    /// The weight of `entries`.
    total: usize,
    seen: VecDeque<u64>,
}

/// The memo; see the module documentation.
#[derive(Debug, Default)]
pub struct RenderMemo {
    inner: Mutex<Inner>,
    counters: MemoCounters,
}

/// A lookup's result: the rendered partial pod, or what [`RenderMemo::store`] needs to know of the key.
pub enum Lookup {
    Hit(Value, Texts),
    Miss(Miss),
}

/// A missed key's hash and pod weight (computed by the lookup, so the store need not walk the pod).
#[derive(Debug, Clone, Copy)]
pub struct Miss {
    hash: u64,
    pod_weight: usize,
}

impl RenderMemo {
    /// An empty memo that counts into `counters` (its entries gauge starts again from 0).
    pub fn with_counters(counters: MemoCounters) -> RenderMemo {
        counters.entries.set(0);
        RenderMemo {
            inner: Mutex::default(),
            counters,
        }
    }

    /// The stored render for `key`, copied (the copy is made outside the lock).
    pub fn get(&self, key: &Key<'_>) -> Lookup {
        let (hash, pod_weight) = key.hash();
        let candidate = match self.inner.lock() {
            Ok(inner) => inner.entries.iter().find(|e| e.hash == hash).cloned(),
            // A panic while holding the lock cannot leave the memo inconsistent (every update is one
            // push or pop), but do without it rather than trust it.
            Err(_) => None,
        };
        match candidate {
            Some(e) if e.matches(key) => {
                self.counters.hits.inc();
                Lookup::Hit(e.copy_rendered(), Texts(e))
            }
            _ => {
                self.counters.misses.inc();
                Lookup::Miss(Miss { hash, pod_weight })
            }
        }
    }

    /// Records a miss of `key` (as [`RenderMemo::get`] reported it) and its render with its skeleton:
    /// stored when the same key missed recently and the entry is light enough, else only remembered.
    pub fn store(&self, miss: Miss, key: &Key<'_>, rendered: &Value, skeleton: &Arc<Skeleton>) {
        let Miss { hash, pod_weight } = miss;
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        if !inner.seen.contains(&hash) {
            if inner.seen.len() == SEEN {
                inner.seen.pop_front();
            }
            inner.seen.push_back(hash);
            return;
        }
        if inner.entries.iter().any(|e| e.hash == hash) {
            return;
        }
        let Some(weight) = MAX_ENTRY_WEIGHT
            .checked_sub(pod_weight)
            .and_then(|budget| weight(rendered, budget))
            .map(|w| w + pod_weight)
            .and_then(|w| Some(w + weight(&skeleton.pod, MAX_ENTRY_WEIGHT.checked_sub(w)?)?))
        else {
            // Too heavy: forget the sighting, so that the next one does not weigh it again.
            inner.seen.retain(|h| *h != hash);
            return;
        };
        // The copies and texts below are made under the lock, but only on a second sighting: rare.
        let texts = item_texts(rendered);
        let weight = weight + texts.iter().map(|t| t.text.len()).sum::<usize>();
        if weight > MAX_ENTRY_WEIGHT {
            inner.seen.retain(|h| *h != hash);
            return;
        }
        // Room for the spares, if the entry stays light enough with them.
        let items_weight = texts
            .iter()
            .map(|t| t.weight)
            .fold(0usize, usize::saturating_add);
        let spares_weight = items_weight.saturating_mul(SPARES);
        let (spare_cap, weight) = match weight.checked_add(spares_weight) {
            Some(w) if w <= MAX_ENTRY_WEIGHT => (SPARES, w),
            _ => (0, weight),
        };
        while inner.entries.len() == CAPACITY || inner.total + weight > MAX_TOTAL_WEIGHT {
            match inner.entries.pop_front() {
                Some(old) => {
                    inner.total -= old.weight;
                    self.counters.evicted.inc();
                }
                None => break,
            }
        }
        inner.total += weight;
        inner.entries.push_back(Arc::new(Entry {
            hash,
            template: key.template.to_string(),
            mode: key.mode,
            workload: key.workload.clone(),
            pod: key.pod.clone(),
            rendered: rendered.clone(),
            skeleton: Arc::clone(skeleton),
            spares: Mutex::new(texts.iter().map(|_| Vec::new()).collect()),
            texts,
            spare_cap,
            weight,
        }));
        self.counters.stored.inc();
        self.counters
            .entries
            .set(i64::try_from(inner.entries.len()).unwrap_or(i64::MAX));
    }

    /// How many results are stored (for tests and metrics).
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |i| i.entries.len())
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The spare items held by all entries (for tests).
    #[cfg(test)]
    pub(crate) fn spares_held(&self) -> usize {
        self.inner.lock().map_or(0, |i| {
            i.entries
                .iter()
                .map(|e| Texts(Arc::clone(e)).spare_counts().iter().sum::<usize>())
                .sum()
        })
    }
}

/// The weight of `v` (string bytes plus [`NODE_WEIGHT`] per node), or `None` as soon as it exceeds
/// `budget` (so a huge value is not walked whole).
fn weight(v: &Value, budget: usize) -> Option<usize> {
    let add = |used: usize, n: usize| Some(used + n).filter(|&u| u <= budget);
    let mut used = add(0, NODE_WEIGHT)?;
    match v {
        Value::String(s) => used = add(used, s.len())?,
        Value::Array(items) => {
            for item in items {
                used = add(used, weight(item, budget - used)?)?;
            }
        }
        Value::Object(map) => {
            for (k, item) in map {
                used = add(used, k.len())?;
                used = add(used, weight(item, budget - used)?)?;
            }
        }
        _ => {}
    }
    Some(used)
}

/// A multiply-rotate hash (the rustc/Firefox "Fx" scheme): several times cheaper than the standard
/// SipHash over a pod's many short strings. It is not keyed, but that is harmless here: a hit compares the
/// whole key, and the memo is a short list, not a hash table that collisions could degrade.
#[derive(Default)]
struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Feeds a JSON value to a hasher, with type tags so that e.g. `"1"` and `1`, or `[[]]` and `[]`, differ.
/// Key order counts (it is part of the pod the template sees). Returns the value's [`weight`].
fn hash_value(v: &Value, h: &mut impl Hasher) -> usize {
    let mut w = NODE_WEIGHT;
    match v {
        Value::Null => h.write_u8(0),
        Value::Bool(b) => {
            h.write_u8(1);
            h.write_u8(u8::from(*b));
        }
        Value::Number(n) => {
            h.write_u8(2);
            if let Some(u) = n.as_u64() {
                h.write_u64(u);
            } else if let Some(i) = n.as_i64() {
                h.write_i64(i);
            } else if let Some(f) = n.as_f64() {
                h.write_u64(f.to_bits());
            }
        }
        Value::String(s) => {
            h.write_u8(3);
            s.hash(h);
            w += s.len();
        }
        Value::Array(items) => {
            h.write_u8(4);
            h.write_usize(items.len());
            for item in items {
                w = w.saturating_add(hash_value(item, h));
            }
        }
        Value::Object(map) => {
            h.write_u8(5);
            h.write_usize(map.len());
            for (k, item) in map {
                k.hash(h);
                w = w
                    .saturating_add(k.len())
                    .saturating_add(hash_value(item, h));
            }
        }
    }
    w
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn workload(name: &str) -> Workload {
        Workload {
            kind: "Deployment".into(),
            api_version: "apps/v1".into(),
            name: name.into(),
            namespace: "default".into(),
        }
    }

    fn skeleton(rendered: &Value) -> Arc<Skeleton> {
        Arc::new(crate::engine::template_skeleton(rendered))
    }

    fn hit(l: Lookup) -> Option<Value> {
        match l {
            Lookup::Hit(v, _) => Some(v),
            Lookup::Miss(_) => None,
        }
    }

    /// The key of the `sidecar` template in webhook mode.
    fn key<'a>(workload: &'a Workload, pod: &'a Value) -> Key<'a> {
        Key {
            template: "sidecar",
            mode: Mode::Webhook,
            workload,
            pod,
        }
    }

    /// Looks `key` up `times` times, storing `rendered` after each miss, as the engine does.
    fn offer(memo: &RenderMemo, key: &Key<'_>, rendered: &Value, times: usize) {
        for _ in 0..times {
            if let Lookup::Miss(m) = memo.get(key) {
                memo.store(m, key, rendered, &skeleton(rendered));
            }
        }
    }

    #[test]
    fn counters_follow_hits_misses_stores_and_evictions() {
        let counters = MemoCounters::default();
        let memo = RenderMemo::with_counters(counters.clone());
        let w = workload("hello");
        let rendered = json!({"spec": {"containers": [{"name": "istio-proxy"}]}});
        let pod = |i: usize| json!({"metadata": {"labels": {"app": format!("app-{i}")}}});
        let first = pod(0);
        offer(&memo, &key(&w, &first), &rendered, 3); // miss, miss (stored), hit
        assert_eq!(
            (
                counters.misses.get(),
                counters.stored.get(),
                counters.hits.get()
            ),
            (2, 1, 1)
        );
        assert_eq!(counters.entries.get(), 1);
        // CAPACITY more workloads, each seen twice: every one is stored, the first is evicted.
        for i in 1..=CAPACITY {
            offer(&memo, &key(&w, &pod(i)), &rendered, 2);
        }
        assert_eq!(counters.stored.get(), 1 + CAPACITY as u64);
        assert_eq!(counters.evicted.get(), 1);
        assert_eq!(counters.entries.get(), CAPACITY as i64);
        assert_eq!(counters.hits.get(), 1);
        // A new memo (a reload) with the same counters: the counts go on, the entries start at 0.
        let next = RenderMemo::with_counters(counters.clone());
        assert_eq!(counters.entries.get(), 0);
        offer(&next, &key(&w, &first), &rendered, 3);
        assert_eq!((counters.hits.get(), counters.entries.get()), (2, 1));
    }

    #[test]
    fn stores_on_second_sighting_and_hits_only_the_same_key() {
        let memo = RenderMemo::default();
        let w = workload("hello");
        let pod = json!({"metadata": {"labels": {"app": "hello"}}, "spec": {"containers": [{"name": "a"}]}});
        let key = key(&w, &pod);
        let rendered = json!({"spec": {"containers": [{"name": "istio-proxy"}]}});
        for round in 0..2 {
            let Lookup::Miss(h) = memo.get(&key) else {
                panic!("round {round}: hit before a second sighting")
            };
            memo.store(h, &key, &rendered, &skeleton(&rendered));
        }
        assert_eq!(memo.len(), 1);
        assert_eq!(hit(memo.get(&key)), Some(rendered));

        // Any difference in the key is a miss.
        let other_pod = json!({"metadata": {"labels": {"app": "hello2"}}, "spec": {"containers": [{"name": "a"}]}});
        let reordered = json!({"spec": {"containers": [{"name": "a"}]}, "metadata": {"labels": {"app": "hello"}}});
        let w2 = workload("other");
        for k in [
            Key {
                pod: &other_pod,
                ..key
            },
            Key {
                pod: &reordered,
                ..key
            },
            Key {
                workload: &w2,
                ..key
            },
            Key {
                mode: Mode::KubeInject,
                ..key
            },
            Key {
                template: "init",
                ..key
            },
        ] {
            assert!(hit(memo.get(&k)).is_none(), "{k:?}");
        }
    }

    /// A stored key whose hash equals another key's still answers only its own key: every part of the
    /// key is compared on a hit, not just the hash.
    #[test]
    fn a_colliding_hash_with_another_pod_workload_mode_or_template_misses() {
        let w = workload("hello");
        let pod = json!({"metadata": {"labels": {"app": "hello"}}});
        let stored = key(&w, &pod);
        let rendered = json!({"spec": {"containers": [{"name": "istio-proxy"}]}});
        let other_pod = json!({"metadata": {"labels": {"app": "other"}}});
        let w2 = workload("other");
        for k in [
            Key {
                pod: &other_pod,
                ..stored
            },
            Key {
                workload: &w2,
                ..stored
            },
            Key {
                mode: Mode::KubeInject,
                ..stored
            },
            Key {
                template: "init",
                ..stored
            },
        ] {
            let memo = RenderMemo::default();
            offer(&memo, &stored, &rendered, 2);
            assert_eq!(hit(memo.get(&stored)), Some(rendered.clone()));
            // The stored entry now has the other key's hash, as a collision would give it.
            {
                let mut inner = memo.inner.lock().unwrap();
                let entry = Arc::get_mut(&mut inner.entries[0]).unwrap();
                entry.hash = k.hash().0;
            }
            assert!(hit(memo.get(&k)).is_none(), "{k:?}");
        }
    }

    #[test]
    fn hits_carry_the_text_of_rendered_containers_and_volumes() {
        let memo = RenderMemo::default();
        let w = workload("hello");
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let key = key(&w, &pod);
        let rendered = json!({"spec": {
            "initContainers": [{"name": "istio-init", "args": ["-p", "15001"]}],
            "containers": [{"image": "no-name"}, {"name": "istio-proxy", "env": [{"name": "A", "value": "\"q\"\n"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}],
            "imagePullSecrets": [{"name": "s"}]
        }});
        for _ in 0..2 {
            if let Lookup::Miss(m) = memo.get(&key) {
                memo.store(m, &key, &rendered, &skeleton(&rendered));
            }
        }
        let Lookup::Hit(_, texts) = memo.get(&key) else {
            panic!("no hit")
        };
        let known = texts.known();
        let spec = &rendered["spec"];
        let indices: Vec<usize> = known.iter().map(|(i, _)| *i).collect();
        assert_eq!(indices, [0, 1, 2]);
        let values: Vec<&Value> = known.iter().map(|(_, k)| k.value).collect();
        assert_eq!(
            values,
            [
                &spec["initContainers"][0],
                &spec["containers"][1],
                &spec["volumes"][0]
            ]
        );
        for (_, k) in &known {
            assert_eq!(k.text, serde_json::to_string(k.value).unwrap());
        }
    }

    /// What the webhook does with a hit: writes the patch of `result` against a pod with an empty spec
    /// (so the lists are added whole and their items written from the stored texts), then recycles
    /// `result`. Returns the patch text.
    fn patch_and_recycle(result: Value, texts: &Texts) -> String {
        let known = texts.known();
        let items: Vec<Known<'_>> = known.iter().map(|(_, k)| *k).collect();
        let (bytes, reuses) =
            crate::patch::create_patch_json(&json!({"spec": {}}), &result, &items);
        let reused: Vec<Reused> = reuses
            .iter()
            .map(|r| Reused {
                texts: 0,
                item: known[r.known].0,
                at: r.at,
            })
            .collect();
        recycle(result, std::slice::from_ref(texts), &reused);
        String::from_utf8(bytes).unwrap()
    }

    fn stored_hit(memo: &RenderMemo, key: &Key<'_>, rendered: &Value) -> (Value, Texts) {
        offer(memo, key, rendered, 2);
        match memo.get(key) {
            Lookup::Hit(v, t) => (v, t),
            Lookup::Miss(_) => panic!("no hit"),
        }
    }

    #[test]
    fn unchanged_items_come_back_as_spares_and_hits_stay_identical() {
        let memo = RenderMemo::default();
        let w = workload("hello");
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let key = key(&w, &pod);
        // The lists in another order than the memo keeps their texts in, and items at the same index
        // in different lists: a spare must go back exactly where its item was.
        let rendered = json!({"metadata": {"annotations": {"x": "y"}}, "spec": {
            "volumes": [{"name": "v", "emptyDir": {}}],
            "containers": [{"image": "no-name"}, {"name": "istio-proxy", "env": [{"name": "A", "value": "1"}]}],
            "initContainers": [{"name": "istio-init", "args": ["-p", "15001"]}]
        }});
        let (first, texts) = stored_hit(&memo, &key, &rendered);
        assert!(identical(&first, &rendered));
        assert_eq!(texts.spare_counts(), [0, 0, 0]);
        let expected = patch_and_recycle(first, &texts);
        // All three named items were written from their texts and came back.
        assert_eq!(texts.spare_counts(), [1, 1, 1]);

        // The next hit moves them in: same value, same patch, and they come back again.
        for _ in 0..5 {
            let Lookup::Hit(v, t) = memo.get(&key) else {
                panic!("no hit")
            };
            assert_eq!(t.spare_counts(), [0, 0, 0]);
            assert!(identical(&v, &rendered), "{v}");
            assert_eq!(patch_and_recycle(v, &t), expected);
            assert_eq!(t.spare_counts(), [1, 1, 1]);
        }

        // Held at the same time, hits take what there is; handed back, at most SPARES are kept.
        let held: Vec<(Value, Texts)> = (0..SPARES + 2)
            .map(|_| match memo.get(&key) {
                Lookup::Hit(v, t) => (v, t),
                Lookup::Miss(_) => panic!("no hit"),
            })
            .collect();
        for (v, _) in &held {
            assert!(identical(v, &rendered));
        }
        for (v, t) in held {
            assert_eq!(patch_and_recycle(v, &t), expected);
        }
        assert_eq!(texts.spare_counts(), [SPARES; 3]);
    }

    #[test]
    fn changed_items_are_not_given_back() {
        let memo = RenderMemo::default();
        let w = workload("hello");
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let key = key(&w, &pod);
        let rendered = json!({"spec": {
            "containers": [{"name": "istio-proxy", "env": [{"name": "A", "value": "1"}]}],
            "volumes": [{"name": "v", "emptyDir": {}}, {"name": "w", "emptyDir": {}}]
        }});
        let (mut v, texts) = stored_hit(&memo, &key, &rendered);
        // As post-processing would: the proxy gets an env entry, a volume its keys reordered.
        v["spec"]["containers"][0]["env"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "B", "value": "2"}));
        v["spec"]["volumes"][1] = json!({"emptyDir": {}, "name": "w"});
        let patch = patch_and_recycle(v, &texts);
        assert!(patch.contains(r#"{"name":"B","value":"2"}"#), "{patch}");
        assert_eq!(texts.spare_counts(), [0, 1, 0]);
        // The next hit still gives the stored render.
        let Lookup::Hit(next, _) = memo.get(&key) else {
            panic!("no hit")
        };
        assert!(identical(&next, &rendered));
        assert_eq!(texts.spare_counts(), [0, 0, 0]);
    }

    #[test]
    fn spares_count_in_the_weight_or_are_not_kept() {
        let memo = RenderMemo::default();
        let w = workload("w");
        let pod = json!({});
        let light = json!({"spec": {"containers": [{"name": "c", "image": "i"}]}});
        let (_, texts) = stored_hit(&memo, &key(&w, &pod), &light);
        let item_weight = weight(&light["spec"]["containers"][0], 1000).unwrap();
        let text = r#"{"name":"c","image":"i"}"#.len();
        let pod_weight = weight(&pod, 1000).unwrap();
        let skeleton_weight = weight(&texts.skeleton().pod, 1000).unwrap();
        assert_eq!(
            texts.0.weight,
            pod_weight
                + weight(&light, 1000).unwrap()
                + skeleton_weight
                + text
                + SPARES * item_weight
        );
        assert_eq!(texts.0.spare_cap, SPARES);

        // An entry that fits only without spares is stored without them, and hits still copy.
        let memo = RenderMemo::default();
        let heavy = json!({"spec": {"containers": [{"name": "c", "image": "x".repeat(MAX_ENTRY_WEIGHT / 3)}]}});
        let (v, texts) = stored_hit(&memo, &key(&w, &pod), &heavy);
        assert_eq!(texts.0.spare_cap, 0);
        assert!(texts.0.weight <= MAX_ENTRY_WEIGHT);
        patch_and_recycle(v, &texts);
        assert_eq!(texts.spare_counts(), [0]);
        let Lookup::Hit(again, _) = memo.get(&key(&w, &pod)) else {
            panic!("no hit")
        };
        assert!(identical(&again, &heavy));
    }

    #[test]
    fn bounded() {
        let memo = RenderMemo::default();
        let w = workload("w");
        for i in 0..(CAPACITY + 10) {
            let pod = json!({"i": i});
            offer(&memo, &key(&w, &pod), &json!({"i": i}), 2);
        }
        assert_eq!(memo.len(), CAPACITY);
        // The oldest were replaced, the newest are there.
        let first = json!({"i": 0});
        let last = json!({"i": CAPACITY + 9});
        assert!(hit(memo.get(&key(&w, &first))).is_none());
        assert_eq!(hit(memo.get(&key(&w, &last))), Some(last.clone()));
    }

    #[test]
    fn large_entries_are_not_stored() {
        let memo = RenderMemo::default();
        let w = workload("big");
        let big = json!({"data": "x".repeat(MAX_ENTRY_WEIGHT)});
        let small = json!({"spec": {}});
        for (pod, rendered) in [(&big, &small), (&small, &big)] {
            offer(&memo, &key(&w, pod), rendered, 3);
        }
        assert!(memo.is_empty());
        // The texts kept for the patch writer count: a container that fits as a value, but not together
        // with its JSON text, is not stored.
        let half = json!({"spec": {"containers": [{"name": "c", "image": "x".repeat(MAX_ENTRY_WEIGHT * 2 / 3)}]}});
        offer(&memo, &key(&w, &small), &half, 3);
        assert!(memo.is_empty());
        let third = json!({"spec": {"containers": [{"name": "c", "image": "x".repeat(MAX_ENTRY_WEIGHT / 3)}]}});
        offer(&memo, &key(&w, &small), &third, 3);
        assert_eq!(memo.len(), 1);
        assert_eq!(
            weight(&json!({"ab": ["c", 1]}), 1000),
            Some(32 + 2 + 32 + 32 + 1 + 32)
        );
        assert_eq!(weight(&Value::Array(vec![json!("x"); 100]), 200), None);
    }

    #[test]
    fn total_weight_is_bounded() {
        let memo = RenderMemo::default();
        let w = workload("w");
        // Entries of ~600 Ki each: at most six fit under the total.
        let rendered = json!({"data": "r".repeat(600 * 1024)});
        for i in 0..10 {
            let pod = json!({"i": i});
            offer(&memo, &key(&w, &pod), &rendered, 2);
        }
        let inner = memo.inner.lock().unwrap();
        assert_eq!(inner.entries.len(), MAX_TOTAL_WEIGHT / (600 * 1024));
        assert!(inner.total <= MAX_TOTAL_WEIGHT);
        assert_eq!(
            inner.total,
            inner.entries.iter().map(|e| e.weight).sum::<usize>()
        );
    }

    #[test]
    fn hash_distinguishes_types_and_nesting() {
        let h = |v: Value| {
            let mut s = FxHasher::default();
            hash_value(&v, &mut s);
            s.finish()
        };
        assert_ne!(h(json!("1")), h(json!(1)));
        assert_ne!(h(json!([[]])), h(json!([])));
        assert_ne!(h(json!({"a": null})), h(json!({"a": {}})));
        assert_ne!(h(json!(["ab", "c"])), h(json!(["a", "bc"])));
        assert_eq!(h(json!({"a": [1, "x"]})), h(json!({"a": [1, "x"]})));
    }

    #[test]
    fn identical_counts_key_order() {
        let a = json!({"x": 1, "y": {"p": [1, 2], "q": null}});
        assert!(identical(&a, &a.clone()));
        assert!(!identical(
            &a,
            &json!({"y": {"p": [1, 2], "q": null}, "x": 1})
        ));
        assert!(!identical(
            &a,
            &json!({"x": 1, "y": {"p": [2, 1], "q": null}})
        ));
        assert!(!identical(&json!(1), &json!(1.0)));
    }
}
