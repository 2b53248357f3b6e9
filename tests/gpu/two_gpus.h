/* The GPU 0 <-> GPU 1 tools' common check (copybench, gemmbeside; not
 * tests): 0 when both GPUs are there and can map each other's memory,
 * else 77 (the skip code) after printing why on stdout. */
#ifndef COMMGEMM_TESTS_GPU_TWO_GPUS_H
#define COMMGEMM_TESTS_GPU_TWO_GPUS_H
#include <stdio.h>

#include <cuda_runtime_api.h>

static inline int two_peer_gpus_or_skip(const char *tool) {
    int ndev = 0, can01 = 0, can10 = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
        printf("skip: %s needs two GPUs, found %d\n", tool, ndev);
        return 77;
    }
    if (cudaDeviceCanAccessPeer(&can01, 0, 1) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&can10, 1, 0) != cudaSuccess || !can01 || !can10) {
        printf("skip: %s: GPUs 0 and 1 cannot access each other's memory\n", tool);
        return 77;
    }
    return 0;
}
#endif
