//! The bench on the CPU (CI has no GPU): the rows it is asked for come out in the line format
//! `tests/bench/table.py` reads, with positive times, and bad arguments are refused.

#![allow(clippy::expect_used)]

use std::process::Command;

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_candle-rocm-bench"))
        .args(args)
        .output()
        .expect("running candle-rocm-bench")
}

#[test]
fn cpu_rows_come_out_in_the_table_format() {
    let only = [
        "copy",
        "add",
        "softmax_last_dim",
        "cast_f32_bf16",
        "exp_sync",
    ];
    let out = bench(&["--cpu", "--elements", "262144", "--only", &only.join(",")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = text.lines();
    assert!(
        lines.next().is_some_and(|l| l.starts_with("device\t")),
        "{text}"
    );
    let mut seen = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 8, "{line}");
        assert_eq!(f[0], "bench", "{line}");
        let secs: f64 = f[5].parse().expect("seconds");
        let work: f64 = f[6].parse().expect("work");
        assert!(secs > 0.0 && secs.is_finite() && work > 0.0, "{line}");
        assert!(
            ["bytes", "flops", "calls", "tokens", "sequences"].contains(&f[7]),
            "{line}"
        );
        seen.push(f[2].to_string());
    }
    for op in only {
        assert!(
            seen.iter().any(|s| s.contains(op)),
            "no {op} row in\n{text}"
        );
    }
    // "add" also selects the broadcast rows; the filter still leaves the others out.
    assert!(
        !seen
            .iter()
            .any(|s| s == "exp" || s == "rope" || s == "matvec"),
        "{seen:?}"
    );
}

/// `--tiny-models`: conv_models rows (small versions of the same models) run end to end on the
/// CPU, with a positive time per call, the batch as the work and a shape marked `tiny`: the
/// VAE decoder and Whisper's encoder in f32 and f16 (the cheapest rows in a debug build; the
/// UNet and ResNet-50 rows run the same way; Whisper's f16 row needs candle-transformers patch
/// 0006).
#[test]
fn tiny_conv_model_rows_run_end_to_end() {
    let out = bench(&[
        "--cpu",
        "--elements",
        "262144",
        "--tiny-models",
        "--only",
        "sd15_vae_decode,whisper_tiny_encoder",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut rows = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        assert_eq!(f.len(), 8, "{line}");
        assert_eq!(
            (f[0], f[1], f[7]),
            ("bench", "conv_models", "sequences"),
            "{line}"
        );
        assert!(f[3].starts_with("tiny"), "{line}");
        let secs: f64 = f[5].parse().expect("seconds");
        let work: f64 = f[6].parse().expect("work");
        assert!(secs > 0.0 && secs.is_finite() && work >= 1.0, "{line}");
        rows.push(format!("{} {}", f[2], f[4]));
    }
    assert_eq!(
        rows,
        [
            "sd15_vae_decode f32",
            "whisper_tiny_encoder f32",
            "sd15_vae_decode f16",
            "whisper_tiny_encoder f16"
        ],
        "{text}"
    );
}

#[test]
fn bad_sizes_are_refused_with_the_reason() {
    let out = bench(&["--cpu", "--elements", "1000"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("multiple of 2^18"), "{err}");
}

/// `--write-gguf --tiny-gguf`: the synthetic GGUF decoders as files, each with the `llama.*`
/// keys and the tokenizer metadata llama.cpp's `llama-bench` requires, and loadable by
/// candle-transformers' quantized llama (the q4 ones; the f16 one is llama.cpp's alone), which
/// decodes a token from each on the CPU.
#[test]
fn written_gguf_files_carry_what_llama_cpp_requires() {
    use candle_core::quantized::gguf_file::{Content, Value};
    let dir = std::env::temp_dir().join(format!("candle-rocm-bench-gguf-{}", std::process::id()));
    let out = bench(&[
        "--write-gguf",
        dir.to_str().expect("utf-8 path"),
        "--tiny-gguf",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let paths: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    let names: Vec<&str> = paths
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    assert_eq!(
        names,
        [
            "gguf-tiny-q4_0.gguf",
            "gguf-tiny-q4_k_m.gguf",
            "gguf-tiny-f16.gguf"
        ]
    );
    for path in &paths {
        let mut file = std::fs::File::open(path).expect("opening the written file");
        let content = Content::read(&mut file).expect("reading it back");
        let md = &content.metadata;
        for key in [
            "general.architecture",
            "llama.context_length",
            "llama.embedding_length",
            "llama.block_count",
            "llama.feed_forward_length",
            "llama.rope.dimension_count",
            "llama.attention.head_count",
            "llama.attention.head_count_kv",
            "llama.attention.layer_norm_rms_epsilon",
            "tokenizer.ggml.model",
            "tokenizer.ggml.bos_token_id",
            "tokenizer.ggml.eos_token_id",
        ] {
            assert!(md.contains_key(key), "{path}: no {key}");
        }
        let Some(Value::Array(tokens)) = md.get("tokenizer.ggml.tokens") else {
            panic!("{path}: no token list");
        };
        assert_eq!(tokens.len(), 32000, "{path}");
        // llama.cpp's SentencePiece vocabulary finds the newline as a byte token, and
        // requires every token to be unique.
        assert!(tokens
            .iter()
            .any(|t| matches!(t, Value::String(s) if s == "<0x0A>")));
        let unique: std::collections::HashSet<String> = tokens
            .iter()
            .map(|t| match t {
                Value::String(s) => s.clone(),
                other => panic!("{path}: token {other:?} is not a string"),
            })
            .collect();
        assert_eq!(unique.len(), tokens.len(), "{path}: tokens not unique");
        for key in ["tokenizer.ggml.scores", "tokenizer.ggml.token_type"] {
            let Some(Value::Array(v)) = md.get(key) else {
                panic!("{path}: no {key}");
            };
            assert_eq!(v.len(), 32000, "{path}: {key}");
        }
        if path.ends_with("-f16.gguf") {
            continue;
        }
        let dev = candle_core::Device::Cpu;
        let mut model = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
            content, &mut file, &dev,
        )
        .expect("candle-transformers loads it");
        let input = candle_core::Tensor::new(&[[1u32, 100, 200]], &dev).expect("input");
        let logits = model.forward(&input, 0).expect("a forward pass");
        assert_eq!(logits.dims(), [1, 32000], "{path}");
    }
    std::fs::remove_dir_all(&dir).expect("removing the files");
}

/// `--gpus 1 --cpu`: the tensor-parallel llama's rows (a small llama, a world of one) on the
/// CPU, in the table format with the shape column table.py pairs by (`1gpu_<layers>l`); the
/// rows of several devices are refused on the CPU with the reason.
#[test]
fn tensor_parallel_rows_run_on_the_cpu() {
    let out = bench(&[
        "--cpu",
        "--gpus",
        "1",
        "--tp-model",
        "tiny",
        "--tp-layers",
        "2",
        "--decode-tokens",
        "3",
        "--tp-prefill",
        "40",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("bench\t"))
        .map(|l| l.split('\t').collect())
        .collect();
    let ops: Vec<&str> = rows.iter().map(|f| f[2]).collect();
    // The CPU's attention is the matmul path.
    assert_eq!(
        ops,
        ["prefill_llama_tiny_matmul", "decode_llama_tiny_matmul"],
        "{text}"
    );
    for f in &rows {
        assert_eq!(f.len(), 8, "{f:?}");
        assert_eq!(
            (f[1], f[3], f[4], f[7]),
            ("mgpu_tp", "1gpu_2l", "f16", "tokens")
        );
        let secs: f64 = f[5].parse().expect("seconds");
        assert!(secs > 0.0 && secs.is_finite(), "{f:?}");
    }
    // The prefill row counts its 40 prompt tokens, the decode row one token a step.
    assert_eq!((rows[0][6], rows[1][6]), ("40", "1"));

    let out = bench(&["--cpu", "--gpus", "2", "--tp-model", "tiny"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--gpus 1"), "{err}");
}
