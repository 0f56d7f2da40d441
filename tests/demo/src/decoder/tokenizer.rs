//! The GPT-2 byte-level BPE tokenizer stored in a GGUF file's metadata (see the `decoder`
//! module docs), and encoding and decoding with a `tokenizers` tokenizer.

use std::path::Path;

use candle_core::quantized::gguf_file;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::{AddedToken, Tokenizer};

use super::metadata::{md_as, md_opt};
use super::DecoderError;

/// The tokenizer built from GGUF metadata, with its special ids.
#[derive(Debug, Clone)]
pub struct GgufTokenizer {
    /// The Hugging Face tokenizer (BPE, byte-level; BOS added by its post-processor when the
    /// metadata asks for it).
    pub tokenizer: Tokenizer,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
}

/// Builds the tokenizer stored in a GGUF file's metadata (`path` names the file in errors).
pub fn tokenizer_from_gguf(
    content: &gguf_file::Content,
    path: &Path,
) -> Result<GgufTokenizer, DecoderError> {
    let unsupported = |what: String| DecoderError::Unsupported {
        path: path.to_path_buf(),
        what,
    };
    let tok_err = |reason: String| DecoderError::Tokenizer {
        path: path.to_path_buf(),
        reason,
    };
    let model = md_as(content, path, "tokenizer.ggml.model", |v| v.to_string())?;
    if model != "gpt2" {
        return Err(unsupported(format!("tokenizer.ggml.model {model:?}")));
    }
    let pre = md_opt(content, path, "tokenizer.ggml.pre", |v| v.to_string())?
        .map_or("default", String::as_str);
    let digits = match pre {
        "smollm" => true,
        "default" | "gpt2" => false,
        other => return Err(unsupported(format!("tokenizer.ggml.pre {other:?}"))),
    };
    let strings = |key: &str| -> Result<Vec<String>, DecoderError> {
        md_as(content, path, key, |v| v.to_vec())?
            .iter()
            .map(|v| v.to_string().cloned())
            .collect::<candle_core::Result<_>>()
            .map_err(|e| DecoderError::Metadata {
                path: path.to_path_buf(),
                key: key.to_string(),
                reason: format!("is not a list of strings ({e})"),
            })
    };
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges = strings("tokenizer.ggml.merges")?
        .into_iter()
        .map(|m| {
            m.split_once(' ')
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .ok_or_else(|| tok_err(format!("merge {m:?} is not two tokens")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let types: Vec<i32> = match md_opt(content, path, "tokenizer.ggml.token_type", |v| v.to_vec())?
    {
        Some(list) => list
            .iter()
            .map(|v| v.to_i32())
            .collect::<candle_core::Result<_>>()
            .map_err(|e| DecoderError::Metadata {
                path: path.to_path_buf(),
                key: "tokenizer.ggml.token_type".into(),
                reason: format!("is not a list of integers ({e})"),
            })?,
        None => Vec::new(),
    };
    let id = |key: &str| md_opt(content, path, key, |v| v.to_u32());
    let bos = id("tokenizer.ggml.bos_token_id")?;
    let eos = id("tokenizer.ggml.eos_token_id")?;
    let add_bos = md_opt(content, path, "tokenizer.ggml.add_bos_token", |v| {
        v.to_bool()
    })?
    .unwrap_or(false);
    let prefix_space = md_opt(content, path, "tokenizer.ggml.add_space_prefix", |v| {
        v.to_bool()
    })?
    .unwrap_or(false);

    let vocab: tokenizers::models::bpe::Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(|e| tok_err(e.to_string()))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let byte_level = PreTokenizerWrapper::ByteLevel(ByteLevel::new(prefix_space, true, true));
    let pre_tokenizer = if digits {
        PreTokenizerWrapper::Sequence(Sequence::new(vec![
            PreTokenizerWrapper::Digits(Digits::new(true)),
            byte_level,
        ]))
    } else {
        byte_level
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevelDecoder::default()));
    // Control (3) and user-defined (4) tokens match as whole special tokens, as in llama.cpp.
    let special: Vec<AddedToken> = types
        .iter()
        .zip(&tokens)
        .filter(|(t, _)| matches!(t, 3 | 4))
        .map(|(_, s)| AddedToken::from(s.clone(), true))
        .collect();
    tokenizer
        .add_special_tokens(special)
        .map_err(|e| tok_err(e.to_string()))?;
    if add_bos {
        let bos_id = bos.ok_or_else(|| tok_err("add_bos_token without bos_token_id".into()))?;
        let bos_str = tokens
            .get(bos_id as usize)
            .ok_or_else(|| tok_err(format!("bos_token_id {bos_id} is not in the vocabulary")))?;
        let template = TemplateProcessing::builder()
            .try_single(format!("{bos_str} $A"))
            .and_then(|b| {
                b.special_tokens(vec![(bos_str.clone(), bos_id)])
                    .build()
                    .map_err(|e| e.to_string())
            })
            .map_err(tok_err)?;
        tokenizer.with_post_processor(Some(template));
    }
    Ok(GgufTokenizer {
        tokenizer,
        bos,
        eos,
    })
}

/// Tokenizes `prompt` (adding the special tokens the tokenizer's post-processor adds).
pub(crate) fn encode(tokenizer: &Tokenizer, prompt: &str) -> Result<Vec<u32>, DecoderError> {
    let enc = tokenizer
        .encode(prompt, true)
        .map_err(|e| DecoderError::Encode(e.to_string()))?;
    Ok(enc.get_ids().to_vec())
}

/// Detokenizes `ids`, skipping special tokens.
pub(crate) fn decode(tokenizer: &Tokenizer, ids: &[u32]) -> Result<String, DecoderError> {
    tokenizer
        .decode(ids, true)
        .map_err(|e| DecoderError::Encode(e.to_string()))
}
