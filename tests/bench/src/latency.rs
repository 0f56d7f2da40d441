//! The latency rows (group `lat`): one small op and a synchronize, and the host's enqueue time.

use std::time::Instant;

use anyhow::Result;
use candle_core::Tensor;

use crate::runner::{median, Bench, SAMPLES};

/// Small-op latency (op + synchronize) and host enqueue time per launch.
pub(crate) fn latency(b: &Bench) -> Result<()> {
    let dev = &b.dev;
    let x = Tensor::randn(0f32, 1.0, 1024, dev)?;
    let y = Tensor::randn(0f32, 1.0, 1024, dev)?;
    if b.wanted("lat", "exp_sync") {
        let s = b.time(|| {
            let z = x.exp()?;
            dev.synchronize()?;
            Ok(z)
        })?;
        b.print(["lat", "exp_sync", "1024", "f32"], s, 1.0, "calls");
    }
    if b.wanted("lat", "add_sync") {
        let s = b.time(|| {
            let z = x.add(&y)?;
            dev.synchronize()?;
            Ok(z)
        })?;
        b.print(["lat", "add_sync", "1024", "f32"], s, 1.0, "calls");
    }
    if b.wanted("lat", "enqueue") {
        // Host time of many launches with no synchronize inside the loop: on small tensors
        // the device keeps up, so this is the host's cost per op.
        let n = 20_000;
        let mut samples = Vec::new();
        for _ in 0..SAMPLES {
            dev.synchronize()?;
            let t = Instant::now();
            for _ in 0..n {
                drop(x.add(&y)?);
            }
            samples.push(t.elapsed().as_secs_f64() / n as f64);
            dev.synchronize()?;
        }
        b.print(
            ["lat", "enqueue_add", "1024", "f32"],
            median(samples),
            1.0,
            "calls",
        );
    }
    Ok(())
}
