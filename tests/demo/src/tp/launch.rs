//! One process per GPU on one host, in the style of torchrun: [`spawn_ranks`] starts `N` copies
//! of a program with `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and `LOCAL_RANK` set
//! (and `NCCL_NVLS_ENABLE=0`), [`wait_ranks`] waits for them with every wait bounded, and
//! [`join`] is what each rank runs first: the rendezvous (rank 0 serves the TCP store and
//! publishes RCCL's unique id through it) and the communicator on GPU `LOCAL_RANK` (else
//! `RANK`). The same variables set by hand (or by torchrun) on several hosts work as well.

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use candle_rocm::collective::Comm;
use rocm_safe::rendezvous::{RankEnv, Rendezvous};

use super::TpError;

/// One rank's process, started by [`spawn_ranks`].
#[derive(Debug)]
pub struct RankProcess {
    /// The rank it plays.
    pub rank: usize,
    child: Child,
}

/// The environment of rank `rank` of `world_size` on this host, its store on
/// `127.0.0.1:port`: torchrun's variables, and NCCL's NVLink multicast off (the RCCL double
/// runs on NCCL in the harness; RCCL ignores the variable).
pub fn rank_env(rank: usize, world_size: usize, port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("RANK", rank.to_string()),
        ("WORLD_SIZE", world_size.to_string()),
        ("LOCAL_RANK", rank.to_string()),
        ("MASTER_ADDR", "127.0.0.1".to_string()),
        ("MASTER_PORT", port.to_string()),
        ("NCCL_NVLS_ENABLE", "0".to_string()),
    ]
}

/// A TCP port free on loopback now (the operating system's pick), for rank 0's store.
pub fn free_port() -> Result<u16, TpError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| TpError::Rank {
            rank: 0,
            reason: format!("no free loopback port for the rendezvous store: {e}"),
        })
}

/// Starts ranks `ranks` of `world_size` as `exe args`, each with [`rank_env`] (store on
/// `port`) and `extra` set; their output goes where this process's goes. On a failure to
/// start, the ranks already started are killed.
pub fn spawn_ranks(
    exe: &Path,
    args: &[String],
    ranks: std::ops::Range<usize>,
    world_size: usize,
    port: u16,
    extra: &[(&str, String)],
) -> Result<Vec<RankProcess>, TpError> {
    let mut started: Vec<RankProcess> = Vec::with_capacity(ranks.len());
    for rank in ranks {
        let mut cmd = Command::new(exe);
        cmd.args(args);
        for (k, v) in rank_env(rank, world_size, port).iter().chain(extra) {
            cmd.env(k, v);
        }
        match cmd.spawn() {
            Ok(child) => started.push(RankProcess { rank, child }),
            Err(e) => {
                for mut p in started {
                    let _ = p.child.kill();
                    let _ = p.child.wait();
                }
                return Err(TpError::Rank {
                    rank,
                    reason: format!("could not start {}: {e}", exe.display()),
                });
            }
        }
    }
    Ok(started)
}

/// Waits for every rank to exit. When one fails, the others get `grace` to notice (their
/// collectives time out into errors) before they are killed; `limit`, when given, bounds the
/// whole wait (then every rank still running is killed). Returns the first failure.
pub fn wait_ranks(
    mut ranks: Vec<RankProcess>,
    grace: Duration,
    limit: Option<Duration>,
) -> Result<(), TpError> {
    let start = Instant::now();
    let mut failure: Option<(TpError, Instant)> = None;
    while !ranks.is_empty() {
        let mut i = 0;
        while i < ranks.len() {
            match ranks[i].child.try_wait() {
                Ok(Some(status)) => {
                    let p = ranks.swap_remove(i);
                    if !status.success() && failure.is_none() {
                        failure = Some((
                            TpError::Rank {
                                rank: p.rank,
                                reason: format!("exited with {status}"),
                            },
                            Instant::now(),
                        ));
                    }
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let p = ranks.swap_remove(i);
                    if failure.is_none() {
                        failure = Some((
                            TpError::Rank {
                                rank: p.rank,
                                reason: format!("could not be waited for: {e}"),
                            },
                            Instant::now(),
                        ));
                    }
                }
            }
        }
        let over_grace = failure.as_ref().is_some_and(|(_, t)| t.elapsed() > grace);
        let over_limit = limit.is_some_and(|l| start.elapsed() > l);
        if !ranks.is_empty() && (over_grace || over_limit) {
            for p in &mut ranks {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
            if failure.is_none() {
                let rank = ranks[0].rank;
                failure = Some((
                    TpError::Rank {
                        rank,
                        reason: format!(
                            "still running after {:.0} s: killed",
                            start.elapsed().as_secs_f64()
                        ),
                    },
                    Instant::now(),
                ));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    match failure {
        Some((e, _)) => Err(e),
        None => Ok(()),
    }
}

/// What a rank runs first: reads torchrun's variables, meets the other ranks (`timeout`
/// bounds every rendezvous wait), and joins the RCCL communicator on GPU `LOCAL_RANK` (else
/// `RANK`), rank 0 having made the unique id and published it through the store.
pub fn join(timeout: Duration) -> Result<(Rendezvous, Comm), TpError> {
    let env = RankEnv::from_env()?;
    let ordinal = env.local_rank.unwrap_or(env.rank);
    let rdzv = Rendezvous::connect(env, timeout)?;
    let comm = Comm::from_rendezvous(&rdzv, ordinal)?;
    tracing::info!(
        rank = rdzv.rank(),
        world_size = rdzv.world_size(),
        ordinal,
        "tp: joined the communicator"
    );
    Ok((rdzv, comm))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn ranks_get_torchruns_variables_and_nvls_off() {
        let env = rank_env(1, 2, 29500);
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        let parsed = RankEnv::from_lookup(get).unwrap();
        assert_eq!(
            (parsed.rank, parsed.world_size, parsed.master_port),
            (1, 2, 29500)
        );
        assert_eq!(parsed.local_rank, Some(1));
        assert_eq!(get("NCCL_NVLS_ENABLE").as_deref(), Some("0"));
    }

    /// A rank that fails makes the wait return its error, and a rank that would hang is killed
    /// after the grace period: the wait is bounded.
    #[test]
    fn a_failed_rank_ends_the_wait_and_the_others_are_killed() {
        let sh = Path::new("/bin/sh");
        let args = |s: &str| vec!["-c".to_string(), s.to_string()];
        let ok = spawn_ranks(sh, &args("exit 0"), 0..2, 2, 1, &[]).unwrap();
        wait_ranks(ok, Duration::from_secs(5), Some(Duration::from_secs(30))).unwrap();
        let mut ranks = spawn_ranks(sh, &args("exit 3"), 0..1, 2, 1, &[]).unwrap();
        ranks.extend(spawn_ranks(sh, &args("sleep 60"), 1..2, 2, 1, &[]).unwrap());
        let start = Instant::now();
        let e = wait_ranks(ranks, Duration::from_millis(300), None).unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            start.elapsed()
        );
        assert!(matches!(&e, TpError::Rank { rank: 0, .. }), "{e}");
        let hung = spawn_ranks(sh, &args("sleep 60"), 0..1, 1, 1, &[]).unwrap();
        let e = wait_ranks(
            hung,
            Duration::from_secs(1),
            Some(Duration::from_millis(300)),
        )
        .unwrap_err();
        assert!(e.to_string().contains("killed"), "{e}");
    }
}
