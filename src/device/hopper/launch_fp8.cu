/* The Hopper GEMM's fp8 kernels: every pair of e4m3 / e5m2 operands x the
 * three output types x the three kernels (cooperative, ping-pong, ping-pong
 * with TMA-loaded addends), instantiated here, apart from launch.cu's 16-bit
 * ones so that the two units compile in parallel. launch.cu checks the
 * arguments, fills the parameters and the maps, and calls launch_fp8. */
#include "device/hopper/launch.cuh"

namespace {

template <int kIn>
cudaError_t launch_fp8_in(bool pp, bool add_tma, cgm_dtype out, int dev, const call_maps &m, const hgemm_params &p,
                          int grid, cudaStream_t stream) {
    if (add_tma) return launch_out<kIn, true, true>(out, dev, m, p, grid, stream);
    if (pp) return launch_out<kIn, true, false>(out, dev, m, p, grid, stream);
    return launch_out<kIn, false, false>(out, dev, m, p, grid, stream);
}

} // namespace

namespace cgm_hopper {

cudaError_t launch_fp8(int in, bool pp, bool add_tma, cgm_dtype out, int dev, const void *maps, const void *params,
                       int grid, cudaStream_t stream) {
    const call_maps &m = *static_cast<const call_maps *>(maps);
    const hgemm_params &p = *static_cast<const hgemm_params *>(params);
    switch (in) {
    case kInE4E4: return launch_fp8_in<kInE4E4>(pp, add_tma, out, dev, m, p, grid, stream);
    case kInE4E5: return launch_fp8_in<kInE4E5>(pp, add_tma, out, dev, m, p, grid, stream);
    case kInE5E4: return launch_fp8_in<kInE5E4>(pp, add_tma, out, dev, m, p, grid, stream);
    case kInE5E5: return launch_fp8_in<kInE5E5>(pp, add_tma, out, dev, m, p, grid, stream);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t preload_fp8() {
    cudaError_t e = preload_in<kInE4E4>();
    if (e == cudaSuccess) e = preload_in<kInE4E5>();
    if (e == cudaSuccess) e = preload_in<kInE5E4>();
    return e != cudaSuccess ? e : preload_in<kInE5E5>();
}

} // namespace cgm_hopper
