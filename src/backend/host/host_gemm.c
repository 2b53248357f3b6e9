/* Element access, dtype conversion and OpenBLAS GEMM for the host backend.
 * Every GEMM runs in fp32: bf16/fp16 operands are converted once per call,
 * fp8 ones dequantized with their scales. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host/host.h"

float host_view_get(const host_view *v, int64_t i, int64_t j) {
    int64_t idx = v->transposed ? j * v->ld + i : i * v->ld + j;
    return cgm_load_float(v->data, v->dtype, idx);
}

void host_view_set(const host_view *v, int64_t i, int64_t j, float value) {
    int64_t idx = v->transposed ? j * v->ld + i : i * v->ld + j;
    cgm_store_float(v->data, v->dtype, idx, value);
}

cgm_status host_to_fp32(const cgm_matrix *m, float **buf, size_t *bytes) {
    size_t need = (size_t)(m->rows * m->cols) * sizeof(float);
    if (need == 0) return CGM_SUCCESS;
    if (need > *bytes) {
        float *p = realloc(*buf, need);
        if (!p)
            return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                             "expected %zu bytes of host scratch for the fp32 "
                             "copy of a %lld x %lld %s operand, found none "
                             "free; use smaller shapes",
                             need, (long long)m->rows, (long long)m->cols,
                             cgm_dtype_name(m->dtype));
        *buf = p;
        *bytes = need;
    }
    int64_t ld = cgm_matrix_ld(m);
    float *out = *buf;
    if (cgm_dtype_is_fp8(m->dtype)) {
        host_fp8_dequantize(m, out);
        return CGM_SUCCESS;
    }
    for (int64_t i = 0; i < m->rows; i++) {
        int64_t base = i * ld;
        float *row = out + i * m->cols;
        if (m->dtype == CGM_DTYPE_BF16) {
            const uint16_t *src = (const uint16_t *)m->data + base;
            for (int64_t j = 0; j < m->cols; j++)
                row[j] = cgm_bf16_to_float(src[j]);
        } else if (m->dtype == CGM_DTYPE_FP16) {
            const uint16_t *src = (const uint16_t *)m->data + base;
            for (int64_t j = 0; j < m->cols; j++)
                row[j] = cgm_fp16_to_float(src[j]);
        } else {
            memcpy(row, (const float *)m->data + base,
                   (size_t)m->cols * sizeof(float));
        }
    }
    return CGM_SUCCESS;
}

static blasint at_least_one(int64_t v) { return (blasint)(v > 1 ? v : 1); }

void host_sgemm(const host_view *a, const float *w, int64_t ld_w, bool w_trans,
                int64_t n, int64_t k, float *out, int64_t ld_out, float beta) {
    int64_t rows = a->rows;
    if (rows == 0 || n == 0) return;
    if (k == 0) {
        /* C = beta * C; BLAS would also do this, but not with lda = 0. */
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < n; j++)
                out[i * ld_out + j] = beta == 0 ? 0.0f : beta * out[i * ld_out + j];
        return;
    }
    cblas_sgemm(CblasRowMajor, a->transposed ? CblasTrans : CblasNoTrans,
                w_trans ? CblasTrans : CblasNoTrans, (blasint)rows, (blasint)n,
                (blasint)k, 1.0f, (const float *)a->data, at_least_one(a->ld),
                w, at_least_one(ld_w), beta, out, at_least_one(ld_out));
}

void host_store_row(void *y_row, cgm_dtype dtype, const float *v, int64_t n,
                    const cgm_matrix *bias, bool accumulate) {
    if (dtype == CGM_DTYPE_FP32 && !bias) {
        float *y = y_row;
        if (accumulate)
            for (int64_t j = 0; j < n; j++) y[j] += v[j];
        else if ((const void *)y != (const void *)v)
            memcpy(y, v, (size_t)n * sizeof(float));
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        float s = v[j];
        if (accumulate) s = cgm_load_float(y_row, dtype, j) + s;
        if (bias) s += cgm_load_float(bias->data, bias->dtype, j);
        cgm_store_float(y_row, dtype, j, s);
    }
}
