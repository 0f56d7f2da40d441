//! The hasher of the caching allocator's maps. Their keys are integers the allocator makes
//! itself (stream ids, bucket sizes, device addresses, pool ids), never input an attacker
//! picks, so the standard library's DoS-resistant SipHash buys nothing there and cost about 6%
//! of a decode step's host instructions (a hash per allocation and per release). foldhash's
//! fast hasher (the one hashbrown uses, with a fixed seed) takes a few instructions per
//! integer and spreads consecutive keys over the low bits the table indexes by.

use std::collections::HashMap;

/// A `HashMap` hashed with foldhash's fast hasher.
pub(super) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn keys_of_the_allocator_spread() {
        // (stream, bucket) keys of one stream: 64 consecutive 512-byte buckets land in about
        // as many of 128 buckets as random keys would (50), by the low bits hashbrown uses.
        let state = foldhash::fast::FixedState::default();
        let mut low: Vec<u64> = (1..=64usize)
            .map(|i| state.hash_one((7u64, i * 512)) & 0x7f)
            .collect();
        low.sort_unstable();
        low.dedup();
        assert!(low.len() >= 40, "only {} distinct buckets", low.len());
        assert_ne!(
            state.hash_one((1u64, 512usize)),
            state.hash_one((2u64, 512usize))
        );
    }

    #[test]
    fn a_map_works_as_a_map() {
        let mut m: FastMap<(u64, usize), Vec<usize>> = FastMap::default();
        for i in 0..1000usize {
            m.entry((i as u64 % 3, i * 512)).or_default().push(i);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get(&(1, 512)), Some(&vec![1]));
        assert_eq!(m.get(&(0, 512)), None);
    }
}
