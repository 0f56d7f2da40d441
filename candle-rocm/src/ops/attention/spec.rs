//! What one attention call computes, checked before anything runs: the operands' shapes and
//! strides, how the sequences are batched (dense, variable-length, paged), the mask and the
//! score options. Host logic only: both the GPU kernels ([`super::forward`]) and the CPU
//! reference ([`super::host`]) take an [`AttentionSpec`], so a call that one accepts the other
//! accepts, and every bad argument is a typed error naming it before any launch.
//!
//! Semantics are candle-flash-attn 0.11's (flash-attention v2's): query `i` of a sequence with
//! `sq` queries and `sk` keys sits at key position `i + sk - sq` (bottom-right aligned), a
//! window `(left, right)` keeps keys `j` with `i + sk - sq - left <= j <= i + sk - sq + right`
//! (`None` unbounded; causal is `(None, Some(0))`), ALiBi adds `-slope[h] * |i + sk - sq - j|`
//! to the logit, a softcap `c` turns the logit `s * qk` into `c * tanh(s * qk / c)`, and a
//! query row with no key left attends to nothing (its output is zero).

use candle_core::{DType, Layout};

use crate::error::BackendError;
use crate::layout::{parameter_error, shape_error};

/// The largest head dimension the kernels take.
pub const MAX_HEAD_DIM: usize = 512;

/// The options of one call (candle-flash-attn's `FlashAttn` fields, less the tensors).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionOptions {
    /// Factor applied to `q k^T` before the softmax.
    pub softmax_scale: f32,
    /// Keys allowed to the left of the query's position (`None`: all).
    pub window_left: Option<usize>,
    /// Keys allowed to the right of the query's position (`None`: all; `Some(0)`: causal).
    pub window_right: Option<usize>,
    /// Gemma-style logit softcap (`None` or a value `<= 0`: none).
    pub softcap: Option<f32>,
}

/// Where a tensor's element `(sequence, position, head, dim)` lies, in elements from the
/// storage's start: `offset + seq * batch + pos * row + head * head_stride + dim` (the last
/// dim is contiguous). For variable-length tensors `batch` is 0 and `pos` runs over all tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Strides {
    /// Start offset of the view.
    pub offset: usize,
    /// Stride between sequences (dense) or cache blocks (paged); 0 for variable-length.
    pub batch: usize,
    /// Stride between positions (tokens).
    pub row: usize,
    /// Stride between heads.
    pub head: usize,
}

/// How the sequences of a call are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Batching {
    /// `(batch, seq, heads, d)` tensors: every sequence has `seqlen_q` queries and
    /// `seqlen_k` keys.
    Dense {
        /// Sequences.
        batch: usize,
        /// Queries per sequence.
        seqlen_q: usize,
        /// Keys per sequence.
        seqlen_k: usize,
    },
    /// `(total, heads, d)` tensors packing the sequences one after another; sequence `b`
    /// holds tokens `cu_q[b]..cu_q[b + 1]` of q and `cu_k[b]..cu_k[b + 1]` of k and v (for a
    /// paged cache, `cu_k` gives only the lengths).
    Varlen {
        /// Cumulative query lengths (`batch + 1` entries, from 0), as read from `seqlens_q`.
        cu_q: Vec<u32>,
        /// Cumulative key lengths, as read from `seqlens_k`.
        cu_k: Vec<u32>,
        /// The longest query sequence (the caller's `max_seqlen_q`, checked).
        max_seqlen_q: usize,
        /// The longest key sequence (the caller's `max_seqlen_k`, checked).
        max_seqlen_k: usize,
        /// The paged cache, when k and v are `(num_blocks, page_size, kv_heads, d)`.
        paged: Option<Paging>,
    },
}

/// A paged KV cache: key position `j` of sequence `b` lives in block
/// `table[b * max_blocks + j / page_size]`, row `j % page_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paging {
    /// Tokens per cache block.
    pub page_size: usize,
    /// Blocks in the cache (k's first dim).
    pub num_blocks: usize,
    /// Entries per sequence in the block table (its second dim).
    pub max_blocks: usize,
    /// The block table, row-major `(batch, max_blocks)`, as read from the tensor.
    pub table: Vec<u32>,
}

/// One checked attention call.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionSpec {
    /// Element type of q, k, v and the output.
    pub dtype: DType,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Head dimension (a multiple of 8, at most [`MAX_HEAD_DIM`]).
    pub head_dim: usize,
    /// Layout of q.
    pub q: Strides,
    /// Layout of k.
    pub k: Strides,
    /// Layout of v.
    pub v: Strides,
    /// How the sequences are laid out.
    pub batching: Batching,
    /// Scale, window, softcap.
    pub options: AttentionOptions,
    /// Whether per-head ALiBi slopes (f32, `heads` of them) are given.
    pub alibi: bool,
    /// Multimodal prefix ranges that bypass the window (candle-flash-attn's
    /// `mm_prefix_ranges`): a query at key position `p` and a key `j` both inside one range
    /// `[start, end)` of their sequence always see each other.
    pub mm_prefix: Option<MmPrefix>,
}

/// The `(batch, max_ranges, 2)` i32 ranges of [`AttentionSpec::mm_prefix`], read to the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MmPrefix {
    /// Ranges per sequence.
    pub max_ranges: usize,
    /// Row-major `(batch, max_ranges, 2)`: `[start, end)` pairs (an empty pair is unused).
    pub ranges: Vec<i32>,
}

impl AttentionSpec {
    /// Sequences in the call.
    pub fn batch(&self) -> usize {
        match &self.batching {
            Batching::Dense { batch, .. } => *batch,
            Batching::Varlen { cu_q, .. } => cu_q.len().saturating_sub(1),
        }
    }

    /// Queries and keys of sequence `b` (`b < batch()`).
    pub fn seqlens(&self, b: usize) -> (usize, usize) {
        match &self.batching {
            Batching::Dense {
                seqlen_q, seqlen_k, ..
            } => (*seqlen_q, *seqlen_k),
            Batching::Varlen { cu_q, cu_k, .. } => (
                (cu_q[b + 1] - cu_q[b]) as usize,
                (cu_k[b + 1] - cu_k[b]) as usize,
            ),
        }
    }

    /// The longest query and key sequences.
    pub fn max_seqlens(&self) -> (usize, usize) {
        match &self.batching {
            Batching::Dense {
                seqlen_q, seqlen_k, ..
            } => (*seqlen_q, *seqlen_k),
            Batching::Varlen {
                max_seqlen_q,
                max_seqlen_k,
                ..
            } => (*max_seqlen_q, *max_seqlen_k),
        }
    }

    /// Query tokens over all sequences (rows of the output).
    pub fn total_q(&self) -> usize {
        match &self.batching {
            Batching::Dense {
                batch, seqlen_q, ..
            } => batch * seqlen_q,
            Batching::Varlen { cu_q, .. } => cu_q.last().copied().unwrap_or(0) as usize,
        }
    }

    /// The window as the kernels take it, as flash-attention's host code makes it: a bound
    /// past the longest key sequence (or none) is `-1`, unbounded; then a window bounded on
    /// one side only gets the longest key sequence as its other bound (which cuts keys only
    /// where queries outnumber keys).
    pub fn window(&self) -> (i32, i32) {
        let (_, max_k) = self.max_seqlens();
        let w = |v: Option<usize>| {
            v.filter(|v| *v <= max_k)
                .and_then(|v| i32::try_from(v).ok())
                .unwrap_or(-1)
        };
        let (mut left, mut right) = (w(self.options.window_left), w(self.options.window_right));
        let k = i32::try_from(max_k).unwrap_or(i32::MAX);
        if left < 0 && right >= 0 {
            left = k;
        }
        if left >= 0 && right < 0 {
            right = k;
        }
        (left, right)
    }

    /// The softcap as the kernels take it (0: none).
    pub fn softcap(&self) -> f32 {
        self.options.softcap.filter(|c| *c > 0.0).unwrap_or(0.0)
    }
}

/// Checks that `what`'s layout has rank `rank` with a contiguous last dim; its dims.
pub fn dims<'a>(
    op: &str,
    what: &str,
    l: &'a Layout,
    rank: usize,
) -> Result<&'a [usize], BackendError> {
    let d = l.dims();
    if d.len() != rank {
        return Err(shape_error(
            op,
            format_args!("{what} must have rank {rank}, got shape {:?}", l.shape()),
        ));
    }
    if l.stride().last() != Some(&1) && d.last() != Some(&1) {
        return Err(shape_error(
            op,
            format_args!(
                "the last dim of {what} must be contiguous (strides {:?})",
                l.stride()
            ),
        ));
    }
    Ok(d)
}

/// Checks the head counts and head dimension shared by every kind of call.
pub fn check_heads(
    op: &str,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> Result<(), BackendError> {
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(shape_error(
            op,
            format_args!(
                "number of k/v heads {kv_heads} must divide number of heads in query {heads}"
            ),
        ));
    }
    if head_dim == 0 || head_dim % 8 != 0 || head_dim > MAX_HEAD_DIM {
        return Err(shape_error(
            op,
            format_args!(
                "head dimension must be a multiple of 8 between 8 and {MAX_HEAD_DIM} \
                 (got {head_dim})"
            ),
        ));
    }
    Ok(())
}

/// Checks cumulative lengths `cu` (named `what`) read from the device: `batch + 1` entries,
/// starting at 0, non-decreasing, the last within `total` tokens, none longer than `max`.
pub fn check_cu_seqlens(
    op: &str,
    what: &str,
    cu: &[u32],
    total: usize,
    max: usize,
) -> Result<(), BackendError> {
    if cu.len() < 2 {
        return Err(parameter_error(
            op,
            format_args!("{what} should have a len >= 2, got {}", cu.len()),
        ));
    }
    if cu[0] != 0 {
        return Err(parameter_error(
            op,
            format_args!("{what} must start at 0, got {}", cu[0]),
        ));
    }
    for (b, w) in cu.windows(2).enumerate() {
        if w[1] < w[0] {
            return Err(parameter_error(
                op,
                format_args!("{what} decreases at sequence {b} ({} then {})", w[0], w[1]),
            ));
        }
        let len = (w[1] - w[0]) as usize;
        if len > max {
            return Err(parameter_error(
                op,
                format_args!("sequence {b} has {len} tokens in {what}, past the max of {max}"),
            ));
        }
    }
    let last = cu[cu.len() - 1] as usize;
    if last > total {
        return Err(parameter_error(
            op,
            format_args!("{what} ends at {last}, past the {total} tokens of the tensor"),
        ));
    }
    Ok(())
}

/// The [`Strides`] of a `(batch|blocks, seq, heads, d)` or `(total, heads, d)` layout.
pub fn strides(l: &Layout) -> Strides {
    let s = l.stride();
    match s.len() {
        4 => Strides {
            offset: l.start_offset(),
            batch: s[0],
            row: s[1],
            head: s[2],
        },
        3 => Strides {
            offset: l.start_offset(),
            batch: 0,
            row: s[0],
            head: s[1],
        },
        _ => Strides {
            offset: l.start_offset(),
            ..Strides::default()
        },
    }
}
