//! Gradients through `loss.backward()` on the GPU against the same graph on the CPU (f32):
//! a small MLP (candle-nn `Linear`, relu, gelu, sigmoid, MSE loss) and a chain conv2d ->
//! matmul -> softmax -> layer norm -> RMS norm.
//!
//! candle-nn's fused `softmax_last_dim`, `rms_norm` and `layer_norm` have no backward pass
//! (they are `apply_op*_no_bwd`), and the `LayerNorm`/`RmsNorm` modules use them for contiguous
//! input, so the chain uses the differentiable forms: `ops::softmax`, `ops::layer_norm_slow`
//! and `ops::rms_norm_slow`. `ops::sigmoid` is fused and has a backward pass.

use candle_core::{DType, Device, Result, Tensor, Var, D};
use candle_nn::Module;
use candle_rocm_tests::{assert_gpu_close, gpu, rng, tolerance, uniform};

/// Named parameters as host values (shape, data): the same on both devices.
type HostParams = Vec<(&'static str, Vec<usize>, Vec<f32>)>;

/// Named parameters on one device.
type Vars = [(&'static str, Var)];

fn host_params(seed: u64, spec: &[(&'static str, &[usize], f32)]) -> HostParams {
    let mut r = rng(seed);
    spec.iter()
        .map(|&(name, shape, scale)| {
            let n = shape.iter().product();
            (name, shape.to_vec(), uniform(&mut r, n, -scale, scale))
        })
        .collect()
}

/// The parameters as `Var`s on `dev`.
fn vars(params: &HostParams, dev: &Device) -> Result<Vec<(&'static str, Var)>> {
    params
        .iter()
        .map(|(name, shape, data)| {
            let t = Tensor::from_vec(data.clone(), shape.as_slice(), dev)?;
            Ok((*name, Var::from_tensor(&t)?))
        })
        .collect()
}

/// Runs `loss` on both devices and compares the loss and the gradient of every parameter.
fn compare_gradients(
    what: &str,
    params: &HostParams,
    loss: fn(&Vars) -> Result<Tensor>,
) -> Result<()> {
    let dev = gpu()?;
    let mut results = Vec::new();
    for d in [&dev, &Device::Cpu] {
        let vs = vars(params, d)?;
        let l = loss(&vs)?;
        let grads = l.backward()?;
        let mut gs = Vec::new();
        for (name, v) in &vs {
            let g = grads.get(v.as_tensor()).ok_or_else(|| {
                candle_core::Error::Msg(format!("{what}: no gradient for {name}"))
            })?;
            gs.push((*name, g.clone()));
        }
        results.push((l, gs));
    }
    let (cpu_loss, cpu_grads) = results.pop().expect("two runs");
    let (gpu_loss, gpu_grads) = results.pop().expect("two runs");
    let tol = tolerance(DType::F32);
    assert_gpu_close(&gpu_loss, &cpu_loss, tol, &format!("{what}: loss"))?;
    for ((name, g), (_, c)) in gpu_grads.iter().zip(&cpu_grads) {
        assert_gpu_close(g, c, tol, &format!("{what}: d loss / d {name}"))?;
    }
    Ok(())
}

fn get<'a>(vs: &'a Vars, name: &str) -> &'a Tensor {
    vs.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.as_tensor())
        .expect("parameter defined")
}

/// 16 samples of 8 features -> 32 (relu) -> 16 (gelu) -> 16 (sigmoid) -> 4, MSE against a
/// target. The input is a `Var` too, so its gradient is compared as well.
fn mlp_loss(vs: &Vars) -> Result<Tensor> {
    let layer =
        |w: &str, b: &str| candle_nn::Linear::new(get(vs, w).clone(), Some(get(vs, b).clone()));
    let x = get(vs, "x");
    let h = layer("w1", "b1").forward(x)?.relu()?;
    let h = layer("w2", "b2").forward(&h)?.gelu()?;
    let h = candle_nn::ops::sigmoid(&layer("w3", "b3").forward(&h)?)?;
    let y = layer("w4", "b4").forward(&h)?;
    candle_nn::loss::mse(&y, get(vs, "target"))
}

#[test]
#[ignore = "needs a HIP device"]
fn mlp_gradients() -> Result<()> {
    let params = host_params(
        21,
        &[
            ("x", &[16, 8], 1.0),
            ("w1", &[32, 8], 0.5),
            ("b1", &[32], 0.1),
            ("w2", &[16, 32], 0.3),
            ("b2", &[16], 0.1),
            ("w3", &[16, 16], 0.5),
            ("b3", &[16], 0.1),
            ("w4", &[4, 16], 0.5),
            ("b4", &[4], 0.1),
            ("target", &[16, 4], 1.0),
        ],
    );
    compare_gradients("mlp", &params, mlp_loss)
}

/// (2, 3, 8, 8) images -> conv2d with 4 filters of 3x3 (padding 1) -> (2, 4, 64) -> matmul with
/// (64, 16) -> softmax over the last dim -> layer norm -> RMS norm -> weighted sum.
fn chain_loss(vs: &Vars) -> Result<Tensor> {
    let x = get(vs, "x");
    let y = x.conv2d(get(vs, "kernel"), 1, 1, 1, 1)?;
    let y = y.reshape((2, 4, 64))?.broadcast_matmul(get(vs, "w"))?;
    let y = candle_nn::ops::softmax(&(y * 4.0)?, D::Minus1)?;
    let y = candle_nn::ops::layer_norm_slow(&y, get(vs, "ln_alpha"), get(vs, "ln_beta"), 1e-5)?;
    let y = candle_nn::ops::rms_norm_slow(&y, get(vs, "rms_alpha"), 1e-6)?;
    (y * get(vs, "target"))?.sum_all()
}

#[test]
#[ignore = "needs a HIP device"]
fn conv_matmul_softmax_norm_gradients() -> Result<()> {
    let mut params = host_params(
        22,
        &[
            ("x", &[2, 3, 8, 8], 1.0),
            ("kernel", &[4, 3, 3, 3], 0.3),
            ("w", &[64, 16], 0.2),
            ("ln_beta", &[16], 0.1),
            ("target", &[2, 4, 16], 1.0),
        ],
    );
    // Scales around 1.
    let mut r = rng(23);
    params.push(("ln_alpha", vec![16], uniform(&mut r, 16, 0.5, 1.5)));
    params.push(("rms_alpha", vec![16], uniform(&mut r, 16, 0.5, 1.5)));
    compare_gradients("conv chain", &params, chain_loss)
}
