/* Multi-rank GPU test scaffolding: GPU probe (in a child, so the case's
 * process forks its ranks before any CUDA call), NCCL + commgemm comm per
 * rank, device buffers, fetches and reference helpers. */
#ifndef COMMGEMM_TEST_GPU_COMMON_H
#define COMMGEMM_TEST_GPU_COMMON_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <nccl.h>

#include "gpu_check.h"
#include "gpu_ref.h"
#include "harness.h"

typedef struct gpu_rank {
    int rank, nranks, ndev;
    ncclComm_t nccl;
    cgm_comm *comm;
    cudaStream_t stream;
} gpu_rank;

typedef void (*gpu_case_fn)(gpu_rank *g, void *arg);

#define NCCL_CHECK(call)                                                     \
    do {                                                                     \
        ncclResult_t e_ = (call);                                            \
        if (e_ != ncclSuccess)                                               \
            TEST_FAIL("%s: %s", #call, ncclGetErrorString(e_));              \
    } while (0)

/* GPUs visible (probed in a child process); skips the case when none. */
int gpu_count_or_skip(void);
/* The ranks of a case that runs "one rank per GPU": the GPU count, or
 * COMMGEMM_TEST_RANKS (1..64) when set. More ranks than GPUs share them
 * (rank r on GPU r % count) over a LOCAL bootstrap: p2p only, NCCL refuses
 * ranks that share a GPU; the GPU time-slices between the ranks' processes,
 * so it tests correctness, never speed. Skips the case when no GPU. */
int gpu_ranks_or_skip(void);
/* Whether gpu_run's ranks use a LOCAL bootstrap (no NCCL communicator:
 * gpu_rank.nccl is NULL): when nranks exceeds the GPUs, or
 * COMMGEMM_TEST_BOOTSTRAP=local. */
bool gpu_local_bootstrap(int nranks);
/* A config for the p2p backend with modest maxima and the fp32 GEMM
 * reduction (the references are exact: split-k parts rounded to a 16-bit
 * output before their sum would err by more than the tolerance where they
 * cancel); tests may override. */
cgm_config gpu_config(void);
/* Forks nranks ranks (device rank % ndev), creates NCCL + commgemm comms
 * from `config` (a LOCAL commgemm comm, no NCCL, under
 * gpu_local_bootstrap: then a config for another backend than p2p skips
 * the case), runs fn, destroys them; fails the case if a rank fails. */
void gpu_run(int nranks, const cgm_config *config, gpu_case_fn fn, void *arg,
             int timeout_s);

/* Device matrix of dtype, dense, poisoned (0xff = NaN). */
cgm_matrix gpu_matrix(cgm_dtype dtype, int64_t rows, int64_t cols);
void gpu_matrix_free(cgm_matrix *m);
/* Fill: block of a global matrix of global_cols columns at (row0, col0). */
void gpu_fill(const cgm_matrix *m, uint64_t seed, int64_t row0, int64_t col0,
              int64_t global_cols, cudaStream_t stream);
/* Copies a device matrix to a new host matrix (test_free it). */
cgm_matrix gpu_fetch(const cgm_matrix *m, cudaStream_t stream);
/* Device double buffer -> new host array (free it). */
double *gpu_fetch_doubles(const double *dev, size_t count,
                          cudaStream_t stream);
/* Value of dtype's rounding of test_value (fills are exact). */
double gpu_value(uint64_t seed, int64_t index);
/* Compares y (device, rows x n) with host ref; fails on mismatch. */
void gpu_expect(const cgm_matrix *y, const double *ref, int64_t rows,
                int64_t n, double tol, cudaStream_t stream, const char *what);

/* The cases of test_gpu_more.c (large, graph, timeout, limits). */
void register_more_cases(void);

#endif
