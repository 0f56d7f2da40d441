//! An AMD ROCm backend for [Candle](https://github.com/huggingface/candle).
//!
//! [`RocmDevice`] implements `candle_core::backend::BackendDevice` and [`RocmStorage`]
//! implements `BackendStorage`, for every method and the dtypes u8, u32, i16, i32, i64, bf16,
//! f16, f32, f64 and f8e4m3, on top of [`rocm_safe`]. A method that has no kernel for a dtype
//! returns a typed error, as Candle's CUDA backend does; see the crate README for the method x
//! dtype table.
//!
//! The modules are levels; a module imports only from levels below its own (a unit test,
//! `levels`, keeps it so):
//!
//! | level | modules | what they hold |
//! |---|---|---|
//! | 0 | [`settings`] | every `CANDLE_ROCM_*` variable, read once |
//! | 1 | [`registry`] | which code object each device loads, loaded lazily |
//! | 2 | `error`, [`report`] | [`BackendError`]; the `rocm-info` report |
//! | 3 | `dtype` | the dtype table: [`RocmStorageSlice`], [`RocmDType`] |
//! | 4 | `device`, `layout` | [`RocmDevice`]; layout guards and checked sizes |
//! | 5 | `dispatch` | the `Map*` traits: an op's `f<T>` once, dispatch on dtype |
//! | 6 | [`launch`] | typed launchers of our kernels and candle's, over buffers |
//! | 7 | [`ops`] | the op families, over storage slices (collectives between GPUs included) |
//! | 8 | `storage` | [`RocmStorage`] and its `BackendStorage` impl |
//! | 9 | `backend_device` | `impl BackendDevice for RocmDevice` |
//! | 10 | `quantized` | GGUF storage and its mat-vec paths (`candle` feature) |
//! | 11 | `slot` | candle-core's out-of-tree backend slot, and candle-flash-attn's API on it as `flash_attn`, the `Tensor` collectives as `collective` (`candle` feature) |
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

mod backend_device;
mod device;
mod dispatch;
mod dtype;
mod error;
pub mod launch;
mod layout;
#[cfg(test)]
mod levels;
pub mod ops;
#[cfg(feature = "candle")]
pub mod quantized;
pub mod registry;
pub mod report;
pub mod settings;
#[cfg(feature = "candle")]
mod slot;
mod storage;

pub use device::{RocmDevice, BACKEND_NAME};
pub use dtype::{RocmDType, RocmStorageSlice, STORED_DTYPES};
pub use error::{BackendError, WrapErr};
pub use settings::{strict, STRICT_VAR};
#[cfg(feature = "candle")]
pub use slot::attention as flash_attn;
#[cfg(feature = "candle")]
pub use slot::collective;
#[cfg(feature = "candle")]
pub use slot::graphs;
#[cfg(feature = "candle")]
pub use slot::{device, device_or_cpu};
pub use storage::RocmStorage;
