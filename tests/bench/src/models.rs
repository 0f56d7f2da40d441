//! The model rows (group `model`) on random weights: BERT forward passes and greedy llama
//! decoding with candle-transformers.
//!
//! Attention, with and without flash attention (our backend's build only: the flash path is
//! candle-rocm's; Candle CUDA and PyTorch time the first row of each pair):
//! - `bert_minilm_b<batch>` is candle-transformers' `BertModel` (matmul attention);
//!   `bert_minilm_b<batch>_flash` and `bert_minilm_b<batch>_matmul` are the demo's BERT
//!   (`tests/demo/src/bert/model.rs`, compiled in here) with its two attention paths: the real
//!   tokens packed and `flash_attn_varlen`, or candle-transformers' encoder with the mask. Their
//!   shape `32x128ragged` is a batch padded to 128 whose sentences hold 33 to 128 real tokens
//!   (81 on average), where packing skips the padding.
//! - `decode_llama_1.1b` is candle-transformers' llama with `use_flash_attn: false` (matmul
//!   attention), `decode_llama_1.1b_flash` the same with `use_flash_attn: true` (and their
//!   `_host` rows).

use std::time::Instant;

use anyhow::Result;
use candle_core::{DType, Device, Tensor, D};

use crate::runner::{median, name, Bench};

/// Random weights of whatever shape a model asks for: timing needs the shapes, not the
/// values. Normal with standard deviation 0.02, as the models' initialisers.
struct RandomWeights;

impl candle_nn::var_builder::SimpleBackend for RandomWeights {
    fn get(
        &self,
        s: candle_core::Shape,
        _name: &str,
        _h: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        Tensor::randn(0f32, 0.02, s, dev)?.to_dtype(dtype)
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape for {name}")
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}

/// all-MiniLM-L6-v2's BERT shape (the demo's embedder).
const MINILM: &str = r#"{"vocab_size": 30522, "hidden_size": 384, "num_hidden_layers": 6,
  "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
  "hidden_dropout_prob": 0.1, "max_position_embeddings": 512, "type_vocab_size": 2,
  "initializer_range": 0.02, "layer_norm_eps": 1e-12, "pad_token_id": 0,
  "classifier_dropout": null, "model_type": "bert"}"#;

/// The demo's BERT, both attention paths (see the module docs). It only uses Candle's crates
/// and candle-rocm, which this build has; items it exports for the demo go unused here.
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
#[allow(dead_code)]
#[path = "../../demo/src/bert/model.rs"]
mod demo_bert;

/// BERT forward passes: candle-transformers' `BertModel` (no attention mask: every token real),
/// then, in our backend's build, the demo's BERT with flash and with matmul attention.
pub(crate) fn bert(b: &Bench) -> Result<()> {
    use candle_transformers::models::bert::{BertModel, Config};
    let dev = &b.dev;
    let cfg: Config = serde_json::from_str(MINILM)?;
    for dtype in [DType::F32, DType::F16] {
        for (batch, seq) in [(32usize, 128usize), (1, 16)] {
            let op = format!("bert_minilm_b{batch}");
            if !b.wanted("model", &op) {
                continue;
            }
            let vb =
                candle_nn::VarBuilder::from_backend(Box::new(RandomWeights), dtype, dev.clone());
            let model = BertModel::load(vb, &cfg)?;
            let ids = Tensor::rand(0f32, (cfg.vocab_size - 1) as f32, (batch, seq), dev)?
                .floor()?
                .to_dtype(DType::U32)?;
            let tt = ids.zeros_like()?;
            let s = b.time(|| Ok(model.forward(&ids, &tt, None)?))?;
            b.print(
                ["model", &op, &format!("{batch}x{seq}"), name(dtype)],
                s,
                batch as f64,
                "sequences",
            );
        }
        #[cfg(all(feature = "rocm", not(feature = "cuda")))]
        demo_bert_rows(b, &cfg, dtype)?;
    }
    Ok(())
}

/// The rows `bert_minilm_b<batch>_flash` and `_matmul` in `dtype`: the demo's BERT with each
/// attention path, on full batches (32 x 128, 1 x 16) and on a ragged one (`32x128ragged`).
#[cfg(all(feature = "rocm", not(feature = "cuda")))]
fn demo_bert_rows(
    b: &Bench,
    cfg: &candle_transformers::models::bert::Config,
    dtype: DType,
) -> Result<()> {
    let dev = &b.dev;
    for (batch, seq, ragged) in [(32usize, 128usize, false), (1, 16, false), (32, 128, true)] {
        // Sentence i > 0 holds 16 + (37 i mod 113) real tokens, the first 128: 33 to 128, 81 on
        // average (63 % of the padded batch).
        let lens: Vec<usize> = (0..batch)
            .map(|i| {
                if ragged && i > 0 {
                    16 + (37 * i) % 113
                } else {
                    seq
                }
            })
            .collect();
        let mask: Vec<u32> = lens
            .iter()
            .flat_map(|&n| (0..seq).map(move |c| u32::from(c < n)))
            .collect();
        let mask = Tensor::from_vec(mask, (batch, seq), dev)?;
        let ids = (Tensor::rand(0f32, (cfg.vocab_size - 1) as f32, (batch, seq), dev)?
            .floor()?
            .to_dtype(DType::U32)?
            * &mask)?;
        let tt = ids.zeros_like()?;
        let shape = format!("{batch}x{seq}{}", if ragged { "ragged" } else { "" });
        for flash in [true, false] {
            let op = format!(
                "bert_minilm_b{batch}_{}",
                if flash { "flash" } else { "matmul" }
            );
            if !b.wanted("model", &op) {
                continue;
            }
            let vb =
                candle_nn::VarBuilder::from_backend(Box::new(RandomWeights), dtype, dev.clone());
            let model = demo_bert::Bert::load_with(vb, cfg, flash)?;
            let s = b.time(|| Ok(model.forward(&ids, &tt, &mask)?))?;
            b.print(
                ["model", &op, &shape, name(dtype)],
                s,
                batch as f64,
                "sequences",
            );
        }
    }
    Ok(())
}

/// TinyLlama-1.1B's LLaMA shape.
pub(crate) fn llama_config() -> candle_transformers::models::llama::Config {
    candle_transformers::models::llama::Config {
        hidden_size: 2048,
        intermediate_size: 5632,
        vocab_size: 32000,
        num_hidden_layers: 22,
        num_attention_heads: 32,
        num_key_value_heads: 4,
        use_flash_attn: false,
        rms_norm_eps: 1e-5,
        rope_theta: 10_000.0,
        bos_token_id: None,
        eos_token_id: None,
        rope_scaling: None,
        max_position_embeddings: 2048,
        tie_word_embeddings: false,
    }
}

/// Greedy decoding: a 16-token prompt, then `steps` tokens one at a time with the KV cache,
/// each step's argmax read back to the host as a generation loop does. Reports seconds per
/// decoded token, and in a second row (`decode_llama_1.1b_host`) the host's share of it: the
/// time to queue each step's forward and argmax, without waiting for the GPU. When the two are
/// close the loop is bound by the host (op overhead), else by the GPU. Our backend's build
/// also times it with `use_flash_attn: true` (`decode_llama_1.1b_flash`, `..._flash_host`).
pub(crate) fn decode(b: &Bench, steps: usize) -> Result<()> {
    let dtypes: &[DType] = if b.profile {
        &[DType::F16]
    } else {
        &[DType::F16, DType::BF16]
    };
    for &dtype in dtypes {
        for &flash in b.attention_paths() {
            decode_rows(b, steps, dtype, flash)?;
        }
    }
    Ok(())
}

/// [`decode`]'s rows in `dtype`, with flash attention or without.
fn decode_rows(b: &Bench, steps: usize, dtype: DType, flash: bool) -> Result<()> {
    use candle_transformers::models::llama::{Cache, Llama};
    let dev = &b.dev;
    let cfg = candle_transformers::models::llama::Config {
        use_flash_attn: flash,
        ..llama_config()
    };
    let suffix = if flash { "_flash" } else { "" };
    let op = format!("decode_llama_1.1b{suffix}");
    if !b.wanted("model", &op) {
        return Ok(());
    }
    let vb = candle_nn::VarBuilder::from_backend(Box::new(RandomWeights), dtype, dev.clone());
    let model = Llama::load(vb, &cfg)?;
    // (seconds per token, host seconds per token)
    let run = |steps: usize| -> Result<(f64, f64)> {
        let mut cache = Cache::new(true, dtype, &cfg, dev)?;
        let prompt: Vec<u32> = (0..16u32).map(|i| 100 + 37 * i).collect();
        let input = Tensor::new(prompt.as_slice(), dev)?.unsqueeze(0)?;
        let logits = model.forward(&input, 0, &mut cache)?;
        let mut next = logits.argmax(D::Minus1)?.flatten_all()?.to_vec1::<u32>()?[0];
        dev.synchronize()?;
        let mut host = 0.0;
        let t = Instant::now();
        for i in 0..steps {
            let q = Instant::now();
            let input = Tensor::new(&[next], dev)?.unsqueeze(0)?;
            let logits = model.forward(&input, 16 + i, &mut cache)?;
            let best = logits.argmax(D::Minus1)?.flatten_all()?;
            host += q.elapsed().as_secs_f64();
            next = best.to_vec1::<u32>()?[0];
        }
        let n = steps as f64;
        Ok((t.elapsed().as_secs_f64() / n, host / n))
    };
    if b.profile {
        run(steps)?;
        return Ok(());
    }
    run(4)?;
    let runs = (0..3).map(|_| run(steps)).collect::<Result<Vec<_>>>()?;
    let s = median(runs.iter().map(|r| r.0).collect());
    let host = median(runs.iter().map(|r| r.1).collect());
    b.print(["model", &op, "prompt16", name(dtype)], s, 1.0, "tokens");
    let host_op = format!("{op}_host");
    b.print(
        ["model", &host_op, "prompt16", name(dtype)],
        host,
        1.0,
        "tokens",
    );
    Ok(())
}
