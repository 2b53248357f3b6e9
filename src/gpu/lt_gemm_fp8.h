/* The fp8 side of lt_gemm.c (lt_gemm_fp8.c): the checks of a
 * cgm_lt_gemm_args against cuBLASLt's FP8 rules (gpu.h), the dtypes they
 * imply for W, C and the bias, and the descriptor attributes they set. */
#ifndef COMMGEMM_LT_GEMM_FP8_H
#define COMMGEMM_LT_GEMM_FP8_H

#include "gpu/gpu.h"

bool cgm_lt_is_fp8(cgm_dtype dtype);
/* cudaDataType of any commgemm dtype, fp8 ones included. */
cudaDataType_t cgm_lt_cuda_dtype(cgm_dtype dtype);
/* W's dtype: w_dtype, or in_dtype when w_dtype is 0 (CGM_DTYPE_FP32). */
cgm_dtype cgm_lt_w_dtype(const cgm_lt_gemm_args *g);
/* cuBLASLt's C dtype: out_dtype, except for an fp8 output: the bias's
 * (bf16 or fp16), bf16 without a bias. */
cgm_dtype cgm_lt_c_dtype(const cgm_lt_gemm_args *g);
/* The bias's dtype: out_dtype for other inputs; with fp8 inputs bf16 for
 * bf16 and fp32 outputs, fp16 for fp16, and C's for fp8 outputs. */
cgm_dtype cgm_lt_bias_dtype(const cgm_lt_gemm_args *g);

/* Every rule of gpu.h's cgm_lt_gemm_args on `g`: CGM_SUCCESS, or
 * CGM_ERROR_NOT_SUPPORTED (what cuBLASLt cannot do) /
 * CGM_ERROR_INVALID_ARGUMENT (fields that contradict each other), the
 * message saying what was expected, what was found, what to do. */
cgm_status cgm_lt_check(const cgm_lt_gemm_args *g);

/* The fixed fp8 attributes of an entry's descriptor: fast accumulation,
 * and for block scaling the scale modes (W: 128x128, X: 1x128). */
cgm_status cgm_lt_fp8_desc(cublasLtMatmulDesc_t desc, cgm_lt_scaling scaling,
                           bool fast_accum);
/* The per-call fp8 pointers: g's scales, and amax (the caller's amax_y,
 * or a scratch one) when not NULL. The entry is keyed on which are set,
 * so a pointer set once stays set for every call of the entry. */
/* Stand-ins for the scale and amax pointers a key's calls will set, for
 * the heuristic (block scaling's wants them set). */
cgm_status cgm_lt_fp8_placeholders(cublasLtMatmulDesc_t desc, bool x_scale,
                                   bool w_scale, bool y_scale, bool amax);
cgm_status cgm_lt_fp8_pointers(cublasLtMatmulDesc_t desc,
                               const cgm_lt_gemm_args *g, float *amax);

#endif
