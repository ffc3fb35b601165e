//! A map kept in key order whose entries also sit at a slot number, for the registry of remote topics and processes.
//!
//! Every remote entity's registration arrives again every refresh, and a repeat only refreshes its entry
//! (`repeat`): with the slot the repeat index remembers, that is one `Vec` access instead of a search of a
//! `BTreeMap` whose keys start with the host name (a string compared through a pointer per node visited, memory the
//! idle process's cache no longer holds). A slot stays valid until an entry is removed: the last entry then moves
//! into the freed slot, so a remembered slot is a hint to check against the entry found there
//! ([`SlotMap::slot`] finds the new one).

use std::collections::BTreeMap;
use std::ops::RangeBounds;

/// Entries in a `Vec`, indexed by key in order.
#[derive(Debug)]
pub(super) struct SlotMap<K, V> {
    index: BTreeMap<K, usize>,
    slots: Vec<(K, V)>,
}

impl<K, V> Default for SlotMap<K, V> {
    fn default() -> Self {
        SlotMap { index: BTreeMap::new(), slots: Vec::new() }
    }
}

impl<K: Ord + Clone, V> SlotMap<K, V> {
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn contains_key(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.index.get(key).map(|&i| &self.slots[i].1)
    }

    pub(super) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.index.get(key).map(|&i| &mut self.slots[i].1)
    }

    /// The slot of `key`'s entry.
    pub(super) fn slot(&self, key: &K) -> Option<usize> {
        self.index.get(key).copied()
    }

    /// The entry at `slot`, whichever it is.
    pub(super) fn at_mut(&mut self, slot: usize) -> Option<&mut V> {
        self.slots.get_mut(slot).map(|(_, v)| v)
    }

    /// Inserts or replaces (in its slot) `key`'s entry; returns the one replaced.
    pub(super) fn insert(&mut self, key: K, value: V) -> Option<V> {
        match self.index.get(&key) {
            Some(&i) => Some(std::mem::replace(&mut self.slots[i].1, value)),
            None => {
                self.index.insert(key.clone(), self.slots.len());
                self.slots.push((key, value));
                None
            }
        }
    }

    /// Removes `key`'s entry; the last entry moves into its slot.
    pub(super) fn remove(&mut self, key: &K) -> Option<V> {
        let i = self.index.remove(key)?;
        let (_, value) = self.slots.swap_remove(i);
        if let Some((moved, _)) = self.slots.get(i) {
            self.index.insert(moved.clone(), i);
        }
        Some(value)
    }

    /// The entries in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.index.iter().map(|(k, &i)| (k, &self.slots[i].1))
    }

    /// The entries in slot order (no order of the keys: one pass over a `Vec`, for a walk of all of them).
    pub(super) fn iter_unordered(&self) -> impl Iterator<Item = (&K, &V)> {
        self.slots.iter().map(|(k, v)| (k, v))
    }

    /// The values in key order.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.index.values().map(|&i| &self.slots[i].1)
    }

    /// The entries whose keys are in `range`, in key order.
    pub(super) fn range<R: RangeBounds<K>>(&self, range: R) -> impl Iterator<Item = (&K, &V)> {
        self.index.range(range).map(|(k, &i)| (k, &self.slots[i].1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_removals_and_order_stays_the_keys() {
        let mut m = SlotMap::default();
        for k in [5, 1, 3, 9] {
            assert_eq!(m.insert(k, k * 10), None);
        }
        assert_eq!(m.insert(3, 31), Some(30));
        assert_eq!(m.len(), 4);
        assert_eq!(m.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(), [(1, 10), (3, 31), (5, 50), (9, 90)]);
        let s5 = m.slot(&5).unwrap();
        let s9 = m.slot(&9).unwrap();
        assert_eq!(m.at_mut(s5).copied(), Some(50));
        // Removing 5 moves the last one (9) into its slot: the slot now holds 9, and 9's slot says so.
        assert_eq!(m.remove(&5), Some(50));
        assert_eq!(m.slot(&9), Some(s5));
        assert_eq!(m.at_mut(s5).copied(), Some(90));
        assert_eq!(m.at_mut(s9), None);
        assert_eq!(m.slot(&5), None);
        assert_eq!(m.remove(&5), None);
        *m.get_mut(&9).unwrap() += 1;
        assert_eq!(m.get(&9), Some(&91));
        assert_eq!(m.range(2..).map(|(k, _)| *k).collect::<Vec<_>>(), [3, 9]);
        assert_eq!(m.values().copied().collect::<Vec<_>>(), [10, 31, 91]);
        let mut all: Vec<(i32, i32)> = m.iter_unordered().map(|(k, v)| (*k, *v)).collect();
        all.sort();
        assert_eq!(all, [(1, 10), (3, 31), (9, 91)]);
        // Removing the last entry moves nothing.
        let s1 = m.slot(&1).unwrap();
        let last = m.slots.last().map(|(k, _)| *k).unwrap();
        m.remove(&last);
        assert_eq!(m.slot(&1), Some(s1));
        assert!(!m.contains_key(&last));
    }
}
