//! Parity of the spatial ops: pools, upsampling and convolutions (every path: ours, and
//! MIOpen under `CANDLE_ROCM_CONV=miopen`), against naive references on the CPU.

use super::*;

#[test]
#[ignore = "needs a HIP device"]
fn pools_and_upsampling() {
    let dev = device();
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed("pool", dtype, i);
            let mut rng = Rng::new(s);
            let dims = [
                1 + rng.below(3),
                1 + rng.below(4),
                1 + rng.below(20),
                1 + rng.below(20),
            ];
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &dims, Values::Moderate);
            let k = (1 + rng.below(dims[2].min(3)), 1 + rng.below(dims[3].min(3)));
            let st = (1 + rng.below(3), 1 + rng.below(3));
            check(
                "max_pool2d",
                dtype,
                &format!("max_pool2d {k:?} {st:?} seed {s} {w}"),
                0.0,
                || c.max_pool2d(&l, k, st),
                || g.max_pool2d(&l, k, st)?.to_cpu_storage(),
            );
            check(
                "avg_pool2d",
                dtype,
                &format!("avg_pool2d {k:?} {st:?} seed {s} {w}"),
                // candle's avg_pool2d kernel scales by a float 1 / (kh * kw), so f64 results
                // agree to about 1e-7 only.
                if dtype == DType::F64 {
                    1e6
                } else {
                    2.0 * (k.0 * k.1) as f64
                },
                || c.avg_pool2d(&l, k, st),
                || g.avg_pool2d(&l, k, st)?.to_cpu_storage(),
            );
            let (oh, ow) = (1 + rng.below(40), 1 + rng.below(40));
            check(
                "upsample_nearest2d",
                dtype,
                &format!("upsample_nearest2d {oh}x{ow} seed {s} {w}"),
                0.0,
                || c.upsample_nearest2d(&l, oh, ow),
                || g.upsample_nearest2d(&l, oh, ow)?.to_cpu_storage(),
            );
            let align = rng.chance(0.5);
            check(
                "upsample_bilinear2d",
                dtype,
                &format!("upsample_bilinear2d {oh}x{ow} {align} seed {s} {w}"),
                4.0,
                || {
                    let want = c.upsample_bilinear2d(&l, oh, ow, align, None, None)?;
                    if dtype.is_float() {
                        return Ok(want);
                    }
                    // Integers: the CPU interpolates in f64, the kernels in f32, and both
                    // truncate, so a result may sit one below or above; compare within 1 by
                    // returning the GPU's value wherever it is that close.
                    let got = g
                        .upsample_bilinear2d(&l, oh, ow, align, None, None)?
                        .to_cpu_storage()?;
                    let (w, gv) = (as_f64(&want), as_f64(&got));
                    let near: Vec<f64> = w
                        .iter()
                        .zip(&gv)
                        .map(|(a, b)| if (a - b).abs() <= 1.0 { *b } else { *a })
                        .collect();
                    Ok(round_to(dtype, &near))
                },
                || {
                    g.upsample_bilinear2d(&l, oh, ow, align, None, None)?
                        .to_cpu_storage()
                },
            );
            let d3 = [dims[0], dims[1], dims[2]];
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &d3, Values::Moderate);
            check(
                "upsample_nearest1d",
                dtype,
                &format!("upsample_nearest1d {oh} seed {s} {w}"),
                0.0,
                || c.upsample_nearest1d(&l, oh),
                || g.upsample_nearest1d(&l, oh)?.to_cpu_storage(),
            );
        }
    }
    for m in [
        "max_pool2d",
        "avg_pool2d",
        "upsample_nearest2d",
        "upsample_bilinear2d",
        "upsample_nearest1d",
    ] {
        assert_eq!(cases(m), DTYPES.len() * n_cases() as usize, "{m}");
        flush(m);
    }
    // With CANDLE_ROCM_CONV=miopen the contiguous float pools must have run on MIOpen.
    if candle_rocm::settings::conv_path() == candle_rocm::settings::ConvPath::Miopen {
        let runs = candle_rocm::ops::conv::miopen::miopen_pool_runs();
        eprintln!("pools: {runs} ran on MIOpen");
        expect_miopen_runs("pool", runs);
    }
    finish(&["max_pool2d", "avg_pool2d", "upsample_"]);
}

/// Rounds exact results to `dtype`: floats to nearest, integers wrapped to the type's width
/// (what the kernels' integer accumulation gives).
pub(crate) fn round_to(dtype: DType, v: &[f64]) -> CpuStorage {
    match dtype {
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| (x as i64) as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| (x as i64) as u32).collect()),
        d => from_f64(d, v),
    }
}

/// A 2-D (or, with unit height, 1-D) convolution computed exactly on the host in f64:
/// input (b, c_in, h, w), kernel (c_out, c_in, kh, kw) or, transposed, (c_in, c_out, kh, kw).
/// `out_pad` only applies to the transposed form. The reference for the conv methods.
#[allow(clippy::too_many_arguments)]
pub(crate) fn naive_conv(
    x: &[f64],
    (b, c_in, h, w): (usize, usize, usize, usize),
    k: &[f64],
    (c_out, kh, kw): (usize, usize, usize),
    (pad_h, pad_w, stride, dil, out_pad): (usize, usize, usize, usize, usize),
    transposed: bool,
) -> (Vec<f64>, usize, usize) {
    let (oh, ow) = if transposed {
        // A 1-D transposed conv (h = kh = 1, pad_h = 0) pads only its length.
        let out_pad_h = if h == 1 && kh == 1 && pad_h == 0 {
            0
        } else {
            out_pad
        };
        let o = |n: usize, k: usize, p: usize, op: usize| {
            ((n - 1) * stride + dil * (k - 1) + op + 1).saturating_sub(2 * p)
        };
        (o(h, kh, pad_h, out_pad_h), o(w, kw, pad_w, out_pad))
    } else {
        let o = |n: usize, k: usize, p: usize| (n + 2 * p - dil * (k - 1) - 1) / stride + 1;
        (o(h, kh, pad_h), o(w, kw, pad_w))
    };
    let mut out = vec![0f64; b * c_out * oh * ow];
    for bi in 0..b {
        for ci in 0..c_in {
            for co in 0..c_out {
                for ky in 0..kh {
                    for kx in 0..kw {
                        let kv = if transposed {
                            k[((ci * c_out + co) * kh + ky) * kw + kx]
                        } else {
                            k[((co * c_in + ci) * kh + ky) * kw + kx]
                        };
                        if transposed {
                            // Input (y, x) lands on output (y * s + ky * d - p, ...).
                            for y in 0..h {
                                for xx in 0..w {
                                    let oy = (y * stride + ky * dil) as isize - pad_h as isize;
                                    let ox = (xx * stride + kx * dil) as isize - pad_w as isize;
                                    if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                        continue;
                                    }
                                    out[((bi * c_out + co) * oh + oy as usize) * ow
                                        + ox as usize] +=
                                        x[((bi * c_in + ci) * h + y) * w + xx] * kv;
                                }
                            }
                        } else {
                            for oy in 0..oh {
                                for ox in 0..ow {
                                    let y = (oy * stride + ky * dil) as isize - pad_h as isize;
                                    let xx = (ox * stride + kx * dil) as isize - pad_w as isize;
                                    if y < 0 || xx < 0 || y >= h as isize || xx >= w as isize {
                                        continue;
                                    }
                                    out[((bi * c_out + co) * oh + oy) * ow + ox] += x
                                        [((bi * c_in + ci) * h + y as usize) * w + xx as usize]
                                        * kv;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (out, oh, ow)
}

/// Convolutions: candle-core 0.11 keeps its conv parameter structs private, so the CPU
/// reference is the `Tensor` API on the CPU and the ROCm side runs the same parameters through
/// `RocmStorage::conv*_with` (which the `BackendStorage` methods call after reading candle's
/// parameters).
#[test]
#[ignore = "needs a HIP device"]
fn convolutions() {
    use candle_rocm::ops::conv::ConvParams;
    let dev = device();
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed("conv", dtype, i);
            let mut rng = Rng::new(s);
            let (b, c_in, c_out) = (1 + rng.below(3), 1 + rng.below(5), 1 + rng.below(5));
            let (k, pad, stride, dil) = (
                1 + rng.below(4),
                rng.below(3),
                1 + rng.below(3),
                1 + rng.below(2),
            );
            let l_in = k * dil + rng.below(30);
            // conv1d: input (b, c_in, l_in), kernel (c_out, c_in, k).
            let x = random_data(&mut rng, dtype, b * c_in * l_in, Values::Small);
            let w = random_data(&mut rng, dtype, c_out * c_in * k, Values::Small);
            let (xl, wl) = (
                Layout::contiguous((b, c_in, l_in)),
                Layout::contiguous((c_out, c_in, k)),
            );
            let p = ConvParams::from_pairs(&[
                ("b_size", b),
                ("l_in", l_in),
                ("c_out", c_out),
                ("c_in", c_in),
                ("k_size", k),
                ("padding", pad),
                ("stride", stride),
                ("dilation", dil),
                ("output_padding", 0),
            ]);
            let what = format!(
                "conv1d seed {s} b{b} cin{c_in} cout{c_out} l{l_in} k{k} p{pad} s{stride} d{dil}"
            );
            let scale = 4.0 * (c_in * k) as f64;
            check(
                "conv1d",
                dtype,
                &what,
                scale,
                || {
                    let (v, _, _) = naive_conv(
                        &as_f64(&x),
                        (b, c_in, 1, l_in),
                        &as_f64(&w),
                        (c_out, 1, k),
                        (0, pad, stride, dil, 0),
                        false,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &x)
                        .conv1d_with(&xl, &upload(&dev, &w), &wl, &p)?
                        .to_cpu_storage()
                },
            );
            // conv_transpose1d: kernel (c_in, c_out, k); output_padding < stride.
            let op = rng.below(stride);
            let wt = random_data(&mut rng, dtype, c_in * c_out * k, Values::Small);
            let wtl = Layout::contiguous((c_in, c_out, k));
            let l_small = 1 + rng.below(20);
            let xt = random_data(&mut rng, dtype, b * c_in * l_small, Values::Small);
            let xtl = Layout::contiguous((b, c_in, l_small));
            // Half of the cases use the col2im path (no padding, dilation 1).
            let (pad_t, dil_t) = if rng.chance(0.5) {
                (0, 1)
            } else {
                (pad.min(k - 1), dil)
            };
            let op_t = if pad_t == 0 && dil_t == 1 { 0 } else { op };
            let pt = ConvParams::from_pairs(&[
                ("b_size", b),
                ("l_in", l_small),
                ("c_out", c_out),
                ("c_in", c_in),
                ("k_size", k),
                ("padding", pad_t),
                ("stride", stride),
                ("dilation", dil_t),
                ("output_padding", op_t),
            ]);
            let what = format!(
                "conv_transpose1d seed {s} l{l_small} k{k} p{pad_t} op{op_t} s{stride} d{dil_t}"
            );
            check(
                "conv_transpose1d",
                dtype,
                &what,
                scale,
                || {
                    if (l_small - 1) * stride + dil_t * (k - 1) + op_t + 1 < 2 * pad_t {
                        candle_core::bail!("negative output size");
                    }
                    let (v, _, _) = naive_conv(
                        &as_f64(&xt),
                        (b, c_in, 1, l_small),
                        &as_f64(&wt),
                        (c_out, 1, k),
                        (0, pad_t, stride, dil_t, op_t),
                        true,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &xt)
                        .conv_transpose1d_with(&xtl, &upload(&dev, &wt), &wtl, &pt)?
                        .to_cpu_storage()
                },
            );
            // conv2d: input (b, c_in, h, w), kernel (c_out, c_in, kh, kw).
            let (kh, kw) = (1 + rng.below(3), 1 + rng.below(3));
            let (h, w_) = (kh * dil + rng.below(12), kw * dil + rng.below(12));
            let x2 = random_data(&mut rng, dtype, b * c_in * h * w_, Values::Small);
            let w2 = random_data(&mut rng, dtype, c_out * c_in * kh * kw, Values::Small);
            let (x2l, w2l) = (
                Layout::contiguous((b, c_in, h, w_)),
                Layout::contiguous((c_out, c_in, kh, kw)),
            );
            let p2 = ConvParams::from_pairs(&[
                ("b_size", b),
                ("i_h", h),
                ("i_w", w_),
                ("k_h", kh),
                ("k_w", kw),
                ("c_out", c_out),
                ("c_in", c_in),
                ("padding", pad),
                ("stride", stride),
                ("dilation", dil),
                ("output_padding", 0),
            ]);
            let what = format!("conv2d seed {s} {h}x{w_} k{kh}x{kw} p{pad} s{stride} d{dil}");
            let scale2 = 4.0 * (c_in * kh * kw) as f64;
            check(
                "conv2d",
                dtype,
                &what,
                scale2,
                || {
                    let (v, _, _) = naive_conv(
                        &as_f64(&x2),
                        (b, c_in, h, w_),
                        &as_f64(&w2),
                        (c_out, kh, kw),
                        (pad, pad, stride, dil, 0),
                        false,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &x2)
                        .conv2d_with(&x2l, &upload(&dev, &w2), &w2l, &p2)?
                        .to_cpu_storage()
                },
            );
            // conv_transpose2d: kernel (c_in, c_out, kh, kw).
            let w2t = random_data(&mut rng, dtype, c_in * c_out * kh * kw, Values::Small);
            let w2tl = Layout::contiguous((c_in, c_out, kh, kw));
            let (hs, ws) = (1 + rng.below(8), 1 + rng.below(8));
            let x2t = random_data(&mut rng, dtype, b * c_in * hs * ws, Values::Small);
            let x2tl = Layout::contiguous((b, c_in, hs, ws));
            let pad2 = pad.min(kh.min(kw) - 1);
            let p2t = ConvParams::from_pairs(&[
                ("b_size", b),
                ("i_h", hs),
                ("i_w", ws),
                ("k_h", kh),
                ("k_w", kw),
                ("c_out", c_out),
                ("c_in", c_in),
                ("padding", pad2),
                ("stride", stride),
                ("dilation", dil),
                ("output_padding", op),
            ]);
            let what = format!(
                "conv_transpose2d seed {s} {hs}x{ws} k{kh}x{kw} p{pad2} op{op} s{stride} d{dil}"
            );
            check(
                "conv_transpose2d",
                dtype,
                &what,
                scale2,
                || {
                    // A padding that leaves a negative output size is an error (as in PyTorch).
                    let raw = |n: usize, k: usize| (n - 1) * stride + dil * (k - 1) + op + 1;
                    if raw(hs, kh) < 2 * pad2 || raw(ws, kw) < 2 * pad2 {
                        candle_core::bail!("negative output size");
                    }
                    let (v, _, _) = naive_conv(
                        &as_f64(&x2t),
                        (b, c_in, hs, ws),
                        &as_f64(&w2t),
                        (c_out, kh, kw),
                        (pad2, pad2, stride, dil, op),
                        true,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &x2t)
                        .conv_transpose2d_with(&x2tl, &upload(&dev, &w2t), &w2tl, &p2t)?
                        .to_cpu_storage()
                },
            );
        }
    }
    for m in ["conv1d", "conv_transpose1d", "conv2d", "conv_transpose2d"] {
        assert_eq!(cases(m), DTYPES.len() * n_cases() as usize, "{m}");
        flush(m);
    }
    // With CANDLE_ROCM_CONV=miopen (the harness's second pass) the float cases must have run
    // on MIOpen, not fallen back to im2col unnoticed.
    if candle_rocm::settings::conv_path() == candle_rocm::settings::ConvPath::Miopen {
        let runs = candle_rocm::ops::conv::miopen::miopen_runs();
        eprintln!("convolutions: {runs} ran on MIOpen");
        expect_miopen_runs("convolution", runs);
    }
    finish(&["conv"]);
}

/// Checks how many `what`s ran on MIOpen with `CANDLE_ROCM_CONV=miopen`: some, or none when the
/// harness's MIOpen double fails its calls on purpose (`HIP_ON_CUDA_MIOPEN_FAIL`, run.sh's
/// injected-failure pass), where every case must have fallen back to our kernels and still
/// matched the CPU.
fn expect_miopen_runs(what: &str, runs: u64) {
    if std::env::var_os("HIP_ON_CUDA_MIOPEN_FAIL").is_some_and(|v| !v.is_empty()) {
        assert_eq!(
            runs, 0,
            "HIP_ON_CUDA_MIOPEN_FAIL fails MIOpen's calls, yet {runs} {what}s ran on MIOpen"
        );
    } else {
        assert!(
            runs > 0,
            "CANDLE_ROCM_CONV=miopen, yet no {what} ran on MIOpen"
        );
    }
}
