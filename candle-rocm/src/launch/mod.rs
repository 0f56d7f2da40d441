//! Launchers: typed functions over device buffers and shapes that queue our kernel modules
//! (and rocBLAS) on a device's stream. They never see the storage type; the ops above them
//! dispatch on dtype and call them. This file holds the kernel naming shared by the ops that
//! launch candle's kernels.

use candle_core::{DType, WithDType};
use candle_rocm_kernels::Module;

pub mod attention;
pub mod candle;
pub mod conv;
pub mod conv_plan;
pub mod copy;
pub mod elementwise;
pub mod gemm;
pub mod gemv;
pub mod rows;
pub mod strides;
pub mod transpose;

/// Candle's kernel name for an op root and element type, e.g. `affine_f32`. candle-kernels
/// spells f8e4m3 `f8_e4m3`, except in its unary math kernels (`uexp_fp8_e4m3`, ...).
pub fn kernel_name<T: WithDType>(root: &str) -> String {
    format!("{root}_{}", kernel_suffix(T::DTYPE, root))
}

/// The dtype part of candle's kernel name for `root`.
pub(crate) fn kernel_suffix(dtype: DType, root: &str) -> &'static str {
    match dtype {
        DType::F8E4M3 if root.starts_with('u') && root != "ucopy" => "fp8_e4m3",
        DType::F8E4M3 => "f8_e4m3",
        d => d.as_str(),
    }
}

/// The dtype part of a kernel name for a pure copy of `T`'s bits: f8e4m3 is moved by the
/// `u8` kernels (our index and where modules have no separate FP8 versions).
pub fn bits_suffix<T: WithDType>() -> &'static str {
    match T::DTYPE {
        DType::F8E4M3 => "u8",
        d => d.as_str(),
    }
}

/// The module holding `base`'s kernels for `dtype`: candle-kernels has no i16/i32 versions of
/// the elementwise, fill and reduction kernels, so those come from our `small_int` module.
pub fn module_for(base: Module, dtype: DType) -> Module {
    match (base, dtype) {
        (
            Module::Unary | Module::Binary | Module::Fill | Module::Reduce,
            DType::I16 | DType::I32,
        ) => Module::SmallInt,
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_ints_use_our_module() {
        assert_eq!(module_for(Module::Binary, DType::I16), Module::SmallInt);
        assert_eq!(module_for(Module::Reduce, DType::I32), Module::SmallInt);
        assert_eq!(module_for(Module::Binary, DType::I64), Module::Binary);
        assert_eq!(module_for(Module::Conv, DType::I32), Module::Conv);
        assert_eq!(kernel_name::<f32>("affine"), "affine_f32");
        assert_eq!(kernel_name::<float8::F8E4M3>("uexp"), "uexp_fp8_e4m3");
        assert_eq!(kernel_name::<float8::F8E4M3>("ucopy"), "ucopy_f8_e4m3");
        assert_eq!(kernel_name::<float8::F8E4M3>("badd"), "badd_f8_e4m3");
        assert_eq!(bits_suffix::<float8::F8E4M3>(), "u8");
    }
}
