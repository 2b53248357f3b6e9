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
 * The scales are read through L2 (ld.global.cg): the fused all-gather's
 * peers write their shards' scales during the launch, before the READY
 * flags that the producer acquired before the tile's loads, and a line an
 * SM's L1 kept from an earlier tile could hold a scale from before that
 * write. */
#ifndef COMMGEMM_HOPPER_FP8_CUH
#define COMMGEMM_HOPPER_FP8_CUH

#include <stdint.h>

#include "device/hopper/config.cuh"
#include "device/hopper/ptx.cuh"
#include "device/hopper/scheduler.cuh"

namespace {

/* The scale of row `row` of Y: x_scale(row) * w_scale, or 0 past the last
 * row (those accumulators are zero, TMA's fill, and are not stored). */
__device__ __forceinline__ float fp8_row_scale(const hgemm_params &p, int row, float sw) {
    if (row >= p.m) return 0.f;
    return __ldcg(p.x_scale + fastdiv(row, p.xs_mul, p.xs_shr)) * sw;
}

/* Scales the 64 x 8NJ block of the accumulator fragment held in
 * d[OFF .. OFF + 4 NJ - 1] whose first row is row0 (the fragment layout:
 * epilogue.cuh; thread t holds rows 16 (t / 32) + (t % 32) / 4 and 8
 * below). */
template <int OFF, int NJ>
__device__ __forceinline__ void fp8_scale_rows(const hgemm_params &p, float (&d)[128], int row0) {
    int t = threadIdx.x % 128;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    float sw = __ldcg(p.w_scale);
    float sa = fp8_row_scale(p, row, sw), sb = fp8_row_scale(p, row + 8, sw);
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
__device__ __forceinline__ float fp8_block_w(const hgemm_params &p, int wb, int kb) {
    return wb < p.w_blocks ? __ldcg(p.w_bs + (long long)wb * p.w_bs_ld + kb) : 0.f;
}

/* One promotion: the 64 x 128 product of a k block (4 k steps of 32 fp8
 * elements, A and B through their descriptors) into t, then
 * d[OFF + i] += t[i] * (sa in the thread's first row, sb eight rows below;
 * the fragment layout: epilogue.cuh). The wait for the whole group keeps
 * the tensor cores idle during the additions; in the cooperative kernel
 * the other consumer's products fill that time. */
template <int kIn, int OFF>
__device__ __forceinline__ void fp8_promote(float (&d)[128], float (&t)[64], uint64_t desc_a, uint64_t desc_b,
                                            float sa, float sb) {
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_m64n128<kIn, 0>(t, desc_a + 2 * kk, desc_b + 2 * kk, kk > 0 ? 1u : 0u);
    wgmma_commit();
    wgmma_wait<0>();
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
