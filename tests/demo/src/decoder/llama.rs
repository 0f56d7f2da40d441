//! [`LlamaDecoder`]: a Hugging Face llama directory through candle-transformers' `llama::Llama`,
//! unchanged, in f32, f16 or bf16 on any device.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::llama::{Cache, Config, Llama, LlamaConfig, LlamaEosToks};
use tokenizers::Tokenizer;

use super::tokenizer::{decode, encode};
use super::{forced_steps, greedy, DecoderError, Generation};

/// The files of a Hugging Face llama directory, as [`LlamaDecoder::load`] reads them.
pub const LLAMA_FILES: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];

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
    /// Loads the llama directory `dir` onto `device`, its weights converted to `dtype`, with
    /// flash attention on a GPU and the matmul path on the CPU (see [`Self::load_with`]).
    pub fn load(dir: &Path, device: &Device, dtype: DType) -> Result<Self, DecoderError> {
        Self::load_with(dir, device, dtype, !device.is_cpu())
    }

    /// [`Self::load`] with the attention path chosen: `flash_attn` runs candle-transformers'
    /// `use_flash_attn` path, which calls `candle_flash_attn` (candle-rocm's flash attention
    /// through the stand-in crate); otherwise its matmul, mask and softmax path.
    pub fn load_with(
        dir: &Path,
        device: &Device,
        dtype: DType,
        flash_attn: bool,
    ) -> Result<Self, DecoderError> {
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
        let config = llama_config.into_config(flash_attn);
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
        tracing::info!(
            dir = %dir.display(),
            ?dtype,
            device = ?device.location(),
            flash_attn,
            "decoder: loaded"
        );
        Ok(LlamaDecoder {
            model,
            config,
            tokenizer,
            eos,
            device: device.clone(),
            dtype,
        })
    }

    /// Whether attention runs through flash attention (else the matmul path).
    pub fn flash_attn(&self) -> bool {
        self.config.use_flash_attn
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
