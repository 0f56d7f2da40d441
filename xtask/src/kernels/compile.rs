//! One compile: the flags of a (module, target), the compiler call with its occupancy remarks
//! (kept next to the cached object, to check `--report`'s own computation of them), and the
//! cache of compiled objects keyed by source hash.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_rocm_kernels::{Module, Source};

use super::sources::{module_source, source_hash};
use super::toolchain::Toolchain;
use super::CANDLE_KERNELS_VERSION;

/// Compiler flags for one module and target (recorded in the manifest and part of the source
/// hash).
///
/// Code object v5 for processors (loaded by every supported ROCm), v6 for the generic targets
/// (the first version that has them). The quantized module is compiled for blocks of at most
/// 256 threads, the most candle launches its kernels with, which lets the compiler keep the
/// mat-vec kernels' working set in registers, and with `CUDA_USE_TENSOR_CORES` defined: in
/// candle-kernels' quantized.cu (llama.cpp's) that macro only selects the small tiles of the
/// batched `mul_mat_q*` kernels (mmq_x 4, mmq_y 32, 4 warps instead of 64 x 128), the only
/// configuration whose accumulators fit AMD's VGPR budget (the large ones spilled up to 768
/// bytes). candle-rocm launches no `mul_mat_q*` kernel; one that does must use those tiles.
/// `GGML_USE_HIPBLAS`, `__HIP_PLATFORM_AMD__` and `RDNA2` together select, in that file's
/// only test of them, llama.cpp's AMD configuration of the q8_1 mat-vec kernels
/// (`mul_mat_vec_*_q8_1_cudaN`): one warp and one output row per block, where Candle's CUDA
/// launches use 2-4 warps and 2 rows (its accumulator array, indexed by the thread's lane
/// for the 2 rows, lived in 32-80 bytes of scratch on every target). candle-rocm launches
/// none of them; one that does must launch blocks of (32, 1) threads and a block per row.
pub(super) fn flags(module: Module, target: &str) -> Vec<String> {
    let cov = if target.ends_with("-generic") { 6 } else { 5 };
    [
        "-x",
        "hip",
        "-std=c++17",
        "-O3",
        "--cuda-device-only",
        "--no-gpu-bundle-output",
        "-nogpuinc",
        "-fno-gpu-rdc",
        "-ffp-contract=fast",
        "-Wno-unused-command-line-argument",
        "-include",
        "candle_hip_compat.h",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([
        format!("-mcode-object-version={cov}"),
        format!("--offload-arch={target}"),
    ])
    .chain(
        (module == Module::Quantized)
            .then_some([
                "--gpu-max-threads-per-block=256",
                "-DCUDA_USE_TENSOR_CORES",
                "-DGGML_USE_HIPBLAS",
                "-D__HIP_PLATFORM_AMD__",
                "-DRDNA2",
            ])
            .into_iter()
            .flatten()
            .map(str::to_string),
    )
    .collect()
}

/// Compiles one module for one target into `out`, and returns the compiler's occupancy
/// estimate per kernel (waves per SIMD, from `-Rpass-analysis=kernel-resource-usage`).
///
/// Besides [`flags`], only options that change no generated code are added here, so the
/// source hash stays independent of local paths.
fn compile(
    tc: &Toolchain,
    include: &Path,
    module: Module,
    src: &Path,
    target: &str,
    out: &Path,
) -> Result<BTreeMap<String, u64>> {
    let src_dir = src.parent().unwrap_or(src);
    let src_label = match module.source() {
        Source::Candle => format!("candle-kernels-{CANDLE_KERNELS_VERSION}"),
        Source::Ours => "kernels/hip".to_string(),
    };
    let output = Command::new(&tc.clang)
        .args(flags(module, target))
        .arg("-Rpass-analysis=kernel-resource-usage")
        // Reproducibility: the compilation-unit id and embedded file names would otherwise
        // depend on where the cargo registry lives.
        .arg(format!("-cuid=candle_{}", module.name()))
        .arg(format!(
            "-ffile-prefix-map={}={src_label}",
            src_dir.display()
        ))
        .arg(format!(
            "-ffile-prefix-map={}=kernels/include",
            include.display()
        ))
        .arg(format!("-I{}", include.display()))
        .arg(format!(
            "--rocm-device-lib-path={}",
            tc.device_libs.display()
        ))
        .arg("-o")
        .arg(out)
        .arg(src)
        .output()
        .with_context(|| format!("running {}", tc.clang.display()))?;
    if !output.status.success() {
        bail!(
            "compiling {} for {target} failed:\n{}",
            src.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(parse_occupancy(&String::from_utf8_lossy(&output.stderr)))
}

/// Pairs each `Function Name: X` remark with the `Occupancy [waves/SIMD]: N` that follows it.
fn parse_occupancy(remarks: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in remarks.lines() {
        let Some(rest) = line.split("remark: ").nth(1) else {
            continue;
        };
        let rest = rest.split(" [-Rpass").next().unwrap_or(rest).trim();
        if let Some(name) = rest.strip_prefix("Function Name: ") {
            current = Some(name.to_string());
        } else if let Some(n) = rest.strip_prefix("Occupancy [waves/SIMD]: ") {
            if let (Some(name), Ok(n)) = (current.take(), n.parse()) {
                out.insert(name, n);
            }
        }
    }
    out
}

/// (cached object, source hash, whether it came from the cache, compile seconds).
pub(super) type Built = (PathBuf, String, bool, f64);

/// The occupancy file kept next to a cached object: the compiler's waves per SIMD per kernel,
/// which [`super::manifest::compiler_agrees`] compares with [`super::occupancy`]'s.
pub(super) fn occupancy_path(obj: &Path) -> PathBuf {
    obj.with_extension("occupancy.json")
}

/// One (module, target) from the cache, or compiled into it.
pub(super) fn build_one(
    tc: &Toolchain,
    candle: &Path,
    include: &Path,
    cache: &Path,
    module: Module,
    target: &str,
) -> Result<Built> {
    let flags = flags(module, target).join(" ");
    let hash = source_hash(module, candle, include, &flags)?;
    let obj = cache.join(format!("{}.{target}.{}.co", module.name(), &hash[..16]));
    if obj.is_file() && occupancy_path(&obj).is_file() {
        return Ok((obj, hash, true, 0.0));
    }
    let t0 = Instant::now();
    let tmp = obj.with_extension("tmp");
    let src = module_source(module, candle);
    let occupancy = compile(tc, include, module, &src, target, &tmp)?;
    std::fs::write(occupancy_path(&obj), serde_json::to_string(&occupancy)?)?;
    std::fs::rename(&tmp, &obj)?;
    Ok((obj, hash, false, t0.elapsed().as_secs_f64()))
}
