/* test_cublasmp_gpu: AG+GEMM's epilogues and GEMM+RS's / GEMM+AR's fp8 on
 * cuBLASMp (cublasmp_attr.c maps them onto its matmul descriptor), each
 * call checked against the host reference of the GPU backends' tests
 * (tests/gpu/epi_cases.c, fp8_cases.c), which fails the rank at the first
 * wrong value or refused call. Shapes split evenly over 1 and 2 ranks (the
 * backend's even-shards rule). */
#include <stdio.h>

#include "cublasmp_gpu.h"
#include "epi_cases.h"
#include "fp8_cases.h"

/* Marks this rank as inside the call described by `what` (for a case's
 * FAILURE lines if it hangs) or, done = true, counts it as run. */
static void mark(int rank, const char *what, bool done) {
    if (!g_report) return;
    if (done) {
        g_report[rank].phase = PHASE_IDLE;
        g_report[rank].counts[CALL_OK]++;
        return;
    }
    snprintf(g_report[rank].doing, sizeof g_report[rank].doing, "%s", what);
    g_report[rank].phase = PHASE_CALL;
}

/* AG+GEMM with each epilogue cuBLASMp takes (GELU, GELU_BIAS, GELU_AUX,
 * GELU_AUX_BIAS, DGELU, DGELU_BGRAD) in dtype dt, on `nshapes` of the
 * shapes below and algorithms split and no_overlap. The odd n (97) runs
 * only without aux (cuBLASMp's EPILOGUE_AUX_LD is a multiple of 8, and
 * aux's ld here is n). Returns the calls run. */
static int epilogues(int rank, int P, cgm_comm *comm, cudaStream_t stream,
                     cgm_dtype dt, int nshapes) {
    static const int64_t shapes[][3] = {{64, 48, 40}, {128, 24, 72}, {64, 97, 40}};
    static const cgm_epilogue epis[] = {CGM_EPILOGUE_GELU, CGM_EPILOGUE_GELU_AUX,
                                        CGM_EPILOGUE_DGELU,
                                        CGM_EPILOGUE_DGELU_BGRAD};
    static const cgm_algo algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_NO_OVERLAP};
    const epi_rank g = {rank, P, comm, stream};
    int calls = 0;
    for (size_t e = 0; e < sizeof epis / sizeof epis[0]; e++)
        for (int bias = 0; bias < 2; bias++) {
            const bool gelu = epis[e] == CGM_EPILOGUE_GELU;
            if (bias && epis[e] != CGM_EPILOGUE_GELU &&
                epis[e] != CGM_EPILOGUE_GELU_AUX)
                continue; /* DGELU's take no bias */
            for (int s = 0; s < nshapes; s++) {
                if (shapes[s][1] % 8 && !gelu) continue;
                for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
                    const epi_case c = {CGM_OP_ALL_GATHER_GEMM, epis[e], dt,
                                        bias == 1, shapes[s][0], shapes[s][1],
                                        shapes[s][2], algos[a]};
                    char what[200];
                    snprintf(what, sizeof what, "all_gather_gemm %s%s %s "
                             "m=%lld n=%lld (per rank) k=%lld algo=%s "
                             "(rank %d of %d)", cgm_epilogue_name(c.epi),
                             c.bias ? " +bias" : "", cgm_dtype_name(dt),
                             (long long)c.m, (long long)c.n, (long long)c.k,
                             cgm_algo_name(c.algo), rank, P);
                    mark(rank, what, false);
                    epi_run_case(&g, &c);
                    mark(rank, what, true);
                    calls++;
                }
            }
        }
    return calls;
}

int body_epilogues(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    int calls = epilogues(rank, P, comm, stream, CGM_DTYPE_BF16, 3);
    printf("# epilogues bf16 P=%d rank %d: %d calls right\n", P, rank, calls);
    return 0;
}

/* fp16 and fp32 on the first shape (bf16 runs them all). */
int body_epilogues_fp16_fp32(int rank, int P, cgm_comm *comm,
                             cudaStream_t stream) {
    int calls = epilogues(rank, P, comm, stream, CGM_DTYPE_FP16, 1);
    calls += epilogues(rank, P, comm, stream, CGM_DTYPE_FP32, 1);
    printf("# epilogues fp16, fp32 P=%d rank %d: %d calls right\n", P, rank,
           calls);
    return 0;
}

/* e4m3 x e4m3 with per-tensor scales: GEMM+RS and GEMM+AR to bf16 (with
 * and without a bf16 bias), GEMM+RS to e4m3 (y.scale 2) with its amax;
 * algorithms split and no_overlap (GEMM+AR's: cuBLASMp's Matmul +
 * AllReduce). k is each rank's. */
int body_fp8(int rank, int P, cgm_comm *comm, cudaStream_t stream) {
    static const int64_t shapes[][3] = {{64, 64, 256}, {128, 48, 128}};
    static const struct { cgm_op op; cgm_dtype yd; bool bias; } kinds[] = {
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_BF16, false},
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_BF16, true},
        {CGM_OP_GEMM_REDUCE_SCATTER, CGM_DTYPE_FP8_E4M3, false},
        {CGM_OP_GEMM_ALL_REDUCE, CGM_DTYPE_BF16, false},
        {CGM_OP_GEMM_ALL_REDUCE, CGM_DTYPE_BF16, true}};
    static const cgm_algo algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_NO_OVERLAP};
    const fp8_rank g = {rank, P, comm, stream};
    int calls = 0;
    for (size_t t = 0; t < sizeof kinds / sizeof kinds[0]; t++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++) {
                const fp8_case c = {kinds[t].op, CGM_DTYPE_FP8_E4M3,
                                    CGM_DTYPE_FP8_E4M3, kinds[t].yd, false,
                                    kinds[t].bias, shapes[s][0], shapes[s][1],
                                    shapes[s][2], algos[a], false};
                char what[200];
                snprintf(what, sizeof what, "%s e4m3 x e4m3 -> %s%s%s m=%lld "
                         "n=%lld k=%lld (per rank) algo=%s (rank %d of %d)",
                         cgm_op_name(c.op), cgm_dtype_name(c.yd),
                         c.bias ? " +bias" : "",
                         cgm_dtype_is_fp8(c.yd) ? " +amax" : "",
                         (long long)c.m, (long long)c.n, (long long)c.k,
                         cgm_algo_name(c.algo), rank, P);
                mark(rank, what, false);
                fp8_run_case(&g, &c, true);
                mark(rank, what, true);
                calls++;
            }
    printf("# fp8 P=%d rank %d: %d calls right\n", P, rank, calls);
    return 0;
}
