/*
 * hoc_internal.h - shared by hip_on_cuda.c and rocblas_on_cublas.c (one shared object).
 * Picks the CUDA declarations (see cuda_min.h) and declares the HIP/rocBLAS ABI types the double
 * exports. HIP enums are plain integers here: only their values and 32-bit width are ABI.
 */
#ifndef HIP_ON_CUDA_INTERNAL_H
#define HIP_ON_CUDA_INTERNAL_H

#if defined(HIP_ON_CUDA_MIN_DECLS) && defined(HIP_ON_CUDA_CHECK_DECLS)
#error "choose one of HIP_ON_CUDA_MIN_DECLS and HIP_ON_CUDA_CHECK_DECLS"
#endif

#if defined(HIP_ON_CUDA_MIN_DECLS)
#include "cuda_min.h"
#else
#include <cuda.h>
#include <cublas_v2.h>
#if defined(HIP_ON_CUDA_CHECK_DECLS)
#include "cuda_min.h" /* redeclares everything: a mismatch with the real headers fails here */
#endif
#endif

#include <stddef.h>
#include <stdint.h>

#define HOC_EXPORT __attribute__((visibility("default")))
#define HOC_HIDDEN __attribute__((visibility("hidden")))

/* ---- HIP ABI (hip_runtime_api.h) ---- */
typedef int hipError_t;
typedef int hipDevice_t;
typedef void *hipDeviceptr_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipModule_t *hipModule_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipMemPoolHandle_t *hipMemPool_t;
typedef struct hipIpcMemHandle_st {
    char reserved[64]; /* HIP_IPC_HANDLE_SIZE, CUDA's CU_IPC_HANDLE_SIZE too */
} hipIpcMemHandle_t;

enum {
    hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorOutOfMemory = 2, hipErrorNotInitialized = 3,
    hipErrorDeinitialized = 4, hipErrorInvalidConfiguration = 9, hipErrorInsufficientDriver = 35,
    hipErrorInvalidDeviceFunction = 98, hipErrorNoDevice = 100, hipErrorInvalidDevice = 101,
    hipErrorInvalidImage = 200, hipErrorInvalidContext = 201, hipErrorNoBinaryForGpu = 209,
    hipErrorInvalidKernelFile = 218, hipErrorInvalidHandle = 400, hipErrorNotFound = 500,
    hipErrorNotReady = 600, hipErrorIllegalAddress = 700, hipErrorLaunchOutOfResources = 701,
    hipErrorLaunchTimeOut = 702, hipErrorLaunchFailure = 719, hipErrorNotSupported = 801,
    hipErrorUnknown = 999,
};

/* ---- what rocblas_on_cublas.c needs from hip_on_cuda.c ---- */
/* Makes the primary context of the calling thread's current HIP device current (hipInit first). */
HOC_HIDDEN hipError_t hoc_bind(void);
/* Makes the primary context of `device` current without changing the thread's HIP device. */
HOC_HIDDEN hipError_t hoc_bind_device(int device);
/* The calling thread's current HIP device. */
HOC_HIDDEN int hoc_current_device(void);

#endif /* HIP_ON_CUDA_INTERNAL_H */
