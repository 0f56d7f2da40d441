//! candle-nn's `swiglu` and `add_rms_norm` on the device (the fused `rswiglu_*` and
//! `raddrmsnorm_*` row kernels) against the CPU's composition of the same ops, for every float
//! dtype: rows of vector and scalar chunks, single- and two-pass rows, many short rows; and the
//! unfused path add_rms_norm takes for a strided scale.

use candle_core::{Result, D};
use candle_rocm_tests::{assert_gpu_close, gpu, host_pair, normal, rng, tolerance};

use super::fused::{norm_tolerance, params, reference, rms_norm_cpu, FLOATS};

/// Shapes with an even last dim (gate, then up): halves of whole 16-byte chunks (11264: the
/// 1.1B llama's gate|up; 600), of odd element counts (8194 -> 4097, 34 -> 17), one pair, many
/// short rows, a 3-d tensor.
const SWIGLU_SHAPES: &[&[usize]] = &[
    &[1, 2],
    &[1, 11264],
    &[3, 8194],
    &[1, 600],
    &[1000, 6],
    &[2, 5, 34],
];

/// Rows for the residual add and norm: one element, rows in registers (2048: the 1.1B llama's
/// hidden size; 4097 with a scalar tail), rows past the single-pass limit (9000: two passes
/// in every dtype), many short rows, a 3-d tensor.
const NORM_SHAPES: &[&[usize]] = &[
    &[1, 1],
    &[1, 2048],
    &[3, 4097],
    &[2, 9000],
    &[1000, 7],
    &[2, 5, 33],
];

#[test]
#[ignore = "needs a HIP device"]
fn swiglu() -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(41);
    for dtype in FLOATS {
        for &shape in SWIGLU_SHAPES {
            let n = shape.iter().product();
            let (c, g) = host_pair(normal(&mut r, n, 3.0), shape, dtype, &dev)?;
            let got = candle_nn::ops::swiglu(&g)?;
            let want = reference(&[&c], |t| {
                let h = t[0].chunk(2, D::Minus1)?;
                &h[0].silu()? * &h[1]
            })?;
            assert_eq!(got.dims(), want.dims(), "swiglu {dtype:?} {shape:?}: shape");
            assert_gpu_close(
                &got,
                &want,
                tolerance(dtype),
                &format!("swiglu {dtype:?} {shape:?}"),
            )?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn add_rms_norm() -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(43);
    let eps = 1e-5;
    for dtype in FLOATS {
        for &shape in NORM_SHAPES {
            let cols = shape[shape.len() - 1];
            let n = shape.iter().product();
            let (cx, gx) = host_pair(normal(&mut r, n, 2.0), shape, dtype, &dev)?;
            let (cr, gr) = host_pair(normal(&mut r, n, 2.0), shape, dtype, &dev)?;
            // A contiguous scale (the fused kernel) and a strided one (the add, then rms_norm).
            for (i, (ca, ga)) in params(cols, dtype, &mut r, &dev)?.iter().enumerate() {
                let what = format!("add_rms_norm {dtype:?} {shape:?} alpha #{i}");
                let (sum, normed) = candle_nn::ops::add_rms_norm(&gx, &gr, ga, eps)?;
                let want_sum = (&cx + &cr)?;
                let want = rms_norm_cpu(&want_sum, ca, eps)?;
                assert_eq!(sum.dims(), shape, "{what}: sum shape");
                assert_eq!(normed.dims(), shape, "{what}: norm shape");
                // The sum is one rounding of an exact add: equal to the CPU's.
                assert_gpu_close(&sum, &want_sum, 0.0, &format!("{what}: sum"))?;
                assert_gpu_close(
                    &normed,
                    &want,
                    norm_tolerance(dtype),
                    &format!("{what}: norm"),
                )?;
            }
        }
    }
    Ok(())
}
