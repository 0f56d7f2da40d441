//! Dtype dispatch, in the shape of candle-core's `cuda_backend/utils.rs`: an op implements
//! `f<T>` once, generically, and `map` matches on the storage's dtype.

use candle_core::{DType, Layout, WithDType};
use candle_rocm_kernels::Module;
use rocm_safe::DeviceBuffer;

use crate::device::RocmDevice;
use crate::storage::{RocmDType, RocmStorageSlice as S};

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
        Ok(match s {
            S::U8(b) => S::U8(self.f(b, dev, layout)?),
            S::U32(b) => S::U32(self.f(b, dev, layout)?),
            S::I16(b) => S::I16(self.f(b, dev, layout)?),
            S::I32(b) => S::I32(self.f(b, dev, layout)?),
            S::I64(b) => S::I64(self.f(b, dev, layout)?),
            S::BF16(b) => S::BF16(self.f(b, dev, layout)?),
            S::F16(b) => S::F16(self.f(b, dev, layout)?),
            S::F32(b) => S::F32(self.f(b, dev, layout)?),
            S::F64(b) => S::F64(self.f(b, dev, layout)?),
            S::F8E4M3(b) => S::F8E4M3(self.f(b, dev, layout)?),
        })
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
        match s {
            S::U8(b) => self.f(b, dev, layout, S::U8),
            S::U32(b) => self.f(b, dev, layout, S::U32),
            S::I16(b) => self.f(b, dev, layout, S::I16),
            S::I32(b) => self.f(b, dev, layout, S::I32),
            S::I64(b) => self.f(b, dev, layout, S::I64),
            S::BF16(b) => self.f(b, dev, layout, S::BF16),
            S::F16(b) => self.f(b, dev, layout, S::F16),
            S::F32(b) => self.f(b, dev, layout, S::F32),
            S::F64(b) => self.f(b, dev, layout, S::F64),
            S::F8E4M3(b) => self.f(b, dev, layout, S::F8E4M3),
        }
    }
}

/// Applies `$body` to two buffers of the same dtype, or fails with a dtype mismatch for `$op`.
macro_rules! same_dtype {
    ($op:expr, ($a:expr, $b:expr), ($x:ident, $y:ident) => $body:expr) => {
        match ($a, $b) {
            ($crate::RocmStorageSlice::U8($x), $crate::RocmStorageSlice::U8($y)) => $body,
            ($crate::RocmStorageSlice::U32($x), $crate::RocmStorageSlice::U32($y)) => $body,
            ($crate::RocmStorageSlice::I16($x), $crate::RocmStorageSlice::I16($y)) => $body,
            ($crate::RocmStorageSlice::I32($x), $crate::RocmStorageSlice::I32($y)) => $body,
            ($crate::RocmStorageSlice::I64($x), $crate::RocmStorageSlice::I64($y)) => $body,
            ($crate::RocmStorageSlice::BF16($x), $crate::RocmStorageSlice::BF16($y)) => $body,
            ($crate::RocmStorageSlice::F16($x), $crate::RocmStorageSlice::F16($y)) => $body,
            ($crate::RocmStorageSlice::F32($x), $crate::RocmStorageSlice::F32($y)) => $body,
            ($crate::RocmStorageSlice::F64($x), $crate::RocmStorageSlice::F64($y)) => $body,
            ($crate::RocmStorageSlice::F8E4M3($x), $crate::RocmStorageSlice::F8E4M3($y)) => $body,
            (a, b) => {
                return $crate::WrapErr::w(Err($crate::BackendError::DtypeMismatch {
                    op: $op,
                    lhs: a.dtype(),
                    rhs: b.dtype(),
                }))
            }
        }
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
}
