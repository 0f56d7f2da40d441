//! First slice of the backend parity suite: `RocmStorage` and candle's `CpuStorage` run the
//! same op on the same data and layouts (contiguous, transposed, narrowed with an offset,
//! broadcast stride 0, empty) and must agree within the dtype's tolerance. Ignored in CI
//! (no GPU); the HIP-on-CUDA harness runs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::backend::BackendStorage;
use candle_core::op::{
    Abs, Add, BinaryOpT, Div, Exp, Gelu, Maximum, Minimum, Mul, Neg, Sqr, Sqrt, Sub, UnaryOpT,
};
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_rocm::{RocmDevice, RocmStorage};
use half::{bf16, f16};

fn device() -> RocmDevice {
    RocmDevice::new(0).unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"))
}

/// Deterministic values in [-4, 4) (positive for integer types).
fn cpu_data(dtype: DType, n: usize, seed: u64) -> CpuStorage {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 * 8.0 - 4.0
    };
    let v: Vec<f64> = (0..n).map(|_| next()).collect();
    match dtype {
        DType::F32 => CpuStorage::F32(v.iter().map(|&x| x as f32).collect()),
        DType::F64 => CpuStorage::F64(v),
        DType::F16 => CpuStorage::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        DType::BF16 => CpuStorage::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
        DType::U8 => CpuStorage::U8(v.iter().map(|&x| (x.abs() * 20.0) as u8).collect()),
        DType::U32 => CpuStorage::U32(v.iter().map(|&x| (x.abs() * 1e4) as u32).collect()),
        DType::I16 => CpuStorage::I16(v.iter().map(|&x| (x * 1e3) as i16).collect()),
        DType::I32 => CpuStorage::I32(v.iter().map(|&x| (x * 1e6) as i32).collect()),
        DType::I64 => CpuStorage::I64(v.iter().map(|&x| (x * 1e9) as i64).collect()),
        other => panic!("no test data for {other:?}"),
    }
}

fn as_f64(s: &CpuStorage) -> Vec<f64> {
    match s {
        CpuStorage::F32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::F64(v) => v.clone(),
        CpuStorage::F16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::BF16(v) => v.iter().map(|x| x.to_f64()).collect(),
        CpuStorage::U8(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::U32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::I16(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::I32(v) => v.iter().map(|&x| x as f64).collect(),
        CpuStorage::I64(v) => v.iter().map(|&x| x as f64).collect(),
        other => panic!("unexpected {:?}", other.dtype()),
    }
}

/// Relative tolerance per dtype (written down once).
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 1e-5,
        DType::F16 => 2e-3,
        DType::BF16 => 1.6e-2,
        _ => 0.0,
    }
}

fn assert_close(what: &str, dtype: DType, got: &CpuStorage, want: &CpuStorage) {
    assert_eq!(got.dtype(), want.dtype(), "{what}");
    let (g, w) = (as_f64(got), as_f64(want));
    assert_eq!(g.len(), w.len(), "{what}: length");
    let tol = tolerance(dtype);
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * (1.0 + b.abs());
        assert!(ok, "{what} {dtype:?} element {i}: rocm {a} vs cpu {b}");
    }
}

/// (name, layout, buffer length) cases over a 2-D shape.
fn layouts() -> Vec<(&'static str, Layout, usize)> {
    let (r, c) = (37usize, 129usize);
    let contiguous = Layout::contiguous(Shape::from((r, c)));
    let transposed = Layout::contiguous(Shape::from((c, r)))
        .transpose(0, 1)
        .unwrap();
    let narrowed = Layout::contiguous_with_offset(Shape::from((r, c)), 5)
        .narrow(1, 3, 100)
        .unwrap();
    let broadcast = Layout::new(Shape::from((r, c)), vec![0, 1], 0);
    let empty = Layout::contiguous(Shape::from((0, c)));
    vec![
        ("contiguous", contiguous, r * c),
        ("transposed", transposed, r * c),
        ("narrowed+offset", narrowed, r * c + 5),
        ("broadcast", broadcast, c),
        ("empty", empty, 0),
    ]
}

const ALL: [DType; 9] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::U8,
    DType::U32,
    DType::I16,
    DType::I32,
    DType::I64,
];

#[test]
#[ignore = "needs a HIP device"]
fn affine_matches_cpu_for_every_dtype_and_layout() {
    let dev = device();
    let mut cases = 0;
    for dtype in ALL {
        for (name, layout, len) in layouts() {
            let cpu = cpu_data(dtype, len, cases + 1);
            let gpu = RocmStorage::from_cpu(&dev, &cpu).unwrap();
            let (mul, add) = if dtype.is_float() {
                (1.5, -0.25)
            } else {
                (3.0, 2.0)
            };
            let want = cpu.affine(&layout, mul, add).unwrap();
            let got = gpu.affine(&layout, mul, add).unwrap().to_cpu().unwrap();
            assert_close(&format!("affine {name}"), dtype, &got, &want);
            cases += 1;
        }
    }
    assert_eq!(cases, 45);
}

fn unary_case<U: UnaryOpT>(dev: &RocmDevice, dtype: DType, seed: u64) -> usize {
    let mut n = 0;
    for (name, layout, len) in layouts() {
        let mut cpu = cpu_data(dtype, len, seed + n as u64);
        if U::NAME == "sqrt" {
            cpu = cpu
                .unary_impl::<Abs>(&Layout::contiguous(Shape::from(len)))
                .unwrap();
        }
        let gpu = RocmStorage::from_cpu(dev, &cpu).unwrap();
        let want = cpu.unary_impl::<U>(&layout).unwrap();
        let got = gpu.unary::<U>(&layout).unwrap().to_cpu().unwrap();
        assert_close(&format!("{} {name}", U::NAME), dtype, &got, &want);
        n += 1;
    }
    n
}

#[test]
#[ignore = "needs a HIP device"]
fn unary_ops_match_cpu() {
    let dev = device();
    let mut cases = 0;
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        cases += unary_case::<Exp>(&dev, dtype, 100);
        cases += unary_case::<Neg>(&dev, dtype, 200);
        cases += unary_case::<Sqr>(&dev, dtype, 300);
        cases += unary_case::<Sqrt>(&dev, dtype, 400);
        cases += unary_case::<Abs>(&dev, dtype, 500);
        cases += unary_case::<Gelu>(&dev, dtype, 600);
    }
    assert_eq!(cases, 4 * 6 * 5);
}

#[test]
#[ignore = "needs a HIP device"]
fn bad_layouts_are_errors_not_crashes() {
    let dev = device();
    let cpu = cpu_data(DType::F32, 10, 1);
    let gpu = RocmStorage::from_cpu(&dev, &cpu).unwrap();
    // A layout reaching past the buffer must be refused before any kernel runs.
    let too_big = Layout::contiguous(Shape::from((4, 4)));
    let e = gpu.affine(&too_big, 1.0, 0.0).unwrap_err().to_string();
    assert!(e.contains("reaches element"), "{e}");
    let offset = Layout::contiguous_with_offset(Shape::from(8), 5);
    assert!(gpu.unary::<Exp>(&offset).is_err());
}

#[test]
#[ignore = "needs a HIP device"]
fn seeded_random_numbers_are_reproducible() {
    let dev = device();
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        dev.set_seed(42);
        let a = dev
            .rand(10_000, dtype, (-1.0, 2.0), false)
            .unwrap()
            .to_cpu()
            .unwrap();
        let b = dev
            .rand(10_000, dtype, (-1.0, 2.0), false)
            .unwrap()
            .to_cpu()
            .unwrap();
        dev.set_seed(42);
        let c = dev
            .rand(10_000, dtype, (-1.0, 2.0), false)
            .unwrap()
            .to_cpu()
            .unwrap();
        let (a, b, c) = (as_f64(&a), as_f64(&b), as_f64(&c));
        assert_eq!(a, c, "{dtype:?}: same seed, same numbers");
        assert_ne!(a, b, "{dtype:?}: the next draw differs");
        assert!(
            a.iter().all(|&x| (-1.0..=2.0).contains(&x)),
            "{dtype:?} range"
        );
        let n = dev
            .rand(10_000, dtype, (3.0, 0.5), true)
            .unwrap()
            .to_cpu()
            .unwrap();
        let n = as_f64(&n);
        let m = n.iter().sum::<f64>() / n.len() as f64;
        assert!((m - 3.0).abs() < 0.05, "{dtype:?} normal mean {m}");
    }
    assert_eq!(dev.current_seed(), 42);
    assert!(dev.rand(4, DType::U32, (0.0, 1.0), false).is_err());
}

/// (name, lhs layout and buffer length, rhs layout and buffer length) over a (37, 129) shape,
/// with the broadcasts candle produces (stride 0).
/// A layout and the length of the buffer it addresses.
type Operand = (Layout, usize);

fn binary_layouts() -> Vec<(&'static str, Operand, Operand)> {
    let (r, c) = (37usize, 129usize);
    let cont = || (Layout::contiguous(Shape::from((r, c))), r * c);
    let transposed = (
        Layout::contiguous(Shape::from((c, r)))
            .transpose(0, 1)
            .unwrap(),
        r * c,
    );
    let row = (Layout::new(Shape::from((r, c)), vec![0, 1], 0), c);
    let col = (Layout::new(Shape::from((r, c)), vec![1, 0], 0), r);
    let narrowed = (
        Layout::contiguous_with_offset(Shape::from((r, c + 7)), 3)
            .narrow(1, 5, c)
            .unwrap(),
        r * (c + 7) + 3,
    );
    let empty = (Layout::contiguous(Shape::from((r, 0))), 0);
    vec![
        ("both contiguous", cont(), cont()),
        ("lhs transposed", transposed, cont()),
        ("rhs broadcast row", cont(), row),
        ("lhs broadcast column", col, narrowed.clone()),
        (
            "narrowed and transposed",
            narrowed,
            (
                Layout::contiguous(Shape::from((c, r)))
                    .transpose(0, 1)
                    .unwrap(),
                r * c,
            ),
        ),
        ("empty", empty.clone(), empty),
    ]
}

fn binary_case<B: BinaryOpT>(dev: &RocmDevice, dtype: DType, seed: u64) -> usize {
    let mut n = 0;
    for (name, (ll, ln), (rl, rn)) in binary_layouts() {
        let a = cpu_data(dtype, ln, seed + 2 * n as u64);
        let mut b = cpu_data(dtype, rn, seed + 2 * n as u64 + 1);
        if B::NAME == "div" {
            // Keep divisors away from zero.
            b = b
                .affine(&Layout::contiguous(Shape::from(rn)), 0.1, 4.5)
                .unwrap();
        }
        let (ga, gb) = (
            RocmStorage::from_cpu(dev, &a).unwrap(),
            RocmStorage::from_cpu(dev, &b).unwrap(),
        );
        let want = a.binary_impl::<B>(&b, &ll, &rl).unwrap();
        let got = ga.binary::<B>(&gb, &ll, &rl).unwrap().to_cpu().unwrap();
        assert_close(&format!("{} {name}", B::NAME), dtype, &got, &want);
        n += 1;
    }
    n
}

#[test]
#[ignore = "needs a HIP device"]
fn binary_ops_match_cpu_with_broadcasting_and_strides() {
    let dev = device();
    let mut cases = 0;
    let per = binary_layouts().len();
    for dtype in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::U8,
        DType::U32,
        DType::I64,
    ] {
        cases += binary_case::<Add>(&dev, dtype, 1000);
        cases += binary_case::<Mul>(&dev, dtype, 2000);
        cases += binary_case::<Maximum>(&dev, dtype, 3000);
        cases += binary_case::<Minimum>(&dev, dtype, 4000);
        if dtype.is_float() {
            cases += binary_case::<Sub>(&dev, dtype, 5000);
            cases += binary_case::<Div>(&dev, dtype, 6000);
        }
    }
    assert_eq!(cases, (7 * 4 + 4 * 2) * per);
}

#[test]
#[ignore = "needs a HIP device"]
fn binary_errors_are_typed() {
    let dev = device();
    let l = Layout::contiguous(Shape::from(8));
    let f = RocmStorage::from_cpu(&dev, &cpu_data(DType::F32, 8, 1)).unwrap();
    let d = RocmStorage::from_cpu(&dev, &cpu_data(DType::F64, 8, 2)).unwrap();
    let e = f.binary::<Add>(&d, &l, &l).unwrap_err().to_string();
    assert!(e.contains("different dtypes"), "{e}");
    let short = Layout::contiguous(Shape::from(4));
    assert!(f.binary::<Add>(&f, &l, &short).is_err(), "shape mismatch");
    // candle-kernels has no i16 binary kernels (neither has candle's CUDA backend).
    let i = RocmStorage::from_cpu(&dev, &cpu_data(DType::I16, 8, 3)).unwrap();
    let e = i.binary::<Add>(&i, &l, &l).unwrap_err().to_string();
    assert!(e.contains("badd_i16"), "{e}");
}

#[test]
#[ignore = "needs a HIP device"]
fn to_dtype_matches_cpu_for_every_pair_with_a_kernel() {
    let dev = device();
    let (mut matched, mut missing) = (0, Vec::new());
    for from in ALL {
        for to in ALL {
            for (name, layout, len) in layouts() {
                let mut cpu = cpu_data(from, len, matched as u64 + 7);
                if from.is_float() && !to.is_float() {
                    // Negative floats to unsigned integers are undefined behaviour in C++:
                    // convert values in [0, 4) only.
                    cpu = cpu
                        .unary_impl::<Abs>(&Layout::contiguous(Shape::from(len)))
                        .unwrap();
                }
                let gpu = RocmStorage::from_cpu(&dev, &cpu).unwrap();
                match gpu.to_dtype(&layout, to) {
                    Ok(got) => {
                        let want = cpu.to_dtype(&layout, to).unwrap();
                        let what = format!("cast {from:?}->{to:?} {name}");
                        assert_close(&what, to, &got.to_cpu().unwrap(), &want);
                        matched += 1;
                    }
                    Err(e) => {
                        let msg = e.to_string();
                        assert!(msg.contains("no kernel `cast_"), "{from:?}->{to:?}: {msg}");
                        if name == "contiguous" {
                            missing.push(format!("{}->{}", from.as_str(), to.as_str()));
                        }
                    }
                }
            }
        }
    }
    println!(
        "cast pairs without a candle-kernels kernel: {}",
        missing.join(" ")
    );
    assert!(matched > 0);
    for pair in [
        "f32->f16",
        "f16->f32",
        "bf16->f32",
        "f32->bf16",
        "u8->f32",
        "u32->f64",
        "f64->f32",
    ] {
        assert!(!missing.contains(&pair.to_string()), "{pair} is missing");
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn copy_strided_src_matches_cpu() {
    let dev = device();
    let mut cases = 0;
    for dtype in ALL {
        for (name, layout, len) in layouts() {
            let src_cpu = cpu_data(dtype, len, cases + 11);
            let el = layout.shape().elem_count();
            // Copy into the middle of a larger destination that already holds data.
            let dst_len = el + 9;
            let mut want = cpu_data(dtype, dst_len, cases + 12);
            let mut got = RocmStorage::from_cpu(&dev, &want).unwrap();
            let src = RocmStorage::from_cpu(&dev, &src_cpu).unwrap();
            src_cpu.copy_strided_src(&mut want, 4, &layout).unwrap();
            let r = src.copy_strided_src(&mut got, 4, &layout);
            if matches!(dtype, DType::I16 | DType::I32) && !layout.is_contiguous() && el > 0 {
                // candle-kernels has no ucopy_i16/ucopy_i32: a typed error naming the kernel.
                let e = r.unwrap_err().to_string();
                assert!(e.contains("no kernel `ucopy_i"), "{e}");
                cases += 1;
                continue;
            }
            r.unwrap();
            assert_close(
                &format!("copy_strided_src {name}"),
                dtype,
                &got.to_cpu().unwrap(),
                &want,
            );
            cases += 1;
        }
    }
    assert_eq!(cases, 45);
    // A destination too small is an error, not an out-of-bounds write.
    let src = RocmStorage::from_cpu(&dev, &cpu_data(DType::F32, 16, 1)).unwrap();
    let mut small = RocmStorage::from_cpu(&dev, &cpu_data(DType::F32, 8, 2)).unwrap();
    let l = Layout::contiguous(Shape::from(16));
    assert!(src.copy_strided_src(&mut small, 0, &l).is_err());
    let mut other = RocmStorage::from_cpu(&dev, &cpu_data(DType::F64, 16, 3)).unwrap();
    assert!(
        src.copy_strided_src(&mut other, 0, &l).is_err(),
        "dtype mismatch"
    );
}
