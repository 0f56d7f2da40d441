//! [`RocmStorage`]: a tensor's device memory, one typed buffer per Candle dtype.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout};
use half::{bf16, f16};
use rocm_safe::DeviceBuffer;

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::utils::{Map1, Map2};

/// The typed buffer behind a [`RocmStorage`].
pub enum RocmStorageSlice {
    /// `u8`.
    U8(DeviceBuffer<u8>),
    /// `u32`.
    U32(DeviceBuffer<u32>),
    /// `i16`.
    I16(DeviceBuffer<i16>),
    /// `i32`.
    I32(DeviceBuffer<i32>),
    /// `i64`.
    I64(DeviceBuffer<i64>),
    /// `bf16`.
    BF16(DeviceBuffer<bf16>),
    /// `f16`.
    F16(DeviceBuffer<f16>),
    /// `f32`.
    F32(DeviceBuffer<f32>),
    /// `f64`.
    F64(DeviceBuffer<f64>),
}

/// Device memory of a tensor plus the device it lives on.
pub struct RocmStorage {
    /// The typed buffer.
    pub slice: RocmStorageSlice,
    device: RocmDevice,
}

impl std::fmt::Debug for RocmStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RocmStorage({:?} on {:?})", self.dtype(), self.device)
    }
}

/// Applies `$body` to the buffer of every dtype variant, binding it to `$b`.
macro_rules! for_each_slice {
    ($slice:expr, $b:ident => $body:expr) => {
        match $slice {
            RocmStorageSlice::U8($b) => $body,
            RocmStorageSlice::U32($b) => $body,
            RocmStorageSlice::I16($b) => $body,
            RocmStorageSlice::I32($b) => $body,
            RocmStorageSlice::I64($b) => $body,
            RocmStorageSlice::BF16($b) => $body,
            RocmStorageSlice::F16($b) => $body,
            RocmStorageSlice::F32($b) => $body,
            RocmStorageSlice::F64($b) => $body,
        }
    };
}

impl RocmStorageSlice {
    /// The dtype of the buffer.
    pub fn dtype(&self) -> DType {
        match self {
            RocmStorageSlice::U8(_) => DType::U8,
            RocmStorageSlice::U32(_) => DType::U32,
            RocmStorageSlice::I16(_) => DType::I16,
            RocmStorageSlice::I32(_) => DType::I32,
            RocmStorageSlice::I64(_) => DType::I64,
            RocmStorageSlice::BF16(_) => DType::BF16,
            RocmStorageSlice::F16(_) => DType::F16,
            RocmStorageSlice::F32(_) => DType::F32,
            RocmStorageSlice::F64(_) => DType::F64,
        }
    }
}

impl RocmStorage {
    pub(crate) fn new(slice: RocmStorageSlice, device: RocmDevice) -> Self {
        RocmStorage { slice, device }
    }

    /// The storage's dtype.
    pub fn dtype(&self) -> DType {
        self.slice.dtype()
    }

    /// The device.
    pub fn device(&self) -> &RocmDevice {
        &self.device
    }

    /// Copies host storage to the device.
    pub fn from_cpu(device: &RocmDevice, cpu: &CpuStorage) -> candle_core::Result<Self> {
        let d = device;
        let slice = match cpu {
            CpuStorage::U8(v) => RocmStorageSlice::U8(d.clone_htod(v).w()?),
            CpuStorage::U32(v) => RocmStorageSlice::U32(d.clone_htod(v).w()?),
            CpuStorage::I16(v) => RocmStorageSlice::I16(d.clone_htod(v).w()?),
            CpuStorage::I32(v) => RocmStorageSlice::I32(d.clone_htod(v).w()?),
            CpuStorage::I64(v) => RocmStorageSlice::I64(d.clone_htod(v).w()?),
            CpuStorage::BF16(v) => RocmStorageSlice::BF16(d.clone_htod(v).w()?),
            CpuStorage::F16(v) => RocmStorageSlice::F16(d.clone_htod(v).w()?),
            CpuStorage::F32(v) => RocmStorageSlice::F32(d.clone_htod(v).w()?),
            CpuStorage::F64(v) => RocmStorageSlice::F64(d.clone_htod(v).w()?),
            other => {
                return Err(BackendError::UnsupportedDtype {
                    op: "storage_from_cpu_storage",
                    dtype: other.dtype(),
                })
                .w()
            }
        };
        Ok(RocmStorage::new(slice, device.clone()))
    }

    /// Copies the whole buffer back to the host.
    pub fn to_cpu(&self) -> candle_core::Result<CpuStorage> {
        let s = self.device.stream();
        Ok(match &self.slice {
            RocmStorageSlice::U8(b) => CpuStorage::U8(s.clone_dtoh(b).w()?),
            RocmStorageSlice::U32(b) => CpuStorage::U32(s.clone_dtoh(b).w()?),
            RocmStorageSlice::I16(b) => CpuStorage::I16(s.clone_dtoh(b).w()?),
            RocmStorageSlice::I32(b) => CpuStorage::I32(s.clone_dtoh(b).w()?),
            RocmStorageSlice::I64(b) => CpuStorage::I64(s.clone_dtoh(b).w()?),
            RocmStorageSlice::BF16(b) => CpuStorage::BF16(s.clone_dtoh(b).w()?),
            RocmStorageSlice::F16(b) => CpuStorage::F16(s.clone_dtoh(b).w()?),
            RocmStorageSlice::F32(b) => CpuStorage::F32(s.clone_dtoh(b).w()?),
            RocmStorageSlice::F64(b) => CpuStorage::F64(s.clone_dtoh(b).w()?),
        })
    }

    /// Number of elements in the buffer.
    pub fn len(&self) -> usize {
        for_each_slice!(&self.slice, b => b.len())
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `x * mul + add` elementwise over `layout` (candle's `affine`).
    pub fn affine(&self, layout: &Layout, mul: f64, add: f64) -> candle_core::Result<Self> {
        let slice = crate::ops::Affine(mul, add).map(&self.slice, &self.device, layout)?;
        Ok(RocmStorage::new(slice, self.device.clone()))
    }

    /// Copies the elements `src_l` addresses into `dst` starting at `dst_offset` (candle's
    /// `copy_strided_src`, which `Tensor::contiguous` uses).
    pub fn copy_strided_src(
        &self,
        dst: &mut RocmStorage,
        dst_offset: usize,
        src_l: &Layout,
    ) -> candle_core::Result<()> {
        use crate::ops::copy_strided;
        use RocmStorageSlice as S;
        let d = &self.device;
        match (&self.slice, &mut dst.slice) {
            (S::U8(a), S::U8(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::U32(a), S::U32(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::I16(a), S::I16(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::I32(a), S::I32(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::I64(a), S::I64(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::BF16(a), S::BF16(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::F16(a), S::F16(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::F32(a), S::F32(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (S::F64(a), S::F64(b)) => copy_strided(d, a, src_l, b, dst_offset),
            (a, b) => Err(BackendError::DtypeMismatch {
                op: "copy_strided_src",
                lhs: a.dtype(),
                rhs: b.dtype(),
            }),
        }
        .w()
    }

    /// Converts to `dtype` (candle's `to_dtype`), reading `self` through `layout`.
    pub fn to_dtype(&self, layout: &Layout, dtype: DType) -> candle_core::Result<Self> {
        use crate::ops::cast;
        use RocmStorageSlice as S;
        let d = &self.device;
        macro_rules! to {
            ($b:expr) => {
                match dtype {
                    DType::U8 => S::U8(cast(d, $b, layout)?),
                    DType::U32 => S::U32(cast(d, $b, layout)?),
                    DType::I16 => S::I16(cast(d, $b, layout)?),
                    DType::I32 => S::I32(cast(d, $b, layout)?),
                    DType::I64 => S::I64(cast(d, $b, layout)?),
                    DType::BF16 => S::BF16(cast(d, $b, layout)?),
                    DType::F16 => S::F16(cast(d, $b, layout)?),
                    DType::F32 => S::F32(cast(d, $b, layout)?),
                    DType::F64 => S::F64(cast(d, $b, layout)?),
                    other => {
                        return Err(BackendError::UnsupportedDtype {
                            op: "to_dtype",
                            dtype: other,
                        })
                        .w()
                    }
                }
            };
        }
        let slice = match &self.slice {
            S::U8(b) => to!(b),
            S::U32(b) => to!(b),
            S::I16(b) => to!(b),
            S::I32(b) => to!(b),
            S::I64(b) => to!(b),
            S::BF16(b) => to!(b),
            S::F16(b) => to!(b),
            S::F32(b) => to!(b),
            S::F64(b) => to!(b),
        };
        Ok(RocmStorage::new(slice, self.device.clone()))
    }

    /// A binary op (`add`, `mul`, `maximum`, ...) of `self` over `lhs_l` and `rhs` over
    /// `rhs_l`, which have the same shape (candle broadcasts with stride 0 before calling it).
    pub fn binary<B: candle_core::op::BinaryOpT>(
        &self,
        rhs: &RocmStorage,
        lhs_l: &Layout,
        rhs_l: &Layout,
    ) -> candle_core::Result<Self> {
        if !self.device.same_device(&rhs.device) {
            return Err(candle_core::Error::wrap(
                rocm_safe::RocmError::InvalidArgument(format!(
                    "{}: operands live on different devices",
                    B::NAME
                )),
            ));
        }
        let slice = crate::ops::Binary::<B>::new().map(
            (&self.slice, lhs_l),
            (&rhs.slice, rhs_l),
            &self.device,
        )?;
        Ok(RocmStorage::new(slice, self.device.clone()))
    }

    /// A unary op (`exp`, `neg`, `gelu`, ...) over `layout` (candle's `unary_impl`).
    pub fn unary<U: candle_core::op::UnaryOpT>(
        &self,
        layout: &Layout,
    ) -> candle_core::Result<Self> {
        let slice = crate::ops::Unary::<U>::new().map(&self.slice, &self.device, layout)?;
        Ok(RocmStorage::new(slice, self.device.clone()))
    }
}
