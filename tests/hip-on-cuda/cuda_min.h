/*
 * cuda_min.h - the slice of the CUDA driver API and cuBLAS that the HIP-on-CUDA double uses,
 * declared by hand so the double compiles where no CUDA toolkit is installed.
 *
 * Values and prototypes follow NVIDIA's cuda.h / cublas_api.h / library_types.h (CUDA 11-12).
 * Three ways to include it (see hip_on_cuda.h):
 *   -DHIP_ON_CUDA_MIN_DECLS    this file alone: types, enums and prototypes below.
 *   (default)                  the real <cuda.h> and <cublas_v2.h>; this file is not used.
 *   -DHIP_ON_CUDA_CHECK_DECLS  the real headers first, then this file: every typedef and
 *                              prototype below is redeclared (C11 allows an identical typedef or
 *                              prototype again; a different one is a compile error), enums are
 *                              skipped and each enumerator value is _Static_assert-ed instead.
 *
 * Every function is called by its exported symbol name (the _v2 names where cuda.h maps the plain
 * name to _v2), so the double links against the same symbols in all three modes.
 */
#ifndef HIP_ON_CUDA_CUDA_MIN_H
#define HIP_ON_CUDA_CUDA_MIN_H

#include <stddef.h>
#include <stdint.h>

/* ---- opaque handles and scalar typedefs (redeclared even in check mode) ---- */
typedef uint64_t cuuint64_t;
typedef int CUdevice_v1;
typedef CUdevice_v1 CUdevice;
typedef unsigned long long CUdeviceptr_v2;
typedef CUdeviceptr_v2 CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef struct CUstream_st *cudaStream_t;
typedef struct cublasContext *cublasHandle_t;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;

/* ---- enumerator values, one X-list per C enum type: X(name, value) ---- */
#define HOC_CURESULT_VALUES(X) \
    X(CUDA_SUCCESS, 0) X(CUDA_ERROR_INVALID_VALUE, 1) X(CUDA_ERROR_OUT_OF_MEMORY, 2) \
    X(CUDA_ERROR_NOT_INITIALIZED, 3) X(CUDA_ERROR_DEINITIALIZED, 4) X(CUDA_ERROR_STUB_LIBRARY, 34) \
    X(CUDA_ERROR_NO_DEVICE, 100) X(CUDA_ERROR_INVALID_DEVICE, 101) X(CUDA_ERROR_INVALID_IMAGE, 200) \
    X(CUDA_ERROR_INVALID_CONTEXT, 201) X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209) \
    X(CUDA_ERROR_INVALID_PTX, 218) X(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, 222) \
    X(CUDA_ERROR_INVALID_HANDLE, 400) X(CUDA_ERROR_NOT_FOUND, 500) X(CUDA_ERROR_NOT_READY, 600) \
    X(CUDA_ERROR_ILLEGAL_ADDRESS, 700) X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701) \
    X(CUDA_ERROR_LAUNCH_TIMEOUT, 702) X(CUDA_ERROR_LAUNCH_FAILED, 719) \
    X(CUDA_ERROR_NOT_SUPPORTED, 801) X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900) \
    X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901) X(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, 910) \
    X(CUDA_ERROR_UNKNOWN, 999)
#define HOC_DEVATTR_VALUES(X) \
    X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1) X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 2) \
    X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 3) X(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 4) \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 5) X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 6) \
    X(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 7) X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 8) \
    X(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 9) X(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 10) \
    X(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 12) X(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 13) \
    X(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 16) X(CU_DEVICE_ATTRIBUTE_INTEGRATED, 18) \
    X(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 33) X(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 34) \
    X(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 38) X(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 39) \
    X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 75) X(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 76) \
    X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 81) \
    X(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 97) \
    X(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 115)
#define HOC_FUNCATTR_VALUES(X) \
    X(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0) X(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 1) \
    X(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, 2) X(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, 3) \
    X(CU_FUNC_ATTRIBUTE_NUM_REGS, 4) X(CU_FUNC_ATTRIBUTE_PTX_VERSION, 5) \
    X(CU_FUNC_ATTRIBUTE_BINARY_VERSION, 6) X(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, 7) \
    X(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8) \
    X(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 9)
#define HOC_POOLATTR_VALUES(X) \
    X(CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES, 1) X(CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, 2) \
    X(CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES, 3) X(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 4) \
    X(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, 5) X(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 6) \
    X(CU_MEMPOOL_ATTR_USED_MEM_CURRENT, 7) X(CU_MEMPOOL_ATTR_USED_MEM_HIGH, 8)
#define HOC_FLAG_VALUES(X) \
    X(CU_STREAM_DEFAULT, 0) X(CU_STREAM_NON_BLOCKING, 1) \
    X(CU_EVENT_DEFAULT, 0) X(CU_EVENT_BLOCKING_SYNC, 1) X(CU_EVENT_DISABLE_TIMING, 2) X(CU_EVENT_INTERPROCESS, 4)
#define HOC_CUBLASSTATUS_VALUES(X) \
    X(CUBLAS_STATUS_SUCCESS, 0) X(CUBLAS_STATUS_NOT_INITIALIZED, 1) X(CUBLAS_STATUS_ALLOC_FAILED, 3) \
    X(CUBLAS_STATUS_INVALID_VALUE, 7) X(CUBLAS_STATUS_ARCH_MISMATCH, 8) X(CUBLAS_STATUS_MAPPING_ERROR, 11) \
    X(CUBLAS_STATUS_EXECUTION_FAILED, 13) X(CUBLAS_STATUS_INTERNAL_ERROR, 14) \
    X(CUBLAS_STATUS_NOT_SUPPORTED, 15) X(CUBLAS_STATUS_LICENSE_ERROR, 16)
#define HOC_CUBLASOP_VALUES(X) X(CUBLAS_OP_N, 0) X(CUBLAS_OP_T, 1) X(CUBLAS_OP_C, 2)
#define HOC_CUBLASPM_VALUES(X) X(CUBLAS_POINTER_MODE_HOST, 0) X(CUBLAS_POINTER_MODE_DEVICE, 1)
#define HOC_CUBLASALGO_VALUES(X) X(CUBLAS_GEMM_DEFAULT, -1)
#define HOC_CUBLASCT_VALUES(X) X(CUBLAS_COMPUTE_16F, 64) X(CUBLAS_COMPUTE_32F, 68) X(CUBLAS_COMPUTE_64F, 70)
#define HOC_DATATYPE_VALUES(X) X(CUDA_R_32F, 0) X(CUDA_R_64F, 1) X(CUDA_R_16F, 2) X(CUDA_R_16BF, 14)
/* Stream capture and graphs (cuda.h, CUDA 12). */
#define HOC_CAPTUREMODE_VALUES(X) \
    X(CU_STREAM_CAPTURE_MODE_GLOBAL, 0) X(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, 1) \
    X(CU_STREAM_CAPTURE_MODE_RELAXED, 2)
#define HOC_CAPTURESTATUS_VALUES(X) \
    X(CU_STREAM_CAPTURE_STATUS_NONE, 0) X(CU_STREAM_CAPTURE_STATUS_ACTIVE, 1) \
    X(CU_STREAM_CAPTURE_STATUS_INVALIDATED, 2)
#define HOC_GRAPHUPDATE_VALUES(X) \
    X(CU_GRAPH_EXEC_UPDATE_SUCCESS, 0) X(CU_GRAPH_EXEC_UPDATE_ERROR, 1) \
    X(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, 2) X(CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, 3) \
    X(CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED, 4) X(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, 5) \
    X(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, 6) \
    X(CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE, 7)

#define HOC_ALL_VALUES(X) \
    HOC_CURESULT_VALUES(X) HOC_DEVATTR_VALUES(X) HOC_FUNCATTR_VALUES(X) HOC_POOLATTR_VALUES(X) \
    HOC_FLAG_VALUES(X) HOC_CUBLASSTATUS_VALUES(X) HOC_CUBLASOP_VALUES(X) HOC_CUBLASPM_VALUES(X) \
    HOC_CUBLASALGO_VALUES(X) HOC_CUBLASCT_VALUES(X) HOC_DATATYPE_VALUES(X) \
    HOC_CAPTUREMODE_VALUES(X) HOC_CAPTURESTATUS_VALUES(X) HOC_GRAPHUPDATE_VALUES(X)

#ifdef HIP_ON_CUDA_CHECK_DECLS
/* Real headers already included: check every value this file would have declared. */
#define HOC_ASSERT_VALUE(name, value) _Static_assert((long)(name) == (value), #name " differs from cuda_min.h");
HOC_ALL_VALUES(HOC_ASSERT_VALUE)
#ifdef CU_LAUNCH_PARAM_END_AS_INT
_Static_assert(CU_LAUNCH_PARAM_END_AS_INT == 0 && CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT == 1 &&
                   CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT == 2, "CU_LAUNCH_PARAM_* differ");
#endif
_Static_assert(CU_MEMHOSTALLOC_PORTABLE == 1 && CU_MEMHOSTALLOC_DEVICEMAP == 2 &&
                   CU_MEMHOSTALLOC_WRITECOMBINED == 4, "CU_MEMHOSTALLOC_* differ");
_Static_assert(CU_IPC_HANDLE_SIZE == 64 && CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS == 1,
               "CU_IPC_* differ");
/* A struct cannot be declared twice: its layout is checked instead. */
#include <stddef.h>
_Static_assert(offsetof(CUgraphExecUpdateResultInfo, result) == 0 &&
                   offsetof(CUgraphExecUpdateResultInfo, errorNode) == 8 &&
                   offsetof(CUgraphExecUpdateResultInfo, errorFromNode) == 16 &&
                   sizeof(CUgraphExecUpdateResultInfo) == 24,
               "CUgraphExecUpdateResultInfo differs from cuda_min.h");
_Static_assert(sizeof(CUipcMemHandle) == 64, "CUipcMemHandle differs from cuda_min.h");
#else
/* Enum tags as in cuda.h / cublas_api.h / library_types.h (cuBLAS's enums are anonymous). */
#define HOC_ENUMERATOR(name, value) name = (value),
typedef enum cudaError_enum { HOC_CURESULT_VALUES(HOC_ENUMERATOR) } CUresult;
typedef enum CUdevice_attribute_enum { HOC_DEVATTR_VALUES(HOC_ENUMERATOR) } CUdevice_attribute;
typedef enum CUfunction_attribute_enum { HOC_FUNCATTR_VALUES(HOC_ENUMERATOR) } CUfunction_attribute;
typedef enum CUmemPool_attribute_enum { HOC_POOLATTR_VALUES(HOC_ENUMERATOR) } CUmemPool_attribute;
enum { HOC_FLAG_VALUES(HOC_ENUMERATOR) }; /* CUstream_flags / CUevent_flags, used as unsigned int */
typedef enum { HOC_CUBLASSTATUS_VALUES(HOC_ENUMERATOR) } cublasStatus_t;
typedef enum { HOC_CUBLASOP_VALUES(HOC_ENUMERATOR) } cublasOperation_t;
typedef enum { HOC_CUBLASPM_VALUES(HOC_ENUMERATOR) } cublasPointerMode_t;
typedef enum { HOC_CUBLASALGO_VALUES(HOC_ENUMERATOR) } cublasGemmAlgo_t;
typedef enum { HOC_CUBLASCT_VALUES(HOC_ENUMERATOR) } cublasComputeType_t;
typedef enum cudaDataType_t { HOC_DATATYPE_VALUES(HOC_ENUMERATOR) } cudaDataType;
typedef enum CUstreamCaptureMode_enum { HOC_CAPTUREMODE_VALUES(HOC_ENUMERATOR) } CUstreamCaptureMode;
typedef enum CUstreamCaptureStatus_enum { HOC_CAPTURESTATUS_VALUES(HOC_ENUMERATOR) } CUstreamCaptureStatus;
typedef enum CUgraphExecUpdateResult_enum { HOC_GRAPHUPDATE_VALUES(HOC_ENUMERATOR) } CUgraphExecUpdateResult;
/* cuGraphExecUpdate_v2's result (CUDA 12's CUgraphExecUpdateResultInfo_v1). */
typedef struct CUgraphExecUpdateResultInfo_st {
    CUgraphExecUpdateResult result;
    CUgraphNode errorNode;
    CUgraphNode errorFromNode;
} CUgraphExecUpdateResultInfo;
#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04
#define CU_IPC_HANDLE_SIZE 64
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1
typedef struct CUipcMemHandle_st {
    char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle_v1;
typedef CUipcMemHandle_v1 CUipcMemHandle;
#endif

/* ---- CUDA driver API (libcuda.so.1) ---- */
CUresult cuInit(unsigned int Flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuGetErrorName(CUresult error, const char **pStr);
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetCount(int *count);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev);
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *pctx);
CUresult cuCtxSynchronize(void);
CUresult cuMemGetInfo_v2(size_t *free, size_t *total);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags);
CUresult cuMemFreeHost(void *p);
CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream);
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev);
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags);
CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                           CUcontext srcContext, size_t ByteCount, CUstream hStream);
/* Interprocess memory: cuda.h maps cuIpcOpenMemHandle to _v2 (CUDA 11+). */
CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
CUresult cuIpcCloseMemHandle(CUdeviceptr dptr);
CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream);
CUresult cuMemsetD16Async(CUdeviceptr dstDevice, unsigned short us, size_t N, CUstream hStream);
CUresult cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream);
CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev);
CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep);
CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult cuStreamDestroy_v2(CUstream hStream);
CUresult cuStreamSynchronize(CUstream hStream);
CUresult cuStreamQuery(CUstream hStream);
CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags);
CUresult cuEventDestroy_v2(CUevent hEvent);
CUresult cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult cuEventSynchronize(CUevent hEvent);
CUresult cuEventQuery(CUevent hEvent);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuModuleLoadData(CUmodule *module, const void *image);
CUresult cuModuleUnload(CUmodule hmod);
CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc);
CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                        unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                        unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra);
/* Graphs: cuda.h maps cuStreamBeginCapture to _v2 (CUDA 10.1+), cuGraphExecUpdate to _v2 and
 * cuGraphInstantiate to cuGraphInstantiateWithFlags (CUDA 12). */
CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph);
CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus);
CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags);
CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo);
CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphExecDestroy(CUgraphExec hGraphExec);
CUresult cuGraphDestroy(CUgraph hGraph);

/* ---- cuBLAS (libcublas.so) ---- */
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId);
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId);
cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode);
cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA,
    const void *B, cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo);

#endif /* HIP_ON_CUDA_CUDA_MIN_H */
