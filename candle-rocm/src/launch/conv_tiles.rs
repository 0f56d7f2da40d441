//! The tiles of the convolutions' GEMM path ([`crate::launch::conv`]), arithmetic only: for a
//! `Tiled` or `Stacked` plan of [`crate::launch::conv_plan`], each tile's im2col arguments
//! (`copy.hip`'s `Im2colArgs`) and rocBLAS GEMM configuration (`tiles`), and the im2col
//! launch shape. The tests emulate every launch of a plan on the host (the kernel's and
//! rocBLAS's documented semantics, and the stacked product's copy into NCHW) and check the
//! result against the convolution's definition.

use rocm_safe::{DeviceRepr, GemmConfig, LaunchConfig, Transpose};

use crate::launch::conv_plan::{patch, ConvGeometry, ConvPlan};

/// Threads per block of the im2col kernel.
const BLOCK: u32 = 256;
/// Consecutive columns one thread of the im2col kernel writes for a 1x1 kernel (copy.hip's
/// `IM2COL_RUN`; one for the others).
const RUN: usize = 4;
/// Most blocks of the im2col kernel (one line of them); its threads loop over the rest of the
/// runs of columns. 65536 blocks of 256 threads fill any GPU many times over and stay
/// below 2^32 work items (AMD's dispatch limit).
const MAX_BLOCKS: usize = 1 << 16;

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
    pub(crate) stacked: u32,
}

const _: () = assert!(std::mem::size_of::<Im2colArgs>() == 96);

// SAFETY: `Im2colArgs` is `#[repr(C)]` plain integers with no padding (96 bytes, asserted here
// and in copy.hip), so its bytes are exactly the kernel's `Im2colArgs` parameter.
unsafe impl DeviceRepr for Im2colArgs {}

/// The one of `names` (1-, 2-, 4- and 8-byte elements) for elements of `size` bytes.
fn by_size(size: usize, names: [&'static str; 4]) -> Option<&'static str> {
    match size {
        1 => Some(names[0]),
        2 => Some(names[1]),
        4 => Some(names[2]),
        8 => Some(names[3]),
        _ => None,
    }
}

/// The im2col kernel for elements of `size` bytes.
pub(crate) fn im2col_name(size: usize) -> Option<&'static str> {
    let names = [
        "im2col_rows_b1",
        "im2col_rows_b2",
        "im2col_rows_b4",
        "im2col_rows_b8",
    ];
    by_size(size, names)
}

/// The kernel that puts a stacked tile's product into NCHW, for elements of `size` bytes.
pub(crate) fn unstack_name(size: usize) -> Option<&'static str> {
    let names = [
        "unstack_rows_b1",
        "unstack_rows_b2",
        "unstack_rows_b4",
        "unstack_rows_b8",
    ];
    by_size(size, names)
}

/// One line of [`BLOCK`]-thread blocks, a thread an item of `items`, up to [`MAX_BLOCKS`] blocks
/// (the copy.hip kernels loop over the rest).
fn line_of_blocks(items: usize) -> LaunchConfig {
    let blocks = items.div_ceil(BLOCK as usize).clamp(1, MAX_BLOCKS);
    // Fits u32: MAX_BLOCKS does.
    LaunchConfig {
        grid_dim: (blocks as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The unstack kernel's launch shape for `rows` rows (images * c_out) of `cols` elements: one
/// thread a run of [`RUN`] elements of a row.
pub(crate) fn unstack_launch(rows: usize, cols: usize) -> LaunchConfig {
    line_of_blocks(rows.saturating_mul(cols.div_ceil(RUN)))
}

/// The im2col kernel's launch shape for a tile of `planes` (image, channel) planes (each k_h *
/// k_w rows) and `cols` columns of a kernel of `taps` taps: a thread writes the taps of a run of
/// columns of one plane ([`RUN`] for a 1x1, else one).
pub(crate) fn im2col_launch(planes: usize, cols: usize, taps: usize) -> LaunchConfig {
    let run = if taps == 1 { RUN } else { 1 };
    line_of_blocks(planes.saturating_mul(cols.div_ceil(run)))
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

/// The rocBLAS GEMM of a stacked tile of `images` images ([`ConvPlan::Stacked`]): C (m x c_out,
/// m = images * h_out * w_out, the scratch laid out (c_out, image, position)) = A (m x k, the
/// workspace's rows of images * positions columns) * B (the row-major kernel, as above).
pub(crate) fn stacked_gemm_config(g: &ConvGeometry, images: usize) -> GemmConfig {
    let m = images * g.h_out * g.w_out;
    GemmConfig {
        ldc: m,
        stride_c: 0,
        ..gemm_config(g, (m, m, 0), 1)
    }
}

/// One tile of [`ConvPlan::Tiled`] or [`ConvPlan::Stacked`]: the im2col arguments, the tile's
/// first input element (past the layout's start offset), the (image, channel) planes it
/// covers, the GEMM from the workspace and the tile's first output element (for a stacked
/// tile, where the copy of its product begins).
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
    /// The tile's images.
    pub(crate) images: usize,
}

/// The tiles of a `Tiled` or `Stacked` plan `p` for `g` over an input with `strides`, images
/// first, each image's positions in order (none for the other plans). `plan` proved every
/// field fits its type.
pub(crate) fn tiles(g: &ConvGeometry, strides: [usize; 4], p: ConvPlan) -> Vec<Tile> {
    let positions = g.h_out * g.w_out;
    let (images, per_tile, stacked) = match p {
        ConvPlan::Tiled {
            images,
            positions: per_tile,
        } => (images, per_tile, false),
        ConvPlan::Stacked { images } => (images, positions, true),
        ConvPlan::Direct { .. } | ConvPlan::Implicit => return Vec::new(),
    };
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
                stacked: u32::from(stacked),
            };
            out.push(Tile {
                args,
                src_offset: i0 * strides[0],
                planes: ni * g.c_in,
                gemm: if stacked {
                    stacked_gemm_config(g, ni)
                } else {
                    gemm_config(g, (np, np, k * np), ni)
                },
                out_offset: i0 * g.c_out * positions + p0,
                images: ni,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::conv_plan::tests::{dense, geo, tiled};
    use crate::launch::conv_plan::{plan, Stacking};

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
        let images = a.rows as usize / (kh * kw * a.c_in as usize);
        for r in 0..a.rows as usize {
            let (plane, tap) = (r / (kh * kw), r % (kh * kw));
            let (img, ci) = (plane / a.c_in as usize, plane % a.c_in as usize);
            let (ky, kx) = (tap / kw, tap % kw);
            // Stacked: row (ci, tap) holds every image's columns, image `img`'s at img * cols.
            let at = if a.stacked == 1 {
                (ci * kh * kw + tap) * images * cols + img * cols
            } else {
                r * cols
            };
            for i in 0..cols {
                let p = a.p0 as usize + i;
                let (oy, ox) = (p / a.w_out as usize, p % a.w_out as usize);
                let y = (oy * a.stride_h as usize + ky * a.dil_h as usize) as i64 - a.pad_h as i64;
                let x = (ox * a.stride_w as usize + kx * a.dil_w as usize) as i64 - a.pad_w as i64;
                let inside = y >= 0 && x >= 0 && y < a.h_in as i64 && x < a.w_in as i64;
                ws[at + i] = if inside {
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
        stacking: Stacking,
    ) -> ConvPlan {
        let x = values(len, 7 + budget as u64);
        let w = values(g.c_out * patch(g), 11);
        let p = plan(g, strides, 4, budget, stacking).unwrap();
        let mut out = vec![f64::NAN; g.batch * g.c_out * g.h_out * g.w_out];
        match p {
            ConvPlan::Direct { ld } => {
                let cfg = gemm_config(g, (g.h_out * g.w_out, ld, strides[0]), g.batch);
                emulate_gemm(&cfg, &x[off..], &w, &mut out);
            }
            ConvPlan::Tiled { .. } | ConvPlan::Stacked { .. } => {
                let mut ws = vec![f64::NAN; p.workspace(g)];
                let mut scratch = vec![f64::NAN; p.scratch(g)];
                let positions = g.h_out * g.w_out;
                for t in tiles(g, strides, p) {
                    assert_eq!(t.args.rows as usize, t.planes * g.k_h * g.k_w);
                    assert!((t.args.rows * t.args.cols) as usize <= ws.len());
                    emulate_im2col(&t.args, &x[off + t.src_offset..], &mut ws);
                    if t.args.stacked == 0 {
                        emulate_gemm(&t.gemm, &ws, &w, &mut out[t.out_offset..]);
                        continue;
                    }
                    // The product (c_out, image, position), moved to (image, c_out, position)
                    // as copy.hip's unstack_rows does.
                    emulate_gemm(&t.gemm, &ws, &w, &mut scratch);
                    for img in 0..t.images {
                        for co in 0..g.c_out {
                            for q in 0..positions {
                                out[t.out_offset + (img * g.c_out + co) * positions + q] =
                                    scratch[(co * t.images + img) * positions + q];
                            }
                        }
                    }
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
    /// last; the direct 1x1; conv1d as h = 1; and the stacked tiles of each (a partial last
    /// tile too).
    #[test]
    fn the_launches_compute_the_convolution() {
        let mut g = geo(3, 2, 7, 3, 3, 1, 1);
        g.w_in = 9;
        g.w_out = 9;
        let d = dense(&g);
        let n = 3 * 2 * 7 * 9;
        let image = 4 * 18 * 63;
        assert_eq!(
            check(&g, (d, 0, n), 1 << 20, Stacking::Never),
            tiled(3, 63).unwrap()
        );
        assert_eq!(
            check(&g, (d, 0, n), 2 * image, Stacking::Never),
            tiled(2, 63).unwrap()
        );
        assert_eq!(
            check(&g, (d, 5, n + 5), image, Stacking::Never),
            tiled(1, 63).unwrap()
        );
        // 110 positions in runs of 64: 64 and 46.
        let mut g2 = geo(2, 3, 10, 2, 3, 1, 1);
        g2.w_in = 11;
        g2.w_out = 11;
        let n2 = 2 * 3 * 110;
        assert_eq!(
            check(&g2, (dense(&g2), 0, n2), 1, Stacking::Never),
            tiled(1, 64).unwrap()
        );
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
        check(
            &r,
            (dense(&r), 0, 2 * 3 * 13 * 11),
            1 << 20,
            Stacking::Never,
        );
        check(&r, (dense(&r), 0, 2 * 3 * 13 * 11), 1, Stacking::Never);
        // Channels 1..=3 of a (2, 6, 13, 11) tensor, and a channels-last (2, 13, 11, 3) one.
        check(
            &r,
            ([6 * 143, 143, 11, 1], 143, 2 * 6 * 143),
            1 << 20,
            Stacking::Never,
        );
        check(
            &r,
            ([143 * 3, 1, 11 * 3, 3], 0, 2 * 143 * 3),
            1 << 20,
            Stacking::Never,
        );
        // The direct 1x1, dense and as a channel slice (ld 63 * 2).
        let mut one = geo(3, 4, 7, 5, 1, 0, 1);
        one.w_in = 9;
        one.w_out = 9;
        assert_eq!(
            check(&one, (dense(&one), 0, 3 * 4 * 63), 1, Stacking::Never),
            ConvPlan::Direct { ld: 63 }
        );
        assert_eq!(
            check(
                &one,
                ([8 * 126, 126, 9, 1], 126, 3 * 8 * 126),
                1,
                Stacking::Never
            ),
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
        check(&l, ([200, 40, 0, 1], 0, 400), 1 << 20, Stacking::Never);
        check(&l, ([200, 40, 0, 1], 0, 400), 1, Stacking::Never);
        // The same shapes with their tiles' images stacked (where a tile holds several), and
        // by the rule (every shape here is small: it stacks where it can).
        let stacked = |images| ConvPlan::Stacked { images };
        for stacking in [Stacking::Always, Stacking::Rule] {
            assert_eq!(check(&g, (d, 0, n), 1 << 20, stacking), stacked(3));
            assert_eq!(check(&g, (d, 0, n), 2 * image, stacking), stacked(2));
            assert_eq!(
                check(&g, (d, 5, n + 5), image, stacking),
                tiled(1, 63).unwrap()
            );
            assert_eq!(
                check(&r, (dense(&r), 0, 2 * 3 * 13 * 11), 1 << 20, stacking),
                stacked(2)
            );
            check(
                &r,
                ([6 * 143, 143, 11, 1], 143, 2 * 6 * 143),
                1 << 20,
                stacking,
            );
            check(
                &r,
                ([143 * 3, 1, 11 * 3, 3], 0, 2 * 143 * 3),
                1 << 20,
                stacking,
            );
            let sliced = ([8 * 126, 126, 9, 1], 126, 3 * 8 * 126);
            assert_eq!(check(&one, sliced, 1 << 20, stacking), stacked(3));
            assert_eq!(
                check(&l, ([200, 40, 0, 1], 0, 400), 1 << 20, stacking),
                stacked(2)
            );
        }
        // 5 images at 2 a tile: the last tile stacks one image (a GEMM of its rows alone).
        let g5 = geo(5, 2, 6, 3, 3, 1, 1);
        let image5 = 4 * 18 * 36;
        let n5 = 5 * 2 * 36;
        assert_eq!(
            check(&g5, (dense(&g5), 0, n5), 2 * image5, Stacking::Always),
            stacked(2)
        );
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
        // 8 images of 64 channels at 56x56, 3x3: one thread a column of a plane.
        let c = im2col_launch(512, 3136, 9);
        assert_eq!(c.grid_dim, (512 * 3136 / 256, 1, 1));
        // 32 images of 512 channels at 7x7: 49 columns, so a block spans five planes; a 1x1
        // runs 4 columns a thread (13 runs a plane).
        assert_eq!(im2col_launch(32 * 512, 49, 9).grid_dim, (3136, 1, 1));
        assert_eq!(im2col_launch(32 * 512, 49, 1).grid_dim, (832, 1, 1));
        assert_eq!(im2col_launch(1, 1, 1).grid_dim, (1, 1, 1));
        let c = im2col_launch(1 << 20, 1 << 20, 1);
        assert_eq!(c.grid_dim, (1 << 16, 1, 1));
        let work = c.grid_dim.0 as u64 * c.grid_dim.1 as u64 * BLOCK as u64;
        assert!(work < 1 << 32);
        for size in [1, 2, 4, 8] {
            assert!(im2col_name(size).is_some() && unstack_name(size).is_some());
        }
        assert_eq!((im2col_name(16), unstack_name(16)), (None, None));
        // The stacked product of ResNet's last stage: 32 * 512 rows of 49, 13 runs a row.
        assert_eq!(unstack_launch(32 * 512, 49).grid_dim, (832, 1, 1));
        assert_eq!(unstack_launch(1 << 20, 1 << 20).grid_dim, (1 << 16, 1, 1));
    }
}
