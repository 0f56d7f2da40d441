//! The tensor-parallel llama on the CPU (CI, no GPU): with a world of one it computes
//! candle-transformers' `llama::Llama` (same random weights, same logits, same greedy tokens);
//! with a world of two simulated by two threads that sum their row-parallel partials through
//! shared memory (each thread loading only its shard of the file), it computes the whole model
//! too; head counts and dimensions that do not split are typed errors naming what. The same
//! from a quantized GGUF file: a world of one computes candle-transformers' `quantized_llama`
//! on the file, two and four simulated ranks (embeddings and output head split by vocabulary,
//! or whole) compute the world of one, and a row-parallel weight whose columns do not split
//! into whole quantized blocks is a typed error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex};

use candle_core::quantized::{gguf_file, GgmlDType};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_rocm_demo::tp::{
    check_split_gguf, forced_logits, generate, gguf_config, load_dir, load_gguf,
    write_random_llama, write_random_llama_gguf, GgufTypes, Shard, ShardedWeights, Solo, TpCache,
    TpError, TpLlama, VocabSplit, World,
};
use candle_transformers::models::llama::{Cache, Llama};
use candle_transformers::models::quantized_llama::ModelWeights;

const PROMPT: [u32; 5] = [1, 17, 42, 5, 99];

/// A small llama: 4 query heads, 2 key-value heads (grouped-query attention), 2 layers.
fn config(layers: usize, intermediate: usize) -> serde_json::Value {
    serde_json::json!({
        "hidden_size": 64,
        "intermediate_size": intermediate,
        "vocab_size": 128,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 64,
        "tie_word_embeddings": false
    })
}

fn temp_dir(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tp-cpu-{name}-{}", std::process::id()))
}

/// Max |a - b| over rows of logits.
fn max_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| {
            assert_eq!(x.len(), y.len());
            x.iter().zip(y).map(|(p, q)| (p - q).abs())
        })
        .fold(0f32, f32::max)
}

/// candle-transformers' llama on the same directory: greedy ids and forced logits.
fn reference(dir: &std::path::Path, steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let dev = &Device::Cpu;
    let (cfg, _) = candle_rocm_demo::tp::read_config(dir, false).unwrap();
    let file = dir.join("model.safetensors");
    // SAFETY: the test's own file, not modified while mapped.
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[file], DType::F32, dev) }.unwrap();
    let model = Llama::load(vb, &cfg).unwrap();
    let mut cache = Cache::new(true, DType::F32, &cfg, dev).unwrap();
    let mut ids = Vec::new();
    let mut input = PROMPT.to_vec();
    let mut pos = 0;
    for _ in 0..steps {
        let x = Tensor::new(input.as_slice(), dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = model.forward(&x, pos, &mut cache).unwrap();
        let next = candle_rocm_demo::decoder::argmax(&logits).unwrap();
        pos += input.len();
        ids.push(next);
        input = vec![next];
    }
    let mut cache = Cache::new(true, DType::F32, &cfg, dev).unwrap();
    let mut rows = Vec::new();
    let mut input = PROMPT.to_vec();
    let mut pos = 0;
    for next in ids.iter().map(Some).chain([None]) {
        let x = Tensor::new(input.as_slice(), dev)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let logits = model.forward(&x, pos, &mut cache).unwrap();
        rows.push(logits.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        pos += input.len();
        match next {
            Some(&id) => input = vec![id],
            None => break,
        }
    }
    (ids, rows)
}

#[test]
fn a_world_of_one_computes_candle_transformers_llama() {
    let dir = temp_dir("solo");
    write_random_llama(&dir, &config(2, 96), DType::F32).unwrap();
    let (want_ids, want_logits) = reference(&dir, 6);
    let dev = &Device::Cpu;
    let (cfg, _) = candle_rocm_demo::tp::read_config(&dir, false).unwrap();
    let model = load_dir(&dir, &cfg, Arc::new(Solo), DType::F32, dev).unwrap();
    let (ids, _, _) = generate(&model, &PROMPT, 6, &[], DType::F32, dev).unwrap();
    assert_eq!(ids, want_ids);
    let logits = forced_logits(&model, &PROMPT, &ids, DType::F32, dev).unwrap();
    let d = max_diff(&logits, &want_logits);
    assert!(
        d <= 1e-5,
        "world of one against candle-transformers: max |diff| {d}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cache cloned mid-sequence decodes on its own: the KV buffers it shares with the original
/// (written in place) are copied before either writes into them.
#[test]
fn a_cloned_cache_decodes_on_its_own() {
    let dir = temp_dir("clone");
    write_random_llama(&dir, &config(2, 96), DType::F32).unwrap();
    let dev = &Device::Cpu;
    let (cfg, _) = candle_rocm_demo::tp::read_config(&dir, false).unwrap();
    let model = load_dir(&dir, &cfg, Arc::new(Solo), DType::F32, dev).unwrap();
    let step = |cache: &mut TpCache, tokens: &[u32], pos: usize| -> Vec<f32> {
        let x = Tensor::new(tokens, dev).unwrap().unsqueeze(0).unwrap();
        let logits = model.forward(&x, pos, cache).unwrap();
        logits.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    let prompt = [5u32, 9, 13, 2];
    let (a, b) = ([7u32, 8, 9], [40u32, 41, 42]);
    // Each continuation on a cache of its own.
    let own = |cont: &[u32]| -> Vec<Vec<f32>> {
        let mut c = TpCache::new(model.config(), DType::F32, dev).unwrap();
        step(&mut c, &prompt, 0);
        cont.iter()
            .enumerate()
            .map(|(i, &t)| step(&mut c, &[t], prompt.len() + i))
            .collect()
    };
    let (want_a, want_b) = (own(&a), own(&b));
    let mut original = TpCache::new(model.config(), DType::F32, dev).unwrap();
    step(&mut original, &prompt, 0);
    let mut clone = original.clone();
    for i in 0..a.len() {
        let pos = prompt.len() + i;
        let ga = step(&mut original, &[a[i]], pos);
        let gb = step(&mut clone, &[b[i]], pos);
        assert_eq!(ga, want_a[i], "original, step {i}");
        assert_eq!(gb, want_b[i], "clone, step {i}");
        assert_ne!(want_a[i], want_b[i], "step {i}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Ranks as threads of one process: each all-reduce puts this rank's partial in its slot,
/// waits for every rank, sums the slots in rank order and waits again before the slots are
/// reused.
#[derive(Debug)]
struct Threads {
    rank: usize,
    shared: Arc<(Barrier, Mutex<Vec<Option<Tensor>>>)>,
}

impl World for Threads {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.shared.1.lock().unwrap().len()
    }

    fn all_reduce_sum(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (barrier, slots) = &*self.shared;
        slots.lock().unwrap()[self.rank] = Some(x.clone());
        barrier.wait();
        let parts: Vec<Tensor> = slots.lock().unwrap().iter().flatten().cloned().collect();
        barrier.wait();
        let mut sum = parts[0].clone();
        for p in &parts[1..] {
            sum = (sum + p)?;
        }
        Ok(sum)
    }
}

#[test]
fn two_simulated_ranks_compute_the_whole_model() {
    let dir = temp_dir("two");
    write_random_llama(&dir, &config(2, 96), DType::F32).unwrap();
    let (want_ids, want_logits) = reference(&dir, 6);
    let world = 2;
    let shared = Arc::new((Barrier::new(world), Mutex::new(vec![None; world])));
    let ranks: Vec<_> = (0..world)
        .map(|rank| {
            let (dir, shared) = (dir.clone(), shared.clone());
            std::thread::spawn(move || {
                let dev = &Device::Cpu;
                let (cfg, _) = candle_rocm_demo::tp::read_config(&dir, false).unwrap();
                let w: Arc<dyn World> = Arc::new(Threads { rank, shared });
                let model = load_dir(&dir, &cfg, w, DType::F32, dev).unwrap();
                let (ids, _, _) = generate(&model, &PROMPT, 6, &[], DType::F32, dev).unwrap();
                let logits = forced_logits(&model, &PROMPT, &ids, DType::F32, dev).unwrap();
                (ids, logits)
            })
        })
        .collect();
    for (rank, r) in ranks.into_iter().enumerate() {
        let (ids, logits) = r.join().unwrap();
        assert_eq!(ids, want_ids, "rank {rank}");
        let d = max_diff(&logits, &want_logits);
        assert!(
            d <= 1e-4,
            "rank {rank} of 2 against the whole model: max |diff| {d}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn splits_that_do_not_divide_are_typed_errors() {
    let dev = &Device::Cpu;
    let shared = Arc::new((Barrier::new(3), Mutex::new(vec![None; 3])));
    let three: Arc<dyn World> = Arc::new(Threads { rank: 1, shared });
    let dir = temp_dir("uneven");
    let cfg = write_random_llama(&dir, &config(1, 96), DType::F32).unwrap();
    // 4 query heads over 3 ranks.
    let e = load_dir(&dir, &cfg, three, DType::F32, dev).unwrap_err();
    assert!(
        matches!(
            e,
            TpError::Heads {
                what: "num_attention_heads",
                count: 4,
                world_size: 3
            }
        ),
        "{e}"
    );
    // An intermediate size of 99 over 2 ranks: the first tensor split along it is named.
    let cfg = write_random_llama(&dir, &config(1, 99), DType::F32).unwrap();
    let shared = Arc::new((Barrier::new(2), Mutex::new(vec![None; 2])));
    let two: Arc<dyn World> = Arc::new(Threads { rank: 0, shared });
    let e = load_dir(&dir, &cfg, two, DType::F32, dev).unwrap_err();
    match &e {
        TpError::UnevenSplit {
            tensor,
            dim: 0,
            len: 99,
            world_size: 2,
        } => assert_eq!(tensor, "model.layers.0.mlp.gate_proj.weight"),
        other => panic!("{other}"),
    }
    assert!(e.to_string().contains("gate_proj"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The quantized types of the small GGUF llama: every row of 64 or 128 values is whole blocks
/// of 32, and so is every rank's half of a row-parallel weight's 64 or 128 columns.
const TYPES: GgufTypes = GgufTypes {
    linear: GgmlDType::Q8_0,
    down: GgmlDType::Q4_0,
    embed: GgmlDType::Q4_1,
    output: GgmlDType::Q5_0,
};

fn gguf_path(name: &str) -> PathBuf {
    temp_dir(name).with_extension("gguf")
}

/// candle-transformers' `quantized_llama` on the GGUF file: greedy ids and forced logits.
fn quantized_reference(path: &std::path::Path, steps: usize) -> (Vec<u32>, Vec<Vec<f32>>) {
    let dev = &Device::Cpu;
    let mut reader = std::fs::File::open(path).unwrap();
    let content = gguf_file::Content::read(&mut reader).unwrap();
    let mut model = ModelWeights::from_gguf(content, &mut reader, dev).unwrap();
    let mut run = |feed: &mut dyn FnMut(&Tensor) -> Option<u32>| {
        model.clear_kv_cache();
        let (mut input, mut pos) = (PROMPT.to_vec(), 0);
        loop {
            let x = Tensor::new(input.as_slice(), dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap();
            let logits = model.forward(&x, pos).unwrap();
            pos += input.len();
            match feed(&logits) {
                Some(next) => input = vec![next],
                None => break,
            }
        }
    };
    let mut ids = Vec::new();
    run(&mut |logits| {
        ids.push(candle_rocm_demo::decoder::argmax(logits).unwrap());
        (ids.len() < steps).then(|| *ids.last().unwrap())
    });
    let mut rows = Vec::new();
    run(&mut |logits| {
        rows.push(logits.flatten_all().unwrap().to_vec1::<f32>().unwrap());
        ids.get(rows.len() - 1).copied()
    });
    (ids, rows)
}

/// The GGUF llama on `world` simulated ranks (threads), embeddings and head split as `vocab`:
/// each rank's greedy ids and forced logits.
fn gguf_ranks(
    path: &std::path::Path,
    world: usize,
    vocab: VocabSplit,
) -> Vec<(Vec<u32>, Vec<Vec<f32>>)> {
    let shared = Arc::new((Barrier::new(world), Mutex::new(vec![None; world])));
    let ranks: Vec<_> = (0..world)
        .map(|rank| {
            let (path, shared) = (path.to_path_buf(), shared.clone());
            std::thread::spawn(move || {
                let dev = &Device::Cpu;
                let w: Arc<dyn World> = Arc::new(Threads { rank, shared });
                let shard = Shard::new(rank, world).unwrap();
                let weights = ShardedWeights::open_gguf(&path, shard, DType::F32, dev).unwrap();
                let cfg = gguf_config(weights.gguf().unwrap(), false).unwrap();
                let model = TpLlama::load_with(&weights, &cfg, w, vocab).unwrap();
                let (ids, _, _) = generate(&model, &PROMPT, 6, &[], DType::F32, dev).unwrap();
                let logits = forced_logits(&model, &PROMPT, &ids, DType::F32, dev).unwrap();
                (ids, logits)
            })
        })
        .collect();
    ranks.into_iter().map(|r| r.join().unwrap()).collect()
}

#[test]
fn a_gguf_world_of_one_computes_quantized_llama() {
    let path = gguf_path("gguf-solo");
    write_random_llama_gguf(&path, &config(2, 128), TYPES).unwrap();
    let (want_ids, want_logits) = quantized_reference(&path, 6);
    let dev = &Device::Cpu;
    let (model, cfg) = load_gguf(&path, Arc::new(Solo), DType::F32, dev, false).unwrap();
    assert_eq!((cfg.hidden_size, cfg.vocab_size), (64, 128));
    assert!(!cfg.tie_word_embeddings);
    let (ids, _, _) = generate(&model, &PROMPT, 6, &[], DType::F32, dev).unwrap();
    assert_eq!(ids, want_ids);
    let logits = forced_logits(&model, &PROMPT, &ids, DType::F32, dev).unwrap();
    let d = max_diff(&logits, &want_logits);
    assert!(
        d <= 1e-4,
        "GGUF world of one against quantized_llama: max |diff| {d}"
    );
    std::fs::remove_file(&path).unwrap();
}

/// Two and four ranks (4 query and 4 key-value heads for four), the vocabulary split, whole or
/// split for the head only,
/// tied embeddings or not: every rank computes the world of one's tokens and logits.
#[test]
fn simulated_ranks_of_a_gguf_compute_the_whole_model() {
    for (world, tied) in [(2, false), (2, true), (4, false)] {
        let mut c = config(2, 256);
        // 32 columns of o_proj on each of 4 ranks: one q8_0 block.
        c["hidden_size"] = serde_json::json!(128);
        c["num_key_value_heads"] = serde_json::json!(4);
        c["tie_word_embeddings"] = serde_json::json!(tied);
        let path = gguf_path(&format!("gguf-{world}-{tied}"));
        write_random_llama_gguf(&path, &c, TYPES).unwrap();
        let one = gguf_ranks(&path, 1, VocabSplit::SPLIT).remove(0);
        for vocab in [VocabSplit::SPLIT, VocabSplit::HEAD, VocabSplit::WHOLE] {
            for (rank, (ids, logits)) in gguf_ranks(&path, world, vocab).into_iter().enumerate() {
                let what = format!("rank {rank} of {world}, {vocab:?}, tied {tied}");
                assert_eq!(ids, one.0, "{what}");
                // The weights are the same on every run (seeded), so this passes or fails the
                // same way each time. The CPU's quantized products round their activations to
                // 8 bits a block and the ranks' partial sums add in another order, so a change of
                // the arithmetic can flip one activation's rounding: with unseeded weights that
                // happened in about 1 run of 10, at 0.006-0.03 here (2026-11-28).
                let d = max_diff(&logits, &one.1);
                assert!(d <= 1e-4, "{what}: max |diff| {d} against one rank");
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
}

/// A row-parallel weight of 64 columns over 4 ranks: 16 columns each, half a q8_0 block; the
/// launcher's check before any process starts says so too, and what else does not split.
#[test]
fn gguf_columns_that_cut_a_block_are_a_typed_error() {
    let mut c = config(1, 128);
    c["num_key_value_heads"] = serde_json::json!(4);
    let path = gguf_path("gguf-blocks");
    write_random_llama_gguf(&path, &c, TYPES).unwrap();
    check_split_gguf(&path, 2).unwrap();
    let e = check_split_gguf(&path, 4).unwrap_err();
    assert!(
        matches!(&e, TpError::BlockSplit { tensor, .. } if tensor == "blk.0.attn_output.weight"),
        "{e}"
    );
    let e = check_split_gguf(&path, 3).unwrap_err();
    assert!(matches!(e, TpError::Heads { count: 4, .. }), "{e}");
    let shared = Arc::new((Barrier::new(4), Mutex::new(vec![None; 4])));
    let four: Arc<dyn World> = Arc::new(Threads { rank: 2, shared });
    let e = load_gguf(&path, four, DType::F32, &Device::Cpu, false).unwrap_err();
    match &e {
        TpError::BlockSplit {
            tensor,
            dtype: GgmlDType::Q8_0,
            cols,
            block: 32,
        } => {
            assert_eq!(tensor, "blk.0.attn_output.weight");
            assert_eq!(cols, &(32..48));
        }
        other => panic!("{other}"),
    }
    std::fs::remove_file(&path).unwrap();
}
