// Test kernels for rocm-safe's GPU tests and launch benchmark. Plain CUDA/HIP syntax, so the
// same file builds for AMD (hipcc --genco) and for the HIP-on-CUDA harness (nvcc -cubin).
// The tests load the code object named by $ROCM_SAFE_TEST_MODULE.

// y[i] = a * x[i] + y[i]
extern "C" __global__ void axpy_f32(float a, const float* x, float* y, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

// Does nothing: measures launch overhead.
extern "C" __global__ void noop() {}
