//! candle-nn's fused ops (sigmoid, softmax over the last dim, RMS and layer norm, the three
//! rotary embeddings) and candle-core's arg-sort on the GPU against the same call on the CPU,
//! for f32, f64, f16 and bf16 (arg-sort also u8, u32, i64), over row lengths that do and do
//! not fit one block, single-element rows, single rows, many rows, and strided or offset
//! operands. Strict mode is on (see [`gpu`]): each of these passing shows the op ran on the
//! device, not through the CPU fallback.
//!
//! The CPU reference takes contiguous copies of strided operands (candle-nn's CPU kernels
//! refuse them; the device makes them contiguous itself), computes f16/bf16 in f32 (see
//! [`reference`]) and uses the unfused norms for f64 (see [`rms_norm_cpu`]).

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Device, Layout, Result, Shape, Tensor, D};
use candle_rocm_tests::{
    assert_gpu_close, gpu, host_pair, host_pair_of, max_abs_diff, normal, rng, tolerance, uniform,
};
use rand::seq::SliceRandom;
use rand::Rng;

pub(super) const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// Shapes reduced over their last dim: 1 x 1, rows longer than a 1024-thread block (4097, and
/// exactly 1024), single-element rows, one row, many short rows, a 3-d tensor.
const SHAPES: &[&[usize]] = &[
    &[1, 1],
    &[1, 4097],
    &[3, 4097],
    &[4, 1024],
    &[7, 1],
    &[1, 300],
    &[1000, 7],
    &[2, 5, 33],
];

/// candle-kernels' RMS and layer norm accumulate in f32 for every dtype (as Candle's CUDA
/// backend does), so an f64 result is only as close to the CPU's f64 one as f32 allows.
pub(super) fn norm_tolerance(dtype: DType) -> f64 {
    tolerance(dtype).max(tolerance(DType::F32))
}

/// The CPU reference for an op on `inputs` (CPU tensors of one dtype). candle's CPU kernels
/// compute f16 and bf16 in the type itself (its softmax sums a 4097-long row in f16 and comes
/// out several percent off), while candle-kernels accumulate in f32; for those dtypes the
/// reference is the same op on f32 copies of the same values, rounded to the dtype.
pub(super) fn reference(
    inputs: &[&Tensor],
    op: impl Fn(&[Tensor]) -> Result<Tensor>,
) -> Result<Tensor> {
    let dtype = inputs[0].dtype();
    if matches!(dtype, DType::F16 | DType::BF16) {
        let up = inputs
            .iter()
            .map(|t| t.to_dtype(DType::F32))
            .collect::<Result<Vec<_>>>()?;
        op(&up)?.to_dtype(dtype)
    } else {
        op(&inputs.iter().map(|&t| t.clone()).collect::<Vec<_>>())
    }
}

/// candle-nn's CPU `rms_norm`/`layer_norm` have no f64 kernel ("unsupported dtype"): the f64
/// reference is the unfused formula of the same crate (`rms_norm_slow`, `layer_norm_slow`).
pub(super) fn rms_norm_cpu(x: &Tensor, alpha: &Tensor, eps: f32) -> Result<Tensor> {
    reference(&[x, alpha], |t| match t[0].dtype() {
        DType::F64 => candle_nn::ops::rms_norm_slow(&t[0], &t[1], eps),
        _ => candle_nn::ops::rms_norm(&t[0], &t[1], eps),
    })
}

fn layer_norm_cpu(x: &Tensor, alpha: &Tensor, beta: &Tensor, eps: f32) -> Result<Tensor> {
    reference(&[x, alpha, beta], |t| match t[0].dtype() {
        DType::F64 => candle_nn::ops::layer_norm_slow(&t[0], &t[1], &t[2], eps),
        _ => candle_nn::ops::layer_norm(&t[0], &t[1], &t[2], eps),
    })
}

/// A GPU operand in the layouts the ops must handle besides a plain contiguous tensor, with
/// the CPU reference operand (candle-nn's CPU kernels refuse strided input, so the CPU gets a
/// contiguous copy holding the same values).
struct Strided {
    what: &'static str,
    cpu: Tensor,
    gpu: Tensor,
}

/// `rows x cols` operands that are transposed, column-narrowed (strided rows) and
/// row-narrowed (contiguous from a non-zero offset).
fn strided(
    rows: usize,
    cols: usize,
    dtype: DType,
    seed: u64,
    dev: &Device,
) -> Result<Vec<Strided>> {
    let mut r = rng(seed);
    let mut out = Vec::new();
    let (c, g) = host_pair(normal(&mut r, rows * cols, 2.0), (cols, rows), dtype, dev)?;
    out.push(Strided {
        what: "transposed",
        cpu: c.t()?.contiguous()?,
        gpu: g.t()?,
    });
    let (c, g) = host_pair(
        normal(&mut r, rows * (cols + 5), 2.0),
        (rows, cols + 5),
        dtype,
        dev,
    )?;
    out.push(Strided {
        what: "column-narrowed",
        cpu: c.narrow(1, 2, cols)?.contiguous()?,
        gpu: g.narrow(1, 2, cols)?,
    });
    let (c, g) = host_pair(
        normal(&mut r, (rows + 3) * cols, 2.0),
        (rows + 3, cols),
        dtype,
        dev,
    )?;
    out.push(Strided {
        what: "row-narrowed (offset)",
        cpu: c.narrow(0, 3, rows)?,
        gpu: g.narrow(0, 3, rows)?,
    });
    for s in &out[..2] {
        assert!(!s.gpu.is_contiguous(), "{} operand is contiguous", s.what);
    }
    Ok(out)
}

/// Runs a one-operand op on every float dtype and shape and on strided operands, GPU against
/// CPU.
fn check_unary(what: &str, seed: u64, op: fn(&Tensor) -> Result<Tensor>) -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(seed);
    for dtype in FLOATS {
        for &shape in SHAPES {
            let n = shape.iter().product();
            let (c, g) = host_pair(normal(&mut r, n, 2.0), shape, dtype, &dev)?;
            let want = reference(&[&c], |t| op(&t[0]))?;
            assert_gpu_close(
                &op(&g)?,
                &want,
                tolerance(dtype),
                &format!("{what} {dtype:?} {shape:?}"),
            )?;
        }
        for s in strided(33, 70, dtype, seed + 1, &dev)? {
            let ctx = format!("{what} {dtype:?} {} (33, 70)", s.what);
            let want = reference(&[&s.cpu], |t| op(&t[0]))?;
            assert_gpu_close(&op(&s.gpu)?, &want, tolerance(dtype), &ctx)?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn sigmoid() -> Result<()> {
    check_unary("sigmoid", 1, candle_nn::ops::sigmoid)
}

#[test]
#[ignore = "needs a HIP device"]
fn softmax_last_dim() -> Result<()> {
    check_unary("softmax_last_dim", 2, candle_nn::ops::softmax_last_dim)?;
    // Independently of the CPU: every row sums to 1.
    let dev = gpu()?;
    let mut r = rng(3);
    for dtype in FLOATS {
        let (_, g) = host_pair(normal(&mut r, 3 * 4097, 3.0), (3, 4097), dtype, &dev)?;
        let sums = candle_nn::ops::softmax_last_dim(&g)?
            .to_device(&Device::Cpu)?
            .to_dtype(DType::F64)?
            .sum(D::Minus1)?;
        let ones = Tensor::ones(3, DType::F64, &Device::Cpu)?;
        let diff = max_abs_diff(&sums, &ones)?;
        assert!(
            diff <= tolerance(dtype).max(1e-9),
            "softmax_last_dim {dtype:?}: rows sum to 1 +- {diff:e}"
        );
    }
    Ok(())
}

/// Scale (and shift) vectors of `cols` elements: contiguous, and with a stride of 2 (every
/// other element of a longer buffer), each with its CPU twin.
pub(super) fn params(
    cols: usize,
    dtype: DType,
    r: &mut rand::rngs::StdRng,
    dev: &Device,
) -> Result<[(Tensor, Tensor); 2]> {
    let (c, g) = host_pair(uniform(r, cols, 0.5, 1.5), cols, dtype, dev)?;
    let (c2, g2) = host_pair(uniform(r, 2 * cols, -1.0, 1.0), (cols, 2), dtype, dev)?;
    let g2 = g2.narrow(1, 1, 1)?.squeeze(1)?;
    assert!(cols == 1 || !g2.is_contiguous());
    Ok([(c, g), (c2.narrow(1, 1, 1)?.squeeze(1)?.contiguous()?, g2)])
}

#[test]
#[ignore = "needs a HIP device"]
fn rms_norm() -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(4);
    let eps = 1e-5;
    for dtype in FLOATS {
        let tol = norm_tolerance(dtype);
        for &shape in SHAPES {
            let cols = shape[shape.len() - 1];
            let n = shape.iter().product();
            let (c, g) = host_pair(normal(&mut r, n, 2.0), shape, dtype, &dev)?;
            for (i, (ca, ga)) in params(cols, dtype, &mut r, &dev)?.iter().enumerate() {
                let got = candle_nn::ops::rms_norm(&g, ga, eps)?;
                let want = rms_norm_cpu(&c, ca, eps)?;
                assert_gpu_close(
                    &got,
                    &want,
                    tol,
                    &format!("rms_norm {dtype:?} {shape:?} alpha #{i}"),
                )?;
            }
        }
        for s in strided(33, 70, dtype, 5, &dev)? {
            let [(ca, ga), _] = params(70, dtype, &mut r, &dev)?;
            let got = candle_nn::ops::rms_norm(&s.gpu, &ga, eps)?;
            let want = rms_norm_cpu(&s.cpu, &ca, eps)?;
            assert_gpu_close(&got, &want, tol, &format!("rms_norm {dtype:?} {}", s.what))?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn layer_norm() -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(6);
    let eps = 1e-5;
    for dtype in FLOATS {
        let tol = norm_tolerance(dtype);
        for &shape in SHAPES {
            let cols = shape[shape.len() - 1];
            let n = shape.iter().product();
            // A non-zero mean, so removing it matters.
            let v = normal(&mut r, n, 2.0)
                .into_iter()
                .map(|x| x + 0.5)
                .collect();
            let (c, g) = host_pair(v, shape, dtype, &dev)?;
            let [(ca, ga), (cb, gb)] = params(cols, dtype, &mut r, &dev)?;
            // Contiguous scale and strided shift, then the other way round.
            for (i, (ca, ga, cb, gb)) in [(&ca, &ga, &cb, &gb), (&cb, &gb, &ca, &ga)]
                .into_iter()
                .enumerate()
            {
                let got = candle_nn::ops::layer_norm(&g, ga, gb, eps)?;
                let want = layer_norm_cpu(&c, ca, cb, eps)?;
                assert_gpu_close(
                    &got,
                    &want,
                    tol,
                    &format!("layer_norm {dtype:?} {shape:?} params #{i}"),
                )?;
            }
        }
        for s in strided(33, 70, dtype, 7, &dev)? {
            let [(ca, ga), (cb, gb)] = params(70, dtype, &mut r, &dev)?;
            let got = candle_nn::ops::layer_norm(&s.gpu, &ga, &gb, eps)?;
            let want = layer_norm_cpu(&s.cpu, &ca, &cb, eps)?;
            assert_gpu_close(
                &got,
                &want,
                tol,
                &format!("layer_norm {dtype:?} {}", s.what),
            )?;
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug)]
enum Rope {
    /// `rope`: (b, h, t, d), halves rotated.
    Halves,
    /// `rope_i`: (b, h, t, d), interleaved pairs.
    Interleaved,
    /// `rope_thd`: (b, t, h, d).
    Thd,
}

impl Rope {
    fn apply(self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        match self {
            Rope::Halves => candle_nn::rotary_emb::rope(x, cos, sin),
            Rope::Interleaved => candle_nn::rotary_emb::rope_i(x, cos, sin),
            Rope::Thd => candle_nn::rotary_emb::rope_thd(x, cos, sin),
        }
    }
}

/// (b, h, t, d): tiny, t = 1 (the CPU's special case), more pairs than one block, odd counts.
const ROPE_SHAPES: &[(usize, usize, usize, usize)] = &[
    (1, 1, 1, 2),
    (2, 3, 5, 8),
    (2, 4, 1, 64),
    (1, 2, 300, 128),
    (3, 2, 7, 6),
];

/// One rotary-embedding case. `batched`: cos/sin of shape (b, t, d/2), else (t + 3, d/2) (a
/// longer table, of which the op uses the first t rows). `offset`: every operand is a
/// contiguous view starting past the beginning of its buffer (candle-nn requires contiguous
/// operands for these ops, so this is the only other layout they accept).
fn rope_case(
    kind: Rope,
    dtype: DType,
    (b, h, t, d): (usize, usize, usize, usize),
    batched: bool,
    offset: bool,
    r: &mut rand::rngs::StdRng,
    dev: &Device,
) -> Result<()> {
    let extra = usize::from(offset);
    let x_shape = match kind {
        Rope::Thd => (b + extra, t, h, d),
        _ => (b + extra, h, t, d),
    };
    let n = x_shape.0 * x_shape.1 * x_shape.2 * x_shape.3;
    let (cx, gx) = host_pair(normal(r, n, 1.0), x_shape, dtype, dev)?;
    let rows = if batched { b } else { t + 3 };
    let table: Shape = if batched {
        (rows + extra, t, d / 2).into()
    } else {
        (rows + extra, d / 2).into()
    };
    let (cc, gc) = host_pair(
        uniform(r, table.elem_count(), -1.0, 1.0),
        table.clone(),
        dtype,
        dev,
    )?;
    let (cs, gs) = host_pair(uniform(r, table.elem_count(), -1.0, 1.0), table, dtype, dev)?;
    let view = |x: &Tensor, start: usize, len: usize| -> Result<Tensor> {
        if offset {
            x.narrow(0, start, len)
        } else {
            Ok(x.clone())
        }
    };
    let (cx, gx) = (view(&cx, 1, b)?, view(&gx, 1, b)?);
    let (cc, gc) = (view(&cc, 1, rows)?, view(&gc, 1, rows)?);
    let (cs, gs) = (view(&cs, 1, rows)?, view(&gs, 1, rows)?);
    if offset {
        assert!(gx.layout().start_offset() > 0 && gx.is_contiguous());
    }
    let got = kind.apply(&gx, &gc, &gs)?;
    let want = reference(&[&cx, &cc, &cs], |t| kind.apply(&t[0], &t[1], &t[2]))?;
    let what = format!(
        "{kind:?} {dtype:?} x {:?} cos {:?} offset {offset}",
        gx.dims(),
        gc.dims()
    );
    assert_gpu_close(&got, &want, tolerance(dtype), &what)
}

fn check_rope(kind: Rope, seed: u64) -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(seed);
    for dtype in FLOATS {
        for &shape in ROPE_SHAPES {
            for batched in [false, true] {
                for offset in [false, true] {
                    rope_case(kind, dtype, shape, batched, offset, &mut r, &dev)?;
                }
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn rope() -> Result<()> {
    check_rope(Rope::Halves, 8)
}

#[test]
#[ignore = "needs a HIP device"]
fn rope_i() -> Result<()> {
    check_rope(Rope::Interleaved, 9)
}

#[test]
#[ignore = "needs a HIP device"]
fn rope_thd() -> Result<()> {
    check_rope(Rope::Thd, 10)
}

/// Arg-sort of `c` (CPU) and `g` (its GPU copy) in both orders. Ties make the indices
/// ambiguous, so the check is on what they select: each GPU row is a permutation of
/// `0..cols`, the values it gathers are sorted, and equal those the CPU's indices gather.
fn check_argsort(c: &Tensor, g: &Tensor, what: &str) -> Result<()> {
    let cols = c.dim(D::Minus1)?;
    let rows = c.elem_count() / cols.max(1);
    for asc in [true, false] {
        let what = format!("{what} asc={asc}");
        let gi = g.arg_sort_last_dim(asc)?;
        assert!(gi.device().is_ext(), "{what}: indices not on the device");
        assert_eq!(gi.dtype(), DType::U32, "{what}");
        assert_eq!(gi.dims(), c.dims(), "{what}");
        let gi = gi.to_device(&Device::Cpu)?;
        for (i, row) in gi
            .reshape((rows, cols))?
            .to_vec2::<u32>()?
            .into_iter()
            .enumerate()
        {
            let mut sorted = row.clone();
            sorted.sort_unstable();
            assert!(
                sorted.iter().copied().eq(0..cols as u32),
                "{what}: row {i} is not a permutation of 0..{cols}: {row:?}"
            );
        }
        let got = c.gather(&gi, D::Minus1)?;
        let want = c.gather(&c.arg_sort_last_dim(asc)?, D::Minus1)?;
        let diff = max_abs_diff(&got, &want)?;
        assert!(
            diff == 0.0,
            "{what}: gathered values differ from the CPU's by {diff:e}"
        );
        let vals = got
            .to_dtype(DType::F64)?
            .reshape((rows, cols))?
            .to_vec2::<f64>()?;
        for (i, row) in vals.iter().enumerate() {
            let ordered = row
                .windows(2)
                .all(|w| if asc { w[0] <= w[1] } else { w[0] >= w[1] });
            assert!(ordered, "{what}: row {i} is not sorted");
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn arg_sort_last_dim() -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(11);
    for dtype in FLOATS {
        for &shape in SHAPES {
            let n = shape.iter().product();
            let (c, g) = host_pair(normal(&mut r, n, 4.0), shape, dtype, &dev)?;
            check_argsort(&c, &g, &format!("argsort {dtype:?} {shape:?}"))?;
        }
        // Contiguous from an offset (arg_sort_last_dim requires contiguous input).
        let (c, g) = host_pair(normal(&mut r, 40 * 33, 4.0), (40, 33), dtype, &dev)?;
        let (c, g) = (c.narrow(0, 5, 30)?, g.narrow(0, 5, 30)?);
        check_argsort(&c, &g, &format!("argsort {dtype:?} row-narrowed"))?;
    }
    for &shape in SHAPES {
        let n: usize = shape.iter().product();
        let cols = shape[shape.len() - 1];
        // u32: many ties, then distinct values (each row a shuffled 0..cols, scaled).
        let ties: Vec<u32> = (0..n).map(|_| r.random_range(0..50)).collect();
        let (c, g) = host_pair_of(ties, shape, &dev)?;
        check_argsort(&c, &g, &format!("argsort u32 ties {shape:?}"))?;
        let mut distinct = Vec::with_capacity(n);
        for _ in 0..n / cols {
            let mut row: Vec<u32> = (0..cols as u32).map(|v| v * 7 + 3).collect();
            row.shuffle(&mut r);
            distinct.extend(row);
        }
        let (c, g) = host_pair_of(distinct, shape, &dev)?;
        check_argsort(&c, &g, &format!("argsort u32 distinct {shape:?}"))?;
        let bytes: Vec<u8> = (0..n).map(|_| r.random()).collect();
        let (c, g) = host_pair_of(bytes, shape, &dev)?;
        check_argsort(&c, &g, &format!("argsort u8 {shape:?}"))?;
        let longs: Vec<i64> = (0..n)
            .map(|_| r.random_range(-1i64 << 40..1 << 40))
            .collect();
        let (c, g) = host_pair_of(longs, shape, &dev)?;
        check_argsort(&c, &g, &format!("argsort i64 {shape:?}"))?;
    }
    Ok(())
}

/// A user op with only a CPU implementation: on the ROCm device it can only run through the
/// CPU fallback.
struct CpuOnly;

impl candle_core::CustomOp1 for CpuOnly {
    fn name(&self) -> &'static str {
        "cpu-only-test-op"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        Ok((s.affine(l, 2.0, 1.0)?, l.shape().clone()))
    }
}

fn assert_strict_error(e: &candle_core::Error, op: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains(candle_rocm::STRICT_VAR) && msg.contains(op),
        "the error should name {op} and {}: {msg}",
        candle_rocm::STRICT_VAR
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn strict_mode_refuses_the_cpu_fallback() -> Result<()> {
    let dev = gpu()?;
    assert!(candle_rocm::strict());
    let (c, g) = host_pair(vec![1.0, -2.0, 3.0, 0.5], (2, 2), DType::F32, &dev)?;
    // On the CPU the op runs; on the device it has no implementation, and strict mode refuses
    // to copy the operand to the host.
    assert_eq!(
        c.apply_op1_no_bwd(&CpuOnly)?.to_vec2::<f32>()?,
        [[3.0, -3.0], [7.0, 2.0]]
    );
    let e = g
        .apply_op1_no_bwd(&CpuOnly)
        .expect_err("a CPU-only op ran in strict mode");
    assert_strict_error(&e, "cpu-only-test-op");
    // A built-in fused op on a dtype without a kernel: arg-sort of i16.
    let (c, g) = host_pair_of(vec![3i16, -1, 2, 7, 0, 5], (2, 3), &dev)?;
    assert_eq!(
        c.arg_sort_last_dim(true)?.to_vec2::<u32>()?,
        [[1, 2, 0], [1, 2, 0]]
    );
    let e = g
        .arg_sort_last_dim(true)
        .expect_err("i16 arg-sort ran in strict mode");
    assert_strict_error(&e, "argsort");
    // The device is still usable afterwards.
    let (c, g) = host_pair(vec![0.25, -4.0, 1.5], 3, DType::F32, &dev)?;
    let got = candle_nn::ops::sigmoid(&g)?;
    let want = candle_nn::ops::sigmoid(&c)?;
    assert_gpu_close(
        &got,
        &want,
        tolerance(DType::F32),
        "sigmoid after refused fallbacks",
    )
}

/// Row lengths for the `rows` kernels behind softmax and the norms: around the chunk (2 to 8
/// elements) and wave sizes, the register path's limits (4096 for f64, 8192 otherwise) and past
/// them (the two-pass kernels).
const ROW_LENGTHS: [usize; 14] = [
    1, 3, 31, 32, 33, 63, 64, 65, 1023, 4096, 4097, 8192, 8193, 20_000,
];

/// `rows x cols` values as a contiguous CPU/GPU pair, either at offset 0 or at offset 1 of
/// their buffer (a contiguous layout whose rows are not 16-byte aligned), with `edit` applied to
/// the host values first.
fn row_pair(
    rows: usize,
    cols: usize,
    dtype: DType,
    offset: bool,
    r: &mut rand::rngs::StdRng,
    dev: &Device,
    edit: impl Fn(&mut [f32]),
) -> Result<(Tensor, Tensor)> {
    let n = rows * cols;
    let extra = usize::from(offset);
    let mut v = normal(r, n + extra, 2.0);
    edit(&mut v[extra..]);
    let (c, g) = host_pair(v, n + extra, dtype, dev)?;
    let c = c.narrow(0, extra, n)?.reshape((rows, cols))?;
    let g = g.narrow(0, extra, n)?.reshape((rows, cols))?;
    assert!(g.is_contiguous());
    Ok((c, g))
}

#[test]
#[ignore = "needs a HIP device"]
fn softmax_rows_of_every_length() -> Result<()> {
    // Single-pass (row in registers) and two-pass kernels, aligned and misaligned rows, and
    // rows holding -inf, +inf, NaN or only -inf: the CPU's values, NaN where it has NaN.
    let dev = gpu()?;
    let mut r = rng(21);
    for dtype in FLOATS {
        for &cols in &ROW_LENGTHS {
            let rows = if cols >= 4096 { 5 } else { 9 };
            for offset in [false, true] {
                let specials = |v: &mut [f32]| {
                    v[0] = f32::NEG_INFINITY; // row 0 starts with -inf
                    v[cols..2 * cols].fill(f32::NEG_INFINITY); // row 1: all -inf (NaN out)
                    v[2 * cols + cols / 2] = f32::NAN; // row 2: one NaN
                    v[3 * cols + cols - 1] = f32::INFINITY; // row 3: one +inf
                    v[4 * cols + cols / 3] = f32::NEG_INFINITY; // row 4: one -inf
                };
                let (c, g) = row_pair(rows, cols, dtype, offset, &mut r, &dev, specials)?;
                let want = reference(&[&c], |t| candle_nn::ops::softmax_last_dim(&t[0]))?;
                let got = candle_nn::ops::softmax_last_dim(&g)?;
                let what = format!("softmax {dtype:?} {rows}x{cols} offset {offset}");
                assert_gpu_close(&got, &want, tolerance(dtype), &what)?;
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn norms_rows_of_every_length() -> Result<()> {
    // RMS and layer norm on the single-pass and two-pass kernels, aligned and misaligned rows
    // and scale/shift vectors.
    let dev = gpu()?;
    let mut r = rng(22);
    let eps = 1e-5;
    for dtype in FLOATS {
        let tol = norm_tolerance(dtype);
        for &cols in &ROW_LENGTHS {
            let rows = if cols >= 4096 { 3 } else { 7 };
            for offset in [false, true] {
                let shift = |v: &mut [f32]| v.iter_mut().for_each(|x| *x += 0.5);
                let (c, g) = row_pair(rows, cols, dtype, offset, &mut r, &dev, shift)?;
                let (ca, ga) = row_pair(1, cols, dtype, offset, &mut r, &dev, |_| {})?;
                let (cb, gb) = row_pair(1, cols, dtype, !offset, &mut r, &dev, |_| {})?;
                let (ca, ga, cb, gb) = (
                    ca.squeeze(0)?,
                    ga.squeeze(0)?,
                    cb.squeeze(0)?,
                    gb.squeeze(0)?,
                );
                let what = format!("{dtype:?} {rows}x{cols} offset {offset}");
                let got = candle_nn::ops::rms_norm(&g, &ga, eps)?;
                let want = rms_norm_cpu(&c, &ca, eps)?;
                assert_gpu_close(&got, &want, tol, &format!("rms_norm {what}"))?;
                let got = candle_nn::ops::layer_norm(&g, &ga, &gb, eps)?;
                let want = layer_norm_cpu(&c, &ca, &cb, eps)?;
                assert_gpu_close(&got, &want, tol, &format!("layer_norm {what}"))?;
            }
        }
    }
    Ok(())
}
