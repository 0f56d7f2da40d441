//! Device memory shared between the GPUs of one host: a fine-grained allocation whose
//! interprocess handle another process maps into its own address space, so a kernel on one GPU
//! reads and writes another GPU's memory directly (candle-rocm's one-shot all-reduce between
//! ranks of a tensor-parallel model).
//!
//! | HIP | rocm-safe |
//! |---|---|
//! | `hipExtMallocWithFlags(hipDeviceMallocFinegrained)`, `hipFree` | [`SharedMemory`] |
//! | `hipIpcGetMemHandle` | [`SharedMemory::handle`] -> [`IpcHandle`] (64 bytes to send) |
//! | `hipIpcOpenMemHandle`, `hipIpcCloseMemHandle` | [`PeerMemory`] |
//!
//! Fine-grained memory is what makes a peer's stores and system-scope atomics visible while a
//! kernel runs (ordinary, coarse-grained device memory is coherent only at kernel boundaries on
//! AMD GPUs). A process cannot open its own handle: ranks that are threads of one process use
//! each other's addresses directly after [`crate::Runtime::peer_access`].

use std::ffi::c_void;

use rocm_sys::hipIpcMemHandle_t;

use crate::device::{bind, Device};
use crate::error::{check, Result, RocmError};
use crate::graph::gate;

/// Bytes of an interprocess memory handle (`HIP_IPC_HANDLE_SIZE`).
pub const IPC_HANDLE_BYTES: usize = 64;

/// An exported allocation, as bytes another process of the same host can open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpcHandle(pub [u8; IPC_HANDLE_BYTES]);

/// A zeroed fine-grained device allocation that other processes may map (see the module
/// documentation). Freed on drop, once no graph is being captured.
pub struct SharedMemory {
    device: Device,
    ptr: *mut c_void,
    bytes: usize,
}

// SAFETY: the struct exclusively owns its device allocation (an address, never dereferenced on
// the host); freeing it is thread-agnostic.
unsafe impl Send for SharedMemory {}
// SAFETY: shared access only reads the address and size.
unsafe impl Sync for SharedMemory {}

impl SharedMemory {
    /// Allocates `bytes` (> 0) of zeroed fine-grained memory on `device`. An
    /// [`RocmError::Unsupported`] when the runtime lacks `hipExtMallocWithFlags`.
    pub fn new(device: &Device, bytes: usize) -> Result<SharedMemory> {
        if bytes == 0 {
            return Err(RocmError::InvalidArgument(
                "shared device memory of 0 bytes".into(),
            ));
        }
        let hip = device.hip();
        let Some(malloc) = hip.hipExtMallocWithFlags else {
            return Err(unsupported("hipExtMallocWithFlags"));
        };
        bind(hip, device.ordinal())?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; hipDeviceMallocFinegrained is a defined flag.
        let code = unsafe { malloc(&mut ptr, bytes, rocm_sys::hipDeviceMallocFinegrained) };
        check(hip, "hipExtMallocWithFlags", code)?;
        let mem = SharedMemory {
            device: device.clone(),
            ptr,
            bytes,
        };
        // SAFETY: `ptr` holds `bytes` bytes of device memory just allocated and not yet shared;
        // the synchronous copy below finishes before anything else can see it.
        let code = unsafe { (hip.hipMemsetD8Async)(ptr, 0, bytes, std::ptr::null_mut()) };
        check(hip, "hipMemsetD8Async", code)?;
        device.synchronize()?;
        Ok(mem)
    }

    /// Sets `words` 32-bit words from byte `offset` (4-byte aligned) to `value`, and waits for
    /// it: for the protocols that need memory set to a marker before any peer maps it.
    pub fn fill_u32(&self, offset: usize, words: usize, value: u32) -> Result<()> {
        let end = words
            .checked_mul(4)
            .and_then(|b| b.checked_add(offset))
            .filter(|&end| end <= self.bytes && offset % 4 == 0);
        if end.is_none() {
            return Err(RocmError::InvalidArgument(format!(
                "filling {words} words at byte {offset} of shared memory of {} bytes: out of \
                 range or not word-aligned",
                self.bytes
            )));
        }
        let hip = self.device.hip();
        bind(hip, self.device.ordinal())?;
        // SAFETY: [offset, offset + 4 * words) lies inside this live allocation and is 4-byte
        // aligned (checked above); the fill runs on the null stream and finishes (synchronize
        // below) before this call returns. The value is passed as the i32 of the same bits.
        let code = unsafe {
            (hip.hipMemsetD32Async)(
                (self.ptr as *mut u8).add(offset).cast(),
                value as i32,
                words,
                std::ptr::null_mut(),
            )
        };
        check(hip, "hipMemsetD32Async", code)?;
        self.device.synchronize()
    }

    /// The allocation's device address (as kernels see it on its own device).
    pub fn device_ptr(&self) -> u64 {
        self.ptr as u64
    }

    /// Its size in bytes.
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Always false: a shared allocation has at least one byte.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The device it lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Exports the allocation for another process (`hipIpcGetMemHandle`).
    pub fn handle(&self) -> Result<IpcHandle> {
        let hip = self.device.hip();
        let Some(get) = hip.hipIpcGetMemHandle else {
            return Err(unsupported("hipIpcGetMemHandle"));
        };
        bind(hip, self.device.ordinal())?;
        let mut raw = hipIpcMemHandle_t::default();
        // SAFETY: `raw` is a valid out-pointer; `ptr` is the base of a live allocation.
        let code = unsafe { get(&mut raw, self.ptr) };
        check(hip, "hipIpcGetMemHandle", code)?;
        Ok(IpcHandle(raw.reserved.map(|c| c as u8)))
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        let rt = self.device.runtime().clone();
        let (addr, ordinal) = (self.ptr as usize, self.device.ordinal());
        // hipFree synchronises the device, which would invalidate a capture in progress.
        gate::device_wide(move || {
            let hip = rt.hip();
            let freed = bind(hip, ordinal).and_then(|()| {
                // SAFETY: `addr` came from hipExtMallocWithFlags and is freed exactly once
                // (this closure runs once); hipFree waits for work that still uses it.
                let code = unsafe { (hip.hipFree)(addr as *mut c_void) };
                check(hip, "hipFree", code)
            });
            if let Err(e) = freed {
                rt.record_err(e);
            }
        });
    }
}

/// Another process's [`SharedMemory`], mapped into this one on `device`
/// (`hipIpcOpenMemHandle`); unmapped on drop. Its owner must keep the allocation alive for as
/// long as any kernel here may touch it.
pub struct PeerMemory {
    device: Device,
    ptr: *mut c_void,
}

// SAFETY: the struct exclusively owns its mapping (an address, never dereferenced on the host).
unsafe impl Send for PeerMemory {}
// SAFETY: shared access only reads the address.
unsafe impl Sync for PeerMemory {}

impl PeerMemory {
    /// Maps `handle` (from a process of the same host) for kernels on `device`. Fails for a
    /// handle of this process (use the address directly) and where the devices cannot reach
    /// each other.
    pub fn open(device: &Device, handle: &IpcHandle) -> Result<PeerMemory> {
        let hip = device.hip();
        let Some(open) = hip.hipIpcOpenMemHandle else {
            return Err(unsupported("hipIpcOpenMemHandle"));
        };
        if hip.hipIpcCloseMemHandle.is_none() {
            return Err(unsupported("hipIpcCloseMemHandle"));
        }
        bind(hip, device.ordinal())?;
        let mut raw = hipIpcMemHandle_t::default();
        for (dst, src) in raw.reserved.iter_mut().zip(handle.0) {
            *dst = src as _;
        }
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer; the handle is 64 bytes by value; the only flag
        // HIP defines is hipIpcMemLazyEnablePeerAccess.
        let code = unsafe { open(&mut ptr, raw, rocm_sys::hipIpcMemLazyEnablePeerAccess) };
        check(hip, "hipIpcOpenMemHandle", code)?;
        Ok(PeerMemory {
            device: device.clone(),
            ptr,
        })
    }

    /// The mapped address, for kernels on this process's device.
    pub fn device_ptr(&self) -> u64 {
        self.ptr as u64
    }
}

impl Drop for PeerMemory {
    fn drop(&mut self) {
        let rt = self.device.runtime().clone();
        let (addr, ordinal) = (self.ptr as usize, self.device.ordinal());
        gate::device_wide(move || {
            let hip = rt.hip();
            let Some(close) = hip.hipIpcCloseMemHandle else {
                return;
            };
            let closed = bind(hip, ordinal).and_then(|()| {
                // SAFETY: `addr` came from hipIpcOpenMemHandle and is closed exactly once.
                let code = unsafe { close(addr as *mut c_void) };
                check(hip, "hipIpcCloseMemHandle", code)
            });
            if let Err(e) = closed {
                rt.record_err(e);
            }
        });
    }
}

fn unsupported(entry: &str) -> RocmError {
    RocmError::Unsupported {
        what: "memory shared between processes",
        detail: format!(
            "the HIP runtime does not export {entry}; collectives keep RCCL (install ROCm 5.2 \
             or newer)"
        ),
    }
}
