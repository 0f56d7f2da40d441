//! The tensor-parallel llama on the CPU (CI, no GPU): with a world of one it computes
//! candle-transformers' `llama::Llama` (same random weights, same logits, same greedy tokens);
//! with a world of two simulated by two threads that sum their row-parallel partials through
//! shared memory (each thread loading only its shard of the file), it computes the whole model
//! too; head counts and dimensions that do not split are typed errors naming what.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::{Arc, Barrier, Mutex};

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_rocm_demo::tp::{
    forced_logits, generate, load_dir, write_random_llama, Solo, TpError, World,
};
use candle_transformers::models::llama::{Cache, Llama};

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
