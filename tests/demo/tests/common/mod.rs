//! What the decoder tests share: comparing two models' logits and greedy tokens, and a small
//! random GGUF llama for the `quantized_llama` tests.

#![allow(dead_code)] // each test binary uses its own subset

/// The largest |GPU - CPU f32| logit over each step's largest |CPU f32| logit, along one
/// token sequence (see `LlamaDecoder::forced_logits`).
pub fn worst_relative_error(want: &[Vec<f32>], got: &[Vec<f32>]) -> f32 {
    assert_eq!(want.len(), got.len());
    let mut worst = 0f32;
    for (a, b) in want.iter().zip(got) {
        assert_eq!(a.len(), b.len());
        let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff.is_finite(), "non-finite logits");
        worst = worst.max(diff / scale);
    }
    worst
}

/// Checks `got` (greedy tokens of a model under test) against `want` (the CPU's in f32) over
/// the first `n`: equal, except that they may part at a near-tie of the CPU's own logits (the
/// steps of `reference`, the CPU's forced logits along `want`), where the token taken instead
/// is within `2 * tol` (relative to the step's largest |logit|) of the CPU's best, both
/// models' logits being within `tol` of the truth. Comparison stops where they part. Returns
/// the step where they parted, if they did.
pub fn assert_follows(
    what: &str,
    want: &[u32],
    got: &[u32],
    reference: &[Vec<f32>],
    n: usize,
    tol: f32,
) -> Option<usize> {
    let k = n.min(want.len());
    let Some(i) = (0..k.min(got.len())).find(|&i| got[i] != want[i]) else {
        assert!(got.len() >= k, "{what}: {} tokens, want {k}", got.len());
        return None;
    };
    let row = &reference[i];
    let scale = row.iter().fold(0f32, |m, x| m.max(x.abs()));
    let margin = (row[want[i] as usize] - row[got[i] as usize]) / scale;
    eprintln!("{what}: parts from the CPU's tokens at step {i}, on a margin of {margin:.4}");
    assert!(
        margin <= 2. * tol,
        "{what}: token {i} is {} where the CPU has {}, whose logit is higher by {margin} \
         (relative), not a near-tie; GPU {got:?}, CPU {want:?}",
        got[i],
        want[i]
    );
    Some(i)
}

/// A small random GGUF llama for the `quantized_llama` tests (gguf_flash, gguf_kv_cache),
/// written to a temporary file named after `name`: 2 layers, 256 wide, 4 query heads and 2
/// key-value heads of 64; q4_K projections, q6_K down projections, a q8_0 embedding and a q4_0
/// output head (every row of 256 or 512 values is whole blocks of the k-quants' 256).
pub fn small_gguf_llama(name: &str) -> std::path::PathBuf {
    use candle_core::quantized::GgmlDType;
    use candle_rocm_demo::tp::{write_random_llama_gguf, GgufTypes};
    let config = serde_json::json!({
        "hidden_size": 256,
        "intermediate_size": 512,
        "vocab_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": false
    });
    let types = GgufTypes {
        linear: GgmlDType::Q4K,
        down: GgmlDType::Q6K,
        embed: GgmlDType::Q8_0,
        output: GgmlDType::Q4_0,
    };
    let path = std::env::temp_dir().join(format!("small-llama-{name}-{}.gguf", std::process::id()));
    write_random_llama_gguf(&path, &config, types).unwrap();
    path
}

/// candle-transformers' `quantized_llama` from the GGUF file at `path`, on `dev`.
pub fn load_quantized_llama(
    path: &std::path::Path,
    dev: &candle_core::Device,
) -> candle_transformers::models::quantized_llama::ModelWeights {
    use candle_transformers::models::quantized_llama::ModelWeights;
    let mut reader = std::fs::File::open(path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut reader).unwrap();
    ModelWeights::from_gguf(content, &mut reader, dev).unwrap()
}
