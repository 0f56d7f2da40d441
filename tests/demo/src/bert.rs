//! Sentence embeddings with a BERT model on any Candle device.
//!
//! [`Embedder::load`] takes a local Hugging Face BERT directory (`config.json`,
//! `tokenizer.json`, `model.safetensors`); [`Embedder::embed`] tokenizes a batch padded to its
//! longest sentence, runs [`Bert`] with the attention mask, mean-pools the token states over
//! the real tokens ([`mean_pool`]) and L2-normalises ([`l2_normalize`]), as
//! sentence-transformers does for all-MiniLM-L6-v2.
//!
//! [`Bert`] has two attention paths (see [`model`]): on the GPU by default, the batch's real
//! tokens packed and attention through candle-rocm's `flash_attn_varlen`; on the CPU by
//! default (and with `flash_attn` off, the demo's `--attention matmul`), candle-transformers'
//! own [`BertEncoder`](candle_transformers::models::bert::BertEncoder), unchanged.
//!
//! # Why [`Bert`] and not `BertModel::forward`
//!
//! candle-transformers 0.11.1's `BertModel::forward` builds the additive attention mask as
//! `(1 - mask) * f32::MIN` in the model's dtype. In f16 and bf16 `f32::MIN` rounds to `-inf`,
//! and `0 * -inf` is NaN, so every embedding is NaN in half precision on every device (the CPU
//! included), with or without padding. [`Bert`]'s matmul path therefore runs
//! candle-transformers' own `BertEncoder` (all the layers, unchanged) after the embedding layer
//! it cannot reach (`BertEmbeddings` is private; ours is the same few lines: word + token-type +
//! position embeddings, LayerNorm, no dropout at inference) with the mask scaled by the dtype's
//! *finite* minimum. In f32 that is exactly `BertModel`'s mask, and the tests check that
//! [`Bert`] and `BertModel` agree there. The flash path needs no mask at all.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::Config;
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

pub mod model;

pub use model::{extended_attention_mask, Bert};

/// Why a model could not be loaded or run. Load errors name the file and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum BertError {
    /// A required file is absent.
    #[error("{0} is missing: --model takes a Hugging Face BERT directory with config.json, tokenizer.json and model.safetensors")]
    Missing(PathBuf),
    /// `config.json` could not be read or is not a BERT config.
    #[error("{path} is not a BERT config.json candle-transformers supports ({reason}); pass a BERT model directory")]
    Config {
        /// The file.
        path: PathBuf,
        /// The reader's or parser's message.
        reason: String,
    },
    /// `tokenizer.json` could not be loaded.
    #[error("{path} is not a readable Hugging Face tokenizer ({reason}); replace it with the model's tokenizer.json")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// The tokenizers crate's message.
        reason: String,
    },
    /// `model.safetensors` is corrupt, truncated or does not match the config.
    #[error("{path} could not be loaded ({error}); the file is truncated, corrupt or not this model's weights: fetch it again")]
    Weights {
        /// The file.
        path: PathBuf,
        /// Candle's error.
        error: candle_core::Error,
    },
    /// Tokenizing the input failed.
    #[error("tokenizing the input failed: {0}")]
    Encode(String),
    /// The input was empty.
    #[error("no sentences to embed")]
    Empty,
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// A BERT sentence embedder on one device in one dtype.
pub struct Embedder {
    model: Bert,
    tokenizer: Tokenizer,
    device: Device,
    dtype: DType,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("device", &self.device)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// Loads the model in `dir` onto `device`, its weights converted to `dtype`, with flash
    /// attention on a GPU and the matmul path on the CPU (see [`Self::load_with`]).
    pub fn load(dir: &Path, device: &Device, dtype: DType) -> Result<Self, BertError> {
        Self::load_with(dir, device, dtype, !device.is_cpu())
    }

    /// [`Self::load`] with the attention path chosen: `flash_attn` packs each batch's real
    /// tokens and runs attention through candle-rocm's `flash_attn_varlen`; otherwise
    /// candle-transformers' encoder runs matmul, mask and softmax on the padded batch (see
    /// [`model`]).
    pub fn load_with(
        dir: &Path,
        device: &Device,
        dtype: DType,
        flash_attn: bool,
    ) -> Result<Self, BertError> {
        let (config_path, tokenizer_path, weights_path) =
            crate::model_files(dir).map_err(BertError::Missing)?;
        let config = load_config(&config_path)?;

        let mut tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| BertError::Tokenizer {
                path: tokenizer_path.clone(),
                reason: e.to_string(),
            })?;
        // The file may pad every input to a fixed length (all-MiniLM-L6-v2's pads to 128):
        // pad to the batch's longest instead, keeping its pad token; truncate to what the
        // position embeddings cover.
        let mut padding = tokenizer.get_padding().cloned().unwrap_or_default();
        padding.strategy = PaddingStrategy::BatchLongest;
        tokenizer.with_padding(Some(PaddingParams { ..padding }));
        let max_length = tokenizer
            .get_truncation()
            .map_or(config.max_position_embeddings, |t| t.max_length)
            .min(config.max_position_embeddings);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                ..Default::default()
            }))
            .map_err(|e| BertError::Tokenizer {
                path: tokenizer_path.clone(),
                reason: e.to_string(),
            })?;

        let weights_err = |error| BertError::Weights {
            path: weights_path.clone(),
            error,
        };
        // SAFETY: the file is memory-mapped read-only; it must not be modified while the model
        // is loaded (the cache never rewrites a model directory in place).
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(std::slice::from_ref(&weights_path), dtype, device)
        }
        .map_err(weights_err)?;
        let model = Bert::load_with(vb, &config, flash_attn).map_err(weights_err)?;
        tracing::info!(
            dir = %dir.display(),
            ?dtype,
            device = ?device.location(),
            flash_attn,
            "bert: loaded"
        );
        Ok(Embedder {
            model,
            tokenizer,
            device: device.clone(),
            dtype,
        })
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The dtype the model runs in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Whether attention runs through flash attention (else the matmul path).
    pub fn flash_attn(&self) -> bool {
        self.model.flash_attn()
    }

    /// Embeds `sentences` as one padded batch: an `(n, hidden)` f32 tensor of unit rows, on
    /// the model's device.
    pub fn embed<S: AsRef<str>>(&self, sentences: &[S]) -> Result<Tensor, BertError> {
        if sentences.is_empty() {
            return Err(BertError::Empty);
        }
        let inputs: Vec<&str> = sentences.iter().map(AsRef::as_ref).collect();
        let encodings = self
            .tokenizer
            .encode_batch(inputs, true)
            .map_err(|e| BertError::Encode(e.to_string()))?;
        let rows = |f: fn(&tokenizers::Encoding) -> &[u32]| -> Result<Tensor, BertError> {
            let rows = encodings
                .iter()
                .map(|e| Tensor::new(f(e), &self.device))
                .collect::<candle_core::Result<Vec<_>>>()?;
            Ok(Tensor::stack(&rows, 0)?)
        };
        let ids = rows(tokenizers::Encoding::get_ids)?;
        let type_ids = rows(tokenizers::Encoding::get_type_ids)?;
        let mask = rows(tokenizers::Encoding::get_attention_mask)?;
        tracing::debug!(shape = ?ids.dims(), "bert: batch");
        let hidden = self.model.forward(&ids, &type_ids, &mask)?;
        let pooled = mean_pool(&hidden, &mask)?;
        Ok(l2_normalize(&pooled)?)
    }
}

/// Reads a BERT `config.json`.
pub fn load_config(path: &Path) -> Result<Config, BertError> {
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
        .map_err(|reason| BertError::Config {
            path: path.to_path_buf(),
            reason,
        })
}

/// The mean of `hidden` `(batch, seq, dim)` over the positions where `mask` `(batch, seq)` is
/// 1, in f32: `(batch, dim)`.
pub fn mean_pool(hidden: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let hidden = hidden.to_dtype(DType::F32)?;
    let mask = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    let summed = hidden.broadcast_mul(&mask)?.sum(1)?;
    let counts = mask.sum(1)?.clamp(1e-9f32, f32::MAX)?;
    summed.broadcast_div(&counts)
}

/// Each row of `x` `(n, dim)` divided by its L2 norm (rows of zeros stay zero).
pub fn l2_normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12f32, f32::MAX)?;
    x.broadcast_div(&norm)
}

/// The cosine similarities of unit rows: `e · eᵀ` as nested vectors, computed on the CPU.
pub fn cosine_matrix(embeddings: &Tensor) -> candle_core::Result<Vec<Vec<f32>>> {
    let e = embeddings.to_device(&Device::Cpu)?.to_dtype(DType::F32)?;
    e.matmul(&e.t()?)?.to_vec2()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_pool_ignores_masked_positions() {
        let hidden = Tensor::new(
            &[
                [[1f32, 2.], [3., 4.], [100., 100.]],
                [[2f32, 0.], [4., 2.], [6., 4.]],
            ],
            &Device::Cpu,
        )
        .unwrap();
        let mask = Tensor::new(&[[1u32, 1, 0], [1, 1, 1]], &Device::Cpu).unwrap();
        let pooled = mean_pool(&hidden, &mask).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(pooled, vec![vec![2., 3.], vec![4., 2.]]);
    }

    #[test]
    fn mean_pool_works_from_half_precision() {
        let hidden = Tensor::new(&[[[1f32, 3.], [3., 5.]]], &Device::Cpu)
            .unwrap()
            .to_dtype(DType::F16)
            .unwrap();
        let mask = Tensor::new(&[[1u32, 1]], &Device::Cpu).unwrap();
        let pooled = mean_pool(&hidden, &mask).unwrap();
        assert_eq!(pooled.dtype(), DType::F32);
        assert_eq!(pooled.to_vec2::<f32>().unwrap(), vec![vec![2., 4.]]);
    }

    #[test]
    fn l2_normalize_gives_unit_rows() {
        let x = Tensor::new(&[[3f32, 4.], [0., 0.], [0., -2.]], &Device::Cpu).unwrap();
        let y = l2_normalize(&x).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(y, vec![vec![0.6, 0.8], vec![0., 0.], vec![0., -1.]]);
        let cos = cosine_matrix(&l2_normalize(&x).unwrap()).unwrap();
        assert!((cos[0][0] - 1.).abs() < 1e-6 && (cos[0][2] + 0.8).abs() < 1e-6);
    }

    #[test]
    fn extended_mask_is_finite_in_every_float_dtype() {
        let mask = Tensor::new(&[[1u32, 1, 0]], &Device::Cpu).unwrap();
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let m = extended_attention_mask(&mask, dtype).unwrap();
            assert_eq!(m.dims(), &[1, 1, 1, 3]);
            let v = m.flatten_all().unwrap().to_dtype(DType::F32).unwrap();
            let v = v.to_vec1::<f32>().unwrap();
            assert_eq!(&v[..2], &[0., 0.], "{dtype:?}");
            assert!(v[2].is_finite() && v[2] < -6e4, "{dtype:?}: {}", v[2]);
        }
    }

    #[test]
    fn missing_files_are_named() {
        let dir =
            std::env::temp_dir().join(format!("candle-rocm-demo-{}-nobert", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Embedder::load(&dir, &Device::Cpu, DType::F32).unwrap_err();
        assert!(err.to_string().contains("config.json"), "{err}");
        std::fs::write(dir.join("config.json"), "{\"not\": \"bert\"}").unwrap();
        std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
        std::fs::write(dir.join("model.safetensors"), b"truncated").unwrap();
        let err = Embedder::load(&dir, &Device::Cpu, DType::F32).unwrap_err();
        assert!(matches!(err, BertError::Config { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
