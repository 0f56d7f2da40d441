//! Project automation for candle-rocm, run as `cargo xtask <command>`.
//!
//! The command line is declared in `flags.rs` (`cargo xtask --help`, `cargo xtask <command>
//! --help`); each command lives in its own module:
//! - `bindgen [--check]`: regenerate `rocm-sys/src/bindings/hip.rs` from the HIP headers
//!   (Debian's `libamdhip64-dev`, or `$ROCM_PATH/include`); `--check` fails if the checked-in
//!   file differs from what would be generated.
//! - `kernels [--check | --verify | --report [--kernels]] [--arch A,B] [--module M,N]
//!   [--out DIR]`: build the AMD code objects (see `kernels/`).
//! - `candle [--check]`: materialise the patched candle-core, candle-nn and candle-transformers
//!   into `.candle/` (registry sources plus `patches/<crate>/*.patch`) and candle-core's own
//!   test suite into `tests/candle-suite/` (see `candle/`); `--check` fails if either is stale.
//! - `device-bundle`: build the stripped release test binaries the HIP-on-CUDA device harness
//!   runs into `.device-bundle/`, and print the device call.
//! - `demo [ARGS]`: the README demo (BERT sentence embeddings on the GPU or the CPU; see
//!   `demo.rs`), regenerating the patched Candle first if stale.
//! - `test [--no-setup | --setup-only] [-- ARGS]`: install what the tests need when missing
//!   (see `setup.rs`), then the root workspace's tests, then (regenerating the patched Candle if
//!   stale) the `tests/` workspace's (see `test.rs`).
//! - `bench [--no-cuda]`: build the side-by-side benchmark (ours, Candle's CUDA backend from
//!   the same source, rocm-safe's launch overhead) into `.bench-bundle/` for
//!   `tests/hip-on-cuda/bench.sh`, which adds PyTorch eager and prints one table (see
//!   `bench.rs`); with llama.cpp's source (`llamacpp.rs`) for `llama-bench` on the same GGUF
//!   files unless `--no-llamacpp`.
//! - `llamacpp`: only the llama.cpp part of the bench bundle: llama-cpp-python's sdist from
//!   PyPI (sha256-pinned), its vendored llama.cpp trimmed to `llama-bench` with the CUDA and
//!   CPU backends, packed as `.bench-bundle/llama.cpp.tar.xz` (see `llamacpp.rs`).

mod bench;
mod bindgen_hip;
mod candle;
mod candle_cuda;
mod demo;
mod device_bundle;
mod flags;
mod kernels;
mod llamacpp;
mod setup;
mod test;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory as _, Parser as _};

use flags::{Cli, Command};

fn main() -> ExitCode {
    let Cli { command } = Cli::parse();
    let result = match command {
        Some(Command::Bench(b)) => bench::run(b.no_cuda, b.no_llamacpp),
        Some(Command::Bindgen(c)) => bindgen_hip::run(c.check),
        Some(Command::Candle(c)) => candle::run(c.check),
        Some(Command::Demo(d)) => demo::run(&d.args),
        Some(Command::DeviceBundle) => device_bundle::run(),
        Some(Command::Kernels(k)) => kernels::run(&k),
        Some(Command::Llamacpp) => llamacpp::run_command(),
        Some(Command::Test(t)) => test::run(&t),
        None => Cli::command().print_help().map_err(anyhow::Error::from),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root, independent of the directory xtask was started from.
pub fn project_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}
