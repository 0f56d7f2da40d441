//! Reading a llama GGUF file's header, and its metadata values with errors that name the file
//! and the key.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file;

use super::DecoderError;

/// Reads one metadata value, with an error naming `path` and the key.
fn md<'a>(
    content: &'a gguf_file::Content,
    path: &Path,
    key: &str,
) -> Result<&'a gguf_file::Value, DecoderError> {
    content
        .metadata
        .get(key)
        .ok_or_else(|| DecoderError::Metadata {
            path: path.to_path_buf(),
            key: key.to_string(),
            reason: "is missing".into(),
        })
}

/// Converts a metadata value with `f`, naming `path` and `key` on a type mismatch.
pub(super) fn md_as<'a, T>(
    content: &'a gguf_file::Content,
    path: &Path,
    key: &str,
    f: impl FnOnce(&'a gguf_file::Value) -> candle_core::Result<T>,
) -> Result<T, DecoderError> {
    f(md(content, path, key)?).map_err(|e| DecoderError::Metadata {
        path: path.to_path_buf(),
        key: key.to_string(),
        reason: format!("has the wrong type ({e})"),
    })
}

/// An optional metadata value: `None` when absent, an error when of the wrong type.
pub(super) fn md_opt<'a, T>(
    content: &'a gguf_file::Content,
    path: &Path,
    key: &str,
    f: impl FnOnce(&'a gguf_file::Value) -> candle_core::Result<T>,
) -> Result<Option<T>, DecoderError> {
    if content.metadata.contains_key(key) {
        md_as(content, path, key, f).map(Some)
    } else {
        Ok(None)
    }
}

/// Opens and parses a GGUF file.
pub(super) fn read_gguf(
    path: &Path,
) -> Result<(gguf_file::Content, BufReader<File>), DecoderError> {
    if !path.is_file() {
        return Err(DecoderError::Missing(path.to_path_buf()));
    }
    let file = File::open(path).map_err(|e| DecoderError::Gguf {
        path: path.to_path_buf(),
        error: e.into(),
    })?;
    let mut reader = BufReader::new(file);
    let content = gguf_file::Content::read(&mut reader).map_err(|error| DecoderError::Gguf {
        path: path.to_path_buf(),
        error,
    })?;
    let arch = md_as(&content, path, "general.architecture", |v| v.to_string())?;
    if arch != "llama" {
        return Err(DecoderError::Unsupported {
            path: path.to_path_buf(),
            what: format!("general.architecture {arch:?}"),
        });
    }
    Ok((content, reader))
}
