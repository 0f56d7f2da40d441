//! Graph mode (`candle_rocm::graphs`): a tiny candle-transformers llama decoding greedily on a
//! device in graph mode gives the tokens and the f32 logits (bit for bit) of the same model on a
//! device running plain launches, on both attention paths, while the KV cache grows past the
//! sizes where kernels change their grids; and the decode steps reuse executable graphs, also
//! when a step is cut into more stretches than graph mode keeps executables for.

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{VarBuilder, VarMap};
use candle_rocm::graphs::{graph_stats, set_graph_mode, GraphMode};
use candle_rocm::RocmDevice;
use candle_transformers::models::llama::{Cache, Llama};

/// A device of its own (its own stream), so graph mode does not reach the other tests.
fn own_device() -> Result<Device> {
    Ok(Device::new_ext(
        RocmDevice::new(0).map_err(candle_core::Error::wrap)?,
    ))
}

/// Greedy decode of `steps` tokens after a prompt; the logits of every step, on the host.
fn decode(
    dev: &Device,
    weights: &HashMap<String, Tensor>,
    flash: bool,
    steps: usize,
) -> Result<(Vec<u32>, Vec<Vec<f32>>)> {
    let on_dev = weights
        .iter()
        .map(|(k, v)| Ok((k.clone(), v.to_device(dev)?)))
        .collect::<Result<HashMap<_, _>>>()?;
    let cfg = crate::llama::tiny_config(flash);
    let model = Llama::load(VarBuilder::from_tensors(on_dev, DType::F32, dev), &cfg)?;
    let mut cache = Cache::new(true, DType::F32, &cfg, dev)?;
    let mut tokens = vec![1u32, 17, 42, 99, 3];
    let mut logits = Vec::new();
    let mut pos = 0;
    let mut input = tokens.clone();
    for _ in 0..steps {
        let x = Tensor::new(input.as_slice(), dev)?.unsqueeze(0)?;
        let out = model.forward(&x, pos, &mut cache)?.squeeze(0)?;
        pos += input.len();
        let next = out.argmax(0)?.to_scalar::<u32>()?;
        logits.push(out.to_vec1::<f32>()?);
        tokens.push(next);
        input = vec![next];
    }
    Ok((tokens, logits))
}

#[test]
#[ignore = "needs a HIP device"]
fn graph_mode_decodes_the_tokens_and_logits_of_plain_launches() -> Result<()> {
    // 58 steps: the cache passes 64 positions' worth of sizes where the attention kernels
    // change their split and the allocator its buckets (tiny_config allows 64 positions).
    const STEPS: usize = 58;
    let varmap = VarMap::new();
    // Initialise the weights once, on the CPU.
    Llama::load(
        VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu),
        &crate::llama::tiny_config(false),
    )?;
    let weights: HashMap<String, Tensor> = varmap
        .data()
        .lock()
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect();
    // The default mode (one graph a step), then stretches of 8 operations with 4 executables
    // kept: more distinct stretches a step than are kept, where least-recently-used eviction
    // instantiated a graph at every launch.
    let cut = GraphMode {
        max_nodes: 8,
        max_execs: 4,
        ..GraphMode::default()
    };
    // Stretches growing from 2 operations after each step's read-back, up to 16.
    let ramp = GraphMode {
        max_nodes: 16,
        first_nodes: 2,
        ..GraphMode::default()
    };
    for (mode, flash) in [
        (GraphMode::default(), false),
        (GraphMode::default(), true),
        (cut, false),
        (cut, true),
        (ramp, true),
    ] {
        // Both modes set here: devices start in graph mode unless CANDLE_ROCM_GRAPHS=0.
        let plain = own_device()?;
        set_graph_mode(&plain, None).map_err(candle_core::Error::wrap)?;
        let graphs = own_device()?;
        set_graph_mode(&graphs, Some(mode)).map_err(candle_core::Error::wrap)?;
        let (want_tokens, want) = decode(&plain, &weights, flash, STEPS)?;
        let (got_tokens, got) = decode(&graphs, &weights, flash, STEPS)?;
        let what = format!(
            "flash {flash}, max_nodes {}, first_nodes {}",
            mode.max_nodes, mode.first_nodes
        );
        assert_eq!(got_tokens, want_tokens, "{what}: tokens");
        for (step, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{what}: step {step}: logits differ from plain launches"
            );
        }
        let st = graph_stats(&graphs).expect("graph mode is on");
        println!("{what}: {st:?}");
        assert!(
            st.launches >= STEPS as u64,
            "{what}: a graph a step at least: {st:?}"
        );
        assert!(
            st.updates > st.instantiations - st.uncached,
            "{what}: decode steps reuse their executable graphs: {st:?}"
        );
        if mode.max_nodes > 0 && mode.max_execs < 64 {
            // More stretches a step than executables kept: the kept ones are reused every
            // step (kernels that change with the cache's size aside: at least 2 of the 4 on
            // average) while the others run on executables made for one launch.
            assert!(
                st.uncached > 0 && st.updates >= 2 * STEPS as u64,
                "{what}: the kept executables are reused while the rest run once: {st:?}"
            );
        }
        assert_eq!(graph_stats(&plain), None);
    }
    Ok(())
}
