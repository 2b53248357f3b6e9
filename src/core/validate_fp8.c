/* The fp8 rules of the GEMM ops (the header's "FP8"): scales per operand,
 * one recipe per call, layout TN, the fp8 output's scale and amax, bias.
 * validate.c calls these before it fills the call. */
#include <stdio.h>

#include "core.h"
#include "validate_fp8.h"

cgm_matrix cgm_matrix_take(const cgm_matrix *m) {
    cgm_matrix c = cgm_matrix_make(m->data, m->dtype, m->rows, m->cols);
    c.ld = m->ld;
    c.scale = m->scale;
    if (cgm_dtype_is_fp8(m->dtype)) c.scaling = m->scaling;
    return c;
}

cgm_matrix cgm_scale_matrix(const cgm_matrix *m) {
    cgm_matrix s = cgm_matrix_make((void *)m->scale, CGM_DTYPE_FP32, 0, 0);
    if (!cgm_dtype_is_fp8(m->dtype) || !m->scale || m->rows <= 0 || m->cols <= 0) return s;
    int64_t kb = cgm_ceil_div(m->cols, 128);
    switch (m->scaling) {
    case CGM_SCALING_TENSOR: s.rows = s.cols = 1; break;
    case CGM_SCALING_BLOCK_1X128: s.rows = m->rows, s.cols = kb; break;
    case CGM_SCALING_BLOCK_128X128: s.rows = cgm_ceil_div(m->rows, 128), s.cols = kb; break;
    default: break;
    }
    s.ld = s.cols;
    return s;
}

/* What each recipe's scale is, for messages. */
static const char *scale_shape(cgm_scaling s) {
    switch (s) {
    case CGM_SCALING_TENSOR: return "one float";
    case CGM_SCALING_BLOCK_1X128: return "[rows, ceil(k / 128)] floats";
    case CGM_SCALING_BLOCK_128X128: return "[ceil(rows / 128), ceil(k / 128)] floats";
    default: return "?";
    }
}

cgm_status cgm_check_fp8_matrix(const char *fn, const char *name, const cgm_matrix *m, bool scale_optional) {
    if ((unsigned)m->scaling >= CGM_SCALING_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s.scaling = %d: expected a cgm_scaling value", fn, name,
                         (int)m->scaling);
    if (m->scaling == CGM_SCALING_NONE)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %s but %s.scaling is none: expected CGM_SCALING_TENSOR or a block recipe "
                         "(CGM_SCALING_BLOCK_1X128 for X, _128X128 for W), with %s.scale pointing at the fp32 "
                         "scales", fn, name, cgm_dtype_name(m->dtype), name, name);
    if (!m->scale && !scale_optional && m->rows > 0 && m->cols > 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.scale is NULL but %s is a %lld x %lld %s matrix: pass its fp32 scales (%s for "
                         "scaling %s)", fn, name, name, (long long)m->rows, (long long)m->cols,
                         cgm_dtype_name(m->dtype), scale_shape(m->scaling), cgm_scaling_name(m->scaling));
    if (m->scale && (uintptr_t)m->scale % sizeof(float) != 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.scale = %p is not aligned to 4 bytes: pass fp32 scales at an aligned address", fn,
                         name, (const void *)m->scale);
    return CGM_SUCCESS;
}

/* The operands' recipes: X takes TENSOR or BLOCK_1X128, W TENSOR or
 * BLOCK_128X128, and both the same kind. */
static cgm_status check_recipe(const cgm_gemm_operands *g) {
    const cgm_matrix *x = g->x, *w = g->w;
    if (x->scaling == CGM_SCALING_BLOCK_128X128)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.scaling = block_128x128: 128 x 128 blocks are W's recipe; X takes "
                         "CGM_SCALING_BLOCK_1X128 (one scale per row per 128 k) or CGM_SCALING_TENSOR", g->fn,
                         g->xn);
    if (w->scaling == CGM_SCALING_BLOCK_1X128)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.scaling = block_1x128: 1 x 128 blocks are X's recipe; W takes "
                         "CGM_SCALING_BLOCK_128X128 (one scale per 128 x 128 block) or CGM_SCALING_TENSOR", g->fn,
                         g->wn);
    if ((x->scaling == CGM_SCALING_TENSOR) != (w->scaling == CGM_SCALING_TENSOR))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s.scaling = %s but %s.scaling = %s: expected one recipe per call, both "
                         "CGM_SCALING_TENSOR or %s CGM_SCALING_BLOCK_1X128 with %s CGM_SCALING_BLOCK_128X128; "
                         "quantize both operands with one recipe", g->fn, g->xn, cgm_scaling_name(x->scaling),
                         g->wn, cgm_scaling_name(w->scaling), g->xn, g->wn);
    return CGM_SUCCESS;
}

/* An fp8 Y: one quantization scale, no accumulate. */
static cgm_status check_fp8_output(const cgm_gemm_operands *g) {
    const cgm_matrix *y = g->y;
    if (y->scaling != CGM_SCALING_TENSOR)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %s with %s.scaling = %s: an fp8 output takes CGM_SCALING_TENSOR (one "
                         "quantization scale, %s.scale[0], which multiplies)", g->fn, g->yn,
                         cgm_dtype_name(y->dtype), g->yn, cgm_scaling_name(y->scaling), g->yn);
    if (g->accumulate)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.accumulate = 1 with an %s %s: accumulating would read the old output back "
                         "in fp8; accumulate into a bf16, fp16 or fp32 %s, or add the old values yourself", g->fn,
                         cgm_dtype_name(y->dtype), g->yn, g->yn);
    return CGM_SUCCESS;
}

cgm_status cgm_check_fp8_gemm(const cgm_gemm_operands *g) {
    const cgm_matrix *x = g->x, *w = g->w, *y = g->y;
    bool x8 = cgm_dtype_is_fp8(x->dtype), w8 = cgm_dtype_is_fp8(w->dtype);
    if (!x8 || !w8)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %s and %s is %s: expected both fp8 (fp8_e4m3 or fp8_e5m2, each its own) or one "
                         "dtype (fp32, bf16 or fp16) for both; quantize the other one too", g->fn, g->xn,
                         cgm_dtype_name(x->dtype), g->wn, cgm_dtype_name(w->dtype));
    if (x->dtype == CGM_DTYPE_FP8_E5M2 && w->dtype == CGM_DTYPE_FP8_E5M2)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s and %s are both fp8_e5m2: FP8 tensor cores multiply e4m3 by e4m3 or e5m2, not "
                         "e5m2 by e5m2; quantize one of them (usually the weight or activation) to fp8_e4m3",
                         g->fn, g->xn, g->wn);
    if (g->layout != CGM_LAYOUT_TN)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "%s: fp8 operands with layout %s: fp8 takes layout TN only (Hopper's FP8 tensor cores "
                         "read both operands K-major); pass %s as [m, k] and %s as [n, k] (transposed copies) "
                         "with CGM_LAYOUT_TN", g->fn, cgm_layout_name(g->layout), g->xn, g->wn);
    cgm_status st = check_recipe(g);
    if (st != CGM_SUCCESS) return st;
    if (cgm_dtype_is_fp8(y->dtype)) return check_fp8_output(g);
    if (y->dtype != CGM_DTYPE_BF16 && y->dtype != CGM_DTYPE_FP16 && y->dtype != CGM_DTYPE_FP32)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is %s: with fp8 inputs, expected a bf16, fp16, fp32 or fp8 output", g->fn, g->yn,
                         cgm_dtype_name(y->dtype));
    return CGM_SUCCESS;
}

cgm_status cgm_check_fp8_bias(const char *fn, const cgm_matrix *bias, const char *yn, const cgm_matrix *y) {
    if (bias->dtype == CGM_DTYPE_BF16 || (bias->dtype == y->dtype && !cgm_dtype_is_fp8(y->dtype)))
        return CGM_SUCCESS;
    if (cgm_dtype_is_fp8(y->dtype))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: bias is %s but %s is %s: with an fp8 output, expected a bf16 bias", fn,
                         cgm_dtype_name(bias->dtype), yn, cgm_dtype_name(y->dtype));
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "%s: bias is %s but %s is %s: with fp8 inputs, expected a bf16 bias or one of %s's dtype (%s)",
                     fn, cgm_dtype_name(bias->dtype), yn, cgm_dtype_name(y->dtype), yn, cgm_dtype_name(y->dtype));
}

cgm_status cgm_check_fp8_amax(const char *fn, const float *amax, const char *yn, const cgm_matrix *y) {
    if (!amax) return CGM_SUCCESS;
    if (!y || !cgm_dtype_is_fp8(y->dtype)) {
        char found[96];
        if (y) snprintf(found, sizeof found, "%s is %s", yn, cgm_dtype_name(y->dtype));
        else snprintf(found, sizeof found, "the call has no GEMM");
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.y_amax is set but %s: the amax is computed for an fp8 output only (to scale "
                         "it later); pass NULL, or compute it from the output", fn, found);
    }
    if ((uintptr_t)amax % sizeof(float) != 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.y_amax = %p is not aligned to 4 bytes: pass an aligned float", fn,
                         (const void *)amax);
    return CGM_SUCCESS;
}
