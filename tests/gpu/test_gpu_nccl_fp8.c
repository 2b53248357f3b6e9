/* GPU tests of the nccl backend's fp8 calls (fp8_cases.c has the cases
 * and their reference). Ranks are forked before any CUDA call
 * (test_gpu_nccl.c); P = the GPU count (NCCL takes one rank per GPU), and
 * P = 1. */
#include <stdlib.h>

#include "fp8_cases.h"
#include "test_gpu_nccl.h"

static void sweep_fn(nrank *g, const void *arg) {
    fp8_rank r = {g->rank, g->nranks, g->comm, g->stream};
    fp8_sweep(&r, *(const cgm_op *)arg, true);
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
        TEST_SKIP("only %d GPU: NCCL takes one rank per GPU, so the multi-rank fp8 cases need 2 "
                  "(P = 1 runs in fp8_*_single)", n);
    case_sweep(p, n > 8 ? 8 : n);
}

static const cgm_op op_ag = CGM_OP_ALL_GATHER_GEMM, op_rs = CGM_OP_GEMM_REDUCE_SCATTER,
                    op_ar = CGM_OP_GEMM_ALL_REDUCE, op_bulk = CGM_OP_BULK;

static void register_cases(void) {
    test_set_timeout(300);
    test_add("fp8_ag_gemm_single", case_single, &op_ag);
    test_add("fp8_gemm_rs_single", case_single, &op_rs);
    test_add("fp8_gemm_ar_single", case_single, &op_ar);
    test_add("fp8_bulk_single", case_single, &op_bulk);
    test_add("fp8_ag_gemm_multi", case_multi, &op_ag);
    test_add("fp8_gemm_rs_multi", case_multi, &op_rs);
    test_add("fp8_gemm_ar_multi", case_multi, &op_ar);
    test_add("fp8_bulk_multi", case_multi, &op_bulk);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
