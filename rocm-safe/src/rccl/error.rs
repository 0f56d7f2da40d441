//! [`RcclError`]: what went wrong between GPUs, and what to do about it.

use std::time::Duration;

use rocm_sys::rccl::{ncclResult_t, Rccl};

/// A failure of RCCL or of a collective's arguments. Reaches callers as
/// [`RocmError::Rccl`](crate::RocmError::Rccl).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RcclError {
    /// An RCCL call returned an error code.
    #[error(
        "RCCL {op} failed on rank {rank}: {} (code {code}): {message}{}.{}",
        result_name(*.code),
        .last_error.as_deref().map(|e| format!(" ({e})")).unwrap_or_default(),
        result_hint(*.code)
    )]
    Call {
        /// The entry point that failed, e.g. `ncclAllReduce`.
        op: &'static str,
        /// The rank that saw it (`-1` before a communicator exists).
        rank: i32,
        /// The raw `ncclResult_t` (its C name, e.g. `ncclRemoteError`, is in the message).
        code: u32,
        /// RCCL's description of the code (`ncclGetErrorString`).
        message: String,
        /// RCCL's last error message (`ncclGetLastError`), when it has one.
        last_error: Option<String>,
    },
    /// Queued work did not finish in time and no error was reported: a peer is likely dead or
    /// stuck. The communicator has been aborted.
    #[error(
        "RCCL {op} on rank {rank} of {nranks} did not finish within {:.1} s and no peer \
         reported an error: a peer process has likely died, hung or never joined. The \
         communicator was aborted; create a new one on every rank. To fix: check every rank's \
         log (NCCL_DEBUG=INFO shows RCCL's view), or raise the timeout if the work is just slow",
        .waited.as_secs_f64()
    )]
    Timeout {
        /// What was being waited for.
        op: &'static str,
        /// This rank.
        rank: usize,
        /// Ranks in the communicator.
        nranks: usize,
        /// How long it waited.
        waited: Duration,
    },
    /// The communicator was aborted (after an error or a timeout) and cannot be used.
    #[error(
        "RCCL communicator of rank {rank} was aborted after an earlier error and cannot run \
         {op}. To fix: create a new communicator (new unique id) on every rank"
    )]
    Aborted {
        /// The operation that was refused.
        op: &'static str,
        /// This rank.
        rank: usize,
    },
    /// A collective's arguments are inconsistent; nothing was queued.
    #[error("RCCL {op}: {detail}")]
    InvalidArgument {
        /// The collective.
        op: &'static str,
        /// What is wrong and what is expected.
        detail: String,
    },
    /// A unique id given as text or bytes is malformed.
    #[error(
        "invalid RCCL unique id: {detail}. To fix: pass exactly the 128 bytes (or 256 hex \
         digits) that rank 0's UniqueId::new produced"
    )]
    BadUniqueId {
        /// What is wrong with it.
        detail: String,
    },
}

/// The C name of a result code, `ncclResult(N)` for codes this crate does not know.
fn result_name(code: u32) -> String {
    ncclResult_t(code)
        .name()
        .map_or_else(|| format!("ncclResult({code})"), str::to_string)
}

const REMOTE_ERROR: u32 = ncclResult_t::ncclRemoteError.0;

fn result_hint(code: u32) -> &'static str {
    match ncclResult_t(code) {
        ncclResult_t::ncclRemoteError => {
            " A peer process exited or the network between ranks failed: the communicator is \
             unusable. To fix: restart every rank; check the failing peer's log"
        }
        ncclResult_t::ncclSystemError => {
            " To fix: check the network and shared memory RCCL uses (NCCL_SOCKET_IFNAME names \
             the interface, /dev/shm must be large enough in containers); NCCL_DEBUG=INFO \
             shows what failed"
        }
        ncclResult_t::ncclInvalidUsage => {
            " To fix: every rank must call the same collectives in the same order with the \
             same counts and data type, each rank on its own GPU"
        }
        ncclResult_t::ncclInvalidArgument => {
            " To fix: check the rank, count, data type and buffers passed (NCCL_DEBUG=WARN \
             says which)"
        }
        ncclResult_t::ncclUnhandledCudaError => {
            " A HIP call inside RCCL failed: check the GPU is usable (rocm-info) and that \
             every rank uses a different GPU"
        }
        _ => "",
    }
}

impl RcclError {
    /// The `ncclResult_t` of a failed call, `None` for the other variants.
    pub fn result(&self) -> Option<ncclResult_t> {
        match self {
            RcclError::Call { code, .. } => Some(ncclResult_t(*code)),
            _ => None,
        }
    }

    /// Whether the error means a peer (or the link to it) is gone: a remote error or a
    /// timeout.
    pub fn is_peer_failure(&self) -> bool {
        matches!(
            self,
            RcclError::Timeout { .. }
                | RcclError::Call {
                    code: REMOTE_ERROR,
                    ..
                }
        )
    }

    /// Builds the error for a failed call, asking RCCL for its description.
    pub(crate) fn call(
        rccl: &Rccl,
        op: &'static str,
        rank: i32,
        code: ncclResult_t,
        last_error: Option<String>,
    ) -> Self {
        RcclError::Call {
            op,
            rank,
            code: code.0,
            message: rccl.error_string(code),
            last_error: last_error.filter(|s| !s.is_empty()),
        }
    }

    pub(crate) fn invalid(op: &'static str, detail: impl Into<String>) -> Self {
        RcclError::InvalidArgument {
            op,
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_says_what_to_do() {
        let remote = RcclError::Call {
            op: "ncclAllReduce",
            rank: 1,
            code: 6,
            message: "remote process exited or there was a network error".into(),
            last_error: Some("peer 0 closed the connection".into()),
        };
        let s = remote.to_string();
        assert!(
            s.starts_with("RCCL ncclAllReduce failed on rank 1: ncclRemoteError (code 6)"),
            "{s}"
        );
        assert!(s.contains("(peer 0 closed the connection)"), "{s}");
        assert!(s.contains("restart every rank"), "{s}");
        assert!(remote.is_peer_failure());
        assert_eq!(remote.result(), Some(ncclResult_t::ncclRemoteError));
        let cases = [
            RcclError::Timeout {
                op: "wait",
                rank: 0,
                nranks: 2,
                waited: Duration::from_secs(30),
            },
            RcclError::Aborted {
                op: "ncclAllGather",
                rank: 3,
            },
            RcclError::BadUniqueId {
                detail: "5 bytes".into(),
            },
        ];
        for c in cases {
            assert!(c.to_string().contains("To fix"), "{c}");
        }
        let t = RcclError::Timeout {
            op: "wait",
            rank: 0,
            nranks: 2,
            waited: Duration::from_millis(1500),
        };
        assert!(t.to_string().contains("within 1.5 s"), "{t}");
        assert!(t.is_peer_failure());
    }

    #[test]
    fn unknown_codes_keep_their_value() {
        let e = RcclError::Call {
            op: "ncclGroupEnd",
            rank: -1,
            code: 42,
            message: "unknown result code".into(),
            last_error: None,
        };
        assert_eq!(
            e.to_string(),
            "RCCL ncclGroupEnd failed on rank -1: ncclResult(42) (code 42): unknown result code."
        );
        assert!(!e.is_peer_failure());
    }
}
