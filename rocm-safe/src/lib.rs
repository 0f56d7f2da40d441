//! Safe RAII wrappers over the ROCm HIP runtime, rocBLAS, MIOpen and RCCL, in the spirit of
//! cudarc's `safe` layer. No Candle types here.
//!
//! | HIP / CPU concept | rocm-safe |
//! |---|---|
//! | the loaded libraries, `hipInit` | [`Runtime`] |
//! | a GPU (`hipSetDevice`, attributes) | [`Device`], [`DeviceInfo`], [`GfxArch`] |
//! | `hipStream_t`, `hipEvent_t` | [`Stream`], [`Event`] |
//! | `Vec<T>` on the device | [`DeviceBuffer<T>`], views [`DeviceView`] / [`DeviceViewMut`] |
//! | `hipHostMalloc` | [`PinnedHostBuffer<T>`] |
//! | fine-grained memory another process maps (`hipIpc*`) | [`ipc::SharedMemory`], [`ipc::PeerMemory`] |
//! | `hipModule_t`, `hipFunction_t`, launch | [`Module`], [`Function`], [`LaunchArgs`] |
//! | rocBLAS / MIOpen handles | [`BlasHandle`], [`MiopenHandle`] |
//! | a memory pool | [`CachingAllocator`] |
//! | stream capture, `hipGraph_t`, `hipGraphExec_t` | [`graph::Capture`], [`graph::Graph`], [`graph::GraphExec`] |
//! | RCCL communicators and collectives (several GPUs) | [`rccl::Communicator`], [`rccl::UniqueId`] |
//! | `RANK` / `WORLD_SIZE` / `MASTER_ADDR` bootstrap (torchrun style) | [`rendezvous::Rendezvous`] |
//!
//! Ownership rules: owning handles are not `Clone` (share them with `Arc`); buffers remember
//! their stream and are freed stream-ordered; errors in `Drop` are recorded and returned by the
//! next [`Device::check_err`]. Nothing here panics on bad input or a missing library: every
//! failure is a [`RocmError`] that says what to do.
//!
//! ```no_run
//! use rocm_safe::{Device, Stream};
//! let dev = Device::new(0)?;
//! let stream = Stream::new(&dev)?;
//! let buf = stream.clone_htod(&[1.0f32, 2.0, 3.0])?;
//! assert_eq!(stream.clone_dtoh(&buf)?, [1.0, 2.0, 3.0]);
//! # Ok::<(), rocm_safe::RocmError>(())
//! ```

pub mod allocator;
pub mod arch;
mod blas;
mod buffer;
mod copy;
mod device;
mod error;
pub mod graph;
mod host;
pub mod ipc;
pub mod miopen;
mod module;
pub mod peer;
pub mod rccl;
pub mod rendezvous;
mod runtime;
mod stream;

pub use allocator::{AllocatorStats, CachingAllocator};
pub use arch::{ArchFamily, GfxArch};
pub use blas::{BlasHandle, GemmConfig, GemmType, Transpose};
pub use buffer::{
    DeviceBuffer, DeviceRepr, DeviceSlice, DeviceSliceMut, DeviceView, DeviceViewMut,
};
pub use device::{Device, DeviceInfo};
pub use error::{HipError, Result, RocmError};
pub use host::PinnedHostBuffer;
pub use miopen::{
    miopen_unavailable, Conv2dConfig, ConvDirection, ConvKey, ConvTranspose2dConfig, MiopenHandle,
    MiopenType, PlanPolicy, Pool2dConfig, PoolKey, PoolMode, Search,
};
pub use module::{
    DevicePtrArg, Function, KernelArg, LaunchArgs, LaunchConfig, Module, MAX_KERNEL_ARGS,
};
pub use runtime::Runtime;
pub use stream::{Event, Stream};

/// The raw layer, re-exported for callers that need a C type or constant.
pub use rocm_sys as sys;
