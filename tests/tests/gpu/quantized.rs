//! Quantized (GGML) tensors on the device (`QStorage::Ext`): blocks quantized on the CPU,
//! loaded onto the GPU, read back byte for byte, dequantized on the device to f32 and f16, and
//! multiplied (`QMatMul`) against the CPU's dequantized weights (and, where the GPU rounds the
//! activations to 8 bits as Candle CUDA does, against that rounding done on the host).

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_rocm::settings::{qmatvec_split, SplitMode, QMATVEC_SPLIT_VAR};
use candle_rocm_tests::{
    assert_close, assert_gpu_close, gpu, isolated_with, normal, rng, root_cause,
    GGML_TYPES_BUT_Q8_1,
};

/// A `(rows, k)` weight matrix quantized on the CPU, and the same blocks loaded on `dev`.
fn weights(dtype: GgmlDType, rows: usize, k: usize, seed: u64) -> Result<(QTensor, QTensor)> {
    let w = Tensor::from_vec(
        normal(&mut rng(seed), rows * k, 1.0),
        (rows, k),
        &Device::Cpu,
    )?;
    let cpu = QTensor::quantize(&w, dtype)?;
    let data = cpu.data()?;
    let on_gpu = QTensor::new(QStorage::from_data(data, &gpu()?, dtype)?, (rows, k))?;
    Ok((cpu, on_gpu))
}

#[test]
#[ignore = "needs a HIP device"]
fn blocks_round_trip_and_dequantize_like_the_cpu() -> Result<()> {
    for (i, dtype) in GGML_TYPES_BUT_Q8_1.into_iter().enumerate() {
        let (rows, k) = (3, 512);
        let (cpu, q) = weights(dtype, rows, k, 100 + i as u64)?;
        assert_eq!(q.dtype(), dtype);
        assert!(q.device().is_ext(), "{dtype:?}: on {:?}", q.device());
        assert_eq!(q.storage_size_in_bytes(), cpu.storage_size_in_bytes());
        assert_eq!(q.data()?.as_ref(), cpu.data()?.as_ref(), "{dtype:?} bytes");
        let want = cpu.dequantize(&Device::Cpu)?;
        // The kernels compute each value as scale * quant in f32, as the CPU does.
        let got = q.dequantize(&q.device())?;
        assert_gpu_close(&got, &want, 1e-6, &format!("{dtype:?} dequantize"))?;
        let got16 = q.dequantize_f16(&q.device())?;
        assert_gpu_close(
            &got16,
            &want.to_dtype(DType::F16)?,
            1e-3,
            &format!("{dtype:?} dequantize_f16"),
        )?;
    }
    Ok(())
}

/// The types with our `qmatvec` kernels (the mat-vec for up to 8 rows by default).
const QMATVEC_TYPES: [GgmlDType; 8] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// Whether this run rounds the mat-vec's activations to 8 bits (candle-rocm's
/// `CANDLE_ROCM_QMATVEC=q8`, which the harness sets for a second pass).
fn qmatvec_q8() -> bool {
    std::env::var("CANDLE_ROCM_QMATVEC").is_ok_and(|v| v.eq_ignore_ascii_case("q8"))
}

/// Whether our kernels round `dtype`'s activations to 8 bits in this run: in q8 mode, for every
/// `QMATVEC_TYPES` type.
fn rounds_to_8_bits(dtype: GgmlDType) -> bool {
    qmatvec_q8() && QMATVEC_TYPES.contains(&dtype)
}

/// One row of `x` rounded to 8 bits as Candle CUDA's `quantize_q8_1` (and candle-rocm's
/// `qmv_quantize_x8`) rounds it, per 32-value block: the rounded values `d q` (d = amax / 127
/// kept as f16, q = round(x / d)) and the block's f16-rounded sum of x.
fn q8_1_row(x: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let (mut values, mut sums) = (Vec::with_capacity(x.len()), Vec::new());
    for block in x.chunks(32) {
        let amax = block.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let d16 = half::f16::from_f32(d).to_f32();
        for v in block {
            let q = if amax == 0.0 {
                0.0
            } else {
                (v / d).round().clamp(-128.0, 127.0)
            };
            values.push(d16 * q);
        }
        sums.push(half::f16::from_f32(block.iter().sum::<f32>()).to_f32());
    }
    (values, sums)
}

/// What the GPU's mat-vec of `m` rows computes for a `QMATVEC_TYPES` weight, on the CPU: by
/// default `x` times the dequantized weights `w`; with 8-bit activations
/// ([`rounds_to_8_bits`]), `x` rounded as [`q8_1_row`] rounds it times `w`, except that q4_0's
/// and q5_0's offsets (8 and 16) and q4_1's and q5_1's mins multiply the block's f16 sum of x
/// instead of its rounded values (Candle CUDA's `vec_dot_q4_*_q8_1` / `vec_dot_q5_*_q8_1`):
/// `blocks` are the weights' GGML bytes.
fn mat_vec_reference(dtype: GgmlDType, blocks: &[u8], w: &Tensor, x: &Tensor) -> Result<Tensor> {
    if !rounds_to_8_bits(dtype) {
        return x.broadcast_matmul(&w.t()?);
    }
    let k = x.dim(candle_core::D::Minus1)?;
    let rows = x.reshape(((), k))?.to_vec2::<f32>()?;
    let w = w.to_vec2::<f32>()?;
    let f16_at = |b: &[u8], i: usize| half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
    let mut out = Vec::with_capacity(rows.len() * w.len());
    for row in &rows {
        let (xq, sums) = q8_1_row(row);
        for (r, wr) in w.iter().enumerate() {
            let mut y = 0f64;
            for (b, sum) in sums.iter().enumerate() {
                let span = b * 32..(b + 1) * 32;
                // Per-block terms: the weight values' part that multiplies x's rounded values,
                // and the offset (q4_0, q5_0) or min (q4_1, q5_1) times the f16 sum of x.
                let (shift, offset) = match dtype {
                    GgmlDType::Q4_0 | GgmlDType::Q5_0 => {
                        let (bytes, off) = if dtype == GgmlDType::Q4_0 {
                            (18, 8.0)
                        } else {
                            (22, 16.0)
                        };
                        let d = f16_at(&blocks[(r * k / 32 + b) * bytes..], 0);
                        (off * d, -off * d * sum)
                    }
                    GgmlDType::Q4_1 | GgmlDType::Q5_1 => {
                        let bytes = if dtype == GgmlDType::Q4_1 { 20 } else { 24 };
                        let m = f16_at(&blocks[(r * k / 32 + b) * bytes..], 2);
                        (-m, m * sum)
                    }
                    _ => (0.0, 0.0),
                };
                for (wv, xv) in wr[span.clone()].iter().zip(&xq[span]) {
                    y += f64::from(wv + shift) * f64::from(*xv);
                }
                y += f64::from(offset);
            }
            out.push(y as f32);
        }
    }
    Tensor::from_vec(out, (rows.len(), w.len()), &Device::Cpu)?.reshape(
        x.dims()[..x.rank() - 1]
            .iter()
            .copied()
            .chain([w.len()])
            .collect::<Vec<_>>(),
    )
}

#[test]
#[ignore = "needs a HIP device"]
fn qmatmul_matches_the_cpu_on_dequantized_weights() -> Result<()> {
    let dev = gpu()?;
    let (n, k) = (96, 512);
    for (i, dtype) in GGML_TYPES_BUT_Q8_1.into_iter().enumerate() {
        let (cpu, q) = weights(dtype, n, k, 200 + i as u64)?;
        let w = cpu.dequantize(&Device::Cpu)?;
        let blocks = cpu.data()?.into_owned();
        let mm = QMatMul::from_qtensor(q)?;
        // Batch 1 (decode), counts of 2..8 (one launch of the mat-vec kernels for up to
        // 8 rows, k-quants in launches of up to 4: 5 = 2 + 3, 7 = 3 + 4, 8 = 4 + 4; 7 and 8
        // rows of the 32-value block types run `qmr_*_m8` by default), 9, 16,
        // 17, 32 and 33 (the GEMM by default; the tiled kernels with CANDLE_ROCM_QMATMUL_ROWS,
        // each x-row tile and a partial one; the mat-vec in two or more launches with
        // CANDLE_ROCM_QMATVEC_ROWS=16 or more), 64 and 512, and 3-D inputs.
        for shape in [
            vec![1, k],
            vec![2, k],
            vec![3, k],
            vec![4, k],
            vec![5, k],
            vec![7, k],
            vec![8, k],
            vec![2, 3, k],
            vec![9, k],
            vec![16, k],
            vec![17, k],
            vec![32, k],
            vec![33, k],
            vec![64, k],
            vec![512, k],
            vec![2, 5, k],
        ] {
            let m: usize = shape[..shape.len() - 1].iter().product();
            let x = Tensor::from_vec(
                normal(&mut rng(300 + m as u64), m * k, 1.0),
                shape,
                &Device::Cpu,
            )?;
            let want = x.broadcast_matmul(&w.t()?)?;
            let got = mm.forward(&x.to_device(&dev)?)?;
            // `qmatmul_path` says which kernels take these rows (by default up to 6 or 8 rows
            // the mat-vec, then up to 8 the tiled kernels; the harness's passes move both with
            // CANDLE_ROCM_QMATVEC_ROWS and CANDLE_ROCM_QMATMUL_ROWS): ours (QMATVEC_TYPES), the
            // mat-vec or the tiled kernels, with the same numbers: the CPU's weight values
            // times x in f32, or on rows rounded to 8 bits (checked against the same rounding
            // on the CPU); candle's mat-vec for one row of the other types in f32; more rows of
            // quantized weights run one GEMM on f16 weights and f16-rounded rows, accumulated
            // in f32 (plain values stay f32).
            let plain = matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
            let ours = QMATVEC_TYPES.contains(&dtype)
                && candle_rocm::quantized::qmatmul_path(dtype, m)
                    != candle_rocm::quantized::QmatmulPath::Gemm;
            let (want_here, tol) = if ours {
                (mat_vec_reference(dtype, &blocks, &w, &x)?, 1e-4)
            } else if m == 1 || plain {
                (want.clone(), 1e-4)
            } else {
                (want.clone(), 2e-3)
            };
            assert_gpu_close(
                &got,
                &want_here,
                tol,
                &format!("{dtype:?} qmatmul {:?}", x.dims()),
            )?;
            if ours && qmatvec_q8() {
                // Rounding x to 8 bits moves the product by about 1e-2 of its scale at most.
                assert_gpu_close(
                    &got,
                    &want,
                    2e-2,
                    &format!("{dtype:?} qmatmul {:?} vs f32 x", x.dims()),
                )?;
            }
            if matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16) {
                // `QMatMul` holds these as an f32 tensor: f32 inputs only, as on every device.
                continue;
            }
            // Half-precision activations give half-precision outputs.
            let got16 = mm.forward(&x.to_dtype(DType::F16)?.to_device(&dev)?)?;
            assert_eq!(got16.dtype(), DType::F16);
            assert_close(
                &got16.to_dtype(DType::F32)?.to_device(&Device::Cpu)?,
                &want,
                2e-2,
                &format!("{dtype:?} qmatmul f16 {:?}", x.dims()),
            )?;
        }
    }
    Ok(())
}

/// The decode path's kernels put 4, 2 or 1 output rows in a block, by what divides the row
/// count: every case, each type, against the CPU.
#[test]
#[ignore = "needs a HIP device"]
fn qmatvec_with_every_rows_per_block() -> Result<()> {
    let dev = gpu()?;
    let k = 256;
    for (i, dtype) in GGML_TYPES_BUT_Q8_1.into_iter().enumerate() {
        for n in [12, 6, 3, 1] {
            let (cpu, q) = weights(dtype, n, k, 400 + (i * 7 + n) as u64)?;
            let w = cpu.dequantize(&Device::Cpu)?;
            let blocks = cpu.data()?.into_owned();
            let mm = QMatMul::from_qtensor(q)?;
            let x = Tensor::from_vec(
                normal(&mut rng(500 + n as u64), k, 1.0),
                (1, k),
                &Device::Cpu,
            )?;
            let want = if QMATVEC_TYPES.contains(&dtype) {
                mat_vec_reference(dtype, &blocks, &w, &x)?
            } else {
                x.matmul(&w.t()?)?
            };
            let got = mm.forward(&x.to_device(&dev)?)?;
            assert_gpu_close(&got, &want, 1e-4, &format!("{dtype:?} mat-vec n {n}"))?;
        }
    }
    Ok(())
}

/// Names the file through which the first child process of
/// [`qmatvec_split_matches_the_unsplit_kernels`] hands its (unsplit) results to the second.
const SPLIT_REFERENCE_VAR: &str = "CANDLE_ROCM_TESTS_QMATVEC_SPLIT_REFERENCE";

/// One-row products (decode) on every `QMATVEC_TYPES` type, on shapes that give the split
/// kernels every groups-per-row count (candle-rocm's `split_groups_per_row`: 17 x 512 gives
/// 2 for the 32-value blocks and 1 for the k-quants, 1024 x 2048 gives 8 and 4, 64 x 5632 8
/// and 8), x as (1, k) and as (1, 1, k): for each, its name, the GPU's result (computed twice:
/// the two must be the same bits) and the CPU's product on the dequantized weights.
fn one_row_products(dev: &Device) -> Result<Vec<(String, Vec<f32>, Tensor)>> {
    let mut out = Vec::new();
    for (i, dtype) in QMATVEC_TYPES.into_iter().enumerate() {
        for (j, (n, k)) in [(17, 512), (1024, 2048), (64, 5632)]
            .into_iter()
            .enumerate()
        {
            let (cpu, q) = weights(dtype, n, k, 700 + (10 * i + j) as u64)?;
            let w = cpu.dequantize(&Device::Cpu)?;
            let mm = QMatMul::from_qtensor(q)?;
            let shape = if j == 1 { vec![1, 1, k] } else { vec![1, k] };
            let x = Tensor::from_vec(
                normal(&mut rng(800 + (10 * i + j) as u64), k, 1.0),
                shape,
                &Device::Cpu,
            )?;
            let x_dev = x.to_device(dev)?;
            let what = format!("{dtype:?} one row {n} x {k}");
            let got = mm.forward(&x_dev)?.flatten_all()?.to_vec1::<f32>()?;
            let again = mm.forward(&x_dev)?.flatten_all()?.to_vec1::<f32>()?;
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&again), "{what}: two runs differ");
            let want = x.broadcast_matmul(&w.t()?)?.flatten_all()?;
            out.push((what, got, want));
        }
    }
    Ok(out)
}

/// The split kernels' one-row products (`CANDLE_ROCM_QMATVEC_SPLIT=1`, read once per process:
/// computed in a child process of this binary) against the unsplit kernels' (`=0`, in another
/// child, handed over in a file) and against the CPU, within the mat-vec's tolerance above
/// (1e-4 of the largest value); each deterministic (two runs, the same bits). The parent's
/// own setting (by default `auto`, which splits some shapes) does not matter.
#[test]
#[ignore = "needs a HIP device"]
fn qmatvec_split_matches_the_unsplit_kernels() -> Result<()> {
    if qmatvec_q8() {
        // The split kernels take f32 activations only; q8 mode never runs them.
        return Ok(());
    }
    let Some(path) = std::env::var_os(SPLIT_REFERENCE_VAR) else {
        // The parent: the unsplit kernels' results in one child, then the split kernels' in
        // another, which compares.
        let path = std::env::temp_dir().join(format!(
            "candle-rocm-qmatvec-split-{}.f32",
            std::process::id()
        ));
        let path_text = path.to_string_lossy().into_owned();
        let children = ["0", "1"].into_iter().try_for_each(|split| {
            let child = isolated_with(
                "quantized::qmatvec_split_matches_the_unsplit_kernels",
                &[
                    (QMATVEC_SPLIT_VAR, split),
                    (SPLIT_REFERENCE_VAR, path_text.as_str()),
                ],
            );
            if child? {
                candle_core::bail!("each split run needs a child process of its own");
            }
            Ok(())
        });
        let _ = std::fs::remove_file(&path);
        return children;
    };
    let dev = gpu()?;
    let products = one_row_products(&dev)?;
    match qmatvec_split() {
        SplitMode::Never => {
            // The first child: the unsplit kernels' results, for the second.
            let bytes: Vec<u8> = products
                .iter()
                .flat_map(|(_, got, _)| got.iter().flat_map(|v| v.to_le_bytes()))
                .collect();
            std::fs::write(&path, bytes)?;
            return Ok(());
        }
        SplitMode::Always => {}
        SplitMode::Auto => candle_core::bail!("{QMATVEC_SPLIT_VAR} is auto in a child"),
    }
    // The second child: the split kernels ran these products.
    let bytes = std::fs::read(path)?;
    let unsplit: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let total: usize = products.iter().map(|(_, got, _)| got.len()).sum();
    assert_eq!(unsplit.len(), total, "unsplit results");
    let mut at = 0;
    for (what, got, cpu) in &products {
        let got_t = Tensor::new(got.as_slice(), &Device::Cpu)?;
        let want = Tensor::new(&unsplit[at..at + got.len()], &Device::Cpu)?;
        at += got.len();
        assert_close(&got_t, &want, 1e-4, &format!("{what}: split vs unsplit"))?;
        assert_close(&got_t, cpu, 1e-4, &format!("{what}: split vs the CPU"))?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn embedding_rows_come_from_the_device() -> Result<()> {
    let dev = gpu()?;
    let (cpu, q) = weights(GgmlDType::Q4K, 40, 256, 7)?;
    let ids = Tensor::new(&[3u32, 0, 39, 3], &Device::Cpu)?;
    let want = cpu.dequantize(&Device::Cpu)?.index_select(&ids, 0)?;
    let got = q.embedding(&ids.to_device(&dev)?)?;
    assert_gpu_close(&got, &want, 1e-6, "q4_K embedding")
}

/// Q8_1, which candle-kernels cannot dequantize, stays on the device too (our
/// `qmv_dequantize_q8_1_*`; in strict mode a host round trip would be an error): its values as
/// the CPU dequantizes them, in f32 and f16, and `QMatMul` on them for 1 and 9 rows.
#[test]
#[ignore = "needs a HIP device"]
fn q8_1_dequantizes_and_multiplies_on_the_device() -> Result<()> {
    let dev = gpu()?;
    let (n, k) = (40, 256);
    let (cpu, q) = weights(GgmlDType::Q8_1, n, k, 9)?;
    assert_eq!(q.data()?.as_ref(), cpu.data()?.as_ref());
    let want = cpu.dequantize(&Device::Cpu)?;
    assert_gpu_close(&q.dequantize(&dev)?, &want, 0.0, "q8_1 dequantize")?;
    assert_gpu_close(
        &q.dequantize_f16(&dev)?,
        &want.to_dtype(DType::F16)?,
        0.0,
        "q8_1 dequantize_f16",
    )?;
    let mm = QMatMul::from_qtensor(q)?;
    for m in [1, 9] {
        let x = Tensor::from_vec(
            normal(&mut rng(600 + m as u64), m * k, 1.0),
            (m, k),
            &Device::Cpu,
        )?;
        let got = mm.forward(&x.to_device(&dev)?)?;
        assert_gpu_close(
            &got,
            &x.matmul(&want.t()?)?,
            2e-3,
            &format!("q8_1 qmatmul {m} rows"),
        )?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn truncated_blocks_are_a_typed_error() -> Result<()> {
    let dev = gpu()?;
    // 17 bytes are not whole Q4_0 blocks (18 bytes each).
    let e = QStorage::from_data(
        std::borrow::Cow::Owned(vec![0u8; 17]),
        &dev,
        GgmlDType::Q4_0,
    )
    .err()
    .map(|e| root_cause(&e).to_string());
    assert!(
        e.as_deref()
            .is_some_and(|m| m.contains("whole") && m.contains("Q4_0")),
        "{e:?}"
    );
    Ok(())
}

/// SwiGLU's gate fused into the decode mat-vec (`QMatMul::forward_swiglu_fused` on stacked
/// gate|up weights, `qmatvec_swiglu_*`): for our mat-vec types, one row, x aligned and not,
/// odd and even h, the same numbers as the unfused product on the GPU with the gate applied on
/// the host (the same sums, so within f32 rounding of silu), and the CPU's reference; `None`
/// (the caller's composition) for the other types and modes and for more than one row.
#[test]
#[ignore = "needs a HIP device"]
fn qmatvec_swiglu_matches_the_product_then_the_gate() -> Result<()> {
    let dev = gpu()?;
    let k = 512;
    for (i, dtype) in GGML_TYPES_BUT_Q8_1.into_iter().enumerate() {
        let fused_here = QMATVEC_TYPES.contains(&dtype)
            && !qmatvec_q8()
            && candle_rocm::settings::fast_kernels();
        for (h, skew) in [(8, 0), (13, 1), (64, 0), (37, 3)] {
            let (cpu, q) = weights(dtype, 2 * h, k, 700 + (i * 11 + h) as u64)?;
            let w = cpu.dequantize(&Device::Cpu)?;
            let blocks = cpu.data()?.into_owned();
            let mm = QMatMul::from_qtensor(q)?;
            // One row of k values `skew` floats into a buffer (skew 0: 16-byte aligned, the
            // `_v` kernel).
            let wide = Tensor::from_vec(
                normal(&mut rng(900 + h as u64), k + skew, 1.0),
                (1, k + skew),
                &Device::Cpu,
            )?;
            let x = wide.narrow(1, skew, k)?;
            let xg = wide.to_device(&dev)?.narrow(1, skew, k)?;
            let what = format!("{dtype:?} swiglu h {h} x+{skew}");
            let Some(got) = mm.forward_swiglu_fused(&xg)? else {
                assert!(!fused_here, "{what}: the fused kernel did not run");
                continue;
            };
            assert!(fused_here, "{what}: fused where it should not be");
            assert_eq!(got.dims(), [1, h], "{what}");
            let gate = |p: &Tensor| -> Result<Tensor> {
                let g = p.narrow(1, 0, h)?;
                let u = p.narrow(1, h, h)?;
                (g.clone() / (g.neg()?.exp()? + 1.0)?)? * u
            };
            let unfused = gate(&mm.forward(&xg)?.to_device(&Device::Cpu)?)?;
            assert_gpu_close(&got, &unfused, 1e-5, &format!("{what} vs unfused"))?;
            let reference = gate(&mat_vec_reference(dtype, &blocks, &w, &x.contiguous()?)?)?;
            assert_gpu_close(&got, &reference, 1e-4, &format!("{what} vs CPU"))?;
        }
        // More rows: the caller's composition.
        let (_, q) = weights(dtype, 16, k, 1)?;
        let x2 = Tensor::ones((2, k), DType::F32, &dev)?;
        assert!(QMatMul::from_qtensor(q)?
            .forward_swiglu_fused(&x2)?
            .is_none());
    }
    Ok(())
}
