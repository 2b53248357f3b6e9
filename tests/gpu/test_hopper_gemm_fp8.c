/* commgemm's own sm_90a GEMM with fp8 operands (per-tensor scaling, with
 * and without promotion, and block scaling):
 * e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3 and e5m2 x e5m2, odd m and n, k
 * not a multiple of the 128-wide fp8 stage, both variants, fp32, bf16 and
 * fp16 Y, bias, accumulate, padded ld, per-shard x scales (shards that do
 * not align with the 128-row tiles), and the fused hooks with fp8: row
 * flags in the shard layout with x_own and a tile order, addends (fp32 and
 * bf16, by TMA and by the consumers) with their flags; and the fp8
 * refusals.
 *
 * The codes are multiples of 1/8 in [-1, 1] (exact in e4m3 and e5m2), the
 * scales powers of two, so the exact result s of every element is known
 * in double (the dequantized operands' dot product, times the scales, plus
 * addends, bias and old Y, all multiples of 1/64 times a power of two).
 * By default the kernel accumulates in the tensor cores over the whole k
 * (as cuBLASLt's FAST_ACCUM: Hopper's fp8 MMA adds with fewer than fp32's
 * bits), so the bound is that of an accumulator that loses up to 2^-13 of
 * the magnitude in each 32-wide k step (docs/FP8.md):
 *   |y - s| <= g a + u (|s| + g a),  g = ceil(k / 32) 2^-13,
 * a = sum over k blocks of the block's scales times sum |x w| (per-tensor:
 * sx sw sum |x w|), u the output's unit roundoff (2^-24 for fp32); the
 * promoting kernels are held to the same bound, and on the big_head
 * operands to the exact fp32 result. The count of elements that are
 * exactly s rounded once is printed. */
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

typedef struct fp8_case {
    cgm_dtype xd, wd, out;
    int64_t m, n, k;
    int64_t pad_x, pad_y;   /* elements added to ldx (a multiple of 16) and ldy */
    int bias, accumulate;
    int64_t shard_rows;     /* x_scale_shard_rows (0: one x scale) */
    int flags;              /* 1: row flags (shard layout) preset, reversed tiles, x_own = shard 1 */
    int naddends;
    cgm_dtype addend_dtype;
    int64_t addend_pad;     /* addend_ld = n + addend_pad (0: the TMA form where aligned) */
    uint64_t seed;
    int scaling;            /* 0 per-tensor, 1 per-tensor with fp8_promote, 2 block scaling */
    int big_head;           /* values exact only with promotion (promote_cases) */
    int tail_split;         /* cgm_hgemm_args.tail_split with a workspace (0: none) */
} fp8_case;

/* The code of v (a multiple of 1/8 in [-1, 1]) in dtype t. */
static uint8_t code_of(double v, cgm_dtype t) {
    for (int c = 0; c < 256; c++)
        if (test_fp8_value(c, t) == v) return (uint8_t)c;
    TEST_FAIL("no %s code for %g", cgm_dtype_name(t), v);
    return 0;
}

/* rows x ld codes of hv_value's values (zero past k), and their values. */
static uint8_t *fp8_fill(cgm_dtype t, int64_t rows, int64_t ld, int64_t k, uint64_t seed, double **vals) {
    uint8_t *codes = calloc((size_t)(rows * ld) + 16, 1);
    double *v = calloc((size_t)(rows * k) + 1, sizeof *v);
    if (!codes || !v) TEST_FAIL("calloc");
    uint8_t table[17];
    for (int i = 0; i < 17; i++) table[i] = code_of((i - 8) / 8.0, t);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            float x = hv_value(seed, (uint64_t)(r * k + j));
            codes[r * ld + j] = table[(int)lrint(x * 8) + 8];
            v[r * k + j] = x;
        }
    *vals = v;
    return codes;
}

static double unit_roundoff(cgm_dtype t) {
    return t == CGM_DTYPE_FP32 ? ldexp(1, -24) : t == CGM_DTYPE_BF16 ? ldexp(1, -8) : ldexp(1, -11);
}

/* promote_cases' operands: X 1 and W 1 in the first half of k (products
 * 1, partial sums up to k / 2), then X 1/8 and W +-1/8 (products +-1/64).
 * Every 128-wide block sums exactly in the tensor cores and every sum of
 * blocks exactly in fp32, so a promoting kernel's fp32 Y is exact; an
 * accumulator that keeps fewer bits than k / 2 * 64 needs drops the small
 * products after the big ones. */
static void fp8_big_head(cgm_dtype xt, cgm_dtype wt, const fp8_case *c, int64_t ld, uint8_t *hx, uint8_t *hw,
                         double *xv, double *wv) {
    uint8_t one_x = code_of(1, xt), eighth_x = code_of(0.125, xt);
    uint8_t one_w = code_of(1, wt), plus_w = code_of(0.125, wt), minus_w = code_of(-0.125, wt);
    for (int64_t r = 0; r < c->m; r++)
        for (int64_t j = 0; j < c->k; j++) {
            int head = j < c->k / 2;
            hx[r * ld + j] = head ? one_x : eighth_x;
            xv[r * c->k + j] = head ? 1 : 0.125;
        }
    for (int64_t r = 0; r < c->n; r++)
        for (int64_t j = 0; j < c->k; j++) {
            int head = j < c->k / 2, plus = hv_value(c->seed + 1, (uint64_t)(r * c->k + j)) >= 0;
            hw[r * ld + j] = head ? one_w : plus ? plus_w : minus_w;
            wv[r * c->k + j] = head ? 1 : plus ? 0.125 : -0.125;
        }
}

typedef struct fp8_data {
    int64_t ldx, ldy, nshards, addend_ld, kb, nb;
    double *xv, *wv;
    float *xs, ws, *xbs, *wbs; /* xbs [m, kb], wbs [nb, kb]: block scaling */
    void *hb, *hy0, *hadd[3];
    void *dx, *dw, *db, *dy, *dxs, *dws, *dxbs, *dwbs, *dadd[3];
} fp8_data;

/* Block scaling's scales: powers of two from 1/4 to 4 that change with the
 * row (or block of n) and the k block. */
static float *fp8_block_scales(int64_t rows, int64_t kb, uint64_t seed) {
    float *v = malloc((size_t)(rows * kb + 1) * sizeof(float));
    if (!v) TEST_FAIL("malloc");
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < kb; b++) v[r * kb + b] = (float)ldexp(1.0, (int)((seed + 3 * r + 5 * b) % 5) - 2);
    return v;
}

static void fp8_data_make(const fp8_case *c, fp8_data *d) {
    memset(d, 0, sizeof *d);
    d->ldx = c->k + c->pad_x, d->ldy = c->n + c->pad_y;
    uint8_t *hx = fp8_fill(c->xd, c->m, d->ldx, c->k, c->seed, &d->xv);
    uint8_t *hw = fp8_fill(c->wd, c->n, d->ldx, c->k, c->seed + 1, &d->wv);
    if (c->big_head) fp8_big_head(c->xd, c->wd, c, d->ldx, hx, hw, d->xv, d->wv);
    d->kb = (c->k + 127) / 128, d->nb = (c->n + 127) / 128;
    if (c->scaling == 2) {
        d->xbs = fp8_block_scales(c->m, d->kb, c->seed + 7);
        d->wbs = fp8_block_scales(d->nb, d->kb, c->seed + 8);
        d->dxbs = to_device(d->xbs, (size_t)(c->m * d->kb) * sizeof(float));
        d->dwbs = to_device(d->wbs, (size_t)(d->nb * d->kb) * sizeof(float));
    }
    d->dx = to_device(hx, (size_t)(c->m * d->ldx));
    d->dw = to_device(hw, (size_t)(c->n * d->ldx));
    free(hx), free(hw);
    d->nshards = c->shard_rows > 0 ? (c->m + c->shard_rows - 1) / c->shard_rows : 1;
    d->xs = malloc((size_t)(d->nshards + 1) * sizeof(float));
    for (int64_t s = 0; s < d->nshards; s++) d->xs[s] = (float)ldexp(1.0, (int)((c->seed + 3 * s) % 4) - 2);
    d->ws = c->seed % 2 ? 2.0f : 0.5f;
    d->dxs = to_device(d->xs, (size_t)d->nshards * sizeof(float));
    d->dws = to_device(&d->ws, sizeof(float));
    if (c->bias) {
        d->hb = fill(c->out, (size_t)c->n, c->seed + 5);
        d->db = to_device(d->hb, (size_t)c->n * hv_size(c->out));
    }
    size_t ybytes = (size_t)(c->m * d->ldy) * hv_size(c->out);
    d->hy0 = fill(c->out, (size_t)(c->m * d->ldy), c->seed + 6);
    d->dy = to_device(d->hy0, ybytes);
    d->addend_ld = c->n + c->addend_pad;
    for (int i = 0; i < c->naddends; i++) {
        d->hadd[i] = fill(c->addend_dtype, (size_t)(c->m * d->addend_ld), c->seed + 10 + (uint64_t)i);
        d->dadd[i] = to_device(d->hadd[i], (size_t)(c->m * d->addend_ld) * hv_size(c->addend_dtype));
    }
}

static void fp8_data_free(const fp8_case *c, fp8_data *d) {
    free(d->xv), free(d->wv), free(d->xs), free(d->hb), free(d->hy0), free(d->xbs), free(d->wbs);
    cudaFree(d->dx), cudaFree(d->dw), cudaFree(d->db), cudaFree(d->dy), cudaFree(d->dxs), cudaFree(d->dws);
    cudaFree(d->dxbs), cudaFree(d->dwbs);
    for (int i = 0; i < c->naddends; i++) free(d->hadd[i]), cudaFree(d->dadd[i]);
}

typedef struct fp8_tally {
    int64_t checked, exact;
    double worst;
} fp8_tally;

/* Checks row i of Y (host copy) against the exact result. */
static void fp8_check_row(const fp8_case *c, const fp8_data *d, const void *hy, int64_t i, const char *what,
                          fp8_tally *t) {
    double u = unit_roundoff(c->out), g = (double)((c->k + 31) / 32) * ldexp(1, -13);
    double xs = d->xs[c->shard_rows > 0 ? i / c->shard_rows : 0], sx = xs * (double)d->ws;
    for (int64_t j = 0; j < c->n; j++) {
        double s = 0, a = 0;
        for (int64_t b = 0; b < d->kb; b++) { /* per k block: block scaling's scales, else sx */
            double dot = 0, mag = 0;
            for (int64_t l = 128 * b; l < c->k && l < 128 * (b + 1); l++) {
                double p = d->xv[i * c->k + l] * d->wv[j * c->k + l];
                dot += p, mag += fabs(p);
            }
            double sb = c->scaling == 2 ? (double)d->xbs[i * d->kb + b] * d->wbs[(j / 128) * d->kb + b] : sx;
            s += sb * dot, a += sb * mag;
        }
        for (int q = 0; q < c->naddends; q++)
            s += hv_get(d->hadd[q], c->addend_dtype, (size_t)(i * d->addend_ld + j));
        if (c->bias) s += hv_get(d->hb, c->out, (size_t)j);
        if (c->accumulate) s += hv_get(d->hy0, c->out, (size_t)(i * d->ldy + j));
        double y = hv_get(hy, c->out, (size_t)(i * d->ldy + j));
        double err = fabs(y - s), tol = g * a + u * (fabs(s) + g * a);
        if (!(err <= tol))
            TEST_FAIL("%s: Y[%lld, %lld] = %.9g, exact %.9g (|err| %.3g > bound %.3g; x scale %g, w scale %g)", what,
                      (long long)i, (long long)j, y, s, err, tol, xs, (double)d->ws);
        if (c->big_head && c->scaling && c->out == CGM_DTYPE_FP32 && y != s)
            TEST_FAIL("%s: Y[%lld, %lld] = %.9g, exact %.9g: the promoted sum must be exact here", what, (long long)i,
                      (long long)j, y, s);
        if (a > 0 && err / a > t->worst) t->worst = err / a;
        t->checked++;
        t->exact += y == round_out(s, c->out);
    }
}

/* Every row up to 2^24 multiply-adds of reference, else every 7th and the
 * last; all columns. */
static void fp8_check(const fp8_case *c, const fp8_data *d, const void *hy, const char *what) {
    int64_t step = c->m * c->n * c->k <= ((int64_t)1 << 24) ? 1 : 7;
    fp8_tally t = {0, 0, 0};
    for (int64_t i = 0; i < c->m; i += step) fp8_check_row(c, d, hy, i, what, &t);
    if ((c->m - 1) % step) fp8_check_row(c, d, hy, c->m - 1, what, &t);
    printf("  %s: %lld elements within the bound, %lld exactly rounded, max |err| / a = %.3g\n", what,
           (long long)t.checked, (long long)t.exact, t.worst);
}

/* Row flags in the shard layout (shards of shard_rows rows, 2 flags each),
 * all at the epoch; the m tiles in reverse order; x_own = shard 1's rows. */
typedef struct fp8_flags {
    unsigned long long *flags;
    int *order, *timeout;
} fp8_flags;

static void fp8_flags_set(const fp8_case *c, const fp8_data *d, cgm_hgemm_args *a, fp8_flags *f) {
    int64_t sr = c->shard_rows, per = 2, nshards = d->nshards;
    unsigned long long *hf = malloc((size_t)(nshards * per) * 8);
    for (int64_t i = 0; i < nshards * per; i++) hf[i] = 5;
    f->flags = to_device(hf, (size_t)(nshards * per) * 8);
    free(hf);
    int64_t tiles = (c->m + 127) / 128;
    int *ho = malloc((size_t)tiles * sizeof(int));
    for (int64_t t = 0; t < tiles; t++) ho[t] = (int)(tiles - 1 - t);
    f->order = to_device(ho, (size_t)tiles * sizeof(int));
    free(ho);
    GPU_CHECK(cudaMalloc((void **)&f->timeout, sizeof(int)));
    GPU_CHECK(cudaMemset(f->timeout, 0, sizeof(int)));
    a->row_flags = f->flags, a->rows_per_flag = (sr + 1) / 2, a->flag_shard_rows = sr, a->flag_shard_stride = per;
    a->flag_epoch = 5, a->wait_timeout_ns = 2000000000ll, a->timeout_out = f->timeout, a->m_block_order = f->order;
    if (nshards > 1) { /* shard 1's rows read in place from a second buffer */
        int64_t rows = sr < c->m - sr ? sr : c->m - sr;
        a->x_own = (const uint8_t *)d->dx + sr * d->ldx, a->ldx_own = d->ldx, a->own_row0 = sr, a->own_rows = rows;
    }
}

static void fp8_run(const fp8_case *c) {
    require_sm90();
    fp8_data d;
    fp8_data_make(c, &d);
    size_t ybytes = (size_t)(c->m * d.ldy) * hv_size(c->out);
    void *hy = malloc(ybytes);
    unsigned long long *aflags = NULL;
    if (c->naddends) {
        unsigned long long hf[64];
        for (int i = 0; i < 64; i++) hf[i] = 9;
        aflags = to_device(hf, sizeof hf);
    }
    for (int v = CGM_HGEMM_COOPERATIVE; v <= CGM_HGEMM_PINGPONG; v++) {
        cgm_hgemm_args a;
        memset(&a, 0, sizeof a);
        a.in_dtype = c->xd, a.w_dtype = c->wd, a.out_dtype = c->out;
        a.m = c->m, a.n = c->n, a.k = c->k, a.x = d.dx, a.ldx = d.ldx, a.w = d.dw, a.ldw = d.ldx;
        a.y = d.dy, a.ldy = d.ldy, a.bias = d.db, a.accumulate = c->accumulate, a.variant = v;
        a.x_scale = d.dxs, a.w_scale = d.dws, a.x_scale_shard_rows = c->shard_rows;
        a.fp8_promote = c->scaling == 1;
        if (c->scaling == 2) {
            a.x_scale = a.w_scale = NULL;
            a.x_block_scale = d.dxbs, a.x_block_ld = d.kb, a.w_block_scale = d.dwbs, a.w_block_ld = d.kb;
        }
        fp8_flags f = {NULL, NULL, NULL};
        if (c->flags) fp8_flags_set(c, &d, &a, &f);
        a.naddends = c->naddends, a.addend_dtype = c->addend_dtype, a.addend_ld = d.addend_ld;
        for (int i = 0; i < c->naddends; i++) {
            a.addend[i] = d.dadd[i], a.addend_flags[i] = aflags;
            a.rows_per_flag = c->flags ? a.rows_per_flag : 64;
            a.flag_epoch = 5; /* the addend flags hold 9 */
            if (!a.timeout_out) {
                GPU_CHECK(cudaMalloc((void **)&f.timeout, sizeof(int)));
                GPU_CHECK(cudaMemset(f.timeout, 0, sizeof(int)));
                a.timeout_out = f.timeout;
            }
        }
        if (c->flags && c->naddends && (c->m + a.rows_per_flag - 1) / a.rows_per_flag > 64)
            TEST_FAIL("the case needs more than 64 addend flags");
        void *ws = NULL;
        if (c->tail_split) {
            a.tail_split = c->tail_split;
            size_t bytes = cgm_hgemm_split_ws_bytes(&a);
            if (!bytes) TEST_FAIL("tail_split %d: cgm_hgemm_split_ws_bytes is 0 (no split)", c->tail_split);
            GPU_CHECK(cudaMalloc(&ws, bytes));
            GPU_CHECK(cudaMemset(ws, 0, bytes));
            a.split_ws = ws, a.split_ws_bytes = bytes;
        }
        const char *why = NULL;
        if (!cgm_hgemm_supported(&a, &why)) TEST_FAIL("cgm_hgemm_supported: %s", why);
        GPU_CHECK(cudaMemcpy(d.dy, d.hy0, ybytes, cudaMemcpyHostToDevice));
        GPU_CHECK(cgm_hgemm(&a, 0));
        GPU_CHECK(cudaDeviceSynchronize());
        if (f.timeout) {
            int t = 0;
            GPU_CHECK(cudaMemcpy(&t, f.timeout, sizeof t, cudaMemcpyDeviceToHost));
            if (t) TEST_FAIL("flags preset to the epoch, but timeout_out = %d", t);
        }
        GPU_CHECK(cudaMemcpy(hy, d.dy, ybytes, cudaMemcpyDeviceToHost));
        char what[200];
        snprintf(what, sizeof what, "%s x %s -> %s, %lldx%lldx%lld, %s%s%s%s%s", cgm_dtype_name(c->xd),
                 cgm_dtype_name(c->wd), cgm_dtype_name(c->out), (long long)c->m, (long long)c->n, (long long)c->k,
                 variant_name(v), c->bias ? ", bias" : "", c->accumulate ? ", accumulate" : "",
                 c->shard_rows ? ", shard scales" : "", c->flags ? ", row flags + x_own" : "");
        if (c->scaling)
            snprintf(what + strlen(what), sizeof what - strlen(what), "%s",
                     c->scaling == 1 ? ", promoted" : ", block scales");
        if (c->naddends)
            snprintf(what + strlen(what), sizeof what - strlen(what), ", %d %s addends (ld %lld)", c->naddends,
                     cgm_dtype_name(c->addend_dtype), (long long)d.addend_ld);
        if (c->tail_split)
            snprintf(what + strlen(what), sizeof what - strlen(what), ", tail split in %d", c->tail_split);
        fp8_check(c, &d, hy, what);
        cudaFree(f.flags), cudaFree(f.order), cudaFree(f.timeout), cudaFree(ws);
    }
    cudaFree(aflags);
    free(hy);
    fp8_data_free(c, &d);
}

#define E4 CGM_DTYPE_FP8_E4M3
#define E5 CGM_DTYPE_FP8_E5M2

/* Odd m and n, k not a multiple of 128 (and k = 16), padded ldx and ldy,
 * every operand pair, fp32, bf16 and fp16 Y, bias, accumulate. */
static const fp8_case plain_cases[] = {
    {E4, E4, CGM_DTYPE_FP32, 257, 389, 272, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0},
    {E4, E4, CGM_DTYPE_BF16, 1, 1, 16, 0, 1, 1, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0},
    {E4, E5, CGM_DTYPE_FP32, 131, 250, 1040, 0, 3, 0, 1, 0, 0, 0, 0, 0, 3, 0, 0, 0},
    {E5, E4, CGM_DTYPE_BF16, 300, 129, 16, 32, 0, 1, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0},
    {E5, E4, CGM_DTYPE_FP16, 129, 511, 400, 0, 1, 1, 1, 0, 0, 0, 0, 0, 5, 0, 0, 0},
    {E5, E5, CGM_DTYPE_FP32, 200, 300, 144, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0},
    {E4, E4, CGM_DTYPE_BF16, 640, 1024, 4096, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0},
    {E4, E5, CGM_DTYPE_BF16, 1000, 777, 2064, 16, 2, 0, 1, 0, 0, 0, 0, 0, 8, 0, 0, 0},
};

/* Per-shard x scales: shards of 100 and 200 rows (tiles of 128 rows hold
 * two or three shards), and a shard size above m (one scale). */
static const fp8_case shard_cases[] = {
    {E4, E4, CGM_DTYPE_BF16, 517, 300, 256, 0, 0, 1, 1, 100, 0, 0, 0, 0, 11, 0, 0, 0},
    {E4, E5, CGM_DTYPE_FP32, 600, 257, 528, 0, 1, 0, 0, 200, 0, 0, 0, 0, 12, 0, 0, 0},
    {E5, E4, CGM_DTYPE_FP32, 77, 96, 128, 0, 0, 1, 0, 1000, 0, 0, 0, 0, 13, 0, 0, 0},
};

/* The fused hooks with fp8: row flags in the shard layout with x_own and a
 * reversed tile order (shard scales); addends with their flags, by TMA
 * (addend_ld = n, 16-byte rows) and by the consumers (n + 2). */
static const fp8_case hook_cases[] = {
    {E4, E4, CGM_DTYPE_BF16, 600, 384, 512, 0, 0, 1, 0, 150, 1, 0, 0, 0, 21, 0, 0, 0},
    {E4, E5, CGM_DTYPE_FP32, 513, 256, 272, 0, 0, 0, 1, 256, 1, 0, 0, 0, 22, 0, 0, 0},
    {E4, E4, CGM_DTYPE_BF16, 300, 264, 256, 0, 0, 1, 0, 0, 0, 1, CGM_DTYPE_FP32, 0, 23, 0, 0, 0},
    {E5, E4, CGM_DTYPE_BF16, 300, 264, 256, 0, 0, 1, 0, 0, 0, 3, CGM_DTYPE_BF16, 0, 24, 0, 0, 0},
    {E4, E4, CGM_DTYPE_FP32, 257, 200, 160, 0, 0, 0, 0, 0, 0, 3, CGM_DTYPE_FP32, 2, 25, 0, 0, 0},
    {E4, E5, CGM_DTYPE_BF16, 640, 512, 1024, 0, 0, 1, 0, 128, 1, 2, CGM_DTYPE_BF16, 0, 26, 0, 0, 0},
};

/* Promotion (fp8_promote, per-tensor scales) and block scaling: odd m
 * and n, k not a multiple of 128, both variants, bias, accumulate, shard
 * scales, the hooks (row flags + x_own, addends by the consumers); and the
 * operands whose fp32 Y only a promoting kernel gets exact (big_head,
 * k = 4096), with per-tensor scales and with block scales. k blocks of 1
 * to 35: the ping-pong kernel's groups of 4 whole and cut after 1, 2 and
 * 3 blocks, W's block scales past their first 32 (k = 4480); and the
 * tail split forced on both (parts that start inside a group of 4 and
 * inside W's chunks of 32). */
static const fp8_case promote_cases[] = {
    {E4, E4, CGM_DTYPE_FP32, 257, 389, 272, 0, 0, 0, 0, 0, 0, 0, 0, 0, 31, 1, 0, 0},
    {E4, E5, CGM_DTYPE_BF16, 1000, 777, 2064, 16, 2, 1, 1, 300, 0, 0, 0, 0, 32, 1, 0, 0},
    {E5, E4, CGM_DTYPE_FP16, 129, 511, 400, 0, 1, 1, 1, 0, 0, 0, 0, 0, 33, 1, 0, 0},
    {E4, E4, CGM_DTYPE_BF16, 600, 384, 512, 0, 0, 1, 0, 150, 1, 2, CGM_DTYPE_BF16, 0, 34, 1, 0, 0},
    {E4, E4, CGM_DTYPE_FP32, 133, 259, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0, 35, 1, 1, 0},
    {E4, E4, CGM_DTYPE_FP32, 133, 259, 4096, 0, 0, 0, 0, 0, 0, 0, 0, 0, 36, 2, 1, 0},
    {E4, E4, CGM_DTYPE_FP32, 1000, 700, 4224, 0, 0, 1, 0, 0, 0, 0, 0, 0, 37, 1, 0, 2},
};
static const fp8_case block_cases[] = {
    {E4, E4, CGM_DTYPE_FP32, 257, 389, 272, 0, 0, 0, 0, 0, 0, 0, 0, 0, 41, 2, 0, 0},
    {E4, E4, CGM_DTYPE_BF16, 1, 1, 16, 0, 1, 1, 1, 0, 0, 0, 0, 0, 42, 2, 0, 0},
    {E4, E5, CGM_DTYPE_FP32, 131, 250, 1040, 0, 3, 0, 1, 0, 0, 0, 0, 0, 43, 2, 0, 0},
    {E5, E4, CGM_DTYPE_BF16, 300, 129, 16, 32, 0, 1, 0, 0, 0, 0, 0, 0, 44, 2, 0, 0},
    {E4, E4, CGM_DTYPE_BF16, 640, 1024, 4096, 0, 0, 1, 0, 0, 0, 0, 0, 0, 45, 2, 0, 0},
    {E4, E5, CGM_DTYPE_BF16, 600, 384, 512, 0, 0, 1, 0, 150, 1, 0, 0, 0, 46, 2, 0, 0},
    {E4, E4, CGM_DTYPE_FP32, 257, 200, 160, 0, 0, 0, 0, 0, 0, 3, CGM_DTYPE_FP32, 2, 47, 2, 0, 0},
    {E4, E4, CGM_DTYPE_BF16, 131, 389, 4480, 0, 0, 1, 0, 0, 0, 0, 0, 0, 48, 2, 0, 0},
    {E5, E4, CGM_DTYPE_FP32, 1000, 700, 4480, 0, 0, 0, 1, 0, 0, 0, 0, 0, 49, 2, 0, 3},
};

typedef struct fp8_list {
    const fp8_case *cases;
    int count;
} fp8_list;
#define FP8_LIST(a) {a, (int)(sizeof a / sizeof a[0])}
static const fp8_list plain_list = FP8_LIST(plain_cases), shard_list = FP8_LIST(shard_cases),
                      hook_list = FP8_LIST(hook_cases), promote_list = FP8_LIST(promote_cases),
                      block_list = FP8_LIST(block_cases);

static void case_fp8_list(const void *p) {
    const fp8_list *l = p;
    for (int i = 0; i < l->count; i++) fp8_run(&l->cases[i]);
}

/* What cgm_hgemm refuses with fp8 inputs, with reasons (host checks). */
static void case_fp8_refusals(const void *p) {
    (void)p;
    require_sm90();
    void *buf;
    GPU_CHECK(cudaMalloc(&buf, 1 << 20));
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = E4, a.w_dtype = E5, a.out_dtype = CGM_DTYPE_BF16;
    a.m = 64, a.n = 64, a.k = 64, a.x = buf, a.ldx = 64, a.w = buf, a.ldw = 64, a.y = buf, a.ldy = 64;
    a.x_scale = (const float *)buf, a.w_scale = (const float *)buf;
    const char *why = NULL;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 1);
    a.k = 56;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "k a multiple of 16");
    CHECK_INT_EQ(cgm_hgemm(&a, 0), cudaErrorInvalidValue);
    a.k = 48, a.ldx = 56;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "multiples of 16 (fp8)");
    a.ldx = 64, a.w_dtype = CGM_DTYPE_BF16;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "w_dtype must be");
    a.w_dtype = E4, a.w_scale = NULL;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "need x_scale and w_scale");
    a.w_scale = (const float *)((char *)buf + 2);
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "4-byte aligned");
    a.w_scale = (const float *)buf, a.x_scale_shard_rows = -1;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "x_scale_shard_rows");
    a.x_scale_shard_rows = 0, a.fp8_promote = 2;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "fp8_promote must be 0 or 1");
    a.fp8_promote = 1, a.x_block_scale = (const float *)buf; /* block scaling: both, instead of per-tensor */
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "needs both x_block_scale and w_block_scale");
    a.w_block_scale = (const float *)buf, a.x_block_ld = a.w_block_ld = 1;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "instead of x_scale and w_scale");
    a.x_scale = a.w_scale = NULL, a.k = a.ldx = a.ldw = 256; /* 2 k blocks: a block ld of 1 is short */
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, ">= ceil(k / 128)");
    a.x_block_ld = a.w_block_ld = 2, a.w_block_scale = (const float *)((char *)buf + 2);
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "4-byte aligned");
    a.w_block_scale = (const float *)buf;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 1);
    a.k = 48, a.x_block_scale = a.w_block_scale = NULL, a.fp8_promote = 0;
    a.x_scale = a.w_scale = (const float *)buf;
    a.epilogue = CGM_EPILOGUE_GELU; /* the fused epilogues are 16-bit only */
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "the fused epilogue takes bf16 or fp16 inputs");
    a.epilogue = CGM_EPILOGUE_NONE, a.out_dtype = E4;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "output must be bf16, fp16 or fp32");
    a.out_dtype = CGM_DTYPE_FP32, a.in_dtype = a.w_dtype = CGM_DTYPE_BF16;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "for fp8 inputs");
    a.x_scale = a.w_scale = NULL, a.fp8_promote = 1;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 0);
    CHECK_CONTAINS(why, "fp8_promote is for fp8 inputs");
    a.fp8_promote = 0;
    CHECK_INT_EQ(cgm_hgemm_supported(&a, &why), 1);
    cudaFree(buf);
}

void hgemm_register_fp8_cases(void) {
    test_set_timeout(300);
    test_add("fp8_plain", case_fp8_list, &plain_list);
    test_add("fp8_shard_scales", case_fp8_list, &shard_list);
    test_add("fp8_hooks", case_fp8_list, &hook_list);
    test_add("fp8_promote", case_fp8_list, &promote_list);
    test_add("fp8_block", case_fp8_list, &block_list);
    test_set_timeout(60);
    test_add("fp8_refusals", case_fp8_refusals, NULL);
}
