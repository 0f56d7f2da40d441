//! Reading one rank's block of a GGUF file's tensors, and a llama GGUF's config.
//!
//! A GGUF tensor of shape `(rows, cols)` (candle's order: GGML's `ne[1], ne[0]`) is stored row
//! after row, each row `cols / block_size` blocks of `type_size` bytes (q4_0: 32 values in 18
//! bytes; the k-quants: 256 values a block; f32/f16/bf16: blocks of one value). So:
//!
//! - a block of **rows** (a column-parallel layer's output features, a vocabulary block) is
//!   one byte range of whole rows: one seek and one read;
//! - a block of **columns** (a row-parallel layer's input features) is a byte range of every
//!   row, gathered row by row; its first column and its width must fall on block boundaries
//!   (a multiple of the type's block size), else [`TpError::BlockSplit`] names the tensor, the
//!   type and the columns: a quantized block cannot be cut.
//!
//! [`SlicePlan`] is that arithmetic (no I/O; tested for every type candle reads), and
//! [`GgufShards`] applies it to a file, reading only the planned bytes (seek + read per range,
//! never the whole tensor) and building a candle [`QTensor`] of the block on the rank's device
//! through candle's own `qtensor_from_ggml`. The file's header is candle's
//! [`gguf_file::Content`]; [`gguf_config`] turns its `llama.*` metadata into
//! candle-transformers' llama [`Config`].

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use candle_core::quantized::{ggml_file, gguf_file, GgmlDType, QTensor};
use candle_core::Device;
use candle_transformers::models::llama::{Config, LlamaEosToks};

use super::shard::Split;
use super::{Shard, TpError};

/// The GGML types candle can load (`qtensor_from_ggml`): the slicer takes these only.
pub const GGUF_TYPES: [GgmlDType; 13] = [
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q2K,
    GgmlDType::Q3K,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// Which bytes of a GGUF tensor hold a block of its rows or columns: `rows` rows, of each the
/// bytes `row_bytes` (relative to the row's start; a row is `row_len` bytes in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlicePlan {
    /// The GGML type.
    pub dtype: GgmlDType,
    /// The block's shape (what the [`QTensor`] gets).
    pub shape: Vec<usize>,
    /// The rows read.
    pub rows: Range<usize>,
    /// The bytes of one whole row in the file.
    pub row_len: usize,
    /// The bytes read of each row, relative to its start.
    pub row_bytes: Range<usize>,
}

impl SlicePlan {
    /// The whole tensor `tensor` of `dtype` and shape `full` (any rank; the last dimension must
    /// hold whole blocks).
    pub fn whole(tensor: &str, dtype: GgmlDType, full: &[usize]) -> Result<SlicePlan, TpError> {
        let cols = full.last().copied().unwrap_or(1);
        let rows = full.iter().rev().skip(1).product::<usize>();
        let row_len = row_len(tensor, dtype, cols)?;
        Ok(SlicePlan {
            dtype,
            shape: full.to_vec(),
            rows: 0..rows,
            row_len,
            row_bytes: 0..row_len,
        })
    }

    /// Rows `rows` of the 2-D tensor `tensor` of `dtype` and shape `full`.
    pub fn rows(
        tensor: &str,
        dtype: GgmlDType,
        full: &[usize],
        rows: Range<usize>,
    ) -> Result<SlicePlan, TpError> {
        let (n, cols) = dims2(tensor, full)?;
        if rows.start > rows.end || rows.end > n {
            return Err(out_of_range(tensor, 0, full, &rows));
        }
        let row_len = row_len(tensor, dtype, cols)?;
        Ok(SlicePlan {
            dtype,
            shape: vec![rows.len(), cols],
            rows,
            row_len,
            row_bytes: 0..row_len,
        })
    }

    /// Columns `cols` of every row of the 2-D tensor `tensor` of `dtype` and shape `full`: the
    /// range must start and end on block boundaries ([`TpError::BlockSplit`]).
    pub fn cols(
        tensor: &str,
        dtype: GgmlDType,
        full: &[usize],
        cols: Range<usize>,
    ) -> Result<SlicePlan, TpError> {
        let (n, width) = dims2(tensor, full)?;
        if cols.start > cols.end || cols.end > width {
            return Err(out_of_range(tensor, 1, full, &cols));
        }
        let row_len = row_len(tensor, dtype, width)?;
        let block = dtype.block_size();
        if !cols.start.is_multiple_of(block) || !cols.len().is_multiple_of(block) {
            return Err(TpError::BlockSplit {
                tensor: tensor.to_string(),
                dtype,
                cols,
                block,
            });
        }
        let bytes = |c: usize| c / block * dtype.type_size();
        Ok(SlicePlan {
            dtype,
            shape: vec![n, cols.len()],
            rows: 0..n,
            row_len,
            row_bytes: bytes(cols.start)..bytes(cols.end),
        })
    }

    /// The plan of this rank's block of `tensor` split as `split` (for [`Split::Whole`], the
    /// whole tensor): [`Split::local`]'s range, as rows or columns.
    pub fn of_split(
        tensor: &str,
        dtype: GgmlDType,
        full: &[usize],
        split: Split,
        shard: Shard,
    ) -> Result<SlicePlan, TpError> {
        let (_, range) = split.local(shard, tensor, full)?;
        match (split.dim(), range) {
            (Some(0), Some(r)) => SlicePlan::rows(tensor, dtype, full, r),
            (Some(_), Some(r)) => SlicePlan::cols(tensor, dtype, full, r),
            _ => SlicePlan::whole(tensor, dtype, full),
        }
    }

    /// The bytes the block holds.
    pub fn len(&self) -> usize {
        self.rows.len() * self.row_bytes.len()
    }

    /// Whether the block is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The reads, as `(offset from the tensor's start, length)`: one for whole rows, one per
    /// row for a block of columns.
    pub fn reads(&self) -> Vec<(u64, usize)> {
        if self.row_bytes.len() == self.row_len {
            let start = self.rows.start * self.row_len;
            return vec![(start as u64, self.len())];
        }
        self.rows
            .clone()
            .map(|r| {
                let start = r * self.row_len + self.row_bytes.start;
                (start as u64, self.row_bytes.len())
            })
            .collect()
    }

    /// The block's bytes cut out of the whole tensor's bytes `whole` (what [`Self::reads`]
    /// reads from the file; for tests and in-memory tensors).
    pub fn gather(&self, whole: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(self.len());
        for (start, len) in self.reads() {
            let start = usize::try_from(start).ok()?;
            out.extend_from_slice(whole.get(start..start.checked_add(len)?)?);
        }
        Some(out)
    }
}

/// The bytes of one row of `cols` values of `dtype`, or [`TpError::BlockSplit`] when a row is
/// not whole blocks (such a tensor is not a valid GGUF tensor) or the type is one candle
/// cannot load.
fn row_len(tensor: &str, dtype: GgmlDType, cols: usize) -> Result<usize, TpError> {
    if !GGUF_TYPES.contains(&dtype) {
        return Err(TpError::GgufType {
            tensor: tensor.to_string(),
            dtype,
        });
    }
    let block = dtype.block_size();
    if !cols.is_multiple_of(block) {
        return Err(TpError::BlockSplit {
            tensor: tensor.to_string(),
            dtype,
            cols: 0..cols,
            block,
        });
    }
    Ok(cols / block * dtype.type_size())
}

fn dims2(tensor: &str, full: &[usize]) -> Result<(usize, usize), TpError> {
    match full {
        [rows, cols] => Ok((*rows, *cols)),
        _ => Err(TpError::Shape {
            path: PathBuf::new(),
            tensor: tensor.to_string(),
            got: full.to_vec(),
            want: vec![0, 0],
        }),
    }
}

fn out_of_range(tensor: &str, dim: usize, full: &[usize], r: &Range<usize>) -> TpError {
    TpError::Weights {
        path: PathBuf::new(),
        reason: format!(
            "{tensor}: {r:?} of dimension {dim} is outside its shape {full:?} (a bug in the \
             split, not in the file)"
        ),
    }
}

/// One rank's reader of a GGUF file: the header parsed once (candle's [`gguf_file::Content`]),
/// each tensor read as the rank's block only.
pub struct GgufShards {
    path: PathBuf,
    content: gguf_file::Content,
    file: Mutex<File>,
    size: u64,
}

impl std::fmt::Debug for GgufShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufShards")
            .field("path", &self.path)
            .field("tensors", &self.content.tensor_infos.len())
            .finish_non_exhaustive()
    }
}

impl GgufShards {
    /// Opens `path` and reads its header.
    pub fn open(path: &Path) -> Result<GgufShards, TpError> {
        let err = |reason: String| TpError::Weights {
            path: path.to_path_buf(),
            reason,
        };
        let file = File::open(path).map_err(|e| err(e.to_string()))?;
        // The header is many small values (the tokenizer's strings): read it buffered.
        let mut header = BufReader::new(file);
        let content = gguf_file::Content::read(&mut header).map_err(|e| err(e.to_string()))?;
        let mut file = header.into_inner();
        let size = file
            .seek(SeekFrom::End(0))
            .map_err(|e| err(e.to_string()))?;
        Ok(GgufShards {
            path: path.to_path_buf(),
            content,
            file: Mutex::new(file),
            size,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed header: metadata and tensor infos.
    pub fn content(&self) -> &gguf_file::Content {
        &self.content
    }

    /// The GGML type and shape (candle's order) of `name`, or [`TpError::MissingTensor`].
    pub fn info(&self, name: &str) -> Result<(GgmlDType, Vec<usize>), TpError> {
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| TpError::MissingTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
            })?;
        Ok((info.ggml_dtype, info.shape.dims().to_vec()))
    }

    /// This rank's block of `name` split as `split` (whose whole shape must be `full`), on
    /// `device`.
    pub fn get(
        &self,
        name: &str,
        full: &[usize],
        split: Split,
        shard: Shard,
        device: &Device,
    ) -> Result<QTensor, TpError> {
        let (dtype, shape) = self.info(name)?;
        if shape != full {
            return Err(TpError::Shape {
                path: self.path.clone(),
                tensor: name.to_string(),
                got: shape,
                want: full.to_vec(),
            });
        }
        let plan = SlicePlan::of_split(name, dtype, full, split, shard)?;
        self.read(name, &plan, device)
    }

    /// The block `plan` of `name` on `device`: only its bytes are read from the file.
    pub fn read(&self, name: &str, plan: &SlicePlan, device: &Device) -> Result<QTensor, TpError> {
        let err = |reason: String| TpError::Weights {
            path: self.path.clone(),
            reason: format!("{name}: {reason}"),
        };
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| TpError::MissingTensor {
                path: self.path.clone(),
                tensor: name.to_string(),
            })?;
        let whole = SlicePlan::whole(name, info.ggml_dtype, info.shape.dims())?;
        if plan.dtype != whole.dtype
            || plan.row_len != whole.row_len
            || plan.rows.end > whole.rows.end
            || plan.row_bytes.end > plan.row_len
        {
            return Err(err(format!(
                "the block {plan:?} is not one of this {:?} tensor of {:?}",
                info.ggml_dtype,
                info.shape.dims()
            )));
        }
        let start = self
            .content
            .tensor_data_offset
            .checked_add(info.offset)
            .filter(|s| s.saturating_add(whole.len() as u64) <= self.size)
            .ok_or_else(|| {
                err(format!(
                    "{} bytes at offset {} + {} run past the end of the file ({} bytes)",
                    whole.len(),
                    self.content.tensor_data_offset,
                    info.offset,
                    self.size
                ))
            })?;
        let mut bytes = vec![0u8; plan.len()];
        {
            let mut file = self
                .file
                .lock()
                .map_err(|_| err("a reader panicked while holding the file".into()))?;
            let mut at = 0;
            for (offset, len) in plan.reads() {
                file.seek(SeekFrom::Start(start + offset))
                    .and_then(|_| file.read_exact(&mut bytes[at..at + len]))
                    .map_err(|e| err(e.to_string()))?;
                at += len;
            }
        }
        ggml_file::qtensor_from_ggml(plan.dtype, &bytes, plan.shape.clone(), device)
            .map_err(|e| err(e.to_string()))
    }
}

/// candle-transformers' llama [`Config`] from a llama GGUF file's metadata (and the shape of
/// `token_embd.weight` for the vocabulary size); `tie_word_embeddings` when the file has no
/// `output.weight`. GGUF keeps llama.cpp's q/k row order, so the model applies the
/// interleaved rotary embedding to it (see [`super::ShardedWeights::rope_interleaved`]).
pub fn gguf_config(gguf: &GgufShards, flash_attn: bool) -> Result<Config, TpError> {
    let c = gguf.content();
    let err = |key: &str, reason: String| TpError::Config {
        path: gguf.path().to_path_buf(),
        reason: format!("{key}: {reason}"),
    };
    let get = |key: &str| c.metadata.get(key);
    let arch = match get("general.architecture") {
        Some(v) => v
            .to_string()
            .map_err(|e| err("general.architecture", e.to_string()))?,
        None => return Err(err("general.architecture", "is missing".into())),
    };
    if arch != "llama" {
        return Err(err(
            "general.architecture",
            format!("is {arch:?}; the tensor-parallel llama reads llama GGUF files"),
        ));
    }
    let usize_of = |key: &str| -> Result<Option<usize>, TpError> {
        get(key)
            .map(|v| v.to_u32().map(|x| x as usize))
            .transpose()
            .map_err(|e| err(key, e.to_string()))
    };
    let need = |key: &str| usize_of(key)?.ok_or_else(|| err(key, "is missing".into()));
    let f32_of = |key: &str| -> Result<Option<f32>, TpError> {
        get(key)
            .map(|v| v.to_f32())
            .transpose()
            .map_err(|e| err(key, e.to_string()))
    };
    let hidden = need("llama.embedding_length")?;
    let heads = need("llama.attention.head_count")?;
    let kv_heads = usize_of("llama.attention.head_count_kv")?.unwrap_or(heads);
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return Err(err(
            "llama.attention.head_count",
            format!("{heads} heads do not divide the embedding length {hidden}"),
        ));
    }
    if let Some(rope) = usize_of("llama.rope.dimension_count")? {
        if rope != hidden / heads {
            return Err(err(
                "llama.rope.dimension_count",
                format!(
                    "{rope}: a partial rotary embedding (heads of {})",
                    hidden / heads
                ),
            ));
        }
    }
    let (_, embd) = gguf.info("token_embd.weight")?;
    let vocab = match embd.as_slice() {
        [v, h] if *h == hidden => *v,
        _ => {
            return Err(TpError::Shape {
                path: gguf.path().to_path_buf(),
                tensor: "token_embd.weight".into(),
                got: embd,
                want: vec![0, hidden],
            })
        }
    };
    let eps = f32_of("llama.attention.layer_norm_rms_epsilon")?.ok_or_else(|| {
        err(
            "llama.attention.layer_norm_rms_epsilon",
            "is missing".into(),
        )
    })?;
    Ok(Config {
        hidden_size: hidden,
        intermediate_size: need("llama.feed_forward_length")?,
        vocab_size: vocab,
        num_hidden_layers: need("llama.block_count")?,
        num_attention_heads: heads,
        num_key_value_heads: kv_heads,
        use_flash_attn: flash_attn,
        rms_norm_eps: f64::from(eps),
        rope_theta: f32_of("llama.rope.freq_base")?.unwrap_or(10_000.0),
        bos_token_id: usize_of("tokenizer.ggml.bos_token_id")?.map(|x| x as u32),
        eos_token_id: usize_of("tokenizer.ggml.eos_token_id")?
            .map(|x| LlamaEosToks::Single(x as u32)),
        rope_scaling: None,
        max_position_embeddings: usize_of("llama.context_length")?.unwrap_or(4096),
        tie_word_embeddings: !c.tensor_infos.contains_key("output.weight"),
    })
}

/// The GGUF name of a llama tensor in the Hugging Face layout (the inverse of
/// [`crate::decoder::hf_name`]), or `None` for a name GGUF llama files do not have.
pub fn gguf_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    layer.parse::<usize>().ok()?;
    let (part, suffix) = rest.rsplit_once('.')?;
    let g = match part {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{g}.{suffix}"))
}
