//! Project automation for candle-rocm, run as `cargo xtask <command>`.
//!
//! Commands:
//! - `bindgen [--check]`: regenerate `rocm-sys/src/bindings/hip.rs` from the HIP headers
//!   (Debian's `libamdhip64-dev`, or `$ROCM_PATH/include`); `--check` fails if the checked-in
//!   file differs from what would be generated.
//!
//! - `kernels [--check | --report]`: build the AMD code objects (see `kernels.rs`).
//! - `candle [--check]`: materialise the patched candle-core and candle-nn into `.candle/`
//!   (registry sources plus `patches/<crate>/*.patch`) and candle-core's own test suite into
//!   `tests/candle-suite/` (see `candle.rs`); `--check` fails if either is stale.
//! - `device-bundle`: build the stripped release test binaries the HIP-on-CUDA device harness
//!   runs into `.device-bundle/`, and print the device call.
//! - `demo [ARGS]`: the README demo (BERT sentence embeddings on the GPU or the CPU; see
//!   `demo.rs`), regenerating the patched Candle first if stale.
//! - `test [-- ARGS]`: the root workspace's tests, then (regenerating the patched Candle if
//!   stale) the `tests/` workspace's (see `test.rs`).
//! - `bench [--no-cuda]`: build the side-by-side benchmark (ours, Candle's CUDA backend from
//!   the same source, rocm-safe's launch overhead) into `.bench-bundle/` for
//!   `tests/hip-on-cuda/bench.sh`, which adds PyTorch eager and prints one table (see
//!   `bench.rs`).

mod bench;
mod bindgen_hip;
mod candle;
mod candle_cuda;
mod demo;
mod device_bundle;
mod kernels;
mod test;

use std::path::PathBuf;
use std::process::ExitCode;

const HELP: &str = "\
cargo xtask <command>

Commands:
  bindgen [--check]   regenerate rocm-sys/src/bindings/hip.rs from the HIP headers
                      (--check: fail if the checked-in file is stale)
  kernels [--check | --verify | --report [--kernels]] [--arch A,B] [--module M,N] [--out DIR]
                      compile the kernel modules for the AMD targets into kernels/
                      (--check: fail if sources changed; --verify: rebuild and compare
                      byte for byte; --report: resource table;
                      --out: plain objects for CANDLE_ROCM_KERNELS_DIR)
  candle [--check]    materialise the patched candle-core/candle-nn into .candle/ and
                      candle-core's test suite into tests/candle-suite/
                      (--check: fail if either is stale)
  demo [ARGS]         `candle` if stale, then run the demo (release build): BERT sentence
                      embeddings on the GPU or the CPU; ARGS: [--cpu] [--model DIR]
                      [--dtype f32|f16|bf16] [SENTENCES...]
  test [-- ARGS]      cargo test in the root workspace, then `candle` if stale, then
                      cargo test in the tests/ workspace (ARGS go to libtest)
  device-bundle       build the GPU test binaries for tests/hip-on-cuda/run.sh into
                      .device-bundle/ and print the device call
  bench [--no-cuda]   build ours, Candle CUDA (nvcc 13 from PyPI) and the launch benchmark
                      into .bench-bundle/ and print the device call (bench.sh: one table
                      with PyTorch eager too); --no-cuda skips the Candle CUDA build
  help                print this help
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("bench") => bench::run(&args[1..]),
        Some("bindgen") => parse_check(&args[1..]).and_then(bindgen_hip::run),
        Some("candle") => parse_check(&args[1..]).and_then(candle::run),
        Some("demo") => demo::run(&args[1..]),
        Some("device-bundle") if args.len() == 1 => device_bundle::run(),
        Some("kernels") => kernels::Opts::parse(&args[1..]).and_then(kernels::run),
        Some("test") => match &args[1..] {
            [] => test::run(&[]),
            [sep, rest @ ..] if sep == "--" => test::run(rest),
            other => Err(anyhow::anyhow!("unexpected arguments {other:?}\n\n{HELP}")),
        },
        None | Some("help") | Some("--help") | Some("-h") => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(anyhow::anyhow!("unknown command `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn parse_check(rest: &[String]) -> anyhow::Result<bool> {
    match rest {
        [] => Ok(false),
        [flag] if flag == "--check" => Ok(true),
        other => anyhow::bail!("unexpected arguments {other:?}\n\n{HELP}"),
    }
}

/// The workspace root, independent of the directory xtask was started from.
pub fn project_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}
