//! Many threads on one device, an allocation larger than the card, and device memory after
//! everything is dropped.

use candle_core::{DType, Device, Result, Tensor, D};
use candle_rocm_tests::{
    assert_close, assert_gpu_close, gpu, isolated, report, rng, rocm_device, root_cause, tolerance,
    uniform,
};
use rand::Rng;

const THREADS: u64 = 8;
const ITERATIONS: usize = 200;
/// Each thread compares its results with the CPU every this many iterations (and at the last).
const CHECK_EVERY: usize = 10;

/// One iteration's inputs, on the host.
struct Inputs {
    m: usize,
    k: usize,
    n: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    bias: Vec<f32>,
    ids: Vec<u32>,
}

impl Inputs {
    /// Shapes vary with the thread and the iteration, so the threads' allocations interleave
    /// across many allocator buckets.
    fn new(r: &mut rand::rngs::StdRng, thread: u64, i: usize) -> Inputs {
        let t = thread as usize;
        let (m, k, n) = (8 + (7 * i + t) % 17, 16 + 8 * (i % 5), 4 + (t + i) % 9);
        let ids = (0..6).map(|_| r.random_range(0..m as u32)).collect();
        Inputs {
            m,
            k,
            n,
            a: uniform(r, m * k, -1.0, 1.0),
            b: uniform(r, k * n, -1.0, 1.0),
            bias: uniform(r, n, -1.0, 1.0),
            ids,
        }
    }

    /// matmul, broadcast add, fused softmax, sum, index_select, to_dtype (bf16 and back), cat
    /// and narrow, on `dev`: every intermediate result, named.
    fn run(&self, dev: &Device) -> Result<Vec<(&'static str, Tensor)>> {
        let a = Tensor::from_vec(self.a.clone(), (self.m, self.k), dev)?;
        let b = Tensor::from_vec(self.b.clone(), (self.k, self.n), dev)?;
        let bias = Tensor::from_vec(self.bias.clone(), self.n, dev)?;
        let ids = Tensor::from_vec(self.ids.clone(), self.ids.len(), dev)?;
        let y = a.matmul(&b)?.broadcast_add(&bias)?;
        let s = candle_nn::ops::softmax_last_dim(&y)?;
        let sums = y.sum_keepdim(D::Minus1)?;
        let sel = y.index_select(&ids, 0)?;
        let rounded = sel.to_dtype(DType::BF16)?.to_dtype(DType::F32)?;
        let cat = Tensor::cat(&[&s, &rounded], 0)?;
        let narrowed = cat.narrow(1, 1, self.n - 2)?.narrow(0, 2, self.m)?;
        let total = (narrowed.sum_all()? + sums.sum_all()?)?;
        Ok(vec![
            ("matmul+bias", y),
            ("softmax", s),
            ("sum", sums),
            ("index_select", sel),
            ("bf16 round trip", rounded),
            ("cat+narrow", narrowed.contiguous()?),
            ("total", total),
        ])
    }
}

/// One thread's work: `ITERATIONS` iterations of [`Inputs::run`] on the shared device.
fn worker(dev: &Device, thread: u64) -> Result<()> {
    let mut r = rng(100 + thread);
    for i in 0..ITERATIONS {
        let inputs = Inputs::new(&mut r, thread, i);
        let got = inputs.run(dev)?;
        if i % CHECK_EVERY != 0 && i + 1 != ITERATIONS {
            continue;
        }
        let want = inputs.run(&Device::Cpu)?;
        for ((name, g), (_, w)) in got.iter().zip(&want) {
            // The bf16 rounding of values that differ in their last f32 bits may land on
            // neighbouring bf16 numbers.
            let tol = match *name {
                "bf16 round trip" | "cat+narrow" => tolerance(DType::BF16),
                _ => tolerance(DType::F32),
            };
            assert_gpu_close(g, w, tol, &format!("thread {thread} iteration {i}: {name}"))?;
        }
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn threads_share_one_device() -> Result<()> {
    let dev = gpu()?;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let dev = dev.clone();
            std::thread::spawn(move || worker(&dev, t))
        })
        .collect();
    let mut failures = Vec::new();
    for (t, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("thread {t}: {e}")),
            Err(_) => failures.push(format!("thread {t} panicked")),
        }
    }
    dev.synchronize()?;
    if !failures.is_empty() {
        candle_core::bail!("{}", failures.join("\n"))
    }
    Ok(())
}

/// A workload of assorted sizes; returns its result on the host.
fn workload(dev: &Device) -> Result<Tensor> {
    let mut r = rng(7);
    let a = Tensor::from_vec(uniform(&mut r, 256 * 512, -1.0, 1.0), (256, 512), dev)?;
    let b = Tensor::from_vec(uniform(&mut r, 512 * 128, -1.0, 1.0), (512, 128), dev)?;
    let y = candle_nn::ops::softmax_last_dim(&a.matmul(&b)?)?;
    let z = Tensor::cat(&[&y, &y.to_dtype(DType::F16)?.to_dtype(DType::F32)?], 1)?;
    let big = Tensor::zeros((1 << 20,), DType::F32, dev)?.affine(2.0, 1.0)?;
    let out = (z.sum(D::Minus1)? + big.narrow(0, 0, 256)?)?;
    out.to_device(&Device::Cpu)
}

#[test]
#[ignore = "needs a HIP device"]
fn out_of_memory_and_memory_baseline() -> Result<()> {
    if !isolated("stress::out_of_memory_and_memory_baseline")? {
        return Ok(());
    }
    let dev = gpu()?;
    let rocm = rocm_device(&dev).expect("gpu() gives a candle-rocm device");
    let alloc = rocm.device().allocator();
    let mem = || rocm.device().mem_info().map_err(candle_core::Error::wrap);
    dev.synchronize()?;
    let s0 = alloc.stats();
    let (free0, total) = mem()?;

    // 1. A workload, everything dropped: no live bytes left; the cache keeps the blocks.
    let first = workload(&dev)?;
    dev.synchronize()?;
    let s1 = alloc.stats();
    assert_eq!(
        s1.live_bytes, s0.live_bytes,
        "live bytes after the first workload: {s1:?}"
    );
    assert!(
        s1.raw_allocs > s0.raw_allocs,
        "the workload allocated nothing? {s1:?}"
    );

    // 2. The same workload again is served from the cache: no new device memory.
    let second = workload(&dev)?;
    dev.synchronize()?;
    let s2 = alloc.stats();
    assert_eq!(
        second.to_vec1::<f32>()?,
        first.to_vec1::<f32>()?,
        "the workload is deterministic"
    );
    assert_eq!(
        s2.live_bytes, s0.live_bytes,
        "live bytes after the second workload: {s2:?}"
    );
    assert_eq!(
        s2.raw_allocs, s1.raw_allocs,
        "the second workload grew device memory: {s2:?}"
    );
    assert_eq!(s2.cached_bytes, s1.cached_bytes, "the cache grew: {s2:?}");
    let (free2, _) = mem()?;

    // 3. 2^40 f32 elements (4 TiB): an error, not a panic or an abort.
    let e = Tensor::zeros((1usize << 40,), DType::F32, &dev).expect_err("a 4 TiB tensor");
    let msg = root_cause(&e).to_string();
    assert!(
        msg.contains("out of device memory"),
        "unexpected error for 4 TiB: {msg}"
    );

    // 4. The device still computes correctly.
    let x = Tensor::arange(0f32, 12.0, &dev)?.reshape((3, 4))?;
    let got = (x.matmul(&x.t()?)? + 1.0)?;
    let xc = Tensor::arange(0f32, 12.0, &Device::Cpu)?.reshape((3, 4))?;
    let want = (xc.matmul(&xc.t()?)? + 1.0)?;
    assert_gpu_close(&got, &want, 0.0, "matmul after out-of-memory")?;
    drop((x, got));
    assert_close(
        &workload(&dev)?,
        &first,
        0.0,
        "workload after out-of-memory",
    )?;

    // 5. Everything dropped and the cache trimmed: every raw allocation has been freed.
    dev.synchronize()?;
    alloc.trim().map_err(candle_core::Error::wrap)?;
    let s5 = alloc.stats();
    let (free5, _) = mem()?;
    assert_eq!(
        s5.live_bytes, s0.live_bytes,
        "live bytes at the end: {s5:?}"
    );
    assert_eq!(s5.cached_bytes, 0, "cache after trim: {s5:?}");
    assert_eq!(
        s5.raw_allocs - s5.raw_frees,
        s0.raw_allocs - s0.raw_frees,
        "raw allocations not freed: {s5:?}"
    );
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    report(
        "allocator after 2 workloads, OOM, trim",
        &format!(
            "live {} B (start {}), cached {} B (after workload 1: {:.1} MiB), raw allocs {} / frees {} \
             (workload 2 added {}), peak live {:.1} MiB",
            s5.live_bytes,
            s0.live_bytes,
            s5.cached_bytes,
            mib(s1.cached_bytes),
            s5.raw_allocs,
            s5.raw_frees,
            s2.raw_allocs - s1.raw_allocs,
            mib(s5.peak_live_bytes)
        ),
    );
    // Free device memory also counts other processes (the parent test process runs beside
    // this one), so it is reported, not asserted.
    report(
        "device free memory (hipMemGetInfo)",
        &format!(
            "{:.1} MiB at start, {:.1} after workload 2 (cached), {:.1} after trim, of {:.1}",
            mib(free0),
            mib(free2),
            mib(free5),
            mib(total)
        ),
    );
    Ok(())
}
