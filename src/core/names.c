/* Version, enum names and parsers, dtype conversions, shard arithmetic. */
#include <math.h>
#include <string.h>
#include <strings.h>

#include "core.h"

int cgm_version(void) { return COMMGEMM_VERSION; }

size_t cgm_dtype_size(cgm_dtype dtype) {
    switch (dtype) {
    case CGM_DTYPE_FP32: return 4;
    case CGM_DTYPE_BF16:
    case CGM_DTYPE_FP16: return 2;
    case CGM_DTYPE_FP8_E4M3:
    case CGM_DTYPE_FP8_E5M2: return 1;
    default: return 0;
    }
}

const char *cgm_dtype_name(cgm_dtype dtype) {
    static const char *names[] = {"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2"};
    return (unsigned)dtype < CGM_DTYPE_COUNT_ ? names[dtype] : "invalid";
}

const char *cgm_scaling_name(cgm_scaling scaling) {
    static const char *names[] = {"none", "tensor", "block_1x128", "block_128x128"};
    return (unsigned)scaling < CGM_SCALING_COUNT_ ? names[scaling] : "invalid";
}

static const char *backend_names[] = {"default", "auto", "host", "p2p", "nccl", "cublasmp"};

const char *cgm_backend_name(cgm_backend backend) {
    return (unsigned)backend < CGM_BACKEND_COUNT_ ? backend_names[backend] : "invalid";
}

cgm_status cgm_backend_from_name(const char *name, cgm_backend *out) {
    if (!name || !out)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_backend_from_name: name and out must not be NULL");
    for (int i = 0; i < CGM_BACKEND_COUNT_; i++)
        if (!strcasecmp(name, backend_names[i])) {
            *out = (cgm_backend)i;
            return CGM_SUCCESS;
        }
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "unknown backend \"%s\": expected one of auto, host, p2p, nccl, cublasmp", name);
}

static const char *algo_names[] = {"auto", "split", "ring", "bulk", "no_overlap", "fused"};

const char *cgm_algo_name(cgm_algo algo) {
    return (unsigned)algo < CGM_ALGO_COUNT_ ? algo_names[algo] : "invalid";
}

cgm_status cgm_algo_from_name(const char *name, cgm_algo *out) {
    if (!name || !out)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_algo_from_name: name and out must not be NULL");
    if (!strcasecmp(name, "split_pipelined")) {
        *out = CGM_ALGO_SPLIT_PIPELINED;
        return CGM_SUCCESS;
    }
    for (int i = 0; i < CGM_ALGO_COUNT_; i++)
        if (!strcasecmp(name, algo_names[i])) {
            *out = (cgm_algo)i;
            return CGM_SUCCESS;
        }
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "unknown algorithm \"%s\": expected one of auto, split, ring, bulk, no_overlap, fused", name);
}

/* Looks `name` up in names[count] (case-insensitive); `what` and
 * `expected` for the message of an unknown one; `dest`: the caller's out
 * pointer (NULL is refused). */
static cgm_status name_index(const char *fn, const char *name, const char *const *names, int count,
                             const char *what, const char *expected, const void *dest, int *out) {
    if (!name || !dest) return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: name and out must not be NULL", fn);
    for (int i = 0; i < count; i++)
        if (!strcasecmp(name, names[i])) {
            *out = i;
            return CGM_SUCCESS;
        }
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "unknown %s \"%s\": expected one of %s", what, name, expected);
}

static const char *partial_dtype_names[] = {"default", "fp32", "output"};

const char *cgm_partial_dtype_name(cgm_partial_dtype partial_dtype) {
    return (unsigned)partial_dtype < CGM_PARTIAL_DTYPE_COUNT_ ? partial_dtype_names[partial_dtype] : "invalid";
}

cgm_status cgm_partial_dtype_from_name(const char *name, cgm_partial_dtype *out) {
    int i = 0;
    cgm_status st = name_index("cgm_partial_dtype_from_name", name, partial_dtype_names, CGM_PARTIAL_DTYPE_COUNT_,
                               "partial dtype", "default, fp32, output", out, &i);
    if (st == CGM_SUCCESS) *out = (cgm_partial_dtype)i;
    return st;
}

static const char *gemm_reduction_names[] = {"default", "any", "fp32"};

const char *cgm_gemm_reduction_name(cgm_gemm_reduction gemm_reduction) {
    return (unsigned)gemm_reduction < CGM_GEMM_REDUCTION_COUNT_ ? gemm_reduction_names[gemm_reduction] : "invalid";
}

cgm_status cgm_gemm_reduction_from_name(const char *name, cgm_gemm_reduction *out) {
    int i = 0;
    cgm_status st = name_index("cgm_gemm_reduction_from_name", name, gemm_reduction_names,
                               CGM_GEMM_REDUCTION_COUNT_, "GEMM reduction", "default, any, fp32", out, &i);
    if (st == CGM_SUCCESS) *out = (cgm_gemm_reduction)i;
    return st;
}

static const char *epilogue_names[] = {"none", "gelu", "gelu_aux", "dgelu", "dgelu_bgrad", "bgrad"};

const char *cgm_epilogue_name(cgm_epilogue epilogue) {
    return (unsigned)epilogue < CGM_EPILOGUE_COUNT_ ? epilogue_names[epilogue] : "invalid";
}

cgm_status cgm_epilogue_from_name(const char *name, cgm_epilogue *out) {
    int i = 0;
    cgm_status st = name_index("cgm_epilogue_from_name", name, epilogue_names, CGM_EPILOGUE_COUNT_, "epilogue",
                               "none, gelu, gelu_aux, dgelu, dgelu_bgrad, bgrad", out, &i);
    if (st == CGM_SUCCESS) *out = (cgm_epilogue)i;
    return st;
}

const char *cgm_layout_name(cgm_layout layout) {
    static const char *names[] = {"TN", "NN", "NT"};
    return (unsigned)layout < CGM_LAYOUT_COUNT_ ? names[layout] : "invalid";
}

const char *cgm_op_name(cgm_op op) {
    static const char *names[] = {"ag_gemm", "gemm_rs", "gemm_ar", "bulk"};
    return (unsigned)op < CGM_OP_COUNT_ ? names[op] : "invalid";
}

/* First row of shard `rank` of the ceil split, clamped to m, for any
 * m >= 0 up to INT64_MAX: block = ceil(m / P) as m / P plus one for a
 * remainder (m + P - 1 would wrap), and block * rank only where it stays
 * at most m (rank <= m / block). */
static int64_t shard_begin(int64_t m, int rank, int nranks) {
    int64_t block = m / nranks + (m % nranks != 0);
    if (block == 0 || rank > m / block) return m;
    return block * rank;
}

int64_t cgm_shard_rows(int64_t m, int rank, int nranks) {
    if (m <= 0 || nranks <= 0 || rank < 0 || rank >= nranks) return 0;
    int64_t block = m / nranks + (m % nranks != 0);
    int64_t begin = shard_begin(m, rank, nranks);
    return m - begin < block ? m - begin : block;
}

int64_t cgm_shard_offset(int64_t m, int rank, int nranks) {
    if (m <= 0 || nranks <= 0 || rank <= 0) return 0;
    if (rank > nranks) rank = nranks;
    return shard_begin(m, rank, nranks);
}

/* ---- dtype conversions (bit exact, no compiler extensions) ---- */

static float bits_to_float(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t float_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

float cgm_bf16_to_float(uint16_t v) { return bits_to_float((uint32_t)v << 16); }

uint16_t cgm_float_to_bf16(float f) {
    uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float cgm_fp16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t cgm_float_to_fp16(float f) {
    uint32_t u = float_to_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;           /* NaN */
    if (abs >= 0x477ff000u) return sign | 0x7c00u;          /* overflow -> inf */
    if (abs < 0x38800000u) {                                /* subnormal or zero */
        float a = bits_to_float(abs);
        /* a * 2^24 rounded to nearest even, in units of the smallest subnormal. */
        float scaled = a * 16777216.0f;
        float r = rintf(scaled);
        return sign | (uint16_t)r;
    }
    uint32_t exp = (abs >> 23) - 112, man = abs & 0x7fffffu;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return sign | (uint16_t)h;
}

/* The two fp8 formats: mantissa bits, exponent bias, the largest finite
 * value and its code. e4m3 ("fn") has no infinity and one NaN mantissa
 * (S.1111.111); e5m2 is IEEE-like (exponent 31: inf or NaN). */
typedef struct fp8_format {
    int man_bits, bias;
    float max;
    uint8_t max_code;
    bool ieee;
} fp8_format;

static const fp8_format *fp8_format_of(cgm_dtype dtype) {
    static const fp8_format e4m3 = {3, 7, 448.0f, 0x7e, false}, e5m2 = {2, 15, 57344.0f, 0x7b, true};
    return dtype == CGM_DTYPE_FP8_E5M2 ? &e5m2 : &e4m3;
}

float cgm_fp8_to_float(uint8_t v, cgm_dtype dtype) {
    const fp8_format *f = fp8_format_of(dtype);
    int sign = v >> 7, exp = (v & 0x7f) >> f->man_bits, man = v & ((1 << f->man_bits) - 1);
    int exp_max = (1 << (7 - f->man_bits)) - 1;
    float a;
    if (f->ieee && exp == exp_max) a = man ? NAN : INFINITY;
    else if (!f->ieee && exp == exp_max && man == (1 << f->man_bits) - 1) a = NAN;
    else if (exp == 0) a = ldexpf((float)man, 1 - f->bias - f->man_bits); /* subnormal or zero */
    else a = ldexpf((float)((1 << f->man_bits) | man), exp - f->bias - f->man_bits);
    return sign ? -a : a;
}

uint8_t cgm_float_to_fp8(float x, cgm_dtype dtype) {
    const fp8_format *f = fp8_format_of(dtype);
    uint8_t sign = (uint8_t)((float_to_bits(x) >> 24) & 0x80u);
    float a = fabsf(x);
    if (a != a) return sign | 0x7f;
    if (a > f->max) return sign | f->max_code; /* saturate, infinities too */
    if (a == 0.0f) return sign;
    int e = 0;
    (void)frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1): a's exponent is e - 1 */
    int emin = 1 - f->bias;
    /* Units of the code's last mantissa bit at a's exponent (the smallest
     * normal's below it: subnormals); the quotient is exact, rintf rounds
     * it to nearest even. A carry into the next exponent gives that
     * exponent's code by itself, as the codes are ordered like the values. */
    int unit = (e - 1 < emin ? emin : e - 1) - f->man_bits;
    uint32_t q = (uint32_t)rintf(ldexpf(a, -unit));
    uint32_t code = e - 1 < emin ? q : ((uint32_t)(e - 1 + f->bias) << f->man_bits) + (q - (1u << f->man_bits));
    return sign | (uint8_t)code;
}

float cgm_load_float(const void *data, cgm_dtype dtype, int64_t i) {
    switch (dtype) {
    case CGM_DTYPE_FP32: return ((const float *)data)[i];
    case CGM_DTYPE_BF16: return cgm_bf16_to_float(((const uint16_t *)data)[i]);
    case CGM_DTYPE_FP16: return cgm_fp16_to_float(((const uint16_t *)data)[i]);
    case CGM_DTYPE_FP8_E4M3:
    case CGM_DTYPE_FP8_E5M2: return cgm_fp8_to_float(((const uint8_t *)data)[i], dtype);
    default: return NAN;
    }
}

void cgm_store_float(void *data, cgm_dtype dtype, int64_t i, float v) {
    switch (dtype) {
    case CGM_DTYPE_FP32: ((float *)data)[i] = v; break;
    case CGM_DTYPE_BF16: ((uint16_t *)data)[i] = cgm_float_to_bf16(v); break;
    case CGM_DTYPE_FP16: ((uint16_t *)data)[i] = cgm_float_to_fp16(v); break;
    case CGM_DTYPE_FP8_E4M3:
    case CGM_DTYPE_FP8_E5M2: ((uint8_t *)data)[i] = cgm_float_to_fp8(v, dtype); break;
    default: break;
    }
}
