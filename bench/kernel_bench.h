/* commgemm-kernel-bench internals: commgemm's own Hopper GEMM (cgm_hgemm)
 * timed against cuBLASLt and against itself with the fused hooks, one GPU,
 * no communication. Every bench times its contenders in interleaved rounds
 * (the order rotating each round), each a block of calls between CUDA
 * events, and reports medians (kb_time_interleaved). */
#ifndef COMMGEMM_KERNEL_BENCH_H
#define COMMGEMM_KERNEL_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "device/hopper_gemm.h"
#include "gpu/gpu.h"

#define KB_ROUNDS 30
#define KB_CALLS 4 /* back to back per timed block: the host's launch cost hidden */
#define KB_MAX_WHO 8
#define KB_MAX_SHAPES 32

/* The fp8 accumulation and scaling of both sides (--fp8): fast
 * accumulation with per-tensor scales, promotion with per-tensor scales,
 * block scaling (1x128 and 128x128, promotion implied). */
enum { KB_FP8_FAST = 0, KB_FP8_PROMOTE = 1, KB_FP8_BLOCK = 2 };

typedef struct kb_options {
    const char *bench;  /* plain, ag, fused, addend or epilogue */
    int nshapes;        /* 0: the bench's default shapes */
    long long shapes[KB_MAX_SHAPES][3];
    bool dynamic;       /* --dynamic: every cgm_hgemm call gets a tile counter */
    int only;           /* --only V (ag): time contender V alone; -1: all */
    bool sweep;         /* --sweep (plain): the sweep's shapes */
    cgm_dtype dtype;    /* --dtype (plain): X, W and Y; bf16 by default; e4m3: X and W, Y bf16 */
    bool lt_reduction_fp32; /* --lt-reduction-fp32 (plain): cuBLASLt's split-k parts added in fp32 only */
    int fp8_mode; /* --fp8 (plain, e4m3): KB_FP8_FAST, KB_FP8_PROMOTE or KB_FP8_BLOCK */
    bool split;   /* --split (plain): every cgm_hgemm call gets a tail split workspace */
    int split_parts; /* --split-parts N (plain, implies --split): tail_split N (0: the model's choice) */
} kb_options;

/* A CUDA call that must succeed: else the bench prints the call and the
 * error and exits 1 (a bench has nothing to fall back to). */
#define KB_CUDA(call) kb_cuda((call), #call, __FILE__, __LINE__)
void kb_cuda(cudaError_t e, const char *call, const char *file, int line);
/* Prints what failed and exits 1. */
void kb_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Host values (hgemm_values.h) copied to a new device buffer. */
void *kb_fill_device(cgm_dtype t, size_t count, unsigned long long seed);
void *kb_to_device(const void *host, size_t bytes);
/* The bench's cuBLASLt handle and its 32 MiB workspace. */
cgm_lt *kb_lt(void **ws, size_t *ws_bytes);
/* True on an sm_90 GPU (prop filled); else prints why the bench skips. */
bool kb_device(const char *bench, struct cudaDeviceProp *prop);
/* --split: the calls a[0 .. count) get the bench's tail split workspace
 * (split_ws, one for the process, grown to what the largest of them
 * wants and zeroed when allocated; every call runs on stream 0, one at a
 * time); returns the bytes each wants in want[i] (0: no split). */
void kb_split_ws(cgm_hgemm_args *a, int count, size_t *want);
/* Elements of a and b (bf16, count) further apart than the bench's
 * tolerance (|a - b| <= |b| / 128 + 1e-6 k). */
size_t kb_bf16_differ(const void *a, const void *b, size_t count, long long k);

/* Contenders that are cgm_hgemm calls (hg[]) and cuBLASLt calls
 * (lt_args[]): the nfirst first are hg's, or lt's when lt_first. */
typedef struct kb_contenders {
    const cgm_hgemm_args *hg;
    const cgm_lt_gemm_args *lt_args;
    int nfirst;
    bool lt_first;
    bool dynamic; /* cgm_hgemm calls get the bench's tile counter */
} kb_contenders;

/* KB_ROUNDS rounds (after 5 warm-up rounds) of the `who` contenders, the
 * order rotating each round, each a block of KB_CALLS calls on stream 0
 * between two events; t[i]: the median microseconds per call of
 * contender i. */
void kb_time_interleaved(int who, const kb_contenders *c, float *t);

/* The benches; each returns the process's exit code (77: skipped). */
int kb_plain(const kb_options *o);
int kb_ag(const kb_options *o);
int kb_fused(const kb_options *o);
int kb_addend(const kb_options *o);
int kb_epilogue(const kb_options *o);

#endif
