//! flash-attention's `flash_attn_with_kvcache` (its Python API; candle-flash-attn 0.11.1 has no
//! counterpart): a decoder step's attention over a KV cache that the call extends in place,
//! with the rotary embedding of q and the new keys. On the ROCm device the embedding and both
//! cache writes are one launch (`launch::rope_cache`) before the attention kernel, where a
//! model's step took three (the embedding, then one copy into each cache); elsewhere the call
//! composes candle's ops and [`super::flash_attn`].
//!
//! The caches are written through candle-core's in-place ops (each one's write lock), nested
//! inside the attention op that makes the output, so the write has the exclusive borrow
//! rocm-safe asks of it. Caches that share storage with each other or with an input would
//! deadlock that nesting; such a call takes the composition instead.

use std::cell::RefCell;

use candle_core::backend::BackendStorage;
use candle_core::ext::{ExtStorage, FusedResult};
use candle_core::{
    CpuStorage, CustomOp3, DType, Device, InplaceOp1, InplaceOp2, Layout, Result, Shape, Storage,
    Tensor,
};

use super::op::{extra, rocm, FlashAttn};
use rocm_safe::{DeviceBuffer, DeviceView};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::dtype::RocmStorageSlice as S;
use crate::error::BackendError;
use crate::launch::attention::{has_mixed, tier, TileKernel};
use crate::launch::rope_cache::{rope_cache, RopeCacheGeometry, Rotation};
use crate::layout::{parameter_error, shape_error};
use crate::ops::attention::{forward, Extra, Extras};
use crate::settings::flash_mma;
use crate::storage::RocmStorage;

const OP: &str = "flash-attn-with-kvcache";

/// The rotary embedding of a [`flash_attn_with_kvcache`] call: tables of `head_dim / 2` values
/// per position (`(positions, head_dim / 2)`, q's dtype), read at the new tokens' positions.
#[derive(Clone, Copy, Debug)]
pub struct Rotary<'a> {
    /// Cosines.
    pub cos: &'a Tensor,
    /// Sines.
    pub sin: &'a Tensor,
    /// Adjacent elements pair (candle-nn's `rope_i`, llama.cpp's GGUF row order); else each
    /// half of a head pairs with the other (`rope`).
    pub interleaved: bool,
}

/// Attention of `q` over a KV cache extended in place by `k` and `v`, as flash-attention's
/// `flash_attn_with_kvcache`: the new keys and values go to positions `cache_seqlen ..
/// cache_seqlen + seq` of `k_cache` and `v_cache`, q and the new keys are first rotated at
/// those positions when `rotary` is given, and q attends to the cache's first `cache_seqlen +
/// seq` positions (`causal`: aligned to the bottom right, as [`super::flash_attn`]).
///
/// * `q` - `(batch, seq, heads, head_dim)`.
/// * `k`, `v` - `(batch, seq, kv_heads, head_dim)`; `kv_heads` divides `heads`.
/// * `k_cache`, `v_cache` - `(batch, capacity, kv_heads, head_dim)`, last dimension
///   contiguous (any other strides: a `(batch, kv_heads, capacity, head_dim)` buffer
///   transposed qualifies).
///
/// f32, f16 and bf16, one dtype for every tensor, except that under f32 q, k and v the caches
/// may be f16 (llama.cpp's default KV cache: half the memory and half the bytes a decode step
/// reads; the new keys and values are rounded to f16 as they are written, and q to f16 inside
/// the matrix-unit kernels; [`kv_cache_dtype`] says where f16 pays). All on one device. The
/// result has q's shape and dtype.
/// Every argument is checked before anything is written: a bad call is a typed error naming
/// it and leaves both caches as they were.
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_with_kvcache(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    k: &Tensor,
    v: &Tensor,
    rotary: Option<Rotary<'_>>,
    cache_seqlen: usize,
    softmax_scale: f32,
    causal: bool,
) -> Result<Tensor> {
    let g = geometry(q, k_cache, v_cache, k, v, rotary, cache_seqlen)?;
    let attn = FlashAttn {
        softmax_scale,
        alibi_slopes: None,
        window_size_left: None,
        window_size_right: causal.then_some(0),
        softcap: None,
    };
    if !on_rocm(q) || shares_storage(q, k_cache, v_cache, k, v, rotary) {
        return composed(q, (k_cache, v_cache), (k, v), rotary, cache_seqlen, attn);
    }
    // The kernel reads q, k and v with heads `head_dim` apart: other layouts are copied.
    let packed = |t: &Tensor| -> Result<Tensor> {
        let s = t.stride();
        if s[3] == 1 && s[2] == t.dim(3)? {
            Ok(t.clone())
        } else {
            t.contiguous()
        }
    };
    let (q, k, v) = (packed(q)?, packed(k)?, packed(v)?);
    let step = Step {
        g,
        attn,
        k_cache: k_cache.clone(),
        v_cache: v_cache.clone(),
        tables: rotary.map(|r| (r.cos.clone(), r.sin.clone())),
    };
    q.apply_op3_no_bwd(&k, &v, &step)
}

/// The dtype a KV cache for [`flash_attn_with_kvcache`] runs best in under q, k and v of
/// `dtype` with heads of `head_dim` on `device`: f16 under f32 where the device decodes that
/// mix on its matrix units (`fa_mdec_f32h_*`, head dims up to 128: half the cache's memory and
/// half the bytes a step reads; faster than an f32 cache on the H100 harness at 16 and 2048
/// cached positions), else `dtype` itself (the CPU and other devices, targets without the
/// matrix-unit decode kernel, `CANDLE_ROCM_FLASH_MMA=0`, larger head dims: the FMA decode
/// kernel ran the f32 cache faster than the f16 one on the harness).
pub fn kv_cache_dtype(device: &Device, dtype: DType, head_dim: usize) -> DType {
    if dtype != DType::F32 || !flash_mma() {
        return dtype;
    }
    let Some(dev) = device
        .as_ext_device()
        .and_then(|d| d.as_any().downcast_ref::<RocmDevice>())
    else {
        return dtype;
    };
    let mixed = tier(head_dim).filter(|t| *t <= 128).map(|t| {
        has_mixed(dev, TileKernel::MmaDecode, (DType::F32, DType::F16), t).unwrap_or(false)
    });
    if mixed == Some(true) {
        DType::F16
    } else {
        dtype
    }
}

/// Whether `t` lives on a ROCm device of this backend.
fn on_rocm(t: &Tensor) -> bool {
    let (s, _) = t.storage_and_layout();
    matches!(&*s, Storage::Ext(s) if s.as_any().is::<RocmStorage>())
}

/// Whether a cache shares its storage with the other cache or with an input (the nested write
/// locks of the fused path would then wait on themselves).
fn shares_storage(
    q: &Tensor,
    kc: &Tensor,
    vc: &Tensor,
    k: &Tensor,
    v: &Tensor,
    rotary: Option<Rotary<'_>>,
) -> bool {
    let addr = |t: &Tensor| &*t.storage_and_layout().0 as *const Storage as usize;
    let (kc, vc) = (addr(kc), addr(vc));
    let tables = rotary.map(|r| [r.cos, r.sin]);
    kc == vc
        || [q, k, v]
            .into_iter()
            .chain(tables.into_iter().flatten())
            .any(|t| addr(t) == kc || addr(t) == vc)
}

/// The call's geometry, every argument checked (shapes, dtypes, devices, the cache's room and
/// the rotary tables' rows).
fn geometry(
    q: &Tensor,
    kc: &Tensor,
    vc: &Tensor,
    k: &Tensor,
    v: &Tensor,
    rotary: Option<Rotary<'_>>,
    pos: usize,
) -> Result<RopeCacheGeometry> {
    let dims4 = |what: &str, t: &Tensor| -> Result<(usize, usize, usize, usize)> {
        t.dims4().map_err(|_| {
            shape_error(
                OP,
                format_args!("{what} must have 4 dims, got {:?}", t.dims()),
            )
            .into()
        })
    };
    let (batch, seq, heads, d) = dims4("q", q)?;
    let (_, _, kv_heads, _) = dims4("k", k)?;
    if k.dims() != [batch, seq, kv_heads, d] || v.dims() != k.dims() {
        return Err(shape_error(
            OP,
            format_args!(
                "k and v must be (batch, seq, kv_heads, head_dim) as q {:?}, got {:?} and {:?}",
                q.dims(),
                k.dims(),
                v.dims()
            ),
        )
        .into());
    }
    let (_, capacity, _, _) = dims4("k_cache", kc)?;
    if kc.dims() != [batch, capacity, kv_heads, d] || vc.dims() != kc.dims() {
        return Err(shape_error(
            OP,
            format_args!(
                "k_cache and v_cache must be (batch, capacity, kv_heads, head_dim) = ({batch}, _, \
                 {kv_heads}, {d}), got {:?} and {:?}",
                kc.dims(),
                vc.dims()
            ),
        )
        .into());
    }
    if pos.checked_add(seq).is_none_or(|end| end > capacity) {
        return Err(parameter_error(
            OP,
            format_args!(
                "cache_seqlen {pos} plus {seq} new tokens passes the cache's {capacity} positions: \
                 grow the cache first"
            ),
        )
        .into());
    }
    let dtype = q.dtype();
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(BackendError::UnsupportedDtype { op: OP, dtype }.into());
    }
    let cache = kc.dtype();
    if !cache_dtype_ok(dtype, cache) || vc.dtype() != cache {
        return Err(parameter_error(
            OP,
            format_args!(
                "k_cache is {cache:?} and v_cache {:?} under {dtype:?} q: the caches take q's \
                 dtype, or f16 under f32 q",
                vc.dtype()
            ),
        )
        .into());
    }
    let tables = rotary.map(|r| [("cos", r.cos), ("sin", r.sin)]);
    let others = [("k_cache", kc), ("v_cache", vc), ("k", k), ("v", v)];
    for (what, t) in others.into_iter().chain(tables.into_iter().flatten()) {
        if !what.ends_with("_cache") && t.dtype() != dtype {
            return Err(parameter_error(
                OP,
                format_args!("{what} is {:?}, q {dtype:?}", t.dtype()),
            )
            .into());
        }
        if !t.device().same_device(q.device()) {
            return Err(parameter_error(
                OP,
                format_args!(
                    "{what} is on {}, q on {}: every tensor of the call must be on q's device",
                    t.device().location(),
                    q.device().location()
                ),
            )
            .into());
        }
    }
    for (what, t) in [("k_cache", kc), ("v_cache", vc)] {
        if t.stride()[3] != 1 && d > 1 {
            return Err(parameter_error(
                OP,
                format_args!("{what}'s last dimension must be contiguous"),
            )
            .into());
        }
    }
    let rotation = match rotary {
        None => Rotation::None,
        Some(r) => {
            let want = (pos + seq, d / 2);
            for (what, t) in [("cos", r.cos), ("sin", r.sin)] {
                let ok = d % 2 == 0
                    && t.is_contiguous()
                    && matches!(t.dims(), &[n, h] if n >= want.0 && h == want.1);
                if !ok {
                    return Err(parameter_error(
                        OP,
                        format_args!(
                            "{what} must be contiguous (positions >= {}, {}) for an even \
                             head_dim {d}, got {:?}",
                            want.0,
                            want.1,
                            t.dims()
                        ),
                    )
                    .into());
                }
            }
            if r.interleaved {
                Rotation::Pairs
            } else {
                Rotation::Halves
            }
        }
    };
    let (ks, vs) = (kc.stride(), vc.stride());
    // q, k and v strides are the ones of their packed layouts, set by the op.
    Ok(RopeCacheGeometry {
        batch,
        seq,
        heads,
        kv_heads,
        head_dim: d,
        pos,
        capacity,
        q: (0, 0),
        k: (0, 0),
        v: (0, 0),
        k_cache: (ks[0], ks[1], ks[2]),
        v_cache: (vs[0], vs[1], vs[2]),
        rotation,
    })
}

/// Whether caches of `cache` may hold the keys and values of a call on `dtype`: the same dtype,
/// or f16 under f32.
fn cache_dtype_ok(dtype: DType, cache: DType) -> bool {
    cache == dtype || (dtype, cache) == (DType::F32, DType::F16)
}

/// The composition: candle's ops for the rotation, an in-place copy into each cache (the new
/// keys and values in the caches' dtype), then [`super::flash_attn`]'s op on the caches'
/// filled positions (in q's dtype).
fn composed(
    q: &Tensor,
    (kc, vc): (&Tensor, &Tensor),
    (k, v): (&Tensor, &Tensor),
    rotary: Option<Rotary<'_>>,
    pos: usize,
    attn: FlashAttn,
) -> Result<Tensor> {
    let (q, k) = match rotary {
        Some(r) => (rotate(q, r, pos)?, rotate(k, r, pos)?),
        // Copies: the sources may share storage with the caches.
        None => (q.clone(), k.copy()?),
    };
    let cache = kc.dtype();
    kc.inplace_op2(&k.to_dtype(cache)?, &Append { pos })?;
    vc.inplace_op2(&v.copy()?.to_dtype(cache)?, &Append { pos })?;
    let len = pos + q.dim(1)?;
    let (kc, vc) = (kc.narrow(1, 0, len)?, vc.narrow(1, 0, len)?);
    if cache == q.dtype() {
        q.apply_op3(&kc, &vc, attn)
    } else {
        q.apply_op3(&kc.to_dtype(q.dtype())?, &vc.to_dtype(q.dtype())?, attn)
    }
}

/// candle-nn's `rope` / `rope_i` arithmetic on `(batch, seq, heads, head_dim)` at positions
/// `pos..pos + seq`, in candle's ops (each product and sum rounded to the dtype).
fn rotate(x: &Tensor, r: Rotary<'_>, pos: usize) -> Result<Tensor> {
    let (b, s, h, d) = x.dims4()?;
    let cos = r.cos.narrow(0, pos, s)?.reshape((1, s, 1, d / 2))?;
    let sin = r.sin.narrow(0, pos, s)?.reshape((1, s, 1, d / 2))?;
    let (x1, x2) = if r.interleaved {
        let x = x.contiguous()?.reshape((b, s, h, d / 2, 2))?;
        (
            x.narrow(4, 0, 1)?.squeeze(4)?,
            x.narrow(4, 1, 1)?.squeeze(4)?,
        )
    } else {
        (x.narrow(3, 0, d / 2)?, x.narrow(3, d / 2, d / 2)?)
    };
    let o1 = (x1.broadcast_mul(&cos)? - x2.broadcast_mul(&sin)?)?;
    let o2 = (x1.broadcast_mul(&sin)? + x2.broadcast_mul(&cos)?)?;
    if r.interleaved {
        Tensor::stack(&[o1, o2], 4)?.reshape((b, s, h, d))
    } else {
        Tensor::cat(&[o1, o2], 3)
    }
}

/// The composition's cache write: the source's `(batch, seq, heads, d)` rows to positions
/// `pos..` of a `(batch, capacity, heads, d)` cache, any strides. Host code: candle-core runs it
/// on host copies for a device tensor.
struct Append {
    pos: usize,
}

/// Element offsets of a `(a, b, c, d)` layout's elements, in row-major order.
fn offsets(l: &Layout) -> impl Iterator<Item = usize> + '_ {
    let (dims, st, o) = (l.dims(), l.stride(), l.start_offset());
    let n: usize = dims.iter().product();
    (0..n).map(move |mut i| {
        let mut at = o;
        for (&dim, &s) in dims.iter().zip(st).rev() {
            at += (i % dim) * s;
            i /= dim;
        }
        at
    })
}

fn append_host<T: Copy>(
    pos: usize,
    dst: &mut [T],
    dl: &Layout,
    src: &[T],
    sl: &Layout,
) -> Result<()> {
    let window = dl.narrow(1, pos, sl.dims()[1])?;
    for (to, from) in offsets(&window).zip(offsets(sl)) {
        dst[to] = src[from];
    }
    Ok(())
}

impl InplaceOp2 for Append {
    fn name(&self) -> &'static str {
        "kv-cache-append"
    }

    fn cpu_fwd(&self, d: &mut CpuStorage, dl: &Layout, s: &CpuStorage, sl: &Layout) -> Result<()> {
        match (d, s) {
            (CpuStorage::F32(d), CpuStorage::F32(s)) => append_host(self.pos, d, dl, s, sl),
            (CpuStorage::F16(d), CpuStorage::F16(s)) => append_host(self.pos, d, dl, s, sl),
            (CpuStorage::BF16(d), CpuStorage::BF16(s)) => append_host(self.pos, d, dl, s, sl),
            (_, s) => Err(BackendError::UnsupportedDtype {
                op: OP,
                dtype: s.dtype(),
            }
            .into()),
        }
    }
}

/// The fused call on the ROCm device: the op that makes the output, whose `ext_fwd` takes the
/// key cache's and then the value cache's write lock ([`KeyCache`], [`ValueCache`]) and runs
/// both launches inside.
struct Step {
    g: RopeCacheGeometry,
    attn: FlashAttn,
    k_cache: Tensor,
    v_cache: Tensor,
    tables: Option<(Tensor, Tensor)>,
}

/// The error of a host fallback the fused op cannot take (its caches would not be written).
fn host_refused() -> candle_core::Error {
    BackendError::Invalid {
        op: OP.to_string(),
        detail: "the fused step runs on a ROCm device only (other devices take the composition)"
            .to_string(),
    }
    .into()
}

impl CustomOp3 for Step {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(host_refused())
    }

    fn ext_fwd(
        &self,
        q: &dyn ExtStorage,
        ql: &Layout,
        k: &dyn ExtStorage,
        kl: &Layout,
        v: &dyn ExtStorage,
        vl: &Layout,
    ) -> FusedResult {
        let Some([q, k, v]) = rocm([q, k, v]) else {
            return Ok(None);
        };
        let inputs = Inputs {
            step: self,
            qkv: [(q, ql), (k, kl), (v, vl)],
            out: RefCell::new(None),
        };
        self.k_cache.inplace_op1(&KeyCache(&inputs))?;
        match inputs.out.into_inner() {
            Some(out) => Ok(Some((Box::new(out), ql.shape().clone()))),
            None => Err(host_refused()),
        }
    }
}

/// What the nested ops see: the step, its inputs, and the output once made.
struct Inputs<'a> {
    step: &'a Step,
    qkv: [(&'a RocmStorage, &'a Layout); 3],
    out: RefCell<Option<RocmStorage>>,
}

/// The key cache's in-place op: holds its write lock while the value cache's runs.
struct KeyCache<'a>(&'a Inputs<'a>);

/// The value cache's in-place op, with the key cache's storage borrowed from [`KeyCache`].
struct ValueCache<'a> {
    inputs: &'a Inputs<'a>,
    k_cache: RefCell<Option<(&'a mut RocmStorage, &'a Layout)>>,
}

impl InplaceOp1 for KeyCache<'_> {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> Result<()> {
        Err(host_refused())
    }

    fn ext_fwd(&self, kc: &mut dyn ExtStorage, kcl: &Layout) -> Result<bool> {
        let Some(kc) = kc.as_any_mut().downcast_mut::<RocmStorage>() else {
            return Ok(false);
        };
        let inner = ValueCache {
            inputs: self.0,
            k_cache: RefCell::new(Some((kc, kcl))),
        };
        self.0.step.v_cache.inplace_op1(&inner)?;
        Ok(true)
    }
}

impl InplaceOp1 for ValueCache<'_> {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(&self, _: &mut CpuStorage, _: &Layout) -> Result<()> {
        Err(host_refused())
    }

    fn ext_fwd(&self, vc: &mut dyn ExtStorage, vcl: &Layout) -> Result<bool> {
        let Some(vc) = vc.as_any_mut().downcast_mut::<RocmStorage>() else {
            return Ok(false);
        };
        let Some((kc, kcl)) = self.k_cache.borrow_mut().take() else {
            return Err(host_refused());
        };
        let out = run(self.inputs, (kc, kcl), (vc, vcl))?;
        *self.inputs.out.borrow_mut() = Some(out);
        Ok(true)
    }
}

/// Both launches, every lock held: the rotation and cache writes, then the attention over the
/// caches' filled positions.
fn run(
    inputs: &Inputs<'_>,
    (kc, kcl): (&mut RocmStorage, &Layout),
    (vc, vcl): (&mut RocmStorage, &Layout),
) -> Result<RocmStorage> {
    let step = inputs.step;
    let [(q, ql), (k, kl), (v, vl)] = inputs.qkv;
    let dev = q.device.clone();
    for (what, s) in [("k", k), ("v", v), ("k_cache", &*kc), ("v_cache", &*vc)] {
        if !s.device.same_device(&dev) {
            return Err(parameter_error(OP, format_args!("{what} is not on q's device")).into());
        }
    }
    let rows = |l: &Layout| (l.stride()[0], l.stride()[1]);
    let g = RopeCacheGeometry {
        q: rows(ql),
        k: rows(kl),
        v: rows(vl),
        ..step.g
    };
    // The attention's checked call first, so a refusal writes nothing.
    let len = g.pos + g.seq;
    let out_l = Layout::contiguous((g.batch, g.seq, g.heads, g.head_dim));
    let q_attn = if g.rotation == Rotation::None {
        ql
    } else {
        &out_l
    };
    let dtype = BackendStorage::dtype(q);
    // The spec's strides are in elements of each operand: one dtype serves its checks.
    let cache = BackendStorage::dtype(&*kc);
    let spec = step.attn.spec(
        (cache, q_attn),
        (cache, &kcl.narrow(1, 0, len)?),
        (cache, &vcl.narrow(1, 0, len)?),
    )?;
    let guards = step
        .tables
        .as_ref()
        .map(|(c, s)| (c.storage_and_layout(), s.storage_and_layout()));
    let tables = match &guards {
        None => None,
        Some(((c, cl), (s, sl))) => Some([
            extra(OP, "cos", (&**c, cl), &dev)?,
            extra(OP, "sin", (&**s, sl), &dev)?,
        ]),
    };
    let offsets = [ql, kl, vl, kcl, vcl].map(|l| l.start_offset());
    let rotated = match (&q.slice, &k.slice, &v.slice, &mut kc.slice, &mut vc.slice) {
        (S::F32(q), S::F32(k), S::F32(v), S::F32(kc), S::F32(vc)) => {
            launch(&dev, &g, [q, k, v], tables, [kc, vc], offsets)?.map(S::from_buffer)
        }
        (S::F16(q), S::F16(k), S::F16(v), S::F16(kc), S::F16(vc)) => {
            launch(&dev, &g, [q, k, v], tables, [kc, vc], offsets)?.map(S::from_buffer)
        }
        (S::BF16(q), S::BF16(k), S::BF16(v), S::BF16(kc), S::BF16(vc)) => {
            launch(&dev, &g, [q, k, v], tables, [kc, vc], offsets)?.map(S::from_buffer)
        }
        (S::F32(q), S::F32(k), S::F32(v), S::F16(kc), S::F16(vc)) => {
            launch(&dev, &g, [q, k, v], tables, [kc, vc], offsets)?.map(S::from_buffer)
        }
        _ => return Err(BackendError::UnsupportedDtype { op: OP, dtype }.into()),
    };
    let q_slice = rotated.as_ref().unwrap_or(&q.slice);
    let out = forward(
        &dev,
        &spec,
        q_slice,
        &kc.slice,
        &vc.slice,
        &Extras::default(),
    )?;
    Ok(RocmStorage::new(out, dev))
}

/// A rotary table's buffer, of q's dtype.
fn table<T: RocmDType>(s: &S) -> std::result::Result<&DeviceBuffer<T>, BackendError> {
    T::as_buffer(s).ok_or_else(|| parameter_error(OP, "cos/sin are not of q's dtype"))
}

/// `b` from element `o` on.
fn view<T: RocmDType>(
    b: &DeviceBuffer<T>,
    o: usize,
) -> std::result::Result<DeviceView<'_, T>, BackendError> {
    Ok(b.slice(o..)?)
}

/// The rotation and cache writes for activations of `T` and caches of `C`: the rotated q (None
/// without a rotation).
fn launch<T: RocmDType, C: RocmDType>(
    dev: &crate::device::RocmDevice,
    g: &RopeCacheGeometry,
    [q, k, v]: [&DeviceBuffer<T>; 3],
    tables: Option<[Extra<'_>; 2]>,
    [kc, vc]: [&mut DeviceBuffer<C>; 2],
    [qo, ko, vo, kco, vco]: [usize; 5],
) -> std::result::Result<Option<DeviceBuffer<T>>, BackendError> {
    let (q, k, v) = (view(q, qo)?, view(k, ko)?, view(v, vo)?);
    let tables = match tables {
        None => None,
        Some([(c, co), (s, so)]) => Some((view(table::<T>(c)?, co)?, view(table::<T>(s)?, so)?)),
    };
    let mut kc = kc.slice_mut(kco..)?;
    let mut vc = vc.slice_mut(vco..)?;
    let mut out = match g.rotation {
        Rotation::None => None,
        _ => Some(dev.alloc::<T>(g.batch * g.seq * g.heads * g.head_dim)?),
    };
    rope_cache(
        dev,
        g,
        (&q, &k, &v),
        tables.as_ref().map(|(c, s)| (c, s)),
        out.as_mut(),
        (&mut kc, &mut vc),
    )?;
    Ok(out)
}
