//! The dtype table: [`with_dtypes!`], the one list of the dtypes the backend stores, and what
//! is generated from it: [`RocmStorageSlice`] (a typed device buffer, one variant per dtype),
//! the [`RocmDType`] element trait, [`STORED_DTYPES`], and the [`for_each_slice!`] /
//! [`match_dtype!`] dispatch macros. A leaf: it imports nothing of the crate.

use candle_core::scalar::Scalar;
use candle_core::{DType, WithDType};
use rocm_safe::{DeviceBuffer, DeviceRepr};

/// Calls `$callback! { $args <the dtypes> }`, the dtypes being one `Variant(element type,
/// "doc"),` each. `Variant` names the dtype alike in [`RocmStorageSlice`], [`DType`],
/// [`CpuStorage`] and candle's `Scalar`.
///
/// This is the one place the dtypes are written out: the storage enum, the [`RocmDType`]
/// impls and every dispatch over dtypes ([`for_each_slice!`], [`match_dtype!`],
/// `dispatch::same_dtype!`) are generated from it, so adding a dtype is one line here (plus its
/// kernels).
macro_rules! with_dtypes {
    ($($callback:tt)::+ ! { $($args:tt)* }) => {
        $($callback)::+! {
            $($args)*
            U8(u8, "`u8`."),
            U32(u32, "`u32`."),
            I16(i16, "`i16`."),
            I32(i32, "`i32`."),
            I64(i64, "`i64`."),
            BF16(::half::bf16, "`bf16`."),
            F16(::half::f16, "`f16`."),
            F32(f32, "`f32`."),
            F64(f64, "`f64`."),
            F8E4M3(::float8::F8E4M3, "`f8e4m3` (FP8, 4-bit exponent, 3-bit mantissa)."),
        }
    };
}
pub(crate) use with_dtypes;

/// Every dtype a tensor stores on the GPU holds, in `with_dtypes!`'s order (Candle's MX types F6E2M3,
/// F6E3M2, F4 and F8E8M0 have no storage on any GPU backend).
pub const STORED_DTYPES: [DType; 10] = {
    macro_rules! list {
        ($($v:ident($t:ty, $doc:literal),)*) => {
            [$(DType::$v),*]
        };
    }
    with_dtypes!(list! {})
};

/// An element type a [`RocmStorageSlice`] can hold (candle-core's CUDA backend has the same
/// trait, `CudaDType`).
pub trait RocmDType: DeviceRepr + WithDType {
    /// Wraps a buffer in its slice variant.
    fn wrap_slice(buf: DeviceBuffer<Self>) -> RocmStorageSlice;
    /// The buffer, when `s` holds this type.
    fn as_buffer(s: &RocmStorageSlice) -> Option<&DeviceBuffer<Self>>;
    /// The value, when `s` is of this type.
    fn from_scalar(s: Scalar) -> Option<Self>;
}

/// The storage enum, its [`RocmDType`] impls and [`RocmStorageSlice::dtype`], one variant per
/// dtype of [`with_dtypes!`].
macro_rules! storage_slice {
    ($($v:ident($t:ty, $doc:literal),)*) => {
        /// The typed buffer behind a `RocmStorage`.
        pub enum RocmStorageSlice {
            $(
                #[doc = $doc]
                $v(DeviceBuffer<$t>),
            )*
        }

        $(
            impl RocmDType for $t {
                fn wrap_slice(buf: DeviceBuffer<Self>) -> RocmStorageSlice {
                    RocmStorageSlice::$v(buf)
                }
                fn as_buffer(s: &RocmStorageSlice) -> Option<&DeviceBuffer<Self>> {
                    match s {
                        RocmStorageSlice::$v(b) => Some(b),
                        _ => None,
                    }
                }
                fn from_scalar(s: Scalar) -> Option<Self> {
                    match s {
                        Scalar::$v(v) => Some(v),
                        _ => None,
                    }
                }
            }
        )*

        impl RocmStorageSlice {
            /// The dtype of the buffer.
            pub fn dtype(&self) -> DType {
                match self {
                    $(RocmStorageSlice::$v(_) => DType::$v,)*
                }
            }
        }
    };
}
with_dtypes!(storage_slice! {});

/// `match $slice { RocmStorageSlice::U8($b) => $body, ... }`: applies `$body` to the buffer
/// of whichever dtype `$slice` holds, bound to `$b`.
macro_rules! for_each_slice {
    (@arms ($slice:expr, $b:ident, $body:expr) $($v:ident($t:ty, $doc:literal),)*) => {
        match $slice {
            $($crate::dtype::RocmStorageSlice::$v($b) => $body,)*
        }
    };
    ($slice:expr, $b:ident => $body:expr) => {
        $crate::dtype::with_dtypes!(
            $crate::dtype::for_each_slice! { @arms ($slice, $b, $body) }
        )
    };
}
pub(crate) use for_each_slice;

/// `match $dtype { DType::U8 => { type $T = u8; $body } ..., $other => $fallback }`: runs
/// `$body` with `$T` naming the element type of `$dtype`; dtypes the backend does not store
/// go to `$other => $fallback`.
macro_rules! match_dtype {
    (@arms ($dtype:expr, $T:ident, $body:expr, $other:pat, $fallback:expr)
        $($v:ident($t:ty, $doc:literal),)*) => {
        match $dtype {
            $(::candle_core::DType::$v => {
                type $T = $t;
                $body
            })*
            $other => $fallback,
        }
    };
    ($dtype:expr, $T:ident => $body:expr, $other:pat => $fallback:expr $(,)?) => {
        $crate::dtype::with_dtypes!(
            $crate::dtype::match_dtype! { @arms ($dtype, $T, $body, $other, $fallback) }
        )
    };
}
pub(crate) use match_dtype;

impl RocmStorageSlice {
    /// Wraps a typed buffer.
    pub fn from_buffer<T: RocmDType>(buf: DeviceBuffer<T>) -> Self {
        T::wrap_slice(buf)
    }

    /// Number of elements in the buffer.
    pub fn len(&self) -> usize {
        for_each_slice!(self, b => b.len())
    }

    /// Queues a fill of the whole buffer with zero bytes (zero in every dtype).
    pub(crate) fn fill_zeros(&mut self, stream: &rocm_safe::Stream) -> rocm_safe::Result<()> {
        for_each_slice!(self, b => stream.memset_zeros(b))
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_dispatch_follows_the_list() {
        let dtypes = STORED_DTYPES;
        assert_eq!(
            dtypes.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
            ["u8", "u32", "i16", "i32", "i64", "bf16", "f16", "f32", "f64", "f8e4m3"]
        );
        for &d in &dtypes {
            assert_eq!(match_dtype!(d, T => Some(T::DTYPE), _ => None), Some(d));
            for &other in &dtypes {
                let got =
                    match_dtype!(d, T => T::from_scalar(Scalar::zero(other)).is_some(), _ => false);
                assert_eq!(got, d == other, "{d:?} from a {other:?} scalar");
            }
        }
        // Dtypes candle has and the backend does not store take the fallback arm.
        for d in [DType::F6E2M3, DType::F6E3M2, DType::F4, DType::F8E8M0] {
            assert_eq!(match_dtype!(d, T => Some(T::DTYPE), _ => None), None);
        }
    }
}
