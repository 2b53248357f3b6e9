/* Deterministic inputs, poisoned outputs and the reference GEMM. */
#include <math.h>

#include "core/core.h"
#include "harness.h"
#include "test_values.h"

float test_value(uint64_t seed, int64_t index) { return test_value_at(seed, index); }

void test_fill(const cgm_matrix *m, uint64_t seed) {
    int64_t ld = m->ld ? m->ld : m->cols;
    for (int64_t i = 0; i < m->rows; i++)
        for (int64_t j = 0; j < m->cols; j++)
            cgm_store_float(m->data, m->dtype, i * ld + j,
                            test_value(seed, i * m->cols + j));
}

double test_get(const cgm_matrix *m, int64_t i, int64_t j) {
    int64_t ld = m->ld ? m->ld : m->cols;
    return cgm_load_float(m->data, m->dtype, i * ld + j);
}

void test_poison(const cgm_matrix *m) {
    int64_t ld = m->ld ? m->ld : m->cols;
    if (m->rows && m->cols)
        memset(m->data, 0xff, (size_t)((m->rows - 1) * ld + m->cols) *
                                  cgm_dtype_size(m->dtype)); /* NaN */
}

cgm_matrix test_alloc(cgm_dtype dtype, int64_t rows, int64_t cols,
                      int64_t pad) {
    cgm_matrix m = cgm_matrix_make(NULL, dtype, rows, cols);
    m.ld = cols + pad;
    size_t bytes = (size_t)(rows * m.ld) * cgm_dtype_size(dtype);
    m.data = bytes ? malloc(bytes) : NULL;
    if (bytes && !m.data) TEST_FAIL("out of memory (%zu bytes)", bytes);
    if (bytes) memset(m.data, 0xff, bytes);
    return m;
}

void test_free(cgm_matrix *m) {
    free(m->data);
    m->data = NULL;
}

void test_ref_gemm(cgm_layout layout, const cgm_matrix *x, const cgm_matrix *w,
                   int64_t m, int64_t n, int64_t k, double *out) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++) {
                double a = layout == CGM_LAYOUT_NT ? test_get(x, l, i)
                                                   : test_get(x, i, l);
                double b = layout == CGM_LAYOUT_TN ? test_get(w, j, l)
                                                   : test_get(w, l, j);
                s += a * b;
            }
            out[i * n + j] = s;
        }
}

double test_fp8_value(int code, cgm_dtype dtype) {
    int e5 = dtype == CGM_DTYPE_FP8_E5M2, mb = e5 ? 2 : 3, bias = e5 ? 15 : 7;
    int exp = (code & 0x7f) >> mb, man = code & ((1 << mb) - 1), top = (1 << (7 - mb)) - 1;
    double sign = code & 0x80 ? -1.0 : 1.0;
    if (e5 && exp == top) return man ? NAN : sign * INFINITY;
    if (!e5 && exp == top && man == (1 << mb) - 1) return NAN;
    if (exp == 0) return sign * ldexp(man, 1 - bias - mb);
    return sign * ldexp((1 << mb) + man, exp - bias - mb);
}

double test_tolerance(cgm_dtype in, cgm_dtype out, int64_t k) {
    /* Inputs are exact multiples of 1/8, so fp32 sums are exact until they
     * exceed 2^24 / 64; the output rounding dominates. */
    double eps_out = out == CGM_DTYPE_BF16   ? 1.0 / 128
                     : out == CGM_DTYPE_FP16 ? 1.0 / 1024
                                             : 1e-6;
    (void)in;
    return 2 * eps_out + 1e-6 * (double)k;
}

int64_t test_compare(const cgm_matrix *y, const double *ref, int64_t rows,
                     int64_t n, double tol, const char *what) {
    int64_t wrong = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            double got = test_get(y, i, j), want = ref[i * n + j];
            double lim = tol * fmax(1.0, fabs(want));
            if (!(fabs(got - want) <= lim)) {
                if (wrong < 5)
                    fprintf(stderr, "%s: (%lld, %lld) = %.9g, expected %.9g\n",
                            what, (long long)i, (long long)j, got, want);
                wrong++;
            }
        }
    return wrong;
}
