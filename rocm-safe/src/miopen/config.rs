//! Shapes and parameters of the MIOpen operations: host-only logic, tested without
//! a GPU. Conventions are Candle's (and PyTorch's); see the parent module for MIOpen's.

use std::ffi::c_int;

use half::{bf16, f16};
use rocm_sys::miopen::{miopenDataType_t, miopenPoolingMode_t};

use crate::buffer::DeviceRepr;
use crate::error::{Result, RocmError};

/// Element types offered to MIOpen's convolutions and pooling: miopen.h lists half and float as
/// "fully supported" and bfloat16 as "partially supported" (a configuration MIOpen lacks fails
/// with a typed error, and the caller falls back); double, also "partially supported", is not
/// offered.
pub trait MiopenType: DeviceRepr {
    /// The MIOpen type of the tensors.
    const DATATYPE: miopenDataType_t;
}

impl MiopenType for f32 {
    const DATATYPE: miopenDataType_t = miopenDataType_t::miopenFloat;
}
impl MiopenType for f16 {
    const DATATYPE: miopenDataType_t = miopenDataType_t::miopenHalf;
}
impl MiopenType for bf16 {
    const DATATYPE: miopenDataType_t = miopenDataType_t::miopenBFloat16;
}

pub(crate) fn unsupported(detail: String) -> RocmError {
    RocmError::Unsupported {
        what: "this MIOpen operation",
        detail,
    }
}

pub(crate) fn invalid(detail: String) -> RocmError {
    RocmError::InvalidArgument(detail)
}

/// `a * b * c * d` or `None` on overflow.
pub(crate) fn product(dims: [usize; 4]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Checks that every dimension and the element count fit MIOpen's `int`s.
pub(crate) fn c_dims(dims: [usize; 4], what: &str) -> Result<[c_int; 4]> {
    let limit = c_int::MAX as usize;
    match product(dims) {
        Some(n) if n <= limit => {}
        _ => {
            return Err(unsupported(format!(
                "{what} {dims:?} has more than {limit} elements, beyond MIOpen's 32-bit sizes"
            )))
        }
    }
    Ok(dims.map(|d| d as c_int))
}

/// A 2-D convolution (cross-correlation, as Candle and PyTorch define it) of packed NCHW
/// tensors: input (batch, in_channels, in_h, in_w), weight (out_channels, in_channels / groups,
/// kernel_h, kernel_w), output (batch, out_channels, out_h, out_w). Spatial pairs are (h, w).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conv2dConfig {
    /// N.
    pub batch: usize,
    /// C of the input.
    pub in_channels: usize,
    /// Input height.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// K: channels of the output.
    pub out_channels: usize,
    /// R.
    pub kernel_h: usize,
    /// S.
    pub kernel_w: usize,
    /// Groups (1 for a plain convolution).
    pub groups: usize,
    /// Zero padding on each side, (h, w).
    pub padding: [usize; 2],
    /// Stride, (h, w).
    pub stride: [usize; 2],
    /// Dilation, (h, w).
    pub dilation: [usize; 2],
}

impl Conv2dConfig {
    /// A 1-D convolution over (batch, in_channels, len) as the H = 1 case of a 2-D one.
    #[allow(clippy::too_many_arguments)]
    pub fn conv1d(
        batch: usize,
        in_channels: usize,
        len: usize,
        out_channels: usize,
        kernel: usize,
        groups: usize,
        padding: usize,
        stride: usize,
        dilation: usize,
    ) -> Self {
        Conv2dConfig {
            batch,
            in_channels,
            in_h: 1,
            in_w: len,
            out_channels,
            kernel_h: 1,
            kernel_w: kernel,
            groups,
            padding: [0, padding],
            stride: [1, stride],
            dilation: [1, dilation],
        }
    }

    /// Output (height, width): `(in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1`.
    pub fn out_hw(&self) -> Result<(usize, usize)> {
        let one = |inp: usize, k: usize, p: usize, s: usize, d: usize, axis: &str| {
            let span = d
                .checked_mul(k.saturating_sub(1))
                .and_then(|v| v.checked_add(1));
            let padded = inp.checked_add(p.saturating_mul(2));
            match (span, padded) {
                (Some(span), Some(padded)) if s > 0 && k > 0 && d > 0 && padded >= span => {
                    Ok((padded - span) / s + 1)
                }
                _ => Err(invalid(format!(
                    "conv {self:?}: the {axis} kernel (size {k}, dilation {d}) does not fit the \
                     padded input ({inp} + 2 * {p}), or a size/stride/dilation is zero"
                ))),
            }
        };
        Ok((
            one(
                self.in_h,
                self.kernel_h,
                self.padding[0],
                self.stride[0],
                self.dilation[0],
                "height",
            )?,
            one(
                self.in_w,
                self.kernel_w,
                self.padding[1],
                self.stride[1],
                self.dilation[1],
                "width",
            )?,
        ))
    }

    /// Checks the channel counts against the groups.
    pub(crate) fn validate(&self) -> Result<()> {
        let g = self.groups;
        if g == 0 || self.in_channels % g != 0 || self.out_channels % g != 0 {
            return Err(invalid(format!(
                "conv {self:?}: in_channels ({}) and out_channels ({}) must be multiples of \
                 groups ({g})",
                self.in_channels, self.out_channels
            )));
        }
        self.out_hw().map(|_| ())
    }

    /// Input dims (N, C, H, W).
    pub fn input_dims(&self) -> [usize; 4] {
        [self.batch, self.in_channels, self.in_h, self.in_w]
    }

    /// Weight dims (K, C / groups, R, S).
    pub fn weight_dims(&self) -> [usize; 4] {
        [
            self.out_channels,
            self.in_channels / self.groups.max(1),
            self.kernel_h,
            self.kernel_w,
        ]
    }

    /// Output dims (N, K, out_h, out_w).
    pub fn output_dims(&self) -> Result<[usize; 4]> {
        let (h, w) = self.out_hw()?;
        Ok([self.batch, self.out_channels, h, w])
    }
}

/// A 2-D transposed convolution (Candle's `conv_transpose2d`) of packed NCHW tensors: input
/// (batch, in_channels, in_h, in_w), weight (in_channels, out_channels / groups, kernel_h,
/// kernel_w), output (batch, out_channels, out_h, out_w) with
/// `out = (in - 1) * stride - 2 * pad + dilation * (kernel - 1) + output_padding + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvTranspose2dConfig {
    /// N.
    pub batch: usize,
    /// Channels of the input.
    pub in_channels: usize,
    /// Input height.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// Channels of the output.
    pub out_channels: usize,
    /// Kernel height.
    pub kernel_h: usize,
    /// Kernel width.
    pub kernel_w: usize,
    /// Groups (1 for a plain transposed convolution).
    pub groups: usize,
    /// Padding, (h, w).
    pub padding: [usize; 2],
    /// Extra rows/columns on the bottom/right of the output, (h, w).
    pub output_padding: [usize; 2],
    /// Stride, (h, w).
    pub stride: [usize; 2],
    /// Dilation, (h, w).
    pub dilation: [usize; 2],
}

impl ConvTranspose2dConfig {
    /// A 1-D transposed convolution over (batch, in_channels, len) as the H = 1 case.
    #[allow(clippy::too_many_arguments)]
    pub fn conv_transpose1d(
        batch: usize,
        in_channels: usize,
        len: usize,
        out_channels: usize,
        kernel: usize,
        groups: usize,
        padding: usize,
        output_padding: usize,
        stride: usize,
        dilation: usize,
    ) -> Self {
        ConvTranspose2dConfig {
            batch,
            in_channels,
            in_h: 1,
            in_w: len,
            out_channels,
            kernel_h: 1,
            kernel_w: kernel,
            groups,
            padding: [0, padding],
            output_padding: [0, output_padding],
            stride: [1, stride],
            dilation: [1, dilation],
        }
    }

    /// Output (height, width).
    pub fn out_hw(&self) -> Result<(usize, usize)> {
        let one = |inp: usize, k: usize, p: usize, op: usize, s: usize, d: usize| {
            if inp == 0 || k == 0 || s == 0 || d == 0 {
                return None;
            }
            let full = (inp - 1)
                .checked_mul(s)?
                .checked_add(d.checked_mul(k - 1)?)?
                .checked_add(op)?
                .checked_add(1)?;
            full.checked_sub(p.checked_mul(2)?).filter(|&o| o > 0)
        };
        let h = one(
            self.in_h,
            self.kernel_h,
            self.padding[0],
            self.output_padding[0],
            self.stride[0],
            self.dilation[0],
        );
        let w = one(
            self.in_w,
            self.kernel_w,
            self.padding[1],
            self.output_padding[1],
            self.stride[1],
            self.dilation[1],
        );
        match (h, w) {
            (Some(h), Some(w)) => Ok((h, w)),
            _ => Err(invalid(format!(
                "conv_transpose {self:?}: empty or overflowing output, or a zero size, stride \
                 or dilation"
            ))),
        }
    }

    /// The convolution whose backward-data pass this is: from the output (as its input) to
    /// the input (as its output), with the same weight, padding, stride, dilation and groups.
    pub fn as_forward(&self) -> Result<Conv2dConfig> {
        let (out_h, out_w) = self.out_hw()?;
        Ok(Conv2dConfig {
            batch: self.batch,
            in_channels: self.out_channels,
            in_h: out_h,
            in_w: out_w,
            out_channels: self.in_channels,
            kernel_h: self.kernel_h,
            kernel_w: self.kernel_w,
            groups: self.groups,
            padding: self.padding,
            stride: self.stride,
            dilation: self.dilation,
        })
    }

    /// Checks the configuration and that MIOpen's backward-data route reproduces it: the
    /// forward convolution of the output must give back the input's size, which holds exactly
    /// when `output_padding < stride` on both axes.
    pub(crate) fn validate(&self) -> Result<Conv2dConfig> {
        let fwd = self.as_forward()?;
        fwd.validate()?;
        if self.output_padding[0] >= self.stride[0] || self.output_padding[1] >= self.stride[1] {
            return Err(unsupported(format!(
                "conv_transpose {self:?}: output_padding {:?} is not below stride {:?}, which \
                 MIOpen's backward-data convolution cannot express",
                self.output_padding, self.stride
            )));
        }
        let (h, w) = fwd.out_hw()?;
        if (h, w) != (self.in_h, self.in_w) {
            return Err(unsupported(format!(
                "conv_transpose {self:?}: the forward convolution of the {}x{} output gives \
                 {h}x{w}, not the {}x{} input",
                fwd.in_h, fwd.in_w, self.in_h, self.in_w
            )));
        }
        Ok(fwd)
    }
}

/// How a pooling window is reduced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolMode {
    /// Maximum (`miopenPoolingMax`).
    Max,
    /// Mean over the whole window, padding counted (`miopenPoolingAverageInclusive`): Candle's
    /// `avg_pool2d` (which has no padding) and PyTorch's default `count_include_pad=True`.
    Average,
}

impl PoolMode {
    /// The MIOpen mode.
    pub fn raw(self) -> miopenPoolingMode_t {
        match self {
            PoolMode::Max => miopenPoolingMode_t::miopenPoolingMax,
            PoolMode::Average => miopenPoolingMode_t::miopenPoolingAverageInclusive,
        }
    }
}

/// 2-D pooling of a packed NCHW tensor (batch, channels, in_h, in_w) into
/// (batch, channels, out_h, out_w), `out = (in + 2 * pad - kernel) / stride + 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pool2dConfig {
    /// N.
    pub batch: usize,
    /// C.
    pub channels: usize,
    /// Input height.
    pub in_h: usize,
    /// Input width.
    pub in_w: usize,
    /// Window, (h, w).
    pub kernel: [usize; 2],
    /// Stride, (h, w).
    pub stride: [usize; 2],
    /// Padding, (h, w) (Candle's pooling has none).
    pub padding: [usize; 2],
    /// Max or average.
    pub mode: PoolMode,
}

impl Pool2dConfig {
    /// Output (height, width).
    pub fn out_hw(&self) -> Result<(usize, usize)> {
        let one = |inp: usize, k: usize, s: usize, p: usize| {
            let padded = inp.checked_add(p.checked_mul(2)?)?;
            (k > 0 && s > 0 && p < k && padded >= k).then(|| (padded - k) / s + 1)
        };
        match (
            one(self.in_h, self.kernel[0], self.stride[0], self.padding[0]),
            one(self.in_w, self.kernel[1], self.stride[1], self.padding[1]),
        ) {
            (Some(h), Some(w)) => Ok((h, w)),
            _ => Err(invalid(format!(
                "pool {self:?}: the window does not fit the padded input, the padding is not \
                 below the window, or a size or stride is zero"
            ))),
        }
    }

    /// Input dims (N, C, H, W).
    pub fn input_dims(&self) -> [usize; 4] {
        [self.batch, self.channels, self.in_h, self.in_w]
    }

    /// Output dims (N, C, out_h, out_w).
    pub fn output_dims(&self) -> Result<[usize; 4]> {
        let (h, w) = self.out_hw()?;
        Ok([self.batch, self.channels, h, w])
    }
}

pub(crate) fn check_len(what: &str, dims: [usize; 4], have: usize) -> Result<()> {
    match product(dims) {
        Some(need) if need <= have => Ok(()),
        Some(need) => Err(invalid(format!(
            "the {what} {dims:?} needs {need} elements but the buffer has {have}"
        ))),
        None => Err(invalid(format!("the {what} {dims:?} overflows"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> Conv2dConfig {
        Conv2dConfig {
            batch: 2,
            in_channels: 4,
            in_h: 9,
            in_w: 7,
            out_channels: 6,
            kernel_h: 3,
            kernel_w: 2,
            groups: 2,
            padding: [1, 0],
            stride: [2, 1],
            dilation: [1, 2],
        }
    }

    #[test]
    fn dtypes_map_to_miopen_values() {
        assert_eq!(<f32 as MiopenType>::DATATYPE.0, 1);
        assert_eq!(<f16 as MiopenType>::DATATYPE.0, 0);
        assert_eq!(<bf16 as MiopenType>::DATATYPE.0, 5);
        assert_eq!(PoolMode::Max.raw(), miopenPoolingMode_t::miopenPoolingMax);
        assert_eq!(
            PoolMode::Average.raw(),
            miopenPoolingMode_t::miopenPoolingAverageInclusive
        );
    }

    #[test]
    fn conv_shapes_follow_candle() {
        let c = conv();
        // h: (9 + 2 - 3) / 2 + 1 = 5; w: (7 - 2 * 1 - 1) / 1 + 1 = 5
        assert_eq!(c.out_hw().unwrap(), (5, 5));
        assert_eq!(c.weight_dims(), [6, 2, 3, 2]);
        assert_eq!(c.output_dims().unwrap(), [2, 6, 5, 5]);
        assert!(c.validate().is_ok());
        let bad_groups = Conv2dConfig { groups: 4, ..c };
        assert!(bad_groups.validate().is_err(), "6 channels in 4 groups");
        let too_big = Conv2dConfig { kernel_h: 12, ..c };
        let e = too_big.out_hw().unwrap_err().to_string();
        assert!(e.contains("does not fit"), "{e}");
        let c1 = Conv2dConfig::conv1d(1, 80, 3000, 384, 3, 1, 1, 1, 1);
        assert_eq!(c1.output_dims().unwrap(), [1, 384, 1, 3000]);
        assert_eq!(c1.weight_dims(), [384, 80, 1, 3]);
    }

    #[test]
    fn transposed_conv_maps_to_backward_data() {
        let t = ConvTranspose2dConfig {
            batch: 1,
            in_channels: 8,
            in_h: 4,
            in_w: 5,
            out_channels: 6,
            kernel_h: 3,
            kernel_w: 3,
            groups: 2,
            padding: [1, 1],
            output_padding: [1, 0],
            stride: [2, 2],
            dilation: [1, 1],
        };
        // (4 - 1) * 2 - 2 + 2 + 1 + 1 = 8; (5 - 1) * 2 - 2 + 2 + 0 + 1 = 9
        assert_eq!(t.out_hw().unwrap(), (8, 9));
        let f = t.validate().unwrap();
        assert_eq!(f.input_dims(), [1, 6, 8, 9]);
        assert_eq!(f.output_dims().unwrap(), [1, 8, 4, 5]);
        // MIOpen's filter (K, C / groups, R, S) of the forward problem is Candle's
        // transposed weight (C_in, C_out / groups, R, S).
        assert_eq!(f.weight_dims(), [8, 3, 3, 3]);
        let wide = ConvTranspose2dConfig {
            output_padding: [2, 0],
            ..t
        };
        assert!(matches!(
            wide.validate(),
            Err(RocmError::Unsupported { .. })
        ));
        let t1 = ConvTranspose2dConfig::conv_transpose1d(2, 4, 10, 3, 4, 1, 1, 0, 2, 1);
        assert_eq!(t1.out_hw().unwrap(), (1, 20));
        assert!(t1.validate().is_ok());
    }

    #[test]
    fn pool_shapes() {
        let p = Pool2dConfig {
            batch: 1,
            channels: 3,
            in_h: 7,
            in_w: 8,
            kernel: [2, 3],
            stride: [2, 2],
            padding: [0, 0],
            mode: PoolMode::Max,
        };
        assert_eq!(p.output_dims().unwrap(), [1, 3, 3, 3]);
        let bad = Pool2dConfig {
            kernel: [8, 3],
            ..p
        };
        assert!(bad.out_hw().is_err());
        let zero_stride = Pool2dConfig {
            stride: [0, 1],
            ..p
        };
        assert!(zero_stride.out_hw().is_err());
    }

    #[test]
    fn huge_tensors_are_unsupported_not_truncated() {
        let e = c_dims([1 << 20, 1 << 12, 1, 1], "input").unwrap_err();
        assert!(matches!(e, RocmError::Unsupported { .. }), "{e:?}");
        assert!(c_dims([usize::MAX, 2, 1, 1], "input").is_err());
        assert_eq!(c_dims([2, 3, 4, 5], "input").unwrap(), [2, 3, 4, 5]);
        assert!(check_len("input", [2, 3, 4, 5], 119).is_err());
        assert!(check_len("input", [2, 3, 4, 5], 120).is_ok());
    }
}
