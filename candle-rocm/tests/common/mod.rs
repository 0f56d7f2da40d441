//! Shared pieces of the GPU test suites: the device, a seeded generator of data and layouts,
//! dtype tolerances, comparison against `CpuStorage`, and the per-method case tally.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Mutex;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_rocm::RocmDevice;
use float8::F8E4M3;
use half::{bf16, f16};

/// Device 0, or a panic saying a GPU test ran without one.
pub fn device() -> RocmDevice {
    RocmDevice::new(0).unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"))
}

/// The ten dtypes of `RocmStorage`.
pub const DTYPES: [DType; 10] = candle_rocm::STORED_DTYPES;

/// The float dtypes with random-number kernels.
pub const FLOATS: [DType; 4] = [DType::BF16, DType::F16, DType::F32, DType::F64];

/// xorshift64*: a small, seeded generator so every failure reproduces from its seed.
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// One element of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// A random shape of rank `0..=max_rank` with at most `max_el` elements: sizes favour 1 and
/// small odd numbers, sometimes 0 (empty) and sometimes sizes that straddle the block and
/// wave sizes (63, 64, 65, 1023, 1025).
pub fn random_dims(rng: &mut Rng, max_rank: usize, max_el: usize) -> Vec<usize> {
    let rank = rng.below(max_rank + 1);
    let mut dims = Vec::with_capacity(rank);
    let mut el = 1usize;
    for _ in 0..rank {
        let d = if rng.chance(0.03) {
            0
        } else if rng.chance(0.08) {
            rng.pick(&[63, 64, 65, 1023, 1025])
        } else {
            rng.pick(&[1, 1, 2, 3, 4, 5, 7, 8, 13, 17, 31, 33])
        };
        let d = if d > 0 && el.saturating_mul(d) > max_el {
            (max_el / el.max(1)).max(1)
        } else {
            d
        };
        el = el.saturating_mul(d);
        dims.push(d);
    }
    dims
}

/// Row-major strides of `dims`.
pub fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(1);
    }
    s
}

/// Elements a buffer needs for `layout` (offset plus the reach of the last element).
pub fn buffer_len(layout: &Layout) -> usize {
    if layout.shape().elem_count() == 0 {
        return layout.start_offset();
    }
    let reach: usize = layout
        .dims()
        .iter()
        .zip(layout.stride())
        .map(|(d, s)| (d - 1) * s)
        .sum();
    layout.start_offset() + reach + 1
}

/// The kinds of layout the suites draw from.
pub const LAYOUT_KINDS: [&str; 5] = [
    "contiguous",
    "offset",
    "transposed",
    "narrowed",
    "broadcast",
];

/// A random layout of `dims`: contiguous, contiguous with a start offset, a transpose of two
/// dims, narrowed out of a larger tensor, or with one dim broadcast (stride 0).
pub fn random_layout(rng: &mut Rng, dims: &[usize]) -> (Layout, &'static str) {
    let kind = rng.pick(&LAYOUT_KINDS);
    let shape = Shape::from(dims.to_vec());
    let layout = match kind {
        "offset" => Layout::contiguous_with_offset(shape, 1 + rng.below(9)),
        "transposed" if dims.len() >= 2 => {
            let (a, b) = (rng.below(dims.len()), rng.below(dims.len()));
            let mut swapped = dims.to_vec();
            swapped.swap(a, b);
            Layout::contiguous_with_offset(Shape::from(swapped), rng.below(3))
                .transpose(a, b)
                .unwrap()
        }
        "narrowed" if !dims.is_empty() => {
            let big: Vec<usize> = dims.iter().map(|d| d + rng.below(3)).collect();
            let mut l = Layout::contiguous_with_offset(Shape::from(big.clone()), rng.below(5));
            for (i, (&d, &b)) in dims.iter().zip(&big).enumerate() {
                let start = rng.below(b - d + 1);
                l = l.narrow(i, start, d).unwrap();
            }
            l
        }
        "broadcast" if !dims.is_empty() => {
            let mut strides = contiguous_strides(dims);
            strides[rng.below(dims.len())] = 0;
            Layout::new(shape, strides, rng.below(3))
        }
        _ => Layout::contiguous(shape),
    };
    (layout, kind)
}

/// A random layout of `dims` whose elements are contiguous in memory (possibly offset), for
/// ops that require it.
pub fn contiguous_layout(rng: &mut Rng, dims: &[usize]) -> Layout {
    Layout::contiguous_with_offset(Shape::from(dims.to_vec()), rng.below(4))
}

/// What values to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Values {
    /// Moderate values in [-4, 4) (non-negative for unsigned types).
    Moderate,
    /// Moderate values in [-1, 1) (products and sums stay small).
    Small,
    /// Moderate values plus specials: NaN, +/-inf, -0.0 for floats; the type's extremes for
    /// integers.
    Special,
    /// Strictly positive moderate values (for log, sqrt, powf).
    Positive,
}

/// `n` random elements of `dtype`.
pub fn random_data(rng: &mut Rng, dtype: DType, n: usize, values: Values) -> CpuStorage {
    let scale = if values == Values::Small { 1.0 } else { 4.0 };
    let mut v: Vec<f64> = (0..n)
        .map(|_| match values {
            Values::Positive => 0.05 + rng.unit() * scale,
            _ => (rng.unit() * 2.0 - 1.0) * scale,
        })
        .collect();
    let special = values == Values::Special;
    if special && dtype.is_float() {
        // f8e4m3 has no infinities (conversions saturate), so it gets NaN and zeros only.
        let specials: &[f64] = if dtype == DType::F8E4M3 {
            &[f64::NAN, -0.0, 0.0]
        } else {
            &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.0]
        };
        for x in v.iter_mut() {
            if rng.chance(0.05) {
                *x = rng.pick(specials);
            }
        }
    }
    let mut ext = |lo: f64, hi: f64, x: f64| -> f64 {
        if special && rng.chance(0.05) {
            rng.pick(&[lo, hi, 0.0])
        } else {
            x
        }
    };
    match dtype {
        DType::F32 => CpuStorage::F32(v.iter().map(|&x| x as f32).collect()),
        DType::F64 => CpuStorage::F64(v),
        DType::F16 => CpuStorage::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        DType::BF16 => CpuStorage::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
        DType::F8E4M3 => CpuStorage::F8E4M3(v.iter().map(|&x| F8E4M3::from_f64(x)).collect()),
        DType::U8 => CpuStorage::U8(
            v.iter()
                .map(|&x| ext(0.0, 255.0, (x.abs() * 15.0).floor()) as u8)
                .collect(),
        ),
        DType::U32 => CpuStorage::U32(
            v.iter()
                .map(|&x| ext(0.0, u32::MAX as f64, (x.abs() * 1e3).floor()) as u32)
                .collect(),
        ),
        DType::I16 => CpuStorage::I16(
            v.iter()
                .map(|&x| ext(i16::MIN as f64, i16::MAX as f64, (x * 1e3).trunc()) as i16)
                .collect(),
        ),
        DType::I32 => CpuStorage::I32(
            v.iter()
                .map(|&x| ext(i32::MIN as f64, i32::MAX as f64, (x * 1e5).trunc()) as i32)
                .collect(),
        ),
        DType::I64 => CpuStorage::I64(
            v.iter()
                .map(|&x| {
                    if special && rng.chance(0.05) {
                        rng.pick(&[i64::MIN, i64::MAX, 0])
                    } else {
                        (x * 1e6).trunc() as i64
                    }
                })
                .collect(),
        ),
        other => panic!("no test data for {other:?}"),
    }
}

/// `v` rounded to `dtype` (floats only).
pub fn from_f64(dtype: DType, v: &[f64]) -> CpuStorage {
    match dtype {
        DType::F32 => CpuStorage::F32(v.iter().map(|&x| x as f32).collect()),
        DType::F64 => CpuStorage::F64(v.to_vec()),
        DType::F16 => CpuStorage::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        DType::BF16 => CpuStorage::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
        DType::F8E4M3 => CpuStorage::F8E4M3(v.iter().map(|&x| F8E4M3::from_f64(x)).collect()),
        other => panic!("no float conversion to {other:?}"),
    }
}

/// The elements as f64 (exact for every dtype but i64 beyond 2^53, compared separately).
pub fn as_f64(s: &CpuStorage) -> Vec<f64> {
    match s {
        CpuStorage::F32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::F64(v) => v.clone(),
        CpuStorage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::F8E4M3(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::U8(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::U32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::I16(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::I32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::I64(v) => v.iter().map(|&x| x as f64).collect(),
        other => panic!("unexpected {:?}", other.dtype()),
    }
}

/// Relative tolerance per dtype, written down once: a few ulps of the type (integers exact).
pub fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 2e-6,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        DType::F8E4M3 => 0.13,
        _ => 0.0,
    }
}

/// Compares `got` with `want` elementwise: NaN matches NaN, infinities must match exactly,
/// finite values within `tolerance(dtype) * scale * (1 + |want|)`; integers exactly (i64
/// bit for bit). Panics with the first difference.
pub fn assert_close(what: &str, got: &CpuStorage, want: &CpuStorage, scale: f64) {
    if let Err(e) = compare(what, got, want, scale) {
        panic!("{e}");
    }
}

/// [`assert_close`]'s comparison, returning the first difference.
pub fn compare(what: &str, got: &CpuStorage, want: &CpuStorage, scale: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "{what}: dtype {:?} vs {:?}",
            got.dtype(),
            want.dtype()
        ));
    }
    if let (CpuStorage::I64(g), CpuStorage::I64(w)) = (got, want) {
        if g.len() != w.len() {
            return Err(format!("{what}: length {} vs {}", g.len(), w.len()));
        }
        return match g.iter().zip(w).position(|(a, b)| a != b) {
            Some(i) => Err(format!(
                "{what}: element {i}: rocm {} vs cpu {}",
                g[i], w[i]
            )),
            None => Ok(()),
        };
    }
    let (g, w) = (as_f64(got), as_f64(want));
    if g.len() != w.len() {
        return Err(format!("{what}: length {} vs {}", g.len(), w.len()));
    }
    let tol = tolerance(got.dtype()) * scale;
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan())
            || a == b
            || (a.is_finite() && b.is_finite() && (a - b).abs() <= tol * (1.0 + b.abs()));
        if !ok {
            return Err(format!("{what}: element {i}: rocm {a} vs cpu {b}"));
        }
    }
    Ok(())
}

/// Failures recorded by [`fail`], per method, so one run reports every failing case.
static FAILURES: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Records a failing case of `method` for `dtype`.
pub fn fail(method: &str, dtype: DType, msg: String) {
    eprintln!("FAIL {msg}");
    append_log("fail", &format!("FAIL {msg}"));
    TALLY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((method.to_string(), dtype.as_str().to_string()))
        .or_default()
        .3 += 1;
    FAILURES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((method.to_string(), msg));
}

/// Appends `line` to `$CANDLE_ROCM_PARITY_LOG.<suffix>` when the variable is set (written at
/// once, so a run cut short still shows what happened).
pub fn append_log(suffix: &str, line: &str) {
    let Some(path) = std::env::var_os("CANDLE_ROCM_PARITY_LOG") else {
        return;
    };
    let mut path = std::path::PathBuf::from(path).into_os_string();
    path.push(format!(".{suffix}"));
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Panics listing the recorded failures of the methods starting with one of `methods` (the
/// first 30), if any.
pub fn finish(methods: &[&str]) {
    // Copy out and release the lock before panicking, so other tests can still record.
    let mine: Vec<String> = FAILURES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(m, _)| methods.iter().any(|x| m.starts_with(x)))
        .map(|(_, msg)| msg.clone())
        .collect();
    if !mine.is_empty() {
        let shown: Vec<&str> = mine.iter().take(30).map(|s| s.as_str()).collect();
        panic!("{} failing cases:\n{}", mine.len(), shown.join("\n"));
    }
}

/// Per (method, dtype): cases that matched the CPU, cases that returned the documented
/// "not supported" error, and cases the CPU backend panicked on (not comparable).
static TALLY: Mutex<BTreeMap<(String, String), Counts>> = Mutex::new(BTreeMap::new());

/// (matched, typed-unsupported, cpu panicked, failed).
type Counts = (usize, usize, usize, usize);

/// Records a case that matched the CPU.
pub fn passed(method: &str, dtype: DType) {
    TALLY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((method.to_string(), dtype.as_str().to_string()))
        .or_default()
        .0 += 1;
}

/// Records a case that returned the documented "not supported" error.
pub fn unsupported(method: &str, dtype: DType) {
    TALLY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((method.to_string(), dtype.as_str().to_string()))
        .or_default()
        .1 += 1;
}

/// Records a case candle's CPU backend panicked on.
pub fn cpu_panicked(method: &str, dtype: DType) {
    TALLY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry((method.to_string(), dtype.as_str().to_string()))
        .or_default()
        .2 += 1;
}

/// Total cases recorded for `method`.
pub fn cases(method: &str) -> usize {
    TALLY
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|((m, _), _)| m == method)
        .map(|(_, (p, u, c, f))| p + u + c + f)
        .sum()
}

/// Appends the tally of `method` to `$CANDLE_ROCM_PARITY_LOG` (tab-separated: method,
/// dtype, passed, unsupported, cpu panicked, failed) when the variable is set.
pub fn flush(method: &str) {
    let Some(path) = std::env::var_os("CANDLE_ROCM_PARITY_LOG") else {
        return;
    };
    let tally = TALLY.lock().unwrap_or_else(|e| e.into_inner());
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    for ((m, d), (p, u, c, x)) in tally.iter().filter(|((m, _), _)| m == method) {
        writeln!(f, "{m}\t{d}\t{p}\t{u}\t{c}\t{x}").unwrap();
    }
}

/// Asserts `err` is the typed error for a kernel this build does not have (candle's CUDA
/// backend lacks it too) or a dtype the op does not take.
pub fn assert_unsupported(what: &str, err: &candle_core::Error) {
    let msg = err.to_string();
    assert!(
        msg.contains("not available for") || msg.contains("unsupported dtype"),
        "{what}: expected a 'not supported' error, got: {msg}"
    );
}
