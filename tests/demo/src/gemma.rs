//! A Gemma 3 decoder from a GGUF file (candle-transformers' `quantized_gemma3`, unchanged),
//! greedy decoding on token ids: a real Q4_K_M model ([`crate::weights::GEMMA3_270M_GGUF`]:
//! q4_K, q6_K, q5_0 and q8_0 weights) for checking the GPU's quantized paths against the CPU.
//!
//! Two ways to run the same weights:
//!
//! - [`Gemma3Gguf::load`]: the quantized file as shipped, on any device; on the ROCm GPU the
//!   weights stay quantized in device memory (`QStorage::Ext`).
//! - [`Gemma3Gguf::load_dequantized`]: every tensor dequantized to f32 on the CPU first (the
//!   CPU's own `to_float`), so the CPU multiplies in f32 what the GPU's f32 paths multiply: the
//!   reference for the GPU. (The CPU's quantized path rounds activations to 8 bits, so it
//!   parts from both after a few tokens.)
//!
//! The text side is deliberately small: the GGUF's SentencePiece vocabulary
//! (`tokenizer.ggml.tokens`), a greedy longest-piece [`Gemma3Gguf::encode`] (enough for the
//! plain English prompts of the tests; not SentencePiece's exact segmentation) and a
//! [`Gemma3Gguf::decode`] that joins pieces. The comparisons run on token ids, so neither
//! needs to be exact.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Cursor};
use std::path::Path;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_transformers::models::quantized_gemma3::ModelWeights;

use crate::decoder::{forced_steps, greedy, DecoderError};

/// SentencePiece's word-boundary marker.
const SPACE: char = '\u{2581}';

/// A Gemma 3 GGUF model on one device, with its vocabulary.
pub struct Gemma3Gguf {
    model: ModelWeights,
    pieces: Vec<String>,
    index: HashMap<String, u32>,
    longest: usize,
    bos: u32,
    eos: Vec<u32>,
    device: Device,
}

impl std::fmt::Debug for Gemma3Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gemma3Gguf")
            .field("vocab", &self.pieces.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .finish_non_exhaustive()
    }
}

/// Opens and parses a GGUF file, checking it is a gemma3 model.
fn read(path: &Path) -> Result<(gguf_file::Content, BufReader<File>), DecoderError> {
    let gguf_err = |error: candle_core::Error| DecoderError::Gguf {
        path: path.to_path_buf(),
        error,
    };
    if !path.is_file() {
        return Err(DecoderError::Missing(path.to_path_buf()));
    }
    let file = File::open(path).map_err(|e| gguf_err(e.into()))?;
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader).map_err(gguf_err)?;
    let arch = content
        .metadata
        .get("general.architecture")
        .and_then(|v| v.to_string().ok())
        .cloned()
        .unwrap_or_default();
    if arch != "gemma3" {
        return Err(DecoderError::Unsupported {
            path: path.to_path_buf(),
            what: format!("general.architecture {arch:?} (a gemma3 GGUF is expected here)"),
        });
    }
    Ok((content, reader))
}

/// A metadata value as `u32`, naming the key when absent or of another type.
fn md_u32(content: &gguf_file::Content, path: &Path, key: &str) -> Result<u32, DecoderError> {
    let bad = |reason: String| DecoderError::Metadata {
        path: path.to_path_buf(),
        key: key.to_string(),
        reason,
    };
    content
        .metadata
        .get(key)
        .ok_or_else(|| bad("is missing".into()))?
        .to_u32()
        .map_err(|e| bad(format!("has the wrong type ({e})")))
}

impl Gemma3Gguf {
    /// Loads the GGUF file `path` on `device`, the weights keeping their GGML types there.
    pub fn load(path: &Path, device: &Device) -> Result<Self, DecoderError> {
        let (content, mut reader) = read(path)?;
        let vocab = Vocab::from_gguf(&content, path)?;
        let model = ModelWeights::from_gguf(content, &mut reader, device).map_err(|error| {
            DecoderError::Gguf {
                path: path.to_path_buf(),
                error,
            }
        })?;
        tracing::info!(path = %path.display(), device = ?device.location(), "gemma3: loaded GGUF");
        Ok(vocab.with(model, device))
    }

    /// Loads the GGUF file `path` on the CPU with every quantized tensor dequantized to f32
    /// (written as an f32 GGUF in memory, then loaded), so the CPU's products are plain f32
    /// ones on the CPU's dequantized values. About 4 bytes per weight of memory, twice over
    /// while loading.
    pub fn load_dequantized(path: &Path) -> Result<Self, DecoderError> {
        let (content, mut reader) = read(path)?;
        let vocab = Vocab::from_gguf(&content, path)?;
        let gguf_err = |error: candle_core::Error| DecoderError::Gguf {
            path: path.to_path_buf(),
            error,
        };
        let mut tensors = Vec::with_capacity(content.tensor_infos.len());
        for name in content.tensor_infos.keys() {
            let q = content
                .tensor(&mut reader, name, &Device::Cpu)
                .map_err(gguf_err)?;
            let f = q.dequantize(&Device::Cpu).map_err(gguf_err)?;
            tensors.push((
                name.clone(),
                QTensor::quantize(&f, GgmlDType::F32).map_err(gguf_err)?,
            ));
        }
        let metadata: Vec<(&str, &gguf_file::Value)> = content
            .metadata
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        let tensor_refs: Vec<(&str, &QTensor)> =
            tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let mut bytes = Cursor::new(Vec::new());
        gguf_file::write(&mut bytes, &metadata, &tensor_refs).map_err(gguf_err)?;
        drop(tensors);
        bytes.set_position(0);
        let f32_content = gguf_file::Content::read(&mut bytes).map_err(gguf_err)?;
        let model =
            ModelWeights::from_gguf(f32_content, &mut bytes, &Device::Cpu).map_err(gguf_err)?;
        tracing::info!(path = %path.display(), "gemma3: loaded GGUF dequantized to f32");
        Ok(vocab.with(model, &Device::Cpu))
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The BOS id followed by `text` split greedily into the longest vocabulary pieces (spaces
    /// as SentencePiece's `▁`); a character no piece starts with is an error.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, DecoderError> {
        let text: String = text.replace(' ', &SPACE.to_string());
        let mut ids = vec![self.bos];
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let mut end = rest.len().min(self.longest);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let found = loop {
                if end == 0 {
                    break None;
                }
                if let Some(&id) = self.index.get(&rest[..end]) {
                    break Some((id, end));
                }
                end -= 1;
                while end > 0 && !rest.is_char_boundary(end) {
                    end -= 1;
                }
            };
            let Some((id, len)) = found else {
                return Err(DecoderError::Encode(format!(
                    "no vocabulary piece starts with {:?}",
                    rest.chars().next().unwrap_or(' ')
                )));
            };
            ids.push(id);
            rest = &rest[len..];
        }
        Ok(ids)
    }

    /// The pieces of `ids` joined, `▁` as a space, control tokens (`<...>`) left out.
    pub fn decode(&self, ids: &[u32]) -> String {
        ids.iter()
            .filter_map(|&id| self.pieces.get(id as usize))
            .filter(|p| !(p.starts_with('<') && p.ends_with('>')))
            .map(|p| p.replace(SPACE, " "))
            .collect()
    }

    /// Greedy decoding of up to `max_tokens` tokens after the token ids `prompt` (stopping
    /// after an EOS id): the new ids.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
    ) -> Result<Vec<u32>, DecoderError> {
        let (model, device) = (&mut self.model, &self.device);
        let (ids, _, _) = greedy(prompt, max_tokens, &self.eos, |input, pos| {
            let x = Tensor::new(input, device)?.unsqueeze(0)?;
            Ok(model.forward(&x, pos)?)
        })?;
        Ok(ids)
    }

    /// The f32 logits after `prompt` and after each id of `continuation` fed in turn through
    /// the KV cache: `continuation.len() + 1` rows (position 0 restarts the cache).
    pub fn forced_logits(
        &mut self,
        prompt: &[u32],
        continuation: &[u32],
    ) -> Result<Vec<Vec<f32>>, DecoderError> {
        if prompt.is_empty() {
            return Err(DecoderError::EmptyPrompt);
        }
        let model = &mut self.model;
        forced_steps(prompt.to_vec(), continuation, &self.device, |x, pos| {
            Ok(model.forward(x, pos)?)
        })
    }
}

/// The vocabulary and special ids of a gemma3 GGUF.
struct Vocab {
    pieces: Vec<String>,
    bos: u32,
    eos: Vec<u32>,
}

impl Vocab {
    fn from_gguf(content: &gguf_file::Content, path: &Path) -> Result<Self, DecoderError> {
        let key = "tokenizer.ggml.tokens";
        let bad = |reason: String| DecoderError::Metadata {
            path: path.to_path_buf(),
            key: key.to_string(),
            reason,
        };
        let tokens = content
            .metadata
            .get(key)
            .ok_or_else(|| bad("is missing".into()))?
            .to_vec()
            .map_err(|e| bad(format!("is not a list ({e})")))?;
        let pieces = tokens
            .iter()
            .map(|v| v.to_string().cloned())
            .collect::<candle_core::Result<Vec<String>>>()
            .map_err(|e| bad(format!("holds a non-string ({e})")))?;
        let bos = md_u32(content, path, "tokenizer.ggml.bos_token_id")?;
        let mut eos = vec![md_u32(content, path, "tokenizer.ggml.eos_token_id")?];
        // Gemma's chat turns end with <end_of_turn>.
        if let Some(id) = pieces.iter().position(|p| p == "<end_of_turn>") {
            eos.push(id as u32);
        }
        Ok(Vocab { pieces, bos, eos })
    }

    fn with(self, model: ModelWeights, device: &Device) -> Gemma3Gguf {
        let index = self
            .pieces
            .iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), i as u32))
            .collect();
        let longest = self.pieces.iter().map(String::len).max().unwrap_or(1);
        Gemma3Gguf {
            model,
            pieces: self.pieces,
            index,
            longest,
            bos: self.bos,
            eos: self.eos,
            device: device.clone(),
        }
    }
}
