//! Device selection where no GPU can be used (CI: Debian's ROCm 5.2 runtime and no device;
//! elsewhere possibly no ROCm at all). These tests are not ignored: they run in CI.
//!
//! On a machine with a usable GPU the same calls must succeed instead; the tests check that
//! branch too, so `cargo test` passes there as well.

use candle_core::{DType, Device, DeviceLocation, Tensor};

#[test]
fn device_or_cpu_falls_back_with_a_reason() {
    let (dev, reason) = candle_rocm::device_or_cpu(0);
    match reason {
        Some(reason) => {
            assert!(
                dev.is_cpu(),
                "a reason was given but the device is {:?}",
                dev.location()
            );
            let msg = reason.to_string();
            assert!(!msg.trim().is_empty(), "empty reason");
            // Every backend error says what to do about it.
            assert!(
                msg.contains("To fix"),
                "the reason does not say what to do: {msg}"
            );
            eprintln!("no GPU, as expected here: {msg}");
            // The CPU device it returned works.
            let x = Tensor::ones(3, DType::F32, &dev)
                .and_then(|x| x.sum_all())
                .and_then(|s| s.to_scalar::<f32>());
            assert_eq!(x.ok(), Some(3.0));
        }
        None => {
            eprintln!("a usable GPU is present: checking the other branch");
            assert_eq!(
                dev.location(),
                DeviceLocation::Ext {
                    backend: "rocm",
                    ordinal: 0
                }
            );
        }
    }
}

#[test]
fn device_without_a_gpu_is_an_error() {
    let (_, reason) = candle_rocm::device_or_cpu(0);
    let result = candle_rocm::device(0);
    match reason {
        Some(reason) => {
            let e = result.expect_err("device(0) succeeded where device_or_cpu(0) fell back");
            let msg = e.to_string();
            assert!(!msg.trim().is_empty());
            assert!(!reason.to_string().trim().is_empty());
            // And candle's error type carries it.
            let wrapped = candle_core::Error::wrap(e).to_string();
            assert!(
                wrapped.contains(msg.lines().next().unwrap_or_default()),
                "{wrapped}"
            );
        }
        None => {
            let d = result.expect("device(0) after device_or_cpu(0) found a GPU");
            assert!(!matches!(d, Device::Cpu));
        }
    }
}

#[test]
fn an_ordinal_past_the_last_device_is_an_error() {
    let e = candle_rocm::device(4096).expect_err("there is no device 4096");
    assert!(!e.to_string().trim().is_empty());
}
