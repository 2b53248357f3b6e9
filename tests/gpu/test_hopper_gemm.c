/* commgemm's own sm_90a GEMM (src/device/hopper/) against cuBLASLt on odd
 * shapes (m, n, k not multiples of the 128x256x64 tile, k small), both
 * input dtypes, the three output dtypes, bias, accumulate, padded and
 * unaligned leading dimensions, the refusals, row flags that are ready
 * with a tile order, the dynamic tile schedule, and the scheduler's
 * arithmetic on the host; the other fused hooks' cases are in
 * test_hopper_gemm_hooks.c, the tail split's in test_hopper_gemm_split.c.
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
#include <unistd.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include "device/hopper_gemm.h"
#include "gpu/gpu.h"
#include "gpu_check.h"
#include "harness.h"
#include "hgemm_values.h"
#include "test_hopper_gemm.h"


/* ---------------------------------------------------------------- values */

void *fill(cgm_dtype t, size_t count, uint64_t seed) {
    void *buf = hv_fill(t, count, seed);
    if (!buf) TEST_FAIL("malloc %zu", count * hv_size(t));
    return buf;
}
void *to_device(const void *host, size_t bytes) {
    void *d = NULL;
    GPU_CHECK(cudaMalloc(&d, bytes + 64));
    GPU_CHECK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}
void *e4m3_to_device(uint64_t seed, size_t count) {
    uint8_t code[17], *h = calloc(count + 16, 1);
    if (!h) TEST_FAIL("calloc %zu", count);
    for (int v = 0; v < 17; v++)
        for (int b = 0; b < 256; b++)
            if (test_fp8_value(b, CGM_DTYPE_FP8_E4M3) == (v - 8) / 8.0 && b != 0x80) code[v] = (uint8_t)b;
    for (size_t i = 0; i < count; i++) h[i] = code[(int)lrintf(hv_value(seed, i) * 8) + 8];
    void *dev = to_device(h, count);
    free(h);
    return dev;
}

/* Skips unless an sm_90 device is there; probed in a child so that this
 * process may still fork after it (the harness runs each case in a child). */
void require_sm90(void) {
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

const char *variant_name(int v) {
    return v == CGM_HGEMM_COOPERATIVE ? "cooperative" : v == CGM_HGEMM_PINGPONG ? "pingpong" : "auto";
}

/* v rounded once (nearest even) to the output dtype; v is a multiple of
 * 1/64 below 2^20 here, so (float)v is exact. */
double round_out(double v, cgm_dtype t) {
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
int16_t *to_eighths(const void *buf, cgm_dtype t, int64_t rows, int64_t ld, int64_t k, int64_t kp) {
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

int32_t dot_eighths(const int16_t *a, const int16_t *b, int64_t kp) {
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

/* cuBLASLt's Y of the case (16-bit inputs) into href (host, m x ldy). */
static void reference_lt(const gemm_case *c, const void *dx, int64_t ldx, const void *dw, int64_t ldw, const void *db,
                         const void *hy0, int64_t ldy, void *href) {
    size_t ybytes = (size_t)(c->m * ldy) * hv_size(c->out);
    void *dy_ref = to_device(hy0, ybytes);
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
    GPU_CHECK(cudaMemcpy(href, dy_ref, ybytes, cudaMemcpyDeviceToHost));
    cudaFree(dy_ref);
}

/* The exact Y of the case into href (host, m x ldy; the padding past n is
 * hy0's): the reference of the fp8 cases. */
static void reference_exact(const gemm_case *c, const int16_t *xq, const int16_t *wq, int64_t kp, const void *hb,
                            const void *hy0, int64_t ldy, void *href) {
    memcpy(href, hy0, (size_t)(c->m * ldy) * hv_size(c->out));
    for (int64_t i = 0; i < c->m; i++)
        for (int64_t j = 0; j < c->n; j++)
            hv_put(href, c->out, (size_t)(i * ldy + j), (float)exact_at(c, xq, wq, kp, hb, hy0, ldy, i, j));
}

/* Ours runs on Y inside a buffer of 8 more elements filled with 0xA5: the
 * y_offset elements before Y and those after its last row. Returns how
 * many of those bytes the call changed. */
static int64_t guard_changed(const char *buf, size_t head, const char *after, size_t tail) {
    unsigned char g[64];
    if (head + tail > sizeof g) TEST_FAIL("guard of %zu bytes", head + tail);
    GPU_CHECK(cudaMemcpy(g, buf, head, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(g + head, after, tail, cudaMemcpyDeviceToHost));
    int64_t changed = 0;
    for (size_t i = 0; i < head + tail; i++) changed += g[i] != 0xA5;
    return changed;
}

/* Runs the reference once and ours (each variant of the case) on the case;
 * returns the number of wrong elements (prints the first few and the case).
 * 16-bit inputs: cuBLASLt's Y is the reference where ours is within the
 * tolerance of it (the exact result elsewhere and on samples). fp8 (e4m3 X
 * and W, scales 1; the host holds the same values in bf16): the exact
 * result at every element; fp8_promote: cgm_hgemm_args.fp8_promote. */
static int64_t run_case_with(const gemm_case *c, int fp8_promote) {
    const int fp8 = c->in == CGM_DTYPE_FP8_E4M3;
    const cgm_dtype hin = fp8 ? CGM_DTYPE_BF16 : c->in;
    const size_t ys = hv_size(c->out);
    int64_t ldx = (c->k + 7) / 8 * 8 + c->pad_x, ldw = (c->k + 7) / 8 * 8 + c->pad_w;
    int64_t ldy = c->n + c->pad_y;
    size_t nx = (size_t)(c->m * ldx), nw = (size_t)(c->n * ldw), ny = (size_t)(c->m * ldy);
    void *hx = fill(hin, nx, c->seed), *hw = fill(hin, nw, c->seed + 1);
    void *hb = fill(c->out, (size_t)c->n, c->seed + 2), *hy0 = fill(c->out, ny, c->seed + 3);
    if (!c->accumulate) memset(hy0, 0xFF, ny * ys); /* NaN: unwritten shows */
    int64_t kp = (c->k + 15) / 16 * 16;
    int16_t *xq = to_eighths(hx, hin, c->m, ldx, c->k, kp), *wq = to_eighths(hw, hin, c->n, ldw, c->k, kp);
    int everywhere = fp8 || c->m * c->n * kp <= EXACT_EVERYWHERE_MACS;
    void *dx = fp8 ? e4m3_to_device(c->seed, nx) : to_device(hx, nx * hv_size(c->in));
    void *dw = fp8 ? e4m3_to_device(c->seed + 1, nw) : to_device(hw, nw * hv_size(c->in));
    void *db = to_device(hb, (size_t)c->n * ys);
    const float one = 1.0f;
    void *dscale = fp8 ? to_device(&one, sizeof one) : NULL, *dy_ours_buf;
    GPU_CHECK(cudaMalloc(&dy_ours_buf, (ny + 8) * ys));
    char *dy_ours = (char *)dy_ours_buf + c->y_offset * ys;
    void *hy = malloc(ny * ys + 1), *href = malloc(ny * ys + 1);
    if (fp8)
        reference_exact(c, xq, wq, kp, hb, hy0, ldy, href);
    else
        reference_lt(c, dx, ldx, dw, ldw, db, hy0, ldy, href);

    /* Sampled rows and columns checked against the exact result. */
    int64_t srow[4] = {0, c->m / 3, c->m / 2, c->m - 1}, scol[3] = {0, c->n / 2, c->n - 1};
    int64_t wrong = 0;
    int variants[2] = {CGM_HGEMM_COOPERATIVE, CGM_HGEMM_PINGPONG}, nvar = 2;
    if (c->variant) variants[0] = c->variant, nvar = 1;
    for (int v = 0; v < nvar; v++) {
        GPU_CHECK(cudaMemset(dy_ours_buf, 0xA5, (ny + 8) * ys));
        GPU_CHECK(cudaMemcpy(dy_ours, hy0, ny * ys, cudaMemcpyHostToDevice));
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
        if (fp8) a.w_dtype = CGM_DTYPE_FP8_E4M3, a.x_scale = a.w_scale = dscale, a.fp8_promote = fp8_promote;
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
                GPU_CHECK(cudaMemcpy(dy_ours, hy0, ny * ys, cudaMemcpyHostToDevice));
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
        GPU_CHECK(cudaMemcpy(hy, dy_ours, ny * ys, cudaMemcpyDeviceToHost));
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
        int64_t guard = guard_changed(dy_ours_buf, (size_t)c->y_offset * ys, dy_ours + ny * ys,
                                      (size_t)(8 - c->y_offset) * ys);
        if (guard)
            fprintf(stderr, "  %s changed %lld bytes outside Y (before its offset or after its last row)\n",
                    variant_name(a.variant), (long long)guard);
        bad_here += guard;
        if (differ)
            fprintf(stderr, "%s %lld elements differ from %s beyond the tolerance (all checked): ours exact at %lld,"
                    " the reference exact at %lld, neither %lld; in %s out %s m %lld n %lld k %lld bias %d acc %d%s\n",
                    variant_name(a.variant), (long long)differ, fp8 ? "the exact result" : "cuBLASLt",
                    (long long)ours_exact, (long long)lt_exact,
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
    cudaFree(dx), cudaFree(dw), cudaFree(db), cudaFree(dscale), cudaFree(dy_ours_buf);
    free(hx), free(hw), free(hb), free(hy0), free(hy), free(href), free(xq), free(wq);
    return wrong;
}

static int64_t run_case(const gemm_case *c) { return run_case_with(c, 0); }

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
 * persistent loop); a grid of 3 CTAs; rows of Y of 3000 bytes (n 1500,
 * not a multiple of 16 bytes: Y is stored by the epilogue, not by TMA) at
 * k 4096 and 2048. */
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
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 1500, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 777, 1500, 2048, 0, 0, 0, 1, 0, 0, 0, 0, 11, 0, 0},
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

/* The cooperative kernel's TMA store of Y (16-bit Y, 16-byte aligned, ldy
 * a multiple of 8, no accumulate): the second consumer's rows partly
 * (m 1000) and wholly (m 1060) past m, boxes of 64 columns partly and
 * wholly past n (n 300, 520), padding columns that must stay untouched, Y
 * at a 16-byte offset, one CTA running 16 tiles (each staging buffer
 * reused 32 times) and three CTAs, the dynamic schedule; with an 8-byte
 * offset Y is staged (staged_store), with accumulate stored directly. */
static void case_tma_store(const void *p) {
    (void)p;
    enum { C = CGM_HGEMM_COOPERATIVE };
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 300, 200, 0, 0, 8, 1, 0, 0, 1, 0, 61, C, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1060, 520, 64, 0, 0, 0, 1, 0, 0, 3, 0, 62, C, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 129, 257, 300, 0, 0, 16, 0, 0, 8, 0, 0, 63, C, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 2048, 2048, 128, 0, 0, 0, 1, 0, 0, 0, 0, 64, C, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 300, 200, 0, 0, 8, 1, 0, 4, 1, 0, 65, C, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1060, 520, 64, 0, 0, 0, 1, 1, 0, 3, 0, 66, C, 0},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* The cooperative kernels' staged store of a 16-bit Y that TMA cannot
 * address (y_staged: no accumulate, no fused epilogue): boxes through shared
 * memory, then row segments to Y by each warp. Odd ldy (rows alternately
 * 4-byte aligned and not: pair stores and single elements), ldy even but
 * not a multiple of 8 with Y 2 bytes off (every row odd: single elements)
 * and 4 bytes off (every row aligned: pairs), ldy a multiple of 8 with Y
 * 8 bytes off; the second consumer's rows partly (m 1000: a warp's 16 rows
 * cut at 8) and wholly (m 1060) past m, boxes partly past n (44, 8, 9, 41,
 * 5 columns: odd counts take single elements) and wholly past it; bf16,
 * fp16 and e4m3 inputs (accumulating and promoting; bf16 Y), with and
 * without bias; one CTA running 16 tiles, grids of 2, 3 and 5 and the
 * whole GPU, the dynamic schedule. run_case checks the padding past n and
 * the bytes before Y and after its last row untouched. */
static void case_staged_store(const void *p) {
    (void)p;
    const cgm_dtype BF = CGM_DTYPE_BF16, F16 = CGM_DTYPE_FP16, E4 = CGM_DTYPE_FP8_E4M3;
    const gemm_case cases[] = {
        {BF, BF, 1000, 300, 200, 0, 0, 1, 1, 0, 0, 1, 0, 81, 0, 1},
        {F16, F16, 777, 520, 64, 0, 0, 2, 1, 0, 1, 3, 0, 82, 0, 1},
        {BF, BF, 1060, 777, 136, 0, 0, 4, 1, 0, 2, 2, 0, 83, 0, 1},
        {F16, F16, 300, 1001, 96, 8, 0, 3, 0, 0, 2, 0, 0, 84, 0, 0},
        {BF, BF, 513, 640, 128, 0, 0, 0, 1, 0, 4, 5, 0, 85, 0, 1},
        {F16, F16, 7, 5, 16, 0, 0, 0, 1, 0, 1, 0, 0, 86, 0, 0},
        {E4, BF, 1000, 333, 128, 0, 0, 0, 1, 0, 0, 1, 0, 87, 0, 1},
        {E4, BF, 700, 514, 256, 0, 0, 0, 1, 0, 1, 3, 0, 88, 0, 1},
        {BF, BF, 2049, 3333, 512, 0, 0, 0, 1, 0, 0, 0, 0, 90, 0, 1},
    };
    const gemm_case promoted = {E4, BF, 300, 600, 256, 0, 0, 5, 1, 0, 2, 2, 0, 89, 0, 0};
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
    if (run_case_with(&promoted, 1)) TEST_FAIL("the promoting fp8 GEMM is wrong (first elements above)");
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

/* CGM_HGEMM_AUTO's choice on the bench shapes (host only, no GPU needed):
 * the variant that measured faster on each (docs/PERFORMANCE.md), for the
 * memory of an H100 SXM (3.35 TB/s; the rule for an unknown device too)
 * and of an H200 (4.8 TB/s), with the edges of each rule. */
static void case_auto_variant(const void *p) {
    (void)p;
    enum { C = CGM_HGEMM_COOPERATIVE, PP = CGM_HGEMM_PINGPONG };
    static const struct {
        int64_t m, n, k;
        int h100, h200;
    } rows[] = {{16384, 2048, 8192, C, C},   {8192, 4096, 4096, C, PP},    {16384, 8192, 2048, C, PP},
                {12345, 3000, 2048, C, PP},  {32768, 8192, 512, C, PP},    {16384, 8192, 128, C, PP},
                {4096, 4096, 4096, C, C},    {8192, 8192, 8192, C, C},     {4096, 16384, 4096, C, PP},
                {32768, 2048, 4096, C, C},   {4352, 4096, 4096, C, PP},    {3072, 4096, 4096, C, C},
                {4352, 2048, 4096, C, C},    /* skinny m: cooperative's tiles fill at most half of 132 SMs */
                {128, 8192, 8192, PP, C},    {512, 4096, 14336, PP, C},    {128, 16896, 4096, PP, PP},
                {128, 17152, 4096, C, PP},   {256, 10240, 8192, C, C},     {128, 28672, 8192, C, C}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const int64_t m = rows[i].m, n = rows[i].n, k = rows[i].k;
        const struct { double bw; int want; const char *name; } devs[] = {
            {3.35e12, rows[i].h100, "H100"}, {0.0, rows[i].h100, "unknown"}, {4.8e12, rows[i].h200, "H200"}};
        for (size_t d = 0; d < 3; d++) {
            int got = cgm_hgemm_auto_variant(m, n, k, devs[d].bw);
            if (got != devs[d].want)
                TEST_FAIL("%lldx%lldx%lld on %s memory: auto runs %s, expected %s", (long long)m, (long long)n,
                          (long long)k, devs[d].name, variant_name(got), variant_name(devs[d].want));
        }
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.m = m, a.n = n, a.k = k;
        int mine = cgm_hgemm_variant_for(&a); /* this machine's rule: one of the two */
        CHECK(mine == rows[i].h100 || mine == rows[i].h200);
        a.variant = CGM_HGEMM_COOPERATIVE + CGM_HGEMM_PINGPONG - mine; /* forced: the other */
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
    /* Y is written by the epilogue's stores, not by TMA: rows of Y need
     * not be a multiple of 16 bytes (n 60 and 61: 120 and 122 bytes). */
    a.n = a.ldy = 60;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 1);
    a.n = a.ldy = 61;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 1);
    a.n = a.ldy = 64;
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
    test_add("tma_store", case_tma_store, NULL);
    test_add("staged_store", case_staged_store, NULL);
    test_add("fastdiv", case_fastdiv, NULL);
    test_add("dynamic", case_dynamic, NULL);
    test_set_timeout(60);
    test_add("refusals", case_refusals, NULL);
    test_add("auto_variant", case_auto_variant, NULL);
    hgemm_register_hook_cases();
    hgemm_register_epilogue_cases();
    hgemm_register_fp8_cases();
    hgemm_register_split_cases();
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
