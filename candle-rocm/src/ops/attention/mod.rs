//! Attention without the score matrix: flash attention (tiled online softmax) for dense,
//! variable-length and paged calls, split over the keys when a call has too few query tiles
//! to fill the GPU (flash decoding), on our `attention` kernels (`kernels/hip/attention.hip`).
//! [`spec`] checks a call, [`host`] is the CPU reference with the same semantics, and
//! [`forward`] runs it on the device.

pub mod host;
pub mod spec;

use crate::device::RocmDevice;
use crate::dtype::RocmStorageSlice as S;
use crate::error::BackendError;
use spec::AttentionSpec;

/// A device operand of a call besides q, k and v: a storage slice and the element its
/// contiguous view starts at.
pub type Extra<'a> = (&'a S, usize);

/// The device operands of a call besides q, k and v, each present when the spec says so.
#[derive(Clone, Copy, Default)]
pub struct Extras<'a> {
    /// `seqlens_q`, u32 (variable-length calls).
    pub cu_q: Option<Extra<'a>>,
    /// `seqlens_k`, u32 (variable-length calls).
    pub cu_k: Option<Extra<'a>>,
    /// The block table, u32 or i32 (paged calls).
    pub block_table: Option<Extra<'a>>,
    /// ALiBi slopes, f32, one per query head.
    pub alibi: Option<Extra<'a>>,
}

/// Runs the checked call `spec` on `dev`: the output, contiguous, with q's shape
/// (`(batch, seqlen_q, heads, head_dim)` dense, `(total_q, heads, head_dim)` variable-length).
pub fn forward(
    dev: &RocmDevice,
    spec: &AttentionSpec,
    q: &S,
    k: &S,
    v: &S,
    extras: &Extras<'_>,
) -> Result<S, BackendError> {
    let _ = (dev, spec, q, k, v, extras);
    Err(crate::layout::kernel_limit(
        "flash-attn",
        "the attention kernels are being written",
    ))
}
