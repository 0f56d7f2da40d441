//! The MIOpen path of the convolutions (`conv1d`, `conv2d`, `conv_transpose1d`,
//! `conv_transpose2d`) and of `max_pool2d` (rocm-safe's `MiopenHandle`), chosen by
//! `CANDLE_ROCM_CONV` ([`crate::settings::conv_path`]) (`avg_pool2d` stays on our kernel: MIOpen's averages round differently from
//! Candle's, enough to fail candle-core's own pooling test):
//!
//! - `miopen`: contiguous f32/f16/bf16 operands run through MIOpen when the library is there;
//!   anything else (another dtype, a strided operand, MIOpen absent or failing for a shape,
//!   logged once per shape through `tracing`) runs our own path (im2col + rocBLAS for the
//!   convolutions, our kernels for the transposed ones and the pools);
//! - `im2col`: our own paths;
//! - `auto` (the default): MIOpen, when installed, for the convolutions and transposed
//!   convolutions `auto_takes_miopen` picks per shape (contiguous f32/f16/bf16 of at least
//!   [`AUTO_MIN_FLOPS`], not when our GEMM path stacks their images), each decision
//!   logged once per shape at debug level; our path for the smaller ones, where MIOpen's host
//!   cost per call outweighs the work, and for the pools. The
//!   rule comes from the H100 harness (MIOpen over cuDNN through the double), not from an AMD
//!   GPU: it has not run on one yet.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use candle_core::Layout;
use parking_lot::Mutex;
use rocm_safe::{Conv2dConfig, ConvTranspose2dConfig, DeviceBuffer, MiopenType, Pool2dConfig};

use crate::device::RocmDevice;
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::layout::contiguous_view;
use crate::settings::{conv_path, ConvPath, CONV_VAR};

/// Convolutions and pools MIOpen ran in this process (for tests that must know which path ran).
static RUNS: AtomicU64 = AtomicU64::new(0);
/// Pools among them.
static POOL_RUNS: AtomicU64 = AtomicU64::new(0);

/// Host nanoseconds spent inside the MIOpen calls that queued those runs
/// ([`rocm_safe::MiopenHandle::library_time`], summed over the devices' handles).
static LIBRARY_NS: AtomicU64 = AtomicU64::new(0);

/// Host time spent inside the MIOpen calls that queued this process's convolutions and pools
/// (not our code around them): with the time of the ops themselves, our overhead per op.
pub fn miopen_library_time() -> std::time::Duration {
    std::time::Duration::from_nanos(LIBRARY_NS.load(Ordering::Relaxed))
}

/// How many convolutions and pools ran on MIOpen in this process.
pub fn miopen_runs() -> u64 {
    RUNS.load(Ordering::Relaxed)
}

/// How many pools ran on MIOpen in this process.
pub fn miopen_pool_runs() -> u64 {
    POOL_RUNS.load(Ordering::Relaxed)
}

/// The MIOpen problem of one convolution op.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ConvProblem {
    /// `conv1d` (as the H = 1 case) or `conv2d`.
    Forward(Conv2dConfig),
    /// `conv_transpose1d` (H = 1) or `conv_transpose2d`: MIOpen's backward-data pass.
    Transpose(ConvTranspose2dConfig),
}

impl ConvProblem {
    /// The output's (N, C, H, W).
    fn output_dims(&self) -> rocm_safe::Result<[usize; 4]> {
        match self {
            ConvProblem::Forward(c) => c.output_dims(),
            ConvProblem::Transpose(c) => {
                let (h, w) = c.out_hw()?;
                Ok([c.batch, c.out_channels, h, w])
            }
        }
    }
}

/// Whether `what` is logged for the first time (each distinct message is logged once).
pub(super) fn first_time(what: &str) -> bool {
    static SEEN: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    SEEN.get_or_init(Default::default)
        .lock()
        .insert(what.to_string())
}

/// Logs a fallback to our path once per distinct `what`: a warning where MIOpen was asked for
/// (`CANDLE_ROCM_CONV=miopen`), at debug level where `auto` chose it.
fn log_once(what: String) {
    if first_time(&what) {
        if conv_path() == ConvPath::Miopen {
            tracing::warn!("{what}: running our own path");
        } else {
            tracing::debug!("{what}: running our own path");
        }
    }
}

/// The least work (floating-point operations) of a convolution that `auto` sends to MIOpen.
/// Measured on the H100 harness (2026-11-25, MIOpen over cuDNN through the double): MIOpen lost
/// to our path on every batch-1 model row (ResNet-50's 3x3 at 0.23 GFLOP and 1x1 at 0.10,
/// Whisper's front end at 0.55), where its host time per call (80-110 µs then) exceeded the
/// work, and won or is expected to win (with the matrix units) on the batch-32 rows (3.3 and 7.4
/// GFLOP) and the VAE's 512-channel 3x3 (19 GFLOP). 2 GFLOP lies between.
pub const AUTO_MIN_FLOPS: f64 = 2e9;

/// The floating-point operations of `p`: 2 * N * K * H_out * W_out * (C / groups) * R * S of
/// the forward problem (a transposed convolution does the same work as the convolution it
/// transposes); `None` when the shape is invalid.
pub(crate) fn conv_flops(p: &ConvProblem) -> Option<f64> {
    let f = match p {
        ConvProblem::Forward(c) => *c,
        ConvProblem::Transpose(c) => c.as_forward().ok()?,
    };
    let (oh, ow) = f.out_hw().ok()?;
    let per_group = f.in_channels / f.groups.max(1);
    let terms = [
        f.batch,
        f.out_channels,
        oh,
        ow,
        per_group,
        f.kernel_h,
        f.kernel_w,
    ];
    Some(2.0 * terms.iter().map(|&v| v as f64).product::<f64>())
}

/// Whether `p` is a 1x1 convolution with stride 1, no padding and one group: our GEMM path
/// runs it as one GEMM straight from the input, with no column matrix.
fn is_pointwise(p: &ConvProblem) -> bool {
    matches!(p, ConvProblem::Forward(c)
        if c.kernel_h == 1 && c.kernel_w == 1 && c.stride == [1, 1] && c.padding == [0, 0]
            && c.groups == 1)
}

/// Whether our GEMM path stacks the images of `p` (a forward convolution whose plan,
/// [`crate::launch::conv::plan`] under the tile budget in force, is
/// [`crate::launch::conv::ConvPlan::Stacked`]: several images with few output positions each),
/// which ran faster than MIOpen on ResNet-50's stage-3 and stage-4 layers at batch 32 in f16,
/// and in f32 level with it on stage 3's 3x3 and faster on stage 4's (H100 harness,
/// bench/results' "conv-stacked-tiles", calls D and H).
fn stacks_on_our_path(p: &ConvProblem, dtype: candle_core::DType) -> bool {
    use crate::launch::conv::{plan, ConvGeometry, ConvPlan, Stacking};
    use candle_core::DType;
    let ConvProblem::Forward(c) = p else {
        return false;
    };
    let Ok((h_out, w_out)) = c.out_hw() else {
        return false;
    };
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) || c.groups != 1 {
        return false;
    }
    let g = ConvGeometry::of_config(c, (h_out, w_out));
    // MIOpen takes contiguous operands only: the input is dense NCHW.
    let hw = c.in_h.saturating_mul(c.in_w);
    let strides = [c.in_channels.saturating_mul(hw), hw, c.in_w, 1];
    let budget = crate::settings::conv_tile_bytes();
    matches!(
        plan(&g, strides, dtype.size_in_bytes(), budget, Stacking::Rule),
        Some(ConvPlan::Stacked { .. })
    )
}

/// `auto`'s choice for one convolution: MIOpen for f32/f16/bf16 problems of at least
/// [`AUTO_MIN_FLOPS`] that are not pointwise and that our GEMM path would not stack
/// (`stacks_on_our_path`), with the reason. Pointwise (1x1, stride 1, unpadded) convolutions
/// stay on our path at any size: on the H100 harness (2026-11-26 14:43Z, f16, one call)
/// ResNet-50's 1x1 at batch 32 ran at 118.9 TFLOP/s as one GEMM there against 16.9 on MIOpen
/// (27.7 through `auto`'s MIOpen), PyTorch 117.4.
pub(crate) fn auto_takes_miopen(p: &ConvProblem, dtype: candle_core::DType) -> (bool, String) {
    use candle_core::DType;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return (false, format!("MIOpen takes f32/f16/bf16, not {dtype:?}"));
    }
    if is_pointwise(p) {
        return (
            false,
            "a 1x1 stride-1 unpadded convolution is one GEMM on our path".into(),
        );
    }
    if stacks_on_our_path(p, dtype) {
        return (
            false,
            "few output positions an image: our GEMM path stacks the images into one product"
                .into(),
        );
    }
    match conv_flops(p) {
        Some(f) if f >= AUTO_MIN_FLOPS => (true, format!("{:.2} GFLOP", f / 1e9)),
        Some(f) => (
            false,
            format!(
                "{:.2} GFLOP, below {:.0}: MIOpen's host cost per call would dominate",
                f / 1e9,
                AUTO_MIN_FLOPS / 1e9
            ),
        ),
        None => (false, "an invalid shape".into()),
    }
}

/// A convolution on MIOpen when [`conv_path`] asks for it and it applies: the output storage,
/// or `None` to run our own path. `op` names the op in logs; `cfg` holds the checked shape.
pub(crate) fn conv(
    op: &'static str,
    dev: &RocmDevice,
    (x, l): (&S, &Layout),
    (w, wl): (&S, &Layout),
    cfg: &ConvProblem,
) -> Result<Option<S>, BackendError> {
    match conv_path() {
        ConvPath::Im2col => return Ok(None),
        ConvPath::Miopen => {}
        ConvPath::Auto => {
            let (take, why) = auto_takes_miopen(cfg, x.dtype());
            let what = format!("{op} {cfg:?} in {:?}", x.dtype());
            if first_time(&what) {
                let path = if take { "MIOpen" } else { "our own path" };
                tracing::debug!("{CONV_VAR}=auto: {what} runs on {path} ({why})");
            }
            if !take {
                return Ok(None);
            }
        }
    }
    if !l.is_contiguous() || !wl.is_contiguous() {
        log_once(format!("{op} {cfg:?}: a strided operand"));
        return Ok(None);
    }
    Ok(match (x, w) {
        (S::F32(a), S::F32(b)) => run(op, dev, (a, l), (b, wl), cfg)?.map(S::F32),
        (S::F16(a), S::F16(b)) => run(op, dev, (a, l), (b, wl), cfg)?.map(S::F16),
        (S::BF16(a), S::BF16(b)) => run(op, dev, (a, l), (b, wl), cfg)?.map(S::BF16),
        _ => log_dtype(op, x.dtype()),
    })
}

/// Logs once that MIOpen does not take `dtype` (so our own path runs); always `None`.
fn log_dtype<T>(op: &str, dtype: candle_core::DType) -> Option<T> {
    log_once(format!("{op} in {dtype:?}: MIOpen takes f32/f16/bf16"));
    None
}

/// The number of elements of `dims`, `None` on overflow.
fn elements(dims: [usize; 4]) -> Option<usize> {
    dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

/// Runs one convolution of `T` on the device's MIOpen handle; `None` (logged) when MIOpen is
/// absent or refuses the problem.
fn run<T: MiopenType + RocmDType>(
    op: &'static str,
    dev: &RocmDevice,
    (x, l): (&DeviceBuffer<T>, &Layout),
    (w, wl): (&DeviceBuffer<T>, &Layout),
    cfg: &ConvProblem,
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    let xv = contiguous_view(op, x, l)?;
    let wv = contiguous_view(op, w, wl)?;
    run_into(op, dev, cfg, cfg.output_dims(), |m, y| match cfg {
        ConvProblem::Forward(c) => m.conv2d::<T>(c, &xv, &wv, y),
        ConvProblem::Transpose(c) => m.conv_transpose2d::<T>(c, &xv, &wv, y),
    })
}

/// Allocates an output of `dims` and fills it with `f` on the device's MIOpen handle (counted
/// in [`miopen_runs`]); `None`, logged once per `op` and `cfg`, when the output size is
/// unusable, MIOpen is absent, or it refuses the problem.
fn run_into<T: MiopenType + RocmDType>(
    op: &'static str,
    dev: &RocmDevice,
    cfg: &impl std::fmt::Debug,
    dims: rocm_safe::Result<[usize; 4]>,
    f: impl FnOnce(&mut rocm_safe::MiopenHandle, &mut DeviceBuffer<T>) -> rocm_safe::Result<()>,
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    let dims = match dims {
        Ok(d) => d,
        Err(e) => {
            log_once(format!("{op} {cfg:?}: {e}"));
            return Ok(None);
        }
    };
    let Some(len) = elements(dims) else {
        return Ok(None);
    };
    let mut y = dev.alloc::<T>(len).map_err(candle_core::Error::wrap)?;
    let run = |m: &mut rocm_safe::MiopenHandle| {
        let before = m.library_time();
        let r = f(m, &mut y);
        let spent = m.library_time().saturating_sub(before);
        LIBRARY_NS.fetch_add(
            u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        r
    };
    match dev.miopen(run) {
        Ok(Some(())) => {
            RUNS.fetch_add(1, Ordering::Relaxed);
            Ok(Some(y))
        }
        Ok(None) => {
            log_once(format!("{op}: MIOpen is not available"));
            Ok(None)
        }
        Err(e) => {
            log_once(format!("{op} {cfg:?}: MIOpen failed ({e})"));
            Ok(None)
        }
    }
}

/// A pool on MIOpen when [`conv_path`] is `miopen` (not `auto`: our pools are memory-bound
/// kernels MIOpen does not beat by more than its host cost) and it applies (contiguous f32/f16/bf16):
/// the output storage, or `None` to run our kernels. `cfg` holds Candle's window and stride
/// (Candle's pools have no padding).
pub(crate) fn pool(
    op: &'static str,
    dev: &RocmDevice,
    (x, l): (&S, &Layout),
    cfg: &Pool2dConfig,
) -> Result<Option<S>, BackendError> {
    if conv_path() != ConvPath::Miopen {
        return Ok(None);
    }
    if !l.is_contiguous() {
        log_once(format!("{op} {cfg:?}: a strided input"));
        return Ok(None);
    }
    Ok(match x {
        S::F32(a) => run_pool(op, dev, (a, l), cfg)?.map(S::F32),
        S::F16(a) => run_pool(op, dev, (a, l), cfg)?.map(S::F16),
        S::BF16(a) => run_pool(op, dev, (a, l), cfg)?.map(S::BF16),
        _ => log_dtype(op, x.dtype()),
    })
}

/// Runs one pool of `T` on the device's MIOpen handle; `None` (logged) when MIOpen is absent
/// or refuses it.
fn run_pool<T: MiopenType + RocmDType>(
    op: &'static str,
    dev: &RocmDevice,
    (x, l): (&DeviceBuffer<T>, &Layout),
    cfg: &Pool2dConfig,
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    let xv = contiguous_view(op, x, l)?;
    let y = run_into(op, dev, cfg, cfg.output_dims(), |m, y| {
        m.pool2d::<T>(cfg, &xv, y)
    })?;
    if y.is_some() {
        POOL_RUNS.fetch_add(1, Ordering::Relaxed);
    }
    Ok(y)
}

/// A pool on MIOpen (see [`pool`]; `max_pool2d` uses it) over `(b, c, h, w)` with window
/// `k` and `stride`: `None` to run our kernels, which also report a malformed input.
pub(crate) fn pool_2d(
    op: &'static str,
    dev: &RocmDevice,
    (x, l): (&S, &Layout),
    k: (usize, usize),
    stride: (usize, usize),
    mode: rocm_safe::PoolMode,
) -> Result<Option<S>, BackendError> {
    let &[b, c, h, w] = l.dims() else {
        return Ok(None);
    };
    pool(
        op,
        dev,
        (x, l),
        &pool2d_config((b, c, h, w), k, stride, mode),
    )
}

/// The MIOpen problem of a Candle pool over `(b, c, h, w)` with window `k` and `stride`, both
/// (h, w) as Candle passes them.
pub(crate) fn pool2d_config(
    (b, c, h, w): (usize, usize, usize, usize),
    k: (usize, usize),
    stride: (usize, usize),
    mode: rocm_safe::PoolMode,
) -> Pool2dConfig {
    Pool2dConfig {
        batch: b,
        channels: c,
        in_h: h,
        in_w: w,
        kernel: [k.0, k.1],
        stride: [stride.0, stride.1],
        padding: [0, 0],
        mode,
    }
}

/// The MIOpen problem of a `conv2d` with Candle's parameters (input `(b, c_in, h, w)`, kernel
/// `(c_out, c_in, k_h, k_w)`, one padding/stride/dilation for both axes, no groups: Candle
/// splits grouped convolutions before they reach a backend).
pub(crate) fn conv2d_config(
    (b, c_in, h, w): (usize, usize, usize, usize),
    (c_out, k_h, k_w): (usize, usize, usize),
    padding: usize,
    stride: usize,
    dilation: usize,
) -> Conv2dConfig {
    Conv2dConfig {
        batch: b,
        in_channels: c_in,
        in_h: h,
        in_w: w,
        out_channels: c_out,
        kernel_h: k_h,
        kernel_w: k_w,
        groups: 1,
        padding: [padding; 2],
        stride: [stride; 2],
        dilation: [dilation; 2],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_sends_the_large_convolutions_to_miopen() {
        use candle_core::DType;
        // The bench's conv rows (tests/bench/src/conv.rs): batch 1 stays ours, the 3x3 at
        // batch 32 and the VAE's 512-channel layer go to MIOpen, the pointwise 1x1 stays ours
        // at any batch (one GEMM).
        let row = |b, c_in, c_out, k, hw: (usize, usize), pad| {
            ConvProblem::Forward(conv2d_config(
                (b, c_in, hw.0, hw.1),
                (c_out, k, k),
                pad,
                1,
                1,
            ))
        };
        let whisper = ConvProblem::Forward(Conv2dConfig::conv1d(1, 80, 3000, 384, 3, 1, 1, 1, 1));
        let cases = [
            (row(1, 64, 64, 3, (56, 56), 1), false),
            (row(32, 64, 64, 3, (56, 56), 1), true),
            (row(1, 256, 64, 1, (56, 56), 0), false),
            (row(32, 256, 64, 1, (56, 56), 0), false),
            (row(1, 512, 512, 3, (64, 64), 1), true),
            (whisper, false),
        ];
        for (p, want) in cases {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let (take, why) = auto_takes_miopen(&p, dtype);
                assert_eq!(take, want, "{p:?} {dtype:?}: {why}");
            }
            let (take, why) = auto_takes_miopen(&p, DType::F64);
            assert!(!take && why.contains("f32/f16/bf16"), "{why}");
        }
        // ResNet-50's 3x3 at batch 32: 2 * 32 * 64 * 56 * 56 * 64 * 9 flops.
        let f = conv_flops(&row(32, 64, 64, 3, (56, 56), 1)).unwrap();
        assert_eq!(f, 2.0 * 32.0 * 64.0 * 3136.0 * 64.0 * 9.0);
        // A transposed convolution counts the work of the convolution it transposes.
        let t = ConvTranspose2dConfig {
            batch: 8,
            in_channels: 256,
            in_h: 32,
            in_w: 32,
            out_channels: 128,
            kernel_h: 4,
            kernel_w: 4,
            groups: 1,
            padding: [1, 1],
            output_padding: [0, 0],
            stride: [2, 2],
            dilation: [1, 1],
        };
        let ft = conv_flops(&ConvProblem::Transpose(t)).unwrap();
        assert_eq!(ft, 2.0 * 8.0 * 256.0 * 32.0 * 32.0 * 128.0 * 16.0);
        assert!(auto_takes_miopen(&ConvProblem::Transpose(t), DType::F16).0);
        let bad = ConvProblem::Forward(Conv2dConfig {
            kernel_h: 99,
            ..conv2d_config((1, 1, 4, 4), (1, 3, 3), 0, 1, 1)
        });
        assert_eq!(conv_flops(&bad), None);
        assert!(!auto_takes_miopen(&bad, DType::F32).0);
        // A strided or padded 1x1 is not pointwise: its size decides.
        assert!(auto_takes_miopen(&row(32, 256, 64, 1, (56, 56), 1), DType::F16).0);
        // ResNet-50's stage-3 and stage-4 3x3 at batch 32 (196 and 49 positions) stay on our
        // stacked tiles, stage 2 (784) goes to MIOpen; one image has nothing to stack.
        for (p, want) in [
            (row(32, 256, 256, 3, (14, 14), 1), false),
            (row(32, 512, 512, 3, (7, 7), 1), false),
            (row(32, 128, 128, 3, (28, 28), 1), true),
            (row(1, 2048, 2048, 3, (7, 7), 1), true),
        ] {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let (take, why) = auto_takes_miopen(&p, dtype);
                assert_eq!(take, want, "{p:?} {dtype:?}: {why}");
            }
        }
    }

    #[test]
    fn candle_pool_parameters_map_to_one_problem() {
        let c = pool2d_config((2, 3, 9, 7), (3, 2), (2, 1), rocm_safe::PoolMode::Max);
        assert_eq!((c.batch, c.channels, c.in_h, c.in_w), (2, 3, 9, 7));
        assert_eq!((c.kernel, c.stride, c.padding), ([3, 2], [2, 1], [0, 0]));
        // Candle's sizes: (9 - 3) / 2 + 1 = 4, (7 - 2) / 1 + 1 = 6.
        assert_eq!(c.out_hw().ok(), Some((4, 6)));
    }

    #[test]
    fn candle_parameters_map_to_one_problem() {
        let c = conv2d_config((2, 3, 8, 9), (4, 3, 5), 1, 2, 1);
        assert_eq!((c.batch, c.in_channels, c.in_h, c.in_w), (2, 3, 8, 9));
        assert_eq!(
            (c.out_channels, c.kernel_h, c.kernel_w, c.groups),
            (4, 3, 5, 1)
        );
        assert_eq!((c.padding, c.stride, c.dilation), ([1, 1], [2, 2], [1, 1]));
        // (8 + 2 - 3) / 2 + 1 = 4, (9 + 2 - 5) / 2 + 1 = 4.
        assert_eq!(c.out_hw().ok(), Some((4, 4)));
    }
}
