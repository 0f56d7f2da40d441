//! Decode-shaped matrix products on the GPU, which candle-rocm runs on its `gemv` kernels (up to
//! 8 rows of lhs against a transposed rhs, `candle_rocm::launch::gemv`), against the same product on
//! the CPU in f64: a Linear layer's `x w^T` for 1 to 8 rows (and 9, which goes to rocBLAS), a
//! batched input against a broadcast weight, attention's `q k^T` over 32 heads, `k` a multiple
//! of the 16-byte chunk and not, one output column, and an lhs at an offset that breaks
//! 16-byte alignment (the scalar path), in f32, f16 and bf16.

use candle_core::{DType, Module, Result, Tensor};
use candle_rocm_tests::{assert_gpu_close, gpu, host_pair, normal, rng, tolerance};

/// The product's tolerance, relative to the largest output: f32 accumulation (as rocBLAS does)
/// and, for f16/bf16, the one rounding of the output (the inputs are the same rounded values on
/// both sides).
fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-5,
        _ => tolerance(dtype),
    }
}

/// `want` computed on the CPU from the same (rounded) values in f64, back in `dtype`.
fn reference(
    f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>,
    a: &Tensor,
    b: &Tensor,
) -> Result<Tensor> {
    let dtype = a.dtype();
    f(&a.to_dtype(DType::F64)?, &b.to_dtype(DType::F64)?)?.to_dtype(dtype)
}

#[test]
#[ignore = "needs a HIP device"]
fn linear_layers_at_decode_match_the_cpu() -> Result<()> {
    let dev = gpu()?;
    let mut seed = 100;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        // (576, 1536): SmolLM2's down projection, whose f16/bf16 rows split over 4 groups.
        for (n, k) in [
            (2048, 2048),
            (13, 37),
            (1, 64),
            (300, 4096),
            (576, 1536),
            (192, 3 * 256),
        ] {
            for rows in [1, 2, 3, 5, 8, 9] {
                seed += 1;
                let (wc, wg) = host_pair(normal(&mut rng(seed), n * k, 0.5), (n, k), dtype, &dev)?;
                let x = normal(&mut rng(seed + 7), 3 * rows * k, 0.5);
                let (xc, xg) = host_pair(x, (3, rows, k), dtype, &dev)?;
                let lin_gpu = candle_nn::Linear::new(wg.clone(), None);
                let what = format!("linear {dtype:?} n={n} k={k} rows={rows}");
                // (rows, k) and a batch of 3 against the shared weight.
                let want = reference(|x, w| x.matmul(&w.t()?), &xc.get(0)?, &wc)?;
                assert_gpu_close(&lin_gpu.forward(&xg.get(0)?)?, &want, tol(dtype), &what)?;
                let want = reference(|x, w| x.broadcast_matmul(&w.t()?), &xc, &wc)?;
                assert_gpu_close(&lin_gpu.forward(&xg)?, &want, tol(dtype), &what)?;
                // lhs one element past a 16-byte boundary: the scalar path.
                let (xs_c, xs_g) = (
                    xc.flatten_all()?.narrow(0, 1, rows * k)?,
                    xg.flatten_all()?.narrow(0, 1, rows * k)?,
                );
                let (xs_c, xs_g) = (xs_c.reshape((rows, k))?, xs_g.reshape((rows, k))?);
                let want = reference(|x, w| x.matmul(&w.t()?), &xs_c, &wc)?;
                assert_gpu_close(
                    &xs_g.matmul(&wg.t()?)?,
                    &want,
                    tol(dtype),
                    &format!("{what} offset"),
                )?;
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn attention_scores_at_decode_match_the_cpu() -> Result<()> {
    let dev = gpu()?;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for t in [1, 21, 300] {
            let (qc, qg) = host_pair(
                normal(&mut rng(t as u64), 32 * 64, 1.0),
                (1, 32, 1, 64),
                dtype,
                &dev,
            )?;
            let (kc, kg) = host_pair(
                normal(&mut rng(t as u64 + 1), 32 * t * 64, 1.0),
                (1, 32, t, 64),
                dtype,
                &dev,
            )?;
            let want = reference(|q, k| q.matmul(&k.t()?), &qc, &kc)?;
            let got = qg.matmul(&kg.t()?)?;
            assert_gpu_close(&got, &want, tol(dtype), &format!("q k^T {dtype:?} t={t}"))?;
        }
    }
    Ok(())
}
