#!/usr/bin/env bash
# Builds the HIP-on-CUDA test double (libamdhip64.so + librocblas.so.5), where cuDNN 9 is
# found, the MIOpen double (OUT/miopen/libMIOpen.so.1, loaded only through ROCM_SYS_MIOPEN_LIB)
# and, where NCCL is found, the RCCL double (OUT/rccl/librccl.so.1, loaded only through
# ROCM_SYS_RCCL_LIB; it opens NCCL at run time from RCCL_ON_NCCL_LIB, whose value build.sh
# writes to OUT/rccl/nccl-lib.txt). A missing cuDNN or NCCL skips that double, never fails.
#
#   build.sh [OUT]               GPU machine: checks cuda_min.h (and cudnn_min.h) against the real
#                                headers, then links against libcuda + libcublas (+ libcudnn).
#                                OUT defaults to ./build.
#   build.sh --check-decls [OUT] compile only, real headers + cuda_min.h/cudnn_min.h.
#   build.sh --min-decls [OUT]   no CUDA needed: compiles with cuda_min.h/cudnn_min.h to .o files,
#                                links UNLINKED probe .so files (not loadable usefully) and checks
#                                with nm that every symbol rocm-sys resolves is exported.
#   build.sh --null [OUT]        no CUDA, no GPU: links the double against null_cuda.c, a
#                                do-nothing driver (host memory, launches dropped), for measuring
#                                the host side of the stack on any machine (null-host.sh).
# Env: CC (default cc), CUDA_HOME (default /usr/local/cuda), CUDNN_HOME (a directory holding
# include/cudnn.h and lib/libcudnn.so.9; default: python3's nvidia/cudnn package, e.g. PyTorch's
# nvidia-cudnn-cu13, else the system's), NCCL_HOME (a directory holding include/nccl.h and
# lib/libnccl.so.2; default: python3's nvidia/nccl package, e.g. PyTorch's nvidia-nccl-cu13).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
MODE=full
case "${1:-}" in
  --min-decls) MODE=min; shift ;;
  --check-decls) MODE=check; shift ;;
  --null) MODE=null; shift ;;
  -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
esac
OUT="${1:-./build}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
CC="${CC:-cc}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
CFLAGS=(-std=gnu11 -fPIC -O2 -Wall -Wextra -Werror -fvisibility=hidden -pthread)
SRCS=(hip_on_cuda.c rocblas_on_cublas.c)
MIOPEN_SRC=miopen_on_cudnn.c
RCCL_SRC=rccl_on_nccl.c

# Every name rocm-sys resolves: `pub fn NAME(` inside the api_table! blocks (required and optional).
expected_symbols() {
  local f
  for f in "$REPO/rocm-sys/src/bindings/hip.rs" "$REPO/rocm-sys/src/rocblas.rs"; do
    awk '/api_table! *\{/ {t = 1} t && /^\}/ {t = 0} t' "$f" |
      sed -n 's/^ *pub fn \([A-Za-z_0-9]*\)(.*/\1/p'
  done
  echo hipGetDevicePropertiesR0600
}

# Every name rocm-sys resolves from MIOpen (required and optional).
expected_miopen_symbols() {
  awk '/api_table! *\{/ {t = 1} t && /^\}/ {t = 0} t' "$REPO/rocm-sys/src/miopen.rs" |
    sed -n 's/^ *pub fn \([A-Za-z_0-9]*\)(.*/\1/p'
}

check_miopen_symbols() { # $1: shared object
  local so="$1" missing=0 defined extra
  defined="$(nm -D --defined-only "$so" | awk '{print $NF}')"
  while read -r sym; do
    if ! grep -qx "$sym" <<<"$defined"; then echo "MISSING: $sym"; missing=1; fi
  done < <(expected_miopen_symbols | sort -u)
  # Exactly those: an exported miopen* name rocm-sys does not declare is a drift to fix.
  extra="$(grep '^miopen' <<<"$defined" | sort -u | comm -23 - <(expected_miopen_symbols | sort -u))"
  if [ -n "$extra" ]; then echo "EXPORTED BUT NOT IN rocm-sys/src/miopen.rs: $extra"; missing=1; fi
  [ "$missing" = 0 ] || { echo "MIOpen symbol check FAILED for $so"; return 1; }
  echo "MIOpen symbol check OK: $(expected_miopen_symbols | sort -u | wc -l) names exported by $(basename "$so")"
}

# Every name rocm-sys resolves from RCCL (required and optional).
expected_rccl_symbols() {
  awk '/api_table! *\{/ {t = 1} t && /^\}/ {t = 0} t' "$REPO/rocm-sys/src/rccl.rs" |
    sed -n 's/^ *pub fn \([A-Za-z_0-9]*\)(.*/\1/p'
}

# Exactly the names rocm-sys/src/rccl.rs declares are exported by $1.
check_rccl_symbols() { # $1: shared object
  local so="$1" missing=0 defined extra
  defined="$(nm -D --defined-only "$so" | awk '{print $NF}')"
  while read -r sym; do
    if ! grep -qx "$sym" <<<"$defined"; then echo "MISSING: $sym"; missing=1; fi
  done < <(expected_rccl_symbols | sort -u)
  extra="$(grep '^nccl' <<<"$defined" | sort -u | comm -23 - <(expected_rccl_symbols | sort -u))"
  if [ -n "$extra" ]; then echo "EXPORTED BUT NOT IN rocm-sys/src/rccl.rs: $extra"; missing=1; fi
  [ "$missing" = 0 ] || { echo "RCCL symbol check FAILED for $so"; return 1; }
  echo "RCCL symbol check OK: $(expected_rccl_symbols | sort -u | wc -l) names exported by $(basename "$so")"
}

# Prints the NCCL directory (include/nccl.h + lib/libnccl.so.2), or nothing.
find_nccl() {
  local d
  for d in "${NCCL_HOME:-}" $(python3 -c '
import os, site, sys
try:
    import nvidia.nccl as m
    print("\n".join(os.path.realpath(p) for p in m.__path__))
except Exception:
    pass
for sp in list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()] + sys.path:
    print(os.path.join(sp, "nvidia", "nccl"))
    print(os.path.join(sp, "nvidia", "cu13"))
' 2>/dev/null); do
    [ -n "$d" ] && [ -e "$d/include/nccl.h" ] && [ -e "$d/lib/libnccl.so.2" ] && { echo "$d"; return; }
  done
}

# Prints the cuDNN directory (include/cudnn.h + lib/libcudnn.so.9), SYSTEM, or nothing.
find_cudnn() {
  local d
  for d in "${CUDNN_HOME:-}" $(python3 -c '
import os, site, sys
try:
    import nvidia.cudnn as m
    print("\n".join(os.path.realpath(p) for p in m.__path__))
except Exception:
    pass
for sp in list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()] + sys.path:
    print(os.path.join(sp, "nvidia", "cudnn"))
' 2>/dev/null); do
    [ -n "$d" ] && [ -e "$d/include/cudnn.h" ] && [ -e "$d/lib/libcudnn.so.9" ] && { echo "$d"; return; }
  done
  if [ -e /usr/include/cudnn.h ] && [ -e /usr/lib/x86_64-linux-gnu/libcudnn.so.9 ]; then
    echo SYSTEM
  fi
}

check_symbols() { # $1: shared object
  local so="$1" missing=0 defined
  defined="$(nm -D --defined-only "$so" | awk '{print $NF}')"
  while read -r sym; do
    if ! grep -qx "$sym" <<<"$defined"; then echo "MISSING: $sym"; missing=1; fi
  done < <(expected_symbols | sort -u)
  for sym in hipGetDevicePropertiesR0000 hipGetDeviceProperties; do
    if grep -qx "$sym" <<<"$defined"; then echo "UNEXPECTED (old props ABI): $sym"; missing=1; fi
  done
  [ "$missing" = 0 ] || { echo "symbol check FAILED for $so"; return 1; }
  echo "symbol check OK: $(expected_symbols | sort -u | wc -l) names exported by $(basename "$so")"
}

cd "$HERE"
case "$MODE" in
  min)
    for s in "${SRCS[@]}"; do
      "$CC" "${CFLAGS[@]}" -DHIP_ON_CUDA_MIN_DECLS -c "$s" -o "$OUT/${s%.c}.o"
    done
    # Shared objects may leave symbols undefined: this probe links without libcuda/libcublas.
    "$CC" -shared -pthread -o "$OUT/libhip_on_cuda_unlinked_probe.so" "$OUT"/hip_on_cuda.o "$OUT"/rocblas_on_cublas.o
    check_symbols "$OUT/libhip_on_cuda_unlinked_probe.so"
    "$CC" "${CFLAGS[@]}" -DHIP_ON_CUDA_MIN_DECLS -c "$MIOPEN_SRC" -o "$OUT/${MIOPEN_SRC%.c}.o"
    "$CC" -shared -pthread -o "$OUT/libmiopen_on_cudnn_unlinked_probe.so" "$OUT/${MIOPEN_SRC%.c}.o"
    check_miopen_symbols "$OUT/libmiopen_on_cudnn_unlinked_probe.so"
    # The RCCL double opens NCCL with dlopen: it links as it is, with no NCCL on the machine.
    "$CC" -shared "${CFLAGS[@]}" -Wl,-z,defs -o "$OUT/librccl_on_nccl_probe.so" "$RCCL_SRC" -ldl
    check_rccl_symbols "$OUT/librccl_on_nccl_probe.so"
    ;;
  null)
    "$CC" -shared "${CFLAGS[@]}" -DHIP_ON_CUDA_MIN_DECLS -Wl,-soname,libamdhip64.so -Wl,-z,defs \
      -o "$OUT/libamdhip64.so" "${SRCS[@]}" null_cuda.c
    ln -sf libamdhip64.so "$OUT/librocblas.so.5"
    ln -sf libamdhip64.so "$OUT/libamdhip64.so.6"
    check_symbols "$OUT/libamdhip64.so"
    echo "built $OUT/libamdhip64.so on null_cuda.c (no GPU: kernels and GEMMs do nothing)"
    echo "use: ROCM_SYS_HIP_LIB=$OUT/libamdhip64.so"
    ;;
  check|full)
    INC=(-I"$CUDA_HOME/include")
    for s in "${SRCS[@]}"; do
      "$CC" "${CFLAGS[@]}" "${INC[@]}" -DHIP_ON_CUDA_CHECK_DECLS -c "$s" -o "$OUT/${s%.c}.check.o"
    done
    echo "cuda_min.h agrees with $CUDA_HOME/include"
    CUDNN="$(find_cudnn)"
    CUDNN_INC=()
    CUDNN_LIB=""
    case "$CUDNN" in
      "") ;;
      SYSTEM) CUDNN_LIB=/usr/lib/x86_64-linux-gnu/libcudnn.so.9 ;;
      *) CUDNN_INC=(-I"$CUDNN/include"); CUDNN_LIB="$CUDNN/lib/libcudnn.so.9" ;;
    esac
    if [ -n "$CUDNN" ]; then
      "$CC" "${CFLAGS[@]}" "${INC[@]}" "${CUDNN_INC[@]}" -DHIP_ON_CUDA_CHECK_DECLS -c "$MIOPEN_SRC" \
        -o "$OUT/${MIOPEN_SRC%.c}.check.o"
      echo "cudnn_min.h agrees with cuDNN in $CUDNN"
    else
      echo "cuDNN 9 not found (set CUDNN_HOME, or pip install nvidia-cudnn-cu13): the MIOpen double is not built"
    fi
    NCCL="$(find_nccl)"
    RCCL_OK=0
    if [ -n "$NCCL" ]; then
      if "$CC" "${CFLAGS[@]}" "${INC[@]}" -I"$NCCL/include" -DRCCL_ON_NCCL_CHECK_DECLS \
          -c "$RCCL_SRC" -o "$OUT/${RCCL_SRC%.c}.check.o"; then
        echo "rccl_on_nccl.c agrees with NCCL's nccl.h in $NCCL"
        RCCL_OK=1
      else
        echo "rccl_on_nccl.c does NOT agree with $NCCL/include/nccl.h: the RCCL double is not built"
      fi
    else
      echo "NCCL not found (set NCCL_HOME, or pip install nvidia-nccl-cu13): the RCCL double is not built"
    fi
    [ "$MODE" = check ] && exit 0
    # libcuda: the real driver from ldconfig if present, else the toolkit stub (the real one is
    # loaded at run time either way, by soname libcuda.so.1).
    LIBCUDA="$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')"
    for d in /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64 /usr/lib64; do
      [ -n "$LIBCUDA" ] || { [ -e "$d/libcuda.so.1" ] && LIBCUDA="$d/libcuda.so.1"; } || true
    done
    if [ -z "$LIBCUDA" ]; then
      for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs"; do
        [ -e "$d/libcuda.so" ] && { LIBCUDA="$d/libcuda.so"; break; }
      done
    fi
    [ -n "$LIBCUDA" ] || { echo "libcuda not found"; exit 1; }
    CUBLAS_DIR=""
    for d in "$CUDA_HOME/lib64" "$CUDA_HOME/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu; do
      [ -e "$d/libcublas.so" ] && { CUBLAS_DIR="$d"; break; }
    done
    [ -n "$CUBLAS_DIR" ] || { echo "libcublas.so not found"; exit 1; }
    "$CC" -shared "${CFLAGS[@]}" "${INC[@]}" -Wl,-soname,libamdhip64.so -Wl,-z,defs \
      -o "$OUT/libamdhip64.so" "${SRCS[@]}" \
      "$LIBCUDA" -L"$CUBLAS_DIR" -lcublas -Wl,-rpath,"$CUBLAS_DIR"
    # One object under both names: the symlink makes dlopen return the same handle, so HIP
    # state (contexts, current device) is shared with the rocBLAS half.
    ln -sf libamdhip64.so "$OUT/librocblas.so.5"
    ln -sf libamdhip64.so "$OUT/libamdhip64.so.6"
    check_symbols "$OUT/libamdhip64.so"
    echo "built $OUT/libamdhip64.so (libcuda: $LIBCUDA, cublas: $CUBLAS_DIR)"
    echo "use: ROCM_SYS_HIP_LIB=$OUT/libamdhip64.so"
    if [ -n "$CUDNN" ]; then
      # A directory of its own: beside libamdhip64.so, rocm-sys would load it for every run.
      # NEEDED libamdhip64.so resolves to the HIP double rocm-sys already loaded (same soname).
      mkdir -p "$OUT/miopen"
      "$CC" -shared "${CFLAGS[@]}" "${INC[@]}" "${CUDNN_INC[@]}" -Wl,-soname,libMIOpen.so.1 -Wl,-z,defs \
        -o "$OUT/miopen/libMIOpen.so.1" "$MIOPEN_SRC" \
        "$OUT/libamdhip64.so" "$LIBCUDA" "$CUDNN_LIB" \
        -Wl,-rpath,'$ORIGIN/..' -Wl,-rpath,"$(dirname "$CUDNN_LIB")"
      check_miopen_symbols "$OUT/miopen/libMIOpen.so.1"
      echo "built $OUT/miopen/libMIOpen.so.1 (cuDNN: $CUDNN_LIB)"
      echo "use: ROCM_SYS_MIOPEN_LIB=$OUT/miopen/libMIOpen.so.1"
    fi
    if [ "$RCCL_OK" = 1 ]; then
      # A directory of its own, like MIOpen's. NCCL is opened at run time (RCCL_ON_NCCL_LIB).
      mkdir -p "$OUT/rccl"
      if "$CC" -shared "${CFLAGS[@]}" -Wl,-soname,librccl.so.1 -Wl,-z,defs \
          -o "$OUT/rccl/librccl.so.1" "$RCCL_SRC" -ldl \
          && check_rccl_symbols "$OUT/rccl/librccl.so.1"; then
        echo "$NCCL/lib/libnccl.so.2" > "$OUT/rccl/nccl-lib.txt"
        echo "built $OUT/rccl/librccl.so.1 (NCCL: $NCCL/lib/libnccl.so.2, opened at run time)"
        echo "use: ROCM_SYS_RCCL_LIB=$OUT/rccl/librccl.so.1 RCCL_ON_NCCL_LIB=$NCCL/lib/libnccl.so.2 NCCL_NVLS_ENABLE=0"
      else
        rm -rf "$OUT/rccl"
        echo "the RCCL double did not build: multi-GPU tests will be skipped"
      fi
    fi
    ;;
esac
