//! [`MiopenHandle`]: an MIOpen handle bound to a stream, with 2-D convolution (forward and
//! transposed, so also 1-D as the H = 1 case) and 2-D pooling on packed NCHW device buffers,
//! when MIOpen is installed.
//!
//! MIOpen facts this module relies on, from `include/miopen/miopen.h` (versions listed in
//! [`rocm_sys::miopen`]):
//! - tensors are described packed NCHW by `miopenSet4dTensorDescriptor(desc, type, n, c, h, w)`;
//! - filters are (K, C / groups, R, S) in `miopenConvolution` mode, and the group count is set
//!   by `miopenSetConvolutionGroupCount` after `miopenInitConvolutionDescriptor` ("it is
//!   preferable to call miopenInitConvolutionDescriptor() first, then
//!   miopenSetConvolutionGroupCount()");
//! - `miopenFindConvolution*Algorithm` "is mandatory before" the matching execution call; the
//!   find workspace is sized by `miopenConvolution*GetWorkSpaceSize`, and the chosen result's
//!   `memory` is the workspace the execution call needs;
//! - alpha = 1 and beta = 0 are the only values supported in 2-D (`miopenConvolutionForward`),
//!   passed as host `float`s for half, bfloat16 and float data (`src/ocl/pooling_ocl.cpp`
//!   reads them as `float` too);
//! - a transposed convolution runs as the backward-data pass of the convolution it transposes:
//!   dy = its input (N, C_in, H, W), w = (C_in, C_out / groups, R, S), dx = its output. That
//!   weight layout is the one Candle and PyTorch use for transposed-convolution weights;
//! - `miopenPoolingForward` with `do_backward = false` takes a null, zero-sized workspace
//!   ("If the parameter do_backward == 0, then set workSpace = nullptr and workSpaceSize = 0").
//!
//! The algorithm of each (direction, dtype, shape, parameters) key is found once per handle,
//! with MIOpen's non-exhaustive find, and cached with its descriptors, so a repeated call makes
//! exactly one MIOpen call plus a cached workspace allocation.

mod config;

pub use config::{
    Conv2dConfig, ConvDirection, ConvKey, ConvTranspose2dConfig, MiopenType, Pool2dConfig, PoolKey,
    PoolMode, MAX_CACHED_PLANS,
};

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

use rocm_sys::miopen::{
    miopenConvAlgoPerf_t, miopenConvBwdDataAlgorithm_t, miopenConvFwdAlgorithm_t,
    miopenConvolutionDescriptor_t, miopenConvolutionMode_t, miopenDataType_t, miopenHandle_t,
    miopenPoolingDescriptor_t, miopenTensorDescriptor_t,
};
use rocm_sys::Miopen;

use crate::buffer::{DeviceBuffer, DeviceSlice, DeviceSliceMut};
use crate::error::{check_miopen, Result, RocmError};
use crate::runtime::Runtime;
use crate::stream::Stream;
use config::{c_dims, check_len, product, unsupported};

/// An MIOpen tensor descriptor (packed NCHW). Destroyed on drop.
struct TensorDesc {
    lib: Arc<Miopen>,
    rt: Arc<Runtime>,
    raw: miopenTensorDescriptor_t,
}

impl TensorDesc {
    fn new(
        lib: &Arc<Miopen>,
        rt: &Arc<Runtime>,
        dtype: miopenDataType_t,
        dims: [usize; 4],
        what: &str,
    ) -> Result<Self> {
        let d = c_dims(dims, what)?;
        let mut raw: miopenTensorDescriptor_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for one descriptor handle.
        let code = unsafe { (lib.miopenCreateTensorDescriptor)(&mut raw) };
        check_miopen(lib, "miopenCreateTensorDescriptor", code)?;
        // From here on, `Drop` destroys the descriptor whatever happens next.
        let desc = TensorDesc {
            lib: lib.clone(),
            rt: rt.clone(),
            raw,
        };
        // SAFETY: `desc.raw` is the live descriptor just created; the dims are positive
        // `int`s whose product fits an `int` (`c_dims`).
        let code =
            unsafe { (lib.miopenSet4dTensorDescriptor)(desc.raw, dtype, d[0], d[1], d[2], d[3]) };
        check_miopen(lib, "miopenSet4dTensorDescriptor", code)?;
        Ok(desc)
    }

    /// The dims `miopenGetConvolutionForwardOutputDim` reports for this input and `w`.
    fn conv_output_dims(&self, conv: &ConvDesc, w: &TensorDesc) -> Result<[usize; 4]> {
        let (mut n, mut c, mut h, mut wd): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
        // SAFETY: three live descriptors of this library; four valid out-pointers.
        let code = unsafe {
            (self.lib.miopenGetConvolutionForwardOutputDim)(
                conv.raw, self.raw, w.raw, &mut n, &mut c, &mut h, &mut wd,
            )
        };
        check_miopen(&self.lib, "miopenGetConvolutionForwardOutputDim", code)?;
        Ok([n, c, h, wd].map(|v| v.max(0) as usize))
    }
}

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed exactly once; no plan using it outlives `self`.
        let code = unsafe { (self.lib.miopenDestroyTensorDescriptor)(self.raw) };
        if let Err(e) = check_miopen(&self.lib, "miopenDestroyTensorDescriptor", code) {
            self.rt.record_err(e);
        }
    }
}

/// An MIOpen convolution descriptor. Destroyed on drop.
struct ConvDesc {
    lib: Arc<Miopen>,
    rt: Arc<Runtime>,
    raw: miopenConvolutionDescriptor_t,
}

impl ConvDesc {
    fn new(lib: &Arc<Miopen>, rt: &Arc<Runtime>, cfg: &Conv2dConfig) -> Result<Self> {
        let ints = [
            cfg.padding[0],
            cfg.padding[1],
            cfg.stride[0],
            cfg.stride[1],
            cfg.dilation[0],
            cfg.dilation[1],
            cfg.groups,
        ];
        if ints.iter().any(|&v| v > c_int::MAX as usize) {
            return Err(unsupported(format!(
                "conv {cfg:?}: a parameter exceeds MIOpen's 32-bit int"
            )));
        }
        let [ph, pw, sh, sw, dh, dw, g] = ints.map(|v| v as c_int);
        let mut raw: miopenConvolutionDescriptor_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for one descriptor handle.
        let code = unsafe { (lib.miopenCreateConvolutionDescriptor)(&mut raw) };
        check_miopen(lib, "miopenCreateConvolutionDescriptor", code)?;
        let desc = ConvDesc {
            lib: lib.clone(),
            rt: rt.clone(),
            raw,
        };
        // SAFETY: `desc.raw` is the live descriptor just created; the mode is a declared
        // value and the parameters are non-negative `int`s (argument order per miopen.h:
        // mode, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w).
        let code = unsafe {
            (lib.miopenInitConvolutionDescriptor)(
                desc.raw,
                miopenConvolutionMode_t::miopenConvolution,
                ph,
                pw,
                sh,
                sw,
                dh,
                dw,
            )
        };
        check_miopen(lib, "miopenInitConvolutionDescriptor", code)?;
        // SAFETY: live, initialised descriptor; the group count is a positive `int`.
        let code = unsafe { (lib.miopenSetConvolutionGroupCount)(desc.raw, g) };
        check_miopen(lib, "miopenSetConvolutionGroupCount", code)?;
        Ok(desc)
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed exactly once; no plan using it outlives `self`.
        let code = unsafe { (self.lib.miopenDestroyConvolutionDescriptor)(self.raw) };
        if let Err(e) = check_miopen(&self.lib, "miopenDestroyConvolutionDescriptor", code) {
            self.rt.record_err(e);
        }
    }
}

/// An MIOpen pooling descriptor. Destroyed on drop.
struct PoolDesc {
    lib: Arc<Miopen>,
    rt: Arc<Runtime>,
    raw: miopenPoolingDescriptor_t,
}

impl PoolDesc {
    fn new(lib: &Arc<Miopen>, rt: &Arc<Runtime>, cfg: &Pool2dConfig) -> Result<Self> {
        let ints = [
            cfg.kernel[0],
            cfg.kernel[1],
            cfg.padding[0],
            cfg.padding[1],
            cfg.stride[0],
            cfg.stride[1],
        ];
        if ints.iter().any(|&v| v > c_int::MAX as usize) {
            return Err(unsupported(format!(
                "pool {cfg:?}: a parameter exceeds MIOpen's 32-bit int"
            )));
        }
        let [kh, kw, ph, pw, sh, sw] = ints.map(|v| v as c_int);
        let mut raw: miopenPoolingDescriptor_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer for one descriptor handle.
        let code = unsafe { (lib.miopenCreatePoolingDescriptor)(&mut raw) };
        check_miopen(lib, "miopenCreatePoolingDescriptor", code)?;
        let desc = PoolDesc {
            lib: lib.clone(),
            rt: rt.clone(),
            raw,
        };
        // SAFETY: `desc.raw` is the live descriptor just created; the mode is a declared value
        // and the parameters are non-negative `int`s (argument order per miopen.h: mode,
        // windowHeight, windowWidth, pad_h, pad_w, stride_h, stride_w).
        let code = unsafe {
            (lib.miopenSet2dPoolingDescriptor)(desc.raw, cfg.mode.raw(), kh, kw, ph, pw, sh, sw)
        };
        check_miopen(lib, "miopenSet2dPoolingDescriptor", code)?;
        Ok(desc)
    }
}

impl Drop for PoolDesc {
    fn drop(&mut self) {
        // SAFETY: `raw` is live and destroyed exactly once; no plan using it outlives `self`.
        let code = unsafe { (self.lib.miopenDestroyPoolingDescriptor)(self.raw) };
        if let Err(e) = check_miopen(&self.lib, "miopenDestroyPoolingDescriptor", code) {
            self.rt.record_err(e);
        }
    }
}

/// A found convolution: its descriptors, algorithm and workspace size. For backward data,
/// `x` describes dx (the transposed convolution's output) and `y` dy (its input).
struct ConvPlan {
    x: TensorDesc,
    w: TensorDesc,
    y: TensorDesc,
    conv: ConvDesc,
    algo: u32,
    workspace: usize,
}

/// A described pooling.
struct PoolPlan {
    x: TensorDesc,
    y: TensorDesc,
    pool: PoolDesc,
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

/// An MIOpen handle whose work is queued on one stream, with a cache of found convolution
/// algorithms and pooling descriptors. Owning handle; not `Clone`.
pub struct MiopenHandle {
    // Declared first: the plans' descriptors are destroyed before the handle (field order).
    conv_plans: HashMap<ConvKey, ConvPlan>,
    pool_plans: HashMap<PoolKey, PoolPlan>,
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
    /// Creates a handle on `stream`; `Ok(None)` when MIOpen is not installed or disabled
    /// (`ROCM_SYS_MIOPEN_LIB=none`), so callers fall back to their own kernels.
    pub fn new(stream: &Arc<Stream>) -> Result<Option<MiopenHandle>> {
        let Some(lib) = stream.device().runtime().miopen()? else {
            return Ok(None);
        };
        stream.device().bind_to_thread()?;
        let mut raw: miopenHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; live stream of the current device.
        let code = unsafe { (lib.miopenCreateWithStream)(&mut raw, stream.raw()) };
        check_miopen(&lib, "miopenCreateWithStream", code)?;
        Ok(Some(MiopenHandle {
            conv_plans: HashMap::new(),
            pool_plans: HashMap::new(),
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

    /// Number of cached (convolution, pooling) plans.
    pub fn cached_plans(&self) -> (usize, usize) {
        (self.conv_plans.len(), self.pool_plans.len())
    }

    /// Drops every cached plan (and its descriptors).
    pub fn clear_cache(&mut self) {
        self.conv_plans.clear();
        self.pool_plans.clear();
    }

    fn runtime(&self) -> Arc<Runtime> {
        self.stream.device().runtime().clone()
    }

    /// Queues a convolution: `y = conv(x, w)` on packed NCHW buffers (see [`Conv2dConfig`]).
    /// The first call for a key runs MIOpen's find (which also runs kernels on `y`).
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
        let key = ConvKey::forward::<T>(cfg);
        self.run_conv(key, x, w, y)
    }

    /// Host time spent so far inside the MIOpen calls that queue the work
    /// (`miopenConvolutionForward`, `miopenConvolutionBackwardData`, `miopenPoolingForward`),
    /// not in set-up, algorithm searches or our own bookkeeping around them: what a caller
    /// subtracts from its own time per op to see its overhead outside the library.
    pub fn library_time(&self) -> std::time::Duration {
        self.library_time
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
        let key = ConvKey::transpose::<T>(cfg)?;
        self.run_conv(key, x, w, y)
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
        let key = PoolKey {
            dtype: T::DATATYPE,
            cfg: *cfg,
        };
        self.stream.device().bind_to_thread()?;
        if !self.pool_plans.contains_key(&key) {
            let plan = self.pool_plan(&key)?;
            if self.pool_plans.len() >= MAX_CACHED_PLANS {
                self.pool_plans.clear();
            }
            self.pool_plans.insert(key, plan);
        }
        for s in [x.stream(), y.stream()] {
            self.stream.join(s)?;
        }
        let plan = &self.pool_plans[&key];
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

    fn pool_plan(&self, key: &PoolKey) -> Result<PoolPlan> {
        let rt = self.runtime();
        let cfg = &key.cfg;
        let out = cfg.output_dims()?;
        let x = TensorDesc::new(&self.lib, &rt, key.dtype, cfg.input_dims(), "input")?;
        let y = TensorDesc::new(&self.lib, &rt, key.dtype, out, "output")?;
        let pool = PoolDesc::new(&self.lib, &rt, cfg)?;
        let (mut n, mut c, mut h, mut w): (c_int, c_int, c_int, c_int) = (0, 0, 0, 0);
        // SAFETY: live pooling and tensor descriptors; four valid out-pointers.
        let code = unsafe {
            (self.lib.miopenGetPoolingForwardOutputDim)(
                pool.raw, x.raw, &mut n, &mut c, &mut h, &mut w,
            )
        };
        check_miopen(&self.lib, "miopenGetPoolingForwardOutputDim", code)?;
        let got = [n, c, h, w].map(|v| v.max(0) as usize);
        if got != out {
            return Err(unsupported(format!(
                "pool {cfg:?}: MIOpen computes an output of {got:?}, expected {out:?}"
            )));
        }
        Ok(PoolPlan { x, y, pool })
    }

    /// Finds (first time per key) and runs a convolution. For backward data, `a` is dy and
    /// `out` is dx.
    fn run_conv<T: MiopenType>(
        &mut self,
        key: ConvKey,
        a: &impl DeviceSlice<T>,
        w: &impl DeviceSlice<T>,
        out: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        self.stream.device().bind_to_thread()?;
        for s in [a.stream(), w.stream(), out.stream()] {
            self.stream.join(s)?;
        }
        if !self.conv_plans.contains_key(&key) {
            let plan = self.conv_plan(&key, a.device_ptr(), w.device_ptr(), out.device_ptr())?;
            if self.conv_plans.len() >= MAX_CACHED_PLANS {
                self.conv_plans.clear();
            }
            self.conv_plans.insert(key, plan);
        }
        let plan = &self.conv_plans[&key];
        let workspace = DeviceBuffer::<u8>::alloc_cached(&self.stream, plan.workspace)?;
        let (alpha, beta) = (1.0f32, 0.0f32);
        let start = std::time::Instant::now();
        let (code, op) = match key.direction {
            ConvDirection::Forward => (
                // SAFETY: the plan's descriptors describe exactly `a` (x), `w` and `out` (y),
                // whose lengths were checked against the same dims; `algo` came from MIOpen's
                // find for these descriptors, and the workspace holds the `memory` that find
                // reported for it; alpha = 1, beta = 0 as host floats; the handle is bound to
                // `self.stream`, after which every operand is ordered; `out` is borrowed
                // exclusively, so it does not alias the inputs.
                unsafe {
                    (self.lib.miopenConvolutionForward)(
                        self.raw,
                        (&alpha as *const f32).cast(),
                        plan.x.raw,
                        a.device_ptr(),
                        plan.w.raw,
                        w.device_ptr(),
                        plan.conv.raw,
                        miopenConvFwdAlgorithm_t(plan.algo),
                        (&beta as *const f32).cast(),
                        plan.y.raw,
                        out.device_ptr(),
                        workspace.device_ptr(),
                        plan.workspace,
                    )
                },
                "miopenConvolutionForward",
            ),
            ConvDirection::BackwardData => (
                // SAFETY: as for the forward call, with dy = `a` (described by `plan.y`) and
                // dx = `out` (described by `plan.x`), in miopen.h's argument order.
                unsafe {
                    (self.lib.miopenConvolutionBackwardData)(
                        self.raw,
                        (&alpha as *const f32).cast(),
                        plan.y.raw,
                        a.device_ptr(),
                        plan.w.raw,
                        w.device_ptr(),
                        plan.conv.raw,
                        miopenConvBwdDataAlgorithm_t(plan.algo),
                        (&beta as *const f32).cast(),
                        plan.x.raw,
                        out.device_ptr(),
                        workspace.device_ptr(),
                        plan.workspace,
                    )
                },
                "miopenConvolutionBackwardData",
            ),
        };
        self.library_time += start.elapsed();
        check_miopen(&self.lib, op, code)?;
        drop(workspace); // stream-ordered: reused only by later work on this stream
        for s in [a.stream(), w.stream(), out.stream()] {
            s.join(&self.stream)?;
        }
        Ok(())
    }

    /// Describes `key`'s problem, checks MIOpen agrees on the output shape, and runs find.
    fn conv_plan(
        &self,
        key: &ConvKey,
        a: *mut c_void,
        w_ptr: *mut c_void,
        out: *mut c_void,
    ) -> Result<ConvPlan> {
        let rt = self.runtime();
        let p = &key.problem;
        let y_dims = p.output_dims()?;
        let x = TensorDesc::new(&self.lib, &rt, key.dtype, p.input_dims(), "input")?;
        let w = TensorDesc::new(&self.lib, &rt, key.dtype, p.weight_dims(), "weight")?;
        let y = TensorDesc::new(&self.lib, &rt, key.dtype, y_dims, "output")?;
        let conv = ConvDesc::new(&self.lib, &rt, p)?;
        let got = x.conv_output_dims(&conv, &w)?;
        if got != y_dims {
            return Err(unsupported(format!(
                "conv {p:?}: MIOpen computes an output of {got:?}, expected {y_dims:?}"
            )));
        }
        let mut find_ws = 0usize;
        let (code, op) = match key.direction {
            ConvDirection::Forward => (
                // SAFETY: live handle and descriptors; valid out-pointer. Argument order per
                // miopen.h: handle, wDesc, xDesc, convDesc, yDesc.
                unsafe {
                    (self.lib.miopenConvolutionForwardGetWorkSpaceSize)(
                        self.raw,
                        w.raw,
                        x.raw,
                        conv.raw,
                        y.raw,
                        &mut find_ws,
                    )
                },
                "miopenConvolutionForwardGetWorkSpaceSize",
            ),
            ConvDirection::BackwardData => (
                // SAFETY: as above; order per miopen.h: handle, dyDesc, wDesc, convDesc, dxDesc.
                unsafe {
                    (self.lib.miopenConvolutionBackwardDataGetWorkSpaceSize)(
                        self.raw,
                        y.raw,
                        w.raw,
                        conv.raw,
                        x.raw,
                        &mut find_ws,
                    )
                },
                "miopenConvolutionBackwardDataGetWorkSpaceSize",
            ),
        };
        check_miopen(&self.lib, op, code)?;
        // A smaller workspace only narrows the algorithms find may pick (miopen.h), so an
        // out-of-memory here degrades to a find without workspace rather than failing.
        let find_buf = match DeviceBuffer::<u8>::alloc_cached(&self.stream, find_ws) {
            Ok(b) => b,
            Err(RocmError::OutOfMemory { .. }) => {
                DeviceBuffer::<u8>::alloc_cached(&self.stream, 0)?
            }
            Err(e) => return Err(e),
        };
        let mut perf = miopenConvAlgoPerf_t::default();
        let mut returned: c_int = 0;
        let (code, op) = match key.direction {
            ConvDirection::Forward => (
                // SAFETY: live handle and descriptors describing exactly the buffers behind `a`,
                // `w_ptr` and `out` (lengths checked by the caller, which also ordered them on
                // `self.stream`); room for the one result requested; the workspace buffer holds
                // `find_buf.len()` bytes. Find writes only `out` and the workspace.
                unsafe {
                    (self.lib.miopenFindConvolutionForwardAlgorithm)(
                        self.raw,
                        x.raw,
                        a,
                        w.raw,
                        w_ptr,
                        conv.raw,
                        y.raw,
                        out,
                        1,
                        &mut returned,
                        &mut perf,
                        find_buf.device_ptr(),
                        find_buf.len(),
                        false,
                    )
                },
                "miopenFindConvolutionForwardAlgorithm",
            ),
            ConvDirection::BackwardData => (
                // SAFETY: as above, with dy = `a` (described by `y`) and dx = `out` (described by
                // `x`), in miopen.h's argument order (dyDesc, dy, wDesc, w, convDesc, dxDesc, dx).
                unsafe {
                    (self.lib.miopenFindConvolutionBackwardDataAlgorithm)(
                        self.raw,
                        y.raw,
                        a,
                        w.raw,
                        w_ptr,
                        conv.raw,
                        x.raw,
                        out,
                        1,
                        &mut returned,
                        &mut perf,
                        find_buf.device_ptr(),
                        find_buf.len(),
                        false,
                    )
                },
                "miopenFindConvolutionBackwardDataAlgorithm",
            ),
        };
        check_miopen(&self.lib, op, code)?;
        if returned < 1 {
            return Err(unsupported(format!("{op} found no algorithm for {key:?}")));
        }
        Ok(ConvPlan {
            x,
            w,
            y,
            conv,
            algo: perf.algo,
            workspace: perf.memory,
        })
    }
}

impl Drop for MiopenHandle {
    fn drop(&mut self) {
        // Descriptors first (they are independent of the handle, but keep teardown ordered).
        self.clear_cache();
        // SAFETY: live handle, destroyed once; MIOpen waits for nothing, and buffers used by
        // queued work stay alive through their own stream-ordered frees.
        let code = unsafe { (self.lib.miopenDestroy)(self.raw) };
        if let Err(e) = check_miopen(&self.lib, "miopenDestroy", code) {
            self.stream.device().runtime().record_err(e);
        }
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
