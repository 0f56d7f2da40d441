//! Candle's own kernels on a real device through the kernel registry. Ignored in CI (no GPU);
//! the HIP-on-CUDA harness runs them with `CANDLE_ROCM_KERNELS_DIR` pointing at candle-kernels'
//! sources compiled by nvcc.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_rocm::registry::KernelRegistry;
use candle_rocm_kernels::Module;
use rocm_safe::{Device, DevicePtrArg, LaunchConfig, Stream};

fn device() -> Device {
    Device::new(0).unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"))
}

#[test]
#[ignore = "needs a HIP device"]
fn every_module_loads_once_and_is_shared() {
    let reg = KernelRegistry::new(device());
    for m in Module::ALL {
        reg.module(m)
            .unwrap_or_else(|e| panic!("module {} failed to load: {e}", m.name()));
    }
    // Loaded once: a second lookup from other threads returns the same module.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let reg = reg.clone();
            std::thread::spawn(move || reg.function(Module::Affine, "affine_f32").is_ok())
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap());
    }
    let e = reg
        .function(Module::Affine, "affine_no_such_dtype")
        .unwrap_err();
    assert!(e.to_string().contains("affine"), "{e}");
}

#[test]
#[ignore = "needs a HIP device"]
fn candle_affine_f32_contiguous_and_strided() {
    let dev = device();
    let reg = KernelRegistry::new(dev.clone());
    let s = Stream::new(&dev).unwrap();
    let f = reg.function(Module::Affine, "affine_f32").unwrap();
    let (rows, cols) = (37usize, 129usize);
    let n = rows * cols;
    let host: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
    let inp = s.clone_htod(&host).unwrap();
    let (mul, add) = (1.5f32, -0.25f32);
    let cfg = LaunchConfig::for_num_elems(n as u32, 256);

    // Contiguous: `info` is null.
    let out = s.alloc::<f32>(n).unwrap();
    let (pi, po, null) = (inp.as_arg(), out.as_arg(), DevicePtrArg::null());
    let (numel, ndims) = (n, 2usize);
    let mut l = s.launch_builder(&f);
    l.arg(&numel)
        .arg(&ndims)
        .arg(&null)
        .arg(&pi)
        .arg(&po)
        .arg(&mul)
        .arg(&add);
    // SAFETY: affine_f32(size_t numel, size_t num_dims, const size_t* info, const float* inp,
    // float* out, float mul, float add); both buffers hold n floats on stream `s`.
    unsafe { l.launch(cfg).unwrap() };
    let got = s.clone_dtoh(&out).unwrap();
    for i in 0..n {
        let want = host[i] * mul + add;
        assert!((got[i] - want).abs() <= 1e-6 * (1.0 + want.abs()), "{i}");
    }

    // Strided: read the input as its transpose (dims [cols, rows], strides [1, cols]).
    let info = s.clone_htod(&[cols, rows, 1usize, cols]).unwrap();
    let pinfo = info.as_arg();
    let mut l = s.launch_builder(&f);
    l.arg(&numel)
        .arg(&ndims)
        .arg(&pinfo)
        .arg(&pi)
        .arg(&po)
        .arg(&mul)
        .arg(&add);
    // SAFETY: as above; `info` holds 2 * num_dims size_t values.
    unsafe { l.launch(cfg).unwrap() };
    let got = s.clone_dtoh(&out).unwrap();
    for c in 0..cols {
        for r in 0..rows {
            let want = host[r * cols + c] * mul + add;
            let g = got[c * rows + r];
            assert!((g - want).abs() <= 1e-6 * (1.0 + want.abs()), "({c}, {r})");
        }
    }
    drop(out);
    dev.check_err().unwrap();
}

/// Host reference of `kernels/hip/rand.hip`: Philox4x32-10 of (block, offset) under `seed`.
fn philox(block: u64, offset: u64, seed: u64) -> [u32; 4] {
    let (mut c0, mut c1) = (block as u32, (block >> 32) as u32);
    let (mut c2, mut c3) = (offset as u32, (offset >> 32) as u32);
    let (mut k0, mut k1) = (seed as u32, (seed >> 32) as u32);
    for _ in 0..10 {
        let p0 = 0xD251_1F53u64 * c0 as u64;
        let p1 = 0xCD9E_8D57u64 * c2 as u64;
        let (n0, n2) = ((p1 >> 32) as u32 ^ c1 ^ k0, (p0 >> 32) as u32 ^ c3 ^ k1);
        (c0, c1, c2, c3) = (n0, p1 as u32, n2, p0 as u32);
        k0 = k0.wrapping_add(0x9E37_79B9);
        k1 = k1.wrapping_add(0xBB67_AE85);
    }
    [c0, c1, c2, c3]
}

fn launch_rand<T: rocm_safe::DeviceRepr, P: rocm_safe::DeviceRepr>(
    reg: &KernelRegistry,
    s: &std::sync::Arc<Stream>,
    name: &str,
    n: usize,
    per_thread: usize,
    (seed, offset): (u64, u64),
    (a, b): (P, P),
) -> Vec<T> {
    let f = reg.function(Module::Rand, name).unwrap();
    let out = s.alloc::<T>(n).unwrap();
    let po = out.as_arg();
    let n64 = n as u64;
    let mut l = s.launch_builder(&f);
    l.arg(&po).arg(&n64).arg(&seed).arg(&offset).arg(&a).arg(&b);
    let threads = n.div_ceil(per_thread) as u32;
    // SAFETY: rand_*(T* out, u64 n, u64 seed, u64 offset, P a, P b); `out` holds n elements
    // and each thread writes at most `per_thread` of them, bounds-checked against n.
    unsafe { l.launch(LaunchConfig::for_num_elems(threads, 256)).unwrap() };
    s.clone_dtoh(&out).unwrap()
}

#[test]
#[ignore = "needs a HIP device"]
fn rand_matches_the_host_reference_and_is_reproducible() {
    let dev = device();
    let reg = KernelRegistry::new(dev.clone());
    let s = Stream::new(&dev).unwrap();
    let (seed, offset, n) = (0x1234_5678_9abc_def0u64, 7u64, 10_001usize);
    let u24 = |w: u32| (w >> 8) as f32 * (1.0 / 16_777_216.0);

    // f32 uniform in [lo, hi): bit-exact against the host.
    let (lo, hi) = (-2.0f32, 3.0f32);
    let got: Vec<f32> = launch_rand(&reg, &s, "rand_uniform_f32", n, 4, (seed, offset), (lo, hi));
    for (i, g) in got.iter().enumerate() {
        let w = philox((i / 4) as u64, offset, seed)[i % 4];
        assert_eq!(*g, (hi - lo).mul_add(u24(w), lo), "element {i}");
        assert!(*g >= lo && *g < hi);
    }
    let again: Vec<f32> = launch_rand(&reg, &s, "rand_uniform_f32", n, 4, (seed, offset), (lo, hi));
    assert_eq!(got, again, "same seed and offset, same numbers");
    let other: Vec<f32> = launch_rand(
        &reg,
        &s,
        "rand_uniform_f32",
        n,
        4,
        (seed, offset + 1),
        (lo, hi),
    );
    assert_ne!(got, other, "another offset, other numbers");

    // f64 uniform: 53-bit, bit-exact.
    let got: Vec<f64> = launch_rand(
        &reg,
        &s,
        "rand_uniform_f64",
        n,
        2,
        (seed, offset),
        (0.0f64, 1.0f64),
    );
    for (i, g) in got.iter().enumerate() {
        let r = philox((i / 2) as u64, offset, seed);
        let (a, b) = (r[2 * (i % 2)], r[2 * (i % 2) + 1]);
        let v = ((a as u64) << 21) ^ (b as u64 >> 11);
        assert_eq!(*g, v as f64 / 9_007_199_254_740_992.0, "element {i}");
    }

    // f32 normal (Box-Muller): within float rounding of the host, and the moments are right.
    let (mean, std) = (1.5f32, 2.0f32);
    let got: Vec<f32> = launch_rand(
        &reg,
        &s,
        "rand_normal_f32",
        n,
        4,
        (seed, offset),
        (mean, std),
    );
    for (i, g) in got.iter().enumerate() {
        let r = philox((i / 4) as u64, offset, seed);
        let p = (i % 4) / 2;
        let u1 = ((r[2 * p] >> 8) as f64 + 1.0) / 16_777_216.0;
        let u2 = (r[2 * p + 1] >> 8) as f64 / 16_777_216.0;
        let rad = (-2.0 * u1.ln()).sqrt();
        let z = if i % 2 == 0 {
            rad * (std::f64::consts::TAU * u2).cos()
        } else {
            rad * (std::f64::consts::TAU * u2).sin()
        };
        let want = mean as f64 + std as f64 * z;
        assert!(
            (*g as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
            "element {i}: {g} vs {want}"
        );
    }
    let m = got.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    let var = got.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / n as f64;
    assert!(
        (m - 1.5).abs() < 0.1 && (var.sqrt() - 2.0).abs() < 0.1,
        "mean {m}, std {}",
        var.sqrt()
    );

    // bf16 uniform: the f32 value rounded to bf16.
    let got: Vec<half::bf16> = launch_rand(
        &reg,
        &s,
        "rand_uniform_bf16",
        n,
        4,
        (seed, offset),
        (0.0f32, 1.0f32),
    );
    for (i, g) in got.iter().enumerate() {
        let w = philox((i / 4) as u64, offset, seed)[i % 4];
        assert_eq!(*g, half::bf16::from_f32(u24(w)), "element {i}");
    }
}
