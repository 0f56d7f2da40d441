//! Runs `conversions.hip`: our compatibility headers' f16/bf16/fp8 conversions, compiled for the
//! host by the kernel toolchain's clang and checked against brute-force references.
//!
//! Needs the toolchain `cargo xtask kernels` uses (`bash kernels/install-toolchain.sh`, or a
//! ROCm install's clang via `ROCM_PATH`); `.ci/run` installs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod host_program;

use std::path::PathBuf;

#[test]
fn fp8_bf16_f16_conversions_match_references() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    host_program::build_and_check(
        "conversions",
        &[
            "-x",
            "hip",
            "--cuda-host-only",
            "-nogpuinc",
            "-nogpulib",
            "--offload-arch=gfx1100",
            "-std=c++17",
            "-O2",
            "-include",
            "candle_hip_compat.h",
        ],
        &dir.join("tests/conversions.hip"),
    );
}
