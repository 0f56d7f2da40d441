//! Batch normalisation with running statistics over typed buffers: `elementwise.hip`'s
//! `bnorm_<T>` (f32, f16, bf16, f64) computes candle-nn's `BatchNorm` in eval mode (the fused
//! op `BatchNormEval`, handed over by `slot::fused`) in one launch and one pass over the input,
//! where candle-nn's composed path runs four whole-tensor broadcast ops (subtract the mean,
//! divide by the deviation, multiply by the weight, add the bias); with the ReLU after it in the
//! same pass for `BatchNormEvalRelu` (a ResNet's batch norms but the last of each block).

use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr};

use crate::device::RocmDevice;
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::launch::elementwise::{launch_config, pack_elems};
use crate::launch::strides::magic_divisor;
use crate::layout::{checked_view, invalid};

/// The op's name in errors.
const OP: &str = "batch-norm-eval";

/// The kernels, f32 / f16 / bf16 / f64.
const KERNELS: [&str; 4] = ["bnorm_f32", "bnorm_f16", "bnorm_bf16", "bnorm_f64"];

/// The kernels' first argument (`EwBnArgs` in elementwise.hip): element count, the channel
/// plane's length and the channel count with their magic divisors, and `vec`'s bits: whole
/// packs fit a plane (bit 0), ReLU after (bit 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BnArgs {
    n: u32,
    inner: u32,
    inner_magic: u32,
    inner_shift: u32,
    c: u32,
    c_magic: u32,
    c_shift: u32,
    vec: u32,
}

const _: () = assert!(std::mem::size_of::<BnArgs>() == 32);

// SAFETY: `BnArgs` is `#[repr(C)]` over eight `u32` (32 bytes, no padding), field for field the
// kernel's `EwBnArgs`.
unsafe impl DeviceRepr for BnArgs {}

/// The arguments for `n` elements of `c` channels of `inner` elements each, packs of `vec`
/// elements: `None` past 2^32 - 1 elements (the kernel's indices) or for an empty plane.
pub(crate) fn bn_args(n: usize, c: usize, inner: usize, vec: usize) -> Option<BnArgs> {
    let (n, c32, inner32) = (
        u32::try_from(n).ok()?,
        u32::try_from(c).ok()?,
        u32::try_from(inner).ok()?,
    );
    let (inner_magic, inner_shift) = magic_divisor(inner32)?;
    let (c_magic, c_shift) = magic_divisor(c32)?;
    Some(BnArgs {
        n,
        inner: inner32,
        inner_magic,
        inner_shift,
        c: c32,
        c_magic,
        c_shift,
        vec: u32::from(vec > 0 && inner % vec == 0),
    })
}

/// `vec`'s bit for the ReLU after the normalisation.
const RELU: u32 = 2;

/// Batch norm of `x` (contiguous layout `xl`, dims `(b, c, ..)`) by `p` (contiguous layout
/// `pl`, the `(4, c)` stack of mean, var, weight and bias, `x`'s dtype), then `max(y, 0)` with
/// `relu`: the new output, or `None` for a dtype without a kernel or more than 2^32 - 1
/// elements.
pub fn batch_norm(
    dev: &RocmDevice,
    (x, xl): (&S, &Layout),
    (p, pl): (&S, &Layout),
    eps: f64,
    relu: bool,
) -> Result<Option<S>, BackendError> {
    let e = eps as f32;
    Ok(match (x, p) {
        (S::F32(x), S::F32(p)) => bn_t(dev, KERNELS[0], (x, xl), (p, pl), e, relu)?.map(S::F32),
        (S::F16(x), S::F16(p)) => bn_t(dev, KERNELS[1], (x, xl), (p, pl), e, relu)?.map(S::F16),
        (S::BF16(x), S::BF16(p)) => bn_t(dev, KERNELS[2], (x, xl), (p, pl), e, relu)?.map(S::BF16),
        (S::F64(x), S::F64(p)) => bn_t(dev, KERNELS[3], (x, xl), (p, pl), eps, relu)?.map(S::F64),
        _ => None,
    })
}

/// [`batch_norm`] for one dtype: kernel `name`, `eps` as the kernel's compute type.
fn bn_t<T: RocmDType, E: DeviceRepr>(
    dev: &RocmDevice,
    name: &'static str,
    (x, xl): (&DeviceBuffer<T>, &Layout),
    (p, pl): (&DeviceBuffer<T>, &Layout),
    eps: E,
    relu: bool,
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    let dims = xl.dims();
    if dims.len() < 2 {
        return Err(invalid(
            OP,
            format_args!("x of dims {dims:?}: needs (batch, channels, ..)"),
        ));
    }
    let c = dims[1];
    if pl.dims() != [4, c] {
        return Err(invalid(
            OP,
            format_args!(
                "statistics of dims {:?}: needs the (4, {c}) stack of mean, var, weight, bias",
                pl.dims()
            ),
        ));
    }
    if !xl.is_contiguous() || !pl.is_contiguous() {
        return Err(invalid(OP, "non-contiguous operands"));
    }
    let n = xl.shape().elem_count();
    if n == 0 {
        return Ok(Some(dev.alloc::<T>(0)?));
    }
    let inner = dims[2..].iter().product::<usize>();
    let vec = pack_elems::<T, T>();
    let Some(mut args) = bn_args(n, c, inner, vec) else {
        return Ok(None);
    };
    let packs = args.vec == 1;
    if relu {
        args.vec |= RELU;
    }
    let (x, p) = (checked_view(OP, x, xl)?, checked_view(OP, p, pl)?);
    let out = dev.alloc::<T>(n)?;
    let f = dev.function(Module::Elementwise, name)?;
    let cfg = launch_config(n, if packs { vec } else { 1 })?;
    let (px, pp, po) = (DevicePtrArg::of(&x), DevicePtrArg::of(&p), out.as_arg());
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&args).arg(&eps).arg(&px).arg(&pp).arg(&po);
    // SAFETY: bnorm_<T>(EwBnArgs a, C eps, const T* x, const T* p, T* y) with T = the buffers'
    // dtype (the name) and C f32 (f64 for bnorm_f64, `E`). It reads x[i] and writes y[i] for
    // i < n only (whole packs only when every plane is a number of packs, so n is too), and
    // p[k c + ch] for k < 4, ch < c: `x` and `p` are views of their contiguous layouts, which
    // `checked_view` proved lie inside the buffers, p of 4 c elements (its dims, checked);
    // `out` is new, n elements. Every field fits u32 (`bn_args`); all three buffers are
    // ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packs where a plane holds whole packs; magic divisors that divide; limits.
    #[test]
    fn args_follow_the_planes() {
        let a = bn_args(32 * 256 * 196, 256, 196, 8).unwrap();
        assert_eq!((a.n, a.c, a.inner, a.vec), (32 * 256 * 196, 256, 196, 0));
        assert_eq!(bn_args(32 * 64 * 3136, 64, 3136, 8).unwrap().vec, 1);
        assert_eq!(bn_args(7 * 5, 5, 1, 8).unwrap().vec, 0);
        for (d, m, s) in [
            (a.inner, a.inner_magic, a.inner_shift),
            (a.c, a.c_magic, a.c_shift),
        ] {
            for x in [0u32, 1, d - 1, d, 12345, u32::MAX] {
                let hi = ((x as u64 * m as u64) >> 32) as u32;
                assert_eq!(((hi as u64 + x as u64) >> s) as u32, x / d);
            }
        }
        assert_eq!(bn_args(1 << 32, 1, 1, 8), None);
        assert_eq!(bn_args(8, 0, 8, 8), None);
    }

    /// Every embedded elementwise object has the four kernels.
    #[test]
    fn the_kernels_are_built() {
        for (t, have) in crate::launch::elementwise::embedded_kernels() {
            for k in KERNELS {
                assert!(have.contains(k), "{k} missing from elementwise.{t}");
            }
        }
    }

    /// `BnArgs` names its fields in elementwise.hip's order.
    #[test]
    fn the_kernel_argument_matches_elementwise_hip() {
        let fields = crate::launch::arg_layout::args_match_hip_struct(
            "elementwise.hip",
            "EwBnArgs",
            &format!("{:?}", BnArgs::default()),
        );
        assert_eq!(fields.len(), 8);
    }
}
