//! Tensor-level GPU tests: candle-nn's fused ops, candle-flash-attn's API, convolutions on
//! the GEMM path, small Stable Diffusion models on each convolution path, `cat`'s batched
//! copies, decode-shaped matrix products, autograd, quantized (GGML) tensors, many threads on
//! one device and the device handle itself, each result compared with the same candle API on
//! the CPU.
//!
//! Every test needs a HIP device and is `#[ignore]`d; the HIP-on-CUDA harness runs them with
//! `--include-ignored` and `CANDLE_ROCM_STRICT=1`, so an op that would silently fall back to
//! the CPU fails the test instead. One binary for all of them keeps the device bundle small.

// A crate root looks for `mod x;` beside itself; the modules live in `gpu/`.
#[path = "gpu/autograd.rs"]
mod autograd;
#[path = "gpu/broadcast.rs"]
mod broadcast;
#[path = "gpu/conv.rs"]
mod conv;
#[path = "gpu/conv_models.rs"]
mod conv_models;
#[path = "gpu/copy.rs"]
mod copy;
#[path = "gpu/device.rs"]
mod device;
#[path = "gpu/flash_attn.rs"]
mod flash_attn;
#[path = "gpu/flash_attn_kvcache.rs"]
mod flash_attn_kvcache;
#[path = "gpu/flash_attn_long.rs"]
mod flash_attn_long;
#[path = "gpu/fused.rs"]
mod fused;
#[path = "gpu/fused_residual.rs"]
mod fused_residual;
#[path = "gpu/graphs.rs"]
mod graphs;
// The tiny llama of the flash-attn tests, shared with tests/flash_attn.rs.
#[path = "flash_attn/llama.rs"]
mod llama;
#[path = "gpu/matmul.rs"]
mod matmul;
#[path = "gpu/quantized.rs"]
mod quantized;
#[path = "gpu/stress.rs"]
mod stress;
