/* GPU_CHECK: a CUDA runtime call that must succeed in a test (else the case
 * fails with the call, the error's name and text). Shared by the GPU tests;
 * needs harness.h's TEST_FAIL. */
#ifndef COMMGEMM_TEST_GPU_CHECK_H
#define COMMGEMM_TEST_GPU_CHECK_H

#include <cuda_runtime_api.h>

#include "harness.h"

#define GPU_CHECK(call)                                                      \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess)                                               \
            TEST_FAIL("%s: %s (%s)", #call, cudaGetErrorName(e_),            \
                      cudaGetErrorString(e_));                               \
    } while (0)

#endif
