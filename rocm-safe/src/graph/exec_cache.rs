//! Graph mode's executable graphs kept for reuse, keyed by the operations a stretch records,
//! and the rule that picks which one to drop when no room is left.
//!
//! A decode step is cut into several stretches (at [`super::GraphMode::max_nodes`] and at every
//! library call), each its own key, and the keys of a step come back in the same order every
//! step. Plain least-recently-used eviction fails that pattern completely once a step has more
//! distinct stretches than the cache holds: every stretch then evicts the one the next step
//! needs first, and every launch instantiates a graph (a 1.1B decoder's 13 stretches a token
//! against 8 kept executables did exactly that; bench/results, 2026-11-26 22:38Z, has what it
//! cost). So an executable is dropped only once
//! it is stale (unused for [`STALE_AFTER`] times the cache's size in lookups); while every
//! kept one is in use, a new stretch runs on an executable made for that one launch instead
//! ([`Room::Full`]), and the kept ones keep being reused.

/// A stretch's key: the hash of its operations (kernel functions and node kinds) and their
/// count.
pub(crate) type Key = (u64, usize);

/// Lookups, in units of the cache's size, after which an unused executable is stale.
pub(crate) const STALE_AFTER: u64 = 4;

/// What [`ExecCache::make_room`] found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room<E> {
    /// There is room for one more.
    Free,
    /// This stale executable was removed to make room: the caller destroys it.
    Evicted(E),
    /// Every kept executable was used recently: keep the new one for one launch only.
    Full,
}

struct Entry<E> {
    key: Key,
    exec: E,
    last_used: u64,
}

/// Executables by key, at most `capacity` (given at each [`ExecCache::make_room`], so a
/// changed [`super::GraphMode::max_execs`] applies from the next instantiation).
pub(crate) struct ExecCache<E> {
    entries: Vec<Entry<E>>,
    /// Lookups so far.
    clock: u64,
}

impl<E: Copy> ExecCache<E> {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        ExecCache {
            entries: Vec::new(),
            clock: 0,
        }
    }

    /// The executable kept for `key` and its index, marked as used now; counts one lookup.
    pub(crate) fn find(&mut self, key: Key) -> Option<(usize, E)> {
        self.clock += 1;
        let i = self.entries.iter().position(|e| e.key == key)?;
        self.entries[i].last_used = self.clock;
        Some((i, self.entries[i].exec))
    }

    /// Removes and returns the executable at `index` (one the runtime would not update).
    pub(crate) fn remove(&mut self, index: usize) -> Option<E> {
        (index < self.entries.len()).then(|| self.entries.swap_remove(index).exec)
    }

    /// Makes room for one more executable under `capacity` (at least 1): removes stale ones
    /// (the least recently used first) while the cache is full, else says it is full of
    /// executables in use. Call once per new executable; returns one eviction at a time.
    pub(crate) fn make_room(&mut self, capacity: usize) -> Room<E> {
        let capacity = capacity.max(1);
        if self.entries.len() < capacity {
            return Room::Free;
        }
        let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used)
        else {
            return Room::Free;
        };
        let idle = self.clock - self.entries[oldest].last_used;
        // Over capacity (a smaller max_execs): shrink whatever the age.
        if self.entries.len() > capacity || idle > STALE_AFTER * capacity as u64 {
            Room::Evicted(self.entries.swap_remove(oldest).exec)
        } else {
            Room::Full
        }
    }

    /// Keeps `exec` for `key` (after [`Self::make_room`] said there is room), marked as used
    /// now; returns its index.
    pub(crate) fn insert(&mut self, key: Key, exec: E) -> usize {
        self.entries.push(Entry {
            key,
            exec,
            last_used: self.clock,
        });
        self.entries.len() - 1
    }

    /// Every kept executable, removed (graph mode turning off).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = E> + '_ {
        self.entries.drain(..).map(|e| e.exec)
    }

    /// Executables kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `steps` steps of the stretches `keys` through a cache of `capacity` as graph mode
    /// does (find; else make room, destroy what was evicted, keep the new one unless full);
    /// returns (executables made, made for one launch only).
    fn run(
        cache: &mut ExecCache<u32>,
        capacity: usize,
        keys: &[Key],
        steps: usize,
    ) -> (usize, usize) {
        let (mut made, mut once) = (0, 0);
        for _ in 0..steps {
            for &k in keys {
                if cache.find(k).is_some() {
                    continue;
                }
                made += 1;
                match cache.make_room(capacity) {
                    Room::Full => once += 1,
                    Room::Free | Room::Evicted(_) => {
                        cache.insert(k, made as u32);
                    }
                }
            }
        }
        (made, once)
    }

    fn keys(n: usize, salt: u64) -> Vec<Key> {
        (0..n).map(|i| (salt * 1000 + i as u64, 48)).collect()
    }

    #[test]
    fn a_step_that_fits_instantiates_each_stretch_once() {
        let mut c = ExecCache::new();
        assert_eq!(run(&mut c, 64, &keys(26, 1), 100), (26, 0));
        assert_eq!(c.len(), 26);
    }

    #[test]
    fn more_stretches_than_room_still_reuses_what_is_kept() {
        // 13 stretches a step, 8 kept: least-recently-used eviction would instantiate all
        // 13 at every step (1300); here 8 are reused and 5 made for one launch each step.
        let mut c = ExecCache::new();
        let (made, once) = run(&mut c, 8, &keys(13, 1), 100);
        assert_eq!((made, once), (8 + 5 * 100, 5 * 100));
        assert_eq!(c.len(), 8);
    }

    #[test]
    fn a_new_workload_replaces_stale_executables() {
        let mut c = ExecCache::new();
        run(&mut c, 8, &keys(8, 1), 10);
        // Another model's 8 stretches: the old ones turn stale after 4 x 8 lookups, then the
        // new ones are kept and reused.
        let (made, _) = run(&mut c, 8, &keys(8, 2), 100);
        assert!(made < 8 + 40, "made {made}");
        for k in keys(8, 2) {
            assert!(c.find(k).is_some(), "{k:?} kept");
        }
    }

    #[test]
    fn a_smaller_capacity_shrinks_the_cache() {
        let mut c = ExecCache::new();
        run(&mut c, 8, &keys(8, 1), 2);
        let mut evicted = 0;
        while let Room::Evicted(_) = c.make_room(3) {
            evicted += 1;
        }
        // Down to 3 whatever their age; the 3 left were used in the last few lookups.
        assert_eq!((evicted, c.len()), (5, 3));
        assert_eq!(c.make_room(3), Room::Full);
    }

    #[test]
    fn remove_takes_the_index_find_gave() {
        let mut c = ExecCache::new();
        let i = c.insert((7, 3), 70u32);
        assert_eq!(c.find((7, 3)), Some((i, 70)));
        assert_eq!(c.find((7, 4)), None);
        assert_eq!(c.remove(i), Some(70));
        assert_eq!(c.remove(i), None);
        assert_eq!(c.find((7, 3)), None);
    }
}
