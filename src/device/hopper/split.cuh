/* The Hopper GEMM's tail split, device side (the split kernels, kSplit in
 * kernel.cuh; the choice of parts: tail_split.h; work units: unit_of in
 * scheduler.cuh).
 *
 * A part of a tail tile ends with split_finish: each consumer warp stores
 * its slice of the fp32 accumulators into the part's slot of the
 * workspace and counts its arrival on the counter of its slice of the
 * tile; the warp whose arrival is the tile's last (in time) adds the
 * tile's parts in k order, part 0 first, and goes on to the epilogue; the
 * others go on to their next unit. Nobody waits for another CTA, so the
 * persistent grid cannot hang on a part that has not been scheduled, and
 * the sum is the same bits whichever part arrives last: ((p0 + p1) + p2)
 * + ..., in fp32. The last arrival sets the counter back to zero, so the
 * next launch (or graph replay) finds it as this one did.
 *
 * Memory order (as CUTLASS's stream-K barrier): the lanes' stores, then
 * bar.warp.sync, then lane 0's fence.acq_rel.gpu and relaxed atomic add
 * (the release); in the last, lane 0's fence.acq_rel.gpu after the add and
 * bar.warp.sync (the acquire) before the lanes' loads. Partials move
 * through L2 only (st.global.cg, ld.global.cg): an SM's L1 never holds a
 * line of the workspace. */
#ifndef COMMGEMM_HOPPER_SPLIT_CUH
#define COMMGEMM_HOPPER_SPLIT_CUH

#include <stdint.h>

#include "device/hopper/config.cuh"
#include "device/hopper/scheduler.cuh"

namespace {

/* A work unit (unit_of) with each value broadcast from lane 0 of the
 * threads in `mask` (the consumers' whole warps; the producer thread
 * alone, 1): the compiler then knows they are warp-uniform and keeps the k
 * loops' counters, the TMA coordinates and the first wgmma's predicate on
 * the uniform datapath, as in the unsplit kernels (unit_of's
 * multiply-high divisions otherwise leave them in vector registers).
 * Returns the part (-1: a whole tile). */
__device__ __forceinline__ int unit_of_warp(const hgemm_params &p, int u, int *t, int *kb0, int *kb1, int *r,
                                            unsigned int mask) {
    int part = unit_of(p, u, t, kb0, kb1, r);
    *t = __shfl_sync(mask, *t, 0), *r = __shfl_sync(mask, *r, 0);
    *kb0 = __shfl_sync(mask, *kb0, 0), *kb1 = __shfl_sync(mask, *kb1, 0);
    return __shfl_sync(mask, part, 0);
}

/* The ping-pong split kernel's ring handoff: a consumer's main loop covers
 * a unit's own k range, so the next unit's first ring position (the other
 * consumer's) is where this one's ended. The consumer's leader writes it
 * before its turn arrive (release); the other reads it after its turn
 * wait (acquire), broadcast from lane 0 so that the compiler knows it is
 * warp-uniform. */
__device__ __forceinline__ void handoff_put(uint32_t word, int stage, uint32_t phase) {
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(word), "r"((uint32_t)stage | phase << 16) : "memory");
}
__device__ __forceinline__ void handoff_get(uint32_t word, int *stage, uint32_t *phase) {
    uint32_t v = __shfl_sync(0xFFFFFFFFu, ld_shared_u32(word), 0);
    *stage = (int)(v & 0xFFFFu);
    *phase = v >> 16;
}

/* d = the sum of the tile's parts 0, 1, .. in order (each part's slot
 * `slot_floats` after the previous, this thread's kAcc / 4 chunks kStride
 * floats apart). d holds part `own` on entry, which is in its slot too:
 * with own 0 the sum starts from d, otherwise from part 0's slot, and
 * part own is read back like the others. One part at a time, 8 loads of
 * 16 bytes in flight per lane (32 registers beside d's 128). */
template <int kStride, int kAcc>
__device__ __forceinline__ void split_sum(float (&d)[128], const float *tile, long long slot_floats, int parts,
                                          int own) {
    if (own != 0)
#pragma unroll
        for (int q = 0; q < kAcc / 4; q++) {
            float4 x = __ldcg(reinterpret_cast<const float4 *>(tile + q * kStride));
            d[4 * q] = x.x, d[4 * q + 1] = x.y, d[4 * q + 2] = x.z, d[4 * q + 3] = x.w;
        }
#pragma unroll 1
    for (int i = 1; i < parts; i++) {
        const float *slot = tile + i * slot_floats;
#pragma unroll
        for (int c = 0; c < kAcc / 32; c++) {
            float4 v[8];
#pragma unroll
            for (int q = 0; q < 8; q++) v[q] = __ldcg(reinterpret_cast<const float4 *>(slot + (8 * c + q) * kStride));
#pragma unroll
            for (int q = 0; q < 8; q++) {
                d[32 * c + 4 * q] += v[q].x, d[32 * c + 4 * q + 1] += v[q].y;
                d[32 * c + 4 * q + 2] += v[q].z, d[32 * c + 4 * q + 3] += v[q].w;
            }
        }
    }
}

/* The end of part `part` of tail tile r for a consumer warpgroup's kAcc
 * accumulators d[0 .. kAcc - 1] (its 64 rows of a tile both consumers
 * share, slice = consumer; the whole ping-pong tile, slice 0). A slot holds
 * kSlotThreads threads' accumulators (256 when both consumers share the
 * tile, 128 ping-pong), thread t's 16-byte chunk q at (q * kSlotThreads +
 * t) * 4 floats: a warp's store of one chunk covers 512 contiguous bytes.
 * Returns true in the warp that arrived last, with d the tile's sum; false
 * in the others. */
template <int kSlotThreads, int kAcc = 128>
__device__ __forceinline__ bool split_finish(const hgemm_params &p, float (&d)[128], int r, int part, int slice) {
    static_assert(kAcc % 32 == 0 && kAcc <= 128, "whole chunks of 8 loads");
    constexpr int kStride = kSlotThreads * 4;
    constexpr long long kSlot = (long long)kSlotThreads * kAcc;
    const int t = slice * 128 + (int)(threadIdx.x % 128), lane = threadIdx.x % 32;
    const int parts = p.split_parts;
    const float *tile = p.split_partials + (long long)r * parts * kSlot + t * 4;
    float *mine = p.split_partials + ((long long)r * parts + part) * kSlot + t * 4;
#pragma unroll
    for (int q = 0; q < kAcc / 4; q++)
        __stcg(reinterpret_cast<float4 *>(mine + q * kStride),
               make_float4(d[4 * q], d[4 * q + 1], d[4 * q + 2], d[4 * q + 3]));
    unsigned int *counter = p.split_counters + r * kSplitCounters + t / 32;
    unsigned int before = 0;
    __syncwarp();
    if (lane == 0)
        asm volatile("fence.acq_rel.gpu;\n\tatom.relaxed.gpu.global.add.u32 %0, [%1], 1;"
                     : "=r"(before)
                     : "l"(counter)
                     : "memory");
    before = __shfl_sync(0xFFFFFFFFu, before, 0);
    if (before != (unsigned int)parts - 1u) return false;
    if (lane == 0)
        asm volatile("fence.acq_rel.gpu;\n\tst.relaxed.gpu.global.u32 [%0], 0;" ::"l"(counter) : "memory");
    __syncwarp();
    split_sum<kStride, kAcc>(d, tile, kSlot, parts, part);
    return true;
}

} // namespace

#endif
