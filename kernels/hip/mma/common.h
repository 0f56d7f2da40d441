// mma/common.h - what the kernels built on mma/frag.h share (attention.hip, conv_igemm.hip):
// the wave size of the build (FA_WAVE), a 16-byte vector (fa_vec), conversions between the
// element types and f32 (fa_to, fa_from), the xor shuffle inside a wave (fa_shfl_xor) and the
// AMD scheduling fence (FA_FENCE). Plain CUDA syntax plus AMD builtins behind
// __HIP_DEVICE_COMPILE__, so it builds for AMD (clang, kernels/include headers), for the
// HIP-on-CUDA harness (nvcc, CUDA's headers) and on the CPU emulator (kernels/tests/emu).
#pragma once

#include "cuda_fp16.h"
#include "cuda_bf16.h"
#include <stdint.h>

#if defined(__HIP_DEVICE_COMPILE__)
#define FA_WAVE __AMDGCN_WAVEFRONT_SIZE__
typedef unsigned int fa_vec __attribute__((ext_vector_type(4)));
#else
#define FA_WAVE 32
typedef uint4 fa_vec;
#endif

__device__ __forceinline__ float fa_to(float v) { return v; }
__device__ __forceinline__ float fa_to(__half v) { return __half2float(v); }
__device__ __forceinline__ float fa_to(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T fa_from(float v);
template <> __device__ __forceinline__ float fa_from<float>(float v) { return v; }
template <> __device__ __forceinline__ __half fa_from<__half>(float v) { return __float2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 fa_from<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}

// xor shuffle inside the wave (masks below 32 keep it inside an aligned group of 32 lanes).
__device__ __forceinline__ float fa_shfl_xor(float v, int mask) {
#if defined(__HIP_DEVICE_COMPILE__)
    int lane = __builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u));
    return __int_as_float(__builtin_amdgcn_ds_bpermute((lane ^ mask) << 2, __float_as_int(v)));
#else
    return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

// A scheduling fence on AMD: keeps the loads and the arithmetic of one step of an unrolled loop
// together (without it the scheduler hoists every load of the loop ahead and runs out of
// VGPRs); nothing elsewhere.
#if defined(__HIP_DEVICE_COMPILE__)
#define FA_FENCE() __builtin_amdgcn_sched_barrier(0)
#else
#define FA_FENCE()
#endif
