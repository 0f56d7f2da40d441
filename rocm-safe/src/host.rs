//! [`PinnedHostBuffer<T>`]: page-locked host memory (`hipHostMalloc`), for fast and truly
//! asynchronous transfers.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use crate::buffer::{byte_len, DeviceRepr};
use crate::device::Device;
use crate::error::{check, Result};
use crate::graph::gate;

/// Zero-initialised, page-locked host memory holding `len` values of `T`.
pub struct PinnedHostBuffer<T: DeviceRepr> {
    ptr: *mut c_void,
    len: usize,
    device: Device,
    _marker: PhantomData<T>,
}

// SAFETY: the buffer exclusively owns its host allocation, like a Box<[T]> with T: Send.
unsafe impl<T: DeviceRepr> Send for PinnedHostBuffer<T> {}
// SAFETY: shared access only hands out `&[T]` with T: Sync.
unsafe impl<T: DeviceRepr> Sync for PinnedHostBuffer<T> {}

impl<T: DeviceRepr> PinnedHostBuffer<T> {
    /// Allocates `len` zeroed elements of page-locked memory.
    pub fn new(device: &Device, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        if bytes > 0 {
            device.bind_to_thread()?;
            let hip = device.hip();
            // SAFETY: `ptr` is a valid out-pointer; hipHostMallocDefault is a defined flag.
            let code =
                unsafe { (hip.hipHostMalloc)(&mut ptr, bytes, rocm_sys::hipHostMallocDefault) };
            check(hip, "hipHostMalloc", code)?;
            // SAFETY: `ptr` points to `bytes` writable host bytes just allocated; zeroing makes
            // every element a valid T (DeviceRepr types accept all-zero bits).
            unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, bytes) };
        }
        Ok(Self {
            ptr,
            len,
            device: device.clone(),
            _marker: PhantomData,
        })
    }
}

impl<T: DeviceRepr> Deref for PinnedHostBuffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` holds `len` initialised Ts (zeroed at allocation, hipHostMalloc
        // returns memory aligned to at least a page), owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.cast::<T>(), self.len) }
    }
}

impl<T: DeviceRepr> DerefMut for PinnedHostBuffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as for `deref`, and `&mut self` guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.cast::<T>(), self.len) }
    }
}

impl<T: DeviceRepr> Drop for PinnedHostBuffer<T> {
    fn drop(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        let rt = self.device.runtime().clone();
        let addr = self.ptr as usize;
        // hipHostFree invalidates any graph being recorded in the process: deferred until none
        // is (graph::gate).
        gate::device_wide(move || {
            let hip = rt.hip();
            // SAFETY: `addr` came from hipHostMalloc and is freed exactly once (this closure
            // runs once). hipHostFree waits for pending transfers that use it.
            let code = unsafe { (hip.hipHostFree)(addr as *mut c_void) };
            if let Err(e) = check(hip, "hipHostFree", code) {
                rt.record_err(e);
            }
        });
    }
}
