//! `mgpu_tp` rows: the demo's tensor-parallel llama (`candle_rocm_demo::tp::TpLlama`) at Llama
//! 2 7B's shape (4096 hidden, 32 layers, 32 heads, 11008 intermediate, 32000 tokens; 13.5 GB
//! of f16 weights) with random f16 weights drawn on each rank's GPU
//! (`ShardedWeights::random`, no files), flash attention (`--tp-attention matmul`: the matmul
//! path, whose op names end in `_matmul`, the CPU's default), the vocabulary tables split as
//! `--tp-vocab` says (by default as the library does: the output head split, the embeddings
//! whole); on 1 GPU (a world of one) and on N.
//!
//! - `prefill_llama_7b`: one forward pass over a 512-token prompt (`--tp-prefill`; fresh cache), to the
//!   last position's logits; tokens/s = prompt tokens / time;
//! - `decode_llama_7b`: after a 16-token prompt, greedy steps one token at a time through the
//!   KV cache, each step's argmax read back to the host as a generation loop does; tokens/s.
//!
//! Each is the median of [`RUNS`] runs after one warm-up run, timed on each rank from a common
//! start (a one-element all-reduce); rank 0's time is printed (the steps' all-reduces keep the
//! ranks together). The shape column is `<N>gpu_<layers>l`, so table.py puts the 1-GPU and
//! N-GPU rows of one layer count side by side. `--tp-layers` takes fewer layers for a quick
//! look; `--tp-model tiny` a small llama for a run on the CPU (`--cpu --gpus 1`).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor, D};
use candle_rocm_demo::tp::{
    llama2_7b, parse_config, Shard, ShardedWeights, TpCache, TpLlama, VocabSplit, World,
};
use candle_transformers::models::llama::Config;

use crate::cli::{Cli, TpAttention, TpModel, TpVocab};
use crate::runner::{median, Bench};

/// The rows' group.
pub(crate) const GROUP: &str = "mgpu_tp";
/// Tokens of the decode row's prompt.
const PROMPT: usize = 16;
/// Timed runs per row (after one warm-up run).
const RUNS: usize = 3;
/// Every rank seeds its generator alike, so the weights every rank holds whole (embeddings,
/// norms, output head) are the same on every rank and so are the logits and the tokens.
const SEED: u64 = 299_792_458;
/// The weights' and activations' dtype.
const DTYPE: DType = DType::F16;

/// What the rows run: the model's shape, its layers, the decode steps, the attention path.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    model: TpModel,
    layers: usize,
    prefill: usize,
    steps: usize,
    flash: bool,
    vocab: VocabSplit,
}

impl Spec {
    /// From the command line; `gpu`: flash attention unless `--tp-attention` says otherwise
    /// (the matmul path on the CPU).
    pub(crate) fn from_cli(cli: &Cli, gpu: bool) -> Result<Spec> {
        anyhow::ensure!(cli.tp_layers >= 1, "--tp-layers must be at least 1");
        anyhow::ensure!(cli.decode_tokens >= 1, "--decode-tokens must be at least 1");
        anyhow::ensure!(cli.tp_prefill >= 1, "--tp-prefill must be at least 1");
        Ok(Spec {
            model: cli.tp_model,
            layers: cli.tp_layers,
            prefill: cli.tp_prefill,
            steps: cli.decode_tokens,
            flash: match cli.tp_attention {
                Some(a) => a == TpAttention::Flash,
                None => gpu,
            },
            vocab: match cli.tp_vocab {
                TpVocab::Head => VocabSplit::HEAD,
                TpVocab::Split => VocabSplit::SPLIT,
                TpVocab::Whole => VocabSplit::WHOLE,
            },
        })
    }

    /// The model's name in the op column.
    fn tag(&self) -> &'static str {
        match self.model {
            TpModel::Llama7b => "7b",
            TpModel::Tiny => "tiny",
        }
    }

    /// The prefill and decode ops (`_matmul` after them on the matmul attention path).
    fn ops(&self) -> (String, String) {
        let t = self.tag();
        let path = if self.flash { "" } else { "_matmul" };
        (
            format!("prefill_llama_{t}{path}"),
            format!("decode_llama_{t}{path}"),
        )
    }

    /// The model's `config.json`.
    fn config_json(&self) -> serde_json::Value {
        match self.model {
            TpModel::Llama7b => llama2_7b(self.layers),
            TpModel::Tiny => serde_json::json!({
                "hidden_size": 128,
                "intermediate_size": 344,
                "vocab_size": 1024,
                "num_hidden_layers": self.layers,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0,
                "max_position_embeddings": 1024,
                "tie_word_embeddings": false
            }),
        }
    }
}

/// Whether `--only` selects a row of this module.
pub(crate) fn wanted(b: &Bench, spec: &Spec) -> bool {
    let (p, d) = spec.ops();
    b.wanted(GROUP, &p) || b.wanted(GROUP, &d)
}

/// The rows on `world` (a world of one, or this rank of N), the model on `b.dev`; `print` on
/// rank 0.
pub(crate) fn rows(b: &Bench, world: &Arc<dyn World>, spec: &Spec, print: bool) -> Result<()> {
    let (pre_op, dec_op) = spec.ops();
    let (want_pre, want_dec) = (b.wanted(GROUP, &pre_op), b.wanted(GROUP, &dec_op));
    if !want_pre && !want_dec {
        return Ok(());
    }
    let n = world.world_size();
    let dev = &b.dev;
    let cfg = parse_config(&spec.config_json(), spec.flash)?;
    let positions = cfg.max_position_embeddings;
    anyhow::ensure!(
        spec.prefill <= positions && PROMPT + spec.steps <= positions,
        "--tp-prefill {} / {PROMPT} + --decode-tokens {}: the model has {positions} positions",
        spec.prefill,
        spec.steps
    );
    if !dev.is_cpu() {
        dev.set_seed(SEED)?;
    }
    let t = Instant::now();
    let weights = ShardedWeights::random(Shard::new(world.rank(), n)?, DTYPE, dev);
    let model = TpLlama::load_with(&weights, &cfg, world.clone(), spec.vocab)?;
    dev.synchronize()?;
    eprintln!(
        "mgpu: llama {} ({} layers) rank {} of {n}: weights drawn in {:.1} s",
        spec.tag(),
        spec.layers,
        world.rank(),
        t.elapsed().as_secs_f64()
    );
    let shape = format!("{n}gpu_{}l", spec.layers);
    let run = Run {
        model: &model,
        world,
        dev,
        cfg: &cfg,
    };
    if want_pre {
        let s = run.prefill(spec.prefill).context(pre_op.clone())?;
        if print {
            b.print(
                [GROUP, &pre_op, &shape, "f16"],
                s,
                spec.prefill as f64,
                "tokens",
            );
        }
    }
    if want_dec {
        let s = run.decode(spec.steps).context(dec_op.clone())?;
        if print {
            b.print([GROUP, &dec_op, &shape, "f16"], s, 1.0, "tokens");
        }
    }
    Ok(())
}

/// One rank's model and what its runs need.
struct Run<'a> {
    model: &'a TpLlama,
    world: &'a Arc<dyn World>,
    dev: &'a Device,
    cfg: &'a Config,
}

impl Run<'_> {
    /// Every rank starts here together (a one-element all-reduce, waited for).
    fn together(&self) -> Result<()> {
        let one = Tensor::zeros(1, DType::F32, self.dev)?;
        drop(self.world.all_reduce_sum(&one)?);
        self.world.wait()?;
        self.dev.synchronize()?;
        Ok(())
    }

    /// The median over [`RUNS`] (after one warm-up run) of `run`'s seconds.
    fn median_of(&self, mut run: impl FnMut() -> Result<f64>) -> Result<f64> {
        run()?;
        let mut v = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            v.push(run()?);
        }
        Ok(median(v))
    }

    /// Seconds of a forward pass over a prompt of `len` tokens.
    fn prefill(&self, len: usize) -> Result<f64> {
        let vocab = self.cfg.vocab_size as u32;
        let tokens: Vec<u32> = (0..len as u32)
            .map(|i| 1 + (37 * i) % (vocab - 1))
            .collect();
        let x = Tensor::new(tokens.as_slice(), self.dev)?.unsqueeze(0)?;
        self.median_of(|| {
            let mut cache = TpCache::new(self.cfg, DTYPE, self.dev)?;
            self.together()?;
            let t = Instant::now();
            let logits = self.model.forward(&x, 0, &mut cache)?;
            self.dev.synchronize()?;
            let secs = t.elapsed().as_secs_f64();
            drop(logits);
            Ok(secs)
        })
    }

    /// Seconds per greedy decode step, over `steps` steps after a [`PROMPT`]-token prompt.
    fn decode(&self, steps: usize) -> Result<f64> {
        let vocab = self.cfg.vocab_size as u32;
        let prompt: Vec<u32> = (0..PROMPT as u32)
            .map(|i| 1 + (100 + 37 * i) % (vocab - 1))
            .collect();
        let x = Tensor::new(prompt.as_slice(), self.dev)?.unsqueeze(0)?;
        let run = |steps: usize| -> Result<f64> {
            let mut cache = TpCache::new(self.cfg, DTYPE, self.dev)?;
            let mut next = argmax(&self.model.forward(&x, 0, &mut cache)?)?;
            self.together()?;
            let t = Instant::now();
            for i in 0..steps {
                let x = Tensor::new(&[next], self.dev)?.unsqueeze(0)?;
                next = argmax(&self.model.forward(&x, PROMPT + i, &mut cache)?)?;
            }
            Ok(t.elapsed().as_secs_f64() / steps as f64)
        };
        self.median_of(|| run(steps))
    }
}

/// The greedy token of a `(1, vocab)` row of logits, read back to the host.
fn argmax(logits: &Tensor) -> Result<u32> {
    logits
        .argmax(D::Minus1)?
        .flatten_all()?
        .to_vec1::<u32>()?
        .first()
        .copied()
        .context("argmax of an empty row of logits")
}
