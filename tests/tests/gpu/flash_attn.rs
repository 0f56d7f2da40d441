//! candle-flash-attn's API on the GPU (`candle_rocm::flash_attn`) against the same call on the
//! CPU, which runs the host reference (exact attention in f64 of the same rounded inputs,
//! itself checked against the textbook formula in `tests/flash_attn.rs`).
//!
//! The product head dim {32, 64, 72, 128, 256, 512} x dtype {f32, f16, bf16} is covered whole;
//! masks (none, causal, window, ALiBi, softcap), GQA ratios {1, 4, 8} and sequence lengths
//! {1, 2, 63, 64, 65, 200} (around a 64-row tile, for queries and keys both) rotate through it
//! with different periods, so every value meets several others without running all
//! 18 x 5 x 3 x 36 combinations. Then decode shapes (1-8 queries against 1000+ keys), ragged
//! variable-length batches, paged caches with shuffled block tables, a strided q, and a
//! candle-transformers llama with `use_flash_attn: true`.
//!
//! Tolerances, on outputs of magnitude ~1 (weighted means of unit-normal values): the
//! reference is exact attention rounded once to the dtype (at most half an ulp: 4.9e-4 for
//! f16, 3.9e-3 for bf16); a flash kernel also rounds the probabilities to the dtype for the
//! `P V` product and accumulates in f32, which adds errors of the same order. Four half-ulps
//! cover both: f16 2e-3, bf16 1.6e-2. f32 keeps ~1e-6 relative through the softmax; 1e-4
//! leaves room for a different summation order over 1000+ keys and for `exp2`-based softmax.

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm::flash_attn as fa;
use candle_rocm_tests::{assert_gpu_close, gpu, normal, rng};

const HEAD_DIMS: [usize; 6] = [32, 64, 72, 128, 256, 512];
const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];
const SEQLENS: [usize; 6] = [1, 2, 63, 64, 65, 200];
const GQA: [usize; 3] = [1, 4, 8];

/// The attention tolerance of each dtype (relative to the largest expected value).
pub(crate) fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 1e-4,
    }
}

/// `shape` normal values from `seed` as `dtype`, on the CPU and the same bits on `dev`.
pub(crate) fn pair(
    dev: &Device,
    seed: u64,
    shape: &[usize],
    dtype: DType,
) -> Result<(Tensor, Tensor)> {
    let n = shape.iter().product();
    let cpu = Tensor::from_vec(normal(&mut rng(seed), n, 1.0), shape, &Device::Cpu)?;
    let cpu = cpu.to_dtype(dtype)?;
    Ok((cpu.clone(), cpu.to_device(dev)?))
}

/// The options a case applies besides the scale.
#[derive(Debug, Clone, Copy)]
enum Mask {
    None,
    Causal,
    Window(usize, usize),
    Alibi,
    Softcap(f32),
}

const MASKS: [Mask; 5] = [
    Mask::None,
    Mask::Causal,
    Mask::Window(17, 4),
    Mask::Alibi,
    Mask::Softcap(5.0),
];

/// ALiBi slopes for `h` heads (the usual geometric series), on `dev`.
fn slopes(h: usize, dev: &Device) -> Result<Tensor> {
    let s: Vec<f32> = (1..=h)
        .map(|i| 2f32.powf(-8.0 * i as f32 / h as f32))
        .collect();
    Tensor::new(s.as_slice(), dev)
}

/// A dense call of `mask` on `dev`; q `(b, sq, h, d)`, k and v `(b, sk, hk, d)`.
fn dense(q: &Tensor, k: &Tensor, v: &Tensor, mask: Mask) -> Result<Tensor> {
    let (d, h) = (q.dim(3)?, q.dim(2)?);
    let scale = 1.0 / (d as f32).sqrt();
    match mask {
        Mask::None => fa::flash_attn(q, k, v, scale, false),
        Mask::Causal => fa::flash_attn(q, k, v, scale, true),
        Mask::Window(l, r) => fa::flash_attn_windowed(q, k, v, scale, Some(l), Some(r)),
        Mask::Alibi => fa::flash_attn_alibi(q, k, v, &slopes(h, q.device())?, scale, true),
        Mask::Softcap(c) => {
            let a = slopes(h, q.device())?;
            fa::flash_attn_alibi_windowed_softcap(q, k, v, Some(&a), scale, None, Some(0), c)
        }
    }
}

/// Runs one dense case on the GPU and the CPU and compares.
#[allow(clippy::too_many_arguments)]
fn dense_case(
    dev: &Device,
    (b, sq, sk): (usize, usize, usize),
    (h, hk, d): (usize, usize, usize),
    dtype: DType,
    mask: Mask,
    seed: u64,
) -> Result<()> {
    let (qc, qg) = pair(dev, seed, &[b, sq, h, d], dtype)?;
    let (kc, kg) = pair(dev, seed + 1, &[b, sk, hk, d], dtype)?;
    let (vc, vg) = pair(dev, seed + 2, &[b, sk, hk, d], dtype)?;
    let got = dense(&qg, &kg, &vg, mask)?;
    let want = dense(&qc, &kc, &vc, mask)?;
    let what = format!("dense b{b} sq{sq} sk{sk} h{h}/{hk} d{d} {dtype:?} {mask:?}");
    assert_gpu_close(&got, &want, tol(dtype), &what)
}

#[test]
#[ignore = "needs a HIP device"]
fn dense_over_head_dims_dtypes_masks_gqa_and_lengths() -> Result<()> {
    let dev = gpu()?;
    let mut n = 0;
    for &d in &HEAD_DIMS {
        for &dtype in &DTYPES {
            let mask = MASKS[n % MASKS.len()];
            let g = GQA[n % GQA.len()];
            let hk = if g == 8 { 1 } else { 2 };
            let sq = SEQLENS[n % SEQLENS.len()];
            let sk = SEQLENS[(n / 2 + 3) % SEQLENS.len()];
            let b = 1 + n % 2;
            dense_case(&dev, (b, sq, sk), (g * hk, hk, d), dtype, mask, n as u64)?;
            n += 1;
        }
    }
    // Lengths the rotation pairs rarely: equal lengths across tile edges, one key, and more
    // queries than keys under a causal mask (leading rows see nothing and come out zero).
    for (i, &(sq, sk)) in [(64, 64), (65, 65), (63, 200), (200, 63), (2, 1), (1, 1)]
        .iter()
        .enumerate()
    {
        let dtype = DTYPES[i % 3];
        dense_case(
            &dev,
            (1, sq, sk),
            (4, 1, 64),
            dtype,
            Mask::Causal,
            100 + i as u64,
        )?;
        let window = Mask::Window(i * 11, i % 3);
        dense_case(
            &dev,
            (2, sq, sk),
            (2, 2, 128),
            dtype,
            window,
            200 + i as u64,
        )?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn decode_against_long_caches() -> Result<()> {
    let dev = gpu()?;
    for sq in 1..=8 {
        let sk = if sq % 2 == 0 { 1000 } else { 1037 };
        let d = if sq <= 4 { 128 } else { 64 };
        let (h, hk) = if sq % 3 == 0 { (32, 4) } else { (8, 1) };
        let mask = MASKS[sq % MASKS.len()];
        let dtype = DTYPES[sq % 3];
        dense_case(&dev, (2, sq, sk), (h, hk, d), dtype, mask, 300 + sq as u64)?;
    }
    Ok(())
}

/// Decode calls (at most 8 packed rows) in f16/bf16 at head dims up to 128, which take the
/// matrix-unit decode kernel where the code object has it: key counts around its 16-key tiles,
/// the 64 keys its waves take a step and the 128-key split unit, every mask, GQA 1/4/8.
#[test]
#[ignore = "needs a HIP device"]
fn decode_on_matrix_units_around_their_tiles() -> Result<()> {
    let dev = gpu()?;
    let lens = [1, 15, 16, 17, 63, 64, 65, 129, 1000, 4133];
    for (i, sk) in lens.into_iter().enumerate() {
        let d = [64, 128, 96, 40][i % 4];
        let (sq, h, hk) = [(1, 4, 4), (1, 32, 8), (2, 16, 4), (1, 8, 1), (8, 8, 8)][i % 5];
        let mask = MASKS[i % MASKS.len()];
        for dtype in [DType::F16, DType::BF16] {
            dense_case(&dev, (2, sq, sk), (h, hk, d), dtype, mask, 900 + i as u64)?;
        }
    }
    Ok(())
}

/// Decode calls of at most 256 keys (`CANDLE_ROCM_SHORT_DECODE_KEYS`' default): one row a kv
/// head takes the short decode kernel (`fa_sdec1_*`) in every dtype at head dims up to 256,
/// several rows it too where the matrix-unit decode kernel is missing (f32, tier 256; with
/// `CANDLE_ROCM_FLASH_MMA=0` every call): key counts around its 16-, 32- and 64-key chunks and
/// the 256-key limit, every mask.
#[test]
#[ignore = "needs a HIP device"]
fn decode_on_the_short_kernels_around_their_chunks() -> Result<()> {
    let dev = gpu()?;
    let lens = [1, 2, 31, 32, 33, 64, 65, 100, 255, 256, 257];
    for (i, sk) in lens.into_iter().enumerate() {
        let d = [128, 64, 256, 96, 200][i % 5];
        let (sq, h, hk) = [(1, 8, 8), (1, 32, 32), (1, 16, 4), (2, 8, 2), (1, 8, 1)][i % 5];
        let mask = MASKS[i % MASKS.len()];
        for dtype in DTYPES {
            dense_case(&dev, (2, sq, sk), (h, hk, d), dtype, mask, 1300 + i as u64)?;
        }
    }
    Ok(())
}

/// `reshape_and_cache` on the device writes what it writes on the host (shuffled slots,
/// padding, keys as a strided view), and decoding from that cache matches the host's.
#[test]
#[ignore = "needs a HIP device"]
fn reshape_and_cache_then_paged_decode() -> Result<()> {
    let dev = gpu()?;
    let (tokens, hk, d, page, blocks) = (40, 2, 128, 32, 4);
    for dtype in DTYPES {
        let (wc, wg) = pair(&dev, 700, &[tokens, 2 * hk, d], dtype)?;
        let (kc, kg) = (wc.narrow(1, 0, hk)?, wg.narrow(1, 0, hk)?);
        let (vc, vg) = pair(&dev, 701, &[tokens, hk, d], dtype)?;
        let slots: Vec<i64> = (0..tokens as i64)
            .map(|t| {
                if t == 3 {
                    -1
                } else {
                    (t * 37 + 5) % (page * blocks) as i64
                }
            })
            .collect();
        let cache = |dev: &Device| Tensor::zeros((blocks, page, hk, d), dtype, dev);
        let (kcc, vcc, kcg, vcg) = (
            cache(&Device::Cpu)?,
            cache(&Device::Cpu)?,
            cache(&dev)?,
            cache(&dev)?,
        );
        fa::reshape_and_cache(
            &kc,
            &vc,
            &kcc,
            &vcc,
            &Tensor::new(slots.as_slice(), &Device::Cpu)?,
        )?;
        fa::reshape_and_cache(&kg, &vg, &kcg, &vcg, &Tensor::new(slots.as_slice(), &dev)?)?;
        assert_gpu_close(&kcg, &kcc, 0.0, &format!("key cache {dtype:?}"))?;
        assert_gpu_close(&vcg, &vcc, 0.0, &format!("value cache {dtype:?}"))?;
        // One query per sequence against 100 keys of blocks 3, 1, 0, 2.
        let (qc, qg) = pair(&dev, 702, &[2, 8, d], dtype)?;
        let table = [[3u32, 1, 0, 2], [2, 0, 3, 1]];
        let run = |dev: &Device, q: &Tensor, k: &Tensor, v: &Tensor| {
            let cu_q = Tensor::new(&[0u32, 1, 2], dev)?;
            let cu_k = Tensor::new(&[0u32, 100, 200], dev)?;
            fa::flash_attn_varlen_paged_windowed(
                q,
                k,
                v,
                &cu_q,
                &cu_k,
                &Tensor::new(&table, dev)?,
                None,
                1,
                100,
                0.088,
                None,
                Some(0),
                page,
                None,
            )
        };
        let got = run(&dev, &qg, &kcg, &vcg)?;
        let want = run(&Device::Cpu, &qc, &kcc, &vcc)?;
        assert_gpu_close(
            &got,
            &want,
            tol(dtype),
            &format!("paged decode after the write {dtype:?}"),
        )?;
    }
    Ok(())
}

/// Cumulative u32 lengths on the CPU and on `dev`.
fn cumulative(lens: &[usize], dev: &Device) -> Result<(Tensor, Tensor)> {
    let mut cu = vec![0u32];
    for l in lens {
        cu.push(cu[cu.len() - 1] + *l as u32);
    }
    let cpu = Tensor::new(cu.as_slice(), &Device::Cpu)?;
    Ok((cpu.clone(), cpu.to_device(dev)?))
}

#[test]
#[ignore = "needs a HIP device"]
fn varlen_with_ragged_lengths() -> Result<()> {
    let dev = gpu()?;
    let qlens = [1, 63, 0, 65, 200, 2];
    let klens = [5, 64, 3, 65, 200, 200];
    let (tq, tk): (usize, usize) = (qlens.iter().sum(), klens.iter().sum());
    let (cqc, cqg) = cumulative(&qlens, &dev)?;
    let (ckc, ckg) = cumulative(&klens, &dev)?;
    for (i, (&d, &dtype)) in [64, 128, 256].iter().zip(&DTYPES).enumerate() {
        let (h, hk) = [(4, 4), (8, 2), (8, 1)][i];
        let (qc, qg) = pair(&dev, 400 + i as u64, &[tq, h, d], dtype)?;
        let (kc, kg) = pair(&dev, 410 + i as u64, &[tk, hk, d], dtype)?;
        let (vc, vg) = pair(&dev, 420 + i as u64, &[tk, hk, d], dtype)?;
        let (ac, ag) = (slopes(h, &Device::Cpu)?, slopes(h, &dev)?);
        let scale = 1.0 / (d as f32).sqrt();
        let window = [(None, Some(0)), (Some(40), Some(8)), (None, None)][i];
        let run = |q: &Tensor,
                   k: &Tensor,
                   v: &Tensor,
                   cq: &Tensor,
                   ck: &Tensor,
                   alibi: Option<&Tensor>| {
            fa::flash_attn_varlen_alibi_windowed_softcap(
                q, k, v, alibi, cq, ck, 200, 200, scale, window.0, window.1, 0.0,
            )
        };
        let alibi = (i == 2).then_some(());
        let got = run(&qg, &kg, &vg, &cqg, &ckg, alibi.map(|_| &ag))?;
        let want = run(&qc, &kc, &vc, &cqc, &ckc, alibi.map(|_| &ac))?;
        let what = format!("varlen d{d} {dtype:?} h{h}/{hk} {window:?}");
        assert_gpu_close(&got, &want, tol(dtype), &what)?;
    }
    Ok(())
}

/// A permutation of `0..n` from `seed` (Fisher-Yates over a fixed generator).
fn shuffled(n: usize, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n as u32).collect();
    let r = normal(&mut rng(seed), n, 1.0);
    for i in (1..n).rev() {
        let j = (r[i].abs() * 1e4) as usize % (i + 1);
        v.swap(i, j);
    }
    v
}

#[test]
#[ignore = "needs a HIP device"]
fn paged_caches_with_shuffled_block_tables() -> Result<()> {
    let dev = gpu()?;
    let qlens = [1, 4, 1, 8];
    let klens = [1, 100, 257, 31];
    let tq: usize = qlens.iter().sum();
    let (cqc, cqg) = cumulative(&qlens, &dev)?;
    let (ckc, ckg) = cumulative(&klens, &dev)?;
    for (i, &dtype) in DTYPES.iter().enumerate() {
        let page = if i == 1 { 64 } else { 32 };
        let max_blocks = 257usize.div_ceil(page);
        let blocks = 4 * max_blocks;
        // Each sequence gets its own blocks, scattered over the cache.
        let perm = shuffled(blocks, 500 + i as u64);
        let table = Tensor::from_vec(perm, (4, max_blocks), &Device::Cpu)?;
        let table = if i == 2 {
            table.to_dtype(DType::I32)?
        } else {
            table
        };
        let (h, hk, d) = [(8, 1, 128), (16, 4, 64), (4, 4, 256)][i];
        let (qc, qg) = pair(&dev, 510 + i as u64, &[tq, h, d], dtype)?;
        let (kc, kg) = pair(&dev, 520 + i as u64, &[blocks, page, hk, d], dtype)?;
        let (vc, vg) = pair(&dev, 530 + i as u64, &[blocks, page, hk, d], dtype)?;
        let scale = 1.0 / (d as f32).sqrt();
        let (window, softcap) = [((None, Some(0)), None), ((Some(64), Some(0)), Some(3.0))][i % 2];
        let ranges = Tensor::new(
            &[[[0i32, 0]], [[0, 20]], [[100, 120]], [[0, 0]]],
            &Device::Cpu,
        )?;
        let ranges = (i == 2).then_some(ranges);
        let run = |q: &Tensor,
                   k: &Tensor,
                   v: &Tensor,
                   cq: &Tensor,
                   ck: &Tensor,
                   t: &Tensor,
                   r: Option<&Tensor>| {
            fa::flash_attn_varlen_paged_windowed(
                q, k, v, cq, ck, t, r, 8, 257, scale, window.0, window.1, page, softcap,
            )
        };
        let (tg, rg) = (
            table.to_device(&dev)?,
            ranges.as_ref().map(|r| r.to_device(&dev)).transpose()?,
        );
        let got = run(&qg, &kg, &vg, &cqg, &ckg, &tg, rg.as_ref())?;
        let want = run(&qc, &kc, &vc, &cqc, &ckc, &table, ranges.as_ref())?;
        let what = format!("paged page {page} d{d} {dtype:?} h{h}/{hk} {window:?}");
        assert_gpu_close(&got, &want, tol(dtype), &what)?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn strided_q_as_a_transposed_view() -> Result<()> {
    let dev = gpu()?;
    for dtype in DTYPES {
        // q stored (b, h, s, d) and viewed (b, s, h, d), as candle-transformers' models pass it.
        let (qc, qg) = pair(&dev, 600, &[2, 8, 65, 64], dtype)?;
        let (qc, qg) = (qc.transpose(1, 2)?, qg.transpose(1, 2)?);
        let (kc, kg) = pair(&dev, 601, &[2, 70, 2, 64], dtype)?;
        let got = fa::flash_attn(&qg, &kg, &kg, 0.125, true)?;
        let want = fa::flash_attn(&qc, &kc, &kc, 0.125, true)?;
        assert_gpu_close(&got, &want, tol(dtype), &format!("strided q {dtype:?}"))?;
    }
    Ok(())
}

#[test]
#[ignore = "needs a HIP device"]
fn llama_with_flash_attn_on_the_gpu() -> Result<()> {
    let dev = gpu()?;
    for (step, (flash, plain)) in crate::llama::both_paths(&dev, DType::F32)?
        .into_iter()
        .enumerate()
    {
        assert_gpu_close(
            &flash,
            &plain.to_device(&Device::Cpu)?,
            1e-4,
            &format!("llama step {step}"),
        )?;
    }
    Ok(())
}
