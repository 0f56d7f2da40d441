//! candle-flash-attn 0.11.1's API on AMD GPUs, through candle-rocm: a stand-in for the
//! crates.io crate (whose kernels are CUDA-only and need nvcc to build), with the same
//! functions, arguments, layouts and semantics, so code and crates written against
//! candle-flash-attn (candle-transformers' `flash-attn` feature among them) build and run
//! unchanged on candle-rocm's device and on the CPU.
//!
//! Everything here is `candle_rocm::flash_attn`, re-exported; see it for what is supported
//! (f16, bf16 and f32; head dims that are multiples of 8 up to 512; causal and sliding
//! windows, ALiBi, softcap, grouped-query heads, variable-length batches, a paged KV cache) and
//! what differs from upstream (a CPU path, typed errors naming the bad argument).
//!
//! It takes the place of the crates.io crate through `[patch.crates-io]`, next to the patched
//! Candle crates `cargo xtask candle` writes (paths as it prints them):
//!
//! ```toml
//! [patch.crates-io]
//! candle-core = { path = "/path/to/candle-rocm/.candle/candle-core" }
//! candle-nn = { path = "/path/to/candle-rocm/.candle/candle-nn" }
//! candle-transformers = { path = "/path/to/candle-rocm/.candle/candle-transformers" }
//! candle-flash-attn = { path = "/path/to/candle-rocm/flash-attn" }
//! ```
//!
//! The patched candle-transformers' `flash-attn` feature no longer turns on Candle's `cuda`
//! feature, so `candle-transformers = { version = "0.11.1", features = ["flash-attn"] }` builds
//! without nvcc, and models built with `use_flash_attn: true` call these functions.

pub use candle_rocm::flash_attn::*;
