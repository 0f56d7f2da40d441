//! candle-flash-attn's API (`candle_rocm::flash_attn`, and the `candle-flash-attn` stand-in
//! crate re-exporting it) on the CPU, where it runs the host reference, and on `ext-cpu` (a
//! backend whose storage the op does not know: candle-core copies the operands to the host and
//! runs the same reference). These tests run in CI; the GPU ones are in `gpu/flash_attn.rs`.
//!
//! Results are compared with [`reference`], attention written out with matmul and softmax on
//! f64 tensors; every bad argument must give an error naming it; and candle-transformers'
//! llama, built with its `flash-attn` feature (patched by `cargo xtask candle` to need no
//! CUDA), gives the same logits with `use_flash_attn` on and off.

use candle_core::{DType, Device, Result, Tensor, D};
use candle_ext_cpu::{ext_cpu, ext_cpu_device};
use candle_rocm::flash_attn as fa;
use candle_rocm_tests::{assert_close, normal, rng, tolerance};

/// `shape` normal values (std 1) from `seed`, as `dtype` on `dev` (rounded on the CPU).
fn randn(dev: &Device, seed: u64, shape: &[usize], dtype: DType) -> Result<Tensor> {
    let n = shape.iter().product();
    Tensor::from_vec(normal(&mut rng(seed), n, 1.0), shape, &Device::Cpu)?
        .to_dtype(dtype)?
        .to_device(dev)
}

/// What a dense call applies besides the scale.
#[derive(Clone, Default)]
struct Opts {
    window: (Option<usize>, Option<usize>),
    alibi: Option<Vec<f32>>,
    softcap: Option<f32>,
}

/// Attention written out on f64 CPU tensors: `q (b, sq, h, d)`, `k, v (b, sk, hk, d)`;
/// query `i` at key position `i + sk - sq` keeps the keys of the window (the spec's rule),
/// ALiBi and softcap as in flash-attention; a row with no key gives zeros. Result in q's
/// dtype.
fn reference(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32, o: &Opts) -> Result<Tensor> {
    let cpu = |t: &Tensor| t.to_device(&Device::Cpu)?.to_dtype(DType::F64);
    let dtype = q.dtype();
    let (b, sq, h, d) = q.dims4()?;
    let (_, sk, hk, _) = k.dims4()?;
    let g = h / hk;
    let heads = |t: Tensor| -> Result<Tensor> {
        // (b, sk, hk, d) -> (b, h, sk, d), each kv head repeated for its g query heads.
        let t = t.transpose(1, 2)?.unsqueeze(2)?;
        t.expand((b, hk, g, sk, d))?.reshape((b, h, sk, d))
    };
    let q = cpu(q)?.transpose(1, 2)?.contiguous()?;
    let (k, v) = (heads(cpu(k)?)?, heads(cpu(v)?)?.contiguous()?);
    let mut s = (q.matmul(&k.t()?.contiguous()?)? * f64::from(scale))?;
    if let Some(c) = o.softcap.filter(|c| *c > 0.0).map(f64::from) {
        s = ((s / c)?.tanh()? * c)?;
    }
    let dist: Vec<f64> = (0..sq)
        .flat_map(|i| (0..sk).map(move |j| (i as f64 + sk as f64 - sq as f64 - j as f64).abs()))
        .collect();
    let dist = Tensor::from_vec(dist, (1, 1, sq, sk), &Device::Cpu)?;
    if let Some(a) = &o.alibi {
        let a: Vec<f64> = a.iter().map(|x| f64::from(*x)).collect();
        let a = Tensor::from_vec(a, (1, h, 1, 1), &Device::Cpu)?;
        s = s.broadcast_sub(&a.broadcast_mul(&dist)?)?;
    }
    let keep: Vec<u8> = (0..sq)
        .flat_map(|i| {
            (0..sk).map(move |j| {
                let (p, j) = (i as i64 + sk as i64 - sq as i64, j as i64);
                let left = o.window.0.is_none_or(|l| j >= p - l as i64);
                u8::from(left && o.window.1.is_none_or(|r| j <= p + r as i64))
            })
        })
        .collect();
    let keep = Tensor::from_vec(keep, (1, 1, sq, sk), &Device::Cpu)?.broadcast_as(s.shape())?;
    let s = keep.where_cond(
        &s,
        &Tensor::full(f64::NEG_INFINITY, s.shape(), &Device::Cpu)?,
    )?;
    let max = s.max_keepdim(D::Minus1)?.clamp(-1e300, f64::INFINITY)?;
    let e = s.broadcast_sub(&max)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?.clamp(1e-300, f64::INFINITY)?;
    let out = e.matmul(&v)?.broadcast_div(&sum)?;
    out.transpose(1, 2)?.to_dtype(dtype)
}

/// Runs a dense call of `(batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim)` through the
/// API function that fits `o` on `dev` and compares it with [`reference`] (on the inputs
/// rounded to `dtype`).
fn dense_case(
    dev: &Device,
    (b, sq, sk, h, hk, d): (usize, usize, usize, usize, usize, usize),
    dtype: DType,
    o: &Opts,
    seed: u64,
) -> Result<()> {
    let q = randn(dev, seed, &[b, sq, h, d], dtype)?;
    let k = randn(dev, seed + 1, &[b, sk, hk, d], dtype)?;
    let v = randn(dev, seed + 2, &[b, sk, hk, d], dtype)?;
    let scale = 1.0 / (d as f32).sqrt();
    let alibi = match &o.alibi {
        Some(a) => Some(Tensor::new(a.as_slice(), dev)?),
        None => None,
    };
    let (l, r) = o.window;
    let got = match (&alibi, o.softcap) {
        (None, None) if l.is_none() && r.is_none_or(|r| r == 0) => {
            fa::flash_attn(&q, &k, &v, scale, r == Some(0))?
        }
        (None, None) => fa::flash_attn_windowed(&q, &k, &v, scale, l, r)?,
        (Some(a), None) => fa::flash_attn_alibi_windowed(&q, &k, &v, a, scale, l, r)?,
        (a, Some(c)) => {
            fa::flash_attn_alibi_windowed_softcap(&q, &k, &v, a.as_ref(), scale, l, r, c)?
        }
    };
    assert_eq!(got.device().location(), dev.location());
    assert_eq!((got.dims(), got.dtype()), (q.dims(), dtype));
    let want = reference(&q, &k, &v, scale, o)?;
    let what = format!("dense {:?} {dtype:?} {:?}", (b, sq, sk, h, hk, d), o.window);
    // The host result is exact attention rounded once to the dtype; the f64 reference's
    // matmuls differ from it by rounding in the last f64 bits only.
    let tol = if dtype == DType::F32 {
        1e-6
    } else {
        tolerance(dtype) / 4.0
    };
    assert_close(&got.to_device(&Device::Cpu)?, &want, tol, &what)
}

fn devices() -> [Device; 2] {
    [Device::Cpu, ext_cpu_device()]
}

#[test]
fn dense_matches_the_reference_on_the_cpu_and_ext_cpu() -> Result<()> {
    let causal = Opts {
        window: (None, Some(0)),
        ..Opts::default()
    };
    for dev in devices() {
        // Causal and not, more queries than keys (rows with no key are zero) and fewer.
        for (n, shape) in [
            (2, 5, 9, 2, 2, 8),
            (1, 9, 4, 2, 1, 16),
            (2, 1, 33, 4, 4, 32),
        ]
        .into_iter()
        .enumerate()
        {
            dense_case(&dev, shape, DType::F32, &Opts::default(), 10 + n as u64)?;
            dense_case(&dev, shape, DType::F32, &causal, 20 + n as u64)?;
        }
        // Windows, GQA (4 and 8 query heads per kv head), ALiBi, softcap.
        let windowed = Opts {
            window: (Some(3), Some(1)),
            ..Opts::default()
        };
        dense_case(&dev, (2, 7, 11, 8, 2, 8), DType::F32, &windowed, 30)?;
        let alibi = Opts {
            window: (None, Some(0)),
            alibi: Some(vec![0.5, 0.25, 0.125, 0.0625, 0.03, 0.01, 0.2, 1.0]),
            ..Opts::default()
        };
        dense_case(&dev, (1, 6, 6, 8, 1, 16), DType::F32, &alibi, 31)?;
        let softcap = Opts {
            window: (Some(4), Some(0)),
            softcap: Some(1.5),
            ..alibi.clone()
        };
        dense_case(&dev, (1, 6, 10, 8, 2, 16), DType::F32, &softcap, 32)?;
        let softcap_only = Opts {
            softcap: Some(0.7),
            ..Opts::default()
        };
        dense_case(&dev, (1, 3, 5, 2, 2, 8), DType::F32, &softcap_only, 33)?;
        // f16 and bf16: computed in f64 on the values as given, rounded once.
        for dtype in [DType::F16, DType::BF16] {
            dense_case(&dev, (1, 5, 7, 4, 2, 24), dtype, &causal, 40)?;
        }
    }
    Ok(())
}

#[test]
fn ext_cpu_runs_the_op_through_the_cpu_fallback() -> Result<()> {
    let dev = ext_cpu_device();
    let q = randn(&dev, 1, &[1, 2, 2, 8], DType::F32)?;
    fa::flash_attn(&q, &q, &q, 0.3, true)?;
    let recorded = ext_cpu(&dev).map(|d| d.fallbacks()).unwrap_or_default();
    assert_eq!(recorded, ["flash-attn"]);
    Ok(())
}

#[test]
fn the_stand_in_crate_is_the_same_api() -> Result<()> {
    let q = randn(&Device::Cpu, 5, &[2, 4, 2, 16], DType::F32)?;
    let k = randn(&Device::Cpu, 6, &[2, 6, 1, 16], DType::F32)?;
    let a = candle_flash_attn::flash_attn(&q, &k, &k, 0.25, true)?;
    let b = fa::flash_attn(&q, &k, &k, 0.25, true)?;
    assert_eq!(
        a.flatten_all()?.to_vec1::<f32>()?,
        b.flatten_all()?.to_vec1::<f32>()?
    );
    // The op structs are the same types too.
    let op: candle_flash_attn::FlashAttn = fa::FlashAttn {
        softmax_scale: 0.25,
        alibi_slopes: None,
        window_size_left: None,
        window_size_right: Some(0),
        softcap: None,
    };
    let c = q.apply_op3(&k, &k, op)?;
    assert_eq!(
        c.flatten_all()?.to_vec1::<f32>()?,
        b.flatten_all()?.to_vec1::<f32>()?
    );
    Ok(())
}

#[path = "flash_attn/varlen.rs"]
mod varlen;

#[path = "flash_attn/errors.rs"]
mod errors;

#[path = "flash_attn/cache.rs"]
mod cache;

#[path = "flash_attn/kvcache.rs"]
mod kvcache;

#[path = "flash_attn/llama.rs"]
mod llama;

#[path = "flash_attn/model.rs"]
mod model;
