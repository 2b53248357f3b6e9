/* The deterministic test inputs, one definition for the host harness
 * (data.c: test_value) and the GPU tests' device fills (tests/gpu/gpu_ref.cu):
 * element `index` of the tensor seeded `seed` is a multiple of 1/8 in
 * [-1, 1], so sums of products are exact in fp32 for modest k. */
#ifndef COMMGEMM_TEST_VALUES_H
#define COMMGEMM_TEST_VALUES_H

#include <stdint.h>

#ifdef __CUDACC__
#define TEST_HOST_DEVICE __host__ __device__
#else
#define TEST_HOST_DEVICE
#endif

/* MurmurHash3's 64-bit finalizer. */
static inline TEST_HOST_DEVICE uint64_t test_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static inline TEST_HOST_DEVICE float test_value_at(uint64_t seed, int64_t index) {
    uint64_t h = test_mix64(seed * 0x9e3779b97f4a7c15ull + (uint64_t)index);
    return (float)((int)(h % 17) - 8) / 8.0f;
}

#endif
