//! Every `CANDLE_ROCM_*` setting of the library, in one place: each variable is read from the
//! environment once per process, with one grammar for switches, and a value this module does
//! not accept is a `tracing` warning naming the accepted values (the default then applies),
//! never silently ignored. [`SETTINGS`] lists them all; the README's settings table is checked
//! against it.
//!
//! The lowest level of the crate: it imports nothing of it.

use std::path::PathBuf;
use std::sync::OnceLock;

pub use candle_rocm_kernels::KERNELS_DIR_VAR;

/// `1` turns every CPU fallback of the `candle` feature's backend slot into an error (the
/// GPU tests run this way).
pub const STRICT_VAR: &str = "CANDLE_ROCM_STRICT";

/// `0` turns our fast kernel modules off (`elementwise`, `rows`, `gemv`, the batched `copy`):
/// candle's kernels and rocBLAS then run every op they cover (for side-by-side measurements,
/// and as an escape hatch).
pub const FAST_KERNELS_VAR: &str = "CANDLE_ROCM_FAST_KERNELS";

/// `0` turns the batched copies of `cat` off: each input then takes its own `copy2d` launch,
/// as in candle's CUDA backend ([`FAST_KERNELS_VAR`]`=0` turns them off too).
pub const BATCHED_COPY_VAR: &str = "CANDLE_ROCM_BATCHED_COPY";

/// `0` keeps flash attention's prefill on the FMA tile (`fa_fwd_*`) where the device's code
/// object also has the matrix-unit tile (`fa_mma_*`: MFMA on gfx90a/gfx942, WMMA on gfx12,
/// tensor cores on the HIP-on-CUDA harness), for comparison.
pub const FLASH_MMA_VAR: &str = "CANDLE_ROCM_FLASH_MMA";

/// The most keys (of the longest sequence) a flash-attention decode call may have and still
/// run the short decode kernels (`fa_sdec*`, `kernels/hip/attention/short_dec.h`), which keep
/// a short context's latency down; longer calls take the split decode kernels. 0 to 65536
/// (0: never), default [`SHORT_DECODE_KEYS_DEFAULT`].
pub const SHORT_DECODE_KEYS_VAR: &str = "CANDLE_ROCM_SHORT_DECODE_KEYS";

/// Default of [`SHORT_DECODE_KEYS_VAR`].
pub const SHORT_DECODE_KEYS_DEFAULT: usize = 256;

/// The activations of the quantized mat-vec (decode, few rows): `f32` (default) keeps them in
/// f32, which follows the f32 model closely; `q8` rounds them to 8 bits per 32-value block
/// exactly as Candle's CUDA backend does (its `quantize_q8_1`) and multiplies with integer dot
/// products (`kernels/hip/qmatvec.hip`'s `qmatvec8_*`), so products come out as Candle CUDA's
/// up to the order of f32 sums and candle-core's `quantized_tests.rs` passes with the
/// expectations of its CUDA arms.
pub const QMATVEC_VAR: &str = "CANDLE_ROCM_QMATVEC";

/// The most rows of activations the quantized mat-vec kernels take (launches of up to 8 rows,
/// 4 for the k-quants, each reading the weights once) before a product moves on to the tiled
/// kernels ([`QMATMUL_ROWS_VAR`]) or to one f16 GEMM on dequantized weights: 1 to 64. Unset,
/// the measured per-type default of `quantized::qmatmul_path` (8 rows, 6 for the 32-value block
/// types in f32, whose 7 and 8 rows the register-tiled kernels take; the measurements are in
/// bench/results and the README's speed section).
pub const QMATVEC_ROWS_VAR: &str = "CANDLE_ROCM_QMATVEC_ROWS";

/// Where the quantized mat-vec of one f32 activation row (decode) runs on the split kernels
/// (`qmatvec_split_*`, `kernels/hip/qmatvec/split.h`), which share each row's blocks among up
/// to 8 groups of 32 lanes instead of one: `auto` (the default) for weights of too few rows to
/// give every compute unit a block of the unsplit kernels (`quantized::plan`'s `split_pays`;
/// where they were measured faster, bench/results), `1` for all, `0` for none. Other row
/// counts, and [`QMATVEC_VAR`]`=q8`, are unchanged.
pub const QMATVEC_SPLIT_VAR: &str = "CANDLE_ROCM_QMATVEC_SPLIT";

/// Default of [`QMATVEC_ROWS_VAR`] for the k-quants and in q8 mode (see there).
pub const QMATVEC_ROWS_DEFAULT: usize = 8;

/// The most rows of activations the tiled quantized kernels take (in f32 the register-tiled
/// `qmr_*`, at most 16 rows; `qmm8_*` with [`QMATVEC_VAR`]`=q8`) once a product has more rows
/// than the mat-vec takes; past it the weights dequantize to f16 for one GEMM: 0 to 4096, default
/// [`QMATMUL_ROWS_DEFAULT`] (measured: past 8 rows the tiled kernels do not beat the GEMM).
pub const QMATMUL_ROWS_VAR: &str = "CANDLE_ROCM_QMATMUL_ROWS";

/// Default of [`QMATMUL_ROWS_VAR`].
pub const QMATMUL_ROWS_DEFAULT: usize = 8;

/// The convolution and pooling path: `auto` (default: MIOpen, when installed, for the
/// convolutions large enough that its host cost does not dominate, our path for the rest and
/// for the pools), `im2col` or `miopen` (see `ops::conv::miopen`).
pub const CONV_VAR: &str = "CANDLE_ROCM_CONV";

/// The most column matrix, in MiB, one tile of the convolutions' GEMM path writes
/// (`launch::conv`): 0 to 1024, default [`CONV_TILE_MIB_DEFAULT`]; smaller tiles stay in the GPU's
/// cache between the im2col and the GEMM, larger ones take fewer launches. `0` turns the GEMM
/// path off: candle's whole-tensor im2col, then one GEMM and a permuting copy (the path before
/// 2026-11-26, for comparisons).
pub const CONV_TILE_VAR: &str = "CANDLE_ROCM_CONV_TILE_MIB";

/// Default of [`CONV_TILE_VAR`].
pub const CONV_TILE_MIB_DEFAULT: usize = 64;

/// Whether f16/bf16 convolutions on our GEMM path that are not pointwise run the implicit GEMM
/// (`launch::conv_igemm`: the patches gathered in shared memory, matrix units, no column
/// matrix) where the device's code object has it (targets with matrix units) and the shape is
/// one it was measured faster on (`launch::conv::implicit_gemm_pays`); on by default. `0`
/// keeps them on the im2col tiles feeding rocBLAS, for comparisons.
pub const CONV_IGEMM_VAR: &str = "CANDLE_ROCM_CONV_IGEMM";

/// Whether MIOpen times its candidates the first time it sees a convolution shape
/// (`miopenFindConvolution*Algorithm`; seconds per new shape on an AMD GPU unless MIOpen's
/// find-db has it) instead of taking its immediate-mode ranking (the default, off).
pub const MIOPEN_FIND_VAR: &str = "CANDLE_ROCM_MIOPEN_FIND";

/// Graph mode for every device, on by default (`0` turns it off): each device's stream records
/// its kernels into HIP graphs and launches each recorded stretch with one call when the host
/// next needs a result, or after [`GRAPH_NODES_VAR`] operations (see `rocm_safe::graph`'s
/// batching). Results are those of plain launches. A runtime without graphs runs plain
/// launches, saying why in a warning.
pub const GRAPHS_VAR: &str = "CANDLE_ROCM_GRAPHS";

/// With [`GRAPHS_VAR`] on: launch a recorded stretch after this many operations even when no
/// result is needed yet, so the GPU starts while the host records the rest: 0 (no limit) to
/// 100000, default [`GRAPH_NODES_DEFAULT`].
pub const GRAPH_NODES_VAR: &str = "CANDLE_ROCM_GRAPH_NODES";

/// Default of [`GRAPH_NODES_VAR`] (measured on the H100 harness: 48 beat 128 and no limit on
/// every decoder row; see bench/results).
pub const GRAPH_NODES_DEFAULT: usize = 48;

/// With [`GRAPHS_VAR`] on: after each launch a result was needed for (a read-back, e.g. a
/// decode step's sampled token), the first recorded stretch ends after this many operations
/// and each next one after twice as many as the one before, up to [`GRAPH_NODES_VAR`], so the
/// GPU, idle while the host waited, gets work before a whole stretch is recorded: 0 (every
/// stretch [`GRAPH_NODES_VAR`] long) to 100000, default [`GRAPH_FIRST_NODES_DEFAULT`].
pub const GRAPH_FIRST_NODES_VAR: &str = "CANDLE_ROCM_GRAPH_FIRST_NODES";

/// Default of [`GRAPH_FIRST_NODES_VAR`] (measured on the H100 harness: 16 against 0 and 8 on
/// the 1.1B decoder rows, 6.5% less time a token on their mean; see bench/results).
pub const GRAPH_FIRST_NODES_DEFAULT: usize = 16;

/// With [`GRAPHS_VAR`] on: record rocBLAS calls into the graphs too (by default a rocBLAS
/// call launches what was recorded and runs on its own).
pub const GRAPH_BLAS_VAR: &str = "CANDLE_ROCM_GRAPH_BLAS";

/// With [`GRAPHS_VAR`] on: record RCCL collectives into the graphs too (by default a
/// collective launches what was recorded and is queued on its own, so a tensor-parallel step
/// is one graph per collective). Off by default until measured on several GPUs.
pub const GRAPH_RCCL_VAR: &str = "CANDLE_ROCM_GRAPH_RCCL";

/// Off: every all-reduce between GPUs goes through RCCL. On (the default): a sum of f32, f16 or
/// bf16 of at most `ops::peer_reduce::MAX_BYTES` between the GPUs of one host that reach each
/// other is one kernel reading the peers' memory directly (a one-shot all-reduce). Must be the
/// same on every rank.
pub const PEER_ALLREDUCE_VAR: &str = "CANDLE_ROCM_PEER_ALLREDUCE";

/// With [`PEER_ALLREDUCE_VAR`] on: on (the default), the one-shot all-reduces of at most 128 KiB
/// (and the fused all-reduce + norm of up to 8 rows of at most 16 KiB) send their data straight
/// into the peers' memory, where it is its own flag (no fence or flag store); off: they read the
/// peers' memory after a flag handshake, as larger ones do. Any rank off turns it off for all.
pub const PEER_LAMPORT_VAR: &str = "CANDLE_ROCM_PEER_LAMPORT";

/// One setting, as the README's table shows it.
#[derive(Clone, Copy, Debug)]
pub struct Setting {
    /// The environment variable.
    pub var: &'static str,
    /// The values it takes.
    pub values: &'static str,
    /// What applies when it is unset.
    pub default: &'static str,
}

/// Every setting of the library.
pub const SETTINGS: [Setting; 21] = [
    Setting {
        var: STRICT_VAR,
        values: SWITCH_VALUES,
        default: "0",
    },
    Setting {
        var: FAST_KERNELS_VAR,
        values: SWITCH_VALUES,
        default: "1",
    },
    Setting {
        var: BATCHED_COPY_VAR,
        values: SWITCH_VALUES,
        default: "1",
    },
    Setting {
        var: FLASH_MMA_VAR,
        values: SWITCH_VALUES,
        default: "1",
    },
    Setting {
        var: SHORT_DECODE_KEYS_VAR,
        values: "0 to 65536",
        default: "256",
    },
    Setting {
        var: QMATVEC_VAR,
        values: "f32, q8",
        default: "f32",
    },
    Setting {
        var: QMATVEC_ROWS_VAR,
        values: "1 to 64",
        default: "8 (6 for 32-value block types in f32)",
    },
    Setting {
        var: QMATVEC_SPLIT_VAR,
        values: "auto, 0, 1 (or off, on)",
        default: "auto",
    },
    Setting {
        var: QMATMUL_ROWS_VAR,
        values: "0 to 4096",
        default: "8",
    },
    Setting {
        var: CONV_VAR,
        values: "auto, im2col, miopen",
        default: "auto",
    },
    Setting {
        var: CONV_TILE_VAR,
        values: "0 to 1024",
        default: "64",
    },
    Setting {
        var: CONV_IGEMM_VAR,
        values: SWITCH_VALUES,
        default: "1",
    },
    Setting {
        var: MIOPEN_FIND_VAR,
        values: SWITCH_VALUES,
        default: "0",
    },
    Setting {
        var: GRAPHS_VAR,
        values: SWITCH_VALUES,
        default: "1",
    },
    Setting {
        var: GRAPH_NODES_VAR,
        values: "0 to 100000",
        default: "48",
    },
    Setting {
        var: GRAPH_FIRST_NODES_VAR,
        values: "0 to 100000",
        default: "16",
    },
    Setting {
        var: GRAPH_BLAS_VAR,
        values: SWITCH_VALUES,
        default: "0",
    },
    Setting {
        var: GRAPH_RCCL_VAR,
        values: SWITCH_VALUES,
        default: "0",
    },
    Setting {
        var: PEER_ALLREDUCE_VAR,
        values: SWITCH_VALUES,
        default: "1",
    },
    Setting {
        var: PEER_LAMPORT_VAR,
        values: SWITCH_VALUES,
        default: "1",
    },
    Setting {
        var: KERNELS_DIR_VAR,
        values: "a directory",
        default: "unset (embedded code objects only)",
    },
];

/// The values every on/off setting accepts.
pub const SWITCH_VALUES: &str = "1, on, true, yes / 0, off, false, no";

/// An on/off value: `Some(true)` for `1`, `on`, `true`, `yes`; `Some(false)` for `0`, `off`,
/// `false`, `no` (any case, surrounding blanks ignored); `None` for anything else.
pub fn parse_switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Some(true),
        "0" | "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// The value of `var` when it is set and not empty.
fn value(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

/// Whether `var` is set at all (tests that hold only with the defaults check this).
#[cfg(all(test, feature = "candle"))]
pub(crate) fn is_set(var: &str) -> bool {
    std::env::var_os(var).is_some()
}

/// An on/off setting: `default` when unset, else its value (a warning naming the accepted
/// values when it is none of them; the default then applies).
fn switch(var: &str, default: bool) -> bool {
    let Some(v) = value(var) else {
        return default;
    };
    parse_switch(&v).unwrap_or_else(|| {
        let d = if default { "on" } else { "off" };
        tracing::warn!("{var}={v:?} is not one of {SWITCH_VALUES}: keeping the default ({d})");
        default
    })
}

/// A number setting: its value when a number from `min` to `max` (logged, naming `what`
/// runs that many rows); `None` when unset, or set otherwise (a warning: the default stays).
fn rows(var: &str, min: usize, max: usize, what: &str) -> Option<usize> {
    let v = value(var)?;
    match parse_rows(&v, min, max) {
        Some(rows) => {
            tracing::info!("{var}={rows}: up to {rows} rows run {what}");
            Some(rows)
        }
        None => {
            tracing::warn!("{var}={v:?} is not a number from {min} to {max}: keeping the default");
            None
        }
    }
}

/// A row-count value, if it is a number from `min` to `max`.
fn parse_rows(v: &str, min: usize, max: usize) -> Option<usize> {
    v.trim().parse().ok().filter(|r| (min..=max).contains(r))
}

/// Whether CPU fallbacks are errors ([`STRICT_VAR`]).
pub fn strict() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| switch(STRICT_VAR, false))
}

/// Whether our fast kernel modules run ([`FAST_KERNELS_VAR`]).
pub fn fast_kernels() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = switch(FAST_KERNELS_VAR, true);
        if !on {
            tracing::info!("{FAST_KERNELS_VAR}: our fast kernels are off, candle's kernels run");
        }
        on
    })
}

/// Whether `cat` runs its copies batched ([`BATCHED_COPY_VAR`]).
pub fn batched_copy() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = switch(BATCHED_COPY_VAR, true);
        if !on {
            tracing::info!("{BATCHED_COPY_VAR}: cat copies one input per launch");
        }
        fast_kernels() && on
    })
}

/// Whether flash attention's prefill may use the matrix-unit tile ([`FLASH_MMA_VAR`]).
pub fn flash_mma() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = switch(FLASH_MMA_VAR, true);
        if !on {
            tracing::info!("{FLASH_MMA_VAR}: flash attention's prefill stays on the FMA tile");
        }
        on
    })
}

/// The most keys a decode call may have to run the short decode kernels
/// ([`SHORT_DECODE_KEYS_VAR`]; 0: never).
pub fn short_decode_keys() -> usize {
    static KEYS: OnceLock<usize> = OnceLock::new();
    *KEYS.get_or_init(|| match value(SHORT_DECODE_KEYS_VAR) {
        None => SHORT_DECODE_KEYS_DEFAULT,
        Some(v) => match parse_rows(&v, 0, 65536) {
            Some(keys) => {
                tracing::info!("{SHORT_DECODE_KEYS_VAR}={keys}: decode calls of up to {keys} keys run the short decode kernels");
                keys
            }
            None => {
                tracing::warn!("{SHORT_DECODE_KEYS_VAR}={v:?} is not a number from 0 to 65536: keeping {SHORT_DECODE_KEYS_DEFAULT}");
                SHORT_DECODE_KEYS_DEFAULT
            }
        },
    })
}

/// Whether f16/bf16 convolutions may run the implicit GEMM ([`CONV_IGEMM_VAR`]).
pub fn conv_igemm() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = switch(CONV_IGEMM_VAR, true);
        if !on {
            tracing::info!(
                "{CONV_IGEMM_VAR}: f16/bf16 convolutions stay on the im2col tiles (no implicit GEMM)"
            );
        }
        on
    })
}

/// Whether devices start in graph mode ([`GRAPHS_VAR`]).
pub fn graphs() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = switch(GRAPHS_VAR, true);
        if !on {
            tracing::info!("{GRAPHS_VAR}=0: devices launch every kernel on its own");
        }
        on
    })
}

/// Whether graph mode records rocBLAS calls ([`GRAPH_BLAS_VAR`]).
pub fn graph_blas() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| switch(GRAPH_BLAS_VAR, false))
}

/// Whether graph mode records RCCL collectives ([`GRAPH_RCCL_VAR`]).
pub fn graph_rccl() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| switch(GRAPH_RCCL_VAR, false))
}

/// Whether small all-reduces between the GPUs of one host run as one kernel over the peers'
/// memory ([`PEER_ALLREDUCE_VAR`]).
pub fn peer_allreduce() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| switch(PEER_ALLREDUCE_VAR, true))
}

/// Whether the small one-shot all-reduces send their data into the peers' memory
/// ([`PEER_LAMPORT_VAR`]).
pub fn peer_lamport() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| switch(PEER_LAMPORT_VAR, true))
}

/// A graph-mode operation count from `var` (0 to 100000), else `default` (an unparsable
/// value is a warning).
fn graph_count(var: &str, default: usize) -> usize {
    let Some(v) = value(var) else {
        return default;
    };
    parse_rows(&v, 0, 100_000).unwrap_or_else(|| {
        tracing::warn!("{var}={v:?} is not a number from 0 to 100000: keeping {default}");
        default
    })
}

/// Graph mode's node limit ([`GRAPH_NODES_VAR`]; 0: none).
pub fn graph_nodes() -> usize {
    static NODES: OnceLock<usize> = OnceLock::new();
    *NODES.get_or_init(|| graph_count(GRAPH_NODES_VAR, GRAPH_NODES_DEFAULT))
}

/// Graph mode's first stretch after a needed launch ([`GRAPH_FIRST_NODES_VAR`]; 0: none).
pub fn graph_first_nodes() -> usize {
    static NODES: OnceLock<usize> = OnceLock::new();
    *NODES.get_or_init(|| graph_count(GRAPH_FIRST_NODES_VAR, GRAPH_FIRST_NODES_DEFAULT))
}

/// Whether the quantized mat-vec rounds activations to 8 bits ([`QMATVEC_VAR`]).
pub fn qmatvec_q8() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| match value(QMATVEC_VAR) {
        Some(v) if v.trim().eq_ignore_ascii_case("q8") => {
            tracing::info!("{QMATVEC_VAR}=q8: the quantized mat-vec rounds activations to 8 bits");
            true
        }
        Some(v) if !v.trim().eq_ignore_ascii_case("f32") => {
            tracing::warn!("{QMATVEC_VAR}={v:?} is not one of f32, q8: keeping f32 activations");
            false
        }
        _ => false,
    })
}

/// When one-row f32 quantized mat-vecs run the split kernels ([`QMATVEC_SPLIT_VAR`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitMode {
    /// The default: for weights of too few rows to fill the GPU with the unsplit kernels.
    Auto,
    /// Every one-row f32 mat-vec (`1`).
    Always,
    /// None (`0`).
    Never,
}

impl SplitMode {
    /// Parses [`QMATVEC_SPLIT_VAR`]'s value: `auto` (or empty), or a switch value; `None` for
    /// anything else.
    pub fn parse(v: &str) -> Option<SplitMode> {
        if matches!(v.trim().to_ascii_lowercase().as_str(), "" | "auto") {
            return Some(SplitMode::Auto);
        }
        parse_switch(v).map(|on| {
            if on {
                SplitMode::Always
            } else {
                SplitMode::Never
            }
        })
    }
}

/// The split kernels' mode ([`QMATVEC_SPLIT_VAR`]; an unknown value is a warning and means
/// `auto`).
pub fn qmatvec_split() -> SplitMode {
    static MODE: OnceLock<SplitMode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let v = value(QMATVEC_SPLIT_VAR).unwrap_or_default();
        let mode = SplitMode::parse(&v).unwrap_or_else(|| {
            tracing::warn!("{QMATVEC_SPLIT_VAR}={v:?} is not one of auto, 0, 1: using auto");
            SplitMode::Auto
        });
        if mode != SplitMode::Auto {
            tracing::info!("{QMATVEC_SPLIT_VAR}: one-row quantized mat-vecs split: {mode:?}");
        }
        mode
    })
}

/// The most activation rows that run the quantized mat-vec kernels when [`QMATVEC_ROWS_VAR`]
/// sets it; `None` (the measured per-type default) when unset or not a number from 1 to 64.
pub fn qmatvec_rows_set() -> Option<usize> {
    static ROWS: OnceLock<Option<usize>> = OnceLock::new();
    *ROWS.get_or_init(|| rows(QMATVEC_ROWS_VAR, 1, 64, "the mat-vec"))
}

/// The most activation rows that run the tiled quantized kernels ([`QMATMUL_ROWS_VAR`]).
pub fn qmatmul_max_rows() -> usize {
    static ROWS: OnceLock<usize> = OnceLock::new();
    *ROWS.get_or_init(|| {
        rows(QMATMUL_ROWS_VAR, 0, 4096, "the tiled kernels").unwrap_or(QMATMUL_ROWS_DEFAULT)
    })
}

/// The bytes of column matrix one tile of the convolutions' GEMM path may write
/// ([`CONV_TILE_VAR`]); 0 when the GEMM path is off.
pub fn conv_tile_bytes() -> usize {
    static BYTES: OnceLock<usize> = OnceLock::new();
    *BYTES.get_or_init(|| {
        let mib = match value(CONV_TILE_VAR) {
            None => CONV_TILE_MIB_DEFAULT,
            Some(v) => match parse_rows(&v, 0, 1024) {
                Some(0) => {
                    tracing::info!("{CONV_TILE_VAR}=0: the convolutions' GEMM path is off");
                    0
                }
                Some(m) => {
                    tracing::info!("{CONV_TILE_VAR}={m}: convolution tiles of up to {m} MiB");
                    m
                }
                None => {
                    tracing::warn!(
                        "{CONV_TILE_VAR}={v:?} is not a number from 0 to 1024: keeping the \
                         default ({CONV_TILE_MIB_DEFAULT})"
                    );
                    CONV_TILE_MIB_DEFAULT
                }
            },
        };
        mib << 20
    })
}

/// A convolution path ([`CONV_VAR`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvPath {
    /// The default: MIOpen per shape where it is expected faster (`ops::conv::miopen`).
    Auto,
    /// im2col + rocBLAS.
    Im2col,
    /// MIOpen where it applies, im2col otherwise.
    Miopen,
}

impl ConvPath {
    /// Parses [`CONV_VAR`]'s value (case-insensitive; empty is `auto`); `None` for anything
    /// else.
    pub fn parse(v: &str) -> Option<ConvPath> {
        match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Some(ConvPath::Auto),
            "im2col" => Some(ConvPath::Im2col),
            "miopen" => Some(ConvPath::Miopen),
            _ => None,
        }
    }
}

/// The path [`CONV_VAR`] chooses (an unknown value is a warning and means `auto`).
pub fn conv_path() -> ConvPath {
    static PATH: OnceLock<ConvPath> = OnceLock::new();
    *PATH.get_or_init(|| {
        let v = value(CONV_VAR).unwrap_or_default();
        ConvPath::parse(&v).unwrap_or_else(|| {
            tracing::warn!("{CONV_VAR}={v:?} is not one of auto, im2col, miopen: using auto");
            ConvPath::Auto
        })
    })
}

/// Whether MIOpen's find plans new convolution shapes ([`MIOPEN_FIND_VAR`]).
pub fn miopen_find() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let on = switch(MIOPEN_FIND_VAR, false);
        if on {
            tracing::info!("{MIOPEN_FIND_VAR}: MIOpen times its algorithms for each new shape");
        }
        on
    })
}

/// The directory of code objects that [`KERNELS_DIR_VAR`] names, if set and not empty (read
/// each time: a registry reads it once, when its device opens).
pub fn kernels_dir() -> Option<PathBuf> {
    value(KERNELS_DIR_VAR).map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_switch_grammar() {
        for v in ["1", "on", "ON", " true ", "Yes"] {
            assert_eq!(parse_switch(v), Some(true), "{v:?}");
        }
        for v in ["0", "off", "Off", "false", "NO "] {
            assert_eq!(parse_switch(v), Some(false), "{v:?}");
        }
        for v in ["", "2", "enable", "of"] {
            assert_eq!(parse_switch(v), None, "{v:?}");
        }
    }

    #[test]
    fn qmatvec_rows_take_1_to_64() {
        assert_eq!(parse_rows("16", 1, 64), Some(16));
        assert_eq!(parse_rows(" 1 ", 1, 64), Some(1));
        assert_eq!(parse_rows("64", 1, 64), Some(64));
        for bad in ["0", "65", "-3", "eight", ""] {
            assert_eq!(parse_rows(bad, 1, 64), None, "{bad:?}");
        }
    }

    #[test]
    fn qmatmul_rows_take_0_to_4096() {
        assert_eq!(parse_rows("0", 0, 4096), Some(0));
        assert_eq!(parse_rows("4096", 0, 4096), Some(4096));
        assert_eq!(parse_rows("4097", 0, 4096), None);
    }

    #[test]
    fn the_conv_variable_parses() {
        assert_eq!(ConvPath::parse(""), Some(ConvPath::Auto));
        assert_eq!(ConvPath::parse("AUTO"), Some(ConvPath::Auto));
        assert_eq!(ConvPath::parse(" im2col "), Some(ConvPath::Im2col));
        assert_eq!(ConvPath::parse("MIOpen"), Some(ConvPath::Miopen));
        assert_eq!(ConvPath::parse("cudnn"), None);
    }

    #[test]
    fn the_split_variable_parses() {
        assert_eq!(SplitMode::parse(""), Some(SplitMode::Auto));
        assert_eq!(SplitMode::parse(" Auto"), Some(SplitMode::Auto));
        assert_eq!(SplitMode::parse("1"), Some(SplitMode::Always));
        assert_eq!(SplitMode::parse("off"), Some(SplitMode::Never));
        assert_eq!(SplitMode::parse("sometimes"), None);
    }

    #[test]
    fn every_setting_is_listed_once() {
        let mut vars: Vec<_> = SETTINGS.iter().map(|s| s.var).collect();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(vars.len(), SETTINGS.len());
        assert!(vars.iter().all(|v| v.starts_with("CANDLE_ROCM_")));
    }

    /// The README's settings table has a row for every setting.
    #[test]
    fn the_readme_lists_every_setting() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let readme = std::fs::read_to_string(root.join("../README.md")).expect("README.md");
        for s in SETTINGS {
            assert!(
                readme.contains(&format!("| `{}` |", s.var)),
                "README.md's settings table lacks a row for {}",
                s.var
            );
        }
    }
}
