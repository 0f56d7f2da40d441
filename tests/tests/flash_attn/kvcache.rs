//! `flash_attn_with_kvcache`: the new keys (rotated) and values land at positions
//! `cache_seqlen..` of the caches and nowhere else, q attends to the filled positions after the
//! same rotation as candle-nn's `rope` / `rope_i`, and a bad call is an error naming the
//! argument that leaves both caches as they were.

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm::flash_attn as fa;
use candle_rocm_tests::assert_close;

use super::{devices, randn};

const B: usize = 2;
const H: usize = 4;
const HK: usize = 2;
const D: usize = 16;
const CAP: usize = 12;
const POS: usize = 5;
const POISON: f64 = -3.0;

/// Rotary tables of `CAP` positions (llama's frequencies).
fn tables(dev: &Device, dtype: DType) -> Result<(Tensor, Tensor)> {
    let inv: Vec<f32> = (0..D / 2)
        .map(|i| 1.0 / 10000f32.powf(2.0 * i as f32 / D as f32))
        .collect();
    let inv = Tensor::new(inv.as_slice(), &Device::Cpu)?;
    let t = Tensor::arange(0u32, CAP as u32, &Device::Cpu)?.to_dtype(DType::F32)?;
    let f = t
        .reshape((CAP, 1))?
        .broadcast_mul(&inv.reshape((1, D / 2))?)?;
    let up = |x: Tensor| x.to_dtype(dtype)?.to_device(dev);
    Ok((up(f.cos()?)?, up(f.sin()?)?))
}

/// candle-nn's rotation of `(b, seq, heads, d)` at positions `POS..`.
fn rope_nn(x: &Tensor, cos: &Tensor, sin: &Tensor, interleaved: bool) -> Result<Tensor> {
    let seq = x.dim(1)?;
    let (c, s) = (cos.narrow(0, POS, seq)?, sin.narrow(0, POS, seq)?);
    let x = x.transpose(1, 2)?.contiguous()?;
    let y = if interleaved {
        candle_nn::rotary_emb::rope_i(&x, &c, &s)?
    } else {
        candle_nn::rotary_emb::rope(&x, &c, &s)?
    };
    y.transpose(1, 2)
}

/// Poisoned caches in a model's layout: `(b, kv_heads, capacity, d)` buffers seen as
/// `(b, capacity, kv_heads, d)`.
fn caches(dev: &Device, dtype: DType) -> Result<(Tensor, Tensor)> {
    let c = || -> Result<Tensor> {
        (Tensor::ones((B, HK, CAP, D), DType::F32, dev)? * POISON)?
            .to_dtype(dtype)?
            .transpose(1, 2)
    };
    Ok((c()?, c()?))
}

/// q, k and v of `seq` tokens as views of one stacked product `(b, seq, (h + 2 hk) d)`.
fn stacked(dev: &Device, seq: usize, dtype: DType) -> Result<(Tensor, Tensor, Tensor)> {
    let all = randn(dev, 41 + seq as u64, &[B, seq, (H + 2 * HK) * D], dtype)?;
    let part = |from: usize, heads: usize| -> Result<Tensor> {
        all.narrow(2, from * D, heads * D)?
            .reshape((B, seq, heads, D))
    };
    Ok((part(0, H)?, part(H, HK)?, part(H + HK, HK)?))
}

#[test]
fn keys_and_values_land_rotated_at_their_positions_on_the_cpu_and_ext_cpu() -> Result<()> {
    for dev in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for (seq, interleaved) in [(1, false), (1, true), (3, false), (3, true)] {
                let what = format!("{dtype:?} on {dev:?}, seq {seq}, interleaved {interleaved}");
                let (cos, sin) = tables(&dev, dtype)?;
                let (q, k, v) = stacked(&dev, seq, dtype)?;
                let (kc, vc) = caches(&dev, dtype)?;
                let rotary = fa::Rotary {
                    cos: &cos,
                    sin: &sin,
                    interleaved,
                };
                let y = fa::flash_attn_with_kvcache(
                    &q,
                    &kc,
                    &vc,
                    &k,
                    &v,
                    Some(rotary),
                    POS,
                    0.25,
                    true,
                )?;
                let cpu = |t: &Tensor| t.to_device(&Device::Cpu)?.to_dtype(DType::F32);
                let poison =
                    |n: usize| Tensor::ones((B, n, HK, D), DType::F32, &Device::Cpu)? * POISON;
                let k_rot = rope_nn(&k, &cos, &sin, interleaved)?;
                for (cache, new, name) in [(&kc, &k_rot, "keys"), (&vc, &v, "values")] {
                    let c = cpu(cache)?;
                    let exact = |a: &Tensor, b: &Tensor, part: &str| -> Result<()> {
                        assert_eq!(
                            a.flatten_all()?.to_vec1::<f32>()?,
                            b.flatten_all()?.to_vec1::<f32>()?,
                            "{name} {part}, {what}"
                        );
                        Ok(())
                    };
                    exact(&c.narrow(1, 0, POS)?, &poison(POS)?, "before")?;
                    exact(&c.narrow(1, POS, seq)?, &cpu(new)?, "written")?;
                    let rest = CAP - POS - seq;
                    exact(&c.narrow(1, POS + seq, rest)?, &poison(rest)?, "after")?;
                }
                let len = POS + seq;
                let want = fa::flash_attn(
                    &rope_nn(&q, &cos, &sin, interleaved)?,
                    &kc.narrow(1, 0, len)?,
                    &vc.narrow(1, 0, len)?,
                    0.25,
                    true,
                )?;
                assert_eq!(y.dims(), q.dims(), "{what}");
                assert_close(&y, &want, 0.0, &what)?;
            }
        }
    }
    Ok(())
}

/// The cache dtype candle-rocm prefers is the activations' own off its GPUs.
#[test]
fn off_the_gpu_the_cache_keeps_the_activations_dtype() {
    for dev in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            assert_eq!(
                fa::kv_cache_dtype(&dev, dtype, 64),
                dtype,
                "{dtype:?} on {dev:?}"
            );
        }
    }
}

/// f16 caches under f32 q, k and v (the GGUF decoders' KV cache): the rows written are the f32
/// call's rows rounded to f16, and the output is q's attention over them, in f32; caches of any
/// other dtype are refused before anything is written.
#[test]
fn f16_caches_under_f32_hold_the_rounded_rows() -> Result<()> {
    for dev in devices() {
        for (seq, interleaved) in [(1, false), (3, true)] {
            let what = format!("f16 caches on {dev:?}, seq {seq}, interleaved {interleaved}");
            let (cos, sin) = tables(&dev, DType::F32)?;
            let (q, k, v) = stacked(&dev, seq, DType::F32)?;
            let rotary = fa::Rotary {
                cos: &cos,
                sin: &sin,
                interleaved,
            };
            let call = |kc: &Tensor, vc: &Tensor| {
                fa::flash_attn_with_kvcache(&q, kc, vc, &k, &v, Some(rotary), POS, 0.25, true)
            };
            let (kc32, vc32) = caches(&dev, DType::F32)?;
            let (kc16, vc16) = caches(&dev, DType::F16)?;
            let want_y = call(&kc32, &vc32)?;
            let y = call(&kc16, &vc16)?;
            assert_eq!(y.dtype(), DType::F32, "{what}");
            let host = |t: &Tensor| -> Result<Vec<f32>> {
                t.to_device(&Device::Cpu)?
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()
            };
            for (c16, c32, name) in [(&kc16, &kc32, "keys"), (&vc16, &vc32, "values")] {
                assert_eq!(
                    host(c16)?,
                    host(&c32.to_dtype(DType::F16)?)?,
                    "{name}: the f32 rows rounded to f16, {what}"
                );
            }
            // The attention over the rounded rows, and close to the f32 cache's.
            let len = POS + seq;
            let up = |c: &Tensor| c.narrow(1, 0, len)?.to_dtype(DType::F32);
            let want = fa::flash_attn(
                &rope_nn(&q, &cos, &sin, interleaved)?,
                &up(&kc16)?,
                &up(&vc16)?,
                0.25,
                true,
            )?;
            assert_close(&y, &want, 1e-6, &what)?;
            assert_close(&y, &want_y, 1e-2, &format!("{what}, against f32 caches"))?;
        }
        // bf16 caches under f32: refused, the caches untouched.
        let (q, k, v) = stacked(&dev, 1, DType::F32)?;
        let (kc, vc) = caches(&dev, DType::BF16)?;
        let e =
            fa::flash_attn_with_kvcache(&q, &kc, &vc, &k, &v, None, POS, 0.25, true).unwrap_err();
        assert!(e.to_string().contains("k_cache is BF16"), "{e}");
        let sum = kc.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
        assert_eq!(sum, (B * CAP * HK * D) as f32 * POISON as f32);
    }
    Ok(())
}

#[test]
fn without_a_rotation_the_rows_are_copied() -> Result<()> {
    let dev = Device::Cpu;
    let (q, k, v) = stacked(&dev, 2, DType::F32)?;
    let (kc, vc) = caches(&dev, DType::F32)?;
    let y = fa::flash_attn_with_kvcache(&q, &kc, &vc, &k, &v, None, POS, 0.25, false)?;
    assert_eq!(
        kc.narrow(1, POS, 2)?.flatten_all()?.to_vec1::<f32>()?,
        k.flatten_all()?.to_vec1::<f32>()?
    );
    let want = fa::flash_attn(
        &q,
        &kc.narrow(1, 0, POS + 2)?,
        &vc.narrow(1, 0, POS + 2)?,
        0.25,
        false,
    )?;
    assert_close(&y, &want, 0.0, "no rotation")
}

#[test]
fn a_bad_call_names_its_argument_and_writes_nothing() -> Result<()> {
    let dev = Device::Cpu;
    let dtype = DType::F32;
    let (cos, sin) = tables(&dev, dtype)?;
    let (q, k, v) = stacked(&dev, 3, dtype)?;
    let rotary = fa::Rotary {
        cos: &cos,
        sin: &sin,
        interleaved: false,
    };
    let cos16 = cos.to_dtype(DType::F16)?;
    let short = cos.narrow(0, 0, POS + 2)?;
    let (kc, vc) = caches(&dev, dtype)?;
    let wide_v = randn(&dev, 9, &[B, 3, HK + 1, D], dtype)?;
    // (what the error says, the call)
    let cases: Vec<(&str, Result<Tensor>)> = vec![
        (
            "cache_seqlen 10 plus 3 new tokens",
            fa::flash_attn_with_kvcache(&q, &kc, &vc, &k, &v, Some(rotary), CAP - 2, 1.0, true),
        ),
        (
            "cos is F16",
            fa::flash_attn_with_kvcache(
                &q,
                &kc,
                &vc,
                &k,
                &v,
                Some(fa::Rotary {
                    cos: &cos16,
                    ..rotary
                }),
                POS,
                1.0,
                true,
            ),
        ),
        (
            "cos must be contiguous (positions >= 8",
            fa::flash_attn_with_kvcache(
                &q,
                &kc,
                &vc,
                &k,
                &v,
                Some(fa::Rotary {
                    cos: &short,
                    ..rotary
                }),
                POS,
                1.0,
                true,
            ),
        ),
        (
            "k and v must be",
            fa::flash_attn_with_kvcache(&q, &kc, &vc, &k, &wide_v, Some(rotary), POS, 1.0, true),
        ),
        (
            "k_cache and v_cache must be",
            fa::flash_attn_with_kvcache(
                &q,
                &kc,
                &vc.narrow(1, 0, CAP - 1)?,
                &k,
                &v,
                Some(rotary),
                POS,
                1.0,
                true,
            ),
        ),
    ];
    for (name, r) in cases {
        let e = r.expect_err(name).to_string();
        assert!(e.contains(name), "{name}: {e}");
    }
    for c in [&kc, &vc] {
        let all = c.flatten_all()?.to_vec1::<f32>()?;
        assert!(
            all.iter().all(|&x| x == POISON as f32),
            "a refused call wrote"
        );
    }
    Ok(())
}
