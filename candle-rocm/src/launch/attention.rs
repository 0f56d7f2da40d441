//! Launchers of our attention kernels (`kernels/hip/attention.hip`): the prefill tiles
//! (`fa_fwd_<T>_<DMAX>`, `fa_mma_<T>_<DMAX>`), the decode kernels (`fa_dec4_<T>_<DMAX>`,
//! `fa_dec8_<T>_<DMAX>`, `fa_mdec_<T>_<DMAX>`, the short `fa_sdec<R>_<T>_<DMAX>`), their mixed forms for f32 q over f16 keys and
//! values (`fa_mma_f32h_<DMAX>`, `fa_mdec_f32h_<DMAX>`, `fa_dec4_f32h_<DMAX>`,
//! `fa_dec8_f32h_<DMAX>`), the combine of a split call
//! (`fa_combine_<T>`) and the paged-cache write (`fa_cache_write_<T>`). The kernels take one argument, the
//! [`FaParams`] struct, which addresses every operand by raw device address and stride; the
//! launchers cannot check those reaches themselves, so the tile and combine launchers are
//! `unsafe` and [`crate::ops::attention`] proves them first.

use std::borrow::Cow;

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{DevicePtrArg, DeviceRepr, DeviceSlice, DeviceSliceMut, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{invalid, kernel_limit, out_of_bounds};

/// Threads per block of every attention kernel (`FA_THREADS`).
pub const THREADS: u32 = 128;
/// Keys per tile of the prefill kernels (`FA_BN`): the unit their splits divide the keys in.
pub const KEY_TILE: usize = 64;
/// Keys per tile of the decode kernels (one per thread; `FA_DEC_TILE`).
pub const DECODE_KEY_TILE: usize = THREADS as usize;
/// Keys per tile of the FMA decode kernels in f32 (`FA_DEC_TILE_F32`): a quarter of
/// [`DECODE_KEY_TILE`], so an f32 decode (a GGUF model's f32 KV cache) over a short or
/// middling context splits over more blocks.
pub const DECODE_KEY_TILE_F32: usize = 32;
/// The most packed (query, head-in-group) rows a decode kernel takes.
pub const DECODE_ROWS: usize = 8;
/// Packed rows per tile of the matrix-unit tile (`fa_mma_*`, every tier).
pub const MMA_ROWS: usize = 64;
/// The head-dim tiers the kernels are built for (`DMAX`).
pub const TIERS: [usize; 4] = [64, 128, 256, 512];

/// `struct fa_params` of `attention.hip`, field for field (264 bytes, 8-byte aligned): device
/// addresses as `u64` (0 for an absent operand), strides in elements.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[allow(missing_docs)]
pub struct FaParams {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub o_part: u64,
    pub lse_part: u64,
    pub cu_q: u64,
    pub cu_k: u64,
    pub block_table: u64,
    pub alibi: u64,
    pub mm_prefix: u64,
    pub q_batch: u64,
    pub q_row: u64,
    pub q_head: u64,
    pub k_batch: u64,
    pub k_row: u64,
    pub k_head: u64,
    pub v_batch: u64,
    pub v_row: u64,
    pub v_head: u64,
    pub o_batch: u64,
    pub o_row: u64,
    pub o_head: u64,
    pub heads: u32,
    pub kv_heads: u32,
    pub group: u32,
    pub d: u32,
    pub seqlen_q: u32,
    pub seqlen_k: u32,
    pub batch: u32,
    pub splits: u32,
    pub page: u32,
    pub bt_stride: u32,
    pub tiles_per_split: u32,
    pub total_q: u32,
    pub mm_ranges: u32,
    pub mm_stride: u32,
    pub vec_ok: u32,
    pub pad_: u32,
    pub window_left: i32,
    pub window_right: i32,
    pub scale: f32,
    pub softcap: f32,
}

// SAFETY: FaParams is plain old data (u64/u32/i32/f32 fields, `repr(C)`, no padding: 23 u64
// then 20 four-byte fields), valid for any bit pattern and copied to the kernel by value.
unsafe impl DeviceRepr for FaParams {}

/// The index of `dtype` in the name tables, for the dtypes the kernels cover.
fn dtype_index(dtype: DType) -> Result<usize, BackendError> {
    match dtype {
        DType::F32 => Ok(0),
        DType::F16 => Ok(1),
        DType::BF16 => Ok(2),
        dtype => Err(BackendError::UnsupportedDtype {
            op: "flash-attn",
            dtype,
        }),
    }
}

/// `fa_<kind>_<T>_<DMAX>` for the three dtypes and four tiers (static: no name is built per
/// call on the decode path).
macro_rules! tile_names {
    ($kind:literal) => {
        [
            tile_names!(@t $kind, "f32"),
            tile_names!(@t $kind, "f16"),
            tile_names!(@t $kind, "bf16"),
        ]
    };
    (@t $kind:literal, $t:literal) => {
        [
            concat!("fa_", $kind, "_", $t, "_64"),
            concat!("fa_", $kind, "_", $t, "_128"),
            concat!("fa_", $kind, "_", $t, "_256"),
            concat!("fa_", $kind, "_", $t, "_512"),
        ]
    };
}
const FWD_NAMES: [[&str; 4]; 3] = tile_names!("fwd");
/// `fa_mma_<T>_<DMAX>` for f16 and bf16 (index 1, 2 as in the tables above) and the tiers 64,
/// 128, 256; only some targets' code objects define them (`attention/mma.h`).
const MMA_NAMES: [[&str; 3]; 2] = [
    ["fa_mma_f16_64", "fa_mma_f16_128", "fa_mma_f16_256"],
    ["fa_mma_bf16_64", "fa_mma_bf16_128", "fa_mma_bf16_256"],
];
/// `fa_mdec_<T>_<DMAX>` for f16 and bf16 and the tiers 64 and 128: the matrix-unit decode
/// kernel (`attention/mma_dec.h`), where the code object has it.
const MDEC_NAMES: [[&str; 2]; 2] = [
    ["fa_mdec_f16_64", "fa_mdec_f16_128"],
    ["fa_mdec_bf16_64", "fa_mdec_bf16_128"],
];
/// The mixed kernels (f32 q and output, f16 keys and values): `fa_mma_f32h_<DMAX>` for the
/// tiers 64, 128, 256 and `fa_mdec_f32h_<DMAX>` for 64 and 128, where the code object has them;
/// the FMA decode kernels `fa_dec4_f32h_<DMAX>` and `fa_dec8_f32h_<DMAX>` for every tier.
const MIXED_MMA_NAMES: [&str; 3] = ["fa_mma_f32h_64", "fa_mma_f32h_128", "fa_mma_f32h_256"];
const MIXED_MDEC_NAMES: [&str; 2] = ["fa_mdec_f32h_64", "fa_mdec_f32h_128"];
const MIXED_DEC4_NAMES: [&str; 4] = [
    "fa_dec4_f32h_64",
    "fa_dec4_f32h_128",
    "fa_dec4_f32h_256",
    "fa_dec4_f32h_512",
];
const MIXED_DEC8_NAMES: [&str; 4] = [
    "fa_dec8_f32h_64",
    "fa_dec8_f32h_128",
    "fa_dec8_f32h_256",
    "fa_dec8_f32h_512",
];
/// `fa_sdec<R>_<T>_<DMAX>` for T in f32, f16, bf16, f32h (f32 q over f16 k and v: index 3),
/// R in 1, 4, 8 and the tiers 64, 128, 256: the short decode kernels (every target).
macro_rules! sdec_names {
    ($t:literal) => {
        [
            sdec_names!(@r "1", $t),
            sdec_names!(@r "4", $t),
            sdec_names!(@r "8", $t),
        ]
    };
    (@r $r:literal, $t:literal) => {
        [
            concat!("fa_sdec", $r, "_", $t, "_64"),
            concat!("fa_sdec", $r, "_", $t, "_128"),
            concat!("fa_sdec", $r, "_", $t, "_256"),
        ]
    };
}
const SDEC_NAMES: [[[&str; 3]; 3]; 4] = [
    sdec_names!("f32"),
    sdec_names!("f16"),
    sdec_names!("bf16"),
    sdec_names!("f32h"),
];
/// The largest tier the short decode kernels are built for.
pub const SHORT_DECODE_MAX_TIER: usize = 256;
const DEC4_NAMES: [[&str; 4]; 3] = tile_names!("dec4");
const DEC8_NAMES: [[&str; 4]; 3] = tile_names!("dec8");
const COMBINE_NAMES: [&str; 3] = ["fa_combine_f32", "fa_combine_f16", "fa_combine_bf16"];
const CACHE_NAMES: [&str; 3] = [
    "fa_cache_write_f32",
    "fa_cache_write_f16",
    "fa_cache_write_bf16",
];

/// The tier (`DMAX`) for head dimension `d`, when one holds it.
pub fn tier(d: usize) -> Option<usize> {
    TIERS.into_iter().find(|t| d <= *t)
}

/// Packed rows per tile of the prefill kernel of tier `dmax` (its `BM`).
pub fn prefill_rows(dmax: usize) -> usize {
    match dmax {
        64 | 128 => 64,
        256 => 32,
        _ => 16,
    }
}

/// Which kernel of a tier runs a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileKernel {
    /// `fa_fwd`: tiles of [`prefill_rows`] packed rows.
    Prefill,
    /// `fa_mma`: the matrix-unit tile (64 packed rows, f16/bf16, tiers up to 256) where the
    /// device's code object has it.
    Mma,
    /// `fa_mdec`: the matrix-unit decode kernel (all of at most [`DECODE_ROWS`] packed rows in
    /// one block, f16/bf16, tiers 64 and 128) where the device's code object has it; the
    /// launcher falls back to [`TileKernel::for_rows`]'s kernel (same grid) where it has not.
    MmaDecode,
    /// `fa_dec4`: all of at most 4 packed rows in one block.
    Decode4,
    /// `fa_dec8`: all of at most 8 packed rows in one block.
    Decode8,
    /// `fa_sdec<R>`: all of at most [`DECODE_ROWS`] packed rows in one block (R = 1, 4 or 8 by
    /// the call's rows), built for a short key range: tiers up to [`SHORT_DECODE_MAX_TIER`],
    /// every dtype and the f32-over-f16 mix, every target; launched unsplit.
    ShortDecode,
}

impl TileKernel {
    /// The kernel for a call of `rows` packed rows (the longest sequence's queries times the
    /// query heads per kv head).
    pub fn for_rows(rows: usize) -> TileKernel {
        match rows {
            0..=4 => TileKernel::Decode4,
            5..=DECODE_ROWS => TileKernel::Decode8,
            _ => TileKernel::Prefill,
        }
    }

    /// Keys per tile (the unit of splits) for q, k and v of `dtype`.
    pub fn key_tile(self, dtype: DType) -> usize {
        match self {
            TileKernel::Prefill | TileKernel::Mma => KEY_TILE,
            TileKernel::Decode4 | TileKernel::Decode8 if dtype == DType::F32 => DECODE_KEY_TILE_F32,
            TileKernel::MmaDecode
            | TileKernel::Decode4
            | TileKernel::Decode8
            | TileKernel::ShortDecode => DECODE_KEY_TILE,
        }
    }
}

/// Where one tile launch goes: tiles of packed rows, kv heads times splits, sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileGrid {
    /// Head-dim tier (`DMAX`).
    pub tier: usize,
    /// The kernel.
    pub kernel: TileKernel,
    /// Tiles of packed rows (grid x; 1 for the decode kernels).
    pub tiles: u32,
    /// kv heads times splits (grid y).
    pub heads_splits: u32,
    /// Sequences (grid z).
    pub batch: u32,
}

/// The matrix-unit kernel of `names` (the tile's [`MMA_NAMES`] or the decode kernel's
/// [`MDEC_NAMES`]) for dtype index `i` and tier index `t`, where the device's code object has
/// it (f32, index 0, has none).
fn matrix_function<'d, const N: usize>(
    dev: &'d RocmDevice,
    names: &[[&'static str; N]; 2],
    i: usize,
    t: usize,
) -> Result<Option<Cow<'d, rocm_safe::Function>>, BackendError> {
    let name = i
        .checked_sub(1)
        .and_then(|i| names.get(i))
        .and_then(|n| n.get(t));
    match name {
        Some(name) => dev.function_optional(Module::Attention, name),
        None => Ok(None),
    }
}

/// Whether this device's code object has the matrix-unit tile ([`TileKernel::Mma`]) for
/// `dtype` at head-dim tier `tier`.
pub fn has_mma(dev: &RocmDevice, dtype: DType, tier: usize) -> Result<bool, BackendError> {
    let (Ok(i), Some(t)) = (dtype_index(dtype), TIERS.iter().position(|x| *x == tier)) else {
        return Ok(false);
    };
    Ok(matrix_function(dev, &MMA_NAMES, i, t)?.is_some())
}

/// `fa_sdec<R>` for a call of `rows` packed rows (R = 1, 4 or 8), dtype index `i` (3: f32 q
/// over f16 k and v) and tier index `t`, where the kernels are built for the tier.
fn short_name(i: usize, rows: usize, t: usize) -> Option<&'static str> {
    let r = match rows {
        0..=1 => 0,
        2..=4 => 1,
        _ => 2,
    };
    SDEC_NAMES.get(i)?.get(r)?.get(t).copied()
}

/// Whether this device's code object has the matrix-unit decode kernel
/// ([`TileKernel::MmaDecode`]) for q of `dtypes.0` over keys and values of `dtypes.1` at
/// head-dim tier `tier`.
pub fn has_mdec(
    dev: &RocmDevice,
    dtypes: (DType, DType),
    tier: usize,
) -> Result<bool, BackendError> {
    if dtypes.0 != dtypes.1 {
        return has_mixed(dev, TileKernel::MmaDecode, dtypes, tier);
    }
    let (Ok(i), Some(t)) = (dtype_index(dtypes.1), TIERS.iter().position(|x| *x == tier)) else {
        return Ok(false);
    };
    Ok(matrix_function(dev, &MDEC_NAMES, i, t)?.is_some())
}

/// The mixed kernel `kernel` (any but [`TileKernel::Prefill`]) of a call of `rows` packed rows
/// for q of `dtypes.0` over keys and values of `dtypes.1` at tier index `t`: only f32 over f16
/// has them.
fn mixed_name(
    kernel: TileKernel,
    dtypes: (DType, DType),
    rows: usize,
    t: usize,
) -> Option<&'static str> {
    if dtypes != (DType::F32, DType::F16) {
        return None;
    }
    match kernel {
        TileKernel::ShortDecode => short_name(3, rows, t),
        TileKernel::Mma => MIXED_MMA_NAMES.get(t).copied(),
        TileKernel::MmaDecode => MIXED_MDEC_NAMES.get(t).copied(),
        TileKernel::Decode4 => MIXED_DEC4_NAMES.get(t).copied(),
        TileKernel::Decode8 => MIXED_DEC8_NAMES.get(t).copied(),
        TileKernel::Prefill => None,
    }
}

/// Whether this device's code object has the mixed form of `kernel` for q of `dtypes.0` over
/// keys and values of `dtypes.1` at head-dim tier `tier` (f32 over f16: the matrix-unit tile up
/// to tier 256 and decode kernel up to 128 on targets with matrix units, the FMA decode kernels
/// everywhere).
pub fn has_mixed(
    dev: &RocmDevice,
    kernel: TileKernel,
    dtypes: (DType, DType),
    tier: usize,
) -> Result<bool, BackendError> {
    let Some(t) = TIERS.iter().position(|x| *x == tier) else {
        return Ok(false);
    };
    match mixed_name(kernel, dtypes, DECODE_ROWS, t) {
        Some(name) => Ok(dev.function_optional(Module::Attention, name)?.is_some()),
        None => Ok(false),
    }
}

/// Queues the tile kernel for q of `dtypes.0` and k, v of `dtypes.1` (one dtype, or the mix
/// [`has_mixed`] confirmed) over `grid` with `p`. `Ok(false)` (nothing queued) when
/// the kernel is [`TileKernel::Mma`] and this device's code object lacks it for `dtype` and
/// the tier; [`TileKernel::MmaDecode`] where it is missing queues the FMA decode kernel of
/// `rows` packed rows instead (the same grid).
///
/// # Safety
/// 1. Every address in `p` is a live device allocation of the device's stream order that holds
///    every element the kernel reaches through it: q, k, v and o over `batch` sequences of the
///    lengths `cu_q`/`cu_k` give (or `seqlen_q`/`seqlen_k`), `heads`/`kv_heads` heads of `d`
///    elements, with the strides in `p`; for a paged call every block-table entry a sequence
///    uses is below the cache's block count; `cu_q`/`cu_k` hold `batch + 1` entries, alibi
///    `heads`, mm_prefix `batch` rows of `mm_stride`; with `splits > 1`, o_part and lse_part
///    hold `splits * total_q * heads` rows (of `d`, of 1).
/// 2. o (and o_part, lse_part) alias none of the inputs.
/// 3. `grid` matches `p`: tiles cover `seqlen_q * group` rows at the kernel's rows per tile
///    (one tile of at most 4 or 8 rows for the decode kernels, `rows` of them, at most
///    [`DECODE_ROWS`] for [`TileKernel::MmaDecode`]), splits of `tiles_per_split`
///    tiles of the kernel's [`TileKernel::key_tile`] keys,
///    `heads_splits == kv_heads * splits`, `batch == p.batch`, `d <= grid.tier`.
pub unsafe fn tile(
    dev: &RocmDevice,
    dtypes: (DType, DType),
    grid: &TileGrid,
    rows: usize,
    p: &FaParams,
) -> Result<bool, BackendError> {
    let Some(t) = TIERS.iter().position(|t| *t == grid.tier) else {
        return Err(invalid(
            "flash-attn",
            format_args!("no kernel tier {}", grid.tier),
        ));
    };
    let (qtype, dtype) = dtypes;
    let i = dtype_index(dtype)?;
    let f = match grid.kernel {
        _ if qtype != dtype => match mixed_name(grid.kernel, dtypes, rows, t) {
            Some(name) => match dev.function_optional(Module::Attention, name)? {
                Some(f) => f,
                None => return Ok(false),
            },
            None => {
                return Err(invalid(
                    "flash-attn",
                    format_args!(
                        "no {:?} kernel for {qtype:?} q over {dtype:?} k and v",
                        grid.kernel
                    ),
                ))
            }
        },
        TileKernel::Mma => match matrix_function(dev, &MMA_NAMES, i, t)? {
            Some(f) => f,
            None => return Ok(false),
        },
        TileKernel::Prefill => dev.function(Module::Attention, FWD_NAMES[i][t])?,
        TileKernel::MmaDecode => match matrix_function(dev, &MDEC_NAMES, i, t)? {
            Some(f) => f,
            None if TileKernel::for_rows(rows) == TileKernel::Decode4 => {
                dev.function(Module::Attention, DEC4_NAMES[i][t])?
            }
            None => dev.function(Module::Attention, DEC8_NAMES[i][t])?,
        },
        TileKernel::Decode4 => dev.function(Module::Attention, DEC4_NAMES[i][t])?,
        TileKernel::Decode8 => dev.function(Module::Attention, DEC8_NAMES[i][t])?,
        TileKernel::ShortDecode => match short_name(i, rows, t) {
            Some(name) => dev.function(Module::Attention, name)?,
            None => {
                return Err(invalid(
                    "flash-attn",
                    format_args!("no short decode kernel for tier {}", grid.tier),
                ))
            }
        },
    };
    let cfg = LaunchConfig {
        grid_dim: (grid.tiles, grid.heads_splits, grid.batch),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut l = dev.stream().launch_builder(&f);
    l.arg(p);
    // SAFETY: fa_fwd/fa_mma/fa_dec4/fa_dec8/fa_mdec/fa_sdec<R>_<T>_<DMAX>(fa_params p) with
    // T = dtype and DMAX = grid.tier, or the same kernels' f32h forms for f32 q and o over f16
    // k and v (the addresses in p are of those types by the caller's contract); the caller's
    // contract (1-3) covers every address the kernel reaches and the grid (fa_mma takes
    // fa_fwd's grid: 64 rows a tile; fa_mdec the decode kernels': one block of all <= 8 rows,
    // 16 * FM_QT >= 8 in every build; fa_sdec<R> with R >= rows by short_name); blocks of
    // FA_THREADS threads, static shared memory only.
    unsafe { l.launch(cfg)? };
    Ok(true)
}

/// Queues the combine of a split call (`p.splits > 1`): the output of every (token, head) row.
///
/// # Safety
/// The contract of [`tile`] for `p`, and the tile kernel of the same call queued before it.
pub unsafe fn combine(dev: &RocmDevice, dtype: DType, p: &FaParams) -> Result<(), BackendError> {
    let name = COMBINE_NAMES[dtype_index(dtype)?];
    if p.heads > 65535 {
        return Err(kernel_limit(
            "flash-attn",
            format_args!("{} heads", p.heads),
        ));
    }
    let f = dev.function(Module::Attention, name)?;
    let cfg = LaunchConfig {
        grid_dim: (p.total_q, p.heads, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut l = dev.stream().launch_builder(&f);
    l.arg(p);
    // SAFETY: fa_combine_<T>(fa_params p): reads splits x total_q x heads rows of o_part and
    // lse_part (written by the tile kernel queued before, same stream) and writes one row of
    // o per block, all inside the allocations the caller's contract describes.
    unsafe { l.launch(cfg)? };
    Ok(())
}

/// Strides of the paged-cache write, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheWrite {
    /// New tokens.
    pub tokens: usize,
    /// kv heads.
    pub kv_heads: usize,
    /// Head dimension.
    pub d: usize,
    /// Row and head strides of the new rows.
    pub rows: (usize, usize),
    /// Block, row and head strides of the cache.
    pub cache: (usize, usize, usize),
    /// Rows per cache block.
    pub page: usize,
    /// Slots in the cache (blocks times page).
    pub slots: usize,
}

/// Writes token `t`'s row of `src` (keys or values: `kv_heads x d`) into slot `slots[t]` of
/// `cache` (a slot < 0 or past the cache is skipped), after checking that every row read and
/// every slot written lies inside its buffer.
pub fn cache_write<T: RocmDType>(
    dev: &RocmDevice,
    w: &CacheWrite,
    src: &impl DeviceSlice<T>,
    cache: &mut impl DeviceSliceMut<T>,
    slots: &impl DeviceSlice<i64>,
) -> Result<(), BackendError> {
    const OP: &str = "reshape_and_cache";
    if w.tokens == 0 || w.kv_heads == 0 || w.d == 0 {
        return Ok(());
    }
    let (rs, hs) = w.rows;
    let reach = (w.tokens - 1) * rs + (w.kv_heads - 1) * hs + w.d;
    if reach > src.len() {
        return Err(out_of_bounds(OP, "key or value", reach, src.len()));
    }
    if w.tokens > slots.len() {
        return Err(out_of_bounds(OP, "slot_mapping", w.tokens, slots.len()));
    }
    let (cb, cr, ch) = w.cache;
    let page = w.page.max(1);
    let blocks = w.slots / page;
    if blocks > 0 {
        let cache_reach = (blocks - 1) * cb + (page - 1) * cr + (w.kv_heads - 1) * ch + w.d;
        if cache_reach > cache.len() {
            return Err(out_of_bounds(OP, "cache", cache_reach, cache.len()));
        }
    }
    let small = |v: usize| u32::try_from(v).map_err(|_| kernel_limit(OP, format_args!("{v}")));
    let (kv_heads, d, page) = (small(w.kv_heads)?, small(w.d)?, small(page)?);
    let grid = small(w.tokens)?;
    let f = dev.function(Module::Attention, CACHE_NAMES[dtype_index(T::DTYPE)?])?;
    let cfg = LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let ptrs = [
        DevicePtrArg::of(src),
        DevicePtrArg::null(),
        DevicePtrArg::of(cache),
        DevicePtrArg::null(),
        DevicePtrArg::of(slots),
    ];
    let strides = [rs as u64, hs as u64, 0, 0, cb as u64, cr as u64, ch as u64];
    let num_slots = (blocks * page as usize) as u64;
    let mut l = dev.stream().launch_builder(&f);
    for p in &ptrs {
        l.arg(p);
    }
    l.arg(&kv_heads).arg(&d);
    for s in &strides {
        l.arg(s);
    }
    l.arg(&page).arg(&num_slots);
    // SAFETY: fa_cache_write_<T>(const T* key, const T* value, T* key_cache, T* value_cache,
    // const int64_t* slots, u32 kv_heads, u32 d, u64 key_row, u64 key_head, u64 value_row,
    // u64 value_head, u64 cache_block, u64 cache_row, u64 cache_head, u32 page, u64 num_slots),
    // one block per token, with value and value_cache null (the kernel then writes the key
    // cache only): the reaches of every source row and of every slot below num_slots (whole
    // blocks of the cache) were checked against the buffers above, slots outside are skipped
    // by the kernel; the cache is borrowed exclusively (no aliasing with the source or slots).
    unsafe { l.launch(cfg)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The struct has the C layout of `fa_params`: 23 eight-byte fields then 20 four-byte ones.
    #[test]
    fn params_layout_matches_the_kernels() {
        assert_eq!(std::mem::size_of::<FaParams>(), 264);
        assert_eq!(std::mem::align_of::<FaParams>(), 8);
        assert_eq!(std::mem::offset_of!(FaParams, heads), 23 * 8);
        assert_eq!(std::mem::offset_of!(FaParams, window_left), 23 * 8 + 16 * 4);
        assert_eq!(std::mem::offset_of!(FaParams, softcap), 260);
    }

    /// Only f32 q over f16 keys and values has mixed kernels: the matrix-unit tile up to tier
    /// 256, its decode kernel up to 128, the FMA decode kernels at every tier, the short
    /// decode kernels up to 256 (R by the call's rows), no FMA tile.
    #[test]
    fn mixed_kernels_by_name() {
        let mix = (DType::F32, DType::F16);
        let name = |k, t| mixed_name(k, mix, DECODE_ROWS, t);
        assert_eq!(name(TileKernel::Mma, 2), Some("fa_mma_f32h_256"));
        assert_eq!(name(TileKernel::MmaDecode, 1), Some("fa_mdec_f32h_128"));
        assert_eq!(name(TileKernel::MmaDecode, 2), None);
        assert_eq!(name(TileKernel::Mma, 3), None);
        assert_eq!(name(TileKernel::Decode8, 3), Some("fa_dec8_f32h_512"));
        assert_eq!(name(TileKernel::ShortDecode, 2), Some("fa_sdec8_f32h_256"));
        assert_eq!(name(TileKernel::ShortDecode, 3), None);
        assert_eq!(
            mixed_name(TileKernel::ShortDecode, mix, 1, 1),
            Some("fa_sdec1_f32h_128")
        );
        assert_eq!(name(TileKernel::Prefill, 0), None);
        assert_eq!(
            mixed_name(TileKernel::Mma, (DType::F32, DType::BF16), 8, 0),
            None
        );
        assert_eq!(
            mixed_name(TileKernel::Mma, (DType::F16, DType::F16), 8, 0),
            None
        );
    }

    /// The short decode kernel of a call: R = 1 for one packed row, 4 up to 4, else 8.
    #[test]
    fn short_kernels_by_rows() {
        assert_eq!(short_name(1, 1, 1), Some("fa_sdec1_f16_128"));
        assert_eq!(short_name(0, 0, 0), Some("fa_sdec1_f32_64"));
        assert_eq!(short_name(2, 2, 2), Some("fa_sdec4_bf16_256"));
        assert_eq!(short_name(2, 4, 0), Some("fa_sdec4_bf16_64"));
        assert_eq!(short_name(1, 5, 1), Some("fa_sdec8_f16_128"));
        assert_eq!(short_name(3, 8, 0), Some("fa_sdec8_f32h_64"));
        assert_eq!(short_name(1, 1, 3), None);
        assert_eq!(
            TileKernel::ShortDecode.key_tile(DType::F32),
            DECODE_KEY_TILE
        );
    }

    #[test]
    fn tiers_and_tiles() {
        assert_eq!(tier(8), Some(64));
        assert_eq!(tier(72), Some(128));
        assert_eq!(tier(256), Some(256));
        assert_eq!(tier(264), Some(512));
        assert_eq!(tier(520), None);
        assert_eq!(prefill_rows(128), 64);
        assert_eq!(prefill_rows(512), 16);
        assert!(dtype_index(DType::F64).is_err());
        assert_eq!(DEC4_NAMES[2][1], "fa_dec4_bf16_128");
        assert_eq!(DEC8_NAMES[0][0], "fa_dec8_f32_64");
        assert_eq!(TileKernel::for_rows(1), TileKernel::Decode4);
        assert_eq!(TileKernel::for_rows(8), TileKernel::Decode8);
        assert_eq!(TileKernel::for_rows(9), TileKernel::Prefill);
        assert_eq!(MMA_NAMES[1][2], "fa_mma_bf16_256");
        assert_eq!(TileKernel::Mma.key_tile(DType::F16), KEY_TILE);
        assert_eq!(MDEC_NAMES[1][1], "fa_mdec_bf16_128");
        assert_eq!(TileKernel::MmaDecode.key_tile(DType::F16), DECODE_KEY_TILE);
        assert_eq!(TileKernel::Decode8.key_tile(DType::BF16), DECODE_KEY_TILE);
        assert_eq!(
            TileKernel::Decode4.key_tile(DType::F32),
            DECODE_KEY_TILE_F32
        );
        assert_eq!(TileKernel::Prefill.key_tile(DType::F32), KEY_TILE);
        assert_eq!(FWD_NAMES[0][3], "fa_fwd_f32_512");
    }
}
