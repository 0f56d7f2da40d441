//! The attention rows (group `attn`): prefill forward FLOP/s and decode K/V read bandwidth of
//! flash attention (ours: `candle_rocm::flash_attn`, the candle-flash-attn API) against the
//! matmul path every Candle model runs without it (`q k^T`, scale, mask, softmax, `p v`, as
//! candle-transformers' llama does). PyTorch's rows (torch_bench.py) time
//! `scaled_dot_product_attention` with its flash backend under the `*-flash` names.
//!
//! Prefill: 16k tokens a call (`batch = 16384 / seq`) and 2048 model dims (`heads = 2048 /
//! head_dim`), the shapes of the FlashAttention papers; FLOPs `4 b h s^2 d` (half with a causal
//! mask). Decode: one query of 32 heads against a KV cache of 8 heads, head dim 128; work is
//! the bytes of K and V read. Matmul rows are left out where the score tensor passes 2^31
//! elements.

use anyhow::Result;
use candle_core::{DType, Device, Tensor};

use crate::runner::{name, Bench};

/// The matmul path on `(b, s, h, d)` tensors, GQA by repeating k and v: softmax(q k^T s + mask) v.
fn matmul_attention(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool) -> Result<Tensor> {
    let (_, sq, h, d) = q.dims4()?;
    let (_, sk, hk, _) = k.dims4()?;
    let q = q.transpose(1, 2)?.contiguous()?;
    let rep = |t: &Tensor| -> Result<Tensor> {
        let t = t.transpose(1, 2)?;
        let t = if h == hk {
            t.contiguous()?
        } else {
            let (b, _, s, d) = t.dims4()?;
            t.unsqueeze(2)?
                .expand((b, hk, h / hk, s, d))?
                .reshape((b, h, s, d))?
        };
        Ok(t)
    };
    let (k, v) = (rep(k)?, rep(v)?);
    let att = (q.matmul(&k.t()?)? * (1.0 / (d as f64).sqrt()))?;
    let att = if causal {
        let mask: Vec<f32> = (0..sq)
            .flat_map(|i| {
                (0..sk).map(move |j| {
                    if j > i + sk - sq {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
            })
            .collect();
        let mask = Tensor::from_vec(mask, (sq, sk), q.device())?.to_dtype(att.dtype())?;
        att.broadcast_add(&mask)?
    } else {
        att
    };
    let att = candle_nn::ops::softmax_last_dim(&att)?;
    Ok(att.matmul(&v)?.transpose(1, 2)?)
}

/// Flash attention through the candle-flash-attn API (our build only).
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn flash(q: &Tensor, k: &Tensor, v: &Tensor, causal: bool) -> Result<Option<Tensor>> {
    let d = q.dim(candle_core::D::Minus1)?;
    let scale = 1.0 / (d as f32).sqrt();
    Ok(Some(candle_rocm::flash_attn::flash_attn(
        q, k, v, scale, causal,
    )?))
}

/// Candle's CUDA build has no flash attention here (candle-flash-attn needs its own build).
#[cfg(not(all(feature = "rocm", not(feature = "cuda"))))]
fn flash(_: &Tensor, _: &Tensor, _: &Tensor, _: bool) -> Result<Option<Tensor>> {
    Ok(None)
}

fn randn(shape: (usize, usize, usize, usize), dtype: DType, dev: &Device) -> Result<Tensor> {
    Ok(Tensor::randn(0f32, 1.0, shape, dev)?.to_dtype(dtype)?)
}

/// Prefill and decode rows.
pub(crate) fn attention(b: &Bench) -> Result<()> {
    let dev = &b.dev;
    for dtype in [DType::F16, DType::BF16] {
        for d in [64usize, 128] {
            let h = 2048 / d;
            for s in [512usize, 1024, 2048, 4096, 8192, 16384] {
                let batch = 16384 / s;
                for causal in [false, true] {
                    let shape = format!("b{batch}h{h}s{s}d{d}{}", if causal { "c" } else { "" });
                    let flops =
                        4.0 * (batch * h * s * s * d) as f64 / if causal { 2.0 } else { 1.0 };
                    let want_flash = b.wanted("attn", "prefill-flash");
                    let want_mm = b.wanted("attn", "prefill-matmul") && batch * h * s * s < 1 << 31;
                    if !want_flash && !want_mm || !b.shape_wanted(&shape) {
                        continue;
                    }
                    let q = randn((batch, s, h, d), dtype, dev)?;
                    let k = randn((batch, s, h, d), dtype, dev)?;
                    let v = randn((batch, s, h, d), dtype, dev)?;
                    if want_flash && flash(&q, &k, &v, causal)?.is_some() {
                        let t = b.time(|| flash(&q, &k, &v, causal))?;
                        b.print(
                            ["attn", "prefill-flash", &shape, name(dtype)],
                            t,
                            flops,
                            "flops",
                        );
                    }
                    if want_mm {
                        let t = b.time(|| matmul_attention(&q, &k, &v, causal))?;
                        b.print(
                            ["attn", "prefill-matmul", &shape, name(dtype)],
                            t,
                            flops,
                            "flops",
                        );
                    }
                }
            }
        }
    }
    // GQA 4 (Llama 3 8B's heads) and MHA (Llama 2 7B's), short caches (where a step's
    // attention is latency-bound) and long ones.
    let gqa = [64usize, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768].map(|kv| (8usize, kv));
    let mha = [64usize, 128, 256, 512, 1024, 2048].map(|kv| (32usize, kv));
    let (h, d) = (32usize, 128usize);
    for (hk, kv) in gqa.into_iter().chain(mha) {
        let dtype = DType::F16;
        let shape = format!("h{h}kv{hk}d{d}n{kv}");
        if !b.shape_wanted(&shape) {
            continue;
        }
        let bytes = 2 * kv * hk * d * 2;
        let q = randn((1, 1, h, d), dtype, dev)?;
        let k = randn((1, kv, hk, d), dtype, dev)?;
        let v = randn((1, kv, hk, d), dtype, dev)?;
        if b.wanted("attn", "decode-flash") && flash(&q, &k, &v, false)?.is_some() {
            let t = b.time(|| flash(&q, &k, &v, false))?;
            b.print(
                ["attn", "decode-flash", &shape, name(dtype)],
                t,
                bytes as f64,
                "bytes",
            );
        }
        if b.wanted("attn", "decode-matmul") {
            let t = b.time(|| matmul_attention(&q, &k, &v, false))?;
            b.print(
                ["attn", "decode-matmul", &shape, name(dtype)],
                t,
                bytes as f64,
                "bytes",
            );
        }
    }
    Ok(())
}
