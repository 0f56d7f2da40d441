//! The convolution rows (group `conv`): the shapes of the models Candle users run, in TFLOP/s,
//! and on our MIOpen path the host time around each MIOpen call. In f16, ours also runs each
//! shape on the two forms of our GEMM path whatever `CANDLE_ROCM_CONV` picks
//! (`<op>_igemm`: the implicit GEMM on matrix units, `<op>_tiles`: im2col tiles feeding
//! rocBLAS), so one call compares them with MIOpen (the `auto` rows) and PyTorch.

use anyhow::Result;
use candle_core::{DType, Tensor};

use crate::runner::{name, Bench};

/// One convolution row: the op's name, batch, channels in and out, kernel size, spatial size
/// ((h, w) for conv2d, (1, len) for conv1d), padding and stride.
struct ConvShape {
    op: &'static str,
    n: usize,
    c_in: usize,
    c_out: usize,
    k: usize,
    hw: (usize, usize),
    pad: usize,
    stride: usize,
}

/// `ConvShape` in one line.
const fn cs(
    op: &'static str,
    n: usize,
    (c_in, c_out): (usize, usize),
    k: usize,
    hw: (usize, usize),
    pad: usize,
) -> ConvShape {
    ConvShape {
        op,
        n,
        c_in,
        c_out,
        k,
        hw,
        pad,
        stride: 1,
    }
}

/// Convolution shapes of the models Candle users run.
const CONV_SHAPES: [ConvShape; 13] = [
    // ResNet-50, stage 1: a 3x3 and a 1x1 layer at 56x56, batch 1 and 32 (and the 3x3 at 8).
    cs("conv2d_r50_3x3", 1, (64, 64), 3, (56, 56), 1),
    cs("conv2d_r50_3x3", 8, (64, 64), 3, (56, 56), 1),
    cs("conv2d_r50_3x3", 32, (64, 64), 3, (56, 56), 1),
    // Its 3x3 layers of stages 2-4 at batch 32 (fewer positions, more channels): where the
    // implicit GEMM's rule (launch/conv.rs) stops paying.
    cs("conv2d_r50_s2_3x3", 32, (128, 128), 3, (28, 28), 1),
    cs("conv2d_r50_s3_3x3", 32, (256, 256), 3, (14, 14), 1),
    cs("conv2d_r50_s4_3x3", 32, (512, 512), 3, (7, 7), 1),
    cs("conv2d_r50_1x1", 1, (256, 64), 1, (56, 56), 0),
    cs("conv2d_r50_1x1", 32, (256, 64), 1, (56, 56), 0),
    // The 1x1s of stages 2-4 that reduce a block's input (784, 196 and 49 positions).
    cs("conv2d_r50_s2_1x1", 32, (512, 128), 1, (28, 28), 0),
    cs("conv2d_r50_s3_1x1", 32, (1024, 256), 1, (14, 14), 0),
    cs("conv2d_r50_s4_1x1", 32, (2048, 512), 1, (7, 7), 0),
    // Stable Diffusion's VAE decoder: 512 channels, 3x3, at 64x64.
    cs("conv2d_vae_512", 1, (512, 512), 3, (64, 64), 1),
    // Whisper's front end (tiny): 80 mel bins to 384 channels, k = 3, over 3000 frames.
    cs("conv1d_whisper", 1, (80, 384), 3, (1, 3000), 1),
];

/// On the MIOpen path (`CANDLE_ROCM_CONV=miopen`), our host time per convolution outside the
/// MIOpen call that queues it (`<op>_host_outside_miopen`: candle-core's dispatch, our checks,
/// output and workspace allocation, stream joins) and inside it (`<op>_host_in_miopen`), over
/// calls queued back to back without synchronizing (few enough that the queue never fills).
/// Nothing is printed when the convolutions did not all run on MIOpen.
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn miopen_overhead(
    b: &Bench,
    op: &str,
    shape: &str,
    dtype: DType,
    mut f: impl FnMut() -> Result<Tensor>,
) -> Result<()> {
    use std::time::Instant;

    use candle_rocm::ops::conv::miopen::{miopen_library_time, miopen_runs};

    use crate::runner::{median, SAMPLES};
    const CALLS: usize = 32;
    let (mut outside, mut inside) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        b.dev.synchronize()?;
        let (runs, lib) = (miopen_runs(), miopen_library_time());
        let t = Instant::now();
        for _ in 0..CALLS {
            drop(f()?);
        }
        let host = t.elapsed();
        b.dev.synchronize()?;
        if miopen_runs() - runs != CALLS as u64 {
            return Ok(());
        }
        let lib = miopen_library_time().saturating_sub(lib);
        outside.push(host.saturating_sub(lib).as_secs_f64() / CALLS as f64);
        inside.push(lib.as_secs_f64() / CALLS as f64);
    }
    let outside_op = format!("{op}_host_outside_miopen");
    let inside_op = format!("{op}_host_in_miopen");
    b.print(
        ["conv", &outside_op, shape, name(dtype)],
        median(outside),
        1.0,
        "calls",
    );
    b.print(
        ["conv", &inside_op, shape, name(dtype)],
        median(inside),
        1.0,
        "calls",
    );
    Ok(())
}

/// Convolutions (f32, f16) in TFLOP/s: the path ours takes is `CANDLE_ROCM_CONV`'s (bench.sh
/// runs these rows a second time with `miopen`).
pub(crate) fn conv(b: &Bench) -> Result<()> {
    let dev = &b.dev;
    for dtype in [DType::F32, DType::F16] {
        for ConvShape {
            op,
            n,
            c_in,
            c_out,
            k,
            hw: (h, w),
            pad,
            stride,
        } in CONV_SHAPES
        {
            if !b.wanted("conv", op) {
                continue;
            }
            let is_1d = op.starts_with("conv1d");
            let (x, kernel) = if is_1d {
                (
                    Tensor::randn(0f32, 1.0, (n, c_in, w), dev)?.to_dtype(dtype)?,
                    Tensor::randn(0f32, 0.05, (c_out, c_in, k), dev)?.to_dtype(dtype)?,
                )
            } else {
                (
                    Tensor::randn(0f32, 1.0, (n, c_in, h, w), dev)?.to_dtype(dtype)?,
                    Tensor::randn(0f32, 0.05, (c_out, c_in, k, k), dev)?.to_dtype(dtype)?,
                )
            };
            let s = if is_1d {
                b.time(|| Ok(x.conv1d(&kernel, pad, stride, 1, 1)?))?
            } else {
                b.time(|| Ok(x.conv2d(&kernel, pad, stride, 1, 1)?))?
            };
            let out = |len: usize, kk: usize| (len + 2 * pad - kk) / stride + 1;
            let (oh, ow) = if is_1d {
                (1, out(w, k))
            } else {
                (out(h, k), out(w, k))
            };
            let taps = if is_1d { k } else { k * k };
            let flops = 2.0 * (n * c_out * oh * ow * c_in * taps) as f64;
            let shape = format!("{n}x{c_in}x{h}x{w}>{c_out}k{k}");
            b.print(["conv", op, &shape, name(dtype)], s, flops, "flops");
            #[cfg(all(feature = "rocm", not(feature = "cuda")))]
            if dtype == DType::F16 {
                gemm_path_forms(b, op, &shape, (&x, &kernel), (pad, stride, is_1d), flops)?;
            }
            #[cfg(all(feature = "rocm", not(feature = "cuda")))]
            miopen_overhead(b, op, &shape, dtype, || {
                Ok(if is_1d {
                    x.conv1d(&kernel, pad, stride, 1, 1)?
                } else {
                    x.conv2d(&kernel, pad, stride, 1, 1)?
                })
            })?;
        }
    }
    Ok(())
}

/// The f16 convolution of `x` by `kernel` (padding, stride, conv1d or not) on each form of our
/// GEMM path, called through the launcher whatever `CANDLE_ROCM_CONV` says: `<op>_igemm` (the
/// implicit GEMM, printed only where it ran: a device whose kernels have it) and `<op>_tiles`
/// (im2col tiles of `CANDLE_ROCM_CONV_TILE_MIB` feeding rocBLAS, a batch of one GEMM an image;
/// `<op>_direct` for a pointwise shape: its one GEMM from the input) and `<op>_stacked` (the
/// same tiles with their images stacked into one GEMM, printed where a tile holds several
/// images).
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn gemm_path_forms(
    b: &Bench,
    op: &str,
    shape: &str,
    (x, kernel): (&Tensor, &Tensor),
    (pad, stride, is_1d): (usize, usize, bool),
    flops: f64,
) -> Result<()> {
    use anyhow::Context;
    use candle_core::backend::BackendStorage;
    use candle_core::{Layout, Storage};
    use candle_rocm::launch::conv::{conv_gemm, ConvGeometry, ConvPlan, Forms, Stacking};
    use candle_rocm::RocmStorage;

    let (xs, xl) = x.storage_and_layout();
    let (ks, kl) = kernel.storage_and_layout();
    let (Storage::Ext(xs), Storage::Ext(ks)) = (&*xs, &*ks) else {
        return Ok(());
    };
    let (Some(xs), Some(ks)) = (
        xs.as_any().downcast_ref::<RocmStorage>(),
        ks.as_any().downcast_ref::<RocmStorage>(),
    ) else {
        return Ok(());
    };
    let (d, kd) = (xl.dims(), kl.dims());
    let (xl4, (h, w), (kh, kw), p, st) = if is_1d {
        let s = xl.stride();
        let l4 = Layout::new(
            (d[0], d[1], 1, d[2]).into(),
            vec![s[0], s[1], 0, s[2]],
            xl.start_offset(),
        );
        (l4, (1, d[2]), (1, kd[2]), (0, pad), (1, stride))
    } else {
        (
            xl.clone(),
            (d[2], d[3]),
            (kd[2], kd[3]),
            (pad, pad),
            (stride, stride),
        )
    };
    let out = |n: usize, k: usize, p: usize, s: usize| (n + 2 * p - k) / s + 1;
    let g = ConvGeometry {
        batch: d[0],
        c_in: d[1],
        h_in: h,
        w_in: w,
        c_out: kd[0],
        k_h: kh,
        k_w: kw,
        h_out: out(h, kh, p.0, st.0),
        w_out: out(w, kw, p.1, st.1),
        padding: p,
        stride: st,
        dilation: (1, 1),
    };
    let dev = xs.device();
    let (xb, kb) = (xs.as_buffer::<half::f16>()?, ks.as_buffer::<half::f16>()?);
    let budget = candle_rocm::settings::conv_tile_bytes().max(1);
    let forms = [
        ("igemm", true, Stacking::Rule),
        ("tiles", false, Stacking::Never),
        ("stacked", false, Stacking::Always),
    ];
    for (form, implicit, stacking) in forms {
        let mut plan = None;
        let secs = b.time(|| {
            let (o, p) = conv_gemm(
                dev,
                &g,
                (xb, &xl4),
                (kb, kl.start_offset()),
                budget,
                Forms { implicit, stacking },
            )?
            .context("the GEMM path has no plan for this shape")?;
            plan = Some(p);
            Ok(o)
        })?;
        let ran = match plan {
            Some(ConvPlan::Implicit) => form == "igemm",
            Some(ConvPlan::Tiled { .. } | ConvPlan::Direct { .. }) => form == "tiles",
            Some(ConvPlan::Stacked { .. }) => form == "stacked",
            None => false,
        };
        let form = match plan {
            Some(ConvPlan::Direct { .. }) => "direct",
            _ => form,
        };
        if ran {
            b.print(
                ["conv", &format!("{op}_{form}"), shape, "f16"],
                secs,
                flops,
                "flops",
            );
        }
    }
    Ok(())
}
