/* The cublasmp backend's per-comm state (CUDA side). */
#ifndef COMMGEMM_CUBLASMP_STATE_H
#define COMMGEMM_CUBLASMP_STATE_H

#include "backend/cublasmp/cublasmp.h"
#include "device/device.h"
#include "gpu/gpu.h"

#define CMP_CACHE 16        /* shapes kept per comm */

typedef struct cmp_key {
    int op, layout, in_dtype, out_dtype, has_bias, accumulate, compute, algo;
    int w_dtype, bias_dtype, epilogue, has_aux, bgrad_dtype, has_amax;
    int64_t m, n, k, ldx, ldw, ldy, ld_aux;
} cmp_key;

typedef struct cmp_entry {
    bool used;
    bool empty; /* nothing to compute (no columns): skip */
    uint64_t last_use;
    cmp_key key;
    cmp_problem prob;
    cmp_geom dgeom;      /* D as created (the fp32 buffer's lld when used) */
    int a_type, b_type, d_type; /* cudaDataType_t of A (W), B (X), D */
    cublasMpMatrixDescriptor_t a, b, d;
    cublasMpMatmulDescriptor_t mm;
    void *host_ws;
    size_t host_bytes, dev_bytes;
    /* AG: every rank passes st->stage (symmetric memory) as B (the same
     * decision on every rank, also for a rank whose shard is empty), after
     * copying its X shard there. Agreed in prepare(). */
    bool staged;
    cmp_output out; /* fp32 D / bias pass (cmp_plan_output) */
} cmp_entry;

typedef struct cmp_state {
    const cmp_api *api;
    cgm_comm *comm;
    int rank, nranks, device;
    int64_t timeout_ms;
    cudaStream_t stream; /* owned: the handle's creation stream */
    cublasMpHandle_t handle;
    cublasMpGrid_t grid[2]; /* indexed by cmp_grid */
    /* NCCL symmetric memory (cublasmp.h): the workspace and AG's staged B,
     * and the outgrown ones kept for captured graphs. */
    cmp_symm symm;
    void *ws; /* cuBLASMp's device workspace */
    size_t ws_bytes;
    void *stage; /* AG's B operand (X shard) */
    size_t stage_bytes;
    /* The fp32 D of RS with a 16-bit Y (this rank's rows) and of every AR
     * (all m rows: the all-gather's buffer). cudaMalloc, grown eagerly,
     * outgrown ones kept for captured graphs. */
    void *dbuf;
    size_t dbuf_bytes;
    void *dretired[CMP_RETIRED_MAX];
    int ndretired;
    cgm_dev_state *dev; /* for cgm_dev_reduce (never aborts: zeroed) */
    bool ag_stage;      /* cmp_test_ag_staging when the comm was made */
    cmp_entry cache[CMP_CACHE];
    uint64_t clock;
    const char *algo_override; /* COMMGEMM_CUBLASMP_ALGO */
} cmp_state;

#define CMP_TRY(call, context)                                               \
    do {                                                                     \
        cublasMpStatus_t s_ = (call);                                        \
        if (s_ != CUBLASMP_STATUS_SUCCESS) {                                 \
            status = cmp_fail(st->api, s_, #call, (context));                \
            goto fail;                                                       \
        }                                                                    \
    } while (0)

/* Runs one validated call (cublasmp_exec.c). */
cgm_status cmp_execute(cmp_state *st, const cgm_call *call);
/* Per-rank argument traces (COMMGEMM_DEBUG=TRACE, subsystem CUBLASMP;
 * cublasmp_trace.c). */
void cmp_trace_descriptor(const cmp_state *st, const char *which,
                          const cmp_geom *g, int type);
void cmp_trace_matmul(const cmp_state *st, const char *fn,
                      const cmp_entry *e, const void *alpha, const void *a,
                      const void *b, const void *beta, const void *c,
                      const void *d, void *ws, size_t ws_bytes,
                      void *host_ws, size_t host_bytes, const void *stream);
/* Frees the descriptor cache (cublasmp_exec.c). */
void cmp_cache_clear(cmp_state *st);

#endif /* COMMGEMM_CUBLASMP_STATE_H */
