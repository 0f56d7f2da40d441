//! Loader tests against a real HIP runtime with no GPU: Debian 12's ROCm 5.2 packages
//! (`apt-get install libamdhip64-5`), which `.ci/run` installs.
//!
//! On a machine without an AMD GPU that runtime loads, exports every symbol we require, and
//! reports "no device" from hipInit/hipGetDeviceCount. These tests prove our symbol list and our
//! handling of those codes against a real library rather than our own test double.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_sys::{hipError_t, Hip, LibraryKind, LoadError};

fn debian_runtime() -> std::sync::Arc<Hip> {
    match Hip::load_from("libamdhip64.so.5") {
        Ok(hip) => hip,
        Err(e) => panic!(
            "Debian's ROCm 5.2 runtime is required for this test \
             (apt-get install libamdhip64-5): {e}"
        ),
    }
}

#[test]
fn every_required_symbol_resolves_in_rocm_5_2() {
    let hip = debian_runtime();
    assert!(
        hip.path().to_string_lossy().contains("libamdhip64.so.5"),
        "loaded {}",
        hip.path().display()
    );
    // The 5.2 runtime predates the R0600 entry point and has the old one.
    assert!(hip.props().hipGetDevicePropertiesR0600.is_none());
    assert!(hip.props().arch_name_entry().is_some());
    // Stream-ordered allocation exists since 5.1.
    assert!(hip.hipMallocAsync.is_some() && hip.hipFreeAsync.is_some());
    let v = hip.runtime_version().map_err(|c| c.0);
    assert!(
        matches!(v, Ok(v) if v / 10_000_000 == 5),
        "runtime version {v:?}"
    );
}

#[test]
fn no_device_is_a_status_not_a_crash() {
    let hip = debian_runtime();
    // SAFETY: hipInit takes flags by value (0 is the only defined value).
    let init = unsafe { (hip.hipInit)(0) };
    let mut count = -1;
    // SAFETY: `count` is a valid out-pointer.
    let dc = unsafe { (hip.hipGetDeviceCount)(&mut count) };
    // On a machine with an AMD GPU both succeed; everywhere else they must report no device.
    if init.is_success() {
        assert!(dc.is_success() && count > 0, "{dc:?} {count}");
    } else {
        assert_eq!(init, hipError_t::hipErrorInvalidDevice, "hipInit: {init:?}");
        assert_eq!(
            dc,
            hipError_t::hipErrorNoDevice,
            "hipGetDeviceCount: {dc:?}"
        );
        assert_eq!(hip.error_name(dc), "hipErrorNoDevice");
    }
}

#[test]
fn unknown_status_codes_format_sanely() {
    let hip = debian_runtime();
    let name = hip.error_name(hipError_t(123_456));
    let text = hip.error_string(hipError_t(123_456));
    assert!(!name.is_empty() && !text.is_empty(), "{name:?} {text:?}");
}

#[test]
fn rocblas_absent_beside_debian_runtime_is_typed() {
    let hip = debian_runtime();
    // Debian 12 packages no rocBLAS; the loader must say where it looked.
    if std::env::var_os(LibraryKind::Rocblas.override_var()).is_some() {
        return;
    }
    match rocm_sys::Rocblas::load_beside(&hip) {
        Ok(r) => assert!(r.path().exists()),
        Err(LoadError::LibraryNotFound { library, tried }) => {
            assert_eq!(library, LibraryKind::Rocblas);
            let dir = hip.dir().map(|d| d.to_path_buf());
            assert!(tried
                .iter()
                .all(|a| Some(a.candidate.path.parent().map(|p| p.to_path_buf()))
                    == Some(dir.clone())));
        }
        Err(e) => panic!("unexpected {e}"),
    }
}
