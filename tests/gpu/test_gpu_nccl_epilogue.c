/* GPU tests of the nccl backend's epilogues (epi_cases.c has the cases
 * and their reference) and its refusals (a bias with BGRAD, an aux
 * cuBLASLt cannot take). Ranks are forked before any CUDA call
 * (test_gpu_nccl.c); P = the GPU count (NCCL takes one rank per GPU), and
 * P = 1. */
#include <stdlib.h>

#include "core/core.h"
#include "epi_cases.h"
#include "test_gpu_nccl.h"

static void sweep_fn(nrank *g, const void *arg) {
    epi_rank r = {g->rank, g->nranks, g->comm, g->stream};
    epi_sweep(&r, *(const cgm_op *)arg, false);
}

static void case_sweep(const void *p, int P) {
    cgm_config cfg = nt_config();
    cfg.splits = 2;
    setenv("COMMGEMM_LT_SEARCH", "1", 1); /* read by the forked ranks */
    nt_run(P, &cfg, sweep_fn, p, 280);
}

static void case_single(const void *p) {
    nt_gpu_count();
    case_sweep(p, 1);
}

static void case_multi(const void *p) {
    int n = nt_gpu_count();
    if (n < 2)
        TEST_SKIP("only %d GPU: NCCL takes one rank per GPU, so the multi-rank epilogue cases need 2 "
                  "(P = 1 runs in epi_*_single)", n);
    case_sweep(p, n > 8 ? 8 : n);
}

/* Valid calls the nccl backend refuses, each saying what to do; the comm
 * stays usable. */
static void refusals_fn(nrank *g, const void *arg) {
    (void)arg;
    const int64_t m = 8, n = 16, k = 16;
    cgm_matrix a = epi_input(CGM_DTYPE_BF16, k, m, m, 1), b = epi_input(CGM_DTYPE_BF16, k, n, n, 2);
    cgm_matrix y = epi_input(CGM_DTYPE_BF16, m, n, n, 0), bias = epi_input(CGM_DTYPE_BF16, 1, n, n, 3);
    cgm_matrix bg = epi_input(CGM_DTYPE_BF16, 1, m, m, 0);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.layout = CGM_LAYOUT_NT;
    o.epilogue = CGM_EPILOGUE_BGRAD;
    o.bgrad = &bg;
    CHECK_STATUS(cgm_bulk_overlap(g->comm, &a, &b, &bias, &y, CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o, g->stream),
                 CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "pass no bias and add it after the op");
    CHECK_OK(cgm_bulk_overlap(g->comm, &a, &b, NULL, &y, CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o, g->stream));
    /* aux with ld 12 (not a multiple of 8) on AG+GEMM's cuBLASLt GEMMs */
    cgm_matrix x = epi_input(CGM_DTYPE_BF16, cgm_shard_rows(m, g->rank, g->nranks), k, k, 1);
    cgm_matrix w = epi_input(CGM_DTYPE_BF16, 12, k, k, 2);
    cgm_matrix y12 = epi_input(CGM_DTYPE_BF16, m, 12, 12, 0), aux = epi_input(CGM_DTYPE_BF16, m, 12, 12, 0);
    cgm_op_options oa = CGM_OP_OPTIONS_INIT;
    oa.epilogue = CGM_EPILOGUE_GELU_AUX;
    oa.aux = &aux;
    CHECK_STATUS(cgm_all_gather_gemm(g->comm, &x, &w, NULL, &y12, NULL, &oa, g->stream), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "cuBLASLt wants aux's leading dimension a multiple of 8");
    oa.epilogue = CGM_EPILOGUE_GELU;
    oa.aux = NULL;
    CHECK_OK(cgm_all_gather_gemm(g->comm, &x, &w, NULL, &y12, NULL, &oa, g->stream));
    GCHECK(cudaStreamSynchronize(g->stream));
    cgm_matrix *all[] = {&a, &b, &y, &bias, &bg, &x, &w, &y12, &aux};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) cudaFree(all[i]->data);
}

static void case_refusals(const void *p) {
    (void)p;
    int n = nt_gpu_count();
    cgm_config cfg = nt_config();
    nt_run(n > 8 ? 8 : n, &cfg, refusals_fn, NULL, 120);
}

static const cgm_op op_ag = CGM_OP_ALL_GATHER_GEMM, op_rs = CGM_OP_GEMM_REDUCE_SCATTER,
                    op_ar = CGM_OP_GEMM_ALL_REDUCE, op_bulk = CGM_OP_BULK;

static void register_cases(void) {
    test_set_timeout(300);
    test_add("epi_ag_gemm_single", case_single, &op_ag);
    test_add("epi_gemm_rs_single", case_single, &op_rs);
    test_add("epi_gemm_ar_single", case_single, &op_ar);
    test_add("epi_bulk_single", case_single, &op_bulk);
    test_add("epi_ag_gemm_multi", case_multi, &op_ag);
    test_add("epi_gemm_rs_multi", case_multi, &op_rs);
    test_add("epi_gemm_ar_multi", case_multi, &op_ar);
    test_add("epi_bulk_multi", case_multi, &op_bulk);
    test_set_timeout(120);
    test_add("epi_refusals", case_refusals, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
