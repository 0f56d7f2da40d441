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
// - allreduce_sum_lamport_<T> and allreduce_add_rmsnorm_lamport_<T>: the same contracts for
//   small messages (at most AR_LAMPORT_BLOCKS regions of AR_LAMPORT_ROW bytes; a block per row
//   for the norm) over the Lamport protocol below: the data, sent into the peers' memory, is
//   its own flag.
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

// ---------------------------------------------------------------------------------------------
// The Lamport path: small messages (a decode step's hidden state) without flags or fences.
//
// Each rank owns AR_LAMPORT_BUFS buffers in its allocation, each with a region per (sender, block)
// of AR_LAMPORT_ROW bytes, every word of which holds AR_EMPTY (0x80008000: -0.0 in both 16-bit
// halves, and an f32 denormal) until a sender writes there. Block b of a call takes buffer
// k = (++lcount[b]) % AR_LAMPORT_BUFS (every rank makes the same calls with the same grid, so k
// agrees), stores its (already normalised) packs straight into region (k, rank, b) of every
// peer, then polls its own regions (k, peer, b) until no element of a pack reads as empty, adds
// the ranks in rank order (every rank gets the same bits) and writes AR_EMPTY back over what it
// read. The data is its own flag: one trip over the link, no fence, no flag store.
//
// Empty elements: an f16/bf16 element of bits 0x8000 (-0.0) or an f32 word of 0x80008000 (a
// denormal of -4.6e-41) means "not written yet", so a sender normalises them before sending:
// -0.0 to +0.0 (the sum starts from +0.0, so it is unchanged) and the f32 denormal to -0.0
// (the sum moves by 4.6e-41). A pack is checked element by element, so a pack that lands in
// pieces is read again until every piece is there.
//
// Reuse: region (k, p, b) is written again by p's block b three calls later, after p's block b
// has seen this rank's block b data of the two calls in between, which this rank sent only after
// the kernel that cleared the region had finished (stream order): no write lands before the
// clear. Regions are per block, so calls of different grids never share one.
#define AR_LAMPORT_BLOCKS 8
#define AR_LAMPORT_ROW 16384
#define AR_LAMPORT_BUFS 3
#define AR_LAMPORT_PACKS (AR_LAMPORT_ROW / 16 / AR_THREADS)
#define AR_CTRL_BYTES 16384
#define AR_EMPTY 0x80008000u

// Offsets in a rank's allocation past the data halves: flags, epochs, Lamport call counters
// (AR_CTRL_BYTES in all), then the Lamport buffers.
__device__ __forceinline__ uint64_t ar_lcount_at(uint64_t cap) {
    return 2 * cap + 4 * AR_MAX_BLOCKS * AR_MAX_RANKS + 4 * AR_MAX_BLOCKS;
}
__device__ __forceinline__ uint64_t ar_region_at(uint64_t cap, uint32_t buf, uint32_t sender,
                                                 uint32_t block) {
    return 2 * cap + AR_CTRL_BYTES +
           ((uint64_t)(buf * AR_MAX_RANKS + sender) * AR_LAMPORT_BLOCKS + block) * AR_LAMPORT_ROW;
}

#ifdef CANDLE_HIP
// Fine-grained memory written by a peer: system-scope word accesses, never a stale cached line.
__device__ __forceinline__ uint4 ar_load_volatile(const uint4 *p) {
    const uint32_t *w = (const uint32_t *)p;
    uint4 v;
    v.x = __hip_atomic_load(w + 0, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    v.y = __hip_atomic_load(w + 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    v.z = __hip_atomic_load(w + 2, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    v.w = __hip_atomic_load(w + 3, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    return v;
}
__device__ __forceinline__ void ar_store_volatile(uint4 *p, uint4 v) {
    uint32_t *w = (uint32_t *)p;
    __hip_atomic_store(w + 0, v.x, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    __hip_atomic_store(w + 1, v.y, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    __hip_atomic_store(w + 2, v.z, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
    __hip_atomic_store(w + 3, v.w, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_SYSTEM);
}
__device__ __forceinline__ float ar_shfl_xor(float v, int mask) {
    const int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return __uint_as_float((unsigned)__builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, (int)__float_as_uint(v)));
}
#else
__device__ __forceinline__ uint4 ar_load_volatile(const uint4 *p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}
__device__ __forceinline__ void ar_store_volatile(uint4 *p, uint4 v) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
                 "r"(v.z), "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ float ar_shfl_xor(float v, int mask) {
    return __shfl_xor_sync(0xffffffffu, v, mask);
}
#endif

// Whether any element of a received pack still reads as empty, and the sender's normalisation.
template <typename T> __device__ __forceinline__ bool ar_word_empty(uint32_t w) {
    return sizeof(T) == 4 ? w == AR_EMPTY : ((w & 0xffffu) == 0x8000u || (w >> 16) == 0x8000u);
}
template <typename T> __device__ __forceinline__ uint32_t ar_word_normal(uint32_t w) {
    if (sizeof(T) == 4) return w == AR_EMPTY ? 0x80000000u : w;
    if ((w & 0xffffu) == 0x8000u) w &= 0xffff0000u;
    if ((w >> 16) == 0x8000u) w &= 0x0000ffffu;
    return w;
}
template <typename T> __device__ __forceinline__ bool ar_pack_empty(uint4 v) {
    return ar_word_empty<T>(v.x) || ar_word_empty<T>(v.y) || ar_word_empty<T>(v.z) ||
           ar_word_empty<T>(v.w);
}
template <typename T> __device__ __forceinline__ uint4 ar_pack_normal(uint4 v) {
    return make_uint4(ar_word_normal<T>(v.x), ar_word_normal<T>(v.y), ar_word_normal<T>(v.z),
                      ar_word_normal<T>(v.w));
}

// Pack p of n elements at src: one 16-byte load when vec (the caller checked alignment and
// whole packs), else element by element with zeros past n.
template <typename T>
__device__ __forceinline__ ArPack<T> ar_load_pack(const T *src, uint32_t p, uint32_t n, bool vec) {
    constexpr int V = ArPack<T>::V;
    ArPack<T> v;
    if (vec) {
        v.raw = ((const uint4 *)src)[p];
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j) v.set(j, p * V + j < n ? src[p * V + j] : ar_from<T>(0.0f));
    }
    return v;
}
template <typename T>
__device__ __forceinline__ void ar_store_pack(T *dst, uint32_t p, uint32_t n, bool vec,
                                              const ArPack<T> &v) {
    constexpr int V = ArPack<T>::V;
    if (vec) {
        ((uint4 *)dst)[p] = v.raw;
    } else {
#pragma unroll
        for (int j = 0; j < V; ++j)
            if (p * V + j < n) dst[p * V + j] = v.get(j);
    }
}

// The Lamport exchange of this block's `npacks` packs (<= AR_LAMPORT_ROW bytes; thread t holds
// packs t, t + AR_THREADS, ... in mine[]): acc gets the sum over the ranks, in rank order.
template <typename T>
__device__ __forceinline__ void ar_lamport(const ArBases &bases, uint64_t cap, uint32_t rank,
                                           uint32_t world, uint32_t npacks,
                                           const uint4 (&mine)[AR_LAMPORT_PACKS],
                                           float (&acc)[AR_LAMPORT_PACKS][ArPack<T>::V],
                                           uint64_t timeout_ns, uint32_t *status) {
    constexpr int V = ArPack<T>::V;
    char *own = (char *)bases.base[rank];
    __shared__ uint32_t s_count;
    if (threadIdx.x == 0) {
        uint32_t *lcount = (uint32_t *)(own + ar_lcount_at(cap)) + blockIdx.x;
        const uint32_t c = *lcount + 1;
        *lcount = c;
        s_count = c;
    }
    __syncthreads();
    const uint32_t buf = s_count % AR_LAMPORT_BUFS;
    for (uint32_t r = 0; r < world; ++r) {
        if (r == rank) continue;
        uint4 *dst = (uint4 *)((char *)bases.base[r] + ar_region_at(cap, buf, rank, blockIdx.x));
#pragma unroll
        for (int j = 0; j < AR_LAMPORT_PACKS; ++j) {
            const uint32_t p = threadIdx.x + j * AR_THREADS;
            if (p < npacks) ar_store_volatile(dst + p, mine[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < AR_LAMPORT_PACKS; ++j)
#pragma unroll
        for (int e = 0; e < V; ++e) acc[j][e] = 0.0f;
    const uint4 empty = make_uint4(AR_EMPTY, AR_EMPTY, AR_EMPTY, AR_EMPTY);
    bool late = false;
    for (uint32_t r = 0; r < world; ++r) {
        uint4 *src = r == rank ? nullptr
                               : (uint4 *)(own + ar_region_at(cap, buf, r, blockIdx.x));
#pragma unroll
        for (int j = 0; j < AR_LAMPORT_PACKS; ++j) {
            const uint32_t p = threadIdx.x + j * AR_THREADS;
            if (p >= npacks) continue;
            ArPack<T> v;
            if (src == nullptr) {
                v.raw = mine[j];
            } else {
                v.raw = ar_load_volatile(src + p);
                if (ar_pack_empty<T>(v.raw) && !late) {
                    const uint64_t start = ar_now_ns();
                    do {
                        if (ar_now_ns() - start > timeout_ns) {
                            *(volatile uint32_t *)status = 1;
                            __threadfence_system();
                            late = true;
                            break;
                        }
                        v.raw = ar_load_volatile(src + p);
                    } while (ar_pack_empty<T>(v.raw));
                }
                ar_store_volatile(src + p, empty);
            }
#pragma unroll
            for (int e = 0; e < V; ++e) acc[j][e] += ar_to(v.get(e));
        }
    }
}

// The sum of a block's partial squares over AR_THREADS threads, the same order on every rank:
// xor shuffles within each 32 lanes, then the 32-lane groups in order.
__device__ __forceinline__ float ar_block_sum(float v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v += ar_shfl_xor(v, m);
    __shared__ float groups[AR_THREADS / 32];
    if ((threadIdx.x & 31) == 0) groups[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < AR_THREADS / 32; ++g) s += groups[g];
    return s;
}

// allreduce_sum_lamport_<T>(bases, in, out, n, vec, rank, world, cap, timeout_ns, status):
// out = the sum over the ranks of in (n elements, at most AR_LAMPORT_BLOCKS * AR_LAMPORT_ROW
// bytes), block b taking elements [b * AR_LAMPORT_ROW / sizeof(T), ...); grid = the blocks
// the message needs (the host's `lamport_blocks`).
template <typename T>
__device__ __forceinline__ void allreduce_sum_lamport(const ArBases &bases, const T *in, T *out,
                                                      uint32_t n, bool vec, uint32_t rank,
                                                      uint32_t world, uint64_t cap,
                                                      uint64_t timeout_ns, uint32_t *status) {
    constexpr int V = ArPack<T>::V;
    constexpr uint32_t PER = AR_LAMPORT_ROW / sizeof(T);
    const uint32_t lo = blockIdx.x * PER;
    const uint32_t len = n - lo < PER ? n - lo : PER;
    const uint32_t npacks = (len + V - 1) / V;
    uint4 mine[AR_LAMPORT_PACKS];
#pragma unroll
    for (int j = 0; j < AR_LAMPORT_PACKS; ++j) {
        const uint32_t p = threadIdx.x + j * AR_THREADS;
        mine[j] = p < npacks ? ar_pack_normal<T>(ar_load_pack<T>(in + lo, p, len, vec).raw)
                             : make_uint4(0, 0, 0, 0);
    }
    float acc[AR_LAMPORT_PACKS][V];
    ar_lamport<T>(bases, cap, rank, world, npacks, mine, acc, timeout_ns, status);
#pragma unroll
    for (int j = 0; j < AR_LAMPORT_PACKS; ++j) {
        const uint32_t p = threadIdx.x + j * AR_THREADS;
        if (p >= npacks) continue;
        ArPack<T> o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.set(e, ar_from<T>(acc[j][e]));
        ar_store_pack<T>(out + lo, p, len, vec, o);
    }
}

// allreduce_add_rmsnorm_lamport_<T>: allreduce_add_rmsnorm_oneshot's contract and rounding for
// rows <= AR_LAMPORT_BLOCKS and rows of at most AR_LAMPORT_ROW bytes, a block per row (grid =
// rows); the sums stay in registers between the sum, the squares and the norm.
template <typename T>
__device__ __forceinline__ void allreduce_add_rmsnorm_lamport(
    const ArBases &bases, const T *in, const T *residual, const T *alpha, T *out, uint32_t rows,
    uint32_t cols, float eps, bool vec, uint32_t rank, uint32_t world, uint64_t cap,
    uint64_t timeout_ns, uint32_t *status) {
    constexpr int V = ArPack<T>::V;
    const uint32_t row = blockIdx.x;
    const size_t lo = (size_t)row * cols;
    const uint32_t npacks = (cols + V - 1) / V;
    uint4 mine[AR_LAMPORT_PACKS];
    ArPack<T> res[AR_LAMPORT_PACKS], al[AR_LAMPORT_PACKS];
#pragma unroll
    for (int j = 0; j < AR_LAMPORT_PACKS; ++j) {
        const uint32_t p = threadIdx.x + j * AR_THREADS;
        if (p < npacks) {
            mine[j] = ar_pack_normal<T>(ar_load_pack<T>(in + lo, p, cols, vec).raw);
            res[j] = ar_load_pack<T>(residual + lo, p, cols, vec);
            al[j] = ar_load_pack<T>(alpha, p, cols, vec);
        } else {
            mine[j] = make_uint4(0, 0, 0, 0);
        }
    }
    float acc[AR_LAMPORT_PACKS][V];
    ar_lamport<T>(bases, cap, rank, world, npacks, mine, acc, timeout_ns, status);
    float sq = 0.0f;
#pragma unroll
    for (int j = 0; j < AR_LAMPORT_PACKS; ++j) {
        const uint32_t p = threadIdx.x + j * AR_THREADS;
        if (p >= npacks) continue;
        ArPack<T> o;
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const float s = ar_to(ar_from<T>(ar_to(ar_from<T>(acc[j][e])) + ar_to(res[j].get(e))));
            acc[j][e] = s;
            o.set(e, ar_from<T>(s));
            if (p * V + e < cols) sq += s * s;
        }
        ar_store_pack<T>(out + lo, p, cols, vec, o);
    }
    const float scale = rsqrtf(ar_block_sum(sq) / (float)cols + eps);
    T *norms = out + (size_t)rows * cols + lo;
#pragma unroll
    for (int j = 0; j < AR_LAMPORT_PACKS; ++j) {
        const uint32_t p = threadIdx.x + j * AR_THREADS;
        if (p >= npacks) continue;
        ArPack<T> o;
#pragma unroll
        for (int e = 0; e < V; ++e) o.set(e, ar_from<T>(acc[j][e] * scale * ar_to(al[j].get(e))));
        ar_store_pack<T>(norms, p, cols, vec, o);
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
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(AR_THREADS) allreduce_sum_lamport_##NAME(        \
        ArBases bases, const T *in, T *out, uint32_t n, uint32_t vec, uint32_t rank,             \
        uint32_t world, uint64_t cap, uint64_t timeout_ns, uint32_t *status) {                    \
        allreduce_sum_lamport<T>(bases, in, out, n, vec != 0, rank, world, cap, timeout_ns,      \
                                 status);                                                         \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(AR_THREADS)                                      \
        allreduce_add_rmsnorm_lamport_##NAME(ArBases bases, const T *in, const T *residual,      \
                                             const T *alpha, T *out, uint32_t rows,               \
                                             uint32_t cols, float eps, uint32_t vec,              \
                                             uint32_t rank, uint32_t world, uint64_t cap,         \
                                             uint64_t timeout_ns, uint32_t *status) {             \
        allreduce_add_rmsnorm_lamport<T>(bases, in, residual, alpha, out, rows, cols, eps,       \
                                         vec != 0, rank, world, cap, timeout_ns, status);        \
    }

AR_KERNELS(float, f32)
AR_KERNELS(__half, f16)
AR_KERNELS(__nv_bfloat16, bf16)
