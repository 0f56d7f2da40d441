//! Per-channel ops over NCHW: broadcasts of a `(1, C, 1, 1)` operand against the CPU, bit for
//! bit, on planes whose sizes take each form of the binary kernels (16-byte packs on 16x16 and
//! 28x28 planes in f16, 8-byte packs on 14x14 and 2x6 in f16 and 7x2 in f32, elements on 7x7),
//! with the operand on either side; and candle-nn's batch norm in eval mode and group norm, the
//! fused ops.

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm_tests::{assert_gpu_close, gpu, host_pair, normal, rng, tolerance, uniform};

/// `x` (2, 3, h, w) and the channel operand (1, 3, 1, 1) as small exact values of `dtype`
/// (no rounding in f16/bf16 inputs; nonzero channel values, so division is defined).
fn operands(dev: &Device, dtype: DType, (h, w): (usize, usize)) -> Result<(Tensor, Tensor)> {
    let n = 2 * 3 * h * w;
    let x: Vec<f32> = (0..n).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
    let c: Vec<f32> = (0..3).map(|i| 0.5 + i as f32).collect();
    let x = Tensor::from_vec(x, (2, 3, h, w), dev)?.to_dtype(dtype)?;
    let c = Tensor::from_vec(c, (1, 3, 1, 1), dev)?.to_dtype(dtype)?;
    Ok((x, c))
}

/// The four broadcast ops of `x` and `c` both ways, as f32 values.
fn results(x: &Tensor, c: &Tensor) -> Result<Vec<Vec<f32>>> {
    let ops = [
        x.broadcast_mul(c)?,
        x.broadcast_add(c)?,
        x.broadcast_sub(c)?,
        x.broadcast_div(c)?,
        c.broadcast_sub(x)?,
        c.broadcast_mul(x)?,
    ];
    ops.iter()
        .map(|t| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>())
        .collect()
}

#[test]
#[ignore = "needs a HIP device"]
fn per_channel_broadcasts_match_the_cpu() -> Result<()> {
    let dev = gpu()?;
    let planes = [(16, 16), (28, 28), (14, 14), (2, 6), (7, 2), (7, 7)];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for hw in planes {
            let (gx, gc) = operands(&dev, dtype, hw)?;
            let (cx, cc) = operands(&Device::Cpu, dtype, hw)?;
            let (got, want) = (results(&gx, &gc)?, results(&cx, &cc)?);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "{dtype:?} plane {hw:?} op {k}");
            }
        }
    }
    Ok(())
}

/// candle-nn's `BatchNorm` in eval mode against the CPU, alone and with the ReLU after it
/// (`forward_relu_t`): on this device it runs as the fused `batch-norm-eval` /
/// `batch-norm-eval-relu` op (one kernel, f32 math rounded once), on the CPU as candle-nn's four
/// broadcast ops (rounded after each), so within a few of the dtype's tolerance; planes that
/// take whole packs, elements (14x14 and 7x3 in f16), and a 2-D input.
#[test]
#[ignore = "needs a HIP device"]
fn batch_norm_in_eval_mode_matches_the_cpu() -> Result<()> {
    use candle_nn::ModuleT;
    let dev = gpu()?;
    let mut r = rng(4242);
    let shapes: [&[usize]; 4] = [&[2, 8, 14, 14], &[2, 8, 16, 16], &[3, 5], &[2, 70, 7, 3]];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for dims in shapes {
            let (c, n) = (dims[1], dims.iter().product::<usize>());
            let (cx, gx) = host_pair(normal(&mut r, n, 2.0), dims, dtype, &dev)?;
            let stat = |vals: Vec<f32>| host_pair(vals, c, dtype, &dev);
            let (cm, gm) = stat(normal(&mut r, c, 1.0))?;
            let (cv, gv) = stat(uniform(&mut r, c, 0.25, 2.0))?;
            let (cw, gw) = stat(normal(&mut r, c, 1.0))?;
            let (cb, gb) = stat(normal(&mut r, c, 1.0))?;
            let on_gpu = candle_nn::BatchNorm::new(c, gm, gv, gw, gb, 1e-5)?;
            let on_cpu = candle_nn::BatchNorm::new(c, cm, cv, cw, cb, 1e-5)?;
            let (got, want) = (on_gpu.forward_t(&gx, false)?, on_cpu.forward_t(&cx, false)?);
            let what = format!("batch norm {dtype:?} {dims:?}");
            assert_gpu_close(&got, &want, 4.0 * tolerance(dtype), &what)?;
            // With the ReLU after it: one fused op here, the two steps on the CPU.
            let got = on_gpu.forward_relu_t(&gx, false)?;
            let want = on_cpu.forward_t(&cx, false)?.relu()?;
            let what = format!("batch norm + relu {dtype:?} {dims:?}");
            assert_gpu_close(&got, &want, 4.0 * tolerance(dtype), &what)?;
        }
    }
    Ok(())
}

/// candle-nn's `GroupNorm` against the CPU: on this device the fused `group-norm` op (group
/// statistics over many blocks, f32 math rounded once), on the CPU candle-nn's composed ops in
/// f32 (rounded to the dtype before the weight and the bias), so within a few of the dtype's
/// tolerance. Inputs with a mean far from 0; groups of one block and of many (a 128x128
/// plane: 8 blocks a group), planes of whole packs and of elements (7x5, 301x301), a batch of
/// two, and a transposed (non-contiguous) input.
#[test]
#[ignore = "needs a HIP device"]
fn group_norm_matches_the_cpu() -> Result<()> {
    use candle_core::Module;
    let dev = gpu()?;
    let mut r = rng(4343);
    let cases: [(&[usize], usize); 5] = [
        (&[1, 64, 32, 32], 32),
        (&[1, 128, 128, 128], 32),
        (&[2, 6, 7, 5], 3),
        (&[1, 4, 301, 301], 2),
        (&[2, 32, 16, 24], 8),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (k, (dims, groups)) in cases.into_iter().enumerate() {
            let (c, n) = (dims[1], dims.iter().product::<usize>());
            let x: Vec<f32> = normal(&mut r, n, 2.0).iter().map(|v| v + 3.0).collect();
            let (cx, gx) = host_pair(x, dims, dtype, &dev)?;
            let (cw, gw) = host_pair(normal(&mut r, c, 1.0), c, dtype, &dev)?;
            let (cb, gb) = host_pair(normal(&mut r, c, 1.0), c, dtype, &dev)?;
            let on_gpu = candle_nn::GroupNorm::new(gw, gb, c, groups, 1e-5)?;
            let on_cpu = candle_nn::GroupNorm::new(cw, cb, c, groups, 1e-5)?;
            // The last case's input is a transposed view (its last two dims swapped).
            let (gx, cx) = if k == 4 {
                (gx.transpose(2, 3)?, cx.transpose(2, 3)?)
            } else {
                (gx, cx)
            };
            let (got, want) = (on_gpu.forward(&gx)?, on_cpu.forward(&cx)?);
            let what = format!("group norm {dtype:?} {dims:?} in {groups} groups");
            assert_gpu_close(&got, &want, 4.0 * tolerance(dtype), &what)?;
        }
    }
    Ok(())
}
