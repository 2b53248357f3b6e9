/* Device helpers of the GPU tests (gpu_ref.cu): deterministic fills that
 * match test_value(), a plain reference GEMM in double, exact compares. */
#ifndef COMMGEMM_TEST_GPU_REF_H
#define COMMGEMM_TEST_GPU_REF_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills rows x cols (row-major, ld) of dtype (cgm_dtype) with
 * test_value(seed, (row0 + i) * global_cols + (col0 + j)): the block of a
 * global matrix of global_cols columns that starts at (row0, col0). */
cudaError_t tref_fill(void *p, int dtype, int64_t rows, int64_t cols,
                      int64_t ld, uint64_t seed, int64_t row0, int64_t col0,
                      int64_t global_cols, cudaStream_t stream);

/* out[i * n + j] (+)= sum_l opX(i, l) * opW(l, j) in double, for the
 * layouts of commgemm.h (x [m,k] or [k,m] for NT; w [n,k] for TN, else
 * [k,n]); dense operands (ld = cols). */
cudaError_t tref_gemm(int layout, int dtype, const void *x, const void *w,
                      int64_t m, int64_t n, int64_t k, double *out,
                      int accumulate, cudaStream_t stream);

/* Number of differing bytes between two device buffers (synchronous). */
cudaError_t tref_count_mismatch(const void *a, const void *b, size_t bytes,
                                unsigned long long *count,
                                cudaStream_t stream);

/* Holds `stream`: one thread spins until *release (host-mapped memory the
 * test sets) is nonzero, or max_ns have passed, whichever comes first. */
cudaError_t tref_hold(const volatile int *release, unsigned long long max_ns,
                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
