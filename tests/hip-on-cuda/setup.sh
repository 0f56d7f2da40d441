# Sourced by run.sh and bench.sh on the device machine (from the repository root): builds the
# HIP/rocBLAS test double (build.sh, with the MIOpen and RCCL doubles where cuDNN and NCCL are
# found), the rocm-safe test kernels, the raw-launch benchmark and
# every kernel module (candle-kernels' CUDA sources carried under $BUNDLE_ROOT/candle-kernels
# and ours under kernels/hip, compiled natively by nvcc for sm_90), then exports the variables
# that point our unchanged rocm-sys and kernel registry at them.
#
# Needs: OUT, BUILD, BUNDLE_ROOT and a `row KEY VALUE` function. Returns 1 (the caller stops)
# when the double or the test kernels do not build. Also unpacks the bundle's binaries (they
# travel xz-compressed: the carry limit) into $BUILD/bin, and defines `launch_overhead LOG`.

echo "== unpack the bundle's binaries into $BUILD/bin"
rm -rf "$BUILD/bin"
mkdir -p "$BUILD/bin"
for f in "$BUNDLE_ROOT"/bin/*; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .xz)
    if [ "$name" != "$(basename "$f")" ]; then
        xz -dc "$f" > "$BUILD/bin/$name" || return 1
    else
        cp "$f" "$BUILD/bin/$name" || return 1
    fi
    chmod +x "$BUILD/bin/$name"
done

echo "== build the test double and the kernels"
if ! bash tests/hip-on-cuda/build.sh "$BUILD" > "$OUT/build.log" 2>&1; then
    cat "$OUT/build.log"
    echo "setup.sh: building the test double failed" >&2
    return 1
fi
if ! nvcc -cubin -arch=sm_90 -x cu -o "$BUILD/test_kernels.cubin" \
        rocm-safe/tests/kernels/test_kernels.hip > "$OUT/nvcc.log" 2>&1; then
    cat "$OUT/nvcc.log"
    return 1
fi
nvcc -O2 -o "$BUILD/launch_bench" tests/hip-on-cuda/launch_bench.c -lcuda -ldl > "$OUT/bench-build.log" 2>&1 \
    || cat "$OUT/bench-build.log"
# candle-kernels' own CUDA sources (carried in the bundle) and ours, compiled natively by nvcc
# for the kernel registry's override directory: <module>.<processor>.co.
KDIR="$BUILD/kernels"
mkdir -p "$KDIR"
kfail=0
if [ -d "$BUNDLE_ROOT"/candle-kernels ]; then
    for src in "$BUNDLE_ROOT"/candle-kernels/*.cu; do
        m=$(basename "$src" .cu)
        case "$m" in mmvq_gguf) continue ;; esac  # statically linked fast path, not a module
        nvcc -cubin -arch=sm_90 -std=c++17 -O3 --expt-relaxed-constexpr \
            -o "$KDIR/$m.sm_90.co" "$src" > "$OUT/nvcc-$m.log" 2>&1 &
    done
fi
# Our own kernels (kernels/hip/*.hip), same sources as the AMD build, CUDA's own headers.
for src in kernels/hip/*.hip; do
    m=$(basename "$src" .hip)
    nvcc -cubin -arch=sm_90 -std=c++17 -O3 -x cu -o "$KDIR/$m.sm_90.co" "$src" \
        > "$OUT/nvcc-$m.log" 2>&1 &
done
for job in $(jobs -p); do wait "$job" || kfail=$((kfail + 1)); done
row "kernel modules (nvcc sm_90)" "$(ls "$KDIR" | wc -l) built, $kfail failed"
row "test double" "built ($(ls "$BUILD" | tr '\n' ' '))"

export ROCM_SYS_HIP_LIB="$BUILD/libamdhip64.so"
export ROCM_SAFE_TEST_MODULE="$BUILD/test_kernels.cubin"
export CANDLE_ROCM_KERNELS_DIR="$KDIR"
# The MIOpen double (miopen_on_cudnn.c), when build.sh found cuDNN: loaded lazily, by the code
# that asks for MIOpen only (rocm-safe's miopen_gpu tests today).
if [ -e "$BUILD/miopen/libMIOpen.so.1" ]; then
    export ROCM_SYS_MIOPEN_LIB="$BUILD/miopen/libMIOpen.so.1"
    row "MIOpen double" "built (cuDNN underneath)"
    # cuDNN 9 compiles some engines at run time with NVRTC (seen: every f16 forward and every
    # transposed-conv algorithm failing with CUDNN_STATUS_INTERNAL_ERROR, f32 fine): put
    # PyTorch's NVRTC on the loader path.
    CUDA_LIBS_NEEDED="libnvrtc.so.13 libnvrtc-builtins.so.13.0"
    # shellcheck source=tests/hip-on-cuda/cuda_libs.sh
    source tests/hip-on-cuda/cuda_libs.sh
    unset CUDA_LIBS_NEEDED
else
    row "MIOpen double" "not built (no cuDNN found; see build.log)"
fi
# The RCCL double (rccl_on_nccl.c), when build.sh found NCCL: NCCL is opened at run time from
# the path build.sh recorded. NVLink multicast stays off on these machines (NCCL_NVLS_ENABLE=0).
export NCCL_NVLS_ENABLE=0
if [ -e "$BUILD/rccl/librccl.so.1" ] && [ -s "$BUILD/rccl/nccl-lib.txt" ]; then
    export ROCM_SYS_RCCL_LIB="$BUILD/rccl/librccl.so.1"
    RCCL_ON_NCCL_LIB="$(cat "$BUILD/rccl/nccl-lib.txt")"
    export RCCL_ON_NCCL_LIB
    row "RCCL double" "built (NCCL underneath: $RCCL_ON_NCCL_LIB)"
else
    row "RCCL double" "not built (no NCCL found; see build.log)"
fi
export RUST_BACKTRACE=1

# launch_overhead LOG: rocm-safe's launch benchmark ($BUILD/bin/rocm-safe.launch_overhead) next
# to a raw cuLaunchKernel loop of the same kernel and a raw hipModuleLaunchKernel loop through
# the test double (the call rocm-safe wraps), output in LOG, a summary row per measure.
launch_overhead() {
    local log="$1"
    [ -x "$BUILD/bin/rocm-safe.launch_overhead" ] || return 0
    "$BUILD/bin/rocm-safe.launch_overhead" 100000 2>&1 | tee "$log"
    [ -x "$BUILD/launch_bench" ] && "$BUILD/launch_bench" "$ROCM_SAFE_TEST_MODULE" 100000 \
        "$ROCM_SYS_HIP_LIB" 2>&1 | tee -a "$log"
    local k ours raw hip ratio hratio
    for k in enqueue with_sync; do
        ours=$(awk -v k="rocm_safe_${k}_us" '$2 == k { print $3 }' "$log")
        raw=$(awk -v k="raw_culaunch_${k}_us" '$2 == k { print $3 }' "$log")
        hip=$(awk -v k="raw_hiplaunch_${k}_us" '$2 == k { print $3 }' "$log")
        ratio=$(awk -v a="$ours" -v b="$raw" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b }')
        hratio=$(awk -v a="$ours" -v b="$hip" 'BEGIN { if (a != "" && b > 0) printf "%.2f", a / b }')
        row "launch $k (us/launch)" "rocm-safe ${ours:-?} | raw cuLaunchKernel ${raw:-?} (ratio ${ratio:-?}) | raw hipModuleLaunchKernel via the double ${hip:-?} (ratio ${hratio:-?})"
    done
}
