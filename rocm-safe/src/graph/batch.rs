//! Graph mode: a [`Stream`] that records its own work into graphs and launches each recorded
//! stretch with one call, instead of one submission per kernel.
//!
//! Turned on with [`Stream::set_graph_mode`], it needs nothing from the code that queues the
//! work (a Candle model runs unmodified):
//! - kernel launches, device-to-device copies, fills and small host-to-device uploads are
//!   recorded into a capture that begins with the first of them;
//! - anything that needs the recorded work to have *run* (a read-back to the host, a
//!   synchronisation, an event for another stream, a library call: rocBLAS, MIOpen, RCCL, a
//!   copy between devices) first ends the capture and launches it ([`Stream::flush_graph`]),
//!   then runs as usual. So does reaching [`GraphMode::max_nodes`].
//!
//! A decode step of an LLM is then one graph: the token's upload starts it and reading the
//! logits (or the sampled token) ends it. The next step records the same kernels with other
//! arguments (the KV cache grew, the position moved): the executable graph of the last stretch
//! with the same kernels in the same order is *updated* (`hipGraphExecUpdate`) rather than
//! instantiated again; up to [`GraphMode::max_execs`] are kept, for the several stretches of a
//! step (`exec_cache` says which one is dropped when none is left).
//!
//! # Why results cannot differ from plain launches
//!
//! Each recorded stretch is launched on its own stream as soon as it ends, before any other
//! work of that stream is queued, so the stream runs the same work in the same order as it
//! would have without graphs. Memory comes from the stream's own cache of the caching
//! allocator (`crate::allocator`) as without graphs: a block freed by the host while its work
//! is only recorded is handed to nothing but later work of the same stream, which is recorded
//! after it or queued after the graph's launch (a graph pool would keep a second cache beside
//! the stream's and raise peak memory). The cache is not trimmed while a stream records, and
//! raw allocations then switch the thread to relaxed capture mode. Uploads are copied
//! into pinned staging memory owned here at once (the caller's data may go away), and that
//! memory is reused only after an event recorded behind the graph that read it has completed.
//!
//! If the runtime refuses a call while recording (it should not: only calls known to be
//! capturable are recorded), what was recorded so far is launched before the error is
//! returned; if the capture itself was invalidated, that work is lost and the error says so
//! ([`RocmError::GraphWorkLost`]), never a silent wrong result.
//!
//! # Other threads
//!
//! The runtime invalidates a capture when anything synchronises the device or frees device or
//! pinned memory while it records (`hipDeviceSynchronize`, `hipFree`, `hipHostFree`, a module
//! unload), whichever stream or thread does it. This crate's own such calls (a cache trim, a
//! dropped [`crate::Device`]'s teardown, direct and pinned frees, library handles' destroy
//! calls) go through a process-wide gate (`crate::graph::gate`) and wait for the last
//! recording to end. Several threads may share a stream in graph mode: an operation that
//! needs the recorded work to have run holds a [`PlainOp`] until it has queued its own work,
//! and meanwhile other threads' work on that stream runs as plain launches instead of
//! beginning a recording that would catch it. What the gate cannot see: code outside this
//! crate calling those runtime functions, and a library synchronising the device inside a
//! call (creating a rocBLAS or MIOpen handle on another thread, an RCCL communicator's
//! teardown); such a call loses the recorded work as [`RocmError::GraphWorkLost`], never as
//! a wrong result.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rocm_sys::{hipError_t, hipGraphExecUpdateResult, hipGraphExec_t, hipGraphNode_t, hipGraph_t};

use super::exec_cache::{ExecCache, Key, Room};
use super::{gate, update_outcome, CaptureMode, GraphApi, UpdateOutcome};
use crate::allocator::CachingAllocator;
use crate::buffer::{byte_len, DeviceBuffer, DeviceRepr};
use crate::error::{check, HipError, Result, RocmError};
use crate::host::PinnedHostBuffer;
use crate::stream::{Event, Stream};

/// How a stream in graph mode batches its work ([`Stream::set_graph_mode`]).
///
/// In graph mode the stream records its kernel launches, device-to-device copies, fills and
/// uploads of up to 1 MiB (copied at once into pinned memory it owns) into HIP graphs, and
/// launches what it recorded, as one graph, before anything that needs the work to have run
/// (a read-back, a synchronisation, an event or wait, a library call, a direct allocation or
/// free) and every [`GraphMode::max_nodes`] operations. Executable graphs are reused through
/// `hipGraphExecUpdate` for stretches that run the same kernels in the same order. Results are
/// those of plain launches, also with several threads sharing the stream and other devices
/// made and dropped meanwhile (see the module documentation, "Other threads", for what can
/// still lose recorded work, as [`RocmError::GraphWorkLost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphMode {
    /// Launch the recorded work after this many operations even when nothing needs its
    /// results yet, so the device starts while the host records the rest (0: no limit).
    pub max_nodes: usize,
    /// After each launch something needed (a read-back, ...), the first recorded stretch ends
    /// after this many operations and each next one after twice as many as the one before,
    /// up to `max_nodes`: the device, idle while the host waited, gets work after a few
    /// operations instead of a whole stretch (0: every stretch ends at `max_nodes`).
    pub first_nodes: usize,
    /// Executable graphs kept for reuse, keyed by the kernels they run (at least 1).
    pub max_execs: usize,
    /// Operations queued as plain launches after each launch that something needed (a
    /// read-back, a synchronisation, ...) before recording begins again. Work that reads a
    /// result back every few operations then never pays for a graph of one or two kernels;
    /// a decode step, hundreds of operations long, loses only these few to plain launches.
    pub plain_head: usize,
    /// Record rocBLAS calls too (rocBLAS documents most of its functions as capturable; the
    /// HIP-on-CUDA harness's double calls cuBLAS, which is). Off: a rocBLAS call launches
    /// what was recorded and runs as usual.
    pub record_blas: bool,
    /// Record RCCL collectives too (outside a `group`; RCCL, like NCCL, lets a blocking
    /// communicator's collectives be captured). Off: a collective launches what was recorded
    /// and is queued as usual, so a tensor-parallel step is cut into one graph per
    /// collective.
    pub record_rccl: bool,
}

impl Default for GraphMode {
    fn default() -> Self {
        GraphMode {
            max_nodes: 0,
            first_nodes: 0,
            max_execs: 64,
            plain_head: 0,
            record_blas: false,
            record_rccl: false,
        }
    }
}

/// What graph mode did on a stream so far ([`Stream::graph_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GraphModeStats {
    /// Graphs launched.
    pub launches: u64,
    /// Operations recorded into them.
    pub nodes: u64,
    /// Executable graphs made (`hipGraphInstantiate`).
    pub instantiations: u64,
    /// Launches that reused an executable graph through `hipGraphExecUpdate`.
    pub updates: u64,
    /// Updates the runtime refused (the graph was instantiated instead).
    pub refused_updates: u64,
    /// Launches on an executable graph made for that launch only: every kept one was in
    /// recent use (a step with more distinct stretches than [`GraphMode::max_execs`]).
    pub uncached: u64,
    /// Host-to-device uploads recorded through the pinned staging memory.
    pub staged_uploads: u64,
}

/// The largest upload recorded through staging memory; larger ones end the graph and run as
/// plain copies.
pub(crate) const MAX_STAGED_BYTES: usize = 1 << 20;
/// Bytes of one staging arena (an upload larger than this gets an arena of its size).
const ARENA_BYTES: usize = 64 << 10;
/// Arenas kept; beyond this the oldest busy one is waited for.
const MAX_ARENAS: usize = 32;
/// Alignment of a staged upload inside an arena.
const STAGE_ALIGN: usize = 256;

/// The kind of a recorded operation, folded into the stretch's key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum NodeKind {
    /// A kernel launch of this function handle.
    Kernel(usize),
    /// A device-to-device copy.
    Copy,
    /// A fill.
    Fill,
    /// A staged host-to-device upload.
    Upload,
    /// A library call (rocBLAS, RCCL).
    Library,
}

impl NodeKind {
    fn code(self) -> u64 {
        match self {
            NodeKind::Kernel(f) => f as u64,
            NodeKind::Copy => 1,
            NodeKind::Fill => 2,
            NodeKind::Upload => 3,
            NodeKind::Library => 4,
        }
    }
}

/// One block of pinned host memory that staged uploads are copied into.
struct Arena {
    buf: PinnedHostBuffer<u8>,
    used: usize,
    /// Recorded behind the launch of the last graph that read this arena.
    busy_until: Option<Arc<Event>>,
}

/// The state of graph mode on one stream (in [`Stream`]'s `batch` slot).
pub(crate) struct Batch {
    mode: GraphMode,
    api: GraphApi,
    allocator: Arc<CachingAllocator>,
    /// A capture is in progress.
    active: bool,
    /// Operations still to queue plainly before recording begins ([`GraphMode::plain_head`]).
    head_left: usize,
    /// The length the ramp after a needed launch sets for the next stretch
    /// ([`GraphMode::first_nodes`]; 0 once the ramp is off).
    ramp: usize,
    nodes: usize,
    key: u64,
    execs: ExecCache<hipGraphExec_t>,
    arenas: Vec<Arena>,
    /// Arenas written by the stretch being recorded, the last one still open.
    in_use: Vec<usize>,
    stats: GraphModeStats,
}

// SAFETY: the raw exec handles are owned by this value and used by one thread at a time (the
// stream's `batch` mutex); HIP allows executable graphs to be used from any thread.
unsafe impl Send for Batch {}

impl Stream {
    /// Turns graph mode on (`Some`) or off (`None`) for this stream (see [`GraphMode`]).
    /// Turning it off launches what was recorded. Fails with
    /// [`RocmError::GraphsUnavailable`] when the runtime lacks graphs, and with
    /// [`RocmError::InvalidArgument`] while a [`crate::graph::Capture`] records this stream.
    pub fn set_graph_mode(&self, mode: Option<GraphMode>) -> Result<()> {
        let mut slot = self.batch.lock();
        let Some(mode) = mode else {
            self.batching.store(false, Ordering::Release);
            return match slot.take() {
                Some(mut b) => b.close(self),
                None => Ok(()),
            };
        };
        let mode = GraphMode {
            max_execs: mode.max_execs.max(1),
            ..mode
        };
        if let Some(b) = slot.as_mut() {
            b.mode = mode;
            b.ramp = mode.first_nodes;
            return Ok(());
        }
        if self.capturing.load(Ordering::Acquire) {
            return Err(RocmError::InvalidArgument(format!(
                "{self:?} is capturing a graph: end the capture before turning graph mode on"
            )));
        }
        let api = *self.device().runtime().graphs()?;
        // Two arenas up front, so the first steps allocate no pinned memory while recording.
        let mut arenas = Vec::with_capacity(2);
        for _ in 0..2 {
            arenas.push(Arena {
                buf: PinnedHostBuffer::new(self.device(), ARENA_BYTES)?,
                used: 0,
                busy_until: None,
            });
        }
        let allocator = self.device().allocator();
        *slot = Some(Batch {
            mode,
            api,
            allocator,
            active: false,
            head_left: mode.plain_head,
            ramp: mode.first_nodes,
            nodes: 0,
            key: 0,
            execs: ExecCache::new(),
            arenas,
            in_use: Vec::new(),
            stats: GraphModeStats::default(),
        });
        self.batching.store(true, Ordering::Release);
        Ok(())
    }

    /// This stream's graph mode, when on.
    pub fn graph_mode(&self) -> Option<GraphMode> {
        self.batch.lock().as_ref().map(|b| b.mode)
    }

    /// Whether graph mode is on and records rocBLAS calls ([`GraphMode::record_blas`]): one
    /// atomic load when it is off (every GEMM asks).
    pub(crate) fn records_blas(&self) -> bool {
        self.mode_says(|m| m.record_blas)
    }

    /// Whether graph mode is on and records RCCL collectives ([`GraphMode::record_rccl`]): one
    /// atomic load when it is off.
    pub(crate) fn records_rccl(&self) -> bool {
        self.mode_says(|m| m.record_rccl)
    }

    /// Whether graph mode is on and `flag` holds for its mode (the lock only when it is on).
    fn mode_says(&self, flag: impl FnOnce(&GraphMode) -> bool) -> bool {
        self.batching.load(Ordering::Acquire)
            && self.batch.lock().as_ref().is_some_and(|b| flag(&b.mode))
    }

    /// What graph mode did on this stream (`None` when it is off).
    pub fn graph_stats(&self) -> Option<GraphModeStats> {
        self.batch.lock().as_ref().map(|b| b.stats)
    }

    /// Launches the work graph mode has recorded on this stream so far (no-op when it is off
    /// or nothing is recorded). Called by every operation that needs the work to have run,
    /// which holds the returned [`PlainOp`] until it has queued (or done) its own work: until
    /// then, work other threads queue on this stream runs as plain launches instead of
    /// beginning a new recording, so the operation is never caught in one.
    pub fn flush_graph(&self) -> Result<PlainOp<'_>> {
        if !self.batching.load(Ordering::Acquire) {
            return Ok(PlainOp { stream: None });
        }
        let mut slot = self.batch.lock();
        if let Some(b) = slot.as_mut() {
            b.flush(self)?;
            b.head_left = b.mode.plain_head;
            b.ramp = b.mode.first_nodes;
        }
        self.plain_ops.fetch_add(1, Ordering::AcqRel);
        Ok(PlainOp { stream: Some(self) })
    }

    /// Queues one capturable operation (`queue` submits it to this stream): recorded when
    /// graph mode is on, else submitted as is.
    pub(crate) fn record(&self, kind: NodeKind, queue: impl FnOnce() -> Result<()>) -> Result<()> {
        if !self.batching.load(Ordering::Acquire) {
            return queue();
        }
        let mut slot = self.batch.lock();
        match slot.as_mut() {
            Some(b) => b.record(self, kind, queue),
            None => queue(),
        }
    }

    /// In graph mode, records the upload of `src` into a new buffer through pinned staging
    /// memory (the host data is copied before this returns). `None` when graph mode is off,
    /// the upload is too large to stage, or another thread's plain operation is in flight on
    /// this stream: the caller copies as usual.
    pub(crate) fn stage_upload<T: DeviceRepr>(
        self: &Arc<Self>,
        src: &[T],
    ) -> Result<Option<DeviceBuffer<T>>> {
        if !self.batching.load(Ordering::Acquire) {
            return Ok(None);
        }
        let bytes = byte_len::<T>(src.len())?;
        if bytes == 0 || bytes > MAX_STAGED_BYTES || self.plain_ops.load(Ordering::Acquire) > 0 {
            return Ok(None);
        }
        {
            let mut slot = self.batch.lock();
            match slot.as_mut() {
                Some(b) if !b.active && b.head_left > 0 => {
                    // Still in the plain head: the caller uploads as usual (one operation).
                    b.head_left -= 1;
                    return Ok(None);
                }
                Some(_) => {}
                None => return Ok(None),
            }
        }
        // Allocated before taking graph mode's lock: an allocation may launch what was
        // recorded to free memory.
        let dst = DeviceBuffer::<T>::alloc_cached(self, src.len())?;
        let mut slot = self.batch.lock();
        let Some(b) = slot.as_mut() else {
            return Ok(None);
        };
        if !b.active {
            if self.plain_ops.load(Ordering::Acquire) > 0 {
                return Ok(None);
            }
            b.begin(self)?;
        }
        let host = b.stage(self, bytes)?;
        // SAFETY: `host` points to `bytes` writable bytes of an arena that no queued or
        // recorded work reads (stage() hands out only free space of an idle arena); `src` holds
        // `bytes` initialised bytes (T: DeviceRepr has no padding); the ranges cannot overlap
        // (pinned arena memory against a caller's slice).
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().cast::<u8>(), host, bytes) };
        let hip = self.device().hip();
        let dst_ptr = dst.device_ptr();
        b.record(self, NodeKind::Upload, || {
            // SAFETY: `dst_ptr` is a fresh device buffer of `bytes` bytes on this stream;
            // `host` is pinned memory that stays allocated and unwritten until an event
            // recorded after the graph's launch has completed (Batch::flush).
            let code = unsafe {
                (hip.hipMemcpyHtoDAsync)(dst_ptr, host.cast::<c_void>(), bytes, self.raw())
            };
            check(hip, "hipMemcpyHtoDAsync", code)
        })?;
        b.stats.staged_uploads += 1;
        Ok(Some(dst))
    }
}

impl Batch {
    /// Begins recording this stream's work.
    fn begin(&mut self, stream: &Stream) -> Result<()> {
        stream.device().bind_to_thread()?;
        self.allocator.begin_unpooled_capture(stream.id())?;
        let hip = stream.device().hip();
        gate::recording_begins();
        // SAFETY: the stream handle is live; Relaxed is one of HIP's defined modes (it lets
        // other threads allocate and load modules while this stream records).
        let code = unsafe { (self.api.begin)(stream.raw(), CaptureMode::Relaxed.raw()) };
        if let Err(e) = check(hip, "hipStreamBeginCapture", code) {
            self.allocator.end_pool_capture(stream.id());
            gate::recording_ends();
            return Err(e);
        }
        self.active = true;
        self.nodes = 0;
        self.key = 0xcbf2_9ce4_8422_2325;
        Ok(())
    }

    /// Records one operation; launches the stretch at `max_nodes`, or before returning an
    /// error of `queue`.
    fn record(
        &mut self,
        stream: &Stream,
        kind: NodeKind,
        queue: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        if !self.active {
            // Another thread's plain operation is in flight on this stream (`PlainOp`): a
            // capture begun now would catch it. Queue this one as a plain launch.
            if stream.plain_ops.load(Ordering::Acquire) > 0 {
                return queue();
            }
            if self.head_left > 0 {
                self.head_left -= 1;
                return queue();
            }
            self.begin(stream)?;
        }
        if let Err(e) = queue() {
            return match self.flush(stream) {
                Ok(()) => Err(e),
                Err(lost) => Err(lost),
            };
        }
        self.nodes += 1;
        self.key = (self.key ^ kind.code()).wrapping_mul(0x0100_0000_01b3);
        let limit = match (self.ramp, self.mode.max_nodes) {
            (0, max) => max,
            (ramp, 0) => ramp,
            (ramp, max) => ramp.min(max),
        };
        if limit > 0 && self.nodes >= limit {
            self.flush(stream)?;
            self.ramp = self.ramp.saturating_mul(2);
        }
        Ok(())
    }

    /// Space for `bytes` of staged upload in an idle arena, marked as read by the stretch
    /// being recorded.
    fn stage(&mut self, stream: &Stream, bytes: usize) -> Result<*mut u8> {
        if let Some(&i) = self.in_use.last() {
            let a = &mut self.arenas[i];
            let at = a.used.next_multiple_of(STAGE_ALIGN);
            if at + bytes <= a.buf.len() {
                a.used = at + bytes;
                // SAFETY: `at + bytes` is within the arena's allocation.
                return Ok(unsafe { a.buf.as_mut_ptr().add(at) });
            }
        }
        let i = self.idle_arena(stream, bytes)?;
        self.in_use.push(i);
        let a = &mut self.arenas[i];
        a.used = bytes;
        Ok(a.buf.as_mut_ptr())
    }

    /// An arena of at least `bytes` that no launched graph still reads (waiting for the oldest
    /// when [`MAX_ARENAS`] are busy).
    fn idle_arena(&mut self, stream: &Stream, bytes: usize) -> Result<usize> {
        for (i, a) in self.arenas.iter_mut().enumerate() {
            if self.in_use.contains(&i) || a.buf.len() < bytes {
                continue;
            }
            let idle = match &a.busy_until {
                None => true,
                Some(e) => e.is_complete()?,
            };
            if idle {
                a.busy_until = None;
                a.used = 0;
                return Ok(i);
            }
        }
        if self.arenas.len() >= MAX_ARENAS {
            if let Some(i) = (0..self.arenas.len())
                .find(|&i| !self.in_use.contains(&i) && self.arenas[i].buf.len() >= bytes)
            {
                let a = &mut self.arenas[i];
                if let Some(e) = a.busy_until.take() {
                    e.synchronize()?;
                }
                a.used = 0;
                return Ok(i);
            }
        }
        let buf = PinnedHostBuffer::new(stream.device(), bytes.max(ARENA_BYTES))?;
        self.arenas.push(Arena {
            buf,
            used: 0,
            busy_until: None,
        });
        Ok(self.arenas.len() - 1)
    }

    /// Ends the capture and launches what it recorded (no-op when nothing is recorded).
    fn flush(&mut self, stream: &Stream) -> Result<()> {
        if !self.active {
            return Ok(());
        }
        self.active = false;
        let _ = stream.device().bind_to_thread();
        let hip = stream.device().hip();
        let mut graph: hipGraph_t = std::ptr::null_mut();
        // SAFETY: the stream is live and capturing (begun by `begin`, ended only here, once);
        // `graph` is a valid out-pointer.
        let code = unsafe { (self.api.end)(stream.raw(), &mut graph) };
        self.allocator.end_pool_capture(stream.id());
        gate::recording_ends();
        let graph = OwnedGraph {
            raw: graph,
            api: self.api,
        };
        let nodes = self.nodes;
        if let Err(e) = check(hip, "hipStreamEndCapture", code) {
            return Err(lost(stream, nodes, e));
        }
        if nodes == 0 {
            // Begun for an operation that then failed before queueing anything.
            return Ok(());
        }
        if graph.raw.is_null() {
            return Err(lost(
                stream,
                nodes,
                RocmError::InvalidArgument("hipStreamEndCapture returned no graph".into()),
            ));
        }
        let launched = self.launch(stream, &graph, (self.key, nodes));
        drop(graph);
        launched.map_err(|e| lost(stream, nodes, e))?;
        self.stats.launches += 1;
        self.stats.nodes += nodes as u64;
        if !self.in_use.is_empty() {
            let event = Arc::new(Event::new(stream.device(), false)?);
            event.record_raw(stream)?;
            for i in std::mem::take(&mut self.in_use) {
                self.arenas[i].busy_until = Some(event.clone());
            }
        }
        Ok(())
    }

    /// Updates (or instantiates) the executable graph for stretch `key` from `graph` and
    /// launches it on `stream`.
    fn launch(&mut self, stream: &Stream, graph: &OwnedGraph, key: Key) -> Result<()> {
        let hip = stream.device().hip();
        let mut kept = None;
        if let Some((i, exec)) = self.execs.find(key) {
            let mut node: hipGraphNode_t = std::ptr::null_mut();
            let mut result = hipGraphExecUpdateResult::hipGraphExecUpdateError;
            // SAFETY: both handles are live; `node` and `result` are valid out-pointers.
            let code = unsafe { (self.api.exec_update)(exec, graph.raw, &mut node, &mut result) };
            match update_outcome(code, result) {
                Ok(UpdateOutcome::Updated) => {
                    self.stats.updates += 1;
                    kept = Some(exec);
                }
                Ok(UpdateOutcome::NeedsInstantiate(_)) => {
                    self.stats.refused_updates += 1;
                    if let Some(old) = self.execs.remove(i) {
                        self.destroy_exec(stream, old);
                    }
                }
                Err(code) => {
                    return Err(RocmError::Hip(HipError::new(
                        hip,
                        "hipGraphExecUpdate",
                        code,
                    )));
                }
            }
        }
        let (exec, once) = match kept {
            Some(exec) => (exec, false),
            None => {
                let keep = loop {
                    match self.execs.make_room(self.mode.max_execs) {
                        Room::Free => break true,
                        Room::Full => break false,
                        Room::Evicted(old) => self.destroy_exec(stream, old),
                    }
                };
                let exec = self.instantiate(stream, graph)?;
                if keep {
                    self.execs.insert(key, exec);
                } else {
                    self.stats.uncached += 1;
                }
                (exec, !keep)
            }
        };
        // SAFETY: the exec and stream are live and of the same device; the recorded work uses
        // memory that is alive: blocks of buffers freed while recording went back to this
        // stream's cache, which hands them only to work recorded after their last use or
        // queued after this launch (the cache is not trimmed while recording), and staged
        // uploads read arenas kept until an event behind this launch completes.
        let code = unsafe { (self.api.launch)(exec, stream.raw()) };
        if once {
            // Made for this launch only (every kept exec is in use): destroying it now lets
            // the launch complete and frees it afterwards.
            self.destroy_exec(stream, exec);
        }
        check(hip, "hipGraphLaunch", code)
    }

    /// Instantiates `graph` (counted in the stats).
    fn instantiate(&mut self, stream: &Stream, graph: &OwnedGraph) -> Result<hipGraphExec_t> {
        let mut raw: hipGraphExec_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; `graph.raw` is a live graph; the error node
        // and log buffer are optional (null, size 0).
        let code = unsafe {
            (self.api.instantiate)(
                &mut raw,
                graph.raw,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        check(stream.device().hip(), "hipGraphInstantiate", code)?;
        self.stats.instantiations += 1;
        Ok(raw)
    }

    fn destroy_exec(&self, stream: &Stream, raw: hipGraphExec_t) {
        // SAFETY: `raw` came from hipGraphInstantiate and was removed from `execs` (or never
        // kept there), so it is destroyed once; launches already queued complete normally.
        let code = unsafe { (self.api.exec_destroy)(raw) };
        if let Err(e) = check(stream.device().hip(), "hipGraphExecDestroy", code) {
            stream.device().runtime().record_err(e);
        }
    }

    /// Launches what is recorded, then releases everything graph mode holds.
    pub(crate) fn close(&mut self, stream: &Stream) -> Result<()> {
        let flushed = self.flush(stream);
        let execs: Vec<hipGraphExec_t> = self.execs.drain().collect();
        for e in execs {
            self.destroy_exec(stream, e);
        }
        // The arenas may still be read by launched graphs: wait for them before freeing.
        for a in &mut self.arenas {
            if let Some(e) = a.busy_until.take() {
                if let Err(err) = e.synchronize() {
                    stream.device().runtime().record_err(err);
                }
            }
        }
        self.arenas.clear();
        flushed
    }
}

/// A graph ended by [`Batch::flush`], destroyed on drop.
struct OwnedGraph {
    raw: hipGraph_t,
    api: GraphApi,
}

impl Drop for OwnedGraph {
    fn drop(&mut self) {
        if !self.raw.is_null() {
            // SAFETY: `raw` came from hipStreamEndCapture and is destroyed once, here;
            // executable graphs made from it do not depend on it. A failure leaks the graph
            // only.
            let _: hipError_t = unsafe { (self.api.destroy)(self.raw) };
        }
    }
}

/// Held by an operation that graph mode does not record, from the launch of what was
/// recorded (see [`Stream::flush_graph`]) until the operation has queued its own work: while
/// one is held, work queued on the stream runs as plain launches rather than beginning a
/// recording that would catch the operation. Free when graph mode is off.
#[must_use = "hold it until the operation that needed the flush has been queued"]
pub struct PlainOp<'a> {
    stream: Option<&'a Stream>,
}

impl Drop for PlainOp<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stream {
            s.plain_ops.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The error for recorded work that could not be launched.
fn lost(stream: &Stream, nodes: usize, cause: RocmError) -> RocmError {
    RocmError::GraphWorkLost {
        stream: stream.id(),
        nodes,
        cause: Box::new(cause),
    }
}
