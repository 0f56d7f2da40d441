//! `ExtCpu`: candle's own CPU backend plugged into the out-of-tree backend slot of the patched
//! candle-core (`Device::Ext`, `Storage::Ext`, `QStorage::Ext`; see `candle_core::ext`), so that
//! the slot's code paths run in CI, where no GPU exists.
//!
//! Every [`BackendStorage`]/[`BackendDevice`] method delegates to [`CpuStorage`]/[`CpuDevice`],
//! so results on [`ext_cpu_device`] equal the plain CPU's bit for bit; what differs is the way
//! there: candle-core's `Ext` match arms, the blanket adapters of `candle_core::ext` (op names,
//! downcasts of the other operand), the fused-op hooks and their CPU fallback, and the defaults
//! of [`ExtQStorage`].
//!
//! - Fused ops: [`ExtBackendStorage::ext_fused`] handles [`FusedOp::Sigmoid`] (f32, f64) and
//!   [`FusedOp::RmsNorm`] (contiguous f32) the way candle-nn's CPU code does; every other op or
//!   dtype returns `None` and takes the slot's CPU fallback. The device records both (see
//!   [`ExtCpuDevice::fused`] and [`ExtCpuDevice::fallbacks`]), and a strict device
//!   ([`ext_cpu_device_strict`]) refuses fallbacks, as candle-rocm's strict mode does.
//! - Batched copies: [`ExtBackendStorage::ext_copy2d_many`] runs `cat`'s copies in one call
//!   and records it ([`ExtCpuDevice::copy2d_many`]).
//! - Quantized tensors: [`ExtCpuQStorage`] keeps the blocks on the host and overrides only
//!   [`ExtQStorage::dequantize`] (its native path, no fallback); `dequantize_f16`, `embedding`
//!   and `matmul_t` are the trait's defaults, built on the device's float ops. A device made
//!   with [`ExtCpuDevice::with_options`] can keep the default `dequantize` as well (the host
//!   path behind the CPU-fallback check).

use std::any::Any;
use std::borrow::Cow;
use std::sync::{Arc, Mutex, PoisonError};

use candle_core::backend::{BackendDevice, BackendStorage};
use candle_core::conv::{ParamsConv1D, ParamsConv2D, ParamsConvTranspose1D, ParamsConvTranspose2D};
use candle_core::cpu_backend::{unary_map, CpuDevice};
use candle_core::ext::{
    Copy2d, ExtBackendDevice, ExtBackendStorage, ExtDevice, ExtQStorage, ExtStorage, FusedOp,
};
use candle_core::op::{BinaryOpT, CmpOp, ReduceOp, UnaryOpT};
use candle_core::quantized::{GgmlDType, QuantizedType};
use candle_core::scalar::Scalar;
use candle_core::{CpuStorage, DType, Device, DeviceLocation, Layout, Result, Shape, WithDType};

/// The backend's name in `DeviceLocation::Ext`: the device shows as `ext-cpu:0`.
pub const BACKEND_NAME: &str = "ext-cpu";

/// The location of every [`ExtCpuDevice`].
pub const LOCATION: DeviceLocation = DeviceLocation::Ext {
    backend: BACKEND_NAME,
    ordinal: 0,
};

/// What a device handle and its clones share: the strict flag and what the slot asked of it.
#[derive(Debug, Default)]
struct State {
    strict: bool,
    host_dequantize: bool,
    fallbacks: Mutex<Vec<String>>,
    fused: Mutex<Vec<&'static str>>,
    dequantized: Mutex<usize>,
    copy2d_many: Mutex<Vec<usize>>,
}

/// The test device: candle's CPU behind the slot. Clones share one record of fallbacks and
/// fused ops; every instance is the same device (`ext-cpu:0`) for candle's device checks.
#[derive(Debug, Clone, Default)]
pub struct ExtCpuDevice {
    state: Arc<State>,
}

impl ExtCpuDevice {
    /// A device that lets unhandled ops fall back to the CPU (recording them).
    pub fn new() -> Self {
        Self::default()
    }

    /// A device that refuses every CPU fallback with an error naming the op.
    pub fn strict() -> Self {
        Self::with_options(true, false)
    }

    /// A device that refuses CPU fallbacks when `strict`, and whose quantized storage keeps
    /// `ExtQStorage`'s default `dequantize` (on the host, after the CPU-fallback check) when
    /// `host_dequantize`, instead of overriding it.
    pub fn with_options(strict: bool, host_dequantize: bool) -> Self {
        Self {
            state: Arc::new(State {
                strict,
                host_dequantize,
                ..State::default()
            }),
        }
    }

    /// The ops the slot ran on the CPU through [`ExtDevice::cpu_fallback`] (including refused
    /// ones), in order.
    pub fn fallbacks(&self) -> Vec<String> {
        lock(&self.state.fallbacks).clone()
    }

    /// The fused ops [`ExtBackendStorage::ext_fused`] handled, by [`FusedOp::name`], in order.
    pub fn fused(&self) -> Vec<&'static str> {
        lock(&self.state.fused).clone()
    }

    /// The batched copies [`ExtBackendStorage::ext_copy2d_many`] ran (candle-core's `cat`), as
    /// the number of copies in each, in order.
    pub fn copy2d_many(&self) -> Vec<usize> {
        lock(&self.state.copy2d_many).clone()
    }

    /// How many times [`ExtCpuQStorage`]'s own `dequantize` ran.
    pub fn dequantized(&self) -> usize {
        *lock(&self.state.dequantized)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A new [`ExtCpuDevice`] (fallbacks allowed) as a candle [`Device`] (`Device::Ext`).
pub fn ext_cpu_device() -> Device {
    Device::new_ext(ExtCpuDevice::new())
}

/// A new strict [`ExtCpuDevice`] (fallbacks are errors) as a candle [`Device`].
pub fn ext_cpu_device_strict() -> Device {
    Device::new_ext(ExtCpuDevice::strict())
}

/// The [`ExtCpuDevice`] behind `dev`; `None` for other devices.
pub fn ext_cpu(dev: &Device) -> Option<&ExtCpuDevice> {
    dev.as_ext_device()?.as_any().downcast_ref()
}

/// A [`CpuStorage`] on an [`ExtCpuDevice`].
#[derive(Debug)]
pub struct ExtCpuStorage {
    inner: CpuStorage,
    device: ExtCpuDevice,
}

impl ExtCpuStorage {
    /// The host storage underneath.
    pub fn cpu(&self) -> &CpuStorage {
        &self.inner
    }

    fn wrap(&self, inner: Result<CpuStorage>) -> Result<Self> {
        Ok(Self {
            inner: inner?,
            device: self.device.clone(),
        })
    }
}

impl BackendStorage for ExtCpuStorage {
    type Device = ExtCpuDevice;

    fn try_clone(&self, l: &Layout) -> Result<Self> {
        self.wrap(self.inner.try_clone(l))
    }
    fn dtype(&self) -> DType {
        self.inner.dtype()
    }
    fn device(&self) -> &ExtCpuDevice {
        &self.device
    }
    fn to_cpu_storage(&self) -> Result<CpuStorage> {
        self.inner.to_cpu_storage()
    }
    fn affine(&self, l: &Layout, mul: f64, add: f64) -> Result<Self> {
        self.wrap(self.inner.affine(l, mul, add))
    }
    fn powf(&self, l: &Layout, e: f64) -> Result<Self> {
        self.wrap(self.inner.powf(l, e))
    }
    fn elu(&self, l: &Layout, alpha: f64) -> Result<Self> {
        self.wrap(self.inner.elu(l, alpha))
    }
    fn reduce_op(&self, op: ReduceOp, l: &Layout, dims: &[usize]) -> Result<Self> {
        self.wrap(self.inner.reduce_op(op, l, dims))
    }
    fn cmp(&self, op: CmpOp, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
        self.wrap(self.inner.cmp(op, &rhs.inner, l, rl))
    }
    fn to_dtype(&self, l: &Layout, dtype: DType) -> Result<Self> {
        self.wrap(self.inner.to_dtype(l, dtype))
    }
    fn unary_impl<B: UnaryOpT>(&self, l: &Layout) -> Result<Self> {
        self.wrap(self.inner.unary_impl::<B>(l))
    }
    fn binary_impl<B: BinaryOpT>(&self, rhs: &Self, l: &Layout, rl: &Layout) -> Result<Self> {
        self.wrap(self.inner.binary_impl::<B>(&rhs.inner, l, rl))
    }
    fn where_cond(&self, l: &Layout, t: &Self, tl: &Layout, f: &Self, fl: &Layout) -> Result<Self> {
        self.wrap(self.inner.where_cond(l, &t.inner, tl, &f.inner, fl))
    }
    fn conv1d(&self, l: &Layout, k: &Self, kl: &Layout, p: &ParamsConv1D) -> Result<Self> {
        self.wrap(self.inner.conv1d(l, &k.inner, kl, p))
    }
    fn conv_transpose1d(
        &self,
        l: &Layout,
        k: &Self,
        kl: &Layout,
        p: &ParamsConvTranspose1D,
    ) -> Result<Self> {
        self.wrap(self.inner.conv_transpose1d(l, &k.inner, kl, p))
    }
    fn conv2d(&self, l: &Layout, k: &Self, kl: &Layout, p: &ParamsConv2D) -> Result<Self> {
        self.wrap(self.inner.conv2d(l, &k.inner, kl, p))
    }
    fn conv_transpose2d(
        &self,
        l: &Layout,
        k: &Self,
        kl: &Layout,
        p: &ParamsConvTranspose2D,
    ) -> Result<Self> {
        self.wrap(self.inner.conv_transpose2d(l, &k.inner, kl, p))
    }
    fn avg_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<Self> {
        self.wrap(self.inner.avg_pool2d(l, k, s))
    }
    fn max_pool2d(&self, l: &Layout, k: (usize, usize), s: (usize, usize)) -> Result<Self> {
        self.wrap(self.inner.max_pool2d(l, k, s))
    }
    fn upsample_nearest1d(&self, l: &Layout, sz: usize) -> Result<Self> {
        self.wrap(self.inner.upsample_nearest1d(l, sz))
    }
    fn upsample_nearest2d(&self, l: &Layout, h: usize, w: usize) -> Result<Self> {
        self.wrap(self.inner.upsample_nearest2d(l, h, w))
    }
    fn upsample_bilinear2d(
        &self,
        l: &Layout,
        h: usize,
        w: usize,
        align_corners: bool,
        scale_h: Option<f64>,
        scale_w: Option<f64>,
    ) -> Result<Self> {
        self.wrap(
            self.inner
                .upsample_bilinear2d(l, h, w, align_corners, scale_h, scale_w),
        )
    }
    fn gather(&self, l: &Layout, ids: &Self, il: &Layout, dim: usize) -> Result<Self> {
        self.wrap(self.inner.gather(l, &ids.inner, il, dim))
    }
    fn scatter_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        il: &Layout,
        src: &Self,
        sl: &Layout,
        dim: usize,
    ) -> Result<()> {
        self.inner
            .scatter_set(l, &ids.inner, il, &src.inner, sl, dim)
    }
    fn scatter_add_set(
        &mut self,
        l: &Layout,
        ids: &Self,
        il: &Layout,
        src: &Self,
        sl: &Layout,
        dim: usize,
    ) -> Result<()> {
        self.inner
            .scatter_add_set(l, &ids.inner, il, &src.inner, sl, dim)
    }
    fn index_select(&self, ids: &Self, l: &Layout, il: &Layout, dim: usize) -> Result<Self> {
        self.wrap(self.inner.index_select(&ids.inner, l, il, dim))
    }
    fn index_add(
        &self,
        l: &Layout,
        ids: &Self,
        il: &Layout,
        src: &Self,
        sl: &Layout,
        dim: usize,
    ) -> Result<Self> {
        self.wrap(self.inner.index_add(l, &ids.inner, il, &src.inner, sl, dim))
    }
    fn matmul(
        &self,
        rhs: &Self,
        bmnk: (usize, usize, usize, usize),
        l: &Layout,
        rl: &Layout,
    ) -> Result<Self> {
        self.wrap(self.inner.matmul(&rhs.inner, bmnk, l, rl))
    }
    fn copy_strided_src(&self, dst: &mut Self, offset: usize, l: &Layout) -> Result<()> {
        self.inner.copy_strided_src(&mut dst.inner, offset, l)
    }
    fn copy2d(
        &self,
        dst: &mut Self,
        d1: usize,
        d2: usize,
        src_s: usize,
        dst_s: usize,
        src_o: usize,
        dst_o: usize,
    ) -> Result<()> {
        self.inner
            .copy2d(&mut dst.inner, d1, d2, src_s, dst_s, src_o, dst_o)
    }
    fn const_set(&mut self, v: Scalar, l: &Layout) -> Result<()> {
        self.inner.const_set(v, l)
    }
}

impl BackendDevice for ExtCpuDevice {
    type Storage = ExtCpuStorage;

    fn new(ordinal: usize) -> Result<Self> {
        if ordinal != 0 {
            candle_core::bail!("{BACKEND_NAME} has one device (ordinal 0), not {ordinal}")
        }
        Ok(Self::default())
    }
    fn location(&self) -> DeviceLocation {
        LOCATION
    }
    fn same_device(&self, _: &Self) -> bool {
        true
    }
    fn zeros_impl(&self, shape: &Shape, dtype: DType) -> Result<ExtCpuStorage> {
        self.wrap(CpuDevice.zeros_impl(shape, dtype))
    }
    #[allow(unsafe_code)]
    unsafe fn alloc_uninit(&self, shape: &Shape, dtype: DType) -> Result<ExtCpuStorage> {
        // SAFETY: forwarded unchanged; our caller upholds `BackendDevice::alloc_uninit`'s
        // contract (writes the storage before reading it), which is `CpuDevice`'s as well.
        self.wrap(unsafe { CpuDevice.alloc_uninit(shape, dtype) })
    }
    fn storage_from_slice<T: WithDType>(&self, s: &[T]) -> Result<ExtCpuStorage> {
        self.wrap(CpuDevice.storage_from_slice(s))
    }
    fn storage_from_cpu_storage(&self, s: &CpuStorage) -> Result<ExtCpuStorage> {
        self.wrap(CpuDevice.storage_from_cpu_storage(s))
    }
    fn storage_from_cpu_storage_owned(&self, s: CpuStorage) -> Result<ExtCpuStorage> {
        self.wrap(CpuDevice.storage_from_cpu_storage_owned(s))
    }
    fn rand_uniform(&self, s: &Shape, d: DType, lo: f64, up: f64) -> Result<ExtCpuStorage> {
        self.wrap(CpuDevice.rand_uniform(s, d, lo, up))
    }
    fn rand_normal(&self, s: &Shape, d: DType, mean: f64, std: f64) -> Result<ExtCpuStorage> {
        self.wrap(CpuDevice.rand_normal(s, d, mean, std))
    }
    fn set_seed(&self, seed: u64) -> Result<()> {
        CpuDevice.set_seed(seed)
    }
    fn get_current_seed(&self) -> Result<u64> {
        CpuDevice.get_current_seed()
    }
    fn synchronize(&self) -> Result<()> {
        CpuDevice.synchronize()
    }
}

impl ExtCpuDevice {
    fn wrap(&self, inner: Result<CpuStorage>) -> Result<ExtCpuStorage> {
        Ok(ExtCpuStorage {
            inner: inner?,
            device: self.clone(),
        })
    }
}

impl ExtBackendDevice for ExtCpuDevice {
    fn ext_cpu_fallback(&self, op: &str) -> Result<()> {
        lock(&self.state.fallbacks).push(op.to_owned());
        if self.state.strict {
            candle_core::bail!("{BACKEND_NAME} is strict: {op} would fall back to the CPU")
        }
        Ok(())
    }
    fn ext_load_quantized(&self, data: &[u8], dtype: GgmlDType) -> Result<Box<dyn ExtQStorage>> {
        let q = ExtCpuQStorage::load(self, data, dtype)?;
        if self.state.host_dequantize {
            Ok(Box::new(DefaultDequantize(q)))
        } else {
            Ok(Box::new(q))
        }
    }
}

impl ExtBackendStorage for ExtCpuStorage {
    fn ext_fused(
        &self,
        op: &FusedOp,
        layout: &Layout,
        args: &[(&Self, &Layout)],
    ) -> Result<Option<(Self, Shape)>> {
        let out = match (op, args) {
            (FusedOp::Sigmoid, []) => sigmoid(&self.inner, layout),
            (FusedOp::RmsNorm { eps }, [(alpha, alpha_l)]) => {
                rms_norm(&self.inner, layout, &alpha.inner, alpha_l, *eps)?
            }
            _ => None,
        };
        match out {
            Some(out) => {
                lock(&self.device.state.fused).push(op.name());
                Ok(Some((self.wrap(Ok(out))?, layout.shape().clone())))
            }
            None => Ok(None),
        }
    }

    /// Runs the copies one after another on the host, as candle's CPU `copy2d` does, and
    /// records the batch.
    fn ext_copy2d_many(&mut self, srcs: &[(&Self, Copy2d)]) -> Result<bool> {
        for (src, c) in srcs {
            src.inner.copy2d(
                &mut self.inner,
                c.d1,
                c.d2,
                c.src_s,
                c.dst_s,
                c.src_o,
                c.dst_o,
            )?;
        }
        lock(&self.device.state.copy2d_many).push(srcs.len());
        Ok(true)
    }
}

/// candle-nn's CPU sigmoid, for f32 and f64 only (other dtypes fall back).
fn sigmoid(s: &CpuStorage, l: &Layout) -> Option<CpuStorage> {
    match s {
        CpuStorage::F32(v) => Some(CpuStorage::F32(unary_map(v, l, |x: f32| {
            ((-x).exp() + 1.0).recip()
        }))),
        CpuStorage::F64(v) => Some(CpuStorage::F64(unary_map(v, l, |x: f64| {
            ((-x).exp() + 1.0).recip()
        }))),
        _ => None,
    }
}

/// candle-nn's CPU rms-norm (same arithmetic, same order), for contiguous f32 only.
fn rms_norm(
    s: &CpuStorage,
    l: &Layout,
    alpha: &CpuStorage,
    alpha_l: &Layout,
    eps: f32,
) -> Result<Option<CpuStorage>> {
    let (CpuStorage::F32(src), CpuStorage::F32(alpha)) = (s, alpha) else {
        return Ok(None);
    };
    let (Some((o1, o2)), Some((a1, a2))) = (l.contiguous_offsets(), alpha_l.contiguous_offsets())
    else {
        return Ok(None);
    };
    let (src, alpha) = (&src[o1..o2], &alpha[a1..a2]);
    let dim = l.dims().last().copied().unwrap_or(1);
    if dim == 0 || alpha.len() != dim {
        candle_core::bail!(
            "rms-norm: alpha has {} values for rows of {dim}",
            alpha.len()
        )
    }
    let mut dst = vec![0f32; src.len()];
    for (src, dst) in src.chunks(dim).zip(dst.chunks_mut(dim)) {
        let sum2 = src.iter().map(|&v| v * v).sum::<f32>();
        let m = (sum2 / dim as f32 + eps).sqrt();
        for ((d, s), a) in dst.iter_mut().zip(src).zip(alpha) {
            *d = *s / m * *a
        }
    }
    Ok(Some(CpuStorage::F32(dst)))
}

/// GGML blocks on an [`ExtCpuDevice`]: the bytes as loaded plus candle's host form of them.
/// Only [`ExtQStorage::dequantize`] is overridden (the host path is this backend's native
/// one); `dequantize_f16`, `embedding` and `matmul_t` are the trait's defaults.
pub struct ExtCpuQStorage {
    bytes: Vec<u8>,
    host: Box<dyn QuantizedType>,
    device: ExtCpuDevice,
}

impl ExtCpuQStorage {
    fn load(device: &ExtCpuDevice, data: &[u8], dtype: GgmlDType) -> Result<Self> {
        let block = dtype.type_size();
        if block == 0 || data.len() % block != 0 {
            candle_core::bail!(
                "{BACKEND_NAME}: {} bytes are not whole {dtype:?} blocks of {block} bytes",
                data.len()
            )
        }
        Ok(Self {
            bytes: data.to_vec(),
            host: dtype.from_data(Cow::Borrowed(data)),
            device: device.clone(),
        })
    }
}

impl std::fmt::Debug for ExtCpuQStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtCpuQStorage")
            .field("dtype", &self.host.dtype())
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl ExtQStorage for ExtCpuQStorage {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn dtype(&self) -> GgmlDType {
        self.host.dtype()
    }
    fn device(&self) -> Arc<dyn ExtDevice> {
        Arc::new(self.device.clone())
    }
    fn storage_size_in_bytes(&self) -> usize {
        self.bytes.len()
    }
    fn data(&self) -> Result<Vec<u8>> {
        Ok(self.bytes.clone())
    }
    fn dequantize(&self, elem_count: usize) -> Result<Box<dyn ExtStorage>> {
        *lock(&self.device.state.dequantized) += 1;
        Ok(Box::new(
            self.device.wrap(self.host.dequantize(elem_count))?,
        ))
    }
}

/// [`ExtCpuQStorage`] with every default of [`ExtQStorage`], `dequantize` included (see
/// [`ExtCpuDevice::with_options`]).
#[derive(Debug)]
struct DefaultDequantize(ExtCpuQStorage);

impl ExtQStorage for DefaultDequantize {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn dtype(&self) -> GgmlDType {
        self.0.dtype()
    }
    fn device(&self) -> Arc<dyn ExtDevice> {
        ExtQStorage::device(&self.0)
    }
    fn storage_size_in_bytes(&self) -> usize {
        self.0.storage_size_in_bytes()
    }
    fn data(&self) -> Result<Vec<u8>> {
        self.0.data()
    }
}
