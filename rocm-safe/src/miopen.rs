//! [`MiopenHandle`]: an MIOpen handle bound to a stream, when MIOpen is installed.

use std::sync::Arc;

use rocm_sys::miopen::miopenHandle_t;
use rocm_sys::Miopen;

use crate::error::{check_miopen, Result};
use crate::stream::Stream;

/// An MIOpen handle whose work is queued on one stream. Owning handle; not `Clone`.
pub struct MiopenHandle {
    lib: Arc<Miopen>,
    raw: miopenHandle_t,
    stream: Arc<Stream>,
}

// SAFETY: an MIOpen handle may move between threads; concurrent use is prevented because every
// method that uses it takes `&mut self`.
unsafe impl Send for MiopenHandle {}

impl MiopenHandle {
    /// Creates a handle on `stream`; `Ok(None)` when MIOpen is not installed or disabled
    /// (`ROCM_SYS_MIOPEN_LIB=none`), so callers fall back to their own kernels.
    pub fn new(stream: &Arc<Stream>) -> Result<Option<MiopenHandle>> {
        let Some(lib) = stream.device().runtime().miopen()? else {
            return Ok(None);
        };
        stream.device().bind_to_thread()?;
        let mut raw: miopenHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; live stream of the current device.
        let code = unsafe { (lib.miopenCreateWithStream)(&mut raw, stream.raw()) };
        check_miopen(&lib, "miopenCreateWithStream", code)?;
        Ok(Some(MiopenHandle {
            lib,
            raw,
            stream: stream.clone(),
        }))
    }

    /// MIOpen's version as (major, minor, patch).
    pub fn version(&self) -> Result<(usize, usize, usize)> {
        let (mut a, mut b, mut c) = (0, 0, 0);
        // SAFETY: three valid out-pointers.
        let code = unsafe { (self.lib.miopenGetVersion)(&mut a, &mut b, &mut c) };
        check_miopen(&self.lib, "miopenGetVersion", code)?;
        Ok((a, b, c))
    }

    /// The stream the handle's work is queued on.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// The raw handle, for the MIOpen calls candle-rocm makes.
    pub fn raw(&mut self) -> miopenHandle_t {
        self.raw
    }
}

impl Drop for MiopenHandle {
    fn drop(&mut self) {
        // SAFETY: live handle, destroyed once.
        let code = unsafe { (self.lib.miopenDestroy)(self.raw) };
        if let Err(e) = check_miopen(&self.lib, "miopenDestroy", code) {
            self.stream.device().runtime().record_err(e);
        }
    }
}
