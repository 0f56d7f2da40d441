//! The host side of the convolutions' GEMM path ([`crate::launch::conv`]), arithmetic only:
//! which plan a convolution takes ([`plan`]: one GEMM from the input for a 1x1, else column
//! tiles bounded in bytes), the tiles' im2col arguments (`copy.hip`'s `Im2colArgs`) and rocBLAS
//! GEMM configurations (`tiles`, `gemm_config`), and the im2col launch shape. The tests
//! emulate every launch of a plan on the host (the kernel's and rocBLAS's documented
//! semantics) and check the result against the convolution's definition.

use rocm_safe::{DeviceRepr, GemmConfig, LaunchConfig, Transpose};

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

/// How [`crate::launch::conv::conv_gemm`] runs one convolution.
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
    /// `Tiled`'s shapes in f16/bf16 as [`crate::launch::conv_igemm`]'s implicit GEMM.
    Implicit,
}

impl ConvPlan {
    /// Elements of column workspace the plan needs of an element type (0 for `Direct`).
    pub fn workspace(&self, g: &ConvGeometry) -> usize {
        match *self {
            ConvPlan::Direct { .. } | ConvPlan::Implicit => 0,
            ConvPlan::Tiled { images, positions } => images * patch(g) * positions,
        }
    }
}

/// Row length of the column matrix: c_in * k_h * k_w (callers checked it fits).
pub(crate) fn patch(g: &ConvGeometry) -> usize {
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
pub(crate) struct Im2colArgs {
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
    pub(crate) rows: u32,
    pub(crate) cols: u32,
    p0: u32,
    unused: u32,
}

const _: () = assert!(std::mem::size_of::<Im2colArgs>() == 96);

// SAFETY: `Im2colArgs` is `#[repr(C)]` plain integers with no padding (96 bytes, asserted here
// and in copy.hip), so its bytes are exactly the kernel's `Im2colArgs` parameter.
unsafe impl DeviceRepr for Im2colArgs {}

/// The im2col kernel for elements of `size` bytes.
pub(crate) fn im2col_name(size: usize) -> Option<&'static str> {
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
pub(crate) fn im2col_launch(planes: usize, cols: usize) -> LaunchConfig {
    let gx = cols.div_ceil(BLOCK as usize).clamp(1, GRID_X);
    let gy = planes.clamp(1, GRID_Y);
    // Both fit u32: GRID_X and GRID_Y do.
    LaunchConfig {
        grid_dim: (gx as u32, gy as u32, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The rocBLAS GEMM of `g` over `m` output positions from an A of leading dimension `lda`
/// whose matrices lie `stride_a` apart, for `images` images. Column-major: C (m x c_out,
/// ldc = h_out * w_out, the NCHW output) = A (m x k) * B (k x c_out, ldb = k: the row-major
/// kernel, shared by the batch).
pub(crate) fn gemm_config(
    g: &ConvGeometry,
    (m, lda, stride_a): (usize, usize, usize),
    images: usize,
) -> GemmConfig {
    let positions = g.h_out * g.w_out;
    GemmConfig {
        trans_a: Transpose::No,
        trans_b: Transpose::No,
        m,
        n: g.c_out,
        k: patch(g),
        alpha: 1.0,
        beta: 0.0,
        lda,
        ldb: patch(g),
        ldc: positions,
        stride_a: if images > 1 { stride_a } else { 0 },
        stride_b: 0,
        stride_c: g.c_out * positions,
        batch: images,
    }
}

/// One tile of [`ConvPlan::Tiled`]: the im2col arguments, the tile's first input element
/// (past the layout's start offset), the (image, channel) planes it covers, the GEMM from the
/// workspace and the tile's first output element.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tile {
    /// The im2col kernel's arguments.
    pub(crate) args: Im2colArgs,
    /// The tile's first input element, past the layout's start offset.
    pub(crate) src_offset: usize,
    /// (image, channel) planes: the launch's rows are `planes * k_h * k_w`.
    pub(crate) planes: usize,
    /// The GEMM from the workspace into the output.
    pub(crate) gemm: GemmConfig,
    /// The tile's first output element.
    pub(crate) out_offset: usize,
}

/// The tiles of `Tiled { images, positions: per_tile }` for `g` over an input with `strides`,
/// images first, each image's positions in order. `plan` proved every field fits its type.
pub(crate) fn tiles(
    g: &ConvGeometry,
    strides: [usize; 4],
    images: usize,
    per_tile: usize,
) -> Vec<Tile> {
    let positions = g.h_out * g.w_out;
    let k = patch(g);
    let mut out = Vec::new();
    for i0 in (0..g.batch).step_by(images.max(1)) {
        let ni = images.min(g.batch - i0);
        for p0 in (0..positions).step_by(per_tile.max(1)) {
            let np = per_tile.min(positions - p0);
            let args = Im2colArgs {
                s_b: strides[0] as u64,
                s_c: strides[1] as u64,
                s_h: strides[2] as u64,
                s_w: strides[3] as u64,
                // `plan` proved these fit u32 (rows: images * k <= u32::MAX; p0 + np <=
                // positions <= i32::MAX).
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
                rows: (ni * k) as u32,
                cols: np as u32,
                p0: p0 as u32,
                unused: 0,
            };
            out.push(Tile {
                args,
                src_offset: i0 * strides[0],
                planes: ni * g.c_in,
                gemm: gemm_config(g, (np, np, k * np), ni),
                out_offset: i0 * g.c_out * positions + p0,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Some(Tiled { images, positions })`.
    fn tiled(images: usize, positions: usize) -> Option<ConvPlan> {
        Some(ConvPlan::Tiled { images, positions })
    }

    /// A 32 MiB budget (the expectations below were worked out for it).
    const MIB32: usize = 32 << 20;

    /// (b, c_in, hw x hw) -> c_out with a k x k kernel, padding `pad`, stride `s`.
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
        // Strided, padded, channels last (pixels not dense in a channel): columns.
        let tiled_plan = |g: &ConvGeometry, s: [usize; 4]| {
            matches!(plan(g, s, 2, MIB32), Some(ConvPlan::Tiled { .. }))
        };
        let (s2, padded) = (geo(32, 256, 56, 64, 1, 0, 2), geo(1, 8, 10, 4, 1, 1, 1));
        assert!(tiled_plan(&s2, dense(&s2)) && tiled_plan(&padded, dense(&padded)));
        assert!(tiled_plan(&g, [3136 * 256, 1, 56 * 256, 256]));
    }

    /// Tiles hold as many whole images as fit the budget, or runs of positions of one image
    /// when one does not, and never exceed the budget.
    #[test]
    fn tiles_stay_inside_the_workspace_budget() {
        // ResNet-50 3x3, batch 32, f16: 576 x 3136 x 2 bytes = 3.6 MB per image, 9 fit a
        // tile: 4 tiles of 8.
        let g = geo(32, 64, 56, 64, 3, 1, 1);
        let p = plan(&g, dense(&g), 2, MIB32).unwrap();
        assert_eq!(Some(p), tiled(8, 3136));
        assert!(p.workspace(&g) * 2 <= MIB32);
        // 5 images at 2 a tile stay 2 a tile (3 tiles: 2, 2, 1).
        let g5 = geo(5, 64, 56, 64, 3, 1, 1);
        assert_eq!(
            plan(&g5, dense(&g5), 2, 2 * 576 * 3136 * 2 + 1),
            tiled(2, 3136)
        );
        // At the default 16 MiB: 4 a tile, 8 tiles.
        assert_eq!(plan(&g, dense(&g), 2, WORKSPACE_BYTES), tiled(4, 3136));
        // Batch 1 takes one tile.
        let g1 = geo(1, 64, 56, 64, 3, 1, 1);
        assert_eq!(plan(&g1, dense(&g1), 2, MIB32), tiled(1, 3136));
        // The VAE's 512-channel 3x3 at 64x64 in f16: 4608 x 4096 x 2 = 37.7 MB, over the
        // budget (at most 3584 positions a tile): 2 tiles of 2048.
        let vae = geo(1, 512, 64, 64 * 8, 3, 1, 1);
        let p = plan(&vae, dense(&vae), 2, MIB32).unwrap();
        assert_eq!(Some(p), tiled(1, 2048));
        assert!(p.workspace(&vae) * 2 <= MIB32);
        // At the default 16 MiB: at most 1792 positions a tile, so 3 tiles of 1408.
        assert_eq!(plan(&vae, dense(&vae), 2, WORKSPACE_BYTES), tiled(1, 1408));
        // 100 positions at most 64 a tile: 2 tiles, 50 rounded up to 64 (64 and 36).
        let small = geo(1, 3, 10, 4, 3, 1, 1);
        let row = 27 * 4;
        let p = plan(&small, dense(&small), 4, row * 64).unwrap();
        assert_eq!(Some(p), tiled(1, 64));
        // In f32 at 512x512 (a VAE's full-resolution 128-channel layer): still bounded.
        let big = geo(1, 128, 512, 128, 3, 1, 1);
        let p = plan(&big, dense(&big), 4, MIB32).unwrap();
        assert!(p.workspace(&big) * 4 <= MIB32, "{p:?}");
        // A row longer than the budget still gets 64 positions per tile.
        let huge = geo(1, 1 << 20, 8, 1, 3, 1, 1);
        assert_eq!(plan(&huge, dense(&huge), 4, MIB32), tiled(1, 64));
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

    /// Small pseudo-random values (xorshift), exact in every float type.
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % 17) as f64 - 8.0) / 8.0
            })
            .collect()
    }

    /// The convolution from its definition, the input read at `off` + its strides.
    fn naive(
        g: &ConvGeometry,
        x: &[f64],
        (strides, off): ([usize; 4], usize),
        w: &[f64],
    ) -> Vec<f64> {
        let mut out = vec![0.0; g.batch * g.c_out * g.h_out * g.w_out];
        for b in 0..g.batch {
            for co in 0..g.c_out {
                for oy in 0..g.h_out {
                    for ox in 0..g.w_out {
                        let mut acc = 0.0;
                        for ci in 0..g.c_in {
                            for ky in 0..g.k_h {
                                for kx in 0..g.k_w {
                                    let y = (oy * g.stride.0 + ky * g.dilation.0) as isize
                                        - g.padding.0 as isize;
                                    let xx = (ox * g.stride.1 + kx * g.dilation.1) as isize
                                        - g.padding.1 as isize;
                                    if y < 0
                                        || xx < 0
                                        || y >= g.h_in as isize
                                        || xx >= g.w_in as isize
                                    {
                                        continue;
                                    }
                                    let i = off
                                        + b * strides[0]
                                        + ci * strides[1]
                                        + y as usize * strides[2]
                                        + xx as usize * strides[3];
                                    acc += x[i] * w[((co * g.c_in + ci) * g.k_h + ky) * g.k_w + kx];
                                }
                            }
                        }
                        out[((b * g.c_out + co) * g.h_out + oy) * g.w_out + ox] = acc;
                    }
                }
            }
        }
        out
    }

    /// What copy.hip's im2col_rows writes for `a` (its specification in the kernel's header),
    /// `src` starting at the tile's first image.
    fn emulate_im2col(a: &Im2colArgs, src: &[f64], ws: &mut [f64]) {
        let (kh, kw, cols) = (a.k_h as usize, a.k_w as usize, a.cols as usize);
        for r in 0..a.rows as usize {
            let (plane, tap) = (r / (kh * kw), r % (kh * kw));
            let (img, ci) = (plane / a.c_in as usize, plane % a.c_in as usize);
            let (ky, kx) = (tap / kw, tap % kw);
            for i in 0..cols {
                let p = a.p0 as usize + i;
                let (oy, ox) = (p / a.w_out as usize, p % a.w_out as usize);
                let y = (oy * a.stride_h as usize + ky * a.dil_h as usize) as i64 - a.pad_h as i64;
                let x = (ox * a.stride_w as usize + kx * a.dil_w as usize) as i64 - a.pad_w as i64;
                let inside = y >= 0 && x >= 0 && y < a.h_in as i64 && x < a.w_in as i64;
                ws[r * cols + i] = if inside {
                    src[img * a.s_b as usize
                        + ci * a.s_c as usize
                        + y as usize * a.s_h as usize
                        + x as usize * a.s_w as usize]
                } else {
                    0.0
                };
            }
        }
    }

    /// rocBLAS's column-major strided-batched GEMM without transposes, after the same checks
    /// `gemm_strided_batched` makes.
    fn emulate_gemm(cfg: &GemmConfig, a: &[f64], b: &[f64], c: &mut [f64]) {
        cfg.validate(a.len(), b.len(), c.len()).unwrap();
        assert_eq!((cfg.trans_a, cfg.trans_b), (Transpose::No, Transpose::No));
        for bi in 0..cfg.batch {
            for j in 0..cfg.n {
                for i in 0..cfg.m {
                    let mut acc = 0.0;
                    for l in 0..cfg.k {
                        acc += a[bi * cfg.stride_a + i + l * cfg.lda]
                            * b[bi * cfg.stride_b + l + j * cfg.ldb];
                    }
                    c[bi * cfg.stride_c + i + j * cfg.ldc] = acc;
                }
            }
        }
    }

    /// `conv_gemm`'s launches for `g` emulated on the host (the plan, then the direct GEMM or
    /// every tile's im2col and GEMM), against the definition; the plan taken.
    fn check(
        g: &ConvGeometry,
        (strides, off, len): ([usize; 4], usize, usize),
        budget: usize,
    ) -> ConvPlan {
        let x = values(len, 7 + budget as u64);
        let w = values(g.c_out * patch(g), 11);
        let p = plan(g, strides, 4, budget).unwrap();
        let mut out = vec![f64::NAN; g.batch * g.c_out * g.h_out * g.w_out];
        match p {
            ConvPlan::Direct { ld } => {
                let cfg = gemm_config(g, (g.h_out * g.w_out, ld, strides[0]), g.batch);
                emulate_gemm(&cfg, &x[off..], &w, &mut out);
            }
            ConvPlan::Tiled { images, positions } => {
                let mut ws = vec![f64::NAN; p.workspace(g)];
                for t in tiles(g, strides, images, positions) {
                    assert_eq!(t.args.rows as usize, t.planes * g.k_h * g.k_w);
                    assert!((t.args.rows * t.args.cols) as usize <= ws.len());
                    emulate_im2col(&t.args, &x[off + t.src_offset..], &mut ws);
                    emulate_gemm(&t.gemm, &ws, &w, &mut out[t.out_offset..]);
                }
            }
            ConvPlan::Implicit => unreachable!("plan() never returns Implicit"),
        }
        let want = naive(g, &x, (strides, off), &w);
        for (i, (a, b)) in out.iter().zip(&want).enumerate() {
            assert!((a - b).abs() < 1e-9, "{g:?} {p:?}: element {i}: {a} vs {b}");
        }
        p
    }

    /// Every plan's launches, emulated on the host, compute the convolution: tiles of several
    /// images, of one, of runs of positions with a partial last run; strides, padding and
    /// dilation differing along h and w; inputs at an offset, as a channel slice and channels
    /// last; the direct 1x1; conv1d as h = 1.
    #[test]
    fn the_launches_compute_the_convolution() {
        let mut g = geo(3, 2, 7, 3, 3, 1, 1);
        g.w_in = 9;
        g.w_out = 9;
        let d = dense(&g);
        let n = 3 * 2 * 7 * 9;
        let image = 4 * 18 * 63;
        assert_eq!(check(&g, (d, 0, n), 1 << 20), tiled(3, 63).unwrap());
        assert_eq!(check(&g, (d, 0, n), 2 * image), tiled(2, 63).unwrap());
        assert_eq!(check(&g, (d, 5, n + 5), image), tiled(1, 63).unwrap());
        // 110 positions in runs of 64: 64 and 46.
        let mut g2 = geo(2, 3, 10, 2, 3, 1, 1);
        g2.w_in = 11;
        g2.w_out = 11;
        let n2 = 2 * 3 * 110;
        assert_eq!(check(&g2, (dense(&g2), 0, n2), 1), tiled(1, 64).unwrap());
        // Every parameter different along h and w.
        let r = ConvGeometry {
            batch: 2,
            c_in: 3,
            h_in: 13,
            w_in: 11,
            c_out: 4,
            k_h: 3,
            k_w: 2,
            h_out: (13 + 2 - 4 - 1) / 2 + 1,
            w_out: (11 + 4 - 1 - 1) + 1,
            padding: (1, 2),
            stride: (2, 1),
            dilation: (2, 1),
        };
        check(&r, (dense(&r), 0, 2 * 3 * 13 * 11), 1 << 20);
        check(&r, (dense(&r), 0, 2 * 3 * 13 * 11), 1);
        // Channels 1..=3 of a (2, 6, 13, 11) tensor, and a channels-last (2, 13, 11, 3) one.
        check(&r, ([6 * 143, 143, 11, 1], 143, 2 * 6 * 143), 1 << 20);
        check(&r, ([143 * 3, 1, 11 * 3, 3], 0, 2 * 143 * 3), 1 << 20);
        // The direct 1x1, dense and as a channel slice (ld 63 * 2).
        let mut one = geo(3, 4, 7, 5, 1, 0, 1);
        one.w_in = 9;
        one.w_out = 9;
        assert_eq!(
            check(&one, (dense(&one), 0, 3 * 4 * 63), 1),
            ConvPlan::Direct { ld: 63 }
        );
        assert_eq!(
            check(&one, ([8 * 126, 126, 9, 1], 126, 3 * 8 * 126), 1),
            ConvPlan::Direct { ld: 126 }
        );
        // conv1d: (b, c, 1, len) with a 1 x 3 kernel, padding (0, 1), stride 2.
        let l = ConvGeometry {
            batch: 2,
            c_in: 5,
            h_in: 1,
            w_in: 40,
            c_out: 3,
            k_h: 1,
            k_w: 3,
            h_out: 1,
            w_out: (40 + 2 - 2 - 1) / 2 + 1,
            padding: (0, 1),
            stride: (1, 2),
            dilation: (1, 1),
        };
        check(&l, ([200, 40, 0, 1], 0, 400), 1 << 20);
        check(&l, ([200, 40, 0, 1], 0, 400), 1);
    }

    /// `Im2colArgs` names its fields in copy.hip's order (the sizes are asserted on both
    /// sides; this keeps two fields of one type from trading places).
    #[test]
    fn the_kernel_argument_matches_copy_hip() {
        let rust_fields = crate::launch::arg_layout::args_match_hip_struct(
            "copy.hip",
            "Im2colArgs",
            &format!("{:?}", Im2colArgs::default()),
        );
        assert_eq!(rust_fields.len(), 20);
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
