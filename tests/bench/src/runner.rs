//! [`Bench`]: the row filter, the timer (see the crate docs' Method) and the line printer every
//! bench family goes through.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{DType, Device};

/// Batches per row; the row reports their median.
pub(crate) const SAMPLES: usize = 5;
/// The wall time one batch aims at.
pub(crate) const BATCH_SECONDS: f64 = 0.02;

/// Runs the rows the filter selects and prints them.
pub(crate) struct Bench {
    /// The device the rows run on.
    pub(crate) dev: Device,
    /// `--only`'s words (every row when empty).
    pub(crate) only: Vec<String>,
    /// `--shape`'s words: the attention rows they select (every row when empty).
    pub(crate) shapes: Vec<String>,
    /// `--profile`: one untimed pass of the decoder rows.
    pub(crate) profile: bool,
    /// Elements of the memory-bound rows.
    pub(crate) n: usize,
}

impl Bench {
    /// The attention paths of the decoder rows, `false` matmul and `true` flash: both in our
    /// backend's build; matmul alone in Candle CUDA's (crates.io candle-flash-attn needs its
    /// CUDA kernels built, and crates.io candle-transformers' quantized llama has no flash
    /// path). `--profile` records one path (its summary counts kernels per step): flash when
    /// `--only` names it, else matmul.
    pub(crate) fn attention_paths(&self) -> &'static [bool] {
        if !cfg!(all(feature = "rocm", not(feature = "cuda"))) {
            &[false]
        } else if self.profile {
            if self.only.iter().any(|w| w.contains("flash")) {
                &[true]
            } else {
                &[false]
            }
        } else {
            &[false, true]
        }
    }

    /// Whether the `--only` filter selects the row `op` of `group`.
    pub(crate) fn wanted(&self, group: &str, op: &str) -> bool {
        self.only.is_empty()
            || self
                .only
                .iter()
                .any(|w| group.contains(w.as_str()) || op.contains(w.as_str()))
    }

    /// Whether the `--shape` filter selects an attention row of shape `shape`.
    pub(crate) fn shape_wanted(&self, shape: &str) -> bool {
        self.shapes.is_empty() || self.shapes.iter().any(|w| shape.contains(w.as_str()))
    }

    /// Median seconds per call of `f` (see the crate docs' Method).
    pub(crate) fn time<T>(&self, mut f: impl FnMut() -> Result<T>) -> Result<f64> {
        for _ in 0..3 {
            drop(f()?);
        }
        self.dev.synchronize()?;
        let t = Instant::now();
        drop(f()?);
        self.dev.synchronize()?;
        let one = t.elapsed().as_secs_f64().max(1e-7);
        let iters = ((BATCH_SECONDS / one) as usize).clamp(1, 2000);
        let mut samples = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let t = Instant::now();
            for _ in 0..iters {
                drop(f()?);
            }
            self.dev.synchronize()?;
            samples.push(t.elapsed().as_secs_f64() / iters as f64);
        }
        Ok(median(samples))
    }

    /// Prints a row; `key` is (group, op, shape, dtype).
    pub(crate) fn print(&self, key: [&str; 4], secs: f64, work: f64, unit: &str) {
        let [group, op, shape, dtype] = key;
        println!("bench\t{group}\t{op}\t{shape}\t{dtype}\t{secs:.9e}\t{work}\t{unit}");
    }

    /// A memory-bound row: `f` moves `bytes`.
    pub(crate) fn bw<T>(
        &self,
        op: &str,
        shape: &str,
        dtype: &str,
        bytes: usize,
        f: impl FnMut() -> Result<T>,
    ) -> Result<()> {
        if !self.wanted("bw", op) {
            return Ok(());
        }
        let s = self
            .time(f)
            .with_context(|| format!("{op} {shape} {dtype}"))?;
        self.print(["bw", op, shape, dtype], s, bytes as f64, "bytes");
        Ok(())
    }
}

/// The median of `v` (the upper one of an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The dtype column's name of `dtype`.
pub(crate) fn name(dtype: DType) -> &'static str {
    dtype.as_str()
}
