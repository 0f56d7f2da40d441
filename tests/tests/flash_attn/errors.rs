//! Every bad argument is an error naming it (upstream's messages where it has them), on the
//! CPU and on ext-cpu alike, never a panic or a wrong result.

use candle_core::{DType, Device, Result, Tensor};
use candle_ext_cpu::ext_cpu_device;
use candle_rocm::flash_attn as fa;

use super::randn;

/// The message of `r`'s error, which must mention each of `needles`.
fn fails(r: Result<Tensor>, needles: &[&str]) {
    match r {
        Ok(t) => panic!(
            "expected an error mentioning {needles:?}, got a {:?} tensor",
            t.dims()
        ),
        Err(e) => {
            let msg = e.to_string();
            for n in needles {
                assert!(msg.contains(n), "{n:?} not in the error: {msg}");
            }
        }
    }
}

fn t(dev: &Device, shape: &[usize], dtype: DType) -> Result<Tensor> {
    randn(dev, 7, shape, dtype)
}

#[test]
fn dense_errors_name_their_argument() -> Result<()> {
    for dev in [Device::Cpu, ext_cpu_device()] {
        let d = &dev;
        let q = t(d, &[1, 3, 4, 8], DType::F32)?;
        let kv = t(d, &[1, 5, 2, 8], DType::F32)?;
        let attn = |q: &Tensor, k: &Tensor, v: &Tensor| fa::flash_attn(q, k, v, 0.3, true);
        fails(attn(&q.squeeze(0)?, &kv, &kv), &["q must have rank 4"]);
        fails(attn(&q, &kv.squeeze(0)?, &kv), &["k must have rank 4"]);
        fails(attn(&q, &kv, &kv.squeeze(0)?), &["v must have rank 4"]);
        for dtype in [DType::F64, DType::U8] {
            let q = q.to_dtype(dtype)?;
            let k = kv.to_dtype(dtype)?;
            fails(
                attn(&q, &k, &k),
                &["flash-attn", &format!("dtype {dtype:?}")],
            );
        }
        let k16 = kv.to_dtype(DType::F16)?;
        fails(attn(&q, &k16, &kv), &["k has dtype F16 but q has F32"]);
        fails(attn(&q, &kv, &k16), &["v has dtype F16 but q has F32"]);
        // The last dim strided: a (.., 8, 4) tensor transposed to (.., 4, 8).
        let strided = t(d, &[1, 3, 8, 4], DType::F32)?.transpose(2, 3)?;
        fails(
            attn(&strided, &kv, &kv),
            &["last dim of q must be contiguous"],
        );
        let strided = t(d, &[1, 5, 8, 2], DType::F32)?.transpose(2, 3)?;
        fails(
            attn(&q, &strided, &kv),
            &["last dim of k must be contiguous"],
        );
        fails(
            attn(&q, &kv, &strided),
            &["last dim of v must be contiguous"],
        );
        let kv3 = t(d, &[1, 5, 3, 8], DType::F32)?;
        fails(
            attn(&q, &kv3, &kv3),
            &["k/v heads 3 must divide", "heads in query 4"],
        );
        for hd in [12, 520] {
            let (q, kv) = (
                t(d, &[1, 3, 4, hd], DType::F32)?,
                t(d, &[1, 5, 2, hd], DType::F32)?,
            );
            fails(
                attn(&q, &kv, &kv),
                &["head dimension", &format!("(got {hd})")],
            );
        }
        let other_batch = t(d, &[2, 5, 2, 8], DType::F32)?;
        fails(
            attn(&q, &other_batch, &other_batch),
            &["shape mismatch q", "and k"],
        );
        let longer = t(d, &[1, 6, 2, 8], DType::F32)?;
        fails(attn(&q, &kv, &longer), &["shape mismatch k", "and v"]);
        let alibi = |a: &Tensor| fa::flash_attn_alibi(&q, &kv, &kv, a, 0.3, true);
        fails(
            alibi(&t(d, &[4], DType::F16)?),
            &["alibi_slopes must be f32"],
        );
        fails(
            alibi(&t(d, &[3], DType::F32)?),
            &["alibi_slopes must have shape (4)"],
        );
        fails(
            alibi(&t(d, &[1, 4], DType::F32)?),
            &["alibi_slopes must have shape (4)"],
        );
    }
    // Operands on different devices: the first one not on q's device is named.
    let (cpu, ext) = (Device::Cpu, ext_cpu_device());
    let q = t(&cpu, &[1, 3, 4, 8], DType::F32)?;
    let kv = t(&cpu, &[1, 5, 2, 8], DType::F32)?;
    let kv_ext = kv.to_device(&ext)?;
    fails(
        fa::flash_attn(&q, &kv_ext, &kv, 0.3, false),
        &["k is on ext-cpu:0 but q is on cpu"],
    );
    fails(
        fa::flash_attn(&q, &kv, &kv_ext, 0.3, false),
        &["v is on ext-cpu:0"],
    );
    let slopes = Tensor::ones(4, DType::F32, &ext)?;
    fails(
        fa::flash_attn_alibi(&q, &kv, &kv, &slopes, 0.3, false),
        &["alibi_slopes is on ext-cpu:0 but q is on cpu"],
    );
    Ok(())
}

/// Packed q (8 tokens), k and v (10 tokens) and the lengths of two sequences on `d`.
fn packed(d: &Device) -> Result<(Tensor, Tensor, Tensor, Tensor)> {
    let q = t(d, &[8, 4, 8], DType::F32)?;
    let kv = t(d, &[10, 2, 8], DType::F32)?;
    let cq = Tensor::new(&[0u32, 3, 8], d)?;
    let ck = Tensor::new(&[0u32, 4, 10], d)?;
    Ok((q, kv, cq, ck))
}

#[test]
fn varlen_errors_name_their_argument() -> Result<()> {
    for dev in [Device::Cpu, ext_cpu_device()] {
        let d = &dev;
        let (q, kv, cq, ck) = packed(d)?;
        let run = |q: &Tensor, k: &Tensor, cq: &Tensor, ck: &Tensor, mq, mk| {
            fa::flash_attn_varlen(q, k, k, cq, ck, mq, mk, 0.3, true)
        };
        run(&q, &kv, &cq, &ck, 5, 6)?;
        fails(
            run(&q.unsqueeze(0)?, &kv, &cq, &ck, 5, 6),
            &["q must have rank 3"],
        );
        fails(
            run(&q, &kv.unsqueeze(0)?, &cq, &ck, 5, 6),
            &["k/v must have rank 3"],
        );
        let u = |v: &[u32]| Tensor::new(v, d);
        fails(
            run(&q, &kv, &cq.to_dtype(DType::I64)?, &ck, 5, 6),
            &["seqlens_q must be a 1-D u32 tensor"],
        );
        fails(
            run(&q, &kv, &cq, &ck.unsqueeze(0)?, 5, 6),
            &["seqlens_k must be a 1-D u32 tensor"],
        );
        fails(
            run(&q, &kv, &u(&[0, 3, 9])?, &ck, 6, 6),
            &["seqlens_q ends at 9, past the 8 tokens"],
        );
        fails(
            run(&q, &kv, &cq, &u(&[0, 4, 11])?, 5, 7),
            &["seqlens_k ends at 11, past the 10 tokens"],
        );
        fails(
            run(&q, &kv, &cq, &u(&[0, 6, 4])?, 5, 6),
            &["seqlens_k decreases at sequence 1"],
        );
        fails(
            run(&q, &kv, &u(&[1, 3, 8])?, &ck, 5, 6),
            &["seqlens_q must start at 0"],
        );
        fails(
            run(&q, &kv, &cq, &ck, 4, 6),
            &["sequence 1 has 5 tokens in seqlens_q, past the max of 4"],
        );
        fails(
            run(&q, &kv, &cq, &ck, 5, 5),
            &["sequence 1 has 6 tokens in seqlens_k, past the max of 5"],
        );
        fails(
            run(&q, &kv, &u(&[0, 3, 5, 8])?, &ck, 5, 6),
            &["seqlens_q and seqlens_k should have the same number of elements"],
        );
        fails(
            run(&q, &kv, &u(&[0])?, &u(&[0])?, 5, 6),
            &["seqlens_q should have a len >= 2"],
        );
        let hd12 = (
            t(d, &[8, 4, 12], DType::F32)?,
            t(d, &[10, 2, 12], DType::F32)?,
        );
        fails(
            run(&hd12.0, &hd12.1, &cq, &ck, 5, 6),
            &["head dimension", "(got 12)"],
        );
    }
    let (q, kv, cq, ck) = packed(&Device::Cpu)?;
    let ext = ext_cpu_device();
    for (what, cq, ck) in [
        ("seqlens_q", cq.to_device(&ext)?, ck.clone()),
        ("seqlens_k", cq.clone(), ck.to_device(&ext)?),
    ] {
        fails(
            fa::flash_attn_varlen(&q, &kv, &kv, &cq, &ck, 5, 6, 0.3, true),
            &[&format!("{what} is on ext-cpu:0 but q is on cpu")],
        );
    }
    Ok(())
}

#[test]
fn paged_errors_name_their_argument() -> Result<()> {
    for dev in [Device::Cpu, ext_cpu_device()] {
        let d = &dev;
        // Two sequences of 2 queries against 40 and 10 keys; a cache of 4 blocks of 32.
        let q = t(d, &[4, 4, 8], DType::F32)?;
        let cache = t(d, &[4, 32, 2, 8], DType::F32)?;
        let (cq, ck) = (
            Tensor::new(&[0u32, 2, 4], d)?,
            Tensor::new(&[0u32, 40, 50], d)?,
        );
        let table = Tensor::new(&[[3u32, 1], [0, 0]], d)?;
        let paged = |k: &Tensor, table: &Tensor, ranges: Option<&Tensor>, page: usize| {
            fa::flash_attn_varlen_paged_windowed(
                &q,
                k,
                k,
                &cq,
                &ck,
                table,
                ranges,
                2,
                40,
                0.3,
                None,
                Some(0),
                page,
                None,
            )
        };
        paged(&cache, &table, None, 32)?;
        fails(
            paged(&cache, &Tensor::new(&[[3u32, 4], [0, 0]], d)?, None, 32),
            &["block_table[0, 1] = 4 is not a block of the cache"],
        );
        fails(
            paged(&cache, &Tensor::new(&[[3i32, 1], [0, -1]], d)?, None, 32),
            &["block_table[1, 1] = -1 is not a block of the cache"],
        );
        fails(
            paged(&cache, &table.to_dtype(DType::F32)?, None, 32),
            &["block_table must be u32 or i32, got F32"],
        );
        fails(
            paged(&cache, &Tensor::new(&[3u32, 1], d)?, None, 32),
            &["block_table must have shape (2, max_blocks)"],
        );
        fails(
            paged(&cache, &Tensor::new(&[[3u32], [0]], d)?, None, 32),
            &["sequence 0 has 40 keys but block_table holds 1 blocks of 32 tokens"],
        );
        fails(
            paged(&cache, &table, None, 64),
            &["page_block_size 64 does not match k's dim 1"],
        );
        let small = t(d, &[8, 16, 2, 8], DType::F32)?;
        let table8 = Tensor::new(&[[3u32, 1, 2], [0, 0, 0]], d)?;
        fails(
            paged(&small, &table8, None, 16),
            &["page_block_size to be a multiple of 32 (got 16)"],
        );
        fails(
            paged(&t(d, &[40, 2, 8], DType::F32)?, &table, None, 32),
            &["paged k/v (with a block table) must have rank 4"],
        );
        fails(
            paged(
                &cache,
                &table,
                Some(&Tensor::zeros((2, 1, 2), DType::U32, d)?),
                32,
            ),
            &["mm_prefix_ranges must be i32, got U32"],
        );
        fails(
            paged(
                &cache,
                &table,
                Some(&Tensor::zeros((2, 1, 3), DType::I32, d)?),
                32,
            ),
            &["mm_prefix_ranges must have shape (2, max_ranges, 2)"],
        );
    }
    Ok(())
}
