/* The Hopper GEMM's promoting fp8 kernels (promoted<T>, fp8.cuh): every
 * pair of e4m3 / e5m2 operands x the three output types x cooperative and
 * ping-pong, instantiated here, apart from the other units so that they
 * compile in parallel. launch.cu checks the arguments, fills the
 * parameters and the maps, and calls launch_fp8_promoted. */
#include "device/hopper/launch.cuh"

namespace {

template <int kIn>
cudaError_t launch_promoted_in(bool pp, cgm_dtype out, int dev, const call_maps &m, const hgemm_params &p, int grid,
                               cudaStream_t stream) {
    return pp ? launch_out_promoted<kIn, true>(out, dev, m, p, grid, stream)
              : launch_out_promoted<kIn, false>(out, dev, m, p, grid, stream);
}

} // namespace

namespace cgm_hopper {

cudaError_t launch_fp8_promoted(int in, bool pp, cgm_dtype out, int dev, const void *maps, const void *params,
                                int grid, cudaStream_t stream) {
    const call_maps &m = *static_cast<const call_maps *>(maps);
    const hgemm_params &p = *static_cast<const hgemm_params *>(params);
    switch (in) {
    case kInE4E4: return launch_promoted_in<kInE4E4>(pp, out, dev, m, p, grid, stream);
    case kInE4E5: return launch_promoted_in<kInE4E5>(pp, out, dev, m, p, grid, stream);
    case kInE5E4: return launch_promoted_in<kInE5E4>(pp, out, dev, m, p, grid, stream);
    case kInE5E5: return launch_promoted_in<kInE5E5>(pp, out, dev, m, p, grid, stream);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t preload_fp8_promoted() {
    cudaError_t e = preload_promoted<kInE4E4>();
    if (e == cudaSuccess) e = preload_promoted<kInE4E5>();
    if (e == cudaSuccess) e = preload_promoted<kInE5E4>();
    return e != cudaSuccess ? e : preload_promoted<kInE5E5>();
}

} // namespace cgm_hopper
