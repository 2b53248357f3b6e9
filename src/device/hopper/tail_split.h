/* The Hopper GEMM's tail split, host side: which output tiles are cut
 * along k into parts, and into how many (docs/HOPPER_GEMM.md, "Tail
 * split"). Pure C, header only, no CUDA: launch.cu uses it, and
 * tests/unit/test_hgemm_tail_split.c checks it in every build.
 *
 * With T tiles on a persistent grid of G CTAs, the first W G tiles
 * (W = floor(T / G) full waves) run whole; the last R = T - W G tiles (the
 * tail: all T when T < G) are each cut into s k ranges of whole stages,
 * s work units per tile, so that the tail's R s units fill the grid
 * better than its R tiles would. s comes from a model of the tail's time
 * in stages (one stage: one k block of a tile's main loop):
 *
 *   tail(s) = ceil(R s / G) (ceil(K / s) + TAIL_SPLIT_UNIT_COST)
 *             + (s - 1) TAIL_SPLIT_PART_COST
 *
 * K the k blocks of a tile: ceil(R s / G) rounds of units, each its k
 * range plus a unit's fixed cost (its epilogue, or its partial's store),
 * then the last unit of a tile adds the other s - 1 partials. s = 1 (no
 * split) is kept unless a split saves at least 1/16 of the unsplit tail,
 * and when there is no full wave (T < G): such a GEMM (skinny m) waits on
 * memory rather than on the tensor cores, and on an H100 every skinny
 * shape of the kernel bench's sweep ran slower cut into 2, 3 or 4 parts
 * than whole, even where the parts fit one round (128 x 8192 x 8192:
 * 56.5 µs whole, 60.8, 67.3 and 69.1 µs in 2, 3 and 4 parts).
 * Cutting more tiles (the last wave and one more) needs the same rounds
 * (ceil((G + R) s / G) = s + ceil(R s / G)) and more partials, so only the
 * last partial wave is cut. */
#ifndef COMMGEMM_HOPPER_TAIL_SPLIT_H
#define COMMGEMM_HOPPER_TAIL_SPLIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TAIL_SPLIT_MAX_PARTS 8
#define TAIL_SPLIT_MIN_STAGES 4 /* k blocks per part, at least, in the model's choice */
#define TAIL_SPLIT_UNIT_COST 3  /* stages: a unit's epilogue or partial store */
#define TAIL_SPLIT_PART_COST 3  /* stages: the last unit adding one partial */

typedef struct tail_split_choice {
    int64_t whole; /* tiles [0, whole) run whole, one work unit each */
    int64_t tail;  /* tiles [whole, whole + tail) are cut into `parts` (0 when parts is 1) */
    int parts;     /* 1: no split */
} tail_split_choice;

/* The model above, in stages: the tail's R tiles cut into s parts on a
 * grid of G CTAs, K k blocks per tile (R, G, K, s >= 1). */
static inline int64_t tail_split_time(int64_t tail, int64_t grid, int64_t k_blocks, int parts) {
    int64_t rounds = (tail * parts + grid - 1) / grid;
    int64_t longest = (k_blocks + parts - 1) / parts;
    return rounds * (longest + TAIL_SPLIT_UNIT_COST) + (int64_t)(parts - 1) * TAIL_SPLIT_PART_COST;
}

/* The split of `tiles` output tiles of k_blocks stages each on a
 * persistent grid of `grid` CTAs. forced: 0 the model's choice among
 * 2 .. min(TAIL_SPLIT_MAX_PARTS, k_blocks / TAIL_SPLIT_MIN_STAGES) parts,
 * or none (always none without a full wave); 1 none; 2 .. TAIL_SPLIT_MAX_PARTS that many, at most k_blocks
 * (one stage a part). max_slots: the tile partials the workspace holds
 * (tail x parts may not exceed it); max_tail: the tail tiles its counters
 * serve. Whatever does not fit takes fewer parts, or none. */
static inline tail_split_choice tail_split_choose(int64_t tiles, int64_t grid, int64_t k_blocks, int forced,
                                           int64_t max_slots, int64_t max_tail) {
    tail_split_choice none = {tiles > 0 ? tiles : 0, 0, 1};
    if (tiles < 1 || grid < 1 || k_blocks < 2 || forced == 1) return none;
    int64_t whole = tiles / grid * grid, tail = tiles - whole;
    if (tail == 0 || tail > max_tail || (forced == 0 && whole == 0)) return none;
    int64_t cap = max_slots / tail;
    if (forced > 1) cap = cap < forced ? cap : forced;
    else cap = cap < k_blocks / TAIL_SPLIT_MIN_STAGES ? cap : k_blocks / TAIL_SPLIT_MIN_STAGES;
    if (cap > k_blocks) cap = k_blocks;
    if (cap > TAIL_SPLIT_MAX_PARTS) cap = TAIL_SPLIT_MAX_PARTS;
    if (cap < 2) return none;
    int best = forced > 1 ? (int)cap : 1;
    if (forced == 0) {
        int64_t unsplit = tail_split_time(tail, grid, k_blocks, 1), best_time = unsplit;
        for (int s = 2; s <= cap; s++) {
            int64_t t = tail_split_time(tail, grid, k_blocks, s);
            if (t < best_time) best = s, best_time = t;
        }
        if (best > 1 && 16 * (unsplit - best_time) < unsplit) best = 1;
    }
    if (best == 1) return none;
    tail_split_choice out = {whole, tail, best};
    return out;
}

/* The first k block of part j of `parts` (j = parts: k_blocks): the parts
 * differ by at most one block. */
static inline int64_t tail_split_kb(int64_t k_blocks, int parts, int j) { return (int64_t)j * k_blocks / parts; }

#ifdef __cplusplus
}
#endif

#endif
