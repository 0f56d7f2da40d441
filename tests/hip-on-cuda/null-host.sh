#!/usr/bin/env bash
# The host side of the stack on any Linux machine, no GPU: candle-rocm-bench's decoder rows over
# the HIP-on-CUDA double linked against null_cuda.c (a driver that drops every launch and GEMM),
# so what is timed is candle-core, candle-rocm, rocm-safe, rocm-sys and the double, not a driver
# or a GPU. Figures are host microseconds per decoded token; results are meaningless.
#
#   bash tests/hip-on-cuda/null-host.sh [BENCH]        # BENCH: a candle-rocm-bench binary
#   PERF=1 bash tests/hip-on-cuda/null-host.sh         # and a `perf record -g` profile of it
#
# BENCH defaults to tests/target/release/candle-rocm-bench (`cargo xtask bench` builds it).
# NULL_ONLY picks the rows (decode_llama by default), NULL_TOKENS the decode steps (64).
set -euo pipefail
cd "$(dirname "$0")/../.."
bench="${1:-tests/target/release/candle-rocm-bench}"
[ -x "$bench" ] || { echo "null-host.sh: $bench is missing: run \`cargo xtask bench\` first" >&2; exit 2; }
out="${OUT:-target/null-host}"
mkdir -p "$out/kernels"
out="$(cd "$out" && pwd)"
bash tests/hip-on-cuda/build.sh --null "$out/lib" > "$out/build.log"
# candle-rocm looks for <module>.co for the null device's "sm_90": any bytes load.
for f in kernels/hip/*.hip; do echo null > "$out/kernels/$(basename "$f" .hip).co"; done
python3 - "$out/kernels" << 'PY'
import pathlib, re, sys
src = pathlib.Path("kernels/src/lib.rs").read_text()
for name in re.findall(r'Module::\w+ => "(\w+)"', src):
    (pathlib.Path(sys.argv[1]) / f"{name}.co").write_text("null\n")
PY
run=("$bench" --only "${NULL_ONLY:-decode_llama}" --decode-tokens "${NULL_TOKENS:-64}")
export ROCM_SYS_HIP_LIB="$out/lib/libamdhip64.so" CANDLE_ROCM_KERNELS_DIR="$out/kernels"
if [ "${PERF:-0}" = 1 ]; then
    perf record -F 2000 -g -o "$out/perf.data" "${run[@]}" > "$out/rows.tsv"
    perf report -i "$out/perf.data" --no-children --sort symbol --stdio 2> /dev/null \
        | grep -E "^ +[0-9.]+%" | head -40 > "$out/perf-top.txt" || true
else
    NULL_CUDA_STATS=1 "${run[@]}" > "$out/rows.tsv"
fi
awk -F'\t' '$1 == "bench" { printf "%-28s %-5s %8.0f host us/token\n", $3, $5, $6 * 1e6 }' "$out/rows.tsv"
[ -f "$out/perf-top.txt" ] && { echo "== perf, top symbols"; cat "$out/perf-top.txt"; }
true
