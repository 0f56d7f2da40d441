//! `Tensor::to_device` between two ROCm devices (issue 29): a device-to-device copy (peer to
//! peer, or staged through pinned host memory), never a round trip through a CPU tensor, in
//! both directions, for f32, f16 and bf16, from one element to 64 MiB, for views with an
//! offset and for strided sources (transposed, and made contiguous on the source device
//! first), each compared with the host values.
//!
//! Needs two GPUs and is `#[ignore]`d; the HIP-on-CUDA harness runs it (strict mode) where it
//! sees two, and skips it with a row where it sees one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType, Device, Result, Tensor};

fn two() -> Result<[Device; 2]> {
    assert!(candle_rocm::strict(), "GPU tests run in strict mode");
    Ok([
        candle_rocm::device(0).map_err(candle_core::Error::wrap)?,
        candle_rocm::device(1).map_err(candle_core::Error::wrap)?,
    ])
}

/// Host values of `n` elements of `dtype`, exact in every one of them.
fn host(n: usize, dtype: DType) -> Result<Tensor> {
    let v: Vec<f32> = (0..n).map(|i| (i % 251) as f32 - 125.0).collect();
    Tensor::from_vec(v, n, &Device::Cpu)?.to_dtype(dtype)
}

fn same(got: &Tensor, want: &Tensor, what: &str) -> Result<()> {
    assert!(!got.device().is_cpu(), "{what}: landed on the CPU");
    let got = got
        .to_device(&Device::Cpu)?
        .to_dtype(DType::F32)?
        .flatten_all()?;
    let want = want.to_dtype(DType::F32)?.flatten_all()?;
    assert_eq!(got.to_vec1::<f32>()?, want.to_vec1::<f32>()?, "{what}");
    Ok(())
}

#[test]
#[ignore = "needs 2 HIP devices"]
fn to_device_between_two_gpus_every_size_and_dtype() -> Result<()> {
    let devs = two()?;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let size = dtype.size_in_bytes();
        for n in [1, 3, 1001, (8 << 20) / size + 5, (64 << 20) / size] {
            let h = host(n, dtype)?;
            for from in [0, 1] {
                let to = 1 - from;
                let what = format!("{dtype:?} x {n}, rocm:{from} -> rocm:{to}");
                let a = h.to_device(&devs[from])?;
                let b = a.to_device(&devs[to])?;
                assert!(b.device().same_device(&devs[to]), "{what}");
                same(&b, &h, &what)?;
                // A view with an offset: the layout travels, the values agree.
                if n > 8 {
                    let v = a.narrow(0, 3, n - 5)?.to_device(&devs[to])?;
                    same(&v, &h.narrow(0, 3, n - 5)?, &format!("{what}, offset view"))?;
                }
            }
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs 2 HIP devices"]
fn strided_sources_move_between_gpus() -> Result<()> {
    let devs = two()?;
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let h = host(37 * 53, dtype)?.reshape((37, 53))?;
        let want = h.t()?;
        for from in [0, 1] {
            let to = 1 - from;
            let src = h.to_device(&devs[from])?.t()?;
            // As is (the strided layout travels with the copied storage) ...
            let moved = src.to_device(&devs[to])?;
            same(
                &moved,
                &want,
                &format!("{dtype:?} transposed, {from} -> {to}"),
            )?;
            // ... and made contiguous on the source device first.
            let moved = src.contiguous()?.to_device(&devs[to])?;
            assert!(moved.is_contiguous());
            same(
                &moved,
                &want,
                &format!("{dtype:?} contiguous, {from} -> {to}"),
            )?;
            // And the result computes on its new device.
            let sum = moved.sum_all()?.to_dtype(DType::F32)?.to_scalar::<f32>()?;
            let want_sum = want.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
            assert!(
                (sum - want_sum).abs() <= want_sum.abs() * 1e-2 + 1.0,
                "{sum} vs {want_sum}"
            );
        }
    }
    Ok(())
}
