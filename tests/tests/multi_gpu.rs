//! `Tensor::to_device` between two ROCm devices (issue 29): a device-to-device copy (peer to
//! peer, or staged through pinned host memory), never a round trip through a CPU tensor, in
//! both directions, for f32, f16 and bf16, from one element to 64 MiB, for views with an
//! offset and for strided sources (transposed, and made contiguous on the source device
//! first), each compared with the host values.
//!
//! Also the one-shot all-reduce (`candle_rocm::collective`, sums up to 4 MiB as one kernel over
//! the peers' memory): against the host's sums for every dtype it takes and sizes of 1 to 64
//! blocks, and a rank that never joins it, which must be a typed error within the timeout; and
//! its variant with the residual add and RMS norm after it against the all-reduce followed by
//! candle-nn's `add_rms_norm`; and the Lamport forms' edge cases (values that look like their
//! empty marker, calls that cycle through their buffers with different grids); and all-gathers
//! (the small ones of f32, f16 and bf16 run as one-shot sums over zeros) against the host.
//!
//! Needs two GPUs and is `#[ignore]`d; the HIP-on-CUDA harness runs it (strict mode) where it
//! sees two, and skips it with a row where it sees one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm::collective::{unique_id, Comm, ReduceOp};

/// One test at a time on the two GPUs, held for the test's length: a device has one stream, and
/// two tests' work interleaved on the two streams can wait in a circle (a one-shot all-reduce
/// spinning on GPU 0 for its peer queued on GPU 1 behind a copy that waits for GPU 0; two
/// tests' all-reduces queued in different orders on the two GPUs), until the timeouts end it.
/// The rule for any work between GPUs: queue it in the same order on every one.
fn exclusive() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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
    let _turn = exclusive();
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
    let _turn = exclusive();
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

/// Two ranks as threads of this process, on GPUs 0 and 1, each running `body(rank, comm)` on a
/// communicator with `timeout` (one test at a time: [`exclusive`]).
fn two_ranks(timeout: Duration, body: fn(usize, Comm) -> Result<()>) -> Result<()> {
    let _turn = exclusive();
    two()?;
    let id = unique_id()?;
    let threads: Vec<_> = (0..2)
        .map(|rank| {
            std::thread::spawn(move || -> Result<()> {
                let dev = candle_rocm::device(rank).map_err(candle_core::Error::wrap)?;
                body(rank, Comm::new_timeout(&dev, &id, rank, 2, timeout)?)
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a rank panicked")?;
    }
    Ok(())
}

/// Rank r's element i: eighths below 5 in magnitude, exact in f16 and bf16, so a sum of two
/// is exact in f32 and rounds once to the dtype.
fn element(rank: usize, i: usize) -> f32 {
    ((i * 7 + rank * 13) % 37) as f32 / 8.0 - 2.0
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn one_shot_all_reduce_sums_like_the_host() -> Result<()> {
    two_ranks(Duration::from_secs(120), |rank, comm| {
        let rt = rocm_safe::Runtime::get().map_err(candle_core::Error::wrap)?;
        let reach = rt
            .peer_access(rank, 1 - rank)
            .map_err(candle_core::Error::wrap)?;
        assert_eq!(
            comm.has_peer_allreduce(),
            reach,
            "rank {rank}: peer access {reach}"
        );
        let dev = comm.device().clone();
        // 1 block .. 256 blocks, odd tails, the most the kernel takes (4 MiB) and one past it
        // (RCCL).
        let max_f32 = (4 << 20) / 4;
        for len in [
            1,
            5,
            1023,
            1024,
            4097,
            65536 + 3,
            (1 << 20) / 4,
            max_f32,
            max_f32 + 1,
        ] {
            let want: Vec<f32> = (0..len).map(|i| element(0, i) + element(1, i)).collect();
            let mine: Vec<f32> = (0..len).map(|i| element(rank, i)).collect();
            let x = Tensor::from_vec(mine, len, &dev)?;
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let want = Tensor::new(want.as_slice(), &Device::Cpu)?.to_dtype(dtype)?;
                let xd = x.to_dtype(dtype)?;
                // Twice: the kernel alternates between two halves of its shared buffer.
                for round in 0..2 {
                    let sum = comm.all_reduce(&xd, ReduceOp::Sum)?;
                    let what = format!("rank {rank}, {dtype:?} x {len}, call {round}");
                    same(&sum, &want, &what)?;
                }
            }
        }
        // Other reductions keep RCCL, in between.
        let x = (Tensor::ones(9, DType::F32, &dev)? * (rank + 1) as f64)?;
        let max = comm.all_reduce(&x, ReduceOp::Max)?;
        assert_eq!(max.to_vec1::<f32>()?, vec![2.0; 9]);
        comm.wait()
    })
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn one_shot_all_reduce_gives_up_on_an_absent_rank() -> Result<()> {
    // Rank 1 never calls the all-reduce but stays alive (holding the memory rank 0's kernel
    // reads) until rank 0 has its error and its kernel has ended.
    static DONE: AtomicBool = AtomicBool::new(false);
    two_ranks(Duration::from_secs(3), |rank, comm| {
        if !comm.has_peer_allreduce() {
            return Ok(());
        }
        // The set-up's RCCL work drained, so rank 0's wait below is the one for steps with no
        // RCCL work queued (a blocking synchronize, the kernel's own timeout ending it).
        comm.wait()?;
        if rank == 1 {
            while !DONE.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(10));
            }
            return Ok(());
        }
        let start = Instant::now();
        let x = Tensor::ones(64, DType::F32, comm.device())?;
        let _sum = comm.all_reduce(&x, ReduceOp::Sum)?;
        let e = comm
            .wait()
            .expect_err("a wait on an absent rank")
            .to_string();
        let done = comm.device().synchronize();
        DONE.store(true, Ordering::Release);
        done?;
        assert!(e.contains("did not finish within"), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{:?}",
            start.elapsed()
        );
        Ok(())
    })
}

/// `(sum, normed)` of `add_rms_norm(all_reduce(x), residual, alpha, eps)` composed from the
/// all-reduce and candle-nn's op, on the GPU.
fn composed(comm: &Comm, x: &Tensor, r: &Tensor, a: &Tensor, eps: f32) -> Result<(Tensor, Tensor)> {
    candle_nn::ops::add_rms_norm(&comm.all_reduce(x, ReduceOp::Sum)?, r, a, eps)
}

/// The fused kernel's norms against the composed ones: within 1e-5 (f32) or 1e-2 (f16, bf16)
/// relative to max(1, |want|) (the block sums its squares in another order).
fn close_norms(got: &Tensor, want: &Tensor, what: &str) -> Result<()> {
    let tol = if got.dtype() == DType::F32 {
        1e-5
    } else {
        1e-2
    };
    let values = |t: &Tensor| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>();
    let (got, want) = (values(got)?, values(want)?);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
        .fold(0f32, f32::max);
    assert!(worst <= tol, "{what}: norms differ by {worst}");
    Ok(())
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn one_shot_all_reduce_with_add_rms_norm_matches_the_two_steps() -> Result<()> {
    two_ranks(Duration::from_secs(120), |rank, comm| {
        let dev = comm.device().clone();
        let eps = 1e-5;
        // Rows x cols: one row of a 4096-wide model, batches, a width that is not whole
        // 16-byte packs (the kernel's scalar path)...
        // ... and more rows than blocks (a 512-token prompt of a 2048-wide model, 300 short rows).
        let shapes = [
            vec![1, 4096],
            vec![1, 1, 4096],
            vec![8, 4096],
            vec![3, 1001],
            vec![128, 512],
            vec![300, 64],
            vec![1, 512, 2048],
        ];
        for dims in shapes {
            let cols = *dims.last().unwrap();
            let n: usize = dims.iter().product();
            let mk = |seed: usize| {
                let v: Vec<f32> = (0..n).map(|i| element(seed, i)).collect();
                Tensor::from_vec(v, dims.as_slice(), &dev)
            };
            // x differs between the ranks; the residual and alpha are the same on every rank,
            // as in a model.
            let (x, r) = (mk(rank)?, mk(5)?);
            let a = Tensor::from_vec(
                (0..cols)
                    .map(|i| 0.5 + (i % 7) as f32 / 8.0)
                    .collect::<Vec<_>>(),
                cols,
                &dev,
            )?;
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let (x, r, a) = (x.to_dtype(dtype)?, r.to_dtype(dtype)?, a.to_dtype(dtype)?);
                let what = format!("rank {rank}, {dtype:?} {dims:?}");
                let (sum, normed) = comm
                    .all_reduce_add_rms_norm(&x, &r, &a, eps)?
                    .unwrap_or_else(|| panic!("{what}: not taken"));
                let (want_sum, want_norm) = composed(&comm, &x, &r, &a, eps)?;
                assert_eq!(sum.dims(), dims.as_slice(), "{what}");
                same(&sum, &want_sum, &format!("{what}: sums"))?;
                close_norms(&normed, &want_norm, &what)?;
            }
        }
        // Declined, for the caller to compose: past 4 MiB, not contiguous, mixed dtypes.
        let x = Tensor::ones((1025, 1024), DType::F32, &dev)?;
        let a = Tensor::ones(1024, DType::F32, &dev)?;
        assert!(comm.all_reduce_add_rms_norm(&x, &x, &a, eps)?.is_none());
        let x = Tensor::ones((129, 64), DType::F32, &dev)?;
        let a = Tensor::ones(64, DType::F32, &dev)?;
        assert!(comm.all_reduce_add_rms_norm(&x, &x, &a, eps)?.is_some());
        let t = Tensor::ones((64, 129), DType::F32, &dev)?.t()?;
        assert!(comm.all_reduce_add_rms_norm(&t, &t, &a, eps)?.is_none());
        let h = x.to_dtype(DType::F16)?;
        assert!(comm.all_reduce_add_rms_norm(&h, &x, &a, eps)?.is_none());
        comm.wait()
    })
}

/// Rank r's element i for the Lamport test: every value the kernels' empty marker could be
/// confused with (-0.0; in f32 also the denormal 0x80008000) among ordinary ones.
fn marker_element(rank: usize, i: usize, dtype: DType) -> f32 {
    match (i + rank) % 5 {
        0 => -0.0,
        1 if dtype == DType::F32 => f32::from_bits(0x8000_8000),
        _ => element(rank, i),
    }
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn lamport_all_reduces_take_marker_values_and_cycle_their_buffers() -> Result<()> {
    two_ranks(Duration::from_secs(120), |rank, comm| {
        let dev = comm.device().clone();
        let eps = 1e-5;
        // Sizes of 1 block (8 KiB in f16), 7 blocks (100 KiB) and the 8-block limit, then a
        // norm of 1 row and of 8, in turn, for more calls than the kernels have buffers.
        for round in 0..4 {
            for dtype in [DType::F32, DType::F16, DType::BF16] {
                let elem = dtype.size_in_bytes();
                for len in [4096, 100 * 1024 / elem, 128 * 1024 / elem] {
                    let values = |r: usize| -> Vec<f32> {
                        (0..len).map(|i| marker_element(r, i, dtype)).collect()
                    };
                    let x = Tensor::from_vec(values(rank), len, &dev)?.to_dtype(dtype)?;
                    let sum = comm.all_reduce(&x, ReduceOp::Sum)?;
                    // The host's sums in the dtype: -0.0 + -0.0 is -0.0 there and +0.0 here
                    // (equal as numbers); two f32 markers sum to -9.2e-41 there, -0.0 here.
                    let want: Vec<f32> = values(0)
                        .iter()
                        .zip(values(1))
                        .map(|(a, b)| a + b)
                        .collect();
                    let want = Tensor::from_vec(want, len, &Device::Cpu)?
                        .to_dtype(dtype)?
                        .to_dtype(DType::F32)?
                        .to_vec1::<f32>()?;
                    let got = sum
                        .to_device(&Device::Cpu)?
                        .to_dtype(DType::F32)?
                        .to_vec1::<f32>()?;
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            g == w || (g - w).abs() < 1e-39,
                            "rank {rank}, round {round}, {dtype:?} x {len}, element {i}: {g:e} vs {w:e}"
                        );
                    }
                }
                for rows in [1, 8] {
                    let n = rows * 4096;
                    let x: Vec<f32> = (0..n).map(|i| marker_element(rank, i, dtype)).collect();
                    let x = Tensor::from_vec(x, (rows, 4096), &dev)?.to_dtype(dtype)?;
                    let r =
                        (Tensor::ones((rows, 4096), DType::F32, &dev)? * 0.5)?.to_dtype(dtype)?;
                    let a = Tensor::ones(4096, dtype, &dev)?;
                    let what = format!("rank {rank}, round {round}, {dtype:?} {rows} rows");
                    let (sum, normed) = comm
                        .all_reduce_add_rms_norm(&x, &r, &a, eps)?
                        .unwrap_or_else(|| panic!("{what}: not taken"));
                    let (want_sum, want_norm) = composed(&comm, &x, &r, &a, eps)?;
                    same(&sum, &want_sum, &format!("{what}: sums"))?;
                    close_norms(&normed, &want_norm, &what)?;
                }
            }
        }
        comm.wait()
    })
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn all_gather_joins_every_rank_like_the_host() -> Result<()> {
    two_ranks(Duration::from_secs(120), |rank, comm| {
        let dev = comm.device().clone();
        // (rows, cols) of each rank's part: one element, odd sizes, a 1.1B decode step's logits
        // ((16000, 1) f16), the one-shot path's 1 MiB limit in f32 and one row past it (RCCL).
        let limit_rows = (1 << 20) / 4 / 2 / 64;
        for (rows, cols) in [
            (1, 1),
            (3, 5),
            (16000, 1),
            (1001, 7),
            (limit_rows, 64),
            (limit_rows + 1, 64),
        ] {
            let part = |r: usize| -> Vec<f32> {
                (0..rows * cols)
                    .map(|i| if i % 11 == 3 { -0.0 } else { element(r, i) })
                    .collect()
            };
            let want = [part(0), part(1)].concat();
            let want = Tensor::from_vec(want, (2 * rows, cols), &Device::Cpu)?;
            let mine = Tensor::from_vec(part(rank), (rows, cols), &dev)?;
            // f32 / f16 / bf16 take the one-shot sum up to the limit; the others RCCL.
            for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64, DType::U32] {
                let x = if dtype == DType::U32 {
                    mine.abs()?.to_dtype(dtype)?
                } else {
                    mine.to_dtype(dtype)?
                };
                let want = if dtype == DType::U32 {
                    want.abs()?.to_dtype(dtype)?
                } else {
                    want.to_dtype(dtype)?
                };
                // Twice: the one-shot kernels take their shared buffers in turn.
                for round in 0..2 {
                    let got = comm.all_gather(&x)?;
                    assert_eq!(got.dims(), [2 * rows, cols]);
                    let what = format!("rank {rank}, {dtype:?} ({rows}, {cols}), call {round}");
                    same(&got, &want, &what)?;
                }
            }
        }
        comm.wait()
    })
}
