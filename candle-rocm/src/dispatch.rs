//! Dtype dispatch, in the shape of candle-core's `cuda_backend/utils.rs`: an op implements
//! `f<T>` once, generically, and `map` matches on the [`RocmStorageSlice`](S)'s dtype. Ops sit
//! above this level; it knows only the device, the dtype table and errors.

use candle_core::Layout;
use rocm_safe::DeviceBuffer;

use crate::device::RocmDevice;
use crate::dtype::{for_each_slice, RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;

/// An op with one input that produces a buffer of the same dtype.
pub trait Map1 {
    /// The op for element type `T`.
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError>;

    /// Dispatches on the dtype of `s`.
    fn map(&self, s: &S, dev: &RocmDevice, layout: &Layout) -> Result<S, BackendError> {
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
    ) -> Result<S, BackendError>;

    /// Dispatches on the dtype of `s`.
    fn map(&self, s: &S, dev: &RocmDevice, layout: &Layout) -> Result<S, BackendError> {
        for_each_slice!(s, b => self.f(b, dev, layout, S::from_buffer))
    }
}

/// Applies `$body` to two buffers of the same dtype, bound to `$x` and `$y`, or fails with a
/// dtype mismatch for `$op` (one arm per dtype of `dtype::with_dtypes!`).
macro_rules! same_dtype {
    (@arms ($op:expr, ($a:expr, $b:expr), ($x:ident, $y:ident), $body:expr)
        $($v:ident($t:ty, $doc:literal),)*) => {
        match ($a, $b) {
            $(($crate::dtype::RocmStorageSlice::$v($x), $crate::dtype::RocmStorageSlice::$v($y)) => $body,)*
            (a, b) => {
                return Err($crate::error::BackendError::DtypeMismatch {
                    op: $op,
                    lhs: a.dtype(),
                    rhs: b.dtype(),
                }
                .into())
            }
        }
    };
    ($op:expr, ($a:expr, $b:expr), ($x:ident, $y:ident) => $body:expr) => {
        $crate::dtype::with_dtypes!(
            $crate::dispatch::same_dtype! { @arms ($op, ($a, $b), ($x, $y), $body) }
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
    ) -> Result<DeviceBuffer<T>, BackendError>;

    /// Dispatches on the operands' dtype; different dtypes are an error.
    fn map(
        &self,
        (a, la): (&S, &Layout),
        (b, lb): (&S, &Layout),
        dev: &RocmDevice,
    ) -> Result<S, BackendError> {
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
    ) -> Result<S, BackendError>;

    /// Dispatches on the operands' dtype; different dtypes are an error.
    fn map(
        &self,
        (a, la): (&S, &Layout),
        (b, lb): (&S, &Layout),
        dev: &RocmDevice,
    ) -> Result<S, BackendError> {
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
    ) -> Result<(), BackendError>;

    /// Dispatches on the operands' dtype; different dtypes are an error.
    fn map(
        &self,
        (dst, ld): (&mut S, &Layout),
        (src, ls): (&S, &Layout),
        dev: &RocmDevice,
    ) -> Result<(), BackendError> {
        same_dtype!(Self::OP, (dst, src), (x, y) => self.f((x, ld), (y, ls), dev))
    }
}
