//! `cargo xtask kernels [--verify] [--arch …] [--module …] [--out DIR]`: every selected
//! (module, target) compiled in parallel, then compared with the committed objects (and the
//! occupancy computed from each with the compiler's), written to DIR, or committed.

use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use candle_rocm_kernels::Module;

use super::all_targets;
use super::compile::{build_one, Built};
use super::manifest::{compiler_agrees, write_committed};
use super::sources::candle_sources;
use super::toolchain::toolchain;
use crate::flags::Kernels;

/// The entries of `all` that `filter` names (all of them for an empty filter); an unknown
/// name is an error listing the known ones.
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

/// Builds every selected (module, target), then verifies, writes to `--out` or commits.
pub(super) fn build(root: &Path, opts: &Kernels) -> Result<()> {
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

/// Compares freshly built objects with the committed ones, and the occupancy `--report`
/// computes from each with what the compiler reported.
fn verify(root: &Path, results: &[(Module, String, Result<Built>)]) -> Result<()> {
    let mut differ = Vec::new();
    for (m, t, r) in results {
        let Ok((obj, ..)) = r else { continue };
        let fresh = std::fs::read(obj)?;
        compiler_agrees(obj, t, &fresh)?;
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
