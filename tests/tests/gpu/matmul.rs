//! Decode-shaped matrix products on the GPU, which candle-rocm runs on its `gemv` kernels (up to
//! 8 rows of lhs against a transposed rhs, `candle_rocm::launch::gemv`, or against a row-major
//! rhs, `candle_rocm::launch::gemv_nn`), against the same product on the CPU in f64: a Linear
//! layer's `x w^T` for 1 to 8 rows (and 9, which goes to rocBLAS), a batched input against a
//! broadcast weight, attention's `q k^T` and `att v` over 32 heads, `k` a multiple of the
//! 16-byte chunk and not, one output column, and an operand at an offset that breaks 16-byte
//! alignment (the scalar path), in f32, f16 and bf16.

use candle_core::{DType, Device, Module, Result, Tensor};
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

/// `rows` rows of softmax weights per head, `(1, 32, rows, s)`, as f32 values (what attention
/// multiplies `v` by).
fn softmax_weights(seed: u64, rows: usize, s: usize) -> Result<Vec<f32>> {
    let logits = Tensor::from_vec(
        normal(&mut rng(seed), 32 * rows * s, 2.0),
        (1, 32, rows, s),
        &Device::Cpu,
    )?;
    candle_nn::ops::softmax_last_dim(&logits)?
        .flatten_all()?
        .to_vec1::<f32>()
}

#[test]
#[ignore = "needs a HIP device"]
fn attention_values_at_decode_match_the_cpu() -> Result<()> {
    let dev = gpu()?;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        // 4097: past launch::gemv_nn's k limit, so this one runs on rocBLAS.
        for s in [1, 17, 80, 1000, 4097] {
            // One token, and 3 rows (a short chunk of a prompt or speculative tokens).
            for rows in [1, 3] {
                let seed = (s * 10 + rows) as u64;
                let (ac, ag) = host_pair(
                    softmax_weights(seed, rows, s)?,
                    (1, 32, rows, s),
                    dtype,
                    &dev,
                )?;
                let (vc, vg) = host_pair(
                    normal(&mut rng(seed + 1), 32 * s * 64, 1.0),
                    (1, 32, s, 64),
                    dtype,
                    &dev,
                )?;
                let want = reference(|a, v| a.matmul(v), &ac, &vc)?;
                let got = ag.matmul(&vg)?;
                let what = format!("att v {dtype:?} s={s} rows={rows}");
                assert_gpu_close(&got, &want, tol(dtype), &what)?;
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn row_major_rhs_products_match_the_cpu() -> Result<()> {
    let dev = gpu()?;
    let mut seed = 500;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        // (13, 37): no 16-byte rows (the scalar path); (4100, 8): tiles past one block.
        for (n, k) in [(13, 37), (64, 1), (1, 300), (300, 20), (4100, 8)] {
            for rows in [1, 2, 5, 8, 9] {
                seed += 1;
                let (wc, wg) = host_pair(normal(&mut rng(seed), k * n, 0.5), (k, n), dtype, &dev)?;
                let x = normal(&mut rng(seed + 7), 3 * rows * k, 0.5);
                let (xc, xg) = host_pair(x, (3, rows, k), dtype, &dev)?;
                let what = format!("x w {dtype:?} n={n} k={k} rows={rows}");
                // (rows, k) and a batch of 3 against the shared (broadcast) rhs.
                let want = reference(|x, w| x.matmul(w), &xc.get(0)?, &wc)?;
                assert_gpu_close(&xg.get(0)?.matmul(&wg)?, &want, tol(dtype), &what)?;
                let want = reference(|x, w| x.broadcast_matmul(w), &xc, &wc)?;
                assert_gpu_close(&xg.broadcast_matmul(&wg)?, &want, tol(dtype), &what)?;
                // rhs one element past a 16-byte boundary: the scalar path.
                let (ws_c, ws_g) = (
                    wc.flatten_all()?.narrow(0, 1, k * n - 1)?,
                    wg.flatten_all()?.narrow(0, 1, k * n - 1)?,
                );
                if k > 1 {
                    let (ws_c, ws_g) = (
                        ws_c.narrow(0, 0, (k - 1) * n)?.reshape((k - 1, n))?,
                        ws_g.narrow(0, 0, (k - 1) * n)?.reshape((k - 1, n))?,
                    );
                    let (x1c, x1g) = (
                        xc.get(0)?.narrow(1, 0, k - 1)?.contiguous()?,
                        xg.get(0)?.narrow(1, 0, k - 1)?.contiguous()?,
                    );
                    let want = reference(|x, w| x.matmul(w), &x1c, &ws_c)?;
                    assert_gpu_close(
                        &x1g.matmul(&ws_g)?,
                        &want,
                        tol(dtype),
                        &format!("{what} offset"),
                    )?;
                }
            }
        }
    }
    Ok(())
}
