//! The f32 safetensors SmolLM2 (derived from the GGUF by `convert_gguf`) against the GGUF run
//! by candle-transformers' `quantized_llama` with its weights dequantized to f32
//! (`CANDLE_DEQUANTIZE_ALL=1`): both then compute with the same f32 weights, so the first 8
//! greedy tokens must agree exactly for every prompt. This checks the conversion (tensor names,
//! the q/k un-permutation for the rotary embedding, config.json, tokenizer.json).
//!
//! `CANDLE_DEQUANTIZE_ALL` is read once per thread by Candle and the environment is
//! process-wide, so this test has a test binary of its own, holding this one test only.
//! (`tests/decode.rs` compares the GGUF as shipped, whose matmuls also quantize the
//! activations to 8 bits, within a tolerance.)

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use candle_core::{DType, Device};
use candle_rocm_demo::decoder::{smollm2_gguf, smollm2_safetensors_dir, GgufDecoder, LlamaDecoder};

/// The prompts of `tests/decode.rs`.
const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea, there lived",
];

#[test]
fn cpu_dequantized_gguf_equals_f32_safetensors_for_8_tokens() {
    // The only test in this binary (see the module docs): no other thread reads the variable.
    std::env::set_var("CANDLE_DEQUANTIZE_ALL", "1");
    let dir = match std::env::var_os("CANDLE_ROCM_LLAMA_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => smollm2_safetensors_dir().unwrap(),
    };
    let mut q = GgufDecoder::load(&smollm2_gguf().unwrap(), &Device::Cpu).unwrap();
    let f = LlamaDecoder::load(&dir, &Device::Cpu, DType::F32).unwrap();
    for prompt in PROMPTS {
        let a = q.generate(prompt, 8).unwrap();
        let b = f.generate(prompt, 8).unwrap();
        assert_eq!(
            a.prompt_ids, b.prompt_ids,
            "{prompt:?}: the tokenizers differ"
        );
        assert_eq!(
            a.ids, b.ids,
            "{prompt:?}: GGUF {:?} vs f32 safetensors {:?}",
            a.text, b.text
        );
    }
}
