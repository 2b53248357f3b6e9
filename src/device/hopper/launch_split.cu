/* The Hopper GEMM's split kernels for 16-bit operands (the tail split:
 * hgemm_params.units, split_*; kernel.cuh's kSplit, split.cuh): bf16 and
 * fp16 x the three output types x cooperative and ping-pong, plain (no
 * addends, no fused epilogue), instantiated here apart from the other
 * units so that they compile in parallel; the fp8 ones are
 * launch_fp8_split.cu's. launch.cu checks the arguments, fills the
 * parameters and the maps, and calls launch_split. */
#include "device/hopper/launch.cuh"

namespace cgm_hopper {

cudaError_t launch_split(int in, bool pp, cgm_dtype out, int dev, const void *maps, const void *params, int grid,
                         cudaStream_t stream) {
    const call_maps &m = *static_cast<const call_maps *>(maps);
    const hgemm_params &p = *static_cast<const hgemm_params *>(params);
    switch (in) {
    case kInBf16: return launch_split_out<kInBf16, false>(pp, out, dev, m, p, grid, stream);
    case kInF16: return launch_split_out<kInF16, false>(pp, out, dev, m, p, grid, stream);
    default: return launch_fp8_split(in, pp, p.promote != 0, out, dev, maps, params, grid, stream);
    }
}

} // namespace cgm_hopper
