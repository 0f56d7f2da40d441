//! A per-device caching allocator: freed blocks are kept and handed back to later requests on
//! the same stream, so steady-state model execution makes (almost) no `hipMalloc`/`hipFree`
//! calls, including LLM decode whose `Tensor::cat` KV cache grows every token.
//!
//! Policy:
//! - Sizes round up to a bucket: 512-byte granularity up to 8 KiB, then 16 buckets per power
//!   of two (steps of 1/32 of the next power of two), so padding stays under 1/16 of the
//!   request. A block handed out is always exactly its request's bucket.
//! - Hit path: a released block is parked in an exact-bucket free list of its stream (a hash
//!   map lookup and a `Vec` push/pop, no heap allocation once a list exists); a request of the
//!   same bucket takes it back in O(1).
//! - Segments (`segments.rs`): every raw allocation is a segment that can be carved. On an
//!   exact-bucket miss the request is cut from the smallest free piece of the stream that holds
//!   it (best fit in an ordered set, O(log n)), the rest staying a free piece. If none fits,
//!   the stream's parked blocks are merged with their free neighbours first and the search
//!   repeated. Why: a growing KV cache asks each token for a slightly larger block while the
//!   previous one is still alive, so exact buckets (and any "bounded factor above the request"
//!   rule over whole blocks, which just moves the crossing) miss once per tensor per bucket,
//!   and the smaller blocks freed behind them never fit again. Merged neighbours do fit.
//! - Room: a miss of a stream that already holds free memory that does not fit (sizes are
//!   moving) allocates a segment with room: 2 MiB for requests up to 1 MiB, 20 MiB up to
//!   10 MiB, else the request rounded up to 2 MiB (PyTorch's sizes). A miss on a stream with
//!   no free memory (first use, weights loaded without frees) allocates the exact bucket. If
//!   the room does not fit the device, the exact bucket is allocated instead.
//! - Classes: requests up to 1 MiB are small, larger ones large. A request is carved from a
//!   segment of its own class when one fits, so small temporaries do not fragment large
//!   segments, and from the other class's only before a raw allocation (a large request then
//!   uses what a cache growing past 1 MiB left behind in small segments).
//! - Waste: a block is exactly its bucket (under 1/16 over the request); carving never hands
//!   out a bigger piece. Held but unused memory is the parked blocks, as before, plus free
//!   pieces of segments, which merging recovers except for the room of the newest segments
//!   and whatever a class no longer asked for keeps (both returned by a trim). Simulated
//!   decodes with temporaries (unit tests in `segments.rs`): a 1.1B llama (44 k/v caches of
//!   512 B/token, 300 tokens) keeps cached bytes under live + 2 MiB and makes 3 raw
//!   allocations in the 280 tokens after warm-up. On the null HIP double
//!   (`tests/hip-on-cuda/null-host.sh`, tokens 5-20) the f16 1.1B decode went from 42 raw
//!   allocations a token with exact buckets alone to 0, the GGUF q4_0 one from 13.5 to 0.02;
//!   an 8B llama (64 caches of 2 KiB/token, 700 tokens, crossing 1 MiB a cache) keeps cached
//!   under live and makes 35 in 680.
//! - Repeats: exact buckets served a repeated workload from the cache by construction; with
//!   carving it depends on the layout. Random workloads of 500 B to 3 MiB blocks need at most
//!   one more segment over five repeats (11 of 200 in the unit test), never more.
//! - A block freed by a buffer of stream S is reused only for stream S, and a segment's pieces
//!   all belong to the stream it was allocated for. Work on one stream runs in order, so the
//!   new owner's first use cannot overtake the old owner's last use. Blocks of other streams
//!   are never handed out: they are only returned to the device by [`CachingAllocator::trim`],
//!   which synchronises the device first and frees every segment with nothing handed out
//!   (free pieces of segments still in use stay cached).
//! - When the device is out of memory, the cache is trimmed and the allocation retried once;
//!   if it still fails the error gives the requested size and the device's free/total bytes.
//!
//! - Graph pools (see [`crate::graph`]): while a stream captures a graph, its allocations come
//!   from a private pool of the capture, and blocks of a pool return only to that pool. A pool
//!   lives while a graph or executable graph made from it does, so memory a graph uses as
//!   scratch is never handed to other work that a later launch of the graph would overwrite.
//!   Pool blocks are whole raw allocations, never carved or merged while their pool lives.
//!   When the last owner drops the pool, its blocks go to the general cache of the capture's
//!   stream (each a segment of its own). While any capture is in progress the cache is not
//!   trimmed (trimming synchronises the device, which a capture forbids); an allocation that
//!   finds the device full then fails.
//!
//! The raw memory source is the [`RawMemory`] trait, implemented by [`DeviceMemory`] for HIP and
//! by a fake in the unit tests.

mod hash;
mod pool;
mod segments;

use hash::FastMap;
use pool::Pool;
use segments::{segment_size, Segments};
use std::ffi::c_void;

use parking_lot::Mutex;

use std::sync::Arc;

use crate::device::{bind, mem_info, synchronize};
use crate::error::{check, Result, RocmError};
use crate::graph::gate;
use crate::runtime::Runtime;

/// Why a raw allocation failed.
#[derive(Debug)]
pub enum RawAllocError {
    /// The device has no room for it.
    OutOfMemory,
    /// Any other failure.
    Other(RocmError),
}

/// A source of raw device memory, addressed as integers.
pub trait RawMemory: Send + Sync + 'static {
    /// Allocates `bytes` (> 0) bytes.
    fn alloc(&self, bytes: usize) -> std::result::Result<usize, RawAllocError>;
    /// Allocates `bytes` (> 0) bytes for a graph pool while the calling thread captures a
    /// stream. The default is [`RawMemory::alloc`]; HIP's switches the thread to relaxed
    /// capture mode around the call, since `hipMalloc` is otherwise refused while capturing.
    fn alloc_capturing(&self, bytes: usize) -> std::result::Result<usize, RawAllocError> {
        self.alloc(bytes)
    }
    /// Frees a block returned by [`RawMemory::alloc`]. Called only after [`RawMemory::synchronize`],
    /// so no queued work can still use it.
    fn free(&self, addr: usize) -> Result<()>;
    /// Waits for all queued work on the device.
    fn synchronize(&self) -> Result<()>;
    /// Synchronises the device and frees `blocks`. Returns `false` when that was deferred
    /// (HIP's: until no stream of the process records a graph, which both calls would
    /// invalidate; see `crate::graph::gate`); the default runs at once.
    fn release(&self, blocks: Vec<usize>) -> Result<bool> {
        release_now(self, &blocks).map(|()| true)
    }
    /// Free and total bytes of the device.
    fn mem_info(&self) -> Result<(usize, usize)>;
    /// The device ordinal (for error messages).
    fn ordinal(&self) -> usize;
}

/// [`RawMemory`] on a HIP device: `hipMalloc` / `hipFree`.
///
/// Holds the runtime and the ordinal rather than a [`crate::Device`], so a device's own
/// allocator does not keep the device alive.
pub struct DeviceMemory {
    rt: Arc<Runtime>,
    ordinal: usize,
}

impl DeviceMemory {
    /// Raw memory of device `ordinal` of `rt`.
    pub fn new(rt: Arc<Runtime>, ordinal: usize) -> Self {
        Self { rt, ordinal }
    }

    /// Whether this is the memory of `device`.
    pub fn is_device(&self, device: &crate::Device) -> bool {
        Arc::ptr_eq(&self.rt, device.runtime()) && self.ordinal == device.ordinal()
    }
}

impl RawMemory for DeviceMemory {
    fn alloc(&self, bytes: usize) -> std::result::Result<usize, RawAllocError> {
        let hip = self.rt.hip();
        bind(hip, self.ordinal).map_err(RawAllocError::Other)?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; the device is current on this thread.
        let code = unsafe { (hip.hipMalloc)(&mut p, bytes) };
        if code == rocm_sys::hipError_t::hipErrorOutOfMemory {
            return Err(RawAllocError::OutOfMemory);
        }
        check(hip, "hipMalloc", code).map_err(RawAllocError::Other)?;
        Ok(p as usize)
    }

    fn alloc_capturing(&self, bytes: usize) -> std::result::Result<usize, RawAllocError> {
        let Some(exchange) = self.rt.hip().hipThreadExchangeStreamCaptureMode else {
            return self.alloc(bytes);
        };
        let mut mode = rocm_sys::hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        // SAFETY: `mode` is a valid in/out pointer holding a defined capture mode; the call
        // only swaps the calling thread's mode.
        let code = unsafe { exchange(&mut mode) };
        if !code.is_success() {
            return self.alloc(bytes);
        }
        let result = self.alloc(bytes);
        // SAFETY: as above; `mode` now holds the thread's previous mode, restored here.
        let _ = unsafe { exchange(&mut mode) };
        result
    }

    fn free(&self, addr: usize) -> Result<()> {
        let hip = self.rt.hip();
        bind(hip, self.ordinal)?;
        // SAFETY: `addr` came from hipMalloc on this device and the caller synchronised the
        // device, so no queued work uses it.
        let code = unsafe { (hip.hipFree)(addr as *mut c_void) };
        check(hip, "hipFree", code)
    }

    fn synchronize(&self) -> Result<()> {
        synchronize(self.rt.hip(), self.ordinal)
    }

    fn release(&self, blocks: Vec<usize>) -> Result<bool> {
        if let Some(done) = gate::device_wide_now(|| release_now(self, &blocks)) {
            return done.map(|()| true);
        }
        let memory = DeviceMemory::new(self.rt.clone(), self.ordinal);
        Ok(gate::device_wide(move || {
            if let Err(e) = release_now(&memory, &blocks) {
                memory.rt.record_err(e);
            }
        }))
    }

    fn mem_info(&self) -> Result<(usize, usize)> {
        mem_info(self.rt.hip(), self.ordinal)
    }

    fn ordinal(&self) -> usize {
        self.ordinal
    }
}

/// Synchronises `memory`'s device, then frees each of `blocks` (all of them, returning the
/// first error).
fn release_now<B: RawMemory + ?Sized>(memory: &B, blocks: &[usize]) -> Result<()> {
    memory.synchronize()?;
    let mut first_err = None;
    for &addr in blocks {
        if let Err(e) = memory.free(addr) {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

/// A block handed out by the allocator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Device address (0 for a zero-sized block).
    pub addr: usize,
    /// The block's real size: the bucket the request rounded up to.
    pub bytes: usize,
}

/// Counters of the allocator, for tests, benchmarks and `rocm-info`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes in blocks currently handed out.
    pub live_bytes: usize,
    /// Largest `live_bytes` seen.
    pub peak_live_bytes: usize,
    /// Bytes held in the cache, not handed out.
    pub cached_bytes: usize,
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests that needed a raw allocation.
    pub misses: u64,
    /// Raw allocations made.
    pub raw_allocs: u64,
    /// Raw frees made.
    pub raw_frees: u64,
    /// Times the cache was trimmed (by request or on out-of-memory).
    pub trims: u64,
    /// Bytes held free in graph pools (reserved for their graphs, not in `cached_bytes`).
    pub pool_cached_bytes: usize,
    /// Graph pools alive (owned by a capture, graph or executable graph, or waiting for their
    /// last blocks to come back).
    pub pools: usize,
}

#[derive(Default)]
struct State {
    /// Parked free blocks by (stream id, bucket size): the exact-size hit path.
    free: FastMap<(u64, usize), Vec<usize>>,
    /// The raw allocations of the general cache, carved into blocks; free pieces merged.
    segments: Segments,
    stats: AllocatorStats,
    /// Streams being captured: stream id -> the graph pool their allocations go to (`None`:
    /// graph mode's captures, which use the stream's general cache; see
    /// [`CachingAllocator::begin_unpooled_capture`]).
    capturing: FastMap<u64, Option<u64>>,
    /// Graph pools by id.
    pools: FastMap<u64, Pool>,
    /// Blocks handed out from a pool: address -> pool id.
    pool_blocks: FastMap<usize, u64>,
    next_pool: u64,
}

impl State {
    /// Counts a cached block of `size` bytes as handed out.
    fn hand_out(&mut self, size: usize) {
        self.stats.cached_bytes -= size;
        self.stats.live_bytes += size;
        self.stats.peak_live_bytes = self.stats.peak_live_bytes.max(self.stats.live_bytes);
    }

    /// A block of `size` bytes carved from the free pieces of `stream`, after merging the
    /// stream's parked blocks into them if none fits.
    fn carve(&mut self, stream: u64, size: usize) -> Option<usize> {
        if let Some(addr) = self.segments.carve(stream, size) {
            return Some(addr);
        }
        let mut moved = false;
        for (&(s, bucket), addrs) in self.free.iter_mut() {
            if s == stream && !addrs.is_empty() {
                // `retain` keeps the list's capacity: the next release into it does not allocate.
                addrs.retain(|&a| !self.segments.insert_free(a, bucket, s));
                moved = true;
            }
        }
        if moved {
            self.segments.carve(stream, size)
        } else {
            None
        }
    }
}

/// The caching allocator of one device. See the module documentation for its policy.
pub struct CachingAllocator<B: RawMemory = DeviceMemory> {
    backend: B,
    state: Mutex<State>,
}

/// The bucket (real block size) a request of `bytes` is rounded up to.
pub fn bucket_size(bytes: usize) -> usize {
    const SMALL: usize = 512;
    if bytes <= 8 * 1024 {
        return bytes.div_ceil(SMALL).max(1) * SMALL;
    }
    let pow = bytes
        .checked_next_power_of_two()
        .unwrap_or(usize::MAX / 2 + 1);
    let step = (pow / 32).max(SMALL);
    bytes.div_ceil(step).saturating_mul(step)
}

impl<B: RawMemory> CachingAllocator<B> {
    /// An empty allocator over `backend`.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            state: Mutex::new(State::default()),
        }
    }

    /// The raw memory source.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// A block of at least `bytes` bytes for use on stream `stream_id`.
    pub fn allocate(&self, bytes: usize, stream_id: u64) -> Result<Block> {
        if bytes == 0 {
            return Ok(Block { addr: 0, bytes: 0 });
        }
        let size = bucket_size(bytes);
        let (capturing, seg) = {
            let mut st = self.state.lock();
            let capturing = match st.capturing.get(&stream_id) {
                Some(&Some(pool)) => {
                    drop(st);
                    return self.allocate_in_pool(bytes, size, pool);
                }
                Some(None) => true,
                None => false,
            };
            let hit = match st.free.get_mut(&(stream_id, size)).and_then(Vec::pop) {
                Some(addr) => Some(addr),
                None => st.carve(stream_id, size),
            };
            if let Some(addr) = hit {
                st.stats.hits += 1;
                st.hand_out(size);
                return Ok(Block { addr, bytes: size });
            }
            st.stats.misses += 1;
            // The stream holds free memory, but no piece of it fits even after merging: sizes
            // are moving (a growing cache, changing shapes), so take room.
            let seg = if st.segments.has_free(stream_id) {
                segment_size(size)
            } else {
                size
            };
            (capturing, seg)
        };
        let raw = |bytes| {
            if capturing {
                self.backend.alloc_capturing(bytes)
            } else {
                self.backend.alloc(bytes)
            }
        };
        let (addr, seg) = match raw(seg) {
            Ok(a) => (a, seg),
            Err(RawAllocError::OutOfMemory) if seg > size => match raw(size) {
                Ok(a) => (a, size),
                Err(e) => return self.after_oom(e, bytes, size, stream_id),
            },
            Err(e) => return self.after_oom(e, bytes, size, stream_id),
        };
        Ok(self.add_segment(addr, seg, size, stream_id))
    }

    /// Handles a failed raw allocation of a request of `bytes` (bucket `size`): out of memory
    /// and no capture in progress, the cache is trimmed, then the request is served from what
    /// trimming merged or by one more raw allocation.
    fn after_oom(
        &self,
        err: RawAllocError,
        bytes: usize,
        size: usize,
        stream_id: u64,
    ) -> Result<Block> {
        match err {
            RawAllocError::Other(e) => return Err(e),
            // Trimming synchronises the device, which a capture forbids.
            RawAllocError::OutOfMemory if !self.state.lock().capturing.is_empty() => {
                return Err(self.out_of_memory(bytes))
            }
            RawAllocError::OutOfMemory => {}
        }
        self.trim()?;
        {
            let mut st = self.state.lock();
            if let Some(addr) = st.carve(stream_id, size) {
                st.hand_out(size);
                return Ok(Block { addr, bytes: size });
            }
        }
        match self.backend.alloc(size) {
            Ok(addr) => Ok(self.add_segment(addr, size, size, stream_id)),
            Err(RawAllocError::Other(e)) => Err(e),
            Err(RawAllocError::OutOfMemory) => Err(self.out_of_memory(bytes)),
        }
    }

    /// Records a raw allocation of `seg` bytes whose first `size` bytes are handed out.
    fn add_segment(&self, addr: usize, seg: usize, size: usize, stream_id: u64) -> Block {
        let mut st = self.state.lock();
        st.stats.raw_allocs += 1;
        st.stats.live_bytes += size;
        st.stats.cached_bytes += seg - size;
        st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.stats.live_bytes);
        st.segments.add(addr, seg, size, stream_id);
        Block { addr, bytes: size }
    }

    /// Returns a block to the cache. Work already queued on `stream_id` may still use it; only
    /// later work on the same stream can receive it again.
    pub fn release(&self, block: Block, stream_id: u64) {
        if block.bytes == 0 {
            return;
        }
        let mut st = self.state.lock();
        st.stats.live_bytes = st.stats.live_bytes.saturating_sub(block.bytes);
        let mut stream_id = stream_id;
        if !st.pool_blocks.is_empty() {
            match pool::release(&mut st, block) {
                pool::Released::Kept => return,
                pool::Released::ToCache(s) => stream_id = s,
                pool::Released::NotPooled => {}
            }
        }
        st.stats.cached_bytes += block.bytes;
        st.free
            .entry((stream_id, block.bytes))
            .or_default()
            .push(block.addr);
    }

    fn out_of_memory(&self, requested: usize) -> RocmError {
        let (free, total) = self.backend.mem_info().unwrap_or((0, 0));
        RocmError::OutOfMemory {
            ordinal: self.backend.ordinal(),
            requested,
            free,
            total,
        }
    }

    /// Synchronises the device and frees every segment with no block handed out (not the
    /// blocks reserved in graph pools); free pieces of segments still in use stay cached.
    /// Returns the bytes released: 0 when another stream of the process records a
    /// graph, in which case the blocks are freed when the last recording ends. Refused while
    /// a capture of this allocator is in progress.
    pub fn trim(&self) -> Result<usize> {
        let blocks: Vec<(usize, usize)> = {
            let mut st = self.state.lock();
            if let Some(&stream) = st.capturing.keys().next() {
                return Err(RocmError::NotCapturable {
                    op: "CachingAllocator::trim",
                    stream,
                    why: "trimming synchronises the device",
                });
            }
            st.stats.trims += 1;
            let st = &mut *st;
            for ((stream, size), addrs) in std::mem::take(&mut st.free) {
                for addr in addrs {
                    if !st.segments.insert_free(addr, size, stream) {
                        st.free.entry((stream, size)).or_default().push(addr);
                    }
                }
            }
            let whole = st.segments.take_whole();
            st.stats.cached_bytes -= whole.iter().map(|&(_, size)| size).sum::<usize>();
            whole
        };
        if blocks.is_empty() {
            return Ok(0);
        }
        let bytes: usize = blocks.iter().map(|&(_, size)| size).sum();
        let count = blocks.len() as u64;
        let now = self
            .backend
            .release(blocks.into_iter().map(|(addr, _)| addr).collect());
        self.state.lock().stats.raw_frees += count;
        Ok(if now? { bytes } else { 0 })
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> AllocatorStats {
        self.state.lock().stats
    }
}

impl<B: RawMemory> Drop for CachingAllocator<B> {
    fn drop(&mut self) {
        // Blocks still handed out hold an Arc to the allocator, so only cached ones remain.
        let _ = self.trim();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Fake device memory with a capacity, counting calls.
    pub(super) struct Fake {
        capacity: usize,
        used: AtomicUsize,
        next: AtomicUsize,
        pub(super) syncs: AtomicUsize,
        sizes: Mutex<HashMap<usize, usize>>,
    }

    impl Fake {
        pub(super) fn new(capacity: usize) -> Self {
            Fake {
                capacity,
                used: AtomicUsize::new(0),
                next: AtomicUsize::new(0x1000),
                syncs: AtomicUsize::new(0),
                sizes: Mutex::new(HashMap::new()),
            }
        }
    }

    impl Fake {
        /// Bytes allocated and not freed.
        pub(super) fn used(&self) -> usize {
            self.used.load(Ordering::SeqCst)
        }
    }

    impl RawMemory for Fake {
        fn alloc(&self, bytes: usize) -> std::result::Result<usize, RawAllocError> {
            if self.used.load(Ordering::SeqCst) + bytes > self.capacity {
                return Err(RawAllocError::OutOfMemory);
            }
            self.used.fetch_add(bytes, Ordering::SeqCst);
            let a = self.next.fetch_add(bytes, Ordering::SeqCst);
            self.sizes.lock().insert(a, bytes);
            Ok(a)
        }
        fn free(&self, addr: usize) -> Result<()> {
            let size = self.sizes.lock().remove(&addr).expect("double free");
            self.used.fetch_sub(size, Ordering::SeqCst);
            Ok(())
        }
        fn synchronize(&self) -> Result<()> {
            self.syncs.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn mem_info(&self) -> Result<(usize, usize)> {
            Ok((
                self.capacity - self.used.load(Ordering::SeqCst),
                self.capacity,
            ))
        }
        fn ordinal(&self) -> usize {
            0
        }
    }

    #[test]
    fn buckets_round_up_with_bounded_waste() {
        assert_eq!(bucket_size(1), 512);
        assert_eq!(bucket_size(512), 512);
        assert_eq!(bucket_size(513), 1024);
        assert_eq!(bucket_size(8192), 8192);
        assert_eq!(bucket_size(8193), 8192 + 512);
        assert_eq!(bucket_size(1 << 20), 1 << 20);
        assert_eq!(bucket_size((1 << 20) + 1), (1 << 20) + (1 << 16));
        for n in [1usize, 700, 9000, 65_537, 1_000_001, 123_456_789, 3 << 30] {
            let b = bucket_size(n);
            assert!(b >= n, "{n} -> {b}");
            assert!(b - n <= (n / 16).max(511), "{n} -> {b} wastes too much");
            assert_eq!(bucket_size(b), b, "a bucket maps to itself");
        }
    }

    #[test]
    fn same_stream_reuses_other_stream_does_not() {
        let a = CachingAllocator::new(Fake::new(1 << 30));
        let b1 = a.allocate(1000, 1).unwrap();
        a.release(b1, 1);
        let b2 = a.allocate(900, 1).unwrap();
        assert_eq!(b1, b2, "same bucket, same stream: reused");
        a.release(b2, 1);
        let b3 = a.allocate(1000, 2).unwrap();
        assert_ne!(b3.addr, b1.addr, "another stream never gets a cached block");
        let s = a.stats();
        assert_eq!((s.hits, s.misses, s.raw_allocs), (1, 2, 2));
        assert_eq!(s.live_bytes, 1024);
        assert_eq!(s.cached_bytes, 1024);
    }

    #[test]
    fn zero_sized_blocks_never_touch_the_device() {
        let a = CachingAllocator::new(Fake::new(0));
        let b = a.allocate(0, 1).unwrap();
        assert_eq!(b, Block { addr: 0, bytes: 0 });
        a.release(b, 1);
        assert_eq!(a.stats(), AllocatorStats::default());
    }

    #[test]
    fn out_of_memory_trims_and_retries_once() {
        let a = CachingAllocator::new(Fake::new(4096));
        let b = a.allocate(3000, 1).unwrap();
        a.release(b, 1);
        // Needs the cached 3 KiB (bucket 3072) back: served after an automatic trim.
        let c = a.allocate(2048, 2).unwrap();
        let s = a.stats();
        assert_eq!(s.trims, 1);
        assert_eq!(s.cached_bytes, 0);
        assert_eq!(a.backend().syncs.load(Ordering::SeqCst), 1);
        // Now truly out of memory: typed error with the numbers.
        match a.allocate(4096, 1) {
            Err(RocmError::OutOfMemory {
                requested,
                free,
                total,
                ..
            }) => {
                assert_eq!((requested, free, total), (4096, 2048, 4096));
            }
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
        a.release(c, 2);
    }

    #[test]
    fn trim_returns_everything_and_drop_trims() {
        let fake = Fake::new(1 << 20);
        let a = CachingAllocator::new(fake);
        let blocks: Vec<_> = (0..10)
            .map(|i| a.allocate(100 * (i + 1), 7).unwrap())
            .collect();
        for b in blocks {
            a.release(b, 7);
        }
        assert!(a.stats().cached_bytes > 0);
        let released = a.trim().unwrap();
        let expected: usize = (0..10).map(|i| bucket_size(100 * (i + 1))).sum();
        assert_eq!(released, expected);
        assert_eq!(a.stats().raw_frees, 10);
        assert_eq!(a.backend().used.load(Ordering::SeqCst), 0);
        assert_eq!(a.trim().unwrap(), 0);
    }

    #[test]
    fn concurrent_use_keeps_counters_consistent() {
        let a = Arc::new(CachingAllocator::new(Fake::new(1 << 30)));
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for i in 0..200usize {
                        let b = a.allocate(64 + (i % 7) * 1000, t).unwrap();
                        a.release(b, t);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let s = a.stats();
        assert_eq!(s.hits + s.misses, 800);
        assert_eq!(s.live_bytes, 0);
        assert!(
            s.misses <= 4 * 7,
            "each thread needs at most 7 distinct buckets"
        );
    }
}
