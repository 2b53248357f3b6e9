/* The Hopper GEMM's tail split choice (src/device/hopper/tail_split.h):
 * pure host arithmetic, header only, so it runs in every build. The
 * shapes that lost to cuBLASLt for their partial last wave get a split
 * (docs/PERFORMANCE.md's sweep on 132 SMs), whole waves and nearly full
 * tails none; over ranges of tiles, grids and k blocks the choice is the
 * model's best with the limits kept (parts, workspace, counters, forced
 * counts), and the parts of a tile's k blocks cover them evenly. The
 * kernel's side of the units (unit_of) is cgm_hgemm_split_check's
 * (test_hopper_gemm split_units, CUDA builds). */
#include "harness.h"

#include "device/hopper/tail_split.h"

#define BIG ((int64_t)1 << 40)
#define GRID 132

static int64_t tiles_of(int64_t m, int64_t n, int tile_n) { return ((m + 127) / 128) * ((n + tile_n - 1) / tile_n); }

/* The sweep's shapes that lost for their last partial wave: cooperative
 * tiles (128 x 256), 64 k (16-bit) or 128 k (fp8) a stage; and whole
 * waves, a tail of all but one CTA, too few k blocks. */
static void test_shapes(const void *p) {
    (void)p;
    static const struct {
        int64_t m, n, k, stage_k;
        int64_t whole, tail;
        int parts;
    } rows[] = {
        {8192, 1280, 8192, 64, 264, 56, 2},   /* 320 tiles: 2.42 waves */
        {4096, 2560, 8192, 64, 264, 56, 2},   /* the same tiles */
        {12344, 1504, 4096, 64, 528, 54, 2},  /* 582 tiles: 4.41 waves */
        {4096, 5504, 4096, 64, 660, 44, 3},   /* 704 tiles: 5.33 waves */
        {8192, 2752, 4096, 64, 660, 44, 3},
        {256, 10240, 8192, 64, 80, 0, 1},     /* 80 tiles on 132 SMs: no full wave, no split */
        {8192, 1280, 8192, 128, 264, 56, 2},  /* fp8: half as many stages */
        {256, 10240, 8192, 128, 80, 0, 1},
        {8192, 8448, 4096, 64, 2112, 0, 1},   /* 2112 tiles: 16 whole waves */
        {16768, 2048, 4096, 64, 1048, 0, 1},  /* 1048 tiles: a tail of 124 of 132: no split pays */
        {128, 1024, 192, 64, 4, 0, 1},        /* 3 k blocks: no part of 4 stages */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int64_t tiles = tiles_of(rows[i].m, rows[i].n, 256), kb = (rows[i].k + rows[i].stage_k - 1) / rows[i].stage_k;
        tail_split_choice c = tail_split_choose(tiles, GRID, kb, 0, BIG, 512);
        if (c.whole != rows[i].whole || c.tail != rows[i].tail || c.parts != rows[i].parts)
            TEST_FAIL("%lldx%lldx%lld (%lld k a stage): %lld whole + %lld tail tiles in %d parts, expected %lld + %lld in %d",
                      (long long)rows[i].m, (long long)rows[i].n, (long long)rows[i].k, (long long)rows[i].stage_k,
                      (long long)c.whole, (long long)c.tail, c.parts, (long long)rows[i].whole,
                      (long long)rows[i].tail, rows[i].parts);
    }
}

/* The model's choice: among 2 .. min(8, K / 4) parts the fastest (the
 * fewest parts of equal time), and only where it saves 1/16 of the
 * unsplit tail; every tile either whole or in the tail, the tail the
 * last partial wave. */
static void test_model_choice(const void *p) {
    (void)p;
    for (int64_t grid = 1; grid <= 140; grid += grid < 10 ? 1 : 13)
        for (int64_t tiles = 1; tiles <= 3 * grid + 5; tiles++)
            for (int64_t kb = 1; kb <= 70; kb += kb < 12 ? 1 : 9) {
                tail_split_choice c = tail_split_choose(tiles, grid, kb, 0, BIG, 512);
                CHECK(c.whole % grid == 0 || c.parts == 1);
                if (c.parts == 1) {
                    CHECK_INT_EQ(c.whole, tiles);
                    CHECK_INT_EQ(c.tail, 0);
                } else {
                    CHECK_INT_EQ(c.whole + c.tail, tiles);
                    CHECK(c.tail > 0 && c.tail < grid);
                    CHECK(c.parts <= TAIL_SPLIT_MAX_PARTS && c.parts * TAIL_SPLIT_MIN_STAGES <= kb);
                }
                int64_t tail = tiles % grid, cap = kb / TAIL_SPLIT_MIN_STAGES;
                if (cap > TAIL_SPLIT_MAX_PARTS) cap = TAIL_SPLIT_MAX_PARTS;
                int64_t unsplit = tail ? tail_split_time(tail, grid, kb, 1) : 0, best = unsplit;
                int want = 1;
                for (int s = 2; tail && s <= cap; s++)
                    if (tail_split_time(tail, grid, kb, s) < best) best = tail_split_time(tail, grid, kb, s), want = s;
                if (16 * (unsplit - best) < unsplit || tiles < grid) want = 1;
                if (c.parts != want)
                    TEST_FAIL("%lld tiles on %lld CTAs, %lld k blocks: %d parts, the model's best is %d",
                              (long long)tiles, (long long)grid, (long long)kb, c.parts, want);
            }
}

/* Forced part counts (cgm_hgemm_args.tail_split) and the limits: at most
 * one part per k block, as many as the workspace's slots hold, none past
 * the counters' tail tiles or with tail_split 1. */
static void test_limits(const void *p) {
    (void)p;
    tail_split_choice c = tail_split_choose(10, 132, 2, 2, BIG, 512); /* k of 2 stages in 2 parts */
    CHECK_INT_EQ(c.parts, 2);
    CHECK_INT_EQ(c.tail, 10);
    CHECK_INT_EQ(tail_split_choose(10, 132, 2, 8, BIG, 512).parts, 2);  /* one stage a part */
    CHECK_INT_EQ(tail_split_choose(10, 132, 1, 2, BIG, 512).parts, 1);  /* one stage: nothing to cut */
    CHECK_INT_EQ(tail_split_choose(10, 132, 64, 5, BIG, 512).parts, 5); /* forced, though the model takes 8 */
    CHECK_INT_EQ(tail_split_choose(142, 132, 64, 0, BIG, 512).parts, 4); /* 4 and 5 model the same: the fewer */
    CHECK_INT_EQ(tail_split_choose(10, 132, 64, 0, BIG, 512).parts, 1);  /* no full wave: the model keeps it whole */
    CHECK_INT_EQ(tail_split_choose(10, 132, 64, 1, BIG, 512).parts, 1);
    CHECK_INT_EQ(tail_split_choose(142, 132, 64, 0, 35, 512).parts, 3); /* 35 slots: 3 parts of 10 tiles */
    CHECK_INT_EQ(tail_split_choose(10, 132, 64, 6, 35, 512).parts, 3);
    CHECK_INT_EQ(tail_split_choose(142, 132, 64, 0, 19, 512).parts, 1);
    CHECK_INT_EQ(tail_split_choose(142, 132, 64, 0, BIG, 9).parts, 1); /* counters for 9 tail tiles */
    CHECK_INT_EQ(tail_split_choose(264, 132, 64, 4, BIG, 512).parts, 1); /* whole waves: no tail */
    c = tail_split_choose(13, 3, 64, 4, BIG, 512); /* 4 whole waves of 3, a tail of 1 */
    CHECK_INT_EQ(c.whole, 12);
    CHECK_INT_EQ(c.tail, 1);
    CHECK_INT_EQ(c.parts, 4);
    for (int forced = 2; forced <= TAIL_SPLIT_MAX_PARTS; forced++)
        for (int64_t kb = 1; kb <= 20; kb++)
            for (int64_t slots = 0; slots <= 40; slots += 7) {
                c = tail_split_choose(5, 8, kb, forced, slots, 512);
                int64_t want = forced < kb ? forced : kb;
                if (want > slots / 5) want = slots / 5;
                CHECK_INT_EQ(c.parts, want < 2 ? 1 : want);
            }
}

/* A tile's parts: consecutive, from 0 to its k blocks, sizes differing by
 * at most one block, none empty. */
static void test_part_ranges(const void *p) {
    (void)p;
    for (int64_t kb = 1; kb <= 300; kb++)
        for (int parts = 1; parts <= TAIL_SPLIT_MAX_PARTS && parts <= kb; parts++) {
            CHECK_INT_EQ(tail_split_kb(kb, parts, 0), 0);
            CHECK_INT_EQ(tail_split_kb(kb, parts, parts), kb);
            for (int j = 0; j < parts; j++) {
                int64_t size = tail_split_kb(kb, parts, j + 1) - tail_split_kb(kb, parts, j);
                CHECK(size == kb / parts || size == kb / parts + 1);
            }
        }
    CHECK_INT_EQ(tail_split_kb(1 << 25, 8, 7), 7 << 22); /* no overflow at the largest k */
}

static void register_cases(void) {
    test_add("shapes", test_shapes, NULL);
    test_add("model_choice", test_model_choice, NULL);
    test_add("limits", test_limits, NULL);
    test_add("part_ranges", test_part_ranges, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
