//! The backend parity suite: `RocmStorage` and candle's `CpuStorage` run the same
//! `BackendStorage` call on the same data and layouts and must agree within the dtype's
//! tolerance (common/mod.rs). Cases are drawn from a seeded generator (random shapes
//! including scalars, empty tensors, size-1 dims and sizes around the block and wave sizes;
//! contiguous, offset, transposed, narrowed and broadcast layouts; NaN, infinities, -0.0
//! and integer extremes where the op is defined for them): a failure names its seed.
//!
//! Every (method, dtype) pair is either expected to match the CPU or expected to return the
//! typed "not available for this dtype" error (pairs candle's CUDA backend lacks too); see
//! `supported`. With `CANDLE_ROCM_PARITY_LOG` set, each test appends its per-dtype tally.
//! Ignored in CI (no GPU); the HIP-on-CUDA harness runs it.
//!
//! This file holds the elementwise, comparison, cast, reduction, copy and matmul cases and the
//! shared machinery; `indexing/`, `spatial/` (pools, upsampling, convolutions), `rows/`,
//! `conv_paths/` (the convolutions' GEMM path) and `fast_paths/` the rest.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod conv_paths;
mod fast_paths;
mod indexing;
mod rows;
mod spatial;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{self, BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_rocm::{RocmDevice, RocmStorage};
use common::*;

/// Random cases per (method, dtype): 12, or `$CANDLE_ROCM_PARITY_CASES` (the harness uses
/// fewer under compute-sanitizer).
fn n_cases() -> u64 {
    std::env::var("CANDLE_ROCM_PARITY_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n >= 2)
        .unwrap_or(12)
}

/// Whether `method` is expected to work for `dtype`; otherwise it must return the typed
/// "not available" error. This is the table in the crate README.
fn supported(method: &str, dtype: DType) -> bool {
    if dtype == DType::F8E4M3 {
        // candle-kernels has elementwise FP8 kernels; copies and indexing move its bits.
        return matches!(
            method,
            "affine"
                | "powf"
                | "elu"
                | "cmp"
                | "where_cond"
                | "to_dtype"
                | "const_set"
                | "copy_strided_src"
                | "transpose_copy"
                | "try_clone"
                | "copy2d"
                | "index_select"
                | "gather"
                | "scatter_set"
        ) || method.starts_with("unary_")
            || method.starts_with("binary_");
    }
    let float = dtype.is_float();
    match method {
        "powf" | "elu" => float,
        m if m.starts_with("unary_") => float,
        "matmul" | "conv1d" | "conv2d" | "avg_pool2d" => float,
        "conv_transpose1d" | "conv_transpose2d" => float || matches!(dtype, DType::U8 | DType::U32),
        "max_pool2d" | "upsample_nearest1d" | "upsample_nearest2d" | "upsample_bilinear2d" => {
            float || matches!(dtype, DType::U8 | DType::U32)
        }
        _ => true,
    }
}

/// The seed of case `i` of `method` for `dtype`.
fn seed(method: &str, dtype: DType, i: u64) -> u64 {
    let h = method
        .bytes()
        .chain(dtype.as_str().bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
    h ^ i
}

/// Runs one case: when the pair is supported, the GPU result must match the CPU's (or both
/// must fail); otherwise the GPU must return the typed error (or, for an empty tensor, which
/// launches nothing, an empty result).
///
/// candle-core 0.11.1's CPU backend panics on some empty inputs (a division by zero in
/// reductions over a zero-size dim, slice bounds in binary ops on empty views with an
/// offset). Such a case cannot be compared: it counts under "cpu panicked", and the ROCm side
/// must still return, with a value or an error, without panicking.
fn check(
    method: &str,
    dtype: DType,
    what: &str,
    scale: f64,
    cpu: impl FnOnce() -> candle_core::Result<CpuStorage>,
    gpu: impl FnOnce() -> candle_core::Result<CpuStorage>,
) {
    if !supported(method, dtype) {
        append_log("trace", what);
        match gpu() {
            Err(err) => {
                let msg = err.to_string();
                if !(msg.contains("not available for") || msg.contains("unsupported dtype")) {
                    return fail(
                        method,
                        dtype,
                        format!("{what}: expected 'not available', got {msg}"),
                    );
                }
            }
            Ok(r) if as_f64(&r).is_empty() => {}
            Ok(_) => return fail(method, dtype, format!("{what}: expected an error")),
        }
        unsupported(method, dtype);
        return;
    }
    append_log("trace", what);
    let got = gpu();
    let want = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(cpu)) {
        Ok(want) => want,
        Err(_) => {
            eprintln!(
                "{what}: candle's CPU backend panicked; rocm returned {:?}",
                got.as_ref().map(|_| ())
            );
            cpu_panicked(method, dtype);
            return;
        }
    };
    let outcome = match (want, got) {
        (Ok(want), Ok(got)) => compare(what, &got, &want, scale),
        (Err(_), Err(_)) => Ok(()),
        (Ok(_), Err(e)) => Err(format!("{what}: rocm failed where the cpu succeeded: {e}")),
        (Err(e), Ok(_)) => Err(format!("{what}: rocm succeeded where the cpu failed: {e}")),
    };
    match outcome {
        Ok(()) => passed(method, dtype),
        Err(msg) => fail(method, dtype, msg),
    }
}

fn upload(dev: &RocmDevice, cpu: &CpuStorage) -> RocmStorage {
    dev.storage_from_cpu_storage(cpu).unwrap()
}

/// `(cpu, gpu, layout, description)` for a random tensor of `dtype`.
fn random_operand(
    dev: &RocmDevice,
    rng: &mut Rng,
    dtype: DType,
    dims: &[usize],
    values: Values,
) -> (CpuStorage, RocmStorage, Layout, String) {
    let (layout, kind) = random_layout(rng, dims);
    let cpu = random_data(rng, dtype, buffer_len(&layout), values);
    let gpu = upload(dev, &cpu);
    let what = format!(
        "{dims:?} {kind} stride {:?} offset {}",
        layout.stride(),
        layout.start_offset()
    );
    (cpu, gpu, layout, what)
}

#[test]
#[ignore = "needs a HIP device"]
fn affine_powf_elu() {
    let dev = device();
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed("affine", dtype, i);
            let mut rng = Rng::new(s);
            let dims = random_dims(&mut rng, 4, 5000);
            let vals = if dtype.is_float() {
                Values::Special
            } else {
                Values::Moderate
            };
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &dims, vals);
            let (mul, add) = if dtype.is_float() {
                (1.5, -0.25)
            } else {
                (3.0, 2.0)
            };
            check(
                "affine",
                dtype,
                &format!("affine seed {s} {w}"),
                1.0,
                || c.affine(&l, mul, add),
                || g.affine(&l, mul, add)?.to_cpu_storage(),
            );
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &dims, Values::Positive);
            check(
                "powf",
                dtype,
                &format!("powf seed {s} {w}"),
                4.0,
                || c.powf(&l, 1.7),
                || g.powf(&l, 1.7)?.to_cpu_storage(),
            );
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &dims, Values::Moderate);
            check(
                "elu",
                dtype,
                &format!("elu seed {s} {w}"),
                4.0,
                || c.elu(&l, 0.7),
                || g.elu(&l, 0.7)?.to_cpu_storage(),
            );
        }
    }
    for m in ["affine", "powf", "elu"] {
        assert_eq!(cases(m), DTYPES.len() * n_cases() as usize, "{m}");
        flush(m);
    }
    finish(&["affine", "powf", "elu"]);
}

fn unary<U: UnaryOpT>(dev: &RocmDevice, values: Values, scale: f64) {
    let method = format!("unary_{}", U::NAME);
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed(&method, dtype, i);
            let mut rng = Rng::new(s);
            let dims = random_dims(&mut rng, 4, 5000);
            let (c, g, l, w) = random_operand(dev, &mut rng, dtype, &dims, values);
            check(
                &method,
                dtype,
                &format!("{method} seed {s} {w}"),
                scale,
                || c.unary_impl::<U>(&l),
                || g.unary_impl::<U>(&l)?.to_cpu_storage(),
            );
        }
    }
    assert_eq!(
        cases(&method),
        DTYPES.len() * n_cases() as usize,
        "{method}"
    );
    flush(&method);
}

#[test]
#[ignore = "needs a HIP device"]
fn every_unary_op() {
    let dev = device();
    use Values::*;
    unary::<op::Exp>(&dev, Special, 4.0);
    unary::<op::Log>(&dev, Positive, 4.0);
    unary::<op::Sin>(&dev, Moderate, 4.0);
    unary::<op::Cos>(&dev, Moderate, 4.0);
    unary::<op::Tanh>(&dev, Special, 4.0);
    unary::<op::Neg>(&dev, Special, 1.0);
    unary::<op::Recip>(&dev, Special, 2.0);
    unary::<op::Sqr>(&dev, Special, 2.0);
    unary::<op::Sqrt>(&dev, Positive, 2.0);
    unary::<op::Gelu>(&dev, Moderate, 8.0);
    unary::<op::GeluErf>(&dev, Moderate, 8.0);
    unary::<op::Erf>(&dev, Moderate, 8.0);
    // NaN is not compared for relu (CPU: max(NaN, 0) = 0 in Rust; kernels differ by dtype).
    unary::<op::Relu>(&dev, Moderate, 1.0);
    unary::<op::Silu>(&dev, Moderate, 8.0);
    unary::<op::Abs>(&dev, Special, 1.0);
    unary::<op::Floor>(&dev, Special, 1.0);
    unary::<op::Ceil>(&dev, Special, 1.0);
    unary::<op::Round>(&dev, Moderate, 1.0);
    unary::<op::Sign>(&dev, Moderate, 1.0);
    finish(&["unary_"]);
}

fn binary<B: BinaryOpT>(dev: &RocmDevice) {
    let method = format!("binary_{}", B::NAME);
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed(&method, dtype, i);
            let mut rng = Rng::new(s);
            let dims = random_dims(&mut rng, 4, 5000);
            // Integer division by zero is undefined on the CPU; keep rhs positive there.
            // NaN is not compared for maximum/minimum: candle's CPU backend keeps the lhs
            // when either side is NaN, its GPU kernels follow fmax/fmin (the number wins).
            let rhs_vals = match (B::NAME, dtype.is_float()) {
                ("div", false) => Values::Positive,
                ("maximum" | "minimum", _) => Values::Moderate,
                (_, true) => Values::Special,
                _ => Values::Moderate,
            };
            let (ca, ga, la, wa) = random_operand(dev, &mut rng, dtype, &dims, Values::Moderate);
            let (cb, gb, lb, wb) = random_operand(dev, &mut rng, dtype, &dims, rhs_vals);
            let what = format!("{method} seed {s} lhs {wa} rhs {wb}");
            if B::NAME == "div" && !dtype.is_float() && as_f64(&cb).contains(&0.0) {
                continue;
            }
            // Integer overflow panics in a debug CPU build; skip the rare overflowing draw.
            let wide = |x: f64| x.abs() < 1e15;
            if !dtype.is_float() && !as_f64(&ca).iter().chain(&as_f64(&cb)).all(|&x| wide(x)) {
                continue;
            }
            check(
                &method,
                dtype,
                &what,
                1.0,
                || ca.binary_impl::<B>(&cb, &la, &lb),
                || ga.binary_impl::<B>(&gb, &la, &lb)?.to_cpu_storage(),
            );
        }
    }
    flush(&method);
}

#[test]
#[ignore = "needs a HIP device"]
fn every_binary_op_with_broadcast_and_strides() {
    let dev = device();
    binary::<op::Add>(&dev);
    binary::<op::Sub>(&dev);
    binary::<op::Mul>(&dev);
    binary::<op::Div>(&dev);
    binary::<op::Maximum>(&dev);
    binary::<op::Minimum>(&dev);
    for m in ["add", "sub", "mul", "maximum", "minimum"] {
        assert!(
            cases(&format!("binary_{m}")) >= DTYPES.len() * n_cases() as usize - 9,
            "{m}"
        );
    }
    finish(&["binary_"]);
}

#[test]
#[ignore = "needs a HIP device"]
fn cmp_every_op() {
    let dev = device();
    let ops = [
        ("eq", CmpOp::Eq),
        ("ne", CmpOp::Ne),
        ("lt", CmpOp::Lt),
        ("le", CmpOp::Le),
        ("gt", CmpOp::Gt),
        ("ge", CmpOp::Ge),
    ];
    for (name, op) in ops {
        for dtype in DTYPES {
            for i in 0..n_cases() {
                let s = seed(&format!("cmp{name}"), dtype, i);
                let mut rng = Rng::new(s);
                let dims = random_dims(&mut rng, 4, 5000);
                let (ca, ga, la, wa) =
                    random_operand(&dev, &mut rng, dtype, &dims, Values::Special);
                // Half of the cases compare a tensor with a copy of itself, so equality occurs.
                let (cb, gb, lb, wb) = if rng.chance(0.5) {
                    (ca.clone(), upload(&dev, &ca), la.clone(), wa.clone())
                } else {
                    random_operand(&dev, &mut rng, dtype, &dims, Values::Special)
                };
                check(
                    "cmp",
                    dtype,
                    &format!("cmp {name} seed {s} {wa} / {wb}"),
                    1.0,
                    || ca.cmp(op, &cb, &la, &lb),
                    || ga.cmp(op, &gb, &la, &lb)?.to_cpu_storage(),
                );
            }
        }
    }
    assert_eq!(cases("cmp"), 6 * DTYPES.len() * n_cases() as usize);
    flush("cmp");
    finish(&["cmp"]);
}

#[test]
#[ignore = "needs a HIP device"]
fn where_cond_every_condition_dtype() {
    let dev = device();
    let conds = [DType::U8, DType::U32, DType::I16, DType::I32, DType::I64];
    for cond in conds {
        for dtype in DTYPES {
            for i in 0..n_cases() / 2 {
                let s = seed(&format!("where{cond:?}"), dtype, i);
                let mut rng = Rng::new(s);
                let dims = random_dims(&mut rng, 4, 5000);
                let (cc, gc, lc, wc) = random_operand(&dev, &mut rng, cond, &dims, Values::Special);
                let (ct, gt, lt, _) = random_operand(&dev, &mut rng, dtype, &dims, Values::Special);
                let (cf, gf, lf, _) = random_operand(&dev, &mut rng, dtype, &dims, Values::Special);
                check(
                    "where_cond",
                    dtype,
                    &format!("where {cond:?} seed {s} {wc}"),
                    1.0,
                    || cc.where_cond(&lc, &ct, &lt, &cf, &lf),
                    || gc.where_cond(&lc, &gt, &lt, &gf, &lf)?.to_cpu_storage(),
                );
            }
        }
    }
    assert_eq!(
        cases("where_cond"),
        5 * DTYPES.len() * (n_cases() / 2) as usize
    );
    flush("where_cond");
    finish(&["where_cond"]);
}

#[test]
#[ignore = "needs a HIP device"]
fn to_dtype_every_pair() {
    let dev = device();
    for src in DTYPES {
        for dst in DTYPES {
            for i in 0..n_cases() / 2 {
                let s = seed(&format!("cast{src:?}"), dst, i);
                let mut rng = Rng::new(s);
                let dims = random_dims(&mut rng, 3, 3000);
                let (c, g, l, w) = random_operand(&dev, &mut rng, src, &dims, Values::Special);
                check(
                    "to_dtype",
                    dst,
                    &format!("{src:?} -> {dst:?} seed {s} {w}"),
                    // f64 -> f16/bf16 rounds once on ROCm; the `half` crate's conversions
                    // round twice (through f32) or truncate: allow one ulp of the destination.
                    1.0,
                    || {
                        if (src, dst) == (DType::F8E4M3, DType::F64) {
                            // candle-core 0.11.1's CPU f8e4m3 -> f64 recurses without end
                            // (stack overflow in debug builds, a hang in release); f32 holds
                            // every f8e4m3 value exactly.
                            let f = c.to_dtype(&l, DType::F32)?;
                            return f.to_dtype(&Layout::contiguous(l.shape()), DType::F64);
                        }
                        c.to_dtype(&l, dst)
                    },
                    || g.to_dtype(&l, dst)?.to_cpu_storage(),
                );
            }
        }
    }
    assert_eq!(
        cases("to_dtype"),
        DTYPES.len() * DTYPES.len() * (n_cases() / 2) as usize
    );
    flush("to_dtype");
    finish(&["to_dtype"]);
}

#[test]
#[ignore = "needs a HIP device"]
fn reduce_every_op_over_any_dims() {
    let dev = device();
    let ops = [
        ("sum", ReduceOp::Sum),
        ("min", ReduceOp::Min),
        ("max", ReduceOp::Max),
        ("argmin", ReduceOp::ArgMin),
        ("argmax", ReduceOp::ArgMax),
    ];
    for (name, op) in ops {
        let method = format!("reduce_{name}");
        for dtype in DTYPES {
            for i in 0..n_cases() {
                let s = seed(&method, dtype, i);
                let mut rng = Rng::new(s);
                let mut dims = random_dims(&mut rng, 4, 20_000);
                if dims.is_empty() {
                    dims.push(1 + rng.below(3000));
                }
                // Sums take any non-empty subset of the dims, in any order; candle's CPU
                // backend takes one dim for min, max and the arg ops.
                let red: Vec<usize> = if op == ReduceOp::Sum {
                    let mut red: Vec<usize> = (0..dims.len()).filter(|_| rng.chance(0.5)).collect();
                    if red.is_empty() {
                        red.push(rng.below(dims.len()));
                    }
                    if rng.chance(0.5) {
                        red.reverse();
                    }
                    red
                } else {
                    vec![rng.below(dims.len())]
                };
                let per: usize = red.iter().map(|&d| dims[d]).product();
                // Sums of integers must not overflow in a debug CPU build; sums of half types
                // are rounded per step on the CPU, so keep them short. NaN ordering is not the
                // same on both sides for min/max, so those draw moderate values (integer
                // extremes included through the small types' full range).
                let vals = match (op, dtype.is_float()) {
                    (ReduceOp::Sum, false) => Values::Small,
                    _ => Values::Moderate,
                };
                if op == ReduceOp::Sum && matches!(dtype, DType::F16 | DType::BF16) && per > 64 {
                    continue;
                }
                let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &dims, vals);
                let what = format!("{method} over {red:?} seed {s} {w}");
                if matches!(op, ReduceOp::ArgMin | ReduceOp::ArgMax) {
                    // Equal extremes may be reported at different positions: the GPU's index
                    // must point at an element equal to the CPU's extreme.
                    let value_op = if op == ReduceOp::ArgMin {
                        ReduceOp::Min
                    } else {
                        ReduceOp::Max
                    };
                    check(
                        &method,
                        dtype,
                        &what,
                        0.0,
                        || c.reduce_op(value_op, &l, &red),
                        || {
                            let idx = g.reduce_op(op, &l, &red)?.to_cpu_storage()?;
                            let mut dense = random_data(
                                &mut Rng::new(0),
                                dtype,
                                l.shape().elem_count(),
                                Values::Moderate,
                            );
                            c.copy_strided_src(&mut dense, 0, &l)?;
                            let mut idims = dims.clone();
                            idims[red[0]] = 1;
                            let il = Layout::contiguous(Shape::from(idims));
                            dense.gather(&Layout::contiguous(l.shape()), &idx, &il, red[0])
                        },
                    );
                    continue;
                }
                let scale = if op == ReduceOp::Sum {
                    4.0 * per as f64
                } else {
                    0.0
                };
                check(
                    &method,
                    dtype,
                    &what,
                    scale,
                    || c.reduce_op(op, &l, &red),
                    || g.reduce_op(op, &l, &red)?.to_cpu_storage(),
                );
            }
        }
        flush(&method);
    }
    finish(&["reduce_"]);
}

#[test]
#[ignore = "needs a HIP device"]
fn const_set_copy2d_copy_strided_try_clone() {
    let dev = device();
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed("copies", dtype, i);
            let mut rng = Rng::new(s);
            let dims = random_dims(&mut rng, 4, 5000);
            // const_set over a random (possibly strided) view of a buffer.
            let (mut c, mut g, l, w) =
                random_operand(&dev, &mut rng, dtype, &dims, Values::Special);
            let v = random_data(&mut rng, dtype, 1, Values::Special);
            let scalar = match &v {
                CpuStorage::U8(x) => candle_core::scalar::Scalar::U8(x[0]),
                CpuStorage::U32(x) => candle_core::scalar::Scalar::U32(x[0]),
                CpuStorage::I16(x) => candle_core::scalar::Scalar::I16(x[0]),
                CpuStorage::I32(x) => candle_core::scalar::Scalar::I32(x[0]),
                CpuStorage::I64(x) => candle_core::scalar::Scalar::I64(x[0]),
                CpuStorage::BF16(x) => candle_core::scalar::Scalar::BF16(x[0]),
                CpuStorage::F16(x) => candle_core::scalar::Scalar::F16(x[0]),
                CpuStorage::F32(x) => candle_core::scalar::Scalar::F32(x[0]),
                CpuStorage::F64(x) => candle_core::scalar::Scalar::F64(x[0]),
                CpuStorage::F8E4M3(x) => candle_core::scalar::Scalar::F8E4M3(x[0]),
                _ => unreachable!(),
            };
            if l.stride().contains(&0) {
                // Writing through a broadcast layout is a race on every backend.
            } else {
                check(
                    "const_set",
                    dtype,
                    &format!("const_set seed {s} {w}"),
                    0.0,
                    || {
                        c.const_set(scalar, &l)?;
                        Ok(c.clone())
                    },
                    || {
                        g.const_set(scalar, &l)?;
                        g.to_cpu_storage()
                    },
                );
            }
            // copy_strided_src into a larger destination at an offset.
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &dims, Values::Special);
            let el = l.shape().elem_count();
            let off = rng.below(5);
            let extra = rng.below(3);
            let dst_c = random_data(&mut rng, dtype, el + off + extra, Values::Moderate);
            let mut dst_cc = dst_c.clone();
            let mut dst_g = upload(&dev, &dst_c);
            check(
                "copy_strided_src",
                dtype,
                &format!("copy_strided_src seed {s} {w} -> {off}"),
                0.0,
                || {
                    c.copy_strided_src(&mut dst_cc, off, &l)?;
                    Ok(dst_cc.clone())
                },
                || {
                    g.copy_strided_src(&mut dst_g, off, &l)?;
                    dst_g.to_cpu_storage()
                },
            );
            check(
                "try_clone",
                dtype,
                &format!("try_clone seed {s} {w}"),
                0.0,
                || c.try_clone(&l),
                || g.try_clone(&l)?.to_cpu_storage(),
            );
            // copy2d between random row pitches and offsets.
            let (d1, d2) = (rng.below(40), 1 + rng.below(70));
            let (ss, ds) = (d2 + rng.below(5), d2 + rng.below(5));
            let (so, doff) = (rng.below(7), rng.below(7));
            let src_len = so + d1.saturating_sub(1) * ss + d2;
            let dst_len = doff + d1.saturating_sub(1) * ds + d2;
            let src_c = random_data(&mut rng, dtype, src_len, Values::Special);
            let dst_c = random_data(&mut rng, dtype, dst_len, Values::Special);
            let (src_g, mut dst_g) = (upload(&dev, &src_c), upload(&dev, &dst_c));
            let mut dst_cc = dst_c.clone();
            check(
                "copy2d",
                dtype,
                &format!("copy2d seed {s} {d1}x{d2} {ss}->{ds} +{so}->{doff}"),
                0.0,
                || {
                    src_c.copy2d(&mut dst_cc, d1, d2, ss, ds, so, doff)?;
                    Ok(dst_cc.clone())
                },
                || {
                    src_g.copy2d(&mut dst_g, d1, d2, ss, ds, so, doff)?;
                    dst_g.to_cpu_storage()
                },
            );
        }
    }
    for m in ["const_set", "copy_strided_src", "try_clone", "copy2d"] {
        assert!(cases(m) > 0, "{m}");
        flush(m);
    }
    finish(&["const_set", "copy_strided_src", "try_clone", "copy2d"]);
}

/// A strided matmul in f64 on the host, rounded to `dtype`: the reference for `matmul`.
/// (candle-core 0.11.1's CPU matmul is not used: it returns wrong values for a transposed
/// lhs with a broadcast, stride-0 rhs batch, e.g. seed 4949545091351380655 below.)
fn naive_matmul(
    dtype: DType,
    (b, m, n, k): (usize, usize, usize, usize),
    (lc, ll): (&CpuStorage, &Layout),
    (rc, rl): (&CpuStorage, &Layout),
) -> CpuStorage {
    let (l, r) = (as_f64(lc), as_f64(rc));
    let (ls, rs) = (ll.stride(), rl.stride());
    let (lo, ro) = (ll.start_offset(), rl.start_offset());
    let mut out = Vec::with_capacity(b * m * n);
    for bi in 0..b {
        for mi in 0..m {
            for ni in 0..n {
                let acc: f64 = (0..k)
                    .map(|ki| {
                        l[lo + bi * ls[0] + mi * ls[1] + ki * ls[2]]
                            * r[ro + bi * rs[0] + ki * rs[1] + ni * rs[2]]
                    })
                    .sum();
                out.push(acc);
            }
        }
    }
    from_f64(dtype, &out)
}

#[test]
#[ignore = "needs a HIP device"]
fn matmul_transposed_and_batched_operands() {
    let dev = device();
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed("matmul", dtype, i);
            let mut rng = Rng::new(s);
            let (b, m, n, k) = (
                1 + rng.below(3),
                1 + rng.below(70),
                1 + rng.below(70),
                1 + rng.below(70),
            );
            // lhs (b, m, k) and rhs (b, k, n): each possibly transposed in its last two dims,
            // with a broadcast (stride 0) batch, or offset.
            let make = |rng: &mut Rng, rows: usize, cols: usize| -> Layout {
                match rng.below(4) {
                    0 => Layout::contiguous_with_offset((b, rows, cols), rng.below(4)),
                    1 => Layout::contiguous((b, cols, rows)).transpose(1, 2).unwrap(),
                    2 => Layout::new(Shape::from((b, rows, cols)), vec![0, cols, 1], rng.below(3)),
                    _ => Layout::contiguous((b, rows, cols)),
                }
            };
            let (ll, rl) = (make(&mut rng, m, k), make(&mut rng, k, n));
            let lc = random_data(&mut rng, dtype, buffer_len(&ll), Values::Small);
            let rc = random_data(&mut rng, dtype, buffer_len(&rl), Values::Small);
            let (lg, rg) = (upload(&dev, &lc), upload(&dev, &rc));
            let what = format!(
                "matmul seed {s} bmnk {:?} lhs {:?} rhs {:?}",
                (b, m, n, k),
                ll.stride(),
                rl.stride()
            );
            let scale = 4.0 * k as f64;
            check(
                "matmul",
                dtype,
                &what,
                scale,
                || Ok(naive_matmul(dtype, (b, m, n, k), (&lc, &ll), (&rc, &rl))),
                || lg.matmul(&rg, (b, m, n, k), &ll, &rl)?.to_cpu_storage(),
            );
        }
    }
    flush("matmul");
    finish(&["matmul"]);
}
