//! rocm-safe on a real HIP device. Ignored in CI (no GPU); the HIP-on-CUDA harness runs them
//! with `--include-ignored`, where a missing device is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use half::{bf16, f16};
use rocm_safe::allocator::DeviceMemory;
use rocm_safe::{
    BlasHandle, CachingAllocator, Device, DeviceBuffer, Event, GemmConfig, GemmType, LaunchConfig,
    Module, PinnedHostBuffer, RocmError, Stream, Transpose,
};

const NEEDS: &str = "needs a HIP device";

fn device() -> Device {
    Device::new(0).unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"))
}

fn stream() -> Arc<Stream> {
    Stream::new(&device()).unwrap()
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

#[test]
#[ignore = "needs a HIP device"]
fn device_properties_are_sane() {
    let d = device();
    let i = d.info();
    assert!(i.warp_size == 32 || i.warp_size == 64, "{i:?}");
    assert!(
        i.compute_units > 0 && i.total_mem > 0 && i.max_threads_per_block >= 256,
        "{i:?}"
    );
    assert!(!i.arch.processor.is_empty() && !i.name.is_empty(), "{i:?}");
    let (free, total) = d.mem_info().unwrap();
    assert!(free <= total && total > 0);
    let count = Device::count().unwrap();
    match Device::new(count) {
        Err(RocmError::InvalidDevice { ordinal, count: c }) => {
            assert_eq!((ordinal, c), (count, count))
        }
        other => panic!("{NEEDS}: expected InvalidDevice, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn round_trips_direct_and_cached() {
    let s = stream();
    let host = values(100_003, 1);
    let mut direct = DeviceBuffer::<f32>::alloc(&s, host.len()).unwrap();
    s.memcpy_htod(&host, &mut direct).unwrap();
    assert_eq!(s.clone_dtoh(&direct).unwrap(), host);
    let cached = s.clone_htod(&host).unwrap();
    let mut back = vec![0f32; host.len()];
    s.memcpy_dtoh(&cached, &mut back).unwrap();
    assert_eq!(back, host);
    let empty = s.clone_htod::<f32>(&[]).unwrap();
    assert!(s.clone_dtoh(&empty).unwrap().is_empty());
}

#[test]
#[ignore = "needs a HIP device"]
fn uploads_without_waiting_keep_their_data() {
    let s = stream();
    // Many small uploads queued behind one large copy, each from a Vec dropped by the caller
    // at once: every buffer must still receive its own values.
    let big = s.clone_htod(&values(1 << 22, 3)).unwrap();
    let mut sink = s.alloc::<f32>(1 << 22).unwrap();
    s.memcpy_dtod(&big, &mut sink).unwrap();
    let bufs: Vec<_> = (0..5000u32)
        .map(|i| s.upload(vec![i, i * 7, i ^ 0x5a5a]).unwrap())
        .collect();
    for (i, b) in bufs.iter().enumerate() {
        let i = i as u32;
        assert_eq!(s.clone_dtoh(b).unwrap(), [i, i * 7, i ^ 0x5a5a]);
    }
    assert!(s.upload(Vec::<u64>::new()).unwrap().is_empty());
}

#[test]
#[ignore = "needs a HIP device"]
fn dtod_and_sub_slices() {
    let s = stream();
    let host: Vec<u32> = (0..1000).collect();
    let src = s.clone_htod(&host).unwrap();
    let mut dst = s.alloc_zeros::<u32>(1000).unwrap();
    {
        let from = src.slice(100..200).unwrap();
        let mut to = dst.slice_mut(500..600).unwrap();
        s.memcpy_dtod(&from, &mut to).unwrap();
    }
    let out = s.clone_dtoh(&dst).unwrap();
    for (i, v) in out.iter().enumerate() {
        let want = if (500..600).contains(&i) {
            i as u32 - 400
        } else {
            0
        };
        assert_eq!(*v, want, "index {i}");
    }
    assert!(src.slice(999..1001).is_err());
    let mut short = s.alloc::<u32>(10).unwrap();
    assert!(matches!(
        s.memcpy_dtod(&src, &mut short),
        Err(RocmError::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs a HIP device"]
fn memset_widths() {
    let s = stream();
    let mut a = s.alloc::<u8>(1001).unwrap();
    s.memset(&mut a, 0xAB).unwrap();
    assert!(s.clone_dtoh(&a).unwrap().iter().all(|&v| v == 0xAB));
    let mut b = s.alloc::<f16>(777).unwrap();
    s.memset(&mut b, f16::from_f32(1.5)).unwrap();
    assert!(s
        .clone_dtoh(&b)
        .unwrap()
        .iter()
        .all(|&v| v == f16::from_f32(1.5)));
    let mut c = s.alloc::<f32>(12_345).unwrap();
    s.memset(&mut c, -2.25f32).unwrap();
    assert!(s.clone_dtoh(&c).unwrap().iter().all(|&v| v == -2.25));
    s.memset_zeros(&mut c).unwrap();
    assert!(s.clone_dtoh(&c).unwrap().iter().all(|&v| v == 0.0));
    let mut d = s.alloc::<f64>(4).unwrap();
    assert!(matches!(
        s.memset(&mut d, 1.0),
        Err(RocmError::Unsupported { .. })
    ));
}

#[test]
#[ignore = "needs a HIP device"]
fn events_time_and_order_streams() {
    let d = device();
    let s1 = Stream::new(&d).unwrap();
    let s2 = Stream::new(&d).unwrap();
    let start = Event::new(&d, true).unwrap();
    let end = Event::new(&d, true).unwrap();
    let host = values(1 << 22, 2);
    start.record(&s1).unwrap();
    let a = s1.clone_htod(&host).unwrap();
    end.record(&s1).unwrap();
    end.synchronize().unwrap();
    assert!(end.is_complete().unwrap());
    let ms = start.elapsed_ms(&end).unwrap();
    assert!(ms >= 0.0, "{ms}");
    // A copy on s2 of a buffer owned by s1 is ordered after s1's work.
    let mut b = DeviceBuffer::<f32>::alloc(&s2, host.len()).unwrap();
    s2.memcpy_dtod(&a, &mut b).unwrap();
    assert_eq!(s2.clone_dtoh(&b).unwrap(), host);
    let untimed = s2.record_event().unwrap();
    assert!(matches!(
        untimed.elapsed_ms(&end),
        Err(RocmError::InvalidArgument(_))
    ));
    s1.synchronize().unwrap();
    assert!(s1.is_idle().unwrap());
    d.check_err().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn two_threads_two_streams() {
    let d = device();
    let handles: Vec<_> = (0..2u64)
        .map(|t| {
            let d = d.clone();
            std::thread::spawn(move || {
                let s = Stream::new(&d).unwrap();
                for round in 0..20 {
                    let host = values(10_000 + round, t * 100 + round as u64);
                    let buf = s.clone_htod(&host).unwrap();
                    assert_eq!(s.clone_dtoh(&buf).unwrap(), host);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    d.check_err().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn allocator_reuses_and_returns_everything() {
    let d = device();
    let s = Stream::new(&d).unwrap();
    // A private allocator, so tests running in parallel do not disturb its counters.
    let alloc = Arc::new(CachingAllocator::new(DeviceMemory::new(
        d.runtime().clone(),
        d.ordinal(),
    )));
    let first = DeviceBuffer::<f32>::alloc_in(&alloc, &s, 1 << 20).unwrap();
    let addr = first.device_ptr();
    drop(first);
    let second = DeviceBuffer::<f32>::alloc_in(&alloc, &s, (1 << 20) - 7).unwrap();
    assert_eq!(
        second.device_ptr(),
        addr,
        "same bucket on the same stream is reused"
    );
    let st = alloc.stats();
    assert_eq!((st.hits, st.misses, st.raw_allocs), (1, 1, 1));
    assert_eq!(st.live_bytes, 4 << 20);
    drop(second);
    // Another stream does not get the block.
    let other = Stream::new(&d).unwrap();
    let third = DeviceBuffer::<f32>::alloc_in(&alloc, &other, 1 << 20).unwrap();
    assert_ne!(third.device_ptr(), addr);
    drop(third);
    let st = alloc.stats();
    assert_eq!((st.live_bytes, st.cached_bytes), (0, 8 << 20));
    assert_eq!(alloc.trim().unwrap(), 8 << 20);
    let st = alloc.stats();
    assert_eq!((st.cached_bytes, st.raw_frees), (0, st.raw_allocs));
    // The buffer API keeps an Arc to its allocator: a buffer outliving every other handle
    // still returns its block safely.
    let survivor = DeviceBuffer::<u8>::alloc_in(&alloc, &s, 10).unwrap();
    drop(alloc);
    drop(survivor);
    d.check_err().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn oversized_allocation_is_a_typed_error() {
    let s = stream();
    let total = s.device().info().total_mem;
    match s.alloc::<u8>(total * 4) {
        Err(RocmError::OutOfMemory {
            requested,
            total: t,
            ..
        }) => {
            assert_eq!(requested, total * 4);
            assert_eq!(t, total);
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    assert!(matches!(
        DeviceBuffer::<f32>::alloc(&s, total * 4),
        Err(RocmError::OutOfMemory { .. })
    ));
    // The device still works afterwards.
    assert_eq!(
        s.clone_dtoh(&s.clone_htod(&[1u8, 2, 3]).unwrap()).unwrap(),
        [1, 2, 3]
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn pinned_host_round_trip() {
    let d = device();
    let s = Stream::new(&d).unwrap();
    let mut pinned = PinnedHostBuffer::<f32>::new(&d, 4096).unwrap();
    assert!(pinned.iter().all(|&v| v == 0.0));
    pinned.copy_from_slice(&values(4096, 3));
    let buf = s.clone_htod(&pinned).unwrap();
    assert_eq!(s.clone_dtoh(&buf).unwrap(), &pinned[..]);
}

#[test]
#[ignore = "needs a HIP device"]
fn bad_modules_are_errors() {
    let d = device();
    assert!(matches!(
        Module::load(&d, &[]),
        Err(RocmError::InvalidArgument(_))
    ));
    let mut garbage = vec![0x5au8; 4096];
    garbage[4095] = 0; // a runtime that tries the bytes as text must not read past them
    assert!(matches!(Module::load(&d, &garbage), Err(RocmError::Hip(_))));
}

#[test]
#[ignore = "needs a HIP device"]
fn launch_axpy() {
    let path = std::env::var("ROCM_SAFE_TEST_MODULE").unwrap_or_else(|_| {
        panic!(
            "set ROCM_SAFE_TEST_MODULE to a code object built from rocm-safe/tests/kernels/test_kernels.hip"
        )
    });
    let image = std::fs::read(&path).unwrap();
    let d = device();
    let s = Stream::new(&d).unwrap();
    let module = Module::load(&d, &image).unwrap();
    assert!(matches!(
        module.function("no_such_kernel"),
        Err(RocmError::Hip(_))
    ));
    let f = module.function("axpy_f32").unwrap();
    assert!(f.max_threads_per_block().unwrap() >= 256);
    let n = 100_001u32;
    let x = values(n as usize, 4);
    let y = values(n as usize, 5);
    let dx = s.clone_htod(&x).unwrap();
    let dy = s.clone_htod(&y).unwrap();
    let (a, px, py) = (2.5f32, dx.as_arg(), dy.as_arg());
    let mut launch = s.launch_builder(&f);
    launch.arg(&a).arg(&px).arg(&py).arg(&n);
    // SAFETY: axpy_f32(float, const float*, float*, unsigned) matches the four arguments; both
    // buffers hold n elements and live on `s` until the synchronising copy below.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n, 256)).unwrap() };
    let zero = LaunchConfig {
        grid_dim: (0, 1, 1),
        ..LaunchConfig::for_num_elems(n, 256)
    };
    // SAFETY: an empty grid is rejected before reaching the runtime.
    let rejected = unsafe { launch.launch(zero) };
    assert!(matches!(rejected, Err(RocmError::InvalidArgument(_))));
    let out = s.clone_dtoh(&dy).unwrap();
    for i in 0..n as usize {
        // Compilers may contract a * x + y into one fused multiply-add: allow its rounding.
        let want = a * x[i] + y[i];
        assert!(
            (out[i] - want).abs() <= 1e-6 * (1.0 + want.abs()),
            "index {i}: {} vs {want}",
            out[i]
        );
    }
    dy.stream().synchronize().unwrap();
}

fn cpu_gemm(cfg: &GemmConfig, a: &[f64], b: &[f64], c: &mut [f64]) {
    for p in 0..cfg.batch {
        for j in 0..cfg.n {
            for i in 0..cfg.m {
                let mut acc = 0.0;
                for l in 0..cfg.k {
                    let av = match cfg.trans_a {
                        Transpose::No => a[p * cfg.stride_a + i + l * cfg.lda],
                        Transpose::Yes => a[p * cfg.stride_a + l + i * cfg.lda],
                    };
                    let bv = match cfg.trans_b {
                        Transpose::No => b[p * cfg.stride_b + l + j * cfg.ldb],
                        Transpose::Yes => b[p * cfg.stride_b + j + l * cfg.ldb],
                    };
                    acc += av * bv;
                }
                let ci = p * cfg.stride_c + i + j * cfg.ldc;
                c[ci] = cfg.alpha * acc + cfg.beta * c[ci];
            }
        }
    }
}

fn gemm_case<T: GemmType>(
    to: impl Fn(f32) -> T,
    from: impl Fn(T) -> f64,
    tol: f64,
    trans_a: Transpose,
    trans_b: Transpose,
) {
    let s = stream();
    let mut blas = BlasHandle::new(&s).unwrap();
    let (m, n, k, batch) = (37, 29, 65, 3);
    let lda = if trans_a == Transpose::No { m } else { k };
    let ldb = if trans_b == Transpose::No { k } else { n };
    let cfg = GemmConfig {
        trans_a,
        trans_b,
        m,
        n,
        k,
        alpha: 1.5,
        beta: 0.5,
        lda,
        ldb,
        ldc: m,
        stride_a: m * k,
        stride_b: 0, // broadcast one B over the batch
        stride_c: m * n,
        batch,
    };
    let a: Vec<T> = values(m * k * batch, 6).into_iter().map(&to).collect();
    let b: Vec<T> = values(k * n, 7).into_iter().map(&to).collect();
    let c0: Vec<T> = values(m * n * batch, 8).into_iter().map(&to).collect();
    let (da, db) = (s.clone_htod(&a).unwrap(), s.clone_htod(&b).unwrap());
    let mut dc = s.clone_htod(&c0).unwrap();
    blas.gemm_strided_batched(&cfg, &da, &db, &mut dc).unwrap();
    let got: Vec<f64> = s.clone_dtoh(&dc).unwrap().into_iter().map(&from).collect();
    let mut want: Vec<f64> = c0.into_iter().map(&from).collect();
    let a64: Vec<f64> = a.into_iter().map(&from).collect();
    let b64: Vec<f64> = b.into_iter().map(&from).collect();
    cpu_gemm(&cfg, &a64, &b64, &mut want);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{i}: {g} vs {w}");
    }
    // Too-short operands never reach rocBLAS.
    let short = s.alloc::<T>(3).unwrap();
    assert!(matches!(
        blas.gemm_strided_batched(&cfg, &short, &db, &mut dc),
        Err(RocmError::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs a HIP device"]
fn gemm_f32_matches_cpu() {
    for ta in [Transpose::No, Transpose::Yes] {
        for tb in [Transpose::No, Transpose::Yes] {
            gemm_case::<f32>(|v| v, |v| v as f64, 1e-4, ta, tb);
        }
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn gemm_f64_matches_cpu() {
    gemm_case::<f64>(|v| v as f64, |v| v, 1e-12, Transpose::Yes, Transpose::No);
}

#[test]
#[ignore = "needs a HIP device"]
fn gemm_f16_matches_cpu() {
    gemm_case::<f16>(
        f16::from_f32,
        |v| v.to_f64(),
        2e-2,
        Transpose::No,
        Transpose::Yes,
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn gemm_bf16_matches_cpu() {
    gemm_case::<bf16>(
        bf16::from_f32,
        |v| v.to_f64(),
        6e-2,
        Transpose::No,
        Transpose::No,
    );
}

/// Half inputs, f32 output: the f32 result of the exactly representable half inputs (accumulated
/// in f32, so far tighter than a half output allows); a too-short f32 output is refused.
fn gemm_f32_out_case<T: GemmType<Scalar = f32>>(to: impl Fn(f32) -> T, from: impl Fn(T) -> f64) {
    let s = stream();
    let mut blas = BlasHandle::new(&s).unwrap();
    let (m, n, k) = (40, 9, 130);
    let cfg = GemmConfig {
        trans_a: Transpose::Yes,
        trans_b: Transpose::No,
        m,
        n,
        k,
        alpha: 1.0,
        beta: 0.0,
        lda: k,
        ldb: k,
        ldc: m,
        stride_a: m * k,
        stride_b: k * n,
        stride_c: m * n,
        batch: 1,
    };
    let a: Vec<T> = values(m * k, 11).into_iter().map(&to).collect();
    let b: Vec<T> = values(k * n, 12).into_iter().map(&to).collect();
    let (da, db) = (s.clone_htod(&a).unwrap(), s.clone_htod(&b).unwrap());
    let mut dc = s.alloc_zeros::<f32>(m * n).unwrap();
    blas.gemm_strided_batched_f32_out(&cfg, &da, &db, &mut dc)
        .unwrap();
    let got = s.clone_dtoh(&dc).unwrap();
    let a64: Vec<f64> = a.into_iter().map(&from).collect();
    let b64: Vec<f64> = b.into_iter().map(&from).collect();
    let mut want = vec![0.0; m * n];
    cpu_gemm(&cfg, &a64, &b64, &mut want);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let g = *g as f64;
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{i}: {g} vs {w}");
    }
    let mut short = s.alloc_zeros::<f32>(m * n - 1).unwrap();
    assert!(matches!(
        blas.gemm_strided_batched_f32_out(&cfg, &da, &db, &mut short),
        Err(RocmError::InvalidArgument(_))
    ));
}

#[test]
#[ignore = "needs a HIP device"]
fn gemm_half_inputs_f32_output_matches_cpu() {
    gemm_f32_out_case::<f16>(f16::from_f32, |v| v.to_f64());
    gemm_f32_out_case::<bf16>(bf16::from_f32, |v| v.to_f64());
}
