/* The Hopper GEMM's fp8 step: the per-tensor scales applied to a consumer's
 * fp32 accumulators after the main loop, before the addends, the bias and
 * the one rounding of the epilogue:
 *   d = x_scale(row) * w_scale * (X . W^T)   (in fp32)
 * x_scale(row) = x_scale[row / x_scale_shard_rows]: the fused all-gather's
 * shards keep their own scales, and one tile's rows may come from two
 * shards, so the scale is taken per row. */
#ifndef COMMGEMM_HOPPER_FP8_CUH
#define COMMGEMM_HOPPER_FP8_CUH

#include <stdint.h>

#include "device/hopper/config.cuh"
#include "device/hopper/scheduler.cuh"

namespace {

/* The scale of row `row` of Y: x_scale(row) * w_scale, or 0 past the last
 * row (those accumulators are zero, TMA's fill, and are not stored). Plain
 * loads, not the read-only path: the fused all-gather's peers write their
 * shard's scale during the launch, before the READY flags that the
 * producer acquired before this tile's loads. */
__device__ __forceinline__ float fp8_row_scale(const hgemm_params &p, int row, float sw) {
    if (row >= p.m) return 0.f;
    return p.x_scale[fastdiv(row, p.xs_mul, p.xs_shr)] * sw;
}

/* Scales the 64 x 8NJ block of the accumulator fragment held in
 * d[OFF .. OFF + 4 NJ - 1] whose first row is row0 (the fragment layout:
 * epilogue.cuh; thread t holds rows 16 (t / 32) + (t % 32) / 4 and 8
 * below). */
template <int OFF, int NJ>
__device__ __forceinline__ void fp8_scale_rows(const hgemm_params &p, float (&d)[128], int row0) {
    int t = threadIdx.x % 128;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    float sw = *p.w_scale;
    float sa = fp8_row_scale(p, row, sw), sb = fp8_row_scale(p, row + 8, sw);
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        d[OFF + 4 * j] *= sa;
        d[OFF + 4 * j + 1] *= sa;
        d[OFF + 4 * j + 2] *= sb;
        d[OFF + 4 * j + 3] *= sb;
    }
}

} // namespace

#endif
