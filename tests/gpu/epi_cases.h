/* The epilogue cases of the GPU backends' tests (epi_cases.c): one op's
 * sweep over epilogues, dtypes, biases, shapes and algorithms on one rank,
 * checked against a double reference computed on the host. */
#ifndef COMMGEMM_TEST_GPU_EPI_CASES_H
#define COMMGEMM_TEST_GPU_EPI_CASES_H

#include <cuda_runtime_api.h>

#include "harness.h"

typedef struct epi_rank {
    int rank, nranks;
    cgm_comm *comm;
    cudaStream_t stream;
} epi_rank;

/* One call: `op` with epilogue `epi` on m x n x k (AG+GEMM: n of this
 * rank's W; GEMM+RS/AR: k of this rank's X), Y, aux and bias of dtype dt,
 * aux's ld = n, layout TN (bulk's BGRAD: NT). */
typedef struct epi_case {
    cgm_op op;
    cgm_epilogue epi;
    cgm_dtype dt;
    bool bias;
    int64_t m, n, k;
    cgm_algo algo;
} epi_case;

/* Every epilogue (none, gelu, gelu_aux, dgelu, dgelu_bgrad; bulk: also
 * bgrad with layout NT) x bf16/fp16/fp32 x bias (where the epilogue takes
 * one) x shape (m = 16 P, n = 48, k = 40; m = 37, n = 24, k = 24; m =
 * P - 1 < P) x algorithm (split, ring, no_overlap; bulk: auto) of `op` on
 * this rank, each checked (Y, GELU_AUX's aux, the bias gradient).
 * skip_bgrad: not DGELU_BGRAD (a backend that refuses it for `op`). */
void epi_sweep(const epi_rank *g, cgm_op op, bool skip_bgrad);
/* One case of the sweep on this rank, checked (Y, aux, bgrad); fails the
 * test on any status but CGM_SUCCESS. */
void epi_run_case(const epi_rank *g, const epi_case *c);
/* The same sweep with algorithm fused (p2p), bf16 and fp16 (the kernel's
 * inputs). */
void epi_sweep_fused(const epi_rank *g, cgm_op op, bool skip_bgrad);

/* Device matrix [rows, cols] with leading dimension ld, element (i, j) =
 * in-range test values (multiples of 1/16 in [-1/2, 1/2]) of (seed,
 * row0 + i, j); for the refusal cases. */
cgm_matrix epi_input(cgm_dtype dt, int64_t rows, int64_t cols, int64_t ld, uint64_t seed);

#endif
