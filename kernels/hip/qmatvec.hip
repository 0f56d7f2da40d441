// qmatvec.hip - quantized matrix-vector products for GGUF decode: y = W x for one f32 row x of
// k values and weights W of n rows stored as GGML blocks (q4_0, q4_1, q5_0, q5_1, q8_0 of 32
// values; q4_K, q5_K, q6_K super-blocks of 256 values), f32 math; and (qmatvec/matvec_q8.h) the
// same products on x rounded to 8 bits (qmatvec8_*, candle-rocm's CANDLE_ROCM_QMATVEC=q8).
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax plus a few AMD builtins
// behind __HIP_DEVICE_COMPILE__, so the same file builds for AMD (clang, kernels/include
// headers) and for the HIP-on-CUDA harness (nvcc with CUDA's own headers).
//
// Block layouts (GGML, little endian, packed; 32 values per block, a row is k / 32 blocks):
//   q4_0 = { f16 d; u8 qs[16] }          18 bytes, value j = ((qs[j] & 15) - 8) * d,
//                                                   value j + 16 = ((qs[j] >> 4) - 8) * d
//   q4_1 = { f16 d; f16 m; u8 qs[16] }   20 bytes, value = nibble * d + m (same nibble order)
//   q8_0 = { f16 d; i8 qs[32] }          34 bytes, value j = qs[j] * d
//   q5_0 / q5_1: see Q5d (a fifth bit per value in a 32-bit qh word before the q4 nibbles)
// Super-block layouts (256 values per super-block, a row is k / 256 super-blocks):
//   q4_K = { f16 d; f16 dmin; u8 scales[12]; u8 qs[128] }             144 bytes
//   q5_K = { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128] }  176 bytes
//     8 sub-blocks of 32 values, each with a 6-bit scale sc[j] and min m[j] packed in scales[]:
//     j < 4: sc = scales[j] & 63, m = scales[j + 4] & 63; j >= 4: sc = (scales[j + 4] & 15) |
//     (scales[j - 4] >> 6) << 4, m = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4. Chunk c
//     (0..4) of 64 values holds sub-blocks 2c and 2c + 1: for i < 32, value 64c + i =
//     d sc[2c] q - dmin m[2c] with q = qs[32c + i] & 15 (+ 16 if bit 2c of qh[i], q5_K), value
//     64c + 32 + i = d sc[2c + 1] q - dmin m[2c + 1] with q = qs[32c + i] >> 4 (+ 16 if bit
//     2c + 1 of qh[i]).
//   q6_K = { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d }            210 bytes
//     halves h (0..2) of 128 values; for l < 32, with a = ql[64h + l], b = ql[64h + 32 + l],
//     e = qh[32h + l], s = scales + 8h + l / 16: value 128h + l + 32g = d s[2g] (q - 32) with
//     q = (a & 15 | (e & 3) << 4, b & 15 | (e >> 2 & 3) << 4, a >> 4 | (e >> 4 & 3) << 4,
//     b >> 4 | (e >> 6 & 3) << 4) for g = 0, 1, 2, 3.
//
// Work split. A group of QMV_GROUP (32) lanes computes QMV_R (2) output rows. QMV_BL (4) lanes
// share a 32-value block, QMV_BV (8) values each: lane l takes part t = l % 4 of the blocks
// l / 4, l / 4 + 8, ... (QMV_BS = 8 blocks per group step), so the parts of a block read its
// quants back to back, a step's 8 blocks are adjacent, and x is read in 16-byte pieces that
// neighbouring lanes take side by side (not 128 bytes per lane at a 128-byte stride, which
// made every x load touch 32 cache lines):
//   q4_0 / q4_1 / q5_0 / q5_1 part t: the qs word t (bytes 4t .. 4t + 4): values 4t + [0, 4)
//     from the low nibbles and 16 + 4t + [0, 4) from the high ones (x runs of 4 at 4t and
//     16 + 4t; q5's fifth bits from qh);
//   q8_0 part t: qs bytes 8t .. 8t + 8: values 8t + [0, 8) (x runs of 4 at 8t and 8t + 4).
// A lane loads its x values once per step and uses them for both rows, accumulates in f32
// (q4 offsets and mins, and q8_0's +128 byte offset, applied through the sum of its x
// values), and the group's partial sums are reduced with xor shuffles inside the 32 lanes
// (ds_bpermute on AMD, so a wave of 64 holds two independent groups; the wave size QMV_WAVE
// is a compile-time constant, 32 or 64, and nothing assumes either). A block of QMV_BLOCK
// (256) threads has 8 groups, so QMV_ROWS (16) rows; blocks visit rows with a block-uniform
// grid-stride loop, so every lane reaches every shuffle; a row past n is computed from the
// group's first row (so every lane loads a valid row) and not written.
//
// The k-quant kernels keep that split (same groups, rows per group, block and grid) but share
// a super-block among QMV_KL (16) lanes of QMV_KV (16) values each: lane l takes part
// t = l % 16 of the super-blocks l / 16, l / 16 + 2, ... (QMV_KS = 2 super-blocks per group
// step), so the parts of a super-block read its quants back to back and the 2 super-blocks of
// a step are adjacent. (QMV_KL 8, 32 values per lane, also works, but takes about 115-120
// VGPRs where 16 takes 80-95; -DQMV_KL=8 selects it.)
//   q4_K / q5_K part t: chunk c = t / 4, i0 = 8 (t % 4): the 8 bytes qs[8t .. 8t + 8) (and
//     qh[i0 .. i0 + 8) for q5_K): values 64c + i0 + [0, 8) (low nibbles, sub-block 2c) and
//     64c + 32 + i0 + [0, 8) (high nibbles, sub-block 2c + 1).
//   q6_K part t: half h = t / 8, l0 = 4 (t % 8): the 4 bytes of ql at 64h + l0, of ql at
//     64h + 32 + l0 and of qh at 32h + l0; values 128h + l0 + 32g + [0, 4) for g = 0..4 (one
//     scale each, s[2g] with s = scales + 8h + l0 / 16).
// So a part's x values are runs of 8 (4 for q6_K) contiguous floats 32 apart, 16-byte aligned
// when x is. Quants are summed as unsigned integers against x and the scales, mins and
// offsets (-32 for q6_K) applied per run: d sc sum(q x) - dmin m sum(x) and
// d s (sum(q x) - 32 sum(x)), the x sums shared by both rows.
//
// Loads. Weight blocks are read as 32-bit words from the 4-byte-aligned address at or below
// the block's start: q4_1 / q5_1 blocks (20, 24 bytes) and q4_K / q5_K super-blocks (144, 176)
// are always word aligned; q4_0 (18), q5_0 (22), q8_0 (34) and q6_K (210) blocks start at 0 or
// 2 mod 4, and the words are realigned with a funnel shift (one v_alignbit per word on AMD).
// That reads up to 2 bytes before a block (inside the previous block, never before the buffer:
// the first block is aligned) and up to 4 bytes after the last one (q4_0, q5_0 and q8_0's last
// part reads one word
// past its bytes; inside candle-rocm's MATRIX_ROW_PADDING of zeroed blocks, at least 288
// bytes). x is read as float4 in the _v kernels (x 16-byte aligned), as floats
// otherwise.
//
// Kernels (T in q4_0, q4_1, q5_0, q5_1, q8_0, q4_K, q5_K, q6_K; the 8-bit ones below for all
// of them):
//   qmatvec_<T>(const uint8_t* w, const float* x, float* y, unsigned n, unsigned nb)
//   qmatvec_<T>_v(same)
//     w: n rows of nb blocks each (nb = k / 32 for q4_0, q4_1, q8_0; nb = k / 256
//     super-blocks for q4_K, q5_K, q6_K), back to back, 4-byte aligned, readable 2 bytes past
//     the end; x: k floats (16-byte aligned for _v); y: n floats. Launch with QMV_BLOCK
//     threads in x (blockDim (256, 1, 1)) and any grid (candle-rocm uses
//     min(ceil(n / QMV_ROWS), 2^20) blocks); the same for every type.
//   qmatvec_split_<T>[_v](same, unsigned gpr): one x row with k split over gpr groups per row
//     group (qmatvec/split.h; experimental, CANDLE_ROCM_QMATVEC_SPLIT).
//   qmatvec_swiglu_<T>[_v](same, with h = n / 2 in place of n): SwiGLU's gate of one x row's
//     product with 2h stacked gate and up rows, silu(W[i] x) * W[h + i] x (qmatvec/gated.h).
//
// The kernels live in qmatvec/, one file per family, included here in order (one module, one
// code object per target).

#include "qmatvec/common.h"
#include "qmatvec/matvec_f32.h"
#include "qmatvec/split.h"
#include "qmatvec/gated.h"
#include "qmatvec/matvec_q8.h"
#include "qmatvec/dequantize.h"
#include "qmatvec/qmm.h"
#include "qmatvec/qmr.h"
#include "qmatvec/qmm8.h"
