//! Host-side plans of the quantized products, no launches: which kernels exist for a GGML type
//! (the `qmatvec` kernel names), which path a product of `m` rows takes ([`qmatmul_path`]),
//! and the launch geometry of the mat-vec and tiled kernels.

use candle_core::quantized::GgmlDType;
use rocm_safe::LaunchConfig;

/// Threads per block of the `qmatvec` kernels (`QMV_BLOCK`).
pub(super) const QMATVEC_THREADS: u32 = 256;
/// Output rows per block of the `qmatvec` kernels (`QMV_ROWS`: 8 groups of 32 lanes, 2 rows
/// each).
pub(super) const QMATVEC_ROWS: usize = 16;
/// Most blocks of a `qmatvec` launch (the kernels loop over the rows beyond).
pub(super) const QMATVEC_MAX_GRID: usize = 1 << 20;

/// Bytes of one 32-value block of an 8-bit x row: 32 quants, then (f16 scale and f16 sum of
/// the values, i32 sum of the quants) in the row's tail (`QMV8_ROW_BYTES` in `qmatvec.hip`).
pub(super) const X8_BLOCK_BYTES: usize = 40;

/// Our mat-vec kernels of one block type, named once so a launch formats nothing; entry
/// `r - 1` takes `r` rows of x in one launch.
pub(super) struct QmatvecNames {
    /// f32 activations: the plain kernel and the `_v` one (x read as float4).
    pub(super) f32: &'static [[&'static str; 2]],
    /// 8-bit activations, as many as `f32`.
    pub(super) x8: &'static [&'static str],
    /// The tiled matrix-matrix kernels on 8-bit activations, `qmm8_<type>_m<16|32|64>`, by
    /// x-row tile (their f32 twins `qmm_*` are not in the shipped objects: measured slower than
    /// the f16 GEMM at every size).
    pub(super) qmm8: [&'static str; 3],
    /// The register-tiled kernels `qmr_<type>_m<8|16>` (f32 activations), by x-row tile.
    pub(super) qmr: [&'static str; 2],
    /// The split mat-vec of one f32 row (`qmatvec_split_<type>` and its `_v`), with
    /// [`crate::settings::qmatvec_split`].
    pub(super) split: [&'static str; 2],
    /// The mat-vec of one f32 row with SwiGLU's gate on stacked gate|up weights
    /// (`qmatvec_swiglu_<type>` and its `_v`).
    pub(super) swiglu: [&'static str; 2],
}

impl QmatvecNames {
    /// Most rows of x one launch takes: 8 for the 32-value blocks, 4 for the k-quants (their
    /// registers grow by 20-30 VGPRs a row on AMD; `QMV_K_MAX_M` in `qmatvec.hip`).
    pub(super) fn max_rows(&self) -> usize {
        self.f32.len()
    }
}

/// The names of `qmatvec_<t>`, `qmatvec_<t>_m<r>` (and their `_v`), `qmatvec8_<t>[_m<r>]`,
/// the tiled `qmm8_<t>_m<tile>`, the register-tiled `qmr_<t>_m<tile>`, the split
/// `qmatvec_split_<t>[_v]` and the gated `qmatvec_swiglu_<t>[_v]`
/// for the row-count suffixes given ("" for one row).
macro_rules! qmatvec_names {
    ($t:literal: $($suffix:literal),+) => {
        QmatvecNames {
            f32: &[$([
                concat!("qmatvec_", $t, $suffix),
                concat!("qmatvec_", $t, $suffix, "_v"),
            ]),+],
            x8: &[$(concat!("qmatvec8_", $t, $suffix)),+],
            qmm8: [
                concat!("qmm8_", $t, "_m16"),
                concat!("qmm8_", $t, "_m32"),
                concat!("qmm8_", $t, "_m64"),
            ],
            qmr: [concat!("qmr_", $t, "_m8"), concat!("qmr_", $t, "_m16")],
            split: [concat!("qmatvec_split_", $t), concat!("qmatvec_split_", $t, "_v")],
            swiglu: [concat!("qmatvec_swiglu_", $t), concat!("qmatvec_swiglu_", $t, "_v")],
        }
    };
}

/// Our `qmatvec` kernels for a block type, if they exist.
pub(super) fn qmatvec_kernel(dtype: GgmlDType) -> Option<QmatvecNames> {
    Some(match dtype {
        GgmlDType::Q4_0 => {
            qmatvec_names!("q4_0": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q4_1 => {
            qmatvec_names!("q4_1": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q8_0 => {
            qmatvec_names!("q8_0": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q5_0 => {
            qmatvec_names!("q5_0": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q5_1 => {
            qmatvec_names!("q5_1": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q4K => qmatvec_names!("q4_K": "", "_m2", "_m3", "_m4"),
        GgmlDType::Q5K => qmatvec_names!("q5_K": "", "_m2", "_m3", "_m4"),
        GgmlDType::Q6K => qmatvec_names!("q6_K": "", "_m2", "_m3", "_m4"),
        _ => return None,
    })
}

/// Which kernels a quantized product of f32 activation rows runs (see [`qmatmul_path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QmatmulPath {
    /// The mat-vec kernels: ours (`qmatvec_*`, `qmatvec8_*` with `CANDLE_ROCM_QMATVEC=q8`),
    /// or candle-kernels' for one row of the other types.
    MatVec,
    /// The tiled kernels: the register-tiled `qmr_*` in f32 (up to 16 rows), the `qmm8_*`
    /// tiles on 8-bit activations.
    Tiled,
    /// The weights dequantized to f16 for one GEMM (or, for what that does not take, the
    /// slot's dequantize and f32 matmul).
    Gemm,
}

/// Rows up to which the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) run the mat-vec
/// in f32 when `CANDLE_ROCM_QMATVEC_ROWS` is unset: from 7 rows the register-tiled `qmr`
/// kernels are faster (see `settings::QMATMUL_ROWS_VAR`).
pub(super) const QMATVEC_ROWS_BLOCK32_F32: usize = 6;

/// The path a product of `m` f32 rows of activations on `dtype` weights takes: the mat-vec up
/// to `CANDLE_ROCM_QMATVEC_ROWS` rows (unset: 6 for the 32-value block types in f32, else 8),
/// then the tiled kernels up to `CANDLE_ROCM_QMATMUL_ROWS` (unset: 8; in f32 at most 16, the
/// register-tiled kernels' rows) for the types that have them, then the GEMM. A path whose kernels do not apply to the shape (e.g. `k` not a
/// multiple of the block, or `x` not contiguous) falls through to the GEMM.
pub fn qmatmul_path(dtype: GgmlDType, m: usize) -> QmatmulPath {
    let names = qmatvec_kernel(dtype);
    let mat_vec_rows = crate::settings::qmatvec_rows_set().unwrap_or(match &names {
        Some(_) if dtype.block_size() == 32 && !crate::settings::qmatvec_q8() => {
            QMATVEC_ROWS_BLOCK32_F32
        }
        _ => crate::settings::QMATVEC_ROWS_DEFAULT,
    });
    if m <= mat_vec_rows {
        QmatmulPath::MatVec
    } else if names.is_some() && m <= tiled_max_rows() {
        QmatmulPath::Tiled
    } else {
        QmatmulPath::Gemm
    }
}

/// The most rows the tiled path takes: `CANDLE_ROCM_QMATMUL_ROWS`, at most [`QMR_MAX_ROWS`] in
/// f32 (past them only the f16 GEMM is left: the f32 `qmm_*` tiles are not shipped).
fn tiled_max_rows() -> usize {
    let rows = crate::settings::qmatmul_max_rows();
    if crate::settings::qmatvec_q8() {
        rows
    } else {
        rows.min(QMR_MAX_ROWS)
    }
}

/// Threads per block of the `qmr` kernels (`QMR_BLOCK`).
pub(super) const QMR_THREADS: u32 = 256;
/// Weight rows per block of the `qmr` kernels (`QMR_ROWS`).
pub(super) const QMR_TILE_N: usize = 16;
/// Most activation rows the tiled path gives the `qmr` kernels in f32; past it, the f16 GEMM
/// (measured: each further 16 rows cost `qmr` as much again; figures in bench/results and the
/// README).
pub(super) const QMR_MAX_ROWS: usize = 16;

/// Threads per block of the `qmm` kernels (`QMM_BLOCK`).
pub(super) const QMM_THREADS: u32 = 256;
/// Weight rows per block of the `qmm` kernels (`QMM_TN`).
pub(super) const QMM_TILE_N: usize = 64;
/// Values of k per step of the `qmm` kernels (`QMM_KC`): k must be a multiple.
pub(super) const QMM_CHUNK: usize = 32;
/// Blocks a `qmm` launch aims at per compute unit: several resident blocks hide the weight
/// loads of one behind the arithmetic of others, and a second wave evens out the last one (4
/// measured slower, with each chunk's loads waiting on a full memory latency).
pub(super) const QMM_BLOCKS_PER_CU: usize = 8;
/// Fewest k chunks per slice: a slice shorter than this spends more on its partial sums than
/// it saves.
pub(super) const QMM_MIN_CHUNKS: usize = 4;
/// Most k slices (the grid's z, and the partial buffers: slices * m * n floats).
pub(super) const QMM_MAX_SLICES: usize = 64;

/// The x-row tile of the `qmm` kernels for `m` rows (index into [`QmatvecNames::qmm8`] and the
/// tile's rows): 16, 32, or 64 (several tiles past 64).
pub(super) fn qmm_tile(m: usize) -> (usize, usize) {
    match m {
        0..=16 => (0, 16),
        17..=32 => (1, 32),
        _ => (2, 64),
    }
}

/// How a `qmm` launch splits k: (chunks per slice, slices) for `tiles` output tiles, `chunks`
/// chunks of k and `cus` compute units. A product with few tiles (a 4096-row weight has 64)
/// would leave most of a GPU idle, so k is split into slices whose partial products
/// `qmm_reduce` adds in order: enough blocks for [`QMM_BLOCKS_PER_CU`] per compute unit, each
/// slice at least [`QMM_MIN_CHUNKS`] chunks, at most [`QMM_MAX_SLICES`] slices, none empty.
pub(super) fn qmm_slices(tiles: usize, chunks: usize, cus: usize) -> (usize, usize) {
    let chunks = chunks.max(1);
    let want = (QMM_BLOCKS_PER_CU * cus.max(1)).div_ceil(tiles.max(1));
    let most = (chunks / QMM_MIN_CHUNKS).clamp(1, QMM_MAX_SLICES);
    let cps = chunks.div_ceil(want.clamp(1, most));
    (cps, chunks.div_ceil(cps))
}

/// `m` rows split into launches of at most `max` rows (`max` >= 1): (first row, row count),
/// the counts as even as they can be (7 rows at most 4 a launch: 3 and 4).
pub(super) fn row_chunks(m: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let max = max.max(1);
    let launches = m.div_ceil(max);
    (0..launches).map(move |i| {
        let first = i * m / launches;
        (first, (i + 1) * m / launches - first)
    })
}

/// Launch of a `qmatvec` kernel: the grid for `n` rows and whether x (at device address
/// `x_addr`) allows the `_v` kernel's float4 loads. Ported line for line in the emulator
/// driver `kernels/tests/emu/qmatvec_test.cpp` (`launch_shape`).
pub(super) struct QmatvecLaunch {
    /// Grid and block.
    pub(super) cfg: LaunchConfig,
    /// Whether x is 16-byte aligned (the `_v` kernel).
    pub(super) vec: bool,
}

impl QmatvecLaunch {
    /// The launch for `n` output rows with x at `x_addr`.
    pub(super) fn new(n: usize, x_addr: usize) -> Self {
        Self::with_rows_per_block(n, QMATVEC_ROWS, x_addr)
    }

    /// The launch for `n` output rows at `rows_per_block` rows a block (the split and gated
    /// kernels cover fewer), x at `x_addr`.
    pub(super) fn with_rows_per_block(n: usize, rows_per_block: usize, x_addr: usize) -> Self {
        let grid = n.div_ceil(rows_per_block).clamp(1, QMATVEC_MAX_GRID);
        QmatvecLaunch {
            cfg: LaunchConfig {
                // At most 2^20: fits u32.
                grid_dim: (grid as u32, 1, 1),
                block_dim: (QMATVEC_THREADS, 1, 1),
                shared_mem_bytes: 0,
            },
            vec: x_addr % 16 == 0,
        }
    }
}

/// Groups of 32 lanes in a `qmatvec` block (`QMV_BLOCK / QMV_GROUP`): the most groups per row
/// group of the split kernels.
pub(super) const QMATVEC_GROUPS: usize = 8;
/// Outputs one block of a `qmatvec_swiglu_*` kernel covers (`QMV_SWIGLU_ROWS`: a group per
/// output, its gate row and its up row).
pub(super) const QMATVEC_SWIGLU_ROWS: usize = QMATVEC_GROUPS;
/// Blocks a split mat-vec launch ([`QmatvecSplit`]) should have at least before its row groups
/// are not split further: several per compute unit of a large GPU (132 SMs on an H100, 304
/// CUs on an MI300X), so that more groups walk shorter stretches of k at once; the dense
/// `gemv` kernels' target (`launch::gemv`'s `TARGET_BLOCKS`), a starting point until measured.
pub(super) const QMATVEC_SPLIT_TARGET_BLOCKS: usize = 1024;

/// Blocks (of 32 values) or super-blocks (of 256) one group of a `qmatvec` kernel covers per
/// step, for blocks of `block_size` values: `QMV_BS` (8) and `QMV_KS` (2).
pub(super) fn qmatvec_step_blocks(block_size: usize) -> usize {
    if block_size == 32 {
        8
    } else {
        2
    }
}

/// Groups per row group of the split kernels (their `gpr`: 1, 2, 4 or 8) for `n` rows of `nb`
/// blocks, `step` blocks a group step: the fewest that give [`QMATVEC_SPLIT_TARGET_BLOCKS`]
/// blocks, but no more than leave each group at least one step of the row's blocks (as
/// `launch::gemv`'s `groups_per_row`). Ported in the emulator driver
/// `kernels/tests/emu/qmatvec_decode_test.cpp` (`split_groups_per_row`).
pub(super) fn split_groups_per_row(n: usize, nb: usize, step: usize) -> usize {
    // The largest power of two at or below the steps' bound (11 steps allow 8, 6 allow 4).
    let bound = (nb / step.max(1)).clamp(1, QMATVEC_GROUPS);
    let most = 1 << bound.ilog2();
    let mut gpr = 1;
    while gpr < most && n.saturating_mul(gpr).div_ceil(QMATVEC_ROWS) < QMATVEC_SPLIT_TARGET_BLOCKS {
        gpr *= 2;
    }
    gpr
}

/// Whether `auto` ([`crate::settings::SplitMode::Auto`]) runs a one-row product on `n` rows
/// of weights on the split kernels, on a GPU of `compute_units`: when the unsplit launch
/// ([`QMATVEC_ROWS`] rows a block) has fewer blocks than the GPU has compute units, so some
/// would sit idle while each group walks all of k. Weights of more rows keep the unsplit
/// kernels, which were faster there (a 4096- and a 5632-row weight on the H100 harness, where
/// 256-row and 2048-row ones ran faster split; bench/results, 2026-11-26).
pub(super) fn split_pays(n: usize, compute_units: usize) -> bool {
    n.div_ceil(QMATVEC_ROWS) < compute_units
}

/// Launch of a split `qmatvec_split_*` kernel (one x row): the groups per row group, the grid
/// for `n` rows of `nb` blocks (`QMATVEC_ROWS / gpr` rows a block) and whether x (at device
/// address `x_addr`) allows the `_v` kernel's float4 loads.
pub(super) struct QmatvecSplit {
    /// Grid and block.
    pub(super) cfg: LaunchConfig,
    /// Whether x is 16-byte aligned (the `_v` kernel).
    pub(super) vec: bool,
    /// Groups per row group (the kernels' last argument).
    pub(super) gpr: u32,
}

impl QmatvecSplit {
    /// The launch for `n` output rows of `nb` blocks of `block_size` values, x at `x_addr`.
    pub(super) fn new(n: usize, nb: usize, block_size: usize, x_addr: usize) -> Self {
        let gpr = split_groups_per_row(n, nb, qmatvec_step_blocks(block_size));
        let QmatvecLaunch { cfg, vec } =
            QmatvecLaunch::with_rows_per_block(n, QMATVEC_ROWS / gpr, x_addr);
        QmatvecSplit {
            cfg,
            vec,
            // 1, 2, 4 or 8.
            gpr: gpr as u32,
        }
    }
}

/// Output rows per block of the dequantize-mat-vec kernels: 4 (or 2) when that divides `n`,
/// so a block has 128 (64) threads: one 32-thread block per row leaves a wave64 half empty on
/// AMD and caps residency on any GPU. The kernels find their row as `blockIdx.x * blockDim.y
/// + threadIdx.y`, and the k-quant ones return early only past `row > nrows` (not `>=`), so
/// the grid must cover exactly `n` rows: hence only divisors of `n`. The q5_K kernel (no row
/// count, `with_rows` false) reads its row from `blockIdx.x` alone and keeps 1.
pub(super) fn mat_vec_rows_per_block(n: usize, with_rows: bool) -> usize {
    if !with_rows {
        1
    } else if n % 4 == 0 {
        4
    } else if n % 2 == 0 {
        2
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mat_vec_blocks_cover_exactly_the_rows() {
        for n in [1usize, 2, 3, 4, 6, 576, 4097, 32000, 49152] {
            for with_rows in [true, false] {
                let r = mat_vec_rows_per_block(n, with_rows);
                assert_eq!(n % r, 0, "n {n}: {r} rows per block");
                assert!(with_rows || r == 1);
            }
        }
        assert_eq!(mat_vec_rows_per_block(32000, true), 4);
        assert_eq!(mat_vec_rows_per_block(6, true), 2);
    }

    #[test]
    fn qmatvec_launch_matches_the_emulator_port() {
        // The emulator driver's `test_port` checks the same values.
        let a = QmatvecLaunch::new(1, 256);
        assert_eq!(
            (a.cfg.grid_dim, a.cfg.block_dim, a.vec),
            ((1, 1, 1), (256, 1, 1), true)
        );
        let b = QmatvecLaunch::new(17, 260);
        assert_eq!((b.cfg.grid_dim.0, b.vec), (2, false));
        let c = QmatvecLaunch::new(1 << 30, 256);
        assert_eq!(c.cfg.grid_dim.0 as usize, QMATVEC_MAX_GRID);
        assert_eq!(QmatvecLaunch::new(32000, 0).cfg.grid_dim.0, 2000);
        for t in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
        ] {
            assert_eq!(t.block_size(), 32, "{t:?}");
            assert!(qmatvec_kernel(t).is_some());
        }
        for t in [GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K] {
            assert_eq!(t.block_size(), 256, "{t:?}");
            assert!(qmatvec_kernel(t).is_some());
        }
        for t in [
            GgmlDType::Q2K,
            GgmlDType::Q3K,
            GgmlDType::Q8K,
            GgmlDType::Q8_1,
        ] {
            assert!(qmatvec_kernel(t).is_none(), "{t:?}");
        }
    }

    #[test]
    fn default_paths_follow_the_measured_crossovers() {
        // Only with the defaults (a developer's CANDLE_ROCM_QMATVEC_ROWS, CANDLE_ROCM_QMATMUL_ROWS
        // or CANDLE_ROCM_QMATVEC=q8 moves them on purpose).
        if [
            crate::settings::QMATVEC_ROWS_VAR,
            crate::settings::QMATMUL_ROWS_VAR,
            crate::settings::QMATVEC_VAR,
        ]
        .iter()
        .any(|v| crate::settings::is_set(v))
        {
            return;
        }
        use QmatmulPath::*;
        for dtype in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
        ] {
            let paths: Vec<_> = (1..=10).map(|m| qmatmul_path(dtype, m)).collect();
            let want = [
                MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, Tiled, Tiled, Gemm, Gemm,
            ];
            assert_eq!(paths, want, "{dtype:?}");
        }
        for dtype in [GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K] {
            let paths: Vec<_> = (1..=10).map(|m| qmatmul_path(dtype, m)).collect();
            let want = [
                MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, Gemm, Gemm,
            ];
            assert_eq!(paths, want, "{dtype:?}");
        }
        // Types without our kernels: candle's mat-vec for one row (more rows find no mat-vec
        // there and fall through to the GEMM), never the tiled path.
        for dtype in [GgmlDType::Q2K, GgmlDType::Q8_1, GgmlDType::F16] {
            assert_eq!(qmatmul_path(dtype, 1), MatVec, "{dtype:?}");
            assert_eq!(qmatmul_path(dtype, 9), Gemm, "{dtype:?}");
            assert!(
                (1..=64).all(|m| qmatmul_path(dtype, m) != Tiled),
                "{dtype:?}"
            );
        }
    }

    /// `auto` splits the weights whose unsplit grid leaves compute units idle.
    #[test]
    fn split_pays_below_a_block_per_compute_unit() {
        // (n, compute units) -> split; 132 SMs on an H100, 304 CUs on an MI300X.
        for (n, cus, want) in [
            (256, 132, true),    // k, v of a 1.1B llama: 16 blocks
            (2048, 132, true),   // q, o, down: 128 blocks
            (2112, 132, false),  // 132 blocks: one each
            (4096, 132, false),  // 256 blocks
            (5632, 132, false),  // gate, up: 352 blocks
            (32000, 132, false), // lm_head
            (4096, 304, true),
            (1, 1, false),
        ] {
            assert_eq!(split_pays(n, cus), want, "n {n} compute units {cus}");
        }
    }

    /// The split kernels' groups per row group: the fewest reaching the target blocks, never
    /// past one step of blocks per group (the emulator driver's `split_port` checks the same).
    #[test]
    fn split_groups_per_row_fill_the_gpu() {
        // (n, nb, step) -> gpr
        for (n, nb, step, want) in [
            (2048, 64, 8, 8),  // 2048 x 2048 q4_0: 128 blocks at gpr 1, 1024 at 8
            (256, 64, 8, 8),   // 256 x 2048: 16 blocks; 8 steps allow 8 groups
            (2048, 176, 8, 8), // 2048 x 5632 q4_0
            (32000, 64, 8, 1), // lm_head: 2000 blocks already
            (5632, 64, 8, 4),  // 5632 x 2048: 1408 blocks at 4
            (2048, 8, 2, 4),   // 2048 x 2048 q4_K: 4 steps, so 4 groups at most
            (2048, 22, 2, 8),  // 2048 x 5632 q6_K: 11 steps
            (2048, 16, 8, 2),  // k = 512 q4_0: 2 steps
            (2048, 1, 8, 1),   // one block: no split
            (1, 1, 2, 1),      // one super-block
            (16384, 64, 8, 1), // exactly the target at 1
            (8192, 64, 8, 2),  // the target at 2
        ] {
            assert_eq!(
                split_groups_per_row(n, nb, step),
                want,
                "n {n} nb {nb} step {step}"
            );
        }
        assert_eq!(qmatvec_step_blocks(32), 8);
        assert_eq!(qmatvec_step_blocks(256), 2);
        // The grid: QMATVEC_ROWS / gpr rows a block, at least one block, at most the cap.
        let a = QmatvecSplit::new(2048, 64, 32, 256);
        assert_eq!((a.gpr, a.cfg.grid_dim, a.vec), (8, (1024, 1, 1), true));
        let b = QmatvecSplit::new(17, 3, 256, 260);
        assert_eq!((b.gpr, b.cfg.grid_dim.0, b.vec), (1, 2, false));
        let c = QmatvecSplit::new(17, 64, 32, 0);
        assert_eq!((c.gpr, c.cfg.grid_dim.0), (8, 9));
        let d = QmatvecSplit::new(1 << 30, 1, 32, 0);
        assert_eq!(d.cfg.grid_dim.0 as usize, QMATVEC_MAX_GRID);
        for n in [1, 2, 3, 15, 16, 17, 255, 4097] {
            for nb in [1, 2, 7, 8, 16, 31, 64, 200] {
                for bs in [32, 256] {
                    let s = QmatvecSplit::new(n, nb, bs, 0);
                    assert!(s.gpr.is_power_of_two() && s.gpr as usize <= QMATVEC_GROUPS);
                    // Each group has at least one step, unless there is only one.
                    let steps = nb / qmatvec_step_blocks(bs);
                    assert!(
                        s.gpr == 1 || steps >= s.gpr as usize,
                        "n {n} nb {nb} bs {bs}"
                    );
                    // The grid covers every row.
                    let rows = s.cfg.grid_dim.0 as usize * (QMATVEC_ROWS / s.gpr as usize);
                    assert!(rows >= n, "n {n} nb {nb} bs {bs}");
                }
            }
        }
    }

    #[test]
    fn qmm_slices_cover_k_once_and_fill_the_gpu() {
        for tiles in [1, 3, 64, 128, 500, 4096] {
            for chunks in [1, 2, 3, 7, 16, 128, 129, 1000, 4096] {
                for cus in [1, 60, 132, 304] {
                    let (cps, slices) = qmm_slices(tiles, chunks, cus);
                    let what = format!("tiles {tiles} chunks {chunks} cus {cus}");
                    assert!(cps >= 1 && (1..=QMM_MAX_SLICES).contains(&slices), "{what}");
                    // Every chunk in one slice, and no slice empty.
                    assert!(
                        slices * cps >= chunks && (slices - 1) * cps < chunks,
                        "{what}"
                    );
                    if slices > 1 {
                        assert!(cps >= QMM_MIN_CHUNKS, "{what}: {cps} chunks a slice");
                    }
                    // Splitting only where the tiles alone fall short of the target.
                    if tiles >= QMM_BLOCKS_PER_CU * cus {
                        assert_eq!(slices, 1, "{what}");
                    }
                }
            }
        }
        // A 4096 x 4096 weight at 16 rows on 132 compute units: 64 tiles, 128 chunks of 32
        // values: 16 slices of 8 chunks give 1024 blocks.
        assert_eq!(qmm_slices(64, 128, 132), (8, 16));
    }

    #[test]
    fn qmm_tiles_hold_the_rows() {
        assert_eq!(qmm_tile(9), (0, 16));
        assert_eq!(qmm_tile(16), (0, 16));
        assert_eq!(qmm_tile(17), (1, 32));
        assert_eq!(qmm_tile(32), (1, 32));
        assert_eq!(qmm_tile(33), (2, 64));
        assert_eq!(qmm_tile(500), (2, 64));
    }

    #[test]
    fn row_chunks_cover_every_row_once_within_the_kernels_limit() {
        for max in 1..=8 {
            for m in 0..=20 {
                let chunks: Vec<_> = row_chunks(m, max).collect();
                let mut next = 0;
                for &(first, count) in &chunks {
                    assert_eq!(first, next, "m {m} max {max}: {chunks:?}");
                    assert!((1..=max).contains(&count), "m {m} max {max}: {chunks:?}");
                    next += count;
                }
                assert_eq!(next, m);
                assert_eq!(chunks.len(), m.div_ceil(max));
            }
        }
        assert_eq!(row_chunks(7, 4).collect::<Vec<_>>(), [(0, 3), (3, 4)]);
        assert_eq!(row_chunks(8, 8).collect::<Vec<_>>(), [(0, 8)]);
    }

    #[test]
    fn qmatvec_names_follow_the_kernels() {
        let q40 = qmatvec_kernel(GgmlDType::Q4_0).unwrap();
        assert_eq!(q40.max_rows(), 8);
        assert_eq!(q40.f32[0], ["qmatvec_q4_0", "qmatvec_q4_0_v"]);
        assert_eq!(q40.f32[7], ["qmatvec_q4_0_m8", "qmatvec_q4_0_m8_v"]);
        assert_eq!(q40.x8[2], "qmatvec8_q4_0_m3");
        let q6k = qmatvec_kernel(GgmlDType::Q6K).unwrap();
        assert_eq!(q6k.max_rows(), 4);
        assert_eq!(q6k.f32[3], ["qmatvec_q6_K_m4", "qmatvec_q6_K_m4_v"]);
        assert_eq!(q6k.x8[3], "qmatvec8_q6_K_m4");
        assert_eq!(
            q6k.qmm8,
            ["qmm8_q6_K_m16", "qmm8_q6_K_m32", "qmm8_q6_K_m64"]
        );
        assert_eq!(q40.qmm8[1], "qmm8_q4_0_m32");
        // q5_0 / q5_1: as many rows as the other 32-value blocks.
        let q51 = qmatvec_kernel(GgmlDType::Q5_1).unwrap();
        assert_eq!(q51.max_rows(), 8);
        assert_eq!(q51.f32[4], ["qmatvec_q5_1_m5", "qmatvec_q5_1_m5_v"]);
        assert_eq!(q51.x8[7], "qmatvec8_q5_1_m8");
        assert_eq!(q51.qmm8[0], "qmm8_q5_1_m16");
        assert_eq!(q51.qmm8[2], "qmm8_q5_1_m64");
        assert_eq!(q51.qmr, ["qmr_q5_1_m8", "qmr_q5_1_m16"]);
        assert_eq!(q40.qmr[1], "qmr_q4_0_m16");
        assert_eq!(q40.split, ["qmatvec_split_q4_0", "qmatvec_split_q4_0_v"]);
        assert_eq!(q6k.split, ["qmatvec_split_q6_K", "qmatvec_split_q6_K_v"]);
        assert_eq!(q40.swiglu, ["qmatvec_swiglu_q4_0", "qmatvec_swiglu_q4_0_v"]);
        assert_eq!(q6k.swiglu, ["qmatvec_swiglu_q6_K", "qmatvec_swiglu_q6_K_v"]);
        for t in [
            GgmlDType::Q4_0,
            GgmlDType::Q5_0,
            GgmlDType::Q4K,
            GgmlDType::Q6K,
        ] {
            let names = qmatvec_kernel(t).unwrap();
            assert_eq!(names.x8.len(), names.f32.len(), "{t:?}");
        }
    }

    /// Every kernel the plan launches is exported by the qmatvec code object of every target
    /// (read from the embedded objects themselves).
    #[cfg(feature = "embed-kernels")]
    #[test]
    fn every_qmatvec_kernel_is_in_every_code_object() {
        use candle_rocm_kernels::code_object::CodeObject;
        use candle_rocm_kernels::{code_object, Module, GENERIC_TARGETS, TARGETS};

        let objects: Vec<(&str, CodeObject)> = TARGETS
            .iter()
            .chain(GENERIC_TARGETS)
            .map(|&t| {
                let raw = code_object(Module::Qmatvec, t)
                    .unwrap_or_else(|| panic!("no qmatvec object for {t}"))
                    .unwrap();
                (t, CodeObject::parse(&raw).unwrap())
            })
            .collect();
        assert!(objects.len() >= 13, "{} qmatvec objects", objects.len());
        for t in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ] {
            let names = qmatvec_kernel(t).unwrap();
            let dequantize = format!(
                "qmv_dequantize_{}_f16",
                format!("{t:?}").to_lowercase().replace('k', "_K")
            );
            let all = names.f32.iter().flatten().chain(names.x8.iter());
            let all = all
                .chain(names.qmr.iter())
                .chain(names.split.iter())
                .chain(names.swiglu.iter())
                .chain(names.qmm8.iter())
                .copied();
            for name in all.chain([dequantize.as_str(), "qmm_reduce"]) {
                for (target, co) in &objects {
                    assert!(co.has_kernel(name), "{name} missing from qmatvec.{target}");
                }
            }
            // The f32 `qmm_*` tiles are not shipped (no default or documented switch reaches
            // them: the f16 GEMM is faster).
            let ty = names.qmr[0]
                .trim_start_matches("qmr_")
                .trim_end_matches("_m8");
            for tile in [16, 32, 64] {
                let name = format!("qmm_{ty}_m{tile}");
                for (target, co) in &objects {
                    assert!(!co.has_kernel(&name), "{name} shipped in qmatvec.{target}");
                }
            }
        }
    }
}
