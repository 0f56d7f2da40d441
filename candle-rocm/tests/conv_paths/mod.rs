//! Parity cases aimed at the convolutions' GEMM path (candle-rocm/src/launch/conv.rs): the
//! direct GEMM of a 1x1 convolution and the im2col tiles, in f32, f64, f16 and bf16, against the
//! exact f64 reference (`naive_conv`) rounded to the dtype, with the dtype's tolerance scaled
//! by the reduction length.
//!
//! - `conv_gemm_shapes_and_layouts`: named shapes (1x1 at batch 1 and 32, a 1x1 with stride 2,
//!   ResNet-like 3x3 padded at batch 1 and 32, a strided dilated 3x3, rectangular kernels,
//!   conv1d like Whisper's front end, a strided and a 1x1 conv1d) through the storage API, each
//!   over a contiguous input, a channel slice of a wider tensor (a grouped convolution's
//!   operand), a channels-last input read through permuted strides, and an input at a start
//!   offset, with a contiguous or a transposed kernel;
//! - `conv_gemm_tiles`: the launcher with small workspace budgets, so that tiles of several
//!   images, of one image and of runs of output positions (including a last partial run) all
//!   occur, and with their images stacked into one GEMM (by the rule and forced, a 1x1 too,
//!   a partial last tile too), checking the plan taken as well as the values. Through the
//!   storage API above, the batch-32 and strided shapes take the stacked tiles by the rule.
//!
//! Grouped convolutions through candle-core's `Tensor` API (which splits the groups into
//! channel slices) are in the tests workspace's `gpu/conv.rs`, which has the `candle` feature.
//!
//! Method names carry a `conv_gemm` prefix so the main suite's per-method counts stay exact.
//! `conv_gemm_tiles` forbids the implicit GEMM (f16/bf16 would take it); `igemm` holds its own
//! cases (`conv_igemm_*`). The storage-API cases above run whatever the default path is: for
//! f16/bf16 shapes that are not pointwise, the implicit GEMM on devices that have it.

mod igemm;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_rocm::launch::conv::{conv_gemm, ConvGeometry, ConvPlan, Forms, Stacking};
use candle_rocm::{RocmDType, RocmDevice};

use super::spatial::{naive_conv, round_to};
use super::{check, seed, upload};
use crate::common::*;

/// The float dtypes the GEMM path takes.
const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// One named case: (b, c_in, c_out), (h, w) (h = 1 for conv1d), (k_h, k_w), padding, stride,
/// dilation, whether it is a conv1d.
struct Case {
    name: &'static str,
    bcc: (usize, usize, usize),
    hw: (usize, usize),
    k: (usize, usize),
    pad: usize,
    stride: usize,
    dil: usize,
    one_d: bool,
}

const fn case(
    name: &'static str,
    bcc: (usize, usize, usize),
    hw: (usize, usize),
    k: (usize, usize),
    (pad, stride, dil): (usize, usize, usize),
) -> Case {
    Case {
        name,
        bcc,
        hw,
        k,
        pad,
        stride,
        dil,
        one_d: false,
    }
}

const fn case1d(
    name: &'static str,
    bcc: (usize, usize, usize),
    len: usize,
    k: usize,
    (pad, stride, dil): (usize, usize, usize),
) -> Case {
    Case {
        name,
        bcc,
        hw: (1, len),
        k: (1, k),
        pad,
        stride,
        dil,
        one_d: true,
    }
}

const CASES: [Case; 11] = [
    case("1x1 b1", (1, 24, 8), (7, 9), (1, 1), (0, 1, 1)),
    case("1x1 b32", (32, 16, 12), (5, 6), (1, 1), (0, 1, 1)),
    case("1x1 stride 2", (3, 16, 8), (9, 7), (1, 1), (0, 2, 1)),
    case("1x1 padded", (2, 5, 3), (4, 4), (1, 1), (1, 1, 1)),
    case("3x3 pad 1 b1", (1, 8, 16), (12, 10), (3, 3), (1, 1, 1)),
    case("3x3 pad 1 b32", (32, 6, 5), (8, 8), (3, 3), (1, 1, 1)),
    case("3x3 s2 d2 p2", (2, 7, 9), (13, 11), (3, 3), (2, 2, 2)),
    case("2x5 rect", (2, 3, 4), (9, 12), (2, 5), (1, 1, 1)),
    case1d("conv1d whisper-like", (1, 20, 24), 300, 3, (1, 1, 1)),
    case1d("conv1d s2 d3", (3, 5, 6), 41, 4, (2, 2, 3)),
    case1d("conv1d 1x1", (2, 9, 7), 33, 1, (0, 1, 1)),
];

/// The input layouts: (description, layout of a (b, c, h, w) view, buffer elements).
fn input_layouts(b: usize, c: usize, h: usize, w: usize) -> Vec<(&'static str, Layout, usize)> {
    let n = b * c * h * w;
    // Channels 1..=c of a (b, c + 3, h, w) tensor: a grouped convolution's operand.
    let wide = c + 3;
    let slice = Layout::new(
        Shape::from((b, c, h, w)),
        vec![wide * h * w, h * w, w, 1],
        h * w,
    );
    // A (b, h, w, c) tensor read as (b, c, h, w).
    let nhwc = Layout::new(Shape::from((b, c, h, w)), vec![h * w * c, 1, w * c, c], 0);
    vec![
        ("contiguous", Layout::contiguous((b, c, h, w)), n),
        ("channel slice", slice, b * wide * h * w),
        ("channels last", nhwc, n),
        (
            "offset 5",
            Layout::contiguous_with_offset((b, c, h, w), 5),
            n + 5,
        ),
    ]
}

/// `x` (buffer of the layout) gathered into a contiguous (b, c, h, w) f64 vector.
fn gather(x: &[f64], l: &Layout) -> Vec<f64> {
    let d = l.dims();
    let s = l.stride();
    let mut out = Vec::with_capacity(l.shape().elem_count());
    for i0 in 0..d[0] {
        for i1 in 0..d[1] {
            for i2 in 0..d[2] {
                for i3 in 0..d[3] {
                    out.push(x[l.start_offset() + i0 * s[0] + i1 * s[1] + i2 * s[2] + i3 * s[3]]);
                }
            }
        }
    }
    out
}

/// The parameters candle-core would pass for `c`.
fn params(c: &Case) -> candle_rocm::ops::conv::ConvParams {
    let (b, c_in, c_out) = c.bcc;
    let mut p = vec![
        ("b_size", b),
        ("c_in", c_in),
        ("c_out", c_out),
        ("padding", c.pad),
        ("stride", c.stride),
        ("dilation", c.dil),
        ("output_padding", 0),
    ];
    if c.one_d {
        p.extend([("l_in", c.hw.1), ("k_size", c.k.1)]);
    } else {
        p.extend([
            ("i_h", c.hw.0),
            ("i_w", c.hw.1),
            ("k_h", c.k.0),
            ("k_w", c.k.1),
        ]);
    }
    candle_rocm::ops::conv::ConvParams::from_pairs(&p)
}

#[test]
#[ignore = "needs a HIP device"]
fn conv_gemm_shapes_and_layouts() {
    let dev = device();
    for dtype in FLOATS {
        for (ci, c) in CASES.iter().enumerate() {
            let (b, c_in, c_out) = c.bcc;
            let (h, w) = c.hw;
            let (kh, kw) = c.k;
            let method = if c.one_d {
                "conv_gemm1d"
            } else {
                "conv_gemm2d"
            };
            let p = params(c);
            let scale = 4.0 * (c_in * kh * kw) as f64;
            for (li, (lname, xl4, len)) in input_layouts(b, c_in, h, w).into_iter().enumerate() {
                let s = seed(method, dtype, (ci * 8 + li) as u64);
                let mut rng = Rng::new(s);
                let x = random_data(&mut rng, dtype, len, Values::Small);
                let wt = random_data(&mut rng, dtype, c_out * c_in * kh * kw, Values::Small);
                // Half the cases read the kernel through a transposed layout of a
                // (c_in * kh * kw, c_out) buffer.
                let transposed_kernel = li % 2 == 1;
                let (w_cpu, w_dev, wl) =
                    kernel_operand(&wt, (c_out, c_in, kh, kw), transposed_kernel, c.one_d);
                let what = format!(
                    "{method} {} {lname} kernel{} seed {s} b{b} cin{c_in} cout{c_out} {h}x{w} \
                     k{kh}x{kw} p{} s{} d{}",
                    c.name,
                    if transposed_kernel { " transposed" } else { "" },
                    c.pad,
                    c.stride,
                    c.dil
                );
                let xl = if c.one_d {
                    let (d, st) = (xl4.dims(), xl4.stride());
                    Layout::new(
                        Shape::from((d[0], d[1], d[3])),
                        vec![st[0], st[1], st[3]],
                        xl4.start_offset(),
                    )
                } else {
                    xl4.clone()
                };
                let pads = if c.one_d { (0, c.pad) } else { (c.pad, c.pad) };
                check(
                    method,
                    dtype,
                    &what,
                    scale,
                    || {
                        let xs = gather(&as_f64(&x), &xl4);
                        let (v, _, _) = naive_conv(
                            &xs,
                            (b, c_in, h, w),
                            &w_cpu,
                            (c_out, kh, kw),
                            (pads.0, pads.1, c.stride, c.dil, 0),
                            false,
                        );
                        Ok(round_to(dtype, &v))
                    },
                    || {
                        let xd = upload(&dev, &x);
                        let wd = upload(&dev, &w_dev);
                        let out = if c.one_d {
                            xd.conv1d_with(&xl, &wd, &wl, &p)?
                        } else {
                            xd.conv2d_with(&xl, &wd, &wl, &p)?
                        };
                        out.to_cpu_storage()
                    },
                );
            }
        }
    }
    for m in ["conv_gemm1d", "conv_gemm2d"] {
        flush(m);
    }
    finish(&["conv_gemm"]);
}

/// The kernel as the reference reads it (contiguous (c_out, c_in, kh, kw) f64), the storage to
/// upload and the layout the op reads it through: contiguous, or the transpose of a
/// (c_in * kh * kw, c_out) buffer.
fn kernel_operand(
    wt: &CpuStorage,
    (c_out, c_in, kh, kw): (usize, usize, usize, usize),
    transposed: bool,
    one_d: bool,
) -> (Vec<f64>, CpuStorage, Layout) {
    let v = as_f64(wt);
    let k = c_in * kh * kw;
    let (dev_data, l) = if transposed {
        let mut t = vec![0f64; v.len()];
        for co in 0..c_out {
            for j in 0..k {
                t[j * c_out + co] = v[co * k + j];
            }
        }
        let strides = if one_d {
            vec![1, kw * c_out, c_out]
        } else {
            vec![1, kh * kw * c_out, kw * c_out, c_out]
        };
        let shape = if one_d {
            Shape::from((c_out, c_in, kw))
        } else {
            Shape::from((c_out, c_in, kh, kw))
        };
        (t, Layout::new(shape, strides, 0))
    } else if one_d {
        (v.clone(), Layout::contiguous((c_out, c_in, kw)))
    } else {
        (v.clone(), Layout::contiguous((c_out, c_in, kh, kw)))
    };
    // The values are the dtype's own (random_data drew them), so the round trip is exact.
    (v, round_to(wt.dtype(), &dev_data), l)
}

/// Runs `conv_gemm` for `T` on `g` with `budget` bytes of workspace, stacking tiles as
/// `stacking` says: the output (as f64) and the plan taken.
fn launch<T: RocmDType + rocm_safe::GemmType>(
    dev: &RocmDevice,
    g: &ConvGeometry,
    x: &CpuStorage,
    w: &CpuStorage,
    (budget, stacking): (usize, Stacking),
) -> (CpuStorage, ConvPlan) {
    let xl = Layout::contiguous((g.batch, g.c_in, g.h_in, g.w_in));
    let (xd, wd) = (upload(dev, x), upload(dev, w));
    let (out, plan) = conv_gemm(
        dev,
        g,
        (xd.as_buffer::<T>().unwrap(), &xl),
        (wd.as_buffer::<T>().unwrap(), 0),
        budget,
        Forms {
            implicit: false,
            stacking,
        },
    )
    .unwrap()
    .expect("a plan");
    let host: Vec<T> = dev.stream().clone_dtoh(&out).unwrap();
    (T::to_cpu_storage_owned(host), plan)
}

#[test]
#[ignore = "needs a HIP device"]
fn conv_gemm_tiles() {
    let dev = device();
    let (b, c_in, c_out, h, w) = (5, 3, 4, 10, 13);
    let geo = |k: usize, pad: usize, stride: usize| {
        let o = |n: usize| (n + 2 * pad - k) / stride + 1;
        ConvGeometry {
            batch: b,
            c_in,
            h_in: h,
            w_in: w,
            c_out,
            k_h: k,
            k_w: k,
            h_out: o(h),
            w_out: o(w),
            padding: (pad, pad),
            stride: (stride, stride),
            dilation: (1, 1),
        }
    };
    for dtype in FLOATS {
        let size = dtype.size_in_bytes();
        let g = geo(3, 1, 1);
        let image = 27 * 130 * size;
        // (budget, expected plan): 2 images per tile (the last tile holds 1), 1 image, runs
        // of 64 positions of one image (130 = 64 + 64 + 2), and the direct 1x1; then the
        // same tiles with their images stacked (130 positions: stacked by the rule too), the
        // 1x1s included.
        let n = Stacking::Never;
        let stacked = |images| ConvPlan::Stacked { images };
        let cases = [
            (
                g,
                2 * image + 1,
                n,
                ConvPlan::Tiled {
                    images: 2,
                    positions: 130,
                },
            ),
            (
                g,
                image,
                n,
                ConvPlan::Tiled {
                    images: 1,
                    positions: 130,
                },
            ),
            (
                g,
                27 * size * 64,
                n,
                ConvPlan::Tiled {
                    images: 1,
                    positions: 64,
                },
            ),
            (
                g,
                1,
                n,
                ConvPlan::Tiled {
                    images: 1,
                    positions: 64,
                },
            ),
            (geo(1, 0, 1), 1, n, ConvPlan::Direct { ld: 130 }),
            (
                geo(1, 0, 2),
                1,
                n,
                ConvPlan::Tiled {
                    images: 1,
                    positions: 35,
                },
            ),
            (g, 2 * image + 1, Stacking::Always, stacked(2)),
            (g, 1 << 20, Stacking::Rule, stacked(5)),
            (geo(1, 0, 1), 1 << 20, Stacking::Always, stacked(5)),
            (geo(1, 0, 2), 1 << 20, Stacking::Rule, stacked(5)),
        ];
        for (i, (g, budget, stacking, want_plan)) in cases.into_iter().enumerate() {
            let s = seed("conv_gemm_tiles", dtype, i as u64);
            let mut rng = Rng::new(s);
            let x = random_data(&mut rng, dtype, b * c_in * h * w, Values::Small);
            let wt = random_data(&mut rng, dtype, c_out * c_in * g.k_h * g.k_w, Values::Small);
            let what = format!(
                "conv_gemm_tiles seed {s} k{} s{} budget {budget} {stacking:?} {dtype:?}",
                g.k_h, g.stride.0
            );
            let mut plan = None;
            check(
                "conv_gemm_tiles",
                dtype,
                &what,
                4.0 * (c_in * g.k_h * g.k_w) as f64,
                || {
                    let (v, _, _) = naive_conv(
                        &as_f64(&x),
                        (b, c_in, h, w),
                        &as_f64(&wt),
                        (c_out, g.k_h, g.k_w),
                        (g.padding.0, g.padding.1, g.stride.0, 1, 0),
                        false,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    let how = (budget, stacking);
                    let (out, p) = match dtype {
                        DType::F32 => launch::<f32>(&dev, &g, &x, &wt, how),
                        DType::F64 => launch::<f64>(&dev, &g, &x, &wt, how),
                        DType::F16 => launch::<half::f16>(&dev, &g, &x, &wt, how),
                        _ => launch::<half::bf16>(&dev, &g, &x, &wt, how),
                    };
                    plan = Some(p);
                    Ok(out)
                },
            );
            assert_eq!(plan, Some(want_plan), "{what}");
        }
    }
    flush("conv_gemm_tiles");
    finish(&["conv_gemm_tiles"]);
}
