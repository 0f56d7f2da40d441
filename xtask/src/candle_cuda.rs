//! The Candle-CUDA build of `cargo xtask bench`: the benchmark source built against unmodified
//! crates.io Candle 0.11.1 (`candle-core`, `candle-nn`, `candle-transformers`) with its `cuda`
//! feature, so Candle's own CUDA backend runs next to ours on the same NVIDIA device.
//!
//! The device machine has the CUDA driver and PyTorch's CUDA 13 libraries but no Rust, so the
//! binary is built here, on a machine without a GPU or a CUDA toolkit:
//!
//! 1. **Toolchain.** nvcc 13.0 comes from PyPI, installed once with
//!    `pip install --no-deps --target target/cuda-toolchain` (a stamp file records the list;
//!    a change reinstalls). The pinned wheels ([`WHEELS`]) all unpack into one CUDA root,
//!    `nvidia/cu13/{bin,include,lib,nvvm}`:
//!    `nvidia-cuda-nvcc==13.0.88` (nvcc, ptxas, fatbinary, nvlink), `nvidia-nvvm==13.0.88`
//!    (cicc, libdevice), `nvidia-cuda-crt==13.0.88` (`include/crt`),
//!    `nvidia-cuda-runtime==13.0.96` (the runtime headers and `libcudart.so.13`) and
//!    `nvidia-cuda-cccl==13.0.85` (CUB/Thrust/libcu++ under `include/cccl`, which nvcc.profile
//!    adds). Exactly 13.0: the device driver (CUDA 13.0) rejects PTX from a newer nvcc
//!    (13.0 writes PTX ISA 9.0).
//! 2. **Link stubs.** cudarc 0.19 (Candle's `dynamic-linking` feature) links `-lcuda -lnvrtc
//!    -lcurand -lcublas -lcublasLt` and candle-kernels links `-lcudart`. libcuda comes with the
//!    driver and the others would be ~600 MB of wheels, so, as a CUDA toolkit does in
//!    `lib64/stubs`, the link uses stub libraries in `nvidia/cu13/lib/stubs`: every function
//!    cudarc declares for that library (read from cudarc's `src/<lib>/sys/mod.rs`), empty, under
//!    the real library's soname ([`STUBS`]), so the binary's `NEEDED` entries name the real
//!    libraries. `libcudart.so` links to the wheel's real `libcudart.so.13`. Linked
//!    `--as-needed`, the bench needs `libcuda.so.1` (the driver's), `libcublas.so.13`,
//!    `libcurand.so.10` and `libcudart.so.13` (plus libstdc++, for the static kernels); on the
//!    device, `tests/hip-on-cuda/cuda_libs.sh` puts PyTorch's copies on `LD_LIBRARY_PATH`.
//! 3. **Package.** `target/candle-cuda-bench/Cargo.toml` (a workspace of its own): the bench
//!    source as `[[bin]] candle-cuda-bench`, `tests/bench/Cargo.toml`'s `[dependencies]` minus
//!    ours ([`ROCM_ONLY`]) with Candle pinned to `=0.11.1`, and a default `cuda` feature turning on the
//!    three crates' `cuda` features (the source picks `Device::new_cuda(0)` under
//!    `cfg(feature = "cuda")`). Its `Cargo.lock` is seeded from `tests/Cargo.lock`, so shared
//!    dependencies keep their versions.
//! 4. **Build.** `cargo build --release` with nvcc on `PATH` and in `NVCC` (cudaforge, and
//!    cudarc's `cuda-version-from-build-system`, which runs `nvcc --version`), `CUDA_HOME` (cudarc's
//!    link search: `lib`, `lib/stubs`) and `CUDA_COMPUTE_CAP=90` (nothing probes for a GPU).
//!    cudaforge turns 90 into `sm_90a`: candle-kernels' PTX targets `sm_90a` (JIT-compiled by
//!    the driver when first loaded, on H100/H200 only) and its statically linked GGUF/MoE
//!    kernels are `sm_90a` SASS. The release profile strips symbols.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

/// The PyPI wheels of the CUDA 13.0 toolchain, installed together with `--no-deps`.
pub const WHEELS: &[&str] = &[
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
];

/// The compute capability the kernels are built for (H100 and H200: sm_90, as `sm_90a`).
pub const COMPUTE_CAP: &str = "90";

/// The crates.io Candle release the build pins.
pub const CANDLE_VERSION: &str = "0.11.1";

/// The Candle crates whose `cuda` feature the build turns on.
const CANDLE_CRATES: &[&str] = &["candle-core", "candle-nn", "candle-transformers"];

/// Link stubs: (cudarc `src/<module>/sys/mod.rs`, `-l` name, soname of the CUDA 13 library).
pub const STUBS: &[(&str, &str, &str)] = &[
    ("driver", "cuda", "libcuda.so.1"),
    ("nvrtc", "nvrtc", "libnvrtc.so.13"),
    ("curand", "curand", "libcurand.so.10"),
    ("cublas", "cublas", "libcublas.so.13"),
    ("cublaslt", "cublasLt", "libcublasLt.so.13"),
    ("cudnn", "cudnn", "libcudnn.so.9"),
];

/// The binary's name (and the generated package's).
const NAME: &str = "candle-cuda-bench";

/// The name of the build with the `cudnn` feature.
pub const CUDNN_NAME: &str = "candle-cuda-cudnn-bench";

/// Builds `main_rs` against crates.io Candle with the `cuda` feature and returns the stripped
/// release binary, `target/candle-cuda-bench/target/release/candle-cuda-bench`.
///
/// With `cudnn`, the same package is built with its `cudnn` feature too (candle-core's
/// `cudnn`: convolutions through cuDNN), into the same target directory (only candle-core and
/// what depends on it rebuild), and the binary is copied to `candle-cuda-cudnn-bench` next to
/// the manifest, since the next build overwrites `release/candle-cuda-bench`.
pub fn build(root: &Path, main_rs: &Path, cudnn: bool) -> Result<PathBuf> {
    let main_rs =
        std::path::absolute(main_rs).with_context(|| format!("resolving {}", main_rs.display()))?;
    ensure!(main_rs.is_file(), "{} does not exist", main_rs.display());
    let cuda_home = install_toolchain(&root.join("target/cuda-toolchain"))?;

    let dir = root.join("target").join(NAME);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let bench_toml = root.join("tests/bench/Cargo.toml");
    let text = std::fs::read_to_string(&bench_toml)
        .with_context(|| format!("reading {}", bench_toml.display()))?;
    let deps = dependencies(&text).with_context(|| format!("in {}", bench_toml.display()))?;
    let manifest = dir.join("Cargo.toml");
    write_if_changed(&manifest, &manifest_text(&main_rs, &deps))?;
    let lock = dir.join("Cargo.lock");
    if !lock.exists() {
        std::fs::copy(root.join("tests/Cargo.lock"), &lock)
            .with_context(|| format!("seeding {} from tests/Cargo.lock", lock.display()))?;
    }

    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let cudarc = cudarc_dir(&cargo, &manifest)?;
    write_stubs(&cuda_home, &cudarc)?;

    let target_dir = dir.join("target");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let bin = cuda_home.join("bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let path =
        std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(&path)))
            .context("joining PATH")?;
    let what = format!(
        "cargo build --release --manifest-path {} (CUDA_COMPUTE_CAP={COMPUTE_CAP}, nvcc {})",
        manifest.display(),
        bin.join("nvcc").display()
    );
    eprintln!("== {what}");
    let mut command = Command::new(&cargo);
    command
        .current_dir(&dir)
        .args(["build", "--release", "--bin", NAME])
        .args(if cudnn {
            &["--features", "cudnn"][..]
        } else {
            &[][..]
        })
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .env("PATH", path)
        .env("NVCC", bin.join("nvcc"))
        .env("CUDA_HOME", &cuda_home)
        .env("CUDA_COMPUTE_CAP", COMPUTE_CAP)
        // cudaforge runs nvcc on half the cores by default; the kernels are most of the build.
        .env("CUDAFORGE_THREADS", threads.to_string());
    // Other toolkits' variables would add link paths (cudarc) or override the version.
    for var in [
        "CUDA_PATH",
        "CUDA_ROOT",
        "CUDA_TOOLKIT_ROOT_DIR",
        "CUDNN_LIB",
        "CUDARC_CUDA_VERSION",
    ] {
        command.env_remove(var);
    }
    let status = command
        .status()
        .with_context(|| format!("running {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    let exe = target_dir.join("release").join(NAME);
    ensure!(exe.is_file(), "{} was not built", exe.display());
    if !cudnn {
        return Ok(exe);
    }
    let copy = dir.join(CUDNN_NAME);
    std::fs::copy(&exe, &copy)
        .with_context(|| format!("copying {} to {}", exe.display(), copy.display()))?;
    Ok(copy)
}

/// Installs [`WHEELS`] into `dir` unless its stamp lists exactly them; returns the CUDA root
/// (`dir/nvidia/cu13`).
fn install_toolchain(dir: &Path) -> Result<PathBuf> {
    let cuda_home = dir.join("nvidia/cu13");
    let stamp = dir.join(".stamp");
    let want = WHEELS.join("\n") + "\n";
    if std::fs::read_to_string(&stamp).is_ok_and(|have| have == want) {
        return Ok(cuda_home);
    }
    eprintln!(
        "== pip install --target {} {} (nvcc 13.0 from PyPI)",
        dir.display(),
        WHEELS.join(" ")
    );
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("clearing {}", dir.display()))?;
    }
    let status = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-deps",
            "--only-binary=:all:",
            "--target",
        ])
        .arg(dir)
        .args(WHEELS)
        .status()
        .context("running python3 -m pip (the CUDA toolchain comes from PyPI)")?;
    if !status.success() {
        bail!("pip install of the CUDA toolchain failed ({status})");
    }
    let nvcc = cuda_home.join("bin/nvcc");
    ensure!(
        nvcc.is_file(),
        "{} missing after pip install",
        nvcc.display()
    );
    // Real toolkits have the unversioned name candle-kernels' `-lcudart` needs.
    let cudart = cuda_home.join("lib/libcudart.so");
    std::os::unix::fs::symlink("libcudart.so.13", &cudart)
        .with_context(|| format!("linking {}", cudart.display()))?;
    std::fs::write(&stamp, want).with_context(|| format!("writing {}", stamp.display()))?;
    Ok(cuda_home)
}

/// The bench's dependencies that only its `rocm` build uses (our path crates: the backend, and
/// for the rows of several GPUs the demo's tensor-parallel llama and rocm-safe's rendezvous),
/// left out of the Candle-CUDA manifest.
pub const ROCM_ONLY: &[&str] = &["candle-rocm", "candle-rocm-demo", "rocm-safe"];

/// The `[dependencies]` lines of the bench manifest, minus [`ROCM_ONLY`], with the Candle
/// crates pinned to `=`[`CANDLE_VERSION`].
fn dependencies(manifest: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut section = String::new();
    for line in manifest.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            section = trimmed.to_string();
            ensure!(
                !section.starts_with("[dependencies."),
                "`{section}`: write dependencies as `name = ...` lines under [dependencies]"
            );
            continue;
        }
        if section != "[dependencies]" || trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((name, value)) = trimmed.split_once('=') else {
            bail!("unexpected line in [dependencies]: `{line}`");
        };
        let (name, value) = (name.trim(), value.trim());
        if ROCM_ONLY.contains(&name) {
            continue;
        }
        ensure!(
            !value
                .split(['{', ','])
                .any(|kv| kv.trim().starts_with("path")),
            "`{name}` is a path dependency; the Candle-CUDA build takes crates.io ones only"
        );
        let value = if CANDLE_CRATES.contains(&name) {
            pin_candle(name, value)?
        } else {
            value.to_string()
        };
        out.push(format!("{name} = {value}"));
    }
    for name in CANDLE_CRATES {
        ensure!(
            out.iter().any(|l| l.starts_with(&format!("{name} "))),
            "[dependencies] lacks {name}"
        );
    }
    Ok(out)
}

/// `value` (`"0.11.1"` or `{ version = "0.11.1", ... }`) with the version `=`[`CANDLE_VERSION`].
fn pin_candle(name: &str, value: &str) -> Result<String> {
    let pinned = format!("\"={CANDLE_VERSION}\"");
    if value.starts_with('"') {
        return Ok(pinned);
    }
    let start = value
        .find("version")
        .with_context(|| format!("{name} = {value}: no version"))?;
    let rest = &value[start..];
    let open = rest
        .find('"')
        .with_context(|| format!("{name}: unquoted version"))?;
    let close = rest[open + 1..]
        .find('"')
        .with_context(|| format!("{name}: unterminated version"))?;
    let end = start + open + 1 + close + 1;
    Ok(format!(
        "{}version = {pinned}{}",
        &value[..start],
        &value[end..]
    ))
}

/// The generated package's manifest.
fn manifest_text(main_rs: &Path, deps: &[String]) -> String {
    let cuda: Vec<String> = CANDLE_CRATES
        .iter()
        .map(|c| format!("\"{c}/cuda\""))
        .collect();
    let main_rs = main_rs
        .display()
        .to_string()
        .replace('\\', "\\\\")
        .replace('"', "\\\"");
    format!(
        "# Generated by `cargo xtask bench` (xtask/src/candle_cuda.rs); edits are overwritten.\n\
         # The bench source against crates.io Candle {CANDLE_VERSION} with its CUDA backend.\n\
         [package]\n\
         name = \"{NAME}\"\n\
         version = \"0.0.0\"\n\
         edition = \"2021\"\n\
         publish = false\n\n\
         [workspace]\n\n\
         [[bin]]\n\
         name = \"{NAME}\"\n\
         path = \"{main_rs}\"\n\n\
         [features]\n\
         default = [\"cuda\"]\n\
         cuda = [{}]\n\
         cudnn = [\"cuda\", \"candle-core/cudnn\"]\n\n\
         [dependencies]\n\
         {}\n\n\
         [profile.release]\n\
         debug = false\n\
         strip = \"symbols\"\n",
        cuda.join(", "),
        deps.join("\n")
    )
}

/// cudarc's source directory, from `cargo metadata` on the generated package.
fn cudarc_dir(cargo: &str, manifest: &Path) -> Result<PathBuf> {
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--manifest-path"])
        .arg(manifest)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("parsing cargo metadata")?;
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?;
    let cudarc = packages
        .iter()
        .find(|p| p["name"] == "cudarc")
        .context("cargo metadata: cudarc is not a dependency (is the cuda feature on?)")?;
    let path = cudarc["manifest_path"]
        .as_str()
        .context("cargo metadata: cudarc has no manifest_path")?;
    Path::new(path)
        .parent()
        .map(Path::to_path_buf)
        .context("cudarc's manifest_path has no parent")
}

/// Writes the [`STUBS`] into `cuda_home/lib/stubs`, recompiling one only when its source changed.
fn write_stubs(cuda_home: &Path, cudarc: &Path) -> Result<()> {
    let dir = cuda_home.join("lib/stubs");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for (module, lib, soname) in STUBS {
        let sys = cudarc.join("src").join(module).join("sys/mod.rs");
        let text =
            std::fs::read_to_string(&sys).with_context(|| format!("reading {}", sys.display()))?;
        let names = extern_fns(&text);
        ensure!(
            !names.is_empty(),
            "no extern functions in {}",
            sys.display()
        );
        let mut source = format!(
            "/* Link stub for {soname}: the functions {} declares. */\n",
            sys.display()
        );
        for name in &names {
            source.push_str(&format!("void {name}(void) {{}}\n"));
        }
        let c = dir.join(format!("lib{lib}.c"));
        let so = dir.join(format!("lib{lib}.so"));
        if so.exists() && std::fs::read_to_string(&c).is_ok_and(|old| old == source) {
            continue;
        }
        eprintln!(
            "== link stub {} ({soname}, {} functions)",
            so.display(),
            names.len()
        );
        std::fs::write(&c, &source).with_context(|| format!("writing {}", c.display()))?;
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-nostdlib", "-o"])
            .arg(&so)
            .arg(format!("-Wl,-soname,{soname}"))
            .arg(&c)
            .status()
            .context("running cc for a link stub")?;
        if !status.success() {
            // Leave no source behind that would mark the stub current.
            let _ = std::fs::remove_file(&c);
            bail!("cc failed building {} ({status})", so.display());
        }
    }
    Ok(())
}

/// The names of the functions in `extern "C" { ... }` blocks (cudarc's `dynamic-linking` path).
fn extern_fns(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line == "extern \"C\" {" {
            inside = true;
        } else if inside && line == "}" {
            inside = false;
        } else if let Some(rest) = line.strip_prefix("fn ").filter(|_| inside) {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Writes `text` to `path` unless it already holds it (keeps cargo's fingerprints).
fn write_if_changed(path: &Path, text: &str) -> Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_drop_rocm_and_pin_candle() -> Result<()> {
        let toml = "[package]\nname = \"x\"\n\n[dependencies]\nanyhow = \"1\"\n\
                    candle-core = \"0.11.1\"\n# c\ncandle-nn = { version = \"0.11\", features = [\"a\"] }\n\
                    candle-rocm = { path = \"../x\", optional = true }\n\
                    candle-rocm-demo = { path = \"../demo\", default-features = false, optional = true }\n\
                    rocm-safe = { path = \"../../rocm-safe\", optional = true }\n\
                    candle-transformers = \"0.11.1\"\n\n[lints.rust]\nx = \"warn\"\n";
        let deps = dependencies(toml)?;
        assert_eq!(
            deps,
            [
                "anyhow = \"1\"",
                "candle-core = \"=0.11.1\"",
                "candle-nn = { version = \"=0.11.1\", features = [\"a\"] }",
                "candle-transformers = \"=0.11.1\"",
            ]
        );
        Ok(())
    }

    #[test]
    fn dependencies_refuse_path_deps() {
        let toml = "[dependencies]\ncandle-core = \"0.11.1\"\nfoo = { path = \"../foo\" }\n";
        assert!(dependencies(toml).is_err());
    }

    #[test]
    fn extern_fns_reads_only_extern_blocks() {
        let text = "pub unsafe fn cuInit(flags: u32) -> CUresult {\n    #[cfg(not(feature = \"dynamic-loading\"))]\n    {\n        extern \"C\" {\n            fn cuInit(flags: u32) -> CUresult;\n        }\n        cuInit(flags)\n    }\n}\nfn load<F: Copy>(name: &str) -> F {\n}\n";
        assert_eq!(extern_fns(text), ["cuInit"]);
    }
}
