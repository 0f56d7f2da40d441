//! The fused ops that candle-nn and candle-core hand to an out-of-tree backend
//! ([`candle_core::ext::FusedOp`]): sigmoid, softmax over the last dim, RMS and layer norm, the
//! three rotary embeddings, arg-sort, SwiGLU's gate, the residual add with the next RMS norm
//! (candle-nn's `swiglu` and `add_rms_norm`) and batch norm in eval mode (`launch::batch_norm`,
//! with or without the ReLU after it), each one launch, and group norm (`launch::group_norm`,
//! two). Softmax and the norms run our `rows`
//! kernels (single pass with the row in registers up to 8192 elements, two passes beyond; see
//! `rows.rs`), and so do rope and rope_i where a row's halves (rope) or the row (rope_i) are
//! whole 16-byte packs; the others candle-kernels' own kernel with the arguments candle-nn's
//! CUDA path passes.
//!
//! Unlike Candle's CUDA path, a non-contiguous operand is first copied into a contiguous buffer
//! on the device rather than refused. Shapes are checked against the buffers before a launch,
//! so a bad operand is an error, never an out-of-bounds access. A dtype with no kernel gives
//! `Ok(None)`: the caller then falls back to the CPU (or refuses, in strict mode).

use std::borrow::Cow;

use candle_core::backend::BackendStorage;
use candle_core::ext::FusedOp;
use candle_core::{DType, Layout, Shape};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceSlice, DeviceView, LaunchConfig};

use crate::device::RocmDevice;
use crate::dispatch::Map1;
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::{BackendError, WrapErr};
use crate::launch::batch_norm::batch_norm;
use crate::launch::group_norm::group_norm;
use crate::launch::kernel_name;
use crate::launch::row_elementwise;
use crate::launch::rows::{self, FusedRow};
use crate::layout::invalid;
use crate::layout::{checked_product, shape_error};
use crate::ops::elementwise::NamedUnary;
use crate::storage::RocmStorage;

/// What a fused op returns: the result and its shape, or `None` when not handled.
type Fused = candle_core::Result<Option<(RocmStorage, Shape)>>;

/// Runs `op` on `x` (laid out as `l`) and the further operands `args`.
pub(crate) fn run(
    x: &RocmStorage,
    l: &Layout,
    op: &FusedOp,
    args: &[(&RocmStorage, &Layout)],
) -> Fused {
    let dtype = x.dtype();
    if let Some((other, _)) = args.iter().find(|(s, _)| s.dtype() != dtype) {
        return Err(BackendError::DtypeMismatch {
            op: op.name(),
            lhs: dtype,
            rhs: other.dtype(),
        })
        .w();
    }
    let float = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    let dev = x.device();
    match op {
        FusedOp::Sigmoid if float => {
            let out = NamedUnary("usigmoid").map(&x.slice, dev, l)?;
            Ok(Some((
                RocmStorage::new(out, dev.clone()),
                l.shape().clone(),
            )))
        }
        FusedOp::SoftmaxLastDim if float => {
            let (x, xl) = contiguous(x, l)?;
            let out = dispatch1(&x.slice, |v| softmax(dev, v, &xl))?;
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), xl.shape().clone())))
        }
        FusedOp::RmsNorm { eps } if float => {
            let [(a, al)] = operands::<1>(op, args)?;
            let (x, xl) = contiguous(x, l)?;
            let (a, al) = contiguous(a, al)?;
            let out = dispatch2(&x.slice, &a.slice, |v, w| {
                norm(dev, "rmsnorm", v, &xl, &[(w, &al)], *eps)
            })?;
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), xl.shape().clone())))
        }
        FusedOp::LayerNorm { eps } if float => {
            let [(a, al), (b, bl)] = operands::<2>(op, args)?;
            let (x, xl) = contiguous(x, l)?;
            let (a, al) = contiguous(a, al)?;
            let (b, bl) = contiguous(b, bl)?;
            let out = dispatch3(&x.slice, &a.slice, &b.slice, |v, w, z| {
                norm(dev, "layernorm", v, &xl, &[(w, &al), (z, &bl)], *eps)
            })?;
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), xl.shape().clone())))
        }
        FusedOp::Rope | FusedOp::RopeI | FusedOp::RopeThd if float => {
            let [(c, cl), (s, sl)] = operands::<2>(op, args)?;
            let (x, xl) = contiguous(x, l)?;
            let (c, cl) = contiguous(c, cl)?;
            let (s, sl) = contiguous(s, sl)?;
            let out = dispatch3(&x.slice, &c.slice, &s.slice, |v, cv, sv| {
                rope(dev, *op, v, &xl, (cv, &cl), (sv, &sl))
            })?;
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), xl.shape().clone())))
        }
        FusedOp::ArgSort { asc } => argsort(x, l, *asc),
        // Without our row kernels (CANDLE_ROCM_FAST_KERNELS=0) the CPU's composition runs.
        FusedOp::Swiglu if float && crate::settings::fast_kernels() => {
            let (x, xl) = contiguous(x, l)?;
            let out = dispatch1(&x.slice, |v| swiglu(dev, v, &xl))?;
            let mut dims = xl.dims().to_vec();
            if let Some(d) = dims.last_mut() {
                *d /= 2;
            }
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), Shape::from(dims))))
        }
        FusedOp::AddRmsNorm { eps } if float && crate::settings::fast_kernels() => {
            let [(r, rl), (a, al)] = operands::<2>(op, args)?;
            if rl.shape() != l.shape() {
                return Err(shape_error(
                    op.name(),
                    "the residual's shape differs from x's",
                ))
                .w();
            }
            let (x, xl) = contiguous(x, l)?;
            let (r, rl) = contiguous(r, rl)?;
            let (a, al) = contiguous(a, al)?;
            let out = dispatch3(&x.slice, &a.slice, &r.slice, |v, w, z| {
                norm(dev, "addrmsnorm", v, &xl, &[(w, &al), (z, &rl)], *eps)
            })?;
            let mut dims = vec![2];
            dims.extend_from_slice(xl.dims());
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), Shape::from(dims))))
        }
        FusedOp::BatchNormEval { eps } | FusedOp::BatchNormEvalRelu { eps } if float => {
            let relu = matches!(op, FusedOp::BatchNormEvalRelu { .. });
            let [(p, pl)] = operands::<1>(op, args)?;
            let (x, xl) = contiguous(x, l)?;
            let (p, pl) = contiguous(p, pl)?;
            let eps = f64::from(*eps);
            let out = batch_norm(dev, (&x.slice, &xl), (&p.slice, &pl), eps, relu).w()?;
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), xl.shape().clone())))
        }
        FusedOp::GroupNorm { num_groups, eps } if float => {
            let [(w, wl), (b, bl)] = operands::<2>(op, args)?;
            let (x, xl) = contiguous(x, l)?;
            let (w, wl) = contiguous(w, wl)?;
            let (b, bl) = contiguous(b, bl)?;
            let out = group_norm(
                dev,
                (&x.slice, &xl),
                (&w.slice, &wl),
                (&b.slice, &bl),
                *num_groups,
                *eps,
            )
            .w()?;
            Ok(out.map(|s| (RocmStorage::new(s, dev.clone()), xl.shape().clone())))
        }
        _ => Ok(None),
    }
}

/// Exactly `N` further operands, as the op defines them.
fn operands<'a, const N: usize>(
    op: &FusedOp,
    args: &[(&'a RocmStorage, &'a Layout)],
) -> candle_core::Result<[(&'a RocmStorage, &'a Layout); N]> {
    <[_; N]>::try_from(args).map_err(|_| {
        candle_core::Error::Msg(format!(
            "{}: expected {N} operands besides the input, got {}",
            op.name(),
            args.len()
        ))
        .bt()
    })
}

/// An operand as the kernels take it: contiguous, borrowed or a device copy.
enum Contiguous<'a> {
    Borrowed(&'a RocmStorage),
    Owned(RocmStorage),
}

impl std::ops::Deref for Contiguous<'_> {
    type Target = RocmStorage;
    fn deref(&self) -> &RocmStorage {
        match self {
            Contiguous::Borrowed(s) => s,
            Contiguous::Owned(s) => s,
        }
    }
}

/// `s` itself and `l` when `l` is contiguous (borrowed: no allocation on the hot path), else a
/// contiguous device copy and its layout.
fn contiguous<'a>(
    s: &'a RocmStorage,
    l: &'a Layout,
) -> candle_core::Result<(Contiguous<'a>, Cow<'a, Layout>)> {
    if l.is_contiguous() {
        return Ok((Contiguous::Borrowed(s), Cow::Borrowed(l)));
    }
    let dev = s.device();
    let copy = RocmStorage::new(crate::ops::copy::contiguous(dev, &s.slice, l)?, dev.clone());
    Ok((
        Contiguous::Owned(copy),
        Cow::Owned(Layout::contiguous(l.shape())),
    ))
}

/// The elements of a contiguous layout, checked against the buffer.
fn view<'a, T: RocmDType>(
    op: &str,
    buf: &'a DeviceBuffer<T>,
    l: &Layout,
) -> Result<DeviceView<'a, T>, BackendError> {
    match l.contiguous_offsets() {
        Some((o1, o2)) if o2 <= buf.len() => Ok(buf.slice(o1..o2)?),
        _ => Err(invalid(
            op,
            format_args!("layout {l:?} does not fit a buffer of {}", buf.len()),
        )),
    }
}

/// `(rows, cols)` of a tensor reduced over its last dim; an error for a 0-d tensor.
fn rows_cols(op: &str, l: &Layout) -> Result<(usize, usize), BackendError> {
    match l.dims().last() {
        Some(&cols) if cols > 0 => Ok((l.shape().elem_count() / cols, cols)),
        Some(_) => Ok((0, 0)),
        None => Err(shape_error(op, "needs at least one dimension")),
    }
}

fn as_i32(op: &str, what: &str, v: usize) -> Result<i32, BackendError> {
    i32::try_from(v).map_err(|_| invalid(op, format_args!("{what} {v} exceeds 2^31 - 1")))
}

fn as_u32(op: &str, what: &str, v: usize) -> Result<u32, BackendError> {
    u32::try_from(v).map_err(|_| invalid(op, format_args!("{what} {v} exceeds 2^32 - 1")))
}

/// Calls `f` on the buffer of a float slice; `None` for other dtypes.
fn dispatch1(
    x: &S,
    f: impl FnOnce(Float1<'_>) -> candle_core::Result<S>,
) -> candle_core::Result<Option<S>> {
    Ok(match x {
        S::F32(b) => Some(f(Float1::F32(b))?),
        S::F64(b) => Some(f(Float1::F64(b))?),
        S::F16(b) => Some(f(Float1::F16(b))?),
        S::BF16(b) => Some(f(Float1::BF16(b))?),
        _ => None,
    })
}

/// One float buffer of any of the four float dtypes.
enum Float1<'a> {
    F32(&'a DeviceBuffer<f32>),
    F64(&'a DeviceBuffer<f64>),
    F16(&'a DeviceBuffer<half::f16>),
    BF16(&'a DeviceBuffer<half::bf16>),
}

/// Applies a generic body to the typed buffer of a [`Float1`].
macro_rules! with_float {
    ($v:expr, $b:ident => $body:expr) => {
        match $v {
            Float1::F32($b) => $body,
            Float1::F64($b) => $body,
            Float1::F16($b) => $body,
            Float1::BF16($b) => $body,
        }
    };
}

/// Calls `f` with two buffers of one float dtype; `None` for other dtypes.
fn dispatch2<F>(a: &S, b: &S, f: F) -> candle_core::Result<Option<S>>
where
    F: FnOnce(Float1<'_>, Float1<'_>) -> candle_core::Result<S>,
{
    Ok(match (a, b) {
        (S::F32(x), S::F32(y)) => Some(f(Float1::F32(x), Float1::F32(y))?),
        (S::F64(x), S::F64(y)) => Some(f(Float1::F64(x), Float1::F64(y))?),
        (S::F16(x), S::F16(y)) => Some(f(Float1::F16(x), Float1::F16(y))?),
        (S::BF16(x), S::BF16(y)) => Some(f(Float1::BF16(x), Float1::BF16(y))?),
        _ => None,
    })
}

/// Calls `f` with three buffers of one float dtype; `None` for other dtypes.
fn dispatch3<F>(a: &S, b: &S, c: &S, f: F) -> candle_core::Result<Option<S>>
where
    F: FnOnce(Float1<'_>, Float1<'_>, Float1<'_>) -> candle_core::Result<S>,
{
    use Float1 as F1;
    Ok(match (a, b, c) {
        (S::F32(x), S::F32(y), S::F32(z)) => Some(f(F1::F32(x), F1::F32(y), F1::F32(z))?),
        (S::F64(x), S::F64(y), S::F64(z)) => Some(f(F1::F64(x), F1::F64(y), F1::F64(z))?),
        (S::F16(x), S::F16(y), S::F16(z)) => Some(f(F1::F16(x), F1::F16(y), F1::F16(z))?),
        (S::BF16(x), S::BF16(y), S::BF16(z)) => Some(f(F1::BF16(x), F1::BF16(y), F1::BF16(z))?),
        _ => None,
    })
}

/// Downcasts a [`Float1`] to the buffer type of `T` (the dispatchers give one dtype).
trait FromFloat1: RocmDType {
    fn get<'a>(v: &Float1<'a>) -> Option<&'a DeviceBuffer<Self>>;
}

macro_rules! from_float1 {
    ($t:ty, $v:ident) => {
        impl FromFloat1 for $t {
            fn get<'a>(v: &Float1<'a>) -> Option<&'a DeviceBuffer<Self>> {
                match v {
                    Float1::$v(b) => Some(b),
                    _ => None,
                }
            }
        }
    };
}
from_float1!(f32, F32);
from_float1!(f64, F64);
from_float1!(half::f16, F16);
from_float1!(half::bf16, BF16);

/// The buffer of `v` as `T`, or an error (operands of one op share a dtype, checked above).
fn same<'a, T: FromFloat1>(op: &str, v: &Float1<'a>) -> Result<&'a DeviceBuffer<T>, BackendError> {
    T::get(v).ok_or_else(|| invalid(op, "operands have different dtypes"))
}

/// Softmax over the last dim: our `rsoftmax_<T>_<K>` (see `rows.rs`); candle's `softmax_<T>`,
/// one row per block of (1, 32) threads, for a dtype ours lacks.
fn softmax(dev: &RocmDevice, x: Float1<'_>, l: &Layout) -> candle_core::Result<S> {
    with_float!(x, b => softmax_t(dev, b, l).map(S::from_buffer).w())
}

fn softmax_t<T: RocmDType>(
    dev: &RocmDevice,
    x: &DeviceBuffer<T>,
    l: &Layout,
) -> Result<DeviceBuffer<T>, BackendError> {
    const OP: &str = "softmax-last-dim";
    let (rows, cols) = rows_cols(OP, l)?;
    if rows * cols == 0 {
        return dev.alloc::<T>(0);
    }
    let src = view(OP, x, l)?;
    if let Some(out) = rows::fused(dev, FusedRow::Softmax, &src, (rows, cols), &[], &[], 0.0)? {
        return Ok(out);
    }
    let out = dev.alloc::<T>(rows * cols)?;
    let f = dev.function(Module::Reduce, &kernel_name::<T>("softmax"))?;
    let (px, po, nc) = (
        DevicePtrArg::of(&src),
        out.as_arg(),
        as_i32(OP, "row length", cols)?,
    );
    let cfg = LaunchConfig {
        grid_dim: (as_u32(OP, "row count", rows)?, 1, 1),
        block_dim: (1, 32, 1),
        shared_mem_bytes: 0,
    };
    let mut b = dev.stream().launch_builder(&f);
    b.arg(&px).arg(&po).arg(&nc);
    // SAFETY: softmax_<T>(const T* x, T* dst, int ncols) reads and writes rows * ncols
    // elements, row = blockIdx.x; `src` holds exactly rows * cols elements (checked by `view`)
    // and `out` was allocated with that many; both are ordered on the device's stream.
    unsafe { b.launch(cfg)? };
    Ok(out)
}

/// Most scale/shift operands of a norm: layer norm's alpha and beta.
const MAX_NORM_PARAMS: usize = 2;

/// RMS norm (`rmsnorm`, one operand: alpha) or layer norm (`layernorm`, alpha and beta): our
/// `rrmsnorm`/`rlayernorm` kernels (see `rows.rs`); candle's, one row per block of 32 threads
/// (1024 for rows of 1024 or more), for a dtype ours lacks.
fn norm(
    dev: &RocmDevice,
    root: &'static str,
    x: Float1<'_>,
    l: &Layout,
    params: &[(Float1<'_>, &Layout)],
    eps: f32,
) -> candle_core::Result<S> {
    with_float!(x, b => norm_t(dev, root, b, l, params, eps).map(S::from_buffer).w())
}

fn norm_t<T: FromFloat1>(
    dev: &RocmDevice,
    root: &'static str,
    x: &DeviceBuffer<T>,
    l: &Layout,
    params: &[(Float1<'_>, &Layout)],
    eps: f32,
) -> Result<DeviceBuffer<T>, BackendError> {
    let (rows, cols) = rows_cols(root, l)?;
    if rows * cols == 0 {
        return dev.alloc::<T>(0);
    }
    let src = view(root, x, l)?;
    // alpha (and beta): at most two, on the stack.
    if params.len() > MAX_NORM_PARAMS {
        return Err(invalid(
            root,
            format_args!("{} scale/shift operands", params.len()),
        ));
    }
    let mut views = [DevicePtrArg::null(), DevicePtrArg::null()];
    let mut ptrs = [std::ptr::null_mut(); MAX_NORM_PARAMS];
    for (i, (p, pl)) in params.iter().enumerate() {
        let v = view(root, same::<T>(root, p)?, pl)?;
        // addrmsnorm's second operand is the residual: a whole x.
        let need = if root == "addrmsnorm" && i == 1 {
            rows * cols
        } else {
            cols
        };
        if v.len() < need {
            return Err(invalid(
                root,
                format_args!("a scale/shift of {} elements for rows of {cols}", v.len()),
            ));
        }
        views[i] = DevicePtrArg::of(&v);
        ptrs[i] = v.device_ptr();
    }
    let (views, ptrs) = (&views[..params.len()], &ptrs[..params.len()]);
    let op = match root {
        "rmsnorm" => FusedRow::RmsNorm,
        "addrmsnorm" => FusedRow::AddRmsNorm,
        _ => FusedRow::LayerNorm,
    };
    if let Some(out) = rows::fused(dev, op, &src, (rows, cols), views, ptrs, eps)? {
        return Ok(out);
    }
    if op == FusedRow::AddRmsNorm {
        // No candle kernel does both; `run` only comes here with our kernels on.
        return Err(invalid(root, "the row kernels are off"));
    }
    let out = dev.alloc::<T>(rows * cols)?;
    let f = dev.function(Module::Reduce, &kernel_name::<T>(root))?;
    let block: u32 = if cols < 1024 { 32 } else { 1024 };
    let (px, po) = (DevicePtrArg::of(&src), out.as_arg());
    let (nc, bs) = (as_i32(root, "row length", cols)?, block as i32);
    let cfg = LaunchConfig {
        grid_dim: (as_u32(root, "row count", rows)?, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut b = dev.stream().launch_builder(&f);
    b.arg(&px).arg(&po);
    for v in views {
        b.arg(v);
    }
    b.arg(&nc).arg(&bs).arg(&eps);
    // SAFETY: rmsnorm_<T>(x, dst, alpha, int ncols, int block_size, float eps) and
    // layernorm_<T>(x, dst, alpha, beta, ncols, block_size, eps) read rows * ncols elements
    // of x, ncols of each of alpha/beta (each checked to hold at least that many) and write
    // rows * ncols elements of dst (allocated with that many); block_size equals blockDim.x;
    // all buffers are ordered on the device's stream.
    unsafe { b.launch(cfg)? };
    Ok(out)
}

/// SwiGLU's gate over the last dim (`row_elementwise::swiglu`; `run` comes here only with our kernels
/// on).
fn swiglu(dev: &RocmDevice, x: Float1<'_>, l: &Layout) -> candle_core::Result<S> {
    with_float!(x, b => swiglu_t(dev, b, l).map(S::from_buffer).w())
}

fn swiglu_t<T: RocmDType>(
    dev: &RocmDevice,
    x: &DeviceBuffer<T>,
    l: &Layout,
) -> Result<DeviceBuffer<T>, BackendError> {
    const OP: &str = "swiglu";
    let (rows, cols) = rows_cols(OP, l)?;
    if cols % 2 != 0 {
        return Err(shape_error(OP, "needs a last dim of even length"));
    }
    if rows * cols == 0 {
        return dev.alloc::<T>(0);
    }
    row_elementwise::swiglu(dev, &view(OP, x, l)?, (rows, cols / 2))?
        .ok_or_else(|| invalid(OP, "the row kernels are off"))
}

/// The three rotary embeddings: our vector kernels for `rope` and `rope_i` where whole 16-byte
/// packs fit (see [`row_elementwise::rope`]), else candle's `rope_i`, `rope` and `rope_thd` kernels, one
/// thread per pair of elements.
fn rope(
    dev: &RocmDevice,
    op: FusedOp,
    x: Float1<'_>,
    l: &Layout,
    cos: (Float1<'_>, &Layout),
    sin: (Float1<'_>, &Layout),
) -> candle_core::Result<S> {
    with_float!(x, b => rope_t(dev, op, b, l, cos, sin).map(S::from_buffer).w())
}

fn rope_t<T: FromFloat1>(
    dev: &RocmDevice,
    op: FusedOp,
    x: &DeviceBuffer<T>,
    l: &Layout,
    (cos, cl): (Float1<'_>, &Layout),
    (sin, sl): (Float1<'_>, &Layout),
) -> Result<DeviceBuffer<T>, BackendError> {
    let name = op.name();
    let &[d0, d1, d2, d3] = l.dims() else {
        return Err(invalid(
            name,
            format_args!("expects 4 dims, got {:?}", l.dims()),
        ));
    };
    // (b, h, t, d) for rope/rope_i, (b, t, h, d) for rope_thd.
    let (b, t, d) = match op {
        FusedOp::RopeThd => (d0, d1, d3),
        _ => (d0, d2, d3),
    };
    if d % 2 != 0 {
        return Err(invalid(name, format_args!("last dim {d} is odd")));
    }
    let size = |what, factors: &[usize]| checked_product(name, what, factors);
    let el = size("element count", &[d0, d1, d2, d3])?;
    let batched = cl.dims().len() == 3 && sl.dims().len() == 3;
    let table = if batched {
        size("cos/sin table length", &[b, t, d])? / 2
    } else {
        size("cos/sin table length", &[t, d])? / 2
    };
    let stride_b = if !batched {
        0
    } else if matches!(op, FusedOp::RopeThd) {
        as_u32(name, "batch stride", size("batch stride", &[t, d2, d])?)?
    } else {
        as_u32(name, "batch stride", size("batch stride", &[d1, t, d])?)?
    };
    let mut out = dev.alloc::<T>(el)?;
    if el == 0 {
        return Ok(out);
    }
    let src = view(name, x, l)?;
    let (c, s) = (
        view(name, same::<T>(name, &cos)?, cl)?,
        view(name, same::<T>(name, &sin)?, sl)?,
    );
    if c.len() < table || s.len() < table {
        return Err(invalid(
            name,
            format_args!(
                "cos/sin of {} and {} elements, {table} needed for {:?}",
                c.len(),
                s.len(),
                l.dims()
            ),
        ));
    }
    // rope and rope_i on whole 16-byte packs: our vector kernels (rows.hip).
    if !matches!(op, FusedOp::RopeThd) {
        let rows_per_b = if batched { d1 * d2 } else { 0 };
        let interleaved = matches!(op, FusedOp::RopeI);
        if row_elementwise::rope(
            dev,
            interleaved,
            (&src, &c, &s),
            &mut out,
            (d0 * d1 * d2, d2, d3, rows_per_b),
        )? {
            return Ok(out);
        }
    }
    let root = match op {
        FusedOp::RopeI => "rope_i",
        FusedOp::Rope => "rope",
        _ => "rope_thd",
    };
    let f = dev.function(Module::Reduce, &kernel_name::<T>(root))?;
    let (px, pc, ps, po) = (
        DevicePtrArg::of(&src),
        DevicePtrArg::of(&c),
        DevicePtrArg::of(&s),
        out.as_arg(),
    );
    let u = |what, v| as_u32(name, what, v);
    // d0 * d1 and d2 * d3 divide el, which fit.
    let dims: Vec<u32> = match op {
        FusedOp::RopeI => vec![u("b*h", d0 * d1)?, u("t*d", d2 * d3)?],
        FusedOp::Rope => vec![u("b*h", d0 * d1)?, u("t*d", d2 * d3)?, u("d", d3)?],
        _ => vec![u("b", d0)?, u("t", d1)?, u("h", d2)?, u("d", d3)?],
    };
    let mut bld = dev.stream().launch_builder(&f);
    bld.arg(&px).arg(&pc).arg(&ps).arg(&po);
    for v in &dims {
        bld.arg(v);
    }
    bld.arg(&stride_b);
    let cfg = RocmDevice::cfg(el / 2)?;
    // SAFETY: rope_i_<T>(src, cos, sin, dst, bh, td, stride_b), rope_<T>(src, cos, sin, dst,
    // bh, td, d, stride_b) and rope_thd_<T>(src, cos, sin, dst, b, t, h, d, stride_b): each
    // thread handles one pair below el, reading src and writing dst (el elements each, checked
    // and allocated above) and one entry of cos/sin below `table` (checked above); the grid
    // covers el / 2 threads; all buffers are ordered on the device's stream.
    unsafe { bld.launch(cfg)? };
    Ok(out)
}

/// Arg-sort of the last dim: candle's bitonic `asort_{asc,desc}_<T>`, one row per block, the
/// row's indices in shared memory. `None` for dtypes without a kernel and for rows whose padded
/// length does not fit the device's shared memory.
fn argsort(x: &RocmStorage, l: &Layout, asc: bool) -> Fused {
    const OP: &str = "argsort";
    let dev = x.device();
    let (x, xl) = contiguous(x, l)?;
    let (rows, cols) = rows_cols(OP, &xl).w()?;
    let pad = cols.next_power_of_two();
    let shared = pad * std::mem::size_of::<u32>();
    if shared > dev.device().info().max_shared_mem_per_block {
        return Ok(None);
    }
    let root = if asc { "asort_asc" } else { "asort_desc" };
    macro_rules! go {
        ($b:expr, $t:ty) => {
            argsort_t::<$t>(dev, root, $b, &xl, (rows, cols, pad)).w()?
        };
    }
    let out = match &x.slice {
        S::U8(b) => go!(b, u8),
        S::U32(b) => go!(b, u32),
        S::I64(b) => go!(b, i64),
        S::F32(b) => go!(b, f32),
        S::F64(b) => go!(b, f64),
        S::F16(b) => go!(b, half::f16),
        S::BF16(b) => go!(b, half::bf16),
        _ => return Ok(None),
    };
    Ok(Some((
        RocmStorage::new(S::U32(out), dev.clone()),
        xl.shape().clone(),
    )))
}

fn argsort_t<T: RocmDType>(
    dev: &RocmDevice,
    root: &str,
    x: &DeviceBuffer<T>,
    l: &Layout,
    (rows, cols, pad): (usize, usize, usize),
) -> Result<DeviceBuffer<u32>, BackendError> {
    const OP: &str = "argsort";
    let out = dev.alloc::<u32>(rows * cols)?;
    if rows * cols == 0 {
        return Ok(out);
    }
    let src = view(OP, x, l)?;
    let f = dev.function(Module::Sort, &kernel_name::<T>(root))?;
    let (px, po) = (DevicePtrArg::of(&src), out.as_arg());
    let (nc, np) = (
        as_i32(OP, "row length", cols)?,
        as_i32(OP, "padded row", pad)?,
    );
    let cfg = LaunchConfig {
        grid_dim: (as_u32(OP, "row count", rows)?, 1, 1),
        block_dim: (pad.min(1024) as u32, 1, 1),
        shared_mem_bytes: (pad * std::mem::size_of::<u32>()) as u32,
    };
    let mut b = dev.stream().launch_builder(&f);
    b.arg(&px).arg(&po).arg(&nc).arg(&np);
    // SAFETY: asort_*_<T>(const T* x, uint32_t* dst, int ncols, int ncols_pad) sorts row
    // blockIdx.x of x (rows * ncols elements, checked) into dst (allocated with as many), using
    // ncols_pad ints of dynamic shared memory (given, and checked against the device's limit
    // by the caller); all buffers are ordered on the device's stream.
    unsafe { b.launch(cfg)? };
    Ok(out)
}
