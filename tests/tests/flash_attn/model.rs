//! candle-transformers' llama with its `flash-attn` feature (the patched feature list: no
//! CUDA) calls candle-flash-attn's `flash_attn`, which the stand-in crate routes to
//! candle-rocm: with `use_flash_attn: true` a tiny random model must give the logits of its
//! own matmul-and-softmax attention (`use_flash_attn: false`), for a prompt, a chunk appended
//! to the KV cache (causal, bottom-right aligned) and single-token decode steps.

use candle_core::{DType, Device, Result};
use candle_ext_cpu::ext_cpu_device;
use candle_rocm_tests::assert_close;

use crate::llama::both_paths;

#[test]
fn llama_with_flash_attn_gives_the_logits_of_plain_attention() -> Result<()> {
    for dev in [Device::Cpu, ext_cpu_device()] {
        for (step, (flash, plain)) in both_paths(&dev, DType::F32)?.into_iter().enumerate() {
            assert_eq!(flash.dims(), [1, 101]);
            let what = format!("llama step {step} on {:?}", dev.location());
            // Both paths in f32 up to the attention, which flash computes in f64: the logits
            // (magnitude ~1) differ by f32 rounding only.
            assert_close(&flash, &plain, 1e-4, &what)?;
            let spread =
                (plain.max_all()?.to_scalar::<f32>()? - plain.min_all()?.to_scalar::<f32>()?).abs();
            assert!(
                spread > 1e-3,
                "{what}: logits are flat, the test would prove nothing"
            );
        }
    }
    Ok(())
}
