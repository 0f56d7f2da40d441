//! `cargo xtask bench [--no-cuda] [--no-llamacpp]`: everything the side-by-side benchmark needs, in one folder
//! for one device call.
//!
//! 1. `cargo xtask candle` when the patched Candle is missing or stale;
//! 2. builds `candle-rocm-bench` (tests/bench, our backend through the patched Candle) in
//!    release without the embedded AMD code objects (the harness loads nvcc-built kernels);
//! 3. builds the same source against unmodified crates.io Candle 0.11.1 with its `cuda`
//!    feature (`candle-cuda-bench`, see `candle_cuda.rs`; `--no-cuda` skips it), and again with
//!    candle-core's `cudnn` feature too (`candle-cuda-cudnn-bench`: its convolutions on cuDNN);
//! 4. builds rocm-safe's launch-overhead benchmark;
//! 5. packs llama.cpp's source, trimmed to `llama-bench` (`llamacpp.rs`; `--no-llamacpp` skips
//!    it), which the device side builds with CUDA and runs on the same GGUF files as ours;
//! 6. packs them (binaries xz-compressed) with candle-kernels' CUDA sources into
//!    `.bench-bundle/` and prints the device call: `bash tests/hip-on-cuda/bench.sh`, which
//!    runs ours, Candle CUDA, PyTorch eager and llama.cpp on the same GPU and prints one table
//!    (`tests/bench/table.py`), and on a machine with two GPUs (kind `nvidia-h100-x2`) the rows
//!    of several GPUs too (`candle-rocm-bench --gpus 2`, whose tensor-parallel llama is the
//!    demo's library, against `tests/bench/torch_mgpu.py`). Keep its `bench-<date>-<gpu>.md`
//!    under `bench/results/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::device_bundle::pack;
use crate::project_root;

/// The bench bundle's folder, relative to the project root (git-ignored).
pub const BUNDLE: &str = ".bench-bundle";
/// The device tool carries 64 MiB with the working tree; leave room for the repository.
const LIMIT: u64 = 48 << 20;

/// Builds the bench bundle; `no_cuda` (`--no-cuda`) skips the Candle CUDA builds,
/// `no_llamacpp` (`--no-llamacpp`) llama.cpp's source.
pub fn run(no_cuda: bool, no_llamacpp: bool) -> Result<()> {
    let cuda = !no_cuda;
    let root = project_root();
    if let Err(why) = crate::candle::check_root(&root) {
        eprintln!("== regenerating the patched Candle ({why:#})");
        crate::candle::run(false)?;
    }
    let bundle = root.join(BUNDLE);
    if bundle.exists() {
        std::fs::remove_dir_all(&bundle)
            .with_context(|| format!("clearing {}", bundle.display()))?;
    }
    let bin = bundle.join("bin");
    std::fs::create_dir_all(&bin)?;
    crate::device_bundle::copy_dir(
        &crate::kernels::candle_sources(&root)?,
        &bundle.join("candle-kernels"),
    )?;

    let mut total = 0;
    eprintln!("== candle-rocm-bench (tests/bench, release, no embedded kernels)");
    // The executable's path from cargo's messages, wherever CARGO_TARGET_DIR puts it (a fixed
    // tests/target/release path would pack a stale binary when the variable is set).
    cargo(
        &root,
        &[
            "build",
            "--release",
            "--manifest-path",
            "tests/Cargo.toml",
            "-p",
            "candle-rocm-bench",
            "--bin",
            "candle-rocm-bench",
            "--no-default-features",
            "--features",
            "rocm",
            "--message-format=json-render-diagnostics",
        ],
    )
    .and_then(|out| executable(&out, "candle-rocm-bench"))
    .and_then(|exe| pack(&exe, &bin, "candle-rocm-bench"))
    .map(|size| total += size)?;
    eprintln!("== rocm-safe launch_overhead");
    cargo(
        &root,
        &[
            "build",
            "--release",
            "-p",
            "rocm-safe",
            "--bench",
            "launch_overhead",
            "--message-format=json-render-diagnostics",
        ],
    )
    .and_then(|out| executable(&out, "launch_overhead"))
    .and_then(|exe| pack(&exe, &bin, "rocm-safe.launch_overhead"))
    .map(|size| total += size)?;
    if cuda {
        eprintln!("== candle-cuda-bench (crates.io Candle 0.11.1, cuda feature)");
        let main_rs = root.join("tests/bench/src/main.rs");
        let exe = crate::candle_cuda::build(&root, &main_rs, false)?;
        total += pack(&exe, &bin, "candle-cuda-bench")?;
        eprintln!("== candle-cuda-cudnn-bench (the same with candle-core's cudnn feature)");
        let exe = crate::candle_cuda::build(&root, &main_rs, true)?;
        total += pack(&exe, &bin, crate::candle_cuda::CUDNN_NAME)?;
    }
    if !no_llamacpp {
        eprintln!(
            "== llama.cpp (llama-cpp-python {}'s sdist, trimmed to llama-bench)",
            crate::llamacpp::VERSION
        );
        total += crate::llamacpp::pack_into(&bundle)?;
    }
    if total > LIMIT {
        bail!(
            "the bench bundle is {total} bytes; keep it under {LIMIT} so the working tree still \
             fits the device tool's 64 MiB carry limit"
        );
    }
    eprintln!(
        "\n{BUNDLE} ready ({:.1} MiB). Run it on the device with:\n\
         \n  device run  kind=nvidia-h100-x1  carry=[\"{BUNDLE}\"]\n  command:    bash tests/hip-on-cuda/bench.sh\n\
         \nand keep the table it writes ($OUT/bench-<date>-<gpu>.md) under bench/results/.\n\
         With kind=nvidia-h100-x2 it also runs the rows of several GPUs (only them:\n\
         BENCH_ONLY=mgpu BENCH_TILED=0 BENCH_LLAMACPP=0 bash tests/hip-on-cuda/bench.sh).",
        total as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// Runs cargo in `root` and returns its stdout; fails with the command line.
fn cargo(root: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = Command::new(cargo)
        .current_dir(root)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo")?;
    if !out.status.success() {
        bail!("cargo {} failed ({})", args.join(" "), out.status);
    }
    Ok(out.stdout)
}

/// The executable of target `name` in cargo's JSON messages.
fn executable(messages: &[u8], name: &str) -> Result<PathBuf> {
    for line in String::from_utf8_lossy(messages).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" && msg["target"]["name"] == name {
            if let Some(exe) = msg["executable"].as_str() {
                return Ok(PathBuf::from(exe));
            }
        }
    }
    bail!("cargo built no executable named {name}")
}
