//! A map bounded in size for the per-address caches of unwinding and
//! naming: when full, it is emptied before the next insertion, so a long
//! `record` over code that keeps moving cannot grow it without limit, and a
//! lookup costs one hash probe as in a plain map.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// The bound most caches use: entries kept per map.
pub(super) const CACHE_MAX: usize = 1 << 16;

/// A `HashMap` holding at most `MAX` entries (see the module's doc).
pub(super) struct BoundedMap<K, V, const MAX: usize = CACHE_MAX> {
    map: HashMap<K, V>,
}

impl<K, V, const MAX: usize> Default for BoundedMap<K, V, MAX> {
    fn default() -> Self {
        BoundedMap {
            map: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq, V, const MAX: usize> BoundedMap<K, V, MAX> {
    pub(super) fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.get(k)
    }

    /// Insert, emptying the map first when it is full.
    pub(super) fn insert(&mut self, k: K, v: V) {
        if self.map.len() >= MAX {
            self.map.clear();
        }
        self.map.insert(k, v);
    }

    pub(super) fn clear(&mut self) {
        self.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::BoundedMap;

    #[test]
    fn a_full_map_is_emptied_before_the_next_insertion() {
        let mut m: BoundedMap<u32, u32, 2> = BoundedMap::default();
        m.insert(1, 10);
        m.insert(2, 20);
        assert_eq!((m.get(&1), m.get(&2)), (Some(&10), Some(&20)));
        m.insert(3, 30);
        assert_eq!((m.get(&1), m.get(&3)), (None, Some(&30)));
        m.clear();
        assert_eq!(m.get(&3), None);
    }
}
