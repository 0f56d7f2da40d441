#!/usr/bin/env bash
# Builds libhoc_busy.so (busy.c: a CUPTI timeline of kernels, copies and fills, loaded into an
# unmodified CUDA process through CUDA_INJECTION64_PATH) and checks that it exports
# InitializeInjection. No GPU needed to build; the device machine has no nsys, so this is
# how the GPU's busy time is measured there (busy.py reads the output).
#
#   busy.sh [OUT]             builds OUT/libhoc_busy.so (OUT defaults to ./build); prints one
#                             line saying why and exits 1 when CUPTI or cuda.h is not found
#   busy.sh --find            prints the CUPTI include dir, its library and cuda.h's dir
#   busy.sh --selftest [OUT]  builds with -Werror, checks the export, then loads the library
#                             in a process without a GPU and calls InitializeInjection: it must
#                             return 1, the process must exit 0, and the output must hold the
#                             header and end lines (CUPTI's failures are only reported)
#
# Where CUPTI is looked for, first found wins (cupti.h in INC, libcupti.so* in LIB):
#   $CUPTI_HOME/{include,lib64,lib}; $CUDA_HOME/extras/CUPTI/{include,lib64} and
#   $CUDA_HOME/{include,lib64,targets/x86_64-linux/...}; the same under /usr/local/cuda*;
#   python3's pip wheels: site-packages/nvidia/cu13/{include,lib} (CUDA 13 wheels, PyTorch's
#   nvidia-cuda-cupti) and site-packages/nvidia/cuda_cupti/{include,lib} (CUDA 12 wheels).
# cupti_activity.h includes <cuda.h> and, through builtin_types.h, crt/host_defines.h: the
# CUDA headers are taken from the first directory holding both, beside cupti.h, then
# $CUDA_HOME/include, /usr/local/cuda*/include (nvcc's toolkit), the wheels' nvidia/cu13/include
# (nvidia-cuda-runtime + nvidia-cuda-crt) and nvidia/cuda_nvcc/include, /usr/include.
# Env: CC (default cc), CUDA_HOME (default /usr/local/cuda), CUPTI_HOME.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CC="${CC:-cc}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"

# Candidate prefixes of python3's pip wheels (nvidia/... under each site-packages directory).
pip_nvidia_dirs() {
    python3 -c '
import os, site, sys
dirs = []
try:
    import nvidia
    dirs += [os.path.realpath(p) for p in nvidia.__path__]
except Exception:
    pass
for sp in list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()] + sys.path:
    dirs.append(os.path.join(sp, "nvidia"))
seen = set()
for d in dirs:
    if d and d not in seen and os.path.isdir(d):
        seen.add(d)
        print(d)
' 2> /dev/null || true
}

# "INC LIBFILE" pairs to try, one a line, in order of preference.
cupti_candidates() {
    local d n inc lib
    if [ -n "${CUPTI_HOME:-}" ]; then
        for lib in lib64 lib; do echo "$CUPTI_HOME/include $CUPTI_HOME/$lib"; done
    fi
    for d in "$CUDA_HOME" /usr/local/cuda*; do
        [ -d "$d" ] || continue
        echo "$d/extras/CUPTI/include $d/extras/CUPTI/lib64"
        echo "$d/include $d/lib64"
        echo "$d/targets/x86_64-linux/include $d/targets/x86_64-linux/lib"
    done
    while read -r n; do
        for sub in cu13 cuda_cupti; do
            inc="$n/$sub/include"
            lib="$n/$sub/lib"
            echo "$inc $lib"
        done
    done < <(pip_nvidia_dirs)
}

# The library file in LIB: libcupti.so if present, else the highest libcupti.so.N*.
cupti_lib_file() { # $1: LIB dir
    if [ -e "$1/libcupti.so" ]; then
        echo "$1/libcupti.so"
    else
        ls "$1"/libcupti.so.* 2> /dev/null | sort -V | tail -1
    fi
}

# Prints "INC LIBFILE" of the first CUPTI found, or nothing.
find_cupti() {
    local inc lib file
    while read -r inc lib; do
        [ -e "$inc/cupti.h" ] || continue
        file="$(cupti_lib_file "$lib")"
        [ -n "$file" ] && { echo "$inc $file"; return; }
    done < <(cupti_candidates)
}

# Prints the first directory holding cuda.h and crt/host_defines.h (both needed by
# cupti_activity.h), or nothing ($1: CUPTI's include dir, tried first).
find_cuda_h() {
    local d n
    for d in "$1" "$CUDA_HOME/include" "$CUDA_HOME/targets/x86_64-linux/include" \
        /usr/local/cuda*/include; do
        [ -e "$d/cuda.h" ] && [ -e "$d/crt/host_defines.h" ] && { echo "$d"; return; }
    done
    while read -r n; do
        for d in "$n/cu13/include" "$n/cuda_nvcc/include" "$n/cuda_runtime/include"; do
            [ -e "$d/cuda.h" ] && [ -e "$d/crt/host_defines.h" ] && { echo "$d"; return; }
        done
    done < <(pip_nvidia_dirs)
    [ -e /usr/include/cuda.h ] && [ -e /usr/include/crt/host_defines.h ] && echo /usr/include
    return 0
}

# build OUT [extra CFLAGS...]: compiles and links OUT/libhoc_busy.so, checks its export.
build() {
    local out="$1" inc file libdir cudainc
    shift
    read -r inc file <<< "$(find_cupti)" || true
    if [ -z "${inc:-}" ]; then
        echo "busy.sh: CUPTI not found (set CUPTI_HOME or CUDA_HOME, or pip install nvidia-cuda-cupti): GPU busy time is not measured"
        return 1
    fi
    cudainc="$(find_cuda_h "$inc")"
    if [ -z "$cudainc" ]; then
        echo "busy.sh: cuda.h with crt/host_defines.h not found (CUPTI in $inc needs them; set CUDA_HOME to a toolkit): GPU busy time is not measured"
        return 1
    fi
    libdir="$(dirname "$file")"
    mkdir -p "$out"
    # -l:FILE: pip's CUPTI has only libcupti.so.N (no unversioned link name); the rpath finds
    # that same file at run time.
    "$CC" -shared -fPIC -O2 -std=gnu11 -Wall -Wextra -fvisibility=hidden -pthread "$@" \
        -I"$inc" -I"$cudainc" -o "$out/libhoc_busy.so" "$HERE/busy.c" \
        -L"$libdir" -l:"$(basename "$file")" -Wl,-rpath,"$libdir"
    if ! nm -D --defined-only "$out/libhoc_busy.so" | awk '{print $NF}' | grep -qx InitializeInjection; then
        echo "busy.sh: $out/libhoc_busy.so does not export InitializeInjection"
        return 1
    fi
    echo "built $out/libhoc_busy.so (CUPTI: $file, headers: $inc, cuda.h: $cudainc)"
    echo "use: CUDA_INJECTION64_PATH=$out/libhoc_busy.so HOC_BUSY_OUT=busy.tsv PROGRAM; python3 $HERE/busy.py busy.tsv"
}

# selftest OUT: no GPU needed. The library loads, InitializeInjection returns 1 whatever CUPTI
# says, the process exits 0 and the output file has its header and end lines.
selftest() {
    local out="$1" tsv
    build "$out" -Werror
    tsv="$out/busy-selftest.tsv"
    rm -f "$tsv"
    HOC_BUSY_OUT="$tsv" python3 -c '
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
rc = lib.InitializeInjection()
assert rc == 1, f"InitializeInjection returned {rc}"
assert lib.InitializeInjection() == 1, "second call"
' "$out/libhoc_busy.so" 2> "$out/busy-selftest.err" || {
        cat "$out/busy-selftest.err"
        echo "busy.sh --selftest: loading or InitializeInjection failed"
        return 1
    }
    grep -q '^# hoc_busy' "$tsv" && grep -q '^# end' "$tsv" || {
        echo "busy.sh --selftest: $tsv lacks its header or end line:"
        cat "$tsv" "$out/busy-selftest.err"
        return 1
    }
    echo "selftest OK: InitializeInjection returned 1 twice, the process exited 0, $tsv:"
    cat "$tsv"
    echo "(stderr, CUPTI without a GPU:)"
    cat "$out/busy-selftest.err"
    records "$out"
}

# records OUT: the line writer on made-up records of this CUPTI's layouts (busy.c included
# into a small test program): a kernel inside a graph, a device-to-host copy, a fill.
records() {
    local out="$1" inc file cudainc
    read -r inc file <<< "$(find_cupti)"
    cudainc="$(find_cuda_h "$inc")"
    cat > "$out/busy_records_test.c" << 'EOF_C'
#include "busy.c"
int main(void)
{
    hoc_kernel_t k;
    hoc_memcpy_t c;
    hoc_memset_t s;
    memset(&k, 0, sizeof k);
    memset(&c, 0, sizeof c);
    memset(&s, 0, sizeof s);
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = 1000; k.end = 3000; k.streamId = 7; k.graphId = 3; k.name = "rargmax_f32";
    c.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    c.start = 3100; c.end = 3500; c.streamId = 7; c.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.start = 4000; s.end = 4200; s.streamId = 9;
    g.out = stdout;
    hoc_write_record((const CUpti_Activity *)&k);
    hoc_write_record((const CUpti_Activity *)&c);
    hoc_write_record((const CUpti_Activity *)&s);
    return !(g.kernels == 1 && g.in_graphs == 1 && g.memcpys == 1 && g.memsets == 1);
}
EOF_C
    "$CC" -O2 -std=gnu11 -Wall -Wextra -Werror -pthread -I"$HERE" -I"$inc" -I"$cudainc" \
        -o "$out/busy_records_test" "$out/busy_records_test.c" \
        -L"$(dirname "$file")" -l:"$(basename "$file")" -Wl,-rpath,"$(dirname "$file")"
    "$out/busy_records_test" > "$out/busy_records_test.tsv"
    printf 'kernel\t1000\t3000\t7\trargmax_f32\nmemcpy\t3100\t3500\t7\tmemcpy_DtoH\nmemset\t4000\t4200\t9\tmemset\n' |
        diff - "$out/busy_records_test.tsv" || {
        echo "busy.sh --selftest: the record lines differ (above)"
        return 1
    }
    echo "selftest OK: record lines as expected:"
    cat "$out/busy_records_test.tsv"
}

case "${1:-}" in
    -h | --help) sed -n '2,24p' "$0" ;;
    --find)
        read -r inc file <<< "$(find_cupti)" || true
        if [ -z "${inc:-}" ]; then
            echo "busy.sh: CUPTI not found"
            exit 1
        fi
        echo "cupti.h: $inc"
        echo "libcupti: $file"
        echo "cuda.h: $(find_cuda_h "$inc")"
        ;;
    --selftest) selftest "${2:-./build}" ;;
    *) build "${1:-./build}" ;;
esac
