//! candle-flash-attn 0.11.1's API on this backend: the same functions with the same
//! arguments, layouts and semantics (flash-attention v2's: scaled dot-product attention
//! `softmax(q k^T * softmax_scale) v` without the score matrix, grouped-query heads, a causal or
//! sliding window aligned to the bottom-right, ALiBi, Gemma's logit softcap, variable-length
//! batches and a paged KV cache), re-exported as `candle_rocm::flash_attn` and by the
//! `candle-flash-attn` stand-in crate of this repository, so code written for CUDA runs
//! unchanged. Forward only, as upstream.
//!
//! Beyond upstream:
//! - f32 as well as f16 and bf16 (q, k and v share the dtype; the output has it too);
//! - flash-attention's `flash_attn_with_kvcache` ([`flash_attn_with_kvcache`]): a decoder
//!   step's attention over a KV cache the call extends in place, with the rotary embedding of
//!   q and the new keys (on the ROCm device one launch for the embedding and both cache
//!   writes, then the attention);
//! - the CPU: on `Device::Cpu` (and on another out-of-tree backend, through candle-core's CPU
//!   fallback) the functions compute the result on the host, in f64, where upstream fails;
//! - every bad argument is a typed error naming it (`q`, `k`, `v`, `alibi_slopes`,
//!   `seqlens_q`, `seqlens_k`, `block_table`, `mm_prefix_ranges`, `page_block_size`), checked
//!   on the host before any kernel runs: no out-of-range sequence length or block-table entry
//!   reaches the GPU. The sequence lengths, block table and prefix ranges are read to the host
//!   for that (a small copy per call).
//!
//! Head dims are multiples of 8 up to 512; k and v may have fewer heads than q (the count must
//! divide q's). A query row that sees no key (a causal mask with more queries than keys) gives
//! zeros.
//!
//! ```no_run
//! use candle_core::{DType, Tensor};
//!
//! let dev = candle_rocm::device(0)?;
//! let q = Tensor::randn(0f32, 1., (1, 128, 32, 64), &dev)?.to_dtype(DType::BF16)?;
//! let kv = Tensor::randn(0f32, 1., (1, 128, 8, 64), &dev)?.to_dtype(DType::BF16)?;
//! let y = candle_rocm::flash_attn::flash_attn(&q, &kv, &kv, 0.125, true)?;
//! assert_eq!(y.dims(), q.dims());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use candle_core::{Result, Tensor};

use crate::error::BackendError;

mod cache;
mod kvcache;
mod op;

pub use cache::reshape_and_cache;
pub use kvcache::{flash_attn_with_kvcache, kv_cache_dtype, Rotary};
pub use op::{FlashAttn, FlashAttnVarLen};

/// Fails naming the first of `others` (argument name, tensor) that is not on q's device.
fn same_device(op: &str, q: &Tensor, others: &[(&'static str, &Tensor)]) -> Result<()> {
    match others
        .iter()
        .find(|(_, t)| !t.device().same_device(q.device()))
    {
        None => Ok(()),
        Some((what, t)) => Err(BackendError::Invalid {
            op: op.to_string(),
            detail: format!(
                "{what} is on {} but q is on {}: every tensor of the call must be on q's device",
                t.device().location(),
                q.device().location()
            ),
        }
        .into()),
    }
}

/// Runs `op` on q, k and v after checking that every tensor is on q's device.
fn dense(q: &Tensor, k: &Tensor, v: &Tensor, op: FlashAttn) -> Result<Tensor> {
    let mut all = vec![("k", k), ("v", v)];
    all.extend(op.extras());
    same_device("flash-attn", q, &all)?;
    q.apply_op3(k, v, op)
}

/// [`dense`] for the variable-length op.
fn varlen(q: &Tensor, k: &Tensor, v: &Tensor, op: FlashAttnVarLen) -> Result<Tensor> {
    let mut all = vec![("k", k), ("v", v)];
    all.extend(op.extras());
    same_device("flash-attn-varlen", q, &all)?;
    q.apply_op3(k, v, op)
}

/// The window of a causal or unmasked call.
fn causal_window(causal: bool) -> (Option<usize>, Option<usize>) {
    (None, causal.then_some(0))
}

/// Flash attention, `softmax(q k^T * softmax_scale) v`, optionally causal.
///
/// * `q` - `(batch, seq_len_q, num_heads_q, head_size)`.
/// * `k`, `v` - `(batch, seq_len_kv, num_heads_kv, head_size)`; `num_heads_kv` divides
///   `num_heads_q` (multi-query and grouped-query attention).
///
/// The result has q's shape.
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    flash_attn_windowed(q, k, v, softmax_scale, None, causal.then_some(0))
}

/// [`flash_attn`] with a sliding window: query `i` (at key position `i + seq_len_kv -
/// seq_len_q`) sees the keys from `window_size_left` before to `window_size_right` after its
/// position (`None`: no limit). `(None, Some(0))` is the causal mask.
pub fn flash_attn_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    flash_attn_alibi_windowed_softcap_opt(
        q,
        k,
        v,
        None,
        softmax_scale,
        (window_size_left, window_size_right),
        None,
    )
}

/// [`flash_attn`] with ALiBi: `-alibi_slopes[h] * |position - key|` is added to each logit
/// of head `h`. `alibi_slopes` is f32 of shape `(num_heads_q)`.
pub fn flash_attn_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let (l, r) = causal_window(causal);
    flash_attn_alibi_windowed(q, k, v, alibi_slopes, softmax_scale, l, r)
}

/// [`flash_attn_windowed`] with ALiBi slopes (see [`flash_attn_alibi`]).
pub fn flash_attn_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    flash_attn_alibi_windowed_softcap_opt(
        q,
        k,
        v,
        Some(alibi_slopes),
        softmax_scale,
        (window_size_left, window_size_right),
        None,
    )
}

/// [`flash_attn_alibi_windowed`] with optional ALiBi slopes and Gemma's logit softcap: the
/// logit `softmax_scale * qk` becomes `softcap * tanh(softmax_scale * qk / softcap)` (a
/// `softcap` of 0 or less: none), before the ALiBi term is added.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    flash_attn_alibi_windowed_softcap_opt(
        q,
        k,
        v,
        alibi_slopes,
        softmax_scale,
        (window_size_left, window_size_right),
        Some(softcap),
    )
}

/// Every dense function: [`FlashAttn`] with these fields.
fn flash_attn_alibi_windowed_softcap_opt(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    (window_size_left, window_size_right): (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> Result<Tensor> {
    let op = FlashAttn {
        softmax_scale,
        alibi_slopes: alibi_slopes.cloned(),
        window_size_left,
        window_size_right,
        softcap,
    };
    dense(q, k, v, op)
}

/// The sequence arguments of a variable-length call.
struct Seqs<'a> {
    seqlens_q: &'a Tensor,
    seqlens_k: &'a Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
}

/// Every variable-length function but the paged one: [`FlashAttnVarLen`] without a cache.
fn varlen_op(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    s: Seqs<'_>,
    alibi_slopes: Option<&Tensor>,
    softmax_scale: f32,
    (window_size_left, window_size_right): (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> Result<Tensor> {
    let op = FlashAttnVarLen {
        softmax_scale,
        max_seqlen_q: s.max_seqlen_q,
        max_seqlen_k: s.max_seqlen_k,
        seqlens_q: s.seqlens_q.clone(),
        seqlens_k: s.seqlens_k.clone(),
        block_table: None,
        mm_prefix_ranges: None,
        page_block_size: None,
        alibi_slopes: alibi_slopes.cloned(),
        window_size_left,
        window_size_right,
        softcap,
    };
    varlen(q, k, v, op)
}

/// Flash attention over variable-length sequences packed one after another.
///
/// * `q` - `(total_q, num_heads_q, head_size)`.
/// * `k`, `v` - `(total_kv, num_heads_kv, head_size)`.
/// * `seqlens_q`, `seqlens_k` - u32, the `batch_size + 1` cumulative lengths `0, len_1,
///   len_1 + len_2, ...` indexing q and k/v.
/// * `max_seqlen_q`, `max_seqlen_k` - the longest query and key sequence of the batch.
///
/// The result has q's shape; rows past the last sequence are zero.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let s = Seqs {
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    };
    varlen_op(
        (q, k, v),
        s,
        None,
        softmax_scale,
        causal_window(causal),
        None,
    )
}

/// [`flash_attn_varlen`] with a sliding window (see [`flash_attn_windowed`]), each sequence
/// aligned on its own lengths.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let s = Seqs {
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    };
    let window = (window_size_left, window_size_right);
    varlen_op((q, k, v), s, None, softmax_scale, window, None)
}

/// [`flash_attn_varlen_windowed`] over a paged KV cache.
///
/// * `k`, `v` - `(num_blocks, page_block_size, num_heads_kv, head_size)`.
/// * `seqlens_k` - cumulative key lengths; only each sequence's length is used.
/// * `block_table` - u32 or i32 `(batch_size, max_blocks)`: key `j` of sequence `b` is row
///   `j % page_block_size` of block `block_table[b][j / page_block_size]`. Every entry must
///   name a block of the cache (pad unused ones with 0).
/// * `mm_prefix_ranges` - optional i32 `(batch_size, max_ranges, 2)`: `[start, end)` key
///   ranges inside which queries and keys see each other whatever the window.
/// * `page_block_size` - k's dim 1, a multiple of 32.
/// * `softcap` - see [`flash_attn_alibi_windowed_softcap`].
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_paged_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    block_table: &Tensor,
    mm_prefix_ranges: Option<&Tensor>,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    page_block_size: usize,
    softcap: Option<f32>,
) -> Result<Tensor> {
    let op = FlashAttnVarLen {
        softmax_scale,
        max_seqlen_q,
        max_seqlen_k,
        seqlens_q: seqlens_q.clone(),
        seqlens_k: seqlens_k.clone(),
        block_table: Some(block_table.clone()),
        mm_prefix_ranges: mm_prefix_ranges.cloned(),
        page_block_size: Some(page_block_size),
        alibi_slopes: None,
        window_size_left,
        window_size_right,
        softcap,
    };
    varlen(q, k, v, op)
}

/// [`flash_attn_varlen`] with ALiBi slopes (see [`flash_attn_alibi`]).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let s = Seqs {
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    };
    let window = causal_window(causal);
    varlen_op(
        (q, k, v),
        s,
        Some(alibi_slopes),
        softmax_scale,
        window,
        None,
    )
}

/// [`flash_attn_varlen_windowed`] with ALiBi slopes (see [`flash_attn_alibi`]).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: &Tensor,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
) -> Result<Tensor> {
    let s = Seqs {
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    };
    let window = (window_size_left, window_size_right);
    varlen_op(
        (q, k, v),
        s,
        Some(alibi_slopes),
        softmax_scale,
        window,
        None,
    )
}

/// [`flash_attn_varlen_alibi_windowed`] with optional ALiBi slopes and a logit softcap (see
/// [`flash_attn_alibi_windowed_softcap`]).
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_alibi_windowed_softcap(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    alibi_slopes: Option<&Tensor>,
    seqlens_q: &Tensor,
    seqlens_k: &Tensor,
    max_seqlen_q: usize,
    max_seqlen_k: usize,
    softmax_scale: f32,
    window_size_left: Option<usize>,
    window_size_right: Option<usize>,
    softcap: f32,
) -> Result<Tensor> {
    let s = Seqs {
        seqlens_q,
        seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
    };
    let window = (window_size_left, window_size_right);
    varlen_op(
        (q, k, v),
        s,
        alibi_slopes,
        softmax_scale,
        window,
        Some(softcap),
    )
}
