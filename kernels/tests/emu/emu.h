// emu.h - runs our HIP/CUDA kernel sources on the host, in plain C++ (clang++ -std=c++17), to
// check them without a GPU (kernels/tests/kernels_on_cpu.rs builds and runs the drivers).
//
// Execution model: the blocks of a launch run one after another; the threads of a block are
// cooperative fibers (ucontext) that switch only at __syncthreads and at wave shuffles, so
// `__shared__` is plain function-static storage and threadIdx/blockIdx are globals the scheduler
// sets before resuming a fiber. The scheduler picks the next ready fiber at random (seeded per
// launch), in half the blocks preferring the waves in a random priority order, and releases a
// wave's shuffle as soon as all its lanes arrive, so waves run ahead of each other in varying
// orders: a missing barrier tends to show up as a wrong result.
//
// Checked strictly (a launch that breaks a rule fails with a message, the driver counts it):
//   - __syncthreads must be reached by every thread of the block (no thread may have exited or
//     be waiting at a shuffle);
//   - a shuffle must be reached by every lane of the wave, and read only lanes that exist.
//
// Wave size: EMU_WAVE (32 by default). Built with EMU_AMD_WAVE=32 or 64 it compiles the sources'
// AMD paths instead (defines __HIP_DEVICE_COMPILE__ and __AMDGCN_WAVEFRONT_SIZE__) and emulates
// the builtins they use (mbcnt, ds_bpermute, and matrix.h's MFMA/WMMA for the processor named
// by a -D__gfx942__-style define); otherwise the CUDA paths with __shfl_xor_sync and matrix.h's
// mma.sync m16n8k16 (EMU_MMA_SYNC: an sm_80+ GPU; -DEMU_NO_MMA_SYNC for an older one).
//
// Several GPUs (EMU_RANKS): each rank's launches run on a host thread of its own, with its own
// scheduler, thread indices and `__shared__` storage (thread_local), over memory the ranks share,
// so kernels that wait for each other (collective.hip) can meet. The AMD path's atomics
// (__hip_atomic_load / store) are host atomics, and an atomic load also yields the fiber: one
// spinning on a peer's word lets the block's other threads run first (they go before any
// yielded thread), so every thread reaches its stores before the block waits on the peer.
//
// What it cannot show: real memory-model and timing behaviour (no two threads of a block ever
// run at the same instant), the device compiler's code generation (ocml math, fp contraction,
// register pressure), reads of uninitialised shared memory (the statics keep their values from
// block to block), and AMD builtins other than the few emulated here.
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#ifdef EMU_AMD_WAVE
#define EMU_WAVE EMU_AMD_WAVE
#define __HIP_DEVICE_COMPILE__ 1
#define __AMDGCN_WAVEFRONT_SIZE__ EMU_AMD_WAVE
#endif
#ifndef EMU_WAVE
#define EMU_WAVE 32
#endif

// kernels/include's cuda_fp16.h / cuda_bf16.h are used as they are; their device prelude
// (candle_hip_compat.h, which needs clang -x hip) and their atomics are replaced by this file.
#define CANDLE_HIP_COMPAT_H 1
#define CANDLE_HIP_HAVE_HALF_ATOMICS 1
#define CANDLE_HIP_HAVE_BF16_ATOMICS 1
#define CANDLE_HIP 1

#define __host__
#define __device__
#define __global__
#ifdef EMU_RANKS
#define EMU_TLS thread_local
#else
#define EMU_TLS
#endif
#define __shared__ static EMU_TLS
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define warpSize 32

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned int x, y, z;
};
inline EMU_TLS uint3 threadIdx, blockIdx;
inline EMU_TLS dim3 blockDim, gridDim;

struct __attribute__((aligned(8))) float2 {
    float x, y;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
struct __attribute__((aligned(16))) uint4 {
    unsigned int x, y, z, w;
};
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) {
    return uint4{x, y, z, w};
}

inline unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
inline int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
inline float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
inline float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
inline long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
inline double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// The fast intrinsics as their exact functions (the GPU's are within a few f32 ulps; the
// kernels use them only where the result is rounded to f16/bf16).
inline float __expf(float x) { return expf(x); }
inline float __fdividef(float x, float y) { return x / y; }
// CUDA's __byte_perm: byte n of the result is byte (s >> 4n) & 7 of the 8 bytes y:x (x low).
inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned int r = 0;
    for (int n = 0; n < 4; ++n) r |= (unsigned int)((v >> (8 * ((s >> (4 * n)) & 7))) & 0xff) << (8 * n);
    return r;
}
// CUDA's __dp4a (and candle_hip_compat.h's for AMD): the 4 signed byte products of a and b
// plus c.
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 32; i += 8) c += (int)(signed char)(a >> i) * (int)(signed char)(b >> i);
    return c;
}
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752440); }

namespace emu {

constexpr int WAVE = EMU_WAVE;
constexpr size_t STACK = 256 * 1024;

enum State { READY, SHFL, BAR, DONE };

struct Fiber {
    ucontext_t ctx;
    State st;
    unsigned tid; // linear thread id in the block
    uint3 idx;
    uint64_t val; // shuffle: this lane's value, source lane, result
    int src;
    uint64_t res;
    // wave_gather (op != nullptr): this lane's bytes, where every lane's go, their size.
    const char *op;
    const void *gsrc;
    void *gdst;
    unsigned gbytes;
};

struct Sched {
    ucontext_t main_ctx, proto;
    bool have_proto = false;
    std::vector<Fiber> fibers;
    std::vector<char *> stacks;
    std::vector<unsigned> ready;
    std::vector<unsigned> yielded; // threads that yielded: ready again once `ready` is empty
    int cur = -1;
    const std::function<void()> *body = nullptr;
    std::mt19937 rng{12345};
    std::string error;
    unsigned long long launches = 0;
    std::set<const void *> launched; // every kernel run so far (coverage checks)
};
inline EMU_TLS Sched S;

inline void fail(const std::string &m) {
    if (S.error.empty()) S.error = m;
}

inline void switch_to_main() { swapcontext(&S.fibers[S.cur].ctx, &S.main_ctx); }

inline void entry() {
    (*S.body)();
    S.fibers[S.cur].st = DONE;
    setcontext(&S.main_ctx);
}

inline void resume(unsigned i) {
    Fiber &f = S.fibers[i];
    S.cur = (int)i;
    threadIdx = f.idx;
    swapcontext(&S.main_ctx, &f.ctx);
    S.cur = -1;
}

// Lets the block's other threads run (an atomic load's poll): this one runs again after every
// thread that has not yielded.
inline void yield_now() {
    if (S.cur < 0) return;
    switch_to_main();
}

// __syncthreads: wait until every thread of the block is here.
inline void block_barrier() {
    S.fibers[S.cur].st = BAR;
    switch_to_main();
}

inline unsigned lane() { return S.fibers[S.cur].tid % WAVE; }

// Exchange within the wave: returns the value `src_lane` passed (every lane takes part).
inline uint64_t wave_exchange(uint64_t v, int src_lane) {
    Fiber &f = S.fibers[S.cur];
    f.val = v;
    f.src = src_lane;
    f.op = nullptr;
    f.st = SHFL;
    switch_to_main();
    return S.fibers[S.cur].res;
}

// Wave-wide all-gather (the wave operations of matrix.h): every lane passes `bytes` bytes at
// `mine` and gets lane l's at all + l * bytes, for all WAVE lanes (`all` holds WAVE * bytes).
// `op` names the operation: every lane of a full wave must reach the same one (and the same
// size); lanes at different operations, or at a shuffle, are an error.
inline void wave_gather(const char *op, const void *mine, void *all, unsigned bytes) {
    Fiber &f = S.fibers[S.cur];
    f.op = op;
    f.gsrc = mine;
    f.gdst = all;
    f.gbytes = bytes;
    f.st = SHFL;
    switch_to_main();
}

// Completes wave [lo, hi)'s gather: every lane is suspended, so their buffers are all valid.
inline void finish_gather(unsigned w, unsigned lo, unsigned hi) {
    const Fiber &f0 = S.fibers[lo];
    if (hi - lo != (unsigned)WAVE) {
        fail(std::string(f0.op) + " in wave " + std::to_string(w) + " of " + std::to_string(hi - lo) +
             " lanes (a wave operation needs a full wave of " + std::to_string(WAVE) + ")");
        return;
    }
    for (unsigned i = lo; i < hi; ++i) {
        const Fiber &f = S.fibers[i];
        if (strcmp(f.op, f0.op) != 0 || f.gbytes != f0.gbytes) {
            fail(std::string("wave ") + std::to_string(w) + ": lane 0 is at " + f0.op + ", lane " +
                 std::to_string(i - lo) + " at " + (f.op ? f.op : "a shuffle"));
            return;
        }
    }
    for (unsigned i = lo; i < hi; ++i)
        for (unsigned s = lo; s < hi; ++s)
            memcpy((char *)S.fibers[i].gdst + (size_t)(s - lo) * f0.gbytes, S.fibers[s].gsrc, f0.gbytes);
}

// Releases wave w's shuffle if all its lanes have arrived.
inline void try_release_wave(unsigned w) {
    const unsigned n = (unsigned)S.fibers.size();
    const unsigned lo = w * WAVE, hi = std::min<unsigned>(lo + WAVE, n);
    for (unsigned i = lo; i < hi; ++i)
        if (S.fibers[i].st != SHFL) return;
    bool gather = false;
    for (unsigned i = lo; i < hi; ++i) gather |= S.fibers[i].op != nullptr;
    for (unsigned i = lo; i < hi && gather; ++i) {
        if (S.fibers[i].op == nullptr) {
            fail("wave " + std::to_string(w) + ": lane " + std::to_string(i - lo) +
                 " is at a shuffle while others are at a wave operation");
            return;
        }
    }
    if (gather) finish_gather(w, lo, hi);
    for (unsigned i = lo; i < hi && !gather; ++i) {
        Fiber &f = S.fibers[i];
        if (f.src < 0 || f.src >= WAVE || lo + (unsigned)f.src >= hi) {
            fail("shuffle in wave " + std::to_string(w) + ": lane " + std::to_string(i - lo) + " reads lane " +
                 std::to_string(f.src) + ", which does not exist");
            f.res = 0;
        } else {
            f.res = S.fibers[lo + f.src].val;
        }
    }
    for (unsigned i = lo; i < hi; ++i) {
        S.fibers[i].st = READY;
        S.ready.push_back(i);
    }
}

inline void run_block(dim3 block) {
    const unsigned n = block.x * block.y * block.z;
    if (!S.have_proto) {
        getcontext(&S.proto);
        S.have_proto = true;
    }
    while (S.stacks.size() < n) {
        char *p = (char *)malloc(STACK);
        if (!p) abort();
        S.stacks.push_back(p);
    }
    S.fibers.assign(n, Fiber{});
    S.ready.clear();
    S.yielded.clear();
    for (unsigned t = 0; t < n; ++t) {
        Fiber &f = S.fibers[t];
        f.ctx = S.proto;
        f.ctx.uc_stack.ss_sp = S.stacks[t];
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, entry, 0);
        f.st = READY;
        f.tid = t;
        f.idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        S.ready.push_back(t);
    }
    // Half the blocks pick ready threads uniformly at random; the others by a random priority
    // order of the waves, so that one wave runs as far ahead of the others as the barriers let
    // it (what exposes a missing barrier before shared memory is reused).
    const unsigned nwaves = (n + WAVE - 1) / WAVE;
    const bool by_wave = S.rng() % 2;
    std::vector<unsigned> prio(nwaves);
    for (unsigned w = 0; w < nwaves; ++w) prio[w] = w;
    std::shuffle(prio.begin(), prio.end(), S.rng);
    while (true) {
        while (!S.ready.empty()) {
            size_t k = S.rng() % S.ready.size();
            if (by_wave)
                for (size_t j = 0; j < S.ready.size(); ++j)
                    if (prio[S.ready[j] / WAVE] < prio[S.ready[k] / WAVE]) k = j;
            unsigned i = S.ready[k];
            S.ready[k] = S.ready.back();
            S.ready.pop_back();
            resume(i);
            if (!S.error.empty()) return;
            if (S.fibers[i].st == READY) S.yielded.push_back(i);
            if (S.fibers[i].st == SHFL) try_release_wave(i / WAVE);
            if (!S.error.empty()) return;
            if (S.ready.empty()) {
                S.ready.swap(S.yielded);
                S.yielded.clear();
            }
        }
        unsigned done = 0, bar = 0, shfl = 0;
        for (auto &f : S.fibers) {
            done += f.st == DONE;
            bar += f.st == BAR;
            shfl += f.st == SHFL;
        }
        if (done == n) return;
        if (shfl) {
            for (auto &f : S.fibers)
                if (f.st == SHFL) {
                    unsigned w = f.tid / WAVE, lo = w * WAVE, hi = std::min<unsigned>(lo + WAVE, n);
                    std::string st;
                    for (unsigned i = lo; i < hi; ++i) st += "RSBD"[S.fibers[i].st];
                    fail("shuffle or wave operation not reached by every lane of wave " + std::to_string(w) +
                         " (lane states R=ready S=shuffle B=barrier D=exited: " + st + ")");
                    return;
                }
        }
        if (done) {
            fail("__syncthreads reached by " + std::to_string(bar) + " of " + std::to_string(n) +
                 " threads (the others exited)");
            return;
        }
        for (unsigned t = 0; t < n; ++t) {
            S.fibers[t].st = READY;
            S.ready.push_back(t);
        }
    }
}

// Runs kernel(args...) over grid x block. Returns false (and prints why) when the launch broke
// one of the rules above.
template <typename... P, typename... A> bool launch(const char *name, void (*kernel)(P...), dim3 grid, dim3 block,
                                                    A... args) {
    const std::function<void()> body = [&]() { kernel(static_cast<P>(args)...); };
    S.body = &body;
    S.launched.insert((const void *)kernel);
    S.error.clear();
    S.rng.seed(0x9e3779b9u + (uint32_t)S.launches++);
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z && S.error.empty(); ++z)
        for (unsigned y = 0; y < grid.y && S.error.empty(); ++y)
            for (unsigned x = 0; x < grid.x && S.error.empty(); ++x) {
                blockIdx = uint3{x, y, z};
                run_block(block);
            }
    S.body = nullptr;
    if (!S.error.empty()) {
        printf("launch %s grid (%u,%u,%u) block (%u,%u,%u): %s\n", name, grid.x, grid.y, grid.z, block.x, block.y,
               block.z, S.error.c_str());
        return false;
    }
    return true;
}

// mbcnt: the number of set bits of `mask` below this lane, in the low / high 32 lanes.
inline unsigned mbcnt_lo(unsigned mask, unsigned acc) {
    unsigned l = lane();
    unsigned below = l >= 32 ? 0xffffffffu : ((1u << l) - 1u);
    return acc + (unsigned)__builtin_popcount(mask & below);
}
inline unsigned mbcnt_hi(unsigned mask, unsigned acc) {
    unsigned l = lane();
    unsigned below = l < 32 ? 0u : ((1u << (l - 32)) - 1u);
    return acc + (unsigned)__builtin_popcount(mask & below);
}
// ds_bpermute: the value of lane (addr / 4) mod wave size.
inline int ds_bpermute(int addr, int v) {
    return (int)(uint32_t)wave_exchange((uint32_t)v, (int)(((unsigned)addr >> 2) & (WAVE - 1)));
}

} // namespace emu

inline void __syncthreads() { emu::block_barrier(); }
// __syncwarp (CUDA; on AMD candle_hip_compat.h's wave fence): every lane of the wave meets here
// (a shuffle of nothing), so a lane's shared-memory writes before it are there for the others.
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) emu::fail("__syncwarp with a partial mask");
    emu::wave_exchange(0, (int)emu::lane());
}

// CUDA's warp shuffle over 32-lane warps (the CUDA paths run with EMU_WAVE == 32).
template <typename T> T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    static_assert(sizeof(T) <= 8, "shuffle of a value over 8 bytes");
    if (mask != 0xffffffffu) emu::fail("__shfl_xor_sync with a partial mask");
    if (EMU_WAVE != 32) emu::fail("__shfl_xor_sync on a wave that is not 32 lanes");
    int l = (int)emu::lane();
    int src = l ^ laneMask;
    if ((src & ~(width - 1)) != (l & ~(width - 1))) src = l;
    uint64_t bits = 0;
    memcpy(&bits, &var, sizeof(T));
    bits = emu::wave_exchange(bits, src);
    T r;
    memcpy(&r, &bits, sizeof(T));
    return r;
}

#ifdef EMU_AMD_WAVE
// HIP's scoped atomics as host atomics (sequentially consistent, whatever the order and scope
// asked); a load yields the fiber afterwards (see yield_now).
#ifndef __HIP_MEMORY_SCOPE_SYSTEM
#define __HIP_MEMORY_SCOPE_AGENT 4
#define __HIP_MEMORY_SCOPE_SYSTEM 5
#endif
namespace emu {
template <typename T> inline T atomic_load(const T *p) {
    const T v = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    yield_now();
    return v;
}
template <typename T, typename V> inline void atomic_store(T *p, V v) { __atomic_store_n(p, (T)v, __ATOMIC_SEQ_CST); }
} // namespace emu
#define __hip_atomic_load(p, order, scope) emu::atomic_load(p)
#define __hip_atomic_store(p, v, order, scope) emu::atomic_store((p), (v))
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// The 100 MHz constant counter of gfx9-gfx12, from the host's steady clock.
inline uint64_t emu_steady_counter() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ((uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec) / 10ull;
}
#define __builtin_readsteadycounter() emu_steady_counter()
#define __builtin_amdgcn_mbcnt_lo(m, a) emu::mbcnt_lo((m), (a))
#define __builtin_amdgcn_mbcnt_hi(m, a) emu::mbcnt_hi((m), (a))
#define __builtin_amdgcn_ds_bpermute(addr, v) emu::ds_bpermute((addr), (v))
#define __builtin_amdgcn_sched_barrier(mask) ((void)(mask)) // a compiler hint: nothing to run
#elif !defined(EMU_NO_MMA_SYNC)
// The CUDA path emulates an sm_80+ GPU: mma.sync m16n8k16 through matrix.h.
#define EMU_MMA_SYNC 1
#endif
#include "matrix.h"

#include "cuda_fp16.h"
#include "cuda_bf16.h"
