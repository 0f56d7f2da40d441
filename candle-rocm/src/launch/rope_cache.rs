//! Launcher of the `rows` module's `rrope_cache_<T>`: one attention step's rotary embedding of
//! q and of the new keys, and the new keys' and values' append to a KV cache, in one launch
//! (the device side of `flash_attn_with_kvcache` in `slot::attention`). A decode step ran
//! these as three launches (the rotary embedding, then one copy into each cache). The caches
//! are of the activations' dtype, or f16 under f32 activations (`rrope_cache_f32h`: the f16 KV
//! cache of the GGUF decoders).
#![cfg_attr(not(feature = "candle"), allow(dead_code))]

use candle_core::DType;
use candle_rocm_kernels::Module;
use rocm_safe::{
    DeviceBuffer, DevicePtrArg, DeviceRepr, DeviceSlice, DeviceView, DeviceViewMut, LaunchConfig,
};

use super::rows::{BLOCK, MAX_BLOCKS};
use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{invalid, kernel_limit};

const OP: &str = "flash-attn-with-kvcache";

/// How a step rotates q and the new keys (the kernel's `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rotation {
    /// No rotary embedding: the keys are copied as they are and q is left alone.
    None,
    /// candle-nn's `rope`: element `i` of each half of a head pairs with `i + d / 2`.
    Halves,
    /// candle-nn's `rope_i`: adjacent elements pair (llama.cpp's GGUF row order).
    Pairs,
}

/// The shapes and strides (in elements) of one call. q, k and v are `(batch, seq, heads,
/// head_dim)` with heads `head_dim` apart and contiguous elements, so only their batch and
/// token strides vary; the caches hold `capacity` positions with contiguous elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeCacheGeometry {
    /// Sequences.
    pub batch: usize,
    /// New tokens of each sequence.
    pub seq: usize,
    /// Query heads.
    pub heads: usize,
    /// Key and value heads.
    pub kv_heads: usize,
    /// Elements of a head (even).
    pub head_dim: usize,
    /// Cache position of the first new token (also its rotary table row).
    pub pos: usize,
    /// Positions each cache holds.
    pub capacity: usize,
    /// q's (batch, token) strides.
    pub q: (usize, usize),
    /// The new keys' (batch, token) strides.
    pub k: (usize, usize),
    /// The new values' (batch, token) strides.
    pub v: (usize, usize),
    /// The key cache's (batch, position, head) strides.
    pub k_cache: (usize, usize, usize),
    /// The value cache's (batch, position, head) strides.
    pub v_cache: (usize, usize, usize),
    /// The rotation.
    pub rotation: Rotation,
}

/// The kernel parameter (`RopeCacheArgs` in rows.hip): twelve u64 strides, eight u32.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RopeCacheArgs {
    q_b: u64,
    q_t: u64,
    k_b: u64,
    k_t: u64,
    v_b: u64,
    v_t: u64,
    kc_b: u64,
    kc_t: u64,
    kc_h: u64,
    vc_b: u64,
    vc_t: u64,
    vc_h: u64,
    batch: u32,
    seq: u32,
    heads: u32,
    kv_heads: u32,
    d: u32,
    pos: u32,
    mode: u32,
    pad: u32,
}

// rows.hip asserts the same size on its side.
const _: () = assert!(std::mem::size_of::<RopeCacheArgs>() == 128);

// SAFETY: `RopeCacheArgs` is `#[repr(C)]` plain integers with no padding (128 bytes, asserted
// here and in rows.hip), so its bytes are exactly the kernel's `RopeCacheArgs` parameter.
unsafe impl DeviceRepr for RopeCacheArgs {}

/// One past the last element a `(batch, seq, heads, d)` operand with these (batch, token)
/// strides reaches; `None` on overflow.
fn reach_rows(g: &RopeCacheGeometry, (sb, st): (usize, usize), heads: usize) -> Option<usize> {
    (g.batch - 1)
        .checked_mul(sb)?
        .checked_add((g.seq - 1).checked_mul(st)?)?
        .checked_add(heads.checked_mul(g.head_dim)?)
}

/// One past the last element a cache write reaches (positions up to `pos + seq`).
fn reach_cache(g: &RopeCacheGeometry, (sb, sp, sh): (usize, usize, usize)) -> Option<usize> {
    (g.batch - 1)
        .checked_mul(sb)?
        .checked_add((g.pos + g.seq - 1).checked_mul(sp)?)?
        .checked_add((g.kv_heads - 1).checked_mul(sh)?)?
        .checked_add(g.head_dim)
}

/// The byte range `[start, end)` of `len` elements of `T` from `ptr`.
fn bytes<T>(ptr: *mut std::ffi::c_void, len: usize) -> (usize, usize) {
    let start = ptr as usize;
    (
        start,
        start.saturating_add(len.saturating_mul(size_of::<T>())),
    )
}

/// The kernel's arguments after every check: each operand's reach against its length, the
/// sizes against the kernel's 32-bit counters, and no source overlapping a cache it writes
/// (sources of `T`, caches of `C`).
fn checked<T, C>(
    g: &RopeCacheGeometry,
    srcs: [(&'static str, *mut std::ffi::c_void, usize); 3],
    tables: Option<(usize, usize)>,
    q_out: Option<usize>,
    caches: [(*mut std::ffi::c_void, usize); 2],
) -> Result<RopeCacheArgs, BackendError> {
    if g.head_dim % 2 != 0 {
        return Err(invalid(OP, format_args!("head_dim {} is odd", g.head_dim)));
    }
    if g.pos.checked_add(g.seq).is_none_or(|end| end > g.capacity) {
        return Err(invalid(
            OP,
            format_args!(
                "positions {}..{} do not fit a cache of {}",
                g.pos,
                g.pos.saturating_add(g.seq),
                g.capacity
            ),
        ));
    }
    let heads = [g.heads, g.kv_heads, g.kv_heads];
    let strides = [g.q, g.k, g.v];
    for ((what, _, len), (h, st)) in srcs.iter().zip(heads.into_iter().zip(strides)) {
        if reach_rows(g, st, h).is_none_or(|r| r > *len) {
            return Err(invalid(
                OP,
                format_args!("{what} of {len} elements is too short for {g:?}"),
            ));
        }
    }
    for ((what, (_, len)), st) in ["k_cache", "v_cache"]
        .into_iter()
        .zip(caches)
        .zip([g.k_cache, g.v_cache])
    {
        if reach_cache(g, st).is_none_or(|r| r > len) {
            return Err(invalid(
                OP,
                format_args!("{what} of {len} elements is too short for {g:?}"),
            ));
        }
    }
    let half = g.head_dim / 2;
    let table = (g.pos + g.seq).checked_mul(half);
    if let Some((cos, sin)) = tables {
        if table.is_none_or(|t| t > cos.min(sin)) {
            return Err(invalid(
                OP,
                format_args!(
                    "cos/sin of {cos} and {sin} elements have no row {} of {half}",
                    g.pos + g.seq - 1
                ),
            ));
        }
    }
    let out_len = g.batch * g.seq * g.heads * g.head_dim;
    if let Some(len) = q_out {
        if len < out_len {
            return Err(invalid(
                OP,
                format_args!("the rotated q needs {out_len} elements, has {len}"),
            ));
        }
    }
    // Sources read while the caches are written: no overlap (a key read from the cache it is
    // written to would race with its own write).
    for (cache, len) in caches {
        let c = bytes::<C>(cache, len);
        for (what, ptr, slen) in srcs {
            let s = bytes::<T>(ptr, slen);
            if s.0 < c.1 && c.0 < s.1 {
                return Err(invalid(
                    OP,
                    format_args!("{what} overlaps a cache the call writes"),
                ));
            }
        }
    }
    let threads = (g.heads + 2 * g.kv_heads)
        .checked_mul(half)
        .and_then(|t| t.checked_mul(g.batch))
        .and_then(|t| t.checked_mul(g.seq));
    let u32s = [
        g.batch, g.seq, g.heads, g.kv_heads, g.head_dim, g.pos, g.capacity,
    ];
    if threads.is_none_or(|t| t >= 1 << 31) || u32s.iter().any(|&v| u32::try_from(v).is_err()) {
        return Err(kernel_limit(OP, format_args!("{g:?} past 32-bit counters")));
    }
    let u = |v: usize| v as u64;
    // Each fits u32 (checked just above).
    let w = |v: usize| v as u32;
    Ok(RopeCacheArgs {
        q_b: u(g.q.0),
        q_t: u(g.q.1),
        k_b: u(g.k.0),
        k_t: u(g.k.1),
        v_b: u(g.v.0),
        v_t: u(g.v.1),
        kc_b: u(g.k_cache.0),
        kc_t: u(g.k_cache.1),
        kc_h: u(g.k_cache.2),
        vc_b: u(g.v_cache.0),
        vc_t: u(g.v_cache.1),
        vc_h: u(g.v_cache.2),
        batch: w(g.batch),
        seq: w(g.seq),
        heads: w(g.heads),
        kv_heads: w(g.kv_heads),
        d: w(g.head_dim),
        pos: w(g.pos),
        mode: match g.rotation {
            Rotation::None => 0,
            Rotation::Halves => 1,
            Rotation::Pairs => 2,
        },
        pad: 0,
    })
}

/// Runs `rrope_cache_<T>` for `g`: q rotated into `q_out` (contiguous `(batch, seq, heads,
/// head_dim)`; absent without a rotation), the new keys (rotated) and values written into
/// the caches at positions `pos..pos + seq`. `tables` are the rotary cos/sin tables, `d / 2`
/// values a row, required with a rotation. Every operand is checked against `g` first (a bad
/// call is a typed error and writes nothing). f32, f16, bf16 and f64 with caches of the same
/// dtype, and f32 with f16 caches (each value rounded to f16 as it is written).
pub(crate) fn rope_cache<T: RocmDType, C: RocmDType>(
    dev: &RocmDevice,
    g: &RopeCacheGeometry,
    (q, k, v): (&DeviceView<'_, T>, &DeviceView<'_, T>, &DeviceView<'_, T>),
    tables: Option<(&DeviceView<'_, T>, &DeviceView<'_, T>)>,
    q_out: Option<&mut DeviceBuffer<T>>,
    (k_cache, v_cache): (&mut DeviceViewMut<'_, C>, &mut DeviceViewMut<'_, C>),
) -> Result<(), BackendError> {
    let rotates = g.rotation != Rotation::None;
    if rotates != tables.is_some() || rotates != q_out.is_some() {
        return Err(invalid(
            OP,
            "a rotation takes the cos/sin tables and a buffer for the rotated q, and only it",
        ));
    }
    let name = match (T::DTYPE, C::DTYPE) {
        (DType::F32, DType::F32) => "rrope_cache_f32",
        (DType::F64, DType::F64) => "rrope_cache_f64",
        (DType::F16, DType::F16) => "rrope_cache_f16",
        (DType::BF16, DType::BF16) => "rrope_cache_bf16",
        (DType::F32, DType::F16) => "rrope_cache_f32h",
        (dtype, cache) if dtype == cache => {
            return Err(BackendError::UnsupportedDtype { op: OP, dtype })
        }
        (dtype, cache) => {
            return Err(invalid(
                OP,
                format_args!(
                    "caches of {cache:?} under {dtype:?} activations: the caches take the \
                     activations' dtype, or f16 under f32"
                ),
            ))
        }
    };
    if g.batch == 0 || g.seq == 0 || g.heads + g.kv_heads == 0 || g.head_dim == 0 {
        return Ok(());
    }
    let args = checked::<T, C>(
        g,
        [
            ("q", q.device_ptr(), q.len()),
            ("k", k.device_ptr(), k.len()),
            ("v", v.device_ptr(), v.len()),
        ],
        tables.map(|(c, s)| (c.len(), s.len())),
        q_out.as_ref().map(|o| o.len()),
        [
            (k_cache.device_ptr(), k_cache.len()),
            (v_cache.device_ptr(), v_cache.len()),
        ],
    )?;
    let threads = (g.heads + 2 * g.kv_heads) * (g.head_dim / 2) * g.batch * g.seq;
    let f = dev.function(Module::Rows, name)?;
    let cfg = LaunchConfig {
        // At most MAX_BLOCKS (2^20): fits u32; the kernel loops over the rest.
        grid_dim: (threads.div_ceil(BLOCK).clamp(1, MAX_BLOCKS) as u32, 1, 1),
        block_dim: (BLOCK as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let (pq, pk, pv) = (
        DevicePtrArg::of(q),
        DevicePtrArg::of(k),
        DevicePtrArg::of(v),
    );
    let (pc, ps, po) = match (tables, q_out) {
        (Some((c, s)), Some(o)) => (
            DevicePtrArg::of(c),
            DevicePtrArg::of(s),
            DevicePtrArg::of(&*o),
        ),
        // Not read without a rotation (mode 0).
        _ => (
            DevicePtrArg::null(),
            DevicePtrArg::null(),
            DevicePtrArg::null(),
        ),
    };
    let (pkc, pvc) = (DevicePtrArg::of(&*k_cache), DevicePtrArg::of(&*v_cache));
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&args).arg(&pq).arg(&pk).arg(&pv).arg(&pc).arg(&ps);
    l.arg(&po).arg(&pkc).arg(&pvc);
    // SAFETY: rrope_cache_<T>(RopeCacheArgs, const T* q, const T* k, const T* v, const T* cos,
    // const T* sin, T* q_out, C* k_cache, C* v_cache), in that order (the name picked for
    // this (T, C) pair above). `checked` proved every
    // element the kernel reads (q, k, v rows by their strides; table rows below pos + seq) and
    // writes (q_out's batch * seq * heads * d; cache positions below pos + seq by their
    // strides) inside its buffer, no source overlapping a cache, and every counter and the
    // thread count within the kernel's 32-bit indices; cos, sin and q_out are null only in
    // mode 0, which never touches them. The caches and q_out are borrowed exclusively; all
    // buffers are ordered on the device's stream.
    unsafe { l.launch(cfg)? };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_match_the_kernel_struct() {
        let debug = format!("{:?}", RopeCacheArgs::default());
        let fields =
            crate::launch::arg_layout::args_match_hip_struct("rows.hip", "RopeCacheArgs", &debug);
        assert_eq!(fields.len(), 20);
    }

    fn geometry() -> RopeCacheGeometry {
        RopeCacheGeometry {
            batch: 1,
            seq: 1,
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            pos: 5,
            capacity: 8,
            q: (64, 64),
            k: (64, 64),
            v: (64, 64),
            k_cache: (128, 16, 8),
            v_cache: (128, 16, 8),
            rotation: Rotation::Halves,
        }
    }

    const P: usize = 1 << 20;

    fn srcs(len: usize) -> [(&'static str, *mut std::ffi::c_void, usize); 3] {
        [
            ("q", P as *mut _, len),
            ("k", (P + 4096) as *mut _, len),
            ("v", (P + 8192) as *mut _, len),
        ]
    }

    fn caches(len: usize) -> [(*mut std::ffi::c_void, usize); 2] {
        [((2 * P) as *mut _, len), ((3 * P) as *mut _, len)]
    }

    #[test]
    fn a_call_that_fits_passes_with_its_strides() {
        let a = checked::<f32, f32>(&geometry(), srcs(64), Some((48, 48)), Some(32), caches(128))
            .unwrap();
        assert_eq!((a.kc_t, a.kc_h, a.pos, a.mode, a.d), (16, 8, 5, 1, 8));
    }

    #[test]
    fn every_short_operand_is_refused() {
        let g = geometry();
        // q's row: heads * d = 32 elements; k's 16 from its start.
        assert!(checked::<f32, f32>(&g, srcs(15), Some((48, 48)), Some(32), caches(128)).is_err());
        // Cache position 5, head 1: 5 * 16 + 8 + 8 = 96 elements.
        assert!(checked::<f32, f32>(&g, srcs(64), Some((48, 48)), Some(32), caches(95)).is_err());
        assert!(checked::<f32, f32>(&g, srcs(64), Some((48, 48)), Some(32), caches(96)).is_ok());
        // Table row 5 of 4 values: 24 elements.
        assert!(checked::<f32, f32>(&g, srcs(64), Some((23, 48)), Some(32), caches(128)).is_err());
        assert!(checked::<f32, f32>(&g, srcs(64), Some((48, 48)), Some(31), caches(128)).is_err());
        let full = RopeCacheGeometry { pos: 8, ..g };
        assert!(
            checked::<f32, f32>(&full, srcs(64), Some((48, 48)), Some(32), caches(256)).is_err()
        );
        let odd = RopeCacheGeometry { head_dim: 7, ..g };
        assert!(
            checked::<f32, f32>(&odd, srcs(64), Some((48, 48)), Some(32), caches(128)).is_err()
        );
    }

    /// The overlap test measures caches in their own elements: 64 f16 elements of a cache span
    /// 128 bytes, so a source 100 bytes in overlaps it, one 128 bytes in does not.
    #[test]
    fn f16_caches_are_measured_in_their_own_elements() {
        let g = RopeCacheGeometry {
            k_cache: (32, 16, 8),
            v_cache: (32, 16, 8),
            capacity: 2,
            pos: 0,
            ..geometry()
        };
        let at = |offset: usize| {
            let mut s = srcs(64);
            s[2].1 = (2 * P + offset) as *mut _;
            checked::<f32, half::f16>(&g, s, Some((48, 48)), Some(32), caches(64))
        };
        assert!(at(100).unwrap_err().to_string().contains("v overlaps"));
        assert!(at(128).is_ok());
    }

    #[test]
    fn a_source_inside_a_cache_is_refused() {
        let mut s = srcs(64);
        s[1].1 = (2 * P + 64) as *mut _;
        let e = checked::<f32, f32>(&geometry(), s, Some((48, 48)), Some(32), caches(128));
        assert!(e.unwrap_err().to_string().contains("k overlaps"));
    }
}
