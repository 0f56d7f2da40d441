//! Column- and row-parallel linear layers (Megatron-LM's split, as in Candle's
//! `llama_multiprocess` example) and the all-reduce they end with.
//!
//! A column-parallel layer holds a block of the weight's rows and computes a block of the
//! output features; no communication. A row-parallel layer holds a block of the weight's
//! columns, takes the matching block of the input features (a column-parallel layer's output)
//! and computes a partial sum of the whole output; an all-reduce (sum) over the ranks completes
//! it. So an attention or MLP block costs one all-reduce.
//!
//! A rank's block of a weight is a [`ParallelWeight`]: dense (safetensors, random weights: a
//! candle-nn [`Linear`]) or quantized (a GGUF file's blocks: candle's [`QMatMul`], which runs
//! the backend's quantized matrix product on f32 activations).
//!
//! Column-parallel layers that take the same input (q, k and v; gate and up) are stacked
//! ([`StackedColumns`]): one matrix product of their blocks' rows instead of one per layer,
//! each layer's output a slice of it, which on a GPU is one launch instead of three or two.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{QMatMul, QStorage, QTensor};
use candle_core::{Module, Tensor, D};
use candle_nn::Linear;
use candle_rocm::collective::{Comm, ReduceOp};

/// The ranks a model is split over, as the model sees them: its place, and the sum of a tensor
/// over every rank.
pub trait World: Send + Sync + std::fmt::Debug {
    /// This rank.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn world_size(&self) -> usize;

    /// The element-wise sum of `x` (same shape on every rank) over every rank.
    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor>;

    /// Every rank's `x` (same shape on every rank) concatenated along dimension 0, in rank
    /// order. By default an all-reduce of `x` placed at this rank's offset in zeros (exact:
    /// every other rank adds zeros; `world_size` times the traffic), for worlds that only
    /// sum; RCCL's communicator gathers.
    fn all_gather(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (n, w, r) = (x.dim(0)?, self.world_size(), self.rank());
        if w == 1 {
            return Ok(x.clone());
        }
        let mut parts = Vec::with_capacity(3);
        let zeros = |rows: usize| {
            let mut dims = x.dims().to_vec();
            dims[0] = rows;
            Tensor::zeros(dims, x.dtype(), x.device())
        };
        if r > 0 {
            parts.push(zeros(r * n)?);
        }
        parts.push(x.clone());
        if r + 1 < w {
            parts.push(zeros((w - r - 1) * n)?);
        }
        self.all_reduce_sum(&Tensor::cat(&parts, 0)?)
    }

    /// Waits, bounded by a timeout, for the collectives queued so far: a rank that died is an
    /// error here, not a hang. A world without collectives returns at once.
    fn wait(&self) -> candle_core::Result<()> {
        Ok(())
    }

    /// The sum of `x` over every rank, added to `residual` and normalised as the next layer's
    /// input: `candle_nn::ops::add_rms_norm(sum, residual, alpha, eps)`, `(sum, normed)`. By
    /// default the two steps; a world that does both in one (candle-rocm's one-shot kernel)
    /// overrides it.
    fn all_reduce_add_rms_norm(
        &self,
        x: &Tensor,
        residual: &Tensor,
        alpha: &Tensor,
        eps: f32,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        candle_nn::ops::add_rms_norm(&self.all_reduce_sum(x)?, residual, alpha, eps)
    }
}

/// A world of one rank: every tensor whole, the sum the tensor itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Solo;

impl World for Solo {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Ok(x.clone())
    }
}

/// One process per GPU: the ranks of an RCCL communicator (candle-rocm's [`Comm`]).
impl World for Comm {
    fn rank(&self) -> usize {
        Comm::rank(self)
    }

    fn world_size(&self) -> usize {
        Comm::world_size(self)
    }

    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.all_reduce(&x.contiguous()?, ReduceOp::Sum)
    }

    fn all_gather(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        Comm::all_gather(self, &x.contiguous()?)
    }

    fn wait(&self) -> candle_core::Result<()> {
        Comm::wait(self)
    }

    /// One launch where the one-shot all-reduce takes it (small messages between GPUs of one
    /// host), else the two steps.
    fn all_reduce_add_rms_norm(
        &self,
        x: &Tensor,
        residual: &Tensor,
        alpha: &Tensor,
        eps: f32,
    ) -> candle_core::Result<(Tensor, Tensor)> {
        let x = x.contiguous()?;
        match Comm::all_reduce_add_rms_norm(self, &x, residual, alpha, eps)? {
            Some(both) => Ok(both),
            None => candle_nn::ops::add_rms_norm(&self.all_reduce_sum(&x)?, residual, alpha, eps),
        }
    }
}

/// A rank's block of a linear layer's weight, `(out, in)`.
#[derive(Debug, Clone)]
pub enum ParallelWeight {
    /// Values in the model's dtype.
    Dense(Tensor),
    /// GGML blocks from a GGUF file (quantized types; f32/f16/bf16 ones are read as
    /// [`ParallelWeight::Dense`]).
    Quantized(Arc<QTensor>),
}

/// A weight block with its product: candle-nn's [`Linear`] or candle's [`QMatMul`].
#[derive(Debug, Clone)]
pub(super) enum Proj {
    Dense(Linear),
    Quantized(QMatMul),
}

impl Proj {
    pub(super) fn new(weight: ParallelWeight) -> candle_core::Result<Proj> {
        Ok(match weight {
            ParallelWeight::Dense(w) => Proj::Dense(Linear::new(w, None)),
            ParallelWeight::Quantized(q) => Proj::Quantized(QMatMul::from_arc(q)?),
        })
    }
}

impl Module for Proj {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Proj::Dense(l) => l.forward(x),
            Proj::Quantized(q) => q.forward(x),
        }
    }
}

/// A linear layer (no bias) whose weight rows (output features) are split over the ranks:
/// this rank computes its block of the outputs.
#[derive(Debug, Clone)]
pub struct ColumnParallelLinear {
    linear: Proj,
}

impl ColumnParallelLinear {
    /// The layer from this rank's block of rows of the weight, `(out / world, in)`.
    pub fn new(weight: Tensor) -> Self {
        ColumnParallelLinear {
            linear: Proj::Dense(Linear::new(weight, None)),
        }
    }

    /// The layer from this rank's block of rows of a dense or quantized weight.
    pub fn from_weight(weight: ParallelWeight) -> candle_core::Result<Self> {
        Ok(ColumnParallelLinear {
            linear: Proj::new(weight)?,
        })
    }
}

impl Module for ColumnParallelLinear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.linear.forward(x)
    }
}

/// Column-parallel layers on the same input as one product: this rank's blocks of their
/// weights stacked by rows (dense blocks concatenated; quantized blocks of one GGML type
/// joined block for block), or, for quantized blocks of different types (a Q4_K_M file's
/// mixed layers), kept apart.
#[derive(Debug, Clone)]
pub struct StackedColumns {
    proj: Stack,
}

#[derive(Debug, Clone)]
enum Stack {
    /// One product; each layer's output is `rows[i]` features of it, in order. A dense stack
    /// also keeps each layer as a view of its rows (`views`, no copy): an input of more than
    /// one row (a prefill) takes a product per layer there, as slices of a many-row product
    /// are strided and the copies and strided element-wise ops after them cost more than the
    /// launches saved.
    One {
        linear: Proj,
        rows: Vec<usize>,
        views: Option<Vec<Proj>>,
    },
    /// A product per layer.
    Apart(Vec<Proj>),
}

impl StackedColumns {
    /// The layers from this rank's blocks of rows of their weights, `(out_i / world, in)`
    /// each, in the order their outputs come back.
    pub fn from_weights(weights: Vec<ParallelWeight>) -> candle_core::Result<Self> {
        let rows = weights
            .iter()
            .map(|w| match w {
                ParallelWeight::Dense(t) => t.dim(0),
                ParallelWeight::Quantized(q) => q.shape().dims2().map(|d| d.0),
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let proj = match stack(&weights)? {
            Some(w) => {
                let views = match &w {
                    ParallelWeight::Dense(t) => {
                        let mut views = Vec::with_capacity(rows.len());
                        let mut start = 0;
                        for &r in &rows {
                            views.push(Proj::Dense(Linear::new(t.narrow(0, start, r)?, None)));
                            start += r;
                        }
                        Some(views)
                    }
                    ParallelWeight::Quantized(_) => None,
                };
                Stack::One {
                    linear: Proj::new(w)?,
                    rows,
                    views,
                }
            }
            None => Stack::Apart(
                weights
                    .into_iter()
                    .map(Proj::new)
                    .collect::<candle_core::Result<_>>()?,
            ),
        };
        Ok(StackedColumns { proj })
    }

    /// Each layer's block of the outputs, in the order of [`Self::from_weights`].
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Vec<Tensor>> {
        Ok(self.forward_joined(x)?.1)
    }

    /// [`Self::forward`]'s blocks and, when they are slices of one product (stacked weights,
    /// one row of `x`), that product.
    pub fn forward_joined(&self, x: &Tensor) -> candle_core::Result<(Option<Tensor>, Vec<Tensor>)> {
        let one_row = x.elem_count() == x.dim(D::Minus1)?;
        match &self.proj {
            Stack::Apart(ps) => Ok((
                None,
                ps.iter().map(|p| p.forward(x)).collect::<Result<_, _>>()?,
            )),
            Stack::One {
                views: Some(views), ..
            } if !one_row => Ok((
                None,
                views
                    .iter()
                    .map(|p| p.forward(x))
                    .collect::<Result<_, _>>()?,
            )),
            Stack::One { linear, rows, .. } => {
                let all = linear.forward(x)?;
                let mut start = 0;
                let mut out = Vec::with_capacity(rows.len());
                for &r in rows {
                    out.push(all.narrow(D::Minus1, start, r)?);
                    start += r;
                }
                Ok((Some(all), out))
            }
        }
    }
}

/// `weights` stacked by rows, or `None` when they cannot be (quantized blocks of different
/// GGML types or row lengths, or dense and quantized mixed).
fn stack(weights: &[ParallelWeight]) -> candle_core::Result<Option<ParallelWeight>> {
    if let Some(dense) = weights
        .iter()
        .map(|w| match w {
            ParallelWeight::Dense(t) => Some(t),
            ParallelWeight::Quantized(_) => None,
        })
        .collect::<Option<Vec<_>>>()
    {
        return Ok(Some(ParallelWeight::Dense(Tensor::cat(&dense, 0)?)));
    }
    let Some(qs) = weights
        .iter()
        .map(|w| match w {
            ParallelWeight::Quantized(q) => Some(q),
            ParallelWeight::Dense(_) => None,
        })
        .collect::<Option<Vec<_>>>()
    else {
        return Ok(None);
    };
    let (dtype, cols) = (qs[0].dtype(), qs[0].shape().dims2()?.1);
    let mut rows = 0;
    for q in &qs {
        let (r, c) = q.shape().dims2()?;
        if q.dtype() != dtype || c != cols {
            return Ok(None);
        }
        rows += r;
    }
    // The blocks of a row-major quantized matrix are its rows' blocks back to back, so the
    // stacked matrix is the blocks of each weight in turn (read back once, at load time).
    let mut data = Vec::new();
    for q in &qs {
        data.extend_from_slice(&q.data()?);
    }
    let device = qs[0].device();
    let storage = QStorage::from_data(Cow::Owned(data), &device, dtype)?;
    Ok(Some(ParallelWeight::Quantized(Arc::new(QTensor::new(
        storage,
        (rows, cols),
    )?))))
}

/// A linear layer (no bias) whose weight columns (input features) are split over the ranks:
/// this rank multiplies its block of the inputs, and an all-reduce sums the ranks' partial
/// outputs into the whole output on every rank.
#[derive(Debug, Clone)]
pub struct RowParallelLinear {
    linear: Proj,
    world: Arc<dyn World>,
}

impl RowParallelLinear {
    /// The layer from this rank's block of columns of the weight, `(out, in / world)`.
    pub fn new(weight: Tensor, world: Arc<dyn World>) -> Self {
        RowParallelLinear {
            linear: Proj::Dense(Linear::new(weight, None)),
            world,
        }
    }

    /// The layer from this rank's block of columns of a dense or quantized weight.
    pub fn from_weight(weight: ParallelWeight, world: Arc<dyn World>) -> candle_core::Result<Self> {
        Ok(RowParallelLinear {
            linear: Proj::new(weight)?,
            world,
        })
    }

    /// This rank's partial output, before the all-reduce (for tests that sum it themselves).
    pub fn partial(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.linear.forward(x)
    }
}

impl Module for RowParallelLinear {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        self.world.all_reduce_sum(&self.linear.forward(x)?)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::tp::{Shard, Split};
    use candle_core::{DType, Device};

    /// Max |a - b|.
    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    /// Stacked q/k/v-like blocks (dense; quantized of one type; quantized of mixed types, kept
    /// apart) give each layer's output as the layers apart do.
    #[test]
    fn stacked_columns_equal_the_layers_apart() {
        use candle_core::quantized::GgmlDType;
        let dev = &Device::Cpu;
        let ws: Vec<Tensor> = [32, 16, 16]
            .iter()
            .map(|&r| Tensor::randn(0f32, 1., (r, 64), dev).unwrap())
            .collect();
        let quantized = |types: [GgmlDType; 3]| -> Vec<ParallelWeight> {
            ws.iter()
                .zip(types)
                .map(|(w, t)| ParallelWeight::Quantized(Arc::new(QTensor::quantize(w, t).unwrap())))
                .collect()
        };
        let dense: Vec<ParallelWeight> = ws.iter().cloned().map(ParallelWeight::Dense).collect();
        let cases = [
            ("dense", dense, true),
            ("q8_0", quantized([GgmlDType::Q8_0; 3]), true),
            (
                "mixed",
                quantized([GgmlDType::Q8_0, GgmlDType::Q4_0, GgmlDType::Q8_0]),
                false,
            ),
        ];
        for (what, weights, one) in cases {
            let stacked = StackedColumns::from_weights(weights.clone()).unwrap();
            assert_eq!(matches!(stacked.proj, Stack::One { .. }), one, "{what}");
            // A decode step (one row: the stacked product) and a prefill (3 rows).
            for tokens in [1, 3] {
                let x = Tensor::randn(0f32, 1., (1, tokens, 64), dev).unwrap();
                let apart: Vec<Tensor> = weights
                    .iter()
                    .map(|w| Proj::new(w.clone()).unwrap().forward(&x).unwrap())
                    .collect();
                let got = stacked.forward(&x).unwrap();
                assert_eq!(got.len(), 3);
                for (g, want) in got.iter().zip(&apart) {
                    assert_eq!(g.dims(), want.dims(), "{what}, {tokens} tokens");
                    let d = max_diff(g, want);
                    assert!(d < 1e-4, "{what}, {tokens} tokens: {d}");
                }
            }
        }
    }

    /// A world of two simulated in one process: each rank's layers from its blocks, the
    /// row-parallel partials summed here; equal to the unsharded layers.
    #[test]
    fn two_ranks_simulated_equal_the_whole_layers() {
        let dev = &Device::Cpu;
        let (hidden, inner, tokens) = (8, 12, 5);
        let up = Tensor::randn(0f32, 1., (inner, hidden), dev).unwrap();
        let down = Tensor::randn(0f32, 1., (hidden, inner), dev).unwrap();
        let x = Tensor::randn(0f32, 1., (1, tokens, hidden), dev).unwrap();
        let whole = Linear::new(down.clone(), None)
            .forward(&Linear::new(up.clone(), None).forward(&x).unwrap())
            .unwrap();
        let world = 2;
        let mut sum: Option<Tensor> = None;
        let mut blocks = Vec::new();
        for rank in 0..world {
            let shard = Shard::new(rank, world).unwrap();
            let block = |w: &Tensor, split: Split| {
                let (_, r) = split.local(shard, "w", w.dims()).unwrap();
                let r = r.unwrap();
                let dim = if split == Split::Rows { 0 } else { 1 };
                w.narrow(dim, r.start, r.len()).unwrap()
            };
            let col = ColumnParallelLinear::new(block(&up, Split::Rows));
            let row = RowParallelLinear::new(block(&down, Split::Cols), Arc::new(Solo));
            let h = col.forward(&x).unwrap();
            assert_eq!(h.dims(), &[1, tokens, inner / world]);
            blocks.push(h.clone());
            let p = row.partial(&h).unwrap();
            sum = Some(match sum {
                None => p,
                Some(s) => (s + p).unwrap(),
            });
        }
        // The column-parallel blocks side by side are the whole first layer's output.
        let cat = Tensor::cat(&blocks, 2).unwrap();
        let first = Linear::new(up, None).forward(&x).unwrap();
        assert_eq!(max_diff(&cat, &first), 0.0);
        let diff = max_diff(&sum.unwrap(), &whole);
        assert!(diff < 1e-4, "{diff}");
        assert_eq!(whole.dtype(), DType::F32);
    }
}
