//! Group normalisation over typed buffers: `rows.hip`'s `rgnorm_stats_<T>` and `rgnorm_<T>`
//! (f32, f16, bf16, f64; `kernels/hip/rows/group_norm.h`) compute candle-nn's `GroupNorm` (the
//! fused op `GroupNorm`, handed over by `slot::fused`) in two launches: each group's shifted
//! sums in `splits` blocks, then the normalisation with the weight and bias. candle-nn's
//! composed path runs a dozen whole-tensor ops in f32 (a cast, two sums over the group with one
//! block each, a subtract, a square, a divide, a cast back, the weight's multiply and the
//! bias's add); these read the input twice and write it once, in its own dtype, with every
//! group spread over many blocks.

use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr, DeviceSlice, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::layout::{checked_view, invalid};

/// The op's name in errors.
const OP: &str = "group-norm";

/// The kernels (statistics, normalisation), f32 / f16 / bf16 / f64.
const KERNELS: [(&str, &str); 4] = [
    ("rgnorm_stats_f32", "rgnorm_f32"),
    ("rgnorm_stats_f16", "rgnorm_f16"),
    ("rgnorm_stats_bf16", "rgnorm_bf16"),
    ("rgnorm_stats_f64", "rgnorm_f64"),
];

/// Threads per block (the kernels' `RW_BLOCK`).
const BLOCK: u32 = 256;

/// Elements a block covers at the least: each thread loops over at least 32 of them.
const MIN_CHUNK: usize = 32 * BLOCK as usize;

/// Blocks the statistics aim for in all (several per compute unit on the largest GPUs).
const TARGET_BLOCKS: usize = 2048;

/// The most groups one launch takes (a grid's y dimension).
const MAX_ROWS: usize = 65535;

/// The kernels' first argument (`GnArgs` in rows/group_norm.h).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct GnArgs {
    len: u32,
    chunk: u32,
    rows: u32,
    splits: u32,
    inner: u32,
    cpg: u32,
    groups: u32,
    vec: u32,
}

const _: () = assert!(std::mem::size_of::<GnArgs>() == 32);

// SAFETY: `GnArgs` is `#[repr(C)]` over eight `u32` (32 bytes, no padding), field for field the
// kernels' `GnArgs`.
unsafe impl DeviceRepr for GnArgs {}

/// The work split for `b` batch entries of `c` channels of `inner` elements in `groups`
/// groups, 16-byte packs of `pack` elements (0: none): each group's length cut into `splits`
/// chunks of whole packs, enough blocks in all to fill a large GPU but each block at least
/// [`MIN_CHUNK`] elements. `None` when a group reaches 2^32 elements, there are more than
/// [`MAX_ROWS`] groups, or a size is 0.
pub(crate) fn gn_args(
    b: usize,
    c: usize,
    inner: usize,
    groups: usize,
    pack: usize,
) -> Option<GnArgs> {
    if b == 0 || c == 0 || inner == 0 || groups == 0 || c % groups != 0 {
        return None;
    }
    let cpg = c / groups;
    let len = cpg.checked_mul(inner)?;
    let rows = b.checked_mul(groups)?;
    if rows > MAX_ROWS || u32::try_from(len).is_err() {
        return None;
    }
    let vec = pack > 1 && inner % pack == 0;
    let unit = if vec { pack } else { 1 };
    let splits = TARGET_BLOCKS
        .div_ceil(rows)
        .min(len.div_ceil(MIN_CHUNK))
        .max(1);
    let chunk = len.div_ceil(splits).div_ceil(unit) * unit;
    let splits = len.div_ceil(chunk);
    Some(GnArgs {
        len: u32::try_from(len).ok()?,
        chunk: u32::try_from(chunk).ok()?,
        rows: u32::try_from(rows).ok()?,
        splits: u32::try_from(splits).ok()?,
        inner: u32::try_from(inner).ok()?,
        cpg: u32::try_from(cpg).ok()?,
        groups: u32::try_from(groups).ok()?,
        vec: u32::from(vec),
    })
}

/// Group norm of `x` (contiguous layout `xl`, dims `(b, c, ..)`) in `groups` groups, then
/// `* w + b` per channel (`w` and `b` contiguous `(c,)` in `x`'s dtype): the new output, or
/// `None` for a dtype without a kernel or a size the kernels do not take (a group of 2^32
/// elements or more, more than 65535 groups).
pub fn group_norm(
    dev: &RocmDevice,
    (x, xl): (&S, &Layout),
    (w, wl): (&S, &Layout),
    (b, bl): (&S, &Layout),
    groups: usize,
    eps: f64,
) -> Result<Option<S>, BackendError> {
    let ops = ((xl, wl, bl), groups);
    Ok(match (x, w, b) {
        (S::F32(x), S::F32(w), S::F32(b)) => {
            gn_t(dev, KERNELS[0], (x, w, b), ops, eps as f32)?.map(S::F32)
        }
        (S::F16(x), S::F16(w), S::F16(b)) => {
            gn_t(dev, KERNELS[1], (x, w, b), ops, eps as f32)?.map(S::F16)
        }
        (S::BF16(x), S::BF16(w), S::BF16(b)) => {
            gn_t(dev, KERNELS[2], (x, w, b), ops, eps as f32)?.map(S::BF16)
        }
        (S::F64(x), S::F64(w), S::F64(b)) => {
            gn_t(dev, KERNELS[3], (x, w, b), ops, eps)?.map(S::F64)
        }
        _ => None,
    })
}

/// The buffers of one dtype's operands.
type Operands<'a, T> = (
    &'a DeviceBuffer<T>,
    &'a DeviceBuffer<T>,
    &'a DeviceBuffer<T>,
);

/// [`group_norm`] for one dtype (`names`, its two kernels); `A` the kernels' accumulation
/// type (f32, or f64 for f64), `eps` in it.
fn gn_t<T: RocmDType, A: DeviceRepr + Default>(
    dev: &RocmDevice,
    (stats, apply): (&'static str, &'static str),
    (x, w, b): Operands<'_, T>,
    ((xl, wl, bl), groups): ((&Layout, &Layout, &Layout), usize),
    eps: A,
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    let dims = xl.dims();
    if dims.len() < 3 {
        return Err(invalid(
            OP,
            format_args!("x of dims {dims:?}: needs (batch, channels, ..) with at least 3 dims"),
        ));
    }
    let (nb, c) = (dims[0], dims[1]);
    if groups == 0 || c % groups != 0 {
        return Err(invalid(
            OP,
            format_args!("{groups} groups do not divide {c} channels"),
        ));
    }
    if wl.dims() != [c] || bl.dims() != [c] {
        return Err(invalid(
            OP,
            format_args!(
                "weight {:?} and bias {:?}: each needs dims [{c}]",
                wl.dims(),
                bl.dims()
            ),
        ));
    }
    if !xl.is_contiguous() || !wl.is_contiguous() || !bl.is_contiguous() {
        return Err(invalid(OP, "non-contiguous operands"));
    }
    let n = xl.shape().elem_count();
    if n == 0 {
        return Ok(Some(dev.alloc::<T>(0)?));
    }
    let inner = dims[2..].iter().product::<usize>();
    let pack = 16 / std::mem::size_of::<T>();
    let Some(mut args) = gn_args(nb, c, inner, groups, pack) else {
        return Ok(None);
    };
    let (x, w, b) = (
        checked_view(OP, x, xl)?,
        checked_view(OP, w, wl)?,
        checked_view(OP, b, bl)?,
    );
    let out = dev.alloc::<T>(n)?;
    let aligned = |p: *mut std::ffi::c_void| (p as usize) % 16 == 0;
    if args.vec == 1 && !(aligned(x.device_ptr()) && aligned(out.device_ptr())) {
        // A view at an odd offset: the same split without packs.
        args = gn_args(nb, c, inner, groups, 0).ok_or_else(|| invalid(OP, "sizes"))?;
    }
    let px = DevicePtrArg::of(&x);
    let part = dev.alloc::<A>(2 * args.rows as usize * args.splits as usize)?;
    let cfg = LaunchConfig {
        grid_dim: (args.splits, args.rows, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let stats = dev.function(Module::Rows, stats)?;
    let (pp, pw, pb, po) = (
        part.as_arg(),
        DevicePtrArg::of(&w),
        DevicePtrArg::of(&b),
        out.as_arg(),
    );
    let mut l = dev.stream().launch_builder(&stats);
    l.arg(&args).arg(&px).arg(&pp);
    // SAFETY: rgnorm_stats_<dt>(GnArgs a, const T* x, A* part), T the buffers' dtype (the
    // suffix) and A its accumulation type (`A`). Block (j, r) reads x[r len + i] for i in its
    // chunk of [0, len), so below rows * len = n (`x` is a view of its contiguous layout, which
    // `checked_view` proved inside the buffer), and writes part[2 (r splits + j) + {0, 1}],
    // inside `part` (2 rows splits elements, new). Packs only with the host's promise
    // (`gn_args`: inner and chunk whole packs) and 16-byte aligned x and y (checked above).
    unsafe { l.launch(cfg)? };
    let apply = dev.function(Module::Rows, apply)?;
    let mut l = dev.stream().launch_builder(&apply);
    l.arg(&args)
        .arg(&eps)
        .arg(&px)
        .arg(&pp)
        .arg(&pw)
        .arg(&pb)
        .arg(&po);
    // SAFETY: rgnorm_<dt>(GnArgs a, A eps, const T* x, const A* part, const T* w, const T* b,
    // T* y): the reads of x and part as above (part written by the launch before, same
    // stream), w[ch] and b[ch] for ch < groups * cpg = c (both views of c elements, checked),
    // and y[r len + i] for the same elements as x: `out` is new, n elements.
    unsafe { l.launch(cfg)? };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The split of the shapes that matter: a VAE's 512x512 planes (few long groups), a
    /// UNet's small ones, odd planes without packs, and the limits.
    #[test]
    fn groups_split_into_whole_packs_over_enough_blocks() {
        // SD's VAE decoder at 512x512: 32 groups of 4 channels x 262144.
        let a = gn_args(1, 128, 512 * 512, 32, 8).unwrap();
        assert_eq!(
            (a.len, a.rows, a.cpg, a.groups, a.vec),
            (1 << 20, 32, 4, 32, 1)
        );
        assert_eq!(a.splits, 64);
        assert_eq!(a.chunk as usize * a.splits as usize, 1 << 20);
        // Small groups: one block each.
        let a = gn_args(2, 320, 64, 32, 8).unwrap();
        assert_eq!((a.len, a.splits, a.chunk, a.rows), (640, 1, 640, 64));
        // 7x7 planes: no packs, chunks of single elements, every element covered once.
        let a = gn_args(1, 6, 49 * 1001, 3, 8).unwrap();
        assert_eq!(a.vec, 0);
        assert!(a.chunk as usize * (a.splits as usize - 1) < a.len as usize);
        assert!(a.chunk as usize * a.splits as usize >= a.len as usize);
        // Chunks are whole packs when packs are on.
        for (c, inner, g) in [(64, 4096 + 8, 32), (96, 1000, 3), (32, 65536 * 3, 1)] {
            let a = gn_args(3, c, inner, g, 8).unwrap();
            assert_eq!(a.vec, 1);
            assert_eq!(a.chunk % 8, 0, "{c} {inner} {g}");
            assert!(a.chunk as usize * (a.splits as usize - 1) < a.len as usize);
            assert!(a.chunk as usize * a.splits as usize >= a.len as usize);
        }
        assert!(
            gn_args(1, 6, 4, 4, 8).is_none(),
            "groups must divide channels"
        );
        assert!(
            gn_args(1, 2, 1 << 31, 1, 8).is_none(),
            "a group past 2^32 - 1"
        );
        assert!(
            gn_args(65536, 32, 8, 1, 8).is_none(),
            "more groups than a grid's rows"
        );
        assert!(gn_args(0, 32, 8, 1, 8).is_none());
    }

    /// `GnArgs` names its fields in rows/group_norm.h's order.
    #[test]
    fn the_kernel_argument_matches_group_norm_h() {
        let fields = crate::launch::arg_layout::args_match_hip_struct(
            "rows/group_norm.h",
            "GnArgs",
            &format!("{:?}", GnArgs::default()),
        );
        assert_eq!(fields.len(), 8);
    }
}
