# Sourced on the NVIDIA device machine before running candle-cuda-bench (bench.sh does, in a
# subshell): puts the CUDA 13 libraries the binary needs on LD_LIBRARY_PATH.
#
# candle-cuda-bench is crates.io Candle 0.11.1 built here by `cargo xtask bench`
# (xtask/src/candle_cuda.rs) against link stubs, so it needs the real libraries at run time.
# Its NEEDED entries (readelf -d) are listed below; the device has no CUDA toolkit libraries of
# its own, but PyTorch 2.11+cu130 brings them as pip packages, under site-packages/nvidia/cu13/lib
# (CUDA 13 wheels) or nvidia/<name>/lib (older layout), which this looks through.
# libcuda.so.1 is the driver's, found by the loader already; it is only checked here.
#
# The list comes from the NEEDED entries of $CUDA_LIBS_BIN (default: bench.sh's
# $BUILD/bin/candle-cuda-bench) when readelf can read it; otherwise it is the list below
# (what Candle 0.11.1 needs, plus cuBLASLt and NVRTC, which cudarc also links when used).
# Never fails: a library it cannot find is reported, and the binary's own loader error follows.

# CUDA_LIBS_NEEDED, when set, names the libraries instead (setup.sh: NVRTC for cuDNN).
_cuda_libs_needed="${CUDA_LIBS_NEEDED:-libcudart.so.13 libcublas.so.13 libcurand.so.10 libcublasLt.so.13 libnvrtc.so.13}"
CUDA_LIBS_BIN="${CUDA_LIBS_BIN:-${BUILD:-/tmp/hip-on-cuda}/bin/candle-cuda-bench}"
if [ -z "${CUDA_LIBS_NEEDED:-}" ] && [ -f "$CUDA_LIBS_BIN" ] && command -v readelf > /dev/null 2>&1; then
    _cuda_libs_from_bin=$(readelf -d "$CUDA_LIBS_BIN" 2> /dev/null \
        | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' \
        | grep -E '^lib(cu|nv)' | grep -v '^libcuda\.so' | tr '\n' ' ')
    [ -n "$_cuda_libs_from_bin" ] && _cuda_libs_needed="$_cuda_libs_from_bin"
fi

# Candidate directories: every nvidia/*/lib (and nvidia/cu13/lib) of the Python that runs
# PyTorch, then torch/lib, then a system toolkit if there is one.
_cuda_libs_dirs=$(python3 - 2> /dev/null << 'EOF'
import glob, os, site, sys
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
for sp in list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()] + sys.path:
    roots.append(os.path.join(sp, "nvidia"))
seen = []
for root in roots:
    for d in [os.path.join(root, "cu13", "lib")] + sorted(glob.glob(os.path.join(root, "*", "lib"))):
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in seen:
            seen.append(d)
try:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        d = os.path.join(list(spec.submodule_search_locations)[0], "lib")
        if os.path.isdir(d):
            seen.append(d)
except Exception:
    pass
print("\n".join(seen))
EOF
)
_cuda_libs_dirs="$_cuda_libs_dirs
/usr/local/cuda/lib64
/usr/local/cuda/targets/x86_64-linux/lib"

_cuda_libs_add=""
_cuda_libs_missing=""
for _cuda_lib in $_cuda_libs_needed; do
    _cuda_lib_dir=""
    while IFS= read -r _d; do
        if [ -n "$_d" ] && [ -e "$_d/$_cuda_lib" ]; then
            _cuda_lib_dir="$_d"
            break
        fi
    done <<< "$_cuda_libs_dirs"
    if [ -z "$_cuda_lib_dir" ]; then
        _cuda_libs_missing="$_cuda_libs_missing $_cuda_lib"
    else
        case ":$_cuda_libs_add:" in
            *":$_cuda_lib_dir:"*) ;;
            *) _cuda_libs_add="${_cuda_libs_add:+$_cuda_libs_add:}$_cuda_lib_dir" ;;
        esac
    fi
done

if [ -n "$_cuda_libs_add" ]; then
    export LD_LIBRARY_PATH="$_cuda_libs_add${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "cuda_libs.sh: LD_LIBRARY_PATH += $_cuda_libs_add" >&2
fi
if [ -n "$_cuda_libs_missing" ]; then
    echo "cuda_libs.sh: NEEDED but not found in python3's nvidia/* packages:$_cuda_libs_missing" >&2
fi
if ! { ldconfig -p 2> /dev/null | grep -q 'libcuda\.so\.1 '; } \
    && ! ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 > /dev/null 2>&1; then
    echo "cuda_libs.sh: libcuda.so.1 (the driver's) not in the loader cache; is the driver mounted?" >&2
fi
unset _cuda_libs_needed _cuda_libs_from_bin _cuda_libs_dirs _cuda_libs_add _cuda_libs_missing \
    _cuda_lib _cuda_lib_dir _d
