//! The conv module's own kernels (candle's `conv` kernels and our additions): im2col patches
//! for the GEMM path, col2im and the direct transposed convolutions, the pools and the
//! upsamplers, as `Map1` ops over typed buffers. Every layout and size is checked before a
//! launch.

use candle_core::{DType, Layout};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr};

use super::{conv_out, dims_n, out_el_2d};
use crate::device::RocmDevice;
use crate::dispatch::Map1;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::kernel_name;
use crate::launch::upsample::upsample_nearest;
use crate::layout::{checked_product, checked_view, invalid, shape_error, size_overflow};

/// Uploads `[dims, strides, ...]` of the layouts, the `info` argument of the conv kernels.
fn info_of(dev: &RocmDevice, layouts: &[&Layout]) -> Result<DeviceBuffer<usize>, BackendError> {
    let mut v = Vec::new();
    for l in layouts {
        v.extend_from_slice(l.dims());
        v.extend_from_slice(l.stride());
    }
    dev.upload_info(v)
}

/// Launches one of the conv module's kernels with `scalars` (all `size_t`), then `info`,
/// then the device pointers `ptrs`, one thread per element of `threads`.
///
/// The caller guarantees the argument list matches the kernel and that the kernel, run over
/// `threads` threads with `info`, stays inside the buffers behind `ptrs`.
unsafe fn launch_conv<S: DeviceRepr>(
    dev: &RocmDevice,
    name: &str,
    scalars: &[S],
    info: &DeviceBuffer<usize>,
    ptrs: &[DevicePtrArg],
    threads: usize,
) -> Result<(), BackendError> {
    let f = dev.function(Module::Conv, name)?;
    let pinfo = info.as_arg();
    let mut l = dev.stream().launch_builder(&f);
    for s in scalars {
        l.arg(s);
    }
    l.arg(&pinfo);
    for p in ptrs {
        l.arg(p);
    }
    // SAFETY: forwarded from this function's contract.
    unsafe { l.launch(RocmDevice::cfg(threads)?)? };
    Ok(())
}

/// `im2col1d`: (b, c_in, l_in) -> (b, l_out, c_in, k) patches.
pub(super) struct Im2Col1D {
    pub(super) l_k: usize,
    pub(super) l_out: usize,
    pub(super) stride: usize,
    pub(super) padding: usize,
    pub(super) dilation: usize,
}

impl Map1 for Im2Col1D {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let name = kernel_name::<T>("im2col1d");
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let dims = dims_n(&name, "the input", layout, 3)?;
            let threads = checked_product(
                &name,
                "patch count (b * l_out * c_in)",
                &[dims[0], self.l_out, dims[1]],
            )?;
            let dst_el = checked_product(&name, "column buffer length", &[threads, self.l_k])?;
            let dst = dev.alloc::<T>(dst_el)?;
            if threads == 0 || self.l_k == 0 {
                return Ok(dst);
            }
            let input = checked_view(&name, src, layout)?;
            let info = info_of(dev, &[layout])?;
            let s = [
                threads,
                self.l_out,
                self.l_k,
                self.stride,
                self.padding,
                self.dilation,
            ];
            let ptrs = [DevicePtrArg::of(&input), dst.as_arg()];
            // SAFETY: im2col1d_<T>(numel, l_out, l_k, stride, padding, dilation, info, src,
            // dst): one thread per (b, l_out, c_in), each writing l_k elements of `dst`
            // (threads * l_k allocated) and reading the input through its checked layout,
            // with l_out computed from that layout's length.
            unsafe { launch_conv(dev, &name, &s, &info, &ptrs, threads) }?;
            Ok(dst)
        };
        run()
    }
}

/// `im2col`: (b, c_in, h, w) -> (b, h_out, w_out, c_in, k_h, k_w) patches.
pub(super) struct Im2Col {
    pub(super) h_k: usize,
    pub(super) w_k: usize,
    pub(super) h_out: usize,
    pub(super) w_out: usize,
    pub(super) stride: usize,
    pub(super) padding: usize,
    pub(super) dilation: usize,
}

impl Map1 for Im2Col {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let name = kernel_name::<T>("im2col");
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let dims = dims_n(&name, "the input", layout, 4)?;
            let dst_el = checked_product(
                &name,
                "column buffer length (b * h_out * w_out * c_in * k_h * k_w)",
                &[dims[0], self.h_out, self.w_out, dims[1], self.h_k, self.w_k],
            )?;
            let dst = dev.alloc::<T>(dst_el)?;
            if dst_el == 0 {
                return Ok(dst);
            }
            let input = checked_view(&name, src, layout)?;
            let info = info_of(dev, &[layout])?;
            let s = [
                dst_el,
                self.h_out,
                self.w_out,
                self.h_k,
                self.w_k,
                self.stride,
                self.padding,
                self.dilation,
            ];
            let ptrs = [DevicePtrArg::of(&input), dst.as_arg()];
            // SAFETY: im2col_<T>(dst_numel, h_out, w_out, h_k, w_k, stride, padding,
            // dilation, info, src, dst): one thread per output element (dst_el allocated),
            // reading the input through its checked layout; h_out/w_out were computed from
            // that layout.
            unsafe { launch_conv(dev, &name, &s, &info, &ptrs, dst_el) }?;
            Ok(dst)
        };
        run()
    }
}

/// `col2im1d`: (b, l_in, c_out, k) columns -> (b, c_out, l_out), for stride-only transposed
/// convolutions.
pub(super) struct Col2Im1D {
    pub(super) stride: usize,
}

impl Map1 for Col2Im1D {
    fn f<T: RocmDType>(
        &self,
        col: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let name = kernel_name::<T>("col2im1d");
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let d = dims_n(&name, "the columns", layout, 4)?;
            let (b, l_in, c_out, k) = (d[0], d[1], d[2], d[3]);
            let col_el = checked_product(&name, "column count", &[b, l_in, c_out, k])?;
            if !layout.is_contiguous() || layout.start_offset() != 0 || col.len() < col_el {
                return Err(invalid(
                    &name,
                    "the columns must be a whole contiguous buffer",
                ));
            }
            let l_out = l_in
                .saturating_sub(1)
                .checked_mul(self.stride)
                .and_then(|v| v.checked_add(k))
                .ok_or_else(|| {
                    size_overflow(
                        &name,
                        format_args!("output length (({l_in} - 1) * {} + {k})", self.stride),
                    )
                })?;
            let dst_el = checked_product(
                &name,
                "output element count (b * c_out * l_out)",
                &[b, c_out, l_out],
            )?;
            let dst = dev.alloc::<T>(dst_el)?;
            if dst_el == 0 || l_in == 0 {
                return Ok(dst);
            }
            let f = dev.function(Module::Conv, &name)?;
            let (pcol, pdst) = (col.as_arg(), dst.as_arg());
            let mut l = dev.stream().launch_builder(&f);
            l.arg(&dst_el)
                .arg(&l_out)
                .arg(&l_in)
                .arg(&c_out)
                .arg(&k)
                .arg(&self.stride)
                .arg(&pcol)
                .arg(&pdst);
            // SAFETY: col2im1d_<T>(dst_el, l_out, l_in, c_out, k_size, stride, src, dst): one
            // thread per output element (dst_el allocated), reading the contiguous
            // (b, l_in, c_out, k) columns, which `col` holds (checked above).
            unsafe { l.launch(RocmDevice::cfg(dst_el)?)? };
            Ok(dst)
        };
        run()
    }
}

/// A direct transposed convolution kernel (`conv_transpose1d` / `conv_transpose2d`).
pub(super) struct ConvTranspose {
    /// Output sizes: `[l_out]` or `[w_out, h_out]` (candle's argument order).
    pub(super) out: Vec<usize>,
    pub(super) stride: usize,
    pub(super) padding: usize,
    pub(super) output_padding: usize,
    pub(super) dilation: usize,
    /// The output's element count.
    pub(super) dst_el: usize,
}

impl ConvTranspose {
    pub(super) fn run<T: RocmDType>(
        &self,
        (inp, inp_l): (&DeviceBuffer<T>, &Layout),
        (k, k_l): (&DeviceBuffer<T>, &Layout),
        dev: &RocmDevice,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let root = if self.out.len() == 1 {
            "conv_transpose1d"
        } else {
            "conv_transpose2d"
        };
        let name = kernel_name::<T>(root);
        let dst = dev.alloc::<T>(self.dst_el)?;
        if self.dst_el == 0 {
            return Ok(dst);
        }
        let input = checked_view(&name, inp, inp_l)?;
        let kernel = checked_view(&name, k, k_l)?;
        let info = info_of(dev, &[inp_l, k_l])?;
        let mut s = vec![inp_l.shape().elem_count()];
        s.extend_from_slice(&self.out);
        s.extend_from_slice(&[
            self.stride,
            self.padding,
            self.output_padding,
            self.dilation,
        ]);
        let ptrs = [
            DevicePtrArg::of(&input),
            DevicePtrArg::of(&kernel),
            dst.as_arg(),
        ];
        // SAFETY: conv_transpose{1,2}d_<T>(src_numel, out sizes..., stride, padding,
        // out_padding, dilation, info, src, kernel, dst): one thread per output element
        // (dst_el allocated, with the output sizes computed from the checked layouts of the
        // input and kernel, which `info` describes); the kernel skips input positions outside
        // the input.
        unsafe { launch_conv(dev, &name, &s, &info, &ptrs, self.dst_el) }?;
        Ok(dst)
    }
}

/// Max or average pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOp {
    /// `max_pool2d`.
    Max,
    /// `avg_pool2d`.
    Avg,
}

/// 2-D pooling over (b, c, h, w) with kernel `k` = (k_h, k_w) and `stride` = (s_h, s_w).
pub struct Pool2D {
    /// Kernel size (h, w).
    pub k: (usize, usize),
    /// Stride (h, w).
    pub stride: (usize, usize),
    /// Which pool.
    pub op: PoolOp,
}

impl Map1 for Pool2D {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let root = match self.op {
            PoolOp::Max => "max_pool2d",
            PoolOp::Avg => "avg_pool2d",
        };
        let name = kernel_name::<T>(root);
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            if self.op == PoolOp::Avg && !T::DTYPE.is_float() {
                // An integer average has no agreed meaning (candle's CPU backend scales by
                // an integer 1 / (k_h * k_w), i.e. 0); refuse it rather than pick one.
                return Err(BackendError::UnsupportedDtype {
                    op: "avg_pool2d",
                    dtype: T::DTYPE,
                });
            }
            let d = dims_n(root, "the input", layout, 4)?;
            let ((k_h, k_w), (s_h, s_w)) = (self.k, self.stride);
            let h_out = conv_out(root, d[2], k_h, 0, s_h, 1)?;
            let w_out = conv_out(root, d[3], k_w, 0, s_w, 1)?;
            let dst_el = out_el_2d(root, (d[0], d[1]), (h_out, w_out))?;
            let dst = dev.alloc::<T>(dst_el)?;
            if dst_el == 0 {
                return Ok(dst);
            }
            let input = checked_view(&name, src, layout)?;
            let info = info_of(dev, &[layout])?;
            let s = [layout.shape().elem_count(), k_h, k_w, s_h, s_w];
            let ptrs = [DevicePtrArg::of(&input), dst.as_arg()];
            // SAFETY: {max,avg}_pool2d_<T>(src_numel, w_k, h_k, w_stride, h_stride, info,
            // src, dst) (candle names the first spatial axis "w"; it is dims[2] here, like
            // k_h): one thread per output element (dst_el allocated); the window lies inside
            // the checked input because the output size was computed from it.
            unsafe { launch_conv(dev, &name, &s, &info, &ptrs, dst_el) }?;
            Ok(dst)
        };
        run()
    }
}

/// Nearest-neighbour upsampling of (b, c, h, w) to (b, c, out_h, out_w); 1-D inputs run as
/// (b, c, l, 1).
pub struct UpsampleNearest {
    /// Output size along `dims[2]`.
    pub out_h: usize,
    /// Output size along `dims[3]`.
    pub out_w: usize,
}

impl Map1 for UpsampleNearest {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let name = kernel_name::<T>("upsample_nearest2d");
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let d = dims_n("upsample_nearest2d", "the input", layout, 4)?;
            let dst_el = out_el_2d(&name, (d[0], d[1]), (self.out_h, self.out_w))?;
            let dst = dev.alloc::<T>(dst_el)?;
            if dst_el == 0 {
                return Ok(dst);
            }
            if d[2] == 0 || d[3] == 0 {
                return Err(shape_error(
                    &name,
                    "cannot upsample an empty input to a non-empty output",
                ));
            }
            let input = checked_view(&name, src, layout)?;
            // Contiguous inputs of the dtypes candle's kernel takes (so the dtype table does
            // not depend on the layout): our kernel, the same elements with two divisions a run
            // of four outputs.
            let candle_has = matches!(
                T::DTYPE,
                DType::F32 | DType::F64 | DType::F16 | DType::BF16 | DType::U8 | DType::U32
            );
            if candle_has && layout.is_contiguous() && crate::settings::fast_kernels() {
                let planes = d[0] * d[1];
                let output = (self.out_h, self.out_w);
                return upsample_nearest(dev, &input, planes, (d[2], d[3]), output);
            }
            let info = info_of(dev, &[layout])?;
            let f = dev.function(Module::Conv, &name)?;
            let scale_h = d[2] as f64 / self.out_h as f64;
            let scale_w = d[3] as f64 / self.out_w as f64;
            let (pinfo, pin, pout) = (info.as_arg(), DevicePtrArg::of(&input), dst.as_arg());
            let mut l = dev.stream().launch_builder(&f);
            l.arg(&self.out_h)
                .arg(&self.out_w)
                .arg(&scale_h)
                .arg(&scale_w)
                .arg(&pinfo)
                .arg(&pin)
                .arg(&pout);
            // SAFETY: upsample_nearest2d_<T>(w_out, h_out, w_scale, h_scale, info, src, dst)
            // (candle's "w" is dims[2]): one thread per output element (dst_el allocated);
            // source indices are clamped to the checked input's dims.
            unsafe { l.launch(RocmDevice::cfg(dst_el)?)? };
            Ok(dst)
        };
        run()
    }
}

/// Bilinear upsampling of (b, c, h, w) to (b, c, out_h, out_w), PyTorch's semantics.
pub struct UpsampleBilinear {
    /// Output height.
    pub out_h: usize,
    /// Output width.
    pub out_w: usize,
    /// `align_corners`.
    pub align_corners: bool,
    /// Explicit height scale factor.
    pub scale_h: Option<f64>,
    /// Explicit width scale factor.
    pub scale_w: Option<f64>,
}

impl Map1 for UpsampleBilinear {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let name = kernel_name::<T>("upsample_bilinear2d");
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let d = dims_n("upsample_bilinear2d", "the input", layout, 4)?;
            let dst_el = out_el_2d(&name, (d[0], d[1]), (self.out_h, self.out_w))?;
            let dst = dev.alloc::<T>(dst_el)?;
            if dst_el == 0 {
                return Ok(dst);
            }
            if d[2] == 0 || d[3] == 0 {
                return Err(shape_error(
                    &name,
                    "cannot upsample an empty input to a non-empty output",
                ));
            }
            let input = checked_view(&name, src, layout)?;
            let info = info_of(dev, &[layout])?;
            let f = dev.function(Module::Conv, &name)?;
            // C++ `bool` parameters are one byte, 0 or 1.
            let (align, has_h, has_w) = (
                u8::from(self.align_corners),
                u8::from(self.scale_h.is_some()),
                u8::from(self.scale_w.is_some()),
            );
            let (sh, sw) = (self.scale_h.unwrap_or(0.0), self.scale_w.unwrap_or(0.0));
            let (pinfo, pin, pout) = (info.as_arg(), DevicePtrArg::of(&input), dst.as_arg());
            let mut l = dev.stream().launch_builder(&f);
            l.arg(&self.out_w)
                .arg(&self.out_h)
                .arg(&align)
                .arg(&has_h)
                .arg(&sh)
                .arg(&has_w)
                .arg(&sw)
                .arg(&pinfo)
                .arg(&pin)
                .arg(&pout);
            // SAFETY: upsample_bilinear2d_<T>(size_t w_out, size_t h_out, bool align_corners,
            // bool has_scale_h, double scale_h, bool has_scale_w, double scale_w, info, src,
            // dst); bools are passed as one byte holding 0 or 1; one thread per output element
            // (dst_el allocated); source indices are clamped to the checked input's dims.
            unsafe { l.launch(RocmDevice::cfg(dst_el)?)? };
            Ok(dst)
        };
        run()
    }
}
