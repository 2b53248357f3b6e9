/* Helpers shared by the multi-rank host tests. */
#include "mp_common.h"

#include <dirent.h>
#include <math.h>
#include <time.h>

#include "core/core.h"
#include "test_values.h"

char mp_context[512];

cgm_config mp_config(int64_t timeout_ms) {
    cgm_config c = CGM_CONFIG_INIT;
    c.backend = CGM_BACKEND_HOST;
    c.max_m = 512;
    c.max_n = 64;
    c.max_k = 64;
    c.timeout_ms = timeout_ms;
    return c;
}

void mp_fill_logical(const cgm_matrix *mat, bool transposed, int64_t rows,
                     int64_t cols, int64_t row_offset, uint64_t seed) {
    int64_t ld = mat->ld ? mat->ld : mat->cols;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            float v = test_value(seed, (row_offset + i) * cols + j);
            int64_t idx = transposed ? j * ld + i : i * ld + j;
            cgm_store_float(mat->data, mat->dtype, idx, v);
        }
}

cgm_matrix mp_logical(cgm_dtype dtype, bool transposed, int64_t rows,
                      int64_t cols, int64_t row_offset, uint64_t seed,
                      int64_t pad) {
    cgm_matrix m = transposed ? test_alloc(dtype, cols, rows, pad)
                              : test_alloc(dtype, rows, cols, pad);
    mp_fill_logical(&m, transposed, rows, cols, row_offset, seed);
    return m;
}

void mp_check_no_shm_leftovers(void) {
    DIR *d = opendir("/dev/shm");
    if (!d) return; /* no /dev/shm: nothing can be left there */
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strstr(e->d_name, "commgemm") || strstr(e->d_name, "cgm")) {
            closedir(d);
            TEST_FAIL("/dev/shm/%s left behind", e->d_name);
        }
    }
    closedir(d);
}

double mp_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

uint8_t mp_fp8_code(cgm_dtype dt, uint64_t seed, int64_t i, int64_t j) {
    uint64_t h = test_mix64(seed * 0x9e3779b97f4a7c15ull ^ test_mix64((uint64_t)i * 0x100000001b3ull + (uint64_t)j));
    for (;;) {
        uint8_t c = (uint8_t)h;
        double v = fabs(test_fp8_value(c, dt));
        if (isfinite(v) && v <= 4) return c;
        h = test_mix64(h + 1);
    }
}
