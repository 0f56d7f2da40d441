//! Quantized (GGML) tensors on the device: the `QStorage::Ext` of the patched candle-core.
//!
//! [`RocmQStorage`] holds a tensor's blocks as a GGUF file stores them, in a device buffer padded
//! by `MATRIX_ROW_PADDING` elements' worth of blocks (as Candle's CUDA backend pads, so the
//! matrix-vector kernels may read a whole padded row). It reads them back, and dequantizes them
//! to f32 or f16 on the device with candle-kernels' `dequantize_block_*` kernels, launched with
//! the shapes Candle's CUDA backend uses (`candle-core/src/quantized/cuda.rs`). F32, F16 and
//! BF16 "blocks" are plain values, held as an ordinary storage of that dtype and cast.
//!
//! The quantized matrix product ([`qmatmul_path`] picks the path by type and rows): up to 8
//! f32 rows (decode, small batches; 6 for the 32-value block types in f32;
//! `CANDLE_ROCM_QMATVEC_ROWS`) run our `qmatvec` kernels (`kernels/hip/qmatvec.hip`), up to 8
//! rows a launch (4 for the k-quants; the weights are read once per launch), for Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights, in f32 (`qmatvec_*`). With
//! `CANDLE_ROCM_QMATVEC=q8` the
//! rows are first rounded to 8 bits per 32-value block as Candle's CUDA backend rounds
//! activations for its quantized products (q8_1: f16 scale and f16 sum; `qmv_quantize_x8`, one
//! launch for all rows) and the `qmatvec8_*` kernels multiply them with integer dot products:
//! faster, but on SmolLM2 the logits drift from the f32 model's (0.12 relative on the GPU
//! rounding as Candle CUDA does; the CPU's own 8-bit path drifts 0.04-0.07). One row of another
//! type runs candle-kernels' `dequantize_mul_mat_vec_*` kernels (as every type does with
//! `CANDLE_ROCM_FAST_KERNELS=0`), in f32.
//!
//! Past the mat-vec's rows, up to `CANDLE_ROCM_QMATMUL_ROWS` (8 by default: so 7 and 8 rows of
//! the 32-value block types in f32, where they beat the mat-vec on the H100 via HIP-on-CUDA;
//! see `registry::QMATMUL_ROWS_VAR`), the same eight types run our tiled kernels: up to 16 rows
//! the register-tiled `qmr_*` (16 weight rows a block, each lane dequantizing 8 values of 4 rows
//! into registers and multiplying them with every x row, no shared memory in the loop; a row
//! group of 64 lanes is one wave on wave64 targets and two on wave32 ones); more
//! rows the `qmm_*` tiles (a block dequantizes a 64-row tile of the weights into shared memory
//! 32 values at a time and multiplies it with up to 64 rows of x, k split into slices when the
//! tiles alone would not fill the GPU); all in f32. With `CANDLE_ROCM_QMATVEC=q8`, `qmm8_*`
//! take every row count on rows rounded to 8 bits with integer dot products.
//!
//! More f32 rows (prefill) dequantize the weights to f16 on the device and run one rocBLAS GEMM
//! on f16 inputs with f32 accumulation and output (llama.cpp's cuBLAS path; the mat-vec types
//! dequantize with our `qmv_dequantize_*_f16`, 16-byte stores); other inputs, and everything
//! with `CANDLE_ROCM_FAST_KERNELS=0`, dequantize to f32 and run the slot's
//! `dequantize_matmul_t`. Q8_1, for which candle-kernels has no dequantize kernel, dequantizes
//! with our `qmv_dequantize_q8_1_*`, so every GGML type stays on the device.

use std::any::Any;
use std::sync::Arc;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::ext::{dequantize_matmul_t, qmatmul_dims, ExtDevice, ExtQStorage, ExtStorage};
use candle_core::quantized::GgmlDType;
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DeviceRepr, DeviceSlice, LaunchConfig};

use crate::device::RocmDevice;
use crate::error::{BackendError, WrapErr};
use crate::ops::invalid;
use crate::storage::{RocmStorage, RocmStorageSlice};

/// Elements of padding after the last row (Candle's CUDA `MATRIX_ROW_PADDING`).
const MATRIX_ROW_PADDING: usize = 512;
/// Threads per block of the Q5 dequantize kernels (Candle's `CUDA_DEQUANTIZE_BLOCK_SIZE`).
const DEQUANTIZE_BLOCK_SIZE: usize = 256;

/// A quantized tensor's blocks on a ROCm device.
pub struct RocmQStorage {
    blocks: Blocks,
    /// Bytes of blocks (without the padding).
    len: usize,
    dtype: GgmlDType,
    device: RocmDevice,
}

/// Where the values live.
enum Blocks {
    /// GGML blocks, then zeroed padding.
    Quantized(DeviceBuffer<u8>),
    /// F32, F16 or BF16 "blocks": plain values, held as an ordinary storage of that dtype.
    Float(RocmStorage),
}

/// The float dtype of a plain-value GGML type.
fn float_dtype(dtype: GgmlDType) -> Option<DType> {
    match dtype {
        GgmlDType::F32 => Some(DType::F32),
        GgmlDType::F16 => Some(DType::F16),
        GgmlDType::BF16 => Some(DType::BF16),
        _ => None,
    }
}

/// Little-endian bytes of plain values as a host storage of `dtype` (f32, f16 or bf16).
fn cpu_from_bytes(dtype: DType, bytes: &[u8]) -> Option<CpuStorage> {
    let two = || bytes.chunks_exact(2).map(|c| [c[0], c[1]]);
    Some(match dtype {
        DType::F32 => CpuStorage::F32(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DType::F16 => CpuStorage::F16(two().map(half::f16::from_le_bytes).collect()),
        DType::BF16 => CpuStorage::BF16(two().map(half::bf16::from_le_bytes).collect()),
        _ => return None,
    })
}

/// The little-endian bytes of a host storage of f32, f16 or bf16.
fn bytes_of(cpu: &CpuStorage) -> Option<Vec<u8>> {
    Some(match cpu {
        CpuStorage::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuStorage::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuStorage::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => return None,
    })
}

impl std::fmt::Debug for RocmQStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RocmQStorage({:?}, {} bytes, rocm:{})",
            self.dtype,
            self.len,
            self.device.ordinal()
        )
    }
}

impl RocmQStorage {
    /// Copies `data`, whole blocks of `dtype`, to the device.
    pub fn load(device: &RocmDevice, data: &[u8], dtype: GgmlDType) -> Result<Self, BackendError> {
        let (type_size, block_size) = (dtype.type_size(), dtype.block_size());
        if data.len() % type_size != 0 {
            return Err(invalid(
                "load_quantized",
                format_args!(
                    "{} bytes are not whole {dtype:?} blocks of {type_size} bytes: the tensor \
                     data is truncated or not of this type; check the GGUF file",
                    data.len()
                ),
            ));
        }
        let blocks = match float_dtype(dtype) {
            Some(float) => {
                let cpu = cpu_from_bytes(float, data)
                    .ok_or_else(|| invalid("load_quantized", "not a float type"))?;
                Blocks::Float(
                    <RocmDevice as BackendDevice>::storage_from_cpu_storage_owned(device, cpu)
                        .map_err(|e| invalid("load_quantized", e))?,
                )
            }
            None => {
                let padding = MATRIX_ROW_PADDING / block_size * type_size;
                let padded = data
                    .len()
                    .checked_add(padding)
                    .ok_or_else(|| invalid("load_quantized", "the padded size overflows usize"))?;
                let mut buf = device.zeros::<u8>(padded)?;
                if !data.is_empty() {
                    let mut head = buf.slice_mut(..data.len())?;
                    device.stream().memcpy_htod(data, &mut head)?;
                }
                Blocks::Quantized(buf)
            }
        };
        Ok(RocmQStorage {
            blocks,
            len: data.len(),
            dtype,
            device: device.clone(),
        })
    }

    /// The device holding the blocks.
    pub fn rocm_device(&self) -> &RocmDevice {
        &self.device
    }

    /// Checks that `elem_count` values fit the blocks held.
    fn check_count(&self, op: &str, elem_count: usize) -> Result<(), BackendError> {
        let blocks = self.len / self.dtype.type_size();
        let held = blocks.saturating_mul(self.dtype.block_size());
        if elem_count > held || elem_count % self.dtype.block_size() != 0 {
            return Err(invalid(
                op,
                format_args!(
                    "{elem_count} values asked of {blocks} {:?} blocks ({held} values); the \
                     QTensor's shape does not match its data",
                    self.dtype
                ),
            ));
        }
        Ok(())
    }

    /// Dequantizes the first `elem_count` values into a new buffer of `T` (f32 or f16) with
    /// candle-kernels' `dequantize_block_<type>_<suffix>` kernels. `None` for the block types
    /// they do not cover.
    fn dequantize_blocks<T: DeviceRepr>(
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
            invalid(
                "dequantize",
                format_args!("{elem_count} values need more than 2^32 blocks"),
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
            invalid(
                "dequantize",
                format_args!("{elem_count} values exceed the kernels' 32-bit count"),
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
    /// (`kernels/hip/qmatvec.hip`: 8 values and one 16-byte store per thread; candle-kernels'
    /// 32-thread-block kernels took 41 us for 4096x4096 q4_0 on the H100 via HIP-on-CUDA,
    /// 2026-11-25), for the types of our mat-vec kernels and Q5_0 / Q5_1 when
    /// [`crate::registry::fast_kernels`] is on and `elem_count` is whole blocks; `None`
    /// otherwise.
    fn dequantize_f16_pieces(
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
        if !crate::registry::fast_kernels()
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
    fn dequantize_q8_1<T: DeviceRepr>(
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
    fn dequantize_on_device(
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

    /// A fresh f32 buffer for the `(m, n)` output of a quantized product (a typed error when
    /// `m * n` overflows).
    fn alloc_output(&self, m: usize, n: usize) -> Result<DeviceBuffer<f32>, BackendError> {
        let count = crate::utils::checked_product("qmatmul", "output (m * n)", &[m, n])?;
        self.device.alloc::<f32>(count)
    }

    /// `x (m, k) @ w^T` for `m` f32 rows `x` (`w` is `(n, k)`):
    /// our `qmatvec` kernels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K when
    /// [`crate::registry::fast_kernels`] is on, several rows per launch, in f32 or (with
    /// [`crate::registry::qmatvec_q8`]) on rows rounded to 8 bits; candle-kernels'
    /// dequantize-mat-vec kernels otherwise, for one row; `None` when they do not apply
    /// (another type, several rows there, or `k` not a multiple of the kernels' stride).
    fn mat_vec(
        &self,
        (n, k, m): (usize, usize, usize),
        x: &DeviceBuffer<f32>,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        let Blocks::Quantized(data) = &self.blocks else {
            return Ok(None);
        };
        if crate::registry::fast_kernels() {
            if let Some(names) = qmatvec_kernel(self.dtype) {
                return if crate::registry::qmatvec_q8() {
                    self.qmatvec8(&names, (n, k, m), data, x, x_l)
                } else {
                    self.qmatvec(&names, (n, k, m), data, x, x_l)
                };
            }
        }
        if m != 1 {
            return Ok(None);
        }
        // (kernel, whether it takes the row count, the `k` multiple its loop needs).
        let (name, with_rows, k_step) = match self.dtype {
            GgmlDType::Q4_0 => ("dequantize_mul_mat_vec_q4_0_cuda", true, 64),
            GgmlDType::Q4_1 => ("dequantize_mul_mat_vec_q4_1_cuda", true, 64),
            GgmlDType::Q5_0 => ("dequantize_mul_mat_vec_q5_0_cuda", true, 64),
            GgmlDType::Q5_1 => ("dequantize_mul_mat_vec_q5_1_cuda", true, 64),
            GgmlDType::Q8_0 => ("dequantize_mul_mat_vec_q8_0_cuda", true, 64),
            GgmlDType::Q2K => ("dequantize_mul_mat_vec_q2_k", true, 256),
            GgmlDType::Q3K => ("dequantize_mul_mat_vec_q3_k", true, 256),
            GgmlDType::Q4K => ("dequantize_mul_mat_vec_q4_k", true, 256),
            // The q5_K kernel takes (vx, y, dst, ncols) only.
            GgmlDType::Q5K => ("dequantize_mul_mat_vec_q5_k", false, 256),
            GgmlDType::Q6K => ("dequantize_mul_mat_vec_q6_k", true, 256),
            _ => return Ok(None),
        };
        if k % k_step != 0 || n == 0 {
            return Ok(None);
        }
        self.check_count("mat_vec", n.saturating_mul(k))?;
        let (ncols, nrows) = match (i32::try_from(k), i32::try_from(n)) {
            (Ok(c), Ok(r)) => (c, r),
            _ => return Ok(None),
        };
        let y = match x_l.contiguous_offsets() {
            Some((o1, o2)) if o2 <= x.len() && o2 - o1 == k => x.slice(o1..o2)?,
            _ => return Ok(None),
        };
        let out = self.device.alloc::<f32>(n)?;
        let f = self.device.function(Module::Quantized, name)?;
        let rows = mat_vec_rows_per_block(n, with_rows);
        let cfg = LaunchConfig {
            // 32 threads per output row (Candle's WARP_SIZE), `rows` rows per block.
            grid_dim: ((n / rows) as u32, 1, 1),
            block_dim: (32, rows as u32, 1),
            shared_mem_bytes: 0,
        };
        let (pw, py, pout) = (data.as_arg(), rocm_safe::DevicePtrArg::of(&y), out.as_arg());
        let mut l = self.device.stream().launch_builder(&f);
        l.arg(&pw).arg(&py).arg(&pout).arg(&ncols);
        if with_rows {
            l.arg(&nrows);
        }
        // SAFETY: candle-kernels' dequantize_mul_mat_vec kernels take (const void *w, const
        // float *y, float *dst, int ncols[, int nrows]) (the q5_K one without nrows, as passed
        // here); `check_count` made sure the n x k weights lie within the blocks held (plus
        // MATRIX_ROW_PADDING of zeroed padding), `y` is a checked view of k f32 values, `k` is
        // a multiple of the kernel's stride, `out` is a fresh buffer of n values; all ordered
        // on the device's stream.
        unsafe { l.launch(cfg)? };
        Ok(Some(RocmStorage::new(
            RocmStorageSlice::F32(out),
            self.device.clone(),
        )))
    }

    /// The checks both mat-vec paths share, for weights `w` `(n, k)` and `m` f32 rows `x` laid
    /// out as `x_l`: the kernels' row and block counts (`n`, `k` / block size, as `u32`) and the
    /// offset of `x`'s first row; `None` when the kernels do not apply (`k` not a multiple of
    /// the block, `n` zero or past `u32`, the blocks not 4-byte aligned, `x` not `m`
    /// contiguous rows of `k` values). Errs when the weights held are fewer than `n * k`.
    fn qmatvec_shape(
        &self,
        (n, k, m): (usize, usize, usize),
        data: &DeviceBuffer<u8>,
        x: &DeviceBuffer<f32>,
        x_l: &Layout,
    ) -> Result<Option<(u32, u32, usize)>, BackendError> {
        // 32 values per block (q4_0, q4_1, q8_0) or 256 per super-block (q4_K, q5_K, q6_K).
        let qk = self.dtype.block_size();
        if k % qk != 0 || n == 0 || (data.device_ptr() as usize) % 4 != 0 {
            return Ok(None);
        }
        self.check_count("mat_vec", n.saturating_mul(k))?;
        let (rows, blocks) = match (u32::try_from(n), u32::try_from(k / qk)) {
            (Ok(r), Ok(b)) => (r, b),
            _ => return Ok(None),
        };
        Ok(match x_l.contiguous_offsets() {
            Some((o1, o2)) if o2 <= x.len() && Some(o2 - o1) == m.checked_mul(k) => {
                Some((rows, blocks, o1))
            }
            _ => None,
        })
    }

    /// `x (m, k) @ w^T` with our `qmatvec_<type>[_m<rows>][_v]` kernels
    /// (`kernels/hip/qmatvec.hip`), which take up to [`QmatvecNames::max_rows`] rows of `x` per
    /// launch (each weight word is read once for all of them), for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
    /// (blocks of 32 values), Q4_K, Q5_K and Q6_K (256) weights `w` of shape `(n, k)`: `None` when they do
    /// not apply (`k` not a multiple of the block, `n` zero or past `u32`, `x` not `m`
    /// contiguous rows of `k` values). The only allocation is the output.
    fn qmatvec(
        &self,
        names: &QmatvecNames,
        (n, k, m): (usize, usize, usize),
        data: &DeviceBuffer<u8>,
        x: &DeviceBuffer<f32>,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        let Some((rows, blocks, x_start)) = self.qmatvec_shape((n, k, m), data, x, x_l)? else {
            return Ok(None);
        };
        let mut out = self.alloc_output(m, n)?;
        // Row i of x starts 4 k bytes (a multiple of 128) after row 0: one alignment for all.
        let launch = QmatvecLaunch::new(n, x.slice(x_start..)?.device_ptr() as usize);
        for (first, count) in row_chunks(m, names.max_rows()) {
            let name = names.f32[count - 1][usize::from(launch.vec)];
            let f = self.device.function(Module::Qmatvec, name)?;
            let xs = x.slice(x_start + first * k..x_start + (first + count) * k)?;
            let ys = out.slice_mut(first * n..(first + count) * n)?;
            self.qmatvec_launch(&f, &launch, data, (&xs, &ys), (rows, blocks))?;
        }
        Ok(Some(RocmStorage::new(
            RocmStorageSlice::F32(out),
            self.device.clone(),
        )))
    }

    /// `x (m, k) @ w^T` with `x` rounded to 8 bits (`qmv_quantize_x8`, one launch for the `m`
    /// rows) and our `qmatvec8_<type>[_m<rows>]` kernels, up to [`QmatvecNames::max_rows`] rows
    /// per launch: the types, shapes and `None` cases of [`Self::qmatvec`]. Allocations: the
    /// 8-bit rows and the output.
    fn qmatvec8(
        &self,
        names: &QmatvecNames,
        (n, k, m): (usize, usize, usize),
        data: &DeviceBuffer<u8>,
        x: &DeviceBuffer<f32>,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        if m == 0 {
            return Ok(None);
        }
        let Some((rows, blocks, x_start)) = self.qmatvec_shape((n, k, m), data, x, x_l)? else {
            return Ok(None);
        };
        // k is a multiple of the 32-value x blocks (a block or super-block is 32 or 256).
        let (k32, m32) = match (u32::try_from(k), u32::try_from(m)) {
            (Ok(k), Ok(m)) if m <= u16::MAX as u32 => (k, m),
            _ => return Ok(None),
        };
        let row_bytes = k / 32 * X8_BLOCK_BYTES;
        let x8 = self.quantize_x8(&x.slice(x_start..x_start + m * k)?, (k32, m32))?;
        let mut out = self.alloc_output(m, n)?;
        let launch = QmatvecLaunch::new(n, 0);
        for (first, count) in row_chunks(m, names.max_rows()) {
            let f = self.device.function(Module::Qmatvec, names.x8[count - 1])?;
            let x_rows = x8.slice(first * row_bytes..(first + count) * row_bytes)?;
            let y_out = out.slice_mut(first * n..(first + count) * n)?;
            let (pw, py, pout) = (
                data.as_arg(),
                rocm_safe::DevicePtrArg::of(&x_rows),
                rocm_safe::DevicePtrArg::of(&y_out),
            );
            let mut l = self.device.stream().launch_builder(&f);
            l.arg(&pw).arg(&py).arg(&pout).arg(&rows).arg(&blocks);
            // SAFETY: `qmatvec8_<type>[_m<count>]` take (const uint8_t *w, const uint8_t *x8,
            // float *y, unsigned n, unsigned nb), read `rows` rows of `blocks` blocks and
            // `count` 8-bit rows of k values, and write `count` rows of `rows` values:
            // `check_count` made sure those weights lie within the blocks held, and the reads
            // of up to 2 bytes before a block (inside the previous one; the buffer's start is
            // 4-byte aligned, checked above) or 4 past the last fall inside the
            // MATRIX_ROW_PADDING of zeroed blocks; `x_rows` is a checked view of `count` 8-bit
            // rows (written by the launch above on the same stream; row starts are multiples
            // of 40 bytes from the buffer's start, so 8-byte aligned, as the k-quant kernels'
            // 8-byte loads need); `y_out` a checked view of `count` x `rows` values no other launch
            // writes; blocks of QMATVEC_THREADS threads, any grid.
            unsafe { l.launch(launch.cfg)? };
        }
        Ok(Some(RocmStorage::new(
            RocmStorageSlice::F32(out),
            self.device.clone(),
        )))
    }

    /// `m` f32 rows of `k` values (`xs`, contiguous; `k` a multiple of 32, `m` at most 65535)
    /// rounded to 8 bits as Candle's CUDA backend does, in the x8 layout of `qmatvec.hip`
    /// (`qmv_quantize_x8`, one launch): a fresh buffer of `m` rows of `40 k / 32` bytes.
    fn quantize_x8(
        &self,
        xs: &impl DeviceSlice<f32>,
        (k32, m32): (u32, u32),
    ) -> Result<DeviceBuffer<u8>, BackendError> {
        let (k, m) = (k32 as usize, m32 as usize);
        if k % 32 != 0 || m > u16::MAX as usize || xs.len() != m * k {
            return Err(invalid(
                "qmatmul",
                format!(
                    "8-bit rounding of {m} rows of {k} values from {} values",
                    xs.len()
                ),
            ));
        }
        let x8 = self.device.alloc::<u8>(crate::utils::checked_product(
            "qmatmul",
            "8-bit rows (m * row bytes)",
            &[m, k / 32 * X8_BLOCK_BYTES],
        )?)?;
        let quantize = self.device.function(Module::Qmatvec, "qmv_quantize_x8")?;
        let cfg = LaunchConfig {
            // k / QMATVEC_THREADS rounded up fits u32 as k does; m is at most 65535.
            grid_dim: (k32.div_ceil(QMATVEC_THREADS), m32, 1),
            block_dim: (QMATVEC_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (px, px8) = (rocm_safe::DevicePtrArg::of(xs), x8.as_arg());
        let mut l = self.device.stream().launch_builder(&quantize);
        l.arg(&px).arg(&px8).arg(&k32);
        // SAFETY: `qmv_quantize_x8` takes (const float *x, uint8_t *x8, unsigned k) and, for
        // grid row r, reads the k floats of x row r and writes the 40 k / 32 bytes of x8 row r;
        // `xs` holds exactly the m contiguous rows (checked above), `x8` is a fresh buffer of m
        // such rows (k is a multiple of 32, so no thread of a live 32-lane group is past k), the
        // grid's y is m and its x covers k; ordered on the device's stream.
        unsafe { l.launch(cfg)? };
        Ok(x8)
    }

    /// One launch of a `qmatvec` kernel for `count` rows of x: `y_out (count, rows) = x_rows
    /// (count, k) @ w^T` (k = block_size * `blocks`), `count` given by the kernel's name.
    fn qmatvec_launch(
        &self,
        f: &rocm_safe::Function,
        launch: &QmatvecLaunch,
        data: &DeviceBuffer<u8>,
        (x_rows, y_out): (&impl DeviceSlice<f32>, &impl DeviceSlice<f32>),
        (rows, blocks): (u32, u32),
    ) -> Result<(), BackendError> {
        let (pw, py, pout) = (
            data.as_arg(),
            rocm_safe::DevicePtrArg::of(x_rows),
            rocm_safe::DevicePtrArg::of(y_out),
        );
        let mut l = self.device.stream().launch_builder(f);
        l.arg(&pw).arg(&py).arg(&pout).arg(&rows).arg(&blocks);
        // SAFETY: `qmatvec_<type>[_m<count>][_v]` take (const uint8_t *w, const float *x,
        // float *y, unsigned n, unsigned nb), read `rows` rows of `blocks` blocks and `count`
        // rows of k = block_size * blocks f32 values, and write `count` rows of `rows` values.
        // The caller (`qmatvec`) checked with `check_count` that those weights lie within the
        // blocks held; the kernels' reads of up to 2 bytes before a block (inside the previous
        // block; the buffer's start is 4-byte aligned, checked there) or up to 4 after the last
        // one fall inside the MATRIX_ROW_PADDING of zeroed blocks that follows (at least 288
        // bytes); `x_rows` is a checked view of the `count` rows, 16-byte aligned where
        // `launch` chose the `_v` kernel (every row start is then, rows being 4 k bytes, a
        // multiple of 128); `y_out` is a checked view of `count` x `rows` values of a buffer no
        // other launch writes; the kernels take blocks of QMATVEC_THREADS threads and any grid
        // (a grid-stride loop); all ordered on the device's stream.
        unsafe { l.launch(launch.cfg)? };
        Ok(())
    }

    /// `x (m, k) @ w^T` with our tiled `qmm_<type>_m<tile>` kernels (`kernels/hip/qmatvec.hip`):
    /// each block dequantizes a 64-row tile of the weights to f32 in shared memory, 32 values
    /// of k at a time, and multiplies it with up to 64 rows of x, all in f32 (with
    /// [`crate::registry::qmatvec_q8`], `qmm8_<type>_m<tile>`: x rounded to 8 bits as for the
    /// q8 mat-vec, the weights unpacked to bytes, integer dot products); k is split into
    /// slices when the tiles alone would not fill the GPU, and `qmm_reduce` adds the slices'
    /// partial products in order. For
    /// Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights; `None`
    /// when the kernels do not apply (another type, `k` not a multiple of the block or of 32,
    /// sizes past `u32`, `x` not `m` contiguous rows or not 16-byte aligned). Allocations: the
    /// output, and the partial products when k is split.
    fn qmatmul_tiled(
        &self,
        (n, k, m): (usize, usize, usize),
        data: &DeviceBuffer<u8>,
        x: &DeviceBuffer<f32>,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        let Some(names) = qmatvec_kernel(self.dtype) else {
            return Ok(None);
        };
        // The mat-vec's checks (block multiple, sizes, x's rows, the weights held); every
        // block size here is a multiple of the 32-value chunk.
        let Some((n32, _, x_start)) = self.qmatvec_shape((n, k, m), data, x, x_l)? else {
            return Ok(None);
        };
        // In f32 (or for a type without 8-bit kernels), up to QMR_MAX_ROWS rows: the
        // register-tiled kernels, one launch.
        if m <= QMR_MAX_ROWS && !crate::registry::qmatvec_q8() {
            return self.qmatmul_qmr(&names, (n, k, m), data, x, x_start);
        }
        let (tile, tile_rows) = qmm_tile(m);
        let (k32, m32, tiles_m) = match (
            u32::try_from(k),
            u32::try_from(m),
            u32::try_from(m.div_ceil(tile_rows)),
        ) {
            (Ok(k), Ok(m), Ok(t)) if m > 0 && k % QMM_CHUNK as u32 == 0 && t <= u16::MAX as u32 => {
                (k, m, t)
            }
            _ => return Ok(None),
        };
        let xs = x.slice(x_start..x_start + m * k)?;
        if xs.device_ptr() as usize % 16 != 0 {
            return Ok(None);
        }
        let out_el = crate::utils::checked_product("qmatmul", "output (m * n)", &[m, n])?;
        let tiles_n = n.div_ceil(QMM_TILE_N);
        let cus = self.device.device().info().compute_units as usize;
        let (cps, slices) = qmm_slices(tiles_n * tiles_m as usize, k / QMM_CHUNK, cus);
        let out = self.device.alloc::<f32>(out_el)?;
        let part = if slices > 1 {
            Some(self.device.alloc::<f32>(crate::utils::checked_product(
                "qmatmul",
                "partial products (slices * m * n)",
                &[slices, m, n],
            )?)?)
        } else {
            None
        };
        // 8-bit activations (CANDLE_ROCM_QMATVEC=q8): x rounded as for the q8 mat-vec first.
        let (name, x8) = if crate::registry::qmatvec_q8() {
            (names.qmm8[tile], Some(self.quantize_x8(&xs, (k32, m32))?))
        } else {
            (names.qmm[tile], None)
        };
        let f = self.device.function(Module::Qmatvec, name)?;
        let cfg = LaunchConfig {
            // n / 64 rounded up fits u32 as n does; tiles_m is at most 65535 (checked above),
            // slices at most QMM_MAX_SLICES.
            grid_dim: (tiles_n as u32, tiles_m, slices as u32),
            block_dim: (QMM_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let cps32 = cps as u32;
        let pw = data.as_arg();
        let px = match &x8 {
            Some(x8) => x8.as_arg(),
            None => rocm_safe::DevicePtrArg::of(&xs),
        };
        let py = match &part {
            Some(p) => p.as_arg(),
            None => out.as_arg(),
        };
        let mut l = self.device.stream().launch_builder(&f);
        l.arg(&pw)
            .arg(&px)
            .arg(&py)
            .arg(&n32)
            .arg(&k32)
            .arg(&m32)
            .arg(&cps32);
        // SAFETY: `qmm_<type>_m<tile>` take (const uint8_t *w, const float *x, float *y,
        // unsigned n, unsigned k, unsigned m, unsigned cps), `qmm8_<type>_m<tile>` the same with
        // `const uint8_t *x8`. They read the n rows of k / block values' blocks (`check_count`
        // made sure they lie within the blocks held; the piece reads stay inside each block, so
        // no alignment beyond 2 bytes is assumed), the m rows of k f32 values of `xs` (a checked
        // view, 16-byte aligned, checked above, as the kernels' float4 loads need) or the m x8
        // rows `quantize_x8` wrote into a fresh buffer (whole, so 8-byte aligned rows: 40 k /
        // 32 bytes each), and write slice z's m x n values at y + z m n: `out`
        // holds m n values for one slice, `part` slices m n for several; k is a multiple of 32
        // and of the block; the grid covers n in 64-row tiles, m in tiles of the kernel's rows,
        // and the slices of cps chunks (none empty, `qmm_slices`); blocks of QMM_THREADS
        // threads; ordered on the device's stream.
        unsafe { l.launch(cfg)? };
        if let Some(part) = &part {
            let reduce = self.device.function(Module::Qmatvec, "qmm_reduce")?;
            let count = out_el as u64;
            let slices32 = slices as u32;
            let cfg = LaunchConfig {
                grid_dim: (
                    out_el.div_ceil(QMM_THREADS as usize).clamp(1, 1 << 16) as u32,
                    1,
                    1,
                ),
                block_dim: (QMM_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let (pp, po) = (part.as_arg(), out.as_arg());
            let mut l = self.device.stream().launch_builder(&reduce);
            l.arg(&pp).arg(&po).arg(&count).arg(&slices32);
            // SAFETY: `qmm_reduce` takes (const float *part, float *y, unsigned long long
            // count, unsigned slices) and reads slices x count values of `part` (allocated
            // as slices * m * n, written by the launch above on the same stream) and writes
            // count = m n values of `out`; a grid-stride loop, any grid.
            unsafe { l.launch(cfg)? };
        }
        Ok(Some(RocmStorage::new(
            RocmStorageSlice::F32(out),
            self.device.clone(),
        )))
    }

    /// `x (m, k) @ w^T` with our register-tiled `qmr_<type>_m<8|16>` kernels
    /// (`kernels/hip/qmatvec.hip`): a block takes 16 weight rows, each lane dequantizes 8 values
    /// of 4 rows into registers per step (64 lanes a row group on every target) and multiplies
    /// them with up to 16 rows of x read
    /// straight from memory, in f32; one launch, grid (n / 16, m / tile), `m` at most
    /// [`QMR_MAX_ROWS`] (the kernels take any `m`; past 16 rows they re-read the weights for
    /// every 16). `x` holds `m` rows of
    /// `k` values from `x_start` (checked by `qmatvec_shape`); `None` when they do not apply
    /// (x not 16-byte aligned, `16 k` past `u32`). The only allocation is the output.
    fn qmatmul_qmr(
        &self,
        names: &QmatvecNames,
        (n, k, m): (usize, usize, usize),
        data: &DeviceBuffer<u8>,
        x: &DeviceBuffer<f32>,
        x_start: usize,
    ) -> Result<Option<RocmStorage>, BackendError> {
        let (tile, tile_rows) = if m <= 8 { (0, 8) } else { (1, 16) };
        let (n32, k32, m32) = match (u32::try_from(n), u32::try_from(k), u32::try_from(m)) {
            (Ok(n), Ok(k), Ok(m)) if m > 0 && k.checked_mul(16).is_some() => (n, k, m),
            _ => return Ok(None),
        };
        let xs = x.slice(x_start..x_start + m * k)?;
        if xs.device_ptr() as usize % 16 != 0 {
            return Ok(None);
        }
        let out = self.alloc_output(m, n)?;
        let f = self.device.function(Module::Qmatvec, names.qmr[tile])?;
        let cfg = LaunchConfig {
            // n / 16 rounded up fits u32 as n does, and m / tile rows as m does.
            grid_dim: (
                n.div_ceil(QMR_TILE_N) as u32,
                m.div_ceil(tile_rows) as u32,
                1,
            ),
            block_dim: (QMR_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (pw, px, py) = (
            data.as_arg(),
            rocm_safe::DevicePtrArg::of(&xs),
            out.as_arg(),
        );
        let mut l = self.device.stream().launch_builder(&f);
        l.arg(&pw).arg(&px).arg(&py).arg(&n32).arg(&k32).arg(&m32);
        // SAFETY: `qmr_<type>_m<tile>` take (const uint8_t *w, const float *x, float *y,
        // unsigned n, unsigned k, unsigned m). They read the n rows of k / block values' blocks
        // (`check_count`, through `qmatvec_shape`, made sure they lie within the blocks held;
        // the piece reads stay inside each block, 2-byte alignment at most), the m rows of k
        // f32 values of `xs` (a checked view, 16-byte aligned as the float4 loads need; k a
        // multiple of the block, so of 8; 16 k fits u32, as the kernels' offsets need), and
        // write the m x n values of `out`, a fresh buffer; blocks of QMR_THREADS threads, the
        // grid covering n in 16-row tiles and m in tiles of the kernel's rows; ordered on the
        // device's stream.
        unsafe { l.launch(cfg)? };
        Ok(Some(RocmStorage::new(
            RocmStorageSlice::F32(out),
            self.device.clone(),
        )))
    }

    /// `x (m, k) @ w^T` for `m` f32 rows of `x` (contiguous, laid out as `x_l`) with the weights
    /// `w` `(n, k)` dequantized to f16 on the device, `x` rounded to f16 and one rocBLAS GEMM
    /// with f16 inputs, f32 accumulation and an f32 result (llama.cpp's cuBLAS path for
    /// quantized weights): half the bytes of dequantizing to f32, and a half-precision GEMM in
    /// place of an f32 one. `None` where the weights have no device dequantize or are
    /// plain values. Rounding `x` to f16 keeps 11 significant bits (the CPU's quantized path
    /// and Candle's CUDA kernels round activations to 8 bits); values past f16's range
    /// (65504) would become infinite, as in llama.cpp.
    fn mat_mat_f16(
        &self,
        (n, k, m): (usize, usize, usize),
        x: &RocmStorage,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        if !matches!(self.blocks, Blocks::Quantized(_)) || n == 0 || k == 0 || m == 0 {
            return Ok(None);
        }
        let out_el = crate::utils::checked_product("qmatmul", "output (m * n)", &[m, n])?;
        let Some(w) = self.dequantize_on_device(n * k, true)? else {
            return Ok(None);
        };
        let xh = BackendStorage::to_dtype(x, x_l, DType::F16).map_err(|e| invalid("qmatmul", e))?;
        // Candle's lhs x (m, k) and rhs w^T (k, n), both dense: rocBLAS's A is w, its B is x.
        let lhs_l = Layout::contiguous((m, k));
        let rhs_l = Layout::contiguous((n, k))
            .transpose(0, 1)
            .map_err(|e| invalid("qmatmul", e))?;
        let cfg = crate::matmul::gemm_config((1, m, n, k), &lhs_l, &rhs_l)
            .ok_or_else(|| invalid("qmatmul", "no GEMM form for dense operands"))?;
        let mut out = self.device.alloc::<f32>(out_el)?;
        let a = w
            .as_buffer::<half::f16>()
            .map_err(|e| invalid("qmatmul", e))?;
        let b = xh
            .as_buffer::<half::f16>()
            .map_err(|e| invalid("qmatmul", e))?;
        // `gemm_strided_batched_f32_out` checks that both operands and the output cover the
        // (m, n, k) product.
        self.device
            .blas(|h| h.gemm_strided_batched_f32_out(&cfg, a, b, &mut out))?;
        Ok(Some(RocmStorage::new(
            RocmStorageSlice::F32(out),
            self.device.clone(),
        )))
    }

    /// The slot's host path (after the CPU-fallback check), for types without a kernel.
    fn dequantize_on_host(
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

/// Threads per block of the `qmatvec` kernels (`QMV_BLOCK`).
const QMATVEC_THREADS: u32 = 256;
/// Output rows per block of the `qmatvec` kernels (`QMV_ROWS`: 8 groups of 32 lanes, 2 rows
/// each).
const QMATVEC_ROWS: usize = 16;
/// Most blocks of a `qmatvec` launch (the kernels loop over the rows beyond).
const QMATVEC_MAX_GRID: usize = 1 << 20;

/// Bytes of one 32-value block of an 8-bit x row: 32 quants, then (f16 scale and f16 sum of
/// the values, i32 sum of the quants) in the row's tail (`QMV8_ROW_BYTES` in `qmatvec.hip`).
const X8_BLOCK_BYTES: usize = 40;

/// Our mat-vec kernels of one block type, named once so a launch formats nothing; entry
/// `r - 1` takes `r` rows of x in one launch.
struct QmatvecNames {
    /// f32 activations: the plain kernel and the `_v` one (x read as float4).
    f32: &'static [[&'static str; 2]],
    /// 8-bit activations, as many as `f32`.
    x8: &'static [&'static str],
    /// The tiled matrix-matrix kernels `qmm_<type>_m<16|32|64>` (f32 activations), by x-row
    /// tile.
    qmm: [&'static str; 3],
    /// The same on 8-bit activations, `qmm8_<type>_m<16|32|64>`.
    qmm8: [&'static str; 3],
    /// The register-tiled kernels `qmr_<type>_m<8|16>` (f32 activations), by x-row tile.
    qmr: [&'static str; 2],
}

impl QmatvecNames {
    /// Most rows of x one launch takes: 8 for the 32-value blocks, 4 for the k-quants (their
    /// registers grow by 20-30 VGPRs a row on AMD; `QMV_K_MAX_M` in `qmatvec.hip`).
    fn max_rows(&self) -> usize {
        self.f32.len()
    }
}

/// The names of `qmatvec_<t>`, `qmatvec_<t>_m<r>` (and their `_v`), `qmatvec8_<t>[_m<r>]`,
/// the tiled `qmm_<t>_m<tile>` / `qmm8_<t>_m<tile>` and the register-tiled `qmr_<t>_m<tile>`
/// for the row-count suffixes given ("" for one row).
macro_rules! qmatvec_names {
    ($t:literal: $($suffix:literal),+) => {
        QmatvecNames {
            f32: &[$([
                concat!("qmatvec_", $t, $suffix),
                concat!("qmatvec_", $t, $suffix, "_v"),
            ]),+],
            x8: &[$(concat!("qmatvec8_", $t, $suffix)),+],
            qmm: [
                concat!("qmm_", $t, "_m16"),
                concat!("qmm_", $t, "_m32"),
                concat!("qmm_", $t, "_m64"),
            ],
            qmm8: [
                concat!("qmm8_", $t, "_m16"),
                concat!("qmm8_", $t, "_m32"),
                concat!("qmm8_", $t, "_m64"),
            ],
            qmr: [concat!("qmr_", $t, "_m8"), concat!("qmr_", $t, "_m16")],
        }
    };
}

/// Our `qmatvec` kernels for a block type, if they exist.
fn qmatvec_kernel(dtype: GgmlDType) -> Option<QmatvecNames> {
    Some(match dtype {
        GgmlDType::Q4_0 => {
            qmatvec_names!("q4_0": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q4_1 => {
            qmatvec_names!("q4_1": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q8_0 => {
            qmatvec_names!("q8_0": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q5_0 => {
            qmatvec_names!("q5_0": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q5_1 => {
            qmatvec_names!("q5_1": "", "_m2", "_m3", "_m4", "_m5", "_m6", "_m7", "_m8")
        }
        GgmlDType::Q4K => qmatvec_names!("q4_K": "", "_m2", "_m3", "_m4"),
        GgmlDType::Q5K => qmatvec_names!("q5_K": "", "_m2", "_m3", "_m4"),
        GgmlDType::Q6K => qmatvec_names!("q6_K": "", "_m2", "_m3", "_m4"),
        _ => return None,
    })
}

/// Which kernels a quantized product of f32 activation rows runs (see [`qmatmul_path`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QmatmulPath {
    /// The mat-vec kernels: ours (`qmatvec_*`, `qmatvec8_*` with `CANDLE_ROCM_QMATVEC=q8`),
    /// or candle-kernels' for one row of the other types.
    MatVec,
    /// The tiled kernels: the register-tiled `qmr_*` up to 16 rows in f32, the `qmm_*` /
    /// `qmm8_*` tiles beyond.
    Tiled,
    /// The weights dequantized to f16 for one GEMM (or, for what that does not take, the
    /// slot's dequantize and f32 matmul).
    Gemm,
}

/// Rows up to which the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) run the mat-vec
/// in f32 when `CANDLE_ROCM_QMATVEC_ROWS` is unset: from 7 rows the register-tiled `qmr`
/// kernels are faster (see `registry::QMATMUL_ROWS_VAR`).
const QMATVEC_ROWS_BLOCK32_F32: usize = 6;

/// The path a product of `m` f32 rows of activations on `dtype` weights takes: the mat-vec up
/// to `CANDLE_ROCM_QMATVEC_ROWS` rows (unset: 6 for the 32-value block types in f32, else 8),
/// then the tiled kernels up to `CANDLE_ROCM_QMATMUL_ROWS` (unset: 8) for the types that have
/// them, then the GEMM. A path whose kernels do not apply to the shape (e.g. `k` not a
/// multiple of the block, or `x` not contiguous) falls through to the GEMM.
pub fn qmatmul_path(dtype: GgmlDType, m: usize) -> QmatmulPath {
    let names = qmatvec_kernel(dtype);
    let mat_vec_rows = crate::registry::qmatvec_rows_set().unwrap_or(match &names {
        Some(_) if dtype.block_size() == 32 && !crate::registry::qmatvec_q8() => {
            QMATVEC_ROWS_BLOCK32_F32
        }
        _ => crate::registry::QMATVEC_ROWS_DEFAULT,
    });
    if m <= mat_vec_rows {
        QmatmulPath::MatVec
    } else if names.is_some() && m <= crate::registry::qmatmul_max_rows() {
        QmatmulPath::Tiled
    } else {
        QmatmulPath::Gemm
    }
}

/// Threads per block of the `qmr` kernels (`QMR_BLOCK`).
const QMR_THREADS: u32 = 256;
/// Weight rows per block of the `qmr` kernels (`QMR_ROWS`).
const QMR_TILE_N: usize = 16;
/// Most activation rows the tiled path gives the `qmr` kernels; past it, the `qmm` tiles. On
/// the H100 via HIP-on-CUDA (2026-11-25 16:28Z, 4096 x 4096 weights) `qmr` took 40 us for 16
/// rows of q4_0 and 33 us for q4_K against `qmm`'s 60 / 73 us, but each further 16 rows cost
/// it as much again (78 / 154 us at 32 / 64 rows of q4_0, `qmm` 70 / 95).
const QMR_MAX_ROWS: usize = 16;

/// Threads per block of the `qmm` kernels (`QMM_BLOCK`).
const QMM_THREADS: u32 = 256;
/// Weight rows per block of the `qmm` kernels (`QMM_TN`).
const QMM_TILE_N: usize = 64;
/// Values of k per step of the `qmm` kernels (`QMM_KC`): k must be a multiple.
const QMM_CHUNK: usize = 32;
/// Blocks a `qmm` launch aims at per compute unit: several resident blocks hide the weight
/// loads of one behind the arithmetic of others, and a second wave evens out the last one. (4,
/// with each chunk's loads waiting on a full memory latency, gave 576 blocks of 15 chunks in
/// a row at 16 x 4096 x 4096 and took 61 us on the H100 via HIP-on-CUDA, 2026-11-25; not yet
/// measured at 8 with the loads issued a chunk ahead.)
const QMM_BLOCKS_PER_CU: usize = 8;
/// Fewest k chunks per slice: a slice shorter than this spends more on its partial sums than
/// it saves.
const QMM_MIN_CHUNKS: usize = 4;
/// Most k slices (the grid's z, and the partial buffers: slices * m * n floats).
const QMM_MAX_SLICES: usize = 64;

/// The x-row tile of the `qmm` kernels for `m` rows (index into [`QmatvecNames::qmm`] and the
/// tile's rows): 16, 32, or 64 (several tiles past 64).
fn qmm_tile(m: usize) -> (usize, usize) {
    match m {
        0..=16 => (0, 16),
        17..=32 => (1, 32),
        _ => (2, 64),
    }
}

/// How a `qmm` launch splits k: (chunks per slice, slices) for `tiles` output tiles, `chunks`
/// chunks of k and `cus` compute units. A product with few tiles (a 4096-row weight has 64)
/// would leave most of a GPU idle, so k is split into slices whose partial products
/// `qmm_reduce` adds in order: enough blocks for [`QMM_BLOCKS_PER_CU`] per compute unit, each
/// slice at least [`QMM_MIN_CHUNKS`] chunks, at most [`QMM_MAX_SLICES`] slices, none empty.
fn qmm_slices(tiles: usize, chunks: usize, cus: usize) -> (usize, usize) {
    let chunks = chunks.max(1);
    let want = (QMM_BLOCKS_PER_CU * cus.max(1)).div_ceil(tiles.max(1));
    let most = (chunks / QMM_MIN_CHUNKS).clamp(1, QMM_MAX_SLICES);
    let cps = chunks.div_ceil(want.clamp(1, most));
    (cps, chunks.div_ceil(cps))
}

/// `m` rows split into launches of at most `max` rows (`max` >= 1): (first row, row count),
/// the counts as even as they can be (7 rows at most 4 a launch: 3 and 4).
fn row_chunks(m: usize, max: usize) -> impl Iterator<Item = (usize, usize)> {
    let max = max.max(1);
    let launches = m.div_ceil(max);
    (0..launches).map(move |i| {
        let first = i * m / launches;
        (first, (i + 1) * m / launches - first)
    })
}

/// Launch of a `qmatvec` kernel: the grid for `n` rows and whether x (at device address
/// `x_addr`) allows the `_v` kernel's float4 loads. Ported line for line in the emulator
/// driver `kernels/tests/emu/qmatvec_test.cpp` (`launch_shape`).
struct QmatvecLaunch {
    /// Grid and block.
    cfg: LaunchConfig,
    /// Whether x is 16-byte aligned (the `_v` kernel).
    vec: bool,
}

impl QmatvecLaunch {
    /// The launch for `n` output rows with x at `x_addr`.
    fn new(n: usize, x_addr: usize) -> Self {
        let grid = n.div_ceil(QMATVEC_ROWS).clamp(1, QMATVEC_MAX_GRID);
        QmatvecLaunch {
            cfg: LaunchConfig {
                // At most 2^20: fits u32.
                grid_dim: (grid as u32, 1, 1),
                block_dim: (QMATVEC_THREADS, 1, 1),
                shared_mem_bytes: 0,
            },
            vec: x_addr % 16 == 0,
        }
    }
}

/// Output rows per block of the dequantize-mat-vec kernels: 4 (or 2) when that divides `n`,
/// so a block has 128 (64) threads: one 32-thread block per row leaves a wave64 half empty on
/// AMD and caps residency on any GPU. The kernels find their row as `blockIdx.x * blockDim.y
/// + threadIdx.y`, and the k-quant ones return early only past `row > nrows` (not `>=`), so
/// the grid must cover exactly `n` rows: hence only divisors of `n`. The q5_K kernel (no row
/// count, `with_rows` false) reads its row from `blockIdx.x` alone and keeps 1.
fn mat_vec_rows_per_block(n: usize, with_rows: bool) -> usize {
    if !with_rows {
        1
    } else if n % 4 == 0 {
        4
    } else if n % 2 == 0 {
        2
    } else {
        1
    }
}

impl ExtQStorage for RocmQStorage {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn dtype(&self) -> GgmlDType {
        self.dtype
    }

    fn device(&self) -> Arc<dyn ExtDevice> {
        Arc::new(self.device.clone())
    }

    fn storage_size_in_bytes(&self) -> usize {
        self.len
    }

    fn data(&self) -> candle_core::Result<Vec<u8>> {
        match &self.blocks {
            Blocks::Float(s) => bytes_of(&BackendStorage::to_cpu_storage(s)?)
                .ok_or_else(|| candle_core::Error::Msg("not a float storage".into())),
            Blocks::Quantized(data) => {
                let mut out = vec![0u8; self.len];
                if self.len > 0 {
                    let head = data.slice(..self.len).w()?;
                    self.device.stream().memcpy_dtoh(&head, &mut out).w()?;
                }
                Ok(out)
            }
        }
    }

    fn dequantize(&self, elem_count: usize) -> candle_core::Result<Box<dyn ExtStorage>> {
        match self.dequantize_on_device(elem_count, false).w()? {
            Some(s) => Ok(Box::new(s)),
            None => self.dequantize_on_host(elem_count, false),
        }
    }

    fn dequantize_f16(&self, elem_count: usize) -> candle_core::Result<Box<dyn ExtStorage>> {
        match self.dequantize_on_device(elem_count, true).w()? {
            Some(s) => Ok(Box::new(s)),
            None => self.dequantize_on_host(elem_count, true),
        }
    }
    fn matmul_t(
        &self,
        w_shape: &Shape,
        x: &dyn ExtStorage,
        x_l: &Layout,
    ) -> candle_core::Result<(Box<dyn ExtStorage>, Shape)> {
        let (n, k, m, dst_shape) = qmatmul_dims(w_shape, x_l)?;
        if x.dtype() == DType::F32 {
            if let Some(x) = x.as_any().downcast_ref::<RocmStorage>() {
                // Decode and small batches (see `qmatmul_path`): the mat-vec kernels on the
                // quantized weights (x in f32, or rounded to 8 bits), or the tiled kernels.
                // More rows (prefill), or where those kernels do not apply: the f16 GEMM.
                let path = qmatmul_path(self.dtype, m);
                let mut out = None;
                if path == QmatmulPath::MatVec {
                    out = self.mat_vec((n, k, m), x.as_buffer::<f32>()?, x_l).w()?;
                }
                if out.is_none() && path == QmatmulPath::Tiled && crate::registry::fast_kernels() {
                    if let Blocks::Quantized(data) = &self.blocks {
                        let xb = x.as_buffer::<f32>()?;
                        out = self.qmatmul_tiled((n, k, m), data, xb, x_l).w()?;
                    }
                }
                if out.is_none() && m > 1 && crate::registry::fast_kernels() {
                    out = self.mat_mat_f16((n, k, m), x, x_l).w()?;
                }
                if let Some(out) = out {
                    return Ok((Box::new(out), dst_shape));
                }
            }
        }
        dequantize_matmul_t(self, w_shape, x, x_l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mat_vec_blocks_cover_exactly_the_rows() {
        for n in [1usize, 2, 3, 4, 6, 576, 4097, 32000, 49152] {
            for with_rows in [true, false] {
                let r = mat_vec_rows_per_block(n, with_rows);
                assert_eq!(n % r, 0, "n {n}: {r} rows per block");
                assert!(with_rows || r == 1);
            }
        }
        assert_eq!(mat_vec_rows_per_block(32000, true), 4);
        assert_eq!(mat_vec_rows_per_block(6, true), 2);
    }

    #[test]
    fn qmatvec_launch_matches_the_emulator_port() {
        // The emulator driver's `test_port` checks the same values.
        let a = QmatvecLaunch::new(1, 256);
        assert_eq!(
            (a.cfg.grid_dim, a.cfg.block_dim, a.vec),
            ((1, 1, 1), (256, 1, 1), true)
        );
        let b = QmatvecLaunch::new(17, 260);
        assert_eq!((b.cfg.grid_dim.0, b.vec), (2, false));
        let c = QmatvecLaunch::new(1 << 30, 256);
        assert_eq!(c.cfg.grid_dim.0 as usize, QMATVEC_MAX_GRID);
        assert_eq!(QmatvecLaunch::new(32000, 0).cfg.grid_dim.0, 2000);
        for t in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
        ] {
            assert_eq!(t.block_size(), 32, "{t:?}");
            assert!(qmatvec_kernel(t).is_some());
        }
        for t in [GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K] {
            assert_eq!(t.block_size(), 256, "{t:?}");
            assert!(qmatvec_kernel(t).is_some());
        }
        for t in [
            GgmlDType::Q2K,
            GgmlDType::Q3K,
            GgmlDType::Q8K,
            GgmlDType::Q8_1,
        ] {
            assert!(qmatvec_kernel(t).is_none(), "{t:?}");
        }
    }

    #[test]
    fn default_paths_follow_the_measured_crossovers() {
        // Only with the defaults (a developer's CANDLE_ROCM_QMATVEC_ROWS, CANDLE_ROCM_QMATMUL_ROWS
        // or CANDLE_ROCM_QMATVEC=q8 moves them on purpose).
        if [
            crate::registry::QMATVEC_ROWS_VAR,
            crate::registry::QMATMUL_ROWS_VAR,
            crate::registry::QMATVEC_VAR,
        ]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
        {
            return;
        }
        use QmatmulPath::*;
        for dtype in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
        ] {
            let paths: Vec<_> = (1..=10).map(|m| qmatmul_path(dtype, m)).collect();
            let want = [
                MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, Tiled, Tiled, Gemm, Gemm,
            ];
            assert_eq!(paths, want, "{dtype:?}");
        }
        for dtype in [GgmlDType::Q4K, GgmlDType::Q5K, GgmlDType::Q6K] {
            let paths: Vec<_> = (1..=10).map(|m| qmatmul_path(dtype, m)).collect();
            let want = [
                MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, MatVec, Gemm, Gemm,
            ];
            assert_eq!(paths, want, "{dtype:?}");
        }
        // Types without our kernels: candle's mat-vec for one row (more rows find no mat-vec
        // there and fall through to the GEMM), never the tiled path.
        for dtype in [GgmlDType::Q2K, GgmlDType::Q8_1, GgmlDType::F16] {
            assert_eq!(qmatmul_path(dtype, 1), MatVec, "{dtype:?}");
            assert_eq!(qmatmul_path(dtype, 9), Gemm, "{dtype:?}");
            assert!(
                (1..=64).all(|m| qmatmul_path(dtype, m) != Tiled),
                "{dtype:?}"
            );
        }
    }

    #[test]
    fn qmm_slices_cover_k_once_and_fill_the_gpu() {
        for tiles in [1, 3, 64, 128, 500, 4096] {
            for chunks in [1, 2, 3, 7, 16, 128, 129, 1000, 4096] {
                for cus in [1, 60, 132, 304] {
                    let (cps, slices) = qmm_slices(tiles, chunks, cus);
                    let what = format!("tiles {tiles} chunks {chunks} cus {cus}");
                    assert!(cps >= 1 && (1..=QMM_MAX_SLICES).contains(&slices), "{what}");
                    // Every chunk in one slice, and no slice empty.
                    assert!(
                        slices * cps >= chunks && (slices - 1) * cps < chunks,
                        "{what}"
                    );
                    if slices > 1 {
                        assert!(cps >= QMM_MIN_CHUNKS, "{what}: {cps} chunks a slice");
                    }
                    // Splitting only where the tiles alone fall short of the target.
                    if tiles >= QMM_BLOCKS_PER_CU * cus {
                        assert_eq!(slices, 1, "{what}");
                    }
                }
            }
        }
        // A 4096 x 4096 weight at 16 rows on 132 compute units: 64 tiles, 128 chunks of 32
        // values: 16 slices of 8 chunks give 1024 blocks.
        assert_eq!(qmm_slices(64, 128, 132), (8, 16));
    }

    #[test]
    fn qmm_tiles_hold_the_rows() {
        assert_eq!(qmm_tile(9), (0, 16));
        assert_eq!(qmm_tile(16), (0, 16));
        assert_eq!(qmm_tile(17), (1, 32));
        assert_eq!(qmm_tile(32), (1, 32));
        assert_eq!(qmm_tile(33), (2, 64));
        assert_eq!(qmm_tile(500), (2, 64));
    }

    #[test]
    fn row_chunks_cover_every_row_once_within_the_kernels_limit() {
        for max in 1..=8 {
            for m in 0..=20 {
                let chunks: Vec<_> = row_chunks(m, max).collect();
                let mut next = 0;
                for &(first, count) in &chunks {
                    assert_eq!(first, next, "m {m} max {max}: {chunks:?}");
                    assert!((1..=max).contains(&count), "m {m} max {max}: {chunks:?}");
                    next += count;
                }
                assert_eq!(next, m);
                assert_eq!(chunks.len(), m.div_ceil(max));
            }
        }
        assert_eq!(row_chunks(7, 4).collect::<Vec<_>>(), [(0, 3), (3, 4)]);
        assert_eq!(row_chunks(8, 8).collect::<Vec<_>>(), [(0, 8)]);
    }

    #[test]
    fn qmatvec_names_follow_the_kernels() {
        let q40 = qmatvec_kernel(GgmlDType::Q4_0).unwrap();
        assert_eq!(q40.max_rows(), 8);
        assert_eq!(q40.f32[0], ["qmatvec_q4_0", "qmatvec_q4_0_v"]);
        assert_eq!(q40.f32[7], ["qmatvec_q4_0_m8", "qmatvec_q4_0_m8_v"]);
        assert_eq!(q40.x8[2], "qmatvec8_q4_0_m3");
        let q6k = qmatvec_kernel(GgmlDType::Q6K).unwrap();
        assert_eq!(q6k.max_rows(), 4);
        assert_eq!(q6k.f32[3], ["qmatvec_q6_K_m4", "qmatvec_q6_K_m4_v"]);
        assert_eq!(q6k.x8[3], "qmatvec8_q6_K_m4");
        assert_eq!(q6k.qmm, ["qmm_q6_K_m16", "qmm_q6_K_m32", "qmm_q6_K_m64"]);
        assert_eq!(q40.qmm8[1], "qmm8_q4_0_m32");
        // q5_0 / q5_1: as many rows as the other 32-value blocks.
        let q51 = qmatvec_kernel(GgmlDType::Q5_1).unwrap();
        assert_eq!(q51.max_rows(), 8);
        assert_eq!(q51.f32[4], ["qmatvec_q5_1_m5", "qmatvec_q5_1_m5_v"]);
        assert_eq!(q51.x8[7], "qmatvec8_q5_1_m8");
        assert_eq!(q51.qmm[0], "qmm_q5_1_m16");
        assert_eq!(q51.qmm8[2], "qmm8_q5_1_m64");
        assert_eq!(q51.qmr, ["qmr_q5_1_m8", "qmr_q5_1_m16"]);
        assert_eq!(q40.qmr[1], "qmr_q4_0_m16");
        for t in [
            GgmlDType::Q4_0,
            GgmlDType::Q5_0,
            GgmlDType::Q4K,
            GgmlDType::Q6K,
        ] {
            let names = qmatvec_kernel(t).unwrap();
            assert_eq!(names.x8.len(), names.f32.len(), "{t:?}");
        }
    }

    #[test]
    fn every_qmatvec_kernel_is_in_every_code_object() {
        // The manifest lists each object's kernels (its occupancy table).
        let manifest = include_str!("../../kernels/manifest.json");
        let objects = manifest.matches("\"module\": \"qmatvec\"").count();
        assert!(objects >= 13, "{objects} qmatvec objects");
        for t in [
            GgmlDType::Q4_0,
            GgmlDType::Q4_1,
            GgmlDType::Q5_0,
            GgmlDType::Q5_1,
            GgmlDType::Q8_0,
            GgmlDType::Q4K,
            GgmlDType::Q5K,
            GgmlDType::Q6K,
        ] {
            let names = qmatvec_kernel(t).unwrap();
            let dequantize = format!(
                "qmv_dequantize_{}_f16",
                format!("{t:?}").to_lowercase().replace('k', "_K")
            );
            let all = names.f32.iter().flatten().chain(names.x8.iter());
            let all = all
                .chain(names.qmm.iter())
                .chain(names.qmr.iter())
                .chain(names.qmm8.iter())
                .copied();
            for name in all.chain([dequantize.as_str(), "qmm_reduce"]) {
                let found = manifest.matches(&format!("\"{name}\":")).count();
                assert_eq!(found, objects, "{name}");
            }
        }
    }

    #[test]
    fn plain_value_bytes_round_trip() {
        let f = CpuStorage::F32(vec![1.5, -0.0, f32::INFINITY, 3.25e-3]);
        let h = CpuStorage::F16(vec![half::f16::from_f32(-2.5), half::f16::MAX]);
        let b = CpuStorage::BF16(vec![half::bf16::from_f32(7.0)]);
        for (dtype, cpu) in [(DType::F32, f), (DType::F16, h), (DType::BF16, b)] {
            let bytes = bytes_of(&cpu).expect("a float storage");
            let back = cpu_from_bytes(dtype, &bytes).expect("a float dtype");
            assert_eq!(bytes_of(&back), Some(bytes), "{dtype:?}");
        }
        assert!(cpu_from_bytes(DType::U8, &[1, 2]).is_none());
        assert!(bytes_of(&CpuStorage::U8(vec![1])).is_none());
    }

    #[test]
    fn float_ggml_types_map_to_dtypes() {
        assert_eq!(float_dtype(GgmlDType::F32), Some(DType::F32));
        assert_eq!(float_dtype(GgmlDType::F16), Some(DType::F16));
        assert_eq!(float_dtype(GgmlDType::BF16), Some(DType::BF16));
        assert_eq!(float_dtype(GgmlDType::Q4K), None);
    }
}
