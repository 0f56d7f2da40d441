//! [`RocmDevice`]: one GPU as the backend sees it: the rocm-safe device, the stream every op is
//! queued on, the kernel registry, and the random-number state.

use std::sync::Arc;

use candle_core::backend::BackendDevice;
use candle_core::{CpuStorage, DType, DeviceLocation, Layout, Shape, WithDType};
use candle_rocm_kernels::Module;
use parking_lot::Mutex;
use rocm_safe::{
    BlasHandle, DeviceBuffer, DevicePtrArg, DeviceRepr, Function, LaunchConfig, MiopenHandle,
    Stream,
};

use crate::error::{BackendError, WrapErr};
use crate::registry::KernelRegistry;
use crate::storage::{match_dtype, RocmStorage, RocmStorageSlice};

/// Seed and running offset of the device's counter-based generator (`kernels/hip/rand.hip`):
/// element i of the k-th draw after `set_seed(s)` depends only on (s, offset, i).
#[derive(Clone, Copy, Debug)]
struct RngState {
    seed: u64,
    offset: u64,
}

struct Inner {
    device: rocm_safe::Device,
    stream: Arc<Stream>,
    kernels: Arc<KernelRegistry>,
    rng: Mutex<RngState>,
    /// Created on the first matmul, so a missing rocBLAS only affects matmul.
    blas: Mutex<Option<BlasHandle>>,
    /// Tried on the first convolution that asks for MIOpen: `Some(None)` when it is absent,
    /// disabled or failed to start (logged once).
    miopen: Mutex<Option<Option<MiopenHandle>>>,
}

/// A ROCm device for Candle. Cheap to clone (shared).
#[derive(Clone)]
pub struct RocmDevice {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RocmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RocmDevice({:?})", self.inner.device)
    }
}

/// Threads per block for elementwise kernels (candle's kernels loop over the grid).
const BLOCK: u32 = 1024;

impl RocmDevice {
    /// Opens device `ordinal`: loads ROCm if needed, creates the device's stream and registry,
    /// and loads one kernel module, so a GPU without code objects for its architecture is an
    /// error here rather than at the first op.
    pub fn new(ordinal: usize) -> Result<RocmDevice, BackendError> {
        let device = rocm_safe::Device::new(ordinal)?;
        let stream = Stream::new(&device)?;
        let kernels = KernelRegistry::new(device.clone());
        kernels.module(Module::Fill)?;
        Ok(RocmDevice {
            inner: Arc::new(Inner {
                device,
                stream,
                kernels,
                rng: Mutex::new(RngState {
                    seed: 299_792_458,
                    offset: 0,
                }),
                blas: Mutex::new(None),
                miopen: Mutex::new(None),
            }),
        })
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.device.ordinal()
    }

    /// The underlying rocm-safe device.
    pub fn device(&self) -> &rocm_safe::Device {
        &self.inner.device
    }

    /// The stream all of this device's work is queued on.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.inner.stream
    }

    /// Whether two handles are the same device.
    pub fn same_device(&self, other: &RocmDevice) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Looks up a kernel (modules load once per device).
    pub(crate) fn function(&self, module: Module, name: &str) -> Result<Function, BackendError> {
        Ok(self.inner.kernels.function(module, name)?)
    }

    /// Looks up a kernel by a name known at compile time (no allocation once cached).
    pub(crate) fn function_static(
        &self,
        module: Module,
        name: &'static str,
    ) -> Result<Function, BackendError> {
        Ok(self.inner.kernels.function_static(module, name)?)
    }

    /// Uninitialised device memory from the caching allocator.
    pub(crate) fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>, BackendError> {
        Ok(self.stream().alloc::<T>(len)?)
    }

    /// `len` zeroed elements.
    pub(crate) fn zeros<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>, BackendError> {
        Ok(self.stream().alloc_zeros::<T>(len)?)
    }

    /// Runs `f` with the device's rocBLAS handle, creating it on first use.
    pub(crate) fn blas<R>(
        &self,
        f: impl FnOnce(&mut BlasHandle) -> rocm_safe::Result<R>,
    ) -> Result<R, BackendError> {
        let mut guard = self.inner.blas.lock();
        let handle = match guard.as_mut() {
            Some(h) => h,
            None => guard.insert(BlasHandle::new(self.stream())?),
        };
        Ok(f(handle)?)
    }

    /// Runs `f` with the device's MIOpen handle, created on first use; `Ok(None)` when MIOpen
    /// is absent, disabled (`ROCM_SYS_MIOPEN_LIB=none`) or failed to start.
    pub(crate) fn miopen<R>(
        &self,
        f: impl FnOnce(&mut MiopenHandle) -> rocm_safe::Result<R>,
    ) -> Result<Option<R>, BackendError> {
        let mut guard = self.inner.miopen.lock();
        let slot = guard.get_or_insert_with(|| match MiopenHandle::new(self.stream()) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!("MIOpen could not start on device {}: {e}", self.ordinal());
                None
            }
        });
        match slot.as_mut() {
            Some(h) => Ok(Some(f(h)?)),
            None => Ok(None),
        }
    }

    /// An uninitialised storage of `shape` and `dtype` (every element must be written before
    /// it is read; reading one gives unspecified values, never undefined behaviour, since every
    /// element type accepts any bit pattern).
    pub fn alloc_uninit_storage(
        &self,
        shape: &Shape,
        dtype: DType,
    ) -> candle_core::Result<RocmStorage> {
        self.new_storage(shape, dtype, "alloc")
    }

    /// A zeroed storage of `shape` and `dtype`.
    pub fn zeros_storage(&self, shape: &Shape, dtype: DType) -> candle_core::Result<RocmStorage> {
        let mut s = self.new_storage(shape, dtype, "zeros")?;
        s.slice.fill_zeros(self.stream()).w()?;
        Ok(s)
    }

    /// A storage of `shape` and `dtype` from the caching allocator; `op` names the caller in
    /// the error for a dtype without storage (Candle's dummy MX types).
    fn new_storage(
        &self,
        shape: &Shape,
        dtype: DType,
        op: &'static str,
    ) -> candle_core::Result<RocmStorage> {
        let n = shape.elem_count();
        let slice = match_dtype!(dtype, T => {
            RocmStorageSlice::from_buffer(self.alloc::<T>(n).w()?)
        }, dtype => return Err(BackendError::UnsupportedDtype { op, dtype }).w());
        Ok(RocmStorage::new(slice, self.clone()))
    }

    /// Copies host data into a new buffer.
    pub(crate) fn clone_htod<T: DeviceRepr>(
        &self,
        data: &[T],
    ) -> Result<DeviceBuffer<T>, BackendError> {
        Ok(self.stream().clone_htod(data)?)
    }

    /// Uploads a kernel's shape/stride argument without waiting for the stream (the stream
    /// keeps the host copy alive until the copy has run).
    pub(crate) fn upload_info(
        &self,
        info: Vec<usize>,
    ) -> Result<DeviceBuffer<usize>, BackendError> {
        Ok(self.stream().upload(info)?)
    }

    /// Candle's `info` kernel argument for a layout: `None` (a null pointer) when contiguous,
    /// else the dims followed by the strides, uploaded.
    pub(crate) fn layout_info(
        &self,
        layouts: &[&Layout],
    ) -> Result<Option<DeviceBuffer<usize>>, BackendError> {
        if layouts.iter().all(|l| l.is_contiguous()) {
            return Ok(None);
        }
        let mut info = layouts[0].dims().to_vec();
        for l in layouts {
            info.extend_from_slice(l.stride());
        }
        Ok(Some(self.upload_info(info)?))
    }

    /// The launch shape for `n` threads, one per element. candle-kernels index elements with
    /// 32-bit integers, so more than `u32::MAX` elements is an error rather than a wrong
    /// result.
    pub(crate) fn cfg(n: usize) -> Result<LaunchConfig, BackendError> {
        let n = u32::try_from(n).map_err(|_| rocm_safe::RocmError::Unsupported {
            what: "tensors of more than 2^32 - 1 elements",
            detail: format!(
                "{n} elements; candle's kernels use 32-bit element indices. To fix: split \
                     the tensor (e.g. with chunk) and process the parts"
            ),
        })?;
        Ok(LaunchConfig::for_num_elems(n, BLOCK))
    }

    /// Sets the generator's seed and restarts its sequence.
    pub fn set_seed(&self, seed: u64) {
        *self.inner.rng.lock() = RngState { seed, offset: 0 };
    }

    /// The current seed.
    pub fn current_seed(&self) -> u64 {
        self.inner.rng.lock().seed
    }

    /// Takes the next (seed, offset) pair and advances the offset past `n` elements.
    fn next_draw(&self, n: usize) -> (u64, u64) {
        let mut st = self.inner.rng.lock();
        let draw = (st.seed, st.offset);
        st.offset = st.offset.wrapping_add(n as u64);
        draw
    }

    /// `n` values uniform in [lo, hi) (`normal` = false) or normal(lo = mean, hi = std).
    pub fn rand(
        &self,
        n: usize,
        dtype: DType,
        (a, b): (f64, f64),
        normal: bool,
    ) -> candle_core::Result<RocmStorage> {
        let kind = if normal { "normal" } else { "uniform" };
        let (seed, offset) = self.next_draw(n);
        let name = format!("rand_{kind}_{}", dtype.as_str());
        fn go<T: DeviceRepr, P: DeviceRepr>(
            dev: &RocmDevice,
            name: &str,
            n: usize,
            per_thread: usize,
            (seed, offset): (u64, u64),
            (a, b): (P, P),
        ) -> Result<DeviceBuffer<T>, BackendError> {
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
        let draw = (seed, offset);
        let slice = match dtype {
            DType::F32 => {
                RocmStorageSlice::F32(go(self, &name, n, 4, draw, (a as f32, b as f32)).w()?)
            }
            DType::F16 => {
                RocmStorageSlice::F16(go(self, &name, n, 4, draw, (a as f32, b as f32)).w()?)
            }
            DType::BF16 => {
                RocmStorageSlice::BF16(go(self, &name, n, 4, draw, (a as f32, b as f32)).w()?)
            }
            DType::F64 => RocmStorageSlice::F64(go(self, &name, n, 2, draw, (a, b)).w()?),
            dtype => {
                return Err(BackendError::UnsupportedDtype {
                    op: if normal {
                        "rand_normal"
                    } else {
                        "rand_uniform"
                    },
                    dtype,
                })
                .w()
            }
        };
        Ok(RocmStorage::new(slice, self.clone()))
    }

    /// Null or a buffer's address, as a kernel argument.
    pub(crate) fn ptr_arg<T: DeviceRepr>(buf: Option<&DeviceBuffer<T>>) -> DevicePtrArg {
        buf.map_or_else(DevicePtrArg::null, DeviceBuffer::as_arg)
    }
}

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
            backend: crate::slot::BACKEND_NAME,
            ordinal: self.ordinal(),
        }
    }

    fn same_device(&self, other: &Self) -> bool {
        RocmDevice::same_device(self, other)
    }

    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> candle_core::Result<RocmStorage> {
        self.zeros_storage(shape, dtype)
    }

    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> candle_core::Result<RocmStorage> {
        self.alloc_uninit_storage(shape, dtype)
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
        self.rand(shape.elem_count(), dtype, (lo, up), false)
    }

    fn rand_normal(
        &self,
        shape: &Shape,
        dtype: DType,
        mean: f64,
        std: f64,
    ) -> candle_core::Result<RocmStorage> {
        self.rand(shape.elem_count(), dtype, (mean, std), true)
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
