//! [`Communicator`]: one rank of an RCCL communicator, bound to a device and a stream.

use std::ffi::{c_int, CStr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rocm_sys::rccl::{ncclComm_t, ncclConfig_t, ncclResult_t, Rccl};

use crate::device::Device;
use crate::error::{Result, RocmError};
use crate::stream::Stream;

use super::backoff::Backoff;
use super::error::RcclError;
use super::group;
use super::id::UniqueId;
use super::patience::{within, Handle};
use super::state::{abort_state, State};
use crate::graph::batch::NodeKind;

/// How long [`Communicator::wait`] waits before it declares a peer dead, unless
/// [`Communicator::with_timeout`] says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// How long `Drop` lets a communicator's last operation settle before aborting it.
const DROP_SETTLE: Duration = Duration::from_secs(10);

/// One rank of an RCCL communicator (`ncclComm_t`), bound to one device and one stream.
///
/// Every collective is queued on [`Communicator::stream`] and reads and writes buffers ordered
/// on that stream. [`Communicator::wait`] waits for the stream while watching RCCL's
/// asynchronous error state, so a peer that dies gives a [`RcclError`] (and an aborted
/// communicator) instead of a hang. Dropping a communicator destroys it (`ncclCommDestroy`),
/// or aborts it (`ncclCommAbort`) when it has seen an error; a failure there is recorded for
/// [`crate::Runtime::check_err`]. Dropping first waits (briefly, at most [`DEFAULT_TIMEOUT`] or
/// 10 s) for queued work, then for `ncclCommDestroy` on a thread of its own: the ranks of one
/// communicator should drop it at about the same time (RCCL's teardown meets the other
/// ranks); a rank whose peers never come returns after that wait, leaving the teardown's
/// thread blocked, instead of hanging.
///
/// ```no_run
/// use rocm_safe::rccl::{Communicator, UniqueId};
/// use rocm_safe::{Device, Stream};
/// // Every rank runs this with its own `rank`; rank 0's id reaches the others somehow
/// // (see `rocm_safe::rendezvous`).
/// let (rank, nranks) = (0, 2);
/// let stream = Stream::new(&Device::new(rank)?)?;
/// let id = UniqueId::new(stream.device().runtime())?;
/// let comm = Communicator::init_rank(&stream, &id, rank, nranks)?;
/// let mut x = stream.clone_htod(&[1.0f32; 4])?;
/// comm.all_reduce_in_place(&mut x, rocm_safe::rccl::ReduceOp::Sum)?;
/// comm.wait()?;
/// # Ok::<(), rocm_safe::RocmError>(())
/// ```
pub struct Communicator {
    rccl: Arc<Rccl>,
    stream: Arc<Stream>,
    rank: usize,
    nranks: usize,
    timeout: Duration,
    state: Arc<Mutex<State>>,
}

// SAFETY: `State::raw` is only passed to RCCL while the mutex is held, so calls on one
// communicator never overlap; RCCL allows a communicator to be used from any host thread as
// long as its calls are not concurrent. The other fields are thread-safe shared handles.
unsafe impl Send for Communicator {}
// SAFETY: as for `Send`: every `&self` method reaches `raw` only through the mutex.
unsafe impl Sync for Communicator {}

impl Communicator {
    /// Joins the communicator `id` as `rank` of `nranks` on `stream`'s device, waiting up to
    /// [`DEFAULT_TIMEOUT`] for the other ranks (see [`Communicator::init_rank_timeout`]).
    pub fn init_rank(
        stream: &Arc<Stream>,
        id: &UniqueId,
        rank: usize,
        nranks: usize,
    ) -> Result<Communicator> {
        Self::init_rank_timeout(stream, id, rank, nranks, DEFAULT_TIMEOUT)
    }

    /// Joins the communicator `id` as `rank` of `nranks` on `stream`'s device. Every rank
    /// calls it with the same id (one process or thread per GPU); it returns once all have.
    ///
    /// Where RCCL has `ncclCommInitRankConfig` (ROCm 5.7+), the communicator is created
    /// blocking (each collective is queued by the calling thread before it returns) on a
    /// thread of its own, and this waits for it with `timeout`: a rank that never arrives
    /// gives [`RcclError::Timeout`], not a hang (the set-up's thread stays blocked in RCCL, and
    /// aborts the communicator should it ever complete). `timeout` is also the
    /// communicator's for later waits unless [`Communicator::with_timeout`] changes it. Older
    /// RCCLs get `ncclCommInitRank` on the calling thread, which waits inside RCCL without a
    /// timeout.
    ///
    /// Blocking, not non-blocking, communicators: a non-blocking one answers each collective
    /// with `ncclInProgress` and queues it from a background thread, which must be waited for
    /// before the next kernel may be queued, a host cost on every collective.
    pub fn init_rank_timeout(
        stream: &Arc<Stream>,
        id: &UniqueId,
        rank: usize,
        nranks: usize,
        timeout: Duration,
    ) -> Result<Communicator> {
        let (rank_c, nranks_c) = check_rank_args("ncclCommInitRank", rank, nranks)?;
        let rccl = stream.device().runtime().rccl()?;
        stream.device().bind_to_thread()?;
        let mut raw: ncclComm_t = std::ptr::null_mut();
        let Some(init_config) = rccl.ncclCommInitRankConfig else {
            let op = "ncclCommInitRank";
            // SAFETY: `raw` is a valid out-pointer; the id is passed by value (a 128-byte
            // repr(C) copy of ncclUniqueId); rank < nranks, both checked to fit a C int; the
            // calling thread is bound to the communicator's device, as RCCL requires.
            let code = unsafe { (rccl.ncclCommInitRank)(&mut raw, nranks_c, id.to_raw(), rank_c) };
            if !code.is_success() {
                return Err(RcclError::call(&rccl, op, rank_c, code, None).into());
            }
            return Ok(Self::wrap(rccl, stream.clone(), raw, rank, nranks).with_timeout(timeout));
        };
        let op = "ncclCommInitRankConfig";
        let device = stream.device().clone();
        let id = id.to_raw();
        let thread_rccl = rccl.clone();
        // A blocking communicator (RCCL enqueues each collective on the calling thread; a
        // non-blocking one hands it to a background thread and answers ncclInProgress). Its
        // set-up blocks inside RCCL until every rank has arrived, so it runs on a thread of
        // its own, waited for at most `timeout`.
        let init = move || -> std::result::Result<Handle, (ncclResult_t, RocmError)> {
            if let Err(e) = device.bind_to_thread() {
                return Err((ncclResult_t::ncclSystemError, e));
            }
            let mut raw: ncclComm_t = std::ptr::null_mut();
            let mut config = ncclConfig_t::initializer();
            config.blocking = 1;
            // SAFETY: `raw` is a valid out-pointer; the id is passed by value (a 128-byte
            // repr(C) copy of ncclUniqueId); rank < nranks, both checked to fit a C int; this
            // thread is bound to the communicator's device, as RCCL requires; `config` is an
            // initialised ncclConfig_t (size, magic and version set by `initializer`), valid
            // for the duration of the call (RCCL copies it).
            let code = unsafe { init_config(&mut raw, nranks_c, id, rank_c, &mut config) };
            if code.is_success() && !raw.is_null() {
                return Ok(Handle(raw));
            }
            if !raw.is_null() {
                // SAFETY: a handle RCCL returned with the failure; aborting frees it, and it
                // is not used again.
                unsafe { (thread_rccl.ncclCommAbort)(raw) };
            }
            let e = RcclError::call(&thread_rccl, op, rank_c, code, None);
            Err((code, e.into()))
        };
        let orphan_rccl = rccl.clone();
        // The caller gave up waiting: nobody owns a communicator made after that.
        let orphan = move |late: std::result::Result<Handle, (ncclResult_t, RocmError)>| {
            if let Ok(Handle(raw)) = late {
                // SAFETY: a live handle nobody else holds (the caller returned a timeout); it
                // is not used again.
                unsafe { (orphan_rccl.ncclCommAbort)(raw) };
            }
        };
        let started = Instant::now();
        let answer = within("rccl-init", timeout, init, orphan).map_err(|e| {
            RcclError::invalid(
                op,
                format!("could not start the thread that joins the communicator: {e}"),
            )
        })?;
        match answer {
            Some(Ok(Handle(raw))) => {
                Ok(Self::wrap(rccl, stream.clone(), raw, rank, nranks).with_timeout(timeout))
            }
            Some(Err((_, e))) => Err(e),
            None => Err(RcclError::Timeout {
                op,
                rank,
                nranks,
                waited: started.elapsed(),
            }
            .into()),
        }
    }

    /// Creates one communicator per stream in this process (`ncclCommInitAll`): rank `i` runs
    /// on `streams[i]`'s device. The devices must be distinct devices of one runtime.
    pub fn init_all(streams: &[Arc<Stream>]) -> Result<Vec<Communicator>> {
        let op = "ncclCommInitAll";
        let Some(first) = streams.first() else {
            return Err(RcclError::invalid(op, "no streams given: pass one per GPU").into());
        };
        let (_, n) = check_rank_args(op, 0, streams.len())?;
        let mut devices: Vec<c_int> = Vec::with_capacity(streams.len());
        for s in streams {
            let d = s.device();
            if !Arc::ptr_eq(d.runtime(), first.device().runtime()) {
                return Err(
                    RcclError::invalid(op, "the streams belong to different runtimes").into(),
                );
            }
            let ordinal = c_int::try_from(d.ordinal())
                .map_err(|_| RcclError::invalid(op, "device ordinal does not fit a C int"))?;
            if devices.contains(&ordinal) {
                return Err(RcclError::invalid(
                    op,
                    format!("device {ordinal} appears twice: RCCL needs one rank per GPU"),
                )
                .into());
            }
            devices.push(ordinal);
        }
        let rccl = first.device().runtime().rccl()?;
        let mut raws: Vec<ncclComm_t> = vec![std::ptr::null_mut(); streams.len()];
        // SAFETY: `raws` has room for `n` handles and `devices` holds `n` distinct ordinals of
        // visible devices (n == streams.len(), checked to fit a C int).
        let code = unsafe { (rccl.ncclCommInitAll)(raws.as_mut_ptr(), n, devices.as_ptr()) };
        if !code.is_success() {
            return Err(RcclError::call(&rccl, op, -1, code, None).into());
        }
        Ok(raws
            .into_iter()
            .zip(streams)
            .enumerate()
            .map(|(rank, (raw, s))| Self::wrap(rccl.clone(), s.clone(), raw, rank, streams.len()))
            .collect())
    }

    fn wrap(
        rccl: Arc<Rccl>,
        stream: Arc<Stream>,
        raw: ncclComm_t,
        rank: usize,
        nranks: usize,
    ) -> Communicator {
        Communicator {
            rccl,
            stream,
            rank,
            nranks,
            timeout: DEFAULT_TIMEOUT,
            state: Arc::new(Mutex::new(State {
                raw,
                aborted: false,
                failed: false,
            })),
        }
    }

    /// Sets how long [`Communicator::wait`] waits before declaring a peer dead.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// This rank, `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// This rank as a C int (it fits: checked when the communicator was made).
    fn rank_c(&self) -> c_int {
        c_int::try_from(self.rank).unwrap_or(c_int::MAX)
    }

    /// Number of ranks.
    pub fn world_size(&self) -> usize {
        self.nranks
    }

    /// The stream every collective is queued on.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// The device this rank runs on.
    pub fn device(&self) -> &Device {
        self.stream.device()
    }

    /// The timeout of [`Communicator::wait`].
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The loaded RCCL library.
    pub fn rccl(&self) -> &Arc<Rccl> {
        &self.rccl
    }

    /// What RCCL itself says about this communicator: `(rank, ranks, device ordinal)` from
    /// `ncclCommUserRank`, `ncclCommCount` and `ncclCommCuDevice`.
    pub fn query(&self) -> Result<(usize, usize, usize)> {
        let mut out = [0 as c_int; 3];
        let [rank, count, device] = &mut out;
        self.call("ncclCommUserRank", |rccl, raw| {
            // SAFETY: `raw` is live (checked by `call` under the lock); `rank` is a valid
            // out-pointer.
            unsafe { (rccl.ncclCommUserRank)(raw, rank) }
        })?;
        self.call("ncclCommCount", |rccl, raw| {
            // SAFETY: as above; `count` is a valid out-pointer.
            unsafe { (rccl.ncclCommCount)(raw, count) }
        })?;
        self.call("ncclCommCuDevice", |rccl, raw| {
            // SAFETY: as above; `device` is a valid out-pointer.
            unsafe { (rccl.ncclCommCuDevice)(raw, device) }
        })?;
        let to_usize = |v: c_int| usize::try_from(v).unwrap_or(usize::MAX);
        Ok((to_usize(out[0]), to_usize(out[1]), to_usize(out[2])))
    }

    /// Runs one RCCL call on the live handle, under the lock, once the communicator's previous
    /// operation has settled; a failure is returned as a typed error (with RCCL's last error
    /// message) and marks the communicator as failed.
    pub(super) fn call(
        &self,
        op: &'static str,
        f: impl FnOnce(&Rccl, ncclComm_t) -> ncclResult_t,
    ) -> Result<()> {
        // Graph mode records a collective only where it says so (`GraphMode::record_rccl`)
        // and outside a group (whose end queues the grouped work); otherwise what it recorded
        // is launched first.
        if !group::active() && self.stream.records_rccl() {
            return self
                .stream
                .record(NodeKind::Library, || self.call_now(op, f));
        }
        let _plain = self.stream.flush_graph()?;
        self.call_now(op, f)
    }

    /// [`Communicator::call`]'s RCCL call itself, on a stream already prepared for it.
    fn call_now(
        &self,
        op: &'static str,
        f: impl FnOnce(&Rccl, ncclComm_t) -> ncclResult_t,
    ) -> Result<()> {
        // Inside a group, this communicator is aborted with the others if the group fails:
        // work queued on the others would otherwise wait for it forever.
        group::register(
            &self.rccl,
            &self.state,
            self.rank_c(),
            self.stream.device().runtime(),
        );
        let mut state = self.state.lock();
        self.settle(&mut state, op, self.timeout)?;
        // Counted before the call: a wait must not take the stream for one whose kernels can
        // only end when the peers come (see `wait_timeout`).
        self.stream.note_peer_work();
        let code = f(&self.rccl, state.raw);
        if code.is_success() {
            return Ok(());
        }
        // A non-blocking communicator may answer ncclInProgress: RCCL enqueues the operation's
        // kernels from a background thread. Until it has, work the caller queues next on the
        // stream would run first and read the output unwritten, so the call settles here
        // (bounded by the communicator's timeout). Inside a group nothing is enqueued before
        // the group ends, which settles every member (`group::leave`).
        if code == ncclResult_t::ncclInProgress {
            if group::active() {
                return Ok(());
            }
            return self.settle(&mut state, op, self.timeout);
        }
        state.failed = true;
        let last = self.last_error(state.raw);
        Err(RcclError::call(&self.rccl, op, self.rank_c(), code, last).into())
    }

    /// `ncclCommGetAsyncError` on the live handle (the caller holds the lock): `Ok(true)` when
    /// settled and healthy, `Ok(false)` while an operation is in progress, the typed error
    /// (and the communicator marked failed) once RCCL reports one.
    fn poll(&self, state: &mut State, op: &'static str) -> Result<bool> {
        if state.aborted {
            return Err(RcclError::Aborted {
                op,
                rank: self.rank,
            }
            .into());
        }
        let mut async_code = ncclResult_t::ncclSuccess;
        // SAFETY: `raw` is live (not aborted, checked above under the caller's lock);
        // `async_code` is a valid out-pointer.
        let code = unsafe { (self.rccl.ncclCommGetAsyncError)(state.raw, &mut async_code) };
        let failed = if !code.is_success() {
            code
        } else if async_code.is_success() {
            return Ok(true);
        } else if async_code == ncclResult_t::ncclInProgress {
            return Ok(false);
        } else {
            async_code
        };
        state.failed = true;
        let last = self.last_error(state.raw);
        Err(RcclError::call(
            &self.rccl,
            "ncclCommGetAsyncError",
            self.rank_c(),
            failed,
            last,
        )
        .into())
    }

    /// Waits (the caller holds the lock) until the communicator's previous operation has
    /// settled. On an error or after `timeout`, aborts the communicator and returns why.
    fn settle(&self, state: &mut State, op: &'static str, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let mut backoff = Backoff::new();
        loop {
            match self.poll(state, op) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => {
                    self.abort_recorded(state);
                    return Err(e);
                }
            }
            let waited = start.elapsed();
            if waited >= timeout {
                self.abort_recorded(state);
                return Err(RcclError::Timeout {
                    op,
                    rank: self.rank,
                    nranks: self.nranks,
                    waited,
                }
                .into());
            }
            backoff.sleep(waited, timeout);
        }
    }

    /// RCCL's last error message for `raw` (`ncclGetLastError`, absent before ROCm 5.3).
    fn last_error(&self, raw: ncclComm_t) -> Option<String> {
        let f = self.rccl.ncclGetLastError?;
        // SAFETY: `raw` is live (the caller holds the lock and checked `aborted`);
        // ncclGetLastError returns a NUL-terminated string owned by RCCL, or null.
        let p = unsafe { f(raw) };
        if p.is_null() {
            return None;
        }
        // SAFETY: non-null: a NUL-terminated string valid until the next RCCL call on this
        // thread; it is copied before the lock is released.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// RCCL's asynchronous error state (`ncclCommGetAsyncError`): `Ok(())` while healthy (or
    /// still in progress), the typed error once a peer or the network has failed.
    pub fn check_async(&self) -> Result<()> {
        let mut state = self.state.lock();
        self.poll(&mut state, "ncclCommGetAsyncError").map(|_| ())
    }

    /// [`Communicator::check_async`] under one lock, aborting the communicator on an error (as
    /// a failed wait does).
    fn check_async_or_abort(&self, op: &'static str) -> Result<()> {
        let mut state = self.state.lock();
        match self.poll(&mut state, op) {
            Ok(_) => Ok(()),
            Err(e) => {
                self.abort_recorded(&mut state);
                Err(e)
            }
        }
    }

    /// Waits until everything queued on the stream has finished, with the communicator's
    /// timeout (see [`Communicator::wait_timeout`]).
    pub fn wait(&self) -> Result<()> {
        self.wait_timeout(self.timeout)
    }

    /// Waits until the communicator's last operation has settled and everything queued on
    /// the stream has finished, polling both.
    ///
    /// When RCCL reports an error (a peer exited: `ncclRemoteError`), or `timeout` passes
    /// with work still queued, the communicator is aborted (`ncclCommAbort`, which also stops
    /// RCCL's kernels waiting on the stream) and the typed error is returned: it never hangs
    /// on a dead peer.
    ///
    /// Where no RCCL work was queued on the stream since a wait last saw it drain (a
    /// tensor-parallel step whose collectives all ran as candle-rocm's one-shot kernels,
    /// which end by their own timeout), nothing queued can wait for a peer: then it checks
    /// RCCL's error state and blocks in `hipStreamSynchronize`, which returns as soon as the
    /// stream drains, where the polls below can sleep past it (up to 50 us plus the timer's
    /// slack once a step).
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        let (queued, drained) = self.stream.peer_work();
        if drained {
            self.check_async_or_abort("wait")?;
            return self.stream.synchronize();
        }
        let start = Instant::now();
        let mut backoff = Backoff::new();
        loop {
            let settled = {
                let mut state = self.state.lock();
                match self.poll(&mut state, "wait") {
                    Ok(settled) => settled,
                    Err(e) => {
                        self.abort_recorded(&mut state);
                        return Err(e);
                    }
                }
            };
            if settled && self.stream.is_idle()? {
                self.stream.peer_work_finished(queued);
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                self.abort_recorded(&mut self.state.lock());
                return Err(RcclError::Timeout {
                    op: "wait",
                    rank: self.rank,
                    nranks: self.nranks,
                    waited,
                }
                .into());
            }
            backoff.sleep(waited, timeout);
        }
    }

    /// Aborts the communicator (`ncclCommAbort`): stops its queued work and frees it. Every
    /// later call returns [`RcclError::Aborted`]. Aborting twice is a no-op.
    pub fn abort(&self) -> Result<()> {
        self.abort_locked(&mut self.state.lock())
    }

    /// Aborts under the caller's lock.
    fn abort_locked(&self, state: &mut State) -> Result<()> {
        abort_state(&self.rccl, state, self.rank_c())
    }

    /// Aborts under the caller's lock on the way to returning another error: a failure of
    /// the abort itself is recorded for [`crate::Runtime::check_err`].
    ///
    /// Inside a [`group`] the abort waits for the group's end (the communicator is marked
    /// failed and registered with the group, which aborts it): aborting a communicator that
    /// `ncclGroupEnd` is about to launch would hand RCCL a freed handle.
    fn abort_recorded(&self, state: &mut State) {
        state.failed = true;
        if group::active() {
            group::register(
                &self.rccl,
                &self.state,
                self.rank_c(),
                self.stream.device().runtime(),
            );
            return;
        }
        if let Err(e) = self.abort_locked(state) {
            self.stream.device().runtime().record_err(e);
        }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let runtime = self.stream.device().runtime().clone();
        {
            let mut state = self.state.lock();
            if state.aborted {
                return;
            }
            // ncclCommDestroy needs a settled, healthy communicator (RCCL's
            // ncclCommEnsureReady): a failed one is aborted.
            if state.failed {
                self.abort_recorded(&mut state);
                return;
            }
        }
        // Briefly: a communicator still busy after this is aborted rather than waited for.
        // Queued work first: destroying a communicator whose kernels still wait for a peer
        // blocks inside RCCL, with no timeout.
        let patience = self.timeout.min(DROP_SETTLE);
        if let Err(e) = self.wait_timeout(patience) {
            // `wait_timeout` has aborted it.
            runtime.record_err(e);
            return;
        }
        let mut state = self.state.lock();
        if state.aborted {
            return;
        }
        // Teardown meets the other ranks (NCCL 2.x and RCCL synchronise inside destroy): on a
        // thread of its own, waited for briefly, so a rank whose peers are gone leaves that
        // thread blocked in RCCL and returns, instead of hanging.
        state.aborted = true;
        let handle = Handle(state.raw);
        let rccl = self.rccl.clone();
        let destroy = move || {
            let handle = handle;
            let raw = handle.0;
            // SAFETY: `raw` is live (it was not aborted) and settled; `aborted` is set above,
            // so nothing else uses it after this call.
            unsafe { (rccl.ncclCommDestroy)(raw) }
        };
        let op = "ncclCommDestroy";
        let e = match within("rccl-destroy", patience, destroy, |_| ()) {
            Ok(Some(code)) if code.is_success() || code == ncclResult_t::ncclInProgress => return,
            Ok(Some(code)) => RcclError::call(&self.rccl, op, self.rank_c(), code, None),
            Ok(None) => RcclError::Timeout {
                op,
                rank: self.rank,
                nranks: self.nranks,
                waited: patience,
            },
            Err(e) => RcclError::invalid(
                op,
                format!("could not start the thread that tears the communicator down ({e}): its resources stay allocated"),
            ),
        };
        runtime.record_err(RocmError::Rccl(e));
    }
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Communicator(rank {} of {}, device {}, timeout {:?})",
            self.rank,
            self.nranks,
            self.stream.device().ordinal(),
            self.timeout
        )
    }
}

/// Checks `rank < nranks` and that both fit a C int; returns them as C ints.
pub(super) fn check_rank_args(
    op: &'static str,
    rank: usize,
    nranks: usize,
) -> Result<(c_int, c_int), RcclError> {
    if nranks == 0 {
        return Err(RcclError::invalid(
            op,
            "a communicator needs at least one rank",
        ));
    }
    if rank >= nranks {
        return Err(RcclError::invalid(
            op,
            format!("rank {rank} is out of range for {nranks} ranks (ranks are 0..{nranks})"),
        ));
    }
    let nranks_c = c_int::try_from(nranks)
        .map_err(|_| RcclError::invalid(op, format!("{nranks} ranks do not fit a C int")))?;
    // rank < nranks <= c_int::MAX, so this conversion cannot fail.
    let rank_c = c_int::try_from(rank).unwrap_or(c_int::MAX);
    Ok((rank_c, nranks_c))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn rank_arguments_are_checked_before_rccl_is_called() {
        assert_eq!(check_rank_args("x", 0, 1).unwrap(), (0, 1));
        assert_eq!(check_rank_args("x", 3, 4).unwrap(), (3, 4));
        let e = check_rank_args("ncclCommInitRank", 2, 2).unwrap_err();
        assert_eq!(
            e.to_string(),
            "RCCL ncclCommInitRank: rank 2 is out of range for 2 ranks (ranks are 0..2)"
        );
        assert!(check_rank_args("x", 0, 0).is_err());
        let too_many = c_int::MAX as usize + 1;
        assert!(check_rank_args("x", 0, too_many)
            .unwrap_err()
            .to_string()
            .contains("do not fit a C int"));
    }
}
