//! Elementwise ops: `affine`, `powf`, `elu`, unary and binary ops, `cmp`, `where_cond`,
//! `to_dtype`, `const_set`, `copy_strided_src` and `copy2d`.
//!
//! Candle's elementwise kernels take `(numel, num_dims, info, ...)`, where `info` is null for
//! contiguous operands or the dims followed by each operand's strides; input pointers already
//! include the layout's start offset. Every layout is checked against its buffer before a
//! launch, so a bad layout is an error, never an out-of-bounds access.
//!
//! Unary ops, `affine`, `elu`, `powf`, binary ops, `where_cond` and casts between the float
//! dtypes first try our vectorised kernels ([`crate::elementwise`]), which take the shape by
//! value; candle's kernels (our `where` module for `where_cond`) run what those do not cover
//! (other dtypes, more than six unmergeable dims).

use std::marker::PhantomData;

use candle_core::op::{BinaryOpT, CmpOp, UnaryOpT};
use candle_core::{DType, Layout};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr, DeviceView};

use crate::device::RocmDevice;
use crate::elementwise::{self, UnaryOp};
use crate::error::{BackendError, WrapErr};
use crate::storage::{RocmDType, RocmStorageSlice as S};
use crate::utils::{bits_suffix, kernel_name, kernel_suffix, module_for, Map1, Map2, Map2Any};

/// An "invalid argument" error for op `name`.
pub(crate) fn invalid(name: &str, msg: impl std::fmt::Display) -> BackendError {
    rocm_safe::RocmError::InvalidArgument(format!("{name}: {msg}")).into()
}

/// Number of elements past `layout`'s start offset that its last element lies at, plus one
/// (0 for an empty layout).
fn span(layout: &Layout) -> usize {
    if layout.shape().elem_count() == 0 {
        return 0;
    }
    layout
        .dims()
        .iter()
        .zip(layout.stride())
        .map(|(d, s)| d.saturating_sub(1).saturating_mul(*s))
        .fold(1usize, usize::saturating_add)
}

/// The part of `buf` a layout addresses, starting at its offset, after checking that every
/// element the layout reaches lies inside the buffer (a kernel never reads out of bounds
/// because of a bad layout).
pub(crate) fn checked_view<'a, T: DeviceRepr>(
    name: &str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
) -> Result<DeviceView<'a, T>, BackendError> {
    let start = layout.start_offset();
    let end = start.saturating_add(span(layout));
    if end > buf.len() || start > buf.len() {
        return Err(invalid(
            name,
            format_args!("layout reaches element {end} of a buffer of {}", buf.len()),
        ));
    }
    Ok(buf.slice(start..)?)
}

/// The contiguous elements `layout` covers (its offsets `o1..o2`), or an error naming `op`
/// when the layout is not contiguous (candle's `RequiresContiguous`).
pub(crate) fn contiguous_view<'a, T: DeviceRepr>(
    op: &'static str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
) -> candle_core::Result<DeviceView<'a, T>> {
    match layout.contiguous_offsets() {
        Some((o1, o2)) if o2 <= buf.len() => buf.slice(o1..o2).w(),
        Some((_, o2)) => Err(invalid(
            op,
            format_args!("layout reaches element {o2} of a buffer of {}", buf.len()),
        ))
        .w(),
        None => Err(candle_core::Error::RequiresContiguous { op }.bt()),
    }
}

/// The kernel arguments of an elementwise launch that surround the input pointer.
struct Extra<'a, T> {
    /// Scalars between `info` and the input pointer (`upowf`, `uelu`).
    before: &'a [T],
    /// Scalars after the output pointer (`affine`).
    after: &'a [T],
}

impl<T> Extra<'_, T> {
    /// No scalars.
    fn none() -> Self {
        Extra {
            before: &[],
            after: &[],
        }
    }
}

/// Runs a `(numel, num_dims, info, [before...], inp, out, [after...])` kernel with input type
/// `T` and output type `O` into a new buffer.
fn launch_elementwise<T: DeviceRepr, O: DeviceRepr>(
    dev: &RocmDevice,
    module: Module,
    name: &str,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    extra: Extra<'_, T>,
) -> Result<DeviceBuffer<O>, BackendError> {
    let el = layout.shape().elem_count();
    let out = dev.alloc::<O>(el)?;
    if el > 0 {
        // `out` is a fresh buffer of `el` elements that nothing else references.
        launch_elementwise_into(dev, module, name, src, layout, &out.as_arg(), extra)?;
    }
    Ok(out)
}

/// Launches an elementwise kernel over a non-empty layout, writing `numel` elements of the
/// kernel's output type at `out`.
///
/// The caller guarantees `out` addresses `numel` writable elements of that type, ordered on
/// the device's stream and not aliased by `src`.
fn launch_elementwise_into<T: DeviceRepr>(
    dev: &RocmDevice,
    module: Module,
    name: &str,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    out: &DevicePtrArg,
    extra: Extra<'_, T>,
) -> Result<(), BackendError> {
    let input = checked_view(name, src, layout)?;
    let f = dev.function(module, name)?;
    let info = dev.layout_info(&[layout])?;
    let (numel, ndims) = (layout.shape().elem_count(), layout.dims().len());
    let (pinfo, pin) = (RocmDevice::ptr_arg(info.as_ref()), DevicePtrArg::of(&input));
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&numel).arg(&ndims).arg(&pinfo);
    for e in extra.before {
        l.arg(e);
    }
    l.arg(&pin).arg(out);
    for e in extra.after {
        l.arg(e);
    }
    // SAFETY: candle's elementwise kernels take (size_t numel, size_t num_dims,
    // const size_t* info, [T before...], const T* inp, O* out, [T after...]) with the scalars
    // each kernel declares (the callers below pass exactly those); `info` is null or holds
    // 2 * num_dims values; the layout was checked to stay inside `input`; the caller
    // guarantees `out` holds numel elements; all buffers are ordered on the device's stream.
    unsafe { l.launch(RocmDevice::cfg(numel)?)? };
    Ok(())
}

/// `x * mul + add`.
pub struct Affine(pub f64, pub f64);

impl Map1 for Affine {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let fast = elementwise::unary(dev, UnaryOp::Affine(self.0, self.1), src, layout).w()?;
        if let Some(out) = fast {
            return Ok(out);
        }
        let name = kernel_name::<T>("affine");
        let after = [T::from_f64(self.0), T::from_f64(self.1)];
        let extra = Extra {
            before: &[],
            after: &after,
        };
        launch_elementwise(dev, Module::Affine, &name, src, layout, extra).w()
    }
}

/// A unary kernel with one scalar parameter, passed before the input: candle's `upowf`
/// (`x.powf(e)`) and `uelu` (`elu(x, alpha)`).
pub struct ScalarUnary {
    /// Kernel root: `upowf` or `uelu`.
    pub root: &'static str,
    /// The scalar (exponent or alpha).
    pub value: f64,
}

impl Map1 for ScalarUnary {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let op = UnaryOp::Scalar(self.root, self.value);
        if let Some(out) = elementwise::unary(dev, op, src, layout).w()? {
            return Ok(out);
        }
        let name = kernel_name::<T>(self.root);
        let before = [T::from_f64(self.value)];
        let extra = Extra {
            before: &before,
            after: &[],
        };
        let module = module_for(Module::Unary, T::DTYPE);
        launch_elementwise(dev, module, &name, src, layout, extra).w()
    }
}

/// A unary op of candle's `unary` module, named by `U::KERNEL` (`uexp`, `uneg`, ...).
pub struct Unary<U>(PhantomData<U>);

impl<U> Unary<U> {
    /// The op.
    pub fn new() -> Self {
        Unary(PhantomData)
    }
}

impl<U> Default for Unary<U> {
    fn default() -> Self {
        Self::new()
    }
}

impl<U: UnaryOpT> Map1 for Unary<U> {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        NamedUnary(U::KERNEL).f(src, dev, layout)
    }
}

/// A unary kernel of candle's `unary` module named by its root (`uexp`, `usigmoid`, ...).
pub struct NamedUnary(pub &'static str);

impl Map1 for NamedUnary {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        if let Some(out) = elementwise::unary(dev, UnaryOp::Named(self.0), src, layout).w()? {
            return Ok(out);
        }
        let name = kernel_name::<T>(self.0);
        let module = module_for(Module::Unary, T::DTYPE);
        launch_elementwise(dev, module, &name, src, layout, Extra::none()).w()
    }
}

/// Launches a `(numel, num_dims, dims_and_strides, lhs, rhs, out)` kernel (candle's binary
/// and comparison kernels) into a new buffer of `O`.
fn launch_binary<T: RocmDType, O: DeviceRepr>(
    dev: &RocmDevice,
    name: &str,
    (lhs, lhs_l): (&DeviceBuffer<T>, &Layout),
    (rhs, rhs_l): (&DeviceBuffer<T>, &Layout),
) -> Result<DeviceBuffer<O>, BackendError> {
    if lhs_l.dims() != rhs_l.dims() {
        return Err(invalid(
            name,
            format_args!("shapes {:?} and {:?} differ", lhs_l.dims(), rhs_l.dims()),
        ));
    }
    let el = lhs_l.shape().elem_count();
    let out = dev.alloc::<O>(el)?;
    if el == 0 {
        return Ok(out);
    }
    let (a, b) = (
        checked_view(name, lhs, lhs_l)?,
        checked_view(name, rhs, rhs_l)?,
    );
    let f = dev.function(module_for(Module::Binary, T::DTYPE), name)?;
    let info = dev.layout_info(&[lhs_l, rhs_l])?;
    let (numel, ndims) = (el, lhs_l.dims().len());
    let (pinfo, pa, pb, pout) = (
        RocmDevice::ptr_arg(info.as_ref()),
        DevicePtrArg::of(&a),
        DevicePtrArg::of(&b),
        out.as_arg(),
    );
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&numel)
        .arg(&ndims)
        .arg(&pinfo)
        .arg(&pa)
        .arg(&pb)
        .arg(&pout);
    // SAFETY: (size_t numel, size_t num_dims, const size_t* dims_and_strides, const T* lhs,
    // const T* rhs, O* out); the info holds 3 * num_dims values or is null; both layouts were
    // checked against their buffers; `out` is a fresh buffer of numel elements.
    unsafe { l.launch(RocmDevice::cfg(el)?)? };
    Ok(out)
}

/// A binary op of candle's `binary` module, named by `B::KERNEL` (`badd`, `bmul`, ...). The
/// layouts must have the same dims (Candle broadcasts by giving an operand stride 0).
pub struct Binary<B>(PhantomData<B>);

impl<B> Binary<B> {
    /// The op.
    pub fn new() -> Self {
        Binary(PhantomData)
    }
}

impl<B> Default for Binary<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: BinaryOpT> Map2 for Binary<B> {
    const OP: &'static str = "binary";

    fn f<T: RocmDType>(
        &self,
        lhs: (&DeviceBuffer<T>, &Layout),
        rhs: (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        if let Some(out) = elementwise::binary(dev, B::KERNEL, lhs, rhs).w()? {
            return Ok(out);
        }
        launch_binary(dev, &kernel_name::<T>(B::KERNEL), lhs, rhs).w()
    }
}

/// A comparison; the result is `u8` (1 or 0).
pub struct Cmp(pub CmpOp);

impl Map2Any for Cmp {
    const OP: &'static str = "cmp";

    fn f<T: RocmDType>(
        &self,
        lhs: (&DeviceBuffer<T>, &Layout),
        rhs: (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<S> {
        let root = match self.0 {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        };
        let out = launch_binary::<T, u8>(dev, &kernel_name::<T>(root), lhs, rhs).w()?;
        Ok(S::U8(out))
    }
}

/// `cond ? on_true : on_false` elementwise: first our vectorised `elementwise` kernels
/// ([`elementwise::where_cond`]: shape by value, no upload), else our `where` module (every
/// condition dtype Candle's CPU backend takes: u8, u32, i16, i32, i64; any rank and size).
pub struct WhereCond<'a, C: RocmDType>(pub &'a DeviceBuffer<C>, pub &'a Layout);

impl<C: RocmDType> Map2 for WhereCond<'_, C> {
    const OP: &'static str = "where_cond";

    fn f<T: RocmDType>(
        &self,
        (t, t_l): (&DeviceBuffer<T>, &Layout),
        (f, f_l): (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let (cond, cond_l) = (self.0, self.1);
            if let Some(out) = elementwise::where_cond(dev, (cond, cond_l), (t, t_l), (f, f_l))? {
                return Ok(out);
            }
            let name = format!("where_{}_{}", C::DTYPE.as_str(), bits_suffix::<T>());
            if cond_l.dims() != t_l.dims() || cond_l.dims() != f_l.dims() {
                return Err(invalid(
                    &name,
                    format_args!(
                        "shapes {:?}, {:?} and {:?} differ",
                        cond_l.dims(),
                        t_l.dims(),
                        f_l.dims()
                    ),
                ));
            }
            let el = cond_l.shape().elem_count();
            let out = dev.alloc::<T>(el)?;
            if el == 0 {
                return Ok(out);
            }
            let c = checked_view(&name, cond, cond_l)?;
            let (a, b) = (checked_view(&name, t, t_l)?, checked_view(&name, f, f_l)?);
            let func = dev.function(Module::Where, &name)?;
            let info = [cond_l.dims(), cond_l.stride(), t_l.stride(), f_l.stride()].concat();
            let info = dev.upload_info(info)?;
            let ndims = cond_l.dims().len();
            let (pinfo, pc, pa, pb, pout) = (
                info.as_arg(),
                DevicePtrArg::of(&c),
                DevicePtrArg::of(&a),
                DevicePtrArg::of(&b),
                out.as_arg(),
            );
            let mut l = dev.stream().launch_builder(&func);
            l.arg(&el)
                .arg(&ndims)
                .arg(&pinfo)
                .arg(&pc)
                .arg(&pa)
                .arg(&pb)
                .arg(&pout);
            // SAFETY: where_<C>_<T>(size_t numel, size_t num_dims, const size_t* info,
            // const C* cond, const T* t, const T* f, T* out) in kernels/hip/where.hip; info
            // holds 4 * num_dims values; the three layouts were checked against their
            // buffers; `out` is a fresh buffer of numel elements.
            unsafe { l.launch(RocmDevice::cfg(el)?)? };
            Ok(out)
        };
        run().w()
    }
}

/// `copy_strided_src`: writes the elements `src` addresses through `layout`, in row-major
/// order, to `dst[dst_offset..]`. A contiguous source is one device-to-device copy; anything
/// else runs the `ucopy` kernel.
pub fn copy_strided<T: RocmDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    dst: &mut DeviceBuffer<T>,
    dst_offset: usize,
) -> Result<(), BackendError> {
    let name = kernel_name::<T>("ucopy");
    let el = layout.shape().elem_count();
    if el == 0 {
        return Ok(());
    }
    let end = dst_offset
        .checked_add(el)
        .filter(|&e| e <= dst.len())
        .ok_or_else(|| {
            invalid(
                &name,
                format_args!(
                    "{el} elements at offset {dst_offset} do not fit a buffer of {}",
                    dst.len()
                ),
            )
        })?;
    let mut out = dst.slice_mut(dst_offset..end)?;
    if layout.is_contiguous() {
        // `slice` refuses a range past the end of `src`.
        let input = src.slice(layout.start_offset()..layout.start_offset().saturating_add(el))?;
        dev.stream().memcpy_dtod(&input, &mut out)?;
        return Ok(());
    }
    // `out` is an exclusive view of exactly `el` elements of `dst`, which `src` (borrowed
    // shared) cannot alias.
    let module = module_for(Module::Unary, T::DTYPE);
    let pout = DevicePtrArg::of(&out);
    launch_elementwise_into(dev, module, &name, src, layout, &pout, Extra::none())?;
    Ok(())
}

/// `copy2d`: `d1` rows of `d2` elements from `src[src_o + i * src_s ..]` to
/// `dst[dst_o + i * dst_s ..]`.
#[allow(clippy::too_many_arguments)]
pub fn copy2d<T: RocmDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<T>,
    dst: &mut DeviceBuffer<T>,
    (d1, d2): (usize, usize),
    (src_s, dst_s): (usize, usize),
    (src_o, dst_o): (usize, usize),
) -> Result<(), BackendError> {
    let name = kernel_name::<T>("copy2d");
    if d1 == 0 || d2 == 0 {
        return Ok(());
    }
    // Elements past the offset the last row ends at.
    let reach = |stride: usize| (d1 - 1).checked_mul(stride).and_then(|v| v.checked_add(d2));
    let fits = |o: usize, stride: usize, len: usize| {
        reach(stride)
            .and_then(|r| r.checked_add(o))
            .is_some_and(|e| e <= len)
    };
    if !fits(src_o, src_s, src.len()) || !fits(dst_o, dst_s, dst.len()) {
        return Err(invalid(
            &name,
            format_args!(
                "{d1} rows of {d2} (strides {src_s} -> {dst_s}, offsets {src_o} -> {dst_o}) \
                 do not fit buffers of {} and {}",
                src.len(),
                dst.len()
            ),
        ));
    }
    let limit = u32::MAX as usize;
    if d1.saturating_mul(d2) > limit || src_s > limit || dst_s > limit {
        return Err(invalid(&name, "sizes exceed the kernel's 32-bit indices"));
    }
    let input = src.slice(src_o..)?;
    let out = dst.slice_mut(dst_o..)?;
    let f = dev.function(module_for(Module::Fill, T::DTYPE), &name)?;
    let (pin, pout) = (DevicePtrArg::of(&input), DevicePtrArg::of(&out));
    let (a, b, c, d) = (d1 as u32, d2 as u32, src_s as u32, dst_s as u32);
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&pin).arg(&pout).arg(&a).arg(&b).arg(&c).arg(&d);
    // SAFETY: copy2d_<T>(const T* src, T* dst, u32 d1, u32 d2, u32 src_s, u32 dst_s), one
    // thread per element of d1 * d2 (checked to fit u32); both extents were checked to lie
    // inside their buffers; `dst` is borrowed exclusively so the views do not alias.
    unsafe { l.launch(RocmDevice::cfg(d1 * d2)?)? };
    Ok(())
}

/// `const_set`: writes `value` to every element `layout` addresses in `dst`.
pub fn const_set<T: RocmDType>(
    dev: &RocmDevice,
    dst: &mut DeviceBuffer<T>,
    layout: &Layout,
    value: T,
) -> Result<(), BackendError> {
    let name = kernel_name::<T>("const_set");
    let el = layout.shape().elem_count();
    if el == 0 {
        return Ok(());
    }
    checked_view(&name, dst, layout)?;
    let out = dst.slice_mut(layout.start_offset()..)?;
    let f = dev.function(module_for(Module::Fill, T::DTYPE), &name)?;
    let info = dev.layout_info(&[layout])?;
    let ndims = layout.dims().len();
    let (pinfo, pout) = (RocmDevice::ptr_arg(info.as_ref()), DevicePtrArg::of(&out));
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&el).arg(&ndims).arg(&pinfo).arg(&value).arg(&pout);
    // SAFETY: const_set_<T>(size_t numel, size_t num_dims, const size_t* info, T value,
    // T* out); info is null (contiguous) or 2 * num_dims values; the layout was checked to
    // stay inside `dst`, which is borrowed exclusively.
    unsafe { l.launch(RocmDevice::cfg(el)?)? };
    Ok(())
}

/// `to_dtype`: our `convert` module's `cast_<src>_<dst>` (Rust `as` semantics, like the CPU
/// backend: float to integer saturates and maps NaN to 0). f8e4m3 converts to and from the
/// float types with candle-kernels' casts, and to and from the integer types through f32.
pub fn cast<Src: RocmDType, Dst: RocmDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<Src>,
    layout: &Layout,
) -> candle_core::Result<DeviceBuffer<Dst>> {
    if let Some(out) = elementwise::cast::<Src, Dst>(dev, src, layout).w()? {
        return Ok(out);
    }
    let (from, to) = (Src::DTYPE, Dst::DTYPE);
    let module = match (from, to) {
        (DType::F8E4M3, DType::F8E4M3) => Module::Cast,
        // f8e4m3 <-> f64 goes through f32 (exact one way, the same rounding the other): the
        // first f8e4m3 -> f64 parity case on the direct kernel stalled in the HIP-on-CUDA
        // harness (2026-11-22, not root-caused).
        (DType::F8E4M3, d) | (d, DType::F8E4M3) if d.is_float() && d != DType::F64 => Module::Cast,
        (DType::F8E4M3, _) | (_, DType::F8E4M3) => {
            let mid = cast::<Src, f32>(dev, src, layout)?;
            return cast::<f32, Dst>(dev, &mid, &Layout::contiguous(layout.shape()));
        }
        _ => Module::Convert,
    };
    let name = format!(
        "cast_{}_{}",
        kernel_suffix(from, "cast"),
        kernel_suffix(to, "cast")
    );
    launch_elementwise::<Src, Dst>(dev, module, &name, src, layout, Extra::none()).w()
}
