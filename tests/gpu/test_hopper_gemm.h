/* What the files of test_hopper_gemm share (test_hopper_gemm.c defines
 * it): the test values on the device, the exact reference, and the
 * registration of the fused hooks' cases (test_hopper_gemm_hooks.c), of
 * the fused epilogue's (test_hopper_gemm_epi.c), the fp8 ones
 * (test_hopper_gemm_fp8.c) and the tail split's (test_hopper_gemm_split.c). */
#ifndef COMMGEMM_TEST_HOPPER_GEMM_H
#define COMMGEMM_TEST_HOPPER_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "commgemm.h"
#include "device/hopper_gemm.h"

/* hv_fill that fails the case when malloc does. */
void *fill(cgm_dtype t, size_t count, uint64_t seed);
/* A new device buffer (64 bytes of slack) holding bytes of host. */
void *to_device(const void *host, size_t bytes);
/* count e4m3 codes of the values hv_fill(t, count, seed) holds (multiples
 * of 1/8 in [-1, 1], exact in e4m3) in a new device buffer. */
void *e4m3_to_device(uint64_t seed, size_t count);
/* Skips the case unless an sm_90 device is there. */
void require_sm90(void);
const char *variant_name(int v);
/* v rounded once (nearest even) to dtype t. */
double round_out(double v, cgm_dtype t);
/* X or W as 8 x the values, rows of kp (k rounded up to 16) ints. */
int16_t *to_eighths(const void *buf, cgm_dtype t, int64_t rows, int64_t ld, int64_t k, int64_t kp);
/* The exact dot product of two to_eighths rows (64 x the real one). */
int32_t dot_eighths(const int16_t *a, const int16_t *b, int64_t kp);
/* A valid bf16 64 x 64 x 64 GEMM on buf (x, w and y; 16-byte aligned),
 * for the argument checks' cases; test_hopper_gemm_hooks.c. */
cgm_hgemm_args args_64(const void *buf);
/* Fails the case unless cgm_hgemm_supported refuses a with a reason that
 * contains `reason` and cgm_hgemm returns cudaErrorInvalidValue (`what`
 * names the case); test_hopper_gemm_hooks.c. */
void expect_refused(const cgm_hgemm_args *a, const char *what, const char *reason);
/* Registers the fused hooks' cases (timeout 60 s). */
void hgemm_register_hook_cases(void);
/* Registers the fused epilogue's cases (test_hopper_gemm_epi.c). */
void hgemm_register_epilogue_cases(void);
/* Registers the fp8 cases (test_hopper_gemm_fp8.c). */
void hgemm_register_fp8_cases(void);
/* Registers the tail split's cases (test_hopper_gemm_split.c). */
void hgemm_register_split_cases(void);

#endif
