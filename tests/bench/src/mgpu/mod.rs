//! The rows of several GPUs (`--gpus N`, issue 29), beside PyTorch's of the same machine
//! (`tests/bench/torch_mgpu.py`, same sizes, same schedule; `tests/bench/table.py
//! --multi-gpu` joins them):
//!
//! - `mgpu_allreduce`: RCCL's all-reduce through candle-rocm's `Comm` on `Tensor`s
//!   ([`allreduce`]), bus bandwidth as nccl-tests defines it;
//! - `mgpu_p2p`: `Tensor::to_device` from GPU 0 to GPU 1 ([`p2p`]);
//! - `mgpu_tp`: the demo's tensor-parallel llama (`candle_rocm_demo::tp`) at the 7B shape with
//!   random f16 weights, prefill and decode tokens/s on 1 GPU and on N ([`tp`]).
//!
//! One process per GPU, as torchrun and the demo's `--gpus` run them. This process is rank 0:
//! it first runs the rows of one process (the peer copies, the llama on one GPU), then starts
//! ranks 1..N as copies of itself (`--rank-worker`, torchrun's variables and
//! `NCCL_NVLS_ENABLE=0` set by `candle_rocm_demo::tp::spawn_ranks`), serves their rendezvous,
//! joins RCCL's communicator on GPU 0 and runs the rows of N ranks; every rank runs them in the
//! same order with the same iteration counts (the collectives pair up call by call), and only
//! rank 0 prints. The group names all start with `mgpu`, so `--only mgpu` picks every row.
//!
//! # Method
//! The all-reduce and copy rows time fixed schedules ([`iters_for`]: the same on every rank,
//! since a rank must not decide alone how many collectives it queues): [`WARMUP`] calls, then
//! [`SAMPLES`] batches of `iters` back-to-back calls closed by one synchronize (of both
//! devices for a copy), each all-reduce batch started together on every rank (a one-element
//! all-reduce and a wait) and counted at the slowest rank's time; the row is the median batch
//! divided by `iters`. The llama's rows: see [`tp`].

pub(crate) mod allreduce;
pub(crate) mod p2p;
pub(crate) mod tp;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use candle_rocm::collective::{Comm, ReduceOp};
use candle_rocm_demo::tp::{join, spawn_ranks, wait_ranks, World};
use rocm_safe::rendezvous::{RankEnv, Rendezvous};

use crate::cli::Cli;
use crate::runner::{median, Bench};

/// Warm-up calls before a row's batches.
pub(crate) const WARMUP: usize = 5;
/// Batches per row (the row reports their median).
pub(crate) const SAMPLES: usize = 10;
/// Bounds every rendezvous wait and the joining of the communicator.
const TIMEOUT: Duration = Duration::from_secs(120);
/// How long rank 0 waits for the other ranks to exit after the last row.
const EXIT_LIMIT: Duration = Duration::from_secs(60);

/// Calls per batch for a row that moves `bytes` per call: 4 GiB a batch, between 5 and 200
/// calls (200 at 16 MiB and below, 5 at 1 GiB). `tests/bench/torch_mgpu.py` uses the same.
pub(crate) fn iters_for(bytes: usize) -> usize {
    ((4usize << 30) / bytes.max(1)).clamp(5, 200)
}

/// A size's name in the shape column: `1MiB`, `1024MiB`.
pub(crate) fn mib_label(bytes: usize) -> String {
    format!("{}MiB", bytes >> 20)
}

/// [`mib_label`], or `8KiB` below 1 MiB.
pub(crate) fn size_label(bytes: usize) -> String {
    if bytes < 1 << 20 {
        format!("{}KiB", bytes >> 10)
    } else {
        mib_label(bytes)
    }
}

/// `--gpus N` on rank 0 (this process): the rows of one process, then the ranks (see the
/// module comment). `b.dev` is GPU 0, or the CPU with `--cpu` (then only the llama on one
/// device runs: the rows of several devices need RCCL).
pub(crate) fn run(b: &Bench, cli: &Cli, gpus: usize) -> Result<()> {
    if gpus == 0 {
        bail!("--gpus 0: give at least 1");
    }
    let cpu = b.dev.is_cpu();
    if cpu && gpus > 1 {
        bail!("--cpu runs the rows of one device only (--gpus 1): the others need RCCL and GPUs");
    }
    if gpus > 1 && std::env::var("NCCL_NVLS_ENABLE").as_deref() != Ok("0") {
        eprintln!(
            "mgpu: NCCL_NVLS_ENABLE is not 0 in this environment; the harness keeps NVLink \
             multicast off (tests/hip-on-cuda/setup.sh exports it)"
        );
    }
    let spec = tp::Spec::from_cli(cli, !cpu)?;
    // The rows of this process alone: a failure is reported and the later rows still run.
    let mut failed = Vec::new();
    if gpus > 1 && p2p::wanted(b) {
        let r = candle_rocm::device(1)
            .context("opening GPU 1 for the peer copies")
            .and_then(|dev1| p2p::rows(b, &dev1));
        note_failure(&mut failed, p2p::GROUP, r);
    }
    let solo: Arc<dyn World> = Arc::new(candle_rocm_demo::tp::Solo);
    note_failure(
        &mut failed,
        "mgpu_tp (1 GPU)",
        tp::rows(b, &solo, &spec, true),
    );
    if gpus > 1 && wanted_by_ranks(b, gpus, &spec) {
        note_failure(
            &mut failed,
            "the rows of several ranks",
            ranks(b, gpus, &spec),
        );
    }
    if !failed.is_empty() {
        bail!("these rows failed (see above): {}", failed.join(", "));
    }
    Ok(())
}

/// Reports `r`'s error, if any, as `what`'s, and keeps its name in `failed`.
fn note_failure(failed: &mut Vec<String>, what: &str, r: Result<()>) {
    if let Err(e) = r {
        eprintln!("mgpu: {what} failed: {e:#}");
        failed.push(what.to_string());
    }
}

/// Rank 0's part of the rows of `gpus` ranks: starts ranks 1.., serves their rendezvous,
/// joins the communicator on GPU 0, runs the rows with them and waits for them to exit.
fn ranks(b: &Bench, gpus: usize, spec: &tp::Spec) -> Result<()> {
    let env = RankEnv {
        rank: 0,
        world_size: gpus,
        master_addr: "127.0.0.1".into(),
        master_port: 0,
        local_rank: Some(0),
    };
    let rdzv = Rendezvous::connect(env, TIMEOUT).context("serving the ranks' rendezvous")?;
    let port = rdzv
        .server_addr()
        .context("rank 0 serves no rendezvous store")?
        .port();
    let exe = std::env::current_exe().context("finding this program to start the ranks")?;
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    args.push("--rank-worker".into());
    let children = spawn_ranks(&exe, &args, 1..gpus, gpus, port, &[])?;
    eprintln!("mgpu: ranks 1..{gpus} started, rendezvous on 127.0.0.1:{port}");
    let result = Comm::from_rendezvous(&rdzv, 0)
        .context("joining the communicator on GPU 0")
        .and_then(|comm| ranked_rows(b, &comm, &rdzv, spec, true));
    // On a failure the others get a few seconds to notice (their collectives fail with ours)
    // before they are killed; after the last row they leave together with this rank.
    let limit = if result.is_ok() {
        EXIT_LIMIT
    } else {
        Duration::from_secs(5)
    };
    let exited = wait_ranks(children, Duration::from_secs(5), Some(limit));
    result?;
    exited.context("the other ranks")?;
    Ok(())
}

/// `--rank-worker`: a rank 1..N that rank 0 started. Joins through torchrun's variables and
/// runs the rows of N ranks with rank 0, printing nothing.
pub(crate) fn worker(cli: &Cli) -> Result<()> {
    let (rdzv, comm) = join(TIMEOUT)?;
    let b = Bench {
        dev: comm.device().clone(),
        only: cli.only.clone(),
        shapes: cli.shape.clone(),
        n: cli.elements,
        profile: false,
    };
    let spec = tp::Spec::from_cli(cli, true)?;
    ranked_rows(&b, &comm, &rdzv, &spec, false)
}

/// Whether `--only` selects a row of several ranks (else rank 0 starts no process).
fn wanted_by_ranks(b: &Bench, gpus: usize, spec: &tp::Spec) -> bool {
    allreduce::wanted(b, gpus) || tp::wanted(b, spec)
}

/// The rows of every rank, in the same order on each; `print` on rank 0 only. Ends with the
/// ranks meeting, so they tear the communicator down together.
fn ranked_rows(
    b: &Bench,
    comm: &Comm,
    rdzv: &Rendezvous,
    spec: &tp::Spec,
    print: bool,
) -> Result<()> {
    allreduce::rows(b, comm, print)?;
    let world: Arc<dyn World> = Arc::new(comm.clone());
    tp::rows(b, &world, spec, print)?;
    rdzv.barrier("mgpu-done")
        .context("meeting the other ranks at the end")?;
    Ok(())
}

/// Every rank starts here together: a one-element all-reduce, waited for.
pub(crate) fn start_together(comm: &Comm) -> Result<()> {
    let one = Tensor::zeros(1, DType::F32, comm.device())?;
    drop(comm.all_reduce(&one, ReduceOp::Sum)?);
    comm.wait()?;
    Ok(())
}

/// The largest of every rank's `secs`.
pub(crate) fn slowest(comm: &Comm, secs: f64) -> Result<f64> {
    let t = Tensor::new(&[secs], comm.device())?;
    let max = comm.all_reduce(&t, ReduceOp::Max)?.to_vec1::<f64>()?;
    max.first()
        .copied()
        .context("the all-reduce of one time gave no element")
}

/// Runs `batch` (which queues `iters` calls and waits for them, returning its seconds)
/// [`SAMPLES`] times, each as [`start_together`] starts it, and returns the median of the
/// slowest rank's seconds per call.
pub(crate) fn timed(
    comm: &Comm,
    iters: usize,
    mut batch: impl FnMut() -> Result<f64>,
) -> Result<f64> {
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        start_together(comm)?;
        let secs = batch()?;
        samples.push(slowest(comm, secs)? / iters as f64);
    }
    Ok(median(samples))
}

/// Waits for every queued op on `devs`.
pub(crate) fn sync_all(devs: &[&Device]) -> Result<()> {
    for d in devs {
        d.synchronize()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_match_the_torch_script() {
        // tests/bench/torch_mgpu.py's iters_for gives the same counts.
        let mib = |m: usize| m << 20;
        assert_eq!(iters_for(mib(1)), 200);
        assert_eq!(iters_for(mib(16)), 200);
        assert_eq!(iters_for(mib(64)), 64);
        assert_eq!(iters_for(mib(256)), 16);
        assert_eq!(iters_for(mib(1024)), 5);
        assert_eq!(mib_label(mib(1024)), "1024MiB");
        assert_eq!(size_label(8 << 10), "8KiB");
        assert_eq!(size_label(mib(4)), "4MiB");
    }
}
