//! `reduce_op`: sum, min, max, argmin and argmax over any set of dims. Over the last dim(s) of
//! a contiguous float tensor, our `rows` kernels run (one pass, vector loads, wave shuffles;
//! see `rows.rs`); otherwise candle's `fast_*` kernels (our `small_int` module for i16/i32).
//!
//! The source's dims and strides are reordered so the reduced dims come last; output element
//! `b` then reduces the consecutive logical elements `b * n .. (b + 1) * n`, one block each.

use candle_core::op::ReduceOp;
use candle_core::Layout;
use candle_rocm_kernels::Module;
use rocm_safe::{DeviceBuffer, DevicePtrArg, LaunchConfig};

use crate::device::RocmDevice;
use crate::dispatch::Map1Any;
use crate::dtype::{RocmDType, RocmStorageSlice as S};
use crate::error::BackendError;
use crate::launch::{kernel_name, module_for};
use crate::layout::{checked_product, checked_view, kernel_limit, shape_error};

/// Reductions over up to this many elements per output use one thread per output
/// (`fast_sum_small`) instead of one block per output.
const SMALL_REDUCE: usize = 32;

/// A reduction over `dims` (indices into the source's dims, each at most once).
pub struct FastReduce<'a>(pub &'a [usize], pub ReduceOp);

impl Map1Any for FastReduce<'_> {
    fn f<T: RocmDType, W: Fn(DeviceBuffer<T>) -> S>(
        &self,
        src: &DeviceBuffer<T>,
        dev: &RocmDevice,
        layout: &Layout,
        wrap: W,
    ) -> Result<S, BackendError> {
        let (root, needs_elements, returns_index) = match self.1 {
            ReduceOp::Sum => ("fast_sum", false, false),
            ReduceOp::Min => ("fast_min", true, false),
            ReduceOp::Max => ("fast_max", true, false),
            ReduceOp::ArgMin => ("fast_argmin", true, true),
            ReduceOp::ArgMax => ("fast_argmax", true, true),
        };
        let src_dims = layout.dims();
        let src_stride = layout.stride();
        for (i, &d) in self.0.iter().enumerate() {
            if d >= src_dims.len() || self.0[..i].contains(&d) {
                return Err(shape_error(
                    root,
                    format_args!("reduced dims {:?} do not fit shape {src_dims:?}", self.0),
                ));
            }
        }
        let src_el = layout.shape().elem_count();
        if needs_elements && src_el == 0 {
            return Err(candle_core::Error::EmptyTensor { op: "reduce" }.bt().into());
        }
        if let Some(out) = crate::launch::rows::reduce(dev, src, layout, self.0, self.1, &wrap)? {
            return Ok(out);
        }
        let mut dims = Vec::with_capacity(src_dims.len());
        let mut stride = Vec::with_capacity(src_dims.len());
        for (i, (&d, &s)) in src_dims.iter().zip(src_stride).enumerate() {
            if !self.0.contains(&i) {
                dims.push(d);
                stride.push(s);
            }
        }
        let kept = dims.len();
        for &i in self.0 {
            dims.push(src_dims[i]);
            stride.push(src_stride[i]);
        }
        let dst_el = checked_product(root, "output element count", &dims[..kept])?;
        let per_block = checked_product(root, "reduced element count", &dims[kept..])?;
        let run = || -> Result<S, BackendError> {
            if dst_el == 0 {
                return Ok(if returns_index {
                    S::U32(dev.alloc::<u32>(0)?)
                } else {
                    wrap(dev.alloc::<T>(0)?)
                });
            }
            if src_el == 0 {
                // A sum over empty dims: zeros (the other ops were rejected above).
                return Ok(wrap(dev.zeros::<T>(dst_el)?));
            }
            let input = checked_view(root, src, layout)?;
            let module = module_for(Module::Reduce, T::DTYPE);
            let small = root == "fast_sum" && per_block <= SMALL_REDUCE && module == Module::Reduce;
            let (name, cfg, numel) = if small {
                let cfg = LaunchConfig::for_num_elems(
                    u32::try_from(dst_el)
                        .map_err(|_| kernel_limit(root, format_args!("{dst_el} outputs")))?,
                    256,
                );
                (kernel_name::<T>("fast_sum_small"), cfg, dst_el)
            } else {
                let blocks = u32::try_from(dst_el)
                    .ok()
                    .filter(|&b| b <= i32::MAX as u32)
                    .ok_or_else(|| {
                        kernel_limit(root, format_args!("{dst_el} outputs (the grid limit)"))
                    })?;
                let threads = per_block.clamp(1, 1024).next_power_of_two() as u32;
                let cfg = LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: 0,
                };
                (kernel_name::<T>(root), cfg, src_el)
            };
            let f = dev.function(module, &name)?;
            let info = dev.upload_info([dims.as_slice(), stride.as_slice()].concat())?;
            let ndims = dims.len();
            let (pinfo, pin) = (info.as_arg(), DevicePtrArg::of(&input));
            macro_rules! launch {
                ($out:expr) => {{
                    let out = $out;
                    let pout = out.as_arg();
                    let mut l = dev.stream().launch_builder(&f);
                    l.arg(&numel)
                        .arg(&per_block)
                        .arg(&ndims)
                        .arg(&pinfo)
                        .arg(&pin)
                        .arg(&pout);
                    // SAFETY: fast_<op>_<T>(size_t numel, size_t el_per_block,
                    // size_t num_dims, const size_t* info, const T* src, D* dst) with D = u32
                    // for arg ops, else T; info holds 2 * num_dims values describing a
                    // permutation of the checked source layout; `out` holds dst_el elements,
                    // one per block (or per thread for fast_sum_small, which bounds-checks).
                    unsafe { l.launch(cfg)? };
                    out
                }};
            }
            Ok(if returns_index {
                S::U32(launch!(dev.alloc::<u32>(dst_el)?))
            } else {
                wrap(launch!(dev.alloc::<T>(dst_el)?))
            })
        };
        run()
    }
}
