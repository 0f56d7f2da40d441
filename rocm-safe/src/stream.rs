//! [`Stream`] (an in-order queue of device work) and [`Event`] (a marker in a stream, with
//! optional timing).

use std::collections::VecDeque;
use std::ffi::c_uint;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use rocm_sys::{hipError_t, hipEvent_t, hipStream_t};

use crate::device::Device;
use crate::error::{check, Result};
use crate::graph::batch::{Batch, PlainOp};

static NEXT_STREAM_ID: AtomicU64 = AtomicU64::new(1);

/// A non-blocking HIP stream. Owning handle: share it as `Arc<Stream>`; buffers keep one.
pub struct Stream {
    device: Device,
    raw: hipStream_t,
    id: u64,
    /// Host memory of queued [`Stream::upload`]s, each with an event recorded after its copy;
    /// freed once the event has completed (or when the stream, synchronised, is dropped).
    pub(crate) in_flight: Mutex<VecDeque<(Event, InFlight)>>,
    /// Set while a [`crate::graph::Capture`] records this stream's work into a graph: the
    /// operations that cannot be captured check it and refuse ([`Stream::ensure_not_capturing`]).
    pub(crate) capturing: AtomicBool,
    /// Set while graph mode is on ([`Stream::set_graph_mode`]): a quick check before taking
    /// `batch`'s lock.
    pub(crate) batching: AtomicBool,
    /// Graph mode's state (`crate::graph`'s batching), when on.
    pub(crate) batch: Mutex<Option<Batch>>,
    /// Operations graph mode does not record that are in flight on this stream
    /// ([`crate::graph::PlainOp`]): while any is, graph mode begins no recording.
    pub(crate) plain_ops: AtomicUsize,
    /// Operations queued on this stream that wait for other GPUs or processes (RCCL
    /// collectives), counted as queued ([`Stream::note_peer_work`]).
    peer_work: AtomicU64,
    /// How many of them a wait has seen finish ([`Stream::peer_work_finished`]).
    peer_work_done: AtomicU64,
}

/// Host data an asynchronous copy still reads.
pub(crate) type InFlight = Box<dyn std::any::Any + Send>;

// SAFETY: a hipStream_t is an opaque handle the HIP runtime allows any host thread to use
// concurrently (the runtime serialises submissions internally); `Stream` exposes no interior
// mutability of its own.
unsafe impl Send for Stream {}
// SAFETY: see `Send`: every method takes `&self` and only passes the handle to thread-safe
// HIP entry points.
unsafe impl Sync for Stream {}

impl Stream {
    /// Creates a stream on `device` that does not synchronise with the legacy null stream.
    pub fn new(device: &Device) -> Result<Arc<Stream>> {
        device.bind_to_thread()?;
        let hip = device.hip();
        let mut raw: hipStream_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; hipStreamNonBlocking is a defined flag.
        let code = unsafe {
            (hip.hipStreamCreateWithFlags)(&mut raw, rocm_sys::hipStreamNonBlocking as c_uint)
        };
        check(hip, "hipStreamCreateWithFlags", code)?;
        Ok(Arc::new(Stream {
            device: device.clone(),
            raw,
            id: NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed),
            in_flight: Mutex::new(VecDeque::new()),
            capturing: AtomicBool::new(false),
            batching: AtomicBool::new(false),
            batch: Mutex::new(None),
            plain_ops: AtomicUsize::new(0),
            peer_work: AtomicU64::new(0),
            peer_work_done: AtomicU64::new(0),
        }))
    }

    /// The device the stream runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A process-unique id (never reused, unlike the raw handle).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The raw handle, for FFI (rocBLAS, MIOpen, kernel launches).
    pub fn raw(&self) -> hipStream_t {
        self.raw
    }

    /// Whether a [`crate::graph::Capture`] of this crate is recording this stream's work into a
    /// graph (captures begun on the raw handle by other code are not seen here; see
    /// [`Stream::capture_status`] for the runtime's view).
    pub fn is_capturing(&self) -> bool {
        self.capturing.load(Ordering::Acquire)
    }

    /// A typed [`crate::RocmError::NotCapturable`] for `op` while this stream is capturing.
    ///
    /// Called before anything that would break or corrupt a capture: host synchronisation
    /// (the runtime rejects it and invalidates the capture), copies from pageable host memory
    /// (a graph would read the host address again at every launch), cache trims.
    ///
    /// In graph mode ([`Stream::set_graph_mode`]) this first launches what was recorded, so
    /// the operation runs after it as it would have without graphs.
    /// The returned [`PlainOp`] is held until the operation is queued (see
    /// [`Stream::flush_graph`]).
    pub fn ensure_not_capturing(&self, op: &'static str, why: &'static str) -> Result<PlainOp<'_>> {
        let plain = self.flush_graph()?;
        if self.is_capturing() {
            return Err(crate::RocmError::NotCapturable {
                op,
                stream: self.id,
                why,
            });
        }
        Ok(plain)
    }

    /// Blocks until all work queued so far has finished. Refused while capturing.
    pub fn synchronize(&self) -> Result<()> {
        let _plain = self.ensure_not_capturing(
            "Stream::synchronize",
            "the host cannot wait for work that is only being recorded",
        )?;
        let hip = self.device.hip();
        // SAFETY: `raw` is a live stream handle owned by `self`.
        let code = unsafe { (hip.hipStreamSynchronize)(self.raw) };
        check(hip, "hipStreamSynchronize", code)
    }

    /// Counts one more queued operation that waits for other GPUs or processes (an RCCL
    /// collective): until a wait has seen it finish, [`Stream::peer_work`] says so.
    pub(crate) fn note_peer_work(&self) {
        self.peer_work.fetch_add(1, Ordering::AcqRel);
    }

    /// The number of operations [`Stream::note_peer_work`] has counted, and whether a wait has
    /// seen all of them finish (then nothing queued can wait for another GPU or process, and a
    /// blocking [`Stream::synchronize`] ends when this stream's own kernels do).
    pub(crate) fn peer_work(&self) -> (u64, bool) {
        let queued = self.peer_work.load(Ordering::Acquire);
        (
            queued,
            self.peer_work_done.load(Ordering::Acquire) >= queued,
        )
    }

    /// Records that the first `upto` counted operations have finished (the stream was seen
    /// idle after they were queued).
    pub(crate) fn peer_work_finished(&self, upto: u64) {
        self.peer_work_done.fetch_max(upto, Ordering::AcqRel);
    }

    /// Whether all queued work has finished, without blocking. Refused while capturing.
    pub fn is_idle(&self) -> Result<bool> {
        let _plain = self.ensure_not_capturing(
            "Stream::is_idle",
            "a capturing stream's work has not been queued to run",
        )?;
        let hip = self.device.hip();
        // SAFETY: `raw` is a live stream handle owned by `self`.
        let code = unsafe { (hip.hipStreamQuery)(self.raw) };
        if code == hipError_t::hipErrorNotReady {
            return Ok(false);
        }
        check(hip, "hipStreamQuery", code).map(|()| true)
    }

    /// Makes later work on this stream wait until `event` has completed.
    pub fn wait(&self, event: &Event) -> Result<()> {
        // A recorded stretch cannot wait on an event of work outside it: launch it first.
        let _plain = self.flush_graph()?;
        // The event may belong to another device (cross-device ordering): the waiting
        // stream's device is the one to make current.
        self.device.bind_to_thread()?;
        let hip = self.device.hip();
        // SAFETY: both handles are live; flags must be 0.
        let code = unsafe { (hip.hipStreamWaitEvent)(self.raw, event.raw, 0) };
        check(hip, "hipStreamWaitEvent", code)
    }

    /// Records a new (untimed) event at the current end of this stream.
    pub fn record_event(&self) -> Result<Event> {
        let e = Event::new(&self.device, false)?;
        e.record(self)?;
        Ok(e)
    }

    /// Orders this stream after everything queued so far on `other` (no-op when they are the
    /// same stream).
    pub fn join(&self, other: &Stream) -> Result<()> {
        if self.id == other.id {
            return Ok(());
        }
        self.wait(&other.record_event()?)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if let Some(mut b) = self.batch.get_mut().take() {
            if let Err(e) = b.close(self) {
                self.device.runtime().record_err(e);
            }
        }
        let hip = self.device.hip();
        // Wait for queued work first: the caching allocator may hand this stream's blocks to
        // nobody else until the device is synchronised, and kernels may still read memory
        // whose owners are gone.
        // SAFETY: `raw` is live until the destroy call below, which is the last use.
        let sync = unsafe { (hip.hipStreamSynchronize)(self.raw) };
        // SAFETY: as above; nothing uses `raw` after this.
        let destroy = unsafe { (hip.hipStreamDestroy)(self.raw) };
        for (op, code) in [
            ("hipStreamSynchronize", sync),
            ("hipStreamDestroy", destroy),
        ] {
            if let Err(e) = check(hip, op, code) {
                self.device.runtime().record_err(e);
            }
        }
    }
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Stream(#{} on device {})",
            self.id,
            self.device.ordinal()
        )
    }
}

/// A HIP event: a point in a stream that other streams or the host can wait for.
pub struct Event {
    device: Device,
    raw: hipEvent_t,
    timing: bool,
}

// SAFETY: hipEvent_t handles may be used from any thread; `Event` has no interior state.
unsafe impl Send for Event {}
// SAFETY: as for `Send`; all methods take `&self` and call thread-safe HIP entry points.
unsafe impl Sync for Event {}

impl Event {
    /// Creates an event; `timing` enables [`Event::elapsed_ms`] at a small recording cost.
    pub fn new(device: &Device, timing: bool) -> Result<Event> {
        device.bind_to_thread()?;
        let hip = device.hip();
        let flags = if timing {
            rocm_sys::hipEventDefault
        } else {
            rocm_sys::hipEventDisableTiming
        };
        let mut raw: hipEvent_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; the flags are defined values.
        let code = unsafe { (hip.hipEventCreateWithFlags)(&mut raw, flags as c_uint) };
        check(hip, "hipEventCreateWithFlags", code)?;
        Ok(Event {
            device: device.clone(),
            raw,
            timing,
        })
    }

    /// Captures the current end of `stream`.
    /// In graph mode, what `stream` recorded is launched first, so the event marks work that
    /// runs.
    pub fn record(&self, stream: &Stream) -> Result<()> {
        let _plain = stream.flush_graph()?;
        self.record_raw(stream)
    }

    /// [`Event::record`] without launching graph mode's recorded work (graph mode itself uses
    /// it, holding its lock).
    pub(crate) fn record_raw(&self, stream: &Stream) -> Result<()> {
        let hip = self.device.hip();
        // SAFETY: both handles are live and belong to the same runtime.
        let code = unsafe { (hip.hipEventRecord)(self.raw, stream.raw()) };
        check(hip, "hipEventRecord", code)
    }

    /// Blocks until the recorded work has finished.
    pub fn synchronize(&self) -> Result<()> {
        let hip = self.device.hip();
        // SAFETY: `raw` is live.
        let code = unsafe { (hip.hipEventSynchronize)(self.raw) };
        check(hip, "hipEventSynchronize", code)
    }

    /// Whether the recorded work has finished, without blocking.
    pub fn is_complete(&self) -> Result<bool> {
        let hip = self.device.hip();
        // SAFETY: `raw` is live.
        let code = unsafe { (hip.hipEventQuery)(self.raw) };
        if code == hipError_t::hipErrorNotReady {
            return Ok(false);
        }
        check(hip, "hipEventQuery", code).map(|()| true)
    }

    /// Milliseconds between `self` (start) and `end`; both must be timed, recorded and
    /// complete.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        if !self.timing || !end.timing {
            return Err(crate::RocmError::InvalidArgument(
                "elapsed_ms needs two events created with timing enabled".into(),
            ));
        }
        let hip = self.device.hip();
        let mut ms = 0f32;
        // SAFETY: `ms` is a valid out-pointer; both events are live.
        let code = unsafe { (hip.hipEventElapsedTime)(&mut ms, self.raw, end.raw) };
        check(hip, "hipEventElapsedTime", code)?;
        Ok(ms)
    }

    /// The raw handle.
    pub fn raw(&self) -> hipEvent_t {
        self.raw
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // The event's own device current (events of another device are waited on across
        // devices); a failure to bind shows in the destroy's own error.
        let _ = self.device.bind_to_thread();
        let hip = self.device.hip();
        // SAFETY: `raw` is live and this is its last use.
        let code = unsafe { (hip.hipEventDestroy)(self.raw) };
        if let Err(e) = check(hip, "hipEventDestroy", code) {
            self.device.runtime().record_err(e);
        }
    }
}
