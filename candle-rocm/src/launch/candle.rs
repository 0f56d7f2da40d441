//! Launchers of candle's elementwise kernels (candle-kernels' `unary`, `binary`, `affine`,
//! ... and our modules of the same shape): `(numel, num_dims, info, [scalars], inp, out,
//! [scalars])`, where `info` is null for contiguous operands or the dims followed by each
//! operand's strides, and input pointers already include the layout's start offset. Every
//! layout is checked against its buffer before a launch.

use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::{kernel_name, module_for};
use crate::layout::{checked_view, invalid, kernel_limit, out_of_bounds, shape_error};

/// The kernel arguments of an elementwise launch that surround the input pointer.
pub(crate) struct Extra<'a, T> {
    /// Scalars between `info` and the input pointer (`upowf`, `uelu`).
    pub(crate) before: &'a [T],
    /// Scalars after the output pointer (`affine`).
    pub(crate) after: &'a [T],
}

impl<T> Extra<'_, T> {
    /// No scalars.
    pub(crate) fn none() -> Self {
        Extra {
            before: &[],
            after: &[],
        }
    }
}

/// Runs a `(numel, num_dims, info, [before...], inp, out, [after...])` kernel with input type
/// `T` and output type `O` into a new buffer.
pub(crate) fn launch_elementwise<T: DeviceRepr, O: DeviceRepr>(
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
        // SAFETY: `out` is a fresh buffer of `el` elements that nothing else references,
        // ordered on the device's stream.
        unsafe { launch_elementwise_into(dev, module, name, src, layout, &out.as_arg(), extra)? };
    }
    Ok(out)
}

/// Launches an elementwise kernel over a non-empty layout, writing `numel` elements of the
/// kernel's output type at `out`.
///
/// # Safety
///
/// `out` must address `numel` writable elements of the kernel's output type, ordered on the
/// device's stream and not aliased by `src`.
pub(crate) unsafe fn launch_elementwise_into<T: DeviceRepr>(
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

/// Launches a `(numel, num_dims, dims_and_strides, lhs, rhs, out)` kernel (candle's binary
/// and comparison kernels) into a new buffer of `O`.
pub(crate) fn launch_binary<T: RocmDType, O: DeviceRepr>(
    dev: &RocmDevice,
    name: &str,
    (lhs, lhs_l): (&DeviceBuffer<T>, &Layout),
    (rhs, rhs_l): (&DeviceBuffer<T>, &Layout),
) -> Result<DeviceBuffer<O>, BackendError> {
    if lhs_l.dims() != rhs_l.dims() {
        return Err(shape_error(
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
        .ok_or_else(|| out_of_bounds(&name, "copy", dst_offset.saturating_add(el), dst.len()))?;
    let mut out = dst.slice_mut(dst_offset..end)?;
    if layout.is_contiguous() {
        // `slice` refuses a range past the end of `src`.
        let input = src.slice(layout.start_offset()..layout.start_offset().saturating_add(el))?;
        dev.stream().memcpy_dtod(&input, &mut out)?;
        return Ok(());
    }
    let module = module_for(Module::Unary, T::DTYPE);
    let pout = DevicePtrArg::of(&out);
    // SAFETY: `out` is an exclusive view of exactly `el` elements of `dst`, which `src`
    // (borrowed shared) cannot alias; both are ordered on the device's stream.
    unsafe { launch_elementwise_into(dev, module, &name, src, layout, &pout, Extra::none())? };
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
        return Err(kernel_limit(&name, "a copy past 32-bit element indices"));
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
