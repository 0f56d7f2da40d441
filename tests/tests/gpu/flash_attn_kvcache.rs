//! `flash_attn_with_kvcache` on the device against the same calls on the host: a prompt and
//! then one-token steps of a grouped-query decoder, q/k/v as views of a stacked product and the
//! caches in a model's `(b, kv_heads, capacity, d)` layout; the caches hold the same rows
//! (f16/bf16 bit for bit: each product and sum is rounded to the dtype on both sides) and the
//! outputs agree within the attention tolerance of each dtype; also f16 caches under f32
//! activations (the GGUF decoders' KV cache: the mixed kernels).

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm::flash_attn as fa;
use candle_rocm_tests::{assert_gpu_close, gpu};

use crate::flash_attn::{pair, tol};

const H: usize = 8;
const HK: usize = 2;
const CAP: usize = 48;

/// One step on `dev`'s tensors: q, k, v views of the stacked product `all`.
fn step(
    all: &Tensor,
    d: usize,
    (kc, vc): (&Tensor, &Tensor),
    (cos, sin): (&Tensor, &Tensor),
    interleaved: bool,
    pos: usize,
) -> Result<Tensor> {
    let (b, seq, _) = all.dims3()?;
    let part = |from: usize, heads: usize| -> Result<Tensor> {
        all.narrow(2, from * d, heads * d)?
            .reshape((b, seq, heads, d))
    };
    let (q, k, v) = (part(0, H)?, part(H, HK)?, part(H + HK, HK)?);
    let rotary = fa::Rotary {
        cos,
        sin,
        interleaved,
    };
    let scale = 1.0 / (d as f32).sqrt();
    fa::flash_attn_with_kvcache(&q, kc, vc, &k, &v, Some(rotary), pos, scale, seq > 1)
}

#[test]
#[ignore = "needs a HIP device"]
fn a_prompt_then_decode_steps_match_the_host() -> Result<()> {
    let dev = gpu()?;
    for (dtype, cache_dtype) in [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::BF16, DType::BF16),
        (DType::F32, DType::F16),
    ] {
        for (d, interleaved) in [(64, true), (128, false), (64, false)] {
            let what = format!(
                "{dtype:?} ({cache_dtype:?} caches), head_dim {d}, interleaved {interleaved}"
            );
            let (cos_c, cos_g) = pair(&dev, 3, &[CAP, d / 2], dtype)?;
            let (sin_c, sin_g) = pair(&dev, 4, &[CAP, d / 2], dtype)?;
            let cache = |dev: &Device| -> Result<Tensor> {
                Tensor::zeros((1, HK, CAP, d), cache_dtype, dev)?.transpose(1, 2)
            };
            let (kcc, vcc, kcg, vcg) = (
                cache(&Device::Cpu)?,
                cache(&Device::Cpu)?,
                cache(&dev)?,
                cache(&dev)?,
            );
            let mut pos = 0;
            for (i, seq) in [7, 1, 1, 1, 1, 1].into_iter().enumerate() {
                let (ac, ag) = pair(&dev, 10 + i as u64, &[1, seq, (H + 2 * HK) * d], dtype)?;
                let want = step(&ac, d, (&kcc, &vcc), (&cos_c, &sin_c), interleaved, pos)?;
                let got = step(&ag, d, (&kcg, &vcg), (&cos_g, &sin_g), interleaved, pos)?;
                let at = format!("{what}, step {i} at {pos}");
                // Mixed: q and P rounded to f16 on the device, the host's attention in f32.
                assert_gpu_close(&got, &want, tol(cache_dtype), &at)?;
                pos += seq;
            }
            // f32 rows may differ in the last bit (the device may fuse a product into its
            // sum), which can move an f16-rounded row by one f16 step (randn values: < 4e-3).
            let cache_tol = match (dtype, cache_dtype) {
                (DType::F32, DType::F32) => 1e-6,
                (DType::F32, _) => 4e-3,
                _ => 0.0,
            };
            assert_gpu_close(&kcg, &kcc, cache_tol, &format!("key cache, {what}"))?;
            assert_gpu_close(&vcg, &vcc, 0.0, &format!("value cache, {what}"))?;
        }
    }
    Ok(())
}

/// The cache dtype candle-rocm prefers on the device: f16 under f32 where the matrix-unit
/// decode kernel takes the mix (head dims up to 128; the harness has it unless
/// `CANDLE_ROCM_FLASH_MMA=0`), else the activations' own.
#[test]
#[ignore = "needs a HIP device"]
fn the_preferred_cache_is_f16_under_f32_where_the_matrix_units_decode_it() -> Result<()> {
    let dev = gpu()?;
    let mma = std::env::var("CANDLE_ROCM_FLASH_MMA").as_deref() != Ok("0");
    let f16_under_f32 = if mma { DType::F16 } else { DType::F32 };
    assert_eq!(fa::kv_cache_dtype(&dev, DType::F32, 64), f16_under_f32);
    assert_eq!(fa::kv_cache_dtype(&dev, DType::F32, 128), f16_under_f32);
    assert_eq!(fa::kv_cache_dtype(&dev, DType::F32, 256), DType::F32);
    assert_eq!(fa::kv_cache_dtype(&dev, DType::BF16, 64), DType::BF16);
    Ok(())
}

/// A call the cache cannot hold is refused on the device too, before anything is written.
#[test]
#[ignore = "needs a HIP device"]
fn a_full_cache_is_refused_on_the_device() -> Result<()> {
    let dev = gpu()?;
    let d = 64;
    let (_, cos) = pair(&dev, 3, &[CAP, d / 2], DType::F32)?;
    let kc = Tensor::zeros((1, CAP, HK, d), DType::F32, &dev)?;
    let vc = Tensor::zeros((1, CAP, HK, d), DType::F32, &dev)?;
    let (_, all) = pair(&dev, 5, &[1, 2, (H + 2 * HK) * d], DType::F32)?;
    let e = step(&all, d, (&kc, &vc), (&cos, &cos), false, CAP - 1).unwrap_err();
    assert!(e.to_string().contains("cache_seqlen"), "{e}");
    let sum = (kc.abs()?.sum_all()? + vc.abs()?.sum_all()?)?.to_scalar::<f32>()?;
    assert_eq!(sum, 0.0);
    Ok(())
}
