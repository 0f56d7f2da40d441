//! Copies between storages of one device: `copy_strided_src` (a transposed copy through our
//! `rows` kernels where the layout is one, else candle's `ucopy`), `copy2d`, `cat`'s batched
//! copies (`copy2d_many`), `const_set`, a contiguous copy for the ops that need one, and
//! `to_device` between two devices (peer to peer, else staged through pinned host memory).

use candle_core::scalar::Scalar;
use candle_core::Layout;
use rocm_safe::DeviceBuffer;

use crate::device::RocmDevice;
use crate::dispatch::same_dtype;
use crate::dtype::{for_each_slice, match_dtype, RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::launch::candle as kernels;
use crate::launch::copy::Copy2dArgs;

/// `copy_strided_src`: the elements `src` addresses through `src_l`, in row-major order, to
/// `dst[dst_offset..]` (same dtype).
pub fn copy_strided(
    dev: &RocmDevice,
    src: &S,
    src_l: &Layout,
    dst: &mut S,
    dst_offset: usize,
) -> Result<(), BackendError> {
    same_dtype!("copy_strided_src", (src, dst), (a, b) => {
        if crate::launch::transpose::transpose(dev, a, src_l, b, dst_offset)? {
            return Ok(());
        }
        kernels::copy_strided(dev, a, src_l, b, dst_offset)
    })
}

/// A new contiguous buffer holding the elements `src` addresses through `l`.
pub fn contiguous(dev: &RocmDevice, src: &S, l: &Layout) -> Result<S, BackendError> {
    let n = l.shape().elem_count();
    let dtype = src.dtype();
    let mut out = match_dtype!(dtype, T => S::from_buffer(dev.alloc::<T>(n)?), dtype => {
        return Err(BackendError::UnsupportedDtype { op: "contiguous", dtype })
    });
    // Every element of `out` is written by the copy before it is read.
    copy_strided(dev, src, l, &mut out, 0)?;
    Ok(out)
}

/// `copy2d`: `d1` rows of `d2` elements, strides and offsets as candle's `copy2d` takes them.
pub fn copy2d(
    dev: &RocmDevice,
    src: &S,
    dst: &mut S,
    dims: (usize, usize),
    strides: (usize, usize),
    offsets: (usize, usize),
) -> Result<(), BackendError> {
    same_dtype!("copy2d", (src, dst), (a, b) => {
        kernels::copy2d(dev, a, b, dims, strides, offsets)
    })
}

/// `const_set`: `value` into every element `l` addresses in `dst` (dtypes must agree).
pub fn const_set(
    dev: &RocmDevice,
    dst: &mut S,
    l: &Layout,
    value: Scalar,
) -> Result<(), BackendError> {
    let dtype = dst.dtype();
    for_each_slice!(dst, b => match RocmDType::from_scalar(value) {
        Some(v) => kernels::const_set(dev, b, l, v),
        None => Err(BackendError::DtypeMismatch {
            op: "const_set",
            lhs: dtype,
            rhs: value.dtype(),
        }),
    })
}

/// `cat`'s copies `srcs` into `dst` in batched launches ([`crate::launch::copy::copy2d_many`]);
/// every source must be of `dst`'s dtype. `srcs` is walked, never collected.
pub fn copy2d_many<'b, I>(dev: &RocmDevice, dst: &mut S, srcs: I) -> Result<(), BackendError>
where
    I: Iterator<Item = (&'b S, Copy2dArgs)> + Clone,
{
    for_each_slice!(dst, d => typed(dev, d, srcs))
}

/// A copy of the whole of `src` (a buffer of another device) in a new buffer of `dst`:
/// peer to peer where the devices reach each other, else through pinned host memory in
/// chunks (`rocm_safe::peer::copy_peer`); never through a CPU tensor. The direct copy is
/// queued on `dst`'s stream, ordered after the source's work, and returns at once.
pub fn to_device(src: &S, dst: &RocmDevice) -> Result<S, BackendError> {
    let dtype = src.dtype();
    match_dtype!(dtype, T => {
        let Some(buf) = T::as_buffer(src) else {
            return Err(BackendError::UnsupportedDtype { op: "to_device", dtype });
        };
        let mut out = dst.alloc::<T>(buf.len())?;
        // Every element of `out` is written by the copy before anything reads it.
        rocm_safe::peer::copy_peer(buf, &mut out)?;
        Ok(S::from_buffer(out))
    }, dtype => Err(BackendError::UnsupportedDtype { op: "to_device", dtype }))
}

/// [`copy2d_many`] for element type `T`: each source's buffer, or a dtype mismatch.
fn typed<'b, T, I>(dev: &RocmDevice, dst: &mut DeviceBuffer<T>, srcs: I) -> Result<(), BackendError>
where
    T: RocmDType,
    I: Iterator<Item = (&'b S, Copy2dArgs)> + Clone,
{
    if let Some((s, _)) = srcs.clone().find(|(s, _)| T::as_buffer(s).is_none()) {
        return Err(BackendError::DtypeMismatch {
            op: "copy2d",
            lhs: T::DTYPE,
            rhs: s.dtype(),
        });
    }
    let copies = srcs.filter_map(|(s, c)| Some((T::as_buffer(s)?, c)));
    crate::launch::copy::copy2d_many(dev, dst, copies)
}
