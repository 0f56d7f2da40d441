//! `mgpu_p2p` rows: `Tensor::to_device` from GPU 0 to GPU 1 (candle-core's transfer hook,
//! rocm-safe's peer copy: direct where the GPUs reach each other, else staged through pinned
//! memory), 1 MiB to 1 GiB of f32, in one process. PyTorch's rows time `tensor.to("cuda:1")`
//! with the same sizes and schedule.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};

use super::{iters_for, mib_label, sync_all, SAMPLES, WARMUP};
use crate::runner::{median, Bench};

/// The rows' group.
pub(crate) const GROUP: &str = "mgpu_p2p";
/// The op column.
const OP: &str = "to_device_0to1";
/// Sizes of the copied tensor, MiB.
pub(crate) const SIZES_MIB: [usize; 4] = [1, 16, 256, 1024];

/// Whether `--only` selects these rows.
pub(crate) fn wanted(b: &Bench) -> bool {
    b.wanted(GROUP, OP)
}

/// The rows: `b.dev` (GPU 0) to `dev1`; the work is the bytes copied.
pub(crate) fn rows(b: &Bench, dev1: &Device) -> Result<()> {
    let dev0 = &b.dev;
    for mib in SIZES_MIB {
        let bytes = mib << 20;
        let x = Tensor::ones(bytes / 4, DType::F32, dev0)?;
        let secs = one(&x, dev0, dev1, bytes).with_context(|| format!("{OP} {mib} MiB"))?;
        b.print(
            [GROUP, OP, &mib_label(bytes), "f32"],
            secs,
            bytes as f64,
            "bytes",
        );
    }
    Ok(())
}

/// Seconds per copy of `x` (`bytes` long) to `dev1`: [`WARMUP`] copies, then the median of
/// [`SAMPLES`] batches of `iters` copies closed by waiting for both devices.
fn one(x: &Tensor, dev0: &Device, dev1: &Device, bytes: usize) -> Result<f64> {
    for _ in 0..WARMUP {
        drop(x.to_device(dev1)?);
    }
    sync_all(&[dev0, dev1])?;
    let iters = iters_for(bytes);
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        for _ in 0..iters {
            drop(x.to_device(dev1)?);
        }
        sync_all(&[dev1, dev0])?;
        samples.push(t.elapsed().as_secs_f64() / iters as f64);
    }
    Ok(median(samples))
}
