#!/usr/bin/env python3
"""matrix_layouts.py - compares matrix.h's operand layouts with AMD's Matrix Instruction Calculator.

A maintenance check, not part of the test suite (it needs the calculator, which the CI does not
have): for every emulated instruction it builds a small host program that prints matrix.h's map
from each A, B and D element to its (lane, element), runs the calculator's --register-layout
for the same instruction (CSV), and requires the two sets of (row, col, lane, element) to be
equal. Run it after adding or changing a layout in matrix.h:

    git clone https://github.com/ROCm/amd_matrix_instruction_calculator   (pip install tabulate)
    python3 kernels/tests/emu/matrix_layouts.py path/to/matrix_calculator.py

Exits non-zero on any difference. Uses clang++-19 (or $ROCM_PATH/llvm/bin/clang++).
"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(HERE, "..", "..", "include")

# (build defines, [(calculator architecture, instruction, bits per element, matrix.h layout)])
BUILDS = [
    ("-DEMU_AMD_WAVE=64 -D__gfx942__", [
        ("CDNA3", "v_mfma_f32_16x16x16_f16", 16, "MFMA_16x16x16"),
        ("CDNA3", "v_mfma_f32_16x16x16_bf16", 16, "MFMA_16x16x16"),
        ("CDNA2", "v_mfma_f32_16x16x16bf16_1k", 16, "MFMA_16x16x16"),
        ("CDNA3", "v_mfma_f32_16x16x4_f32", 32, "MFMA_16x16x4_F32"),
        ("CDNA3", "v_mfma_f32_32x32x8_f16", 16, "MFMA_32x32x8"),
        ("CDNA3", "v_mfma_f32_32x32x8_bf16", 16, "MFMA_32x32x8"),
        ("CDNA2", "v_mfma_f32_32x32x8bf16_1k", 16, "MFMA_32x32x8"),
    ]),
    ("-DEMU_AMD_WAVE=32 -D__gfx1100__", [
        ("RDNA3", "v_wmma_f32_16x16x16_f16", 16, "WMMA11"),
        ("RDNA3", "v_wmma_f32_16x16x16_bf16", 16, "WMMA11"),
    ]),
    ("-DEMU_AMD_WAVE=32 -D__gfx1200__", [
        ("RDNA4", "v_wmma_f32_16x16x16_f16", 16, "WMMA12"),
        ("RDNA4", "v_wmma_f32_16x16x16_bf16", 16, "WMMA12"),
    ]),
]

DUMP = r"""
#include "emu.h"
using namespace emu::mma;
int main(int argc, char **argv) {
    const Layout &L = LAYOUT;
    for (int r = 0; r < L.reps; r++)
        for (int i = 0; i < L.M; i++)
            for (int k = 0; k < L.K; k++) {
                Slot s = L.a(i, k, r);
                printf("A %d %d %d %d\n", i, k, s.lane, s.e);
                s = L.b(k, i, r);
                printf("B %d %d %d %d\n", k, i, s.lane, s.e);
            }
    for (int i = 0; i < L.M; i++)
        for (int j = 0; j < L.N; j++) {
            Slot s = L.d(i, j);
            printf("D %d %d %d %d\n", i, j, s.lane, s.e);
        }
}
"""


def ours(defines, layout, tmp):
    """matrix.h's slots of one layout: {matrix: {(row, col, lane, element)}}."""
    src, exe = os.path.join(tmp, "dump.cpp"), os.path.join(tmp, "dump")
    with open(src, "w") as f:
        f.write(DUMP.replace("LAYOUT", layout))
    rocm = os.environ.get("ROCM_PATH")
    clang = os.path.join(rocm, "llvm/bin/clang++") if rocm else "clang++-19"
    subprocess.run([clang, "-x", "c++", "-std=c++17", "-O0", *defines.split(), f"-I{HERE}", f"-I{INCLUDE}",
                    "-o", exe, src], check=True)
    out = {"A": set(), "B": set(), "D": set()}
    for line in subprocess.run([exe], check=True, capture_output=True, text=True).stdout.splitlines():
        m, *v = line.split()
        out[m].add(tuple(int(x) for x in v))
    return out


def theirs(calc, arch, inst, bits, matrix):
    """The calculator's slots: its --register-layout table, entries vG{lane}.[hi:lo]."""
    args = [sys.executable, calc, "-a", arch, "-i", inst, f"-{matrix}", "--register-layout", "--csv"]
    if arch.startswith("RDNA"):
        args += ["-w", "32"]
    table = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    out = set()
    for line in table.splitlines():
        if not re.match(r"^\d+,", line):
            continue
        row, *cells = line.split(",")
        for col, cell in enumerate(cells):
            for entry in cell.split():
                m = re.match(r"v(\d+)\{(\d+)\}(?:\.\[(\d+):(\d+)\])?$", entry)
                if not m:
                    raise SystemExit(f"{inst} {matrix}: cannot read {entry!r}")
                gpr, lane, lo = int(m.group(1)), int(m.group(2)), int(m.group(4) or 0)
                # C/D are 32-bit: one element per VGPR; A/B pack 32 / bits elements per VGPR.
                e = gpr if matrix == "D" else gpr * (32 // bits) + lo // bits
                out.add((int(row), col, lane, e))
    return out


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    calc, bad, n = sys.argv[1], 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for defines, insts in BUILDS:
            for arch, inst, bits, layout in insts:
                mine = ours(defines, layout, tmp)
                for matrix in "ABD":
                    t = theirs(calc, arch, inst, bits, matrix)
                    same = t == mine[matrix]
                    n += 1
                    bad += not same
                    print(f"{arch} {inst:28s} {matrix}: {len(t):4d} slots {'same' if same else 'DIFFERENT'}")
                    if not same:
                        print("  calculator only:", sorted(t - mine[matrix])[:6])
                        print("  matrix.h only:  ", sorted(mine[matrix] - t)[:6])
    print(f"{n} tables compared, {bad} different")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
