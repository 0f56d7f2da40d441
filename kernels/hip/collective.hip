// collective.hip - a one-shot all-reduce (sum) between the GPUs of one host, for the small
// messages of a tensor-parallel decode step (one token's hidden state: 8 KiB in f16 at 4096
// wide), where RCCL's latency dominates: every rank copies its input into its own shared buffer,
// tells every peer so with a flag in the peer's memory, waits for every peer's flag, and sums
// the world's buffers read directly from the peers' memory (NVLink / xGMI / PCIe peer access).
// One launch, no host involvement, so it records into a graph like any other kernel.
//
// Written for candle-rocm (not from candle-kernels). Plain CUDA syntax, so the same file builds
// for AMD (clang, kernels/include headers) and for the HIP-on-CUDA harness (nvcc); the flag
// accesses are the only per-platform lines (system-scope release stores and acquire loads).
//
// Memory: each rank owns one fine-grained allocation (rocm-safe's ipc::SharedMemory), mapped by
// every peer (ipc::PeerMemory), laid out as
//   [0, 2 * cap)                                data: two halves of cap bytes, by call parity
//   [2 * cap, + 4 * AR_MAX_BLOCKS * AR_MAX_RANKS) flags[block][sender], written by the senders
//   [..., + 4 * AR_MAX_BLOCKS)                  epochs[block], this rank's own call counters
// `bases.base[r]` is rank r's allocation as this process maps it (base[rank] its own).
//
// Protocol, per block b of a call: the block's epoch e = ++epochs[b] (every rank makes the same
// sequence of calls with the same grid, so e agrees across ranks); the block copies its slice of
// the input into data half (e & 1); one thread per peer p fences, then stores e into
// flags[b][rank] of p's allocation; one thread per peer waits until flags[b][p] of its own
// allocation reaches e; then the block sums its slice over the ranks in rank order (every rank
// gets the same bits) into the output. Block b reads only the slices its peers' blocks b wrote,
// so no block waits for another block. A rank rewrites half (e & 1) in call e + 2 only after
// every peer's flag of call e + 1, which a peer sets only after its kernel of call e (stream
// order) finished reading: no overwrite under a reader.
//
// A peer that never arrives (its process died) would spin the kernel forever: waits give up
// after `timeout_ns` (CUDA's %globaltimer; on AMD the 100 MHz constant counter that
// __builtin_readsteadycounter reads on gfx9, gfx10, gfx11 and gfx12), write 1 to `*status`
// (host memory the caller polls) and finish with a wrong result, so the caller turns it into an
// error instead of a hang.
//
// Loads: a thread moves 16-byte packs (4 f32 or 8 f16/bf16 elements) where the caller's buffers
// allow it (`vec`: every pointer 16-byte aligned and the element counts whole packs), and
// issues one pack's loads from every rank before it adds any of them, so a thread waits for one
// round trip to the peers per pack, not one per rank and element.
//
// Kernels (T in f32, f16, bf16; f16/bf16 summed in f32; blocks of AR_THREADS threads,
// world <= AR_THREADS, grid <= AR_MAX_BLOCKS, every message <= cap bytes, checked on the host):
// - allreduce_sum_oneshot_<T>(ArBases bases, const T* in, T* out, uint32_t n, uint32_t vec,
//   uint32_t rank, uint32_t world, uint64_t cap, uint64_t timeout_ns, uint32_t* status): out =
//   the sum over the ranks of in (n elements), any grid (block b takes a slice of whole packs);
// - allreduce_add_rmsnorm_oneshot_<T>(ArBases bases, const T* in, const T* residual,
//   const T* alpha, T* out, uint32_t rows, uint32_t cols, float eps, uint32_t vec, rank, world,
//   cap, timeout_ns, status): the all-reduce of in (rows x cols) followed by candle-nn's
//   add_rms_norm with residual and alpha, a block per row or several: out[0 .. rows * cols) = the
//   residual sums s = T(T(sum over ranks) + residual), out[rows * cols ..) = T(s * alpha /
//   sqrt(mean(s^2) + eps)), the rounding of the two launches it replaces (the all-reduce, then
//   rows.hip's raddrmsnorm). Block b takes rows b, b + grid, ... (any grid).
#include <stdint.h>

#include "cuda_bf16.h"
#include "cuda_fp16.h"

#define AR_MAX_RANKS 8
#define AR_MAX_BLOCKS 256
#define AR_THREADS 256

// Kernel parameter, by value. Mirrors candle-rocm's `ArBases` (#[repr(C)], 64 bytes).
struct ArBases {
    uint64_t base[AR_MAX_RANKS];
};
static_assert(sizeof(ArBases) == 64, "ArBases must match candle-rocm's layout");

#ifdef CANDLE_HIP
__device__ __forceinline__ void ar_store_release(uint32_t *p, uint32_t v) {
    __hip_atomic_store(p, v, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ uint32_t ar_load_acquire(const uint32_t *p) {
    return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ uint64_t ar_now_ns() { return __builtin_readsteadycounter() * 10ull; }
// Fine-grained memory after a system-scope acquire: plain loads see the peers' stores.
template <typename T> __device__ __forceinline__ T ar_load_peer(const T *p) { return *p; }
#else
__device__ __forceinline__ void ar_store_release(uint32_t *p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ uint32_t ar_load_acquire(const uint32_t *p) {
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ uint64_t ar_now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// Peer data is read once per call and rewritten between calls: never from a cached line.
template <typename T> __device__ __forceinline__ T ar_load_peer(const T *p) { return __ldcv(p); }
#endif

__device__ __forceinline__ float ar_to(float v) { return v; }
__device__ __forceinline__ float ar_to(__half v) { return __half2float(v); }
__device__ __forceinline__ float ar_to(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T ar_from(float v);
template <> __device__ __forceinline__ float ar_from<float>(float v) { return v; }
template <> __device__ __forceinline__ __half ar_from<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 ar_from<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}

// A 16-byte pack of T, moved as one uint4.
template <typename T> struct ArPack {
    static constexpr int V = 16 / sizeof(T);
    uint4 raw;
    __device__ __forceinline__ T get(int j) const { return reinterpret_cast<const T *>(&raw)[j]; }
    __device__ __forceinline__ void set(int j, T v) { reinterpret_cast<T *>(&raw)[j] = v; }
};

// The start of a call for this block: its epoch (the same on every rank) and the data half.
__device__ __forceinline__ uint32_t ar_epoch(char *own, uint64_t cap) {
    uint32_t *epochs = (uint32_t *)(own + 2 * cap) + AR_MAX_BLOCKS * AR_MAX_RANKS;
    __shared__ uint32_t s_epoch;
    if (threadIdx.x == 0) {
        const uint32_t e = epochs[blockIdx.x] + 1;
        epochs[blockIdx.x] = e;
        s_epoch = e;
    }
    __syncthreads();
    return s_epoch;
}

// After the block has written its slice into its own data half: tell every peer, wait for
// every peer (or give up after timeout_ns, setting *status), then the whole block goes on.
__device__ __forceinline__ void ar_meet(const ArBases &bases, char *own, uint64_t cap,
                                        uint32_t epoch, uint32_t rank, uint32_t world,
                                        uint64_t timeout_ns, uint32_t *status) {
    __syncthreads();
    const uint32_t peer = threadIdx.x;
    if (peer < world && peer != rank) {
        // Release at system scope after the barrier: the block's data stores are seen by the
        // peer before the flag is.
        __threadfence_system();
        const uint64_t flags_at = 2 * cap;
        uint32_t *theirs = (uint32_t *)((char *)bases.base[peer] + flags_at);
        ar_store_release(theirs + blockIdx.x * AR_MAX_RANKS + rank, epoch);
        const uint32_t *flag = (const uint32_t *)(own + flags_at) + blockIdx.x * AR_MAX_RANKS + peer;
        const uint64_t start = ar_now_ns();
        while ((int32_t)(ar_load_acquire(flag) - epoch) < 0) {
            if (ar_now_ns() - start > timeout_ns) {
                *(volatile uint32_t *)status = 1;
                __threadfence_system();
                break;
            }
        }
    }
    __syncthreads();
}

// Copies elements [lo, hi) of `in` into this rank's data half (packs when vec).
template <typename T>
__device__ __forceinline__ void ar_copy_in(const T *in, T *mine, uint32_t lo, uint32_t hi,
                                           bool vec) {
    constexpr int V = ArPack<T>::V;
    if (vec) {
        for (uint32_t p = lo / V + threadIdx.x; p < hi / V; p += blockDim.x)
            ((uint4 *)mine)[p] = ((const uint4 *)in)[p];
    } else {
        for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = in[i];
    }
}

// The sum over the ranks of pack p (element p when !vec, in acc[0]), every rank's load issued
// before the first add, in rank order (every rank gets the same bits).
template <typename T>
__device__ __forceinline__ void ar_sum(const ArBases &bases, uint64_t half, uint32_t world,
                                       uint32_t p, bool vec, float acc[ArPack<T>::V]) {
    constexpr int V = ArPack<T>::V;
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = 0.0f;
    if (vec) {
        ArPack<T> v[AR_MAX_RANKS];
#pragma unroll
        for (uint32_t r = 0; r < AR_MAX_RANKS; ++r)
            if (r < world) v[r].raw = ar_load_peer((const uint4 *)((const char *)bases.base[r] + half) + p);
#pragma unroll
        for (uint32_t r = 0; r < AR_MAX_RANKS; ++r)
            if (r < world) {
#pragma unroll
                for (int j = 0; j < V; ++j) acc[j] += ar_to(v[r].get(j));
            }
    } else {
        T v[AR_MAX_RANKS];
#pragma unroll
        for (uint32_t r = 0; r < AR_MAX_RANKS; ++r)
            if (r < world) v[r] = ar_load_peer((const T *)((const char *)bases.base[r] + half) + p);
#pragma unroll
        for (uint32_t r = 0; r < AR_MAX_RANKS; ++r)
            if (r < world) acc[0] += ar_to(v[r]);
    }
}

template <typename T>
__device__ __forceinline__ void allreduce_sum_oneshot(const ArBases &bases, const T *in, T *out,
                                                      uint32_t n, bool vec, uint32_t rank,
                                                      uint32_t world, uint64_t cap,
                                                      uint64_t timeout_ns, uint32_t *status) {
    constexpr int V = ArPack<T>::V;
    char *own = (char *)bases.base[rank];
    const uint32_t epoch = ar_epoch(own, cap);
    const uint64_t half = (uint64_t)(epoch & 1) * cap;
    // This block's slice: whole runs of 64 elements (whole packs), the last block the rest.
    const uint32_t per = ((n + gridDim.x - 1) / gridDim.x + 63) / 64 * 64;
    const uint32_t lo = blockIdx.x * per < n ? blockIdx.x * per : n;
    const uint32_t hi = n - lo < per ? n : lo + per;
    ar_copy_in(in, (T *)(own + half), lo, hi, vec);
    ar_meet(bases, own, cap, epoch, rank, world, timeout_ns, status);
    const uint32_t step = vec ? V : 1;
    for (uint32_t i = lo + threadIdx.x * step; i < hi; i += blockDim.x * step) {
        float acc[V];
        ar_sum<T>(bases, half, world, vec ? i / V : i, vec, acc);
        if (vec) {
            ArPack<T> o;
#pragma unroll
            for (int j = 0; j < V; ++j) o.set(j, ar_from<T>(acc[j]));
            ((uint4 *)out)[i / V] = o.raw;
        } else {
            out[i] = ar_from<T>(acc[0]);
        }
    }
}

template <typename T>
__device__ __forceinline__ void allreduce_add_rmsnorm_oneshot(
    const ArBases &bases, const T *in, const T *residual, const T *alpha, T *out, uint32_t rows,
    uint32_t cols, float eps, bool vec, uint32_t rank, uint32_t world, uint64_t cap,
    uint64_t timeout_ns, uint32_t *status) {
    constexpr int V = ArPack<T>::V;
    char *own = (char *)bases.base[rank];
    const uint32_t epoch = ar_epoch(own, cap);
    const uint64_t half = (uint64_t)(epoch & 1) * cap;
    // Block b takes rows b, b + grid, ...: it copies them all in, meets its peers once, then
    // sums and normalises them one by one.
    for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x)
        ar_copy_in(in, (T *)(own + half), row * cols, row * cols + cols, vec);
    ar_meet(bases, own, cap, epoch, rank, world, timeout_ns, status);
    T *sums = out;
    T *norms = out + (size_t)rows * cols;
    __shared__ float red[AR_THREADS];
    const uint32_t step = vec ? V : 1;
    for (uint32_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const uint32_t lo = row * cols, hi = lo + cols;
        // Pass 1: the sums (written, and read back below by the same thread) and their squares.
        float sq = 0.0f;
        for (uint32_t i = lo + threadIdx.x * step; i < hi; i += blockDim.x * step) {
            float acc[V];
            ar_sum<T>(bases, half, world, vec ? i / V : i, vec, acc);
            if (vec) {
                ArPack<T> r, o;
                r.raw = ((const uint4 *)residual)[i / V];
#pragma unroll
                for (int j = 0; j < V; ++j) {
                    const float s = ar_to(ar_from<T>(ar_to(ar_from<T>(acc[j])) + ar_to(r.get(j))));
                    o.set(j, ar_from<T>(s));
                    sq += s * s;
                }
                ((uint4 *)sums)[i / V] = o.raw;
            } else {
                const float s = ar_to(ar_from<T>(ar_to(ar_from<T>(acc[0])) + ar_to(residual[i])));
                sums[i] = ar_from<T>(s);
                sq += s * s;
            }
        }
        red[threadIdx.x] = sq;
        __syncthreads();
        for (uint32_t w = AR_THREADS / 2; w > 0; w >>= 1) {
            if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
            __syncthreads();
        }
        const float scale = rsqrtf(red[0] / (float)cols + eps);
        // Every thread has read red[0] before the next row overwrites it.
        __syncthreads();
        // Pass 2: the norms.
        for (uint32_t i = lo + threadIdx.x * step; i < hi; i += blockDim.x * step) {
            const uint32_t c = i - lo;
            if (vec) {
                ArPack<T> sm, a, o;
                sm.raw = ((const uint4 *)sums)[i / V];
                a.raw = ((const uint4 *)alpha)[c / V];
#pragma unroll
                for (int j = 0; j < V; ++j) o.set(j, ar_from<T>(ar_to(sm.get(j)) * scale * ar_to(a.get(j))));
                ((uint4 *)norms)[i / V] = o.raw;
            } else {
                norms[i] = ar_from<T>(ar_to(sums[i]) * scale * ar_to(alpha[c]));
            }
        }
    }
}

#define AR_KERNELS(T, NAME)                                                                        \
    extern "C" __global__ void __launch_bounds__(AR_THREADS) allreduce_sum_oneshot_##NAME(        \
        ArBases bases, const T *in, T *out, uint32_t n, uint32_t vec, uint32_t rank,             \
        uint32_t world, uint64_t cap, uint64_t timeout_ns, uint32_t *status) {                    \
        allreduce_sum_oneshot<T>(bases, in, out, n, vec != 0, rank, world, cap, timeout_ns,      \
                                 status);                                                         \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(AR_THREADS)                                      \
        allreduce_add_rmsnorm_oneshot_##NAME(ArBases bases, const T *in, const T *residual,      \
                                             const T *alpha, T *out, uint32_t rows,               \
                                             uint32_t cols, float eps, uint32_t vec,              \
                                             uint32_t rank, uint32_t world, uint64_t cap,         \
                                             uint64_t timeout_ns, uint32_t *status) {             \
        allreduce_add_rmsnorm_oneshot<T>(bases, in, residual, alpha, out, rows, cols, eps,       \
                                         vec != 0, rank, world, cap, timeout_ns, status);        \
    }

AR_KERNELS(float, f32)
AR_KERNELS(__half, f16)
AR_KERNELS(__nv_bfloat16, bf16)
