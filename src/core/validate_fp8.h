/* The fp8 rules of the GEMM ops (validate_fp8.c), for validate.c. */
#ifndef COMMGEMM_VALIDATE_FP8_H
#define COMMGEMM_VALIDATE_FP8_H

#include "core.h"

/* A GEMM's operands as validate.c names them in messages. */
typedef struct cgm_gemm_operands {
    const char *fn, *xn, *wn, *yn;
    cgm_layout layout;
    const cgm_matrix *x, *w, *y;
    bool accumulate;
} cgm_gemm_operands;

/* One fp8 matrix's own fields: a scaling value other than NONE, its
 * scales (unless `scale_optional`, or it has no elements), aligned. */
cgm_status cgm_check_fp8_matrix(const char *fn, const char *name, const cgm_matrix *m, bool scale_optional);
/* X or W is fp8: both are, not both e5m2, layout TN, one recipe, Y's
 * dtype; an fp8 Y with one scale and no accumulate. */
cgm_status cgm_check_fp8_gemm(const cgm_gemm_operands *g);
/* The bias of a call with fp8 inputs: bf16, or Y's dtype where Y is not
 * fp8. */
cgm_status cgm_check_fp8_bias(const char *fn, const cgm_matrix *bias, const char *yn, const cgm_matrix *y);
/* options.y_amax: only with an fp8 output `y` (NULL: the call has no
 * GEMM), aligned. */
cgm_status cgm_check_fp8_amax(const char *fn, const float *amax, const char *yn, const cgm_matrix *y);

#endif
