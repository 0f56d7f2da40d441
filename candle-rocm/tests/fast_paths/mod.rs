//! Parity cases aimed at the `elementwise` module's paths (candle-rocm/src/launch/elementwise.rs):
//! sizes around the 16-byte pack (1, 3, 4, 5, 7, 8, 9, ..., 4097, ~1M), views at element
//! offsets that break 16-byte alignment, and strided and broadcast layouts (row, column,
//! transposed, narrowed, unmergeable) of rank 1 to 8, past the six dims the kernels take by
//! value (those run candle-kernels' upload path, or our `where` module for `where_cond`).
//! `where_cond` runs for every condition dtype and every binary dtype, compared bit for bit.
//! Method names carry a `fast_` prefix so the main suite's per-method counts stay exact.

use candle_core::backend::BackendStorage;
use candle_core::op::{self, BinaryOpT, UnaryOpT};
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_rocm::RocmDevice;

use super::{check, seed, upload};
use crate::common::*;

/// Sizes around the pack widths (4 f32, 8 f16/bf16, 2 f64, 16 u8) and large ones.
const SIZES: [usize; 16] = [
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    9,
    15,
    16,
    17,
    33,
    1023,
    4097,
    65_537,
    (1 << 20) + 3,
];

/// Start offsets: aligned, then 1..3 elements (breaks 16-byte alignment for every dtype) and
/// one pack further (aligned again for f32).
const OFFSETS: [usize; 5] = [0, 1, 2, 3, 4];

/// The binary dtypes the module takes (f8e4m3 keeps candle-kernels' path).
const BINARY_DTYPES: [DType; 9] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::U8,
    DType::U32,
    DType::I16,
    DType::I32,
    DType::I64,
];

fn data(rng: &mut Rng, dtype: DType, n: usize, values: Values) -> candle_core::CpuStorage {
    random_data(rng, dtype, n, values)
}

fn unary_case<U: UnaryOpT>(
    dev: &RocmDevice,
    dtype: DType,
    layout: &Layout,
    values: Values,
    scale: f64,
    rng: &mut Rng,
    what: &str,
) {
    let c = data(rng, dtype, buffer_len(layout), values);
    let g = upload(dev, &c);
    check(
        &format!("fast_unary_{}", U::NAME),
        dtype,
        &format!("{} {what}", U::NAME),
        scale,
        || c.unary_impl::<U>(layout),
        || g.unary_impl::<U>(layout)?.to_cpu_storage(),
    );
}

/// Every unary op, affine, elu and powf, and the casts to each float dtype, on one layout.
fn all_unary(dev: &RocmDevice, dtype: DType, layout: &Layout, rng: &mut Rng, what: &str) {
    use Values::*;
    unary_case::<op::Exp>(dev, dtype, layout, Special, 4.0, rng, what);
    unary_case::<op::Log>(dev, dtype, layout, Positive, 4.0, rng, what);
    unary_case::<op::Sin>(dev, dtype, layout, Moderate, 4.0, rng, what);
    unary_case::<op::Cos>(dev, dtype, layout, Moderate, 4.0, rng, what);
    unary_case::<op::Tanh>(dev, dtype, layout, Special, 4.0, rng, what);
    unary_case::<op::Neg>(dev, dtype, layout, Special, 1.0, rng, what);
    unary_case::<op::Recip>(dev, dtype, layout, Special, 2.0, rng, what);
    unary_case::<op::Sqr>(dev, dtype, layout, Special, 2.0, rng, what);
    unary_case::<op::Sqrt>(dev, dtype, layout, Positive, 2.0, rng, what);
    unary_case::<op::Gelu>(dev, dtype, layout, Moderate, 8.0, rng, what);
    unary_case::<op::GeluErf>(dev, dtype, layout, Moderate, 8.0, rng, what);
    unary_case::<op::Erf>(dev, dtype, layout, Moderate, 8.0, rng, what);
    unary_case::<op::Relu>(dev, dtype, layout, Moderate, 1.0, rng, what);
    unary_case::<op::Silu>(dev, dtype, layout, Moderate, 8.0, rng, what);
    unary_case::<op::Abs>(dev, dtype, layout, Special, 1.0, rng, what);
    unary_case::<op::Floor>(dev, dtype, layout, Special, 1.0, rng, what);
    unary_case::<op::Ceil>(dev, dtype, layout, Special, 1.0, rng, what);
    unary_case::<op::Round>(dev, dtype, layout, Moderate, 1.0, rng, what);
    unary_case::<op::Sign>(dev, dtype, layout, Moderate, 1.0, rng, what);
    let c = data(rng, dtype, buffer_len(layout), Special);
    let g = upload(dev, &c);
    check(
        "fast_affine",
        dtype,
        &format!("affine {what}"),
        1.0,
        || c.affine(layout, 1.5, -0.25),
        || g.affine(layout, 1.5, -0.25)?.to_cpu_storage(),
    );
    check(
        "fast_elu",
        dtype,
        &format!("elu {what}"),
        4.0,
        || c.elu(layout, 0.7),
        || g.elu(layout, 0.7)?.to_cpu_storage(),
    );
    let p = data(rng, dtype, buffer_len(layout), Positive);
    let gp = upload(dev, &p);
    check(
        "fast_powf",
        dtype,
        &format!("powf {what}"),
        4.0,
        || p.powf(layout, 1.7),
        || gp.powf(layout, 1.7)?.to_cpu_storage(),
    );
    for dst in FLOATS {
        check(
            "fast_to_dtype",
            dst,
            &format!("{dtype:?} -> {dst:?} {what}"),
            1.0,
            || c.to_dtype(layout, dst),
            || g.to_dtype(layout, dst)?.to_cpu_storage(),
        );
    }
}

fn binary_case<B: BinaryOpT>(
    dev: &RocmDevice,
    dtype: DType,
    (la, lb): (&Layout, &Layout),
    rng: &mut Rng,
    what: &str,
) {
    // Integers: small values (no overflow in a debug CPU build) and a nonzero divisor.
    let (va, vb) = match (dtype.is_float(), B::NAME) {
        (true, "maximum" | "minimum") => (Values::Moderate, Values::Moderate),
        (true, _) => (Values::Moderate, Values::Special),
        (false, "div") => (Values::Small, Values::Positive),
        (false, _) => (Values::Small, Values::Small),
    };
    let ca = data(rng, dtype, buffer_len(la), va);
    let mut cb = data(rng, dtype, buffer_len(lb), vb);
    if !dtype.is_float() && B::NAME == "div" && as_f64(&cb).contains(&0.0) {
        let ones: Vec<f64> = as_f64(&cb).iter().map(|&x| x.max(1.0)).collect();
        cb = match dtype {
            DType::U8 => candle_core::CpuStorage::U8(ones.iter().map(|&x| x as u8).collect()),
            DType::U32 => candle_core::CpuStorage::U32(ones.iter().map(|&x| x as u32).collect()),
            DType::I16 => candle_core::CpuStorage::I16(ones.iter().map(|&x| x as i16).collect()),
            DType::I32 => candle_core::CpuStorage::I32(ones.iter().map(|&x| x as i32).collect()),
            _ => candle_core::CpuStorage::I64(ones.iter().map(|&x| x as i64).collect()),
        };
    }
    let (ga, gb) = (upload(dev, &ca), upload(dev, &cb));
    check(
        &format!("fast_binary_{}", B::NAME),
        dtype,
        &format!("{} {what}", B::NAME),
        1.0,
        || ca.binary_impl::<B>(&cb, la, lb),
        || ga.binary_impl::<B>(&gb, la, lb)?.to_cpu_storage(),
    );
}

fn all_binary(dev: &RocmDevice, dtype: DType, la: &Layout, lb: &Layout, rng: &mut Rng, w: &str) {
    binary_case::<op::Add>(dev, dtype, (la, lb), rng, w);
    binary_case::<op::Sub>(dev, dtype, (la, lb), rng, w);
    binary_case::<op::Mul>(dev, dtype, (la, lb), rng, w);
    binary_case::<op::Div>(dev, dtype, (la, lb), rng, w);
    binary_case::<op::Maximum>(dev, dtype, (la, lb), rng, w);
    binary_case::<op::Minimum>(dev, dtype, (la, lb), rng, w);
}

/// Contiguous operands of every size around the pack, at aligned and misaligned offsets.
#[test]
#[ignore = "needs a HIP device"]
fn fast_paths_sizes_and_misaligned_offsets() {
    let dev = device();
    for (si, &n) in SIZES.iter().enumerate() {
        // The largest sizes run at two offsets only (one aligned, one not).
        let offsets: &[usize] = if n > 5000 { &[0, 1] } else { &OFFSETS };
        for &off in offsets {
            let l = Layout::contiguous_with_offset(Shape::from(n), off);
            let what = format!("n {n} offset {off}");
            for dtype in FLOATS {
                let mut rng = Rng::new(seed("fast_sizes", dtype, (si * 8 + off) as u64));
                all_unary(&dev, dtype, &l, &mut rng, &what);
            }
            for dtype in BINARY_DTYPES {
                let mut rng = Rng::new(seed("fast_sizes_bin", dtype, (si * 8 + off) as u64));
                // lhs misaligned by `off`, rhs by a different amount, and both aligned.
                let lb = Layout::contiguous_with_offset(Shape::from(n), (off * 3) % 5);
                all_binary(
                    &dev,
                    dtype,
                    &l,
                    &lb,
                    &mut rng,
                    &format!("{what} rhs {lb:?}"),
                );
            }
        }
    }
    finish(&["fast_"]);
}

/// `dims` with the last two dims swapped in memory (a transposed view).
fn transposed(dims: &[usize], offset: usize) -> Layout {
    let r = dims.len();
    if r < 2 {
        return Layout::contiguous_with_offset(Shape::from(dims.to_vec()), offset);
    }
    let mut swapped = dims.to_vec();
    swapped.swap(r - 2, r - 1);
    Layout::contiguous_with_offset(Shape::from(swapped), offset)
        .transpose(r - 2, r - 1)
        .unwrap()
}

/// The layouts of one rank: (name, lhs, rhs).
fn strided_layouts(dims: &[usize], rng: &mut Rng) -> Vec<(&'static str, Layout, Layout)> {
    let r = dims.len();
    let shape = Shape::from(dims.to_vec());
    let contiguous = Layout::contiguous(shape.clone());
    let strides = contiguous_strides(dims);
    let mut out = Vec::new();
    // Row broadcast: rhs is one row of the last dim, stride 0 elsewhere.
    let mut row = vec![0usize; r];
    row[r - 1] = 1;
    out.push((
        "row broadcast",
        contiguous.clone(),
        Layout::new(shape.clone(), row, rng.below(3)),
    ));
    // Column broadcast: rhs has size 1 in the last dim.
    let mut col_dims = dims.to_vec();
    col_dims[r - 1] = 1;
    let mut col = contiguous_strides(&col_dims);
    col[r - 1] = 0;
    out.push((
        "column broadcast",
        contiguous.clone(),
        Layout::new(shape.clone(), col, 0),
    ));
    // The broadcast operand on the left (sub and div are not symmetric).
    let mut lrow = vec![0usize; r];
    lrow[r - 1] = 1;
    out.push((
        "lhs row broadcast",
        Layout::new(shape.clone(), lrow, 1),
        Layout::contiguous_with_offset(shape.clone(), 2),
    ));
    // Every other dim broadcast: nothing merges, so rank > 6 takes the upload path.
    let alternating: Vec<usize> = strides
        .iter()
        .enumerate()
        .map(|(i, &s)| if i % 2 == 1 { 0 } else { s })
        .collect();
    out.push((
        "alternating broadcast",
        contiguous.clone(),
        Layout::new(shape.clone(), alternating, rng.below(3)),
    ));
    // Transposed and narrowed operands.
    out.push(("transposed", transposed(dims, 1), contiguous.clone()));
    let big: Vec<usize> = dims.iter().map(|d| d + 3).collect();
    let mut narrowed = Layout::contiguous_with_offset(Shape::from(big.clone()), 1);
    for (i, &d) in dims.iter().enumerate() {
        narrowed = narrowed.narrow(i, rng.below(4), d).unwrap();
    }
    out.push(("narrowed", contiguous, narrowed));
    out
}

/// Strided and broadcast operands of rank 1 to 8 (the kernels take 6 merged dims by value;
/// above that, candle-kernels' path runs).
#[test]
#[ignore = "needs a HIP device"]
fn fast_paths_strided_and_broadcast_by_rank() {
    let dev = device();
    for rank in 1..=8usize {
        for case in 0..3u64 {
            let mut rng = Rng::new(seed("fast_rank", DType::F32, rank as u64 * 16 + case));
            // Small dims so rank 8 stays small; the last dim a multiple of 8 (packs) or odd.
            let mut dims: Vec<usize> = (0..rank).map(|_| rng.pick(&[2, 3, 4])).collect();
            dims[rank - 1] = rng.pick(&[8, 16, 24, 5, 7, 33]);
            for (kind, la, lb) in strided_layouts(&dims, &mut rng) {
                let what = format!("rank {rank} {dims:?} {kind} lhs {la:?} rhs {lb:?}");
                for dtype in BINARY_DTYPES {
                    all_binary(&dev, dtype, &la, &lb, &mut rng, &what);
                }
                for dtype in FLOATS {
                    // Unary ops see the non-contiguous operand.
                    all_unary(
                        &dev,
                        dtype,
                        &lb,
                        &mut rng,
                        &format!("rank {rank} {kind} {lb:?}"),
                    );
                }
            }
        }
    }
    finish(&["fast_"]);
}

/// The condition dtypes `where_cond` takes.
const COND_DTYPES: [DType; 5] = [DType::U8, DType::U32, DType::I16, DType::I32, DType::I64];

/// `n` conditions of `dtype`: about half zero, the rest small values, negatives and values
/// whose only set bits are high ones (a narrower comparison than the type's would miss them).
fn cond_data(rng: &mut Rng, dtype: DType, n: usize) -> CpuStorage {
    let v: Vec<i64> = (0..n)
        .map(|_| {
            if rng.chance(0.5) {
                0
            } else {
                rng.pick(&[1, 2, 7, 255, -1, -300, 1 << 8, 1 << 15, 1 << 31, 1 << 40])
            }
        })
        .collect();
    // Each value wraps to the dtype's width (`as`), nonzero ones kept nonzero.
    let nz = |x: i64, bits: u32| {
        if x != 0 && x & ((1i64 << bits) - 1) == 0 {
            1
        } else {
            x
        }
    };
    match dtype {
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| nz(x, 8) as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| nz(x, 32) as u32).collect()),
        DType::I16 => CpuStorage::I16(v.iter().map(|&x| nz(x, 16) as i16).collect()),
        DType::I32 => CpuStorage::I32(v.iter().map(|&x| nz(x, 32) as i32).collect()),
        _ => CpuStorage::I64(v),
    }
}

/// The elements' bits (exact for every dtype: NaN payloads and the sign of zero count).
fn bits(s: &CpuStorage) -> Vec<u64> {
    match s {
        CpuStorage::F32(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        CpuStorage::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        CpuStorage::F16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        CpuStorage::BF16(v) => v.iter().map(|x| x.to_bits() as u64).collect(),
        CpuStorage::U8(v) => v.iter().map(|&x| x as u64).collect(),
        CpuStorage::U32(v) => v.iter().map(|&x| x as u64).collect(),
        CpuStorage::I16(v) => v.iter().map(|&x| x as u16 as u64).collect(),
        CpuStorage::I32(v) => v.iter().map(|&x| x as u32 as u64).collect(),
        CpuStorage::I64(v) => v.iter().map(|&x| x as u64).collect(),
        other => panic!("unexpected {:?}", other.dtype()),
    }
}

/// `where_cond` on one (cond, t, f) layout triple, compared with the CPU value for value
/// (scale 0: exact) and then bit for bit.
fn where_case(
    dev: &RocmDevice,
    (cond_dtype, dtype): (DType, DType),
    (lc, lt, lf): (&Layout, &Layout, &Layout),
    rng: &mut Rng,
    what: &str,
) {
    let cc = cond_data(rng, cond_dtype, buffer_len(lc));
    let ct = data(rng, dtype, buffer_len(lt), Values::Special);
    let cf = data(rng, dtype, buffer_len(lf), Values::Special);
    let (gc, gt, gf) = (upload(dev, &cc), upload(dev, &ct), upload(dev, &cf));
    let what = format!("where {cond_dtype:?} -> {dtype:?} {what}");
    let (mut want_bits, mut got_bits) = (None, None);
    check(
        "fast_where_cond",
        dtype,
        &what,
        0.0,
        || {
            let r = cc.where_cond(lc, &ct, lt, &cf, lf)?;
            want_bits = Some(bits(&r));
            Ok(r)
        },
        || {
            let r = gc.where_cond(lc, &gt, lt, &gf, lf)?.to_cpu_storage()?;
            got_bits = Some(bits(&r));
            Ok(r)
        },
    );
    if let (Some(w), Some(g)) = (want_bits, got_bits) {
        if let Some(i) = (0..w.len().min(g.len())).find(|&i| w[i] != g[i]) {
            let msg = format!(
                "{what}: element {i}: rocm bits {:#x} vs cpu {:#x}",
                g[i], w[i]
            );
            fail("fast_where_cond", dtype, msg);
        }
    }
}

/// `where_cond` with contiguous operands of every size around the pack (16 bytes of the
/// smaller of the condition and value types), each operand at its own aligned or misaligned
/// offset, for every condition dtype and every value dtype the module takes.
#[test]
#[ignore = "needs a HIP device"]
fn fast_where_cond_sizes_offsets_and_dtypes() {
    let dev = device();
    for cond in COND_DTYPES {
        for dtype in BINARY_DTYPES {
            for (si, &n) in SIZES.iter().enumerate() {
                let offsets: &[usize] = if n > 5000 { &[0, 1] } else { &OFFSETS };
                for &off in offsets {
                    let mut rng = Rng::new(seed(
                        &format!("fast_where{cond:?}"),
                        dtype,
                        (si * 8 + off) as u64,
                    ));
                    let shape = Shape::from(n);
                    let lc = Layout::contiguous_with_offset(shape.clone(), off);
                    let lt = Layout::contiguous_with_offset(shape.clone(), (off * 3) % 5);
                    let lf = Layout::contiguous_with_offset(shape, (off * 7) % 5);
                    let w = format!("n {n} offsets {off}/{}/{}", (off * 3) % 5, (off * 7) % 5);
                    where_case(&dev, (cond, dtype), (&lc, &lt, &lf), &mut rng, &w);
                }
            }
        }
    }
    finish(&["fast_where_cond"]);
}

/// The (cond, t, f) layouts of one rank: broadcast conditions (row, column, an attention
/// mask over the leading dims, a scalar), scalar and narrowed values, a transposed operand
/// (the element path) and alternating broadcasts (above six dims: our `where` module).
fn where_layouts(dims: &[usize], rng: &mut Rng) -> Vec<(&'static str, [Layout; 3])> {
    let r = dims.len();
    let shape = Shape::from(dims.to_vec());
    let contiguous = Layout::contiguous(shape.clone());
    let strides = contiguous_strides(dims);
    let bcast = |keep: &dyn Fn(usize) -> bool, offset: usize| {
        let s: Vec<usize> = (0..r)
            .map(|i| if keep(i) { strides[i] } else { 0 })
            .collect();
        Layout::new(shape.clone(), s, offset)
    };
    // A row: only the last dim.
    let row = bcast(&|i| i == r - 1, rng.below(3));
    // A column: every dim but the last.
    let mut col_dims = dims.to_vec();
    col_dims[r - 1] = 1;
    let mut col = contiguous_strides(&col_dims);
    col[r - 1] = 0;
    let col = Layout::new(shape.clone(), col, 0);
    // An attention mask: the last two dims, broadcast over the rest.
    let mask = bcast(&|i| i + 2 >= r, 0);
    let scalar = bcast(&|_| false, rng.below(3));
    let alternating = bcast(&|i| i % 2 == 0, rng.below(3));
    let big: Vec<usize> = dims.iter().map(|d| d + 3).collect();
    let mut narrowed = Layout::contiguous_with_offset(Shape::from(big), 1);
    for (i, &d) in dims.iter().enumerate() {
        narrowed = narrowed.narrow(i, rng.below(4), d).unwrap();
    }
    let c = || contiguous.clone();
    vec![
        ("cond row", [row.clone(), c(), c()]),
        ("cond column", [col.clone(), c(), c()]),
        ("cond mask", [mask.clone(), c(), c()]),
        ("cond mask, scalar f", [mask, c(), scalar.clone()]),
        ("scalar cond, row t", [scalar.clone(), row, c()]),
        ("cond column, scalar t", [col, scalar, c()]),
        ("transposed t", [c(), transposed(dims, 1), c()]),
        ("narrowed f", [c(), c(), narrowed.clone()]),
        (
            "narrowed cond, transposed f",
            [narrowed, c(), transposed(dims, 2)],
        ),
        ("alternating cond", [alternating, c(), c()]),
    ]
}

/// `where_cond` with strided and broadcast operands of rank 1 to 8, every condition dtype and
/// every value dtype the module takes.
#[test]
#[ignore = "needs a HIP device"]
fn fast_where_cond_strided_and_broadcast_by_rank() {
    let dev = device();
    for rank in 1..=8usize {
        for case in 0..2u64 {
            let mut rng = Rng::new(seed("fast_where_rank", DType::F32, rank as u64 * 16 + case));
            let mut dims: Vec<usize> = (0..rank).map(|_| rng.pick(&[2, 3, 4])).collect();
            dims[rank - 1] = rng.pick(&[16, 32, 48, 5, 7, 33]);
            for (kind, [lc, lt, lf]) in where_layouts(&dims, &mut rng) {
                let w = format!("rank {rank} {dims:?} {kind} cond {lc:?} t {lt:?} f {lf:?}");
                for cond in COND_DTYPES {
                    for dtype in BINARY_DTYPES {
                        where_case(&dev, (cond, dtype), (&lc, &lt, &lf), &mut rng, &w);
                    }
                }
            }
        }
    }
    finish(&["fast_where_cond"]);
}

/// Index dtypes of `index_select`.
const IDS_DTYPES: [DType; 3] = [DType::U8, DType::U32, DType::I64];

/// Element dtypes of the `index_select` cases: every element size (1, 2, 4, 8 bytes).
const SELECT_DTYPES: [DType; 6] = [
    DType::F32,
    DType::BF16,
    DType::F16,
    DType::F64,
    DType::U8,
    DType::I64,
];

/// `n` ids for a dim of `size` (< 200) as `(device ids, cpu ids)`: valid values and, with
/// `invalid`, out-of-range ones, the all-ones sentinel and (i64) negative ones. The device
/// selects zeros for every invalid id; the CPU backend only for the type's maximum (it
/// returns an error for the others), so its copy has the maximum in their place.
fn select_ids(
    rng: &mut Rng,
    ids: DType,
    n: usize,
    size: usize,
    invalid: bool,
) -> (CpuStorage, CpuStorage) {
    let size_i = size as i64;
    let v: Vec<i64> = (0..n)
        .map(|_| {
            if !invalid || rng.chance(0.7) {
                return rng.below(size) as i64;
            }
            match ids {
                DType::U8 => rng.pick(&[size_i, 200, 254, 255]),
                DType::U32 => rng.pick(&[size_i, size_i + 1000, u32::MAX as i64]),
                _ => rng.pick(&[size_i, size_i + 1, -1, -7, i64::MIN, i64::MAX]),
            }
        })
        .collect();
    let ok = |x: i64| (0..size_i).contains(&x);
    match ids {
        DType::U8 => (
            CpuStorage::U8(v.iter().map(|&x| x as u8).collect()),
            CpuStorage::U8(
                v.iter()
                    .map(|&x| if ok(x) { x as u8 } else { u8::MAX })
                    .collect(),
            ),
        ),
        DType::U32 => (
            CpuStorage::U32(v.iter().map(|&x| x as u32).collect()),
            CpuStorage::U32(
                v.iter()
                    .map(|&x| if ok(x) { x as u32 } else { u32::MAX })
                    .collect(),
            ),
        ),
        _ => (
            CpuStorage::I64(v.clone()),
            CpuStorage::I64(
                v.iter()
                    .map(|&x| if ok(x) { x } else { i64::MAX })
                    .collect(),
            ),
        ),
    }
}

/// One `index_select` along `dim` of a contiguous `dims` source starting at element
/// `offset`, with `n_ids` ids `stride` apart, compared with the CPU exactly.
#[allow(clippy::too_many_arguments)]
fn select_case(
    dev: &RocmDevice,
    (dtype, ids_dt): (DType, DType),
    dims: &[usize],
    dim: usize,
    offset: usize,
    (n_ids, stride): (usize, usize),
    invalid: bool,
    rng: &mut Rng,
) {
    let src_l = Layout::contiguous_with_offset(Shape::from(dims.to_vec()), offset);
    let src_c = data(rng, dtype, buffer_len(&src_l), Values::Small);
    let src_g = upload(dev, &src_c);
    let (ids_dev, ids_cpu) = select_ids(rng, ids_dt, (n_ids - 1) * stride + 2, dims[dim], invalid);
    let ids_g = upload(dev, &ids_dev);
    // The ids view starts one element in, `stride` apart.
    let ids_l = Layout::new(Shape::from(n_ids), vec![stride], 1);
    check(
        "fast_index_select",
        dtype,
        &format!(
            "index_select {ids_dt:?} dim {dim} of {dims:?} offset {offset} ids {n_ids}x{stride} \
             invalid {invalid}"
        ),
        0.0,
        || src_c.index_select(&ids_cpu, &src_l, &ids_l, dim),
        || {
            src_g
                .index_select(&ids_g, &src_l, &ids_l, dim)?
                .to_cpu_storage()
        },
    );
}

/// `index_select` along dim 0 and a middle dim, with row segments of 1..=8 elements and
/// around each pack width (16, 8 and 4 bytes: the row-copy kernels and the per-element
/// fallback), sources at misaligned offsets, strided ids and invalid ids (out of range,
/// sentinels, negative), for every element size and index dtype; then an embedding lookup
/// and a launch whose rows outnumber the grid (the grid-stride loop).
#[test]
#[ignore = "needs a HIP device"]
fn fast_index_select_rows_offsets_and_invalid_ids() {
    let dev = device();
    for ids_dt in IDS_DTYPES {
        for dtype in SELECT_DTYPES {
            let es = dtype.size_in_bytes();
            let mut rights: Vec<usize> = (1..=8).collect();
            for b in [16, 32] {
                for r in [b / es - 1, b / es, b / es + 1] {
                    if r > 0 && !rights.contains(&r) {
                        rights.push(r);
                    }
                }
            }
            rights.extend([16 * 300 / es, 16 * 259 / es + 1]);
            for (ri, &right) in rights.iter().enumerate() {
                let mut rng = Rng::new(seed(&format!("fast_is{ids_dt:?}"), dtype, ri as u64));
                for (ci, &offset) in [0usize, 1, 2, 4].iter().enumerate() {
                    let size = 1 + rng.below(40);
                    let n_ids = 1 + rng.below(70);
                    let stride = 1 + rng.below(2);
                    let invalid = ci % 2 == 1;
                    // dim 0, and a middle dim (left > 1, right split over two dims).
                    select_case(
                        &dev,
                        (dtype, ids_dt),
                        &[size, right],
                        0,
                        offset,
                        (n_ids, stride),
                        invalid,
                        &mut rng,
                    );
                    let dims: Vec<usize> = if right % 2 == 0 {
                        vec![3, size, 2, right / 2]
                    } else {
                        vec![3, size, right]
                    };
                    select_case(
                        &dev,
                        (dtype, ids_dt),
                        &dims,
                        1,
                        offset,
                        (n_ids, stride),
                        !invalid,
                        &mut rng,
                    );
                }
            }
        }
    }
    // The embedding lookup: 8192 x 1024 rows, 4096 ids.
    for dtype in [DType::F32, DType::BF16] {
        let mut rng = Rng::new(seed("fast_is_embedding", dtype, 0));
        select_case(
            &dev,
            (dtype, DType::U32),
            &[8192, 1024],
            0,
            0,
            (4096, 1),
            false,
            &mut rng,
        );
    }
    // 65,600 rows of 256 packs: more than 2^16 blocks of one row each.
    let mut rng = Rng::new(seed("fast_is_grid_stride", DType::U8, 0));
    select_case(
        &dev,
        (DType::U8, DType::I64),
        &[4, 7, 4096],
        1,
        0,
        (16_400, 1),
        true,
        &mut rng,
    );
    finish(&["fast_index_select"]);
}
