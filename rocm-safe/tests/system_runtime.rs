//! rocm-safe against Debian 12's real ROCm 5.2 runtime on a machine without an AMD GPU
//! (`apt-get install libamdhip64-5`, done by `.ci/run`): every entry point of the safe layer
//! that needs a device must return the typed "no device" error, never panic.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_safe::{Device, RocmError, Runtime};
use rocm_sys::Hip;

fn runtime() -> std::sync::Arc<Runtime> {
    let hip = Hip::load_from("libamdhip64.so.5").unwrap_or_else(|e| {
        panic!("Debian's ROCm 5.2 runtime is required (apt-get install libamdhip64-5): {e}")
    });
    Runtime::from_hip(hip).expect("a loaded runtime builds")
}

fn has_amd_gpu(rt: &Runtime) -> bool {
    rt.device_count().is_ok()
}

#[test]
fn device_count_is_a_typed_no_device_error() {
    let rt = runtime();
    if has_amd_gpu(&rt) {
        return; // This machine has a GPU: the GPU tests cover it.
    }
    match rt.device_count() {
        Err(RocmError::NoDevice { reason }) => {
            assert!(reason.contains("hipErrorInvalidDevice"), "{reason}");
            assert!(reason.contains("libamdhip64.so.5"), "{reason}");
        }
        other => panic!("expected NoDevice, got {other:?}"),
    }
}

#[test]
fn opening_a_device_reports_no_device() {
    let rt = runtime();
    if has_amd_gpu(&rt) {
        return;
    }
    let e = Device::with_runtime(rt, 0).unwrap_err();
    assert!(matches!(e, RocmError::NoDevice { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("To fix") && msg.contains("/dev/kfd"), "{msg}");
}

#[test]
fn versions_are_readable_without_a_device() {
    let rt = runtime();
    let v = rt
        .runtime_version()
        .expect("hipRuntimeGetVersion works without a device");
    assert_eq!(v / 10_000_000, 5, "{v}");
    assert!(rt.check_err().is_ok());
}

#[test]
fn companion_libraries_fail_softly() {
    let rt = runtime();
    // Debian 12 packages neither rocBLAS nor MIOpen.
    if std::env::var_os("ROCM_SYS_ROCBLAS_LIB").is_none() {
        match rt.rocblas() {
            Err(RocmError::Load(e)) => assert!(e.to_string().contains("librocblas"), "{e}"),
            Ok(lib) => assert!(lib.path().exists()),
            Err(e) => panic!("unexpected {e}"),
        }
    }
    if std::env::var_os("ROCM_SYS_MIOPEN_LIB").is_none() {
        match rt.miopen() {
            Ok(None) => {}
            Ok(Some(lib)) => assert!(lib.path().exists()),
            Err(e) => panic!("MIOpen absence must be Ok(None), got {e}"),
        }
    }
}

#[test]
fn rocm_5_2_has_the_graph_entry_points() {
    // ROCm 5.2's libamdhip64 exports stream capture, instantiate, update and launch (HIP 4.3 /
    // 4.5 symbols): graphs resolve without a device, and a runtime lacking them is covered by
    // the unit tests of rocm-safe's `graph` module.
    let rt = runtime();
    rt.graphs_available()
        .unwrap_or_else(|e| panic!("ROCm 5.2's runtime has every graph entry point: {e}"));
    let hip = rt.hip();
    assert!(hip.hipStreamBeginCapture.is_some() && hip.hipGraphExecUpdate.is_some());
}
