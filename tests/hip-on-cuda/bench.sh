#!/usr/bin/env bash
# `cargo xtask bench`'s device side, run on the NVIDIA device machine from the repository root
# with `.bench-bundle` carried (the device tool does this):
#
#   bash tests/hip-on-cuda/bench.sh
#
# 1. builds the test double and the kernels (setup.sh, as run.sh does);
# 2. runs the same rows three times on the one GPU (and the conv rows once more with Candle
#    CUDA's cudnn feature, candle-cuda-cudnn-bench): ours (candle-rocm-bench over the double,
#    "H100 via HIP-on-CUDA"; its memory-bound rows a second time with
#    CANDLE_ROCM_FAST_KERNELS=0, candle's own kernels, its quantized rows again with
#    CANDLE_ROCM_QMATVEC=q8 and with the tiled kernels, CANDLE_ROCM_QMATMUL_ROWS=64, also from 2
#    rows, and without the split-k mat-vec, CANDLE_ROCM_QMATVEC_SPLIT=0, its decoder rows with
#    plain launches, CANDLE_ROCM_GRAPHS=0 (graph mode is the default), its conv_models rows once
#    more with CANDLE_ROCM_CONV=im2col), Candle 0.11.1's own CUDA backend (candle-cuda-bench, built from
#    the same source against crates.io Candle with its `cuda` feature) and PyTorch eager
#    (tests/bench/torch_bench.py with the machine's own PyTorch);
# 3. llama.cpp as a peer on the same GGUF files (when the bundle holds llama.cpp.tar.xz, see
#    `cargo xtask llamacpp`): the synthetic decoders our gguf rows decode, written to files by
#    `candle-rocm-bench --write-gguf` (q4_0, q4_k_m and an f16 one), and the BENCH_GGUF files;
#    tests/hip-on-cuda/llamacpp.sh builds llama-bench with CUDA for sm_90 (about 3 minutes on
#    16 cores, once per machine) and runs pp512 and tg128 with flash attention on and off;
# 4. runs the launch-overhead benchmark next to a raw cuLaunchKernel loop;
# 5. on a machine with two GPUs or more (nvidia-smi -L) and the RCCL double, the rows of
#    several GPUs (issue 29): `candle-rocm-bench --gpus 2` (all-reduce 8 KiB-1 GiB in f32, f16
#    and bf16, GPU 0 -> GPU 1 copies, the tensor-parallel llama at the 7B shape on 1 GPU and on
#    2; one process per GPU) and tests/bench/torch_mgpu.py (torch.distributed's NCCL
#    all-reduce and tensor.to("cuda:1") on the same schedule), NCCL_NVLS_ENABLE=0 in both; the
#    all-reduce and the llama once more with CANDLE_ROCM_PEER_ALLREDUCE=0 (RCCL only, against
#    the one-shot kernel for sums up to 1 MiB), in a table of their own;
# 6. joins them into one table (tests/bench/table.py), written to
#    $OUT/bench-<date>-<gpu>.md and printed last, llama.cpp's rows in a table of their own
#    after the main one with ours and Candle CUDA's beside them, then the rows of several GPUs
#    (table.py --multi-gpu: ours beside PyTorch, the llama's 2 GPUs against 1, the issue's
#    targets); the raw outputs go in $OUT too.
#
# BENCH_ONLY=word,word picks rows (see candle-rocm-bench --help); BENCH_TIMEOUT bounds each of
# the three runs (seconds, 200 by default); BENCH_GGUF="<file> ..." adds real GGUF decoders' rows;
# BENCH_TILED=0 skips the tiled-kernel passes; BENCH_LLAMACPP=0 skips llama.cpp (it runs when
# BENCH_ONLY is empty or names gguf, model, decode, prefill or llamacpp); LLAMACPP_TIMEOUT
# bounds its build and runs (seconds, 480 by default). The rows of several GPUs: BENCH_MGPU=0
# skips them, BENCH_ONLY=mgpu runs only them (after the setup; every single-GPU pass then
# selects no row), BENCH_TP_LAYERS sets the llama's layers (32, the 7B model, by default),
# BENCH_TP_ATTENTION its attention (flash by default, or matmul),
# BENCH_MGPU_TIMEOUT bounds each of the two runs (seconds, 300 by default).
set -uo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=tests/hip-on-cuda/bench-preamble.sh
source tests/hip-on-cuda/bench-preamble.sh

# shellcheck source=tests/hip-on-cuda/setup.sh
source tests/hip-on-cuda/setup.sh || exit 1

only=()
[ -n "${BENCH_ONLY:-}" ] && only=(--only "$BENCH_ONLY")
# BENCH_GGUF="<file> [<file>...]": real GGUF decoders (llama or Gemma 3) for the gguf_*_file
# rows (ours, ours q8, Candle CUDA); files that are missing are skipped.
gguf=()
for f in ${BENCH_GGUF:-}; do
    if [ -f "$f" ]; then gguf+=(--gguf "$f"); else echo "bench: no GGUF file $f, its rows skipped" >&2; fi
done
limit="${BENCH_TIMEOUT:-200}"

echo "== ours: candle-rocm-bench (H100 via HIP-on-CUDA)"
timeout "$limit" "$BUILD/bin/candle-rocm-bench" "${only[@]}" "${gguf[@]}" > "$OUT/ours.tsv" 2> "$OUT/ours.err"
row "candle-rocm-bench exit code" "$? ($(grep -c '^bench' "$OUT/ours.tsv") rows)"
tail -3 "$OUT/ours.err"

echo "== ours with candle's kernels (CANDLE_ROCM_FAST_KERNELS=0): the memory-bound rows"
CANDLE_ROCM_FAST_KERNELS=0 timeout "$limit" "$BUILD/bin/candle-rocm-bench" --only "${BENCH_ONLY:-bw}" \
    > "$OUT/ours-candle-kernels.tsv" 2> "$OUT/ours-candle-kernels.err"
row "baseline (candle kernels) exit" "$? ($(grep -c '^bench' "$OUT/ours-candle-kernels.tsv") rows)"

echo "== ours with 8-bit activations in the mat-vec (CANDLE_ROCM_QMATVEC=q8): the quantized rows"
CANDLE_ROCM_QMATVEC=q8 timeout "$limit" "$BUILD/bin/candle-rocm-bench" --only "${BENCH_ONLY:-qmat,gguf}" "${gguf[@]}" \
    > "$OUT/ours-q8.tsv" 2> "$OUT/ours-q8.err"
row "8-bit activations (qmat, gguf) exit" "$? ($(grep -c '^bench' "$OUT/ours-q8.tsv") rows)"

echo "== ours without the split-k mat-vec (CANDLE_ROCM_QMATVEC_SPLIT=0; auto by default): the quantized rows"
CANDLE_ROCM_QMATVEC_SPLIT=0 timeout "$limit" "$BUILD/bin/candle-rocm-bench" --only "${BENCH_ONLY:-qmat,gguf}" "${gguf[@]}" \
    > "$OUT/ours-split.tsv" 2> "$OUT/ours-split.err"
row "unsplit mat-vec (qmat, gguf) exit" "$? ($(grep -c '^bench' "$OUT/ours-split.tsv") rows)"

echo "== ours with the tiled quantized kernels up to 64 rows (CANDLE_ROCM_QMATMUL_ROWS=64, f32 and q8; and from 2 rows, CANDLE_ROCM_QMATVEC_ROWS=1, f32): the quantized rows"
tiled_passes=("f32:CANDLE_ROCM_QMATVEC=f32" "q8:CANDLE_ROCM_QMATVEC=q8"
    "f32-2:CANDLE_ROCM_QMATVEC=f32 CANDLE_ROCM_QMATVEC_ROWS=1")
[ "${BENCH_TILED:-1}" = 0 ] && tiled_passes=() && row "tiled kernels" "skipped (BENCH_TILED=0)"
for pass in "${tiled_passes[@]}"; do
    mode=${pass%%:*} envs=${pass#*:}
    # shellcheck disable=SC2086  # envs holds whole VAR=value words
    env CANDLE_ROCM_QMATMUL_ROWS=64 $envs timeout "$limit" "$BUILD/bin/candle-rocm-bench" \
        --only "${BENCH_ONLY:-qmat,gguf}" "${gguf[@]}" > "$OUT/ours-tiled-$mode.tsv" 2> "$OUT/ours-tiled-$mode.err"
    row "tiled kernels ($mode) exit" "$? ($(grep -c '^bench' "$OUT/ours-tiled-$mode.tsv") rows)"
done

echo "== ours on the MIOpen path (CANDLE_ROCM_CONV=miopen): the conv rows"
if [ -n "${ROCM_SYS_MIOPEN_LIB:-}" ]; then
    CANDLE_ROCM_CONV=miopen timeout "$limit" "$BUILD/bin/candle-rocm-bench" --only "${BENCH_ONLY:-conv}" \
        > "$OUT/ours-miopen.tsv" 2> "$OUT/ours-miopen.err"
    row "MIOpen path (conv rows) exit" "$? ($(grep -c '^bench' "$OUT/ours-miopen.tsv") rows)"
else
    row "MIOpen path (conv rows)" "skipped: no MIOpen double (no cuDNN found)"
fi

echo "== ours with plain launches (CANDLE_ROCM_GRAPHS=0): the decoder rows"
CANDLE_ROCM_GRAPHS=0 timeout "$limit" "$BUILD/bin/candle-rocm-bench" --only "${BENCH_ONLY:-decode,gguf}" "${gguf[@]}" \
    > "$OUT/ours-plain.tsv" 2> "$OUT/ours-plain.err"
row "plain launches (decode, gguf) exit" "$? ($(grep -c '^bench' "$OUT/ours-plain.tsv") rows)"

echo "== ours on the im2col path (CANDLE_ROCM_CONV=im2col): the conv model rows"
# (the MIOpen pass above runs them too: `conv` selects the group conv_models)
CANDLE_ROCM_CONV=im2col timeout "$limit" "$BUILD/bin/candle-rocm-bench" --only "${BENCH_ONLY:-conv_models}" \
    > "$OUT/ours-im2col.tsv" 2> "$OUT/ours-im2col.err"
row "im2col path (conv_models rows) exit" "$? ($(grep -c '^bench' "$OUT/ours-im2col.tsv") rows)"

echo "== Candle 0.11.1 CUDA: candle-cuda-bench"
if [ -x "$BUILD/bin/candle-cuda-bench" ]; then
    (
        # shellcheck source=tests/hip-on-cuda/cuda_libs.sh
        source tests/hip-on-cuda/cuda_libs.sh
        timeout "$limit" "$BUILD/bin/candle-cuda-bench" "${only[@]}" "${gguf[@]}" > "$OUT/candle-cuda.tsv" 2> "$OUT/candle-cuda.err"
    )
    row "candle-cuda-bench exit code" "$? ($(grep -c '^bench' "$OUT/candle-cuda.tsv") rows)"
    tail -3 "$OUT/candle-cuda.err"
else
    row "candle-cuda-bench" "not in the bundle"
fi

echo "== Candle 0.11.1 CUDA with its cudnn feature: the conv rows"
if [ -x "$BUILD/bin/candle-cuda-cudnn-bench" ]; then
    (
        CUDA_LIBS_BIN="$BUILD/bin/candle-cuda-cudnn-bench"
        # shellcheck source=tests/hip-on-cuda/cuda_libs.sh
        source tests/hip-on-cuda/cuda_libs.sh
        timeout "$limit" "$BUILD/bin/candle-cuda-cudnn-bench" --only "${BENCH_ONLY:-conv}" \
            > "$OUT/candle-cuda-cudnn.tsv" 2> "$OUT/candle-cuda-cudnn.err"
    )
    row "candle-cuda-cudnn-bench exit code" "$? ($(grep -c '^bench' "$OUT/candle-cuda-cudnn.tsv") rows)"
    tail -3 "$OUT/candle-cuda-cudnn.err"
else
    row "candle-cuda-cudnn-bench" "not in the bundle"
fi

echo "== PyTorch eager"
only_py=()
[ -n "${BENCH_ONLY:-}" ] && only_py=(--only "$BENCH_ONLY")
PYTHONUNBUFFERED=1 timeout "$limit" python3 tests/bench/torch_bench.py "${only_py[@]}" \
    > "$OUT/torch.tsv" 2> "$OUT/torch.err"
row "torch_bench.py exit code" "$? ($(grep -c '^bench' "$OUT/torch.tsv") rows)"
tail -3 "$OUT/torch.err"

echo "== llama.cpp: llama-bench on the same GGUF files"
peers=()
if [ "${BENCH_LLAMACPP:-1}" = 0 ]; then
    row "llama.cpp" "skipped (BENCH_LLAMACPP=0)"
elif [ ! -f "$BUNDLE_ROOT/llama.cpp.tar.xz" ]; then
    row "llama.cpp" "not in the bundle (cargo xtask llamacpp)"
elif [ -n "${BENCH_ONLY:-}" ] && ! [[ ",$BENCH_ONLY," =~ gguf|model|llamacpp|decode|prefill ]]; then
    row "llama.cpp" "skipped (BENCH_ONLY selects no GGUF rows)"
else
    # The synthetic decoders ours times, as files (the same bytes), then the real ones.
    mapfile -t llama_files < <("$BUILD/bin/candle-rocm-bench" --write-gguf "$BUILD/gguf" 2> "$OUT/write-gguf.err")
    for f in ${BENCH_GGUF:-}; do [ -f "$f" ] && llama_files+=("$f"); done
    timeout "${LLAMACPP_TIMEOUT:-480}" bash tests/hip-on-cuda/llamacpp.sh "$OUT" "${llama_files[@]}" \
        > "$OUT/llamacpp.log" 2>&1
    row "llama.cpp (llamacpp.sh) exit" "$? ($(grep -c '^bench' "$OUT/llamacpp-fa1.tsv" 2> /dev/null || echo 0) rows with flash attention, ${#llama_files[@]} files)"
    tail -4 "$OUT/llamacpp.log"
    for fa in 1 0; do
        name="llama.cpp FA $([ "$fa" = 1 ] && echo on || echo off)"
        grep -q '^bench' "$OUT/llamacpp-fa$fa.tsv" 2> /dev/null && peers+=(--peer "$name=$OUT/llamacpp-fa$fa.tsv")
    done
    # Decode with PDL off: llama.cpp as its HIP build runs (llamacpp.sh, step 3b).
    grep -q '^bench' "$OUT/llamacpp-nopdl-fa1.tsv" 2> /dev/null \
        && peers+=(--peer "llama.cpp FA on, PDL off=$OUT/llamacpp-nopdl-fa1.tsv")
fi

echo "== several GPUs: all-reduce, GPU-to-GPU copies, the tensor-parallel llama (ours, then PyTorch)"
ngpus=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off (setup.sh exports it too)
mgpu=0
if [ "${BENCH_MGPU:-1}" = 0 ]; then
    row "several GPUs" "skipped (BENCH_MGPU=0)"
elif [ "$ngpus" -lt 2 ]; then
    row "several GPUs" "skipped: $ngpus GPU"
elif [ -z "${ROCM_SYS_RCCL_LIB:-}" ]; then
    row "several GPUs" "skipped: no RCCL double (no NCCL found; see build.log)"
else
    mgpu=1
    mgpu_limit="${BENCH_MGPU_TIMEOUT:-300}"
    # timeout signals its process group: rank 0 and the ranks it starts end together.
    t0=$SECONDS
    timeout -k 10 "$mgpu_limit" "$BUILD/bin/candle-rocm-bench" --gpus 2 "${only[@]}" \
        --tp-layers "${BENCH_TP_LAYERS:-32}" --tp-attention "${BENCH_TP_ATTENTION:-flash}" \
        > "$OUT/ours-mgpu.tsv" 2> "$OUT/ours-mgpu.err"
    rc=$?
    row "candle-rocm-bench --gpus 2 exit" "$rc ($(grep -c '^bench' "$OUT/ours-mgpu.tsv") rows, $((SECONDS - t0)) s)"
    tail -3 "$OUT/ours-mgpu.err"
    # The all-reduce and the tensor-parallel llama again with every all-reduce through RCCL
    # (CANDLE_ROCM_PEER_ALLREDUCE=0): the one-shot kernel's rows against RCCL's, same call.
    CANDLE_ROCM_PEER_ALLREDUCE=0 timeout -k 10 "$mgpu_limit" "$BUILD/bin/candle-rocm-bench" \
        --gpus 2 --only mgpu_allreduce --only mgpu_tp --tp-layers "${BENCH_TP_LAYERS:-32}" \
        --tp-attention "${BENCH_TP_ATTENTION:-flash}" \
        > "$OUT/ours-mgpu-rccl.tsv" 2> "$OUT/ours-mgpu-rccl.err"
    rc=$?
    row "... with CANDLE_ROCM_PEER_ALLREDUCE=0" "exit $rc: $(awk -F'\t' '$1 == "bench" && $2 == "mgpu_tp" { printf "%s %s %.0f tok/s; ", $3, $4, $7 / $6 }' "$OUT/ours-mgpu-rccl.tsv")"
    t0=$SECONDS
    PYTHONUNBUFFERED=1 timeout -k 10 "$mgpu_limit" python3 tests/bench/torch_mgpu.py --gpus 2 \
        "${only_py[@]}" > "$OUT/torch-mgpu.tsv" 2> "$OUT/torch-mgpu.err"
    rc=$?
    row "torch_mgpu.py exit" "$rc ($(grep -c '^bench' "$OUT/torch-mgpu.tsv") rows, $((SECONDS - t0)) s)"
    tail -3 "$OUT/torch-mgpu.err"
fi

echo "== launch overhead"
launch_overhead "$OUT/launch.txt"

stamp=$(date -u +%Y-%m-%d)
slug=$(echo "$gpu" | tr -cs 'A-Za-z0-9' '-' | sed 's/-*$//')
result="$OUT/bench-$stamp-$slug.md"
python3 tests/bench/table.py "$OUT/ours.tsv" "$OUT/candle-cuda.tsv" "$OUT/torch.tsv" \
    --baseline "$OUT/ours-candle-kernels.tsv" "${peers[@]}" \
    --title "$gpu, $(date -u +%Y-%m-%dT%H:%MZ); ours runs on it via HIP-on-CUDA" > "$result"
if grep -q '^bench	conv' "$OUT/ours-miopen.tsv" 2> /dev/null; then
    echo >> "$result"
    python3 tests/bench/table.py "$OUT/ours-miopen.tsv" "$OUT/candle-cuda.tsv" "$OUT/torch.tsv" \
        --title "the conv rows again, ours on the MIOpen path (CANDLE_ROCM_CONV=miopen; cuDNN under the MIOpen double on this card)" \
        | awk -F'|' 'NF < 10 || $5 != " - "' >> "$result"  # only the rows ours ran
fi
if grep -q '^bench	conv_models' "$OUT/ours-im2col.tsv" 2> /dev/null; then
    echo >> "$result"
    python3 tests/bench/table.py "$OUT/ours-im2col.tsv" "$OUT/candle-cuda.tsv" "$OUT/torch.tsv" \
        --title "the conv model rows again, ours on the im2col path (CANDLE_ROCM_CONV=im2col)" \
        | awk -F'|' 'NF < 10 || $5 != " - "' >> "$result"  # only the rows ours ran
fi
# Any row: the q8 pass runs the quantized rows and the GGUF decoder rows (group `model` for a
# real file), so a BENCH_ONLY of gguf_*_file rows alone still gets its q8 table.
if grep -q '^bench' "$OUT/ours-q8.tsv" 2> /dev/null; then
    echo >> "$result"
    python3 tests/bench/table.py "$OUT/ours-q8.tsv" "$OUT/candle-cuda.tsv" "$OUT/torch.tsv" \
        --title "the quantized rows again, ours with the mat-vec on 8-bit activations (CANDLE_ROCM_QMATVEC=q8, as Candle CUDA rounds them)" \
        | awk -F'|' 'NF < 10 || $5 != " - "' >> "$result"  # only the rows ours ran
fi
if grep -q '^bench' "$OUT/ours-split.tsv" 2> /dev/null; then
    echo >> "$result"
    python3 tests/bench/table.py "$OUT/ours-split.tsv" "$OUT/candle-cuda.tsv" "$OUT/torch.tsv" \
        --title "the quantized rows again, ours without the split-k mat-vec (CANDLE_ROCM_QMATVEC_SPLIT=0: every one-row f32 mat-vec on one group of lanes per row; by default weights of few rows split)" \
        | awk -F'|' 'NF < 10 || $5 != " - "' >> "$result"  # only the rows ours ran
fi
if grep -q '^bench' "$OUT/ours-plain.tsv" 2> /dev/null; then
    echo >> "$result"
    python3 tests/bench/table.py "$OUT/ours-plain.tsv" "$OUT/candle-cuda.tsv" "$OUT/torch.tsv" \
        --title "the decoder rows again, ours with plain launches (CANDLE_ROCM_GRAPHS=0: one submission per kernel, graph mode off)" \
        | awk -F'|' 'NF < 10 || $5 != " - "' >> "$result"  # only the rows ours ran
fi
for mode in f32 q8 f32-2; do
    grep -q '^bench' "$OUT/ours-tiled-$mode.tsv" 2> /dev/null || continue
    echo >> "$result"
    rows="9-64 rows (CANDLE_ROCM_QMATMUL_ROWS=64, CANDLE_ROCM_QMATVEC=${mode%-2})"
    [ "$mode" = f32-2 ] && rows="2-64 rows (CANDLE_ROCM_QMATVEC_ROWS=1, CANDLE_ROCM_QMATMUL_ROWS=64, f32)"
    python3 tests/bench/table.py "$OUT/ours-tiled-$mode.tsv" "$OUT/candle-cuda.tsv" "$OUT/torch.tsv" \
        --title "the quantized rows again, ours with the tiled kernels for $rows" \
        | awk -F'|' 'NF < 10 || $5 != " - "' >> "$result"  # only the rows ours ran
done
if grep -q '^bench	conv' "$OUT/candle-cuda-cudnn.tsv" 2> /dev/null; then
    for ours in ours ours-miopen; do
        grep -q '^bench	conv' "$OUT/$ours.tsv" 2> /dev/null || continue
        echo >> "$result"
        python3 tests/bench/table.py "$OUT/$ours.tsv" "$OUT/candle-cuda-cudnn.tsv" "$OUT/torch.tsv" \
            --title "the conv rows, $ours against Candle CUDA with its cudnn feature (in the Candle CUDA column)" \
            | awk -F'|' 'NF < 10 || ($5 != " - " && $8 != " - ")' >> "$result"
    done
fi
if [ "$mgpu" = 1 ]; then
    echo >> "$result"
    python3 tests/bench/table.py --multi-gpu "$OUT/ours-mgpu.tsv" "$OUT/torch-mgpu.tsv" \
        --title "$ngpus x $gpu, $(date -u +%Y-%m-%dT%H:%MZ); ours via HIP-on-CUDA (RCCL on NCCL; sums up to 1 MiB: the one-shot kernel)" >> "$result"
    if grep -q '^bench' "$OUT/ours-mgpu-rccl.tsv" 2> /dev/null; then
        echo >> "$result"
        python3 tests/bench/table.py --multi-gpu "$OUT/ours-mgpu-rccl.tsv" "$OUT/torch-mgpu.tsv" \
            --title "the same, ours with CANDLE_ROCM_PEER_ALLREDUCE=0 (every all-reduce through RCCL)" >> "$result"
    fi
fi
{
    echo
    echo '```'
    cat "$SUMMARY"
    echo '```'
} >> "$result"
echo
cat "$result"
