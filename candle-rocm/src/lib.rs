//! An AMD ROCm backend for [Candle](https://github.com/huggingface/candle).
//!
//! This crate will implement `candle_core::backend::{BackendDevice, BackendStorage}` for
//! `RocmDevice` / `RocmStorage` on top of [`rocm_safe`], mirroring the shape of candle-core's
//! CUDA backend (`device.rs`, `error.rs`, `utils.rs` with the `Map*` dispatch traits, and one
//! file per op family), plus the fused ops candle-nn needs and quantized (GGUF) storage.
//!
//! Today it provides [`report`], the device-selection report behind the `rocm-info` binary
//! (which libraries were loaded, which GPUs are usable, or precisely why none is),
//! [`registry`], which picks and lazily loads each device's kernel code objects, and the first
//! slice of the backend: [`RocmDevice`] and [`RocmStorage`] with host transfers, seeded random
//! numbers, `affine`, unary and binary ops, `to_dtype` and `copy_strided_src`. The
//! `BackendDevice`/`BackendStorage` trait impls come once every method exists.

pub mod conv;
mod device;
mod error;
pub mod indexing;
pub mod matmul;
pub mod ops;
pub mod reduce;
pub mod registry;
pub mod report;
mod storage;
pub mod utils;

pub use device::RocmDevice;
pub use error::{BackendError, WrapErr};
pub use storage::{RocmDType, RocmStorage, RocmStorageSlice};
