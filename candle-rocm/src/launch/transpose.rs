//! Transposed copies: a `copy_strided_src` whose layout reads a batch of matrices transposed
//! runs `kernels/hip/rows.hip`'s tiled `rtranspose_<bits>` kernels (bits moved, any dtype of 1,
//! 2, 4 or 8 bytes) instead of candle's per-element `ucopy`.

use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::rows::MAX_BLOCKS;
use crate::layout::invalid;

/// Side of the transpose tile and rows of threads per tile (`RW_TILE`, `RW_TROWS`).
const TILE: usize = 32;
const TILE_ROWS: u32 = 8;
/// Tile edge of rtranspose_u16's word path (rows.hip RW_WTILE).
const WIDE_TILE: usize = 64;

/// `(batches, r, c)` when `layout` reads `batches` contiguous (c, r) matrices transposed, i.e.
/// the contiguous copy of the layout is a batch of transposes; size-1 dims are ignored.
pub(crate) fn transposed(layout: &Layout) -> Option<(usize, usize, usize)> {
    let (dims, strides): (Vec<usize>, Vec<usize>) = layout
        .dims()
        .iter()
        .zip(layout.stride())
        .filter(|(d, _)| **d > 1)
        .map(|(d, s)| (*d, *s))
        .unzip();
    let n = dims.len();
    if n < 2 {
        return None;
    }
    let (r, c) = (dims[n - 2], dims[n - 1]);
    if strides[n - 2] != 1 || strides[n - 1] != r {
        return None;
    }
    let mut expected = r.checked_mul(c)?;
    let mut batches = 1usize;
    for i in (0..n - 2).rev() {
        if strides[i] != expected {
            return None;
        }
        expected = expected.checked_mul(dims[i])?;
        batches *= dims[i];
    }
    Some((batches, r, c))
}

/// The contiguous copy of a transposed layout (see [`transposed`]) into
/// `dst[dst_offset..]`, through shared-memory tiles; `false` when the layout is another kind.
pub(crate) fn transpose<T: RocmDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    dst: &mut DeviceBuffer<T>,
    dst_offset: usize,
) -> Result<bool, BackendError> {
    if !crate::settings::fast_kernels() {
        return Ok(false);
    }
    let Some((batches, r, c)) = transposed(layout) else {
        return Ok(false);
    };
    let (Ok(r32), Ok(c32)) = (u32::try_from(r), u32::try_from(c)) else {
        return Ok(false);
    };
    let bits = match std::mem::size_of::<T>() {
        1 => "rtranspose_u8",
        2 => "rtranspose_u16",
        4 => "rtranspose_u32",
        8 => "rtranspose_u64",
        _ => return Ok(false),
    };
    const OP: &str = "copy_strided_src";
    let el = layout.shape().elem_count();
    let start = layout.start_offset();
    let (Some(src_end), Some(dst_end)) = (start.checked_add(el), dst_offset.checked_add(el)) else {
        return Err(invalid(OP, "element range overflows"));
    };
    if src_end > src.len() || dst_end > dst.len() {
        return Err(invalid(
            OP,
            format_args!(
                "{el} elements at {start} -> {dst_offset} do not fit buffers of {} and {}",
                src.len(),
                dst.len()
            ),
        ));
    }
    let input = src.slice(start..src_end)?;
    let out = dst.slice_mut(dst_offset..dst_end)?;
    // rtranspose_u16 moves 64x64 tiles as 32-bit words when both dims are even (its grid-stride
    // loop covers any grid; this sizes it for the path it takes).
    let tile = if bits == "rtranspose_u16" && r % 2 == 0 && c % 2 == 0 {
        WIDE_TILE
    } else {
        TILE
    };
    let tiles = batches
        .checked_mul(r.div_ceil(tile))
        .and_then(|t| t.checked_mul(c.div_ceil(tile)))
        .ok_or_else(|| invalid(OP, "tile count overflows"))?;
    let f = dev.function(Module::Rows, bits)?;
    let (pin, pout) = (DevicePtrArg::of(&input), DevicePtrArg::of(&out));
    let cfg = LaunchConfig {
        // At most MAX_BLOCKS (2^20), so it fits u32.
        grid_dim: (tiles.clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (TILE as u32, TILE_ROWS, 1),
        shared_mem_bytes: 0,
    };
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&pin).arg(&pout).arg(&batches).arg(&r32).arg(&c32);
    // SAFETY: rtranspose_<bits>(const U* src, U* dst, size_t batches, unsigned r, unsigned c)
    // with U the unsigned type of T's size (the copy moves bits only): it reads and writes
    // batches * r * c == el elements; `input` and `out` were sliced to exactly el elements
    // after the bounds checks above; `dst` is borrowed exclusively, so they do not alias; the
    // block is the (32, 8) the kernel's tiles assume; both are ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Shape;

    #[test]
    fn transpose_detection() {
        // (2, 3) contiguous, transposed: reads a (2, 3) matrix as (3, 2).
        // (r, c) = (3, 2): element (i, j) of the view is at i + 3 * j.
        let l = Layout::contiguous((2, 3)).transpose(0, 1).unwrap();
        assert_eq!(transposed(&l), Some((1, 3, 2)));
        let l = Layout::contiguous((4, 2, 3)).transpose(1, 2).unwrap();
        assert_eq!(transposed(&l), Some((4, 3, 2)));
        // Offsets do not matter, size-1 dims are skipped.
        let l = Layout::contiguous_with_offset(Shape::from((1, 5, 7)), 3)
            .transpose(1, 2)
            .unwrap();
        assert_eq!(transposed(&l), Some((1, 7, 5)));
        // Not a transpose: contiguous, or the batch dim moved.
        assert_eq!(transposed(&Layout::contiguous((4, 5))), None);
        let l = Layout::contiguous((4, 2, 3)).transpose(0, 2).unwrap();
        assert_eq!(transposed(&l), None);
        let l = Layout::contiguous((4, 2, 3))
            .transpose(1, 2)
            .unwrap()
            .transpose(0, 1)
            .unwrap();
        assert_eq!(transposed(&l), None);
        let l = Layout::contiguous((2, 3)).broadcast_as((4, 2, 3)).unwrap();
        assert_eq!(transposed(&l), None);
    }
}
