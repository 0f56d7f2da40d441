//! RCCL collectives on real devices, one process driving every visible GPU through
//! `ncclCommInitAll` and groups. Ignored in CI (no GPU, no RCCL); the HIP-on-CUDA harness
//! runs them with `--include-ignored` once it carries an RCCL double (issue 29), where a
//! missing device or library is a failure. With one GPU they run as a single rank.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use rocm_safe::rccl::{group, Communicator, RcclError, ReduceOp};
use rocm_safe::{Device, DeviceBuffer, RocmError, Runtime, Stream};

fn comms() -> (Arc<Runtime>, Vec<Communicator>) {
    let n = Device::count().unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"));
    let streams: Vec<Arc<Stream>> = (0..n)
        .map(|i| Stream::new(&Device::new(i).unwrap()).unwrap())
        .collect();
    let rt = streams[0].device().runtime().clone();
    let comms = Communicator::init_all(&streams).unwrap();
    (rt, comms)
}

#[test]
#[ignore = "needs a HIP device and RCCL"]
fn all_reduce_every_op_across_every_gpu() {
    let (rt, comms) = comms();
    let n = comms.len();
    let len = 1001; // odd on purpose
    for (op, expect) in [
        (ReduceOp::Sum, (1..=n).sum::<usize>() as f32),
        (ReduceOp::Max, n as f32),
        (ReduceOp::Min, 1.0),
        (ReduceOp::Prod, (1..=n).product::<usize>() as f32),
        (ReduceOp::Avg, (1..=n).sum::<usize>() as f32 / n as f32),
    ] {
        let mut bufs: Vec<DeviceBuffer<f32>> = comms
            .iter()
            .map(|c| {
                c.stream()
                    .clone_htod(&vec![(c.rank() + 1) as f32; len])
                    .unwrap()
            })
            .collect();
        group(&rt, || {
            for (c, b) in comms.iter().zip(bufs.iter_mut()) {
                c.all_reduce_in_place(b, op)?;
            }
            Ok(())
        })
        .unwrap();
        for (c, b) in comms.iter().zip(&bufs) {
            c.wait().unwrap();
            let host = c.stream().clone_dtoh(b).unwrap();
            assert!(
                host.iter().all(|&v| (v - expect).abs() < 1e-5),
                "{op:?}: {}",
                host[0]
            );
        }
    }
}

#[test]
#[ignore = "needs a HIP device and RCCL"]
fn all_gather_then_reduce_scatter_round_trips() {
    let (rt, comms) = comms();
    let n = comms.len();
    let per = 37;
    let sends: Vec<DeviceBuffer<f32>> = comms
        .iter()
        .map(|c| {
            let v: Vec<f32> = (0..per).map(|i| (c.rank() * 1000 + i) as f32).collect();
            c.stream().clone_htod(&v).unwrap()
        })
        .collect();
    let mut gathered: Vec<DeviceBuffer<f32>> = comms
        .iter()
        .map(|c| DeviceBuffer::alloc(c.stream(), per * n).unwrap())
        .collect();
    group(&rt, || {
        for ((c, s), g) in comms.iter().zip(&sends).zip(gathered.iter_mut()) {
            c.all_gather(s, g)?;
        }
        Ok(())
    })
    .unwrap();
    let expect: Vec<f32> = (0..n)
        .flat_map(|r| (0..per).map(move |i| (r * 1000 + i) as f32))
        .collect();
    for (c, g) in comms.iter().zip(&gathered) {
        c.wait().unwrap();
        assert_eq!(c.stream().clone_dtoh(g).unwrap(), expect);
    }
    // Reduce-scatter the gathered data: rank r gets n x its own block.
    let mut back: Vec<DeviceBuffer<f32>> = comms
        .iter()
        .map(|c| DeviceBuffer::alloc(c.stream(), per).unwrap())
        .collect();
    group(&rt, || {
        for ((c, g), b) in comms.iter().zip(&gathered).zip(back.iter_mut()) {
            c.reduce_scatter(g, b, ReduceOp::Sum)?;
        }
        Ok(())
    })
    .unwrap();
    for (c, b) in comms.iter().zip(&back) {
        c.wait().unwrap();
        let want: Vec<f32> = (0..per)
            .map(|i| (n * (c.rank() * 1000 + i)) as f32)
            .collect();
        assert_eq!(c.stream().clone_dtoh(b).unwrap(), want);
    }
}

#[test]
#[ignore = "needs a HIP device and RCCL"]
fn bad_arguments_never_reach_rccl_and_abort_is_final() {
    let (_rt, comms) = comms();
    let c = &comms[0];
    let n = c.world_size();
    let send = c.stream().clone_htod(&[1.0f32; 4]).unwrap();
    let mut short = DeviceBuffer::<f32>::alloc(c.stream(), 4 * n + 1).unwrap();
    let e = c.all_gather(&send, &mut short).unwrap_err();
    assert!(
        matches!(e, RocmError::Rccl(RcclError::InvalidArgument { .. })),
        "{e}"
    );
    let mut other_stream = Stream::new(c.device())
        .unwrap()
        .clone_htod(&[0.0f32; 4])
        .unwrap();
    let e = c
        .all_reduce_in_place(&mut other_stream, ReduceOp::Sum)
        .unwrap_err();
    assert!(e.to_string().contains("communicator's stream"), "{e}");
    let e = c.send(&send, n).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let (rank, count, device) = c.query().unwrap();
    assert_eq!((rank, count, device), (0, n, c.device().ordinal()));
    c.wait_timeout(Duration::from_secs(10)).unwrap();
    c.abort().unwrap();
    let mut buf = c.stream().clone_htod(&[1.0f32; 4]).unwrap();
    let e = c.all_reduce_in_place(&mut buf, ReduceOp::Sum).unwrap_err();
    assert!(
        matches!(e, RocmError::Rccl(RcclError::Aborted { .. })),
        "{e}"
    );
}

/// Graph mode with `record_rccl` (one thread per rank, as a tensor-parallel model runs): each
/// step's upload and all-reduce are recorded into one graph, launched by the read-back, and
/// give the sums plain launches give.
#[test]
#[ignore = "needs a HIP device and RCCL"]
fn graph_mode_records_collectives() {
    use rocm_safe::graph::GraphMode;
    const STEPS: usize = 3;
    let (_rt, comms) = comms();
    let n = comms.len();
    for c in &comms {
        c.stream()
            .set_graph_mode(Some(GraphMode {
                max_nodes: 0,
                record_rccl: true,
                ..GraphMode::default()
            }))
            .unwrap();
    }
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                for step in 0..STEPS {
                    let mut b = c
                        .stream()
                        .clone_htod(&vec![(c.rank() + 1 + step) as f32; 1001])
                        .unwrap();
                    c.all_reduce_in_place(&mut b, ReduceOp::Sum).unwrap();
                    let host = c.stream().clone_dtoh(&b).unwrap();
                    let want: f32 = (0..n).map(|r| (r + 1 + step) as f32).sum();
                    assert!(
                        host.iter().all(|&v| v == want),
                        "rank {} step {step}: {} instead of {want}",
                        c.rank(),
                        host[0]
                    );
                }
                let stats = c.stream().graph_stats().unwrap();
                // Upload and all-reduce recorded together, one graph a step.
                assert_eq!(
                    (stats.launches, stats.nodes),
                    (STEPS as u64, 2 * STEPS as u64),
                    "rank {}: {stats:?}",
                    c.rank()
                );
            });
        }
    });
    for c in &comms {
        c.wait().unwrap();
        c.stream().set_graph_mode(None).unwrap();
    }
}
