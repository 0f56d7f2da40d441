//! candle-core's `cat` on the GPU, which reaches candle-rocm's batched copy (one launch for up
//! to 8 inputs, `candle_rocm::launch::copy`) through the slot's `copy2d_many` hook, against the same
//! `cat` on the CPU, bit for bit, in every dtype: a grouped-query `repeat_kv` (one tensor 8
//! times), 12 inputs (two launches), a KV-cache append, narrowed inputs with row strides and
//! start offsets, an empty input among others, and a transposed input (which takes candle's
//! strided path instead).

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm_tests::{gpu, host_pair, max_abs_diff, normal, rng, STORED};

/// The cats under test, on one device; `t` are the inputs of [`inputs`].
fn cats(t: &[Tensor]) -> Result<Vec<(&'static str, Tensor)>> {
    let (kv, new, wide, empty) = (&t[0], &t[1], &t[2], &t[3]);
    Ok(vec![
        (
            "repeat_kv",
            Tensor::cat(&[kv; 8], 2)?.reshape((1, 32, 5, 16))?,
        ),
        ("12 inputs", Tensor::cat(&[new; 12], 2)?),
        ("kv append", Tensor::cat(&[kv, new], 2)?),
        (
            "narrowed",
            Tensor::cat(&[&wide.narrow(1, 2, 5)?, &wide.narrow(1, 0, 3)?], 1)?,
        ),
        (
            "narrowed last dim",
            Tensor::cat(&[&wide.narrow(2, 1, 4)?, &wide.narrow(2, 0, 2)?, wide], 2)?,
        ),
        ("empty input", Tensor::cat(&[kv, empty, new], 2)?),
        ("transposed", Tensor::cat(&[&wide.t()?, &wide.t()?], 1)?),
    ])
}

/// (cpu, gpu) inputs of `dtype`: a (1, 4, 5, 16) cache, a (1, 4, 1, 16) step, a (3, 10, 7)
/// tensor and a (1, 4, 0, 16) empty one.
fn inputs(dtype: DType, dev: &Device) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let mut cpu = vec![];
    let mut gpu = vec![];
    for (seed, shape) in [
        (1u64, vec![1, 4, 5, 16]),
        (2, vec![1, 4, 1, 16]),
        (3, vec![3, 10, 7]),
        (4, vec![1, 4, 0, 16]),
    ] {
        let n = shape.iter().product();
        // Values 0..=100 in steps of 0.25: exact in every float dtype, fit every integer one.
        let v = normal(&mut rng(seed), n, 30.0)
            .into_iter()
            .map(|x| (x.abs() * 4.0).round().min(400.0) / 4.0)
            .collect();
        let (c, g) = host_pair(v, shape, dtype, dev)?;
        cpu.push(c);
        gpu.push(g);
    }
    Ok((cpu, gpu))
}

#[test]
#[ignore = "needs a HIP device"]
fn cat_matches_the_cpu_in_every_dtype() -> Result<()> {
    let dev = gpu()?;
    for dtype in STORED {
        let (cpu, on_gpu) = inputs(dtype, &dev)?;
        let want = cats(&cpu)?;
        let got = cats(&on_gpu)?;
        for ((what, w), (_, g)) in want.iter().zip(&got) {
            assert_eq!(g.dims(), w.dims(), "{what} {dtype:?}: shape");
            assert_eq!(g.dtype(), dtype, "{what} {dtype:?}: dtype");
            // Compared in f32 (every value is exact there); f8e4m3 through f32 on each side.
            let (g, w) = (
                g.to_device(&Device::Cpu)?.to_dtype(DType::F32)?,
                w.to_dtype(DType::F32)?,
            );
            let diff = max_abs_diff(&g, &w)?;
            assert!(diff == 0.0, "{what} {dtype:?}: max |gpu - cpu| = {diff}");
        }
    }
    Ok(())
}
