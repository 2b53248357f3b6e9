/* The fused algorithm's geometry (docs/PLAN.md "Fused"): pure C, shared by
 * the p2p executor (src/backend/p2p/p2p_fused.c) and the kernel's host
 * side (src/device/hopper/), tested in tests/plan/test_plan_fused.c. */
#include "plan/plan.h"

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t plan_fused_piece_rows(int64_t m, int nranks, int splits,
                              int tile_rows) {
    if (nranks < 1) nranks = 1;
    if (splits < 1) splits = 1;
    if (tile_rows < 1) tile_rows = 1;
    int64_t shard = ceil_div(m > 0 ? m : 1, nranks);
    int64_t rows = ceil_div(shard, splits);
    return ceil_div(rows, tile_rows) * tile_rows;
}

void plan_fused_inside_tiles(int64_t m, int64_t row0, int64_t rows,
                             int tile_rows, int64_t *t0, int64_t *t1) {
    int64_t tiles = ceil_div(m, tile_rows), end = row0 + rows;
    *t0 = *t1 = 0;
    if (rows <= 0 || row0 < 0 || end > m) return;
    *t0 = ceil_div(row0, tile_rows);
    *t1 = end == m ? tiles : end / tile_rows;
    if (*t1 < *t0) *t1 = *t0;
}

void plan_fused_own_copies(int64_t m, int64_t row0, int64_t rows,
                           int tile_rows, int64_t *head_end,
                           int64_t *tail_start) {
    int64_t t0 = 0, t1 = 0, end = row0 + rows;
    plan_fused_inside_tiles(m, row0, rows, tile_rows, &t0, &t1);
    if (t1 <= t0) { /* no tile wholly inside: copy every own row */
        *head_end = end;
        *tail_start = end;
        return;
    }
    int64_t inside0 = t0 * tile_rows, inside1 = t1 * tile_rows;
    *head_end = inside0 < end ? (inside0 > row0 ? inside0 : row0) : end;
    *tail_start = inside1 < end ? inside1 : end;
    if (*tail_start < *head_end) *tail_start = *head_end;
}

int64_t plan_fused_tile_order(int64_t m, int nranks, int rank, int tile_rows,
                              int *order) {
    int64_t tiles = ceil_div(m, tile_rows);
    int64_t block = ceil_div(m > 0 ? m : 1, nranks);
    int64_t n = 0;
    /* Position of shard j: 0 for mine, t for r - t (its pushes reach me
     * t-th); a tile spanning shards goes with the latest. Counting by
     * position keeps row order within one. */
    for (int pos = 0; pos < nranks; pos++)
        for (int64_t t = 0; t < tiles; t++) {
            int64_t r0 = t * tile_rows;
            int64_t r1 = (r0 + tile_rows < m ? r0 + tile_rows : m) - 1;
            int latest = 0;
            for (int64_t j = r0 / block; j <= r1 / block; j++) {
                int p = (int)(((rank - j) % nranks + nranks) % nranks);
                if (p > latest) latest = p;
            }
            if (latest == pos) order[n++] = (int)t;
        }
    return n;
}
