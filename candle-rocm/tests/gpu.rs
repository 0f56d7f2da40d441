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
