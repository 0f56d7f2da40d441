//! [`Bert`]: a BERT encoder with two attention paths, chosen when it is loaded.
//!
//! - **matmul** (the CPU's default): candle-transformers' [`BertEncoder`], unchanged, on the
//!   padded batch, with an additive mask that stays finite in f16 and bf16
//!   ([`extended_attention_mask`]): per layer a `(batch, heads, seq, seq)` score tensor,
//!   scaled, masked, softmaxed, multiplied by the values.
//! - **flash** (the GPU's default): the batch's real tokens are packed one sequence after
//!   another (padding dropped), every layer runs on the packed `(tokens, hidden)` rows, and
//!   attention is [`flash_attn_varlen`] over the sequences' cumulative lengths, non-causal, with
//!   no mask and no score tensor; the last hidden states are scattered back to
//!   `(batch, seq, hidden)` with zeros at padding. candle-transformers' `BertLayer` keeps its
//!   parts private, so the layers are ours: the same ops on the same weights (three linear
//!   layers for q, k and v, the output projection and LayerNorm, the intermediate layer and its
//!   activation, the output layer and LayerNorm), only attention differs.
//!
//! What packing costs: the attention mask is read to the host once per forward pass (it comes
//! from the tokenizer on the host; the cumulative lengths, the packed positions and the
//! gather/scatter indices are built there and copied up, a few KiB), then one `index_select`
//! each for the token ids and token types before the embeddings and one `cat` of a zero row
//! plus one `index_select` of the hidden states after the last layer. A batch without padding
//! needs neither select. What it saves: every linear layer, norm and activation of every layer
//! skips the padding, and attention never materialises the score tensor. One more cost, in
//! candle-rocm rather than here: its varlen call reads the cumulative lengths back to the host
//! to check them, once per layer (a device synchronisation per layer on the GPU).
//!
//! This file is also compiled into the benchmark (`tests/bench/src/models.rs` includes it by
//! path), so that the model rows time this code: it uses only candle-core, candle-nn,
//! candle-transformers, candle-rocm and half, never the demo crate's other modules.

use candle_core::{bail, DType, Result, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, Module, VarBuilder};
use candle_rocm::flash_attn::flash_attn_varlen;
use candle_transformers::models::bert::{BertEncoder, Config, HiddenAct};

/// A BERT encoder: the embedding layer and either candle-transformers' [`BertEncoder`] (the
/// matmul path) or our packed flash-attention layers (see the module docs).
#[derive(Clone)]
pub struct Bert {
    word_embeddings: Embedding,
    position_embeddings: Embedding,
    token_type_embeddings: Embedding,
    layer_norm: LayerNorm,
    encoder: Encoder,
}

/// The layers of one of the two attention paths.
#[derive(Clone)]
enum Encoder {
    /// candle-transformers' encoder on the padded batch with the additive mask.
    Matmul(BertEncoder),
    /// Our layers on the packed real tokens, attention through `flash_attn_varlen`.
    Flash(Vec<FlashLayer>),
}

impl std::fmt::Debug for Bert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let layers = match &self.encoder {
            Encoder::Matmul(e) => e.layers.len(),
            Encoder::Flash(l) => l.len(),
        };
        f.debug_struct("Bert")
            .field("layers", &layers)
            .field("flash_attn", &self.flash_attn())
            .finish_non_exhaustive()
    }
}

impl Bert {
    /// Loads the weights (see [`Self::load_with`]) with flash attention on a GPU and the matmul
    /// path on the CPU, as the demo's llama decoder chooses.
    pub fn load(vb: VarBuilder, config: &Config) -> Result<Self> {
        let flash_attn = !vb.device().is_cpu();
        Self::load_with(vb, config, flash_attn)
    }

    /// Loads the weights, under the same prefixes `BertModel::load` accepts (none, `bert.`, or
    /// the config's `model_type`), with the attention path chosen: `flash_attn` packs the real
    /// tokens and calls candle-rocm's `flash_attn_varlen`, otherwise candle-transformers'
    /// encoder runs matmul, mask and softmax.
    pub fn load_with(vb: VarBuilder, config: &Config, flash_attn: bool) -> Result<Self> {
        let word = "embeddings.word_embeddings.weight";
        let mut prefixes = vec!["bert".to_string()];
        prefixes.extend(config.model_type.clone());
        let vb = prefixes
            .iter()
            .find(|p| !vb.contains_tensor(word) && vb.pp(p.as_str()).contains_tensor(word))
            .map_or(vb.clone(), |p| vb.pp(p.as_str()));
        let (e, h) = (vb.pp("embeddings"), config.hidden_size);
        let encoder = if flash_attn {
            let layers = (0..config.num_hidden_layers)
                .map(|i| FlashLayer::load(vb.pp(format!("encoder.layer.{i}")), config))
                .collect::<Result<Vec<_>>>()?;
            Encoder::Flash(layers)
        } else {
            Encoder::Matmul(BertEncoder::load(vb.pp("encoder"), config)?)
        };
        Ok(Bert {
            word_embeddings: candle_nn::embedding(config.vocab_size, h, e.pp("word_embeddings"))?,
            position_embeddings: candle_nn::embedding(
                config.max_position_embeddings,
                h,
                e.pp("position_embeddings"),
            )?,
            token_type_embeddings: candle_nn::embedding(
                config.type_vocab_size,
                h,
                e.pp("token_type_embeddings"),
            )?,
            layer_norm: candle_nn::layer_norm(h, config.layer_norm_eps, e.pp("LayerNorm"))?,
            encoder,
        })
    }

    /// Whether attention runs through flash attention (else the matmul path).
    pub fn flash_attn(&self) -> bool {
        matches!(self.encoder, Encoder::Flash(_))
    }

    /// The last hidden states `(batch, seq, hidden)` for `input_ids` and `token_type_ids`
    /// `(batch, seq)`, attending only where `attention_mask` `(batch, seq)` is not 0.
    ///
    /// The rows at padding mean nothing: the matmul path leaves there whatever attention over
    /// masked keys gives, the flash path zeros. Pool over the mask (as `mean_pool` does).
    /// Position ids are the columns, as in `BertModel`, whichever side the padding is on.
    pub fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: &Tensor,
        attention_mask: &Tensor,
    ) -> Result<Tensor> {
        let layers = match &self.encoder {
            Encoder::Matmul(encoder) => {
                let (_, seq_len) = input_ids.dims2()?;
                let positions = Tensor::arange(0u32, seq_len as u32, input_ids.device())?;
                let hidden = self.embed(input_ids, token_type_ids, &positions)?;
                let mask = extended_attention_mask(attention_mask, hidden.dtype())?;
                return encoder.forward(&hidden, &mask);
            }
            Encoder::Flash(layers) => layers,
        };
        let Some(packing) = Packing::from_mask(attention_mask)? else {
            // Padding only: nothing to run (and no empty tensors to upload).
            let (batch, seq) = attention_mask.dims2()?;
            let dtype = self.word_embeddings.embeddings().dtype();
            let hidden_size = self.word_embeddings.hidden_size();
            return Tensor::zeros((batch, seq, hidden_size), dtype, input_ids.device());
        };
        let ids = packing.pack(input_ids)?;
        let types = packing.pack(token_type_ids)?;
        let mut hidden = self.embed(&ids, &types, &packing.positions)?;
        for layer in layers {
            hidden = layer.forward(&hidden, &packing)?;
        }
        packing.unpack(&hidden)
    }

    /// The embedding layer: word + token-type + position embeddings, LayerNorm (no dropout at
    /// inference). `positions` broadcasts against the ids' shape.
    fn embed(&self, ids: &Tensor, types: &Tensor, positions: &Tensor) -> Result<Tensor> {
        let embeddings = (self.word_embeddings.forward(ids)?
            + self.token_type_embeddings.forward(types)?)?
        .broadcast_add(&self.position_embeddings.forward(positions)?)?;
        self.layer_norm.forward(&embeddings)
    }
}

/// The additive attention mask `(batch, 1, 1, seq)` in `dtype`: 0 where `mask` is 1, the
/// dtype's finite minimum where it is 0 (never `-inf`, so never `0 * -inf`).
pub fn extended_attention_mask(mask: &Tensor, dtype: DType) -> Result<Tensor> {
    let min = match dtype {
        DType::F16 => half::f16::MIN.to_f64(),
        DType::BF16 => half::bf16::MIN.to_f64(),
        DType::F32 => f64::from(f32::MIN),
        _ => f64::MIN,
    };
    // mask * (-min) + min == (1 - mask) * min, exactly 0 where mask is 1.
    mask.to_dtype(dtype)?
        .affine(-min, min)?
        .unsqueeze(1)?
        .unsqueeze(1)
}

/// Where a padded batch's real tokens go when packed one sequence after another, built on the
/// host from the attention mask.
struct Packing {
    batch: usize,
    seq: usize,
    /// The longest sequence.
    max_len: usize,
    /// `(total,)` u32: the flat index `row * seq + column` of every real token, in order;
    /// `None` when every token is real (packing is then a reshape).
    gather: Option<Tensor>,
    /// `(total,)` u32: every real token's position id (its column).
    positions: Tensor,
    /// `(batch + 1,)` u32: the cumulative sequence lengths, `0, len_0, len_0 + len_1, ...`.
    cu_seqlens: Tensor,
    /// `(batch * seq,)` u32: every padded slot's packed row, `total` (a zero row) at padding;
    /// `None` when every token is real.
    scatter: Option<Tensor>,
}

impl Packing {
    /// Reads `mask` `(batch, seq)` (non-zero: a real token) to the host and builds the indices
    /// on the mask's device; `None` when it holds no real token.
    fn from_mask(mask: &Tensor) -> Result<Option<Self>> {
        let (batch, seq) = mask.dims2()?;
        let dev = mask.device();
        if u32::try_from(batch * seq).is_err() {
            bail!("a BERT batch of {batch} x {seq} tokens is too large to pack: split it");
        }
        let rows: Vec<Vec<u32>> = mask.to_dtype(DType::U32)?.to_vec2()?;
        let (mut gather, mut positions) = (Vec::new(), Vec::new());
        let mut scatter = vec![u32::MAX; batch * seq];
        let mut cu_seqlens = Vec::with_capacity(batch + 1);
        cu_seqlens.push(0u32);
        let mut max_len = 0;
        for (r, row) in rows.iter().enumerate() {
            let start = gather.len();
            for (c, _) in row.iter().enumerate().filter(|(_, &m)| m != 0) {
                let flat = r * seq + c;
                scatter[flat] = gather.len() as u32;
                gather.push(flat as u32);
                positions.push(c as u32);
            }
            max_len = max_len.max(gather.len() - start);
            cu_seqlens.push(gather.len() as u32);
        }
        let total = gather.len();
        if total == 0 {
            return Ok(None);
        }
        let dense = total == batch * seq;
        for s in scatter.iter_mut().filter(|s| **s == u32::MAX) {
            *s = total as u32;
        }
        let upload = |v: &[u32]| Tensor::from_slice(v, v.len(), dev);
        Ok(Some(Packing {
            batch,
            seq,
            max_len,
            gather: if dense { None } else { Some(upload(&gather)?) },
            positions: upload(&positions)?,
            cu_seqlens: upload(&cu_seqlens)?,
            scatter: if dense { None } else { Some(upload(&scatter)?) },
        }))
    }

    /// The real tokens of `x` `(batch, seq)`, packed: `(total,)`.
    fn pack(&self, x: &Tensor) -> Result<Tensor> {
        let flat = x.flatten_all()?;
        match &self.gather {
            None => Ok(flat),
            Some(gather) => flat.index_select(gather, 0),
        }
    }

    /// `(total, hidden)` packed rows back to `(batch, seq, hidden)`, zeros at padding.
    fn unpack(&self, packed: &Tensor) -> Result<Tensor> {
        let hidden = packed.dim(1)?;
        let padded = match &self.scatter {
            None => packed.clone(),
            Some(scatter) => {
                let zero = Tensor::zeros((1, hidden), packed.dtype(), packed.device())?;
                Tensor::cat(&[packed, &zero], 0)?.index_select(scatter, 0)?
            }
        };
        padded.reshape((self.batch, self.seq, hidden))
    }
}

/// One BERT layer on packed tokens `(total, hidden)`, attention through `flash_attn_varlen`.
/// The same weights (and names) and ops as candle-transformers' `BertLayer`.
#[derive(Clone)]
struct FlashLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    attention_output: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    activation: HiddenAct,
    output: Linear,
    output_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
}

impl FlashLayer {
    /// Loads `encoder.layer.<i>` from `vb`.
    fn load(vb: VarBuilder, config: &Config) -> Result<Self> {
        let (h, heads) = (config.hidden_size, config.num_attention_heads);
        if heads == 0 || h % heads != 0 {
            bail!(
                "hidden_size {h} is not a multiple of num_attention_heads {heads}: \
                 not a BERT config flash attention can run"
            );
        }
        let (attention, eps) = (vb.pp("attention"), config.layer_norm_eps);
        Ok(FlashLayer {
            query: candle_nn::linear(h, h, attention.pp("self.query"))?,
            key: candle_nn::linear(h, h, attention.pp("self.key"))?,
            value: candle_nn::linear(h, h, attention.pp("self.value"))?,
            attention_output: candle_nn::linear(h, h, attention.pp("output.dense"))?,
            attention_norm: candle_nn::layer_norm(h, eps, attention.pp("output.LayerNorm"))?,
            intermediate: candle_nn::linear(
                h,
                config.intermediate_size,
                vb.pp("intermediate.dense"),
            )?,
            activation: config.hidden_act,
            output: candle_nn::linear(config.intermediate_size, h, vb.pp("output.dense"))?,
            output_norm: candle_nn::layer_norm(h, eps, vb.pp("output.LayerNorm"))?,
            heads,
            head_dim: h / heads,
        })
    }

    /// The layer on `x` `(total, hidden)`, the sequences of `packing`.
    fn forward(&self, x: &Tensor, packing: &Packing) -> Result<Tensor> {
        let (total, hidden) = x.dims2()?;
        let heads = |l: &Linear| l.forward(x)?.reshape((total, self.heads, self.head_dim));
        let (q, k, v) = (heads(&self.query)?, heads(&self.key)?, heads(&self.value)?);
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let context = flash_attn_varlen(
            &q,
            &k,
            &v,
            &packing.cu_seqlens,
            &packing.cu_seqlens,
            packing.max_len,
            packing.max_len,
            scale as f32,
            false,
        )?
        .reshape((total, hidden))?;
        let attention = self
            .attention_norm
            .forward(&(self.attention_output.forward(&context)? + x)?)?;
        let intermediate = self.intermediate.forward(&attention)?;
        let intermediate = match self.activation {
            HiddenAct::Gelu => intermediate.gelu_erf()?,
            HiddenAct::GeluApproximate => intermediate.gelu()?,
            HiddenAct::Relu => intermediate.relu()?,
        };
        self.output_norm
            .forward(&(self.output.forward(&intermediate)? + attention)?)
    }
}
