//! Batched 2-D copies: the copies of one candle-core `cat` (one per input) in a single launch of
//! `kernels/hip/copy.hip`'s `copy2d_many_b<W>`, where `copy2d` takes one launch per input.
//!
//! A decoder's token step is bound by the host's launch rate, and a grouped-query attention's
//! `repeat_kv` concatenates one tensor with itself 8 times: batching the copies takes 8 launches
//! to 1 there (`ExtBackendStorage::ext_copy2d_many` in `slot.rs` brings them here). The batch
//! (up to [`BATCH`] copies) travels by value in the kernel arguments: no upload, no device
//! allocation per launch.

use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr, DeviceSlice, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{invalid, kernel_limit};

/// Most copies one launch takes (`CP_MAX` in copy.hip); longer lists take several launches.
pub const BATCH: usize = 8;

/// Threads per block of the copy kernels.
const BLOCK: u32 = 256;

/// One copy of a batch, with `BackendStorage::copy2d`'s parameters: `d1` rows of `d2` elements
/// from the source's element `src_o` on (row stride `src_s`) to the destination's element
/// `dst_o` on (row stride `dst_s`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Copy2dArgs {
    /// Rows.
    pub d1: usize,
    /// Elements per row.
    pub d2: usize,
    /// Source row stride, in elements.
    pub src_s: usize,
    /// Destination row stride, in elements.
    pub dst_s: usize,
    /// Source start, in elements.
    pub src_o: usize,
    /// Destination start, in elements.
    pub dst_o: usize,
}

/// The kernel parameter (`CopyBatch` in copy.hip): 64-bit fields, then 32-bit ones, no padding.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CopyBatch {
    src: [u64; BATCH],
    dst_o: [u64; BATCH],
    d1: [u32; BATCH],
    d2: [u32; BATCH],
    src_s: [u32; BATCH],
    dst_s: [u32; BATCH],
    start: [u32; BATCH + 1],
    n: u32,
}

// copy.hip asserts the same size on its side.
const _: () = assert!(std::mem::size_of::<CopyBatch>() == 296);

// SAFETY: `CopyBatch` is `#[repr(C)]` plain integers with no padding (296 bytes, asserted here
// and in copy.hip), so its bytes are exactly the kernel's `CopyBatch` parameter.
unsafe impl DeviceRepr for CopyBatch {}

/// The kernel for elements of `size` bytes.
fn kernel_name(size: usize) -> Option<&'static str> {
    match size {
        1 => Some("copy2d_many_b1"),
        2 => Some("copy2d_many_b2"),
        4 => Some("copy2d_many_b4"),
        8 => Some("copy2d_many_b8"),
        _ => None,
    }
}

/// Checks one copy against its buffers' lengths and the kernel's 32-bit sizes; its element
/// count (0 for an empty copy).
fn checked(
    name: &str,
    c: &Copy2dArgs,
    src_len: usize,
    dst_len: usize,
) -> Result<u32, BackendError> {
    let Copy2dArgs {
        d1,
        d2,
        src_s,
        dst_s,
        src_o,
        dst_o,
    } = *c;
    if d1 == 0 || d2 == 0 {
        return Ok(0);
    }
    // One past the last element a copy touches, relative to its start.
    let reach = |stride: usize| (d1 - 1).checked_mul(stride).and_then(|v| v.checked_add(d2));
    let fits = |o: usize, stride: usize, len: usize| {
        reach(stride)
            .and_then(|r| r.checked_add(o))
            .is_some_and(|e| e <= len)
    };
    if !fits(src_o, src_s, src_len) || !fits(dst_o, dst_s, dst_len) {
        return Err(invalid(
            name,
            format_args!(
                "{d1} rows of {d2} (strides {src_s} -> {dst_s}, offsets {src_o} -> {dst_o}) do \
                 not fit buffers of {src_len} and {dst_len}"
            ),
        ));
    }
    let small = |v: usize| u32::try_from(v).ok();
    match (
        d1.checked_mul(d2).and_then(small),
        small(src_s),
        small(dst_s),
    ) {
        (Some(el), Some(_), Some(_)) => Ok(el),
        _ => Err(kernel_limit(name, "a copy past 32-bit element indices")),
    }
}

/// Runs `copies` (each from its own source buffer) into `dst`, up to [`BATCH`] non-empty copies
/// per launch. Every copy is checked to stay inside its buffers before anything is queued.
/// `copies` is walked twice (checks, then launches) and never collected: no host allocation.
pub fn copy2d_many<'b, T, I>(
    dev: &RocmDevice,
    dst: &mut DeviceBuffer<T>,
    copies: I,
) -> Result<(), BackendError>
where
    T: RocmDType,
    I: Iterator<Item = (&'b DeviceBuffer<T>, Copy2dArgs)> + Clone,
{
    let size = std::mem::size_of::<T>();
    let Some(name) = kernel_name(size) else {
        return Err(invalid(
            "copy2d_many",
            format_args!("elements of {size} bytes have no batched copy kernel"),
        ));
    };
    let mut any = false;
    for (src, c) in copies.clone() {
        any |= checked(name, &c, src.len(), dst.len())? > 0;
    }
    if !any {
        return Ok(());
    }
    let func = dev.function(Module::Copy, name)?;
    let mut copies = copies.filter(|(_, c)| c.d1 > 0 && c.d2 > 0).peekable();
    while copies.peek().is_some() {
        let mut b = CopyBatch::default();
        let mut total = 0u32;
        let mut n = 0;
        for (src, c) in copies.by_ref().take(BATCH) {
            // `checked` proved the copy lies inside `src` from `src_o` on, and that its
            // element count and the four sizes below fit u32.
            let el = (c.d1 * c.d2) as u32;
            b.src[n] = src.slice(c.src_o..)?.device_ptr() as u64;
            b.dst_o[n] = c.dst_o as u64;
            b.d1[n] = c.d1 as u32;
            b.d2[n] = c.d2 as u32;
            b.src_s[n] = c.src_s as u32;
            b.dst_s[n] = c.dst_s as u32;
            b.start[n] = total;
            total = total
                .checked_add(el)
                .ok_or_else(|| kernel_limit(name, "a batch of more than 2^32 - 1 elements"))?;
            n += 1;
        }
        b.start[n] = total;
        b.n = n as u32;
        let out = DevicePtrArg::of(&*dst);
        let cfg = LaunchConfig::for_num_elems(total, BLOCK);
        let mut l = dev.stream().launch_builder(&func);
        l.arg(&b).arg(&out);
        // SAFETY: copy2d_many_b<W>(CopyBatch batch, T* dst) with W = size_of::<T>(); every copy
        // of the batch was checked to lie inside its source (from the address passed) and inside
        // `dst` (from dst_o), its sizes to fit u32, and the start[] prefix sums to fit u32;
        // `dst` is borrowed exclusively and each source shared, so no source aliases it; all
        // buffers are ordered on the device's one stream, which this launch joins.
        unsafe { l.launch(cfg)? };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_cover_every_element_size() {
        for size in [1, 2, 4, 8] {
            assert!(kernel_name(size).is_some(), "{size} bytes");
        }
        assert_eq!(kernel_name(16), None);
    }

    #[test]
    fn copies_are_checked_against_their_buffers() {
        let c = Copy2dArgs {
            d1: 4,
            d2: 64,
            src_s: 64,
            dst_s: 320,
            src_o: 0,
            dst_o: 256,
        };
        // The last row ends at 3 * 320 + 64 + 256 = 1280 in the destination.
        assert_eq!(checked("t", &c, 256, 1280).unwrap(), 256);
        assert!(checked("t", &c, 256, 1279).is_err());
        assert!(checked("t", &c, 255, 1280).is_err());
        let far = Copy2dArgs {
            src_o: usize::MAX - 10,
            ..c
        };
        assert!(checked("t", &far, usize::MAX, 1280).is_err());
        let huge = Copy2dArgs {
            d1: 1 << 20,
            d2: 1 << 13,
            src_s: 1 << 13,
            dst_s: 1 << 13,
            src_o: 0,
            dst_o: 0,
        };
        assert!(checked("t", &huge, usize::MAX, usize::MAX).is_err());
        let empty = Copy2dArgs { d1: 0, ..c };
        assert_eq!(checked("t", &empty, 0, 0).unwrap(), 0);
    }
}
