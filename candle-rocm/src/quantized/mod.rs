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
//! One f32 row against stacked gate|up weights (`QMatMul::forward_swiglu_fused`, which the
//! patched quantized llama calls for its MLP) runs `qmatvec_swiglu_*`: the product and
//! SwiGLU's gate in one launch, the gate and up sums of an output in the same group of lanes.
//!
//! Past the mat-vec's rows, up to `CANDLE_ROCM_QMATMUL_ROWS` (8 by default: so 7 and 8 rows of
//! the 32-value block types in f32, where they beat the mat-vec on the H100 via HIP-on-CUDA;
//! see `settings::QMATMUL_ROWS_VAR`), the same eight types run our tiled kernels: up to 16 rows
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

use candle_core::backend::BackendStorage;
use candle_core::ext::{dequantize_matmul_t, qmatmul_dims, ExtDevice, ExtQStorage, ExtStorage};
use candle_core::quantized::GgmlDType;
use candle_core::{DType, Layout, Shape};

use crate::error::WrapErr;
use crate::storage::RocmStorage;

mod dequantize;
mod matvec;
mod plan;
mod qstorage;
mod tiled;

use qstorage::{bytes_of, Blocks};

pub use plan::{qmatmul_path, QmatmulPath};
pub use qstorage::RocmQStorage;

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
                if out.is_none() && path == QmatmulPath::Tiled && crate::settings::fast_kernels() {
                    if let Blocks::Quantized(data) = &self.blocks {
                        let xb = x.as_buffer::<f32>()?;
                        out = self.qmatmul_tiled((n, k, m), data, xb, x_l).w()?;
                    }
                }
                if out.is_none() && m > 1 && crate::settings::fast_kernels() {
                    out = self.mat_mat_f16((n, k, m), x, x_l).w()?;
                }
                if let Some(out) = out {
                    return Ok((Box::new(out), dst_shape));
                }
            }
        }
        dequantize_matmul_t(self, w_shape, x, x_l)
    }

    /// One f32 row's product with stacked gate|up weights and SwiGLU's gate in one launch
    /// (`qmatvec_swiglu_*`); `None` for anything else (more rows, other dtypes, the 8-bit or
    /// fast-kernels-off modes), where candle runs the product and the gate.
    fn matmul_t_swiglu(
        &self,
        w_shape: &Shape,
        x: &dyn ExtStorage,
        x_l: &Layout,
    ) -> candle_core::Result<Option<(Box<dyn ExtStorage>, Shape)>> {
        let (n, k, m, dst_shape) = qmatmul_dims(w_shape, x_l)?;
        if x.dtype() != DType::F32 {
            return Ok(None);
        }
        let Some(x) = x.as_any().downcast_ref::<RocmStorage>() else {
            return Ok(None);
        };
        let Some(out) = self
            .qmatvec_swiglu((n, k, m), x.as_buffer::<f32>()?, x_l)
            .w()?
        else {
            return Ok(None);
        };
        let mut dims = dst_shape.dims().to_vec();
        if let Some(last) = dims.last_mut() {
            *last = n / 2;
        }
        Ok(Some((Box::new(out), Shape::from(dims))))
    }
}
