//! Graph pools of the caching allocator: while a stream captures a graph, its allocations
//! come from a pool private to the capture's graphs (see the policy in the parent module).

use super::hash::FastMap;
use super::{Block, CachingAllocator, RawAllocError, RawMemory, State};
use crate::error::{Result, RocmError};

/// A graph pool's bookkeeping.
pub(super) struct Pool {
    /// The stream the pool was made for; its blocks retire to this stream's cache.
    pub(super) stream_id: u64,
    /// Free blocks by bucket size.
    pub(super) free: FastMap<usize, Vec<usize>>,
    /// Blocks handed out and not yet released.
    pub(super) outstanding: usize,
    /// The last owner is gone: released blocks go to the general cache.
    pub(super) retired: bool,
}

/// Where a released block went.
pub(super) enum Released {
    /// Back into its live pool.
    Kept,
    /// Its pool is retired: into the general cache of this stream.
    ToCache(u64),
    /// Not a pool block.
    NotPooled,
}

/// Returns a pool block to its pool (the caller has updated `live_bytes`).
pub(super) fn release(st: &mut State, block: Block) -> Released {
    let Some(id) = st.pool_blocks.remove(&block.addr) else {
        return Released::NotPooled;
    };
    let Some(pool) = st.pools.get_mut(&id) else {
        return Released::NotPooled;
    };
    pool.outstanding = pool.outstanding.saturating_sub(1);
    if !pool.retired {
        pool.free.entry(block.bytes).or_default().push(block.addr);
        st.stats.pool_cached_bytes += block.bytes;
        return Released::Kept;
    }
    let stream_id = pool.stream_id;
    if pool.outstanding == 0 {
        st.pools.remove(&id);
        st.stats.pools = st.pools.len();
    }
    Released::ToCache(stream_id)
}

impl<B: RawMemory> CachingAllocator<B> {
    /// A block of bucket `size` from graph pool `pool`: a free block of the pool, else a new
    /// raw allocation (never a trim: a capture is in progress).
    pub(super) fn allocate_in_pool(&self, bytes: usize, size: usize, pool: u64) -> Result<Block> {
        {
            let mut st = self.state.lock();
            let st = &mut *st;
            let reused = st
                .pools
                .get_mut(&pool)
                .and_then(|p| p.free.get_mut(&size).and_then(Vec::pop));
            if let Some(addr) = reused {
                st.stats.hits += 1;
                st.stats.pool_cached_bytes -= size;
                self.hand_out_pool_block(st, pool, addr, size);
                return Ok(Block { addr, bytes: size });
            }
            st.stats.misses += 1;
        }
        let addr = match self.backend.alloc_capturing(size) {
            Ok(a) => a,
            Err(RawAllocError::Other(e)) => return Err(e),
            Err(RawAllocError::OutOfMemory) => return Err(self.out_of_memory(bytes)),
        };
        let mut st = self.state.lock();
        st.stats.raw_allocs += 1;
        self.hand_out_pool_block(&mut st, pool, addr, size);
        Ok(Block { addr, bytes: size })
    }

    fn hand_out_pool_block(&self, st: &mut State, pool: u64, addr: usize, size: usize) {
        if let Some(p) = st.pools.get_mut(&pool) {
            p.outstanding += 1;
            st.pool_blocks.insert(addr, pool);
        }
        st.stats.live_bytes += size;
        st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.stats.live_bytes);
    }

    /// Creates an empty graph pool for captures on stream `stream_id` and returns its id. The
    /// caller owns it until [`CachingAllocator::retire_pool`]; [`crate::graph::GraphPool`]
    /// does both.
    pub fn create_pool(&self, stream_id: u64) -> u64 {
        let mut st = self.state.lock();
        st.next_pool += 1;
        let id = st.next_pool;
        st.pools.insert(
            id,
            Pool {
                stream_id,
                free: FastMap::default(),
                outstanding: 0,
                retired: false,
            },
        );
        st.stats.pools = st.pools.len();
        id
    }

    /// Routes the allocations of stream `stream_id` to pool `pool` until
    /// [`CachingAllocator::end_pool_capture`].
    pub fn begin_pool_capture(&self, stream_id: u64, pool: u64) -> Result<()> {
        let mut st = self.state.lock();
        match st.pools.get(&pool) {
            Some(p) if !p.retired && p.stream_id == stream_id => {}
            Some(p) if !p.retired => {
                return Err(RocmError::InvalidArgument(format!(
                    "graph pool {pool} belongs to stream #{}, not #{stream_id}",
                    p.stream_id
                )))
            }
            _ => {
                return Err(RocmError::InvalidArgument(format!(
                    "graph pool {pool} does not exist (any more)"
                )))
            }
        }
        if st.capturing.contains_key(&stream_id) {
            return Err(RocmError::InvalidArgument(format!(
                "stream #{stream_id} is already capturing into a graph pool"
            )));
        }
        st.capturing.insert(stream_id, Some(pool));
        Ok(())
    }

    /// Stops routing stream `stream_id`'s allocations to a pool (no-op when none is).
    pub fn end_pool_capture(&self, stream_id: u64) {
        self.state.lock().capturing.remove(&stream_id);
    }

    /// Marks stream `stream_id` as captured by graph mode until
    /// [`CachingAllocator::end_pool_capture`]: its allocations keep coming from its general
    /// cache (graph mode launches each recorded stretch before any other work of the stream,
    /// so stream order protects reuse), raw allocations switch the thread to relaxed capture
    /// mode, and the cache is not trimmed meanwhile.
    pub fn begin_unpooled_capture(&self, stream_id: u64) -> Result<()> {
        let mut st = self.state.lock();
        if st.capturing.contains_key(&stream_id) {
            return Err(RocmError::InvalidArgument(format!(
                "stream #{stream_id} is already being captured"
            )));
        }
        st.capturing.insert(stream_id, None);
        Ok(())
    }

    /// Whether any stream is capturing into a pool (the cache is not trimmed meanwhile).
    pub fn capture_in_progress(&self) -> bool {
        !self.state.lock().capturing.is_empty()
    }

    /// Gives up ownership of pool `pool`: its free blocks join the general cache of its stream
    /// (work queued on that stream is ordered before their next use), and blocks still handed
    /// out follow when released.
    pub fn retire_pool(&self, pool: u64) {
        let mut st = self.state.lock();
        let st = &mut *st;
        st.capturing.retain(|_, p| *p != Some(pool));
        let Some(p) = st.pools.get_mut(&pool) else {
            return;
        };
        p.retired = true;
        let stream_id = p.stream_id;
        for (size, addrs) in std::mem::take(&mut p.free) {
            let n = addrs.len();
            st.stats.pool_cached_bytes -= size * n;
            st.stats.cached_bytes += size * n;
            st.free.entry((stream_id, size)).or_default().extend(addrs);
        }
        if p.outstanding == 0 {
            st.pools.remove(&pool);
        }
        st.stats.pools = st.pools.len();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::super::tests::Fake;
    use super::*;

    #[test]
    fn a_capture_allocates_from_its_pool_and_only_captures_get_pool_blocks() {
        let a = CachingAllocator::new(Fake::new(1 << 30));
        // A block cached before the capture stays with ordinary work.
        let before = a.allocate(1000, 1).unwrap();
        a.release(before, 1);
        let pool = a.create_pool(1);
        a.begin_pool_capture(1, pool).unwrap();
        let x = a.allocate(1000, 1).unwrap();
        assert_ne!(
            x.addr, before.addr,
            "a capture never takes the general cache"
        );
        let y = a.allocate(5000, 1).unwrap();
        a.release(x, 1); // an intermediate freed during the capture
        let z = a.allocate(900, 1).unwrap();
        assert_eq!(z.addr, x.addr, "reused within the pool");
        // Another stream is not capturing: served as usual.
        let other = a.allocate(1000, 2).unwrap();
        assert!(![x.addr, y.addr].contains(&other.addr));
        a.end_pool_capture(1);
        a.release(z, 1);
        a.release(y, 1); // an output of the step, dropped after the capture
        let s = a.stats();
        assert_eq!(s.pool_cached_bytes, 1024 + bucket(5000));
        assert_eq!(s.cached_bytes, 1024);
        // Ordinary work on the capture's stream gets the general cache, never pool blocks.
        let after = a.allocate(1000, 1).unwrap();
        assert_eq!(after.addr, before.addr);
        let fresh = a.allocate(5000, 1).unwrap();
        assert_ne!(fresh.addr, y.addr);
        // The next capture into the same pool reuses the step's memory: no raw allocation.
        let raw = a.stats().raw_allocs;
        a.begin_pool_capture(1, pool).unwrap();
        let x2 = a.allocate(1000, 1).unwrap();
        let y2 = a.allocate(5000, 1).unwrap();
        a.end_pool_capture(1);
        assert_eq!((x2.addr, y2.addr), (x.addr, y.addr));
        assert_eq!(a.stats().raw_allocs, raw);
        for (b, st) in [(x2, 1), (y2, 1), (after, 1), (fresh, 1), (other, 2)] {
            a.release(b, st);
        }
    }

    fn bucket(n: usize) -> usize {
        super::super::bucket_size(n)
    }

    #[test]
    fn a_retired_pool_gives_its_memory_to_its_streams_cache() {
        let a = CachingAllocator::new(Fake::new(1 << 30));
        let pool = a.create_pool(7);
        a.begin_pool_capture(7, pool).unwrap();
        let scratch = a.allocate(2000, 7).unwrap();
        let out = a.allocate(3000, 7).unwrap();
        a.release(scratch, 7);
        a.end_pool_capture(7);
        assert_eq!(a.stats().pools, 1);
        a.retire_pool(pool);
        let s = a.stats();
        assert_eq!((s.pool_cached_bytes, s.cached_bytes), (0, 2048));
        assert_eq!(s.pools, 1, "a block is still out: the pool waits for it");
        // The still-live output returns to the general cache of the pool's stream.
        a.release(out, 7);
        let s = a.stats();
        assert_eq!((s.pools, s.cached_bytes, s.live_bytes), (0, 2048 + 3072, 0));
        assert_eq!(a.allocate(3000, 7).unwrap().addr, out.addr);
        // A retired pool cannot be captured into again.
        assert!(a.begin_pool_capture(7, pool).is_err());
    }

    #[test]
    fn carving_never_reaches_a_live_pools_blocks() {
        let a = CachingAllocator::new(Fake::new(1 << 30));
        let pool = a.create_pool(1);
        a.begin_pool_capture(1, pool).unwrap();
        let scratch: Vec<_> = (1..=4)
            .map(|i| a.allocate(i * 20_000, 1).unwrap())
            .collect();
        a.end_pool_capture(1);
        for &b in &scratch {
            a.release(b, 1);
        }
        let inside = |addr: usize| {
            scratch
                .iter()
                .any(|b| (b.addr..b.addr + b.bytes).contains(&addr))
        };
        // Growing requests on the pool's stream: served by segments of the general cache.
        let mut prev = a.allocate(10_000, 1).unwrap();
        for n in 1..200 {
            let b = a.allocate(10_000 + n * 512, 1).unwrap();
            assert!(
                !inside(b.addr),
                "a live pool's block was carved for other work"
            );
            a.release(std::mem::replace(&mut prev, b), 1);
        }
        a.release(prev, 1);
        // Retired, its blocks join the stream's cache as segments of their own and are reused.
        a.retire_pool(pool);
        assert_eq!(a.stats().pool_cached_bytes, 0);
        let raw = a.stats().raw_allocs;
        let b = a.allocate(80_000, 1).unwrap();
        assert_eq!((b.addr, a.stats().raw_allocs), (scratch[3].addr, raw));
        a.release(b, 1);
        let cached = a.stats().cached_bytes;
        assert_eq!(a.trim().unwrap(), cached);
    }

    #[test]
    fn captures_are_checked_and_never_trim() {
        let a = CachingAllocator::new(Fake::new(8192));
        let pool = a.create_pool(1);
        assert!(
            a.begin_pool_capture(2, pool).is_err(),
            "another stream's pool"
        );
        assert!(a.begin_pool_capture(1, pool + 1).is_err(), "no such pool");
        let cached = a.allocate(4096, 3).unwrap();
        a.release(cached, 3);
        a.begin_pool_capture(1, pool).unwrap();
        assert!(a.begin_pool_capture(1, pool).is_err(), "already capturing");
        assert!(a.capture_in_progress());
        match a.trim() {
            Err(RocmError::NotCapturable { stream: 1, .. }) => {}
            other => panic!("expected NotCapturable, got {other:?}"),
        }
        // The device is full but for the cached block: trimming would synchronise, so the
        // capture's allocation fails instead, and another stream's too.
        let big = a.allocate(4096, 1).unwrap();
        assert!(matches!(
            a.allocate(4096, 1),
            Err(RocmError::OutOfMemory { .. })
        ));
        assert!(matches!(
            a.allocate(4096, 4),
            Err(RocmError::OutOfMemory { .. })
        ));
        assert_eq!(a.backend().syncs.load(Ordering::SeqCst), 0);
        a.end_pool_capture(1);
        assert!(!a.capture_in_progress());
        a.release(big, 1);
        a.retire_pool(pool);
        assert_eq!(a.trim().unwrap(), 8192);
        assert_eq!(a.stats().pools, 0);
    }
}
