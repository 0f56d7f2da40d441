//! The implicit-GEMM convolution over typed buffers: `conv_igemm.hip`'s kernels (f16, bf16;
//! f32 accumulation on matrix units) compute a forward convolution (conv2d, and conv1d as
//! h = 1) from the input as it lies, each block gathering its tiles of input patches into
//! shared memory, so no column matrix is written to or read back from memory (the im2col
//! tiles of [`crate::launch::conv`] write and read 9 times the input for a 3x3).
//!
//! Which kernel (`IgemmKernel`): with a multiple of 32 input channels the GEMM's K runs taps
//! outer (`conv_igemm_taps*`: a 32-wide step is one tap over 32 channels, gathered with a
//! quarter of the work), over the kernel permuted to (c_out, k_h, k_w, c_in) by
//! [`crate::launch::transpose`] into a buffer of its own. Any other shape takes
//! `conv_igemm_<T>` (channels outer, the kernel as it lies).
//!
//! The kernels exist only in the code objects of targets with matrix units (MFMA on gfx90a and
//! gfx94x, WMMA on gfx11 and gfx12, tensor cores on the HIP-on-CUDA harness): [`conv_igemm`]
//! returns `None` elsewhere, and for shapes past the kernel's 32-bit sizes, and the caller
//! keeps its im2col-tile GEMM path. `igemm_args` and `igemm_launch` are host arithmetic,
//! tested here; the kernel's arithmetic is tested on the CPU emulator
//! (`kernels/tests/emu/conv_igemm_test.cpp`, every matrix-unit family).

use candle_core::{DType, Layout};
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, DeviceRepr, DeviceSlice, LaunchConfig};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::conv_plan::{patch, ConvGeometry};
use crate::launch::transpose::transpose;
use crate::layout::{checked_product, checked_view, invalid};

/// Threads per block (`CI_THREADS`).
const THREADS: u32 = 128;
/// Output channels per block (`CI_BM`).
const BLOCK_CHANNELS: usize = 64;
/// Input channels a step of K takes (`CI_BK`): the taps-outer kernels need a multiple.
const STEP: usize = 32;
/// Output positions per block (`CI_BN`).
const BLOCK_POSITIONS: usize = 128;
/// CUDA's and HIP's limit on gridDim.y (the channel tiles).
const GRID_Y: usize = 65535;

/// The kernels' first argument (`ConvIgemmArgs` in conv_igemm.hip): 64-bit input strides, then
/// 32-bit fields, no padding (112 bytes, asserted here and there).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ConvIgemmArgs {
    s_b: u64,
    s_c: u64,
    s_h: u64,
    s_w: u64,
    batch: u32,
    c_in: u32,
    h_in: u32,
    w_in: u32,
    c_out: u32,
    h_out: u32,
    w_out: u32,
    k_h: u32,
    k_w: u32,
    stride_h: u32,
    stride_w: u32,
    pad_h: u32,
    pad_w: u32,
    dil_h: u32,
    dil_w: u32,
    pub(crate) w_vec: u32,
    k: u32,
    n: u32,
    p: u32,
    unused: u32,
}

const _: () = assert!(std::mem::size_of::<ConvIgemmArgs>() == 112);

// SAFETY: `ConvIgemmArgs` is `#[repr(C)]` plain integers with no padding (112 bytes, asserted
// here and in conv_igemm.hip), so its bytes are exactly the kernel's `ConvIgemmArgs` parameter.
unsafe impl DeviceRepr for ConvIgemmArgs {}

/// One of `conv_igemm.hip`'s kernels: its name and the order of its K.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IgemmKernel {
    /// The kernel's name in the module.
    pub(crate) name: &'static str,
    /// K runs taps outer (`k = (ky, kx, ci)`): the kernel must be permuted to (c_out, k_h, k_w,
    /// c_in) first; else channels outer, the kernel as it lies.
    pub(crate) taps: bool,
}

/// Whether `g`'s input channels let K run taps outer (a multiple of a step's 32).
pub(crate) fn taps_outer(g: &ConvGeometry) -> bool {
    g.c_in % STEP == 0
}

/// The kernel for `dtype` and `g` (f16 and bf16 only): taps outer when `c_in` is a multiple of
/// 32, else channels outer.
pub(crate) fn igemm_kernel(dtype: DType, g: &ConvGeometry) -> Option<IgemmKernel> {
    igemm_kernel_of(dtype, taps_outer(g))
}

/// The kernel of `dtype` in the order asked.
fn igemm_kernel_of(dtype: DType, taps: bool) -> Option<IgemmKernel> {
    let name = match (dtype, taps) {
        (DType::F16, false) => "conv_igemm_f16",
        (DType::BF16, false) => "conv_igemm_bf16",
        (DType::F16, true) => "conv_igemm_taps_f16",
        (DType::BF16, true) => "conv_igemm_taps_bf16",
        _ => return None,
    };
    Some(IgemmKernel { name, taps })
}

/// The kernel's arguments for `g` over an input with strides `strides` (image, channel, row,
/// column), `w_vec` 0 (the caller sets it from the kernel's alignment); `None` when a size
/// passes the kernel's limits: K = c_in k_h k_w and N = batch h_out w_out below 2^31, every
/// geometry field in `u32`, the input's height and width, the padding and the reach of the
/// output positions and taps below 2^28, the channel tiles within gridDim.y, or an empty
/// output.
pub(crate) fn igemm_args(g: &ConvGeometry, strides: [usize; 4]) -> Option<ConvIgemmArgs> {
    let below_2_31 = |v: usize| (v < 1 << 31).then_some(v as u32);
    let u32_of = |v: usize| u32::try_from(v).ok();
    let positions = g.h_out.checked_mul(g.w_out)?;
    let k = below_2_31(g.c_in.checked_mul(g.k_h)?.checked_mul(g.k_w)?)?;
    let n = below_2_31(g.batch.checked_mul(positions)?)?;
    if k == 0 || n == 0 || g.c_out == 0 || g.c_out.div_ceil(BLOCK_CHANNELS) > GRID_Y {
        return None;
    }
    // The kernel's rows and columns are 32-bit: the input, the corners and the taps' shifts
    // stay below 2^28 in magnitude.
    let small = |v: Option<usize>| v.is_some_and(|v| v < 1 << 28);
    let reach = |stride: usize, out: usize, dil: usize, k: usize| {
        Some(stride.checked_mul(out)?.max(dil.checked_mul(k)?))
    };
    if ![
        Some(g.h_in),
        Some(g.w_in),
        Some(g.padding.0),
        Some(g.padding.1),
        reach(g.stride.0, g.h_out, g.dilation.0, g.k_h),
        reach(g.stride.1, g.w_out, g.dilation.1, g.k_w),
    ]
    .into_iter()
    .all(small)
    {
        return None;
    }
    Some(ConvIgemmArgs {
        s_b: strides[0] as u64,
        s_c: strides[1] as u64,
        s_h: strides[2] as u64,
        s_w: strides[3] as u64,
        batch: u32_of(g.batch)?,
        c_in: u32_of(g.c_in)?,
        h_in: u32_of(g.h_in)?,
        w_in: u32_of(g.w_in)?,
        c_out: u32_of(g.c_out)?,
        h_out: u32_of(g.h_out)?,
        w_out: u32_of(g.w_out)?,
        k_h: u32_of(g.k_h)?,
        k_w: u32_of(g.k_w)?,
        stride_h: u32_of(g.stride.0)?,
        stride_w: u32_of(g.stride.1)?,
        pad_h: u32_of(g.padding.0)?,
        pad_w: u32_of(g.padding.1)?,
        dil_h: u32_of(g.dilation.0)?,
        dil_w: u32_of(g.dilation.1)?,
        w_vec: 0,
        k,
        n,
        p: u32_of(positions)?,
        unused: 0,
    })
}

/// The launch shape for `a`: one block of [`THREADS`] threads per 64 channels x 128 positions
/// tile (grid x over the positions of every image, y over the channels; `igemm_args` kept y
/// within its limit, and x = N / 128 < 2^24).
pub(crate) fn igemm_launch(a: &ConvIgemmArgs) -> LaunchConfig {
    let gx = (a.n as usize).div_ceil(BLOCK_POSITIONS);
    let gy = (a.c_out as usize).div_ceil(BLOCK_CHANNELS);
    LaunchConfig {
        grid_dim: (gx as u32, gy as u32, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Whether this device's code object has the implicit-GEMM kernels for `dtype`.
pub fn has_igemm(dev: &RocmDevice, dtype: DType) -> Result<bool, BackendError> {
    match igemm_kernel_of(dtype, false) {
        Some(k) => Ok(dev.function_optional(Module::ConvIgemm, k.name)?.is_some()),
        None => Ok(false),
    }
}

/// Runs the convolution `g` of `x` (4-D layout `x_l`, (batch, c_in, h_in, w_in), any strides)
/// with the contiguous kernel `w[w_off..]` (c_out, c_in, k_h, k_w) as an implicit GEMM: the new
/// contiguous NCHW output, or `None` when `T` is not f16/bf16, the device's code object lacks
/// the kernel (a target without matrix units) or a size passes the kernel's limits.
pub fn conv_igemm<T: RocmDType>(
    dev: &RocmDevice,
    g: &ConvGeometry,
    (x, x_l): (&DeviceBuffer<T>, &Layout),
    (w, w_off): (&DeviceBuffer<T>, usize),
) -> Result<Option<DeviceBuffer<T>>, BackendError> {
    const OP: &str = "conv (implicit GEMM)";
    if x_l.dims() != [g.batch, g.c_in, g.h_in, g.w_in] {
        return Err(invalid(
            OP,
            format_args!("input dims {:?} do not match {g:?}", x_l.dims()),
        ));
    }
    let Some(kernel) = igemm_kernel(T::DTYPE, g) else {
        return Ok(None);
    };
    let st = x_l.stride();
    let Some(mut args) = igemm_args(g, [st[0], st[1], st[2], st[3]]) else {
        return Ok(None);
    };
    let Some(f) = dev.function_optional(Module::ConvIgemm, kernel.name)? else {
        return Ok(None);
    };
    let out_el = checked_product(
        OP,
        "output element count",
        &[g.batch, g.c_out, g.h_out * g.w_out],
    )?;
    let x = checked_view(OP, x, x_l)?;
    let k = patch(g);
    let w_len = g.c_out * k;
    let w_end = w_off
        .checked_add(w_len)
        .ok_or_else(|| invalid(OP, "the kernel's offset overflows"))?;
    let taps = g.k_h * g.k_w;
    // Taps outer: the kernel permuted to (c_out, k_h, k_w, c_in), a batch of c_out (c_in, taps)
    // matrices transposed (a 1x1 kernel is its own permutation).
    let permuted = if kernel.taps && taps > 1 {
        let view = Layout::new((g.c_out, taps, g.c_in).into(), vec![k, 1, taps], w_off);
        let mut p = dev.alloc::<T>(w_len)?;
        if !transpose(dev, w, &view, &mut p, 0)? {
            return Ok(None);
        }
        Some(p)
    } else {
        None
    };
    let w = match &permuted {
        Some(p) => p.slice(..)?,
        None => w.slice(w_off..w_end)?,
    };
    // 16-byte loads of the kernel's rows: every row (K elements) starts 16-byte aligned.
    args.w_vec = u32::from(args.k % 8 == 0 && w.device_ptr() as usize % 16 == 0);
    let out = dev.alloc::<T>(out_el)?;
    let (px, pw, po) = (
        DevicePtrArg::of(&x),
        DevicePtrArg::of(&w),
        DevicePtrArg::of(&out),
    );
    let cfg = igemm_launch(&args);
    let mut l = dev.stream().launch_builder(&f);
    l.arg(&args).arg(&px).arg(&pw).arg(&po);
    // SAFETY: conv_igemm[_taps]_<T>(ConvIgemmArgs a, const T* x, const T* w, T* y)
    // with T = T::DTYPE (the name). It reads x at b * s_b + c * s_c + iy * s_h + ix * s_w for
    // b < batch, c < c_in, iy < h_in, ix < w_in only (positions outside the input are zeros,
    // not reads): elements of `x_l` from its start, which `checked_view` proved lie inside the
    // buffer; w at co * K + k for co < c_out, k < K = c_in k_h k_w: the slice of c_out * K
    // elements, or the permuted copy of that many (and 16-byte loads only when w_vec says every
    // row is aligned and the 16 lie inside K); the taps-outer kernels only get c_in % 32 == 0
    // (`igemm_kernel`). It writes y at (b * c_out + co) * P + p for p < P = h_out w_out: `out`,
    // batch * c_out * P elements, new and aliasing neither input. Every field fits its type
    // (`igemm_args`); the grid is `igemm_launch`'s (128-thread blocks, static shared memory
    // only); all buffers, the permuted copy's transpose too, are ordered on the
    // device's stream, which keeps `permuted` alive until the kernel has read it (the caching
    // allocator reuses a freed buffer only for work queued after this launch).
    unsafe { l.launch(cfg)? };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo(b: usize, c: usize, hw: usize, co: usize, k: usize) -> ConvGeometry {
        ConvGeometry {
            batch: b,
            c_in: c,
            h_in: hw,
            w_in: hw,
            c_out: co,
            k_h: k,
            k_w: k,
            h_out: hw,
            w_out: hw,
            padding: (k / 2, k / 2),
            stride: (1, 1),
            dilation: (1, 1),
        }
    }

    /// ResNet-50's 3x3 at batch 32: 784 position tiles by one channel tile, K = 576.
    #[test]
    fn resnet_3x3_launch_shape() {
        let g = geo(32, 64, 56, 64, 3);
        let hw = 56 * 56;
        let a = igemm_args(&g, [64 * hw, hw, 56, 1]).unwrap();
        assert_eq!((a.k, a.n, a.p), (576, 32 * hw as u32, hw as u32));
        let c = igemm_launch(&a);
        assert_eq!(c.grid_dim, (784, 1, 1));
        assert_eq!(c.block_dim, (128, 1, 1));
        // The VAE's 512 channels at 64x64: 32 x 8 tiles.
        let v = geo(1, 512, 64, 512, 3);
        let a = igemm_args(&v, [512 * 4096, 4096, 64, 1]).unwrap();
        assert_eq!(igemm_launch(&a).grid_dim, (32, 8, 1));
    }

    /// K and N must stay below 2^31, c_out within the grid, the output not empty.
    #[test]
    fn sizes_past_the_kernel_limits_get_no_args() {
        let s = [0, 0, 0, 1];
        assert!(igemm_args(&geo(1, 4, 8, 4, 3), s).is_some());
        let mut g = geo(1, 4, 8, 4, 3);
        g.c_in = (1 << 31) / 9 + 1;
        assert_eq!(igemm_args(&g, s), None);
        let mut g = geo(1 << 16, 4, 256, 4, 3);
        assert_eq!(igemm_args(&g, s), None);
        g.batch = (1 << 15) - 1;
        assert!(igemm_args(&g, s).is_some());
        let mut g = geo(1, 4, 8, 65535 * 64 + 1, 3);
        assert_eq!(igemm_args(&g, s), None);
        g.c_out = 65535 * 64;
        assert!(igemm_args(&g, s).is_some());
        g.c_out = 0;
        assert_eq!(igemm_args(&g, s), None);
        let mut g = geo(1, 4, 8, 4, 3);
        g.stride = (1, usize::MAX);
        assert_eq!(igemm_args(&g, s), None);
    }

    /// Half types only; taps outer for a multiple of 32 input channels, channels outer
    /// otherwise.
    #[test]
    fn the_kernel_follows_dtype_and_channels() {
        let name = |d, c_in| igemm_kernel(d, &geo(1, c_in, 8, 64, 3)).map(|k| (k.name, k.taps));
        assert_eq!(name(DType::F16, 3), Some(("conv_igemm_f16", false)));
        assert_eq!(name(DType::BF16, 48), Some(("conv_igemm_bf16", false)));
        assert_eq!(name(DType::F16, 64), Some(("conv_igemm_taps_f16", true)));
        assert_eq!(name(DType::BF16, 512), Some(("conv_igemm_taps_bf16", true)));
        for d in [DType::F32, DType::F64, DType::U8] {
            assert_eq!(name(d, 64), None);
        }
    }

    /// `ConvIgemmArgs` names its fields in conv_igemm.hip's order (the sizes are asserted on
    /// both sides; this keeps two fields of one type from trading places), and the kernel
    /// names are the ones the source defines.
    #[test]
    fn the_kernel_argument_matches_conv_igemm_hip() {
        let src = crate::launch::arg_layout::hip_source("conv_igemm.hip");
        let rust_fields = crate::launch::arg_layout::args_match_hip_struct(
            "conv_igemm.hip",
            "ConvIgemmArgs",
            &format!("{:?}", ConvIgemmArgs::default()),
        );
        assert_eq!(rust_fields.len(), 24);
        for (t, d) in [("__half", DType::F16), ("__nv_bfloat16", DType::BF16)] {
            for taps in [false, true] {
                let k = igemm_kernel_of(d, taps).unwrap();
                let line = format!("CI_KERNEL({t}, {}, {taps})", k.name);
                assert!(src.contains(&line), "{line}");
            }
        }
        for (n, v) in [
            ("CI_THREADS", THREADS as usize),
            ("CI_BM", BLOCK_CHANNELS),
            ("CI_BN", BLOCK_POSITIONS),
        ] {
            assert!(src.contains(&format!("#define {n} {v}\n")), "{n}");
        }
    }
}
