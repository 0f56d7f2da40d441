//! The model rows (group `model`) on random weights: BERT forward passes and greedy llama
//! decoding with candle-transformers.

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

/// BERT forward passes (no attention mask: every token real).
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
/// close the loop is bound by the host (op overhead), else by the GPU.
pub(crate) fn decode(b: &Bench, steps: usize) -> Result<()> {
    use candle_transformers::models::llama::{Cache, Llama};
    let dev = &b.dev;
    let cfg = llama_config();
    let dtypes: &[DType] = if b.profile {
        &[DType::F16]
    } else {
        &[DType::F16, DType::BF16]
    };
    for &dtype in dtypes {
        let op = "decode_llama_1.1b";
        if !b.wanted("model", op) {
            continue;
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
            continue;
        }
        run(4)?;
        let runs = (0..3).map(|_| run(steps)).collect::<Result<Vec<_>>>()?;
        let s = median(runs.iter().map(|r| r.0).collect());
        let host = median(runs.iter().map(|r| r.1).collect());
        b.print(["model", op, "prompt16", name(dtype)], s, 1.0, "tokens");
        let host_op = "decode_llama_1.1b_host";
        b.print(
            ["model", host_op, "prompt16", name(dtype)],
            host,
            1.0,
            "tokens",
        );
    }
    Ok(())
}
