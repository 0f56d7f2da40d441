//! The convolutions (`conv1d`, `conv2d`, `conv_transpose1d`, `conv_transpose2d`) over
//! storage slices: their parameters checked against the operands, then MIOpen when
//! `CANDLE_ROCM_CONV` asks for it and it applies ([`super::miopen`]), else, for the forward
//! convolutions in f32/f64/f16/bf16, the GEMM path of [`crate::launch::conv`] (one GEMM for a
//! 1x1, in f16/bf16 the implicit GEMM on matrix units where the device has it, im2col tiles
//! bounded in memory feeding rocBLAS for the rest, the output written in place); the other dtypes and shapes past its limits take candle's whole-tensor im2col
//! times the kernel; the transposed ones col2im or candle's direct kernels.

use candle_core::{Layout, Shape};

use super::kernels::{Col2Im1D, ConvTranspose, Im2Col, Im2Col1D};
use super::{agree, conv_out, conv_tr_out, dims_n, miopen, ConvParams};
use crate::device::RocmDevice;
use crate::dispatch::{same_dtype, Map1};
use crate::dtype::RocmStorageSlice as S;
use crate::error::BackendError;
use crate::launch::conv::{conv_gemm, implicit_gemm_pays, ConvGeometry, Forms, Stacking};
use crate::layout::checked_product;
use crate::ops::copy::contiguous;
use crate::ops::matmul::matmul;

/// `s` as a packed operand: itself and its start offset when `l` is contiguous, else a
/// contiguous copy (kept in `copy`) at offset 0 (copy_strided_src writes from offset 0).
fn packed<'a>(
    dev: &RocmDevice,
    s: &'a S,
    l: &Layout,
    copy: &'a mut Option<S>,
) -> Result<(&'a S, usize), BackendError> {
    if l.is_contiguous() {
        return Ok((s, l.start_offset()));
    }
    Ok((copy.insert(contiguous(dev, s, l)?), 0))
}

/// The GEMM half of an im2col convolution: `col` holds (b * m, k) patches, the kernel is
/// (n = c_out, k); the (b * m, n) product is copied out through `res_l`, the layout that puts
/// it in (b, c_out, spatial...) order.
fn patches_times_kernel(
    op: &str,
    dev: &RocmDevice,
    col: &S,
    (b, m, n, k): (usize, usize, usize, usize),
    (kernel, kernel_l): (&S, &Layout),
    res_l: &Layout,
) -> Result<S, BackendError> {
    let bm = checked_product(op, "patch count (b * m)", &[b, m])?;
    let col_l = Layout::contiguous((bm, k));
    let mut kernel_c = None;
    let (kernel, k_off) = packed(dev, kernel, kernel_l, &mut kernel_c)?;
    let kernel_mm = Layout::contiguous_with_offset((n, k), k_off).transpose(0, 1)?;
    let res = matmul(dev, (col, &col_l), (kernel, &kernel_mm), (1, bm, n, k))?;
    contiguous(dev, &res, res_l)
}

/// The GEMM path ([`conv_gemm`]) for `g` with input `x` through the 4-D layout `x_l`: the
/// output, or `None` for a dtype it does not take (or differing dtypes, which the caller's
/// other path reports), a shape [`crate::launch::conv::plan`] refuses, or when
/// `CANDLE_ROCM_CONV_TILE_MIB=0` turns it off. Its plan is logged once
/// per shape and dtype at debug level.
fn gemm_path(
    op: &str,
    dev: &RocmDevice,
    (x, x_l): (&S, &Layout),
    (kernel, kernel_l): (&S, &Layout),
    g: &ConvGeometry,
) -> Result<Option<S>, BackendError> {
    use candle_core::DType;
    let dtype = x.dtype();
    if dtype != kernel.dtype()
        || !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    {
        return Ok(None);
    }
    let b = crate::settings::conv_tile_bytes();
    if b == 0 {
        return Ok(None);
    }
    let forms = Forms {
        implicit: crate::settings::conv_igemm() && implicit_gemm_pays(g),
        stacking: Stacking::Rule,
    };
    let mut kernel_c = None;
    let (kernel, k_off) = packed(dev, kernel, kernel_l, &mut kernel_c)?;
    let run = match (x, kernel) {
        (S::F32(x), S::F32(k)) => {
            conv_gemm(dev, g, (x, x_l), (k, k_off), b, forms)?.map(|(o, p)| (S::F32(o), p))
        }
        (S::F64(x), S::F64(k)) => {
            conv_gemm(dev, g, (x, x_l), (k, k_off), b, forms)?.map(|(o, p)| (S::F64(o), p))
        }
        (S::F16(x), S::F16(k)) => {
            conv_gemm(dev, g, (x, x_l), (k, k_off), b, forms)?.map(|(o, p)| (S::F16(o), p))
        }
        (S::BF16(x), S::BF16(k)) => {
            conv_gemm(dev, g, (x, x_l), (k, k_off), b, forms)?.map(|(o, p)| (S::BF16(o), p))
        }
        _ => None,
    };
    // Formatted only when someone listens: this runs on every convolution.
    if tracing::enabled!(tracing::Level::DEBUG) {
        let plan = run.as_ref().map(|(_, p)| *p);
        let what = format!("{op} {g:?} {dtype:?}: GEMM path plan {plan:?}");
        if miopen::first_time(&what) {
            tracing::debug!("{what}");
        }
    }
    Ok(run.map(|(out, _)| out))
}

/// `conv1d` with parameters by name (see [`ConvParams`]): input (b, c_in, l_in), kernel
/// (c_out, c_in, k).
pub fn conv1d(
    dev: &RocmDevice,
    (x, l): (&S, &Layout),
    (kernel, kernel_l): (&S, &Layout),
    p: &ConvParams,
) -> Result<S, BackendError> {
    const OP: &str = "conv1d";
    let get = |n: &str| p.get(OP, n);
    let d = dims_n(OP, "the input", l, 3)?;
    let kd = dims_n(OP, "the kernel", kernel_l, 3)?;
    let (b, c_in, l_in) = (d[0], d[1], d[2]);
    let (c_out, k_c_in, k_size) = (kd[0], kd[1], kd[2]);
    agree(OP, "b_size", get("b_size")?, b)?;
    agree(OP, "c_in", get("c_in")?, c_in)?;
    agree(OP, "c_in (kernel)", k_c_in, c_in)?;
    agree(OP, "c_out", get("c_out")?, c_out)?;
    agree(OP, "k_size", get("k_size")?, k_size)?;
    agree(OP, "l_in", get("l_in")?, l_in)?;
    let (padding, stride, dilation) = (get("padding")?, get("stride")?, get("dilation")?);
    let l_out = conv_out(OP, l_in, k_size, padding, stride, dilation)?;
    let cfg =
        rocm_safe::Conv2dConfig::conv1d(b, c_in, l_in, c_out, k_size, 1, padding, stride, dilation);
    let problem = miopen::ConvProblem::Forward(cfg);
    if let Some(out) = miopen::conv(OP, dev, (x, l), (kernel, kernel_l), &problem)? {
        return Ok(out);
    }
    let g = ConvGeometry::of_config(&cfg, (1, l_out));
    let s = l.stride();
    let l4 = Layout::new(
        Shape::from((b, c_in, 1, l_in)),
        vec![s[0], s[1], 0, s[2]],
        l.start_offset(),
    );
    if let Some(out) = gemm_path(OP, dev, (x, &l4), (kernel, kernel_l), &g)? {
        return Ok(out);
    }
    let col = Im2Col1D {
        l_k: k_size,
        l_out,
        stride,
        padding,
        dilation,
    }
    .map(x, dev, l)?;
    let res_l = Layout::contiguous((b, l_out, c_out)).transpose(1, 2)?;
    let patch = checked_product(OP, "patch length (k_size * c_in)", &[k_size, c_in])?;
    patches_times_kernel(
        OP,
        dev,
        &col,
        (b, l_out, c_out, patch),
        (kernel, kernel_l),
        &res_l,
    )
}

/// `conv2d` with parameters by name: input (b, c_in, h, w), kernel (c_out, c_in, k_h,
/// k_w).
pub fn conv2d(
    dev: &RocmDevice,
    (x, l): (&S, &Layout),
    (kernel, kernel_l): (&S, &Layout),
    p: &ConvParams,
) -> Result<S, BackendError> {
    const OP: &str = "conv2d";
    let get = |n: &str| p.get(OP, n);
    let d = dims_n(OP, "the input", l, 4)?;
    let kd = dims_n(OP, "the kernel", kernel_l, 4)?;
    let (b, c_in, i_h, i_w) = (d[0], d[1], d[2], d[3]);
    let (c_out, k_c_in, k_h, k_w) = (kd[0], kd[1], kd[2], kd[3]);
    agree(OP, "b_size", get("b_size")?, b)?;
    agree(OP, "c_in", get("c_in")?, c_in)?;
    agree(OP, "c_in (kernel)", k_c_in, c_in)?;
    agree(OP, "c_out", get("c_out")?, c_out)?;
    agree(OP, "k_h", get("k_h")?, k_h)?;
    agree(OP, "k_w", get("k_w")?, k_w)?;
    agree(OP, "i_h", get("i_h")?, i_h)?;
    agree(OP, "i_w", get("i_w")?, i_w)?;
    let (padding, stride, dilation) = (get("padding")?, get("stride")?, get("dilation")?);
    let h_out = conv_out(OP, i_h, k_h, padding, stride, dilation)?;
    let w_out = conv_out(OP, i_w, k_w, padding, stride, dilation)?;
    let cfg = miopen::conv2d_config(
        (b, c_in, i_h, i_w),
        (c_out, k_h, k_w),
        padding,
        stride,
        dilation,
    );
    let problem = miopen::ConvProblem::Forward(cfg);
    if let Some(out) = miopen::conv(OP, dev, (x, l), (kernel, kernel_l), &problem)? {
        return Ok(out);
    }
    let g = ConvGeometry::of_config(&cfg, (h_out, w_out));
    if let Some(out) = gemm_path(OP, dev, (x, l), (kernel, kernel_l), &g)? {
        return Ok(out);
    }
    let col = Im2Col {
        h_k: k_h,
        w_k: k_w,
        h_out,
        w_out,
        stride,
        padding,
        dilation,
    }
    .map(x, dev, l)?;
    let res_l = Layout::contiguous((b, h_out, w_out, c_out))
        .transpose(1, 2)?
        .transpose(1, 3)?;
    let m = checked_product(OP, "output pixel count (h_out * w_out)", &[h_out, w_out])?;
    let patch = checked_product(OP, "patch length (k_h * k_w * c_in)", &[k_h, k_w, c_in])?;
    patches_times_kernel(
        OP,
        dev,
        &col,
        (b, m, c_out, patch),
        (kernel, kernel_l),
        &res_l,
    )
}

/// `conv_transpose1d` with parameters by name: input (b, c_in, l_in), kernel (c_in,
/// c_out, k).
pub fn conv_transpose1d(
    dev: &RocmDevice,
    (x, l): (&S, &Layout),
    (kernel, kernel_l): (&S, &Layout),
    p: &ConvParams,
) -> Result<S, BackendError> {
    const OP: &str = "conv_transpose1d";
    let get = |n: &str| p.get(OP, n);
    let d = dims_n(OP, "the input", l, 3)?;
    let kd = dims_n(OP, "the kernel", kernel_l, 3)?;
    let (b, c_in, l_in) = (d[0], d[1], d[2]);
    let (k_c_in, c_out, k_size) = (kd[0], kd[1], kd[2]);
    agree(OP, "b_size", get("b_size")?, b)?;
    agree(OP, "c_in", get("c_in")?, c_in)?;
    agree(OP, "c_in (kernel)", k_c_in, c_in)?;
    agree(OP, "c_out", get("c_out")?, c_out)?;
    agree(OP, "k_size", get("k_size")?, k_size)?;
    agree(OP, "l_in", get("l_in")?, l_in)?;
    let (padding, out_padding) = (get("padding")?, get("output_padding")?);
    let (stride, dilation) = (get("stride")?, get("dilation")?);
    let l_out = conv_tr_out(OP, l_in, k_size, padding, out_padding, stride, dilation)?;
    let problem =
        miopen::ConvProblem::Transpose(rocm_safe::ConvTranspose2dConfig::conv_transpose1d(
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
        ));
    if let Some(out) = miopen::conv(OP, dev, (x, l), (kernel, kernel_l), &problem)? {
        return Ok(out);
    }
    let simple = dilation == 1 && padding == 0 && out_padding == 0;
    if simple
        && kernel_l.is_contiguous()
        && !matches!(x.dtype(), candle_core::DType::U8 | candle_core::DType::U32)
    {
        // (b, l_in, c_in) x (c_in, c_out * k) -> (b, l_in, c_out, k) columns, then col2im.
        let row = checked_product(OP, "kernel row length (k_size * c_out)", &[k_size, c_out])?;
        let kernel_mm = Layout::new(
            Shape::from((b, c_in, row)),
            vec![0, row, 1],
            kernel_l.start_offset(),
        );
        let col = matmul(
            dev,
            (x, &l.transpose(1, 2)?),
            (kernel, &kernel_mm),
            (b, l_in, row, c_in),
        )?;
        let col_l = Layout::contiguous((b, l_in, c_out, k_size));
        return Col2Im1D { stride }.map(&col, dev, &col_l);
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
        )?,
    };
    Ok(same_dtype!(OP, (x, kernel), (x, k) => {
        S::from_buffer(conv.run((x, l), (k, kernel_l), dev)?)
    }))
}

/// `conv_transpose2d` with parameters by name: input (b, c_in, h, w), kernel (c_in,
/// c_out, k_h, k_w).
pub fn conv_transpose2d(
    dev: &RocmDevice,
    (x, l): (&S, &Layout),
    (kernel, kernel_l): (&S, &Layout),
    p: &ConvParams,
) -> Result<S, BackendError> {
    const OP: &str = "conv_transpose2d";
    let get = |n: &str| p.get(OP, n);
    let d = dims_n(OP, "the input", l, 4)?;
    let kd = dims_n(OP, "the kernel", kernel_l, 4)?;
    let (b, c_in, i_h, i_w) = (d[0], d[1], d[2], d[3]);
    let (k_c_in, c_out, k_h, k_w) = (kd[0], kd[1], kd[2], kd[3]);
    agree(OP, "b_size", get("b_size")?, b)?;
    agree(OP, "c_in", get("c_in")?, c_in)?;
    agree(OP, "c_in (kernel)", k_c_in, c_in)?;
    agree(OP, "c_out", get("c_out")?, c_out)?;
    agree(OP, "k_h", get("k_h")?, k_h)?;
    agree(OP, "k_w", get("k_w")?, k_w)?;
    agree(OP, "i_h", get("i_h")?, i_h)?;
    agree(OP, "i_w", get("i_w")?, i_w)?;
    let (padding, out_padding) = (get("padding")?, get("output_padding")?);
    let (stride, dilation) = (get("stride")?, get("dilation")?);
    let h_out = conv_tr_out(OP, i_h, k_h, padding, out_padding, stride, dilation)?;
    let w_out = conv_tr_out(OP, i_w, k_w, padding, out_padding, stride, dilation)?;
    let problem = miopen::ConvProblem::Transpose(rocm_safe::ConvTranspose2dConfig {
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
    if let Some(out) = miopen::conv(OP, dev, (x, l), (kernel, kernel_l), &problem)? {
        return Ok(out);
    }
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
        )?,
    };
    Ok(same_dtype!(OP, (x, kernel), (x, k) => {
        S::from_buffer(conv.run((x, l), (k, kernel_l), dev)?)
    }))
}
