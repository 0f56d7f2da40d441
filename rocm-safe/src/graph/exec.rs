//! [`Graph`] (recorded work) and [`GraphExec`] (an instantiated graph that launches as one
//! unit).

use std::sync::Arc;

use rocm_sys::{hipGraphExecUpdateResult, hipGraphExec_t, hipGraphNode_t, hipGraph_t};

use super::{update_outcome, GraphApi, GraphPool, UpdateOutcome};
use crate::device::Device;
use crate::error::{check, HipError, Result, RocmError};
use crate::stream::Stream;

/// A recorded graph (`hipGraph_t`), destroyed on drop. Made by [`crate::graph::Capture::end`]
/// or [`Stream::capture`]; turned into something launchable by [`GraphExec::instantiate`] or
/// used to refresh one with [`GraphExec::update`].
pub struct Graph {
    raw: hipGraph_t,
    device: Device,
    api: GraphApi,
    pool: Arc<GraphPool>,
}

// SAFETY: a hipGraph_t may be used from any thread, one at a time: `Graph` is Send, not Sync
// (HIP, like CUDA, does not make graph objects thread-safe).
unsafe impl Send for Graph {}

impl Graph {
    pub(super) fn from_raw(
        raw: hipGraph_t,
        device: Device,
        api: GraphApi,
        pool: Arc<GraphPool>,
    ) -> Graph {
        Graph {
            raw,
            device,
            api,
            pool,
        }
    }

    /// The pool the recorded work allocated from.
    pub fn pool(&self) -> &Arc<GraphPool> {
        &self.pool
    }

    /// The device the graph runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: `raw` came from hipStreamEndCapture and is destroyed once, here; executable
        // graphs made from it do not depend on it.
        let code = unsafe { (self.api.destroy)(self.raw) };
        if let Err(e) = check(self.device.hip(), "hipGraphDestroy", code) {
            self.device.runtime().record_err(e);
        }
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Graph(on device {}, {:?})",
            self.device.ordinal(),
            self.pool
        )
    }
}

/// An executable graph (`hipGraphExec_t`): launches all the recorded work with one call.
pub struct GraphExec {
    raw: hipGraphExec_t,
    device: Device,
    api: GraphApi,
    /// The pools of every graph whose parameters this exec ran or runs.
    pools: Vec<Arc<GraphPool>>,
    /// An update was refused: the exec's parameters are not those of any graph.
    stale: bool,
}

// SAFETY: a hipGraphExec_t may be launched and updated from any thread, one at a time:
// `GraphExec` is Send, not Sync (updates take `&mut self`; wrap it in a Mutex to share it).
unsafe impl Send for GraphExec {}

impl GraphExec {
    /// Instantiates `graph` (`hipGraphInstantiate`). The graph may be dropped afterwards.
    pub fn instantiate(graph: &Graph) -> Result<GraphExec> {
        graph.device.bind_to_thread()?;
        let hip = graph.device.hip();
        let mut raw: hipGraphExec_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; `graph.raw` is a live graph; the error node and
        // log buffer are optional (null, size 0).
        let code = unsafe {
            (graph.api.instantiate)(
                &mut raw,
                graph.raw,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        check(hip, "hipGraphInstantiate", code)?;
        Ok(GraphExec {
            raw,
            device: graph.device.clone(),
            api: graph.api,
            pools: vec![graph.pool.clone()],
            stale: false,
        })
    }

    /// Replaces this exec's kernel arguments and buffer addresses with `graph`'s
    /// (`hipGraphExecUpdate`), when `graph` has the same shape: the same nodes, in the same
    /// order, running the same kernels. Otherwise returns
    /// [`UpdateOutcome::NeedsInstantiate`] with the runtime's reason, and the exec refuses to
    /// launch until an update applies; instantiate `graph` instead.
    pub fn update(&mut self, graph: &Graph) -> Result<UpdateOutcome> {
        if !graph.device.same_device(&self.device) {
            return Err(RocmError::InvalidArgument(format!(
                "a graph of device {} cannot update an executable graph of device {}",
                graph.device.ordinal(),
                self.device.ordinal()
            )));
        }
        self.device.bind_to_thread()?;
        let mut node: hipGraphNode_t = std::ptr::null_mut();
        let mut result = hipGraphExecUpdateResult::hipGraphExecUpdateError;
        // SAFETY: both handles are live; `node` and `result` are valid out-pointers.
        let code = unsafe { (self.api.exec_update)(self.raw, graph.raw, &mut node, &mut result) };
        let outcome = update_outcome(code, result).map_err(|code| {
            RocmError::Hip(HipError::new(self.device.hip(), "hipGraphExecUpdate", code))
        })?;
        match outcome {
            UpdateOutcome::Updated => {
                self.stale = false;
                if !self.pools.iter().any(|p| Arc::ptr_eq(p, &graph.pool)) {
                    self.pools.push(graph.pool.clone());
                }
            }
            UpdateOutcome::NeedsInstantiate(_) => self.stale = true,
        }
        Ok(outcome)
    }

    /// The pool of the graph this exec was instantiated from: pass it to the next capture of
    /// the same work so that its intermediates reuse the same memory.
    pub fn pool(&self) -> &Arc<GraphPool> {
        // `pools` starts with the instantiated graph's pool and only grows.
        &self.pools[0]
    }

    /// Whether a refused update left this exec unlaunchable.
    pub fn is_stale(&self) -> bool {
        self.stale
    }

    /// Launches the graph on `stream` (`hipGraphLaunch`): one call for all the recorded work,
    /// ordered after the work queued on `stream` before it.
    ///
    /// When `stream` is not the stream a pool of this exec was captured on, the launch is also
    /// ordered after that stream's queued work and that stream after the launch, so the pool's
    /// memory is reused in order.
    ///
    /// # Safety
    /// The recorded kernels run again with the arguments they were recorded (or last updated)
    /// with:
    /// 1. every device address they use that is not in this exec's pools (weights, inputs,
    ///    caches allocated before the capture) must still be allocated, hold what the kernels
    ///    expect, and not be written by other streams concurrently;
    /// 2. host memory a recorded copy reads or writes must be pinned and still allocated;
    /// 3. the contract of [`crate::LaunchArgs::launch`] held for every recorded launch.
    pub unsafe fn launch(&self, stream: &Arc<Stream>) -> Result<()> {
        if self.stale {
            return Err(RocmError::InvalidArgument(
                "this executable graph refused its last update: instantiate the new graph".into(),
            ));
        }
        if !stream.device().same_device(&self.device) {
            return Err(RocmError::InvalidArgument(format!(
                "an executable graph of device {} launched on a stream of device {}",
                self.device.ordinal(),
                stream.device().ordinal()
            )));
        }
        for p in &self.pools {
            stream.join(p.stream())?;
        }
        stream.device().bind_to_thread()?;
        // SAFETY: both handles are live and on the same device; the caller guarantees the
        // recorded work's memory (contract 1-3); the pools' memory is owned by `self.pools`.
        let code = unsafe { (self.api.launch)(self.raw, stream.raw()) };
        check(self.device.hip(), "hipGraphLaunch", code)?;
        for p in &self.pools {
            p.stream().join(stream)?;
        }
        Ok(())
    }
}

impl Drop for GraphExec {
    fn drop(&mut self) {
        let _ = self.device.bind_to_thread();
        // SAFETY: `raw` came from hipGraphInstantiate and is destroyed once, here. Launches
        // already queued complete normally (the runtime keeps what they need); the pools
        // (dropped after this) retire their memory in their streams' order.
        let code = unsafe { (self.api.exec_destroy)(self.raw) };
        if let Err(e) = check(self.device.hip(), "hipGraphExecDestroy", code) {
            self.device.runtime().record_err(e);
        }
    }
}

impl std::fmt::Debug for GraphExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GraphExec(on device {}, {} pool(s){})",
            self.device.ordinal(),
            self.pools.len(),
            if self.stale { ", stale" } else { "" }
        )
    }
}
