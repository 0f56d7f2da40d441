//! The quantized (GGML) matrix-product rows (group `quant`): decode, small-batch and prefill
//! shapes on random quantized weights.

use anyhow::Result;
use candle_core::{Device, Tensor};

use crate::runner::Bench;

/// Matrix products on quantized (GGML) weights, as a GGUF model's linear layers run them:
/// decode-shaped (one f32 row, at the 7B head's shapes and the 1.1B llama's layers; the work counted is the weight bytes, which dominate what the
/// kernel must read), small batches (4, 6, 8, 16, 32 and 64 rows, as batched decoding or a
/// short prompt gives; weight bytes too) and prefill-shaped (512 rows; flops). Weights are
/// random, quantized on the CPU, then placed on the device with `QTensor::quantize_onto`.
pub(crate) fn quantized(b: &Bench) -> Result<()> {
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::Module;
    let dev = &b.dev;
    let types = [
        (GgmlDType::Q4_0, "q4_0"),
        (GgmlDType::Q4K, "q4k"),
        (GgmlDType::Q8_0, "q8_0"),
        (GgmlDType::Q5_0, "q5_0"),
    ];
    for (ty, ty_name) in types {
        for (m, n, k) in [
            (1usize, 4096usize, 4096usize),
            (1, 32000, 4096),
            // The 1.1B llama's decode products: stacked q/k/v, o, stacked gate/up, down.
            (1, 2560, 2048),
            (1, 2048, 2048),
            (1, 11264, 2048),
            (1, 2048, 5632),
            (4, 4096, 4096),
            (6, 4096, 4096),
            (8, 4096, 4096),
            (4, 32000, 4096),
            (16, 4096, 4096),
            (32, 4096, 4096),
            (64, 4096, 4096),
            (512, 4096, 4096),
        ] {
            let op = if m == 1 {
                format!("qmatvec_{ty_name}")
            } else {
                format!("qmatmul_{ty_name}")
            };
            // Small batches for the 4-bit types, prefill for q4_0; q8_0 and q5_0 around the
            // mat-vec's last rows (6 and 8), where the register-tiled kernels take over.
            let skip = match (ty, m) {
                (_, 1) => false,
                (GgmlDType::Q8_0 | GgmlDType::Q5_0, 6 | 8) => false,
                (GgmlDType::Q8_0 | GgmlDType::Q5_0, _) => true,
                (_, 512) => ty != GgmlDType::Q4_0,
                _ => false,
            };
            if !b.wanted("quant", &op) || skip {
                continue;
            }
            let w = Tensor::randn(0f32, 0.02, (n, k), &Device::Cpu)?;
            let qw = QTensor::quantize_onto(&w, ty, dev)?;
            let weight_bytes = qw.storage_size_in_bytes() as f64;
            let mm = QMatMul::from_qtensor(qw)?;
            let x = Tensor::randn(0f32, 1.0, (m, k), dev)?;
            let s = b.time(|| Ok(mm.forward(&x)?))?;
            let shape = format!("{m}x{k}x{n}");
            if m <= 64 {
                b.print(["quant", &op, &shape, "f32"], s, weight_bytes, "bytes");
            } else {
                let flops = 2.0 * (m * k * n) as f64;
                b.print(["quant", &op, &shape, "f32"], s, flops, "flops");
            }
        }
    }
    Ok(())
}
