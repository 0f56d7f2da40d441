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

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod conv_paths;
mod fast_paths;

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

/// Valid random indices into a dim of `size`, in dtype `ids`, sometimes Candle's "no index"
/// sentinel (the type's max), which reads as zero / writes nothing on both backends.
fn random_ids(rng: &mut Rng, ids: DType, n: usize, size: usize, sentinel: bool) -> CpuStorage {
    let v: Vec<u64> = (0..n)
        .map(|_| {
            if sentinel && rng.chance(0.1) {
                u64::MAX
            } else {
                rng.below(size.max(1)) as u64
            }
        })
        .collect();
    match ids {
        DType::U8 => CpuStorage::U8(
            v.iter()
                .map(|&x| if x == u64::MAX { u8::MAX } else { x as u8 })
                .collect(),
        ),
        DType::U32 => CpuStorage::U32(
            v.iter()
                .map(|&x| if x == u64::MAX { u32::MAX } else { x as u32 })
                .collect(),
        ),
        DType::I64 => CpuStorage::I64(
            v.iter()
                .map(|&x| if x == u64::MAX { i64::MAX } else { x as i64 })
                .collect(),
        ),
        other => panic!("{other:?} is not an index type"),
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn index_select_gather_scatter_index_add() {
    let dev = device();
    for ids_dt in [DType::U8, DType::U32, DType::I64] {
        for dtype in DTYPES {
            for i in 0..n_cases() / 2 {
                let s = seed(&format!("index{ids_dt:?}"), dtype, i);
                let mut rng = Rng::new(s);
                let mut dims = random_dims(&mut rng, 4, 4000);
                if dims.is_empty() {
                    dims.push(1 + rng.below(9));
                }
                let dim = rng.below(dims.len());
                let size = dims[dim].clamp(1, 200);
                dims[dim] = size;
                let src_l = contiguous_layout(&mut rng, &dims);
                let src_c = random_data(&mut rng, dtype, buffer_len(&src_l), Values::Small);
                let src_g = upload(&dev, &src_c);
                let sentinel = ids_dt != DType::U8 || size < 255;
                let tag = format!("{ids_dt:?} dim {dim} of {dims:?} seed {s}");

                // index_select with 1-D (possibly strided) ids.
                let n_ids = rng.below(9);
                let stride = 1 + rng.below(2);
                let ids_c = random_ids(
                    &mut rng,
                    ids_dt,
                    (n_ids.max(1) - 1) * stride + 1 + 2,
                    size,
                    sentinel,
                );
                let ids_g = upload(&dev, &ids_c);
                let ids_l = Layout::new(Shape::from(n_ids), vec![stride], 1);
                check(
                    "index_select",
                    dtype,
                    &format!("index_select {tag}"),
                    0.0,
                    || src_c.index_select(&ids_c, &src_l, &ids_l, dim),
                    || {
                        src_g
                            .index_select(&ids_g, &src_l, &ids_l, dim)?
                            .to_cpu_storage()
                    },
                );

                // gather: ids shaped like the source except along `dim`.
                let mut gdims = dims.clone();
                gdims[dim] = 1 + rng.below(6);
                let gl = contiguous_layout(&mut rng, &gdims);
                let gids_c = random_ids(&mut rng, ids_dt, buffer_len(&gl), size, sentinel);
                let gids_g = upload(&dev, &gids_c);
                check(
                    "gather",
                    dtype,
                    &format!("gather {tag}"),
                    0.0,
                    || src_c.gather(&src_l, &gids_c, &gl, dim),
                    || src_g.gather(&src_l, &gids_g, &gl, dim)?.to_cpu_storage(),
                );

                // scatter_set / scatter_add_set into a fresh destination of `dims`.
                let upd_c = random_data(&mut rng, dtype, buffer_len(&gl), Values::Small);
                let upd_g = upload(&dev, &upd_c);
                let upd_l = Layout::contiguous_with_offset(gl.shape(), gl.start_offset());
                let dst_l = Layout::contiguous(Shape::from(dims.clone()));
                let dst_c = random_data(&mut rng, dtype, dst_l.shape().elem_count(), Values::Small);
                for (method, add) in [("scatter_set", false), ("scatter_add_set", true)] {
                    // Scatter with repeated indices writes in an unspecified order (set);
                    // use distinct indices along `dim` for scatter_set.
                    let ids_c = if add {
                        gids_c.clone()
                    } else {
                        distinct_ids(&mut rng, ids_dt, &gl, dim, size)
                    };
                    if !add && ids_c.dtype() == DType::U8 && size > 255 {
                        continue;
                    }
                    let ids_g = upload(&dev, &ids_c);
                    let (mut dc, mut dg) = (dst_c.clone(), upload(&dev, &dst_c));
                    check(
                        method,
                        dtype,
                        &format!("{method} {tag}"),
                        2.0,
                        || {
                            if add {
                                dc.scatter_add_set(&dst_l, &ids_c, &gl, &upd_c, &upd_l, dim)?;
                            } else {
                                dc.scatter_set(&dst_l, &ids_c, &gl, &upd_c, &upd_l, dim)?;
                            }
                            Ok(dc.clone())
                        },
                        || {
                            if add {
                                dg.scatter_add_set(&dst_l, &ids_g, &gl, &upd_g, &upd_l, dim)?;
                            } else {
                                dg.scatter_set(&dst_l, &ids_g, &gl, &upd_g, &upd_l, dim)?;
                            }
                            dg.to_cpu_storage()
                        },
                    );
                }

                // index_add: src has ids_dim entries along `dim`.
                let mut adims = dims.clone();
                let n_add = 1 + rng.below(6);
                adims[dim] = n_add;
                let al = Layout::contiguous(Shape::from(adims));
                let add_c = random_data(&mut rng, dtype, al.shape().elem_count(), Values::Small);
                let add_g = upload(&dev, &add_c);
                let aids_c = random_ids(&mut rng, ids_dt, n_add, size, sentinel);
                let aids_g = upload(&dev, &aids_c);
                let aids_l = Layout::contiguous(Shape::from(n_add));
                check(
                    "index_add",
                    dtype,
                    &format!("index_add {tag}"),
                    2.0,
                    || dst_c.index_add(&dst_l, &aids_c, &aids_l, &add_c, &al, dim),
                    || {
                        upload(&dev, &dst_c)
                            .index_add(&dst_l, &aids_g, &aids_l, &add_g, &al, dim)?
                            .to_cpu_storage()
                    },
                );
            }
        }
    }
    for m in [
        "index_select",
        "gather",
        "scatter_set",
        "scatter_add_set",
        "index_add",
    ] {
        assert!(
            cases(m)
                >= (DTYPES.len() * 3 * (n_cases() / 2) as usize)
                    .saturating_sub(30)
                    .max(1),
            "{m}: {}",
            cases(m)
        );
        flush(m);
    }
    finish(&[
        "index_select",
        "gather",
        "scatter_set",
        "scatter_add_set",
        "index_add",
    ]);
}

/// Scatter indices that are distinct along `dim` for every other position (a permutation
/// prefix), so `scatter_set` has one writer per destination element.
fn distinct_ids(rng: &mut Rng, ids: DType, l: &Layout, dim: usize, size: usize) -> CpuStorage {
    let dims = l.dims();
    let n = dims[dim];
    let left: usize = dims[..dim].iter().product();
    let right: usize = dims[dim + 1..].iter().product();
    let mut v = vec![0u64; l.start_offset() + left * n * right];
    for a in 0..left {
        for c in 0..right {
            let mut perm: Vec<u64> = (0..size as u64).collect();
            for j in 0..n {
                let k = j + rng.below(size - j.min(size - 1));
                perm.swap(j.min(size - 1), k.min(size - 1));
                v[l.start_offset() + (a * n + j) * right + c] =
                    if j < size { perm[j] } else { u64::MAX };
            }
        }
    }
    match ids {
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| x.min(255) as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| x.min(u32::MAX as u64) as u32).collect()),
        _ => CpuStorage::I64(v.iter().map(|&x| x.min(i64::MAX as u64) as i64).collect()),
    }
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

#[test]
#[ignore = "needs a HIP device"]
fn pools_and_upsampling() {
    let dev = device();
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed("pool", dtype, i);
            let mut rng = Rng::new(s);
            let dims = [
                1 + rng.below(3),
                1 + rng.below(4),
                1 + rng.below(20),
                1 + rng.below(20),
            ];
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &dims, Values::Moderate);
            let k = (1 + rng.below(dims[2].min(3)), 1 + rng.below(dims[3].min(3)));
            let st = (1 + rng.below(3), 1 + rng.below(3));
            check(
                "max_pool2d",
                dtype,
                &format!("max_pool2d {k:?} {st:?} seed {s} {w}"),
                0.0,
                || c.max_pool2d(&l, k, st),
                || g.max_pool2d(&l, k, st)?.to_cpu_storage(),
            );
            check(
                "avg_pool2d",
                dtype,
                &format!("avg_pool2d {k:?} {st:?} seed {s} {w}"),
                // candle's avg_pool2d kernel scales by a float 1 / (kh * kw), so f64 results
                // agree to about 1e-7 only.
                if dtype == DType::F64 {
                    1e6
                } else {
                    2.0 * (k.0 * k.1) as f64
                },
                || c.avg_pool2d(&l, k, st),
                || g.avg_pool2d(&l, k, st)?.to_cpu_storage(),
            );
            let (oh, ow) = (1 + rng.below(40), 1 + rng.below(40));
            check(
                "upsample_nearest2d",
                dtype,
                &format!("upsample_nearest2d {oh}x{ow} seed {s} {w}"),
                0.0,
                || c.upsample_nearest2d(&l, oh, ow),
                || g.upsample_nearest2d(&l, oh, ow)?.to_cpu_storage(),
            );
            let align = rng.chance(0.5);
            check(
                "upsample_bilinear2d",
                dtype,
                &format!("upsample_bilinear2d {oh}x{ow} {align} seed {s} {w}"),
                4.0,
                || {
                    let want = c.upsample_bilinear2d(&l, oh, ow, align, None, None)?;
                    if dtype.is_float() {
                        return Ok(want);
                    }
                    // Integers: the CPU interpolates in f64, the kernels in f32, and both
                    // truncate, so a result may sit one below or above; compare within 1 by
                    // returning the GPU's value wherever it is that close.
                    let got = g
                        .upsample_bilinear2d(&l, oh, ow, align, None, None)?
                        .to_cpu_storage()?;
                    let (w, gv) = (as_f64(&want), as_f64(&got));
                    let near: Vec<f64> = w
                        .iter()
                        .zip(&gv)
                        .map(|(a, b)| if (a - b).abs() <= 1.0 { *b } else { *a })
                        .collect();
                    Ok(round_to(dtype, &near))
                },
                || {
                    g.upsample_bilinear2d(&l, oh, ow, align, None, None)?
                        .to_cpu_storage()
                },
            );
            let d3 = [dims[0], dims[1], dims[2]];
            let (c, g, l, w) = random_operand(&dev, &mut rng, dtype, &d3, Values::Moderate);
            check(
                "upsample_nearest1d",
                dtype,
                &format!("upsample_nearest1d {oh} seed {s} {w}"),
                0.0,
                || c.upsample_nearest1d(&l, oh),
                || g.upsample_nearest1d(&l, oh)?.to_cpu_storage(),
            );
        }
    }
    for m in [
        "max_pool2d",
        "avg_pool2d",
        "upsample_nearest2d",
        "upsample_bilinear2d",
        "upsample_nearest1d",
    ] {
        assert_eq!(cases(m), DTYPES.len() * n_cases() as usize, "{m}");
        flush(m);
    }
    // With CANDLE_ROCM_CONV=miopen the contiguous float pools must have run on MIOpen.
    if candle_rocm::settings::conv_path() == candle_rocm::settings::ConvPath::Miopen {
        let runs = candle_rocm::ops::conv::miopen::miopen_pool_runs();
        eprintln!("pools: {runs} ran on MIOpen");
        expect_miopen_runs("pool", runs);
    }
    finish(&["max_pool2d", "avg_pool2d", "upsample_"]);
}

/// Rounds exact results to `dtype`: floats to nearest, integers wrapped to the type's width
/// (what the kernels' integer accumulation gives).
fn round_to(dtype: DType, v: &[f64]) -> CpuStorage {
    match dtype {
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| (x as i64) as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| (x as i64) as u32).collect()),
        d => from_f64(d, v),
    }
}

/// A 2-D (or, with unit height, 1-D) convolution computed exactly on the host in f64:
/// input (b, c_in, h, w), kernel (c_out, c_in, kh, kw) or, transposed, (c_in, c_out, kh, kw).
/// `out_pad` only applies to the transposed form. The reference for the conv methods.
#[allow(clippy::too_many_arguments)]
fn naive_conv(
    x: &[f64],
    (b, c_in, h, w): (usize, usize, usize, usize),
    k: &[f64],
    (c_out, kh, kw): (usize, usize, usize),
    (pad_h, pad_w, stride, dil, out_pad): (usize, usize, usize, usize, usize),
    transposed: bool,
) -> (Vec<f64>, usize, usize) {
    let (oh, ow) = if transposed {
        // A 1-D transposed conv (h = kh = 1, pad_h = 0) pads only its length.
        let out_pad_h = if h == 1 && kh == 1 && pad_h == 0 {
            0
        } else {
            out_pad
        };
        let o = |n: usize, k: usize, p: usize, op: usize| {
            ((n - 1) * stride + dil * (k - 1) + op + 1).saturating_sub(2 * p)
        };
        (o(h, kh, pad_h, out_pad_h), o(w, kw, pad_w, out_pad))
    } else {
        let o = |n: usize, k: usize, p: usize| (n + 2 * p - dil * (k - 1) - 1) / stride + 1;
        (o(h, kh, pad_h), o(w, kw, pad_w))
    };
    let mut out = vec![0f64; b * c_out * oh * ow];
    for bi in 0..b {
        for ci in 0..c_in {
            for co in 0..c_out {
                for ky in 0..kh {
                    for kx in 0..kw {
                        let kv = if transposed {
                            k[((ci * c_out + co) * kh + ky) * kw + kx]
                        } else {
                            k[((co * c_in + ci) * kh + ky) * kw + kx]
                        };
                        if transposed {
                            // Input (y, x) lands on output (y * s + ky * d - p, ...).
                            for y in 0..h {
                                for xx in 0..w {
                                    let oy = (y * stride + ky * dil) as isize - pad_h as isize;
                                    let ox = (xx * stride + kx * dil) as isize - pad_w as isize;
                                    if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                        continue;
                                    }
                                    out[((bi * c_out + co) * oh + oy as usize) * ow
                                        + ox as usize] +=
                                        x[((bi * c_in + ci) * h + y) * w + xx] * kv;
                                }
                            }
                        } else {
                            for oy in 0..oh {
                                for ox in 0..ow {
                                    let y = (oy * stride + ky * dil) as isize - pad_h as isize;
                                    let xx = (ox * stride + kx * dil) as isize - pad_w as isize;
                                    if y < 0 || xx < 0 || y >= h as isize || xx >= w as isize {
                                        continue;
                                    }
                                    out[((bi * c_out + co) * oh + oy) * ow + ox] += x
                                        [((bi * c_in + ci) * h + y as usize) * w + xx as usize]
                                        * kv;
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (out, oh, ow)
}

/// Convolutions: candle-core 0.11 keeps its conv parameter structs private, so the CPU
/// reference is the `Tensor` API on the CPU and the ROCm side runs the same parameters through
/// `RocmStorage::conv*_with` (which the `BackendStorage` methods call after reading candle's
/// parameters).
#[test]
#[ignore = "needs a HIP device"]
fn convolutions() {
    use candle_rocm::ops::conv::ConvParams;
    let dev = device();
    for dtype in DTYPES {
        for i in 0..n_cases() {
            let s = seed("conv", dtype, i);
            let mut rng = Rng::new(s);
            let (b, c_in, c_out) = (1 + rng.below(3), 1 + rng.below(5), 1 + rng.below(5));
            let (k, pad, stride, dil) = (
                1 + rng.below(4),
                rng.below(3),
                1 + rng.below(3),
                1 + rng.below(2),
            );
            let l_in = k * dil + rng.below(30);
            // conv1d: input (b, c_in, l_in), kernel (c_out, c_in, k).
            let x = random_data(&mut rng, dtype, b * c_in * l_in, Values::Small);
            let w = random_data(&mut rng, dtype, c_out * c_in * k, Values::Small);
            let (xl, wl) = (
                Layout::contiguous((b, c_in, l_in)),
                Layout::contiguous((c_out, c_in, k)),
            );
            let p = ConvParams::from_pairs(&[
                ("b_size", b),
                ("l_in", l_in),
                ("c_out", c_out),
                ("c_in", c_in),
                ("k_size", k),
                ("padding", pad),
                ("stride", stride),
                ("dilation", dil),
                ("output_padding", 0),
            ]);
            let what = format!(
                "conv1d seed {s} b{b} cin{c_in} cout{c_out} l{l_in} k{k} p{pad} s{stride} d{dil}"
            );
            let scale = 4.0 * (c_in * k) as f64;
            check(
                "conv1d",
                dtype,
                &what,
                scale,
                || {
                    let (v, _, _) = naive_conv(
                        &as_f64(&x),
                        (b, c_in, 1, l_in),
                        &as_f64(&w),
                        (c_out, 1, k),
                        (0, pad, stride, dil, 0),
                        false,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &x)
                        .conv1d_with(&xl, &upload(&dev, &w), &wl, &p)?
                        .to_cpu_storage()
                },
            );
            // conv_transpose1d: kernel (c_in, c_out, k); output_padding < stride.
            let op = rng.below(stride);
            let wt = random_data(&mut rng, dtype, c_in * c_out * k, Values::Small);
            let wtl = Layout::contiguous((c_in, c_out, k));
            let l_small = 1 + rng.below(20);
            let xt = random_data(&mut rng, dtype, b * c_in * l_small, Values::Small);
            let xtl = Layout::contiguous((b, c_in, l_small));
            // Half of the cases use the col2im path (no padding, dilation 1).
            let (pad_t, dil_t) = if rng.chance(0.5) {
                (0, 1)
            } else {
                (pad.min(k - 1), dil)
            };
            let op_t = if pad_t == 0 && dil_t == 1 { 0 } else { op };
            let pt = ConvParams::from_pairs(&[
                ("b_size", b),
                ("l_in", l_small),
                ("c_out", c_out),
                ("c_in", c_in),
                ("k_size", k),
                ("padding", pad_t),
                ("stride", stride),
                ("dilation", dil_t),
                ("output_padding", op_t),
            ]);
            let what = format!(
                "conv_transpose1d seed {s} l{l_small} k{k} p{pad_t} op{op_t} s{stride} d{dil_t}"
            );
            check(
                "conv_transpose1d",
                dtype,
                &what,
                scale,
                || {
                    if (l_small - 1) * stride + dil_t * (k - 1) + op_t + 1 < 2 * pad_t {
                        candle_core::bail!("negative output size");
                    }
                    let (v, _, _) = naive_conv(
                        &as_f64(&xt),
                        (b, c_in, 1, l_small),
                        &as_f64(&wt),
                        (c_out, 1, k),
                        (0, pad_t, stride, dil_t, op_t),
                        true,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &xt)
                        .conv_transpose1d_with(&xtl, &upload(&dev, &wt), &wtl, &pt)?
                        .to_cpu_storage()
                },
            );
            // conv2d: input (b, c_in, h, w), kernel (c_out, c_in, kh, kw).
            let (kh, kw) = (1 + rng.below(3), 1 + rng.below(3));
            let (h, w_) = (kh * dil + rng.below(12), kw * dil + rng.below(12));
            let x2 = random_data(&mut rng, dtype, b * c_in * h * w_, Values::Small);
            let w2 = random_data(&mut rng, dtype, c_out * c_in * kh * kw, Values::Small);
            let (x2l, w2l) = (
                Layout::contiguous((b, c_in, h, w_)),
                Layout::contiguous((c_out, c_in, kh, kw)),
            );
            let p2 = ConvParams::from_pairs(&[
                ("b_size", b),
                ("i_h", h),
                ("i_w", w_),
                ("k_h", kh),
                ("k_w", kw),
                ("c_out", c_out),
                ("c_in", c_in),
                ("padding", pad),
                ("stride", stride),
                ("dilation", dil),
                ("output_padding", 0),
            ]);
            let what = format!("conv2d seed {s} {h}x{w_} k{kh}x{kw} p{pad} s{stride} d{dil}");
            let scale2 = 4.0 * (c_in * kh * kw) as f64;
            check(
                "conv2d",
                dtype,
                &what,
                scale2,
                || {
                    let (v, _, _) = naive_conv(
                        &as_f64(&x2),
                        (b, c_in, h, w_),
                        &as_f64(&w2),
                        (c_out, kh, kw),
                        (pad, pad, stride, dil, 0),
                        false,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &x2)
                        .conv2d_with(&x2l, &upload(&dev, &w2), &w2l, &p2)?
                        .to_cpu_storage()
                },
            );
            // conv_transpose2d: kernel (c_in, c_out, kh, kw).
            let w2t = random_data(&mut rng, dtype, c_in * c_out * kh * kw, Values::Small);
            let w2tl = Layout::contiguous((c_in, c_out, kh, kw));
            let (hs, ws) = (1 + rng.below(8), 1 + rng.below(8));
            let x2t = random_data(&mut rng, dtype, b * c_in * hs * ws, Values::Small);
            let x2tl = Layout::contiguous((b, c_in, hs, ws));
            let pad2 = pad.min(kh.min(kw) - 1);
            let p2t = ConvParams::from_pairs(&[
                ("b_size", b),
                ("i_h", hs),
                ("i_w", ws),
                ("k_h", kh),
                ("k_w", kw),
                ("c_out", c_out),
                ("c_in", c_in),
                ("padding", pad2),
                ("stride", stride),
                ("dilation", dil),
                ("output_padding", op),
            ]);
            let what = format!(
                "conv_transpose2d seed {s} {hs}x{ws} k{kh}x{kw} p{pad2} op{op} s{stride} d{dil}"
            );
            check(
                "conv_transpose2d",
                dtype,
                &what,
                scale2,
                || {
                    // A padding that leaves a negative output size is an error (as in PyTorch).
                    let raw = |n: usize, k: usize| (n - 1) * stride + dil * (k - 1) + op + 1;
                    if raw(hs, kh) < 2 * pad2 || raw(ws, kw) < 2 * pad2 {
                        candle_core::bail!("negative output size");
                    }
                    let (v, _, _) = naive_conv(
                        &as_f64(&x2t),
                        (b, c_in, hs, ws),
                        &as_f64(&w2t),
                        (c_out, kh, kw),
                        (pad2, pad2, stride, dil, op),
                        true,
                    );
                    Ok(round_to(dtype, &v))
                },
                || {
                    upload(&dev, &x2t)
                        .conv_transpose2d_with(&x2tl, &upload(&dev, &w2t), &w2tl, &p2t)?
                        .to_cpu_storage()
                },
            );
        }
    }
    for m in ["conv1d", "conv_transpose1d", "conv2d", "conv_transpose2d"] {
        assert_eq!(cases(m), DTYPES.len() * n_cases() as usize, "{m}");
        flush(m);
    }
    // With CANDLE_ROCM_CONV=miopen (the harness's second pass) the float cases must have run
    // on MIOpen, not fallen back to im2col unnoticed.
    if candle_rocm::settings::conv_path() == candle_rocm::settings::ConvPath::Miopen {
        let runs = candle_rocm::ops::conv::miopen::miopen_runs();
        eprintln!("convolutions: {runs} ran on MIOpen");
        expect_miopen_runs("convolution", runs);
    }
    finish(&["conv"]);
}

/// Checks how many `what`s ran on MIOpen with `CANDLE_ROCM_CONV=miopen`: some, or none when the
/// harness's MIOpen double fails its calls on purpose (`HIP_ON_CUDA_MIOPEN_FAIL`, run.sh's
/// injected-failure pass), where every case must have fallen back to our kernels and still
/// matched the CPU.
fn expect_miopen_runs(what: &str, runs: u64) {
    if std::env::var_os("HIP_ON_CUDA_MIOPEN_FAIL").is_some_and(|v| !v.is_empty()) {
        assert_eq!(
            runs, 0,
            "HIP_ON_CUDA_MIOPEN_FAIL fails MIOpen's calls, yet {runs} {what}s ran on MIOpen"
        );
    } else {
        assert!(
            runs > 0,
            "CANDLE_ROCM_CONV=miopen, yet no {what} ran on MIOpen"
        );
    }
}

/// Row lengths for the `rows` kernels: around the chunk (4 f32, 8 f16/bf16, 2 f64) and wave
/// sizes, a 1024-thread block, the register path's limits (4096 f64, 8192 others) and past them.
const ROW_LENGTHS: [usize; 14] = [
    1, 3, 31, 32, 33, 63, 64, 65, 1023, 4096, 4097, 8192, 8193, 20_000,
];

/// `rows` rows of `cols` values of `dtype` at `offset` in a buffer: Special values (NaN,
/// +/-inf, -0.0), or small integers so ties are everywhere; some rows start with NaN or -inf.
fn row_data(rng: &mut Rng, dtype: DType, rows: usize, cols: usize, offset: usize) -> CpuStorage {
    let n = offset + rows * cols;
    let ties = rng.chance(0.5);
    let mut v = as_f64(&random_data(rng, dtype, n, Values::Special));
    if ties {
        for x in v.iter_mut().filter(|x| x.is_finite()) {
            *x = x.round();
        }
    }
    for r in 0..rows {
        if rng.chance(0.2) {
            v[offset + r * cols] = rng.pick(&[f64::NAN, f64::NEG_INFINITY, f64::INFINITY]);
        }
    }
    if rng.chance(0.2) && rows > 0 {
        // A whole row of NaN and one of -inf.
        let r = rng.below(rows);
        let fill = rng.pick(&[f64::NAN, f64::NEG_INFINITY]);
        v[offset + r * cols..offset + (r + 1) * cols].fill(fill);
    }
    from_f64(dtype, &v)
}

/// The f64 sum of each row of `x` (laid out as `l`, reduced over its last `cols`), rounded to
/// the dtype: the reference for sums, whose half-precision CPU result is rounded per step.
fn row_sums(x: &CpuStorage, l: &Layout, cols: usize) -> CpuStorage {
    let (o1, o2) = l.contiguous_offsets().unwrap();
    let v = as_f64(x);
    let sums: Vec<f64> = v[o1..o2].chunks(cols).map(|r| r.iter().sum()).collect();
    from_f64(x.dtype(), &sums)
}

#[test]
#[ignore = "needs a HIP device"]
fn rows_last_dim_reductions() {
    // Last-dim (and trailing-dims) reductions of contiguous float tensors take the `rows`
    // kernels: exactly the CPU's min/max/argmin/argmax (NaN is skipped unless it starts the
    // row, ties keep the first index), sums within tolerance; offsets that break 16-byte
    // alignment take the scalar path.
    let dev = device();
    let ops = [
        ("sum", ReduceOp::Sum),
        ("min", ReduceOp::Min),
        ("max", ReduceOp::Max),
        ("argmin", ReduceOp::ArgMin),
        ("argmax", ReduceOp::ArgMax),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        for (li, &cols) in ROW_LENGTHS.iter().enumerate() {
            let rows = if cols >= 4096 { 3 } else { 37 };
            for offset in [0usize, 1, 3] {
                let s = seed("rows_reduce", dtype, (li * 8 + offset) as u64);
                let mut rng = Rng::new(s);
                let c = row_data(&mut rng, dtype, rows, cols, offset);
                let g = upload(&dev, &c);
                // (rows, cols) as 2-d over dim 1, or as (rows, 1, cols, 1) over dims 2 (and 3).
                let (l, red): (Layout, Vec<usize>) = if rng.chance(0.5) {
                    let l = Layout::contiguous_with_offset(Shape::from((rows, cols)), offset);
                    (l, vec![1])
                } else {
                    let l = Layout::contiguous_with_offset(Shape::from((rows, 1, cols, 1)), offset);
                    (l, vec![2])
                };
                for (name, op) in ops {
                    let method = format!("rows_{name}");
                    let what = format!("{method} {rows}x{cols} +{offset} over {red:?} seed {s}");
                    if op == ReduceOp::Sum {
                        let scale = 4.0 * cols as f64;
                        let want = row_sums(&c, &l, cols);
                        check(
                            &method,
                            dtype,
                            &what,
                            scale,
                            || Ok(want),
                            || g.reduce_op(op, &l, &red)?.to_cpu_storage(),
                        );
                    } else {
                        check(
                            &method,
                            dtype,
                            &what,
                            0.0,
                            || c.reduce_op(op, &l, &red),
                            || g.reduce_op(op, &l, &red)?.to_cpu_storage(),
                        );
                    }
                }
                // A sum over trailing dims (rows, 4, cols/4) over [2, 1].
                if cols % 4 == 0 {
                    let l =
                        Layout::contiguous_with_offset(Shape::from((rows, 4, cols / 4)), offset);
                    let want = row_sums(&c, &l, cols);
                    check(
                        "rows_sum",
                        dtype,
                        &format!("rows_sum {rows}x4x{} +{offset} over [2, 1]", cols / 4),
                        4.0 * cols as f64,
                        || Ok(want),
                        || g.reduce_op(ReduceOp::Sum, &l, &[2, 1])?.to_cpu_storage(),
                    );
                }
            }
        }
    }
    // Middle-dim reductions of contiguous (a, b, c) tensors (the column kernels): exactly the
    // CPU's extremes and indices with NaN, infinities and ties; sums within tolerance.
    let shapes: [(usize, usize, usize); 6] = [
        (1, 1, 2),
        (3, 5, 7),
        (2, 33, 65),
        (4, 64, 3),
        (1, 1000, 130),
        (5, 3, 1),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        for (i, &(a, b, c)) in shapes.iter().enumerate() {
            let offset = i % 2;
            let s = seed("rows_middle", dtype, i as u64);
            let mut rng = Rng::new(s);
            let mut v = as_f64(&row_data(&mut rng, dtype, a * b, c, offset));
            // Some columns start with NaN (never replaced) or -inf.
            for _ in 0..(a * c).div_ceil(4) {
                let (ai, ci) = (rng.below(a), rng.below(c));
                v[offset + ai * b * c + ci] = rng.pick(&[f64::NAN, f64::NEG_INFINITY]);
            }
            let x = from_f64(dtype, &v);
            let g = upload(&dev, &x);
            let l = Layout::contiguous_with_offset(Shape::from((a, b, c)), offset);
            for (name, op) in ops {
                let method = format!("rows_middle_{name}");
                let what = format!("{method} {a}x{b}x{c} +{offset} seed {s}");
                if op == ReduceOp::Sum {
                    let sums: Vec<f64> = (0..a * c)
                        .map(|o| {
                            let (ai, ci) = (o / c, o % c);
                            (0..b).map(|bi| v[offset + (ai * b + bi) * c + ci]).sum()
                        })
                        .collect();
                    let want = from_f64(dtype, &sums);
                    check(
                        &method,
                        dtype,
                        &what,
                        4.0 * b as f64,
                        || Ok(want),
                        || g.reduce_op(op, &l, &[1])?.to_cpu_storage(),
                    );
                } else {
                    check(
                        &method,
                        dtype,
                        &what,
                        0.0,
                        || x.reduce_op(op, &l, &[1]),
                        || g.reduce_op(op, &l, &[1])?.to_cpu_storage(),
                    );
                }
            }
        }
    }
    // Layouts the rows kernels must leave to the general path: a transposed (strided) input
    // reduced over its last dim, and a strided one over its middle dim. Moderate values (the
    // general kernels' NaN order differs from the CPU's).
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        for (i, (r, c)) in [(3usize, 65usize), (64, 33), (1000, 3)]
            .into_iter()
            .enumerate()
        {
            let s = seed("rows_general", dtype, i as u64);
            let mut rng = Rng::new(s);
            // Room for both layouts: (c, r) transposed from (r, c), and (r, c, 2).
            let x = random_data(&mut rng, dtype, r * c * 2, Values::Moderate);
            let g = upload(&dev, &x);
            let t = Layout::contiguous((r, c)).transpose(0, 1).unwrap();
            let m = Layout::contiguous((r, c, 2)).narrow(2, 1, 1).unwrap();
            for (name, op) in ops {
                let method = format!("rows_general_{name}");
                for (l, red, lw) in [(&t, [1usize], "transposed"), (&m, [1], "strided middle")] {
                    let what = format!("{method} {lw} {:?} seed {s}", l.dims());
                    let per = l.dims()[red[0]];
                    if matches!(dtype, DType::F16 | DType::BF16) && op == ReduceOp::Sum && per > 64
                    {
                        continue;
                    }
                    let scale = if op == ReduceOp::Sum {
                        4.0 * per as f64
                    } else {
                        0.0
                    };
                    if matches!(op, ReduceOp::ArgMin | ReduceOp::ArgMax) {
                        // Ties may resolve differently on the general kernels: the index must
                        // point at an element equal to the CPU's extreme.
                        let value_op = if op == ReduceOp::ArgMin {
                            ReduceOp::Min
                        } else {
                            ReduceOp::Max
                        };
                        let mut idims = l.dims().to_vec();
                        idims[red[0]] = 1;
                        check(
                            &method,
                            dtype,
                            &what,
                            0.0,
                            || x.reduce_op(value_op, l, &red),
                            || {
                                let idx = g.reduce_op(op, l, &red)?.to_cpu_storage()?;
                                let mut dense = x.clone();
                                x.copy_strided_src(&mut dense, 0, l)?;
                                let il = Layout::contiguous(Shape::from(idims.clone()));
                                dense.gather(&Layout::contiguous(l.shape()), &idx, &il, red[0])
                            },
                        );
                    } else {
                        check(
                            &method,
                            dtype,
                            &what,
                            scale,
                            || x.reduce_op(op, l, &red),
                            || g.reduce_op(op, l, &red)?.to_cpu_storage(),
                        );
                    }
                }
            }
        }
    }
    for m in ["sum", "min", "max", "argmin", "argmax"] {
        flush(&format!("rows_{m}"));
        flush(&format!("rows_middle_{m}"));
        flush(&format!("rows_general_{m}"));
    }
    finish(&["rows_"]);
}

#[test]
#[ignore = "needs a HIP device"]
fn transposed_copies_take_the_tiled_kernel() {
    // copy_strided_src of a transposed 2-d or last-two-dims-transposed layout (the tiled
    // transpose), for every dtype, at shapes around the 32x32 tile and the 64x64 tile of the
    // 16-bit word path, with source and destination offsets; and layouts that only look similar (general path).
    let dev = device();
    let shapes: &[&[usize]] = &[
        &[1, 1],
        &[3, 5],
        &[31, 33],
        &[32, 32],
        &[64, 65],
        &[129, 7],
        &[1000, 3],
        &[4, 33, 65],
        &[2, 1, 40, 17],
        // Even dims around the 64x64 tile of the 16-bit word path, with fixed offsets below
        // (element offsets 0 and 2 keep 16-bit data 4-byte aligned, 1 does not).
        &[64, 64],
        &[62, 130],
        &[3, 66, 128],
        &[130, 2],
    ];
    const FIXED_OFFSETS: [(usize, usize); 4] = [(0, 0), (2, 0), (0, 2), (1, 0)];
    for dtype in DTYPES {
        for (i, dims) in shapes.iter().enumerate() {
            let s = seed("transpose", dtype, i as u64);
            let mut rng = Rng::new(s);
            let n = dims.len();
            let el: usize = dims.iter().product();
            let fixed = i.checked_sub(9).map(|j| FIXED_OFFSETS[j]);
            let off = rng.below(3);
            let off = fixed.map_or(off, |f| f.0);
            let base = Layout::contiguous_with_offset(Shape::from(dims.to_vec()), off);
            let mut layouts = vec![("last two", base.transpose(n - 2, n - 1).unwrap())];
            if n == 3 {
                layouts.push(("outer", base.transpose(0, 2).unwrap()));
            }
            for (kind, l) in layouts {
                let x = random_data(&mut rng, dtype, off + el, Values::Special);
                let g = upload(&dev, &x);
                let doff = rng.below(3);
                let doff = fixed.map_or(doff, |f| f.1);
                let dst = random_data(&mut rng, dtype, doff + el, Values::Moderate);
                let (mut dc, mut dg) = (dst.clone(), upload(&dev, &dst));
                check(
                    "transpose_copy",
                    dtype,
                    &format!(
                        "transpose_copy {kind} {:?} +{off} -> +{doff} seed {s}",
                        l.dims()
                    ),
                    0.0,
                    || {
                        x.copy_strided_src(&mut dc, doff, &l)?;
                        Ok(dc.clone())
                    },
                    || {
                        g.copy_strided_src(&mut dg, doff, &l)?;
                        dg.to_cpu_storage()
                    },
                );
            }
        }
    }
    flush("transpose_copy");
    finish(&["transpose_copy"]);
}
