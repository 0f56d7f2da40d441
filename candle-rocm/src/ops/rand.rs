//! Random fills (`rand_uniform`, `rand_normal`): our counter-based generator
//! (`kernels/hip/rand.hip`), whose element i of the k-th draw after `set_seed(s)` depends only
//! on (s, offset, i), so a seeded sequence is reproducible.

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DeviceRepr};

use crate::device::RocmDevice;
use crate::dtype::RocmStorageSlice as S;
use crate::error::BackendError;

/// `n` values of `dtype` uniform in [a, b) (`normal` = false) or normal (mean a, std b).
pub fn rand(
    dev: &RocmDevice,
    n: usize,
    dtype: DType,
    (a, b): (f64, f64),
    normal: bool,
) -> Result<S, BackendError> {
    let kind = if normal { "normal" } else { "uniform" };
    let name = format!("rand_{kind}_{}", dtype.as_str());
    let (af, bf) = (a as f32, b as f32);
    Ok(match dtype {
        DType::F32 => S::F32(draw(dev, &name, n, 4, (af, bf))?),
        DType::F16 => S::F16(draw(dev, &name, n, 4, (af, bf))?),
        DType::BF16 => S::BF16(draw(dev, &name, n, 4, (af, bf))?),
        DType::F64 => S::F64(draw(dev, &name, n, 2, (a, b))?),
        dtype => {
            return Err(BackendError::UnsupportedDtype {
                op: if normal {
                    "rand_normal"
                } else {
                    "rand_uniform"
                },
                dtype,
            })
        }
    })
}

/// One draw of `n` elements from kernel `name`, `per_thread` elements a thread, with the
/// kernel's parameters `(a, b)` of type `P`.
fn draw<T: DeviceRepr, P: DeviceRepr>(
    dev: &RocmDevice,
    name: &str,
    n: usize,
    per_thread: usize,
    (a, b): (P, P),
) -> Result<DeviceBuffer<T>, BackendError> {
    let (seed, offset) = dev.next_draw(n);
    let out = dev.alloc::<T>(n)?;
    if n == 0 {
        return Ok(out);
    }
    let f = dev.function(Module::Rand, name)?;
    let (po, n64) = (out.as_arg(), n as u64);
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&po).arg(&n64).arg(&seed).arg(&offset).arg(&a).arg(&b);
    // SAFETY: rand_<kind>_<dtype>(T* out, u64 n, u64 seed, u64 offset, P a, P b) as in
    // kernels/hip/rand.hip; `out` holds n elements and every thread bounds-checks.
    unsafe { l.launch(RocmDevice::cfg(n.div_ceil(per_thread))?)? };
    Ok(out)
}
