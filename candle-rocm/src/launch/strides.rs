//! Plans of the strided elementwise launches, on the host: an operand's dims and strides merged
//! into as few dims as possible, the launch's class (contiguous, strided, or beyond the
//! kernels' limits), and the magic divisors the kernels use to split a flat index; the
//! `#[repr(C)]` structs are the kernels' `EwDims` / `EwStrided` ABI (`kernels/hip/elementwise.hip`).

use rocm_safe::DeviceRepr;

/// Largest rank, after merging, the strided kernels take by value (`EW_MAX_RANK`).
pub const MAX_RANK: usize = 6;

/// `(magic, shift)` such that `x / d == (mulhi(x, magic) + x) >> shift` for every `u32` x
/// (the sum taken in 64 bits); `None` for `d == 0`.
pub fn magic_divisor(d: u32) -> Option<(u32, u32)> {
    if d == 0 {
        return None;
    }
    let shift = 32 - (d - 1).leading_zeros();
    let m = ((1u128 << 32) * ((1u128 << shift) - d as u128)) / d as u128 + 1;
    Some((u32::try_from(m).ok()?, shift))
}

/// The output shape of a strided launch, innermost dim first (`EwDims`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Dims in use (1..=MAX_RANK).
    pub rank: u32,
    /// 1 when packs may be loaded whole (see the module documentation); for the binary
    /// kernels also 2: packs of half that many elements ([`half_packs`]).
    pub vec: u32,
    /// Sizes, innermost first; unused entries are 1.
    pub dims: [u32; MAX_RANK],
    /// Magic multipliers of the sizes.
    pub magic: [u32; MAX_RANK],
    /// Shifts of the sizes.
    pub shift: [u32; MAX_RANK],
}

/// Shape plus the strides of `N` operands, by value (`EwStrided1`, `EwStrided2`,
/// `EwStrided3`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strided<const N: usize> {
    /// The shape.
    pub dims: Dims,
    /// Each operand's strides, innermost first; unused entries are 0.
    pub strides: [[u32; MAX_RANK]; N],
}

// SAFETY: `#[repr(C)]` over `u32` fields and arrays only: no padding (every field has the
// 4-byte alignment of the struct), no pointers, and every bit pattern is a valid value.
unsafe impl<const N: usize> DeviceRepr for Strided<N> {}

/// How a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan<const N: usize> {
    /// Every operand's elements are contiguous and in order.
    Contiguous,
    /// The strided kernel with this shape.
    Strided(Strided<N>),
    /// Too many dims after merging, or more than `u32::MAX` elements or offsets.
    Fallback,
}

/// Plans a launch over `dims` (outermost first) for operands with `strides`, `vec` elements
/// per pack.
pub fn plan<const N: usize>(dims: &[usize], strides: [&[usize]; N], vec: usize) -> Plan<N> {
    if strides.iter().any(|s| s.len() != dims.len()) {
        return Plan::Fallback;
    }
    let mut sizes = [1usize; MAX_RANK];
    let mut st = [[0usize; MAX_RANK]; N];
    let mut rank = 0usize;
    for d in (0..dims.len()).rev() {
        let size = dims[d];
        if size == 1 {
            continue;
        }
        if rank > 0 {
            let (inner, i) = (sizes[rank - 1], rank - 1);
            let merges = (0..N).all(|k| st[k][i].checked_mul(inner) == Some(strides[k][d]));
            if merges {
                match inner.checked_mul(size) {
                    Some(v) => sizes[i] = v,
                    None => return Plan::Fallback,
                }
                continue;
            }
        }
        if rank == MAX_RANK {
            return Plan::Fallback;
        }
        sizes[rank] = size;
        for (s, from) in st.iter_mut().zip(&strides) {
            s[rank] = from[d];
        }
        rank += 1;
    }
    if rank == 0 || (rank == 1 && (0..N).all(|k| st[k][0] == 1)) {
        return Plan::Contiguous;
    }
    // Element count and every operand's largest offset must fit the kernels' u32 indices.
    let fits = |v: Option<usize>| v.is_some_and(|v| v <= u32::MAX as usize);
    let n = sizes[..rank]
        .iter()
        .try_fold(1usize, |acc, &s| acc.checked_mul(s));
    if !fits(n) {
        return Plan::Fallback;
    }
    for s in &st {
        let reach = (0..rank).try_fold(0usize, |acc, i| {
            acc.checked_add((sizes[i] - 1).checked_mul(s[i])?)
        });
        if !fits(reach) {
            return Plan::Fallback;
        }
    }
    let mut out = Strided {
        dims: Dims {
            rank: rank as u32,
            vec: 0,
            dims: [1; MAX_RANK],
            magic: [1; MAX_RANK],
            shift: [0; MAX_RANK],
        },
        strides: [[0; MAX_RANK]; N],
    };
    for i in 0..rank {
        // Every size is at least 2 and at most n, every stride at most the reach: both fit.
        let (Ok(size), Some((magic, shift))) = (
            u32::try_from(sizes[i]),
            u32::try_from(sizes[i]).ok().and_then(magic_divisor),
        ) else {
            return Plan::Fallback;
        };
        out.dims.dims[i] = size;
        out.dims.magic[i] = magic;
        out.dims.shift[i] = shift;
        for (to, from) in out.strides.iter_mut().zip(&st) {
            let Ok(s) = u32::try_from(from[i]) else {
                return Plan::Fallback;
            };
            to[i] = s;
        }
    }
    let packs = vec > 0
        && sizes[0] % vec == 0
        && st
            .iter()
            .all(|s| s[0] == 0 || (s[0] == 1 && s[1..rank].iter().all(|&x| x % vec == 0)));
    out.dims.vec = packs as u32;
    Plan::Strided(out)
}

/// The binary kernels' plan when whole packs of `vec` elements do not fit: packs of `vec / 2`
/// (8 bytes of elements of at most 4 bytes), marked `vec` 2, when those fit; else `plan`'s.
/// With the elements the plan's packs hold. A per-channel operand over 14x14 or 28x28 planes
/// of f16 (ResNet's batch norm) gets 4-element packs instead of one element a thread.
pub fn half_packs(dims: &[usize], strides: [&[usize]; 2], vec: usize) -> (Plan<2>, usize) {
    let whole = plan::<2>(dims, strides, vec);
    if let Plan::Strided(s) = &whole {
        if s.dims.vec == 0 && vec >= 4 {
            if let Plan::Strided(mut h) = plan::<2>(dims, strides, vec / 2) {
                if h.dims.vec == 1 {
                    h.dims.vec = 2;
                    return (Plan::Strided(h), vec / 2);
                }
            }
        }
    }
    (whole, vec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn div(x: u32, d: u32) -> u32 {
        let (m, s) = magic_divisor(d).unwrap();
        let hi = ((x as u64 * m as u64) >> 32) as u32;
        ((hi as u64 + x as u64) >> s) as u32
    }

    #[test]
    fn magic_division_is_exact() {
        let mut divisors: Vec<u32> = (1..=600).collect();
        divisors.extend([
            1023,
            1024,
            1025,
            65535,
            65536,
            65537,
            (1 << 31) - 1,
            1 << 31,
            (1 << 31) + 1,
            u32::MAX - 1,
            u32::MAX,
        ]);
        let mut xs: Vec<u32> = (0..2000).collect();
        xs.extend([u32::MAX, u32::MAX - 1, 1 << 31, (1 << 31) - 1, 123_456_789]);
        let mut state = 0x9E37_79B9u32;
        for _ in 0..5000 {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            xs.push(state);
        }
        for &d in &divisors {
            for &x in &xs {
                assert_eq!(div(x, d), x / d, "{x} / {d}");
            }
            for k in [1u64, 2, 3, 1000] {
                let x = (d as u64 * k).min(u32::MAX as u64) as u32;
                for x in [x.saturating_sub(1), x, x.saturating_add(1)] {
                    assert_eq!(div(x, d), x / d, "{x} / {d}");
                }
            }
        }
        assert_eq!(magic_divisor(0), None);
    }

    fn strided<const N: usize>(p: Plan<N>) -> Strided<N> {
        match p {
            Plan::Strided(s) => s,
            other => panic!("expected a strided plan, got {other:?}"),
        }
    }

    #[test]
    fn plans_merge_and_classify() {
        // Contiguous, also with size-1 dims of any stride.
        assert_eq!(plan::<1>(&[4, 5, 6], [&[30, 6, 1]], 4), Plan::Contiguous);
        assert_eq!(plan::<1>(&[4, 1, 6], [&[6, 99, 1]], 4), Plan::Contiguous);
        assert_eq!(plan::<1>(&[], [&[]], 4), Plan::Contiguous);
        assert_eq!(plan::<2>(&[1, 1], [&[1, 1], &[0, 0]], 4), Plan::Contiguous);
        // Row broadcast: [B, N, D] + [D] merges to [B*N, D] with rhs strides (0, 1).
        let s = strided(plan::<2>(&[2, 3, 8], [&[24, 8, 1], &[0, 0, 1]], 4));
        assert_eq!(s.dims.rank, 2);
        assert_eq!(&s.dims.dims[..2], &[8, 6]);
        assert_eq!(&s.strides[0][..2], &[1, 8]);
        assert_eq!(&s.strides[1][..2], &[1, 0]);
        assert_eq!(s.dims.vec, 1);
        // Column broadcast: [B, N, D] + [B, N, 1].
        let s = strided(plan::<2>(&[2, 3, 8], [&[24, 8, 1], &[3, 1, 0]], 4));
        assert_eq!((s.dims.rank, s.dims.vec), (2, 1));
        assert_eq!(&s.strides[1][..2], &[0, 1]);
        // The innermost dim is not a multiple of the pack: element path.
        let s = strided(plan::<2>(&[3, 6], [&[6, 1], &[0, 1]], 4));
        assert_eq!(s.dims.vec, 0);
        // A transpose: strides 1 on the outer dim, no packs.
        let s = strided(plan::<1>(&[8, 4], [&[1, 8]], 4));
        assert_eq!((s.dims.rank, s.dims.vec), (2, 0));
        // Narrowed rows (stride 12 over 8 columns): packs, since 12 is a multiple of 4.
        let s = strided(plan::<1>(&[5, 8], [&[12, 1]], 4));
        assert_eq!(s.dims.vec, 1);
        let s = strided(plan::<1>(&[5, 8], [&[10, 1]], 4));
        assert_eq!(s.dims.vec, 0);
        // Unused entries: size 1, magic of 1, stride 0.
        assert_eq!(s.dims.dims[2..], [1; MAX_RANK - 2]);
        assert_eq!(s.strides[0][2..], [0; MAX_RANK - 2]);
        // where_cond on an attention mask: cond [S, S] broadcast over [B, H], t contiguous,
        // f one scalar; the inner two dims merge, and packs load whole (u8 cond, f32 values).
        let w = strided(plan::<3>(
            &[2, 3, 4, 8],
            [&[0, 0, 8, 1], &[96, 32, 8, 1], &[0, 0, 0, 0]],
            16,
        ));
        assert_eq!((w.dims.rank, w.dims.vec), (2, 1));
        assert_eq!(&w.dims.dims[..2], &[32, 6]);
        assert_eq!(&w.strides[0][..2], &[1, 0]);
        assert_eq!(&w.strides[1][..2], &[1, 32]);
        assert_eq!(&w.strides[2][..2], &[0, 0]);
    }

    #[test]
    fn binary_plans_take_half_packs_where_whole_ones_do_not_fit() {
        // ResNet's batch norm in f16 over 14x14 planes: (32, 256, 196) by (1, 256, 1); 196 is
        // a multiple of 4, not of 8.
        let (p, v) = half_packs(&[32, 256, 196], [&[50176, 196, 1], &[0, 1, 0]], 8);
        assert_eq!((strided(p).dims.vec, v), (2, 4));
        // 28x28 (784 = 98 x 8): whole packs.
        let (p, v) = half_packs(&[32, 128, 784], [&[100352, 784, 1], &[0, 1, 0]], 8);
        assert_eq!((strided(p).dims.vec, v), (1, 8));
        // 7x7: neither.
        let (p, v) = half_packs(&[32, 512, 49], [&[25088, 49, 1], &[0, 1, 0]], 8);
        assert_eq!((strided(p).dims.vec, v), (0, 8));
        // f32 (packs of 4): 14 columns take packs of 2.
        let (p, v) = half_packs(&[3, 14], [&[14, 1], &[1, 0]], 4);
        assert_eq!((strided(p).dims.vec, v), (2, 2));
        // 8-byte elements (packs of 2) have no half packs.
        let (p, v) = half_packs(&[3, 7], [&[7, 1], &[1, 0]], 2);
        assert_eq!((strided(p).dims.vec, v), (0, 2));
        // Contiguous stays contiguous.
        assert_eq!(
            half_packs(&[4, 6], [&[6, 1], &[6, 1]], 8),
            (Plan::Contiguous, 8)
        );
    }

    #[test]
    fn plans_fall_back_beyond_the_limits() {
        // Seven dims that cannot merge (alternating broadcast): above MAX_RANK.
        let dims = [2usize; 7];
        let lhs = [64usize, 32, 16, 8, 4, 2, 1];
        let rhs = [0usize, 16, 0, 4, 0, 1, 0];
        assert_eq!(plan::<2>(&dims, [&lhs, &rhs], 4), Plan::Fallback);
        // Six such dims fit.
        let s = strided(plan::<2>(&dims[1..], [&lhs[1..], &rhs[1..]], 4));
        assert_eq!(s.dims.rank, 6);
        // More than u32::MAX elements, or offsets past u32::MAX.
        let big = 1usize << 32;
        assert_eq!(plan::<1>(&[2, big], [&[1, 2]], 4), Plan::Fallback);
        assert_eq!(plan::<1>(&[2, 3], [&[big, 1]], 4), Plan::Fallback);
        assert_eq!(plan::<1>(&[2, 3], [&[1]], 4), Plan::Fallback);
        // Offsets right at the limit still fit.
        let s = strided(plan::<1>(&[2, 3], [&[u32::MAX as usize - 2, 1]], 4));
        assert_eq!(s.strides[0][1], u32::MAX - 2);
    }

    #[test]
    fn structs_match_the_kernel_abi() {
        assert_eq!(std::mem::size_of::<Dims>(), 4 * (2 + 3 * MAX_RANK));
        assert_eq!(std::mem::size_of::<Strided<1>>(), 4 * (2 + 4 * MAX_RANK));
        assert_eq!(std::mem::size_of::<Strided<2>>(), 4 * (2 + 5 * MAX_RANK));
        assert_eq!(std::mem::size_of::<Strided<3>>(), 4 * (2 + 6 * MAX_RANK));
        assert_eq!(std::mem::align_of::<Strided<3>>(), 4);
        assert_eq!(std::mem::align_of::<Strided<2>>(), 4);
    }
}
