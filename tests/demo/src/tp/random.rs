//! Llama checkpoints with random weights in the Hugging Face layout, for tests and speed runs
//! of shapes no small package ships (the 1.1B shape of TinyLlama, the 7B shape of Llama 2).
//! [`super::ShardedWeights::random`] draws the same kind of weights on the device instead;
//! [`write_random_llama_gguf`] writes a llama GGUF file of quantized random weights. Both draw
//! from seeded generators, so a checkpoint of a given shape has the same weights on every run
//! (Candle's CPU random tensors cannot be seeded): tests that compare computations on them
//! fail or pass the same way each time.

use std::collections::HashMap;
use std::path::Path;

use std::cell::Cell;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use candle_transformers::models::llama::{Config, LlamaConfig, LlamaEosToks};
use rand::rngs::StdRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

use super::TpError;

/// Seeds of one checkpoint's tensors: the n-th tensor drawn gets the n-th seed.
struct Seeds(Cell<u64>);

impl Seeds {
    fn new() -> Seeds {
        Seeds(Cell::new(0x5eed_0000))
    }

    /// A (rows, cols) f32 tensor of normal values of standard deviation `std` on the CPU, from
    /// the next seed.
    fn normal(&self, std: f32, shape: (usize, usize)) -> candle_core::Result<Tensor> {
        let seed = self.0.get();
        self.0.set(seed + 1);
        let mut rng = StdRng::seed_from_u64(seed);
        let normal = Normal::new(0f32, std).map_err(candle_core::Error::wrap)?;
        let v: Vec<f32> = (0..shape.0 * shape.1)
            .map(|_| normal.sample(&mut rng))
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu)
    }
}

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
    let seeds = Seeds::new();
    let linear = |out: usize, inp: usize| -> candle_core::Result<Tensor> {
        seeds
            .normal((1.0 / inp as f64).sqrt() as f32, (out, inp))?
            .to_dtype(dtype)
    };
    let ones = |n: usize| Tensor::ones(n, dtype, cpu);
    let mut t: HashMap<String, Tensor> = HashMap::new();
    t.insert(
        "model.embed_tokens.weight".into(),
        seeds.normal(1., (v, h))?.to_dtype(dtype)?,
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

/// The GGML types of a random GGUF llama's tensors (norms are f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgufTypes {
    /// q, k, v, o, gate and up projections.
    pub linear: GgmlDType,
    /// The down projections.
    pub down: GgmlDType,
    /// The token embeddings.
    pub embed: GgmlDType,
    /// The output head (absent with `tie_word_embeddings`: the embeddings serve).
    pub output: GgmlDType,
}

/// Writes the llama GGUF file `path` of `config` (a `config.json` value) with random weights
/// drawn as [`write_random_llama`] draws them, quantized to `types` (rows must be whole
/// blocks of each type), and the `llama.*` metadata candle-transformers' `quantized_llama`
/// and [`super::gguf_config`] read. Returns the parsed config.
pub fn write_random_llama_gguf(
    path: &Path,
    config: &serde_json::Value,
    types: GgufTypes,
) -> Result<Config, TpError> {
    let cfg = parse_config(config, false)?;
    let write_err = |e: String| TpError::Weights {
        path: path.to_path_buf(),
        reason: format!("writing it failed: {e}"),
    };
    let cpu = &Device::Cpu;
    let (h, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let head_dim = h / cfg.num_attention_heads;
    let (q, kv) = (
        head_dim * cfg.num_attention_heads,
        head_dim * cfg.num_key_value_heads,
    );
    let quant = |t: Tensor, dtype: GgmlDType| -> Result<QTensor, TpError> {
        QTensor::quantize(&t, dtype).map_err(|e| write_err(e.to_string()))
    };
    let seeds = Seeds::new();
    let linear = |out: usize, inp: usize, dtype: GgmlDType| -> Result<QTensor, TpError> {
        let std = (1.0 / inp as f64).sqrt() as f32;
        quant(seeds.normal(std, (out, inp))?, dtype)
    };
    let ones = |n: usize| -> Result<QTensor, TpError> {
        quant(Tensor::ones(n, DType::F32, cpu)?, GgmlDType::F32)
    };
    let mut tensors: Vec<(String, QTensor)> = vec![
        (
            "token_embd.weight".into(),
            quant(seeds.normal(1., (v, h))?, types.embed)?,
        ),
        ("output_norm.weight".into(), ones(h)?),
    ];
    if !cfg.tie_word_embeddings {
        tensors.push(("output.weight".into(), linear(v, h, types.output)?));
    }
    for l in 0..cfg.num_hidden_layers {
        let p = format!("blk.{l}.");
        let t = types.linear;
        for (name, tensor) in [
            ("attn_norm.weight", ones(h)?),
            ("ffn_norm.weight", ones(h)?),
            ("attn_q.weight", linear(q, h, t)?),
            ("attn_k.weight", linear(kv, h, t)?),
            ("attn_v.weight", linear(kv, h, t)?),
            ("attn_output.weight", linear(h, q, t)?),
            ("ffn_gate.weight", linear(i, h, t)?),
            ("ffn_up.weight", linear(i, h, t)?),
            ("ffn_down.weight", linear(h, i, types.down)?),
        ] {
            tensors.push((format!("{p}{name}"), tensor));
        }
    }
    let u = |x: usize| gguf_file::Value::U32(x as u32);
    let eos = match &cfg.eos_token_id {
        Some(LlamaEosToks::Single(id)) => *id,
        Some(LlamaEosToks::Multiple(ids)) => ids.first().copied().unwrap_or(2),
        None => 2,
    };
    let metadata: Vec<(&str, gguf_file::Value)> = vec![
        (
            "general.architecture",
            gguf_file::Value::String("llama".into()),
        ),
        ("llama.embedding_length", u(h)),
        ("llama.feed_forward_length", u(i)),
        ("llama.block_count", u(cfg.num_hidden_layers)),
        ("llama.attention.head_count", u(cfg.num_attention_heads)),
        ("llama.attention.head_count_kv", u(cfg.num_key_value_heads)),
        ("llama.rope.dimension_count", u(head_dim)),
        ("llama.context_length", u(cfg.max_position_embeddings)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            gguf_file::Value::F32(cfg.rms_norm_eps as f32),
        ),
        (
            "llama.rope.freq_base",
            gguf_file::Value::F32(cfg.rope_theta),
        ),
        (
            "tokenizer.ggml.bos_token_id",
            u(cfg.bos_token_id.unwrap_or(1) as usize),
        ),
        ("tokenizer.ggml.eos_token_id", u(eos as usize)),
    ];
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| write_err(e.to_string()))?;
    }
    let mut file =
        std::io::BufWriter::new(std::fs::File::create(path).map_err(|e| write_err(e.to_string()))?);
    let md: Vec<(&str, &gguf_file::Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    gguf_file::write(&mut file, &md, &ts).map_err(|e| write_err(e.to_string()))?;
    std::io::Write::flush(&mut file).map_err(|e| write_err(e.to_string()))?;
    Ok(cfg)
}
