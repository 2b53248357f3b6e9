/* The Hopper GEMM's main loop, the producer's side: the ring of
 * shared-memory stages between the producer (one thread: TMA loads of an X
 * and a W box per k block, completing on the stage's full barrier) and the
 * consumers (wgmma over each full stage, then an arrive on its empty
 * barrier; their loops are in the kernel body, kernel.cuh, which keeps
 * every role's loop in one function).
 *
 * Every role counts ring positions the same way, position = (CTA-local
 * tile index) * k_blocks + k block, so stage = position % stages and
 * phase = (position / stages) & 1 agree without other handshakes. A fresh
 * mbarrier counts as having completed the phase before phase 0: the
 * producer's first pass waits for parity 1 and does not block. */
#ifndef COMMGEMM_HOPPER_MAINLOOP_CUH
#define COMMGEMM_HOPPER_MAINLOOP_CUH

#include <stdint.h>

#include "device/hopper/config.cuh"
#include "device/hopper/ptx.cuh"
#include "device/hopper/scheduler.cuh"
#include "device/hopper/waits.cuh"

namespace {

/* The producer's work for one tile: its k blocks into the ring (stage,
 * phase: the next position), after the tile's row flags (waiting, epoch,
 * seen: wait_row_flags). Tiles inside the own rows read them from x_own,
 * unflagged. `ready` is the producer's map of m tiles whose flags it
 * already saw ready: for those the check (about 60 instructions before the
 * tile's first TMA load, on the producer's path) costs one shared-memory
 * load. Only this thread reads and writes the map. */
template <int kStages, typename C, int kStageK> /* kStageK: k elements per stage (stage_k) */
__device__ __forceinline__ void produce(const hgemm_params &p, const CUtensorMap *map_x,
                                        const CUtensorMap *map_x_own, const CUtensorMap *map_w, uint32_t smem_a,
                                        uint32_t smem_b, uint32_t full_bar, uint32_t empty_bar, int t, int kb0,
                                        int kb1, int &stage, uint32_t &phase, bool &waiting,
                                        unsigned long long epoch, unsigned long long &seen, unsigned int *ready) {
    int tm, tn;
    tile_coords(p, t, &tm, &tn);
    bool own = tm >= p.own_tile0 && tm < p.own_tile1;
    const CUtensorMap *mx = own ? map_x_own : map_x;
    int xrow = own ? tm * kTileM - (int)p.own_row0 : tm * kTileM;
    if (waiting && !own) {
        bool mapped = tm < kReadyTiles;
        unsigned int bit = 1u << (tm & 31), word = mapped ? ready[tm >> 5] : 0u;
        if (!(word & bit)) {
            waiting = wait_row_flags(p, tm, epoch, &seen);
            if (waiting && mapped) ready[tm >> 5] = word | bit;
        }
    }
    for (int kb = kb0; kb < kb1; kb++) {
        mbar_wait(empty_bar + 8 * stage, phase ^ 1);
        mbar_arrive_expect_tx(full_bar + 8 * stage, C::stage_bytes);
        tma_load_2d(smem_a + stage * kStageBytesA, mx, kb * kStageK, xrow, full_bar + 8 * stage);
        tma_load_2d(smem_b + stage * C::bytes_b, map_w, kb * kStageK, tn * C::tile_n, full_bar + 8 * stage);
        if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
        }
    }
}

} // namespace

#endif
