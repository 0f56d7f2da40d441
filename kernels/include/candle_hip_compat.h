// candle_hip_compat.h - force-included (-include) prelude that lets Candle's unmodified CUDA
// kernel sources (crates.io candle-kernels) compile as HIP device code with plain clang
// (clang >= 19, -nogpuinc, rocm-device-libs only; no HIP headers from a ROCm install).
//
// Written for the candle-rocm project. It provides the CUDA device-side runtime surface the
// kernels use: __CUDA_ARCH__/__CUDACC_VER_*__, threadIdx/blockIdx/blockDim/gridDim, warpSize,
// __syncthreads/__syncwarp/fences, warp shuffles, atomics (incl. 16-bit CAS), __dp4a,
// __vsubss4, bit-casts, CUDA vector types (float2/float4/int2/...), and device assert.
// Math functions (expf, erff, normcdff, __expf, ...) come from clang's own HIP wrapper
// (__clang_hip_runtime_wrapper.h -> __clang_hip_math.h / __clang_hip_cmath.h, which call
// the __ocml_* functions of rocm-device-libs' ocml.bc).
//
// Warp model: CUDA source assumes 32-lane warps. We keep that model on both wave32 (RDNA)
// and wave64 (CDNA/GCN): warpSize is 32, and every shuffle operates inside a 32-lane segment
// (or the narrower `width` the caller passes). On wave64 a hardware wavefront therefore holds
// two independent "CUDA warps", exactly as code written for 32-lane warps expects. Masks are
// accepted for source compatibility and ignored (all lanes of the segment are assumed active).
#pragma once
#ifndef CANDLE_HIP_COMPAT_H
#define CANDLE_HIP_COMPAT_H

#if !defined(__HIP__)
#error "candle_hip_compat.h is meant for clang -x hip"
#endif

// clang only force-includes its HIP wrapper when it detects a ROCm install; we include it
// ourselves so the -nogpuinc build gets __host__/__device__/__global__/__shared__ and the
// device math library declarations.
#ifndef __CLANG_HIP_RUNTIME_WRAPPER_INCLUDED__
#include <__clang_hip_runtime_wrapper.h>
#endif

#include <stddef.h>
#include <stdint.h>
#include <assert.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// Version / architecture macros seen by the CUDA sources.
// 890 enables the f16 (>=530), bf16 (>=800) and fp8 (>=890) kernels, the dp4a path (>=610) and
// the 16-bit atomicCAS paths (>=700). None of Candle's in-scope sources has a path that needs
// inline PTX at any __CUDA_ARCH__ value (only mmq_gguf/mmq_mma.cuh has asm(), out of scope).
#if defined(__HIP_DEVICE_COMPILE__) && !defined(__CUDA_ARCH__)
#define __CUDA_ARCH__ 890
#endif
#ifndef __CUDACC_VER_MAJOR__
#define __CUDACC_VER_MAJOR__ 12
#define __CUDACC_VER_MINOR__ 4
#define __CUDACC_VER_BUILD__ 0
#endif
#define CANDLE_HIP 1

#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
#ifndef __noinline__
#define __noinline__ __attribute__((noinline))
#endif
#ifndef __launch_bounds__
#define __candle_hip_lb1(t) __attribute__((amdgpu_flat_work_group_size(1, t)))
#define __candle_hip_lb2(t, m) __attribute__((amdgpu_flat_work_group_size(1, t)))
#define __candle_hip_lbsel(_1, _2, NAME, ...) NAME
#define __launch_bounds__(...) __candle_hip_lbsel(__VA_ARGS__, __candle_hip_lb2, __candle_hip_lb1, )(__VA_ARGS__)
#endif

#define __CH_DEV static __device__ inline __attribute__((always_inline))

// ---------------------------------------------------------------------------------------
// Built-in index variables.
struct dim3 {
    unsigned int x, y, z;
    __host__ __device__ constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
        : x(x_), y(y_), z(z_) {}
};
struct uint3 { unsigned int x, y, z; };

extern "C" __device__ __attribute__((weak)) const __attribute__((address_space(4))) int __oclc_ABI_version;

namespace candle_hip {
__CH_DEV unsigned int num_groups(int dim) {
    // Code object v5+: hidden_block_count_{x,y,z} are the first three u32 implicit arguments.
    // Older ABI: grid size (in work-items) / workgroup size, both exact for HIP launches.
    if (__oclc_ABI_version >= 500) {
        const unsigned int *ia = (const unsigned int *)__builtin_amdgcn_implicitarg_ptr();
        return ia[dim];
    }
    switch (dim) {
    case 0: return __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x();
    case 1: return __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y();
    default: return __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z();
    }
}
} // namespace candle_hip

#define __CANDLE_HIP_BUILTIN(NAME, X, Y, Z)                                                  \
    struct __candle_hip_##NAME##_t {                                                          \
        __declspec(property(get = __get_x)) unsigned int x;                                    \
        __declspec(property(get = __get_y)) unsigned int y;                                    \
        __declspec(property(get = __get_z)) unsigned int z;                                    \
        static __device__ inline __attribute__((always_inline)) unsigned int __get_x() { return X; } \
        static __device__ inline __attribute__((always_inline)) unsigned int __get_y() { return Y; } \
        static __device__ inline __attribute__((always_inline)) unsigned int __get_z() { return Z; } \
        __device__ operator dim3() const { return dim3(X, Y, Z); }                             \
    };                                                                                         \
    extern const __device__ __attribute__((weak)) __candle_hip_##NAME##_t NAME;

__CANDLE_HIP_BUILTIN(threadIdx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
                     __builtin_amdgcn_workitem_id_z())
__CANDLE_HIP_BUILTIN(blockIdx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
                     __builtin_amdgcn_workgroup_id_z())
__CANDLE_HIP_BUILTIN(blockDim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
                     __builtin_amdgcn_workgroup_size_z())
__CANDLE_HIP_BUILTIN(gridDim, candle_hip::num_groups(0), candle_hip::num_groups(1), candle_hip::num_groups(2))
#undef __CANDLE_HIP_BUILTIN

// CUDA warp size as the sources see it (see "Warp model" above). The hardware wavefront size
// is available as candle_hip_wavefront_size() for code written for AMD.
#define warpSize 32
__CH_DEV int candle_hip_wavefront_size() { return __builtin_amdgcn_wavefrontsize(); }

// ---------------------------------------------------------------------------------------
// Synchronisation and fences.
__CH_DEV void __syncthreads() {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
// A CUDA warp is a 32-lane segment of one hardware wavefront, whose lanes execute in lockstep;
// only memory ordering between the lanes has to be enforced.
__CH_DEV void __syncwarp(unsigned int mask = 0xffffffffu) {
    (void)mask;
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
__CH_DEV void __threadfence_block() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "workgroup"); }
__CH_DEV void __threadfence() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
__CH_DEV void __threadfence_system() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, ""); }

// ---------------------------------------------------------------------------------------
// Lane id and shuffles. All shuffles go through ds_bpermute (works on wave32 and wave64).
namespace candle_hip {
__CH_DEV int lane_id() { return __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)); }

__CH_DEV int bperm32(int src_lane, int v) { return __builtin_amdgcn_ds_bpermute(src_lane << 2, v); }

// Shuffle an arbitrary trivially-copyable value 4 bytes at a time.
template <typename T> __CH_DEV T shuffle_from(int src_lane, T v) {
    constexpr int n = (sizeof(T) + 3) / 4;
    int words[n];
    words[n - 1] = 0;
    __builtin_memcpy(words, &v, sizeof(T));
#pragma unroll
    for (int i = 0; i < n; ++i) words[i] = bperm32(src_lane, words[i]);
    T r;
    __builtin_memcpy(&r, words, sizeof(T));
    return r;
}
} // namespace candle_hip

// width must be a power of two <= 32 (CUDA rule); the segment is `width` lanes of the CUDA warp.
template <typename T> __CH_DEV T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    (void)mask;
    int lane = candle_hip::lane_id();
    int base = lane & ~(width - 1);
    return candle_hip::shuffle_from(base + (srcLane & (width - 1)), var);
}
template <typename T> __CH_DEV T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    (void)mask;
    int lane = candle_hip::lane_id();
    int src = lane ^ laneMask;
    if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane; // outside own segment: keep own
    return candle_hip::shuffle_from(src, var);
}
template <typename T> __CH_DEV T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = warpSize) {
    (void)mask;
    int lane = candle_hip::lane_id();
    int src = ((lane & (width - 1)) + (int)delta < width) ? lane + (int)delta : lane;
    return candle_hip::shuffle_from(src, var);
}
template <typename T> __CH_DEV T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = warpSize) {
    (void)mask;
    int lane = candle_hip::lane_id();
    int src = ((lane & (width - 1)) >= (int)delta) ? lane - (int)delta : lane;
    return candle_hip::shuffle_from(src, var);
}

// ---------------------------------------------------------------------------------------
// Bit casts (CUDA intrinsics not provided by clang's HIP math header).
__CH_DEV int __float_as_int(float x) { return __builtin_bit_cast(int, x); }
__CH_DEV unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
__CH_DEV float __int_as_float(int x) { return __builtin_bit_cast(float, x); }
__CH_DEV float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }
__CH_DEV long long __double_as_longlong(double x) { return __builtin_bit_cast(long long, x); }
__CH_DEV double __longlong_as_double(long long x) { return __builtin_bit_cast(double, x); }
__CH_DEV int __popc(unsigned int x) { return __builtin_popcount(x); }
__CH_DEV int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
__CH_DEV int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
__CH_DEV int __ffs(int x) { return __builtin_ffs(x); }

// ---------------------------------------------------------------------------------------
// Atomics (device scope, relaxed, like CUDA's atomicXxx). Floating-point adds use clang's
// generic lowering: a hardware instruction where it is safe, otherwise a CAS loop.
#define __CH_SCOPE __HIP_MEMORY_SCOPE_AGENT
#define __CH_ATOMIC_RMW(NAME, BUILTIN, T)                                                      \
    __CH_DEV T NAME(T *addr, T val) { return BUILTIN(addr, val, __ATOMIC_RELAXED, __CH_SCOPE); }
#define __CH_ATOMIC_INT_SET(T)                                                                 \
    __CH_ATOMIC_RMW(atomicAdd, __hip_atomic_fetch_add, T)                                      \
    __CH_ATOMIC_RMW(atomicSub, __hip_atomic_fetch_sub, T)                                      \
    __CH_ATOMIC_RMW(atomicExch, __hip_atomic_exchange, T)                                      \
    __CH_ATOMIC_RMW(atomicMin, __hip_atomic_fetch_min, T)                                      \
    __CH_ATOMIC_RMW(atomicMax, __hip_atomic_fetch_max, T)                                      \
    __CH_ATOMIC_RMW(atomicAnd, __hip_atomic_fetch_and, T)                                      \
    __CH_ATOMIC_RMW(atomicOr, __hip_atomic_fetch_or, T)                                        \
    __CH_ATOMIC_RMW(atomicXor, __hip_atomic_fetch_xor, T)                                      \
    __CH_DEV T atomicCAS(T *addr, T compare, T val) {                                          \
        __hip_atomic_compare_exchange_strong(addr, &compare, val, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __CH_SCOPE); \
        return compare;                                                                        \
    }
__CH_ATOMIC_INT_SET(int)
__CH_ATOMIC_INT_SET(unsigned int)
__CH_ATOMIC_INT_SET(unsigned long long)
__CH_ATOMIC_INT_SET(long long)
__CH_ATOMIC_RMW(atomicAdd, __hip_atomic_fetch_add, float)
__CH_ATOMIC_RMW(atomicAdd, __hip_atomic_fetch_add, double)
__CH_ATOMIC_RMW(atomicExch, __hip_atomic_exchange, float)
__CH_ATOMIC_RMW(atomicExch, __hip_atomic_exchange, double)
#undef __CH_ATOMIC_INT_SET
#undef __CH_ATOMIC_RMW
// int64_t is `long` on LP64 Linux; route it to the long long versions.
__CH_DEV long atomicAdd(long *a, long v) { return (long)atomicAdd((long long *)a, (long long)v); }
__CH_DEV long atomicMin(long *a, long v) { return (long)atomicMin((long long *)a, (long long)v); }
__CH_DEV long atomicMax(long *a, long v) { return (long)atomicMax((long long *)a, (long long)v); }
__CH_DEV unsigned long atomicAdd(unsigned long *a, unsigned long v) {
    return (unsigned long)atomicAdd((unsigned long long *)a, (unsigned long long)v);
}

// 16-bit atomics, emulated with a 32-bit CAS on the aligned word that contains the halfword.
namespace candle_hip {
template <typename F> __CH_DEV unsigned short atomic_update_u16(unsigned short *addr, F f) {
    unsigned int *word = (unsigned int *)((uintptr_t)addr & ~(uintptr_t)3);
    const unsigned int shift = ((uintptr_t)addr & 2) ? 16u : 0u;
    unsigned int old = __hip_atomic_load(word, __ATOMIC_RELAXED, __CH_SCOPE);
    while (true) {
        unsigned short cur = (unsigned short)(old >> shift);
        unsigned short nv;
        if (!f(cur, nv)) return cur;
        unsigned int desired = (old & ~(0xffffu << shift)) | ((unsigned int)nv << shift);
        if (__hip_atomic_compare_exchange_weak(word, &old, desired, __ATOMIC_RELAXED, __ATOMIC_RELAXED, __CH_SCOPE))
            return cur;
    }
}
} // namespace candle_hip
#ifndef CANDLE_HIP_HAVE_ATOMICCAS_U16
#define CANDLE_HIP_HAVE_ATOMICCAS_U16 1
__CH_DEV unsigned short atomicCAS(unsigned short *addr, unsigned short compare, unsigned short val) {
    return candle_hip::atomic_update_u16(addr, [=](unsigned short cur, unsigned short &nv) {
        nv = val;
        return cur == compare;
    });
}
#endif

// ---------------------------------------------------------------------------------------
// Integer SIMD intrinsics.
// __dp4a: signed 4x8-bit dot product with 32-bit accumulate.
__CH_DEV int __dp4a(int a, int b, int c) {
#if defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) ||   \
    defined(__gfx941__) || defined(__gfx942__) || defined(__gfx1011__) || defined(__gfx1012__) || \
    defined(__gfx1030__) || defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1033__) || \
    defined(__gfx1034__) || defined(__gfx1035__) || defined(__gfx1036__) || defined(__gfx10_3_generic__)
    return __builtin_amdgcn_sdot4(a, b, c, false); // v_dot4_i32_i8 (dot1-insts)
#elif defined(__GFX11__) || defined(__GFX12__)
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false); // v_dot4_i32_iu8 (dot8-insts)
#else
    return c + (int)(signed char)(a) * (int)(signed char)(b) +
           (int)(signed char)(a >> 8) * (int)(signed char)(b >> 8) +
           (int)(signed char)(a >> 16) * (int)(signed char)(b >> 16) +
           (int)(signed char)(a >> 24) * (int)(signed char)(b >> 24);
#endif
}
__CH_DEV unsigned int __dp4a(unsigned int a, unsigned int b, unsigned int c) {
    unsigned int r = c;
#pragma unroll
    for (int i = 0; i < 32; i += 8) r += ((a >> i) & 0xffu) * ((b >> i) & 0xffu);
    return r;
}
// __vsubss4: per-byte signed saturating subtraction.
__CH_DEV unsigned int __vsubss4(unsigned int a, unsigned int b) {
    unsigned int r = 0;
#pragma unroll
    for (int i = 0; i < 32; i += 8) {
        int d = (int)(signed char)(a >> i) - (int)(signed char)(b >> i);
        d = d > 127 ? 127 : (d < -128 ? -128 : d);
        r |= ((unsigned int)d & 0xffu) << i;
    }
    return r;
}
__CH_DEV int __vsubss4(int a, int b) { return (int)__vsubss4((unsigned int)a, (unsigned int)b); }

// ---------------------------------------------------------------------------------------
// CUDA vector types (struct layout and alignment as in CUDA's vector_types.h).
#define __CH_VEC2(T, N, A)                                                                     \
    struct __attribute__((aligned(A))) N##2 { T x, y; };                                       \
    __host__ __device__ inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }
#define __CH_VEC3(T, N)                                                                        \
    struct N##3 { T x, y, z; };                                                                \
    __host__ __device__ inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; }
#define __CH_VEC4(T, N, A)                                                                     \
    struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };                                 \
    __host__ __device__ inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
__CH_VEC2(float, float, 8) __CH_VEC3(float, float) __CH_VEC4(float, float, 16)
__CH_VEC2(double, double, 16) __CH_VEC3(double, double) __CH_VEC4(double, double, 16)
__CH_VEC2(int, int, 8) __CH_VEC3(int, int) __CH_VEC4(int, int, 16)
__CH_VEC2(unsigned int, uint, 8) __CH_VEC4(unsigned int, uint, 16)
__CH_VEC2(short, short, 4) __CH_VEC4(short, short, 8)
__CH_VEC2(unsigned short, ushort, 4) __CH_VEC4(unsigned short, ushort, 8)
__CH_VEC2(signed char, char, 2) __CH_VEC4(signed char, char, 4)
__CH_VEC2(unsigned char, uchar, 2) __CH_VEC4(unsigned char, uchar, 4)
__CH_VEC2(long long, longlong, 16) __CH_VEC2(unsigned long long, ulonglong, 16)
#undef __CH_VEC2
#undef __CH_VEC3
#undef __CH_VEC4

// ---------------------------------------------------------------------------------------
// Device memcpy/memset (CUDA provides them; glibc's are host-only). Host/device overloading lets
// these sit next to <string.h>'s declarations.
static __device__ inline __attribute__((always_inline)) void *memcpy(void *d, const void *s, size_t n) {
    return __builtin_memcpy(d, s, n);
}
static __device__ inline __attribute__((always_inline)) void *memset(void *d, int c, size_t n) {
    return __builtin_memset(d, c, n);
}

// ---------------------------------------------------------------------------------------
// Device-side assert: glibc's __assert_fail is host-only. A failed assert traps, which ends the
// kernel with an error (like CUDA's device assert). Define CANDLE_HIP_ASSERT_NOOP to make
// failed asserts continue instead.
extern "C" __device__ __attribute__((weak, noinline)) void __assert_fail(const char *, const char *, unsigned int,
                                                                        const char *) {
#ifndef CANDLE_HIP_ASSERT_NOOP
    __builtin_trap();
#endif
}
extern "C" __device__ __attribute__((weak, noinline)) void __assert_fail_base(const char *, const char *, const char *,
                                                                             unsigned int, const char *) {
#ifndef CANDLE_HIP_ASSERT_NOOP
    __builtin_trap();
#endif
}

#endif // CANDLE_HIP_COMPAT_H
