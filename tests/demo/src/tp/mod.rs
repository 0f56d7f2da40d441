//! Tensor parallelism: a llama split over several GPUs, one process per GPU (issue 29).
//!
//! The shape of Candle's `llama_multiprocess` example, as our own code on candle-rocm's RCCL
//! collectives:
//!
//! - `shard.rs`: which block of each weight a rank holds ([`Shard`], [`Split`]) and
//!   [`ShardedWeights`], which reads only that block from memory-mapped safetensors files or
//!   from a GGUF file;
//! - `gguf.rs`: the byte ranges of a GGUF tensor's block of rows or columns ([`SlicePlan`],
//!   whole quantized blocks only), their reader ([`GgufShards`]) and a llama GGUF's config
//!   ([`gguf_config`]);
//! - `linear.rs`: [`ColumnParallelLinear`], [`RowParallelLinear`] (which ends in an
//!   all-reduce) and the [`World`] they reduce over: candle-rocm's [`Comm`] across processes,
//!   or [`Solo`] for one rank;
//! - `vocab.rs`: the embeddings and the output head split by vocabulary rows
//!   ([`VocabEmbedding`], [`VocabHead`], [`VocabSplit`]);
//! - `llama.rs`: [`TpLlama`], candle-transformers' llama with its attention and MLP split;
//! - `launch.rs`: torchrun-style ranks: [`spawn_ranks`] / [`wait_ranks`] on one host, and
//!   [`join`], each rank's rendezvous and communicator;
//! - `random.rs`: checkpoints with random weights of real models' shapes;
//! - `error.rs`: [`TpError`].
//!
//! This file holds the greedy loop over a [`TpLlama`]. Every rank runs it with the same
//! prompt; every rank computes the same logits, so every rank picks the same tokens and the
//! collectives stay paired.
//!
//! The tensor-parallel llama reads safetensors ([`load_dir`]) or a llama GGUF file
//! ([`load_gguf`]: its linear layers stay quantized, each rank reading only its blocks).
//!
//! [`Comm`]: candle_rocm::collective::Comm

mod error;
mod gguf;
mod launch;
mod linear;
mod llama;
mod random;
mod shard;
mod vocab;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::llama::{Config, LlamaEosToks};

pub use error::TpError;
pub use gguf::{gguf_config, gguf_name, GgufShards, SlicePlan, GGUF_TYPES};
pub use launch::{free_port, join, rank_env, spawn_ranks, wait_ranks, RankProcess};
pub use linear::{
    ColumnParallelLinear, ParallelWeight, RowParallelLinear, Solo, StackedColumns, World,
};
pub use llama::{TpCache, TpLlama};
pub use random::{
    llama2_7b, parse_config, tinyllama_1_1b, write_random_llama, write_random_llama_gguf, GgufTypes,
};
pub use shard::{safetensors_files, Shard, ShardedWeights, Split};
pub use vocab::{VocabEmbedding, VocabHead, VocabSplit};

use crate::decoder::{
    decode, encode, forced_steps, greedy, tokenizer_from_gguf, DecoderError, Generation,
};

/// Reads `dir/config.json`: candle-transformers' config (flash attention as asked) and the
/// end-of-sequence token ids.
pub fn read_config(dir: &Path, flash_attn: bool) -> Result<(Config, Vec<u32>), TpError> {
    let path = dir.join("config.json");
    let json: serde_json::Value = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
        .map_err(|reason| TpError::Config {
            path: path.clone(),
            reason,
        })?;
    let config = parse_config(&json, flash_attn).map_err(|e| match e {
        TpError::Config { reason, .. } => TpError::Config { path, reason },
        e => e,
    })?;
    let eos = match &config.eos_token_id {
        Some(LlamaEosToks::Single(id)) => vec![*id],
        Some(LlamaEosToks::Multiple(ids)) => ids.clone(),
        None => Vec::new(),
    };
    Ok((config, eos))
}

/// A tensor-parallel llama with its tokenizer: what each rank of the demo runs.
pub struct TpDecoder {
    model: TpLlama,
    tokenizer: Option<tokenizers::Tokenizer>,
    bos: u32,
    eos: Vec<u32>,
    dtype: DType,
    device: Device,
}

impl std::fmt::Debug for TpDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TpDecoder")
            .field("world", self.model.world())
            .field("dtype", &self.dtype)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl TpDecoder {
    /// Loads this rank's share of the Hugging Face llama directory `dir` (`config.json`,
    /// `tokenizer.json`, safetensors weights) onto `device` in `dtype`, with flash attention or
    /// the matmul path. Without a `tokenizer.json` (random weights) prompts are the BOS token
    /// and their UTF-8 bytes as llama's byte tokens (`<0x00>` is id 3), and the output is the
    /// token ids.
    pub fn load(
        dir: &Path,
        world: Arc<dyn World>,
        dtype: DType,
        device: &Device,
        flash_attn: bool,
    ) -> Result<TpDecoder, TpError> {
        let (config, eos) = read_config(dir, flash_attn)?;
        let path = dir.join("tokenizer.json");
        let tokenizer = if path.is_file() {
            Some(
                tokenizers::Tokenizer::from_file(&path).map_err(|e| TpError::Config {
                    path: path.clone(),
                    reason: format!("the tokenizer could not be read: {e}"),
                })?,
            )
        } else {
            None
        };
        let bos = config.bos_token_id.unwrap_or(1);
        let model = load_dir(dir, &config, world, dtype, device)?;
        Ok(TpDecoder {
            model,
            tokenizer,
            bos,
            eos,
            dtype,
            device: device.clone(),
        })
    }

    /// Loads this rank's share of the llama GGUF file `path` onto `device` ([`load_gguf`]: the
    /// linear layers quantized, f32 activations), with the tokenizer its metadata holds.
    pub fn load_gguf(
        path: &Path,
        world: Arc<dyn World>,
        device: &Device,
        flash_attn: bool,
    ) -> Result<TpDecoder, TpError> {
        let dtype = DType::F32;
        let shard = Shard::new(world.rank(), world.world_size())?;
        let weights = ShardedWeights::open_gguf(path, shard, dtype, device)?;
        let gguf = weights.gguf().ok_or_else(|| TpError::Weights {
            path: path.to_path_buf(),
            reason: "not opened as a GGUF file".into(),
        })?;
        let config = gguf_config(gguf, flash_attn)?;
        let tok = tokenizer_from_gguf(gguf.content(), path).map_err(|e| TpError::Config {
            path: path.to_path_buf(),
            reason: format!("the tokenizer in its metadata could not be built: {e}"),
        })?;
        let model = TpLlama::load(&weights, &config, world)?;
        Ok(TpDecoder {
            model,
            tokenizer: Some(tok.tokenizer),
            bos: tok.bos.or(config.bos_token_id).unwrap_or(1),
            eos: tok.eos.into_iter().collect(),
            dtype,
            device: device.clone(),
        })
    }

    /// The model.
    pub fn model(&self) -> &TpLlama {
        &self.model
    }

    /// Greedy decoding of up to `max_tokens` tokens after `prompt` (every rank calls it with
    /// the same prompt).
    pub fn generate(&self, prompt: &str, max_tokens: usize) -> Result<Generation, DecoderError> {
        let prompt_ids = match &self.tokenizer {
            Some(t) => encode(t, prompt)?,
            None => std::iter::once(self.bos)
                .chain(prompt.bytes().map(|b| u32::from(b) + 3))
                .collect(),
        };
        let (ids, prompt_time, decode_time) = generate(
            &self.model,
            &prompt_ids,
            max_tokens,
            &self.eos,
            self.dtype,
            &self.device,
        )?;
        let text = match &self.tokenizer {
            Some(t) => decode(t, &ids)?,
            None => format!(" (no tokenizer: token ids {ids:?})"),
        };
        Ok(Generation {
            prompt_ids,
            ids,
            text,
            prompt_time,
            decode_time,
        })
    }
}

/// Checks, before any process starts, that the llama directory `dir` splits over
/// `world_size` ranks: its head counts and its intermediate size.
pub fn check_split(dir: &Path, world_size: usize) -> Result<(), TpError> {
    let (c, _) = read_config(dir, false)?;
    let shard = Shard::new(0, world_size)?;
    shard.heads("num_attention_heads", c.num_attention_heads)?;
    shard.heads("num_key_value_heads", c.num_key_value_heads)?;
    shard.range("intermediate_size (config.json)", 0, c.intermediate_size)?;
    Ok(())
}

/// Checks, before any process starts, that the llama GGUF file `path` splits over
/// `world_size` ranks: its head counts, its intermediate size, and every split tensor's block
/// (whole quantized blocks for the row-parallel weights' columns, [`TpError::BlockSplit`]).
pub fn check_split_gguf(path: &Path, world_size: usize) -> Result<(), TpError> {
    let gguf = GgufShards::open(path)?;
    let c = gguf_config(&gguf, false)?;
    let shard = Shard::new(0, world_size)?;
    shard.heads("num_attention_heads", c.num_attention_heads)?;
    shard.heads("num_key_value_heads", c.num_key_value_heads)?;
    shard.range("llama.feed_forward_length", 0, c.intermediate_size)?;
    shard.vocab_range("token_embd.weight", c.vocab_size)?;
    let mut names: Vec<&String> = gguf.content().tensor_infos.keys().collect();
    names.sort();
    for name in names {
        let Some(hf) = crate::decoder::hf_name(name) else {
            continue;
        };
        let (dtype, full) = gguf.info(name)?;
        SlicePlan::of_split(name, dtype, &full, Split::of_llama(&hf), shard)?;
    }
    Ok(())
}

/// Loads this rank's share (`world`'s rank) of the llama directory `dir` onto `device` in
/// `dtype`.
pub fn load_dir(
    dir: &Path,
    config: &Config,
    world: Arc<dyn World>,
    dtype: DType,
    device: &Device,
) -> Result<TpLlama, TpError> {
    let shard = Shard::new(world.rank(), world.world_size())?;
    let weights = ShardedWeights::open(&safetensors_files(dir)?, shard, dtype, device)?;
    TpLlama::load(&weights, config, world)
}

/// Loads this rank's share (`world`'s rank) of the llama GGUF file `path` onto `device`: the
/// quantized linear layers keep their GGML blocks (candle's quantized product, which takes
/// f32 activations on the GPU's fast paths: pass `DType::F32` as `dtype`, as
/// candle-transformers' `quantized_llama` runs), norms and embeddings dequantized to `dtype`.
/// Returns the model and the config read from the file's metadata.
pub fn load_gguf(
    path: &Path,
    world: Arc<dyn World>,
    dtype: DType,
    device: &Device,
    flash_attn: bool,
) -> Result<(TpLlama, Config), TpError> {
    let shard = Shard::new(world.rank(), world.world_size())?;
    let weights = ShardedWeights::open_gguf(path, shard, dtype, device)?;
    let gguf = weights.gguf().ok_or_else(|| TpError::Weights {
        path: path.to_path_buf(),
        reason: "not opened as a GGUF file".into(),
    })?;
    let config = gguf_config(gguf, flash_attn)?;
    let model = TpLlama::load(&weights, &config, world)?;
    Ok((model, config))
}

/// Greedy decoding of up to `max_tokens` tokens after `prompt_ids` (stopping after a token of
/// `eos`): the ids, the prompt time and the decode time (as [`crate::decoder::Generation`]).
pub fn generate(
    model: &TpLlama,
    prompt_ids: &[u32],
    max_tokens: usize,
    eos: &[u32],
    dtype: DType,
    device: &Device,
) -> Result<(Vec<u32>, Duration, Duration), DecoderError> {
    let mut cache = TpCache::new(model.config(), dtype, device)?;
    greedy(prompt_ids, max_tokens, eos, |input, pos| {
        let x = Tensor::new(input, device)?.unsqueeze(0)?;
        Ok(model.forward(&x, pos, &mut cache)?)
    })
}

/// The f32 logits after `prompt_ids` and after each token of `continuation` fed in turn
/// (teacher forcing): `continuation.len() + 1` rows.
pub fn forced_logits(
    model: &TpLlama,
    prompt_ids: &[u32],
    continuation: &[u32],
    dtype: DType,
    device: &Device,
) -> Result<Vec<Vec<f32>>, DecoderError> {
    let mut cache = TpCache::new(model.config(), dtype, device)?;
    forced_steps(prompt_ids.to_vec(), continuation, device, |x, pos| {
        Ok(model.forward(x, pos, &mut cache)?)
    })
}
