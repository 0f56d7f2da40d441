//! Dtype dispatch, in the shape of candle-core's `cuda_backend/utils.rs`: an op implements
//! `f<T>` once, generically, and `map` matches on the storage's dtype.

use candle_core::{Layout, WithDType};
use rocm_safe::{DeviceBuffer, DeviceRepr};

use crate::device::RocmDevice;
use crate::error::BackendError;
use crate::storage::RocmStorageSlice as S;

/// An op with one input that produces a buffer of the same dtype.
pub trait Map1 {
    /// The op for element type `T`.
    fn f<T: DeviceRepr + WithDType>(
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
        })
    }
}

/// An op with two inputs of one dtype that produces a buffer of that dtype.
pub trait Map2 {
    /// The op for element type `T`.
    fn f<T: DeviceRepr + WithDType>(
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
        Ok(match (a, b) {
            (S::U8(a), S::U8(b)) => S::U8(self.f((a, la), (b, lb), dev)?),
            (S::U32(a), S::U32(b)) => S::U32(self.f((a, la), (b, lb), dev)?),
            (S::I16(a), S::I16(b)) => S::I16(self.f((a, la), (b, lb), dev)?),
            (S::I32(a), S::I32(b)) => S::I32(self.f((a, la), (b, lb), dev)?),
            (S::I64(a), S::I64(b)) => S::I64(self.f((a, la), (b, lb), dev)?),
            (S::BF16(a), S::BF16(b)) => S::BF16(self.f((a, la), (b, lb), dev)?),
            (S::F16(a), S::F16(b)) => S::F16(self.f((a, la), (b, lb), dev)?),
            (S::F32(a), S::F32(b)) => S::F32(self.f((a, la), (b, lb), dev)?),
            (S::F64(a), S::F64(b)) => S::F64(self.f((a, la), (b, lb), dev)?),
            _ => {
                return Err(candle_core::Error::wrap(BackendError::DtypeMismatch {
                    op: "binary",
                    lhs: a.dtype(),
                    rhs: b.dtype(),
                }))
            }
        })
    }
}

/// Candle's kernel name for an op root and element type, e.g. `affine_f32`.
pub fn kernel_name<T: WithDType>(root: &str) -> String {
    format!("{root}_{}", T::DTYPE.as_str())
}
