/* commgemm-kernel-bench plain: cgm_hgemm's cooperative, ping-pong and auto
 * variants and cuBLASLt on one GPU (kernel_bench.c has the options and the
 * timing), each checked against the exact product.
 *
 * The check. Inputs are multiples of 1/8 in [-1, 1] (hgemm_values.h), so
 * every product is a multiple of 1/64 of magnitude <= 1 and every partial
 * sum a multiple of 1/64 of magnitude <= k: for k <= 2^18 an fp32
 * accumulator holds every partial sum exactly, in any order, and a correct
 * kernel that accumulates in fp32 returns the exact sum s rounded to the
 * output dtype (round to nearest even) on every element. The bench
 * computes s in double on the host, from the host copies of the inputs,
 * for a sample of each output: one element (at a pseudo-random place) of
 * every 128 x 128 tile, 256 spread over the last row and the last column
 * and their last 32, the four corners, and 4096 uniformly random ones
 * (seeded by the shape; duplicates allowed). Each side is checked against
 * the bound that holds for any fp32-accumulating GEMM, for any inputs,
 * followed by one rounding to the output dtype (unit roundoff u = 2^-8 for
 * bf16, 2^-11 for fp16):
 *   |y - s| <= g a + u (|s| + g a) (+ half of fp16's smallest subnormal),
 *   g = k 2^-24 / (1 - k 2^-24), a = sum |x_l w_l|.
 * A side outside the bound is wrong (or accumulates in less than fp32,
 * e.g. split-k parts rounded to the output dtype). Ours (all three) must
 * also be exactly rounded on every sampled element when k <= 2^18; on the
 * whole output, cooperative and ping-pong must then be bit for bit equal
 * (both exact), and auto bit for bit the variant it chose. cuBLASLt's
 * elements that are not exactly rounded are reported, not counted as
 * wrong while inside the bound.
 *
 * --dtype e4m3: X and W are e4m3 codes of the same values (exact in e4m3),
 * scales 1, Y bf16; cuBLASLt runs its FP8 matmul (scales TENSOR, FAST_ACCUM:
 * the tensor cores accumulate over the whole k, as ours does), on n rounded
 * up to 16 (its fp8 kernels want 16-byte rows; the extra columns are
 * computed and dropped: Y is copied into the checked [m, n] after the
 * timing). Hopper's fp8 MMA adds with fewer bits than fp32, so the bound
 * is that of an accumulator losing up to 2^-13 of the magnitude in each
 * 32-wide k step: g = ceil(k / 32) 2^-13 (docs/FP8.md); exact rounding is
 * reported, not required, and cooperative and ping-pong need not agree bit
 * for bit. --fp8 promote: both sides promote to fp32 (ours fp8_promote,
 * cuBLASLt without FAST_ACCUM); --fp8 block: both take block scales (all
 * 1: the same product), cuBLASLt on m rounded up to 4 as well (its block
 * scaling wants m and n multiples of 4).
 *
 * --split: our three sides get a tail split workspace (kb_split_ws; with
 * --split-parts N, tail_split N); the
 * checks are the same (the split's fp32 sums of these inputs are exact
 * too), and a line under each shape says how many parts each side cut its
 * tail tiles into. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "hgemm_values.h"
#include "kernel_bench.h"

/* ------------------------------------------------------------ the shapes */

/* One shape of the plain bench, the class its summary line groups it in,
 * and a label (the layer it stands for), or "-". */
typedef struct plain_case {
    long long m, n, k;
    const char *cls;
    char label[24];
} plain_case;

/* Without --sweep or --shapes. */
static const long long plain_default[][3] = {{16384, 2048, 8192}, {8192, 4096, 4096},  {16384, 8192, 2048},
                                             {4096, 4096, 4096},  {8192, 8192, 8192},  {2048, 8192, 8192},
                                             {8192, 2048, 4096},  {4096, 16384, 4096}};

/* --sweep's classes other than the layers: m or n not a multiple of the
 * tile (odd ones among them: rows of Y not a multiple of 16 bytes), n just
 * below a multiple of 256, k <= 512, and skinny m (128 to 512 rows). */
static const struct {
    const char *cls;
    long long m, n, k;
} sweep_fixed[] = {
    {"odd", 12345, 1500, 4096}, {"odd", 12344, 1504, 4096}, {"odd", 12345, 3000, 2048},
    {"odd", 10000, 5000, 4096}, {"odd", 7777, 3333, 2048},  {"odd", 4097, 4097, 4096},
    {"odd", 20000, 6000, 3072}, {"below", 8192, 4080, 4096}, {"below", 8192, 8184, 4096},
    {"below", 16384, 2040, 4096}, {"below", 8192, 6136, 2048}, {"below", 4096, 12280, 4096},
    {"below", 16384, 1020, 8192}, {"smallk", 32768, 8192, 512}, {"smallk", 16384, 16384, 256},
    {"smallk", 16384, 8192, 128}, {"smallk", 8192, 28672, 512}, {"smallk", 65536, 4096, 256},
    {"skinny", 128, 8192, 8192}, {"skinny", 128, 28672, 8192}, {"skinny", 256, 16384, 4096},
    {"skinny", 256, 10240, 8192}, {"skinny", 512, 57344, 8192}, {"skinny", 512, 4096, 14336},
};

/* --sweep's layers: hidden size, MLP size, and the QKV projection's
 * output (heads + 2 kv heads, 128 each). Llama-3 8B has 7B's hidden size
 * (its QKV 6144, MLP 14336); Llama-2 70B is Llama-3 70B's shape. */
static const struct {
    const char *name;
    long long hidden, mlp, qkv;
} sweep_models[] = {{"L2-7B", 4096, 11008, 12288}, {"L2-13B", 5120, 13824, 15360}, {"L3-70B", 8192, 28672, 10240}};

#define SWEEP_MAX 64

/* --sweep: sweep_fixed, then per model, layer and tensor-parallel degree
 * tp in {2, 4, 8} the per-rank GEMM: QKV and the fused MLP gate+up split
 * by column (n / tp), the attention output and the MLP down projection by
 * row (k / tp); tokens m rotate over 4096, 8192 and 16384 so that every
 * layer meets each. Returns the count. */
static int sweep_cases(plain_case *out) {
    int count = 0;
    for (size_t i = 0; i < sizeof sweep_fixed / sizeof sweep_fixed[0]; i++, count++) {
        out[count] = (plain_case){sweep_fixed[i].m, sweep_fixed[i].n, sweep_fixed[i].k, sweep_fixed[i].cls, "-"};
    }
    static const long long tokens[3] = {4096, 8192, 16384};
    static const char *const layers[4] = {"qkv", "out", "up", "down"};
    for (int mi = 0; mi < 3; mi++)
        for (int li = 0; li < 4; li++)
            for (int ti = 0; ti < 3; ti++) {
                long long tp = 2 << ti, h = sweep_models[mi].hidden, f = sweep_models[mi].mlp;
                const long long nk[4][2] = {{sweep_models[mi].qkv / tp, h}, {h, h / tp}, {2 * f / tp, h}, {h, f / tp}};
                plain_case *c = &out[count++];
                c->m = tokens[(mi + li + ti) % 3], c->n = nk[li][0], c->k = nk[li][1], c->cls = "layers";
                snprintf(c->label, sizeof c->label, "%s.%s/%lld", sweep_models[mi].name, layers[li], tp);
            }
    return count;
}

/* The shapes of this run: --sweep's, --shapes', or the defaults. */
static int plain_cases(const kb_options *o, plain_case *out) {
    if (o->sweep) return sweep_cases(out);
    int count = o->nshapes ? o->nshapes : (int)(sizeof plain_default / sizeof plain_default[0]);
    for (int i = 0; i < count; i++) {
        const long long *s = o->nshapes ? o->shapes[i] : plain_default[i];
        out[i] = (plain_case){s[0], s[1], s[2], o->nshapes ? "shapes" : "default", "-"};
    }
    return count;
}

/* ------------------------------------------------------------ the inputs */

/* X and W of every shape: the first m k (X, seed 1) and n k (W, seed 2)
 * values of two buffers filled once for the largest shape (hv_value
 * depends on the flat index only), on the host (for the reference) and on
 * the device; and the dtype's 65536 values, for the host's dot products. */
typedef struct plain_inputs {
    cgm_dtype dtype, out;       /* X and W's; Y's (bf16 for fp8) */
    bool fp8;
    unsigned char *hx, *hw;     /* elements of 1 (fp8) or 2 bytes */
    void *dx, *dw;
    float *value, *out_value;   /* value[bits] of an input, out_value[bits] of Y */
    float *scale;               /* fp8: device floats of 1: x_scale [0], w_scale [4] */
    float *block_scale;         /* fp8: device floats of 1, enough for any shape's block scales */
} plain_inputs;

/* Element i of an input buffer, as its bits. */
static unsigned in_bits(const plain_inputs *in, const unsigned char *buf, size_t i) {
    return in->fp8 ? buf[i] : ((const uint16_t *)buf)[i];
}

static void inputs_make(plain_inputs *in, cgm_dtype t, const plain_case *cases, int count) {
    size_t nx = 0, nw = 0;
    for (int i = 0; i < count; i++) {
        size_t x = (size_t)(cases[i].m * cases[i].k), w = (size_t)(cases[i].n * cases[i].k);
        nx = x > nx ? x : nx, nw = w > nw ? w : nw;
    }
    in->dtype = t;
    in->fp8 = t == CGM_DTYPE_FP8_E4M3;
    in->out = in->fp8 ? CGM_DTYPE_BF16 : t;
    in->value = malloc(65536 * sizeof(float)), in->out_value = malloc(65536 * sizeof(float));
    if (!in->value || !in->out_value) kb_die("malloc value tables");
    for (uint32_t b = 0; b < 65536; b++)
        in->out_value[b] = in->out == CGM_DTYPE_BF16 ? hv_bf16_float((uint16_t)b) : hv_fp16_float((uint16_t)b);
    if (!in->fp8) {
        memcpy(in->value, in->out_value, 65536 * sizeof(float));
        in->hx = hv_fill(t, nx, 1), in->hw = hv_fill(t, nw, 2);
        if (!in->hx || !in->hw) kb_die("malloc %zu + %zu inputs", nx, nw);
        in->dx = kb_to_device(in->hx, nx * 2), in->dw = kb_to_device(in->hw, nw * 2);
        return;
    }
    /* fp8: the same values (hv_value), as e4m3 codes; W rows up to n
     * rounded up to 16 for cuBLASLt */
    size_t nw16 = 0, nscales = 0;
    for (int i = 0; i < count; i++) {
        size_t w = (size_t)(((cases[i].n + 15) / 16 * 16) * cases[i].k);
        nw16 = w > nw16 ? w : nw16;
        size_t kb4 = (size_t)((cases[i].k + 511) / 512 * 4);
        size_t sx = (size_t)((cases[i].m + 3) / 4 * 4) * kb4, sw = (size_t)((cases[i].n + 127) / 128 + 1) * kb4;
        nscales = sx > nscales ? sx : nscales, nscales = sw > nscales ? sw : nscales;
        size_t x4 = (size_t)(((cases[i].m + 3) / 4 * 4) * cases[i].k); /* cuBLASLt's rows with --fp8 block */
        nx = x4 > nx ? x4 : nx;
    }
    unsigned char code[17];
    for (int v = 0; v < 17; v++) code[v] = 0;
    for (uint32_t b = 0; b < 256; b++) {
        in->value[b] = cgm_fp8_to_float((uint8_t)b, t);
        double v8 = in->value[b] * 8.0;
        if (v8 == nearbyint(v8) && fabs(v8) <= 8 && !(b & 0x80 && in->value[b] == 0)) code[(int)v8 + 8] = (unsigned char)b;
    }
    in->hx = malloc(nx + 1), in->hw = malloc(nw16 + 1);
    if (!in->hx || !in->hw) kb_die("malloc %zu + %zu inputs", nx, nw16);
    for (size_t i = 0; i < nx; i++) in->hx[i] = code[(int)lrintf(hv_value(1, i) * 8) + 8];
    for (size_t i = 0; i < nw16; i++) in->hw[i] = code[(int)lrintf(hv_value(2, i) * 8) + 8];
    in->dx = kb_to_device(in->hx, nx), in->dw = kb_to_device(in->hw, nw16);
    const float ones[8] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
    in->scale = kb_to_device(ones, sizeof ones); /* x_scale, w_scale at +4: 16-byte aligned for cuBLASLt */
    float *many = malloc(nscales * sizeof(float));
    if (!many) kb_die("malloc %zu scales", nscales);
    for (size_t i = 0; i < nscales; i++) many[i] = 1.0f;
    in->block_scale = kb_to_device(many, nscales * sizeof(float));
    free(many);
}

static void inputs_free(plain_inputs *in) {
    free(in->hx), free(in->hw), free(in->value), free(in->out_value);
    cudaFree(in->dx), cudaFree(in->dw), cudaFree(in->scale), cudaFree(in->block_scale);
}

/* ------------------------------------------------------- the reference */

/* The sampled elements of one shape (at[i] = row * n + column), their
 * exact values, those rounded to the output dtype, and the bound. */
typedef struct plain_ref {
    size_t count;
    int64_t *at;
    double *exact, *rounded, *bound;
    bool exact_expected; /* k <= 2^18: fp32 accumulation is exact */
} plain_ref;

static uint64_t mix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The sample (the file's comment); returns the count, at most cap. */
static size_t sample_points(long long m, long long n, int64_t *at, size_t cap) {
    uint64_t state = (uint64_t)(m * 1000003 + n);
    size_t c = 0;
#define PUT(i, j)                                                                                                     \
    do {                                                                                                              \
        if (c < cap) at[c++] = (int64_t)(i) * n + (j);                                                                \
    } while (0)
    for (long long ti = 0; ti < m; ti += 128)
        for (long long tj = 0; tj < n; tj += 128) {
            long long rows = m - ti < 128 ? m - ti : 128, cols = n - tj < 128 ? n - tj : 128;
            uint64_t r = mix64(&state);
            PUT(ti + (long long)(r % (uint64_t)rows), tj + (long long)((r >> 32) % (uint64_t)cols));
        }
    for (long long s = 0; s < 256; s++) {
        PUT(m - 1, s * (n - 1) / 255);
        PUT(s * (m - 1) / 255, n - 1);
    }
    for (long long s = 1; s <= 32; s++) {
        if (n - s >= 0) PUT(m - 1, n - s);
        if (m - s >= 0) PUT(m - s, n - 1);
    }
    PUT(0, 0);
    PUT(0, n - 1);
    PUT(m - 1, 0);
    PUT(m - 1, n - 1);
    for (int s = 0; s < 4096; s++) {
        uint64_t r = mix64(&state);
        PUT((long long)(r % (uint64_t)m), (long long)(mix64(&state) % (uint64_t)n));
    }
#undef PUT
    return c;
}

/* s rounded to nearest even with p significant bits and no bit below
 * 2^min_exp (fp16's subnormals). */
static double round_to(double s, int p, int min_exp) {
    if (s == 0) return 0;
    int e;
    frexp(s, &e);
    int ulp = e - p < min_exp ? min_exp : e - p;
    return ldexp(nearbyint(ldexp(s, -ulp)), ulp);
}

static void ref_make(plain_ref *r, const plain_inputs *in, long long m, long long n, long long k) {
    size_t cap = (size_t)(((m + 127) / 128) * ((n + 127) / 128)) + 4096 + 600;
    r->at = malloc(cap * sizeof *r->at);
    r->exact = malloc(cap * sizeof(double)), r->rounded = malloc(cap * sizeof(double));
    r->bound = malloc(cap * sizeof(double));
    if (!r->at || !r->exact || !r->rounded || !r->bound) kb_die("malloc %zu samples", cap);
    r->count = sample_points(m, n, r->at, cap);
    r->exact_expected = k <= (1 << 18) && !in->fp8;
    bool bf16 = in->out == CGM_DTYPE_BF16;
    int p = bf16 ? 8 : 11, min_exp = bf16 ? -133 : -24;
    double u = ldexp(1, -p), g = (double)k * ldexp(1, -24) / (1 - (double)k * ldexp(1, -24));
    if (in->fp8) g = (double)((k + 31) / 32) * ldexp(1, -13);
    for (size_t s = 0; s < r->count; s++) {
        size_t x0 = (size_t)(r->at[s] / n) * (size_t)k, w0 = (size_t)(r->at[s] % n) * (size_t)k;
        double sum = 0, abs_sum = 0;
        for (long long l = 0; l < k; l++) {
            double v = (double)in->value[in_bits(in, in->hx, x0 + (size_t)l)] *
                       (double)in->value[in_bits(in, in->hw, w0 + (size_t)l)];
            sum += v, abs_sum += fabs(v);
        }
        r->exact[s] = sum;
        r->rounded[s] = round_to(sum, p, min_exp);
        r->bound[s] = g * abs_sum + u * (fabs(sum) + g * abs_sum) + ldexp(1, min_exp - 1);
    }
}

static void ref_free(plain_ref *r) { free(r->at), free(r->exact), free(r->rounded), free(r->bound); }

/* One side's sampled elements against the reference. */
typedef struct side_check {
    size_t outside, inexact;
    double max_err, worst_ratio; /* max |y - s|; max |y - s| / bound */
    int64_t worst_at;            /* the element of worst_ratio: */
    double worst_got, worst_exact, worst_bound;
} side_check;

static side_check check_side(const plain_ref *r, const plain_inputs *in, const uint16_t *y) {
    side_check c = {0, 0, 0, -1, 0, 0, 0, 0};
    for (size_t s = 0; s < r->count; s++) {
        double v = in->out_value[y[r->at[s]]], err = fabs(v - r->exact[s]), ratio = err / r->bound[s];
        if (!(err <= r->bound[s])) c.outside++;
        if (v != r->rounded[s]) c.inexact++;
        if (err > c.max_err || isnan(err)) c.max_err = err;
        if (ratio > c.worst_ratio || isnan(ratio)) {
            c.worst_ratio = ratio, c.worst_at = r->at[s];
            c.worst_got = v, c.worst_exact = r->exact[s], c.worst_bound = r->bound[s];
        }
    }
    return c;
}

/* ------------------------------------------------------------ one shape */

enum { SIDE_COOP, SIDE_PP, SIDE_AUTO, SIDE_LT, SIDES };
static const char *const side_name[SIDES] = {"cooperative", "ping-pong", "auto", "cuBLASLt"};

/* What one shape measured and found. */
typedef struct plain_result {
    float t[SIDES]; /* µs */
    int chosen;     /* auto's variant */
    side_check check[SIDES];
    size_t coop_pp_differ, ours_lt_differ, samples;
    bool exact_expected, auto_differs, wrong[SIDES];
    size_t split_bytes[3]; /* --split: the split_ws each of our sides wants (0: no split) */
    int split_tile_n[3];   /* their tile width */
} plain_result;

/* Copies Y of side v to host and checks its samples. */
static void fetch_check(void *const *dy, int v, size_t ny, const plain_ref *ref, const plain_inputs *in, uint16_t *h,
                        plain_result *res) {
    KB_CUDA(cudaMemcpy(h, dy[v], ny * 2, cudaMemcpyDeviceToHost));
    res->check[v] = check_side(ref, in, h);
}

static size_t count_differ(const uint16_t *a, const uint16_t *b, size_t count) {
    size_t d = 0;
    for (size_t i = 0; i < count; i++) d += a[i] != b[i];
    return d;
}

/* The checks of one shape's four outputs, two host buffers of Y at a
 * time: coop in ha, ping-pong in hb (whole outputs compared), auto in the
 * buffer of the variant it did not choose (compared with the other), then
 * cuBLASLt in ha against ours in hb. */
static void plain_checks(void *const *dy, size_t ny, const plain_ref *ref, const plain_inputs *in, plain_result *res) {
    uint16_t *ha = malloc(ny * 2), *hb = malloc(ny * 2);
    if (!ha || !hb) kb_die("malloc 2 x %zu bytes", ny * 2);
    fetch_check(dy, SIDE_COOP, ny, ref, in, ha, res);
    fetch_check(dy, SIDE_PP, ny, ref, in, hb, res);
    res->coop_pp_differ = count_differ(ha, hb, ny);
    bool pp = res->chosen == CGM_HGEMM_PINGPONG;
    fetch_check(dy, SIDE_AUTO, ny, ref, in, pp ? ha : hb, res);
    res->auto_differs = memcmp(ha, hb, ny * 2) != 0;
    fetch_check(dy, SIDE_LT, ny, ref, in, ha, res);
    res->ours_lt_differ = count_differ(ha, hb, ny);
    res->samples = ref->count;
    res->exact_expected = ref->exact_expected;
    for (int v = 0; v < SIDES; v++)
        res->wrong[v] = res->check[v].outside > 0 || (v != SIDE_LT && ref->exact_expected && res->check[v].inexact);
    if (ref->exact_expected && res->coop_pp_differ) res->wrong[SIDE_COOP] = res->wrong[SIDE_PP] = true;
    if (res->auto_differs && !in->fp8) res->wrong[SIDE_AUTO] = true;
    free(ha), free(hb);
}

/* Times the four sides of one shape and checks their outputs. */
static void plain_run(const kb_options *o, const plain_inputs *in, const plain_case *c, plain_result *res) {
    size_t ny = (size_t)(c->m * c->n);
    void *dy[SIDES];
    for (int v = 0; v < SIDES; v++) KB_CUDA(cudaMalloc(&dy[v], ny * 2));
    cgm_hgemm_args a[3];
    const int variants[3] = {CGM_HGEMM_COOPERATIVE, CGM_HGEMM_PINGPONG, CGM_HGEMM_AUTO};
    for (int v = 0; v < 3; v++) {
        memset(&a[v], 0, sizeof a[v]);
        a[v].in_dtype = in->dtype, a[v].out_dtype = in->out;
        if (in->fp8) a[v].w_dtype = in->dtype, a[v].x_scale = in->scale, a[v].w_scale = in->scale + 4;
        a[v].fp8_promote = o->fp8_mode == KB_FP8_PROMOTE;
        if (o->fp8_mode == KB_FP8_BLOCK) {
            a[v].x_scale = a[v].w_scale = NULL;
            a[v].x_block_scale = a[v].w_block_scale = in->block_scale;
            a[v].x_block_ld = a[v].w_block_ld = (c->k + 127) / 128;
        }
        a[v].m = c->m, a[v].n = c->n, a[v].k = c->k, a[v].x = in->dx, a[v].ldx = c->k, a[v].w = in->dw;
        a[v].ldw = c->k, a[v].y = dy[v], a[v].ldy = c->n, a[v].variant = variants[v];
        const char *why = NULL;
        if (!cgm_hgemm_supported(&a[v], &why)) kb_die("%lldx%lldx%lld: cgm_hgemm refuses: %s", c->m, c->n, c->k, why);
    }
    res->chosen = cgm_hgemm_variant_for(&a[2]);
    for (int v = 0; v < 3; v++)
        res->split_tile_n[v] = cgm_hgemm_variant_for(&a[v]) == CGM_HGEMM_PINGPONG ? CGM_HGEMM_TILE_N_PINGPONG
                                                                                  : CGM_HGEMM_TILE_N;
    if (o->split) {
        for (int v = 0; v < 3; v++) a[v].tail_split = o->split_parts;
        kb_split_ws(a, 3, res->split_bytes);
    }
    cgm_lt_gemm_args g;
    memset(&g, 0, sizeof g);
    g.layout = CGM_LAYOUT_TN;
    g.in_dtype = in->dtype, g.out_dtype = in->out;
    g.m = c->m, g.n = c->n, g.k = c->k, g.x = in->dx, g.ldx = c->k, g.w = in->dw, g.ldw = c->k;
    g.y = dy[SIDE_LT], g.ldy = c->n, g.reduction_fp32 = o->lt_reduction_fp32;
    void *y16 = NULL; /* fp8: cuBLASLt's Y with n rounded up to 16 (--fp8 block: m to 4) */
    long long n16 = (c->n + 15) / 16 * 16, m4 = o->fp8_mode == KB_FP8_BLOCK ? (c->m + 3) / 4 * 4 : c->m;
    if (in->fp8) {
        g.w_dtype = in->dtype, g.bias_dtype = in->out, g.scaling = CGM_LT_SCALE_TENSOR;
        g.x_scale = in->scale, g.w_scale = in->scale + 4, g.fast_accum = o->fp8_mode == KB_FP8_FAST;
        if (o->fp8_mode == KB_FP8_BLOCK)
            g.scaling = CGM_LT_SCALE_BLOCK, g.x_scale = g.w_scale = in->block_scale, g.m = m4;
        KB_CUDA(cudaMalloc(&y16, (size_t)(m4 * n16) * 2));
        g.n = n16, g.y = y16, g.ldy = n16;
    }
    kb_contenders who = {a, &g, 3, false, o->dynamic};
    kb_time_interleaved(SIDES, &who, res->t);
    KB_CUDA(cudaDeviceSynchronize());
    if (y16) {
        KB_CUDA(cudaMemcpy2D(dy[SIDE_LT], (size_t)c->n * 2, y16, (size_t)n16 * 2, (size_t)c->n * 2, (size_t)c->m,
                             cudaMemcpyDeviceToDevice));
        cudaFree(y16);
    }
    plain_ref ref;
    ref_make(&ref, in, c->m, c->n, c->k);
    plain_checks(dy, ny, &ref, in, res);
    ref_free(&ref);
    for (int v = 0; v < SIDES; v++) cudaFree(dy[v]);
}

/* --split: the parts a side cut its tail tiles into, from the bytes it
 * wanted (the counters, then one fp32 tile per part of each tail tile);
 * 1: no split. */
static int split_parts(const plain_case *c, size_t bytes, int tile_n, int sms) {
    long long tiles = ((c->m + 127) / 128) * ((c->n + tile_n - 1) / tile_n), tail = tiles % sms;
    if (bytes <= CGM_HGEMM_SPLIT_COUNTER_BYTES || tail == 0) return 1;
    return (int)((bytes - CGM_HGEMM_SPLIT_COUNTER_BYTES) / ((size_t)tail * 128 * (size_t)tile_n * 4));
}

/* The lines under a shape's row: each side that is wrong or not exactly
 * rounded, the whole outputs' comparisons that found differences, and
 * with --split the parts of each of our sides. */
static void plain_details(const kb_options *o, const plain_case *c, const plain_result *res, int sms) {
    size_t ny = (size_t)(c->m * c->n);
    if (o->split) {
        int pc = split_parts(c, res->split_bytes[0], res->split_tile_n[0], sms);
        int pp = split_parts(c, res->split_bytes[1], res->split_tile_n[1], sms);
        int pa = split_parts(c, res->split_bytes[2], res->split_tile_n[2], sms);
        printf("#   tail split: parts cooperative %d, ping-pong %d, auto %d (1: none); split_ws %.1f, %.1f, %.1f MiB\n",
               pc, pp, pa, res->split_bytes[0] / 1048576.0, res->split_bytes[1] / 1048576.0,
               res->split_bytes[2] / 1048576.0);
    }
    for (int v = 0; v < SIDES; v++) {
        const side_check *s = &res->check[v];
        if (!res->wrong[v] && !s->inexact) continue;
        printf("#   %-11s %s: %zu of %zu samples outside the bound, %zu not exactly rounded; max |err| %.4g; worst "
               "at (%lld, %lld): got %.9g, exact %.9g, bound %.4g\n",
               side_name[v], res->wrong[v] ? "WRONG" : "inside the bound", s->outside, res->samples, s->inexact,
               s->max_err, (long long)(s->worst_at / c->n), (long long)(s->worst_at % c->n), s->worst_got,
               s->worst_exact, s->worst_bound);
    }
    if (res->coop_pp_differ)
        printf("#   cooperative and ping-pong differ on %zu of %zu elements%s\n", res->coop_pp_differ, ny,
               res->exact_expected ? " (both should be exact: one is wrong)" : "");
    if (res->auto_differs) printf("#   auto: not bit for bit the output of the variant it chose\n");
    if (res->ours_lt_differ)
        printf("#   cuBLASLt and ours differ on %zu of %zu elements (whole outputs, bit for bit)\n",
               res->ours_lt_differ, ny);
}

/* ------------------------------------------------------------ the report */

#define PLAIN_CLASSES 8

/* Per class: r_auto (cuBLASLt time / auto's) and r_best (/ the faster of
 * our two variants) of its shapes. */
typedef struct plain_class {
    const char *name;
    int count, below;
    double min_auto, log_auto, min_best, log_best;
} plain_class;

static void class_add(plain_class *cls, int *ncls, const char *name, double r_auto, double r_best) {
    int i = 0;
    while (i < *ncls && strcmp(cls[i].name, name)) i++;
    if (i == *ncls) {
        if (*ncls == PLAIN_CLASSES) return;
        cls[(*ncls)++] = (plain_class){name, 0, 0, INFINITY, 0, INFINITY, 0};
    }
    plain_class *c = &cls[i];
    c->count++, c->below += r_auto < 0.95;
    c->min_auto = fmin(c->min_auto, r_auto), c->log_auto += log(r_auto);
    c->min_best = fmin(c->min_best, r_best), c->log_best += log(r_best);
}

static void plain_header(const kb_options *o, const struct cudaDeviceProp *prop, int count) {
    printf("# cgm_hgemm (cooperative, ping-pong, auto) vs cuBLASLt, %s in, %s out, TN, %s (sm_%d%d, %d SMs)%s%s%s; "
           "%d shapes; medians of %d interleaved rounds x %d calls\n",
           cgm_dtype_name(o->dtype), o->dtype == CGM_DTYPE_FP8_E4M3 ? "bf16" : cgm_dtype_name(o->dtype), prop->name, prop->major, prop->minor, prop->multiProcessorCount,
           o->dynamic ? ", --dynamic" : "", !o->split ? "" : o->split_parts ? ", --split-parts (tail split forced)" : ", --split (tail split)",
           o->lt_reduction_fp32 ? ", cuBLASLt split-k reduced in fp32 only" : "", count, KB_ROUNDS, KB_CALLS);
    static const char *const fp8_modes[] = {"per-tensor scales, FAST_ACCUM (ours: no promotion)",
                                            "per-tensor scales, promotion (cuBLASLt without FAST_ACCUM)",
                                            "block scales 1x128 and 128x128 of 1, on m rounded up to 4"};
    if (o->dtype == CGM_DTYPE_FP8_E4M3)
        printf("# check: every side against the exact product on a sample of each output (bench/kernel_bench_plain.c): "
               "within |y - s| <= g a + u (|s| + g a), g = ceil(k / 32) 2^-13 (fp8 MMA accumulation), a = sum |x w|, "
               "u = 2^-8; cuBLASLt FP8 with %s, on n rounded up to 16\n",
               fp8_modes[o->fp8_mode]);
    else
        printf("# check: every side against the exact product on a sample of each output (bench/kernel_bench_plain.c): "
               "within |y - s| <= g a + u (|s| + g a), g = k 2^-24 / (1 - k 2^-24), a = sum |x w|, u = %s; ours also "
               "exactly rounded (k <= 2^18: fp32 sums of these inputs are exact)\n",
               o->dtype == CGM_DTYPE_BF16 ? "2^-8" : "2^-11");
    printf("#     m      n      k class  label            coop_us    pp_us  auto_us  cuLt_us autoTF  r_coop   r_pp "
           "r_auto auto  w_coop   w_pp  check\n");
}

static void plain_row(const plain_case *c, const plain_result *r, int sms) {
    double flop = 2.0 * (double)c->m * (double)c->n * (double)c->k;
    long long tm = (c->m + 127) / 128;
    char check[64] = "ok";
    for (int v = 0, at = 0; v < SIDES; v++)
        if (r->wrong[v])
            at += snprintf(check + at, sizeof check - (size_t)at, "%s%s", at ? "," : "WRONG:", side_name[v]);
    printf("%7lld %6lld %6lld %-6s %-15s %8.1f %8.1f %8.1f %8.1f %6.1f  %6.3f %6.3f %6.3f %-4s %6.2f %6.2f  %s\n",
           c->m, c->n, c->k, c->cls, c->label, r->t[0], r->t[1], r->t[2], r->t[3], flop / r->t[2] * 1e-6,
           r->t[3] / r->t[0], r->t[3] / r->t[1], r->t[3] / r->t[2], r->chosen == CGM_HGEMM_PINGPONG ? "pp" : "coop",
           (double)(tm * ((c->n + 255) / 256)) / sms, (double)(tm * ((c->n + 127) / 128)) / sms, check);
}

int kb_plain(const kb_options *o) {
    struct cudaDeviceProp prop;
    if (!kb_device("plain", &prop)) return 77;
    plain_case cases[SWEEP_MAX > KB_MAX_SHAPES ? SWEEP_MAX : KB_MAX_SHAPES];
    int count = plain_cases(o, cases);
    plain_inputs in;
    inputs_make(&in, o->dtype, cases, count);
    plain_header(o, &prop, count);
    plain_class cls[PLAIN_CLASSES];
    int ncls = 0, wrong_shapes[SIDES] = {0};
    for (int i = 0; i < count; i++) {
        plain_result r;
        memset(&r, 0, sizeof r);
        plain_run(o, &in, &cases[i], &r);
        plain_row(&cases[i], &r, prop.multiProcessorCount);
        plain_details(o, &cases[i], &r, prop.multiProcessorCount);
        fflush(stdout);
        for (int v = 0; v < SIDES; v++) wrong_shapes[v] += r.wrong[v];
        class_add(cls, &ncls, cases[i].cls, r.t[3] / r.t[2], r.t[3] / fminf(r.t[0], r.t[1]));
    }
    inputs_free(&in);
    printf("# r_* = cuBLASLt time / ours; coop = cooperative 128x256, pp = ping-pong 128x128, auto = CGM_HGEMM_AUTO "
           "(column auto: the variant it ran); w_* = output tiles / SMs (waves); r_best below = cuBLASLt / the "
           "faster of coop and pp\n");
    for (int i = 0; i < ncls; i++)
        printf("# class %-7s %2d shapes: r_auto min %.3f geomean %.3f, %d below 0.95; r_best min %.3f geomean %.3f\n",
               cls[i].name, cls[i].count, cls[i].min_auto, exp(cls[i].log_auto / cls[i].count), cls[i].below,
               cls[i].min_best, exp(cls[i].log_best / cls[i].count));
    int bad = 0;
    for (int v = 0; v < SIDES; v++) bad += wrong_shapes[v];
    if (!bad) {
        printf("# OK: every side within the bound on every shape\n");
        return 0;
    }
    printf("# FAILED: shapes wrong per side: cooperative %d, ping-pong %d, auto %d, cuBLASLt %d (lines # above)\n",
           wrong_shapes[SIDE_COOP], wrong_shapes[SIDE_PP], wrong_shapes[SIDE_AUTO], wrong_shapes[SIDE_LT]);
    return 1;
}
