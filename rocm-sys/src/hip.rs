//! The loaded HIP runtime: [`Hip`] owns `libamdhip64` and its entry-point table.

use std::ffi::{c_int, c_void, CStr};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::bindings::hip::{hipError_t, HipApi};
use crate::loader::{self, Candidate, LibraryKind, LoadError, SearchEnv};
use crate::props::PropsApi;

/// The HIP runtime library, loaded at run time, with every entry point this crate uses.
///
/// Derefs to [`HipApi`], so entry points are called as `(hip.hipMalloc)(..)`. The library stays
/// loaded for as long as any clone of the `Arc<Hip>` that [`Hip::load`] returns is alive.
pub struct Hip {
    api: HipApi,
    props: PropsApi,
    path: PathBuf,
    dir: Option<PathBuf>,
    // Declared last: the function pointers above must not outlive the library.
    _lib: libloading::Library,
}

impl Hip {
    /// Loads the HIP runtime following the crate's search order (see [`crate::loader`]).
    pub fn load() -> Result<Arc<Hip>, LoadError> {
        let env = SearchEnv::from_process(LibraryKind::Hip);
        Self::load_from_candidates(loader::hip_candidates(&env))
    }

    /// Loads the HIP runtime from one explicit path (a file or a bare soname).
    pub fn load_from(path: impl AsRef<Path>) -> Result<Arc<Hip>, LoadError> {
        Self::load_from_candidates(vec![Candidate {
            path: path.as_ref().to_path_buf(),
            origin: loader::Origin::Override(loader::HIP_OVERRIDE_VAR),
        }])
    }

    /// Loads the first candidate that opens and resolves every required entry point.
    pub fn load_from_candidates(candidates: Vec<Candidate>) -> Result<Arc<Hip>, LoadError> {
        let (lib, candidate) = loader::open_first(LibraryKind::Hip, candidates)?;
        // SAFETY: `lib` is a HIP runtime (it opened under a libamdhip64 name or the user's
        // override for one); the table's signatures are generated from the HIP headers, and
        // the pointers live in `Hip` next to `lib`, which is dropped after them.
        let api = unsafe { HipApi::resolve(&lib) }.map_err(|names| LoadError::MissingSymbols {
            library: LibraryKind::Hip,
            path: candidate.path.clone(),
            names,
        })?;
        // SAFETY: as above; the device-properties entry points are declared in `props.rs` with
        // an opaque out-buffer and the C signature shared by every version of them.
        let props =
            unsafe { PropsApi::resolve(&lib) }.map_err(|names| LoadError::MissingSymbols {
                library: LibraryKind::Hip,
                path: candidate.path.clone(),
                names,
            })?;
        let path = loader::path_of_symbol(api.hipInit as *const c_void)
            .unwrap_or_else(|| candidate.path.clone());
        let dir = path
            .is_absolute()
            .then(|| path.parent().map(Path::to_path_buf))
            .flatten();
        Ok(Arc::new(Hip {
            api,
            props,
            path,
            dir,
            _lib: lib,
        }))
    }

    /// The file the runtime was loaded from (resolved through symlinks when possible).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory the runtime was loaded from, where rocBLAS and MIOpen are looked for.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The device-properties entry points (see [`crate::props`]).
    pub fn props(&self) -> &PropsApi {
        &self.props
    }

    /// The runtime's name for a status code, e.g. `hipErrorOutOfMemory`.
    pub fn error_name(&self, code: hipError_t) -> String {
        // SAFETY: hipGetErrorName accepts any code (unknown ones map to a fixed string) and
        // returns a pointer to a static NUL-terminated string, or null.
        let p = unsafe { (self.api.hipGetErrorName)(code) };
        static_str(p).unwrap_or_else(|| format!("hipError({})", code.0))
    }

    /// The runtime's description of a status code.
    pub fn error_string(&self, code: hipError_t) -> String {
        // SAFETY: as for `error_name`; hipGetErrorString returns a static string or null.
        let p = unsafe { (self.api.hipGetErrorString)(code) };
        static_str(p).unwrap_or_else(|| "unknown HIP error".to_string())
    }

    /// `hipRuntimeGetVersion`, e.g. `60_342_134` for ROCm 6.3. Works without a device.
    pub fn runtime_version(&self) -> Result<c_int, hipError_t> {
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer for one int.
        let code = unsafe { (self.api.hipRuntimeGetVersion)(&mut v) };
        if code == hipError_t::hipSuccess {
            Ok(v)
        } else {
            Err(code)
        }
    }
}

fn static_str(p: *const std::ffi::c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null pointers from hipGetErrorName/String point to static NUL-terminated
    // strings owned by the runtime.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

impl Deref for Hip {
    type Target = HipApi;
    fn deref(&self) -> &HipApi {
        &self.api
    }
}

impl std::fmt::Debug for Hip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hip")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
