/* The p2p backend's fp8 calls through the chunked executor (p2p_fp8.c):
 * their workspace, AG's packed rows, the GEMM steps and the reduces that
 * an fp8 call changes. docs/P2P_BACKEND.md, "FP8".
 *
 * AG+GEMM: this rank's X rows are packed at the op's start into rows of
 * pw bytes, [X row (k bytes, zero padded to a multiple of 16) | its
 * scales (16-byte aligned: TENSOR its shard's one, BLOCK its
 * ceil(k/128))], and the schedule moves those rows (1 byte per element)
 * as it moves any rows: the scales travel with their rows, and a GEMM
 * step finds them beside the bytes it reads. GEMM+RS/AR and bulk read
 * their own X and scales where the caller left them. */
#ifndef COMMGEMM_P2P_FP8_H
#define COMMGEMM_P2P_FP8_H

#include "backend/p2p/p2p.h"
#include "gpu/lt_fp8_rows.h"

#ifdef __cplusplus
extern "C" {
#endif

struct p2p_exec_ctx;

typedef struct p2p_fp8 {
    bool on;       /* the call has fp8 inputs */
    bool block;    /* BLOCK_1X128 / 128X128, else TENSOR */
    int64_t kb;    /* ceil(k / 128) */
    int64_t k16;   /* k rounded up to 16: where a packed row's scales start */
    int64_t pw;    /* AG: bytes of a packed row */
    int64_t seg;   /* rows per GEMM (an AG GEMM also stops at a shard's end) */
    cgm_fp8_call f;
    float *x_slot; /* TENSOR, not AG: this rank's X scale on 16 bytes */
    char *packed;  /* AG: this rank's rows packed, [m_r][pw] */
    char *scratch[P2P_MAX_QUEUES];
    size_t scratch_bytes;
    float *sums[P2P_MAX_QUEUES]; /* fp32 [seg][n]: reduces that finish */
    int queue;     /* the GEMM being issued: its queue's cuBLASLt workspace */
} p2p_fp8;

/* Before the dry pass (eager: grows the workspace; capture: refuses when
 * it is too small). Fills x->fp8; a no-op for other calls. */
cgm_status p2p_fp8_setup(struct p2p_exec_ctx *x, bool capturing);
/* After the fork, on the comm queue: W's side, X's slot, AG's packed own
 * rows, the amax zeroed; queues 1..nqueues-1 wait for it. */
cgm_status p2p_fp8_begin(struct p2p_exec_ctx *x, int nqueues);
/* A GEMM step of an fp8 call: g holds the step's X (rows from global row
 * x_row0), Y and m; run in segments through cgm_fp8_rows_gemm (dry pass:
 * cgm_lt_prepare of each when x->search). */
cgm_status p2p_fp8_gemm(struct p2p_exec_ctx *x, const cgm_lt_gemm_args *g,
                        int64_t x_row0, int queue, cudaStream_t stream);
/* Whether reduce `a` (bias_dtype: the bias's) writes what cgm_dev_reduce
 * cannot: an fp8 destination, or a bias of another dtype. */
bool p2p_fp8_reduce_finishes(const struct p2p_exec_ctx *x,
                             const cgm_dev_reduce_args *a);
/* Such a reduce: summed in fp32 into the queue's sums, then finished
 * (bias, accumulate, scale, saturation, amax) into a->dst. */
cgm_status p2p_fp8_reduce(struct p2p_exec_ctx *x,
                          const cgm_dev_reduce_args *a, int queue,
                          cudaStream_t stream);
/* AG: shard `shard`'s x_gathered rows [off, off + rows) from its packed
 * rows at `src` (pitch pw): the bytes, and the scales where
 * x_gathered.scale is set. */
cgm_status p2p_fp8_copy_gathered(struct p2p_exec_ctx *x, int shard,
                                 const char *src, int64_t off, int64_t rows,
                                 cudaStream_t stream);
/* The check hook's fp8 rules (before the autotuner and any exchange). */
cgm_status p2p_fp8_check(const cgm_comm *comm, const cgm_call *call);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_FP8_H */
