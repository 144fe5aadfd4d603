//! A hash map whose copies share their shards until one of them writes (copy on write per shard). The
//! watched cluster state is one: the watches keep changing it while the engines of earlier states still
//! read their copies, and a change copies the one shard it touches (a 64th of the map), never the whole
//! map, so a copy per rebuild costs O(shards) and a change O(map / shards).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::Arc;

/// How many shards a map has once it holds anything.
const SHARDS: usize = 64;

/// The map; `Clone` copies 64 pointers.
#[derive(Debug, Clone)]
pub struct CowMap<K, V> {
    /// Empty until the first insert (most maps of files stay small or empty), then [`SHARDS`] long.
    shards: Vec<Arc<HashMap<K, V>>>,
    /// Picks the shard; copies share it, so a key lands in the same shard in every copy.
    hasher: RandomState,
    len: usize,
}

impl<K, V> Default for CowMap<K, V> {
    fn default() -> Self {
        CowMap {
            shards: Vec::new(),
            hasher: RandomState::new(),
            len: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> CowMap<K, V> {
    fn shard_of<Q: Hash + ?Sized>(&self, key: &Q) -> usize {
        // The modulo of a 64-bit hash by a small power of two: the low bits, which SipHash mixes well.
        (self.hasher.hash_one(key) % SHARDS as u64) as usize
    }

    /// The value of `key`.
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.shards.is_empty() {
            return None;
        }
        self.shards[self.shard_of(key)].get(key)
    }

    /// Sets `key` to `value`; the previous value. Copies the shard when a copy of the map shares it.
    pub fn insert(&mut self, key: K, value: V) -> Option<V> {
        if self.shards.is_empty() {
            self.shards = (0..SHARDS).map(|_| Arc::default()).collect();
        }
        let i = self.shard_of(&key);
        let old = Arc::make_mut(&mut self.shards[i]).insert(key, value);
        if old.is_none() {
            self.len += 1;
        }
        old
    }

    /// Removes `key`; its value. Copies the shard when a copy of the map shares it and holds the key.
    pub fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        if self.shards.is_empty() {
            return None;
        }
        let i = self.shard_of(key);
        if !self.shards[i].contains_key(key) {
            return None;
        }
        let old = Arc::make_mut(&mut self.shards[i]).remove(key);
        if old.is_some() {
            self.len -= 1;
        }
        old
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(|s| s.iter())
    }
}

impl<K: Hash + Eq + Clone, V: Clone> FromIterator<(K, V)> for CowMap<K, V> {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = CowMap::default();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

/// Equal when they hold the same entries (however they were sharded).
impl<K: Hash + Eq + Clone, V: Clone + PartialEq> PartialEq for CowMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_keeps_its_entries_and_shares_untouched_shards() {
        let mut a: CowMap<String, u32> = (0..1000).map(|i| (i.to_string(), i)).collect();
        assert_eq!(a.len(), 1000);
        let b = a.clone();
        assert_eq!(a.insert("7".into(), 70), Some(7));
        assert_eq!(a.remove("8"), Some(8));
        assert_eq!(a.remove("8"), None);
        assert_eq!(a.insert("new".into(), 1), None);
        assert_eq!((a.get("7"), b.get("7")), (Some(&70), Some(&7)));
        assert_eq!((a.get("8"), b.get("8")), (None, Some(&8)));
        assert_eq!((a.len(), b.len()), (1000, 1000));
        assert_ne!(a, b);
        // At most the three shards written were copied; the rest are the same allocations.
        let shared = (0..SHARDS)
            .filter(|&i| Arc::ptr_eq(&a.shards[i], &b.shards[i]))
            .count();
        assert!(shared >= SHARDS - 3, "{shared} shards shared");
        let same: CowMap<String, u32> = b.iter().map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(same, b);
        assert_eq!(CowMap::<String, u32>::default().len(), 0);
        assert_eq!(CowMap::<String, u32>::default().get("x"), None);
    }
}
