/* A row-major GEMM through cuBLASLt, with descriptors and the heuristic's
 * algorithm cached per shape.
 *
 * Row-major Y[m, n] is column-major Y^T[n, m], so every layout maps onto
 * one column-major product with the operands swapped:
 *   TN: Y^T = W . X^T   A = W (col-major k x n, ld ldw) op T; B = X (k x m) op N
 *   NN: Y^T = W^T . X^T A = W (col-major n x k, ld ldw) op N; B = X (k x m) op N
 *   NT: Y^T = W^T . X   A = W (col-major n x k) op N;         B = X (m x k) op T
 * and cuBLASLt's (m, n, k) are ours (n, m, k). The bias (n values) is then
 * a per-row vector of D, which is what CUBLASLT_EPILOGUE_BIAS adds. fp8
 * (TN only): lt_gemm_fp8.c; the other epilogues: lt_epilogue.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "gpu/lt_epilogue.h"
#include "gpu/lt_gemm_fp8.h"

#define LT_CACHE_SIZE 256
/* cgm_lt_prepare's search: at most this many heuristic algorithms, timed in
 * LT_SEARCH_ROUNDS interleaved rounds of about LT_SEARCH_ROUND_US each. */
#define LT_SEARCH_MAX 16
#define LT_SEARCH_ROUNDS 3
#define LT_SEARCH_ROUND_US 200.0

typedef struct lt_key {
    /* in_dtype is X's; w_dtype W's; c_dtype cuBLASLt's C (an fp8 output's
     * differs from out_dtype); bias_dtype the bias's (0 without one). */
    int layout, in_dtype, w_dtype, out_dtype, c_dtype, bias_dtype;
    int has_bias, accumulate, tf32, has_addend, reduction_fp32;
    /* fp8: which of the pointers the descriptor carries */
    int scaling, fast_accum, has_x_scale, has_w_scale, has_y_scale, has_amax;
    int epilogue; /* cgm_epilogue; aux's ld below (0 without aux) */
    int64_t m, n, k, ldx, ldw, ldy, ld_addend, ld_aux;
    int align_x, align_w, align_y, align_bias, align_addend;
    uint64_t workspace_bytes;
} lt_key;

typedef struct lt_entry {
    bool used;
    bool searched; /* cgm_lt_prepare has decided `algo` */
    lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    /* C's layout when it is not D's: the addend's, or an fp8 output's C
     * (of c_dtype, never read: beta 0); else c */
    cublasLtMatrixLayout_t cin;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

struct cgm_lt {
    cublasLtHandle_t handle;
    lt_entry entries[LT_CACHE_SIZE];
    /* key_hash of each used entry's key, apart from the entries so that a
     * lookup (two per GEMM step and call in the p2p backend: its check pass
     * and the enqueue) scans 2 KiB, not every entry. */
    uint64_t hashes[LT_CACHE_SIZE];
    int next_victim;
    int search;                  /* COMMGEMM_LT_SEARCH */
    cudaStream_t search_stream;  /* created on the first search */
    /* 0: the caller's stream, 1: the last round's end, then a start and an
     * end per candidate and round (the first two also time the warm-up). */
    cudaEvent_t search_events[2 + 2 * LT_SEARCH_MAX * LT_SEARCH_ROUNDS];
    int search_events_made;
    uint64_t searches, improved; /* diagnostics */
};

cgm_lt_gemm_args cgm_lt_args_from_call(const cgm_call *c) {
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = c->layout;
    g.in_dtype = c->in_dtype;
    g.out_dtype = c->out_dtype;
    g.m = c->m;
    g.n = c->n;
    g.k = c->k;
    g.x = c->x.data;
    g.ldx = cgm_matrix_ld(&c->x);
    g.w = c->w.data;
    g.ldw = cgm_matrix_ld(&c->w);
    g.y = c->y.data;
    g.ldy = cgm_matrix_ld(&c->y);
    g.bias = c->has_bias ? c->bias.data : NULL;
    g.bias_dtype = c->has_bias ? c->bias.dtype : CGM_DTYPE_FP32;
    g.accumulate = c->accumulate;
    g.allow_tf32 = c->allow_tf32;
    g.reduction_fp32 = c->gemm_reduction_fp32;
    if (cgm_lt_is_fp8(c->in_dtype)) {
        g.w_dtype = c->w.dtype;
        g.scaling = c->x.scaling == CGM_SCALING_BLOCK_1X128 ? CGM_LT_SCALE_BLOCK : CGM_LT_SCALE_TENSOR;
        g.x_scale = c->x.scale;
        g.w_scale = c->w.scale;
    }
    return g;
}

cgm_status cgm_lt_create(cgm_lt **out) {
    cgm_status status = CGM_SUCCESS;
    int64_t search = 0;
    status = cgm_param_int_range("COMMGEMM_LT_SEARCH", 1, LT_SEARCH_MAX,
                                 "algorithms timed per GEMM shape; 1: the "
                                 "heuristic's first, no timing",
                                 &search);
    if (status != CGM_SUCCESS) return status;
    cgm_lt *lt = calloc(1, sizeof *lt);
    if (!lt) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "calloc of cgm_lt");
    lt->search = (int)search;
    CGM_CUBLAS_TRY(cublasLtCreate(&lt->handle));
    *out = lt;
    return CGM_SUCCESS;
fail:
    free(lt);
    return status;
}

static void entry_clear(lt_entry *e) {
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    if (e->a) cublasLtMatrixLayoutDestroy(e->a);
    if (e->b) cublasLtMatrixLayoutDestroy(e->b);
    if (e->c) cublasLtMatrixLayoutDestroy(e->c);
    if (e->cin) cublasLtMatrixLayoutDestroy(e->cin);
    memset(e, 0, sizeof *e);
}

void cgm_lt_destroy(cgm_lt *lt) {
    if (!lt) return;
    for (int i = 0; i < LT_CACHE_SIZE; i++) entry_clear(&lt->entries[i]);
    for (int i = 0; i < lt->search_events_made; i++)
        cudaEventDestroy(lt->search_events[i]);
    if (lt->search_stream) cudaStreamDestroy(lt->search_stream);
    if (lt->handle) cublasLtDestroy(lt->handle);
    free(lt);
}

static int alignment(const void *p) {
    uintptr_t v = (uintptr_t)p;
    int a = 1;
    while (a < 256 && (v % (uintptr_t)(a * 2)) == 0) a *= 2;
    return a;
}

static lt_key make_key(const cgm_lt_gemm_args *g, size_t workspace_bytes) {
    lt_key key;
    memset(&key, 0, sizeof key);
    key.layout = (int)g->layout;
    key.in_dtype = (int)g->in_dtype;
    key.w_dtype = (int)cgm_lt_w_dtype(g);
    key.out_dtype = (int)g->out_dtype;
    key.c_dtype = (int)cgm_lt_c_dtype(g);
    key.bias_dtype = g->bias ? (int)cgm_lt_bias_dtype(g) : 0;
    key.has_bias = g->bias != NULL;
    key.accumulate = g->accumulate;
    key.tf32 = g->in_dtype == CGM_DTYPE_FP32 && g->allow_tf32;
    key.reduction_fp32 = g->reduction_fp32;
    key.m = g->m;
    key.n = g->n;
    key.k = g->k;
    key.ldx = g->ldx;
    key.ldw = g->ldw;
    key.ldy = g->ldy;
    key.align_x = alignment(g->x);
    key.align_w = alignment(g->w);
    key.align_y = alignment(g->y);
    key.align_bias = g->bias ? alignment(g->bias) : 0;
    key.has_addend = g->addend != NULL;
    key.ld_addend = g->addend ? g->ld_addend : 0;
    key.align_addend = g->addend ? alignment(g->addend) : 0;
    key.workspace_bytes = workspace_bytes;
    key.scaling = (int)g->scaling;
    key.fast_accum = g->fast_accum;
    key.has_x_scale = g->x_scale != NULL;
    key.has_w_scale = g->w_scale != NULL;
    key.has_y_scale = g->y_scale != NULL;
    key.has_amax = g->amax_y != NULL;
    key.epilogue = (int)g->epilogue;
    key.ld_aux = g->aux ? g->ld_aux : 0;
    return key;
}

/* cuBLASLt's C layout: the addend's, an fp8 output's C, or D's (beta 0
 * or accumulate). */
static cublasLtMatrixLayout_t c_layout(const lt_entry *e) {
    return e->cin ? e->cin : e->c;
}

/* cuBLASLt's C: the addend, none for an fp8 output (beta 0: C, of another
 * dtype than D, is not read), else Y itself (beta 1 or 0). */
static const void *c_pointer(const lt_entry *e, const cgm_lt_gemm_args *g,
                             const void *y) {
    if (g->addend) return g->addend;
    return e->key.c_dtype != e->key.out_dtype ? NULL : y;
}

/* The per-call pointers of the entry's descriptor: the bias, fp8's scales
 * and `amax` (g's amax_y, or the search's scratch one). */
static cgm_status set_pointers(lt_entry *e, const cgm_lt_gemm_args *g,
                               float *amax) {
    cgm_status status = CGM_SUCCESS;
    CGM_TRY(cgm_lt_epilogue_pointers(e->desc, g));
    if (cgm_lt_is_fp8(g->in_dtype))
        CGM_TRY(cgm_lt_fp8_pointers(e->desc, g, amax));
fail:
    return status;
}

/* The heuristic's first `want` algorithms for entry e (its descriptors and
 * key: workspace bound, operand alignments). *found may be 0. */
static cgm_status heuristic(cgm_lt *lt, const lt_entry *e, int want,
                            cublasLtMatmulHeuristicResult_t *res,
                            int *found) {
    cgm_status status = CGM_SUCCESS;
    const lt_key *key = &e->key;
    cublasLtMatmulPreference_t pref = NULL;
    uint64_t ws = key->workspace_bytes;
    uint32_t al_a = (uint32_t)key->align_w, al_b = (uint32_t)key->align_x,
             al_d = (uint32_t)key->align_y,
             al_c = key->has_addend ? (uint32_t)key->align_addend : al_d;
    *found = 0;
    memset(res, 0, (size_t)want * sizeof *res);
    CGM_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref));
    CGM_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CGM_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    CGM_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    CGM_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    CGM_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    if (key->reduction_fp32) {
        /* Split-k parts summed in the compute type only (NONE: not split,
         * always allowed); never rounded to the output type first. */
        uint32_t mask = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        CGM_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask,
            sizeof mask));
    }
    CGM_CUBLAS_TRY(cublasLtMatmulAlgoGetHeuristic(lt->handle, e->desc, e->a,
                                                  e->b, c_layout(e), e->c,
                                                  pref, want, res, found));
fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return status;
}

/* The descriptor: compute type, operations, the epilogue, fp8's
 * scale modes and fast accumulation. */
static cgm_status desc_build(lt_entry *e, const lt_key *key) {
    cgm_status status = CGM_SUCCESS;
    cublasComputeType_t compute =
        key->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasOperation_t op_a = key->layout == CGM_LAYOUT_TN ? CUBLAS_OP_T
                                                          : CUBLAS_OP_N;
    cublasOperation_t op_b = key->layout == CGM_LAYOUT_NT ? CUBLAS_OP_T
                                                          : CUBLAS_OP_N;
    CGM_CUBLAS_TRY(cublasLtMatmulDescCreate(&e->desc, compute, CUDA_R_32F));
    CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
        e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
        e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    CGM_TRY(cgm_lt_epilogue_desc(e->desc, (cgm_epilogue)key->epilogue,
                                 key->has_bias, (cgm_dtype)key->bias_dtype,
                                 (cgm_dtype)key->out_dtype, key->ld_aux));
    if (cgm_lt_is_fp8((cgm_dtype)key->in_dtype))
        CGM_TRY(cgm_lt_fp8_desc(e->desc, (cgm_lt_scaling)key->scaling,
                                key->fast_accum));
fail:
    return status;
}

static cgm_status no_algorithm(const lt_key *key) {
    char fp8[160] = "";
    if (cgm_lt_is_fp8((cgm_dtype)key->in_dtype))
        snprintf(fp8, sizeof fp8, "; fp8 %s scaling, W %s, C %s, fast "
                 "accumulation %d, scales x/w/y %d/%d/%d, amax %d",
                 key->scaling == CGM_LT_SCALE_BLOCK ? "block" : "tensor",
                 cgm_dtype_name((cgm_dtype)key->w_dtype),
                 cgm_dtype_name((cgm_dtype)key->c_dtype), key->fast_accum,
                 key->has_x_scale, key->has_w_scale, key->has_y_scale,
                 key->has_amax);
    return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                     "cuBLASLt has no algorithm for a %s GEMM m=%lld n=%lld "
                     "k=%lld (%s in, %s out, ld x/w/y %lld/%lld/%lld, "
                     "alignment %d/%d/%d bytes%s%s); try aligned pointers and "
                     "leading dimensions%s",
                     cgm_layout_name((cgm_layout)key->layout),
                     (long long)key->m, (long long)key->n, (long long)key->k,
                     cgm_dtype_name((cgm_dtype)key->in_dtype),
                     cgm_dtype_name((cgm_dtype)key->out_dtype),
                     (long long)key->ldx, (long long)key->ldw,
                     (long long)key->ldy, key->align_x, key->align_w,
                     key->align_y, fp8,
                     cgm_lt_epilogue_words((cgm_epilogue)key->epilogue),
                     key->epilogue ? " (for an epilogue: another layout, or "
                     "the host backend)" : fp8[0] ? " (for fp8 also n and ldy multiples of 16) "
                              "on a GPU with FP8 (sm_89+; block scaling: "
                              "sm_90)"
                            : "");
}

static cgm_status entry_build(cgm_lt *lt, lt_entry *e, const lt_key *key) {
    cgm_status status = CGM_SUCCESS;
    cudaDataType_t in_x = cgm_lt_cuda_dtype((cgm_dtype)key->in_dtype);
    cudaDataType_t in_w = cgm_lt_cuda_dtype((cgm_dtype)key->w_dtype);
    cudaDataType_t out = cgm_lt_cuda_dtype((cgm_dtype)key->out_dtype);
    /* A = W: stored col-major (k x n) for TN, (n x k) for NN/NT. */
    uint64_t a_rows = key->layout == CGM_LAYOUT_TN ? (uint64_t)key->k
                                                   : (uint64_t)key->n;
    uint64_t a_cols = key->layout == CGM_LAYOUT_TN ? (uint64_t)key->n
                                                   : (uint64_t)key->k;
    /* B = X: stored col-major (k x m) for TN/NN, (m x k) for NT. */
    uint64_t b_rows = key->layout == CGM_LAYOUT_NT ? (uint64_t)key->m
                                                   : (uint64_t)key->k;
    uint64_t b_cols = key->layout == CGM_LAYOUT_NT ? (uint64_t)key->k
                                                   : (uint64_t)key->m;
    e->key = *key;
    CGM_TRY(desc_build(e, key));
    CGM_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&e->a, in_w, a_rows, a_cols,
                                              key->ldw));
    CGM_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&e->b, in_x, b_rows, b_cols,
                                              key->ldx));
    CGM_CUBLAS_TRY(cublasLtMatrixLayoutCreate(&e->c, out, (uint64_t)key->n,
                                              (uint64_t)key->m, key->ldy));
    if (key->has_addend)
        CGM_CUBLAS_TRY(cublasLtMatrixLayoutCreate(
            &e->cin, out, (uint64_t)key->n, (uint64_t)key->m,
            key->ld_addend));
    else if (key->c_dtype != key->out_dtype)
        CGM_CUBLAS_TRY(cublasLtMatrixLayoutCreate(
            &e->cin, cgm_lt_cuda_dtype((cgm_dtype)key->c_dtype),
            (uint64_t)key->n, (uint64_t)key->m, key->ldy));
    if (cgm_lt_is_fp8((cgm_dtype)key->in_dtype))
        CGM_TRY(cgm_lt_fp8_placeholders(e->desc, key->has_x_scale,
                                        key->has_w_scale, key->has_y_scale,
                                        key->has_amax));
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    CGM_TRY(heuristic(lt, e, 1, &result, &found));
    if (found < 1) {
        status = no_algorithm(key);
        goto fail;
    }
    e->algo = result.algo;
    e->used = true;
    return CGM_SUCCESS;
fail:
    entry_clear(e);
    return status;
}

/* FNV-1a over the key's bytes (make_key zeroes the padding). */
static uint64_t key_hash(const lt_key *key) {
    const unsigned char *b = (const unsigned char *)key;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *key; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static cgm_status lookup(cgm_lt *lt, const lt_key *key, lt_entry **out) {
    uint64_t h = key_hash(key);
    for (int i = 0; i < LT_CACHE_SIZE; i++) {
        lt_entry *e = &lt->entries[i];
        if (lt->hashes[i] == h && e->used &&
            memcmp(&e->key, key, sizeof *key) == 0) {
            *out = e;
            return CGM_SUCCESS;
        }
    }
    int slot = -1;
    for (int i = 0; i < LT_CACHE_SIZE && slot < 0; i++)
        if (!lt->entries[i].used) slot = i;
    if (slot < 0) {
        slot = lt->next_victim;
        lt->next_victim = (lt->next_victim + 1) % LT_CACHE_SIZE;
        entry_clear(&lt->entries[slot]);
    }
    cgm_status status = entry_build(lt, &lt->entries[slot], key);
    lt->hashes[slot] = status == CGM_SUCCESS ? h : 0;
    if (status == CGM_SUCCESS) *out = &lt->entries[slot];
    return status;
}

/* ------------------------------------------------------ measured search */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static cgm_status search_resources(cgm_lt *lt, int events) {
    cgm_status status = CGM_SUCCESS;
    if (!lt->search_stream)
        CGM_CUDA_TRY(cudaStreamCreateWithFlags(&lt->search_stream,
                                               cudaStreamNonBlocking));
    for (; lt->search_events_made < events; lt->search_events_made++)
        CGM_CUDA_TRY(cudaEventCreate(
            &lt->search_events[lt->search_events_made]));
fail:
    return status;
}

/* Bytes of the scratch output: the descriptors' C layout (n x m, ld ldy,
 * column-major) in the output dtype. */
static size_t scratch_y_bytes(const lt_key *key) {
    return ((size_t)(key->m - 1) * (size_t)key->ldy + (size_t)key->n) *
           cgm_dtype_size((cgm_dtype)key->out_dtype);
}

/* Waits for `event` at most timeout_ms. */
static cgm_status wait_bounded(cudaEvent_t event, int64_t timeout_ms,
                               const lt_key *key) {
    bool expired = false;
    cgm_status status = cgm_gpu_wait_done(event, NULL, timeout_ms, NULL, NULL,
                                          &expired);
    if (expired)
        return cgm_error(CGM_ERROR_TIMEOUT,
                         "cuBLASLt search m=%lld n=%lld k=%lld: waited "
                         "%lld ms (COMMGEMM_TIMEOUT_MS) for the stream's "
                         "earlier work and the timed runs; a peer did not "
                         "make an earlier call, or set "
                         "COMMGEMM_LT_SEARCH=1 to skip the search",
                         (long long)key->m, (long long)key->n,
                         (long long)key->k, (long long)timeout_ms);
    return status;
}

static cgm_status search_entry(cgm_lt *lt, lt_entry *e,
                               const cgm_lt_gemm_args *g, cudaStream_t after,
                               int64_t timeout_ms) {
    cgm_status status = CGM_SUCCESS;
    const lt_key *key = &e->key;
    cublasLtMatmulHeuristicResult_t res[LT_SEARCH_MAX];
    float t[LT_SEARCH_MAX][LT_SEARCH_ROUNDS], med[LT_SEARCH_MAX];
    bool ok[LT_SEARCH_MAX];
    int found = 0, reps = 1, best = 0;
    char *scratch = NULL;
    void *y = NULL, *wsp = NULL;
    float *amax = NULL; /* never the caller's amax_y */
    size_t y_bytes = scratch_y_bytes(key);
    size_t y_room = ((y_bytes + 255) & ~(size_t)255) + 256;
    float first_ms = 0;
    cudaStream_t s;
    float alpha = 1.0f,
          beta = key->accumulate || key->has_addend ? 1.0f : 0.0f;
    e->searched = true;
    CGM_TRY(heuristic(lt, e, lt->search, res, &found));
    if (found < 2) goto fail;
    CGM_TRY(search_resources(lt, 2 + 2 * found * LT_SEARCH_ROUNDS));
    s = lt->search_stream;
    /* After the caller's earlier work: the timings get the GPU to
     * themselves. The waits below are bounded, but a candidate's first
     * launch in the process loads its kernel (CUDA's lazy loading), and
     * loading waits for the device's earlier work inside cublasLtMatmul:
     * for as long as that work runs (each commgemm wait in it is bounded
     * by its own timeout; device.h, HOPPER_GEMM.md). */
    CGM_CUDA_TRY(cudaEventRecord(lt->search_events[0], after));
    CGM_CUDA_TRY(cudaStreamWaitEvent(s, lt->search_events[0], 0));
    if (cudaMallocAsync((void **)&scratch, y_room + key->workspace_bytes, s) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        scratch = NULL;
        CGM_INFO(CGM_SUB_TUNE, "cuBLASLt search m=%lld n=%lld k=%lld: no "
                 "scratch of %zu bytes; the heuristic's first algorithm",
                 (long long)key->m, (long long)key->n, (long long)key->k,
                 y_room + (size_t)key->workspace_bytes);
        goto fail;
    }
    y = scratch;
    wsp = scratch + y_room;
    amax = key->has_amax ? (float *)(scratch + y_room - 256) : NULL;
    CGM_TRY(set_pointers(e, g, amax));
    CGM_CUDA_TRY(cudaMemsetAsync(y, 0, y_bytes, s));
    /* Warm-up: every candidate once (one that fails is dropped), the
     * first timed to size the repetitions of a round. */
    for (int c = 0; c < found; c++) {
        if (c == 0) CGM_CUDA_TRY(cudaEventRecord(lt->search_events[2], s));
        ok[c] = cublasLtMatmul(lt->handle, e->desc, &alpha, g->w, e->a, g->x,
                               e->b, &beta, c_pointer(e, g, y),
                               c_layout(e), y, e->c, &res[c].algo, wsp,
                               key->workspace_bytes,
                               s) == CUBLAS_STATUS_SUCCESS;
        if (c == 0) CGM_CUDA_TRY(cudaEventRecord(lt->search_events[3], s));
    }
    if (!ok[0]) goto fail;
    CGM_TRY(wait_bounded(lt->search_events[3], timeout_ms, key));
    CGM_CUDA_TRY(cudaEventElapsedTime(&first_ms, lt->search_events[2],
                                      lt->search_events[3]));
    if (first_ms > 0) {
        double r = LT_SEARCH_ROUND_US / ((double)first_ms * 1000.0);
        reps = r < 1 ? 1 : r > 32 ? 32 : (int)r;
    }
    for (int round = 0; round < LT_SEARCH_ROUNDS; round++)
        for (int c = 0; c < found; c++) {
            if (!ok[c]) continue;
            cudaEvent_t *ev = &lt->search_events[2 + 2 * (round * found + c)];
            CGM_CUDA_TRY(cudaEventRecord(ev[0], s));
            for (int i = 0; i < reps; i++)
                CGM_CUBLAS_TRY(cublasLtMatmul(
                    lt->handle, e->desc, &alpha, g->w, e->a, g->x, e->b,
                    &beta, c_pointer(e, g, y), c_layout(e), y, e->c,
                    &res[c].algo, wsp, key->workspace_bytes, s));
            CGM_CUDA_TRY(cudaEventRecord(ev[1], s));
        }
    CGM_CUDA_TRY(cudaEventRecord(lt->search_events[1], s));
    CGM_TRY(wait_bounded(lt->search_events[1], timeout_ms, key));
    for (int c = 0; c < found; c++) {
        med[c] = 0;
        if (!ok[c]) continue;
        for (int round = 0; round < LT_SEARCH_ROUNDS; round++) {
            cudaEvent_t *ev = &lt->search_events[2 + 2 * (round * found + c)];
            CGM_CUDA_TRY(cudaEventElapsedTime(&t[c][round], ev[0], ev[1]));
        }
        qsort(t[c], LT_SEARCH_ROUNDS, sizeof(float), cmp_float);
        med[c] = t[c][LT_SEARCH_ROUNDS / 2] * 1000.0f / (float)reps;
        if (med[c] < med[best]) best = c;
    }
    lt->searches++;
    if (best != 0 && med[best] <= 0.99f * med[0]) {
        e->algo = res[best].algo;
        lt->improved++;
    } else {
        best = 0;
    }
    CGM_INFO(CGM_SUB_TUNE, "cuBLASLt search m=%lld n=%lld k=%lld (%s in, %s "
             "out): %d algorithms x %d rounds of %d; heuristic's first %.1f "
             "us, chose #%d %.1f us", (long long)key->m, (long long)key->n,
             (long long)key->k, cgm_dtype_name((cgm_dtype)key->in_dtype),
             cgm_dtype_name((cgm_dtype)key->out_dtype), found,
             LT_SEARCH_ROUNDS, reps, (double)med[0], best, (double)med[best]);
fail:
    /* Stream-ordered: freed once the private stream gets there. No wait
     * here: after a timeout the stream may still be behind the caller's
     * work, and the next search queues behind it anyway. */
    if (scratch) cudaFreeAsync(scratch, lt->search_stream);
    return status;
}

void cgm_lt_set_search(cgm_lt *lt, int search) {
    lt->search = search < 1 ? 1 : search > LT_SEARCH_MAX ? LT_SEARCH_MAX
                                                         : search;
}

void cgm_lt_search_stats(const cgm_lt *lt, uint64_t *searches,
                         uint64_t *improved) {
    *searches = lt->searches;
    *improved = lt->improved;
}

/* Every rule of gpu.h's cgm_lt_gemm_args. */
static cgm_status check_args(const cgm_lt_gemm_args *g) {
    cgm_status status = cgm_lt_epilogue_check(g);
    return status != CGM_SUCCESS ? status : cgm_lt_check(g);
}

cgm_status cgm_lt_prepare(cgm_lt *lt, const cgm_lt_gemm_args *g,
                          size_t workspace_bytes, cudaStream_t after,
                          int64_t timeout_ms) {
    cgm_status status = check_args(g);
    if (status != CGM_SUCCESS || g->m == 0 || g->n == 0 || g->k == 0)
        return status;
    lt_key key = make_key(g, workspace_bytes);
    lt_entry *e = NULL;
    CGM_TRY(lookup(lt, &key, &e));
    /* Epilogues that write aux or a bias gradient are not timed: the
     * timed runs would write the caller's memory beside the real GEMM. */
    if (e->searched || lt->search < 2 || cgm_lt_epilogue_writes(g->epilogue))
        return CGM_SUCCESS;
    status = search_entry(lt, e, g, after, timeout_ms);
fail:
    return status;
}

cgm_status cgm_lt_gemm(cgm_lt *lt, const cgm_lt_gemm_args *g, void *workspace,
                       size_t workspace_bytes, cudaStream_t stream) {
    cgm_status status = check_args(g);
    if (status != CGM_SUCCESS) return status;
    if (g->addend && g->accumulate)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "cgm_lt_gemm: an addend and accumulate together "
                         "(cuBLASLt takes one C); please report this bug");
    /* This call's amax, whatever cuBLASLt does with the value it finds
     * there (and 0 for an empty Y). */
    if (g->amax_y)
        CGM_CUDA_TRY(cudaMemsetAsync(g->amax_y, 0, sizeof(float), stream));
    if (g->m == 0 || g->n == 0) return CGM_SUCCESS;
    lt_key key = make_key(g, workspace_bytes);
    lt_entry *e = NULL;
    CGM_TRY(lookup(lt, &key, &e));
    CGM_TRY(set_pointers(e, g, g->amax_y));
    float alpha = 1.0f, beta = g->accumulate || g->addend ? 1.0f : 0.0f;
    if (g->k == 0 && !g->accumulate && !g->bias && !g->addend &&
        g->epilogue == CGM_EPILOGUE_NONE) {
        /* Empty contraction: cuBLASLt may reject k = 0; the result is 0. */
        CGM_CUDA_TRY(cudaMemset2DAsync(
            g->y, (size_t)g->ldy * cgm_dtype_size(g->out_dtype), 0,
            (size_t)g->n * cgm_dtype_size(g->out_dtype), (size_t)g->m,
            stream));
        return CGM_SUCCESS;
    }
    CGM_CUBLAS_TRY(cublasLtMatmul(lt->handle, e->desc, &alpha, g->w, e->a,
                                  g->x, e->b, &beta, c_pointer(e, g, g->y),
                                  c_layout(e), g->y, e->c, &e->algo, workspace,
                                  workspace_bytes, stream));
fail:
    return status;
}
