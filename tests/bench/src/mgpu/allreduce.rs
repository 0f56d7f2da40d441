//! `mgpu_allreduce` rows: RCCL's all-reduce (sum) over every rank through candle-rocm's
//! `Comm::all_reduce` on `Tensor`s (out of place: a new tensor per call, from the caching
//! allocator, as a tensor-parallel model calls it), 8 KiB to 1 GiB in f32, f16 and bf16. Sums
//! up to 4 MiB between GPUs that reach each other run as candle-rocm's one-shot kernel, unless
//! `CANDLE_ROCM_PEER_ALLREDUCE=0` (bench.sh runs the small sizes both ways).
//!
//! The figure is nccl-tests' bus bandwidth: `algbw = bytes / time`, `busbw = algbw * 2(n-1)/n`
//! for `n` ranks, so the row's work is `bytes * 2(n-1)/n` (table.py prints work / time).
//! PyTorch's rows (`torch.distributed.all_reduce`, NCCL, in place) use the same sizes and
//! schedule.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{DType, Tensor};
use candle_rocm::collective::{Comm, ReduceOp};

use super::{iters_for, size_label, timed, WARMUP};
use crate::runner::{name, Bench};

/// The rows' group.
pub(crate) const GROUP: &str = "mgpu_allreduce";
/// Sizes of the reduced tensor, KiB: 8 (one token's hidden state of a 4096-wide f16 model), 64
/// and 256, then powers of 4 from 1 MiB to 1 GiB.
pub(crate) const SIZES_KIB: [usize; 9] = [8, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576];
/// The dtypes of the rows.
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// The op column of a world of `n` ranks.
fn op(n: usize) -> String {
    format!("all_reduce_{n}gpu")
}

/// Whether `--only` selects these rows.
pub(crate) fn wanted(b: &Bench, n: usize) -> bool {
    b.wanted(GROUP, &op(n))
}

/// The rows, on every rank (`print` on rank 0).
pub(crate) fn rows(b: &Bench, comm: &Comm, print: bool) -> Result<()> {
    let n = comm.world_size();
    if !wanted(b, n) {
        return Ok(());
    }
    let op = op(n);
    for dtype in DTYPES {
        for bytes in SIZES_KIB.map(|k| k << 10) {
            let x = Tensor::ones(bytes / dtype.size_in_bytes(), dtype, comm.device())?;
            let secs = one(comm, &x, bytes)
                .with_context(|| format!("{op} {} {}", size_label(bytes), name(dtype)))?;
            if print {
                let bus = bytes as f64 * 2.0 * (n - 1) as f64 / n as f64;
                b.print(
                    [GROUP, &op, &size_label(bytes), name(dtype)],
                    secs,
                    bus,
                    "bytes",
                );
            }
        }
    }
    Ok(())
}

/// Seconds per all-reduce of `x` (`bytes` long), as the module comment says.
fn one(comm: &Comm, x: &Tensor, bytes: usize) -> Result<f64> {
    for _ in 0..WARMUP {
        drop(comm.all_reduce(x, ReduceOp::Sum)?);
    }
    comm.wait()?;
    let iters = iters_for(bytes);
    timed(comm, iters, || {
        let t = Instant::now();
        for _ in 0..iters {
            drop(comm.all_reduce(x, ReduceOp::Sum)?);
        }
        // A blocking synchronize ends the batch, as nccl-tests and PyTorch's row time it (the
        // wait's polls could end it later); then the wait, which returns at once on the idle
        // stream, reports an asynchronous error. A dead peer hangs the synchronize: bench.sh
        // bounds the run.
        comm.device().synchronize()?;
        comm.wait()?;
        Ok(t.elapsed().as_secs_f64())
    })
}
