//! The one-shot all-reduce's shared memory: one fine-grained allocation per rank that every
//! other rank of the host maps, set up once per communicator, and the rule for which
//! all-reduces it takes (a sum of f32, f16 or bf16 of at most [`MAX_BYTES`]).
//!
//! Why: a tensor-parallel decoder all-reduces one token's hidden state twice a layer (8 KiB in
//! f16 for a 4096-wide model), where RCCL's fixed cost per call is most of the time. The
//! kernel (`launch::collective`) sums the ranks' inputs in one launch by reading the peers'
//! memory directly, with no host work and nothing that ends a graph-mode recording.
//!
//! Set-up ([`PeerReduce::establish`]) is itself collective: every rank allocates its memory
//! and exports its handle, the ranks exchange (handle, process, host, address, device) records
//! with an RCCL all-gather, each maps its peers' memory (another process's through its handle;
//! a thread of the same process by address, after enabling peer access), and an RCCL
//! all-reduce (min) of each rank's success decides for all: either every rank takes the
//! one-shot path or none does (ranks on several hosts, GPUs that cannot reach each other, a
//! runtime without the entry points, or the setting off on any rank), so ranks never wait on
//! different collectives. The same all-reduce decides whether small messages take the kernels'
//! Lamport forms (`CANDLE_ROCM_PEER_LAMPORT`), whose buffers each rank fills with the empty
//! marker before the exchange.

use std::sync::Arc;
use std::time::Duration;

use rocm_safe::ipc::{IpcHandle, PeerMemory, SharedMemory, IPC_HANDLE_BYTES};
use rocm_safe::rccl::{Communicator, RcclError, ReduceOp};
use rocm_safe::{DeviceSlice, DeviceSliceMut, PinnedHostBuffer};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::collective::{
    allreduce_add_rmsnorm_oneshot, allreduce_sum_oneshot, kernel_name, lamport_at, lamport_span,
    shared_bytes, ArBases, OneShot, LAMPORT_EMPTY, MAX_RANKS,
};

/// The largest all-reduce the one-shot kernel takes, in bytes (one data half of the shared
/// allocation); larger ones go through RCCL.
pub const MAX_BYTES: usize = 4 << 20;

/// The largest all-gather (the gathered tensor, in bytes) taken as a one-shot sum of every
/// rank's input placed at its offset in zeros ([`PeerReduce::gathers`]): that moves the world
/// size times a true gather's bytes, which costs less than RCCL's call (and the graph-mode
/// recording it ends) only for small messages, such as a decode step's logits.
pub const GATHER_MAX_BYTES: usize = 1 << 20;

/// Bytes of a rank's record in the set-up exchange.
const RECORD: usize = 128;

/// One rank's side of the one-shot all-reduce (see the module documentation).
pub struct PeerReduce {
    shot: OneShot,
    status: PinnedHostBuffer<u32>,
    // For the barrier of `Drop`: the peers' last kernels read this rank's memory.
    dev: RocmDevice,
    comm: Arc<Communicator>,
    // The mappings and the allocation the kernel's bases point to: kept as long as `shot`.
    _peers: Vec<PeerMemory>,
    _own: SharedMemory,
}

/// The longest the barrier before freeing the shared memory waits for the peers.
const DROP_BARRIER: Duration = Duration::from_secs(10);

impl Drop for PeerReduce {
    /// Frees the shared memory only once every peer has passed an RCCL all-reduce queued after
    /// this rank's last one-shot kernel, so no peer's kernel still reads it (their streams ran
    /// their own last kernels first). A peer that died or a communicator already aborted ends
    /// the wait early (at most `DROP_BARRIER`); then the memory is freed anyway.
    fn drop(&mut self) {
        let barrier = || -> Result<(), BackendError> {
            let send = self.dev.stream().clone_htod(&[0u32])?;
            let mut out = self.dev.alloc::<u32>(1)?;
            self.comm.all_reduce(&send, &mut out, ReduceOp::Sum)?;
            self.comm
                .wait_timeout(DROP_BARRIER.min(self.comm.timeout()))?;
            Ok(())
        };
        if let Err(e) = barrier() {
            tracing::debug!(
                "rank {}: the barrier before freeing the one-shot all-reduce's memory: {e}",
                self.shot.rank
            );
        }
    }
}

impl std::fmt::Debug for PeerReduce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PeerReduce(rank {} of {}, up to {} bytes)",
            self.shot.rank, self.shot.world, self.shot.cap
        )
    }
}

/// What one rank tells the others at set-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    handle: IpcHandle,
    pid: u64,
    host: u64,
    address: u64,
    ordinal: u32,
    ready: bool,
}

impl Record {
    fn to_bytes(self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        b[..IPC_HANDLE_BYTES].copy_from_slice(&self.handle.0);
        b[64..72].copy_from_slice(&self.pid.to_le_bytes());
        b[72..80].copy_from_slice(&self.host.to_le_bytes());
        b[80..88].copy_from_slice(&self.address.to_le_bytes());
        b[88..92].copy_from_slice(&self.ordinal.to_le_bytes());
        b[92] = u8::from(self.ready);
        b
    }

    fn from_bytes(b: &[u8]) -> Option<Record> {
        let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
        Some(Record {
            handle: IpcHandle(b.get(..IPC_HANDLE_BYTES)?.try_into().ok()?),
            pid: u64_at(64)?,
            host: u64_at(72)?,
            address: u64_at(80)?,
            ordinal: u32::from_le_bytes(b.get(88..92)?.try_into().ok()?),
            ready: *b.get(92)? == 1,
        })
    }
}

/// This boot of this host, as a number: the kernel's boot id (hashed), else the host name.
fn host_id() -> u64 {
    use std::hash::{Hash, Hasher};
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .unwrap_or_default();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.trim().hash(&mut h);
    h.finish()
}

impl PeerReduce {
    /// Sets up the one-shot path for `comm`'s ranks on `dev` (collective: every rank calls it
    /// once, right after creating the communicator). `want` is this rank's setting. `None`
    /// when any rank cannot or does not want to (logged with the reason); an error only when
    /// the exchange itself fails.
    pub fn establish(
        dev: &RocmDevice,
        comm: &Arc<Communicator>,
        want: bool,
    ) -> Result<Option<Arc<PeerReduce>>, BackendError> {
        let (rank, world) = (comm.rank(), comm.world_size());
        if !(2..=MAX_RANKS).contains(&world) {
            return Ok(None);
        }
        let local = if want {
            match SharedMemory::new(dev.device(), shared_bytes(MAX_BYTES))
                .and_then(|m| {
                    // The Lamport buffers hold the empty marker before any peer can map them
                    // (the exchange below comes after).
                    m.fill_u32(lamport_at(MAX_BYTES), lamport_span() / 4, LAMPORT_EMPTY)?;
                    Ok(m)
                })
                .and_then(|m| Ok((m.handle()?, m)))
                .and_then(|(h, m)| Ok((h, m, PinnedHostBuffer::<u32>::new(dev.device(), 1)?)))
            {
                Ok(parts) => Some(parts),
                Err(e) => {
                    tracing::info!("rank {rank}: no one-shot all-reduce ({e})");
                    None
                }
            }
        } else {
            None
        };
        let mine = Record {
            handle: local.as_ref().map_or(IpcHandle([0; 64]), |l| l.0),
            pid: u64::from(std::process::id()),
            host: host_id(),
            address: local.as_ref().map_or(0, |l| l.1.device_ptr()),
            ordinal: dev.ordinal() as u32,
            ready: local.is_some(),
        };
        let records = exchange(dev, comm, &mine)?;
        let mapped = match local {
            Some((_, own, status)) => match map_peers(dev, rank, &records) {
                Ok((bases, peers)) => Some((bases, peers, own, status)),
                Err(why) => {
                    tracing::info!("rank {rank}: no one-shot all-reduce ({why})");
                    None
                }
            },
            None => None,
        };
        // 0: no one-shot path; 1: the flag kernels only; 2: the Lamport ones for small messages.
        let level = match (&mapped, crate::settings::peer_lamport()) {
            (None, _) => 0,
            (Some(_), false) => 1,
            (Some(_), true) => 2,
        };
        let agreed = agree(dev, comm, level)?;
        if agreed == 0 {
            if mapped.is_some() {
                tracing::info!("rank {rank}: no one-shot all-reduce (another rank cannot)");
            }
            return Ok(None);
        }
        let Some((bases, peers, own, status)) = mapped else {
            return Ok(None);
        };
        let shot = OneShot {
            bases,
            rank: rank as u32,
            world: world as u32,
            cap: MAX_BYTES as u64,
            timeout_ns: u64::try_from(comm.timeout().as_nanos()).unwrap_or(u64::MAX),
            status: status.as_ptr() as u64,
            lamport: agreed >= 2,
        };
        tracing::debug!(
            "rank {rank} of {world}: one-shot all-reduce up to {MAX_BYTES} bytes (Lamport form \
             for small ones: {})",
            shot.lamport
        );
        Ok(Some(Arc::new(PeerReduce {
            shot,
            status,
            dev: dev.clone(),
            comm: comm.clone(),
            _peers: peers,
            _own: own,
        })))
    }

    /// Whether the one-shot kernel takes a sum of `len` elements of `T`.
    pub fn takes<T: RocmDType>(&self, op: ReduceOp, len: usize) -> bool {
        op == ReduceOp::Sum
            && kernel_name(T::DTYPE).is_some()
            && len.saturating_mul(std::mem::size_of::<T>()) as u64 <= self.shot.cap
    }

    /// Queues `out = the sum over the ranks of input` (see [`PeerReduce::takes`]).
    pub fn all_reduce_sum<T: RocmDType>(
        &self,
        dev: &RocmDevice,
        input: &impl DeviceSlice<T>,
        out: &mut impl DeviceSliceMut<T>,
    ) -> Result<(), BackendError> {
        allreduce_sum_oneshot(dev, &self.shot, input, out)
    }

    /// Whether an all-gather of `gathered` elements of `T` in all runs as the one-shot sum of
    /// every rank's input placed at its offset in zeros (at most [`GATHER_MAX_BYTES`]). Exact
    /// but for signed zeros: every rank adds zeros to every other rank's values, so a -0.0
    /// arrives as +0.0 (and an f32 -4.6e-41, the Lamport form's empty marker, as +0.0 too).
    /// Depends on the dtype and size only, so every rank takes the same path.
    pub fn gathers<T: RocmDType>(&self, gathered: usize) -> bool {
        let bytes = gathered.saturating_mul(std::mem::size_of::<T>());
        bytes <= GATHER_MAX_BYTES && self.takes::<T>(ReduceOp::Sum, gathered)
    }

    /// Whether the one-shot kernel takes the all-reduce of `rows` x `cols` elements of `dtype`
    /// followed by `add_rms_norm`.
    pub fn takes_norm(&self, dtype: candle_core::DType, rows: usize, cols: usize) -> bool {
        kernel_name(dtype).is_some()
            && rows
                .saturating_mul(cols)
                .saturating_mul(dtype.size_in_bytes()) as u64
                <= self.shot.cap
    }

    /// Queues the all-reduce of `input` (`rows` x `cols`) followed by `add_rms_norm` with
    /// `residual` and `alpha`: `out` (2 x rows x cols) gets the sums, then the norms (see
    /// [`PeerReduce::takes_norm`]).
    #[allow(clippy::too_many_arguments)]
    pub fn all_reduce_add_rms_norm<T: RocmDType>(
        &self,
        dev: &RocmDevice,
        input: &impl DeviceSlice<T>,
        residual: &impl DeviceSlice<T>,
        alpha: &impl DeviceSlice<T>,
        out: &mut impl DeviceSliceMut<T>,
        shape: (usize, usize),
        eps: f32,
    ) -> Result<(), BackendError> {
        allreduce_add_rmsnorm_oneshot(dev, &self.shot, input, residual, alpha, out, shape, eps)
    }

    /// A typed error, and `comm` aborted, once a one-shot wait gave up on a peer; call it after
    /// the stream has drained (as `Comm::wait` does).
    pub fn check(&self, comm: &Communicator) -> Result<(), BackendError> {
        // SAFETY: `status` is a live pinned u32 that only the kernel writes (a whole aligned
        // word); a volatile read sees its latest value once the stream has drained.
        let timed_out = unsafe { std::ptr::read_volatile(self.status.as_ptr()) } != 0;
        if !timed_out {
            return Ok(());
        }
        // The communicator is unusable past this point; an abort that fails changes nothing.
        let _ = comm.abort();
        Err(BackendError::Rocm(
            RcclError::Timeout {
                op: "one-shot all-reduce",
                rank: self.shot.rank as usize,
                nranks: self.shot.world as usize,
                waited: Duration::from_nanos(self.shot.timeout_ns),
            }
            .into(),
        ))
    }
}

/// Every rank's record, in rank order (an RCCL all-gather of the bytes).
fn exchange(
    dev: &RocmDevice,
    comm: &Communicator,
    mine: &Record,
) -> Result<Vec<Record>, BackendError> {
    let world = comm.world_size();
    let send = dev.stream().clone_htod(&mine.to_bytes())?;
    let mut all = dev.alloc::<u8>(RECORD * world)?;
    comm.all_gather(&send, &mut all)?;
    let bytes = dev.stream().clone_dtoh(&all)?;
    bytes
        .chunks(RECORD)
        .map(Record::from_bytes)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| {
            BackendError::Rocm(rocm_safe::RocmError::InvalidArgument(
                "one-shot all-reduce set-up: a short record from the all-gather".into(),
            ))
        })
}

/// Maps every peer's allocation: the bases in rank order and the mappings to keep, or why not.
fn map_peers(
    dev: &RocmDevice,
    rank: usize,
    records: &[Record],
) -> Result<(ArBases, Vec<PeerMemory>), String> {
    let me = records.get(rank).ok_or("no record of this rank")?;
    let mut bases = ArBases::default();
    let mut peers = Vec::new();
    for (r, rec) in records.iter().enumerate() {
        if !rec.ready {
            return Err(format!("rank {r} has no shared memory"));
        }
        if rec.host != me.host {
            return Err(format!("rank {r} runs on another host"));
        }
        bases.base[r] = if r == rank {
            rec.address
        } else if rec.pid == me.pid {
            let rt = dev.device().runtime();
            let reach = rt
                .peer_access(dev.ordinal(), rec.ordinal as usize)
                .map_err(|e| e.to_string())?;
            if !reach {
                return Err(format!(
                    "device {} cannot reach device {} (rank {r})",
                    dev.ordinal(),
                    rec.ordinal
                ));
            }
            rec.address
        } else {
            let m = PeerMemory::open(dev.device(), &rec.handle)
                .map_err(|e| format!("rank {r}'s memory: {e}"))?;
            let base = m.device_ptr();
            peers.push(m);
            base
        };
    }
    Ok((bases, peers))
}

/// The lowest of every rank's `level` (an RCCL all-reduce, min): what every rank can do.
fn agree(dev: &RocmDevice, comm: &Communicator, level: u32) -> Result<u32, BackendError> {
    let send = dev.stream().clone_htod(&[level])?;
    let mut all = dev.alloc::<u32>(1)?;
    comm.all_reduce(&send, &mut all, ReduceOp::Min)?;
    Ok(dev.stream().clone_dtoh(&all)?.first().copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_round_trip_through_bytes() {
        let r = Record {
            handle: IpcHandle([7; 64]),
            pid: 4242,
            host: u64::MAX - 3,
            address: 0x7f00_1234_5678,
            ordinal: 3,
            ready: true,
        };
        assert_eq!(Record::from_bytes(&r.to_bytes()), Some(r));
        let not = Record { ready: false, ..r };
        assert_eq!(Record::from_bytes(&not.to_bytes()), Some(not));
        assert_eq!(Record::from_bytes(&r.to_bytes()[..90]), None);
    }

    #[test]
    fn the_host_id_is_stable_within_a_boot() {
        assert_eq!(host_id(), host_id());
    }
}
