//! A tiny random llama from candle-transformers, run with and without its flash-attn path
//! (shared by the CPU test in `flash_attn.rs` and the GPU one in `gpu/flash_attn.rs`).

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_transformers::models::llama::{Cache, Config, Llama};

/// A 2-layer llama with 4 query heads of dim 16 sharing 2 kv heads.
pub fn tiny_config(use_flash_attn: bool) -> Config {
    Config {
        hidden_size: 64,
        intermediate_size: 96,
        vocab_size: 101,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        num_key_value_heads: 2,
        use_flash_attn,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
    }
}

/// The logits of both attention paths, step by step, for one set of random weights on `dev`:
/// a 7-token prompt, a 3-token chunk, then 2 single tokens, with the KV cache.
pub fn both_paths(dev: &Device, dtype: DType) -> Result<Vec<(Tensor, Tensor)>> {
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, dtype, dev);
    let flash = Llama::load(vb.clone(), &tiny_config(true))?;
    // The same variables: the map hands the first model's weights to the second.
    let plain = Llama::load(vb, &tiny_config(false))?;
    let mut caches = [
        Cache::new(true, dtype, &tiny_config(true), dev)?,
        Cache::new(true, dtype, &tiny_config(false), dev)?,
    ];
    let steps: [&[u32]; 4] = [&[1, 17, 42, 99, 3, 3, 64], &[5, 8, 13], &[21], &[34]];
    let mut pos = 0;
    let mut out = Vec::new();
    for tokens in steps {
        let x = Tensor::new(tokens, dev)?.unsqueeze(0)?;
        let a = flash.forward(&x, pos, &mut caches[0])?;
        let b = plain.forward(&x, pos, &mut caches[1])?;
        out.push((a, b));
        pos += tokens.len();
    }
    Ok(out)
}
