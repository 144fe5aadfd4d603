//! A small bounded cache, generic over its key and value (in the manner of linkerd2-proxy's idle cache:
//! it knows nothing of its users).
//!
//! * A lookup compares the whole key ([`Eq`]) of the entry with the same hash, never just the hash; the
//!   hasher is keyed ([`RandomState`]) unless the caller injects another one.
//! * Second-sighting rule: the first miss of a key only remembers its hash (in a bounded ring of recent
//!   miss hashes); the second stores the value. A stream of distinct keys therefore stores nothing and
//!   evicts nothing.
//! * Bounded by weight: the caller weighs each entry (about the bytes it holds); an entry heavier than
//!   [`Bounds::max_entry_weight`] is not stored, and the oldest entries make room for a new one while
//!   there are [`Bounds::max_entries`] or the weights together would exceed [`Bounds::max_total_weight`].
//! * [`CacheCounters`] count hits, misses, stores and evictions and gauge the entries.
//!
//! The entries are few (tens), so they are a queue searched by hash rather than a hash table. Lookups
//! share a read lock, held only for that search: the keys are compared after it (a thread preempted
//! there must not hold up the others), and keys and values are weighed and dropped outside the lock.

use std::collections::hash_map::RandomState;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// How a cache is used (shared handles: clones count into the same numbers).
#[derive(Debug, Clone, Default)]
pub struct CacheCounters {
    /// Lookups answered from the cache.
    pub hits: Counter,
    /// Lookups not answered.
    pub misses: Counter,
    /// Values stored (a key's second sighting, light enough).
    pub stored: Counter,
    /// Entries dropped to make room.
    pub evicted: Counter,
    /// Entries held.
    pub entries: Gauge,
}

/// The limits of a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Entries held at most.
    pub max_entries: usize,
    /// The heaviest entry stored.
    pub max_entry_weight: usize,
    /// The weight of all entries together, at most.
    pub max_total_weight: usize,
    /// Hashes of recent misses remembered for the second-sighting rule.
    pub remembered_misses: usize,
}

/// A key with its hash, computed once by [`Cache::hashed`] for a lookup and the insert after it. The
/// hash is only a hint: a key hashed by another cache's hasher is merely not found.
#[derive(Debug, Clone)]
pub struct Hashed<K> {
    hash: u64,
    key: K,
}

impl<K> Hashed<K> {
    pub fn key(&self) -> &K {
        &self.key
    }
}

#[derive(Debug)]
struct Entry<K, V> {
    hash: u64,
    key: K,
    value: Arc<V>,
    weight: usize,
}

#[derive(Debug)]
struct Inner<K, V> {
    /// Oldest first.
    entries: VecDeque<Arc<Entry<K, V>>>,
    /// The weight of `entries`.
    total: usize,
    /// Hashes of recent misses, oldest first.
    seen: VecDeque<u64>,
}

/// The cache; see the module documentation.
#[derive(Debug)]
pub struct Cache<K, V, S = RandomState> {
    inner: RwLock<Inner<K, V>>,
    bounds: Bounds,
    counters: CacheCounters,
    hasher: S,
}

impl<K: Hash + Eq, V> Cache<K, V> {
    /// An empty cache with a keyed hasher, counting into `counters` (its entries gauge starts at 0).
    pub fn new(bounds: Bounds, counters: CacheCounters) -> Self {
        Cache::with_hasher(bounds, counters, RandomState::new())
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> Cache<K, V, S> {
    /// [`Cache::new`] with the given hasher.
    pub fn with_hasher(bounds: Bounds, counters: CacheCounters, hasher: S) -> Self {
        counters.entries.set(0);
        Cache {
            inner: RwLock::new(Inner {
                entries: VecDeque::new(),
                total: 0,
                seen: VecDeque::new(),
            }),
            bounds,
            counters,
            hasher,
        }
    }

    /// `key` with its hash, for [`Cache::get`] and [`Cache::insert`].
    pub fn hashed(&self, key: K) -> Hashed<K> {
        Hashed {
            hash: self.hasher.hash_one(&key),
            key,
        }
    }

    /// The value stored for `key`, counted as a hit or a miss.
    pub fn get(&self, key: &Hashed<K>) -> Option<Arc<V>> {
        self.lookup(key, true)
    }

    /// The value stored for `key`, counted only when found: for a first look whose miss is followed by
    /// a [`Cache::get`] of the same key, so that one request counts once.
    pub fn get_hit(&self, key: &Hashed<K>) -> Option<Arc<V>> {
        self.lookup(key, false)
    }

    fn lookup(&self, key: &Hashed<K>, count_miss: bool) -> Option<Arc<V>> {
        let candidates: Vec<Arc<Entry<K, V>>> = self.read().map_or_else(Vec::new, |inner| {
            inner
                .entries
                .iter()
                .filter(|e| e.hash == key.hash)
                .cloned()
                .collect()
        });
        let found = candidates
            .iter()
            .find(|e| e.key == key.key)
            .map(|e| Arc::clone(&e.value));
        if found.is_some() {
            self.counters.hits.inc();
        } else if count_miss {
            self.counters.misses.inc();
        }
        found
    }

    /// Offers `value` for `key` after a miss: stored when the key's hash missed recently (else only
    /// remembered) and `weigh(&key, &value)` is at most the entry bound. Returns whether it was stored.
    pub fn insert(&self, key: Hashed<K>, value: V, weigh: impl FnOnce(&K, &V) -> usize) -> bool {
        let hash = key.hash;
        {
            let Some(mut inner) = self.write() else {
                return false;
            };
            if !inner.seen.contains(&hash) {
                if self.bounds.remembered_misses > 0 {
                    if inner.seen.len() >= self.bounds.remembered_misses {
                        inner.seen.pop_front();
                    }
                    inner.seen.push_back(hash);
                }
                return false;
            }
            // A second sighting: this key is stored or weighed now, so its hash need not stay.
            inner.seen.retain(|h| *h != hash);
        }
        let weight = weigh(&key.key, &value);
        if weight > self.bounds.max_entry_weight || self.bounds.max_entries == 0 {
            return false;
        }
        let mut evicted = Vec::new();
        {
            let Some(mut inner) = self.write() else {
                return false;
            };
            if inner
                .entries
                .iter()
                .any(|e| e.hash == hash && e.key == key.key)
            {
                return false;
            }
            while inner.entries.len() >= self.bounds.max_entries
                || inner.total + weight > self.bounds.max_total_weight
            {
                match inner.entries.pop_front() {
                    Some(old) => {
                        inner.total -= old.weight;
                        evicted.push(old);
                    }
                    None => break,
                }
            }
            inner.total += weight;
            inner.entries.push_back(Arc::new(Entry {
                hash,
                key: key.key,
                value: Arc::new(value),
                weight,
            }));
            self.counters
                .entries
                .set(i64::try_from(inner.entries.len()).unwrap_or(i64::MAX));
        }
        self.counters.stored.inc();
        self.counters.evicted.inc_by(evicted.len() as u64);
        // The evicted entries are dropped here, after the lock is released.
        drop(evicted);
        true
    }

    /// How many entries are stored.
    pub fn len(&self) -> usize {
        self.read().map_or(0, |i| i.entries.len())
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The weight of all entries.
    #[cfg(test)]
    pub fn total_weight(&self) -> usize {
        self.read().map_or(0, |i| i.total)
    }

    /// The lock for lookups; `None` once a panic poisoned it: every update is a single push or pop, so
    /// the state would be consistent, but the cache is an optimisation and does without rather than
    /// trust it.
    fn read(&self) -> Option<RwLockReadGuard<'_, Inner<K, V>>> {
        self.inner.read().ok()
    }

    /// The lock for updates (`None` as for [`Cache::read`]).
    fn write(&self) -> Option<RwLockWriteGuard<'_, Inner<K, V>>> {
        self.inner.write().ok()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::hash::{BuildHasherDefault, Hasher};

    /// A hasher that gives every key the same hash.
    #[derive(Default)]
    struct Collide;

    impl Hasher for Collide {
        fn write(&mut self, _: &[u8]) {}
        fn finish(&self) -> u64 {
            7
        }
    }

    const BOUNDS: Bounds = Bounds {
        max_entries: 4,
        max_entry_weight: 100,
        max_total_weight: 250,
        remembered_misses: 8,
    };

    fn cache() -> Cache<String, String> {
        Cache::new(BOUNDS, CacheCounters::default())
    }

    /// Looks `key` up `times` times, offering `value` (of weight `w`) after each miss.
    fn offer<S: BuildHasher>(c: &Cache<String, String, S>, key: &str, w: usize, times: usize) {
        for _ in 0..times {
            let k = c.hashed(key.to_string());
            if c.get(&k).is_none() {
                c.insert(k, format!("v-{key}"), |_, _| w);
            }
        }
    }

    fn get<S: BuildHasher>(c: &Cache<String, String, S>, key: &str) -> Option<String> {
        c.get(&c.hashed(key.to_string())).map(|v| (*v).clone())
    }

    #[test]
    fn stores_on_the_second_sighting() {
        let counters = CacheCounters::default();
        let c: Cache<String, String> = Cache::new(BOUNDS, counters.clone());
        offer(&c, "a", 1, 1);
        assert!(c.is_empty());
        offer(&c, "a", 1, 2); // miss (stored), hit
        assert_eq!(get(&c, "a").as_deref(), Some("v-a"));
        assert_eq!(
            (
                counters.misses.get(),
                counters.stored.get(),
                counters.hits.get(),
                counters.entries.get()
            ),
            (2, 1, 2, 1)
        );
    }

    #[test]
    fn a_stream_of_distinct_keys_stores_nothing() {
        let c = cache();
        for i in 0..100 {
            offer(&c, &format!("k{i}"), 1, 1);
        }
        assert!(c.is_empty());
        // Only the most recent misses are remembered: the first key's hash was pushed out.
        offer(&c, "k0", 1, 1);
        assert!(c.is_empty());
        offer(&c, "k99", 1, 1);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn colliding_hashes_compare_the_whole_key() {
        let c: Cache<String, String, BuildHasherDefault<Collide>> =
            Cache::with_hasher(BOUNDS, CacheCounters::default(), Default::default());
        offer(&c, "a", 1, 2);
        assert_eq!(get(&c, "a").as_deref(), Some("v-a"));
        // Same hash, another key: a miss; stored on its own second sighting, beside the first.
        assert_eq!(get(&c, "b"), None);
        offer(&c, "b", 1, 2);
        assert_eq!(get(&c, "a").as_deref(), Some("v-a"));
        assert_eq!(get(&c, "b").as_deref(), Some("v-b"));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn bounded_in_entries_oldest_first() {
        let counters = CacheCounters::default();
        let c: Cache<String, String> = Cache::new(BOUNDS, counters.clone());
        for i in 0..6 {
            offer(&c, &format!("k{i}"), 1, 2);
        }
        assert_eq!(c.len(), BOUNDS.max_entries);
        assert_eq!(counters.evicted.get(), 2);
        assert_eq!(counters.entries.get(), 4);
        assert_eq!(get(&c, "k0"), None);
        assert_eq!(get(&c, "k1"), None);
        assert_eq!(get(&c, "k5").as_deref(), Some("v-k5"));
    }

    #[test]
    fn bounded_in_weight() {
        let c = cache();
        // Too heavy alone: never stored.
        offer(&c, "heavy", BOUNDS.max_entry_weight + 1, 3);
        assert!(c.is_empty());
        // 80 each: three fit under 250, the fourth evicts the oldest.
        for i in 0..4 {
            offer(&c, &format!("k{i}"), 80, 2);
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.total_weight(), 240);
        assert_eq!(get(&c, "k0"), None);
        // A heavier one makes room by evicting as many old entries as it needs.
        offer(&c, "big", 100, 2);
        assert_eq!(c.len(), 2);
        assert_eq!(c.total_weight(), 180);
        assert_eq!(get(&c, "big").as_deref(), Some("v-big"));
        assert_eq!(get(&c, "k3").as_deref(), Some("v-k3"));
    }

    #[test]
    fn a_stored_key_is_not_stored_twice() {
        let c = cache();
        offer(&c, "a", 1, 2);
        let k = c.hashed("a".to_string());
        c.insert(k.clone(), "x".into(), |_, _| 1);
        assert!(!c.insert(k, "y".into(), |_, _| 1));
        assert_eq!(c.len(), 1);
        assert_eq!(get(&c, "a").as_deref(), Some("v-a"));
    }
}
