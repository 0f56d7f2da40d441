//! Quantized tensors on the slot: `QStorage::Ext` through ext-cpu's own dequantize and the
//! trait's defaults (dequantize_f16, embedding, matmul), the CPU fallback of a host QTensor
//! and of the default dequantize, and a quantized view with an offset.

use candle_core::quantized::{GgmlDType, QMatMul, QStorage, QTensor};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_ext_cpu::{ext_cpu_device, ExtCpuDevice, LOCATION};
use candle_rocm_tests::{assert_close, max_abs_diff, GGML_TYPES_BUT_Q8_1};

use super::{ext, indices, input};

#[test]
fn quantized_storage_and_dequantization() -> Result<()> {
    let (n, k) = (6, 512);
    for dt in GGML_TYPES_BUT_Q8_1 {
        let dev = ext_cpu_device();
        let w_cpu = input(&Device::Cpu, 38, &[n, k])?;
        let q_cpu = QTensor::quantize(&w_cpu, dt)?;
        let want = q_cpu.dequantize(&Device::Cpu)?;

        // Quantized on the device (the slot quantizes on the host and loads the blocks).
        let q_ext = QTensor::quantize(&w_cpu.to_device(&dev)?, dt)?;
        assert_eq!(q_ext.device().location(), LOCATION, "{dt:?}");
        assert_eq!(q_ext.dtype(), dt);
        assert_eq!(q_ext.shape().dims(), [n, k]);
        assert_eq!(q_ext.storage_size_in_bytes(), q_cpu.storage_size_in_bytes());
        assert!(q_ext.data()? == q_cpu.data()?, "{dt:?}: blocks differ");

        // The same blocks loaded from bytes.
        let storage = QStorage::from_data(q_cpu.data()?, &dev, dt)?;
        let q_loaded = QTensor::new(storage, (n, k))?;
        assert!(
            q_loaded.data()? == q_cpu.data()?,
            "{dt:?}: loaded blocks differ"
        );

        for q in [&q_ext, &q_loaded] {
            let got = q.dequantize(&dev)?;
            assert_eq!(got.device().location(), LOCATION);
            assert_eq!(max_abs_diff(&got.to_device(&Device::Cpu)?, &want)?, 0.0);
            // Straight to the CPU from the device's blocks.
            let host = q.dequantize(&Device::Cpu)?;
            assert!(host.device().is_cpu());
            assert_eq!(max_abs_diff(&host, &want)?, 0.0);
            let h = q.dequantize_f16(&dev)?;
            assert_eq!((h.dtype(), h.device().location()), (DType::F16, LOCATION));
            assert_eq!(
                max_abs_diff(
                    &h.to_device(&Device::Cpu)?,
                    &q_cpu.dequantize_f16(&Device::Cpu)?
                )?,
                0.0,
                "{dt:?}: dequantize_f16"
            );
        }
        // All through the backend's own dequantize, none through the CPU fallback.
        assert_eq!(ext(&dev).fallbacks(), Vec::<String>::new(), "{dt:?}");
        assert!(ext(&dev).dequantized() >= 4, "{dt:?}");
    }
    Ok(())
}

#[test]
fn quantized_matmul_and_embedding() -> Result<()> {
    let (n, k) = (8, 256);
    for dt in GGML_TYPES_BUT_Q8_1 {
        let dev = ext_cpu_device();
        let w_cpu = input(&Device::Cpu, 39, &[n, k])?;
        let q_ext = QTensor::quantize(&w_cpu.to_device(&dev)?, dt)?;
        let w_deq = QTensor::quantize(&w_cpu, dt)?.dequantize(&Device::Cpu)?;
        // The quantized path for every block type (`from_qtensor` would dequantize F32, F16
        // and BF16 blocks into a plain tensor).
        let q_ext = std::sync::Arc::new(q_ext);
        let mm = QMatMul::QTensor(q_ext.clone());

        for (shape, dtype, tol) in [
            (&[3, k][..], DType::F32, 1e-5),
            (&[2, 5, k][..], DType::F32, 1e-5),
            (&[1, 2, 3, k][..], DType::F32, 1e-5),
            (&[4, k][..], DType::F16, 2e-2),
            (&[4, k][..], DType::BF16, 1e-1),
        ] {
            let x_cpu = input(&Device::Cpu, 40, shape)?.to_dtype(dtype)?;
            let got = mm.forward(&x_cpu.to_device(&dev)?)?;
            assert_eq!(
                (got.device().location(), got.dtype()),
                (LOCATION, dtype),
                "{dt:?} {shape:?}"
            );
            // The default `matmul_t` multiplies by the dequantized weights (the CPU would
            // quantize the activations as well): compare with that.
            let want = x_cpu.to_dtype(DType::F32)?.broadcast_matmul(&w_deq.t()?)?;
            assert_close(
                &got.to_device(&Device::Cpu)?.to_dtype(DType::F32)?,
                &want,
                tol * (k as f64).sqrt(),
                &format!("qmatmul {dt:?} {shape:?} {dtype:?}"),
            )?;
        }

        // The default `matmul_t_swiglu` has no fused form: `forward_swiglu_fused` answers None
        // (the model then runs the product and the gate), queueing nothing.
        let x1 = input(&Device::Cpu, 42, &[1, k])?.to_device(&dev)?;
        assert!(mm.forward_swiglu_fused(&x1)?.is_none(), "{dt:?}");

        // Embedding rows of the quantized table (ids of any integer dtype, from any device).
        let q = q_ext;
        let ids = indices(&Device::Cpu, 41, &[2, 3], n as u32)?;
        for ids in [ids.to_device(&dev)?, ids.to_dtype(DType::I64)?] {
            let got = q.embedding(&ids)?;
            assert_eq!(got.device().location(), LOCATION);
            assert_eq!(got.dims(), [2, 3, k]);
            let want = w_deq
                .index_select(&ids.to_device(&Device::Cpu)?.flatten_all()?, 0)?
                .reshape((2, 3, k))?;
            assert_eq!(max_abs_diff(&got.to_device(&Device::Cpu)?, &want)?, 0.0);
        }
        assert_eq!(ext(&dev).fallbacks(), Vec::<String>::new(), "{dt:?}");
    }
    Ok(())
}

#[test]
fn cpu_qtensor_on_ext_activations_falls_back() -> Result<()> {
    // Blocks on the CPU, activations on the device: `QTensor::ext_fwd` declines and the op runs
    // on a host copy (the CPU's own quantized kernel), the result back on the device.
    let dev = ext_cpu_device();
    let w = input(&Device::Cpu, 42, &[8, 64])?;
    let mm = QMatMul::from_qtensor(QTensor::quantize(&w, GgmlDType::Q8_0)?)?;
    let x = input(&Device::Cpu, 43, &[3, 64])?;
    let got = mm.forward(&x.to_device(&dev)?)?;
    assert_eq!(got.device().location(), LOCATION);
    assert_eq!(
        max_abs_diff(&got.to_device(&Device::Cpu)?, &mm.forward(&x)?)?,
        0.0
    );
    assert_eq!(ext(&dev).fallbacks(), ["qmatmul"]);
    Ok(())
}

#[test]
fn default_dequantize_goes_through_the_cpu_fallback() -> Result<()> {
    let (n, k) = (4, 256);
    let w = input(&Device::Cpu, 44, &[n, k])?;
    let q_cpu = QTensor::quantize(&w, GgmlDType::Q4K)?;
    let want = q_cpu.dequantize(&Device::Cpu)?;

    // Allowed: the trait's default dequantizes on the host after asking the device.
    let dev = Device::new_ext(ExtCpuDevice::with_options(false, true));
    let q = QTensor::quantize(&w.to_device(&dev)?, GgmlDType::Q4K)?;
    let got = q.dequantize(&dev)?;
    assert_eq!(got.device().location(), LOCATION);
    assert_eq!(max_abs_diff(&got.to_device(&Device::Cpu)?, &want)?, 0.0);
    let x = input(&Device::Cpu, 45, &[2, k])?;
    let y = QMatMul::QTensor(std::sync::Arc::new(q)).forward(&x.to_device(&dev)?)?;
    assert_close(
        &y.to_device(&Device::Cpu)?,
        &x.matmul(&want.t()?)?,
        1e-5 * (k as f64).sqrt(),
        "qmatmul over the default dequantize",
    )?;
    assert_eq!(ext(&dev).fallbacks(), ["dequantize", "dequantize"]);
    assert_eq!(ext(&dev).dequantized(), 0);

    // Strict: refused, with the op named.
    let dev = Device::new_ext(ExtCpuDevice::with_options(true, true));
    let q = QTensor::quantize(&w.to_device(&dev)?, GgmlDType::Q4K)?;
    let e = q.dequantize(&dev).expect_err("strict: no host dequantize");
    assert!(e.to_string().contains("dequantize"), "{e}");
    assert!(q.embedding(&Tensor::new(&[1u32], &dev)?).is_err());
    Ok(())
}

/// `QTensor::quantize` of a view with an offset (a row range of a weight) on an `Ext` device:
/// the slot hands the whole underlying storage over, so it must refuse (a typed error naming
/// the fix) rather than quantize row 0's values; the CPU panics in k_quants instead.
#[test]
fn quantize_a_view_with_an_offset() -> Result<()> {
    let dev = ext_cpu_device();
    let rows = input(&Device::Cpu, 49, &[3, 64])?;
    let row = Tensor::new(rows.narrow(0, 1, 1)?.to_vec2::<f32>()?, &Device::Cpu)?;
    let want = QTensor::quantize(&row, GgmlDType::Q8_0)?;
    let view = rows.to_device(&dev)?.narrow(0, 1, 1)?;
    // An error would do as well; wrong blocks would not.
    match QTensor::quantize(&view, GgmlDType::Q8_0) {
        Ok(got) => {
            assert_eq!(got.storage_size_in_bytes(), want.storage_size_in_bytes());
            assert!(got.data()? == want.data()?, "blocks of another row");
        }
        Err(e) => assert!(e.to_string().contains("force_contiguous()"), "{e}"),
    }
    // A storage of its own quantizes to the row's own blocks.
    let got = QTensor::quantize(&view.force_contiguous()?, GgmlDType::Q8_0)?;
    assert!(got.data()? == want.data()?, "blocks of another row");
    Ok(())
}
