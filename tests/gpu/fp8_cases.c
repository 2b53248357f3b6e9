/* The fp8 cases of the GPU backends' tests (fp8_cases.h): every op (AG+GEMM with
 * x_gathered and its scales, GEMM+RS, GEMM+AR, bulk's GEMM), the TENSOR and
 * BLOCK recipes, e4m3 x e4m3 and e4m3 x e5m2, bf16, fp32 and fp8 (scaled,
 * with amax) outputs, biases, uneven shards and m < P, shapes cuBLASLt
 * takes as they are and shapes padded for it (n, k not multiples of 16).
 * The reference is computed on the host in double from the dequantized
 * operands: the codes have at most 3 significant bits and the scales are
 * powers of two, so fp32 sums are exact and the tolerance is the output's
 * rounding. test_gpu_nccl_fp8.c and test_gpu_p2p_fp8.c run them on their
 * backend's ranks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_api.h>

#include "core/core.h"
#include "fp8_cases.h"
#include "gpu_check.h"

#define GCHECK GPU_CHECK

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
                 (c + 0x94d049bb133111ebull);
    h ^= h >> 31;
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 29);
}

/* Codes of values in {0, +-1/4, +-1/2, +-3/4, +-1, +-5/4, +-3/2, +-7/4, +-2}
 * (exact in e4m3 and e5m2). */
static uint8_t code_of(cgm_dtype dt, uint64_t seed, int64_t i, int64_t j) {
    int v = (int)(mix(seed, (uint64_t)i, (uint64_t)j) % 17) - 8;
    for (int c = 0; c < 256; c++)
        if (test_fp8_value(c, dt) == v / 4.0) return (uint8_t)c;
    TEST_FAIL("no fp8 code for %d/4", v);
    return 0;
}

/* A logical fp8 matrix with its scales, host side: codes [rows, cols] and
 * the header's scale layout for `scaling` (TENSOR: one). */
typedef struct hmat {
    cgm_dtype dt;
    cgm_scaling scaling;
    int64_t rows, cols, kb;
    uint8_t *codes;
    float *scales;
    int64_t nscales;
} hmat;

static hmat hmat_make(cgm_dtype dt, cgm_scaling sc, int64_t rows, int64_t cols, uint64_t seed) {
    hmat h = {dt, sc, rows, cols, cgm_ceil_div(cols, 128), NULL, NULL, 0};
    h.codes = malloc((size_t)(rows * cols) + 1);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) h.codes[i * cols + j] = code_of(dt, seed, i, j);
    int64_t srows = sc == CGM_SCALING_TENSOR ? 1 : sc == CGM_SCALING_BLOCK_1X128 ? rows : cgm_ceil_div(rows, 128);
    h.nscales = sc == CGM_SCALING_TENSOR ? 1 : srows * h.kb;
    h.scales = malloc((size_t)(h.nscales + 1) * sizeof(float));
    for (int64_t s = 0; s < h.nscales; s++) /* 1/2, 1, 2 */
        h.scales[s] = (float)ldexp(1.0, (int)(mix(seed, 7, (uint64_t)s) % 3) - 1);
    return h;
}

static void hmat_free(hmat *h) {
    free(h->codes);
    free(h->scales);
}

static double hval(const hmat *h, int64_t i, int64_t j) {
    double s = h->scaling == CGM_SCALING_TENSOR ? h->scales[0]
               : h->scaling == CGM_SCALING_BLOCK_1X128 ? h->scales[i * h->kb + j / 128]
                                                       : h->scales[(i / 128) * h->kb + j / 128];
    return test_fp8_value(h->codes[i * h->cols + j], h->dt) * s;
}

/* Device copy of rows [r0, r0 + rows) (data 16-byte aligned, dense) with
 * those rows' scales (TENSOR: the one; BLOCK_1X128: theirs; 128X128: all). */
static cgm_matrix upload(const hmat *h, int64_t r0, int64_t rows) {
    cgm_matrix d = cgm_matrix_make(NULL, h->dt, rows, h->cols);
    GCHECK(cudaMalloc(&d.data, (size_t)(rows * h->cols) + 16));
    if (rows * h->cols > 0)
        GCHECK(cudaMemcpy(d.data, h->codes + r0 * h->cols, (size_t)(rows * h->cols), cudaMemcpyHostToDevice));
    const float *src = h->scales;
    int64_t n = h->nscales;
    if (h->scaling == CGM_SCALING_BLOCK_1X128) src += r0 * h->kb, n = rows * h->kb;
    float *s = NULL;
    GCHECK(cudaMalloc((void **)&s, (size_t)(n + 4) * sizeof(float)));
    if (n) GCHECK(cudaMemcpy(s, src, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    d.scale = s;
    d.scaling = h->scaling;
    return d;
}

static void dfree(cgm_matrix *d) {
    cudaFree(d->data);
    cudaFree((void *)d->scale);
}

static cgm_matrix dalloc(cgm_dtype dt, int64_t rows, int64_t cols) {
    cgm_matrix d = cgm_matrix_make(NULL, dt, rows, cols);
    size_t bytes = (size_t)(rows * cols) * cgm_dtype_size(dt) + 16;
    GCHECK(cudaMalloc(&d.data, bytes));
    GCHECK(cudaMemset(d.data, 0xff, bytes));
    return d;
}

static float *dfloats(int64_t n, float value) {
    float *p = NULL;
    float *h = malloc((size_t)(n + 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) h[i] = value;
    GCHECK(cudaMalloc((void **)&p, (size_t)(n + 4) * sizeof(float)));
    if (n) GCHECK(cudaMemcpy(p, h, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return p;
}

#define Y_SCALE 2.0

/* bias[j] = ((j % 5) - 2) / 4, exact in bf16 (its bits: fp32's top half). */
static double bias_of(int64_t j) { return (double)((j % 5) - 2) / 4.0; }

static cgm_matrix bias_upload(int64_t n) {
    uint16_t *h = malloc((size_t)n * 2 + 2);
    for (int64_t j = 0; j < n; j++) {
        float f = (float)bias_of(j);
        uint32_t bits;
        memcpy(&bits, &f, 4);
        h[j] = (uint16_t)(bits >> 16);
    }
    cgm_matrix d = dalloc(CGM_DTYPE_BF16, 1, n);
    GCHECK(cudaMemcpy(d.data, h, (size_t)n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static double y_value(const cgm_matrix *h, int64_t i, int64_t j) {
    if (!cgm_dtype_is_fp8(h->dtype)) return test_get(h, i, j);
    return test_fp8_value(((const uint8_t *)h->data)[i * h->cols + j], h->dtype);
}

/* Y (device, dense) against ref [rows, n] (before y's scale); the amax
 * (device, may be NULL) against max |ref|. */
static void expect_y(const fp8_case *c, const cgm_matrix *y, const double *ref, const float *amax,
                     const char *what) {
    cgm_matrix h = test_alloc(y->dtype, y->rows, y->cols, 0);
    size_t es = cgm_dtype_size(y->dtype);
    if (y->rows * y->cols > 0)
        GCHECK(cudaMemcpy(h.data, y->data, (size_t)(y->rows * y->cols) * es, cudaMemcpyDeviceToHost));
    const bool fp8 = cgm_dtype_is_fp8(c->yd);
    const double big = c->yd == CGM_DTYPE_FP8_E5M2 ? 57344.0 : 448.0;
    /* fp8_fast_accum: Hopper's fp8 MMA adds with fewer bits than fp32
     * over the whole k (docs/FP8.md): 2^-13 of the magnitude per 32-wide
     * k step, loosely bounded here by a relative 2^-13 ceil(k / 32) */
    const double fast = c->fast_accum ? ldexp((double)((c->k + 31) / 32), -13) : 0;
    const double rel = (c->yd == CGM_DTYPE_FP8_E5M2 ? 1.0 / 8 : fp8 ? 1.0 / 16
                        : c->yd == CGM_DTYPE_BF16 ? 1.0 / 256 : 1e-6) + fast;
    double want_amax = 0;
    int64_t wrong = 0;
    for (int64_t i = 0; i < y->rows; i++)
        for (int64_t j = 0; j < y->cols; j++) {
            double r = ref[i * y->cols + j], e = fp8 ? r * Y_SCALE : r;
            want_amax = fmax(want_amax, fabs(r));
            if (fp8) e = fmax(-big, fmin(big, e));
            double got = y_value(&h, i, j);
            if (!(fabs(got - e) <= rel * fabs(e) + 1.0 / 512)) {
                if (wrong++ < 5)
                    printf("  %s: Y(%lld, %lld) = %g, expected %g\n", what, (long long)i, (long long)j, got, e);
            }
        }
    test_free(&h);
    if (wrong) TEST_FAIL("%s: %lld elements of Y wrong", what, (long long)wrong);
    if (!amax) return;
    float got = -1;
    GCHECK(cudaMemcpy(&got, amax, sizeof got, cudaMemcpyDeviceToHost));
    if (fabs(got - want_amax) > 1e-6 * want_amax)
        TEST_FAIL("%s: amax %g, expected %g", what, (double)got, want_amax);
}

/* ref[i, j] (rows [r0, r0 + rows) of the op's product) += sum_l X(i - xr0, l) W(j, l). */
static void ref_add(double *ref, const hmat *x, int64_t xr0, const hmat *w, int64_t r0, int64_t rows, int64_t n) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < x->cols; l++) s += hval(x, r0 + i - xr0, l) * hval(w, j, l);
            ref[i * n + j] += s;
        }
}

static const char *describe(const fp8_case *c, int P, char *buf, size_t len) {
    snprintf(buf, len, "P=%d %s %s %s x %s -> %s m=%lld n=%lld k=%lld bias=%d algo=%s%s", P, cgm_op_name(c->op),
             c->block ? "block" : "tensor", cgm_dtype_name(c->xd), cgm_dtype_name(c->wd),
             cgm_dtype_name(c->yd), (long long)c->m, (long long)c->n, (long long)c->k, c->bias,
             cgm_algo_name(c->algo), c->fast_accum ? " fast_accum" : "");
    return buf;
}

/* AG: x_gathered's bytes and scales are the shards'. */
static void expect_gathered(const hmat *xs, int P, int64_t m, const cgm_matrix *xg, const char *what) {
    const hmat *x0 = &xs[0];
    size_t bytes = (size_t)(m * x0->cols);
    uint8_t *codes = malloc(bytes + 1);
    int64_t nsc = x0->scaling == CGM_SCALING_TENSOR ? P : m * x0->kb;
    float *sc = malloc((size_t)(nsc + 1) * sizeof(float));
    if (bytes) GCHECK(cudaMemcpy(codes, xg->data, bytes, cudaMemcpyDeviceToHost));
    if (nsc) GCHECK(cudaMemcpy(sc, xg->scale, (size_t)nsc * sizeof(float), cudaMemcpyDeviceToHost));
    for (int s = 0; s < P; s++) {
        int64_t off = cgm_shard_offset(m, s, P), rows = cgm_shard_rows(m, s, P);
        if (rows && memcmp(codes + off * x0->cols, xs[s].codes, (size_t)(rows * x0->cols)))
            TEST_FAIL("%s: x_gathered's rows of shard %d differ from rank %d's X", what, s, s);
        if (!rows) continue;
        if (x0->scaling == CGM_SCALING_TENSOR ? sc[s] != xs[s].scales[0]
                                              : memcmp(sc + off * x0->kb, xs[s].scales,
                                                       (size_t)(rows * x0->kb) * sizeof(float)))
            TEST_FAIL("%s: x_gathered's scales of shard %d differ from rank %d's", what, s, s);
    }
    free(codes);
    free(sc);
}

void fp8_run_case(const fp8_rank *g, const fp8_case *c, bool amax_ok) {
    const int P = g->nranks, r = g->rank;
    const cgm_scaling xsc = c->block ? CGM_SCALING_BLOCK_1X128 : CGM_SCALING_TENSOR;
    const cgm_scaling wsc = c->block ? CGM_SCALING_BLOCK_128X128 : CGM_SCALING_TENSOR;
    const bool ag = c->op == CGM_OP_ALL_GATHER_GEMM, rs = c->op == CGM_OP_GEMM_REDUCE_SCATTER;
    const int nx = c->op == CGM_OP_BULK ? 1 : P;
    char what[256];
    describe(c, P, what, sizeof what);
    hmat xs[64], ws[64];
    for (int s = 0; s < nx; s++) {
        int who = c->op == CGM_OP_BULK ? r : s;
        xs[s] = hmat_make(c->xd, xsc, ag ? cgm_shard_rows(c->m, s, P) : c->m, c->k, 100 + (uint64_t)who);
        ws[s] = hmat_make(c->wd, wsc, c->n, c->k, 200 + (uint64_t)(ag ? r : who));
    }
    const int me = c->op == CGM_OP_BULK ? 0 : r;
    const int64_t y0 = rs ? cgm_shard_offset(c->m, r, P) : 0;
    const int64_t yrows = rs ? cgm_shard_rows(c->m, r, P) : c->m;
    double *ref = calloc((size_t)(yrows * c->n) + 1, sizeof(double));
    for (int s = 0; s < nx; s++) {
        if (ag) {
            int64_t off = cgm_shard_offset(c->m, s, P);
            ref_add(ref + off * c->n, &xs[s], off, &ws[0], off, xs[s].rows, c->n);
        } else {
            ref_add(ref, &xs[s], 0, &ws[s], y0, yrows, c->n);
        }
    }
    for (int64_t i = 0; i < yrows && c->bias; i++)
        for (int64_t j = 0; j < c->n; j++) ref[i * c->n + j] += bias_of(j);
    cgm_matrix x = upload(&xs[me], 0, xs[me].rows), w = upload(&ws[ag ? 0 : me], 0, c->n);
    cgm_matrix y = dalloc(c->yd, yrows, c->n), bias = bias_upload(c->n);
    cgm_matrix xg = dalloc(c->xd, c->m, c->k);
    xg.scaling = xsc;
    xg.scale = dfloats(xsc == CGM_SCALING_TENSOR ? P : c->m * cgm_ceil_div(c->k, 128), -1.0f);
    float *amax = cgm_dtype_is_fp8(c->yd) && amax_ok ? dfloats(1, -1.0f) : NULL;
    float *ys = dfloats(1, (float)Y_SCALE);
    if (cgm_dtype_is_fp8(c->yd)) y.scale = ys, y.scaling = CGM_SCALING_TENSOR;
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.algo = c->algo;
    o.fp8_fast_accum = c->fast_accum;
    o.y_amax = amax;
    o.partial_dtype = CGM_PARTIAL_DTYPE_FP32; /* exact sums: the tolerance is Y's rounding */
    const cgm_matrix *b = c->bias ? &bias : NULL;
    cgm_status st;
    switch (c->op) {
    case CGM_OP_ALL_GATHER_GEMM: st = cgm_all_gather_gemm(g->comm, &x, &w, b, &y, &xg, &o, g->stream); break;
    case CGM_OP_GEMM_REDUCE_SCATTER: st = cgm_gemm_reduce_scatter(g->comm, &x, &w, b, &y, &o, g->stream); break;
    case CGM_OP_GEMM_ALL_REDUCE: st = cgm_gemm_all_reduce(g->comm, &x, &w, b, &y, &o, g->stream); break;
    default:
        st = cgm_bulk_overlap(g->comm, &x, &w, b, &y, CGM_COLLECTIVE_ALL_GATHER, NULL, NULL, &o, g->stream);
        break;
    }
    if (st != CGM_SUCCESS) TEST_FAIL("%s: %s: %s", what, cgm_status_string(st), cgm_last_error());
    GCHECK(cudaStreamSynchronize(g->stream));
    expect_y(c, &y, ref, amax, what);
    if (ag) expect_gathered(xs, P, c->m, &xg, what);
    dfree(&x), dfree(&w), dfree(&xg);
    cudaFree(y.data), cudaFree(bias.data), cudaFree(amax), cudaFree(ys);
    free(ref);
    for (int s = 0; s < nx; s++) hmat_free(&xs[s]), hmat_free(&ws[s]);
}

void fp8_need_hopper(void) {
    int dev = 0, major = 0, minor = 0;
    GCHECK(cudaGetDevice(&dev));
    GCHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    GCHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (major != 9)
        TEST_SKIP("GPU %d has compute capability %d.%d: the fp8 cases (block scaling included) need a "
                  "Hopper GPU (9.x)", dev, major, minor);
#if CUBLAS_VER_MAJOR * 100 + CUBLAS_VER_MINOR < 1209
    TEST_SKIP("built with cuBLAS %d.%d: fp8 block scaling needs 12.9+", CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);
#endif
}

void fp8_sweep(const fp8_rank *g, cgm_op op, bool ar_amax) {
    fp8_need_hopper();
    static const cgm_dtype types[][3] = {
        {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_BF16},
        {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E5M2, CGM_DTYPE_FP32},
        {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E4M3},
        {CGM_DTYPE_FP8_E4M3, CGM_DTYPE_FP8_E5M2, CGM_DTYPE_FP8_E5M2},
    };
    /* cuBLASLt's shapes as they are; uneven shards with n and k padded
     * (two k-blocks, L4 padding); m < P. */
    static const int64_t shapes[][3] = {{64, 64, 256}, {37, 40, 200}, {1, 16, 128}};
    static const cgm_algo algos[] = {CGM_ALGO_SPLIT_PIPELINED, CGM_ALGO_RING, CGM_ALGO_NO_OVERLAP};
    for (int blk = 0; blk < 2; blk++)
        for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                for (size_t a = 0; a < (op == CGM_OP_BULK ? 1 : sizeof algos / sizeof algos[0]); a++) {
                    fp8_case c = {op, types[t][0], types[t][1], types[t][2], blk == 1, (s + t) % 2 == 0,
                                  shapes[s][0], shapes[s][1], shapes[s][2],
                                  op == CGM_OP_BULK ? CGM_ALGO_AUTO : algos[a], false};
                    fp8_run_case(g, &c, op != CGM_OP_GEMM_ALL_REDUCE || ar_amax);
                }
}
