/* The Hopper GEMM's launch templates, shared by the translation units
 * that instantiate the kernels: launch.cu (fp16 and bf16 operands),
 * launch_fp8.cu (the fp8 pairs), launch_fp8_promoted.cu (the fp8 pairs'
 * promoting kernels), launch_split.cu and launch_fp8_split.cu (the split
 * kernels of the tail split, 16-bit and fp8), each its own object so that
 * they compile in parallel. */
#ifndef COMMGEMM_HOPPER_LAUNCH_CUH
#define COMMGEMM_HOPPER_LAUNCH_CUH

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "device/hopper/kernel.cuh"

namespace {

/* The tensor maps of one call. */
struct call_maps {
    CUtensorMap x, x_own, w, y; /* y: hgemm_params.y_tma's */
    addend_maps addends;
};

/* cudaFuncSetAttribute once per device and instantiation (it is per
 * function and device; setting it again is harmless, so a race between
 * host threads costs nothing but a redundant call). */
constexpr int kMaxDevices = 64;

template <int kIn, typename OutT, bool kPP, bool kAddTma, bool kSplit = false>
cudaError_t launch(int dev, const call_maps &m, const hgemm_params &p, int grid, cudaStream_t stream) {
    static volatile bool attribute_set[kMaxDevices];
    auto kernel = hgemm_kernel<kIn, OutT, kPP, kAddTma, kSplit>;
    constexpr int smem = smem_of<kPP, kAddTma>::bytes;
    if (dev < 0 || dev >= kMaxDevices || !attribute_set[dev]) {
        cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if (err != cudaSuccess) return err;
        if (dev >= 0 && dev < kMaxDevices) attribute_set[dev] = true;
    }
    kernel<<<grid, kThreads, smem, stream>>>(m.x, m.x_own, m.w, m.y, m.addends, p);
    return cudaGetLastError();
}

template <int kIn, bool kPP, bool kAddTma>
cudaError_t launch_out(cgm_dtype out, int dev, const call_maps &m, const hgemm_params &p, int grid,
                       cudaStream_t stream) {
    switch (out) {
    case CGM_DTYPE_BF16: return launch<kIn, __nv_bfloat16, kPP, kAddTma>(dev, m, p, grid, stream);
    case CGM_DTYPE_FP16: return launch<kIn, __half, kPP, kAddTma>(dev, m, p, grid, stream);
    default: return launch<kIn, float, kPP, kAddTma>(dev, m, p, grid, stream);
    }
}

/* The kernels a comm launches, loaded now (cudaFuncGetAttributes needs the
 * loaded function, so it loads it). */
template <int kIn, typename OutT> cudaError_t preload_out() {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, OutT, true, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, OutT, false, false>);
    if constexpr (!in_is_fp8(kIn)) { /* the fused epilogue's kernels: 16-bit operands only */
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, with_epilogue<OutT>, true, false>);
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, with_epilogue<OutT>, false, false>);
    }
    return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, OutT, true, true>);
}

/* The promoting fp8 kernels (promoted<T>: cooperative and ping-pong, the
 * addends loaded by the consumers). */
template <int kIn, bool kPP>
cudaError_t launch_out_promoted(cgm_dtype out, int dev, const call_maps &m, const hgemm_params &p, int grid,
                                cudaStream_t stream) {
    switch (out) {
    case CGM_DTYPE_BF16: return launch<kIn, promoted<__nv_bfloat16>, kPP, false>(dev, m, p, grid, stream);
    case CGM_DTYPE_FP16: return launch<kIn, promoted<__half>, kPP, false>(dev, m, p, grid, stream);
    default: return launch<kIn, promoted<float>, kPP, false>(dev, m, p, grid, stream);
    }
}
template <int kIn> cudaError_t preload_promoted() {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, promoted<float>, true, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, promoted<float>, false, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, promoted<__nv_bfloat16>, true, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, promoted<__nv_bfloat16>, false, false>);
    if (e == cudaSuccess) e = cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, promoted<__half>, true, false>);
    return e != cudaSuccess ? e : cudaFuncGetAttributes(&fa, hgemm_kernel<kIn, promoted<__half>, false, false>);
}

/* The split kernels (kSplit): cooperative and ping-pong, plain, the
 * output type T, or promoted<T> for the promoting fp8 kernels. */
template <typename T, bool kPromoted> struct split_out {
    using type = T;
};
template <typename T> struct split_out<T, true> {
    using type = promoted<T>;
};
template <int kIn, typename OutT>
cudaError_t launch_split_variant(bool pp, int dev, const call_maps &m, const hgemm_params &p, int grid,
                                 cudaStream_t stream) {
    return pp ? launch<kIn, OutT, true, false, true>(dev, m, p, grid, stream)
              : launch<kIn, OutT, false, false, true>(dev, m, p, grid, stream);
}
template <int kIn, bool kPromoted>
cudaError_t launch_split_out(bool pp, cgm_dtype out, int dev, const call_maps &m, const hgemm_params &p, int grid,
                             cudaStream_t stream) {
    switch (out) {
    case CGM_DTYPE_BF16:
        return launch_split_variant<kIn, typename split_out<__nv_bfloat16, kPromoted>::type>(pp, dev, m, p, grid,
                                                                                             stream);
    case CGM_DTYPE_FP16:
        return launch_split_variant<kIn, typename split_out<__half, kPromoted>::type>(pp, dev, m, p, grid, stream);
    default: return launch_split_variant<kIn, typename split_out<float, kPromoted>::type>(pp, dev, m, p, grid, stream);
    }
}

template <int kIn> cudaError_t preload_in() {
    cudaError_t e = preload_out<kIn, float>();
    if (e == cudaSuccess) e = preload_out<kIn, __nv_bfloat16>();
    return e != cudaSuccess ? e : preload_out<kIn, __half>();
}

} // namespace

/* launch_fp8.cu: the fp8 kernels' launch (in: kInE4E4 .. kInE5E5; maps a
 * call_maps, params an hgemm_params: the types of the anonymous namespace
 * are the same definitions in both units, passed by address) and their
 * preload. */
namespace cgm_hopper {
cudaError_t launch_fp8(int in, bool pp, bool add_tma, cgm_dtype out, int dev, const void *maps,
                       const void *params, int grid, cudaStream_t stream);
cudaError_t preload_fp8();
/* launch_fp8_promoted.cu: the promoting fp8 kernels (hgemm_params.promote),
 * the same way. */
cudaError_t launch_fp8_promoted(int in, bool pp, cgm_dtype out, int dev, const void *maps, const void *params,
                                int grid, cudaStream_t stream);
cudaError_t preload_fp8_promoted();
/* launch_split.cu: the split kernels (the tail split, hgemm_params.units
 * and split_*), any operand types (fp8: launch_fp8_split.cu's,
 * promote = hgemm_params.promote); the same way. */
cudaError_t launch_split(int in, bool pp, cgm_dtype out, int dev, const void *maps, const void *params, int grid,
                         cudaStream_t stream);
cudaError_t launch_fp8_split(int in, bool pp, bool promote, cgm_dtype out, int dev, const void *maps,
                             const void *params, int grid, cudaStream_t stream);
} // namespace cgm_hopper

#endif
