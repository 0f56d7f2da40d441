//! Parity of the `rows` kernels (last-dimension reductions, softmax and norms over row
//! lengths around the chunk, wave and block sizes) and of the tiled transposed copies.

use super::*;

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
