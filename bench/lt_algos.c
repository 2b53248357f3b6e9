/* How much does cuBLASLt's first heuristic pick leave on the table? Times
 * the top NALG heuristic algorithms and cublasGemmEx (what torch.matmul
 * calls) for row-major Y[m,n] = X[m,k] . W[n,k]^T (commgemm's TN), bf16 in
 * and out, fp32 compute, 32 MiB workspace, in ROUNDS interleaved rounds
 * (median per candidate). Not part of the library; the device suite's
 * lt-algos stage builds it with gcc:
 *   lt_algos MxNxK...   (e.g. 4096x28672x8192 2048x28672x8192) */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define CK(x) do { int e_ = (int)(x); if (e_) { fprintf(stderr, "%s:%d %s -> %d\n", __FILE__, __LINE__, #x, e_); exit(1);} } while (0)
#define NALG 12
#define ROUNDS 5
static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MxNxK...\n", argv[0]); return 2; }
    long shapes[64][3]; int ns = 0;
    for (int i = 1; i < argc && ns < 64; i++) if (sscanf(argv[i], "%ldx%ldx%ld", &shapes[ns][0], &shapes[ns][1], &shapes[ns][2]) == 3) ns++;
    cublasLtHandle_t lt; CK(cublasLtCreate(&lt));
    cublasHandle_t bl; CK(cublasCreate(&bl));
    size_t wsb = 32u << 20; void *ws; CK(cudaMalloc(&ws, wsb));
    CK(cublasSetWorkspace(bl, ws, wsb));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    cudaStream_t s; CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); CK(cublasSetStream(bl, s));
    for (int si = 0; si < ns; si++) {
        long m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        void *x, *w, *y;
        CK(cudaMalloc(&x, m * k * 2)); CK(cudaMalloc(&w, n * k * 2)); CK(cudaMalloc(&y, m * n * 2));
        CK(cudaMemset(x, 0x3c, m * k * 2)); CK(cudaMemset(w, 0x3b, n * k * 2));
        cublasLtMatmulDesc_t d; cublasLtMatrixLayout_t A, B, C; cublasLtMatmulPreference_t p;
        CK(cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        CK(cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
        CK(cublasLtMatrixLayoutCreate(&A, CUDA_R_16BF, k, n, k));
        CK(cublasLtMatrixLayoutCreate(&B, CUDA_R_16BF, k, m, k));
        CK(cublasLtMatrixLayoutCreate(&C, CUDA_R_16BF, n, m, n));
        CK(cublasLtMatmulPreferenceCreate(&p));
        uint64_t wsz = wsb;
        CK(cublasLtMatmulPreferenceSetAttribute(p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz, sizeof wsz));
        cublasLtMatmulHeuristicResult_t res[NALG]; int found = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, d, A, B, C, C, p, NALG, res, &found));
        float alpha = 1, beta = 0;
        int nc = found + 1; /* last = cublasGemmEx */
        float t[NALG + 1][ROUNDS];
        /* reps: about 20 ms of GEMM per timing */
        double flops = 2.0 * m * n * k; int reps = (int)(20e-3 / (flops / 600e12)); if (reps < 3) reps = 3; if (reps > 200) reps = 200;
        for (int r = 0; r < ROUNDS; r++)
            for (int c = 0; c < nc; c++) {
                for (int it = 0; it < reps + 2; it++) {
                    if (it == 2) CK(cudaEventRecord(e0, s));
                    if (c < found)
                        CK(cublasLtMatmul(lt, d, &alpha, w, A, x, B, &beta, y, C, y, C, &res[c].algo, ws, wsb, s));
                    else
                        CK(cublasGemmEx(bl, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k, &beta, y, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                }
                CK(cudaEventRecord(e1, s)); CK(cudaEventSynchronize(e1));
                float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); t[c][r] = ms * 1000 / reps;
            }
        float med[NALG + 1] = {0}; int best = 0;
        for (int c = 0; c < nc; c++) { qsort(t[c], ROUNDS, sizeof(float), cmpf); med[c] = t[c][ROUNDS / 2]; if (c < found && med[c] < med[best]) best = c; }
        printf("shape %ldx%ldx%ld found %d reps %d: heur0 %.1f us, best lt #%d %.1f us (%.3f of heur0), cublasGemmEx %.1f us\n",
               m, n, k, found, reps, med[0], best, med[best], med[best] / med[0], med[found]);
        for (int c = 0; c < nc; c++) {
            int tile = -1, stages = -1, cl = -1; size_t sz;
            if (c < found) {
                cublasLtMatmulAlgoConfigGetAttribute(&res[c].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &sz);
                cublasLtMatmulAlgoConfigGetAttribute(&res[c].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &sz);
                cublasLtMatmulAlgoConfigGetAttribute(&res[c].algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cl, sizeof cl, &sz);
            }
            printf("  %-10s #%2d %9.1f us  %6.1f TFLOP/s  tile %d stages %d cluster %d ws %zu\n", c < found ? "lt" : "gemmEx", c, med[c], flops / med[c] / 1e6, tile, stages, cl, c < found ? res[c].workspaceSize : 0);
        }
        fflush(stdout);
        cublasLtMatmulPreferenceDestroy(p); cublasLtMatrixLayoutDestroy(A); cublasLtMatrixLayoutDestroy(B); cublasLtMatrixLayoutDestroy(C); cublasLtMatmulDescDestroy(d);
        cudaFree(x); cudaFree(w); cudaFree(y);
    }
    return 0;
}
