//! The memory-bound rows (group `bw`): elementwise, broadcast, reductions, copies, indexing,
//! the fused normalisations and the casts; the work counted is the bytes moved.

use anyhow::Result;
use candle_core::{DType, Tensor};

use crate::runner::{name, Bench};

/// The memory-bound rows for one float dtype.
pub(crate) fn memory_bound(b: &Bench, dtype: DType) -> Result<()> {
    let (dev, n) = (&b.dev, b.n);
    let s = dtype.size_in_bytes();
    let dt = name(dtype);
    let (r, c) = (8192usize, n / 8192);
    let shape = format!("{r}x{c}");
    let x = Tensor::randn(0f32, 1.0, (r, c), dev)?.to_dtype(dtype)?;
    let y = Tensor::randn(0f32, 1.0, (r, c), dev)?.to_dtype(dtype)?;
    let row = Tensor::randn(0f32, 1.0, (1, c), dev)?.to_dtype(dtype)?;
    let col = Tensor::randn(0f32, 1.0, (r, 1), dev)?.to_dtype(dtype)?;

    b.bw("copy", &shape, dt, 2 * n * s, || Ok(x.copy()?))?;
    b.bw("affine", &shape, dt, 2 * n * s, || Ok(x.affine(1.5, 0.5)?))?;
    b.bw("exp", &shape, dt, 2 * n * s, || Ok(x.exp()?))?;
    b.bw("gelu", &shape, dt, 2 * n * s, || Ok(x.gelu()?))?;
    b.bw("silu", &shape, dt, 2 * n * s, || Ok(x.silu()?))?;
    b.bw("add", &shape, dt, 3 * n * s, || Ok(x.add(&y)?))?;
    b.bw("mul", &shape, dt, 3 * n * s, || Ok(x.mul(&y)?))?;
    let bytes = 2 * n * s + c * s;
    b.bw("broadcast_add_row", &shape, dt, bytes, || {
        Ok(x.broadcast_add(&row)?)
    })?;
    let bytes = 2 * n * s + r * s;
    b.bw("broadcast_add_col", &shape, dt, bytes, || {
        Ok(x.broadcast_add(&col)?)
    })?;
    // A per-channel operand over 14x14 planes (ResNet's batch norm at stage 3), NCHW.
    let nc = n / (256 * 196);
    let xc = Tensor::randn(0f32, 1.0, (nc, 256, 14, 14), dev)?.to_dtype(dtype)?;
    let ch = Tensor::randn(0f32, 1.0, (1, 256, 1, 1), dev)?.to_dtype(dtype)?;
    let bytes = 2 * nc * 256 * 196 * s + 256 * s;
    b.bw(
        "broadcast_mul_channel",
        &format!("{nc}x256x14x14"),
        dt,
        bytes,
        || Ok(xc.broadcast_mul(&ch)?),
    )?;
    if b.wanted("bw", "where_cond") {
        let m = x.ge(0.0)?;
        b.bw("where_cond", &shape, dt, n + 3 * n * s, || {
            Ok(m.where_cond(&x, &y)?)
        })?;
    }
    let out = r * s;
    b.bw(
        "sum_last",
        &shape,
        dt,
        n * s + out,
        || Ok(x.sum_keepdim(1)?),
    )?;
    b.bw(
        "max_last",
        &shape,
        dt,
        n * s + out,
        || Ok(x.max_keepdim(1)?),
    )?;
    b.bw(
        "min_last",
        &shape,
        dt,
        n * s + out,
        || Ok(x.min_keepdim(1)?),
    )?;
    b.bw("argmax_last", &shape, dt, n * s + r * 4, || {
        Ok(x.argmax_keepdim(1)?)
    })?;
    if b.wanted("bw", "_middle") {
        let (d0, d1, d2) = (256usize, 1024usize, n / (256 * 1024));
        let z = x.reshape((d0, d1, d2))?;
        let mshape = format!("{d0}x{d1}x{d2}/1");
        let out = d0 * d2 * s;
        b.bw("sum_middle", &mshape, dt, n * s + out, || {
            Ok(z.sum_keepdim(1)?)
        })?;
        b.bw("max_middle", &mshape, dt, n * s + out, || {
            Ok(z.max_keepdim(1)?)
        })?;
        b.bw("min_middle", &mshape, dt, n * s + out, || {
            Ok(z.min_keepdim(1)?)
        })?;
        b.bw("argmax_middle", &mshape, dt, n * s + d0 * d2 * 4, || {
            Ok(z.argmax_keepdim(1)?)
        })?;
    }
    b.bw("transpose_copy", &shape, dt, 2 * n * s, || {
        Ok(x.t()?.contiguous()?)
    })?;
    if b.wanted("bw", "index_select") {
        // Half the table's rows, picked at random: every picked row read once, written once.
        let (rows, width) = (n / 1024, 1024usize);
        let table = x.reshape((rows, width))?;
        let picks = rows / 2;
        let ids = Tensor::rand(0f32, rows as f32, picks, dev)?
            .floor()?
            .clamp(0f32, (rows - 1) as f32)?
            .to_dtype(DType::U32)?;
        b.bw(
            "index_select",
            &format!("{rows}x{width}[{picks}]"),
            dt,
            2 * picks * width * s + picks * 4,
            || Ok(table.index_select(&ids, 0)?),
        )?;
    }
    // The fused ops, on rows as long as an LLM's hidden state.
    let (nr, nc) = (n / 4096, 4096usize);
    let nshape = format!("{nr}x{nc}");
    let xr = x.reshape((nr, nc))?;
    let w = Tensor::randn(0f32, 1.0, nc, dev)?.to_dtype(dtype)?;
    let bias = Tensor::randn(0f32, 1.0, nc, dev)?.to_dtype(dtype)?;
    b.bw("softmax_last_dim", &nshape, dt, 2 * n * s, || {
        Ok(candle_nn::ops::softmax_last_dim(&xr)?)
    })?;
    b.bw("rms_norm", &nshape, dt, 2 * n * s + nc * s, || {
        Ok(candle_nn::ops::rms_norm(&xr, &w, 1e-5)?)
    })?;
    b.bw("layer_norm", &nshape, dt, 2 * n * s + 2 * nc * s, || {
        Ok(candle_nn::ops::layer_norm(&xr, &w, &bias, 1e-5)?)
    })?;
    if b.wanted("bw", "rope") {
        let (bb, h, t, d) = (16usize, 32usize, n / (16 * 32 * 128), 128usize);
        let q = x.reshape((bb, h, t, d))?;
        let cos = Tensor::rand(-1f32, 1.0, (t, d / 2), dev)?.to_dtype(dtype)?;
        let sin = Tensor::rand(-1f32, 1.0, (t, d / 2), dev)?.to_dtype(dtype)?;
        b.bw(
            "rope",
            &format!("{bb}x{h}x{t}x{d}"),
            dt,
            2 * n * s + t * d * s,
            || Ok(candle_nn::rotary_emb::rope(&q, &cos, &sin)?),
        )?;
    }
    Ok(())
}

/// Casts between f32 and the half types.
pub(crate) fn casts(b: &Bench) -> Result<()> {
    let (dev, n) = (&b.dev, b.n);
    let shape = format!("{n}");
    for (from, to) in [
        (DType::F32, DType::BF16),
        (DType::BF16, DType::F32),
        (DType::F32, DType::F16),
        (DType::F16, DType::F32),
    ] {
        let op = format!("cast_{}_{}", name(from), name(to));
        if !b.wanted("bw", &op) {
            continue;
        }
        let x = Tensor::randn(0f32, 1.0, n, dev)?.to_dtype(from)?;
        let bytes = n * (from.size_in_bytes() + to.size_in_bytes());
        b.bw(&op, &shape, name(from), bytes, || Ok(x.to_dtype(to)?))?;
    }
    Ok(())
}
