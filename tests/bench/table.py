"""Joins the outputs of candle-rocm-bench (ours), candle-cuda-bench (Candle's CUDA backend) and
torch_bench.py (PyTorch eager) into one Markdown table: `cargo xtask bench`'s result.

Usage: python3 tests/bench/table.py OURS CANDLE_CUDA TORCH [--title TEXT] [--baseline FILE]
       [--peer NAME=FILE ...]
(--baseline: ours again with CANDLE_ROCM_FAST_KERNELS=0, i.e. candle's own kernels; --peer: rows
of another program in the same format, e.g. llama.cpp's from tests/bench/llamacpp_rows.py,
printed after the main table as a table of their own: the peer's rows, with ours and Candle
CUDA's of the same key beside them)
A missing or partial file leaves its columns empty ("-"). Ratios are speed ratios (the other's
time / ours): above 1 we are faster.
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
    p.add_argument("ours")
    p.add_argument("cuda")
    p.add_argument("torch")
    p.add_argument("--title", default="cargo xtask bench")
    p.add_argument("--baseline", help="ours with CANDLE_ROCM_FAST_KERNELS=0 (candle's kernels)")
    p.add_argument("--peer", action="append", default=[], metavar="NAME=FILE",
                   help="another program's rows (e.g. llama.cpp), a table of their own")
    a = p.parse_args()
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


if __name__ == "__main__":
    main()
