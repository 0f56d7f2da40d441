//! `reshape_and_cache` of the paged-attention servers (vLLM, candle-vllm, mistral.rs): the new
//! tokens' keys and values written in place into a paged KV cache of the layout
//! [`super::flash_attn_varlen_paged_windowed`] reads, by our `fa_cache_write` kernel on the ROCm
//! device, on the host for CPU tensors (and, through candle-core's in-place fallback, for
//! another out-of-tree backend's).

use candle_core::backend::BackendStorage;
use candle_core::ext::ExtStorage;
use candle_core::{CpuStorage, DType, InplaceOp3, Layout, Result, Tensor};

use rocm_safe::{DeviceBuffer, DeviceSlice};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::dtype::RocmStorageSlice as S;
use crate::error::BackendError;
use crate::launch::attention::{cache_write, CacheWrite};
use crate::layout::{parameter_error, shape_error};
use crate::storage::RocmStorage;

const OP: &str = "reshape_and_cache";

/// Writes token `t`'s key and value rows (`key`, `value`: `(tokens, kv_heads, head_dim)`) into
/// slot `slot_mapping[t]` of `key_cache` and `value_cache` (`(num_blocks, page_block_size,
/// kv_heads, head_dim)`, the paged layout of [`super::flash_attn_varlen_paged_windowed`]):
/// block `slot / page_block_size`, row `slot % page_block_size`. `slot_mapping` is i64 of shape
/// `(tokens)`; a negative slot (padding) is skipped.
///
/// f32, f16 and bf16; the four tensors share the dtype, and every tensor is on one device.
/// Every argument is checked before anything is written (shapes, dtypes, devices, and each
/// slot against the cache: `slot_mapping` is read to the host for that), so a bad call is a
/// typed error naming the argument and leaves both caches as they were.
pub fn reshape_and_cache(
    key: &Tensor,
    value: &Tensor,
    key_cache: &Tensor,
    value_cache: &Tensor,
    slot_mapping: &Tensor,
) -> Result<()> {
    let w = check(key, value, key_cache, value_cache, slot_mapping)?;
    key_cache.inplace_op3(key, slot_mapping, &CacheWriteOp { w })?;
    value_cache.inplace_op3(value, slot_mapping, &CacheWriteOp { w })
}

/// The checked geometry of a call (strides filled in per operand by the op).
fn check(
    key: &Tensor,
    value: &Tensor,
    kc: &Tensor,
    vc: &Tensor,
    slots: &Tensor,
) -> Result<CacheWrite> {
    let (tokens, kv_heads, d) = match key.dims() {
        [t, h, d] => (*t, *h, *d),
        dims => {
            return Err(shape_error(
                OP,
                format_args!("key must be (tokens, kv_heads, head_dim), got {dims:?}"),
            )
            .into())
        }
    };
    if value.dims() != key.dims() {
        return Err(shape_error(
            OP,
            format_args!("value has shape {:?}, key {:?}", value.dims(), key.dims()),
        )
        .into());
    }
    let (blocks, page) = match kc.dims() {
        [b, p, h, e] if *h == kv_heads && *e == d => (*b, *p),
        dims => {
            return Err(shape_error(
                OP,
                format_args!(
                "key_cache must be (num_blocks, page_block_size, {kv_heads}, {d}), got {dims:?}"
            ),
            )
            .into())
        }
    };
    if vc.dims() != kc.dims() {
        return Err(shape_error(
            OP,
            format_args!(
                "value_cache has shape {:?}, key_cache {:?}",
                vc.dims(),
                kc.dims()
            ),
        )
        .into());
    }
    if page == 0 && blocks > 0 {
        return Err(shape_error(OP, "key_cache has blocks of 0 rows").into());
    }
    if slots.dims() != [tokens] || slots.dtype() != DType::I64 {
        return Err(parameter_error(
            OP,
            format_args!(
                "slot_mapping must be i64 of shape ({tokens}), got {:?} of shape {:?}",
                slots.dtype(),
                slots.dims()
            ),
        )
        .into());
    }
    let dtype = key.dtype();
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(BackendError::UnsupportedDtype { op: OP, dtype }.into());
    }
    for (what, t) in [("value", value), ("key_cache", kc), ("value_cache", vc)] {
        if t.dtype() != dtype {
            return Err(parameter_error(
                OP,
                format_args!("{what} is {:?}, key {dtype:?}", t.dtype()),
            )
            .into());
        }
    }
    for (what, t) in [
        ("value", value),
        ("key_cache", kc),
        ("value_cache", vc),
        ("slot_mapping", slots),
    ] {
        if !t.device().same_device(key.device()) {
            return Err(parameter_error(
                OP,
                format_args!("{what} is on {:?}, key on {:?}", t.device(), key.device()),
            )
            .into());
        }
    }
    for (what, t) in [
        ("key", key),
        ("value", value),
        ("key_cache", kc),
        ("value_cache", vc),
    ] {
        if t.rank() > 0 && t.stride().last() != Some(&1) && d > 1 {
            return Err(parameter_error(
                OP,
                format_args!("{what}'s last dimension must be contiguous"),
            )
            .into());
        }
    }
    let capacity = blocks * page;
    for (t, &s) in slots.to_vec1::<i64>()?.iter().enumerate() {
        if s >= 0 && s as u64 >= capacity as u64 {
            return Err(parameter_error(
                OP,
                format_args!("slot_mapping[{t}] = {s} is past the cache's {capacity} slots ({blocks} blocks of {page})"),
            )
            .into());
        }
    }
    Ok(CacheWrite {
        tokens,
        kv_heads,
        d,
        rows: (0, 0),
        cache: (0, 0, 0),
        page: page.max(1),
        slots: capacity,
    })
}

/// The in-place write of one cache (dst) from one of `key` / `value` (s2) at `slot_mapping` (s3).
struct CacheWriteOp {
    w: CacheWrite,
}

impl CacheWriteOp {
    /// The call's geometry with the strides of the source and cache layouts.
    fn geometry(&self, cache: &Layout, src: &Layout) -> CacheWrite {
        let (c, s) = (cache.stride(), src.stride());
        CacheWrite {
            rows: (s[0], s[1]),
            cache: (c[0], c[1], c[2]),
            ..self.w
        }
    }
}

/// The host write for one dtype: token t's row into its slot.
fn write_host<T: Copy>(
    w: &CacheWrite,
    dst: &mut [T],
    dl: &Layout,
    src: &[T],
    sl: &Layout,
    slots: &[i64],
) {
    let (d0, s0) = (dl.start_offset(), sl.start_offset());
    for (t, &slot) in slots.iter().enumerate().take(w.tokens) {
        if slot < 0 || slot as usize >= w.slots {
            continue;
        }
        let (b, r) = (slot as usize / w.page, slot as usize % w.page);
        for h in 0..w.kv_heads {
            let to = d0 + b * w.cache.0 + r * w.cache.1 + h * w.cache.2;
            let from = s0 + t * w.rows.0 + h * w.rows.1;
            dst[to..to + w.d].copy_from_slice(&src[from..from + w.d]);
        }
    }
}

/// The device write for one dtype: the cache from element `at.0`, the rows from `at.1`.
fn write_device<T: RocmDType>(
    dev: &RocmDevice,
    w: &CacheWrite,
    cache: &mut DeviceBuffer<T>,
    src: &DeviceBuffer<T>,
    at: (usize, usize),
    slots: &impl DeviceSlice<i64>,
) -> std::result::Result<(), BackendError> {
    cache_write(
        dev,
        w,
        &src.slice(at.1..)?,
        &mut cache.slice_mut(at.0..)?,
        slots,
    )
}

impl InplaceOp3 for CacheWriteOp {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        dst: &mut CpuStorage,
        dl: &Layout,
        src: &CpuStorage,
        sl: &Layout,
        slots: &CpuStorage,
        tl: &Layout,
    ) -> Result<()> {
        let w = self.geometry(dl, sl);
        let slots = match slots {
            CpuStorage::I64(v) => &v[tl.start_offset()..],
            s => {
                return Err(BackendError::UnsupportedDtype {
                    op: OP,
                    dtype: s.dtype(),
                }
                .into())
            }
        };
        match (dst, src) {
            (CpuStorage::F32(d), CpuStorage::F32(s)) => write_host(&w, d, dl, s, sl, slots),
            (CpuStorage::F16(d), CpuStorage::F16(s)) => write_host(&w, d, dl, s, sl, slots),
            (CpuStorage::BF16(d), CpuStorage::BF16(s)) => write_host(&w, d, dl, s, sl, slots),
            (_, s) => {
                return Err(BackendError::UnsupportedDtype {
                    op: OP,
                    dtype: s.dtype(),
                }
                .into())
            }
        }
        Ok(())
    }

    fn ext_fwd(
        &self,
        dst: &mut dyn ExtStorage,
        dl: &Layout,
        src: &dyn ExtStorage,
        sl: &Layout,
        slots: &dyn ExtStorage,
        tl: &Layout,
    ) -> Result<bool> {
        let (Some(src), Some(slots)) = (
            src.as_any().downcast_ref::<RocmStorage>(),
            slots.as_any().downcast_ref::<RocmStorage>(),
        ) else {
            return Ok(false);
        };
        let Some(dst) = dst.as_any_mut().downcast_mut::<RocmStorage>() else {
            return Ok(false);
        };
        let w = self.geometry(dl, sl);
        let dev = dst.device.clone();
        let S::I64(slots) = &slots.slice else {
            return Err(BackendError::UnsupportedDtype {
                op: OP,
                dtype: BackendStorage::dtype(slots),
            }
            .into());
        };
        let slots = slots
            .slice(tl.start_offset()..)
            .map_err(BackendError::from)?;
        let (d0, s0) = (dl.start_offset(), sl.start_offset());
        if !src.device.same_device(&dev) {
            return Err(
                parameter_error(OP, "the new rows and the cache are on different devices").into(),
            );
        }
        let at = (d0, s0);
        match (&mut dst.slice, &src.slice) {
            (S::F32(c), S::F32(s)) => write_device(&dev, &w, c, s, at, &slots)?,
            (S::F16(c), S::F16(s)) => write_device(&dev, &w, c, s, at, &slots)?,
            (S::BF16(c), S::BF16(s)) => write_device(&dev, &w, c, s, at, &slots)?,
            _ => {
                return Err(BackendError::UnsupportedDtype {
                    op: OP,
                    dtype: BackendStorage::dtype(src),
                }
                .into())
            }
        }
        Ok(true)
    }
}
