//! `impl BackendDevice for RocmDevice`: candle-core's device interface, over the device (a
//! leaf) and [`RocmStorage`] (the level below this one).

use candle_core::backend::BackendDevice;
use candle_core::{CpuStorage, DType, DeviceLocation, Shape, WithDType};

use crate::device::RocmDevice;
#[cfg(feature = "candle")]
use crate::device::BACKEND_NAME;
use crate::error::WrapErr;
use crate::ops::rand::rand;
use crate::storage::RocmStorage;

impl BackendDevice for RocmDevice {
    type Storage = RocmStorage;

    fn new(ordinal: usize) -> candle_core::Result<Self> {
        RocmDevice::new(ordinal).w()
    }

    /// candle-core 0.11's `DeviceLocation` has no ROCm variant; until the backend-slot patch
    /// (`cargo xtask candle`) adds one, a ROCm device reports itself as a GPU by ordinal
    /// through the `Cuda` variant. Use [`RocmDevice::same_device`], not the location, to
    /// compare devices.
    #[cfg(not(feature = "candle"))]
    fn location(&self) -> DeviceLocation {
        DeviceLocation::Cuda {
            gpu_id: self.ordinal(),
        }
    }

    /// `rocm:N`, in candle-core's out-of-tree backend slot.
    #[cfg(feature = "candle")]
    fn location(&self) -> DeviceLocation {
        DeviceLocation::Ext {
            backend: BACKEND_NAME,
            ordinal: self.ordinal(),
        }
    }

    fn same_device(&self, other: &Self) -> bool {
        RocmDevice::same_device(self, other)
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> candle_core::Result<RocmStorage> {
        RocmStorage::zeros(self, shape, dtype)
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> candle_core::Result<RocmStorage> {
        RocmStorage::uninit(self, shape, dtype)
    }

    fn storage_from_slice<T: WithDType>(&self, data: &[T]) -> candle_core::Result<RocmStorage> {
        RocmStorage::from_cpu(self, &T::to_cpu_storage(data))
    }

    fn storage_from_cpu_storage(&self, cpu: &CpuStorage) -> candle_core::Result<RocmStorage> {
        RocmStorage::from_cpu(self, cpu)
    }

    fn storage_from_cpu_storage_owned(&self, cpu: CpuStorage) -> candle_core::Result<RocmStorage> {
        RocmStorage::from_cpu(self, &cpu)
    }

    fn rand_uniform(
        &self,
        shape: &Shape,
        dtype: DType,
        lo: f64,
        up: f64,
    ) -> candle_core::Result<RocmStorage> {
        let slice = rand(self, shape.elem_count(), dtype, (lo, up), false).w()?;
        Ok(RocmStorage::new(slice, self.clone()))
    }

    fn rand_normal(
        &self,
        shape: &Shape,
        dtype: DType,
        mean: f64,
        std: f64,
    ) -> candle_core::Result<RocmStorage> {
        let slice = rand(self, shape.elem_count(), dtype, (mean, std), true).w()?;
        Ok(RocmStorage::new(slice, self.clone()))
    }

    fn set_seed(&self, seed: u64) -> candle_core::Result<()> {
        RocmDevice::set_seed(self, seed);
        Ok(())
    }

    fn get_current_seed(&self) -> candle_core::Result<u64> {
        Ok(self.current_seed())
    }

    fn synchronize(&self) -> candle_core::Result<()> {
        self.stream().synchronize().w()
    }
}
