//! Quantized (GGML) tensors on the device (`QStorage::Ext`): blocks quantized on the CPU,
//! loaded onto the GPU, read back byte for byte, dequantized on the device to f32 and f16, and
//! multiplied (`QMatMul`) against the CPU's dequantized weights (and, where the GPU rounds the
//! activations to 8 bits, against the same rounding on the CPU).

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_rocm_tests::{
    assert_close, assert_gpu_close, gpu, normal, rng, root_cause, GGML_TYPES_BUT_Q8_1,
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

/// The types with our `qmatvec` kernels (mat-vec for up to 8 rows).
const QMATVEC_TYPES: [GgmlDType; 6] = [
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
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

/// What the GPU's mat-vec of `m` rows computes for a `QMATVEC_TYPES` weight, on the CPU: by
/// default `x` times the dequantized weights `w`; with 8-bit activations, the rows `x`
/// rounded to 8 bits per 32-value block (q8_0, as candle-rocm's `qmv_quantize_x8` rounds
/// them) times `w`, or for q4_0 and q4_1, whose CPU products round x the same way, the CPU's
/// own quantized product (`cpu_mm`, which also rounds q4_1's min term as the kernel does).
/// (The CPU's q8_0 product differs from both by as much as they differ from each other, and
/// k-quants round x per 256 values there.)
fn mat_vec_reference(dtype: GgmlDType, cpu_mm: &QMatMul, w: &Tensor, x: &Tensor) -> Result<Tensor> {
    if !qmatvec_q8() {
        return x.broadcast_matmul(&w.t()?);
    }
    match dtype {
        GgmlDType::Q4_0 | GgmlDType::Q4_1 => cpu_mm.forward(x),
        _ => {
            let k = x.dim(candle_core::D::Minus1)?;
            let rows = x.reshape(((), k))?;
            let x8 = QTensor::quantize(&rows, GgmlDType::Q8_0)?.dequantize(&Device::Cpu)?;
            x8.reshape(x.shape())?.broadcast_matmul(&w.t()?)
        }
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn qmatmul_matches_the_cpu_on_dequantized_weights() -> Result<()> {
    let dev = gpu()?;
    let (n, k) = (96, 512);
    for (i, dtype) in GGML_TYPES_BUT_Q8_1.into_iter().enumerate() {
        let (cpu, q) = weights(dtype, n, k, 200 + i as u64)?;
        let w = cpu.dequantize(&Device::Cpu)?;
        let cpu_mm = QMatMul::from_qtensor(cpu)?;
        let mm = QMatMul::from_qtensor(q)?;
        // Batch 1 (decode), 2..8, 9, 64 and 512 rows, and a 3-D input.
        for shape in [
            vec![1, k],
            vec![2, k],
            vec![8, k],
            vec![9, k],
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
            // Up to 8 rows run the mat-vec kernels: ours (QMATVEC_TYPES) in f32 or on rows
            // rounded to 8 bits (checked against the same rounding on the CPU), candle's for one
            // row of the other types in f32; more rows of quantized weights run one GEMM on f16 weights and
            // f16-rounded rows, accumulated in f32 (plain values stay f32).
            let plain = matches!(dtype, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
            let ours = m <= 8 && QMATVEC_TYPES.contains(&dtype);
            let (want_here, tol) = if ours {
                (mat_vec_reference(dtype, &cpu_mm, &w, &x)?, 1e-4)
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
            let cpu_mm = QMatMul::from_qtensor(cpu)?;
            let mm = QMatMul::from_qtensor(q)?;
            let x = Tensor::from_vec(
                normal(&mut rng(500 + n as u64), k, 1.0),
                (1, k),
                &Device::Cpu,
            )?;
            let want = if QMATVEC_TYPES.contains(&dtype) {
                mat_vec_reference(dtype, &cpu_mm, &w, &x)?
            } else {
                x.matmul(&w.t()?)?
            };
            let got = mm.forward(&x.to_device(&dev)?)?;
            assert_gpu_close(&got, &want, 1e-4, &format!("{dtype:?} mat-vec n {n}"))?;
        }
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

#[test]
#[ignore = "needs a HIP device"]
fn q8_1_has_no_kernel_and_strict_mode_says_so() -> Result<()> {
    let (cpu, q) = weights(GgmlDType::Q8_1, 2, 64, 9)?;
    assert_eq!(q.data()?.as_ref(), cpu.data()?.as_ref());
    match q.dequantize(&q.device()) {
        // Strict mode (the harness): the host path is refused with the typed error.
        Err(e) if candle_rocm::strict() => {
            let msg = root_cause(&e).to_string();
            assert!(
                msg.contains("dequantize") && msg.contains("CANDLE_ROCM_STRICT"),
                "{msg}"
            );
        }
        Err(e) => return Err(e),
        Ok(got) => {
            assert!(!candle_rocm::strict());
            assert_close(
                &got.to_device(&Device::Cpu)?,
                &cpu.dequantize(&Device::Cpu)?,
                1e-6,
                "q8_1 dequantize on the host",
            )?;
        }
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
