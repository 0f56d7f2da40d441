//! candle-transformers' Stable Diffusion VAE decoder and UNet, made small (a few dozen
//! channels, 8x8 latents) with seeded random weights, on the GPU against the same model on the
//! CPU, in f32, f16 and bf16, on each convolution path; the UNet with flash attention
//! (`use_flash_attn`) against the CPU's matmul attention; Whisper's audio encoder; and ResNet-18
//! (its batch norms and the ReLUs after them run as one fused op on the GPU, candle-transformers
//! patch 0009).
//!
//! candle-rocm reads `CANDLE_ROCM_CONV` once per process, so each path's test runs its body in
//! a child process of this binary with the variable set ([`isolated_with`]) and checks there
//! which path ran: `im2col` must leave MIOpen unused, `miopen` must have run convolutions on it
//! (MIOpen must be installed: in the HIP-on-CUDA harness, the MIOpen double over cuDNN).
//!
//! The reference is the CPU in f32 on the same weights and inputs rounded to the dtype under
//! test, so what is compared is the GPU's arithmetic in that dtype against exact-ish f32. The
//! tolerances ([`model_tolerance`]) are relative to the output's largest magnitude.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use candle_core::{DType, Device, Result, Shape, Tensor};
use candle_nn::{Init, VarBuilder};
use candle_rocm::ops::conv::miopen::miopen_runs;
use candle_rocm::settings::{conv_path, ConvPath, CONV_VAR};
use candle_rocm_tests::{assert_gpu_close, gpu, isolated_with, normal, rng};
use candle_transformers::models::stable_diffusion::{unet_2d, vae};
use candle_transformers::models::{resnet, whisper};

/// The dtypes each model runs in.
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Largest difference from the f32 CPU result allowed for a model's output computed in
/// `dtype`, relative to the output's largest magnitude (at least 1). f32 only sums in another
/// order. f16 and bf16 round every activation between layers: candle's CPU, computing these
/// models in f16 itself, lands 3e-3 (VAE) and 1.3e-2 (UNet) from its f32 result (measured
/// 2026-11-26); bf16 keeps 3 fewer mantissa bits (8x the error) and the CPU has no bf16 matrix
/// product to measure it with.
fn model_tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1e-4,
        DType::F16 => 3e-2,
        _ => 1.5e-1,
    }
}

/// Seeded random weights made on the CPU from each tensor's name (so both devices get the same
/// values whatever the order of the calls), rounded to `round`, then cast to the dtype asked
/// for and moved to the device. Constant initialisations (norm scales of 1) are kept; matrices
/// and kernels are normal with standard deviation 1 / sqrt(fan-in), vectors 0.1.
struct SeededWeights {
    round: DType,
}

impl candle_nn::var_builder::SimpleBackend for SeededWeights {
    fn get(&self, s: Shape, name: &str, h: Init, dtype: DType, dev: &Device) -> Result<Tensor> {
        let cpu = match h {
            Init::Const(v) if v != 0.0 => {
                Tensor::ones(&s, DType::F32, &Device::Cpu)?.affine(v, 0.0)?
            }
            _ => {
                let dims = s.dims();
                let fan_in: usize = dims.iter().skip(1).product();
                let std = if dims.len() >= 2 {
                    1.0 / (fan_in as f32).sqrt()
                } else {
                    0.1
                };
                let mut hasher = DefaultHasher::new();
                name.hash(&mut hasher);
                let values = normal(&mut rng(hasher.finish()), s.elem_count(), std);
                Tensor::from_vec(values, &s, &Device::Cpu)?
            }
        };
        cpu.to_dtype(self.round)?.to_dtype(dtype)?.to_device(dev)
    }

    fn get_unchecked(&self, name: &str, _dtype: DType, _dev: &Device) -> Result<Tensor> {
        candle_core::bail!("seeded weights need a shape for {name}")
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}

/// A [`VarBuilder`] of [`SeededWeights`] rounded to `round`, in `dtype` on `dev`.
fn weights(round: DType, dtype: DType, dev: &Device) -> VarBuilder<'static> {
    VarBuilder::from_backend(Box::new(SeededWeights { round }), dtype, dev.clone())
}

/// A seeded normal input of `shape` rounded to `round`, in `dtype` on `dev`.
fn input(seed: u64, shape: &[usize], round: DType, dtype: DType, dev: &Device) -> Result<Tensor> {
    let n = shape.iter().product();
    Tensor::from_vec(normal(&mut rng(seed), n, 1.0), shape, &Device::Cpu)?
        .to_dtype(round)?
        .to_dtype(dtype)?
        .to_device(dev)
}

/// The models under test.
#[derive(Clone, Copy, Debug)]
enum Model {
    /// The VAE decoder (with its post-quant conv): channels 32/64, one resnet layer per block
    /// plus one, the mid block's attention, norm groups of 8; 1x4x8x8 latent to a 1x3x16x16
    /// image.
    Vae,
    /// The UNet: a cross-attention block of 32 channels (4 heads of 8) and a plain one of 64,
    /// one layer each, the mid block's transformer, norm groups of 8; one step on 2x4x8x8
    /// latents with 2x5x16 text states.
    Unet,
    /// The same UNet with `use_flash_attn` (candle-transformers computes attention in f16
    /// there, whatever the model's dtype, through candle-rocm's flash attention); its
    /// reference is the UNet's matmul attention on the CPU.
    UnetFlash,
    /// Whisper's audio encoder (two conv1d layers, then one transformer block of width 32, 4
    /// heads) on 1x16x32 mel; in f16/bf16 through candle-transformers patch 0006 (its
    /// positional table in the weights' dtype).
    WhisperEncoder,
    /// ResNet-18 without its classifier on 2x3x32x32 images: the stem's and every basic
    /// block's first batch norm run with their ReLU as one op (`forward_relu_t`).
    Resnet18,
}

impl Model {
    /// The model whose CPU result is the reference.
    fn reference(self) -> Model {
        match self {
            Model::UnetFlash => Model::Unet,
            other => other,
        }
    }

    /// [`model_tolerance`], at least f16's where the model's attention runs in f16.
    fn tolerance(self, dtype: DType) -> f64 {
        match self {
            Model::UnetFlash => model_tolerance(dtype).max(model_tolerance(DType::F16)),
            _ => model_tolerance(dtype),
        }
    }
}

/// `model`'s output on `dev` in `dtype`, weights and inputs rounded to `round`.
fn forward(model: Model, round: DType, dtype: DType, dev: &Device) -> Result<Tensor> {
    let vb = weights(round, dtype, dev);
    match model {
        Model::Vae => {
            let cfg = vae::AutoEncoderKLConfig {
                block_out_channels: vec![32, 64],
                layers_per_block: 1,
                latent_channels: 4,
                norm_num_groups: 8,
                use_quant_conv: true,
                use_post_quant_conv: true,
            };
            let m = vae::AutoEncoderKL::new(vb, 3, 3, cfg)?;
            m.decode(&input(1, &[1, 4, 8, 8], round, dtype, dev)?)
        }
        Model::Unet | Model::UnetFlash => {
            let bc = |out_channels, use_cross_attn| unet_2d::BlockConfig {
                out_channels,
                use_cross_attn,
                attention_head_dim: 4,
            };
            let cfg = unet_2d::UNet2DConditionModelConfig {
                blocks: vec![bc(32, Some(1)), bc(64, None)],
                layers_per_block: 1,
                norm_num_groups: 8,
                cross_attention_dim: 16,
                ..Default::default()
            };
            let flash = matches!(model, Model::UnetFlash);
            let m = unet_2d::UNet2DConditionModel::new(vb, 4, 4, flash, cfg)?;
            let latents = input(2, &[2, 4, 8, 8], round, dtype, dev)?;
            let text = input(3, &[2, 5, 16], round, dtype, dev)?;
            m.forward(&latents, 981.0, &text)
        }
        Model::WhisperEncoder => {
            let cfg = whisper::Config {
                num_mel_bins: 16,
                max_source_positions: 16,
                d_model: 32,
                encoder_attention_heads: 4,
                encoder_layers: 1,
                vocab_size: 64,
                max_target_positions: 8,
                decoder_attention_heads: 4,
                decoder_layers: 1,
                suppress_tokens: Vec::new(),
            };
            let mut m = whisper::model::Whisper::load(&vb, cfg)?;
            m.encoder
                .forward(&input(4, &[1, 16, 32], round, dtype, dev)?, true)
        }
        Model::Resnet18 => {
            let m = resnet::resnet18_no_final_layer(vb)?;
            input(5, &[2, 3, 32, 32], round, dtype, dev)?.apply(&m)
        }
    }
}

/// Runs `model` in every dtype on the GPU and checks it against the CPU; then checks that the
/// convolutions took `path`.
fn gpu_matches_cpu(model: Model, path: ConvPath) -> Result<()> {
    assert_eq!(conv_path(), path, "{CONV_VAR} in the child process");
    let dev = gpu()?;
    let runs = miopen_runs();
    for dtype in DTYPES {
        let want = forward(model.reference(), dtype, DType::F32, &Device::Cpu)?;
        let got = forward(model, dtype, dtype, &dev)?;
        assert_gpu_close(
            &got,
            &want.to_dtype(dtype)?,
            model.tolerance(dtype),
            &format!("{model:?} in {dtype:?} on {path:?}"),
        )?;
    }
    let ran = miopen_runs() - runs;
    eprintln!("{model:?}: {ran} convolutions ran on MIOpen");
    match path {
        ConvPath::Miopen => assert!(
            ran > 0,
            "{CONV_VAR}=miopen, yet no convolution ran on MIOpen (is MIOpen installed?)"
        ),
        _ => assert_eq!(
            ran, 0,
            "{CONV_VAR}=im2col, yet {ran} convolutions ran on MIOpen"
        ),
    }
    Ok(())
}

/// The test `name` (this module's) in a child process on `path` (`im2col` or `miopen`).
fn on_path(name: &str, model: Model, path: &str) -> Result<()> {
    if !isolated_with(&format!("conv_models::{name}"), &[(CONV_VAR, path)])? {
        return Ok(());
    }
    let want = ConvPath::parse(path).ok_or_else(|| candle_core::Error::Msg(path.into()))?;
    gpu_matches_cpu(model, want)
}

#[test]
#[ignore = "needs a HIP device"]
fn vae_decoder_matches_the_cpu_on_im2col() -> Result<()> {
    on_path(
        "vae_decoder_matches_the_cpu_on_im2col",
        Model::Vae,
        "im2col",
    )
}

#[test]
#[ignore = "needs a HIP device"]
fn vae_decoder_matches_the_cpu_on_miopen() -> Result<()> {
    on_path(
        "vae_decoder_matches_the_cpu_on_miopen",
        Model::Vae,
        "miopen",
    )
}

#[test]
#[ignore = "needs a HIP device"]
fn unet_step_matches_the_cpu_on_im2col() -> Result<()> {
    on_path("unet_step_matches_the_cpu_on_im2col", Model::Unet, "im2col")
}

#[test]
#[ignore = "needs a HIP device"]
fn unet_step_matches_the_cpu_on_miopen() -> Result<()> {
    on_path("unet_step_matches_the_cpu_on_miopen", Model::Unet, "miopen")
}

#[test]
#[ignore = "needs a HIP device"]
fn unet_step_with_flash_attention_matches_the_cpu() -> Result<()> {
    on_path(
        "unet_step_with_flash_attention_matches_the_cpu",
        Model::UnetFlash,
        "im2col",
    )
}

#[test]
#[ignore = "needs a HIP device"]
fn whisper_encoder_matches_the_cpu_on_im2col() -> Result<()> {
    on_path(
        "whisper_encoder_matches_the_cpu_on_im2col",
        Model::WhisperEncoder,
        "im2col",
    )
}

#[test]
#[ignore = "needs a HIP device"]
fn whisper_encoder_matches_the_cpu_on_miopen() -> Result<()> {
    on_path(
        "whisper_encoder_matches_the_cpu_on_miopen",
        Model::WhisperEncoder,
        "miopen",
    )
}

#[test]
#[ignore = "needs a HIP device"]
fn resnet18_matches_the_cpu_on_im2col() -> Result<()> {
    on_path(
        "resnet18_matches_the_cpu_on_im2col",
        Model::Resnet18,
        "im2col",
    )
}
