//! [`Capture`]: a stream recording its work into a graph, ended exactly once; and
//! [`GraphPool`], the memory the captured work allocates.

use std::marker::PhantomData;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rocm_sys::{hipGraph_t, hipStreamCaptureStatus};

use super::{gate, CaptureMode, CaptureStatus, Graph, GraphApi};
use crate::allocator::CachingAllocator;
use crate::error::{check, Result, RocmError};
use crate::stream::Stream;

/// A private pool of the device's caching allocator for the graphs captured on one stream
/// (see the [module documentation](super#memory-a-graph-uses)). Shared by the captures,
/// graphs and executable graphs that use it; when the last is dropped its memory returns to
/// the general cache of its stream.
pub struct GraphPool {
    allocator: Arc<CachingAllocator>,
    id: u64,
    stream: Arc<Stream>,
}

impl GraphPool {
    /// A new, empty pool for captures on `stream`.
    pub fn new(stream: &Arc<Stream>) -> Arc<GraphPool> {
        let allocator = stream.device().allocator();
        let id = allocator.create_pool(stream.id());
        Arc::new(GraphPool {
            allocator,
            id,
            stream: stream.clone(),
        })
    }

    /// The stream whose captures allocate from this pool.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// The pool's id in its allocator.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for GraphPool {
    fn drop(&mut self) {
        self.allocator.retire_pool(self.id);
    }
}

impl std::fmt::Debug for GraphPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphPool({} for {:?})", self.id, self.stream)
    }
}

/// A capture in progress on a stream: the stream's work is recorded, not run.
///
/// End it with [`Capture::end`] to get the [`Graph`]. Dropping it unended (an early `?`
/// return, a panic) ends the capture and discards what was recorded, so the stream is never
/// left capturing. Not `Send`: HIP requires the thread that began a capture to end it.
pub struct Capture {
    stream: Arc<Stream>,
    pool: Arc<GraphPool>,
    api: GraphApi,
    ended: bool,
    _same_thread: PhantomData<*const ()>,
}

impl Stream {
    /// Begins recording this stream's work into a graph.
    ///
    /// Allocations from the device's caching allocator on this stream come from `pool` until
    /// the capture ends (a new pool when `None`; pass the previous capture's pool when
    /// capturing the same step again). Fails with [`RocmError::GraphsUnavailable`] when the
    /// runtime lacks graphs, and with [`RocmError::InvalidArgument`] when this stream is already
    /// capturing or `pool` belongs to another stream.
    pub fn begin_capture(
        self: &Arc<Self>,
        mode: CaptureMode,
        pool: Option<Arc<GraphPool>>,
    ) -> Result<Capture> {
        let api = *self.device().runtime().graphs()?;
        let pool = match pool {
            Some(p) if p.stream.id() == self.id() => p,
            Some(p) => {
                return Err(RocmError::InvalidArgument(format!(
                    "{p:?} cannot take allocations of a capture on {self:?}"
                )))
            }
            None => GraphPool::new(self),
        };
        if self.batching.load(Ordering::Acquire) {
            return Err(RocmError::InvalidArgument(format!(
                "{self:?} is in graph mode, which records its work itself: turn it off \
                 (set_graph_mode(None)) before capturing explicitly"
            )));
        }
        if self
            .capturing
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(RocmError::InvalidArgument(format!(
                "{self:?} is already capturing a graph"
            )));
        }
        gate::recording_begins();
        let begun = self.device().bind_to_thread().and_then(|()| {
            pool.allocator.begin_pool_capture(self.id(), pool.id)?;
            let hip = self.device().hip();
            // SAFETY: the stream handle is live (held by `self`); `mode.raw()` is one of HIP's
            // three defined capture modes.
            let code = unsafe { (api.begin)(self.raw(), mode.raw()) };
            check(hip, "hipStreamBeginCapture", code).inspect_err(|_| {
                pool.allocator.end_pool_capture(self.id());
            })
        });
        if let Err(e) = begun {
            self.capturing.store(false, Ordering::Release);
            gate::recording_ends();
            return Err(e);
        }
        Ok(Capture {
            stream: self.clone(),
            pool,
            api,
            ended: false,
            _same_thread: PhantomData,
        })
    }

    /// Records the work `f` queues on this stream into a graph: begins a capture, runs `f`,
    /// ends the capture. When `f` fails (e.g. with [`RocmError::NotCapturable`]) or panics,
    /// the capture is ended and discarded and the stream is usable again.
    pub fn capture<F>(
        self: &Arc<Self>,
        mode: CaptureMode,
        pool: Option<Arc<GraphPool>>,
        f: F,
    ) -> Result<Graph>
    where
        F: FnOnce(&Arc<Stream>) -> Result<()>,
    {
        let capture = self.begin_capture(mode, pool)?;
        f(self)?;
        capture.end()
    }

    /// The runtime's view of this stream's capture (`hipStreamIsCapturing`).
    pub fn capture_status(&self) -> Result<CaptureStatus> {
        let api = self.device().runtime().graphs()?;
        let mut status = hipStreamCaptureStatus::hipStreamCaptureStatusNone;
        // SAFETY: the stream handle is live; `status` is a valid out-pointer for one value.
        let code = unsafe { (api.is_capturing)(self.raw(), &mut status) };
        check(self.device().hip(), "hipStreamIsCapturing", code)?;
        Ok(status.into())
    }
}

impl Capture {
    /// The pool the captured work allocates from.
    pub fn pool(&self) -> &Arc<GraphPool> {
        &self.pool
    }

    /// The capturing stream.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// Ends the capture and returns the recorded graph. Fails when the runtime invalidated the
    /// capture (a call it could not record); the stream is not capturing afterwards either way.
    pub fn end(mut self) -> Result<Graph> {
        self.ended = true;
        let raw = self.finish()?;
        Ok(Graph::from_raw(
            raw,
            self.stream.device().clone(),
            self.api,
            self.pool.clone(),
        ))
    }

    /// Ends the capture and discards what was recorded.
    pub fn abort(mut self) -> Result<()> {
        self.ended = true;
        let raw = self.finish()?;
        drop(Graph::from_raw(
            raw,
            self.stream.device().clone(),
            self.api,
            self.pool.clone(),
        ));
        Ok(())
    }

    /// `hipStreamEndCapture`, then the stream and the allocator leave capture mode.
    fn finish(&mut self) -> Result<hipGraph_t> {
        let hip = self.stream.device().hip();
        let mut raw: hipGraph_t = std::ptr::null_mut();
        // The capturing thread ends the capture (`Capture` is not Send); its device is the
        // stream's. A failure to bind shows in the end call's own status.
        let _ = self.stream.device().bind_to_thread();
        // SAFETY: the stream handle is live and capturing (begun by `begin_capture`, ended only
        // here, once); `raw` is a valid out-pointer.
        let code = unsafe { (self.api.end)(self.stream.raw(), &mut raw) };
        self.pool.allocator.end_pool_capture(self.stream.id());
        self.stream.capturing.store(false, Ordering::Release);
        gate::recording_ends();
        if let Err(e) = check(hip, "hipStreamEndCapture", code) {
            if !raw.is_null() {
                // SAFETY: a graph the failed end call still returned is ours to destroy, once.
                let _ = unsafe { (self.api.destroy)(raw) };
            }
            return Err(e);
        }
        if raw.is_null() {
            return Err(RocmError::InvalidArgument(
                "hipStreamEndCapture returned no graph".into(),
            ));
        }
        Ok(raw)
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        match self.finish() {
            Ok(raw) => drop(Graph::from_raw(
                raw,
                self.stream.device().clone(),
                self.api,
                self.pool.clone(),
            )),
            // An invalidated capture (the usual reason to drop one) ends with an error: the
            // stream has left capture mode all the same, and nothing is left to report.
            Err(RocmError::Hip(e))
                if e.status() == rocm_sys::hipError_t::hipErrorStreamCaptureInvalidated => {}
            Err(e) => self.stream.device().runtime().record_err(e),
        }
    }
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Capture(on {:?} into {:?})", self.stream, self.pool)
    }
}
