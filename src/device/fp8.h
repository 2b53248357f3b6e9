/* fp8 helper kernels of the GPU backends, C entry points (fp8.cu): the
 * scales of a call's fp8 operands rearranged into cuBLASLt's layouts, and
 * the last step of an output that cuBLASLt cannot write itself (an fp8 Y
 * from summed partials, a bias of another dtype than Y): fp32 values plus
 * the bias, scaled and saturated to fp8 with their amax, or rounded once to
 * bf16/fp16/fp32. dtypes are cgm_dtype values (0 fp32, 1 bf16, 2 fp16,
 * 3 fp8 e4m3, 4 fp8 e5m2). */
#ifndef COMMGEMM_DEVICE_FP8_H
#define COMMGEMM_DEVICE_FP8_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X's 1x128 block scales of `rows` rows, the header's layout
 * (src[i * src_ld + b], src_ld >= kb), into cuBLASLt's VEC128_32F layout
 * for a GEMM of dst_rows >= rows rows: dst[b * dst_rows + i]; the entries
 * of rows rows..dst_rows-1 are set to 0. */
cudaError_t cgm_dev_fp8_x_scales(const float *src, int64_t src_ld,
                                 int64_t rows, int64_t kb, float *dst,
                                 int64_t dst_rows, cudaStream_t stream);

/* Scales placed beside rows: for each of `rows` rows, the `count` floats at
 * dst + i * dst_pitch (bytes, a multiple of 4) get src[i * src_ld + b]
 * (src_ld 0: every row the same; src NULL: zeros). */
cudaError_t cgm_dev_fp8_scale_rows(const float *src, int64_t src_ld,
                                   int64_t rows, int64_t count, void *dst,
                                   int64_t dst_pitch, cudaStream_t stream);

/* W's 128x128 block scales, the header's layout (src[j * kb + b], nb row
 * blocks), into cuBLASLt's BLK128x128_32F layout: dst[j * l4 + b] with l4
 * = kb rounded up to a multiple of 4 (padding entries 0). */
cudaError_t cgm_dev_fp8_w_scales(const float *src, int64_t nb, int64_t kb,
                                 float *dst, int64_t l4, cudaStream_t stream);

/* dst[i, j] = out(src[i, j] + bias[j]), src fp32 [rows, cols]:
 *   dst bf16/fp16/fp32: rounded once to nearest even, added to dst's old
 *     value first (in fp32) when accumulate;
 *   dst fp8: sat(rne(v * scale[0])) (scale NULL: 1), magnitudes above the
 *     largest finite value and infinities saturate, NaN stays NaN; no
 *     accumulate.
 * amax (may be NULL, any dtype): raised to max |v| (v before the scale;
 * NaN wins) with atomics, so several launches may share one amax that
 * the caller zeroed first. bias: cols values of bias_dtype (bf16, fp16 or
 * fp32), or NULL. */
typedef struct cgm_dev_finish_args {
    int64_t rows, cols;
    const float *src;
    int64_t src_ld;
    void *dst;
    int64_t dst_ld;
    int dst_dtype;
    int accumulate;
    const void *bias;
    int bias_dtype;
    const float *scale;
    float *amax;
} cgm_dev_finish_args;
cudaError_t cgm_dev_fp8_finish(const cgm_dev_finish_args *args,
                               cudaStream_t stream);

/* Loads the kernels above now (see cgm_dev_preload). */
cudaError_t cgm_dev_fp8_preload(void);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_DEVICE_FP8_H */
