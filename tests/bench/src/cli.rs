//! The command line of `candle-rocm-bench`.

use clap::{Parser, ValueEnum};

// The arguments (`candle-rocm-bench --help`). No doc comment here: clap would make it the
// long help's text.
#[derive(Parser)]
#[command(about = "Times Tensor ops and models on one device (see cargo xtask bench)")]
pub(crate) struct Cli {
    /// Only rows whose group or op contains one of these words (all rows when empty).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// Only attention rows whose shape contains one of these words (e.g. `n32768`, `s2048d128`;
    /// all when empty): a single shape for a profiler.
    #[arg(long, value_delimiter = ',')]
    pub(crate) shape: Vec<String>,
    /// Decode steps timed after the prompt in the decoder rows.
    #[arg(long, default_value_t = 64)]
    pub(crate) decode_tokens: usize,
    /// Elements of the memory-bound rows, a multiple of 2^18 (2^26 by default; smaller for a
    /// quick look).
    #[arg(long, default_value_t = 1 << 26)]
    pub(crate) elements: usize,
    /// Run on the CPU (to try the bench itself on a machine without a GPU).
    #[arg(long)]
    pub(crate) cpu: bool,
    /// The conv_models rows on small versions of their models (shapes prefixed `tiny`), to run
    /// them end to end on the CPU in seconds.
    #[arg(long)]
    pub(crate) tiny_models: bool,
    /// The synthetic GGUF decoders' long-context rows (`gguf_decode_1.1b_*`, shape
    /// `prompt<N>`): the decode steps after a prompt of this many tokens, where attention reads
    /// N cached positions a layer (0: none; N plus the decode tokens must stay below the
    /// model's 4096 positions).
    #[arg(long, default_value_t = 2048)]
    pub(crate) decode_depth: usize,
    /// A GGUF decoder file (llama or Gemma 3 architecture) for the `gguf_*_file` rows: prefill
    /// and decode tokens/s of the real model (skipped when not given; repeat for several).
    #[arg(long)]
    pub(crate) gguf: Vec<std::path::PathBuf>,
    /// One untimed pass of each selected decoder row (prompt, then the decode steps; f16 only
    /// for the safetensors llama; the synthetic GGUF rows' decode too, `gguf_decode_1.1b_*`),
    /// for a profiler such as Nsight Compute to record (`tests/hip-on-cuda/profile.sh`); prints
    /// no rows.
    #[arg(long)]
    pub(crate) profile: bool,
    /// Write the synthetic GGUF decoders of the gguf_*_1.1b_* rows (q4_0, q4_k_m) and an f16
    /// one into this folder as gguf-1.1b-<mix>.gguf, print their paths and exit (no device
    /// needed): the files llama.cpp's llama-bench runs on (tests/hip-on-cuda/llamacpp.sh).
    #[arg(long, value_name = "DIR")]
    pub(crate) write_gguf: Option<std::path::PathBuf>,
    /// The rows of several GPUs (this build of ours only): all-reduce over N GPUs, copies from
    /// GPU 0 to GPU 1 and the tensor-parallel llama on 1 GPU and on N (groups mgpu_*; one
    /// process per GPU, this one rank 0). With --cpu, 1: the llama's rows on the CPU. Only
    /// these rows run.
    #[arg(long, value_name = "N")]
    pub(crate) gpus: Option<usize>,
    /// The tensor-parallel llama's shape in the mgpu_tp rows: Llama 2 7B's, or a small one
    /// (for the CPU).
    #[arg(long, value_enum, default_value_t = TpModel::Llama7b)]
    pub(crate) tp_model: TpModel,
    /// The tensor-parallel llama's layers (32 in the 7B model; fewer for a quick look).
    #[arg(long, default_value_t = 32)]
    pub(crate) tp_layers: usize,
    /// The prompt tokens of the tensor-parallel llama's prefill rows (at most the model's
    /// positions: 4096 in the 7B model, 1024 in the tiny one).
    #[arg(long, default_value_t = 512)]
    pub(crate) tp_prefill: usize,
    /// The tensor-parallel llama's attention: flash (the default on a GPU) or matmul (the
    /// default on the CPU; its rows' op names end in `_matmul`).
    #[arg(long, value_enum)]
    pub(crate) tp_attention: Option<TpAttention>,
    /// Which of the tensor-parallel llama's vocabulary tables are split over the ranks: the
    /// output head only (the library's default: the embeddings whole on every rank, no
    /// all-reduce after the lookup), both, or neither.
    #[arg(long, value_enum, default_value_t = TpVocab::Head)]
    pub(crate) tp_vocab: TpVocab,
    /// Set by rank 0 on the ranks it starts for --gpus N (not for hand use).
    #[arg(long, hide = true, requires = "gpus")]
    pub(crate) rank_worker: bool,
    /// With --write-gguf: a 2-layer model of the same kind (gguf-tiny-<mix>.gguf), to check the
    /// files quickly (e.g. with a CPU build of llama.cpp).
    #[arg(long, requires = "write_gguf")]
    pub(crate) tiny_gguf: bool,
}

/// The tensor-parallel llama's shape (`--tp-model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum TpModel {
    /// Llama 2 7B: 4096 hidden, 32 heads, 11008 intermediate, 32000 tokens.
    #[value(name = "7b")]
    Llama7b,
    /// 128 hidden, 4 heads, 344 intermediate, 1024 tokens: a run on the CPU.
    Tiny,
}

/// Which vocabulary tables the tensor-parallel llama splits (`--tp-vocab`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum TpVocab {
    /// The output head only; the embeddings whole on every rank (`VocabSplit::HEAD`).
    Head,
    /// The embeddings and the output head (`VocabSplit::SPLIT`).
    Split,
    /// Neither (`VocabSplit::WHOLE`).
    Whole,
}

/// The tensor-parallel llama's attention path (`--tp-attention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum TpAttention {
    /// candle-flash-attn's API on candle-rocm's kernels.
    Flash,
    /// Matmul, causal mask and softmax in f32.
    Matmul,
}
