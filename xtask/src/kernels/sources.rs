//! The sources of the kernel objects: candle-kernels' `.cu` files in the cargo registry
//! (fetched when missing) and our `kernels/hip/*.hip`, and the hash of everything one object
//! depends on.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};
use candle_rocm_kernels::code_object::CodeObject;
use candle_rocm_kernels::{Module, Source};
use sha2::{Digest, Sha256};

use super::CANDLE_KERNELS_VERSION;
use crate::project_root;

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

/// `candle-kernels-<version>/src` in some registry of the cargo home, if it is there.
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

/// Collects every file under `dir`, recursively, into `out`.
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
pub(super) fn module_source(module: Module, candle: &Path) -> PathBuf {
    match module.source() {
        Source::Candle => candle.join(format!("{}.cu", module.name())),
        Source::Ours => project_root().join(format!("kernels/hip/{}.hip", module.name())),
    }
}

/// Hash of everything one module's object depends on, except the compiler binary: its source
/// (with the parts in `kernels/hip/<module>/`, for a module of ours split in a folder, and the
/// shared folders of `kernels/hip/` it includes, such as `mma/`), candle's shared headers, our
/// compatibility headers and the flags.
pub(super) fn source_hash(
    module: Module,
    candle: &Path,
    include: &Path,
    flags: &str,
) -> Result<String> {
    let mut h = Sha256::new();
    let mut feed = |label: &str, p: &Path| -> Result<()> {
        h.update(label.as_bytes());
        h.update([0]);
        h.update(std::fs::read(p).with_context(|| format!("reading {}", p.display()))?);
        h.update([0]);
        Ok(())
    };
    let source = module_source(module, candle);
    feed("module", &source)?;
    // Our modules may keep their parts in a folder beside them (`kernels/hip/<module>/`).
    let parts_dir = source.with_extension("");
    if parts_dir.is_dir() {
        let mut parts = Vec::new();
        files_in(&parts_dir, &mut parts)?;
        parts.sort();
        for p in &parts {
            let rel = p
                .strip_prefix(&parts_dir)
                .unwrap_or(p)
                .to_string_lossy()
                .into_owned();
            feed(&format!("part {rel}"), p)?;
        }
    }
    // Folders of `kernels/hip/` besides its own parts that the module includes from
    // (`#include "mma/tile.h"`): every file in them.
    if let Some(hip) = source.parent() {
        for dir in included_folders(&source, &parts_dir)? {
            let mut files = Vec::new();
            files_in(&hip.join(&dir), &mut files)?;
            files.sort();
            for p in &files {
                let rel = p
                    .strip_prefix(hip)
                    .unwrap_or(p)
                    .to_string_lossy()
                    .into_owned();
                feed(&format!("shared {rel}"), p)?;
            }
        }
    }
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

/// The folders beside `source` (other than its own `parts_dir`) that it or its parts include
/// from, as `#include "<folder>/<file>"`, sorted and without repeats.
fn included_folders(source: &Path, parts_dir: &Path) -> Result<Vec<String>> {
    let Some(hip) = source.parent() else {
        return Ok(Vec::new());
    };
    let mut files = vec![source.to_path_buf()];
    if parts_dir.is_dir() {
        files_in(parts_dir, &mut files)?;
    }
    let own = parts_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut dirs = Vec::new();
    for f in &files {
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for line in text.lines() {
            let Some(rest) = line.trim_start().strip_prefix("#include \"") else {
                continue;
            };
            let Some((dir, _)) = rest.split_once('/') else {
                continue;
            };
            if dir != own && hip.join(dir).is_dir() {
                dirs.push(dir.to_string());
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    Ok(dirs)
}

/// The `extern "C" __global__` kernel names a source defines, including those generated by
/// candle's macros, as listed by the compiled object itself (see `build`).
pub(super) fn kernel_names(object: &[u8]) -> Result<Vec<String>> {
    let co = CodeObject::parse(object).map_err(|e| anyhow!("{e}"))?;
    Ok(co.kernels.into_iter().map(|k| k.name).collect())
}
