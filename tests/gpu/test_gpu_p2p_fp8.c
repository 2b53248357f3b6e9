/* GPU tests of the p2p backend's fp8 calls through its chunked algorithms
 * and the fused one (per-tensor scales; fp8_cases.c has the cases and their
 * reference), and its refusals: algorithm fused with what its kernel does
 * not take (fp8 Y, block scaling, fp8_fast_accum 0), GEMM+AR's amax. P = the GPU count, or
 * COMMGEMM_TEST_RANKS (more ranks than GPUs share them over a LOCAL
 * bootstrap), and P = 1. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "fp8_cases.h"
#include "test_gpu_common.h"

static void sweep_fn(gpu_rank *g, void *arg) {
    fp8_rank r = {g->rank, g->nranks, g->comm, g->stream};
    /* GEMM+AR's amax is refused here (fp8_refusals). */
    fp8_sweep(&r, *(const cgm_op *)arg, false);
}

static void fused_fn(gpu_rank *g, void *arg) {
    fp8_rank r = {g->rank, g->nranks, g->comm, g->stream};
    fp8_fused_sweep(&r, *(const cgm_op *)arg);
}

/* The fused algorithm needs 2 ranks or more (one has nothing to overlap). */
static void case_fused(const void *p) {
    int P = gpu_ranks_or_skip();
    if (P < 2)
        TEST_SKIP("1 rank: set COMMGEMM_TEST_RANKS=2 (or more) to run the fused fp8 cases on one GPU");
    cgm_config cfg = gpu_config();
    cfg.splits = 2;
    gpu_run(P > 8 ? 8 : P, &cfg, fused_fn, (void *)p, 280);
}

static void run_sweep(const void *p, int P) {
    cgm_config cfg = gpu_config();
    cfg.splits = 2;
    setenv("COMMGEMM_LT_SEARCH", "1", 1); /* read by the forked ranks */
    gpu_run(P, &cfg, sweep_fn, (void *)p, 280);
}

static void case_multi(const void *p) {
    int P = gpu_ranks_or_skip();
    if (P < 2)
        TEST_SKIP("1 rank: set COMMGEMM_TEST_RANKS=2 (or more) to run the multi-rank fp8 cases on "
                  "one GPU (P = 1 runs in fp8_*_p1)");
    run_sweep(p, P > 8 ? 8 : P);
}

static void case_single(const void *p) {
    gpu_count_or_skip();
    run_sweep(p, 1);
}

/* A valid fp8 AG+GEMM or GEMM+AR that the backend refuses. */
static void refusals_fn(gpu_rank *g, void *arg) {
    (void)arg;
    fp8_need_hopper();
    const int64_t m = 8, n = 16, k = 32;
    const int64_t mr = cgm_shard_rows(m, g->rank, g->nranks);
    void *xd = NULL, *wd = NULL, *yd = NULL, *yfd = NULL;
    float *sc = NULL;
    GPU_CHECK(cudaMalloc(&xd, (size_t)(m * k)));
    GPU_CHECK(cudaMalloc(&wd, (size_t)(n * k)));
    GPU_CHECK(cudaMalloc(&yd, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc(&yfd, (size_t)(m * n)));
    GPU_CHECK(cudaMalloc((void **)&sc, 4 * sizeof(float)));
    GPU_CHECK(cudaMemset(xd, 0, (size_t)(m * k)));
    GPU_CHECK(cudaMemset(wd, 0, (size_t)(n * k)));
    GPU_CHECK(cudaMemset(sc, 0, 4 * sizeof(float)));
    cgm_matrix xs = cgm_matrix_make(xd, CGM_DTYPE_FP8_E4M3, mr, k);
    cgm_matrix x = cgm_matrix_make(xd, CGM_DTYPE_FP8_E4M3, m, k);
    cgm_matrix w = cgm_matrix_make(wd, CGM_DTYPE_FP8_E4M3, n, k);
    cgm_matrix y = cgm_matrix_make(yd, CGM_DTYPE_BF16, m, n);
    cgm_matrix yf = cgm_matrix_make(yfd, CGM_DTYPE_FP8_E4M3, m, n);
    cgm_matrix yfs = cgm_matrix_make(yfd, CGM_DTYPE_FP8_E4M3, mr, n); /* GEMM+RS's shard */
    xs.scale = x.scale = w.scale = yf.scale = yfs.scale = sc;
    xs.scaling = x.scaling = w.scaling = yf.scaling = yfs.scaling = CGM_SCALING_TENSOR;
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.algo = CGM_ALGO_FUSED;
    CHECK_STATUS(cgm_all_gather_gemm(g->comm, &xs, &w, NULL, &y, NULL, &o, g->stream),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "pass fp8_fast_accum = 1");
    CHECK_CONTAINS(cgm_last_error(), "runs on split, ring and no_overlap");
    o.fp8_fast_accum = 1;
    CHECK_STATUS(cgm_gemm_reduce_scatter(g->comm, &x, &w, NULL, &yfs, &o, g->stream), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "not an fp8 Y");
    o.fp8_fast_accum = 0;
    o.algo = CGM_ALGO_SPLIT_PIPELINED;
    o.y_amax = sc + 1;
    CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &yf, &o, g->stream), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "run this call on the nccl backend");
    /* The comm stays usable: the same calls without what was refused. */
    o.y_amax = NULL;
    CHECK_OK(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &yf, &o, g->stream));
    CHECK_OK(cgm_all_gather_gemm(g->comm, &xs, &w, NULL, &y, NULL, &o, g->stream));
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    cudaFree(xd), cudaFree(wd), cudaFree(yd), cudaFree(yfd), cudaFree(sc);
}

static void case_refusals(const void *p) {
    (void)p;
    int P = gpu_ranks_or_skip();
    cgm_config cfg = gpu_config();
    gpu_run(P > 8 ? 8 : P, &cfg, refusals_fn, NULL, 120);
}

static const cgm_op op_ag = CGM_OP_ALL_GATHER_GEMM, op_rs = CGM_OP_GEMM_REDUCE_SCATTER,
                    op_ar = CGM_OP_GEMM_ALL_REDUCE, op_bulk = CGM_OP_BULK;

static void register_cases(void) {
    test_set_timeout(300);
    test_add("fp8_ag_gemm_p1", case_single, &op_ag);
    test_add("fp8_gemm_rs_p1", case_single, &op_rs);
    test_add("fp8_gemm_ar_p1", case_single, &op_ar);
    test_add("fp8_bulk_p1", case_single, &op_bulk);
    test_add("fp8_ag_gemm_multi", case_multi, &op_ag);
    test_add("fp8_gemm_rs_multi", case_multi, &op_rs);
    test_add("fp8_gemm_ar_multi", case_multi, &op_ar);
    test_add("fp8_bulk_multi", case_multi, &op_bulk);
    test_add("fp8_ag_gemm_fused", case_fused, &op_ag);
    test_add("fp8_gemm_rs_fused", case_fused, &op_rs);
    test_set_timeout(120);
    test_add("fp8_refusals", case_refusals, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
