//! Tensor-level integration tests for candle-rocm: Candle `Tensor`s, candle-nn layers and
//! autograd on the ROCm device (through the patched candle-core that `cargo xtask candle`
//! materialises), compared with the CPU.
//!
//! This library holds what the test files share. GPU tests are `#[ignore = "needs a HIP
//! device"]` and run in the HIP-on-CUDA harness with `--include-ignored`, in strict mode
//! (`CANDLE_ROCM_STRICT=1`: an op that would fall back to the CPU is an error).

use candle_core::{DType, Device, DeviceLocation, Error, Result, Shape, Tensor, WithDType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The ROCm device the GPU tests run on (ordinal 0), after checking that strict mode is on so
/// no test passes through a silent CPU fallback.
pub fn gpu() -> Result<Device> {
    assert!(
        candle_rocm::strict(),
        "GPU tests run in strict mode: set {}=1",
        candle_rocm::STRICT_VAR
    );
    candle_rocm::device(0).map_err(candle_core::Error::wrap)
}

/// Every dtype candle-rocm stores (candle-rocm's [`candle_rocm::STORED_DTYPES`]).
pub const STORED: [DType; 10] = candle_rocm::STORED_DTYPES;

/// Absolute tolerance for comparing results of `dtype` with values of magnitude about 1.
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-10,
        DType::F32 => 1e-5,
        DType::F16 => 5e-3,
        DType::BF16 => 3e-2,
        _ => 0.0,
    }
}

/// `t` as f64 (same device). candle-core 0.11.1's CPU conversion of f8e4m3 straight to f64
/// overflows the stack (its `to_f64` recurses), so f8e4m3 goes through f32, which holds every
/// f8e4m3 value exactly.
pub fn to_f64(t: &Tensor) -> Result<Tensor> {
    match t.dtype() {
        DType::F8E4M3 => t.to_dtype(DType::F32)?.to_dtype(DType::F64),
        _ => t.to_dtype(DType::F64),
    }
}

/// Largest absolute difference between two tensors of one shape, compared in f64 on the
/// host; NaNs in matching places count as equal, a NaN on one side only as infinite.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f64> {
    if a.shape() != b.shape() {
        candle_core::bail!("shapes differ: {:?} vs {:?}", a.shape(), b.shape())
    }
    let a = to_f64(a)?.flatten_all()?.to_vec1::<f64>()?;
    let b = to_f64(b)?.flatten_all()?.to_vec1::<f64>()?;
    Ok(a.iter().zip(&b).fold(0f64, |m, (x, y)| {
        let d = if x.is_nan() && y.is_nan() {
            0.0
        } else if x.is_nan() || y.is_nan() {
            f64::INFINITY
        } else {
            (x - y).abs()
        };
        m.max(d)
    }))
}

/// Fails with both values' context when `got` and `want` differ by more than `tol`
/// (scaled by the magnitude of `want`, at least 1).
pub fn assert_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) -> Result<()> {
    let scale = to_f64(want)?
        .abs()?
        .flatten_all()?
        .max(0)?
        .to_scalar::<f64>()?
        .max(1.0);
    let diff = max_abs_diff(got, want)?;
    if diff.is_nan() || diff > tol * scale {
        candle_core::bail!(
            "{what}: max |got - want| = {diff:e} exceeds {:e} (shape {:?}, dtype {:?})",
            tol * scale,
            want.shape(),
            got.dtype()
        )
    }
    Ok(())
}

/// Like [`assert_close`] for a result computed on the GPU: also checks that `got` lives on a
/// ROCm device and has `want`'s dtype, and compares on the host.
pub fn assert_gpu_close(got: &Tensor, want: &Tensor, tol: f64, what: &str) -> Result<()> {
    if !matches!(
        got.device().location(),
        DeviceLocation::Ext {
            backend: "rocm",
            ..
        }
    ) {
        candle_core::bail!(
            "{what}: result is on {}, not a ROCm device",
            got.device().location()
        )
    }
    if got.dtype() != want.dtype() {
        candle_core::bail!("{what}: dtype {:?}, want {:?}", got.dtype(), want.dtype())
    }
    assert_close(&got.to_device(&Device::Cpu)?, want, tol, what)
}

/// A seeded generator: every run of a test sees the same inputs.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` values uniform in `[lo, hi)`.
pub fn uniform(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// `n` values from a normal distribution of standard deviation `std` around 0 (Box-Muller).
pub fn normal(rng: &mut StdRng, n: usize, std: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u1: f64 = rng.random_range(f64::EPSILON..1.0);
            let u2: f64 = rng.random();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (z * std as f64) as f32
        })
        .collect()
}

/// The same host values as a CPU tensor and a copy of it on `dev`, both of `dtype`. The
/// conversion from f32 happens on the CPU, so both tensors hold identical bits.
pub fn host_pair(
    values: Vec<f32>,
    shape: impl Into<Shape>,
    dtype: DType,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let cpu = Tensor::from_vec(values, shape, &Device::Cpu)?.to_dtype(dtype)?;
    let gpu = cpu.to_device(dev)?;
    Ok((cpu, gpu))
}

/// [`host_pair`] for values already of their element type.
pub fn host_pair_of<T: WithDType>(
    values: Vec<T>,
    shape: impl Into<Shape>,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let cpu = Tensor::from_vec(values, shape, &Device::Cpu)?;
    let gpu = cpu.to_device(dev)?;
    Ok((cpu, gpu))
}

/// The error under candle's backtrace, context and path wrappers.
pub fn root_cause(e: &Error) -> &Error {
    match e {
        Error::WithBacktrace { inner, .. }
        | Error::Context { inner, .. }
        | Error::WithPath { inner, .. } => root_cause(inner),
        e => e,
    }
}

/// The candle-rocm device behind a `Device::Ext`, for what only the backend knows (e.g. its
/// allocator's counters); `None` for other devices.
pub fn rocm_device(dev: &Device) -> Option<&candle_rocm::RocmDevice> {
    dev.as_ext_device()?.as_any().downcast_ref()
}

/// Set in the child process that [`isolated`] starts.
const ISOLATED_VAR: &str = "CANDLE_ROCM_TESTS_ISOLATED";

/// Whether the calling test should run its body here: true in the child process, where it runs
/// alone. Otherwise runs `name` (this binary's test path) in a child process of its own and
/// fails unless it passed: the allocator's counters are per process, and other tests of a
/// binary allocate on the same device in parallel.
pub fn isolated(name: &str) -> Result<bool> {
    isolated_with(name, &[])
}

/// [`isolated`] with environment variables set for the child process: the way to run a test
/// under a setting that candle-rocm reads once per process (e.g. `CANDLE_ROCM_CONV`'s
/// convolution path), whatever the parent's environment says.
pub fn isolated_with(name: &str, env: &[(&str, &str)]) -> Result<bool> {
    if std::env::var_os(ISOLATED_VAR).is_some() {
        return Ok(true);
    }
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .envs(env.iter().copied())
        .args([
            "--exact",
            name,
            "--include-ignored",
            "--test-threads=1",
            "--nocapture",
        ])
        .env(ISOLATED_VAR, "1")
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    if !out.status.success() || !text.contains("1 passed") {
        candle_core::bail!("{name} failed in its own process ({})", out.status)
    }
    Ok(false)
}

/// Environment variable naming a file that tests append measurements to (`key<TAB>value`
/// lines); the HIP-on-CUDA harness sets it and prints the lines in its summary.
pub const REPORT_VAR: &str = "CANDLE_ROCM_TESTS_REPORT";

/// Prints a measurement and appends it to the [`REPORT_VAR`] file when that is set.
pub fn report(key: &str, value: &str) {
    eprintln!("{key}: {value}");
    if let Ok(path) = std::env::var(REPORT_VAR) {
        use std::io::Write;
        let line = format!("{key}\t{value}\n");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = written {
            eprintln!("cannot append to {path} ({REPORT_VAR}): {e}");
        }
    }
}

/// Every GGML block type but Q8_1 (Candle's type for activations, which candle-kernels cannot
/// dequantize): the types the quantized tests loop over. Q8_1 weights have a test of their own
/// on the device (`q8_1_dequantizes_and_multiplies_on_the_device`).
pub const GGML_TYPES_BUT_Q8_1: [candle_core::quantized::GgmlDType; 14] = {
    use candle_core::quantized::GgmlDType as G;
    [
        G::F32,
        G::F16,
        G::BF16,
        G::Q4_0,
        G::Q4_1,
        G::Q5_0,
        G::Q5_1,
        G::Q8_0,
        G::Q2K,
        G::Q3K,
        G::Q4K,
        G::Q5K,
        G::Q6K,
        G::Q8K,
    ]
};
