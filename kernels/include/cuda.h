// cuda.h - candle-rocm's stand-in for the CUDA driver API header, for Candle's CUDA kernels
// compiled as HIP on AMD. Kernel sources only read CUDA_VERSION from it (cast.cu's pre-sm_80
// branch), so that is all it provides: the CUDA version the compatibility layer emulates.
#pragma once
#ifndef CANDLE_HIP_CUDA_H
#define CANDLE_HIP_CUDA_H
#include "candle_hip_compat.h"
#ifndef CUDA_VERSION
#define CUDA_VERSION (__CUDACC_VER_MAJOR__ * 1000 + __CUDACC_VER_MINOR__ * 10)
#endif
#endif
