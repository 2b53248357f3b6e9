// fp8 helper kernels (fp8.h): scale layouts for cuBLASLt and the output
// step of fp8 calls that cuBLASLt cannot do itself. extern "C" launchers.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "device/fp8.h"

namespace {

__global__ void x_scales_kernel(const float *src, int64_t src_ld,
                                int64_t rows, int64_t kb, float *dst,
                                int64_t dst_rows) {
    const int64_t total = kb * dst_rows;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
         t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = t / dst_rows, i = t % dst_rows;
        dst[t] = i < rows ? src[i * src_ld + b] : 0.0f;
    }
}

__global__ void scale_rows_kernel(const float *src, int64_t src_ld,
                                  int64_t rows, int64_t count, char *dst,
                                  int64_t dst_pitch) {
    const int64_t total = rows * count;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
         t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / count, b = t % count;
        reinterpret_cast<float *>(dst + i * dst_pitch)[b] =
            src ? src[i * src_ld + b] : 0.0f;
    }
}

__global__ void w_scales_kernel(const float *src, int64_t nb, int64_t kb,
                                float *dst, int64_t l4) {
    const int64_t total = nb * l4;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
         t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t j = t / l4, b = t % l4;
        dst[t] = b < kb ? src[j * kb + b] : 0.0f;
    }
}

__device__ __forceinline__ float load_as_float(const void *p, int dtype,
                                               int64_t i) {
    switch (dtype) {
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case 2: return __half2float(static_cast<const __half *>(p)[i]);
    default: return static_cast<const float *>(p)[i];
    }
}

__device__ __forceinline__ void store_from_float(void *p, int dtype,
                                                 int64_t i, float v) {
    switch (dtype) {
    case 1: static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v); break;
    case 2: static_cast<__half *>(p)[i] = __float2half_rn(v); break;
    case 3:
        static_cast<__nv_fp8_storage_t *>(p)[i] =
            __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
        break;
    case 4:
        static_cast<__nv_fp8_storage_t *>(p)[i] =
            __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
        break;
    default: static_cast<float *>(p)[i] = v; break;
    }
}

// |v| as ordered bits: for non-negative floats the unsigned order of the
// bits is the order of the values, and every NaN is above infinity.
__device__ __forceinline__ unsigned int abs_bits(float v) {
    return __float_as_uint(v) & 0x7fffffffu;
}

__global__ void finish_kernel(const cgm_dev_finish_args a) {
    const float scale = a.scale ? *a.scale : 1.0f;
    const bool fp8 = a.dst_dtype == 3 || a.dst_dtype == 4;
    unsigned int amax = 0;
    const int64_t total = a.rows * a.cols;
    for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
         t < total; t += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = t / a.cols, j = t % a.cols;
        float v = a.src[i * a.src_ld + j];
        if (a.bias) v += load_as_float(a.bias, a.bias_dtype, j);
        const int64_t d = i * a.dst_ld + j;
        if (a.accumulate && !fp8) v += load_as_float(a.dst, a.dst_dtype, d);
        amax = max(amax, abs_bits(v));
        store_from_float(a.dst, a.dst_dtype, d, fp8 ? v * scale : v);
    }
    if (!a.amax) return;
    for (int o = 16; o > 0; o >>= 1)
        amax = max(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if ((threadIdx.x & 31) == 0)
        atomicMax(reinterpret_cast<unsigned int *>(a.amax), amax);
}

unsigned int blocks_for(int64_t total, int threads) {
    int64_t b = (total + threads - 1) / threads;
    if (b > 132 * 8) b = 132 * 8;
    return (unsigned int)(b < 1 ? 1 : b);
}

template <typename F> cudaError_t load(F *kernel) {
    cudaFuncAttributes a;
    return cudaFuncGetAttributes(&a, kernel);
}

}  // namespace

extern "C" cudaError_t cgm_dev_fp8_x_scales(const float *src,
                                            int64_t src_ld, int64_t rows,
                                            int64_t kb, float *dst,
                                            int64_t dst_rows,
                                            cudaStream_t stream) {
    if (dst_rows < rows || rows < 0 || kb < 0 || src_ld < kb)
        return cudaErrorInvalidValue;
    if (kb == 0 || dst_rows == 0) return cudaSuccess;
    x_scales_kernel<<<blocks_for(kb * dst_rows, 256), 256, 0, stream>>>(
        src, src_ld, rows, kb, dst, dst_rows);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_fp8_scale_rows(const float *src,
                                              int64_t src_ld, int64_t rows,
                                              int64_t count, void *dst,
                                              int64_t dst_pitch,
                                              cudaStream_t stream) {
    if (rows < 0 || count < 0 || src_ld < 0 || dst_pitch % 4)
        return cudaErrorInvalidValue;
    if (rows == 0 || count == 0) return cudaSuccess;
    scale_rows_kernel<<<blocks_for(rows * count, 256), 256, 0, stream>>>(
        src, src_ld, rows, count, static_cast<char *>(dst), dst_pitch);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_fp8_w_scales(const float *src, int64_t nb,
                                            int64_t kb, float *dst, int64_t l4,
                                            cudaStream_t stream) {
    if (l4 < kb || nb < 0 || kb < 0) return cudaErrorInvalidValue;
    if (nb == 0 || l4 == 0) return cudaSuccess;
    w_scales_kernel<<<blocks_for(nb * l4, 256), 256, 0, stream>>>(src, nb, kb,
                                                                  dst, l4);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_fp8_finish(const cgm_dev_finish_args *a,
                                          cudaStream_t stream) {
    const bool fp8 = a->dst_dtype == 3 || a->dst_dtype == 4;
    if (a->dst_dtype < 0 || a->dst_dtype > 4 || (fp8 && a->accumulate) ||
        a->bias_dtype < 0 || a->bias_dtype > 2 || a->rows < 0 || a->cols < 0)
        return cudaErrorInvalidValue;
    if (a->rows == 0 || a->cols == 0) return cudaSuccess;
    finish_kernel<<<blocks_for(a->rows * a->cols, 256), 256, 0, stream>>>(*a);
    return cudaGetLastError();
}

extern "C" cudaError_t cgm_dev_fp8_preload(void) {
    cudaError_t e = load(x_scales_kernel);
    if (e == cudaSuccess) e = load(w_scales_kernel);
    if (e == cudaSuccess) e = load(scale_rows_kernel);
    return e != cudaSuccess ? e : load(finish_kernel);
}
