/* cuBLASLt's measured search (gpu/lt_gemm.c, COMMGEMM_LT_SEARCH):
 * cgm_lt_prepare times a shape once, never writes the caller's output, and
 * the GEMM it leads to gives the heuristic's result up to rounding; a value
 * out of range is refused; the GEMM reduction is part of what a shape's
 * entry is kept for. One process, one GPU (skips without one). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#include "gpu/gpu.h"
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
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
