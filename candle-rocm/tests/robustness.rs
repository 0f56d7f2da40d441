//! The backend on bad input, at scale and over time: every misuse is an error (never a panic
//! or an out-of-bounds access), out-of-range indices are contained on the device, tensors
//! over 2^24 elements match the CPU, `BackendDevice` behaves (seeded randomness, zeros,
//! uploads), and device memory returns to its baseline. Ignored in CI (no GPU); the
//! HIP-on-CUDA harness runs it, under compute-sanitizer too.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::op::{self, ReduceOp};
use candle_core::{CpuStorage, DType, Layout, Shape};
use candle_rocm::ops::conv::ConvParams;
use candle_rocm::{RocmDevice, RocmStorage};
use common::*;

/// Held by every test here: they run one at a time, so device-wide free memory measured by
/// `device_memory_returns_to_baseline` sees no other test's tensors.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn upload(dev: &RocmDevice, cpu: &CpuStorage) -> RocmStorage {
    dev.storage_from_cpu_storage(cpu).unwrap()
}

fn f32s(dev: &RocmDevice, v: &[f32]) -> RocmStorage {
    dev.storage_from_slice(v).unwrap()
}

/// `r` is an error whose message contains `needle`.
fn assert_err<T>(what: &str, r: candle_core::Result<T>, needle: &str) {
    match r {
        Ok(_) => panic!("{what}: expected an error"),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(needle),
                "{what}: error {msg:?} lacks {needle:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn bad_input_is_an_error_never_a_panic() {
    let _serial = serial();
    let dev = device();
    let a = f32s(&dev, &[1.0; 12]);
    let l = Layout::contiguous((3, 4));
    // Mismatched shapes, dtypes and devices.
    let short = Layout::contiguous((4, 3));
    assert_err("shape", a.binary_impl::<op::Add>(&a, &l, &short), "differ");
    let h = dev.storage_from_slice(&[half::f16::ONE; 12]).unwrap();
    assert_err(
        "dtype",
        a.binary_impl::<op::Add>(&h, &l, &l),
        "different dtypes",
    );
    assert_err(
        "cmp dtype",
        a.cmp(op::CmpOp::Eq, &h, &l, &l),
        "different dtypes",
    );
    let other = device();
    let b = f32s(&other, &[1.0; 12]);
    assert_err("device", a.binary_impl::<op::Add>(&b, &l, &l), "device");
    assert_err(
        "matmul device",
        a.matmul(&b, (1, 3, 3, 4), &l, &short),
        "device",
    );
    // Layouts that reach past the buffer.
    let past = Layout::contiguous_with_offset((3, 4), 1);
    assert_err("layout", a.affine(&past, 1.0, 0.0), "reaches element");
    assert_err(
        "unary layout",
        a.unary_impl::<op::Exp>(&past),
        "reaches element",
    );
    let mut dst = f32s(&dev, &[0.0; 4]);
    assert_err(
        "copy_strided_src",
        a.copy_strided_src(&mut dst, 0, &l),
        "reaches element 12 of a buffer of 4",
    );
    assert_err("copy2d", a.copy2d(&mut dst, 3, 4, 4, 4, 0, 0), "do not fit");
    // Reductions over dims the tensor does not have; min of nothing.
    assert_err(
        "reduce dim",
        a.reduce_op(ReduceOp::Sum, &l, &[2]),
        "do not fit",
    );
    assert_err(
        "reduce twice",
        a.reduce_op(ReduceOp::Sum, &l, &[1, 1]),
        "do not fit",
    );
    let empty = Layout::contiguous((0, 4));
    assert_err(
        "min of empty",
        a.reduce_op(ReduceOp::Min, &empty, &[0]),
        "empty",
    );
    // Conv and pool ranks, and parameters that disagree with the operands.
    let k = f32s(&dev, &[1.0; 8]);
    let p1 = ConvParams::from_pairs(&[
        ("b_size", 1),
        ("l_in", 4),
        ("c_out", 2),
        ("c_in", 3),
        ("k_size", 2),
        ("padding", 0),
        ("stride", 1),
        ("dilation", 1),
    ]);
    let kl = Layout::contiguous((2, 2, 2));
    assert_err(
        "conv1d rank",
        a.conv1d_with(&l, &k, &kl, &p1),
        "must have 3 dims",
    );
    let l3 = Layout::contiguous((1, 3, 4));
    assert_err("conv1d c_in", a.conv1d_with(&l3, &k, &kl, &p1), "c_in");
    assert_err(
        "conv1d missing param",
        a.conv1d_with(&l3, &k, &kl, &ConvParams::default()),
        "missing",
    );
    let p_zero_stride = ConvParams::from_pairs(&[
        ("b_size", 1),
        ("l_in", 4),
        ("c_out", 2),
        ("c_in", 2),
        ("k_size", 2),
        ("padding", 0),
        ("stride", 0),
        ("dilation", 1),
    ]);
    let l3b = Layout::contiguous((1, 2, 4));
    assert_err(
        "conv1d stride 0",
        a.conv1d_with(&l3b, &k, &kl, &p_zero_stride),
        "positive",
    );
    let l4 = Layout::contiguous((1, 1, 3, 4));
    assert_err(
        "pool rank",
        a.max_pool2d(&l, (2, 2), (1, 1)),
        "must have 4 dims",
    );
    assert_err(
        "pool too big",
        a.max_pool2d(&l4, (5, 5), (1, 1)),
        "does not fit",
    );
    assert_err(
        "pool stride 0",
        a.avg_pool2d(&l4, (2, 2), (0, 1)),
        "positive",
    );
    assert_err(
        "upsample rank",
        a.upsample_nearest2d(&l, 4, 4),
        "must have 4 dims",
    );
    assert_err(
        "upsample1d rank",
        a.upsample_nearest1d(&l4, 4),
        "must have 3 dims",
    );
    // Index dtypes and shapes.
    let fids = f32s(&dev, &[0.0, 1.0]);
    let il = Layout::contiguous(2);
    assert_err(
        "ids dtype",
        a.index_select(&fids, &l, &il, 0),
        "unsupported dtype",
    );
    let ids = dev.storage_from_slice(&[0u32, 1]).unwrap();
    assert_err(
        "index dim",
        a.index_select(&ids, &l, &il, 5),
        "out of range",
    );
    let il2 = Layout::contiguous((1, 2));
    assert_err("ids rank", a.index_select(&ids, &l, &il2, 0), "rank");
    assert_err("gather shape", a.gather(&l, &ids, &il, 0), "must agree");
    // Matmul layouts rocBLAS cannot express, and integer matmul.
    let odd = Layout::new(Shape::from((1, 3, 4)), vec![12, 1, 3], 0);
    assert_err(
        "matmul layout",
        a.matmul(
            &a,
            (1, 3, 3, 4),
            &odd,
            &Layout::new(Shape::from((1, 4, 3)), vec![12, 1, 5], 0),
        ),
        "rocBLAS cannot",
    );
    let u = dev.storage_from_slice(&[1u32; 12]).unwrap();
    assert_err(
        "matmul u32",
        u.matmul(
            &u,
            (1, 3, 3, 4),
            &Layout::contiguous((1, 3, 4)),
            &Layout::contiguous((1, 4, 3)),
        ),
        "not available",
    );
    // An allocation larger than the device.
    let huge = Shape::from(1usize << 45);
    assert_err(
        "oom",
        dev.zeros_impl(&huge, DType::F32),
        "out of device memory",
    );
    // where_cond with a float condition.
    assert_err(
        "where dtype",
        a.where_cond(&l, &a, &l, &a, &l),
        "unsupported dtype",
    );
    // const_set with a scalar of another dtype.
    let mut c = f32s(&dev, &[0.0; 12]);
    assert_err(
        "const_set dtype",
        c.const_set(candle_core::scalar::Scalar::U8(1), &l),
        "different dtypes",
    );
    // Candle's dummy MX types (raw bytes on the CPU): the typed error Candle's CUDA backend
    // gives.
    for dummy in [DType::F6E2M3, DType::F6E3M2, DType::F4, DType::F8E8M0] {
        assert_err(
            "dummy zeros",
            dev.zeros_impl(&Shape::from(4), dummy),
            "not available",
        );
        assert_err("dummy cast", a.to_dtype(&l, dummy), "not available");
    }
    assert_err(
        "dummy upload",
        dev.storage_from_cpu_storage(&CpuStorage::F4(vec![0; 4])),
        "not available",
    );
    // The device still works after all of that.
    let r = a.affine(&l, 2.0, 1.0).unwrap().to_cpu_storage().unwrap();
    assert_close("after errors", &r, &CpuStorage::F32(vec![3.0; 12]), 0.0);
}

#[test]
#[ignore = "needs a HIP device"]
fn out_of_range_indices_stay_on_the_device() {
    let _serial = serial();
    let dev = device();
    let src: Vec<f32> = (0..12).map(|x| x as f32 + 1.0).collect();
    let s = f32s(&dev, &src);
    let l = Layout::contiguous((3, 4));
    // Index 7 and -1 do not exist in a dim of 3: they read as zero.
    let ids = dev.storage_from_slice(&[2i64, 7, -1, 0]).unwrap();
    let il = Layout::contiguous(4);
    let got = s
        .index_select(&ids, &l, &il, 0)
        .unwrap()
        .to_cpu_storage()
        .unwrap();
    let mut want = vec![9.0, 10.0, 11.0, 12.0];
    want.extend([0.0; 8]);
    want.extend([1.0, 2.0, 3.0, 4.0]);
    assert_close("index_select oob", &got, &CpuStorage::F32(want), 0.0);
    let gids = dev.storage_from_slice(&[0u32, 9, 1, 1_000_000]).unwrap();
    let gl = Layout::contiguous((1, 4));
    let got = s
        .gather(&l, &gids, &gl, 0)
        .unwrap()
        .to_cpu_storage()
        .unwrap();
    assert_close(
        "gather oob",
        &got,
        &CpuStorage::F32(vec![1.0, 0.0, 7.0, 0.0]),
        0.0,
    );
    // Writes with out-of-range indices are dropped.
    let mut d = f32s(&dev, &[0.0; 12]);
    let upd = f32s(&dev, &[5.0; 4]);
    let sids = dev.storage_from_slice(&[3u8, 200, 0, 255]).unwrap();
    d.scatter_set(&l, &sids, &gl, &upd, &gl, 0).unwrap();
    d.scatter_add_set(&l, &sids, &gl, &upd, &gl, 0).unwrap();
    let got = d.to_cpu_storage().unwrap();
    let mut want = vec![0.0; 12];
    want[2] = 10.0;
    assert_close("scatter oob", &got, &CpuStorage::F32(want), 0.0);
    let aids = dev.storage_from_slice(&[5u32, 1]).unwrap();
    let al = Layout::contiguous(2);
    let add = f32s(&dev, &[1.0; 8]);
    let got = s
        .index_add(&l, &aids, &al, &add, &Layout::contiguous((2, 4)), 0)
        .unwrap()
        .to_cpu_storage()
        .unwrap();
    let mut want = src.clone();
    for x in &mut want[4..8] {
        *x += 1.0;
    }
    assert_close("index_add oob", &got, &CpuStorage::F32(want), 0.0);
    dev.synchronize().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn tensors_over_2_pow_24_elements() {
    let _serial = serial();
    let dev = device();
    let n = (1usize << 24) + 1031;
    let mut rng = Rng::new(24);
    let c = random_data(&mut rng, DType::F32, n, Values::Moderate);
    let g = upload(&dev, &c);
    let l = Layout::contiguous(n);
    assert_close(
        "affine",
        &g.affine(&l, 0.5, 1.0).unwrap().to_cpu_storage().unwrap(),
        &c.affine(&l, 0.5, 1.0).unwrap(),
        1.0,
    );
    assert_close(
        "exp",
        &g.unary_impl::<op::Exp>(&l)
            .unwrap()
            .to_cpu_storage()
            .unwrap(),
        &c.unary_impl::<op::Exp>(&l).unwrap(),
        4.0,
    );
    assert_close(
        "add",
        &g.binary_impl::<op::Add>(&g, &l, &l)
            .unwrap()
            .to_cpu_storage()
            .unwrap(),
        &c.binary_impl::<op::Add>(&c, &l, &l).unwrap(),
        1.0,
    );
    assert_close(
        "to f16",
        &g.to_dtype(&l, DType::F16)
            .unwrap()
            .to_cpu_storage()
            .unwrap(),
        &c.to_dtype(&l, DType::F16).unwrap(),
        0.0,
    );
    // A transposed copy of a (4099, 4097) view: strided indices beyond 2^24.
    let (r, k) = (4099usize, 4097usize);
    let t = Layout::contiguous((k, r)).transpose(0, 1).unwrap();
    let c2 = random_data(&mut rng, DType::F32, r * k, Values::Moderate);
    let g2 = upload(&dev, &c2);
    let mut out_c = CpuStorage::F32(vec![0.0; r * k]);
    let mut out_g = dev.zeros_impl(&Shape::from(r * k), DType::F32).unwrap();
    c2.copy_strided_src(&mut out_c, 0, &t).unwrap();
    g2.copy_strided_src(&mut out_g, 0, &t).unwrap();
    assert_close(
        "transposed copy",
        &out_g.to_cpu_storage().unwrap(),
        &out_c,
        0.0,
    );
    // Row sums and the max over the whole tensor.
    let rl = Layout::contiguous((r, k));
    let sums = g2
        .reduce_op(ReduceOp::Sum, &rl, &[1])
        .unwrap()
        .to_cpu_storage()
        .unwrap();
    assert_close(
        "row sums",
        &sums,
        &c2.reduce_op(ReduceOp::Sum, &rl, &[1]).unwrap(),
        4.0 * k as f64,
    );
    let mx = g2
        .reduce_op(ReduceOp::Max, &rl, &[0])
        .unwrap()
        .to_cpu_storage()
        .unwrap();
    assert_close(
        "max",
        &mx,
        &c2.reduce_op(ReduceOp::Max, &rl, &[0]).unwrap(),
        0.0,
    );
    let am = g
        .reduce_op(ReduceOp::ArgMax, &l, &[0])
        .unwrap()
        .to_cpu_storage()
        .unwrap();
    // Equal maxima may sit at several positions: the reported one must hold the maximum.
    let (CpuStorage::U32(am), CpuStorage::F32(v)) = (&am, &c) else {
        panic!("argmax dtype")
    };
    let max = v.iter().copied().fold(f32::MIN, f32::max);
    assert_eq!(v[am[0] as usize], max, "argmax points at {}", am[0]);
}

#[test]
#[ignore = "needs a HIP device"]
fn backend_device_api() {
    let _serial = serial();
    let dev = <RocmDevice as BackendDevice>::new(0).unwrap();
    assert!(BackendDevice::same_device(&dev, &dev.clone()));
    assert!(!BackendDevice::same_device(&dev, &device()));
    assert!(matches!(
        dev.location(),
        candle_core::DeviceLocation::Cuda { gpu_id: 0 }
    ));
    for dtype in DTYPES {
        let z = dev.zeros_impl(&Shape::from((3, 5)), dtype).unwrap();
        assert_eq!(z.dtype(), dtype);
        assert!(
            as_f64(&z.to_cpu_storage().unwrap())
                .iter()
                .all(|&x| x == 0.0),
            "{dtype:?}"
        );
        // SAFETY: only the length and dtype of the uninitialised storage are read.
        let u = unsafe { dev.alloc_uninit(&Shape::from(7), dtype) }.unwrap();
        assert_eq!((u.dtype(), u.len()), (dtype, 7));
        let mut rng = Rng::new(7);
        let c = random_data(&mut rng, dtype, 33, Values::Special);
        let owned = dev.storage_from_cpu_storage_owned(c.clone()).unwrap();
        assert_close("owned upload", &owned.to_cpu_storage().unwrap(), &c, 0.0);
    }
    let s = dev.storage_from_slice(&[1u8, 2, 3]).unwrap();
    assert_close(
        "slice upload",
        &s.to_cpu_storage().unwrap(),
        &CpuStorage::U8(vec![1, 2, 3]),
        0.0,
    );
    // Seeded randomness: the same seed gives the same numbers, the sequence moves on.
    let shape = Shape::from(10_007);
    for dtype in FLOATS {
        BackendDevice::set_seed(&dev, 42).unwrap();
        assert_eq!(dev.get_current_seed().unwrap(), 42);
        let a = dev
            .rand_uniform(&shape, dtype, -1.0, 3.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        let b = dev
            .rand_uniform(&shape, dtype, -1.0, 3.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        BackendDevice::set_seed(&dev, 42).unwrap();
        let a2 = dev
            .rand_uniform(&shape, dtype, -1.0, 3.0)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        assert_close("same seed", &a2, &a, 0.0);
        assert_ne!(as_f64(&a), as_f64(&b), "{dtype:?}: the second draw differs");
        assert!(
            as_f64(&a).iter().all(|&x| (-1.0..=3.0).contains(&x)),
            "{dtype:?}"
        );
        let nrm = dev
            .rand_normal(&shape, dtype, 2.0, 0.5)
            .unwrap()
            .to_cpu_storage()
            .unwrap();
        let v = as_f64(&nrm);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(
            (mean - 2.0).abs() < 0.05 && (var.sqrt() - 0.5).abs() < 0.05,
            "{dtype:?}: {mean} {var}"
        );
    }
    assert_err(
        "rand u8",
        dev.rand_uniform(&shape, DType::U8, 0.0, 1.0),
        "not available",
    );
    dev.synchronize().unwrap();
}

#[test]
#[ignore = "needs a HIP device"]
fn device_memory_returns_to_baseline() {
    let _serial = serial();
    let dev = device();
    let round = |dev: &RocmDevice| {
        let mut rng = Rng::new(5);
        let c = random_data(&mut rng, DType::F32, 1 << 20, Values::Small);
        let g = upload(dev, &c);
        let l = Layout::contiguous((1024, 1024));
        let m = g.matmul(&g, (1, 1024, 1024, 1024), &l, &l).unwrap();
        let e = m.unary_impl::<op::Exp>(&l).unwrap();
        let s = e.reduce_op(ReduceOp::Sum, &l, &[1]).unwrap();
        let h = e.to_dtype(&l, DType::BF16).unwrap();
        let ids = dev.storage_from_slice(&[3u32, 1, 4, 1, 5]).unwrap();
        let sel = h.index_select(&ids, &l, &Layout::contiguous(5), 0).unwrap();
        sel.to_cpu_storage().unwrap();
        s.to_cpu_storage().unwrap();
    };
    round(&dev); // loads modules and creates the rocBLAS handle
    dev.synchronize().unwrap();
    dev.device().allocator().trim().unwrap();
    let (before, total) = dev.device().mem_info().unwrap();
    for _ in 0..5 {
        round(&dev);
    }
    dev.synchronize().unwrap();
    let cached = dev.device().allocator().stats();
    dev.device().allocator().trim().unwrap();
    let (after, _) = dev.device().mem_info().unwrap();
    let line = format!(
        "device memory free: before {before} after {after} of {total} bytes; \
         cache before trim {cached:?}"
    );
    eprintln!("{line}");
    append_log("memory", &line);
    assert!(
        after + (2 << 20) >= before,
        "leaked {} bytes",
        before.saturating_sub(after)
    );
}
