#!/usr/bin/env bash
# A kernel tuning sweep on the NVIDIA device machine, from the repository root with
# `.bench-bundle` carried (`cargo xtask bench` builds it):
#
#   SWEEP_VARIANTS='base:;kparts2:-DQMV8_KPARTS=2' SWEEP_ENVS='f32:;q8:CANDLE_ROCM_QMATVEC=q8' \
#       SWEEP_ONLY=qmatvec bash tests/hip-on-cuda/sweep.sh
#
# 1. builds the test double and the kernels (setup.sh, as bench.sh does);
# 2. compiles kernels/hip/$SWEEP_MODULE.hip (qmatvec by default) once per variant with that
#    variant's extra nvcc flags (the tuning knobs the kernel sources define, e.g. QMV_R,
#    QMV_UNROLL, QMV8_KPARTS), all variants at once;
# 3. for each variant, installs its code object as the registry's override and runs
#    `candle-rocm-bench --only $SWEEP_ONLY` once per environment of SWEEP_ENVS;
# 4. writes every row to $OUT/sweep.tsv (variant, environment, then the bench's columns) and
#    prints one table: a row per bench row and environment, a column per variant, microseconds
#    and the bench's rate.
#
# SWEEP_VARIANTS and SWEEP_ENVS are `;`-separated `name:value` pairs (a variant's value: nvcc
# flags; an environment's: VAR=value words). An environment named `name/words` runs those bench
# rows (`--only words`) instead of SWEEP_ONLY's. SWEEP_TIMEOUT bounds each bench run (seconds,
# 120 by default). Nothing here changes what ships: it measures knobs before their defaults
# move.
set -uo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=tests/hip-on-cuda/bench-preamble.sh
source tests/hip-on-cuda/bench-preamble.sh

setup_quietly

module="${SWEEP_MODULE:-qmatvec}"
only="${SWEEP_ONLY:-qmat}"
limit="${SWEEP_TIMEOUT:-120}"
IFS=';' read -r -a variants <<< "${SWEEP_VARIANTS:-base:}"
IFS=';' read -r -a envs <<< "${SWEEP_ENVS:-default:}"
VDIR="$BUILD/sweep"
rm -rf "$VDIR"
mkdir -p "$VDIR"

echo "== compile $module.hip once per variant"
for v in "${variants[@]}"; do
    name=${v%%:*} flags=${v#*:}
    # shellcheck disable=SC2086  # flags holds whole nvcc words
    nvcc -cubin -arch=sm_90 -std=c++17 -O3 -x cu $flags -o "$VDIR/$name.co" "kernels/hip/$module.hip" \
        > "$VDIR/$name.log" 2>&1 &
done
wait
for v in "${variants[@]}"; do
    name=${v%%:*}
    if [ -s "$VDIR/$name.co" ]; then row "variant $name" "built (${v#*:})"; else
        row "variant $name" "FAILED: $(head -3 "$VDIR/$name.log" | tr '\n' ' ')"
    fi
done

echo "== run the bench rows ($only) per variant and environment"
: > "$OUT/sweep.tsv"
shipped="$KDIR/$module.sm_90.co"
cp "$shipped" "$VDIR/shipped.co"
for v in "${variants[@]}"; do
    name=${v%%:*}
    [ -s "$VDIR/$name.co" ] || continue
    cp "$VDIR/$name.co" "$shipped"
    for e in "${envs[@]}"; do
        ename=${e%%:*} evars=${e#*:} eonly=$only
        if [ "${ename#*/}" != "$ename" ]; then eonly=${ename#*/} ename=${ename%%/*}; fi
        # shellcheck disable=SC2086  # evars holds whole VAR=value words
        env $evars timeout "$limit" "$BUILD/bin/candle-rocm-bench" --only "$eonly" \
            > "$VDIR/run.tsv" 2> "$VDIR/run.err"
        rc=$?
        [ "$rc" = 0 ] || row "run $name/$ename" "exit $rc: $(tail -2 "$VDIR/run.err" | tr '\n' ' ')"
        awk -v v="$name" -v e="$ename" -F'\t' 'BEGIN { OFS = "\t" } $1 == "bench" { print v, e, $0 }' \
            "$VDIR/run.tsv" >> "$OUT/sweep.tsv"
    done
done
cp "$VDIR/shipped.co" "$shipped"

python3 - "$OUT/sweep.tsv" > "$OUT/sweep.md" << 'EOF'
import sys
rows, variants = {}, []
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    # variant, env, "bench", group, op, shape, dtype, secs, work, unit
    v, e, op, shape, secs, work, unit = f[0], f[1], f[4], f[5], float(f[7]), float(f[8]), f[9]
    if v not in variants:
        variants.append(v)
    rate = work / secs / 1e9
    label = {"bytes": "GB/s", "flops": "GFLOP/s"}.get(unit, f"G{unit}/s")
    rows.setdefault((op, shape, e), {})[v] = f"{secs * 1e6:.1f} us ({rate:.0f} {label})"
print("| op | shape | env | " + " | ".join(variants) + " |")
print("|---|---|---|" + "---|" * len(variants))
for (op, shape, e), cells in rows.items():
    print(f"| {op} | {shape} | {e} | " + " | ".join(cells.get(v, "-") for v in variants) + " |")
EOF
cat "$SUMMARY"
cat "$OUT/sweep.md"
