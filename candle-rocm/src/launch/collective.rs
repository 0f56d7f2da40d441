//! The one-shot all-reduce over typed buffers: `collective.hip`'s `allreduce_sum_oneshot_<T>`
//! (f32, f16, bf16), one launch that sums every rank's input by reading the peers' shared
//! memory directly, and `allreduce_add_rmsnorm_oneshot_<T>`, the same sum followed by the
//! residual add and RMS norm of the next layer (candle-nn's `add_rms_norm`) in the same launch.
//! Small messages take their Lamport forms (`allreduce_sum_lamport_<T>`,
//! `allreduce_add_rmsnorm_lamport_<T>`: the data sent into the peers' memory is its own flag)
//! where the communicator agreed to ([`OneShot::lamport`]).
//! The shared memory, its layout and the rules for when it may be used are
//! `ops::peer_reduce`'s; this file checks sizes and queues the kernels.

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{DevicePtrArg, DeviceRepr, DeviceSlice, DeviceSliceMut, LaunchArgs, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{invalid, kernel_limit};

/// Most ranks the kernel takes (`AR_MAX_RANKS`).
pub const MAX_RANKS: usize = 8;
/// Most blocks of one launch (`AR_MAX_BLOCKS`): each has its own flags and epoch.
pub const MAX_BLOCKS: usize = 256;
/// Threads per block (`AR_THREADS`).
const THREADS: u32 = 256;
/// Bytes of a pack (the kernels' 16-byte loads).
const PACK: usize = 16;

/// Bytes after the data halves for the flags (one word per block and sender), the epochs and
/// the Lamport call counters (one word per block each): `AR_CTRL_BYTES`.
const CTRL_BYTES: usize = 16384;
/// Most blocks (so rows of the fused norm) of a Lamport launch (`AR_LAMPORT_BLOCKS`).
pub const LAMPORT_BLOCKS: usize = 8;
/// Bytes of a Lamport block's region: its slice of a message (`AR_LAMPORT_ROW`).
pub const LAMPORT_ROW: usize = 16384;
/// Lamport buffers, used in turn (`AR_LAMPORT_BUFS`).
const LAMPORT_BUFS: usize = 3;
/// The word a Lamport region holds where nothing was written (`AR_EMPTY`).
pub const LAMPORT_EMPTY: u32 = 0x8000_8000;

const _: () = assert!(4 * MAX_BLOCKS * MAX_RANKS + 4 * MAX_BLOCKS + 4 * MAX_BLOCKS <= CTRL_BYTES);

/// Bytes of one rank's shared allocation for halves of `cap` bytes: the two data halves, the
/// control words (`CTRL_BYTES`) and the Lamport buffers ([`lamport_span`]).
pub fn shared_bytes(cap: usize) -> usize {
    lamport_at(cap) + lamport_span()
}

/// Where the Lamport buffers start in an allocation of halves of `cap` bytes (16-byte aligned
/// when `cap` is); they must hold [`LAMPORT_EMPTY`] words before the first call.
pub fn lamport_at(cap: usize) -> usize {
    2 * cap + CTRL_BYTES
}

/// Bytes of the Lamport buffers: a region per buffer, sender and block.
pub fn lamport_span() -> usize {
    LAMPORT_BUFS * MAX_RANKS * LAMPORT_BLOCKS * LAMPORT_ROW
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
    /// Whether small messages take the Lamport kernels (every rank agreed, and every rank's
    /// Lamport buffers were filled with [`LAMPORT_EMPTY`]).
    pub lamport: bool,
}

/// The sum kernel for `dtype`: f32, f16 and bf16.
pub fn kernel_name(dtype: DType) -> Option<&'static str> {
    sum_kernel_name(dtype, false)
}

/// The sum kernel for `dtype`, the Lamport form or the flag one.
fn sum_kernel_name(dtype: DType, lamport: bool) -> Option<&'static str> {
    Some(match (dtype, lamport) {
        (DType::F32, false) => "allreduce_sum_oneshot_f32",
        (DType::F16, false) => "allreduce_sum_oneshot_f16",
        (DType::BF16, false) => "allreduce_sum_oneshot_bf16",
        (DType::F32, true) => "allreduce_sum_lamport_f32",
        (DType::F16, true) => "allreduce_sum_lamport_f16",
        (DType::BF16, true) => "allreduce_sum_lamport_bf16",
        _ => return None,
    })
}

/// The sum-then-`add_rms_norm` kernel for `dtype`, the Lamport form or the flag one.
fn norm_kernel_name(dtype: DType, lamport: bool) -> Option<&'static str> {
    Some(match (dtype, lamport) {
        (DType::F32, false) => "allreduce_add_rmsnorm_oneshot_f32",
        (DType::F16, false) => "allreduce_add_rmsnorm_oneshot_f16",
        (DType::BF16, false) => "allreduce_add_rmsnorm_oneshot_bf16",
        (DType::F32, true) => "allreduce_add_rmsnorm_lamport_f32",
        (DType::F16, true) => "allreduce_add_rmsnorm_lamport_f16",
        (DType::BF16, true) => "allreduce_add_rmsnorm_lamport_bf16",
        _ => return None,
    })
}

/// The Lamport sum's grid for a message of `bytes`, when it takes one: a block per
/// [`LAMPORT_ROW`] bytes, at most [`LAMPORT_BLOCKS`]. The same on every rank (it depends on the
/// size only), as the kernels' per-block counters need.
pub fn lamport_sum_blocks(bytes: usize) -> Option<u32> {
    let blocks = bytes.div_ceil(LAMPORT_ROW);
    (blocks <= LAMPORT_BLOCKS).then_some(blocks.max(1) as u32)
}

/// Whether the fused all-reduce + norm of `rows` x `cols` elements of `elem` bytes takes the
/// Lamport kernel: a block per row, each row within a block's region.
pub fn lamport_norm_takes(rows: usize, cols: usize, elem: usize) -> bool {
    (1..=LAMPORT_BLOCKS).contains(&rows) && cols.saturating_mul(elem) <= LAMPORT_ROW
}

/// Blocks a message may take at one 16-byte pack a thread; beyond, up to [`MAX_BLOCKS`] at two
/// packs a thread or more.
const ONE_PACK_BLOCKS: usize = 128;

/// Blocks of the sum for `bytes` bytes: one 16-byte pack a thread up to `ONE_PACK_BLOCKS`
/// blocks (512 KiB), then two packs a thread, at least `ONE_PACK_BLOCKS` and at most
/// [`MAX_BLOCKS`] blocks: at each size timed both ways, the faster grid (two H200s through the
/// harness, bench/results of 2026-11-27, calls H to J). Every rank computes the same grid for
/// the same size, which the kernel's per-block epochs rely on.
pub fn blocks(bytes: usize) -> u32 {
    let packs = bytes.div_ceil(PACK);
    let one_each = packs.div_ceil(THREADS as usize);
    let blocks = if one_each <= ONE_PACK_BLOCKS {
        one_each.max(1)
    } else {
        packs
            .div_ceil(2 * THREADS as usize)
            .clamp(ONE_PACK_BLOCKS, MAX_BLOCKS)
    };
    blocks as u32
}

/// Whether the kernels may move 16-byte packs: every address aligned to 16 bytes and `unit`
/// elements (a block's slice, or a row) whole packs.
fn packs<T>(addresses: &[u64], unit: usize) -> bool {
    addresses.iter().all(|a| a % PACK as u64 == 0) && (unit * std::mem::size_of::<T>()) % PACK == 0
}

/// Checks the world and a message of `bytes` against `shot`.
fn check_shot(name: &str, shot: &OneShot, bytes: u64) -> Result<(), BackendError> {
    if bytes > shot.cap {
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
    Ok(())
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
    let bytes = input.len() * std::mem::size_of::<T>();
    let lamport = lamport_sum_blocks(bytes).filter(|_| shot.lamport);
    let Some(kernel) = sum_kernel_name(T::DTYPE, lamport.is_some()) else {
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
    check_shot(name, shot, bytes as u64)?;
    let n32 = u32::try_from(n).map_err(|_| kernel_limit(name, "2^32 elements or more"))?;
    let func = dev.function(Module::Collective, kernel)?;
    let (src, dst) = (DevicePtrArg::of(input), DevicePtrArg::of(&*out));
    let grid = lamport.unwrap_or_else(|| blocks(bytes));
    // A block's slice is a multiple of 64 elements, or of LAMPORT_ROW bytes (whole packs), but
    // the last: n whole packs.
    let addresses = [input.device_ptr() as u64, out.device_ptr() as u64];
    let vec = u32::from(packs::<T>(&addresses, n));
    let mut l = dev.stream().launch_builder(&func);
    l.arg(&shot.bases).arg(&src).arg(&dst).arg(&n32).arg(&vec);
    shot_args(&mut l, shot);
    // SAFETY: allreduce_{sum_oneshot,sum_lamport}_<T>(ArBases, const T*, T*, u32 n, u32 vec,
    // u32 rank, u32 world, u64 cap, u64 timeout_ns, u32* status), in that order. `input` and
    // `out` hold n elements (16-byte aligned and whole packs when vec), n * size_of::<T>() <=
    // cap (checked above), so each rank's data half takes the message, and the Lamport form
    // runs only with a grid of at most LAMPORT_BLOCKS regions of LAMPORT_ROW bytes covering it,
    // on buffers every rank filled with LAMPORT_EMPTY (`shot.lamport`);
    // every base is a live shared allocation of `shared_bytes(cap)` bytes mapped into this
    // process (ops::peer_reduce keeps them alive as long as the communicator), `status` a live
    // pinned u32; the grid is at most MAX_BLOCKS blocks of THREADS >= world threads, as the
    // kernel's flag and epoch arrays are sized. `out` is borrowed exclusively and ordered on
    // the device's one stream with `input`.
    unsafe { l.launch(config(grid))? };
    Ok(())
}

/// Both kernels' last arguments: rank, world, cap, timeout_ns, status.
fn shot_args<'a>(l: &mut LaunchArgs<'a>, shot: &'a OneShot) {
    l.arg(&shot.rank)
        .arg(&shot.world)
        .arg(&shot.cap)
        .arg(&shot.timeout_ns)
        .arg(&shot.status);
}

/// `grid` blocks of [`THREADS`].
fn config(grid: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Queues the all-reduce of `input` (`rows` x `cols`) followed by `add_rms_norm` with
/// `residual` (same shape) and `alpha` (`cols`): `out` (2 x rows x cols) gets the residual sums
/// and then the norms. A block per row, up to [`MAX_BLOCKS`] blocks (each then takes several
/// rows). Every rank must make the same sequence of calls.
#[allow(clippy::too_many_arguments)]
pub fn allreduce_add_rmsnorm_oneshot<T: RocmDType>(
    dev: &RocmDevice,
    shot: &OneShot,
    input: &impl DeviceSlice<T>,
    residual: &impl DeviceSlice<T>,
    alpha: &impl DeviceSlice<T>,
    out: &mut impl DeviceSliceMut<T>,
    (rows, cols): (usize, usize),
    eps: f32,
) -> Result<(), BackendError> {
    let name = "one-shot all-reduce + add_rms_norm";
    let lamport = shot.lamport && lamport_norm_takes(rows, cols, std::mem::size_of::<T>());
    let Some(kernel) = norm_kernel_name(T::DTYPE, lamport) else {
        return Err(invalid(
            name,
            format_args!("{:?} is not summed here", T::DTYPE),
        ));
    };
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| kernel_limit(name, "rows x cols overflows"))?;
    if input.len() != n || residual.len() != n || alpha.len() != cols || out.len() != 2 * n {
        return Err(invalid(
            name,
            format_args!(
                "{rows} x {cols}: input {}, residual {}, alpha {}, output {} elements",
                input.len(),
                residual.len(),
                alpha.len(),
                out.len()
            ),
        ));
    }
    if n == 0 {
        return Ok(());
    }
    check_shot(name, shot, (n * std::mem::size_of::<T>()) as u64)?;
    let func = dev.function(Module::Collective, kernel)?;
    let addresses = [
        input.device_ptr() as u64,
        residual.device_ptr() as u64,
        alpha.device_ptr() as u64,
        out.device_ptr() as u64,
    ];
    let vec = u32::from(packs::<T>(&addresses, cols));
    let (src, res, a, dst) = (
        DevicePtrArg::of(input),
        DevicePtrArg::of(residual),
        DevicePtrArg::of(alpha),
        DevicePtrArg::of(&*out),
    );
    // `n` fits u32: it is at most cap bytes (checked above).
    let (rows32, cols32) = (rows as u32, cols as u32);
    let mut l = dev.stream().launch_builder(&func);
    l.arg(&shot.bases).arg(&src).arg(&res).arg(&a).arg(&dst);
    l.arg(&rows32).arg(&cols32).arg(&eps).arg(&vec);
    shot_args(&mut l, shot);
    // SAFETY: allreduce_add_rmsnorm_{oneshot,lamport}_<T>(ArBases, const T* in, const T* residual,
    // const T* alpha, T* out, u32 rows, u32 cols, f32 eps, u32 vec, u32 rank, u32 world,
    // u64 cap, u64 timeout_ns, u32* status), in that order. `input` and `residual` hold
    // rows * cols elements, `alpha` cols, `out` 2 * rows * cols (checked above; 16-byte
    // aligned and rows whole packs when vec); the message fits a data half (<= cap); at most
    // MAX_BLOCKS blocks, as the flag and epoch arrays are sized (the Lamport form: a block per
    // row, rows <= LAMPORT_BLOCKS and a row within LAMPORT_ROW bytes, on buffers every rank
    // filled with LAMPORT_EMPTY, as `lamport_norm_takes` and `shot.lamport` say); the bases and
    // `status` are live for the communicator's life (ops::peer_reduce). `out` is borrowed
    // exclusively and ordered on the device's one stream with the inputs.
    unsafe { l.launch(config(rows.min(MAX_BLOCKS) as u32))? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_and_packs() {
        assert_eq!(blocks(1), 1);
        assert_eq!(blocks(8 << 10), 2);
        assert_eq!(blocks(64 << 10), 16);
        assert_eq!(blocks(256 << 10), 64);
        assert_eq!(blocks(512 << 10), 128);
        assert_eq!(blocks(768 << 10), 128);
        assert_eq!(blocks(1 << 20), 128);
        assert_eq!(blocks(2 << 20), 256);
        assert_eq!(blocks(4 << 20), MAX_BLOCKS as u32);
        assert!(packs::<half::f16>(&[0x1000, 0x2010], 4096));
        assert!(!packs::<half::f16>(&[0x1000, 0x2018], 4096));
        assert!(!packs::<f32>(&[0x1000], 1001));
        assert_eq!(shared_bytes(1 << 20), (2 << 20) + 16384 + 3 * 8 * 8 * 16384);
        assert_eq!(lamport_at(4 << 20) % 16, 0);
    }

    #[test]
    fn lamport_shapes() {
        assert_eq!(lamport_sum_blocks(1), Some(1));
        assert_eq!(lamport_sum_blocks(8 << 10), Some(1));
        assert_eq!(lamport_sum_blocks((16 << 10) + 2), Some(2));
        assert_eq!(lamport_sum_blocks(128 << 10), Some(8));
        assert_eq!(lamport_sum_blocks((128 << 10) + 4), None);
        assert!(lamport_norm_takes(1, 4096, 2));
        assert!(lamport_norm_takes(8, 4096, 4));
        assert!(lamport_norm_takes(8, 8192, 2));
        assert!(!lamport_norm_takes(9, 4096, 2));
        assert!(!lamport_norm_takes(1, 8192, 4));
        assert!(!lamport_norm_takes(0, 4096, 2));
        assert_eq!(
            sum_kernel_name(DType::F16, true),
            Some("allreduce_sum_lamport_f16")
        );
        assert_eq!(
            norm_kernel_name(DType::BF16, true),
            Some("allreduce_add_rmsnorm_lamport_bf16")
        );
        assert_eq!(sum_kernel_name(DType::F64, true), None);
    }
}
