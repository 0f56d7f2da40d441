//! Copies and fills, queued on a [`Stream`]: host-to-device, device-to-host, device-to-device,
//! and memset.
//!
//! The safe host copies wait for their stream before returning, so the host slice may be reused
//! at once. The `_async` variants do not wait and are `unsafe`: the host memory must stay valid
//! and untouched until the stream reaches the copy. Device memory owned by another stream is
//! ordered automatically (events in both directions).

use std::ffi::c_void;
use std::sync::Arc;

use crate::buffer::{byte_len, DeviceBuffer, DeviceRepr, DeviceSlice, DeviceSliceMut};
use crate::error::{check, Result, RocmError};
use crate::graph::batch::NodeKind;
use crate::stream::Stream;

/// Why a copy from pageable host memory is refused while capturing.
const PAGEABLE: &str =
    "a copy from pageable host memory would be read again at every launch of the graph";
/// Why a read-back to the host is refused while capturing.
const HOST_READ: &str = "the host cannot read results of work that is only being recorded";

fn same_len(what: &str, a: usize, b: usize) -> Result<()> {
    if a == b {
        Ok(())
    } else {
        Err(RocmError::InvalidArgument(format!(
            "{what}: source has {a} elements, destination {b}"
        )))
    }
}

impl Stream {
    /// Runs `f` on this stream after the work queued on each of `others`, and makes each of
    /// `others` wait for it in turn. This stream's device is made current around `f` (after
    /// the events, which bind their own devices): a caller reading back a buffer of device 1
    /// while device 0 is current needs to know nothing about devices.
    fn ordered_with(&self, others: &[&Arc<Stream>], f: impl FnOnce() -> Result<()>) -> Result<()> {
        for o in others {
            if !o.device().same_device(self.device()) {
                return Err(RocmError::InvalidArgument(format!(
                    "memory of device {} used on a stream of device {}",
                    o.device().ordinal(),
                    self.device().ordinal()
                )));
            }
            self.join(o)?;
        }
        self.device().bind_to_thread()?;
        f()?;
        for o in others {
            o.join(self)?;
        }
        Ok(())
    }

    /// Allocates `len` uninitialised elements from the device's caching allocator.
    pub fn alloc<T: DeviceRepr>(self: &Arc<Self>, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::alloc_cached(self, len)
    }

    /// Allocates `len` zeroed elements from the device's caching allocator.
    pub fn alloc_zeros<T: DeviceRepr>(self: &Arc<Self>, len: usize) -> Result<DeviceBuffer<T>> {
        let mut b = DeviceBuffer::alloc_cached(self, len)?;
        self.memset_zeros(&mut b)?;
        Ok(b)
    }

    /// Copies `src` into a new buffer and waits for the copy.
    ///
    /// In graph mode a small copy is recorded through pinned staging memory instead (the data
    /// is copied before this returns, so the host slice may be reused at once all the same).
    pub fn clone_htod<T: DeviceRepr>(self: &Arc<Self>, src: &[T]) -> Result<DeviceBuffer<T>> {
        if let Some(b) = self.stage_upload(src)? {
            return Ok(b);
        }
        let _plain = self.ensure_not_capturing("Stream::clone_htod", PAGEABLE)?;
        let mut b = DeviceBuffer::alloc_cached(self, src.len())?;
        self.memcpy_htod(src, &mut b)?;
        Ok(b)
    }

    /// Copies `src` into a new buffer without waiting for the copy: the stream keeps `src`
    /// alive until the copy has run. For small host-made arguments of a kernel launched next
    /// on this stream (shapes, strides), where [`Stream::clone_htod`] would wait for all queued
    /// work.
    ///
    /// In graph mode a small upload is recorded through pinned staging memory.
    pub fn upload<T: DeviceRepr>(self: &Arc<Self>, src: Vec<T>) -> Result<DeviceBuffer<T>> {
        if let Some(b) = self.stage_upload(&src)? {
            return Ok(b);
        }
        let _plain = self.ensure_not_capturing("Stream::upload", PAGEABLE)?;
        /// Host copies kept at most before the oldest is waited for.
        const MAX_IN_FLIGHT: usize = 4096;
        let mut b = DeviceBuffer::alloc_cached(self, src.len())?;
        if src.is_empty() {
            return Ok(b);
        }
        let mut queue = self.in_flight.lock();
        while let Some((event, _)) = queue.front() {
            if !event.is_complete()? {
                if queue.len() < MAX_IN_FLIGHT {
                    break;
                }
                event.synchronize()?;
            }
            queue.pop_front();
        }
        // SAFETY: `src`'s heap block is moved into `in_flight` below (moving a Vec does not
        // move its elements) and is freed only after the event recorded after this copy has
        // completed, or after Drop has synchronised the stream; nothing writes it meanwhile.
        unsafe { self.memcpy_htod_async(&src, &mut b)? };
        let event = self.record_event()?;
        queue.push_back((event, Box::new(src)));
        Ok(b)
    }

    /// Copies device memory into a new `Vec` and waits for the copy.
    pub fn clone_dtoh<T: DeviceRepr>(&self, src: &impl DeviceSlice<T>) -> Result<Vec<T>> {
        let _plain = self.ensure_not_capturing("Stream::clone_dtoh", HOST_READ)?;
        let mut v = Vec::<T>::with_capacity(src.len());
        // SAFETY: `v` has capacity for len elements; the copy writes all of them (it waits
        // before returning), and T: DeviceRepr accepts any bit pattern.
        unsafe {
            self.memcpy_dtoh_raw(src, v.as_mut_ptr().cast(), src.len())?;
            self.synchronize()?;
            v.set_len(src.len());
        }
        Ok(v)
    }

    /// Copies `src` to `dst` (same length) and waits for the copy.
    pub fn memcpy_htod<T: DeviceRepr>(
        &self,
        src: &[T],
        dst: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        same_len("memcpy_htod", src.len(), dst.len())?;
        let _plain = self.ensure_not_capturing("Stream::memcpy_htod", PAGEABLE)?;
        // SAFETY: we synchronise before returning, so `src` outlives the copy.
        unsafe { self.memcpy_htod_async(src, dst)? };
        self.synchronize()
    }

    /// Queues a copy of `src` to `dst` without waiting.
    ///
    /// # Safety
    /// `src` must stay valid and unmodified until this stream has executed the copy (e.g. until
    /// [`Stream::synchronize`] returns). Use pinned memory ([`crate::PinnedHostBuffer`]) for a
    /// truly asynchronous copy. While the stream is capturing a graph, the copy is recorded,
    /// not run: `src` is read at every launch of that graph, so it must be pinned memory that
    /// outlives every [`crate::graph::GraphExec`] made from it.
    pub unsafe fn memcpy_htod_async<T: DeviceRepr>(
        &self,
        src: &[T],
        dst: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        same_len("memcpy_htod", src.len(), dst.len())?;
        let bytes = byte_len::<T>(src.len())?;
        if bytes == 0 {
            return Ok(());
        }
        // Graph mode does not record copies from the caller's host memory (it may be
        // pageable, or change before a launch): what it recorded is launched first.
        let _plain = self.flush_graph()?;
        let hip = self.device().hip();
        let dst_stream = dst.stream().clone();
        self.ordered_with(&[&dst_stream], || {
            // SAFETY: `dst` is device memory of `bytes` bytes (length checked above), borrowed
            // mutably; the caller keeps `src` alive until the copy runs.
            let code = unsafe {
                (hip.hipMemcpyHtoDAsync)(
                    dst.device_ptr(),
                    src.as_ptr() as *mut c_void,
                    bytes,
                    self.raw(),
                )
            };
            check(hip, "hipMemcpyHtoDAsync", code)
        })
    }

    /// Copies `src` into `dst` (same length) and waits for the copy.
    pub fn memcpy_dtoh<T: DeviceRepr>(
        &self,
        src: &impl DeviceSlice<T>,
        dst: &mut [T],
    ) -> Result<()> {
        let _plain = self.ensure_not_capturing("Stream::memcpy_dtoh", HOST_READ)?;
        same_len("memcpy_dtoh", src.len(), dst.len())?;
        // SAFETY: `dst` is an exclusively borrowed slice of exactly src.len() elements, and we
        // synchronise before the borrow ends.
        unsafe { self.memcpy_dtoh_raw(src, dst.as_mut_ptr().cast(), dst.len())? };
        self.synchronize()
    }

    /// Queues a device-to-host copy into raw host memory.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len * size_of::<T>()` bytes until the stream has
    /// executed the copy, and nothing may read it before then. While the stream is capturing
    /// a graph, that holds for every launch of the graph (pinned memory outliving its execs).
    pub unsafe fn memcpy_dtoh_raw<T: DeviceRepr>(
        &self,
        src: &impl DeviceSlice<T>,
        dst: *mut c_void,
        len: usize,
    ) -> Result<()> {
        same_len("memcpy_dtoh", src.len(), len)?;
        let bytes = byte_len::<T>(len)?;
        if bytes == 0 {
            return Ok(());
        }
        // Graph mode does not record read-backs: what it recorded is launched first.
        let _plain = self.flush_graph()?;
        let hip = self.device().hip();
        let src_stream = src.stream().clone();
        self.ordered_with(&[&src_stream], || {
            // SAFETY: `src` holds `bytes` bytes of device memory; the caller guarantees `dst`.
            let code =
                unsafe { (hip.hipMemcpyDtoHAsync)(dst, src.device_ptr(), bytes, self.raw()) };
            check(hip, "hipMemcpyDtoHAsync", code)
        })
    }

    /// Queues a device-to-device copy (same length). Does not wait.
    pub fn memcpy_dtod<T: DeviceRepr>(
        &self,
        src: &impl DeviceSlice<T>,
        dst: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        same_len("memcpy_dtod", src.len(), dst.len())?;
        let bytes = byte_len::<T>(src.len())?;
        if bytes == 0 {
            return Ok(());
        }
        let hip = self.device().hip();
        let (s, d) = (src.stream().clone(), dst.stream().clone());
        self.ordered_with(&[&s, &d], || {
            self.record(NodeKind::Copy, || {
                // SAFETY: both ranges are `bytes` long and live (borrowed); `dst` is exclusive,
                // so the ranges cannot overlap unless the caller split one buffer into disjoint
                // views.
                let code = unsafe {
                    (hip.hipMemcpyDtoDAsync)(dst.device_ptr(), src.device_ptr(), bytes, self.raw())
                };
                check(hip, "hipMemcpyDtoDAsync", code)
            })
        })
    }

    /// Queues a fill of `dst` with zero bytes. Does not wait.
    pub fn memset_zeros<T: DeviceRepr>(&self, dst: &mut impl DeviceSliceMut<T>) -> Result<()> {
        let bytes = byte_len::<T>(dst.len())?;
        self.memset_raw(dst, bytes, Fill::U8(0))
    }

    /// Queues a fill of `dst` with `value`. Supported for 1-, 2- and 4-byte types; wider types
    /// need a fill kernel and return [`RocmError::Unsupported`].
    pub fn memset<T: DeviceRepr>(&self, dst: &mut impl DeviceSliceMut<T>, value: T) -> Result<()> {
        let n = dst.len();
        let size = std::mem::size_of::<T>();
        let mut bytes = [0u8; 4];
        if size <= 4 {
            // SAFETY: `value` is a DeviceRepr (no padding, so all `size` bytes are initialised)
            // and `bytes` has room for them; the regions cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (&value as *const T).cast::<u8>(),
                    bytes.as_mut_ptr(),
                    size,
                )
            };
        }
        let fill = match size {
            1 => Fill::U8(bytes[0]),
            2 => Fill::U16(u16::from_ne_bytes([bytes[0], bytes[1]])),
            4 => Fill::U32(u32::from_ne_bytes(bytes)),
            size => {
                return Err(RocmError::Unsupported {
                    what: "memset of 8-byte elements",
                    detail: format!(
                        "HIP has no {size}-byte memset; use a fill kernel (candle-rocm's const_set)"
                    ),
                })
            }
        };
        self.memset_raw(dst, n, fill)
    }

    fn memset_raw<T: DeviceRepr>(
        &self,
        dst: &mut impl DeviceSliceMut<T>,
        count: usize,
        fill: Fill,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let hip = self.device().hip();
        let d = dst.stream().clone();
        let ptr = dst.device_ptr();
        self.ordered_with(&[&d], || {
            self.record(NodeKind::Fill, || {
                let stream = self.raw();
                // SAFETY: `ptr` is exclusively borrowed device memory holding `count` units of the
                // fill width (count derived from its length by the callers), ordered on `stream`.
                let (op, code) = unsafe {
                    match fill {
                        Fill::U8(v) => (
                            "hipMemsetD8Async",
                            (hip.hipMemsetD8Async)(ptr, v, count, stream),
                        ),
                        Fill::U16(v) => (
                            "hipMemsetD16Async",
                            (hip.hipMemsetD16Async)(ptr, v, count, stream),
                        ),
                        Fill::U32(v) => (
                            "hipMemsetD32Async",
                            (hip.hipMemsetD32Async)(ptr, v as i32, count, stream),
                        ),
                    }
                };
                check(hip, op, code)
            })
        })
    }
}

#[derive(Clone, Copy)]
enum Fill {
    U8(u8),
    U16(u16),
    U32(u32),
}
