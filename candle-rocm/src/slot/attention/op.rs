//! The two custom ops behind [`super`]'s functions, [`FlashAttn`] (dense) and
//! [`FlashAttnVarLen`] (variable-length, optionally over a paged KV cache), with
//! candle-flash-attn 0.11.1's public fields. Each turns its operands' layouts and its options
//! into one checked [`AttentionSpec`] (every bad argument a typed error naming it), then runs
//! it on the ROCm device ([`forward`]) or on the host ([`host::attention_cpu`]): on
//! `Device::Cpu`, and for tensors of another out-of-tree backend, whose operands candle-core
//! copies to the host when `ext_fwd` declines them.

use candle_core::backend::BackendStorage;
use candle_core::ext::{ExtStorage, FusedResult};
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Storage, Tensor};

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::layout::{parameter_error, shape_error};
use crate::ops::attention::spec::{self, AttentionOptions, AttentionSpec, Batching};
use crate::ops::attention::spec::{MmPrefix, Paging};
use crate::ops::attention::{forward, host, Extra, Extras};
use crate::storage::RocmStorage;

/// Dense flash attention: q `(batch, seqlen_q, heads, head_dim)`, k and v
/// `(batch, seqlen_k, kv_heads, head_dim)`; the output has q's shape. candle-flash-attn's
/// `FlashAttn`, field for field.
pub struct FlashAttn {
    /// Factor applied to `q k^T` before the softmax (usually `1 / sqrt(head_dim)`).
    pub softmax_scale: f32,
    /// ALiBi slopes, f32 of shape `(heads)`, on q's device.
    pub alibi_slopes: Option<Tensor>,
    /// Keys allowed to the left of a query's position (`None`: all).
    pub window_size_left: Option<usize>,
    /// Keys allowed to the right of a query's position (`None`: all; `Some(0)`: causal).
    pub window_size_right: Option<usize>,
    /// Gemma-style logit softcap (`None` or a value `<= 0`: none).
    pub softcap: Option<f32>,
}

/// Variable-length flash attention: q `(total_q, heads, head_dim)`, k and v
/// `(total_k, kv_heads, head_dim)`, or with a block table a paged cache
/// `(num_blocks, page_block_size, kv_heads, head_dim)`; the output has q's shape.
/// candle-flash-attn's (private) `FlashAttnVarLen`, field for field, made public.
pub struct FlashAttnVarLen {
    /// Factor applied to `q k^T` before the softmax.
    pub softmax_scale: f32,
    /// The longest query sequence (each one is checked against it).
    pub max_seqlen_q: usize,
    /// The longest key sequence (each one is checked against it).
    pub max_seqlen_k: usize,
    /// Cumulative query lengths, u32 of shape `(batch + 1)`, from 0.
    pub seqlens_q: Tensor,
    /// Cumulative key lengths, u32 of shape `(batch + 1)`, from 0 (with a block table, only
    /// their differences, the sequences' key counts, are used).
    pub seqlens_k: Tensor,
    /// Physical cache blocks of each sequence, u32 or i32 of shape `(batch, max_blocks)`.
    pub block_table: Option<Tensor>,
    /// Per-sequence `[start, end)` key ranges, i32 of shape `(batch, max_ranges, 2)`, inside
    /// which queries and keys see each other whatever the window.
    pub mm_prefix_ranges: Option<Tensor>,
    /// Tokens per cache block (k's dim 1, a multiple of 32); required with a block table.
    pub page_block_size: Option<usize>,
    /// ALiBi slopes, f32 of shape `(heads)`.
    pub alibi_slopes: Option<Tensor>,
    /// Keys allowed to the left of a query's position (`None`: all).
    pub window_size_left: Option<usize>,
    /// Keys allowed to the right of a query's position (`None`: all; `Some(0)`: causal).
    pub window_size_right: Option<usize>,
    /// Gemma-style logit softcap (`None` or a value `<= 0`: none).
    pub softcap: Option<f32>,
}

const DENSE: &str = "flash-attn";
const VARLEN: &str = "flash-attn-varlen";

/// The dtype of q, k and v: one of f16, bf16, f32, shared by the three.
fn dtype(op: &'static str, q: DType, k: DType, v: DType) -> Result<DType, BackendError> {
    if !matches!(q, DType::F16 | DType::BF16 | DType::F32) {
        return Err(BackendError::UnsupportedDtype { op, dtype: q });
    }
    for (what, d) in [("k", k), ("v", v)] {
        if d != q {
            return Err(BackendError::Invalid {
                op: op.to_string(),
                detail: format!("{what} has dtype {d:?} but q has {q:?}: they must match"),
            });
        }
    }
    Ok(q)
}

/// Checks the ALiBi slopes: f32 of shape `(heads)`. Whether there are any.
fn check_alibi(op: &str, alibi: Option<&Tensor>, heads: usize) -> Result<bool, BackendError> {
    let Some(a) = alibi else {
        return Ok(false);
    };
    if a.dtype() != DType::F32 {
        return Err(parameter_error(
            op,
            format_args!("alibi_slopes must be f32, got {:?}", a.dtype()),
        ));
    }
    if a.dims() != [heads] {
        return Err(shape_error(
            op,
            format_args!(
                "alibi_slopes must have shape ({heads}), got {:?}",
                a.shape()
            ),
        ));
    }
    Ok(true)
}

/// The values of a 1-D u32 tensor `what`.
fn read_u32(op: &str, what: &str, t: &Tensor) -> Result<Vec<u32>, BackendError> {
    if t.dtype() != DType::U32 || t.rank() != 1 {
        return Err(parameter_error(
            op,
            format_args!(
                "{what} must be a 1-D u32 tensor, got {:?} of shape {:?}",
                t.dtype(),
                t.shape()
            ),
        ));
    }
    Ok(t.to_vec1::<u32>()?)
}

/// The options of either op.
fn options(
    softmax_scale: f32,
    window: (Option<usize>, Option<usize>),
    softcap: Option<f32>,
) -> AttentionOptions {
    AttentionOptions {
        softmax_scale,
        window_left: window.0,
        window_right: window.1,
        softcap,
    }
}

/// Query tokens (output rows) of a layout: its dims but the last two.
fn rows(l: &Layout) -> usize {
    let d = l.dims();
    d[..d.len().saturating_sub(2)].iter().product()
}

impl FlashAttn {
    /// The checked call for q, k and v of these dtypes and layouts.
    pub(super) fn spec(
        &self,
        q: (DType, &Layout),
        k: (DType, &Layout),
        v: (DType, &Layout),
    ) -> Result<AttentionSpec, BackendError> {
        let dtype = dtype(DENSE, q.0, k.0, v.0)?;
        let qd = spec::dims(DENSE, "q", q.1, 4)?;
        let kd = spec::dims(DENSE, "k", k.1, 4)?;
        let vd = spec::dims(DENSE, "v", v.1, 4)?;
        let (batch, seqlen_q, heads, head_dim) = (qd[0], qd[1], qd[2], qd[3]);
        if kd[0] != batch || kd[3] != head_dim {
            return Err(shape_error(
                DENSE,
                format_args!("shape mismatch q {:?} and k {:?}", q.1.shape(), k.1.shape()),
            ));
        }
        if vd != kd {
            return Err(shape_error(
                DENSE,
                format_args!("shape mismatch k {:?} and v {:?}", k.1.shape(), v.1.shape()),
            ));
        }
        spec::check_heads(DENSE, heads, kd[2], head_dim)?;
        let alibi = check_alibi(DENSE, self.alibi_slopes.as_ref(), heads)?;
        Ok(AttentionSpec {
            dtype,
            heads,
            kv_heads: kd[2],
            head_dim,
            q: spec::strides(q.1),
            k: spec::strides(k.1),
            v: spec::strides(v.1),
            batching: Batching::Dense {
                batch,
                seqlen_q,
                seqlen_k: kd[1],
            },
            options: options(
                self.softmax_scale,
                (self.window_size_left, self.window_size_right),
                self.softcap,
            ),
            alibi,
            mm_prefix: None,
        })
    }

    /// The tensors besides q, k and v, by argument name, for the device checks.
    pub(super) fn extras(&self) -> Vec<(&'static str, &Tensor)> {
        self.alibi_slopes
            .iter()
            .map(|a| ("alibi_slopes", a))
            .collect()
    }
}

impl FlashAttnVarLen {
    /// The checked call for q, k and v of these dtypes and layouts; reads the sequence
    /// lengths, the block table and the prefix ranges to the host.
    pub(super) fn spec(
        &self,
        q: (DType, &Layout),
        k: (DType, &Layout),
        v: (DType, &Layout),
    ) -> Result<AttentionSpec, BackendError> {
        let dtype = dtype(VARLEN, q.0, k.0, v.0)?;
        let qd = spec::dims(VARLEN, "q", q.1, 3)?;
        let paged = self.block_table.is_some();
        let rank = if paged { 4 } else { 3 };
        let (kd, vd) = match (k.1.dims().len(), v.1.dims().len()) {
            (r, s) if r == rank && s == rank => (
                spec::dims(VARLEN, "k", k.1, rank)?,
                spec::dims(VARLEN, "v", v.1, rank)?,
            ),
            (r, s) => {
                let what = if paged {
                    "paged k/v (with a block table)"
                } else {
                    "k/v"
                };
                return Err(shape_error(
                    VARLEN,
                    format_args!("{what} must have rank {rank}, got k: {r}, v: {s}"),
                ));
            }
        };
        let (total_q, heads, head_dim) = (qd[0], qd[1], qd[2]);
        let (kv_heads, kd_head) = (kd[rank - 2], kd[rank - 1]);
        if kd_head != head_dim {
            return Err(shape_error(
                VARLEN,
                format_args!("shape mismatch q {:?} and k {:?}", q.1.shape(), k.1.shape()),
            ));
        }
        if vd != kd {
            return Err(shape_error(
                VARLEN,
                format_args!("shape mismatch k {:?} and v {:?}", k.1.shape(), v.1.shape()),
            ));
        }
        spec::check_heads(VARLEN, heads, kv_heads, head_dim)?;
        let cu_q = read_u32(VARLEN, "seqlens_q", &self.seqlens_q)?;
        // One read (and one sync) when both are the same tensor, as in self-attention.
        let cu_k = if self.seqlens_k.id() == self.seqlens_q.id() {
            cu_q.clone()
        } else {
            read_u32(VARLEN, "seqlens_k", &self.seqlens_k)?
        };
        if cu_q.len() != cu_k.len() {
            return Err(parameter_error(
                VARLEN,
                format_args!(
                    "seqlens_q and seqlens_k should have the same number of elements ({} <> {})",
                    cu_q.len(),
                    cu_k.len()
                ),
            ));
        }
        spec::check_cu_seqlens(VARLEN, "seqlens_q", &cu_q, total_q, self.max_seqlen_q)?;
        // A paged cache is addressed through the block table: only the key counts matter.
        let total_k = if paged { usize::MAX } else { kd[0] };
        spec::check_cu_seqlens(VARLEN, "seqlens_k", &cu_k, total_k, self.max_seqlen_k)?;
        let batch = cu_q.len() - 1;
        let paging = match &self.block_table {
            Some(t) => Some(self.paging(t, kd, &cu_k)?),
            None => None,
        };
        let mm_prefix = match &self.mm_prefix_ranges {
            Some(t) => Some(mm_prefix(t, batch)?),
            None => None,
        };
        let alibi = check_alibi(VARLEN, self.alibi_slopes.as_ref(), heads)?;
        Ok(AttentionSpec {
            dtype,
            heads,
            kv_heads,
            head_dim,
            q: spec::strides(q.1),
            k: spec::strides(k.1),
            v: spec::strides(v.1),
            batching: Batching::Varlen {
                cu_q,
                cu_k,
                max_seqlen_q: self.max_seqlen_q,
                max_seqlen_k: self.max_seqlen_k,
                paged: paging,
            },
            options: options(
                self.softmax_scale,
                (self.window_size_left, self.window_size_right),
                self.softcap,
            ),
            alibi,
            mm_prefix,
        })
    }

    /// The paged cache of k's dims `kd` `(num_blocks, page_block_size, kv_heads, d)` and the
    /// block table `t`: its page size as the caller gave it, every entry a block of the cache,
    /// enough entries for each sequence of `cu_k`.
    fn paging(&self, t: &Tensor, kd: &[usize], cu_k: &[u32]) -> Result<Paging, BackendError> {
        let (num_blocks, page_size) = (kd[0], kd[1]);
        let Some(page) = self.page_block_size else {
            return Err(parameter_error(
                VARLEN,
                "paged flash-attn requires page_block_size",
            ));
        };
        if page != page_size {
            return Err(parameter_error(
                VARLEN,
                format_args!("page_block_size {page} does not match k's dim 1 (k has {kd:?})"),
            ));
        }
        if page % 32 != 0 {
            return Err(parameter_error(
                VARLEN,
                format_args!(
                    "paged flash-attn requires page_block_size to be a multiple of 32 \
                     (got {page})"
                ),
            ));
        }
        let batch = cu_k.len() - 1;
        let (rows, max_blocks) = match t.dims() {
            &[r, m] => (r, m),
            _ => (0, 0),
        };
        if t.rank() != 2 || rows != batch {
            return Err(shape_error(
                VARLEN,
                format_args!(
                    "block_table must have shape ({batch}, max_blocks), got {:?}",
                    t.shape()
                ),
            ));
        }
        let entries: Vec<i64> = match t.dtype() {
            DType::U32 => t
                .flatten_all()?
                .to_vec1::<u32>()?
                .into_iter()
                .map(i64::from)
                .collect(),
            DType::I32 => t
                .flatten_all()?
                .to_vec1::<i32>()?
                .into_iter()
                .map(i64::from)
                .collect(),
            d => {
                return Err(parameter_error(
                    VARLEN,
                    format_args!("block_table must be u32 or i32, got {d:?}"),
                ))
            }
        };
        let mut table = Vec::with_capacity(entries.len());
        for (n, e) in entries.into_iter().enumerate() {
            match u32::try_from(e) {
                Ok(b) if (b as usize) < num_blocks => table.push(b),
                _ => {
                    return Err(parameter_error(
                        VARLEN,
                        format_args!(
                            "block_table[{}, {}] = {e} is not a block of the cache (k has \
                             {num_blocks}); every entry must name one, unused ones too",
                            n / max_blocks.max(1),
                            n % max_blocks.max(1)
                        ),
                    ))
                }
            }
        }
        for (b, w) in cu_k.windows(2).enumerate() {
            let len = w[1].saturating_sub(w[0]) as usize;
            if len > max_blocks.saturating_mul(page) {
                return Err(parameter_error(
                    VARLEN,
                    format_args!(
                        "sequence {b} has {len} keys but block_table holds {max_blocks} blocks \
                         of {page} tokens for it"
                    ),
                ));
            }
        }
        Ok(Paging {
            page_size,
            num_blocks,
            max_blocks,
            table,
        })
    }

    /// The tensors besides q, k and v, by argument name, for the device checks.
    pub(super) fn extras(&self) -> Vec<(&'static str, &Tensor)> {
        let optional = [
            ("block_table", &self.block_table),
            ("mm_prefix_ranges", &self.mm_prefix_ranges),
            ("alibi_slopes", &self.alibi_slopes),
        ];
        [
            ("seqlens_q", &self.seqlens_q),
            ("seqlens_k", &self.seqlens_k),
        ]
        .into_iter()
        .chain(
            optional
                .into_iter()
                .filter_map(|(n, t)| Some((n, t.as_ref()?))),
        )
        .collect()
    }
}

/// The prefix ranges `t`: i32 of shape `(batch, max_ranges, 2)`.
fn mm_prefix(t: &Tensor, batch: usize) -> Result<MmPrefix, BackendError> {
    if t.dtype() != DType::I32 {
        return Err(parameter_error(
            VARLEN,
            format_args!("mm_prefix_ranges must be i32, got {:?}", t.dtype()),
        ));
    }
    match t.dims() {
        &[b, max_ranges, 2] if b == batch => Ok(MmPrefix {
            max_ranges,
            ranges: t.flatten_all()?.to_vec1::<i32>()?,
        }),
        _ => Err(shape_error(
            VARLEN,
            format_args!(
                "mm_prefix_ranges must have shape ({batch}, max_ranges, 2), got {:?}",
                t.shape()
            ),
        )),
    }
}

/// The ALiBi slopes on the host, for the CPU path.
fn host_alibi(alibi: Option<&Tensor>) -> candle_core::Result<Option<Vec<f32>>> {
    alibi.map(|a| a.flatten_all()?.to_vec1::<f32>()).transpose()
}

/// A device operand of the call: a ROCm storage on `dev`, its view contiguous.
pub(super) fn extra<'a>(
    op: &str,
    what: &str,
    (s, l): (&'a Storage, &Layout),
    dev: &RocmDevice,
) -> Result<Extra<'a>, BackendError> {
    let rocm = match s {
        Storage::Ext(e) => e.as_any().downcast_ref::<RocmStorage>(),
        _ => None,
    };
    match rocm {
        Some(r) if r.device.same_device(dev) && l.is_contiguous() => {
            Ok((&r.slice, l.start_offset()))
        }
        Some(r) if r.device.same_device(dev) => Err(parameter_error(
            op,
            format_args!("{what} must be contiguous (strides {:?})", l.stride()),
        )),
        _ => Err(parameter_error(
            op,
            format_args!(
                "{what} is on {}, not on q's device (rocm:{})",
                s.device().location(),
                dev.ordinal()
            ),
        )),
    }
}

/// The three ROCm storages, or `None` when any operand is another backend's.
pub(super) fn rocm(ops: [&dyn ExtStorage; 3]) -> Option<[&RocmStorage; 3]> {
    let [q, k, v] = ops.map(|s| s.as_any().downcast_ref::<RocmStorage>());
    Some([q?, k?, v?])
}

/// Runs `spec` on q's device with the extra operands `named` (by argument name, borrowed from
/// their tensors for the call): the output storage with q's shape.
fn run_rocm(
    op: &str,
    spec: &AttentionSpec,
    [q, k, v]: [&RocmStorage; 3],
    named: &[(&'static str, &Tensor)],
) -> Result<RocmStorage, BackendError> {
    let dev = &q.device;
    for (what, s) in [("k", k), ("v", v)] {
        if !s.device.same_device(dev) {
            return Err(parameter_error(
                op,
                format_args!(
                    "{what} is on rocm:{}, q on rocm:{}",
                    s.device.ordinal(),
                    dev.ordinal()
                ),
            ));
        }
    }
    let guards: Vec<_> = named
        .iter()
        .map(|(n, t)| (*n, t.storage_and_layout()))
        .collect();
    let mut extras = Extras::default();
    for (what, (s, l)) in &guards {
        let slot = match *what {
            "seqlens_q" => &mut extras.cu_q,
            "seqlens_k" => &mut extras.cu_k,
            "block_table" => &mut extras.block_table,
            "alibi_slopes" => &mut extras.alibi,
            // The prefix ranges are read to the host, into the spec.
            _ => continue,
        };
        *slot = Some(extra(op, what, (&**s, l), dev)?);
    }
    let out = forward(dev, spec, &q.slice, &k.slice, &v.slice, &extras)?;
    Ok(RocmStorage::new(out, dev.clone()))
}

/// `CustomOp3` for an attention op with `spec`, `extras` and `alibi_slopes` (the dense and the
/// variable-length one differ only there and in their name).
macro_rules! attention_op {
    ($op:ty, $name:expr) => {
        impl CustomOp3 for $op {
            fn name(&self) -> &'static str {
                $name
            }

            /// The host reference (candle-flash-attn has no CPU path).
            fn cpu_fwd(
                &self,
                q: &CpuStorage,
                ql: &Layout,
                k: &CpuStorage,
                kl: &Layout,
                v: &CpuStorage,
                vl: &Layout,
            ) -> candle_core::Result<(CpuStorage, Shape)> {
                let spec = self.spec((q.dtype(), ql), (k.dtype(), kl), (v.dtype(), vl))?;
                let alibi = host_alibi(self.alibi_slopes.as_ref())?;
                let out = host::attention_cpu(&spec, rows(ql), q, k, v, alibi.as_deref()).w()?;
                Ok((out, ql.shape().clone()))
            }

            /// The ROCm kernels when q, k and v are ROCm storages, else not handled (`None`:
            /// the operands go to the host and [`CustomOp3::cpu_fwd`] runs).
            fn ext_fwd(
                &self,
                q: &dyn ExtStorage,
                ql: &Layout,
                k: &dyn ExtStorage,
                kl: &Layout,
                v: &dyn ExtStorage,
                vl: &Layout,
            ) -> FusedResult {
                let Some(qkv) = rocm([q, k, v]) else {
                    return Ok(None);
                };
                let spec = self.spec((q.dtype(), ql), (k.dtype(), kl), (v.dtype(), vl))?;
                let out = run_rocm($name, &spec, qkv, &self.extras())?;
                Ok(Some((Box::new(out), ql.shape().clone())))
            }
        }
    };
}

attention_op!(FlashAttn, DENSE);
attention_op!(FlashAttnVarLen, VARLEN);
