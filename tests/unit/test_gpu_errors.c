/* The messages of failed CUDA calls (backend/gpu/gpu_errors.c): pure
 * formatting, so they run without a GPU (built where the CUDA toolkit is). */
#include "harness.h"

#include "backend/gpu/gpu.h"

/* Out of memory: the status, and what to lower. */
static void test_out_of_memory(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_cuda_fail(cudaErrorMemoryAllocation, "cudaMalloc(&x, 8)", "a/b/p2p.c", 12),
                 CGM_ERROR_OUT_OF_MEMORY);
    CHECK_CONTAINS(cgm_last_error(), "cudaMalloc(&x, 8) failed at p2p.c:12");
    CHECK_CONTAINS(cgm_last_error(), "lower COMMGEMM_MAX_M/MAX_N/MAX_K");
}

/* A kernel with no image for the GPU (the kernel preload at comm creation
 * meets it first): which architectures the library holds, how to rebuild. */
static void test_no_kernel_image(const void *p) {
    (void)p;
    cudaError_t errs[] = {cudaErrorNoKernelImageForDevice, cudaErrorInvalidDeviceFunction};
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(cgm_cuda_fail(errs[i], "cgm_dev_preload()", "p2p_backend.c", 7), CGM_ERROR_CUDA);
        CHECK_CONTAINS(cgm_last_error(), "cgm_dev_preload() failed at p2p_backend.c:7");
        CHECK_CONTAINS(cgm_last_error(), cudaGetErrorName(errs[i]));
        CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_CUDA_ARCHITECTURES (default 90a)");
        CHECK_CONTAINS(cgm_last_error(), "rebuild with -DCOMMGEMM_CUDA_ARCHITECTURES");
    }
}

/* Any other error: its name and code, and the sticky-error advice. */
static void test_other(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_cuda_fail(cudaErrorIllegalAddress, "cudaStreamSynchronize(s)", "x.c", 3),
                 CGM_ERROR_CUDA);
    CHECK_CONTAINS(cgm_last_error(), "expected cudaSuccess, found 700");
    CHECK_CONTAINS(cgm_last_error(), "cudaErrorIllegalAddress");
    CHECK_CONTAINS(cgm_last_error(), "destroy the comm");
}

static void register_cases(void) {
    test_add("out_of_memory", test_out_of_memory, NULL);
    test_add("no_kernel_image", test_no_kernel_image, NULL);
    test_add("other", test_other, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
