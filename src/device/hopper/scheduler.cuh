/* The Hopper GEMM's tile scheduler: which tile a CTA computes next and in
 * what order the tiles run.
 *   - Static (default): CTA c of a persistent grid of G takes linear tiles
 *     c, c + G, c + 2G, ...; every role (producer, consumers) computes them
 *     itself, so no handshake is needed.
 *   - Dynamic (a tile_counter): after its first tile a CTA claims the next
 *     one from a counter in global memory; the producer publishes each
 *     claim to its consumers through a two-slot queue in shared memory.
 * A linear tile index becomes (m tile, n tile) by tile_coords (grouped
 * raster, optional m_block_order); the ring position of a tile's k block
 * is (CTA-local tile index) * k_blocks + k block (ring_at). Divisions in
 * the per-tile path are multiply-high (fastdiv), with divisors the host
 * computes once per call. */
#ifndef COMMGEMM_HOPPER_SCHEDULER_CUH
#define COMMGEMM_HOPPER_SCHEDULER_CUH

#include <stdint.h>

#include "device/hopper/config.cuh"
#include "device/hopper/ptx.cuh"

namespace {

/* n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by a multiply-high and a shift
 * (as CUTLASS's FastDivmod): with s = ceil(log2 d), mul = ceil(2^(31+s) / d)
 * and n / d = umulhi(n, mul) >> (s - 1); d = 1 has mul = 0 (n / 1 = n).
 * The host computes mul and the shift once per call, so the producer's
 * per-tile flag check has no division (cgm_hgemm_fastdiv_check tests it). */
__host__ __device__ __forceinline__ void fastdiv_init(int d, unsigned int *mul, int *shr) {
    if (d <= 1) {
        *mul = 0, *shr = 0;
        return;
    }
    int s = 0;
    while ((1ll << s) < d) s++;
    *mul = (unsigned int)(((1ull << (31 + s)) + (unsigned long long)d - 1) / (unsigned long long)d);
    *shr = s - 1;
}
__host__ __device__ __forceinline__ int fastdiv(int n, unsigned int mul, int shr) {
#ifdef __CUDA_ARCH__
    return mul ? (int)(__umulhi((unsigned int)n, mul) >> shr) : n;
#else
    return mul ? (int)((unsigned int)(((unsigned long long)(unsigned int)n * mul) >> 32) >> shr) : n;
#endif
}

/* Linear tile index -> (m tile, n tile). Tiles are taken in groups of
 * kGroupM m tiles (fewer in the last group); inside a group m runs
 * fastest, so the ~#SMs tiles in flight at once share a few W column
 * blocks and kGroupM X row blocks in L2. m_block_order (if any) renames m
 * tiles (e.g. local rows first). The producer computes this before each
 * tile's first TMA load, so the divisions are multiply-high (coords_init). */
__host__ __device__ __forceinline__ void tile_coords(const hgemm_params &p, int t, int *tm, int *tn) {
    int group = fastdiv(t, p.span_mul, p.span_shr);
    int first = group * kGroupM;
    int r = t - first * p.tiles_n;
    bool last = p.tiles_m - first < kGroupM;
    int size = last ? p.tiles_m - first : kGroupM;
    int q = last ? fastdiv(r, p.last_mul, p.last_shr) : (int)((unsigned int)r / (unsigned int)kGroupM);
    *tn = q;
    int lm = first + (r - q * size);
    *tm = p.m_block_order ? p.m_block_order[lm] : lm;
}

/* Work unit u of a split kernel (hgemm_params.split_*, the tail split):
 * its tile *t and k blocks [*kb0, *kb1); returns its part j, or -1 for a
 * whole tile, with *r its tail tile (t - split_unit0). Units of one part
 * are consecutive, so the grid's first units of the tail are every tail
 * tile's first part. */
__host__ __device__ __forceinline__ int unit_of(const hgemm_params &p, int u, int *t, int *kb0, int *kb1, int *r) {
    if (u < p.split_unit0) {
        *t = u, *r = 0, *kb0 = 0, *kb1 = p.k_blocks;
        return -1;
    }
    int v = u - p.split_unit0;
    int j = fastdiv(v, p.split_tiles_mul, p.split_tiles_shr);
    *r = v - j * p.split_tiles;
    *t = p.split_unit0 + *r;
    *kb0 = fastdiv(j * p.k_blocks, p.split_parts_mul, p.split_parts_shr);
    *kb1 = fastdiv((j + 1) * p.k_blocks, p.split_parts_mul, p.split_parts_shr);
    return j;
}

/* unit_of's fields, once per call on the host (k_blocks set): tiles
 * [0, whole) whole, the next `tail` cut into `parts` (tail_split.h). */
inline void units_init(hgemm_params *p, long long whole, long long tail, int parts) {
    p->split_unit0 = (int)whole;
    p->split_tiles = (int)tail;
    p->split_parts = parts;
    p->units = (int)(whole + tail * parts);
    fastdiv_init(p->split_tiles, &p->split_tiles_mul, &p->split_tiles_shr);
    fastdiv_init(p->split_parts, &p->split_parts_mul, &p->split_parts_shr);
}

/* tile_coords' divisors, once per call on the host (tiles_m and tiles_n
 * set). */
inline void coords_init(hgemm_params *p) {
    fastdiv_init(kGroupM * p->tiles_n, &p->span_mul, &p->span_shr);
    int rest = p->tiles_m % kGroupM;
    fastdiv_init(rest ? rest : kGroupM, &p->last_mul, &p->last_shr);
}

/* The tile queue of the dynamic schedule (kernels without the addend
 * helper): the producer thread publishes each tile of its CTA (the CTA's
 * j-th, j = 0, 1, ...) in slot j & 1 before loading it, and -1 for the two
 * after the last; the consumers of tile j (ping-pong: consumer j & 1;
 * cooperative: both) read it there. full[s]: one arrive, the producer's;
 * empty[s]: one per reading warp, after its lane 0 read the slot and
 * broadcast it (a warp-uniform value: the loops stay on the uniform
 * datapath). With static tiles every role computes its own. */
struct tile_queue {
    uint32_t full, empty, slot; /* shared addresses: 2 barriers, 2 barriers, 2 ints */
};

__device__ __forceinline__ void queue_put(const tile_queue &q, int j, int t) {
    int s = j & 1;
    uint32_t use = (uint32_t)j >> 1;
    mbar_wait(q.empty + 8 * s, (use & 1) ^ 1); /* a fresh barrier passes the first time */
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(q.slot + 4 * s), "r"(t) : "memory");
    mbar_arrive(q.full + 8 * s); /* release: the slot's store is seen by whoever waits */
}

__device__ __forceinline__ int queue_get(const tile_queue &q, int j) {
    int s = j & 1;
    uint32_t use = (uint32_t)j >> 1;
    mbar_wait(q.full + 8 * s, use & 1);
    int t = 0;
    bool lane0 = threadIdx.x % 32 == 0;
    if (lane0) t = (int)ld_shared_u32(q.slot + 4 * s);
    t = __shfl_sync(0xFFFFFFFFu, t, 0);
    if (lane0) mbar_arrive(q.empty + 8 * s);
    return t;
}

/* Ring position -> (stage, phase). The producer and both consumers count
 * positions the same way: position = (CTA-local tile index) * k_blocks + kb. */
template <int kStages>
__device__ __forceinline__ void ring_at(unsigned long long pos, int *stage, uint32_t *phase) {
    *stage = (int)(pos % kStages);
    *phase = (uint32_t)((pos / kStages) & 1);
}

} // namespace

#endif
