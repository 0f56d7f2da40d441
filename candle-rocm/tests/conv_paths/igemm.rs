//! Parity cases aimed at the implicit-GEMM convolution (candle-rocm/src/launch/conv_igemm.rs,
//! kernels/hip/conv_igemm.hip) in f16 and bf16: `conv_gemm` called with the implicit GEMM
//! allowed must take [`ConvPlan::Implicit`] for every shape that is not pointwise (where the
//! device's code object has the kernel: every target with matrix units and the HIP-on-CUDA
//! harness; a device without them must take the tiles), and give the exact f64 convolution
//! (`naive_conv`) rounded to the dtype.
//!
//! Tolerance, per dtype: the kernel sums in f32 and rounds once to the dtype, the reference
//! rounds the exact sum once, so the two differ by at most one unit in the last place of the
//! dtype plus the f32 sum's error (K * 2^-24 * sum |x w|, under 1e-4 here): checked as
//! `tolerance(dtype) * 2 * (1 + |want|)`, i.e. 4e-3 (f16, 2 ulp of 2^-10 at 1) and 3.2e-2 (bf16,
//! 2 ulp of 2^-7 at 1) relative to 1 + |want|.
//!
//! Shapes: ResNet-like 3x3 at batch 1 and 4, channels that are not multiples of 16 or 32 (3,
//! 5, 7, 19, 70) and multiples of 32 (the taps-outer kernels, over the permuted kernel), K shorter than the kernel's 32-wide step (3 channels x 3x3 = 27) and over
//! many steps (64 x 9), c_out over one 64-channel tile, positions over several 128-position
//! tiles with a partial last one, tiny images (1x1 and 2x2 under a padded 3x3), strides 2 and
//! 3, padding 0-3, dilation 2 and 3, rectangular kernels, a strided 1x1, conv1d (h = 1) like
//! Whisper's front end and strided/dilated; each over a contiguous input, a channel slice of
//! a wider tensor, a channels-last input and an input at an odd start offset (the kernel at an
//! odd offset too: its element-load path).

use candle_core::{CpuStorage, DType, Layout};
use candle_rocm::launch::conv::{conv_gemm, ConvGeometry, ConvPlan, Forms, Stacking};
use candle_rocm::launch::conv_igemm::has_igemm;
use candle_rocm::{RocmDType, RocmDevice};

use super::super::spatial::{naive_conv, round_to};
use super::super::{check, seed, upload};
use super::input_layouts;
use crate::common::*;

/// The dtypes the implicit GEMM takes.
const HALVES: [DType; 2] = [DType::F16, DType::BF16];

/// One case: (b, c_in, c_out), (h, w), (k_h, k_w), (pad_h, pad_w), (stride_h, stride_w),
/// (dil_h, dil_w).
type Case = (
    &'static str,
    (usize, usize, usize),
    (usize, usize),
    (usize, usize),
    (usize, usize),
    (usize, usize),
    (usize, usize),
);

const CASES: [Case; 20] = [
    (
        "3x3 pad 1 b1",
        (1, 16, 32),
        (12, 10),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "3x3 pad 1 b4",
        (4, 32, 64),
        (9, 9),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "K 576 (18 steps)",
        (2, 64, 20),
        (6, 7),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "3 channels (K 27)",
        (2, 3, 5),
        (7, 9),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "c_out 70, stride 2",
        (1, 19, 70),
        (11, 13),
        (3, 3),
        (1, 1),
        (2, 2),
        (1, 1),
    ),
    (
        "dilation 2 pad 2",
        (2, 9, 17),
        (13, 10),
        (3, 3),
        (2, 2),
        (1, 1),
        (2, 2),
    ),
    (
        "stride 3 dilation 3 pad 3",
        (1, 7, 9),
        (20, 17),
        (3, 3),
        (3, 3),
        (3, 3),
        (3, 3),
    ),
    (
        "h and w all differ",
        (2, 3, 4),
        (13, 11),
        (3, 2),
        (1, 2),
        (2, 1),
        (2, 1),
    ),
    (
        "2x5 unpadded",
        (2, 5, 6),
        (9, 12),
        (2, 5),
        (0, 0),
        (1, 1),
        (1, 1),
    ),
    (
        "1x1 stride 2",
        (3, 16, 8),
        (9, 7),
        (1, 1),
        (0, 0),
        (2, 2),
        (1, 1),
    ),
    (
        "1x1 image",
        (3, 7, 9),
        (1, 1),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "2x2 image",
        (2, 8, 16),
        (2, 2),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "390 positions",
        (3, 6, 12),
        (10, 13),
        (3, 3),
        (1, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "conv1d k3 (Whisper-like)",
        (2, 20, 24),
        (1, 300),
        (1, 3),
        (0, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "conv1d k4 s2 d3",
        (3, 5, 6),
        (1, 41),
        (1, 4),
        (0, 2),
        (1, 2),
        (1, 3),
    ),
    (
        "conv1d k3 s2",
        (1, 24, 16),
        (1, 101),
        (1, 3),
        (0, 1),
        (1, 2),
        (1, 1),
    ),
    (
        "taps outer: c_in 64, c_out 130, stride 2",
        (1, 64, 130),
        (11, 9),
        (3, 3),
        (1, 1),
        (2, 2),
        (1, 1),
    ),
    (
        "taps outer: 2x3 dilated",
        (2, 32, 17),
        (8, 9),
        (2, 3),
        (2, 1),
        (1, 1),
        (2, 2),
    ),
    (
        "taps outer: conv1d k3",
        (2, 32, 24),
        (1, 150),
        (1, 3),
        (0, 1),
        (1, 1),
        (1, 1),
    ),
    (
        "taps outer: 1x1 stride 2",
        (3, 64, 8),
        (9, 7),
        (1, 1),
        (0, 0),
        (2, 2),
        (1, 1),
    ),
];

/// The geometry of `c`.
fn geometry(c: &Case) -> ConvGeometry {
    let (_, (b, c_in, c_out), (h, w), (kh, kw), (ph, pw), (sh, sw), (dh, dw)) = *c;
    let out =
        |n: usize, k: usize, p: usize, s: usize, d: usize| (n + 2 * p - d * (k - 1) - 1) / s + 1;
    ConvGeometry {
        batch: b,
        c_in,
        h_in: h,
        w_in: w,
        c_out,
        k_h: kh,
        k_w: kw,
        h_out: out(h, kh, ph, sh, dh),
        w_out: out(w, kw, pw, sw, dw),
        padding: (ph, pw),
        stride: (sh, sw),
        dilation: (dh, dw),
    }
}

/// The exact convolution of `x` (the buffer of layout `xl`) by `w` (contiguous (c_out, c_in,
/// kh, kw)), as f64, for `g` (padding, stride and dilation per axis).
fn reference(g: &ConvGeometry, x: &[f64], xl: &Layout, w: &[f64]) -> Vec<f64> {
    let (s, off) = (xl.stride(), xl.start_offset());
    let mut dense = Vec::with_capacity(g.batch * g.c_in * g.h_in * g.w_in);
    for b in 0..g.batch {
        for c in 0..g.c_in {
            for y in 0..g.h_in {
                for xx in 0..g.w_in {
                    dense.push(x[off + b * s[0] + c * s[1] + y * s[2] + xx * s[3]]);
                }
            }
        }
    }
    if g.padding.0 == g.padding.1 && g.stride.0 == g.stride.1 && g.dilation.0 == g.dilation.1 {
        let (v, _, _) = naive_conv(
            &dense,
            (g.batch, g.c_in, g.h_in, g.w_in),
            w,
            (g.c_out, g.k_h, g.k_w),
            (g.padding.0, g.padding.1, g.stride.0, g.dilation.0, 0),
            false,
        );
        return v;
    }
    // Parameters that differ along h and w: the definition written out.
    let mut out = vec![0.0; g.batch * g.c_out * g.h_out * g.w_out];
    for b in 0..g.batch {
        for co in 0..g.c_out {
            for oy in 0..g.h_out {
                for ox in 0..g.w_out {
                    let mut acc = 0.0;
                    for ci in 0..g.c_in {
                        for ky in 0..g.k_h {
                            for kx in 0..g.k_w {
                                let y = (oy * g.stride.0 + ky * g.dilation.0) as isize
                                    - g.padding.0 as isize;
                                let xx = (ox * g.stride.1 + kx * g.dilation.1) as isize
                                    - g.padding.1 as isize;
                                if y < 0 || xx < 0 || y >= g.h_in as isize || xx >= g.w_in as isize
                                {
                                    continue;
                                }
                                let i = ((b * g.c_in + ci) * g.h_in + y as usize) * g.w_in
                                    + xx as usize;
                                acc += dense[i] * w[((co * g.c_in + ci) * g.k_h + ky) * g.k_w + kx];
                            }
                        }
                    }
                    out[((b * g.c_out + co) * g.h_out + oy) * g.w_out + ox] = acc;
                }
            }
        }
    }
    out
}

/// Runs `conv_gemm` for `T` on `g` with the implicit GEMM allowed, the input `x` through `xl`
/// and the kernel `w` from element `w_off`: the output and the plan taken.
fn launch<T: RocmDType + rocm_safe::GemmType>(
    dev: &RocmDevice,
    g: &ConvGeometry,
    (x, xl): (&CpuStorage, &Layout),
    (w, w_off): (&CpuStorage, usize),
) -> candle_core::Result<(CpuStorage, ConvPlan)> {
    let (xd, wd) = (upload(dev, x), upload(dev, w));
    let (out, plan) = conv_gemm(
        dev,
        g,
        (xd.as_buffer::<T>().expect("the dtype's buffer"), xl),
        (wd.as_buffer::<T>().expect("the dtype's buffer"), w_off),
        candle_rocm::settings::conv_tile_bytes().max(1),
        // Unstacked tiles where the implicit GEMM does not run: these tests are about which
        // shapes it takes (the stacked tiles are `conv_gemm_tiles`').
        Forms {
            implicit: true,
            stacking: Stacking::Never,
        },
    )?
    .expect("a plan");
    let host: Vec<T> = dev.stream().clone_dtoh(&out).expect("the output");
    Ok((T::to_cpu_storage_owned(host), plan))
}

#[test]
#[ignore = "needs a HIP device"]
fn conv_igemm_cases() {
    let dev = device();
    for dtype in HALVES {
        let want_plan = if has_igemm(&dev, dtype).unwrap() {
            ConvPlan::Implicit
        } else {
            eprintln!("conv_igemm_cases: this device has no conv_igemm kernel: the tiles run");
            ConvPlan::Tiled {
                images: 0,
                positions: 0,
            }
        };
        for (ci, c) in CASES.iter().enumerate() {
            let g = geometry(c);
            for (li, (lname, xl, len)) in input_layouts(g.batch, g.c_in, g.h_in, g.w_in)
                .into_iter()
                .enumerate()
            {
                let s = seed("conv_igemm", dtype, (ci * 8 + li) as u64);
                let mut rng = Rng::new(s);
                let x = random_data(&mut rng, dtype, len, Values::Small);
                let k = g.c_out * g.c_in * g.k_h * g.k_w;
                // The kernel at an odd element offset with the offset input: no 16-byte loads.
                let w_off = if li == 3 { 1 } else { 0 };
                let w_all = random_data(&mut rng, dtype, k + w_off, Values::Small);
                let w_ref = as_f64(&w_all)[w_off..].to_vec();
                let what = format!(
                    "conv_igemm {} {lname} {dtype:?} seed {s} {g:?}{}",
                    c.0,
                    if w_off > 0 { " kernel at offset 1" } else { "" }
                );
                let mut plan = None;
                check(
                    "conv_igemm",
                    dtype,
                    &what,
                    2.0,
                    || Ok(round_to(dtype, &reference(&g, &as_f64(&x), &xl, &w_ref))),
                    || {
                        let (out, p) = match dtype {
                            DType::F16 => launch::<half::f16>(&dev, &g, (&x, &xl), (&w_all, w_off)),
                            _ => launch::<half::bf16>(&dev, &g, (&x, &xl), (&w_all, w_off)),
                        }?;
                        plan = Some(p);
                        Ok(out)
                    },
                );
                match want_plan {
                    ConvPlan::Implicit => assert_eq!(plan, Some(ConvPlan::Implicit), "{what}"),
                    _ => assert!(matches!(plan, Some(ConvPlan::Tiled { .. })), "{what}"),
                }
            }
        }
    }
    flush("conv_igemm");
    finish(&["conv_igemm"]);
}

/// A pointwise (1x1, stride 1, unpadded) convolution keeps its one GEMM with the implicit GEMM
/// allowed, and f32 keeps the tiles.
#[test]
#[ignore = "needs a HIP device"]
fn conv_igemm_leaves_pointwise_and_f32_alone() {
    let dev = device();
    let one = geometry(&("1x1", (2, 16, 8), (5, 6), (1, 1), (0, 0), (1, 1), (1, 1)));
    let three = geometry(&CASES[0]);
    for (g, dtype, direct) in [
        (one, DType::F16, true),
        (one, DType::BF16, true),
        (three, DType::F32, false),
    ] {
        let mut rng = Rng::new(seed("conv_igemm_pointwise", dtype, 0));
        let xl = Layout::contiguous((g.batch, g.c_in, g.h_in, g.w_in));
        let x = random_data(&mut rng, dtype, xl.shape().elem_count(), Values::Small);
        let w = random_data(
            &mut rng,
            dtype,
            g.c_out * g.c_in * g.k_h * g.k_w,
            Values::Small,
        );
        let (_, plan) = match dtype {
            DType::F16 => launch::<half::f16>(&dev, &g, (&x, &xl), (&w, 0)),
            DType::BF16 => launch::<half::bf16>(&dev, &g, (&x, &xl), (&w, 0)),
            _ => launch::<f32>(&dev, &g, (&x, &xl), (&w, 0)),
        }
        .unwrap();
        if direct {
            assert!(
                matches!(plan, ConvPlan::Direct { .. }),
                "{dtype:?}: {plan:?}"
            );
        } else {
            assert!(
                matches!(plan, ConvPlan::Tiled { .. }),
                "{dtype:?}: {plan:?}"
            );
        }
    }
}
