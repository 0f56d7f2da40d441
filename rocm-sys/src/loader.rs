//! Finding and opening the ROCm shared libraries at run time.
//!
//! Nothing is linked at build time. The HIP runtime is searched for in this order, and every
//! attempt is kept for the error message:
//!
//! 1. the override variable ([`HIP_OVERRIDE_VAR`]): a file, or a directory holding one of the
//!    sonames below. When it is set, nothing else is tried: an explicit choice that fails is
//!    reported rather than silently replaced by another runtime;
//! 2. `$ROCM_PATH/lib`, `$HIP_PATH/lib`, `/opt/rocm/lib`;
//! 3. the bare sonames, resolved by the dynamic loader (`LD_LIBRARY_PATH`, ldconfig cache).
//!
//! In every directory the sonames are tried newest first: `libamdhip64.so.7`, `.so.6`, `.so.5`,
//! then the unversioned `libamdhip64.so`. rocBLAS and MIOpen are then taken from the directory
//! the HIP runtime was loaded from (two HIP runtimes in one process break each other), unless
//! their own override variable is set. RCCL, needed only for several GPUs, is searched for by
//! [`rccl_candidates`]: its override alone when set, else beside the HIP runtime, then
//! `$ROCM_PATH/lib`, then its bare sonames.

use std::ffi::{c_char, c_int, c_void, CStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};

/// Variable naming the HIP runtime to load (a file, or a directory containing it).
pub const HIP_OVERRIDE_VAR: &str = "ROCM_SYS_HIP_LIB";
/// Variable naming the rocBLAS library to load (a file or a directory).
pub const ROCBLAS_OVERRIDE_VAR: &str = "ROCM_SYS_ROCBLAS_LIB";
/// Variable naming the MIOpen library to load (a file or a directory), or `none` to disable it.
pub const MIOPEN_OVERRIDE_VAR: &str = "ROCM_SYS_MIOPEN_LIB";

/// Sonames of the HIP runtime, newest first.
pub const HIP_SONAMES: &[&str] = &[
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libamdhip64.so",
];
/// Sonames of rocBLAS, newest first: ROCm 7 ships `.so.5`, ROCm 6 `.so.4`, ROCm 5.6-5.7
/// `.so.3`, ROCm 5.0-5.5 `.so.0`.
pub const ROCBLAS_SONAMES: &[&str] = &[
    "librocblas.so.5",
    "librocblas.so.4",
    "librocblas.so.3",
    "librocblas.so.0",
    "librocblas.so",
];
/// Sonames of MIOpen.
pub const MIOPEN_SONAMES: &[&str] = &["libMIOpen.so.1", "libMIOpen.so"];
/// Variable naming the RCCL library to load (a file or a directory).
pub const RCCL_OVERRIDE_VAR: &str = "ROCM_SYS_RCCL_LIB";
/// Sonames of RCCL: every ROCm release from 5.x to 7.x ships `librccl.so.1`.
pub const RCCL_SONAMES: &[&str] = &["librccl.so.1", "librccl.so"];

/// Which library a load concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LibraryKind {
    /// The HIP runtime, `libamdhip64`.
    Hip,
    /// rocBLAS, `librocblas`.
    Rocblas,
    /// MIOpen, `libMIOpen`.
    Miopen,
    /// RCCL, `librccl` (collectives between GPUs; only needed for several GPUs).
    Rccl,
}

impl LibraryKind {
    /// The library's file-name stem, e.g. `libamdhip64`.
    pub fn stem(self) -> &'static str {
        match self {
            LibraryKind::Hip => "libamdhip64",
            LibraryKind::Rocblas => "librocblas",
            LibraryKind::Miopen => "libMIOpen",
            LibraryKind::Rccl => "librccl",
        }
    }

    /// Sonames tried for this library, newest first.
    pub fn sonames(self) -> &'static [&'static str] {
        match self {
            LibraryKind::Hip => HIP_SONAMES,
            LibraryKind::Rocblas => ROCBLAS_SONAMES,
            LibraryKind::Miopen => MIOPEN_SONAMES,
            LibraryKind::Rccl => RCCL_SONAMES,
        }
    }

    /// The override variable for this library.
    pub fn override_var(self) -> &'static str {
        match self {
            LibraryKind::Hip => HIP_OVERRIDE_VAR,
            LibraryKind::Rocblas => ROCBLAS_OVERRIDE_VAR,
            LibraryKind::Miopen => MIOPEN_OVERRIDE_VAR,
            LibraryKind::Rccl => RCCL_OVERRIDE_VAR,
        }
    }

    fn remedy(self, tried: &[Attempt]) -> String {
        if let Some(var) = tried.iter().find_map(|a| match a.candidate.origin {
            Origin::Override(var) => Some(var),
            _ => None,
        }) {
            return format!(
                "${var} is set, so only it was tried: point it at an existing {}.so (or a \
                 directory holding one), or unset it to search the default locations",
                self.stem()
            );
        }
        match self {
            LibraryKind::Hip => format!(
                "install ROCm (5.7 or newer), set ROCM_PATH to its prefix (e.g. /opt/rocm), or set \
                 {HIP_OVERRIDE_VAR} to the path of libamdhip64.so"
            ),
            LibraryKind::Rocblas => format!(
                "install rocBLAS from the same ROCm release as the HIP runtime, or set \
                 {ROCBLAS_OVERRIDE_VAR} to the path of librocblas.so"
            ),
            LibraryKind::Miopen => format!(
                "install MIOpen from the same ROCm release as the HIP runtime, or set \
                 {MIOPEN_OVERRIDE_VAR} to its path (`none` disables it)"
            ),
            LibraryKind::Rccl => format!(
                "install RCCL from the same ROCm release as the HIP runtime (package rccl), set \
                 ROCM_PATH to that release's prefix, or set {RCCL_OVERRIDE_VAR} to the path of \
                 librccl.so.1"
            ),
        }
    }
}

impl fmt::Display for LibraryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LibraryKind::Hip => "HIP runtime (libamdhip64)",
            LibraryKind::Rocblas => "rocBLAS (librocblas)",
            LibraryKind::Miopen => "MIOpen (libMIOpen)",
            LibraryKind::Rccl => "RCCL (librccl)",
        })
    }
}

/// Where a candidate path came from, kept so error messages can say why it was tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The library's override variable.
    Override(&'static str),
    /// An environment variable naming a ROCm prefix (`ROCM_PATH`, `HIP_PATH`).
    Prefix(&'static str),
    /// The default install prefix `/opt/rocm`.
    DefaultPrefix,
    /// The directory the HIP runtime was loaded from.
    BesideHip,
    /// A bare soname resolved by the system's dynamic loader.
    SystemLoader,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Override(var) => write!(f, "from ${var}"),
            Origin::Prefix(var) => write!(f, "from ${var}/lib"),
            Origin::DefaultPrefix => f.write_str("default prefix"),
            Origin::BesideHip => f.write_str("beside the HIP runtime"),
            Origin::SystemLoader => f.write_str("system loader search path"),
        }
    }
}

/// One path that may hold the library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// What is passed to `dlopen`: an absolute path, or a bare soname.
    pub path: PathBuf,
    /// Why it is tried.
    pub origin: Origin,
}

/// One failed attempt to open a library.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The candidate that failed.
    pub candidate: Candidate,
    /// The dynamic loader's message.
    pub error: String,
}

/// Failure to load a ROCm library or resolve its entry points.
#[derive(Clone, Debug, thiserror::Error)]
pub enum LoadError {
    /// No candidate path could be opened.
    #[error("could not load the {library}; tried:\n{}\nTo fix: {}", format_attempts(.tried), .library.remedy(.tried))]
    LibraryNotFound {
        /// The library that was searched for.
        library: LibraryKind,
        /// Every path tried, in order, with the loader's error.
        tried: Vec<Attempt>,
    },
    /// The library was opened but lacks entry points this crate requires.
    #[error(
        "the {library} at {} lacks required entry points {}: it is too old or not a ROCm build. \
         To fix: install ROCm 5.7 or newer (or point {} at a complete library)",
        .path.display(), .names.join(", "), .library.override_var()
    )]
    MissingSymbols {
        /// The library that was opened.
        library: LibraryKind,
        /// Where it was opened from.
        path: PathBuf,
        /// Every missing required symbol.
        names: Vec<&'static str>,
    },
}

fn format_attempts(tried: &[Attempt]) -> String {
    if tried.is_empty() {
        return "  (no candidate paths)".to_string();
    }
    tried
        .iter()
        .map(|a| {
            format!(
                "  {} ({}): {}",
                a.candidate.path.display(),
                a.candidate.origin,
                a.error
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The environment the search order reads, separated from `std::env` so it can be tested.
#[derive(Clone, Debug, Default)]
pub struct SearchEnv {
    /// Value of the library's override variable.
    pub override_path: Option<OsString>,
    /// Value of `ROCM_PATH`.
    pub rocm_path: Option<OsString>,
    /// Value of `HIP_PATH`.
    pub hip_path: Option<OsString>,
}

impl SearchEnv {
    /// Reads the variables for `library` from the process environment.
    pub fn from_process(library: LibraryKind) -> Self {
        let non_empty = |v: Option<OsString>| v.filter(|s| !s.is_empty());
        Self {
            override_path: non_empty(std::env::var_os(library.override_var())),
            rocm_path: non_empty(std::env::var_os("ROCM_PATH")),
            hip_path: non_empty(std::env::var_os("HIP_PATH")),
        }
    }
}

/// Expands a path that may be a file or a directory into candidates.
fn expand(path: &Path, sonames: &[&str], origin: &Origin, out: &mut Vec<Candidate>) {
    if path.is_dir() {
        for so in sonames {
            push_unique(out, path.join(so), origin.clone());
        }
    } else {
        push_unique(out, path.to_path_buf(), origin.clone());
    }
}

fn push_unique(out: &mut Vec<Candidate>, path: PathBuf, origin: Origin) {
    if !out.iter().any(|c| c.path == path) {
        out.push(Candidate { path, origin });
    }
}

/// The ordered candidate list for the HIP runtime.
pub fn hip_candidates(env: &SearchEnv) -> Vec<Candidate> {
    let mut out = Vec::new();
    let sonames = HIP_SONAMES;
    if let Some(p) = &env.override_path {
        expand(
            Path::new(p),
            sonames,
            &Origin::Override(HIP_OVERRIDE_VAR),
            &mut out,
        );
        return out;
    }
    let prefixes = [
        (env.rocm_path.as_ref(), Origin::Prefix("ROCM_PATH")),
        (env.hip_path.as_ref(), Origin::Prefix("HIP_PATH")),
    ];
    for (prefix, origin) in prefixes {
        if let Some(prefix) = prefix {
            let dir = Path::new(prefix).join("lib");
            for so in sonames {
                push_unique(&mut out, dir.join(so), origin.clone());
            }
        }
    }
    for so in sonames {
        push_unique(
            &mut out,
            Path::new("/opt/rocm/lib").join(so),
            Origin::DefaultPrefix,
        );
    }
    for so in sonames {
        push_unique(&mut out, PathBuf::from(so), Origin::SystemLoader);
    }
    out
}

/// The ordered candidate list for a library that must sit beside the HIP runtime (rocBLAS,
/// MIOpen): its override alone when set, else the HIP runtime's directory.
pub fn companion_candidates(
    library: LibraryKind,
    override_path: Option<&OsString>,
    hip_dir: Option<&Path>,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    if let Some(p) = override_path {
        expand(
            Path::new(p),
            library.sonames(),
            &Origin::Override(library.override_var()),
            &mut out,
        );
        return out;
    }
    match hip_dir {
        Some(dir) => {
            for so in library.sonames() {
                push_unique(&mut out, dir.join(so), Origin::BesideHip);
            }
        }
        // The HIP runtime's directory is unknown only if dladdr failed; fall back to the
        // loader, which finds the copy next to an ldconfig-registered HIP runtime.
        None => {
            for so in library.sonames() {
                push_unique(&mut out, PathBuf::from(so), Origin::SystemLoader);
            }
        }
    }
    out
}

/// The ordered candidate list for RCCL.
///
/// Its override (`override_path`, from [`RCCL_OVERRIDE_VAR`]) alone when set. Otherwise the HIP
/// runtime's directory first (RCCL links the HIP runtime, and a second copy of it in the
/// process breaks both), then `$ROCM_PATH/lib` (`rocm_path`), then the bare sonames through the
/// system loader.
pub fn rccl_candidates(
    override_path: Option<&OsString>,
    rocm_path: Option<&OsString>,
    hip_dir: Option<&Path>,
) -> Vec<Candidate> {
    let kind = LibraryKind::Rccl;
    let mut out = Vec::new();
    if let Some(p) = override_path {
        expand(
            Path::new(p),
            kind.sonames(),
            &Origin::Override(kind.override_var()),
            &mut out,
        );
        return out;
    }
    if let Some(dir) = hip_dir {
        for so in kind.sonames() {
            push_unique(&mut out, dir.join(so), Origin::BesideHip);
        }
    }
    if let Some(prefix) = rocm_path {
        let dir = Path::new(prefix).join("lib");
        for so in kind.sonames() {
            push_unique(&mut out, dir.join(so), Origin::Prefix("ROCM_PATH"));
        }
    }
    for so in kind.sonames() {
        push_unique(&mut out, PathBuf::from(so), Origin::SystemLoader);
    }
    out
}

/// Opens the first candidate that loads; on failure returns every attempt.
pub fn open_first(
    library: LibraryKind,
    candidates: Vec<Candidate>,
) -> Result<(libloading::Library, Candidate), LoadError> {
    let mut tried = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        // SAFETY: opening a ROCm library runs its ELF initialisers. The ROCm runtime libraries'
        // initialisers only set up internal state (no thread-unsafe global mutation visible to
        // us); this is the same contract every program that links them accepts.
        match unsafe { libloading::Library::new(&candidate.path) } {
            Ok(lib) => return Ok((lib, candidate)),
            Err(e) => tried.push(Attempt {
                error: dl_error_text(&e, &candidate.path),
                candidate,
            }),
        }
    }
    Err(LoadError::LibraryNotFound { library, tried })
}

fn dl_error_text(e: &libloading::Error, path: &Path) -> String {
    // libloading wraps dlerror(); its source carries the loader's own sentence, which starts
    // with the path we already print.
    use std::error::Error as _;
    let text = e.source().map_or_else(|| e.to_string(), |s| s.to_string());
    let prefix = format!("{}: ", path.display());
    text.strip_prefix(&prefix)
        .map_or(text.clone(), str::to_string)
}

#[repr(C)]
struct DlInfo {
    dli_fname: *const c_char,
    dli_fbase: *mut c_void,
    dli_sname: *const c_char,
    dli_saddr: *mut c_void,
}

extern "C" {
    // glibc and musl export dladdr from libc (glibc >= 2.34; older glibc from libdl, which the
    // Rust standard library already links on linux-gnu).
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
}

/// The file a loaded symbol lives in, canonicalised; `None` if the loader cannot tell.
///
/// `addr` is only compared against the loaded objects' address ranges, never dereferenced, so
/// any value is safe to pass.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn path_of_symbol(addr: *const c_void) -> Option<PathBuf> {
    let mut info = DlInfo {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads `addr` as an address (it never dereferences it) and writes
    // the four fields of `info`, which is a valid, exclusively borrowed Dl_info.
    let ok = unsafe { dladdr(addr, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: on success dli_fname points to a NUL-terminated path owned by the loader, valid
    // while the object stays loaded (we copy it immediately).
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    let path = PathBuf::from(name.to_string_lossy().into_owned());
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(c: &[Candidate]) -> Vec<String> {
        c.iter().map(|c| c.path.display().to_string()).collect()
    }

    #[test]
    fn hip_order_without_env() {
        let c = hip_candidates(&SearchEnv::default());
        assert_eq!(
            paths(&c),
            [
                "/opt/rocm/lib/libamdhip64.so.7",
                "/opt/rocm/lib/libamdhip64.so.6",
                "/opt/rocm/lib/libamdhip64.so.5",
                "/opt/rocm/lib/libamdhip64.so",
                "libamdhip64.so.7",
                "libamdhip64.so.6",
                "libamdhip64.so.5",
                "libamdhip64.so",
            ]
        );
        assert_eq!(c[0].origin, Origin::DefaultPrefix);
        assert_eq!(c[7].origin, Origin::SystemLoader);
    }

    #[test]
    fn hip_order_with_override_and_prefixes() {
        let env = SearchEnv {
            override_path: Some("/nonexistent/libfake.so".into()),
            rocm_path: Some("/r".into()),
            hip_path: Some("/h".into()),
        };
        // The override is exclusive.
        let c = hip_candidates(&env);
        assert_eq!(paths(&c), ["/nonexistent/libfake.so"]);
        assert_eq!(c[0].origin, Origin::Override(HIP_OVERRIDE_VAR));
        let env = SearchEnv {
            override_path: None,
            ..env
        };
        let p = paths(&hip_candidates(&env));
        assert_eq!(p[0], "/r/lib/libamdhip64.so.7");
        assert_eq!(p[4], "/h/lib/libamdhip64.so.7");
        assert_eq!(p[8], "/opt/rocm/lib/libamdhip64.so.7");
        assert_eq!(p[12], "libamdhip64.so.7");
        assert_eq!(p.len(), 4 * 4);
    }

    #[test]
    fn duplicate_prefixes_are_tried_once() {
        let env = SearchEnv {
            override_path: None,
            rocm_path: Some("/opt/rocm".into()),
            hip_path: Some("/opt/rocm".into()),
        };
        let c = hip_candidates(&env);
        assert_eq!(c.len(), 8);
        assert_eq!(c[0].origin, Origin::Prefix("ROCM_PATH"));
    }

    #[test]
    fn override_directory_expands_to_sonames() {
        let dir = std::env::temp_dir();
        let env = SearchEnv {
            override_path: Some(dir.clone().into_os_string()),
            ..SearchEnv::default()
        };
        let c = hip_candidates(&env);
        assert_eq!(c[0].path, dir.join("libamdhip64.so.7"));
        assert_eq!(c[3].path, dir.join("libamdhip64.so"));
    }

    #[test]
    fn companions_come_from_hip_dir() {
        let c = companion_candidates(LibraryKind::Rocblas, None, Some(Path::new("/x/lib")));
        assert_eq!(paths(&c)[0], "/x/lib/librocblas.so.5");
        assert!(c.iter().all(|c| c.origin == Origin::BesideHip));
        let ov: OsString = "/y/librocblas.so".into();
        let c = companion_candidates(LibraryKind::Rocblas, Some(&ov), Some(Path::new("/x")));
        assert_eq!(paths(&c), ["/y/librocblas.so"]);
        let c = companion_candidates(LibraryKind::Miopen, None, None);
        assert!(c.iter().all(|c| c.origin == Origin::SystemLoader));
    }

    #[test]
    fn rccl_order_beside_hip_then_rocm_path_then_loader() {
        let rocm: OsString = "/r".into();
        let c = rccl_candidates(None, Some(&rocm), Some(Path::new("/h/lib")));
        assert_eq!(
            paths(&c),
            [
                "/h/lib/librccl.so.1",
                "/h/lib/librccl.so",
                "/r/lib/librccl.so.1",
                "/r/lib/librccl.so",
                "librccl.so.1",
                "librccl.so",
            ]
        );
        assert_eq!(c[0].origin, Origin::BesideHip);
        assert_eq!(c[2].origin, Origin::Prefix("ROCM_PATH"));
        assert_eq!(c[5].origin, Origin::SystemLoader);
        // The same directory twice is tried once.
        let same: OsString = "/h".into();
        assert_eq!(
            rccl_candidates(None, Some(&same), Some(Path::new("/h/lib"))).len(),
            4
        );
        // Without HIP's directory or a prefix only the loader is asked.
        assert_eq!(
            paths(&rccl_candidates(None, None, None)),
            ["librccl.so.1", "librccl.so"]
        );
        // The override is exclusive.
        let ov: OsString = "/x/librccl.so.1".into();
        let c = rccl_candidates(Some(&ov), Some(&rocm), Some(Path::new("/h/lib")));
        assert_eq!(paths(&c), ["/x/librccl.so.1"]);
        assert_eq!(c[0].origin, Origin::Override(RCCL_OVERRIDE_VAR));
    }

    #[test]
    fn not_found_lists_every_attempt_and_remedy() {
        let dir = std::env::temp_dir().join(format!("rocm-sys-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // An override directory with no library in it: every soname is tried there, and only
        // there.
        let env = SearchEnv {
            override_path: Some(dir.clone().into_os_string()),
            ..SearchEnv::default()
        };
        let err = match open_first(LibraryKind::Hip, hip_candidates(&env)) {
            Ok(_) => panic!("an empty directory loaded"),
            Err(e) => e,
        };
        let msg = err.to_string();
        for so in HIP_SONAMES {
            let p = dir.join(so);
            assert!(
                msg.contains(&format!("{} (from $ROCM_SYS_HIP_LIB)", p.display())),
                "{msg}"
            );
        }
        assert!(msg.contains("is set, so only it was tried"), "{msg}");
        match err {
            LoadError::LibraryNotFound { tried, .. } => {
                assert_eq!(tried.len(), 4);
                assert!(tried.iter().all(|a| !a.error.is_empty()));
            }
            other => panic!("unexpected {other:?}"),
        }
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn default_search_failure_lists_every_attempt() {
        let env = SearchEnv {
            override_path: None,
            rocm_path: Some("/also/not/here".into()),
            hip_path: None,
        };
        // Keep only candidates that cannot exist, so the outcome does not depend on the host.
        let cands: Vec<_> = hip_candidates(&env)
            .into_iter()
            .filter(|c| c.path.starts_with("/also"))
            .collect();
        let msg = match open_first(LibraryKind::Hip, cands) {
            Ok(_) => panic!("nonexistent paths loaded"),
            Err(e) => e.to_string(),
        };
        assert!(msg.contains("/also/not/here/lib/libamdhip64.so.5 (from $ROCM_PATH/lib)"));
        assert!(msg.contains("To fix: install ROCm"), "{msg}");
    }

    #[test]
    fn every_load_error_says_what_to_do() {
        for kind in [
            LibraryKind::Hip,
            LibraryKind::Rocblas,
            LibraryKind::Miopen,
            LibraryKind::Rccl,
        ] {
            let e = LoadError::LibraryNotFound {
                library: kind,
                tried: vec![],
            };
            assert!(e.to_string().contains(kind.override_var()), "{e}");
            let e = LoadError::MissingSymbols {
                library: kind,
                path: "/x".into(),
                names: vec!["a", "b"],
            };
            let s = e.to_string();
            assert!(s.contains("a, b") && s.contains("To fix"), "{s}");
        }
    }
}
