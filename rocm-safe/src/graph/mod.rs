//! HIP graphs: record a stream's work once ([`Capture`]), turn it into an executable graph
//! ([`GraphExec`]) and replay it with one launch; refresh the replay's kernel arguments and
//! buffer addresses with [`GraphExec::update`] when only they changed.
//!
//! | HIP | rocm-safe |
//! |---|---|
//! | `hipStreamBeginCapture` / `hipStreamEndCapture` | [`Stream::begin_capture`], [`Capture::end`], [`Stream::capture`] |
//! | `hipStreamIsCapturing` | [`Stream::capture_status`] |
//! | `hipGraph_t`, `hipGraphDestroy` | [`Graph`] |
//! | `hipGraphInstantiate`, `hipGraphExecUpdate`, `hipGraphLaunch`, `hipGraphExecDestroy` | [`GraphExec`] |
//!
//! The entry points are optional in rocm-sys: a runtime that lacks one makes every call here
//! return [`RocmError::GraphsUnavailable`], and the caller runs plain launches instead.
//!
//! # What may run while a stream captures
//!
//! Kernel launches, device-to-device copies, memsets and event records are recorded, not run.
//! Everything that needs the work to have *run* is refused with
//! [`RocmError::NotCapturable`] before it reaches the runtime (the runtime would reject it and
//! invalidate the capture): [`Stream::synchronize`], [`Stream::is_idle`], the copies that wait
//! or read pageable host memory (`clone_htod`, `memcpy_htod`, `upload`, `clone_dtoh`,
//! `memcpy_dtoh`) and [`crate::CachingAllocator::trim`]. A caller that meets one abandons the
//! capture (drop the [`Capture`], or return the error from [`Stream::capture`]'s closure) and
//! runs the step as plain launches.
//!
//! # Memory a graph uses
//!
//! A graph holds raw device addresses. Two kinds:
//! - memory allocated *during* the capture from the device's caching allocator (the step's
//!   intermediates) comes from the capture's [`GraphPool`]. A pool's blocks are handed only to
//!   allocations of captures into that pool, and the pool lives as long as any [`Capture`],
//!   [`Graph`] or [`GraphExec`] that uses it, so a later launch never overwrites memory that
//!   other work was given meanwhile. Pass the pool of the previous capture
//!   ([`GraphExec::pool`]) to the next capture of the same step: its intermediates then reuse
//!   the same blocks, the addresses mostly stay the same, and no raw allocation happens while
//!   capturing.
//! - memory allocated *before* the capture (weights, inputs, a KV cache) is the caller's: it
//!   must stay allocated while an executable graph that reads or writes it can still be
//!   launched. This is why [`GraphExec::launch`] is `unsafe`.
//!
//! Memory the allocator is asked for on other streams during a capture, direct
//! ([`crate::DeviceBuffer::alloc`]) allocations and pinned host memory are not pooled. Work
//! of other streams cannot be joined into a capture (the runtime rejects a wait on an event
//! recorded outside it): a captured step uses memory of its own stream only.
//!
//! # How a decode step uses this (the plan for candle-rocm, issue 27)
//!
//! 1. The first step of a model runs as plain launches (it also fills the caches: kernel
//!    lookups, rocBLAS handles, the allocator's buckets). The second is captured with a new
//!    pool, instantiated and launched; later steps are captured into the exec's pool
//!    ([`GraphExec::pool`]) and applied with [`GraphExec::update`] — capturing costs host
//!    time per launch too, but no driver submission, and the replay is one launch.
//! 2. [`UpdateOutcome::NeedsInstantiate`] (the KV cache crossed a size where a kernel's grid or
//!    a code path changes) re-instantiates from the new graph; keeping a few execs keyed by
//!    such a shape class avoids re-instantiating when a model alternates between them.
//! 3. Per-token host data (positions, the token id, a mask) cannot be uploaded while
//!    capturing: it is written into pinned buffers owned by the graph state before the
//!    launch, and the captured step copies from them (a device-side copy node).
//! 4. Anything refused inside the step ([`RocmError::NotCapturable`], say a host read the
//!    model makes) drops the capture, logs the reason once with `tracing`, and the step runs
//!    as plain launches; so does [`RocmError::GraphsUnavailable`]. Results never depend on
//!    which path ran.

pub(crate) mod batch;
mod capture;
mod exec;
mod exec_cache;
pub(crate) mod gate;

pub use batch::{GraphMode, GraphModeStats, PlainOp};
pub use capture::{Capture, GraphPool};
pub use exec::{Graph, GraphExec};
pub use gate::recordings_in_progress;

use rocm_sys::{
    hipError_t, hipGraphExecUpdateResult, hipGraphExec_t, hipGraphNode_t, hipGraph_t,
    hipStreamCaptureMode, hipStreamCaptureStatus, hipStream_t, HipApi,
};

use crate::error::RocmError;

#[cfg(doc)]
use crate::Stream;

/// How strictly the runtime rejects calls that cannot be captured while a capture is active
/// (`hipStreamCaptureMode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CaptureMode {
    /// Unsafe calls from any thread are rejected while this capture is active.
    Global,
    /// Unsafe calls from the capturing thread are rejected (the default: other threads,
    /// working on other streams or devices, are unaffected).
    #[default]
    ThreadLocal,
    /// Nothing is rejected by the runtime; rocm-safe's own checks still apply.
    Relaxed,
}

impl CaptureMode {
    /// The HIP value.
    pub fn raw(self) -> hipStreamCaptureMode {
        match self {
            CaptureMode::Global => hipStreamCaptureMode::hipStreamCaptureModeGlobal,
            CaptureMode::ThreadLocal => hipStreamCaptureMode::hipStreamCaptureModeThreadLocal,
            CaptureMode::Relaxed => hipStreamCaptureMode::hipStreamCaptureModeRelaxed,
        }
    }
}

/// What the runtime says about a stream's capture (`hipStreamCaptureStatus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaptureStatus {
    /// Not capturing.
    None,
    /// Capturing.
    Active,
    /// Capturing, but an error invalidated the capture: ending it fails.
    Invalidated,
    /// A value newer than these bindings.
    Unknown(u32),
}

impl From<hipStreamCaptureStatus> for CaptureStatus {
    fn from(s: hipStreamCaptureStatus) -> Self {
        match s {
            hipStreamCaptureStatus::hipStreamCaptureStatusNone => CaptureStatus::None,
            hipStreamCaptureStatus::hipStreamCaptureStatusActive => CaptureStatus::Active,
            hipStreamCaptureStatus::hipStreamCaptureStatusInvalidated => CaptureStatus::Invalidated,
            other => CaptureStatus::Unknown(other.0),
        }
    }
}

/// Why [`GraphExec::update`] could not apply a graph (`hipGraphExecUpdateResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UpdateFailure {
    /// An unexpected failure (`hipGraphExecUpdateError`).
    Error,
    /// Nodes or edges were added or removed (`...ErrorTopologyChanged`).
    TopologyChanged,
    /// A node changed type (`...ErrorNodeTypeChanged`).
    NodeTypeChanged,
    /// A kernel node runs another function (`...ErrorFunctionChanged`).
    FunctionChanged,
    /// Parameters changed in a way update does not support (`...ErrorParametersChanged`).
    ParametersChanged,
    /// Something about a node is not supported by update (`...ErrorNotSupported`).
    NotSupported,
    /// A function change update does not support (`...ErrorUnsupportedFunctionChange`).
    UnsupportedFunctionChange,
    /// A value newer than these bindings.
    Unknown(u32),
}

impl From<hipGraphExecUpdateResult> for UpdateFailure {
    fn from(r: hipGraphExecUpdateResult) -> Self {
        use hipGraphExecUpdateResult as R;
        match r {
            R::hipGraphExecUpdateError | R::hipGraphExecUpdateSuccess => UpdateFailure::Error,
            R::hipGraphExecUpdateErrorTopologyChanged => UpdateFailure::TopologyChanged,
            R::hipGraphExecUpdateErrorNodeTypeChanged => UpdateFailure::NodeTypeChanged,
            R::hipGraphExecUpdateErrorFunctionChanged => UpdateFailure::FunctionChanged,
            R::hipGraphExecUpdateErrorParametersChanged => UpdateFailure::ParametersChanged,
            R::hipGraphExecUpdateErrorNotSupported => UpdateFailure::NotSupported,
            R::hipGraphExecUpdateErrorUnsupportedFunctionChange => {
                UpdateFailure::UnsupportedFunctionChange
            }
            other => UpdateFailure::Unknown(other.0),
        }
    }
}

/// What [`GraphExec::update`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum UpdateOutcome {
    /// The executable graph now runs the new graph's parameters.
    Updated,
    /// The new graph differs in more than parameters: instantiate it instead. The executable
    /// graph refuses to launch until a later update applies.
    NeedsInstantiate(UpdateFailure),
}

/// Reads `hipGraphExecUpdate`'s status and result: an update that was not applied is an
/// outcome, not an error; any other failing status is an error code.
pub(crate) fn update_outcome(
    code: hipError_t,
    result: hipGraphExecUpdateResult,
) -> Result<UpdateOutcome, hipError_t> {
    let applied = result == hipGraphExecUpdateResult::hipGraphExecUpdateSuccess;
    if code.is_success() {
        return Ok(if applied {
            UpdateOutcome::Updated
        } else {
            UpdateOutcome::NeedsInstantiate(result.into())
        });
    }
    if code == hipError_t::hipErrorGraphExecUpdateFailure {
        return Ok(UpdateOutcome::NeedsInstantiate(result.into()));
    }
    Err(code)
}

type BeginFn = unsafe extern "C" fn(hipStream_t, hipStreamCaptureMode) -> hipError_t;
type EndFn = unsafe extern "C" fn(hipStream_t, *mut hipGraph_t) -> hipError_t;
type IsCapturingFn = unsafe extern "C" fn(hipStream_t, *mut hipStreamCaptureStatus) -> hipError_t;
type InstantiateFn = unsafe extern "C" fn(
    *mut hipGraphExec_t,
    hipGraph_t,
    *mut hipGraphNode_t,
    *mut std::ffi::c_char,
    usize,
) -> hipError_t;
type ExecUpdateFn = unsafe extern "C" fn(
    hipGraphExec_t,
    hipGraph_t,
    *mut hipGraphNode_t,
    *mut hipGraphExecUpdateResult,
) -> hipError_t;
type LaunchFn = unsafe extern "C" fn(hipGraphExec_t, hipStream_t) -> hipError_t;
type ExecDestroyFn = unsafe extern "C" fn(hipGraphExec_t) -> hipError_t;
type DestroyFn = unsafe extern "C" fn(hipGraph_t) -> hipError_t;

/// The graph entry points of a runtime, each one `Some`: resolved once per runtime from the
/// optional entries of [`HipApi`] ([`crate::Runtime::graphs`]).
#[derive(Clone, Copy)]
pub(crate) struct GraphApi {
    pub(crate) begin: BeginFn,
    pub(crate) end: EndFn,
    pub(crate) is_capturing: IsCapturingFn,
    pub(crate) instantiate: InstantiateFn,
    pub(crate) exec_update: ExecUpdateFn,
    pub(crate) launch: LaunchFn,
    pub(crate) exec_destroy: ExecDestroyFn,
    pub(crate) destroy: DestroyFn,
}

/// The same entry points as the runtime's optional symbols.
pub(crate) struct GraphSymbols {
    begin: Option<BeginFn>,
    end: Option<EndFn>,
    is_capturing: Option<IsCapturingFn>,
    instantiate: Option<InstantiateFn>,
    exec_update: Option<ExecUpdateFn>,
    launch: Option<LaunchFn>,
    exec_destroy: Option<ExecDestroyFn>,
    destroy: Option<DestroyFn>,
}

impl GraphSymbols {
    pub(crate) fn of(hip: &HipApi) -> Self {
        GraphSymbols {
            begin: hip.hipStreamBeginCapture,
            end: hip.hipStreamEndCapture,
            is_capturing: hip.hipStreamIsCapturing,
            instantiate: hip.hipGraphInstantiate,
            exec_update: hip.hipGraphExecUpdate,
            launch: hip.hipGraphLaunch,
            exec_destroy: hip.hipGraphExecDestroy,
            destroy: hip.hipGraphDestroy,
        }
    }
}

impl GraphApi {
    /// All eight entry points, or [`RocmError::GraphsUnavailable`] naming the missing ones of
    /// the library `from`.
    pub(crate) fn resolve(s: GraphSymbols, from: &str) -> Result<GraphApi, RocmError> {
        let mut missing = Vec::new();
        let mut need = |name: &'static str, present: bool| {
            if !present {
                missing.push(name);
            }
        };
        need("hipStreamBeginCapture", s.begin.is_some());
        need("hipStreamEndCapture", s.end.is_some());
        need("hipStreamIsCapturing", s.is_capturing.is_some());
        need("hipGraphInstantiate", s.instantiate.is_some());
        need("hipGraphExecUpdate", s.exec_update.is_some());
        need("hipGraphLaunch", s.launch.is_some());
        need("hipGraphExecDestroy", s.exec_destroy.is_some());
        need("hipGraphDestroy", s.destroy.is_some());
        let unavailable = || RocmError::GraphsUnavailable {
            reason: format!(
                "the HIP runtime {from} does not export {} (graphs need HIP 4.5 or newer)",
                missing.join(", ")
            ),
        };
        match (
            s.begin,
            s.end,
            s.is_capturing,
            s.instantiate,
            s.exec_update,
            s.launch,
            s.exec_destroy,
            s.destroy,
        ) {
            (
                Some(begin),
                Some(end),
                Some(is_capturing),
                Some(instantiate),
                Some(exec_update),
                Some(launch),
                Some(exec_destroy),
                Some(destroy),
            ) => Ok(GraphApi {
                begin,
                end,
                is_capturing,
                instantiate,
                exec_update,
                launch,
                exec_destroy,
                destroy,
            }),
            _ => Err(unavailable()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_modes_have_hips_values() {
        // hip_runtime_api.h: Global = 0, ThreadLocal, Relaxed (CUDA's CUstreamCaptureMode too).
        assert_eq!(CaptureMode::Global.raw().0, 0);
        assert_eq!(CaptureMode::ThreadLocal.raw().0, 1);
        assert_eq!(CaptureMode::Relaxed.raw().0, 2);
        assert_eq!(CaptureMode::default(), CaptureMode::ThreadLocal);
    }

    #[test]
    fn capture_status_keeps_unknown_values() {
        let s = |v| CaptureStatus::from(hipStreamCaptureStatus(v));
        assert_eq!(s(0), CaptureStatus::None);
        assert_eq!(s(1), CaptureStatus::Active);
        assert_eq!(s(2), CaptureStatus::Invalidated);
        assert_eq!(s(77), CaptureStatus::Unknown(77));
    }

    #[test]
    fn update_results_map_to_outcomes() {
        let r = hipGraphExecUpdateResult;
        let ok = hipError_t::hipSuccess;
        let failed = hipError_t::hipErrorGraphExecUpdateFailure;
        assert_eq!(
            failed.0, 910,
            "hip_runtime_api.h: hipErrorGraphExecUpdateFailure = 910"
        );
        assert_eq!(update_outcome(ok, r(0)), Ok(UpdateOutcome::Updated));
        let expect = [
            (1, UpdateFailure::Error),
            (2, UpdateFailure::TopologyChanged),
            (3, UpdateFailure::NodeTypeChanged),
            (4, UpdateFailure::FunctionChanged),
            (5, UpdateFailure::ParametersChanged),
            (6, UpdateFailure::NotSupported),
            (7, UpdateFailure::UnsupportedFunctionChange),
            (8, UpdateFailure::Unknown(8)),
        ];
        for (v, want) in expect {
            assert_eq!(
                update_outcome(failed, r(v)),
                Ok(UpdateOutcome::NeedsInstantiate(want)),
                "{v}"
            );
            // A runtime that reports success with a failing result did not apply it either.
            assert_eq!(
                update_outcome(ok, r(v)),
                Ok(UpdateOutcome::NeedsInstantiate(want))
            );
        }
        // A failure status with a "success" result is still not applied.
        assert_eq!(
            update_outcome(failed, r(0)),
            Ok(UpdateOutcome::NeedsInstantiate(UpdateFailure::Error))
        );
        // Any other failure is an error, not an outcome.
        let invalid = hipError_t::hipErrorInvalidValue;
        assert_eq!(update_outcome(invalid, r(0)), Err(invalid));
    }

    unsafe extern "C" fn begin(_: hipStream_t, _: hipStreamCaptureMode) -> hipError_t {
        hipError_t::hipSuccess
    }
    unsafe extern "C" fn end(_: hipStream_t, _: *mut hipGraph_t) -> hipError_t {
        hipError_t::hipSuccess
    }
    unsafe extern "C" fn is_capturing(
        _: hipStream_t,
        _: *mut hipStreamCaptureStatus,
    ) -> hipError_t {
        hipError_t::hipSuccess
    }
    unsafe extern "C" fn instantiate(
        _: *mut hipGraphExec_t,
        _: hipGraph_t,
        _: *mut hipGraphNode_t,
        _: *mut std::ffi::c_char,
        _: usize,
    ) -> hipError_t {
        hipError_t::hipSuccess
    }
    unsafe extern "C" fn exec_update(
        _: hipGraphExec_t,
        _: hipGraph_t,
        _: *mut hipGraphNode_t,
        _: *mut hipGraphExecUpdateResult,
    ) -> hipError_t {
        hipError_t::hipSuccess
    }
    unsafe extern "C" fn launch(_: hipGraphExec_t, _: hipStream_t) -> hipError_t {
        hipError_t::hipSuccess
    }
    unsafe extern "C" fn exec_destroy(_: hipGraphExec_t) -> hipError_t {
        hipError_t::hipSuccess
    }
    unsafe extern "C" fn destroy(_: hipGraph_t) -> hipError_t {
        hipError_t::hipSuccess
    }

    fn all() -> GraphSymbols {
        GraphSymbols {
            begin: Some(begin),
            end: Some(end),
            is_capturing: Some(is_capturing),
            instantiate: Some(instantiate),
            exec_update: Some(exec_update),
            launch: Some(launch),
            exec_destroy: Some(exec_destroy),
            destroy: Some(destroy),
        }
    }

    #[test]
    fn a_runtime_with_every_entry_point_has_graphs() {
        assert!(GraphApi::resolve(all(), "libamdhip64.so.6").is_ok());
    }

    #[test]
    fn a_missing_entry_point_makes_graphs_unavailable_with_its_name() {
        let mut s = all();
        s.exec_update = None;
        s.launch = None;
        let e = GraphApi::resolve(s, "/opt/rocm-4.3/lib/libamdhip64.so").err();
        match e {
            Some(RocmError::GraphsUnavailable { reason }) => {
                assert!(
                    reason.contains("hipGraphExecUpdate, hipGraphLaunch"),
                    "{reason}"
                );
                assert!(
                    reason.contains("/opt/rocm-4.3/lib/libamdhip64.so"),
                    "{reason}"
                );
                assert!(!reason.contains("hipGraphDestroy"), "{reason}");
            }
            other => panic!(
                "expected GraphsUnavailable, got {:?}",
                other.map(|e| e.to_string())
            ),
        }
        let msg = GraphApi::resolve(
            GraphSymbols {
                begin: None,
                ..all()
            },
            "x",
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(msg.starts_with("graphs unavailable: "), "{msg}");
        assert!(msg.contains("plain kernel launches"), "{msg}");
    }
}
