//! `cargo xtask kernels`: compiles every kernel module for every AMD target into compressed,
//! committed code objects plus a manifest, and checks or reports on them.
//!
//! Sources: candle-kernels' `.cu` files, read from the cargo registry (fetched if needed, never
//! copied into this repository), and our own `kernels/hip/*.hip`, compiled through our
//! compatibility headers in `kernels/include/`. Compiler: `$ROCM_PATH/llvm/bin/clang++` when `ROCM_PATH` is set,
//! else Debian's `clang++-19` with `rocm-device-libs` (see `kernels/install-toolchain.sh`); for
//! targets the Debian 5.2 device libraries predate, the `oclc_isa_version` bitcode is
//! generated into an overlay directory.
//!
//! Outputs, all under `kernels/`: `objects/<module>.<target>.co.z` (deflate-compressed HSA code
//! objects), `manifest.json` (per object: source hash, flags, compiler, sizes, kernel names)
//! and `src/objects.rs` (the embedding table). A compile is cached per (module, target, source
//! hash) in `target/xtask/kernel-cache`.
//!
//! Flags: `--check` fails when a source or flag changed since the manifest (no compiler
//! needed); `--verify` recompiles everything and fails unless each object is byte-identical to
//! the committed one (CI runs it: the committed binaries are exactly what the sources give); `--report` prints per module and target the largest VGPR/AGPR/SGPR/LDS/scratch use
//! and the lowest occupancy (waves per SIMD, as the compiler computed it), `--report --kernels`
//! the same per kernel;
//! `--arch A,B` and `--module M,N` restrict a build; `--out DIR` writes uncompressed objects
//! named `<module>.<arch>.co` to DIR instead (for `CANDLE_ROCM_KERNELS_DIR`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use candle_rocm_kernels::code_object::{CodeObject, KernelInfo};
use candle_rocm_kernels::{Module, Source, GENERIC_TARGETS, TARGETS};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::flags::Kernels;
use crate::project_root;

/// The candle-kernels release whose sources are compiled; must match candle-core's version.
pub const CANDLE_KERNELS_VERSION: &str = "0.11.1";

/// Every target objects are built for: exact processors, then generic families.
pub fn all_targets() -> Vec<&'static str> {
    TARGETS.iter().chain(GENERIC_TARGETS).copied().collect()
}

/// Runs the command.
pub fn run(opts: &Kernels) -> Result<()> {
    let root = project_root();
    if opts.check {
        return check(&root);
    }
    if opts.report {
        return report(&root, opts.per_kernel);
    }
    build(&root, opts)
}

// ---------------------------------------------------------------------------------------------
// Sources and hashes

/// The directory holding candle-kernels' sources in the cargo registry, fetching the package
/// if it is not there yet.
pub fn candle_sources(root: &Path) -> Result<PathBuf> {
    if let Some(p) = find_in_registry()? {
        return Ok(p);
    }
    let dir = root.join("target/xtask/fetch-candle-kernels");
    std::fs::create_dir_all(dir.join("src"))?;
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"fetch-candle-kernels\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\
             publish = false\n\n[workspace]\n\n[dependencies]\ncandle-kernels = \"={CANDLE_KERNELS_VERSION}\"\n"
        ),
    )?;
    std::fs::write(dir.join("src/lib.rs"), "")?;
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["fetch", "--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .status()
        .context("running cargo fetch for candle-kernels")?;
    if !status.success() {
        bail!("cargo fetch of candle-kernels {CANDLE_KERNELS_VERSION} failed");
    }
    find_in_registry()?.ok_or_else(|| {
        anyhow!(
            "candle-kernels-{CANDLE_KERNELS_VERSION} is not in the cargo registry after fetching"
        )
    })
}

fn find_in_registry() -> Result<Option<PathBuf>> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").ok_or_else(|| anyhow!("HOME is not set"))?)
            .join(".cargo"),
    };
    let src = home.join("registry/src");
    let Ok(entries) = std::fs::read_dir(&src) else {
        return Ok(None);
    };
    for e in entries.flatten() {
        let p = e
            .path()
            .join(format!("candle-kernels-{CANDLE_KERNELS_VERSION}/src"));
        if p.join("affine.cu").is_file() {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

fn files_in(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            files_in(&p, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// The source file of a module: candle's `<name>.cu` or our `kernels/hip/<name>.hip`.
fn module_source(module: Module, candle: &Path) -> PathBuf {
    match module.source() {
        Source::Candle => candle.join(format!("{}.cu", module.name())),
        Source::Ours => project_root().join(format!("kernels/hip/{}.hip", module.name())),
    }
}

/// Hash of everything one module's object depends on, except the compiler binary: its source,
/// candle's shared headers, our compatibility headers and the flags.
fn source_hash(module: Module, candle: &Path, include: &Path, flags: &str) -> Result<String> {
    let mut h = Sha256::new();
    let mut feed = |label: &str, p: &Path| -> Result<()> {
        h.update(label.as_bytes());
        h.update([0]);
        h.update(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?);
        h.update([0]);
        Ok(())
    };
    feed("module", &module_source(module, candle))?;
    let mut shared: Vec<PathBuf> = std::fs::read_dir(candle)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cuh"))
        .collect();
    shared.sort();
    for p in &shared {
        feed(&p.file_name().unwrap_or_default().to_string_lossy(), p)?;
    }
    let mut ours = Vec::new();
    files_in(include, &mut ours)?;
    ours.sort();
    for p in &ours {
        let rel = p
            .strip_prefix(include)
            .unwrap_or(p)
            .to_string_lossy()
            .into_owned();
        feed(&rel, p)?;
    }
    h.update(flags.as_bytes());
    Ok(format!("{:x}", h.finalize()))
}

/// The `extern "C" __global__` kernel names a source defines, including those generated by
/// candle's macros, as listed by the compiled object itself (see `build`).
fn kernel_names(object: &[u8]) -> Result<Vec<String>> {
    let co = CodeObject::parse(object).map_err(|e| anyhow!("{e}"))?;
    Ok(co.kernels.into_iter().map(|k| k.name).collect())
}

// ---------------------------------------------------------------------------------------------
// Toolchain

/// The compiler and device libraries used for a build.
struct Toolchain {
    clang: PathBuf,
    version: String,
    device_libs: PathBuf,
}

const DEBIAN_DEVICE_LIBS: &str = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";

fn toolchain(root: &Path) -> Result<Toolchain> {
    let (clang, libs) = match std::env::var_os("ROCM_PATH").filter(|v| !v.is_empty()) {
        Some(rocm) => {
            let rocm = PathBuf::from(rocm);
            let libs = [rocm.join("amdgcn/bitcode"), rocm.join("lib/llvm/lib/clang")]
                .into_iter()
                .find(|p| p.is_dir())
                .unwrap_or_else(|| rocm.join("amdgcn/bitcode"));
            (rocm.join("llvm/bin/clang++"), libs)
        }
        None => (
            PathBuf::from("clang++-19"),
            PathBuf::from(DEBIAN_DEVICE_LIBS),
        ),
    };
    let out = Command::new(&clang).arg("--version").output().with_context(|| {
        format!(
            "running {} (install the toolchain: bash kernels/install-toolchain.sh, or set ROCM_PATH)",
            clang.display()
        )
    })?;
    let version = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or("unknown")
        .to_string();
    if !libs.join("ocml.bc").is_file() {
        bail!(
            "AMD device libraries not found in {} (install rocm-device-libs: bash \
             kernels/install-toolchain.sh)",
            libs.display()
        );
    }
    let overlay = root.join("target/xtask/device-libs");
    make_overlay(&clang, &libs, &overlay)?;
    Ok(Toolchain {
        clang,
        version,
        device_libs: overlay,
    })
}

/// `__oclc_ISA_version` value of a target: major * 1000 + minor * 100 + stepping (hex digit),
/// e.g. 11001 for gfx1101 and 9010 for gfx90a; a generic family takes its family's base
/// (gfx11-generic: 11000).
fn isa_version(target: &str) -> Option<u32> {
    let d = target.strip_prefix("gfx")?;
    if let Some(family) = d.strip_suffix("-generic") {
        let mut parts = family.split('-').map(|p| p.parse::<u32>().ok());
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        return Some(major * 1000 + minor * 100);
    }
    if d.len() < 3 {
        return None;
    }
    let (major, rest) = d.split_at(d.len() - 2);
    let major: u32 = major.parse().ok()?;
    let minor = u32::from_str_radix(&rest[..1], 16).ok()?;
    let step = u32::from_str_radix(&rest[1..], 16).ok()?;
    Some(major * 1000 + minor * 100 + step)
}

/// The device libraries plus generated control bitcode they predate: `oclc_isa_version_<N>.bc`
/// for newer and generic targets, and `oclc_abi_version_600.bc` for code object v6.
fn make_overlay(clang: &Path, libs: &Path, overlay: &Path) -> Result<()> {
    std::fs::create_dir_all(overlay)?;
    for e in std::fs::read_dir(libs)?.flatten() {
        let dest = overlay.join(e.file_name());
        if !dest.exists() {
            std::os::unix::fs::symlink(e.path(), &dest)
                .with_context(|| format!("linking {}", dest.display()))?;
        }
    }
    let mut wanted: Vec<(String, &str, u32)> = all_targets()
        .into_iter()
        .filter_map(|t| {
            let v = isa_version(t)?;
            Some((
                format!("oclc_isa_version_{}", &t[3..]),
                "__oclc_ISA_version",
                v,
            ))
        })
        .collect();
    wanted.push(("oclc_abi_version_600".into(), "__oclc_ABI_version", 600));
    for (name, symbol, value) in wanted {
        let dest = overlay.join(format!("{name}.bc"));
        if dest.exists() {
            continue;
        }
        let ll = overlay.join(format!("{name}.ll"));
        std::fs::write(
            &ll,
            format!(
                "; Generated by cargo xtask kernels: {symbol} = {value}.\n\
                 target triple = \"amdgcn-amd-amdhsa\"\n\
                 @{symbol} = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 {value}, align 4\n"
            ),
        )?;
        let output = Command::new(clang)
            .args([
                "-c",
                "-emit-llvm",
                "-nogpulib",
                "-x",
                "ir",
                "--target=amdgcn-amd-amdhsa",
                "-o",
            ])
            .arg(&dest)
            .arg(&ll)
            .output()?;
        if !output.status.success() {
            bail!(
                "generating {}: {}",
                dest.display(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
    Ok(())
}

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
fn flags(module: Module, target: &str) -> Vec<String> {
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

// ---------------------------------------------------------------------------------------------
// Build

fn selected<'a>(all: &[&'a str], filter: &[String], what: &str) -> Result<Vec<&'a str>> {
    if filter.is_empty() {
        return Ok(all.to_vec());
    }
    filter
        .iter()
        .map(|f| {
            all.iter()
                .find(|a| **a == f.as_str())
                .copied()
                .ok_or_else(|| anyhow!("unknown {what} `{f}`; known: {}", all.join(", ")))
        })
        .collect()
}

fn build(root: &Path, opts: &Kernels) -> Result<()> {
    let candle = candle_sources(root)?;
    let include = root.join("kernels/include");
    let tc = toolchain(root)?;
    let module_names: Vec<&str> = Module::ALL.iter().map(|m| m.name()).collect();
    let (archs, module_filter) = (opts.archs(), opts.modules());
    let modules = selected(&module_names, &module_filter, "module")?;
    let targets_all = all_targets();
    let targets = match &opts.out {
        // Any processor may be built into an override directory.
        Some(_) if !archs.is_empty() => archs.iter().map(|s| s.as_str()).collect(),
        _ => selected(&targets_all, &archs, "target")?,
    };
    // --verify never trusts the cache: every object is compiled again.
    let cache = root.join(if opts.verify {
        "target/xtask/kernel-verify"
    } else {
        "target/xtask/kernel-cache"
    });
    if opts.verify && cache.exists() {
        std::fs::remove_dir_all(&cache)?;
    }
    std::fs::create_dir_all(&cache)?;

    let mut jobs = Vec::new();
    for m in &modules {
        let module = Module::ALL[module_names.iter().position(|n| n == m).unwrap_or(0)];
        for t in &targets {
            jobs.push((module, t.to_string()));
        }
    }
    let total = jobs.len();
    let queue = Mutex::new(jobs.into_iter().enumerate());
    let results = Mutex::new(Vec::new());
    let started = Instant::now();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let next = queue.lock().map(|mut q| q.next()).ok().flatten();
                let Some((i, (module, target))) = next else {
                    break;
                };
                let r = build_one(&tc, &candle, &include, &cache, module, &target);
                let line = match &r {
                    Ok((_, _, cached, secs)) => format!(
                        "[{:>3}/{total}] {:<9} {:<16} {}",
                        i + 1,
                        module.name(),
                        target,
                        if *cached {
                            "cached".to_string()
                        } else {
                            format!("{secs:.1}s")
                        }
                    ),
                    Err(e) => format!(
                        "[{:>3}/{total}] {} {target} FAILED: {e:#}",
                        i + 1,
                        module.name()
                    ),
                };
                eprintln!("{line}");
                if let Ok(mut res) = results.lock() {
                    res.push((module, target, r));
                }
            });
        }
    });
    let mut results = results
        .into_inner()
        .map_err(|_| anyhow!("a build thread panicked"))?;
    results.sort_by(|a, b| (a.0.name(), &a.1).cmp(&(b.0.name(), &b.1)));
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(m, t, r)| r.as_ref().err().map(|e| format!("{}.{t}: {e:#}", m.name())))
        .collect();
    if !failures.is_empty() {
        bail!(
            "{} of {total} compiles failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    eprintln!(
        "built {total} objects in {:.0}s",
        started.elapsed().as_secs_f64()
    );

    if opts.verify {
        return verify(root, &results);
    }
    if let Some(out) = &opts.out {
        std::fs::create_dir_all(out)?;
        for (m, t, r) in &results {
            if let Ok((obj, ..)) = r {
                std::fs::copy(obj, out.join(format!("{}.{t}.co", m.name())))?;
            }
        }
        eprintln!(
            "wrote plain objects to {} (use it as CANDLE_ROCM_KERNELS_DIR)",
            out.display()
        );
        return Ok(());
    }
    write_committed(root, &tc, &candle, &include, &results)
}

/// (cached object, source hash, whether it came from the cache, compile seconds).
type Built = (PathBuf, String, bool, f64);

/// The occupancy file kept next to a cached object.
fn occupancy_path(obj: &Path) -> PathBuf {
    obj.with_extension("occupancy.json")
}

fn build_one(
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

/// Compares freshly built objects with the committed ones.
fn verify(root: &Path, results: &[(Module, String, Result<Built>)]) -> Result<()> {
    let mut differ = Vec::new();
    for (m, t, r) in results {
        let Ok((obj, ..)) = r else { continue };
        let fresh = std::fs::read(obj)?;
        let file = root.join(format!("kernels/objects/{}.{t}.co.z", m.name()));
        let committed = std::fs::read(&file)
            .map_err(|e| anyhow!("{}: {e}", file.display()))
            .and_then(|packed| {
                miniz_oxide::inflate::decompress_to_vec(&packed)
                    .map_err(|e| anyhow!("{} is corrupt: {e:?}", file.display()))
            })?;
        if fresh != committed {
            differ.push(format!("{}.{t}", m.name()));
        }
    }
    if !differ.is_empty() {
        bail!(
            "{} freshly built objects differ from the committed ones: {}\n(a different compiler \
             or device-library version, or a non-reproducible build)",
            differ.len(),
            differ.join(", ")
        );
    }
    eprintln!(
        "kernels: {} freshly built objects are identical to the committed ones",
        results.len()
    );
    Ok(())
}

fn write_committed(
    root: &Path,
    tc: &Toolchain,
    candle: &Path,
    include: &Path,
    results: &[(Module, String, Result<Built>)],
) -> Result<()> {
    let objects_dir = root.join("kernels/objects");
    std::fs::create_dir_all(&objects_dir)?;
    let manifest_path = root.join("kernels/manifest.json");
    // Keep entries of a partial build's untouched (module, target) pairs.
    let mut entries: BTreeMap<(String, String), Value> = read_manifest(&manifest_path)
        .map(|m| {
            m["objects"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(|o| {
                    Some((
                        (
                            o["module"].as_str()?.to_string(),
                            o["target"].as_str()?.to_string(),
                        ),
                        o,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    for (m, t, r) in results {
        let Ok((obj, hash, ..)) = r else { continue };
        let raw = std::fs::read(obj)?;
        let names = kernel_names(&raw).with_context(|| format!("reading {}", obj.display()))?;
        let occupancy: Value =
            serde_json::from_str(&std::fs::read_to_string(occupancy_path(obj))?)?;
        let packed = miniz_oxide::deflate::compress_to_vec(&raw, 10);
        let file = format!("{}.{t}.co.z", m.name());
        std::fs::write(objects_dir.join(&file), &packed)?;
        entries.insert(
            (m.name().to_string(), t.clone()),
            json!({
                "module": m.name(),
                "target": t,
                "file": file,
                "source_hash": hash,
                "flags": flags(*m, t).join(" "),
                "compiler": tc.version,
                "raw_bytes": raw.len(),
                "compressed_bytes": packed.len(),
                "kernel_count": names.len(),
                "occupancy": occupancy,
            }),
        );
    }
    let _ = (candle, include);
    let manifest = json!({
        "candle_kernels": CANDLE_KERNELS_VERSION,
        "objects": entries.values().cloned().collect::<Vec<_>>(),
    });
    std::fs::write(
        &manifest_path,
        serde_json::to_string_pretty(&manifest)? + "\n",
    )?;
    write_table(root, &manifest)?;
    eprintln!(
        "updated {} and kernels/src/objects.rs",
        manifest_path.display()
    );
    Ok(())
}

/// One object of the manifest.
struct Entry<'a> {
    module: Module,
    target: &'a str,
    file: &'a str,
    json: &'a Value,
}

fn entries(manifest: &Value) -> Result<Vec<Entry<'_>>> {
    manifest["objects"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| {
            let (Some(m), Some(target), Some(file)) = (
                o["module"].as_str(),
                o["target"].as_str(),
                o["file"].as_str(),
            ) else {
                bail!("malformed manifest entry {o}");
            };
            let module = Module::ALL
                .iter()
                .copied()
                .find(|x| x.name() == m)
                .ok_or_else(|| anyhow!("unknown module {m} in the manifest"))?;
            Ok(Entry {
                module,
                target,
                file,
                json: o,
            })
        })
        .collect()
}

fn read_manifest(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Generates `kernels/src/objects.rs`, the table of embedded objects.
fn write_table(root: &Path, manifest: &Value) -> Result<()> {
    let mut s = String::from(
        "// @generated by `cargo xtask kernels` from kernels/manifest.json. Do not edit.\n\n\
         use crate::Module;\n\n\
         /// Embedded code objects: (module, target, deflate-compressed HSA code object).\n\
         pub(crate) static OBJECTS: &[(Module, &str, &[u8])] = &[\n",
    );
    for e in entries(manifest)? {
        let (variant, t, f) = (e.module, e.target, e.file);
        writeln!(
            s,
            "    (Module::{variant:?}, \"{t}\", include_bytes!(\"../objects/{f}\")),"
        )?;
    }
    s.push_str("];\n");
    std::fs::write(root.join("kernels/src/objects.rs"), s)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Check and report

fn check(root: &Path) -> Result<()> {
    let manifest_path = root.join("kernels/manifest.json");
    let manifest = read_manifest(&manifest_path).ok_or_else(|| {
        anyhow!(
            "{} is missing or unreadable: run `cargo xtask kernels`",
            manifest_path.display()
        )
    })?;
    if manifest["candle_kernels"] != CANDLE_KERNELS_VERSION {
        bail!(
            "the objects were built from candle-kernels {}, this tree wants {CANDLE_KERNELS_VERSION}: \
             run `cargo xtask kernels`",
            manifest["candle_kernels"]
        );
    }
    let candle = candle_sources(root)?;
    let include = root.join("kernels/include");
    let mut stale = Vec::new();
    let mut present = std::collections::BTreeSet::new();
    for e in entries(&manifest)? {
        let (module, m, t, f, o) = (e.module, e.module.name(), e.target, e.file, e.json);
        present.insert((m.to_string(), t.to_string()));
        let hash = source_hash(module, &candle, &include, &flags(module, t).join(" "))?;
        if o["source_hash"] != hash.as_str() {
            stale.push(format!("{m}.{t}: sources or flags changed"));
        }
        let path = root.join("kernels/objects").join(f);
        match std::fs::metadata(&path) {
            Ok(md) if Some(md.len()) == o["compressed_bytes"].as_u64() => {}
            _ => stale.push(format!(
                "{m}.{t}: {} is missing or differs from the manifest",
                path.display()
            )),
        }
    }
    for m in Module::ALL {
        for t in all_targets() {
            if !present.contains(&(m.name().to_string(), t.to_string())) {
                stale.push(format!("{}.{t}: not built", m.name()));
            }
        }
    }
    if !stale.is_empty() {
        bail!(
            "kernel objects are out of date ({}):\n  {}\nrun `cargo xtask kernels` and commit kernels/",
            stale.len(),
            stale.join("\n  ")
        );
    }
    eprintln!("kernels: {} objects match their sources", present.len());
    Ok(())
}

fn report(root: &Path, per_kernel: bool) -> Result<()> {
    let manifest = read_manifest(&root.join("kernels/manifest.json"))
        .ok_or_else(|| anyhow!("kernels/manifest.json is missing: run `cargo xtask kernels`"))?;
    let header = [
        "module", "target", "kernels", "VGPR", "AGPR", "SGPR", "LDS", "scratch", "waves",
    ];
    if per_kernel {
        println!(
            "{:<10} {:<16} {:<36} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5}",
            header[0],
            header[1],
            "kernel",
            header[3],
            header[4],
            header[5],
            header[6],
            header[7],
            header[8]
        );
    } else {
        println!(
            "{:<10} {:<16} {:>7} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5} {:>8} {:>8}",
            header[0],
            header[1],
            header[2],
            header[3],
            header[4],
            header[5],
            header[6],
            header[7],
            "min wv",
            "scr.krn",
            "raw KiB"
        );
    }
    let (mut total_packed, mut total_raw, mut spilling) = (0u64, 0u64, 0usize);
    for e in entries(&manifest)? {
        let f = e.file;
        let packed = std::fs::read(root.join("kernels/objects").join(f))?;
        let raw = miniz_oxide::inflate::decompress_to_vec(&packed)
            .map_err(|err| anyhow!("{f} is corrupt: {err:?}"))?;
        let co = CodeObject::parse(&raw).map_err(|err| anyhow!("{f}: {err}"))?;
        let waves = |name: &str| e.json["occupancy"][name].as_u64();
        // Kernels that touch scratch memory: stack use or VGPR spills. (SGPR spills go to
        // VGPR lanes and cost no memory traffic.)
        let uses_scratch = |k: &KernelInfo| k.scratch_bytes > 0 || k.vgpr_spills > 0;
        total_packed += packed.len() as u64;
        total_raw += raw.len() as u64;
        if per_kernel {
            for k in &co.kernels {
                println!(
                    "{:<10} {:<16} {:<36} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5}",
                    e.module.name(),
                    e.target,
                    k.name,
                    k.vgprs,
                    k.agprs,
                    k.sgprs,
                    k.lds_bytes,
                    k.scratch_bytes,
                    waves(&k.name).map_or("?".to_string(), |w| w.to_string())
                );
            }
            continue;
        }
        let max = |g: fn(&KernelInfo) -> u64| co.kernels.iter().map(g).max().unwrap_or(0);
        let scratch = co.kernels.iter().filter(|k| uses_scratch(k)).count();
        spilling += scratch;
        let min_waves = co.kernels.iter().filter_map(|k| waves(&k.name)).min();
        println!(
            "{:<10} {:<16} {:>7} {:>5} {:>5} {:>5} {:>7} {:>7} {:>5} {:>8} {:>8}",
            e.module.name(),
            e.target,
            co.kernels.len(),
            max(|k| k.vgprs),
            max(|k| k.agprs),
            max(|k| k.sgprs),
            max(|k| k.lds_bytes),
            max(|k| k.scratch_bytes),
            min_waves.map_or("?".to_string(), |w| w.to_string()),
            scratch,
            raw.len() / 1024
        );
    }
    println!(
        "total: {:.1} MiB embedded (compressed), {:.1} MiB raw; kernels using scratch: {spilling} \
         (kernels/tests/embedded.rs allows none)",
        total_packed as f64 / (1 << 20) as f64,
        total_raw as f64 / (1 << 20) as f64
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI runs this: the committed code objects were built from the current sources and flags.
    #[test]
    fn kernel_objects_are_fresh() {
        if let Err(e) = check(&project_root()) {
            panic!("{e:#}");
        }
    }

    #[test]
    fn isa_versions() {
        assert_eq!(isa_version("gfx1101"), Some(11001));
        assert_eq!(isa_version("gfx90a"), Some(9010));
        assert_eq!(isa_version("gfx942"), Some(9402));
        assert_eq!(isa_version("gfx1201"), Some(12001));
        assert_eq!(isa_version("gfx11-generic"), Some(11000));
        assert_eq!(isa_version("gfx10-3-generic"), Some(10300));
        assert_eq!(isa_version("gfx9-4-generic"), Some(9400));
        assert_eq!(isa_version("sm_90"), None);
    }

    #[test]
    fn candle_kernels_version_matches_candle_core() {
        let lock = std::fs::read_to_string(project_root().join("Cargo.lock")).unwrap();
        let pos = lock
            .find("name = \"candle-core\"")
            .expect("candle-core in Cargo.lock");
        let version = lock[pos..].lines().nth(1).unwrap_or_default();
        assert_eq!(version, format!("version = \"{CANDLE_KERNELS_VERSION}\""));
    }
}
