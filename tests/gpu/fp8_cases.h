/* The fp8 cases of the GPU backends' tests (fp8_cases.c): one op's sweep
 * over recipes, dtypes, shapes and algorithms on one rank, checked against
 * a double reference computed on the host from the codes and scales. */
#ifndef COMMGEMM_TEST_GPU_FP8_CASES_H
#define COMMGEMM_TEST_GPU_FP8_CASES_H

#include <stdbool.h>

#include <cuda_runtime_api.h>

#include "harness.h"

typedef struct fp8_rank {
    int rank, nranks;
    cgm_comm *comm;
    cudaStream_t stream;
} fp8_rank;

/* One call: `op` with X, W and Y of dtypes xd, wd, yd (an fp8 Y: y.scale
 * 2), block scaling (X 1x128, W 128x128) or per-tensor scales, a bf16
 * bias, layout TN, fp32 partials; m x n x k with k this rank's (GEMM+RS,
 * GEMM+AR) and n this rank's (AG+GEMM, which also passes x_gathered). */
typedef struct fp8_case {
    cgm_op op;
    cgm_dtype xd, wd, yd;
    bool block, bias;
    int64_t m, n, k;
    cgm_algo algo;
    bool fast_accum; /* options.fp8_fast_accum (Y's bound allows for it) */
} fp8_case;

/* Skips the case (with the reason) unless this rank's GPU is a Hopper
 * (compute capability 9.x) and cuBLAS is 12.9+: the sweeps use FP8 tensor
 * cores and cuBLASLt's block scaling. */
void fp8_need_hopper(void);
/* Every recipe (TENSOR, BLOCK) x dtypes (e4m3 x e4m3 -> bf16, e4m3 x e5m2
 * -> fp32 with a bf16 bias, e4m3 and e5m2 outputs with y.scale 2 and their
 * amax) x shape (64x64x256; m = 37, n = 40, k = 200; m = 1) x algorithm
 * (split, ring, no_overlap; bulk: auto) of `op` on this rank. ar_amax:
 * GEMM+AR's fp8 outputs ask for the amax too. */
void fp8_sweep(const fp8_rank *g, cgm_op op, bool ar_amax);
/* One case of the sweep on this rank, checked against the host reference
 * (Y; with amax_ok and an fp8 Y, also the amax); fails the test on any
 * status but CGM_SUCCESS. */
void fp8_run_case(const fp8_rank *g, const fp8_case *c, bool amax_ok);

#endif
