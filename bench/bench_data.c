/* Generated inputs and the reference check. Every element of every logical
 * tensor is a function of (seed, tensor, row, column), so each rank builds
 * its own shards and checks its own outputs without any exchange. */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

/* Multiply-adds one rank may spend checking one output. */
#define CHECK_BUDGET ((int64_t)1 << 25)
/* Doubles kept for the sampled rows (and again for the columns). */
#define SAMPLE_BUDGET ((int64_t)1 << 22)
#define MAX_PRINTED 5

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

double bench_value(uint64_t seed, int tensor, int64_t row, int64_t col) {
    uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)tensor);
    h = mix64(h ^ ((uint64_t)row * 0xd1b54a32d192ed03ull));
    h = mix64(h + (uint64_t)col);
    return (double)((int)(h % 17) - 8) / 8.0;
}

/* ---- bf16 / fp16 conversions (the library's own are internal) ---- */

static float bits_to_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint32_t float_to_bits(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static float bf16_to_float(uint16_t v) { return bits_to_float((uint32_t)v << 16); }

static uint16_t float_to_bf16(float f) {
    uint32_t bits = float_to_bits(f);
    if (f != f) return (uint16_t)((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(bits >> 16);
}

static float fp16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    int exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) /* zero or subnormal: mant * 2^-24 */
        return (sign ? -1.0f : 1.0f) * (float)mant * 5.9604644775390625e-8f;
    return bits_to_float(sign | ((uint32_t)(exp - 15 + 127) << 23) | (mant << 13));
}

static uint16_t float_to_fp16(float f) {
    uint16_t sign = (uint16_t)((float_to_bits(f) >> 16) & 0x8000u);
    float a = fabsf(f);
    if (a != a) return (uint16_t)(sign | 0x7e00u);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u);
    if (a < 6.103515625e-05f) /* subnormal: units of 2^-24, nearest even */
        return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f));
    uint32_t bits = float_to_bits(a);
    uint32_t exp = (bits >> 23) - 127 + 15, mant = bits & 0x7fffffu;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

double bench_load(const void *data, cgm_dtype dtype, int64_t i) {
    switch (dtype) {
    case CGM_DTYPE_FP32: return ((const float *)data)[i];
    case CGM_DTYPE_BF16: return bf16_to_float(((const uint16_t *)data)[i]);
    case CGM_DTYPE_FP16: return fp16_to_float(((const uint16_t *)data)[i]);
    default: return NAN;
    }
}

void bench_store(void *data, cgm_dtype dtype, int64_t i, double v) {
    switch (dtype) {
    case CGM_DTYPE_FP32: ((float *)data)[i] = (float)v; break;
    case CGM_DTYPE_BF16: ((uint16_t *)data)[i] = float_to_bf16((float)v); break;
    case CGM_DTYPE_FP16: ((uint16_t *)data)[i] = float_to_fp16((float)v); break;
    default: break;
    }
}

void bench_fill(void *host, cgm_dtype dtype, uint64_t seed, int tensor,
                int64_t row0, int64_t rows, int64_t col0, int64_t cols,
                int transposed) {
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            int64_t at = transposed ? j * rows + i : i * cols + j;
            bench_store(host, dtype, at, bench_value(seed, tensor, row0 + i, col0 + j));
        }
}

void bench_poison(void *host, cgm_dtype dtype, int64_t count) {
    if (count > 0) memset(host, 0xff, (size_t)count * cgm_dtype_size(dtype));
}

/* ---- fp8 inputs ---- */

/* The e4m3 code of v, exact in e4m3 (a generated value over a power-of-two
 * scale: at most 16 in magnitude, a multiple of 1/128). */
static uint8_t e4m3_of(double v) {
    uint8_t sign = v < 0 ? 0x80 : 0;
    double a = fabs(v);
    if (a == 0) return sign;
    int e = 0;
    (void)frexp(a, &e); /* a = 1.m * 2^(e - 1) */
    e -= 1;
    if (e < -6) return (uint8_t)(sign | (uint8_t)lrint(ldexp(a, 9))); /* subnormal */
    int man = (int)lrint(ldexp(a, 3 - e)) - 8;
    return (uint8_t)(sign | ((e + 7) << 3) | man);
}

/* X: TENSOR 1/16, BLOCK_1X128 2^-((i + j / 128) % 4); W: TENSOR 1/8,
 * BLOCK_128X128 2^-((i / 128 + j / 128) % 4), (i, j) of the stored block. */
static float fp8_scale(cgm_scaling scaling, int tensor, int64_t i, int64_t j) {
    if (scaling == CGM_SCALING_TENSOR) return tensor == BENCH_TENSOR_X ? 0.0625f : 0.125f;
    int64_t e = tensor == BENCH_TENSOR_X ? (i + j / 128) % 4 : (i / 128 + j / 128) % 4;
    return ldexpf(1.0f, -(int)e);
}

int64_t bench_fp8_scale_count(cgm_scaling scaling, int64_t rows, int64_t cols) {
    int64_t kb = (cols + 127) / 128;
    if (scaling == CGM_SCALING_TENSOR) return 1;
    if (scaling == CGM_SCALING_BLOCK_1X128) return rows * kb;
    return (rows + 127) / 128 * kb;
}

void bench_fill_fp8(void *host, float *scales, cgm_scaling scaling, uint64_t seed,
                    int tensor, int64_t row0, int64_t rows, int64_t col0,
                    int64_t cols) {
    /* X takes 1 x 128 blocks, W 128 x 128 ones */
    cgm_scaling mine = scaling == CGM_SCALING_TENSOR ? scaling
                       : tensor == BENCH_TENSOR_X    ? CGM_SCALING_BLOCK_1X128
                                                     : CGM_SCALING_BLOCK_128X128;
    int64_t kb = (cols + 127) / 128;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float s = fp8_scale(mine, tensor, i, j);
            double v = bench_value(seed, tensor, row0 + i, col0 + j) / s;
            ((uint8_t *)host)[i * cols + j] = e4m3_of(v);
            if (mine == CGM_SCALING_TENSOR) scales[0] = s;
            else if (mine == CGM_SCALING_BLOCK_1X128) scales[i * kb + j / 128] = s;
            else scales[(i / 128) * kb + j / 128] = s;
        }
    if (mine == CGM_SCALING_TENSOR) scales[0] = fp8_scale(mine, tensor, 0, 0);
}

/* ---- checking ---- */

static double tolerance(cgm_dtype dtype, int64_t k, double ref,
                        int rounded_partials) {
    double eps = dtype == CGM_DTYPE_BF16   ? 1.0 / 256
                 : dtype == CGM_DTYPE_FP16 ? 1.0 / 2048
                                           : 1.0 / 8388608;
    /* One rounding of the result, plus roundings of partial sums (per rank
     * or per chunk), which grow like sqrt(k) for these inputs. Partials
     * that travel in the output dtype (--partials output) are
     * each rounded once more, by half an ulp of a partial's size, which
     * for these inputs is at most about |ref| + sqrt(k). */
    return 2 * eps * fmax(1.0, fabs(ref)) + eps * sqrt((double)k) * 0.5 +
           rounded_partials * eps * 0.5 * (fabs(ref) + sqrt((double)k));
}

/* count evenly spread indices in [0, total), first and last included. */
static int64_t sample_index(int64_t t, int64_t count, int64_t total) {
    if (count <= 1 || count >= total) return count >= total ? t : 0;
    return t * (total - 1) / (count - 1);
}

static void report(const char *what, int64_t printed, int64_t row, int64_t col,
                   double got, double want, double tol) {
    if (printed < MAX_PRINTED)
        fprintf(stderr, "commgemm-bench: %s: wrong value at (%" PRId64 ", %" PRId64
                "): got %.9g, expected %.9g (tolerance %.3g)\n",
                what, row, col, got, want, tol);
}

/* GELU's tanh form and its derivative, in double. */
static double gelu(double t) {
    const double c = 0.7978845608028654;
    return 0.5 * t * (1 + tanh(c * (t + 0.044715 * t * t * t)));
}

static double dgelu(double t) {
    const double c = 0.7978845608028654;
    double th = tanh(c * (t + 0.044715 * t * t * t));
    return 0.5 * (1 + th) + 0.5 * t * (1 - th * th) * c * (1 + 3 * 0.044715 * t * t);
}

double bench_bias_value(uint64_t seed, int64_t col) {
    return bench_value(seed, BENCH_TENSOR_BIAS, 0, col);
}

double bench_aux_value(uint64_t seed, cgm_dtype dtype, int64_t row, int64_t col) {
    unsigned char stored[4];
    bench_store(stored, dtype, 0, 2.5 * bench_value(seed, BENCH_TENSOR_MISC, row, col));
    return bench_load(stored, dtype, 0);
}

/* What the epilogue makes of r at global (row, col), and the slope that
 * scales r's tolerance; GELU_AUX's aux checked against r on the way. */
static double apply_epilogue(const bench_epilogue_check *e, uint64_t seed, double r, int64_t row, int64_t col,
                             double *slope) {
    *slope = 1;
    if (!e) return r;
    switch (e->epilogue) {
    case CGM_EPILOGUE_GELU:
    case CGM_EPILOGUE_GELU_AUX: *slope = 1.2; return gelu(r);
    case CGM_EPILOGUE_DGELU:
    case CGM_EPILOGUE_DGELU_BGRAD: {
        double d = dgelu(bench_aux_value(seed, e->aux_dtype, row, col));
        *slope = fabs(d);
        return r * d;
    }
    default: return r;
    }
}

int64_t bench_check_gemm(const void *y, cgm_dtype dtype, uint64_t seed,
                         int64_t row0, int64_t rows, int64_t col0,
                         int64_t n_cols, int64_t k, int rounded_partials,
                         const bench_epilogue_check *epi, const char *what) {
    if (rows <= 0 || n_cols <= 0) return 0;
    int64_t rs = rows, cs = n_cols, per = k > 0 ? k : 1;
    while ((rs > 1 || cs > 1) && rs * cs * per > CHECK_BUDGET) {
        if (rs >= cs) rs = (rs + 1) / 2;
        else cs = (cs + 1) / 2;
    }
    while (rs > 1 && rs * per > SAMPLE_BUDGET) rs = (rs + 1) / 2;
    while (cs > 1 && cs * per > SAMPLE_BUDGET) cs = (cs + 1) / 2;
    double *xs = malloc((size_t)(rs * per) * sizeof *xs);
    double *ws = malloc((size_t)(cs * per) * sizeof *ws);
    int64_t wrong = 0;
    if (!xs || !ws) {
        fprintf(stderr, "commgemm-bench: %s: out of memory for the check\n", what);
        wrong = 1;
        goto done;
    }
    for (int64_t t = 0; t < rs; t++)
        for (int64_t l = 0; l < k; l++)
            xs[t * per + l] = bench_value(seed, BENCH_TENSOR_X,
                                          row0 + sample_index(t, rs, rows), l);
    for (int64_t t = 0; t < cs; t++)
        for (int64_t l = 0; l < k; l++)
            ws[t * per + l] = bench_value(seed, BENCH_TENSOR_W,
                                          col0 + sample_index(t, cs, n_cols), l);
    for (int64_t a = 0; a < rs; a++) {
        int64_t i = sample_index(a, rs, rows);
        for (int64_t b = 0; b < cs; b++) {
            int64_t j = sample_index(b, cs, n_cols);
            double ref = 0;
            for (int64_t l = 0; l < k; l++) ref += xs[a * per + l] * ws[b * per + l];
            if (epi && epi->bias) ref += bench_bias_value(seed, col0 + j); /* r + b */
            double got = bench_load(y, dtype, i * n_cols + j), slope;
            double want = apply_epilogue(epi, seed, ref, row0 + i, col0 + j, &slope);
            double tol = tolerance(dtype, k, ref, rounded_partials) * fmax(slope, 0.5) +
                         tolerance(dtype, 0, want, 0);
            if (!(fabs(got - want) <= tol)) /* NaN counts as wrong */
                report(what, wrong++, row0 + i, col0 + j, got, want, tol);
            if (epi && epi->epilogue == CGM_EPILOGUE_GELU_AUX) { /* aux = r + b */
                got = bench_load(epi->aux, epi->aux_dtype, i * n_cols + j);
                tol = tolerance(epi->aux_dtype, k, ref, rounded_partials);
                if (!(fabs(got - ref) <= tol)) report(what, wrong++, row0 + i, col0 + j, got, ref, tol);
            }
        }
    }
done:
    free(xs);
    free(ws);
    return wrong;
}

int64_t bench_check_bgrad(const float *bgrad, cgm_epilogue epilogue, uint64_t seed, cgm_dtype aux_dtype,
                          int64_t m, int64_t col0, int64_t n_cols, int64_t k, const char *what) {
    bool rows = epilogue == CGM_EPILOGUE_BGRAD; /* one sum per row of X over k */
    int64_t count = rows ? m : n_cols, per = rows ? k : m * (k > 0 ? k : 1), cs = count, wrong = 0;
    while (cs > 1 && cs * per > CHECK_BUDGET) cs = (cs + 1) / 2;
    double *xs = rows ? NULL : malloc((size_t)(m * k + 1) * sizeof *xs);
    if (!rows && !xs) {
        fprintf(stderr, "commgemm-bench: %s: out of memory for the check\n", what);
        return 1;
    }
    for (int64_t i = 0; !rows && i < m; i++)
        for (int64_t l = 0; l < k; l++) xs[i * k + l] = bench_value(seed, BENCH_TENSOR_X, i, l);
    for (int64_t b = 0; b < cs; b++) {
        int64_t j = sample_index(b, cs, count);
        double want = 0, mag = 0;
        if (rows) {
            for (int64_t l = 0; l < k; l++) {
                double v = bench_value(seed, BENCH_TENSOR_X, j, l);
                want += v;
                mag += fabs(v);
            }
        } else { /* column col0 + j over all m rows: r * gelu'(aux) */
            for (int64_t i = 0; i < m; i++) {
                double r = 0;
                for (int64_t l = 0; l < k; l++) r += xs[i * k + l] * bench_value(seed, BENCH_TENSOR_W, col0 + j, l);
                double v = r * dgelu(bench_aux_value(seed, aux_dtype, i, col0 + j));
                want += v;
                mag += fabs(v) + tolerance(CGM_DTYPE_FP32, k, r, 0);
            }
        }
        double tol = 4e-7 * (double)(rows ? k : m) * mag + 1e-6 * fabs(want) + 1e-6;
        if (!(fabs(bgrad[j] - want) <= tol)) report(what, wrong++, 0, (rows ? 0 : col0) + j, bgrad[j], want, tol);
    }
    free(xs);
    return wrong;
}

int64_t bench_check_copy(const void *y, cgm_dtype dtype, uint64_t seed,
                         int tensor, int64_t rows, int64_t cols,
                         const char *what) {
    int64_t rs = rows, wrong = 0;
    while (rs > 1 && rs * cols > CHECK_BUDGET) rs = (rs + 1) / 2;
    for (int64_t a = 0; a < rs; a++) {
        int64_t i = sample_index(a, rs, rows);
        for (int64_t j = 0; j < cols; j++) {
            double got = bench_load(y, dtype, i * cols + j);
            double want = bench_value(seed, tensor, i, j);
            if (!(got == want)) report(what, wrong++, i, j, got, want, 0);
        }
    }
    return wrong;
}
