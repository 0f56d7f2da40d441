//! [`TpLlama`]: candle-transformers' llama with its attention and MLP split over ranks.
//!
//! The same computation as `candle_transformers::models::llama::Llama` (its [`Config`], its
//! rotary tables including llama-3 frequency scaling, candle-nn's `RmsNorm`, `rope`, `silu`,
//! candle-transformers' causal mask and `repeat_kv`, the f32 matmul attention or flash
//! attention), with each rank holding `1 / world` of the heads: q, k and v projections
//! column-parallel (whole heads: `num_attention_heads / world` query heads and
//! `num_key_value_heads / world` key-value heads per rank, so every query head finds its
//! key-value head on its own rank), o projection row-parallel; gate and up projections
//! column-parallel, down projection row-parallel, each rank's q/k/v and gate/up blocks stacked
//! into one product each ([`StackedColumns`]; one-row steps gate the stacked gate|up product with
//! candle-nn's `swiglu`, and each residual add runs with the next norm, `add_rms_norm`, as
//! candle-transformers' llama does). Two all-reduces per layer, each run with the residual add
//! and the norm after it ([`World::all_reduce_add_rms_norm`]: on GPUs of one host, candle-rocm's
//! one-shot kernel does the three in one launch). Norms are whole on
//! every rank; by default the output head is split by vocabulary rows and the embeddings are
//! whole (`vocab.rs`: an all-gather of the logits; [`VocabSplit`] splits the embeddings too,
//! with an all-reduce after the lookup, or keeps both whole), so every rank computes the same
//! logits.
//!
//! From a GGUF file ([`super::ShardedWeights::open_gguf`]) the linear layers keep their GGML
//! blocks and run candle's quantized product (`QMatMul`, f32 activations as
//! candle-transformers' `quantized_llama` runs them), and q and k come in llama.cpp's row
//! order, which the interleaved rotary embedding (`rope_i`) reads: the computation of
//! `quantized_llama` on the same file.

use std::f32::consts::PI;
use std::sync::Arc;

use candle_core::{DType, Device, IndexOp, Module, Tensor, D};
use candle_nn::RmsNorm;
use candle_transformers::models::llama::{Config, Llama3RopeConfig, Llama3RopeType};

use super::linear::{ParallelWeight, RowParallelLinear, StackedColumns, World};
use super::shard::{ShardedWeights, Split};
use super::vocab::{VocabEmbedding, VocabHead, VocabSplit};
use super::TpError;

/// Positions a layer's KV buffers hold at the least; they double when full.
const KV_CHUNK: usize = 256;

/// A layer's keys and values: `(batch, kv_heads, capacity, head_dim)` buffers whose first `len`
/// positions are filled. A step writes its positions in place (one position a decode step,
/// where a `Tensor::cat` of the cache and the new position copied the whole cache).
#[derive(Debug, Clone)]
struct LayerKv {
    k: Tensor,
    v: Tensor,
    len: usize,
    /// Shared with the caches cloned from this one (same buffers): while it is, a step first
    /// copies the buffers, so clones never write into each other's.
    owner: Arc<()>,
}

impl LayerKv {
    /// `slot`'s buffers with room for positions `pos..pos + seq` of `(b, hk, _, d)` keys and
    /// values like `like` (made on first use or when that shape changes, doubled when full,
    /// the first `pos` positions kept); its positions from `pos` on are the step's to write.
    fn reserve<'a>(
        slot: &'a mut Option<LayerKv>,
        (b, hk, seq, d): (usize, usize, usize, usize),
        like: &Tensor,
        pos: usize,
    ) -> candle_core::Result<&'a mut LayerKv> {
        let fits = |c: &LayerKv| -> candle_core::Result<bool> {
            let (cb, ch, _, cd) = c.k.dims4()?;
            Ok((cb, ch, cd) == (b, hk, d) && c.k.dtype() == like.dtype())
        };
        let kept = match slot.take() {
            Some(c) if fits(&c)? => Some(c),
            _ => None,
        };
        let filled = kept.as_ref().map_or(0, |c| c.len);
        if pos > filled {
            candle_core::bail!("position {pos} is past the {filled} positions this cache holds");
        }
        let cap = kept.as_ref().map_or(0, |c| c.k.dim(2).unwrap_or(0));
        let c = match kept {
            Some(c) if pos + seq <= cap && Arc::strong_count(&c.owner) == 1 => c,
            kept => {
                // Full (twice as long), or shared with a clone (a copy of the same length).
                let cap = if pos + seq <= cap {
                    cap
                } else {
                    (2 * cap).max(pos + seq).next_multiple_of(KV_CHUNK)
                };
                let new = || Tensor::zeros((b, hk, cap, d), like.dtype(), like.device());
                let (k, v) = (new()?, new()?);
                if let Some(c) = kept.filter(|_| pos > 0) {
                    k.slice_set(&c.k.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
                    v.slice_set(&c.v.narrow(2, 0, pos)?.contiguous()?, 2, 0)?;
                }
                LayerKv {
                    k,
                    v,
                    len: pos,
                    owner: Arc::new(()),
                }
            }
        };
        Ok(slot.insert(LayerKv { len: pos, ..c }))
    }
}

/// One rank's KV cache and rotary tables for [`TpLlama::forward`].
#[derive(Debug, Clone)]
pub struct TpCache {
    kvs: Vec<Option<LayerKv>>,
    cos: Tensor,
    sin: Tensor,
}

impl TpCache {
    /// An empty cache for `config`, its rotary tables in `dtype` on `device` (as
    /// candle-transformers' `llama::Cache::new` computes them).
    pub fn new(config: &Config, dtype: DType, device: &Device) -> candle_core::Result<TpCache> {
        let head_dim = config.hidden_size / config.num_attention_heads;
        let base: Vec<f32> = (0..head_dim)
            .step_by(2)
            .map(|i| 1f32 / config.rope_theta.powf(i as f32 / head_dim as f32))
            .collect();
        let theta = match &config.rope_scaling {
            None
            | Some(Llama3RopeConfig {
                rope_type: Llama3RopeType::Default,
                ..
            }) => base,
            Some(s) => base.into_iter().map(|f| llama3_scaled(s, f)).collect(),
        };
        let n = theta.len();
        let theta = Tensor::new(theta, device)?;
        let idx_theta = Tensor::arange(0, config.max_position_embeddings as u32, device)?
            .to_dtype(DType::F32)?
            .reshape((config.max_position_embeddings, 1))?
            .matmul(&theta.reshape((1, n))?)?;
        Ok(TpCache {
            kvs: vec![None; config.num_hidden_layers],
            cos: idx_theta.cos()?.to_dtype(dtype)?,
            sin: idx_theta.sin()?.to_dtype(dtype)?,
        })
    }
}

/// Llama 3's frequency scaling of one rotary frequency.
fn llama3_scaled(s: &Llama3RopeConfig, freq: f32) -> f32 {
    let orig = s.original_max_position_embeddings as f32;
    let low = orig / s.low_freq_factor;
    let high = orig / s.high_freq_factor;
    let wavelen = 2. * PI / freq;
    if wavelen < high {
        freq
    } else if wavelen > low {
        freq / s.factor
    } else {
        let smooth =
            (orig / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        (1. - smooth) * freq / s.factor + smooth * freq
    }
}

/// One rank's share of a layer's attention.
#[derive(Debug, Clone)]
struct Attention {
    /// The q, k and v projections' blocks, stacked.
    qkv: StackedColumns,
    o: RowParallelLinear,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    flash: bool,
    /// llama.cpp's q/k row order (GGUF): the interleaved rotary embedding.
    interleaved: bool,
}

impl Attention {
    /// This rank's partial sum of the attention's output (before the all-reduce).
    fn forward(
        &self,
        x: &Tensor,
        pos: usize,
        layer: usize,
        cache: &mut TpCache,
    ) -> candle_core::Result<Tensor> {
        let (b, seq, _) = x.dims3()?;
        let split = |t: Tensor, heads| {
            t.reshape((b, seq, heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (joined, qkv) = self.qkv.forward_joined(x)?;
        let scale = 1f32 / (self.head_dim as f32).sqrt();
        let shape = (b, self.kv_heads, seq, self.head_dim);
        if self.flash {
            // The rotation, the cache writes and the attention in one call, on the heads as
            // the product lays them out ((b, seq, heads, head_dim) views).
            let heads = |t: &Tensor, n| t.reshape((b, seq, n, self.head_dim));
            let q = heads(&qkv[0], self.heads)?;
            let (k, v) = (
                heads(&qkv[1], self.kv_heads)?,
                heads(&qkv[2], self.kv_heads)?,
            );
            let kv = LayerKv::reserve(&mut cache.kvs[layer], shape, &k, pos)?;
            let rotary = candle_flash_attn::Rotary {
                cos: &cache.cos,
                sin: &cache.sin,
                interleaved: self.interleaved,
            };
            let y = candle_flash_attn::flash_attn_with_kvcache(
                &q,
                &kv.k.transpose(1, 2)?,
                &kv.v.transpose(1, 2)?,
                &k,
                &v,
                Some(rotary),
                pos,
                scale,
                seq > 1,
            )?;
            kv.len = pos + seq;
            // This rank's partial sum: the caller all-reduces it with the residual add and norm.
            return self
                .o
                .partial(&y.reshape((b, seq, self.heads * self.head_dim))?);
        }
        let v = qkv[2]
            .reshape((b, seq, self.kv_heads, self.head_dim))?
            .transpose(1, 2)?;
        let cos = cache.cos.narrow(0, pos, seq)?;
        let sin = cache.sin.narrow(0, pos, seq)?;
        let rope = if self.interleaved {
            candle_nn::rotary_emb::rope_i
        } else {
            candle_nn::rotary_emb::rope
        };
        let (q, k) = match joined {
            // One token of one sequence: q and k lie side by side in the stacked product, so
            // one rotary launch takes both heads' sets ((1, heads + kv heads, 1, d)), and q
            // and k are contiguous views of its output.
            Some(all) if b == 1 && seq == 1 => {
                let heads = self.heads + self.kv_heads;
                let qk = all.narrow(D::Minus1, 0, heads * self.head_dim)?.reshape((
                    1,
                    heads,
                    1,
                    self.head_dim,
                ))?;
                let qk = rope(&qk, &cos, &sin)?;
                (
                    qk.narrow(1, 0, self.heads)?,
                    qk.narrow(1, self.heads, self.kv_heads)?,
                )
            }
            _ => (
                rope(&split(qkv[0].clone(), self.heads)?, &cos, &sin)?,
                rope(&split(qkv[1].clone(), self.kv_heads)?, &cos, &sin)?,
            ),
        };
        let kv = LayerKv::reserve(&mut cache.kvs[layer], shape, &k, pos)?;
        kv.k.slice_set(&k.contiguous()?, 2, pos)?;
        kv.v.slice_set(&v.contiguous()?, 2, pos)?;
        kv.len = pos + seq;
        let (k, v) = (kv.k.narrow(2, 0, kv.len)?, kv.v.narrow(2, 0, kv.len)?);
        let y = {
            let rep = self.heads / self.kv_heads;
            let k = candle_transformers::utils::repeat_kv(k, rep)?;
            let v = candle_transformers::utils::repeat_kv(v, rep)?;
            let dtype = q.dtype();
            let (q, k, v) = (
                q.to_dtype(DType::F32)?,
                k.to_dtype(DType::F32)?,
                v.to_dtype(DType::F32)?,
            );
            let att = (q.matmul(&k.t()?)? / (self.head_dim as f64).sqrt())?;
            let att = if seq == 1 {
                att
            } else {
                let mask = candle_transformers::utils::build_causal_mask(seq, pos, x.device())?
                    .broadcast_as(att.shape())?;
                let ninf = Tensor::new(f32::NEG_INFINITY, x.device())?.broadcast_as(att.shape())?;
                mask.where_cond(&ninf, &att)?
            };
            let att = candle_nn::ops::softmax_last_dim(&att)?;
            att.matmul(&v.contiguous()?)?.to_dtype(dtype)?
        };
        let y = y
            .transpose(1, 2)?
            .reshape((b, seq, self.heads * self.head_dim))?;
        // This rank's partial sum: the caller all-reduces it with the residual add and norm.
        self.o.partial(&y)
    }
}

/// One rank's share of a layer's MLP.
#[derive(Debug, Clone)]
struct Mlp {
    /// The gate and up projections' blocks, stacked (gate first).
    gate_up: StackedColumns,
    down: RowParallelLinear,
}

impl Mlp {
    /// This rank's partial sum of the MLP's output (before the all-reduce).
    fn partial(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (all, gate_up) = self.gate_up.forward_joined(x)?;
        let h = match all {
            // Gate and up side by side in one product: SwiGLU's gate in one operation.
            Some(all) if gate_up[0].dims() == gate_up[1].dims() => candle_nn::ops::swiglu(&all)?,
            _ => (candle_nn::ops::silu(&gate_up[0])? * &gate_up[1])?,
        };
        self.down.partial(&h)
    }
}

/// One decoder layer.
#[derive(Debug, Clone)]
struct Block {
    norm_1: RmsNorm,
    attn: Attention,
    norm_2: RmsNorm,
    mlp: Mlp,
}

/// One rank's share of a llama model (see the module comment).
#[derive(Debug, Clone)]
pub struct TpLlama {
    embed: VocabEmbedding,
    blocks: Vec<Block>,
    norm: RmsNorm,
    lm_head: VocabHead,
    config: Config,
    world: Arc<dyn World>,
}

impl TpLlama {
    /// Loads this rank's share of a llama in the Hugging Face layout from `weights` (each
    /// split tensor read as this rank's block only), the output head split by vocabulary and
    /// the embeddings whole ([`VocabSplit::HEAD`]). The head counts must divide evenly over the
    /// world ([`TpError::Heads`]), and so must the split tensors ([`TpError::UnevenSplit`] names
    /// the first that does not; from a GGUF file, [`TpError::BlockSplit`] a row-parallel weight
    /// whose columns do not split into whole quantized blocks).
    pub fn load(
        weights: &ShardedWeights,
        config: &Config,
        world: Arc<dyn World>,
    ) -> Result<TpLlama, TpError> {
        TpLlama::load_with(weights, config, world, VocabSplit::default())
    }

    /// [`TpLlama::load`] with the embeddings and the output head split as `vocab` says.
    pub fn load_with(
        weights: &ShardedWeights,
        config: &Config,
        world: Arc<dyn World>,
        vocab: VocabSplit,
    ) -> Result<TpLlama, TpError> {
        let shard = weights.shard();
        if (shard.rank, shard.world_size) != (world.rank(), world.world_size()) {
            return Err(TpError::BadRank {
                rank: world.rank(),
                world_size: world.world_size(),
            });
        }
        let heads = shard.heads("num_attention_heads", config.num_attention_heads)?;
        let kv_heads = shard.heads("num_key_value_heads", config.num_key_value_heads)?;
        let (h, i, v) = (
            config.hidden_size,
            config.intermediate_size,
            config.vocab_size,
        );
        let head_dim = h / config.num_attention_heads;
        let kv = head_dim * config.num_key_value_heads;
        let get = |name: &str, full: &[usize]| weights.get(name, full, Split::of_llama(name));
        let linear = |name: &str, full: &[usize]| weights.linear(name, full, Split::of_llama(name));
        let norm = |name: &str| -> Result<RmsNorm, TpError> {
            Ok(RmsNorm::new(get(name, &[h])?, config.rms_norm_eps))
        };
        let mut blocks = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("model.layers.{l}.");
            let cols = |parts: &[(&str, &[usize])]| -> Result<StackedColumns, TpError> {
                let weights = parts
                    .iter()
                    .map(|(t, full)| linear(&format!("{p}{t}"), full))
                    .collect::<Result<Vec<_>, TpError>>()?;
                Ok(StackedColumns::from_weights(weights)?)
            };
            let row = |t: &str, full: &[usize]| -> Result<RowParallelLinear, TpError> {
                Ok(RowParallelLinear::from_weight(
                    linear(&format!("{p}{t}"), full)?,
                    world.clone(),
                )?)
            };
            blocks.push(Block {
                norm_1: norm(&format!("{p}input_layernorm.weight"))?,
                attn: Attention {
                    qkv: cols(&[
                        (
                            "self_attn.q_proj.weight",
                            &[head_dim * config.num_attention_heads, h],
                        ),
                        ("self_attn.k_proj.weight", &[kv, h]),
                        ("self_attn.v_proj.weight", &[kv, h]),
                    ])?,
                    o: row(
                        "self_attn.o_proj.weight",
                        &[h, head_dim * config.num_attention_heads],
                    )?,
                    heads,
                    kv_heads,
                    head_dim,
                    flash: config.use_flash_attn,
                    interleaved: weights.rope_interleaved(),
                },
                norm_2: norm(&format!("{p}post_attention_layernorm.weight"))?,
                mlp: Mlp {
                    gate_up: cols(&[
                        ("mlp.gate_proj.weight", &[i, h]),
                        ("mlp.up_proj.weight", &[i, h]),
                    ])?,
                    down: row("mlp.down_proj.weight", &[h, i])?,
                },
            });
            tracing::debug!(layer = l, rank = shard.rank, "tp llama: layer loaded");
        }
        let range = |name: &str, split: Split| -> Result<std::ops::Range<usize>, TpError> {
            Ok(split.local(shard, name, &[v, h])?.1.unwrap_or(0..v))
        };
        let embed_name = "model.embed_tokens.weight";
        let embed_w = weights.get(embed_name, &[v, h], vocab.embeddings())?;
        let embed = VocabEmbedding::new(
            embed_w.clone(),
            range(embed_name, vocab.embeddings())?,
            v,
            world.clone(),
        )?;
        let head_name = if config.tie_word_embeddings {
            embed_name
        } else {
            "lm_head.weight"
        };
        let head_w = if head_name == embed_name
            && vocab.embeddings() == vocab.lm_head()
            && weights.gguf().is_none()
        {
            // Tied, split alike, dense: the embedding's block is the head's.
            ParallelWeight::Dense(embed_w)
        } else {
            weights.linear(head_name, &[v, h], vocab.lm_head())?
        };
        let lm_head = VocabHead::new(head_w, range(head_name, vocab.lm_head())?, v, world.clone())?;
        Ok(TpLlama {
            embed,
            blocks,
            norm: norm("model.norm.weight")?,
            lm_head,
            config: config.clone(),
            world,
        })
    }

    /// The config the model was loaded with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The world the model is split over.
    pub fn world(&self) -> &Arc<dyn World> {
        &self.world
    }

    /// The f32 logits `(batch, vocab)` of the last position of `tokens` `(batch, seq)` at
    /// position `pos`, through the KV cache; the same on every rank. Every rank must call it
    /// with the same tokens (the collectives pair up call by call). Waits for this step's
    /// collectives with their timeout, so a rank that died is an error here.
    pub fn forward(
        &self,
        tokens: &Tensor,
        pos: usize,
        cache: &mut TpCache,
    ) -> candle_core::Result<Tensor> {
        let (_, seq) = tokens.dims2()?;
        // Each row-parallel output's all-reduce runs with the residual add and the norm after
        // it (`World::all_reduce_add_rms_norm`: one launch with candle-rocm's one-shot kernel,
        // else the all-reduce and `add_rms_norm`); `pending` is the last MLP's partial output.
        let add_norm = |x: &Tensor, residual: &Tensor, norm: &RmsNorm| {
            self.world
                .all_reduce_add_rms_norm(x, residual, norm.weight(), norm.eps() as f32)
        };
        let mut x = self.embed.forward(tokens)?;
        let mut pending: Option<Tensor> = None;
        for (l, block) in self.blocks.iter().enumerate() {
            let (residual, h) = match pending.take() {
                Some(mlp) => add_norm(&mlp, &x, &block.norm_1)?,
                None => {
                    let h = block.norm_1.forward(&x)?;
                    (x, h)
                }
            };
            let y = block.attn.forward(&h, pos, l, cache)?;
            let (x1, h) = add_norm(&y, &residual, &block.norm_2)?;
            pending = Some(block.mlp.partial(&h)?);
            x = x1;
        }
        let x = match pending {
            Some(mlp) => add_norm(&mlp, &x, &self.norm)?.1,
            None => self.norm.forward(&x)?,
        };
        let x = x.i((.., seq - 1, ..))?.contiguous()?;
        let logits = self.lm_head.forward(&x)?.to_dtype(DType::F32)?;
        self.world.wait()?;
        Ok(logits)
    }
}
