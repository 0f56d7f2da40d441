//! BERT's two attention paths ([`Bert::load_with`]) on random weights: the flash path (the
//! batch's real tokens packed, attention through `flash_attn_varlen`) against the matmul path
//! (candle-transformers' encoder on the padded batch with the additive mask), on a ragged batch
//! with padding on either side and a row of padding only. The CPU tests run in CI (on the CPU,
//! `flash_attn_varlen` is candle-rocm's host reference, computed in f64); the GPU test is
//! ignored (needs a HIP device; run with `--include-ignored` on a GPU machine). A module of
//! `embed.rs` rather than a test target of its own: the device bundle carries one binary less.

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{VarBuilder, VarMap};
use candle_rocm_demo::bert::{l2_normalize, mean_pool, Bert};
use candle_transformers::models::bert::Config;

/// A 2-layer BERT with 4 heads of dim 16 (flash attention takes head dims in multiples of 8).
const TINY: &str = r#"{"vocab_size": 97, "hidden_size": 64, "num_hidden_layers": 2,
  "num_attention_heads": 4, "intermediate_size": 96, "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1, "max_position_embeddings": 32, "type_vocab_size": 2,
  "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
  "classifier_dropout": null, "model_type": "bert"}"#;

/// The attention mask of the ragged batch: 6 rows of 13 columns with 13 (no padding), 1, 7,
/// 0 (padding only), 5 (padded on the left) and 12 real tokens.
fn ragged_mask() -> Vec<Vec<u32>> {
    let right = |n: usize| (0..13).map(|c| u32::from(c < n)).collect::<Vec<_>>();
    let left = (0..13).map(|c| u32::from(c >= 8)).collect();
    vec![right(13), right(1), right(7), right(0), left, right(12)]
}

/// Token ids and types for `mask`, zero (the pad id) where it is 0; the second half of each
/// row has token type 1.
fn inputs(mask: &[Vec<u32>], dev: &Device) -> Result<(Tensor, Tensor, Tensor)> {
    let (rows, cols) = (mask.len(), mask[0].len());
    let (mut ids, mut types) = (Vec::new(), Vec::new());
    for (r, row) in mask.iter().enumerate() {
        for (c, &m) in row.iter().enumerate() {
            ids.push(m * ((r * 31 + c * 7 + 3) % 96 + 1) as u32);
            types.push(m * u32::from(2 * c >= cols));
        }
    }
    let flat: Vec<u32> = mask.iter().flatten().copied().collect();
    Ok((
        Tensor::from_vec(ids, (rows, cols), dev)?,
        Tensor::from_vec(types, (rows, cols), dev)?,
        Tensor::from_vec(flat, (rows, cols), dev)?,
    ))
}

/// The last hidden states of both paths `[flash, matmul]`, as f32 on the CPU, for one set of
/// random weights in `dtype` on `dev`, and the mask.
fn both_paths(dev: &Device, dtype: DType, mask: &[Vec<u32>]) -> Result<([Tensor; 2], Tensor)> {
    let config: Config = serde_json::from_str(TINY).unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, dtype, dev);
    let flash = Bert::load_with(vb.clone(), &config, true)?;
    // The same variables: the map hands the first model's weights to the second.
    let matmul = Bert::load_with(vb, &config, false)?;
    assert!(flash.flash_attn() && !matmul.flash_attn());
    let (ids, types, mask) = inputs(mask, dev)?;
    let run = |m: &Bert| -> Result<Tensor> {
        let out = m.forward(&ids, &types, &mask)?;
        assert_eq!(out.device().location(), dev.location());
        assert_eq!(out.dtype(), dtype);
        out.to_device(&Device::Cpu)?.to_dtype(DType::F32)
    };
    Ok(([run(&flash)?, run(&matmul)?], mask.to_device(&Device::Cpu)?))
}

/// The largest |a - b| over the real tokens (the padding rows mean nothing on the matmul
/// path).
fn max_diff_at_real_tokens(a: &Tensor, b: &Tensor, mask: &Tensor) -> Result<f32> {
    let m = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
    (a - b)?.broadcast_mul(&m)?.abs()?.max_all()?.to_scalar()
}

/// The largest |a - b| between the two paths' sentence embeddings (mean-pooled over the
/// mask, L2-normalised: what the demo prints).
fn max_embedding_diff(a: &Tensor, b: &Tensor, mask: &Tensor) -> Result<f32> {
    let ea = l2_normalize(&mean_pool(a, mask)?)?;
    let eb = l2_normalize(&mean_pool(b, mask)?)?;
    (ea - eb)?.abs()?.max_all()?.to_scalar()
}

/// The bound on both differences in f32. The two paths run the same linear layers, norms and
/// activations in f32 on the same weights; only attention differs (f32 matmul and softmax
/// against the reference's f64 on the CPU, or the flash kernel's f32 online softmax on the
/// GPU), a few f32 roundings (~1e-7 relative) per value, which two LayerNorm'd layers of
/// unit-scale states carry into the outputs. Measured on the CPU on 2026-11-26 over four runs
/// (the weights are drawn afresh each run): 1.5e-6 to 1.9e-6 (hidden states), 7.5e-8 to 1.2e-7
/// (embeddings); mistakes in packing (position ids shifted by one; one token moved across a
/// sequence boundary) moved them to 2-4 and 0.2.
const F32_TOL: f32 = 1e-5;

/// The cosine of the two paths' embeddings in f16/bf16 is at least this: both round every
/// op's output to 8 (bf16) or 11 (f16) bits, in different places; the demo's own half-precision
/// checks use the same bound.
const HALF_MIN_COSINE: f32 = 0.999;

/// Checks that the flash path's padding rows are zero and that both paths agree in f32.
fn check_f32(dev: &Device, mask: &[Vec<u32>]) -> Result<()> {
    let ([flash, matmul], m) = both_paths(dev, DType::F32, mask)?;
    let pad = (1. - m.to_dtype(DType::F32)?)?.unsqueeze(D::Minus1)?;
    let at_padding: f32 = flash.broadcast_mul(&pad)?.abs()?.max_all()?.to_scalar()?;
    assert_eq!(at_padding, 0., "the flash path's padding rows are not zero");
    let hidden = max_diff_at_real_tokens(&flash, &matmul, &m)?;
    let embeddings = max_embedding_diff(&flash, &matmul, &m)?;
    eprintln!(
        "{:?} f32: max |flash - matmul| {hidden:.2e} (hidden states), {embeddings:.2e} (embeddings)",
        dev.location()
    );
    assert!(
        hidden.is_finite() && hidden <= F32_TOL,
        "hidden states differ by {hidden}"
    );
    assert!(embeddings <= F32_TOL, "embeddings differ by {embeddings}");
    Ok(())
}

/// The smallest cosine between the two paths' embeddings of each sentence with real tokens.
fn min_cosine(a: &Tensor, b: &Tensor, mask: &Tensor) -> Result<f32> {
    let ea = l2_normalize(&mean_pool(a, mask)?)?;
    let eb = l2_normalize(&mean_pool(b, mask)?)?;
    let cos: Vec<f32> = (ea * eb)?.sum(1)?.to_vec1()?;
    let lens: Vec<u32> = mask.sum(1)?.to_vec1()?;
    Ok(cos
        .iter()
        .zip(lens)
        .filter(|(_, n)| *n > 0)
        .fold(1f32, |m, (c, _)| m.min(*c)))
}

/// Checks both paths in f16 and bf16 against each other.
fn check_half(dev: &Device) -> Result<()> {
    for dtype in [DType::F16, DType::BF16] {
        let ([flash, matmul], m) = both_paths(dev, dtype, &ragged_mask())?;
        let cos = min_cosine(&flash, &matmul, &m)?;
        eprintln!(
            "{:?} {dtype:?}: min cosine(flash, matmul) {cos:.6}",
            dev.location()
        );
        assert!(cos >= HALF_MIN_COSINE, "{dtype:?}: cosine {cos}");
    }
    Ok(())
}

#[test]
fn cpu_flash_path_matches_the_matmul_path_on_a_ragged_batch() {
    check_f32(&Device::Cpu, &ragged_mask()).unwrap();
}

/// Without padding packing is a reshape (no gather, no scatter).
#[test]
fn cpu_flash_path_matches_the_matmul_path_without_padding() {
    check_f32(&Device::Cpu, &[vec![1; 9], vec![1; 9]]).unwrap();
}

/// A batch of padding only: zeros, not an error.
#[test]
fn cpu_flash_path_of_padding_only_is_zero() {
    let ([flash, _], _) = both_paths(&Device::Cpu, DType::F32, &[vec![0; 4], vec![0; 4]]).unwrap();
    assert_eq!(flash.dims(), &[2, 4, 64]);
    let max: f32 = flash.abs().unwrap().max_all().unwrap().to_scalar().unwrap();
    assert_eq!(max, 0.);
}

#[test]
fn cpu_half_precision_paths_agree() {
    check_half(&Device::Cpu).unwrap();
}

#[test]
fn default_path_is_matmul_on_the_cpu() {
    let config: Config = serde_json::from_str(TINY).unwrap();
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    assert!(!Bert::load(vb, &config).unwrap().flash_attn());
}

/// The same checks on the GPU: the flash path runs candle-rocm's varlen kernel there.
#[test]
#[ignore = "needs a HIP device"]
fn gpu_flash_path_matches_the_matmul_path() {
    let gpu = candle_rocm::device(0).unwrap();
    let config: Config = serde_json::from_str(TINY).unwrap();
    let vb = VarBuilder::from_varmap(&VarMap::new(), DType::F32, &gpu);
    assert!(
        Bert::load(vb, &config).unwrap().flash_attn(),
        "the GPU default is flash"
    );
    check_f32(&gpu, &ragged_mask()).unwrap();
    check_f32(&gpu, &[vec![1; 9], vec![1; 9]]).unwrap();
    check_half(&gpu).unwrap();
}
