//! MIOpen's optional loading, against Debian 12's real ROCm 5.2 runtime (no MIOpen, no GPU
//! needed): disabled, absent and wrong-library cases each give what the design promises. One
//! test function, because it changes `ROCM_SYS_MIOPEN_LIB` (a process-wide variable).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_safe::{miopen_unavailable, RocmError, Runtime};
use rocm_sys::loader::MIOPEN_OVERRIDE_VAR;
use rocm_sys::{Hip, LoadError};

fn runtime() -> std::sync::Arc<Runtime> {
    let hip = Hip::load_from("libamdhip64.so.5").unwrap_or_else(|e| {
        panic!("Debian's ROCm 5.2 runtime is required (apt-get install libamdhip64-5): {e}")
    });
    Runtime::from_hip(hip).expect("a loaded runtime builds")
}

#[test]
fn miopen_is_optional_and_its_failures_are_typed() {
    let saved = std::env::var_os(MIOPEN_OVERRIDE_VAR);

    // Disabled on purpose: Ok(None), and the "required" error says how to enable it.
    std::env::set_var(MIOPEN_OVERRIDE_VAR, "none");
    let rt = runtime();
    assert!(matches!(rt.miopen(), Ok(None)));
    assert!(matches!(rt.miopen_version(), Ok(None)));
    let msg = miopen_unavailable(rt.hip().dir()).to_string();
    assert!(
        msg.contains("disabled") && msg.contains("To fix") && msg.contains(MIOPEN_OVERRIDE_VAR),
        "{msg}"
    );

    // Absent (the override names nothing that exists): still Ok(None), nothing else tried.
    std::env::set_var(MIOPEN_OVERRIDE_VAR, "/nonexistent/libMIOpen.so.1");
    assert!(matches!(runtime().miopen(), Ok(None)));

    // A library that is not MIOpen: a typed load error naming the missing entry points.
    let hip_path = runtime().hip().path().to_path_buf();
    std::env::set_var(MIOPEN_OVERRIDE_VAR, &hip_path);
    match runtime().miopen() {
        Err(RocmError::Load(e @ LoadError::MissingSymbols { .. })) => {
            let s = e.to_string();
            assert!(
                s.contains("miopenConvolutionForward") && s.contains("To fix"),
                "{s}"
            );
        }
        other => panic!("expected MissingSymbols, got {other:?}"),
    }

    // Unset, on a machine without MIOpen: absence costs nothing.
    std::env::remove_var(MIOPEN_OVERRIDE_VAR);
    let rt = runtime();
    match rt.miopen() {
        Ok(None) => {
            let msg = miopen_unavailable(rt.hip().dir()).to_string();
            assert!(msg.contains("not found") && msg.contains("To fix"), "{msg}");
        }
        Ok(Some(lib)) => assert!(lib.path().exists()),
        Err(e) => panic!("MIOpen absence must be Ok(None), got {e}"),
    }

    match saved {
        Some(v) => std::env::set_var(MIOPEN_OVERRIDE_VAR, v),
        None => std::env::remove_var(MIOPEN_OVERRIDE_VAR),
    }
}
