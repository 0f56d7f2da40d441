//! Our `rows` kernels (`kernels/hip/rows.hip`): reductions over the last dim, the fused
//! softmax / RMS norm / layer norm over the last dim, and the tiled transpose behind the
//! contiguous copy of a transposed layout.
//!
//! Each entry point returns `Ok(None)` / `Ok(false)` when its kernels do not apply (dtype,
//! layout), and the caller then takes its general path. The launch path is lean: sizes go by
//! value in the kernel arguments, nothing is allocated or uploaded besides the output, and
//! nothing waits for the device.
//!
//! Launch shapes (see the row model in rows.hip): a row of `units` work items (16-byte chunks
//! on the vector path, elements or chunks on the scalar path) goes to a group of `tpr` threads;
//! rows of at most 32 units share 256-thread blocks (`tpr` a power of two up to 32, which no
//! wave size is below), longer rows get a block of their own (`tpr` = block size, a multiple
//! of 64 up to 256, so whole waves on wave32 and wave64 alike).

use candle_core::op::ReduceOp;
use candle_core::{DType, Layout};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceSlice, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::layout::{invalid, out_of_bounds};

/// Threads per block (`RW_BLOCK` in rows.hip, the kernels' launch bound).
pub(crate) const BLOCK: usize = 256;
/// Largest row group that shares a block with other rows: the smallest wave size.
const MAX_GROUP: usize = 32;
/// Block sizes of one-row-per-block launches are multiples of this (whole waves on wave32 and
/// wave64).
const BLOCK_STEP: usize = 64;
/// Most blocks in one launch; the kernels loop over further rows (and tiles).
pub(crate) const MAX_BLOCKS: usize = 1 << 20;
/// Values one thread keeps in registers on the single-pass fused path (`K * N <= 32`).
const MAX_REG_VALUES: usize = 32;
/// Chunks per thread of the single-pass fused kernels, smallest first.
const KS: [usize; 4] = [1, 2, 4, 8];

/// The dtypes the row kernels exist for.
const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
/// Kernel name roots: the reductions, then the fused ops (which add `_<K>`).
const ROOTS: [&str; 9] = [
    "rsum",
    "rmax",
    "rmin",
    "rargmax",
    "rargmin",
    "rsoftmax",
    "rrmsnorm",
    "rlayernorm",
    "raddrmsnorm",
];
/// Chunks per thread of the fused kernels (0: the two-pass kernel).
const KS_ALL: [usize; 5] = [0, 1, 2, 4, 8];

/// Whether the row kernels exist for `dtype`.
pub(crate) fn float(dtype: DType) -> bool {
    FLOATS.contains(&dtype)
}

/// The name of a `rows` kernel: `<root>_<dtype>[_<k>][_v]`, from a table built once, so a
/// launch looks its kernel up without allocating. `None` for a combination outside the table.
fn kernel_name(root: &str, dtype: DType, k: Option<usize>, vec: bool) -> Option<&'static str> {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let index = |r: usize, d: usize, k: usize, v: bool| ((r * 4 + d) * 5 + k) * 2 + usize::from(v);
    let names = NAMES.get_or_init(|| {
        let mut names = vec![String::new(); ROOTS.len() * 4 * 5 * 2];
        for (r, root) in ROOTS.iter().enumerate() {
            for (d, dtype) in FLOATS.iter().enumerate() {
                for (ki, k) in KS_ALL.iter().enumerate() {
                    for v in [false, true] {
                        let k = if r >= 5 {
                            format!("_{k}")
                        } else {
                            String::new()
                        };
                        let v_suffix = if v { "_v" } else { "" };
                        names[index(r, d, ki, v)] =
                            format!("{root}_{}{k}{v_suffix}", dtype.as_str());
                    }
                }
            }
        }
        names
    });
    let r = ROOTS.iter().position(|x| *x == root)?;
    let d = FLOATS.iter().position(|x| *x == dtype)?;
    let ki = match k {
        Some(k) => KS_ALL.iter().position(|x| *x == k)?,
        None => 0,
    };
    // The reductions take no K, the fused ops always one.
    if (r >= 5) != k.is_some() {
        return None;
    }
    names.get(index(r, d, ki, vec)).map(|s| s.as_str())
}

/// Elements of `T` in one 16-byte chunk.
pub(crate) fn chunk<T>() -> usize {
    16 / std::mem::size_of::<T>()
}

/// Whether a device address is 16-byte aligned.
pub(crate) fn aligned(ptr: *mut std::ffi::c_void) -> bool {
    (ptr as usize) % 16 == 0
}

/// Launch shape of a row kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RowShape {
    /// Threads per row.
    pub tpr: u32,
    /// Threads per block.
    pub block: u32,
    /// Blocks.
    pub grid: u32,
}

impl RowShape {
    /// `rows` rows of `units` work items each, about `per_thread` items per thread on rows
    /// long enough to fill a block (at most `BLOCK` threads either way).
    pub(crate) fn new(rows: usize, units: usize, per_thread: usize) -> RowShape {
        let units = units.max(1);
        let (tpr, rows_per_block) = if units <= MAX_GROUP {
            let tpr = units.next_power_of_two();
            (tpr, BLOCK / tpr)
        } else {
            let threads = units.div_ceil(per_thread.max(1));
            let block = threads
                .next_multiple_of(BLOCK_STEP)
                .clamp(BLOCK_STEP, BLOCK);
            (block, 1)
        };
        let block = if rows_per_block > 1 { BLOCK } else { tpr };
        let grid = rows.div_ceil(rows_per_block).clamp(1, MAX_BLOCKS);
        // All three are at most 2^20 (checked by the constants), so they fit u32.
        RowShape {
            tpr: tpr as u32,
            block: block as u32,
            grid: grid as u32,
        }
    }

    fn cfg(self) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.grid, 1, 1),
            block_dim: (self.block, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// `(rows, cols)` when a reduction over `dims` of `layout` is a reduction of each of `rows`
/// consecutive runs of `cols` elements: the dims from the first reduced one on are all reduced
/// or of size 1. `None` otherwise (or for an empty tensor).
pub(crate) fn last_dims_rows(layout: &Layout, dims: &[usize]) -> Option<(usize, usize)> {
    let shape = layout.dims();
    let first = *dims.iter().min()?;
    if dims.iter().any(|&d| d >= shape.len()) {
        return None;
    }
    let trailing_ok = (first..shape.len()).all(|d| dims.contains(&d) || shape[d] == 1);
    if !trailing_ok {
        return None;
    }
    let rows: usize = shape[..first].iter().product();
    let cols: usize = shape[first..].iter().product();
    (rows > 0 && cols > 0).then_some((rows, cols))
}

/// `(a, b, c)` when a reduction over `dims` of a contiguous tensor is a reduction of the
/// middle dim of an (a, b, c) view: the reduced dims are consecutive, with kept dims of more
/// than one element after them. `None` otherwise (or for an empty tensor).
pub(crate) fn middle_dims(layout: &Layout, dims: &[usize]) -> Option<(usize, usize, usize)> {
    let shape = layout.dims();
    let first = *dims.iter().min()?;
    let end = dims.iter().max()? + 1;
    if end > shape.len() || (first..end).any(|d| !dims.contains(&d)) {
        return None;
    }
    let a: usize = shape[..first].iter().product();
    let b: usize = shape[first..end].iter().product();
    let c: usize = shape[end..].iter().product();
    (a > 0 && b > 0 && c > 1).then_some((a, b, c))
}

/// Threads of the middle-dim kernels' blocks along c and along b (`RW_CX`, `RW_CY`).
const COL_X: usize = 64;
const COL_Y: u32 = 4;

/// A reduction over the last dim(s) (`rows` kernels: `r<op>`) or over a middle dim (`c<op>`)
/// of a contiguous float tensor, or `None` when the op is another case (the caller's general
/// kernels then run).
pub(crate) fn reduce<T: RocmDType, W: Fn(DeviceBuffer<T>) -> S>(
    dev: &RocmDevice,
    src: &DeviceBuffer<T>,
    layout: &Layout,
    dims: &[usize],
    op: ReduceOp,
    wrap: &W,
) -> Result<Option<S>, BackendError> {
    if !crate::settings::fast_kernels() {
        return Ok(None);
    }
    let (root, col_root) = match op {
        ReduceOp::Sum => ("rsum", "csum"),
        ReduceOp::Max => ("rmax", "cmax"),
        ReduceOp::Min => ("rmin", "cmin"),
        ReduceOp::ArgMax => ("rargmax", "cargmax"),
        ReduceOp::ArgMin => ("rargmin", "cargmin"),
    };
    let index = matches!(op, ReduceOp::ArgMax | ReduceOp::ArgMin);
    // Each dim at most once; min/max and the arg ops over one dim (as candle's CPU backend).
    let distinct = dims.iter().enumerate().all(|(i, d)| !dims[..i].contains(d));
    if !float(T::DTYPE) || !distinct || (op != ReduceOp::Sum && dims.len() != 1) {
        return Ok(None);
    }
    let Some((o1, o2)) = layout.contiguous_offsets() else {
        return Ok(None);
    };
    // (kernel, outputs, launch shape, the by-value size arguments).
    let (name, outputs, cfg, sizes) = if let Some((rows, cols)) = last_dims_rows(layout, dims) {
        if index && u32::try_from(cols).is_err() {
            return Ok(None);
        }
        let n = chunk::<T>();
        let vec = aligned(
            src.device_ptr()
                .wrapping_byte_add(o1 * std::mem::size_of::<T>()),
        ) && cols % n == 0;
        let units = if vec { cols / n } else { cols };
        let shape = RowShape::new(rows, units, 4);
        let name = kernel_name(root, T::DTYPE, None, vec);
        (name, rows, shape.cfg(), Sizes::Rows(rows, cols, shape.tpr))
    } else if let Some((a, b, c)) = middle_dims(layout, dims) {
        if index && u32::try_from(b).is_err() {
            return Ok(None);
        }
        let outputs = a
            .checked_mul(c)
            .ok_or_else(|| invalid(col_root, "output size overflows"))?;
        let blocks = a
            .checked_mul(c.div_ceil(COL_X))
            .ok_or_else(|| invalid(col_root, "block count overflows"))?;
        let cfg = LaunchConfig {
            // At most MAX_BLOCKS (2^20), so it fits u32.
            grid_dim: (blocks.clamp(1, MAX_BLOCKS) as u32, 1, 1),
            block_dim: (COL_X as u32, COL_Y, 1),
            shared_mem_bytes: 0,
        };
        let name = col_kernel_name(col_root, T::DTYPE);
        (name, outputs, cfg, Sizes::Cols(a, b, c))
    } else {
        return Ok(None);
    };
    let name = name.ok_or_else(|| invalid(root, format_args!("no kernel for {:?}", T::DTYPE)))?;
    if o2 > src.len() {
        return Err(out_of_bounds(root, "layout", o2, src.len()));
    }
    let input = src.slice(o1..o2)?;
    let f = dev.function(Module::Rows, name)?;
    let pin = DevicePtrArg::of(&input);
    macro_rules! launch {
        ($out:expr) => {{
            let out = $out;
            let pout = out.as_arg();
            let mut l = dev.stream().launch_builder(&f);
            l.arg(&pin).arg(&pout);
            match &sizes {
                Sizes::Rows(rows, cols, tpr) => l.arg(rows).arg(cols).arg(tpr),
                Sizes::Cols(a, b, c) => l.arg(a).arg(b).arg(c),
            };
            // SAFETY: r<op>_<T>[_v](const T* src, D* dst, size_t rows, size_t cols,
            // unsigned tpr) and c<op>_<T>(const T* src, D* dst, size_t a, size_t b, size_t c),
            // with D = uint32_t for the arg ops, else T: they read rows * cols == a * b * c
            // elements of `input` (the contiguous layout's o1..o2, bounds-checked above) and
            // write `outputs` (rows, or a * c) elements of `out` (allocated with that many).
            // The _v variant is chosen only when `input` is 16-byte aligned and cols is a
            // multiple of the chunk size, so every row starts aligned; tpr is a power of two
            // <= 32 with block 256, or equals the block size (RowShape), as the row kernels
            // require; the column kernels get their (64, 4) blocks.
            unsafe { l.launch(cfg)? };
            out
        }};
    }
    Ok(Some(if index {
        S::U32(launch!(dev.alloc::<u32>(outputs)?))
    } else {
        wrap(launch!(dev.alloc::<T>(outputs)?))
    }))
}

/// The size arguments of a reduction launch.
enum Sizes {
    /// Rows, row length, threads per row.
    Rows(usize, usize, u32),
    /// The (a, b, c) view reduced over b.
    Cols(usize, usize, usize),
}

/// The name of a middle-dim kernel, `<root>_<dtype>` (static, so the lookup does not allocate).
fn col_kernel_name(root: &str, dtype: DType) -> Option<&'static str> {
    macro_rules! names {
        ($($r:literal),*) => {
            match (root, dtype) {
                $(
                    ($r, DType::F32) => Some(concat!($r, "_f32")),
                    ($r, DType::F64) => Some(concat!($r, "_f64")),
                    ($r, DType::F16) => Some(concat!($r, "_f16")),
                    ($r, DType::BF16) => Some(concat!($r, "_bf16")),
                )*
                _ => None,
            }
        };
    }
    names!("csum", "cmax", "cmin", "cargmax", "cargmin")
}

/// The fused op a [`fused`] launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "candle"), allow(dead_code))]
pub(crate) enum FusedRow {
    /// Softmax over the last dim.
    Softmax,
    /// RMS norm with a scale (alpha).
    RmsNorm,
    /// Layer norm with a scale and a shift (alpha, beta).
    LayerNorm,
    /// The residual add and an RMS norm (alpha, then the residual: `rows * cols` elements),
    /// into an output of `2 * rows * cols` elements: the sum, then its norm.
    AddRmsNorm,
}

/// Threads per row the 16-bit single-pass kernels aim at (8 values per chunk): rows of up to
/// 4096 elements run on blocks of at most 128 threads with more chunks per thread, so more rows
/// are in flight per compute unit and a row's barriers span fewer waves (256-thread rows
/// measured slower for bf16 softmax at 4096 columns; figures in bench/results).
const FUSED_THREADS_16: usize = 128;

/// Chunks per thread of the single-pass kernel for rows of `units` chunks of `chunk_elems`
/// elements, or `None` when the row does not fit the registers (the two-pass kernel then
/// runs): the fewest chunks that keep a row within [`FUSED_THREADS_16`] threads (16-bit types)
/// or within a block.
pub(crate) fn fused_k(chunk_elems: usize, units: usize) -> Option<usize> {
    let fits = |threads: usize| {
        KS.into_iter()
            .filter(|&k| k * chunk_elems <= MAX_REG_VALUES)
            .find(|&k| units.div_ceil(k) <= threads)
    };
    let narrow = if chunk_elems == 8 {
        fits(FUSED_THREADS_16)
    } else {
        None
    };
    narrow.or_else(|| fits(BLOCK))
}

/// Runs a fused row op on `rows` contiguous rows of `cols` elements of `x` (exactly
/// `rows * cols` elements); `params` are alpha (and beta), each at least `cols` elements, or
/// for [`FusedRow::AddRmsNorm`] alpha and the residual, which holds at least `rows * cols`
/// (the caller checks both). `None` for a dtype without these kernels.
#[cfg_attr(not(feature = "candle"), allow(dead_code))]
pub(crate) fn fused<T: RocmDType>(
    dev: &RocmDevice,
    op: FusedRow,
    x: &impl DeviceSlice<T>,
    (rows, cols): (usize, usize),
    params: &[DevicePtrArg],
    param_ptrs: &[*mut std::ffi::c_void],
    eps: f32,
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    if !crate::settings::fast_kernels() {
        return Ok(None);
    }
    let root = match op {
        FusedRow::Softmax => "rsoftmax",
        FusedRow::RmsNorm => "rrmsnorm",
        FusedRow::LayerNorm => "rlayernorm",
        FusedRow::AddRmsNorm => "raddrmsnorm",
    };
    if !float(T::DTYPE) {
        return Ok(None);
    }
    let want = match op {
        FusedRow::Softmax => 0,
        FusedRow::RmsNorm => 1,
        FusedRow::LayerNorm | FusedRow::AddRmsNorm => 2,
    };
    let el = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid(root, "row count times row length overflows"))?;
    if params.len() != want || param_ptrs.len() != want || x.len() != el {
        return Err(invalid(
            root,
            format_args!(
                "{} parameters and {} elements for {rows} rows of {cols}",
                params.len(),
                x.len()
            ),
        ));
    }
    let outputs = if op == FusedRow::AddRmsNorm { 2 } else { 1 };
    let out = dev.alloc::<T>(outputs * el)?;
    if el == 0 {
        return Ok(Some(out));
    }
    let n = chunk::<T>();
    let vec = cols % n == 0
        && aligned(x.device_ptr())
        && aligned(out.device_ptr())
        && param_ptrs.iter().all(|&p| aligned(p));
    let units = cols.div_ceil(n);
    let k = fused_k(n, units);
    let shape = RowShape::new(rows, units, k.unwrap_or(4));
    let name = kernel_name(root, T::DTYPE, Some(k.unwrap_or(0)), vec)
        .ok_or_else(|| invalid(root, format_args!("no kernel for {:?}", T::DTYPE)))?;
    let f = dev.function(Module::Rows, name)?;
    let (px, po) = (DevicePtrArg::of(x), out.as_arg());
    // Softmax reads no parameter and RMS norm no beta: any valid address stands in.
    let pa = params.first().unwrap_or(&px);
    let pb = params.get(1).unwrap_or(pa);
    let tpr = shape.tpr;
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&px)
        .arg(&po)
        .arg(pa)
        .arg(pb)
        .arg(&rows)
        .arg(&cols)
        .arg(&tpr)
        .arg(&eps);
    // SAFETY: r<op>_<T>_<K>[_v](const T* x, T* dst, const T* alpha, const T* beta,
    // size_t rows, size_t cols, unsigned tpr, float eps) reads rows * cols elements of x
    // (x.len() == el, checked), cols elements of alpha and beta where the op has them (the
    // caller checked each holds at least cols; otherwise they are never read; raddrmsnorm's
    // beta, the residual, el elements, which its caller checked), and writes el elements of
    // `out` (2 el for raddrmsnorm; allocated with `outputs * el`); K comes from fused_k, so the kernel exists and a
    // block of `shape.block` <= 256 threads covers a row with K chunks per thread; _v only
    // when every pointer is 16-byte aligned and cols is a multiple of the chunk; tpr follows
    // RowShape's rule; all buffers are ordered on the device's stream.
    unsafe { l.launch(shape.cfg())? };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names() {
        assert_eq!(
            kernel_name("rsum", DType::F32, None, false),
            Some("rsum_f32")
        );
        assert_eq!(
            kernel_name("rargmax", DType::BF16, None, true),
            Some("rargmax_bf16_v")
        );
        assert_eq!(
            kernel_name("rsoftmax", DType::F16, Some(4), true),
            Some("rsoftmax_f16_4_v")
        );
        assert_eq!(
            kernel_name("rlayernorm", DType::F64, Some(0), false),
            Some("rlayernorm_f64_0")
        );
        assert_eq!(kernel_name("rsum", DType::F32, Some(1), false), None);
        assert_eq!(kernel_name("rsoftmax", DType::F32, None, false), None);
        assert_eq!(kernel_name("rsoftmax", DType::U8, Some(1), false), None);
        assert_eq!(kernel_name("rsoftmax", DType::F32, Some(3), false), None);
    }

    #[test]
    fn row_shapes() {
        // Short rows share blocks, groups a power of two up to 32.
        let s = RowShape::new(1000, 7, 4);
        assert_eq!((s.tpr, s.block, s.grid), (8, 256, 32));
        let s = RowShape::new(3, 1, 4);
        assert_eq!((s.tpr, s.block, s.grid), (1, 256, 1));
        let s = RowShape::new(5, 32, 4);
        assert_eq!((s.tpr, s.block), (32, 256));
        // Longer rows: one block per row, whole 64-thread steps, at most 256.
        let s = RowShape::new(8192, 2048, 4);
        assert_eq!((s.tpr, s.block, s.grid), (256, 256, 8192));
        let s = RowShape::new(2, 33, 4);
        assert_eq!((s.tpr, s.block, s.grid), (64, 64, 2));
        let s = RowShape::new(2, 1024, 4);
        assert_eq!((s.tpr, s.block), (256, 256));
        // The grid is capped; the kernels loop over further rows.
        let s = RowShape::new(usize::MAX / 2, 1, 4);
        assert_eq!(s.grid as usize, MAX_BLOCKS);
    }

    #[test]
    fn register_path_capacity() {
        // f32: 4 per chunk, up to 8 chunks per thread: rows of up to 8192 in registers.
        assert_eq!(fused_k(4, 1), Some(1));
        assert_eq!(fused_k(4, 256), Some(1));
        assert_eq!(fused_k(4, 257), Some(2));
        assert_eq!(fused_k(4, 1024), Some(4));
        assert_eq!(fused_k(4, 2048), Some(8));
        assert_eq!(fused_k(4, 2049), None);
        // f16/bf16: 8 per chunk, at most 4 chunks per thread (8192 elements), at most 128
        // threads per row while 4 chunks per thread allow it.
        assert_eq!(fused_k(8, 128), Some(1));
        assert_eq!(fused_k(8, 129), Some(2));
        assert_eq!(fused_k(8, 512), Some(4));
        assert_eq!(fused_k(8, 513), Some(4));
        assert_eq!(fused_k(8, 1024), Some(4));
        assert_eq!(fused_k(8, 1025), None);
        assert_eq!(RowShape::new(10, 512, 4).block, 128);
        // f64: 2 per chunk, 8 chunks (4096 elements).
        assert_eq!(fused_k(2, 2048), Some(8));
        assert_eq!(fused_k(2, 2049), None);
        for units in [1, 3, 31, 32, 33, 63, 64, 65, 1023, 1024, 2048] {
            if let Some(k) = fused_k(4, units) {
                let s = RowShape::new(10, units, k);
                assert!(s.tpr as usize * k >= units, "{units}: {s:?} x {k}");
                assert!(s.block as usize <= BLOCK);
            }
        }
    }

    #[test]
    fn middle_dim_detection() {
        let l = Layout::contiguous((4, 5, 6));
        assert_eq!(middle_dims(&l, &[1]), Some((4, 5, 6)));
        assert_eq!(middle_dims(&l, &[0]), Some((1, 4, 30)));
        assert_eq!(middle_dims(&l, &[1, 0]), Some((1, 20, 6)));
        assert_eq!(middle_dims(&l, &[0, 2]), None);
        assert_eq!(middle_dims(&l, &[2]), None, "a last-dim reduction");
        assert_eq!(
            col_kernel_name("cargmax", DType::BF16),
            Some("cargmax_bf16")
        );
        assert_eq!(col_kernel_name("cargmax", DType::U8), None);
    }

    #[test]
    fn last_dim_detection() {
        let l = Layout::contiguous((4, 5, 6));
        assert_eq!(last_dims_rows(&l, &[2]), Some((20, 6)));
        assert_eq!(last_dims_rows(&l, &[1, 2]), Some((4, 30)));
        assert_eq!(last_dims_rows(&l, &[2, 1]), Some((4, 30)));
        assert_eq!(last_dims_rows(&l, &[1]), None);
        assert_eq!(last_dims_rows(&l, &[0, 2]), None);
        assert_eq!(last_dims_rows(&l, &[3]), None);
        // Trailing size-1 dims do not matter.
        let l = Layout::contiguous((4, 5, 1));
        assert_eq!(last_dims_rows(&l, &[1]), Some((4, 5)));
        let l = Layout::contiguous((4, 0, 3));
        assert_eq!(last_dims_rows(&l, &[2]), None);
    }
}
