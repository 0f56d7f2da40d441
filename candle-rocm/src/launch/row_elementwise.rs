//! Launchers of the `rows` module's element-wise kernels over rows: the rotary embeddings'
//! vector kernels (`rrope_*`, `rropei_*`) and SwiGLU's gate (`rswiglu_*`). Their shared
//! constants and checks (block size, 16-byte chunks, alignment) are `rows.rs`'s.

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceSlice, LaunchConfig};

use super::rows::{aligned, chunk, float, BLOCK, MAX_BLOCKS};
use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::invalid;

/// SwiGLU's gate (rows.hip `rswiglu_<T>[_v]`) on `rows` contiguous rows of `2 h` elements
/// of `x` (gate, then up; exactly `rows * 2 h` elements): `rows * h` outputs. `None` when the
/// fast kernels are off or the dtype has none (the caller then runs the composition).
#[cfg_attr(not(feature = "candle"), allow(dead_code))]
pub(crate) fn swiglu<T: RocmDType>(
    dev: &RocmDevice,
    x: &impl DeviceSlice<T>,
    (rows, h): (usize, usize),
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    const OP: &str = "swiglu";
    if !crate::settings::fast_kernels() || !float(T::DTYPE) {
        return Ok(None);
    }
    let el = rows
        .checked_mul(h)
        .ok_or_else(|| invalid(OP, "row count times row length overflows"))?;
    if el.checked_mul(2) != Some(x.len()) {
        return Err(invalid(
            OP,
            format_args!("{} elements for {rows} rows of 2 x {h}", x.len()),
        ));
    }
    let out = dev.alloc::<T>(el)?;
    if el == 0 {
        return Ok(Some(out));
    }
    let n = chunk::<T>();
    let vec = h % n == 0 && aligned(x.device_ptr()) && aligned(out.device_ptr());
    let name = match (T::DTYPE, vec) {
        (DType::F32, false) => "rswiglu_f32",
        (DType::F32, true) => "rswiglu_f32_v",
        (DType::F64, false) => "rswiglu_f64",
        (DType::F64, true) => "rswiglu_f64_v",
        (DType::F16, false) => "rswiglu_f16",
        (DType::F16, true) => "rswiglu_f16_v",
        (DType::BF16, false) => "rswiglu_bf16",
        (DType::BF16, true) => "rswiglu_bf16_v",
        _ => return Ok(None),
    };
    let f = dev.function(Module::Rows, name)?;
    let threads = if vec { el / n } else { el };
    let cfg = LaunchConfig {
        // At most MAX_BLOCKS: fits u32; the kernel loops over the rest.
        grid_dim: (threads.div_ceil(BLOCK).min(MAX_BLOCKS) as u32, 1, 1),
        block_dim: (BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let (px, po) = (DevicePtrArg::of(x), out.as_arg());
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&px).arg(&po).arg(&rows).arg(&h);
    // SAFETY: rswiglu_<T>[_v](const T* x, T* dst, size_t rows, size_t h) reads rows * 2 h
    // elements of x (x.len(), checked) and writes rows * h of `out` (allocated with that
    // many), grid-stride over any grid of RW_BLOCK (BLOCK) threads; _v only when h is a
    // multiple of the chunk and both pointers are 16-byte aligned, so every chunk is; both
    // buffers are ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(Some(out))
}

/// The rotary embeddings' vector kernels (rows.hip `rrope_<T>` for candle-nn's `rope`,
/// `rropei_<T>` for `rope_i`) on `rows` contiguous rows of `d` elements, row `r` at time
/// `r % t`, with cos/sin tables of `d / 2` values per time step (and a table per batch entry
/// of `rows_per_b` rows when that is not 0). `false` when they do not apply: the fast kernels
/// are off, the dtype has none, a pack of 16 bytes does not divide `d / 2` (rope) or `d`
/// (rope_i), a pointer is not 16-byte aligned, or the sizes pass 32 bits; the caller then runs
/// candle's kernels. The caller has checked that `x` and `out` hold `rows * d` elements and
/// cos/sin the table rows the layout needs.
#[cfg_attr(not(feature = "candle"), allow(dead_code))]
pub(crate) fn rope<T: RocmDType>(
    dev: &RocmDevice,
    interleaved: bool,
    (x, cos, sin): (
        &impl DeviceSlice<T>,
        &impl DeviceSlice<T>,
        &impl DeviceSlice<T>,
    ),
    out: &mut DeviceBuffer<T>,
    (rows, t, d, rows_per_b): (usize, usize, usize, usize),
) -> Result<bool, BackendError> {
    if !crate::settings::fast_kernels() {
        return Ok(false);
    }
    let name = match (T::DTYPE, interleaved) {
        (DType::F32, false) => "rrope_f32",
        (DType::F32, true) => "rropei_f32",
        (DType::F64, false) => "rrope_f64",
        (DType::F64, true) => "rropei_f64",
        (DType::F16, false) => "rrope_f16",
        (DType::F16, true) => "rropei_f16",
        (DType::BF16, false) => "rrope_bf16",
        (DType::BF16, true) => "rropei_bf16",
        _ => return Ok(false),
    };
    let n = chunk::<T>();
    let span = if interleaved { d } else { d / 2 };
    let (Some(el), Ok(rows32), Ok(t32), Ok(d32), Ok(rpb32)) = (
        rows.checked_mul(d),
        u32::try_from(rows),
        u32::try_from(t),
        u32::try_from(d),
        u32::try_from(rows_per_b),
    ) else {
        return Ok(false);
    };
    // Below 2^31 elements (as candle's kernels, which index with int): the kernels' 32-bit
    // grid-stride index then cannot wrap.
    let fits = span > 0 && span % n == 0 && t > 0 && el < 1 << 31;
    let ptrs = [
        x.device_ptr(),
        cos.device_ptr(),
        sin.device_ptr(),
        out.device_ptr(),
    ];
    if !fits || !ptrs.into_iter().all(aligned) || x.len() < el || out.len() < el {
        return Ok(false);
    }
    let packs = rows * (span / n);
    let f = dev.function(Module::Rows, name)?;
    let (px, pc, ps, po) = (
        DevicePtrArg::of(x),
        DevicePtrArg::of(cos),
        DevicePtrArg::of(sin),
        DevicePtrArg::of(&*out),
    );
    let cfg = LaunchConfig {
        // At most MAX_BLOCKS (2^20), so it fits u32.
        grid_dim: (packs.div_ceil(BLOCK).clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&px).arg(&pc).arg(&ps).arg(&po);
    l.arg(&rows32).arg(&t32).arg(&d32).arg(&rpb32);
    // SAFETY: rrope[i]_<T>(const T* x, const T* cos, const T* sin, T* dst, unsigned rows,
    // unsigned t, unsigned d, unsigned rows_per_b): it reads and writes rows * d elements of x
    // and dst (both at least that long, checked above) and cos/sin rows below t (times the
    // batch count when rows_per_b is set), which the caller checked; every pointer is 16-byte
    // aligned and `span` a multiple of the pack, as its vector loads need; `out` is borrowed
    // exclusively; all are ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(true)
}
