//! Memory-bound ops against the card's own copy bandwidth, in one run (DESIGN "Targets":
//! elementwise and reduction kernels at >= 85% of the measured copy bandwidth on large
//! tensors).
//!
//! Each op runs on 2^26-element tensors through the `BackendStorage` calls a model makes;
//! the time is the median of 20 runs between device events after 3 warm-up runs. The bytes
//! counted are the fewest the op must move: every input element read once and every output
//! element written once. Prints one line per op in the form
//! `bandwidth <op> <GB/s> <ratio to copy>`, the copy first.
//!
//! Usage: `bandwidth` (needs a HIP device; with the HIP-on-CUDA harness, also
//! `CANDLE_ROCM_KERNELS_DIR`). Exit code 1 with a message when no device is usable.

use std::process::ExitCode;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{Add, Exp, ReduceOp};
use candle_core::{DType, Layout, Shape};
use candle_rocm::{RocmDevice, RocmStorage};
use rocm_safe::Event;

/// Elements per tensor: 256 MiB of f32, far larger than any cache.
const N: usize = 1 << 26;
const RUNS: usize = 20;

/// Median device time in seconds of `f` over [`RUNS`] runs, after warming up.
fn time(
    dev: &RocmDevice,
    mut f: impl FnMut() -> candle_core::Result<()>,
) -> candle_core::Result<f64> {
    let w = |e: rocm_safe::RocmError| candle_core::Error::wrap(e);
    for _ in 0..3 {
        f()?;
    }
    let mut times = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let start = Event::new(dev.device(), true).map_err(w)?;
        let end = Event::new(dev.device(), true).map_err(w)?;
        start.record(dev.stream()).map_err(w)?;
        f()?;
        end.record(dev.stream()).map_err(w)?;
        end.synchronize().map_err(w)?;
        times.push(start.elapsed_ms(&end).map_err(w)? as f64 / 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[RUNS / 2])
}

fn run() -> candle_core::Result<()> {
    let dev = <RocmDevice as BackendDevice>::new(0)?;
    println!("device {:?}", dev);
    let shape = Shape::from(N);
    let l = Layout::contiguous(N);
    let a = dev.rand_uniform(&shape, DType::F32, -1.0, 1.0)?;
    let b = dev.rand_uniform(&shape, DType::F32, -1.0, 1.0)?;
    let mut out: RocmStorage = dev.zeros_impl(&shape, DType::F32)?;
    let gb = |bytes: usize, s: f64| bytes as f64 / s / 1e9;
    let f32b = 4usize;

    // The ceiling: a device-to-device copy of the same size (read + write).
    let copy = time(&dev, || a.copy_strided_src(&mut out, 0, &l))?;
    let ceiling = gb(2 * N * f32b, copy);
    println!("bandwidth copy_f32 {ceiling:.1} 1.00");
    let report = |name: &str, bytes: usize, s: f64| {
        let v = gb(bytes, s);
        println!("bandwidth {name} {v:.1} {:.2}", v / ceiling);
    };

    let t = time(&dev, || a.affine(&l, 1.5, 0.5).map(drop))?;
    report("affine_f32", 2 * N * f32b, t);
    let t = time(&dev, || a.unary_impl::<Exp>(&l).map(drop))?;
    report("exp_f32", 2 * N * f32b, t);
    let t = time(&dev, || a.binary_impl::<Add>(&b, &l, &l).map(drop))?;
    report("add_f32", 3 * N * f32b, t);
    // A row vector broadcast over 4096 x (N / 4096): the rhs is read once per row.
    let (rows, cols) = (4096usize, N / 4096);
    let l2 = Layout::contiguous((rows, cols));
    let bcast = Layout::new(Shape::from((rows, cols)), vec![0, 1], 0);
    let t = time(&dev, || a.binary_impl::<Add>(&b, &l2, &bcast).map(drop))?;
    report("add_bcast_f32", (2 * N + cols) * f32b, t);
    let t = time(&dev, || a.to_dtype(&l, DType::BF16).map(drop))?;
    report("cast_f32_bf16", N * (f32b + 2), t);
    let t = time(&dev, || a.reduce_op(ReduceOp::Sum, &l2, &[1]).map(drop))?;
    report("sum_rows_f32", N * f32b + rows * f32b, t);
    let t = time(&dev, || a.reduce_op(ReduceOp::Max, &l2, &[1]).map(drop))?;
    report("max_rows_f32", N * f32b + rows * f32b, t);
    // A transposed copy (what `contiguous()` on a transposed tensor does).
    let tl = Layout::contiguous((cols, rows)).transpose(0, 1)?;
    let t = time(&dev, || a.copy_strided_src(&mut out, 0, &tl))?;
    report("transpose_copy_f32", 2 * N * f32b, t);
    dev.synchronize()
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bandwidth: {e}");
            ExitCode::FAILURE
        }
    }
}
