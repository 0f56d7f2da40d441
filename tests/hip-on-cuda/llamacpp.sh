#!/usr/bin/env bash
# llama.cpp as a peer of `cargo xtask bench`: builds llama-bench from the trimmed llama.cpp
# source in the bench bundle (`cargo xtask llamacpp`, llama-cpp-python 0.3.36's vendored copy)
# and runs it on GGUF files, the same files ours decodes. bench.sh calls it; it also runs alone,
# from the repository root:
#
#   bash tests/hip-on-cuda/llamacpp.sh OUTDIR FILE.gguf [FILE.gguf ...]
#
# 1. unpacks $LLAMACPP_ARCHIVE into $LLAMACPP_BUILD/src (again only when the archive changed);
# 2. configures with CMake and ninja: CUDA for sm_90 (GGML_CUDA=ON, CMAKE_CUDA_ARCHITECTURES=90,
#    GGML_CUDA_NCCL=OFF), static libraries, no tests/examples/server, no OpenSSL; builds the one
#    target llama-bench (-j$JOBS);
# 3. runs `llama-bench -m FILE -ngl 99 -fa 0,1 -p 512 -n 128 -r 5 -o json` per file (prefill
#    pp512 and decode tg128, flash attention off and on);
#    and decode after 2048 cached positions (`-fa 1 -p 0 -n 128 -d 2048`, ours' --decode-depth
#    rows); then decode again with flash attention on and `GGML_CUDA_PDL=0`
#    (LLAMACPP_NO_PDL_ARGS, "-n 128 -d 0,2048 -r 5"): llama.cpp without programmatic dependent
#    launch, as its HIP build runs;
# 4. converts the rows (tests/bench/llamacpp_rows.py) into candle-rocm-bench's row format:
#    OUTDIR/llamacpp-fa1.tsv and OUTDIR/llamacpp-fa0.tsv, which table.py joins (--peer), and
#    OUTDIR/llamacpp-nopdl-fa1.tsv for the PDL-off decode; the raw JSON of every file goes to
#    OUTDIR/llamacpp.json (OUTDIR/llamacpp-nopdl.json).
#
# Env: LLAMACPP_ARCHIVE (.bench-bundle/llama.cpp.tar.xz), LLAMACPP_BUILD (/tmp/llama.cpp: source,
# build tree and logs), LLAMACPP_CUDA=0 (a CPU-only build: checks the archive and the GGUF
# files on a machine without a GPU), LLAMACPP_BENCH_ARGS ("-p 512 -n 128 -r 5"),
# LLAMACPP_DEPTH_ARGS ("-p 0 -n 128 -d 2048 -r 3"), LLAMACPP_CMAKE_ARGS (more configure flags),
# LLAMACPP_NO_PDL=0 (no PDL-off pass), JOBS (nproc).
# Exit status: 0 when every file ran; 1 when llama-bench did not build (the log's tail is
# printed); 2 when some file failed (the others' rows are still written).
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ $# -lt 2 ]; then
    echo "usage: bash tests/hip-on-cuda/llamacpp.sh OUTDIR FILE.gguf [FILE.gguf ...]" >&2
    exit 64
fi
out="$1"
shift
mkdir -p "$out"
archive="${LLAMACPP_ARCHIVE:-.bench-bundle/llama.cpp.tar.xz}"
root="${LLAMACPP_BUILD:-/tmp/llama.cpp}"
cuda="${LLAMACPP_CUDA:-1}"
jobs="${JOBS:-$(nproc)}"
if [ ! -f "$archive" ]; then
    echo "llamacpp.sh: no $archive: run \`cargo xtask llamacpp\` (or \`cargo xtask bench\`) and carry .bench-bundle" >&2
    exit 1
fi
mkdir -p "$root"

# 1. the source, unpacked once per archive
stamp=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$(cat "$root/src.stamp" 2> /dev/null)" != "$stamp" ]; then
    echo "== llama.cpp: unpacking $archive"
    rm -rf "$root/src" "$root/build"
    mkdir -p "$root/src"
    tar -xJf "$archive" -C "$root/src" || exit 1
    echo "$stamp" > "$root/src.stamp"
fi

# 2. configure and build llama-bench
flags=(
    -G Ninja
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_BUILD_COMMON=ON
    -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_SERVER=OFF
    -DLLAMA_BUILD_APP=OFF
    -DLLAMA_OPENSSL=OFF
    -DLLAMA_CURL=OFF
    -DGGML_CCACHE=OFF
)
if [ "$cuda" = 1 ]; then
    cuda_home="${CUDA_HOME:-/usr/local/cuda}"
    nvcc_bin=$(command -v nvcc || true)
    [ -x "$cuda_home/bin/nvcc" ] && nvcc_bin="$cuda_home/bin/nvcc"
    if [ -z "$nvcc_bin" ]; then
        echo "llamacpp.sh: no nvcc (neither on PATH nor in $cuda_home/bin)" >&2
        exit 1
    fi
    flags+=(
        -DGGML_CUDA=ON
        -DCMAKE_CUDA_ARCHITECTURES=90
        -DGGML_CUDA_NCCL=OFF
        -DCMAKE_CUDA_COMPILER="$nvcc_bin"
    )
    [ -d "$cuda_home" ] && flags+=(-DCUDAToolkit_ROOT="$cuda_home")
else
    flags+=(-DGGML_CUDA=OFF)
fi
# shellcheck disable=SC2206  # the extra flags are whole words
flags+=(${LLAMACPP_CMAKE_ARGS:-})
echo "== llama.cpp: configure (GGML_CUDA=$([ "$cuda" = 1 ] && echo "ON, sm_90" || echo OFF))"
if ! cmake -S "$root/src/llama.cpp" -B "$root/build" "${flags[@]}" > "$root/configure.log" 2>&1; then
    tail -40 "$root/configure.log"
    echo "llamacpp.sh: configuring llama.cpp failed (log: $root/configure.log)" >&2
    exit 1
fi
echo "== llama.cpp: build llama-bench (ninja -j$jobs)"
start=$(date +%s)
if ! ninja -C "$root/build" -j"$jobs" llama-bench > "$root/build.log" 2>&1; then
    grep -B2 -A12 -m3 'error' "$root/build.log" | head -60
    tail -20 "$root/build.log"
    echo "llamacpp.sh: building llama-bench failed (log: $root/build.log)" >&2
    exit 1
fi
bench="$root/build/bin/llama-bench"
echo "built $bench in $(($(date +%s) - start)) s"

# The CUDA libraries llama-bench links: the build tree's run path finds the toolkit's; when the
# loader still misses one, look where cuda_libs.sh looks for Candle CUDA's (the toolkit, then
# PyTorch's pip packages).
if [ "$cuda" = 1 ] && ldd "$bench" 2> /dev/null | grep -q 'not found'; then
    CUDA_LIBS_BIN="$bench"
    # shellcheck source=tests/hip-on-cuda/cuda_libs.sh
    source tests/hip-on-cuda/cuda_libs.sh
    ldd "$bench" | grep 'not found'
fi

# 3. llama-bench on each file: pp512 and tg128, flash attention off and on
# shellcheck disable=SC2206  # the sizes are whole words
sizes=(${LLAMACPP_BENCH_ARGS:--p 512 -n 128 -r 5})
status=0
jsons=()
i=0
for f in "$@"; do
    i=$((i + 1))
    name=$(basename "$f")
    if [ ! -f "$f" ]; then
        echo "llamacpp.sh: no GGUF file $f, skipped" >&2
        status=2
        continue
    fi
    echo "== llama-bench $name"
    json="$root/bench-$i.json"
    if "$bench" -m "$f" -ngl 99 -fa 0,1 "${sizes[@]}" -o json > "$json" 2> "$root/bench-$i.err"; then
        jsons+=("$json")
        # Decode after 2048 cached positions, flash attention on (LLAMACPP_DEPTH_ARGS).
        # shellcheck disable=SC2206  # the sizes are whole words
        deep=(${LLAMACPP_DEPTH_ARGS:--p 0 -n 128 -d 2048 -r 3})
        if "$bench" -m "$f" -ngl 99 -fa 1 "${deep[@]}" -o json > "$root/bench-deep-$i.json" 2> "$root/bench-deep-$i.err"; then
            jsons+=("$root/bench-deep-$i.json")
        else
            echo "llamacpp.sh: llama-bench at depth failed on $name (log: $root/bench-deep-$i.err)" >&2
            status=2
        fi
    else
        tail -15 "$root/bench-$i.err"
        echo "llamacpp.sh: llama-bench failed on $name (log: $root/bench-$i.err)" >&2
        status=2
    fi
done

# 3b. decode again, flash attention on, with PDL off (GGML_CUDA_PDL=0). llama.cpp's CUDA build
# launches its kernels with programmatic dependent launch on sm_90 (a kernel starts while the
# one before it drains); its HIP build compiles PDL out, so these rows are llama.cpp as it runs
# on an AMD GPU. LLAMACPP_NO_PDL=0 skips them.
nopdl=()
if [ "${LLAMACPP_NO_PDL:-1}" != 0 ] && [ "$cuda" = 1 ]; then
    # shellcheck disable=SC2206  # the sizes are whole words
    reps=(${LLAMACPP_NO_PDL_ARGS:--n 128 -d 0,2048 -r 5})
    i=0
    for f in "$@"; do
        i=$((i + 1))
        [ -f "$f" ] || continue
        json="$root/bench-nopdl-$i.json"
        if GGML_CUDA_PDL=0 "$bench" -m "$f" -ngl 99 -fa 1 -p 0 "${reps[@]}" -o json > "$json" 2> "$root/bench-nopdl-$i.err"; then
            nopdl+=("$json")
        else
            echo "llamacpp.sh: llama-bench with GGML_CUDA_PDL=0 failed on $(basename "$f") (log: $root/bench-nopdl-$i.err)" >&2
            status=2
        fi
    done
fi

# 4. rows for table.py
python3 tests/bench/llamacpp_rows.py "$out/llamacpp" "${jsons[@]}" || status=2
if [ ${#nopdl[@]} -gt 0 ]; then
    python3 tests/bench/llamacpp_rows.py "$out/llamacpp-nopdl" "${nopdl[@]}" || status=2
fi
exit "$status"
