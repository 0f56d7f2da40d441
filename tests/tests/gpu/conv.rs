//! Convolutions through candle-core's `Tensor` API on the GPU against the same call on the CPU
//! in f64 (rounded to the dtype at the end), in f32, f16 and bf16: the shapes that take
//! candle-rocm's GEMM path (`candle_rocm::launch::conv`) in each of its forms, kept under
//! `auto`'s MIOpen threshold (2 GFLOP) so that they run on our path whatever
//! `CANDLE_ROCM_CONV` says in the default harness pass:
//!
//! - grouped convolutions (2 and 4 groups, and depthwise), which candle-core runs as one
//!   convolution per group over channel slices of the input;
//! - a 1x1 at batch 1 and 32 (one GEMM from the input) and a 1x1 with stride 2 (columns);
//! - a ResNet-like 3x3 at batch 32 (several images per column tile);
//! - one image whose column matrix passes the default 32 MiB tile (runs of output positions):
//!   256 channels at 64x64 in f32, and 512 in f16 and bf16 (the VAE's layer, fewer outputs);
//! - several small images (the grouped, depthwise and strided 1x1 cases: 25 to 144 positions
//!   an image), whose tiles stack their images into one GEMM;
//! - conv1d like Whisper's front end, strided and dilated, and grouped;
//! - in f16 and bf16, the shapes the implicit GEMM (`candle_rocm::launch::conv_igemm`) finds
//!   hardest (since 2026-11-26 evening the implicit GEMM takes only shapes with at least 65536
//!   output positions and at most 128 output channels, `launch::conv::implicit_gemm_pays`, so
//!   through the `Tensor` API these run the tiles; the parity suite's `conv_paths::igemm` runs
//!   the kernel itself on them): channels that are not multiples of 16 or 32, tiny images, strides 2 and 3,
//!   padding 0-3, dilation 2 and 3, K below one 32-wide step, more than 64 output channels and
//!   position counts that leave a partial 128-position tile; conv1d likewise. The tolerance
//!   is the suite's per dtype (f16 5e-3, bf16 3e-2, times max(1, max |want|)): the kernel sums
//!   in f32 and rounds once, the reference rounds the f64 sum once, so they differ by about
//!   one unit in the last place of the dtype.

use candle_core::{DType, Result, Tensor};
use candle_rocm_tests::{assert_gpu_close, gpu, host_pair, normal, rng, tolerance};

/// One conv2d case: (b, c_in, c_out, h, w), kernel size, padding, stride, dilation, groups.
type Case2d = (
    &'static str,
    (usize, usize, usize, usize, usize),
    usize,
    usize,
    usize,
    usize,
    usize,
);

/// `f` on the CPU in f64 from the same rounded values, back in the dtype of `x`.
fn reference(
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    x: &Tensor,
    k: &Tensor,
) -> Result<Tensor> {
    let dtype = x.dtype();
    f(&x.to_dtype(DType::F64)?, &k.to_dtype(DType::F64)?)?.to_dtype(dtype)
}

/// Runs `case` in `dtype` on the GPU and on the CPU (inputs drawn from `seed` and `seed + 1`)
/// and compares them within the dtype's tolerance.
fn check_conv2d(
    dev: &candle_core::Device,
    &(name, (b, c_in, c_out, h, w), k, pad, stride, dil, groups): &Case2d,
    dtype: DType,
    seed: u64,
    label: &str,
) -> Result<()> {
    let (xc, xg) = host_pair(
        normal(&mut rng(seed), b * c_in * h * w, 1.0),
        (b, c_in, h, w),
        dtype,
        dev,
    )?;
    let kn = c_out * (c_in / groups) * k * k;
    let (kc, kg) = host_pair(
        normal(&mut rng(seed + 1), kn, 0.1),
        (c_out, c_in / groups, k, k),
        dtype,
        dev,
    )?;
    let what = format!("conv2d {label}{name} {dtype:?}");
    let want = reference(|x, k| x.conv2d(k, pad, stride, dil, groups), &xc, &kc)?;
    let got = xg.conv2d(&kg, pad, stride, dil, groups)?;
    assert_gpu_close(&got, &want, tolerance(dtype), &what)
}

#[test]
#[ignore = "needs a HIP device"]
fn conv2d_on_the_gemm_path_matches_the_cpu() -> Result<()> {
    let dev = gpu()?;
    let cases: [Case2d; 9] = [
        ("grouped 2", (2, 8, 12, 9, 11), 3, 1, 1, 1, 2),
        ("grouped 4 strided", (3, 16, 8, 10, 10), 3, 1, 2, 1, 4),
        ("depthwise", (2, 6, 6, 12, 12), 3, 1, 1, 1, 6),
        ("1x1 b1", (1, 64, 32, 28, 28), 1, 0, 1, 1, 1),
        ("1x1 b32", (32, 64, 32, 14, 14), 1, 0, 1, 1, 1),
        ("1x1 stride 2", (4, 32, 16, 15, 15), 1, 0, 2, 1, 1),
        ("3x3 b32", (32, 32, 32, 28, 28), 3, 1, 1, 1, 1),
        ("3x3 dilated", (2, 8, 8, 20, 20), 3, 2, 1, 2, 1),
        ("3x3 one large image", (1, 256, 64, 64, 64), 3, 1, 1, 1, 1),
    ];
    let mut seed = 500;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for case in &cases {
            seed += 1;
            check_conv2d(&dev, case, dtype, seed, "")?;
        }
        // The VAE decoder's 512-channel 3x3 at 64x64 (16 outputs, to keep the CPU quick): in
        // the halves its 37.7 MB column matrix runs in two tiles of positions.
        if dtype != DType::F32 {
            seed += 1;
            let (xc, xg) = host_pair(
                normal(&mut rng(seed), 512 * 64 * 64, 1.0),
                (1, 512, 64, 64),
                dtype,
                &dev,
            )?;
            let (kc, kg) = host_pair(
                normal(&mut rng(seed + 1), 16 * 512 * 9, 0.05),
                (16, 512, 3, 3),
                dtype,
                &dev,
            )?;
            let want = reference(|x, k| x.conv2d(k, 1, 1, 1, 1), &xc, &kc)?;
            let got = xg.conv2d(&kg, 1, 1, 1, 1)?;
            assert_gpu_close(&got, &want, tolerance(dtype), &format!("vae {dtype:?}"))?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn conv1d_on_the_gemm_path_matches_the_cpu() -> Result<()> {
    let dev = gpu()?;
    // (name, (b, c_in, c_out, len), k, padding, stride, dilation, groups)
    let cases = [
        ("whisper-like", (1, 80, 96, 3000), 3, 1, 1, 1, 1),
        ("whisper second", (2, 48, 48, 600), 3, 1, 2, 1, 1),
        ("dilated", (3, 8, 5, 100), 4, 3, 1, 3, 1),
        ("1x1", (2, 32, 16, 77), 1, 0, 1, 1, 1),
        ("grouped", (2, 12, 8, 64), 5, 2, 1, 1, 4),
    ];
    let mut seed = 900;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (name, (b, c_in, c_out, len), k, pad, stride, dil, groups) in cases {
            seed += 1;
            let (xc, xg) = host_pair(
                normal(&mut rng(seed), b * c_in * len, 1.0),
                (b, c_in, len),
                dtype,
                &dev,
            )?;
            let (kc, kg) = host_pair(
                normal(&mut rng(seed + 1), c_out * (c_in / groups) * k, 0.1),
                (c_out, c_in / groups, k),
                dtype,
                &dev,
            )?;
            let what = format!("conv1d {name} {dtype:?}");
            let want = reference(|x, k| x.conv1d(k, pad, stride, dil, groups), &xc, &kc)?;
            let got = xg.conv1d(&kg, pad, stride, dil, groups)?;
            assert_gpu_close(&got, &want, tolerance(dtype), &what)?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn conv_implicit_gemm_shapes_match_the_cpu() -> Result<()> {
    let dev = gpu()?;
    let cases: [Case2d; 10] = [
        ("3 channels", (2, 3, 5, 7, 9), 3, 1, 1, 1, 1),
        (
            "19 -> 70 channels stride 2",
            (1, 19, 70, 11, 13),
            3,
            1,
            2,
            1,
            1,
        ),
        ("dilation 2 pad 2", (2, 9, 17, 13, 10), 3, 2, 1, 2, 1),
        (
            "stride 3 dilation 3 pad 3",
            (1, 7, 9, 20, 17),
            3,
            3,
            3,
            3,
            1,
        ),
        ("1x1 image", (3, 7, 9, 1, 1), 3, 1, 1, 1, 1),
        ("2x2 image", (2, 8, 16, 2, 2), 3, 1, 1, 1, 1),
        ("5x5 unpadded", (2, 5, 6, 9, 12), 5, 0, 1, 1, 1),
        ("390 positions", (3, 6, 12, 10, 13), 3, 1, 1, 1, 1),
        ("K 576", (4, 64, 64, 9, 9), 3, 1, 1, 1, 1),
        ("grouped 3 (slices)", (2, 9, 6, 8, 7), 3, 1, 2, 1, 3),
    ];
    let mut seed = 1300;
    for dtype in [DType::F16, DType::BF16] {
        for case in &cases {
            seed += 1;
            check_conv2d(&dev, case, dtype, seed, "(implicit GEMM) ")?;
        }
        // conv1d: (name, (b, c_in, c_out, len), k, padding, stride, dilation)
        for (name, (b, c_in, c_out, len), k, pad, stride, dil) in [
            ("k3 s2", (1, 24, 16, 101), 3, 1, 2, 1),
            ("k4 s2 d3", (3, 5, 6, 41), 4, 2, 2, 3),
            ("k7 odd channels", (2, 13, 11, 257), 7, 3, 1, 1),
        ] {
            seed += 1;
            let (xc, xg) = host_pair(
                normal(&mut rng(seed), b * c_in * len, 1.0),
                (b, c_in, len),
                dtype,
                &dev,
            )?;
            let (kc, kg) = host_pair(
                normal(&mut rng(seed + 1), c_out * c_in * k, 0.1),
                (c_out, c_in, k),
                dtype,
                &dev,
            )?;
            let what = format!("conv1d (implicit GEMM) {name} {dtype:?}");
            let want = reference(|x, k| x.conv1d(k, pad, stride, dil, 1), &xc, &kc)?;
            let got = xg.conv1d(&kg, pad, stride, dil, 1)?;
            assert_gpu_close(&got, &want, tolerance(dtype), &what)?;
        }
    }
    Ok(())
}
