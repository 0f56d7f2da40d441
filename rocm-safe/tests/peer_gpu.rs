//! Copies between two GPUs (issue 29): direct peer to peer where the devices reach each other
//! and staged through pinned host memory otherwise (forced here too, so both routes run on
//! any pair), in both directions, with offsets on both sides, in f32, f16 and bf16, from one
//! element to 64 MiB, checked against the host values. Ignored in CI (no GPU); the
//! HIP-on-CUDA harness runs it where it sees two GPUs (run.sh skips it, with a row, on one).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use half::{bf16, f16};
use rocm_safe::peer::{copy_peer, copy_staged, PeerRoute, STAGE_CHUNK};
use rocm_safe::{Device, DeviceRepr, Stream};

fn two_streams() -> [Arc<Stream>; 2] {
    let n = Device::count().unwrap_or_else(|e| panic!("no HIP device for a GPU test: {e}"));
    assert!(n >= 2, "peer copies need 2 GPUs, this machine has {n}");
    [0, 1].map(|i| Stream::new(&Device::new(i).unwrap()).unwrap())
}

/// Element counts: one element, a few odd sizes, both sides of a staged chunk, and 64 MiB.
fn lens<T>() -> Vec<usize> {
    let size = std::mem::size_of::<T>();
    vec![
        1,
        3,
        1001,
        STAGE_CHUNK / size - 1,
        STAGE_CHUNK / size + 7,
        (64 << 20) / size,
    ]
}

/// Copies `host[off..off + len]` from `from` to offset `dst_off` of a buffer on `to`, by each
/// route, and checks the copied range against the host values (and that the rest of the
/// destination is untouched).
fn round<T: DeviceRepr + PartialEq + std::fmt::Debug>(
    streams: &[Arc<Stream>; 2],
    from: usize,
    make: impl Fn(usize) -> T,
    len: usize,
) {
    let to = 1 - from;
    let (off, dst_off) = (5, 11);
    let host: Vec<T> = (0..off + len + 3).map(&make).collect();
    let src = streams[from].clone_htod(&host).unwrap();
    for staged in [false, true] {
        let fill: Vec<T> = (0..dst_off + len + 2).map(|i| make(i + 7)).collect();
        let mut dst = streams[to].clone_htod(&fill).unwrap();
        let route = {
            let view = src.slice(off..off + len).unwrap();
            let mut out = dst.slice_mut(dst_off..dst_off + len).unwrap();
            if staged {
                copy_staged(&view, &mut out).unwrap()
            } else {
                copy_peer(&view, &mut out).unwrap()
            }
        };
        if staged {
            assert_eq!(route, PeerRoute::Staged);
        } else {
            assert_ne!(route, PeerRoute::SameDevice);
            if len == 1 {
                println!("device {from} -> {to}: {route:?}");
            }
        }
        let got = streams[to].clone_dtoh(&dst).unwrap();
        let what = format!(
            "{} x {len}, device {from} -> {to}, {route:?}",
            std::any::type_name::<T>()
        );
        assert!(
            got[dst_off..dst_off + len] == host[off..off + len],
            "{what}"
        );
        assert!(
            got[..dst_off] == fill[..dst_off],
            "{what}: before the range"
        );
        assert!(
            got[dst_off + len..] == fill[dst_off + len..],
            "{what}: after the range"
        );
    }
}

#[test]
#[ignore = "needs 2 HIP devices"]
fn peer_copies_in_both_directions_every_size_and_dtype() {
    let streams = two_streams();
    for from in [0, 1] {
        for len in lens::<f32>() {
            round(&streams, from, |i| (i % 65_521) as f32 * 0.5, len);
        }
        for len in lens::<f16>() {
            round(&streams, from, |i| f16::from_f32((i % 2039) as f32), len);
        }
        for len in lens::<bf16>() {
            round(&streams, from, |i| bf16::from_f32((i % 251) as f32), len);
        }
    }
    for s in &streams {
        s.device().check_err().unwrap();
    }
}

#[test]
#[ignore = "needs 2 HIP devices"]
fn peer_access_is_probed_once_and_mismatches_are_refused() {
    let streams = two_streams();
    let rt = streams[0].device().runtime();
    let first = rt.peer_access(1, 0).unwrap();
    assert_eq!(rt.peer_access(1, 0).unwrap(), first, "cached");
    assert!(
        !rt.peer_access(0, 0).unwrap(),
        "a device is not its own peer"
    );
    let src = streams[0].clone_htod(&[1.0f32; 4]).unwrap();
    let mut dst = streams[1].clone_htod(&[0.0f32; 5]).unwrap();
    let e = copy_peer(&src, &mut dst).unwrap_err();
    assert!(e.to_string().contains("source has 4 elements"), "{e}");
    // Empty copies are no-ops on either route.
    let empty = streams[0].clone_htod::<f32>(&[]).unwrap();
    let mut empty_dst = streams[1].clone_htod::<f32>(&[]).unwrap();
    copy_peer(&empty, &mut empty_dst).unwrap();
    copy_staged(&empty, &mut empty_dst).unwrap();
}
