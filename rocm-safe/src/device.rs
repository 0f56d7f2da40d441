//! [`Device`]: one visible HIP device, its properties, and binding it to the calling thread.
//!
//! # The current device
//!
//! HIP keeps a current device per host thread (`hipSetDevice`). rocm-safe makes a device
//! current before every call that may depend on it, and remembers, per thread, which device it
//! made current last (the HIP runtime's `hipSetDevice` entry point, which names the runtime
//! whose per-thread state it is, and the ordinal), so the launches, copies and stream waits of a
//! decode loop, a few hundred a token, skip the call when the device is already current.
//!
//! Two kinds of binding, and why each is safe:
//! - [`Device::bind_to_thread`] skips `hipSetDevice` when this thread's remembered device is
//!   this one. It serves the calls that name a stream or an event (launches, asynchronous
//!   copies, event record and wait, stream and event creation and destruction).
//! - [`Device::make_current`] (and the crate's allocation, synchronisation, memory-information,
//!   peer-access and module-loading paths) always call `hipSetDevice` and refresh what is
//!   remembered: the calls whose outcome does depend on the current device.
//!
//! A user thread that switches between devices through rocm-safe is always right: every bind
//! compares against what rocm-safe itself set last on that thread. What rocm-safe cannot see is
//! `hipSetDevice` called by other code on the same thread. The libraries rocm-safe drives
//! (rocBLAS, MIOpen, RCCL) are entered with their handle's device just made current, so a
//! device they set themselves is that same device. Code of the application that calls
//! `hipSetDevice` itself, on a thread that goes on to use rocm-safe, must call
//! [`Device::forget_thread_binding`] (or [`Device::make_current`]) afterwards. If it does not,
//! AMD's runtime still runs every stream-carrying call on its stream's device (the remembered
//! binding only spares a call there); a runtime that follows the current device instead (the
//! CUDA driver under the HIP-on-CUDA test double) rejects the mismatched handle with an error.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Arc, OnceLock};

use rocm_sys::props::{GCN_ARCH_NAME_LEN, PROPS_BUFFER_SIZE};
use rocm_sys::{hipDeviceAttribute_t, Hip};

use crate::allocator::{CachingAllocator, DeviceMemory};
use crate::arch::GfxArch;
use crate::error::{check, Result, RocmError};
use crate::runtime::Runtime;

/// What the runtime reports about a device. Numbers come from `hipDeviceGetAttribute`, the
/// architecture name from the device-properties struct (see `rocm_sys::props`).
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The device ordinal, as seen after `HIP_VISIBLE_DEVICES` / `ROCR_VISIBLE_DEVICES`.
    pub ordinal: usize,
    /// Marketing name, e.g. `AMD Radeon RX 7900 XTX`.
    pub name: String,
    /// Architecture with target features, e.g. `gfx1100` or `gfx90a:sramecc+:xnack-`.
    pub arch: GfxArch,
    /// Threads per wave (64 on CDNA/GCN, 32 on RDNA). Queried, never assumed.
    pub warp_size: u32,
    /// Compute units.
    pub compute_units: u32,
    /// Largest thread block.
    pub max_threads_per_block: u32,
    /// Shared memory (LDS) available to one block, in bytes.
    pub max_shared_mem_per_block: usize,
    /// L2 cache size in bytes.
    pub l2_cache_bytes: usize,
    /// Peak clock in kHz.
    pub clock_khz: u32,
    /// PCI bus id.
    pub pci_bus_id: u32,
    /// Whether the GPU shares memory with the host (APUs such as Strix Halo).
    pub integrated: bool,
    /// Total device memory in bytes.
    pub total_mem: usize,
    /// Whether stream-ordered allocation (`hipMallocAsync`) is usable on this device.
    pub memory_pools: bool,
}

pub(crate) struct DeviceInner {
    pub(crate) rt: Arc<Runtime>,
    pub(crate) info: DeviceInfo,
    allocator: OnceLock<Arc<CachingAllocator>>,
}

/// A HIP device. Cheap to clone (it is a shared handle); the device itself is never destroyed.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl Device {
    /// Number of visible devices, or a typed error saying why there is none.
    pub fn count() -> Result<usize> {
        Runtime::get()?.device_count()
    }

    /// Opens device `ordinal` of the process-wide runtime.
    pub fn new(ordinal: usize) -> Result<Device> {
        Self::with_runtime(Runtime::get()?, ordinal)
    }

    /// Opens device `ordinal` of a given runtime.
    pub fn with_runtime(rt: Arc<Runtime>, ordinal: usize) -> Result<Device> {
        let count = rt.device_count()?;
        if ordinal >= count {
            return Err(RocmError::InvalidDevice { ordinal, count });
        }
        let info = query_info(&rt, ordinal)?;
        Ok(Device {
            inner: Arc::new(DeviceInner {
                rt,
                info,
                allocator: OnceLock::new(),
            }),
        })
    }

    /// The device's properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.inner.info.ordinal
    }

    /// The runtime this device belongs to.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.rt
    }

    pub(crate) fn hip(&self) -> &Hip {
        self.inner.rt.hip()
    }

    /// Makes this device current on the calling thread, skipping `hipSetDevice` when rocm-safe
    /// made it current on this thread last (see the module documentation for when that is
    /// safe). Every rocm-safe call that names a stream or an event does this first.
    pub fn bind_to_thread(&self) -> Result<()> {
        bind_cached(self.hip(), self.ordinal())
    }

    /// Makes this device current on the calling thread with `hipSetDevice`, whatever was
    /// current before, and remembers it for [`Device::bind_to_thread`].
    pub fn make_current(&self) -> Result<()> {
        bind(self.hip(), self.ordinal())
    }

    /// Forgets which device rocm-safe made current on the calling thread, so the next
    /// [`Device::bind_to_thread`] calls `hipSetDevice`. For a thread that changed its current
    /// device by other means than rocm-safe (its own `hipSetDevice`).
    pub fn forget_thread_binding() {
        BOUND.with(|b| b.set(None));
    }

    /// Free and total device memory in bytes (`hipMemGetInfo`).
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        mem_info(self.hip(), self.ordinal())
    }

    /// Waits for all work on the device (`hipDeviceSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        synchronize(self.hip(), self.ordinal())
    }

    /// The device's caching allocator (created on first use). It is dropped, and its cached
    /// memory returned to the device, when the last handle to the device and the last buffer
    /// allocated from it are gone.
    pub fn allocator(&self) -> Arc<CachingAllocator> {
        self.inner
            .allocator
            .get_or_init(|| {
                // The allocator holds the runtime, not the device: no reference cycle.
                Arc::new(CachingAllocator::new(DeviceMemory::new(
                    self.inner.rt.clone(),
                    self.ordinal(),
                )))
            })
            .clone()
    }

    /// Whether two handles refer to the same device of the same runtime.
    pub fn same_device(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            || (Arc::ptr_eq(&self.inner.rt, &other.inner.rt) && self.ordinal() == other.ordinal())
    }

    /// Returns the first error recorded by a `Drop` impl (stream, event, buffer, ...).
    pub fn check_err(&self) -> Result<()> {
        self.inner.rt.check_err()
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Device({}: {} {})",
            self.ordinal(),
            self.info().name,
            self.info().arch
        )
    }
}

thread_local! {
    /// The device rocm-safe made current on this thread last: the address of the runtime's
    /// `hipSetDevice` (one per loaded HIP runtime, whose per-thread state the current device
    /// is) and the ordinal. `None` before the first bind, after a failed one, and after
    /// [`Device::forget_thread_binding`].
    static BOUND: Cell<Option<(usize, usize)>> = const { Cell::new(None) };
}

/// What [`BOUND`] holds for `ordinal` of runtime `hip`.
fn binding(hip: &Hip, ordinal: usize) -> (usize, usize) {
    (hip.hipSetDevice as usize, ordinal)
}

/// `hipSetDevice(ordinal)`, always called, remembered for [`bind_cached`]; the ordinal must be
/// below `hipGetDeviceCount`.
pub(crate) fn bind(hip: &Hip, ordinal: usize) -> Result<()> {
    set_and_remember(binding(hip, ordinal), || set_device(hip, ordinal))
}

/// [`bind`], skipped when rocm-safe made `ordinal` of this runtime current on this thread last.
pub(crate) fn bind_cached(hip: &Hip, ordinal: usize) -> Result<()> {
    bind_cached_with(binding(hip, ordinal), || set_device(hip, ordinal))
}

/// Runs `set` (and remembers `key`) unless `key` is this thread's binding already.
fn bind_cached_with(key: (usize, usize), set: impl FnOnce() -> Result<()>) -> Result<()> {
    if BOUND.with(Cell::get) == Some(key) {
        return Ok(());
    }
    set_and_remember(key, set)
}

/// Runs `set` and remembers `key` as this thread's binding when it succeeds; a failed `set`
/// leaves the current device unknown.
fn set_and_remember(key: (usize, usize), set: impl FnOnce() -> Result<()>) -> Result<()> {
    BOUND.with(|b| b.set(None));
    set()?;
    BOUND.with(|b| b.set(Some(key)));
    Ok(())
}

fn set_device(hip: &Hip, ordinal: usize) -> Result<()> {
    // SAFETY: hipSetDevice takes an int by value and validates it (callers pass ordinals that
    // were checked against hipGetDeviceCount).
    let code = unsafe { (hip.hipSetDevice)(ordinal as c_int) };
    check(hip, "hipSetDevice", code)
}

/// `hipMemGetInfo` of device `ordinal`.
pub(crate) fn mem_info(hip: &Hip, ordinal: usize) -> Result<(usize, usize)> {
    bind(hip, ordinal)?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both out-pointers are valid for one usize.
    let code = unsafe { (hip.hipMemGetInfo)(&mut free, &mut total) };
    check(hip, "hipMemGetInfo", code)?;
    Ok((free, total))
}

/// `hipDeviceSynchronize` of device `ordinal`.
pub(crate) fn synchronize(hip: &Hip, ordinal: usize) -> Result<()> {
    bind(hip, ordinal)?;
    // SAFETY: no arguments; the device is current.
    let code = unsafe { (hip.hipDeviceSynchronize)() };
    check(hip, "hipDeviceSynchronize", code)
}

fn attr(hip: &Hip, ordinal: c_int, attr: hipDeviceAttribute_t, what: &'static str) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer; `ordinal` is below hipGetDeviceCount.
    let code = unsafe { (hip.hipDeviceGetAttribute)(&mut v, attr, ordinal) };
    check(hip, what, code)?;
    Ok(v)
}

fn query_info(rt: &Runtime, ordinal: usize) -> Result<DeviceInfo> {
    let hip = rt.hip();
    let o = ordinal as c_int;
    let a = |at, what| attr(hip, o, at, what).map(|v| v.max(0) as u32);
    use hipDeviceAttribute_t as A;
    let warp_size = a(
        A::hipDeviceAttributeWarpSize,
        "hipDeviceGetAttribute(WarpSize)",
    )?;
    let compute_units = a(
        A::hipDeviceAttributeMultiprocessorCount,
        "hipDeviceGetAttribute(MultiprocessorCount)",
    )?;
    let max_threads_per_block = a(
        A::hipDeviceAttributeMaxThreadsPerBlock,
        "hipDeviceGetAttribute(MaxThreadsPerBlock)",
    )?;
    let max_shared_mem_per_block = a(
        A::hipDeviceAttributeMaxSharedMemoryPerBlock,
        "hipDeviceGetAttribute(MaxSharedMemoryPerBlock)",
    )? as usize;
    // The remaining attributes are informational: a runtime that rejects one reports 0.
    let opt = |at| attr(hip, o, at, "hipDeviceGetAttribute").map_or(0, |v| v.max(0) as u32);
    let l2_cache_bytes = opt(A::hipDeviceAttributeL2CacheSize) as usize;
    let clock_khz = opt(A::hipDeviceAttributeClockRate);
    let pci_bus_id = opt(A::hipDeviceAttributePciBusId);
    let integrated = opt(A::hipDeviceAttributeIntegrated) != 0;
    let memory_pools = opt(A::hipDeviceAttributeMemoryPoolsSupported) != 0
        && hip.hipMallocAsync.is_some()
        && hip.hipFreeAsync.is_some();

    let mut total_mem = 0usize;
    // SAFETY: valid out-pointer; ordinal validated.
    let code = unsafe { (hip.hipDeviceTotalMem)(&mut total_mem, o) };
    check(hip, "hipDeviceTotalMem", code)?;

    let mut name_buf = [0 as c_char; 256];
    // SAFETY: the buffer holds 256 chars and its length is passed; HIP NUL-terminates.
    let code = unsafe { (hip.hipDeviceGetName)(name_buf.as_mut_ptr(), name_buf.len() as c_int, o) };
    check(hip, "hipDeviceGetName", code)?;
    let name = c_buf_to_string(&name_buf);

    let arch = arch_name(hip, o)?;
    Ok(DeviceInfo {
        ordinal,
        name,
        arch,
        warp_size,
        compute_units,
        max_threads_per_block,
        max_shared_mem_per_block,
        l2_cache_bytes,
        clock_khz,
        pci_bus_id,
        integrated,
        total_mem,
        memory_pools,
    })
}

fn c_buf_to_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Reads `gcnArchName` through the properties entry point this runtime exports.
fn arch_name(hip: &Hip, ordinal: c_int) -> Result<GfxArch> {
    let Some(entry) = hip.props().arch_name_entry() else {
        return Err(RocmError::Unsupported {
            what: "reading the GPU architecture name",
            detail: format!(
                "{} exports none of hipGetDevicePropertiesR0600 / R0000 / hipGetDeviceProperties; \
                 install ROCm 5.7 or newer",
                hip.path().display()
            ),
        });
    };
    // u64 elements keep the buffer 8-byte aligned like the C struct.
    let mut buf = vec![0u64; PROPS_BUFFER_SIZE / 8];
    // SAFETY: `buf` is zeroed, 8-aligned and PROPS_BUFFER_SIZE bytes, larger than every
    // layout the chosen entry point writes (asserted in rocm_sys::props).
    let code = unsafe { (entry.func)(buf.as_mut_ptr().cast::<c_void>(), ordinal) };
    check(hip, "hipGetDeviceProperties", code)?;
    // SAFETY: reinterpreting initialised u64s as bytes is always valid.
    let bytes: &[u8] =
        unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), PROPS_BUFFER_SIZE) };
    let field = &bytes[entry.arch_name_offset..entry.arch_name_offset + GCN_ARCH_NAME_LEN];
    let raw = CStr::from_bytes_until_nul(field)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(field).into_owned());
    GfxArch::parse(&raw).map_err(|e| RocmError::Unsupported {
        what: "this device's architecture name",
        detail: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Binds `key` through the cache, recording the ordinals actually set.
    fn bind_logged(log: &RefCell<Vec<usize>>, key: (usize, usize)) -> Result<()> {
        bind_cached_with(key, || {
            log.borrow_mut().push(key.1);
            Ok(())
        })
    }

    #[test]
    fn a_bound_device_is_not_set_again_until_another_is() {
        Device::forget_thread_binding();
        let log = RefCell::new(Vec::new());
        for key in [(1, 0), (1, 0), (1, 1), (1, 1), (1, 0), (2, 0), (1, 0)] {
            bind_logged(&log, key).unwrap();
        }
        assert_eq!(
            *log.borrow(),
            [0, 1, 0, 0, 0],
            "set on the first bind, on every switch of device, and of runtime"
        );
    }

    #[test]
    fn forgetting_or_a_failed_set_makes_the_next_bind_set() {
        Device::forget_thread_binding();
        let log = RefCell::new(Vec::new());
        bind_logged(&log, (1, 3)).unwrap();
        Device::forget_thread_binding();
        bind_logged(&log, (1, 3)).unwrap();
        assert_eq!(*log.borrow(), [3, 3]);
        let failed = bind_cached_with((1, 4), || Err(RocmError::InvalidArgument("refused".into())));
        assert!(failed.is_err());
        bind_logged(&log, (1, 3)).unwrap();
        assert_eq!(
            *log.borrow(),
            [3, 3, 3],
            "after a failed set the current device is unknown"
        );
        // A forced set (`bind`) refreshes the cache like any other.
        set_and_remember((1, 5), || Ok(())).unwrap();
        bind_logged(&log, (1, 5)).unwrap();
        assert_eq!(*log.borrow(), [3, 3, 3]);
    }

    #[test]
    fn each_thread_has_its_own_binding() {
        Device::forget_thread_binding();
        let log = RefCell::new(Vec::new());
        bind_logged(&log, (1, 2)).unwrap();
        let other = std::thread::spawn(|| {
            let log = RefCell::new(Vec::new());
            bind_logged(&log, (1, 2)).unwrap();
            log.into_inner()
        })
        .join()
        .unwrap();
        assert_eq!(other, [2], "a new thread sets the device itself");
        bind_logged(&log, (1, 2)).unwrap();
        assert_eq!(*log.borrow(), [2]);
    }
}
