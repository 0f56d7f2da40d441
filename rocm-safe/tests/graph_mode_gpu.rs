//! Graph mode on a real device (`Stream::set_graph_mode`): recorded work gives the results of
//! plain launches, executable graphs are reused through updates, staged uploads, the node
//! limit, work left recorded when the mode is turned off, and what it saves in host time.
//! Ignored in CI (no GPU); the HIP-on-CUDA harness runs them with `--include-ignored`. One,
//! whose counts do not depend on the runtime, also runs in CI on the null double (`.ci/run`).
//! Kernels come from rocm-safe/tests/kernels/test_kernels.hip ($ROCM_SAFE_TEST_MODULE).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Mutex;
use std::time::Instant;

use common::{device, module};
use rocm_safe::graph::{CaptureMode, GraphMode};
use rocm_safe::{Device, DeviceBuffer, DevicePtrArg, Function, RocmError, Stream};

/// The tests take turns: the counts of recordings and launches they assert are process-wide
/// or per stream, and the timing test wants the GPU to itself.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

const N: u32 = 4099;

/// Queues `y += a * x` over N floats on `s`.
fn axpy(s: &Stream, f: &Function, a: f32, x: &DevicePtrArg, y: &DevicePtrArg) {
    common::axpy(s, f, a, x, y, N);
}

/// Device 0, its axpy kernel and a new stream.
fn fixture() -> (Device, Function, std::sync::Arc<Stream>) {
    let d = device();
    let f = module(&d).function("axpy_f32").unwrap();
    let s = Stream::new(&d).unwrap();
    (d, f, s)
}

fn host(v: f32) -> Vec<f32> {
    common::host(v, N)
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}: index {i}: {g} vs {w}"
        );
    }
}

/// One step as a decoder makes it: uploads, kernels with a per-step scalar, a fill, a copy,
/// then a read-back. Returns y and the host's expectation.
fn step(s: &std::sync::Arc<Stream>, f: &Function, k: usize, keep: &mut Vec<DeviceBuffer<f32>>) {
    let x = s.upload(host(1.0 + k as f32)).unwrap();
    let y0 = host(0.5);
    let y = s.clone_htod(&y0).unwrap();
    let a = 0.25 * (k + 1) as f32;
    for _ in 0..8 {
        axpy(s, f, a, &x.as_arg(), &y.as_arg());
    }
    let mut z = s.alloc::<f32>(N as usize).unwrap();
    s.memset_zeros(&mut z).unwrap();
    axpy(s, f, 1.0, &y.as_arg(), &z.as_arg());
    let mut w = s.alloc::<f32>(N as usize).unwrap();
    s.memcpy_dtod(&z, &mut w).unwrap();
    let got = s.clone_dtoh(&w).unwrap();
    let xs = host(1.0 + k as f32);
    let want: Vec<f32> = (0..N as usize).map(|i| y0[i] + 8.0 * a * xs[i]).collect();
    assert_close(&got, &want, &format!("step {k}"));
    // Keep every other step's buffers alive, so the next step's addresses differ and the
    // executable graph's update has new addresses to apply.
    if k % 2 == 0 {
        keep.extend([x, y, z, w]);
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn recorded_steps_match_plain_launches_and_reuse_one_exec() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (d, f, s) = fixture();
    let mut keep = Vec::new();
    step(&s, &f, 0, &mut keep);
    s.set_graph_mode(Some(GraphMode::default())).unwrap();
    assert_eq!(s.graph_mode(), Some(GraphMode::default()));
    for k in 1..=6 {
        step(&s, &f, k, &mut keep);
    }
    let st = s.graph_stats().unwrap();
    println!("graph mode over 6 steps: {st:?}");
    assert_eq!(st.launches, 6, "one graph a step: {st:?}");
    assert_eq!(st.nodes, 6 * 13, "13 operations a step: {st:?}");
    assert_eq!(st.staged_uploads, 12, "{st:?}");
    assert_eq!(
        st.instantiations + st.updates,
        6,
        "every launch instantiated or updated: {st:?}"
    );
    assert!(st.updates >= 4, "the same kernels reuse the exec: {st:?}");
    s.set_graph_mode(None).unwrap();
    assert_eq!(s.graph_stats(), None);
    step(&s, &f, 7, &mut keep);
    d.runtime().check_err().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn the_node_limit_launches_in_stretches() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, f, s) = fixture();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y = s.clone_htod(&host(0.0)).unwrap();
    s.set_graph_mode(Some(GraphMode {
        max_nodes: 5,
        first_nodes: 0,
        max_execs: 2,
        plain_head: 0,
        record_blas: false,
        record_rccl: false,
    }))
    .unwrap();
    for _ in 0..16 {
        axpy(&s, &f, 0.5, &x.as_arg(), &y.as_arg());
    }
    let got = s.clone_dtoh(&y).unwrap();
    let want: Vec<f32> = host(0.0)
        .iter()
        .zip(host(1.0))
        .map(|(y, x)| y + 8.0 * x)
        .collect();
    assert_close(&got, &want, "16 launches in stretches of 5");
    let st = s.graph_stats().unwrap();
    assert_eq!((st.launches, st.nodes), (4, 16), "5 + 5 + 5 + 1: {st:?}");
}

/// Set (by `.ci/run`) when the runtime is the null double (`tests/hip-on-cuda/build.sh
/// --null`): its calls succeed without computing anything, so only counts can be checked.
const NULL_RUNTIME_VAR: &str = "ROCM_SAFE_TESTS_NULL_RUNTIME";

/// A step cut into more distinct stretches than graph mode keeps executables for (stretches of
/// 1, 2 and 3 launches, 2 kept): the two kept are updated every step and the third runs on an
/// executable made for its launch, where least-recently-used eviction made all three again at
/// every step. The counts do not depend on the runtime, so `.ci/run` also runs this on the
/// null double, without a GPU.
#[test]
#[ignore = "needs a HIP device (or the null double, as .ci/run runs it)"]
fn more_stretches_than_kept_executables_still_reuse_them() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const STEPS: u64 = 20;
    let (_d, f, s) = fixture();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y = s.clone_htod(&host(0.0)).unwrap();
    s.set_graph_mode(Some(GraphMode {
        max_nodes: 0,
        max_execs: 2,
        ..GraphMode::default()
    }))
    .unwrap();
    for _ in 0..STEPS {
        for len in 1..=3 {
            for _ in 0..len {
                axpy(&s, &f, 1.0, &x.as_arg(), &y.as_arg());
            }
            drop(s.flush_graph().unwrap());
        }
    }
    let st = s.graph_stats().unwrap();
    assert_eq!((st.launches, st.nodes), (3 * STEPS, 6 * STEPS), "{st:?}");
    assert_eq!(
        (st.updates, st.uncached, st.instantiations),
        (2 * (STEPS - 1), STEPS, STEPS + 2),
        "two executables kept and updated every step, the third made for each launch: {st:?}"
    );
    if std::env::var_os(NULL_RUNTIME_VAR).is_none() {
        let got = s.clone_dtoh(&y).unwrap();
        let want: Vec<f32> = host(0.0)
            .iter()
            .zip(host(1.0))
            .map(|(y, x)| y + (6 * STEPS) as f32 * x)
            .collect();
        assert_close(&got, &want, "120 launches of y += x");
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn turning_the_mode_off_launches_what_was_recorded() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, f, s) = fixture();
    let x = s.clone_htod(&host(2.0)).unwrap();
    let y = s.clone_htod(&host(0.0)).unwrap();
    s.set_graph_mode(Some(GraphMode::default())).unwrap();
    axpy(&s, &f, 1.0, &x.as_arg(), &y.as_arg());
    // An explicit capture is refused while graph mode records the stream itself.
    match s.begin_capture(CaptureMode::default(), None) {
        Err(RocmError::InvalidArgument(_)) => {}
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    s.set_graph_mode(None).unwrap();
    let want: Vec<f32> = host(0.0)
        .iter()
        .zip(host(2.0))
        .map(|(y, x)| y + x)
        .collect();
    assert_close(&s.clone_dtoh(&y).unwrap(), &want, "after turning off");
}

#[test]
#[ignore = "needs a HIP device"]
fn a_large_upload_ends_the_stretch_and_is_copied_plainly() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, f, s) = fixture();
    s.set_graph_mode(Some(GraphMode::default())).unwrap();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y = s.clone_htod(&host(0.0)).unwrap();
    axpy(&s, &f, 1.0, &x.as_arg(), &y.as_arg());
    // 4 MiB: above the staging limit, so the recorded work is launched and the copy is plain.
    let big: Vec<f32> = (0..(1 << 20)).map(|i| i as f32).collect();
    let b = s.clone_htod(&big).unwrap();
    axpy(&s, &f, 1.0, &x.as_arg(), &y.as_arg());
    assert_close(
        &s.clone_dtoh(&y).unwrap(),
        &host(0.0)
            .iter()
            .zip(host(1.0))
            .map(|(y, x)| y + 2.0 * x)
            .collect::<Vec<_>>(),
        "around a plain upload",
    );
    assert_eq!(s.clone_dtoh(&b).unwrap(), big);
    let st = s.graph_stats().unwrap();
    assert_eq!(st.launches, 2, "{st:?}");
}

/// Not an assertion: host time of 200 small launches a step, plain and in graph mode.
#[test]
#[ignore = "needs a HIP device"]
fn timing_plain_launches_against_graph_mode() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    const LAUNCHES: usize = 200;
    const STEPS: usize = 50;
    let (_d, f, s) = fixture();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y = s.clone_htod(&host(0.0)).unwrap();
    let run = |label: &str| {
        let t = Instant::now();
        for _ in 0..STEPS {
            for _ in 0..LAUNCHES {
                axpy(&s, &f, 1e-6, &x.as_arg(), &y.as_arg());
            }
            s.synchronize().unwrap();
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / STEPS as f64;
        println!(
            "{label:>12}: {us:.1} us a step of {LAUNCHES} launches, {:.2} us a launch",
            us / LAUNCHES as f64
        );
    };
    run("plain");
    run("plain");
    s.set_graph_mode(Some(GraphMode::default())).unwrap();
    run("graph mode");
    run("graph mode");
    println!("{:?}", s.graph_stats().unwrap());
}

/// A device of the same GPU made, used and dropped on another thread while this stream
/// records: its allocator's synchronise-and-free, its module unload and its pinned and direct
/// frees wait for the recording to end (rocm_safe::graph's gate) instead of invalidating it.
#[test]
#[ignore = "needs a HIP device"]
fn another_threads_device_teardown_waits_for_the_recording() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (d, f, s) = fixture();
    let x = s.clone_htod(&host(2.0)).unwrap();
    let y0 = host(0.5);
    let y = s.clone_htod(&y0).unwrap();
    s.set_graph_mode(Some(GraphMode {
        max_nodes: 0,
        ..GraphMode::default()
    }))
    .unwrap();
    for _ in 0..8 {
        axpy(&s, &f, 0.5, &x.as_arg(), &y.as_arg());
    }
    assert!(rocm_safe::graph::recordings_in_progress() >= 1);
    std::thread::spawn(|| {
        let d2 = device();
        let m2 = module(&d2);
        let f2 = m2.function("axpy_f32").unwrap();
        let s2 = Stream::new(&d2).unwrap();
        let a = s2.clone_htod(&host(1.0)).unwrap();
        let b = s2.clone_htod(&host(0.0)).unwrap();
        axpy(&s2, &f2, 2.0, &a.as_arg(), &b.as_arg());
        let got = s2.clone_dtoh(&b).unwrap();
        let want: Vec<f32> = (0..N as usize)
            .map(|i| host(0.0)[i] + 2.0 * host(1.0)[i])
            .collect();
        assert_close(&got, &want, "the other thread's device");
        let direct = DeviceBuffer::<f32>::alloc(&s2, 1 << 20).unwrap();
        let pinned = rocm_safe::PinnedHostBuffer::<f32>::new(&d2, 1 << 16).unwrap();
        drop((direct, pinned, a, b));
        d2.allocator().trim().unwrap();
        drop((f2, m2, s2, d2));
    })
    .join()
    .unwrap();
    let got = s.clone_dtoh(&y).unwrap();
    let want: Vec<f32> = (0..N as usize)
        .map(|i| y0[i] + 8.0 * 0.5 * host(2.0)[i])
        .collect();
    assert_close(&got, &want, "the recorded stretch");
    let stats = s.graph_stats().unwrap();
    assert_eq!((stats.launches, stats.nodes), (1, 8), "{stats:?}");
    s.set_graph_mode(None).unwrap();
    assert_eq!(rocm_safe::graph::recordings_in_progress(), 0);
    d.check_err().unwrap();
}

/// Two threads queue work and read results back on one stream in graph mode: a read-back
/// (flush, copy, wait) is never caught in a recording the other thread begins, and every
/// result is that of plain launches.
#[test]
#[ignore = "needs a HIP device"]
fn threads_sharing_a_stream_in_graph_mode_get_plain_results() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (d, f, s) = fixture();
    s.set_graph_mode(Some(GraphMode {
        max_nodes: 16,
        ..GraphMode::default()
    }))
    .unwrap();
    std::thread::scope(|scope| {
        for t in 0..3u32 {
            let (s, f) = (&s, &f);
            scope.spawn(move || {
                let x = s.clone_htod(&host(1.0 + t as f32)).unwrap();
                for k in 0..40u32 {
                    let y0 = host(0.25 * k as f32);
                    let y = s.clone_htod(&y0).unwrap();
                    let reps = 1 + (k + t) % 5;
                    for _ in 0..reps {
                        axpy(s, f, 0.5, &x.as_arg(), &y.as_arg());
                    }
                    let got = s.clone_dtoh(&y).unwrap();
                    let xs = host(1.0 + t as f32);
                    let want: Vec<f32> = (0..N as usize)
                        .map(|i| y0[i] + reps as f32 * 0.5 * xs[i])
                        .collect();
                    assert_close(&got, &want, &format!("thread {t}, step {k}"));
                }
            });
        }
    });
    s.set_graph_mode(None).unwrap();
    d.check_err().unwrap();
}

/// `plain_head`: after a read-back, the first operations run as plain launches and recording
/// begins after them, so work that reads back every few operations makes no graphs at all.
#[test]
#[ignore = "needs a HIP device"]
fn the_plain_head_keeps_short_stretches_out_of_graphs() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, f, s) = fixture();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y0 = host(0.0);
    let y = s.clone_htod(&y0).unwrap();
    s.set_graph_mode(Some(GraphMode {
        plain_head: 3,
        ..GraphMode::default()
    }))
    .unwrap();
    let mut applied = 0.0f32;
    for (k, reps) in [10usize, 2, 3, 4, 1].into_iter().enumerate() {
        for _ in 0..reps {
            axpy(&s, &f, 0.5, &x.as_arg(), &y.as_arg());
        }
        applied += reps as f32;
        let got = s.clone_dtoh(&y).unwrap();
        let want: Vec<f32> = (0..N as usize)
            .map(|i| y0[i] + 0.5 * applied * host(1.0)[i])
            .collect();
        assert_close(&got, &want, &format!("stretch {k} of {reps}"));
    }
    let stats = s.graph_stats().unwrap();
    // Recorded: 10 - 3 and 4 - 3; the stretches of 2, 3 and 1 stay in the head.
    assert_eq!((stats.launches, stats.nodes), (2, 8), "{stats:?}");
    s.set_graph_mode(None).unwrap();
}

/// `first_nodes`: after a read-back the stretches grow from `first_nodes` operations, doubling
/// up to `max_nodes`, and the results are those of plain launches.
#[test]
#[ignore = "needs a HIP device"]
fn stretches_ramp_up_after_a_read_back() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (_d, f, s) = fixture();
    let x = s.clone_htod(&host(1.0)).unwrap();
    let y0 = host(0.0);
    let y = s.clone_htod(&y0).unwrap();
    s.set_graph_mode(Some(GraphMode {
        max_nodes: 8,
        first_nodes: 2,
        ..GraphMode::default()
    }))
    .unwrap();
    let mut applied = 0.0f32;
    for round in 0..2 {
        // 2 + 4 + 8 + 8 + 8, then 3 launched by the read-back: 6 stretches a round.
        for _ in 0..33 {
            axpy(&s, &f, 0.5, &x.as_arg(), &y.as_arg());
        }
        applied += 33.0;
        let got = s.clone_dtoh(&y).unwrap();
        let want: Vec<f32> = (0..N as usize)
            .map(|i| y0[i] + 0.5 * applied * host(1.0)[i])
            .collect();
        assert_close(&got, &want, &format!("round {round}"));
    }
    let stats = s.graph_stats().unwrap();
    assert_eq!((stats.launches, stats.nodes), (12, 66), "{stats:?}");
    s.set_graph_mode(None).unwrap();
}
