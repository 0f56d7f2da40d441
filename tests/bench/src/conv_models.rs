//! The convolution models (group `conv_models`) on random weights, one forward pass per row,
//! in milliseconds per call (unit `sequences`, the work being the batch):
//! - `sd15_vae_decode`: Stable Diffusion 1.5's VAE decoder (candle-transformers'
//!   `stable_diffusion::vae::AutoEncoderKL::decode` on [`sd15_vae_config`]: channels
//!   128/256/512/512, 2 layers per block) on a 1x4x64x64 latent, a 512x512 image;
//! - `sd15_unet_step`: one denoising step of its UNet (`unet_2d::UNet2DConditionModel` on
//!   [`sd15_unet_config`]: channels 320/640/1280/1280, cross-attention to 77x768 text states) on
//!   a batch of 2 64x64 latents, the conditional and the unconditional one of classifier-free
//!   guidance, as candle-transformers' stable-diffusion example runs a step;
//! - `resnet50_b1`, `resnet50_b32`: `models::resnet::resnet50` (torchvision's ResNet-50 v1.5
//!   layout, 1000 classes) on 224x224 images, batch 1 and 32;
//! - `whisper_tiny_encoder`: Whisper tiny's audio encoder (`whisper::model`, tiny's config: two
//!   conv1d front-end layers, 4 transformer blocks of width 384, 6 heads) on 30 s of mel
//!   (1x80x3000); in f16 since our candle-transformers patch 0006 (upstream's encoder adds an
//!   f32 positional embedding to its activations, a dtype error in f16).
//!
//! f32 and f16. Ours takes `CANDLE_ROCM_CONV`'s path; `tests/hip-on-cuda/bench.sh` runs these
//! rows again with `miopen` and with `im2col`, and our build reports on stderr how many
//! convolutions of each row ran on MIOpen. `tests/bench/torch_conv_models.py` builds the same
//! models (same layers and channel counts) in `torch.nn` for the PyTorch column.
//!
//! `--tiny-models` swaps in small versions of the same architectures (few channels, small
//! inputs, shapes prefixed `tiny`) so the CPU runs every row in seconds.

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Module, Shape, Tensor};
use candle_nn::{Init, VarBuilder};
use candle_transformers::models::stable_diffusion::{unet_2d, vae};

use crate::runner::{median, name, Bench};

/// The group of these rows.
const GROUP: &str = "conv_models";
/// Timed batches per row (fewer than the other rows' `SAMPLES`: a call can take 100 ms).
const MODEL_SAMPLES: usize = 3;
/// The wall time one batch aims at.
const MODEL_BATCH_SECONDS: f64 = 0.1;

/// Random weights that keep the models' constant initialisations (normalisation scales and
/// running variances of 1, so batch norm divides by a positive number) and draw every other
/// tensor from a normal distribution of standard deviation 0.02, in f32 on the device, then
/// cast (Candle CUDA draws no f16 normals).
struct InitWeights;

impl candle_nn::var_builder::SimpleBackend for InitWeights {
    fn get(
        &self,
        s: Shape,
        _name: &str,
        h: Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        match h {
            Init::Const(v) if v != 0.0 => Tensor::ones(s, dtype, dev)?.affine(v, 0.0),
            _ => Tensor::randn(0f32, 0.02, s, dev)?.to_dtype(dtype),
        }
    }

    fn get_unchecked(
        &self,
        name: &str,
        _dtype: DType,
        _dev: &Device,
    ) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape for {name}")
    }

    fn contains_tensor(&self, _name: &str) -> bool {
        true
    }
}

/// A [`VarBuilder`] of [`InitWeights`] in `dtype` on the bench's device.
fn weights(b: &Bench, dtype: DType) -> VarBuilder<'static> {
    VarBuilder::from_backend(Box::new(InitWeights), dtype, b.dev.clone())
}

/// Median seconds per call of a model's forward pass: one untimed call (kernel loading, the
/// convolution libraries' plans), one to size the batches, then [`MODEL_SAMPLES`] batches of
/// back-to-back calls closed by a synchronize.
fn time_model<T>(b: &Bench, mut f: impl FnMut() -> Result<T>) -> Result<f64> {
    drop(f()?);
    b.dev.synchronize()?;
    let t = Instant::now();
    drop(f()?);
    b.dev.synchronize()?;
    let one = t.elapsed().as_secs_f64().max(1e-7);
    let iters = ((MODEL_BATCH_SECONDS / one) as usize).clamp(1, 50);
    let mut samples = Vec::with_capacity(MODEL_SAMPLES);
    for _ in 0..MODEL_SAMPLES {
        let t = Instant::now();
        for _ in 0..iters {
            drop(f()?);
        }
        b.dev.synchronize()?;
        samples.push(t.elapsed().as_secs_f64() / iters as f64);
    }
    Ok(median(samples))
}

/// Times `f` as row `op` (shape `shape`, `batch` images or clips) and prints it; in our
/// backend's build also says on stderr how many convolutions ran on MIOpen.
fn row<T>(
    b: &Bench,
    (op, shape, dtype): (&str, &str, DType),
    batch: usize,
    f: impl FnMut() -> Result<T>,
) -> Result<()> {
    #[cfg(all(feature = "rocm", not(feature = "cuda")))]
    let runs = candle_rocm::ops::conv::miopen::miopen_runs();
    let s = time_model(b, f).with_context(|| format!("{op} {shape} {dtype:?}"))?;
    #[cfg(all(feature = "rocm", not(feature = "cuda")))]
    eprintln!(
        "{op} {shape} {dtype:?}: {} convolutions ran on MIOpen",
        candle_rocm::ops::conv::miopen::miopen_runs() - runs
    );
    b.print(
        [GROUP, op, shape, name(dtype)],
        s,
        batch as f64,
        "sequences",
    );
    Ok(())
}

/// A random tensor of `shape` in `dtype` on the bench's device.
fn input(b: &Bench, shape: &[usize], dtype: DType) -> Result<Tensor> {
    Ok(Tensor::randn(0f32, 1.0, shape, &b.dev)?.to_dtype(dtype)?)
}

/// Every row of the group, f32 then f16 (see the module docs); `tiny`: the small versions.
pub(crate) fn conv_models(b: &Bench, tiny: bool) -> Result<()> {
    for dtype in [DType::F32, DType::F16] {
        vae_decode(b, dtype, tiny)?;
        unet_step(b, dtype, tiny, false)?;
        // Candle CUDA's build has no flash attention (crates.io candle-flash-attn needs its CUDA
        // kernels built): candle-transformers would panic there.
        if cfg!(all(feature = "rocm", not(feature = "cuda"))) {
            unet_step(b, dtype, tiny, true)?;
        }
        for batch in [1, 32] {
            resnet50(b, dtype, batch, tiny)?;
        }
        whisper_encoder(b, dtype, tiny)?;
    }
    Ok(())
}

/// The shape column: `tiny` marks the small versions.
fn shape_name(tiny: bool, shape: String) -> String {
    if tiny {
        format!("tiny{shape}")
    } else {
        shape
    }
}

/// Stable Diffusion 1.5's autoencoder (runwayml/stable-diffusion-v1-5 `vae/config.json`; the
/// values of candle-transformers' `StableDiffusionConfig::v1_5`, whose fields are private).
fn sd15_vae_config() -> vae::AutoEncoderKLConfig {
    vae::AutoEncoderKLConfig {
        block_out_channels: vec![128, 256, 512, 512],
        layers_per_block: 2,
        latent_channels: 4,
        norm_num_groups: 32,
        use_quant_conv: true,
        use_post_quant_conv: true,
    }
}

/// Stable Diffusion 1.5's UNet (`unet/config.json`, as `StableDiffusionConfig::v1_5`): 8
/// attention heads in every block (diffusers' `attention_head_dim: 8`), cross-attention to
/// 768-wide CLIP states, no attention slicing.
fn sd15_unet_config() -> unet_2d::UNet2DConditionModelConfig {
    let bc = |out_channels, use_cross_attn| unet_2d::BlockConfig {
        out_channels,
        use_cross_attn,
        attention_head_dim: 8,
    };
    unet_2d::UNet2DConditionModelConfig {
        blocks: vec![
            bc(320, Some(1)),
            bc(640, Some(1)),
            bc(1280, Some(1)),
            bc(1280, None),
        ],
        center_input_sample: false,
        cross_attention_dim: 768,
        downsample_padding: 1,
        flip_sin_to_cos: true,
        freq_shift: 0.,
        layers_per_block: 2,
        mid_block_scale_factor: 1.,
        norm_eps: 1e-5,
        norm_num_groups: 32,
        sliced_attention_size: None,
        use_linear_projection: false,
    }
}

/// `sd15_vae_decode`: the SD 1.5 VAE decoder on a 1x4x64x64 latent (tiny: channels 32/32,
/// one layer per block, on 1x4x8x8).
fn vae_decode(b: &Bench, dtype: DType, tiny: bool) -> Result<()> {
    const OP: &str = "sd15_vae_decode";
    if !b.wanted(GROUP, OP) {
        return Ok(());
    }
    let (cfg, hw) = if tiny {
        let cfg = vae::AutoEncoderKLConfig {
            block_out_channels: vec![32, 32],
            layers_per_block: 1,
            latent_channels: 4,
            norm_num_groups: 32,
            use_quant_conv: true,
            use_post_quant_conv: true,
        };
        (cfg, 8)
    } else {
        (sd15_vae_config(), 64)
    };
    let model = vae::AutoEncoderKL::new(weights(b, dtype), 3, 3, cfg)?;
    let latent = input(b, &[1, 4, hw, hw], dtype)?;
    let shape = shape_name(tiny, format!("1x4x{hw}x{hw}"));
    row(b, (OP, &shape, dtype), 1, || Ok(model.decode(&latent)?))
}

/// `sd15_unet_step`: one SD 1.5 UNet step on 2x4x64x64 latents with 2x77x768 text states
/// (tiny: blocks of 32/64 channels in 4 heads of 8/16, one layer each, cross-attention width
/// 32, on 2x4x8x8 with 2x7x32); `sd15_unet_step_flash` the same with `use_flash_attn` (attention through flash
/// attention in f16, as PyTorch's row runs it through `scaled_dot_product_attention`; without
/// it candle-transformers computes attention in f32 with the whole score matrix).
fn unet_step(b: &Bench, dtype: DType, tiny: bool, flash: bool) -> Result<()> {
    let op = if flash {
        "sd15_unet_step_flash"
    } else {
        "sd15_unet_step"
    };
    if !b.wanted(GROUP, op) {
        return Ok(());
    }
    let (cfg, hw, tokens) = if tiny {
        let bc = |out_channels, use_cross_attn| unet_2d::BlockConfig {
            out_channels,
            use_cross_attn,
            attention_head_dim: 4,
        };
        let cfg = unet_2d::UNet2DConditionModelConfig {
            blocks: vec![bc(32, Some(1)), bc(64, None)],
            layers_per_block: 1,
            cross_attention_dim: 32,
            ..Default::default()
        };
        (cfg, 8, 7)
    } else {
        (sd15_unet_config(), 64, 77)
    };
    let context = cfg.cross_attention_dim;
    let model = unet_2d::UNet2DConditionModel::new(weights(b, dtype), 4, 4, flash, cfg)?;
    let latents = input(b, &[2, 4, hw, hw], dtype)?;
    let text = input(b, &[2, tokens, context], dtype)?;
    let shape = shape_name(tiny, format!("2x4x{hw}x{hw}c{tokens}x{context}"));
    row(b, (op, &shape, dtype), 2, || {
        Ok(model.forward(&latents, 981.0, &text)?)
    })
}

/// `resnet50_b<batch>`: ResNet-50 on `batch` 224x224 images (tiny: at most 2 of 16x16, the
/// same layers).
fn resnet50(b: &Bench, dtype: DType, batch: usize, tiny: bool) -> Result<()> {
    let op = format!("resnet50_b{batch}");
    if !b.wanted(GROUP, &op) {
        return Ok(());
    }
    let (batch, hw) = if tiny {
        (batch.min(2), 16)
    } else {
        (batch, 224)
    };
    let model = candle_transformers::models::resnet::resnet50(1000, weights(b, dtype))?;
    let images = input(b, &[batch, 3, hw, hw], dtype)?;
    let shape = shape_name(tiny, format!("{batch}x3x{hw}x{hw}"));
    row(b, (&op, &shape, dtype), batch, || {
        Ok(model.forward(&images)?)
    })
}

/// Whisper tiny's configuration (openai/whisper-tiny's `config.json`); `tiny` halves the
/// layers and narrows them (for `--tiny-models`).
fn whisper_config(tiny: bool) -> candle_transformers::models::whisper::Config {
    let (d_model, heads, layers) = if tiny { (64, 2, 2) } else { (384, 6, 4) };
    candle_transformers::models::whisper::Config {
        num_mel_bins: 80,
        max_source_positions: 1500,
        d_model,
        encoder_attention_heads: heads,
        encoder_layers: layers,
        vocab_size: 51865,
        max_target_positions: 448,
        decoder_attention_heads: heads,
        decoder_layers: layers,
        suppress_tokens: Vec::new(),
    }
}

/// `whisper_tiny_encoder`: the audio encoder on 30 s of mel, 1x80x3000 (tiny: 1x80x300 on the
/// narrow config).
fn whisper_encoder(b: &Bench, dtype: DType, tiny: bool) -> Result<()> {
    const OP: &str = "whisper_tiny_encoder";
    if !b.wanted(GROUP, OP) {
        return Ok(());
    }
    let frames = if tiny { 300 } else { 3000 };
    let cfg = whisper_config(tiny);
    let mut model =
        candle_transformers::models::whisper::model::Whisper::load(&weights(b, dtype), cfg)?;
    let mel = input(b, &[1, 80, frames], dtype)?;
    let shape = shape_name(tiny, format!("1x80x{frames}"));
    row(b, (OP, &shape, dtype), 1, || {
        Ok(model.encoder.forward(&mel, true)?)
    })
}
