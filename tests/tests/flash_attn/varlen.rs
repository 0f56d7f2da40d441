//! Variable-length and paged calls: each packed sequence must equal the dense reference of that
//! sequence alone, and a paged cache with a shuffled block table the packed keys it holds.

use candle_core::{DType, Device, Result, Tensor};
use candle_rocm::flash_attn as fa;
use candle_rocm_tests::{assert_close, tolerance};

use super::{devices, randn, reference, Opts};

/// Query and key lengths of the packed sequences: ragged, one without queries, one with a
/// single query against many keys.
const QLENS: [usize; 4] = [3, 0, 5, 1];
const KLENS: [usize; 4] = [4, 2, 5, 9];
const H: usize = 4;
const HK: usize = 2;
const HD: usize = 16;

/// Cumulative lengths, as u32 on `dev`.
fn cumulative(lens: &[usize], dev: &Device) -> Result<Tensor> {
    let mut cu = vec![0u32];
    for l in lens {
        cu.push(cu[cu.len() - 1] + *l as u32);
    }
    Tensor::new(cu.as_slice(), dev)
}

/// The dense reference of each sequence alone, packed like q (plus `spare` zero rows).
fn packed_reference(
    (q, k, v): (&Tensor, &Tensor, &Tensor),
    (qlens, klens): (&[usize], &[usize]),
    scale: f32,
    o: &Opts,
    spare: usize,
) -> Result<Tensor> {
    let (mut qs, mut ks) = (0, 0);
    let mut parts = Vec::new();
    for (&sq, &sk) in qlens.iter().zip(klens) {
        let one = |t: &Tensor, at, len| t.narrow(0, at, len)?.unsqueeze(0);
        if sq > 0 && sk == 0 {
            parts.push(Tensor::zeros((sq, H, HD), q.dtype(), &Device::Cpu)?);
        } else if sq > 0 {
            let (qb, kb, vb) = (one(q, qs, sq)?, one(k, ks, sk)?, one(v, ks, sk)?);
            parts.push(reference(&qb, &kb, &vb, scale, o)?.squeeze(0)?);
        }
        (qs, ks) = (qs + sq, ks + sk);
    }
    parts.push(Tensor::zeros((spare, H, HD), q.dtype(), &Device::Cpu)?);
    Tensor::cat(&parts, 0)
}

fn tol(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        1e-6
    } else {
        tolerance(dtype) / 4.0
    }
}

#[test]
fn varlen_matches_each_sequence_alone() -> Result<()> {
    let (tq, tk): (usize, usize) = (QLENS.iter().sum(), KLENS.iter().sum());
    let (maxq, maxk) = (5, 9);
    let scale = 0.3;
    for dev in devices() {
        for dtype in [DType::F32, DType::BF16] {
            // One spare q row past the last sequence: it comes out zero.
            let q = randn(&dev, 1, &[tq + 1, H, HD], dtype)?;
            let k = randn(&dev, 2, &[tk, HK, HD], dtype)?;
            let v = randn(&dev, 3, &[tk, HK, HD], dtype)?;
            let (cq, ck) = (cumulative(&QLENS, &dev)?, cumulative(&KLENS, &dev)?);
            let slopes = vec![0.5f32, 0.25, 0.125, 1.0];
            let alibi = Tensor::new(slopes.as_slice(), &dev)?;
            let cases: [(Opts, Tensor); 5] = [
                (
                    Opts::default(),
                    fa::flash_attn_varlen(&q, &k, &v, &cq, &ck, maxq, maxk, scale, false)?,
                ),
                (
                    Opts {
                        window: (None, Some(0)),
                        ..Opts::default()
                    },
                    fa::flash_attn_varlen(&q, &k, &v, &cq, &ck, maxq, maxk, scale, true)?,
                ),
                (
                    Opts {
                        window: (Some(2), Some(1)),
                        ..Opts::default()
                    },
                    fa::flash_attn_varlen_windowed(
                        &q,
                        &k,
                        &v,
                        &cq,
                        &ck,
                        maxq,
                        maxk,
                        scale,
                        Some(2),
                        Some(1),
                    )?,
                ),
                (
                    Opts {
                        window: (None, Some(0)),
                        alibi: Some(slopes.clone()),
                        ..Opts::default()
                    },
                    fa::flash_attn_varlen_alibi(
                        &q, &k, &v, &alibi, &cq, &ck, maxq, maxk, scale, true,
                    )?,
                ),
                (
                    Opts {
                        window: (Some(3), Some(0)),
                        alibi: Some(slopes.clone()),
                        softcap: Some(1.2),
                    },
                    fa::flash_attn_varlen_alibi_windowed_softcap(
                        &q,
                        &k,
                        &v,
                        Some(&alibi),
                        &cq,
                        &ck,
                        maxq,
                        maxk,
                        scale,
                        Some(3),
                        Some(0),
                        1.2,
                    )?,
                ),
            ];
            for (n, (o, got)) in cases.iter().enumerate() {
                assert_eq!((got.dims(), got.dtype()), (q.dims(), dtype));
                let want = packed_reference((&q, &k, &v), (&QLENS, &KLENS), scale, o, 1)?;
                let what = format!("varlen case {n} {dtype:?} on {:?}", dev.location());
                assert_close(&got.to_device(&Device::Cpu)?, &want, tol(dtype), &what)?;
            }
            // Windowed with ALiBi (no softcap) is the same call as the softcap one with 0.
            let a = fa::flash_attn_varlen_alibi_windowed(
                &q,
                &k,
                &v,
                &alibi,
                &cq,
                &ck,
                maxq,
                maxk,
                scale,
                Some(3),
                Some(0),
            )?;
            let b = fa::flash_attn_varlen_alibi_windowed_softcap(
                &q,
                &k,
                &v,
                Some(&alibi),
                &cq,
                &ck,
                maxq,
                maxk,
                scale,
                Some(3),
                Some(0),
                0.0,
            )?;
            assert_close(&a, &b, 0.0, "alibi windowed vs softcap 0")?;
        }
    }
    Ok(())
}

/// Three sequences of 2, 1 and 1 queries against 40, 0 and 70 keys, in a cache of 8 blocks of
/// 32 tokens: the blocks of sequence `b` are `TABLE[b]` (shuffled; unused entries 0).
const PAGED_Q: [usize; 3] = [2, 1, 1];
const PAGED_K: [usize; 3] = [40, 0, 70];
const TABLE: [[u32; 3]; 3] = [[5, 2, 0], [0, 0, 0], [7, 1, 3]];
const PAGE: usize = 32;
const BLOCKS: usize = 8;

/// The cache holding the packed keys `k` (`(total_k, HK, HD)`) at `TABLE`'s blocks; other rows
/// hold large values that would show if read.
fn cache(k: &Tensor) -> Result<Tensor> {
    let dtype = k.dtype();
    let packed = k.to_dtype(DType::F32)?.to_vec3::<f32>()?;
    let row = HK * HD;
    let mut c = vec![1e3f32; BLOCKS * PAGE * row];
    let mut start = 0;
    for (b, &len) in PAGED_K.iter().enumerate() {
        for j in 0..len {
            let at = (TABLE[b][j / PAGE] as usize * PAGE + j % PAGE) * row;
            c[at..at + row].copy_from_slice(&packed[start + j].concat());
        }
        start += len;
    }
    Tensor::from_vec(c, (BLOCKS, PAGE, HK, HD), &Device::Cpu)?.to_dtype(dtype)
}

#[test]
fn paged_cache_with_a_shuffled_table_matches_packed_keys() -> Result<()> {
    let (tq, tk): (usize, usize) = (PAGED_Q.iter().sum(), PAGED_K.iter().sum());
    let scale = 0.25;
    let o = Opts {
        window: (Some(30), Some(0)),
        softcap: Some(2.0),
        ..Opts::default()
    };
    for dev in devices() {
        for dtype in [DType::F32, DType::F16] {
            let q = randn(&dev, 11, &[tq, H, HD], dtype)?;
            let k = randn(&Device::Cpu, 12, &[tk, HK, HD], dtype)?;
            let v = randn(&Device::Cpu, 13, &[tk, HK, HD], dtype)?;
            let (kc, vc) = (cache(&k)?.to_device(&dev)?, cache(&v)?.to_device(&dev)?);
            let (cq, ck) = (cumulative(&PAGED_Q, &dev)?, cumulative(&PAGED_K, &dev)?);
            let flat: Vec<u32> = TABLE.concat();
            let table = Tensor::from_vec(flat.clone(), (3, 3), &dev)?;
            let table_i32 = table.to_dtype(DType::I32)?;
            let no_ranges = Tensor::zeros((3, 2, 2), DType::I32, &dev)?;
            let want = packed_reference((&q, &k, &v), (&PAGED_Q, &PAGED_K), scale, &o, 0)?;
            let runs = [
                (&table, None),
                (&table_i32, None),
                (&table, Some(&no_ranges)),
            ];
            for (n, (t, ranges)) in runs.into_iter().enumerate() {
                let got = fa::flash_attn_varlen_paged_windowed(
                    &q,
                    &kc,
                    &vc,
                    &cq,
                    &ck,
                    t,
                    ranges,
                    2,
                    70,
                    scale,
                    Some(30),
                    Some(0),
                    PAGE,
                    Some(2.0),
                )?;
                assert_eq!((got.dims(), got.dtype()), (q.dims(), dtype));
                let what = format!("paged run {n} {dtype:?} on {:?}", dev.location());
                assert_close(&got.to_device(&Device::Cpu)?, &want, tol(dtype), &what)?;
            }
            // A prefix range covering sequence 0's keys lifts its mask: its queries (at key
            // positions 38 and 39) then see every key, those the window hid (0..8) and the one
            // after position 38 too.
            let ranges = Tensor::new(&[[[0i32, 40], [0, 0]], [[0, 0]; 2], [[0, 0]; 2]], &dev)?;
            let lifted = fa::flash_attn_varlen_paged_windowed(
                &q,
                &kc,
                &vc,
                &cq,
                &ck,
                &table,
                Some(&ranges),
                2,
                70,
                scale,
                Some(30),
                Some(0),
                PAGE,
                Some(2.0),
            )?;
            let full = Opts {
                window: (None, None),
                ..o.clone()
            };
            let want = packed_reference((&q, &k, &v), (&PAGED_Q, &PAGED_K), scale, &full, 0)?;
            let what = format!("mm prefix {dtype:?} on {:?}", dev.location());
            let lifted = lifted.to_device(&Device::Cpu)?;
            assert_close(
                &lifted.narrow(0, 0, 2)?,
                &want.narrow(0, 0, 2)?,
                tol(dtype),
                &what,
            )?;
        }
    }
    Ok(())
}
