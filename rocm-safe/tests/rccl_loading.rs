//! RCCL's loading against Debian 12's real ROCm 5.2 HIP runtime (no RCCL, no GPU needed): a
//! missing RCCL and a library that is not RCCL each give a typed error that names the
//! variable to set. One test function, because it changes `ROCM_SYS_RCCL_LIB` (a process-wide
//! variable).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_safe::rccl::UniqueId;
use rocm_safe::{RocmError, Runtime};
use rocm_sys::loader::RCCL_OVERRIDE_VAR;
use rocm_sys::{Hip, LibraryKind, LoadError};

fn runtime() -> std::sync::Arc<Runtime> {
    let hip = Hip::load_from("libamdhip64.so.5").unwrap_or_else(|e| {
        panic!("Debian's ROCm 5.2 runtime is required (apt-get install libamdhip64-5): {e}")
    });
    Runtime::from_hip(hip).expect("a loaded runtime builds")
}

#[test]
fn a_missing_or_wrong_rccl_is_a_typed_error_naming_the_variable() {
    let saved = std::env::var_os(RCCL_OVERRIDE_VAR);

    // Not installed: searched beside the HIP runtime and through the loader, then reported.
    std::env::remove_var(RCCL_OVERRIDE_VAR);
    let rt = runtime();
    match rt.rccl() {
        Err(RocmError::Load(LoadError::LibraryNotFound { library, tried })) => {
            assert_eq!(library, LibraryKind::Rccl);
            let hip_dir = rt.hip().dir().expect("the runtime's directory is known");
            assert_eq!(tried[0].candidate.path, hip_dir.join("librccl.so.1"));
            assert!(tried
                .iter()
                .any(|a| a.candidate.path.as_os_str() == "librccl.so.1"));
        }
        other => panic!("expected LibraryNotFound, got {other:?}"),
    }
    let msg = rt.rccl_version().unwrap_err().to_string();
    assert!(msg.contains("set ROCM_SYS_RCCL_LIB"), "{msg}");
    // What a multi-GPU program hits first: the same typed error, never a panic.
    let e = UniqueId::new(&rt).unwrap_err();
    assert!(matches!(e, RocmError::Load(_)), "{e}");

    // The override names nothing: only it is tried, and the message says so.
    std::env::set_var(RCCL_OVERRIDE_VAR, "/nonexistent/librccl.so.1");
    let msg = runtime().rccl().unwrap_err().to_string();
    assert!(
        msg.contains("/nonexistent/librccl.so.1 (from $ROCM_SYS_RCCL_LIB)")
            && msg.contains("$ROCM_SYS_RCCL_LIB is set, so only it was tried"),
        "{msg}"
    );

    // A library that is not RCCL: the missing entry points are named.
    let hip_path = runtime().hip().path().to_path_buf();
    std::env::set_var(RCCL_OVERRIDE_VAR, &hip_path);
    match runtime().rccl() {
        Err(RocmError::Load(e @ LoadError::MissingSymbols { .. })) => {
            let s = e.to_string();
            assert!(
                s.contains("ncclCommInitRank") && s.contains(RCCL_OVERRIDE_VAR),
                "{s}"
            );
        }
        other => panic!("expected MissingSymbols, got {other:?}"),
    }

    match saved {
        Some(v) => std::env::set_var(RCCL_OVERRIDE_VAR, v),
        None => std::env::remove_var(RCCL_OVERRIDE_VAR),
    }
}
