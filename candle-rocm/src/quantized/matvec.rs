//! The quantized mat-vec products (decode, few rows) of a [`RocmQStorage`]: our `qmatvec_*`
//! kernels in f32, `qmatvec8_*` on rows rounded to 8 bits, or candle-kernels'
//! `dequantize_mul_mat_vec_*` for one row of the other types.

use candle_core::quantized::GgmlDType;
use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DeviceSlice, LaunchConfig};

use crate::dtype::RocmStorageSlice;
use crate::error::BackendError;
use crate::layout::invalid;
use crate::storage::RocmStorage;

use super::plan::{
    mat_vec_rows_per_block, qmatvec_kernel, row_chunks, split_pays, QmatvecLaunch, QmatvecNames,
    QmatvecSplit, QMATVEC_SWIGLU_ROWS, QMATVEC_THREADS, X8_BLOCK_BYTES,
};
use super::qstorage::{Blocks, RocmQStorage};
use crate::settings::SplitMode;

impl RocmQStorage {
    /// A fresh f32 buffer for the `(m, n)` output of a quantized product (a typed error when
    /// `m * n` overflows).
    pub(super) fn alloc_output(
        &self,
        m: usize,
        n: usize,
    ) -> Result<DeviceBuffer<f32>, BackendError> {
        let count = crate::layout::checked_product("qmatmul", "output (m * n)", &[m, n])?;
        self.device.alloc::<f32>(count)
    }
    /// `x (m, k) @ w^T` for `m` f32 rows `x` (`w` is `(n, k)`):
    /// our `qmatvec` kernels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K when
    /// [`crate::settings::fast_kernels`] is on, several rows per launch, in f32 or (with
    /// [`crate::settings::qmatvec_q8`]) on rows rounded to 8 bits; candle-kernels'
    /// dequantize-mat-vec kernels otherwise, for one row; `None` when they do not apply
    /// (another type, several rows there, or `k` not a multiple of the kernels' stride).
    pub(super) fn mat_vec(
        &self,
        (n, k, m): (usize, usize, usize),
        x: &DeviceBuffer<f32>,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        let Blocks::Quantized(data) = &self.blocks else {
            return Ok(None);
        };
        if crate::settings::fast_kernels() {
            if let Some(names) = qmatvec_kernel(self.dtype) {
                return if crate::settings::qmatvec_q8() {
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
    pub(super) fn qmatvec_shape(
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
    /// launch (each weight word is read once for all of them); one row runs
    /// `qmatvec_split_<type>[_v]` instead where [`crate::settings::qmatvec_split`] says so (k
    /// split across groups, [`QmatvecSplit`]), for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
    /// (blocks of 32 values), Q4_K, Q5_K and Q6_K (256) weights `w` of shape `(n, k)`: `None` when they do
    /// not apply (`k` not a multiple of the block, `n` zero or past `u32`, `x` not `m`
    /// contiguous rows of `k` values). The only allocation is the output.
    pub(super) fn qmatvec(
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
        let x_addr = x.slice(x_start..)?.device_ptr() as usize;
        if m == 1 && self.split(n) {
            let split = QmatvecSplit::new(n, blocks as usize, self.dtype.block_size(), x_addr);
            let f = self
                .device
                .function(Module::Qmatvec, names.split[usize::from(split.vec)])?;
            let xs = x.slice(x_start..x_start + k)?;
            self.qmatvec_split_launch(&f, &split, data, (&xs, &out), (rows, blocks))?;
            return Ok(Some(RocmStorage::new(
                RocmStorageSlice::F32(out),
                self.device.clone(),
            )));
        }
        // Row i of x starts 4 k bytes (a multiple of 128) after row 0: one alignment for all.
        let launch = QmatvecLaunch::new(n, x_addr);
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
    /// SwiGLU's gate of one f32 row's product with these stacked gate|up weights `w` `(n, k)`
    /// (`n = 2 h`, gate rows first): `silu(x w_i) * x w_{h+i}` for `i < h` with our
    /// `qmatvec_swiglu_<type>[_v]` (`kernels/hip/qmatvec/gated.h`), one launch; `None` when
    /// they do not apply: fast kernels off, 8-bit activations on
    /// ([`crate::settings::qmatvec_q8`]: the product then rounds x as that mode does), another
    /// type, another row count than one, `n` odd, or the shape checks of [`Self::qmatvec_shape`].
    pub(super) fn qmatvec_swiglu(
        &self,
        (n, k, m): (usize, usize, usize),
        x: &DeviceBuffer<f32>,
        x_l: &Layout,
    ) -> Result<Option<RocmStorage>, BackendError> {
        let Blocks::Quantized(data) = &self.blocks else {
            return Ok(None);
        };
        if !crate::settings::fast_kernels() || crate::settings::qmatvec_q8() || m != 1 || n % 2 != 0
        {
            return Ok(None);
        }
        let Some(names) = qmatvec_kernel(self.dtype) else {
            return Ok(None);
        };
        let Some((rows, blocks, x_start)) = self.qmatvec_shape((n, k, m), data, x, x_l)? else {
            return Ok(None);
        };
        let h = rows / 2;
        let out = self.alloc_output(1, n / 2)?;
        let xs = x.slice(x_start..x_start + k)?;
        let launch = QmatvecLaunch::with_rows_per_block(
            n / 2,
            QMATVEC_SWIGLU_ROWS,
            xs.device_ptr() as usize,
        );
        let f = self
            .device
            .function(Module::Qmatvec, names.swiglu[usize::from(launch.vec)])?;
        let (pw, px, pout) = (
            data.as_arg(),
            rocm_safe::DevicePtrArg::of(&xs),
            out.as_arg(),
        );
        let mut l = self.device.stream().launch_builder(&f);
        l.arg(&pw).arg(&px).arg(&pout).arg(&h).arg(&blocks);
        // SAFETY: `qmatvec_swiglu_<type>[_v]` take (const uint8_t *w, const float *x, float *y,
        // unsigned h, unsigned nb), read 2h = `rows` rows of `blocks` blocks and one row of
        // k = block_size * blocks f32 values, and write h values. `qmatvec_shape` checked with
        // `check_count` that those weights lie within the blocks held and that the buffer's
        // start is 4-byte aligned; the kernels' reads of up to 2 bytes before a block (inside
        // the previous one) or up to 4 after the last (inside the MATRIX_ROW_PADDING of zeroed
        // blocks, at least 288 bytes) stay inside the buffer; `xs` is a checked view of the k
        // values, 16-byte aligned where `launch` chose the `_v` kernel; `out` is a fresh buffer
        // of h values; the kernels take blocks of QMATVEC_THREADS threads and any grid (a
        // grid-stride loop); all ordered on the device's stream.
        unsafe { l.launch(launch.cfg)? };
        Ok(Some(RocmStorage::new(
            RocmStorageSlice::F32(out),
            self.device.clone(),
        )))
    }

    /// Whether a one-row product on `n` rows of these weights runs the split kernels
    /// ([`crate::settings::qmatvec_split`]).
    fn split(&self, n: usize) -> bool {
        match crate::settings::qmatvec_split() {
            SplitMode::Always => true,
            SplitMode::Never => false,
            SplitMode::Auto => split_pays(n, self.device.device().info().compute_units as usize),
        }
    }

    /// One launch of a split `qmatvec_split_<type>[_v]` kernel for one row of x: `y_out (1,
    /// rows) = x_row (1, k) @ w^T` (k = block_size * `blocks`), `split.gpr` groups per row
    /// group.
    fn qmatvec_split_launch(
        &self,
        f: &rocm_safe::Function,
        split: &QmatvecSplit,
        data: &DeviceBuffer<u8>,
        (x_row, y_out): (&impl DeviceSlice<f32>, &impl DeviceSlice<f32>),
        (rows, blocks): (u32, u32),
    ) -> Result<(), BackendError> {
        let (pw, py, pout) = (
            data.as_arg(),
            rocm_safe::DevicePtrArg::of(x_row),
            rocm_safe::DevicePtrArg::of(y_out),
        );
        let gpr = split.gpr;
        let mut l = self.device.stream().launch_builder(f);
        l.arg(&pw)
            .arg(&py)
            .arg(&pout)
            .arg(&rows)
            .arg(&blocks)
            .arg(&gpr);
        // SAFETY: `qmatvec_split_<type>[_v]` take (const uint8_t *w, const float *x, float *y,
        // unsigned n, unsigned nb, unsigned gpr), read `rows` rows of `blocks` blocks and one
        // row of k = block_size * blocks f32 values, and write `rows` values. The caller
        // (`qmatvec`) checked with `check_count` that those weights lie within the blocks
        // held; the kernels' reads of up to 2 bytes before a block (inside the previous block;
        // the buffer's start is 4-byte aligned, checked there) or up to 4 after the last one
        // fall inside the MATRIX_ROW_PADDING of zeroed blocks that follows (at least 288
        // bytes); `x_row` is a checked view of the row, 16-byte aligned where `split` chose
        // the `_v` kernel; `y_out` is a fresh buffer of `rows` values no other launch writes;
        // gpr is 1, 2, 4 or 8 (`split_groups_per_row`), the same for every block, the kernels
        // take blocks of QMATVEC_THREADS threads and any grid (a grid-stride loop); all
        // ordered on the device's stream.
        unsafe { l.launch(split.cfg)? };
        Ok(())
    }
    /// `x (m, k) @ w^T` with `x` rounded to 8 bits (`qmv_quantize_x8`, one launch for the `m`
    /// rows) and our `qmatvec8_<type>[_m<rows>]` kernels, up to [`QmatvecNames::max_rows`] rows
    /// per launch: the types, shapes and `None` cases of [`Self::qmatvec`]. Allocations: the
    /// 8-bit rows and the output.
    pub(super) fn qmatvec8(
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
    pub(super) fn quantize_x8(
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
        let x8 = self.device.alloc::<u8>(crate::layout::checked_product(
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
    pub(super) fn qmatvec_launch(
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
}
