/* cuBLASLt's measured search (gpu/lt_gemm.c, COMMGEMM_LT_SEARCH):
 * cgm_lt_prepare times a shape once, never writes the caller's output, and
 * the GEMM it leads to gives the heuristic's result up to rounding; a value
 * out of range is refused; the GEMM reduction is part of what a shape's
 * entry is kept for. cuBLASLt's FP8 GEMMs (gpu/lt_gemm_fp8.c): tensor and
 * block scaling against a double reference, row chunks, amax, the cache's
 * keys, and the refusals. One process, one GPU (skips without one; the
 * refusals need only a cuBLASLt handle). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#include "gpu/gpu.h"
#include "gpu/lt_gemm_fp8.h"
#include "gpu_check.h"
#include "gpu_ref.h"


static void need_gpu(void) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0)
        TEST_SKIP("no CUDA device: cudaGetDeviceCount returned %d (%s)", (int)err,
                  cudaGetErrorString(err));
}

#define WS_BYTES ((size_t)32 << 20)

typedef struct lt_fixture {
    int64_t m, n, k;
    void *x, *w, *y, *bias, *ws;
    cudaStream_t stream;
} lt_fixture;

static void fixture_make(lt_fixture *f, int64_t m, int64_t n, int64_t k) {
    memset(f, 0, sizeof *f);
    f->m = m;
    f->n = n;
    f->k = k;
    GPU_CHECK(cudaStreamCreateWithFlags(&f->stream, cudaStreamNonBlocking));
    GPU_CHECK(cudaMalloc(&f->x, (size_t)(m * k) * 2));
    GPU_CHECK(cudaMalloc(&f->w, (size_t)(n * k) * 2));
    GPU_CHECK(cudaMalloc(&f->y, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc(&f->bias, (size_t)n * 2));
    GPU_CHECK(cudaMalloc(&f->ws, WS_BYTES));
    GPU_CHECK(tref_fill(f->x, CGM_DTYPE_BF16, m, k, k, 1, 0, 0, k, f->stream));
    GPU_CHECK(tref_fill(f->w, CGM_DTYPE_BF16, n, k, k, 2, 0, 0, k, f->stream));
    GPU_CHECK(tref_fill(f->y, CGM_DTYPE_BF16, m, n, n, 3, 0, 0, n, f->stream));
    GPU_CHECK(tref_fill(f->bias, CGM_DTYPE_BF16, 1, n, n, 4, 0, 0, n, f->stream));
    GPU_CHECK(cudaStreamSynchronize(f->stream));
}

static void fixture_free(lt_fixture *f) {
    cudaFree(f->x);
    cudaFree(f->w);
    cudaFree(f->y);
    cudaFree(f->bias);
    cudaFree(f->ws);
    cudaStreamDestroy(f->stream);
}

static cgm_lt_gemm_args args_of(const lt_fixture *f, bool bias, bool accumulate) {
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = g.out_dtype = CGM_DTYPE_BF16;
    g.m = f->m;
    g.n = f->n;
    g.k = f->k;
    g.x = f->x;
    g.ldx = f->k;
    g.w = f->w;
    g.ldw = f->k;
    g.y = f->y;
    g.ldy = f->n;
    g.bias = bias ? f->bias : NULL;
    g.accumulate = accumulate;
    return g;
}

static float *fetch_bf16(const void *dev, int64_t count) {
    uint16_t *raw = malloc((size_t)count * 2);
    float *out = malloc((size_t)count * sizeof *out);
    GPU_CHECK(cudaMemcpy(raw, dev, (size_t)count * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < count; i++) {
        uint32_t bits = (uint32_t)raw[i] << 16;
        memcpy(&out[i], &bits, sizeof bits);
    }
    free(raw);
    return out;
}

static cgm_lt *lt_with(int search) {
    cgm_lt *lt = NULL;
    CHECK_STATUS(cgm_lt_create(&lt), CGM_SUCCESS);
    cgm_lt_set_search(lt, search);
    return lt;
}

/* Fails unless got and want (f's output, bf16 read as float) agree within
 * bf16 rounding of either algorithm: 1 % of |want| + sqrt(k). */
static void expect_same_rounding(const lt_fixture *f, const float *got, const float *want, const char *what) {
    int64_t bad = 0;
    double scale = sqrt((double)f->k);
    for (int64_t i = 0; i < f->m * f->n; i++)
        if (!(fabs((double)got[i] - want[i]) <= 1e-2 * (fabs(want[i]) + scale))) bad++;
    if (bad) TEST_FAIL("%lld of %lld values differ from %s", (long long)bad, (long long)(f->m * f->n), what);
}

/* Searched once per shape, the output untouched by the search, and the
 * result within bf16 rounding of the heuristic's first algorithm. Shapes:
 * m not a multiple of any tile, and one of the bench's. */
static void test_search(const void *param) {
    const int64_t *s = param;
    need_gpu();
    lt_fixture f;
    fixture_make(&f, s[0], s[1], s[2]);
    cgm_lt *searched = lt_with(8), *first = lt_with(1);
    uint64_t searches = 0, improved = 0;
    for (int accumulate = 0; accumulate < 2; accumulate++) {
        cgm_lt_gemm_args g = args_of(&f, true, accumulate);
        float *before = fetch_bf16(f.y, f.m * f.n);
        CHECK_STATUS(cgm_lt_prepare(searched, &g, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
        CHECK_STATUS(cgm_lt_prepare(searched, &g, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
        cgm_lt_search_stats(searched, &searches, &improved);
        CHECK_INT_EQ((long long)searches, accumulate + 1);
        CHECK(improved <= searches);
        float *after = fetch_bf16(f.y, f.m * f.n);
        CHECK(memcmp(before, after, (size_t)(f.m * f.n) * sizeof(float)) == 0);
        /* The heuristic's first on the same input (accumulate: the same Y). */
        CHECK_STATUS(cgm_lt_gemm(first, &g, f.ws, WS_BYTES, f.stream), CGM_SUCCESS);
        GPU_CHECK(cudaStreamSynchronize(f.stream));
        float *want = fetch_bf16(f.y, f.m * f.n);
        /* Put the input Y back (as bf16) and run the searched choice. */
        uint16_t *raw = malloc((size_t)(f.m * f.n) * 2);
        for (int64_t i = 0; i < f.m * f.n; i++) {
            uint32_t bits;
            memcpy(&bits, &before[i], sizeof bits);
            raw[i] = (uint16_t)(bits >> 16);
        }
        GPU_CHECK(cudaMemcpy(f.y, raw, (size_t)(f.m * f.n) * 2, cudaMemcpyHostToDevice));
        CHECK_STATUS(cgm_lt_gemm(searched, &g, f.ws, WS_BYTES, f.stream), CGM_SUCCESS);
        GPU_CHECK(cudaStreamSynchronize(f.stream));
        float *got = fetch_bf16(f.y, f.m * f.n);
        expect_same_rounding(&f, got, want, "the heuristic's algorithm");
        free(raw);
        free(before);
        free(after);
        free(want);
        free(got);
    }
    printf("m=%lld n=%lld k=%lld: %llu searches, %llu changed the algorithm\n", (long long)f.m,
           (long long)f.n, (long long)f.k, (unsigned long long)searches, (unsigned long long)improved);
    cgm_lt_destroy(searched);
    cgm_lt_destroy(first);
    fixture_free(&f);
}

/* COMMGEMM_LT_SEARCH=1 (the variable is read once per process, and every
 * case runs in its own): prepare builds the entry and times nothing. */
static void test_search_off(const void *param) {
    (void)param;
    need_gpu();
    setenv("COMMGEMM_LT_SEARCH", "1", 1);
    lt_fixture f;
    fixture_make(&f, 256, 512, 128);
    cgm_lt *lt = NULL;
    CHECK_STATUS(cgm_lt_create(&lt), CGM_SUCCESS);
    cgm_lt_gemm_args g = args_of(&f, false, false);
    CHECK_STATUS(cgm_lt_prepare(lt, &g, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
    uint64_t searches = 1, improved = 1;
    cgm_lt_search_stats(lt, &searches, &improved);
    CHECK_INT_EQ((long long)searches, 0);
    CHECK_INT_EQ((long long)improved, 0);
    cgm_lt_destroy(lt);
    fixture_free(&f);
}

static void CUDART_CB sleep_host(void *arg) { usleep((useconds_t)(uintptr_t)arg); }

/* The caller's stream is held by earlier work for 1.5 s and the bound is
 * 100 ms: prepare returns CGM_ERROR_TIMEOUT naming the way out, promptly
 * (no wait on the private stream on the way out), and once the stream has
 * drained the same shape is used as usual. */
static void test_search_timeout(const void *param) {
    (void)param;
    need_gpu();
    lt_fixture f;
    /* test_search's bench shape, where the heuristic offers several
     * algorithms (with one there is nothing to time and nothing to wait). */
    fixture_make(&f, 2048, 2048, 2048);
    cgm_lt_gemm_args g = args_of(&f, true, false);
    /* A kernel's first launch loads its module (CUDA's lazy loading), and
     * that waits for the work already on the device: a first search of
     * this shape would wait out the host function below inside
     * cublasLtMatmul, past any bound of ours (a run of this test without it:
     * success after 1517 ms). So the candidates run once first, through
     * another handle, and the bounded wait is what is left to test. */
    cgm_lt *loader = lt_with(8);
    CHECK_STATUS(cgm_lt_prepare(loader, &g, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
    GPU_CHECK(cudaStreamSynchronize(f.stream));
    cgm_lt_destroy(loader);
    cgm_lt *lt = lt_with(8);
    GPU_CHECK(cudaLaunchHostFunc(f.stream, sleep_host, (void *)(uintptr_t)1500000));
    int64_t t0 = cgm_now_ns();
    cgm_status got = cgm_lt_prepare(lt, &g, WS_BYTES, f.stream, 100);
    if (got != CGM_ERROR_TIMEOUT) {
        uint64_t searches = 0, improved = 0;
        cgm_lt_search_stats(lt, &searches, &improved);
        TEST_FAIL("cgm_lt_prepare returned %d after %.1f ms, expected CGM_ERROR_TIMEOUT; "
                  "searches %llu (0: the heuristic offered one algorithm)", (int)got,
                  (double)(cgm_now_ns() - t0) / 1e6, (unsigned long long)searches);
    }
    CHECK(cgm_now_ns() - t0 < 1000000000LL);
    CHECK_CONTAINS(cgm_last_error(), "cuBLASLt search m=2048 n=2048 k=2048: waited 100 ms");
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_LT_SEARCH=1");
    GPU_CHECK(cudaStreamSynchronize(f.stream));
    CHECK_STATUS(cgm_lt_prepare(lt, &g, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
    CHECK_STATUS(cgm_lt_gemm(lt, &g, f.ws, WS_BYTES, f.stream), CGM_SUCCESS);
    GPU_CHECK(cudaStreamSynchronize(f.stream));
    cgm_lt_destroy(lt);
    fixture_free(&f);
}

/* Out of range or not a number: refused, naming the variable and what it
 * expects (no GPU needed: it is read before cuBLASLt is touched). */
static void test_search_bad(const void *param) {
    const char *const *c = param;
    cgm_lt *lt = NULL;
    setenv("COMMGEMM_LT_SEARCH", c[0], 1);
    CHECK_STATUS(cgm_lt_create(&lt), CGM_ERROR_INVALID_ARGUMENT);
    CHECK(lt == NULL);
    CHECK_CONTAINS(cgm_last_error(), c[1]);
}

static const char *const bad_zero[2] = {"0", "COMMGEMM_LT_SEARCH=0: expected 1..16"};
static const char *const bad_high[2] = {"17", "COMMGEMM_LT_SEARCH=17: expected 1..16"};
static const char *const bad_word[2] = {"lots", "COMMGEMM_LT_SEARCH=\"lots\": expected an integer"};

/* One handle, one shape, both GEMM reductions: each is its own cache
 * entry, searched once (an entry shared by both would run the algorithm
 * found for the first under the second's rule), and the fp32 one gives the
 * heuristic's fp32-reduction result up to rounding. */
static void test_reduction_keyed(const void *param) {
    const int64_t *s = param;
    need_gpu();
    lt_fixture f;
    fixture_make(&f, s[0], s[1], s[2]);
    cgm_lt *lt = lt_with(8), *first = lt_with(1);
    uint64_t searches = 0, improved = 0;
    cgm_lt_gemm_args any = args_of(&f, false, false), exact = any;
    exact.reduction_fp32 = true;
    CHECK_STATUS(cgm_lt_prepare(lt, &any, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
    CHECK_STATUS(cgm_lt_prepare(lt, &exact, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
    CHECK_STATUS(cgm_lt_prepare(lt, &exact, WS_BYTES, f.stream, 60000), CGM_SUCCESS);
    cgm_lt_search_stats(lt, &searches, &improved);
    CHECK_INT_EQ((long long)searches, 2);
    CHECK_STATUS(cgm_lt_gemm(first, &exact, f.ws, WS_BYTES, f.stream), CGM_SUCCESS);
    GPU_CHECK(cudaStreamSynchronize(f.stream));
    float *want = fetch_bf16(f.y, f.m * f.n);
    CHECK_STATUS(cgm_lt_gemm(lt, &exact, f.ws, WS_BYTES, f.stream), CGM_SUCCESS);
    GPU_CHECK(cudaStreamSynchronize(f.stream));
    float *got = fetch_bf16(f.y, f.m * f.n);
    expect_same_rounding(&f, got, want, "the heuristic's fp32-reduction algorithm");
    free(want);
    free(got);
    cgm_lt_destroy(lt);
    cgm_lt_destroy(first);
    fixture_free(&f);
}

/* ------------------------------------------------------------------ fp8
 * cuBLASLt's FP8 GEMMs (gpu.h's rules): the result against a double
 * reference of the dequantized values, per output dtype; row chunks (one
 * call per X scale group, parts of a group) against the reference and
 * against one whole call; amax; and every refusal. */

static bool is_fp8(cgm_dtype t) { return t == CGM_DTYPE_FP8_E4M3 || t == CGM_DTYPE_FP8_E5M2; }

/* The value of an fp8 byte (OCP e4m3: bias 7, no inf, S.1111.111 NaN;
 * e5m2: bias 15, IEEE-like). */
static double fp8_value(uint8_t b, cgm_dtype t) {
    double v;
    if (t == CGM_DTYPE_FP8_E4M3) {
        int e = (b >> 3) & 15, m = b & 7;
        if (e == 15 && m == 7) return NAN;
        v = e ? ldexp(1 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    } else {
        int e = (b >> 2) & 31, m = b & 3;
        if (e == 31) return m ? NAN : INFINITY;
        v = e ? ldexp(1 + m / 4.0, e - 15) : ldexp(m / 4.0, -14);
    }
    return b & 0x80 ? -v : v;
}

static uint64_t mix(uint64_t seed, uint64_t i) {
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + i + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* An fp8 byte of magnitude 2^-3 .. 2^4, either sign: no zero, no NaN. */
static uint8_t fp8_code(uint64_t h, cgm_dtype t) {
    unsigned sign = (unsigned)(h & 1) << 7, e = (unsigned)((h >> 1) % 7);
    if (t == CGM_DTYPE_FP8_E4M3) return (uint8_t)(sign | (4 + e) << 3 | ((h >> 8) & 7));
    return (uint8_t)(sign | (12 + e) << 2 | ((h >> 8) & 3));
}

static uint16_t bf16_bits(float v) { /* v exact in bf16 */
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return (uint16_t)(b >> 16);
}

static uint16_t fp16_bits(double v) { /* v exact in fp16, normal or 0 */
    if (v == 0) return 0;
    int e = 0;
    double f = frexp(fabs(v), &e);
    return (uint16_t)((v < 0) << 15 | (e + 14) << 10 | (int)((f * 2 - 1) * 1024));
}

static double fp16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1 + m / 1024.0, e - 15) : ldexp(m / 1024.0, -14);
    return h & 0x8000 ? -v : v;
}

static double out_value(const void *y, int64_t i, cgm_dtype t) {
    const unsigned char *p = y;
    switch (t) {
    case CGM_DTYPE_FP32: { float v; memcpy(&v, p + i * 4, 4); return v; }
    case CGM_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p + i * 2, 2);
        uint32_t b = (uint32_t)h << 16;
        float v;
        memcpy(&v, &b, 4);
        return v;
    }
    case CGM_DTYPE_FP16: { uint16_t h; memcpy(&h, p + i * 2, 2); return fp16_value(h); }
    default: return fp8_value(p[i], t);
    }
}

/* Relative rounding of an output dtype (a half ulp, and twice that for the
 * chunked-vs-whole comparison), and its smallest step near 0. */
static double out_eps(cgm_dtype t) {
    switch (t) {
    case CGM_DTYPE_FP32: return ldexp(1, -20);
    case CGM_DTYPE_BF16: return ldexp(1, -8);
    case CGM_DTYPE_FP16: return ldexp(1, -10);
    case CGM_DTYPE_FP8_E4M3: return ldexp(1, -4);
    default: return ldexp(1, -3);
    }
}
static double out_tiny(cgm_dtype t) {
    return t == CGM_DTYPE_FP8_E4M3 ? ldexp(1, -9) : t == CGM_DTYPE_FP8_E5M2 ? ldexp(1, -16) : ldexp(1, -24);
}

typedef struct fp8_case {
    cgm_dtype x, w, y; /* X's, W's and the output's dtypes */
    cgm_lt_scaling scaling;
    bool bias, amax, fast_accum, prepare; /* prepare: cgm_lt_prepare each call first */
    int64_t m, n, k;
    int64_t groups; /* X scale groups (shards): one call per group at least */
    int chunks;     /* calls per group (1: the group in one call) */
} fp8_case;

/* Host and device operands of a case, and its double reference. */
typedef struct fp8_data {
    const fp8_case *c;
    int64_t per, blocks, blocks4, ldy, wblocks; /* rows per group, L, L4, .., ceil(n/128) */
    uint8_t *hx, *hw;
    float *hxs, *hws, hys;
    unsigned char *hbias;
    double *ref, *sumabs, amax_ref, sumabs_max;
    void *x, *w, *bias, *y, *y_whole;
    float *xs, *ws, *ys, *amax, *pack;
    size_t y_bytes;
} fp8_data;

/* The bias's dtype: fp16 for fp16 outputs, bf16 for bf16 and fp32 ones;
 * fp8 outputs take either: bf16, and fp16 where the inputs' dtypes differ
 * (so that both are run). */
static cgm_dtype case_bias_dtype(const fp8_case *c) {
    return c->y == CGM_DTYPE_FP16 || (is_fp8(c->y) && c->x != c->w) ? CGM_DTYPE_FP16 : CGM_DTYPE_BF16;
}

/* X's dequantization scale of (row i, column l) as stored in hxs (per
 * group: TENSOR one, BLOCK [L][group rows]). */
static double x_scale_of(const fp8_data *d, int64_t i, int64_t l) {
    int64_t g = i / d->per, first = g * d->per;
    int64_t gr = d->c->m - first < d->per ? d->c->m - first : d->per;
    if (d->c->scaling == CGM_LT_SCALE_TENSOR) return d->hxs[CGM_LT_TENSOR_SCALE_STRIDE * g];
    return d->hxs[d->blocks * first + (l / 128) * gr + (i - first)];
}

static double w_scale_of(const fp8_data *d, int64_t j, int64_t l) {
    if (d->c->scaling == CGM_LT_SCALE_TENSOR) return d->hws[0];
    return d->hws[(j / 128) * d->blocks4 + l / 128];
}

/* Operands: bytes of magnitude 2^-3..2^4; scales exact binary fractions,
 * block scales powers of two that differ per row and k-block (W's L4
 * padding is 1e30, which would show if it were read); bias integers. */
static void fp8_fill_host(fp8_data *d) {
    const fp8_case *c = d->c;
    d->hx = malloc((size_t)(c->m * c->k));
    d->hw = malloc((size_t)(c->n * c->k));
    for (int64_t i = 0; i < c->m * c->k; i++) d->hx[i] = fp8_code(mix(11, (uint64_t)i), c->x);
    for (int64_t i = 0; i < c->n * c->k; i++) d->hw[i] = fp8_code(mix(12, (uint64_t)i), c->w);
    if (c->scaling == CGM_LT_SCALE_TENSOR) {
        d->hxs = calloc((size_t)(CGM_LT_TENSOR_SCALE_STRIDE * c->groups), sizeof(float));
        d->hws = malloc(sizeof(float));
        for (int64_t g = 0; g < c->groups; g++) d->hxs[CGM_LT_TENSOR_SCALE_STRIDE * g] = 0.75f + 0.5f * (float)g;
        d->hws[0] = 1.25f;
    } else {
        d->hxs = malloc((size_t)(d->blocks * c->m) * sizeof(float));
        d->hws = malloc((size_t)(d->wblocks * d->blocks4) * sizeof(float));
        for (int64_t i = 0; i < c->m; i++) {
            int64_t g = i / d->per, first = g * d->per, gr = c->m - first < d->per ? c->m - first : d->per;
            for (int64_t b = 0; b < d->blocks; b++)
                d->hxs[d->blocks * first + b * gr + (i - first)] = ldexpf(1, (int)((i * 5 + b * 3) % 7) - 3);
        }
        for (int64_t j = 0; j < d->wblocks; j++)
            for (int64_t b = 0; b < d->blocks4; b++)
                d->hws[j * d->blocks4 + b] = b < d->blocks ? ldexpf(1, (int)((j * 3 + b * 5) % 5) - 2) : 1e30f;
    }
    d->hbias = malloc((size_t)c->n * 2);
    cgm_dtype bt = case_bias_dtype(c);
    for (int64_t j = 0; j < c->n; j++) {
        double v = 4.0 * (double)(j % 17 - 8);
        uint16_t b = bt == CGM_DTYPE_FP16 ? fp16_bits(v) : bf16_bits((float)v);
        memcpy(d->hbias + j * 2, &b, 2);
    }
}

/* The bias's value at column j (0 without one). */
static double bias_of(const fp8_data *d, int64_t j) {
    if (!d->c->bias) return 0;
    uint16_t b;
    memcpy(&b, d->hbias + j * 2, 2);
    return case_bias_dtype(d->c) == CGM_DTYPE_FP16 ? fp16_value(b) : out_value(&b, 0, CGM_DTYPE_BF16);
}

/* ref[i, j] = sum_l x(i,l) xs(i,l) w(j,l) ws(j,l) + bias[j] (before
 * y_scale), and the sum of the products' magnitudes (the accumulation
 * error's scale). */
static void fp8_reference(fp8_data *d) {
    const fp8_case *c = d->c;
    d->ref = malloc((size_t)(c->m * c->n) * sizeof(double));
    d->sumabs = malloc((size_t)(c->m * c->n) * sizeof(double));
    double *xv = malloc((size_t)c->k * sizeof(double)), *wv = malloc((size_t)(c->n * c->k) * sizeof(double));
    d->amax_ref = 0;
    d->sumabs_max = 0;
    for (int64_t j = 0; j < c->n; j++)
        for (int64_t l = 0; l < c->k; l++) wv[j * c->k + l] = fp8_value(d->hw[j * c->k + l], c->w) * w_scale_of(d, j, l);
    for (int64_t i = 0; i < c->m; i++) {
        for (int64_t l = 0; l < c->k; l++) xv[l] = fp8_value(d->hx[i * c->k + l], c->x) * x_scale_of(d, i, l);
        for (int64_t j = 0; j < c->n; j++) {
            double acc = 0, abs_acc = 0;
            for (int64_t l = 0; l < c->k; l++) {
                double p = xv[l] * wv[j * c->k + l];
                acc += p;
                abs_acc += fabs(p);
            }
            acc += bias_of(d, j);
            d->ref[i * c->n + j] = acc;
            d->sumabs[i * c->n + j] = abs_acc;
            if (fabs(acc) > d->amax_ref) d->amax_ref = fabs(acc);
            if (abs_acc > d->sumabs_max) d->sumabs_max = abs_acc;
        }
    }
    free(xv);
    free(wv);
    /* fp8 output: scaled to about half its largest finite value */
    d->hys = is_fp8(c->y) ? (float)((c->y == CGM_DTYPE_FP8_E4M3 ? 224.0 : 28672.0) / d->amax_ref) : 1.0f;
}

static void *upload(const void *host, size_t bytes) {
    void *dev = NULL;
    GPU_CHECK(cudaMalloc(&dev, bytes ? bytes : 16));
    if (bytes) GPU_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
    return dev;
}

static void fp8_upload(fp8_data *d) {
    const fp8_case *c = d->c;
    size_t xs_n = c->scaling == CGM_LT_SCALE_TENSOR ? (size_t)(CGM_LT_TENSOR_SCALE_STRIDE * c->groups) : (size_t)(d->blocks * c->m);
    size_t ws_n = c->scaling == CGM_LT_SCALE_TENSOR ? 1 : (size_t)(d->wblocks * d->blocks4);
    d->x = upload(d->hx, (size_t)(c->m * c->k));
    d->w = upload(d->hw, (size_t)(c->n * c->k));
    d->xs = upload(d->hxs, xs_n * sizeof(float));
    d->ws = upload(d->hws, ws_n * sizeof(float));
    d->ys = upload(&d->hys, sizeof(float));
    d->bias = upload(d->hbias, (size_t)c->n * 2);
    d->y_bytes = (size_t)(c->m * d->ldy) * cgm_dtype_size(c->y);
    GPU_CHECK(cudaMalloc(&d->y, d->y_bytes));
    GPU_CHECK(cudaMalloc(&d->y_whole, d->y_bytes));
    GPU_CHECK(cudaMemset(d->y, 0xff, d->y_bytes)); /* NaN in every dtype */
    GPU_CHECK(cudaMemset(d->y_whole, 0xff, d->y_bytes));
    GPU_CHECK(cudaMalloc((void **)&d->amax, 64 * 4 * sizeof(float)));
    GPU_CHECK(cudaMalloc((void **)&d->pack, (size_t)(d->blocks * c->m + 64 * 4) * sizeof(float)));
}

static void fp8_data_make(fp8_data *d, const fp8_case *c, int64_t ldy) {
    memset(d, 0, sizeof *d);
    d->c = c;
    d->per = (c->m + c->groups - 1) / c->groups;
    d->blocks = (c->k + 127) / 128;
    d->blocks4 = (d->blocks + 3) / 4 * 4;
    d->wblocks = (c->n + 127) / 128;
    d->ldy = ldy;
    fp8_fill_host(d);
    fp8_reference(d);
    fp8_upload(d);
}

static void fp8_data_free(fp8_data *d) {
    free(d->hx), free(d->hw), free(d->hxs), free(d->hws), free(d->hbias), free(d->ref), free(d->sumabs);
    cudaFree(d->x), cudaFree(d->w), cudaFree(d->xs), cudaFree(d->ws), cudaFree(d->ys), cudaFree(d->bias);
    cudaFree(d->y), cudaFree(d->y_whole), cudaFree(d->amax), cudaFree(d->pack);
}

/* The args of the whole GEMM (every group's X scales) into `y`. */
static cgm_lt_gemm_args fp8_whole(const fp8_data *d, void *y) {
    const fp8_case *c = d->c;
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = c->x;
    g.w_dtype = c->w;
    g.out_dtype = c->y;
    g.m = c->m, g.n = c->n, g.k = c->k;
    g.x = d->x, g.ldx = c->k, g.w = d->w, g.ldw = c->k, g.y = y, g.ldy = d->ldy;
    g.bias = c->bias ? d->bias : NULL;
    g.bias_dtype = case_bias_dtype(c);
    g.scaling = c->scaling;
    g.x_scale = d->xs;
    g.w_scale = d->ws;
    g.x_scale_rows = c->groups > 1 ? d->per : 0;
    g.y_scale = is_fp8(c->y) ? d->ys : NULL;
    g.fast_accum = c->fast_accum;
    return g;
}

static void fp8_call(cgm_lt *lt, const fp8_data *d, const cgm_lt_gemm_args *g, cudaStream_t stream, void *ws) {
    if (d->c->prepare) {
        /* the search writes neither output buffer nor amax_y (sentinels) */
        unsigned long long diff[2] = {0, 0};
        float amax_before = 0, amax_after = 0;
        void *copy[2] = {NULL, NULL}, *y[2] = {d->y, d->y_whole};
        GPU_CHECK(cudaStreamSynchronize(stream));
        for (int b = 0; b < 2; b++) {
            GPU_CHECK(cudaMalloc(&copy[b], d->y_bytes));
            GPU_CHECK(cudaMemcpy(copy[b], y[b], d->y_bytes, cudaMemcpyDeviceToDevice));
        }
        if (g->amax_y) GPU_CHECK(cudaMemcpy(&amax_before, g->amax_y, 4, cudaMemcpyDeviceToHost));
        CHECK_STATUS(cgm_lt_prepare(lt, g, WS_BYTES, stream, 60000), CGM_SUCCESS);
        GPU_CHECK(cudaStreamSynchronize(stream));
        for (int b = 0; b < 2; b++) {
            GPU_CHECK(tref_count_mismatch(copy[b], y[b], d->y_bytes, &diff[b], stream));
            cudaFree(copy[b]);
        }
        if (g->amax_y) GPU_CHECK(cudaMemcpy(&amax_after, g->amax_y, 4, cudaMemcpyDeviceToHost));
        if (diff[0] || diff[1] || amax_before != amax_after)
            TEST_FAIL("cgm_lt_prepare (m=%lld) wrote the caller's memory: %llu + %llu bytes of Y, amax %g -> %g",
                      (long long)g->m, diff[0], diff[1], (double)amax_before, (double)amax_after);
    }
    CHECK_STATUS(cgm_lt_gemm(lt, g, ws, WS_BYTES, stream), CGM_SUCCESS);
}

/* The case's calls into d->y: per group, `chunks` calls (block scaling:
 * at multiples of 4 rows; a part of a group with k > 128 copies its
 * scales with cgm_lt_fp8_pack_x_scales after cgm_lt_fp8_chunk refused
 * it). Each call's amax goes to its own slot; returns the calls made. */
static int fp8_chunked(cgm_lt *lt, fp8_data *d, cudaStream_t stream, void *ws) {
    const fp8_case *c = d->c;
    cgm_lt_gemm_args whole = fp8_whole(d, d->y);
    size_t osize = cgm_dtype_size(c->y);
    int calls = 0;
    float *pack = d->pack;
    for (int64_t first = 0; first < c->m; first += d->per) {
        int64_t gr = c->m - first < d->per ? c->m - first : d->per;
        for (int p = 0; p < c->chunks; p++) {
            int64_t a = gr * p / c->chunks, b = gr * (p + 1) / c->chunks;
            if (c->scaling == CGM_LT_SCALE_BLOCK) a = p ? (a + 3) / 4 * 4 : 0, b = p + 1 < c->chunks ? (b + 3) / 4 * 4 : gr;
            if (b <= a) continue;
            int64_t row0 = first + a, rows = b - a;
            cgm_lt_gemm_args g = whole;
            g.m = rows;
            g.x = (const uint8_t *)d->x + row0 * c->k;
            g.y = (char *)d->y + (size_t)(row0 * d->ldy) * osize;
            g.amax_y = c->amax ? d->amax + 4 * calls : NULL; /* 16 bytes apart */
            cgm_status st = cgm_lt_fp8_chunk(&whole, row0, rows, &g);
            bool part = c->scaling == CGM_LT_SCALE_BLOCK && rows != gr && d->blocks > 1;
            if (part) {
                CHECK_STATUS(st, CGM_ERROR_NOT_SUPPORTED);
                CHECK_CONTAINS(cgm_last_error(), "cgm_lt_fp8_pack_x_scales");
                CHECK_STATUS(cgm_lt_fp8_pack_x_scales(&whole, row0, rows, pack, stream, &g), CGM_SUCCESS);
                pack += (rows * d->blocks + 3) / 4 * 4;
            } else {
                CHECK_STATUS(st, CGM_SUCCESS);
            }
            fp8_call(lt, d, &g, stream, ws);
            calls++;
        }
    }
    return calls;
}

/* On a failure: how the first rows would compare had cuBLASLt read our
 * scales another way, so that a wrong guess of its layout shows which it
 * is. 0: gpu.h's layouts; 1: X's scales k-contiguous ([rows][L] per
 * group); 2: W's rows of L, not L4; 3: W's n-block-contiguous
 * ([L][ceil(n/128)]); 4: 1 and 2; 5: y_scale divides instead. */
static double alt_x_scale(const fp8_data *d, int alt, int64_t i, int64_t l) {
    if (d->c->scaling != CGM_LT_SCALE_BLOCK || (alt != 1 && alt != 4)) return x_scale_of(d, i, l);
    int64_t first = i / d->per * d->per;
    return d->hxs[d->blocks * first + (i - first) * d->blocks + l / 128];
}

static double alt_w_scale(const fp8_data *d, int alt, int64_t j, int64_t l) {
    if (d->c->scaling != CGM_LT_SCALE_BLOCK) return w_scale_of(d, j, l);
    if (alt == 2 || alt == 4) return d->hws[(j / 128) * d->blocks + l / 128];
    if (alt == 3) return d->hws[(l / 128) * d->wblocks + j / 128];
    return w_scale_of(d, j, l);
}

static void fp8_diagnose(const fp8_data *d, const unsigned char *h) {
    static const char *const names[6] = {"gpu.h's layouts", "X scales k-contiguous", "W scale rows of L (not L4)",
                                         "W scales n-block-contiguous", "X k-contiguous + W rows of L",
                                         "y_scale divides"};
    const fp8_case *c = d->c;
    int64_t rows = c->m < 8 ? c->m : 8, total = rows * c->n;
    double acc_eps = c->fast_accum ? ldexp(1, -7) : ldexp(1, -10);
    for (int alt = 0; alt < 6; alt++) {
        if ((alt >= 1 && alt <= 4 && c->scaling != CGM_LT_SCALE_BLOCK) || (alt == 5 && !is_fp8(c->y))) continue;
        int64_t good = 0;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < c->n; j++) {
                double acc = 0, abs_acc = 0;
                for (int64_t l = 0; l < c->k; l++) {
                    double p = fp8_value(d->hx[i * c->k + l], c->x) * alt_x_scale(d, alt, i, l) *
                               fp8_value(d->hw[j * c->k + l], c->w) * alt_w_scale(d, alt, j, l);
                    acc += p;
                    abs_acc += fabs(p);
                }
                double ys = alt == 5 ? 1.0 / d->hys : d->hys;
                double want = (acc + bias_of(d, j)) * ys;
                double tol = out_eps(c->y) * fabs(want) + acc_eps * abs_acc * ys + out_tiny(c->y);
                good += fabs(out_value(h, i * d->ldy + j, c->y) - want) <= tol;
            }
        printf("  if cuBLASLt read %s: %lld of %lld values of rows 0..%lld within tolerance\n", names[alt],
               (long long)good, (long long)total, (long long)rows - 1);
    }
}

/* Y (device, d->ldy) against the reference: prints the worst element and
 * fails listing the first bad ones. */
static void fp8_expect(const fp8_data *d, const void *ydev, const char *what) {
    const fp8_case *c = d->c;
    unsigned char *h = malloc(d->y_bytes);
    GPU_CHECK(cudaMemcpy(h, ydev, d->y_bytes, cudaMemcpyDeviceToHost));
    double acc_eps = c->fast_accum ? ldexp(1, -7) : ldexp(1, -10), worst = -1, worst_tol = 0;
    int64_t bad = 0, wi = 0, wj = 0;
    char first_bad[512] = "";
    size_t used = 0;
    for (int64_t i = 0; i < c->m; i++)
        for (int64_t j = 0; j < c->n; j++) {
            double want = d->ref[i * c->n + j] * d->hys;
            double got = out_value(h, i * d->ldy + j, c->y);
            double tol = out_eps(c->y) * fabs(want) + acc_eps * d->sumabs[i * c->n + j] * d->hys + out_tiny(c->y);
            double err = fabs(got - want);
            if (!(err <= tol)) {
                if (bad < 4 && used < sizeof first_bad)
                    used += (size_t)snprintf(first_bad + used, sizeof first_bad - used, " (%lld,%lld) got %.6g want %.6g tol %.3g;",
                                             (long long)i, (long long)j, got, want, tol);
                bad++;
                err = INFINITY;
            }
            if (err / tol > worst) worst = err / tol, worst_tol = tol, wi = i, wj = j;
        }
    printf("%s: %s x %s -> %s m=%lld n=%lld k=%lld: worst |err|/tol %.3g at (%lld,%lld) (tol %.3g)\n", what,
           cgm_dtype_name(c->x), cgm_dtype_name(c->w), cgm_dtype_name(c->y), (long long)c->m, (long long)c->n,
           (long long)c->k, worst, (long long)wi, (long long)wj, worst_tol);
    if (bad) fp8_diagnose(d, h);
    free(h);
    if (bad)
        TEST_FAIL("%s: %lld of %lld values off the dequantized reference (%s scaling, groups %lld, chunks %d, "
                  "fast_accum %d, y_scale %g); first:%s",
                  what, (long long)bad, (long long)(c->m * c->n),
                  c->scaling == CGM_LT_SCALE_BLOCK ? "block" : "tensor", (long long)c->groups, c->chunks,
                  (int)c->fast_accum, (double)d->hys, first_bad);
}

/* Chunked and whole results within twice the output's rounding (plus the
 * accumulation's) of each other: another algorithm may round differently. */
static void fp8_expect_same(const fp8_data *d) {
    const fp8_case *c = d->c;
    unsigned char *a = malloc(d->y_bytes), *b = malloc(d->y_bytes);
    GPU_CHECK(cudaMemcpy(a, d->y, d->y_bytes, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(b, d->y_whole, d->y_bytes, cudaMemcpyDeviceToHost));
    double acc_eps = c->fast_accum ? ldexp(1, -7) : ldexp(1, -10);
    for (int64_t i = 0; i < c->m; i++)
        for (int64_t j = 0; j < c->n; j++) {
            double x = out_value(a, i * d->ldy + j, c->y), y = out_value(b, i * d->ldy + j, c->y);
            double tol = 2 * out_eps(c->y) * fabs(y) + 2 * acc_eps * d->sumabs[i * c->n + j] * d->hys + out_tiny(c->y);
            if (!(fabs(x - y) <= tol))
                TEST_FAIL("row chunks and one whole call differ at (%lld,%lld): %.6g vs %.6g (tol %.3g)", (long long)i,
                          (long long)j, x, y, tol);
        }
    free(a);
    free(b);
}

/* amax of `calls` slots (their max) against the reference's max |.| */
static void fp8_expect_amax(const fp8_data *d, int calls, const char *what) {
    float slots[64 * 4]; /* one per 16 bytes */
    GPU_CHECK(cudaMemcpy(slots, d->amax, (size_t)calls * 4 * sizeof(float), cudaMemcpyDeviceToHost));
    double got = 0;
    for (int i = 0; i < calls; i++) got = slots[4 * i] > got ? slots[4 * i] : got;
    double acc_eps = d->c->fast_accum ? ldexp(1, -7) : ldexp(1, -10);
    double tol = acc_eps * d->sumabs_max + ldexp(1, -20) * d->amax_ref;
    printf("%s: amax %.9g, reference %.9g (tol %.3g, %d calls)\n", what, got, d->amax_ref, tol, calls);
    if (!(fabs(got - d->amax_ref) <= tol))
        TEST_FAIL("%s: amax_y %.9g, expected max |result| before y_scale %.9g (tol %.3g) over %d call(s); the slots "
                  "held 1e30 before: 1e30 means it was not written",
                  what, got, d->amax_ref, tol, calls);
}

static void fp8_run(cgm_lt *lt, const fp8_case *c) {
    fp8_data d;
    cudaStream_t stream;
    void *ws = NULL;
    int64_t ldy = c->n;
    fp8_data_make(&d, c, ldy);
    GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    GPU_CHECK(cudaMalloc(&ws, WS_BYTES));
    float sentinel[64];
    for (int i = 0; i < 64; i++) sentinel[i] = 1e30f;
    if (c->groups == 1) { /* one whole call */
        cgm_lt_gemm_args g = fp8_whole(&d, d.y_whole);
        g.amax_y = c->amax ? d.amax : NULL;
        GPU_CHECK(cudaMemcpy(d.amax, sentinel, sizeof sentinel, cudaMemcpyHostToDevice));
        fp8_call(lt, &d, &g, stream, ws);
        GPU_CHECK(cudaStreamSynchronize(stream));
        fp8_expect(&d, d.y_whole, "one call");
        if (c->amax) fp8_expect_amax(&d, 1, "one call");
    }
    if (c->groups > 1 || c->chunks > 1) {
        GPU_CHECK(cudaMemcpy(d.amax, sentinel, sizeof sentinel, cudaMemcpyHostToDevice));
        int calls = fp8_chunked(lt, &d, stream, ws);
        GPU_CHECK(cudaStreamSynchronize(stream));
        fp8_expect(&d, d.y, "row chunks");
        if (c->amax) fp8_expect_amax(&d, calls, "row chunks");
        if (c->groups == 1) fp8_expect_same(&d);
    }
    cudaFree(ws);
    cudaStreamDestroy(stream);
    fp8_data_free(&d);
}

/* A handle on a GPU with cuBLASLt's FP8 kernels: sm_89+ for tensor
 * scaling, sm_90 (Hopper) for block scaling; skips on others. */
static cgm_lt *fp8_lt(int search, bool block) {
    int major = 0, minor = 0, dev = 0;
    GPU_CHECK(cudaGetDevice(&dev));
    GPU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    GPU_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    if (block ? major != 9 : major * 10 + minor < 89)
        TEST_SKIP("cuBLASLt's %s-scaled FP8 kernels need %s; this GPU is sm_%d%d", block ? "block" : "tensor",
                  block ? "sm_90 (Hopper)" : "sm_89 or newer", major, minor);
    return lt_with(search);
}

static void test_fp8(const void *param) {
    const fp8_case *c = param;
    need_gpu();
    cgm_lt *lt = fp8_lt(c->prepare ? 8 : 1, c->scaling == CGM_LT_SCALE_BLOCK);
    fp8_run(lt, c);
    cgm_lt_destroy(lt);
}

#define E4 CGM_DTYPE_FP8_E4M3
#define E5 CGM_DTYPE_FP8_E5M2
#define TENSOR CGM_LT_SCALE_TENSOR
#define BLOCK CGM_LT_SCALE_BLOCK
/* m odd (tensor) or a multiple of 4 (block, as cuBLASLt needs); k a
 * multiple of 16 but not of 128 (a partial last k-block; 656 and 112 also
 * pad W's scale rows to L4); n over one 128-row W block. */
static const fp8_case fp8_t_bf16 = {E4, E4, CGM_DTYPE_BF16, TENSOR, true, false, false, false, 333, 208, 400, 2, 2};
static const fp8_case fp8_t_fp32 = {E4, E4, CGM_DTYPE_FP32, TENSOR, true, false, false, false, 333, 208, 400, 1, 3};
static const fp8_case fp8_t_fp16 = {E4, E4, CGM_DTYPE_FP16, TENSOR, true, false, false, false, 333, 208, 400, 1, 1};
static const fp8_case fp8_t_e4m3 = {E4, E4, E4, TENSOR, true, true, false, true, 333, 208, 400, 1, 2};
static const fp8_case fp8_t_mixed = {E4, E5, CGM_DTYPE_BF16, TENSOR, true, false, false, false, 333, 208, 400, 2, 1};
static const fp8_case fp8_t_e5m2 = {E5, E4, E5, TENSOR, false, true, false, false, 333, 208, 400, 1, 3};
static const fp8_case fp8_t_e4m3_fp16_bias = {E4, E5, E4, TENSOR, true, true, false, false, 333, 208, 400, 2, 1};
static const fp8_case fp8_t_fast = {E4, E4, CGM_DTYPE_BF16, TENSOR, true, false, true, false, 333, 208, 400, 1, 2};
static const fp8_case fp8_t_odd_m = {E4, E4, CGM_DTYPE_BF16, TENSOR, true, false, false, false, 333, 208, 400, 1, 2};
static const fp8_case fp8_b_bf16 = {E4, E4, CGM_DTYPE_BF16, BLOCK, true, false, false, true, 264, 208, 400, 1, 3};
static const fp8_case fp8_b_fp32 = {E4, E4, CGM_DTYPE_FP32, BLOCK, true, false, false, false, 264, 208, 656, 2, 1};
static const fp8_case fp8_b_mixed = {E4, E5, CGM_DTYPE_BF16, BLOCK, false, false, false, false, 264, 208, 400, 2, 2};
static const fp8_case fp8_b_e5m2_x = {E5, E4, CGM_DTYPE_FP16, BLOCK, true, false, false, false, 264, 208, 400, 1, 1};
static const fp8_case fp8_b_short_k = {E4, E4, CGM_DTYPE_BF16, BLOCK, false, false, false, false, 264, 208, 112, 1, 3};

/* One handle, one shape and the same buffers' alignment: the cache keeps
 * tensor and block scaling, W's fp8 dtype, fast accumulation and the
 * output dtype apart (an entry of one used for another gives wrong
 * values, which fp8_run sees). */
static void test_fp8_keyed(const void *param) {
    (void)param;
    need_gpu();
    cgm_lt *lt = fp8_lt(1, true);
    static const fp8_case seq[] = {
        {E4, E4, CGM_DTYPE_BF16, TENSOR, false, false, false, false, 264, 208, 400, 1, 1},
        {E4, E4, CGM_DTYPE_BF16, BLOCK, false, false, false, false, 264, 208, 400, 1, 1},
        {E4, E5, CGM_DTYPE_BF16, TENSOR, false, false, false, false, 264, 208, 400, 1, 1},
        {E4, E4, CGM_DTYPE_BF16, TENSOR, false, false, true, false, 264, 208, 400, 1, 1},
        {E4, E4, CGM_DTYPE_FP32, TENSOR, false, false, false, false, 264, 208, 400, 1, 1},
        {E4, E4, CGM_DTYPE_BF16, TENSOR, false, false, false, false, 264, 208, 400, 1, 1},
    };
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) fp8_run(lt, &seq[i]);
    /* and a bf16 GEMM of the same shape on the same handle */
    lt_fixture f;
    fixture_make(&f, 264, 208, 400);
    cgm_lt_gemm_args g = args_of(&f, false, false);
    double *ref = NULL;
    GPU_CHECK(cudaMalloc((void **)&ref, (size_t)(f.m * f.n) * sizeof(double)));
    GPU_CHECK(tref_gemm(CGM_LAYOUT_TN, CGM_DTYPE_BF16, f.x, f.w, f.m, f.n, f.k, ref, 0, f.stream));
    CHECK_STATUS(cgm_lt_gemm(lt, &g, f.ws, WS_BYTES, f.stream), CGM_SUCCESS);
    GPU_CHECK(cudaStreamSynchronize(f.stream));
    double *href = malloc((size_t)(f.m * f.n) * sizeof(double));
    GPU_CHECK(cudaMemcpy(href, ref, (size_t)(f.m * f.n) * sizeof(double), cudaMemcpyDeviceToHost));
    float *got = fetch_bf16(f.y, f.m * f.n), *want = malloc((size_t)(f.m * f.n) * sizeof(float));
    for (int64_t i = 0; i < f.m * f.n; i++) want[i] = (float)href[i];
    expect_same_rounding(&f, got, want, "the bf16 reference after fp8 GEMMs of its shape");
    free(got), free(want), free(href);
    cudaFree(ref);
    fixture_free(&f);
    cgm_lt_destroy(lt);
}

/* ------------------------------------------------------------ refusals */

typedef struct fp8_refusal {
    int what;
    cgm_status status;
    const char *needle;
} fp8_refusal;

/* A valid block-scaled e4m3 GEMM (m 264, n 208, k 400) on fake device
 * addresses: the checks refuse before anything touches them. */
static cgm_lt_gemm_args refusal_base(void) {
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = g.w_dtype = E4;
    g.out_dtype = CGM_DTYPE_BF16;
    g.m = 264, g.n = 208, g.k = 400;
    g.x = (const void *)(uintptr_t)0x10000000, g.ldx = 400;
    g.w = (const void *)(uintptr_t)0x20000000, g.ldw = 400;
    g.y = (void *)(uintptr_t)0x30000000, g.ldy = 208;
    g.scaling = BLOCK;
    g.x_scale = (const float *)(uintptr_t)0x40000000;
    g.w_scale = (const float *)(uintptr_t)0x50000000;
    return g;
}

static cgm_lt_gemm_args refusal_args(int what) {
    cgm_lt_gemm_args g = refusal_base();
    switch (what) {
    case 0: g.layout = CGM_LAYOUT_NN; break;
    case 1: g.layout = CGM_LAYOUT_NT; break;
    case 2: g.in_dtype = g.w_dtype = E5; break;
    case 3: g.scaling = TENSOR, g.out_dtype = E5; break;
    case 4: g.out_dtype = E4; break;
    case 5: g.fast_accum = true; break;
    case 6: g.scaling = TENSOR, g.amax_y = (float *)(uintptr_t)0x60000000; break;
    case 7: g.scaling = TENSOR, g.out_dtype = CGM_DTYPE_FP32, g.y_scale = g.x_scale; break;
    case 8: g.scaling = TENSOR, g.out_dtype = E4, g.accumulate = true; break;
    case 9: g.out_dtype = CGM_DTYPE_FP32, g.bias = g.x, g.bias_dtype = CGM_DTYPE_FP32; break;
    case 10: g.scaling = CGM_LT_SCALE_NONE; break;
    case 11: g.x_scale = NULL; break;
    case 12: g.m = 262; break;
    case 13: g.k = 408, g.ldx = g.ldw = 408; break;
    case 14:
        g.in_dtype = CGM_DTYPE_BF16, g.w_dtype = CGM_DTYPE_FP32, g.scaling = TENSOR;
        g.x_scale = g.w_scale = NULL, g.fast_accum = true;
        break;
    case 15:
        g.in_dtype = CGM_DTYPE_BF16, g.w_dtype = CGM_DTYPE_FP32, g.scaling = CGM_LT_SCALE_NONE;
        g.x_scale = g.w_scale = NULL, g.out_dtype = E4;
        break;
    case 16: g.x_scale_rows = 100; break;
    case 17: g.w_dtype = CGM_DTYPE_BF16; break;
    case 18: g.x_scale = (const float *)(uintptr_t)0x40000008; break;
    case 22: g.scaling = TENSOR, g.n = 200; break;
    case 23: g.scaling = TENSOR, g.out_dtype = E4, g.amax_y = (float *)(uintptr_t)0x60000004; break;
    default: g.x_scale_rows = 132; break; /* the chunk helper's cases */
    }
    return g;
}

/* Refused with the status and words expected: by the checks alone (no
 * GPU needed), and where a cuBLASLt handle can be made, by cgm_lt_gemm
 * and cgm_lt_prepare before they touch anything. The chunk helper's
 * refusals leave the chunk untouched. */
static void test_fp8_refused(const void *param) {
    const fp8_refusal *r = param;
    cgm_lt_gemm_args g = refusal_args(r->what), chunk = g;
    if (r->what >= 19 && r->what <= 21) {
        cgm_status got = CGM_SUCCESS;
        chunk.x_scale = NULL;
        if (r->what == 19) got = cgm_lt_fp8_chunk(&g, 100, 64, &chunk); /* across groups */
        if (r->what == 20) got = cgm_lt_fp8_chunk(&g, 132, 64, &chunk); /* part of a group */
        if (r->what == 21) got = cgm_lt_fp8_chunk(&g, 200, 100, &chunk); /* past m */
        CHECK_STATUS(got, r->status);
        CHECK_CONTAINS(cgm_last_error(), r->needle);
        CHECK(chunk.x_scale == NULL);
        return;
    }
    CHECK_STATUS(cgm_lt_check(&g), r->status);
    CHECK_CONTAINS(cgm_last_error(), r->needle);
    cgm_lt *lt = NULL;
    if (cgm_lt_create(&lt) != CGM_SUCCESS) {
        printf("checks refused it; no cuBLASLt handle here for the rest: %s\n", cgm_last_error());
        return;
    }
    CHECK_STATUS(cgm_lt_gemm(lt, &g, (void *)(uintptr_t)0x70000000, WS_BYTES, NULL), r->status);
    CHECK_CONTAINS(cgm_last_error(), r->needle);
    CHECK_STATUS(cgm_lt_prepare(lt, &g, WS_BYTES, NULL, 1000), r->status);
    CHECK_CONTAINS(cgm_last_error(), r->needle);
    cgm_lt_destroy(lt);
}

/* What the refusals are refused from: the base args pass the checks, and
 * the chunk helper gives whole groups and (k <= 128) parts of one. */
static void test_fp8_accepted(const void *param) {
    (void)param;
    cgm_lt_gemm_args g = refusal_base(), chunk = g;
    CHECK_STATUS(cgm_lt_check(&g), CGM_SUCCESS);
    g.scaling = TENSOR, g.out_dtype = E4, g.amax_y = (float *)(uintptr_t)0x60000000;
    g.bias = g.x, g.bias_dtype = CGM_DTYPE_FP16; /* fp8 output: a bf16 or fp16 bias */
    CHECK_STATUS(cgm_lt_check(&g), CGM_SUCCESS);
    g.out_dtype = CGM_DTYPE_FP32, g.amax_y = NULL, g.bias_dtype = CGM_DTYPE_BF16;
    CHECK_STATUS(cgm_lt_check(&g), CGM_SUCCESS);
    g.w_dtype = E5, g.out_dtype = E5, g.bias = NULL;
    CHECK_STATUS(cgm_lt_check(&g), CGM_SUCCESS);
    /* 2 groups of 132 rows; block scaling, L = 4 */
    g = refusal_base();
    g.x_scale_rows = 132;
    CHECK_STATUS(cgm_lt_fp8_chunk(&g, 132, 132, &chunk), CGM_SUCCESS);
    CHECK(chunk.x_scale == g.x_scale + 4 * 132 && chunk.x_scale_rows == 0);
    CHECK_STATUS(cgm_lt_fp8_chunk(&g, 0, 132, &chunk), CGM_SUCCESS);
    CHECK(chunk.x_scale == g.x_scale);
    g.k = g.ldx = g.ldw = 112; /* L = 1: any rows of a group */
    CHECK_STATUS(cgm_lt_fp8_chunk(&g, 136, 60, &chunk), CGM_SUCCESS);
    CHECK(chunk.x_scale == g.x_scale + 136);
    g.scaling = TENSOR; /* a group's one scale */
    CHECK_STATUS(cgm_lt_fp8_chunk(&g, 140, 7, &chunk), CGM_SUCCESS);
    CHECK(chunk.x_scale == g.x_scale + CGM_LT_TENSOR_SCALE_STRIDE);
    /* ceil split 333 = 167 + 166: the last, shorter group as a whole */
    g = refusal_base();
    g.m = 333, g.x_scale_rows = 167, g.k = 400;
    CHECK_STATUS(cgm_lt_fp8_chunk(&g, 167, 166, &chunk), CGM_SUCCESS);
    CHECK(chunk.x_scale == g.x_scale + 4 * 167);
    /* chunk == whole (an executor's one args) */
    chunk = g;
    CHECK_STATUS(cgm_lt_fp8_chunk(&chunk, 0, 167, &chunk), CGM_SUCCESS);
    CHECK(chunk.x_scale == g.x_scale && chunk.x_scale_rows == 0);
    /* bf16: a no-op */
    g = refusal_base();
    g.in_dtype = CGM_DTYPE_BF16;
    chunk.x_scale = NULL;
    CHECK_STATUS(cgm_lt_fp8_chunk(&g, 5, 7, &chunk), CGM_SUCCESS);
    CHECK(chunk.x_scale == NULL);
}

/* cgm_lt_args_from_call: an fp8 call's dtypes and tensor scales (the
 * bias's dtype with it); a bf16 call's args keep every fp8 field zeroed,
 * which the checks take (no GPU needed). */
static void test_fp8_from_call(const void *param) {
    (void)param;
    static _Alignas(16) const float xs = 0.5f, ws = 2.0f, ys = 4.0f; /* scale pointers: 16-byte aligned */
    cgm_call c;
    memset(&c, 0, sizeof c);
    c.layout = CGM_LAYOUT_TN;
    c.m = 264, c.n = 208, c.k = 400;
    c.in_dtype = E4, c.out_dtype = CGM_DTYPE_FP32;
    c.x = cgm_matrix_make((void *)(uintptr_t)0x10000000, E4, 264, 400);
    c.w = cgm_matrix_make((void *)(uintptr_t)0x20000000, E5, 208, 400);
    c.y = cgm_matrix_make((void *)(uintptr_t)0x30000000, CGM_DTYPE_FP32, 264, 208);
    c.x.scale = &xs, c.w.scale = &ws, c.y.scale = &ys;
    c.has_bias = true;
    c.bias = cgm_matrix_make((void *)(uintptr_t)0x40000000, CGM_DTYPE_BF16, 1, 208);
    cgm_lt_gemm_args g = cgm_lt_args_from_call(&c);
    CHECK_INT_EQ(g.in_dtype, E4);
    CHECK_INT_EQ(g.w_dtype, E5);
    CHECK_INT_EQ(g.bias_dtype, CGM_DTYPE_BF16);
    CHECK_INT_EQ(g.scaling, TENSOR);
    CHECK(g.x_scale == &xs && g.w_scale == &ws && g.y_scale == NULL && g.amax_y == NULL && !g.fast_accum);
    CHECK_STATUS(cgm_lt_check(&g), CGM_SUCCESS);
    c.in_dtype = CGM_DTYPE_BF16, c.x.dtype = c.w.dtype = CGM_DTYPE_BF16, c.x.scale = c.w.scale = NULL;
    g = cgm_lt_args_from_call(&c);
    CHECK(g.w_dtype == CGM_DTYPE_FP32 && g.scaling == CGM_LT_SCALE_NONE && g.x_scale == NULL && g.w_scale == NULL);
    CHECK_STATUS(cgm_lt_check(&g), CGM_SUCCESS);
}

#define NS CGM_ERROR_NOT_SUPPORTED
#define IA CGM_ERROR_INVALID_ARGUMENT
static const fp8_refusal fp8_refusals[] = {
    {0, NS, "fp8 inputs (fp8_e4m3 x fp8_e4m3) in layout NN: cuBLASLt's FP8 kernels on Hopper take layout TN only"},
    {1, NS, "in layout NT: cuBLASLt's FP8 kernels on Hopper take layout TN only"},
    {2, NS, "fp8_e5m2 x fp8_e5m2: cuBLASLt has no FP8 kernel for two e5m2 operands"},
    {3, NS, "an fp8_e5m2 output from fp8_e4m3 x fp8_e4m3"},
    {4, NS, "block scaling with an fp8 output"},
    {5, NS, "block scaling with fast_accum"},
    {6, NS, "amax_y with output dtype bf16: cuBLASLt scales and takes the amax of fp8 outputs only"},
    {7, NS, "y_scale with output dtype fp32"},
    {8, NS, "an fp8_e4m3 output with accumulate"},
    {9, IA, "a bias of fp32 with fp8 inputs and output dtype fp32: cuBLASLt takes a bf16 bias here"},
    {10, IA, "fp8 inputs with scaling 0: expected CGM_LT_SCALE_TENSOR (1) or CGM_LT_SCALE_BLOCK (2)"},
    {11, IA, "block scaling without x_scale"},
    {12, NS, "block scaling with m = 262, n = 208"},
    {13, NS, "fp8 with k = 408, ldx = 408, ldw = 408"},
    {14, IA, "fp8 settings with bf16 inputs"},
    {15, NS, "an fp8_e4m3 output from bf16 inputs"},
    {16, IA, "x_scale_rows 100 with m = 264"},
    {17, IA, "W of bf16 with X of fp8_e4m3"},
    {18, NS, "x_scale % 16 = 8"},
    {19, IA, "rows [100, 164) span the X scale groups 0..1 of 132 rows"},
    {20, NS, "rows [132, 196) are part of the X scale group [132, 264)"},
    {21, IA, "rows [200, 300) of an X of m = 264 rows"},
    {22, NS, "fp8 with n = 200: cuBLASLt's FP8 kernels want n (W's rows) a multiple of 16"},
    {23, NS, "amax_y % 16 = 4: cuBLASLt takes scale and amax pointers 16-byte aligned only"},
};

static const int64_t odd_shape[3] = {1000, 136, 256}, bench_shape[3] = {2048, 2048, 2048};

static void register_cases(void) {
    test_add("search_odd", test_search, odd_shape);
    test_add("search_2048", test_search, bench_shape);
    test_add("search_off", test_search_off, NULL);
    test_add("search_timeout", test_search_timeout, NULL);
    test_add("search_bad_zero", test_search_bad, bad_zero);
    test_add("search_bad_high", test_search_bad, bad_high);
    test_add("search_bad_word", test_search_bad, bad_word);
    test_add("reduction_keyed", test_reduction_keyed, bench_shape);
    test_add("fp8_tensor_bf16_shards_chunks", test_fp8, &fp8_t_bf16);
    test_add("fp8_tensor_fp32_chunks", test_fp8, &fp8_t_fp32);
    test_add("fp8_tensor_fp16", test_fp8, &fp8_t_fp16);
    test_add("fp8_tensor_e4m3_out_amax_search", test_fp8, &fp8_t_e4m3);
    test_add("fp8_tensor_e4m3_x_e5m2_shards", test_fp8, &fp8_t_mixed);
    test_add("fp8_tensor_e5m2_x_e4m3_e5m2_out_amax", test_fp8, &fp8_t_e5m2);
    test_add("fp8_tensor_e4m3_out_fp16_bias", test_fp8, &fp8_t_e4m3_fp16_bias);
    test_add("fp8_tensor_fast_accum", test_fp8, &fp8_t_fast);
    test_add("fp8_tensor_odd_m", test_fp8, &fp8_t_odd_m);
    test_add("fp8_block_bf16_packed_chunks_search", test_fp8, &fp8_b_bf16);
    test_add("fp8_block_fp32_shards", test_fp8, &fp8_b_fp32);
    test_add("fp8_block_e4m3_x_e5m2_shards_packed", test_fp8, &fp8_b_mixed);
    test_add("fp8_block_e5m2_x_e4m3_fp16", test_fp8, &fp8_b_e5m2_x);
    test_add("fp8_block_k112_chunks", test_fp8, &fp8_b_short_k);
    test_add("fp8_keyed", test_fp8_keyed, NULL);
    test_add("fp8_accepted", test_fp8_accepted, NULL);
    test_add("fp8_from_call", test_fp8_from_call, NULL);
    for (size_t i = 0; i < sizeof fp8_refusals / sizeof fp8_refusals[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "fp8_refused_%d", fp8_refusals[i].what);
        test_add(name, test_fp8_refused, &fp8_refusals[i]);
    }
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
