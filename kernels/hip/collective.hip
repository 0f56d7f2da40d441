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
// Kernels: allreduce_sum_oneshot_<T>(ArBases bases, const T* in, T* out, uint32_t n,
// uint32_t rank, uint32_t world, uint64_t cap, uint64_t timeout_ns, uint32_t* status) for T in
// f32, f16, bf16 (f16/bf16 summed in f32). Blocks of AR_THREADS threads (world <= AR_THREADS),
// any grid up to AR_MAX_BLOCKS; n * sizeof(T) <= cap, checked on the host.
#include <stdint.h>

#include "cuda_bf16.h"
#include "cuda_fp16.h"

#define AR_MAX_RANKS 8
#define AR_MAX_BLOCKS 64
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

template <typename T>
__device__ __forceinline__ void allreduce_sum_oneshot(const ArBases &bases, const T *in, T *out,
                                                      uint32_t n, uint32_t rank, uint32_t world,
                                                      uint64_t cap, uint64_t timeout_ns,
                                                      uint32_t *status) {
    const uint32_t b = blockIdx.x;
    char *own = (char *)bases.base[rank];
    const uint64_t flags_at = 2 * cap;
    uint32_t *epochs = (uint32_t *)(own + flags_at) + AR_MAX_BLOCKS * AR_MAX_RANKS;
    __shared__ uint32_t s_epoch;
    if (threadIdx.x == 0) {
        const uint32_t e = epochs[b] + 1;
        epochs[b] = e;
        s_epoch = e;
    }
    __syncthreads();
    const uint32_t epoch = s_epoch;
    const uint64_t half = (uint64_t)(epoch & 1) * cap;

    // This block's slice: whole runs of 64 elements, the last block takes the rest.
    const uint32_t per = ((n + gridDim.x - 1) / gridDim.x + 63) / 64 * 64;
    const uint32_t lo = b * per < n ? b * per : n;
    const uint32_t hi = n - lo < per ? n : lo + per;

    T *mine = (T *)(own + half);
    for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) mine[i] = in[i];
    __syncthreads();

    const uint32_t peer = threadIdx.x;
    if (peer < world && peer != rank) {
        // Release at system scope after the barrier: the block's data stores above are seen by
        // peer before the flag is.
        __threadfence_system();
        uint32_t *theirs = (uint32_t *)((char *)bases.base[peer] + flags_at);
        ar_store_release(theirs + b * AR_MAX_RANKS + rank, epoch);
        const uint32_t *flag = (const uint32_t *)(own + flags_at) + b * AR_MAX_RANKS + peer;
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

    for (uint32_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        float acc = 0.0f;
        for (uint32_t r = 0; r < world; ++r) {
            const T *data = (const T *)((const char *)bases.base[r] + half);
            acc += ar_to(ar_load_peer(data + i));
        }
        out[i] = ar_from<T>(acc);
    }
}

#define AR_KERNEL(T, NAME)                                                                         \
    extern "C" __global__ void __launch_bounds__(AR_THREADS)                                      \
        allreduce_sum_oneshot_##NAME(ArBases bases, const T *in, T *out, uint32_t n,             \
                                     uint32_t rank, uint32_t world, uint64_t cap,                 \
                                     uint64_t timeout_ns, uint32_t *status) {                     \
        allreduce_sum_oneshot<T>(bases, in, out, n, rank, world, cap, timeout_ns, status);        \
    }

AR_KERNEL(float, f32)
AR_KERNEL(__half, f16)
AR_KERNEL(__nv_bfloat16, bf16)
