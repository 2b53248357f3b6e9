/* commgemm's own sm_90a GEMM with the tail split (cgm_hgemm_args.split_ws
 * and tail_split; src/device/hopper/split.cuh, tail_split.h): the shapes
 * whose last partial wave the split is for (docs/PERFORMANCE.md's sweep)
 * with the model's choice, and forced part counts on odd shapes (m and n
 * not tile multiples, k not a multiple of the stage, k of two stages, one
 * stage a part), grids of a few CTAs (whole tiles and parts on one CTA, an
 * odd count per ping-pong consumer), the dynamic schedule, bf16, fp16 and
 * fp8 (accumulating and promoting) operands, bf16, fp16 and fp32 Y, bias,
 * accumulate, padded ldy; both variants.
 *
 * Each call runs unsplit first (split_ws NULL), then split, twice, and
 * twice more as a CUDA graph's replays (Y reset inside the graph). The
 * inputs are multiples of 1/8 in [-1, 1], so with 16-bit operands every
 * fp32 sum is exact in any grouping: the split result must be the exact
 * value rounded once (every element of small cases, sampled rows and
 * columns of large ones) and the unsplit result bit for bit on the whole
 * output; promoting fp8 adds exact block sums, so the same holds against
 * the unsplit kernel; fp8 accumulating in the tensor cores groups its k
 * differently per part, so it is held to the fp8 bound of
 * test_hopper_gemm_fp8.c. Every run of a call (launches and replays) must
 * give the same bits, and the workspace's counters must be zero after
 * each. cgm_hgemm_split_ws_bytes must name the part count a forced case
 * asks for (or its k blocks, if fewer). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "device/hopper_gemm.h"
#include "gpu_check.h"
#include "harness.h"
#include "hgemm_values.h"
#include "test_hopper_gemm.h"

typedef struct split_case {
    cgm_dtype in, out; /* in: BF16, FP16 or FP8_E4M3 (W the same, scales 1) */
    int64_t m, n, k;
    int64_t pad_y;
    int bias, accumulate;
    int sm_count; /* 0: every SM */
    int parts;    /* tail_split: 0 the model's choice, 2..8 forced */
    int promote;  /* fp8: fp8_promote */
    int dynamic;  /* a tile counter too */
    uint64_t seed;
    int expect;   /* parts 0: the variants the model splits on 132 SMs (1 cooperative, 2 ping-pong, 3 both) */
} split_case;

/* A case's inputs on the host (as eighths, for the reference) and device. */
typedef struct split_data {
    int64_t ld, kp, ldy;
    size_t ny, ysize;
    int16_t *xq, *wq; /* 8 x the values, rows of kp */
    void *hb, *hy0;   /* bias; Y before the call */
    void *dx, *dw, *db, *dy, *dy0;
    float *dscale; /* fp8: x_scale and w_scale, 1 */
} split_data;

static bool is_fp8(const split_case *c) { return c->in == CGM_DTYPE_FP8_E4M3; }

/* X or W (rows x ld, values hv_value(seed, r * ld + j) for j < k) on the
 * device in the case's input dtype, and as eighths. */
static void *operand(const split_case *c, int64_t rows, int64_t ld, uint64_t seed, int64_t kp, int16_t **q) {
    size_t count = (size_t)(rows * ld);
    void *dev;
    if (is_fp8(c)) {
        dev = e4m3_to_device(seed, count);
        *q = calloc((size_t)(rows * kp) + 16, sizeof **q);
        if (!*q) TEST_FAIL("calloc");
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < c->k; j++)
                (*q)[r * kp + j] = (int16_t)lrintf(hv_value(seed, (uint64_t)(r * ld + j)) * 8);
        return dev;
    }
    void *h = fill(c->in, count, seed);
    dev = to_device(h, count * 2);
    *q = to_eighths(h, c->in, rows, ld, c->k, kp);
    free(h);
    return dev;
}

static void data_make(const split_case *c, split_data *d) {
    memset(d, 0, sizeof *d);
    d->ld = (c->k + 15) / 16 * 16, d->kp = d->ld, d->ldy = c->n + c->pad_y;
    d->ny = (size_t)(c->m * d->ldy), d->ysize = hv_size(c->out);
    d->dx = operand(c, c->m, d->ld, c->seed, d->kp, &d->xq);
    d->dw = operand(c, c->n, d->ld, c->seed + 1, d->kp, &d->wq);
    d->hb = fill(c->out, (size_t)c->n, c->seed + 2), d->hy0 = fill(c->out, d->ny, c->seed + 3);
    if (!c->accumulate) memset(d->hy0, 0xFF, d->ny * d->ysize); /* NaN: unwritten shows */
    d->db = to_device(d->hb, (size_t)c->n * d->ysize);
    d->dy0 = to_device(d->hy0, d->ny * d->ysize);
    GPU_CHECK(cudaMalloc(&d->dy, d->ny * d->ysize + 64));
    const float ones[2] = {1.0f, 1.0f};
    d->dscale = to_device(ones, sizeof ones);
}

static void data_free(split_data *d) {
    free(d->xq), free(d->wq), free(d->hb), free(d->hy0);
    cudaFree(d->dx), cudaFree(d->dw), cudaFree(d->db), cudaFree(d->dy), cudaFree(d->dy0), cudaFree(d->dscale);
}

static cgm_hgemm_args case_args(const split_case *c, const split_data *d, int variant) {
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = c->in, a.out_dtype = c->out;
    a.m = c->m, a.n = c->n, a.k = c->k;
    a.x = d->dx, a.ldx = d->ld, a.w = d->dw, a.ldw = d->ld, a.y = d->dy, a.ldy = d->ldy;
    a.bias = c->bias ? d->db : NULL;
    a.accumulate = c->accumulate;
    a.sm_count = c->sm_count;
    a.variant = variant;
    if (is_fp8(c)) a.w_dtype = c->in, a.x_scale = d->dscale, a.w_scale = d->dscale + 1, a.fp8_promote = c->promote;
    return a;
}

/* Y after one call from Y's initial content, into host buffer h. */
static void run_once(const cgm_hgemm_args *a, const split_data *d, void *h) {
    GPU_CHECK(cudaMemcpy(d->dy, d->dy0, d->ny * d->ysize, cudaMemcpyDeviceToDevice));
    GPU_CHECK(cgm_hgemm(a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    GPU_CHECK(cudaMemcpy(h, d->dy, d->ny * d->ysize, cudaMemcpyDeviceToHost));
}

/* Two replays of a graph that resets Y and runs the call; Y into h. */
static void run_graph(const cgm_hgemm_args *a, const split_data *d, void *h) {
    cudaStream_t st;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    GPU_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    GPU_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    GPU_CHECK(cudaMemcpyAsync(d->dy, d->dy0, d->ny * d->ysize, cudaMemcpyDeviceToDevice, st));
    GPU_CHECK(cgm_hgemm(a, st));
    GPU_CHECK(cudaStreamEndCapture(st, &graph));
    GPU_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < 2; r++) GPU_CHECK(cudaGraphLaunch(exec, st));
    GPU_CHECK(cudaStreamSynchronize(st));
    GPU_CHECK(cudaMemcpy(h, d->dy, d->ny * d->ysize, cudaMemcpyDeviceToHost));
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(st);
}

static void counters_zero(const void *ws, const char *when, const char *what) {
    static unsigned int h[CGM_HGEMM_SPLIT_COUNTER_BYTES / 4];
    GPU_CHECK(cudaMemcpy(h, ws, sizeof h, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++)
        if (h[i]) TEST_FAIL("%s: split counter %zu is %u after %s, expected 0", what, i, h[i], when);
}

/* The part count a split uses, from the bytes it asks for (the counters,
 * then a tile of fp32 per part of each tail tile); 0: no split. */
static int parts_of(const split_case *c, const cgm_hgemm_args *a, size_t bytes, int sms) {
    if (bytes == 0) return 0;
    int64_t tile_n = cgm_hgemm_variant_for(a) == CGM_HGEMM_PINGPONG ? CGM_HGEMM_TILE_N_PINGPONG : CGM_HGEMM_TILE_N;
    int64_t tiles = ((c->m + 127) / 128) * ((c->n + tile_n - 1) / tile_n);
    int64_t grid = c->sm_count > 0 && c->sm_count < sms ? c->sm_count : sms, tail = tiles % grid;
    int64_t slot = 128 * tile_n * 4;
    if (bytes < CGM_HGEMM_SPLIT_COUNTER_BYTES || tail == 0 || (bytes - CGM_HGEMM_SPLIT_COUNTER_BYTES) % (tail * slot))
        TEST_FAIL("cgm_hgemm_split_ws_bytes = %zu: not the counters and whole tiles of %lld tail tiles", bytes,
                  (long long)tail);
    return (int)((bytes - CGM_HGEMM_SPLIT_COUNTER_BYTES) / (tail * slot));
}

/* Elements of Y checked against the exact value: the split's result h,
 * the unsplit one href (bit for bit where the grouping cannot matter),
 * padding untouched. Returns the wrong elements (the first few printed). */
static int64_t check_values(const split_case *c, const split_data *d, const void *h, const void *href,
                            const char *what) {
    bool fast8 = is_fp8(c) && !c->promote;
    int everywhere = c->m * c->n * d->kp <= (1ll << 27);
    int64_t srow[4] = {0, c->m / 3, c->m / 2, c->m - 1}, scol[3] = {0, c->n / 2, c->n - 1}, wrong = 0, differ = 0;
    double u = c->out == CGM_DTYPE_FP32 ? ldexp(1, -24) : c->out == CGM_DTYPE_BF16 ? ldexp(1, -8) : ldexp(1, -11);
    double g = ldexp((double)((c->k + 31) / 32), -13);
    for (int64_t i = 0; i < c->m; i++) {
        bool row = i == srow[0] || i == srow[1] || i == srow[2] || i == srow[3];
        for (int64_t j = 0; j < d->ldy; j++) {
            size_t at = (size_t)(i * d->ldy + j), es = d->ysize;
            bool same = !memcmp((const char *)h + at * es, (const char *)href + at * es, es);
            if (j >= c->n) { /* padding: as it was */
                if (memcmp((const char *)h + at * es, (const char *)d->hy0 + at * es, es) && wrong++ < 4)
                    fprintf(stderr, "  %s: padding (%lld, %lld) changed\n", what, (long long)i, (long long)j);
                continue;
            }
            differ += !same;
            if (!everywhere && !row && j != scol[0] && j != scol[1] && j != scol[2] && (same || fast8)) continue;
            const int16_t *xr = d->xq + i * d->kp, *wr = d->wq + j * d->kp;
            double s = dot_eighths(xr, wr, d->kp) / 64.0, a = 0, got = hv_get(h, c->out, at);
            if (c->bias) s += hv_get(d->hb, c->out, (size_t)j);
            if (c->accumulate) s += hv_get(d->hy0, c->out, at);
            bool ok = got == round_out(s, c->out) && (same || fast8);
            if (fast8 && !ok) {
                for (int64_t l = 0; l < c->k; l++) a += abs(xr[l] * wr[l]) / 64.0;
                ok = fabs(got - s) <= g * a + u * (fabs(s) + g * a);
            }
            if (!ok && wrong++ < 4)
                fprintf(stderr, "  %s (%lld, %lld) = %.9g, exact %.9g, unsplit %.9g\n", what, (long long)i,
                        (long long)j, got, s, hv_get(href, c->out, at));
        }
    }
    if (differ) printf("%s: %lld elements differ from the unsplit kernel's%s\n", what, (long long)differ,
                       fast8 ? " (fp8 accumulating in the tensor cores: within the bound)" : "");
    return wrong;
}

/* One variant of a case; returns its wrong elements. */
static int64_t run_variant(const split_case *c, split_data *d, int variant, int sms) {
    char what[200];
    snprintf(what, sizeof what, "%s %s->%s %lldx%lldx%lld parts %d sm_count %d%s%s%s%s", variant_name(variant),
             cgm_dtype_name(c->in), cgm_dtype_name(c->out), (long long)c->m, (long long)c->n, (long long)c->k,
             c->parts, c->sm_count, c->bias ? " bias" : "", c->accumulate ? " accumulate" : "",
             c->promote ? " promote" : "", c->dynamic ? " dynamic" : "");
    cgm_hgemm_args a = case_args(c, d, variant);
    const char *why = NULL;
    if (!cgm_hgemm_supported(&a, &why)) TEST_FAIL("%s: cgm_hgemm_supported said no: %s", what, why);
    void *href = malloc(d->ny * d->ysize + 1), *h1 = malloc(d->ny * d->ysize + 1), *h2 = malloc(d->ny * d->ysize + 1);
    if (!href || !h1 || !h2) TEST_FAIL("malloc");
    run_once(&a, d, href);
    a.tail_split = c->parts;
    size_t bytes = cgm_hgemm_split_ws_bytes(&a);
    int parts = parts_of(c, &a, bytes, sms), kb = (int)((c->k + (is_fp8(c) ? 127 : 63)) / (is_fp8(c) ? 128 : 64));
    int expected = c->parts || (c->expect >> (variant == CGM_HGEMM_PINGPONG) & 1);
    if (parts == 0 && (c->parts || (expected && sms >= 132)))
        TEST_FAIL("%s: no split (cgm_hgemm_split_ws_bytes 0)", what);
    if (parts && !expected && sms >= 132) TEST_FAIL("%s: %d parts where the model should not split", what, parts);
    if (c->parts && parts != (c->parts < kb ? c->parts : kb))
        TEST_FAIL("%s: %d parts, expected %d (tail_split %d, %d k blocks)", what, parts,
                  c->parts < kb ? c->parts : kb, c->parts, kb);
    if (parts == 0) {
        printf("%s: no split (%s on %d SMs)\n", what, expected ? "this device's choice" : "the model's", sms);
        free(href), free(h1), free(h2);
        return 0;
    }
    printf("%s: %d parts, %zu bytes of split_ws\n", what, parts, bytes);
    void *ws = NULL;
    unsigned int *counter = NULL;
    GPU_CHECK(cudaMalloc(&ws, bytes));
    GPU_CHECK(cudaMemset(ws, 0, bytes));
    a.split_ws = ws, a.split_ws_bytes = bytes;
    if (c->dynamic) {
        GPU_CHECK(cudaMalloc((void **)&counter, sizeof *counter));
        GPU_CHECK(cudaMemset(counter, 0, sizeof *counter));
        a.tile_counter = counter;
    }
    run_once(&a, d, h1);
    counters_zero(ws, "the first launch", what);
    int64_t wrong = check_values(c, d, h1, href, what);
    run_once(&a, d, h2);
    counters_zero(ws, "the second launch", what);
    if (memcmp(h1, h2, d->ny * d->ysize)) TEST_FAIL("%s: a second launch gave other bits", what);
    run_graph(&a, d, h2);
    counters_zero(ws, "two graph replays", what);
    if (memcmp(h1, h2, d->ny * d->ysize)) TEST_FAIL("%s: a graph replay gave other bits", what);
    if (wrong) fprintf(stderr, "WRONG %lld elements: %s\n", (long long)wrong, what);
    cudaFree(ws), cudaFree(counter);
    free(href), free(h1), free(h2);
    return wrong;
}

static void check_split_cases(const split_case *cases, int count) {
    require_sm90();
    int sms = 0, wrong = 0;
    GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (int i = 0; i < count; i++) {
        split_data d;
        data_make(&cases[i], &d);
        for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++)
            wrong += run_variant(&cases[i], &d, v, sms) != 0;
        data_free(&d);
    }
    if (wrong) TEST_FAIL("%d split GEMMs wrong (first elements above)", wrong);
}

#define BF CGM_DTYPE_BF16
#define FH CGM_DTYPE_FP16
#define F32 CGM_DTYPE_FP32
#define E4 CGM_DTYPE_FP8_E4M3

/* The sweep's shapes that lost to cuBLASLt for their partial last wave
 * (on 132 SMs, cooperative: 2.42, 4.41 and 5.33 waves, 80 tiles), the
 * model's choice of parts (ping-pong's tails of 112 and 108 of 132 tiles
 * stay whole, and so do cooperative's 80: no full wave); bias on some, accumulate
 * on one. */
static void case_split_shapes(const void *p) {
    (void)p;
    const split_case cases[] = {
        {BF, BF, 8192, 1280, 8192, 0, 1, 0, 132, 0, 0, 0, 101, 1},
        {FH, FH, 4096, 2560, 8192, 0, 0, 0, 132, 0, 0, 0, 102, 1},
        {BF, BF, 12344, 1504, 4096, 0, 1, 0, 132, 0, 0, 0, 103, 1},
        {BF, F32, 4096, 5504, 4096, 0, 0, 1, 132, 0, 0, 0, 104, 3},
        {BF, BF, 8192, 2752, 4096, 0, 0, 0, 132, 0, 0, 0, 105, 3},
        {BF, BF, 256, 10240, 8192, 0, 1, 0, 132, 0, 0, 0, 106, 2}, /* cooperative: no full wave, whole; ping-pong: 160 tiles */
    };
    check_split_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Forced part counts on odd shapes: m and n not tile multiples, k not a
 * multiple of the stage (129: 3 stages; 333: 6), k of two stages in two
 * parts, one stage a part (8 of 8), more parts than a tile has stages
 * (8 asked of 3); every output dtype, bias, accumulate, padded ldy. */
static void case_split_odd(const void *p) {
    (void)p;
    const split_case cases[] = {
        {BF, BF, 300, 1000, 129, 0, 1, 0, 0, 2, 0, 0, 111, 0},
        {FH, F32, 1000, 777, 333, 3, 0, 1, 0, 3, 0, 0, 112, 0},
        {BF, F32, 129, 255, 128, 0, 1, 1, 0, 2, 0, 0, 113, 0},
        {FH, FH, 65, 63, 1000, 5, 1, 1, 0, 7, 0, 0, 114, 0},
        {BF, BF, 256, 512, 512, 0, 0, 0, 0, 8, 0, 0, 115, 0},
        {FH, BF, 200, 300, 129, 1, 1, 0, 0, 8, 0, 0, 116, 0},
        {BF, FH, 1, 1, 640, 0, 1, 1, 0, 4, 0, 0, 117, 0},
    };
    check_split_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Small grids: whole tiles, then parts, on one CTA (the ping-pong
 * consumers hand the ring position over between units of different
 * lengths, an odd count each), the model's choice among them; the dynamic
 * schedule over units. */
static void case_split_grids(const void *p) {
    (void)p;
    const split_case cases[] = {
        {FH, FH, 777, 1500, 2048, 0, 1, 0, 8, 0, 0, 0, 121, 3},
        {FH, BF, 1000, 200, 1000, 0, 0, 1, 3, 5, 0, 0, 122, 0},
        {BF, F32, 1000, 1000, 640, 2, 1, 0, 5, 4, 0, 1, 123, 0},
        {BF, BF, 2048, 3072, 1024, 0, 1, 1, 7, 3, 0, 1, 124, 0},
        {FH, FH, 1100, 600, 200, 0, 0, 0, 2, 2, 0, 0, 125, 0},
    };
    check_split_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* fp8 (e4m3 x e4m3, scales 1): accumulating in the tensor cores (the fp8
 * bound) and promoting (bit for bit the unsplit result), odd shapes, k not
 * a multiple of the 128-wide stage, a small grid, and the 2.42-wave shape
 * with the model's choice. */
static void case_split_fp8(const void *p) {
    (void)p;
    const split_case cases[] = {
        {E4, BF, 300, 1000, 640, 0, 1, 0, 0, 2, 0, 0, 131, 0},
        {E4, F32, 300, 1000, 640, 0, 1, 1, 0, 3, 1, 0, 132, 0},
        {E4, FH, 1000, 200, 1008, 3, 0, 1, 3, 4, 1, 1, 133, 0},
        {E4, BF, 1000, 200, 1008, 0, 1, 0, 3, 4, 0, 0, 134, 0},
        {E4, BF, 8192, 1280, 8192, 0, 0, 0, 132, 0, 0, 0, 135, 1},
        {E4, BF, 8192, 1280, 8192, 0, 1, 0, 132, 0, 1, 0, 136, 1},
    };
    check_split_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* What the split leaves alone: calls with the fused hooks or epilogue, and
 * whole waves, ask for no workspace; a workspace smaller than a split
 * wants takes fewer parts (or none: smaller than the counters), with the
 * same result; the refusals of split_ws and tail_split. */
static void case_split_limits(const void *p) {
    (void)p;
    require_sm90();
    int sms = 0;
    GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    void *buf;
    GPU_CHECK(cudaMalloc(&buf, 1 << 20));
    cgm_hgemm_args a = args_64(buf); /* one tile: a tail of one, two stages */
    a.k = a.ldx = a.ldw = 128;
    a.tail_split = 2;
    CHECK(cgm_hgemm_split_ws_bytes(&a) > 0);
    a.naddends = 1, a.addend[0] = buf, a.addend_ld = 64, a.addend_dtype = CGM_DTYPE_FP32;
    CHECK_INT_EQ(cgm_hgemm_split_ws_bytes(&a), 0);
    a.naddends = 0, a.epilogue = CGM_EPILOGUE_GELU;
    CHECK_INT_EQ(cgm_hgemm_split_ws_bytes(&a), 0);
    a.epilogue = CGM_EPILOGUE_NONE, a.tail_split = 1;
    CHECK_INT_EQ(cgm_hgemm_split_ws_bytes(&a), 0);
    a.tail_split = 2, a.m = 128 * sms, a.n = a.ldy = 256, a.variant = CGM_HGEMM_COOPERATIVE; /* one whole wave */
    CHECK_INT_EQ(cgm_hgemm_split_ws_bytes(&a), 0);
    a = args_64(buf);
    a.split_ws = (char *)buf + 8;
    expect_refused(&a, "split_ws 8 bytes off", "split_ws must be 16-byte aligned");
    a.split_ws = buf, a.tail_split = 9;
    expect_refused(&a, "tail_split 9", "tail_split must be 0");
    a.tail_split = -1;
    expect_refused(&a, "tail_split -1", "tail_split must be 0");
    cudaFree(buf);

    /* 4 parts asked, room for 2, then for none: the same bits */
    split_case c = {BF, BF, 300, 1000, 1000, 0, 1, 1, 0, 4, 0, 0, 141, 0};
    split_data d;
    data_make(&c, &d);
    void *h0 = malloc(d.ny * 2), *h1 = malloc(d.ny * 2);
    if (!h0 || !h1) TEST_FAIL("malloc");
    cgm_hgemm_args s = case_args(&c, &d, CGM_HGEMM_COOPERATIVE);
    run_once(&s, &d, h0);
    s.tail_split = 2;
    size_t two = cgm_hgemm_split_ws_bytes(&s);
    s.tail_split = 4;
    CHECK(cgm_hgemm_split_ws_bytes(&s) > two && two > CGM_HGEMM_SPLIT_COUNTER_BYTES);
    GPU_CHECK(cudaMalloc(&s.split_ws, two));
    GPU_CHECK(cudaMemset(s.split_ws, 0, two));
    for (size_t bytes = two; ; bytes = CGM_HGEMM_SPLIT_COUNTER_BYTES - 16) {
        s.split_ws_bytes = bytes;
        run_once(&s, &d, h1);
        counters_zero(s.split_ws, "a launch", "split_ws smaller than 4 parts want");
        if (memcmp(h0, h1, d.ny * 2)) TEST_FAIL("split_ws of %zu bytes: other bits than the unsplit kernel", bytes);
        if (bytes < two) break;
    }
    cudaFree(s.split_ws);
    free(h0), free(h1);
    data_free(&d);
}

/* The split kernels' work units against the parts (host only, no GPU
 * needed): cgm_hgemm_split_check. */
static void case_split_units(const void *p) {
    (void)p;
    char why[300] = "";
    long long n = cgm_hgemm_split_check(why, sizeof why);
    if (n < 0) TEST_FAIL("%s", why);
    printf("split_units: %lld units checked\n", n);
}

void hgemm_register_split_cases(void) {
    test_set_timeout(60);
    test_add("split_units", case_split_units, NULL);
    test_set_timeout(300);
    test_add("split_shapes", case_split_shapes, NULL);
    test_add("split_fp8", case_split_fp8, NULL);
    test_set_timeout(120);
    test_add("split_odd", case_split_odd, NULL);
    test_add("split_grids", case_split_grids, NULL);
    test_add("split_limits", case_split_limits, NULL);
}
