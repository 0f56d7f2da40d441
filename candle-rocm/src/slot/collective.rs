//! Collectives on `Tensor`s, for tensor-parallel models (`candle_rocm::collective`): a [`Comm`]
//! per rank, bound to the rank's ROCm device, and all-reduce, all-gather, reduce-scatter and
//! broadcast as `CustomOp1`s (the shape of Candle's `llama_multiprocess` example, whose
//! `AllReduce` op follows each row-parallel linear layer).
//!
//! ```no_run
//! use candle_core::{DType, Tensor};
//! use candle_rocm::collective::{Comm, ReduceOp};
//! use rocm_safe::rendezvous::Rendezvous;
//!
//! // One process per GPU, started with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
//! let rdzv = Rendezvous::from_env()?;
//! let comm = Comm::from_rendezvous(&rdzv, rdzv.rank())?;
//! let x = Tensor::ones((4, 8), DType::F32, comm.device())?;
//! let sum = comm.all_reduce(&x, ReduceOp::Sum)?; // every element: the world size
//! comm.wait()?; // a dead peer is an error here, not a hang
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;
use std::time::Duration;

use candle_core::backend::BackendStorage;
use candle_core::ext::{ExtStorage, FusedResult};
use candle_core::{CpuStorage, CustomOp1, CustomOp3, Device, Layout, Shape, Tensor, D};
use rocm_safe::rccl::{Communicator, DEFAULT_TIMEOUT};
use rocm_safe::rendezvous::Rendezvous;

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::ops::collective::{all_reduce_add_rms_norm, run, Collective};
use crate::ops::peer_reduce::PeerReduce;
use crate::storage::RocmStorage;

pub use rocm_safe::rccl::{ReduceOp, UniqueId};

/// A new RCCL unique id (rank 0 makes it and shares it with the others; [`Comm::from_rendezvous`]
/// does both), for ranks that meet another way: threads of one process, or a file.
pub fn unique_id() -> candle_core::Result<UniqueId> {
    let rt = rocm_safe::Runtime::get().map_err(BackendError::from)?;
    Ok(UniqueId::new(&rt).map_err(BackendError::from)?)
}

/// One rank's RCCL communicator, on the stream of its candle-rocm device. Cheap to clone.
///
/// Sums of f32, f16 and bf16 up to 4 MiB between GPUs of one host run as one kernel that reads
/// the peers' memory directly (a one-shot all-reduce, set up when the communicator is created;
/// `CANDLE_ROCM_PEER_ALLREDUCE=0` keeps RCCL for everything); the rest goes through RCCL.
#[derive(Clone)]
pub struct Comm {
    comm: Arc<Communicator>,
    peer: Option<Arc<PeerReduce>>,
    device: Device,
}

impl Comm {
    /// Joins communicator `id` as `rank` of `world_size` on `device` (a ROCm device from
    /// [`crate::device`]); every rank calls it with the same id. See
    /// [`Communicator::init_rank`] for the timeout on ranks that never arrive. Then sets up
    /// the one-shot all-reduce with the other ranks (see [`Comm`]).
    pub fn new(
        device: &Device,
        id: &UniqueId,
        rank: usize,
        world_size: usize,
    ) -> candle_core::Result<Comm> {
        Self::new_timeout(device, id, rank, world_size, DEFAULT_TIMEOUT)
    }

    /// [`Comm::new`] with `timeout` instead of [`DEFAULT_TIMEOUT`] for joining, for
    /// [`Comm::wait`] and for a one-shot all-reduce's wait for its peers.
    pub fn new_timeout(
        device: &Device,
        id: &UniqueId,
        rank: usize,
        world_size: usize,
        timeout: Duration,
    ) -> candle_core::Result<Comm> {
        let dev = rocm_device(device, "Comm::new")?;
        let comm = Arc::new(
            Communicator::init_rank_timeout(dev.stream(), id, rank, world_size, timeout).w()?,
        );
        let peer = PeerReduce::establish(dev, &comm, crate::settings::peer_allreduce()).w()?;
        Ok(Comm {
            comm,
            peer,
            device: device.clone(),
        })
    }

    /// The usual bootstrap: rank 0 creates the unique id and shares it through `rdzv`, and
    /// this rank joins on ROCm device `ordinal` (commonly its rank, or `LOCAL_RANK`).
    pub fn from_rendezvous(rdzv: &Rendezvous, ordinal: usize) -> candle_core::Result<Comm> {
        let device = crate::slot::device(ordinal).w()?;
        let dev = rocm_device(&device, "Comm::from_rendezvous")?;
        let id = UniqueId::exchange(dev.device().runtime(), rdzv, "candle-rocm/rccl-id").w()?;
        Self::new(&device, &id, rdzv.rank(), rdzv.world_size())
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.comm.world_size()
    }

    /// The device this rank's tensors must be on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The rocm-safe communicator underneath.
    pub fn communicator(&self) -> &Arc<Communicator> {
        &self.comm
    }

    /// Whether sums up to 4 MiB run as the one-shot kernel over the peers' memory (every rank
    /// agreed at set-up).
    pub fn has_peer_allreduce(&self) -> bool {
        self.peer.is_some()
    }

    /// Waits for the collectives queued so far, with the communicator's timeout: a peer that
    /// died is an error here (and the communicator is aborted), never a hang.
    pub fn wait(&self) -> candle_core::Result<()> {
        self.wait_timeout(self.comm.timeout())
    }

    /// [`Comm::wait`] with its own timeout.
    pub fn wait_timeout(&self, timeout: Duration) -> candle_core::Result<()> {
        self.comm.wait_timeout(timeout).w()?;
        match &self.peer {
            Some(p) => p.check(&self.comm).w(),
            None => Ok(()),
        }
    }

    /// Element-wise `op` over every rank's `x` (same shape on every rank).
    pub fn all_reduce(&self, x: &Tensor, op: ReduceOp) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(&self.op(Collective::AllReduce(op)))
    }

    /// `candle_nn::ops::add_rms_norm(&self.all_reduce(x, Sum)?, residual, alpha, eps)` in one
    /// launch, the step after a row-parallel layer of a tensor-parallel model (its residual
    /// add and the next layer's norm): `(sum, normed)` as `add_rms_norm` returns them. `None`
    /// where the one-shot kernel does not take it (no one-shot path, a dtype other than f32,
    /// f16 and bf16, operands that are not contiguous or of different dtypes, more than
    /// `ops::peer_reduce::MAX_BYTES`, 4 MiB): then compose the two. Every rank must take the
    /// same branch, which the same shapes and dtypes on every rank guarantee.
    pub fn all_reduce_add_rms_norm(
        &self,
        x: &Tensor,
        residual: &Tensor,
        alpha: &Tensor,
        eps: f32,
    ) -> candle_core::Result<Option<(Tensor, Tensor)>> {
        let Some(peer) = &self.peer else {
            return Ok(None);
        };
        let dtype = x.dtype();
        let same = residual.dtype() == dtype && alpha.dtype() == dtype;
        let contiguous = x.is_contiguous() && residual.is_contiguous() && alpha.is_contiguous();
        if !same || !contiguous || x.rank() == 0 || x.shape() != residual.shape() {
            return Ok(None);
        }
        let cols = x.dim(D::Minus1)?;
        if cols == 0 || alpha.dims() != [cols] {
            return Ok(None);
        }
        if !peer.takes_norm(dtype, x.elem_count() / cols, cols) {
            return Ok(None);
        }
        let op = AllReduceAddRmsNorm {
            peer: peer.clone(),
            eps,
        };
        let both = x.apply_op3_no_bwd(residual, alpha, &op)?;
        Ok(Some((both.get(0)?, both.get(1)?)))
    }

    /// Every rank's `x` concatenated along dimension 0, in rank order. Small ones of f32, f16
    /// and bf16 (at most 1 MiB gathered) run as the one-shot sum of each rank's `x` placed in
    /// zeros where the communicator has the one-shot path: exact, but a -0.0 arrives as +0.0.
    pub fn all_gather(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(&self.op(Collective::AllGather))
    }

    /// Element-wise `op` over every rank's `x`, split along dimension 0: this rank's block.
    pub fn reduce_scatter(&self, x: &Tensor, op: ReduceOp) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(&self.op(Collective::ReduceScatter(op)))
    }

    /// Rank `root`'s `x` on every rank (same shape on every rank).
    pub fn broadcast(&self, x: &Tensor, root: usize) -> candle_core::Result<Tensor> {
        x.apply_op1_no_bwd(&self.op(Collective::Broadcast { root }))
    }

    /// The op `Tensor::apply_op1` takes, for callers that keep their own op structs.
    pub fn op(&self, op: Collective) -> CollectiveOp {
        CollectiveOp {
            comm: self.comm.clone(),
            peer: self.peer.clone(),
            op,
        }
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Comm({:?} on {:?})", self.comm, self.device.location())
    }
}

/// A collective as a `CustomOp1`: runs on ROCm tensors of the communicator's device.
pub struct CollectiveOp {
    comm: Arc<Communicator>,
    peer: Option<Arc<PeerReduce>>,
    op: Collective,
}

impl CustomOp1 for CollectiveOp {
    fn name(&self) -> &'static str {
        match self.op {
            Collective::AllReduce(_) => "rccl-all-reduce",
            Collective::AllGather => "rccl-all-gather",
            Collective::ReduceScatter(_) => "rccl-reduce-scatter",
            Collective::Broadcast { .. } => "rccl-broadcast",
        }
    }

    /// A tensor on the CPU: only a world of one rank has a result (the input itself).
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        if self.comm.world_size() != 1 {
            return Err(BackendError::Invalid {
                op: self.op.name().to_string(),
                detail: "the tensor is on the CPU (or another device); collectives run on the \
                         communicator's ROCm device: move it there with to_device first"
                    .into(),
            })
            .w();
        }
        let shape = self.op.output_shape(l.shape(), 1).w()?;
        let Some((start, end)) = l.contiguous_offsets() else {
            return Err(candle_core::Error::RequiresContiguous { op: "collective" }.bt());
        };
        let out = match s {
            CpuStorage::U8(v) => CpuStorage::U8(v[start..end].to_vec()),
            CpuStorage::U32(v) => CpuStorage::U32(v[start..end].to_vec()),
            CpuStorage::I16(v) => CpuStorage::I16(v[start..end].to_vec()),
            CpuStorage::I32(v) => CpuStorage::I32(v[start..end].to_vec()),
            CpuStorage::I64(v) => CpuStorage::I64(v[start..end].to_vec()),
            CpuStorage::BF16(v) => CpuStorage::BF16(v[start..end].to_vec()),
            CpuStorage::F16(v) => CpuStorage::F16(v[start..end].to_vec()),
            CpuStorage::F32(v) => CpuStorage::F32(v[start..end].to_vec()),
            CpuStorage::F64(v) => CpuStorage::F64(v[start..end].to_vec()),
            other => {
                return Err(BackendError::UnsupportedDtype {
                    dtype: other.dtype(),
                    op: self.name(),
                })
                .w()
            }
        };
        Ok((out, shape))
    }

    fn ext_fwd(&self, storage: &dyn ExtStorage, layout: &Layout) -> FusedResult {
        let Some(s) = storage.as_any().downcast_ref::<RocmStorage>() else {
            return Ok(None);
        };
        let peer = self.peer.as_deref();
        let (slice, shape) = run(&s.device, &self.comm, peer, self.op, &s.slice, layout).w()?;
        Ok(Some((
            Box::new(RocmStorage::new(slice, s.device.clone())),
            shape,
        )))
    }
}

/// [`Comm::all_reduce_add_rms_norm`] as a `CustomOp3` on (x, residual, alpha).
struct AllReduceAddRmsNorm {
    peer: Arc<PeerReduce>,
    eps: f32,
}

impl CustomOp3 for AllReduceAddRmsNorm {
    fn name(&self) -> &'static str {
        "one-shot-all-reduce-add-rms-norm"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        Err(BackendError::Invalid {
            op: self.name().to_string(),
            detail: "an operand is on the CPU (or another device); the one-shot all-reduce \
                     runs on the communicator's ROCm device: move them there with to_device"
                .into(),
        })
        .w()
    }

    fn ext_fwd(
        &self,
        x: &dyn ExtStorage,
        lx: &Layout,
        r: &dyn ExtStorage,
        lr: &Layout,
        a: &dyn ExtStorage,
        la: &Layout,
    ) -> FusedResult {
        fn rocm(s: &dyn ExtStorage) -> Option<&RocmStorage> {
            s.as_any().downcast_ref::<RocmStorage>()
        }
        let (Some(x), Some(r), Some(a)) = (rocm(x), rocm(r), rocm(a)) else {
            return Ok(None);
        };
        let dev = &x.device;
        if !r.device.same_device(dev) || !a.device.same_device(dev) {
            return Err(BackendError::Invalid {
                op: self.name().to_string(),
                detail: "the operands are on different ROCm devices: move them to the \
                         communicator's device"
                    .into(),
            })
            .w();
        }
        let (slice, shape) = all_reduce_add_rms_norm(
            dev,
            &self.peer,
            (&x.slice, lx),
            (&r.slice, lr),
            (&a.slice, la),
            self.eps,
        )
        .w()?;
        Ok(Some((
            Box::new(RocmStorage::new(slice, dev.clone())),
            shape,
        )))
    }
}

/// The ROCm device behind a candle `Device`, or a typed error naming `op`.
fn rocm_device<'a>(device: &'a Device, op: &str) -> candle_core::Result<&'a RocmDevice> {
    device
        .as_ext_device()
        .and_then(|d| d.as_any().downcast_ref::<RocmDevice>())
        .ok_or_else(|| BackendError::Invalid {
            op: op.to_string(),
            detail: format!(
                "{:?} is not a ROCm device: pass one from candle_rocm::device(n)",
                device.location()
            ),
        })
        .w()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use candle_core::DType;

    /// Every collective on `Tensor`s, one thread per visible GPU (a world of one on one GPU),
    /// against host references. Runs where RCCL is (the harness: the RCCL double); `cargo test
    /// -p candle-rocm --features candle --lib -- --include-ignored collective`.
    #[test]
    #[ignore = "needs a HIP device and RCCL"]
    fn collectives_on_tensors_across_every_gpu() {
        let n = rocm_safe::Device::count().unwrap();
        let dev0 = crate::slot::device(0).unwrap();
        let rt = rocm_device(&dev0, "test")
            .unwrap()
            .device()
            .runtime()
            .clone();
        let id = UniqueId::new(&rt).unwrap();
        let threads: Vec<_> = (0..n)
            .map(|rank| {
                std::thread::spawn(move || {
                    let dev = crate::slot::device(rank).unwrap();
                    let comm = Comm::new(&dev, &id, rank, n).unwrap();
                    let rows = 2 * n;
                    let x = (Tensor::ones((rows, 3), DType::F32, &dev).unwrap()
                        * (rank + 1) as f64)
                        .unwrap();
                    let total = (n * (n + 1) / 2) as f32;
                    let sum = comm.all_reduce(&x, ReduceOp::Sum).unwrap();
                    assert_eq!(sum.to_vec2::<f32>().unwrap(), vec![vec![total; 3]; rows]);
                    let half = x.to_dtype(DType::BF16).unwrap();
                    let max = comm.all_reduce(&half, ReduceOp::Max).unwrap();
                    assert_eq!(max.dtype(), DType::BF16);
                    let max = max.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap();
                    assert_eq!(max, vec![vec![n as f32; 3]; rows]);
                    let all = comm.all_gather(&x).unwrap();
                    assert_eq!(all.dims(), &[rows * n, 3]);
                    let col: Vec<f32> =
                        all.to_vec2::<f32>().unwrap().iter().map(|r| r[0]).collect();
                    let want: Vec<f32> = (0..n).flat_map(|r| vec![(r + 1) as f32; rows]).collect();
                    assert_eq!(col, want);
                    let mine = comm.reduce_scatter(&x, ReduceOp::Sum).unwrap();
                    assert_eq!(mine.dims(), &[2, 3]);
                    assert_eq!(mine.to_vec2::<f32>().unwrap(), vec![vec![total; 3]; 2]);
                    let b = comm.broadcast(&x, 0).unwrap();
                    assert_eq!(b.to_vec2::<f32>().unwrap(), vec![vec![1.0; 3]; rows]);
                    // Not contiguous, not reducible: typed errors before RCCL is called.
                    let e = comm.all_reduce(&x.t().unwrap(), ReduceOp::Sum).unwrap_err();
                    assert!(e.to_string().contains("contiguous"), "{e}");
                    let f8 = x.to_dtype(DType::F8E4M3).unwrap();
                    let e = comm.all_reduce(&f8, ReduceOp::Sum).unwrap_err();
                    assert!(e.to_string().contains("cannot reduce"), "{e}");
                    comm.wait().unwrap();
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn a_cpu_device_is_refused_with_the_remedy() {
        let e = rocm_device(&Device::Cpu, "Comm::new").unwrap_err();
        assert!(e.to_string().contains("candle_rocm::device(n)"), "{e}");
    }
}
