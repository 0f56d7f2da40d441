//! rocm-safe's MIOpen wrappers on a real device with MIOpen (on the HIP-on-CUDA harness: the
//! MIOpen double, `ROCM_SYS_MIOPEN_LIB=$BUILD/miopen/libMIOpen.so.1`). Ignored in CI; with
//! `--include-ignored`, a missing device or a missing MIOpen is a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use half::f16;
use rocm_safe::miopen::{Algo, DEFAULT_WORKSPACE_LIMIT};
use rocm_safe::{
    Conv2dConfig, ConvKey, ConvTranspose2dConfig, Device, DeviceBuffer, MiopenHandle, PlanPolicy,
    Pool2dConfig, PoolMode, RocmError, Search, Stream,
};

fn stream() -> Arc<Stream> {
    let d = Device::new(0).unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"));
    Stream::new(&d).unwrap()
}

fn handle(s: &Arc<Stream>) -> MiopenHandle {
    MiopenHandle::require(s).unwrap_or_else(|e| panic!("MIOpen is needed here: {e}"))
}

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn conv_ref(c: &Conv2dConfig, x: &[f32], w: &[f32]) -> Vec<f32> {
    let (oh, ow) = c.out_hw().unwrap();
    let cg = c.in_channels / c.groups;
    let kg = c.out_channels / c.groups;
    let mut y = vec![0f32; c.batch * c.out_channels * oh * ow];
    for n in 0..c.batch {
        for k in 0..c.out_channels {
            let g = k / kg;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = 0f64;
                    for ci in 0..cg {
                        let cin = g * cg + ci;
                        for r in 0..c.kernel_h {
                            for s in 0..c.kernel_w {
                                let ih = (i * c.stride[0] + r * c.dilation[0]) as isize
                                    - c.padding[0] as isize;
                                let iw = (j * c.stride[1] + s * c.dilation[1]) as isize
                                    - c.padding[1] as isize;
                                if ih < 0
                                    || iw < 0
                                    || ih >= c.in_h as isize
                                    || iw >= c.in_w as isize
                                {
                                    continue;
                                }
                                let xv = x[((n * c.in_channels + cin) * c.in_h + ih as usize)
                                    * c.in_w
                                    + iw as usize];
                                let wv = w[((k * cg + ci) * c.kernel_h + r) * c.kernel_w + s];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((n * c.out_channels + k) * oh + i) * ow + j] = acc as f32;
                }
            }
        }
    }
    y
}

fn conv_transpose_ref(c: &ConvTranspose2dConfig, x: &[f32], w: &[f32]) -> Vec<f32> {
    let (oh, ow) = c.out_hw().unwrap();
    let cig = c.in_channels / c.groups;
    let cog = c.out_channels / c.groups;
    let mut y = vec![0f64; c.batch * c.out_channels * oh * ow];
    for n in 0..c.batch {
        for ci in 0..c.in_channels {
            let g = ci / cig;
            for ih in 0..c.in_h {
                for iw in 0..c.in_w {
                    let xv = x[((n * c.in_channels + ci) * c.in_h + ih) * c.in_w + iw] as f64;
                    for co in 0..cog {
                        for r in 0..c.kernel_h {
                            for s in 0..c.kernel_w {
                                let o_h = (ih * c.stride[0] + r * c.dilation[0]) as isize
                                    - c.padding[0] as isize;
                                let o_w = (iw * c.stride[1] + s * c.dilation[1]) as isize
                                    - c.padding[1] as isize;
                                if o_h < 0 || o_w < 0 || o_h >= oh as isize || o_w >= ow as isize {
                                    continue;
                                }
                                let wv = w[((ci * cog + co) * c.kernel_h + r) * c.kernel_w + s];
                                let oc = g * cog + co;
                                y[((n * c.out_channels + oc) * oh + o_h as usize) * ow
                                    + o_w as usize] += xv * wv as f64;
                            }
                        }
                    }
                }
            }
        }
    }
    y.into_iter().map(|v| v as f32).collect()
}

fn pool_ref(c: &Pool2dConfig, x: &[f32]) -> Vec<f32> {
    let (oh, ow) = c.out_hw().unwrap();
    let mut y = Vec::with_capacity(c.batch * c.channels * oh * ow);
    for nc in 0..c.batch * c.channels {
        for i in 0..oh {
            for j in 0..ow {
                let (mut m, mut sum) = (f32::NEG_INFINITY, 0f64);
                for r in 0..c.kernel[0] {
                    for s in 0..c.kernel[1] {
                        let v =
                            x[(nc * c.in_h + i * c.stride[0] + r) * c.in_w + j * c.stride[1] + s];
                        m = m.max(v);
                        sum += v as f64;
                    }
                }
                y.push(match c.mode {
                    PoolMode::Max => m,
                    PoolMode::Average => (sum / (c.kernel[0] * c.kernel[1]) as f64) as f32,
                });
            }
        }
    }
    y
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn run_conv(h: &mut MiopenHandle, s: &Arc<Stream>, c: &Conv2dConfig, seed: u64) {
    let x = values(c.input_dims().iter().product(), seed);
    let w = values(c.weight_dims().iter().product(), seed + 1);
    let n_out: usize = c.output_dims().unwrap().iter().product();
    let (dx, dw) = (s.clone_htod(&x).unwrap(), s.clone_htod(&w).unwrap());
    let mut dy = DeviceBuffer::<f32>::alloc(s, n_out).unwrap();
    h.conv2d(c, &dx, &dw, &mut dy).unwrap();
    assert_close(
        &s.clone_dtoh(&dy).unwrap(),
        &conv_ref(c, &x, &w),
        1e-4,
        "conv2d f32",
    );
}

#[test]
#[ignore = "needs a HIP device"]
fn conv2d_matches_a_host_reference_and_caches_its_plan() {
    let s = stream();
    let mut h = handle(&s);
    let c = Conv2dConfig {
        batch: 2,
        in_channels: 4,
        in_h: 9,
        in_w: 11,
        out_channels: 6,
        kernel_h: 3,
        kernel_w: 2,
        groups: 2,
        padding: [1, 0],
        stride: [2, 1],
        dilation: [1, 2],
    };
    run_conv(&mut h, &s, &c, 1);
    assert_eq!(h.cached_plans(), (1, 0));
    run_conv(&mut h, &s, &c, 2); // the cached plan, new data
    assert_eq!(h.cached_plans(), (1, 0));
    let plain = Conv2dConfig {
        groups: 1,
        padding: [1, 1],
        stride: [1, 1],
        dilation: [1, 1],
        ..c
    };
    run_conv(&mut h, &s, &plain, 3);
    assert_eq!(h.cached_plans(), (2, 0));
    assert!(s.device().check_err().is_ok());
}

/// Immediate mode (the default) plans with solution ids, find with algorithms; both give the
/// reference, and a workspace limit of 0 still finds a candidate that needs none.
#[test]
#[ignore = "needs a HIP device"]
fn both_searches_and_a_zero_workspace_limit_give_the_reference() {
    let s = stream();
    let mut h = handle(&s);
    let c = Conv2dConfig {
        batch: 2,
        in_channels: 8,
        in_h: 12,
        in_w: 10,
        out_channels: 16,
        kernel_h: 3,
        kernel_w: 3,
        groups: 1,
        padding: [1, 1],
        stride: [1, 1],
        dilation: [1, 1],
    };
    let key = ConvKey::forward::<f32>(&c);
    assert!(
        h.has_immediate_mode(),
        "the MIOpen tested here has immediate mode"
    );
    assert_eq!(h.policy().search, Search::Immediate);
    run_conv(&mut h, &s, &c, 7);
    let imm = h.chosen(&key).expect("planned");
    assert!(matches!(imm.algo, Algo::Solution(_)), "{imm:?}");
    for (search, limit) in [
        (Search::Find, DEFAULT_WORKSPACE_LIMIT),
        (Search::Immediate, 0),
    ] {
        h.set_policy(PlanPolicy {
            search,
            workspace_limit: limit,
        });
        assert_eq!(h.cached_plans(), (0, 0), "a new policy drops the plans");
        run_conv(&mut h, &s, &c, 8);
        let got = h.chosen(&key).expect("planned");
        assert!(got.workspace <= limit, "{got:?} within {limit}");
        let legacy = matches!(got.algo, Algo::Legacy(_));
        assert_eq!(legacy, search == Search::Find, "{search:?}: {got:?}");
    }
    assert!(s.device().check_err().is_ok());
}

#[test]
#[ignore = "needs a HIP device"]
fn conv1d_is_the_h1_case() {
    let s = stream();
    let mut h = handle(&s);
    let c = Conv2dConfig::conv1d(2, 8, 50, 16, 3, 1, 1, 2, 1);
    run_conv(&mut h, &s, &c, 4);
}

#[test]
#[ignore = "needs a HIP device"]
fn conv2d_f16_is_close() {
    let s = stream();
    let mut h = handle(&s);
    let c = Conv2dConfig {
        batch: 1,
        in_channels: 8,
        in_h: 10,
        in_w: 10,
        out_channels: 8,
        kernel_h: 3,
        kernel_w: 3,
        groups: 1,
        padding: [1, 1],
        stride: [1, 1],
        dilation: [1, 1],
    };
    let to16 = |v: &[f32]| v.iter().map(|&a| f16::from_f32(a)).collect::<Vec<_>>();
    let x = values(c.input_dims().iter().product(), 5);
    let w = values(c.weight_dims().iter().product(), 6);
    // The reference sees the same (rounded) inputs.
    let x16 = to16(&x);
    let w16 = to16(&w);
    let xr: Vec<f32> = x16.iter().map(|v| v.to_f32()).collect();
    let wr: Vec<f32> = w16.iter().map(|v| v.to_f32()).collect();
    let (dx, dw) = (s.clone_htod(&x16).unwrap(), s.clone_htod(&w16).unwrap());
    let mut dy = DeviceBuffer::<f16>::alloc(&s, c.output_dims().unwrap().iter().product()).unwrap();
    h.conv2d(&c, &dx, &dw, &mut dy).unwrap();
    let got: Vec<f32> = s
        .clone_dtoh(&dy)
        .unwrap()
        .iter()
        .map(|v| v.to_f32())
        .collect();
    assert_close(&got, &conv_ref(&c, &xr, &wr), 1e-2, "conv2d f16");
}

#[test]
#[ignore = "needs a HIP device"]
fn conv_transpose2d_matches_a_host_reference() {
    let s = stream();
    let mut h = handle(&s);
    for (groups, output_padding) in [(1, [0, 0]), (2, [1, 0])] {
        let c = ConvTranspose2dConfig {
            batch: 2,
            in_channels: 4,
            in_h: 5,
            in_w: 6,
            out_channels: 6,
            kernel_h: 3,
            kernel_w: 3,
            groups,
            padding: [1, 1],
            output_padding,
            stride: [2, 2],
            dilation: [1, 1],
        };
        let x = values(c.batch * c.in_channels * c.in_h * c.in_w, 7);
        let w = values(
            c.in_channels * (c.out_channels / groups) * c.kernel_h * c.kernel_w,
            8,
        );
        let (oh, ow) = c.out_hw().unwrap();
        let (dx, dw) = (s.clone_htod(&x).unwrap(), s.clone_htod(&w).unwrap());
        let mut dy = DeviceBuffer::<f32>::alloc(&s, c.batch * c.out_channels * oh * ow).unwrap();
        h.conv_transpose2d(&c, &dx, &dw, &mut dy).unwrap();
        assert_close(
            &s.clone_dtoh(&dy).unwrap(),
            &conv_transpose_ref(&c, &x, &w),
            1e-4,
            "conv_transpose2d",
        );
    }
}

#[test]
#[ignore = "needs a HIP device"]
fn pooling_matches_a_host_reference() {
    let s = stream();
    let mut h = handle(&s);
    for mode in [PoolMode::Max, PoolMode::Average] {
        let c = Pool2dConfig {
            batch: 2,
            channels: 3,
            in_h: 9,
            in_w: 8,
            kernel: [3, 2],
            stride: [2, 2],
            padding: [0, 0],
            mode,
        };
        let x = values(c.input_dims().iter().product(), 9);
        let dx = s.clone_htod(&x).unwrap();
        let mut dy =
            DeviceBuffer::<f32>::alloc(&s, c.output_dims().unwrap().iter().product()).unwrap();
        h.pool2d(&c, &dx, &mut dy).unwrap();
        assert_close(
            &s.clone_dtoh(&dy).unwrap(),
            &pool_ref(&c, &x),
            1e-5,
            "pool2d",
        );
    }
    assert_eq!(h.cached_plans(), (0, 2));
}

#[test]
#[ignore = "needs a HIP device"]
fn short_buffers_are_rejected_before_miopen() {
    let s = stream();
    let mut h = handle(&s);
    let c = Conv2dConfig::conv1d(1, 2, 10, 2, 3, 1, 0, 1, 1);
    let x = s.clone_htod(&values(19, 1)).unwrap(); // needs 20
    let w = s.clone_htod(&values(12, 2)).unwrap();
    let mut y = DeviceBuffer::<f32>::alloc(&s, 16).unwrap();
    match h.conv2d(&c, &x, &w, &mut y) {
        Err(RocmError::InvalidArgument(m)) => assert!(m.contains("needs 20"), "{m}"),
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert_eq!(h.cached_plans(), (0, 0));
}
