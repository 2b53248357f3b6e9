/* Shared pieces of the nccl backend's GPU tests (test_gpu_nccl.c,
 * test_gpu_nccl_cases.c). */
#ifndef COMMGEMM_TEST_GPU_NCCL_H
#define COMMGEMM_TEST_GPU_NCCL_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "harness.h"

#define GCHECK(call)                                                         \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess)                                               \
            TEST_FAIL("%s: %s", #call, cudaGetErrorString(e_));              \
    } while (0)
#define NCHECK(call)                                                         \
    do {                                                                     \
        ncclResult_t e_ = (call);                                            \
        if (e_ != ncclSuccess)                                               \
            TEST_FAIL("%s: %s", #call, ncclGetErrorString(e_));              \
    } while (0)

/* One forked rank: its NCCL comm, the commgemm comm made from it, a
 * stream. */
typedef struct nrank {
    int rank, nranks;
    ncclComm_t nccl;
    cgm_comm *comm;
    cudaStream_t stream;
} nrank;

typedef void (*nrank_fn)(nrank *g, const void *arg);

/* GPUs visible, probed in a child (skips the case when none). */
int nt_gpu_count(void);
/* nccl backend for every op, modest maxima (4096 x 512 x 512). */
cgm_config nt_config(void);
/* Forks P ranks (device rank % GPUs), NCCL + commgemm comms, runs fn,
 * destroys them. A rank that skips makes the case skip. */
void nt_run(int P, const cgm_config *config, nrank_fn fn, const void *arg,
            int timeout_s);

/* Device copy of a block of host matrix h (ld = cols + pad). */
cgm_matrix nt_upload(const cgm_matrix *h, int64_t r0, int64_t rows,
                     int64_t c0, int64_t cols, int64_t pad);
cgm_matrix nt_fetch(const cgm_matrix *d);
/* Host matrix filled by test_fill(seed). */
cgm_matrix nt_host(cgm_dtype dt, int64_t rows, int64_t cols, uint64_t seed);
/* Fails the case when device matrix d differs from ref beyond tol. */
void nt_expect(const cgm_matrix *d, const double *ref, double tol,
               const char *what);

/* One op call, checked on every rank against the host reference. */
typedef struct op_case {
    cgm_op op;
    cgm_collective coll; /* bulk */
    cgm_dtype in, out;
    cgm_layout layout;
    int64_t m, n, k;
    bool bias, accumulate, gathered;
    int64_t pad; /* ld padding of outputs */
    cgm_algo algo;
    int splits;
    cgm_backend backend; /* per call; DEFAULT = the comm's */
} op_case;
void nt_run_case(nrank *g, const op_case *c);

typedef struct sweep {
    cgm_op op; /* CGM_OP_COUNT_: every op */
    int small; /* fewer shapes (P = 1 runs every op) */
} sweep;
/* arg: a sweep. */
void nt_sweep_fn(nrank *g, const void *arg);
/* Every algorithm x op x layout, splits 1 and 5. */
void nt_algos_fn(nrank *g, const void *arg);

#endif
