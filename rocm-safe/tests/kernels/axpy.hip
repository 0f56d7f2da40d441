// Test kernel for rocm-safe's launch tests: y[i] = a * x[i] + y[i].
// Built for AMD by clang/hipcc and for the HIP-on-CUDA harness by nvcc (the syntax is common
// to both); the test reads the code object from $ROCM_SAFE_TEST_AXPY.
extern "C" __global__ void axpy_f32(float a, const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
