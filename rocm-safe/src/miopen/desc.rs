//! MIOpen's descriptors (tensor, convolution, pooling) as one RAII type: created, set, and
//! destroyed on drop through the matching `miopenDestroy*Descriptor` (a failure there is
//! recorded on the runtime, never a panic).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use rocm_sys::miopen::{miopenConvolutionMode_t, miopenDataType_t, miopenStatus_t};
use rocm_sys::Miopen;

use super::config::{c_dims, unsupported, Conv2dConfig, Pool2dConfig};
use crate::error::{check_miopen, Result};
use crate::runtime::Runtime;

/// A `miopenDestroy*Descriptor` entry point: every descriptor type is an opaque pointer.
type DestroyFn = unsafe extern "C" fn(*mut c_void) -> miopenStatus_t;

/// One live MIOpen descriptor of any kind, destroyed on drop by `destroy`.
pub(super) struct Desc {
    lib: Arc<Miopen>,
    rt: Arc<Runtime>,
    /// The descriptor handle.
    pub(super) raw: *mut c_void,
    destroy: DestroyFn,
    destroy_name: &'static str,
}

impl Desc {
    /// Creates a descriptor with `create` (named `create_name` in errors); from the moment it
    /// exists, dropping the returned value destroys it with `destroy`.
    fn create(
        lib: &Arc<Miopen>,
        rt: &Arc<Runtime>,
        create: unsafe extern "C" fn(*mut *mut c_void) -> miopenStatus_t,
        create_name: &'static str,
        destroy: DestroyFn,
        destroy_name: &'static str,
    ) -> Result<Desc> {
        let mut raw: *mut c_void = std::ptr::null_mut();
        // SAFETY: `create` is one of MIOpen's `miopenCreate*Descriptor` entry points, whose one
        // argument is an out-pointer for a handle; `raw` is a valid one.
        let code = unsafe { create(&mut raw) };
        check_miopen(lib, create_name, code)?;
        Ok(Desc {
            lib: lib.clone(),
            rt: rt.clone(),
            raw,
            destroy,
            destroy_name,
        })
    }

    /// A packed NCHW tensor (or a (K, C / groups, R, S) filter) of `dims`.
    pub(super) fn tensor(
        lib: &Arc<Miopen>,
        rt: &Arc<Runtime>,
        dtype: miopenDataType_t,
        dims: [usize; 4],
        what: &str,
    ) -> Result<Desc> {
        let d = c_dims(dims, what)?;
        let desc = Desc::create(
            lib,
            rt,
            lib.miopenCreateTensorDescriptor,
            "miopenCreateTensorDescriptor",
            lib.miopenDestroyTensorDescriptor,
            "miopenDestroyTensorDescriptor",
        )?;
        // SAFETY: `desc.raw` is the live tensor descriptor just created; the dims are positive
        // `int`s whose product fits an `int` (`c_dims`).
        let code =
            unsafe { (lib.miopenSet4dTensorDescriptor)(desc.raw, dtype, d[0], d[1], d[2], d[3]) };
        check_miopen(lib, "miopenSet4dTensorDescriptor", code)?;
        Ok(desc)
    }

    /// A cross-correlation with `cfg`'s padding, stride, dilation and groups.
    pub(super) fn convolution(
        lib: &Arc<Miopen>,
        rt: &Arc<Runtime>,
        cfg: &Conv2dConfig,
    ) -> Result<Desc> {
        let [ph, pw, sh, sw, dh, dw, g] = c_ints(
            [
                cfg.padding[0],
                cfg.padding[1],
                cfg.stride[0],
                cfg.stride[1],
                cfg.dilation[0],
                cfg.dilation[1],
                cfg.groups,
            ],
            &format!("conv {cfg:?}"),
        )?;
        let desc = Desc::create(
            lib,
            rt,
            lib.miopenCreateConvolutionDescriptor,
            "miopenCreateConvolutionDescriptor",
            lib.miopenDestroyConvolutionDescriptor,
            "miopenDestroyConvolutionDescriptor",
        )?;
        // SAFETY: `desc.raw` is the live convolution descriptor just created; the mode is a
        // declared value and the parameters are non-negative `int`s (argument order per
        // miopen.h: mode, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w).
        let code = unsafe {
            (lib.miopenInitConvolutionDescriptor)(
                desc.raw,
                miopenConvolutionMode_t::miopenConvolution,
                ph,
                pw,
                sh,
                sw,
                dh,
                dw,
            )
        };
        check_miopen(lib, "miopenInitConvolutionDescriptor", code)?;
        // SAFETY: live, initialised convolution descriptor (miopen.h: set the group count
        // after miopenInitConvolutionDescriptor); the count is a positive `int`.
        let code = unsafe { (lib.miopenSetConvolutionGroupCount)(desc.raw, g) };
        check_miopen(lib, "miopenSetConvolutionGroupCount", code)?;
        Ok(desc)
    }

    /// A 2-D pooling with `cfg`'s mode, window, padding and stride.
    pub(super) fn pooling(
        lib: &Arc<Miopen>,
        rt: &Arc<Runtime>,
        cfg: &Pool2dConfig,
    ) -> Result<Desc> {
        let [kh, kw, ph, pw, sh, sw] = c_ints(
            [
                cfg.kernel[0],
                cfg.kernel[1],
                cfg.padding[0],
                cfg.padding[1],
                cfg.stride[0],
                cfg.stride[1],
            ],
            &format!("pool {cfg:?}"),
        )?;
        let desc = Desc::create(
            lib,
            rt,
            lib.miopenCreatePoolingDescriptor,
            "miopenCreatePoolingDescriptor",
            lib.miopenDestroyPoolingDescriptor,
            "miopenDestroyPoolingDescriptor",
        )?;
        // SAFETY: `desc.raw` is the live pooling descriptor just created; the mode is a
        // declared value and the parameters are non-negative `int`s (argument order per
        // miopen.h: mode, windowHeight, windowWidth, pad_h, pad_w, stride_h, stride_w).
        let code = unsafe {
            (lib.miopenSet2dPoolingDescriptor)(desc.raw, cfg.mode.raw(), kh, kw, ph, pw, sh, sw)
        };
        check_miopen(lib, "miopenSet2dPoolingDescriptor", code)?;
        Ok(desc)
    }
}

/// `vals` as C `int`s, or a typed error naming `what` when one does not fit.
fn c_ints<const N: usize>(vals: [usize; N], what: &str) -> Result<[c_int; N]> {
    if vals.iter().any(|&v| v > c_int::MAX as usize) {
        return Err(unsupported(format!(
            "{what}: a parameter exceeds MIOpen's 32-bit int"
        )));
    }
    Ok(vals.map(|v| v as c_int))
}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: `raw` is live, was created by the `miopenCreate*Descriptor` matching
        // `destroy`, and is destroyed exactly once; no plan using it outlives `self`.
        let code = unsafe { (self.destroy)(self.raw) };
        if let Err(e) = check_miopen(&self.lib, self.destroy_name, code) {
            self.rt.record_err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_beyond_int_are_unsupported() {
        assert_eq!(c_ints([1, 2, 3], "t").unwrap(), [1, 2, 3]);
        let e = c_ints([1, c_int::MAX as usize + 1], "conv").unwrap_err();
        assert!(e.to_string().contains("32-bit int"), "{e}");
    }
}
