//! RCCL, the collectives library of ROCm, declared by hand (Debian 12 packages no RCCL headers
//! to generate from).
//!
//! RCCL exports NCCL's C API under NCCL's names (`ncclAllReduce`, ...) from `librccl.so.1`,
//! with `hipStream_t` where NCCL has `cudaStream_t`. Only what a tensor-parallel model needs is
//! declared: the unique id, communicator set-up and tear-down, the error queries, and the
//! collectives and point-to-point calls.
//!
//! Where each fact comes from: `src/nccl.h.in` of ROCm/rccl at the tags `rocm-5.2.0`
//! (`43188bf`), `rocm-5.7.0` (`cbbb3d8`), `rocm-6.0.0` (`2f6d59e`), `rocm-6.1.2` (`2fbe387`),
//! `rocm-6.2.2` (`d380693`) and `develop` at `0cbce2a` (Oct 2024), and
//! `projects/rccl/src/nccl.h.in` of ROCm/rocm-systems at `8dd8e3d` (the ROCm 7 monorepo).
//! Every prototype below is the same in all of them. The enum values are too, with these
//! differences: `ncclRemoteError` and `ncclInProgress` appeared with ROCm 5.7 (RCCL 2.13+); the
//! 8-bit float data types 10 and 11 appeared with ROCm 6.2 as `ncclFp8E4M3`/`ncclFp8E5M2` and are
//! called `ncclFloat8e4m3`/`ncclFloat8e5m2` in the ROCm 7 header (same values; NCCL 2.24+ uses
//! the same values and the newer names). `ncclGetLastError` is absent from ROCm 5.2, so it is
//! optional here; everything else required exists in every release from ROCm 5.7 on.
//! `ncclCommInitRankConfig` and `ncclConfig_t` (`ncclConfig_v21700`: size, magic, version,
//! blocking, cgaClusterSize, minCTAs, maxCTAs, netName; `splitShare` appended in ROCm 6.0, more
//! fields in ROCm 7) exist from ROCm 5.7 on; the function is optional here all the same.
//!
//! RCCL's 8-bit float types follow the GPU: on gfx942 (MI300) RCCL 6.2's `rccl_float8` is the
//! FNUZ variant (`src/include/rccl_float8.h`, bias mode on), not the OCP `e4m3fn` that Candle's
//! `F8E4M3` is. A reduction over them is therefore only meaningful where the formats agree;
//! copies (all-gather, broadcast, send/recv) are bytewise and safe as `ncclUint8`.
//!
//! The C enums are 32-bit on the ROCm ABIs and are declared as integer newtypes, so a value a
//! newer RCCL adds (a result code, a dynamic reduction op) is a value, never undefined
//! behaviour.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, OsString};

use crate::bindings::hip::hipStream_t;
use crate::library::Loaded;
use crate::loader::{self, Candidate, LibraryKind, LoadError};
use crate::rocblas::int_newtype;
use crate::table::api_table;
use crate::Hip;

/// Opaque communicator (`struct ncclComm*`).
pub type ncclComm_t = *mut c_void;

/// Size of [`ncclUniqueId`] in bytes (`NCCL_UNIQUE_ID_BYTES`).
pub const NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: the opaque id every rank passes to `ncclCommInitRank`.
///
/// `typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;` Passed by value to
/// `ncclCommInitRank` (a 128-byte aggregate, passed in memory on x86-64 SysV and AArch64).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ncclUniqueId {
    /// The id's bytes.
    pub internal: [c_char; NCCL_UNIQUE_ID_BYTES],
}

impl Default for ncclUniqueId {
    fn default() -> Self {
        Self {
            internal: [0; NCCL_UNIQUE_ID_BYTES],
        }
    }
}

/// `NCCL_CONFIG_UNDEF_INT`: a configuration field left to RCCL's default.
pub const NCCL_CONFIG_UNDEF_INT: c_int = c_int::MIN;
/// The `magic` of an initialised [`ncclConfig_t`] (`NCCL_CONFIG_INITIALIZER`).
pub const NCCL_CONFIG_MAGIC: c_uint = 0xcafe_beef;

/// `ncclConfig_t` as RCCL declares it from ROCm 5.7 on (`struct ncclConfig_v21700`), up to
/// `netName`.
///
/// The struct is versioned by its leading `size`: RCCL (like NCCL, `parseCommConfig` in
/// `src/init.cc`) copies `min(size, its own sizeof)` bytes over its defaults, so the fields
/// later releases append (`splitShare`, `commName`, ...) keep their defaults when this shorter
/// struct is passed. Build it with [`ncclConfig_t::initializer`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ncclConfig_t {
    /// `sizeof` the struct passed (set by the initializer).
    pub size: usize,
    /// [`NCCL_CONFIG_MAGIC`].
    pub magic: c_uint,
    /// The `NCCL_VERSION` of the layout: 2.17.0 (21700) for this one.
    pub version: c_uint,
    /// 0: non-blocking communicator (calls may return `ncclInProgress`); 1: blocking.
    pub blocking: c_int,
    /// Cooperative group array cluster size.
    pub cgaClusterSize: c_int,
    /// Minimum number of thread blocks (channels).
    pub minCTAs: c_int,
    /// Maximum number of thread blocks (channels).
    pub maxCTAs: c_int,
    /// Network to use, or null.
    pub netName: *const c_char,
}

impl ncclConfig_t {
    /// `NCCL_CONFIG_INITIALIZER` for this layout: every field left to RCCL's default.
    pub fn initializer() -> Self {
        Self {
            size: std::mem::size_of::<Self>(),
            magic: NCCL_CONFIG_MAGIC,
            version: 21_700,
            blocking: NCCL_CONFIG_UNDEF_INT,
            cgaClusterSize: NCCL_CONFIG_UNDEF_INT,
            minCTAs: NCCL_CONFIG_UNDEF_INT,
            maxCTAs: NCCL_CONFIG_UNDEF_INT,
            netName: std::ptr::null(),
        }
    }
}

int_newtype! {
    /// `ncclResult_t`.
    ncclResult_t(u32) {
        /// No error.
        ncclSuccess = 0,
        /// Unhandled HIP error.
        ncclUnhandledCudaError = 1,
        /// Unhandled system error (network, shared memory, ...).
        ncclSystemError = 2,
        /// Internal error of RCCL.
        ncclInternalError = 3,
        /// Invalid argument.
        ncclInvalidArgument = 4,
        /// Invalid usage (e.g. mismatched calls between ranks).
        ncclInvalidUsage = 5,
        /// A remote process exited or there was a network error (ROCm 5.7+).
        ncclRemoteError = 6,
        /// A non-blocking operation is still in progress (ROCm 5.7+).
        ncclInProgress = 7,
    }
}

impl ncclResult_t {
    /// Whether this is `ncclSuccess`.
    pub fn is_success(self) -> bool {
        self == ncclResult_t::ncclSuccess
    }
}

int_newtype! {
    /// `ncclRedOp_t`: the built-in reductions. Values from `ncclNumOps` (5) up are dynamic
    /// operators made by `ncclRedOpCreatePreMulSum` (not declared here).
    ncclRedOp_t(u32) {
        /// Sum.
        ncclSum = 0,
        /// Product.
        ncclProd = 1,
        /// Maximum.
        ncclMax = 2,
        /// Minimum.
        ncclMin = 3,
        /// Average (sum divided by the number of ranks).
        ncclAvg = 4,
    }
}

/// `ncclNumOps`: the number of built-in reductions.
pub const ncclNumOps: u32 = 5;

int_newtype! {
    /// `ncclDataType_t`, as RCCL has it. The C aliases (`ncclChar`, `ncclInt`, `ncclHalf`,
    /// `ncclFloat`, `ncclDouble`, and the ROCm 6.2 names of the 8-bit floats) are constants
    /// below.
    ncclDataType_t(u32) {
        /// `int8_t`.
        ncclInt8 = 0,
        /// `uint8_t`.
        ncclUint8 = 1,
        /// `int32_t`.
        ncclInt32 = 2,
        /// `uint32_t`.
        ncclUint32 = 3,
        /// `int64_t`.
        ncclInt64 = 4,
        /// `uint64_t`.
        ncclUint64 = 5,
        /// IEEE half.
        ncclFloat16 = 6,
        /// IEEE single.
        ncclFloat32 = 7,
        /// IEEE double.
        ncclFloat64 = 8,
        /// bfloat16 (every RCCL; NCCL only when built with CUDA 11+).
        ncclBfloat16 = 9,
        /// 8-bit float, 4-bit exponent (ROCm 6.2+; FNUZ or OCP depending on the GPU, see the
        /// module documentation).
        ncclFloat8e4m3 = 10,
        /// 8-bit float, 5-bit exponent (ROCm 6.2+; same caveat).
        ncclFloat8e5m2 = 11,
    }
}

#[allow(non_upper_case_globals)]
impl ncclDataType_t {
    /// `ncclChar`, an alias of `ncclInt8`.
    pub const ncclChar: ncclDataType_t = ncclDataType_t::ncclInt8;
    /// `ncclInt`, an alias of `ncclInt32`.
    pub const ncclInt: ncclDataType_t = ncclDataType_t::ncclInt32;
    /// `ncclHalf`, an alias of `ncclFloat16`.
    pub const ncclHalf: ncclDataType_t = ncclDataType_t::ncclFloat16;
    /// `ncclFloat`, an alias of `ncclFloat32`.
    pub const ncclFloat: ncclDataType_t = ncclDataType_t::ncclFloat32;
    /// `ncclDouble`, an alias of `ncclFloat64`.
    pub const ncclDouble: ncclDataType_t = ncclDataType_t::ncclFloat64;
    /// `ncclFp8E4M3`, the ROCm 6.2 name of `ncclFloat8e4m3`.
    pub const ncclFp8E4M3: ncclDataType_t = ncclDataType_t::ncclFloat8e4m3;
    /// `ncclFp8E5M2`, the ROCm 6.2 name of `ncclFloat8e5m2`.
    pub const ncclFp8E5M2: ncclDataType_t = ncclDataType_t::ncclFloat8e5m2;

    /// Size of one element in bytes, `None` for values this crate does not know.
    pub fn size_in_bytes(self) -> Option<usize> {
        match self.0 {
            0 | 1 | 10 | 11 => Some(1),
            6 | 9 => Some(2),
            2 | 3 | 7 => Some(4),
            4 | 5 | 8 => Some(8),
            _ => None,
        }
    }
}

api_table! {
    /// The RCCL entry points rocm-safe uses (NCCL's C API as RCCL exports it).
    pub struct RcclApi;
    required extern "C" {
        pub fn ncclGetVersion(version: *mut c_int) -> ncclResult_t;
        pub fn ncclGetUniqueId(unique_id: *mut ncclUniqueId) -> ncclResult_t;
        pub fn ncclCommInitRank(
            comm: *mut ncclComm_t,
            nranks: c_int,
            comm_id: ncclUniqueId,
            rank: c_int,
        ) -> ncclResult_t;
        pub fn ncclCommInitAll(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> ncclResult_t;
        pub fn ncclCommDestroy(comm: ncclComm_t) -> ncclResult_t;
        pub fn ncclCommAbort(comm: ncclComm_t) -> ncclResult_t;
        pub fn ncclGetErrorString(result: ncclResult_t) -> *const c_char;
        pub fn ncclCommGetAsyncError(comm: ncclComm_t, async_error: *mut ncclResult_t) -> ncclResult_t;
        pub fn ncclCommCount(comm: ncclComm_t, count: *mut c_int) -> ncclResult_t;
        pub fn ncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) -> ncclResult_t;
        pub fn ncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) -> ncclResult_t;
        pub fn ncclBroadcast(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            count: usize,
            datatype: ncclDataType_t,
            root: c_int,
            comm: ncclComm_t,
            stream: hipStream_t,
        ) -> ncclResult_t;
        pub fn ncclAllReduce(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            count: usize,
            datatype: ncclDataType_t,
            op: ncclRedOp_t,
            comm: ncclComm_t,
            stream: hipStream_t,
        ) -> ncclResult_t;
        pub fn ncclReduceScatter(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            recvcount: usize,
            datatype: ncclDataType_t,
            op: ncclRedOp_t,
            comm: ncclComm_t,
            stream: hipStream_t,
        ) -> ncclResult_t;
        pub fn ncclAllGather(
            sendbuff: *const c_void,
            recvbuff: *mut c_void,
            sendcount: usize,
            datatype: ncclDataType_t,
            comm: ncclComm_t,
            stream: hipStream_t,
        ) -> ncclResult_t;
        pub fn ncclSend(
            sendbuff: *const c_void,
            count: usize,
            datatype: ncclDataType_t,
            peer: c_int,
            comm: ncclComm_t,
            stream: hipStream_t,
        ) -> ncclResult_t;
        pub fn ncclRecv(
            recvbuff: *mut c_void,
            count: usize,
            datatype: ncclDataType_t,
            peer: c_int,
            comm: ncclComm_t,
            stream: hipStream_t,
        ) -> ncclResult_t;
        pub fn ncclGroupStart() -> ncclResult_t;
        pub fn ncclGroupEnd() -> ncclResult_t;
    }
    optional extern "C" {
        pub fn ncclGetLastError(comm: ncclComm_t) -> *const c_char;
        pub fn ncclCommFinalize(comm: ncclComm_t) -> ncclResult_t;
        pub fn ncclCommInitRankConfig(
            comm: *mut ncclComm_t,
            nranks: c_int,
            comm_id: ncclUniqueId,
            rank: c_int,
            config: *mut ncclConfig_t,
        ) -> ncclResult_t;
    }
}

/// The RCCL library, loaded at run time.
pub type Rccl = Loaded<RcclApi>;

impl Rccl {
    /// Loads RCCL following [`loader::rccl_candidates`]: `ROCM_SYS_RCCL_LIB` alone when set,
    /// else beside the HIP runtime, `$ROCM_PATH/lib`, then the system loader.
    pub fn load_beside(hip: &Hip) -> Result<Rccl, LoadError> {
        let non_empty = |v: Option<OsString>| v.filter(|s| !s.is_empty());
        let over = non_empty(std::env::var_os(loader::RCCL_OVERRIDE_VAR));
        let rocm = non_empty(std::env::var_os("ROCM_PATH"));
        Self::load_from_candidates(loader::rccl_candidates(
            over.as_ref(),
            rocm.as_ref(),
            hip.dir(),
        ))
    }

    /// Loads the first candidate that opens and exports every required entry point.
    pub fn load_from_candidates(candidates: Vec<Candidate>) -> Result<Rccl, LoadError> {
        // SAFETY: the candidates carry librccl names (or the user's override for one) and the
        // table above follows RCCL's `nccl.h` (see the module documentation).
        unsafe {
            Loaded::open(LibraryKind::Rccl, candidates, RcclApi::resolve, |api| {
                api.ncclGetUniqueId as *const c_void
            })
        }
    }

    /// `ncclGetVersion`: RCCL's version code, e.g. `21804` for 2.18.4.
    pub fn version_code(&self) -> Result<c_int, ncclResult_t> {
        let mut v: c_int = 0;
        // SAFETY: `v` is a valid out-pointer for one int; the call needs no device.
        let code = unsafe { (self.ncclGetVersion)(&mut v) };
        if code.is_success() {
            Ok(v)
        } else {
            Err(code)
        }
    }

    /// RCCL's description of a result code (`ncclGetErrorString`).
    pub fn error_string(&self, code: ncclResult_t) -> String {
        // SAFETY: ncclGetErrorString accepts any value (unknown ones map to a fixed string) and
        // returns a pointer to a static NUL-terminated string.
        let p = unsafe { (self.ncclGetErrorString)(code) };
        if p.is_null() {
            return "unknown RCCL result".to_string();
        }
        // SAFETY: non-null results point to static NUL-terminated strings owned by RCCL.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Decodes an `ncclGetVersion` code into `major.minor.patch`.
///
/// NCCL's `NCCL_VERSION(X,Y,Z)` is `X*1000 + Y*100 + Z` up to 2.8 and `X*10000 + Y*100 + Z`
/// from 2.9 on; the two ranges do not overlap (2.8.x is below 10000, 2.9.0 is 20900).
pub fn version_string(code: c_int) -> String {
    let code = code.max(0);
    let (major, rest) = if code >= 10_000 {
        (code / 10_000, code % 10_000)
    } else {
        (code / 1_000, code % 1_000)
    };
    format!("{major}.{}.{}", rest / 100, rest % 100)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn enum_values_follow_rcclh() {
        assert_eq!(ncclResult_t::ncclSuccess.0, 0);
        assert_eq!(ncclResult_t::ncclInvalidUsage.0, 5);
        assert_eq!(ncclResult_t::ncclRemoteError.0, 6);
        assert_eq!(ncclResult_t::ncclInProgress.0, 7);
        assert_eq!(ncclResult_t(8).name(), None, "ncclNumResults is not a code");
        assert_eq!(ncclRedOp_t::ncclSum.0, 0);
        assert_eq!(ncclRedOp_t::ncclProd.0, 1);
        assert_eq!(ncclRedOp_t::ncclMax.0, 2);
        assert_eq!(ncclRedOp_t::ncclMin.0, 3);
        assert_eq!(ncclRedOp_t::ncclAvg.0, 4);
        assert_eq!(ncclNumOps, 5);
        let types = [
            (ncclDataType_t::ncclInt8, 0, 1),
            (ncclDataType_t::ncclUint8, 1, 1),
            (ncclDataType_t::ncclInt32, 2, 4),
            (ncclDataType_t::ncclUint32, 3, 4),
            (ncclDataType_t::ncclInt64, 4, 8),
            (ncclDataType_t::ncclUint64, 5, 8),
            (ncclDataType_t::ncclFloat16, 6, 2),
            (ncclDataType_t::ncclFloat32, 7, 4),
            (ncclDataType_t::ncclFloat64, 8, 8),
            (ncclDataType_t::ncclBfloat16, 9, 2),
            (ncclDataType_t::ncclFloat8e4m3, 10, 1),
            (ncclDataType_t::ncclFloat8e5m2, 11, 1),
        ];
        for (t, value, size) in types {
            assert_eq!(t.0, value, "{t:?}");
            assert_eq!(t.size_in_bytes(), Some(size), "{t:?}");
        }
        assert_eq!(
            ncclDataType_t(12).name(),
            None,
            "ncclNumTypes is not a type"
        );
        assert_eq!(ncclDataType_t(12).size_in_bytes(), None);
        assert_eq!(ncclDataType_t::ncclHalf, ncclDataType_t::ncclFloat16);
        assert_eq!(ncclDataType_t::ncclFp8E4M3.0, 10);
        assert_eq!(ncclDataType_t::ncclChar.name(), Some("ncclInt8"));
    }

    #[test]
    fn unique_id_is_128_bytes_of_char() {
        assert_eq!(std::mem::size_of::<ncclUniqueId>(), 128);
        assert_eq!(std::mem::align_of::<ncclUniqueId>(), 1);
        assert_eq!(ncclUniqueId::default().internal, [0; 128]);
    }

    #[test]
    fn config_matches_the_v21700_layout() {
        assert_eq!(std::mem::size_of::<ncclConfig_t>(), 40);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, magic), 8);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, version), 12);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, blocking), 16);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, maxCTAs), 28);
        assert_eq!(std::mem::offset_of!(ncclConfig_t, netName), 32);
        let c = ncclConfig_t::initializer();
        assert_eq!((c.size, c.magic, c.version), (40, 0xcafebeef, 21_700));
        assert_eq!(c.blocking, i32::MIN);
        assert!(c.netName.is_null());
    }

    #[test]
    fn versions_decode_both_encodings() {
        assert_eq!(version_string(2708), "2.7.8");
        assert_eq!(version_string(20_900), "2.9.0");
        assert_eq!(version_string(21_804), "2.18.4");
        assert_eq!(version_string(22_703), "2.27.3");
        assert_eq!(version_string(-1), "0.0.0");
    }

    #[test]
    fn table_lists_what_tensor_parallelism_needs() {
        for name in [
            "ncclGetVersion",
            "ncclGetUniqueId",
            "ncclCommInitRank",
            "ncclCommInitAll",
            "ncclAllReduce",
            "ncclAllGather",
            "ncclReduceScatter",
            "ncclBroadcast",
            "ncclSend",
            "ncclRecv",
            "ncclGroupStart",
            "ncclGroupEnd",
            "ncclCommAbort",
            "ncclCommDestroy",
            "ncclGetErrorString",
            "ncclCommGetAsyncError",
            "ncclCommCount",
            "ncclCommCuDevice",
            "ncclCommUserRank",
        ] {
            assert!(RcclApi::REQUIRED.contains(&name), "{name}");
        }
        assert_eq!(
            RcclApi::OPTIONAL,
            &[
                "ncclGetLastError",
                "ncclCommFinalize",
                "ncclCommInitRankConfig"
            ]
        );
    }

    #[test]
    fn a_missing_rccl_names_the_variable_to_set() {
        let over: OsString = "/nonexistent/rccl-test/librccl.so.1".into();
        let err = Rccl::load_from_candidates(loader::rccl_candidates(Some(&over), None, None))
            .expect_err("a nonexistent path loaded");
        let msg = err.to_string();
        assert!(msg.contains("RCCL (librccl)"), "{msg}");
        assert!(msg.contains("$ROCM_SYS_RCCL_LIB is set"), "{msg}");
        // Without the override: the remedy names the variable and the package.
        let rocm: OsString = "/nonexistent/rccl-prefix".into();
        let cands: Vec<_> = loader::rccl_candidates(None, Some(&rocm), None)
            .into_iter()
            .filter(|c| c.path.starts_with("/nonexistent"))
            .collect();
        let err = Rccl::load_from_candidates(cands).expect_err("loaded");
        let msg = err.to_string();
        assert!(
            msg.contains("/nonexistent/rccl-prefix/lib/librccl.so.1 (from $ROCM_PATH/lib)"),
            "{msg}"
        );
        assert!(msg.contains("set ROCM_SYS_RCCL_LIB"), "{msg}");
        assert!(matches!(
            err,
            LoadError::LibraryNotFound {
                library: LibraryKind::Rccl,
                ..
            }
        ));
    }

    #[test]
    fn a_library_without_nccl_symbols_is_rejected_by_name() {
        // libc loads everywhere and exports none of RCCL's entry points.
        let cands = vec![Candidate {
            path: "libc.so.6".into(),
            origin: loader::Origin::Override(loader::RCCL_OVERRIDE_VAR),
        }];
        match Rccl::load_from_candidates(cands) {
            Err(LoadError::MissingSymbols { library, names, .. }) => {
                assert_eq!(library, LibraryKind::Rccl);
                assert_eq!(names.len(), RcclApi::REQUIRED.len());
                assert!(names.contains(&"ncclCommInitRank"));
            }
            other => panic!("expected MissingSymbols, got {other:?}"),
        }
    }
}
