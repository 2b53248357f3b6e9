/* GPU pieces shared by the GPU backends (p2p, nccl, cublasmp), not a
 * backend: CUDA/cuBLAS/NCCL error reporting, the probe's common checks,
 * bounded NCCL exchanges, the autotuner's GPU hooks, a cached cuBLASLt GEMM
 * for row-major operands, and peer-mapped memory. */
#ifndef COMMGEMM_GPU_H
#define COMMGEMM_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- errors */

/* Each records the detail (what failed, the library's own words, where, and
 * what to do) and returns CGM_ERROR_CUDA / _CUBLAS / _NCCL
 * (CGM_ERROR_OUT_OF_MEMORY for allocation failures). */
cgm_status cgm_cuda_fail(cudaError_t err, const char *what, const char *file,
                         int line);
cgm_status cgm_cublas_fail(cublasStatus_t err, const char *what,
                           const char *file, int line);
cgm_status cgm_nccl_fail(ncclResult_t err, const char *what, const char *file,
                         int line);

/* A bounded wait from the host: polls `event` (or `stream` when event is
 * NULL) until the work before it is done, yielding between polls for the
 * first 100 us and sleeping 20 us after that. Returns CGM_SUCCESS when it
 * is done; the status of a CUDA error; the status of `check(ctx)` (called
 * every poll when not NULL, e.g. a backend's asynchronous error) when that
 * is not CGM_SUCCESS; after timeout_ms, CGM_ERROR_TIMEOUT with *expired set
 * to true and NO detail recorded: the caller says what it waited for. */
cgm_status cgm_gpu_wait_done(cudaEvent_t event, cudaStream_t stream,
                             int64_t timeout_ms,
                             cgm_status (*check)(void *ctx), void *ctx,
                             bool *expired);

/* In a function with a `cgm_status status` and a `fail:` label. */
#define CGM_CUDA_TRY(call)                                                   \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            status = cgm_cuda_fail(e_, #call, __FILE__, __LINE__);           \
            goto fail;                                                       \
        }                                                                    \
    } while (0)
#define CGM_CUBLAS_TRY(call)                                                 \
    do {                                                                     \
        cublasStatus_t e_ = (call);                                          \
        if (e_ != CUBLAS_STATUS_SUCCESS) {                                   \
            status = cgm_cublas_fail(e_, #call, __FILE__, __LINE__);         \
            goto fail;                                                       \
        }                                                                    \
    } while (0)
#define CGM_NCCL_TRY(call)                                                   \
    do {                                                                     \
        ncclResult_t e_ = (call);                                            \
        if (e_ != ncclSuccess) {                                             \
            status = cgm_nccl_fail(e_, #call, __FILE__, __LINE__);           \
            goto fail;                                                       \
        }                                                                    \
    } while (0)
#define CGM_TRY(expr)                                                        \
    do {                                                                     \
        status = (expr);                                                     \
        if (status != CGM_SUCCESS) goto fail;                                \
    } while (0)

/* cudaDataType of a commgemm dtype (fp32/bf16/fp16). */
cudaDataType_t cgm_cuda_dtype(cgm_dtype dtype);
/* ncclDataType_t likewise. */
ncclDataType_t cgm_nccl_dtype(cgm_dtype dtype);

/* The checks every GPU backend's probe starts with: an NCCL bootstrap (or,
 * with local_ok, a LOCAL one) and at least one visible CUDA device
 * (*device_count, may be NULL). CGM_ERROR_UNAVAILABLE naming `backend` and
 * what to do otherwise. */
cgm_status cgm_gpu_probe_common(const cgm_comm *comm, const char *backend,
                                bool local_ok, int *device_count);

/* Whether `stream` is being captured into a graph (false on error). */
bool cgm_stream_capturing(cudaStream_t stream);

/* ------------------------------------------------------------------ NCCL */

/* All-gathers `bytes` from every rank into recv (nranks * bytes, rank
 * major) through NCCL on an internal stream, host buffers in and out.
 * Bounded by timeout_ms: CGM_ERROR_TIMEOUT if the ranks do not all arrive
 * (the NCCL communicator is then unusable). Never call inside capture. */
cgm_status cgm_nccl_allgather_host(void *nccl_comm, int nranks,
                                   const void *send, void *recv, size_t bytes,
                                   int64_t timeout_ms);
/* The same over the comm's bootstrap: cgm_nccl_allgather_host for an NCCL
 * comm, cgm_comm_local_allgather for a LOCAL one; bounded by the comm's
 * timeout either way. Collective, eager; never inside capture. */
cgm_status cgm_gpu_allgather_host(cgm_comm *comm, const void *send,
                                  void *recv, size_t bytes);

/* ------------------------------------------------------------ autotuner */

/* cgm_tune_hooks shared by the GPU backends (gpu_tune.c): the capture
 * check of the call's stream; timing of warmup + reps runs through the
 * call's backend with CUDA events on the call's stream (bounded wait); the
 * exchanges (agree: with the call's signature, compared like the backends'
 * agreement check; allgather: words only) through cgm_gpu_allgather_host
 * on the comm's bootstrap; the CUDA device's name. */
bool cgm_gpu_tune_capturing(const cgm_call *call);
cgm_status cgm_gpu_tune_measure(cgm_comm *comm, void *state,
                                const cgm_call *call, int warmup, int reps,
                                int64_t *ns);
cgm_status cgm_gpu_tune_agree(cgm_comm *comm, void *state,
                              const cgm_call *call, const int64_t *mine,
                              int words, int64_t *all);
cgm_status cgm_gpu_tune_allgather(cgm_comm *comm, void *state,
                                  const int64_t *mine, int words,
                                  int64_t *all);
/* An all-gather of `bytes` per rank (rank major into recv), collective. */
typedef cgm_status (*cgm_gpu_exchange_fn)(cgm_comm *comm, void *state,
                                          const void *send, void *recv,
                                          size_t bytes);
/* cgm_gpu_tune_agree over a backend's own exchange (the p2p backend's, in
 * its workspace) instead of the bootstrap's. */
cgm_status cgm_gpu_tune_agree_via(cgm_gpu_exchange_fn exchange,
                                  cgm_comm *comm, void *state,
                                  const cgm_call *call, const int64_t *mine,
                                  int words, int64_t *all);
void cgm_gpu_tune_device_name(const cgm_comm *comm, void *state, char *buf,
                              size_t len);
/* A GPU backend's cgm_tune_hooks: its own candidates, the shared rest
 * (agreement is checked once per signature, not every call). */
#define CGM_GPU_TUNE_HOOKS(candidates_fn)                                    \
    {                                                                        \
        .candidates = (candidates_fn), .capturing = cgm_gpu_tune_capturing,  \
        .measure = cgm_gpu_tune_measure, .agree = cgm_gpu_tune_agree,        \
        .allgather = cgm_gpu_tune_allgather, .agree_every_call = false,      \
        .device_name = cgm_gpu_tune_device_name                              \
    }

/* -------------------------------------------------------------- cuBLASLt */

/* How the fp8 operands of cgm_lt_gemm are scaled (dequantized: the value
 * of an fp8 element is the element times its scale). */
typedef enum cgm_lt_scaling {
    CGM_LT_SCALE_NONE = 0,   /* bf16/fp16/fp32 inputs: no scales */
    CGM_LT_SCALE_TENSOR = 1, /* one fp32 scale for X, one for W */
    /* X: one fp32 per row and 128 columns (1x128 along k); W: one per
     * 128x128 block. Hopper only (sm_90), bf16/fp16/fp32 output. */
    CGM_LT_SCALE_BLOCK = 2
} cgm_lt_scaling;

/* Floats between two groups' tensor scales (16 bytes: cuBLASLt takes
 * scale pointers 16-byte aligned only). */
#define CGM_LT_TENSOR_SCALE_STRIDE 4

/* One row-major GEMM in the layouts of commgemm.h:
 *   Y[m, n] (= or +=) opX(X) . opW(W) (+ bias[n]), fp32 compute.
 *
 * fp8 (in_dtype CGM_DTYPE_FP8_E4M3 or _E5M2), cuBLASLt's FP8 kernels:
 *   Y = y_scale * (dequant(X) . dequant(W)^T + bias)
 * - layout TN only (both operands k-major, as Hopper's FP8 kernels need);
 *   k, ldx and ldw multiples of 16, X and W 16-byte aligned;
 * - X of in_dtype, W of w_dtype: e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3
 *   (e5m2 x e5m2 is refused: cuBLASLt has no such kernel);
 * - out_dtype bf16, fp16, fp32, or (tensor scaling only) fp8: e4m3, or
 *   e5m2 when an input is e5m2. fp8 output: no accumulate, no addend;
 * - the bias: bf16 for bf16 and fp32 outputs, fp16 for fp16 outputs,
 *   bf16 or fp16 (bias_dtype) for fp8 outputs;
 * - scaling TENSOR: x_scale, w_scale point to one fp32 each (NULL: 1);
 *   scaling BLOCK (cuBLASLt's VEC128_32F for X, BLK128x128_32F for W),
 *   L = ceil(k / 128) blocks along k, L4 = L rounded up to a multiple of 4;
 *   m and n multiples of 4, scale pointers 16-byte aligned:
 *     x_scale: [L][m] (m-contiguous): X row i, columns 128b..128b+127
 *              scaled by x_scale[b * m + i];
 *     w_scale: [ceil(n / 128)][L4]: W rows 128j.., columns 128b..
 *              scaled by w_scale[j * L4 + b];
 * - y_scale (fp8 output only): one fp32 that multiplies the result before
 *   it is rounded to fp8 (NULL: 1); amax_y (fp8 output only, cuBLASLt
 *   computes it for no other): one fp32 set to max |result| before
 *   y_scale, for this call's rows (zeroed on the stream first, then
 *   written by cuBLASLt);
 * - fast_accum: cuBLASLt's FP8 fast accumulation (no periodic promotion
 *   to fp32; less accurate); tensor scaling only.
 * Row chunks of one GEMM: cgm_lt_fp8_chunk gives a chunk its X scales. */
typedef struct cgm_lt_gemm_args {
    cgm_layout layout;
    cgm_dtype in_dtype;  /* X, and W unless w_dtype says otherwise */
    cgm_dtype out_dtype; /* Y, the addend, and the bias (fp8: above) */
    int64_t m, n, k;
    const void *x; /* [m, k] (TN, NN) or [k, m] (NT) */
    int64_t ldx;
    const void *w; /* [n, k] (TN) or [k, n] (NN, NT) */
    int64_t ldw;
    void *y; /* [m, n] */
    int64_t ldy;
    const void *bias; /* n elements of out_dtype (fp8: bias_dtype), or NULL */
    bool accumulate;  /* beta = 1 */
    /* Y = X . W^T + addend (+ bias): cuBLASLt's C, [m, n] of out_dtype with
     * leading dimension ld_addend, read only; NULL: none. Not with
     * accumulate. */
    const void *addend;
    int64_t ld_addend;
    bool allow_tf32;  /* fp32 inputs only */
    /* Split-k parts added in fp32 only (CGM_GEMM_REDUCTION_FP32); false:
     * any scheme cuBLASLt's heuristic picks. */
    bool reduction_fp32;

    /* fp8 inputs only (above); zeroed otherwise. */
    cgm_dtype w_dtype;    /* W's fp8 dtype; CGM_DTYPE_FP32 (0): in_dtype */
    cgm_dtype bias_dtype; /* the bias's dtype (checked against the rule) */
    cgm_lt_scaling scaling;
    const float *x_scale, *w_scale; /* device memory */
    /* Rows of X each x_scale group covers, for cgm_lt_fp8_chunk: group g
     * (rows g * x_scale_rows ..) has its scales at x_scale + 4 * g (TENSOR: one
     * float per 16 bytes, as cuBLASLt wants every scale pointer 16-byte
     * aligned) or
     * x_scale + L * g * x_scale_rows (BLOCK, [L][x_scale_rows] each). 0:
     * one group of m rows. cgm_lt_gemm takes 0 or m. */
    int64_t x_scale_rows;
    const float *y_scale; /* device memory, or NULL */
    float *amax_y;        /* device memory, or NULL */
    bool fast_accum;

    /* The epilogue (commgemm.h's "Epilogues", lt_epilogue.c), bf16/fp16/
     * fp32 inputs only. cuBLASLt sees Y^T (column-major n x m), so:
     *   GELU / GELU_AUX: GELU(_AUX)(_BIAS); aux (GELU_AUX: written) [m, n]
     *     of out_dtype, leading dimension ld_aux: cuBLASLt's aux, the
     *     same column-major n x m with ld ld_aux;
     *   DGELU, DGELU_BGRAD: aux read; no bias; DGELU_BGRAD writes the sums
     *     over these m rows of each of the n columns (cuBLASLt's bias
     *     gradient of D's rows) as n values into bgrad, overwriting;
     *   BGRAD: bgrad (m values) = the sums of op(X)'s rows along k:
     *     cuBLASLt's BGRADB (X is its B); no bias.
     * bgrad's values are of cgm_lt_bgrad_dtype(out_dtype) (lt_epilogue.h).
     * ld_aux a multiple of 8, aux and bgrad 16-byte aligned. */
    cgm_epilogue epilogue;
    void *aux;
    int64_t ld_aux;
    float *bgrad;
} cgm_lt_gemm_args;

/* The caller's whole GEMM of a validated call: every field from `c`
 * (layout, dtypes, m, n, k, X, W, Y and their lds, bias and its dtype,
 * accumulate, TF32, the GEMM reduction; fp8: tensor scaling with the
 * scales of c->x and c->w as dequantization scales; y_scale, amax_y and
 * fast_accum are the caller's: cuBLASLt's D scale multiplies).
 * Executors override what a chunk changes (m, x, y, lds, epilogue, and
 * for fp8 X's scales: cgm_lt_fp8_chunk). */
cgm_lt_gemm_args cgm_lt_args_from_call(const cgm_call *c);

/* fp8: X's scales for the chunk of rows [row0, row0 + rows) of `whole`
 * (the GEMM over the whole X, whose x_scale and x_scale_rows describe
 * every group's scales). Sets chunk->x_scale and chunk->x_scale_rows (0)
 * and nothing else; a no-op for other inputs.
 *   TENSOR: the rows must lie in one group: x_scale + group.
 *   BLOCK: the rows must be one whole group (x_scale + L * row0), or any
 *   rows when k <= 128 (x_scale + row0; L = 1); a part of a group is
 *   CGM_ERROR_NOT_SUPPORTED (X's scales are m-contiguous per k-block, so a
 *   part is no pointer offset): cgm_lt_fp8_pack_x_scales copies one.
 * CGM_ERROR_INVALID_ARGUMENT for rows outside whole's m. */
cgm_status cgm_lt_fp8_chunk(const cgm_lt_gemm_args *whole, int64_t row0,
                            int64_t rows, cgm_lt_gemm_args *chunk);
/* BLOCK scaling: copies the X scales of rows [row0, row0 + rows) of
 * `whole` (within one group) into dst ([L][rows], L * rows floats,
 * 16-byte aligned) on `stream` (one 2D copy, capturable), and points
 * chunk->x_scale at it (chunk->x_scale_rows = 0). dst must stay untouched
 * until the chunk's cgm_lt_gemm has run on `stream`. */
cgm_status cgm_lt_fp8_pack_x_scales(const cgm_lt_gemm_args *whole,
                                    int64_t row0, int64_t rows, float *dst,
                                    cudaStream_t stream,
                                    cgm_lt_gemm_args *chunk);

/* The GPU backends' (p2p chunked, nccl) epilogue rules, for their check
 * hooks (lt_epilogue.c): CGM_SUCCESS for NONE; CGM_ERROR_NOT_SUPPORTED,
 * naming `backend` and what to do, for fp8 inputs with an epilogue, a bias
 * with BGRAD, and an aux whose ld is not a multiple of 8 or that is not
 * 16-byte aligned where cuBLASLt writes or reads it (AG+GEMM, bulk's GEMM,
 * one rank). */
cgm_status cgm_gpu_epilogue_check(const char *backend, const cgm_call *c,
                                  int nranks);

typedef struct cgm_lt cgm_lt;

/* Reads COMMGEMM_LT_SEARCH (CGM_ERROR_INVALID_ARGUMENT out of range). */
cgm_status cgm_lt_create(cgm_lt **out);
void cgm_lt_destroy(cgm_lt *lt);
/* Enqueues the GEMM on `stream` (the fp8 rules above are checked first:
 * CGM_ERROR_NOT_SUPPORTED or _INVALID_ARGUMENT saying what is expected).
 * Descriptors and the algorithm are cached per shape, alignment,
 * workspace, reduction, dtypes (X, W, Y, C, bias), fp8 scaling, fast
 * accumulation, and which fp8 scale and amax pointers are set: the first
 * call of a shape queries the heuristic (host only) and takes its first
 * algorithm, unless cgm_lt_prepare searched the shape before; later calls,
 * including inside graph capture, reuse the entry. workspace: device
 * memory of workspace_bytes for cuBLASLt. */
cgm_status cgm_lt_gemm(cgm_lt *lt, const cgm_lt_gemm_args *args,
                       void *workspace, size_t workspace_bytes,
                       cudaStream_t stream);
/* Before an op enqueues anything (executors' dry pass, never during graph
 * capture): makes sure the entry of `args` exists, and on its first sight
 * times the heuristic's first COMMGEMM_LT_SEARCH algorithms (default 8; 1:
 * no timing) on a private stream, with the real X, W, bias and scales
 * (read only) and a scratch output and amax (stream-ordered allocation,
 * freed after), and keeps the fastest when it beats the heuristic's first
 * by 1 % or more. The
 * private stream first waits for the work already on `after` (the caller's
 * stream: earlier ops, whose flags the peers' earlier ops satisfy), so the
 * timings do not share the GPU with it; the host waits for the private
 * stream at most timeout_ms (CGM_ERROR_TIMEOUT). A scratch allocation that
 * fails leaves the heuristic's choice (INFO log). Same workspace_bytes as
 * the later cgm_lt_gemm. */
cgm_status cgm_lt_prepare(cgm_lt *lt, const cgm_lt_gemm_args *args,
                          size_t workspace_bytes, cudaStream_t after,
                          int64_t timeout_ms);
/* Tests and tools: this handle's number of algorithms to time (1..16),
 * instead of COMMGEMM_LT_SEARCH (read once per process). */
void cgm_lt_set_search(cgm_lt *lt, int search);
/* Shapes timed so far, and how many of them changed the algorithm. */
void cgm_lt_search_stats(const cgm_lt *lt, uint64_t *searches,
                         uint64_t *improved);

/* ------------------------------------------------------ peer-mapped memory */

/* One device allocation per rank, of the same size on every rank, mapped
 * into every rank of the comm with CUDA IPC (handles exchanged once through
 * cgm_gpu_allgather_host; one process per rank, which
 * cgm_check_node_peers checks). peer[r] is rank r's allocation as seen from
 * this rank; peer[rank] is the local one. */
typedef struct cgm_peer_mem {
    int rank, nranks;
    size_t bytes;
    void *local;
    void **peer;
    cudaIpcMemHandle_t handle; /* of `local` */
} cgm_peer_mem;

/* Local. Allocates `bytes` (zeroed) on the current device, for
 * cgm_peer_mem_open; on failure `out` holds what to destroy. */
cgm_status cgm_peer_mem_alloc(size_t bytes, cgm_peer_mem *out);
/* Collective. Maps every rank's allocation (cgm_peer_mem_alloc, the same
 * size on every rank) into every rank, with one verdict on every rank:
 * a rank that cannot map a peer's fails every rank (cgm_gpu_agree). On
 * failure `pm` still holds what cgm_peer_mem_destroy frees. */
cgm_status cgm_peer_mem_open(cgm_comm *comm, cgm_peer_mem *pm);
/* Unmaps the peers and frees the local allocation (not collective; the
 * caller makes sure no peer still uses it). Safe on a zeroed struct. */
void cgm_peer_mem_destroy(cgm_peer_mem *pm);

/* COMMGEMM_TEST_FAIL (testing only, docs/env.md): a failure injected into
 * one rank's op or init, for the tests of the paths that share a failure
 * with the peers. */
typedef struct cgm_test_fault {
    int64_t fail_at; /* this rank's op to fail, counted from 1; 0: none */
    bool init;       /* fail this rank's init (p2p backend) */
    int64_t forks;   /* ops counted so far (cgm_test_fault_after_fork) */
} cgm_test_fault;
/* Reads COMMGEMM_TEST_FAIL=RANK:N or RANK:init for this rank (zeroed when
 * unset or naming another rank); CGM_ERROR_INVALID_ARGUMENT if malformed. */
cgm_status cgm_test_fault_read(int rank, cgm_test_fault *f);
/* Called by an op of `backend` right after it forked its streams: counts
 * it, and fails (CGM_ERROR_CUDA, as a CUDA failure there would) the one
 * COMMGEMM_TEST_FAIL names. */
cgm_status cgm_test_fault_after_fork(cgm_test_fault *f, int rank,
                                     const char *backend);

/* Collective: every rank passes its own status of some local step
 * (`what`, e.g. "making the p2p backend's device resources", its detail in
 * cgm_last_error()) and every rank gets one verdict: CGM_SUCCESS if all
 * succeeded; a rank that failed gets its own status and message back; the
 * others get CGM_ERROR_PEER_FAILED naming the first rank that failed and
 * quoting its status and message. Bounded by the comm's timeout. */
cgm_status cgm_gpu_agree(cgm_comm *comm, cgm_status mine, const char *what);

/* Collective check that every rank runs on this host, in a process of its
 * own, and that this rank's device, cuda_device, can reach every peer's
 * (CUDA peer access; ranks on one device need none), the same verdict on
 * every rank. CGM_ERROR_UNAVAILABLE naming the rank and device otherwise. */
cgm_status cgm_check_node_peers(cgm_comm *comm, int cuda_device);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_GPU_H */
