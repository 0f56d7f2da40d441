//! [`Module`] (a loaded code object), [`Function`] (a kernel in it) and the launch builder.

use std::ffi::{c_uint, c_void, CString};
use std::marker::PhantomData;
use std::sync::Arc;

use rocm_sys::{hipFunction_t, hipModule_t};

use crate::buffer::{DeviceBuffer, DeviceRepr};
use crate::device::Device;
use crate::error::{check, Result, RocmError};
use crate::graph::batch::NodeKind;
use crate::graph::gate;
use crate::stream::Stream;

struct ModuleInner {
    device: Device,
    raw: hipModule_t,
}

// SAFETY: a loaded hipModule_t is immutable and may be used from any thread.
unsafe impl Send for ModuleInner {}
// SAFETY: see `Send`; only thread-safe lookups go through `&self`.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        let rt = self.device.runtime().clone();
        let raw = self.raw as usize;
        // Unloading invalidates any graph being recorded in the process (a recorded launch may
        // name this module's kernels): deferred until none is (graph::gate).
        gate::device_wide(move || {
            let hip = rt.hip();
            // SAFETY: `raw` was loaded by hipModuleLoadData and is unloaded once (this closure
            // runs once); every Function held an Arc to the module, so none outlives it.
            let code = unsafe { (hip.hipModuleUnload)(raw as hipModule_t) };
            if let Err(e) = check(hip, "hipModuleUnload", code) {
                rt.record_err(e);
            }
        });
    }
}

/// A code object loaded on one device. Cheap to clone (shared).
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

impl Module {
    /// Loads a code object (HSA ELF, an offload bundle, or on the test double a cubin) from
    /// memory. The image is copied by the runtime; it need not outlive the call.
    pub fn load(device: &Device, image: &[u8]) -> Result<Module> {
        if image.is_empty() {
            return Err(RocmError::InvalidArgument("empty code object image".into()));
        }
        // The module loads onto the current device: set it whatever rocm-safe remembers.
        device.make_current()?;
        let hip = device.hip();
        let mut raw: hipModule_t = std::ptr::null_mut();
        // SAFETY: `raw` is a valid out-pointer; `image` is readable for its whole length and
        // the runtime parses it (rejecting malformed images with an error code).
        let code = unsafe { (hip.hipModuleLoadData)(&mut raw, image.as_ptr().cast()) };
        check(hip, "hipModuleLoadData", code)?;
        Ok(Module {
            inner: Arc::new(ModuleInner {
                device: device.clone(),
                raw,
            }),
        })
    }

    /// Looks a kernel up by its (unmangled, `extern "C"`) name.
    pub fn function(&self, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| {
            RocmError::InvalidArgument(format!("kernel name {name:?} contains a NUL byte"))
        })?;
        let hip = self.inner.device.hip();
        let mut raw: hipFunction_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer, live module, NUL-terminated name.
        let code = unsafe { (hip.hipModuleGetFunction)(&mut raw, self.inner.raw, cname.as_ptr()) };
        check(hip, "hipModuleGetFunction", code)?;
        Ok(Function {
            inner: Arc::new(FunctionInner {
                module: self.inner.clone(),
                raw,
                name: name.into(),
            }),
        })
    }

    /// The device the module is loaded on.
    pub fn device(&self) -> &Device {
        &self.inner.device
    }
}

struct FunctionInner {
    module: Arc<ModuleInner>,
    raw: hipFunction_t,
    name: Box<str>,
}

// SAFETY: a hipFunction_t is an immutable handle into a loaded module (kept alive by the Arc
// to the module); launching it from several threads is allowed by HIP.
unsafe impl Send for FunctionInner {}
// SAFETY: see `Send`; nothing in it is mutated after creation.
unsafe impl Sync for FunctionInner {}

/// A kernel of a loaded [`Module`]; keeps the module loaded. Cheap to clone: one shared
/// handle, so a clone costs a reference count and no allocation.
#[derive(Clone)]
pub struct Function {
    inner: Arc<FunctionInner>,
}

impl Function {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Registers per thread (`HIP_FUNC_ATTRIBUTE_NUM_REGS`).
    pub fn num_regs(&self) -> Result<i32> {
        self.attribute(rocm_sys::hipFunction_attribute::HIP_FUNC_ATTRIBUTE_NUM_REGS)
    }

    /// Largest block this kernel can be launched with.
    pub fn max_threads_per_block(&self) -> Result<i32> {
        self.attribute(rocm_sys::hipFunction_attribute::HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
    }

    fn attribute(&self, attr: rocm_sys::hipFunction_attribute) -> Result<i32> {
        let hip = self.inner.module.device.hip();
        let mut v = 0;
        // SAFETY: valid out-pointer; live function handle.
        let code = unsafe { (hip.hipFuncGetAttribute)(&mut v, attr, self.inner.raw) };
        check(hip, "hipFuncGetAttribute", code)?;
        Ok(v)
    }
}

impl std::fmt::Debug for Function {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Function({} on device {})",
            self.inner.name,
            self.inner.module.device.ordinal()
        )
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Module(on device {})", self.inner.device.ordinal())
    }
}

/// Grid and block shape of a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid_dim: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block_dim: (u32, u32, u32),
    /// Dynamic shared memory (LDS) per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// One thread per element in 1-D blocks of `block` threads.
    pub fn for_num_elems(n: u32, block: u32) -> Self {
        let block = block.max(1);
        LaunchConfig {
            grid_dim: (n.div_ceil(block).max(1), 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// Most kernel parameters a launch accepts (Candle's kernels take at most a dozen).
pub const MAX_KERNEL_ARGS: usize = 32;

/// Collects kernel arguments by reference, then launches. Built by [`Stream::launch_builder`].
///
/// The argument list lives inline (no heap allocation per launch).
pub struct LaunchArgs<'a> {
    stream: &'a Stream,
    func: &'a Function,
    args: [*mut c_void; MAX_KERNEL_ARGS],
    len: usize,
    overflow: bool,
    _borrows: PhantomData<&'a ()>,
}

/// A value that can be passed to a kernel by pointer.
pub trait KernelArg {
    /// Address of the bytes the kernel parameter is copied from.
    fn as_kernel_param(&self) -> *mut c_void;
}

impl<T: DeviceRepr> KernelArg for T {
    fn as_kernel_param(&self) -> *mut c_void {
        self as *const T as *mut c_void
    }
}

/// A device pointer argument: a buffer passes its address (`T*` in the kernel).
pub struct DevicePtrArg(*mut c_void);

impl DevicePtrArg {
    /// A null pointer, for kernels that treat null as "absent" (e.g. Candle's `info` array of a
    /// contiguous tensor).
    pub fn null() -> Self {
        DevicePtrArg(std::ptr::null_mut())
    }

    /// The address of any device memory (a buffer or a view of one).
    pub fn of<T: DeviceRepr>(mem: &impl crate::DeviceSlice<T>) -> Self {
        DevicePtrArg(mem.device_ptr())
    }
}

impl KernelArg for DevicePtrArg {
    fn as_kernel_param(&self) -> *mut c_void {
        &self.0 as *const *mut c_void as *mut c_void
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// The buffer's address as a kernel argument.
    pub fn as_arg(&self) -> DevicePtrArg {
        DevicePtrArg(self.device_ptr())
    }
}

impl Stream {
    /// Starts a launch of `func` on this stream.
    pub fn launch_builder<'a>(&'a self, func: &'a Function) -> LaunchArgs<'a> {
        LaunchArgs {
            stream: self,
            func,
            args: [std::ptr::null_mut(); MAX_KERNEL_ARGS],
            len: 0,
            overflow: false,
            _borrows: PhantomData,
        }
    }
}

impl<'a> LaunchArgs<'a> {
    /// Appends an argument; it must live until the launch. More than [`MAX_KERNEL_ARGS`]
    /// arguments make [`LaunchArgs::launch`] fail.
    pub fn arg(&mut self, arg: &'a impl KernelArg) -> &mut Self {
        match self.args.get_mut(self.len) {
            Some(slot) => {
                *slot = arg.as_kernel_param();
                self.len += 1;
            }
            None => self.overflow = true,
        }
        self
    }

    /// Queues the kernel.
    ///
    /// # Safety
    /// 1. The arguments must match the kernel's parameter list in number, order, size and
    ///    alignment (the runtime cannot check this).
    /// 2. Every device pointer passed must stay valid, and be ordered on this stream, until the
    ///    kernel has run; the kernel must not access memory outside what they point to for the
    ///    given grid.
    /// 3. Memory the kernel writes must not be read or written concurrently by other streams.
    pub unsafe fn launch(&mut self, cfg: LaunchConfig) -> Result<()> {
        let (gx, gy, gz) = cfg.grid_dim;
        let (bx, by, bz) = cfg.block_dim;
        if self.overflow {
            return Err(RocmError::InvalidArgument(format!(
                "kernel {} was given more than {MAX_KERNEL_ARGS} arguments",
                self.func.inner.name
            )));
        }
        if gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 {
            return Err(RocmError::InvalidArgument(format!(
                "kernel {} launched with an empty grid {:?} or block {:?}",
                self.func.inner.name, cfg.grid_dim, cfg.block_dim
            )));
        }
        if !self
            .func
            .inner
            .module
            .device
            .same_device(self.stream.device())
        {
            return Err(RocmError::InvalidArgument(format!(
                "kernel {} is loaded on device {} but launched on a stream of device {}",
                self.func.inner.name,
                self.func.inner.module.device.ordinal(),
                self.stream.device().ordinal()
            )));
        }
        // The stream's device must be current: HIP's launch runs on the stream's device, but
        // a runtime that follows the current device (the CUDA driver under the harness's
        // double) rejects a function and stream of another device. Skipped when rocm-safe
        // made it current on this thread last (`crate::device`'s documentation).
        self.stream.device().bind_to_thread()?;
        let hip = self.stream.device().hip();
        let (func, stream, args) = (self.func.inner.raw, self.stream, &mut self.args);
        // In graph mode the launch is recorded; the graph that holds it is launched before
        // the host next waits for this stream (contract 2 holds until then as it would for a
        // plain launch: the caller's buffers are ordered on this stream).
        stream.record(NodeKind::Kernel(func as usize), || {
            // SAFETY: handles are live; `args[..len]` holds one pointer per parameter, each
            // pointing to memory borrowed for 'a (the caller guarantees they match the kernel,
            // contract 1-3); the runtime reads only as many entries as the kernel has parameters;
            // `extra` is null so only kernelParams is used.
            let code = unsafe {
                (hip.hipModuleLaunchKernel)(
                    func,
                    gx as c_uint,
                    gy as c_uint,
                    gz as c_uint,
                    bx as c_uint,
                    by as c_uint,
                    bz as c_uint,
                    cfg.shared_mem_bytes as c_uint,
                    stream.raw(),
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            check(hip, "hipModuleLaunchKernel", code)
        })
    }
}
