#!/usr/bin/env python3
"""Summarises profile.sh's runs: per backend, the timed rows (wall and host time per decoded
token) and, from Nsight Compute's per-kernel CSV of one `--profile` pass, the GPU time per
decode step and the kernels that take it.

A decode step is the stretch of kernels ending with an argmax launch (the bench reads each
step's argmax back to the host); everything before the first argmax (weight setup, prompt) is
left out.

Usage: profile.py --tokens N NAME TSV CSV [NAME TSV CSV ...] (CSV "-": timed rows only)
"""
import argparse
import collections
import csv
import io
import re
import sys


def read_rows(path):
    """The bench's `bench` lines as {(op, dtype): seconds}."""
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                p = line.rstrip("\n").split("\t")
                if p[0] == "bench" and len(p) >= 8:
                    rows[(p[2], p[4])] = float(p[5])
    except OSError as e:
        print(f"(no rows: {e})", file=sys.stderr)
    return rows


def read_kernels(path):
    """Nsight Compute's CSV: [(kernel name, ns)] in launch order ("-": no profile)."""
    if path == "-":
        return []
    try:
        text = open(path, errors="replace").read()
    except OSError as e:
        print(f"(no profile: {e})", file=sys.stderr)
        return []
    start = text.find('"ID"')
    if start < 0:
        return []
    out = []
    for r in csv.DictReader(io.StringIO(text[start:])):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        scale = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6}
        out.append((r["Kernel Name"], value * scale.get(unit, 1.0)))
    return out


def short(name):
    """A kernel name without template arguments and parameter lists."""
    name = re.sub(r"\(.*", "", name)
    depth, keep = 0, []
    for c in name:
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            keep.append(c)
    return "".join(keep).strip()[:60]


def steps(kernels):
    """The decode steps: lists of (name, ns), each ending with an argmax launch."""
    ends = [i for i, (n, _) in enumerate(kernels) if "argmax" in n.lower()]
    return [kernels[a + 1 : b + 1] for a, b in zip(ends, ends[1:])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, required=True)
    # The timed rows beside the profile: the safetensors llama's by default, or a GGUF row
    # (`gguf_decode_1.1b_q4_0`: f32 activations, no host row).
    ap.add_argument("--row", default="decode_llama_1.1b")
    ap.add_argument("runs", nargs="+")
    a = ap.parse_args()
    if len(a.runs) % 3:
        sys.exit("profile.py: arguments come in threes: NAME TSV CSV")
    runs = [a.runs[i : i + 3] for i in range(0, len(a.runs), 3)]
    print("## Decode, per token\n")
    print("| backend | dtype | wall µs/token | host µs/token | kernels/token | GPU µs/token (profiled pass, ncu) |")
    print("|---|---|---|---|---|---|")
    tops = {}
    for name, tsv, ncsv in runs:
        rows = read_rows(tsv)
        st = steps(read_kernels(ncsv))
        if ncsv != "-" and len(st) != a.tokens:
            print(f"({name}: found {len(st)} decode steps in the profile, expected {a.tokens})", file=sys.stderr)
        per_k = sum(len(s) for s in st) / max(len(st), 1)
        per_t = sum(ns for s in st for _, ns in s) / max(len(st), 1) / 1e3
        # The profiled pass runs the first dtype: f16 for the llama, f32 for a GGUF row.
        dtypes = ("f32",) if a.row.startswith("gguf") else ("f16", "bf16")
        for dtype in dtypes:
            wall = rows.get((a.row, dtype))
            host = rows.get((a.row + "_host", dtype))
            f = lambda v: f"{v * 1e6:.0f}" if v is not None else "-"
            gpu = f"{per_t:.0f}" if dtype == dtypes[0] and st else "-"
            kpt = f"{per_k:.0f}" if dtype == dtypes[0] and st else "-"
            print(f"| {name} | {dtype} | {f(wall)} | {f(host)} | {kpt} | {gpu} |")
        agg = collections.defaultdict(lambda: [0, 0.0])
        for s in st:
            for n, ns in s:
                agg[short(n)][0] += 1
                agg[short(n)][1] += ns
        tops[name] = (agg, max(len(st), 1))
    for name, (agg, n) in tops.items():
        if not agg:
            continue
        print(f"\n## {name}: kernels of one decode step ({a.row}), by GPU time\n")
        print("| kernel | launches/token | µs/token | µs/launch |")
        print("|---|---|---|---|")
        for k, (cnt, ns) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:25]:
            print(f"| {k} | {cnt / n:.0f} | {ns / n / 1e3:.1f} | {ns / cnt / 1e3:.2f} |")


if __name__ == "__main__":
    main()
