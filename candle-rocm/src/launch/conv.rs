//! The convolutions' GEMM path over typed buffers: a forward convolution (conv2d, and conv1d
//! as h = 1) as rocBLAS GEMMs of the kernel by the input's patches, writing the NCHW output
//! directly, with f16/bf16 accumulated in f32 (rocBLAS's `gemm_ex`, see
//! [`rocm_safe::GemmType`]).
//!
//! - A 1x1, stride-1, unpadded convolution over an input whose pixels are dense in each
//!   channel needs no patches: `out[b] (c_out x hw) = W (c_out x c_in) * x[b] (c_in x hw)` is
//!   one strided-batched GEMM over the input as it lies ([`ConvPlan::Direct`]).
//! - Every other shape runs in tiles ([`ConvPlan::Tiled`]): `copy.hip`'s `im2col_rows_b<W>`
//!   writes the column matrix of a few images (or, for one large image, of a range of its
//!   output positions) into a workspace of at most [`crate::settings::conv_tile_bytes`] (16 MiB
//!   by default, [`WORKSPACE_BYTES`]), one row per (image,
//!   channel, tap) and one column per output position, and one strided-batched GEMM
//!   multiplies the kernel (c_out x c_in k_h k_w) by it into the tile's place in the output.
//!   The workspace is reused by every tile (the stream orders them), so a batch-32 ResNet layer
//!   never materialises its whole 100+ MB column matrix, and the tile stays in the GPU's L2
//!   or last-level cache between the two launches where that is large enough.
//!
//! [`plan`] is host arithmetic (tested here); [`conv_gemm`] checks the buffers and queues the
//! launches. Shapes past the kernel's 32-bit sizes or rocBLAS's `i32` dims get `None` from
//! [`plan`], and the caller runs its other path.

use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{
    DeviceBuffer, DevicePtrArg, DeviceRepr, GemmConfig, GemmType, LaunchConfig, Transpose,
};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::layout::{checked_product, checked_view, invalid};

/// The default bound on the bytes of column matrix one tile writes: 16 MiB, well inside an
/// H100's 50 MB L2 and an MI300's 256 MB last-level cache, so a tile written by the im2col is
/// read back by the GEMM from cache (and the next tile overwrites the same lines), and a small
/// fraction of any GPU's memory. [`crate::settings::conv_tile_bytes`] is the value in force.
pub const WORKSPACE_BYTES: usize = crate::settings::CONV_TILE_MIB_DEFAULT << 20;

/// Threads per block of the im2col kernel.
const BLOCK: u32 = 256;
/// Most blocks along the columns (x) and the planes (y); the kernel loops over the rest. 64 *
/// 65535 blocks of 256 threads stay below 2^32 work items (AMD's dispatch limit).
const GRID_X: usize = 64;
/// See [`GRID_X`]; 65535 is CUDA's and HIP's limit on gridDim.y.
const GRID_Y: usize = 65535;

/// The geometry of one forward convolution: input (batch, c_in, h_in, w_in), kernel (c_out,
/// c_in, k_h, k_w), output (batch, c_out, h_out, w_out); conv1d is h = 1 with a 1 x k kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    /// Images.
    pub batch: usize,
    /// Input channels.
    pub c_in: usize,
    /// Input height.
    pub h_in: usize,
    /// Input width.
    pub w_in: usize,
    /// Output channels.
    pub c_out: usize,
    /// Kernel height.
    pub k_h: usize,
    /// Kernel width.
    pub k_w: usize,
    /// Output height (computed by the caller from the others).
    pub h_out: usize,
    /// Output width.
    pub w_out: usize,
    /// Padding (h, w).
    pub padding: (usize, usize),
    /// Stride (h, w).
    pub stride: (usize, usize),
    /// Dilation (h, w).
    pub dilation: (usize, usize),
}

/// How [`conv_gemm`] runs one convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPlan {
    /// One strided-batched GEMM from the input as it lies (1x1, stride 1, no padding, pixels
    /// dense in each channel); `ld` is the input's channel stride.
    Direct {
        /// The input's channel stride (rocBLAS's lda).
        ld: usize,
    },
    /// Column tiles of `images` images by `positions` output positions.
    Tiled {
        /// Images per tile.
        images: usize,
        /// Output positions per tile (all of them when `images` > 1).
        positions: usize,
    },
}

impl ConvPlan {
    /// Elements of column workspace the plan needs of an element type (0 for `Direct`).
    pub fn workspace(&self, g: &ConvGeometry) -> usize {
        match *self {
            ConvPlan::Direct { .. } => 0,
            ConvPlan::Tiled { images, positions } => images * patch(g) * positions,
        }
    }
}

/// Row length of the column matrix: c_in * k_h * k_w (callers checked it fits).
fn patch(g: &ConvGeometry) -> usize {
    g.c_in * g.k_h * g.k_w
}

/// The plan for geometry `g` over an input with strides `strides` (image, channel, row,
/// column) and elements of `elem` bytes, with tiles of at most `budget` bytes; `None` when a
/// size passes the kernel's `u32` or rocBLAS's `i32` limits (or the output is empty).
pub fn plan(g: &ConvGeometry, strides: [usize; 4], elem: usize, budget: usize) -> Option<ConvPlan> {
    let i32_max = i32::MAX as usize;
    let positions = g.h_out.checked_mul(g.w_out)?;
    let patch = g.c_in.checked_mul(g.k_h)?.checked_mul(g.k_w)?;
    let fits_u32 = [
        g.c_in,
        g.h_in,
        g.w_in,
        g.w_out,
        g.k_h,
        g.k_w,
        g.padding.0,
        g.padding.1,
        g.stride.0,
        g.stride.1,
        g.dilation.0,
        g.dilation.1,
    ]
    .iter()
    .all(|&v| v <= u32::MAX as usize);
    let fits_i32 = [positions, patch, g.c_out, g.batch]
        .iter()
        .all(|&v| v <= i32_max);
    // Strides reach rocBLAS as i64 and the kernel as u64.
    if !fits_u32 || !fits_i32 || positions == 0 || g.c_out == 0 || g.batch == 0 || patch == 0 {
        return None;
    }
    g.batch.checked_mul(g.c_out)?.checked_mul(positions)?;
    let [_, s_c, s_h, s_w] = strides;
    let dense_pixels = s_w == 1 && (g.h_in == 1 || s_h == g.w_in);
    if g.k_h == 1
        && g.k_w == 1
        && g.stride == (1, 1)
        && g.padding == (0, 0)
        && dense_pixels
        && s_c >= positions
        && s_c <= i32_max
        && strides[0] <= i64::MAX as usize
    {
        return Some(ConvPlan::Direct { ld: s_c });
    }
    let row_bytes = patch.checked_mul(elem.max(1))?;
    let image_bytes = row_bytes.checked_mul(positions)?;
    // Rows of a tile (images * patch) must fit the kernel's u32.
    let max_images = (u32::MAX as usize / patch).min(i32_max);
    if max_images == 0 {
        return None;
    }
    if image_bytes <= budget {
        // As many images as fit, spread evenly over the tiles (32 at 9 a tile: 4 tiles of 8).
        let most = (budget / image_bytes).clamp(1, g.batch).min(max_images);
        let images = g.batch.div_ceil(g.batch.div_ceil(most));
        return Some(ConvPlan::Tiled { images, positions });
    }
    // One image per tile, its output positions in runs of a multiple of 64 (at least 64),
    // spread evenly (4096 at most 3584 a tile: 2 tiles of 2048, not 3584 and 512).
    let most = (budget / row_bytes / 64)
        .max(1)
        .saturating_mul(64)
        .min(positions);
    let even = positions.div_ceil(positions.div_ceil(most));
    let per_tile = even.div_ceil(64).saturating_mul(64).min(most);
    Some(ConvPlan::Tiled {
        images: 1,
        positions: per_tile,
    })
}

/// The im2col kernel parameter (`Im2colArgs` in copy.hip): 64-bit strides, then 32-bit fields,
/// no padding (96 bytes, asserted here and there).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Im2colArgs {
    s_b: u64,
    s_c: u64,
    s_h: u64,
    s_w: u64,
    c_in: u32,
    h_in: u32,
    w_in: u32,
    w_out: u32,
    k_h: u32,
    k_w: u32,
    stride_h: u32,
    stride_w: u32,
    pad_h: u32,
    pad_w: u32,
    dil_h: u32,
    dil_w: u32,
    rows: u32,
    cols: u32,
    p0: u32,
    unused: u32,
}

const _: () = assert!(std::mem::size_of::<Im2colArgs>() == 96);

// SAFETY: `Im2colArgs` is `#[repr(C)]` plain integers with no padding (96 bytes, asserted here
// and in copy.hip), so its bytes are exactly the kernel's `Im2colArgs` parameter.
unsafe impl DeviceRepr for Im2colArgs {}

/// The im2col kernel for elements of `size` bytes.
fn im2col_name(size: usize) -> Option<&'static str> {
    match size {
        1 => Some("im2col_rows_b1"),
        2 => Some("im2col_rows_b2"),
        4 => Some("im2col_rows_b4"),
        8 => Some("im2col_rows_b8"),
        _ => None,
    }
}

/// The kernel's launch shape for a tile of `planes` (image, channel) planes (each k_h * k_w
/// rows) and `cols` columns: a thread writes one column's taps of one plane.
fn im2col_launch(planes: usize, cols: usize) -> LaunchConfig {
    let gx = cols.div_ceil(BLOCK as usize).clamp(1, GRID_X);
    let gy = planes.clamp(1, GRID_Y);
    // Both fit u32: GRID_X and GRID_Y do.
    LaunchConfig {
        grid_dim: (gx as u32, gy as u32, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Runs the convolution `g` of `x` (4-D layout `x_l`, (batch, c_in, h_in, w_in)) with the
/// contiguous kernel `w[w_off..]` (c_out, c_in, k_h, k_w) on the GEMM path: the new NCHW
/// output, or `None` when [`plan`] refuses the shape. `budget` bounds the workspace in bytes
/// (callers pass [`crate::settings::conv_tile_bytes`]).
pub fn conv_gemm<T: GemmType + RocmDType>(
    dev: &RocmDevice,
    g: &ConvGeometry,
    (x, x_l): (&DeviceBuffer<T>, &Layout),
    (w, w_off): (&DeviceBuffer<T>, usize),
    budget: usize,
) -> Result<Option<(DeviceBuffer<T>, ConvPlan)>, BackendError> {
    const OP: &str = "conv (GEMM path)";
    if x_l.dims() != [g.batch, g.c_in, g.h_in, g.w_in] {
        return Err(invalid(
            OP,
            format_args!("input dims {:?} do not match {g:?}", x_l.dims()),
        ));
    }
    let st = x_l.stride();
    let strides = [st[0], st[1], st[2], st[3]];
    let Some(p) = plan(g, strides, std::mem::size_of::<T>(), budget) else {
        return Ok(None);
    };
    let positions = g.h_out * g.w_out;
    let k = patch(g);
    let out_el = checked_product(OP, "output element count", &[g.batch, g.c_out, positions])?;
    let (xb, x) = (x, checked_view(OP, x, x_l)?);
    let w_end = w_off
        .checked_add(g.c_out * k)
        .ok_or_else(|| invalid(OP, "the kernel's offset overflows"))?;
    let w = w.slice(w_off..w_end)?;
    let mut out = dev.alloc::<T>(out_el)?;
    // rocBLAS, column-major: C (positions x c_out, ldc = positions) = A (positions x k) * B
    // (k x c_out, ldb = k, the row-major kernel), batched over images; see the module doc.
    let gemm = |m: usize, lda: usize, stride_a: usize, images: usize| GemmConfig {
        trans_a: Transpose::No,
        trans_b: Transpose::No,
        m,
        n: g.c_out,
        k,
        alpha: 1.0,
        beta: 0.0,
        lda,
        ldb: k,
        ldc: positions,
        stride_a: if images > 1 { stride_a } else { 0 },
        stride_b: 0,
        stride_c: g.c_out * positions,
        batch: images,
    };
    match p {
        ConvPlan::Direct { ld } => {
            let cfg = gemm(positions, ld, strides[0], g.batch);
            // `gemm_strided_batched` checks every matrix of the batch against its operand.
            dev.blas(|h| h.gemm_strided_batched(&cfg, &x, &w, &mut out))?;
        }
        ConvPlan::Tiled {
            images,
            positions: per_tile,
        } => {
            let name = im2col_name(std::mem::size_of::<T>())
                .ok_or_else(|| invalid(OP, "elements of this size have no im2col kernel"))?;
            let f = dev.function_static(Module::Copy, name)?;
            let ws = dev.alloc::<T>(p.workspace(g))?;
            for i0 in (0..g.batch).step_by(images) {
                let ni = images.min(g.batch - i0);
                for p0 in (0..positions).step_by(per_tile) {
                    let np = per_tile.min(positions - p0);
                    let rows = ni * k;
                    let args = Im2colArgs {
                        s_b: strides[0] as u64,
                        s_c: strides[1] as u64,
                        s_h: strides[2] as u64,
                        s_w: strides[3] as u64,
                        // `plan` proved these fit u32 (rows: images * k <= u32::MAX; p0 + np
                        // <= positions <= i32::MAX).
                        c_in: g.c_in as u32,
                        h_in: g.h_in as u32,
                        w_in: g.w_in as u32,
                        w_out: g.w_out as u32,
                        k_h: g.k_h as u32,
                        k_w: g.k_w as u32,
                        stride_h: g.stride.0 as u32,
                        stride_w: g.stride.1 as u32,
                        pad_h: g.padding.0 as u32,
                        pad_w: g.padding.1 as u32,
                        dil_h: g.dilation.0 as u32,
                        dil_w: g.dilation.1 as u32,
                        rows: rows as u32,
                        cols: np as u32,
                        p0: p0 as u32,
                        unused: 0,
                    };
                    // The tile's first image; `checked_view` proved the layout's last element
                    // lies inside the buffer, and image i0 < batch starts before it.
                    let src = xb.slice(x_l.start_offset() + i0 * strides[0]..)?;
                    let (psrc, pws) = (DevicePtrArg::of(&src), DevicePtrArg::of(&ws));
                    let mut l = dev.stream().launch_builder(&f);
                    l.arg(&args).arg(&psrc).arg(&pws);
                    if rows * np > ws.len() {
                        return Err(invalid(OP, "the tile is larger than its workspace"));
                    }
                    // SAFETY: im2col_rows_b<W>(Im2colArgs a, const T* src, T* dst) with W =
                    // size_of::<T>(): it writes dst[r * np + i] for r < rows, i < np, and
                    // rows * np <= ws.len() (checked above); rows = ni * c_in * k_h * k_w, a
                    // whole number of planes as the kernel takes it. It reads src at
                    // img * s_b + c * s_c + y * s_h + x * s_w for img < ni (i0 + ni <= batch),
                    // c < c_in, y < h_in, x < w_in only (positions outside the input are zeros,
                    // not reads): elements of the input layout, which `checked_view` proved lie
                    // inside the buffer. Every field fits its type (`plan`); `ws` is ours alone
                    // and all three are ordered on the device's stream.
                    unsafe { l.launch(im2col_launch(ni * g.c_in, np))? };
                    let cfg = gemm(np, np, k * np, ni);
                    let off = i0 * g.c_out * positions + p0;
                    let mut c = out.slice_mut(off..)?;
                    dev.blas(|h| h.gemm_strided_batched(&cfg, &ws, &w, &mut c))?;
                }
            }
        }
    }
    Ok(Some((out, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 32 MiB budget (the expectations below were worked out for it).
    const MIB32: usize = 32 << 20;

    fn geo(
        b: usize,
        c: usize,
        hw: usize,
        co: usize,
        k: usize,
        pad: usize,
        s: usize,
    ) -> ConvGeometry {
        let out = (hw + 2 * pad - k) / s + 1;
        ConvGeometry {
            batch: b,
            c_in: c,
            h_in: hw,
            w_in: hw,
            c_out: co,
            k_h: k,
            k_w: k,
            h_out: out,
            w_out: out,
            padding: (pad, pad),
            stride: (s, s),
            dilation: (1, 1),
        }
    }

    fn dense(g: &ConvGeometry) -> [usize; 4] {
        let hw = g.h_in * g.w_in;
        [g.c_in * hw, hw, g.w_in, 1]
    }

    /// ResNet-50's 1x1 runs as one GEMM from the input; strided, padded or channels-last 1x1s
    /// and every kxk run in tiles.
    #[test]
    fn one_by_one_convolutions_need_no_columns() {
        let g = geo(32, 256, 56, 64, 1, 0, 1);
        assert_eq!(
            plan(&g, dense(&g), 2, MIB32),
            Some(ConvPlan::Direct { ld: 3136 })
        );
        // A channel slice of a grouped convolution keeps its larger channel stride.
        let sliced = [512 * 3136, 3136, 56, 1];
        assert_eq!(
            plan(&g, sliced, 2, MIB32),
            Some(ConvPlan::Direct { ld: 3136 })
        );
        let s2 = geo(32, 256, 56, 64, 1, 0, 2);
        assert!(matches!(
            plan(&s2, dense(&s2), 2, MIB32),
            Some(ConvPlan::Tiled { .. })
        ));
        let padded = geo(1, 8, 10, 4, 1, 1, 1);
        assert!(matches!(
            plan(&padded, dense(&padded), 4, MIB32),
            Some(ConvPlan::Tiled { .. })
        ));
        // Channels last: pixels are not dense in a channel.
        let nhwc = [3136 * 256, 1, 56 * 256, 256];
        assert!(matches!(
            plan(&g, nhwc, 2, MIB32),
            Some(ConvPlan::Tiled { .. })
        ));
    }

    /// Tiles hold as many whole images as fit the budget, or runs of positions of one image
    /// when one does not, and never exceed the budget.
    #[test]
    fn tiles_stay_inside_the_workspace_budget() {
        // ResNet-50 3x3, batch 32, f16: 576 x 3136 x 2 bytes = 3.6 MB per image, 9 fit a
        // tile: 4 tiles of 8.
        let g = geo(32, 64, 56, 64, 3, 1, 1);
        let p = plan(&g, dense(&g), 2, MIB32).unwrap();
        assert_eq!(
            p,
            ConvPlan::Tiled {
                images: 8,
                positions: 3136
            }
        );
        assert!(p.workspace(&g) * 2 <= MIB32);
        // 5 images at 2 a tile stay 2 a tile (3 tiles: 2, 2, 1).
        let g5 = geo(5, 64, 56, 64, 3, 1, 1);
        assert_eq!(
            plan(&g5, dense(&g5), 2, 2 * 576 * 3136 * 2 + 1),
            Some(ConvPlan::Tiled {
                images: 2,
                positions: 3136
            })
        );
        // At the default 16 MiB: 4 a tile, 8 tiles.
        assert_eq!(
            plan(&g, dense(&g), 2, WORKSPACE_BYTES),
            Some(ConvPlan::Tiled {
                images: 4,
                positions: 3136
            })
        );
        // Batch 1 takes one tile.
        let g1 = geo(1, 64, 56, 64, 3, 1, 1);
        assert_eq!(
            plan(&g1, dense(&g1), 2, MIB32),
            Some(ConvPlan::Tiled {
                images: 1,
                positions: 3136
            })
        );
        // The VAE's 512-channel 3x3 at 64x64 in f16: 4608 x 4096 x 2 = 37.7 MB, over the
        // budget (at most 3584 positions a tile): 2 tiles of 2048.
        let vae = geo(1, 512, 64, 64 * 8, 3, 1, 1);
        let p = plan(&vae, dense(&vae), 2, MIB32).unwrap();
        assert_eq!(
            p,
            ConvPlan::Tiled {
                images: 1,
                positions: 2048
            }
        );
        assert!(p.workspace(&vae) * 2 <= MIB32);
        // At the default 16 MiB: at most 1792 positions a tile, so 3 tiles of 1408.
        assert_eq!(
            plan(&vae, dense(&vae), 2, WORKSPACE_BYTES),
            Some(ConvPlan::Tiled {
                images: 1,
                positions: 1408
            })
        );
        // 100 positions at most 64 a tile: 2 tiles, 50 rounded up to 64 (64 and 36).
        let small = geo(1, 3, 10, 4, 3, 1, 1);
        let row = 27 * 4;
        let p = plan(&small, dense(&small), 4, row * 64).unwrap();
        assert_eq!(
            p,
            ConvPlan::Tiled {
                images: 1,
                positions: 64
            }
        );
        // In f32 at 512x512 (a VAE's full-resolution 128-channel layer): still bounded.
        let big = geo(1, 128, 512, 128, 3, 1, 1);
        let p = plan(&big, dense(&big), 4, MIB32).unwrap();
        assert!(p.workspace(&big) * 4 <= MIB32, "{p:?}");
        // A row longer than the budget still gets 64 positions per tile.
        let huge = geo(1, 1 << 20, 8, 1, 3, 1, 1);
        assert_eq!(
            plan(&huge, dense(&huge), 4, MIB32),
            Some(ConvPlan::Tiled {
                images: 1,
                positions: 64
            })
        );
    }

    /// Sizes past the kernel's or rocBLAS's limits, and empty outputs, get no plan.
    #[test]
    fn sizes_past_the_limits_get_no_plan() {
        let mut g = geo(1, 4, 8, 4, 3, 1, 1);
        let s = dense(&g);
        assert!(plan(&g, s, 4, MIB32).is_some());
        g.c_out = 0;
        assert_eq!(plan(&g, s, 4, MIB32), None);
        g.c_out = 1 << 31;
        assert_eq!(plan(&g, s, 4, MIB32), None);
        g.c_out = 4;
        g.c_in = 1 << 30;
        // c_in * 9 taps passes i32.
        assert_eq!(plan(&g, s, 4, MIB32), None);
        g.c_in = 4;
        g.w_out = usize::MAX;
        assert_eq!(plan(&g, s, 4, MIB32), None);
    }

    #[test]
    fn launch_shapes_cover_the_tile_within_the_grid_limits() {
        // 8 images of 64 channels at 56x56.
        let c = im2col_launch(512, 3136);
        assert_eq!(c.grid_dim, (13, 512, 1));
        let c = im2col_launch(1 << 20, 1 << 20);
        assert_eq!(c.grid_dim, (64, 65535, 1));
        let work = c.grid_dim.0 as u64 * c.grid_dim.1 as u64 * BLOCK as u64;
        assert!(work < 1 << 32);
        for size in [1, 2, 4, 8] {
            assert!(im2col_name(size).is_some());
        }
        assert_eq!(im2col_name(16), None);
    }
}
