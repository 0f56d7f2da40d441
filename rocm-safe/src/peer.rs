//! Copies between two devices' buffers: direct peer-to-peer (`hipMemcpyPeerAsync`, after
//! `hipDeviceEnablePeerAccess` once per pair of devices) where the devices can reach each
//! other, else staged through pinned host memory in chunks, double-buffered so the download
//! of one chunk overlaps the upload of the previous one. Never through pageable host memory.
//!
//! | HIP | rocm-safe |
//! |---|---|
//! | `hipDeviceCanAccessPeer`, `hipDeviceEnablePeerAccess` | [`Runtime::peer_access`] (probed and enabled once per pair) |
//! | `hipMemcpyPeerAsync` | [`copy_peer`] ([`PeerRoute::Direct`]) |
//! | `hipMemcpyDtoHAsync` + `hipMemcpyHtoDAsync` via `hipHostMalloc` memory | [`copy_staged`] ([`PeerRoute::Staged`]) |

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use rocm_sys::hipError_t;

use crate::buffer::{byte_len, DeviceRepr, DeviceSlice, DeviceSliceMut};
use crate::device::bind;
use crate::error::{check, Result, RocmError};
use crate::host::PinnedHostBuffer;
use crate::runtime::Runtime;
use crate::stream::{Event, Stream};

/// Bytes per chunk of a staged copy (two pinned buffers of this size at most).
pub const STAGE_CHUNK: usize = 8 << 20;

/// How a copy between two buffers went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeerRoute {
    /// Both buffers are on one device: an ordinary device-to-device copy.
    SameDevice,
    /// Peer to peer: the destination device reads the source's memory directly.
    Direct,
    /// Through pinned host memory, in chunks of [`STAGE_CHUNK`] bytes.
    Staged,
}

/// The route for a copy: `same` (one device), `peer_api` (the runtime exports the peer entry
/// points) and `can_access` (the destination device can reach the source's memory).
pub fn route(same: bool, peer_api: bool, can_access: bool) -> PeerRoute {
    if same {
        PeerRoute::SameDevice
    } else if peer_api && can_access {
        PeerRoute::Direct
    } else {
        PeerRoute::Staged
    }
}

/// `(offset, length)` in bytes of each chunk of a `total`-byte staged copy.
pub fn chunks(total: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    let chunk = chunk.max(1);
    (0..total.div_ceil(chunk)).map(move |i| {
        let off = i * chunk;
        (off, chunk.min(total - off))
    })
}

impl Runtime {
    /// Whether `device` can read `peer`'s memory directly, enabling that access the first time
    /// a pair is asked about (`hipDeviceCanAccessPeer`, then `hipDeviceEnablePeerAccess` with
    /// `device` current). `false` when the runtime lacks the entry points, for a device and
    /// itself, and when enabling fails (copies then take the staged route).
    pub fn peer_access(&self, device: usize, peer: usize) -> Result<bool> {
        if device == peer {
            return Ok(false);
        }
        if let Some(&known) = self.peers.lock().get(&(device, peer)) {
            return Ok(known);
        }
        let ok = self.probe_peer(device, peer)?;
        self.peers.lock().insert((device, peer), ok);
        Ok(ok)
    }

    fn probe_peer(&self, device: usize, peer: usize) -> Result<bool> {
        let hip = self.hip();
        let (Some(can), Some(enable)) = (hip.hipDeviceCanAccessPeer, hip.hipDeviceEnablePeerAccess)
        else {
            return Ok(false);
        };
        let (d, p) = (ordinal(device)?, ordinal(peer)?);
        let mut yes: c_int = 0;
        // SAFETY: `yes` is a valid out-pointer; the ordinals are validated by HIP
        // (hipErrorInvalidDevice otherwise).
        let code = unsafe { can(&mut yes, d, p) };
        check(hip, "hipDeviceCanAccessPeer", code)?;
        if yes == 0 {
            return Ok(false);
        }
        bind(hip, device)?;
        // SAFETY: `device` is current; flags must be 0; enabling twice only returns
        // hipErrorPeerAccessAlreadyEnabled.
        let code = unsafe { enable(p, 0) };
        Ok(code == hipError_t::hipSuccess || code == hipError_t::hipErrorPeerAccessAlreadyEnabled)
    }
}

fn ordinal(i: usize) -> Result<c_int> {
    c_int::try_from(i)
        .map_err(|_| RocmError::InvalidArgument(format!("device ordinal {i} does not fit a C int")))
}

/// Checks the two sides of a copy between devices; returns the byte count.
fn check_pair<T: DeviceRepr>(
    src: &impl DeviceSlice<T>,
    dst: &impl DeviceSlice<T>,
) -> Result<usize> {
    if src.len() != dst.len() {
        return Err(RocmError::InvalidArgument(format!(
            "copy between devices: source has {} elements, destination {}",
            src.len(),
            dst.len()
        )));
    }
    if !Arc::ptr_eq(
        src.stream().device().runtime(),
        dst.stream().device().runtime(),
    ) {
        return Err(RocmError::InvalidArgument(
            "copy between devices of two different HIP runtimes".into(),
        ));
    }
    byte_len::<T>(src.len())
}

/// Copies `src` into `dst` (same length), wherever each lives, and returns the route taken:
/// same device, direct peer to peer, or staged through pinned host memory.
///
/// The direct and same-device copies are queued on `dst`'s stream after the work queued so
/// far on `src`'s, and `src`'s stream waits for the copy (so `src` is not reused before it has
/// been read); they return at once. The staged copy returns once it has finished.
pub fn copy_peer<T: DeviceRepr>(
    src: &impl DeviceSlice<T>,
    dst: &mut impl DeviceSliceMut<T>,
) -> Result<PeerRoute> {
    let bytes = check_pair(src, dst)?;
    let (sd, dd) = (src.stream().device(), dst.stream().device());
    if sd.same_device(dd) {
        dst.stream().clone().memcpy_dtod(src, dst)?;
        return Ok(PeerRoute::SameDevice);
    }
    let rt = dd.runtime().clone();
    let hip = rt.hip();
    let peer_api = hip.hipMemcpyPeerAsync.is_some();
    let can = peer_api && rt.peer_access(dd.ordinal(), sd.ordinal())?;
    match (route(false, peer_api, can), hip.hipMemcpyPeerAsync) {
        (PeerRoute::Direct, Some(peer_copy)) => {
            if bytes == 0 {
                return Ok(PeerRoute::Direct);
            }
            let (s_stream, d_stream) = (src.stream().clone(), dst.stream().clone());
            d_stream.join(&s_stream)?;
            dd.bind_to_thread()?;
            let (d_ord, s_ord) = (ordinal(dd.ordinal())?, ordinal(sd.ordinal())?);
            // SAFETY: `dst` (exclusively borrowed) and `src` each hold `bytes` bytes of device
            // memory of devices `d_ord` and `s_ord`; the copy is ordered on `d_stream` after
            // `src`'s writers (the join above) and `src`'s stream waits for it below.
            let code = unsafe {
                peer_copy(
                    dst.device_ptr(),
                    d_ord,
                    src.device_ptr(),
                    s_ord,
                    bytes,
                    d_stream.raw(),
                )
            };
            check(hip, "hipMemcpyPeerAsync", code)?;
            s_stream.join(&d_stream)?;
            Ok(PeerRoute::Direct)
        }
        _ => copy_staged(src, dst),
    }
}

/// Copies `src` into `dst` (same length, any two devices) through pinned host memory, in
/// chunks of [`STAGE_CHUNK`] bytes with two buffers in turn: a chunk's download on `src`'s
/// stream overlaps the previous chunk's upload on `dst`'s. Returns when the copy has finished
/// (the pinned memory is freed after it), also on an error.
pub fn copy_staged<T: DeviceRepr>(
    src: &impl DeviceSlice<T>,
    dst: &mut impl DeviceSliceMut<T>,
) -> Result<PeerRoute> {
    let bytes = check_pair(src, dst)?;
    if bytes == 0 {
        return Ok(PeerRoute::Staged);
    }
    let (s_stream, d_stream) = (src.stream().clone(), dst.stream().clone());
    let chunk = bytes.min(STAGE_CHUNK);
    let n_bufs = if bytes > chunk { 2 } else { 1 };
    let mut pinned = Vec::with_capacity(n_bufs);
    for _ in 0..n_bufs {
        pinned.push(PinnedHostBuffer::<u8>::new(s_stream.device(), chunk)?);
    }
    let (s_ptr, d_ptr) = (src.device_ptr(), dst.device_ptr());
    let queued = stage(
        &s_stream,
        &d_stream,
        s_ptr,
        d_ptr,
        bytes,
        chunk,
        &mut pinned,
    );
    // The pinned buffers must outlive every copy queued from or into them, whatever failed.
    let settled = s_stream.synchronize().and(d_stream.synchronize());
    queued.and(settled).map(|()| PeerRoute::Staged)
}

/// Queues the chunks of a staged copy (see [`copy_staged`]).
fn stage(
    s_stream: &Arc<Stream>,
    d_stream: &Arc<Stream>,
    src: *mut c_void,
    dst: *mut c_void,
    bytes: usize,
    chunk: usize,
    pinned: &mut [PinnedHostBuffer<u8>],
) -> Result<()> {
    let hip = s_stream.device().hip();
    // Per pinned buffer: the event after the upload that last read it.
    let mut freed: Vec<Option<Event>> = (0..pinned.len()).map(|_| None).collect();
    for (i, (off, len)) in chunks(bytes, chunk).enumerate() {
        let b = i % pinned.len();
        if let Some(ev) = &freed[b] {
            s_stream.wait(ev)?;
        }
        let host = pinned[b].as_mut_ptr().cast::<c_void>();
        s_stream.device().bind_to_thread()?;
        // SAFETY: `src + off` holds `len` readable bytes (off + len <= bytes, the source's
        // size); `host` holds `chunk >= len` bytes of pinned memory, not read by any queued
        // upload (the stream waited for the upload that last used it) and kept alive by the
        // caller until both streams are synchronised.
        let code = unsafe {
            (hip.hipMemcpyDtoHAsync)(host, src.cast::<u8>().add(off).cast(), len, s_stream.raw())
        };
        check(hip, "hipMemcpyDtoHAsync", code)?;
        let filled = s_stream.record_event()?;
        d_stream.wait(&filled)?;
        d_stream.device().bind_to_thread()?;
        // SAFETY: `dst + off` holds `len` writable bytes of the exclusively borrowed
        // destination; `host` holds the chunk once `filled` has completed (the stream waits for
        // it) and lives until both streams are synchronised.
        let code = unsafe {
            (hip.hipMemcpyHtoDAsync)(dst.cast::<u8>().add(off).cast(), host, len, d_stream.raw())
        };
        check(hip, "hipMemcpyHtoDAsync", code)?;
        freed[b] = Some(d_stream.record_event()?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(true, true, true), PeerRoute::SameDevice);
        assert_eq!(route(true, false, false), PeerRoute::SameDevice);
        assert_eq!(route(false, true, true), PeerRoute::Direct);
        assert_eq!(route(false, true, false), PeerRoute::Staged);
        assert_eq!(route(false, false, true), PeerRoute::Staged);
    }

    #[test]
    fn chunks_cover_the_copy_exactly() {
        assert_eq!(chunks(0, 8).count(), 0);
        assert_eq!(chunks(1, 8).collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!(chunks(8, 8).collect::<Vec<_>>(), vec![(0, 8)]);
        assert_eq!(
            chunks(20, 8).collect::<Vec<_>>(),
            vec![(0, 8), (8, 8), (16, 4)]
        );
        for total in [1usize, 7, 4096, STAGE_CHUNK - 1, STAGE_CHUNK + 3, 64 << 20] {
            let mut next = 0;
            for (off, len) in chunks(total, STAGE_CHUNK) {
                assert_eq!(off, next);
                assert!(len > 0 && len <= STAGE_CHUNK);
                next = off + len;
            }
            assert_eq!(next, total);
        }
        // A zero chunk size is treated as one byte, never a division by zero.
        assert_eq!(chunks(3, 0).count(), 3);
    }
}
