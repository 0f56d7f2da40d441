"""Turns llama.cpp's `llama-bench -o json` output into candle-rocm-bench's rows, so that
table.py can put llama.cpp next to ours on the same GGUF files (tests/hip-on-cuda/llamacpp.sh).

Usage: python3 tests/bench/llamacpp_rows.py OUT_PREFIX FILE.json [FILE.json ...]
Writes OUT_PREFIX-fa1.tsv (flash attention on) and OUT_PREFIX-fa0.tsv (off), each a `device`
line and `bench model <op> <shape> <dtype> <seconds per token> 1 tokens` rows, and
OUT_PREFIX.json (every test of every input, as one list).

Row keys are ours for the same file (tests/bench/src/gguf.rs):
- `gguf-<shape>-<mix>.gguf` (`candle-rocm-bench --write-gguf`): pp -> gguf_prefill_<shape>_<mix>
  `prompt<n>`, tg -> gguf_decode_<shape>_<mix> `prompt16` (ours decodes after a 16-token
  prompt, llama-bench from an empty context), tg at depth d (`-d d`) -> `prompt<d>` (ours
  after a d-token prompt, `--decode-depth`); the f16 file's tg is keyed as our f16 decode of
  the same shape (`decode_llama_<shape>`, dtype f16: the same weights through safetensors),
  its pp as `prefill_llama_<shape>` (no row of ours); with flash attention on (`-fa 1`)
  those keys take our flash-attention rows' names (`..._flash`), so each llama.cpp mode sits
  beside our row of the same attention;
- any other file (BENCH_GGUF): gguf_prefill_file `prompt<n> <name>`, gguf_decode_file
  `prompt16 <name>`, as ours' `--gguf` rows.
A test that mixes prompt and generation (`-pg`) has no row of ours and is skipped.
"""

import json
import os
import re
import sys

SYNTHETIC = re.compile(r"gguf-(?P<shape>[^-]+)-(?P<mix>.+)\.gguf")


def key(model_filename, n_prompt, n_gen, n_depth=0, flash=False):
    """(group, op, shape, dtype) of a llama-bench test, or None when ours has no such row;
    `flash`: llama.cpp ran with flash attention, keyed as our flash rows of the synthetic
    files."""
    name = os.path.basename(model_filename)
    if n_prompt > 0 and n_gen == 0 and n_depth == 0:
        kind, size = "prefill", f"prompt{n_prompt}"
    elif n_gen > 0 and n_prompt == 0:
        # Decode from an empty context, or after n_depth cached positions (`-d`), as ours'
        # rows after a prompt of 16 or of --decode-depth tokens.
        kind, size = "decode", f"prompt{n_depth}" if n_depth > 0 else "prompt16"
    else:
        return None
    m = SYNTHETIC.fullmatch(name)
    suffix = "_flash" if flash else ""
    if m and m["mix"] == "f16":
        return ("model", f"{kind}_llama_{m['shape']}{suffix}", size, "f16")
    if m:
        return ("model", f"gguf_{kind}_{m['shape']}_{m['mix']}{suffix}", size, "f32")
    return ("model", f"gguf_{kind}_file", f"{size} {name}", "f32")


def rows(tests):
    """{flash_attn (0 or 1): [(key, seconds per token)]} and a device description per mode."""
    out, device = {0: [], 1: []}, {}
    for t in tests:
        fa = 1 if int(t.get("flash_attn", 0)) == 1 else 0
        k = key(t["model_filename"], int(t["n_prompt"]), int(t["n_gen"]),
                int(t.get("n_depth", 0) or 0), flash=fa == 1)
        ts = float(t.get("avg_ts") or 0.0)
        if k is None or ts <= 0.0:
            continue
        out[fa].append((k, 1.0 / ts))
        device.setdefault(
            fa,
            f"llama.cpp {t.get('build_commit', '?')} ({t.get('backends', '?')}, "
            f"{t.get('gpu_info', '?')}, flash attention {'on' if fa else 'off'}, "
            f"-ngl {t.get('n_gpu_layers', '?')}; its decode rows start from an empty context, "
            f"ours after a 16-token prompt)",
        )
    return out, device


def load(paths):
    """The tests of every llama-bench JSON file (a list each; an empty or cut file adds none)."""
    tests = []
    for path in paths:
        with open(path) as f:
            text = f.read().strip()
        if not text:
            continue
        try:
            tests += json.loads(text)
        except json.JSONDecodeError as e:
            print(f"llamacpp_rows.py: {path} is not llama-bench JSON ({e}), skipped",
                  file=sys.stderr)
    return tests


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    prefix, paths = sys.argv[1], sys.argv[2:]
    tests = load(paths)
    by_fa, device = rows(tests)
    with open(f"{prefix}.json", "w") as f:
        json.dump(tests, f, indent=1)
    for fa in (1, 0):
        with open(f"{prefix}-fa{fa}.tsv", "w") as f:
            desc = device.get(fa, f"llama.cpp (no rows, flash attention {'on' if fa else 'off'})")
            f.write(f"device\t{desc}\n")
            for (group, op, shape, dtype), secs in by_fa[fa]:
                f.write(f"bench\t{group}\t{op}\t{shape}\t{dtype}\t{secs:.9e}\t1\ttokens\n")
    print(f"llamacpp_rows.py: {len(by_fa[1])} rows with flash attention, {len(by_fa[0])} without",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
