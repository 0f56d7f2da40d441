//! Elementwise ops on candle-kernels' `affine`, `unary` and `binary` modules.
//!
//! Both kernels take `(numel, num_dims, info, inp, out, ...)`, where `info` is null for a
//! contiguous input or the dims followed by the strides; the input pointer already includes
//! the layout's start offset.

use std::marker::PhantomData;

use candle_core::op::{BinaryOpT, UnaryOpT};
use candle_core::{Layout, WithDType};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr};

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::utils::{kernel_name, Map1, Map2};

/// The part of `buf` a non-empty layout addresses, starting at its offset, after checking that
/// every element the layout reaches lies inside the buffer (a kernel never reads out of
/// bounds because of a bad layout).
fn checked_view<'a, T: DeviceRepr>(
    name: &str,
    buf: &'a DeviceBuffer<T>,
    layout: &Layout,
) -> Result<rocm_safe::DeviceView<'a, T>, BackendError> {
    let start = layout.start_offset();
    let needed = layout
        .dims()
        .iter()
        .zip(layout.stride())
        .map(|(d, s)| d.saturating_sub(1).saturating_mul(*s))
        .fold(1usize, usize::saturating_add);
    if start.saturating_add(needed) > buf.len() {
        return Err(rocm_safe::RocmError::InvalidArgument(format!(
            "{name}: layout reaches element {} of a buffer of {}",
            start.saturating_add(needed),
            buf.len()
        ))
        .into());
    }
    Ok(buf.slice(start..)?)
}

/// Runs `(numel, num_dims, info, inp, out, extra...)` kernels with input type `T` and output
/// type `O`.
fn launch_elementwise<T: DeviceRepr, O: DeviceRepr>(
    dev: &RocmDevice,
    module: Module,
    name: &str,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    extra: &[T],
) -> Result<DeviceBuffer<O>, BackendError> {
    let el = layout.shape().elem_count();
    let out = dev.alloc::<O>(el)?;
    if el > 0 {
        launch_elementwise_into(dev, module, name, src, layout, &out.as_arg(), extra)?;
    }
    Ok(out)
}

/// Launches a `(numel, num_dims, info, inp, out, extra...)` kernel over a non-empty layout,
/// writing `numel` elements of type `O` at `out`.
///
/// The caller guarantees `out` addresses `numel` writable elements of type `O`, ordered on the
/// device's stream and not aliased by `src`.
fn launch_elementwise_into<T: DeviceRepr>(
    dev: &RocmDevice,
    module: Module,
    name: &str,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    out: &DevicePtrArg,
    extra: &[T],
) -> Result<(), BackendError> {
    let input = checked_view(name, src, layout)?;
    let f = dev.function(module, name)?;
    let info = dev.layout_info(&[layout])?;
    let (numel, ndims) = (layout.shape().elem_count(), layout.dims().len());
    let (pinfo, pin) = (RocmDevice::ptr_arg(info.as_ref()), DevicePtrArg::of(&input));
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&numel).arg(&ndims).arg(&pinfo).arg(&pin).arg(out);
    for e in extra {
        l.arg(e);
    }
    // SAFETY: candle's elementwise kernels take (size_t numel, size_t num_dims,
    // const size_t* info, const T* inp, O* out, T extra...); `info` is null or holds
    // 2 * num_dims values; the layout was checked to stay inside `input`; the caller
    // guarantees `out` holds numel elements; all buffers are ordered on the device's stream.
    unsafe { l.launch(RocmDevice::cfg(numel))? };
    Ok(())
}

/// `x * mul + add`.
pub struct Affine(pub f64, pub f64);

impl Map1 for Affine {
    fn f<T: DeviceRepr + WithDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let name = kernel_name::<T>("affine");
        let extra = [T::from_f64(self.0), T::from_f64(self.1)];
        launch_elementwise(dev, Module::Affine, &name, src, layout, &extra).w()
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
    fn f<T: DeviceRepr + WithDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let name = kernel_name::<T>(U::KERNEL);
        launch_elementwise(dev, Module::Unary, &name, src, layout, &[]).w()
    }
}

/// A binary op of candle's `binary` module, named by `B::KERNEL` (`badd`, `bmul`, ...). The
/// kernel takes `(numel, num_dims, dims_and_strides, lhs, rhs, out)`, where
/// `dims_and_strides` is null when both operands are contiguous, else the dims, the lhs
/// strides and the rhs strides.
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
    fn f<T: DeviceRepr + WithDType>(
        &self,
        (lhs, lhs_l): (&DeviceBuffer<T>, &Layout),
        (rhs, rhs_l): (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let name = kernel_name::<T>(B::KERNEL);
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            if lhs_l.dims() != rhs_l.dims() {
                return Err(rocm_safe::RocmError::InvalidArgument(format!(
                    "{name}: shapes {:?} and {:?} differ",
                    lhs_l.dims(),
                    rhs_l.dims()
                ))
                .into());
            }
            let el = lhs_l.shape().elem_count();
            let out = dev.alloc::<T>(el)?;
            if el == 0 {
                return Ok(out);
            }
            let (a, b) = (
                checked_view(&name, lhs, lhs_l)?,
                checked_view(&name, rhs, rhs_l)?,
            );
            let f = dev.function(Module::Binary, &name)?;
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
            // SAFETY: (size_t numel, size_t num_dims, const size_t* dims_and_strides,
            // const T* lhs, const T* rhs, T* out); the info holds 3 * num_dims values or is
            // null; both layouts were checked against their buffers; `out` holds numel.
            unsafe { l.launch(RocmDevice::cfg(el))? };
            Ok(out)
        };
        run().w()
    }
}

/// `copy_strided_src`: writes the elements `src` addresses through `layout`, in row-major
/// order, to `dst[dst_offset..]`. A contiguous source is one device-to-device copy; anything
/// else runs candle's `ucopy` kernel.
pub fn copy_strided<T: DeviceRepr + WithDType>(
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
            rocm_safe::RocmError::InvalidArgument(format!(
                "{name}: {el} elements at offset {dst_offset} do not fit a buffer of {}",
                dst.len()
            ))
        })?;
    let mut out = dst.slice_mut(dst_offset..end)?;
    if layout.is_contiguous() {
        // `slice` refuses a range past the end of `src`.
        let input = src.slice(layout.start_offset()..layout.start_offset() + el)?;
        dev.stream().memcpy_dtod(&input, &mut out)?;
        return Ok(());
    }
    // `out` is an exclusive view of exactly `el` elements of `dst`, which `src` (borrowed
    // shared) cannot alias.
    launch_elementwise_into(
        dev,
        Module::Unary,
        &name,
        src,
        layout,
        &DevicePtrArg::of(&out),
        &[],
    )?;
    Ok(())
}

/// `to_dtype`: candle-kernels' `cast_<src>_<dst>` for every pair it has; a pair it lacks is a
/// [`crate::registry::KernelError::MissingKernel`].
pub fn cast<S: DeviceRepr + WithDType, D: DeviceRepr + WithDType>(
    dev: &RocmDevice,
    src: &DeviceBuffer<S>,
    layout: &Layout,
) -> candle_core::Result<DeviceBuffer<D>> {
    let name = format!("cast_{}_{}", S::DTYPE.as_str(), D::DTYPE.as_str());
    launch_elementwise::<S, D>(dev, Module::Cast, &name, src, layout, &[]).w()
}
