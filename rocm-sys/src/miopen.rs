//! MIOpen, declared by hand (Debian 12 packages no MIOpen headers to generate from).
//!
//! MIOpen is optional at run time: candle-rocm falls back to its own kernels when it is absent.
//! Only the entry points a convolution and pooling path needs are declared.
//!
//! Where each fact comes from: `include/miopen/miopen.h` of ROCm/MIOpen at the tags
//! `rocm-5.2.0`, `rocm-5.7.0`, `rocm-6.0.0` and at `2d1fd99` (MIOpen 3.3.0, ROCm 6.3, Oct 2024),
//! and `projects/miopen/include/miopen/miopen.h` of ROCm/rocm-libraries at `01d724c` (the
//! ROCm 7 monorepo) for the enum values. Every prototype below is identical (up to `const` on
//! pointer arguments, which is not ABI) in all of those; every enum value below is too, except
//! that `miopenStatusVersionMismatch` appeared with ROCm 5.7. Enums are plain integer newtypes
//! (C `enum` is a 32-bit `int` on the ROCm ABIs), so a value a newer MIOpen adds is never
//! undefined behaviour. MIOpen's `bool` arguments are C99 `_Bool`, which Rust's `bool` matches.
//! The immediate-mode entry points and `miopenConvSolution_t` were checked against miopen.h of
//! ROCm/MIOpen at `003eaf5`; they are optional, so a library without them still loads (and its
//! callers use find instead).

use std::ffi::{c_char, c_int, c_void};

use crate::bindings::hip::hipStream_t;
use crate::library::Loaded;
use crate::loader::{self, LibraryKind, LoadError};
use crate::rocblas::int_newtype;
use crate::table::api_table;
use crate::Hip;

/// Opaque MIOpen context (`struct miopenHandle*`).
pub type miopenHandle_t = *mut c_void;
/// MIOpen's name for a HIP stream.
pub type miopenAcceleratorQueue_t = hipStream_t;
/// Opaque tensor descriptor (`struct miopenTensorDescriptor*`).
pub type miopenTensorDescriptor_t = *mut c_void;
/// Opaque convolution descriptor (`struct miopenConvolutionDescriptor*`).
pub type miopenConvolutionDescriptor_t = *mut c_void;
/// Opaque pooling descriptor (`struct miopenPoolingDescriptor*`).
pub type miopenPoolingDescriptor_t = *mut c_void;

int_newtype! {
    /// `miopenStatus_t`.
    miopenStatus_t(u32) {
        /// Success.
        miopenStatusSuccess = 0,
        /// Data not initialised.
        miopenStatusNotInitialized = 1,
        /// Incorrect variable value.
        miopenStatusInvalidValue = 2,
        /// Incorrect parameter detected.
        miopenStatusBadParm = 3,
        /// Memory allocation error.
        miopenStatusAllocFailed = 4,
        /// MIOpen failure.
        miopenStatusInternalError = 5,
        /// Use of unimplemented feature.
        miopenStatusNotImplemented = 6,
        /// Unknown error occurred (also what MIOpen returns for an exception thrown without a
        /// status, `src/include/miopen/errors.hpp`).
        miopenStatusUnknownError = 7,
        /// Unsupported operator for fusion.
        miopenStatusUnsupportedOp = 8,
        /// An operation was skipped.
        miopenStatusGpuOperationsSkipped = 9,
        /// Version mismatch of the supplied binary data argument (ROCm 5.7+).
        miopenStatusVersionMismatch = 10,
    }
}

int_newtype! {
    /// `miopenDataType_t`. Values 7 and 8 are the 8-bit float types (beta API, renamed
    /// between releases): deliberately not declared; 4 was the discontinued `miopenInt8x4`.
    miopenDataType_t(u32) {
        /// 16-bit IEEE float.
        miopenHalf = 0,
        /// 32-bit IEEE float.
        miopenFloat = 1,
        /// 32-bit integer (partially supported).
        miopenInt32 = 2,
        /// 8-bit integer (partially supported).
        miopenInt8 = 3,
        /// bfloat16 (partially supported).
        miopenBFloat16 = 5,
        /// 64-bit float (partially supported).
        miopenDouble = 6,
        /// 64-bit integer (MIOpen 3.x).
        miopenInt64 = 9,
    }
}

int_newtype! {
    /// `miopenConvolutionMode_t`.
    miopenConvolutionMode_t(u32) {
        /// Cross-correlation (what deep-learning frameworks call convolution).
        miopenConvolution = 0,
        /// Transposed convolution (deconvolution).
        miopenTranspose = 1,
        /// Deprecated group convolution (use `miopenSetConvolutionGroupCount`).
        miopenGroupConv = 2,
        /// Deprecated depthwise convolution.
        miopenDepthwise = 3,
    }
}

int_newtype! {
    /// `miopenPoolingMode_t`.
    miopenPoolingMode_t(u32) {
        /// Maximum over the window.
        miopenPoolingMax = 0,
        /// Average over the window, padding excluded from the count.
        miopenPoolingAverage = 1,
        /// Average over the window, padding included in the count.
        miopenPoolingAverageInclusive = 2,
    }
}

int_newtype! {
    /// `miopenConvFwdAlgorithm_t` (4 is unused).
    miopenConvFwdAlgorithm_t(u32) {
        /// GEMM variant.
        miopenConvolutionFwdAlgoGEMM = 0,
        /// Direct convolution.
        miopenConvolutionFwdAlgoDirect = 1,
        /// FFT.
        miopenConvolutionFwdAlgoFFT = 2,
        /// Winograd.
        miopenConvolutionFwdAlgoWinograd = 3,
        /// Implicit GEMM.
        miopenConvolutionFwdAlgoImplicitGEMM = 5,
    }
}

int_newtype! {
    /// `miopenConvBwdDataAlgorithm_t`.
    miopenConvBwdDataAlgorithm_t(u32) {
        /// GEMM variant.
        miopenConvolutionBwdDataAlgoGEMM = 0,
        /// Direct convolution.
        miopenConvolutionBwdDataAlgoDirect = 1,
        /// FFT.
        miopenConvolutionBwdDataAlgoFFT = 2,
        /// Winograd.
        miopenConvolutionBwdDataAlgoWinograd = 3,
        /// Deprecated transpose GEMM.
        miopenTransposeBwdDataAlgoGEMM = 4,
        /// Implicit GEMM.
        miopenConvolutionBwdDataAlgoImplicitGEMM = 5,
    }
}

/// `miopenConvAlgoPerf_t`: one result of a find call.
///
/// In C the first member is an anonymous union of `miopenConvFwdAlgorithm_t`,
/// `miopenConvBwdWeightsAlgorithm_t` and `miopenConvBwdDataAlgorithm_t`; all three are 32-bit
/// enums, so the union is one `u32` here, read through [`miopenConvAlgoPerf_t::fwd_algo`] or
/// [`miopenConvAlgoPerf_t::bwd_data_algo`] depending on which find call filled it.
/// Layout (x86-64): algo at 0, `time` at 4, `memory` at 8, size 16, alignment 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct miopenConvAlgoPerf_t {
    /// The union of algorithm enums.
    pub algo: u32,
    /// Time the algorithm took in the find step, in milliseconds.
    pub time: f32,
    /// Workspace the algorithm needs, in bytes.
    pub memory: usize,
}

impl miopenConvAlgoPerf_t {
    /// The union read as a forward algorithm (after `miopenFindConvolutionForwardAlgorithm`).
    pub fn fwd_algo(&self) -> miopenConvFwdAlgorithm_t {
        miopenConvFwdAlgorithm_t(self.algo)
    }

    /// The union read as a backward-data algorithm (after
    /// `miopenFindConvolutionBackwardDataAlgorithm`).
    pub fn bwd_data_algo(&self) -> miopenConvBwdDataAlgorithm_t {
        miopenConvBwdDataAlgorithm_t(self.algo)
    }
}

int_newtype! {
    /// `miopenConvAlgorithm_t`: the algorithm family of an immediate-mode solution (4 is unused).
    miopenConvAlgorithm_t(u32) {
        /// GEMM variant.
        miopenConvolutionAlgoGEMM = 0,
        /// Direct convolution.
        miopenConvolutionAlgoDirect = 1,
        /// FFT.
        miopenConvolutionAlgoFFT = 2,
        /// Winograd.
        miopenConvolutionAlgoWinograd = 3,
        /// Implicit GEMM.
        miopenConvolutionAlgoImplicitGEMM = 5,
    }
}

/// `miopenConvSolution_t`: one solution of the immediate-mode API
/// (`miopenConvolution*GetSolution`), which miopen.h returns "sorted in the order of decreasing
/// performance", from the find-db or, without a record, from heuristics.
///
/// Layout (x86-64): `time` at 0, `workspace_size` at 8, `solution_id` at 16, `algorithm` at
/// 24, size 32, alignment 8.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct miopenConvSolution_t {
    /// Expected (or measured) time in milliseconds.
    pub time: f32,
    /// Workspace the solution needs, in bytes.
    pub workspace_size: usize,
    /// The solution's identifier, passed to the compile and immediate calls.
    pub solution_id: u64,
    /// Its algorithm family (a `miopenConvAlgorithm_t`).
    pub algorithm: u32,
}

api_table! {
    /// Entry points of MIOpen, resolved from `libMIOpen` at run time. Every required one is
    /// exported by MIOpen since ROCm 5.2 at least (checked against the headers named in the
    /// module documentation).
    pub struct MiopenApi;
    required extern "C" {
        pub fn miopenCreate(handle: *mut miopenHandle_t) -> miopenStatus_t;
        pub fn miopenCreateWithStream(handle: *mut miopenHandle_t, stream: miopenAcceleratorQueue_t) -> miopenStatus_t;
        pub fn miopenDestroy(handle: miopenHandle_t) -> miopenStatus_t;
        pub fn miopenSetStream(handle: miopenHandle_t, stream: miopenAcceleratorQueue_t) -> miopenStatus_t;
        pub fn miopenGetStream(handle: miopenHandle_t, stream: *mut miopenAcceleratorQueue_t) -> miopenStatus_t;
        pub fn miopenGetVersion(major: *mut usize, minor: *mut usize, patch: *mut usize) -> miopenStatus_t;
        pub fn miopenGetErrorString(error: miopenStatus_t) -> *const c_char;

        pub fn miopenCreateTensorDescriptor(tensor_desc: *mut miopenTensorDescriptor_t) -> miopenStatus_t;
        pub fn miopenSet4dTensorDescriptor(
            tensor_desc: miopenTensorDescriptor_t,
            data_type: miopenDataType_t,
            n: c_int,
            c: c_int,
            h: c_int,
            w: c_int,
        ) -> miopenStatus_t;
        pub fn miopenDestroyTensorDescriptor(tensor_desc: miopenTensorDescriptor_t) -> miopenStatus_t;

        pub fn miopenCreateConvolutionDescriptor(conv_desc: *mut miopenConvolutionDescriptor_t) -> miopenStatus_t;
        pub fn miopenInitConvolutionDescriptor(
            conv_desc: miopenConvolutionDescriptor_t,
            c_mode: miopenConvolutionMode_t,
            pad_h: c_int,
            pad_w: c_int,
            stride_h: c_int,
            stride_w: c_int,
            dilation_h: c_int,
            dilation_w: c_int,
        ) -> miopenStatus_t;
        pub fn miopenSetConvolutionGroupCount(conv_desc: miopenConvolutionDescriptor_t, group_count: c_int) -> miopenStatus_t;
        pub fn miopenDestroyConvolutionDescriptor(conv_desc: miopenConvolutionDescriptor_t) -> miopenStatus_t;
        pub fn miopenGetConvolutionForwardOutputDim(
            conv_desc: miopenConvolutionDescriptor_t,
            input_tensor_desc: miopenTensorDescriptor_t,
            filter_desc: miopenTensorDescriptor_t,
            n: *mut c_int,
            c: *mut c_int,
            h: *mut c_int,
            w: *mut c_int,
        ) -> miopenStatus_t;

        pub fn miopenConvolutionForwardGetWorkSpaceSize(
            handle: miopenHandle_t,
            w_desc: miopenTensorDescriptor_t,
            x_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            y_desc: miopenTensorDescriptor_t,
            work_space_size: *mut usize,
        ) -> miopenStatus_t;
        pub fn miopenFindConvolutionForwardAlgorithm(
            handle: miopenHandle_t,
            x_desc: miopenTensorDescriptor_t,
            x: *const c_void,
            w_desc: miopenTensorDescriptor_t,
            w: *const c_void,
            conv_desc: miopenConvolutionDescriptor_t,
            y_desc: miopenTensorDescriptor_t,
            y: *mut c_void,
            request_algo_count: c_int,
            returned_algo_count: *mut c_int,
            perf_results: *mut miopenConvAlgoPerf_t,
            work_space: *mut c_void,
            work_space_size: usize,
            exhaustive_search: bool,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionForward(
            handle: miopenHandle_t,
            alpha: *const c_void,
            x_desc: miopenTensorDescriptor_t,
            x: *const c_void,
            w_desc: miopenTensorDescriptor_t,
            w: *const c_void,
            conv_desc: miopenConvolutionDescriptor_t,
            algo: miopenConvFwdAlgorithm_t,
            beta: *const c_void,
            y_desc: miopenTensorDescriptor_t,
            y: *mut c_void,
            work_space: *mut c_void,
            work_space_size: usize,
        ) -> miopenStatus_t;

        pub fn miopenConvolutionBackwardDataGetWorkSpaceSize(
            handle: miopenHandle_t,
            dy_desc: miopenTensorDescriptor_t,
            w_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            dx_desc: miopenTensorDescriptor_t,
            work_space_size: *mut usize,
        ) -> miopenStatus_t;
        pub fn miopenFindConvolutionBackwardDataAlgorithm(
            handle: miopenHandle_t,
            dy_desc: miopenTensorDescriptor_t,
            dy: *const c_void,
            w_desc: miopenTensorDescriptor_t,
            w: *const c_void,
            conv_desc: miopenConvolutionDescriptor_t,
            dx_desc: miopenTensorDescriptor_t,
            dx: *mut c_void,
            request_algo_count: c_int,
            returned_algo_count: *mut c_int,
            perf_results: *mut miopenConvAlgoPerf_t,
            work_space: *mut c_void,
            work_space_size: usize,
            exhaustive_search: bool,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionBackwardData(
            handle: miopenHandle_t,
            alpha: *const c_void,
            dy_desc: miopenTensorDescriptor_t,
            dy: *const c_void,
            w_desc: miopenTensorDescriptor_t,
            w: *const c_void,
            conv_desc: miopenConvolutionDescriptor_t,
            algo: miopenConvBwdDataAlgorithm_t,
            beta: *const c_void,
            dx_desc: miopenTensorDescriptor_t,
            dx: *mut c_void,
            work_space: *mut c_void,
            work_space_size: usize,
        ) -> miopenStatus_t;

        pub fn miopenCreatePoolingDescriptor(pool_desc: *mut miopenPoolingDescriptor_t) -> miopenStatus_t;
        pub fn miopenSet2dPoolingDescriptor(
            pool_desc: miopenPoolingDescriptor_t,
            mode: miopenPoolingMode_t,
            window_height: c_int,
            window_width: c_int,
            pad_h: c_int,
            pad_w: c_int,
            stride_h: c_int,
            stride_w: c_int,
        ) -> miopenStatus_t;
        pub fn miopenGetPoolingForwardOutputDim(
            pool_desc: miopenPoolingDescriptor_t,
            tensor_desc: miopenTensorDescriptor_t,
            n: *mut c_int,
            c: *mut c_int,
            h: *mut c_int,
            w: *mut c_int,
        ) -> miopenStatus_t;
        pub fn miopenPoolingGetWorkSpaceSize(y_desc: miopenTensorDescriptor_t, work_space_size: *mut usize) -> miopenStatus_t;
        pub fn miopenPoolingForward(
            handle: miopenHandle_t,
            pool_desc: miopenPoolingDescriptor_t,
            alpha: *const c_void,
            x_desc: miopenTensorDescriptor_t,
            x: *const c_void,
            beta: *const c_void,
            y_desc: miopenTensorDescriptor_t,
            y: *mut c_void,
            do_backward: bool,
            work_space: *mut c_void,
            work_space_size: usize,
        ) -> miopenStatus_t;
        pub fn miopenDestroyPoolingDescriptor(pool_desc: miopenPoolingDescriptor_t) -> miopenStatus_t;
    }
    optional extern "C" {
        // Immediate mode (miopen.h, all the versions named above): solutions without a search.
        pub fn miopenConvolutionForwardGetSolutionCount(
            handle: miopenHandle_t,
            w_desc: miopenTensorDescriptor_t,
            x_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            y_desc: miopenTensorDescriptor_t,
            solution_count: *mut usize,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionForwardGetSolution(
            handle: miopenHandle_t,
            w_desc: miopenTensorDescriptor_t,
            x_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            y_desc: miopenTensorDescriptor_t,
            max_solution_count: usize,
            solution_count: *mut usize,
            solutions: *mut miopenConvSolution_t,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionForwardCompileSolution(
            handle: miopenHandle_t,
            w_desc: miopenTensorDescriptor_t,
            x_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            y_desc: miopenTensorDescriptor_t,
            solution_id: u64,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionForwardImmediate(
            handle: miopenHandle_t,
            w_desc: miopenTensorDescriptor_t,
            w: *const c_void,
            x_desc: miopenTensorDescriptor_t,
            x: *const c_void,
            conv_desc: miopenConvolutionDescriptor_t,
            y_desc: miopenTensorDescriptor_t,
            y: *mut c_void,
            work_space: *mut c_void,
            work_space_size: usize,
            solution_id: u64,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionBackwardDataGetSolutionCount(
            handle: miopenHandle_t,
            dy_desc: miopenTensorDescriptor_t,
            w_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            dx_desc: miopenTensorDescriptor_t,
            solution_count: *mut usize,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionBackwardDataGetSolution(
            handle: miopenHandle_t,
            dy_desc: miopenTensorDescriptor_t,
            w_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            dx_desc: miopenTensorDescriptor_t,
            max_solution_count: usize,
            solution_count: *mut usize,
            solutions: *mut miopenConvSolution_t,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionBackwardDataCompileSolution(
            handle: miopenHandle_t,
            dy_desc: miopenTensorDescriptor_t,
            w_desc: miopenTensorDescriptor_t,
            conv_desc: miopenConvolutionDescriptor_t,
            dx_desc: miopenTensorDescriptor_t,
            solution_id: u64,
        ) -> miopenStatus_t;
        pub fn miopenConvolutionBackwardDataImmediate(
            handle: miopenHandle_t,
            dy_desc: miopenTensorDescriptor_t,
            dy: *const c_void,
            w_desc: miopenTensorDescriptor_t,
            w: *const c_void,
            conv_desc: miopenConvolutionDescriptor_t,
            dx_desc: miopenTensorDescriptor_t,
            dx: *mut c_void,
            work_space: *mut c_void,
            work_space_size: usize,
            solution_id: u64,
        ) -> miopenStatus_t;
        pub fn miopenPoolingGetWorkSpaceSizeV2(
            pool_desc: miopenPoolingDescriptor_t,
            y_desc: miopenTensorDescriptor_t,
            work_space_size: *mut usize,
        ) -> miopenStatus_t;
    }
}

/// The MIOpen library, loaded from beside the HIP runtime.
pub type Miopen = Loaded<MiopenApi>;

impl Miopen {
    /// Loads MIOpen from its override variable, else from the HIP runtime's directory.
    ///
    /// Returns `Ok(None)` when the override variable is `none` (MIOpen disabled on purpose).
    pub fn load_beside(hip: &Hip) -> Result<Option<Miopen>, LoadError> {
        let kind = LibraryKind::Miopen;
        let over = std::env::var_os(kind.override_var()).filter(|v| !v.is_empty());
        if over.as_deref() == Some(std::ffi::OsStr::new("none")) {
            return Ok(None);
        }
        let candidates = loader::companion_candidates(kind, over.as_ref(), hip.dir());
        // SAFETY: the candidates carry libMIOpen names (or the user's override for one) and
        // the table above follows MIOpen's C API.
        unsafe {
            Loaded::open(kind, candidates, MiopenApi::resolve, |api| {
                api.miopenCreate as *const c_void
            })
        }
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enum_values_follow_miopen_h() {
        assert_eq!(miopenDataType_t::miopenHalf.0, 0);
        assert_eq!(miopenDataType_t::miopenFloat.0, 1);
        assert_eq!(miopenDataType_t::miopenBFloat16.0, 5);
        assert_eq!(miopenDataType_t::miopenDouble.0, 6);
        assert_eq!(
            miopenDataType_t(7).name(),
            None,
            "8-bit floats are not declared"
        );
        assert_eq!(miopenConvolutionMode_t::miopenTranspose.0, 1);
        assert_eq!(miopenPoolingMode_t::miopenPoolingAverageInclusive.0, 2);
        assert_eq!(
            miopenConvFwdAlgorithm_t::miopenConvolutionFwdAlgoImplicitGEMM.0,
            5
        );
        assert_eq!(miopenConvFwdAlgorithm_t(4).name(), None);
        assert_eq!(
            miopenConvBwdDataAlgorithm_t::miopenTransposeBwdDataAlgoGEMM.name(),
            Some("miopenTransposeBwdDataAlgoGEMM")
        );
        assert_eq!(
            miopenStatus_t::miopenStatusBadParm.name(),
            Some("miopenStatusBadParm")
        );
        assert_eq!(miopenStatus_t(4242).name(), None);
    }

    #[test]
    fn algo_perf_layout_matches_the_c_struct() {
        assert_eq!(std::mem::size_of::<miopenConvAlgoPerf_t>(), 16);
        assert_eq!(std::mem::align_of::<miopenConvAlgoPerf_t>(), 8);
        assert_eq!(std::mem::offset_of!(miopenConvAlgoPerf_t, algo), 0);
        assert_eq!(std::mem::offset_of!(miopenConvAlgoPerf_t, time), 4);
        assert_eq!(std::mem::offset_of!(miopenConvAlgoPerf_t, memory), 8);
        let p = miopenConvAlgoPerf_t {
            algo: 5,
            time: 0.5,
            memory: 64,
        };
        assert_eq!(
            p.fwd_algo(),
            miopenConvFwdAlgorithm_t::miopenConvolutionFwdAlgoImplicitGEMM
        );
        assert_eq!(
            p.bwd_data_algo(),
            miopenConvBwdDataAlgorithm_t::miopenConvolutionBwdDataAlgoImplicitGEMM
        );
    }

    #[test]
    fn solution_layout_matches_the_c_struct() {
        assert_eq!(std::mem::size_of::<miopenConvSolution_t>(), 32);
        assert_eq!(std::mem::align_of::<miopenConvSolution_t>(), 8);
        assert_eq!(std::mem::offset_of!(miopenConvSolution_t, time), 0);
        assert_eq!(
            std::mem::offset_of!(miopenConvSolution_t, workspace_size),
            8
        );
        assert_eq!(std::mem::offset_of!(miopenConvSolution_t, solution_id), 16);
        assert_eq!(std::mem::offset_of!(miopenConvSolution_t, algorithm), 24);
        assert_eq!(
            miopenConvAlgorithm_t::miopenConvolutionAlgoImplicitGEMM.0,
            5
        );
        assert_eq!(miopenConvAlgorithm_t(4).name(), None);
    }

    #[test]
    fn table_lists_the_conv_and_pool_entry_points() {
        for name in [
            "miopenCreateWithStream",
            "miopenSet4dTensorDescriptor",
            "miopenInitConvolutionDescriptor",
            "miopenSetConvolutionGroupCount",
            "miopenFindConvolutionForwardAlgorithm",
            "miopenConvolutionForward",
            "miopenFindConvolutionBackwardDataAlgorithm",
            "miopenConvolutionBackwardData",
            "miopenSet2dPoolingDescriptor",
            "miopenPoolingForward",
        ] {
            assert!(MiopenApi::REQUIRED.contains(&name), "{name}");
        }
        for name in [
            "miopenConvolutionForwardGetSolution",
            "miopenConvolutionForwardImmediate",
            "miopenConvolutionBackwardDataGetSolution",
            "miopenConvolutionBackwardDataImmediate",
            "miopenPoolingGetWorkSpaceSizeV2",
        ] {
            assert!(MiopenApi::OPTIONAL.contains(&name), "{name}");
        }
    }
}
