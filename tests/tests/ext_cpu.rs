//! The patched candle-core's out-of-tree backend slot, on the CPU (these tests run in CI).
//!
//! `candle_ext_cpu` puts candle's own CPU backend behind `Device::Ext`, so every result here
//! must equal the plain CPU's bit for bit (but for candle-nn's fused batch norm and group norm,
//! whose CPU forms compute in f64 and round once where the composed ops round after each
//! step): what is tested is the way there
//! (candle-core's `Ext` match arms, the blanket adapters of `candle_core::ext`, the fused-op
//! hooks and their CPU fallback, the defaults of `ExtQStorage` in `ext_cpu/quantized.rs`), not
//! the arithmetic.

use candle_core::{DType, Device, Error, IndexOp, Module, Result, Tensor, Var, D};
use candle_ext_cpu::{ext_cpu, ext_cpu_device, ext_cpu_device_strict, ExtCpuDevice, LOCATION};
use candle_rocm_tests::{max_abs_diff, normal, rng, root_cause};

#[path = "ext_cpu/quantized.rs"]
mod quantized;

/// A tensor of `shape` with normal values (standard deviation 1) from `seed`, made on the CPU
/// and moved to `dev`, so both devices see the same bits.
fn input(dev: &Device, seed: u64, shape: &[usize]) -> Result<Tensor> {
    let n = shape.iter().product();
    Tensor::from_vec(normal(&mut rng(seed), n, 1.0), shape, &Device::Cpu)?.to_device(dev)
}

/// `n` indices below `bound` from `seed`, as u32 on `dev`.
fn indices(dev: &Device, seed: u64, shape: &[usize], bound: u32) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let ids = normal(&mut rng(seed), n, 1e3)
        .into_iter()
        .map(|v| (v.abs() as u32) % bound)
        .collect::<Vec<_>>();
    Tensor::from_vec(ids, shape, dev)
}

/// The [`ExtCpuDevice`] behind `dev` (which must be one).
fn ext(dev: &Device) -> &ExtCpuDevice {
    match ext_cpu(dev) {
        Some(d) => d,
        None => panic!("{:?} is not an ext-cpu device", dev.location()),
    }
}

/// Runs `f` on the CPU and on a new ext-cpu device; the results must have the same shape and
/// dtype and equal values (NaNs in the same places), the ext-cpu ones on the ext-cpu device.
/// Returns the device, for what it recorded.
fn parity(what: &str, f: impl Fn(&Device) -> Result<Vec<Tensor>>) -> Result<Device> {
    let dev = ext_cpu_device();
    let want = f(&Device::Cpu)?;
    let got = f(&dev)?;
    assert_eq!(want.len(), got.len(), "{what}: number of results");
    for (i, (got, want)) in got.iter().zip(&want).enumerate() {
        assert_eq!(got.device().location(), LOCATION, "{what}[{i}]: device");
        assert_eq!(got.dtype(), want.dtype(), "{what}[{i}]: dtype");
        assert_eq!(got.dims(), want.dims(), "{what}[{i}]: shape");
        let diff = max_abs_diff(&got.to_device(&Device::Cpu)?, want)?;
        assert!(diff == 0.0, "{what}[{i}]: max |ext - cpu| = {diff:e}");
    }
    Ok(dev)
}

/// `Tensor::cat` of inputs laid out for 2-D copies reaches the backend as one batched call
/// (`ExtStorage::copy2d_many`) with one copy per input, and gives the CPU's result: a
/// grouped-query `repeat_kv` (one tensor eight times, dim 2), a KV-cache append, inputs with
/// start offsets and row strides (narrowed), and dtypes of 1, 2, 4 and 8 bytes. Inputs that
/// need a strided copy (a transposed one) take the other path, and no batch is recorded.
#[test]
fn cat_queues_its_copies_in_one_batched_call() -> Result<()> {
    let dev = parity("cat batched", |d| {
        let kv = input(d, 31, &[1, 4, 5, 64])?;
        let new = input(d, 32, &[1, 4, 1, 64])?;
        let wide = input(d, 33, &[3, 10, 7])?;
        let mut out = vec![
            Tensor::cat(&[&kv; 8], 2)?.reshape((1, 32, 5, 64))?,
            Tensor::cat(&[&kv, &new], 2)?,
            Tensor::cat(&[&wide.narrow(1, 2, 5)?, &wide.narrow(1, 0, 3)?], 1)?,
            Tensor::cat(&[&wide.narrow(2, 1, 4)?, &wide.narrow(2, 0, 2)?], 2)?,
        ];
        for dtype in [DType::U8, DType::F16, DType::F64] {
            let x = wide.to_dtype(dtype)?;
            out.push(Tensor::cat(&[&x, &x, &x], 1)?);
        }
        out.push(Tensor::cat(&[&wide.t()?, &wide.t()?], 0)?);
        Ok(out)
    })?;
    assert_eq!(ext(&dev).copy2d_many(), vec![8, 2, 2, 2, 3, 3, 3]);
    Ok(())
}

#[test]
fn device_identity_and_transfers() -> Result<()> {
    let dev = ext_cpu_device();
    assert_eq!(dev.location(), LOCATION);
    assert_eq!(dev.location().to_string(), "ext-cpu:0");
    assert!(dev.is_ext() && !dev.is_cpu() && !dev.is_cuda() && !dev.is_metal());
    assert!(dev.same_device(&ext_cpu_device()));
    assert!(!dev.same_device(&Device::Cpu) && !Device::Cpu.same_device(&dev));
    assert!(dev.supports_bf16());
    dev.synchronize()?;

    // Host -> ext -> host, with an offset and strides kept.
    let cpu = input(&Device::Cpu, 1, &[4, 6])?;
    let view = cpu.t()?.narrow(0, 1, 4)?;
    let on_ext = view.to_device(&dev)?;
    assert_eq!(on_ext.device().location(), LOCATION);
    assert_eq!(on_ext.to_vec2::<f32>()?, view.to_vec2::<f32>()?);
    // Another handle of the same device: no copy, and ext -> ext through the host works too.
    let again = on_ext.to_device(&ext_cpu_device())?;
    assert_eq!(again.to_vec2::<f32>()?, view.to_vec2::<f32>()?);

    // Allocation on the device.
    let z = Tensor::zeros((2, 3), DType::BF16, &dev)?;
    assert_eq!(z.device().location(), LOCATION);
    assert_eq!(z.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?, 0.0);
    let o = Tensor::ones((2, 3), DType::I64, &dev)?;
    assert_eq!(o.sum_all()?.to_scalar::<i64>()?, 6);
    let a = Tensor::arange(0u32, 12, &dev)?.reshape((3, 4))?;
    assert_eq!(a.i((2, 3))?.to_scalar::<u32>()?, 11);
    let e = Tensor::eye(3, DType::F64, &dev)?;
    assert_eq!(e.sum_all()?.to_scalar::<f64>()?, 3.0);

    // Random values land on the device; the CPU backend cannot be seeded, nor can this one.
    let u = Tensor::rand(-1f32, 1f32, (64,), &dev)?;
    assert_eq!(u.device().location(), LOCATION);
    let (lo, hi) = (u.min(0)?.to_scalar::<f32>()?, u.max(0)?.to_scalar::<f32>()?);
    assert!(
        (-1.0..1.0).contains(&lo) && (-1.0..1.0).contains(&hi),
        "{lo} {hi}"
    );
    let n = Tensor::randn(0f64, 1f64, (8, 8), &dev)?;
    assert_eq!((n.dims(), n.dtype()), (&[8, 8][..], DType::F64));
    assert!(dev.set_seed(42).is_err());
    Ok(())
}

#[test]
fn unary_ops_by_name() -> Result<()> {
    // Every unary op the slot's adapter dispatches by name, on f32, f16 and bf16.
    let dev = parity("unary", |d| {
        let mut out = vec![];
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let x = input(d, 2, &[3, 5])?.to_dtype(dtype)?;
            let pos = x.abs()?.affine(1.0, 0.5)?;
            out.extend([
                x.exp()?,
                pos.log()?,
                x.sin()?,
                x.cos()?,
                x.tanh()?,
                x.neg()?,
                pos.recip()?,
                x.sqr()?,
                pos.sqrt()?,
                x.gelu()?,
                x.gelu_erf()?,
                x.erf()?,
                x.relu()?,
                x.silu()?,
                x.abs()?,
                x.ceil()?,
                x.floor()?,
                x.round()?,
                x.sign()?,
                x.affine(2.5, -1.0)?,
                pos.powf(1.7)?,
                x.elu(0.3)?,
                // Strided: a transposed view.
                x.t()?.exp()?,
            ]);
        }
        Ok(out)
    })?;
    assert_eq!(ext(&dev).fallbacks(), Vec::<String>::new());
    Ok(())
}

#[test]
fn binary_ops_broadcasting_and_comparisons() -> Result<()> {
    parity("binary", |d| {
        let a = input(d, 3, &[4, 5])?;
        let b = input(d, 4, &[4, 5])?;
        let row = input(d, 5, &[5])?;
        let col = input(d, 6, &[4, 1])?;
        let bt = input(d, 7, &[5, 4])?.t()?;
        let ai = a.affine(10.0, 0.0)?.to_dtype(DType::I64)?;
        let bi = b.affine(10.0, 0.0)?.to_dtype(DType::I64)?;
        Ok(vec![
            (&a + &b)?,
            (&a - &b)?,
            (&a * &b)?,
            (&a / &b)?,
            a.maximum(&b)?,
            a.minimum(&b)?,
            a.broadcast_add(&row)?,
            a.broadcast_mul(&col)?,
            col.broadcast_sub(&row)?,
            a.broadcast_div(&col)?,
            (&a + &bt)?,
            (&ai * &bi)?,
            ai.maximum(&bi)?,
            a.eq(&b)?,
            a.ne(&a)?,
            a.lt(&b)?,
            a.le(&bt)?,
            a.broadcast_gt(&row)?,
            ai.ge(&bi)?,
            (&a + 1.5)?,
            (&a * 0.5)?,
            a.to_dtype(DType::F16)?.add(&b.to_dtype(DType::F16)?)?,
        ])
    })?;
    Ok(())
}

#[test]
fn reductions() -> Result<()> {
    parity("reduce", |d| {
        let x = input(d, 8, &[3, 4, 5])?;
        let xt = x.transpose(0, 2)?;
        let xi = x.affine(10.0, 0.0)?.to_dtype(DType::I64)?;
        Ok(vec![
            x.sum_keepdim(2)?,
            x.sum(1)?,
            x.sum_all()?,
            x.mean(D::Minus1)?,
            x.max(0)?,
            x.min_keepdim(1)?,
            x.argmax(2)?,
            x.argmin_keepdim(0)?,
            xt.sum(1)?,
            xt.max(2)?,
            xi.sum(1)?,
            xi.max(2)?,
            x.to_dtype(DType::BF16)?.sum(2)?,
            x.var_keepdim(2)?,
        ])
    })?;
    Ok(())
}

#[test]
fn matmul_conv_pool_upsample() -> Result<()> {
    parity("matmul/conv", |d| {
        let a = input(d, 9, &[2, 3, 8])?;
        let b = input(d, 10, &[2, 8, 5])?;
        let w = input(d, 11, &[5, 8])?;
        let img = input(d, 12, &[2, 3, 9, 9])?;
        let k2 = input(d, 13, &[4, 3, 3, 3])?;
        let kt2 = input(d, 14, &[3, 2, 3, 3])?;
        let seq = input(d, 15, &[2, 3, 16])?;
        let k1 = input(d, 16, &[4, 3, 5])?;
        let kt1 = input(d, 17, &[3, 2, 3])?;
        Ok(vec![
            a.matmul(&b)?,
            a.broadcast_matmul(&w.t()?)?,
            a.i(0)?.matmul(&w.t()?)?,
            a.to_dtype(DType::F16)?
                .matmul(&b.to_dtype(DType::F16)?)?
                .to_dtype(DType::F32)?,
            a.to_dtype(DType::F64)?.matmul(&b.to_dtype(DType::F64)?)?,
            img.conv2d(&k2, 1, 2, 1, 1)?,
            img.conv2d(&k2, 0, 1, 2, 1)?,
            img.conv_transpose2d(&kt2, 1, 0, 2, 1)?,
            seq.conv1d(&k1, 2, 1, 1, 1)?,
            seq.conv_transpose1d(&kt1, 0, 0, 1, 1, 1)?,
            img.avg_pool2d(3)?,
            img.max_pool2d((2, 2))?,
            seq.upsample_nearest1d(24)?,
            img.upsample_nearest2d(12, 14)?,
            img.upsample_bilinear2d(13, 7, false)?,
            img.upsample_bilinear2d(13, 7, true)?,
        ])
    })?;
    Ok(())
}

#[test]
fn indexing_where_cat_copies_and_casts() -> Result<()> {
    parity("indexing", |d| {
        let x = input(d, 18, &[6, 5])?;
        let ids = indices(d, 19, &[4], 6)?;
        let gather_ids = indices(d, 20, &[6, 3], 5)?;
        let src = input(d, 21, &[6, 3])?;
        let add_src = input(d, 22, &[4, 5])?;
        let mask = x.ge(0.0)?;
        let zeros = x.zeros_like()?;

        let set = x.copy()?;
        set.scatter_set(&gather_ids, &src, 1)?;
        let add_set = x.copy()?;
        add_set.scatter_add_set(&gather_ids, &src, 1)?;
        let slice = Tensor::zeros((8, 5), DType::F32, d)?;
        slice.slice_set(&x, 0, 1)?;
        let filled = Tensor::zeros((3, 4), DType::F32, d)?;
        filled.i((.., 1..3))?.const_set(2.5f32.into())?;

        let mut out = vec![
            x.index_select(&ids, 0)?,
            x.index_select(&ids.to_dtype(DType::I64)?, 1)?,
            x.gather(&gather_ids, 1)?,
            x.scatter(&gather_ids, &src, 1)?,
            x.scatter_add(&gather_ids, &src, 1)?,
            set,
            add_set,
            x.index_add(&ids, &add_src, 0)?,
            mask.where_cond(&x, &zeros)?,
            mask.to_dtype(DType::U32)?
                .where_cond(&x.t()?.t()?, &x.neg()?)?,
            Tensor::cat(&[&x, &x.neg()?], 0)?,
            Tensor::cat(&[&x, &x.affine(2.0, 1.0)?], 1)?,
            Tensor::cat(&[&x.t()?, &x.t()?], 1)?,
            Tensor::stack(&[&x, &x], 2)?,
            x.t()?.contiguous()?,
            x.narrow(1, 1, 3)?.contiguous()?,
            x.i((1..4, 2))?.contiguous()?,
            x.pad_with_zeros(1, 2, 1)?,
            x.slice_scatter(&add_src.i(0..2)?, 0, 3)?,
            slice,
            filled,
        ];
        for dtype in [
            DType::U8,
            DType::U32,
            DType::I64,
            DType::BF16,
            DType::F16,
            DType::F64,
        ] {
            let c = x.affine(7.0, 0.0)?.to_dtype(dtype)?;
            out.push(c.clone());
            out.push(c.to_dtype(DType::F32)?);
        }
        Ok(out)
    })?;
    Ok(())
}

#[test]
fn candle_nn_fused_ops_handled_or_fallen_back() -> Result<()> {
    use candle_nn::ops;
    use candle_nn::rotary_emb;

    // Handled by the backend's `ext_fused` (f32): no fallback.
    let dev = parity("fused, handled", |d| {
        let x = input(d, 23, &[3, 4, 8])?;
        let alpha = input(d, 24, &[8])?;
        Ok(vec![
            ops::sigmoid(&x)?,
            ops::sigmoid(&x.to_dtype(DType::F64)?)?,
            ops::rms_norm(&x, &alpha, 1e-5)?,
        ])
    })?;
    assert_eq!(ext(&dev).fallbacks(), Vec::<String>::new());
    assert_eq!(ext(&dev).fused(), ["sigmoid", "sigmoid", "rms-norm"]);

    // Not handled (other ops, other dtypes, a strided operand): the slot's CPU fallback.
    let dev = parity("fused, fallback", |d| {
        let x = input(d, 25, &[2, 3, 4, 8])?;
        let alpha = input(d, 26, &[8])?;
        let beta = input(d, 27, &[8])?;
        let cos = input(d, 28, &[4, 4])?;
        let sin = input(d, 29, &[4, 4])?;
        let h = x.to_dtype(DType::F16)?;
        let residual = beta.broadcast_as(x.shape())?.contiguous()?;
        let (sum, normed) = ops::add_rms_norm(&x, &residual, &alpha, 1e-5)?;
        Ok(vec![
            ops::sigmoid(&h)?,
            ops::softmax_last_dim(&x)?,
            ops::softmax(&x, 1)?,
            ops::rms_norm(&h, &alpha.to_dtype(DType::F16)?, 1e-5)?,
            ops::layer_norm(&x, &alpha, &beta, 1e-5)?,
            rotary_emb::rope(&x, &cos, &sin)?,
            rotary_emb::rope_i(&x, &cos, &sin)?,
            rotary_emb::rope_thd(&x.transpose(1, 2)?.contiguous()?, &cos, &sin)?,
            x.arg_sort_last_dim(true)?,
            x.arg_sort_last_dim(false)?,
            x.sort_last_dim(true)?.0,
            // The fused swiglu and residual norm: this backend has neither, so their CPU
            // forms run, equal to the composition the CPU device computes.
            ops::swiglu(&x)?,
            ops::swiglu(&h)?,
            sum,
            normed,
            ops::add_rms_norm(&h, &h.sin()?, &alpha.to_dtype(DType::F16)?, 1e-5)?.1,
        ])
    })?;
    assert_eq!(ext(&dev).fused(), Vec::<&str>::new());
    assert_eq!(
        ext(&dev).fallbacks(),
        [
            // The first add_rms_norm runs before the vector is built.
            "add-rms-norm",
            "sigmoid",
            "softmax-last-dim",
            "rms-norm",
            "layer-norm",
            "rotary-emb",
            "rotary-emb-int",
            "rotary-emb",
            "argsort",
            "argsort",
            "argsort",
            "swiglu",
            "swiglu",
            "add-rms-norm",
        ]
    );
    Ok(())
}

#[test]
fn strict_device_refuses_fallbacks_only() -> Result<()> {
    let dev = ext_cpu_device_strict();
    let x = input(&dev, 30, &[2, 8])?;
    // Handled natively: fine.
    let s = candle_nn::ops::sigmoid(&x)?;
    assert_eq!(s.device().location(), LOCATION);
    // Would fall back: an error naming the op, and nothing computed on the CPU.
    let e = candle_nn::ops::softmax_last_dim(&x).expect_err("strict: no CPU fallback");
    assert!(e.to_string().contains("softmax-last-dim"), "{e}");
    let e = x
        .arg_sort_last_dim(true)
        .expect_err("strict: no CPU fallback");
    assert!(e.to_string().contains("argsort"), "{e}");
    assert_eq!(ext(&dev).fallbacks(), ["softmax-last-dim", "argsort"]);
    Ok(())
}

#[test]
fn device_mismatch_is_candles_error() -> Result<()> {
    let dev = ext_cpu_device();
    let on_cpu = input(&Device::Cpu, 31, &[3, 3])?;
    let on_ext = on_cpu.to_device(&dev)?;
    let mismatch = |r: Result<Tensor>, op: &str, cpu_first: bool| {
        let e = r.expect_err("operands on different devices");
        match root_cause(&e) {
            Error::DeviceMismatchBinaryOp { lhs, rhs, op: got } => {
                let (want_l, want_r) = if cpu_first {
                    (Device::Cpu.location(), LOCATION)
                } else {
                    (LOCATION, Device::Cpu.location())
                };
                assert_eq!((*lhs, *rhs, *got), (want_l, want_r, op), "{e}");
            }
            other => panic!("{op}: expected DeviceMismatchBinaryOp, got {other:?}"),
        }
    };
    mismatch(on_cpu.add(&on_ext), "add", true);
    mismatch(on_ext.mul(&on_cpu), "mul", false);
    mismatch(on_ext.matmul(&on_cpu), "matmul", false);
    mismatch(on_cpu.eq(&on_ext), "cmp", true);
    mismatch(on_ext.ge(0.0)?.where_cond(&on_ext, &on_cpu), "where", false);
    mismatch(
        on_ext.index_select(&Tensor::new(&[0u32, 2], &Device::Cpu)?, 0),
        "index-select",
        false,
    );
    assert!(Tensor::cat(&[&on_ext, &on_cpu], 0).is_err());
    assert!(candle_nn::ops::rms_norm(&on_ext, &on_cpu.i(0)?, 1e-5).is_err());
    Ok(())
}

#[test]
fn autograd_of_a_small_mlp() -> Result<()> {
    let dev = parity("mlp grads", |d| {
        let w1 = Var::from_tensor(&input(d, 32, &[16, 8])?.affine(0.3, 0.0)?)?;
        let b1 = Var::from_tensor(&input(d, 33, &[16])?)?;
        let w2 = Var::from_tensor(&input(d, 34, &[4, 16])?.affine(0.3, 0.0)?)?;
        let alpha = Var::from_tensor(&input(d, 35, &[16])?)?;
        let x = input(d, 36, &[5, 8])?;
        let target = indices(d, 37, &[5], 4)?;

        let l1 = candle_nn::Linear::new(w1.as_tensor().clone(), Some(b1.as_tensor().clone()));
        let l2 = candle_nn::Linear::new(w2.as_tensor().clone(), None);
        let h = l1.forward(&x)?;
        let h = (candle_nn::ops::sigmoid(&h)? * h.gelu()?)?;
        let h = candle_nn::ops::rms_norm_slow(&h, alpha.as_tensor(), 1e-5)?;
        let logits = l2.forward(&h)?;
        let loss = candle_nn::loss::cross_entropy(&logits, &target)?;
        let grads = loss.backward()?;
        let mut out = vec![loss];
        for v in [&w1, &b1, &w2, &alpha] {
            match grads.get(v.as_tensor()) {
                Some(g) => out.push(g.clone()),
                None => candle_core::bail!("no gradient for a parameter"),
            }
        }
        // One SGD step, through the in-place `Var::set`.
        let w1_new = (w1.as_tensor() - (&out[1] * 0.1)?)?;
        w1.set(&w1_new)?;
        out.push(w1.as_tensor().clone());
        Ok(out)
    })?;
    // The sigmoid forward went through `ext_fused`.
    assert_eq!(ext(&dev).fused(), ["sigmoid"]);
    Ok(())
}

/// A user's custom op with only a CPU implementation (no `ext_fwd`): `x * 2 + 1`.
struct TwiceThenOne;

impl candle_core::CustomOp1 for TwiceThenOne {
    fn name(&self) -> &'static str {
        "twice-then-one"
    }
    fn cpu_fwd(
        &self,
        s: &candle_core::CpuStorage,
        l: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use candle_core::backend::BackendStorage;
        Ok((s.affine(l, 2.0, 1.0)?, l.shape().clone()))
    }
}

/// In place: `x = exp(x)`.
struct ExpInPlace;

impl candle_core::InplaceOp1 for ExpInPlace {
    fn name(&self) -> &'static str {
        "exp-in-place"
    }
    fn cpu_fwd(&self, s: &mut candle_core::CpuStorage, l: &candle_core::Layout) -> Result<()> {
        let candle_core::CpuStorage::F32(v) = s else {
            candle_core::bail!("f32 only")
        };
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("contiguous only")
        };
        v[a..b].iter_mut().for_each(|x| *x = x.exp());
        Ok(())
    }
}

/// In place: `x += y`.
struct AddInPlace;

impl candle_core::InplaceOp2 for AddInPlace {
    fn name(&self) -> &'static str {
        "add-in-place"
    }
    fn cpu_fwd(
        &self,
        s1: &mut candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
    ) -> Result<()> {
        let (candle_core::CpuStorage::F32(d), candle_core::CpuStorage::F32(r)) = (s1, s2) else {
            candle_core::bail!("f32 only")
        };
        let (Some((a, b)), Some((c, _))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("contiguous only")
        };
        d[a..b].iter_mut().zip(&r[c..]).for_each(|(x, y)| *x += y);
        Ok(())
    }
}

#[test]
fn user_custom_and_in_place_ops_fall_back() -> Result<()> {
    let dev = parity("custom ops", |d| {
        let x = input(d, 46, &[3, 4])?;
        let y = input(d, 47, &[3, 4])?;
        let custom = x.t()?.apply_op1_no_bwd(&TwiceThenOne)?;
        let a = x.copy()?;
        a.inplace_op1(&ExpInPlace)?;
        let b = x.copy()?;
        b.inplace_op2(&y, &AddInPlace)?;
        // In place on a view: only its rows change, the storage stays on the device.
        let c = x.copy()?;
        c.narrow(0, 1, 2)?.inplace_op1(&ExpInPlace)?;
        Ok(vec![custom, a, b, c])
    })?;
    assert_eq!(
        ext(&dev).fallbacks(),
        [
            "twice-then-one",
            "exp-in-place",
            "add-in-place",
            "exp-in-place"
        ]
    );

    // Strict: refused before anything changes.
    let dev = ext_cpu_device_strict();
    let x = input(&dev, 48, &[2, 3])?;
    let before = x.to_vec2::<f32>()?;
    assert!(x.inplace_op1(&ExpInPlace).is_err());
    assert_eq!(x.to_vec2::<f32>()?, before);
    assert!(x.apply_op1_no_bwd(&TwiceThenOne).is_err());
    // Operands on two devices: candle's error, before any fallback.
    let on_cpu = x.to_device(&Device::Cpu)?;
    let e = x
        .inplace_op2(&on_cpu, &AddInPlace)
        .expect_err("operands on two devices");
    assert!(
        matches!(root_cause(&e), Error::DeviceMismatchBinaryOp { .. }),
        "{e}"
    );
    Ok(())
}

/// candle-nn's batch norm in eval mode hands an ext device one fused op (`batch-norm-eval`):
/// ext-cpu has no handler for it, so the op's own CPU form runs through the slot's fallback,
/// within rounding of the composed ops the CPU device runs (it computes in f64, rounds once);
/// with gradients tracked the composed ops run on the device; a strict device refuses the
/// fallback (candle-rocm runs the op on the GPU instead). The same for `forward_relu_t`, whose
/// op (`batch-norm-eval-relu`) adds the ReLU after it.
#[test]
fn batch_norm_in_eval_mode_is_one_fused_op() -> Result<()> {
    use candle_nn::ModuleT;
    let bn = |d: &Device| -> Result<candle_nn::BatchNorm> {
        let mean = input(d, 40, &[5])?;
        let var = input(d, 41, &[5])?.abs()?.affine(1.0, 0.5)?;
        let (w, b) = (input(d, 42, &[5])?, input(d, 43, &[5])?);
        candle_nn::BatchNorm::new(5, mean, var, w, b, 1e-5)
    };
    let want = bn(&Device::Cpu)?.forward_t(&input(&Device::Cpu, 44, &[2, 5, 3, 4])?, false)?;
    one_fused_op("batch-norm-eval", &want, |d, track| {
        bn(d)?.forward_t(&tracked(input(d, 44, &[2, 5, 3, 4])?, track)?, false)
    })?;
    // With the ReLU after it (`forward_relu_t`): the op of its own.
    let want = want.relu()?;
    one_fused_op("batch-norm-eval-relu", &want, |d, track| {
        bn(d)?.forward_relu_t(&tracked(input(d, 44, &[2, 5, 3, 4])?, track)?, false)
    })
}

/// `x`, or a variable's tensor of the same values (one that tracks gradients) when `track`.
fn tracked(x: Tensor, track: bool) -> Result<Tensor> {
    Ok(if track {
        Var::from_tensor(&x)?.as_tensor().clone()
    } else {
        x
    })
}

/// The checks of a candle-nn layer that runs as the fused op `op` on an ext device:
/// `run(dev, track)` runs it on `dev` (its input tracking gradients when `track`). ext-cpu has
/// no handler, so the op's CPU form runs (one fallback, named `op`) and matches `want` (the
/// plain CPU's composed path) within 1e-5; an input that tracks gradients takes the composed
/// path (no fallback); a strict device refuses the fallback.
fn one_fused_op(
    op: &str,
    want: &Tensor,
    run: impl Fn(&Device, bool) -> Result<Tensor>,
) -> Result<()> {
    let close = |got: Tensor| -> Result<()> {
        assert_eq!(got.device().location(), LOCATION);
        let diff = max_abs_diff(&got.to_device(&Device::Cpu)?, want)?;
        assert!(diff < 1e-5, "{op}: max |ext - cpu| = {diff:e}");
        Ok(())
    };
    let dev = ext_cpu_device();
    close(run(&dev, false)?)?;
    assert_eq!(ext(&dev).fallbacks(), [op]);
    let dev = ext_cpu_device();
    close(run(&dev, true)?)?;
    assert_eq!(ext(&dev).fallbacks(), Vec::<String>::new());
    run(&ext_cpu_device_strict(), false).expect_err("strict: no CPU fallback");
    Ok(())
}

/// candle-nn's group norm on an ext device is one fused op (`group-norm`): ext-cpu has no
/// handler, so the op's CPU form runs (the slot's fallback, f64 math) and matches candle-nn's
/// composed path on the plain CPU within f32 rounding; an input that tracks gradients takes the
/// composed path (no fallback); a strict device refuses the fallback.
#[test]
fn group_norm_is_one_fused_op() -> Result<()> {
    let gn = |d: &Device| -> Result<candle_nn::GroupNorm> {
        let (w, b) = (input(d, 50, &[6])?, input(d, 51, &[6])?);
        candle_nn::GroupNorm::new(w, b, 6, 3, 1e-5)
    };
    let x = |d: &Device| -> Result<Tensor> { input(d, 52, &[2, 6, 5, 7])?.affine(2.0, 3.0) };
    let want = gn(&Device::Cpu)?.forward(&x(&Device::Cpu)?)?;
    one_fused_op("group-norm", &want, |d, track| {
        gn(d)?.forward(&tracked(x(d)?, track)?)
    })
}
