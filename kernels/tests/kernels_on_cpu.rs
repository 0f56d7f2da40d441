//! Runs our own kernel sources on the CPU: `tests/emu/emu.h` emulates the HIP/CUDA execution
//! model in plain C++ (blocks one after another, the threads of a block as cooperative fibers
//! that meet at `__syncthreads` and wave shuffles, `__shared__` as static storage), and the
//! drivers in `tests/emu/` launch `hip/elementwise.hip` and `hip/rows.hip` with
//! candle-rocm's launch geometry and argument structs and check every result against host
//! references. `rows.hip` runs three ways: its CUDA path (32-lane `__shfl_xor_sync`) and its AMD
//! path (`ds_bpermute`) with wave 32 and wave 64.
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

/// Builds `tests/emu/<driver>` with `defines` for the host, runs it and checks it reports no
/// mismatch (`bad=0`).
fn build_and_run(driver: &str, tag: &str, defines: &[&str]) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("candle-rocm-emu-{tag}-{}", std::process::id()));
    let out = Command::new(clang())
        // -O0: the drivers build in about 2 s each and run in seconds; -O1 builds 5x slower.
        .args(["-x", "c++", "-std=c++17", "-O0"])
        .args(defines)
        .arg(format!("-I{}", dir.join("include").display()))
        .arg("-o")
        .arg(&exe)
        .arg(dir.join("tests/emu").join(driver))
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
        "compiling {driver} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let _ = std::fs::remove_file(&exe);
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && text.contains("bad=0"),
        "{text}{}",
        String::from_utf8_lossy(&run.stderr)
    );
}

#[test]
fn elementwise_kernels_match_references_on_cpu() {
    build_and_run("elementwise_test.cpp", "elementwise", &[]);
}

#[test]
fn rows_kernels_match_references_on_cpu_cuda_path() {
    build_and_run("rows_test.cpp", "rows-cuda", &[]);
}

#[test]
fn rows_kernels_match_references_on_cpu_amd_wave32() {
    build_and_run("rows_test.cpp", "rows-amd32", &["-DEMU_AMD_WAVE=32"]);
}

#[test]
fn rows_kernels_match_references_on_cpu_amd_wave64() {
    build_and_run("rows_test.cpp", "rows-amd64", &["-DEMU_AMD_WAVE=64"]);
}
