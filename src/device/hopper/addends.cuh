/* The Hopper GEMM's epilogue addends (the fused reduce-scatter): the fp32
 * sum of up to CGM_HGEMM_MAX_ADDENDS [m, n] matrices (fp32, bf16 or fp16)
 * added into the accumulators before bias and conversion, in addend order
 * per element, so results do not depend on the variant or the path:
 *   - from global memory by the consumers (add_addends, add_addends_tile);
 *   - from two shared-memory slots that the ping-pong kernel's helper
 *     thread (thread 32, otherwise idle) fills by TMA, one (tile, addend)
 *     ahead of the epilogue that reads them (addend_tma_helper,
 *     add_addends_slots): an own tile's epilogue then reads shared memory
 *     instead of waiting for global loads after its main loop.
 * The addend flags' waits are waits.cuh's. */
#ifndef COMMGEMM_HOPPER_ADDENDS_CUH
#define COMMGEMM_HOPPER_ADDENDS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "device/hopper/config.cuh"
#include "device/hopper/epilogue.cuh"
#include "device/hopper/ptx.cuh"
#include "device/hopper/scheduler.cuh"
#include "device/hopper/waits.cuh"

namespace {

/* Per addend, interior tiles load 8 (cooperative: 4) column groups x 2
 * rows of pairs at once instead of one at a time, edge tiles element by
 * element with bounds checks (the fragment layout and pair_of:
 * epilogue.cuh). */

template <typename AT, int OFF, int NJ>
__device__ __forceinline__ void add_addends_as(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    int t = threadIdx.x % 128;
    int q = t % 4;
    int row = row0 + 16 * (t / 32) + (t % 32) / 4;
    bool interior = row0 + 64 <= p.m && col0 + 8 * NJ <= p.n;
#pragma unroll 1
    for (int i = 0; i < p.naddends; i++) {
        const AT *a = static_cast<const AT *>(param_at(p.addend, i)) + (long long)row * p.addend_ld + col0 + 2 * q;
        const AT *b = a + 8 * p.addend_ld;
        if (interior) {
            /* 16 loads in flight; 8 in the cooperative fragment, whose
             * registers are tighter (no spills either way: -Xptxas -v). */
            constexpr int U = NJ >= 32 ? 4 : 8;
#pragma unroll
            for (int jb = 0; jb < NJ; jb += U) {
                float2 va[U], vb[U];
#pragma unroll
                for (int u = 0; u < U; u++) {
                    va[u] = pair_of(a + 8 * (jb + u));
                    vb[u] = pair_of(b + 8 * (jb + u));
                }
#pragma unroll
                for (int u = 0; u < U; u++) {
                    d[OFF + 4 * (jb + u)] += va[u].x;
                    d[OFF + 4 * (jb + u) + 1] += va[u].y;
                    d[OFF + 4 * (jb + u) + 2] += vb[u].x;
                    d[OFF + 4 * (jb + u) + 3] += vb[u].y;
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                int col = col0 + 8 * j + 2 * q;
                if (row < p.m) {
                    if (col < p.n) d[OFF + 4 * j] += to_float(a[8 * j]);
                    if (col + 1 < p.n) d[OFF + 4 * j + 1] += to_float(a[8 * j + 1]);
                }
                if (row + 8 < p.m) {
                    if (col < p.n) d[OFF + 4 * j + 2] += to_float(b[8 * j]);
                    if (col + 1 < p.n) d[OFF + 4 * j + 3] += to_float(b[8 * j + 1]);
                }
            }
        }
    }
}

template <int OFF, int NJ>
__device__ __forceinline__ void add_addends(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    if (p.addend_dtype == CGM_DTYPE_FP32) add_addends_as<float, OFF, NJ>(p, d, row0, col0);
    else if (p.addend_dtype == CGM_DTYPE_BF16) add_addends_as<__nv_bfloat16, OFF, NJ>(p, d, row0, col0);
    else add_addends_as<__half, OFF, NJ>(p, d, row0, col0);
}

/* A ping-pong consumer's whole 128 x 128 interior tile of each addend: all
 * of its loads are issued before the first is used (64 pairs per thread for
 * 16-bit addends; two batches of 32 for fp32 addends or an fp32 output), so
 * the epilogue waits for one round trip per batch instead of one per 8
 * column groups. The same sums in the same order. Edge tiles take
 * add_addends_as, which checks bounds. */
template <typename AT> struct addend_pair;
template <> struct addend_pair<float> { using type = float2; };
template <> struct addend_pair<__nv_bfloat16> { using type = __nv_bfloat162; };
template <> struct addend_pair<__half> { using type = __half2; };
__device__ __forceinline__ float2 widen(float2 v) { return v; }
__device__ __forceinline__ float2 widen(__nv_bfloat162 v) { return __bfloat1622float2(v); }
__device__ __forceinline__ float2 widen(__half2 v) { return __half22float2(v); }

template <typename AT, typename OutT>
__device__ __forceinline__ void add_addends_tile_as(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    if (row0 + 128 > p.m || col0 + 128 > p.n) {
        add_addends_as<AT, 0, 16>(p, d, row0, col0);
        add_addends_as<AT, 64, 16>(p, d, row0 + 64, col0);
        return;
    }
    using R = typename addend_pair<AT>::type;
    /* Row sets of the fragment: 0 = row, 1 = row + 8, 2 = row + 64, 3 = row
     * + 72. Two per batch where 64 more registers would spill (fp32 addends
     * or an fp32 output's epilogue, -Xptxas -v). */
    constexpr int kSets = sizeof(AT) == 4 || sizeof(OutT) == 4 ? 2 : 4;
    int t = threadIdx.x % 128;
    long long row = row0 + 16 * (t / 32) + (t % 32) / 4;
    int col = col0 + 2 * (t % 4);
#pragma unroll 1
    for (int i = 0; i < p.naddends; i++) {
        const AT *a = static_cast<const AT *>(param_at(p.addend, i)) + row * p.addend_ld + col;
#pragma unroll
        for (int b = 0; b < 4; b += kSets) {
            R v[kSets][16];
#pragma unroll
            for (int s = 0; s < kSets; s++) {
                const AT *r = a + (long long)(8 * ((b + s) & 1) + 64 * ((b + s) >> 1)) * p.addend_ld;
#pragma unroll
                for (int j = 0; j < 16; j++) v[s][j] = *reinterpret_cast<const R *>(r + 8 * j);
            }
#pragma unroll
            for (int s = 0; s < kSets; s++) {
                int off = 64 * ((b + s) >> 1) + 2 * ((b + s) & 1); /* column group j at off + 4j */
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    float2 f = widen(v[s][j]);
                    d[off + 4 * j] += f.x;
                    d[off + 4 * j + 1] += f.y;
                }
            }
        }
    }
}

template <typename OutT>
__device__ __forceinline__ void add_addends_tile(const hgemm_params &p, float (&d)[128], int row0, int col0) {
    if (p.addend_dtype == CGM_DTYPE_FP32) add_addends_tile_as<float, OutT>(p, d, row0, col0);
    else if (p.addend_dtype == CGM_DTYPE_BF16) add_addends_tile_as<__nv_bfloat16, OutT>(p, d, row0, col0);
    else add_addends_tile_as<__half, OutT>(p, d, row0, col0);
}

/* One addend slot (rows 64 h .. 64 h + 63 of a ping-pong tile, 128
 * columns, 16-bit, as addend_tma_helper's two 128B-swizzled TMA boxes
 * left it) added into d[OFF .. OFF + 63] (OFF = 64 h). ldmatrix.x4 gives
 * each thread exactly its accumulator fragment of four 8 x 8 blocks
 * (PTX ISA, "Matrix fragments for ldmatrix": thread l holds row l / 4,
 * elements 2 (l % 4), +1 of each block): blocks (rows 16w.., columns 8j),
 * (rows 16w + 8.., 8j), (16w.., 8j + 8), (16w + 8.., 8j + 8) of warp w are
 * d[OFF + 4j], +1; d[OFF + 4j + 2], +3; d[OFF + 4j + 4], +5; d[OFF + 4j +
 * 6], +7. Lane l gives the address of row l % 8 of block l / 8; with the
 * swizzle, 16-byte chunk c of row r sits at chunk c ^ (r % 8), so the 8
 * rows of a block hit 8 different chunks: no bank conflicts. */
__device__ __forceinline__ float2 widen_bits(uint32_t v, __nv_bfloat16 *) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162 *>(&v));
}
__device__ __forceinline__ float2 widen_bits(uint32_t v, __half *) {
    return __half22float2(*reinterpret_cast<__half2 *>(&v));
}

template <typename AT, int OFF>
__device__ __forceinline__ void add_addend_slot(float (&d)[128], uint32_t slot) {
    int l = threadIdx.x % 32, w = (threadIdx.x / 32) % 4;
    int r = 16 * w + 8 * ((l >> 3) & 1) + (l & 7);
    uint32_t row = slot + (uint32_t)r * 128u;
#pragma unroll
    for (int j = 0; j < 16; j += 2) {
        int chunk = (j % 8) + (l >> 4);
        uint32_t addr = row + (uint32_t)(j / 8) * kBox16 + (uint32_t)((chunk ^ (l & 7)) << 4);
        uint32_t v0, v1, v2, v3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v0), "=r"(v1), "=r"(v2), "=r"(v3)
                     : "r"(addr)
                     : "memory");
        float2 f0 = widen_bits(v0, (AT *)nullptr), f1 = widen_bits(v1, (AT *)nullptr);
        float2 f2 = widen_bits(v2, (AT *)nullptr), f3 = widen_bits(v3, (AT *)nullptr);
        d[OFF + 4 * j] += f0.x;
        d[OFF + 4 * j + 1] += f0.y;
        d[OFF + 4 * j + 2] += f1.x;
        d[OFF + 4 * j + 3] += f1.y;
        d[OFF + 4 * j + 4] += f2.x;
        d[OFF + 4 * j + 5] += f2.y;
        d[OFF + 4 * j + 6] += f3.x;
        d[OFF + 4 * j + 7] += f3.y;
    }
}

/* One fp32 slot: columns 32 P .. 32 P + 31 of the tile, all 128 rows, as
 * the helper's TMA box left it (128-byte rows, 128B swizzle: 16-byte chunk
 * c of row r at chunk c ^ (r % 8)), added into column groups j = 4P ..
 * 4P + 3 of both 64-row halves. A thread's pair (row R, columns 8j + 2q,
 * +1) is 8 bytes in chunk 2 (j - 4P) + q / 2; a warp's 32 pairs fill each
 * bank twice, the least two wavefronts for 256 bytes. */
template <int P>
__device__ __forceinline__ void add_addend_part_f32(float (&d)[128], uint32_t slot) {
    int l = threadIdx.x % 32, w = (threadIdx.x / 32) % 4, q = l & 3;
#pragma unroll
    for (int half = 0; half < 2; half++)
#pragma unroll
        for (int e = 0; e < 2; e++) { /* rows R and R + 8 */
            int r = 64 * half + 16 * w + 8 * e + (l >> 2);
            uint32_t row = slot + (uint32_t)r * 128u + (uint32_t)(q & 1) * 8u;
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
                uint32_t chunk = (uint32_t)((2 * jj + (q >> 1)) ^ (r & 7));
                float x, y;
                asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(x), "=f"(y) : "r"(row + (chunk << 4)) : "memory");
                int at = 64 * half + 4 * (4 * P + jj) + 2 * e;
                d[at] += x;
                d[at + 1] += y;
            }
        }
}

/* Gives a slot back after this warp read it: one arrive per warp on its
 * empty barrier. The reads were generic-proxy loads and the helper's next
 * TMA into the slot writes through the async proxy, so each thread fences
 * first: without it the arrive could go out while the warp's last loads
 * were still in flight, and the next part overwrite the slot under them. */
__device__ __forceinline__ void slot_done(uint32_t aempty) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(aempty);
}

/* A ping-pong consumer's own tile, addends from the slots (filled by
 * addend_tma_helper): per addend its parts (16-bit: 2, the 64-row halves;
 * fp32: 4, the 32-column quarters), part k in slot k % 2 as the slot's use
 * `uses` + k / 2. For each: wait for this consumer's full barrier of the
 * slot (afull: its two barriers, parity of the use), add the part, and
 * give the slot back (slot_done). The sums per element in addend order, as
 * add_addends_tile's. Returns the uses that follow. */
template <typename AT>
__device__ __forceinline__ uint32_t add_addends_slots(const hgemm_params &p, float (&d)[128], uint32_t slots,
                                                      uint32_t afull, uint32_t aempty, uint32_t uses) {
#pragma unroll 1
    for (int a = 0; a < p.naddends; a++) {
        if constexpr (sizeof(AT) == 4) {
            mbar_wait(afull, uses & 1u);
            add_addend_part_f32<0>(d, slots);
            slot_done(aempty);
            mbar_wait(afull + 8, uses & 1u);
            add_addend_part_f32<1>(d, slots + kAddendSlot);
            slot_done(aempty + 8);
            mbar_wait(afull, (uses + 1) & 1u);
            add_addend_part_f32<2>(d, slots);
            slot_done(aempty);
            mbar_wait(afull + 8, (uses + 1) & 1u);
            add_addend_part_f32<3>(d, slots + kAddendSlot);
            slot_done(aempty + 8);
            uses += 2;
        } else {
            mbar_wait(afull, uses & 1u);
            add_addend_slot<AT, 0>(d, slots);
            slot_done(aempty);
            mbar_wait(afull + 8, uses & 1u);
            add_addend_slot<AT, 64>(d, slots + kAddendSlot);
            slot_done(aempty + 8);
            uses += 1;
        }
    }
    return uses;
}

/* A tensor map of addend_maps by constant indices (see param_at). */
__device__ __forceinline__ const CUtensorMap *addend_map(const addend_maps &am, int i) {
    switch (i) {
    case 0: return &am.map[0];
    case 1: return &am.map[1];
    case 2: return &am.map[2];
    case 3: return &am.map[3];
    case 4: return &am.map[4];
    case 5: return &am.map[5];
    default: return &am.map[6];
    }
}

/* The addend loader of the ping-pong kernel with the helper
 * (hgemm_params.addend_tma), thread 32. For each tile of the CTA in tile
 * order and each addend a: wait for a's flags of the tile's rows (then a
 * proxy fence: the rows were acquired by the generic proxy, TMA reads
 * through the async one), then for each part k of the addend's tile
 * (16-bit: the two 64-row halves, two 64 x 64 boxes each; fp32: the four
 * 32-column quarters, one 128 x 32 box each) wait for slot k % 2 to be
 * empty and load the part into it, completing on the full barrier of that
 * slot of the tile's consumer c (afull + 16 c + 8 (k % 2)). Use u of a slot
 * (u = 0, 1, ...: the parts in order, two per slot per fp32 addend) waits
 * for the slot's empty barrier's phase u - 1 (a fresh barrier counts as
 * having completed the phase before 0). The full barriers are per
 * consumer so that each counts only its consumer's uses, in that
 * consumer's order: a parity wait is only sound when the barrier is at most
 * one phase behind, and one consumer can reach its epilogue while the
 * other still waits for an earlier use (late flags). After a wait gave up
 * the loads still go out (the rows are whatever they hold), so nothing
 * hangs. */
__device__ void addend_tma_helper(const hgemm_params &p, const addend_maps &am, uint32_t slots, uint32_t afull,
                                  uint32_t aempty) {
    int tiles = p.tiles_m * p.tiles_n;
    unsigned long long epoch = p.addend_waits ? flag_epoch(p) : 0;
    bool f32 = p.addend_dtype == CGM_DTYPE_FP32;
    int parts = f32 ? 4 : 2;
    uint32_t use = 0;
    for (int i = 0;; i++) {
        long long tl = blockIdx.x + (long long)i * gridDim.x;
        if (tl >= tiles) break;
        int tm, tn;
        tile_coords(p, (int)tl, &tm, &tn);
        int row = tm * kTileM;
        int col = tn * CGM_HGEMM_TILE_N_PINGPONG;
        uint32_t full0 = afull + 16 * (i & 1);
        for (int a = 0; a < p.naddends; a++) {
            if (param_at(p.addend_flags, a)) {
                wait_addend_rows(p, tm * kTileM, kTileM, epoch, a, a + 1);
                asm volatile("fence.proxy.async.global;" ::: "memory");
            }
            const CUtensorMap *map = addend_map(am, a);
            for (int k = 0; k < parts; k++) {
                int h = k & 1;
                uint32_t slot = slots + h * kAddendSlot, full = full0 + 8 * h, u = use + (uint32_t)(k / 2);
                mbar_wait(aempty + 8 * h, (u & 1u) ^ 1u);
                mbar_arrive_expect_tx(full, kAddendSlot);
                if (f32) {
                    tma_load_2d(slot, map, col + 32 * k, row, full);
                } else {
                    tma_load_2d(slot, map, col, row + 64 * h, full);
                    tma_load_2d(slot + kBox16, map, col + 64, row + 64 * h, full);
                }
            }
            use += (uint32_t)(parts / 2);
        }
    }
}

} // namespace

#endif
