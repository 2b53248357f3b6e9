// The peer's epilogue of gemm_rs and gemm_ar (bench_peer_epilogue,
// bench.h): what a user writes after cuBLASLt's GEMM and NCCL's
// reduce-scatter or all-reduce when the activation must come after the
// reduction. One elementwise kernel over the reduced rows: the bias, then
// GELU (and its pre-activation for GELU_AUX) or DGELU with the given aux,
// in fp32, each output rounded once; the tanh GELU and its derivative of
// the library's epilogues (src/device/epilogue.cuh).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "bench.h"
#include "device/epilogue.cuh"

namespace {

__device__ __forceinline__ float load(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const __half *p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half *p, int64_t i, float v) { p[i] = __float2half_rn(v); }

// Threads over columns (x: coalesced), blocks over row groups (y, striding
// by gridDim.y for any row count).
template <typename R, typename Y>
__global__ void peer_epilogue_kernel(int epilogue, int64_t rows, int64_t cols, const R *r, const Y *bias, Y *aux,
                                     Y *y) {
    int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= cols) return;
    float b = bias ? load(bias, j) : 0.0f;
    for (int64_t i = blockIdx.y; i < rows; i += gridDim.y) {
        int64_t at = i * cols + j;
        float t = load(r, at) + b;
        float out;
        switch (epilogue) {
        case CGM_DEV_EPI_GELU: out = cgm_dev_gelu(t); break;
        case CGM_DEV_EPI_GELU_AUX:
            store(aux, at, t);
            out = cgm_dev_gelu(t);
            break;
        case CGM_DEV_EPI_DGELU: out = t * cgm_dev_dgelu(load(aux, at)); break;
        default: out = t; break;
        }
        store(y, at, out);
    }
}

template <typename R, typename Y>
cudaError_t launch(const bench_peer_epilogue_args *a, cudaStream_t stream) {
    const unsigned threads = 256;
    unsigned col_blocks = (unsigned)((a->cols + threads - 1) / threads);
    // enough blocks to fill the GPU several times over, each a few rows
    int64_t want = (4096 + col_blocks - 1) / col_blocks;
    unsigned row_blocks = (unsigned)(a->rows < want ? a->rows : want);
    if (row_blocks > 65535) row_blocks = 65535;
    peer_epilogue_kernel<R, Y><<<dim3(col_blocks, row_blocks), threads, 0, stream>>>(
        (int)a->epilogue, a->rows, a->cols, (const R *)a->r, (const Y *)a->bias, (Y *)a->aux, (Y *)a->y);
    return cudaGetLastError();
}

template <typename Y>
cudaError_t launch_for(const bench_peer_epilogue_args *a, cudaStream_t stream) {
    switch (a->r_dtype) {
    case CGM_DTYPE_FP32: return launch<float, Y>(a, stream);
    case CGM_DTYPE_BF16: return launch<__nv_bfloat16, Y>(a, stream);
    case CGM_DTYPE_FP16: return launch<__half, Y>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace

static_assert(CGM_DEV_EPI_GELU == CGM_EPILOGUE_GELU && CGM_DEV_EPI_GELU_AUX == CGM_EPILOGUE_GELU_AUX &&
                  CGM_DEV_EPI_DGELU == CGM_EPILOGUE_DGELU,
              "device/epilogue.cuh's epilogue values follow cgm_epilogue's");

extern "C" int bench_peer_epilogue(const bench_peer_epilogue_args *a, void *stream) {
    bool known = a->epilogue == CGM_EPILOGUE_NONE || a->epilogue == CGM_EPILOGUE_GELU ||
                 a->epilogue == CGM_EPILOGUE_GELU_AUX || a->epilogue == CGM_EPILOGUE_DGELU;
    if (!known || (a->epilogue == CGM_EPILOGUE_DGELU && a->bias) ||
        ((a->epilogue == CGM_EPILOGUE_GELU_AUX || a->epilogue == CGM_EPILOGUE_DGELU) && !a->aux)) {
        fprintf(stderr, "commgemm-bench: the peer's epilogue kernel: epilogue %s%s%s: expected none, gelu, "
                "gelu_aux or dgelu, an aux with gelu_aux and dgelu, no bias with dgelu\n",
                cgm_epilogue_name(a->epilogue), a->bias ? " with a bias" : "", a->aux ? " with an aux" : "");
        return -1;
    }
    if (a->rows <= 0 || a->cols <= 0) return 0;
    cudaStream_t s = (cudaStream_t)stream;
    cudaError_t e;
    switch (a->y_dtype) {
    case CGM_DTYPE_FP32: e = launch_for<float>(a, s); break;
    case CGM_DTYPE_BF16: e = launch_for<__nv_bfloat16>(a, s); break;
    case CGM_DTYPE_FP16: e = launch_for<__half>(a, s); break;
    default: e = cudaErrorInvalidValue; break;
    }
    if (e == cudaSuccess) return 0;
    fprintf(stderr, "commgemm-bench: the peer's epilogue kernel (partials %s, output %s, %lld x %lld): %s\n",
            cgm_dtype_name(a->r_dtype), cgm_dtype_name(a->y_dtype), (long long)a->rows, (long long)a->cols,
            e == cudaErrorInvalidValue ? "expected partials and output of fp32, bf16 or fp16"
                                       : cudaGetErrorString(e));
    return -1;
}
