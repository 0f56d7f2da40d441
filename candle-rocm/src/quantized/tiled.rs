//! The quantized products of more rows: the register-tiled `qmr_*` kernels (f32), the
//! shared-memory `qmm8_*` tiles (q8 mode), and the prefill path (weights dequantized to f16, one GEMM).

use candle_core::backend::BackendStorage;
use candle_core::{DType, Layout};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DeviceSlice, LaunchConfig};

use crate::dtype::RocmStorageSlice;
use crate::error::BackendError;
use crate::layout::invalid;
use crate::storage::RocmStorage;

use super::plan::{
    qmatvec_kernel, qmm_slices, qmm_tile, QmatvecNames, QMM_CHUNK, QMM_THREADS, QMM_TILE_N,
    QMR_MAX_ROWS, QMR_THREADS, QMR_TILE_N,
};
use super::qstorage::{Blocks, RocmQStorage};

impl RocmQStorage {
    /// `x (m, k) @ w^T` on our tiled kernels (`kernels/hip/qmatvec/`): in f32 the
    /// register-tiled `qmr_<type>_m<8|16>` up to [`QMR_MAX_ROWS`] rows (`None` past them: the
    /// f16 GEMM takes those); with [`crate::settings::qmatvec_q8`] the `qmm8_<type>_m<tile>`
    /// tiles: x rounded to 8 bits as for the q8 mat-vec, each block unpacks a 64-row tile of
    /// the weights to bytes in shared memory and multiplies it with up to 64 rows of x with
    /// integer dot products; k is split into slices when the tiles alone would not fill the
    /// GPU, and `qmm_reduce` adds the slices' partial products in order. For Q4_0, Q4_1, Q5_0,
    /// Q5_1, Q8_0, Q4_K, Q5_K and Q6_K weights; `None` when the kernels do not apply (another
    /// type, `k` not a multiple of the block or of 32, sizes past `u32`, `x` not `m` contiguous
    /// rows or not 16-byte aligned). Allocations: the output, the rounded rows, and the partial
    /// products when k is split.
    pub(super) fn qmatmul_tiled(
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
        // In f32, up to QMR_MAX_ROWS rows: the register-tiled kernels, one launch; more rows
        // go to the f16 GEMM (the f32 `qmm_*` tiles, slower than it at every size measured,
        // are not shipped).
        if !crate::settings::qmatvec_q8() {
            if m <= QMR_MAX_ROWS {
                return self.qmatmul_qmr(&names, (n, k, m), data, x, x_start);
            }
            return Ok(None);
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
        let out_el = crate::layout::checked_product("qmatmul", "output (m * n)", &[m, n])?;
        let tiles_n = n.div_ceil(QMM_TILE_N);
        let cus = self.device.device().info().compute_units as usize;
        let (cps, slices) = qmm_slices(tiles_n * tiles_m as usize, k / QMM_CHUNK, cus);
        let out = self.device.alloc::<f32>(out_el)?;
        let part = if slices > 1 {
            Some(self.device.alloc::<f32>(crate::layout::checked_product(
                "qmatmul",
                "partial products (slices * m * n)",
                &[slices, m, n],
            )?)?)
        } else {
            None
        };
        // 8-bit activations (CANDLE_ROCM_QMATVEC=q8): x rounded as for the q8 mat-vec first.
        let name = names.qmm8[tile];
        let x8 = self.quantize_x8(&xs, (k32, m32))?;
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
        let px = x8.as_arg();
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
        // SAFETY: `qmm8_<type>_m<tile>` take (const uint8_t *w, const uint8_t *x8, float *y,
        // unsigned n, unsigned k, unsigned m, unsigned cps). They read the n rows of k / block
        // values' blocks (`check_count` made sure they lie within the blocks held; the piece
        // reads stay inside each block, so no alignment beyond 2 bytes is assumed), the m x8
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
    pub(super) fn qmatmul_qmr(
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
    pub(super) fn mat_mat_f16(
        &self,
        (n, k, m): (usize, usize, usize),
        x: &RocmStorage,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        if !matches!(self.blocks, Blocks::Quantized(_)) || n == 0 || k == 0 || m == 0 {
            return Ok(None);
        }
        let out_el = crate::layout::checked_product("qmatmul", "output (m * n)", &[m, n])?;
        let Some(w) = self.dequantize_on_device(n * k, true)? else {
            return Ok(None);
        };
        let xh = BackendStorage::to_dtype(x, x_l, DType::F16).map_err(|e| invalid("qmatmul", e))?;
        // Candle's lhs x (m, k) and rhs w^T (k, n), both dense: rocBLAS's A is w, its B is x.
        let lhs_l = Layout::contiguous((m, k));
        let rhs_l = Layout::contiguous((n, k))
            .transpose(0, 1)
            .map_err(|e| invalid("qmatmul", e))?;
        let cfg = crate::layout::gemm_config((1, m, n, k), &lhs_l, &rhs_l)
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
}
