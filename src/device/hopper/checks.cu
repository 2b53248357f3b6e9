/* Host-only self-checks of the Hopper GEMM's scheduler arithmetic, for the
 * tests (no device needed): the multiply-high division (fastdiv) against
 * '/', and tile_coords against its division form. */
#include <stdio.h>
#include <string.h>

#include "device/hopper/config.cuh"
#include "device/hopper/scheduler.cuh"
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

} // namespace

extern "C" long long cgm_hgemm_fastdiv_check(char *why, size_t len) {
    long long divisions = check_divisions(why, len);
    if (divisions < 0) return -1;
    long long coords = check_coords(why, len);
    return coords < 0 ? -1 : divisions + coords;
}
