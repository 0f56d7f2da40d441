/* Input of `cargo xtask bindgen`: the HIP runtime C API for the AMD platform. */
#define __HIP_PLATFORM_AMD__ 1
#include <hip/hip_runtime_api.h>
