//! Runs `conversions.hip`: our compatibility headers' f16/bf16/fp8 conversions, compiled for the
//! host by the kernel toolchain's clang and checked against brute-force references.
//!
//! Needs the toolchain `cargo xtask kernels` uses (`bash kernels/install-toolchain.sh`, or a
//! ROCm install's clang via `ROCM_PATH`); `.ci/run` installs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn clang() -> PathBuf {
    match std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty()) {
        Some(rocm) => PathBuf::from(rocm).join("llvm/bin/clang++"),
        None => PathBuf::from("clang++-19"),
    }
}

#[test]
fn fp8_bf16_f16_conversions_match_references() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("candle-rocm-conversions-{}", std::process::id()));
    let out = Command::new(clang())
        .args(["-x", "hip", "--cuda-host-only", "-nogpuinc", "-nogpulib"])
        .args(["--offload-arch=gfx1100", "-std=c++17", "-O2"])
        .arg(format!("-I{}", dir.join("include").display()))
        .args(["-include", "candle_hip_compat.h", "-o"])
        .arg(&exe)
        .arg(dir.join("tests/conversions.hip"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): install the kernel toolchain with \
                 `bash kernels/install-toolchain.sh` or set ROCM_PATH",
                clang().display()
            )
        });
    assert!(
        out.status.success(),
        "compiling conversions.hip failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_file(&exe);
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success() && text.contains("bad=0"), "{text}");
}
