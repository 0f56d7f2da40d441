//! Two ranks in two processes, the way a tensor-parallel model runs: each test is rank 0 on
//! GPU 0 and serves the rendezvous; it starts this binary again, running the same test, as
//! rank 1 on GPU 1 with torchrun's variables and `ROCM_SAFE_RCCL_TEST_ROLE` (which makes the
//! test play rank 1's part; no helper is listed as a test of its own). The ranks share RCCL's unique id through the rendezvous, create a
//! communicator each (`ncclCommInitRank`), and run every collective against host references;
//! in the fault test rank 1 exits after one collective and rank 0 must get a typed error
//! within its timeout, never a hang.
//!
//! Ignored in CI (no GPU, no RCCL); `tests/hip-on-cuda/run.sh` runs it with
//! `--include-ignored` where it sees two GPUs and the RCCL double (NCCL underneath).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rocm_safe::rccl::{group, Communicator, ReduceOp, UniqueId};
use rocm_safe::rendezvous::{RankEnv, Rendezvous};
use rocm_safe::{Device, DeviceBuffer, RocmError, Stream};

const ROLE_VAR: &str = "ROCM_SAFE_RCCL_TEST_ROLE";
/// Elements per rank: odd, and more than one RCCL chunk.
const LEN: usize = 300_007;

struct Rank {
    rdzv: Rendezvous,
    stream: Arc<Stream>,
    comm: Communicator,
}

fn join(rdzv: Rendezvous) -> Rank {
    let rank = rdzv.rank();
    let dev = Device::new(rank).unwrap_or_else(|e| panic!("rank {rank} needs GPU {rank}: {e}"));
    let stream = Stream::new(&dev).unwrap();
    let id = UniqueId::exchange(dev.runtime(), &rdzv, "rccl/id").unwrap();
    let comm = Communicator::init_rank_timeout(&stream, &id, rank, 2, Duration::from_secs(60))
        .unwrap()
        .with_timeout(Duration::from_secs(30));
    assert_eq!(comm.query().unwrap(), (rank, 2, rank));
    Rank { rdzv, stream, comm }
}

/// Rank r's input: element i is (r + 1) * (i % 1000), exact in f32.
fn input(rank: usize) -> Vec<f32> {
    (0..LEN).map(|i| ((rank + 1) * (i % 1000)) as f32).collect()
}

/// Every collective once, checked against host references on both ranks.
fn collectives(r: &Rank) {
    let (rank, c, s) = (r.comm.rank(), &r.comm, &r.stream);
    // All-reduce: sum and max.
    let send = s.clone_htod(&input(rank)).unwrap();
    let mut out = DeviceBuffer::<f32>::alloc(s, LEN).unwrap();
    c.all_reduce(&send, &mut out, ReduceOp::Sum).unwrap();
    c.wait().unwrap();
    let want: Vec<f32> = (0..LEN).map(|i| (3 * (i % 1000)) as f32).collect();
    assert_eq!(s.clone_dtoh(&out).unwrap(), want, "all-reduce sum");
    c.all_reduce(&send, &mut out, ReduceOp::Max).unwrap();
    c.wait().unwrap();
    assert_eq!(s.clone_dtoh(&out).unwrap(), input(1), "all-reduce max");
    // All-gather: rank 0's block, then rank 1's.
    let mut gathered = DeviceBuffer::<f32>::alloc(s, 2 * LEN).unwrap();
    c.all_gather(&send, &mut gathered).unwrap();
    c.wait().unwrap();
    let mut want = input(0);
    want.extend(input(1));
    assert_eq!(s.clone_dtoh(&gathered).unwrap(), want, "all-gather");
    // Reduce-scatter of the gathered data: rank r gets 2 x block r.
    let mut block = DeviceBuffer::<f32>::alloc(s, LEN).unwrap();
    c.reduce_scatter(&gathered, &mut block, ReduceOp::Sum)
        .unwrap();
    c.wait().unwrap();
    let want: Vec<f32> = input(rank).iter().map(|v| 2.0 * v).collect();
    assert_eq!(s.clone_dtoh(&block).unwrap(), want, "reduce-scatter");
    // Broadcast from rank 1, in bf16 (a type RCCL has and NCCL has).
    let mine: Vec<half::bf16> = (0..LEN)
        .map(|i| half::bf16::from_f32((rank * 7 + i % 5) as f32))
        .collect();
    let mut b = s.clone_htod(&mine).unwrap();
    c.broadcast_in_place(&mut b, 1).unwrap();
    c.wait().unwrap();
    let want: Vec<half::bf16> = (0..LEN)
        .map(|i| half::bf16::from_f32((7 + i % 5) as f32))
        .collect();
    assert_eq!(s.clone_dtoh(&b).unwrap(), want, "broadcast");
    // Send/recv both ways in one group, in i16 (moved bytewise).
    let peer = 1 - rank;
    let out_msg: Vec<i16> = (0..LEN)
        .map(|i| (rank as i16 + 1) * (i % 300) as i16)
        .collect();
    let send_msg = s.clone_htod(&out_msg).unwrap();
    let mut recv_msg = DeviceBuffer::<i16>::alloc(s, LEN).unwrap();
    group(s.device().runtime(), || {
        c.send(&send_msg, peer)?;
        c.recv(&mut recv_msg, peer)
    })
    .unwrap();
    c.wait().unwrap();
    let want: Vec<i16> = (0..LEN)
        .map(|i| (peer as i16 + 1) * (i % 300) as i16)
        .collect();
    assert_eq!(s.clone_dtoh(&recv_msg).unwrap(), want, "send/recv");
}

/// The role this process plays when a rank-0 test started it as rank 1 (`None` when the test
/// harness started it: it is rank 0).
fn child_role() -> Option<String> {
    std::env::var(ROLE_VAR).ok().filter(|r| !r.is_empty())
}

/// Rank 1: the same test binary, running the same test (`test`) with torchrun's variables and
/// `ROLE_VAR` set, so no helper test of its own is listed. Its output goes to a file, read
/// back by [`finish`].
fn spawn_rank_one(test: &str, role: &str, port: u16) -> (Child, std::path::PathBuf) {
    let log = std::env::temp_dir().join(format!(
        "rocm-safe-rccl-rank1-{}-{role}.log",
        std::process::id()
    ));
    let file = std::fs::File::create(&log).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            test,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env(ROLE_VAR, role)
        .stdout(Stdio::from(file.try_clone().unwrap()))
        .stderr(Stdio::from(file))
        .spawn()
        .unwrap();
    (child, log)
}

/// Waits for rank 1 to exit, at most `limit` (then kills it): a hung rank fails the test with
/// its log instead of hanging it. Returns whether it exited successfully.
fn finish((mut child, log): (Child, std::path::PathBuf), limit: Duration) -> bool {
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    match status {
        Some(s) => {
            if !s.success() {
                eprintln!("rank 1 exited with {s}:\n{out}");
            }
            s.success()
        }
        None => panic!("rank 1 did not exit within {limit:?} (killed):\n{out}"),
    }
}

/// Rank 0's rendezvous on a free port, and rank 1 started against it, running `test`.
fn rank_zero(test: &str, role: &str) -> (Rendezvous, (Child, std::path::PathBuf)) {
    let env = RankEnv {
        rank: 0,
        world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        local_rank: None,
    };
    let rdzv = Rendezvous::connect(env, Duration::from_secs(60)).unwrap();
    let port = rdzv.server_addr().unwrap().port();
    (rdzv, spawn_rank_one(test, role, port))
}

/// Rank 1's side of both tests, chosen by ROLE_VAR.
fn rank_one(role: &str) {
    let r =
        join(Rendezvous::connect(RankEnv::from_env().unwrap(), Duration::from_secs(60)).unwrap());
    match role {
        "collectives" => {
            collectives(&r);
            r.rdzv.barrier("done").unwrap();
            // Drop the communicator now, while rank 0 drops its own: RCCL's (NCCL's)
            // teardown meets the other rank.
            drop(r);
        }
        "die" => {
            let mut x = r.stream.clone_htod(&input(1)).unwrap();
            r.comm.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
            r.comm.wait().unwrap();
            r.rdzv.barrier("before-death").unwrap();
            // A crash: no destructor, no ncclCommDestroy.
            std::process::exit(0);
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn two_processes_run_every_collective() {
    if let Some(role) = child_role() {
        return rank_one(&role);
    }
    let (rdzv, child) = rank_zero("two_processes_run_every_collective", "collectives");
    let r = join(rdzv);
    collectives(&r);
    r.rdzv.barrier("done").unwrap();
    // Both ranks tear their communicators down together (each waits for the other inside
    // RCCL's teardown, bounded by the communicator's timeout): rank 0 must not hold its own
    // while it waits for rank 1 to exit.
    let start = Instant::now();
    let rt = r.stream.device().runtime().clone();
    drop(r);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    rt.check_err().unwrap();
    assert!(finish(child, Duration::from_secs(60)), "rank 1 failed");
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn a_rank_that_dies_gives_the_other_a_typed_error_within_the_timeout() {
    if let Some(role) = child_role() {
        return rank_one(&role);
    }
    let (rdzv, child) = rank_zero(
        "a_rank_that_dies_gives_the_other_a_typed_error_within_the_timeout",
        "die",
    );
    let r = join(rdzv);
    let mut x = r.stream.clone_htod(&input(0)).unwrap();
    r.comm.all_reduce_in_place(&mut x, ReduceOp::Sum).unwrap();
    r.comm.wait().unwrap();
    r.rdzv.barrier("before-death").unwrap();
    assert!(
        finish(child, Duration::from_secs(60)),
        "rank 1 exits on purpose"
    );
    // Rank 1 is gone: this all-reduce can never complete.
    let timeout = Duration::from_secs(10);
    let start = Instant::now();
    let outcome = r
        .comm
        .all_reduce_in_place(&mut x, ReduceOp::Sum)
        .and_then(|()| r.comm.wait_timeout(timeout));
    let elapsed = start.elapsed();
    let e = outcome.expect_err("an all-reduce with a dead peer succeeded");
    assert!(
        matches!(&e, RocmError::Rccl(r) if r.is_peer_failure()),
        "not a peer failure: {e}"
    );
    assert!(
        elapsed < timeout + Duration::from_secs(20),
        "took {elapsed:?}: {e}"
    );
    // The communicator is aborted: further use is refused, and dropping it does not hang.
    let again = r
        .comm
        .all_reduce_in_place(&mut x, ReduceOp::Sum)
        .unwrap_err();
    assert!(again.to_string().contains("aborted"), "{again}");
    let start = Instant::now();
    drop(r);
    assert!(start.elapsed() < Duration::from_secs(20));
}
