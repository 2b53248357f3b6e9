/* The epilogue side of lt_gemm.c (lt_epilogue.c): the checks of a
 * cgm_lt_gemm_args's epilogue fields against what cuBLASLt does, and the
 * descriptor attributes and per-call pointers they set. */
#ifndef COMMGEMM_LT_EPILOGUE_H
#define COMMGEMM_LT_EPILOGUE_H

#include "gpu/gpu.h"

/* Whether the epilogue writes memory besides Y (GELU_AUX's aux, a bias
 * gradient): cgm_lt_prepare does not time such shapes (the timed runs
 * would write the caller's aux and bgrad beside the real GEMM). */
bool cgm_lt_epilogue_writes(cgm_epilogue epilogue);
/* g's epilogue fields: CGM_SUCCESS, CGM_ERROR_NOT_SUPPORTED for what
 * cuBLASLt cannot do (fp8 inputs, a bias with BGRAD, accumulate or an
 * addend with an activation, aux's ld or alignment), or
 * CGM_ERROR_INVALID_ARGUMENT (an operand missing or given where it is not
 * taken), saying what to do. */
cgm_status cgm_lt_epilogue_check(const cgm_lt_gemm_args *g);
/* The dtype cuBLASLt writes a bias gradient in for an output of
 * out_dtype: out_dtype where it is bf16 or fp16 (cuBLASLt's DGELU_BGRAD
 * takes no fp32 bias with a 16-bit D), else fp32. */
cgm_dtype cgm_lt_bgrad_dtype(cgm_dtype out_dtype);
/* The descriptor's epilogue (with the bias folded in), the bias's or bias
 * gradient's data type (cgm_lt_bgrad_dtype(out_dtype) for a gradient) and
 * aux's ld. bias_dtype: the bias's (ignored without one). */
cgm_status cgm_lt_epilogue_desc(cublasLtMatmulDesc_t desc,
                                cgm_epilogue epilogue, bool has_bias,
                                cgm_dtype bias_dtype, cgm_dtype out_dtype,
                                int64_t ld_aux);
/* The per-call pointers: the bias, or the bias gradient, and aux. */
cgm_status cgm_lt_epilogue_pointers(cublasLtMatmulDesc_t desc,
                                    const cgm_lt_gemm_args *g);
/* A few words naming the epilogue for messages ("" for NONE). */
const char *cgm_lt_epilogue_words(cgm_epilogue epilogue);

#endif
