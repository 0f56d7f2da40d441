//! The rendezvous across processes, as ranks use it: rank 0 (this test) serves the store and
//! publishes an RCCL unique id; rank 1 (this test binary again, as a child process started
//! with torchrun's variables) reads the id from the environment-configured store and sends it
//! back. No GPU: the id is made from bytes, not by RCCL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rocm_safe::rccl::UniqueId;
use rocm_safe::rendezvous::{RankEnv, Rendezvous, RendezvousError};

const CHILD_TEST: &str = "rank_one_child_process";
const ID_KEY: &str = "rccl/unique_id";
const ECHO_KEY: &str = "echo/rank1";

fn sample_id() -> UniqueId {
    let bytes: Vec<u8> = (0..UniqueId::BYTES).map(|i| (i * 7 + 3) as u8).collect();
    UniqueId::from_bytes(&bytes).unwrap()
}

/// Rank 1's side. Started only by `two_processes_exchange_an_id_through_the_store`, which sets
/// RANK and friends; ignored in a plain run (where it has no rank 0 to talk to).
#[test]
#[ignore = "helper: run as rank 1 by two_processes_exchange_an_id_through_the_store"]
fn rank_one_child_process() {
    let env = RankEnv::from_env().expect("the parent sets RANK, WORLD_SIZE, MASTER_*");
    assert_eq!(env.rank, 1);
    let rdzv = Rendezvous::connect(env, Duration::from_secs(30)).unwrap();
    let id = UniqueId::from_bytes(&rdzv.get(ID_KEY).unwrap()).unwrap();
    // Send it back in the other textual form, so both encodings cross the process boundary.
    rdzv.set(ECHO_KEY, id.to_hex().as_bytes()).unwrap();
    rdzv.barrier("end").unwrap();
}

#[test]
fn two_processes_exchange_an_id_through_the_store() {
    let env = RankEnv {
        rank: 0,
        world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        local_rank: None,
    };
    let rdzv = Rendezvous::connect(env, Duration::from_secs(60)).unwrap();
    let port = rdzv.server_addr().unwrap().port();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            CHILD_TEST,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RANK", "1")
        .env("WORLD_SIZE", "2")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let id = sample_id();
    let shared = rdzv
        .share::<RendezvousError>(ID_KEY, || Ok(id.to_bytes().to_vec()))
        .unwrap();
    assert_eq!(shared, id.to_bytes());
    let echoed = String::from_utf8(rdzv.get(ECHO_KEY).unwrap()).unwrap();
    assert_eq!(UniqueId::from_hex(&echoed).unwrap(), id);
    rdzv.barrier("end").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "rank 1 failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_rank_without_rank_zero_fails_in_time_with_a_remedy() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let env = RankEnv {
        rank: 1,
        world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: port,
        local_rank: None,
    };
    let start = Instant::now();
    let e = Rendezvous::connect(env, Duration::from_millis(500)).unwrap_err();
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "took {:?}",
        start.elapsed()
    );
    assert!(matches!(e, RendezvousError::Connect { .. }), "{e}");
    assert!(e.to_string().contains("To fix: start rank 0"), "{e}");
}

#[test]
fn rank_zero_whose_peer_dies_gets_a_timeout_not_a_hang() {
    let env = RankEnv {
        rank: 0,
        world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        local_rank: None,
    };
    let rdzv = Rendezvous::connect(env, Duration::from_millis(400)).unwrap();
    // Rank 1 connects, publishes nothing, and goes away.
    let port = rdzv.server_addr().unwrap().port();
    let peer = RankEnv {
        rank: 1,
        world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: port,
        local_rank: None,
    };
    drop(Rendezvous::connect(peer, Duration::from_secs(5)).unwrap());
    let start = Instant::now();
    let e = rdzv.get(ECHO_KEY).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(matches!(e, RendezvousError::Timeout { .. }), "{e}");
}

#[test]
fn the_same_port_twice_is_a_bind_error() {
    let env = RankEnv {
        rank: 0,
        world_size: 1,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        local_rank: None,
    };
    let first = Rendezvous::connect(env.clone(), Duration::from_secs(5)).unwrap();
    let taken = RankEnv {
        master_port: first.server_addr().unwrap().port(),
        ..env
    };
    let e = Rendezvous::connect(taken, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, RendezvousError::Bind { .. }), "{e}");
    assert!(e.to_string().contains("pick a free MASTER_PORT"), "{e}");
}
