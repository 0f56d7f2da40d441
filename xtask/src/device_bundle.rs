//! `cargo xtask device-bundle`: everything the HIP-on-CUDA harness runs, in one folder.
//!
//! Builds stripped release binaries of the GPU test targets (rocm-safe's `gpu`, `gpu_faults`,
//! `graph_gpu`, `miopen_gpu`, `peer_gpu` and the RCCL ones, candle-rocm's `gpu`, `parity` and `robustness`), the launch-overhead and
//! bandwidth benchmarks, `rocm-info`, and the integration tests of the Tensor-level test
//! workspace `tests/` (candle-rocm-tests, the generated candle-suite and the demo's GPU tests),
//! packs them stripped and xz-compressed into `.device-bundle/bin` (ignored by git, well under
//! the device tool's 64 MiB carry limit; `tests/hip-on-cuda/setup.sh` unpacks them), and prints
//! the device call that runs them with `tests/hip-on-cuda/run.sh`.

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
            "--test",
            "graph_gpu",
            "--test",
            "graph_mode_gpu",
            "--test",
            "miopen_gpu",
            "--test",
            "rccl_gpu",
            "--test",
            "rccl_faults",
            "--test",
            "rccl_multiprocess",
            "--test",
            "peer_gpu",
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
    // Before the long builds: the Tensor-level tests need the generated sources.
    check_tests_workspace(&root)?;
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
            total += add(&out, package, &name, &exe)?;
        }
    }
    for (package, name, exe) in build_tests_workspace(&root)? {
        total += add(&out, &package, &name, &exe)?;
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

/// Packs `exe` into the bundle as `<package>.<target>` (several crates have a `gpu` test),
/// stripped and xz-compressed (`tests/hip-on-cuda/setup.sh` unpacks it), and returns the
/// compressed size.
fn add(out: &Path, package: &str, target: &str, exe: &Path) -> Result<u64> {
    pack(exe, out, &format!("{package}.{target}"))
}

/// Strips a copy of `exe` and writes it xz-compressed to `bin/<name>.xz` (the device tool
/// carries 64 MiB; the test binaries are 70 MiB stripped, under 20 compressed); returns the
/// compressed size.
pub(crate) fn pack(exe: &Path, bin: &Path, name: &str) -> Result<u64> {
    let plain = bin.join(name);
    std::fs::copy(exe, &plain).with_context(|| {
        format!(
            "copying {} to {} (was it built?)",
            exe.display(),
            plain.display()
        )
    })?;
    for (tool, args) in [("strip", &[][..]), ("xz", &["-T0", "-6", "-f"][..])] {
        let status = Command::new(tool)
            .args(args)
            .arg(&plain)
            .status()
            .with_context(|| format!("running {tool} (install binutils and xz-utils)"))?;
        if !status.success() {
            bail!("{tool} failed on {}", plain.display());
        }
    }
    let packed = bin.join(format!("{name}.xz"));
    let size = std::fs::metadata(&packed)
        .with_context(|| format!("reading {}", packed.display()))?
        .len();
    eprintln!(
        "  {name:<40} {:>6.1} MiB xz",
        size as f64 / (1 << 20) as f64
    );
    Ok(size)
}

/// Copies the directory `from` to `to`, recursively.
pub(crate) fn copy_dir(from: &Path, to: &Path) -> Result<()> {
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

/// The Tensor-level test workspace (`tests/Cargo.toml`, members `.` and `candle-suite`).
const TESTS_MANIFEST: &str = "tests/Cargo.toml";

/// (package, test target) of that workspace left out of the bundle: tests of a machine
/// without a GPU, which CI runs (bundle size better spent on GPU tests).
const HOST_ONLY_TESTS: &[(&str, &str)] = &[
    ("candle-rocm-tests", "no_gpu"),
    ("candle-rocm-tests", "ext_cpu"),
    // The flash-attn API on the CPU and ext-cpu (its GPU tests are in `gpu`).
    ("candle-rocm-tests", "flash_attn"),
    ("candle-rocm-demo", "gguf_dequantized"),
    // The tensor-parallel llama on the CPU (its GPU test is `tp_gpu`), and its GGUF slicing.
    ("candle-rocm-demo", "tp_cpu"),
    ("candle-rocm-demo", "tp_gguf"),
    // Runs the bench binary on the CPU through cargo's CARGO_BIN_EXE path.
    ("candle-rocm-bench", "cpu_smoke"),
];

/// Builds the integration tests (`tests/*.rs` targets) of every member of the Tensor-level
/// test workspace in release, without the embedded AMD code objects, and returns (package,
/// target name, executable) for each. The members' library unit-test harnesses, which hold no
/// tests, and [`HOST_ONLY_TESTS`] are left out.
fn build_tests_workspace(root: &Path) -> Result<Vec<(String, String, PathBuf)>> {
    check_tests_workspace(root)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = root.join(TESTS_MANIFEST);
    // Package names by manifest path: an artifact message names its package only through a
    // package id, whose format cargo does not promise.
    let metadata = Command::new(&cargo)
        .current_dir(root)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(&manifest)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !metadata.status.success() {
        bail!("cargo metadata --manifest-path {TESTS_MANIFEST} failed");
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&metadata.stdout).context("parsing cargo metadata")?;
    let packages: Vec<(String, String)> = metadata["packages"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .filter_map(|p| {
                    Some((
                        p["manifest_path"].as_str()?.to_string(),
                        p["name"].as_str()?.to_string(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let output = Command::new(&cargo)
        .current_dir(root)
        .args(["build", "--release", "--manifest-path"])
        .arg(&manifest)
        .args([
            "--workspace",
            "--tests",
            // Each member's default `embed-kernels` off: the harness loads nvcc-built kernels.
            "--no-default-features",
            "--message-format=json-render-diagnostics",
        ])
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo build")?;
    if !output.status.success() {
        bail!("cargo build --release --manifest-path {TESTS_MANIFEST} --workspace --tests failed");
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let (Some(exe), Some(name), Some(manifest_path)) = (
            msg["executable"].as_str(),
            msg["target"]["name"].as_str(),
            msg["manifest_path"].as_str(),
        ) else {
            continue;
        };
        let integration_test = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "test"));
        if !integration_test {
            continue;
        }
        let Some((_, package)) = packages.iter().find(|(m, _)| m == manifest_path) else {
            bail!("{manifest_path} is not a package of {TESTS_MANIFEST}");
        };
        if HOST_ONLY_TESTS.contains(&(package.as_str(), name)) {
            continue;
        }
        found.push((package.clone(), name.to_string(), PathBuf::from(exe)));
    }
    if found.is_empty() {
        bail!("cargo build --manifest-path {TESTS_MANIFEST} --workspace --tests produced no test binary");
    }
    Ok(found)
}

/// Fails, saying what to run, when the Tensor-level test workspace cannot load: it lists the
/// generated suite as a member and patches candle-core, candle-nn and candle-transformers with
/// the generated sources.
fn check_tests_workspace(root: &Path) -> Result<()> {
    for (dir, what) in [
        ("tests/candle-suite", "candle-core's test suite"),
        (".candle/candle-core", "the patched candle-core"),
        (
            ".candle/candle-transformers",
            "the patched candle-transformers",
        ),
    ] {
        if !root.join(dir).join("Cargo.toml").is_file() {
            bail!(
                "{dir} is missing, so the Tensor-level test workspace ({TESTS_MANIFEST}) cannot \
                 load: run `cargo xtask candle` first (it generates {what} there)"
            );
        }
    }
    Ok(())
}
