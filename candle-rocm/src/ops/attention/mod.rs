//! Attention without the score matrix: flash attention (tiled online softmax) for dense,
//! variable-length and paged calls, split over the keys when a call has too few query tiles
//! to fill the GPU (flash decoding), on our `attention` kernels (`kernels/hip/attention.hip`).
//! [`spec`] checks a call, [`host`] is the CPU reference with the same semantics, and
//! [`forward`] runs it on the device. q, k and v share a dtype (f32, f16, bf16), or q is f32
//! over f16 keys and values (the f16 KV cache of the GGUF decoders, whose activations are f32):
//! the matrix-unit kernels and the FMA decode kernels take that mix directly; a prompt on a
//! device without the matrix-unit tile has q cast to f16 and the output back to f32 around the
//! f16 kernels.

pub mod host;
pub mod spec;

use candle_core::{DType, Layout};
use rocm_safe::DeviceBuffer;

use crate::device::RocmDevice;
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::launch::attention::{
    self as launch, prefill_rows, tier, FaParams, TileGrid, TileKernel, DECODE_ROWS, MMA_ROWS,
    SHORT_DECODE_MAX_TIER,
};
use crate::layout::{kernel_limit, out_of_bounds, parameter_error};
use crate::ops::elementwise::cast;
use crate::settings::{flash_mma, short_decode_keys};
use spec::{AttentionSpec, Batching, Strides};

/// A device operand of a call besides q, k and v: a storage slice and the element its
/// contiguous view starts at.
pub type Extra<'a> = (&'a S, usize);

/// The device operands of a call besides q, k and v, each present when the spec says so.
#[derive(Clone, Copy, Default)]
pub struct Extras<'a> {
    /// `seqlens_q`, u32 (variable-length calls).
    pub cu_q: Option<Extra<'a>>,
    /// `seqlens_k`, u32 (variable-length calls).
    pub cu_k: Option<Extra<'a>>,
    /// The block table, u32 or i32 (paged calls).
    pub block_table: Option<Extra<'a>>,
    /// ALiBi slopes, f32, one per query head.
    pub alibi: Option<Extra<'a>>,
}

/// Blocks a prefill call should have (per compute unit) before its keys are not split further.
const BLOCKS_PER_CU: usize = 2;
/// The same for the FMA decode kernels: they stream K and V with little arithmetic, so it takes
/// more blocks in flight per compute unit to keep memory busy.
const DECODE_BLOCKS_PER_CU: usize = 4;
/// The same for the matrix-unit decode kernel, whose waves each stream their own tiles: fewer,
/// longer splits run faster (a sweep of 2, 4 and 8: bench/results, 2026-11-26 decode blocks).
const MDEC_BLOCKS_PER_CU: usize = 2;
/// The most splits of one call (the combine reads every split of a row).
const MAX_SPLITS: usize = 128;
/// The same for the FMA decode kernels in f32, which split in tiles of 32 keys
/// (`DECODE_KEY_TILE_F32`): about one block per compute unit, so a short context splits into
/// every tile and a longer one into about as many splits as the GPU has compute units, each
/// of two tiles and more (on the harness, one-tile splits won after 16 positions and two-tile
/// ones after 2048, where one-tile ones lost: bench/results/bench-2026-11-27T0752Z-*, calls D
/// to F).
const DECODE_BLOCKS_PER_CU_F32: usize = 1;

/// Runs the checked call `spec` on `dev`: the output, contiguous, with q's shape
/// (`(batch, seqlen_q, heads, head_dim)` dense, `(total_q, heads, head_dim)` variable-length).
/// Every reach of q, k, v and the extras is checked against its buffer first.
pub fn forward(
    dev: &RocmDevice,
    spec: &AttentionSpec,
    q: &S,
    k: &S,
    v: &S,
    extras: &Extras<'_>,
) -> Result<S, BackendError> {
    match (q, k, v) {
        (S::F32(q), S::F32(k), S::F32(v)) => same(run(dev, spec, q, k, v, extras)?).map(S::F32),
        (S::F16(q), S::F16(k), S::F16(v)) => same(run(dev, spec, q, k, v, extras)?).map(S::F16),
        (S::BF16(q), S::BF16(k), S::BF16(v)) => same(run(dev, spec, q, k, v, extras)?).map(S::BF16),
        (S::F32(q), S::F16(k), S::F16(v)) => match run(dev, spec, q, k, v, extras)? {
            Some(out) => Ok(S::F32(out)),
            // No mixed kernel for this call (a prompt on a device without the matrix-unit
            // tile): q in f16 (the whole buffer, so the spec's strides hold), the f16 kernels,
            // the output back to f32.
            None => {
                let q16 = cast::<f32, half::f16>(dev, q, &Layout::contiguous(q.len()))?;
                let out = same(run(dev, spec, &q16, k, v, extras)?)?;
                Ok(S::F32(cast::<half::f16, f32>(
                    dev,
                    &out,
                    &Layout::contiguous(out.len()),
                )?))
            }
        },
        _ if q.dtype() != k.dtype() || q.dtype() != v.dtype() => Err(BackendError::DtypeMismatch {
            op: "flash-attn",
            lhs: q.dtype(),
            rhs: if q.dtype() != k.dtype() {
                k.dtype()
            } else {
                v.dtype()
            },
        }),
        _ => Err(BackendError::UnsupportedDtype {
            op: "flash-attn",
            dtype: q.dtype(),
        }),
    }
}

/// `run`'s output for a call of one dtype, which it never declines (only a mixed call that the
/// device has no kernel for).
fn same<T: rocm_safe::DeviceRepr>(
    out: Option<DeviceBuffer<T>>,
) -> Result<DeviceBuffer<T>, BackendError> {
    out.ok_or_else(|| kernel_limit("flash-attn", "a call of one dtype had no kernel"))
}

/// One past the last element a `(sequences, rows, heads, d)` operand reaches from its start.
fn reach(st: &Strides, seqs: usize, rows: usize, heads: usize, d: usize) -> usize {
    if seqs == 0 || rows == 0 {
        return 0;
    }
    st.offset + (seqs - 1) * st.batch + (rows - 1) * st.row + (heads - 1) * st.head + d
}

/// Checks that `what` reaches no further than `len`.
fn within(what: &'static str, reach: usize, len: usize) -> Result<(), BackendError> {
    if reach > len {
        return Err(out_of_bounds("flash-attn", what, reach, len));
    }
    Ok(())
}

/// The device address and length of an extra operand of dtype `T`, checked to hold `n`
/// elements from its offset.
fn extra<T: RocmDType>(
    what: &'static str,
    e: Option<Extra<'_>>,
    n: usize,
) -> Result<u64, BackendError> {
    let Some((slice, offset)) = e else {
        return Err(parameter_error(
            "flash-attn",
            format_args!("{what} is missing on the device"),
        ));
    };
    let Some(buf) = T::as_buffer(slice) else {
        return Err(parameter_error(
            "flash-attn",
            format_args!("{what} must be {:?}, got {:?}", T::DTYPE, slice.dtype()),
        ));
    };
    within(what, offset + n, buf.len())?;
    Ok(buf.device_ptr() as u64 + (offset * std::mem::size_of::<T>()) as u64)
}

/// The call on q of `Q` and k, v of `T` (the output of `Q`): `None`, with nothing queued, for a
/// mixed call (f32 q over f16 k and v) that this device has no matrix-unit kernel for.
fn run<Q: RocmDType, T: RocmDType>(
    dev: &RocmDevice,
    spec: &AttentionSpec,
    q: &DeviceBuffer<Q>,
    k: &DeviceBuffer<T>,
    v: &DeviceBuffer<T>,
    extras: &Extras<'_>,
) -> Result<Option<DeviceBuffer<Q>>, BackendError> {
    const OP: &str = "flash-attn";
    let (h, hk, d) = (spec.heads, spec.kv_heads, spec.head_dim);
    spec::check_heads(OP, h, hk, d)?;
    let group = h / hk;
    let batch = spec.batch();
    let total_q = spec.total_q();
    let (max_q, max_k) = spec.max_seqlens();
    let tier = tier(d).ok_or_else(|| kernel_limit(OP, format_args!("head dimension {d}")))?;
    // The kernel first, so a mixed call this device cannot take declines before any work.
    let rows = max_q * group;
    let decode = rows <= DECODE_ROWS;
    let dtypes = (Q::DTYPE, T::DTYPE);
    let mixed = dtypes.0 != dtypes.1;
    let mdec = decode && flash_mma() && tier <= 128 && launch::has_mdec(dev, dtypes, tier)?;
    let kernel = if short_decode(rows, max_k, tier, short_decode_keys(), mdec) {
        // A short context: latency, not bandwidth (every dtype, the mix too, every target).
        TileKernel::ShortDecode
    } else if mixed {
        // The matrix-unit kernel where the device has it, else for decoding the FMA one; a
        // prompt without the matrix-unit tile declines (the caller casts q instead).
        let has = |k| launch::has_mixed(dev, k, dtypes, tier);
        // (A decode call at tiers 64 and 128 takes the matrix-unit decode kernel, `mdec`;
        // one at tier 256 the matrix-unit tile.)
        if mdec {
            TileKernel::MmaDecode
        } else if !(decode && tier <= 128) && flash_mma() && has(TileKernel::Mma)? {
            TileKernel::Mma
        } else if decode && has(TileKernel::for_rows(rows))? {
            TileKernel::for_rows(rows)
        } else {
            return Ok(None);
        }
    } else if decode {
        // The matrix-unit decode kernel (f16/bf16, tiers 64 and 128) where the device has it,
        // else the FMA one.
        if mdec {
            TileKernel::MmaDecode
        } else {
            TileKernel::for_rows(rows)
        }
    } else if flash_mma() && tier <= 256 && launch::has_mma(dev, T::DTYPE, tier)? {
        TileKernel::Mma
    } else {
        TileKernel::for_rows(rows)
    };
    let out = dev.alloc::<Q>(total_q * h * d)?;
    if total_q == 0 {
        return Ok(Some(out));
    }

    // Reaches of q, k, v, and the extras' addresses.
    let mut p = FaParams::default();
    match &spec.batching {
        Batching::Dense {
            seqlen_q, seqlen_k, ..
        } => {
            within("q", reach(&spec.q, batch, *seqlen_q, h, d), q.len())?;
            within("k", reach(&spec.k, batch, *seqlen_k, hk, d), k.len())?;
            within("v", reach(&spec.v, batch, *seqlen_k, hk, d), v.len())?;
        }
        Batching::Varlen {
            cu_q, cu_k, paged, ..
        } => {
            let total_k = cu_k.last().copied().unwrap_or(0) as usize;
            within("q", reach(&spec.q, 1, total_q, h, d), q.len())?;
            p.cu_q = extra::<u32>("seqlens_q", extras.cu_q, cu_q.len())?;
            p.cu_k = extra::<u32>("seqlens_k", extras.cu_k, cu_k.len())?;
            match paged {
                None => {
                    within("k", reach(&spec.k, 1, total_k, hk, d), k.len())?;
                    within("v", reach(&spec.v, 1, total_k, hk, d), v.len())?;
                }
                Some(pg) => {
                    within(
                        "k",
                        reach(&spec.k, pg.num_blocks, pg.page_size, hk, d),
                        k.len(),
                    )?;
                    within(
                        "v",
                        reach(&spec.v, pg.num_blocks, pg.page_size, hk, d),
                        v.len(),
                    )?;
                    // The spec checked every entry a sequence uses against num_blocks.
                    let n = batch * pg.max_blocks;
                    p.block_table = match extras.block_table {
                        Some((s @ S::I32(_), o)) => extra::<i32>("block_table", Some((s, o)), n)?,
                        other => extra::<u32>("block_table", other, n)?,
                    };
                    p.page = small(pg.page_size)?;
                    p.bt_stride = small(pg.max_blocks)?;
                }
            }
        }
    }
    if spec.alibi {
        p.alibi = extra::<f32>("alibi_slopes", extras.alibi, h)?;
    }
    // The prefix ranges are read to the host by the spec; they go back as one small upload.
    let _mm = match &spec.mm_prefix {
        Some(mm) if mm.max_ranges > 0 => {
            within(
                "mm_prefix_ranges",
                batch * mm.max_ranges * 2,
                mm.ranges.len(),
            )?;
            let buf = dev.stream().upload(mm.ranges.clone())?;
            p.mm_prefix = buf.device_ptr() as u64;
            p.mm_ranges = small(mm.max_ranges)?;
            p.mm_stride = small(mm.max_ranges * 2)?;
            Some(buf)
        }
        _ => None,
    };

    // Geometry: splits over the keys until the call has a few blocks per compute unit.
    let tiles = match kernel {
        TileKernel::Prefill => rows.div_ceil(prefill_rows(tier)),
        TileKernel::Mma => rows.div_ceil(MMA_ROWS),
        TileKernel::MmaDecode
        | TileKernel::Decode4
        | TileKernel::Decode8
        | TileKernel::ShortDecode => 1,
    };
    let cus = dev.device().info().compute_units as usize;
    let (splits, tiles_per_split) = key_splits(kernel, T::DTYPE, max_k, tiles * hk * batch, cus);
    let (_o_part, _lse) = if splits > 1 {
        let rows = splits * total_q * h;
        let o_part = dev.alloc::<f32>(rows * d)?;
        let lse = dev.alloc::<f32>(rows)?;
        p.o_part = o_part.device_ptr() as u64;
        p.lse_part = lse.device_ptr() as u64;
        (Some(o_part), Some(lse))
    } else {
        (None, None)
    };
    let grid = TileGrid {
        tier,
        kernel,
        tiles: u32::try_from(tiles)
            .map_err(|_| kernel_limit(OP, format_args!("{tiles} row tiles")))?,
        heads_splits: grid_dim(hk * splits)?,
        batch: grid_dim(batch)?,
    };

    let (qsize, size) = (std::mem::size_of::<Q>(), std::mem::size_of::<T>());
    let addr = |ptr: u64, off: usize, size: usize| ptr + (off * size) as u64;
    p.q = addr(q.device_ptr() as u64, spec.q.offset, qsize);
    p.k = addr(k.device_ptr() as u64, spec.k.offset, size);
    p.v = addr(v.device_ptr() as u64, spec.v.offset, size);
    p.o = out.device_ptr() as u64;
    // 16-byte loads: every row of each operand starts 16-byte aligned (in its own elements).
    let aligned = |st: &Strides, a: u64, size: usize| {
        let n = 16 / size;
        a % 16 == 0 && st.batch % n == 0 && st.row % n == 0 && st.head % n == 0
    };
    p.vec_ok = u32::from(
        aligned(&spec.q, p.q, qsize) && aligned(&spec.k, p.k, size) && aligned(&spec.v, p.v, size),
    );
    let dense = matches!(spec.batching, Batching::Dense { .. });
    (p.q_batch, p.q_row, p.q_head) = (spec.q.batch as u64, spec.q.row as u64, spec.q.head as u64);
    (p.k_batch, p.k_row, p.k_head) = (spec.k.batch as u64, spec.k.row as u64, spec.k.head as u64);
    (p.v_batch, p.v_row, p.v_head) = (spec.v.batch as u64, spec.v.row as u64, spec.v.head as u64);
    p.o_batch = if dense { (max_q * h * d) as u64 } else { 0 };
    (p.o_row, p.o_head) = ((h * d) as u64, d as u64);
    (p.heads, p.kv_heads, p.group, p.d) = (small(h)?, small(hk)?, small(group)?, small(d)?);
    (p.seqlen_q, p.seqlen_k) = (small(max_q)?, small(max_k)?);
    (p.batch, p.splits) = (small(batch)?, small(splits)?);
    (p.tiles_per_split, p.total_q) = (small(tiles_per_split)?, small(total_q)?);
    (p.window_left, p.window_right) = spec.window();
    p.scale = spec.options.softmax_scale;
    p.softcap = spec.softcap();
    // SAFETY: (1) the reaches of q, k and v for every sequence, row and head the kernel can
    // address were checked against their buffers above (dense: batch x seqlen; variable-length:
    // the last cumulative length, which the spec checked against the tensors; paged: every
    // block of the cache), as were the extras (cu_q/cu_k batch + 1 entries, the block table
    // batch x max_blocks entries each below num_blocks by the spec's check, alibi heads, the
    // uploaded prefix ranges); o holds total_q x heads x d; o_part/lse_part were sized for
    // splits x total_q x heads rows; every buffer lives until the function returns, after the
    // launches are queued on the device's one stream (the caching allocator reuses memory in
    // stream order). (2) o, o_part and lse_part are fresh allocations. (3) the grid was built
    // from the same numbers as p (the kernel's tiles over max_q x group rows, kv_heads x
    // splits of its key tiles, batch) and d <= tier.
    unsafe {
        if !launch::tile(dev, (Q::DTYPE, T::DTYPE), &grid, rows, &p)? {
            // has_mma said the code object has the kernel: a lookup that fails now is ours.
            return Err(kernel_limit(
                OP,
                format_args!("the matrix-unit tile of tier {tier}, found a moment ago, is missing"),
            ));
        }
        if splits > 1 {
            launch::combine(dev, Q::DTYPE, &p)?;
        }
    }
    Ok(Some(out))
}

/// Whether a call of `rows` packed rows over at most `max_k` keys at head-dim tier `tier` runs
/// the short decode kernels: a decode call (at most [`DECODE_ROWS`] rows) of at most `limit`
/// keys ([`short_decode_keys`]) at a tier they are built for, of one row a kv head, or of
/// several where the matrix-unit decode kernel does not take the call (`mdec` false). Measured
/// (H100 via HIP-on-CUDA, bench/results): one row a kv head, faster than the matrix-unit kernel
/// up to 256 keys and slower from 512; several rows, slower than it but faster than the FMA
/// decode kernels (measured at up to 80 keys only).
fn short_decode(rows: usize, max_k: usize, tier: usize, limit: usize, mdec: bool) -> bool {
    rows <= DECODE_ROWS && max_k <= limit && tier <= SHORT_DECODE_MAX_TIER && (rows == 1 || !mdec)
}

/// How `kernel` splits `max_k` keys of q, k and v of `dtype` for a launch of `blocks` blocks
/// (row tiles x kv heads x sequences) on `cus` compute units: (splits, tiles per split), in
/// the kernel's key tiles ([`TileKernel::key_tile`]). Splits until the call has its kernel's
/// blocks per compute unit, at most [`MAX_SPLITS`] and one per tile, every split but the last
/// of the same number of tiles.
fn key_splits(
    kernel: TileKernel,
    dtype: DType,
    max_k: usize,
    blocks: usize,
    cus: usize,
) -> (usize, usize) {
    let key_tiles = max_k.div_ceil(kernel.key_tile(dtype)).max(1);
    let per_cu = match kernel {
        // Unsplit: its block walks every key (no combine launch).
        TileKernel::ShortDecode => return (1, key_tiles),
        TileKernel::MmaDecode => MDEC_BLOCKS_PER_CU,
        TileKernel::Decode4 | TileKernel::Decode8 if dtype == DType::F32 => {
            DECODE_BLOCKS_PER_CU_F32
        }
        TileKernel::Decode4 | TileKernel::Decode8 => DECODE_BLOCKS_PER_CU,
        TileKernel::Prefill | TileKernel::Mma => BLOCKS_PER_CU,
    };
    let want = (per_cu * cus.max(1)).div_ceil(blocks.max(1));
    let splits = want.clamp(1, MAX_SPLITS).min(key_tiles);
    let tiles_per_split = key_tiles.div_ceil(splits);
    (key_tiles.div_ceil(tiles_per_split), tiles_per_split)
}

/// `v` as a `u32` kernel argument.
fn small(v: usize) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| kernel_limit("flash-attn", format_args!("size {v}")))
}

/// `v` as a grid y/z dimension (at most 65535).
fn grid_dim(v: usize) -> Result<u32, BackendError> {
    match u32::try_from(v) {
        Ok(g) if (1..=65535).contains(&g) => Ok(g),
        _ => Err(kernel_limit(
            "flash-attn",
            format_args!("{v} sequences or kv heads x splits (grid limit 65535)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short decode kernels take decode calls (at most 8 rows) up to the key limit, at
    /// tiers up to 256, of one row a kv head or where the matrix-unit decode kernel does not
    /// apply; a limit of 0 turns them off.
    #[test]
    fn short_decode_takes_short_decode_calls() {
        // One row a kv head: with or without the matrix-unit decode kernel.
        assert!(short_decode(1, 80, 128, 256, true));
        assert!(short_decode(1, 256, 64, 256, false));
        // Several rows: only where the matrix-unit decode kernel does not take the call.
        assert!(short_decode(8, 256, 256, 256, false));
        assert!(!short_decode(8, 256, 128, 256, true));
        assert!(!short_decode(4, 16, 64, 256, true));
        // Too many keys or rows, a tier without the kernels, the setting at 0.
        assert!(!short_decode(8, 257, 128, 256, false));
        assert!(!short_decode(1, 257, 128, 256, true));
        assert!(!short_decode(9, 16, 128, 256, false));
        assert!(!short_decode(4, 16, 512, 256, false));
        assert!(!short_decode(1, 1, 64, 0, false));
    }

    /// A GGUF decoder's f32 decode (an f32 cache; TinyLlama: 4 kv heads, one sequence) on an
    /// H100's 132 compute units: every 32-key tile its own split on a short context, about one
    /// block per compute unit (two-tile splits) after 2048 positions; f16 keeps 128-key tiles
    /// and four blocks per compute unit.
    #[test]
    fn decode_splits_follow_the_measured_policy() {
        let f32_dec = |max_k| key_splits(TileKernel::Decode8, DType::F32, max_k, 4, 132);
        assert_eq!(f32_dec(17), (1, 1));
        assert_eq!(f32_dec(80), (3, 1));
        assert_eq!(f32_dec(144), (5, 1));
        assert_eq!(f32_dec(2049), (33, 2));
        assert_eq!(f32_dec(2112), (33, 2));
        assert_eq!(f32_dec(4096), (32, 4));
        let f16_dec = |max_k| key_splits(TileKernel::Decode8, DType::F16, max_k, 4, 132);
        assert_eq!(f16_dec(80), (1, 1));
        assert_eq!(f16_dec(2048), (16, 1));
        assert_eq!(f16_dec(32768), (128, 2));
        assert_eq!(
            key_splits(TileKernel::MmaDecode, DType::F16, 32768, 4, 132),
            (64, 4)
        );
        // The short decode kernels never split.
        assert_eq!(
            key_splits(TileKernel::ShortDecode, DType::F16, 200, 4, 132),
            (1, 2)
        );
        // Enough blocks already: no split.
        assert_eq!(
            key_splits(TileKernel::Prefill, DType::F32, 4096, 512, 132),
            (1, 64)
        );
        // Every split covers its tiles once: splits x tiles per split spans the keys, one split
        // fewer would not.
        for max_k in [1, 31, 32, 33, 500, 2049, 10_000, 100_000] {
            for (kernel, dtype) in [
                (TileKernel::Decode4, DType::F32),
                (TileKernel::Decode8, DType::BF16),
                (TileKernel::MmaDecode, DType::F16),
                (TileKernel::ShortDecode, DType::F32),
                (TileKernel::Prefill, DType::F32),
            ] {
                let (splits, tps) = key_splits(kernel, dtype, max_k, 4, 132);
                let tiles = max_k.div_ceil(kernel.key_tile(dtype)).max(1);
                assert!(
                    splits * tps >= tiles && (splits - 1) * tps < tiles,
                    "{max_k} {kernel:?}"
                );
                assert!((1..=MAX_SPLITS).contains(&splits));
            }
        }
    }
}
