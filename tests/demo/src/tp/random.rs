//! Llama checkpoints with random weights in the Hugging Face layout, for tests and speed runs
//! of shapes no small package ships (the 1.1B shape of TinyLlama, the 7B shape of Llama 2).
//! [`super::ShardedWeights::random`] draws the same kind of weights on the device instead.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_transformers::models::llama::{Config, LlamaConfig};

use super::TpError;

/// The `config.json` of TinyLlama-1.1B's shape (2048 hidden, 32 query and 4 key-value heads,
/// 5632 intermediate, 32000 tokens) with `layers` layers (the real model has 22).
pub fn tinyllama_1_1b(layers: usize) -> serde_json::Value {
    serde_json::json!({
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "vocab_size": 32000,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": false
    })
}

/// The `config.json` of Llama 2 7B's shape (4096 hidden, 32 query and 32 key-value heads,
/// 11008 intermediate, 32000 tokens) with `layers` layers (the real one has 32): 6.7 billion
/// parameters at 32 layers, 13.5 GB in f16.
pub fn llama2_7b(layers: usize) -> serde_json::Value {
    serde_json::json!({
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": false
    })
}

/// Parses a llama `config.json` value into candle-transformers' config.
pub fn parse_config(json: &serde_json::Value, flash_attn: bool) -> Result<Config, TpError> {
    let c: LlamaConfig = serde_json::from_value(json.clone()).map_err(|e| TpError::Config {
        path: "config.json".into(),
        reason: e.to_string(),
    })?;
    Ok(c.into_config(flash_attn))
}

/// Writes `config.json` (`config`) and `model.safetensors` with random weights in `dtype` into
/// `dir`: linear weights N(0, 1/in_features) so activations keep their scale through the
/// layers, embeddings N(0, 1), norm weights 1. Returns the parsed config.
pub fn write_random_llama(
    dir: &Path,
    config: &serde_json::Value,
    dtype: DType,
) -> Result<Config, TpError> {
    let cfg = parse_config(config, false)?;
    let write_err = |path: &Path, e: String| TpError::Weights {
        path: path.to_path_buf(),
        reason: format!("writing it failed: {e}"),
    };
    std::fs::create_dir_all(dir).map_err(|e| write_err(dir, e.to_string()))?;
    let cpu = &Device::Cpu;
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let head_dim = h / cfg.num_attention_heads;
    let (q, kv) = (
        head_dim * cfg.num_attention_heads,
        head_dim * cfg.num_key_value_heads,
    );
    let linear = |out: usize, inp: usize| -> candle_core::Result<Tensor> {
        Tensor::randn(0f32, (1.0 / inp as f64).sqrt() as f32, (out, inp), cpu)?.to_dtype(dtype)
    };
    let ones = |n: usize| Tensor::ones(n, dtype, cpu);
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert(
        "model.embed_tokens.weight".into(),
        Tensor::randn(0f32, 1., (v, h), cpu)?.to_dtype(dtype)?,
    );
    t.insert("model.norm.weight".into(), ones(h)?);
    if !cfg.tie_word_embeddings {
        t.insert("lm_head.weight".into(), linear(v, h)?);
    }
    for l in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{l}.");
        for (name, tensor) in [
            ("input_layernorm.weight", ones(h)?),
            ("post_attention_layernorm.weight", ones(h)?),
            ("self_attn.q_proj.weight", linear(q, h)?),
            ("self_attn.k_proj.weight", linear(kv, h)?),
            ("self_attn.v_proj.weight", linear(kv, h)?),
            ("self_attn.o_proj.weight", linear(h, q)?),
            ("mlp.gate_proj.weight", linear(i, h)?),
            ("mlp.up_proj.weight", linear(i, h)?),
            ("mlp.down_proj.weight", linear(h, i)?),
        ] {
            t.insert(format!("{p}{name}"), tensor);
        }
    }
    let weights = dir.join("model.safetensors");
    candle_core::safetensors::save(&t, &weights).map_err(|e| write_err(&weights, e.to_string()))?;
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string()).map_err(|e| write_err(&path, e.to_string()))?;
    Ok(cfg)
}
