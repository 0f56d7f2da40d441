//! [`TpError`]: why a tensor-parallel model could not be planned, loaded, started or run.

use std::path::PathBuf;

/// Why a tensor-parallel model could not be planned, loaded, started or run. Each variant names
/// the tensor, the setting or the rank at fault and says what to do.
#[derive(Debug, thiserror::Error)]
pub enum TpError {
    /// A dimension that must be split evenly over the ranks is not a multiple of the world size.
    #[error(
        "{tensor}: dimension {dim} has {len} entries, which do not split evenly over {world_size} \
         rank(s). To fix: run on a number of GPUs that divides {len}"
    )]
    UnevenSplit {
        /// The tensor (or, for head counts, the config key).
        tensor: String,
        /// The dimension split.
        dim: usize,
        /// Its length.
        len: usize,
        /// The number of ranks.
        world_size: usize,
    },
    /// The model's head counts do not allow a split over the ranks.
    #[error(
        "the model has {what} = {count}, which does not split evenly over {world_size} GPU(s): \
         every rank needs whole heads. To fix: run on a number of GPUs that divides {count} \
         (and the other head counts)"
    )]
    Heads {
        /// The config key (`num_attention_heads`, `num_key_value_heads`).
        what: &'static str,
        /// Its value.
        count: usize,
        /// The number of ranks.
        world_size: usize,
    },
    /// A block of a quantized tensor's columns does not fall on the type's block boundaries: a
    /// GGML block of values cannot be cut between two ranks.
    #[error(
        "{tensor}: columns {cols:?} of a {dtype:?} tensor do not fall on its blocks of {block} \
         values; a quantized block cannot be split between ranks. To fix: run on a number of \
         GPUs that splits the row into whole blocks, or use a file whose type has smaller blocks"
    )]
    BlockSplit {
        /// The tensor (its name in the file).
        tensor: String,
        /// Its GGML type.
        dtype: candle_core::quantized::GgmlDType,
        /// The columns asked for (a whole row when the row itself is not whole blocks).
        cols: std::ops::Range<usize>,
        /// The values of one block of the type.
        block: usize,
    },
    /// A GGUF tensor's type is one candle cannot load.
    #[error("{tensor}: GGML type {dtype:?} cannot be loaded (candle reads f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0 and q2_K to q6_K)")]
    GgufType {
        /// The tensor (its name in the file).
        tensor: String,
        /// Its GGML type.
        dtype: candle_core::quantized::GgmlDType,
    },
    /// A vocabulary too small to give every rank a block of rows.
    #[error("{tensor}: a vocabulary of {vocab} rows does not give each of {world_size} ranks a block; run on fewer GPUs or keep the vocabulary whole (VocabSplit::WHOLE)")]
    VocabSplit {
        /// The tensor.
        tensor: String,
        /// Its rows.
        vocab: usize,
        /// The number of ranks.
        world_size: usize,
    },
    /// The rank or world size is impossible.
    #[error("rank {rank} of a world of {world_size}: the world size must be at least 1 and the rank below it")]
    BadRank {
        /// The rank.
        rank: usize,
        /// The world size.
        world_size: usize,
    },
    /// A tensor the model needs is absent from the weights.
    #[error("{path}: it has no tensor {tensor}; this is not a llama checkpoint in the Hugging Face layout")]
    MissingTensor {
        /// The weights file(s).
        path: PathBuf,
        /// The tensor name.
        tensor: String,
    },
    /// A tensor's shape is not the one the config implies.
    #[error("{path}: tensor {tensor} has shape {got:?}, the config implies {want:?}; the weights do not belong to this config.json")]
    Shape {
        /// The weights file(s).
        path: PathBuf,
        /// The tensor name.
        tensor: String,
        /// The shape in the file.
        got: Vec<usize>,
        /// The shape the config implies.
        want: Vec<usize>,
    },
    /// The weights file could not be mapped or sliced.
    #[error("{path} could not be read ({reason}); the file is truncated or corrupt: convert or fetch it again")]
    Weights {
        /// The weights file(s).
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// `config.json` could not be read.
    #[error(
        "{path} is not a llama config.json ({reason}); pass a Hugging Face llama model directory"
    )]
    Config {
        /// The file.
        path: PathBuf,
        /// The reader's or parser's message.
        reason: String,
    },
    /// The ranks could not meet (environment, store, timeout).
    #[error("rank bootstrap failed: {0}")]
    Rendezvous(#[from] rocm_safe::rendezvous::RendezvousError),
    /// A rank process could not be started, or failed, or did not finish in time.
    #[error("rank {rank}: {reason}")]
    Rank {
        /// The rank.
        rank: usize,
        /// What happened to it.
        reason: String,
    },
    /// A tensor operation (or a collective) failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
