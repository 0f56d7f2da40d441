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
#    token means the loop is bound by per-op host overhead.
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

# A GGUF row (PROFILE_ONLY=gguf_decode_1.1b_q4_0) is summarised beside its own timed row.
row_op=decode_llama_1.1b
case "$only" in gguf_decode_1.1b_*) row_op=$only ;; esac
python3 tests/hip-on-cuda/profile.py --tokens "$tokens" --row "$row_op" \
    ours "$OUT/ours.tsv" "$OUT/ours-ncu.csv" \
    "ours, cat unbatched" "$OUT/ours-unbatched.tsv" - \
    candle-cuda "$OUT/candle-cuda.tsv" "$OUT/candle-cuda-ncu.csv" > "$OUT/profile.md"
cat "$SUMMARY"
cat "$OUT/profile.md"
