/* Error reporting for CUDA, cuBLAS(Lt) and NCCL calls, dtype mappings, the
 * host's bounded wait for device work, and the failures COMMGEMM_TEST_FAIL
 * injects (testing only). */
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "gpu/gpu.h"

static const char *base_name(const char *file) {
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

cgm_status cgm_cuda_fail(cudaError_t err, const char *what, const char *file,
                         int line) {
    (void)cudaGetLastError(); /* clear a non-sticky error */
    if (err == cudaErrorMemoryAllocation)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "%s failed at %s:%d: expected free device memory, "
                         "found %s; lower COMMGEMM_MAX_M/MAX_N/MAX_K (the "
                         "workspace is sized from them) or free memory",
                         what, base_name(file), line, cudaGetErrorString(err));
    if (err == cudaErrorNoKernelImageForDevice ||
        err == cudaErrorInvalidDeviceFunction)
        return cgm_error(CGM_ERROR_CUDA,
                         "%s failed at %s:%d: expected commgemm's kernels to "
                         "run on this GPU, found %s (%s): the library holds "
                         "SASS for COMMGEMM_CUDA_ARCHITECTURES (default 90a) "
                         "and compute_80 PTX; rebuild with "
                         "-DCOMMGEMM_CUDA_ARCHITECTURES set to this GPU's "
                         "architecture (sm_80 or newer)",
                         what, base_name(file), line, cudaGetErrorName(err),
                         cudaGetErrorString(err));
    return cgm_error(CGM_ERROR_CUDA,
                     "%s failed at %s:%d: expected cudaSuccess, found %d "
                     "(%s: %s); if the error is sticky (illegal address, "
                     "launch failure) the process's CUDA context is lost: "
                     "destroy the comm",
                     what, base_name(file), line, (int)err,
                     cudaGetErrorName(err), cudaGetErrorString(err));
}

static const char *cublas_status_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

cgm_status cgm_cublas_fail(cublasStatus_t err, const char *what,
                           const char *file, int line) {
    if (err == CUBLAS_STATUS_ALLOC_FAILED)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "%s failed at %s:%d: %s; free device memory", what,
                         base_name(file), line, cublas_status_name(err));
    return cgm_error(CGM_ERROR_CUBLAS,
                     "%s failed at %s:%d: expected CUBLAS_STATUS_SUCCESS, "
                     "found %d (%s); run with CUBLASLT_LOG_LEVEL=5 for "
                     "cuBLASLt's reason",
                     what, base_name(file), line, (int)err,
                     cublas_status_name(err));
}

cgm_status cgm_nccl_fail(ncclResult_t err, const char *what, const char *file,
                         int line) {
    return cgm_error(CGM_ERROR_NCCL,
                     "%s failed at %s:%d: expected ncclSuccess, found %d "
                     "(%s; NCCL's detail: %s); run with NCCL_DEBUG=WARN for "
                     "more",
                     what, base_name(file), line, (int)err,
                     ncclGetErrorString(err), ncclGetLastError(NULL));
}

cudaDataType_t cgm_cuda_dtype(cgm_dtype dtype) {
    switch (dtype) {
    case CGM_DTYPE_BF16: return CUDA_R_16BF;
    case CGM_DTYPE_FP16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

ncclDataType_t cgm_nccl_dtype(cgm_dtype dtype) {
    switch (dtype) {
    case CGM_DTYPE_BF16: return ncclBfloat16;
    case CGM_DTYPE_FP16: return ncclFloat16;
    default: return ncclFloat32;
    }
}

bool cgm_stream_capturing(cudaStream_t stream) {
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return capture != cudaStreamCaptureStatusNone;
}

cgm_status cgm_gpu_wait_done(cudaEvent_t event, cudaStream_t stream,
                             int64_t timeout_ms,
                             cgm_status (*check)(void *ctx), void *ctx,
                             bool *expired) {
    cgm_status status = CGM_SUCCESS;
    int64_t start = cgm_now_ns(), deadline = start + timeout_ms * 1000000;
    *expired = false;
    for (;;) {
        cudaError_t q = event ? cudaEventQuery(event) : cudaStreamQuery(stream);
        if (q == cudaSuccess) return CGM_SUCCESS;
        if (q != cudaErrorNotReady) CGM_CUDA_TRY(q);
        if (check) CGM_TRY(check(ctx));
        int64_t now = cgm_now_ns();
        if (now > deadline) {
            *expired = true;
            return CGM_ERROR_TIMEOUT;
        }
        if (now - start < 100000) sched_yield();
        else usleep(20);
    }
fail:
    return status;
}

cgm_status cgm_test_fault_read(int rank, cgm_test_fault *f) {
    memset(f, 0, sizeof *f);
    const char *v = cgm_param_string("COMMGEMM_TEST_FAIL", NULL);
    if (!v) return CGM_SUCCESS;
    int who = -1, used = 0;
    long long n = 0;
    bool init = false;
    bool ok = sscanf(v, "%d:%lld%n", &who, &n, &used) == 2 && n >= 1;
    if (!ok) {
        used = 0;
        init = true;
        ok = sscanf(v, "%d:init%n", &who, &used) == 1 && used > 0;
    }
    if (!ok || v[used] != '\0' || who < 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "expected COMMGEMM_TEST_FAIL=RANK:N or RANK:init "
                         "(a rank >= 0, an op count >= 1; testing only), "
                         "found \"%s\"; unset it", v);
    if (who != rank) return CGM_SUCCESS;
    f->init = init;
    f->fail_at = init ? 0 : n;
    return CGM_SUCCESS;
}

cgm_status cgm_test_fault_after_fork(cgm_test_fault *f, int rank,
                                     const char *backend) {
    if (++f->forks != f->fail_at) return CGM_SUCCESS;
    return cgm_error(CGM_ERROR_CUDA, "%s: failure injected on rank %d at its "
                     "op %lld, right after the fork (COMMGEMM_TEST_FAIL, "
                     "testing only)", backend, rank, (long long)f->forks);
}
