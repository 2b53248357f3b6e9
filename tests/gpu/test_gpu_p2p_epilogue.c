/* GPU tests of the p2p backend's epilogues (epi_cases.c has the cases and
 * their reference): AG+GEMM (split, ring, no_overlap), GEMM+RS (but
 * DGELU_BGRAD) and bulk's GEMM on P ranks, every op on one rank; the fused
 * algorithm's AG+GEMM (every epilogue) and GEMM+RS (GELU, GELU_AUX, DGELU:
 * after the reduction) on P ranks, bf16 and fp16 (its kernel's inputs; an
 * sm_90 GPU runs its own kernel, others the same schedule around
 * cuBLASLt); and the refusals: GEMM+AR and GEMM+RS's DGELU_BGRAD on P > 1
 * (each points at what runs them), fused included. P = the GPU count, or
 * COMMGEMM_TEST_RANKS (more ranks than GPUs share them over a LOCAL
 * bootstrap), and P = 1. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "epi_cases.h"
#include "test_gpu_common.h"

static void sweep_fn(gpu_rank *g, void *arg) {
    epi_rank r = {g->rank, g->nranks, g->comm, g->stream};
    const cgm_op op = *(const cgm_op *)arg;
    /* GEMM+RS's DGELU_BGRAD on P > 1 is refused (epi_refusals) */
    epi_sweep(&r, op, op == CGM_OP_GEMM_REDUCE_SCATTER && g->nranks > 1);
}

static void fused_fn(gpu_rank *g, void *arg) {
    epi_rank r = {g->rank, g->nranks, g->comm, g->stream};
    const cgm_op op = *(const cgm_op *)arg;
    epi_sweep_fused(&r, op, op == CGM_OP_GEMM_REDUCE_SCATTER);
}

static void run_with(const void *p, int P, void (*fn)(gpu_rank *, void *)) {
    cgm_config cfg = gpu_config();
    cfg.splits = 2;
    setenv("COMMGEMM_LT_SEARCH", "1", 1); /* read by the forked ranks */
    gpu_run(P, &cfg, fn, (void *)p, 280);
}

static void run_sweep(const void *p, int P) { run_with(p, P, sweep_fn); }

/* The fused algorithm with each epilogue on P > 1 ranks. */
static void case_fused(const void *p) {
    int P = gpu_ranks_or_skip();
    if (P < 2)
        TEST_SKIP("1 rank: set COMMGEMM_TEST_RANKS=2 (or more) to run the fused epilogue cases on one GPU "
                  "(fused needs P > 1)");
    run_with(p, P > 8 ? 8 : P, fused_fn);
}

static void case_multi(const void *p) {
    int P = gpu_ranks_or_skip();
    if (P < 2)
        TEST_SKIP("1 rank: set COMMGEMM_TEST_RANKS=2 (or more) to run the multi-rank epilogue cases on "
                  "one GPU (P = 1 runs in epi_*_p1)");
    run_sweep(p, P > 8 ? 8 : P);
}

static void case_single(const void *p) {
    gpu_count_or_skip();
    run_sweep(p, 1);
}

static void refusals_fn(gpu_rank *g, void *arg) {
    (void)arg;
    const int64_t m = 32, n = 16, k = 16;
    const cgm_dtype dt = CGM_DTYPE_BF16;
    cgm_matrix xs = epi_input(dt, cgm_shard_rows(m, g->rank, g->nranks), k, k, 1);
    cgm_matrix x = epi_input(dt, m, k, k, 1), w = epi_input(dt, n, k, k, 2);
    cgm_matrix y = epi_input(dt, m, n, n, 0);
    cgm_matrix ys = epi_input(dt, cgm_shard_rows(m, g->rank, g->nranks), n, n, 0);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.epilogue = CGM_EPILOGUE_GELU;
    o.algo = CGM_ALGO_FUSED; /* fused runs epilogues */
    CHECK_OK(cgm_all_gather_gemm(g->comm, &xs, &w, NULL, &y, NULL, &o, g->stream));
    o.algo = CGM_ALGO_SPLIT_PIPELINED;
    CHECK_STATUS(cgm_gemm_all_reduce(g->comm, &x, &w, NULL, &y, &o, g->stream), CGM_ERROR_NOT_SUPPORTED);
    CHECK_CONTAINS(cgm_last_error(), "run this call on the nccl backend");
    cgm_matrix aux = epi_input(dt, ys.rows, n, n, 4), bg = epi_input(dt, 1, n, n, 0);
    o.epilogue = CGM_EPILOGUE_DGELU_BGRAD;
    o.aux = &aux;
    o.bgrad = &bg;
    for (int f = 0; f < 2; f++) { /* split and fused alike */
        o.algo = f ? CGM_ALGO_FUSED : CGM_ALGO_SPLIT_PIPELINED;
        CHECK_STATUS(cgm_gemm_reduce_scatter(g->comm, &x, &w, NULL, &ys, &o, g->stream), CGM_ERROR_NOT_SUPPORTED);
        CHECK_CONTAINS(cgm_last_error(), "run this call on the nccl backend");
    }
    o.epilogue = CGM_EPILOGUE_DGELU; /* GEMM+RS's DGELU runs */
    o.bgrad = NULL;
    CHECK_OK(cgm_gemm_reduce_scatter(g->comm, &x, &w, NULL, &ys, &o, g->stream));
    o.aux = NULL;
    o.epilogue = CGM_EPILOGUE_GELU;
    /* The comm stays usable. */
    o.algo = CGM_ALGO_AUTO;
    CHECK_OK(cgm_all_gather_gemm(g->comm, &xs, &w, NULL, &y, NULL, &o, g->stream));
    o.epilogue = CGM_EPILOGUE_NONE;
    CHECK_OK(cgm_gemm_reduce_scatter(g->comm, &x, &w, NULL, &ys, &o, g->stream));
    GPU_CHECK(cudaStreamSynchronize(g->stream));
    cudaFree(xs.data), cudaFree(x.data), cudaFree(w.data), cudaFree(y.data), cudaFree(ys.data);
    cudaFree(aux.data), cudaFree(bg.data);
}

static void case_refusals(const void *p) {
    (void)p;
    int P = gpu_ranks_or_skip();
    if (P < 2) TEST_SKIP("1 rank: set COMMGEMM_TEST_RANKS=2 (or more): the refusals are of P > 1");
    cgm_config cfg = gpu_config();
    gpu_run(P > 8 ? 8 : P, &cfg, refusals_fn, NULL, 120);
}

static const cgm_op op_ag = CGM_OP_ALL_GATHER_GEMM, op_rs = CGM_OP_GEMM_REDUCE_SCATTER,
                    op_ar = CGM_OP_GEMM_ALL_REDUCE, op_bulk = CGM_OP_BULK;

static void register_cases(void) {
    test_set_timeout(300);
    test_add("epi_ag_gemm_p1", case_single, &op_ag);
    test_add("epi_gemm_rs_p1", case_single, &op_rs);
    test_add("epi_gemm_ar_p1", case_single, &op_ar);
    test_add("epi_bulk_p1", case_single, &op_bulk);
    test_add("epi_ag_gemm_multi", case_multi, &op_ag);
    test_add("epi_gemm_rs_multi", case_multi, &op_rs);
    test_add("epi_bulk_multi", case_multi, &op_bulk);
    test_add("epi_fused_ag_gemm", case_fused, &op_ag);
    test_add("epi_fused_gemm_rs", case_fused, &op_rs);
    test_set_timeout(120);
    test_add("epi_refusals", case_refusals, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
