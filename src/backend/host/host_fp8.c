/* fp8 on the host backend (the header's "FP8", proven here): operands are
 * dequantized to fp32 with their scales for OpenBLAS; AG+GEMM gathers
 * packed rows, each the row's fp8 bytes followed by its scales, so that
 * the gathered rows keep their shard's scales; an fp8 output is quantized
 * with its scale and its amax taken on the way. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host/host.h"

/* Values of the 256 codes of an fp8 dtype, unscaled. */
static void decode_table(cgm_dtype dtype, float table[256]) {
    for (int c = 0; c < 256; c++) table[c] = cgm_fp8_to_float((uint8_t)c, dtype);
}

/* Scales per row of a packed row: one (TENSOR: the shard's), or one per
 * 128 k (BLOCK_1X128). */
static int64_t scales_per_row(int64_t k, cgm_scaling scaling) {
    return scaling == CGM_SCALING_TENSOR ? 1 : cgm_ceil_div(k, 128);
}

/* Where a packed row's scales start: after its bytes, 4-aligned. */
static int64_t scales_offset(int64_t k) { return cgm_ceil_div(k, 4) * 4; }

int64_t host_fp8_row_bytes(int64_t k, cgm_scaling scaling) {
    if (k <= 0) return 0;
    return scales_offset(k) + (int64_t)sizeof(float) * scales_per_row(k, scaling);
}

void host_fp8_dequantize(const cgm_matrix *m, float *out) {
    float table[256];
    decode_table(m->dtype, table);
    int64_t ld = cgm_matrix_ld(m), kb = cgm_ceil_div(m->cols, 128);
    for (int64_t i = 0; i < m->rows; i++) {
        const uint8_t *src = (const uint8_t *)m->data + i * ld;
        float *row = out + i * m->cols;
        /* the row's scales: TENSOR one, BLOCK_1X128 its own row of them,
         * BLOCK_128X128 the row of its 128-row block */
        if (m->scaling == CGM_SCALING_TENSOR) {
            for (int64_t j = 0; j < m->cols; j++) row[j] = table[src[j]] * m->scale[0];
            continue;
        }
        /* BLOCK_1X128: the row's own scales; BLOCK_128X128: its block's */
        const float *s = m->scale + (m->scaling == CGM_SCALING_BLOCK_1X128 ? i : i / 128) * kb;
        for (int64_t j = 0; j < m->cols; j++) row[j] = table[src[j]] * s[j / 128];
    }
}

cgm_status host_fp8_pack(const cgm_matrix *x, void **buf, size_t *bytes, cgm_matrix *packed) {
    int64_t k = x->cols, rb = host_fp8_row_bytes(k, x->scaling);
    size_t need = (size_t)(x->rows * rb);
    *packed = cgm_matrix_make(NULL, CGM_DTYPE_FP8_E4M3, x->rows, rb); /* bytes */
    if (need == 0) return CGM_SUCCESS;
    if (need > *bytes) {
        void *p = realloc(*buf, need);
        if (!p)
            return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                             "expected %zu bytes of host scratch for the %lld fp8 rows this rank gathers, found "
                             "none free; use smaller shapes", need, (long long)x->rows);
        *buf = p;
        *bytes = need;
    }
    int64_t ld = cgm_matrix_ld(x), per = scales_per_row(k, x->scaling), off = scales_offset(k);
    for (int64_t i = 0; i < x->rows; i++) {
        uint8_t *row = (uint8_t *)*buf + i * rb;
        memcpy(row, (const uint8_t *)x->data + i * ld, (size_t)k);
        memset(row + k, 0, (size_t)(off - k));
        const float *s = x->scale + (x->scaling == CGM_SCALING_TENSOR ? 0 : i * per);
        memcpy(row + off, s, (size_t)per * sizeof(float));
    }
    packed->data = *buf;
    return CGM_SUCCESS;
}

void host_fp8_unpack(const host_view *v, cgm_dtype dtype, cgm_scaling scaling, int64_t k, float *out) {
    float table[256];
    decode_table(dtype, table);
    int64_t off = scales_offset(k);
    for (int64_t i = 0; i < v->rows; i++) {
        const uint8_t *row = (const uint8_t *)v->data + i * v->ld;
        const float *s = (const float *)(row + off);
        float *o = out + i * k;
        if (scaling == CGM_SCALING_TENSOR)
            for (int64_t j = 0; j < k; j++) o[j] = table[row[j]] * s[0];
        else
            for (int64_t j = 0; j < k; j++) o[j] = table[row[j]] * s[j / 128];
    }
}

void host_fp8_to_gathered(const host_view *v, int64_t row0, const cgm_matrix *xg, int64_t m, int nranks,
                          int64_t k) {
    if (k <= 0) return; /* no elements: x_gathered's data may be NULL */
    int64_t ld = cgm_matrix_ld(xg), off = scales_offset(k), per = scales_per_row(k, xg->scaling);
    float *scales = (float *)xg->scale; /* an output: x_gathered's scales */
    for (int64_t i = 0; i < v->rows; i++) {
        const uint8_t *row = (const uint8_t *)v->data + i * v->ld;
        int64_t g = row0 + i;
        memcpy((uint8_t *)xg->data + g * ld, row, (size_t)k);
        if (!scales) continue;
        /* TENSOR: one per shard, at the index of the shard that owns row g */
        int64_t at = xg->scaling == CGM_SCALING_TENSOR ? g / cgm_ceil_div(m, nranks) : g * per;
        memcpy(scales + at, row + off, (size_t)per * sizeof(float));
    }
}

/* |v| as bits: for non-negative floats the bit order is the value order,
 * and NaN's bits are above every number's, so a max of bits keeps NaN. */
static uint32_t abs_bits(float v) {
    float a = fabsf(v);
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    return u;
}

void host_fp8_amax_merge(_Atomic uint32_t *amax_bits, uint32_t row_amax) {
    uint32_t seen = atomic_load(amax_bits);
    while (row_amax > seen && !atomic_compare_exchange_weak(amax_bits, &seen, row_amax)) {
    }
}

uint32_t host_fp8_store_row(uint8_t *y_row, cgm_dtype dtype, const float *v, int64_t n, const cgm_matrix *bias,
                            float scale) {
    uint32_t amax = 0;
    for (int64_t j = 0; j < n; j++) {
        float r = v[j];
        if (bias) r += cgm_load_float(bias->data, bias->dtype, j);
        uint32_t a = abs_bits(r);
        if (a > amax) amax = a;
        y_row[j] = cgm_float_to_fp8(r * scale, dtype);
    }
    return amax;
}
