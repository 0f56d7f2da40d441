//! The fast elementwise paths: our `elementwise` module (kernels/hip/elementwise.hip) for unary
//! ops, `affine`, `elu`, `powf` and float casts (f32, f16, bf16, f64), binary ops (also u8,
//! u32, i16, i32, i64) and `where_cond` (conditions u8, u32, i16, i32, i64; values of every
//! binary dtype).
//!
//! Every launch is planned on the host from the layouts alone, with no allocation besides the
//! output and no upload: size-1 dims are dropped and adjacent dims that every operand walks
//! contiguously are merged. Then
//! - every operand contiguous: the contiguous kernel `<op>_<dt>(n, in..., out)`, which moves
//!   16-byte packs when the pointers are 16-byte aligned (else element by element);
//! - at most [`MAX_RANK`] merged dims, at most `u32::MAX` elements and offsets: the strided
//!   kernel `<op>_<dt>_strided(n, Strided, in..., out)` with the shape, magic-number divisors
//!   and strides by value; when the innermost dim is a multiple of the pack and each operand is
//!   either contiguous along it (with pack-aligned strides) or broadcast (stride 0), packs are
//!   loaded whole (row and column broadcasts);
//! - anything else: `None`, and the caller runs candle-kernels' path (which uploads the dims;
//!   for `where_cond`, our `where` module).
//!
//! A `where_cond` pack is 16 bytes of the smaller of the condition and value types, capped at
//! 64 bytes of the larger ([`select_pack_elems`]).
//!
//! The constants below must match `EW_BLOCK`, `EW_UNROLL` and `EW_MAX_RANK` in the kernel
//! source; the structs match `EwDims`, `EwStrided1`, `EwStrided2` and `EwStrided3`.

use candle_core::{DType, Layout};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr, LaunchConfig};

use crate::device::RocmDevice;
use crate::error::BackendError;
use crate::ops::{checked_view, invalid};
use crate::storage::RocmDType;

/// Threads per block (`EW_BLOCK`, the kernels' launch bound).
pub const BLOCK: u32 = 256;
/// Packs each thread handles per tile (`EW_UNROLL`).
pub const UNROLL: usize = 1;
/// Largest rank, after merging, the strided kernels take by value (`EW_MAX_RANK`).
pub const MAX_RANK: usize = 6;
/// Bytes per pack (one 128-bit load or store).
pub const PACK_BYTES: usize = 16;
/// Most blocks per launch; the kernels loop over further tiles. Keeps the grid's work-item
/// count (what AMD's dispatch packet holds) far below `u32::MAX`.
pub const MAX_GRID: usize = 1 << 20;

/// Elements per pack for input type `I` and output type `O`: 16 bytes of the smaller one.
pub fn pack_elems<I, O>() -> usize {
    PACK_BYTES
        / std::mem::size_of::<I>()
            .min(std::mem::size_of::<O>())
            .max(1)
}

/// Largest pack of one `where_cond` operand, in bytes (`SelVec` in the kernel source).
pub const MAX_SELECT_PACK_BYTES: usize = 64;

/// Elements per `where_cond` pack for condition type `C` and value type `T`: 16 bytes of the
/// smaller type, capped at [`MAX_SELECT_PACK_BYTES`] of the larger (register use).
pub fn select_pack_elems<C, T>() -> usize {
    let (c, t) = (
        std::mem::size_of::<C>().max(1),
        std::mem::size_of::<T>().max(1),
    );
    (PACK_BYTES / c.min(t)).min(MAX_SELECT_PACK_BYTES / c.max(t))
}

/// The launch shape for `n` elements processed `vec` at a time: enough blocks of [`BLOCK`]
/// threads that each thread handles one tile of [`UNROLL`] packs, capped at [`MAX_GRID`].
pub fn launch_config(n: usize, vec: usize) -> Result<LaunchConfig, BackendError> {
    if n == 0 {
        return Err(invalid("elementwise", "no elements to launch over"));
    }
    let per_block = (BLOCK as usize)
        .checked_mul(UNROLL)
        .and_then(|v| v.checked_mul(vec))
        .filter(|&v| v > 0)
        .ok_or_else(|| invalid("elementwise", format_args!("pack of {vec} elements")))?;
    let blocks = n.div_ceil(per_block).min(MAX_GRID);
    let grid = u32::try_from(blocks)
        .map_err(|_| invalid("elementwise", format_args!("{blocks} blocks")))?;
    Ok(LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// `(magic, shift)` such that `x / d == (mulhi(x, magic) + x) >> shift` for every `u32` x
/// (the sum taken in 64 bits); `None` for `d == 0`.
pub fn magic_divisor(d: u32) -> Option<(u32, u32)> {
    if d == 0 {
        return None;
    }
    let shift = 32 - (d - 1).leading_zeros();
    let m = ((1u128 << 32) * ((1u128 << shift) - d as u128)) / d as u128 + 1;
    Some((u32::try_from(m).ok()?, shift))
}

/// The output shape of a strided launch, innermost dim first (`EwDims`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Dims in use (1..=MAX_RANK).
    pub rank: u32,
    /// 1 when packs may be loaded whole (see the module documentation).
    pub vec: u32,
    /// Sizes, innermost first; unused entries are 1.
    pub dims: [u32; MAX_RANK],
    /// Magic multipliers of the sizes.
    pub magic: [u32; MAX_RANK],
    /// Shifts of the sizes.
    pub shift: [u32; MAX_RANK],
}

/// Shape plus the strides of `N` operands, by value (`EwStrided1`, `EwStrided2`,
/// `EwStrided3`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strided<const N: usize> {
    /// The shape.
    pub dims: Dims,
    /// Each operand's strides, innermost first; unused entries are 0.
    pub strides: [[u32; MAX_RANK]; N],
}

// SAFETY: `#[repr(C)]` over `u32` fields and arrays only: no padding (every field has the
// 4-byte alignment of the struct), no pointers, and every bit pattern is a valid value.
unsafe impl<const N: usize> DeviceRepr for Strided<N> {}

/// How a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan<const N: usize> {
    /// Every operand's elements are contiguous and in order.
    Contiguous,
    /// The strided kernel with this shape.
    Strided(Strided<N>),
    /// Too many dims after merging, or more than `u32::MAX` elements or offsets.
    Fallback,
}

/// Plans a launch over `dims` (outermost first) for operands with `strides`, `vec` elements
/// per pack.
pub fn plan<const N: usize>(dims: &[usize], strides: [&[usize]; N], vec: usize) -> Plan<N> {
    if strides.iter().any(|s| s.len() != dims.len()) {
        return Plan::Fallback;
    }
    let mut sizes = [1usize; MAX_RANK];
    let mut st = [[0usize; MAX_RANK]; N];
    let mut rank = 0usize;
    for d in (0..dims.len()).rev() {
        let size = dims[d];
        if size == 1 {
            continue;
        }
        if rank > 0 {
            let (inner, i) = (sizes[rank - 1], rank - 1);
            let merges = (0..N).all(|k| st[k][i].checked_mul(inner) == Some(strides[k][d]));
            if merges {
                match inner.checked_mul(size) {
                    Some(v) => sizes[i] = v,
                    None => return Plan::Fallback,
                }
                continue;
            }
        }
        if rank == MAX_RANK {
            return Plan::Fallback;
        }
        sizes[rank] = size;
        for (s, from) in st.iter_mut().zip(&strides) {
            s[rank] = from[d];
        }
        rank += 1;
    }
    if rank == 0 || (rank == 1 && (0..N).all(|k| st[k][0] == 1)) {
        return Plan::Contiguous;
    }
    // Element count and every operand's largest offset must fit the kernels' u32 indices.
    let fits = |v: Option<usize>| v.is_some_and(|v| v <= u32::MAX as usize);
    let n = sizes[..rank]
        .iter()
        .try_fold(1usize, |acc, &s| acc.checked_mul(s));
    if !fits(n) {
        return Plan::Fallback;
    }
    for s in &st {
        let reach = (0..rank).try_fold(0usize, |acc, i| {
            acc.checked_add((sizes[i] - 1).checked_mul(s[i])?)
        });
        if !fits(reach) {
            return Plan::Fallback;
        }
    }
    let mut out = Strided {
        dims: Dims {
            rank: rank as u32,
            vec: 0,
            dims: [1; MAX_RANK],
            magic: [1; MAX_RANK],
            shift: [0; MAX_RANK],
        },
        strides: [[0; MAX_RANK]; N],
    };
    for i in 0..rank {
        // Every size is at least 2 and at most n, every stride at most the reach: both fit.
        let (Ok(size), Some((magic, shift))) = (
            u32::try_from(sizes[i]),
            u32::try_from(sizes[i]).ok().and_then(magic_divisor),
        ) else {
            return Plan::Fallback;
        };
        out.dims.dims[i] = size;
        out.dims.magic[i] = magic;
        out.dims.shift[i] = shift;
        for (to, from) in out.strides.iter_mut().zip(&st) {
            let Ok(s) = u32::try_from(from[i]) else {
                return Plan::Fallback;
            };
            to[i] = s;
        }
    }
    let packs = vec > 0
        && sizes[0] % vec == 0
        && st
            .iter()
            .all(|s| s[0] == 0 || (s[0] == 1 && s[1..rank].iter().all(|&x| x % vec == 0)));
    out.dims.vec = packs as u32;
    Plan::Strided(out)
}

/// `[contiguous, strided]` kernel names of one op for each dtype of a list.
type Names<const K: usize> = [[&'static str; 2]; K];

macro_rules! names {
    ($root:literal; $($dt:ident),*) => {
        [$([
            concat!($root, "_", stringify!($dt)),
            concat!($root, "_", stringify!($dt), "_strided"),
        ]),*]
    };
}
macro_rules! float_names {
    ($root:literal) => {
        names!($root; f32, f16, bf16, f64)
    };
}
macro_rules! binary_names {
    ($root:literal) => {
        names!($root; f32, f16, bf16, f64, u8, u32, i16, i32, i64)
    };
}

/// Unary ops of the module, by candle-kernels' root name.
const UNARY: &[(&str, Names<4>)] = &[
    ("uneg", float_names!("uneg")),
    ("urecip", float_names!("urecip")),
    ("uexp", float_names!("uexp")),
    ("ulog", float_names!("ulog")),
    ("usin", float_names!("usin")),
    ("ucos", float_names!("ucos")),
    ("utanh", float_names!("utanh")),
    ("uerf", float_names!("uerf")),
    ("uceil", float_names!("uceil")),
    ("ufloor", float_names!("ufloor")),
    ("uround", float_names!("uround")),
    ("uabs", float_names!("uabs")),
    ("usqr", float_names!("usqr")),
    ("usqrt", float_names!("usqrt")),
    ("ugelu", float_names!("ugelu")),
    ("ugelu_erf", float_names!("ugelu_erf")),
    ("urelu", float_names!("urelu")),
    ("usilu", float_names!("usilu")),
    ("usign", float_names!("usign")),
    ("usigmoid", float_names!("usigmoid")),
];
const AFFINE: Names<4> = float_names!("affine");
/// Unary ops with one scalar parameter.
const SCALAR_UNARY: &[(&str, Names<4>)] = &[
    ("uelu", float_names!("uelu")),
    ("upowf", float_names!("upowf")),
];
/// Binary ops, by candle-kernels' root name.
const BINARY: &[(&str, Names<9>)] = &[
    ("badd", binary_names!("badd")),
    ("bsub", binary_names!("bsub")),
    ("bmul", binary_names!("bmul")),
    ("bdiv", binary_names!("bdiv")),
    ("bmaximum", binary_names!("bmaximum")),
    ("bminimum", binary_names!("bminimum")),
];
/// Casts, `[from][to]`.
const CASTS: [Names<4>; 4] = [
    names!("cast_f32"; f32, f16, bf16, f64),
    names!("cast_f16"; f32, f16, bf16, f64),
    names!("cast_bf16"; f32, f16, bf16, f64),
    names!("cast_f64"; f32, f16, bf16, f64),
];

/// `where_cond` kernels, `[condition][value]`: conditions u8, u32, i16, i32, i64; values in
/// the binary table's order.
const WHERE: [Names<9>; 5] = [
    names!("where_u8"; f32, f16, bf16, f64, u8, u32, i16, i32, i64),
    names!("where_u32"; f32, f16, bf16, f64, u8, u32, i16, i32, i64),
    names!("where_i16"; f32, f16, bf16, f64, u8, u32, i16, i32, i64),
    names!("where_i32"; f32, f16, bf16, f64, u8, u32, i16, i32, i64),
    names!("where_i64"; f32, f16, bf16, f64, u8, u32, i16, i32, i64),
];

/// Position of a condition dtype in the `where` table.
fn cond_index(dtype: DType) -> Option<usize> {
    match dtype {
        DType::U8 => Some(0),
        DType::U32 => Some(1),
        DType::I16 => Some(2),
        DType::I32 => Some(3),
        DType::I64 => Some(4),
        _ => None,
    }
}

/// Position of a float dtype in the name tables.
fn float_index(dtype: DType) -> Option<usize> {
    match dtype {
        DType::F32 => Some(0),
        DType::F16 => Some(1),
        DType::BF16 => Some(2),
        DType::F64 => Some(3),
        _ => None,
    }
}

/// Position of a dtype in the binary name table.
fn binary_index(dtype: DType) -> Option<usize> {
    match dtype {
        DType::U8 => Some(4),
        DType::U32 => Some(5),
        DType::I16 => Some(6),
        DType::I32 => Some(7),
        DType::I64 => Some(8),
        d => float_index(d),
    }
}

/// A unary op of the module.
#[derive(Clone, Copy, Debug)]
pub enum UnaryOp {
    /// A parameterless op by candle-kernels' root (`uexp`, `usigmoid`, ...).
    Named(&'static str),
    /// `x * mul + add`.
    Affine(f64, f64),
    /// `uelu` or `upowf` with its scalar.
    Scalar(&'static str, f64),
}

/// Scalar kernel arguments: f64 for the f64 kernels, else f32, each value first rounded to
/// the tensor's dtype (as candle's kernels and its CPU backend take them).
struct Scalars {
    f32s: [f32; 2],
    f64s: [f64; 2],
    len: usize,
}

impl Scalars {
    fn new<T: RocmDType>(values: &[f64]) -> Scalars {
        let mut s = Scalars {
            f32s: [0.0; 2],
            f64s: [0.0; 2],
            len: values.len().min(2),
        };
        for (i, &v) in values.iter().take(2).enumerate() {
            let r = T::from_f64(v).to_f64();
            s.f64s[i] = r;
            s.f32s[i] = r as f32;
        }
        s
    }
}

/// Runs unary op `op` over `src` through `layout` when the module has it for `T` and the
/// layout fits its kernels; `Ok(None)` otherwise.
pub fn unary<T: RocmDType>(
    dev: &RocmDevice,
    op: UnaryOp,
    src: &DeviceBuffer<T>,
    layout: &Layout,
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    if !crate::registry::fast_kernels() {
        return Ok(None);
    }
    let Some(di) = float_index(T::DTYPE) else {
        return Ok(None);
    };
    let (names, scalars) = match op {
        UnaryOp::Named(root) => match UNARY.iter().find(|(r, _)| *r == root) {
            Some((_, n)) => (n, Scalars::new::<T>(&[])),
            None => return Ok(None),
        },
        UnaryOp::Affine(mul, add) => (&AFFINE, Scalars::new::<T>(&[mul, add])),
        UnaryOp::Scalar(root, v) => match SCALAR_UNARY.iter().find(|(r, _)| *r == root) {
            Some((_, n)) => (n, Scalars::new::<T>(&[v])),
            None => return Ok(None),
        },
    };
    launch_map1::<T, T>(dev, names[di], src, layout, &scalars)
}

/// `to_dtype` between f32, f16, bf16 and f64 (convert.hip's rounding rules); `Ok(None)` for
/// other pairs and layouts the kernels do not take.
pub fn cast<S: RocmDType, D: RocmDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<S>,
    layout: &Layout,
) -> Result<Option<DeviceBuffer<D>>, BackendError> {
    if !crate::registry::fast_kernels() {
        return Ok(None);
    }
    let (Some(si), Some(di)) = (float_index(S::DTYPE), float_index(D::DTYPE)) else {
        return Ok(None);
    };
    launch_map1::<S, D>(dev, CASTS[si][di], src, layout, &Scalars::new::<D>(&[]))
}

/// Launches a one-input kernel (`names` = [contiguous, strided]) into a new buffer.
fn launch_map1<I: RocmDType, O: RocmDType>(
    dev: &RocmDevice,
    names: [&'static str; 2],
    src: &DeviceBuffer<I>,
    layout: &Layout,
    scalars: &Scalars,
) -> Result<Option<DeviceBuffer<O>>, BackendError> {
    let n = layout.shape().elem_count();
    if n == 0 {
        return Ok(Some(dev.alloc::<O>(0)?));
    }
    let vec = pack_elems::<I, O>();
    let plan = plan::<1>(layout.dims(), [layout.stride()], vec);
    if plan == Plan::Fallback {
        return Ok(None);
    }
    let out = dev.alloc::<O>(n)?;
    let input = checked_view(names[0], src, layout)?;
    let cfg = launch_config(n, vec)?;
    let (pin, pout) = (DevicePtrArg::of(&input), out.as_arg());
    let f = match plan {
        Plan::Strided(_) => dev.function_static(Module::Elementwise, names[1])?,
        _ => dev.function_static(Module::Elementwise, names[0])?,
    };
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&n);
    if let Plan::Strided(s) = &plan {
        l.arg(s);
    }
    l.arg(&pin).arg(&pout);
    for i in 0..scalars.len {
        if I::DTYPE == DType::F64 {
            l.arg(&scalars.f64s[i]);
        } else {
            l.arg(&scalars.f32s[i]);
        }
    }
    // SAFETY: elementwise.hip's kernels take (size_t n, [EwStrided1 s,] const I* in, O* out,
    // [C scalars...]) with C double for f64 kernels and float otherwise; `Strided<1>` is
    // `EwStrided1` field for field; the strided plan was built from this layout (n and every
    // offset fit u32) and the layout was checked to lie inside `src`; a contiguous plan reads
    // exactly n elements from the view's start, which the same check covers; `out` is a fresh
    // buffer of n elements; everything is ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(Some(out))
}

/// Runs binary op `root` (`badd`, ...) when the module has it for `T` and the layouts fit its
/// kernels; `Ok(None)` otherwise (including differing dims, which the caller reports).
pub fn binary<T: RocmDType>(
    dev: &RocmDevice,
    root: &'static str,
    (lhs, lhs_l): (&DeviceBuffer<T>, &Layout),
    (rhs, rhs_l): (&DeviceBuffer<T>, &Layout),
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    if !crate::registry::fast_kernels() {
        return Ok(None);
    }
    let Some(di) = binary_index(T::DTYPE) else {
        return Ok(None);
    };
    let Some((_, names)) = BINARY.iter().find(|(r, _)| *r == root) else {
        return Ok(None);
    };
    if lhs_l.dims() != rhs_l.dims() {
        return Ok(None);
    }
    let names = names[di];
    let n = lhs_l.shape().elem_count();
    if n == 0 {
        return Ok(Some(dev.alloc::<T>(0)?));
    }
    let vec = pack_elems::<T, T>();
    let plan = plan::<2>(lhs_l.dims(), [lhs_l.stride(), rhs_l.stride()], vec);
    if plan == Plan::Fallback {
        return Ok(None);
    }
    let out = dev.alloc::<T>(n)?;
    let (a, b) = (
        checked_view(names[0], lhs, lhs_l)?,
        checked_view(names[0], rhs, rhs_l)?,
    );
    let cfg = launch_config(n, vec)?;
    let (pa, pb, pout) = (DevicePtrArg::of(&a), DevicePtrArg::of(&b), out.as_arg());
    let f = match plan {
        Plan::Strided(_) => dev.function_static(Module::Elementwise, names[1])?,
        _ => dev.function_static(Module::Elementwise, names[0])?,
    };
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&n);
    if let Plan::Strided(s) = &plan {
        l.arg(s);
    }
    l.arg(&pa).arg(&pb).arg(&pout);
    // SAFETY: elementwise.hip's binary kernels take (size_t n, [EwStrided2 s,] const T* lhs,
    // const T* rhs, T* out); `Strided<2>` is `EwStrided2` field for field; the plan was built
    // from these layouts (same dims; n and every offset fit u32) and both layouts were checked
    // to lie inside their buffers; `out` is a fresh buffer of n elements; everything is
    // ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(Some(out))
}

/// `where_cond`: `cond[i] != 0 ? t[i] : f[i]`, bits copied as they are, when the module has
/// the kernel for `C` and `T` and the layouts fit its kernels; `Ok(None)` otherwise (including
/// differing dims, which the caller reports).
pub fn where_cond<C: RocmDType, T: RocmDType>(
    dev: &RocmDevice,
    (cond, cond_l): (&DeviceBuffer<C>, &Layout),
    (t, t_l): (&DeviceBuffer<T>, &Layout),
    (f, f_l): (&DeviceBuffer<T>, &Layout),
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    if !crate::registry::fast_kernels() {
        return Ok(None);
    }
    let (Some(ci), Some(vi)) = (cond_index(C::DTYPE), binary_index(T::DTYPE)) else {
        return Ok(None);
    };
    if cond_l.dims() != t_l.dims() || cond_l.dims() != f_l.dims() {
        return Ok(None);
    }
    let names = WHERE[ci][vi];
    let n = cond_l.shape().elem_count();
    if n == 0 {
        return Ok(Some(dev.alloc::<T>(0)?));
    }
    let vec = select_pack_elems::<C, T>();
    let plan = plan::<3>(
        cond_l.dims(),
        [cond_l.stride(), t_l.stride(), f_l.stride()],
        vec,
    );
    if plan == Plan::Fallback {
        return Ok(None);
    }
    let out = dev.alloc::<T>(n)?;
    let (c, a, b) = (
        checked_view(names[0], cond, cond_l)?,
        checked_view(names[0], t, t_l)?,
        checked_view(names[0], f, f_l)?,
    );
    let cfg = launch_config(n, vec)?;
    let (pc, pa, pb, pout) = (
        DevicePtrArg::of(&c),
        DevicePtrArg::of(&a),
        DevicePtrArg::of(&b),
        out.as_arg(),
    );
    let func = match plan {
        Plan::Strided(_) => dev.function_static(Module::Elementwise, names[1])?,
        _ => dev.function_static(Module::Elementwise, names[0])?,
    };
    let mut l = dev.stream().launch_builder(&func);
    l.arg(&n);
    if let Plan::Strided(s) = &plan {
        l.arg(s);
    }
    l.arg(&pc).arg(&pa).arg(&pb).arg(&pout);
    // SAFETY: elementwise.hip's where kernels take (size_t n, [EwStrided3 s,] const C* cond,
    // const T* t, const T* f, T* out) with C and T the unsigned integers of these dtypes'
    // sizes; `Strided<3>` is `EwStrided3` field for field; the plan was built from these three
    // layouts (same dims; n and every offset fit u32) and each layout was checked to lie
    // inside its buffer; a contiguous plan reads exactly n elements from each view's start,
    // which the same checks cover; `out` is a fresh buffer of n elements; everything is
    // ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn div(x: u32, d: u32) -> u32 {
        let (m, s) = magic_divisor(d).unwrap();
        let hi = ((x as u64 * m as u64) >> 32) as u32;
        ((hi as u64 + x as u64) >> s) as u32
    }

    #[test]
    fn magic_division_is_exact() {
        let mut divisors: Vec<u32> = (1..=600).collect();
        divisors.extend([
            1023,
            1024,
            1025,
            65535,
            65536,
            65537,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            u32::MAX - 1,
            u32::MAX,
        ]);
        let mut xs: Vec<u32> = (0..2000).collect();
        xs.extend([u32::MAX, u32::MAX - 1, 1 << 31, (1 << 31) - 1, 123_456_789]);
        let mut state = 0x9E37_79B9u32;
        for _ in 0..5000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            xs.push(state);
        }
        for &d in &divisors {
            for &x in &xs {
                assert_eq!(div(x, d), x / d, "{x} / {d}");
            }
            for k in [1u64, 2, 3, 1000] {
                let x = (d as u64 * k).min(u32::MAX as u64) as u32;
                for x in [x.saturating_sub(1), x, x.saturating_add(1)] {
                    assert_eq!(div(x, d), x / d, "{x} / {d}");
                }
            }
        }
        assert_eq!(magic_divisor(0), None);
    }

    #[test]
    fn launch_shapes() {
        let c = launch_config(1, 4).unwrap();
        assert_eq!((c.grid_dim, c.block_dim), ((1, 1, 1), (BLOCK, 1, 1)));
        let tile = BLOCK as usize * UNROLL * 4;
        assert_eq!(launch_config(tile, 4).unwrap().grid_dim.0, 1);
        assert_eq!(launch_config(tile + 1, 4).unwrap().grid_dim.0, 2);
        assert_eq!(
            launch_config(1 << 26, 4).unwrap().grid_dim.0 as usize,
            (1 << 26) / tile
        );
        // Huge counts are capped (the kernels loop) and never overflow.
        assert_eq!(
            launch_config(usize::MAX, 8).unwrap().grid_dim.0 as usize,
            MAX_GRID
        );
        assert!(launch_config(0, 4).is_err());
        assert!(launch_config(10, 0).is_err());
        assert!(launch_config(10, usize::MAX).is_err());
        assert!(MAX_GRID * BLOCK as usize <= u32::MAX as usize);
        assert_eq!(pack_elems::<f32, f32>(), 4);
        assert_eq!(pack_elems::<half::bf16, half::bf16>(), 8);
        assert_eq!(pack_elems::<f64, f64>(), 2);
        assert_eq!(pack_elems::<f32, half::bf16>(), 8);
        assert_eq!(pack_elems::<f64, f32>(), 4);
        assert_eq!(pack_elems::<u8, u8>(), 16);
        assert_eq!(select_pack_elems::<u8, f32>(), 16);
        assert_eq!(select_pack_elems::<u8, half::bf16>(), 16);
        assert_eq!(select_pack_elems::<u8, f64>(), 8);
        assert_eq!(select_pack_elems::<i64, u8>(), 8);
        assert_eq!(select_pack_elems::<i64, half::f16>(), 8);
        assert_eq!(select_pack_elems::<i32, u8>(), 16);
        assert_eq!(select_pack_elems::<u32, f64>(), 4);
        assert_eq!(select_pack_elems::<i64, i64>(), 2);
    }

    fn strided<const N: usize>(p: Plan<N>) -> Strided<N> {
        match p {
            Plan::Strided(s) => s,
            other => panic!("expected a strided plan, got {other:?}"),
        }
    }

    #[test]
    fn plans_merge_and_classify() {
        // Contiguous, also with size-1 dims of any stride.
        assert_eq!(plan::<1>(&[4, 5, 6], [&[30, 6, 1]], 4), Plan::Contiguous);
        assert_eq!(plan::<1>(&[4, 1, 6], [&[6, 99, 1]], 4), Plan::Contiguous);
        assert_eq!(plan::<1>(&[], [&[]], 4), Plan::Contiguous);
        assert_eq!(plan::<2>(&[1, 1], [&[1, 1], &[0, 0]], 4), Plan::Contiguous);
        // Row broadcast: [B, N, D] + [D] merges to [B*N, D] with rhs strides (0, 1).
        let s = strided(plan::<2>(&[2, 3, 8], [&[24, 8, 1], &[0, 0, 1]], 4));
        assert_eq!(s.dims.rank, 2);
        assert_eq!(&s.dims.dims[..2], &[8, 6]);
        assert_eq!(&s.strides[0][..2], &[1, 8]);
        assert_eq!(&s.strides[1][..2], &[1, 0]);
        assert_eq!(s.dims.vec, 1);
        // Column broadcast: [B, N, D] + [B, N, 1].
        let s = strided(plan::<2>(&[2, 3, 8], [&[24, 8, 1], &[3, 1, 0]], 4));
        assert_eq!((s.dims.rank, s.dims.vec), (2, 1));
        assert_eq!(&s.strides[1][..2], &[0, 1]);
        // The innermost dim is not a multiple of the pack: element path.
        let s = strided(plan::<2>(&[3, 6], [&[6, 1], &[0, 1]], 4));
        assert_eq!(s.dims.vec, 0);
        // A transpose: strides 1 on the outer dim, no packs.
        let s = strided(plan::<1>(&[8, 4], [&[1, 8]], 4));
        assert_eq!((s.dims.rank, s.dims.vec), (2, 0));
        // Narrowed rows (stride 12 over 8 columns): packs, since 12 is a multiple of 4.
        let s = strided(plan::<1>(&[5, 8], [&[12, 1]], 4));
        assert_eq!(s.dims.vec, 1);
        let s = strided(plan::<1>(&[5, 8], [&[10, 1]], 4));
        assert_eq!(s.dims.vec, 0);
        // Unused entries: size 1, magic of 1, stride 0.
        assert_eq!(s.dims.dims[2..], [1; MAX_RANK - 2]);
        assert_eq!(s.strides[0][2..], [0; MAX_RANK - 2]);
        // where_cond on an attention mask: cond [S, S] broadcast over [B, H], t contiguous,
        // f one scalar; the inner two dims merge, and packs load whole (u8 cond, f32 values).
        let w = strided(plan::<3>(
            &[2, 3, 4, 8],
            [&[0, 0, 8, 1], &[96, 32, 8, 1], &[0, 0, 0, 0]],
            16,
        ));
        assert_eq!((w.dims.rank, w.dims.vec), (2, 1));
        assert_eq!(&w.dims.dims[..2], &[32, 6]);
        assert_eq!(&w.strides[0][..2], &[1, 0]);
        assert_eq!(&w.strides[1][..2], &[1, 32]);
        assert_eq!(&w.strides[2][..2], &[0, 0]);
    }

    #[test]
    fn plans_fall_back_beyond_the_limits() {
        // Seven dims that cannot merge (alternating broadcast): above MAX_RANK.
        let dims = [2usize; 7];
        let lhs = [64usize, 32, 16, 8, 4, 2, 1];
        let rhs = [0usize, 16, 0, 4, 0, 1, 0];
        assert_eq!(plan::<2>(&dims, [&lhs, &rhs], 4), Plan::Fallback);
        // Six such dims fit.
        let s = strided(plan::<2>(&dims[1..], [&lhs[1..], &rhs[1..]], 4));
        assert_eq!(s.dims.rank, 6);
        // More than u32::MAX elements, or offsets past u32::MAX.
        let big = 1usize << 32;
        assert_eq!(plan::<1>(&[2, big], [&[1, 2]], 4), Plan::Fallback);
        assert_eq!(plan::<1>(&[2, 3], [&[big, 1]], 4), Plan::Fallback);
        assert_eq!(plan::<1>(&[2, 3], [&[1]], 4), Plan::Fallback);
        // Offsets right at the limit still fit.
        let s = strided(plan::<1>(&[2, 3], [&[u32::MAX as usize - 2, 1]], 4));
        assert_eq!(s.strides[0][1], u32::MAX - 2);
    }

    #[test]
    fn structs_match_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<Dims>(), 4 * (2 + 3 * MAX_RANK));
        assert_eq!(std::mem::size_of::<Strided<1>>(), 4 * (2 + 4 * MAX_RANK));
        assert_eq!(std::mem::size_of::<Strided<2>>(), 4 * (2 + 5 * MAX_RANK));
        assert_eq!(std::mem::size_of::<Strided<3>>(), 4 * (2 + 6 * MAX_RANK));
        assert_eq!(std::mem::align_of::<Strided<3>>(), 4);
        assert_eq!(std::mem::align_of::<Strided<2>>(), 4);
    }

    /// Every kernel name the tables can produce exists in the embedded code objects.
    #[test]
    fn every_named_kernel_is_built() {
        let mut wanted: Vec<&str> = Vec::new();
        for (_, n) in UNARY.iter().chain(SCALAR_UNARY) {
            wanted.extend(n.iter().flatten());
        }
        wanted.extend(AFFINE.iter().flatten());
        for (_, n) in BINARY {
            wanted.extend(n.iter().flatten());
        }
        for row in &CASTS {
            wanted.extend(row.iter().flatten());
        }
        for row in &WHERE {
            wanted.extend(row.iter().flatten());
        }
        assert_eq!(wanted.len(), (20 + 2 + 1) * 8 + 6 * 18 + 16 * 2 + 5 * 9 * 2);
        let targets: Vec<&str> = candle_rocm_kernels::embedded()
            .filter(|(m, _)| *m == Module::Elementwise)
            .map(|(_, t)| t)
            .collect();
        assert!(!targets.is_empty(), "no embedded elementwise objects");
        for t in targets {
            let raw = candle_rocm_kernels::code_object(Module::Elementwise, t)
                .unwrap()
                .unwrap();
            let co = candle_rocm_kernels::code_object::CodeObject::parse(&raw).unwrap();
            let have: std::collections::HashSet<&str> =
                co.kernels.iter().map(|k| k.name.as_str()).collect();
            for w in &wanted {
                assert!(have.contains(w), "{w} missing from elementwise.{t}");
            }
            assert_eq!(have.len(), wanted.len(), "elementwise.{t} kernel count");
        }
    }
}
