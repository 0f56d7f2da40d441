//! An AMD ROCm backend for [Candle](https://github.com/huggingface/candle).
//!
//! [`RocmDevice`] implements `candle_core::backend::BackendDevice` and [`RocmStorage`]
//! implements `BackendStorage`, for every method and the dtypes u8, u32, i16, i32, i64, bf16,
//! f16, f32, f64 and f8e4m3, on top of [`rocm_safe`]. The layout mirrors candle-core's CUDA
//! backend: `device.rs`, `storage.rs`, `utils.rs` with the `Map*` dispatch traits, and one
//! module per op family ([`ops`], [`reduce`], [`indexing`], [`conv`], [`matmul`]). A method
//! that has no kernel for a dtype returns a typed error, as Candle's CUDA backend does; see the
//! crate README for the method x dtype table.
//!
//! Also here: [`report`], the device-selection report behind the `rocm-info` binary, and
//! [`registry`], which picks and lazily loads each device's kernel code objects.
//!
//! Until candle-core can take an out-of-tree backend in its `Device`/`Storage` enums, the
//! backend is used through the traits:
//!
//! ```no_run
//! use candle_core::backend::{BackendDevice, BackendStorage};
//! use candle_core::{CpuStorage, DType, Layout};
//! use candle_rocm::RocmDevice;
//!
//! let dev = <RocmDevice as BackendDevice>::new(0)?; // a typed error says why if unusable
//! let x = dev.storage_from_cpu_storage(&CpuStorage::F32(vec![1.0, 2.0, 3.0, 4.0]))?;
//! let l = Layout::contiguous((2, 2));
//! let y = x.matmul(&x, (1, 2, 2, 2), &l, &l)?.to_dtype(&l, DType::BF16)?;
//! println!("{:?}", y.to_cpu_storage()?);
//! # Ok::<(), candle_core::Error>(())
//! ```

pub mod conv;
pub mod copy;
mod device;
pub mod elementwise;
mod error;
#[cfg(feature = "candle")]
mod fused;
pub mod gemv;
pub mod indexing;
pub mod matmul;
pub mod miopen;
pub mod ops;
#[cfg(feature = "candle")]
pub mod quantized;
pub mod reduce;
pub mod registry;
pub mod report;
mod rows;
#[cfg(feature = "candle")]
mod slot;
mod storage;
pub mod utils;

pub use device::RocmDevice;
pub use error::{BackendError, WrapErr};
#[cfg(feature = "candle")]
pub use slot::{device, device_or_cpu, strict, BACKEND_NAME, STRICT_VAR};
pub use storage::{RocmDType, RocmStorage, RocmStorageSlice, STORED_DTYPES};
