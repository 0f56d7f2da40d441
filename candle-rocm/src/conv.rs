//! Convolutions, pooling and upsampling: im2col + rocBLAS for `conv1d`/`conv2d` (or MIOpen
//! when `CANDLE_ROCM_CONV=miopen`, see [`crate::miopen`]), col2im +
//! rocBLAS or a direct kernel for `conv_transpose1d`, direct kernels for
//! `conv_transpose2d`, the pools and the upsamplers (candle's `conv` module).
//!
//! candle-core 0.11 keeps the fields of its `Params*` structs crate-private, so an
//! out-of-tree backend reads them from their `Debug` form ([`ConvParams::from_debug`]); every
//! value is then checked against the operands' layouts, so wrong parameters are an error,
//! never an out-of-bounds access.

use candle_core::backend::BackendStorage;
use candle_core::{Layout, Shape};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr};

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::ops::{checked_view, invalid};
use crate::storage::{RocmDType, RocmStorage};
use crate::utils::{checked_product, kernel_name, size_overflow, Map1};

/// The numeric parameters of a convolution, by name, as candle-core's `Params*` structs
/// hold them (`b_size`, `c_in`, `c_out`, `k_size` / `k_h`, `k_w`, `padding`, `stride`,
/// `dilation`, `output_padding`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvParams {
    fields: Vec<(String, usize)>,
}

impl ConvParams {
    /// Reads `name: <integer>` pairs from a derived `Debug` rendering such as
    /// `ParamsConv1D { b_size: 2, l_in: 5, ..., cudnn_fwd_algo: None }`. Non-integer fields
    /// are skipped.
    pub fn from_debug(debug: &str) -> ConvParams {
        let body = debug
            .split_once('{')
            .map_or("", |(_, rest)| rest.trim_end_matches('}'));
        let fields = body
            .split(',')
            .filter_map(|kv| {
                let (k, v) = kv.split_once(':')?;
                Some((k.trim().to_string(), v.trim().parse().ok()?))
            })
            .collect();
        ConvParams { fields }
    }

    /// Builds parameters from name/value pairs (for callers that have them directly).
    pub fn from_pairs(pairs: &[(&str, usize)]) -> ConvParams {
        ConvParams {
            fields: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    /// The value of field `name`.
    pub fn get(&self, op: &str, name: &str) -> Result<usize, BackendError> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                invalid(
                    op,
                    format_args!(
                        "parameter {name} is missing from {:?}; this candle-core version's \
                         parameter structs are not the ones candle-rocm was written for",
                        self.fields
                    ),
                )
            })
    }
}

/// The dims of `l`, or an error when it does not have `rank` of them.
fn dims_n<'a>(
    op: &str,
    what: &str,
    l: &'a Layout,
    rank: usize,
) -> Result<&'a [usize], BackendError> {
    if l.dims().len() == rank {
        Ok(l.dims())
    } else {
        Err(invalid(
            op,
            format_args!("{what} must have {rank} dims, got shape {:?}", l.dims()),
        ))
    }
}

/// Checks that a parameter agrees with the operand it describes.
fn agree(op: &str, name: &str, param: usize, actual: usize) -> Result<(), BackendError> {
    if param == actual {
        Ok(())
    } else {
        Err(invalid(
            op,
            format_args!("parameter {name} = {param} but the operands give {actual}"),
        ))
    }
}

/// Output length of a convolution along one axis:
/// `(len + 2 * padding - dilation * (k - 1) - 1) / stride + 1`, or an error when the kernel
/// does not fit or a factor is zero.
fn conv_out(
    op: &str,
    len: usize,
    k: usize,
    padding: usize,
    stride: usize,
    dilation: usize,
) -> Result<usize, BackendError> {
    if k == 0 || stride == 0 || dilation == 0 {
        return Err(invalid(
            op,
            "kernel size, stride and dilation must be positive",
        ));
    }
    let padded = padding
        .checked_mul(2)
        .and_then(|p| p.checked_add(len))
        .ok_or_else(|| {
            size_overflow(
                op,
                format_args!("padded input length ({len} + 2 * {padding})"),
            )
        })?;
    let reach = dilation
        .checked_mul(k - 1)
        .and_then(|r| r.checked_add(1))
        .ok_or_else(|| {
            size_overflow(
                op,
                format_args!("kernel reach ({dilation} * ({k} - 1) + 1)"),
            )
        })?;
    match (padded, reach) {
        (p, r) if p >= r => Ok((p - r) / stride + 1),
        _ => Err(invalid(
            op,
            format_args!(
                "a kernel of {k} (dilation {dilation}) does not fit an input of {len} padded by {padding}"
            ),
        )),
    }
}

/// Output length of a transposed convolution along one axis:
/// `(len - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1`.
fn conv_tr_out(
    op: &str,
    len: usize,
    k: usize,
    padding: usize,
    out_padding: usize,
    stride: usize,
    dilation: usize,
) -> Result<usize, BackendError> {
    if len == 0 || k == 0 || stride == 0 || dilation == 0 {
        return Err(invalid(
            op,
            "input length, kernel size, stride and dilation must be positive",
        ));
    }
    let full = (len - 1)
        .checked_mul(stride)
        .and_then(|v| v.checked_add(dilation.checked_mul(k - 1)?))
        .and_then(|v| v.checked_add(out_padding)?.checked_add(1))
        .ok_or_else(|| {
            size_overflow(
                op,
                format_args!(
                    "output length (({len} - 1) * {stride} + {dilation} * ({k} - 1) + \
                     {out_padding} + 1)"
                ),
            )
        })?;
    padding
        .checked_mul(2)
        .and_then(|p| full.checked_sub(p))
        .ok_or_else(|| invalid(op, "the padding is larger than the output"))
}

/// Element count of the (b, c, h, w) output of a pool or an upsampler.
fn out_el_2d(
    op: &str,
    (b, c): (usize, usize),
    (h, w): (usize, usize),
) -> Result<usize, BackendError> {
    checked_product(
        op,
        "output element count (b * c * h_out * w_out)",
        &[b, c, h, w],
    )
}

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
struct Im2Col1D {
    l_k: usize,
    l_out: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
}

impl Map1 for Im2Col1D {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
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
        run().w()
    }
}

/// `im2col`: (b, c_in, h, w) -> (b, h_out, w_out, c_in, k_h, k_w) patches.
struct Im2Col {
    h_k: usize,
    w_k: usize,
    h_out: usize,
    w_out: usize,
    stride: usize,
    padding: usize,
    dilation: usize,
}

impl Map1 for Im2Col {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
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
        run().w()
    }
}

/// `col2im1d`: (b, l_in, c_out, k) columns -> (b, c_out, l_out), for stride-only transposed
/// convolutions.
struct Col2Im1D {
    stride: usize,
}

impl Map1 for Col2Im1D {
    fn f<T: RocmDType>(
        &self,
        col: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
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
        run().w()
    }
}

/// A direct transposed convolution kernel (`conv_transpose1d` / `conv_transpose2d`).
struct ConvTranspose {
    /// Output sizes: `[l_out]` or `[w_out, h_out]` (candle's argument order).
    out: Vec<usize>,
    stride: usize,
    padding: usize,
    output_padding: usize,
    dilation: usize,
    /// The output's element count.
    dst_el: usize,
}

impl ConvTranspose {
    fn run<T: RocmDType>(
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
    ) -> candle_core::Result<DeviceBuffer<T>> {
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
        run().w()
    }
}

/// Nearest-neighbour upsampling of (b, c, h, w) to (b, c, out_h, out_w); 1-D inputs run as
/// (b, c, l, 1).
pub struct UpsampleNearest {
    /// Output size along dims[2].
    pub out_h: usize,
    /// Output size along dims[3].
    pub out_w: usize,
}

impl Map1 for UpsampleNearest {
    fn f<T: RocmDType>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let name = kernel_name::<T>("upsample_nearest2d");
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let d = dims_n("upsample_nearest2d", "the input", layout, 4)?;
            let dst_el = out_el_2d(&name, (d[0], d[1]), (self.out_h, self.out_w))?;
            let dst = dev.alloc::<T>(dst_el)?;
            if dst_el == 0 {
                return Ok(dst);
            }
            if d[2] == 0 || d[3] == 0 {
                return Err(invalid(
                    &name,
                    "cannot upsample an empty input to a non-empty output",
                ));
            }
            let input = checked_view(&name, src, layout)?;
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
        run().w()
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
    ) -> candle_core::Result<DeviceBuffer<T>> {
        let name = kernel_name::<T>("upsample_bilinear2d");
        let run = || -> Result<DeviceBuffer<T>, BackendError> {
            let d = dims_n("upsample_bilinear2d", "the input", layout, 4)?;
            let dst_el = out_el_2d(&name, (d[0], d[1]), (self.out_h, self.out_w))?;
            let dst = dev.alloc::<T>(dst_el)?;
            if dst_el == 0 {
                return Ok(dst);
            }
            if d[2] == 0 || d[3] == 0 {
                return Err(invalid(
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
        run().w()
    }
}

/// Copies `storage` (laid out as `l`) into a new contiguous storage.
fn contiguous(storage: &RocmStorage, l: &Layout) -> candle_core::Result<RocmStorage> {
    // SAFETY (of alloc_uninit's contract): every element is written by copy_strided_src
    // before the storage is read.
    let mut out = storage
        .device()
        .alloc_uninit_storage(l.shape(), storage.dtype())?;
    storage.copy_strided_src(&mut out, 0, l)?;
    Ok(out)
}

/// The GEMM half of an im2col convolution: `col` holds (b * m, k) patches, the kernel is
/// (n = c_out, k); the (b * m, n) product is copied out through `res_l`, the layout that puts
/// it in (b, c_out, spatial...) order.
fn patches_times_kernel(
    op: &str,
    col: &RocmStorage,
    (b, m, n, k): (usize, usize, usize, usize),
    kernel: &RocmStorage,
    kernel_l: &Layout,
    res_l: &Layout,
) -> candle_core::Result<RocmStorage> {
    let bm = checked_product(op, "patch count (b * m)", &[b, m]).w()?;
    let col_l = Layout::contiguous((bm, k));
    let kernel_c;
    let (kernel, k_off) = if kernel_l.is_contiguous() {
        (kernel, kernel_l.start_offset())
    } else {
        // copy_strided_src writes from offset 0, so the copy's layout starts there.
        kernel_c = contiguous(kernel, kernel_l)?;
        (&kernel_c, 0)
    };
    let kernel_mm = Layout::contiguous_with_offset((n, k), k_off).transpose(0, 1)?;
    let res = col.matmul(kernel, (1, bm, n, k), &col_l, &kernel_mm)?;
    contiguous(&res, res_l)
}

impl RocmStorage {
    /// `conv1d` with parameters by name (see [`ConvParams`]): input (b, c_in, l_in), kernel
    /// (c_out, c_in, k).
    pub fn conv1d_with(
        &self,
        l: &Layout,
        kernel: &RocmStorage,
        kernel_l: &Layout,
        p: &ConvParams,
    ) -> candle_core::Result<RocmStorage> {
        const OP: &str = "conv1d";
        let get = |n: &str| p.get(OP, n).w();
        let d = dims_n(OP, "the input", l, 3).w()?;
        let kd = dims_n(OP, "the kernel", kernel_l, 3).w()?;
        let (b, c_in, l_in) = (d[0], d[1], d[2]);
        let (c_out, k_c_in, k_size) = (kd[0], kd[1], kd[2]);
        agree(OP, "b_size", get("b_size")?, b).w()?;
        agree(OP, "c_in", get("c_in")?, c_in).w()?;
        agree(OP, "c_in (kernel)", k_c_in, c_in).w()?;
        agree(OP, "c_out", get("c_out")?, c_out).w()?;
        agree(OP, "k_size", get("k_size")?, k_size).w()?;
        agree(OP, "l_in", get("l_in")?, l_in).w()?;
        let (padding, stride, dilation) = (get("padding")?, get("stride")?, get("dilation")?);
        let l_out = conv_out(OP, l_in, k_size, padding, stride, dilation).w()?;
        let cfg = rocm_safe::Conv2dConfig::conv1d(
            b, c_in, l_in, c_out, k_size, 1, padding, stride, dilation,
        );
        let problem = crate::miopen::ConvProblem::Forward(cfg);
        if let Some(out) = crate::miopen::conv(OP, self, l, kernel, kernel_l, &problem)? {
            return Ok(out);
        }
        let dev = self.device().clone();
        let col = Im2Col1D {
            l_k: k_size,
            l_out,
            stride,
            padding,
            dilation,
        }
        .map(&self.slice, &dev, l)?;
        let col = RocmStorage::new(col, dev);
        let res_l = Layout::contiguous((b, l_out, c_out)).transpose(1, 2)?;
        let patch = checked_product(OP, "patch length (k_size * c_in)", &[k_size, c_in]).w()?;
        patches_times_kernel(OP, &col, (b, l_out, c_out, patch), kernel, kernel_l, &res_l)
    }

    /// `conv2d` with parameters by name: input (b, c_in, h, w), kernel (c_out, c_in, k_h,
    /// k_w).
    pub fn conv2d_with(
        &self,
        l: &Layout,
        kernel: &RocmStorage,
        kernel_l: &Layout,
        p: &ConvParams,
    ) -> candle_core::Result<RocmStorage> {
        const OP: &str = "conv2d";
        let get = |n: &str| p.get(OP, n).w();
        let d = dims_n(OP, "the input", l, 4).w()?;
        let kd = dims_n(OP, "the kernel", kernel_l, 4).w()?;
        let (b, c_in, i_h, i_w) = (d[0], d[1], d[2], d[3]);
        let (c_out, k_c_in, k_h, k_w) = (kd[0], kd[1], kd[2], kd[3]);
        agree(OP, "b_size", get("b_size")?, b).w()?;
        agree(OP, "c_in", get("c_in")?, c_in).w()?;
        agree(OP, "c_in (kernel)", k_c_in, c_in).w()?;
        agree(OP, "c_out", get("c_out")?, c_out).w()?;
        agree(OP, "k_h", get("k_h")?, k_h).w()?;
        agree(OP, "k_w", get("k_w")?, k_w).w()?;
        agree(OP, "i_h", get("i_h")?, i_h).w()?;
        agree(OP, "i_w", get("i_w")?, i_w).w()?;
        let (padding, stride, dilation) = (get("padding")?, get("stride")?, get("dilation")?);
        let h_out = conv_out(OP, i_h, k_h, padding, stride, dilation).w()?;
        let w_out = conv_out(OP, i_w, k_w, padding, stride, dilation).w()?;
        let cfg = crate::miopen::conv2d_config(
            (b, c_in, i_h, i_w),
            (c_out, k_h, k_w),
            padding,
            stride,
            dilation,
        );
        let problem = crate::miopen::ConvProblem::Forward(cfg);
        if let Some(out) = crate::miopen::conv(OP, self, l, kernel, kernel_l, &problem)? {
            return Ok(out);
        }
        let dev = self.device().clone();
        let col = Im2Col {
            h_k: k_h,
            w_k: k_w,
            h_out,
            w_out,
            stride,
            padding,
            dilation,
        }
        .map(&self.slice, &dev, l)?;
        let col = RocmStorage::new(col, dev);
        let res_l = Layout::contiguous((b, h_out, w_out, c_out))
            .transpose(1, 2)?
            .transpose(1, 3)?;
        let m = checked_product(OP, "output pixel count (h_out * w_out)", &[h_out, w_out]).w()?;
        let patch =
            checked_product(OP, "patch length (k_h * k_w * c_in)", &[k_h, k_w, c_in]).w()?;
        patches_times_kernel(OP, &col, (b, m, c_out, patch), kernel, kernel_l, &res_l)
    }

    /// `conv_transpose1d` with parameters by name: input (b, c_in, l_in), kernel (c_in,
    /// c_out, k).
    pub fn conv_transpose1d_with(
        &self,
        l: &Layout,
        kernel: &RocmStorage,
        kernel_l: &Layout,
        p: &ConvParams,
    ) -> candle_core::Result<RocmStorage> {
        const OP: &str = "conv_transpose1d";
        let get = |n: &str| p.get(OP, n).w();
        let d = dims_n(OP, "the input", l, 3).w()?;
        let kd = dims_n(OP, "the kernel", kernel_l, 3).w()?;
        let (b, c_in, l_in) = (d[0], d[1], d[2]);
        let (k_c_in, c_out, k_size) = (kd[0], kd[1], kd[2]);
        agree(OP, "b_size", get("b_size")?, b).w()?;
        agree(OP, "c_in", get("c_in")?, c_in).w()?;
        agree(OP, "c_in (kernel)", k_c_in, c_in).w()?;
        agree(OP, "c_out", get("c_out")?, c_out).w()?;
        agree(OP, "k_size", get("k_size")?, k_size).w()?;
        agree(OP, "l_in", get("l_in")?, l_in).w()?;
        let (padding, out_padding) = (get("padding")?, get("output_padding")?);
        let (stride, dilation) = (get("stride")?, get("dilation")?);
        let l_out = conv_tr_out(OP, l_in, k_size, padding, out_padding, stride, dilation).w()?;
        let problem = crate::miopen::ConvProblem::Transpose(
            rocm_safe::ConvTranspose2dConfig::conv_transpose1d(
                b,
                c_in,
                l_in,
                c_out,
                k_size,
                1,
                padding,
                out_padding,
                stride,
                dilation,
            ),
        );
        if let Some(out) = crate::miopen::conv(OP, self, l, kernel, kernel_l, &problem)? {
            return Ok(out);
        }
        let dev = self.device().clone();
        let simple = dilation == 1 && padding == 0 && out_padding == 0;
        if simple
            && kernel_l.is_contiguous()
            && !matches!(
                self.dtype(),
                candle_core::DType::U8 | candle_core::DType::U32
            )
        {
            // (b, l_in, c_in) x (c_in, c_out * k) -> (b, l_in, c_out, k) columns, then col2im.
            let row =
                checked_product(OP, "kernel row length (k_size * c_out)", &[k_size, c_out]).w()?;
            let kernel_mm = Layout::new(
                Shape::from((b, c_in, row)),
                vec![0, row, 1],
                kernel_l.start_offset(),
            );
            let col = self.matmul(
                kernel,
                (b, l_in, row, c_in),
                &l.transpose(1, 2)?,
                &kernel_mm,
            )?;
            let col_l = Layout::contiguous((b, l_in, c_out, k_size));
            let slice = Col2Im1D { stride }.map(&col.slice, &dev, &col_l)?;
            return Ok(RocmStorage::new(slice, dev));
        }
        let conv = ConvTranspose {
            out: vec![l_out],
            stride,
            padding,
            output_padding: out_padding,
            dilation,
            dst_el: checked_product(
                OP,
                "output element count (b * c_out * l_out)",
                &[b, c_out, l_out],
            )
            .w()?,
        };
        let slice = crate::utils::same_dtype!(OP, (&self.slice, &kernel.slice), (x, k) => {
            crate::storage::RocmStorageSlice::from_buffer(conv.run((x, l), (k, kernel_l), &dev).w()?)
        });
        Ok(RocmStorage::new(slice, dev))
    }

    /// `conv_transpose2d` with parameters by name: input (b, c_in, h, w), kernel (c_in,
    /// c_out, k_h, k_w).
    pub fn conv_transpose2d_with(
        &self,
        l: &Layout,
        kernel: &RocmStorage,
        kernel_l: &Layout,
        p: &ConvParams,
    ) -> candle_core::Result<RocmStorage> {
        const OP: &str = "conv_transpose2d";
        let get = |n: &str| p.get(OP, n).w();
        let d = dims_n(OP, "the input", l, 4).w()?;
        let kd = dims_n(OP, "the kernel", kernel_l, 4).w()?;
        let (b, c_in, i_h, i_w) = (d[0], d[1], d[2], d[3]);
        let (k_c_in, c_out, k_h, k_w) = (kd[0], kd[1], kd[2], kd[3]);
        agree(OP, "b_size", get("b_size")?, b).w()?;
        agree(OP, "c_in", get("c_in")?, c_in).w()?;
        agree(OP, "c_in (kernel)", k_c_in, c_in).w()?;
        agree(OP, "c_out", get("c_out")?, c_out).w()?;
        agree(OP, "k_h", get("k_h")?, k_h).w()?;
        agree(OP, "k_w", get("k_w")?, k_w).w()?;
        agree(OP, "i_h", get("i_h")?, i_h).w()?;
        agree(OP, "i_w", get("i_w")?, i_w).w()?;
        let (padding, out_padding) = (get("padding")?, get("output_padding")?);
        let (stride, dilation) = (get("stride")?, get("dilation")?);
        let h_out = conv_tr_out(OP, i_h, k_h, padding, out_padding, stride, dilation).w()?;
        let w_out = conv_tr_out(OP, i_w, k_w, padding, out_padding, stride, dilation).w()?;
        let problem = crate::miopen::ConvProblem::Transpose(rocm_safe::ConvTranspose2dConfig {
            batch: b,
            in_channels: c_in,
            in_h: i_h,
            in_w: i_w,
            out_channels: c_out,
            kernel_h: k_h,
            kernel_w: k_w,
            groups: 1,
            padding: [padding; 2],
            output_padding: [out_padding; 2],
            stride: [stride; 2],
            dilation: [dilation; 2],
        });
        if let Some(out) = crate::miopen::conv(OP, self, l, kernel, kernel_l, &problem)? {
            return Ok(out);
        }
        let dev = self.device().clone();
        let conv = ConvTranspose {
            // candle's kernel takes (w_out, h_out) with its "w" = dims[3].
            out: vec![w_out, h_out],
            stride,
            padding,
            output_padding: out_padding,
            dilation,
            dst_el: checked_product(
                OP,
                "output element count (b * c_out * h_out * w_out)",
                &[b, c_out, h_out, w_out],
            )
            .w()?,
        };
        let slice = crate::utils::same_dtype!(OP, (&self.slice, &kernel.slice), (x, k) => {
            crate::storage::RocmStorageSlice::from_buffer(conv.run((x, l), (k, kernel_l), &dev).w()?)
        });
        Ok(RocmStorage::new(slice, dev))
    }
}

/// `dims_n`'s check for a 3-D input, exposed for `upsample_nearest1d`.
pub(crate) fn as_4d_with_unit_w(op: &str, l: &Layout) -> Result<Layout, BackendError> {
    let d = dims_n(op, "the input", l, 3)?;
    let s = l.stride();
    Ok(Layout::new(
        Shape::from((d[0], d[1], d[2], 1)),
        vec![s[0], s[1], s[2], 1],
        l.start_offset(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of candle-core 0.11's `ParamsConv1D` `Debug` output (same field names and a
    /// non-integer field), produced by the same derive.
    #[derive(Debug)]
    #[allow(dead_code)]
    struct ParamsConv1D {
        b_size: usize,
        l_in: usize,
        c_out: usize,
        c_in: usize,
        k_size: usize,
        padding: usize,
        stride: usize,
        dilation: usize,
        cudnn_fwd_algo: Option<u8>,
    }

    #[test]
    fn reads_params_from_their_debug_form() {
        let p = ParamsConv1D {
            b_size: 2,
            l_in: 17,
            c_out: 4,
            c_in: 3,
            k_size: 5,
            padding: 1,
            stride: 2,
            dilation: 3,
            cudnn_fwd_algo: Some(1),
        };
        let c = ConvParams::from_debug(&format!("{p:?}"));
        let get = |n| c.get("t", n).unwrap();
        assert_eq!(
            [get("b_size"), get("l_in"), get("c_out"), get("c_in")],
            [2, 17, 4, 3]
        );
        assert_eq!(
            [
                get("k_size"),
                get("padding"),
                get("stride"),
                get("dilation")
            ],
            [5, 1, 2, 3]
        );
        let e = c.get("conv1d", "output_padding").unwrap_err().to_string();
        assert!(e.contains("output_padding is missing"), "{e}");
        // The pretty form parses too.
        assert_eq!(ConvParams::from_debug(&format!("{p:#?}")), c);
    }

    #[test]
    fn output_sizes_are_checked() {
        assert_eq!(conv_out("t", 10, 3, 0, 1, 1).unwrap(), 8);
        assert_eq!(conv_out("t", 10, 3, 1, 2, 2).unwrap(), 4);
        assert!(conv_out("t", 2, 3, 0, 1, 1).is_err());
        assert!(conv_out("t", 10, 3, 0, 0, 1).is_err());
        assert!(matches!(
            conv_out("t", usize::MAX, 3, usize::MAX, 1, 1),
            Err(BackendError::SizeOverflow { .. })
        ));
        assert_eq!(conv_tr_out("t", 5, 3, 0, 0, 2, 1).unwrap(), 11);
        assert_eq!(conv_tr_out("t", 5, 3, 1, 1, 2, 1).unwrap(), 10);
        assert!(conv_tr_out("t", 1, 1, 3, 0, 1, 1).is_err());
        assert_eq!(conv_tr_out("t", 1, 2, 1, 0, 1, 1).unwrap(), 0);
    }

    /// Huge dims or parameters give [`BackendError::SizeOverflow`], never a wrapped size or a
    /// panic; a padding larger than the output stays an invalid argument.
    #[test]
    fn output_size_overflow_is_a_typed_error() {
        let overflow =
            |r: Result<usize, BackendError>| matches!(r, Err(BackendError::SizeOverflow { .. }));
        let big = usize::MAX / 2 + 1;
        assert!(overflow(conv_out("conv2d", 10, usize::MAX, 0, 1, 3)));
        assert!(overflow(conv_tr_out(
            "conv_transpose1d",
            big,
            3,
            0,
            0,
            4,
            1
        )));
        assert!(overflow(conv_tr_out(
            "conv_transpose1d",
            5,
            big,
            0,
            0,
            1,
            4
        )));
        assert!(overflow(conv_tr_out(
            "conv_transpose1d",
            2,
            1,
            0,
            usize::MAX,
            1,
            1
        )));
        let e = conv_tr_out("conv_transpose2d", big, 3, 0, 0, 4, 1).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("conv_transpose2d: the output length")
                && msg.contains("overflows usize")
                && msg.contains("To fix"),
            "{msg}"
        );
        let padding = conv_tr_out("t", 1, 1, 3, 0, 1, 1).unwrap_err();
        assert!(matches!(padding, BackendError::Rocm(_)), "{padding}");
        // What the ops compute from the output sizes: upsampling to a huge size, an im2col
        // buffer, a transposed convolution's output.
        assert!(overflow(out_el_2d(
            "upsample_nearest2d",
            (2, 3),
            (1 << 40, 1 << 40)
        )));
        assert!(overflow(out_el_2d("avg_pool2d", (big, 3), (2, 2))));
        assert_eq!(
            out_el_2d("upsample_bilinear2d", (2, 3), (8, 9)).unwrap(),
            432
        );
        let h_out = conv_out("conv2d", 1 << 33, 1, 0, 1, 1).unwrap();
        let im2col = checked_product("im2col", "column buffer length", &[4, h_out, h_out, 3]);
        assert!(overflow(im2col));
    }
}
