/* What the GPU timing tools share (copybench, gemmbeside, ipcbench; not
 * tests). */
#ifndef COMMGEMM_TESTS_GPU_GPU_TOOLS_H
#define COMMGEMM_TESTS_GPU_GPU_TOOLS_H
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

/* 0 when GPUs 0 and 1 are there and can map each other's memory, else 77
 * (the skip code) after printing why on stdout. */
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
static inline int tool_cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0 .. n) and returns v[n / 2], the (upper) median. */
static inline float tool_median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, tool_cmp_float);
    return v[n / 2];
}
#endif
