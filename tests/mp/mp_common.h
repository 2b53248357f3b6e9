/* Helpers shared by the multi-rank host tests. */
#ifndef COMMGEMM_TEST_MP_COMMON_H
#define COMMGEMM_TEST_MP_COMMON_H

#include <stdbool.h>

#include "harness.h"

/* What the current iteration is doing, printed with every failure. */
extern char mp_context[512];

#define MP_CHECK_OK(expr)                                                    \
    do {                                                                     \
        cgm_status got_ = (expr);                                            \
        if (got_ != CGM_SUCCESS)                                             \
            TEST_FAIL("[%s] %s returned %s; detail: %s", mp_context, #expr,  \
                      cgm_status_string(got_), cgm_last_error());            \
    } while (0)

/* A config for test comms: host backend, small workspaces, `timeout_ms`. */
cgm_config mp_config(int64_t timeout_ms);

/* Fills `mat` with the logical matrix L (rows x cols) of values
 * test_value(seed, (row_offset + i) * cols + j), rows starting at global row
 * row_offset; stored transposed ([cols, rows]) when `transposed`. So every
 * rank can build any rank's shard, and the full matrix, from the seed. */
void mp_fill_logical(const cgm_matrix *mat, bool transposed, int64_t rows,
                     int64_t cols, int64_t row_offset, uint64_t seed);

/* A new matrix of `dtype` holding the logical matrix as above (pad: extra
 * ld), stored [rows, cols] or transposed [cols, rows]. */
cgm_matrix mp_logical(cgm_dtype dtype, bool transposed, int64_t rows,
                      int64_t cols, int64_t row_offset, uint64_t seed,
                      int64_t pad);

/* A finite fp8 code of `dt` (e4m3 or e5m2) of magnitude at most 4
 * (subnormals and zero included), from (seed, i, j): sums over k <= 320
 * stay within fp16. */
uint8_t mp_fp8_code(cgm_dtype dt, uint64_t seed, int64_t i, int64_t j);

/* Fails if /dev/shm holds anything named like commgemm's. */
void mp_check_no_shm_leftovers(void);

/* Milliseconds on the monotonic clock. */
double mp_now_ms(void);

#endif
