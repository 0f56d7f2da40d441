//! Nearest-neighbour upsampling of contiguous inputs: `copy.hip`'s `upsample_nearest_b<W>`
//! (elements of 1, 2, 4 or 8 bytes: every dtype), with candle-kernels' index rule (source
//! index `(size_t)(i * in / out)` in f64, clamped), so its result is the element-for-element
//! copy candle's `upsample_nearest2d` kernel makes, without its four 64-bit divisions an
//! element (a Stable Diffusion VAE's upsamples took 0.93 ms of its 10.4 ms f16 decode there).

use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{invalid, kernel_limit};

/// Outputs a thread writes (`UP_RUN` in copy.hip).
const RUN: usize = 4;

/// Threads per block.
const BLOCK: u32 = 256;

/// Most blocks of one launch (the kernel strides over the rest).
const MAX_BLOCKS: u64 = 1 << 16;

/// The kernel parameter (`UpArgs` in copy.hip): 64-bit fields, then 32-bit ones, no padding.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct UpArgs {
    runs: u64,
    scale_h: f64,
    scale_w: f64,
    h_in: u32,
    w_in: u32,
    h_out: u32,
    w_out: u32,
    runs_per_row: u32,
    pack: u32,
}

// copy.hip asserts the same size on its side.
const _: () = assert!(std::mem::size_of::<UpArgs>() == 48);

// SAFETY: `UpArgs` is `#[repr(C)]` over three 8-byte and six 4-byte fields in that order (48
// bytes, no padding), field for field the kernel's `UpArgs`.
unsafe impl DeviceRepr for UpArgs {}

/// The arguments for `planes` planes of `(h_in, w_in)` upsampled to `(h_out, w_out)`: `None`
/// when a size is 0 or does not fit the kernel's 32-bit dims.
pub(crate) fn up_args(
    planes: usize,
    (h_in, w_in): (usize, usize),
    (h_out, w_out): (usize, usize),
) -> Option<UpArgs> {
    if [planes, h_in, w_in, h_out, w_out].contains(&0) {
        return None;
    }
    let small = |v: usize| u32::try_from(v).ok();
    let runs_per_row = w_out.div_ceil(RUN);
    let runs = planes.checked_mul(h_out)?.checked_mul(runs_per_row)?;
    Some(UpArgs {
        runs: u64::try_from(runs).ok()?,
        scale_h: h_in as f64 / h_out as f64,
        scale_w: w_in as f64 / w_out as f64,
        h_in: small(h_in)?,
        w_in: small(w_in)?,
        h_out: small(h_out)?,
        w_out: small(w_out)?,
        runs_per_row: small(runs_per_row)?,
        pack: u32::from(w_out % RUN == 0),
    })
}

/// `src`, contiguous `(planes, h_in, w_in)` elements, upsampled to a new `(planes, h_out,
/// w_out)` buffer by nearest neighbour (candle's rule).
pub fn upsample_nearest<T: RocmDType>(
    dev: &RocmDevice,
    src: &impl rocm_safe::DeviceSlice<T>,
    planes: usize,
    input: (usize, usize),
    output: (usize, usize),
) -> Result<DeviceBuffer<T>, BackendError> {
    const NAME: &str = "upsample_nearest";
    let name = match std::mem::size_of::<T>() {
        1 => "upsample_nearest_b1",
        2 => "upsample_nearest_b2",
        4 => "upsample_nearest_b4",
        8 => "upsample_nearest_b8",
        size => {
            return Err(invalid(
                NAME,
                format_args!("elements of {size} bytes have no kernel"),
            ))
        }
    };
    let out_len = planes
        .checked_mul(output.0)
        .and_then(|v| v.checked_mul(output.1))
        .ok_or_else(|| kernel_limit(NAME, "an output past usize"))?;
    let dst = dev.alloc::<T>(out_len)?;
    if out_len == 0 {
        return Ok(dst);
    }
    let in_len = planes * input.0 * input.1;
    if in_len == 0 || src.len() < in_len {
        return Err(invalid(
            NAME,
            format_args!(
                "{planes} planes of {input:?} to {output:?} from {} elements",
                src.len()
            ),
        ));
    }
    let args =
        up_args(planes, input, output).ok_or_else(|| kernel_limit(NAME, "dims past 32 bits"))?;
    let blocks = args.runs.div_ceil(u64::from(BLOCK)).min(MAX_BLOCKS) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let f = dev.function(Module::Copy, name)?;
    let (ps, pd) = (DevicePtrArg::of(src), dst.as_arg());
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&args).arg(&ps).arg(&pd);
    // SAFETY: upsample_nearest_b<W>(UpArgs a, const T* src, T* dst) with W = size_of::<T>().
    // It reads src[(plane h_in + ih) w_in + iw] with plane < planes, ih < h_in, iw < w_in
    // (clamped in the kernel): below planes h_in w_in = in_len <= src.len() (checked); it
    // writes dst[row w_out + c] for row < planes h_out and c < w_out: `dst` is new, out_len
    // elements, from the allocator's aligned start, so runs of RUN elements at multiples of RUN
    // are aligned for `pack`'s one store. Both are ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs cover each row, packs only where rows are whole runs, candle's scales.
    #[test]
    fn args_cover_rows_in_runs() {
        let a = up_args(512, (256, 256), (512, 512)).unwrap();
        assert_eq!((a.runs_per_row, a.pack, a.runs), (128, 1, 512 * 512 * 128));
        assert_eq!((a.scale_h, a.scale_w), (0.5, 0.5));
        let a = up_args(3, (5, 7), (9, 15)).unwrap();
        assert_eq!((a.runs_per_row, a.pack), (4, 0));
        assert_eq!(a.scale_w, 7.0 / 15.0);
        assert!(up_args(0, (1, 1), (2, 2)).is_none());
        assert!(up_args(1, (1, 1), (1 << 32, 2)).is_none());
    }
}
