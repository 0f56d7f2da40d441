# Shared start of bench.sh, profile.sh and sweep.sh, sourced from the repository root: the output
# folder ($OUT), the build folder, the bench bundle's root, the summary file and its `row`
# writer, and `setup_quietly` (below); it stops (exit 2) when `.bench-bundle` was not carried,
# and writes the GPU and date rows.
# shellcheck shell=bash
OUT="${OUT:-$PWD/target/hip-on-cuda-out}"
BUILD=/tmp/hip-on-cuda
BUNDLE_ROOT=.bench-bundle
mkdir -p "$OUT" "$BUILD"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
row() { printf '%-34s %s\n' "$1" "$2" | tee -a "$SUMMARY" >/dev/null; }

if [ ! -d "$BUNDLE_ROOT/bin" ]; then
    echo "$(basename "$0"): $BUNDLE_ROOT/bin is missing: run \`cargo xtask bench\` and carry $BUNDLE_ROOT" >&2
    exit 2
fi
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
row "gpu" "$gpu, driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
row "date (UTC)" "$(date -u +%Y-%m-%dT%H:%MZ)"

# setup_quietly: sources setup.sh (the double, the kernels, the bundle's binaries) with its build
# logs beside $OUT instead of in it (the device tool brings back 8 files), for the scripts whose
# own outputs fill $OUT; prints the logs and exits 1 when setup fails.
setup_quietly() {
    local main_out="$OUT"
    OUT="$BUILD/setup-logs"
    mkdir -p "$OUT"
    # shellcheck source=tests/hip-on-cuda/setup.sh
    source tests/hip-on-cuda/setup.sh || { cat "$OUT"/*.log; exit 1; }
    OUT="$main_out"
}
