//! Failure paths on a real device, driven by the HIP-on-CUDA double's failure injection:
//! run by `tests/hip-on-cuda/run.sh` in a process of its own with
//! `HIP_ON_CUDA_FAIL_MALLOC_AFTER=4 HIP_ON_CUDA_FAIL_LAUNCH_AFTER=3`. Every injected failure
//! must come back as a typed error that says what to do, never as a panic or a crash.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_safe::{Device, LaunchConfig, Module, RocmError, Stream};

fn injected(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("run under the HIP-on-CUDA double with {var}=N set"))
}

#[test]
#[ignore = "needs a HIP device"]
fn injected_allocation_failures_are_typed_errors() {
    let budget = injected("HIP_ON_CUDA_FAIL_MALLOC_AFTER");
    let dev = Device::new(0).unwrap();
    let s = Stream::new(&dev).unwrap();
    let mut kept = Vec::new();
    let mut failure = None;
    // Distinct sizes, all kept alive: every request needs a new raw allocation.
    for i in 0..(budget + 2) as usize {
        match s.alloc::<u8>((i + 1) << 20) {
            Ok(b) => kept.push(b),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    assert_eq!(
        kept.len() as u64,
        budget,
        "allocations before the injected failure"
    );
    match failure {
        Some(RocmError::OutOfMemory { requested, .. }) => {
            assert_eq!(requested, (kept.len() + 1) << 20);
        }
        other => panic!("expected a typed OutOfMemory, got {other:?}"),
    }
    // The allocator trimmed its cache and retried once before giving up.
    assert!(dev.allocator().stats().trims >= 1);
    // Memory already held stays usable.
    s.memset_zeros(&mut kept[0]).unwrap();
    assert!(s.clone_dtoh(&kept[0]).unwrap().iter().all(|&b| b == 0));
}

#[test]
#[ignore = "needs a HIP device"]
fn injected_launch_failures_are_typed_errors() {
    let budget = injected("HIP_ON_CUDA_FAIL_LAUNCH_AFTER");
    let path = std::env::var("ROCM_SAFE_TEST_MODULE").expect("ROCM_SAFE_TEST_MODULE");
    let dev = Device::new(0).unwrap();
    let s = Stream::new(&dev).unwrap();
    let module = Module::load(&dev, &std::fs::read(path).unwrap()).unwrap();
    let noop = module.function("noop").unwrap();
    let cfg = LaunchConfig::for_num_elems(32, 32);
    let mut ok = 0;
    let err = loop {
        // SAFETY: `noop` takes no parameters and touches no memory.
        match unsafe { s.launch_builder(&noop).launch(cfg) } {
            Ok(()) => ok += 1,
            Err(e) => break e,
        }
        assert!(ok <= budget, "the injected launch failure never came");
    };
    assert_eq!(ok, budget);
    assert_eq!(
        err.hip_status(),
        Some(rocm_sys::hipError_t::hipErrorLaunchFailure)
    );
    assert!(err.to_string().contains("hipModuleLaunchKernel"), "{err}");
}
