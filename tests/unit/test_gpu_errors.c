/* The messages of failed CUDA calls (gpu/gpu_errors.c): pure
 * formatting, so they run without a GPU (built where the CUDA toolkit is). */
#include "harness.h"

#include "gpu/gpu.h"

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

/* The probe's message without a usable GPU (src/core/gpu_absent.c takes the
 * runtime's numbers as ints): the CUDA headers' values reach its cases. */
static void test_gpu_absent_codes(const void *p) {
    (void)p;
    CHECK_STATUS(cgm_gpu_absent_error("p2p", cudaErrorInsufficientDriver,
                                      cudaGetErrorName(cudaErrorInsufficientDriver), 0, CUDART_VERSION),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "found no NVIDIA driver (libcuda.so.1");
    CHECK_STATUS(cgm_gpu_absent_error("p2p", cudaErrorStubLibrary, "stub", 0, CUDART_VERSION),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "the CUDA toolkit's stub");
    CHECK_STATUS(cgm_gpu_absent_error("p2p", cudaErrorNoDevice, "none", 12080, CUDART_VERSION),
                 CGM_ERROR_UNAVAILABLE);
    CHECK_CONTAINS(cgm_last_error(), "that sees none (none)");
}

/* COMMGEMM_TEST_FAIL (testing only): parameters are read once per
 * process, and every case runs in a process of its own, so each sets its
 * value first. */
static void test_fault_op(const void *p) {
    (void)p;
    setenv("COMMGEMM_TEST_FAIL", "1:3", 1);
    cgm_test_fault other, mine;
    CHECK_OK(cgm_test_fault_read(0, &other));
    CHECK_OK(cgm_test_fault_read(1, &mine));
    CHECK(!mine.init && mine.fail_at == 3);
    for (int op = 1; op <= 5; op++) {
        CHECK_OK(cgm_test_fault_after_fork(&other, 0, "p2p"));
        cgm_status st = cgm_test_fault_after_fork(&mine, 1, "nccl backend");
        if (op != 3) {
            CHECK_OK(st);
            continue;
        }
        CHECK_INT_EQ(st, CGM_ERROR_CUDA);
        CHECK_CONTAINS(cgm_last_error(), "nccl backend: failure injected on rank 1 at its op 3");
    }
}

static void test_fault_init(const void *p) {
    (void)p;
    setenv("COMMGEMM_TEST_FAIL", "2:init", 1);
    cgm_test_fault f;
    CHECK_OK(cgm_test_fault_read(2, &f));
    CHECK(f.init && f.fail_at == 0);
    CHECK_OK(cgm_test_fault_read(1, &f));
    CHECK(!f.init && f.fail_at == 0);
}

static void test_fault_unset(const void *p) {
    (void)p;
    unsetenv("COMMGEMM_TEST_FAIL");
    cgm_test_fault f;
    CHECK_OK(cgm_test_fault_read(0, &f));
    for (int op = 1; op <= 3; op++) CHECK_OK(cgm_test_fault_after_fork(&f, 0, "p2p"));
}

static void test_fault_malformed(const void *p) {
    const char *value = p;
    setenv("COMMGEMM_TEST_FAIL", value, 1);
    cgm_test_fault f;
    CHECK_STATUS(cgm_test_fault_read(0, &f), CGM_ERROR_INVALID_ARGUMENT);
    CHECK_CONTAINS(cgm_last_error(), "expected COMMGEMM_TEST_FAIL=RANK:N or RANK:init");
    CHECK_CONTAINS(cgm_last_error(), value);
}

static void register_cases(void) {
    test_add("out_of_memory", test_out_of_memory, NULL);
    test_add("no_kernel_image", test_no_kernel_image, NULL);
    test_add("other", test_other, NULL);
    test_add("gpu_absent_codes", test_gpu_absent_codes, NULL);
    test_add("test_fault_op", test_fault_op, NULL);
    test_add("test_fault_init", test_fault_init, NULL);
    test_add("test_fault_unset", test_fault_unset, NULL);
    static const char *const bad[] = {"0:first", "-1:2", "0:0", "0:2x", "x", "1:initx"};
    static const char *const names[] = {"test_fault_word", "test_fault_negative_rank",
                                        "test_fault_op_zero", "test_fault_trailing",
                                        "test_fault_no_colon", "test_fault_init_trailing"};
    for (int i = 0; i < 6; i++) test_add(names[i], test_fault_malformed, bad[i]);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
