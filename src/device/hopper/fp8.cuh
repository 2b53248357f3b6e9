/* The Hopper GEMM's fp8 steps.
 *
 * Per-tensor scales, applied to a consumer's fp32 accumulators after the
 * main loop, before the addends, the bias and the one rounding of the
 * epilogue:
 *   d = x_scale(row) * w_scale * (X . W^T)   (in fp32)
 * x_scale(row) = x_scale[row / x_scale_shard_rows]: the fused all-gather's
 * shards keep their own scales, and one tile's rows may come from two
 * shards, so the scale is taken per row.
 *
 * Promotion (the kernels promoted<T>, hgemm_params.promote): each k block
 * of 128 is summed by the tensor cores into a separate accumulator of one
 * 64 x 128 half of the consumer's block, then added into the fp32
 * accumulators times the block's scale (block scaling) or 1.
 *
 * The scales are read through L2 (ld.global.cg), by the consumers after
 * the tile's first full barrier: the fused all-gather's peers write their
 * shards' scales during the launch, before the READY flags that the
 * producer acquired before the tile's loads, and a line an SM's L1 kept
 * from an earlier tile could hold a scale from before that write. */
#ifndef COMMGEMM_HOPPER_FP8_CUH
#define COMMGEMM_HOPPER_FP8_CUH

#include <stdint.h>

#include "device/hopper/config.cuh"
#include "device/hopper/ptx.cuh"
#include "device/hopper/scheduler.cuh"

namespace {

/* A thread's per-tensor scales for a 64-row block of Y whose first row is
 * row0: x_scale of its two rows (the fragment layout: epilogue.cuh; thread
 * t holds rows 16 (t / 32) + (t % 32) / 4 and 8 below; 0 past the last
 * row, whose accumulators are zero, TMA's fill, and are not stored) and
 * w_scale. The kernels load them after the tile's first full barrier and
 * apply them after its main loop (fp8_scale_rows), so that the loads'
 * latency hides behind the main loop instead of opening the epilogue. */
struct fp8_scales {
    float xa, xb, w;
};
__device__ __forceinline__ float fp8_x_scale(const hgemm_params &p, int row) {
    return row < p.m ? __ldcg(p.x_scale + fastdiv(row, p.xs_mul, p.xs_shr)) : 0.f;
}
__device__ __forceinline__ fp8_scales fp8_load_scales(const hgemm_params &p, int row0) {
    int t = threadIdx.x % 128;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    return {fp8_x_scale(p, row), fp8_x_scale(p, row + 8), __ldcg(p.w_scale)};
}

/* Scales the 64 x 8NJ block of the accumulator fragment held in
 * d[OFF .. OFF + 4 NJ - 1] by s (fp8_load_scales of the block's rows). */
template <int OFF, int NJ>
__device__ __forceinline__ void fp8_scale_rows(float (&d)[128], const fp8_scales &s) {
    float sa = s.xa * s.w, sb = s.xb * s.w;
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        d[OFF + 4 * j] *= sa;
        d[OFF + 4 * j + 1] *= sa;
        d[OFF + 4 * j + 2] *= sb;
        d[OFF + 4 * j + 3] *= sb;
    }
}

/* Block scaling's scales of k block kb: row `row`'s of X (0 past the last
 * row), W's 128-row block wb (0 past the last). */
__device__ __forceinline__ float fp8_block_x(const hgemm_params &p, int row, int kb) {
    return row < p.m ? __ldcg(p.x_bs + (long long)row * p.x_bs_ld + kb) : 0.f;
}
/* W's scales of block wb for the 32 k blocks from kb, one a lane (lane l:
 * k block kb + l, 0 past the last block or past W), taken a stage at a time
 * by a shuffle (fp8_lane): every lane's load has its own address, so the
 * value stays in a vector register, where a scale of one address for the
 * whole warp would be moved into a uniform register right at its load,
 * waiting for it there (a stage before its use). */
__device__ __forceinline__ float fp8_block_w32(const hgemm_params &p, int wb, int kb) {
    kb += (int)(threadIdx.x % 32);
    return wb < p.w_blocks && kb < p.k_blocks ? __ldcg(p.w_bs + (long long)wb * p.w_bs_ld + kb) : 0.f;
}
__device__ __forceinline__ float fp8_lane(float v, int lane) { return __shfl_sync(0xFFFFFFFFu, v, lane); }

/* The product of one k block for a 64 x 128 block (4 k steps of 32 fp8
 * elements, A and B through their descriptors) into t, from zero,
 * committed as one wgmma group. */
template <int kIn>
__device__ __forceinline__ void fp8_block_product(float (&t)[64], uint64_t desc_a, uint64_t desc_b) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_m64n128<kIn, 0>(t, desc_a + 2 * kk, desc_b + 2 * kk, kk > 0 ? 1u : 0u);
    wgmma_commit();
}

/* d[OFF + i] += t[i] * (sa in the thread's first row, sb eight rows below;
 * the fragment layout: epilogue.cuh), t a completed fp8_block_product. */
template <int OFF>
__device__ __forceinline__ void fp8_add_scaled(float (&d)[128], float (&t)[64], float sa, float sb) {
    fence_accumulators(t);
#pragma unroll
    for (int j = 0; j < 16; j++) {
        d[OFF + 4 * j] = fmaf(t[4 * j], sa, d[OFF + 4 * j]);
        d[OFF + 4 * j + 1] = fmaf(t[4 * j + 1], sa, d[OFF + 4 * j + 1]);
        d[OFF + 4 * j + 2] = fmaf(t[4 * j + 2], sb, d[OFF + 4 * j + 2]);
        d[OFF + 4 * j + 3] = fmaf(t[4 * j + 3], sb, d[OFF + 4 * j + 3]);
    }
}

} // namespace

#endif
