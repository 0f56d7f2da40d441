//! The hasher of the caching allocator's maps. Their keys are integers the allocator makes
//! itself (stream ids, bucket sizes, device addresses, pool ids), never input an attacker
//! picks, so the standard library's DoS-resistant SipHash buys nothing there and cost about 6%
//! of a decode step's host instructions (a hash per allocation and per release). This is
//! FxHash's step (rustc-hash 2: add the word, multiply by an odd constant) finished with a
//! folded multiply (foldhash's), a few instructions per integer.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` hashed with [`FxHasher`].
pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// FxHash's step: each word is added to the state, which is then multiplied by an odd
/// constant. The finish folds a full 128-bit product of the state (its high half xor its low
/// half) so every input bit reaches the low bits hashbrown takes the bucket from: rustc-hash's
/// rotation put 64 consecutive 512-byte bucket sizes of one stream in 13 of 128 buckets.
#[derive(Clone, Copy, Default)]
pub(super) struct FxHasher {
    hash: u64,
}

/// rustc-hash 2's multiplier.
const K: u64 = 0xf135_7aea_2e62_a9c5;
/// The finishing multiplier (2^64 / the golden ratio, odd).
const FOLD: u64 = 0x9e37_79b9_7f4a_7c15;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.hash = self.hash.wrapping_add(word).wrapping_mul(K);
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
            // The length tells apart tails that differ only by trailing zero bytes.
            self.add(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 56));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        let p = u128::from(self.hash) * u128::from(FOLD);
        (p as u64) ^ ((p >> 64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash + ?Sized>(v: &T) -> u64 {
        BuildHasherDefault::<FxHasher>::default().hash_one(v)
    }

    #[test]
    fn keys_of_the_allocator_spread() {
        // (stream, bucket) keys of one stream: 64 consecutive 512-byte buckets land in about
        // as many of 128 buckets as random keys would (50), by the low bits hashbrown uses.
        let mut low: Vec<u64> = (1..=64usize)
            .map(|i| hash(&(7u64, i * 512)) & 0x7f)
            .collect();
        low.sort_unstable();
        low.dedup();
        assert!(low.len() >= 45, "only {} distinct buckets", low.len());
        assert_ne!(hash(&(1u64, 512usize)), hash(&(2u64, 512usize)));
        let bytes = |b: &[u8]| {
            let mut h = FxHasher::default();
            h.write(b);
            h.finish()
        };
        assert_ne!(bytes(b"ab"), bytes(b"ab\0"));
        assert_ne!(bytes(b"12345678ab"), bytes(b"12345678"));
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
