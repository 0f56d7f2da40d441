//! The cache directory and its files: where it is, temporary paths that never leave a
//! half-written model behind, the sweep of what killed processes left, and sha256 checks.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::FetchError;

/// The cache directory: `$CANDLE_ROCM_CACHE`, else `$XDG_CACHE_HOME/candle-rocm`, else
/// `$HOME/.cache/candle-rocm`. It is not created here.
pub fn cache_dir() -> Result<PathBuf, FetchError> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("CANDLE_ROCM_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return Ok(PathBuf::from(dir).join("candle-rocm"));
    }
    var("HOME")
        .map(|home| PathBuf::from(home).join(".cache").join("candle-rocm"))
        .ok_or(FetchError::NoCacheDir)
}

/// The sha256 of a file, in lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut file = File::open(path).map_err(|e| FetchError::io(path, e))?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher).map_err(|e| FetchError::io(path, e))?;
    Ok(hex(&hasher.finalize()))
}

/// `bytes` in lowercase hex.
pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A temporary file or directory `<dir>/.tmp-<pid>-<n>-<name>`, unique to this process and
/// call, removed on drop unless kept.
pub(crate) struct TempPath {
    /// The path (nothing is created there).
    pub(crate) path: PathBuf,
    keep: bool,
}

impl TempPath {
    /// A fresh path for `name` in `dir` (a leftover at that path is removed first).
    pub(crate) fn new(dir: &Path, name: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!(".tmp-{}-{n}-{name}", std::process::id()));
        // A leftover from a killed run of this same process id is stale.
        remove_path(&path);
        TempPath { path, keep: false }
    }

    /// Keeps what is at the path: it is no longer removed on drop.
    pub(crate) fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for TempPath {
    fn drop(&mut self) {
        if !self.keep {
            remove_path(&self.path);
        }
    }
}

/// How long a `.tmp-` entry may go unmodified before [`sweep_stale`] treats it as left by a
/// killed process (a running fetch writes to its file or directory continuously).
const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes `.tmp-` entries in `cache` untouched for [`STALE_AFTER`]: what a process killed
/// mid-fetch (Ctrl-C runs no destructors) left behind. Best effort.
pub(crate) fn sweep_stale(cache: &Path) {
    let Ok(entries) = fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER);
        if stale && entry.file_name().to_string_lossy().starts_with(".tmp-") {
            tracing::info!(path = %entry.path().display(), "weights: removing a stale temporary file");
            remove_path(&entry.path());
        }
    }
}

/// Removes a file or a directory tree, best effort: a failure other than "not found" is
/// logged.
pub(super) fn remove_path(path: &Path) {
    let removed = if path.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    if let Err(e) = removed {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), "weights: could not remove a temporary file: {e}");
        }
    }
}
