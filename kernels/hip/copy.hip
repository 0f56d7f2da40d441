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
// A thread takes one column (one output position: one division) of one (image, channel) plane
// and writes its k_h * k_w taps down the plane's rows. Grid: blocks of any size in x stride
// over the columns, gridDim.y over the planes (images * c_in; grid-stride loops both ways).
// Sizes (rows, cols, p0 + cols, the dims) fit 32 bits, checked on the host; element offsets
// are 64-bit. Zero is the all-zero bit pattern, which is 0 in every dtype, so the kernels move
// bits like the copies above.
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
    uint32_t unused;                     // keeps the size a multiple of 8 on both sides
};
static_assert(sizeof(Im2colArgs) == 96, "Im2colArgs must match candle-rocm's layout");

template <typename T>
__device__ __forceinline__ void im2col_rows(const Im2colArgs &a, const T *src, T *dst) {
    const uint32_t taps = a.k_h * a.k_w;
    const uint32_t planes = a.rows / taps; // images * c_in; the host passes rows = planes * taps
    const uint32_t step = gridDim.x * blockDim.x;
    for (uint32_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
        const uint32_t img = plane / a.c_in, ci = plane - img * a.c_in;
        const T *in = src + (uint64_t)img * a.s_b + (uint64_t)ci * a.s_c;
        T *out = dst + (uint64_t)plane * taps * a.cols;
        for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < a.cols; i += step) {
            const uint32_t p = a.p0 + i;
            const uint32_t oy = p / a.w_out, ox = p - oy * a.w_out;
            const int64_t y0 = (int64_t)oy * a.stride_h - (int64_t)a.pad_h;
            const int64_t x0 = (int64_t)ox * a.stride_w - (int64_t)a.pad_w;
            T *o = out + i;
            // This position's k_h * k_w taps, one per row of the plane's block of rows.
            for (uint32_t ky = 0; ky < a.k_h; ky++) {
                const int64_t iy = y0 + (int64_t)ky * a.dil_h;
                const bool row_in = iy >= 0 && iy < (int64_t)a.h_in;
                const T *line = in + (uint64_t)(row_in ? iy : 0) * a.s_h;
                for (uint32_t kx = 0; kx < a.k_w; kx++) {
                    const int64_t ix = x0 + (int64_t)kx * a.dil_w;
                    T v = 0;
                    if (row_in && ix >= 0 && ix < (int64_t)a.w_in) v = line[(uint64_t)ix * a.s_w];
                    *o = v;
                    o += a.cols;
                }
            }
        }
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
