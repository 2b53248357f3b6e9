/* Host-only self-checks of the Hopper GEMM's scheduler arithmetic, for the
 * tests (no device needed): the multiply-high division (fastdiv) against
 * '/', tile_coords against its division form, and the split kernels' work
 * units (unit_of) against the tail split's parts. */
#include <stdio.h>
#include <string.h>

#include <vector>

#include "device/hopper/config.cuh"
#include "device/hopper/scheduler.cuh"
#include "device/hopper/tail_split.h"
#include "device/hopper_gemm.h"

namespace {

/* One division: fastdiv(n, d) == n / d, or false with the case in why. */
bool fastdiv_ok(int d, int n, char *why, size_t len) {
    unsigned int mul;
    int shr;
    fastdiv_init(d, &mul, &shr);
    if (fastdiv(n, mul, shr) == n / d) return true;
    if (why && len) snprintf(why, len, "fastdiv(%d, %d) = %d, expected %d", n, d, fastdiv(n, mul, shr), n / d);
    return false;
}

/* Divisors 1 .. 2^31 - 1 (every one below 4200, then growing by half),
 * dividends at their edges and spread over the range; then the largest
 * dividends for a few divisors. Returns the checks, or -1. */
long long check_divisions(char *why, size_t len) {
    long long checked = 0;
    const int big = 0x7fffffff;
    for (long long d = 1; d <= big; d = d < 4200 ? d + 1 : d * 3 / 2 + 7) {
        const long long ns[] = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, 127 * d + 5, big / 2, big - 1, big,
                                (big / d) * d, (big / d) * d - 1, (big / d - 1) * d};
        for (long long n : ns) {
            if (n < 0 || n > big) continue;
            checked++;
            if (!fastdiv_ok((int)d, (int)n, why, len)) return -1;
        }
        for (long long n = 0; n < 300000; n += 997, checked++)
            if (!fastdiv_ok((int)d, (int)n, why, len)) return -1;
    }
    for (int d : {big, big - 1, 1 << 30, (1 << 30) + 1, 3, 7, 128, 2048, 6144})
        for (long long n = big; n > big - 5000; n--, checked++)
            if (!fastdiv_ok(d, (int)n, why, len)) return -1;
    return checked;
}

/* tile_coords (with coords_init's divisors) of tile t against its division
 * form. */
bool coords_ok(int tiles_m, int tiles_n, long long t, char *why, size_t len) {
    hgemm_params p;
    memset(&p, 0, sizeof p);
    p.tiles_m = tiles_m, p.tiles_n = tiles_n;
    coords_init(&p);
    int tm, tn;
    tile_coords(p, (int)t, &tm, &tn);
    long long span = (long long)kGroupM * tiles_n, group = t / span, first = group * kGroupM;
    long long size = tiles_m - first < kGroupM ? tiles_m - first : kGroupM, r = t - group * span;
    if (tm == first + r % size && tn == r / size) return true;
    if (why && len)
        snprintf(why, len, "tile_coords(%lld) of %d x %d tiles = (%d, %d), expected (%lld, %lld)", t, tiles_m, tiles_n,
                 tm, tn, first + r % size, r / size);
    return false;
}

/* Every tile of small grids (a last group of every size), and the first
 * and last tiles of large ones. Returns the checks, or -1. */
long long check_coords(char *why, size_t len) {
    long long checked = 0;
    for (int tm = 1; tm <= 70; tm += tm < 20 ? 1 : 7)
        for (int tn : {1, 2, 3, 7, 32, 33})
            for (long long t = 0; t < (long long)tm * tn; t++, checked++)
                if (!coords_ok(tm, tn, t, why, len)) return -1;
    const long long big = 0x7fffffff;
    for (long long tm : {16777215ll, 65537ll, 131ll})
        for (long long tn : {127ll, 1ll, 16383ll}) {
            long long tiles = tm * tn;
            if (tiles > big) continue;
            for (long long t : {0ll, 1ll, tiles / 2, tiles - tn * kGroupM - 1, tiles - 2, tiles - 1}) {
                if (t < 0 || t >= tiles) continue;
                checked++;
                if (!coords_ok((int)tm, (int)tn, t, why, len)) return -1;
            }
        }
    return checked;
}

/* The units of one split (tiles [0, whole) whole, `tail` tiles in `parts`
 * of k_blocks): units [u0, units) each mapped by unit_of to a whole tile
 * (itself) or a part of a tail tile with tail_split_kb's k blocks, every
 * (tail tile, part) once. Returns the units checked, or -1. */
long long units_ok(long long whole, long long tail, int parts, int k_blocks, long long u0, char *why, size_t len) {
    hgemm_params p;
    memset(&p, 0, sizeof p);
    p.k_blocks = k_blocks;
    units_init(&p, whole, tail, parts);
    std::vector<unsigned char> seen((size_t)(tail * parts), 0);
    for (long long u = u0 < 0 ? 0 : u0; u < p.units; u++) {
        int t = -1, kb0 = -1, kb1 = -1, r = -1;
        int j = unit_of(p, (int)u, &t, &kb0, &kb1, &r);
        bool ok;
        if (u < whole) {
            ok = j == -1 && t == u && kb0 == 0 && kb1 == k_blocks;
        } else {
            long long v = u - whole, want_j = v / tail, want_r = v % tail;
            ok = j == want_j && r == want_r && t == whole + want_r && kb0 == tail_split_kb(k_blocks, parts, j) &&
                 kb1 == tail_split_kb(k_blocks, parts, j + 1) && kb0 < kb1 && !seen[(size_t)v];
            if (ok) seen[(size_t)v] = 1;
        }
        if (ok) continue;
        if (why && len)
            snprintf(why, len,
                     "unit_of(%lld) of %lld whole + %lld tail tiles x %d parts of %d k blocks = part %d of tile %d "
                     "(tail %d), k blocks [%d, %d)",
                     u, whole, tail, parts, k_blocks, j, t, r, kb0, kb1);
        return -1;
    }
    /* part j ends where part j + 1 starts (the same tail_split_kb), so the
     * parts cover a tile's k blocks when the first starts at 0 and the
     * last ends at k_blocks */
    if (tail_split_kb(k_blocks, parts, 0) != 0 || tail_split_kb(k_blocks, parts, parts) != k_blocks) {
        if (why && len) snprintf(why, len, "%d parts of %d k blocks do not cover them", parts, k_blocks);
        return -1;
    }
    return p.units - (u0 < 0 ? 0 : u0);
}

/* The splits tail_split_choose makes, forced and chosen, over tile counts
 * (small ones whole, then near 2^31 their tails only), grids and k blocks.
 * Returns the units checked, or -1. */
long long check_units(char *why, size_t len) {
    long long checked = 0;
    const long long tile_counts[] = {1, 2, 5, 7, 64, 80, 131, 132, 133, 200, 263, 320, 582, 704, 1000,
                                     (1ll << 31) - 1 - 8 * 511, 2147480000ll};
    for (long long tiles : tile_counts)
        for (int grid : {1, 3, 7, 66, 114, 132, 144})
            for (int k_blocks : {2, 3, 4, 7, 8, 9, 64, 127, 128, 1000, 1 << 25})
                for (int forced = 0; forced <= CGM_HGEMM_SPLIT_MAX_PARTS; forced++) {
                    tail_split_choice c = tail_split_choose(tiles, grid, k_blocks, forced, 1ll << 40, kSplitMaxTail);
                    if (c.parts < 2 || c.whole + c.tail * c.parts > 0x7fffffff) continue;
                    long long u0 = tiles > 100000 ? c.whole - 3 : 0;
                    long long n = units_ok(c.whole, c.tail, c.parts, k_blocks, u0, why, len);
                    if (n < 0) return -1;
                    checked += n;
                }
    return checked;
}

} // namespace

extern "C" long long cgm_hgemm_split_check(char *why, size_t len) { return check_units(why, len); }

extern "C" long long cgm_hgemm_fastdiv_check(char *why, size_t len) {
    long long divisions = check_divisions(why, len);
    if (divisions < 0) return -1;
    long long coords = check_coords(why, len);
    return coords < 0 ? -1 : divisions + coords;
}
