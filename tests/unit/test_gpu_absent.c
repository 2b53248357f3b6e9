/* The message of a GPU backend that finds no usable GPU
 * (src/core/gpu_absent.c), from what the CUDA runtime would say: pure
 * formatting, so it runs in every build. */
#include "harness.h"

#include "core/core.h"

static void check_absent(const char *text) { CHECK(strstr(text, "insufficient") == NULL); }

/* No driver at all: cudaGetDeviceCount gives cudaErrorInsufficientDriver
 * and cudaDriverGetVersion 0. Not "driver version is insufficient". */
static void test_no_driver(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_gpu_absent_error("p2p", 35, "cudaErrorInsufficientDriver", 0, 12080), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "the p2p backend needs an NVIDIA GPU, found no NVIDIA driver");
    CHECK_CONTAINS(cgm_last_error(), "libcuda.so.1 is not installed or not loadable");
    CHECK_CONTAINS(cgm_last_error(), "use the host backend");
    check_absent(cgm_last_error());
}

/* The toolkit's stub libcuda.so instead of a driver. */
static void test_stub_driver(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_gpu_absent_error("nccl", 34, "cudaErrorStubLibrary", 0, 12080), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "the nccl backend needs an NVIDIA GPU, found no NVIDIA driver");
    CHECK_CONTAINS(cgm_last_error(), "stubs folder off LD_LIBRARY_PATH");
}

/* A driver older than the runtime: both versions, and what to update. */
static void test_old_driver(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_gpu_absent_error("cublasmp", 35, "cudaErrorInsufficientDriver", 12020, 13000),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "needs an NVIDIA driver for CUDA 13.0 or newer");
    CHECK_CONTAINS(cgm_last_error(), "found one for CUDA 12.2");
    CHECK_CONTAINS(cgm_last_error(), "update the NVIDIA driver");
}

/* A driver that sees no GPU (cudaErrorNoDevice, or success with 0). */
static void test_no_device(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_gpu_absent_error("p2p", 100, "cudaErrorNoDevice", 12080, 12080), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "found an NVIDIA driver (CUDA 12.8) that sees none (cudaErrorNoDevice)");
    CHECK_CONTAINS(cgm_last_error(), "CUDA_VISIBLE_DEVICES");
    CHECK_STATUS(cgm_gpu_absent_error("p2p", 0, "cudaSuccess", 12080, 12080), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "that sees none (0 devices)");
}

/* Any other error: its number and name. */
static void test_other(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_gpu_absent_error("p2p", 999, "cudaErrorUnknown", 12080, 12080), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "cudaGetDeviceCount returned 999: cudaErrorUnknown");
    CHECK_STATUS(cgm_gpu_absent_error("p2p", 999, NULL, 12080, 12080), CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "999: unnamed CUDA error");
}

static void register_cases(void) {
    test_add("no_driver", test_no_driver, NULL);
    test_add("stub_driver", test_stub_driver, NULL);
    test_add("old_driver", test_old_driver, NULL);
    test_add("no_device", test_no_device, NULL);
    test_add("other", test_other, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
