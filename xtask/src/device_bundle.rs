//! `cargo xtask device-bundle`: everything the HIP-on-CUDA harness runs, in one folder.
//!
//! Builds stripped release binaries of the GPU test targets (rocm-safe's `gpu` and
//! `gpu_faults`, candle-rocm's `gpu`, `parity` and `robustness`), the launch-overhead and
//! bandwidth benchmarks and `rocm-info`, copies them to `.device-bundle/bin`
//! (ignored by git, well under the device tool's 64 MiB carry limit), and prints the device
//! call that runs them with `tests/hip-on-cuda/run.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::project_root;

/// (package, cargo target selection) pairs to build.
const BUILDS: &[(&str, &[&str])] = &[
    (
        "rocm-safe",
        &[
            "--test",
            "gpu",
            "--test",
            "gpu_faults",
            "--bench",
            "launch_overhead",
        ],
    ),
    (
        "candle-rocm",
        &[
            "--bin",
            "rocm-info",
            "--test",
            "gpu",
            "--test",
            "parity",
            "--test",
            "robustness",
            "--bench",
            "bandwidth",
        ],
    ),
];

const BUNDLE: &str = ".device-bundle";
const LIMIT: u64 = 64 << 20;

/// Builds the bundle.
pub fn run() -> Result<()> {
    let root = project_root();
    let out = root.join(BUNDLE).join("bin");
    if out.exists() {
        std::fs::remove_dir_all(&out).with_context(|| format!("clearing {}", out.display()))?;
    }
    std::fs::create_dir_all(&out)?;
    let mut total = 0u64;
    // candle-kernels' CUDA sources, for run.sh to compile with nvcc (the device machine has
    // no cargo registry). Carried, never committed.
    let candle = crate::kernels::candle_sources(&root)?;
    let dest = root.join(BUNDLE).join("candle-kernels");
    if dest.exists() {
        std::fs::remove_dir_all(&dest)?;
    }
    copy_dir(&candle, &dest)?;
    for (package, selection) in BUILDS {
        for (name, exe) in build(&root, package, selection)? {
            // Several crates have a `gpu` test: name every binary `<package>.<target>`.
            let name = format!("{package}.{name}");
            let dest = out.join(&name);
            std::fs::copy(&exe, &dest)
                .with_context(|| format!("copying {} to {}", exe.display(), dest.display()))?;
            let status = Command::new("strip")
                .arg(&dest)
                .status()
                .context("running strip (install binutils)")?;
            if !status.success() {
                bail!("strip failed on {}", dest.display());
            }
            let size = std::fs::metadata(&dest)?.len();
            total += size;
            eprintln!("  {name:<28} {:>6.1} MiB", size as f64 / (1 << 20) as f64);
        }
    }
    if total > LIMIT / 2 {
        bail!(
            "the bundle is {total} bytes; keep it well under the device tool's 64 MiB carry limit"
        );
    }
    eprintln!(
        "\n{} ready ({:.1} MiB). Run it on the device with:\n\
         \n  device run  kind=nvidia-h100-x1  carry=[\"{BUNDLE}\"]\n  command:    bash tests/hip-on-cuda/run.sh\n\
         \n(add `--sanitize` to the command for compute-sanitizer memcheck and racecheck runs)",
        out.display(),
        total as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()))?;
        } else {
            std::fs::copy(&p, to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Runs one release build and returns (target name, executable) for each artifact.
fn build(root: &Path, package: &str, selection: &[&str]) -> Result<Vec<(String, PathBuf)>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = Command::new(cargo)
        .current_dir(root)
        .args([
            "build",
            "--release",
            "--message-format=json-render-diagnostics",
            "-p",
            package,
        ])
        .args(selection)
        // The harness loads kernels nvcc built for its GPU from CANDLE_ROCM_KERNELS_DIR; the
        // embedded AMD code objects would only make every binary 8 MiB larger.
        .args(if package == "candle-rocm" {
            &["--no-default-features"][..]
        } else {
            &[]
        })
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("cargo build -p {package} {} failed", selection.join(" "));
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let (Some(exe), Some(name)) = (msg["executable"].as_str(), msg["target"]["name"].as_str())
        else {
            continue;
        };
        found.push((name.to_string(), PathBuf::from(exe)));
    }
    if found.is_empty() {
        bail!(
            "cargo build -p {package} {} produced no executable",
            selection.join(" ")
        );
    }
    Ok(found)
}
