/* The Hopper GEMM's split kernels for fp8 operands (the tail split;
 * launch_split.cu has the 16-bit ones): every pair of e4m3 / e5m2 operands
 * x the three output types x cooperative and ping-pong, accumulating in
 * the tensor cores or promoting each k block (promoted<T>), instantiated
 * here apart from the other units so that they compile in parallel. */
#include "device/hopper/launch.cuh"

namespace {

template <int kIn>
cudaError_t launch_fp8_split_in(bool pp, bool promote, cgm_dtype out, int dev, const call_maps &m,
                                const hgemm_params &p, int grid, cudaStream_t stream) {
    return promote ? launch_split_out<kIn, true>(pp, out, dev, m, p, grid, stream)
                   : launch_split_out<kIn, false>(pp, out, dev, m, p, grid, stream);
}

} // namespace

namespace cgm_hopper {

cudaError_t launch_fp8_split(int in, bool pp, bool promote, cgm_dtype out, int dev, const void *maps,
                             const void *params, int grid, cudaStream_t stream) {
    const call_maps &m = *static_cast<const call_maps *>(maps);
    const hgemm_params &p = *static_cast<const hgemm_params *>(params);
    switch (in) {
    case kInE4E4: return launch_fp8_split_in<kInE4E4>(pp, promote, out, dev, m, p, grid, stream);
    case kInE4E5: return launch_fp8_split_in<kInE4E5>(pp, promote, out, dev, m, p, grid, stream);
    case kInE5E4: return launch_fp8_split_in<kInE5E4>(pp, promote, out, dev, m, p, grid, stream);
    case kInE5E5: return launch_fp8_split_in<kInE5E5>(pp, promote, out, dev, m, p, grid, stream);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace cgm_hopper
