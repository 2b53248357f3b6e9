/* The peer's GEMM (bench_env_ops.lt_gemm of the GPU environment): one
 * cuBLASLt matmul on the bench's stream, as a user calls it without
 * commgemm. Row-major Y[m, n] = op(X) op(W)^T is cuBLASLt's column-major
 * D[n, m] = op(A) op(B) with A = W and B = X; the epilogue then acts on D's
 * rows (n: GELU_AUX, DGELU, DGELU_BGRAD's column sums of Y) or on B's
 * (BGRADB: X's row sums along k); a bias takes the _BIAS forms of NONE,
 * GELU and GELU_AUX. The descriptors and the heuristic's
 * first algorithm are kept per argument set, so that timed calls and graph
 * captures only enqueue the matmul. */
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "bench.h"

#define PEER_WORKSPACE (32u << 20)
#define PEER_PLANS 16

typedef struct peer_plan {
    bench_lt_gemm key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
} peer_plan;

typedef struct bench_peer_lt {
    cublasLtHandle_t handle;
    void *workspace;
    int count;
    peer_plan plans[PEER_PLANS];
} bench_peer_lt;

static int lt_ok(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return 0;
    fprintf(stderr, "commgemm-bench: the peer's cuBLASLt GEMM: %s: status %d\n", what, (int)st);
    return -1;
}

static cudaDataType_t lt_type(cgm_dtype dtype) {
    switch (dtype) {
    case CGM_DTYPE_BF16: return CUDA_R_16BF;
    case CGM_DTYPE_FP16: return CUDA_R_16F;
    case CGM_DTYPE_FP8_E4M3: return CUDA_R_8F_E4M3;
    default: return CUDA_R_32F;
    }
}

/* With a bias (NONE, GELU, GELU_AUX only): the _BIAS forms. */
static cublasLtEpilogue_t lt_epilogue(cgm_epilogue e, int bias) {
    switch (e) {
    case CGM_EPILOGUE_NONE: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case CGM_EPILOGUE_GELU: return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case CGM_EPILOGUE_GELU_AUX: return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case CGM_EPILOGUE_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    case CGM_EPILOGUE_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case CGM_EPILOGUE_BGRAD: return CUBLASLT_EPILOGUE_BGRADB;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

static int set_attr(peer_plan *p, cublasLtMatmulDescAttributes_t attr, const void *v, size_t size) {
    return lt_ok(cublasLtMatmulDescSetAttribute(p->desc, attr, v, size), "cublasLtMatmulDescSetAttribute");
}

/* Descriptor attributes of the key: transposes, fp8 scales, epilogue. */
static int plan_desc(peer_plan *p) {
    const bench_lt_gemm *g = &p->key;
    cublasOperation_t ta = g->layout == CGM_LAYOUT_TN ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = g->layout == CGM_LAYOUT_NT ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (lt_ok(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate") ||
        set_attr(p, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ||
        set_attr(p, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb))
        return -1;
    if (g->in == CGM_DTYPE_FP8_E4M3) {
        if (g->scaling != CGM_SCALING_TENSOR) {
#if CUBLAS_VERSION >= 120900
            int32_t a_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
            int32_t b_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
            if (set_attr(p, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode) ||
                set_attr(p, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode))
                return -1;
#else
            fprintf(stderr, "commgemm-bench: the peer's block-scaled fp8 GEMM needs cuBLASLt 12.9 or "
                    "newer (this build has %d); use --scaling tensor\n", CUBLAS_VERSION);
            return -1;
#endif
        }
        if (set_attr(p, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g->w_scale, sizeof g->w_scale) ||
            set_attr(p, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g->x_scale, sizeof g->x_scale))
            return -1;
    }
    cublasLtEpilogue_t epi = lt_epilogue(g->epilogue, g->bias != NULL);
    if (set_attr(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) return -1;
    if (g->aux) {
        int64_t ld = g->n;
        if (set_attr(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux) ||
            set_attr(p, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld))
            return -1;
    }
    if (g->bias) { /* Y's dtype (bf16 for fp8 inputs) */
        cudaDataType_t t = lt_type(g->out);
        if (set_attr(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias) ||
            set_attr(p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t))
            return -1;
    }
    if (g->bgrad) {
        /* cuBLASLt writes the bias gradient in D's type for a 16-bit D. */
        cudaDataType_t t = lt_type(bench_lt_bgrad_dtype(g->out));
        if (set_attr(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bgrad, sizeof g->bgrad) ||
            set_attr(p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t))
            return -1;
    }
    return 0;
}

/* The key's layouts (A = W, B = X, D = Y, column-major) and algorithm. */
static int plan_make(bench_peer_lt *lt, peer_plan *p) {
    const bench_lt_gemm *g = &p->key;
    int w_kn = g->layout != CGM_LAYOUT_TN, x_km = g->layout == CGM_LAYOUT_NT;
    cudaDataType_t in = lt_type(g->in), out = lt_type(g->out);
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    size_t ws = PEER_WORKSPACE;
    if (plan_desc(p) ||
        lt_ok(cublasLtMatrixLayoutCreate(&p->a, in, w_kn ? g->n : g->k, w_kn ? g->k : g->n,
                                         w_kn ? g->n : g->k), "cublasLtMatrixLayoutCreate (W)") ||
        lt_ok(cublasLtMatrixLayoutCreate(&p->b, in, x_km ? g->m : g->k, x_km ? g->k : g->m,
                                         x_km ? g->m : g->k), "cublasLtMatrixLayoutCreate (X)") ||
        lt_ok(cublasLtMatrixLayoutCreate(&p->d, out, g->n, g->m, g->n), "cublasLtMatrixLayoutCreate (Y)") ||
        lt_ok(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate") ||
        lt_ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
              "cublasLtMatmulPreferenceSetAttribute") ||
        lt_ok(cublasLtMatmulAlgoGetHeuristic(lt->handle, p->desc, p->a, p->b, p->d, p->d, pref, 1, &result, &found),
              "cublasLtMatmulAlgoGetHeuristic")) {
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        return -1;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    if (found < 1) {
        fprintf(stderr, "commgemm-bench: the peer's cuBLASLt GEMM: no algorithm for m=%lld n=%lld k=%lld "
                "(%s, epilogue %s)\n", (long long)g->m, (long long)g->n, (long long)g->k,
                cgm_dtype_name(g->in), cgm_epilogue_name(g->epilogue));
        return -1;
    }
    p->algo = result.algo;
    return 0;
}

static void plan_free(peer_plan *p) {
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    if (p->a) cublasLtMatrixLayoutDestroy(p->a);
    if (p->b) cublasLtMatrixLayoutDestroy(p->b);
    if (p->d) cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

void bench_peer_lt_destroy(bench_peer_lt *lt) {
    if (!lt) return;
    for (int i = 0; i < lt->count; i++) plan_free(&lt->plans[i]);
    if (lt->workspace) cudaFree(lt->workspace);
    if (lt->handle) cublasLtDestroy(lt->handle);
    free(lt);
}

/* The plan of `g`: found, or made (the oldest replaced when all are used). */
static peer_plan *plan_for(bench_peer_lt *lt, const bench_lt_gemm *g) {
    for (int i = 0; i < lt->count; i++)
        if (memcmp(&lt->plans[i].key, g, sizeof *g) == 0) return &lt->plans[i];
    if (lt->count == PEER_PLANS) {
        plan_free(&lt->plans[0]);
        memmove(&lt->plans[0], &lt->plans[1], sizeof lt->plans[0] * (PEER_PLANS - 1));
        memset(&lt->plans[--lt->count], 0, sizeof lt->plans[0]);
    }
    peer_plan *p = &lt->plans[lt->count];
    memset(p, 0, sizeof *p);
    memcpy(&p->key, g, sizeof *g);
    if (plan_make(lt, p)) {
        plan_free(p);
        return NULL;
    }
    lt->count++;
    return p;
}

int bench_peer_lt_gemm(bench_peer_lt **ltp, const bench_lt_gemm *g, void *stream) {
    if (!*ltp) {
        bench_peer_lt *lt = calloc(1, sizeof *lt);
        if (!lt) return -1;
        *ltp = lt;
        if (lt_ok(cublasLtCreate(&lt->handle), "cublasLtCreate")) return -1;
        cudaError_t e = cudaMalloc(&lt->workspace, PEER_WORKSPACE);
        if (e != cudaSuccess) {
            fprintf(stderr, "commgemm-bench: the peer's cuBLASLt workspace: cudaMalloc: %s\n", cudaGetErrorString(e));
            lt->workspace = NULL;
            return -1;
        }
    }
    bench_peer_lt *lt = *ltp;
    if (!lt->handle || !lt->workspace) return -1;
    peer_plan *p = plan_for(lt, g);
    if (!p) return -1;
    const float one = 1.0f, zero = 0.0f;
    return lt_ok(cublasLtMatmul(lt->handle, p->desc, &one, g->w, p->a, g->x, p->b, &zero, g->y, p->d, g->y, p->d,
                                &p->algo, lt->workspace, PEER_WORKSPACE, (cudaStream_t)stream),
                 "cublasLtMatmul");
}
