// copy.hip - batched 2-D copies, and the convolutions' im2col rows (below): the copies of
// candle-core's `cat` (one per input) in a single launch, through the out-of-tree slot's
// `copy2d_many` hook. candle's own `copy2d` kernel takes one launch per input, and a
// grouped-query attention's `repeat_kv` concatenates one tensor 8 times: in a decoder's token
// step these copies were 44% of all launches, and the step is bound by the host's launch rate.
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax, so the same file builds
// for AMD (clang, kernels/include headers) and for the HIP-on-CUDA harness (nvcc).
//
// A batch is up to CP_MAX copies into one destination buffer; copy c moves d1[c] rows of d2[c]
// elements from src[c] (row stride src_s[c]) to dst + dst_o[c] (row stride dst_s[c]), as
// candle's copy2d does, elements of W bytes (1, 2, 4, 8: every dtype). The copies' element
// counts d1 * d2 are laid end to end: start[c] is where copy c begins in that flat index space
// and start[n] the total. A thread takes flat indices i with a grid-stride loop, finds the copy
// whose range holds i (a scan of at most CP_MAX entries, uniform across most of a wave), and
// moves one element. Sizes are checked on the host: every d1 * d2, stride and the total fit
// 32 bits; offsets into the buffers are computed in 64 bits.
//
// Kernels: copy2d_many_b<W>(CopyBatch batch, T* dst) for W in 1, 2, 4, 8 (T the unsigned
// integer of W bytes). Blocks of any size, any grid (candle-rocm: 256 threads, one thread per
// element up to the grid limit). The batch is passed by value: no upload, no device
// allocation per launch.
//
// Also here, the column matrix of the convolutions' GEMM path (candle-rocm's launch/conv.rs):
// im2col_rows_b<W>(Im2colArgs a, const T* src, T* dst) writes, for a tile of images and output
// positions, row r = ((image * c_in + ci) * k_h + ky) * k_w + kx and column i (output position
// p = p0 + i, row-major over (h_out, w_out)) as dst[r * cols + i] = the input element at
// (image, ci, oy * stride_h + ky * dil_h - pad_h, ox * stride_w + kx * dil_w - pad_w), or zero
// outside the input. Each row is one (image, channel, tap) and its columns are the output
// positions in order, so a row is written with consecutive stores, and a GEMM of the kernel
// (c_out, c_in * k_h * k_w) by a tile's rows writes the NCHW output directly. The input is
// read through its four strides (any layout: a channel slice of a grouped convolution too).
// With `stacked` = 1 the tile's images lie side by side along the columns instead: row
// r = (ci * k_h + ky) * k_w + kx, column img * cols + i, row length images * cols
// (dst[r * images * cols + img * cols + i]), so one GEMM of the kernel by the whole tile has
// images * cols rows of output positions (a tall product, not a batch of short ones; the
// caller then permutes its (c_out, image, position) result into NCHW). `rows` is
// images * c_in * k_h * k_w either way: the matrix has the same elements, only their places
// differ.
// A thread takes a run of consecutive columns of one plane (the runs numbered plane by plane,
// so a block's threads cover consecutive columns, and the next plane's when an image has fewer
// positions than a block has threads: ResNet's 49 and 196) and writes each column's k_h * k_w
// taps down the plane's rows. A run is IM2COL_RUN columns for a 1x1 kernel, whose one tap a
// column leaves the index divisions the cost (the run steps its output position instead of
// dividing again), and one column otherwise (a warp's stores then stay contiguous, which the
// taps' many stores need more than fewer divisions). Grid: any, read as one
// line of blocks (blockIdx.y * gridDim.x + blockIdx.x) striding over the runs. Sizes (rows,
// cols, p0 + cols, the dims) fit 32 bits, checked on the host; the run count and element
// offsets are 64-bit. Zero is the all-zero bit pattern, which is 0 in every dtype, so the kernels move
// bits like the copies above. unstack_rows_b<W> (below the im2col) puts a stacked tile's
// product into NCHW.
//
// And nearest-neighbour upsampling (candle's `upsample_nearest2d`, a copy too): upsample_nearest_b<W>(
// UpArgs a, const T* src, T* dst) fills the contiguous (planes, h_out, w_out) output from the
// contiguous (planes, h_in, w_in) input with candle-kernels' index rule: output (oh, ow) reads
// row (size_t)(oh * scale_h) and column (size_t)(ow * scale_w), products in f64, each clamped
// to the last row / column (so the same elements as candle's kernel for any sizes). A thread
// writes a run of UP_RUN consecutive outputs of one row (the runs numbered row by row; a row's
// last run may be shorter) with a grid-stride loop over the runs; with a.pack (w_out a multiple
// of UP_RUN) a full run is one store of UP_RUN elements (dst is aligned to it: the runs start
// at multiples of UP_RUN of a buffer's start). candle's kernel takes four 64-bit divisions per
// element; this one two per run.
#include <stdint.h>

#define CP_MAX 8

// Kernel parameter, by value. Mirrors candle-rocm's `CopyBatch` (#[repr(C)], 296 bytes):
// 64-bit fields first, then 32-bit ones, so both sides lay it out without padding.
struct CopyBatch {
    uint64_t src[CP_MAX];    // address of each source's first copied element
    uint64_t dst_o[CP_MAX];  // first destination element of each copy
    uint32_t d1[CP_MAX];     // rows
    uint32_t d2[CP_MAX];     // elements per row
    uint32_t src_s[CP_MAX];  // source row stride, elements
    uint32_t dst_s[CP_MAX];  // destination row stride, elements
    uint32_t start[CP_MAX + 1];
    uint32_t n;              // copies in the batch, 1..CP_MAX
};
static_assert(sizeof(CopyBatch) == 296, "CopyBatch must match candle-rocm's layout");

template <typename T>
__device__ __forceinline__ void copy2d_many(const CopyBatch &b, T *dst) {
    const uint32_t total = b.start[b.n];
    const uint32_t step = gridDim.x * blockDim.x;
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        uint32_t c = 0;
        while (c + 1 < b.n && i >= b.start[c + 1]) c++;
        const uint32_t local = i - b.start[c];
        const uint32_t row = local / b.d2[c];
        const uint32_t col = local - row * b.d2[c];
        const T *src = reinterpret_cast<const T *>(b.src[c]);
        dst[b.dst_o[c] + (uint64_t)row * b.dst_s[c] + col] = src[(uint64_t)row * b.src_s[c] + col];
    }
}

#define CP_KERNEL(W, T)                                                                          \
    extern "C" __global__ void copy2d_many_b##W(const CopyBatch batch, T *dst) {                  \
        copy2d_many<T>(batch, dst);                                                              \
    }

CP_KERNEL(1, uint8_t)
CP_KERNEL(2, uint16_t)
CP_KERNEL(4, uint32_t)
CP_KERNEL(8, uint64_t)

// Kernel parameter of im2col_rows_b<W>, by value. Mirrors candle-rocm's `Im2colArgs`
// (#[repr(C)], 96 bytes): 64-bit strides first, then 32-bit fields, no padding.
struct Im2colArgs {
    uint64_t s_b, s_c, s_h, s_w;         // input strides, elements (image, channel, row, column)
    uint32_t c_in, h_in, w_in, w_out;    // input channels and size, output width
    uint32_t k_h, k_w, stride_h, stride_w;
    uint32_t pad_h, pad_w, dil_h, dil_w;
    uint32_t rows;                       // images * c_in * k_h * k_w
    uint32_t cols;                       // output positions in the tile
    uint32_t p0;                         // the tile's first output position
    uint32_t stacked;                    // 1: images side by side along the columns (above)
};
static_assert(sizeof(Im2colArgs) == 96, "Im2colArgs must match candle-rocm's layout");

#define IM2COL_RUN 4

// One output position's k_h * k_w taps, one per row of the plane's block of rows (`o` the first
// row's element, rows `ld` apart). KH / KW fix the kernel's size at compile time (0: read from
// `a`), and the fixed sizes are taken only with dilation 1; UNIT_W: the input's column stride is
// 1. The 3x3 and 1x1 of dense inputs, nearly every convolution, then run their taps unrolled by
// the compiler (constant trip counts), without the stride and dilation multiplies.
template <typename T, uint32_t KH, uint32_t KW, bool UNIT_W>
__device__ __forceinline__ void im2col_taps(const Im2colArgs &a, const T *in, T *o, uint64_t ld,
                                            int64_t y0, int64_t x0) {
    const uint32_t kh = KH ? KH : a.k_h, kw = KW ? KW : a.k_w;
    const uint32_t dh = KH ? 1 : a.dil_h, dw = KW ? 1 : a.dil_w;
    for (uint32_t ky = 0; ky < kh; ky++) {
        const int64_t iy = y0 + (int64_t)ky * dh;
        const bool row_in = iy >= 0 && iy < (int64_t)a.h_in;
        const T *line = in + (uint64_t)(row_in ? iy : 0) * a.s_h;
        for (uint32_t kx = 0; kx < kw; kx++) {
            const int64_t ix = x0 + (int64_t)kx * dw;
            T v = 0;
            if (row_in && ix >= 0 && ix < (int64_t)a.w_in)
                v = line[UNIT_W ? (uint64_t)ix : (uint64_t)ix * a.s_w];
            *o = v;
            o += ld;
        }
    }
}

template <typename T>
__device__ __forceinline__ void im2col_rows(const Im2colArgs &a, const T *src, T *dst) {
    const uint32_t taps = a.k_h * a.k_w;
    const uint32_t planes = a.rows / taps; // images * c_in; the host passes rows = planes * taps
    // Row length, and where an image's block and a channel's rows start (both layouts above).
    const uint64_t ld = a.stacked ? (uint64_t)(planes / a.c_in) * a.cols : a.cols;
    const uint64_t img_at = a.stacked ? a.cols : (uint64_t)a.c_in * taps * a.cols;
    const uint32_t run = taps == 1 ? IM2COL_RUN : 1;
    const uint32_t runs = (a.cols + run - 1) / run; // a plane's runs
    const uint64_t items = (uint64_t)planes * runs;
    const bool narrow = items <= 0xffffffffull; // 32-bit divisions (every tile the host makes)
    // The unrolled tap loops (uniform across the launch).
    const bool unit = a.s_w == 1 && a.dil_h == 1 && a.dil_w == 1;
    const bool k3 = unit && a.k_h == 3 && a.k_w == 3, k1 = unit && taps == 1;
    const uint64_t step = (uint64_t)gridDim.x * gridDim.y * blockDim.x;
    for (uint64_t t = ((uint64_t)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
         t < items; t += step) {
        const uint32_t plane = narrow ? (uint32_t)t / runs : (uint32_t)(t / runs);
        const uint32_t i0 = (uint32_t)(t - (uint64_t)plane * runs) * run;
        const uint32_t img = plane / a.c_in, ci = plane - img * a.c_in;
        const T *in = src + (uint64_t)img * a.s_b + (uint64_t)ci * a.s_c;
        T *out = dst + (uint64_t)img * img_at + (uint64_t)ci * taps * ld;
        const uint32_t p = a.p0 + i0;
        uint32_t oy = p / a.w_out, ox = p - oy * a.w_out;
        const uint32_t end = a.cols - i0 < run ? a.cols : i0 + run;
        for (uint32_t i = i0; i < end; i++) {
            const int64_t y0 = (int64_t)oy * a.stride_h - (int64_t)a.pad_h;
            const int64_t x0 = (int64_t)ox * a.stride_w - (int64_t)a.pad_w;
            if (k3)
                im2col_taps<T, 3, 3, true>(a, in, out + i, ld, y0, x0);
            else if (k1)
                im2col_taps<T, 1, 1, true>(a, in, out + i, ld, y0, x0);
            else
                im2col_taps<T, 0, 0, false>(a, in, out + i, ld, y0, x0);
            if (++ox == a.w_out) {
                ox = 0;
                oy++;
            }
        }
    }
}

// The stacked tiles' product back into NCHW: unstack_rows_b<W>(const T* src, T* dst, uint32_t
// images, uint32_t c_out, uint32_t cols) writes dst[(img * c_out + co) * cols + q] =
// src[(co * images + img) * cols + q] for img < images, co < c_out, q < cols: the GEMM's
// (c_out, image, position) result as (image, c_out, position), rows of `cols` elements moved
// whole. A thread takes a run of UNSTACK_RUN consecutive elements of one destination row (two
// divisions a run; the runs numbered row by row); grid: any, read as one line of blocks. The
// host checks that images * c_out * cols elements fit both buffers.
#define UNSTACK_RUN 4

template <typename T>
__device__ __forceinline__ void unstack_rows(const T *src, T *dst, uint32_t images, uint32_t c_out,
                                             uint32_t cols) {
    const uint32_t runs = (cols + UNSTACK_RUN - 1) / UNSTACK_RUN; // a row's runs
    const uint64_t items = (uint64_t)images * c_out * runs;
    const bool narrow = items <= 0xffffffffull;
    const uint64_t step = (uint64_t)gridDim.x * gridDim.y * blockDim.x;
    for (uint64_t t = ((uint64_t)blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
         t < items; t += step) {
        const uint32_t row = narrow ? (uint32_t)t / runs : (uint32_t)(t / runs);
        const uint32_t q0 = (uint32_t)(t - (uint64_t)row * runs) * UNSTACK_RUN;
        const uint32_t img = row / c_out, co = row - img * c_out;
        const T *in = src + ((uint64_t)co * images + img) * cols;
        T *out = dst + (uint64_t)row * cols;
        const uint32_t end = cols - q0 < UNSTACK_RUN ? cols : q0 + UNSTACK_RUN;
        for (uint32_t q = q0; q < end; q++) out[q] = in[q];
    }
}

#define IM2COL_KERNEL(W, T)                                                                      \
    extern "C" __global__ void im2col_rows_b##W(const Im2colArgs a, const T *src, T *dst) {       \
        im2col_rows<T>(a, src, dst);                                                             \
    }

IM2COL_KERNEL(1, uint8_t)
IM2COL_KERNEL(2, uint16_t)
IM2COL_KERNEL(4, uint32_t)
IM2COL_KERNEL(8, uint64_t)

#define UNSTACK_KERNEL(W, T)                                                                     \
    extern "C" __global__ void unstack_rows_b##W(const T *src, T *dst, uint32_t images,          \
                                                 uint32_t c_out, uint32_t cols) {                \
        unstack_rows<T>(src, dst, images, c_out, cols);                                          \
    }

UNSTACK_KERNEL(1, uint8_t)
UNSTACK_KERNEL(2, uint16_t)
UNSTACK_KERNEL(4, uint32_t)
UNSTACK_KERNEL(8, uint64_t)

// Kernel parameter of upsample_nearest_b<W>, by value. Mirrors candle-rocm's `UpArgs`
// (#[repr(C)], 48 bytes).
struct UpArgs {
    uint64_t runs;                      // planes * h_out * runs_per_row
    double scale_h, scale_w;            // h_in / h_out, w_in / w_out
    uint32_t h_in, w_in, h_out, w_out;
    uint32_t runs_per_row, pack;        // ceil(w_out / UP_RUN); 1: full runs as one store
};
static_assert(sizeof(UpArgs) == 48, "UpArgs must match candle-rocm's layout");

#define UP_RUN 4

template <typename T> struct alignas(UP_RUN * sizeof(T)) UpRun {
    T v[UP_RUN];
};

template <typename T>
__device__ __forceinline__ void upsample_nearest(const UpArgs &a, const T *src, T *dst) {
    const uint64_t step = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; t < a.runs; t += step) {
        const uint64_t row = t / a.runs_per_row;
        const uint32_t c0 = (uint32_t)(t - row * a.runs_per_row) * UP_RUN;
        const uint64_t plane = row / a.h_out;
        const uint32_t oh = (uint32_t)(row - plane * a.h_out);
        uint64_t ih = (uint64_t)((double)oh * a.scale_h);
        if (ih >= a.h_in) ih = a.h_in - 1;
        const T *in = src + (plane * a.h_in + ih) * a.w_in;
        T *out = dst + row * a.w_out;
        UpRun<T> r;
#pragma unroll
        for (int j = 0; j < UP_RUN; ++j) {
            uint64_t iw = (uint64_t)((double)(c0 + j) * a.scale_w);
            if (iw >= a.w_in) iw = a.w_in - 1;
            r.v[j] = c0 + j < a.w_out ? in[iw] : T(0);
        }
        if (a.pack) {
            *reinterpret_cast<UpRun<T> *>(out + c0) = r;
        } else {
            for (int j = 0; j < UP_RUN && c0 + j < a.w_out; ++j) out[c0 + j] = r.v[j];
        }
    }
}

#define UPSAMPLE_KERNEL(W, T)                                                                    \
    extern "C" __global__ void upsample_nearest_b##W(const UpArgs a, const T *src, T *dst) {      \
        upsample_nearest<T>(a, src, dst);                                                        \
    }

UPSAMPLE_KERNEL(1, uint8_t)
UPSAMPLE_KERNEL(2, uint16_t)
UPSAMPLE_KERNEL(4, uint32_t)
UPSAMPLE_KERNEL(8, uint64_t)
