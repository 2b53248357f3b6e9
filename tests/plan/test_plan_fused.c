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

/* AG order: a permutation; own tiles first; then by the arrival position
 * of the latest shard a tile touches (rank - 1 first), rows ascending
 * within one position. */
static void test_tile_order(const void *param) {
    (void)param;
    check_orders(plan_fused_tile_order, ag_position);
}

static void register_cases(void) {
    test_add("piece_rows", test_piece_rows, NULL);
    test_add("own_rows", test_own_rows, NULL);
    test_add("tile_order", test_tile_order, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
