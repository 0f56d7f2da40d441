//! Helpers of the graph tests (`graph_gpu`, `graph_mode_gpu`): the device, the test kernels'
//! module ($ROCM_SAFE_TEST_MODULE, built from rocm-safe/tests/kernels/test_kernels.hip), and
//! an axpy over `n` floats with its host data.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use rocm_safe::{Device, DevicePtrArg, Function, LaunchConfig, Module, Stream};

/// Device 0; a missing device fails the test (the harness always has one).
pub fn device() -> Device {
    Device::new(0).unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"))
}

/// The test kernels, loaded on `d`.
pub fn module(d: &Device) -> Module {
    let path = std::env::var("ROCM_SAFE_TEST_MODULE").unwrap_or_else(|_| {
        panic!(
            "set ROCM_SAFE_TEST_MODULE to a code object built from rocm-safe/tests/kernels/test_kernels.hip"
        )
    });
    Module::load(d, &std::fs::read(&path).unwrap()).unwrap()
}

/// Queues `y += a * x` over `n` floats (axpy_f32(float, const float*, float*, unsigned)) on
/// `s`.
pub fn axpy(s: &Stream, f: &Function, a: f32, x: &DevicePtrArg, y: &DevicePtrArg, n: u32) {
    let mut l = s.launch_builder(f);
    l.arg(&a).arg(x).arg(y).arg(&n);
    // SAFETY: the arguments match axpy_f32's parameters; the callers' buffers hold n floats
    // and outlive every launch of the work (the tests keep them until after the last
    // synchronising read, which also launches what graph mode recorded).
    unsafe { l.launch(LaunchConfig::for_num_elems(n, 256)).unwrap() };
}

/// `n` host values `v + (i % 13)`.
pub fn host(v: f32, n: u32) -> Vec<f32> {
    (0..n).map(|i| v + (i % 13) as f32).collect()
}
