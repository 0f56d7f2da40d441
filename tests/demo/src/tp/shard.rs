//! Which part of each weight a rank holds, and reading only that part from a memory-mapped
//! safetensors file.
//!
//! A linear layer's weight is `(out_features, in_features)` (PyTorch's layout). A
//! column-parallel layer splits the *outputs*, so a rank reads a block of **rows** (dimension
//! 0); a row-parallel layer splits the *inputs*, so a rank reads a block of **columns**
//! (dimension 1). Rank `r` of `w` gets block `r` of `len / w` entries; a length that is not a
//! multiple of `w` is an error naming the tensor, never a silent remainder. [`ShardedWeights`]
//! slices the mapped file's tensor view (safetensors' `slice`), so a rank copies only its block
//! out of the page cache and never materialises the whole weight. [`ShardedWeights::random`]
//! instead draws each rank's block on its device (speed runs of shapes no checkpoint is at
//! hand for, such as the 7B llama: no file to write and read). [`ShardedWeights::open_gguf`]
//! reads a GGUF file instead (`gguf.rs`: only the block's bytes, the quantized blocks kept
//! quantized for the linear layers, [`ShardedWeights::linear`]).

use std::ops::Range;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use safetensors::slice::IndexOp;

use super::gguf::{gguf_name, GgufShards};
use super::linear::ParallelWeight;
use super::TpError;

/// This rank's place in the world: which block of each split tensor it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This rank, `0..world_size`.
    pub rank: usize,
    /// The number of ranks.
    pub world_size: usize,
}

impl Shard {
    /// Rank `rank` of `world_size`, or [`TpError::BadRank`].
    pub fn new(rank: usize, world_size: usize) -> Result<Shard, TpError> {
        if world_size == 0 || rank >= world_size {
            return Err(TpError::BadRank { rank, world_size });
        }
        Ok(Shard { rank, world_size })
    }

    /// The world of one rank: every tensor whole.
    pub const SOLO: Shard = Shard {
        rank: 0,
        world_size: 1,
    };

    /// This rank's block of a dimension of `len` entries of `tensor`'s dimension `dim`, or
    /// [`TpError::UnevenSplit`] naming the tensor when `len` is not a multiple of the world
    /// size.
    pub fn range(&self, tensor: &str, dim: usize, len: usize) -> Result<Range<usize>, TpError> {
        if !len.is_multiple_of(self.world_size) {
            return Err(TpError::UnevenSplit {
                tensor: tensor.to_string(),
                dim,
                len,
                world_size: self.world_size,
            });
        }
        let block = len / self.world_size;
        Ok(self.rank * block..(self.rank + 1) * block)
    }

    /// This rank's block of a vocabulary of `vocab` rows of `tensor`: blocks of
    /// `ceil(vocab / world_size)` rows in rank order, the last one shorter (so the ranks'
    /// blocks padded to the full block size and laid end to end start with the whole
    /// vocabulary), or [`TpError::VocabSplit`] when a rank would get no row.
    pub fn vocab_range(&self, tensor: &str, vocab: usize) -> Result<Range<usize>, TpError> {
        let block = vocab.div_ceil(self.world_size);
        if (self.world_size - 1) * block >= vocab {
            return Err(TpError::VocabSplit {
                tensor: tensor.to_string(),
                vocab,
                world_size: self.world_size,
            });
        }
        let start = self.rank * block;
        Ok(start..(start + block).min(vocab))
    }

    /// `count` heads (of the config key `what`) per rank, or [`TpError::Heads`].
    pub fn heads(&self, what: &'static str, count: usize) -> Result<usize, TpError> {
        if !count.is_multiple_of(self.world_size) {
            return Err(TpError::Heads {
                what,
                count,
                world_size: self.world_size,
            });
        }
        Ok(count / self.world_size)
    }
}

/// How a weight is split over the ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Every rank holds the whole tensor (embeddings, norms, the output head).
    Whole,
    /// Dimension 0 (rows: a column-parallel layer's output features).
    Rows,
    /// Dimension 1 (columns: a row-parallel layer's input features).
    Cols,
    /// Dimension 0 of a vocabulary-sized tensor (the embeddings, the output head), in blocks
    /// of `ceil(vocab / world)` rows, the last rank's shorter ([`Shard::vocab_range`]): any
    /// vocabulary splits, as long as every rank gets a row.
    Vocab,
}

impl Split {
    /// The split of a llama tensor in the Hugging Face layout, by name: q/k/v and gate/up
    /// projections column-parallel (rows), o and down projections row-parallel (columns),
    /// everything else whole.
    pub fn of_llama(name: &str) -> Split {
        const ROWS: [&str; 5] = [
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
        ];
        const COLS: [&str; 2] = ["self_attn.o_proj.weight", "mlp.down_proj.weight"];
        if ROWS.iter().any(|s| name.ends_with(s)) {
            Split::Rows
        } else if COLS.iter().any(|s| name.ends_with(s)) {
            Split::Cols
        } else {
            Split::Whole
        }
    }

    /// The dimension split: `None` for [`Split::Whole`].
    pub fn dim(self) -> Option<usize> {
        match self {
            Split::Whole => None,
            Split::Rows | Split::Vocab => Some(0),
            Split::Cols => Some(1),
        }
    }

    /// The shape this rank holds of a tensor of shape `full`, and the range of the split
    /// dimension (`None` for [`Split::Whole`]).
    pub fn local(
        self,
        shard: Shard,
        tensor: &str,
        full: &[usize],
    ) -> Result<(Vec<usize>, Option<Range<usize>>), TpError> {
        let Some(dim) = self.dim() else {
            return Ok((full.to_vec(), None));
        };
        if full.len() != 2 {
            return Err(TpError::Shape {
                path: PathBuf::new(),
                tensor: tensor.to_string(),
                got: full.to_vec(),
                want: vec![0, 0],
            });
        }
        let range = if self == Split::Vocab {
            shard.vocab_range(tensor, full[dim])?
        } else {
            shard.range(tensor, dim, full[dim])?
        };
        let mut shape = full.to_vec();
        shape[dim] = range.len();
        Ok((shape, Some(range)))
    }
}

/// Where [`ShardedWeights`] takes its tensors from.
enum Source {
    /// Memory-mapped safetensors files.
    Files(MmapedSafetensors),
    /// Drawn on the device, as [`super::write_random_llama`] draws them on the host.
    Random,
    /// A llama GGUF file, read by Hugging Face names mapped to GGUF ones.
    Gguf(GgufShards),
}

/// One rank's view of safetensors files: memory-mapped, each tensor read as this rank's block
/// (or, from [`ShardedWeights::random`], random blocks of the same shapes).
pub struct ShardedWeights {
    source: Source,
    path: PathBuf,
    shard: Shard,
    dtype: DType,
    device: Device,
}

impl std::fmt::Debug for ShardedWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedWeights")
            .field("path", &self.path)
            .field("shard", &self.shard)
            .field("dtype", &self.dtype)
            .finish_non_exhaustive()
    }
}

impl ShardedWeights {
    /// Maps `files` (one file, or the parts of a split checkpoint) for rank `shard`; tensors
    /// come out converted to `dtype` on `device`.
    pub fn open(
        files: &[PathBuf],
        shard: Shard,
        dtype: DType,
        device: &Device,
    ) -> Result<ShardedWeights, TpError> {
        let path = files.first().cloned().unwrap_or_default();
        // SAFETY: the files are mapped read-only and must not be modified while mapped; the
        // model cache never rewrites a model directory in place (a conversion writes a new
        // directory and renames it).
        let st = unsafe { MmapedSafetensors::multi(files) }.map_err(|e| TpError::Weights {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        Ok(ShardedWeights {
            source: Source::Files(st),
            path,
            shard,
            dtype,
            device: device.clone(),
        })
    }

    /// Random weights for rank `shard` in `dtype` on `device`, each tensor drawn on the device
    /// with the block shape a file would give: norm weights (`*norm.weight`) 1, the embeddings
    /// N(0, 1), every other (linear) weight N(0, 1 / in_features) of the whole tensor, so
    /// activations keep their scale through the layers as with [`super::write_random_llama`].
    /// The device's generator draws them in the order they are asked for: seeded alike
    /// (`Device::set_seed`), ranks that load the same model get the same whole tensors.
    pub fn random(shard: Shard, dtype: DType, device: &Device) -> ShardedWeights {
        ShardedWeights {
            source: Source::Random,
            path: PathBuf::from("(random weights)"),
            shard,
            dtype,
            device: device.clone(),
        }
    }

    /// The llama GGUF file `path` for rank `shard`: tensors are asked for by their Hugging
    /// Face names (as from safetensors) and read as this rank's block only; [`Self::get`]
    /// dequantizes them to `dtype` on `device`, [`Self::linear`] keeps quantized types
    /// quantized. GGUF keeps llama.cpp's q/k row order ([`Self::rope_interleaved`]).
    pub fn open_gguf(
        path: &Path,
        shard: Shard,
        dtype: DType,
        device: &Device,
    ) -> Result<ShardedWeights, TpError> {
        Ok(ShardedWeights {
            source: Source::Gguf(GgufShards::open(path)?),
            path: path.to_path_buf(),
            shard,
            dtype,
            device: device.clone(),
        })
    }

    /// The GGUF file, when the weights come from one.
    pub fn gguf(&self) -> Option<&GgufShards> {
        match &self.source {
            Source::Gguf(g) => Some(g),
            _ => None,
        }
    }

    /// This rank.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The dtype dense tensors come out in.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Whether the q and k projections' rows are in llama.cpp's order (GGUF files), which the
    /// interleaved rotary embedding (`rope_i`) reads, rather than Hugging Face's (`rope`).
    pub fn rope_interleaved(&self) -> bool {
        matches!(self.source, Source::Gguf(_))
    }

    /// Whether the files hold `name` (random weights hold every name).
    pub fn contains(&self, name: &str) -> bool {
        match &self.source {
            Source::Files(st) => st.get(name).is_ok(),
            Source::Random => true,
            Source::Gguf(g) => {
                gguf_name(name).is_some_and(|n| g.content().tensor_infos.contains_key(&n))
            }
        }
    }

    /// This rank's block of the linear layer weight `name` (split as `split`, whole shape
    /// `full`): dense as [`Self::get`] gives it, or, from a GGUF file of a quantized type, the
    /// block's GGML blocks on the device.
    pub fn linear(
        &self,
        name: &str,
        full: &[usize],
        split: Split,
    ) -> Result<ParallelWeight, TpError> {
        let Source::Gguf(g) = &self.source else {
            return Ok(ParallelWeight::Dense(self.get(name, full, split)?));
        };
        let q = g.get(
            &self.gguf_name(name)?,
            full,
            split,
            self.shard,
            &self.device,
        )?;
        if q.dtype().block_size() == 1 {
            // f32 / f16 / bf16: plain values, multiplied in the model's dtype.
            let t = q.dequantize(&self.device)?.to_dtype(self.dtype)?;
            return Ok(ParallelWeight::Dense(t));
        }
        Ok(ParallelWeight::Quantized(std::sync::Arc::new(q)))
    }

    /// The GGUF name of the Hugging Face name `name`, or [`TpError::MissingTensor`].
    fn gguf_name(&self, name: &str) -> Result<String, TpError> {
        gguf_name(name).ok_or_else(|| TpError::MissingTensor {
            path: self.path.clone(),
            tensor: name.to_string(),
        })
    }

    /// This rank's block of `name` (split as `split`), whose whole shape must be `full`.
    pub fn get(&self, name: &str, full: &[usize], split: Split) -> Result<Tensor, TpError> {
        let st = match &self.source {
            Source::Files(st) => st,
            Source::Random => return self.random_block(name, full, split),
            Source::Gguf(g) => {
                let q = g.get(
                    &self.gguf_name(name)?,
                    full,
                    split,
                    self.shard,
                    &self.device,
                )?;
                return Ok(q.dequantize(&self.device)?.to_dtype(self.dtype)?);
            }
        };
        let view = st.get(name).map_err(|_| TpError::MissingTensor {
            path: self.path.clone(),
            tensor: name.to_string(),
        })?;
        if view.shape() != full {
            return Err(TpError::Shape {
                path: self.path.clone(),
                tensor: name.to_string(),
                got: view.shape().to_vec(),
                want: full.to_vec(),
            });
        }
        let weights_err = |reason: String| TpError::Weights {
            path: self.path.clone(),
            reason: format!("{name}: {reason}"),
        };
        let file_dtype = DType::try_from(view.dtype()).map_err(|e| weights_err(e.to_string()))?;
        let (shape, range) = split.local(self.shard, name, full)?;
        let tensor = match (split.dim(), range) {
            (Some(0), Some(r)) => slice_of(&view, view.slice(r), file_dtype, &shape),
            (Some(_), Some(r)) => slice_of(&view, view.slice((.., r)), file_dtype, &shape),
            _ => Tensor::from_raw_buffer(view.data(), file_dtype, &shape, &Device::Cpu),
        }
        .map_err(|e| weights_err(e.to_string()))?;
        Ok(tensor.to_device(&self.device)?.to_dtype(self.dtype)?)
    }

    /// [`ShardedWeights::get`] for random weights: this rank's block, drawn on the device.
    fn random_block(&self, name: &str, full: &[usize], split: Split) -> Result<Tensor, TpError> {
        let (shape, _) = split.local(self.shard, name, full)?;
        let dev = &self.device;
        let tensor = if name.ends_with("norm.weight") {
            Tensor::ones(shape, self.dtype, dev)?
        } else {
            let std = match full {
                [_, inputs] if !name.ends_with("embed_tokens.weight") => {
                    (1.0 / (*inputs).max(1) as f64).sqrt()
                }
                _ => 1.0,
            };
            Tensor::randn(0f32, std as f32, shape, dev)?.to_dtype(self.dtype)?
        };
        Ok(tensor)
    }
}

/// The bytes of a safetensors slice, gathered into a host tensor of `shape`.
fn slice_of(
    view: &safetensors::tensor::TensorView<'_>,
    slice: Result<safetensors::slice::SliceIterator<'_>, safetensors::slice::InvalidSlice>,
    dtype: DType,
    shape: &[usize],
) -> candle_core::Result<Tensor> {
    let it = slice.map_err(|e| {
        candle_core::Error::Msg(format!("cannot slice a {:?} tensor: {e}", view.shape()))
    })?;
    let mut raw = Vec::with_capacity(it.remaining_byte_len());
    for chunk in it {
        raw.extend_from_slice(chunk);
    }
    Tensor::from_raw_buffer(&raw, dtype, shape, &Device::Cpu)
}

/// The weights files of a model directory: `model.safetensors`, or the parts a
/// `model.safetensors.index.json` lists.
pub fn safetensors_files(dir: &Path) -> Result<Vec<PathBuf>, TpError> {
    let single = dir.join("model.safetensors");
    if single.is_file() {
        return Ok(vec![single]);
    }
    let index = dir.join("model.safetensors.index.json");
    let err = |reason: String| TpError::Weights {
        path: index.clone(),
        reason,
    };
    let text = std::fs::read_to_string(&index).map_err(|e| {
        err(format!(
            "{e}; the directory has neither model.safetensors nor this index"
        ))
    })?;
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
    let map = json["weight_map"]
        .as_object()
        .ok_or_else(|| err("no weight_map object".into()))?;
    let mut files: Vec<PathBuf> = map
        .values()
        .filter_map(|v| v.as_str())
        .map(|f| dir.join(f))
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn each_rank_gets_its_block_and_uneven_splits_name_the_tensor() {
        let w = |rank| Shard::new(rank, 4).unwrap();
        assert_eq!(w(0).range("t", 0, 8).unwrap(), 0..2);
        assert_eq!(w(3).range("t", 0, 8).unwrap(), 6..8);
        assert_eq!(Shard::SOLO.range("t", 1, 7).unwrap(), 0..7);
        let e = w(1)
            .range("model.layers.0.mlp.down_proj.weight", 1, 10)
            .unwrap_err();
        assert!(
            matches!(&e, TpError::UnevenSplit { tensor, dim: 1, len: 10, world_size: 4 }
                if tensor == "model.layers.0.mlp.down_proj.weight"),
            "{e}"
        );
        assert!(e.to_string().contains("down_proj"), "{e}");
        assert!(matches!(Shard::new(2, 2), Err(TpError::BadRank { .. })));
        assert!(matches!(Shard::new(0, 0), Err(TpError::BadRank { .. })));
        assert_eq!(w(0).heads("num_key_value_heads", 8).unwrap(), 2);
        let e = Shard::new(0, 2).unwrap().heads("num_attention_heads", 9);
        assert!(
            matches!(
                e,
                Err(TpError::Heads {
                    count: 9,
                    world_size: 2,
                    ..
                })
            ),
            "{e:?}"
        );
    }

    #[test]
    fn llama_tensors_split_as_megatron_does() {
        let p = "model.layers.3.";
        for (t, s) in [
            ("self_attn.q_proj.weight", Split::Rows),
            ("self_attn.k_proj.weight", Split::Rows),
            ("self_attn.v_proj.weight", Split::Rows),
            ("self_attn.o_proj.weight", Split::Cols),
            ("mlp.gate_proj.weight", Split::Rows),
            ("mlp.up_proj.weight", Split::Rows),
            ("mlp.down_proj.weight", Split::Cols),
            ("input_layernorm.weight", Split::Whole),
        ] {
            assert_eq!(Split::of_llama(&format!("{p}{t}")), s, "{t}");
        }
        assert_eq!(Split::of_llama("model.embed_tokens.weight"), Split::Whole);
        assert_eq!(Split::of_llama("lm_head.weight"), Split::Whole);
        let s = Shard::new(1, 2).unwrap();
        assert_eq!(
            Split::Rows.local(s, "q", &[6, 4]).unwrap(),
            (vec![3, 4], Some(3..6))
        );
        assert_eq!(
            Split::Cols.local(s, "o", &[6, 4]).unwrap(),
            (vec![6, 2], Some(2..4))
        );
        assert_eq!(Split::Whole.local(s, "n", &[5]).unwrap(), (vec![5], None));
        assert!(matches!(
            Split::Cols.local(s, "o", &[6, 5]),
            Err(TpError::UnevenSplit { dim: 1, len: 5, .. })
        ));
    }

    /// Random weights come in the block shape a file would give, in the asked dtype: norms 1,
    /// linear weights with standard deviation 1/sqrt(in_features) of the whole tensor, the
    /// embeddings 1; an uneven split is the same typed error.
    #[test]
    fn random_blocks_have_the_shard_shape_and_scale() {
        let shard = Shard::new(1, 2).unwrap();
        let w = ShardedWeights::random(shard, DType::F16, &Device::Cpu);
        assert!(w.contains("anything"));
        assert_eq!(w.shard(), shard);
        let std_of = |t: &Tensor| -> f64 {
            let v: Vec<f32> = t
                .to_dtype(DType::F32)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            let n = v.len() as f64;
            let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
            (v.iter()
                .map(|&x| (f64::from(x) - mean).powi(2))
                .sum::<f64>()
                / n)
                .sqrt()
        };
        let norm = w
            .get("model.layers.0.input_layernorm.weight", &[64], Split::Whole)
            .unwrap();
        assert_eq!(norm.dtype(), DType::F16);
        assert_eq!(
            norm.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap(),
            vec![1.0; 64]
        );
        let down = w
            .get(
                "model.layers.0.mlp.down_proj.weight",
                &[128, 400],
                Split::Cols,
            )
            .unwrap();
        assert_eq!(down.dims(), &[128, 200]);
        let s = std_of(&down);
        assert!((s - 0.05).abs() < 0.005, "std {s}, want 1/sqrt(400) = 0.05");
        let q = w
            .get(
                "model.layers.0.self_attn.q_proj.weight",
                &[64, 256],
                Split::Rows,
            )
            .unwrap();
        assert_eq!(q.dims(), &[32, 256]);
        let embed = w
            .get("model.embed_tokens.weight", &[100, 64], Split::Whole)
            .unwrap();
        let s = std_of(&embed);
        assert!((s - 1.0).abs() < 0.1, "embedding std {s}");
        assert!(matches!(
            w.get("model.layers.0.mlp.down_proj.weight", &[4, 5], Split::Cols),
            Err(TpError::UnevenSplit { dim: 1, len: 5, .. })
        ));
    }

    /// The blocks read through the mapped file's slices are the blocks of the whole tensor,
    /// in every stored dtype the model uses.
    #[test]
    fn sharded_reads_equal_slices_of_the_whole_tensor() {
        let dir = std::env::temp_dir().join(format!("tp-shard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("model.safetensors");
        let whole = Tensor::arange(0f32, 6. * 10., &Device::Cpu)
            .unwrap()
            .reshape((6, 10))
            .unwrap();
        let tensors = std::collections::HashMap::from([
            ("a".to_string(), whole.clone()),
            ("b".to_string(), whole.to_dtype(DType::BF16).unwrap()),
        ]);
        candle_core::safetensors::save(&tensors, &file).unwrap();
        for world in [1, 2] {
            for rank in 0..world {
                let shard = Shard::new(rank, world).unwrap();
                let w = ShardedWeights::open(
                    std::slice::from_ref(&file),
                    shard,
                    DType::F32,
                    &Device::Cpu,
                )
                .unwrap();
                for name in ["a", "b"] {
                    let rows = w.get(name, &[6, 10], Split::Rows).unwrap();
                    let want = whole.narrow(0, rank * 6 / world, 6 / world).unwrap();
                    assert_eq!(
                        rows.to_vec2::<f32>().unwrap(),
                        want.to_vec2::<f32>().unwrap()
                    );
                    let cols = w.get(name, &[6, 10], Split::Cols).unwrap();
                    let want = whole.narrow(1, rank * 10 / world, 10 / world).unwrap();
                    assert_eq!(
                        cols.to_vec2::<f32>().unwrap(),
                        want.to_vec2::<f32>().unwrap()
                    );
                }
                assert!(matches!(
                    w.get("a", &[6, 11], Split::Rows),
                    Err(TpError::Shape { .. })
                ));
                assert!(matches!(
                    w.get("c", &[6, 10], Split::Rows),
                    Err(TpError::MissingTensor { .. })
                ));
            }
        }
        let w = ShardedWeights::open(
            std::slice::from_ref(&file),
            Shard::new(0, 4).unwrap(),
            DType::F32,
            &Device::Cpu,
        )
        .unwrap();
        let e = w.get("a", &[6, 10], Split::Rows).unwrap_err();
        assert!(
            matches!(&e, TpError::UnevenSplit { tensor, .. } if tensor == "a"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
