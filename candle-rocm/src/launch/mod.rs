//! Launchers: typed functions over device buffers and shapes that queue our kernel modules
//! (and rocBLAS) on a device's stream. They never see the storage type; the ops above them
//! dispatch on dtype and call them. This file holds the kernel naming shared by the ops that
//! launch candle's kernels.

use candle_core::{DType, WithDType};
use candle_rocm_kernels::Module;

pub mod attention;
pub mod batch_norm;
pub mod candle;
pub mod collective;
pub mod conv;
pub mod conv_igemm;
pub mod conv_plan;
pub mod conv_tiles;
pub mod copy;
pub mod elementwise;
pub mod gemm;
pub mod gemv;
pub mod gemv_nn;
pub mod group_norm;
pub mod rope_cache;
pub mod row_elementwise;
pub mod rows;
pub mod strides;
pub mod transpose;
pub mod upsample;

#[cfg(test)]
pub(crate) mod arg_layout;

/// A kernel name built on the stack: the names of one launch are formatted per op, and a
/// `String` there would be an allocation per launch. Names longer than the inline buffer
/// (none of ours) move to the heap rather than fail.
#[derive(Clone)]
pub struct KernelName {
    buf: [u8; KernelName::INLINE],
    len: usize,
    heap: Option<String>,
}

impl KernelName {
    /// Bytes held inline.
    const INLINE: usize = 64;

    /// The formatted name.
    pub fn format(args: std::fmt::Arguments<'_>) -> KernelName {
        let mut n = KernelName {
            buf: [0; KernelName::INLINE],
            len: 0,
            heap: None,
        };
        // Writing to a KernelName never fails (it spills to the heap).
        let _ = std::fmt::Write::write_fmt(&mut n, args);
        n
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        match &self.heap {
            Some(s) => s,
            // Only whole `&str`s are appended to `buf`, so its prefix is UTF-8.
            None => std::str::from_utf8(&self.buf[..self.len]).unwrap_or_default(),
        }
    }
}

impl std::fmt::Write for KernelName {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if let Some(h) = &mut self.heap {
            h.push_str(s);
            return Ok(());
        }
        match self.buf.get_mut(self.len..self.len + s.len()) {
            Some(dst) => {
                dst.copy_from_slice(s.as_bytes());
                self.len += s.len();
            }
            None => {
                let mut h = String::with_capacity(self.len + s.len());
                h.push_str(self.as_str());
                h.push_str(s);
                self.heap = Some(h);
            }
        }
        Ok(())
    }
}

impl std::ops::Deref for KernelName {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Display for KernelName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self)
    }
}

impl std::fmt::Debug for KernelName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq<&str> for KernelName {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// `format!` for kernel names, on the stack ([`KernelName`]).
macro_rules! kname {
    ($($t:tt)*) => {
        $crate::launch::KernelName::format(format_args!($($t)*))
    };
}
pub(crate) use kname;

/// Candle's kernel name for an op root and element type, e.g. `affine_f32`. candle-kernels
/// spells f8e4m3 `f8_e4m3`, except in its unary math kernels (`uexp_fp8_e4m3`, ...).
pub fn kernel_name<T: WithDType>(root: &str) -> KernelName {
    kname!("{root}_{}", kernel_suffix(T::DTYPE, root))
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

    #[test]
    fn kernel_names_on_the_stack_and_past_it() {
        let n = kname!("is_{}_{}", "u32", "f16");
        assert_eq!(n, "is_u32_f16");
        assert_eq!(n.to_string(), "is_u32_f16");
        assert_eq!(format!("{n:?}"), "\"is_u32_f16\"");
        let long = "x".repeat(100);
        let n = kname!("{}_{}_{long}", "a", "b");
        assert_eq!(n.len(), 104, "spilled to the heap whole");
        assert!(n.starts_with("a_b_x") && n.ends_with("xx"));
        let edge = "y".repeat(63);
        assert_eq!(&*kname!("{edge}_z"), format!("{edge}_z"));
    }
}
