//! Kernel launch overhead through rocm-safe: host time per `LaunchArgs::launch` of an empty
//! kernel, and per launch including the wait for the GPU.
//!
//! Needs a HIP device and `ROCM_SAFE_TEST_MODULE` (a code object of
//! `rocm-safe/tests/kernels/test_kernels.hip`). Prints one line per measurement in the form
//! `launch_overhead <name> <microseconds per launch>`, so a harness can put it side by side
//! with other stacks (the HIP-on-CUDA harness compares it with a raw `cuLaunchKernel` loop).
//!
//! Usage: `launch_overhead [launches]` (default 100000). Exit code 1 with a message when no
//! device or module is available.

use std::process::ExitCode;
use std::time::Instant;

use rocm_safe::{Device, LaunchConfig, Module, RocmError, Stream};

fn run(launches: u32) -> Result<(), RocmError> {
    let path = std::env::var("ROCM_SAFE_TEST_MODULE").map_err(|_| {
        RocmError::InvalidArgument(
            "set ROCM_SAFE_TEST_MODULE to a code object of rocm-safe/tests/kernels/test_kernels.hip"
                .into(),
        )
    })?;
    let image = std::fs::read(&path)
        .map_err(|e| RocmError::InvalidArgument(format!("cannot read {path}: {e}")))?;
    let dev = Device::new(0)?;
    let stream = Stream::new(&dev)?;
    let module = Module::load(&dev, &image)?;
    let noop = module.function("noop")?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let launch = |n: u32| -> Result<f64, RocmError> {
        let start = Instant::now();
        for _ in 0..n {
            // SAFETY: `noop` takes no parameters and touches no memory.
            unsafe { stream.launch_builder(&noop).launch(cfg)? };
        }
        Ok(start.elapsed().as_secs_f64())
    };
    // Warm up: module load, first-launch costs.
    launch(1000)?;
    stream.synchronize()?;

    let enqueue = launch(launches)?;
    stream.synchronize()?;
    let start = Instant::now();
    launch(launches)?;
    stream.synchronize()?;
    let total = start.elapsed().as_secs_f64();
    let us = |s: f64| s * 1e6 / launches as f64;
    println!("device {} ({})", dev.info().name, dev.info().arch);
    println!("launch_overhead rocm_safe_enqueue_us {:.3}", us(enqueue));
    println!("launch_overhead rocm_safe_with_sync_us {:.3}", us(total));
    dev.check_err()
}

fn main() -> ExitCode {
    let launches = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    match run(launches) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("launch_overhead: {e}");
            ExitCode::FAILURE
        }
    }
}
