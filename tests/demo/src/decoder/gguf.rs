//! [`GgufDecoder`]: a quantized llama GGUF file through candle-transformers'
//! `quantized_llama`, its weights kept quantized on the device.

use std::path::Path;

use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_llama::ModelWeights;

use super::metadata::read_gguf;
use super::tokenizer::{decode, encode, tokenizer_from_gguf, GgufTokenizer};
use super::{forced_steps, greedy, DecoderError, Generation};

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
    /// Loads the GGUF file `path` on `device` with matmul attention; the quantized weights
    /// keep their GGML types there (a device whose backend cannot hold quantized tensors gives
    /// [`DecoderError::Gguf`] with Candle's reason).
    pub fn load(path: &Path, device: &Device) -> Result<Self, DecoderError> {
        Self::load_with(path, device, false)
    }

    /// [`Self::load`] with flash attention (`flash_attn`: the patched candle-transformers'
    /// `ModelWeights::with_flash_attn`, one fused kernel a layer on the GPU) or without.
    pub fn load_with(path: &Path, device: &Device, flash_attn: bool) -> Result<Self, DecoderError> {
        let (content, mut reader) = read_gguf(path)?;
        let tokenizer = tokenizer_from_gguf(&content, path)?;
        let gguf_err = |error| DecoderError::Gguf {
            path: path.to_path_buf(),
            error,
        };
        let model = ModelWeights::from_gguf(content, &mut reader, device)
            .and_then(|m| m.with_flash_attn(flash_attn))
            .map_err(gguf_err)?;
        tracing::info!(path = %path.display(), device = ?device.location(), flash_attn, "decoder: loaded GGUF");
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_gguf_is_named() {
        // (The non-CPU error needs a GPU: tests/decode.rs checks it there.)
        let path = Path::new("/nonexistent/model.gguf");
        let err = GgufDecoder::load(path, &Device::Cpu).unwrap_err();
        assert!(matches!(err, DecoderError::Missing(_)), "{err}");
        assert!(err.to_string().contains("model.gguf"), "{err}");
    }
}
