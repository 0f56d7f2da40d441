//! Convolutions, pooling and upsampling: im2col + rocBLAS for `conv1d`/`conv2d` (or MIOpen
//! when `CANDLE_ROCM_CONV=miopen`, see [`miopen`]), col2im +
//! rocBLAS or a direct kernel for `conv_transpose1d`, direct kernels for
//! `conv_transpose2d`, the pools and the upsamplers (candle's `conv` module).
//!
//! candle-core 0.11 keeps the fields of its `Params*` structs crate-private, so an
//! out-of-tree backend reads them from their `Debug` form ([`ConvParams::from_debug`]); every
//! value is then checked against the operands' layouts, so wrong parameters are an error,
//! never an out-of-bounds access.

use candle_core::{Layout, Shape};

use crate::error::BackendError;
use crate::layout::{checked_product, parameter_error, shape_error, size_overflow};

pub mod convolve;
pub mod kernels;
pub mod miopen;

/// The numeric parameters of a convolution, by name, as candle-core's `Params*` structs
/// hold them (`b_size`, `c_in`, `c_out`, `k_size` / `k_h`, `k_w`, `padding`, `stride`,
/// `dilation`, `output_padding`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConvParams {
    fields: Vec<(String, usize)>,
}

impl ConvParams {
    /// Reads `name: <integer>` pairs from a derived `Debug` rendering such as
    /// `ParamsConv1D { b_size: 2, l_in: 5, ..., cudnn_fwd_algo: None }`. Non-integer fields
    /// are skipped.
    pub fn from_debug(debug: &str) -> ConvParams {
        let body = debug
            .split_once('{')
            .map_or("", |(_, rest)| rest.trim_end_matches('}'));
        let fields = body
            .split(',')
            .filter_map(|kv| {
                let (k, v) = kv.split_once(':')?;
                Some((k.trim().to_string(), v.trim().parse().ok()?))
            })
            .collect();
        ConvParams { fields }
    }

    /// Builds parameters from name/value pairs (for callers that have them directly).
    pub fn from_pairs(pairs: &[(&str, usize)]) -> ConvParams {
        ConvParams {
            fields: pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    /// The value of field `name`.
    pub fn get(&self, op: &str, name: &str) -> Result<usize, BackendError> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                parameter_error(
                    op,
                    format_args!(
                        "parameter {name} is missing from {:?}; this candle-core version's \
                         parameter structs are not the ones candle-rocm was written for",
                        self.fields
                    ),
                )
            })
    }
}

/// The dims of `l`, or an error when it does not have `rank` of them.
fn dims_n<'a>(
    op: &str,
    what: &str,
    l: &'a Layout,
    rank: usize,
) -> Result<&'a [usize], BackendError> {
    if l.dims().len() == rank {
        Ok(l.dims())
    } else {
        Err(shape_error(
            op,
            format_args!("{what} must have {rank} dims, got shape {:?}", l.dims()),
        ))
    }
}

/// Checks that a parameter agrees with the operand it describes.
fn agree(op: &str, name: &str, param: usize, actual: usize) -> Result<(), BackendError> {
    if param == actual {
        Ok(())
    } else {
        Err(parameter_error(
            op,
            format_args!("parameter {name} = {param} but the operands give {actual}"),
        ))
    }
}

/// Output length of a convolution along one axis:
/// `(len + 2 * padding - dilation * (k - 1) - 1) / stride + 1`, or an error when the kernel
/// does not fit or a factor is zero.
fn conv_out(
    op: &str,
    len: usize,
    k: usize,
    padding: usize,
    stride: usize,
    dilation: usize,
) -> Result<usize, BackendError> {
    if k == 0 || stride == 0 || dilation == 0 {
        return Err(parameter_error(
            op,
            "kernel size, stride and dilation must be positive",
        ));
    }
    let padded = padding
        .checked_mul(2)
        .and_then(|p| p.checked_add(len))
        .ok_or_else(|| {
            size_overflow(
                op,
                format_args!("padded input length ({len} + 2 * {padding})"),
            )
        })?;
    let reach = dilation
        .checked_mul(k - 1)
        .and_then(|r| r.checked_add(1))
        .ok_or_else(|| {
            size_overflow(
                op,
                format_args!("kernel reach ({dilation} * ({k} - 1) + 1)"),
            )
        })?;
    match (padded, reach) {
        (p, r) if p >= r => Ok((p - r) / stride + 1),
        _ => Err(parameter_error(
            op,
            format_args!(
                "a kernel of {k} (dilation {dilation}) does not fit an input of {len} padded by {padding}"
            ),
        )),
    }
}

/// Output length of a transposed convolution along one axis:
/// `(len - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1`.
fn conv_tr_out(
    op: &str,
    len: usize,
    k: usize,
    padding: usize,
    out_padding: usize,
    stride: usize,
    dilation: usize,
) -> Result<usize, BackendError> {
    if len == 0 || k == 0 || stride == 0 || dilation == 0 {
        return Err(parameter_error(
            op,
            "input length, kernel size, stride and dilation must be positive",
        ));
    }
    let full = (len - 1)
        .checked_mul(stride)
        .and_then(|v| v.checked_add(dilation.checked_mul(k - 1)?))
        .and_then(|v| v.checked_add(out_padding)?.checked_add(1))
        .ok_or_else(|| {
            size_overflow(
                op,
                format_args!(
                    "output length (({len} - 1) * {stride} + {dilation} * ({k} - 1) + \
                     {out_padding} + 1)"
                ),
            )
        })?;
    padding
        .checked_mul(2)
        .and_then(|p| full.checked_sub(p))
        .ok_or_else(|| parameter_error(op, "the padding is larger than the output"))
}

/// Element count of the (b, c, h, w) output of a pool or an upsampler.
fn out_el_2d(
    op: &str,
    (b, c): (usize, usize),
    (h, w): (usize, usize),
) -> Result<usize, BackendError> {
    checked_product(
        op,
        "output element count (b * c * h_out * w_out)",
        &[b, c, h, w],
    )
}

/// `dims_n`'s check for a 3-D input, exposed for `upsample_nearest1d`.
pub(crate) fn as_4d_with_unit_w(op: &str, l: &Layout) -> Result<Layout, BackendError> {
    let d = dims_n(op, "the input", l, 3)?;
    let s = l.stride();
    Ok(Layout::new(
        Shape::from((d[0], d[1], d[2], 1)),
        vec![s[0], s[1], s[2], 1],
        l.start_offset(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of candle-core 0.11's `ParamsConv1D` `Debug` output (same field names and a
    /// non-integer field), produced by the same derive.
    #[derive(Debug)]
    #[allow(dead_code)]
    struct ParamsConv1D {
        b_size: usize,
        l_in: usize,
        c_out: usize,
        c_in: usize,
        k_size: usize,
        padding: usize,
        stride: usize,
        dilation: usize,
        cudnn_fwd_algo: Option<u8>,
    }

    #[test]
    fn reads_params_from_their_debug_form() {
        let p = ParamsConv1D {
            b_size: 2,
            l_in: 17,
            c_out: 4,
            c_in: 3,
            k_size: 5,
            padding: 1,
            stride: 2,
            dilation: 3,
            cudnn_fwd_algo: Some(1),
        };
        let c = ConvParams::from_debug(&format!("{p:?}"));
        let get = |n| c.get("t", n).unwrap();
        assert_eq!(
            [get("b_size"), get("l_in"), get("c_out"), get("c_in")],
            [2, 17, 4, 3]
        );
        assert_eq!(
            [
                get("k_size"),
                get("padding"),
                get("stride"),
                get("dilation")
            ],
            [5, 1, 2, 3]
        );
        let e = c.get("conv1d", "output_padding").unwrap_err().to_string();
        assert!(e.contains("output_padding is missing"), "{e}");
        // The pretty form parses too.
        assert_eq!(ConvParams::from_debug(&format!("{p:#?}")), c);
    }

    #[test]
    fn output_sizes_are_checked() {
        assert_eq!(conv_out("t", 10, 3, 0, 1, 1).unwrap(), 8);
        assert_eq!(conv_out("t", 10, 3, 1, 2, 2).unwrap(), 4);
        assert!(conv_out("t", 2, 3, 0, 1, 1).is_err());
        assert!(conv_out("t", 10, 3, 0, 0, 1).is_err());
        assert!(matches!(
            conv_out("t", usize::MAX, 3, usize::MAX, 1, 1),
            Err(BackendError::SizeOverflow { .. })
        ));
        assert_eq!(conv_tr_out("t", 5, 3, 0, 0, 2, 1).unwrap(), 11);
        assert_eq!(conv_tr_out("t", 5, 3, 1, 1, 2, 1).unwrap(), 10);
        assert!(conv_tr_out("t", 1, 1, 3, 0, 1, 1).is_err());
        assert_eq!(conv_tr_out("t", 1, 2, 1, 0, 1, 1).unwrap(), 0);
    }

    /// Huge dims or parameters give [`BackendError::SizeOverflow`], never a wrapped size or a
    /// panic; a padding larger than the output stays an invalid argument.
    #[test]
    fn output_size_overflow_is_a_typed_error() {
        let overflow =
            |r: Result<usize, BackendError>| matches!(r, Err(BackendError::SizeOverflow { .. }));
        let big = usize::MAX / 2 + 1;
        assert!(overflow(conv_out("conv2d", 10, usize::MAX, 0, 1, 3)));
        assert!(overflow(conv_tr_out(
            "conv_transpose1d",
            big,
            3,
            0,
            0,
            4,
            1
        )));
        assert!(overflow(conv_tr_out(
            "conv_transpose1d",
            5,
            big,
            0,
            0,
            1,
            4
        )));
        assert!(overflow(conv_tr_out(
            "conv_transpose1d",
            2,
            1,
            0,
            usize::MAX,
            1,
            1
        )));
        let e = conv_tr_out("conv_transpose2d", big, 3, 0, 0, 4, 1).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("conv_transpose2d: the output length")
                && msg.contains("overflows usize")
                && msg.contains("To fix"),
            "{msg}"
        );
        let padding = conv_tr_out("t", 1, 1, 3, 0, 1, 1).unwrap_err();
        assert!(
            matches!(padding, BackendError::Parameter { .. }),
            "{padding}"
        );
        // What the ops compute from the output sizes: upsampling to a huge size, an im2col
        // buffer, a transposed convolution's output.
        assert!(overflow(out_el_2d(
            "upsample_nearest2d",
            (2, 3),
            (1 << 40, 1 << 40)
        )));
        assert!(overflow(out_el_2d("avg_pool2d", (big, 3), (2, 2))));
        assert_eq!(
            out_el_2d("upsample_bilinear2d", (2, 3), (8, 9)).unwrap(),
            432
        );
        let h_out = conv_out("conv2d", 1 << 33, 1, 0, 1, 1).unwrap();
        let im2col = checked_product("im2col", "column buffer length", &[4, h_out, h_out, 3]);
        assert!(overflow(im2col));
    }
}
