/*
 * cudnn_min.h - the slice of cuDNN 9's legacy convolution/pooling API that miopen_on_cudnn.c
 * uses, declared by hand so the MIOpen double compiles where no cuDNN is installed.
 *
 * Values, prototypes and struct layouts follow NVIDIA's cudnn_graph.h / cudnn_ops.h /
 * cudnn_cnn.h of cuDNN 9 (checked against 9.28.1, the nvidia-cudnn-cu13 wheel). The entry
 * points are the "legacy" API cuDNN 9 keeps (marked CUDNN_DEPRECATED, which only warns under
 * CUDNN_WARN_DEPRECATED); a future cuDNN that drops them breaks the full build, not this file.
 * Same three modes as cuda_min.h:
 *   -DHIP_ON_CUDA_MIN_DECLS    this file alone.
 *   (default)                  the real <cudnn.h>; this file is not used.
 *   -DHIP_ON_CUDA_CHECK_DECLS  <cudnn.h> first, then this file: typedefs and prototypes are
 *                              redeclared (a mismatch is a compile error), enumerator values and
 *                              the perf structs' layouts are _Static_assert-ed.
 */
#ifndef HIP_ON_CUDA_CUDNN_MIN_H
#define HIP_ON_CUDA_CUDNN_MIN_H

#include <stddef.h>
#include <stdint.h>

/* ---- opaque handles (redeclared even in check mode) ---- */
typedef struct cudnnContext *cudnnHandle_t;
typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;
typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;
typedef struct cudnnPoolingStruct *cudnnPoolingDescriptor_t;

/* ---- enumerator values, one X-list per C enum type ---- */
#define HOC_CUDNNSTATUS_VALUES(X) \
    X(CUDNN_STATUS_SUCCESS, 0) X(CUDNN_STATUS_NOT_INITIALIZED, 1001) \
    X(CUDNN_STATUS_BAD_PARAM, 2000) X(CUDNN_STATUS_NOT_SUPPORTED, 3000) \
    X(CUDNN_STATUS_INTERNAL_ERROR, 4000) \
    X(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, 4003) \
    X(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED, 4004) \
    X(CUDNN_STATUS_EXECUTION_FAILED, 5000)
#define HOC_CUDNNDATA_VALUES(X) \
    X(CUDNN_DATA_FLOAT, 0) X(CUDNN_DATA_DOUBLE, 1) X(CUDNN_DATA_HALF, 2) X(CUDNN_DATA_BFLOAT16, 9)
#define HOC_CUDNNFORMAT_VALUES(X) X(CUDNN_TENSOR_NCHW, 0)
#define HOC_CUDNNMATH_VALUES(X) X(CUDNN_DEFAULT_MATH, 0) X(CUDNN_TENSOR_OP_MATH, 1) X(CUDNN_FMA_MATH, 3)
#define HOC_CUDNNNAN_VALUES(X) X(CUDNN_NOT_PROPAGATE_NAN, 0)
#define HOC_CUDNNPOOL_VALUES(X) \
    X(CUDNN_POOLING_MAX, 0) X(CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, 1) \
    X(CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, 2)
#define HOC_CUDNNCONVMODE_VALUES(X) X(CUDNN_CONVOLUTION, 0) X(CUDNN_CROSS_CORRELATION, 1)
#define HOC_CUDNNDET_VALUES(X) X(CUDNN_NON_DETERMINISTIC, 0) X(CUDNN_DETERMINISTIC, 1)
#define HOC_CUDNNFWD_VALUES(X) \
    X(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0) X(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, 1) \
    X(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, 2) X(CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, 3) \
    X(CUDNN_CONVOLUTION_FWD_ALGO_FFT, 4) X(CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING, 5) \
    X(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, 6) X(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, 7) \
    X(CUDNN_CONVOLUTION_FWD_ALGO_COUNT, 8)
#define HOC_CUDNNBWDDATA_VALUES(X) \
    X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, 0) X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 1) \
    X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, 2) X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING, 3) \
    X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD, 4) X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED, 5) \
    X(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, 6)

#define HOC_CUDNN_ALL_VALUES(X) \
    HOC_CUDNNSTATUS_VALUES(X) HOC_CUDNNDATA_VALUES(X) HOC_CUDNNFORMAT_VALUES(X) \
    HOC_CUDNNMATH_VALUES(X) HOC_CUDNNNAN_VALUES(X) HOC_CUDNNPOOL_VALUES(X) \
    HOC_CUDNNCONVMODE_VALUES(X) HOC_CUDNNFWD_VALUES(X) HOC_CUDNNBWDDATA_VALUES(X) \
    HOC_CUDNNDET_VALUES(X)

/* Layout of cudnnConvolution{Fwd,BwdData}AlgoPerf_t (cudnn_cnn.h): algo, status, time, memory,
 * determinism, mathType, reserved[3]. */
#define HOC_CUDNN_PERF_LAYOUT(T) \
    _Static_assert(offsetof(T, algo) == 0 && offsetof(T, status) == 4 && offsetof(T, time) == 8 && \
                       offsetof(T, memory) == 16 && offsetof(T, determinism) == 24 && \
                       offsetof(T, mathType) == 28 && sizeof(T) == 48, \
                   #T " layout differs from cudnn_min.h");

#ifdef HIP_ON_CUDA_CHECK_DECLS
#define HOC_CUDNN_ASSERT_VALUE(name, value) _Static_assert((long)(name) == (value), #name " differs from cudnn_min.h");
HOC_CUDNN_ALL_VALUES(HOC_CUDNN_ASSERT_VALUE)
#else
#define HOC_CUDNN_ENUMERATOR(name, value) name = (value),
typedef enum { HOC_CUDNNSTATUS_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnStatus_t;
typedef enum { HOC_CUDNNDATA_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnDataType_t;
typedef enum { HOC_CUDNNFORMAT_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnTensorFormat_t;
typedef enum { HOC_CUDNNMATH_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnMathType_t;
typedef enum { HOC_CUDNNNAN_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnNanPropagation_t;
typedef enum { HOC_CUDNNPOOL_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnPoolingMode_t;
typedef enum { HOC_CUDNNCONVMODE_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnConvolutionMode_t;
typedef enum { HOC_CUDNNFWD_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnConvolutionFwdAlgo_t;
typedef enum { HOC_CUDNNBWDDATA_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnConvolutionBwdDataAlgo_t;
typedef enum { HOC_CUDNNDET_VALUES(HOC_CUDNN_ENUMERATOR) } cudnnDeterminism_t;
typedef struct cudnnConvolutionFwdAlgoPerfStruct {
    cudnnConvolutionFwdAlgo_t algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t mathType;
    int reserved[3];
} cudnnConvolutionFwdAlgoPerf_t;
typedef struct cudnnConvolutionBwdDataAlgoPerfStruct {
    cudnnConvolutionBwdDataAlgo_t algo;
    cudnnStatus_t status;
    float time;
    size_t memory;
    cudnnDeterminism_t determinism;
    cudnnMathType_t mathType;
    int reserved[3];
} cudnnConvolutionBwdDataAlgoPerf_t;
#endif
HOC_CUDNN_PERF_LAYOUT(cudnnConvolutionFwdAlgoPerf_t)
HOC_CUDNN_PERF_LAYOUT(cudnnConvolutionBwdDataAlgoPerf_t)

/* ---- cuDNN (libcudnn.so.9) ---- */
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId);
size_t cudnnGetVersion(void);
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc);
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w);
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc);
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc);
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w);
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc);
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc);
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w,
                                              int u, int v, int dilation_h, int dilation_w,
                                              cudnnConvolutionMode_t mode, cudnnDataType_t computeType);
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount);
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType);
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc);
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t yDesc, void *y, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes);
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnFilterDescriptor_t filterDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t destDesc,
    const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults);
cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc,
    const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults);
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
    cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes);
cudnnStatus_t cudnnConvolutionForward(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnFilterDescriptor_t wDesc, const void *w, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionFwdAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t yDesc, void *y);
cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t dxDesc, void *dx, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes);
cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
    cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes);
cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy, const cudnnConvolutionDescriptor_t convDesc,
    cudnnConvolutionBwdDataAlgo_t algo, void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx);
cudnnStatus_t cudnnCreatePoolingDescriptor(cudnnPoolingDescriptor_t *poolingDesc);
cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t poolingDesc, cudnnPoolingMode_t mode,
                                          cudnnNanPropagation_t maxpoolingNanOpt, int windowHeight,
                                          int windowWidth, int verticalPadding, int horizontalPadding,
                                          int verticalStride, int horizontalStride);
cudnnStatus_t cudnnPoolingForward(cudnnHandle_t handle, const cudnnPoolingDescriptor_t poolingDesc,
                                  const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
                                  const void *beta, const cudnnTensorDescriptor_t yDesc, void *y);
cudnnStatus_t cudnnDestroyPoolingDescriptor(cudnnPoolingDescriptor_t poolingDesc);

#endif /* HIP_ON_CUDA_CUDNN_MIN_H */
