//! HIP graphs on a real device: capture, instantiate, launch, update, the pool that keeps a
//! graph's scratch memory, and captures that fail halfway. Ignored in CI (no GPU); the
//! HIP-on-CUDA harness runs them with `--include-ignored`, where a missing device is a failure.
//! Kernels come from rocm-safe/tests/kernels/test_kernels.hip ($ROCM_SAFE_TEST_MODULE).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::{device, module};
use rocm_safe::graph::{CaptureMode, CaptureStatus, GraphExec, UpdateOutcome};
use rocm_safe::{
    DeviceBuffer, DevicePtrArg, Event, Function, LaunchConfig, RocmError, Runtime, Stream,
};

const N: u32 = 10_007;

/// Queues `y += a * x` over N floats on `s`.
fn axpy(s: &Stream, f: &Function, a: f32, x: &DevicePtrArg, y: &DevicePtrArg) {
    common::axpy(s, f, a, x, y, N);
}

fn host(v: f32) -> Vec<f32> {
    common::host(v, N)
}

fn close(got: &[f32], want: impl Fn(usize) -> f32, what: &str) {
    for (i, g) in got.iter().enumerate() {
        let w = want(i);
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}: index {i}: {g} vs {w}"
        );
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn graphs_are_available_on_the_device() {
    Runtime::get().unwrap().graphs_available().unwrap();
    let s = Stream::new(&device()).unwrap();
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
}

#[test]
#[ignore = "needs a HIP device"]
fn capture_launch_and_update() {
    const LAUNCHES: usize = 16;
    let d = device();
    let m = module(&d);
    let f = m.function("axpy_f32").unwrap();
    let s = Stream::new(&d).unwrap();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y = s.clone_htod(&host(0.5)).unwrap();
    let (px, py) = (x.as_arg(), y.as_arg());
    let graph = s
        .capture(CaptureMode::default(), None, |s| {
            assert_eq!(s.capture_status()?, CaptureStatus::Active);
            assert!(s.is_capturing());
            for _ in 0..LAUNCHES {
                axpy(s, &f, 0.25, &px, &py);
            }
            Ok(())
        })
        .unwrap();
    assert!(!s.is_capturing());
    assert_eq!(s.capture_status().unwrap(), CaptureStatus::None);
    // Recorded, not run.
    close(
        &s.clone_dtoh(&y).unwrap(),
        |i| host(0.5)[i],
        "after capture",
    );
    let mut exec = GraphExec::instantiate(&graph).unwrap();
    drop(graph);
    for round in 1..=2 {
        // SAFETY: x and y are alive and only used by this stream.
        unsafe { exec.launch(&s).unwrap() };
        let want = |i: usize| host(0.5)[i] + (round * LAUNCHES) as f32 * 0.25 * host(1.0)[i];
        close(&s.clone_dtoh(&y).unwrap(), want, "after launch");
    }

    // The same shape with another scalar and another output buffer: an update applies.
    let y2 = s.clone_htod(&host(-3.0)).unwrap();
    let py2 = y2.as_arg();
    let graph2 = s
        .capture(CaptureMode::default(), Some(exec.pool().clone()), |s| {
            for _ in 0..LAUNCHES {
                axpy(s, &f, 2.0, &px, &py2);
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(exec.update(&graph2).unwrap(), UpdateOutcome::Updated);
    let y_before = s.clone_dtoh(&y).unwrap();
    // SAFETY: as above, for x and y2.
    unsafe { exec.launch(&s).unwrap() };
    let want2 = |i: usize| host(-3.0)[i] + LAUNCHES as f32 * 2.0 * host(1.0)[i];
    close(&s.clone_dtoh(&y2).unwrap(), want2, "after update");
    assert_eq!(
        s.clone_dtoh(&y).unwrap(),
        y_before,
        "the old output is left alone"
    );

    // One launch more: the topology changed, the update is refused and the exec with it.
    let graph3 = s
        .capture(CaptureMode::default(), Some(exec.pool().clone()), |s| {
            for _ in 0..=LAUNCHES {
                axpy(s, &f, 1.0, &px, &py2);
            }
            Ok(())
        })
        .unwrap();
    match exec.update(&graph3).unwrap() {
        UpdateOutcome::NeedsInstantiate(why) => println!("update refused as expected: {why:?}"),
        UpdateOutcome::Updated => panic!("an update across a topology change applied"),
    }
    assert!(exec.is_stale());
    // SAFETY: as above (and refused before reaching the runtime).
    let refused = unsafe { exec.launch(&s) };
    assert!(matches!(refused, Err(RocmError::InvalidArgument(_))));
    let exec3 = GraphExec::instantiate(&graph3).unwrap();
    let before = s.clone_dtoh(&y2).unwrap();
    // SAFETY: as above.
    unsafe { exec3.launch(&s).unwrap() };
    let want3 = |i: usize| before[i] + (LAUNCHES + 1) as f32 * host(1.0)[i];
    close(&s.clone_dtoh(&y2).unwrap(), want3, "after re-instantiation");
    drop((exec, exec3, graph2, graph3));
    d.runtime().check_err().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn a_graphs_scratch_memory_is_not_handed_to_other_work() {
    let d = device();
    let m = module(&d);
    let f = m.function("axpy_f32").unwrap();
    let s = Stream::new(&d).unwrap();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y = s.clone_htod(&host(0.0)).unwrap();
    let (px, py) = (x.as_arg(), y.as_arg());
    // y += 1 * tmp, tmp = 0 + 3 * x: tmp is allocated and freed inside the capture.
    let graph = s
        .capture(CaptureMode::default(), None, |s| {
            let mut tmp: DeviceBuffer<f32> = s.alloc(N as usize)?;
            s.memset_zeros(&mut tmp)?;
            let pt = tmp.as_arg();
            axpy(s, &f, 3.0, &px, &pt);
            axpy(s, &f, 1.0, &pt, &py);
            Ok(())
        })
        .unwrap();
    let exec = GraphExec::instantiate(&graph).unwrap();
    drop(graph);
    let stats = d.allocator().stats();
    assert!(stats.pool_cached_bytes >= N as usize * 4, "{stats:?}");
    // Same stream, same size as tmp: without the pool this would be tmp's block.
    let victim = s.clone_htod(&host(42.0)).unwrap();
    // SAFETY: x and y are alive; tmp is the pool's.
    unsafe { exec.launch(&s).unwrap() };
    close(
        &s.clone_dtoh(&y).unwrap(),
        |i| host(0.0)[i] + 3.0 * host(1.0)[i],
        "output",
    );
    assert_eq!(
        s.clone_dtoh(&victim).unwrap(),
        host(42.0),
        "scratch overwrote other work"
    );
    // Capturing the same step again into the exec's pool needs no new memory.
    let raw = d.allocator().stats().raw_allocs;
    let again = s
        .capture(CaptureMode::default(), Some(exec.pool().clone()), |s| {
            let tmp: DeviceBuffer<f32> = s.alloc(N as usize)?;
            drop(tmp);
            Ok(())
        })
        .unwrap();
    assert_eq!(d.allocator().stats().raw_allocs, raw);
    let pools = d.allocator().stats().pools;
    drop((exec, again));
    assert_eq!(
        d.allocator().stats().pools,
        pools - 1,
        "the last owner retires the pool"
    );
    d.runtime().check_err().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn an_error_mid_capture_leaves_the_stream_usable() {
    let d = device();
    let m = module(&d);
    let f = m.function("axpy_f32").unwrap();
    let s = Stream::new(&d).unwrap();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y = s.clone_htod(&host(0.0)).unwrap();
    let (px, py) = (x.as_arg(), y.as_arg());
    let check_usable = |s: &Arc<Stream>, what: &str| {
        assert!(!s.is_capturing(), "{what}");
        assert_eq!(s.capture_status().unwrap(), CaptureStatus::None, "{what}");
        let before = s.clone_dtoh(&y).unwrap();
        axpy(s, &f, 1.0, &px, &py);
        let after = s.clone_dtoh(&y).unwrap();
        close(&after, |i| before[i] + host(1.0)[i], what);
    };

    // 1. A host copy inside the step: refused by rocm-safe, the capture is discarded.
    let r = s.capture(CaptureMode::default(), None, |s| {
        axpy(s, &f, 1.0, &px, &py);
        let _ = s.clone_htod(&[1.0f32])?;
        Ok(())
    });
    match r {
        Err(RocmError::NotCapturable { op, stream, .. }) => {
            assert_eq!((op, stream), ("Stream::clone_htod", s.id()));
        }
        other => panic!("expected NotCapturable, got {other:?}"),
    }
    check_usable(&s, "after a refused host copy");
    for refused in [
        s.capture(CaptureMode::default(), None, |s| s.synchronize()),
        s.capture(CaptureMode::default(), None, |s| s.clone_dtoh(&y).map(drop)),
        s.capture(CaptureMode::default(), None, |s| {
            s.upload(vec![1u32]).map(drop)
        }),
        s.capture(CaptureMode::default(), None, |s| {
            s.device().allocator().trim().map(drop)
        }),
    ] {
        assert!(
            matches!(refused, Err(RocmError::NotCapturable { .. })),
            "{refused:?}"
        );
    }
    check_usable(&s, "after refused syncs");

    // 2. A panic inside the step: the guard ends the capture while unwinding.
    let s2 = s.clone();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = s2.capture(CaptureMode::default(), None, |s| {
            axpy(s, &f, 1.0, &px, &py);
            panic!("a bug in the step");
        });
    }));
    assert!(panicked.is_err());
    check_usable(&s, "after a panic");

    // 3. A call the runtime itself rejects (a raw synchronisation behind rocm-safe's back):
    // the capture is invalidated, ending it fails, and the stream is usable.
    let capture = s.begin_capture(CaptureMode::ThreadLocal, None).unwrap();
    axpy(&s, &f, 1.0, &px, &py);
    let hip = d.runtime().hip();
    // SAFETY: a live stream handle; synchronising it is what the runtime forbids here.
    let code = unsafe { (hip.hipStreamSynchronize)(s.raw()) };
    let status = s.capture_status().unwrap();
    println!(
        "hipStreamSynchronize while capturing: {}, then {status:?}",
        hip.error_name(code)
    );
    assert!(!code.is_success());
    // CUDA (the harness) invalidates the capture; either way ending it leaves the stream free.
    if status == CaptureStatus::Invalidated {
        assert!(capture.end().is_err());
    } else {
        drop(capture.end());
    }
    check_usable(&s, "after an invalidated capture");

    // 4. Dropping a capture without ending it discards it. (Relaxed, not Global: a global
    // capture would make the other tests' threads' allocations fail meanwhile.)
    let capture = s.begin_capture(CaptureMode::Relaxed, None).unwrap();
    assert!(matches!(
        s.begin_capture(CaptureMode::Relaxed, None),
        Err(RocmError::InvalidArgument(_))
    ));
    axpy(&s, &f, 1.0, &px, &py);
    drop(capture);
    check_usable(&s, "after a dropped capture");
    d.runtime().check_err().unwrap();
}

/// Not an assertion: what one graph launch saves against the same launches one by one.
#[test]
#[ignore = "needs a HIP device"]
fn timing_plain_launches_against_one_graph_launch() {
    const LAUNCHES: usize = 200;
    const REPS: usize = 20;
    let d = device();
    let m = module(&d);
    let noop = m.function("noop").unwrap();
    let s = Stream::new(&d).unwrap();
    let queue = |s: &Stream| {
        for _ in 0..LAUNCHES {
            // SAFETY: noop takes no parameters and touches no memory.
            unsafe {
                s.launch_builder(&noop)
                    .launch(LaunchConfig::for_num_elems(1, 32))
                    .unwrap()
            };
        }
    };
    let graph = s
        .capture(CaptureMode::default(), None, |s| {
            queue(s);
            Ok(())
        })
        .unwrap();
    let exec = GraphExec::instantiate(&graph).unwrap();
    // Warm both paths.
    queue(&s);
    // SAFETY: noop uses no memory.
    unsafe { exec.launch(&s).unwrap() };
    s.synchronize().unwrap();
    let time = |what: &str, run: &dyn Fn()| {
        let (start, end) = (Event::new(&d, true).unwrap(), Event::new(&d, true).unwrap());
        start.record(&s).unwrap();
        let host = Instant::now();
        for _ in 0..REPS {
            run();
        }
        let host_us = host.elapsed().as_secs_f64() * 1e6 / (REPS * LAUNCHES) as f64;
        end.record(&s).unwrap();
        end.synchronize().unwrap();
        let gpu_us = start.elapsed_ms(&end).unwrap() as f64 * 1e3 / (REPS * LAUNCHES) as f64;
        println!(
            "{what:>24}: {host_us:.3} us host, {gpu_us:.3} us GPU per kernel ({LAUNCHES} kernels x {REPS})"
        );
    };
    time("plain launches", &|| queue(&s));
    // SAFETY: noop uses no memory.
    time("one graph launch", &|| unsafe { exec.launch(&s).unwrap() });
}
