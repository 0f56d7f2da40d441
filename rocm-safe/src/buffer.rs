//! [`DeviceBuffer<T>`]: typed, stream-ordered device memory, and borrowed views of it.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use crate::allocator::{Block, CachingAllocator};
use crate::device::bind;
use crate::error::{check, Result, RocmError};
use crate::graph::gate;
use crate::stream::Stream;

/// Plain data that may live in device memory and be copied bytewise to and from the host.
///
/// # Safety
/// Implementors must be `Copy`, contain no pointers or references, have no padding, and accept
/// every bit pattern as a valid value (device memory may hold anything a kernel wrote).
pub unsafe trait DeviceRepr: Copy + Send + Sync + 'static {}

macro_rules! device_repr {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive number type: no padding, no pointers, every bit pattern valid.
        unsafe impl DeviceRepr for $t {}
    )* };
}
device_repr!(
    u8,
    i8,
    u16,
    i16,
    u32,
    i32,
    u64,
    i64,
    usize,
    isize,
    f32,
    f64,
    half::f16,
    half::bf16
);

// SAFETY: `F8E4M3` is `#[repr(transparent)]` over a `u8` and every bit pattern is a value (NaN
// included): no padding, no pointers.
unsafe impl DeviceRepr for float8::F8E4M3 {}

/// How a buffer's memory is returned.
enum Origin {
    /// `hipMalloc`: freed after synchronising the stream.
    Malloc,
    /// `hipMallocAsync`: freed with `hipFreeAsync` on the owning stream.
    MallocAsync,
    /// From a [`CachingAllocator`]: returned to its cache, keyed by the owning stream.
    Cached(Arc<CachingAllocator>, Block),
}

/// Device memory holding `len` values of `T`, owned, ordered on one stream.
///
/// Dropping a buffer is stream-ordered: work already queued on its stream may still use the
/// memory, and the memory is reused or freed only after that work (see [`crate::allocator`]).
///
/// Views borrow the buffer, so a view cannot outlive it:
///
/// ```compile_fail
/// # fn f(stream: &std::sync::Arc<rocm_safe::Stream>) -> rocm_safe::Result<()> {
/// let view = {
///     let buf = rocm_safe::DeviceBuffer::<f32>::alloc(stream, 4)?;
///     buf.slice(..)?
/// }; // error: `buf` dropped while still borrowed
/// # let _ = view; Ok(()) }
/// ```
///
/// and a mutable view excludes every other view of the same buffer:
///
/// ```compile_fail
/// # fn f(stream: &std::sync::Arc<rocm_safe::Stream>) -> rocm_safe::Result<()> {
/// let mut buf = rocm_safe::DeviceBuffer::<f32>::alloc(stream, 4)?;
/// let read = buf.slice(0..2)?;
/// let write = buf.slice_mut(2..4)?; // error: already borrowed as immutable
/// # let _ = (read, write); Ok(()) }
/// ```
pub struct DeviceBuffer<T: DeviceRepr> {
    ptr: *mut c_void,
    len: usize,
    stream: Arc<Stream>,
    origin: Origin,
    _marker: PhantomData<T>,
}

// SAFETY: the buffer owns its device allocation exclusively (no aliasing handle exists
// outside borrows tied to it), the raw pointer is only an address passed to thread-safe HIP
// calls, and `T: Send + Sync`.
unsafe impl<T: DeviceRepr> Send for DeviceBuffer<T> {}
// SAFETY: shared references only read the address and length; device-side access goes through
// stream-ordered HIP calls.
unsafe impl<T: DeviceRepr> Sync for DeviceBuffer<T> {}

pub(crate) fn byte_len<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>()).ok_or_else(|| {
        RocmError::InvalidArgument(format!(
            "{len} elements of {} bytes overflow the address space",
            std::mem::size_of::<T>()
        ))
    })
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` uninitialised elements directly from the runtime (stream-ordered
    /// `hipMallocAsync` where the device supports memory pools, else `hipMalloc`).
    ///
    /// Prefer [`DeviceBuffer::alloc_cached`] on hot paths.
    pub fn alloc(stream: &Arc<Stream>, len: usize) -> Result<Self> {
        let bytes = byte_len::<T>(len)?;
        let device = stream.device();
        if bytes == 0 {
            return Ok(Self::from_parts(
                std::ptr::null_mut(),
                0,
                stream,
                Origin::Malloc,
            ));
        }
        // Direct allocations are not recorded by graph mode: launch what it recorded first.
        let _plain = stream.flush_graph()?;
        device.bind_to_thread()?;
        let hip = device.hip();
        let mut p: *mut c_void = std::ptr::null_mut();
        let (code, origin, op) = match (device.info().memory_pools, hip.hipMallocAsync) {
            (true, Some(malloc_async)) => (
                // SAFETY: `p` is a valid out-pointer; the stream is live and on this device.
                unsafe { malloc_async(&mut p, bytes, stream.raw()) },
                Origin::MallocAsync,
                "hipMallocAsync",
            ),
            _ => (
                // SAFETY: `p` is a valid out-pointer; the device is current.
                unsafe { (hip.hipMalloc)(&mut p, bytes) },
                Origin::Malloc,
                "hipMalloc",
            ),
        };
        if code == rocm_sys::hipError_t::hipErrorOutOfMemory {
            let (free, total) = device.mem_info().unwrap_or((0, 0));
            return Err(RocmError::OutOfMemory {
                ordinal: device.ordinal(),
                requested: bytes,
                free,
                total,
            });
        }
        check(hip, op, code)?;
        Ok(Self::from_parts(p, len, stream, origin))
    }

    /// Allocates `len` uninitialised elements from the device's caching allocator.
    pub fn alloc_cached(stream: &Arc<Stream>, len: usize) -> Result<Self> {
        let allocator = stream.device().allocator();
        Self::alloc_in(&allocator, stream, len)
    }

    /// Allocates `len` uninitialised elements from `allocator`, which must belong to the
    /// stream's device.
    pub fn alloc_in(
        allocator: &Arc<CachingAllocator>,
        stream: &Arc<Stream>,
        len: usize,
    ) -> Result<Self> {
        if !allocator.backend().is_device(stream.device()) {
            return Err(RocmError::InvalidArgument(
                "the allocator and the stream belong to different devices".into(),
            ));
        }
        let bytes = byte_len::<T>(len)?;
        let block = match allocator.allocate(bytes, stream.id()) {
            // The cache is not trimmed while graph mode records this stream: launch what it
            // recorded, then try again (the allocator trims before it gives up).
            Err(RocmError::OutOfMemory { .. }) if stream.graph_mode().is_some() => {
                let _plain = stream.flush_graph()?;
                allocator.allocate(bytes, stream.id())?
            }
            other => other?,
        };
        Ok(Self::from_parts(
            block.addr as *mut c_void,
            len,
            stream,
            Origin::Cached(allocator.clone(), block),
        ))
    }

    fn from_parts(ptr: *mut c_void, len: usize, stream: &Arc<Stream>, origin: Origin) -> Self {
        DeviceBuffer {
            ptr,
            len,
            stream: stream.clone(),
            origin,
            _marker: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The stream the buffer is ordered on.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// The device address (null for an empty buffer).
    pub fn device_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// A borrowed view of elements `range`.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceView<'_, T>> {
        let (start, len) = resolve_range(range, self.len)?;
        Ok(DeviceView {
            ptr: offset::<T>(self.ptr, start),
            len,
            stream: &self.stream,
            _marker: PhantomData,
        })
    }

    /// A mutable borrowed view of elements `range`.
    pub fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceViewMut<'_, T>> {
        let (start, len) = resolve_range(range, self.len)?;
        Ok(DeviceViewMut {
            ptr: offset::<T>(self.ptr, start),
            len,
            stream: &self.stream,
            _marker: PhantomData,
        })
    }
}

fn offset<T>(ptr: *mut c_void, start: usize) -> *mut c_void {
    // Address arithmetic only (never dereferenced on the host): wrapping_add cannot be UB.
    ptr.cast::<u8>()
        .wrapping_add(start * std::mem::size_of::<T>())
        .cast()
}

fn resolve_range(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(s), Some(e)) if s <= e && e <= len => Ok((s, e - s)),
        _ => Err(RocmError::InvalidArgument(format!(
            "range {:?}..{:?} is out of bounds for a buffer of {len} elements",
            range.start_bound(),
            range.end_bound()
        ))),
    }
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if self.ptr.is_null() && !matches!(self.origin, Origin::Cached(..)) {
            return;
        }
        let device = self.stream.device();
        let hip = device.hip();
        // A direct free is not recorded by graph mode: the recorded work that may still use
        // this memory is launched first, so the free is ordered after it.
        let _plain = match &self.origin {
            Origin::Cached(..) => None,
            _ => match self.stream.flush_graph() {
                Ok(plain) => Some(plain),
                Err(e) => {
                    device.runtime().record_err(e);
                    None
                }
            },
        };
        let result = match &self.origin {
            Origin::Cached(allocator, block) => {
                allocator.release(*block, self.stream.id());
                Ok(())
            }
            Origin::MallocAsync => match hip.hipFreeAsync {
                // SAFETY: `ptr` came from hipMallocAsync and is freed once, ordered after all
                // work queued on its stream.
                Some(free_async) => check(hip, "hipFreeAsync", unsafe {
                    free_async(self.ptr, self.stream.raw())
                }),
                None => Err(RocmError::Unsupported {
                    what: "hipFreeAsync",
                    detail: "the runtime lost the entry point it allocated with".into(),
                }),
            },
            Origin::Malloc => self.stream.synchronize().map(|()| {
                let rt = device.runtime().clone();
                let (ordinal, addr) = (device.ordinal(), self.ptr as usize);
                // hipFree invalidates any graph being recorded in the process: deferred until
                // none is (graph::gate).
                gate::device_wide(move || {
                    let hip = rt.hip();
                    let freed = bind(hip, ordinal).and_then(|()| {
                        // SAFETY: `addr` came from hipMalloc on this device; its stream was
                        // synchronised above, so no queued work uses it; freed exactly once
                        // (this closure runs once).
                        check(hip, "hipFree", unsafe {
                            (hip.hipFree)(addr as *mut c_void)
                        })
                    });
                    if let Err(e) = freed {
                        rt.record_err(e);
                    }
                });
            }),
        };
        if let Err(e) = result {
            device.runtime().record_err(e);
        }
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}] on {:?}",
            std::any::type_name::<T>(),
            self.len,
            self.stream
        )
    }
}

/// A shared view of part of a [`DeviceBuffer`].
pub struct DeviceView<'a, T: DeviceRepr> {
    ptr: *mut c_void,
    len: usize,
    stream: &'a Arc<Stream>,
    _marker: PhantomData<&'a T>,
}

/// An exclusive view of part of a [`DeviceBuffer`].
pub struct DeviceViewMut<'a, T: DeviceRepr> {
    ptr: *mut c_void,
    len: usize,
    stream: &'a Arc<Stream>,
    _marker: PhantomData<&'a mut T>,
}

/// Read access to device memory: an address, a length and the stream it is ordered on.
pub trait DeviceSlice<T: DeviceRepr> {
    /// Device address of the first element.
    fn device_ptr(&self) -> *mut c_void;
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether it holds no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The stream the memory is ordered on.
    fn stream(&self) -> &Arc<Stream>;
}

/// Write access to device memory. Only exclusive borrows implement it.
pub trait DeviceSliceMut<T: DeviceRepr>: DeviceSlice<T> {}

impl<T: DeviceRepr> DeviceSlice<T> for DeviceBuffer<T> {
    fn device_ptr(&self) -> *mut c_void {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }
}
impl<T: DeviceRepr> DeviceSliceMut<T> for DeviceBuffer<T> {}

impl<T: DeviceRepr> DeviceSlice<T> for DeviceView<'_, T> {
    fn device_ptr(&self) -> *mut c_void {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<Stream> {
        self.stream
    }
}

impl<T: DeviceRepr> DeviceSlice<T> for DeviceViewMut<'_, T> {
    fn device_ptr(&self) -> *mut c_void {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<Stream> {
        self.stream
    }
}
impl<T: DeviceRepr> DeviceSliceMut<T> for DeviceViewMut<'_, T> {}

#[cfg(test)]
mod tests {
    use super::resolve_range;

    #[test]
    fn ranges_are_checked() {
        assert_eq!(resolve_range(.., 10).unwrap(), (0, 10));
        assert_eq!(resolve_range(2..5, 10).unwrap(), (2, 3));
        assert_eq!(resolve_range(2..=5, 10).unwrap(), (2, 4));
        assert_eq!(resolve_range(10.., 10).unwrap(), (10, 0));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..4;
        assert!(resolve_range(reversed, 10).is_err());
        assert!(resolve_range(0..11, 10).is_err());
        assert!(resolve_range(..=usize::MAX, 10).is_err());
    }
}
