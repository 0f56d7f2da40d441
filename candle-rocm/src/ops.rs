//! Elementwise ops on candle-kernels' `affine` and `unary` modules.
//!
//! Both kernels take `(numel, num_dims, info, inp, out, ...)`, where `info` is null for a
//! contiguous input or the dims followed by the strides; the input pointer already includes
//! the layout's start offset.

use std::marker::PhantomData;

use candle_core::op::UnaryOpT;
use candle_core::{Layout, WithDType};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr, DeviceSlice};

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::utils::{kernel_name, Map1};

/// Runs `(numel, num_dims, info, inp, out, extra...)` kernels.
fn launch_elementwise<T: DeviceRepr + WithDType>(
    dev: &RocmDevice,
    module: Module,
    name: &str,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    extra: &[T],
) -> Result<DeviceBuffer<T>, BackendError> {
    let el = layout.shape().elem_count();
    let out = dev.alloc::<T>(el)?;
    if el == 0 {
        return Ok(out);
    }
    let start = layout.start_offset();
    let input = src.slice(start..)?;
    let needed = layout
        .dims()
        .iter()
        .zip(layout.stride())
        .map(|(d, s)| d.saturating_sub(1) * s)
        .sum::<usize>()
        + 1;
    if needed > input.len() {
        return Err(rocm_safe::RocmError::InvalidArgument(format!(
            "{name}: layout reaches element {} of a buffer of {}",
            start + needed,
            src.len()
        ))
        .into());
    }
    let f = dev.function(module, name)?;
    let info = dev.layout_info(&[layout])?;
    let (numel, ndims) = (el, layout.dims().len());
    let (pinfo, pin, pout) = (
        RocmDevice::ptr_arg(info.as_ref()),
        DevicePtrArg::of(&input),
        out.as_arg(),
    );
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&numel).arg(&ndims).arg(&pinfo).arg(&pin).arg(&pout);
    for e in extra {
        l.arg(e);
    }
    // SAFETY: candle's elementwise kernels take (size_t numel, size_t num_dims,
    // const size_t* info, const T* inp, T* out, T extra...); `info` is null or holds
    // 2 * num_dims values; the layout was checked to stay inside `input`, `out` holds numel
    // elements, and all buffers are ordered on the device's stream.
    unsafe { l.launch(RocmDevice::cfg(el))? };
    Ok(out)
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
