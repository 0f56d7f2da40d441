//! `rocm-info` run as a process: a clear message, the documented exit code, never a panic.
//!
//! Needs Debian's ROCm 5.2 runtime (`apt-get install libamdhip64-5`, done by `.ci/run`) for the
//! "runtime found, no device" case.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn rocm_info(env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rocm-info"));
    cmd.env_remove("ROCM_SYS_HIP_LIB")
        .env_remove("CANDLE_ROCM_KERNELS_DIR")
        .env("RUST_BACKTRACE", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("rocm-info runs")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn missing_library_exits_2_with_every_path_tried() {
    let o = rocm_info(&[("ROCM_SYS_HIP_LIB", "/nonexistent/dir/libamdhip64.so")]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("could not load the HIP runtime"), "{t}");
    assert!(
        t.contains("/nonexistent/dir/libamdhip64.so (from $ROCM_SYS_HIP_LIB)"),
        "{t}"
    );
    assert!(t.contains("To fix:"), "{t}");
    assert!(
        !t.contains("panicked") && !t.contains("stack backtrace"),
        "{t}"
    );
}

#[test]
fn runtime_without_device_exits_3_and_names_the_library() {
    let o = rocm_info(&[("ROCM_SYS_HIP_LIB", "libamdhip64.so.5")]);
    let t = text(&o);
    assert!(
        !t.contains("panicked") && !t.contains("stack backtrace"),
        "{t}"
    );
    assert!(
        t.contains("HIP runtime : ") && t.contains("libamdhip64.so.5"),
        "{t}"
    );
    match o.status.code() {
        // A machine with an AMD GPU and the 5.2 runtime: devices are listed.
        Some(0) | Some(4) => assert!(t.contains("devices     :"), "{t}"),
        Some(3) => {
            assert!(t.contains("no usable HIP device"), "{t}");
            assert!(
                t.contains("hipErrorInvalidDevice") || t.contains("no device"),
                "{t}"
            );
            assert!(t.contains("/dev/kfd"), "{t}");
        }
        other => panic!("unexpected exit {other:?}:\n{t}"),
    }
}

#[test]
fn a_missing_rccl_is_reported_and_keeps_the_exit_code() {
    let base = rocm_info(&[("ROCM_SYS_HIP_LIB", "libamdhip64.so.5")]);
    let o = rocm_info(&[
        ("ROCM_SYS_HIP_LIB", "libamdhip64.so.5"),
        ("ROCM_SYS_RCCL_LIB", "/nonexistent/librccl.so.1"),
    ]);
    let t = text(&o);
    assert!(
        !t.contains("panicked") && !t.contains("stack backtrace"),
        "{t}"
    );
    assert!(
        t.contains("RCCL        : not available (optional: only needed for several GPUs)"),
        "{t}"
    );
    assert!(
        t.contains("/nonexistent/librccl.so.1 (from $ROCM_SYS_RCCL_LIB)"),
        "{t}"
    );
    assert!(t.contains("To fix:"), "{t}");
    // RCCL is optional: its absence never changes the verdict.
    assert_eq!(o.status.code(), base.status.code(), "{t}");
}
