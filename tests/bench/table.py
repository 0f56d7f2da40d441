"""Joins the outputs of candle-rocm-bench (ours), candle-cuda-bench (Candle's CUDA backend) and
torch_bench.py (PyTorch eager) into one Markdown table: `cargo xtask bench`'s result.

Usage: python3 tests/bench/table.py OURS CANDLE_CUDA TORCH [--title TEXT] [--baseline FILE]
       [--peer NAME=FILE ...]
       python3 tests/bench/table.py --multi-gpu OURS TORCH [--title TEXT]
(--baseline: ours again with CANDLE_ROCM_FAST_KERNELS=0, i.e. candle's own kernels; --peer: rows
of another program in the same format, e.g. llama.cpp's from tests/bench/llamacpp_rows.py,
printed after the main table as a table of their own: the peer's rows, with ours and Candle
CUDA's of the same key beside them)
A missing or partial file leaves its columns empty ("-"). Ratios are speed ratios (the other's
time / ours): above 1 we are faster.
--multi-gpu: the rows of several GPUs instead (candle-rocm-bench --gpus N and torch_mgpu.py,
groups mgpu_*), one table per group with ours, PyTorch, their ratio and the issue's target, and
the tensor-parallel llama's N-GPU rows against its 1-GPU rows (see multi_gpu_table).
"""

import argparse
import os


def read(path):
    """(device line, {(group, op, shape, dtype): (seconds, work, unit)})."""
    rows, device = {}, "-"
    if not path or not os.path.exists(path):
        return device, rows
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if parts[0] == "device":
                device = " ".join(parts[1:])
            elif parts[0] == "bench" and len(parts) == 8:
                _, group, op, shape, dtype, secs, work, unit = parts
                rows[(group, op, shape, dtype)] = (float(secs), float(work), unit)
    return device, rows


def value(row):
    """The figure a reader wants for a row, and its unit."""
    secs, work, unit = row
    if unit == "bytes":
        return work / secs / 1e9, "GB/s"
    if unit == "flops":
        return work / secs / 1e12, "TFLOP/s"
    if unit == "calls":
        return secs * 1e6, "µs"
    if unit == "sequences":
        return secs * 1e3, "ms"
    if unit == "tokens":
        return work / secs, "tok/s"
    return secs, unit


def fmt(x):
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ours", nargs="?")
    p.add_argument("cuda", nargs="?")
    p.add_argument("torch", nargs="?")
    p.add_argument("--multi-gpu", nargs=2, metavar=("OURS", "TORCH"),
                   help="the rows of several GPUs: candle-rocm-bench --gpus N and torch_mgpu.py")
    p.add_argument("--title", default="cargo xtask bench")
    p.add_argument("--baseline", help="ours with CANDLE_ROCM_FAST_KERNELS=0 (candle's kernels)")
    p.add_argument("--peer", action="append", default=[], metavar="NAME=FILE",
                   help="another program's rows (e.g. llama.cpp), a table of their own")
    a = p.parse_args()
    if a.multi_gpu:
        (dev_o, ours), (dev_t, torch) = read(a.multi_gpu[0]), read(a.multi_gpu[1])
        print(multi_gpu_table(a.title, dev_o, ours, dev_t, torch))
        return
    if not (a.ours and a.cuda and a.torch):
        p.error("give OURS CANDLE_CUDA TORCH, or --multi-gpu OURS TORCH")
    (dev_o, ours), (dev_c, cuda), (dev_t, torch) = read(a.ours), read(a.cuda), read(a.torch)
    _, base = read(a.baseline)
    copies = {k[3]: v for k, v in ours.items() if k[1] == "copy"}
    print(f"## {a.title}\n")
    print(f"- ours: {dev_o}\n- Candle CUDA: {dev_c}\n- PyTorch: {dev_t}\n")
    print("| op | shape | dtype | ours | unit | of copy | Candle CUDA | PyTorch "
          "| ours vs Candle CUDA | ours vs PyTorch | ours, candle's kernels | fast kernels' gain |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    keys = list(ours) + [k for k in list(cuda) + list(torch) if k not in ours]
    seen, wins, compared = set(), 0, 0
    for k in keys:
        if k in seen:
            continue
        seen.add(k)
        group, op, shape, dtype = k
        o, c, t = ours.get(k), cuda.get(k), torch.get(k)
        ref = o or c or t
        _, unit = value(ref)
        vo, vc, vt = (value(r)[0] if r else None for r in (o, c, t))
        frac = None
        if o and unit == "GB/s" and "f32" in copies:
            frac = vo / value(copies["f32"])[0]
        rc = c[0] / o[0] if o and c else None
        rt = t[0] / o[0] if o and t else None
        b = base.get(k)
        vb = value(b)[0] if b else None
        rb = b[0] / o[0] if o and b else None
        if rc is not None:
            compared += 1
            wins += rc >= 1.0
        print(f"| {op} | {shape} | {dtype} | {fmt(vo)} | {unit} | {fmt(frac)} | {fmt(vc)} "
              f"| {fmt(vt)} | {fmt(rc)} | {fmt(rt)} | {fmt(vb)} | {fmt(rb)} |")
    print(f"\nRatios are the other's time over ours (above 1: ours is faster). "
          f"Ours at least as fast as Candle CUDA on {wins} of {compared} rows. "
          f"'of copy' is ours against our own f32 device-to-device copy.")
    peers = []
    for spec in a.peer:
        name, sep, path = spec.partition("=")
        if not sep:
            p.error(f"--peer takes NAME=FILE, not {spec!r}")
        peers.append((name, *read(path)))
    if peers:
        print()
        print(peer_table(ours, cuda, peers))


def peer_table(ours, cuda, peers):
    """The rows of other programs (peers: [(name, device line, rows)]) beside ours and Candle
    CUDA's of the same key, as Markdown: every key some peer has, in the peers' order."""
    names = [n for n, _, _ in peers]
    lines = [f"### Other programs on the same inputs: {', '.join(names)}\n"]
    lines += [f"- {n}: {d}" for n, d, _ in peers]
    lines.append("")
    lines.append("| op | shape | dtype | unit | ours | Candle CUDA | "
                 + " | ".join(names) + " | "
                 + " | ".join(f"ours vs {n}" for n in names) + " |")
    lines.append("|---" * (6 + 2 * len(names)) + "|")
    keys = []
    for _, _, rows in peers:
        keys += [k for k in rows if k not in keys]
    for k in keys:
        _, op, shape, dtype = k
        o, c = ours.get(k), cuda.get(k)
        ref = next(r for r in [o, c] + [rows.get(k) for _, _, rows in peers] if r)
        unit = value(ref)[1]
        vals = [value(r)[0] if r else None for r in [o, c] + [rows.get(k) for _, _, rows in peers]]
        ratios = [rows[k][0] / o[0] if o and k in rows else None for _, _, rows in peers]
        lines.append(f"| {op} | {shape} | {dtype} | {unit} | "
                     + " | ".join(fmt(v) for v in vals) + " | "
                     + " | ".join(fmt(r) for r in ratios) + " |")
    lines.append("\nRatios are the other's time over ours (above 1: ours is faster).")
    return "\n".join(lines)


# The targets for the rows of several GPUs (issue 29): ours / PyTorch, speed.
ALLREDUCE_TARGET, ALLREDUCE_FROM_MIB = 0.9, 64
P2P_TARGET = 0.8
# The tensor-parallel llama on 2 GPUs against 1: (op prefix, speed-up).
TP_TARGETS = (("decode", 1.5), ("prefill", 1.7))


def mib(shape):
    """1024 of "1024MiB", or None."""
    return int(shape[:-3]) if shape.endswith("MiB") and shape[:-3].isdigit() else None


def gpus_of(shape):
    """(2, "32l") of "2gpu_32l", or None."""
    n, sep, rest = shape.partition("gpu_")
    return (int(n), rest) if sep and n.isdigit() else None


def verdict(ratio, target):
    if target is None:
        return "-"
    if ratio is None:
        return f">= {target:.2f}: not measured"
    return f">= {target:.2f}: {'met' if ratio >= target else 'missed'}"


def multi_gpu_table(title, dev_o, ours, dev_t, torch):
    """The rows of several GPUs as Markdown: all-reduce bus bandwidth and device-to-device
    copies, ours beside PyTorch's with the ratio (PyTorch's time / ours: above 1 ours is
    faster) and the issue's target; the tensor-parallel llama's N-GPU tokens/s beside its 1-GPU
    tokens/s (ours only) with the speed-up and its target at 2 GPUs."""
    lines = [f"## {title}: several GPUs\n", f"- ours: {dev_o}", f"- PyTorch: {dev_t}", ""]
    met = total = 0
    sections = (
        ("mgpu_allreduce", "All-reduce (sum) over the GPUs, bus bandwidth as nccl-tests "
         "defines it (bytes / time x 2(n-1)/n); ours out of place through candle-rocm's Comm, "
         "PyTorch's torch.distributed (NCCL) in place"),
        ("mgpu_p2p", "Device-to-device copies, GPU 0 to GPU 1: ours Tensor::to_device, "
         "PyTorch tensor.to(\"cuda:1\")"),
    )
    for group, heading in sections:
        keys = [k for k in list(ours) + [k for k in torch if k not in ours] if k[0] == group]
        if not keys:
            continue
        lines += [f"### {heading}\n",
                  "| op | size | dtype | ours | PyTorch | unit | ours / PyTorch | target |",
                  "|---|---|---|---|---|---|---|---|"]
        for k in keys:
            _, op, shape, dtype = k
            o, t = ours.get(k), torch.get(k)
            unit = value(o or t)[1]
            ratio = t[0] / o[0] if o and t else None
            size = mib(shape)
            target = None
            if group == "mgpu_allreduce" and size is not None and size >= ALLREDUCE_FROM_MIB:
                target = ALLREDUCE_TARGET
            elif group == "mgpu_p2p":
                target = P2P_TARGET
            if target is not None:
                total += 1
                met += ratio is not None and ratio >= target
            vo, vt = (value(r)[0] if r else None for r in (o, t))
            lines.append(f"| {op} | {shape} | {dtype} | {fmt(vo)} | {fmt(vt)} | {unit} "
                         f"| {fmt(ratio)} | {verdict(ratio, target)} |")
        lines.append("")
    tp = {k: v for k, v in ours.items() if k[0] == "mgpu_tp" and gpus_of(k[2])}
    if tp:
        lines += ["### The tensor-parallel llama (random f16 weights; flash attention, or the "
                  "matmul path where the op ends in _matmul), ours on N GPUs against 1\n",
                  "| op | layers | dtype | 1 GPU | N GPUs | N | unit | N GPUs / 1 GPU | target |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for k, v in tp.items():
            _, op, shape, dtype = k
            n, layers = gpus_of(shape)
            if n == 1:
                continue
            one = tp.get((k[0], op, f"1gpu_{layers}", dtype))
            speedup = one[0] / v[0] if one else None
            target = next((x for p, x in TP_TARGETS if op.startswith(p)), None) if n == 2 else None
            if target is not None:
                total += 1
                met += speedup is not None and speedup >= target
            lines.append(f"| {op} | {layers} | {dtype} | {fmt(value(one)[0] if one else None)} "
                         f"| {fmt(value(v)[0])} | {n} | {value(v)[1]} | {fmt(speedup)} "
                         f"| {verdict(speedup, target)} |")
        singles = [k for k in tp if gpus_of(k[2])[0] == 1
                   and not any(gpus_of(j[2])[0] > 1 and j[1] == k[1] and j[3] == k[3]
                               and gpus_of(j[2])[1] == gpus_of(k[2])[1] for j in tp)]
        for k in singles:
            lines.append(f"| {k[1]} | {gpus_of(k[2])[1]} | {k[3]} | {fmt(value(tp[k])[0])} "
                         f"| - | - | {value(tp[k])[1]} | - | - |")
        lines.append("")
    lines.append(f"Ratios are speed ratios (above 1: ours, or N GPUs, faster). Targets met: "
                 f"{met} of {total}.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
