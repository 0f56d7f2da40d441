//! The output trees of `cargo xtask candle`: the staging directory they are built in, moving
//! them into place, listing their files for `--check`, and copying and writing files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::{CANDLE_DIR, SUITE_DIR};

/// A directory under `target/xtask/` removed again when dropped.
pub(super) struct Staging(pub(super) PathBuf);

impl Staging {
    pub(super) fn new(root: &Path, what: &str) -> Result<Staging> {
        let dir = root
            .join("target/xtask")
            .join(format!("candle-{what}-{}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Staging(dir))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // Best effort: a leftover only costs disk space under target/.
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Moves the freshly built `new` to `dest`, moving a previous `dest` out of the way to `old`
/// first; build outputs (`target/`) of the previous crate directories are kept.
pub(super) fn replace_dir(new: &Path, dest: &Path, old: &Path) -> Result<()> {
    if dest.exists() {
        if let Some(parent) = old.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(dest, old)
            .with_context(|| format!("moving {} to {}", dest.display(), old.display()))?;
        for krate in crate_dirs(old)? {
            let target = krate.join("target");
            let rel = krate.strip_prefix(old).unwrap_or(&krate);
            if target.is_dir() && new.join(rel).is_dir() {
                std::fs::rename(&target, new.join(rel).join("target"))
                    .with_context(|| format!("keeping {}", target.display()))?;
            }
        }
    } else if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::rename(new, dest)
        .with_context(|| format!("moving {} to {}", new.display(), dest.display()))
}

/// The crate directories of an output tree: the tree itself when it holds a `Cargo.toml`
/// (the suite), else its subdirectories that do (`.candle/<crate>`).
fn crate_dirs(dir: &Path) -> Result<Vec<PathBuf>> {
    if dir.join("Cargo.toml").is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries {
            let p = e?.path();
            if p.join("Cargo.toml").is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Every file of the two outputs under `base`, keyed by its path relative to `base` (with
/// `/` separators), leaving out `target/` and `Cargo.lock` at the root of each crate.
pub(super) fn tree_files(base: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for rel in [CANDLE_DIR, SUITE_DIR] {
        let dir = base.join(rel);
        if !dir.is_dir() {
            continue;
        }
        let skip: BTreeSet<PathBuf> = crate_dirs(&dir)?
            .into_iter()
            .flat_map(|c| [c.join("target"), c.join("Cargo.lock")])
            .collect();
        let mut files = Vec::new();
        walk(&dir, &skip, &mut files)?;
        for f in files {
            let key = f
                .strip_prefix(base)
                .unwrap_or(&f)
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            out.insert(key, f);
        }
    }
    Ok(out)
}

/// Collects the files under `dir` into `out`, not descending into the paths of `skip`.
fn walk(dir: &Path, skip: &BTreeSet<PathBuf>, out: &mut Vec<PathBuf>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let p = e.path();
        if skip.contains(&p) {
            continue;
        }
        if e.file_type()?.is_dir() {
            walk(&p, skip, out)?;
        } else {
            out.push(p);
        }
    }
    Ok(())
}

/// Copies a directory tree, leaving out cargo's `.cargo-ok` extraction marker; copies are
/// writable by their owner.
pub(super) fn copy_dir(src: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    for e in std::fs::read_dir(src).with_context(|| format!("reading {}", src.display()))? {
        let e = e?;
        let (from, to) = (e.path(), dest.join(e.file_name()));
        if e.file_name() == ".cargo-ok" {
            continue;
        }
        if e.file_type()?.is_dir() {
            copy_dir(&from, &to)?;
        } else {
            std::fs::copy(&from, &to)
                .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
            make_writable(&to)?;
        }
    }
    Ok(())
}

/// Adds the owner's write permission to `path` if it lacks it.
fn make_writable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut perms = std::fs::metadata(path)?.permissions();
    if perms.mode() & 0o200 == 0 {
        perms.set_mode(perms.mode() | 0o200);
        std::fs::set_permissions(path, perms)
            .with_context(|| format!("making {} writable", path.display()))?;
    }
    Ok(())
}

/// Writes `contents` to `path`, creating its parent directories.
pub(super) fn write_file(path: &Path, contents: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}
