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
//!   output positions) into a workspace of at most [`crate::settings::conv_tile_bytes`] (64 MiB
//!   by default, [`WORKSPACE_BYTES`]), one row per (image,
//!   channel, tap) and one column per output position, and one strided-batched GEMM
//!   multiplies the kernel (c_out x c_in k_h k_w) by it into the tile's place in the output.
//!   The workspace is reused by every tile (the stream orders them), so a batch-32 ResNet layer
//!   never materialises its whole 100+ MB column matrix, and the tile stays in the GPU's L2
//!   or last-level cache between the two launches where that is large enough.
//! - Where an image has few output positions (ResNet's later stages: 196, 49), a batch of one
//!   GEMM an image is a batch of short products; there the tile's images lie side by side
//!   along the columns ([`ConvPlan::Stacked`], by [`stacking_pays`]) and one GEMM of all their
//!   positions writes a (c_out, image, position) scratch, which `copy.hip`'s `unstack_rows`
//!   moves into the NCHW output. A 1x1 with very few positions (49) takes this form too,
//!   instead of the direct GEMM.
//!
//! - In f16 and bf16, where the tiles would run and the caller allows it (the convolutions
//!   allow it where [`implicit_gemm_pays`]), the implicit GEMM of
//!   [`crate::launch::conv_igemm`] runs instead ([`ConvPlan::Implicit`]): one kernel that
//!   gathers the patches into shared memory itself and multiplies them on the matrix units, so
//!   the column matrix never reaches memory. Targets without matrix units (no kernel in their
//!   code object) and shapes past its 32-bit sizes keep the tiles.
//!
//! [`plan`] and the tiles are host arithmetic ([`crate::launch::conv_plan`] and
//! [`crate::launch::conv_tiles`], tested there);
//! [`conv_gemm`] checks the buffers and queues the launches. Shapes past the kernel's 32-bit
//! sizes or rocBLAS's `i32` dims get `None` from [`plan`], and the caller runs its other path.

use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, GemmType};

use crate::device::RocmDevice;
use crate::dtype::RocmDType;
use crate::error::BackendError;
use crate::launch::conv_igemm::{conv_igemm, taps_outer};
use crate::launch::conv_plan::patch;
pub use crate::launch::conv_plan::{
    plan, stacking_pays, ConvGeometry, ConvPlan, Stacking, WORKSPACE_BYTES,
};
use crate::launch::conv_tiles::{
    gemm_config, im2col_launch, im2col_name, tiles, unstack_launch, unstack_name,
};
use crate::layout::{checked_product, checked_view, invalid};

/// Output positions (images x output pixels) from which the implicit GEMM beats the tiles:
/// the channels-outer kernel, and the taps-outer one (a multiple of 32 input channels).
const IMPLICIT_MIN_POSITIONS: usize = 1 << 16;
const IMPLICIT_MIN_POSITIONS_TAPS: usize = 1 << 14;
/// Output channels up to which the implicit GEMM beats the tiles.
const IMPLICIT_MAX_C_OUT: usize = 128;

/// Whether the implicit GEMM is the faster form of our path for `g`: many output positions
/// over few output channels. From the bench's `_igemm` / `_tiles` rows (f16, H100 harness,
/// bench/results' "conv-stacked-tiles" of 2026-11-27 and "conv-igemm-taps" of 2026-11-28):
/// channels outer, the tiles won on ResNet-50's stage-2 3x3 at batch 32 and tied on its
/// stage-1 3x3 at batch 8 (25088 output positions both), and the implicit GEMM won its stage-1
/// 3x3 at batch 32 (100352); taps outer, the implicit GEMM won at 25088 positions too (stage 2
/// 58 against 73 us, stage 1 at batch 8 25 against 33), not at 3136 (batch 1). It lost on the
/// VAE's 512 channels and Whisper's conv1d either way. Not yet measured on an AMD GPU.
pub fn implicit_gemm_pays(g: &ConvGeometry) -> bool {
    let positions = g.batch.saturating_mul(g.h_out).saturating_mul(g.w_out);
    let least = if taps_outer(g) {
        IMPLICIT_MIN_POSITIONS_TAPS
    } else {
        IMPLICIT_MIN_POSITIONS
    };
    positions >= least && g.c_out <= IMPLICIT_MAX_C_OUT
}

/// The forms [`conv_gemm`] may take beyond its plan's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forms {
    /// Whether an f16/bf16 shape that would run in tiles takes the implicit GEMM
    /// ([`ConvPlan::Implicit`]) where the device has it (the convolutions pass
    /// [`crate::settings::conv_igemm`] and [`implicit_gemm_pays`]).
    pub implicit: bool,
    /// Whether tiles stack their images ([`ConvPlan::Stacked`]): the convolutions pass
    /// [`Stacking::Rule`]; the bench forces each form.
    pub stacking: Stacking,
}

/// Runs the convolution `g` of `x` (4-D layout `x_l`, (batch, c_in, h_in, w_in)) with the
/// contiguous kernel `w[w_off..]` (c_out, c_in, k_h, k_w) on the GEMM path: the new NCHW
/// output, or `None` when [`plan`] refuses the shape. `budget` bounds the workspace in bytes
/// (callers pass [`crate::settings::conv_tile_bytes`]); `forms` says which of the implicit
/// GEMM and the stacked tiles it may take.
pub fn conv_gemm<T: GemmType + RocmDType>(
    dev: &RocmDevice,
    g: &ConvGeometry,
    (x, x_l): (&DeviceBuffer<T>, &Layout),
    (w, w_off): (&DeviceBuffer<T>, usize),
    budget: usize,
    forms: Forms,
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
    let Some(p) = plan(g, strides, std::mem::size_of::<T>(), budget, forms.stacking) else {
        return Ok(None);
    };
    if forms.implicit && matches!(p, ConvPlan::Tiled { .. } | ConvPlan::Stacked { .. }) {
        if let Some(out) = conv_igemm(dev, g, (x, x_l), (w, w_off))? {
            return Ok(Some((out, ConvPlan::Implicit)));
        }
    }
    let positions = g.h_out * g.w_out;
    let k = patch(g);
    let out_el = checked_product(OP, "output element count", &[g.batch, g.c_out, positions])?;
    let (xb, x) = (x, checked_view(OP, x, x_l)?);
    let w_end = w_off
        .checked_add(g.c_out * k)
        .ok_or_else(|| invalid(OP, "the kernel's offset overflows"))?;
    let w = w.slice(w_off..w_end)?;
    let mut out = dev.alloc::<T>(out_el)?;
    match p {
        ConvPlan::Direct { ld } => {
            let cfg = gemm_config(g, (positions, ld, strides[0]), g.batch);
            // `gemm_strided_batched` checks every matrix of the batch against its operand.
            dev.blas(|h| h.gemm_strided_batched(&cfg, &x, &w, &mut out))?;
        }
        ConvPlan::Tiled { .. } | ConvPlan::Stacked { .. } => {
            let name = im2col_name(std::mem::size_of::<T>())
                .ok_or_else(|| invalid(OP, "elements of this size have no im2col kernel"))?;
            let f = dev.function(Module::Copy, name)?;
            let unstack = match p {
                ConvPlan::Stacked { .. } => {
                    let name = unstack_name(std::mem::size_of::<T>()).ok_or_else(|| {
                        invalid(OP, "elements of this size have no unstack kernel")
                    })?;
                    Some(dev.function(Module::Copy, name)?)
                }
                _ => None,
            };
            let ws = dev.alloc::<T>(p.workspace(g))?;
            let mut scratch = dev.alloc::<T>(p.scratch(g))?;
            for t in tiles(g, strides, p) {
                let (rows, cols) = (t.args.rows as usize, t.args.cols as usize);
                if rows * cols > ws.len() || rows != t.planes * g.k_h * g.k_w {
                    return Err(invalid(OP, "a tile does not fit its workspace"));
                }
                // The tile's first image; `checked_view` proved the layout's last element lies
                // inside the buffer, and the tile's first image starts before it.
                let src = xb.slice(x_l.start_offset() + t.src_offset..)?;
                let (psrc, pws) = (DevicePtrArg::of(&src), DevicePtrArg::of(&ws));
                let mut l = dev.stream().launch_builder(&f);
                l.arg(&t.args).arg(&psrc).arg(&pws);
                // SAFETY: im2col_rows_b<W>(Im2colArgs a, const T* src, T* dst) with W =
                // size_of::<T>(): it writes dst[r * cols + i] for r < rows, i < cols (stacked:
                // the same rows * cols elements in another order), and rows * cols <=
                // ws.len() (checked above); rows = planes * k_h * k_w, a whole number of
                // planes as the kernel takes it. It reads src at img * s_b + c * s_c +
                // y * s_h + x * s_w for the tile's images (inside the batch), c < c_in,
                // y < h_in, x < w_in only (positions outside the input are zeros, not reads):
                // elements of the input layout, which `checked_view` proved lie inside the
                // buffer. Every field fits its type (`plan`); `ws` is ours alone and all three
                // are ordered on the device's stream.
                unsafe { l.launch(im2col_launch(t.planes, cols, g.k_h * g.k_w))? };
                let Some(unstack) = unstack.as_ref().filter(|_| t.args.stacked == 1) else {
                    let mut c = out.slice_mut(t.out_offset..)?;
                    // `gemm_strided_batched` checks every matrix of the batch against its
                    // operand.
                    dev.blas(|h| h.gemm_strided_batched(&t.gemm, &ws, &w, &mut c))?;
                    continue;
                };
                // The tile's product (c_out, image, position) into the scratch (checked
                // against it as above), then moved as (image, c_out, position) into the output
                // from the tile's first image on.
                dev.blas(|h| h.gemm_strided_batched(&t.gemm, &ws, &w, &mut scratch))?;
                let n = t.images * g.c_out * positions;
                let src = scratch.slice(..n)?;
                let dst = out.slice_mut(t.out_offset..t.out_offset + n)?;
                let (psrc, pdst) = (DevicePtrArg::of(&src), DevicePtrArg::of(&dst));
                // `plan` proved images * positions and c_out fit i32.
                let dims = [t.images as u32, g.c_out as u32, positions as u32];
                let mut l = dev.stream().launch_builder(unstack);
                l.arg(&psrc)
                    .arg(&pdst)
                    .arg(&dims[0])
                    .arg(&dims[1])
                    .arg(&dims[2]);
                // SAFETY: unstack_rows_b<W>(const T* src, T* dst, u32 images, u32 c_out, u32
                // cols) with W = size_of::<T>(): it reads src[..n] and writes dst[..n], n =
                // images * c_out * cols, and both views hold exactly n elements (`slice`
                // refused a range past either buffer); the scratch and the output are distinct
                // buffers of ours, ordered with the GEMM before on the device's stream.
                unsafe { l.launch(unstack_launch(t.images * g.c_out, positions))? };
            }
        }
        ConvPlan::Implicit => return Err(invalid(OP, "plan() never returns Implicit")),
    }
    Ok(Some((out, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (batch, c_in, square side, c_out, 3x3 padded kernel), or a conv1d as height 1.
    fn geo(batch: usize, c_in: usize, (h, w): (usize, usize), c_out: usize) -> ConvGeometry {
        ConvGeometry {
            batch,
            c_in,
            h_in: h,
            w_in: w,
            c_out,
            k_h: if h == 1 { 1 } else { 3 },
            k_w: 3,
            h_out: h,
            w_out: w,
            padding: (usize::from(h > 1), 1),
            stride: (1, 1),
            dilation: (1, 1),
        }
    }

    #[test]
    fn the_implicit_gemm_takes_the_shapes_it_was_measured_faster_on() {
        assert!(
            implicit_gemm_pays(&geo(32, 64, (56, 56), 64)),
            "ResNet 3x3, batch 32"
        );
        assert!(
            !implicit_gemm_pays(&geo(1, 64, (56, 56), 64)),
            "ResNet 3x3, batch 1"
        );
        assert!(
            implicit_gemm_pays(&geo(8, 64, (56, 56), 64)),
            "ResNet 3x3, batch 8 (taps outer)"
        );
        assert!(
            implicit_gemm_pays(&geo(32, 128, (28, 28), 128)),
            "ResNet stage 2, batch 32 (taps outer)"
        );
        assert!(
            !implicit_gemm_pays(&geo(32, 48, (28, 28), 128)),
            "25088 positions, channels outer: the tiles"
        );
        assert!(
            implicit_gemm_pays(&geo(84, 48, (28, 28), 128)),
            "65856 positions, channels outer"
        );
        assert!(
            implicit_gemm_pays(&geo(24, 64, (56, 56), 128)),
            "75264 positions, 128 channels"
        );
        assert!(
            !implicit_gemm_pays(&geo(32, 256, (14, 14), 256)),
            "ResNet stage 3, batch 32: the stacked tiles won"
        );
        assert!(
            !implicit_gemm_pays(&geo(1, 512, (64, 64), 512)),
            "the VAE's 512 channels"
        );
        assert!(
            !implicit_gemm_pays(&geo(1, 80, (1, 3000), 384)),
            "Whisper's conv1d"
        );
        assert!(
            !implicit_gemm_pays(&geo(32, 512, (56, 56), 512)),
            "many channels"
        );
    }
}
