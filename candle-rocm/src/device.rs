//! [`RocmDevice`]: one GPU as the backend sees it: the rocm-safe device, the stream every op is
//! queued on, the kernel registry, the library handles and the random-number state. A leaf
//! above errors and the registry: it knows nothing of storage or ops (`BackendDevice` is
//! implemented in `backend_device.rs`).

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::Layout;
use candle_rocm_kernels::Module;
use parking_lot::Mutex;
use rocm_safe::graph::{GraphMode, GraphModeStats};
use rocm_safe::{
    BlasHandle, DeviceBuffer, DevicePtrArg, DeviceRepr, Function, LaunchConfig, MiopenHandle,
    PlanPolicy, Search, Stream,
};

use crate::error::BackendError;
use crate::registry::KernelRegistry;

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

/// The backend's name in candle-core's `DeviceLocation::Ext`, shown as `rocm:N`.
pub const BACKEND_NAME: &str = "rocm";

/// Operations a device in graph mode launches plainly after each read-back before it records
/// again: code that reads a result every few ops (a test, an op-by-op benchmark) pays for no
/// one-kernel graphs, while a decode step of hundreds of ops loses only these few.
const GRAPH_PLAIN_HEAD: usize = 4;

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
        if crate::settings::graphs() {
            let mode = GraphMode {
                max_nodes: crate::settings::graph_nodes(),
                record_blas: crate::settings::graph_blas(),
                record_rccl: crate::settings::graph_rccl(),
                plain_head: GRAPH_PLAIN_HEAD,
                first_nodes: crate::settings::graph_first_nodes(),
                ..GraphMode::default()
            };
            match stream.set_graph_mode(Some(mode)) {
                Ok(()) => tracing::info!(
                    "candle-rocm: device {ordinal} records its work into HIP graphs ({mode:?})"
                ),
                Err(e) => tracing::warn!(
                    "candle-rocm: device {ordinal} runs plain launches, graph mode could not \
                     start: {e}"
                ),
            }
        }
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

    /// Turns graph mode on (`Some`) or off (`None`) for this device's stream
    /// (`rocm_safe::graph`'s batching; [`crate::settings::GRAPHS_VAR`] turns it on for every
    /// device). Turning it off launches what was recorded. Fails when the runtime has no
    /// graphs: the device then keeps running plain launches.
    pub fn set_graph_mode(&self, mode: Option<GraphMode>) -> Result<(), BackendError> {
        Ok(self.stream().set_graph_mode(mode)?)
    }

    /// What graph mode did so far (`None` when it is off).
    pub fn graph_stats(&self) -> Option<GraphModeStats> {
        self.stream().graph_stats()
    }

    /// Whether two handles are the same device.
    pub fn same_device(&self, other: &RocmDevice) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Looks up a kernel (modules load once per device); after its first lookup it is
    /// borrowed from the registry, with no lock and no allocation.
    pub(crate) fn function(
        &self,
        module: Module,
        name: &str,
    ) -> Result<Cow<'_, Function>, BackendError> {
        Ok(self.inner.kernels.function(module, name)?)
    }

    /// Looks up a kernel that only some targets define; `None` when this device's code object
    /// lacks it (see [`crate::registry::KernelRegistry::optional_static`]).
    pub(crate) fn function_optional(
        &self,
        module: Module,
        name: &'static str,
    ) -> Result<Option<Cow<'_, Function>>, BackendError> {
        Ok(self.inner.kernels.optional_static(module, name)?)
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

    /// Runs `f` with the device's MIOpen handle, created on first use with [`miopen_policy`]; `Ok(None)` when MIOpen
    /// is absent, disabled (`ROCM_SYS_MIOPEN_LIB=none`) or failed to start.
    pub(crate) fn miopen<R>(
        &self,
        f: impl FnOnce(&mut MiopenHandle) -> rocm_safe::Result<R>,
    ) -> Result<Option<R>, BackendError> {
        let mut guard = self.inner.miopen.lock();
        let slot = guard.get_or_insert_with(|| match MiopenHandle::new(self.stream()) {
            Ok(mut h) => {
                if let Some(h) = h.as_mut() {
                    h.set_policy(miopen_policy());
                }
                h
            }
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
    pub(crate) fn next_draw(&self, n: usize) -> (u64, u64) {
        let mut st = self.inner.rng.lock();
        let draw = (st.seed, st.offset);
        st.offset = st.offset.wrapping_add(n as u64);
        draw
    }

    /// Null or a buffer's address, as a kernel argument.
    pub(crate) fn ptr_arg<T: DeviceRepr>(buf: Option<&DeviceBuffer<T>>) -> DevicePtrArg {
        buf.map_or_else(DevicePtrArg::null, DeviceBuffer::as_arg)
    }
}

/// How the devices' MIOpen handles plan convolutions: immediate mode, or find when
/// [`crate::settings::MIOPEN_FIND_VAR`] asks for it; workspace within rocm-safe's bound.
fn miopen_policy() -> PlanPolicy {
    PlanPolicy {
        search: if crate::settings::miopen_find() {
            Search::Find
        } else {
            Search::Immediate
        },
        ..PlanPolicy::default()
    }
}
