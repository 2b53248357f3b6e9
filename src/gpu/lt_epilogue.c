/* cuBLASLt's epilogues for commgemm's (commgemm.h "Epilogues").
 *
 * lt_gemm.c computes row-major Y[m, n] as column-major D = Y^T (n x m)
 * with A = W and B = X. So:
 *   - the bias (n values) is a vector over D's rows: EPILOGUE_*_BIAS;
 *   - aux, row-major [m, n] with ld ld_aux, is column-major n x m with the
 *     same ld: exactly the aux matrix cuBLASLt wants, shaped like D;
 *   - DGELU_BGRAD's bias gradient sums D along its columns per row, that
 *     is Y's column sums over the m rows: n values;
 *   - BGRAD (the sums of op(X) along k, one per row of Y) is the gradient
 *     of B (= X): BGRADB, m values (D's columns).
 * Bias gradients go into a workspace of the caller, which sums them in
 * fp32 and rounds once: in fp32 where D is fp32, else in D's dtype
 * (cgm_lt_bgrad_dtype: cuBLASLt's DGELU_BGRAD takes no other bias type
 * with a 16-bit D). */
#include <stdint.h>

#include "gpu/lt_epilogue.h"
#include "gpu/lt_gemm_fp8.h"

bool cgm_lt_epilogue_writes(cgm_epilogue epilogue) {
    return epilogue == CGM_EPILOGUE_GELU_AUX ||
           epilogue == CGM_EPILOGUE_DGELU_BGRAD ||
           epilogue == CGM_EPILOGUE_BGRAD;
}

const char *cgm_lt_epilogue_words(cgm_epilogue epilogue) {
    switch (epilogue) {
    case CGM_EPILOGUE_GELU: return ", epilogue gelu";
    case CGM_EPILOGUE_GELU_AUX: return ", epilogue gelu_aux";
    case CGM_EPILOGUE_DGELU: return ", epilogue dgelu";
    case CGM_EPILOGUE_DGELU_BGRAD: return ", epilogue dgelu_bgrad";
    case CGM_EPILOGUE_BGRAD: return ", epilogue bgrad (BGRADB)";
    default: return "";
    }
}

cgm_dtype cgm_lt_bgrad_dtype(cgm_dtype out_dtype) {
    return out_dtype == CGM_DTYPE_BF16 || out_dtype == CGM_DTYPE_FP16
               ? out_dtype
               : CGM_DTYPE_FP32;
}

static bool uses_aux(cgm_epilogue e) {
    return e == CGM_EPILOGUE_GELU_AUX || e == CGM_EPILOGUE_DGELU ||
           e == CGM_EPILOGUE_DGELU_BGRAD;
}

static bool uses_bgrad(cgm_epilogue e) {
    return e == CGM_EPILOGUE_DGELU_BGRAD || e == CGM_EPILOGUE_BGRAD;
}

cgm_status cgm_lt_epilogue_check(const cgm_lt_gemm_args *g) {
    const cgm_epilogue e = g->epilogue;
    const char *name = cgm_epilogue_name(e);
    if (e == CGM_EPILOGUE_NONE) {
        if (g->aux || g->bgrad)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "cgm_lt_gemm: aux or bgrad given without an "
                             "epilogue; please report this bug");
        return CGM_SUCCESS;
    }
    if ((int)e < 0 || e >= CGM_EPILOGUE_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: epilogue %d unknown", (int)e);
    if (cgm_lt_is_fp8(g->in_dtype))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: epilogue %s with fp8 inputs (%s): the "
                         "GPU backends run epilogues for bf16, fp16 and fp32 "
                         "inputs only; run the op on the host backend, or "
                         "with epilogue none and apply it after the op",
                         name, cgm_dtype_name(g->in_dtype));
    if (uses_aux(e) != (g->aux != NULL) || uses_bgrad(e) != (g->bgrad != NULL))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_lt_gemm: epilogue %s with aux %s and bgrad %s; "
                         "please report this bug", name,
                         g->aux ? "set" : "NULL", g->bgrad ? "set" : "NULL");
    if (g->bias && (e == CGM_EPILOGUE_BGRAD || e == CGM_EPILOGUE_DGELU ||
                    e == CGM_EPILOGUE_DGELU_BGRAD))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: epilogue %s with a bias: cuBLASLt's "
                         "%s takes the bias pointer for its own output; add "
                         "the bias after the op (or run it on the host "
                         "backend)", name, name);
    if (e != CGM_EPILOGUE_BGRAD && (g->accumulate || g->addend))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: epilogue %s with accumulate or an "
                         "addend; please report this bug", name);
    if (g->aux && (g->ld_aux % 8 != 0 || g->ld_aux < g->n ||
                   (uintptr_t)g->aux % 16 != 0))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "cgm_lt_gemm: epilogue %s with aux's leading "
                         "dimension %lld (n = %lld) at an address %% 16 = "
                         "%u: cuBLASLt wants aux's leading dimension a "
                         "multiple of 8 and aux 16-byte aligned (a chunk's "
                         "rows included); allocate aux with such a leading "
                         "dimension", name, (long long)g->ld_aux,
                         (long long)g->n,
                         (unsigned)((uintptr_t)g->aux % 16u));
    if (g->bgrad && (uintptr_t)g->bgrad % 16 != 0)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "cgm_lt_gemm: the bias gradient's slot is not "
                         "16-byte aligned; please report this bug");
    return CGM_SUCCESS;
}

static cublasLtEpilogue_t lt_epilogue(cgm_epilogue e, bool bias) {
    switch (e) {
    case CGM_EPILOGUE_GELU:
        return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case CGM_EPILOGUE_GELU_AUX:
        return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                    : CUBLASLT_EPILOGUE_GELU_AUX;
    case CGM_EPILOGUE_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    case CGM_EPILOGUE_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case CGM_EPILOGUE_BGRAD: return CUBLASLT_EPILOGUE_BGRADB;
    default: return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

cgm_status cgm_lt_epilogue_desc(cublasLtMatmulDesc_t desc,
                                cgm_epilogue epilogue, bool has_bias,
                                cgm_dtype bias_dtype, cgm_dtype out_dtype,
                                int64_t ld_aux) {
    cgm_status status = CGM_SUCCESS;
    cublasLtEpilogue_t epi = lt_epilogue(epilogue, has_bias);
    if (epi == CUBLASLT_EPILOGUE_DEFAULT) return CGM_SUCCESS;
    CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (uses_bgrad(epilogue) || has_bias) {
        int32_t type = (int32_t)cgm_lt_cuda_dtype(
            uses_bgrad(epilogue) ? cgm_lt_bgrad_dtype(out_dtype) : bias_dtype);
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type));
    }
    if (uses_aux(epilogue))
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux,
            sizeof ld_aux));
fail:
    return status;
}

cgm_status cgm_lt_epilogue_pointers(cublasLtMatmulDesc_t desc,
                                    const cgm_lt_gemm_args *g) {
    cgm_status status = CGM_SUCCESS;
    const void *bias = g->bgrad ? (const void *)g->bgrad : g->bias;
    if (bias)
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (g->aux)
        CGM_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux,
            sizeof g->aux));
fail:
    return status;
}

cgm_status cgm_gpu_epilogue_check(const char *backend, const cgm_call *c,
                                  int nranks) {
    const cgm_epilogue e = c->epilogue;
    const char *name = cgm_epilogue_name(e);
    if (e == CGM_EPILOGUE_NONE) return CGM_SUCCESS;
    if (cgm_lt_is_fp8(c->in_dtype))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "%s backend: epilogue %s with fp8 inputs (%s): the "
                         "GPU backends run epilogues for bf16, fp16 and fp32 "
                         "inputs; run the op on the host backend, or with "
                         "epilogue none and apply it after the op",
                         backend, name, cgm_dtype_name(c->in_dtype));
    if (e == CGM_EPILOGUE_BGRAD && c->has_bias)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "%s backend: bulk's GEMM with epilogue bgrad and a "
                         "bias: cuBLASLt's BGRADB takes the bias pointer for "
                         "the gradient; pass no bias and add it after the "
                         "op, or run it on the host backend", backend);
    /* Where cuBLASLt reads or writes aux: AG+GEMM's and bulk's GEMMs, and
     * every op on one rank (one GEMM); GEMM+RS/AR apply the epilogue in
     * their reduce, which takes any aux. */
    const bool lt = nranks == 1 || c->op == CGM_OP_ALL_GATHER_GEMM ||
                    c->op == CGM_OP_BULK;
    if (lt && c->k == 0 && c->m > 0 && (c->n > 0 || e == CGM_EPILOGUE_BGRAD))
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "%s backend: epilogue %s with an empty contraction "
                         "(k = 0): cuBLASLt runs no GEMM there; run the op "
                         "with epilogue none, or on the host backend",
                         backend, name);
    if (e == CGM_EPILOGUE_BGRAD && c->n == 0 && c->m > 0)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "%s backend: epilogue bgrad with an empty C (n = "
                         "0): cuBLASLt runs no GEMM there to sum A; sum A "
                         "yourself, or run it on the host backend", backend);
    if (lt && c->has_aux) {
        const int64_t ld = cgm_matrix_ld(&c->aux);
        if (ld % 8 != 0 || (uintptr_t)c->aux.data % 16 != 0)
            return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                             "%s backend: epilogue %s with aux's leading "
                             "dimension %lld at an address %% 16 = %u: "
                             "cuBLASLt wants aux's leading dimension a "
                             "multiple of 8 elements and aux 16-byte "
                             "aligned; allocate aux so, or run the op on the "
                             "host backend", backend, name, (long long)ld,
                             (unsigned)((uintptr_t)c->aux.data % 16u));
    }
    return CGM_SUCCESS;
}
