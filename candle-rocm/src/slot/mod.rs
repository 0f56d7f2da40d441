//! The `candle` feature: [`RocmDevice`] and [`RocmStorage`] in candle-core's out-of-tree
//! backend slot (`Device::Ext`, `Storage::Ext`, from the patch that `cargo xtask candle`
//! applies), so `Tensor`s, candle-nn layers and candle-transformers models run on the GPU.
//!
//! Every `BackendStorage` method reaches the device through candle-core's blanket adapter; the
//! fused ops of candle-nn and candle-core come here through [`ExtBackendStorage::ext_fused`]
//! (`fused`); [`attention`] holds candle-flash-attn's API (`candle_rocm::flash_attn`) and
//! [`collective`] the collectives between GPUs (`candle_rocm::collective`). An op
//! the backend does not handle runs on the CPU after a `tracing` warning naming it, or fails
//! when `CANDLE_ROCM_STRICT` is on.

use std::collections::HashMap;
use std::sync::OnceLock;

use candle_core::ext::{Copy2d, ExtBackendDevice, ExtBackendStorage, FusedOp};
use candle_core::{Device, Layout, Shape};
use parking_lot::Mutex;

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::launch::copy::Copy2dArgs;
use crate::settings::strict;
use crate::storage::RocmStorage;

pub mod attention;
pub mod collective;
mod fused;
pub mod graphs;

impl ExtBackendDevice for RocmDevice {
    fn ext_cpu_fallback(&self, op: &str) -> candle_core::Result<()> {
        if strict() {
            return Err(BackendError::CpuFallback { op: op.to_owned() }).w();
        }
        tracing::warn!(
            op,
            device = self.ordinal(),
            "{op} has no ROCm implementation for these operands: running it on the CPU \
             (operands copied to the host and the result back)"
        );
        Ok(())
    }
    fn ext_load_quantized(
        &self,
        data: &[u8],
        dtype: candle_core::quantized::GgmlDType,
    ) -> candle_core::Result<Box<dyn candle_core::ext::ExtQStorage>> {
        Ok(Box::new(
            crate::quantized::RocmQStorage::load(self, data, dtype).w()?,
        ))
    }
    /// `Tensor::to_device` from another ROCm device: a device-to-device copy (peer to peer, or
    /// staged through pinned host memory), not a round trip through a CPU tensor.
    fn ext_storage_from_other(
        &self,
        s: &dyn candle_core::ext::ExtStorage,
    ) -> candle_core::Result<Option<RocmStorage>> {
        let Some(src) = s.as_any().downcast_ref::<RocmStorage>() else {
            return Ok(None);
        };
        let slice = crate::ops::copy::to_device(&src.slice, self).w()?;
        Ok(Some(RocmStorage::new(slice, self.clone())))
    }
}

impl ExtBackendStorage for RocmStorage {
    fn ext_fused(
        &self,
        op: &FusedOp,
        layout: &Layout,
        args: &[(&Self, &Layout)],
    ) -> candle_core::Result<Option<(Self, Shape)>> {
        fused::run(self, layout, op, args)
    }

    /// `cat`'s copies in one launch per [`crate::launch::copy::BATCH`] ([`crate::launch::copy`]); with
    /// `CANDLE_ROCM_BATCHED_COPY=0` or `CANDLE_ROCM_FAST_KERNELS=0`, not handled: candle's
    /// `copy2d` kernel, one launch per input.
    fn ext_copy2d_many(&mut self, srcs: &[(&Self, Copy2d)]) -> candle_core::Result<bool> {
        if !crate::settings::batched_copy() {
            return Ok(false);
        }
        let srcs = srcs.iter().map(|(s, c)| {
            let args = Copy2dArgs {
                d1: c.d1,
                d2: c.d2,
                src_s: c.src_s,
                dst_s: c.dst_s,
                src_o: c.src_o,
                dst_o: c.dst_o,
            };
            (*s, args)
        });
        self.copy2d_many_iter(srcs)?;
        Ok(true)
    }
}

/// The process's devices, one per ordinal, so every `Device` for ordinal `n` is the same
/// device (one stream, one allocator, one kernel registry).
fn devices() -> &'static Mutex<HashMap<usize, Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The ROCm GPU `ordinal` as a Candle [`Device`] (`Device::Ext`, location `rocm:N`). Every
/// call for one ordinal gives the same device; it is safe to share across threads.
///
/// The error says why the GPU cannot be used (no ROCm runtime, no device, no kernels for its
/// architecture, ...) and what to do, as `rocm-info` does.
pub fn device(ordinal: usize) -> Result<Device, BackendError> {
    let mut devices = devices().lock();
    if let Some(d) = devices.get(&ordinal) {
        return Ok(d.clone());
    }
    let device = Device::new_ext(RocmDevice::new(ordinal)?);
    devices.insert(ordinal, device.clone());
    tracing::info!(ordinal, "candle-rocm: using ROCm device {ordinal}");
    Ok(device)
}

/// [`device`]`(ordinal)`, or the CPU when the GPU cannot be used, with the reason.
pub fn device_or_cpu(ordinal: usize) -> (Device, Option<BackendError>) {
    match device(ordinal) {
        Ok(d) => (d, None),
        Err(e) => {
            tracing::warn!("candle-rocm: running on the CPU: {e}");
            (Device::Cpu, Some(e))
        }
    }
}
