//! Host programs of the kernel tests: C++/HIP sources compiled for the CPU with the kernel
//! toolchain's clang (`bash kernels/install-toolchain.sh`, or a ROCm install's clang via
//! `ROCM_PATH`), run, and required to exit 0 and report no mismatch (`bad=0`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The kernel toolchain's clang++.
pub fn clang() -> PathBuf {
    match std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty()) {
        Some(rocm) => PathBuf::from(rocm).join("llvm/bin/clang++"),
        None => PathBuf::from("clang++-19"),
    }
}

/// Compiles `src` with `args` (the kernels crate's `include/` is on the include path), runs
/// it, and panics with its output unless it exits 0 and prints `bad=0`. `tag` names the
/// temporary executable.
pub fn build_and_check(tag: &str, args: &[&str], src: &Path) {
    let (clean, text) = build_and_report(tag, args, src);
    assert!(clean, "{text}");
}

/// Compiles `src` with `args` and runs it: whether it exited 0 and printed `bad=0`, and its
/// output. Panics only when it cannot be compiled or started.
pub fn build_and_report(tag: &str, args: &[&str], src: &Path) -> (bool, String) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::temp_dir().join(format!("candle-rocm-{tag}-{}", std::process::id()));
    let out = Command::new(clang())
        .args(args)
        .arg(format!("-I{}", dir.join("include").display()))
        .arg("-o")
        .arg(&exe)
        .arg(src)
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
        "compiling {} failed:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe)
        .output()
        .unwrap_or_else(|e| panic!("running {} failed: {e}", exe.display()));
    let _ = std::fs::remove_file(&exe);
    let text = String::from_utf8_lossy(&run.stdout);
    let clean = run.status.success() && text.contains("bad=0");
    (
        clean,
        format!("{text}{}", String::from_utf8_lossy(&run.stderr)),
    )
}
