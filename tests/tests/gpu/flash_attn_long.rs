//! Long contexts through flash attention on the GPU: a 32k-token and a 128k-token causal prefill
//! of one llama layer's attention (32 query heads, 4 kv heads, head dim 64, f16: the layer whose
//! matmul path needs 24.9 GiB at 8k and cannot run at 16k), a decode step against a 32k cache,
//! and a one-layer candle-transformers llama at 16k tokens with `use_flash_attn: true`.
//!
//! Each runs in a process of its own (like the memory test of `stress.rs`), so the allocator's
//! peak counts this test alone: the peak of live device memory during the call must stay within
//! twice the bytes of q, k, v and the output (memory linear in the sequence length; the
//! matmul path's score tensor alone is heads x seq^2). The last query rows of each prefill are
//! checked against the host reference (the same call on the CPU with only those queries, which
//! bottom-right alignment makes the same rows), at the flash tests' f16 tolerance.

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm::flash_attn as fa;
use candle_rocm_tests::{assert_gpu_close, gpu, isolated, normal, report, rng, rocm_device};

/// `(1, n, heads, d)` normal values as f16 on the CPU and on `dev`.
fn pair(dev: &Device, seed: u64, n: usize, heads: usize, d: usize) -> Result<(Tensor, Tensor)> {
    let v = normal(&mut rng(seed), n * heads * d, 1.0);
    let cpu = Tensor::from_vec(v, (1, n, heads, d), &Device::Cpu)?.to_dtype(DType::F16)?;
    Ok((cpu.clone(), cpu.to_device(dev)?))
}

/// A causal prefill of `n` tokens: peak memory within 2x q, k, v and o; the last rows right.
fn prefill(name: &str, n: usize) -> Result<()> {
    let (h, hk, d) = (32, 4, 64);
    let dev = gpu()?;
    let rocm = rocm_device(&dev).expect("gpu() gives a candle-rocm device");
    let (qc, q) = pair(&dev, 1, n, h, d)?;
    let (kc, k) = pair(&dev, 2, n, hk, d)?;
    let (vc, v) = pair(&dev, 3, n, hk, d)?;
    dev.synchronize()?;
    let alloc = rocm.device().allocator();
    let before = alloc.stats();
    let scale = 1.0 / (d as f32).sqrt();
    let out = fa::flash_attn(&q, &k, &v, scale, true)?;
    dev.synchronize()?;
    let peak = alloc.stats().peak_live_bytes;
    let io = 2 * (2 * n * h * d + 2 * n * hk * d); // q, o, k, v in f16
    let used = peak.saturating_sub(before.live_bytes) + io - 2 * n * h * d;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    report(
        &format!("flash-attn {name} peak device memory"),
        &format!("{:.0} MiB for {:.0} MiB of q, k, v, o", mib(used), mib(io)),
    );
    assert!(
        used <= 2 * io,
        "{name}: {used} bytes live at the peak for {io} bytes of q, k, v and o"
    );
    // The last 4 queries against every key: the same rows with bottom-right alignment.
    let last = 4;
    let want = fa::flash_attn(&qc.narrow(1, n - last, last)?, &kc, &vc, scale, true)?;
    let got = out.narrow(1, n - last, last)?;
    assert_gpu_close(&got, &want, 2e-3, name)
}

#[test]
#[ignore = "needs a HIP device"]
fn prefill_32k_memory_is_linear() -> Result<()> {
    if !isolated("flash_attn_long::prefill_32k_memory_is_linear")? {
        return Ok(());
    }
    prefill("32k prefill", 32 * 1024)
}

#[test]
#[ignore = "needs a HIP device"]
fn prefill_128k_one_layer() -> Result<()> {
    if !isolated("flash_attn_long::prefill_128k_one_layer")? {
        return Ok(());
    }
    prefill("128k prefill", 128 * 1024)
}

/// One query of 32 heads against a 32k cache of 8 kv heads, head dim 128 (a decode step).
#[test]
#[ignore = "needs a HIP device"]
fn decode_against_a_32k_cache() -> Result<()> {
    let dev = gpu()?;
    let (n, h, hk, d) = (32 * 1024, 32, 8, 128);
    let (qc, q) = pair(&dev, 4, 1, h, d)?;
    let (kc, k) = pair(&dev, 5, n, hk, d)?;
    let (vc, v) = pair(&dev, 6, n, hk, d)?;
    let scale = 1.0 / (d as f32).sqrt();
    let got = fa::flash_attn(&q, &k, &v, scale, true)?;
    let want = fa::flash_attn(&qc, &kc, &vc, scale, true)?;
    assert_gpu_close(&got, &want, 2e-3, "decode 32k")
}

/// A one-layer llama of the layer above (hidden 2048) at 16k tokens with flash attention: the
/// matmul path fails there (its score tensor has more than 2^32 - 1 elements).
#[test]
#[ignore = "needs a HIP device"]
fn llama_layer_at_16k_with_flash_attn() -> Result<()> {
    use candle_nn::{VarBuilder, VarMap};
    use candle_transformers::models::llama::{Cache, Config, Llama};
    let dev = gpu()?;
    let n = 16 * 1024;
    let config = Config {
        hidden_size: 2048,
        intermediate_size: 5632,
        vocab_size: 512,
        num_hidden_layers: 1,
        num_attention_heads: 32,
        num_key_value_heads: 4,
        use_flash_attn: true,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: n,
        tie_word_embeddings: false,
    };
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F16, &dev);
    let model = Llama::load(vb, &config)?;
    let mut cache = Cache::new(false, DType::F16, &config, &dev)?;
    let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % 512).collect();
    let x = Tensor::new(tokens.as_slice(), &dev)?.unsqueeze(0)?;
    let logits = model.forward(&x, 0, &mut cache)?.to_dtype(DType::F32)?;
    let v = logits.flatten_all()?.to_vec1::<f32>()?;
    assert_eq!(v.len(), 512);
    assert!(v.iter().all(|x| x.is_finite()), "non-finite logits at 16k");
    Ok(())
}
