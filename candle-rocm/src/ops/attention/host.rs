//! The CPU reference of [`super::spec`]'s semantics: attention for one checked
//! [`AttentionSpec`] over host slices of f32, f64, f16 or bf16, read through the spec's
//! [`Strides`], accumulated in f64 and written contiguous with q's shape in q's dtype.
//!
//! One query row at a time with an online softmax, so memory grows with the head dimension,
//! never with the sequence lengths. Every element read is bounds-checked against its slice and
//! every block-table entry against the cache: a spec that does not fit is an error, not a panic.
//!
//! The window is flash-attention's, to the detail: a window open on one side gets `max_seqlen_k`
//! as its bound on the open side, which differs from "unbounded" only for queries whose key
//! position `i + sk - sq` lies more than `max_seqlen_k` before the first key.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, WithDType};

use crate::error::BackendError;
use crate::layout::{checked_product, out_of_bounds, parameter_error, shape_error};
use crate::ops::attention::spec::{AttentionSpec, Batching, Strides};

const OP: &str = "flash-attn"; // the op name in errors

/// Attention for `spec` on host slices: the output, `rows * heads * head_dim` elements laid out
/// `(rows, heads, head_dim)` (q's shape, contiguous), where `rows` is q's token count
/// (`batch * seqlen_q` dense, q's first dim variable-length). Rows no sequence covers (past the
/// last `cu_q` entry) are zero, as are rows whose query sees no key. `alibi` holds one slope
/// per query head when `spec.alibi` is set.
pub fn attention<T: WithDType>(
    spec: &AttentionSpec,
    rows: usize,
    q: &[T],
    k: &[T],
    v: &[T],
    alibi: Option<&[f32]>,
) -> Result<Vec<T>, BackendError> {
    let (heads, kv_heads, d) = (spec.heads, spec.kv_heads, spec.head_dim);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(shape_error(
            OP,
            format_args!("number of k/v heads {kv_heads} must divide number of heads {heads}"),
        ));
    }
    let slopes = match (spec.alibi, alibi) {
        (false, _) => None,
        (true, Some(s)) if s.len() >= heads => Some(s),
        (true, s) => {
            return Err(parameter_error(
                OP,
                format_args!(
                    "alibi_slopes has {} values for {heads} heads",
                    s.map_or(0, <[f32]>::len)
                ),
            ))
        }
    };
    let len = checked_product(OP, "output element count", &[rows, heads, d])?;
    let mut out = vec![T::zero(); len];
    let mask = Mask::new(spec);
    let scale = f64::from(spec.options.softmax_scale);
    let softcap = f64::from(spec.softcap());
    let group = heads / kv_heads;
    let (mut qrow, mut acc) = (vec![0f64; d], vec![0f64; d]);
    for b in 0..spec.batch() {
        let s = sequence(spec, b)?;
        for i in 0..s.sq {
            let row = s.q_start + i;
            if row >= rows {
                return Err(out_of_bounds(OP, "query rows", row + 1, rows));
            }
            let pos = i as i64 + s.sk as i64 - s.sq as i64;
            for h in 0..heads {
                let (qb, qr) = if s.dense { (b, i) } else { (0, row) };
                let at = elem(&spec.q, qb, qr, h)?;
                for (x, y) in qrow.iter_mut().zip(read(q, at, d, "q")?) {
                    *x = y.to_f64();
                }
                let kh = h / group;
                let slope = slopes.map_or(0.0, |s| f64::from(s[h]));
                acc.fill(0.0);
                let (mut max, mut sum) = (f64::NEG_INFINITY, 0f64);
                for j in 0..s.sk {
                    if !mask.keeps(spec, b, pos, j as i64, s.sk as i64)? {
                        continue;
                    }
                    let (kb, kr) = key(spec, &s, b, j)?;
                    let krow = read(k, elem(&spec.k, kb, kr, kh)?, d, "k")?;
                    let dot: f64 = qrow.iter().zip(krow).map(|(a, b)| a * b.to_f64()).sum();
                    let mut logit = scale * dot;
                    if softcap > 0.0 {
                        logit = softcap * (logit / softcap).tanh();
                    }
                    logit -= slope * (pos - j as i64).abs() as f64;
                    let vrow = read(v, elem(&spec.v, kb, kr, kh)?, d, "v")?;
                    // Online softmax: rescale what was summed when the maximum grows.
                    let (p, carry) = if logit > max {
                        let carry = (max - logit).exp();
                        max = logit;
                        (1.0, carry)
                    } else {
                        ((logit - max).exp(), 1.0)
                    };
                    sum = sum * carry + p;
                    for (a, x) in acc.iter_mut().zip(vrow) {
                        *a = *a * carry + p * x.to_f64();
                    }
                }
                if sum > 0.0 {
                    let o = (row * heads + h) * d;
                    for (dst, a) in out[o..o + d].iter_mut().zip(&acc) {
                        *dst = T::from_f64(a / sum);
                    }
                }
            }
        }
    }
    Ok(out)
}

/// [`attention`] on host storages of one float dtype (f32, f64, f16, bf16; the storages decide
/// it, not `spec.dtype`), the result of that dtype; `alibi` as for [`attention`].
pub fn attention_cpu(
    spec: &AttentionSpec,
    rows: usize,
    q: &CpuStorage,
    k: &CpuStorage,
    v: &CpuStorage,
    alibi: Option<&[f32]>,
) -> Result<CpuStorage, BackendError> {
    for (what, s) in [("k", k), ("v", v)] {
        if s.dtype() != q.dtype() {
            return Err(BackendError::Invalid {
                op: OP.to_string(),
                detail: format!(
                    "{what} has dtype {:?} but q has {:?}: q, k and v must share a dtype",
                    s.dtype(),
                    q.dtype()
                ),
            });
        }
    }
    use CpuStorage as C;
    Ok(match (q, k, v) {
        (C::F32(q), C::F32(k), C::F32(v)) => C::F32(attention(spec, rows, q, k, v, alibi)?),
        (C::F64(q), C::F64(k), C::F64(v)) => C::F64(attention(spec, rows, q, k, v, alibi)?),
        (C::F16(q), C::F16(k), C::F16(v)) => C::F16(attention(spec, rows, q, k, v, alibi)?),
        (C::BF16(q), C::BF16(k), C::BF16(v)) => C::BF16(attention(spec, rows, q, k, v, alibi)?),
        _ => {
            return Err(BackendError::UnsupportedDtype {
                op: OP,
                dtype: q.dtype(),
            })
        }
    })
}

/// Where sequence `b` lies: `sq` queries from output row (and q token) `q_start`, `sk` keys
/// from key token `k_start` (variable-length, not paged); `dense` when q is `(batch, seq, ..)`.
struct Sequence {
    sq: usize,
    sk: usize,
    q_start: usize,
    k_start: usize,
    dense: bool,
}

/// [`Sequence`] `b` of `spec`, its cumulative lengths checked (never trusting the spec).
fn sequence(spec: &AttentionSpec, b: usize) -> Result<Sequence, BackendError> {
    let (cu_q, cu_k) = match &spec.batching {
        Batching::Dense {
            seqlen_q, seqlen_k, ..
        } => {
            let (sq, sk, q_start) = (*seqlen_q, *seqlen_k, b * seqlen_q);
            let (k_start, dense) = (0, true);
            return Ok(Sequence {
                sq,
                sk,
                q_start,
                k_start,
                dense,
            });
        }
        Batching::Varlen { cu_q, cu_k, .. } => (cu_q, cu_k),
    };
    let span = |what: &str, cu: &[u32]| match (cu.get(b), cu.get(b + 1)) {
        (Some(&s), Some(&e)) if s <= e => Ok((s as usize, (e - s) as usize)),
        _ => Err(parameter_error(
            OP,
            format_args!("{what} has no non-decreasing entries {b} and {}", b + 1),
        )),
    };
    let ((q_start, sq), (k_start, sk)) = (span("seqlens_q", cu_q)?, span("seqlens_k", cu_k)?);
    let dense = false;
    Ok(Sequence {
        sq,
        sk,
        q_start,
        k_start,
        dense,
    })
}

/// The (batch or block, row) of key `j` of sequence `b`, for k's and v's [`Strides`].
fn key(
    spec: &AttentionSpec,
    s: &Sequence,
    b: usize,
    j: usize,
) -> Result<(usize, usize), BackendError> {
    match &spec.batching {
        Batching::Dense { .. } => Ok((b, j)),
        Batching::Varlen { paged: None, .. } => Ok((0, s.k_start + j)),
        Batching::Varlen { paged: Some(p), .. } => {
            if p.page_size == 0 {
                return Err(parameter_error(OP, "page_block_size is 0"));
            }
            let slot = j / p.page_size;
            let block = (slot < p.max_blocks)
                .then(|| p.table.get(b * p.max_blocks + slot))
                .flatten()
                .map(|&e| e as usize);
            match block {
                Some(block) if block < p.num_blocks => Ok((block, j % p.page_size)),
                Some(block) => Err(parameter_error(
                    OP,
                    format_args!(
                        "block_table[{b}, {slot}] = {block} is past the {} blocks of the cache",
                        p.num_blocks
                    ),
                )),
                None => Err(parameter_error(
                    OP,
                    format_args!(
                        "block_table has no entry {slot} for key {j} of sequence {b} \
                         ({} entries per sequence)",
                        p.max_blocks
                    ),
                )),
            }
        }
    }
}

/// The element offset of `(batch, row, head, 0)` under `s`, checked not to overflow.
fn elem(s: &Strides, batch: usize, row: usize, head: usize) -> Result<usize, BackendError> {
    let term = |a: usize, b: usize| a.checked_mul(b);
    term(batch, s.batch)
        .zip(term(row, s.row))
        .zip(term(head, s.head))
        .and_then(|((x, y), z)| s.offset.checked_add(x)?.checked_add(y)?.checked_add(z))
        .ok_or_else(|| out_of_bounds(OP, "layout", usize::MAX, 0))
}

/// The `d` elements of `what` from `at`, or an error when they pass its end.
fn read<'a, T>(data: &'a [T], at: usize, d: usize, what: &str) -> Result<&'a [T], BackendError> {
    at.checked_add(d)
        .and_then(|end| data.get(at..end))
        .ok_or_else(|| BackendError::OutOfBounds {
            op: format!("{OP} ({what})"),
            what: "layout",
            reach: at.saturating_add(d),
            len: data.len(),
        })
}

/// Which keys a query sees, as flash-attention's kernels decide it.
struct Mask {
    /// Whether a window applies at all.
    local: bool,
    /// Keys allowed left and right of the query's key position (after the one-sided rule).
    left: i64,
    right: i64,
}

impl Mask {
    fn new(spec: &AttentionSpec) -> Mask {
        let (l, r) = spec.window();
        let (mut left, mut right) = (i64::from(l), i64::from(r));
        let max_k = spec.max_seqlens().1 as i64;
        if left < 0 && right >= 0 {
            left = max_k;
        }
        if left >= 0 && right < 0 {
            right = max_k;
        }
        Mask {
            local: left >= 0 || right >= 0,
            left,
            right,
        }
    }

    /// Whether the query at key position `pos` of sequence `b` (with `sk` keys) sees key `j`.
    fn keeps(
        &self,
        spec: &AttentionSpec,
        b: usize,
        pos: i64,
        j: i64,
        sk: i64,
    ) -> Result<bool, BackendError> {
        if !self.local {
            return Ok(true);
        }
        let hi = sk.min(pos + 1 + self.right);
        let lo = (pos - self.left).max(0);
        if j >= lo && j < hi {
            return Ok(true);
        }
        let Some(mm) = &spec.mm_prefix else {
            return Ok(false);
        };
        let start = b * mm.max_ranges * 2;
        let ranges = start
            .checked_add(mm.max_ranges * 2)
            .and_then(|end| mm.ranges.get(start..end))
            .ok_or_else(|| {
                parameter_error(
                    OP,
                    format_args!("mm_prefix_ranges has no ranges for sequence {b}"),
                )
            })?;
        Ok(ranges.chunks_exact(2).any(|r| {
            let (s, e) = (i64::from(r[0]), i64::from(r[1]));
            s < e && (s..e).contains(&pos) && (s..e).contains(&j)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::spec::{AttentionOptions, MmPrefix, Paging};
    use candle_core::DType;
    use half::f16;

    /// One dense call: sizes (head dim 8, scale 0.4) and options.
    #[derive(Clone, Default)]
    struct Case {
        b: usize,
        sq: usize,
        sk: usize,
        h: usize,
        hk: usize,
        window: (Option<usize>, Option<usize>),
        softcap: Option<f32>,
        alibi: Option<Vec<f32>>,
    }

    const D: usize = 8;
    const SCALE: f32 = 0.4;

    fn case(b: usize, sq: usize, sk: usize, h: usize, hk: usize) -> Case {
        Case {
            b,
            sq,
            sk,
            h,
            hk,
            ..Default::default()
        }
    }

    impl Case {
        fn window(self, left: Option<usize>, right: Option<usize>) -> Case {
            let window = (left, right);
            Case { window, ..self }
        }
    }

    /// `n` values in [-1, 1], the same for the same `seed`.
    fn vals(n: usize, seed: u64) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 + 0.37 * seed as f32) * 1.7).sin())
            .collect()
    }

    fn contiguous(rows: usize, heads: usize, d: usize) -> Strides {
        Strides {
            offset: 0,
            batch: rows * heads * d,
            row: heads * d,
            head: d,
        }
    }

    /// The spec of a dense call on contiguous `(b, s, heads, d)` operands.
    fn dense_spec(c: &Case) -> AttentionSpec {
        AttentionSpec {
            dtype: DType::F32,
            heads: c.h,
            kv_heads: c.hk,
            head_dim: D,
            q: contiguous(c.sq, c.h, D),
            k: contiguous(c.sk, c.hk, D),
            v: contiguous(c.sk, c.hk, D),
            batching: Batching::Dense {
                batch: c.b,
                seqlen_q: c.sq,
                seqlen_k: c.sk,
            },
            options: AttentionOptions {
                softmax_scale: SCALE,
                window_left: c.window.0,
                window_right: c.window.1,
                softcap: c.softcap,
            },
            alibi: c.alibi.is_some(),
            mm_prefix: None,
        }
    }

    /// The textbook formula on contiguous operands: every score of a query row, the window as
    /// the spec's module doc states it, a softmax over the kept keys (zero when none is).
    fn naive(c: &Case, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
        let (g, d) = (c.h / c.hk, D);
        let mut out = vec![0f64; c.b * c.sq * c.h * d];
        for b in 0..c.b {
            for i in 0..c.sq {
                let pos = i as i64 + c.sk as i64 - c.sq as i64;
                for h in 0..c.h {
                    let qr = &q[((b * c.sq + i) * c.h + h) * d..][..d];
                    let at = |j: usize| ((b * c.sk + j) * c.hk + h / g) * d;
                    let scores: Vec<Option<f64>> = (0..c.sk)
                        .map(|j| {
                            let jj = j as i64;
                            let keep = c.window.0.is_none_or(|l| jj >= pos - l as i64)
                                && c.window.1.is_none_or(|r| jj <= pos + r as i64);
                            keep.then(|| {
                                let dot: f64 = (0..d)
                                    .map(|x| f64::from(qr[x]) * f64::from(k[at(j) + x]))
                                    .sum();
                                let mut s = f64::from(SCALE) * dot;
                                if let Some(cap) = c.softcap.filter(|c| *c > 0.0).map(f64::from) {
                                    s = cap * (s / cap).tanh();
                                }
                                let slope = c.alibi.as_ref().map_or(0.0, |a| f64::from(a[h]));
                                s - slope * (pos - jj).abs() as f64
                            })
                        })
                        .collect();
                    let max = scores
                        .iter()
                        .flatten()
                        .copied()
                        .fold(f64::NEG_INFINITY, f64::max);
                    let w: Vec<f64> = scores
                        .iter()
                        .map(|s| s.map_or(0.0, |s| (s - max).exp()))
                        .collect();
                    let sum: f64 = w.iter().sum();
                    if sum == 0.0 {
                        continue;
                    }
                    for x in 0..d {
                        let o: f64 = (0..c.sk).map(|j| w[j] * f64::from(v[at(j) + x])).sum();
                        out[((b * c.sq + i) * c.h + h) * d + x] = o / sum;
                    }
                }
            }
        }
        out
    }

    /// Runs `c` through [`attention`] and the naive formula on the same inputs, compares them
    /// and returns the result.
    fn check(c: &Case, seed: u64) -> Vec<f32> {
        let q = vals(c.b * c.sq * c.h * D, seed);
        let k = vals(c.b * c.sk * c.hk * D, seed + 1);
        let v = vals(c.b * c.sk * c.hk * D, seed + 2);
        let got = attention(&dense_spec(c), c.b * c.sq, &q, &k, &v, c.alibi.as_deref()).unwrap();
        let want = naive(c, &q, &k, &v);
        assert_eq!(got.len(), want.len());
        for (n, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((f64::from(*g) - w).abs() < 1e-6, "element {n}: {g} vs {w}");
        }
        got
    }

    #[test]
    fn causal_full_and_windows_match_the_naive_formula() {
        let mut c = case(2, 5, 7, 2, 2);
        let full = check(&c, 1);
        c.window = (None, Some(0));
        let causal = check(&c, 1);
        assert_ne!(full, causal, "the causal mask changed nothing");
        for window in [(Some(2), Some(1)), (Some(0), Some(0)), (Some(1), Some(3))] {
            c.window = window;
            check(&c, 1);
        }
        // More queries than keys: the first rows see no key under a causal mask.
        let c = case(1, 7, 5, 1, 1).window(None, Some(0));
        let out = check(&c, 4);
        assert!(out[..2 * 8].iter().all(|x| *x == 0.0));
        assert!(out[2 * 8..].iter().any(|x| *x != 0.0));
        // 6 queries, 2 keys, 1 key to the left: query 2 (key position -2) sees key 0 only, as
        // the open right side is bounded by max_k = 2 (keys below -2 + 1 + 2); 0 and 1 see none.
        let c = case(1, 6, 2, 1, 1).window(Some(1), None);
        let (q, k, v) = (vals(48, 1), vals(16, 2), vals(16, 3));
        let out = attention(&dense_spec(&c), 6, &q, &k, &v, None).unwrap();
        assert!(out[..16].iter().all(|x| *x == 0.0));
        assert_eq!(&out[16..24], &v[..8]);
    }

    #[test]
    fn grouped_query_heads_share_their_kv_head() {
        for (h, hk) in [(4, 2), (4, 1), (8, 4)] {
            let mut c = case(2, 3, 6, h, hk);
            check(&c, 7);
            c.window = (None, Some(0));
            check(&c, 8);
        }
    }

    #[test]
    fn softcap_and_alibi_apply_after_the_scale() {
        let mut c = case(1, 4, 9, 2, 1);
        c.softcap = Some(0.5);
        c.alibi = Some(vec![0.5, 0.125]);
        for window in [(None, None), (None, Some(0)), (Some(3), Some(0))] {
            c.window = window;
            check(&c, 11);
        }
        // A softcap of 0 or below is none.
        c.softcap = Some(0.0);
        let none = check(&c, 12);
        c.softcap = None;
        assert_eq!(check(&c, 12), none);
    }

    /// Three sequences packed: q lengths 3, 0, 2; k lengths 4, 2, 5; one kv head for two.
    fn varlen(paged: Option<Paging>) -> (AttentionSpec, Case) {
        let c = case(1, 0, 0, 2, 1).window(None, Some(0));
        let spec = AttentionSpec {
            q: contiguous(0, 2, 8),
            k: contiguous(4, 1, 8),
            v: contiguous(4, 1, 8),
            batching: Batching::Varlen {
                cu_q: vec![0, 3, 3, 5],
                cu_k: vec![0, 4, 6, 11],
                max_seqlen_q: 3,
                max_seqlen_k: 5,
                paged,
            },
            ..dense_spec(&c)
        };
        (spec, c)
    }

    #[test]
    fn varlen_equals_each_sequence_alone() {
        let (spec, c) = varlen(None);
        let (q, k, v) = (vals(6 * 16, 21), vals(11 * 8, 22), vals(11 * 8, 23));
        // One spare q row at the end: no sequence covers it, it stays zero.
        let got = attention(&spec, 6, &q, &k, &v, None).unwrap();
        assert!(got[5 * 16..].iter().all(|x| *x == 0.0));
        for (qs, sq, ks, sk) in [(0, 3, 0, 4), (3, 0, 4, 2), (3, 2, 6, 5)] {
            let one = Case {
                sq,
                sk,
                ..c.clone()
            };
            let alone = attention(
                &dense_spec(&one),
                sq,
                &q[qs * 16..(qs + sq) * 16],
                &k[ks * 8..(ks + sk) * 8],
                &v[ks * 8..(ks + sk) * 8],
                None,
            )
            .unwrap();
            assert_eq!(&got[qs * 16..(qs + sq) * 16], &alone[..]);
        }
    }

    #[test]
    fn paged_with_a_shuffled_table_equals_varlen() {
        let (spec, _) = varlen(None);
        let (q, k, v) = (vals(5 * 16, 31), vals(11 * 8, 32), vals(11 * 8, 33));
        let want = attention(&spec, 5, &q, &k, &v, None).unwrap();
        // Pages of 2 tokens; sequence b's page p goes to block table[b][p] of 9 blocks.
        let table: Vec<u32> = vec![7, 2, 0, 5, 8, 4, 1, 3, 6];
        let (page, blocks) = (2, 9);
        let mut kc = vec![9.0f32; blocks * page * 8];
        let mut vc = kc.clone();
        for (b, (start, len)) in [(0usize, 4usize), (4, 2), (6, 5)].into_iter().enumerate() {
            for j in 0..len {
                let at = (table[b * 3 + j / page] as usize * page + j % page) * 8;
                kc[at..at + 8].copy_from_slice(&k[(start + j) * 8..][..8]);
                vc[at..at + 8].copy_from_slice(&v[(start + j) * 8..][..8]);
            }
        }
        let paging = Paging {
            page_size: page,
            num_blocks: blocks,
            max_blocks: 3,
            table: table.clone(),
        };
        let (mut paged, _) = varlen(Some(paging));
        paged.k = contiguous(page, 1, 8);
        paged.v = paged.k;
        assert_eq!(attention(&paged, 5, &q, &kc, &vc, None).unwrap(), want);
        // An entry past the cache is an error naming the block table, not a panic.
        if let Batching::Varlen { paged: Some(p), .. } = &mut paged.batching {
            p.table[7] = 9;
        }
        let err = attention(&paged, 5, &q, &kc, &vc, None).unwrap_err();
        assert!(err.to_string().contains("block_table[2, 1] = 9"), "{err}");
    }

    #[test]
    fn mm_prefix_ranges_bypass_the_causal_mask() {
        let (mut spec, c) = varlen(None);
        spec.mm_prefix = Some(MmPrefix {
            max_ranges: 1,
            ranges: vec![0, 3, 0, 0, 0, 0],
        });
        let (q, k, v) = (vals(5 * 16, 41), vals(11 * 8, 42), vals(11 * 8, 43));
        let got = attention(&spec, 5, &q, &k, &v, None).unwrap();
        // Query 0 of sequence 0 sits at key position 1 (3 queries, 4 keys): inside [0, 3), so
        // it sees keys 0, 1 and 2 although the causal mask keeps only 0 and 1.
        let one = Case { sq: 1, sk: 3, ..c }.window(None, None);
        let want = attention(&dense_spec(&one), 1, &q[..16], &k[..24], &v[..24], None).unwrap();
        assert_eq!(&got[..16], &want[..]);
        let (plain, _) = varlen(None);
        assert_ne!(
            attention(&plain, 5, &q, &k, &v, None).unwrap()[..16],
            want[..]
        );
    }

    #[test]
    fn strided_operands_are_read_through_their_strides() {
        let c = case(2, 3, 4, 2, 2).window(None, Some(0));
        let (q, k, v) = (vals(96, 51), vals(128, 52), vals(128, 53));
        let want = attention(&dense_spec(&c), 6, &q, &k, &v, None).unwrap();
        // q stored (b, h, s, d) after 5 spare elements: the (b, s, h, d) view has strides
        // (h*s*d, d, s*d) and offset 5.
        let mut qt = vec![7.0f32; 5 + 96];
        for (n, row) in q.chunks(8).enumerate() {
            let (b, i, h) = (n / 6, n / 2 % 3, n % 2);
            qt[5 + ((b * 2 + h) * 3 + i) * 8..][..8].copy_from_slice(row);
        }
        let mut spec = dense_spec(&c);
        spec.q = Strides {
            offset: 5,
            batch: 48,
            row: 8,
            head: 24,
        };
        assert_eq!(attention(&spec, 6, &qt, &k, &v, None).unwrap(), want);
        // One element short: an error, not a panic.
        let err = attention(&spec, 6, &qt[..100], &k, &v, None).unwrap_err();
        assert!(err.to_string().contains("(q)"), "{err}");
    }

    #[test]
    fn half_types_round_the_f64_result() {
        let c = case(1, 4, 6, 2, 1).window(Some(2), Some(0));
        let q: Vec<f16> = vals(64, 61).into_iter().map(f16::from_f32).collect();
        let k: Vec<f16> = vals(48, 62).into_iter().map(f16::from_f32).collect();
        let v: Vec<f16> = vals(48, 63).into_iter().map(f16::from_f32).collect();
        let wide = |x: &[f16]| x.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
        let mut spec = dense_spec(&c);
        spec.dtype = DType::F16;
        let got = attention(&spec, 4, &q, &k, &v, None).unwrap();
        let want = attention(&spec, 4, &wide(&q), &wide(&k), &wide(&v), None).unwrap();
        let rounded: Vec<f16> = want.into_iter().map(f16::from_f64).collect();
        assert_eq!(got, rounded);
        let (q, k, v) = (CpuStorage::F16(q), CpuStorage::F16(k), CpuStorage::F16(v));
        let cpu = attention_cpu(&spec, 4, &q, &k, &v, None).unwrap();
        assert!(matches!(cpu, CpuStorage::F16(x) if x == got));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let c = case(1, 2, 3, 2, 1);
        let (q, k, v) = (vals(32, 1), vals(24, 2), vals(24, 3));
        let spec = dense_spec(&c);
        assert!(attention(&spec, 2, &q, &k[..23], &v, None).is_err());
        let mut alibi = spec.clone();
        alibi.alibi = true;
        let err = attention(&alibi, 2, &q, &k, &v, Some(&[0.5])).unwrap_err();
        assert!(err.to_string().contains("alibi_slopes"), "{err}");
        let (mut short, _) = varlen(None);
        if let Batching::Varlen { cu_k, .. } = &mut short.batching {
            cu_k.truncate(2);
        }
        let err = attention(&short, 5, &vals(80, 1), &vals(88, 2), &vals(88, 3), None).unwrap_err();
        assert!(err.to_string().contains("seqlens_k"), "{err}");
        let (q, k) = (CpuStorage::F32(q), CpuStorage::F16(vec![f16::ZERO; 24]));
        let err = attention_cpu(&spec, 2, &q, &k, &k, None).unwrap_err();
        assert!(err.to_string().contains("k has dtype F16"), "{err}");
        let u = CpuStorage::U8(vec![0; 32]);
        let mut spec = spec;
        spec.dtype = DType::U8;
        assert!(matches!(
            attention_cpu(&spec, 2, &u, &u, &u, None),
            Err(BackendError::UnsupportedDtype { .. })
        ));
    }
}
