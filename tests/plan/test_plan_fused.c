/* The fused algorithm's geometry (plan_fused.c), which the p2p executor and
 * the kernel's host side share: pieces, the tiles that read the own rows in
 * place, the own rows copied instead, and the AG tile order, checked
 * exhaustively over small m, P, ranks and tile sizes. */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "plan/plan.h"

/* Pieces: at most `splits` per shard, a multiple of the tile, and no
 * smaller than needed (one tile less would need more pieces). */
static void test_piece_rows(const void *param) {
    (void)param;
    for (int64_t m = 1; m <= 700; m += 3)
        for (int P = 1; P <= 8; P++)
            for (int S = 1; S <= 5; S++) {
                int64_t rpf = plan_fused_piece_rows(m, P, S, 16);
                int64_t shard = (m + P - 1) / P;
                CHECK(rpf % 16 == 0 && rpf >= 16);
                CHECK((shard + rpf - 1) / rpf <= S);
                if (rpf > 16) CHECK((shard + rpf - 16 - 1) / (rpf - 16) > S);
            }
}

/* Own rows: every one is in a tile wholly inside them or copied, never
 * both; copies lie in the own rows. */
static void test_own_rows(const void *param) {
    (void)param;
    const int T = 8;
    for (int64_t m = 1; m <= 90; m++)
        for (int P = 1; P <= 7; P++)
            for (int r = 0; r < P; r++) {
                int64_t rows = plan_shard_rows(m, r, P), row0 = plan_shard_offset(m, r, P);
                int64_t t0, t1, head, tail;
                plan_fused_inside_tiles(m, row0, rows, T, &t0, &t1);
                plan_fused_own_copies(m, row0, rows, T, &head, &tail);
                CHECK(row0 <= head && head <= tail && tail <= row0 + rows);
                CHECK(t0 <= t1 && t1 <= (m + T - 1) / T);
                for (int64_t g = 0; g < m; g++) {
                    bool own = g >= row0 && g < row0 + rows;
                    bool inside = g / T >= t0 && g / T < t1;
                    bool copied = g < head || g >= tail;
                    if (inside && !own)
                        TEST_FAIL("m=%lld P=%d r=%d: tile %lld is inside the own rows [%lld, %lld) but holds row %lld",
                                  (long long)m, P, r, (long long)(g / T), (long long)row0,
                                  (long long)(row0 + rows), (long long)g);
                    if (own && inside == copied)
                        TEST_FAIL("m=%lld P=%d r=%d: own row %lld is %s", (long long)m, P, r, (long long)g,
                                  inside ? "both read in place and copied" : "neither read in place nor copied");
                }
            }
}

/* A tile's position in a fused order on rank r of P (m rows, tiles of T). */
typedef int (*position_fn)(int64_t tile, int64_t m, int P, int r, int T);
typedef int64_t (*order_fn)(int64_t m, int nranks, int rank, int tile_rows, int *order);

/* For m 1..120, P 1..6, every rank: `make` writes a permutation of the
 * tiles whose positions never decrease, rows ascending within one. */
static void check_orders(order_fn make, position_fn position) {
    const int T = 8;
    for (int64_t m = 1; m <= 120; m++)
        for (int P = 1; P <= 6; P++)
            for (int r = 0; r < P; r++) {
                int64_t tiles = (m + T - 1) / T;
                int *order = malloc((size_t)tiles * sizeof *order);
                char *seen = calloc((size_t)tiles, 1);
                CHECK_INT_EQ(make(m, P, r, T, order), tiles);
                int last_pos = -1;
                int64_t last_tile = -1;
                for (int64_t i = 0; i < tiles; i++) {
                    int t = order[i];
                    CHECK(t >= 0 && t < tiles && !seen[t]);
                    seen[t] = 1;
                    int pos = position(t, m, P, r, T);
                    CHECK(pos >= last_pos);
                    if (pos == last_pos) CHECK(t > last_tile);
                    last_pos = pos, last_tile = t;
                }
                free(order);
                free(seen);
            }
}

/* AG: the arrival position of the latest shard the tile touches (mine 0,
 * rank - 1 next, ...). */
static int ag_position(int64_t t, int64_t m, int P, int r, int T) {
    int64_t block = (m + P - 1) / P;
    int64_t r0 = t * T, r1 = (r0 + T < m ? r0 + T : m) - 1;
    int pos = 0;
    for (int64_t j = r0 / block; j <= r1 / block; j++) {
        int p = (int)(((r - j) % P + P) % P);
        if (p > pos) pos = p;
    }
    return pos;
}

/* RS: the shard of the tile's first row, (shard - rank - 1) mod P (rank + 1
 * first, mine last). */
static int rs_position(int64_t t, int64_t m, int P, int r, int T) {
    int j = (int)(t * T / ((m + P - 1) / P));
    return ((j - r - 1) % P + P) % P;
}

/* AG order: a permutation; own tiles first; then by the arrival position
 * of the latest shard a tile touches (rank - 1 first), rows ascending
 * within one position. */
static void test_tile_order(const void *param) {
    (void)param;
    check_orders(plan_fused_tile_order, ag_position);
}

/* The one-kernel GEMM+RS order: a permutation; the shard of a tile's first
 * row at position (shard - rank - 1) mod P (rank + 1 first, mine last),
 * positions never decrease, rows ascending within one; with P = 2 and
 * aligned shards, exactly the peer's tiles then mine. */
static void test_rs_tile_order(const void *param) {
    (void)param;
    check_orders(plan_fused_rs_tile_order, rs_position);
    int order[8];
    CHECK_INT_EQ(plan_fused_rs_tile_order(64, 2, 0, 8, order), 8);
    for (int i = 0; i < 8; i++) CHECK_INT_EQ(order[i], (i + 4) % 8); /* rows 32.. first */
    CHECK_INT_EQ(plan_fused_rs_tile_order(64, 2, 1, 8, order), 8);
    for (int i = 0; i < 8; i++) CHECK_INT_EQ(order[i], i);
}

/* The one-kernel GEMM+RS on the device, modelled: the kernel's persistent
 * CTAs take linear tiles c, c + G, ... and map them through its
 * rasterization (groups of plan_fused_group_m m tiles, m fastest within a
 * group, tiles_n columns) and plan_fused_rs_tile_order. Own tiles wait for
 * the peers, whose pushes need every peer tile: no CTA may reach an own
 * tile before all of its peer tiles (a deadlock on two GPUs otherwise,
 * docs/PERFORMANCE.md 4i). And each piece's tiles are one contiguous run of
 * linear tiles, in push order, so pieces finish one after another. */
static int tile_of(int64_t t, int g, int64_t tiles_m, int64_t tiles_n, const int *order) {
    int64_t group = t / (g * tiles_n), first = group * g;
    int64_t size = tiles_m - first < g ? tiles_m - first : g;
    int64_t rest = t - group * g * tiles_n;
    return order[first + rest % size];
}

static void test_rs_kernel_schedule(const void *param) {
    (void)param;
    const int T = 128, grids[] = {1, 7, 131};
    const int64_t widths[] = {1, 3, 32};
    for (int P = 2; P <= 8; P++)
        for (int64_t shard_tiles = 1; shard_tiles <= 40; shard_tiles++)
            for (int S = 1; S <= 8; S++) {
                int64_t m = P * shard_tiles * T, tiles_m = P * shard_tiles;
                int64_t piece_tiles = plan_fused_piece_rows(m, P, S, T) / T;
                int g = plan_fused_group_m(shard_tiles, piece_tiles, 16);
                CHECK(g >= 1 && g <= 16 && shard_tiles % g == 0 && piece_tiles % g == 0);
                int *order = malloc((size_t)tiles_m * sizeof *order);
                for (int r = 0; r < P; r += P - 1) { /* the first and the last rank */
                    CHECK_INT_EQ(plan_fused_rs_tile_order(m, P, r, T, order), tiles_m);
                    for (int wi = 0; wi < 3; wi++) {
                        int64_t tn = widths[wi], total = tiles_m * tn;
                        /* Pieces in push order: shard r+1's pieces, then r+2's, ...;
                         * key(tile) = position * pieces-per-shard + piece. */
                        int64_t last_key = -1;
                        for (int64_t t = 0; t < total; t++) {
                            int tm = tile_of(t, g, tiles_m, tn, order);
                            int64_t j = tm / shard_tiles, q = (tm % shard_tiles) / piece_tiles;
                            int64_t pos = ((j - r - 1) % P + P) % P;
                            int64_t key = pos * (shard_tiles + 1) + q;
                            if (key < last_key)
                                TEST_FAIL("P=%d shard %lld tiles, S=%d, r=%d, %lld columns: linear tile %lld "
                                          "(m tile %d) comes after a later piece", P, (long long)shard_tiles, S, r,
                                          (long long)tn, (long long)t, tm);
                            last_key = key;
                        }
                        for (int gi = 0; gi < 3; gi++)
                            for (int c = 0; c < grids[gi]; c++) {
                                int seen_own = 0;
                                for (int64_t t = c; t < total; t += grids[gi]) {
                                    int own = tile_of(t, g, tiles_m, tn, order) / shard_tiles == r;
                                    if (seen_own && !own)
                                        TEST_FAIL("P=%d, S=%d, r=%d: CTA %d of %d reaches a peer tile after an own "
                                                  "tile", P, S, r, c, grids[gi]);
                                    seen_own |= own;
                                }
                            }
                    }
                }
                free(order);
            }
    /* Groups never above the maximum, 16 when both divide. */
    CHECK_INT_EQ(plan_fused_group_m(32, 16, 16), 16);
    CHECK_INT_EQ(plan_fused_group_m(32, 8, 16), 8);
    CHECK_INT_EQ(plan_fused_group_m(12, 6, 16), 6);
    CHECK_INT_EQ(plan_fused_group_m(7, 7, 16), 7);
    CHECK_INT_EQ(plan_fused_group_m(13, 5, 16), 1);
}

/* Tapered pushes: segments cover the pieces in order; shrinking: sizes
 * never grow and the last is one piece; growing: the mirror image, the
 * first is one piece; about log2(pieces) + 1 segments either way. */
static void test_taper(const void *param) {
    (void)param;
    int first[300], mirror[300];
    CHECK_INT_EQ(plan_fused_taper(0, false, first), 0);
    CHECK_INT_EQ(plan_fused_taper(0, true, first), 0);
    for (int n = 1; n <= 300; n++) {
        int segs = plan_fused_taper(n, false, first);
        CHECK(segs >= 1 && segs <= n);
        CHECK_INT_EQ(first[0], 0);
        int prev = n + 1;
        for (int i = 0; i < segs; i++) {
            int end = i + 1 < segs ? first[i + 1] : n;
            int size = end - first[i];
            CHECK(size >= 1 && size <= prev);
            prev = size;
        }
        CHECK_INT_EQ(n - first[segs - 1], 1);
        int bits = 0;
        while ((1 << bits) < n) bits++;
        CHECK(segs <= bits + 1);
        /* growing: segment i has the size of shrinking segment segs-1-i */
        CHECK_INT_EQ(plan_fused_taper(n, true, mirror), segs);
        CHECK_INT_EQ(mirror[0], 0);
        for (int i = 0; i < segs; i++) {
            int end = i + 1 < segs ? mirror[i + 1] : n;
            int k = segs - 1 - i;
            int end_k = k + 1 < segs ? first[k + 1] : n;
            CHECK_INT_EQ(end - mirror[i], end_k - first[k]);
        }
    }
    /* 8 pieces: 4, 2, 1, 1 and 1, 1, 2, 4. */
    CHECK_INT_EQ(plan_fused_taper(8, false, first), 4);
    CHECK(first[0] == 0 && first[1] == 4 && first[2] == 6 && first[3] == 7);
    CHECK_INT_EQ(plan_fused_taper(8, true, first), 4);
    CHECK(first[0] == 0 && first[1] == 1 && first[2] == 2 && first[3] == 4);
}

static void register_cases(void) {
    test_add("taper", test_taper, NULL);
    test_add("piece_rows", test_piece_rows, NULL);
    test_add("own_rows", test_own_rows, NULL);
    test_add("tile_order", test_tile_order, NULL);
    test_add("rs_tile_order", test_rs_tile_order, NULL);
    test_add("rs_kernel_schedule", test_rs_kernel_schedule, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
