//! Decode-shaped matrix products on our `gemv` kernels (`kernels/hip/gemv.hip`): up to
//! [`MAX_ROWS`] rows of `lhs` against a transposed `rhs`, the shape of every linear layer while a
//! model decodes one token at a time (`x w^T` with `w` of shape `(n, k)`) and of attention's
//! `q k^T`. f32, f16 and bf16, accumulated in f32.
//!
//! rocBLAS and cuBLAS run these shapes with GEMM tiles that read the weights at a fraction of
//! the memory bandwidth (about 1.2 TB/s for a 2048 x 2048 f16 matrix on an H100 via
//! HIP-on-CUDA, where a copy moves 3 TB/s) and take several launches for some of them; the
//! kernel here streams each weight row once with 16-byte loads, one launch per product.
//! [`gemm`](crate::launch::gemm) asks [`plan`] first and keeps rocBLAS for everything else (and for
//! all products with `CANDLE_ROCM_FAST_KERNELS=0`).

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{DevicePtrArg, DeviceSlice, DeviceSliceMut, GemmConfig, LaunchConfig, Transpose};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;

/// The most rows of `lhs` the kernels take (M in `gemv_<T>_<M>`).
pub const MAX_ROWS: usize = 8;

/// Threads per block (`GV_BLOCK`), and its groups of 32 lanes (`GV_ROWS`: one row each at one
/// group per row).
const BLOCK: u32 = 256;
const GROUPS_PER_BLOCK: usize = 8;
/// Blocks a product should have at least (summed over the batch) before its rows are not split
/// further: several per compute unit of a large GPU (132 SMs on an H100, 304 CUs on an MI300X),
/// so the last wave of blocks does not leave most of them idle.
const TARGET_BLOCKS: usize = 1024;
/// Most blocks along x; the kernels loop over the rest.
const MAX_BLOCKS: usize = 65535;
/// Most batch entries (grid y).
const MAX_BATCH: usize = 65535;
/// Rows of `w` at or above which a long `k` still goes to the kernels: each row is one group of
/// 32 lanes, so fewer rows of a long `k` would leave the GPU mostly idle (rocBLAS splits `k`).
const MIN_ROWS_LONG_K: usize = 1024;
/// The longest `k` the kernels take for any number of rows.
const LONG_K: usize = 8192;

/// `<prefix><T>_<M>` and `<prefix><T>_<M>_v` for M = 1..=8, by M - 1 (static: no name is built
/// per product on the decode path); `launch::gemv_nn` names its kernels with it too.
macro_rules! gemv_names {
    ($p:literal, $t:literal) => {
        [
            gemv_names!(@m $p, $t, "1"), gemv_names!(@m $p, $t, "2"),
            gemv_names!(@m $p, $t, "3"), gemv_names!(@m $p, $t, "4"),
            gemv_names!(@m $p, $t, "5"), gemv_names!(@m $p, $t, "6"),
            gemv_names!(@m $p, $t, "7"), gemv_names!(@m $p, $t, "8"),
        ]
    };
    (@m $p:literal, $t:literal, $m:literal) => {
        (concat!($p, $t, "_", $m), concat!($p, $t, "_", $m, "_v"))
    };
}
pub(crate) use gemv_names;

/// One kernel family's (scalar, vector) names by rows - 1.
pub(crate) type Names = [(&'static str, &'static str); MAX_ROWS];

const F32_NAMES: Names = gemv_names!("gemv_", "f32");
const F16_NAMES: Names = gemv_names!("gemv_", "f16");
const BF16_NAMES: Names = gemv_names!("gemv_", "bf16");

/// The names of `dtype` among a family's f32, f16 and bf16 tables, when the kernels cover it.
pub(crate) fn names_of(
    dtype: DType,
    [f32, f16, bf16]: [&'static Names; 3],
) -> Option<&'static Names> {
    match dtype {
        DType::F32 => Some(f32),
        DType::F16 => Some(f16),
        DType::BF16 => Some(bf16),
        _ => None,
    }
}

/// The kernels (scalar, vector) for `dtype` by rows - 1, when the kernels cover the dtype.
fn names(dtype: DType) -> Option<&'static Names> {
    names_of(dtype, [&F32_NAMES, &F16_NAMES, &BF16_NAMES])
}

/// A product the kernels take: the rocBLAS configuration `crate::layout::gemm_config` made
/// (rocBLAS's A is Candle's rhs `w`, its B Candle's lhs `x`), seen as `y = x w^T` here and as
/// `y = x w` by `launch::gemv_nn`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Rows of `x` (Candle's m), 1..=[`MAX_ROWS`].
    pub rows: usize,
    /// The output's columns (Candle's n): rows of `w` here, its columns in `gemv_nn`.
    pub n: usize,
    /// The reduced dimension (columns of `w` here, its rows in `gemv_nn`).
    pub k: usize,
    /// Row stride of `w`, in elements.
    pub ldw: usize,
    /// Row stride of `x`, in elements.
    pub ldx: usize,
    /// Batch entries (grid y).
    pub batch: usize,
    /// Batch stride of `w` (0 for a weight shared by the batch).
    pub stride_w: usize,
    /// Batch stride of `x`.
    pub stride_x: usize,
    /// Batch stride of the output.
    pub stride_y: usize,
}

/// The [`Plan`] for `cfg`, or `None` when the kernels do not take it (more than [`MAX_ROWS`]
/// rows, a `w` that is not row-major `(n, k)`, an `x` whose rows are not contiguous, a dtype
/// other than f32/f16/bf16, sizes past 32 bits, or a long `k` with few rows).
pub fn plan(cfg: &GemmConfig, dtype: DType) -> Option<Plan> {
    let (rows, n, k) = (cfg.n, cfg.m, cfg.k);
    names(dtype)?;
    let small = |v: usize| u32::try_from(v).is_ok();
    let ok = (1..=MAX_ROWS).contains(&rows)
        && n > 0
        && k > 0
        && cfg.trans_a == Transpose::Yes
        && cfg.trans_b == Transpose::No
        && cfg.alpha == 1.0
        && cfg.beta == 0.0
        && cfg.ldc == n
        && cfg.batch >= 1
        && cfg.batch <= MAX_BATCH
        && [n, k, cfg.lda, cfg.ldb].into_iter().all(small)
        && (k <= LONG_K || n.saturating_mul(cfg.batch) >= MIN_ROWS_LONG_K);
    ok.then_some(Plan {
        rows,
        n,
        k,
        ldw: cfg.lda,
        ldx: cfg.ldb,
        batch: cfg.batch,
        stride_w: cfg.stride_a,
        stride_x: cfg.stride_b,
        stride_y: cfg.stride_c,
    })
}

/// Groups of 32 lanes per output row (the kernels' `gpr`: 1, 2, 4 or 8, a power of two that
/// divides a block's 8 groups): the fewest that give [`TARGET_BLOCKS`] blocks over the batch,
/// but no more than leave each group a whole 16-byte chunk per lane of the row (`k` elements
/// of `size` bytes).
fn groups_per_row(n: usize, k: usize, batch: usize, size: usize) -> usize {
    let chunks_per_group_step = 32 * (16 / size);
    // The largest power of two at or below the chunks' bound (k = 1536 in f16 allows 6: 4).
    let bound = (k / chunks_per_group_step).clamp(1, GROUPS_PER_BLOCK);
    let most = 1 << bound.ilog2();
    let mut gpr = 1;
    while gpr < most
        && n.saturating_mul(gpr)
            .div_ceil(GROUPS_PER_BLOCK)
            .saturating_mul(batch)
            < TARGET_BLOCKS
    {
        gpr *= 2;
    }
    gpr.min(most)
}

/// Whether the 16-byte-load kernels (`_v`) can run: every row and batch entry of `w` and `x`
/// starts 16-byte aligned (both base addresses aligned, every stride and `k` a multiple of the
/// chunk).
fn vectorized(p: &Plan, size: usize, w_addr: usize, x_addr: usize) -> bool {
    let chunk = 16 / size;
    [p.k, p.ldw, p.ldx, p.stride_w, p.stride_x]
        .iter()
        .all(|v| v % chunk == 0)
        && w_addr % 16 == 0
        && x_addr % 16 == 0
}

/// Runs `plan` (from `cfg`): `out = x w^T` with `w` Candle's rhs and `x` its lhs, each from its
/// start offset. `cfg.validate` checks every operand's extent against its length first, the
/// same check rocBLAS's path makes.
pub fn run<T: RocmDType>(
    dev: &RocmDevice,
    cfg: &GemmConfig,
    p: &Plan,
    w: &impl DeviceSlice<T>,
    x: &impl DeviceSlice<T>,
    out: &mut impl DeviceSliceMut<T>,
) -> Result<(), BackendError> {
    cfg.validate(w.len(), x.len(), out.len())?;
    let size = std::mem::size_of::<T>();
    let (scalar, vector) = names(T::DTYPE)
        .and_then(|n| n.get(p.rows.wrapping_sub(1)))
        .ok_or_else(|| {
            crate::layout::invalid(
                "gemv",
                format_args!("no kernel for {:?} with {} rows", T::DTYPE, p.rows),
            )
        })?;
    let vec = vectorized(p, size, w.device_ptr() as usize, x.device_ptr() as usize);
    let f = dev.function(Module::Gemv, if vec { vector } else { scalar })?;
    let gpr = groups_per_row(p.n, p.k, p.batch, size);
    debug_assert!(gpr.is_power_of_two() && gpr <= GROUPS_PER_BLOCK);
    let rows_per_block = GROUPS_PER_BLOCK / gpr;
    let grid_x = p.n.div_ceil(rows_per_block).clamp(1, MAX_BLOCKS) as u32;
    let cfg = LaunchConfig {
        grid_dim: (grid_x, p.batch as u32, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    // `plan` kept these within u32.
    let (n, k, ldw, ldx) = (p.n as u32, p.k as u32, p.ldw as u32, p.ldx as u32);
    let (sw, sx, sy) = (p.stride_w as u64, p.stride_x as u64, p.stride_y as u64);
    let gpr = gpr as u32;
    let (pw, px, py) = (
        DevicePtrArg::of(w),
        DevicePtrArg::of(x),
        DevicePtrArg::of(out),
    );
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&pw)
        .arg(&px)
        .arg(&py)
        .arg(&n)
        .arg(&k)
        .arg(&ldw)
        .arg(&ldx);
    l.arg(&sw).arg(&sx).arg(&sy).arg(&gpr);
    // SAFETY: gemv_<T>_<M>[_v](const T* w, const T* x, T* y, u32 n, u32 k, u32 ldw, u32 ldx,
    // u64 stride_w, u64 stride_x, u64 stride_y, u32 gpr) with M = p.rows, T's name and gpr in
    // 1, 2, 4, 8 (`groups_per_row`), blocks of GV_BLOCK threads; `validate`
    // proved every row of every batch entry of w (n x k, row stride ldw), x (rows x k, ldx)
    // and y (rows x n, batch stride stride_y) lies inside its buffer; `_v` only when every
    // 16-byte chunk it loads is aligned (`vectorized`); grid y is the batch (<= 65535), any
    // grid x works (grid-stride loop); `out` is borrowed exclusively, so y aliases neither
    // input; all three are ordered on the device's one stream.
    unsafe { l.launch(cfg)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::gemm_config;
    use candle_core::{Layout, Shape};

    /// The static names are the kernels' (`gemv_<T>_<M>[_v]`).
    #[test]
    fn kernel_names() {
        assert_eq!(F16_NAMES[0], ("gemv_f16_1", "gemv_f16_1_v"));
        assert_eq!(BF16_NAMES[7], ("gemv_bf16_8", "gemv_bf16_8_v"));
        assert!(names(DType::F64).is_none());
    }

    /// A Linear layer's `x w^T` for one token: x (1, 1, k), w (n, k) broadcast over the batch.
    #[test]
    fn a_linear_layer_at_decode_is_planned() {
        let (n, k) = (2048, 2048);
        let x = Layout::contiguous((1, 1, k));
        let w = Layout::new(Shape::from((1, k, n)), vec![0, 1, k], 0);
        let cfg = gemm_config((1, 1, n, k), &x, &w).unwrap();
        let p = plan(&cfg, DType::F16).unwrap();
        assert_eq!((p.rows, p.n, p.k, p.ldw, p.stride_w), (1, n, k, k, 0));
        assert!(vectorized(&p, 2, 256, 512));
        assert!(!vectorized(&p, 2, 258, 512));
        // Eight rows still; nine go to rocBLAS; so do f64 and a row-major rhs.
        let x8 = Layout::contiguous((1, 8, k));
        assert!(plan(&gemm_config((1, 8, n, k), &x8, &w).unwrap(), DType::BF16).is_some());
        let x9 = Layout::contiguous((1, 9, k));
        assert!(plan(&gemm_config((1, 9, n, k), &x9, &w).unwrap(), DType::F32).is_none());
        assert!(plan(&cfg, DType::F64).is_none());
        let rhs = Layout::contiguous((1, k, n));
        assert!(plan(&gemm_config((1, 1, n, k), &x, &rhs).unwrap(), DType::F32).is_none());
    }

    /// Attention's `q k^T` at decode: 32 heads, q (32, 1, 64), k^T (32, 64, t).
    #[test]
    fn attention_scores_at_decode_are_planned() {
        let t = 21;
        let q = Layout::contiguous((32, 1, 64));
        let kt = Layout::contiguous((32, t, 64)).transpose(1, 2).unwrap();
        let cfg = gemm_config((32, 1, t, 64), &q, &kt).unwrap();
        let p = plan(&cfg, DType::F32).unwrap();
        assert_eq!(
            (p.batch, p.n, p.k, p.stride_w, p.stride_y),
            (32, t, 64, t * 64, t)
        );
    }

    /// Rows are split over more groups for matrices of few rows, never past one chunk per lane.
    #[test]
    fn groups_per_row_fill_the_gpu() {
        // (n, k, batch, element size) -> groups per row
        for (n, k, b, size, want) in [
            (32000, 2048, 1, 2, 1), // lm_head: 4000 blocks already
            (5632, 2048, 1, 2, 2),
            (2048, 2048, 1, 2, 4),
            (2048, 5632, 1, 2, 4),
            (256, 2048, 1, 2, 8),
            (256, 512, 1, 2, 2),  // 512 / 256 elements per group step
            (576, 1536, 1, 2, 4), // SmolLM2's down projection: 6 chunks' worth, so 4, not 6
            (576, 1536, 1, 4, 8),
            (192, 3 * 256, 1, 2, 2),
            (21, 64, 32, 4, 1), // attention: k of one chunk per lane
            (1, 8, 1, 4, 1),
        ] {
            assert_eq!(groups_per_row(n, k, b, size), want, "n={n} k={k} b={b}");
        }
    }

    /// A long `k` with few rows stays on rocBLAS (which splits `k`), with many rows it does not.
    #[test]
    fn long_k_needs_many_rows() {
        let k = 65536;
        let x = Layout::contiguous((1, k));
        for (n, want) in [(16, false), (4096, true)] {
            let w = Layout::contiguous((n, k)).transpose(0, 1).unwrap();
            let cfg = gemm_config((1, 1, n, k), &x, &w).unwrap();
            assert_eq!(plan(&cfg, DType::F32).is_some(), want, "n = {n}");
        }
    }
}
