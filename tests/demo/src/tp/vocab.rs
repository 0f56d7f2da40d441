//! The embeddings and the output head split by vocabulary rows over the ranks.
//!
//! Until these, the tensor-parallel llama held both whole on every rank: two `vocab x hidden`
//! tables (2 x 262 MB in f16 at Llama 2's 32000 x 4096, 2 x 2.1 GB at Llama 3 70B's
//! 128256 x 8192), the same on every GPU, and every rank computed the whole output head each
//! step. Split by vocabulary rows ([`Split::Vocab`]: blocks of `ceil(vocab / world)` rows, the
//! last rank's shorter, so any vocabulary splits):
//!
//! - [`VocabEmbedding`]: each rank looks up the ids that fall in its block and writes zeros for
//!   the others; an all-reduce (sum) gives every rank the whole lookup. Exact: every position
//!   is one rank's row plus zeros. Costs one all-reduce of `(batch, seq, hidden)` a step (a
//!   few KB while decoding) and saves `(world - 1) / world` of the table.
//! - [`VocabHead`]: each rank multiplies by its block of the output weight, giving its block
//!   of the logits; an all-gather lays the blocks end to end (padded to the block size, so the
//!   first `vocab` entries are the logits). Saves the same share of the head's weights and of
//!   its product (the largest single matrix of a decode step), for one all-gather of
//!   `(batch, vocab)` logits.
//!
//! Ids outside the vocabulary are zeros rather than an error (no rank holds them).
//! [`VocabSplit`] chooses per table. The default, [`VocabSplit::HEAD`], splits the output head
//! and keeps the embeddings whole: the lookup is no product to share, and its mask operations
//! and all-reduce at the start of every decode step cost more than the table's memory is worth
//! (a 7B decode step on two GPUs: 2.76 ms with the embeddings whole against 2.78-2.88 split,
//! bench/results of 2026-11-28; the table is 2% of a 7B model's f16 weights, but from a GGUF
//! file it is dequantized to the activations' f32: 524 MB on every rank at 7B, about an eighth of
//! a q4_K model). [`VocabSplit::SPLIT`] splits both, where memory is what counts;
//! [`VocabSplit::WHOLE`] keeps both whole.

use std::ops::Range;
use std::sync::Arc;

use candle_core::{DType, Module, Tensor};
use candle_nn::Embedding;

use super::linear::{ParallelWeight, Proj, World};
use super::shard::Split;

/// Which vocabulary-sized tables [`super::TpLlama`] splits over the ranks (see the module
/// comment); the output head only by default ([`VocabSplit::HEAD`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VocabSplit {
    /// The token embeddings: split, with an all-reduce after the lookup.
    pub embeddings: bool,
    /// The output head: split, with an all-gather of the logits.
    pub lm_head: bool,
}

impl VocabSplit {
    /// Both tables whole on every rank (the layout before the split; no collectives).
    pub const WHOLE: VocabSplit = VocabSplit {
        embeddings: false,
        lm_head: false,
    };

    /// Both tables split.
    pub const SPLIT: VocabSplit = VocabSplit {
        embeddings: true,
        lm_head: true,
    };

    /// The output head split, the embeddings whole on every rank (the default).
    pub const HEAD: VocabSplit = VocabSplit {
        embeddings: false,
        lm_head: true,
    };

    /// How the embeddings are split.
    pub fn embeddings(self) -> Split {
        if self.embeddings {
            Split::Vocab
        } else {
            Split::Whole
        }
    }

    /// How the output head is split.
    pub fn lm_head(self) -> Split {
        if self.lm_head {
            Split::Vocab
        } else {
            Split::Whole
        }
    }
}

impl Default for VocabSplit {
    fn default() -> Self {
        VocabSplit::HEAD
    }
}

/// Token embeddings whose rows `range` (of `vocab`) this rank holds (the whole table when the
/// range is the whole vocabulary).
#[derive(Debug, Clone)]
pub struct VocabEmbedding {
    embedding: Embedding,
    range: Range<usize>,
    vocab: usize,
    /// The block's first and last id, u32 scalars on the table's device (no host copy a step).
    first: Tensor,
    last: Tensor,
    world: Arc<dyn World>,
}

impl VocabEmbedding {
    /// The lookup over this rank's rows `range` of a vocabulary of `vocab`: `weight` is
    /// `(range.len(), hidden)`.
    pub fn new(
        weight: Tensor,
        range: Range<usize>,
        vocab: usize,
        world: Arc<dyn World>,
    ) -> candle_core::Result<Self> {
        let (rows, hidden) = weight.dims2()?;
        if rows != range.len() || range.end > vocab || rows == 0 || vocab > u32::MAX as usize {
            candle_core::bail!(
                "vocab embedding: a block of {rows} rows for the rows {range:?} of {vocab}"
            );
        }
        let device = weight.device().clone();
        Ok(VocabEmbedding {
            first: Tensor::new(range.start as u32, &device)?,
            last: Tensor::new((range.end - 1) as u32, &device)?,
            embedding: Embedding::new(weight, hidden),
            range,
            vocab,
            world,
        })
    }

    /// Whether this rank holds every row (no all-reduce).
    pub fn is_whole(&self) -> bool {
        self.range.len() == self.vocab
    }

    /// This rank's rows of the lookup of `ids` (any shape, u32): the embedding for the ids in
    /// its block, zeros for the others; the whole lookup is the sum over the ranks.
    pub fn partial(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        if self.is_whole() {
            return self.embedding.forward(ids);
        }
        let ids = ids.to_dtype(DType::U32)?;
        // Clamped into the block before the subtraction, so no id wraps below zero; an id is
        // this rank's when clamping left it alone.
        let clamped = ids
            .broadcast_maximum(&self.first)?
            .broadcast_minimum(&self.last)?;
        let inside = clamped.eq(&ids)?;
        let rows = self
            .embedding
            .forward(&clamped.broadcast_sub(&self.first)?)?;
        let mask = inside
            .unsqueeze(inside.rank())?
            .broadcast_as(rows.shape())?;
        mask.where_cond(&rows, &rows.zeros_like()?)
    }
}

impl Module for VocabEmbedding {
    fn forward(&self, ids: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.partial(ids)?;
        if self.is_whole() {
            return Ok(x);
        }
        self.world.all_reduce_sum(&x)
    }
}

/// The output head whose weight rows `range` (of `vocab`) this rank holds.
#[derive(Debug, Clone)]
pub struct VocabHead {
    proj: Proj,
    range: Range<usize>,
    block: usize,
    vocab: usize,
    world: Arc<dyn World>,
}

impl VocabHead {
    /// The head over this rank's rows `range` of a vocabulary of `vocab`, split in blocks of
    /// `ceil(vocab / world)` rows ([`super::Shard::vocab_range`]), or whole (`range` the whole
    /// vocabulary); `weight` is `(range.len(), hidden)`, dense or quantized.
    pub fn new(
        weight: ParallelWeight,
        range: Range<usize>,
        vocab: usize,
        world: Arc<dyn World>,
    ) -> candle_core::Result<Self> {
        let block = if range.len() == vocab {
            vocab
        } else {
            vocab.div_ceil(world.world_size().max(1))
        };
        if range.is_empty() || range.len() > block || range.end > vocab {
            candle_core::bail!(
                "vocab head: rows {range:?} of {vocab} in blocks of {block} over {} ranks",
                world.world_size()
            );
        }
        Ok(VocabHead {
            proj: Proj::new(weight)?,
            range,
            block,
            vocab,
            world,
        })
    }

    /// Whether this rank holds every row (no all-gather).
    pub fn is_whole(&self) -> bool {
        self.range.len() == self.vocab
    }

    /// This rank's block of the logits of `x` `(batch, hidden)`: `(batch, range.len())`.
    pub fn partial(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.proj.forward(x)
    }

    /// The whole logits `(batch, vocab)` from every rank's block, each `(batch, rows)`
    /// gathered in rank order: what [`Module::forward`] does after [`Self::partial`].
    pub fn gather(&self, part: &Tensor) -> candle_core::Result<Tensor> {
        if self.is_whole() {
            return Ok(part.clone());
        }
        let (batch, rows) = part.dims2()?;
        // (rows, batch), padded to the block: the blocks gathered end to end are the vocabulary.
        let mut t = part.t()?.contiguous()?;
        if rows < self.block {
            let pad = Tensor::zeros((self.block - rows, batch), t.dtype(), t.device())?;
            t = Tensor::cat(&[&t, &pad], 0)?;
        }
        let all = self.world.all_gather(&t)?;
        all.narrow(0, 0, self.vocab)?.t()?.contiguous()
    }
}

impl Module for VocabHead {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.gather(&self.partial(x)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::tp::{Shard, Solo};
    use candle_core::Device;
    use candle_nn::Linear;

    /// A world that only records: `partial` is what these tests sum or gather themselves.
    fn solo() -> Arc<dyn World> {
        Arc::new(Solo)
    }

    /// For every world size 1..4 and vocabularies that divide and that do not: the ranks'
    /// partial lookups sum to the whole table's lookup exactly (ids from every block, repeated,
    /// in a 2-D batch), and the ranks' head blocks, laid end to end, are the whole head's
    /// logits.
    #[test]
    fn partial_lookups_sum_and_head_blocks_gather_to_the_whole() {
        let dev = &Device::Cpu;
        let hidden = 6;
        for vocab in [12usize, 13, 7] {
            let table = Tensor::randn(0f32, 1., (vocab, hidden), dev).unwrap();
            let ids: Vec<u32> = (0..vocab as u32).rev().chain([0, 3, 3, 1]).collect();
            let n = ids.len();
            let ids = Tensor::from_vec(ids, (1, n), dev).unwrap();
            let whole = Embedding::new(table.clone(), hidden).forward(&ids).unwrap();
            let x = Tensor::randn(0f32, 1., (2, hidden), dev).unwrap();
            let logits = Linear::new(table.clone(), None).forward(&x).unwrap();
            for world in 1..=4usize {
                let mut sum = whole.zeros_like().unwrap();
                let mut blocks = Vec::new();
                for rank in 0..world {
                    let shard = Shard::new(rank, world).unwrap();
                    let r = shard.vocab_range("embed", vocab).unwrap();
                    let w = table.narrow(0, r.start, r.len()).unwrap();
                    let e = VocabEmbedding::new(w.clone(), r.clone(), vocab, solo()).unwrap();
                    let p = e.partial(&ids).unwrap();
                    assert_eq!(p.dims(), whole.dims());
                    sum = (sum + p).unwrap();
                    let h =
                        VocabHead::new(ParallelWeight::Dense(w), r.clone(), vocab, solo()).unwrap();
                    blocks.push(h.partial(&x).unwrap());
                }
                let d = (sum - &whole).unwrap().abs().unwrap().max_all().unwrap();
                assert_eq!(
                    d.to_scalar::<f32>().unwrap(),
                    0.0,
                    "vocab {vocab}, {world} ranks"
                );
                let cat = Tensor::cat(&blocks, 1).unwrap();
                let d = (cat - &logits).unwrap().abs().unwrap().max_all().unwrap();
                assert!(
                    d.to_scalar::<f32>().unwrap() < 1e-6,
                    "vocab {vocab}, {world} ranks"
                );
            }
        }
    }

    /// Ids outside the vocabulary are zeros on every rank; a whole table has no mask.
    #[test]
    fn ids_outside_every_block_are_zeros() {
        let dev = &Device::Cpu;
        let table = Tensor::ones((8, 3), DType::F32, dev).unwrap();
        let shard = Shard::new(1, 2).unwrap();
        let r = shard.vocab_range("embed", 8).unwrap();
        assert_eq!(r, 4..8);
        let e = VocabEmbedding::new(table.narrow(0, 4, 4).unwrap(), r, 8, solo()).unwrap();
        let ids = Tensor::new(&[0u32, 5, 9, 7], dev).unwrap();
        let got = e
            .partial(&ids)
            .unwrap()
            .sum(1)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(got, vec![0., 3., 0., 3.]);
        let whole = VocabEmbedding::new(table, 0..8, 8, solo()).unwrap();
        assert!(whole.is_whole() && !e.is_whole());
    }

    /// The vocabulary blocks: `ceil(vocab / world)` rows, the last shorter, every rank a row or
    /// a typed error.
    #[test]
    fn vocab_blocks_cover_the_vocabulary() {
        let r = |rank, world, vocab| Shard::new(rank, world).unwrap().vocab_range("v", vocab);
        assert_eq!(r(0, 1, 7).unwrap(), 0..7);
        assert_eq!(r(2, 3, 7).unwrap(), 6..7);
        assert_eq!(r(1, 4, 13).unwrap(), 4..8);
        assert_eq!(r(3, 4, 13).unwrap(), 12..13);
        assert_eq!(r(1, 2, 32000).unwrap(), 16000..32000);
        for (world, vocab) in [(4, 3), (4, 9), (3, 4)] {
            let e = r(0, world, vocab).unwrap_err();
            assert!(
                matches!(e, crate::tp::TpError::VocabSplit { vocab: v, world_size: w, .. }
                    if v == vocab && w == world),
                "{e}"
            );
        }
        assert_eq!(
            VocabSplit::default().embeddings(),
            Split::Whole,
            "embeddings whole by default"
        );
        assert_eq!(
            VocabSplit::default().lm_head(),
            Split::Vocab,
            "head split by default"
        );
        assert_eq!(VocabSplit::SPLIT.embeddings(), Split::Vocab);
        assert_eq!(VocabSplit::WHOLE.lm_head(), Split::Whole);
    }
}
