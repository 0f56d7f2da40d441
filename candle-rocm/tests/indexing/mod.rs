//! Parity of the indexing ops: `index_select`, `gather`, `scatter`, `scatter_add` and
//! `index_add` over every id dtype, with Candle's "no index" sentinel among the ids.

use super::*;

/// Valid random indices into a dim of `size`, in dtype `ids`, sometimes Candle's "no index"
/// sentinel (the type's max), which reads as zero / writes nothing on both backends.
fn random_ids(rng: &mut Rng, ids: DType, n: usize, size: usize, sentinel: bool) -> CpuStorage {
    let v: Vec<u64> = (0..n)
        .map(|_| {
            if sentinel && rng.chance(0.1) {
                u64::MAX
            } else {
                rng.below(size.max(1)) as u64
            }
        })
        .collect();
    match ids {
        DType::U8 => CpuStorage::U8(
            v.iter()
                .map(|&x| if x == u64::MAX { u8::MAX } else { x as u8 })
                .collect(),
        ),
        DType::U32 => CpuStorage::U32(
            v.iter()
                .map(|&x| if x == u64::MAX { u32::MAX } else { x as u32 })
                .collect(),
        ),
        DType::I64 => CpuStorage::I64(
            v.iter()
                .map(|&x| if x == u64::MAX { i64::MAX } else { x as i64 })
                .collect(),
        ),
        other => panic!("{other:?} is not an index type"),
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn index_select_gather_scatter_index_add() {
    let dev = device();
    for ids_dt in [DType::U8, DType::U32, DType::I64] {
        for dtype in DTYPES {
            for i in 0..n_cases() / 2 {
                let s = seed(&format!("index{ids_dt:?}"), dtype, i);
                let mut rng = Rng::new(s);
                let mut dims = random_dims(&mut rng, 4, 4000);
                if dims.is_empty() {
                    dims.push(1 + rng.below(9));
                }
                let dim = rng.below(dims.len());
                let size = dims[dim].clamp(1, 200);
                dims[dim] = size;
                let src_l = contiguous_layout(&mut rng, &dims);
                let src_c = random_data(&mut rng, dtype, buffer_len(&src_l), Values::Small);
                let src_g = upload(&dev, &src_c);
                let sentinel = ids_dt != DType::U8 || size < 255;
                let tag = format!("{ids_dt:?} dim {dim} of {dims:?} seed {s}");

                // index_select with 1-D (possibly strided) ids.
                let n_ids = rng.below(9);
                let stride = 1 + rng.below(2);
                let ids_c = random_ids(
                    &mut rng,
                    ids_dt,
                    (n_ids.max(1) - 1) * stride + 1 + 2,
                    size,
                    sentinel,
                );
                let ids_g = upload(&dev, &ids_c);
                let ids_l = Layout::new(Shape::from(n_ids), vec![stride], 1);
                check(
                    "index_select",
                    dtype,
                    &format!("index_select {tag}"),
                    0.0,
                    || src_c.index_select(&ids_c, &src_l, &ids_l, dim),
                    || {
                        src_g
                            .index_select(&ids_g, &src_l, &ids_l, dim)?
                            .to_cpu_storage()
                    },
                );

                // gather: ids shaped like the source except along `dim`.
                let mut gdims = dims.clone();
                gdims[dim] = 1 + rng.below(6);
                let gl = contiguous_layout(&mut rng, &gdims);
                let gids_c = random_ids(&mut rng, ids_dt, buffer_len(&gl), size, sentinel);
                let gids_g = upload(&dev, &gids_c);
                check(
                    "gather",
                    dtype,
                    &format!("gather {tag}"),
                    0.0,
                    || src_c.gather(&src_l, &gids_c, &gl, dim),
                    || src_g.gather(&src_l, &gids_g, &gl, dim)?.to_cpu_storage(),
                );

                // scatter_set / scatter_add_set into a fresh destination of `dims`.
                let upd_c = random_data(&mut rng, dtype, buffer_len(&gl), Values::Small);
                let upd_g = upload(&dev, &upd_c);
                let upd_l = Layout::contiguous_with_offset(gl.shape(), gl.start_offset());
                let dst_l = Layout::contiguous(Shape::from(dims.clone()));
                let dst_c = random_data(&mut rng, dtype, dst_l.shape().elem_count(), Values::Small);
                for (method, add) in [("scatter_set", false), ("scatter_add_set", true)] {
                    // Scatter with repeated indices writes in an unspecified order (set);
                    // use distinct indices along `dim` for scatter_set.
                    let ids_c = if add {
                        gids_c.clone()
                    } else {
                        distinct_ids(&mut rng, ids_dt, &gl, dim, size)
                    };
                    if !add && ids_c.dtype() == DType::U8 && size > 255 {
                        continue;
                    }
                    let ids_g = upload(&dev, &ids_c);
                    let (mut dc, mut dg) = (dst_c.clone(), upload(&dev, &dst_c));
                    check(
                        method,
                        dtype,
                        &format!("{method} {tag}"),
                        2.0,
                        || {
                            if add {
                                dc.scatter_add_set(&dst_l, &ids_c, &gl, &upd_c, &upd_l, dim)?;
                            } else {
                                dc.scatter_set(&dst_l, &ids_c, &gl, &upd_c, &upd_l, dim)?;
                            }
                            Ok(dc.clone())
                        },
                        || {
                            if add {
                                dg.scatter_add_set(&dst_l, &ids_g, &gl, &upd_g, &upd_l, dim)?;
                            } else {
                                dg.scatter_set(&dst_l, &ids_g, &gl, &upd_g, &upd_l, dim)?;
                            }
                            dg.to_cpu_storage()
                        },
                    );
                }

                // index_add: src has ids_dim entries along `dim`.
                let mut adims = dims.clone();
                let n_add = 1 + rng.below(6);
                adims[dim] = n_add;
                let al = Layout::contiguous(Shape::from(adims));
                let add_c = random_data(&mut rng, dtype, al.shape().elem_count(), Values::Small);
                let add_g = upload(&dev, &add_c);
                let aids_c = random_ids(&mut rng, ids_dt, n_add, size, sentinel);
                let aids_g = upload(&dev, &aids_c);
                let aids_l = Layout::contiguous(Shape::from(n_add));
                check(
                    "index_add",
                    dtype,
                    &format!("index_add {tag}"),
                    2.0,
                    || dst_c.index_add(&dst_l, &aids_c, &aids_l, &add_c, &al, dim),
                    || {
                        upload(&dev, &dst_c)
                            .index_add(&dst_l, &aids_g, &aids_l, &add_g, &al, dim)?
                            .to_cpu_storage()
                    },
                );
            }
        }
    }
    for m in [
        "index_select",
        "gather",
        "scatter_set",
        "scatter_add_set",
        "index_add",
    ] {
        assert!(
            cases(m)
                >= (DTYPES.len() * 3 * (n_cases() / 2) as usize)
                    .saturating_sub(30)
                    .max(1),
            "{m}: {}",
            cases(m)
        );
        flush(m);
    }
    finish(&[
        "index_select",
        "gather",
        "scatter_set",
        "scatter_add_set",
        "index_add",
    ]);
}

/// Scatter indices that are distinct along `dim` for every other position (a permutation
/// prefix), so `scatter_set` has one writer per destination element.
fn distinct_ids(rng: &mut Rng, ids: DType, l: &Layout, dim: usize, size: usize) -> CpuStorage {
    let dims = l.dims();
    let n = dims[dim];
    let left: usize = dims[..dim].iter().product();
    let right: usize = dims[dim + 1..].iter().product();
    let mut v = vec![0u64; l.start_offset() + left * n * right];
    for a in 0..left {
        for c in 0..right {
            let mut perm: Vec<u64> = (0..size as u64).collect();
            for j in 0..n {
                let k = j + rng.below(size - j.min(size - 1));
                perm.swap(j.min(size - 1), k.min(size - 1));
                v[l.start_offset() + (a * n + j) * right + c] =
                    if j < size { perm[j] } else { u64::MAX };
            }
        }
    }
    match ids {
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| x.min(255) as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| x.min(u32::MAX as u64) as u32).collect()),
        _ => CpuStorage::I64(v.iter().map(|&x| x.min(i64::MAX as u64) as i64).collect()),
    }
}
