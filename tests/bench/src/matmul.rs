//! The dense matrix-product rows (group `flops`): matmul and matvec in f32, bf16 and f16.

use anyhow::Result;
use candle_core::{DType, Tensor};

use crate::runner::{name, Bench};

/// Matrix products.
pub(crate) fn matmul(b: &Bench) -> Result<()> {
    let dev = &b.dev;
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for (m, k, n) in [(4096usize, 4096usize, 4096usize), (1, 4096, 4096)] {
            let op = if m == 1 { "matvec" } else { "matmul" };
            if !b.wanted("flops", op) {
                continue;
            }
            let a = Tensor::randn(0f32, 1.0, (m, k), dev)?.to_dtype(dtype)?;
            let w = Tensor::randn(0f32, 1.0, (k, n), dev)?.to_dtype(dtype)?;
            let s = b.time(|| Ok(a.matmul(&w)?))?;
            let flops = 2.0 * (m * k * n) as f64;
            b.print(
                ["flops", op, &format!("{m}x{k}x{n}"), name(dtype)],
                s,
                flops,
                "flops",
            );
        }
    }
    Ok(())
}
