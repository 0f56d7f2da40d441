// copy.hip - batched 2-D copies: the copies of candle-core's `cat` (one per input) in a single
// launch, through the out-of-tree slot's `copy2d_many` hook. candle's own `copy2d` kernel takes
// one launch per input, and a grouped-query attention's `repeat_kv` concatenates one tensor 8
// times: in a decoder's token step these copies were 44% of all launches, and the step is bound
// by the host's launch rate.
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
