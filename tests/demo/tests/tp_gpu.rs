//! The tensor-parallel llama on two GPUs against one (issue 29): a TinyLlama-1.1B-shaped model
//! (2 of its 22 layers) with random f16 weights, split over two ranks in two processes, gives
//! the greedy tokens of the same model on one GPU, and logits within [`LOGIT_TOL`] along
//! those tokens. On one GPU the tensor-parallel llama with a world of one also gives the
//! tokens of candle-transformers' `llama::Llama`. The same for Llama 2 7B's shape (2 of its 32
//! layers: 4096 wide, 32 heads without grouping, 11008 intermediate) in bf16
//! ([`two_gpus_7b_shape_bf16_give_the_tokens_and_logits_of_one`], within [`BF16_LOGIT_TOL`]).
//!
//! The test is rank 0 on GPU 0 and serves the rendezvous; it starts this binary again, running
//! the same test, as rank 1 on GPU 1 with torchrun's variables and [`ROLE_VAR`] set (as
//! rocm-safe's `rccl_multiprocess` does). Every wait is bounded: the rendezvous and the
//! communicator have timeouts, and rank 1 is killed if it outlives [`RANK1_LIMIT`].
//!
//! The same from a GGUF file ([`two_gpus_gguf_give_the_tokens_and_logits_of_one`]): the
//! 1.1B shape's 2 layers quantized (q4_K projections, q6_K down projections and output head,
//! q8_0 embeddings), each rank reading only its blocks, f32 activations; on one GPU it also
//! gives the tokens of candle-transformers' `quantized_llama` on the file.
//!
//! Both run with the output head split by vocabulary and the embeddings whole (the default:
//! an all-gather of the logits; the split embeddings' all-reduce is checked on simulated
//! ranks by tp_cpu).
//!
//! On one GPU ([`flash_attention_takes_grouped_kv_heads_as_they_are`]): the model's flash
//! attention path, which takes grouped k/v heads without repeating them, against its matmul
//! path.
//!
//! Needs two GPUs and RCCL (but for the one-GPU test), and is `#[ignore]`d; `tests/hip-on-cuda/run.sh` runs it where it
//! sees two GPUs and the RCCL double (`NCCL_NVLS_ENABLE=0`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_rocm::collective::Comm;
use candle_rocm_demo::tp::{
    forced_logits, generate, join, llama2_7b, load_dir, load_gguf, read_config, spawn_ranks,
    tinyllama_1_1b, wait_ranks, write_random_llama, write_random_llama_gguf, GgufTypes, Solo,
    TpLlama,
};
use candle_transformers::models::llama::{Cache, Llama};
use candle_transformers::models::quantized_llama::ModelWeights;
use rocm_safe::rendezvous::{RankEnv, Rendezvous};

const ROLE_VAR: &str = "CANDLE_ROCM_TP_TEST_ROLE";
const DIR_VAR: &str = "CANDLE_ROCM_TP_TEST_DIR";
const TOKENS_VAR: &str = "CANDLE_ROCM_TP_TEST_TOKENS";
/// Rank 1's activation dtype (`f16` or `bf16`), set by rank 0.
const DTYPE_VAR: &str = "CANDLE_ROCM_TP_TEST_DTYPE";
/// The prompt's token ids (no tokenizer: the weights are random).
const PROMPT: [u32; 7] = [1, 450, 7483, 310, 3444, 338, 263];
/// Tokens generated greedily.
const STEPS: usize = 8;
/// Logits on 2 GPUs against 1: max |difference|. The logits have a standard deviation of
/// about 1 (unit-variance hidden states after the final norm, an output head of variance
/// 1/hidden); f16 weights and activations, f32 accumulation, and a different summation order
/// (each rank sums half of every row-parallel dot product, then the all-reduce adds the
/// halves in f16).
const LOGIT_TOL: f32 = 5e-2;
/// The same in bf16: 3 fewer mantissa bits than f16, so 8 times its rounding at every step,
/// the all-reduce's included (an estimate, not yet measured on two GPUs).
const BF16_LOGIT_TOL: f32 = 4e-1;
/// The GGUF model's activations: f32, the quantized products' fast path (as
/// `quantized_llama`).
const GGUF_DTYPE: DType = DType::F32;
/// Logits of the GGUF model on 2 GPUs against 1: the same quantized weights and f32
/// activations; only the summation order differs (each rank's half of every row-parallel dot
/// product, then the f32 all-reduce).
const GGUF_LOGIT_TOL: f32 = 1e-2;
/// The GGUF model's quantized types: every row, and every rank's half of a row-parallel
/// weight's row (1024 and 2816 columns), is whole blocks of 256.
const GGUF_TYPES: GgufTypes = GgufTypes {
    linear: GgmlDType::Q4K,
    down: GgmlDType::Q6K,
    embed: GgmlDType::Q8_0,
    output: GgmlDType::Q6K,
};
const RANK1_LIMIT: Duration = Duration::from_secs(240);
const TIMEOUT: Duration = Duration::from_secs(120);

/// Greedy ids and forced logits (along `along`, or the ids themselves) of a model whose
/// activations are `dtype`.
fn run(
    model: &TpLlama,
    dtype: DType,
    dev: &Device,
    along: Option<&[u32]>,
) -> (Vec<u32>, Vec<Vec<f32>>) {
    let (ids, _, _) = generate(model, &PROMPT, STEPS, &[], dtype, dev).unwrap();
    let logits = forced_logits(model, &PROMPT, along.unwrap_or(&ids), dtype, dev).unwrap();
    (ids, logits)
}

/// candle-transformers' llama on `dev` in `dtype`: its greedy ids.
fn candle_llama_ids(dir: &Path, dtype: DType, dev: &Device) -> Vec<u32> {
    let (cfg, _) = read_config(dir, false).unwrap();
    // SAFETY: the test's own file, not modified while mapped.
    let vb = unsafe {
        VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], dtype, dev)
    }
    .unwrap();
    let model = Llama::load(vb, &cfg).unwrap();
    let mut cache = Cache::new(true, dtype, &cfg, dev).unwrap();
    let (mut ids, mut input, mut pos) = (Vec::new(), PROMPT.to_vec(), 0);
    for _ in 0..STEPS {
        let x = Tensor::new(input.as_slice(), dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let next = candle_rocm_demo::decoder::argmax(&model.forward(&x, pos, &mut cache).unwrap())
            .unwrap();
        pos += input.len();
        ids.push(next);
        input = vec![next];
    }
    ids
}

/// The greedy tokens agree; where they part, the one-GPU logits rank the two picks within
/// `tol` of each other (a tie at the tolerance, reported, not a wrong model).
fn same_tokens(got: &[u32], want: &[u32], want_logits: &[Vec<f32>], tol: f32, what: &str) {
    if let Some(k) = got.iter().zip(want).position(|(a, b)| a != b) {
        let row = &want_logits[k];
        let gap = row[want[k] as usize] - row[got[k] as usize];
        assert!(
            gap.abs() <= tol,
            "{what}: token {k} is {} instead of {} (one-GPU logits {} against {}): {got:?} vs {want:?}",
            got[k],
            want[k],
            row[got[k] as usize],
            row[want[k] as usize]
        );
        eprintln!("{what}: a near tie at token {k} (logit gap {gap}); tokens before it agree");
    } else {
        assert_eq!(got, want, "{what}");
    }
}

fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0f32, f32::max)
}

/// Rank 1: joins through torchrun's variables, runs the same steps as rank 0 (the
/// collectives pair up call by call: the forced logits along the one-GPU tokens rank 0
/// passed), and leaves together with rank 0.
fn rank_one() {
    let dir = PathBuf::from(std::env::var(DIR_VAR).unwrap());
    let want: Vec<u32> = std::env::var(TOKENS_VAR)
        .unwrap()
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let dtype = match std::env::var(DTYPE_VAR).as_deref() {
        Ok("bf16") => DType::BF16,
        _ => DType::F16,
    };
    let (rdzv, comm) = join(TIMEOUT).unwrap();
    let (cfg, _) = read_config(&dir, false).unwrap();
    let dev = comm.device().clone();
    let model = load_dir(&dir, &cfg, Arc::new(comm.clone()), dtype, &dev).unwrap();
    let _ = run(&model, dtype, &dev, Some(&want));
    rdzv.barrier("done").unwrap();
    drop(model);
    drop(comm);
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn two_gpus_give_the_tokens_and_logits_of_one() {
    two_gpus_match_one(
        "two_gpus_give_the_tokens_and_logits_of_one",
        &tinyllama_1_1b(2),
        "1.1B-shape",
        DType::F16,
        LOGIT_TOL,
    );
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn two_gpus_7b_shape_bf16_give_the_tokens_and_logits_of_one() {
    two_gpus_match_one(
        "two_gpus_7b_shape_bf16_give_the_tokens_and_logits_of_one",
        &llama2_7b(2),
        "7B-shape",
        DType::BF16,
        BF16_LOGIT_TOL,
    );
}

/// One GPU, a world of one: the tensor-parallel llama with flash attention, which hands the
/// grouped k/v heads (the 1.1B shape's 4 for 32 query heads) to flash attention as they are,
/// gives the greedy tokens of its matmul attention (which repeats them per query group) and
/// forced logits within [`LOGIT_TOL`] of it.
#[test]
#[ignore = "needs a HIP device"]
fn flash_attention_takes_grouped_kv_heads_as_they_are() {
    assert!(candle_rocm::strict(), "GPU tests run in strict mode");
    let dir = std::env::temp_dir().join(format!("tp-gpu-{}-flash-gqa", std::process::id()));
    let dtype = DType::F16;
    let matmul_cfg = write_random_llama(&dir, &tinyllama_1_1b(2), dtype).unwrap();
    let (flash_cfg, _) = read_config(&dir, true).unwrap();
    assert!(flash_cfg.use_flash_attn && !matmul_cfg.use_flash_attn);
    assert!(flash_cfg.num_key_value_heads < flash_cfg.num_attention_heads);
    let dev0 = candle_rocm::device(0).unwrap();
    let matmul = load_dir(&dir, &matmul_cfg, Arc::new(Solo), dtype, &dev0).unwrap();
    let (want_ids, want_logits) = run(&matmul, dtype, &dev0, None);
    drop(matmul);
    let flash = load_dir(&dir, &flash_cfg, Arc::new(Solo), dtype, &dev0).unwrap();
    let (ids, logits) = run(&flash, dtype, &dev0, Some(&want_ids));
    drop(flash);
    let _ = std::fs::remove_dir_all(&dir);
    let d = max_diff(&logits, &want_logits);
    eprintln!("flash: {ids:?}; matmul: {want_ids:?}; logits max |diff| {d}");
    same_tokens(
        &ids,
        &want_ids,
        &want_logits,
        LOGIT_TOL,
        "flash against matmul attention",
    );
    assert!(d <= LOGIT_TOL, "flash attention's logits differ by {d}");
}

/// The test `test` (this binary's name for it, which rank 1 runs again): random weights of
/// `config` in `dtype`, then the model on one GPU (the tensor-parallel llama with a world of
/// one, and candle-transformers' llama) against two ranks, logits within `tol`.
fn two_gpus_match_one(test: &str, config: &serde_json::Value, shape: &str, dtype: DType, tol: f32) {
    if std::env::var(ROLE_VAR).is_ok_and(|r| !r.is_empty()) {
        return rank_one();
    }
    assert!(candle_rocm::strict(), "GPU tests run in strict mode");
    let dir = std::env::temp_dir().join(format!("tp-gpu-{}-{shape}", std::process::id()));
    let t = std::time::Instant::now();
    let cfg = write_random_llama(&dir, config, dtype).unwrap();
    eprintln!(
        "random {shape} weights (2 layers, {dtype:?}) written in {:?}",
        t.elapsed()
    );

    // One GPU: the tensor-parallel llama with a world of one, and candle-transformers' llama.
    let dev0 = candle_rocm::device(0).unwrap();
    let solo = load_dir(&dir, &cfg, Arc::new(Solo), dtype, &dev0).unwrap();
    let (want_ids, want_logits) = run(&solo, dtype, &dev0, None);
    drop(solo);
    let candle_ids = candle_llama_ids(&dir, dtype, &dev0);
    same_tokens(
        &candle_ids,
        &want_ids,
        &want_logits,
        tol,
        "candle-transformers' llama, 1 GPU",
    );
    eprintln!("1 GPU: {want_ids:?}");

    // Two GPUs: rank 1 in a second process, rank 0 here.
    let env = RankEnv {
        rank: 0,
        world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        local_rank: Some(0),
    };
    let rdzv = Rendezvous::connect(env, TIMEOUT).unwrap();
    let port = rdzv.server_addr().unwrap().port();
    let exe = std::env::current_exe().unwrap();
    let args: Vec<String> = [
        test,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]
    .map(String::from)
    .to_vec();
    let tokens = want_ids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let dtype_name = if dtype == DType::BF16 { "bf16" } else { "f16" };
    let extra = [
        (ROLE_VAR, "rank1".to_string()),
        (DIR_VAR, dir.display().to_string()),
        (TOKENS_VAR, tokens),
        (DTYPE_VAR, dtype_name.to_string()),
    ];
    let child = spawn_ranks(&exe, &args, 1..2, 2, port, &extra).unwrap();
    let comm = Comm::from_rendezvous(&rdzv, 0).unwrap();
    let model = load_dir(&dir, &cfg, Arc::new(comm.clone()), dtype, &dev0).unwrap();
    let t = std::time::Instant::now();
    let (ids, logits) = run(&model, dtype, &dev0, Some(&want_ids));
    let elapsed = t.elapsed();
    rdzv.barrier("done").unwrap();
    // Both ranks tear their communicators down together.
    drop(model);
    drop(comm);
    let rank1 = wait_ranks(child, Duration::from_secs(30), Some(RANK1_LIMIT));
    let _ = std::fs::remove_dir_all(&dir);
    rank1.unwrap();

    let d = max_diff(&logits, &want_logits);
    let bad = logits.iter().flatten().filter(|x| !x.is_finite()).count();
    let first: Vec<f32> = logits[0].iter().take(4).copied().collect();
    eprintln!(
        "2 GPUs: {bad} non-finite logits; the first row starts {first:?} (1 GPU: {:?})",
        &want_logits[0][..4]
    );
    assert_eq!(bad, 0, "non-finite logits on 2 GPUs");
    eprintln!(
        "2 GPUs: {ids:?}; logits max |diff| against 1 GPU {d} (tolerance {tol}); \
         {STEPS} tokens + forced logits in {elapsed:?}"
    );
    same_tokens(&ids, &want_ids, &want_logits, tol, "2 GPUs against 1");
    assert!(d <= tol, "logits on 2 GPUs differ from 1 GPU by {d}");
}

/// candle-transformers' `quantized_llama` on the GGUF file `path` on `dev`: its greedy ids.
fn quantized_llama_ids(path: &Path, dev: &Device) -> Vec<u32> {
    let mut reader = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut reader).unwrap();
    let mut model = ModelWeights::from_gguf(content, &mut reader, dev).unwrap();
    let (mut ids, mut input, mut pos) = (Vec::new(), PROMPT.to_vec(), 0);
    for _ in 0..STEPS {
        let x = Tensor::new(input.as_slice(), dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let next = candle_rocm_demo::decoder::argmax(&model.forward(&x, pos).unwrap()).unwrap();
        pos += input.len();
        ids.push(next);
        input = vec![next];
    }
    ids
}

/// Rank 1 of the GGUF test: as [`rank_one`], the model read from the GGUF file [`DIR_VAR`]
/// names.
fn rank_one_gguf() {
    let path = PathBuf::from(std::env::var(DIR_VAR).unwrap());
    let want: Vec<u32> = std::env::var(TOKENS_VAR)
        .unwrap()
        .split(',')
        .map(|t| t.parse().unwrap())
        .collect();
    let (rdzv, comm) = join(TIMEOUT).unwrap();
    let dev = comm.device().clone();
    let (model, _) = load_gguf(&path, Arc::new(comm.clone()), GGUF_DTYPE, &dev, false).unwrap();
    let _ = run(&model, GGUF_DTYPE, &dev, Some(&want));
    rdzv.barrier("done").unwrap();
    drop(model);
    drop(comm);
}

#[test]
#[ignore = "needs 2 HIP devices and RCCL"]
fn two_gpus_gguf_give_the_tokens_and_logits_of_one() {
    const NAME: &str = "two_gpus_gguf_give_the_tokens_and_logits_of_one";
    if std::env::var(ROLE_VAR).is_ok_and(|r| !r.is_empty()) {
        return rank_one_gguf();
    }
    assert!(candle_rocm::strict(), "GPU tests run in strict mode");
    let path = std::env::temp_dir().join(format!("tp-gpu-{}.gguf", std::process::id()));
    let t = std::time::Instant::now();
    write_random_llama_gguf(&path, &tinyllama_1_1b(2), GGUF_TYPES).unwrap();
    eprintln!(
        "random 1.1B-shape GGUF (2 layers, {GGUF_TYPES:?}) written in {:?}",
        t.elapsed()
    );

    // One GPU: the tensor-parallel llama with a world of one, and quantized_llama.
    let dev0 = candle_rocm::device(0).unwrap();
    let (solo, _) = load_gguf(&path, Arc::new(Solo), GGUF_DTYPE, &dev0, false).unwrap();
    let (want_ids, want_logits) = run(&solo, GGUF_DTYPE, &dev0, None);
    drop(solo);
    let q_ids = quantized_llama_ids(&path, &dev0);
    same_tokens(
        &q_ids,
        &want_ids,
        &want_logits,
        LOGIT_TOL,
        "quantized_llama, 1 GPU",
    );
    eprintln!("GGUF, 1 GPU: {want_ids:?}");

    // Two GPUs: rank 1 in a second process, rank 0 here.
    let env = RankEnv {
        rank: 0,
        world_size: 2,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        local_rank: Some(0),
    };
    let rdzv = Rendezvous::connect(env, TIMEOUT).unwrap();
    let port = rdzv.server_addr().unwrap().port();
    let exe = std::env::current_exe().unwrap();
    let args: Vec<String> = [
        NAME,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ]
    .map(String::from)
    .to_vec();
    let tokens = want_ids
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let extra = [
        (ROLE_VAR, "rank1-gguf".to_string()),
        (DIR_VAR, path.display().to_string()),
        (TOKENS_VAR, tokens),
    ];
    let child = spawn_ranks(&exe, &args, 1..2, 2, port, &extra).unwrap();
    let comm = Comm::from_rendezvous(&rdzv, 0).unwrap();
    let (model, _) = load_gguf(&path, Arc::new(comm.clone()), GGUF_DTYPE, &dev0, false).unwrap();
    let t = std::time::Instant::now();
    let (ids, logits) = run(&model, GGUF_DTYPE, &dev0, Some(&want_ids));
    let elapsed = t.elapsed();
    rdzv.barrier("done").unwrap();
    // Both ranks tear their communicators down together.
    drop(model);
    drop(comm);
    let rank1 = wait_ranks(child, Duration::from_secs(30), Some(RANK1_LIMIT));
    let _ = std::fs::remove_file(&path);
    rank1.unwrap();

    let d = max_diff(&logits, &want_logits);
    let bad = logits.iter().flatten().filter(|x| !x.is_finite()).count();
    assert_eq!(bad, 0, "non-finite logits on 2 GPUs");
    eprintln!(
        "GGUF, 2 GPUs: {ids:?}; logits max |diff| against 1 GPU {d} (tolerance \
         {GGUF_LOGIT_TOL}); {STEPS} tokens + forced logits in {elapsed:?}"
    );
    same_tokens(
        &ids,
        &want_ids,
        &want_logits,
        LOGIT_TOL,
        "GGUF, 2 GPUs against 1",
    );
    assert!(
        d <= GGUF_LOGIT_TOL,
        "GGUF logits on 2 GPUs differ from 1 GPU by {d}"
    );
}
