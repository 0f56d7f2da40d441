//! `reshape_and_cache`: new keys and values written into a paged cache land in the slots the
//! mapping names (padding slots skipped, the rest of the cache untouched), attention over the
//! filled cache equals attention over the rows written, and a bad call is an error that names
//! the argument and writes nothing.

use candle_core::{DType, Device, IndexOp, Result, Tensor};
use candle_rocm::flash_attn as fa;
use candle_rocm_tests::assert_close;

use super::{devices, randn};

const HK: usize = 2;
const HD: usize = 8;
const PAGE: usize = 4;
const BLOCKS: usize = 5;
/// Where tokens 0..6 go; -1 is padding.
const SLOTS: [i64; 6] = [7, 0, 19, -1, 12, 13];
const POISON: f64 = -3.0;

/// Poisoned caches and the new rows (keys as a view of a wider tensor: strided rows).
fn operands(dev: &Device, dtype: DType) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let wide = randn(dev, 31, &[SLOTS.len(), 2 * HK, HD], dtype)?;
    let key = wide.narrow(1, 0, HK)?;
    let value = randn(dev, 32, &[SLOTS.len(), HK, HD], dtype)?;
    let cache = || (Tensor::ones((BLOCKS, PAGE, HK, HD), dtype, dev)? * POISON)?.to_dtype(dtype);
    Ok((key, value, cache()?, cache()?))
}

#[test]
fn rows_land_in_their_slots_on_the_cpu_and_ext_cpu() -> Result<()> {
    for dev in devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let (key, value, kc, vc) = operands(&dev, dtype)?;
            let slots = Tensor::new(&SLOTS, &dev)?;
            fa::reshape_and_cache(&key, &value, &kc, &vc, &slots)?;
            let cpu = |t: &Tensor| t.to_device(&Device::Cpu)?.to_dtype(DType::F32);
            let (kc, vc, key, value) = (cpu(&kc)?, cpu(&vc)?, cpu(&key)?, cpu(&value)?);
            let (kc, vc) = (
                kc.reshape((BLOCKS * PAGE, HK, HD))?,
                vc.reshape((BLOCKS * PAGE, HK, HD))?,
            );
            for slot in 0..BLOCKS * PAGE {
                let owner = SLOTS.iter().position(|s| *s == slot as i64);
                let (want_k, want_v) = match owner {
                    Some(t) => (key.i(t)?, value.i(t)?),
                    None => {
                        let p = (Tensor::ones((HK, HD), DType::F32, &Device::Cpu)? * POISON)?;
                        (p.clone(), p)
                    }
                };
                let what = format!("{dtype:?} on {dev:?}, slot {slot}");
                assert_eq!(
                    kc.i(slot)?.to_vec2::<f32>()?,
                    want_k.to_vec2::<f32>()?,
                    "keys, {what}"
                );
                assert_eq!(
                    vc.i(slot)?.to_vec2::<f32>()?,
                    want_v.to_vec2::<f32>()?,
                    "values, {what}"
                );
            }
        }
    }
    Ok(())
}

#[test]
fn attention_over_the_filled_cache_equals_attention_over_the_rows() -> Result<()> {
    let dev = Device::Cpu;
    let (n, h) = (40usize, 4usize);
    let q = randn(&dev, 40, &[1, h, HD], DType::F32)?;
    let k = randn(&dev, 41, &[n, HK, HD], DType::F32)?;
    let v = randn(&dev, 42, &[n, HK, HD], DType::F32)?;
    let page = 32;
    let blocks = 3;
    let kc = Tensor::zeros((blocks, page, HK, HD), DType::F32, &dev)?;
    let vc = kc.zeros_like()?;
    // Key j is row j % page of block table[j / page]: keys 0..32 in block 2 (slots 64..),
    // keys 32..40 in block 0 (slots 0..).
    let slots: Vec<i64> = (0..n as i64)
        .map(|j| if j < 32 { 64 + j } else { j - 32 })
        .collect();
    fa::reshape_and_cache(&k, &v, &kc, &vc, &Tensor::new(slots.as_slice(), &dev)?)?;
    let table = Tensor::new(&[[2u32, 0]], &dev)?;
    let cu_q = Tensor::new(&[0u32, 1], &dev)?;
    let cu_k = Tensor::new(&[0u32, n as u32], &dev)?;
    let scale = 1.0 / (HD as f32).sqrt();
    let paged = fa::flash_attn_varlen_paged_windowed(
        &q, &kc, &vc, &cu_q, &cu_k, &table, None, 1, n, scale, None, None, page, None,
    )?;
    let direct = fa::flash_attn_varlen(&q, &k, &v, &cu_q, &cu_k, 1, n, scale, false)?;
    assert_close(&paged, &direct, 1e-6, "paged after reshape_and_cache")
}

#[test]
fn bad_calls_name_the_argument_and_write_nothing() -> Result<()> {
    let dev = Device::Cpu;
    let (key, value, kc, vc) = operands(&dev, DType::F32)?;
    let cases: Vec<(&str, Tensor, Tensor, Tensor)> = vec![
        (
            "slot_mapping",
            Tensor::new(&[0i64, 1, 2, 3, 4, 20], &dev)?,
            value.clone(),
            vc.clone(),
        ),
        (
            "slot_mapping",
            Tensor::new(&[0u32, 1, 2, 3, 4, 5], &dev)?,
            value.clone(),
            vc.clone(),
        ),
        (
            "slot_mapping",
            Tensor::new(&[0i64, 1], &dev)?,
            value.clone(),
            vc.clone(),
        ),
        (
            "value",
            Tensor::new(&SLOTS, &dev)?,
            value.to_dtype(DType::F16)?,
            vc.clone(),
        ),
        (
            "value",
            Tensor::new(&SLOTS, &dev)?,
            value.i(..3)?,
            vc.clone(),
        ),
        (
            "value_cache",
            Tensor::new(&SLOTS, &dev)?,
            value.clone(),
            vc.i(..2)?,
        ),
    ];
    for (what, slots, value, vc) in cases {
        let err = fa::reshape_and_cache(&key, &value, &kc, &vc, &slots).expect_err(what);
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    let kc_after = kc.flatten_all()?.to_vec1::<f32>()?;
    assert!(
        kc_after.iter().all(|x| *x == POISON as f32),
        "a rejected call wrote the key cache"
    );
    Ok(())
}
