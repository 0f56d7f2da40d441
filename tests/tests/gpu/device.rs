//! The `Device` handle: identity, location, mixing devices, copies both ways for every dtype
//! the backend stores, tensors made on the device, and how a GPU tensor prints.

use candle_core::{DType, Device, DeviceLocation, Error, Result, Tensor};
use candle_rocm_tests::{gpu, host_pair, max_abs_diff, normal, rng, root_cause, to_f64, STORED};

const ROCM0: DeviceLocation = DeviceLocation::Ext {
    backend: "rocm",
    ordinal: 0,
};

#[test]
#[ignore = "needs a HIP device"]
fn one_device_per_ordinal() -> Result<()> {
    let a = gpu()?;
    let b = candle_rocm::device(0).map_err(Error::wrap)?;
    assert!(
        a.same_device(&b),
        "two handles for ordinal 0 are not the same device"
    );
    assert!(!a.same_device(&Device::Cpu));
    assert!(a.is_ext() && !a.is_cpu() && !a.is_cuda() && !a.is_metal());
    // A tensor made through one handle works with one made through the other.
    let x = Tensor::ones(4, DType::F32, &a)?;
    let y = Tensor::ones(4, DType::F32, &b)?;
    assert_eq!((x + y)?.to_vec1::<f32>()?, [2.0; 4]);
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn location_is_rocm_0() -> Result<()> {
    let dev = gpu()?;
    assert_eq!(dev.location(), ROCM0);
    assert_eq!(dev.location().to_string(), "rocm:0");
    assert_eq!(candle_rocm::BACKEND_NAME, "rocm");
    let t = Tensor::zeros(3, DType::F32, &dev)?;
    assert_eq!(t.device().location(), ROCM0);
    Ok(())
}

/// The locations of a device-mismatch error, or a failure naming what came instead.
fn mismatch(r: Result<Tensor>, what: &str) -> (DeviceLocation, DeviceLocation) {
    let e = r.expect_err(what);
    match root_cause(&e) {
        Error::DeviceMismatchBinaryOp { lhs, rhs, .. } => (*lhs, *rhs),
        other => panic!("{what}: expected DeviceMismatchBinaryOp, got {other}"),
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn mixing_cpu_and_gpu_is_an_error() -> Result<()> {
    let dev = gpu()?;
    let (c, g) = host_pair(vec![1.0, 2.0, 3.0, 4.0], (2, 2), DType::F32, &dev)?;
    let cpu = DeviceLocation::Cpu;
    assert_eq!(mismatch(c.add(&g), "cpu + gpu"), (cpu, ROCM0));
    assert_eq!(mismatch(g.add(&c), "gpu + cpu"), (ROCM0, cpu));
    assert_eq!(mismatch(g.mul(&c), "gpu * cpu"), (ROCM0, cpu));
    assert_eq!(mismatch(g.matmul(&c), "gpu matmul cpu"), (ROCM0, cpu));
    assert_eq!(mismatch(c.matmul(&g), "cpu matmul gpu"), (cpu, ROCM0));
    // Both tensors are still fine.
    assert_eq!((&g + &g)?.to_vec2::<f32>()?, [[2.0, 4.0], [6.0, 8.0]]);
    assert_eq!((&c + &c)?.to_vec2::<f32>()?, [[2.0, 4.0], [6.0, 8.0]]);
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn to_device_round_trip_is_exact() -> Result<()> {
    let dev = gpu()?;
    let mut r = rng(31);
    for dtype in STORED {
        // Values the dtype holds: small non-negative integers for the integer types, spread-out
        // floats otherwise, converted to the dtype on the CPU.
        let values = normal(&mut r, 3 * 1001, 30.0)
            .into_iter()
            .map(|v| {
                if dtype.is_int() {
                    v.abs().round().min(255.0)
                } else {
                    v
                }
            })
            .collect();
        let (cpu, _) = host_pair(values, (3, 1001), dtype, &Device::Cpu)?;
        let on_gpu = cpu.to_device(&dev)?;
        assert_eq!(on_gpu.device().location(), ROCM0);
        assert_eq!(on_gpu.dtype(), dtype);
        assert_eq!(on_gpu.dims(), cpu.dims());
        let back = on_gpu.to_device(&Device::Cpu)?;
        assert!(back.device().is_cpu());
        assert_eq!(back.dtype(), dtype);
        let diff = max_abs_diff(&back, &cpu)?;
        assert!(
            diff == 0.0,
            "{dtype:?}: CPU -> GPU -> CPU changed values by {diff:e}"
        );
        // A strided view goes through the device's strided copy.
        let t = on_gpu.t()?.to_device(&Device::Cpu)?;
        let diff = max_abs_diff(&t, &cpu.t()?)?;
        assert!(
            diff == 0.0,
            "{dtype:?}: transposed copy back differs by {diff:e}"
        );
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn zeros_ones_and_random_on_the_device() -> Result<()> {
    let dev = gpu()?;
    for dtype in STORED {
        for (what, t, want) in [
            ("zeros", Tensor::zeros((7, 129), dtype, &dev)?, 0.0),
            ("ones", Tensor::ones((7, 129), dtype, &dev)?, 1.0),
        ] {
            assert_eq!(t.device().location(), ROCM0, "{what} {dtype:?}");
            assert_eq!(t.dtype(), dtype, "{what} {dtype:?}");
            let host = to_f64(&t.to_device(&Device::Cpu)?)?
                .flatten_all()?
                .to_vec1::<f64>()?;
            assert!(
                host.iter().all(|&v| v == want),
                "{what} {dtype:?}: {host:?}"
            );
        }
    }
    let n = 1 << 16;
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let shape = Tensor::zeros((n,), dtype, &dev)?;
        let u = shape.rand_like(-2.0, 3.0)?;
        let z = shape.randn_like(1.5, 2.0)?;
        for t in [&u, &z] {
            assert_eq!(t.device().location(), ROCM0);
            assert_eq!(t.dtype(), dtype);
        }
        let u = u.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        let z = z.to_dtype(DType::F64)?.to_vec1::<f64>()?;
        // Values just below 3 may round to 3 in the narrower dtypes.
        assert!(
            u.iter().all(|v| (-2.0..=3.0).contains(v)),
            "{dtype:?}: uniform out of range"
        );
        let stats = |v: &[f64]| {
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
            (mean, var.sqrt())
        };
        // Uniform on [-2, 3): mean 0.5, std 5 / sqrt(12); normal: mean 1.5, std 2. The
        // bounds are many standard errors wide (std / sqrt(65536) is under 0.01).
        let (mu, su) = stats(&u);
        let (mz, sz) = stats(&z);
        assert!(
            (mu - 0.5).abs() < 0.05 && (su - 5.0 / 12f64.sqrt()).abs() < 0.05,
            "{dtype:?} uniform: mean {mu}, std {su}"
        );
        assert!(
            (mz - 1.5).abs() < 0.06 && (sz - 2.0).abs() < 0.06,
            "{dtype:?} normal: mean {mz}, std {sz}"
        );
        assert!(
            u.windows(2).any(|w| w[0] != w[1]),
            "{dtype:?}: constant uniform draw"
        );
    }
    // The device's generator follows set_seed: the same seed gives the same values. (No other
    // test of this binary draws on the device, so nothing moves the sequence in between.)
    let draw = |seed| -> Result<Vec<f32>> {
        dev.set_seed(seed)?;
        Tensor::rand(0f32, 1f32, 1000, &dev)?.to_vec1::<f32>()
    };
    let (a, b, c) = (draw(5)?, draw(6)?, draw(5)?);
    assert_eq!(a, c, "set_seed(5) twice gave different values");
    assert_ne!(a, b, "seeds 5 and 6 gave the same values");
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn display_names_the_device() -> Result<()> {
    let dev = gpu()?;
    let t = Tensor::new(&[[1f32, 2.0], [3.0, 4.0]], &dev)?;
    let shown = format!("{t}");
    assert!(shown.contains("rocm:0"), "{shown}");
    assert!(shown.contains("f32") && shown.contains('4'), "{shown}");
    let debug = format!("{t:?}");
    assert!(!debug.is_empty());
    Ok(())
}
