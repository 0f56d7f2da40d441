//! Per-channel broadcasts (a `(1, C, 1, 1)` operand over NCHW, as candle-nn's batch norm in eval
//! mode applies its statistics) against the CPU, bit for bit, on planes whose sizes take each
//! form of the binary kernels: 16-byte packs (16x16 and 28x28 planes in f16), 8-byte packs
//! (14x14 and 2x6 in f16, 7x2 in f32) and elements (7x7), with the operand on either side.

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm_tests::gpu;

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
