#!/usr/bin/env bash
# Where a decoder's time goes, ours against Candle 0.11.1's CUDA backend on the same GPU: run on
# the NVIDIA device machine from the repository root with `.bench-bundle` carried
# (`cargo xtask bench` builds it):
#
#   bash tests/hip-on-cuda/profile.sh
#
# 1. builds the test double and the kernels (setup.sh, as bench.sh does);
# 2. runs `candle-rocm-bench --only decode_llama` and the same for `candle-cuda-bench`: wall
#    time per decoded token next to the host's share of it (`decode_llama_1.1b_host`);
#    ours once more with CANDLE_ROCM_BATCHED_COPY=0 (cat's copies one input per launch, as
#    Candle's CUDA backend runs them), for the batched copies' effect in the same call;
# 3. runs each once more under Nsight Compute (`--profile`: one untimed f16 pass, a 16-token
#    prompt and PROFILE_TOKENS decode steps), recording every kernel's GPU time, and
#    summarises it per decode step (tests/hip-on-cuda/profile.py): kernels per token, GPU time
#    per token, and the kernels that take it. Host time per token well above GPU time per
#    token means the loop is bound by per-op host overhead;
# 4. runs ours once more per row for one decode pass (`--profile`, PROFILE_BUSY_TOKENS decode
#    steps, 64 by default) with libhoc_busy.so injected (busy.c: CUPTI's kernel, copy and fill
#    records through CUDA_INJECTION64_PATH; nothing serialised, graph launches' kernels
#    included) and appends busy.py's figures to the summary: the GPU's busy share of wall time
#    over the decode steps (issue 27's 80% target). PROFILE_BUSY=0 skips it; PROFILE_BUSY_ROWS
#    names the rows (one process each, so one decode pass per trace; default: PROFILE_ONLY's
#    words). Without CUPTI (busy.sh finds none) it is a summary row saying so.
#
# PROFILE_ONLY picks the bench rows (decode_llama by default; one synthetic GGUF row such as
# gguf_decode_1.1b_q4_0 works too, its decode profiled with f32 activations); PROFILE_TOKENS the
# decode steps under the profiler (4). Everything lands in $OUT; the summary is printed last.
set -uo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=tests/hip-on-cuda/bench-preamble.sh
source tests/hip-on-cuda/bench-preamble.sh

setup_quietly

only="${PROFILE_ONLY:-decode_llama}"
tokens="${PROFILE_TOKENS:-4}"
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
row "ncu" "${ncu_bin:-not found}"
NCU=("${ncu_bin:-ncu}" --csv --metrics gpu__time_duration.sum --cache-control none --clock-control none)

# name, binary, whether it needs the CUDA libraries
for who in ours candle-cuda; do
    case "$who" in
        ours) bin="$BUILD/bin/candle-rocm-bench" ;;
        candle-cuda) bin="$BUILD/bin/candle-cuda-bench" ;;
    esac
    if [ ! -x "$bin" ]; then
        row "$who" "not in the bundle"
        continue
    fi
    (
        if [ "$who" = candle-cuda ]; then
            # shellcheck source=tests/hip-on-cuda/cuda_libs.sh
            source tests/hip-on-cuda/cuda_libs.sh
        fi
        echo "== $who: timed rows"
        timeout 200 "$bin" --only "$only" > "$OUT/$who.tsv" 2> "$OUT/$who.err"
        echo "exit $?" >> "$OUT/$who.err"
        echo "== $who: under Nsight Compute"
        timeout 300 "${NCU[@]}" --log-file "$OUT/$who-ncu.csv" \
            "$bin" --profile --only "$only" --decode-tokens "$tokens" > /dev/null 2> "$OUT/$who-ncu.err"
        echo "exit $?" >> "$OUT/$who-ncu.err"
    )
    tail -n 2 "$OUT/$who.err" "$OUT/$who-ncu.err"
done

# Ours once more with cat's copies one input per launch (as candle's CUDA backend runs them).
if [ -x "$BUILD/bin/candle-rocm-bench" ]; then
    echo "== ours, CANDLE_ROCM_BATCHED_COPY=0: timed rows"
    CANDLE_ROCM_BATCHED_COPY=0 timeout 200 "$BUILD/bin/candle-rocm-bench" --only "$only" \
        > "$OUT/ours-unbatched.tsv" 2> "$OUT/ours-unbatched.err"
    echo "exit $?" >> "$OUT/ours-unbatched.err"
    tail -n 2 "$OUT/ours-unbatched.err"
fi

# GPU busy share of the decode steps (issue 27), one decode pass per row under CUPTI.
busy_rows=$(tr ',' ' ' <<< "${PROFILE_BUSY_ROWS:-$only}")
busy_tokens="${PROFILE_BUSY_TOKENS:-64}"
if [ "${PROFILE_BUSY:-1}" = 0 ]; then
    row "GPU busy (CUPTI)" "skipped (PROFILE_BUSY=0)"
elif [ ! -x "$BUILD/bin/candle-rocm-bench" ]; then
    row "GPU busy (CUPTI)" "not measured: candle-rocm-bench is not in the bundle"
elif ! bash tests/hip-on-cuda/busy.sh "$BUILD" > "$BUILD/busy-build.log" 2>&1; then
    row "GPU busy (CUPTI)" "not measured: $(tail -n 1 "$BUILD/busy-build.log")"
else
    # get KEY: a figure of busy.py --tsv's output in $fig
    get() { awk -v k="$1" '$1 == k { print $2 }' <<< "$fig"; }
    for busy_row in $busy_rows; do
        echo "== ours: GPU timeline of one decode pass of $busy_row (CUPTI)"
        tsv="$OUT/busy-$busy_row.tsv"
        rm -f "$tsv"
        CUDA_INJECTION64_PATH="$BUILD/libhoc_busy.so" HOC_BUSY_OUT="$tsv" timeout 300 \
            "$BUILD/bin/candle-rocm-bench" --profile --only "$busy_row" --decode-tokens "$busy_tokens" \
            > /dev/null 2> "$BUILD/busy-$busy_row.err"
        busy_rc=$?
        tail -n 2 "$BUILD/busy-$busy_row.err"
        if python3 tests/hip-on-cuda/busy.py "$tsv" > "$BUILD/busy-$busy_row.txt" 2>&1; then
            fig=$(python3 tests/hip-on-cuda/busy.py --tsv "$tsv" 2> /dev/null)
            row "GPU busy, $busy_row" "$(get busy_pct)% of $(get us_per_step) us/step (busy $(get busy_us_per_step) us, $(get kernels_per_step) kernels/step, $(get steps) steps; exit $busy_rc)"
        else
            row "GPU busy, $busy_row" "not measured (bench exit $busy_rc): $(head -n 1 "$BUILD/busy-$busy_row.txt")"
        fi
        { echo; echo "## GPU busy, $busy_row: one decode pass under CUPTI (busy.py)"; cat "$BUILD/busy-$busy_row.txt"; } >> "$SUMMARY"
    done
fi

# A GGUF row (PROFILE_ONLY=gguf_decode_1.1b_q4_0) is summarised beside its own timed row.
row_op=decode_llama_1.1b
case "$only" in gguf_decode_1.1b_*) row_op=$only ;; esac
python3 tests/hip-on-cuda/profile.py --tokens "$tokens" --row "$row_op" \
    ours "$OUT/ours.tsv" "$OUT/ours-ncu.csv" \
    "ours, cat unbatched" "$OUT/ours-unbatched.tsv" - \
    candle-cuda "$OUT/candle-cuda.tsv" "$OUT/candle-cuda-ncu.csv" > "$OUT/profile.md"
cat "$SUMMARY"
cat "$OUT/profile.md"
