#!/usr/bin/env bash
# The host side of the stack on any Linux machine, no GPU: candle-rocm-bench's decoder rows over
# the HIP-on-CUDA double linked against null_cuda.c (a driver that drops every launch and GEMM),
# so what is timed is candle-core, candle-rocm, rocm-safe, rocm-sys and the double, not a driver
# or a GPU. Figures are host microseconds per decoded token; results are meaningless.
#
#   bash tests/hip-on-cuda/null-host.sh [BENCH]        # BENCH: a candle-rocm-bench binary
#   PERF=1 bash tests/hip-on-cuda/null-host.sh         # and a `perf record -g` profile of it
#   COUNT=1 bash tests/hip-on-cuda/null-host.sh        # exact counts per decoded token instead
#
# COUNT=1 runs each row of COUNT_ROWS (default: the f16 decode on the matmul and the flash
# attention path, and the synthetic GGUF q4_0 decode) twice under valgrind's cachegrind, with
# COUNT_STEPS (default "4 20") decode steps, and prints the difference per token: host
# instructions (exact, unlike times on a shared machine), kernel launches, GEMMs and raw device
# allocations, then the launches per token of each kernel (NULL_CUDA_STATS=2).
# The decode_llama and synthetic gguf_decode_1.1b_* rows run one `--profile` pass each; other
# rows (a real GGUF file's) their three timed runs (so the difference covers three times the
# steps).
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
if [ "${COUNT:-0}" = 1 ]; then
    command -v valgrind > /dev/null || { echo "null-host.sh: COUNT=1 needs valgrind" >&2; exit 2; }
    read -r a b <<< "${COUNT_STEPS:-4 20}"
    for row in ${COUNT_ROWS:-decode_llama_1.1b decode_llama_1.1b_flash gguf_decode_1.1b_q4_0}; do
        k=3 extra=()
        case "$row" in decode_llama* | gguf_decode_1.1b_*) k=1 extra=(--profile) ;; esac
        for n in "$a" "$b"; do
            NULL_CUDA_STATS=2 valgrind --tool=cachegrind --cache-sim=no \
                --cachegrind-out-file="$out/cachegrind.$row.$n" \
                "$bench" --only "$row" "${extra[@]}" --decode-tokens "$n" \
                > "$out/count.$row.$n.tsv" 2> "$out/count.$row.$n.log"
        done
        python3 - "$row" "$out/count.$row.$a.log" "$out/count.$row.$b.log" "$(( k * (b - a) ))" << 'PY'
import re, sys
row, la, lb, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def read(path):
    text = open(path).read()
    ir = int(re.search(r"I\s+refs:\s+([\d,]+)", text).group(1).replace(",", ""))
    tot = re.search(r"null_cuda: (\d+) kernel launches, (\d+) GEMMs, (\d+) allocations", text)
    names = {m.group(2): int(m.group(1)) for m in re.finditer(r"null_cuda:\s+(\d+) (\S+)\n", text)}
    return ir, [int(v) for v in tot.groups()], names
(ia, ta, na), (ib, tb, nb) = read(la), read(lb)
per = lambda x, y: (y - x) / steps
print(f"{row}: {per(ia, ib):,.0f} host instructions, {per(ta[0], tb[0]):.1f} launches, "
      f"{per(ta[1], tb[1]):.1f} GEMMs, {per(ta[2], tb[2]):.1f} raw allocations per token")
for v, name in sorted(((per(na.get(n, 0), nb.get(n, 0)), n) for n in set(na) | set(nb)), reverse=True):
    if v:
        print(f"  {v:8.2f} {name}")
PY
    done
    exit 0
fi
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
