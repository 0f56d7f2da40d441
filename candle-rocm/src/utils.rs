//! Dtype dispatch, in the shape of candle-core's `cuda_backend/utils.rs`: an op implements
//! `f<T>` once, generically, and `map` matches on the storage's dtype.

use candle_core::{DType, Layout, WithDType};
use candle_rocm_kernels::Module;
use rocm_safe::DeviceBuffer;

use crate::device::RocmDevice;
use crate::error::BackendError;
use crate::storage::{for_each_slice, RocmDType, RocmStorageSlice as S};

/// An op with one input that produces a buffer of the same dtype.
pub trait Map1 {
    /// The op for element type `T`.
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>>;

    /// Dispatches on the dtype of `s`.
    fn map(&self, s: &S, dev: &RocmDevice, layout: &Layout) -> candle_core::Result<S> {
        Ok(for_each_slice!(s, b => S::from_buffer(self.f(b, dev, layout)?)))
    }
}

/// An op with one input whose output dtype depends on the op (e.g. argmax gives `u32`).
pub trait Map1Any {
    /// The op for element type `T`; `wrap` turns a buffer of `T` into a storage slice.
    fn f<T: RocmDType, W: Fn(DeviceBuffer<T>) -> S>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
        wrap: W,
    ) -> candle_core::Result<S>;

    /// Dispatches on the dtype of `s`.
    fn map(&self, s: &S, dev: &RocmDevice, layout: &Layout) -> candle_core::Result<S> {
        for_each_slice!(s, b => self.f(b, dev, layout, S::from_buffer))
    }
}

/// Applies `$body` to two buffers of the same dtype, bound to `$x` and `$y`, or fails with a
/// dtype mismatch for `$op` (one arm per dtype of `storage::with_dtypes!`).
macro_rules! same_dtype {
    (@arms ($op:expr, ($a:expr, $b:expr), ($x:ident, $y:ident), $body:expr)
        $($v:ident($t:ty, $doc:literal),)*) => {
        match ($a, $b) {
            $(($crate::RocmStorageSlice::$v($x), $crate::RocmStorageSlice::$v($y)) => $body,)*
            (a, b) => {
                return $crate::WrapErr::w(Err($crate::BackendError::DtypeMismatch {
                    op: $op,
                    lhs: a.dtype(),
                    rhs: b.dtype(),
                }))
            }
        }
    };
    ($op:expr, ($a:expr, $b:expr), ($x:ident, $y:ident) => $body:expr) => {
        $crate::storage::with_dtypes!(
            $crate::utils::same_dtype! { @arms ($op, ($a, $b), ($x, $y), $body) }
        )
    };
}
pub(crate) use same_dtype;

/// An op with two inputs of one dtype that produces a buffer of that dtype.
pub trait Map2 {
    /// The op's name, for errors.
    const OP: &'static str;

    /// The op for element type `T`.
    fn f<T: RocmDType>(
        &self,
        lhs: (&DeviceBuffer<T>, &Layout),
        rhs: (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<DeviceBuffer<T>>;

    /// Dispatches on the operands' dtype; different dtypes are an error.
    fn map(
        &self,
        (a, la): (&S, &Layout),
        (b, lb): (&S, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<S> {
        Ok(same_dtype!(Self::OP, (a, b), (x, y) => S::from_buffer(self.f((x, la), (y, lb), dev)?)))
    }
}

/// An op with two inputs of one dtype whose output dtype depends on the op (e.g. `cmp`
/// gives `u8`).
pub trait Map2Any {
    /// The op's name, for errors.
    const OP: &'static str;

    /// The op for element type `T`.
    fn f<T: RocmDType>(
        &self,
        lhs: (&DeviceBuffer<T>, &Layout),
        rhs: (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<S>;

    /// Dispatches on the operands' dtype; different dtypes are an error.
    fn map(
        &self,
        (a, la): (&S, &Layout),
        (b, lb): (&S, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<S> {
        same_dtype!(Self::OP, (a, b), (x, y) => self.f((x, la), (y, lb), dev))
    }
}

/// An op that updates its first operand in place from a second of the same dtype.
pub trait Map2InPlace {
    /// The op's name, for errors.
    const OP: &'static str;

    /// The op for element type `T`.
    fn f<T: RocmDType>(
        &self,
        dst: (&mut DeviceBuffer<T>, &Layout),
        src: (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<()>;

    /// Dispatches on the operands' dtype; different dtypes are an error.
    fn map(
        &self,
        (dst, ld): (&mut S, &Layout),
        (src, ls): (&S, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<()> {
        same_dtype!(Self::OP, (dst, src), (x, y) => self.f((x, ld), (y, ls), dev))
    }
}

/// The product of `factors`, the size `what` of `op` (e.g. "output element count"), or
/// [`BackendError::SizeOverflow`] when it does not fit in `usize`: sizes computed from dims
/// and parameters are never allowed to wrap. A zero factor makes the product 0 whatever the
/// others are (an empty tensor).
pub fn checked_product(
    op: &str,
    what: &'static str,
    factors: &[usize],
) -> Result<usize, BackendError> {
    if factors.contains(&0) {
        return Ok(0);
    }
    factors
        .iter()
        .try_fold(1usize, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| {
            let values: Vec<String> = factors.iter().map(usize::to_string).collect();
            size_overflow(op, format_args!("{what} ({})", values.join(" * ")))
        })
}

/// [`BackendError::SizeOverflow`] for `op`: `what`, with its values, overflows `usize`.
pub(crate) fn size_overflow(op: &str, what: impl std::fmt::Display) -> BackendError {
    BackendError::SizeOverflow {
        op: op.to_string(),
        what: what.to_string(),
    }
}

/// Candle's kernel name for an op root and element type, e.g. `affine_f32`. candle-kernels
/// spells f8e4m3 `f8_e4m3`, except in its unary math kernels (`uexp_fp8_e4m3`, ...).
pub fn kernel_name<T: WithDType>(root: &str) -> String {
    format!("{root}_{}", kernel_suffix(T::DTYPE, root))
}

/// The dtype part of candle's kernel name for `root`.
pub(crate) fn kernel_suffix(dtype: DType, root: &str) -> &'static str {
    match dtype {
        DType::F8E4M3 if root.starts_with('u') && root != "ucopy" => "fp8_e4m3",
        DType::F8E4M3 => "f8_e4m3",
        d => d.as_str(),
    }
}

/// The dtype part of a kernel name for a pure copy of `T`'s bits: f8e4m3 is moved by the
/// `u8` kernels (our index and where modules have no separate FP8 versions).
pub fn bits_suffix<T: WithDType>() -> &'static str {
    match T::DTYPE {
        DType::F8E4M3 => "u8",
        d => d.as_str(),
    }
}

/// The module holding `base`'s kernels for `dtype`: candle-kernels has no i16/i32 versions of
/// the elementwise, fill and reduction kernels, so those come from our `small_int` module.
pub fn module_for(base: Module, dtype: DType) -> Module {
    match (base, dtype) {
        (
            Module::Unary | Module::Binary | Module::Fill | Module::Reduce,
            DType::I16 | DType::I32,
        ) => Module::SmallInt,
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ints_use_our_module() {
        assert_eq!(module_for(Module::Binary, DType::I16), Module::SmallInt);
        assert_eq!(module_for(Module::Reduce, DType::I32), Module::SmallInt);
        assert_eq!(module_for(Module::Binary, DType::I64), Module::Binary);
        assert_eq!(module_for(Module::Conv, DType::I32), Module::Conv);
        assert_eq!(kernel_name::<f32>("affine"), "affine_f32");
        assert_eq!(kernel_name::<float8::F8E4M3>("uexp"), "uexp_fp8_e4m3");
        assert_eq!(kernel_name::<float8::F8E4M3>("ucopy"), "ucopy_f8_e4m3");
        assert_eq!(kernel_name::<float8::F8E4M3>("badd"), "badd_f8_e4m3");
        assert_eq!(bits_suffix::<float8::F8E4M3>(), "u8");
    }

    #[test]
    fn size_overflow_is_a_typed_error() {
        assert_eq!(checked_product("t", "size", &[2, 3, 4]).unwrap(), 24);
        assert_eq!(checked_product("t", "size", &[]).unwrap(), 1);
        // An empty tensor's size is 0 whatever its other dims are.
        assert_eq!(
            checked_product("t", "size", &[usize::MAX, usize::MAX, 0]).unwrap(),
            0
        );
        let e = checked_product(
            "upsample_nearest2d",
            "output element count (b * c * out_h * out_w)",
            &[2, 3, 1 << 32, 1 << 32],
        )
        .unwrap_err();
        match &e {
            BackendError::SizeOverflow { op, what } => {
                assert_eq!(op, "upsample_nearest2d");
                assert_eq!(
                    what,
                    "output element count (b * c * out_h * out_w) (2 * 3 * 4294967296 * 4294967296)"
                );
            }
            other => panic!("not a size overflow: {other:?}"),
        }
        // Through candle's error type the message keeps what overflowed and what to do.
        let msg = crate::WrapErr::w(Err::<(), _>(e)).unwrap_err().to_string();
        assert!(
            msg.contains("upsample_nearest2d: the output element count")
                && msg.contains("overflows usize")
                && msg.contains("To fix"),
            "{msg}"
        );
    }
}
