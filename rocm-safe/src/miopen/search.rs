//! How a convolution's candidates are obtained from MIOpen (immediate mode's ranked
//! solutions, or find's timed algorithms) and how the chosen one is queued: the only code
//! that differs between the forward and backward-data directions, whose entry points take the
//! same descriptors in different orders.

use std::ffi::{c_int, c_void};

use rocm_sys::miopen::{
    miopenConvAlgoPerf_t, miopenConvBwdDataAlgorithm_t, miopenConvFwdAlgorithm_t,
    miopenConvSolution_t, miopenHandle_t, miopenStatus_t,
};
use rocm_sys::Miopen;

use super::config::unsupported;
use super::plan::{usable, Algo, Candidate, ConvDirection};
use super::{ConvPlan, MiopenHandle};
use crate::buffer::DeviceBuffer;
use crate::error::{check_miopen, Result, RocmError};

/// Most find results asked for: the fastest few, as fallbacks when memory is short.
const FIND_RESULTS: usize = 4;

impl MiopenHandle {
    /// Immediate mode: the library's ranked solutions within the workspace limit, the first
    /// that compiles first (one that fails to compile is dropped).
    pub(super) fn immediate_candidates(
        &self,
        dir: ConvDirection,
        plan: &ConvPlan,
    ) -> Result<Vec<Candidate>> {
        let lib = &self.lib;
        let (x, w, y, conv) = (plan.x.raw, plan.w.raw, plan.y.raw, plan.conv.raw);
        let missing = || unsupported("MIOpen lacks the immediate-mode entry points".into());
        let mut count = 0usize;
        let (code, op) = match dir {
            ConvDirection::Forward => {
                let f = lib
                    .miopenConvolutionForwardGetSolutionCount
                    .ok_or_else(missing)?;
                // SAFETY: live handle and descriptors; valid out-pointer. Order per miopen.h:
                // handle, wDesc, xDesc, convDesc, yDesc.
                let code = unsafe { f(self.raw, w, x, conv, y, &mut count) };
                (code, "miopenConvolutionForwardGetSolutionCount")
            }
            ConvDirection::BackwardData => {
                let f = lib
                    .miopenConvolutionBackwardDataGetSolutionCount
                    .ok_or_else(missing)?;
                // SAFETY: as above; order per miopen.h: handle, dyDesc, wDesc, convDesc, dxDesc.
                let code = unsafe { f(self.raw, y, w, conv, x, &mut count) };
                (code, "miopenConvolutionBackwardDataGetSolutionCount")
            }
        };
        check_miopen(lib, op, code)?;
        let mut sols = vec![miopenConvSolution_t::default(); count.clamp(1, 256)];
        let mut returned = 0usize;
        let (code, op) = match dir {
            ConvDirection::Forward => {
                let f = lib
                    .miopenConvolutionForwardGetSolution
                    .ok_or_else(missing)?;
                // SAFETY: live handle and descriptors; `sols` holds `sols.len()` entries, the
                // most MIOpen writes; valid out-pointer for the count.
                let code = unsafe {
                    f(
                        self.raw,
                        w,
                        x,
                        conv,
                        y,
                        sols.len(),
                        &mut returned,
                        sols.as_mut_ptr(),
                    )
                };
                (code, "miopenConvolutionForwardGetSolution")
            }
            ConvDirection::BackwardData => {
                let f = lib
                    .miopenConvolutionBackwardDataGetSolution
                    .ok_or_else(missing)?;
                // SAFETY: as above, in the backward-data order (dy, w, conv, dx).
                let code = unsafe {
                    f(
                        self.raw,
                        y,
                        w,
                        conv,
                        x,
                        sols.len(),
                        &mut returned,
                        sols.as_mut_ptr(),
                    )
                };
                (code, "miopenConvolutionBackwardDataGetSolution")
            }
        };
        check_miopen(lib, op, code)?;
        sols.truncate(returned.min(sols.len()));
        let ranked = sols.iter().map(|s| Candidate {
            algo: Algo::Solution(s.solution_id),
            workspace: s.workspace_size,
            time_ms: s.time,
        });
        let mut cands = usable(ranked, self.policy.workspace_limit);
        // Compile the first one now (not inside the first execution); drop what fails.
        while let Some(first) = cands.first() {
            let Algo::Solution(id) = first.algo else {
                break;
            };
            let (code, op) = match dir {
                ConvDirection::Forward => {
                    let f = lib
                        .miopenConvolutionForwardCompileSolution
                        .ok_or_else(missing)?;
                    // SAFETY: live handle and descriptors; `id` came from GetSolution for them.
                    (
                        unsafe { f(self.raw, w, x, conv, y, id) },
                        "miopenConvolutionForwardCompileSolution",
                    )
                }
                ConvDirection::BackwardData => {
                    let f = lib
                        .miopenConvolutionBackwardDataCompileSolution
                        .ok_or_else(missing)?;
                    // SAFETY: as above, in the backward-data order.
                    (
                        unsafe { f(self.raw, y, w, conv, x, id) },
                        "miopenConvolutionBackwardDataCompileSolution",
                    )
                }
            };
            if code == miopenStatus_t::miopenStatusSuccess {
                break;
            }
            if cands.len() == 1 {
                check_miopen(lib, op, code)?;
            }
            cands.remove(0);
        }
        Ok(cands)
    }

    /// Find: the fastest few algorithms, timed on the device within the workspace limit.
    pub(super) fn find_candidates(
        &self,
        dir: ConvDirection,
        plan: &ConvPlan,
        (a, w_ptr, out): (*mut c_void, *mut c_void, *mut c_void),
    ) -> Result<Vec<Candidate>> {
        let lib = &self.lib;
        let (x, w, y, conv) = (plan.x.raw, plan.w.raw, plan.y.raw, plan.conv.raw);
        let mut find_ws = 0usize;
        let (code, op) = match dir {
            // SAFETY: live handle and descriptors; valid out-pointer. Order per miopen.h:
            // handle, wDesc, xDesc, convDesc, yDesc.
            ConvDirection::Forward => (
                unsafe {
                    (lib.miopenConvolutionForwardGetWorkSpaceSize)(
                        self.raw,
                        w,
                        x,
                        conv,
                        y,
                        &mut find_ws,
                    )
                },
                "miopenConvolutionForwardGetWorkSpaceSize",
            ),
            // SAFETY: as above; order per miopen.h: handle, dyDesc, wDesc, convDesc, dxDesc.
            ConvDirection::BackwardData => (
                unsafe {
                    (lib.miopenConvolutionBackwardDataGetWorkSpaceSize)(
                        self.raw,
                        y,
                        w,
                        conv,
                        x,
                        &mut find_ws,
                    )
                },
                "miopenConvolutionBackwardDataGetWorkSpaceSize",
            ),
        };
        check_miopen(lib, op, code)?;
        // A smaller workspace only narrows the algorithms find may pick (miopen.h), so the
        // limit, or an out-of-memory, degrades the search rather than failing it.
        let want = find_ws.min(self.policy.workspace_limit);
        let find_buf = match DeviceBuffer::<u8>::alloc_cached(&self.stream, want) {
            Ok(b) => b,
            Err(RocmError::OutOfMemory { .. }) => {
                DeviceBuffer::<u8>::alloc_cached(&self.stream, 0)?
            }
            Err(e) => return Err(e),
        };
        let mut perf = [miopenConvAlgoPerf_t::default(); FIND_RESULTS];
        let mut returned: c_int = 0;
        let (ws, ws_len) = (find_buf.device_ptr(), find_buf.len());
        let (code, op) = match dir {
            // SAFETY: live handle and descriptors describing exactly the buffers behind `a`,
            // `w_ptr` and `out` (lengths checked by the caller, which also ordered them on
            // `self.stream`); room for FIND_RESULTS results; the workspace holds `ws_len`
            // bytes. Find writes only `out` and the workspace.
            ConvDirection::Forward => (
                unsafe {
                    (lib.miopenFindConvolutionForwardAlgorithm)(
                        self.raw,
                        x,
                        a,
                        w,
                        w_ptr,
                        conv,
                        y,
                        out,
                        FIND_RESULTS as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                        ws,
                        ws_len,
                        false,
                    )
                },
                "miopenFindConvolutionForwardAlgorithm",
            ),
            // SAFETY: as above, with dy = `a` (described by `y`) and dx = `out` (described by
            // `x`), in miopen.h's order (dyDesc, dy, wDesc, w, convDesc, dxDesc, dx).
            ConvDirection::BackwardData => (
                unsafe {
                    (lib.miopenFindConvolutionBackwardDataAlgorithm)(
                        self.raw,
                        y,
                        a,
                        w,
                        w_ptr,
                        conv,
                        x,
                        out,
                        FIND_RESULTS as c_int,
                        &mut returned,
                        perf.as_mut_ptr(),
                        ws,
                        ws_len,
                        false,
                    )
                },
                "miopenFindConvolutionBackwardDataAlgorithm",
            ),
        };
        check_miopen(lib, op, code)?;
        let n = usize::try_from(returned).unwrap_or(0).min(FIND_RESULTS);
        let ranked = perf[..n].iter().map(|r| Candidate {
            algo: Algo::Legacy(r.algo),
            workspace: r.memory,
            time_ms: r.time,
        });
        Ok(usable(ranked, ws_len.max(want)))
    }
}

/// Queues one convolution of `plan` with `algo`: the immediate-mode or find-mode execution call
/// of direction `dir`. For backward data, `a` is dy and `out` is dx. Returns the status and the
/// entry point's name.
pub(super) fn exec(
    lib: &Miopen,
    handle: miopenHandle_t,
    dir: ConvDirection,
    plan: &ConvPlan,
    algo: Algo,
    (a, w, out): (*mut c_void, *mut c_void, *mut c_void),
    (ws, ws_len): (*mut c_void, usize),
) -> (miopenStatus_t, &'static str) {
    let (one, zero) = (1.0f32, 0.0f32);
    let (alpha, beta) = ((&one as *const f32).cast(), (&zero as *const f32).cast());
    let (xd, wd, yd, cd) = (plan.x.raw, plan.w.raw, plan.y.raw, plan.conv.raw);
    let not_loaded = miopenStatus_t::miopenStatusNotImplemented;
    // The contract of every call below (each SAFETY comment refers to it): the plan's descriptors describe exactly the buffers behind `a`, `w`
    // and `out`, whose lengths the public entry points checked against the same dims; `algo`
    // came from this library's GetSolution or find for these descriptors; the workspace holds
    // `ws_len` bytes, at least what that candidate needs; alpha = 1, beta = 0 as host floats;
    // the handle is bound to the stream every operand was ordered on; `out` is borrowed
    // exclusively by the caller, so it does not alias the inputs. Argument orders per miopen.h.
    match (dir, algo) {
        (ConvDirection::Forward, Algo::Solution(id)) => {
            let op = "miopenConvolutionForwardImmediate";
            match lib.miopenConvolutionForwardImmediate {
                Some(f) => (
                    // SAFETY: the contract above; `id` names a solution of these descriptors.
                    unsafe { f(handle, wd, w, xd, a, cd, yd, out, ws, ws_len, id) },
                    op,
                ),
                None => (not_loaded, op),
            }
        }
        (ConvDirection::BackwardData, Algo::Solution(id)) => {
            let op = "miopenConvolutionBackwardDataImmediate";
            match lib.miopenConvolutionBackwardDataImmediate {
                Some(f) => (
                    // SAFETY: the contract above, with dy = `a` (`yd`) and dx = `out` (`xd`).
                    unsafe { f(handle, yd, a, wd, w, cd, xd, out, ws, ws_len, id) },
                    op,
                ),
                None => (not_loaded, op),
            }
        }
        (ConvDirection::Forward, Algo::Legacy(al)) => (
            // SAFETY: the contract above; `al` is a find result for these descriptors, and
            // `one` / `zero` outlive the call.
            unsafe {
                (lib.miopenConvolutionForward)(
                    handle,
                    alpha,
                    xd,
                    a,
                    wd,
                    w,
                    cd,
                    miopenConvFwdAlgorithm_t(al),
                    beta,
                    yd,
                    out,
                    ws,
                    ws_len,
                )
            },
            "miopenConvolutionForward",
        ),
        (ConvDirection::BackwardData, Algo::Legacy(al)) => (
            // SAFETY: as for the forward call, with dy = `a` (`yd`) and dx = `out` (`xd`).
            unsafe {
                (lib.miopenConvolutionBackwardData)(
                    handle,
                    alpha,
                    yd,
                    a,
                    wd,
                    w,
                    cd,
                    miopenConvBwdDataAlgorithm_t(al),
                    beta,
                    xd,
                    out,
                    ws,
                    ws_len,
                )
            },
            "miopenConvolutionBackwardData",
        ),
    }
}
