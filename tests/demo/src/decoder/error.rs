//! [`DecoderError`]: why a decoder could not be loaded, converted or run.

use std::path::PathBuf;

use crate::weights::FetchError;

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
