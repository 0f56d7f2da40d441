//! [`Loaded<A>`]: an opened library together with its resolved entry-point table.

use std::ffi::c_void;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use crate::loader::{self, Candidate, LibraryKind, LoadError};

/// A loaded library and its table of entry points `A` (see `table.rs`).
///
/// Derefs to the table, so entry points are called as `(lib.rocblas_create_handle)(..)`. The
/// library stays loaded as long as this value lives.
pub struct Loaded<A> {
    api: A,
    path: PathBuf,
    // Declared last: the function pointers in `api` must not outlive the library.
    _lib: libloading::Library,
}

impl<A> Loaded<A> {
    /// Opens the first loadable candidate and resolves its table.
    ///
    /// # Safety
    /// `resolve` must be the `resolve` of a table whose declarations match the C signatures of
    /// the library `kind` names; `anchor` returns one of the table's function pointers (used
    /// to find the file the library was loaded from).
    pub(crate) unsafe fn open(
        kind: LibraryKind,
        candidates: Vec<Candidate>,
        resolve: unsafe fn(&libloading::Library) -> Result<A, Vec<&'static str>>,
        anchor: fn(&A) -> *const c_void,
    ) -> Result<Self, LoadError> {
        let (lib, candidate) = loader::open_first(kind, candidates)?;
        // SAFETY: the caller guarantees `resolve` matches the library; `lib` is stored next to
        // the pointers and dropped after them (field order).
        let api = unsafe { resolve(&lib) }.map_err(|names| LoadError::MissingSymbols {
            library: kind,
            path: candidate.path.clone(),
            names,
        })?;
        let path = loader::path_of_symbol(anchor(&api)).unwrap_or(candidate.path);
        Ok(Loaded {
            api,
            path,
            _lib: lib,
        })
    }

    /// The file the library was loaded from (resolved through symlinks when possible).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl<A> Deref for Loaded<A> {
    type Target = A;
    fn deref(&self) -> &A {
        &self.api
    }
}

impl<A> std::fmt::Debug for Loaded<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("library", &std::any::type_name::<A>())
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
