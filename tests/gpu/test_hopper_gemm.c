/* commgemm's own sm_90a GEMM (src/device/hopper_gemm.cu) against cuBLASLt
 * on odd shapes (m, n, k not multiples of the 128x256x64 tile, k small),
 * both input dtypes, the three output dtypes, bias, accumulate, padded and
 * unaligned leading dimensions, the refusals, the fused all-gather hooks
 * (row flags that are ready, a flag that never comes, a tile order).
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
 * `test_hopper_gemm bench [MxNxK,...]` times both variants and auto against
 * cuBLASLt, interleaved (rotating which goes first), CUDA events, medians;
 * `fusedbench` what the fused hooks cost (`agbench` the AG's hooks one by
 * one); `addendbench` what an epilogue addend costs, ours against
 * cuBLASLt's C. */
#include <math.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <cuda_runtime_api.h>

#include "backend/gpu/gpu.h"
#include "device/hopper_gemm.h"
#include "gpu_check.h"
#include "harness.h"


/* ---------------------------------------------------------------- values */

static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); /* RNE; no NaN in */
}
static float bf16_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Exact for the values used here (multiples of 1/8 up to a few thousand). */
static uint16_t fp16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if ((u & 0x7FFFFFFF) == 0) return sign;
    int e = (int)((u >> 23) & 0xFF) - 127 + 15;
    return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)((u >> 13) & 0x3FF));
}
static float fp16_float(uint16_t h) {
    int e = (h >> 10) & 0x1F, mant = h & 0x3FF;
    float v;
    if (e == 0) v = ldexpf((float)mant, -24);
    else if (e == 31) v = mant ? NAN : INFINITY;
    else v = ldexpf((float)(mant | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static size_t dsize(cgm_dtype t) { return t == CGM_DTYPE_FP32 ? 4 : 2; }

static void put(void *buf, cgm_dtype t, size_t i, float v) {
    if (t == CGM_DTYPE_FP32) ((float *)buf)[i] = v;
    else if (t == CGM_DTYPE_BF16) ((uint16_t *)buf)[i] = bf16_bits(v);
    else ((uint16_t *)buf)[i] = fp16_bits(v);
}
static float get(const void *buf, cgm_dtype t, size_t i) {
    if (t == CGM_DTYPE_FP32) return ((const float *)buf)[i];
    if (t == CGM_DTYPE_BF16) return bf16_float(((const uint16_t *)buf)[i]);
    return fp16_float(((const uint16_t *)buf)[i]);
}
/* A multiple of 1/8 in [-1, 1] from (seed, index). */
static float value(uint64_t seed, uint64_t i) {
    uint64_t h = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return (float)((int)(h % 17) - 8) / 8.0f;
}
static void *fill(cgm_dtype t, size_t count, uint64_t seed) {
    void *buf = malloc(count * dsize(t) + 1);
    if (!buf) TEST_FAIL("malloc %zu", count * dsize(t));
    for (size_t i = 0; i < count; i++) put(buf, t, i, value(seed, i));
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
    int stream_k;  /* 1: CGM_HGEMM_SK_ON, which must cut (sk_check); 2: the same with a workspace one byte short, which must not */
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

/* The stream-K cases' workspace: one buffer for all of them (grown when a
 * case needs more), its counters zeroed once when allocated: the kernel
 * must leave them zero for the next case, whatever its shape and variant. */
static char *sk_workspace(size_t need) {
    static char *ws;
    static size_t have;
    if (need > have) {
        if (ws) GPU_CHECK(cudaFree(ws));
        GPU_CHECK(cudaMalloc((void **)&ws, need));
        GPU_CHECK(cudaMemset(ws, 0, CGM_HGEMM_WORKSPACE_COUNTERS));
        have = need;
    }
    return ws;
}

/* After a stream-K run: the counters are zero again, and the slots (0xAB
 * before the run) were written when the kernel was to cut (short 0) and
 * untouched when its workspace was one byte short (short 1). */
static void sk_check(const char *ws, size_t need, int short_ws, const char *what) {
    unsigned char *h = malloc(need);
    if (!h) TEST_FAIL("malloc %zu", need);
    GPU_CHECK(cudaMemcpy(h, ws, need, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < CGM_HGEMM_WORKSPACE_COUNTERS; i++)
        if (h[i]) TEST_FAIL("%s: stream-K counter byte %zu is %u after the launch, not 0", what, i, h[i]);
    size_t written = 0;
    for (size_t i = CGM_HGEMM_WORKSPACE_COUNTERS; i < need; i++) written += h[i] != 0xAB;
    if (short_ws && written)
        TEST_FAIL("%s: a workspace one byte short must not be used, but %zu slot bytes changed", what, written);
    if (!short_ws && !written) TEST_FAIL("%s: stream-K forced on, but no partial was stored in the workspace", what);
    free(h);
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
            double v = 8.0 * get(buf, t, (size_t)(r * ld + kk));
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
    if (c->bias) sum += get(hb, c->out, (size_t)j);
    if (c->accumulate) sum += get(hy0, c->out, (size_t)(i * ldy + j));
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
    if (!c->accumulate) memset(hy0, 0xFF, ny * dsize(c->out)); /* NaN: unwritten shows */
    int64_t kp = (c->k + 15) / 16 * 16;
    int16_t *xq = to_eighths(hx, c->in, c->m, ldx, c->k, kp), *wq = to_eighths(hw, c->in, c->n, ldw, c->k, kp);
    int everywhere = c->m * c->n * kp <= EXACT_EVERYWHERE_MACS;
    void *dx = to_device(hx, nx * dsize(c->in)), *dw = to_device(hw, nw * dsize(c->in));
    void *db = to_device(hb, (size_t)c->n * dsize(c->out));
    void *dy_ours_buf, *dy_ref = to_device(hy0, ny * dsize(c->out));
    GPU_CHECK(cudaMalloc(&dy_ours_buf, (ny + 8) * dsize(c->out)));
    char *dy_ours = (char *)dy_ours_buf + c->y_offset * dsize(c->out);

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
    void *hy = malloc(ny * dsize(c->out) + 1), *href = malloc(ny * dsize(c->out) + 1);
    GPU_CHECK(cudaMemcpy(href, dy_ref, ny * dsize(c->out), cudaMemcpyDeviceToHost));

    /* Sampled rows and columns checked against the exact result. */
    int64_t srow[4] = {0, c->m / 3, c->m / 2, c->m - 1}, scol[3] = {0, c->n / 2, c->n - 1};
    int64_t wrong = 0;
    int variants[2] = {CGM_HGEMM_COOPERATIVE, CGM_HGEMM_PINGPONG}, nvar = 2;
    if (c->variant) variants[0] = c->variant, nvar = 1;
    for (int v = 0; v < nvar; v++) {
        GPU_CHECK(cudaMemcpy(dy_ours, hy0, ny * dsize(c->out), cudaMemcpyHostToDevice));
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
        size_t sk_need = 0;
        char *sk_ws = NULL;
        if (c->stream_k) {
            a.stream_k = CGM_HGEMM_SK_ON;
            sk_need = cgm_hgemm_workspace_bytes(&a);
            if (sk_need <= CGM_HGEMM_WORKSPACE_COUNTERS)
                TEST_FAIL("stream-K case %lldx%lldx%lld (%s, sm_count %d): cgm_hgemm_workspace_bytes says it "
                          "cuts nothing (%zu bytes)", (long long)c->m, (long long)c->n, (long long)c->k,
                          variant_name(a.variant), c->sm_count, sk_need);
            sk_ws = sk_workspace(sk_need);
            GPU_CHECK(cudaMemset(sk_ws + CGM_HGEMM_WORKSPACE_COUNTERS, 0xAB, sk_need - CGM_HGEMM_WORKSPACE_COUNTERS));
            a.workspace = sk_ws;
            a.workspace_bytes = c->stream_k == 2 ? sk_need - 1 : sk_need;
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
                GPU_CHECK(cudaMemcpy(dy_ours, hy0, ny * dsize(c->out), cudaMemcpyHostToDevice));
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
        GPU_CHECK(cudaMemcpy(hy, dy_ours, ny * dsize(c->out), cudaMemcpyDeviceToHost));
        if (c->stream_k) sk_check(sk_ws, sk_need, c->stream_k == 2, variant_name(a.variant));
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
                float got = get(hy, c->out, at), want = get(href, c->out, at);
                int bad = 0;
                double exact = NAN;
                if (j >= c->n) { /* padding: untouched, bit for bit */
                    bad = memcmp((char *)hy + at * dsize(c->out), (char *)hy0 + at * dsize(c->out),
                                 dsize(c->out)) != 0;
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
                gemm_case c = {in, out, 0, 0, ks[j], 0, 0, 0, 0, 0, 0, 0, 0, (uint64_t)(i * 100 + j), 0, 0, 0};
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
 * and around the k block, both dtypes, odd ldy, flags, one stream-K cut. */
static void case_sanitize_subset(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 21, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 7, 300, 16, 0, 0, 0, 1, 1, 0, 0, 0, 22, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 129, 257, 24, 8, 0, 1, 1, 0, 1, 0, 0, 23, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 300, 65, 65, 0, 8, 3, 0, 1, 0, 0, 0, 24, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 255, 129, 129, 0, 0, 0, 1, 1, 0, 2, 0, 25, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 256, 512, 1, 0, 0, 0, 1, 1, 0, 0, 0, 26, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 300, 300, 0, 0, 0, 1, 0, 0, 0, 1, 27, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 64, 63, 7, 0, 0, 0, 0, 0, 0, 0, 0, 28, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 300, 200, 0, 0, 0, 1, 1, 0, 5, 0, 29, 0, 1, 0}, /* stream-K */
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

static void check_cases(const gemm_case *cases, int count) {
    require_sm90();
    int64_t wrong = 0;
    for (int i = 0; i < count; i++) wrong += run_case(&cases[i]) != 0;
    if (wrong) TEST_FAIL("%lld of %d GEMMs wrong (first ones above)", (long long)wrong, count);
}

/* The stream-K tail, forced on (CGM_HGEMM_SK_ON): grids of 5, 6, 7 and 13
 * CTAs leave the last wave partial (ping-pong 24 tiles, cooperative 16;
 * 13 CTAs cut every tile), and the whole grid on 2048x3072x4096 and
 * 1536^3. k of 2, 3, 16 and 24 k blocks, so that shared tiles split at
 * every kind of point (a single k block on either side included); bias,
 * accumulate, every output dtype, odd ldy and an unaligned Y; and a
 * workspace one byte short (no cut, slots untouched). Every result exact;
 * the counters zero after each launch (one workspace for all cases);
 * partials stored when cut. Then when cgm_hgemm_workspace_bytes says a call
 * cuts, under each stream_k setting. */
static void case_stream_k(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 300, 1000, 0, 0, 0, 1, 0, 0, 5, 0, 41, 0, 1, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 1000, 300, 65, 0, 0, 0, 0, 1, 0, 7, 0, 42, 0, 1, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 300, 129, 8, 0, 3, 1, 1, 0, 13, 0, 43, 0, 1, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1000, 300, 1536, 0, 0, 0, 0, 0, 1, 13, 0, 44, 0, 1, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 2049, 513, 1000, 0, 0, 0, 1, 0, 0, 6, 0, 45, 0, 1, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1536, 1536, 1536, 0, 0, 0, 0, 0, 0, 0, 0, 46, CGM_HGEMM_PINGPONG, 1, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 2048, 3072, 4096, 0, 0, 0, 1, 0, 0, 0, 0, 47, 0, 1, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1000, 300, 1000, 0, 0, 0, 1, 1, 0, 7, 0, 48, 0, 2, 0},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));

    void *buf;
    GPU_CHECK(cudaMalloc(&buf, 1 << 20));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = a.out_dtype = CGM_DTYPE_BF16;
    a.m = 1000, a.n = 300, a.k = 1000, a.x = buf, a.ldx = 1000, a.w = buf, a.ldw = 1000, a.y = buf, a.ldy = 300;
    a.sm_count = 5, a.variant = CGM_HGEMM_PINGPONG; /* 24 tiles: last wave 4 of 5, 16 k blocks */
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0); /* AUTO never cuts ping-pong */
    a.stream_k = CGM_HGEMM_SK_ON;
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), (long long)(CGM_HGEMM_WORKSPACE_COUNTERS + (4 + 5) * 65536));
    a.stream_k = CGM_HGEMM_SK_AUTO, a.variant = CGM_HGEMM_COOPERATIVE; /* 16 tiles: last wave 1 of 5 (20 %) */
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), (long long)(CGM_HGEMM_WORKSPACE_COUNTERS + 2 * (1 + 5) * 65536));
    a.sm_count = 6; /* last wave 4 of 6: more than AUTO's 40 % */
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0);
    a.stream_k = CGM_HGEMM_SK_ON;
    CHECK(cgm_hgemm_workspace_bytes(&a) > 0);
    a.stream_k = CGM_HGEMM_SK_AUTO, a.sm_count = 8; /* 16 tiles on 8 CTAs: the last wave is full */
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0);
    a.sm_count = 5, a.stream_k = CGM_HGEMM_SK_OFF;
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0);
    a.stream_k = CGM_HGEMM_SK_AUTO, a.k = 65; /* 2 k blocks: AUTO does not cut, ON does */
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0);
    a.stream_k = CGM_HGEMM_SK_ON;
    CHECK(cgm_hgemm_workspace_bytes(&a) > 0);
    a.k = 1000;
    a.naddends = 1, a.addend[0] = buf, a.addend_ld = 300, a.addend_dtype = CGM_DTYPE_FP32;
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0); /* addends: never cut */
    a.naddends = 0, a.row_flags = (const unsigned long long *)buf, a.rows_per_flag = 128;
    a.timeout_out = (int *)buf;
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0); /* row flags (the fused AG): never cut */
    a.row_flags = NULL, a.timeout_out = NULL;
    a.naddends = 0, a.sm_count = 0, a.m = 2048, a.n = 3072, a.k = 4096, a.ldx = a.ldw = 4096, a.ldy = 3072;
    a.variant = CGM_HGEMM_COOPERATIVE;
    CHECK(cgm_hgemm_workspace_bytes(&a) > 0);
    int sms = 0;
    GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cgm_hgemm_workspace_max(sms) >= cgm_hgemm_workspace_bytes(&a));
    cudaFree(buf);
}

/* The stream-K schedule on the host (no GPU needed): the kernel's own
 * unit_at walked for every CTA of many grids, tile counts and k
 * (cgm_hgemm_sk_schedule_check says what it checks), both variants, from
 * a single cut tile's worth of last wave to grids of 4095 CTAs and 2^20 k
 * blocks; and the calls it must not cut (a full last wave, fewer tiles than
 * CTAs, one k block). */
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

static void case_sk_schedule(const void *p) {
    (void)p;
    static const int grids[] = {1, 2, 3, 5, 7, 13, 64, 131, 132, 133, 264, 1000, 4095};
    static const int64_t ks[] = {128, 192, 448, 4096, 8192, 64 * 1001, (int64_t)64 << 20};
    char why[256];
    long long cut = 0, checked = 0;
    for (size_t gi = 0; gi < sizeof grids / sizeof grids[0]; gi++)
        for (int v = 0; v < 2; v++) {
            int variant = v ? CGM_HGEMM_PINGPONG : CGM_HGEMM_COOPERATIVE;
            int tile_n = v ? CGM_HGEMM_TILE_N_PINGPONG : CGM_HGEMM_TILE_N;
            int g = grids[gi];
            /* tile counts around 1, 2 and 3 waves; n tiles 1, 3 or 7 */
            const int64_t extra[] = {-1, 0, 1, g / 3, g - 1, g + 1, 2 * g - 1, 2 * g + 1, 3 * g + g / 2};
            for (size_t e = 0; e < sizeof extra / sizeof extra[0]; e++)
                for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                    int64_t tiles = g + extra[e], tn = (int64_t)1 + 2 * (int64_t)((e + ki) % 4);
                    if (tiles < 1) continue;
                    int64_t tm = (tiles + tn - 1) / tn; /* tm x tn >= tiles: the count the kernel sees */
                    int64_t m = tm * CGM_HGEMM_TILE_M - (int64_t)(ki % 3) * 7, n = tn * tile_n - 5;
                    int64_t k = ks[ki] - (int64_t)(e % 2) * 3;
                    long long r = cgm_hgemm_sk_schedule_check(m, n, k, variant, g, why, sizeof why);
                    if (r < 0) TEST_FAIL("stream-K schedule: %s", why);
                    int64_t all = tm * tn, full = all / (g < all ? g : all), rest = all % (g < all ? g : all);
                    long long want = full >= 1 && rest > 0 ? rest + (g < all ? g : all) : 0;
                    if (want * (v ? 1 : 2) * 4 > CGM_HGEMM_WORKSPACE_COUNTERS ||
                        want * ((k + 63) / 64) >= 2147483647ll)
                        want = 0;
                    if (r != want)
                        TEST_FAIL("%lldx%lldx%lld %s grid %d: %lld tiles cut, expected %lld", (long long)m,
                                  (long long)n, (long long)k, variant_name(variant), g, r, want);
                    cut += r > 0;
                    checked++;
                }
        }
    /* one k block: nothing to cut */
    CHECK_INT_EQ(cgm_hgemm_sk_schedule_check(1000, 300, 64, CGM_HGEMM_PINGPONG, 5, why, sizeof why), 0);
    if (cut < checked / 2) TEST_FAIL("only %lld of %lld schedules cut anything", cut, checked);
    printf("stream-K schedules checked: %lld, %lld of them cut\n", checked, cut);
}

/* Bias and accumulate on every output dtype; padded and odd ldy; an
 * unaligned Y (scalar stores); more tiles than CTAs (ring phases wrap,
 * persistent loop); a grid of 3 CTAs. */
static void case_epilogue_and_ld(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 1000, 129, 8, 24, 3, 1, 1, 0, 0, 0, 1, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1000, 300, 65, 16, 0, 1, 1, 0, 1, 0, 0, 2, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 129, 255, 1000, 0, 8, 5, 1, 1, 1, 0, 0, 3, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 65, 63, 24, 8, 8, 0, 1, 1, 1, 0, 0, 4, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 2048, 3072, 4096, 0, 0, 0, 1, 0, 0, 0, 0, 5, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1536, 1536, 1536, 0, 0, 0, 0, 1, 0, 3, 0, 6, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 1000, 777, 333, 8, 8, 1, 1, 1, 1, 7, 0, 7, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 1024, 1024, 512, 0, 0, 0, 1, 1, 0, 0, 0, 8, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 512, 768, 520, 0, 0, 0, 1, 1, 0, 0, 0, 9, 0, 0, 0},
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
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 300, 300, 8, 0, 0, 0, 1, 0, 0, 1, 0, 31, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 129, 257, 384, 0, 0, 0, 0, 1, 0, 2, 0, 32, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1000, 1000, 448, 0, 0, 0, 1, 1, 0, 3, 0, 33, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 64, 128, 4096, 0, 0, 0, 1, 0, 0, 0, 0, 34, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 513, 385, 200, 0, 0, 0, 0, 1, 0, 4, 0, 35, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 256, 512, 320, 0, 0, 8, 1, 0, 0, 1, 0, 36, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 1024, 1024, 256, 0, 0, 0, 1, 0, 0, 5, 0, 37, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1536, 1536, 1536, 0, 0, 0, 0, 0, 0, 0, 1, 38, 0, 0, 0},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* The dynamic tile schedule (tile_counter), each case launched twice with
 * the same counter: grids of 1, 3 and 7 CTAs (many claims each, an odd
 * count per consumer), a single tile, the whole GPU on 2048x3072x1000 and
 * 4096x4096x256 (more claims than CTAs); row flags with the reversed tile
 * order, bias, accumulate, every output dtype, odd ldy and an unaligned Y.
 * Exact results, and the counter zero after every launch. */
static void case_dynamic(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 1000, 300, 0, 0, 0, 1, 0, 0, 1, 0, 51, 0, 0, 1},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 1000, 513, 65, 0, 0, 0, 0, 1, 0, 3, 0, 52, 0, 0, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 300, 129, 8, 0, 3, 1, 1, 3, 7, 1, 53, 0, 0, 1},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP16, 100, 100, 64, 0, 0, 0, 1, 0, 0, 0, 0, 54, 0, 0, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_FP32, 2048, 3072, 1000, 0, 0, 0, 1, 0, 0, 0, 1, 55, 0, 0, 1},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 4096, 4096, 256, 0, 0, 0, 0, 1, 0, 0, 0, 56, 0, 0, 1},
    };
    check_cases(cases, (int)(sizeof cases / sizeof cases[0]));
}

/* Flags already at the epoch (rows_per_flag 100, not the tile), tiles in
 * reverse m order: same result, no timeout. */
static void case_flags_ready(const void *p) {
    (void)p;
    const gemm_case cases[] = {
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 1000, 1536, 300, 0, 0, 0, 1, 0, 0, 0, 1, 11, 0, 0, 0},
        {CGM_DTYPE_FP16, CGM_DTYPE_FP32, 2049, 513, 1000, 0, 0, 0, 0, 1, 0, 5, 1, 12, 0, 0, 0},
        {CGM_DTYPE_BF16, CGM_DTYPE_BF16, 7, 300, 64, 0, 0, 0, 1, 1, 0, 0, 1, 13, 0, 0, 0},
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
                        dadds[i] = to_device(hadds[i], (size_t)(m * ald) * dsize(adt));
                    }
                    void *db = to_device(hb, (size_t)n * dsize(out)), *dy;
                    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * ldy) * dsize(out)));
                    GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * ldy) * dsize(out)));
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
                    void *hy = malloc((size_t)(m * ldy) * dsize(out));
                    GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * ldy) * dsize(out), cudaMemcpyDeviceToHost));
                    int64_t bad = 0;
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++) {
                            double sum = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0 + get(hb, out, (size_t)j);
                            for (int t = 0; t < na; t++) sum += get(hadds[t], adt, (size_t)(i * ald + j));
                            double want = round_out(sum, out), got = get(hy, out, (size_t)(i * ldy + j));
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
 * each consumer meets several own tiles in turn. Two forms: the whole Y
 * with the addend (every tile waits in its consumer), and the split output
 * of the one-kernel GEMM+RS (y_own rows [256, 768) with the addend, the
 * rest plain partials), whose ping-pong kernel's consumers take each own
 * tile's flags from the helper thread (fp32 addend: the ready/taken
 * barriers cycle through their phases; bf16 addend: the helper loads the
 * addend into the shared-memory slots by TMA after each flag). An addend
 * read before its flag is poison
 * (3.4e38) and shows; every element must equal the exact result rounded
 * once, and no wait may time out. Last, a flag that never comes in the
 * split ping-pong kernel: bounded, timeout_out set. */
static void case_addends_late(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 1024, n = 512, k = 64, rpf = 128, own0 = 256;
    int64_t kp = k;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 91), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 92);
    void *ha = fill(CGM_DTYPE_FP32, (size_t)(m * n), 93);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    void *dsrc = to_device(ha, (size_t)(m * n) * 4), *da, *dy, *dout;
    /* the same values as bf16 (multiples of 1/8 in [-1, 1]: exact) */
    uint16_t *ha16 = malloc((size_t)(m * n) * 2);
    for (int64_t i = 0; i < m * n; i++) ha16[i] = bf16_bits(get(ha, CGM_DTYPE_FP32, (size_t)i));
    void *dsrc16 = to_device(ha16, (size_t)(m * n) * 2);
    unsigned long long epoch = 5, ready[8] = {5, 5, 5, 5, 5, 5, 5, 5}, *dflags, *dready = to_device(ready, sizeof ready);
    unsigned long long *ddone;
    unsigned int *dcount;
    int *dt;
    GPU_CHECK(cudaMalloc(&da, (size_t)(m * n) * 4));
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc(&dout, (size_t)(m * n) * 2));
    GPU_CHECK(cudaMalloc((void **)&dflags, sizeof ready));
    GPU_CHECK(cudaMalloc((void **)&ddone, 8 * sizeof *ddone));
    GPU_CHECK(cudaMalloc((void **)&dcount, 8 * sizeof *dcount));
    GPU_CHECK(cudaMemset(dcount, 0, 8 * sizeof *dcount));
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    cudaStream_t s1, s2;
    GPU_CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    GPU_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    uint16_t *hy = malloc((size_t)(m * n) * 2), *ho = malloc((size_t)(m * n) * 2);
    for (int split = 0; split < 2; split++)
        for (int a16 = 0; a16 <= split; a16++)
        for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
            /* The addend rows: all of Y, or the y_own rows (addend row 0 = Y row own0). */
            int64_t arows = split ? 512 : m, arow0 = split ? own0 : 0, pieces = arows / rpf;
            const char *form = !split ? "whole Y" : a16 ? "split output, bf16 addend" : "split output";
            size_t aes = a16 ? 2 : 4;
            const void *src = a16 ? dsrc16 : dsrc;
            GPU_CHECK(cudaMemset(da, 0x7F, (size_t)(m * n) * 4));
            GPU_CHECK(cudaMemset(dflags, 0, sizeof ready));
            GPU_CHECK(cudaMemset(ddone, 0, 8 * sizeof *ddone));
            GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
            GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * n) * 2));
            GPU_CHECK(cudaMemset(dout, 0xFF, (size_t)(m * n) * 2));
            GPU_CHECK(cudaDeviceSynchronize());
            cgm_hgemm_args a;
            memset(&a, 0, sizeof a);
            a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_BF16, a.variant = v, a.sm_count = 2;
            a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
            a.rows_per_flag = rpf, a.flag_epoch = epoch, a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
            a.naddends = 1, a.addend_dtype = a16 ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = da;
            a.addend_flags[0] = dflags;
            if (split) {
                a.y_own = dout, a.ldy_own = n, a.y_own_row0 = own0, a.y_own_rows = arows;
                a.done_count = dcount, a.done_flags = ddone, a.done_shard_rows = 256;
                a.done_rows_per_piece = 256, a.done_pieces_per_shard = 1;
            }
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
            GPU_CHECK(cudaMemcpy(ho, dout, (size_t)(m * n) * 2, cudaMemcpyDeviceToHost));
            int64_t bad = 0;
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) {
                    double sum = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0;
                    bool with = i >= arow0 && i < arow0 + arows;
                    if (with) sum += get(ha, CGM_DTYPE_FP32, (size_t)((i - arow0) * n + j));
                    /* split: the own rows at y_own (its row 0 = Y row own0), the rest at y */
                    double want = round_out(sum, CGM_DTYPE_BF16);
                    double got = bf16_float(split && with ? ho[(i - own0) * n + j] : hy[i * n + j]);
                    if (got != want && bad++ < 4)
                        fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i, (long long)j, got, want);
                }
            if (bad)
                TEST_FAIL("%lld of %lld wrong with late addends (%s, %s)", (long long)bad, (long long)(m * n), form,
                          variant_name(v));
        }
    /* A flag that never comes in the split ping-pong kernel: the helper's
     * wait expires, it still hands every own tile on (fp32 addend: the
     * ready barriers; bf16: the TMA loads into the slots), and the kernel
     * ends within a bounded time with timeout_out set (no consumer left
     * waiting). Pieces 0, 1 and 3 of the y_own rows are raised, 2 never. */
    for (int a16 = 0; a16 < 2; a16++) {
        unsigned long long some[4] = {5, 5, 0, 5};
        GPU_CHECK(cudaMemcpy(dflags, some, sizeof some, cudaMemcpyHostToDevice));
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        GPU_CHECK(cudaMemset(ddone, 0, 8 * sizeof *ddone));
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = CGM_DTYPE_BF16, a.variant = CGM_HGEMM_PINGPONG, a.sm_count = 2;
        a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
        a.rows_per_flag = rpf, a.flag_epoch = epoch, a.wait_timeout_ns = 200000000ll, a.timeout_out = dt;
        a.naddends = 1, a.addend_dtype = a16 ? CGM_DTYPE_BF16 : CGM_DTYPE_FP32, a.addend_ld = n, a.addend[0] = da;
        a.addend_flags[0] = dflags;
        a.y_own = dout, a.ldy_own = n, a.y_own_row0 = own0, a.y_own_rows = 512;
        a.done_count = dcount, a.done_flags = ddone, a.done_shard_rows = 256;
        a.done_rows_per_piece = 256, a.done_pieces_per_shard = 1;
        double t0 = now_s();
        GPU_CHECK(cgm_hgemm(&a, s1));
        GPU_CHECK(cudaStreamSynchronize(s1));
        double waited = now_s() - t0;
        int timed_out = 0;
        GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
        printf("late addends (split output, pingpong, %s addend): a flag that never comes: timeout_out %d after "
               "%.3f s (timeout 0.2 s)\n", a16 ? "bf16" : "fp32", timed_out, waited);
        CHECK_INT_EQ(timed_out, 1);
        if (waited > 5.0) TEST_FAIL("the kernel took %.2f s with a 0.2 s flag timeout", waited);
    }
    free(hy), free(ho);
    cudaStreamDestroy(s1), cudaStreamDestroy(s2);
    cudaFree(dx), cudaFree(dw), cudaFree(dsrc), cudaFree(dsrc16), cudaFree(da), cudaFree(dy), cudaFree(dout);
    cudaFree(dflags), cudaFree(dready), cudaFree(ddone), cudaFree(dcount), cudaFree(dt);
    free(hx), free(hw), free(ha), free(ha16), free(xq), free(wq);
}

/* The ping-pong kernels' addends through shared memory: addends whose rows
 * TMA can read (16-byte aligned, rows a multiple of 16 bytes apart) are
 * loaded by the helper thread into two 16 KiB slots, one (own tile,
 * addend) ahead of the epilogue (docs/HOPPER_GEMM.md, "Addends by TMA").
 * Two forms: the split output, y_own rows [512, 1000) of a 1000-row Y (the
 * last own tile 104 rows: TMA zero-fills past the end), and the whole Y
 * (the plain ping-pong kernel's addend form); n = 328 (the last column
 * tile 72 wide). 1, 2, 3 and 7 addends (the slots' phases then run on by
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
    const int64_t m = 1000, n = 328, k = 192, own0 = 512, ldy = 336, ldo = 344;
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
    void *hy = malloc((size_t)(m * ldy) * 2), *ho = malloc((size_t)(m * ldo) * 2), *dy, *dout;
    GPU_CHECK(cudaMalloc(&dy, (size_t)(m * ldy) * 2));
    GPU_CHECK(cudaMalloc(&dout, (size_t)(m * ldo) * 2));
    int runs = 0;
    for (int split = 0; split < 2; split++)
        for (int o = 0; o < 2; o++)
            for (int f32 = 0; f32 < 2; f32++) {
                cgm_dtype out = o ? CGM_DTYPE_FP16 : CGM_DTYPE_BF16;
                cgm_dtype adt = f32 ? CGM_DTYPE_FP32 : o ? CGM_DTYPE_BF16 : CGM_DTYPE_FP16;
                int64_t arow0 = split ? own0 : 0, arows = m - arow0;
                void *hb = fill(out, (size_t)n, 103 + (uint64_t)o), *db = to_device(hb, (size_t)n * 2);
                for (int ni = 0; ni < 4; ni++)
                    for (int64_t ald = n; ald <= n + 2; ald += 2) {
                        int na = nas[ni];
                        void *hadds[CGM_HGEMM_MAX_ADDENDS], *dadds[CGM_HGEMM_MAX_ADDENDS];
                        for (int i = 0; i < na; i++) {
                            hadds[i] = fill(adt, (size_t)(arows * ald), 110 + (uint64_t)(20 * f32 + 10 * o + i));
                            dadds[i] = to_device(hadds[i], (size_t)(arows * ald) * dsize(adt));
                        }
                        for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++)
                            for (int sms = 0; sms <= 2; sms += 2) {
                                GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * ldy) * 2));
                                GPU_CHECK(cudaMemset(dout, 0xFF, (size_t)(m * ldo) * 2));
                                GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
                                cgm_hgemm_args a;
                                memset(&a, 0, sizeof a);
                                a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = out, a.variant = v, a.sm_count = sms;
                                a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy;
                                a.ldy = ldy, a.bias = db;
                                if (split) a.y_own = dout, a.ldy_own = ldo, a.y_own_row0 = own0, a.y_own_rows = arows;
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
                                GPU_CHECK(cudaMemcpy(ho, dout, (size_t)(m * ldo) * 2, cudaMemcpyDeviceToHost));
                                int64_t bad = 0;
                                for (int64_t i = 0; i < m; i++)
                                    for (int64_t j = 0; j < n; j++) {
                                        double sum = dot[i * n + j], got;
                                        if (i >= arow0) {
                                            sum += get(hb, out, (size_t)j);
                                            for (int t = 0; t < na; t++)
                                                sum += get(hadds[t], adt, (size_t)((i - arow0) * ald + j));
                                        }
                                        if (split && i >= arow0)
                                            got = get(ho, out, (size_t)((i - arow0) * ldo + j));
                                        else
                                            got = get(hy, out, (size_t)(i * ldy + j));
                                        double want = round_out(sum, out);
                                        if (got != want && bad++ < 4)
                                            fprintf(stderr, "  (%lld, %lld) = %.7g, exact %.7g\n", (long long)i,
                                                    (long long)j, got, want);
                                    }
                                if (bad)
                                    TEST_FAIL("%lld of %lld wrong: %s, %s, out %s, %d addend(s) of %s, addend_ld "
                                              "%lld, sm_count %d",
                                              (long long)bad, (long long)(m * n), split ? "split output" : "whole Y",
                                              variant_name(v), cgm_dtype_name(out), na, cgm_dtype_name(adt),
                                              (long long)ald, sms);
                                runs++;
                            }
                        for (int i = 0; i < na; i++) cudaFree(dadds[i]), free(hadds[i]);
                    }
                cudaFree(db), free(hb);
            }
    printf("addends by TMA: %d launches exact (2 forms x 2 outputs x 16-bit and fp32 addends x 4 addend counts x 2 "
           "addend_ld x 2 variants x 2 grids)\n", runs);
    free(hy), free(ho), free(dot);
    cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dout), cudaFree(dready), cudaFree(dt);
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
        for (int64_t j = 0; j < k; j++) put(hpoison, CGM_DTYPE_BF16, (size_t)(i * k + j), 4.0f);
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

/* The one-kernel fused GEMM+RS hooks: rows [256, 512) of a 900-row Y
 * (shards of 256) get the epilogue (bias, an addend whose row 0 is Y row
 * 256 and whose flags count from there, and, in the second launch,
 * accumulate) and go to y_own; every other row is a plain partial in y
 * (no bias, no accumulate), and each 128-row piece of the other shards
 * raises its done flag to the epoch once stored. Two launches (epochs 1
 * and 2): every value exact, the flags of the other shards' pieces at the
 * epoch, the own shard's and the unused cells untouched, the counters
 * back at zero. */
static void case_split_output(const void *p) {
    (void)p;
    require_sm90();
    const int64_t m = 900, n = 200, k = 136, shard = 256, own0 = 256, own = 256, ldo = 208, ald = 202;
    const int per_shard = 3, cells = 4 * per_shard;
    int64_t kp = (k + 15) / 16 * 16;
    void *hx = fill(CGM_DTYPE_BF16, (size_t)(m * k), 81), *hw = fill(CGM_DTYPE_BF16, (size_t)(n * k), 82);
    int16_t *xq = to_eighths(hx, CGM_DTYPE_BF16, m, k, k, kp), *wq = to_eighths(hw, CGM_DTYPE_BF16, n, k, k, kp);
    void *dx = to_device(hx, (size_t)(m * k) * 2), *dw = to_device(hw, (size_t)(n * k) * 2);
    unsigned long long hadd[2] = {7, 7}, *dadd = to_device(hadd, sizeof hadd), *depoch, *dflags;
    unsigned int *dcount;
    int *dt;
    GPU_CHECK(cudaMalloc((void **)&depoch, sizeof *depoch));
    GPU_CHECK(cudaMalloc((void **)&dflags, cells * sizeof *dflags));
    GPU_CHECK(cudaMalloc((void **)&dcount, cells * sizeof *dcount));
    GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
    const cgm_dtype outs[] = {CGM_DTYPE_BF16, CGM_DTYPE_FP32};
    for (int o = 0; o < 2; o++)
        for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
            cgm_dtype out = outs[o];
            size_t es = dsize(out);
            void *hb = fill(out, (size_t)n, 90 + (uint64_t)o), *ha = fill(out, (size_t)(own * ald), 92 + (uint64_t)o);
            void *db = to_device(hb, (size_t)n * es), *da = to_device(ha, (size_t)(own * ald) * es);
            void *hy = malloc((size_t)(m * n) * es), *ho = malloc((size_t)(own * ldo) * es);
            void *prev = fill(out, (size_t)(own * ldo), 94 + (uint64_t)o);
            void *dy, *dout = to_device(prev, (size_t)(own * ldo) * es);
            GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * es));
            GPU_CHECK(cudaMemset(dflags, 0, cells * sizeof *dflags));
            GPU_CHECK(cudaMemset(dcount, 0, cells * sizeof *dcount));
            for (unsigned long long epoch = 1; epoch <= 2; epoch++) {
                int acc = epoch == 2;
                if (acc) GPU_CHECK(cudaMemcpy(prev, dout, (size_t)(own * ldo) * es, cudaMemcpyDeviceToHost));
                GPU_CHECK(cudaMemcpy(depoch, &epoch, sizeof epoch, cudaMemcpyHostToDevice));
                GPU_CHECK(cudaMemset(dy, 0xFF, (size_t)(m * n) * es)); /* NaN: no accumulate here */
                GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
                cgm_hgemm_args a;
                memset(&a, 0, sizeof a);
                a.in_dtype = CGM_DTYPE_BF16, a.out_dtype = out, a.variant = v;
                a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
                a.bias = db, a.accumulate = acc;
                a.y_own = dout, a.ldy_own = ldo, a.y_own_row0 = own0, a.y_own_rows = own;
                a.naddends = 1, a.addend[0] = da, a.addend_dtype = out, a.addend_ld = ald;
                a.addend_flags[0] = dadd, a.rows_per_flag = 128;
                hadd[0] = hadd[1] = 7 + epoch;
                GPU_CHECK(cudaMemcpy(dadd, hadd, sizeof hadd, cudaMemcpyHostToDevice));
                a.flag_epoch_ptr = depoch, a.wait_timeout_ns = 2000000000ll, a.timeout_out = dt;
                a.done_count = dcount, a.done_flags = dflags, a.done_shard_rows = shard;
                a.done_rows_per_piece = 128, a.done_pieces_per_shard = per_shard;
                if (run_hooked(&a))
                    TEST_FAIL("%s: the addend flags were at the epoch, yet a wait expired", variant_name(v));
                GPU_CHECK(cudaMemcpy(hy, dy, (size_t)(m * n) * es, cudaMemcpyDeviceToHost));
                GPU_CHECK(cudaMemcpy(ho, dout, (size_t)(own * ldo) * es, cudaMemcpyDeviceToHost));
                int64_t bad = 0;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        double dot = dot_eighths(xq + i * kp, wq + j * kp, kp) / 64.0, want, got;
                        if (i >= own0 && i < own0 + own) {
                            size_t at = (size_t)((i - own0) * ldo + j);
                            double sum = dot + get(hb, out, (size_t)j) + get(ha, out, (size_t)((i - own0) * ald + j));
                            if (acc) sum += get(prev, out, at);
                            want = round_out(sum, out), got = get(ho, out, at);
                        } else {
                            want = round_out(dot, out), got = get(hy, out, (size_t)(i * n + j));
                        }
                        if (got != want && bad++ < 4)
                            fprintf(stderr, "  %s %s epoch %llu (%lld, %lld) = %.7g, want %.7g\n", variant_name(v),
                                    cgm_dtype_name(out), epoch, (long long)i, (long long)j, got, want);
                    }
                if (bad)
                    TEST_FAIL("%s, out %s, epoch %llu: %lld of %lld wrong", variant_name(v), cgm_dtype_name(out),
                              epoch, (long long)bad, (long long)(m * n));
                unsigned long long hf[12];
                unsigned int hc[12];
                GPU_CHECK(cudaMemcpy(hf, dflags, sizeof hf, cudaMemcpyDeviceToHost));
                GPU_CHECK(cudaMemcpy(hc, dcount, sizeof hc, cudaMemcpyDeviceToHost));
                for (int c = 0; c < cells; c++) {
                    int j = c / per_shard, q = c % per_shard;
                    unsigned long long expect = (j != 1 && q < 2) ? epoch : 0; /* shard 1 is y_own's */
                    if (hf[c] != expect)
                        TEST_FAIL("%s: done flag of shard %d piece %d is %llu after epoch %llu, expected %llu",
                                  variant_name(v), j, q, hf[c], epoch, expect);
                    if (hc[c] != 0)
                        TEST_FAIL("%s: done counter %d left at %u, expected 0", variant_name(v), c, hc[c]);
                }
            }
            cudaFree(db), cudaFree(da), cudaFree(dy), cudaFree(dout);
            free(hb), free(ha), free(hy), free(ho), free(prev);
        }
    cudaFree(dx), cudaFree(dw), cudaFree(dadd), cudaFree(depoch), cudaFree(dflags), cudaFree(dcount), cudaFree(dt);
    free(hx), free(hw), free(xq), free(wq);
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
    } bad[14];
    int n = 0;
    for (int i = 0; i < 14; i++) bad[i].a = good;
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
    bad[n].a.m = 300, bad[n].a.y_own = buf, bad[n].a.ldy_own = 64, bad[n].a.y_own_row0 = 100;
    bad[n].a.y_own_rows = 100, bad[n].what = "y_own rows from 100";
    bad[n++].reason = "whole 128-row tiles";
    bad[n].a.m = 300, bad[n].a.y_own = buf, bad[n].a.ldy_own = 32, bad[n].a.y_own_rows = 128;
    bad[n].what = "ldy_own 32 < n", bad[n++].reason = "n <= ldy_own";
    bad[n].a.done_flags = (unsigned long long *)buf, bad[n].a.done_shard_rows = 128;
    bad[n].what = "done flags without a counter", bad[n++].reason = "done_flags need done_count";
    bad[n].a.done_flags = (unsigned long long *)buf, bad[n].a.done_count = (unsigned int *)buf;
    bad[n].a.done_shard_rows = 256, bad[n].a.done_rows_per_piece = 64, bad[n].a.done_pieces_per_shard = 4;
    bad[n].what = "pieces of 64 rows", bad[n++].reason = "multiples of 128";
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
 * the faster variant of the runs in docs/HOPPER_GEMM.md. */
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
                /* m > 4096 with n >= 4096 (PERFORMANCE.md 4s); n >= 8192 below 2^25 stays cooperative */
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
    a.stream_k = 3;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "stream_k");
    CHECK_INT_EQ(cgm_hgemm(&a, 0), cudaErrorInvalidValue);
    a.stream_k = CGM_HGEMM_SK_AUTO, a.workspace = (char *)buf + 8;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "workspace must be 16-byte aligned");
    a.workspace = NULL;
    a.tile_counter = (unsigned int *)((char *)buf + 2);
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "tile_counter must be 4-byte aligned");
    CHECK_INT_EQ(cgm_hgemm(&a, 0), cudaErrorInvalidValue);
    a.tile_counter = NULL;
    CHECK_INT_EQ((long long)cgm_hgemm_workspace_bytes(&a), 0); /* one tile: nothing to cut */
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
    test_add("stream_k", case_stream_k, NULL);
    test_add("sk_schedule", case_sk_schedule, NULL);
    test_add("fastdiv", case_fastdiv, NULL);
    test_add("dynamic", case_dynamic, NULL);
    test_set_timeout(60);
    test_add("flags_timeout", case_flags_timeout, NULL);
    test_add("refusals", case_refusals, NULL);
    test_add("addends_and_shard_flags", case_addends, NULL);
    test_add("addends_late", case_addends_late, NULL);
    test_add("addends_tma", case_addends_tma, NULL);
    test_add("x_own", case_x_own, NULL);
    test_add("split_output", case_split_output, NULL);
    test_add("hook_arguments", case_hook_arguments, NULL);
    test_add("auto_variant", case_auto_variant, NULL);
}


/* ---------------------------------------------------------------- bench */

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *v, int count) {
    qsort(v, (size_t)count, sizeof *v, cmp_float);
    return count % 2 ? v[count / 2] : 0.5f * (v[count / 2 - 1] + v[count / 2]);
}

#define BENCH_ROUNDS 30
#define BENCH_CALLS 4 /* back to back per timed block: host launch cost hidden */

/* The benches' timing: 5 warm-up rounds, then BENCH_ROUNDS rounds of the
 * `who` contenders, the order rotating each round, each a block of
 * BENCH_CALLS calls of run(i, ctx) on stream 0 timed with events; t[i]:
 * the median microseconds per call of contender i. */
#define BENCH_MAX_WHO 8
typedef void (*bench_run_fn)(int who, void *ctx);
static void time_interleaved(int who_count, bench_run_fn run, void *ctx, float *t) {
    cudaEvent_t ev[2 * BENCH_MAX_WHO];
    float times[BENCH_MAX_WHO][BENCH_ROUNDS];
    if (who_count > BENCH_MAX_WHO) TEST_FAIL("%d contenders, at most %d", who_count, BENCH_MAX_WHO);
    for (int i = 0; i < 2 * who_count; i++) GPU_CHECK(cudaEventCreate(&ev[i]));
    for (int r = -5; r < BENCH_ROUNDS; r++) {
        for (int turn = 0; turn < who_count; turn++) {
            int who = (turn + r + 5) % who_count;
            GPU_CHECK(cudaEventRecord(ev[2 * who], 0));
            for (int call = 0; call < BENCH_CALLS; call++) run(who, ctx);
            GPU_CHECK(cudaEventRecord(ev[2 * who + 1], 0));
        }
        GPU_CHECK(cudaStreamSynchronize(0));
        if (r < 0) continue;
        for (int who = 0; who < who_count; who++)
            GPU_CHECK(cudaEventElapsedTime(&times[who][r], ev[2 * who], ev[2 * who + 1]));
    }
    for (int who = 0; who < who_count; who++) t[who] = median(times[who], BENCH_ROUNDS) * 1000 / BENCH_CALLS;
    for (int i = 0; i < 2 * who_count; i++) cudaEventDestroy(ev[i]);
}

/* Contenders that are cgm_hgemm calls (hg[]) and cuBLASLt calls
 * (lt_args[]): the nfirst first are hg's, or lt's when lt_first. */
typedef struct gemm_contenders {
    const cgm_hgemm_args *hg;
    const cgm_lt_gemm_args *lt_args;
    int nfirst;
    bool lt_first;
    cgm_lt *lt;
    void *ws;
    size_t ws_bytes;
} gemm_contenders;

/* CGM_BENCH_DYNAMIC=1: the benches' cgm_hgemm calls take the dynamic tile
 * schedule (one counter: they all run on the default stream), so that an
 * A/B of the static and the dynamic schedule alternates two processes of
 * one binary. */
static unsigned int *bench_counter(void) {
    static int done;
    static unsigned int *d;
    if (!done) {
        done = 1;
        const char *e = getenv("CGM_BENCH_DYNAMIC");
        if (e && atoi(e) == 1) {
            GPU_CHECK(cudaMalloc((void **)&d, sizeof *d));
            GPU_CHECK(cudaMemset(d, 0, sizeof *d));
        }
    }
    return d;
}

static cudaError_t bench_hgemm(const cgm_hgemm_args *args) {
    cgm_hgemm_args a = *args;
    if (!a.tile_counter) a.tile_counter = bench_counter();
    return cgm_hgemm(&a, 0);
}

static void run_contender(int who, void *ctx) {
    const gemm_contenders *c = ctx;
    bool first = who < c->nfirst;
    int i = first ? who : who - c->nfirst;
    if (first != c->lt_first) GPU_CHECK(bench_hgemm(&c->hg[i]));
    else if (cgm_lt_gemm(c->lt, &c->lt_args[i], c->ws, c->ws_bytes, 0) != CGM_SUCCESS)
        TEST_FAIL("cgm_lt_gemm: %s", cgm_last_error());
}

/* One bf16 shape: warm-up, then BENCH_ROUNDS rounds of the four
 * contenders (cooperative, ping-pong, auto, cuBLASLt), the order rotating
 * each round, each a block of BENCH_CALLS calls timed with events (time per
 * call). Checks cooperative and ping-pong against cuBLASLt on the whole
 * output, and auto bit for bit against the variant it chose. Returns 0 when
 * all match. */
#define BENCH_WHO 4 /* cooperative, ping-pong, auto, cuBLASLt */
static int bench_shape(int64_t m, int64_t n, int64_t k) {
    size_t nx = (size_t)(m * k), nw = (size_t)(n * k), ny = (size_t)(m * n);
    void *hx = fill(CGM_DTYPE_BF16, nx, 1), *hw = fill(CGM_DTYPE_BF16, nw, 2);
    void *dx = to_device(hx, nx * 2), *dw = to_device(hw, nw * 2), *dy[3], *dref;
    for (int v = 0; v < 3; v++) GPU_CHECK(cudaMalloc(&dy[v], ny * 2));
    GPU_CHECK(cudaMalloc(&dref, ny * 2));
    cgm_hgemm_args a[3];
    const int variants[3] = {CGM_HGEMM_COOPERATIVE, CGM_HGEMM_PINGPONG, CGM_HGEMM_AUTO};
    for (int v = 0; v < 3; v++) {
        memset(&a[v], 0, sizeof a[v]);
        a[v].in_dtype = a[v].out_dtype = CGM_DTYPE_BF16;
        a[v].m = m, a[v].n = n, a[v].k = k, a[v].x = dx, a[v].ldx = k, a[v].w = dw, a[v].ldw = k;
        a[v].y = dy[v], a[v].ldy = n;
        a[v].variant = variants[v];
    }
    /* auto with a workspace, as a caller of cuBLASLt gives it one: the
     * stream-K tail where the rule cuts (the `sk` column). */
    static void *sk_ws;
    static size_t sk_ws_bytes;
    if (!sk_ws) {
        int sms = 0;
        GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
        sk_ws_bytes = cgm_hgemm_workspace_max(sms);
        GPU_CHECK(cudaMalloc(&sk_ws, sk_ws_bytes));
        GPU_CHECK(cudaMemset(sk_ws, 0, sk_ws_bytes));
    }
    a[2].workspace = sk_ws, a[2].workspace_bytes = sk_ws_bytes;
    int cut = cgm_hgemm_workspace_bytes(&a[2]) > 0;
    int chosen = cgm_hgemm_variant_for(&a[2]); /* what auto runs */
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = g.out_dtype = CGM_DTYPE_BF16;
    g.m = m, g.n = n, g.k = k, g.x = dx, g.ldx = k, g.w = dw, g.ldw = k, g.y = dref, g.ldy = n;
    void *ws;
    size_t ws_bytes;
    cgm_lt *lt = lt_handle(&ws, &ws_bytes);
    float t[BENCH_WHO];
    gemm_contenders who = {a, &g, 3, false, lt, ws, ws_bytes};
    time_interleaved(BENCH_WHO, run_contender, &who, t);
    double flop = 2.0 * (double)m * (double)n * (double)k;
    uint16_t *hy = malloc(ny * 2), *href = malloc(ny * 2), *hauto = malloc(ny * 2);
    if (!hy || !href || !hauto) TEST_FAIL("malloc 3 x %zu", ny * 2);
    GPU_CHECK(cudaMemcpy(href, dref, ny * 2, cudaMemcpyDeviceToHost));
    GPU_CHECK(cudaMemcpy(hauto, dy[2], ny * 2, cudaMemcpyDeviceToHost));
    size_t wrong[2] = {0, 0};
    int auto_differs = 0;
    for (int v = 0; v < 2; v++) {
        GPU_CHECK(cudaMemcpy(hy, dy[v], ny * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < ny; i++) {
            float x = bf16_float(hy[i]), y = bf16_float(href[i]);
            if (!(fabsf(x - y) <= fabsf(y) / 128 + 1e-6f * (float)k)) wrong[v]++;
        }
        if (variants[v] == chosen) auto_differs = memcmp(hy, hauto, ny * 2) != 0;
    }
    int bad = wrong[0] || wrong[1] || auto_differs;
    printf("%6lld %6lld %6lld  %8.1f %8.1f %8.1f %8.1f  %6.1f %6.1f %6.1f %6.1f  %6.3f %6.3f %6.3f  %-4s %-3s %s\n",
           (long long)m, (long long)n, (long long)k, t[0], t[1], t[2], t[3], flop / t[0] * 1e-6,
           flop / t[1] * 1e-6, flop / t[2] * 1e-6, flop / t[3] * 1e-6, t[3] / t[0], t[3] / t[1], t[3] / t[2],
           chosen == CGM_HGEMM_PINGPONG ? "pp" : "coop", cut ? "yes" : "no", bad ? "WRONG" : "ok");
    for (int v = 0; v < 2; v++)
        if (wrong[v])
            printf("#   %s: %zu of %zu elements differ from cuBLASLt\n", variant_name(variants[v]), wrong[v], ny);
    if (auto_differs)
        printf("#   auto: not bit for bit the output of %s, the variant it chose\n", variant_name(chosen));
    for (int v = 0; v < 3; v++) cudaFree(dy[v]);
    cudaFree(dx), cudaFree(dw), cudaFree(dref);
    free(hx), free(hw), free(hy), free(href), free(hauto);
    return bad;
}

/* test_hopper_gemm bench [MxNxK,...] */
static int hopper_bench(int argc, char **argv) {
    const char *list = argc > 0 ? argv[0]
                                : "16384x2048x8192,8192x4096x4096,16384x8192x2048,4096x4096x4096,"
                                  "8192x8192x8192,2048x8192x8192,8192x2048x4096,4096x16384x4096";
    int count = 0, major = 0, sms = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        printf("# no CUDA device: nothing to time\n");
        return TEST_SKIP_CODE;
    }
    struct cudaDeviceProp prop;
    GPU_CHECK(cudaGetDeviceProperties(&prop, 0));
    major = prop.major, sms = prop.multiProcessorCount;
    printf("# cgm_hgemm (cooperative, ping-pong, auto) vs cuBLASLt, bf16 in/out, TN, %s (sm_%d%d, %d SMs); medians of %d interleaved rounds x %d calls\n",
           prop.name, major, prop.minor, sms, BENCH_ROUNDS, BENCH_CALLS);
    if (major != 9) return TEST_SKIP_CODE;
    printf("#    m      n      k   coop_us    pp_us  auto_us  cuLt_us  coopTF   ppTF autoTF cuLtTF  r_coop   r_pp r_auto  auto sk  check\n");
    int bad = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long m, n, k;
        if (sscanf(tok, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 8) {
            fprintf(stderr, "bad shape '%s' (MxNxK, k >= 8)\n", tok);
            free(copy);
            return 2;
        }
        bad += bench_shape(m, n, (k + 7) / 8 * 8);
    }
    free(copy);
    printf("# r_* = cuBLASLt time / ours (>= 0.95 is the goal); coop = cooperative 128x256, pp = ping-pong 128x128,"
           " auto = CGM_HGEMM_AUTO with a workspace (column `auto`: the variant it ran; `sk`: whether it cut"
           " its last wave, the stream-K tail); %s\n", bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}

/* test_hopper_gemm skbench [MxNxK,...] [sm_counts]: the stream-K tail.
 * Per shape and grid (sm_counts: a comma list, 0 = every SM; default 0):
 * cooperative and ping-pong without and with the cut forced on
 * (CGM_HGEMM_SK_ON), auto with a workspace (CGM_HGEMM_SK_AUTO: the rule),
 * and cuBLASLt, interleaved; fill = how full the whole-tile schedule's
 * last wave is. The inputs are multiples of 1/8, so every sum is exact
 * and the cut outputs must equal the whole-tile ones bit for bit. */
#define SK_WHO 6 /* coop, coop+sk, pp, pp+sk, auto(ws), cuBLASLt */
static bool bench_device(const char *bench, struct cudaDeviceProp *prop);

/* Trace builds only (cgm_hgemm_trace_ctas): 8 launches of `a` back to
 * back, then when the last one's CTAs ended (the later consumer's exit),
 * in us after the first CTA's start: quantiles over the CTAs, and how many
 * ended within 1 us of the last; for ping-pong, CTA 0's last units. Shows
 * what the last partial wave costs, a cut tail's spread, uneven CTAs. */
static void cta_profile(const char *name, const cgm_hgemm_args *a) {
    static unsigned long long st[1024 * 4], tiles[2 * 64 * 6];
    static float end[1024]; /* us after the first CTA's start */
    if (cgm_hgemm_trace_ctas(st, 1024) <= 0) return; /* not a trace build; else clears */
    GPU_CHECK(cudaDeviceSynchronize());
    if (cgm_hgemm_trace_read(tiles, 64) < 0) TEST_FAIL("cgm_hgemm_trace_read");
    for (int r = 0; r < 8; r++) GPU_CHECK(bench_hgemm(a)); /* warm, back to back: the stamps are the last's */
    GPU_CHECK(cudaDeviceSynchronize());
    int nt = cgm_hgemm_trace_read(tiles, 64);
    if (a->variant == CGM_HGEMM_PINGPONG && nt > 0) {
        /* CTA 0's last units per consumer: main loop start-end and the
         * stores' end, in thousands of SM cycles after its first stamp */
        unsigned long long z = ~0ull;
        for (int i = 0; i < 2 * nt; i++)
            if (tiles[6 * i] && tiles[6 * i] < z) z = tiles[6 * i];
        for (int c = 0; c < 2; c++) {
            int last = -1;
            for (int t = 0; t < nt; t++)
                if (tiles[(c * nt + t) * 6 + 2]) last = t;
            printf("#   units %-8s CTA 0 consumer %d (%d units):", name, c, last + 1);
            for (int t = last - 3 < 0 ? 0 : last - 3; t <= last; t++) {
                const unsigned long long *f = tiles + (c * nt + t) * 6;
                printf("  [%.1f-%.1f %.1f]", (double)(f[1] - z) / 1e3, (double)(f[2] - z) / 1e3,
                       f[4] ? (double)(f[4] - z) / 1e3 : -1.0);
            }
            printf("\n");
        }
    }
    int n = cgm_hgemm_trace_ctas(st, 1024), ctas = 0;
    unsigned long long t0 = ~0ull, s1 = 0;
    for (int c = 0; c < n; c++)
        if (st[4 * c]) t0 = st[4 * c] < t0 ? st[4 * c] : t0, s1 = st[4 * c] > s1 ? st[4 * c] : s1;
    /* CGM_TRACE_RAW=1: every CTA (index, SM, end) for an offline look */
    const char *raw = getenv("CGM_TRACE_RAW");
    for (int c = 0; c < n; c++) {
        if (!st[4 * c]) continue;
        end[ctas] = (float)((st[4 * c + 1] > st[4 * c + 2] ? st[4 * c + 1] : st[4 * c + 2]) - t0) / 1e3f;
        if (raw && atoi(raw) == 1)
            printf("#   raw %s %lldx%lldx%lld cta %d sm %llu end %.1f\n", name, (long long)a->m, (long long)a->n,
                   (long long)a->k, c, st[4 * c + 3], end[ctas]);
        ctas++;
    }
    if (!ctas) return;
    qsort(end, (size_t)ctas, sizeof end[0], cmp_float);
    int near = 0;
    double mean = 0;
    for (int c = 0; c < ctas; c++) near += end[ctas - 1] - end[c] <= 1.0f, mean += end[c] / ctas;
#define Q(f) end[(int)((ctas - 1) * (f))]
    printf("#   ctas %-8s %4d CTAs, starts within %5.1f us; ends (us) min %7.1f p10 %7.1f p50 %7.1f p90 %7.1f max %7.1f "
           "mean %7.1f; %d within 1 us of the last\n",
           name, ctas, (double)(s1 - t0) / 1e3, Q(0), Q(0.1), Q(0.5), Q(0.9), Q(1.0), mean, near);
#undef Q
}

static int sk_bench(int argc, char **argv) {
    const char *list = argc > 0 ? argv[0] : "4096x4096x4096,8192x2048x4096,8192x4096x4096,16384x4096x2048";
    const char *grids = argc > 1 ? argv[1] : "0";
    struct cudaDeviceProp prop;
    if (!bench_device("skbench", &prop)) return TEST_SKIP_CODE;
    printf("# stream-K tail, bf16, %s (%d SMs): us per call, medians of %d interleaved rounds x %d calls\n",
           prop.name, prop.multiProcessorCount, BENCH_ROUNDS, BENCH_CALLS);
    printf("#    m      n      k grid  fill_coop fill_pp   coop  coop_sk     pp    pp_sk  auto_ws   cuLt   r_coop r_coop_sk  r_pp r_pp_sk r_auto  auto  check\n");
    int bad = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long m, n, k;
        if (sscanf(tok, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 8) {
            fprintf(stderr, "bad shape '%s' (MxNxK, k >= 8)\n", tok);
            bad++;
            continue;
        }
        k = (k + 7) / 8 * 8;
        size_t nx = (size_t)(m * k), nw = (size_t)(n * k), ny = (size_t)(m * n);
        void *hx = fill(CGM_DTYPE_BF16, nx, 1), *hw = fill(CGM_DTYPE_BF16, nw, 2);
        void *dx = to_device(hx, nx * 2), *dw = to_device(hw, nw * 2), *dy[SK_WHO], *ws;
        for (int v = 0; v < SK_WHO; v++) GPU_CHECK(cudaMalloc(&dy[v], ny * 2));
        size_t ws_bytes = cgm_hgemm_workspace_max(prop.multiProcessorCount);
        GPU_CHECK(cudaMalloc(&ws, ws_bytes));
        GPU_CHECK(cudaMemset(ws, 0, ws_bytes));
        char *gcopy = strdup(grids), *gsave = NULL;
        for (char *gt = strtok_r(gcopy, ",", &gsave); gt; gt = strtok_r(NULL, ",", &gsave)) {
            int grid = atoi(gt);
            cgm_hgemm_args a[SK_WHO - 1];
            const int variants[SK_WHO - 1] = {CGM_HGEMM_COOPERATIVE, CGM_HGEMM_COOPERATIVE, CGM_HGEMM_PINGPONG,
                                              CGM_HGEMM_PINGPONG, CGM_HGEMM_AUTO};
            const int sk[SK_WHO - 1] = {CGM_HGEMM_SK_OFF, CGM_HGEMM_SK_ON, CGM_HGEMM_SK_OFF, CGM_HGEMM_SK_ON,
                                        CGM_HGEMM_SK_AUTO};
            for (int v = 0; v < SK_WHO - 1; v++) {
                memset(&a[v], 0, sizeof a[v]);
                a[v].in_dtype = a[v].out_dtype = CGM_DTYPE_BF16;
                a[v].m = m, a[v].n = n, a[v].k = k, a[v].x = dx, a[v].ldx = k, a[v].w = dw, a[v].ldw = k;
                a[v].y = dy[v], a[v].ldy = n, a[v].sm_count = grid;
                a[v].variant = variants[v], a[v].stream_k = sk[v];
                a[v].workspace = sk[v] == CGM_HGEMM_SK_OFF ? NULL : ws;
                a[v].workspace_bytes = sk[v] == CGM_HGEMM_SK_OFF ? 0 : ws_bytes;
            }
            cgm_lt_gemm_args g;
            memset(&g, 0, sizeof g);
            g.layout = CGM_LAYOUT_TN;
            g.in_dtype = g.out_dtype = CGM_DTYPE_BF16;
            g.m = m, g.n = n, g.k = k, g.x = dx, g.ldx = k, g.w = dw, g.ldw = k, g.y = dy[SK_WHO - 1], g.ldy = n;
            void *lws;
            size_t lws_bytes;
            cgm_lt *lt = lt_handle(&lws, &lws_bytes);
            float t[SK_WHO];
            gemm_contenders who = {a, &g, SK_WHO - 1, false, lt, lws, lws_bytes};
            time_interleaved(SK_WHO, run_contender, &who, t);
            int g_eff = grid > 0 && grid < prop.multiProcessorCount ? grid : prop.multiProcessorCount;
            long long tc = ((m + 127) / 128) * ((n + 255) / 256), tp = ((m + 127) / 128) * ((n + 127) / 128);
            double fill_c = tc % g_eff ? (double)(tc % g_eff) / g_eff : 1.0;
            double fill_p = tp % g_eff ? (double)(tp % g_eff) / g_eff : 1.0;
            /* cut == whole bit for bit (exact sums), auto == its variant */
            size_t bytes = ny * 2;
            unsigned char *h0 = malloc(bytes), *h1 = malloc(bytes);
            if (!h0 || !h1) TEST_FAIL("malloc 2 x %zu", bytes);
            int wrong = 0;
            for (int v = 0; v < 4; v += 2) {
                GPU_CHECK(cudaMemcpy(h0, dy[v], bytes, cudaMemcpyDeviceToHost));
                GPU_CHECK(cudaMemcpy(h1, dy[v + 1], bytes, cudaMemcpyDeviceToHost));
                if (memcmp(h0, h1, bytes)) wrong++, printf("#   %s: the cut output differs from the whole-tile one\n",
                                                           variant_name(variants[v]));
            }
            int chosen = cgm_hgemm_variant_for(&a[4]);
            size_t auto_ws = cgm_hgemm_workspace_bytes(&a[4]);
            bad += wrong;
            printf("%6lld %6lld %6lld %4d  %8.2f %7.2f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f  %6.3f %6.3f %8.3f %6.3f %6.3f  %-4s%s  %s\n",
                   m, n, k, g_eff, fill_c, fill_p, t[0], t[1], t[2], t[3], t[4], t[5], t[5] / t[0], t[5] / t[1],
                   t[5] / t[2], t[5] / t[3], t[5] / t[4], chosen == CGM_HGEMM_PINGPONG ? "pp" : "coop",
                   auto_ws ? "+sk" : "", wrong ? "WRONG" : "ok");
            free(h0), free(h1);
            const char *names[SK_WHO - 1] = {"coop", "coop_sk", "pp", "pp_sk", "auto"};
            for (int v = 0; v < SK_WHO - 1; v++) cta_profile(names[v], &a[v]);
        }
        free(gcopy);
        for (int v = 0; v < SK_WHO; v++) cudaFree(dy[v]);
        cudaFree(dx), cudaFree(dw), cudaFree(ws);
        free(hx), free(hw);
    }
    free(copy);
    printf("# r_* = cuBLASLt time / ours; _sk: CGM_HGEMM_SK_ON; auto: CGM_HGEMM_SK_AUTO with a workspace (+sk: it cut); %s\n",
           bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
}

/* The fused AG's setting for agbench and fusedbench (no communication):
 * X, W and Y of m x n x k (bf16), every flag already at the epoch (16
 * cells: shards of m/2 rows, flag_shard_stride 7, 2 flags per shard), the
 * abort word, and the m-tile order of rank 1 of 2 (its own second half
 * first). hooks_args fills a plain call on sm_count SMs; hooks_order,
 * hooks_own and hooks_flags add one hook each, as the AG form uses them. */
typedef struct hooks_fixture {
    long long m, n, k;
    int64_t half, rpf, stride;
    void *hx, *hw, *dx, *dw, *dy;
    unsigned long long *df, *depoch;
    unsigned int *dabort;
    int *ho, *dorder;
} hooks_fixture;

static void hooks_fixture_make(hooks_fixture *f, long long m, long long n, long long k) {
    f->m = m, f->n = n, f->k = k;
    size_t nx = (size_t)(m * k), nw = (size_t)(n * k), ny = (size_t)(m * n);
    f->hx = fill(CGM_DTYPE_BF16, nx, 1), f->hw = fill(CGM_DTYPE_BF16, nw, 2);
    f->dx = to_device(f->hx, nx * 2), f->dw = to_device(f->hw, nw * 2);
    GPU_CHECK(cudaMalloc(&f->dy, ny * 2));
    f->half = m / 2, f->rpf = (f->half / 2 + 127) / 128 * 128, f->stride = 7;
    unsigned long long hf[16];
    for (int i = 0; i < 16; i++) hf[i] = 1;
    f->df = to_device(hf, sizeof hf), f->depoch = to_device(hf, 8);
    GPU_CHECK(cudaMalloc((void **)&f->dabort, 4));
    GPU_CHECK(cudaMemset(f->dabort, 0, 4));
    int tiles = (int)((m + 127) / 128), nt = 0;
    f->ho = malloc((size_t)tiles * sizeof(int));
    if (!f->ho) TEST_FAIL("malloc %d tiles", tiles);
    for (int t = (int)(f->half / 128); t < tiles; t++) f->ho[nt++] = t; /* own (second half) first */
    for (int t = 0; t < (int)(f->half / 128); t++) f->ho[nt++] = t;
    f->dorder = to_device(f->ho, (size_t)tiles * sizeof(int));
}

static void hooks_fixture_free(hooks_fixture *f) {
    cudaFree(f->dx), cudaFree(f->dw), cudaFree(f->dy), cudaFree(f->df), cudaFree(f->depoch);
    cudaFree(f->dabort), cudaFree(f->dorder);
    free(f->hx), free(f->hw), free(f->ho);
}

static void hooks_args(const hooks_fixture *f, cgm_hgemm_args *a, int sm_count) {
    memset(a, 0, sizeof *a);
    a->in_dtype = a->out_dtype = CGM_DTYPE_BF16;
    a->m = f->m, a->n = f->n, a->k = f->k, a->x = f->dx, a->ldx = f->k, a->w = f->dw, a->ldw = f->k;
    a->y = f->dy, a->ldy = f->n, a->sm_count = sm_count;
}

static void hooks_order(const hooks_fixture *f, cgm_hgemm_args *a) { a->m_block_order = f->dorder; }

static void hooks_own(const hooks_fixture *f, cgm_hgemm_args *a) {
    a->x_own = (char *)f->dx + (size_t)f->half * (size_t)f->k * 2, a->ldx_own = f->k, a->own_row0 = f->half;
    a->own_rows = f->m - f->half;
}

static void hooks_flags(const hooks_fixture *f, cgm_hgemm_args *a) {
    a->row_flags = f->df, a->rows_per_flag = f->rpf, a->flag_shard_rows = f->half;
    a->flag_shard_stride = f->stride, a->flag_epoch_ptr = f->depoch, a->abort_word = f->dabort;
}

static bool hooks_aborted(const hooks_fixture *f) {
    unsigned int aborted = 0;
    GPU_CHECK(cudaMemcpy(&aborted, f->dabort, 4, cudaMemcpyDeviceToHost));
    return aborted != 0;
}

/* test_hopper_gemm agbench [MxNxK,...]: which of the fused AG's hooks costs
 * what, on all SMs but one (as the p2p backend launches it): the plain
 * kernel; + m_block_order (own tiles first); + x_own (the own half from the
 * caller's input, no order); + row flags on every tile (all ready, no
 * x_own); + order and x_own; the whole AG form (order, x_own, flags on the
 * peer half), as fusedbench's AG_form. Interleaved, medians.
 * CGM_AGBENCH_ONLY=v times contender v alone (for a profiler). */
#define AG_WHO 6
static int ag_bench(int argc, char **argv) {
    const char *list = argc > 0 ? argv[0] : "16384x2048x8192,8192x4096x4096,16384x8192x2048";
    struct cudaDeviceProp prop;
    if (!bench_device("agbench", &prop)) return TEST_SKIP_CODE;
    int sms = prop.multiProcessorCount;
    printf("# fused AG hooks one by one, bf16, %s, %d CTAs: us per call, medians of %d interleaved rounds x %d calls\n",
           prop.name, sms - 1, BENCH_ROUNDS, BENCH_CALLS);
    printf("#    m      n      k    plain   +order   +x_own   +flags  +ord+own  AG_form   (ratios to plain)\n");
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long m, n, k;
        if (sscanf(tok, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 256 || n < 1 || k < 8) continue;
        hooks_fixture f;
        hooks_fixture_make(&f, m, n, k);
        cgm_hgemm_args a[AG_WHO];
        for (int v = 0; v < AG_WHO; v++) {
            hooks_args(&f, &a[v], sms - 1);
            if (v == 1 || v == 4 || v == 5) hooks_order(&f, &a[v]);
            if (v == 2 || v == 4 || v == 5) hooks_own(&f, &a[v]);
            if (v == 3 || v == 5) hooks_flags(&f, &a[v]);
        }
        float t[AG_WHO];
        /* CGM_AGBENCH_ONLY=v: only contender v (0-5), e.g. under a profiler */
        const char *only = getenv("CGM_AGBENCH_ONLY");
        if (only) {
            int v = atoi(only);
            if (v < 0 || v >= AG_WHO) TEST_FAIL("CGM_AGBENCH_ONLY=%s: expected 0..%d", only, AG_WHO - 1);
            a[0] = a[v];
        }
        gemm_contenders who = {a, NULL, only ? 1 : AG_WHO, false, NULL, NULL, 0};
        time_interleaved(only ? 1 : AG_WHO, run_contender, &who, t);
        if (only)
            for (int v = 1; v < AG_WHO; v++) t[v] = t[0];
        printf("%6lld %6lld %6lld  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f  %7.1f   (%5.3f %5.3f %5.3f %5.3f %5.3f)%s\n", m, n, k,
               t[0], t[1], t[2], t[3], t[4], t[5], t[1] / t[0], t[2] / t[0], t[3] / t[0], t[4] / t[0], t[5] / t[0],
               hooks_aborted(&f) ? "  ABORTED (a flag wait expired)" : "");
        hooks_fixture_free(&f);
    }
    free(copy);
    return 0;
}

/* test_hopper_gemm fusedbench [MxNxK,...]: what the fused algorithms'
 * hooks cost the kernel, with every flag already at the epoch (no
 * communication): auto on every SM; auto on all SMs but one (as p2p's
 * fused runs); the AG form of rank 1 of 2 (X's second half from x_own,
 * tiles in its order, the first half waiting on shard-mapped flags, 2
 * pieces per shard); the RS form (m/2 rows plus one fp32 addend with
 * flags). Interleaved rounds, medians; us per call. */
static int fused_bench(int argc, char **argv) {
    const char *list = argc > 0 ? argv[0] : "16384x2048x8192,8192x4096x4096,16384x8192x2048";
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major != 9) return TEST_SKIP_CODE;
    int sms = prop.multiProcessorCount;
    printf("# fused hooks, bf16, %s: us per call, medians of %d interleaved rounds x %d calls\n", prop.name,
           BENCH_ROUNDS, BENCH_CALLS);
    printf("#    m      n      k   all_SMs  SMs-1  AG_form  (vs SMs-1)  RS_half  RS_form  (vs RS_half)\n");
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long m, n, k;
        if (sscanf(tok, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 256 || n < 1 || k < 8) continue;
        hooks_fixture f;
        hooks_fixture_make(&f, m, n, k);
        void *dadd;
        GPU_CHECK(cudaMalloc(&dadd, (size_t)(m * n) * 2)); /* m/2 x n fp32 */
        GPU_CHECK(cudaMemset(dadd, 0, (size_t)(m * n) * 2));
        cgm_hgemm_args a[5];
        for (int v = 0; v < 5; v++) hooks_args(&f, &a[v], v == 0 ? 0 : sms - 1);
        cgm_hgemm_args *ag = &a[2], *rs = &a[4];
        hooks_flags(&f, ag), hooks_order(&f, ag), hooks_own(&f, ag);
        a[3].m = rs->m = f.half;
        rs->naddends = 1, rs->addend[0] = dadd, rs->addend_flags[0] = f.df, rs->addend_dtype = CGM_DTYPE_FP32;
        rs->addend_ld = n, rs->rows_per_flag = f.rpf, rs->flag_epoch_ptr = f.depoch, rs->abort_word = f.dabort;
        float t[5];
        gemm_contenders who = {a, NULL, 5, false, NULL, NULL, 0};
        time_interleaved(5, run_contender, &who, t);
        printf("%6lld %6lld %6lld  %8.1f %6.1f %8.1f  (%5.3f)  %8.1f %8.1f  (%5.3f)%s\n", m, n, k, t[0], t[1],
               t[2], t[2] / t[1], t[3], t[4], t[4] / t[3], hooks_aborted(&f) ? "  ABORTED (a flag wait expired)" : "");
        cudaFree(dadd);
        hooks_fixture_free(&f);
    }
    free(copy);
    /* A copy to the peer GPU (what the fused algorithms' comm queue does)
     * alone, and beside the kernel on all SMs but one, both ways. */
    int ndev = 0, can = 0;
    if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 1 &&
        cudaDeviceCanAccessPeer(&can, 0, 1) == cudaSuccess && can) {
        size_t bytes = 64u << 20;
        void *src, *dst, *dst2;
        GPU_CHECK(cudaMalloc(&src, bytes));
        GPU_CHECK(cudaMalloc(&dst2, bytes));
        GPU_CHECK(cudaSetDevice(1));
        GPU_CHECK(cudaMalloc(&dst, bytes));
        GPU_CHECK(cudaSetDevice(0));
        cudaError_t pe = cudaDeviceEnablePeerAccess(1, 0);
        if (pe != cudaSuccess && pe != cudaErrorPeerAccessAlreadyEnabled) GPU_CHECK(pe);
        (void)cudaGetLastError();
        int64_t m = 8192, n = 4096, k = 4096;
        void *dx, *dw, *dy;
        GPU_CHECK(cudaMalloc(&dx, (size_t)(m * k) * 2));
        GPU_CHECK(cudaMalloc(&dw, (size_t)(n * k) * 2));
        GPU_CHECK(cudaMalloc(&dy, (size_t)(m * n) * 2));
        GPU_CHECK(cudaMemset(dx, 0, (size_t)(m * k) * 2));
        GPU_CHECK(cudaMemset(dw, 0, (size_t)(n * k) * 2));
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = a.out_dtype = CGM_DTYPE_BF16;
        a.m = m, a.n = n, a.k = k, a.x = dx, a.ldx = k, a.w = dw, a.ldw = k, a.y = dy, a.ldy = n;
        a.sm_count = sms - 1;
        cudaStream_t sk, sc;
        GPU_CHECK(cudaStreamCreateWithFlags(&sk, cudaStreamNonBlocking));
        GPU_CHECK(cudaStreamCreateWithFlags(&sc, cudaStreamNonBlocking));
        cudaEvent_t e[8];
        for (int i = 0; i < 8; i++) GPU_CHECK(cudaEventCreate(&e[i]));
        const char *what[2] = {"peer copy 64 MiB (cudaMemcpy2DAsync, GPU0 -> GPU1)", "local copy 64 MiB (GPU0)"};
        for (int w = 0; w < 2; w++) {
            void *to = w ? dst2 : dst;
            float tc = 0, tk = 0, tcb = 0, tkb = 0;
            for (int r = 0; r < 6; r++) {
                GPU_CHECK(cudaEventRecord(e[0], sc));
                GPU_CHECK(cudaMemcpy2DAsync(to, 8192, src, 8192, 8192, bytes / 8192, cudaMemcpyDefault, sc));
                GPU_CHECK(cudaEventRecord(e[1], sc));
                GPU_CHECK(cudaEventRecord(e[2], sk));
                GPU_CHECK(cgm_hgemm(&a, sk));
                GPU_CHECK(cudaEventRecord(e[3], sk));
                GPU_CHECK(cudaDeviceSynchronize());
                GPU_CHECK(cudaEventRecord(e[4], sk)); /* both at once: kernel first, then the copy */
                GPU_CHECK(cgm_hgemm(&a, sk));
                GPU_CHECK(cudaEventRecord(e[5], sk));
                usleep(20);
                GPU_CHECK(cudaEventRecord(e[6], sc));
                GPU_CHECK(cudaMemcpy2DAsync(to, 8192, src, 8192, 8192, bytes / 8192, cudaMemcpyDefault, sc));
                GPU_CHECK(cudaEventRecord(e[7], sc));
                GPU_CHECK(cudaDeviceSynchronize());
                if (r == 0) continue;
                float x;
                GPU_CHECK(cudaEventElapsedTime(&x, e[0], e[1]));
                tc += x / 5;
                GPU_CHECK(cudaEventElapsedTime(&x, e[2], e[3]));
                tk += x / 5;
                GPU_CHECK(cudaEventElapsedTime(&x, e[4], e[5]));
                tkb += x / 5;
                GPU_CHECK(cudaEventElapsedTime(&x, e[6], e[7]));
                tcb += x / 5;
            }
            printf("# %s: alone %.1f us; kernel 8192x4096x4096 on SMs-1 alone %.1f us; together: kernel %.1f us,"
                   " copy %.1f us\n", what[w], tc * 1000, tk * 1000, tkb * 1000, tcb * 1000);
        }
        cudaFree(src), cudaFree(dst2), cudaFree(dx), cudaFree(dw), cudaFree(dy);
        GPU_CHECK(cudaSetDevice(1));
        cudaFree(dst);
        GPU_CHECK(cudaSetDevice(0));
    }
    return 0;
}

/* test_hopper_gemm addendbench [MxNxK,...]: what adding an addend in the
 * epilogue costs (the own pieces of the p2p GEMM+RS in the GEMM form,
 * COMMGEMM_RS_OWN), bf16 in, TN, us per call: cuBLASLt plain; cuBLASLt with
 * a bf16 C (beta 1, what the GEMM form runs); cuBLASLt with fp32 C and D;
 * cgm_hgemm (auto) plain, with one bf16 addend, and with one fp32 addend
 * and a bf16 output (the default precision's partials). cuBLASLt's entries
 * are searched first (cgm_lt_prepare), as the ops do. The addend GEMMs are
 * checked against cuBLASLt's with C. Interleaved rounds, medians. */
/* A bench's device: true on an sm_90 GPU (prop filled), else prints why it
 * skips. */
static bool bench_device(const char *bench, struct cudaDeviceProp *prop) {
    if (cudaGetDeviceProperties(prop, 0) == cudaSuccess && prop->major == 9) return true;
    printf("skip: %s needs an sm_90 device\n", bench);
    return false;
}

#define ADD_WHO 6
static int addend_bench(int argc, char **argv) {
    const char *list = argc > 0 ? argv[0]
                                : "2048x4096x2048,4096x4096x2048,1024x4096x2048,1024x14336x2048,"
                                  "2048x14336x2048,4096x4096x4096";
    struct cudaDeviceProp prop;
    if (!bench_device("addendbench", &prop)) return TEST_SKIP_CODE;
    static const char *names[ADD_WHO] = {"lt", "lt+C16", "lt32+C32", "ours", "ours+a16", "ours+a32"};
    printf("# epilogue addends, bf16 in, TN, %s: us per call, medians of %d interleaved rounds x %d calls\n",
           prop.name, BENCH_ROUNDS, BENCH_CALLS);
    printf("#    m      n      k");
    for (int i = 0; i < ADD_WHO; i++) printf(" %9s", names[i]);
    printf("   C16/lt a16/ours a16/lt  check\n");
    int bad = 0;
    void *ws;
    size_t ws_bytes;
    cgm_lt *lt = lt_handle(&ws, &ws_bytes);
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long m, n, k;
        if (sscanf(tok, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n < 8 || k < 8 || k % 8 || n % 8) {
            fprintf(stderr, "bad shape '%s' (MxNxK, n and k multiples of 8)\n", tok);
            free(copy);
            return 2;
        }
        size_t nx = (size_t)(m * k), nw = (size_t)(n * k), ny = (size_t)(m * n);
        void *hx = fill(CGM_DTYPE_BF16, nx, 1), *hw = fill(CGM_DTYPE_BF16, nw, 2);
        void *ha16 = fill(CGM_DTYPE_BF16, ny, 3), *ha32 = fill(CGM_DTYPE_FP32, ny, 3);
        void *dx = to_device(hx, nx * 2), *dw = to_device(hw, nw * 2);
        void *da16 = to_device(ha16, ny * 2), *da32 = to_device(ha32, ny * 4);
        void *dy[ADD_WHO];
        for (int i = 0; i < ADD_WHO; i++) GPU_CHECK(cudaMalloc(&dy[i], ny * 4));
        cgm_lt_gemm_args g[3];
        for (int i = 0; i < 3; i++) {
            memset(&g[i], 0, sizeof g[i]);
            g[i].layout = CGM_LAYOUT_TN;
            g[i].in_dtype = CGM_DTYPE_BF16;
            g[i].out_dtype = i == 2 ? CGM_DTYPE_FP32 : CGM_DTYPE_BF16;
            g[i].m = m, g[i].n = n, g[i].k = k, g[i].x = dx, g[i].ldx = k, g[i].w = dw, g[i].ldw = k;
            g[i].y = dy[i], g[i].ldy = n;
            if (i) g[i].addend = i == 2 ? da32 : da16, g[i].ld_addend = n;
            if (cgm_lt_prepare(lt, &g[i], ws_bytes, 0, 60000) != CGM_SUCCESS)
                TEST_FAIL("cgm_lt_prepare: %s", cgm_last_error());
        }
        cgm_hgemm_args a[3];
        for (int i = 0; i < 3; i++) {
            memset(&a[i], 0, sizeof a[i]);
            a[i].in_dtype = a[i].out_dtype = CGM_DTYPE_BF16;
            a[i].m = m, a[i].n = n, a[i].k = k, a[i].x = dx, a[i].ldx = k, a[i].w = dw, a[i].ldw = k;
            a[i].y = dy[3 + i], a[i].ldy = n;
            if (i) {
                a[i].naddends = 1, a[i].addend[0] = i == 2 ? da32 : da16, a[i].addend_ld = n;
                a[i].addend_dtype = i == 2 ? CGM_DTYPE_FP32 : CGM_DTYPE_BF16;
            }
        }
        float t[ADD_WHO]; /* cuBLASLt g[0..2], then ours a[0..] */
        gemm_contenders who = {a, g, 3, true, lt, ws, ws_bytes};
        time_interleaved(ADD_WHO, run_contender, &who, t);
        /* ours + a16 and ours + a32 against cuBLASLt with C (bf16 outputs). */
        uint16_t *href = malloc(ny * 2), *hy = malloc(ny * 2);
        if (!href || !hy) TEST_FAIL("malloc 2 x %zu", ny * 2);
        GPU_CHECK(cudaMemcpy(href, dy[1], ny * 2, cudaMemcpyDeviceToHost));
        size_t wrong = 0;
        for (int v = 4; v < 6; v++) {
            GPU_CHECK(cudaMemcpy(hy, dy[v], ny * 2, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < ny; i++) {
                float x = bf16_float(hy[i]), y = bf16_float(href[i]);
                if (!(fabsf(x - y) <= fabsf(y) / 128 + 1e-6f * (float)k)) wrong++;
            }
        }
        bad += wrong != 0;
        printf("%6lld %6lld %6lld", m, n, k);
        for (int i = 0; i < ADD_WHO; i++) printf(" %9.1f", t[i]);
        printf("   %6.3f %9.3f %6.3f  %s\n", t[1] / t[0], t[4] / t[3], t[4] / t[1],
               wrong ? "WRONG" : "ok");
        if (wrong) printf("#   %zu of %zu elements of ours with an addend differ from cuBLASLt with C\n", wrong, 2 * ny);
        for (int i = 0; i < ADD_WHO; i++) cudaFree(dy[i]);
        cudaFree(dx), cudaFree(dw), cudaFree(da16), cudaFree(da32);
        free(hx), free(hw), free(ha16), free(ha32), free(href), free(hy);
    }
    free(copy);
    printf("# C16/lt: cuBLASLt with a bf16 C against without; a16/ours: ours with a bf16 addend against without;"
           " a16/lt: ours with the addend against cuBLASLt with C (< 1: ours faster); %s\n",
           bad ? "FAILED" : "OK");
    return bad ? 1 : 0;
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

/* With a -DCGM_HGEMM_TRACE build: one more call of `a`, then CTA 0's
 * ping-pong stamps (cgm_hgemm_trace_read): per consumer and kind of tile
 * (epilogue rows or plain partial), the mean cycles of the turn wait, the
 * main loop, the addends and the stores, and the share of the span during
 * which some main loop ran (1: the tensor cores never waited for an
 * epilogue). Prints nothing in a normal build. */
#define TRACE_TILES 64
static void trace_one(const char *name, const cgm_hgemm_args *a) {
    static unsigned long long st[2 * TRACE_TILES * 6];
    if (cgm_hgemm_trace_read(st, TRACE_TILES) <= 0) return; /* not a trace build: clears nothing */
    GPU_CHECK(cgm_hgemm(a, 0));
    GPU_CHECK(cudaDeviceSynchronize());
    int n = cgm_hgemm_trace_read(st, TRACE_TILES);
    if (n <= 0) return;
    double sum[2][2][4] = {{{0}}}, cnt[2][2] = {{0}};
    unsigned long long lo = ~0ull, hi = 0;
    unsigned long long iv[2 * TRACE_TILES][2];
    int niv = 0;
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < n; t++) {
            const unsigned long long *f = st + ((size_t)c * n + t) * 6;
            if (!f[1] || !f[4]) continue; /* no tile here */
            int own = f[5] != 0;
            for (int j = 0; j < 4; j++) sum[c][own][j] += (double)(f[j + 1] - f[j]);
            cnt[c][own] += 1;
            if (f[1] < lo) lo = f[1];
            if (f[4] > hi) hi = f[4];
            iv[niv][0] = f[1], iv[niv][1] = f[2], niv++;
        }
    /* union of the main-loop intervals */
    for (int i = 1; i < niv; i++)
        for (int j = i; j > 0 && iv[j][0] < iv[j - 1][0]; j--) {
            unsigned long long t0 = iv[j][0], t1 = iv[j][1];
            iv[j][0] = iv[j - 1][0], iv[j][1] = iv[j - 1][1], iv[j - 1][0] = t0, iv[j - 1][1] = t1;
        }
    double busy = 0;
    unsigned long long end = 0;
    for (int i = 0; i < niv; i++) {
        unsigned long long b = iv[i][0] > end ? iv[i][0] : end;
        if (iv[i][1] > b) busy += (double)(iv[i][1] - b);
        if (iv[i][1] > end) end = iv[i][1];
    }
    printf("#   trace %-9s CTA 0: main loops cover %.3f of %llu cycles\n", name, hi > lo ? busy / (double)(hi - lo) : 0,
           hi - lo);
    for (int c = 0; c < 2; c++)
        for (int own = 0; own < 2; own++)
            if (cnt[c][own] > 0)
                printf("#     consumer %d, %-8s tiles %2.0f: turn wait %7.0f  main %7.0f  addends %6.0f  stores %6.0f "
                       "cycles\n", c, own ? "epilogue" : "partial", cnt[c][own], sum[c][own][0] / cnt[c][own],
                       sum[c][own][1] / cnt[c][own], sum[c][own][2] / cnt[c][own], sum[c][own][3] / cnt[c][own]);
}

/* The one-kernel GEMM+RS's GEMM (COMMGEMM_P2P_FUSED_PUSH=single) on one GPU,
 * as rank 0 of 2 runs it: the peer's shard (rows m/2..m) first, stored as
 * plain partials with a done flag per piece, then the own shard with the
 * epilogue adding the peer's bf16 partial (its flags already at the epoch),
 * on all SMs but one. Against cuBLASLt's and our unsplit GEMM, and the same
 * kernel without the addend: what the single form costs before any copy.
 * Shapes MxNxK[:S], S pieces per shard (default 4). */
#define SINGLE_WHO 5
static int single_bench(int argc, char **argv) {
    const char *list = argc > 0 ? argv[0] : "16384x4096x2048,32768x4096x2048,4096x4096x2048:2,8192x14336x2048:2";
    struct cudaDeviceProp prop;
    if (!bench_device("singlebench", &prop)) return TEST_SKIP_CODE;
    printf("# the single form's GEMM (rank 0 of 2), bf16, %s: us per call, medians of %d interleaved rounds x %d "
           "calls\n", prop.name, BENCH_ROUNDS, BENCH_CALLS);
    printf("#    m      n      k  S        lt      ours    single  single-a single-nf  single/lt single/ours  addend  "
           "flags  split  check\n");
    int bad = 0;
    void *ws;
    size_t ws_bytes;
    cgm_lt *lt = lt_handle(&ws, &ws_bytes);
    char *copy = strdup(list), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long m, n, k;
        int S = 4;
        int got = sscanf(tok, "%lldx%lldx%lld:%d", &m, &n, &k, &S);
        if (got < 3 || m % 256 || n < 8 || n % 8 || k < 8 || k % 8 || S < 1 || S > 8) {
            fprintf(stderr, "bad shape '%s' (MxNxK[:S], m a multiple of 256, n and k of 8, S 1..8)\n", tok);
            free(copy);
            return 2;
        }
        int64_t half = m / 2, rpf = ((half + S - 1) / S + 127) / 128 * 128;
        int pieces = (int)((half + rpf - 1) / rpf);
        size_t nx = (size_t)(m * k), nw = (size_t)(n * k), ny = (size_t)(m * n);
        void *hx = fill(CGM_DTYPE_BF16, nx, 1), *hw = fill(CGM_DTYPE_BF16, nw, 2);
        void *ha = fill(CGM_DTYPE_BF16, ny / 2, 3);
        void *dx = to_device(hx, nx * 2), *dw = to_device(hw, nw * 2), *da = to_device(ha, ny);
        void *dref, *dours, *dpart, *down;
        GPU_CHECK(cudaMalloc(&dref, ny * 2));
        GPU_CHECK(cudaMalloc(&dours, ny * 2));
        GPU_CHECK(cudaMalloc(&dpart, ny * 2));
        GPU_CHECK(cudaMalloc(&down, ny)); /* the own half */
        unsigned long long one = 1, ready[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        unsigned long long *depoch = to_device(&one, sizeof one), *dready = to_device(ready, sizeof ready), *ddone;
        unsigned int *dcount;
        int *dt;
        GPU_CHECK(cudaMalloc((void **)&dt, sizeof(int)));
        GPU_CHECK(cudaMemset(dt, 0, sizeof(int)));
        GPU_CHECK(cudaMalloc((void **)&ddone, 16 * sizeof *ddone));
        GPU_CHECK(cudaMalloc((void **)&dcount, 16 * sizeof *dcount));
        GPU_CHECK(cudaMemset(ddone, 0, 16 * sizeof *ddone));
        GPU_CHECK(cudaMemset(dcount, 0, 16 * sizeof *dcount));
        int tiles = (int)(m / 128), *ho = malloc((size_t)tiles * sizeof(int)), nt = 0;
        for (int t = tiles / 2; t < tiles; t++) ho[nt++] = t; /* the peer's shard first */
        for (int t = 0; t < tiles / 2; t++) ho[nt++] = t;
        int *dorder = to_device(ho, (size_t)tiles * sizeof(int));
        cgm_hgemm_args a[SINGLE_WHO - 1];
        for (int i = 0; i < SINGLE_WHO - 1; i++) {
            memset(&a[i], 0, sizeof a[i]);
            a[i].in_dtype = a[i].out_dtype = CGM_DTYPE_BF16;
            a[i].m = m, a[i].n = n, a[i].k = k, a[i].x = dx, a[i].ldx = k, a[i].w = dw, a[i].ldw = k;
            a[i].y = dours, a[i].ldy = n;
            if (i == 0) continue;
            a[i].sm_count = prop.multiProcessorCount - 1, a[i].y = dpart;
            a[i].y_own = down, a[i].ldy_own = n, a[i].y_own_row0 = 0, a[i].y_own_rows = half;
            a[i].m_block_order = dorder;
            a[i].done_count = dcount, a[i].done_flags = ddone, a[i].done_shard_rows = half;
            a[i].done_rows_per_piece = rpf, a[i].done_pieces_per_shard = pieces;
            a[i].flag_epoch_ptr = depoch, a[i].rows_per_flag = rpf;
            a[i].wait_timeout_ns = 2000000000ll, a[i].timeout_out = dt;
            if (i != 2) { /* 1: the addend behind its flags, 3: without flags (no wait) */
                a[i].naddends = 1, a[i].addend[0] = da, a[i].addend_dtype = CGM_DTYPE_BF16, a[i].addend_ld = n;
                a[i].addend_flags[0] = i == 1 ? dready : NULL;
            }
            const char *why = NULL;
            if (!cgm_hgemm_supported(&a[i], &why)) TEST_FAIL("%s: cgm_hgemm_supported: %s", tok, why);
        }
        cgm_lt_gemm_args g;
        memset(&g, 0, sizeof g);
        g.layout = CGM_LAYOUT_TN;
        g.in_dtype = g.out_dtype = CGM_DTYPE_BF16;
        g.m = m, g.n = n, g.k = k, g.x = dx, g.ldx = k, g.w = dw, g.ldw = k, g.y = dref, g.ldy = n;
        if (cgm_lt_prepare(lt, &g, ws_bytes, 0, 60000) != CGM_SUCCESS) TEST_FAIL("cgm_lt_prepare: %s", cgm_last_error());
        float t[SINGLE_WHO]; /* cuBLASLt, ours whole, single, single without the addend, without the flags */
        gemm_contenders who = {a, &g, 1, true, lt, ws, ws_bytes};
        time_interleaved(SINGLE_WHO, run_contender, &who, t);
        /* The last run was single without the addend (or another): rerun
         * it, then its partial rows and own rows against cuBLASLt's. */
        GPU_CHECK(cgm_hgemm(&a[2], 0));
        uint16_t *href = malloc(ny * 2), *hpart = malloc(ny * 2), *hown = malloc(ny);
        if (!href || !hpart || !hown) TEST_FAIL("malloc");
        GPU_CHECK(cudaMemcpy(href, dref, ny * 2, cudaMemcpyDeviceToHost));
        GPU_CHECK(cudaMemcpy(hpart, dpart, ny * 2, cudaMemcpyDeviceToHost));
        GPU_CHECK(cudaMemcpy(hown, down, ny, cudaMemcpyDeviceToHost));
        size_t wrong = 0;
        for (size_t i = 0; i < ny; i++) {
            float y = bf16_float(href[i]), x = bf16_float(i < ny / 2 ? hown[i] : hpart[i]);
            if (!(fabsf(x - y) <= fabsf(y) / 128 + 1e-6f * (float)k)) wrong++;
        }
        unsigned long long hd[16];
        GPU_CHECK(cudaMemcpy(hd, ddone, sizeof hd, cudaMemcpyDeviceToHost));
        int unflagged = 0, timed_out = 0; /* the peer shard's pieces (cells pieces..) at the epoch */
        for (int q = 0; q < pieces; q++) unflagged += hd[pieces + q] != 1;
        GPU_CHECK(cudaMemcpy(&timed_out, dt, sizeof(int), cudaMemcpyDeviceToHost));
        if (timed_out) printf("#   an addend flag wait expired (the flags were at the epoch)\n");
        unflagged += timed_out;
        bad += wrong != 0 || unflagged != 0;
        printf("%6lld %6lld %6lld %2d %9.1f %9.1f %9.1f %9.1f %9.1f   %8.3f %11.3f %7.3f %6.3f %6.3f  %s\n", m, n, k,
               pieces, t[0], t[1], t[2], t[3], t[4], t[2] / t[0], t[2] / t[1], t[2] / t[3], t[2] / t[4], t[3] / t[1],
               wrong || unflagged ? "WRONG" : "ok");
        if (wrong) printf("#   %zu of %zu elements differ from cuBLASLt\n", wrong, ny);
        if (unflagged) printf("#   %d of %d done flags of the peer's shard not at the epoch\n", unflagged, pieces);
        trace_one("ours", &a[0]);
        trace_one("single", &a[1]);
        trace_one("single-a", &a[2]);
        trace_one("single-nf", &a[3]);
        cudaFree(dx), cudaFree(dw), cudaFree(da), cudaFree(dref), cudaFree(dours), cudaFree(dpart), cudaFree(down);
        cudaFree(depoch), cudaFree(dready), cudaFree(ddone), cudaFree(dcount), cudaFree(dorder), cudaFree(dt);
        free(hx), free(hw), free(ha), free(ho), free(href), free(hpart), free(hown);
    }
    free(copy);
    printf("# ours: cgm_hgemm unsplit, all SMs; single: the single form's kernel (SMs - 1); single-a: the same without "
           "the addend; single-nf: with the addend but no flags; addend = single / single-a; flags = single / "
           "single-nf; split = single-a / ours%s\n", bad ? "; WRONG" : "; OK");
    return bad ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "bench") == 0) return hopper_bench(argc - 2, argv + 2);
    if (argc > 1 && strcmp(argv[1], "fusedbench") == 0) return fused_bench(argc - 2, argv + 2);
    if (argc > 1 && strcmp(argv[1], "agbench") == 0) return ag_bench(argc - 2, argv + 2);
    if (argc > 1 && strcmp(argv[1], "addendbench") == 0) return addend_bench(argc - 2, argv + 2);
    if (argc > 1 && strcmp(argv[1], "singlebench") == 0) return single_bench(argc - 2, argv + 2);
    if (argc > 1 && strcmp(argv[1], "skbench") == 0) return sk_bench(argc - 2, argv + 2);
    if (argc == 1 && whole_run_skips()) return TEST_SKIP_CODE;
    return test_main(argc, argv, register_cases);
}
