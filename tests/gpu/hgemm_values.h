/* The values the Hopper GEMM's tests and its bench (bench/kernel_bench.c)
 * compute on: multiples of 1/8 in [-1, 1] from (seed, index), so that fp32
 * sums of products are exact for the k they use, and bf16 / fp16 / fp32
 * element access on host buffers. Header only (static inline). */
#ifndef COMMGEMM_TEST_HGEMM_VALUES_H
#define COMMGEMM_TEST_HGEMM_VALUES_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "commgemm.h"

static inline uint16_t hv_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); /* RNE; no NaN in */
}
static inline float hv_bf16_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Exact for the values used here (multiples of 1/8 up to a few thousand). */
static inline uint16_t hv_fp16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    if ((u & 0x7FFFFFFF) == 0) return sign;
    int e = (int)((u >> 23) & 0xFF) - 127 + 15;
    return (uint16_t)(sign | (uint16_t)(e << 10) | (uint16_t)((u >> 13) & 0x3FF));
}
static inline float hv_fp16_float(uint16_t h) {
    int e = (h >> 10) & 0x1F, mant = h & 0x3FF;
    float v;
    if (e == 0) v = ldexpf((float)mant, -24);
    else if (e == 31) v = mant ? NAN : INFINITY;
    else v = ldexpf((float)(mant | 0x400), e - 25);
    return (h & 0x8000) ? -v : v;
}

static inline size_t hv_size(cgm_dtype t) { return t == CGM_DTYPE_FP32 ? 4 : 2; }

static inline void hv_put(void *buf, cgm_dtype t, size_t i, float v) {
    if (t == CGM_DTYPE_FP32) ((float *)buf)[i] = v;
    else if (t == CGM_DTYPE_BF16) ((uint16_t *)buf)[i] = hv_bf16_bits(v);
    else ((uint16_t *)buf)[i] = hv_fp16_bits(v);
}
static inline float hv_get(const void *buf, cgm_dtype t, size_t i) {
    if (t == CGM_DTYPE_FP32) return ((const float *)buf)[i];
    if (t == CGM_DTYPE_BF16) return hv_bf16_float(((const uint16_t *)buf)[i]);
    return hv_fp16_float(((const uint16_t *)buf)[i]);
}
/* A multiple of 1/8 in [-1, 1] from (seed, index). */
static inline float hv_value(uint64_t seed, uint64_t i) {
    uint64_t h = (seed + 1) * 0x9E3779B97F4A7C15ull ^ (i * 0xBF58476D1CE4E5B9ull);
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    return (float)((int)(h % 17) - 8) / 8.0f;
}
/* count values of dtype t seeded `seed` in a new host buffer (free it), or
 * NULL when malloc fails. */
static inline void *hv_fill(cgm_dtype t, size_t count, uint64_t seed) {
    void *buf = malloc(count * hv_size(t) + 1);
    if (buf)
        for (size_t i = 0; i < count; i++) hv_put(buf, t, i, hv_value(seed, i));
    return buf;
}

#endif
