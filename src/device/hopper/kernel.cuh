/* The Hopper GEMM kernel: Y[m,n] = X[m,k] . W[n,k]^T (+ addends) (+ bias)
 * (+ Y). One CTA of 384 threads per SM (persistent), three warpgroups:
 *   warpgroup 0  the producer thread (mainloop.cuh) and, in the kernel with
 *                the addend helper, the helper thread 32 (addends.cuh);
 *                setmaxnreg.dec 40 (56 with the helper);
 *   warpgroups 1, 2  consumers (setmaxnreg.inc 232, 224 with the helper),
 *                in one of two variants:
 *     cooperative  (tile 128x256, 4 stages) both consumers share each tile,
 *                each owns 64 rows; then both run the epilogue, during
 *                which the tensor cores idle (the producer only refills;
 *                a 16-bit Y leaves through shared memory: epilogue_smem);
 *     ping-pong    (tile 128x128, 6 stages) the consumers take alternate
 *                tiles of the CTA, each a whole 128x128 tile; a turn
 *                barrier pair hands the main loop from one to the other,
 *                so one consumer's epilogue runs while the other's main
 *                loop keeps the tensor cores busy. The promoting fp8
 *                kernels of this tile (fp8.cuh) run both consumers on
 *                each tile instead, 64 rows each (kShared), with two k
 *                blocks' products in flight per consumer.
 * Template parameters: the operand types (kIn, ptx.cuh: fp16, bf16 or an
 * fp8 pair, whose kernels scale the product first: fp8.cuh), the output type, the
 * variant (kPP), kAddTma: the ping-pong kernel whose helper thread
 * loads TMA-loadable addends into shared memory (launch.cu picks it per
 * call), and kSplit: the kernel that runs work units, some of them k
 * parts of a tail tile (split.cuh; launch_split.cu picks it), instead of
 * whole tiles. Outside `if constexpr (kSplit)` and with kSplit false the
 * code is the unsplit kernels' own. */
#ifndef COMMGEMM_HOPPER_KERNEL_CUH
#define COMMGEMM_HOPPER_KERNEL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "device/hopper/addends.cuh"
#include "device/hopper/config.cuh"
#include "device/hopper/epilogue.cuh"
#include "device/hopper/fp8.cuh"
#include "device/hopper/mainloop.cuh"
#include "device/hopper/ptx.cuh"
#include "device/hopper/scheduler.cuh"
#include "device/hopper/split.cuh"
#include "device/hopper/waits.cuh"

namespace {

/* The kernel body: shared-memory layout, barriers, then each warpgroup's
 * role. One function, the roles' loops included: nvcc compiles it to the
 * code that was measured, which moving the loops into inline functions
 * changed. Its register budget is set per role (setmaxnreg): 128 x 40 +
 * 256 x 232 = 128 x 56 + 256 x 224 = 64512 of the SM's 65536. */
template <int kIn, typename OutT, bool kPP, bool kAddTma, bool kSplit = false>
__global__ void __launch_bounds__(kThreads, 1)
    hgemm_kernel(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_x_own,
                 const __grid_constant__ CUtensorMap map_w, const __grid_constant__ CUtensorMap map_y,
                 const __grid_constant__ addend_maps amaps,
                 const hgemm_params p) {
    using C = cfg<kPP>;
    constexpr int kStages = C::stages;
    constexpr int kStageK = stage_k(kIn);
    static_assert(!kAddTma || kPP, "kAddTma: the ping-pong kernel's addend form");
    constexpr bool kHelper = kPP && kAddTma;
    /* the promoting fp8 kernels (fp8.cuh); their epilogue stores T */
    constexpr bool kPromote = out_type<OutT>::promote;
    static_assert(!kPromote || (in_is_fp8(kIn) && !kAddTma), "promotion: fp8, without the addend helper");
    static_assert(!kSplit || (!kAddTma && !out_type<OutT>::act), "the tail split: plain GEMMs only");
    /* both consumers read every stage: the cooperative kernels, and the
     * promoting kernels of 128 x 128 tiles (below) */
    constexpr bool kShared = !kPP || kPromote;
    using EpiT = typename epilogue_type<OutT>::type;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    uint32_t base = (smem_addr(smem_raw) + 1023u) & ~1023u;
    uint32_t smem_a = base;                                      /* kStages x 16 KiB */
    uint32_t smem_b = base + kStages * kStageBytesA;             /* kStages x C::bytes_b */
    uint32_t slots = base + kStages * C::stage_bytes; /* kHelper: 2 x kAddendSlot; cooperative: Y's staging */
    uint32_t full_bar = slots + (kHelper ? 2 * kAddendSlot : 0) + C::y_stage_bytes; /* kStages x 8 bytes */
    uint32_t empty_bar = full_bar + kStages * 8;                 /* kStages x 8 bytes */
    uint32_t turn_bar = empty_bar + kStages * 8;                 /* 2 x 8 bytes (ping-pong) */
    uint32_t afull_bar = turn_bar + 16;                          /* 2 x 2 x 8 bytes (addend_tma_helper) */
    uint32_t aempty_bar = afull_bar + 32;                        /* 2 x 8 bytes (addend_tma_helper) */
    /* then the tile queue (kQueueBytes) and the producer's map of ready m
     * tiles (kReadyTiles / 8 bytes, produce) */
    const tile_queue queue = {aempty_bar + 16, aempty_bar + 32, aempty_bar + 48};
    /* The helper kernel keeps the static schedule: its helper thread
     * follows the static order. */
    const bool dynamic = !kHelper && p.tile_counter != nullptr;
    /* The warpgroup is broadcast from lane 0: the compiler then knows it
     * (and the consumer index, its ring position, the wgmma descriptors)
     * is warp-uniform and keeps the main loop in uniform registers. */
    int warpgroup = __shfl_sync(0xFFFFFFFFu, (int)(threadIdx.x / 128), 0);
    int tiles = p.tiles_m * p.tiles_n;
    /* what the schedule hands out: tiles, or the split kernels' units */
    const int work = kSplit ? p.units : tiles;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) {
            mbar_init(full_bar + 8 * s, 1); /* the producer's arrive.expect_tx */
            /* one arrive per consumer warpgroup that reads the stage */
            mbar_init(empty_bar + 8 * s, kShared ? 2 : 1);
        }
        mbar_init(turn_bar, 1);
        mbar_init(turn_bar + 8, 1);
        if (kHelper)
            for (int c = 0; c < 2; c++) {
                mbar_init(afull_bar + 16 * c, 1); /* the helper's arrive.expect_tx */
                mbar_init(afull_bar + 16 * c + 8, 1);
                mbar_init(aempty_bar + 8 * c, 4); /* one arrive per warp of the reading consumer */
            }
        if (dynamic)
            for (int s = 0; s < 2; s++) {
                mbar_init(queue.full + 8 * s, 1);
                mbar_init(queue.empty + 8 * s, kShared ? 8 : 4); /* one arrive per reading warp */
            }
        /* Make the initialised barriers visible to the async proxy (TMA). */
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        if (kHelper)
            asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        else
            asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        /* The helper's warp leaves on a branch the compiler knows to be
         * warp-uniform (the warp index broadcast): branching on
         * threadIdx.x == 32 here would keep the producer's k loop in
         * ordinary registers. */
        if (kHelper && __shfl_sync(0xFFFFFFFFu, (int)(threadIdx.x / 32), 0) == 1) {
            if (threadIdx.x == 32) addend_tma_helper(p, amaps, slots, afull_bar, aempty_bar);
            return;
        }
        if (threadIdx.x != 0) return;
        asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&map_x) : "memory");
        if (p.own_tile1 > p.own_tile0)
            asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&map_x_own) : "memory");
        asm volatile("prefetch.tensormap [%0];" ::"l"((uint64_t)&map_w) : "memory");
        int stage = 0;
        uint32_t phase = 0;
        bool waiting = p.row_flags != nullptr;
        unsigned long long epoch = waiting ? flag_epoch(p) : 0, seen = 0;
        /* the map of ready m tiles (produce), after the barriers */
        unsigned int *ready = (unsigned int *)(smem_raw + (aempty_bar + 16 + kQueueBytes - smem_addr(smem_raw)));
        if (waiting)
#pragma unroll 1
            for (int i = 0; i < kReadyTiles / 32 && i * 32 < p.tiles_m; i++) ready[i] = 0;
        if (dynamic) {
            /* The next tile is claimed before this one's loads and read
             * after them: the atomic's round trip stays off the path to
             * the tile's first TMA load. The claim of value tiles - 1 is
             * the launch's last (each CTA's claims end with one past the
             * tiles: tiles claims in all), so its CTA resets the counter. */
            unsigned int *counter = p.tile_counter;
            int j = 0;
            for (int t = blockIdx.x; t < work; j++) {
                unsigned int v = atomicAdd(counter, 1u);
                queue_put(queue, j, t);
                int tile = t, kb0 = 0, kb1 = p.k_blocks, r;
                if constexpr (kSplit) unit_of_warp(p, t, &tile, &kb0, &kb1, &r, 1u);
                produce<kStages, C, kStageK>(p, &map_x, &map_x_own, &map_w, smem_a, smem_b, full_bar, empty_bar,
                                             tile, kb0, kb1, stage, phase, waiting, epoch, seen, ready);
                if (v == (unsigned int)work - 1u) *(volatile unsigned int *)counter = 0u;
                long long next = (long long)gridDim.x + v;
                /* the producer thread is the warp's only one left; the
                 * shuffle tells the compiler the tile (an atomic's result)
                 * is warp-uniform, which keeps the k loop's TMA
                 * coordinates in uniform registers */
                t = __shfl_sync(1u, next < work ? (int)next : work, 0);
            }
            queue_put(queue, j, -1);
            queue_put(queue, j + 1, -1);
        } else {
            for (int t = blockIdx.x; t < work; t += gridDim.x) {
                int tile = t, kb0 = 0, kb1 = p.k_blocks, r;
                if constexpr (kSplit) unit_of_warp(p, t, &tile, &kb0, &kb1, &r, 1u);
                produce<kStages, C, kStageK>(p, &map_x, &map_x_own, &map_w, smem_a, smem_b, full_bar, empty_bar,
                                             tile, kb0, kb1, stage, phase, waiting, epoch, seen, ready);
            }
        }
        return;
    }

    if (kHelper)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
    else
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    int consumer = warpgroup - 1;
    bool leader = threadIdx.x % 128 == 0;
    unsigned long long epoch = p.addend_waits ? flag_epoch(p) : 0;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.f;

    if (kShared) {
        /* Cooperative: both consumers walk every tile of the CTA, each its
         * 64 rows (A rows 64 consumer ..), one wgmma.m64n256 per k step;
         * the promoting kernels of 128 x 128 tiles (kPP) the same way, one
         * wgmma.m64n128 per k step. */
        int stage = 0;
        uint32_t phase = 0;
        /* this consumer's staging buffers of Y (epilogue_smem) */
        const uint32_t y_stage = slots + (uint32_t)consumer * 2 * kBox16;
        for (int u = 0;; u++) {
            int t;
            if (dynamic) {
                t = queue_get(queue, u);
                if (t < 0) break;
            } else {
                t = blockIdx.x + u * gridDim.x;
                if (t >= work) break;
            }
            /* the unit's k blocks [kb0, kb1); a split unit's part (-1:
             * a whole tile) and tail tile r */
            int kb0 = 0, kb1 = p.k_blocks, part = -1, r = 0;
            if constexpr (kSplit) part = unit_of_warp(p, t, &t, &kb0, &kb1, &r, 0xFFFFFFFFu);
            int tm, tn;
            tile_coords(p, t, &tm, &tn);
            if constexpr (kPromote && kPP) {
                /* The k blocks in groups of kGroup: within a group, block
                 * i's product goes into t0 or t1 (i even or odd) while
                 * block i - 1's, in the other, is scaled and added into
                 * d[0 .. 63], so that the tensor cores hold this
                 * consumer's next product during the additions; only the
                 * group's last addition waits for the tensor cores. No
                 * product is in flight from one group to the next: ptxas
                 * serialises every wgmma of a loop in whose back edge an
                 * accumulator that the loop reads is in flight. */
                constexpr int kGroup = 4;
                const int row0 = tm * kTileM + consumer * 64;
                const int row = row0 + 16 * ((threadIdx.x % 128) / 32) + (threadIdx.x % 32) / 4;
                const bool block = p.x_bs != nullptr;
                float t0[64], t1[64];
#pragma unroll
                for (int i = 0; i < 64; i++) d[i] = 0.f;
                /* Block scaling: the x scales of the thread's two rows for
                 * the next group's blocks (na, nb), loaded a group ahead,
                 * and W's 32 blocks at a time (wl: the chunk of this
                 * group, wn: the next, loaded a group ahead:
                 * fp8_block_w32); all after this tile's first full barrier
                 * (fp8.cuh). Each group's factors (sa, sb: x times W) are
                 * taken from them before the next group's loads go out:
                 * ptxas gives all these loads one scoreboard, so the first
                 * use of a loaded value after a load waits for that load
                 * too. */
                float na[kGroup], nb[kGroup], sa[kGroup], sb[kGroup], wl = 1.f, wn = 1.f;
#pragma unroll
                for (int i = 0; i < kGroup; i++) na[i] = nb[i] = sa[i] = sb[i] = 1.f;
                fp8_scales sc{}; /* per-tensor scales (fp8_load_scales) */
                auto load = [&](int g) {
#pragma unroll
                    for (int i = 0; i < kGroup; i++)
                        if (g + i < kb1) na[i] = fp8_block_x(p, row, g + i), nb[i] = fp8_block_x(p, row + 8, g + i);
                    if (((g - kb0) & 31) == 0) wn = fp8_block_w32(p, tn, g);
                };
                for (int g = kb0; g < kb1; g += kGroup) {
                    const int n = min(kGroup, kb1 - g);
                    /* block g + i: its stage and phase, its product into ti */
                    auto product = [&](float(&ti)[64], int i) {
                        int s = stage + i;
                        uint32_t ph = phase;
                        if (s >= kStages) s -= kStages, ph ^= 1;
                        mbar_wait(full_bar + 8 * s, ph);
                        fp8_block_product<kIn>(ti, smem_desc_sw128(smem_a + s * kStageBytesA + consumer * 64 * 128),
                                               smem_desc_sw128(smem_b + s * C::bytes_b));
                    };
                    /* the group's factors, then the next group's loads;
                     * the first group's loads come first, after the
                     * tile's first full barrier */
                    auto scales = [&] {
                        if (!block) {
                            if (g == kb0) sc = fp8_load_scales(p, row0);
                            return;
                        }
                        if (g == kb0) load(g);
                        if (((g - kb0) & 31) == 0) wl = wn;
#pragma unroll
                        for (int i = 0; i < kGroup; i++) {
                            const float w = fp8_lane(wl, (g + i - kb0) & 31);
                            sa[i] = na[i] * w, sb[i] = nb[i] * w;
                        }
                        if (g + kGroup < kb1) load(g + kGroup);
                    };
                    /* block g + i's addition, its stage handed back */
                    auto add = [&](float(&to)[64], int i) {
                        fp8_add_scaled<0>(d, to, sa[i], sb[i]);
                        int s = stage + i;
                        if (s >= kStages) s -= kStages;
                        if (leader) mbar_arrive(empty_bar + 8 * s);
                    };
                    static_assert(kGroup == 4 && kStages >= kGroup, "the group below; one wrap of the ring");
                    product(t0, 0);
                    if (n == 1) {
                        scales();
                        wgmma_wait<0>();
                        add(t0, 0);
                    } else {
                        product(t1, 1);
                        scales();
                        wgmma_wait<1>();
                        add(t0, 0);
                        if (n == 2) {
                            wgmma_wait<0>();
                            add(t1, 1);
                        } else {
                            product(t0, 2);
                            wgmma_wait<1>();
                            add(t1, 1);
                            if (n == 3) {
                                wgmma_wait<0>();
                                add(t0, 2);
                            } else {
                                product(t1, 3);
                                wgmma_wait<1>();
                                add(t0, 2);
                                wgmma_wait<0>();
                                add(t1, 3);
                            }
                        }
                    }
                    stage += n;
                    if (stage >= kStages) stage -= kStages, phase ^= 1;
                }
                if constexpr (kSplit)
                    if (part >= 0 && !split_finish<256, 64>(p, d, r, part, consumer)) continue;
                if (!block) fp8_scale_rows<0, 16>(d, sc);
                if (p.addend_waits) wait_addend_flags(p, (long long)row0, 64, consumer, epoch);
                if (p.naddends) add_addends<0, 16>(p, d, row0, tn * C::tile_n);
                epilogue<EpiT, 0, 16, false>(p, d, row0, tn * C::tile_n);
                continue;
            } else if constexpr (kPromote) {
                /* Per k block: the two 64 x 128 halves of the consumer's
                 * 64 x 256 block, each promoted with its W block's scale. */
                const int row = tm * kTileM + consumer * 64 + 16 * ((threadIdx.x % 128) / 32) + (threadIdx.x % 32) / 4;
                const bool block = p.x_bs != nullptr;
                float tp[64]; /* the k block's sum (fp8_block_product) */
#pragma unroll
                for (int i = 0; i < 128; i++) d[i] = 0.f;
                /* block scaling: the scales of this k block's rows (xa,
                 * xb: loaded a stage ahead) and of W's two blocks (lane j
                 * of wl0, wl1, which hold the 32 blocks from the chunk's
                 * first, kb - j; the next 32 loaded on the chunk's last
                 * stage: fp8_block_w32), all after this tile's first full
                 * barrier (fp8.cuh). While the first half's product runs,
                 * the stage takes its factors from them and then issues
                 * the next loads: ptxas gives all these loads one
                 * scoreboard, so the first use of a loaded value after a
                 * load waits for that load too. */
                float xa = 1.f, xb = 1.f, wl0 = 1.f, wl1 = 1.f;
                fp8_scales sc{}; /* per-tensor scales (fp8_load_scales) */
                /* Consumer 1 starts the CTA's first unit after consumer
                 * 0's first product has completed (named barrier 3,
                 * `offset_consumers`), so that their waits and additions
                 * do not coincide. */
                if (u == 0 && consumer == 1) offset_consumers(false);
                if (u == 0 && consumer == 0 && kb0 == kb1) offset_consumers(true);
                for (int kb = kb0; kb < kb1; kb++) {
                    mbar_wait(full_bar + 8 * stage, phase);
                    uint64_t desc_a = smem_desc_sw128(smem_a + stage * kStageBytesA + consumer * 64 * 128);
                    uint32_t b = smem_b + stage * C::bytes_b;
                    fp8_block_product<kIn>(tp, desc_a, smem_desc_sw128(b));
                    const int j = (kb - kb0) & 31;
                    float s0a = 1.f, s0b = 1.f, s1a = 1.f, s1b = 1.f;
                    if (block) {
                        if (kb == kb0) {
                            xa = fp8_block_x(p, row, kb), xb = fp8_block_x(p, row + 8, kb);
                            wl0 = fp8_block_w32(p, 2 * tn, kb), wl1 = fp8_block_w32(p, 2 * tn + 1, kb);
                        }
                        const float w0 = fp8_lane(wl0, j), w1 = fp8_lane(wl1, j);
                        s0a = xa * w0, s0b = xb * w0, s1a = xa * w1, s1b = xb * w1;
                        if (j == 31 && kb + 1 < kb1)
                            wl0 = fp8_block_w32(p, 2 * tn, kb + 1), wl1 = fp8_block_w32(p, 2 * tn + 1, kb + 1);
                        if (kb + 1 < kb1) xa = fp8_block_x(p, row, kb + 1), xb = fp8_block_x(p, row + 8, kb + 1);
                    } else if (kb == kb0) {
                        sc = fp8_load_scales(p, tm * kTileM + consumer * 64);
                    }
                    wgmma_wait<0>();
                    if (u == 0 && kb == kb0 && consumer == 0) offset_consumers(true);
                    fp8_add_scaled<0>(d, tp, s0a, s0b);
                    fp8_block_product<kIn>(tp, desc_a, smem_desc_sw128(b + 128 * 128));
                    wgmma_wait<0>();
                    fp8_add_scaled<64>(d, tp, s1a, s1b);
                    if (leader) mbar_arrive(empty_bar + 8 * stage);
                    if (++stage == kStages) {
                        stage = 0;
                        phase ^= 1;
                    }
                }
                if constexpr (kSplit)
                    if (part >= 0 && !split_finish<256>(p, d, r, part, consumer)) continue;
                if (!block) fp8_scale_rows<0, 32>(d, sc);
                if (p.addend_waits) wait_addend_flags(p, (long long)tm * kTileM + consumer * 64, 64, consumer, epoch);
                if (p.naddends) add_addends<0, 32>(p, d, tm * kTileM + consumer * 64, tn * C::tile_n);
                epilogue_coop<EpiT, kSplit>(p, &map_y, y_stage, 1 + consumer, d, tm * kTileM + consumer * 64, tn * C::tile_n,
                                            part < 0);
                continue;
            }
            /* counted from 0 (the unit's first block): the counter stays
             * in a uniform register, as in the unsplit kernels */
            int prev = 0, blocks = kb1 - kb0;
            [[maybe_unused]] fp8_scales sc{}; /* fp8: the rows' scales (fp8_load_scales) */
            for (int kb = 0; kb < blocks; kb++) {
                mbar_wait(full_bar + 8 * stage, phase);
                if constexpr (in_is_fp8(kIn))
                    if (kb == 0) sc = fp8_load_scales(p, tm * kTileM + consumer * 64);
                uint64_t desc_a = smem_desc_sw128(smem_a + stage * kStageBytesA + consumer * 64 * 128);
                uint64_t desc_b = smem_desc_sw128(smem_b + stage * C::bytes_b);
                fence_accumulators(d);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < 4; kk++) /* 4 k steps of 32 bytes per row */
                    wgmma_m64n256<kIn>(d, desc_a + 2 * kk, desc_b + 2 * kk, (kb > 0 || kk > 0) ? 1u : 0u);
                wgmma_commit();
                fence_accumulators(d);
                /* At most this stage's group in flight: the previous
                 * stage's reads are done, hand it back to the producer. */
                wgmma_wait<1>();
                fence_accumulators(d);
                if (kb > 0 && leader) mbar_arrive(empty_bar + 8 * prev);
                prev = stage;
                if (++stage == kStages) {
                    stage = 0;
                    phase ^= 1;
                }
            }
            wgmma_wait<0>();
            fence_accumulators(d);
            if (leader) mbar_arrive(empty_bar + 8 * prev);
            if constexpr (kSplit)
                if (part >= 0 && !split_finish<256>(p, d, r, part, consumer)) continue;
            if constexpr (in_is_fp8(kIn)) fp8_scale_rows<0, 32>(d, sc);
            if (p.addend_waits) wait_addend_flags(p, (long long)tm * kTileM + consumer * 64, 64, consumer, epoch);
            if (p.naddends) add_addends<0, 32>(p, d, tm * kTileM + consumer * 64, tn * C::tile_n);
            epilogue_coop<EpiT, kSplit>(p, &map_y, y_stage, 1 + consumer, d, tm * kTileM + consumer * 64, tn * C::tile_n,
                                        part < 0);
        }
        /* the TMA stores read the staging buffers until they complete */
        if (p.y_tma && leader) bulk_wait_all();
        return;
    }

    /* Ping-pong: consumer c computes the CTA-local tiles i = c, c + 2, ...
     * (global tile blockIdx.x + i * gridDim.x, or the queue's i-th), all
     * 128 rows of each, and skips the other's ring positions. Before the
     * main loop of tile i > 0 it waits on turn[c], which the other consumer
     * arrives on once it has waited on every full barrier of tile i - 1.
     * That keeps the two main loops from interleaving (the tensor cores
     * serve one at a time; the other runs its epilogue) and keeps every
     * mbarrier parity wait at most one phase ahead: when tile i starts,
     * every ring position before i * k_blocks has completed. The turn
     * barriers alternate strictly, so their parity is unambiguous. */
    uint32_t turn_phase = 0;
    uint32_t auses = 0; /* the helper kernel: this consumer's uses of its full barriers */
    for (long long i = consumer;; i += 2) {
        int t;
        if (dynamic) {
            t = queue_get(queue, (int)i);
            if (t < 0) break;
        } else {
            long long tl = blockIdx.x + i * gridDim.x;
            if (tl >= work) break;
            t = (int)tl;
        }
        int kb0 = 0, kb1 = p.k_blocks, part = -1, r = 0; /* as in the cooperative loop */
        if constexpr (kSplit) part = unit_of_warp(p, t, &t, &kb0, &kb1, &r, 0xFFFFFFFFu);
        unsigned long long pos = (unsigned long long)i * (unsigned long long)p.k_blocks;
        int tm, tn;
        tile_coords(p, t, &tm, &tn);
        if (i > 0) {
            mbar_wait(turn_bar + 8 * consumer, turn_phase);
            turn_phase ^= 1;
        }
        int stage;
        uint32_t phase;
        if constexpr (kSplit) {
            /* units differ in length: the ring position is where the
             * other consumer's unit ended (split.cuh, handoff) */
            (void)pos;
            stage = 0, phase = 0;
            if (i > 0) {
                handoff_get(queue.full + kHandoffOffset + 4 * consumer, &stage, &phase);
                /* every thread's read before the leader's next turn
                 * arrive, after which the other consumer writes the word
                 * again */
                warpgroup_sync(1 + consumer);
            }
        } else {
            ring_at<kStages>(pos, &stage, &phase);
        }
        int prev = 0, blocks = kb1 - kb0; /* from 0, as in the cooperative loop */
        [[maybe_unused]] fp8_scales s0{}, s1{}; /* fp8: as there, rows 0-63 and 64-127 */
        for (int kb = 0; kb < blocks; kb++) {
            mbar_wait(full_bar + 8 * stage, phase);
            if constexpr (in_is_fp8(kIn))
                if (kb == 0) s0 = fp8_load_scales(p, tm * kTileM), s1 = fp8_load_scales(p, tm * kTileM + 64);
            uint32_t a0 = smem_a + stage * kStageBytesA;
            uint64_t desc_a0 = smem_desc_sw128(a0);            /* rows 0-63 */
            uint64_t desc_a1 = smem_desc_sw128(a0 + 64 * 128); /* rows 64-127 */
            uint64_t desc_b = smem_desc_sw128(smem_b + stage * C::bytes_b);
            fence_accumulators(d);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < 4; kk++) { /* 4 k steps of 32 bytes per row */
                uint32_t scale = (kb > 0 || kk > 0) ? 1u : 0u;
                wgmma_m64n128<kIn, 0>(d, desc_a0 + 2 * kk, desc_b + 2 * kk, scale);
                wgmma_m64n128<kIn, 64>(d, desc_a1 + 2 * kk, desc_b + 2 * kk, scale);
            }
            wgmma_commit();
            fence_accumulators(d);
            wgmma_wait<1>();
            fence_accumulators(d);
            if (kb > 0 && leader) mbar_arrive(empty_bar + 8 * prev);
            prev = stage;
            if (++stage == kStages) {
                stage = 0;
                phase ^= 1;
            }
        }
        /* Every full barrier of this tile has been waited on: the other
         * consumer may start its main loop. */
        if constexpr (kSplit)
            if (leader) handoff_put(queue.full + kHandoffOffset + 4 * (consumer ^ 1), stage, phase);
        if (leader) mbar_arrive(turn_bar + 8 * (consumer ^ 1));
        wgmma_wait<0>();
        fence_accumulators(d);
        if (leader) mbar_arrive(empty_bar + 8 * prev);
        if constexpr (kSplit)
            if (part >= 0 && !split_finish<128>(p, d, r, part, 0)) continue;
        if constexpr (in_is_fp8(kIn)) {
            fp8_scale_rows<0, 16>(d, s0);
            fp8_scale_rows<64, 16>(d, s1);
        }
        if (kHelper) { /* launch.cu runs it only when the helper loads the addends */
            uint32_t afull = afull_bar + 16 * consumer;
            if (p.addend_dtype == CGM_DTYPE_BF16)
                auses = add_addends_slots<__nv_bfloat16>(p, d, slots, afull, aempty_bar, auses);
            else if (p.addend_dtype == CGM_DTYPE_FP16)
                auses = add_addends_slots<__half>(p, d, slots, afull, aempty_bar, auses);
            else
                auses = add_addends_slots<float>(p, d, slots, afull, aempty_bar, auses);
        } else {
            if (p.addend_waits) wait_addend_flags(p, (long long)tm * kTileM, kTileM, consumer, epoch);
            if (p.naddends) add_addends_tile<EpiT>(p, d, tm * kTileM, tn * C::tile_n);
        }
        epilogue<EpiT, 0, 16, false>(p, d, tm * kTileM, tn * C::tile_n);
        epilogue<EpiT, 64, 16, false>(p, d, tm * kTileM + 64, tn * C::tile_n);
    }
}

} // namespace

#endif
