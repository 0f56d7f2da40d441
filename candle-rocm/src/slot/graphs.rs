//! Graph mode from a Candle [`Device`] (`candle_rocm::graphs`): a device's stream records its
//! kernels into HIP graphs and launches each recorded stretch with one call when the host next
//! needs a result, so an unmodified model's decode step is one graph launch
//! (`rocm_safe::graph`'s batching says how and why results do not change).
//!
//! Every device starts in graph mode unless `CANDLE_ROCM_GRAPHS=0`; [`set_graph_mode`] turns it
//! on or off for one device at run time.

use candle_core::Device;

pub use rocm_safe::graph::{GraphMode, GraphModeStats};

use crate::device::RocmDevice;
use crate::error::BackendError;

/// The ROCm device behind `device`, or an error naming what was passed.
fn rocm(device: &Device) -> Result<&RocmDevice, BackendError> {
    device
        .as_ext_device()
        .and_then(|d| d.as_any().downcast_ref::<RocmDevice>())
        .ok_or_else(|| BackendError::Invalid {
            op: "graph mode".into(),
            detail: format!(
                "{device:?} is not a ROCm device: pass one from candle_rocm::device(n)"
            ),
        })
}

/// Turns graph mode on (`Some`) or off (`None`) for `device`. Turning it off launches what was
/// recorded. Fails for a device that is not a ROCm GPU, and when the HIP runtime has no graphs
/// (the device then keeps running plain launches).
pub fn set_graph_mode(device: &Device, mode: Option<GraphMode>) -> Result<(), BackendError> {
    rocm(device)?.set_graph_mode(mode)
}

/// What graph mode did on `device` so far: `None` when it is off or `device` is no ROCm GPU.
pub fn graph_stats(device: &Device) -> Option<GraphModeStats> {
    rocm(device).ok()?.graph_stats()
}
