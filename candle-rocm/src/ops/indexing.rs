//! `index_select`, `gather`, `scatter_set`, `scatter_add_set` and `index_add`, on our `index`
//! module (`kernels/hip/index.hip`).
//!
//! Indices are `u8`, `u32` or `i64`, as on Candle's CPU and CUDA backends. Checking them on
//! the host would need a device-to-host copy per op, so the kernels check them on the device
//! instead: an index outside the indexed dimension (including Candle's "no index" sentinel,
//! the type's maximum) reads as zero (`index_select`, `gather`) and writes nothing
//! (`scatter_set`, `scatter_add_set`, `index_add`). The device never touches memory outside
//! the tensors, whatever the indices hold. (The CPU backend returns an `InvalidIndex` error
//! instead, except for the sentinel.)
//!
//! `index_select` of a contiguous source whose row segments (the `right` elements after the
//! indexed dim) are a multiple of 4 bytes, with source and output aligned to the pack, runs
//! `is_rows_<I>_v<B>`: groups of threads copy whole segments in 16-, 8- or 4-byte packs
//! (dtype-agnostic), reading each id once. Other cases, and everything when
//! [`crate::settings::fast_kernels`] is off, run the per-element `is_<I>_<T>`.

use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceSlice, DeviceView, LaunchConfig};

use crate::device::RocmDevice;
use crate::dispatch::{Map1, Map2InPlace};
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::launch::bits_suffix;
use crate::launch::kname;
use crate::layout::{checked_product, out_of_bounds, shape_error, size_overflow};
use crate::layout::{contiguous_view, invalid};

/// The indices of an op: a view starting at the layout's first index, and the dtype suffix
/// of the kernel name.
struct Ids<'a> {
    ptr: DevicePtrArg,
    suffix: &'static str,
    _view: std::marker::PhantomData<&'a ()>,
}

impl<'a> Ids<'a> {
    /// Views the indices from `offset` (checking `needed` elements fit), or fails with a typed
    /// error naming `op` when their dtype is not an index type.
    fn new(
        op: &'static str,
        ids: &'a S,
        offset: usize,
        needed: usize,
    ) -> Result<Ids<'a>, BackendError> {
        fn view<'b, I: RocmDType>(
            op: &str,
            b: &'b DeviceBuffer<I>,
            offset: usize,
            needed: usize,
        ) -> Result<DeviceView<'b, I>, BackendError> {
            match offset.checked_add(needed) {
                Some(end) if end <= b.len() => Ok(b.slice(offset..)?),
                _ => Err(out_of_bounds(
                    op,
                    "indices",
                    offset.saturating_add(needed),
                    b.len(),
                )),
            }
        }
        let (ptr, suffix) = match ids {
            S::U8(b) => (DevicePtrArg::of(&view(op, b, offset, needed)?), "u8"),
            S::U32(b) => (DevicePtrArg::of(&view(op, b, offset, needed)?), "u32"),
            S::I64(b) => (DevicePtrArg::of(&view(op, b, offset, needed)?), "i64"),
            other => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(other.dtype(), op)
                    .bt()
                    .into())
            }
        };
        Ok(Ids {
            ptr,
            suffix,
            _view: std::marker::PhantomData,
        })
    }
}

/// `(left, dim, right)`: the products of the dims before `dim`, at `dim`, and after it.
fn split(op: &str, dims: &[usize], dim: usize) -> Result<(usize, usize, usize), BackendError> {
    if dim >= dims.len() {
        return Err(shape_error(
            op,
            format_args!("dim {dim} is out of range for shape {dims:?}"),
        ));
    }
    Ok((
        checked_product(
            op,
            "product of the dims before the indexed dim",
            &dims[..dim],
        )?,
        dims[dim],
        checked_product(
            op,
            "product of the dims after the indexed dim",
            &dims[dim + 1..],
        )?,
    ))
}

/// Elements of a 1-D index layout of `n` indices `stride` apart, from its first:
/// `(n - 1) * stride + 1` (0 for no indices).
fn ids_span(op: &str, n: usize, stride: usize) -> Result<usize, BackendError> {
    if n == 0 {
        return Ok(0);
    }
    (n - 1)
        .checked_mul(stride)
        .and_then(|v| v.checked_add(1))
        .ok_or_else(|| size_overflow(op, format_args!("index span (({n} - 1) * {stride} + 1)")))
}

/// Checks that `a` and `b` agree on every dim except `dim`.
fn same_except(op: &str, a: &[usize], b: &[usize], dim: usize) -> Result<(), BackendError> {
    let ok = a.len() == b.len()
        && a.iter()
            .zip(b)
            .enumerate()
            .all(|(i, (x, y))| i == dim || x == y);
    if ok {
        Ok(())
    } else {
        Err(shape_error(
            op,
            format_args!("shapes {a:?} and {b:?} must agree except on dim {dim}"),
        ))
    }
}

/// Threads per block of the `is_rows_*` kernels.
const ROWS_BLOCK: usize = 256;
/// Most blocks of an `is_rows_*` launch; its threads grid-stride over further rows.
const ROWS_MAX_BLOCKS: usize = 1 << 16;

/// Launch of an `is_rows_<I>_v<bytes>` kernel: `rows` row segments of `packs` packs of
/// `bytes` bytes each, `tpr` threads per segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RowsPlan {
    /// Pack width in bytes: 16, 8 or 4.
    bytes: usize,
    /// Packs per row segment.
    packs: usize,
    /// Threads per row segment: a power of two dividing [`ROWS_BLOCK`].
    tpr: u32,
    /// Blocks of [`ROWS_BLOCK`] threads.
    grid: u32,
}

impl RowsPlan {
    /// The plan for `rows` segments of `row_bytes` bytes each, copied from address `src` to
    /// address `out`: the widest pack that divides the segment and both addresses, or `None`
    /// when not even 4 bytes do (or a segment is empty).
    fn new(rows: usize, row_bytes: usize, src: usize, out: usize) -> Option<RowsPlan> {
        let bytes = [16, 8, 4]
            .into_iter()
            .find(|b| row_bytes % b == 0 && src % b == 0 && out % b == 0)?;
        let packs = row_bytes / bytes;
        if packs == 0 || rows == 0 {
            return None;
        }
        let tpr = packs.next_power_of_two().min(ROWS_BLOCK);
        let grid = rows.div_ceil(ROWS_BLOCK / tpr).clamp(1, ROWS_MAX_BLOCKS);
        Some(RowsPlan {
            bytes,
            packs,
            // Both at most 2^16 (the constants), so they fit u32.
            tpr: tpr as u32,
            grid: grid as u32,
        })
    }

    /// The launch shape: `grid` blocks of [`ROWS_BLOCK`] threads.
    fn cfg(self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.grid, 1, 1),
            block_dim: (ROWS_BLOCK as u32, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// `index_select(ids, dim)`: `out[.., j, ..] = src[.., ids[j], ..]`.
pub struct IndexSelect<'a>(pub &'a S, pub &'a Layout, pub usize);

impl Map1 for IndexSelect<'_> {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        src_l: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        const OP: &str = "index-select";
        let (ids_l, dim) = (self.1, self.2);
        let (n_ids, ids_stride) = match (ids_l.dims(), ids_l.stride()) {
            ([n], [s]) => (*n, *s),
            _ => {
                return Err(candle_core::Error::UnexpectedNumberOfDims {
                    expected: 1,
                    got: ids_l.dims().len(),
                    shape: ids_l.shape().clone(),
                }
                .bt()
                .into())
            }
        };
        let src = contiguous_view(OP, src, src_l)?;
        let (left, src_dim, right) = split(OP, src_l.dims(), dim)?;
        let dst_el = checked_product(
            OP,
            "output element count (left * n_ids * right)",
            &[left, n_ids, right],
        )?;
        let out = dev.alloc::<T>(dst_el)?;
        if dst_el == 0 {
            return Ok(out);
        }
        let needed = ids_span(OP, n_ids, ids_stride)?;
        let ids = Ids::new(OP, self.0, ids_l.start_offset(), needed)?;
        // dst_el = left * n_ids * right did not overflow, so neither does rows; a segment too
        // large to count in bytes takes the per-element kernels.
        let rows = left * n_ids;
        let plan = right
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|row_bytes| {
                RowsPlan::new(
                    rows,
                    row_bytes,
                    src.device_ptr() as usize,
                    out.device_ptr() as usize,
                )
            })
            .filter(|_| crate::settings::fast_kernels());
        if let Some(plan) = plan {
            let name = kname!("is_rows_{}_v{}", ids.suffix, plan.bytes);
            let f = dev.function(Module::Index, &name)?;
            let (psrc, pout) = (DevicePtrArg::of(&src), out.as_arg());
            let mut l = dev.stream().launch_builder(&f);
            l.arg(&rows)
                .arg(&ids.ptr)
                .arg(&ids_stride)
                .arg(&psrc)
                .arg(&pout)
                .arg(&src_dim)
                .arg(&n_ids)
                .arg(&plan.packs)
                .arg(&plan.tpr);
            // SAFETY: is_rows_<I>_v<B>(size_t rows, const I* ids, size_t ids_stride,
            // const P* inp, P* out, size_t src_dim, size_t ids_dim, size_t packs,
            // unsigned tpr) in kernels/hip/index.hip with B-byte packs P; `ids` holds
            // (n_ids - 1) * ids_stride + 1 elements; `src` is the contiguous
            // left * src_dim * right source and `out` the left * n_ids * right output, both
            // B-byte aligned with right * size_of::<T>() = packs * B (RowsPlan::new), so every
            // pack is in bounds and aligned; tpr is a power of two dividing the block; the
            // kernel reads nothing for an out-of-range index.
            unsafe { l.launch(plan.cfg())? };
            return Ok(out);
        }
        let name = kname!("is_{}_{}", ids.suffix, bits_suffix::<T>());
        let f = dev.function(Module::Index, &name)?;
        let (psrc, pout) = (DevicePtrArg::of(&src), out.as_arg());
        let mut l = dev.stream().launch_builder(&f);
        l.arg(&dst_el)
            .arg(&ids.ptr)
            .arg(&ids_stride)
            .arg(&psrc)
            .arg(&pout)
            .arg(&left)
            .arg(&src_dim)
            .arg(&n_ids)
            .arg(&right);
        // SAFETY: is_<I>_<T>(size_t numel, const I* ids, size_t ids_stride, const T* inp,
        // T* out, size_t left, size_t src_dim, size_t ids_dim, size_t right) in
        // kernels/hip/index.hip; `ids` holds (n_ids - 1) * ids_stride + 1 elements; `src` is
        // the contiguous left * src_dim * right source; `out` holds numel elements; the kernel
        // reads nothing for an out-of-range index.
        unsafe { l.launch(RocmDevice::cfg(dst_el)?)? };
        Ok(out)
    }
}

/// `gather(ids, dim)`: `out[i][j][k] = src[i][ids[i][j][k]][k]` (for `dim` = 1).
pub struct Gather<'a>(pub &'a S, pub &'a Layout, pub usize);

impl Map1 for Gather<'_> {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        src_l: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        const OP: &str = "gather";
        let (ids_l, dim) = (self.1, self.2);
        let (ids_o1, _) = ids_l.contiguous_offsets().ok_or_else(|| {
            BackendError::from(candle_core::Error::RequiresContiguous { op: OP }.bt())
        })?;
        let src = contiguous_view(OP, src, src_l)?;
        let (left, src_dim, right) = split(OP, src_l.dims(), dim)?;
        same_except(OP, src_l.dims(), ids_l.dims(), dim)?;
        let ids_dim = ids_l.dims()[dim];
        let el = ids_l.shape().elem_count();
        let out = dev.alloc::<T>(el)?;
        if el == 0 {
            return Ok(out);
        }
        let ids = Ids::new(OP, self.0, ids_o1, el)?;
        let name = kname!("gather_{}_{}", ids.suffix, bits_suffix::<T>());
        let f = dev.function(Module::Index, &name)?;
        let (psrc, pout) = (DevicePtrArg::of(&src), out.as_arg());
        let mut l = dev.stream().launch_builder(&f);
        l.arg(&el)
            .arg(&ids.ptr)
            .arg(&psrc)
            .arg(&pout)
            .arg(&left)
            .arg(&src_dim)
            .arg(&ids_dim)
            .arg(&right);
        // SAFETY: gather_<I>_<T>(size_t numel, const I* ids, const T* inp, T* out,
        // size_t left, size_t src_dim, size_t ids_dim, size_t right); `ids` and `out` hold
        // numel = left * ids_dim * right elements (the shapes agree except on `dim`); `src`
        // is the contiguous left * src_dim * right source; out-of-range indices read nothing.
        unsafe { l.launch(RocmDevice::cfg(el)?)? };
        Ok(out)
    }
}

/// Which in-place indexed update to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// `scatter_set`: `dst[.., ids[..], ..] = src[..]`.
    Scatter,
    /// `scatter_add_set`: `dst[.., ids[..], ..] += src[..]`.
    ScatterAdd,
    /// `index_add`: `dst[.., ids[j], ..] += src[.., j, ..]` with 1-D `ids`.
    IndexAdd,
}

/// An in-place indexed update of `dst` from `src` along dim `.2`, with indices `.0`/`.1`.
pub struct IndexedUpdate<'a>(pub &'a S, pub &'a Layout, pub usize, pub Update);

impl Map2InPlace for IndexedUpdate<'_> {
    const OP: &'static str = "scatter";

    fn f<T: RocmDType>(
        &self,
        (dst, dst_l): (&mut DeviceBuffer<T>, &Layout),
        (src, src_l): (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> Result<(), BackendError> {
        let (ids_l, dim, update) = (self.1, self.2, self.3);
        let op = match update {
            Update::Scatter => "scatter",
            Update::ScatterAdd => "scatter-add",
            Update::IndexAdd => "index-add",
        };
        let (ids_o1, _) = ids_l.contiguous_offsets().ok_or_else(|| {
            BackendError::from(candle_core::Error::RequiresContiguous { op }.bt())
        })?;
        let src = contiguous_view(op, src, src_l)?;
        let (left, src_dim, right) = split(op, src_l.dims(), dim)?;
        let (_, dst_dim, _) = split(op, dst_l.dims(), dim)?;
        same_except(op, src_l.dims(), dst_l.dims(), dim)?;
        let ids_needed = match update {
            Update::Scatter | Update::ScatterAdd => {
                if ids_l.dims() != src_l.dims() {
                    return Err(shape_error(
                        op,
                        format_args!(
                            "indices {:?} and source {:?} must have the same shape",
                            ids_l.dims(),
                            src_l.dims()
                        ),
                    ));
                }
                src_l.shape().elem_count()
            }
            Update::IndexAdd => {
                if ids_l.dims() != [src_dim] {
                    return Err(shape_error(
                        op,
                        format_args!(
                            "indices {:?} must be 1-D with {src_dim} entries (source dim {dim})",
                            ids_l.dims()
                        ),
                    ));
                }
                src_dim
            }
        };
        let (dst_o1, dst_o2) = dst_l.contiguous_offsets().ok_or_else(|| {
            BackendError::from(candle_core::Error::RequiresContiguous { op }.bt())
        })?;
        if dst_o2 > dst.len() {
            return Err(invalid(
                op,
                format_args!(
                    "layout reaches element {dst_o2} of a buffer of {}",
                    dst.len()
                ),
            ));
        }
        let threads = checked_product(op, "thread count (left * right)", &[left, right])?;
        if threads == 0 || src_dim == 0 {
            return Ok(());
        }
        let ids = Ids::new(op, self.0, ids_o1, ids_needed)?;
        let root = match update {
            Update::Scatter => "s",
            Update::ScatterAdd => "sa",
            Update::IndexAdd => "ia",
        };
        // A scatter moves bits (f8e4m3 runs as u8); the adds need the element type's kernel.
        let value = match update {
            Update::Scatter => bits_suffix::<T>(),
            Update::ScatterAdd | Update::IndexAdd => T::DTYPE.as_str(),
        };
        let name = kname!("{root}_{}_{value}", ids.suffix);
        let f = dev.function(Module::Index, &name)?;
        let out = dst.slice_mut(dst_o1..dst_o2)?;
        let (psrc, pdst) = (DevicePtrArg::of(&src), DevicePtrArg::of(&out));
        let mut l = dev.stream().launch_builder(&f);
        l.arg(&ids.ptr);
        if update == Update::IndexAdd {
            l.arg(&src_dim);
        }
        l.arg(&psrc)
            .arg(&pdst)
            .arg(&left)
            .arg(&src_dim)
            .arg(&dst_dim)
            .arg(&right);
        // SAFETY: s_/sa_<I>_<T>(const I* ids, const T* src, T* dst, size_t left,
        // size_t src_dim, size_t dst_dim, size_t right) and ia_<I>_<T>(const I* ids,
        // size_t ids_dim, <same>) in kernels/hip/index.hip, one thread per (left, right) pair;
        // `ids` holds what the op indexes (checked above), `src` is the contiguous
        // left * src_dim * right source, `out` the contiguous left * dst_dim * right
        // destination, borrowed exclusively; out-of-range indices write nothing.
        unsafe { l.launch(RocmDevice::cfg(threads)?)? };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_overflow_is_a_typed_error() {
        fn overflow<T>(r: Result<T, BackendError>) -> bool {
            matches!(r, Err(BackendError::SizeOverflow { .. }))
        }
        let big = usize::MAX / 2 + 1;
        assert_eq!(split("t", &[2, 3, 4, 5], 1).unwrap(), (2, 3, 20));
        assert!(overflow(split("index-select", &[big, 2, 3], 2)));
        assert!(overflow(split("gather", &[3, 1, big, 4], 1)));
        assert_eq!(ids_span("t", 0, 7).unwrap(), 0);
        assert_eq!(ids_span("t", 3, 4).unwrap(), 9);
        assert!(overflow(ids_span("index-select", 3, big)));
        assert!(overflow(ids_span("index-select", 2, usize::MAX)));
    }

    #[test]
    fn rows_plan_picks_the_widest_pack() {
        let plan = |rows, bytes, src, out| RowsPlan::new(rows, bytes, src, out);
        // The embedding shape: 1024 f32 per row, 32768 rows.
        let p = plan(32768, 4096, 256, 512).unwrap();
        assert_eq!((p.bytes, p.packs, p.tpr, p.grid), (16, 256, 256, 32768));
        // Short rows share a block; the grid is capped and grid-strides.
        let p = plan(1 << 30, 16, 0, 0).unwrap();
        assert_eq!((p.bytes, p.packs, p.tpr), (16, 1, 1));
        assert_eq!(p.grid as usize, ROWS_MAX_BLOCKS);
        let p = plan(10, 48, 0, 0).unwrap();
        assert_eq!((p.bytes, p.packs, p.tpr, p.grid), (16, 3, 4, 1));
        // Narrower packs for rows or addresses aligned to 8 or 4 bytes only.
        assert_eq!(plan(3, 24, 0, 0).unwrap().bytes, 8);
        assert_eq!(plan(3, 32, 8, 0).unwrap().bytes, 8);
        assert_eq!(plan(3, 32, 0, 4).unwrap().bytes, 4);
        let p = plan(3, 12, 0, 0).unwrap();
        assert_eq!((p.bytes, p.packs, p.tpr), (4, 3, 4));
        // Long rows: one segment per block, each thread several packs.
        assert_eq!(plan(2, 16 * 1000, 0, 0).unwrap().tpr, 256);
        // Not a multiple of 4 bytes, or misaligned: the per-element kernels.
        assert_eq!(plan(3, 6, 0, 0), None);
        assert_eq!(plan(3, 16, 2, 0), None);
        assert_eq!(plan(0, 16, 0, 0), None);
        assert_eq!(plan(3, 0, 0, 0), None);
    }
}
