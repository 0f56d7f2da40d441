//! [`MiopenHandle`]: an MIOpen handle bound to a stream, with 2-D convolution (forward and
//! transposed, so also 1-D as the H = 1 case) and 2-D pooling on packed NCHW device buffers,
//! when MIOpen is installed. Shapes are in `config`, descriptors in `desc`, keys, policy and
//! the choice among candidates in `plan`.
//!
//! MIOpen facts this module relies on, from `include/miopen/miopen.h` (versions listed in
//! [`rocm_sys::miopen`]):
//! - tensors are described packed NCHW by `miopenSet4dTensorDescriptor(desc, type, n, c, h, w)`;
//! - filters are (K, C / groups, R, S) in `miopenConvolution` mode, and the group count is set
//!   by `miopenSetConvolutionGroupCount` after `miopenInitConvolutionDescriptor`;
//! - immediate mode: `miopenConvolution*GetSolutionCount` / `*GetSolution` list the applicable
//!   solutions, best expected first, each with its workspace size and id;
//!   `*CompileSolution` builds one ahead of its first use; `*Immediate` runs one by id;
//! - find: `miopenFindConvolution*Algorithm` "is mandatory before" `miopenConvolutionForward` /
//!   `miopenConvolutionBackwardData`; its workspace is sized by `miopenConvolution*GetWorkSpaceSize`
//!   and each result's `memory` is the workspace its execution needs;
//! - alpha = 1 and beta = 0 are the only values supported in 2-D, passed as host `float`s for
//!   half, bfloat16 and float data (`src/ocl/pooling_ocl.cpp` reads them as `float` too);
//! - a transposed convolution runs as the backward-data pass of the convolution it transposes:
//!   dy = its input (N, C_in, H, W), w = (C_in, C_out / groups, R, S), dx = its output. That
//!   weight layout is the one Candle and PyTorch use for transposed-convolution weights;
//! - `miopenPoolingForward` with `do_backward = false` takes a null, zero-sized workspace;
//! - there is no math-type switch: half and bfloat16 solvers use the matrix units (MFMA on
//!   gfx9 Instinct, WMMA on gfx11+) where they have them.
//!
//! Each (direction, dtype, shape, parameters) key is planned once per handle, by the handle's
//! [`PlanPolicy`] (immediate mode unless find is asked for), and cached with its descriptors
//! and ranked candidates; pools share the cache. A repeated call makes one MIOpen call plus a
//! workspace allocation from the caching allocator. When that allocation finds the memory
//! short, the plan moves to the fastest candidate needing less workspace, for good.

mod config;
mod desc;
mod plan;
mod search;

pub use config::{Conv2dConfig, ConvTranspose2dConfig, MiopenType, Pool2dConfig, PoolMode};
pub use plan::{
    smaller_workspace, usable, Algo, Candidate, ConvDirection, ConvKey, PlanKey, PlanPolicy,
    PoolKey, Search, DEFAULT_WORKSPACE_LIMIT, MAX_CACHED_PLANS,
};

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use rocm_sys::miopen::{miopenDataType_t, miopenHandle_t};
use rocm_sys::Miopen;

use crate::buffer::{DeviceBuffer, DeviceSlice, DeviceSliceMut};
use crate::error::{check_miopen, Result, RocmError};
use crate::graph::gate;
use crate::runtime::Runtime;
use crate::stream::Stream;
use config::{check_len, product, unsupported};
use desc::Desc;
use search::exec;

/// A planned convolution: its descriptors and ranked candidates, `chosen` the one that runs.
/// For backward data, `x` describes dx (the transposed convolution's output) and `y` dy (its
/// input).
struct ConvPlan {
    x: Desc,
    w: Desc,
    y: Desc,
    conv: Desc,
    cands: Vec<Candidate>,
    chosen: usize,
}

/// A described pooling.
struct PoolPlan {
    x: Desc,
    y: Desc,
    pool: Desc,
}

/// Any cached plan.
enum Plan {
    Conv(ConvPlan),
    Pool(PoolPlan),
}

/// The error returned where MIOpen is required but absent or disabled.
pub fn miopen_unavailable(hip_dir: Option<&std::path::Path>) -> RocmError {
    let var = rocm_sys::loader::MIOPEN_OVERRIDE_VAR;
    let disabled = std::env::var_os(var).is_some_and(|v| v == "none");
    let detail = if disabled {
        format!(
            "MIOpen is disabled by {var}=none. To fix: unset {var} (or point it at \
             libMIOpen.so) to use MIOpen; without it, use another implementation of the op"
        )
    } else {
        let beside = hip_dir
            .map(|d| format!(" in {}", d.display()))
            .unwrap_or_default();
        format!(
            "libMIOpen was not found beside the HIP runtime{beside}. To fix: install MIOpen \
             from the same ROCm release as the HIP runtime (e.g. the `miopen-hip` package), or \
             set {var} to the path of libMIOpen.so; without it, use another implementation of \
             the op"
        )
    };
    RocmError::Unsupported {
        what: "MIOpen",
        detail,
    }
}

/// An MIOpen handle whose work is queued on one stream, with one cache of planned
/// convolutions and pools. Owning handle; not `Clone`.
pub struct MiopenHandle {
    // Declared first: the plans' descriptors are destroyed before the handle (field order).
    plans: HashMap<PlanKey, Plan>,
    policy: PlanPolicy,
    lib: Arc<Miopen>,
    raw: miopenHandle_t,
    stream: Arc<Stream>,
    /// Host time spent inside the calls that queue the work (see [`MiopenHandle::library_time`]).
    library_time: std::time::Duration,
}

// SAFETY: an MIOpen handle and its descriptors may move between threads; concurrent use is
// prevented because every method that calls MIOpen takes `&mut self`. The descriptors are
// owned by this value alone (never shared), and `Arc<Miopen>`/`Arc<Stream>` are `Send`.
unsafe impl Send for MiopenHandle {}

impl MiopenHandle {
    /// Creates a handle on `stream` with the default [`PlanPolicy`]; `Ok(None)` when MIOpen is
    /// not installed or disabled (`ROCM_SYS_MIOPEN_LIB=none`), so callers fall back to their
    /// own kernels.
    pub fn new(stream: &Arc<Stream>) -> Result<Option<MiopenHandle>> {
        let Some(lib) = stream.device().runtime().miopen()? else {
            return Ok(None);
        };
        // Creating a handle may synchronise the device inside MIOpen, which would invalidate a
        // graph being recorded: this stream's recording is launched first, and other threads'
        // are waited for (graph::gate).
        let _plain = stream.flush_graph()?;
        stream.device().bind_to_thread()?;
        let mut raw: miopenHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; live stream of the current device.
        let code = unsafe {
            gate::device_wide_wait(gate::PATIENCE, || {
                (lib.miopenCreateWithStream)(&mut raw, stream.raw())
            })
        };
        check_miopen(&lib, "miopenCreateWithStream", code)?;
        Ok(Some(MiopenHandle {
            plans: HashMap::new(),
            policy: PlanPolicy::default(),
            lib,
            raw,
            stream: stream.clone(),
            library_time: std::time::Duration::ZERO,
        }))
    }

    /// Like [`MiopenHandle::new`], but MIOpen's absence is a typed [`RocmError::Unsupported`]
    /// saying how to install or enable it.
    pub fn require(stream: &Arc<Stream>) -> Result<MiopenHandle> {
        match Self::new(stream)? {
            Some(h) => Ok(h),
            None => Err(miopen_unavailable(stream.device().runtime().hip().dir())),
        }
    }

    /// MIOpen's version as (major, minor, patch).
    pub fn version(&self) -> Result<(usize, usize, usize)> {
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: three valid out-pointers.
        let code = unsafe { (self.lib.miopenGetVersion)(&mut a, &mut b, &mut c) };
        check_miopen(&self.lib, "miopenGetVersion", code)?;
        Ok((a, b, c))
    }

    /// The stream the handle's work is queued on.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// The raw handle, for MIOpen calls this type does not wrap.
    pub fn raw(&mut self) -> miopenHandle_t {
        self.raw
    }

    /// How new convolution plans are made.
    pub fn policy(&self) -> PlanPolicy {
        self.policy
    }

    /// Sets how new convolution plans are made; a change drops the cached plans.
    pub fn set_policy(&mut self, policy: PlanPolicy) {
        if policy != self.policy {
            self.clear_cache();
            self.policy = policy;
        }
    }

    /// Whether this MIOpen exports the immediate-mode entry points [`Search::Immediate`] needs.
    pub fn has_immediate_mode(&self) -> bool {
        let l = &self.lib;
        l.miopenConvolutionForwardGetSolutionCount.is_some()
            && l.miopenConvolutionForwardGetSolution.is_some()
            && l.miopenConvolutionForwardCompileSolution.is_some()
            && l.miopenConvolutionForwardImmediate.is_some()
            && l.miopenConvolutionBackwardDataGetSolutionCount.is_some()
            && l.miopenConvolutionBackwardDataGetSolution.is_some()
            && l.miopenConvolutionBackwardDataCompileSolution.is_some()
            && l.miopenConvolutionBackwardDataImmediate.is_some()
    }

    /// Number of cached (convolution, pooling) plans.
    pub fn cached_plans(&self) -> (usize, usize) {
        let convs = self
            .plans
            .keys()
            .filter(|k| matches!(k, PlanKey::Conv(_)))
            .count();
        (convs, self.plans.len() - convs)
    }

    /// The candidate the cached plan of `key` runs, if planned.
    pub fn chosen(&self, key: &ConvKey) -> Option<Candidate> {
        match self.plans.get(&PlanKey::Conv(*key)) {
            Some(Plan::Conv(p)) => p.cands.get(p.chosen).copied(),
            _ => None,
        }
    }

    /// Drops every cached plan (and its descriptors).
    pub fn clear_cache(&mut self) {
        self.plans.clear();
    }

    /// Host time spent so far inside the MIOpen calls that queue the work (the convolution
    /// execution calls and `miopenPoolingForward`), not in planning or our own bookkeeping
    /// around them: what a caller subtracts from its own time per op to see its overhead
    /// outside the library.
    pub fn library_time(&self) -> std::time::Duration {
        self.library_time
    }

    fn runtime(&self) -> Arc<Runtime> {
        self.stream.device().runtime().clone()
    }

    /// Caches `plan` under `key`, emptying the cache first when it is full.
    fn insert_plan(&mut self, key: PlanKey, plan: Plan) {
        if self.plans.len() >= MAX_CACHED_PLANS {
            self.plans.clear();
        }
        self.plans.insert(key, plan);
    }

    /// Queues a convolution: `y = conv(x, w)` on packed NCHW buffers (see [`Conv2dConfig`]).
    /// The first call for a key plans it (with [`Search::Find`], running kernels on `y`).
    pub fn conv2d<T: MiopenType>(
        &mut self,
        cfg: &Conv2dConfig,
        x: &impl DeviceSlice<T>,
        w: &impl DeviceSlice<T>,
        y: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        cfg.validate()?;
        let out = cfg.output_dims()?;
        check_len("input", cfg.input_dims(), x.len())?;
        check_len("weight", cfg.weight_dims(), w.len())?;
        check_len("output", out, y.len())?;
        if [cfg.input_dims(), cfg.weight_dims(), out]
            .iter()
            .any(|d| product(*d) == Some(0))
        {
            return Ok(()); // nothing to compute (or an empty output); MIOpen rejects zero dims
        }
        self.run_conv(ConvKey::forward::<T>(cfg), x, w, y)
    }

    /// Queues a transposed convolution (Candle's `conv_transpose2d`, see
    /// [`ConvTranspose2dConfig`]) through MIOpen's backward-data convolution.
    pub fn conv_transpose2d<T: MiopenType>(
        &mut self,
        cfg: &ConvTranspose2dConfig,
        x: &impl DeviceSlice<T>,
        w: &impl DeviceSlice<T>,
        y: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        let fwd = cfg.validate()?;
        // In the forward problem, our input is its output (dy), our output its input (dx).
        check_len("input", fwd.output_dims()?, x.len())?;
        check_len("weight", fwd.weight_dims(), w.len())?;
        check_len("output", fwd.input_dims(), y.len())?;
        if [fwd.input_dims(), fwd.weight_dims(), fwd.output_dims()?]
            .iter()
            .any(|d| product(*d) == Some(0))
        {
            return Ok(());
        }
        self.run_conv(ConvKey::transpose::<T>(cfg)?, x, w, y)
    }

    /// Queues 2-D pooling of `x` into `y` (see [`Pool2dConfig`]).
    pub fn pool2d<T: MiopenType>(
        &mut self,
        cfg: &Pool2dConfig,
        x: &impl DeviceSlice<T>,
        y: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        let out = cfg.output_dims()?;
        check_len("input", cfg.input_dims(), x.len())?;
        check_len("output", out, y.len())?;
        if product(out) == Some(0) {
            return Ok(());
        }
        let key = PlanKey::Pool(PoolKey {
            dtype: T::DATATYPE,
            cfg: *cfg,
        });
        self.stream.device().bind_to_thread()?;
        if !self.plans.contains_key(&key) {
            let plan = self.pool_plan(T::DATATYPE, cfg)?;
            self.insert_plan(key, Plan::Pool(plan));
        }
        let Some(Plan::Pool(plan)) = self.plans.get(&key) else {
            return Err(unsupported(format!("no pooling plan for {key:?}")));
        };
        // MIOpen calls are not recorded by graph mode: launch what it recorded first.
        let _plain = self.stream.flush_graph()?;
        for s in [x.stream(), y.stream()] {
            self.stream.join(s)?;
        }
        let (alpha, beta) = (1.0f32, 0.0f32);
        let start = std::time::Instant::now();
        // SAFETY: the plan's descriptors describe exactly `x` and `y` (their lengths were
        // checked against the same dims); alpha/beta are host floats as MIOpen reads them;
        // do_backward = false with a null, zero-sized workspace is the documented inference
        // form; the handle is bound to `self.stream`, after which the operands are ordered;
        // `y` is borrowed exclusively.
        let code = unsafe {
            (self.lib.miopenPoolingForward)(
                self.raw,
                plan.pool.raw,
                (&alpha as *const f32).cast(),
                plan.x.raw,
                x.device_ptr(),
                (&beta as *const f32).cast(),
                plan.y.raw,
                y.device_ptr(),
                false,
                std::ptr::null_mut(),
                0,
            )
        };
        self.library_time += start.elapsed();
        check_miopen(&self.lib, "miopenPoolingForward", code)?;
        for s in [x.stream(), y.stream()] {
            s.join(&self.stream)?;
        }
        Ok(())
    }

    fn pool_plan(&self, dtype: miopenDataType_t, cfg: &Pool2dConfig) -> Result<PoolPlan> {
        let (lib, rt) = (&self.lib, &self.runtime());
        let out = cfg.output_dims()?;
        let x = Desc::tensor(lib, rt, dtype, cfg.input_dims(), "input")?;
        let y = Desc::tensor(lib, rt, dtype, out, "output")?;
        let pool = Desc::pooling(lib, rt, cfg)?;
        let (mut n, mut c, mut h, mut w): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
        // SAFETY: live pooling and tensor descriptors; four valid out-pointers.
        let code = unsafe {
            (lib.miopenGetPoolingForwardOutputDim)(pool.raw, x.raw, &mut n, &mut c, &mut h, &mut w)
        };
        check_miopen(lib, "miopenGetPoolingForwardOutputDim", code)?;
        let got = [n, c, h, w].map(|v| v.max(0) as usize);
        if got != out {
            return Err(unsupported(format!(
                "pool {cfg:?}: MIOpen computes an output of {got:?}, expected {out:?}"
            )));
        }
        Ok(PoolPlan { x, y, pool })
    }

    /// Plans (first time per key) and runs a convolution. For backward data, `a` is dy and
    /// `out` is dx.
    fn run_conv<T: MiopenType>(
        &mut self,
        key: ConvKey,
        a: &impl DeviceSlice<T>,
        w: &impl DeviceSlice<T>,
        out: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        self.stream.device().bind_to_thread()?;
        // MIOpen calls are not recorded by graph mode: launch what it recorded first.
        let stream = self.stream.clone();
        let _plain = stream.flush_graph()?;
        for s in [a.stream(), w.stream(), out.stream()] {
            self.stream.join(s)?;
        }
        let pkey = PlanKey::Conv(key);
        if !self.plans.contains_key(&pkey) {
            let plan = self.conv_plan(&key, a.device_ptr(), w.device_ptr(), out.device_ptr())?;
            self.insert_plan(pkey, Plan::Conv(plan));
        }
        let Some(Plan::Conv(plan)) = self.plans.get_mut(&pkey) else {
            return Err(unsupported(format!("no convolution plan for {key:?}")));
        };
        // The workspace of the chosen candidate, else of the fastest one needing less.
        let workspace = loop {
            let need = plan.cands[plan.chosen].workspace;
            match DeviceBuffer::<u8>::alloc_cached(&self.stream, need) {
                Ok(ws) => break ws,
                Err(e @ RocmError::OutOfMemory { .. }) => {
                    match smaller_workspace(&plan.cands, plan.chosen) {
                        Some(next) => plan.chosen = next,
                        None => return Err(e),
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let cand = plan.cands[plan.chosen];
        let start = std::time::Instant::now();
        let (code, op) = exec(
            &self.lib,
            self.raw,
            key.direction,
            plan,
            cand.algo,
            (a.device_ptr(), w.device_ptr(), out.device_ptr()),
            (workspace.device_ptr(), workspace.len()),
        );
        self.library_time += start.elapsed();
        check_miopen(&self.lib, op, code)?;
        drop(workspace); // stream-ordered: reused only by later work on this stream
        for s in [a.stream(), w.stream(), out.stream()] {
            s.join(&self.stream)?;
        }
        Ok(())
    }

    /// Describes `key`'s problem, checks MIOpen agrees on the output shape, and ranks its
    /// candidates by the handle's policy (immediate mode where the library has it, else find,
    /// which runs kernels on `out`).
    fn conv_plan(
        &self,
        key: &ConvKey,
        a: *mut c_void,
        w_ptr: *mut c_void,
        out: *mut c_void,
    ) -> Result<ConvPlan> {
        let (lib, rt) = (&self.lib, &self.runtime());
        let p = &key.problem;
        let y_dims = p.output_dims()?;
        let x = Desc::tensor(lib, rt, key.dtype, p.input_dims(), "input")?;
        let w = Desc::tensor(lib, rt, key.dtype, p.weight_dims(), "weight")?;
        let y = Desc::tensor(lib, rt, key.dtype, y_dims, "output")?;
        let conv = Desc::convolution(lib, rt, p)?;
        let (mut n, mut c, mut h, mut wd): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
        // SAFETY: three live descriptors of this library; four valid out-pointers.
        let code = unsafe {
            (lib.miopenGetConvolutionForwardOutputDim)(
                conv.raw, x.raw, w.raw, &mut n, &mut c, &mut h, &mut wd,
            )
        };
        check_miopen(lib, "miopenGetConvolutionForwardOutputDim", code)?;
        let got = [n, c, h, wd].map(|v| v.max(0) as usize);
        if got != y_dims {
            return Err(unsupported(format!(
                "conv {p:?}: MIOpen computes an output of {got:?}, expected {y_dims:?}"
            )));
        }
        let mut plan = ConvPlan {
            x,
            w,
            y,
            conv,
            cands: Vec::new(),
            chosen: 0,
        };
        let immediate = self.policy.search == Search::Immediate && self.has_immediate_mode();
        plan.cands = if immediate {
            self.immediate_candidates(key.direction, &plan)?
        } else {
            self.find_candidates(key.direction, &plan, (a, w_ptr, out))?
        };
        if plan.cands.is_empty() {
            return Err(unsupported(format!(
                "MIOpen offers no algorithm for {key:?} within {} bytes of workspace",
                self.policy.workspace_limit
            )));
        }
        Ok(plan)
    }
}

impl Drop for MiopenHandle {
    fn drop(&mut self) {
        // Descriptors first (they are independent of the handle, but keep teardown ordered).
        self.clear_cache();
        let (lib, rt) = (self.lib.clone(), self.stream.device().runtime().clone());
        let raw = self.raw as usize;
        // Destroying the handle may free device memory, which invalidates any graph being
        // recorded in the process: deferred until none is (graph::gate).
        gate::device_wide(move || {
            // SAFETY: live handle, destroyed once (this closure runs once); MIOpen waits for
            // nothing, and buffers used by queued work stay alive through their own
            // stream-ordered frees.
            let code = unsafe { (lib.miopenDestroy)(raw as miopenHandle_t) };
            if let Err(e) = check_miopen(&lib, "miopenDestroy", code) {
                rt.record_err(e);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_miopen_says_what_to_do() {
        let e = miopen_unavailable(Some(std::path::Path::new("/opt/rocm/lib")));
        let s = e.to_string();
        assert!(matches!(e, RocmError::Unsupported { what: "MIOpen", .. }));
        assert!(s.contains("To fix"), "{s}");
        assert!(s.contains("ROCM_SYS_MIOPEN_LIB"), "{s}");
    }
}
