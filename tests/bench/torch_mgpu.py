"""PyTorch's rows of several GPUs for `cargo xtask bench` (issue 29): the same rows, sizes and
schedule as candle-rocm-bench --gpus N (tests/bench/src/mgpu/), printed in its line format so
table.py --multi-gpu can join them.

- mgpu_allreduce: torch.distributed.all_reduce (sum, in place) with the NCCL backend, one
  process per GPU; nccl-tests' bus bandwidth (work = bytes * 2(n-1)/n);
- mgpu_p2p: tensor.to("cuda:1") from cuda:0, in one process.

Method (as ours): WARMUP calls, then SAMPLES batches of iters_for(bytes) back-to-back calls
closed by a synchronize, each batch started together on every rank (a one-element all_reduce)
and counted at the slowest rank's time (all_reduce MAX); the median batch / iters.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, set before NCCL starts).

Usage: python3 tests/bench/torch_mgpu.py [--gpus N] [--only WORD,...]
"""

import argparse
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WARMUP = 5
SAMPLES = 10
# KiB (ours: mgpu/allreduce.rs SIZES_KIB): 8, 64, 256 KiB, then 1 MiB to 1 GiB.
ALLREDUCE_KIB = (8, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
P2P_MIB = (1, 16, 256, 1024)
DTYPES = ((torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"))


def iters_for(nbytes):
    """Calls per batch: 4 GiB a batch, between 5 and 200 calls (ours: mgpu::iters_for)."""
    return min(max((4 << 30) // max(nbytes, 1), 5), 200)


def mib_label(nbytes):
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


def wanted(only, group, op):
    return not only or any(w in group or w in op for w in only)


def row(group, op, shape, dtype, secs, work, unit):
    print(f"bench\t{group}\t{op}\t{shape}\t{dtype}\t{secs:.9e}\t{work}\t{unit}", flush=True)


def p2p_rows(only):
    """tensor.to("cuda:1") from cuda:0, in this process."""
    group, op = "mgpu_p2p", "to_device_0to1"
    if not wanted(only, group, op):
        return
    d0, d1 = torch.device("cuda:0"), torch.device("cuda:1")

    def sync():
        torch.cuda.synchronize(d1)
        torch.cuda.synchronize(d0)

    for mib in P2P_MIB:
        nbytes = mib << 20
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=d0)
        for _ in range(WARMUP):
            x.to(d1)
        sync()
        iters = iters_for(nbytes)
        samples = []
        for _ in range(SAMPLES):
            t = time.perf_counter()
            for _ in range(iters):
                x.to(d1)
            sync()
            samples.append((time.perf_counter() - t) / iters)
        row(group, op, mib_label(nbytes), "f32", statistics.median_high(samples), nbytes, "bytes")
        del x


def allreduce_rank(rank, world, port, only):
    """One rank of the all-reduce rows (torch.multiprocessing.spawn's entry); rank 0 prints."""
    torch.cuda.set_device(rank)
    dev = torch.device(f"cuda:{rank}")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=dev)
    group, op = "mgpu_allreduce", f"all_reduce_{world}gpu"
    one = torch.zeros(1, dtype=torch.float32, device=dev)
    try:
        for dtype, name in DTYPES:
            for nbytes in (k << 10 for k in ALLREDUCE_KIB):
                x = torch.ones(nbytes // torch.tensor([], dtype=dtype).element_size(),
                               dtype=dtype, device=dev)
                for _ in range(WARMUP):
                    dist.all_reduce(x)
                torch.cuda.synchronize(dev)
                iters = iters_for(nbytes)
                samples = []
                for _ in range(SAMPLES):
                    dist.all_reduce(one)
                    torch.cuda.synchronize(dev)
                    t = time.perf_counter()
                    for _ in range(iters):
                        dist.all_reduce(x)
                    torch.cuda.synchronize(dev)
                    secs = torch.tensor([time.perf_counter() - t], dtype=torch.float64, device=dev)
                    dist.all_reduce(secs, op=dist.ReduceOp.MAX)
                    samples.append(secs.item() / iters)
                if rank == 0:
                    bus = nbytes * 2.0 * (world - 1) / world
                    row(group, op, mib_label(nbytes), name, statistics.median_high(samples),
                        bus, "bytes")
                del x
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpus", type=int, default=2)
    p.add_argument("--only", default="")
    a = p.parse_args()
    only = [w for w in a.only.split(",") if w]
    have = torch.cuda.device_count()
    if a.gpus < 2 or have < a.gpus:
        sys.exit(f"torch_mgpu.py: --gpus {a.gpus} needs at least 2 GPUs; {have} visible")
    nccl = torch.cuda.nccl.version()
    nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    print(f"device\tpytorch-{torch.__version__} nccl-{nccl}"
          f"\t{a.gpus}x {torch.cuda.get_device_name(0)}", flush=True)
    p2p_rows(only)
    torch.cuda.empty_cache()
    if wanted(only, "mgpu_allreduce", f"all_reduce_{a.gpus}gpu"):
        mp.spawn(allreduce_rank, args=(a.gpus, free_port(), only), nprocs=a.gpus, join=True)


if __name__ == "__main__":
    main()
