/* The p2p backend (userbuffers design): the state its files share.
 *
 * Per comm, one workspace registered once (CUDA IPC, handles exchanged
 * through NCCL at init) and mapped into every rank:
 *     [ flags | gather | recv slots | device state | exchange banks ]
 * (peer visible, the same offsets on every rank), plus local partial
 * slots and a host-mapped abort record. Ops run on queue 0, the comm
 * stream (copy-engine copies, flag kernels), and queues 1.., compute
 * streams (GEMMs, reduce kernels), forked off the caller's stream and
 * joined back into it. docs/P2P_BACKEND.md describes the design.
 *
 * The files, each using only the ones above it in this list:
 *   p2p_units.c     pure C: the enqueue order of a schedule's steps
 *   p2p_signal.c    flags, epochs, signals, waits, notices, failure
 *   p2p_exchange.c  host exchanges during ops, through the workspace
 *   p2p_timeline.c  COMMGEMM_TIMELINE, the per-step trace
 *   p2p_plans.c     workspace slot sizing, the plan cache, the agreement
 *                   check
 *   p2p_fp8.c       fp8 calls: workspace, packed rows, GEMM steps,
 *                   finishing reduces (used by p2p_views/p2p_chunked)
 *   p2p_views.c     how a schedule's buffers map to memory
 *   p2p_chunked.c   the chunked executor: a schedule's steps as copies,
 *                   flags, cuBLASLt chunks, reduce kernels, comm programs
 *   p2p_fused_ops.c the fused algorithm's two schedules (AG, RS)
 *   p2p_fused.c     the fused executor: when it applies, its cache, a call
 *   p2p_run.c       one op: validate, agree, choose chunked or fused, run
 *   p2p_backend.c   probe, init, finalize, the tuner's hooks, the table
 * Each has its header (p2p_<file>.h) but p2p_backend.c, whose table
 * (cgm_p2p_backend) core/core.h declares. */
#ifndef COMMGEMM_P2P_H
#define COMMGEMM_P2P_H

#include "backend/p2p/p2p_units.h"
#include "device/device.h"
#include "gpu/gpu.h"
#include "gpu/lt_fp8_rows.h"
#include "plan/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

#define P2P_MAX_QUEUES 4      /* comm + up to 3 compute queues */
#define P2P_MAX_SPLITS 16     /* pieces per shard */
#define P2P_PLAN_CACHE 256    /* schedules kept per comm (the tuner builds one per candidate) */
#define P2P_SIGNATURE_CACHE 256
#define P2P_LT_WORKSPACE (32u << 20)
#define P2P_FUSED_CACHE 64    /* fused-algorithm shapes kept per comm */
/* Bytes per rank of a host exchange through the workspace (p2p_exchange.c):
 * the agreement check's signature and the autotuner's rows fit. */
#define P2P_XCHG_PAYLOAD 256

/* One rank's record in a peer's exchange bank (p2p_exchange.c). */
typedef struct p2p_xchg_record {
    uint64_t seq; /* exchange number, from 1 (the workspace starts zeroed) */
    uint64_t sum; /* of seq and the payload: a half-written push differs */
    unsigned char payload[P2P_XCHG_PAYLOAD];
} p2p_xchg_record;

/* A schedule of the plan cache (p2p_plans.c) and what running it needs. */
typedef struct p2p_plan_entry {
    bool used;
    plan_request req; /* the key */
    plan plan;
    cudaEvent_t *events; /* per step; NULL where no other queue waits on it */
    p2p_unit *units;     /* room for p2p_units' order (one per step) */
    /* units[0..nunits) is p2p_units' order with copies joining runs or
     * not (units_join), made at the first call that needs it; -1: not
     * yet. */
    int nunits;
    bool units_join;
    uint64_t last_use;
} p2p_plan_entry;

/* What a fused call (p2p_fused.c) needs besides the call: its events and
 * the tile order of the AG kernel, made at the shape's first eager call. */
typedef struct p2p_fused_entry {
    bool used;
    int op; /* CGM_OP_ALL_GATHER_GEMM or CGM_OP_GEMM_REDUCE_SCATTER */
    int64_t m;
    int splits;
    int nevents;
    cudaEvent_t *events;
    int *order; /* device: AG m tile order, or NULL */
    /* Looked up during a stream capture: a captured graph's kernel nodes
     * hold `order`, so eviction keeps it (p2p_state.retired_orders). */
    bool captured;
    uint64_t last_use;
} p2p_fused_entry;

/* COMMGEMM_TIMELINE (p2p_timeline.c). */
typedef struct p2p_timeline {
    bool checked;       /* the variable was read */
    char *prefix;       /* NULL: off */
    cudaEvent_t *events;
    int nevents;
} p2p_timeline;

typedef struct p2p_state {
    cgm_comm *comm;
    int rank, nranks, device;
    int sm_count; /* the device's SMs (the fused kernel leaves one free) */
    int64_t timeout_ms;

    cgm_peer_mem ws;     /* registered workspace */
    size_t flag_chunks;  /* flag slots per (source rank, kind) */
    size_t gather_offset, gather_bytes;
    size_t recv_offset, recv_bytes;
    void *partial;       /* local slots */
    size_t partial_bytes;

    cgm_dev_state *dev;              /* in the workspace, at state_offset */
    size_t state_offset;             /* peers raise dev->notice there */
    cgm_dev_abort_record *abort_host; /* host-mapped: host pointer */
    cgm_dev_abort_record *abort_dev;  /* ... and its device pointer */
    cudaStream_t notice_queue;       /* the notices to the peers */
    unsigned int *notice_pinned;     /* their value (pinned host memory) */
    bool told;                       /* the peers were sent a notice */
    /* Host exchanges during ops (p2p_exchange.c): two banks of nranks
     * records at xchg_offset in the workspace, after the device state. */
    size_t xchg_offset;
    uint64_t xchg_seq;               /* exchanges so far */
    cudaStream_t xchg_queue;
    p2p_xchg_record *xchg_out;       /* pinned: this rank's record */
    p2p_xchg_record *xchg_in;        /* pinned: its bank, read back */
    unsigned int *xchg_notice;       /* pinned: its notice word, read back */
    bool *xchg_got;                  /* nranks: records arrived */

    cudaStream_t queues[P2P_MAX_QUEUES];
    cudaEvent_t fork, join[P2P_MAX_QUEUES];
    cgm_lt *lt;
    void *lt_workspace[P2P_MAX_QUEUES];

    p2p_plan_entry plans[P2P_PLAN_CACHE];
    uint64_t use_clock;
    uint64_t checked_signatures[P2P_SIGNATURE_CACHE];
    int nchecked;
    p2p_timeline timeline;
    p2p_fused_entry fused[P2P_FUSED_CACHE];
    /* Tile orders of evicted entries that a captured graph may still
     * replay: freed with the comm (p2p_fused_cache_clear). */
    int **retired_orders;
    int nretired_orders;
    int fused_fallback_notes; /* INFO lines said about calls run split */
    cgm_test_fault fault; /* COMMGEMM_TEST_FAIL (testing only) */
    int own_kernel_notes; /* INFO lines: own GEMMs run by commgemm's kernel */
    struct p2p_fused_trace *fused_trace; /* during a traced fused call */
    /* fp8 calls (p2p_fp8.c): their workspace, grown at eager calls, and
     * the event the compute queues wait on for their scales. */
    cgm_fp8_workspace fp8_ws;
    /* Epilogues' bias-gradient slots (p2p_epilogue.c), grown likewise. */
    cgm_fp8_workspace epi_ws;
    cudaEvent_t fp8_ready;
} p2p_state;

/* The comm's device for the duration of a call: p2p_enter_device makes it
 * current and keeps the caller's in *previous, p2p_leave_device restores
 * it. */
static inline cgm_status p2p_enter_device(const p2p_state *st, int *previous) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cudaGetDevice(previous));
    if (*previous != st->device) CGM_CUDA_TRY(cudaSetDevice(st->device));
fail:
    return status;
}

static inline void p2p_leave_device(const p2p_state *st, int previous) {
    if (previous >= 0 && previous != st->device) cudaSetDevice(previous);
}

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_H */
