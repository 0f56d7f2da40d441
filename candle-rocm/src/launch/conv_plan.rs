//! The host side of the convolutions' GEMM path ([`crate::launch::conv`]), the decision: which
//! plan a convolution takes ([`plan`]: one GEMM from the input for a 1x1, else column tiles
//! bounded in bytes, their images stacked along the GEMM's rows where [`stacking_pays`]). The
//! tiles themselves (im2col arguments, GEMM configurations, launch shapes) are
//! [`crate::launch::conv_tiles`]'s.

/// The default bound on the bytes of column matrix one tile writes: 64 MiB, the largest bound
/// measured under which no convolution of the bench ran slower than under a smaller one (larger
/// tiles take fewer launches and longer GEMMs; smaller ones are read back by the GEMM from the
/// cache the im2col wrote them to: an MI300's 256 MB last-level cache, a Radeon RX 7900's 96 MB
/// Infinity Cache, an H100's 50 MB L2), and a small fraction of any GPU's memory.
/// [`crate::settings::conv_tile_bytes`] is the value in force.
pub const WORKSPACE_BYTES: usize = crate::settings::CONV_TILE_MIB_DEFAULT << 20;

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

impl ConvGeometry {
    /// The geometry of `c`, MIOpen's description of the same convolution (its groups and
    /// channel counts as given: the GEMM path takes one group), with the output size
    /// `(h_out, w_out)` the caller computed from it.
    pub fn of_config(c: &rocm_safe::Conv2dConfig, (h_out, w_out): (usize, usize)) -> Self {
        ConvGeometry {
            batch: c.batch,
            c_in: c.in_channels,
            h_in: c.in_h,
            w_in: c.in_w,
            c_out: c.out_channels,
            k_h: c.kernel_h,
            k_w: c.kernel_w,
            h_out,
            w_out,
            padding: (c.padding[0], c.padding[1]),
            stride: (c.stride[0], c.stride[1]),
            dilation: (c.dilation[0], c.dilation[1]),
        }
    }
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
    /// Column tiles of `images` whole images side by side along the columns: one GEMM of
    /// `images * h_out * w_out` rows a tile (not a batch of `images` GEMMs of `h_out * w_out`
    /// rows) into a scratch laid out (c_out, image, position), then one strided copy of it
    /// into the NCHW output.
    Stacked {
        /// Images per tile (at least 2).
        images: usize,
    },
}

impl ConvPlan {
    /// Elements of column workspace the plan needs of an element type (0 for `Direct`).
    pub fn workspace(&self, g: &ConvGeometry) -> usize {
        match *self {
            ConvPlan::Direct { .. } | ConvPlan::Implicit => 0,
            ConvPlan::Tiled { images, positions } => images * patch(g) * positions,
            ConvPlan::Stacked { images } => images * patch(g) * g.h_out * g.w_out,
        }
    }

    /// Elements of the product scratch [`ConvPlan::Stacked`] needs (0 for the others, which
    /// write the output directly).
    pub fn scratch(&self, g: &ConvGeometry) -> usize {
        match *self {
            ConvPlan::Stacked { images } => images * g.c_out * g.h_out * g.w_out,
            _ => 0,
        }
    }
}

/// Whether [`plan`] stacks a tile's images along the GEMM's rows ([`ConvPlan::Stacked`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacking {
    /// Where [`stacking_pays`] says so.
    Rule,
    /// Never: a batch of one GEMM an image, and the 1x1's one GEMM from the input.
    Never,
    /// Whenever a tile holds several whole images (the 1x1s too).
    Always,
}

/// Output positions an image up to which a tile's images are stacked.
const STACK_MAX_POSITIONS: usize = 256;
/// The same for a 1x1 that can take its one GEMM from the input ([`ConvPlan::Direct`]).
const STACK_MAX_POSITIONS_DIRECT: usize = 64;

/// Whether stacking a tile of `images` images pays for `g` (`direct`: a 1x1 that could take
/// [`ConvPlan::Direct`] instead): a batch of GEMMs one image each has `h_out * w_out` rows, and
/// where that is short (ResNet's later stages: 196 and 49 positions an image) one GEMM of all
/// the tile's rows is the better product, even with the extra copy of its output. From the
/// bench's `_tiles` / `_stacked` / `_direct` rows (f16, H100 harness, bench/results'
/// "conv-stacked-tiles"): stacking won on ResNet-50's 3x3 layers at 196 and 49 positions and
/// its 1x1 at 49, and lost at 784 positions and more (3x3 and 1x1) and on the 1x1 at 196.
/// Not yet measured on an AMD GPU.
pub fn stacking_pays(g: &ConvGeometry, images: usize, direct: bool) -> bool {
    let most = if direct {
        STACK_MAX_POSITIONS_DIRECT
    } else {
        STACK_MAX_POSITIONS
    };
    images > 1 && g.h_out * g.w_out <= most
}

/// Row length of the column matrix: c_in * k_h * k_w (callers checked it fits).
pub(crate) fn patch(g: &ConvGeometry) -> usize {
    g.c_in * g.k_h * g.k_w
}

/// The plan for geometry `g` over an input with strides `strides` (image, channel, row,
/// column) and elements of `elem` bytes, with tiles of at most `budget` bytes, stacking a
/// tile's images as `stacking` says; `None` when a size passes the kernel's `u32` or rocBLAS's
/// `i32` limits (or the output is empty).
pub fn plan(
    g: &ConvGeometry,
    strides: [usize; 4],
    elem: usize,
    budget: usize,
    stacking: Stacking,
) -> Option<ConvPlan> {
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
    let direct = g.k_h == 1
        && g.k_w == 1
        && g.stride == (1, 1)
        && g.padding == (0, 0)
        && dense_pixels
        && s_c >= positions
        && s_c <= i32_max
        && strides[0] <= i64::MAX as usize;
    let row_bytes = patch.checked_mul(elem.max(1))?;
    let image_bytes = row_bytes.checked_mul(positions)?;
    // Rows of a tile (images * patch) must fit the kernel's u32, and a stacked tile's GEMM
    // rows (images * positions) rocBLAS's i32.
    let max_images = (u32::MAX as usize / patch)
        .min(i32_max / positions)
        .min(i32_max);
    // As many whole images as fit a tile, spread evenly over the tiles (32 at 9 a tile: 4
    // tiles of 8); none when one image does not fit.
    let images = (image_bytes <= budget && max_images > 0).then(|| {
        let most = (budget / image_bytes).clamp(1, g.batch).min(max_images);
        g.batch.div_ceil(g.batch.div_ceil(most))
    });
    let stacked = images.filter(|&i| match stacking {
        Stacking::Never => false,
        Stacking::Always => i > 1,
        Stacking::Rule => stacking_pays(g, i, direct),
    });
    if let Some(images) = stacked {
        return Some(ConvPlan::Stacked { images });
    }
    if direct {
        return Some(ConvPlan::Direct { ld: s_c });
    }
    if max_images == 0 {
        return None;
    }
    if let Some(images) = images {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `Some(Tiled { images, positions })`.
    pub(crate) fn tiled(images: usize, positions: usize) -> Option<ConvPlan> {
        Some(ConvPlan::Tiled { images, positions })
    }

    /// A 32 MiB budget (the expectations below were worked out for it).
    const MIB32: usize = 32 << 20;

    /// (b, c_in, hw x hw) -> c_out with a k x k kernel, padding `pad`, stride `s`.
    pub(crate) fn geo(
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

    pub(crate) fn dense(g: &ConvGeometry) -> [usize; 4] {
        let hw = g.h_in * g.w_in;
        [g.c_in * hw, hw, g.w_in, 1]
    }

    /// ResNet-50's 1x1 runs as one GEMM from the input; strided, padded or channels-last 1x1s
    /// and every kxk run in tiles.
    #[test]
    fn one_by_one_convolutions_need_no_columns() {
        let g = geo(32, 256, 56, 64, 1, 0, 1);
        assert_eq!(
            plan(&g, dense(&g), 2, MIB32, Stacking::Rule),
            Some(ConvPlan::Direct { ld: 3136 })
        );
        // A channel slice of a grouped convolution keeps its larger channel stride.
        let sliced = [512 * 3136, 3136, 56, 1];
        assert_eq!(
            plan(&g, sliced, 2, MIB32, Stacking::Rule),
            Some(ConvPlan::Direct { ld: 3136 })
        );
        // Strided, padded, channels last (pixels not dense in a channel): columns.
        let tiled_plan = |g: &ConvGeometry, s: [usize; 4]| {
            matches!(
                plan(g, s, 2, MIB32, Stacking::Rule),
                Some(ConvPlan::Tiled { .. } | ConvPlan::Stacked { .. })
            )
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
        let p = plan(&g, dense(&g), 2, MIB32, Stacking::Rule).unwrap();
        assert_eq!(Some(p), tiled(8, 3136));
        assert!(p.workspace(&g) * 2 <= MIB32);
        // 5 images at 2 a tile stay 2 a tile (3 tiles: 2, 2, 1).
        let g5 = geo(5, 64, 56, 64, 3, 1, 1);
        assert_eq!(
            plan(&g5, dense(&g5), 2, 2 * 576 * 3136 * 2 + 1, Stacking::Rule),
            tiled(2, 3136)
        );
        // At 16 MiB: 4 a tile, 8 tiles; the default is 64 MiB.
        assert_eq!(WORKSPACE_BYTES, 2 * MIB32);
        assert_eq!(
            plan(&g, dense(&g), 2, 16 << 20, Stacking::Rule),
            tiled(4, 3136)
        );
        // Batch 1 takes one tile.
        let g1 = geo(1, 64, 56, 64, 3, 1, 1);
        assert_eq!(
            plan(&g1, dense(&g1), 2, MIB32, Stacking::Rule),
            tiled(1, 3136)
        );
        // The VAE's 512-channel 3x3 at 64x64 in f16: 4608 x 4096 x 2 = 37.7 MB, over the
        // budget (at most 3584 positions a tile): 2 tiles of 2048.
        let vae = geo(1, 512, 64, 64 * 8, 3, 1, 1);
        let p = plan(&vae, dense(&vae), 2, MIB32, Stacking::Rule).unwrap();
        assert_eq!(Some(p), tiled(1, 2048));
        assert!(p.workspace(&vae) * 2 <= MIB32);
        // At 16 MiB: at most 1792 positions a tile, so 3 tiles of 1408.
        assert_eq!(
            plan(&vae, dense(&vae), 2, 16 << 20, Stacking::Rule),
            tiled(1, 1408)
        );
        // 100 positions at most 64 a tile: 2 tiles, 50 rounded up to 64 (64 and 36).
        let small = geo(1, 3, 10, 4, 3, 1, 1);
        let row = 27 * 4;
        let p = plan(&small, dense(&small), 4, row * 64, Stacking::Rule).unwrap();
        assert_eq!(Some(p), tiled(1, 64));
        // In f32 at 512x512 (a VAE's full-resolution 128-channel layer): still bounded.
        let big = geo(1, 128, 512, 128, 3, 1, 1);
        let p = plan(&big, dense(&big), 4, MIB32, Stacking::Rule).unwrap();
        assert!(p.workspace(&big) * 4 <= MIB32, "{p:?}");
        // A row longer than the budget still gets 64 positions per tile.
        let huge = geo(1, 1 << 20, 8, 1, 3, 1, 1);
        assert_eq!(
            plan(&huge, dense(&huge), 4, MIB32, Stacking::Rule),
            tiled(1, 64)
        );
    }

    /// ResNet-50's later stages at batch 32 (the 3x3 at 196 and 49 positions an image, the 1x1
    /// at 49) stack their tiles' images; its first two stages, the 1x1 at 196, batch 1 and
    /// `Never` keep the batch of GEMMs or the 1x1's one GEMM; `Always` stacks whenever a tile
    /// holds two images or more.
    #[test]
    fn small_images_stack_along_the_gemm_rows() {
        use Stacking::{Always, Never, Rule};
        // 16 MiB tiles (at the default 32, stage 3 takes all 32 images in one).
        let budget = 16 << 20;
        let stacked = |images| Some(ConvPlan::Stacked { images });
        let direct = |ld| Some(ConvPlan::Direct { ld });
        // (what, geometry, stacking, plan)
        let cases = [
            // Stage 3: 2304 x 196 x 2 bytes = 903 kB an image, 18 fit: 2 tiles of 16.
            ("stage 3", geo(32, 256, 14, 256, 3, 1, 1), Rule, stacked(16)),
            (
                "stage 3",
                geo(32, 256, 14, 256, 3, 1, 1),
                Never,
                tiled(16, 196),
            ),
            // Stage 4's 3x3 and its 2048 -> 512 1x1: one tile of all 32 images.
            ("stage 4", geo(32, 512, 7, 512, 3, 1, 1), Rule, stacked(32)),
            (
                "stage 4 1x1",
                geo(32, 2048, 7, 512, 1, 0, 1),
                Rule,
                stacked(32),
            ),
            (
                "stage 4 1x1",
                geo(32, 2048, 7, 512, 1, 0, 1),
                Never,
                direct(49),
            ),
            // Stage 1 keeps its batch of GEMMs and its direct 1x1; `Always` stacks them
            // (the 1x1: 256 x 3136 x 2 bytes = 1.6 MB an image, 10 fit: 4 tiles of 8).
            (
                "stage 1",
                geo(32, 64, 56, 64, 3, 1, 1),
                Rule,
                tiled(4, 3136),
            ),
            ("stage 1", geo(32, 64, 56, 64, 3, 1, 1), Always, stacked(4)),
            (
                "stage 1 1x1",
                geo(32, 256, 56, 64, 1, 0, 1),
                Rule,
                direct(3136),
            ),
            (
                "stage 1 1x1",
                geo(32, 256, 56, 64, 1, 0, 1),
                Always,
                stacked(8),
            ),
            // One image has nothing to stack.
            (
                "batch 1",
                geo(1, 512, 7, 512, 3, 1, 1),
                Always,
                tiled(1, 49),
            ),
            // Stage 2 (784 positions) and stage 3's 1x1 (196) keep their forms.
            (
                "stage 2",
                geo(32, 128, 28, 128, 3, 1, 1),
                Rule,
                tiled(8, 784),
            ),
            (
                "stage 3 1x1",
                geo(32, 1024, 14, 256, 1, 0, 1),
                Rule,
                direct(196),
            ),
        ];
        for (what, g, stacking, want) in cases {
            let got = plan(&g, dense(&g), 2, budget, stacking);
            assert_eq!(got, want, "{what} {stacking:?}");
        }
        // The bounds: 256 positions (64 for a 1x1 that can go direct), and a tile of two.
        let (at, past) = (geo(2, 8, 16, 8, 3, 1, 1), geo(2, 8, 17, 8, 3, 1, 1));
        assert!(stacking_pays(&at, 2, false) && !stacking_pays(&past, 2, false));
        assert!(!stacking_pays(&at, 1, false) && !stacking_pays(&at, 2, true));
        assert!(stacking_pays(&geo(2, 8, 8, 8, 1, 0, 1), 2, true));
    }

    /// MIOpen's description of a convolution maps field by field, conv1d as h = 1.
    #[test]
    fn a_miopen_config_gives_the_same_geometry() {
        let c = rocm_safe::Conv2dConfig::conv1d(2, 80, 3000, 384, 3, 1, 1, 2, 1);
        let g = ConvGeometry::of_config(&c, (1, 1500));
        let want = ConvGeometry {
            batch: 2,
            c_in: 80,
            h_in: 1,
            w_in: 3000,
            c_out: 384,
            k_h: 1,
            k_w: 3,
            h_out: 1,
            w_out: 1500,
            padding: (0, 1),
            stride: (1, 2),
            dilation: (1, 1),
        };
        assert_eq!(g, want);
    }

    /// Sizes past the kernel's or rocBLAS's limits, and empty outputs, get no plan.
    #[test]
    fn sizes_past_the_limits_get_no_plan() {
        let mut g = geo(1, 4, 8, 4, 3, 1, 1);
        let s = dense(&g);
        assert!(plan(&g, s, 4, MIB32, Stacking::Rule).is_some());
        g.c_out = 0;
        assert_eq!(plan(&g, s, 4, MIB32, Stacking::Rule), None);
        g.c_out = 1 << 31;
        assert_eq!(plan(&g, s, 4, MIB32, Stacking::Rule), None);
        g.c_out = 4;
        g.c_in = 1 << 30;
        // c_in * 9 taps passes i32.
        assert_eq!(plan(&g, s, 4, MIB32, Stacking::Rule), None);
        g.c_in = 4;
        g.w_out = usize::MAX;
        assert_eq!(plan(&g, s, 4, MIB32, Stacking::Rule), None);
    }
}
