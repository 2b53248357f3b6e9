/* Timing of the p2p backend on all GPUs of the machine: AG+GEMM and
 * GEMM+RS (bf16) against the unsplit cuBLASLt GEMM alone and the NCCL
 * collective alone, measured in alternating rounds with CUDA events;
 * medians of 20 iterations after 5 warm-ups. Not a test (not in ctest):
 *   p2p_timing timing      (prints one line per op and shape, rank 0) */
#include "backend/gpu/gpu.h"
#include "core/core.h"
#include "gpu_tools.h"
#include "test_gpu_common.h"

#define WARM 5
#define ITERS 20

static void timing_body(gpu_rank *g, void *arg) {
    (void)arg;
    static const int64_t shapes[][3] = {
        {16384, 8192, 2048}, {8192, 4096, 4096}, {16384, 2048, 8192}};
    int r = g->rank, P = g->nranks;
    cudaStream_t st = g->stream;
    cudaEvent_t e0, e1;
    GPU_CHECK(cudaEventCreate(&e0));
    GPU_CHECK(cudaEventCreate(&e1));
    cgm_lt *lt = NULL;
    void *ws = NULL;
    CHECK_OK(cgm_lt_create(&lt));
    GPU_CHECK(cudaMalloc(&ws, 32u << 20));
    if (r == 0)
        printf("# p2p timing, %d ranks, bf16, medians of %d (ms); ideal = "
               "max(gemm, nccl)\n# %-8s %6s %6s %6s %9s %9s %9s %7s %8s\n",
               P, ITERS, "op", "m", "k", "n", "op_ms", "gemm_ms", "nccl_ms",
               "ratio", "TFLOP/s");
    for (int s = 0; s < 3; s++)
        for (int op = 0; op < 2; op++) {
            int64_t m = shapes[s][0], k = shapes[s][1], n = shapes[s][2];
            int64_t m_r = cgm_shard_rows(m, r, P);
            cgm_dtype dt = CGM_DTYPE_BF16;
            cgm_matrix xs = gpu_matrix(dt, op == 0 ? m_r : m, k);
            cgm_matrix xfull = gpu_matrix(dt, m, k);
            cgm_matrix w = gpu_matrix(dt, n, k);
            cgm_matrix y = gpu_matrix(dt, op == 0 ? m : m_r, n);
            cgm_matrix yfull = gpu_matrix(dt, m, n);
            gpu_fill(&xs, 1, 0, 0, k, st);
            gpu_fill(&xfull, 1, 0, 0, k, st);
            gpu_fill(&w, 2, 0, 0, k, st);
            cgm_lt_gemm_args a;
            memset(&a, 0, sizeof a);
            a.layout = CGM_LAYOUT_TN;
            a.in_dtype = a.out_dtype = dt;
            a.m = m;
            a.n = n;
            a.k = k;
            a.x = xfull.data;
            a.ldx = k;
            a.w = w.data;
            a.ldw = k;
            a.y = yfull.data;
            a.ldy = n;
            float t[3][WARM + ITERS];
            for (int it = 0; it < WARM + ITERS; it++)
                for (int which = 0; which < 3; which++) {
                    GPU_CHECK(cudaEventRecord(e0, st));
                    if (which == 0) {
                        if (op == 0)
                            CHECK_OK(cgm_all_gather_gemm(g->comm, &xs, &w,
                                                         NULL, &y, NULL, NULL,
                                                         st));
                        else
                            CHECK_OK(cgm_gemm_reduce_scatter(
                                g->comm, &xs, &w, NULL, &y, NULL, st));
                    } else if (which == 1) {
                        CHECK_OK(cgm_lt_gemm(lt, &a, ws, 32u << 20, st));
                    } else if (op == 0) {
                        NCCL_CHECK(ncclAllGather(xs.data, xfull.data,
                                                 (size_t)(m_r * k),
                                                 ncclBfloat16, g->nccl, st));
                    } else {
                        NCCL_CHECK(ncclReduceScatter(yfull.data, y.data,
                                                     (size_t)(m_r * n),
                                                     ncclBfloat16, ncclSum,
                                                     g->nccl, st));
                    }
                    GPU_CHECK(cudaEventRecord(e1, st));
                    GPU_CHECK(cudaEventSynchronize(e1));
                    GPU_CHECK(cudaEventElapsedTime(&t[which][it], e0, e1));
                }
            float op_ms = tool_median(t[0] + WARM, ITERS);
            float gemm_ms = tool_median(t[1] + WARM, ITERS);
            float nccl_ms = tool_median(t[2] + WARM, ITERS);
            float ideal = gemm_ms > nccl_ms ? gemm_ms : nccl_ms;
            double flops = 2.0 * (double)m * (double)n * (double)k;
            if (r == 0)
                printf("  %-8s %6lld %6lld %6lld %9.3f %9.3f %9.3f %7.3f "
                       "%8.1f\n", op == 0 ? "ag_gemm" : "gemm_rs",
                       (long long)m, (long long)k, (long long)n, op_ms,
                       gemm_ms, nccl_ms, op_ms / ideal,
                       flops / (op_ms * 1e-3) / 1e12);
            fflush(stdout);
            gpu_matrix_free(&xs);
            gpu_matrix_free(&xfull);
            gpu_matrix_free(&w);
            gpu_matrix_free(&y);
            gpu_matrix_free(&yfull);
        }
    cgm_lt_destroy(lt);
    cudaFree(ws);
}

static void run_timing(const void *param) {
    (void)param;
    int P = gpu_count_or_skip();
    cgm_config cfg = gpu_config();
    cfg.max_m = 16384;
    cfg.max_n = 8192;
    cfg.max_k = 8192;
    gpu_run(P, &cfg, timing_body, NULL, 500);
}

static void register_timing(void) {
    test_set_timeout(550);
    test_add("timing", run_timing, NULL);
}

void register_more_cases(void) {}

int main(int argc, char **argv) {
    return test_main(argc, argv, register_timing);
}
