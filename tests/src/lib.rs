//! Tensor-level integration tests for candle-rocm.
//!
//! This crate will run Candle `Tensor` operations, candle-nn layers and candle-transformers
//! models on the ROCm backend (through the patched candle-core that `cargo xtask candle`
//! materialises) and compare them with the CPU. Until the backend and the patch exist it holds
//! no tests; the backend-level parity suite lives in candle-rocm.
