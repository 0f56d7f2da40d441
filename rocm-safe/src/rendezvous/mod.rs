//! Bootstrapping ranks in the style of torchrun: each process reads `RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR` and `MASTER_PORT` ([`RankEnv`]), rank 0 serves a small TCP key-value store on
//! `MASTER_PORT` ([`store`]), and every rank reaches it to share what one rank made (the RCCL
//! unique id) and to wait for the others ([`Rendezvous::barrier`]). Every wait has a timeout
//! and every failure is a typed [`RendezvousError`] that says what to do.
//!
//! Nothing here touches a GPU: it is plain `std::net`, usable and tested without ROCm.
//!
//! ```no_run
//! use rocm_safe::rendezvous::Rendezvous;
//! // RANK=0 WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 on one host, RANK=1 on another.
//! let rdzv = Rendezvous::from_env()?;
//! let id = rdzv.share("demo/id", || Ok(b"made by rank 0".to_vec()))?;
//! rdzv.barrier("ready")?;
//! # Ok::<(), rocm_safe::rendezvous::RendezvousError>(())
//! ```

pub mod store;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use parking_lot::Mutex;

pub use store::{StoreClient, StoreServer};

/// Default for how long a rank waits for the store, for a key, or for the other ranks.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the ranks could not meet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RendezvousError {
    /// A required environment variable is not set.
    #[error(
        "environment variable {name} is not set. To fix: launch every rank with RANK, \
         WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, as torchrun does (e.g. RANK=0 \
         WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 for the first of two ranks)"
    )]
    MissingVar {
        /// The variable.
        name: &'static str,
    },
    /// An environment variable does not parse.
    #[error(
        "environment variable {name}={value:?} is not {expected}. To fix: set it to {expected}"
    )]
    BadVar {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expected: &'static str,
    },
    /// `RANK` is not below `WORLD_SIZE`.
    #[error(
        "RANK={rank} is out of range for WORLD_SIZE={world_size}. To fix: number the ranks \
         0..WORLD_SIZE, each exactly once"
    )]
    RankOutOfRange {
        /// `RANK`.
        rank: usize,
        /// `WORLD_SIZE`.
        world_size: usize,
    },
    /// Rank 0 could not listen on `MASTER_PORT`.
    #[error(
        "rank 0 could not listen on {addr}: {error}. To fix: pick a free MASTER_PORT (another \
         job may hold this one), and run rank 0 on the MASTER_ADDR host"
    )]
    Bind {
        /// The address.
        addr: String,
        /// The system's message.
        error: String,
    },
    /// The store could not be reached in time.
    #[error(
        "could not reach rank 0's store at {addr} within {:.1} s (last error: {error}). To \
         fix: start rank 0, check MASTER_ADDR and MASTER_PORT on every rank, and that the \
         port is open between the hosts",
        .waited.as_secs_f64()
    )]
    Connect {
        /// `MASTER_ADDR:MASTER_PORT`.
        addr: String,
        /// How long it tried.
        waited: Duration,
        /// The last attempt's error.
        error: String,
    },
    /// A key was not set in time.
    #[error(
        "{key:?} was not published within {:.1} s: the rank that publishes it (rank 0 for \
         shared values, each rank for a barrier) has likely failed or not started. To fix: \
         check every rank's log; raise the timeout if ranks start far apart",
        .waited.as_secs_f64()
    )]
    Timeout {
        /// The key waited for.
        key: String,
        /// How long it waited.
        waited: Duration,
    },
    /// The connection to the store broke.
    #[error(
        "lost the connection to rank 0's store at {addr} during {op}: {error}. Rank 0 has \
         likely exited: check its log"
    )]
    Io {
        /// `set` or `get`.
        op: &'static str,
        /// The store's address.
        addr: String,
        /// The system's message.
        error: String,
    },
    /// Something other than a rendezvous store answered.
    #[error(
        "something other than a rendezvous store answers at {addr} ({detail}). To fix: point \
         MASTER_ADDR/MASTER_PORT at rank 0, or pick a MASTER_PORT no other service uses"
    )]
    Protocol {
        /// The address.
        addr: String,
        /// What was wrong.
        detail: String,
    },
    /// A key or value over the store's limits.
    #[error("the rendezvous {what} is {len} bytes, over the limit of {max}")]
    TooLarge {
        /// `key` or `value`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

/// Where this process sits among the ranks: what torchrun puts in the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankEnv {
    /// `RANK`: this process, `0..world_size`.
    pub rank: usize,
    /// `WORLD_SIZE`: number of processes.
    pub world_size: usize,
    /// `MASTER_ADDR`: host of rank 0 (name or address).
    pub master_addr: String,
    /// `MASTER_PORT`: port of rank 0's store (0 lets rank 0 pick one; tests only).
    pub master_port: u16,
    /// `LOCAL_RANK`: this process among those of its host, when set (the GPU to use).
    pub local_rank: Option<usize>,
}

impl RankEnv {
    /// Reads `RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT` and (optional) `LOCAL_RANK`.
    pub fn from_env() -> Result<RankEnv, RendezvousError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// As [`RankEnv::from_env`], reading variables through `get` (for tests and launchers).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<RankEnv, RendezvousError> {
        let required = |name: &'static str| {
            get(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or(RendezvousError::MissingVar { name })
        };
        let number = |name: &'static str, value: String| {
            value
                .trim()
                .parse::<usize>()
                .map_err(|_| RendezvousError::BadVar {
                    name,
                    value,
                    expected: "a non-negative integer",
                })
        };
        let rank = number("RANK", required("RANK")?)?;
        let world_size = number("WORLD_SIZE", required("WORLD_SIZE")?)?;
        if world_size == 0 {
            return Err(RendezvousError::BadVar {
                name: "WORLD_SIZE",
                value: "0".into(),
                expected: "a positive integer",
            });
        }
        if rank >= world_size {
            return Err(RendezvousError::RankOutOfRange { rank, world_size });
        }
        let master_addr = required("MASTER_ADDR")?.trim().to_string();
        let port = required("MASTER_PORT")?;
        let master_port = port
            .trim()
            .parse::<u16>()
            .map_err(|_| RendezvousError::BadVar {
                name: "MASTER_PORT",
                value: port,
                expected: "a TCP port (0-65535)",
            })?;
        let local_rank = match get("LOCAL_RANK").filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(number("LOCAL_RANK", v)?),
            None => None,
        };
        Ok(RankEnv {
            rank,
            world_size,
            master_addr,
            master_port,
            local_rank,
        })
    }

    /// `MASTER_ADDR:MASTER_PORT`, bracketing IPv6 literals.
    pub fn master(&self) -> String {
        match self.master_addr.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]:{}", self.master_port),
            _ => format!("{}:{}", self.master_addr, self.master_port),
        }
    }

    /// Where rank 0's store listens: `MASTER_ADDR` itself when it is a loopback address (a
    /// single-host job stays off the network), every interface otherwise (`MASTER_ADDR` may
    /// be a name or an address other hosts route to this one).
    fn listen_addr(&self) -> SocketAddr {
        match self.master_addr.parse::<IpAddr>() {
            Ok(ip) if ip.is_loopback() => SocketAddr::new(ip, self.master_port),
            Ok(IpAddr::V6(_)) => SocketAddr::new(
                IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                self.master_port,
            ),
            _ => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), self.master_port),
        }
    }
}

/// This rank's place in a rendezvous: rank 0 serves the store, every rank (rank 0 included)
/// talks to it through a client.
pub struct Rendezvous {
    env: RankEnv,
    timeout: Duration,
    client: Mutex<StoreClient>,
    // Declared last: rank 0's own client disconnects before the server stops.
    server: Option<StoreServer>,
}

impl Rendezvous {
    /// [`RankEnv::from_env`], then [`Rendezvous::connect`] with [`DEFAULT_TIMEOUT`].
    pub fn from_env() -> Result<Rendezvous, RendezvousError> {
        Self::connect(RankEnv::from_env()?, DEFAULT_TIMEOUT)
    }

    /// Rank 0 starts the store on `MASTER_PORT`; every rank then connects to it, retrying for
    /// up to `timeout` (ranks may start in any order). `timeout` also bounds every later wait.
    pub fn connect(env: RankEnv, timeout: Duration) -> Result<Rendezvous, RendezvousError> {
        let (server, addr) = if env.rank == 0 {
            let server = StoreServer::bind(env.listen_addr())?;
            let local = server.local_addr();
            // Rank 0 reaches its own store over loopback, whatever MASTER_ADDR names.
            let ip: IpAddr = if local.is_ipv6() {
                std::net::Ipv6Addr::LOCALHOST.into()
            } else {
                Ipv4Addr::LOCALHOST.into()
            };
            (Some(server), SocketAddr::new(ip, local.port()).to_string())
        } else {
            (None, env.master())
        };
        let client = StoreClient::connect(&addr, timeout)?;
        Ok(Rendezvous {
            env,
            timeout,
            client: Mutex::new(client),
            server,
        })
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.env.rank
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.env.world_size
    }

    /// The environment this rendezvous was made from.
    pub fn env(&self) -> &RankEnv {
        &self.env
    }

    /// On rank 0, the address its store listens on (useful with `MASTER_PORT=0`).
    pub fn server_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(StoreServer::local_addr)
    }

    /// Publishes `value` under `key`.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), RendezvousError> {
        self.client.lock().set(key, value)
    }

    /// Reads `key`, waiting up to the rendezvous timeout for a rank to publish it.
    pub fn get(&self, key: &str) -> Result<Vec<u8>, RendezvousError> {
        self.client.lock().get(key, self.timeout)
    }

    /// Rank 0 runs `make` and publishes its result under `key`; the other ranks wait for it.
    /// Every rank returns the same bytes. `make`'s error type must take a rendezvous error.
    pub fn share<E: From<RendezvousError>>(
        &self,
        key: &str,
        make: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<Vec<u8>, E> {
        if self.env.rank == 0 {
            let value = make()?;
            self.set(key, &value)?;
            Ok(value)
        } else {
            Ok(self.get(key)?)
        }
    }

    /// Returns once every rank has reached the barrier `name` (or the timeout passes). Use a
    /// new name for each barrier.
    pub fn barrier(&self, name: &str) -> Result<(), RendezvousError> {
        self.set(&format!("barrier/{name}/{}", self.env.rank), b"")?;
        for r in 0..self.env.world_size {
            self.get(&format!("barrier/{name}/{r}"))?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Rendezvous(rank {} of {}, store {})",
            self.env.rank,
            self.env.world_size,
            self.env.master()
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &str)]) -> Result<RankEnv, RendezvousError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        RankEnv::from_lookup(|k| map.get(k).cloned())
    }

    const FULL: [(&str, &str); 4] = [
        ("RANK", "1"),
        ("WORLD_SIZE", "2"),
        ("MASTER_ADDR", "node0"),
        ("MASTER_PORT", "29500"),
    ];

    #[test]
    fn torchrun_variables_parse() {
        let env = env_of(&FULL).unwrap();
        assert_eq!(
            env,
            RankEnv {
                rank: 1,
                world_size: 2,
                master_addr: "node0".into(),
                master_port: 29500,
                local_rank: None,
            }
        );
        assert_eq!(env.master(), "node0:29500");
        let mut with_local = FULL.to_vec();
        with_local.push(("LOCAL_RANK", "1"));
        assert_eq!(env_of(&with_local).unwrap().local_rank, Some(1));
        let mut v6 = FULL.to_vec();
        v6[2] = ("MASTER_ADDR", "::1");
        assert_eq!(env_of(&v6).unwrap().master(), "[::1]:29500");
    }

    #[test]
    fn bad_or_missing_variables_are_named() {
        for missing in ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"] {
            let vars: Vec<_> = FULL
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .collect();
            let e = env_of(&vars).unwrap_err();
            assert_eq!(e, RendezvousError::MissingVar { name: missing });
            assert!(e.to_string().contains("To fix"), "{e}");
        }
        let with = |k: &'static str, v: &'static str| {
            let mut vars = FULL.to_vec();
            vars.retain(|(name, _)| *name != k);
            vars.push((k, v));
            env_of(&vars).unwrap_err()
        };
        assert!(matches!(
            with("RANK", "one"),
            RendezvousError::BadVar { name: "RANK", .. }
        ));
        assert!(matches!(
            with("MASTER_PORT", "70000"),
            RendezvousError::BadVar {
                name: "MASTER_PORT",
                ..
            }
        ));
        assert!(matches!(
            with("WORLD_SIZE", "0"),
            RendezvousError::BadVar {
                name: "WORLD_SIZE",
                ..
            }
        ));
        assert!(matches!(
            with("LOCAL_RANK", "-1"),
            RendezvousError::BadVar {
                name: "LOCAL_RANK",
                ..
            }
        ));
        assert_eq!(
            with("RANK", "2"),
            RendezvousError::RankOutOfRange {
                rank: 2,
                world_size: 2
            }
        );
        assert!(matches!(
            with("MASTER_ADDR", " "),
            RendezvousError::MissingVar {
                name: "MASTER_ADDR"
            }
        ));
    }

    #[test]
    fn rank_zero_listens_on_loopback_only_when_asked_to() {
        let mut env = env_of(&FULL).unwrap();
        assert!(env.listen_addr().ip().is_unspecified());
        env.master_addr = "127.0.0.1".into();
        assert!(env.listen_addr().ip().is_loopback());
    }

    fn local(rank: usize, world_size: usize, port: u16) -> RankEnv {
        RankEnv {
            rank,
            world_size,
            master_addr: "127.0.0.1".into(),
            master_port: port,
            local_rank: None,
        }
    }

    #[test]
    fn three_ranks_share_a_value_and_meet_at_a_barrier() {
        let timeout = Duration::from_secs(10);
        let r0 = Rendezvous::connect(local(0, 3, 0), timeout).unwrap();
        let port = r0.server_addr().unwrap().port();
        let others: Vec<_> = (1..3)
            .map(|rank| {
                std::thread::spawn(move || {
                    let r = Rendezvous::connect(local(rank, 3, port), timeout).unwrap();
                    let v = r
                        .share::<RendezvousError>("id", || panic!("only rank 0 makes the value"))
                        .unwrap();
                    r.barrier("done").unwrap();
                    v
                })
            })
            .collect();
        let made = r0
            .share::<RendezvousError>("id", || Ok(vec![1, 2, 3]))
            .unwrap();
        r0.barrier("done").unwrap();
        for t in others {
            assert_eq!(t.join().unwrap(), made);
        }
    }

    #[test]
    fn a_rank_that_never_arrives_times_out_the_barrier() {
        let r0 = Rendezvous::connect(local(0, 2, 0), Duration::from_millis(300)).unwrap();
        let e = r0.barrier("lonely").unwrap_err();
        assert!(
            matches!(&e, RendezvousError::Timeout { key, .. } if key == "barrier/lonely/1"),
            "{e}"
        );
    }
}
