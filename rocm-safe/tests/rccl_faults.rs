//! RCCL failure paths through the RCCL double's failure injection (tests/hip-on-cuda/
//! rccl_on_nccl.c): run by `tests/hip-on-cuda/run.sh` in processes of their own, once with
//! `RCCL_ON_NCCL_FAIL_AFTER=N` (a collective fails as it is queued) and once with
//! `RCCL_ON_NCCL_ASYNC_FAIL_AFTER=N` (RCCL reports a dead peer while work runs). Every injected
//! failure must come back as a typed error that says what to do, never as a panic or a hang.
//!
//! With two GPUs a round is one group of two all-reduces; the failure hits the second
//! communicator while the first one's all-reduce is already queued in the group (launched by
//! `ncclGroupEnd` with no partner), so the group must abort both communicators: else the first
//! one's kernel waits forever and the teardown with it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use rocm_safe::rccl::{group, Communicator, RcclError, ReduceOp};
use rocm_safe::{Device, RocmError, Stream};

fn injected(var: &str) -> Option<usize> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

#[test]
#[ignore = "needs a HIP device and the RCCL double's failure injection"]
fn injected_rccl_failures_are_typed_errors() {
    let sync = injected("RCCL_ON_NCCL_FAIL_AFTER");
    let async_ = injected("RCCL_ON_NCCL_ASYNC_FAIL_AFTER");
    assert!(
        sync.is_some() || async_.is_some(),
        "run under the RCCL double with RCCL_ON_NCCL_FAIL_AFTER or RCCL_ON_NCCL_ASYNC_FAIL_AFTER"
    );
    let n = Device::count().unwrap();
    let streams: Vec<Arc<Stream>> = (0..n)
        .map(|i| Stream::new(&Device::new(i).unwrap()).unwrap())
        .collect();
    let rt = streams[0].device().runtime().clone();
    let comms: Vec<Communicator> = Communicator::init_all(&streams)
        .unwrap()
        .into_iter()
        .map(|c| c.with_timeout(Duration::from_secs(20)))
        .collect();
    let mut bufs: Vec<_> = streams
        .iter()
        .map(|s| s.clone_htod(&[1.0f32; 1024]).unwrap())
        .collect();
    let budget = sync.or(async_).unwrap_or(0);
    let mut failure = None;
    // Enough rounds to pass the budget (each round queues one collective per communicator).
    for _ in 0..budget + 2 {
        let round = group(&rt, || {
            for (c, b) in comms.iter().zip(bufs.iter_mut()) {
                c.all_reduce_in_place(b, ReduceOp::Sum)?;
            }
            Ok(())
        })
        .and_then(|()| comms.iter().try_for_each(Communicator::wait));
        if let Err(e) = round {
            failure = Some(e);
            break;
        }
    }
    let e = failure.expect("the injected failure never surfaced");
    match &e {
        RocmError::Rccl(r @ RcclError::Call { code: 6, .. }) => {
            assert!(r.is_peer_failure());
            assert!(e.to_string().contains("restart every rank"), "{e}");
        }
        other => panic!("expected ncclRemoteError as a typed error, got {other}"),
    }
    // The failed group aborted every communicator it used (its partly launched work could
    // never finish): later use of any of them is refused, in both passes.
    for (c, b) in comms.iter().zip(bufs.iter_mut()) {
        let again = c.all_reduce_in_place(b, ReduceOp::Sum);
        assert!(
            matches!(again, Err(RocmError::Rccl(RcclError::Aborted { .. }))),
            "rank {}: {again:?}",
            c.rank()
        );
    }
    // Nothing left to hang on: dropping the communicators, buffers and streams returns.
    let start = std::time::Instant::now();
    drop(comms);
    drop(bufs);
    drop(streams);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}
