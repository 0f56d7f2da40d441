//! The registry's kernel table: every kernel looked up so far, found again without a lock or an
//! allocation (each op launch asks for its kernel by name, a few hundred times a decoded
//! token). An open-addressed hash table of write-once slots: a slot, once filled, never
//! changes or empties, so a reader probes with acquire loads and stops at the first empty
//! slot. Inserts are serialised by a mutex, which also guards the few entries whose probe
//! sequence is full (kept in a map, looked up under the lock). A reader that misses while an
//! insert is under way takes the lock and finds the entry there.
//!
//! Why a reader never misses an entry that is in the slots: an insert fills the first empty
//! slot of the key's probe sequence, so every slot before it was full at that moment, and
//! slots never empty; a reader probing the same sequence passes those full slots and reaches
//! the key before any empty one.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::OnceLock;

use candle_rocm_kernels::Module;
use parking_lot::Mutex;

/// Slots of a table (a power of two): several times the kernels one process launches.
const SLOTS: usize = 2048;

/// Slots a lookup probes before it gives up on the slots.
const MAX_PROBES: usize = 32;

/// One entry: its module, its name and the value.
struct Entry<V> {
    module: Module,
    name: Box<str>,
    value: V,
}

impl<V> Entry<V> {
    fn is(&self, module: Module, name: &str) -> bool {
        self.module == module && *self.name == *name
    }
}

/// Values (kernels) by (module, name), write-once (see the module documentation).
pub struct KernelTable<V> {
    slots: Box<[OnceLock<Entry<V>>]>,
    /// Serialises inserts; holds the entries whose probe sequence was full.
    overflow: Mutex<HashMap<(Module, Box<str>), V>>,
}

/// A multiply-rotate hash (FxHash's step) over the module's index and the name, eight bytes
/// at a time, the length mixed into the last word, then mixed so the low bits the table takes
/// depend on every byte.
fn hash(module: Module, name: &str) -> usize {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(K);
    let bytes = name.as_bytes();
    let mut h = step(0, module as u64);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = step(h, u64::from_le_bytes(b));
    }
    let mut last = [0u8; 8];
    for (d, s) in last.iter_mut().zip(words.remainder()) {
        *d = *s;
    }
    h = step(h, u64::from_le_bytes(last) ^ ((bytes.len() as u64) << 56));
    // MurmurHash3's finaliser: every input bit reaches the low bits.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    (h ^ (h >> 33)) as usize
}

impl<V: Clone> KernelTable<V> {
    /// An empty table.
    pub fn new() -> KernelTable<V> {
        KernelTable {
            slots: (0..SLOTS).map(|_| OnceLock::new()).collect(),
            overflow: Mutex::new(HashMap::new()),
        }
    }

    /// The slots `(module, name)` may occupy, in probe order.
    fn probe(&self, module: Module, name: &str) -> impl Iterator<Item = &OnceLock<Entry<V>>> {
        let start = hash(module, name);
        (0..MAX_PROBES).map(move |i| &self.slots[start.wrapping_add(i) & (SLOTS - 1)])
    }

    /// The value when it is in the slots: no lock, no allocation.
    pub fn find(&self, module: Module, name: &str) -> Option<&V> {
        for slot in self.probe(module, name) {
            match slot.get() {
                None => return None,
                Some(e) if e.is(module, name) => return Some(&e.value),
                Some(_) => {}
            }
        }
        None
    }

    /// The value, made by `make` (under the table's lock) and kept on its first lookup:
    /// borrowed from the slots, or owned when its probe sequence is full.
    pub fn get_or_try_insert<E>(
        &self,
        module: Module,
        name: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<Cow<'_, V>, E> {
        if let Some(v) = self.find(module, name) {
            return Ok(Cow::Borrowed(v));
        }
        let mut overflow = self.overflow.lock();
        for slot in self.probe(module, name) {
            match slot.get() {
                // Inserted by another thread since the lock-free look.
                Some(e) if e.is(module, name) => return Ok(Cow::Borrowed(&e.value)),
                Some(_) => {}
                None => {
                    let value = make()?;
                    // Inserts hold the lock, so the slot is still empty and takes this entry.
                    let e = slot.get_or_init(|| Entry {
                        module,
                        name: name.into(),
                        value,
                    });
                    return Ok(Cow::Borrowed(&e.value));
                }
            }
        }
        let key = (module, Box::<str>::from(name));
        if let Some(v) = overflow.get(&key) {
            return Ok(Cow::Owned(v.clone()));
        }
        let value = make()?;
        overflow.insert(key, value.clone());
        Ok(Cow::Owned(value))
    }
}

impl<V: Clone> Default for KernelTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("kernel_{i}_f16")).collect()
    }

    #[test]
    fn values_are_found_again_and_made_once() {
        let t = KernelTable::<usize>::new();
        let made = AtomicUsize::new(0);
        for (i, n) in names(300).iter().enumerate() {
            let v = t.get_or_try_insert(Module::Unary, n, || {
                made.fetch_add(1, Ordering::Relaxed);
                Ok::<_, ()>(i)
            });
            assert_eq!(*v.unwrap(), i);
        }
        for (i, n) in names(300).iter().enumerate() {
            assert_eq!(t.find(Module::Unary, n), Some(&i), "{n}");
            let v = t.get_or_try_insert(Module::Unary, n, || Err(()));
            assert_eq!(*v.unwrap(), i, "found, not made again");
        }
        assert_eq!(made.load(Ordering::Relaxed), 300);
        assert_eq!(
            t.find(Module::Binary, "kernel_0_f16"),
            None,
            "the module is in the key"
        );
        assert_eq!(t.find(Module::Unary, "kernel_0_f1"), None);
    }

    #[test]
    fn names_spread_over_the_slots() {
        let mut used = std::collections::HashSet::new();
        for n in names(1000) {
            used.insert(hash(Module::Unary, &n) & (SLOTS - 1));
        }
        assert!(
            used.len() > 700,
            "{} of 1000 names in distinct slots",
            used.len()
        );
        assert_ne!(hash(Module::Unary, "a"), hash(Module::Binary, "a"));
        assert_ne!(hash(Module::Unary, "ab"), hash(Module::Unary, "ab\0"));
    }

    #[test]
    fn errors_are_not_kept() {
        let t = KernelTable::<u8>::new();
        assert!(t
            .get_or_try_insert(Module::Fill, "x", || Err("no"))
            .is_err());
        assert_eq!(t.find(Module::Fill, "x"), None);
        let v = t.get_or_try_insert(Module::Fill, "x", || Ok::<_, ()>(7));
        assert_eq!(*v.unwrap(), 7);
    }

    #[test]
    fn more_entries_than_slots_overflow_into_the_map() {
        let t = KernelTable::<usize>::new();
        let all = names(SLOTS + 500);
        for (i, n) in all.iter().enumerate() {
            assert_eq!(
                *t.get_or_try_insert(Module::Reduce, n, || Ok::<_, ()>(i))
                    .unwrap(),
                i
            );
        }
        let (mut borrowed, mut owned) = (0, 0);
        for (i, n) in all.iter().enumerate() {
            let v = t.get_or_try_insert(Module::Reduce, n, || Err(())).unwrap();
            assert_eq!(*v, i, "{n}");
            match v {
                Cow::Borrowed(_) => borrowed += 1,
                Cow::Owned(_) => owned += 1,
            }
        }
        assert_eq!(borrowed + owned, all.len());
        assert!(owned >= 500, "{owned} past the slots");
        assert!(borrowed > SLOTS / 2, "{borrowed} in the slots");
    }

    #[test]
    fn threads_racing_on_the_same_names_share_one_value_each() {
        let t = KernelTable::<usize>::new();
        let made = AtomicUsize::new(0);
        let all = names(200);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for (i, n) in all.iter().enumerate() {
                        let v = t.get_or_try_insert(Module::Rows, n, || {
                            made.fetch_add(1, Ordering::Relaxed);
                            Ok::<_, ()>(i)
                        });
                        assert_eq!(*v.unwrap(), i);
                    }
                });
            }
        });
        assert_eq!(made.load(Ordering::Relaxed), 200, "each value made once");
    }
}
