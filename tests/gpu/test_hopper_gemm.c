/* commgemm's own sm_90a GEMM (src/device/hopper/) against cuBLASLt on odd
 * shapes (m, n, k not multiples of the 128x256x64 tile, k small), both
 * input dtypes, the three output dtypes, bias, accumulate, padded and
 * unaligned leading dimensions, the refusals, the fused all-gather hooks
 * (row flags that are ready, a flag that never comes, a tile order, x_own),
 * the fused reduce-scatter's addends (ready, late, never), the dynamic
 * tile schedule, and the scheduler's arithmetic on the host.
 *
 * Every case runs both kernel variants (cooperative and ping-pong).
 *
 * Inputs are multiples of 1/8 in [-1, 1], so the fp32 sums (+ bias + old Y)
 * are exact and the right answer is the exact value rounded once to the
 * output dtype. A host reference computes it (integer dot products of 8 x
 * the inputs, exact): at every element of small cases, on sampled rows and
 * columns, and at every element where ours is not within a tolerance of
 * cuBLASLt. Wherever it is computed ours must equal it bit for bit;
 * elsewhere ours must be within the tolerance of cuBLASLt. Disagreements
 * with cuBLASLt are reported with who was exact, and pass when ours was
 * (cuBLASLt's bf16 output at k 1536 rounds an intermediate: about 2 ulps off).
 *
 * The timings (the variants against cuBLASLt, the fused hooks, the
 * addends) are bench/kernel_bench.c's: commgemm-kernel-bench. */
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include "backend/gpu/gpu.h"
#include "device/hopper_gemm.h"
#include "gpu_check.h"
#include "harness.h"
#include "hgemm_values.h"


/* ---------------------------------------------------------------- values */

static void *fill(cgm_dtype t, size_t count, uint64_t seed) {
    void *buf = hv_fill(t, count, seed);
    if (!buf) TEST_FAIL("malloc %zu", count * hv_size(t));
    return buf;
}
static void *to_device(const void *host, size_t bytes) {
    void *d = NULL;
    GPU_CHECK(cudaMalloc(&d, bytes + 64));
    GPU_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Skips unless an sm_90 device is there; probed in a child so that this
 * process may still fork after it (the harness runs each case in a child). */
static void require_sm90(void) {
    int count = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0)
        TEST_SKIP("no CUDA device: cudaGetDeviceCount returned %d (%s)", (int)err,
                  cudaGetErrorString(err));
    GPU_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    GPU_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major != 9 || minor != 0)
        TEST_SKIP("cgm_hgemm needs an sm_90 device, this is sm_%d%d", major, minor);
}

/* ------------------------------------------------------------ one GEMM */

typedef struct gemm_case {
    cgm_dtype in, out;
    int64_t m, n, k;
    int64_t pad_x, pad_w, pad_y; /* added to the (8-rounded) ld */
    int bias, accumulate;
    int y_offset;  /* elements: an unaligned Y for ours */
    int sm_count;  /* 0: all */
    int flags;     /* 1: row flags preset to the epoch, tiles in reverse order */
    uint64_t seed;
    int variant;   /* 0: both CGM_HGEMM_COOPERATIVE and CGM_HGEMM_PINGPONG */
    int dynamic;   /* 1: with tile_counter, launched twice (Y reset between), the counter zero after each */
} gemm_case;

static const char *variant_name(int v) {
    return v == CGM_HGEMM_COOPERATIVE ? "cooperative" : v == CGM_HGEMM_PINGPONG ? "pingpong" : "auto";
}

/* v rounded once (nearest even) to the output dtype; v is a multiple of
 * 1/64 below 2^20 here, so (float)v is exact. */
static double round_out(double v, cgm_dtype t) {
    if (t == CGM_DTYPE_FP32 || v == 0) return (double)(float)v;
    int e = ilogb(v);
    int mant = t == CGM_DTYPE_BF16 ? 7 : 10;
    if (t == CGM_DTYPE_FP16 && e < -14) e = -14; /* subnormal spacing */
    double ulp = ldexp(1.0, e - mant);
    return nearbyint(v / ulp) * ulp;
}

static cgm_lt *lt_handle(void **ws, size_t *ws_bytes) {
    static cgm_lt *lt;
    static void *workspace;
    if (!lt) {
        if (cgm_lt_create(&lt) != CGM_SUCCESS) TEST_FAIL("cgm_lt_create: %s", cgm_last_error());
        GPU_CHECK(cudaMalloc(&workspace, 32u << 20));
    }
    *ws = workspace;
    *ws_bytes = 32u << 20;
    return lt;
}

/* X and W as integers, 8 x the value (the inputs are multiples of 1/8 in
 * [-1, 1]), rows of kp = k rounded up to 16 with zeros after k: the dot
 * product is then an exact int32 sum that the compiler vectorizes, so the
 * exact result is cheap enough to compute at every element of small cases
 * and at every element where ours and cuBLASLt disagree in large ones. */
static int16_t *to_eighths(const void *buf, cgm_dtype t, int64_t rows, int64_t ld, int64_t k, int64_t kp) {
    int16_t *q = calloc((size_t)(rows * kp) + 16, sizeof *q);
    if (!q) TEST_FAIL("calloc %lld int16", (long long)(rows * kp));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t kk = 0; kk < k; kk++) {
            double v = 8.0 * hv_get(buf, t, (size_t)(r * ld + kk));
            if (v != nearbyint(v) || fabs(v) > 8)
                TEST_FAIL("input %g at (%lld, %lld) is not a multiple of 1/8 in [-1, 1]", v / 8, (long long)r,
                          (long long)kk);
            q[r * kp + kk] = (int16_t)v;
        }
    return q;
}

static int32_t dot_eighths(const int16_t *a, const int16_t *b, int64_t kp) {
    int32_t acc[16] = {0};
    for (int64_t kk = 0; kk < kp; kk += 16)
        for (int l = 0; l < 16; l++) acc[l] += (int32_t)a[kk + l] * b[kk + l];
    int32_t s = 0;
    for (int l = 0; l < 16; l++) s += acc[l];
    return s;
}

/* The exact Y[i, j] (X and W from to_eighths, rows of kp; the sum is exact
 * in double), rounded once to the output dtype. Bias and the old Y are read
 * only when the case has them (without accumulate the old Y is NaN poison). */
static double exact_at(const gemm_case *c, const int16_t *xq, const int16_t *wq, int64_t kp, const void *hb,
                       const void *hy0, int64_t ldy, int64_t i, int64_t j) {
    double sum = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0;
    if (c->bias) sum += hv_get(hb, c->out, (size_t)j);
    if (c->accumulate) sum += hv_get(hy0, c->out, (size_t)(i * ldy + j));
    return round_out(sum, c->out);
}

/* Every element is checked against the exact result when the case costs at
 * most this many multiply-adds on the host; larger cases: sampled rows and
 * columns, and every element where ours and cuBLASLt disagree. */
#define EXACT_EVERYWHERE_MACS (1ll << 26)

/* Runs cuBLASLt once and ours (each variant of the case) on the case;
 * returns the number of wrong elements (prints the first few and the case). */
static int64_t run_case(const gemm_case *c) {
    int64_t ldx = (c->k + 7) / 8 * 8 + c->pad_x, ldw = (c->k + 7) / 8 * 8 + c->pad_w;
    int64_t ldy = c->n + c->pad_y;
    size_t nx = (size_t)(c->m * ldx), nw = (size_t)(c->n * ldw), ny = (size_t)(c->m * ldy);
    void *hx = fill(c->in, nx, c->seed), *hw = fill(c->in, nw, c->seed + 1);
    void *hb = fill(c->out, (size_t)c->n, c->seed + 2), *hy0 = fill(c->out, ny, c->seed + 3);
    if (!c->accumulate) memset(hy0, 0xFF, ny * hv_size(c->out)); /* NaN: unwritten shows */
    int64_t kp = (c->k + 15) / 16 * 16;
    int16_t *xq = to_eighths(hx, c->in, c->m, ldx, c->k, kp), *wq = to_eighths(hw, c->in, c->n, ldw, c->k, kp);
    int everywhere = c->m * c->n * kp <= EXACT_EVERYWHERE_MACS;
    void *dx = to_device(hx, nx * hv_size(c->in)), *dw = to_device(hw, nw * hv_size(c->in));
    void *db = to_device(hb, (size_t)c->n * hv_size(c->out));
    void *dy_ours_buf, *dy_ref = to_device(hy0, ny * hv_size(c->out));
    GPU_CHECK(cudaMalloc(&dy_ours_buf, (ny + 8) * hv_size(c->out)));
    char *dy_ours = (char *)dy_ours_buf + c->y_offset * hv_size(c->out);

    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = c->in, g.out_dtype = c->out;
    g.m = c->m, g.n = c->n, g.k = c->k;
    g.x = dx, g.ldx = ldx, g.w = dw, g.ldw = ldw, g.y = dy_ref, g.ldy = ldy;
    g.bias = c->bias ? db : NULL;
    g.accumulate = c->accumulate;
    void *ws;
    size_t ws_bytes;
    cgm_lt *lt = lt_handle(&ws, &ws_bytes);
    if (cgm_lt_gemm(lt, &g, ws, ws_bytes, 0) != CGM_SUCCESS)
        TEST_FAIL("cgm_lt_gemm: %s", cgm_last_error());
    GPU_CHECK(cudaDeviceSynchronize());
    void *hy = malloc(ny * hv_size(c->out) + 1), *href = malloc(ny * hv_size(c->out) + 1);
    GPU_CHECK(cudaMemcpy(href, dy_ref, ny * hv_size(c->out), cudaMemcpyDeviceToHost));

    /* Sampled rows and columns checked against the exact result. */
    int64_t srow[4] = {0, c->m / 3, c->m / 2, c->m - 1}, scol[3] = {0, c->n / 2, c->n - 1};
    int64_t wrong = 0;
    int variants[2] = {CGM_HGEMM_COOPERATIVE, CGM_HGEMM_PINGPONG}, nvar = 2;
    if (c->variant) variants[0] = c->variant, nvar = 1;
    for (int v = 0; v < nvar; v++) {
        GPU_CHECK(cudaMemcpy(dy_ours, hy0, ny * hv_size(c->out), cudaMemcpyHostToDevice));
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = c->in;
        a.out_dtype = c->out;
        a.m = c->m, a.n = c->n, a.k = c->k;
        a.x = dx, a.ldx = ldx, a.w = dw, a.ldw = ldw, a.y = dy_ours, a.ldy = ldy;
        a.bias = c->bias ? db : NULL;
        a.accumulate = c->accumulate;
        a.sm_count = c->sm_count;
        a.variant = variants[v];
        unsigned long long *dflags = NULL;
        int *dtimeout = NULL, *dorder = NULL;
        if (c->flags) {
            int64_t rows_per_flag = 100, nflags = (c->m + rows_per_flag - 1) / rows_per_flag;
            int tiles_m = (int)((c->m + CGM_HGEMM_TILE_M - 1) / CGM_HGEMM_TILE_M);
            unsigned long long *hf = malloc((size_t)nflags * 8);
            int *ho = malloc((size_t)tiles_m * sizeof(int));
            for (int64_t i = 0; i < nflags; i++) hf[i] = 7 + (unsigned long long)(i % 2); /* >= epoch */
            for (int i = 0; i < tiles_m; i++) ho[i] = tiles_m - 1 - i;
            dflags = to_device(hf, (size_t)nflags * 8);
            dorder = to_device(ho, (size_t)tiles_m * sizeof(int));
            GPU_CHECK(cudaMalloc((void **)&dtimeout, sizeof(int)));
            GPU_CHECK(cudaMemset(dtimeout, 0, sizeof(int)));
            free(hf);
            free(ho);
            a.row_flags = dflags, a.rows_per_flag = rows_per_flag, a.flag_epoch = 7;
            a.wait_timeout_ns = 2000000000ll, a.timeout_out = dtimeout, a.m_block_order = dorder;
        }
        unsigned int *dcounter = NULL;
        if (c->dynamic) {
            GPU_CHECK(cudaMalloc((void **)&dcounter, sizeof(unsigned int)));
            GPU_CHECK(cudaMemset(dcounter, 0, sizeof(unsigned int)));
            a.tile_counter = dcounter;
        }
        const char *why = NULL;
        if (!cgm_hgemm_supported(&a, &why)) TEST_FAIL("cgm_hgemm_supported said no: %s", why);
        for (int launch = 0; launch < (c->dynamic ? 2 : 1); launch++) {
            if (launch) /* the second launch must find the counter as the first left it: zero */
                GPU_CHECK(cudaMemcpy(dy_ours, hy0, ny * hv_size(c->out), cudaMemcpyHostToDevice));
            GPU_CHECK(cgm_hgemm(&a, 0));
            GPU_CHECK(cudaDeviceSynchronize());
            if (dcounter) {
                unsigned int left = 1;
                GPU_CHECK(cudaMemcpy(&left, dcounter, sizeof left, cudaMemcpyDeviceToHost));
                if (left != 0)
                    TEST_FAIL("%s %lldx%lldx%lld (sm_count %d): tile_counter %u after launch %d, expected 0",
                              variant_name(a.variant), (long long)c->m, (long long)c->n, (long long)c->k,
                              c->sm_count, left, launch + 1);
            }
        }
        cudaFree(dcounter);
        GPU_CHECK(cudaMemcpy(hy, dy_ours, ny * hv_size(c->out), cudaMemcpyDeviceToHost));
        double eps = c->out == CGM_DTYPE_BF16 ? 1.0 / 128 : c->out == CGM_DTYPE_FP16 ? 1.0 / 1024 : 1e-6;
        /* The rule: wherever the exact result is computed, ours must equal
         * it bit for bit. It is computed at every element of small cases,
         * on sampled rows and columns, and at every element where ours is
         * not within the tolerance of cuBLASLt; elsewhere ours must be
         * within the tolerance of cuBLASLt. A disagreement with cuBLASLt
         * where ours is exact is reported and passes (cuBLASLt's bf16
         * output at k 1000-1536 is about 2 ulps off the exact value: it rounds an
         * intermediate). */
        int64_t bad_here = 0, differ = 0, ours_exact = 0, lt_exact = 0, neither = 0, checked = 0;
        for (int64_t i = 0; i < c->m; i++) {
            int row_sampled = i == srow[0] || i == srow[1] || i == srow[2] || i == srow[3];
            for (int64_t j = 0; j < ldy; j++) {
                size_t at = (size_t)(i * ldy + j);
                float got = hv_get(hy, c->out, at), want = hv_get(href, c->out, at);
                int bad = 0;
                double exact = NAN;
                if (j >= c->n) { /* padding: untouched, bit for bit */
                    bad = memcmp((char *)hy + at * hv_size(c->out), (char *)hy0 + at * hv_size(c->out),
                                 hv_size(c->out)) != 0;
                } else {
                    int near = fabs((double)got - want) <= eps * fabs((double)want) + 1e-6 * (double)(c->k + 2);
                    if (!near) differ++;
                    if (everywhere || !near || row_sampled || j == scol[0] || j == scol[1] || j == scol[2]) {
                        exact = exact_at(c, xq, wq, kp, hb, hy0, ldy, i, j);
                        checked++;
                        int o = (double)got == exact, l = (double)want == exact;
                        if (!near) ours_exact += o, lt_exact += l, neither += !o && !l;
                        bad = !o; /* ours must be the exact result, rounded once */
                    }
                }
                if (bad && bad_here++ < 4)
                    fprintf(stderr, "  %s (%lld, %lld) = %.7g, exact %.7g, cuBLASLt %.7g%s\n", variant_name(a.variant),
                            (long long)i, (long long)j, got, exact, want,
                            j >= c->n ? " (padding column changed; exact not computed)" : "");
            }
        }
        if (differ)
            fprintf(stderr, "%s %lld elements differ from cuBLASLt beyond the tolerance (all checked): ours exact at %lld,"
                    " cuBLASLt exact at %lld, neither %lld; in %s out %s m %lld n %lld k %lld bias %d acc %d%s\n",
                    variant_name(a.variant), (long long)differ, (long long)ours_exact, (long long)lt_exact,
                    (long long)neither, cgm_dtype_name(c->in), cgm_dtype_name(c->out), (long long)c->m,
                    (long long)c->n, (long long)c->k, c->bias, c->accumulate,
                    ours_exact == differ ? " (ours exact at all of them: passes)" : "");
        if (bad_here)
            fprintf(stderr, "WRONG %lld of %lld (%s): in %s out %s m %lld n %lld k %lld ldx %lld ldw %lld ldy %lld"
                    " bias %d acc %d y_offset %d sm_count %d flags %d (%lld checked against the exact result%s)\n",
                    (long long)bad_here, (long long)(c->m * ldy), variant_name(a.variant), cgm_dtype_name(c->in),
                    cgm_dtype_name(c->out), (long long)c->m, (long long)c->n, (long long)c->k, (long long)ldx,
                    (long long)ldw, (long long)ldy, c->bias, c->accumulate, c->y_offset, c->sm_count, c->flags,
                    (long long)checked, everywhere ? ": every element" : "");
        wrong += bad_here;
        if (dtimeout) {
            int timed_out = -1;
            GPU_CHECK(cudaMemcpy(&timed_out, dtimeout, sizeof(int), cudaMemcpyDeviceToHost));
            if (timed_out != 0) TEST_FAIL("flags preset to the epoch, but timeout_out = %d", timed_out);
        }
        cudaFree(dflags), cudaFree(dtimeout), cudaFree(dorder);
    }
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dy_ours_buf), cudaFree(dy_ref);
    free(hx), free(hw), free(hb), free(hy0), free(hy), free(href), free(xq), free(wq);
    return wrong;
}

/* ---------------------------------------------------------------- cases */

static const int64_t sizes[] = {1, 7, 63, 64, 65, 127, 129, 255, 300, 1000, 1536};
static const int64_t ks[] = {8, 16, 24, 1, 7, 63, 64, 65, 127, 129, 255, 300, 1000, 1536};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define NKS ((int)(sizeof ks / sizeof ks[0]))

/* Every (m, k) and every (n, k) pair, the third size rotating; `limit`
 * caps the sizes. */
static void sweep(cgm_dtype in, cgm_dtype out, int64_t limit) {
    require_sm90();
    int64_t wrong = 0, runs = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < NSIZES; i++)
            for (int j = 0; j < NKS; j++) {
                gemm_case c = {in, out, 0, 0, ks[j], 0, 0, 0, 0, 0, 0, 0, 0, (uint64_t)(i * 100 + j), 0, 0};
                int64_t other = sizes[(i * 7 + j * 3 + pass) % NSIZES];
                c.m = pass == 0 ? sizes[i] : other;
                c.n = pass == 0 ? other : sizes[i];
                if (c.m > limit || c.n > limit || c.k > limit) continue;
                c.bias = (i + j) % 3 == 0;
                c.accumulate = (i + j) % 4 == 1;
                wrong += run_case(&c) != 0;
                runs++;
            }
    if (wrong) TEST_FAIL("%lld of %lld GEMMs wrong (first ones above)", (long long)wrong, (long long)runs);
}

static void case_shapes_bf16(const void *p) { (void)p, sweep(CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1 << 30); }
static void case_shapes_fp16(const void *p) { (void)p, sweep(CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1 << 30); }
static void case_shapes_bf16_fp32(const void *p) { (void)p, sweep(CGM_DTYPE_BF16, CGM_DTYPE_FP32, 1 << 30); }
static void case_shapes_fp16_fp32(const void *p) { (void)p, sweep(CGM_DTYPE_FP16, CGM_DTYPE_FP32, 1 << 30); }
static void check_cases(const gemm_case *cases, int count);

/* Small enough for compute-sanitizer: partial tiles on every side, k below
 * and around the k block, both dtypes, odd ldy, flags, a partial last wave
 * of 5 CTAs. */
static void case_sanitize_subset(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 21, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 7, 300, 16, 0, 0, 0, 1, 1, 0, 0, 0, 22, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 129, 257, 24, 8, 0, 1, 1, 0, 1, 0, 0, 23, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 300, 65, 65, 0, 8, 3, 0, 1, 0, 0, 0, 24, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 255, 129, 129, 0, 0, 0, 1, 1, 0, 2, 0, 25, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 256, 512, 1, 0, 0, 0, 1, 1, 0, 0, 0, 26, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 300, 300, 0, 0, 0, 1, 0, 0, 0, 1, 27, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 64, 63, 7, 0, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 300, 200, 0, 0, 0, 1, 1, 0, 5, 0, 29, 0, 0},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

static void check_cases(const gemm_case *cases, int count) {
    require_sm90();
    int64_t wrong = 0;
    for (int i = 0; i < count; i++) wrong += run_case(&cases[i]) != 0;
    if (wrong) TEST_FAIL("%lld of %d GEMMs wrong (first ones above)", (long long)wrong, count);
}

/* The multiply-high division of the row-flag check and the tile scheduler
 * against '/', and the scheduler's tile coordinates against their division
 * form (host only, no GPU needed). */
static void case_fastdiv(const void *p) {
    (void)p;
    char why[160] = "";
    long long n = cgm_hgemm_fastdiv_check(why, sizeof why);
    if (n < 0) TEST_FAIL("%s", why);
    printf("fastdiv: %lld divisions checked\n", n);
}

/* Bias and accumulate on every output dtype; padded and odd ldy; an
 * unaligned Y (scalar stores); more tiles than CTAs (ring phases wrap,
 * persistent loop); a grid of 3 CTAs. */
static void case_epilogue_and_ld(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 1000, 129, 8, 24, 3, 1, 1, 0, 0, 0, 1, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1000, 300, 65, 16, 0, 1, 1, 0, 1, 0, 0, 2, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 129, 255, 1000, 0, 8, 5, 1, 1, 1, 0, 0, 3, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 65, 63, 24, 8, 8, 0, 1, 1, 1, 0, 0, 4, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 2048, 3072, 4096, 0, 0, 0, 1, 0, 0, 0, 0, 5, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1536, 1536, 1536, 0, 0, 0, 0, 1, 0, 3, 0, 6, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 1000, 777, 333, 8, 8, 1, 1, 1, 1, 7, 0, 7, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 1024, 1024, 512, 0, 0, 0, 1, 1, 0, 0, 0, 8, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 512, 768, 520, 0, 0, 0, 1, 1, 0, 0, 0, 9, 0, 0},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* The ring and turn bookkeeping with many tiles per CTA: one CTA with an
 * odd tile count (consumers get 5 and 4 tiles), k blocks 1, = the ring
 * depth (6 in ping-pong, 4 cooperative), + 1, many; a single tile (the
 * second consumer idle); 16-byte stores with bias on whole tiles. */
static void case_many_tiles(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 300, 8, 0, 0, 0, 1, 0, 0, 1, 0, 31, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 129, 257, 384, 0, 0, 0, 0, 1, 0, 2, 0, 32, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1000, 1000, 448, 0, 0, 0, 1, 1, 0, 3, 0, 33, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 64, 128, 4096, 0, 0, 0, 1, 0, 0, 0, 0, 34, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 513, 385, 200, 0, 0, 0, 0, 1, 0, 4, 0, 35, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 256, 512, 320, 0, 0, 8, 1, 0, 0, 1, 0, 36, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1024, 1024, 256, 0, 0, 0, 1, 0, 0, 5, 0, 37, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1536, 1536, 1536, 0, 0, 0, 0, 0, 0, 0, 1, 38, 0, 0},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* The dynamic tile schedule (tile_counter), each case launched twice with
 * the same counter: grids of 1, 3 and 7 CTAs (many claims each, an odd
 * count per consumer), a single tile, the whole GPU on 2048x3072x1000 and
 * 4096x4096x256 (more claims than CTAs); bias, accumulate, every output
 * dtype, odd ldy and an unaligned Y. Two cases have row flags with the
 * reversed tile order, which take the static schedule with the counter
 * given. Exact results, and the counter zero after every launch. */
static void case_dynamic(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 1000, 300, 0, 0, 0, 1, 0, 0, 1, 0, 51, 0, 1},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 1000, 513, 65, 0, 0, 0, 0, 1, 0, 3, 0, 52, 0, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 300, 129, 8, 0, 3, 1, 1, 3, 7, 1, 53, 0, 1},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 100, 100, 64, 0, 0, 0, 1, 0, 0, 0, 0, 54, 0, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 2048, 3072, 1000, 0, 0, 0, 1, 0, 0, 0, 1, 55, 0, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 4096, 4096, 256, 0, 0, 0, 0, 1, 0, 0, 0, 56, 0, 1},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Flags already at the epoch (rows_per_flag 100, not the tile), tiles in
 * reverse m order: same result, no timeout. */
static void case_flags_ready(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 1536, 300, 0, 0, 0, 1, 0, 0, 0, 1, 11, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 2049, 513, 1000, 0, 0, 0, 0, 1, 0, 5, 1, 12, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 7, 300, 64, 0, 0, 0, 1, 1, 0, 0, 1, 13, 0, 0},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One flag block never reaches the epoch: timeout_out is set and the
 * kernel ends within a bounded time (not one timeout per tile). */
static void case_flags_timeout(const void *p) {
    (void)p;
    require_sm90();
    int64_t m = 4096, n = 4096, k = 256;
    void *dx, *dw, *dy;
    GPU_CHECK(cudaMalloc(&dx, (size_t)(m * k * 2)));
    GPU_CHECK(cudaMalloc(&dw, (size_t)(n * k * 2)));
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n * 2)));
    GPU_CHECK(cudaMemset(dx, 0, (size_t)(m * k * 2)));
    GPU_CHECK(cudaMemset(dw, 0, (size_t)(n * k * 2)));
    int64_t nflags = m / 512;
    unsigned long long hf[8] = {3, 3, 3, 2, 3, 3, 3, 3}; /* block 3 never comes */
    unsigned long long *df = to_device(hf, sizeof hf);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = a.out_dtype = CGM_DTYPE_BF16;
    a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
    a.row_flags = df, a.rows_per_flag = m / nflags, a.flag_epoch = 3;
    a.wait_timeout_ns = 200000000ll, a.timeout_out = dt;
    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
        a.variant = v;
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        double t0 = now_s();
        GPU_CHECK(cgm_hgemm(&a, 0));
        GPU_CHECK(cudaDeviceSynchronize());
        double waited = now_s() - t0;
        int timed_out = 0;
        GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
        printf("flag timeout (%s): timeout_out %d after %.3f s (timeout 0.2 s)\n", variant_name(v), timed_out,
               waited);
        CHECK_INT_EQ(timed_out, 1);
        if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with a 0.2 s flag timeout", waited);
    }
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(df), cudaFree(dt);
}

/* Runs a GEMM with fused hooks on the default stream: checks that it is
 * supported, waits for it, and returns *timeout_out (1: a flag wait
 * expired). */
static int run_hooked(const cgm_hgemm_args *a) {
    const char *why = NULL;
    if (!cgm_hgemm_supported(a, &why)) TEST_FAIL("cgm_hgemm_supported said no: %s", why);
    GPU_CHECK(cgm_hgemm(a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    int timed_out = -1;
    GPU_CHECK(cudaMemcpy(&timed_out, a->timeout_out, sizeof(int), cudaMemcpyDeviceToHost));
    return timed_out;
}

/* The fused reduce-scatter epilogue: Y = X . W^T + sum of 1 or 3 addends
 * (fp32 or bf16) + bias, with each addend's flags at the epoch read from
 * device memory (flag_epoch_ptr), and the fused all-gather's shard-mapped
 * row flags (a cell that is not a row flag stays 0: reading it times out).
 * Every element must equal the exact result rounded once. */
static void case_addends(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 300, n = 200, k = 136, ldy = 208, ald = 202;
    const int64_t shard = 150, rpf = 128, stride = 5; /* 2 shards, 2 pieces each */
    const cgm_dtype outs[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP32};
    const cgm_dtype adts[] = {CGM_DTYPE_FP32, CGM_DTYPE_BF16};
    int64_t kp = (k + 15) / 16 * 16;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 51), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 52);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    /* Row flags: cells j * stride + q for shard j, piece q; the rest 0. */
    unsigned long long hrow[2 * 5] = {9, 9, 0, 0, 0, 9, 9, 0, 0, 0};
    unsigned long long hadd[3] = {9, 12, 9}; /* the 3 pieces of Y's 300 rows */
    unsigned long long epoch = 9;
    unsigned long long *drow = to_device(hrow, sizeof hrow), *dadd = to_device(hadd, sizeof hadd);
    unsigned long long *depoch = to_device(&epoch, sizeof epoch);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    for (int o = 0; o < 2; o++)
        for (int ad = 0; ad < 2; ad++)
            for (int na = 1; na <= 3; na += 2)
                for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
                    cgm_dtype out = outs[o], adt = adts[ad];
                    uint64_t seed = 60 + (uint64_t)(o * 8 + ad * 4 + na);
                    void *hb = fill(out, (size_t)n, seed), *hadds[3], *dadds[3];
                    for (int i = 0; i < na; i++) {
                        hadds[i] = fill(adt, (size_t)(m * ald), seed + 10 + (uint64_t)i);
                        dadds[i] = to_device(hadds[i], (size_t)(m * ald) * hv_size(adt));
                    }
                    void *db = to_device(hb, (size_t)n * hv_size(out)), *dy;
                    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * ldy) * hv_size(out)));
                    GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * ldy) * hv_size(out)));
                    GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
                    cgm_hgemm_args a;
                    memset(&a, 0, sizeof a);
                    a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = out;
                    a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = ldy;
                    a.bias = db, a.variant = v;
                    a.row_flags = drow, a.rows_per_flag = rpf, a.flag_shard_rows = shard;
                    a.flag_shard_stride = stride, a.flag_epoch_ptr = depoch, a.flag_epoch = 1000;
                    a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
                    a.naddends = na, a.addend_dtype = adt, a.addend_ld = ald;
                    for (int i = 0; i < na; i++) {
                        a.addend[i] = dadds[i];
                        a.addend_flags[i] = i == 1 ? NULL : dadd; /* one without flags */
                    }
                    if (run_hooked(&a))
                        TEST_FAIL("flags at the epoch, but the kernel timed out (%s out %s addends %s x %d): a "
                                  "wrong flag cell was read", variant_name(v), cgm_dtype_name(out),
                                  cgm_dtype_name(adt), na);
                    void *hy = malloc((size_t)(m * ldy) * hv_size(out));
                    GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * ldy) * hv_size(out), cudaMemcpyDeviceToHost));
                    int64_t bad = 0;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            double sum = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0 + hv_get(hb, out, (size_t)j);
                            for (int t = 0; t < na; t++) sum += hv_get(hadds[t], adt, (size_t)(i * ald + j));
                            double want = round_out(sum, out), got = hv_get(hy, out, (size_t)(i * ldy + j));
                            if (got != want && bad++ < 4)
                                fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i, (long long)j,
                                        got, want);
                        }
                    if (bad)
                        TEST_FAIL("%lld of %lld wrong: %s, out %s, %d addend(s) of %s", (long long)bad,
                                  (long long)(m * n), variant_name(v), cgm_dtype_name(out), na,
                                  cgm_dtype_name(adt));
                    for (int i = 0; i < na; i++) cudaFree(dadds[i]), free(hadds[i]);
                    cudaFree(db), cudaFree(dy), free(hb), free(hy);
                }
    /* A piece whose addend flag never comes: bounded, and the abort word
     * and record name the addend's peer and chunk. */
    unsigned int *dabort;
    cgm_dev_abort_record *rec;
    GPU_CHECK(cudaMalloc((void **)&dabort, sizeof *dabort));
    GPU_CHECK(cudaMemset(dabort, 0, sizeof *dabort));
    GPU_CHECK(cudaHostAlloc((void **)&rec, sizeof *rec, cudaHostAllocMapped));
    memset((void *)rec, 0, sizeof *rec);
    cgm_dev_abort_record *rec_dev;
    GPU_CHECK(cudaHostGetDevicePointer((void **)&rec_dev, rec, 0));
    void *dy, *dz;
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 4));
    GPU_CHECK(cudaMalloc(&dz, (size_t)(m * n) * 4));
    GPU_CHECK(cudaMemset(dz, 0, (size_t)(m * n) * 4));
    unsigned long long late[3] = {9, 8, 9}; /* piece 1 never reaches 9 */
    GPU_CHECK(cudaMemcpy(dadd, late, sizeof late, cudaMemcpyHostToDevice));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_FP32;
    a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
    a.rows_per_flag = rpf, a.flag_epoch_ptr = depoch, a.wait_timeout_ns = 200000000ll;
    a.naddends = 1, a.addend_dtype = CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = dz, a.addend_flags[0] = dadd;
    a.abort_word = dabort, a.abort_record = rec_dev, a.report_rank = 1;
    a.report_addend_peer[0] = 0, a.report_addend_chunk0 = 40;
    double t0 = now_s();
    GPU_CHECK(cgm_hgemm(&a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    double waited = now_s() - t0;
    unsigned int aborted = 0;
    GPU_CHECK(cudaMemcpy(&aborted, dabort, sizeof aborted, cudaMemcpyDeviceToHost));
    printf("addend flag timeout: abort %u, record set %d rank %d peer %d chunk %d after %.3f s\n", aborted,
           rec->set, rec->waiting_rank, rec->peer, rec->chunk, waited);
    CHECK_INT_EQ(aborted, 1);
    CHECK_INT_EQ(rec->set, 1);
    CHECK_INT_EQ(rec->waiting_rank, 1);
    CHECK_INT_EQ(rec->peer, 0);
    CHECK_INT_EQ(rec->chunk, 41);
    if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with a 0.2 s flag timeout", waited);
    /* The same wait with a peer's notice raised (rank 3 says rank 5
     * failed) and a 20 s flag timeout: the kernel gives up at once and
     * records the notice, not an expiry. */
    unsigned int *dnotice, notice = cgm_dev_notice(3, 5);
    GPU_CHECK(cudaMalloc((void **)&dnotice, sizeof *dnotice));
    GPU_CHECK(cudaMemcpy(dnotice, &notice, sizeof notice, cudaMemcpyHostToDevice));
    GPU_CHECK(cudaMemset(dabort, 0, sizeof *dabort));
    memset((void *)rec, 0, sizeof *rec);
    a.notice_word = dnotice, a.wait_timeout_ns = 20000000000ll;
    t0 = now_s();
    GPU_CHECK(cgm_hgemm(&a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    waited = now_s() - t0;
    GPU_CHECK(cudaMemcpy(&aborted, dabort, sizeof aborted, cudaMemcpyDeviceToHost));
    printf("notice: abort %u, record set %d kind %d rank %d culprit %d teller %d after %.3f s\n", aborted,
           rec->set, rec->flag_kind, rec->waiting_rank, rec->peer, rec->chunk, waited);
    CHECK_INT_EQ(aborted, 1);
    CHECK_INT_EQ(rec->set, 1);
    CHECK_INT_EQ(rec->flag_kind, CGM_DEV_NOTICE_KIND);
    CHECK_INT_EQ(rec->waiting_rank, 1);
    CHECK_INT_EQ(rec->peer, 5);
    CHECK_INT_EQ(rec->chunk, 3);
    if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with the notice raised", waited);
    /* notice_word without abort_word (flags bounded by timeout_out alone):
     * refused. */
    a.abort_word = NULL, a.timeout_out = dt;
    CHECK(cgm_hgemm(&a, 0) == cudaErrorInvalidValue);
    cudaFree(dnotice);
    cudaFree(dy), cudaFree(dz), cudaFree(dabort), cudaFreeHost(rec);
    cudaFree(dx), cudaFree(dw), cudaFree(drow), cudaFree(dadd), cudaFree(depoch), cudaFree(dt);
    free(hx), free(hw), free(xq), free(wq);
}

/* Addends that arrive while the kernel runs: the addend rows of each
 * 128-row piece are copied in (over poison) and then the piece's flag
 * raised, piece by piece in reverse row order, by copies on another stream
 * that start after the kernel has been waiting for 20 ms. Two CTAs, so
 * each consumer meets several tiles in turn; an fp32 and a bf16 addend.
 * In the cooperative kernel each consumer waits for the flags itself; in
 * the ping-pong kernel (rows 16-byte aligned: the helper's form) the
 * helper thread waits and loads the addend into the shared-memory slots by
 * TMA after each flag. An addend read before its flag is poison (3.4e38)
 * and shows; every element must equal the exact result rounded once, and
 * no wait may time out. Last, a flag that never comes in the helper's
 * form: bounded, timeout_out set. */
static void case_addends_late(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 1024, n = 512, k = 64, rpf = 128, pieces = m / rpf;
    int64_t kp = k;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 91), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 92);
    void *ha = fill(CGM_DTYPE_FP32, (size_t)(m * n), 93);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    void *dsrc = to_device(ha, (size_t)(m * n) * 4), *da, *dy;
    /* the same values as bf16 (multiples of 1/8 in [-1, 1]: exact) */
    uint16_t *ha16 = malloc((size_t)(m * n) * 2);
    if (!ha16) TEST_FAIL("malloc %lld", (long long)(m * n) * 2);
    for (int64_t i = 0; i < m * n; i++) ha16[i] = hv_bf16_bits(hv_get(ha, CGM_DTYPE_FP32, (size_t)i));
    void *dsrc16 = to_device(ha16, (size_t)(m * n) * 2);
    unsigned long long epoch = 5, ready[8] = {5, 5, 5, 5, 5, 5, 5, 5}, *dflags, *dready = to_device(ready, sizeof ready);
    int *dt;
    GPU_CHECK(cudaMalloc(&da, (size_t)(m * n) * 4));
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc((void **)&dflags, sizeof ready));
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    cudaStream_t s1, s2;
    GPU_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    GPU_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    uint16_t *hy = malloc((size_t)(m * n) * 2);
    if (!hy) TEST_FAIL("malloc %lld", (long long)(m * n) * 2);
    for (int a16 = 0; a16 < 2; a16++)
        for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
            const char *form = a16 ? "bf16 addend" : "fp32 addend";
            size_t aes = a16 ? 2 : 4;
            const void *src = a16 ? dsrc16 : dsrc;
            GPU_CHECK(cudaMemset(da, 0x7F, (size_t)(m * n) * 4));
            GPU_CHECK(cudaMemset(dflags, 0, sizeof ready));
            GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
            GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * n) * 2));
            GPU_CHECK(cudaDeviceSynchronize());
            cgm_hgemm_args a;
            memset(&a, 0, sizeof a);
            a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_BF16, a.variant = v, a.sm_count = 2;
            a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
            a.rows_per_flag = rpf, a.flag_epoch = epoch, a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
            a.naddends = 1, a.addend_dtype = a16 ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = da;
            a.addend_flags[0] = dflags;
            const char *why = NULL;
            if (!cgm_hgemm_supported(&a, &why)) TEST_FAIL("cgm_hgemm_supported said no: %s", why);
            GPU_CHECK(cgm_hgemm(&a, s1));
            struct timespec nap = {0, 20000000};
            nanosleep(&nap, NULL);
            int running = cudaStreamQuery(s1) == cudaErrorNotReady;
            for (int64_t q = pieces - 1; q >= 0; q--) {
                size_t off = (size_t)(q * rpf * n) * aes;
                GPU_CHECK(cudaMemcpyAsync((char *)da + off, (const char *)src + off, (size_t)(rpf * n) * aes,
                                          cudaMemcpyDeviceToDevice, s2));
                GPU_CHECK(cudaMemcpyAsync(dflags + q, dready + q, sizeof *dflags, cudaMemcpyDeviceToDevice, s2));
            }
            GPU_CHECK(cudaDeviceSynchronize());
            int timed_out = -1;
            GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
            printf("late addends (%s, %s): the kernel %s waiting after 20 ms, timeout_out %d\n", form,
                   variant_name(v), running ? "was" : "was NOT", timed_out);
            if (!running) TEST_FAIL("the kernel ended before any addend flag was raised (%s, %s)", form, variant_name(v));
            CHECK_INT_EQ(timed_out, 0);
            GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * n) * 2, cudaMemcpyDeviceToHost));
            int64_t bad = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double sum = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0;
                    sum += hv_get(ha, CGM_DTYPE_FP32, (size_t)(i * n + j));
                    double want = round_out(sum, CGM_DTYPE_BF16), got = hv_bf16_float(hy[i * n + j]);
                    if (got != want && bad++ < 4)
                        fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i, (long long)j, got, want);
                }
            if (bad)
                TEST_FAIL("%lld of %lld wrong with late addends (%s, %s)", (long long)bad, (long long)(m * n), form,
                          variant_name(v));
        }
    /* A flag that never comes in the ping-pong kernel's helper form: the
     * helper's wait expires, it still loads every tile's addend into the
     * slots, and the kernel ends within a bounded time with timeout_out set
     * (no consumer left waiting). Every piece's flag is raised but piece
     * 2's. */
    for (int a16 = 0; a16 < 2; a16++) {
        unsigned long long some[8] = {5, 5, 0, 5, 5, 5, 5, 5};
        GPU_CHECK(cudaMemcpy(dflags, some, sizeof some, cudaMemcpyHostToDevice));
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_BF16, a.variant = CGM_HGEMM_PINGPONG, a.sm_count = 2;
        a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
        a.rows_per_flag = rpf, a.flag_epoch = epoch, a.wait_timeout_ns = 200000000ll, a.timeout_out = dt;
        a.naddends = 1, a.addend_dtype = a16 ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = da;
        a.addend_flags[0] = dflags;
        double t0 = now_s();
        GPU_CHECK(cgm_hgemm(&a, s1));
        GPU_CHECK(cudaStreamSynchronize(s1));
        double waited = now_s() - t0;
        int timed_out = 0;
        GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
        printf("late addends (pingpong, %s addend): a flag that never comes: timeout_out %d after %.3f s (timeout "
               "0.2 s)\n", a16 ? "bf16" : "fp32", timed_out, waited);
        CHECK_INT_EQ(timed_out, 1);
        if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with a 0.2 s flag timeout", waited);
    }
    free(hy);
    cudaStreamDestroy(s1), cudaStreamDestroy(s2);
    cudaFree(dx), cudaFree(dw), cudaFree(dsrc), cudaFree(dsrc16), cudaFree(da), cudaFree(dy);
    cudaFree(dflags), cudaFree(dready), cudaFree(dt);
    free(hx), free(hw), free(ha), free(ha16), free(xq), free(wq);
}

/* The ping-pong kernel's addends through shared memory: addends whose rows
 * TMA can read (16-byte aligned, rows a multiple of 16 bytes apart) are
 * loaded by the helper thread into two 16 KiB slots, one (tile, addend)
 * ahead of the epilogue. m = 1000 (the last row tile 104 rows: TMA
 * zero-fills past the end), n = 328 (the last column tile 72 wide). 1, 2,
 * 3 and 7 addends (the slots' phases then run on by
 * odd and even steps per tile): with 1, 3 and 7 all but one behind flags,
 * with 2 none (the helper then loads without waiting); 16-bit addends
 * (bf16 and fp16, in halves of 64 rows) and fp32 ones (in quarters of 32
 * columns); bf16 and fp16 outputs; two CTAs (several own tiles per
 * consumer) and the whole grid. Each runs with addend_ld = n (TMA) and
 * n + 2 (the consumers' global loads) and in the cooperative kernel: every
 * element must equal the exact result rounded once, in all of them. */
static void case_addends_tma(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 1000, n = 328, k = 192, ldy = 336;
    const int nas[] = {1, 2, 3, 7};
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 101), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 102);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, k), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, k);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    double *dot = malloc((size_t)(m * n) * sizeof *dot);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) dot[i * n + j] = dot_eighths(xq + i * k, wq + j * k, k) / 64.0;
    unsigned long long ready[8] = {3, 3, 3, 3, 3, 3, 3, 3}, *dready = to_device(ready, sizeof ready);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    void *hy = malloc((size_t)(m * ldy) * 2), *dy;
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * ldy) * 2));
    int runs = 0;
    for (int o = 0; o < 2; o++)
        for (int f32 = 0; f32 < 2; f32++) {
            cgm_dtype out = o ? CGM_DTYPE_FP16 : CGM_DTYPE_BF16;
            cgm_dtype adt = f32 ? CGM_DTYPE_FP32 : o ? CGM_DTYPE_BF16 : CGM_DTYPE_FP16;
            void *hb = fill(out, (size_t)n, 103 + (uint64_t)o), *db = to_device(hb, (size_t)n * 2);
            for (int ni = 0; ni < 4; ni++)
                for (int64_t ald = n; ald <= n + 2; ald += 2) {
                    int na = nas[ni];
                    void *hadds[CGM_HGEMM_MAX_ADDENDS], *dadds[CGM_HGEMM_MAX_ADDENDS];
                    for (int i = 0; i < na; i++) {
                        hadds[i] = fill(adt, (size_t)(m * ald), 110 + (uint64_t)(20 * f32 + 10 * o + i));
                        dadds[i] = to_device(hadds[i], (size_t)(m * ald) * hv_size(adt));
                    }
                    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++)
                        for (int sms = 0; sms <= 2; sms += 2) {
                            GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * ldy) * 2));
                            GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
                            cgm_hgemm_args a;
                            memset(&a, 0, sizeof a);
                            a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = out, a.variant = v, a.sm_count = sms;
                            a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy;
                            a.ldy = ldy, a.bias = db;
                            a.naddends = na, a.addend_dtype = adt, a.addend_ld = ald;
                            for (int i = 0; i < na; i++) {
                                a.addend[i] = dadds[i];
                                a.addend_flags[i] = i == 1 || na == 2 ? NULL : dready;
                            }
                            a.rows_per_flag = 128, a.flag_epoch = 3, a.wait_timeout_ns = 2000000000ll;
                            a.timeout_out = dt;
                            if (run_hooked(&a))
                                TEST_FAIL("%s, %d addends: the flags were at the epoch, yet a wait expired",
                                          variant_name(v), na);
                            GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * ldy) * 2, cudaMemcpyDeviceToHost));
                            int64_t bad = 0;
                            for (int64_t i = 0; i < m; i++)
                                for (int64_t j = 0; j < n; j++) {
                                    double sum = dot[i * n + j] + hv_get(hb, out, (size_t)j);
                                    for (int t = 0; t < na; t++)
                                        sum += hv_get(hadds[t], adt, (size_t)(i * ald + j));
                                    double got = hv_get(hy, out, (size_t)(i * ldy + j));
                                    double want = round_out(sum, out);
                                    if (got != want && bad++ < 4)
                                        fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i,
                                                (long long)j, got, want);
                                }
                            if (bad)
                                TEST_FAIL("%lld of %lld wrong: %s, out %s, %d addend(s) of %s, addend_ld %lld, "
                                          "sm_count %d",
                                          (long long)bad, (long long)(m * n), variant_name(v), cgm_dtype_name(out), na,
                                          cgm_dtype_name(adt), (long long)ald, sms);
                            runs++;
                        }
                    for (int i = 0; i < na; i++) cudaFree(dadds[i]), free(hadds[i]);
                }
            cudaFree(db), free(hb);
        }
    printf("addends by TMA: %d launches exact (2 outputs x 16-bit and fp32 addends x 4 addend counts x 2 addend_ld x "
           "2 variants x 2 grids)\n", runs);
    free(hy), free(dot);
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dready), cudaFree(dt);
    free(hx), free(hw), free(xq), free(wq);
}

/* The fused all-gather's own rows: tiles wholly inside rows [100, 400)
 * read x_own (X's copy in x there is poisoned) and do not wait (their
 * flags never come); the tile shared with the rows before reads x and
 * waits. Every element must equal the exact result rounded once. */
static void case_x_own(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 600, n = 136, k = 72, own0 = 100, own = 300, ldo = 80;
    int64_t kp = (k + 15) / 16 * 16;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 71), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 72);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *hown = calloc((size_t)(own * ldo), 2), *hpoison = malloc((size_t)(m * k) * 2);
    memcpy(hpoison, hx, (size_t)(m * k) * 2);
    for (int64_t i = 0; i < own; i++) memcpy((char *)hown + i * ldo * 2, (char *)hx + (own0 + i) * k * 2, (size_t)k * 2);
    for (int64_t i = 128; i < 384; i++) /* the two inside tiles: 4.0 everywhere */
        for (int64_t j = 0; j < k; j++) hv_put(hpoison, CGM_DTYPE_BF16, (size_t)(i * k + j), 4.0f);
    void *dx = to_device(hpoison, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    void *down = to_device(hown, (size_t)(own * ldo) * 2), *dy;
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 4));
    unsigned long long hf[5] = {5, 0, 0, 5, 5}; /* 128-row blocks 1 and 2 never come */
    unsigned long long *df = to_device(hf, sizeof hf);
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_FP32, a.variant = v;
        a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
        a.x_own = down, a.ldx_own = ldo, a.own_row0 = own0, a.own_rows = own;
        a.row_flags = df, a.rows_per_flag = 128, a.flag_epoch = 5;
        a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
        if (run_hooked(&a)) TEST_FAIL("%s: a tile inside the own rows waited for its flag", variant_name(v));
        float *hy = malloc((size_t)(m * n) * 4);
        GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * n) * 4, cudaMemcpyDeviceToHost));
        int64_t bad = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double want = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0;
                if ((double)hy[i * n + j] != want && bad++ < 4)
                    fprintf(stderr, "  %s (%lld, %lld) = %.7g, exact %.7g\n", variant_name(v), (long long)i,
                            (long long)j, hy[i * n + j], want);
            }
        free(hy);
        if (bad) TEST_FAIL("%s: %lld of %lld wrong", variant_name(v), (long long)bad, (long long)(m * n));
    }
    cudaFree(dx), cudaFree(dw), cudaFree(down), cudaFree(dy), cudaFree(df), cudaFree(dt);
    free(hx), free(hw), free(hown), free(hpoison), free(xq), free(wq);
}

/* The argument checks of the fused hooks: each bad field is refused with a
 * reason that names it, by cgm_hgemm_supported and by cgm_hgemm
 * (cudaErrorInvalidValue), before any device call, so this case runs
 * without a GPU too (the pointers are host memory and never read). */
static void case_hook_arguments(const void *p) {
    (void)p;
    static _Alignas(256) unsigned char buf[4096];
    cgm_hgemm_args good;
    memset(&good, 0, sizeof good);
    good.in_dtype = good.out_dtype = CGM_DTYPE_BF16;
    good.m = 64, good.n = 64, good.k = 64, good.x = buf, good.ldx = 64, good.w = buf, good.ldw = 64;
    good.y = buf, good.ldy = 64;
    struct {
        const char *what, *reason;
        cgm_hgemm_args a;
    } bad[10];
    int n = 0;
    for (int i = 0; i < 10; i++) bad[i].a = good;
    bad[n].what = "naddends 8", bad[n].reason = "naddends must be 0..", bad[n++].a.naddends = 8;
    bad[n].what = "a NULL addend", bad[n].reason = "addend[i] must not be NULL", bad[n++].a.naddends = 1;
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf + 4, bad[n].a.addend_dtype = CGM_DTYPE_FP32, bad[n].a.addend_ld = 64;
    bad[n].what = "an fp32 addend 4-byte aligned", bad[n++].reason = "aligned to two elements";
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf, bad[n].a.addend_dtype = (cgm_dtype)7, bad[n].a.addend_ld = 64;
    bad[n].what = "addend dtype 7", bad[n++].reason = "addend_dtype must be fp32, bf16 or fp16";
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf, bad[n].a.addend_dtype = CGM_DTYPE_BF16, bad[n].a.addend_ld = 63;
    bad[n].what = "addend_ld 63 < n", bad[n++].reason = "addend_ld must be even, >= n";
    bad[n].a.naddends = 1, bad[n].a.addend[0] = buf, bad[n].a.addend_dtype = CGM_DTYPE_BF16, bad[n].a.addend_ld = 64;
    bad[n].a.addend_flags[0] = (const unsigned long long *)buf;
    bad[n].what = "addend flags without rows_per_flag", bad[n++].reason = "flags need rows_per_flag >= 1";
    bad[n].a.row_flags = (const unsigned long long *)buf, bad[n].a.rows_per_flag = 64, bad[n].a.timeout_out = (int *)buf;
    bad[n].a.flag_shard_rows = -1;
    bad[n].what = "flag_shard_rows -1", bad[n++].reason = "flag_shard_rows must be >= 0";
    bad[n].a.x_own = buf + 8, bad[n].a.ldx_own = 64, bad[n].a.own_rows = 10;
    bad[n].what = "x_own 8-byte aligned", bad[n++].reason = "x_own 16-byte aligned";
    bad[n].a.x_own = buf, bad[n].a.ldx_own = 64, bad[n].a.own_row0 = 60, bad[n].a.own_rows = 10;
    bad[n].what = "own rows past m", bad[n++].reason = "the own rows must lie in [0, m)";
    bad[n].a.notice_word = (const unsigned int *)buf, bad[n].a.timeout_out = (int *)buf;
    bad[n].what = "notice_word without abort_word", bad[n++].reason = "notice_word needs abort_word";
    for (int i = 0; i < n; i++) {
        const char *why = NULL;
        if (cgm_hgemm_supported(&bad[i].a, &why))
            TEST_FAIL("%s: accepted, expected a refusal saying \"%s\"", bad[i].what, bad[i].reason);
        if (!why || !strstr(why, bad[i].reason))
            TEST_FAIL("%s: refused with \"%s\", expected \"%s\"", bad[i].what, why ? why : "(no reason)",
                      bad[i].reason);
        CHECK_INT_EQ(cgm_hgemm(&bad[i].a, 0), cudaErrorInvalidValue);
    }
}

/* CGM_HGEMM_AUTO's choice on the bench shapes (host only, no GPU needed):
 * the variant that measured faster on each (docs/PERFORMANCE.md). */
static void case_auto_variant(const void *p) {
    (void)p;
    static const struct {
        int64_t m, n, k;
        int want;
    } rows[] = {{16384, 2048, 8192, CGM_HGEMM_COOPERATIVE}, {8192, 4096, 4096, CGM_HGEMM_PINGPONG},
                {16384, 8192, 2048, CGM_HGEMM_PINGPONG},    {4096, 4096, 4096, CGM_HGEMM_COOPERATIVE},
                {8192, 8192, 8192, CGM_HGEMM_COOPERATIVE},  {2048, 8192, 8192, CGM_HGEMM_COOPERATIVE},
                {8192, 2048, 4096, CGM_HGEMM_COOPERATIVE},  {4096, 16384, 4096, CGM_HGEMM_PINGPONG},
                /* the fused AG's kernel of 32768x4096x4096 (n = 2048 per rank) */
                {32768, 2048, 4096, CGM_HGEMM_COOPERATIVE},
                /* m > 4096 with n >= 4096; n >= 8192 below 2^25 stays cooperative */
                {4352, 4096, 4096, CGM_HGEMM_PINGPONG},     {4608, 4096, 4096, CGM_HGEMM_PINGPONG},
                {6144, 4096, 3072, CGM_HGEMM_PINGPONG},     {3072, 4096, 4096, CGM_HGEMM_COOPERATIVE},
                {2560, 8192, 4096, CGM_HGEMM_COOPERATIVE},  {3072, 8192, 4096, CGM_HGEMM_COOPERATIVE},
                {4352, 2048, 4096, CGM_HGEMM_COOPERATIVE}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.m = rows[i].m, a.n = rows[i].n, a.k = rows[i].k;
        int got = cgm_hgemm_variant_for(&a);
        if (got != rows[i].want)
            TEST_FAIL("%lldx%lldx%lld: auto runs %s, expected %s", (long long)a.m, (long long)a.n, (long long)a.k,
                      variant_name(got), variant_name(rows[i].want));
        a.variant = CGM_HGEMM_COOPERATIVE + CGM_HGEMM_PINGPONG - rows[i].want; /* forced: the other */
        CHECK_INT_EQ(cgm_hgemm_variant_for(&a), a.variant);
    }
}

/* What cgm_hgemm refuses (the caller falls back to cuBLASLt), with reasons. */
static void case_refusals(const void *p) {
    (void)p;
    require_sm90();
    void *buf;
    GPU_CHECK(cudaMalloc(&buf, 1 << 20));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = a.out_dtype = CGM_DTYPE_BF16;
    a.m = 64, a.n = 64, a.k = 60, a.x = buf, a.ldx = 64, a.w = buf, a.ldw = 64, a.y = buf, a.ldy = 64;
    const char *why = NULL;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 1);
    a.ldx = 60;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "multiples of 8");
    CHECK_INT_EQ(cgm_hgemm(&a, 0), cudaErrorInvalidValue);
    a.ldx = 64, a.x = (char *)buf + 8;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "16-byte aligned");
    a.x = buf, a.in_dtype = CGM_DTYPE_FP32;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "bf16 or fp16");
    a.in_dtype = CGM_DTYPE_BF16, a.k = 0;
    CHECK_INT_EQ(cgm_hgemm(&a, 0), cudaErrorInvalidValue);
    a.k = 60, a.variant = 7;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "variant");
    a.variant = CGM_HGEMM_AUTO;
    a.tile_counter = (unsigned int *)((char *)buf + 2);
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "tile_counter must be 4-byte aligned");
    CHECK_INT_EQ(cgm_hgemm(&a, 0), cudaErrorInvalidValue);
    a.tile_counter = NULL;
    a.k = 60, a.m = 0; /* nothing to do */
    CHECK_INT_EQ(cgm_hgemm(&a, 0), cudaSuccess);
    cudaFree(buf);
}

static void register_cases(void) {
    test_set_timeout(300);
    test_add("shapes_bf16", case_shapes_bf16, NULL);
    test_add("shapes_fp16", case_shapes_fp16, NULL);
    test_add("shapes_bf16_fp32", case_shapes_bf16_fp32, NULL);
    test_add("shapes_fp16_fp32", case_shapes_fp16_fp32, NULL);
    test_add("sanitize_subset", case_sanitize_subset, NULL);
    test_add("epilogue_and_ld", case_epilogue_and_ld, NULL);
    test_add("flags_ready", case_flags_ready, NULL);
    test_add("many_tiles", case_many_tiles, NULL);
    test_add("fastdiv", case_fastdiv, NULL);
    test_add("dynamic", case_dynamic, NULL);
    test_set_timeout(60);
    test_add("flags_timeout", case_flags_timeout, NULL);
    test_add("refusals", case_refusals, NULL);
    test_add("addends_and_shard_flags", case_addends, NULL);
    test_add("addends_late", case_addends_late, NULL);
    test_add("addends_tma", case_addends_tma, NULL);
    test_add("x_own", case_x_own, NULL);
    test_add("hook_arguments", case_hook_arguments, NULL);
    test_add("auto_variant", case_auto_variant, NULL);
}


/* Running every case: exit 77 (with the reason) when there is no sm_90
 * device at all, probed in a child so that this process stays CUDA-free. */
static int whole_run_skips(void) {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char msg[200] = "";
        int count = 0, major = 0;
        cudaError_t err = cudaGetDeviceCount(&count);
        if (err != cudaSuccess || count == 0)
            snprintf(msg, sizeof msg, "no CUDA device (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
        else if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess &&
                 major != 9)
            snprintf(msg, sizeof msg, "cgm_hgemm needs an sm_90 device, this is sm_%d", major * 10);
        if (write(fds[1], msg, strlen(msg) + 1) < 0) _exit(2);
        _exit(0);
    }
    close(fds[1]);
    char buf[200] = "";
    ssize_t got = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    if (got > 1 && buf[0]) {
        printf("skip: %s\n", buf);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 1 && whole_run_skips()) return TEST_SKIP_CODE;
    return test_main(argc, argv, register_cases);
}
