//! Dequantizing a [`RocmQStorage`] on the device: candle-kernels' `dequantize_block_*` (to f32 or
//! f16), our f16 dequantize of the mat-vec types (16-byte stores) and of Q8_1, and the slot's host
//! path for types without a kernel.

use candle_core::backend::BackendStorage;
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Layout};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DeviceRepr, LaunchConfig};

use crate::dtype::RocmStorageSlice;
use crate::error::BackendError;
use crate::layout::{invalid, kernel_limit};
use crate::storage::RocmStorage;

use candle_core::ext::{ExtQStorage, ExtStorage};

use super::plan::{QMATVEC_MAX_GRID, QMATVEC_THREADS};
use super::qstorage::{Blocks, RocmQStorage, DEQUANTIZE_BLOCK_SIZE};

impl RocmQStorage {
    /// Dequantizes the first `elem_count` values into a new buffer of `T` (f32 or f16) with
    /// candle-kernels' `dequantize_block_<type>_<suffix>` kernels. `None` for the block types
    /// they do not cover.
    pub(super) fn dequantize_blocks<T: DeviceRepr>(
        &self,
        data: &DeviceBuffer<u8>,
        elem_count: usize,
        suffix: &str,
    ) -> Result<Option<DeviceBuffer<T>>, BackendError> {
        let nb = elem_count.div_ceil(256);
        let q5 = elem_count.div_ceil(2 * DEQUANTIZE_BLOCK_SIZE);
        // (kernel type name, k-quant, threads per block, blocks), as Candle's CUDA backend.
        let (name, is_k, threads, blocks) = match self.dtype {
            GgmlDType::Q4_0 => ("q4_0", false, 32, nb),
            GgmlDType::Q4_1 => ("q4_1", false, 32, nb),
            GgmlDType::Q5_0 => ("q5_0", false, DEQUANTIZE_BLOCK_SIZE, q5),
            GgmlDType::Q5_1 => ("q5_1", false, DEQUANTIZE_BLOCK_SIZE, q5),
            GgmlDType::Q8_0 => ("q8_0", false, 32, nb),
            GgmlDType::Q2K => ("q2_K", true, 64, nb),
            GgmlDType::Q3K => ("q3_K", true, 64, nb),
            GgmlDType::Q4K => ("q4_K", true, 32, nb),
            GgmlDType::Q5K => ("q5_K", true, 64, nb),
            GgmlDType::Q6K => ("q6_K", true, 64, nb),
            GgmlDType::Q8K => ("q8_K", true, 32, nb),
            GgmlDType::Q8_1 => return self.dequantize_q8_1(data, elem_count, suffix).map(Some),
            _ => return Ok(None),
        };
        let out = self.device.alloc::<T>(elem_count)?;
        if elem_count == 0 {
            return Ok(Some(out));
        }
        let grid = u32::try_from(blocks).map_err(|_| {
            kernel_limit(
                "dequantize",
                format_args!("{elem_count} values (more than 2^32 blocks)"),
            )
        })?;
        let f = self.device.function(
            Module::Quantized,
            &format!("dequantize_block_{name}_{suffix}"),
        )?;
        let cfg = LaunchConfig {
            grid_dim: (grid, 1, 1),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (pin, pout) = (data.as_arg(), out.as_arg());
        let mut l = self.device.stream().launch_builder(&f);
        l.arg(&pin).arg(&pout);
        // The block-wise kernels take the element count they may write (`k`): every value for
        // Q5_0/Q5_1, blocks of 32 values for the others.
        let k = match self.dtype {
            GgmlDType::Q5_0 | GgmlDType::Q5_1 => elem_count,
            _ => elem_count / 32,
        };
        let k = i32::try_from(k).map_err(|_| {
            kernel_limit(
                "dequantize",
                format_args!("{elem_count} values (past a 32-bit count)"),
            )
        })?;
        if !is_k {
            l.arg(&k);
        }
        // SAFETY: candle-kernels' `dequantize_block_*` take (const void *blocks, T *out[, int
        // k]); `check_count` made sure `elem_count` values lie within the blocks held, the
        // k-quant kernels read and write whole 256-value super-blocks (`nb` of them, each in
        // the buffer, which also holds `MATRIX_ROW_PADDING` values of zeroed padding), the
        // others stop at `k`; `out` is a fresh buffer of `elem_count` values; everything is
        // ordered on the device's stream.
        unsafe { l.launch(cfg)? };
        Ok(Some(out))
    }
    /// The first `elem_count` values to f16 with our `qmv_dequantize_<type>_f16`
    /// (`kernels/hip/qmatvec.hip`: 8 values and one 16-byte store per thread, measured faster
    /// than candle-kernels' 32-thread-block kernels; figures in bench/results), for the types of our mat-vec kernels and Q5_0 / Q5_1 when
    /// [`crate::settings::fast_kernels`] is on and `elem_count` is whole blocks; `None`
    /// otherwise.
    pub(super) fn dequantize_f16_pieces(
        &self,
        data: &DeviceBuffer<u8>,
        elem_count: usize,
    ) -> Result<Option<DeviceBuffer<half::f16>>, BackendError> {
        let name = match self.dtype {
            GgmlDType::Q4_0 => "qmv_dequantize_q4_0_f16",
            GgmlDType::Q4_1 => "qmv_dequantize_q4_1_f16",
            GgmlDType::Q8_0 => "qmv_dequantize_q8_0_f16",
            GgmlDType::Q4K => "qmv_dequantize_q4_K_f16",
            GgmlDType::Q5K => "qmv_dequantize_q5_K_f16",
            GgmlDType::Q6K => "qmv_dequantize_q6_K_f16",
            // No mat-vec kernel of ours, but common in Q4_K_M files whose rows are not whole
            // 256-value super-blocks (Gemma 3 270M: 81 of its tensors).
            GgmlDType::Q5_0 => "qmv_dequantize_q5_0_f16",
            GgmlDType::Q5_1 => "qmv_dequantize_q5_1_f16",
            _ => return Ok(None),
        };
        if !crate::settings::fast_kernels()
            || elem_count == 0
            || elem_count % self.dtype.block_size() != 0
        {
            return Ok(None);
        }
        let out = self.device.alloc::<half::f16>(elem_count)?;
        let f = self.device.function(Module::Qmatvec, name)?;
        let pieces = (elem_count / 8) as u64;
        let grid = (elem_count / 8)
            .div_ceil(QMATVEC_THREADS as usize)
            .min(QMATVEC_MAX_GRID);
        let cfg = LaunchConfig {
            // At most QMATVEC_MAX_GRID (2^20): fits u32.
            grid_dim: (grid as u32, 1, 1),
            block_dim: (QMATVEC_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (pin, pout) = (data.as_arg(), out.as_arg());
        let mut l = self.device.stream().launch_builder(&f);
        l.arg(&pin).arg(&pout).arg(&pieces);
        // SAFETY: `qmv_dequantize_<type>_f16` take (const uint8_t *w, __half *y, unsigned long
        // long pieces) and, for i < pieces, read piece i's bytes of block 8 i / block_size
        // (whole blocks: `elem_count` is a multiple of the block size, and `check_count` made
        // sure those blocks lie within the buffer, whose start is a whole allocation, so
        // 2-byte aligned) and write y[8 i .. 8 i + 8) as one 16-byte store: `out` is a fresh,
        // whole (so 16-byte-aligned) buffer of `elem_count` = 8 pieces values; any grid (a
        // grid-stride loop); ordered on the device's stream.
        unsafe { l.launch(cfg)? };
        Ok(Some(out))
    }
    /// Q8_1 blocks, which candle-kernels cannot dequantize, with our
    /// `qmv_dequantize_q8_1_<suffix>` (`kernels/hip/qmatvec.hip`).
    pub(super) fn dequantize_q8_1<T: DeviceRepr>(
        &self,
        data: &DeviceBuffer<u8>,
        elem_count: usize,
        suffix: &str,
    ) -> Result<DeviceBuffer<T>, BackendError> {
        let out = self.device.alloc::<T>(elem_count)?;
        if elem_count == 0 {
            return Ok(out);
        }
        let name = match suffix {
            "f16" => "qmv_dequantize_q8_1_f16",
            _ => "qmv_dequantize_q8_1_f32",
        };
        let f = self.device.function(Module::Qmatvec, name)?;
        let blocks = elem_count
            .div_ceil(QMATVEC_THREADS as usize)
            .min(QMATVEC_MAX_GRID);
        let cfg = LaunchConfig {
            // At most QMATVEC_MAX_GRID (2^20): fits u32.
            grid_dim: (blocks as u32, 1, 1),
            block_dim: (QMATVEC_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let count = elem_count as u64;
        let (pin, pout) = (data.as_arg(), out.as_arg());
        let mut l = self.device.stream().launch_builder(&f);
        l.arg(&pin).arg(&pout).arg(&count);
        // SAFETY: `qmv_dequantize_q8_1_{f32,f16}` take (const uint8_t *w, T *y, unsigned long
        // long count), read the ceil(count / 32) 36-byte blocks holding the first `count`
        // values (`check_count` made sure the buffer has them) and write y[0 .. count); `out`
        // is a fresh buffer of `elem_count` values of T (f32 or f16, matching the kernel the
        // suffix names); any grid works (grid-stride loop); ordered on the device's stream.
        unsafe { l.launch(cfg)? };
        Ok(out)
    }
    /// The first `elem_count` values as f32 (`to_f16` false) or f16 on the device; `None`
    /// where no device path exists (none today: every GGML type has one).
    pub(super) fn dequantize_on_device(
        &self,
        elem_count: usize,
        to_f16: bool,
    ) -> Result<Option<RocmStorage>, BackendError> {
        self.check_count("dequantize", elem_count)?;
        let dev = &self.device;
        let data = match &self.blocks {
            Blocks::Float(s) => {
                // Plain values: a cast (or a copy) of the first `elem_count`.
                let target = if to_f16 { DType::F16 } else { DType::F32 };
                let l = Layout::contiguous(elem_count);
                return BackendStorage::to_dtype(s, &l, target)
                    .map(Some)
                    .map_err(|e| invalid("dequantize", e));
            }
            Blocks::Quantized(data) => data,
        };
        let wrap = |slice| Ok(Some(RocmStorage::new(slice, dev.clone())));
        if to_f16 {
            if let Some(b) = self.dequantize_f16_pieces(data, elem_count)? {
                return wrap(RocmStorageSlice::F16(b));
            }
            match self.dequantize_blocks::<half::f16>(data, elem_count, "f16")? {
                Some(b) => wrap(RocmStorageSlice::F16(b)),
                None => Ok(None),
            }
        } else {
            match self.dequantize_blocks::<f32>(data, elem_count, "f32")? {
                Some(b) => wrap(RocmStorageSlice::F32(b)),
                None => Ok(None),
            }
        }
    }
    /// The slot's host path (after the CPU-fallback check), for types without a kernel.
    pub(super) fn dequantize_on_host(
        &self,
        elem_count: usize,
        to_f16: bool,
    ) -> candle_core::Result<Box<dyn ExtStorage>> {
        let device = ExtQStorage::device(self);
        device.cpu_fallback("dequantize")?;
        let host = self
            .dtype
            .from_data(std::borrow::Cow::Owned(ExtQStorage::data(self)?));
        let mut cpu = host.dequantize(elem_count)?;
        if to_f16 {
            cpu = cpu.to_dtype(&Layout::contiguous(elem_count), DType::F16)?;
        }
        device.storage_from_cpu_storage_owned(cpu)
    }
}
