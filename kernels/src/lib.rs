//! The GPU code of candle-rocm: which device-code modules exist, which AMD targets they are
//! built for, and the prebuilt code objects themselves.
//!
//! `cargo xtask kernels` compiles candle-kernels' `.cu` sources (read from the cargo registry)
//! and our own `kernels/hip/*.hip` (`rand`, `index`, `convert`, `where`, `small_int`, `rows`,
//! `elementwise`, `qmatvec`, `copy`, `gemv`, `attention`, `conv_igemm`, `collective`) through the compatibility headers in `kernels/include/` into one
//! HSA code object per (module, target), deflate-compressed under `kernels/objects/` and listed in
//! `kernels/manifest.json`; `src/objects.rs` embeds them. [`code_object()`] returns one,
//! decompressed; [`code_object::CodeObject`] reads a code object's kernel list and resource
//! use. This crate does not depend on candle-core.

pub mod code_object;
#[cfg(feature = "embed")]
#[rustfmt::skip]
mod objects;

/// Without the `embed` feature, no code object is embedded.
#[cfg(not(feature = "embed"))]
mod objects {
    /// Embedded code objects: none in this build.
    pub(crate) static OBJECTS: &[(crate::Module, &str, &[u8])] = &[];
}

/// A device-code module: one per source file candle-core's CUDA backend loads (from
/// candle-kernels), plus our own (`kernels/hip/<name>.hip`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Module {
    /// `affine.cu`: `x * mul + add`.
    Affine,
    /// `binary.cu`: elementwise binary ops with broadcasting.
    Binary,
    /// `cast.cu`: dtype conversions.
    Cast,
    /// `conv.cu`: im2col, col2im, pooling, upsampling.
    Conv,
    /// `fill.cu`: constant fills and copies.
    Fill,
    /// `indexing.cu`: gather, scatter, index-select, index-add.
    Indexing,
    /// `quantized.cu`: GGUF dequantisation and mat-vec kernels.
    Quantized,
    /// `reduce.cu`: sums, min/max, argmin/argmax, softmax, norms, rope.
    Reduce,
    /// `sort.cu`: argsort.
    Sort,
    /// `ternary.cu`: `where_cond`.
    Ternary,
    /// `unary.cu`: elementwise unary ops.
    Unary,
    /// Ours, `rand.hip`: counter-based (Philox4x32-10) uniform and normal random numbers.
    Rand,
    /// Ours, `index.hip`: bounds-safe index-select, gather, scatter (set and add) and
    /// index-add for u8/u32/i64 indices and all nine dtypes.
    Index,
    /// Ours, `convert.hip`: dtype conversions between all nine dtypes with Rust `as` semantics.
    Convert,
    /// Ours, `where.hip`: `where_cond` for u8/u32/i16/i32/i64 conditions and all nine dtypes.
    Where,
    /// Ours, `small_int.hip`: the copy, binary, comparison, fill and reduction kernels
    /// candle-kernels lacks for i16 and i32, under candle-kernels' names.
    SmallInt,
    /// Ours, `rows.hip`: last-dim reductions (sum, min, max, argmin, argmax), fused softmax,
    /// RMS and layer norm over the last dim, and a tiled transpose; vectorised, wave-size
    /// aware, sizes passed by value.
    Rows,
    /// Ours, `elementwise.hip`: unary, affine, elu, powf, binary and float-cast kernels with a
    /// vectorised (128-bit) contiguous path and a strided path that takes its shape by value.
    Elementwise,
    /// Ours, `qmatvec.hip`: quantized (q4_0, q4_1, q8_0, q4_K, q5_K, q6_K) matrix-vector
    /// products for GGUF decode, one f32 row against GGML blocks, wave-size aware.
    Qmatvec,
    /// Ours, `copy.hip`: batched 2-D copies, the copies of one `cat` in a single launch, for
    /// elements of 1, 2, 4 and 8 bytes.
    Copy,
    /// Ours, `gemv.hip`: `x w^T` (`gemv_*`) and `x w` (`gemv_nn_*`) for up to 8 rows of x
    /// (decode-shaped matrix products: linear layers, attention's `q k^T` and `att v`) in f32,
    /// f16 and bf16, accumulated in f32, wave-size aware.
    Gemv,
    /// Ours, `attention.hip`: flash attention (tiled online softmax, dense, variable-length
    /// and paged calls, split over the keys for decoding), the combine of the splits, and the
    /// paged-cache write, in f32, f16 and bf16.
    Attention,
    /// Ours, `conv_igemm.hip`: forward convolutions as an implicit GEMM on matrix units (f16,
    /// bf16; the patches gathered into shared memory, no column matrix), where the target has
    /// matrix units (empty elsewhere).
    ConvIgemm,
    /// Ours, `collective.hip`: the one-shot all-reduce (sum) between the GPUs of one host,
    /// reading the peers' shared memory directly (f32, f16, bf16).
    Collective,
}

/// Where a module's source comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `<name>.cu` of the crates.io package candle-kernels, read from the cargo registry.
    Candle,
    /// `kernels/hip/<name>.hip` in this repository.
    Ours,
}

impl Module {
    /// Every module, in a fixed order (usable as an index).
    pub const ALL: [Module; 24] = [
        Module::Affine,
        Module::Binary,
        Module::Cast,
        Module::Conv,
        Module::Fill,
        Module::Indexing,
        Module::Quantized,
        Module::Reduce,
        Module::Sort,
        Module::Ternary,
        Module::Unary,
        Module::Rand,
        Module::Index,
        Module::Convert,
        Module::Where,
        Module::SmallInt,
        Module::Rows,
        Module::Elementwise,
        Module::Qmatvec,
        Module::Copy,
        Module::Gemv,
        Module::Attention,
        Module::ConvIgemm,
        Module::Collective,
    ];

    /// The source file's stem, e.g. `binary`.
    pub fn name(self) -> &'static str {
        match self {
            Module::Affine => "affine",
            Module::Binary => "binary",
            Module::Cast => "cast",
            Module::Conv => "conv",
            Module::Fill => "fill",
            Module::Indexing => "indexing",
            Module::Quantized => "quantized",
            Module::Reduce => "reduce",
            Module::Sort => "sort",
            Module::Ternary => "ternary",
            Module::Unary => "unary",
            Module::Rand => "rand",
            Module::Index => "index",
            Module::Convert => "convert",
            Module::Where => "where",
            Module::SmallInt => "small_int",
            Module::Rows => "rows",
            Module::Elementwise => "elementwise",
            Module::Qmatvec => "qmatvec",
            Module::Copy => "copy",
            Module::Gemv => "gemv",
            Module::Attention => "attention",
            Module::ConvIgemm => "conv_igemm",
            Module::Collective => "collective",
        }
    }

    /// Where the module's source lives.
    pub fn source(self) -> Source {
        match self {
            Module::Rand
            | Module::Index
            | Module::Convert
            | Module::Where
            | Module::SmallInt
            | Module::Rows
            | Module::Elementwise
            | Module::Qmatvec
            | Module::Copy
            | Module::Gemv
            | Module::Attention
            | Module::ConvIgemm
            | Module::Collective => Source::Ours,
            _ => Source::Candle,
        }
    }
}

/// Kernels that only some targets' code objects define, by name prefix: the matrix-unit tiles of
/// flash attention (`fa_mma_*` prefill, `fa_mdec_*` decode), built where the target has matrix
/// units and the tier compiles without spills, and the implicit-GEMM convolutions
/// (`conv_igemm_*`), built where the target has matrix units. candle-rocm looks them up as
/// optional and falls back to the FMA kernels or the im2col-tile GEMM path.
pub const OPTIONAL_KERNEL_PREFIXES: &[&str] = &["fa_mma_", "fa_mdec_", "conv_igemm_"];

/// Whether kernel `name` is one that only some targets define ([`OPTIONAL_KERNEL_PREFIXES`]).
pub fn is_optional_kernel(name: &str) -> bool {
    OPTIONAL_KERNEL_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Exact GPU targets code objects are built for (the design's target list).
pub const TARGETS: &[&str] = &[
    "gfx90a", "gfx942", "gfx1030", "gfx1100", "gfx1101", "gfx1102", "gfx1151", "gfx1200", "gfx1201",
];

/// LLVM generic targets built as fallbacks for processors of the same family.
pub const GENERIC_TARGETS: &[&str] = &[
    "gfx9-generic",
    "gfx10-3-generic",
    "gfx11-generic",
    "gfx12-generic",
];

/// Variable naming a directory of code objects that overrides the embedded ones (e.g. built
/// for an unsupported architecture, or with nvcc for the HIP-on-CUDA test harness).
pub const KERNELS_DIR_VAR: &str = "CANDLE_ROCM_KERNELS_DIR";

/// Largest decompressed code object accepted (a corrupt stream cannot exhaust memory).
const MAX_OBJECT_BYTES: usize = 256 << 20;

/// The embedded code object of `module` for `target`, decompressed; `None` when this build
/// embeds none for that pair, `Some(Err(reason))` when the embedded data is corrupt.
pub fn code_object(module: Module, target: &str) -> Option<Result<Vec<u8>, String>> {
    objects::OBJECTS
        .iter()
        .find(|(m, t, _)| *m == module && *t == target)
        .map(|(_, _, packed)| {
            miniz_oxide::inflate::decompress_to_vec_with_limit(packed, MAX_OBJECT_BYTES)
                .map_err(|e| format!("embedded {}.{target} is corrupt: {e:?}", module.name()))
        })
}

/// Every embedded (module, target) pair.
pub fn embedded() -> impl Iterator<Item = (Module, &'static str)> {
    objects::OBJECTS.iter().map(|(m, t, _)| (*m, *t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_are_unique() {
        let mut names: Vec<_> = Module::ALL.iter().map(|m| m.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Module::ALL.len());
    }
}
