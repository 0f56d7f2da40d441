//! Which part of each weight a rank holds, and reading only that part from a memory-mapped
//! safetensors file.
//!
//! A linear layer's weight is `(out_features, in_features)` (PyTorch's layout). A
//! column-parallel layer splits the *outputs*, so a rank reads a block of **rows** (dimension
//! 0); a row-parallel layer splits the *inputs*, so a rank reads a block of **columns**
//! (dimension 1). Rank `r` of `w` gets block `r` of `len / w` entries; a length that is not a
//! multiple of `w` is an error naming the tensor, never a silent remainder. [`ShardedWeights`]
//! slices the mapped file's tensor view (safetensors' `slice`), so a rank copies only its block
//! out of the page cache and never materialises the whole weight.

use std::ops::Range;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use safetensors::slice::IndexOp;

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

    /// The shape this rank holds of a tensor of shape `full`, and the range of the split
    /// dimension (`None` for [`Split::Whole`]).
    pub fn local(
        self,
        shard: Shard,
        tensor: &str,
        full: &[usize],
    ) -> Result<(Vec<usize>, Option<Range<usize>>), TpError> {
        let dim = match self {
            Split::Whole => return Ok((full.to_vec(), None)),
            Split::Rows => 0,
            Split::Cols => 1,
        };
        if full.len() != 2 {
            return Err(TpError::Shape {
                path: PathBuf::new(),
                tensor: tensor.to_string(),
                got: full.to_vec(),
                want: vec![0, 0],
            });
        }
        let range = shard.range(tensor, dim, full[dim])?;
        let mut shape = full.to_vec();
        shape[dim] = range.len();
        Ok((shape, Some(range)))
    }
}

/// One rank's view of safetensors files: memory-mapped, each tensor read as this rank's block.
pub struct ShardedWeights {
    st: MmapedSafetensors,
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
            st,
            path,
            shard,
            dtype,
            device: device.clone(),
        })
    }

    /// This rank.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// Whether the files hold `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.st.get(name).is_ok()
    }

    /// This rank's block of `name` (split as `split`), whose whole shape must be `full`.
    pub fn get(&self, name: &str, full: &[usize], split: Split) -> Result<Tensor, TpError> {
        let view = self.st.get(name).map_err(|_| TpError::MissingTensor {
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
        let tensor = match (split, range) {
            (Split::Rows, Some(r)) => slice_of(&view, view.slice(r), file_dtype, &shape),
            (Split::Cols, Some(r)) => slice_of(&view, view.slice((.., r)), file_dtype, &shape),
            _ => Tensor::from_raw_buffer(view.data(), file_dtype, &shape, &Device::Cpu),
        }
        .map_err(|e| weights_err(e.to_string()))?;
        Ok(tensor.to_device(&self.device)?.to_dtype(self.dtype)?)
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
