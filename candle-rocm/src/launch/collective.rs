//! The one-shot all-reduce over typed buffers: `collective.hip`'s `allreduce_sum_oneshot_<T>`
//! (f32, f16, bf16), one launch that sums every rank's input by reading the peers' shared
//! memory directly. The shared memory, its layout and the rules for when it may be used are
//! `ops::peer_reduce`'s; this file checks sizes and queues the kernel.

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{DevicePtrArg, DeviceRepr, DeviceSlice, DeviceSliceMut, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{invalid, kernel_limit};

/// Most ranks the kernel takes (`AR_MAX_RANKS`).
pub const MAX_RANKS: usize = 8;
/// Most blocks of one launch (`AR_MAX_BLOCKS`): each has its own flags and epoch.
pub const MAX_BLOCKS: usize = 64;
/// Threads per block (`AR_THREADS`).
const THREADS: u32 = 256;
/// Elements a thread sums, at least, before another block is added.
const PER_THREAD: usize = 4;

/// Bytes of one rank's shared allocation for halves of `cap` bytes: the two data halves, the
/// flags (one word per block and sender) and the epochs (one word per block).
pub fn shared_bytes(cap: usize) -> usize {
    2 * cap + 4 * MAX_BLOCKS * MAX_RANKS + 4 * MAX_BLOCKS
}

/// The kernel's first argument (`ArBases` in collective.hip): each rank's shared allocation as
/// this process addresses it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArBases {
    /// Base address of rank r's allocation (0 past the world size).
    pub base: [u64; MAX_RANKS],
}

const _: () = assert!(std::mem::size_of::<ArBases>() == 64);

// SAFETY: `ArBases` is `#[repr(C)]` eight u64 with no padding (64 bytes, asserted here and in
// collective.hip), so its bytes are exactly the kernel's `ArBases` parameter.
unsafe impl DeviceRepr for ArBases {}

/// Where the one-shot all-reduce of one rank runs: the bases of every rank's allocation, this
/// rank, the world size, the size of a data half, the wait limit and the host word a timed-out
/// wait sets.
#[derive(Clone, Copy, Debug)]
pub struct OneShot {
    /// Every rank's shared allocation, as this process maps it.
    pub bases: ArBases,
    /// This rank.
    pub rank: u32,
    /// Ranks, 2..=[`MAX_RANKS`].
    pub world: u32,
    /// Bytes of one data half: the largest message.
    pub cap: u64,
    /// How long a block waits for a peer before it gives up and sets `status`.
    pub timeout_ns: u64,
    /// Device address of a host-visible (pinned) u32 that a timed-out wait sets to 1.
    pub status: u64,
}

/// The kernel for `dtype`: f32, f16 and bf16.
pub fn kernel_name(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("allreduce_sum_oneshot_f32"),
        DType::F16 => Some("allreduce_sum_oneshot_f16"),
        DType::BF16 => Some("allreduce_sum_oneshot_bf16"),
        _ => None,
    }
}

/// Blocks for `n` elements: enough that a thread sums about [`PER_THREAD`] of them, at most
/// [`MAX_BLOCKS`]. Every rank computes the same grid for the same `n`, which the kernel's
/// per-block epochs rely on.
pub fn blocks(n: usize) -> u32 {
    n.div_ceil(THREADS as usize * PER_THREAD)
        .clamp(1, MAX_BLOCKS) as u32
}

/// Queues `out = sum over the ranks of input` on `dev`'s stream (`input` and `out` of the same
/// length, at most `shot.cap` bytes). Every rank must make the same sequence of calls.
pub fn allreduce_sum_oneshot<T: RocmDType>(
    dev: &RocmDevice,
    shot: &OneShot,
    input: &impl DeviceSlice<T>,
    out: &mut impl DeviceSliceMut<T>,
) -> Result<(), BackendError> {
    let name = "one-shot all-reduce";
    let Some(kernel) = kernel_name(T::DTYPE) else {
        return Err(invalid(
            name,
            format_args!("{:?} is not summed here", T::DTYPE),
        ));
    };
    let n = input.len();
    if out.len() != n {
        return Err(invalid(
            name,
            format_args!("input of {n} elements, output of {}", out.len()),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    let bytes = n as u64 * std::mem::size_of::<T>() as u64;
    if bytes > shot.cap || n > u32::MAX as usize {
        return Err(kernel_limit(
            name,
            format_args!("{bytes} bytes, past the shared buffer's {}", shot.cap),
        ));
    }
    let world = shot.world as usize;
    if !(2..=MAX_RANKS).contains(&world) || shot.rank >= shot.world {
        return Err(invalid(
            name,
            format_args!("rank {} of {world} ranks (2 to {MAX_RANKS})", shot.rank),
        ));
    }
    let func = dev.function(Module::Collective, kernel)?;
    let (src, dst) = (DevicePtrArg::of(input), DevicePtrArg::of(&*out));
    let n32 = n as u32;
    let status = shot.status;
    let cfg = LaunchConfig {
        grid_dim: (blocks(n), 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut l = dev.stream().launch_builder(&func);
    l.arg(&shot.bases)
        .arg(&src)
        .arg(&dst)
        .arg(&n32)
        .arg(&shot.rank)
        .arg(&shot.world)
        .arg(&shot.cap)
        .arg(&shot.timeout_ns)
        .arg(&status);
    // SAFETY: allreduce_sum_oneshot_<T>(ArBases, const T*, T*, u32 n, u32 rank, u32 world,
    // u64 cap, u64 timeout_ns, u32* status), in that order. `input` and `out` hold n elements,
    // n * size_of::<T>() <= cap (checked above), so each rank's data half takes the message;
    // every base is a live shared allocation of `shared_bytes(cap)` bytes mapped into this
    // process (ops::peer_reduce keeps them alive as long as the communicator), `status` a live
    // pinned u32; the grid is at most MAX_BLOCKS blocks of THREADS >= world threads, as the
    // kernel's flag and epoch arrays are sized. `out` is borrowed exclusively and ordered on
    // the device's one stream with `input`.
    unsafe { l.launch(cfg)? };
    Ok(())
}
