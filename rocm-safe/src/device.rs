//! [`Device`]: one visible HIP device, its properties, and binding it to the calling thread.

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

    /// Makes this device current on the calling thread (`hipSetDevice`). Every rocm-safe call
    /// that depends on the current device does this first.
    pub fn bind_to_thread(&self) -> Result<()> {
        bind(self.hip(), self.ordinal())
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

/// `hipSetDevice(ordinal)`; the ordinal must be below `hipGetDeviceCount`.
pub(crate) fn bind(hip: &Hip, ordinal: usize) -> Result<()> {
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
