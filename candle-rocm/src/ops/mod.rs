//! The op families of `BackendStorage`, over storage slices ([`crate::RocmStorageSlice`]) and a
//! device: each dispatches on dtype (`crate::dispatch`) and calls the launchers
//! ([`crate::launch`]) or candle's kernels. None of them knows the storage type; `storage.rs`,
//! the level above, wraps their results.
//!
//! Inside this level, `conv` uses `copy` and `matmul` (im2col times the kernel on the GEMM),
//! and `collective` uses `peer_reduce` (the one-shot all-reduce); nothing else here imports a
//! sibling.

pub mod attention;
pub mod collective;
pub mod conv;
pub mod copy;
pub mod elementwise;
pub mod indexing;
pub mod matmul;
pub mod peer_reduce;
pub mod rand;
pub mod reduce;
