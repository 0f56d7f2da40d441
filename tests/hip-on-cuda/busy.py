#!/usr/bin/env python3
"""GPU busy time per decode step, from the timeline libhoc_busy.so records (busy.c; issue 27's
target: GPU busy >= 80% of wall time during decode).

Input: busy.tsv, one record a line, `kind start_ns end_ns stream_id name` (kind kernel, memcpy or
memset; '#' lines are notes: dropped records, the end line with the totals).

Decode steps (the convention of profile.py): each step of the bench's decode loop ends with an
argmax kernel whose result the host reads back, so the ends of the kernels matching
--step-kernel (a regex, case-insensitive; default `argmax`) are the step boundaries. Matching
kernels with no other kernel between them count as one boundary. The first boundary ends the
prompt; --skip K (default 1) leaves out the first K decode steps after it (the first records
and instantiates the step's graph), and the window runs from the end of boundary K to the end
of boundary K + N, N = --steps (default: every step up to the last boundary). So it covers N
whole steps, each from one step's argmax to the next, and no prompt or setup.

Busy = length of the union of every kernel, memcpy and memset interval (all streams; kernels of
graph launches are records like any other), clipped to the window, over the window's length.

Record ONE decode pass: `candle-rocm-bench --profile --only ROW --decode-tokens 64` (the timed
mode runs several passes with prompts and pauses between them, and a window would span them;
the step-length spread below shows it when it happens).

Usage: busy.py busy.tsv [--step-kernel REGEX] [--skip K] [--steps N] [--top 10] [--tsv]
"""
import argparse
import collections
import re
import statistics
import sys

# One timeline record: kind (kernel, memcpy, memset), start and end in ns, stream, name.
Record = collections.namedtuple("Record", "kind start end stream name")


class BusyError(Exception):
    """The trace cannot give the figure asked for (too few steps, no step kernel)."""


def parse(lines):
    """busy.tsv's lines -> (records, notes): records sorted by (start, end), complete ones only
    (start > 0, end >= start); notes a dict: dropped (records CUPTI lost), cupti_errors (failed
    CUPTI calls), ended (the end line was written: the process exited normally), bad (lines
    that were not records, incomplete records included)."""
    records = []
    notes = {"dropped": 0, "cupti_errors": 0, "ended": False, "bad": 0}
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        if line.startswith("#"):
            f = line.split("\t")
            if f[0] == "# dropped" and len(f) > 1 and f[1].isdigit():
                notes["dropped"] += int(f[1])
            elif f[0] == "# end":
                notes["ended"] = True
                m = re.search(r"cupti_errors (\d+)", line)
                if m:
                    notes["cupti_errors"] = int(m.group(1))
            continue
        f = line.split("\t", 4)
        try:
            kind, start, end, stream = f[0], int(f[1]), int(f[2]), int(f[3])
            name = f[4] if len(f) > 4 else ""
        except (IndexError, ValueError):
            notes["bad"] += 1
            continue
        if kind not in ("kernel", "memcpy", "memset") or start <= 0 or end < start:
            notes["bad"] += 1
            continue
        records.append(Record(kind, start, end, stream, name))
    records.sort(key=lambda r: (r.start, r.end))
    return records, notes


def step_boundaries(records, pattern):
    """The step boundaries: the end of each run of kernels matching `pattern` (a regex,
    case-insensitive) with no other kernel between them, in time order."""
    rx = re.compile(pattern, re.IGNORECASE)
    ends = []
    in_run = False
    for r in records:
        if r.kind != "kernel":
            continue  # copies (the read-back) do not split or end a run
        if rx.search(r.name):
            if in_run:
                ends[-1] = max(ends[-1], r.end)
            else:
                ends.append(r.end)
                in_run = True
        else:
            in_run = False
    return ends


def select_window(ends, skip=1, steps=None):
    """(start_ns, end_ns, steps): from boundary `skip` to boundary `skip + steps` (steps:
    every one left when None). Raises BusyError when the trace holds too few."""
    if skip < 0:
        raise BusyError(f"--skip must be 0 or more, not {skip}")
    have = len(ends) - 1 - skip
    if steps is None:
        steps = have
    if steps < 1 or steps > have:
        raise BusyError(
            f"{len(ends)} step boundaries (step kernel ends): {max(have, 0)} whole steps after "
            f"skipping {skip}, {steps} asked for"
        )
    return ends[skip], ends[skip + steps], steps


def clip(intervals, lo, hi):
    """The intervals (start, end) cut to [lo, hi], empty ones left out."""
    out = []
    for s, e in intervals:
        s, e = max(s, lo), min(e, hi)
        if e > s:
            out.append((s, e))
    return out


def union_length(intervals, lo=None, hi=None):
    """Length of the union of intervals (start, end), clipped to the window [lo, hi] when both
    are given: overlapping and nested intervals count once, gaps not at all."""
    if lo is not None and hi is not None:
        intervals = clip(intervals, lo, hi)
    total = 0
    cur_s = cur_e = None
    for s, e in sorted(intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def summarize(records, pattern="argmax", skip=1, steps=None, top=10):
    """The figures of the window (see the module docs) as a dict."""
    ends = step_boundaries(records, pattern)
    if not ends:
        raise BusyError(f"no kernel matches the step kernel /{pattern}/")
    lo, hi, n = select_window(ends, skip, steps)
    window = hi - lo
    busy = union_length([(r.start, r.end) for r in records], lo, hi)
    inside = [r for r in records if r.end > lo and r.start < hi]
    per_kind = collections.Counter(r.kind for r in inside)
    kernel_ns = sum(min(r.end, hi) - max(r.start, lo) for r in inside if r.kind == "kernel")
    # name -> [launches, ns inside the window]; copies and fills by their names (memcpy_DtoH)
    agg = collections.defaultdict(lambda: [0, 0])
    for r in inside:
        a = agg[r.name or r.kind]
        a[0] += 1
        a[1] += min(r.end, hi) - max(r.start, lo)
    step_ns = [b - a for a, b in zip(ends[skip : skip + n], ends[skip + 1 : skip + n + 1])]
    return {
        "steps": n,
        "skipped": skip,
        "boundaries": len(ends),
        "window_us": window / 1e3,
        "us_per_step": window / n / 1e3,
        "busy_us_per_step": busy / n / 1e3,
        "busy_pct": 100.0 * busy / window if window > 0 else 0.0,
        "idle_us_per_step": (window - busy) / n / 1e3,
        "kernel_us_per_step": kernel_ns / n / 1e3,
        "kernels_per_step": per_kind["kernel"] / n,
        "memcpys_per_step": per_kind["memcpy"] / n,
        "memsets_per_step": per_kind["memset"] / n,
        "step_us_min": min(step_ns) / 1e3,
        "step_us_median": statistics.median(step_ns) / 1e3,
        "step_us_max": max(step_ns) / 1e3,
        "top": sorted(agg.items(), key=lambda kv: (-kv[1][1], kv[0]))[:top],
    }


def short(name, width=60):
    """A kernel name cut to `width` characters (no demangling)."""
    return name if len(name) <= width else name[: width - 3] + "..."


# The --tsv figures, in order (one `key<TAB>value` line each).
TSV_KEYS = (
    "steps", "window_us", "us_per_step", "busy_us_per_step", "busy_pct", "idle_us_per_step",
    "kernel_us_per_step", "kernels_per_step", "memcpys_per_step", "memsets_per_step",
    "step_us_min", "step_us_median", "step_us_max",
)


def warnings(fig, notes):
    """Lines that say why the figure may be wrong."""
    out = []
    if notes["dropped"]:
        out.append(f"WARNING: CUPTI dropped {notes['dropped']} records: busy time is too low")
    if notes["cupti_errors"]:
        out.append(f"WARNING: {notes['cupti_errors']} CUPTI calls failed (see the program's stderr)")
    if not notes["ended"]:
        out.append("WARNING: no end line: the process did not exit normally, last records missing")
    if fig and fig["step_us_max"] > 4 * fig["step_us_median"]:
        out.append(
            f"WARNING: a step of {fig['step_us_max']:.0f} us against a median of "
            f"{fig['step_us_median']:.0f}: the window may span a prompt, a pause or a second "
            "decode pass (record one pass: --profile)"
        )
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", metavar="busy.tsv", help="libhoc_busy.so's output (HOC_BUSY_OUT)")
    ap.add_argument("--step-kernel", default="argmax", help="regex of the kernel ending a step")
    ap.add_argument("--skip", type=int, default=1, help="decode steps left out after the prompt")
    ap.add_argument("--steps", type=int, default=None, help="steps in the window (default all)")
    ap.add_argument("--top", type=int, default=10, help="kernels listed by time")
    ap.add_argument("--tsv", dest="tsv_out", action="store_true",
                    help="one `key<TAB>value` line per figure, for scripts")
    a = ap.parse_args(argv)
    try:
        with open(a.trace, errors="replace") as f:
            records, notes = parse(f)
    except OSError as e:
        print(f"busy.py: {e}", file=sys.stderr)
        return 1
    if not records:
        print(f"busy.py: {a.trace} holds no records: was libhoc_busy.so loaded "
              "(CUDA_INJECTION64_PATH), and did the program reach the GPU?", file=sys.stderr)
        for w in warnings(None, notes):
            print(w, file=sys.stderr)
        return 1
    try:
        fig = summarize(records, a.step_kernel, a.skip, a.steps, a.top)
    except BusyError as e:
        print(f"busy.py: {a.trace}: {e}", file=sys.stderr)
        for w in warnings(None, notes):
            print(w, file=sys.stderr)
        return 1
    warns = warnings(fig, notes)
    if a.tsv_out:
        for k in TSV_KEYS:
            v = fig[k]
            print(f"{k}\t{v}" if isinstance(v, int) else f"{k}\t{v:.2f}")
        print(f"dropped\t{notes['dropped']}")
        print(f"cupti_errors\t{notes['cupti_errors']}")
        for w in warns:
            print(w, file=sys.stderr)
        return 0
    n = fig["steps"]
    kinds = collections.Counter(r.kind for r in records)
    print(f"{a.trace}: {len(records)} records ({kinds['kernel']} kernels, {kinds['memcpy']} memcpy, "
          f"{kinds['memset']} memset); {fig['boundaries']} step boundaries (/{a.step_kernel}/)")
    rows = [
        ("steps", f"{n} (after the prompt and {fig['skipped']} skipped)"),
        ("window us", f"{fig['window_us']:.0f}"),
        ("us per step", f"{fig['us_per_step']:.1f}"),
        ("busy us per step", f"{fig['busy_us_per_step']:.1f}"),
        ("busy %", f"{fig['busy_pct']:.1f}"),
        ("idle us per step", f"{fig['idle_us_per_step']:.1f}"),
        ("kernels per step", f"{fig['kernels_per_step']:.1f} (memcpy {fig['memcpys_per_step']:.1f}, "
                             f"memset {fig['memsets_per_step']:.1f})"),
        ("step us min / median / max", f"{fig['step_us_min']:.1f} / {fig['step_us_median']:.1f} / "
                                       f"{fig['step_us_max']:.1f}"),
    ]
    for k, v in rows:
        print(f"{k:<28} {v}")
    print(f"\ntop {len(fig['top'])} kernels (and copies) by GPU time inside the window, per step:")
    print(f"{'name':<60} {'launches':>8} {'us':>9} {'us/launch':>9} {'% window':>8}")
    for name, (cnt, ns) in fig["top"]:
        print(f"{short(name):<60} {cnt / n:>8.1f} {ns / n / 1e3:>9.1f} {ns / cnt / 1e3:>9.2f} "
              f"{100.0 * ns / (fig['window_us'] * 1e3):>8.1f}")
    for w in warns:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
