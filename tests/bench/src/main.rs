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
//! [`runner::SAMPLES`] batches of the wall time of `iters` back-to-back calls and one
//! `Device::synchronize`, divided by `iters`, after warm-up; `iters` is sized so a batch takes
//! about [`runner::BATCH_SECONDS`]. Outputs are dropped inside the batch, so each backend's allocator
//! recycles them as it would in a model. The work counted is the fewest bytes the op must move
//! (every input element read once, every output element written once) or the flops of a
//! matrix product; latency rows time one small op followed by a synchronize each.
//!
//! # Output
//! One line per row on stdout, tab-separated:
//! `bench <group> <op> <shape> <dtype> <seconds> <work> <unit>`, `unit` one of `bytes`,
//! `flops`, `calls`, `tokens`, `sequences`; and a first line `device <description>`.
//! `--gpus N` runs only the rows of several GPUs instead (`mgpu`: all-reduce, copies between
//! GPUs, the tensor-parallel llama; one process per GPU), which `tests/bench/torch_mgpu.py`
//! times with PyTorch and `table.py --multi-gpu` tabulates.
//! `--write-gguf DIR` instead writes the synthetic GGUF decoders to files and prints their
//! paths (for llama.cpp's `llama-bench`, `tests/hip-on-cuda/llamacpp.sh`).

mod attention;
mod cli;
mod conv;
mod conv_models;
mod gguf;
mod latency;
mod matmul;
mod memory;
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
mod mgpu;
mod models;
mod quantized;
mod runner;

#[cfg(all(feature = "rocm", not(feature = "cuda")))]
use anyhow::Context;
use anyhow::Result;
use candle_core::{DType, Device};
use clap::Parser;

use cli::Cli;
use runner::Bench;

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

fn main() -> Result<()> {
    let cli = Cli::parse();
    anyhow::ensure!(
        cli.elements >= 1 << 18 && cli.elements % (1 << 18) == 0,
        "--elements must be a multiple of 2^18 = 262144, not {}",
        cli.elements
    );
    if let Some(dir) = &cli.write_gguf {
        let shape = if cli.tiny_gguf {
            gguf::GgufShape::Tiny
        } else {
            gguf::GgufShape::TinyLlama
        };
        return gguf::write_gguf_files(dir, shape);
    }
    if cli.rank_worker {
        return rank_worker(&cli);
    }
    let dev = if cli.cpu { Device::Cpu } else { device()? };
    println!("device\t{BACKEND}\t{:?}", dev.location());
    let b = Bench {
        dev,
        only: cli.only.clone(),
        shapes: cli.shape.clone(),
        n: cli.elements,
        profile: cli.profile,
    };
    if b.profile {
        models::decode(&b, cli.decode_tokens)?;
        gguf::gguf_decoder(&b, cli.decode_tokens, cli.decode_depth)?;
        return Ok(());
    }
    if let Some(gpus) = cli.gpus {
        return several_gpus(&b, &cli, gpus);
    }
    for dtype in [DType::F32, DType::BF16] {
        memory::memory_bound(&b, dtype)?;
    }
    memory::casts(&b)?;
    latency::latency(&b)?;
    matmul::matmul(&b)?;
    quantized::quantized(&b)?;
    conv::conv(&b)?;
    conv_models::conv_models(&b, cli.tiny_models)?;
    models::bert(&b)?;
    attention::attention(&b)?;
    models::decode(&b, cli.decode_tokens)?;
    gguf::gguf_decoder(&b, cli.decode_tokens, cli.decode_depth)?;
    gguf::gguf_file_rows(&b, &cli.gguf, cli.decode_tokens)?;
    Ok(())
}

/// `--gpus N`: the rows of several GPUs (`mgpu`), this process rank 0.
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn several_gpus(b: &Bench, cli: &Cli, gpus: usize) -> Result<()> {
    mgpu::run(b, cli, gpus)
}

/// A rank of `--gpus N` that rank 0 started.
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn rank_worker(cli: &Cli) -> Result<()> {
    mgpu::worker(cli)
}

/// Candle CUDA's build (and one without a backend) has no collectives of ours: `--gpus` is
/// the rocm build's.
#[cfg(not(all(feature = "rocm", not(feature = "cuda"))))]
fn several_gpus(_: &Bench, cli: &Cli, gpus: usize) -> Result<()> {
    // Read here too, so this build does not call the rocm build's options unused.
    let _ = (cli.tp_model, cli.tp_layers, cli.rank_worker);
    anyhow::bail!(
        "--gpus {gpus}: the rows of several GPUs are candle-rocm-bench's (the rocm build) only"
    )
}

/// See [`several_gpus`].
#[cfg(not(all(feature = "rocm", not(feature = "cuda"))))]
fn rank_worker(_: &Cli) -> Result<()> {
    anyhow::bail!(
        "--rank-worker: the rows of several GPUs are candle-rocm-bench's (the rocm build) only"
    )
}
