//! Decode-shaped matrix products with a row-major rhs on our `gemv_nn` kernels
//! (`kernels/hip/gemv.hip`): up to [`MAX_ROWS`] rows of `lhs` against an rhs of shape `(k, n)`,
//! `y = x w`. The shape of attention's `att @ v` while a model decodes (att: the softmax
//! weights `(b, heads, 1, seq)`, v: `(b, heads, seq, head_dim)`, one batch entry per head), which
//! rocBLAS would otherwise run once per layer per token, ending a graph-mode recording each time.
//! f32, f16 and bf16, accumulated in f32. [`crate::launch::gemv`] has the other orientation
//! (`x w^T`).
//!
//! [`matmul`](crate::launch::gemm) asks [`plan`] after the `x w^T` planner and keeps rocBLAS
//! for everything else (and for all products with `CANDLE_ROCM_FAST_KERNELS=0`).

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{DevicePtrArg, DeviceSlice, DeviceSliceMut, GemmConfig, LaunchConfig, Transpose};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::gemv::{gemv_names, names_of, Names};
use crate::launch::gemv::{Plan, MAX_ROWS};

/// Threads per block (`GV_BLOCK`): `lanes` along n times `GV_BLOCK / lanes` groups along k.
const BLOCK: usize = 256;
/// Most lanes along n per block: 64 lanes of 16-byte chunks read 1 KiB of each row of `w`.
const MAX_LANES: usize = 64;
/// Bytes of one row of `w` a block's lanes read together at least, when the tile is narrowed
/// for more blocks: one 128-byte cache line.
const MIN_SEGMENT: usize = 128;
/// Blocks a product should have (summed over the batch) before its column tiles are not
/// narrowed further.
const TARGET_BLOCKS: usize = 256;
/// Most blocks along x; the kernels loop over the rest.
const MAX_BLOCKS: usize = 65535;
/// Most batch entries (grid y).
const MAX_BATCH: usize = 65535;
/// The longest `k` the kernels take: one block sums all of `k` for its columns, where rocBLAS
/// splits `k` over blocks. Measured on the H100 harness (2026-11-26 19:15Z, `candle-rocm-bench
/// --only matvec` against `CANDLE_ROCM_FAST_KERNELS=0`): a `(1, 4096) x (4096, 4096)` product
/// (64-128 blocks) ran 2-4x slower here than on rocBLAS, while attention's `att v` at decode
/// (`k` = the context, 80) ran level with it (3.0 us against 3.2 us a call, Nsight Compute).
/// Between 80 and 4096 it was not measured; 1024 keeps decode attention up to that context.
const LONG_K: usize = 1024;

const F32_NAMES: Names = gemv_names!("gemv_nn_", "f32");
const F16_NAMES: Names = gemv_names!("gemv_nn_", "f16");
const BF16_NAMES: Names = gemv_names!("gemv_nn_", "bf16");

/// The kernels (scalar, vector) for `dtype` by rows - 1, when the kernels cover the dtype.
fn names(dtype: DType) -> Option<&'static Names> {
    names_of(dtype, [&F32_NAMES, &F16_NAMES, &BF16_NAMES])
}

/// The [`Plan`] for `cfg`, or `None` when the kernels do not take it (more than [`MAX_ROWS`]
/// rows, a transposed operand, alpha other than 1 or beta other than 0, an output with padded
/// rows, a dtype other than f32/f16/bf16, sizes past 32 bits, more than 65535 batch entries, or
/// a `k` past `LONG_K`).
pub fn plan(cfg: &GemmConfig, dtype: DType) -> Option<Plan> {
    let (rows, n, k) = (cfg.n, cfg.m, cfg.k);
    names(dtype)?;
    let small = |v: usize| u32::try_from(v).is_ok();
    let ok = (1..=MAX_ROWS).contains(&rows)
        && n > 0
        && k > 0
        && cfg.trans_a == Transpose::No
        && cfg.trans_b == Transpose::No
        && cfg.alpha == 1.0
        && cfg.beta == 0.0
        && cfg.ldc == n
        && cfg.batch >= 1
        && cfg.batch <= MAX_BATCH
        && [n, k, cfg.lda, cfg.ldb].into_iter().all(small);
    if !ok {
        return None;
    }
    let p = Plan {
        rows,
        n,
        k,
        ldw: cfg.lda,
        ldx: cfg.ldb,
        batch: cfg.batch,
        stride_w: cfg.stride_a,
        stride_x: cfg.stride_b,
        stride_y: cfg.stride_c,
    };
    (k <= LONG_K).then_some(p)
}

/// Lanes along n per block (the kernels' `lanes`, a power of two up to [`MAX_LANES`]) for rows
/// of `n` elements of `size` bytes, `e` per lane: the fewest that cover a row, then halved
/// while the product has fewer than [`TARGET_BLOCKS`] blocks over its `batch` and each row
/// segment a block reads stays at least [`MIN_SEGMENT`] bytes.
fn lanes(n: usize, batch: usize, e: usize, size: usize) -> usize {
    let units = n.div_ceil(e);
    let mut lanes = units.next_power_of_two().min(MAX_LANES);
    while lanes > 1
        && (lanes / 2) * e * size >= MIN_SEGMENT
        && tiles(n, lanes, e).saturating_mul(batch) < TARGET_BLOCKS
    {
        lanes /= 2;
    }
    lanes
}

/// Column tiles of `lanes` lanes of `e` elements over a row of `n`.
fn tiles(n: usize, lanes: usize, e: usize) -> usize {
    n.div_ceil(e).div_ceil(lanes)
}

/// Whether the 16-byte-load kernels (`_v`) can run: every row and batch entry of `w` starts
/// 16-byte aligned (its base address aligned, its row and batch strides multiples of the
/// chunk). `x` is read element by element on both paths.
fn vectorized(p: &Plan, size: usize, w_addr: usize) -> bool {
    let chunk = 16 / size;
    p.ldw % chunk == 0 && p.stride_w % chunk == 0 && w_addr % 16 == 0
}

/// Runs `plan` (from `cfg`): `out = x w` with `w` Candle's rhs and `x` its lhs, each from its
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
                "gemv_nn",
                format_args!("no kernel for {:?} with {} rows", T::DTYPE, p.rows),
            )
        })?;
    let vec = vectorized(p, size, w.device_ptr() as usize);
    let f = dev.function(Module::Gemv, if vec { vector } else { scalar })?;
    let e = if vec { 16 / size } else { 1 };
    let lanes = lanes(p.n, p.batch, e, size);
    debug_assert!(lanes.is_power_of_two() && lanes <= BLOCK);
    let grid_x = tiles(p.n, lanes, e).clamp(1, MAX_BLOCKS) as u32;
    let cfg = LaunchConfig {
        grid_dim: (grid_x, p.batch as u32, 1),
        block_dim: (BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    // `plan` kept these within u32.
    let (n, k, ldw, ldx) = (p.n as u32, p.k as u32, p.ldw as u32, p.ldx as u32);
    let (sw, sx, sy) = (p.stride_w as u64, p.stride_x as u64, p.stride_y as u64);
    let lanes = lanes as u32;
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
    l.arg(&sw).arg(&sx).arg(&sy).arg(&lanes);
    // SAFETY: gemv_nn_<T>_<M>[_v](const T* w, const T* x, T* y, u32 n, u32 k, u32 ldw,
    // u32 ldx, u64 stride_w, u64 stride_x, u64 stride_y, u32 lanes) with M = p.rows, T's name
    // and lanes a power of two <= GV_BLOCK (`lanes`), blocks of GV_BLOCK threads; `validate`
    // proved every row of every batch entry of w (k x n, row stride ldw), x (rows x k, ldx)
    // and y (rows x n, batch stride stride_y) lies inside its buffer; the kernels read no
    // column of w past n (a lane's partial chunk is read element by element); `_v` only when
    // every 16-byte chunk of w it loads is aligned (`vectorized`); grid y is the batch
    // (<= 65535), any grid x works (grid-stride loop); `out` is borrowed exclusively, so y
    // aliases neither input; all three are ordered on the device's one stream.
    unsafe { l.launch(cfg)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::gemm_config;
    use candle_core::{Layout, Shape};

    /// The static names are the kernels' (`gemv_nn_<T>_<M>[_v]`).
    #[test]
    fn kernel_names() {
        assert_eq!(F32_NAMES[0], ("gemv_nn_f32_1", "gemv_nn_f32_1_v"));
        assert_eq!(F16_NAMES[2], ("gemv_nn_f16_3", "gemv_nn_f16_3_v"));
        assert_eq!(BF16_NAMES[7], ("gemv_nn_bf16_8", "gemv_nn_bf16_8_v"));
        assert!(names(DType::F64).is_none());
    }

    /// Every kernel name of the tables exists in every embedded `gemv` object.
    #[test]
    fn every_named_kernel_is_built() {
        let wanted: Vec<&str> = [&F32_NAMES, &F16_NAMES, &BF16_NAMES]
            .into_iter()
            .flatten()
            .flat_map(|&(s, v)| [s, v])
            .collect();
        assert_eq!(wanted.len(), 3 * MAX_ROWS * 2);
        let targets: Vec<&str> = candle_rocm_kernels::embedded()
            .filter(|(m, _)| *m == Module::Gemv)
            .map(|(_, t)| t)
            .collect();
        assert!(!targets.is_empty(), "no embedded gemv objects");
        for t in targets {
            let raw = candle_rocm_kernels::code_object(Module::Gemv, t)
                .unwrap()
                .unwrap();
            let co = candle_rocm_kernels::code_object::CodeObject::parse(&raw).unwrap();
            let have: std::collections::HashSet<&str> =
                co.kernels.iter().map(|k| k.name.as_str()).collect();
            for w in &wanted {
                assert!(have.contains(w), "{w} missing from gemv.{t}");
            }
        }
    }

    /// The config of attention's `att @ v` at decode: att (1, 32, rows, s), v (1, 32, s, 64),
    /// both contiguous.
    fn att_v(rows: usize, s: usize) -> GemmConfig {
        let att = Layout::contiguous((1, 32, rows, s));
        let v = Layout::contiguous((1, 32, s, 64));
        gemm_config((32, rows, 64, s), &att, &v).unwrap()
    }

    /// `att @ v` for one token, one head per batch entry, is planned; so are up to 8 rows.
    #[test]
    fn attention_values_at_decode_are_planned() {
        for s in [1, 17, 80, 1000, LONG_K] {
            let p = plan(&att_v(1, s), DType::F32).unwrap();
            assert_eq!(
                (p.rows, p.n, p.k, p.ldw, p.ldx, p.batch),
                (1, 64, s, 64, s, 32),
                "s = {s}"
            );
            assert_eq!((p.stride_w, p.stride_x, p.stride_y), (s * 64, s, 64));
            assert!(vectorized(&p, 4, 256));
            assert!(!vectorized(&p, 4, 260));
        }
        for rows in 1..=MAX_ROWS {
            let p = plan(&att_v(rows, 21), DType::BF16).unwrap();
            assert_eq!(
                (p.rows, p.ldx, p.stride_x, p.stride_y),
                (rows, 21, rows * 21, rows * 64)
            );
        }
        assert!(plan(&att_v(9, 21), DType::F16).is_none());
        assert!(plan(&att_v(1, 21), DType::F64).is_none());
    }

    /// An odd n (no 16-byte rows: the scalar path), one row of w broadcast over the batch,
    /// and a plain 2-D product.
    #[test]
    fn other_layouts_are_planned() {
        let (n, k) = (13, 37);
        let x = Layout::contiguous((3, 1, k));
        let w = Layout::new(Shape::from((3, k, n)), vec![0, n, 1], 0);
        let p = plan(&gemm_config((3, 1, n, k), &x, &w).unwrap(), DType::F16).unwrap();
        assert_eq!((p.n, p.k, p.ldw, p.stride_w, p.stride_x), (n, k, n, 0, k));
        assert!(!vectorized(&p, 2, 0));
        let (x, w) = (Layout::contiguous((2, 40)), Layout::contiguous((40, 24)));
        let p = plan(&gemm_config((1, 2, 24, 40), &x, &w).unwrap(), DType::F32).unwrap();
        assert_eq!(
            (p.rows, p.n, p.k, p.ldw, p.ldx, p.batch),
            (2, 24, 40, 24, 40, 1)
        );
        assert!(vectorized(&p, 4, 0));
    }

    /// A transposed rhs (`x w^T`, the other planner's) or lhs, alpha/beta other than 1/0, an
    /// output with padded rows and sizes past 32 bits stay on rocBLAS.
    #[test]
    fn other_products_are_refused() {
        let (n, k) = (64, 32);
        let x = Layout::contiguous((1, 1, k));
        let wt = Layout::contiguous((1, n, k)).transpose(1, 2).unwrap();
        let cfg = gemm_config((1, 1, n, k), &x, &wt).unwrap();
        assert_eq!(cfg.trans_a, Transpose::Yes);
        assert!(plan(&cfg, DType::F32).is_none());
        let xt = Layout::contiguous((1, k, 2)).transpose(1, 2).unwrap();
        let w = Layout::contiguous((1, k, n));
        let cfg = gemm_config((1, 2, n, k), &xt, &w).unwrap();
        assert_eq!(cfg.trans_b, Transpose::Yes);
        assert!(plan(&cfg, DType::F32).is_none());
        let good = att_v(1, 17);
        assert!(plan(&good, DType::F32).is_some());
        for bad in [
            GemmConfig { alpha: 2.0, ..good },
            GemmConfig { beta: 1.0, ..good },
            GemmConfig { ldc: 65, ..good },
            GemmConfig { k: 0, ..good },
            GemmConfig {
                batch: MAX_BATCH + 1,
                ..good
            },
            GemmConfig {
                lda: 1 << 32,
                ..good
            },
            GemmConfig {
                m: 1 << 32,
                ldc: 1 << 32,
                ..good
            },
        ] {
            assert!(plan(&bad, DType::F32).is_none(), "{bad:?}");
        }
    }

    /// A `k` past [`LONG_K`] stays on rocBLAS (attention at a long context, a large `x w`).
    #[test]
    fn long_k_goes_to_rocblas() {
        assert!(plan(&att_v(1, LONG_K), DType::F32).is_some());
        assert!(plan(&att_v(1, LONG_K + 1), DType::F32).is_none());
        let k = 4096;
        let (x, w) = (Layout::contiguous((1, k)), Layout::contiguous((k, 4096)));
        let cfg = gemm_config((1, 1, 4096, k), &x, &w).unwrap();
        assert!(plan(&cfg, DType::F16).is_none());
    }

    /// Lanes cover a row (up to 64), then narrow to one cache line per row while blocks are
    /// few.
    #[test]
    fn lanes_cover_rows_then_fill_the_gpu() {
        // (n, batch, elements per lane, element size) -> lanes
        for (n, b, e, size, want) in [
            (64, 32, 4, 4, 8),    // att v f32: 16 lanes cover 64, 8 read one 128-byte line
            (64, 32, 8, 2, 8),    // f16: 8 lanes of 8 cover 64 (128 bytes)
            (64, 32, 1, 4, 32),   // scalar f32: 32 lanes of one element
            (128, 32, 8, 2, 8),   // head_dim 128 in f16: 16 lanes narrowed to 8
            (128, 256, 8, 2, 16), // a batch of 8 sequences already has 256 blocks
            (13, 1, 1, 4, 16),    // odd n: 16 lanes, 3 of them idle
            (1, 4, 1, 4, 1),
            (4096, 1, 4, 4, 8),  // 16 tiles of 64 lanes narrowed to 128 tiles of 8
            (4096, 1, 1, 2, 64), // scalar f16: 64 tiles; 128 bytes per row
        ] {
            assert_eq!(lanes(n, b, e, size), want, "n={n} b={b} e={e} size={size}");
        }
    }
}
