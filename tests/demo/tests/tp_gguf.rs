//! Sharded GGUF reading on the CPU (CI, no GPU): the byte arithmetic of a block of rows or
//! columns for every GGML type candle loads (whole blocks only, typed errors otherwise), and
//! blocks read from a real GGUF file (written here with candle's GGUF writer) against the same
//! block sliced out of the whole tensor loaded by candle: dequantized, equal exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use candle_rocm_demo::decoder::hf_name;
use candle_rocm_demo::tp::{
    gguf_config, gguf_name, GgufShards, Shard, SlicePlan, Split, TpError, GGUF_TYPES,
};

fn temp_file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tp-gguf-{name}-{}.gguf", std::process::id()))
}

/// Rows are byte ranges of whole rows (one read); columns are the same byte range of every row
/// (a read per row), on block boundaries.
#[test]
fn slice_plans_cut_whole_blocks_for_every_type() {
    for dtype in GGUF_TYPES {
        let (b, ts) = (dtype.block_size(), dtype.type_size());
        let full = [4, 4 * b];
        let row_len = 4 * ts;
        let rows = SlicePlan::rows("t", dtype, &full, 1..3).unwrap();
        assert_eq!(rows.shape, vec![2, 4 * b], "{dtype:?}");
        assert_eq!(
            rows.reads(),
            vec![(row_len as u64, 2 * row_len)],
            "{dtype:?}"
        );
        assert_eq!(rows.len(), 2 * row_len);
        let cols = SlicePlan::cols("t", dtype, &full, b..3 * b).unwrap();
        assert_eq!(cols.shape, vec![4, 2 * b], "{dtype:?}");
        let want: Vec<(u64, usize)> = (0..4)
            .map(|r| ((r * row_len + ts) as u64, 2 * ts))
            .collect();
        assert_eq!(cols.reads(), want, "{dtype:?}");
        // A whole row's columns are one read, as rows.
        let all = SlicePlan::cols("t", dtype, &full, 0..4 * b).unwrap();
        assert_eq!(all.reads(), vec![(0, 4 * row_len)]);
        // Rank 1 of 2: the second half of the rows, or of the columns.
        let shard = Shard::new(1, 2).unwrap();
        let p = SlicePlan::of_split("t", dtype, &full, Split::Rows, shard).unwrap();
        assert_eq!(p.rows, 2..4);
        let p = SlicePlan::of_split("t", dtype, &full, Split::Cols, shard).unwrap();
        assert_eq!(p.row_bytes, 2 * ts..4 * ts);
        let p = SlicePlan::of_split("t", dtype, &full, Split::Whole, shard).unwrap();
        assert_eq!(p.len(), 4 * row_len);
        // gather() cuts the same bytes out of the whole tensor's.
        let whole: Vec<u8> = (0..4 * row_len).map(|i| i as u8).collect();
        let got = cols.gather(&whole).unwrap();
        let want: Vec<u8> = (0..4)
            .flat_map(|r| whole[r * row_len + ts..r * row_len + 3 * ts].to_vec())
            .collect();
        assert_eq!(got, want);

        if b == 1 {
            // Plain values: any column splits.
            assert!(SlicePlan::cols("t", dtype, &full, 1..2).is_ok());
            continue;
        }
        // Columns off the block boundaries, at either end.
        for bad in [1..b + 1, 0..b + 1, b / 2..b] {
            let e = SlicePlan::cols("model.w", dtype, &full, bad.clone()).unwrap_err();
            assert!(
                matches!(&e, TpError::BlockSplit { tensor, dtype: d, cols, block }
                    if tensor == "model.w" && *d == dtype && *cols == bad && *block == b),
                "{dtype:?} {bad:?}: {e}"
            );
            assert!(e.to_string().contains("model.w"), "{e}");
        }
        // Four ranks of a row of two blocks: half a block each.
        let four = Shard::new(3, 4).unwrap();
        let e = SlicePlan::of_split("w", dtype, &[4, 2 * b], Split::Cols, four).unwrap_err();
        assert!(matches!(e, TpError::BlockSplit { .. }), "{dtype:?}: {e}");
        // A row that is not whole blocks is not a GGUF tensor of this type.
        let e = SlicePlan::rows("w", dtype, &[2, b + 1], 0..1).unwrap_err();
        assert!(matches!(e, TpError::BlockSplit { .. }), "{dtype:?}: {e}");
    }
    for dtype in [GgmlDType::Q8_1, GgmlDType::Q8K] {
        let e = SlicePlan::rows("w", dtype, &[2, 256], 0..1).unwrap_err();
        assert!(
            matches!(e, TpError::GgufType { dtype: d, .. } if d == dtype),
            "{e}"
        );
    }
    // Uneven splits keep their typed error; ranges past the shape are errors too.
    let three = Shard::new(0, 3).unwrap();
    let e = SlicePlan::of_split("w", GgmlDType::Q4_0, &[4, 64], Split::Cols, three).unwrap_err();
    assert!(
        matches!(
            e,
            TpError::UnevenSplit {
                dim: 1,
                len: 64,
                ..
            }
        ),
        "{e}"
    );
    assert!(SlicePlan::rows("w", GgmlDType::F32, &[4, 4], 3..5).is_err());
    assert!(SlicePlan::cols("w", GgmlDType::F32, &[4, 4, 4], 0..1).is_err());
}

/// Every type in one GGUF file; for 1, 2, 3 and 4 ranks, each rank's block of rows, of columns
/// (where they split into whole blocks) and of vocabulary rows, read through [`GgufShards`],
/// equals the block sliced out of the whole tensor candle loads, both dequantized: exactly.
#[test]
fn blocks_read_from_a_gguf_file_equal_slices_of_the_whole_tensor() {
    let cpu = &Device::Cpu;
    let path = temp_file("types");
    let rows = 8;
    let tensors: Vec<(String, QTensor)> = GGUF_TYPES
        .iter()
        .map(|&dtype| {
            let cols = 4 * dtype.block_size().max(4);
            let t = Tensor::randn(0f32, 1., (rows, cols), cpu).unwrap();
            (
                format!("w.{dtype:?}"),
                QTensor::quantize(&t, dtype).unwrap(),
            )
        })
        .collect();
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        let v = gguf_file::Value::String("test".into());
        let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        gguf_file::write(&mut f, &[("general.name", &v)], &refs).unwrap();
    }
    let gguf = GgufShards::open(&path).unwrap();
    let mut reader = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut reader).unwrap();
    for (name, _) in &tensors {
        let whole = content.tensor(&mut reader, name, cpu).unwrap();
        let dtype = whole.dtype();
        let full = whole.shape().dims().to_vec();
        let whole = whole.dequantize(cpu).unwrap();
        assert_eq!(gguf.info(name).unwrap(), (dtype, full.clone()));
        for world in 1..=4 {
            for rank in 0..world {
                let shard = Shard::new(rank, world).unwrap();
                for split in [Split::Rows, Split::Cols, Split::Vocab, Split::Whole] {
                    let got = match gguf.get(name, &full, split, shard, cpu) {
                        Ok(q) => q,
                        Err(TpError::UnevenSplit { .. }) if world == 3 => continue,
                        Err(e) => panic!("{name} {split:?} rank {rank} of {world}: {e}"),
                    };
                    assert_eq!(got.dtype(), dtype);
                    let (shape, range) = split.local(shard, name, &full).unwrap();
                    assert_eq!(got.shape().dims(), shape.as_slice());
                    let want = match (split.dim(), range) {
                        (Some(d), Some(r)) => whole.narrow(d, r.start, r.len()).unwrap(),
                        _ => whole.clone(),
                    };
                    let got = got.dequantize(cpu).unwrap();
                    let d = (got - want)
                        .unwrap()
                        .abs()
                        .unwrap()
                        .max_all()
                        .unwrap()
                        .to_scalar::<f32>()
                        .unwrap();
                    assert_eq!(d, 0.0, "{name} {split:?} rank {rank} of {world}");
                }
            }
        }
    }
    // Wrong shapes and names are typed errors.
    let name = "w.Q4_0";
    let e = gguf
        .get(name, &[8, 64], Split::Rows, Shard::SOLO, cpu)
        .unwrap_err();
    assert!(matches!(e, TpError::Shape { .. }), "{e}");
    let e = gguf
        .get("w.nothing", &[8, 128], Split::Rows, Shard::SOLO, cpu)
        .unwrap_err();
    assert!(matches!(e, TpError::MissingTensor { .. }), "{e}");
    std::fs::remove_file(&path).unwrap();
}

/// A file cut short: the tensor's bytes run past its end, a typed error naming the tensor.
#[test]
fn a_truncated_file_is_a_typed_error() {
    let cpu = &Device::Cpu;
    let path = temp_file("truncated");
    let t = Tensor::randn(0f32, 1., (4, 64), cpu).unwrap();
    let q = QTensor::quantize(&t, GgmlDType::Q8_0).unwrap();
    {
        let mut f = std::fs::File::create(&path).unwrap();
        gguf_file::write(&mut f, &[], &[("w", &q)]).unwrap();
    }
    let len = std::fs::metadata(&path).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(len - 40).unwrap();
    let gguf = GgufShards::open(&path).unwrap();
    let e = gguf
        .get("w", &[4, 64], Split::Rows, Shard::new(1, 2).unwrap(), cpu)
        .unwrap_err();
    assert!(
        matches!(&e, TpError::Weights { reason, .. } if reason.starts_with("w:")),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
}

/// GGUF names are the inverse of the decoder's Hugging Face names, for every llama tensor.
#[test]
fn gguf_names_invert_the_hugging_face_names() {
    let mut names = vec![
        "model.embed_tokens.weight".to_string(),
        "model.norm.weight".into(),
        "lm_head.weight".into(),
    ];
    for t in [
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    ] {
        names.push(format!("model.layers.17.{t}"));
    }
    for hf in names {
        let g = gguf_name(&hf).unwrap();
        assert_eq!(hf_name(&g).as_deref(), Some(hf.as_str()), "{g}");
    }
    assert_eq!(gguf_name("model.layers.x.mlp.up_proj.weight"), None);
    assert_eq!(gguf_name("model.rotary.inv_freq"), None);
}

/// A GGUF file that is not a llama, or lacks a key the config needs, is a typed error naming
/// the key.
#[test]
fn a_gguf_without_llama_metadata_is_a_config_error() {
    let cpu = &Device::Cpu;
    let path = temp_file("metadata");
    let q = QTensor::quantize(
        &Tensor::zeros((8, 32), candle_core::DType::F32, cpu).unwrap(),
        GgmlDType::Q8_0,
    )
    .unwrap();
    for (arch, want) in [
        ("gpt2", "general.architecture"),
        ("llama", "llama.embedding_length"),
    ] {
        let v = gguf_file::Value::String(arch.into());
        {
            let mut f = std::fs::File::create(&path).unwrap();
            gguf_file::write(
                &mut f,
                &[("general.architecture", &v)],
                &[("token_embd.weight", &q)],
            )
            .unwrap();
        }
        let g = GgufShards::open(&path).unwrap();
        let e = gguf_config(&g, false).unwrap_err();
        assert!(
            matches!(&e, TpError::Config { reason, .. } if reason.starts_with(want)),
            "{arch}: {e}"
        );
    }
    std::fs::remove_file(&path).unwrap();
}
