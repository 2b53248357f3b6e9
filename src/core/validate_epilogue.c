/* The epilogues' rules (the header's "Epilogues"): which op and operands
 * each epilogue takes, no bias with DGELU, no accumulate with an
 * activation, aux's and bgrad's shape and dtype. validate.c calls it once
 * the GEMM's operands are known. */
#include <stdio.h>

#include "core.h"
#include "validate_epilogue.h"

static bool needs_aux(cgm_epilogue e) {
    return e == CGM_EPILOGUE_GELU_AUX || e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD;
}

static bool needs_bgrad(cgm_epilogue e) {
    return e == CGM_EPILOGUE_DGELU_BGRAD || e == CGM_EPILOGUE_BGRAD;
}

/* What aux is to an epilogue that takes it, for messages. */
static const char *aux_role(cgm_epilogue e) {
    return e == CGM_EPILOGUE_GELU_AUX ? "it receives the pre-activation r + bias"
                                      : "it holds the pre-activation the forward's gelu_aux wrote";
}

/* aux or bgrad given or missing as the epilogue says. */
static cgm_status check_presence(const char *fn, const cgm_call *call, const char *name, bool has, bool needs,
                                 const char *takers, const char *shape) {
    const char *en = cgm_epilogue_name(call->epilogue);
    if (needs && !has)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is NULL but options.epilogue = %s needs it: pass %s", fn, name, en, shape);
    if (!needs && has)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: %s is set but options.epilogue = %s takes none (it is for %s): pass NULL, or set the "
                         "epilogue that uses it", fn, name, en, takers);
    return CGM_SUCCESS;
}

static cgm_status check_shape_dtype(const char *fn, const char *name, const cgm_matrix *m, int64_t rows,
                                    int64_t cols, const char *shape_why, cgm_dtype want, bool fp32_ok,
                                    const char *dtype_why) {
    if (m->rows != rows || m->cols != cols)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s is %lld x %lld, expected %lld x %lld (%s); pass one of "
                         "that shape", fn, name, (long long)m->rows, (long long)m->cols, (long long)rows,
                         (long long)cols, shape_why);
    fp32_ok = fp32_ok && want != CGM_DTYPE_FP32;
    if (m->dtype != want && !(fp32_ok && m->dtype == CGM_DTYPE_FP32))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "%s: %s is %s, expected %s%s (%s); pass one of that dtype", fn,
                         name, cgm_dtype_name(m->dtype), cgm_dtype_name(want), fp32_ok ? " or fp32" : "", dtype_why);
    return CGM_SUCCESS;
}

/* What the epilogue may be combined with: its op, bias, accumulate. */
static cgm_status check_use(const char *fn, const cgm_call *call) {
    cgm_epilogue e = call->epilogue;
    const char *en = cgm_epilogue_name(e);
    if (!call->has_gemm)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.epilogue = %s but the call has no GEMM (a, b and c are NULL): an epilogue acts "
                         "on a GEMM's result; pass CGM_EPILOGUE_NONE", fn, en);
    if (e == CGM_EPILOGUE_BGRAD && call->op != CGM_OP_BULK)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.epilogue = bgrad: it sums an input of a local GEMM (a weight gradient's dY), "
                         "found on a distributed op; run the weight-gradient GEMM through cgm_bulk_overlap with "
                         "bgrad, or sum the rows yourself", fn);
    if (call->has_bias && (e == CGM_EPILOGUE_DGELU || e == CGM_EPILOGUE_DGELU_BGRAD))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: bias is set with options.epilogue = %s, which takes none (cuBLASLt has no bias "
                         "there): pass NULL, and add the bias in the forward's gelu_aux instead", fn, en);
    if (call->accumulate && e != CGM_EPILOGUE_BGRAD)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.accumulate = 1 with options.epilogue = %s: the epilogue of Y + r is not what "
                         "a layer needs; expected accumulate = 0 (add the old Y outside the op)", fn, en);
    return CGM_SUCCESS;
}

cgm_status cgm_check_epilogue(const char *fn, const char *yn, const cgm_call *call) {
    cgm_epilogue e = call->epilogue;
    if ((unsigned)e >= CGM_EPILOGUE_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s: options.epilogue = %d: expected a cgm_epilogue value (CGM_EPILOGUE_NONE, _GELU, "
                         "_GELU_AUX, _DGELU, _DGELU_BGRAD or _BGRAD)", fn, (int)e);
    cgm_status st;
    if (e != CGM_EPILOGUE_NONE && (st = check_use(fn, call))) return st;
    const cgm_matrix *y = &call->y;
    bool fp8_y = cgm_dtype_is_fp8(call->out_dtype);
    char shape[160];
    snprintf(shape, sizeof shape, "a %lld x %lld matrix, shaped like %s (%s)", (long long)y->rows,
             (long long)y->cols, yn, aux_role(e));
    if ((st = check_presence(fn, call, "options.aux", call->has_aux, needs_aux(e), "gelu_aux, dgelu and dgelu_bgrad",
                             shape)))
        return st;
    bool bgrad_rows = e == CGM_EPILOGUE_BGRAD; /* 1 x C.rows: op(A)'s row sums */
    int64_t bgrad_cols = bgrad_rows ? call->m : call->n;
    snprintf(shape, sizeof shape, "a 1 x %lld matrix (%s)", (long long)bgrad_cols,
             bgrad_rows ? "one sum per row of c" : "one sum per column of the output");
    if ((st = check_presence(fn, call, "options.bgrad", call->has_bgrad, needs_bgrad(e), "dgelu_bgrad and bgrad",
                             shape)))
        return st;
    char why[160];
    if (call->has_aux) {
        if ((st = cgm_check_operand(fn, "options.aux", &call->aux))) return st;
        snprintf(why, sizeof why, "%s; %s", fp8_y ? "bf16 where the output is fp8" : "the output's dtype",
                 aux_role(e));
        if ((st = check_shape_dtype(fn, "options.aux", &call->aux, y->rows, y->cols, "shaped like the output",
                                    fp8_y ? CGM_DTYPE_BF16 : call->out_dtype, false, why)))
            return st;
    }
    if (call->has_bgrad) {
        if ((st = cgm_check_operand(fn, "options.bgrad", &call->bgrad))) return st;
        snprintf(why, sizeof why, "%s", fp8_y ? "bf16 or fp32 where the output is fp8" : "the output's dtype or fp32");
        if ((st = check_shape_dtype(fn, "options.bgrad", &call->bgrad, 1, bgrad_cols,
                                    bgrad_rows ? "1 x c's rows: the sums of op(a) along k"
                                               : "1 x n: the column sums of the output",
                                    fp8_y ? CGM_DTYPE_BF16 : call->out_dtype, true, why)))
            return st;
    }
    return CGM_SUCCESS;
}
