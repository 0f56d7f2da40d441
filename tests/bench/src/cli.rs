//! The command line of `candle-rocm-bench`.

use clap::Parser;

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
    /// A GGUF decoder file (llama or Gemma 3 architecture) for the `gguf_*_file` rows: prefill
    /// and decode tokens/s of the real model (skipped when not given; repeat for several).
    #[arg(long)]
    pub(crate) gguf: Vec<std::path::PathBuf>,
    /// One untimed pass of each selected decoder row (prompt, then the decode steps; f16 only
    /// for the safetensors llama), for a profiler such as Nsight Compute to record
    /// (`tests/hip-on-cuda/profile.sh`); prints no rows.
    #[arg(long)]
    pub(crate) profile: bool,
    /// Write the synthetic GGUF decoders of the gguf_*_1.1b_* rows (q4_0, q4_k_m) and an f16
    /// one into this folder as gguf-1.1b-<mix>.gguf, print their paths and exit (no device
    /// needed): the files llama.cpp's llama-bench runs on (tests/hip-on-cuda/llamacpp.sh).
    #[arg(long, value_name = "DIR")]
    pub(crate) write_gguf: Option<std::path::PathBuf>,
    /// With --write-gguf: a 2-layer model of the same kind (gguf-tiny-<mix>.gguf), to check the
    /// files quickly (e.g. with a CPU build of llama.cpp).
    #[arg(long, requires = "write_gguf")]
    pub(crate) tiny_gguf: bool,
}
