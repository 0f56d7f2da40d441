//! [`BlasHandle`]: a rocBLAS handle bound to a stream, with a typed, bounds-checked
//! strided-batched GEMM.

use std::ffi::c_void;
use std::sync::Arc;

use half::{bf16, f16};
use rocm_sys::rocblas::{
    rocblas_datatype, rocblas_gemm_algo, rocblas_gemm_flags_none, rocblas_handle,
    rocblas_operation, rocblas_pointer_mode,
};
use rocm_sys::Rocblas;

use crate::buffer::{DeviceRepr, DeviceSlice, DeviceSliceMut};
use crate::error::{check_blas, Result, RocmError};
use crate::graph::batch::NodeKind;
use crate::graph::gate;
use crate::stream::Stream;

/// Element types rocBLAS's `gemm_ex` family accepts, with the compute type used for them.
pub trait GemmType: DeviceRepr {
    /// The rocBLAS type of the matrices.
    const DATATYPE: rocblas_datatype;
    /// The rocBLAS type of accumulation (f32 for half types, like Candle's CUDA backend).
    const COMPUTE: rocblas_datatype;
    /// The host type of alpha and beta, matching [`GemmType::COMPUTE`].
    type Scalar: Copy;
    /// Converts an `f64` scale factor to [`GemmType::Scalar`].
    fn scalar(v: f64) -> Self::Scalar;
}

impl GemmType for f32 {
    const DATATYPE: rocblas_datatype = rocblas_datatype::rocblas_datatype_f32_r;
    const COMPUTE: rocblas_datatype = rocblas_datatype::rocblas_datatype_f32_r;
    type Scalar = f32;
    fn scalar(v: f64) -> f32 {
        v as f32
    }
}
impl GemmType for f64 {
    const DATATYPE: rocblas_datatype = rocblas_datatype::rocblas_datatype_f64_r;
    const COMPUTE: rocblas_datatype = rocblas_datatype::rocblas_datatype_f64_r;
    type Scalar = f64;
    fn scalar(v: f64) -> f64 {
        v
    }
}
impl GemmType for f16 {
    const DATATYPE: rocblas_datatype = rocblas_datatype::rocblas_datatype_f16_r;
    const COMPUTE: rocblas_datatype = rocblas_datatype::rocblas_datatype_f32_r;
    type Scalar = f32;
    fn scalar(v: f64) -> f32 {
        v as f32
    }
}
impl GemmType for bf16 {
    const DATATYPE: rocblas_datatype = rocblas_datatype::rocblas_datatype_bf16_r;
    const COMPUTE: rocblas_datatype = rocblas_datatype::rocblas_datatype_f32_r;
    type Scalar = f32;
    fn scalar(v: f64) -> f32 {
        v as f32
    }
}

/// Whether an operand is used as stored or transposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transpose {
    /// As stored.
    No,
    /// Transposed.
    Yes,
}

impl Transpose {
    fn raw(self) -> rocblas_operation {
        match self {
            Transpose::No => rocblas_operation::rocblas_operation_none,
            Transpose::Yes => rocblas_operation::rocblas_operation_transpose,
        }
    }
}

/// A column-major strided-batched GEMM: `C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i]`
/// for `i in 0..batch`, with `op(A)` m x k, `op(B)` k x n, `C` m x n.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmConfig {
    /// Operation on A.
    pub trans_a: Transpose,
    /// Operation on B.
    pub trans_b: Transpose,
    /// Rows of op(A) and C.
    pub m: usize,
    /// Columns of op(B) and C.
    pub n: usize,
    /// Columns of op(A), rows of op(B).
    pub k: usize,
    /// Scale of the product.
    pub alpha: f64,
    /// Scale of C's previous content (0 ignores it, so C may be uninitialised).
    pub beta: f64,
    /// Leading dimension of A.
    pub lda: usize,
    /// Leading dimension of B.
    pub ldb: usize,
    /// Leading dimension of C.
    pub ldc: usize,
    /// Elements between consecutive A matrices (0 broadcasts one A).
    pub stride_a: usize,
    /// Elements between consecutive B matrices (0 broadcasts one B).
    pub stride_b: usize,
    /// Elements between consecutive C matrices.
    pub stride_c: usize,
    /// Number of products.
    pub batch: usize,
}

impl GemmConfig {
    /// Elements a column-major `rows x cols` operand with leading dimension `ld` spans, over
    /// the whole batch.
    fn extent(rows: usize, cols: usize, ld: usize, stride: usize, batch: usize) -> Option<usize> {
        if rows == 0 || cols == 0 || batch == 0 {
            return Some(0);
        }
        let one = ld.checked_mul(cols - 1)?.checked_add(rows)?;
        stride.checked_mul(batch - 1)?.checked_add(one)
    }

    /// Rows and columns of A and B as stored.
    fn stored_dims(&self) -> ((usize, usize), (usize, usize)) {
        let a = match self.trans_a {
            Transpose::No => (self.m, self.k),
            Transpose::Yes => (self.k, self.m),
        };
        let b = match self.trans_b {
            Transpose::No => (self.k, self.n),
            Transpose::Yes => (self.n, self.k),
        };
        (a, b)
    }

    /// Checks dimensions against rocBLAS's limits and the operands' lengths.
    pub fn validate(&self, len_a: usize, len_b: usize, len_c: usize) -> Result<()> {
        // A decode step validates a GEMM per linear layer: the common case in a few
        // comparisons, the checks that name what failed only when one does.
        if self.fits(len_a, len_b, len_c) {
            return Ok(());
        }
        self.explain(len_a, len_b, len_c)
    }

    /// Whether [`GemmConfig::explain`] finds nothing wrong (the same checks, without messages).
    fn fits(&self, len_a: usize, len_b: usize, len_c: usize) -> bool {
        let ((ar, ac), (br, bc)) = self.stored_dims();
        let limit = i32::MAX as usize;
        let slimit = i64::MAX as usize;
        let within = |need: Option<usize>, have: usize| need.is_some_and(|n| n <= have);
        self.lda >= ar.max(1)
            && self.ldb >= br.max(1)
            && self.ldc >= self.m.max(1)
            && self.m <= limit
            && self.n <= limit
            && self.k <= limit
            && self.lda <= limit
            && self.ldb <= limit
            && self.ldc <= limit
            && self.batch <= limit
            && self.stride_a <= slimit
            && self.stride_b <= slimit
            && self.stride_c <= slimit
            && within(
                Self::extent(ar, ac, self.lda, self.stride_a, self.batch),
                len_a,
            )
            && within(
                Self::extent(br, bc, self.ldb, self.stride_b, self.batch),
                len_b,
            )
            && within(
                Self::extent(self.m, self.n, self.ldc, self.stride_c, self.batch),
                len_c,
            )
            && !(self.batch > 1
                && self.stride_c < self.ldc.saturating_mul(self.n.max(1))
                && self.m > 0
                && self.n > 0)
    }

    /// [`GemmConfig::validate`]'s checks one by one, with the message of the first that fails.
    fn explain(&self, len_a: usize, len_b: usize, len_c: usize) -> Result<()> {
        let bad = |msg: String| Err(RocmError::InvalidArgument(format!("gemm {self:?}: {msg}")));
        let ((ar, ac), (br, bc)) = self.stored_dims();
        for (name, ld, rows) in [
            ("lda", self.lda, ar),
            ("ldb", self.ldb, br),
            ("ldc", self.ldc, self.m),
        ] {
            if ld < rows.max(1) {
                return bad(format!(
                    "{name} = {ld} is smaller than the {rows} rows it must cover"
                ));
            }
        }
        let limit = i32::MAX as usize;
        for (name, v) in [
            ("m", self.m),
            ("n", self.n),
            ("k", self.k),
            ("lda", self.lda),
            ("ldb", self.ldb),
            ("ldc", self.ldc),
            ("batch", self.batch),
        ] {
            if v > limit {
                return bad(format!("{name} = {v} exceeds rocBLAS's 32-bit limit"));
            }
        }
        for (name, stride) in [
            ("stride_a", self.stride_a),
            ("stride_b", self.stride_b),
            ("stride_c", self.stride_c),
        ] {
            if stride > i64::MAX as usize {
                return bad(format!("{name} = {stride} exceeds i64"));
            }
        }
        let checks = [
            (
                "A",
                Self::extent(ar, ac, self.lda, self.stride_a, self.batch),
                len_a,
            ),
            (
                "B",
                Self::extent(br, bc, self.ldb, self.stride_b, self.batch),
                len_b,
            ),
            (
                "C",
                Self::extent(self.m, self.n, self.ldc, self.stride_c, self.batch),
                len_c,
            ),
        ];
        for (name, need, have) in checks {
            match need {
                Some(need) if need <= have => {}
                Some(need) => {
                    return bad(format!("{name} needs {need} elements but has {have}"));
                }
                None => return bad(format!("{name}'s extent overflows")),
            }
        }
        if self.batch > 1
            && self.stride_c < self.ldc.saturating_mul(self.n.max(1))
            && self.m > 0
            && self.n > 0
        {
            return bad("stride_c makes the output matrices overlap".into());
        }
        Ok(())
    }
}

/// A rocBLAS handle whose work is queued on one stream. Owning handle; not `Clone`.
pub struct BlasHandle {
    lib: Arc<Rocblas>,
    raw: rocblas_handle,
    stream: Arc<Stream>,
}

// SAFETY: a rocblas_handle may be used from any thread as long as calls on it do not overlap;
// every call goes through `&mut self` or is serialised by the caller holding `&mut`. (Methods
// that call rocBLAS take `&mut self`.)
unsafe impl Send for BlasHandle {}

impl BlasHandle {
    /// Loads rocBLAS (once per process) and creates a handle bound to `stream`.
    pub fn new(stream: &Arc<Stream>) -> Result<BlasHandle> {
        let lib = stream.device().runtime().rocblas()?;
        // Creating a handle may synchronise the device inside rocBLAS, which would invalidate
        // a graph being recorded: this stream's recording is launched first, and other
        // threads' are waited for (graph::gate).
        let _plain = stream.flush_graph()?;
        stream.device().bind_to_thread()?;
        let mut raw: rocblas_handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device is current.
        check_blas(&lib, "rocblas_create_handle", unsafe {
            gate::device_wide_wait(gate::PATIENCE, || (lib.rocblas_create_handle)(&mut raw))
        })?;
        let handle = BlasHandle {
            lib,
            raw,
            stream: stream.clone(),
        };
        // SAFETY: live handle and stream of the same device.
        check_blas(&handle.lib, "rocblas_set_stream", unsafe {
            (handle.lib.rocblas_set_stream)(handle.raw, stream.raw())
        })?;
        // SAFETY: live handle; host pointer mode is a defined value.
        check_blas(&handle.lib, "rocblas_set_pointer_mode", unsafe {
            (handle.lib.rocblas_set_pointer_mode)(
                handle.raw,
                rocblas_pointer_mode::rocblas_pointer_mode_host,
            )
        })?;
        Ok(handle)
    }

    /// The stream the handle's work is queued on.
    pub fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }

    /// Queues `C = alpha * op(A) * op(B) + beta * C` for every batch entry (column-major, see
    /// [`GemmConfig`]). The operands' lengths are checked against the configuration first.
    pub fn gemm_strided_batched<T: GemmType>(
        &mut self,
        cfg: &GemmConfig,
        a: &impl DeviceSlice<T>,
        b: &impl DeviceSlice<T>,
        c: &mut impl DeviceSliceMut<T>,
    ) -> Result<()> {
        self.gemm_ex::<T, T>(cfg, a, b, c)
    }

    /// [`BlasHandle::gemm_strided_batched`] with half-precision `A` and `B` (f16 or bf16) and an
    /// f32 `C`, accumulated in f32: rocBLAS's mixed-precision `gemm_ex` (f16/bf16 in, f32 out),
    /// for products whose inputs were rounded to halves but whose result must stay f32.
    pub fn gemm_strided_batched_f32_out<T: GemmType<Scalar = f32>>(
        &mut self,
        cfg: &GemmConfig,
        a: &impl DeviceSlice<T>,
        b: &impl DeviceSlice<T>,
        c: &mut impl DeviceSliceMut<f32>,
    ) -> Result<()> {
        self.gemm_ex::<T, f32>(cfg, a, b, c)
    }

    /// The `rocblas_gemm_strided_batched_ex` call of both: `A` and `B` of `T`, `C` (= `D`, in
    /// place) of `C`, alpha/beta and accumulation of `T`'s compute type (which `C::Scalar`
    /// matches by the callers' bounds: `C` is `T`, or f32 for f32-accumulating `T`).
    fn gemm_ex<T: GemmType, C: GemmType>(
        &mut self,
        cfg: &GemmConfig,
        a: &impl DeviceSlice<T>,
        b: &impl DeviceSlice<T>,
        c: &mut impl DeviceSliceMut<C>,
    ) -> Result<()> {
        cfg.validate(a.len(), b.len(), c.len())?;
        if cfg.m == 0 || cfg.n == 0 || cfg.batch == 0 {
            return Ok(());
        }
        // rocBLAS calls are recorded by graph mode only when it says so
        // (`GraphMode::record_blas`); otherwise what it recorded is launched first.
        let record = self.stream.records_blas();
        for s in [a.stream(), b.stream(), c.stream()] {
            self.stream.join(s)?;
        }
        let _plain = if record {
            None
        } else {
            Some(self.stream.flush_graph()?)
        };
        let alpha = T::scalar(cfg.alpha);
        let beta = T::scalar(cfg.beta);
        let lib = &self.lib;
        // SAFETY: `validate` proved every matrix of the batch lies inside its operand and that
        // every integer fits rocBLAS's types; alpha/beta are host scalars of the compute type
        // `T::COMPUTE` (pointer mode host), which is also `C`'s type or f32 with an f32 `C`
        // (rocBLAS's f16/bf16-in, f32-out mixed-precision form); the handle is bound to `self.stream`, on which the operands are
        // now ordered; `c` is borrowed exclusively, so D (= C, in place) is not aliased.
        let call = || unsafe {
            (lib.rocblas_gemm_strided_batched_ex)(
                self.raw,
                cfg.trans_a.raw(),
                cfg.trans_b.raw(),
                cfg.m as i32,
                cfg.n as i32,
                cfg.k as i32,
                &alpha as *const T::Scalar as *const c_void,
                a.device_ptr(),
                T::DATATYPE,
                cfg.lda as i32,
                cfg.stride_a as i64,
                b.device_ptr(),
                T::DATATYPE,
                cfg.ldb as i32,
                cfg.stride_b as i64,
                &beta as *const T::Scalar as *const c_void,
                c.device_ptr(),
                C::DATATYPE,
                cfg.ldc as i32,
                cfg.stride_c as i64,
                c.device_ptr(),
                C::DATATYPE,
                cfg.ldc as i32,
                cfg.stride_c as i64,
                cfg.batch as i32,
                T::COMPUTE,
                rocblas_gemm_algo::rocblas_gemm_algo_standard,
                0,
                rocblas_gemm_flags_none,
            )
        };
        if record {
            self.stream.record(NodeKind::Library, || {
                check_blas(lib, "rocblas_gemm_strided_batched_ex", call())
            })?;
        } else {
            check_blas(lib, "rocblas_gemm_strided_batched_ex", call())?;
        }
        for s in [a.stream(), b.stream(), c.stream()] {
            s.join(&self.stream)?;
        }
        Ok(())
    }
}

impl Drop for BlasHandle {
    fn drop(&mut self) {
        let (lib, rt) = (self.lib.clone(), self.stream.device().runtime().clone());
        let raw = self.raw as usize;
        // Destroying a handle frees its workspace, which invalidates any graph being recorded
        // in the process: deferred until none is (graph::gate).
        gate::device_wide(move || {
            // SAFETY: the handle is live and destroyed once (this closure runs once); rocBLAS
            // waits for its queued work.
            let code = unsafe { (lib.rocblas_destroy_handle)(raw as rocblas_handle) };
            if let Err(e) = check_blas(&lib, "rocblas_destroy_handle", code) {
                rt.record_err(e);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(m: usize, n: usize, k: usize, batch: usize) -> GemmConfig {
        GemmConfig {
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            m,
            n,
            k,
            alpha: 1.0,
            beta: 0.0,
            lda: m,
            ldb: k,
            ldc: m,
            stride_a: m * k,
            stride_b: k * n,
            stride_c: m * n,
            batch,
        }
    }

    #[test]
    fn exact_sizes_pass() {
        let c = cfg(3, 4, 5, 2);
        assert!(c.validate(30, 40, 24).is_ok());
    }

    #[test]
    fn short_operands_are_rejected() {
        let c = cfg(3, 4, 5, 2);
        let e = c.validate(29, 40, 24).unwrap_err().to_string();
        assert!(e.contains("A needs 30 elements but has 29"), "{e}");
        assert!(c.validate(30, 40, 23).is_err());
    }

    #[test]
    fn transposed_and_broadcast_operands() {
        let mut c = cfg(3, 4, 5, 2);
        c.trans_a = Transpose::Yes;
        c.lda = 5; // A stored k x m
        c.stride_a = 0; // one A for the whole batch
        assert!(c.validate(15, 40, 24).is_ok());
        c.lda = 2;
        assert!(c.validate(15, 40, 24).is_err(), "lda below the row count");
    }

    #[test]
    fn overlapping_outputs_and_huge_dims_are_rejected() {
        let mut c = cfg(3, 4, 5, 2);
        c.stride_c = 1;
        assert!(c.validate(30, 40, 24).is_err());
        let big = cfg(1 << 31, 1, 1, 1);
        assert!(big.validate(usize::MAX, usize::MAX, usize::MAX).is_err());
    }

    /// The quick check and the one with messages agree, over configurations near every limit.
    #[test]
    fn the_quick_check_agrees_with_the_explained_one() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        let edge = [
            0usize,
            1,
            2,
            3,
            7,
            64,
            1 << 31,
            (1 << 31) - 1,
            usize::MAX / 2,
            usize::MAX,
        ];
        let (mut ok, mut failed) = (0, 0);
        for _ in 0..20_000 {
            let mut pick = |small: u64| {
                if next(4) == 0 {
                    edge[next(edge.len() as u64) as usize]
                } else {
                    next(small) as usize
                }
            };
            let c = GemmConfig {
                trans_a: if pick(2) % 2 == 0 {
                    Transpose::No
                } else {
                    Transpose::Yes
                },
                trans_b: if pick(2) % 2 == 0 {
                    Transpose::No
                } else {
                    Transpose::Yes
                },
                m: pick(6),
                n: pick(6),
                k: pick(6),
                alpha: 1.0,
                beta: 0.0,
                lda: pick(8),
                ldb: pick(8),
                ldc: pick(8),
                stride_a: pick(40),
                stride_b: pick(40),
                stride_c: pick(40),
                batch: pick(4),
            };
            let (la, lb, lc) = (pick(120), pick(120), pick(120));
            let fits = c.fits(la, lb, lc);
            assert_eq!(fits, c.explain(la, lb, lc).is_ok(), "{c:?} {la} {lb} {lc}");
            if fits {
                ok += 1;
            } else {
                failed += 1;
            }
        }
        assert!(
            ok > 100 && failed > 100,
            "{ok} pass, {failed} fail: cover both"
        );
    }
}
