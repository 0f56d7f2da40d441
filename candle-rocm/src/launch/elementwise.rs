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
//! - at most `MAX_RANK` merged dims, at most `u32::MAX` elements and offsets: the strided
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
use rocm_safe::{DeviceBuffer, DevicePtrArg, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::strides::{half_packs, plan, Plan};
use crate::layout::{checked_view, invalid};

/// Threads per block (`EW_BLOCK`, the kernels' launch bound).
pub const BLOCK: u32 = 256;
/// Packs each thread handles per tile (`EW_UNROLL`).
pub const UNROLL: usize = 1;
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
    if !crate::settings::fast_kernels() {
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
    if !crate::settings::fast_kernels() {
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
        Plan::Strided(_) => dev.function(Module::Elementwise, names[1])?,
        _ => dev.function(Module::Elementwise, names[0])?,
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
    if !crate::settings::fast_kernels() {
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
    let (plan, vec) = half_packs(
        lhs_l.dims(),
        [lhs_l.stride(), rhs_l.stride()],
        pack_elems::<T, T>(),
    );
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
        Plan::Strided(_) => dev.function(Module::Elementwise, names[1])?,
        _ => dev.function(Module::Elementwise, names[0])?,
    };
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&n);
    if let Plan::Strided(s) = &plan {
        l.arg(s);
    }
    l.arg(&pa).arg(&pb).arg(&pout);
    // SAFETY: elementwise.hip's binary kernels take (size_t n, [EwStrided2 s,] const T* lhs,
    // const T* rhs, T* out); `Strided<2>` is `EwStrided2` field for field; the plan was built
    // from these layouts (same dims; n and every offset fit u32; whole or half packs only
    // where `half_packs` proved the innermost dim and every stride multiples of the pack, so a
    // pack never crosses a row) and both layouts were checked to lie inside their buffers;
    // `out` is a fresh buffer of n elements; everything is ordered on the device's stream.
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
    if !crate::settings::fast_kernels() {
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
        Plan::Strided(_) => dev.function(Module::Elementwise, names[1])?,
        _ => dev.function(Module::Elementwise, names[0])?,
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

/// The kernel names of every embedded elementwise code object, by target (there is at least
/// one); for the tests of the launchers of this module's kernels.
#[cfg(test)]
pub(crate) fn embedded_kernels() -> Vec<(&'static str, std::collections::HashSet<String>)> {
    let out: Vec<_> = candle_rocm_kernels::embedded()
        .filter(|(m, _)| *m == Module::Elementwise)
        .map(|(_, t)| {
            let raw = candle_rocm_kernels::code_object(Module::Elementwise, t)
                .unwrap()
                .unwrap();
            let co = candle_rocm_kernels::code_object::CodeObject::parse(&raw).unwrap();
            (t, co.kernels.into_iter().map(|k| k.name).collect())
        })
        .collect();
    assert!(!out.is_empty(), "no embedded elementwise objects");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for (t, have) in embedded_kernels() {
            for w in &wanted {
                assert!(have.contains(*w), "{w} missing from elementwise.{t}");
            }
            // Plus batch norm's four (`launch::batch_norm` checks its own names).
            assert_eq!(have.len(), wanted.len() + 4, "elementwise.{t} kernel count");
        }
    }
}
