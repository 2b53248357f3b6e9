/* The p2p backend (userbuffers design): internal header.
 *
 * Per comm, one workspace registered once (CUDA IPC, handles exchanged
 * through NCCL at init) and mapped into every rank:
 *     [ flags | gather | recv slots ]      (peer visible, same on all ranks)
 * plus local fp32 partial slots, a device state (epoch, abort word) and a
 * host-mapped abort record. Ops execute plan_build() schedules: queue 0 is
 * the comm stream (copy-engine copies, flag kernels), queues >= 1 are
 * high-priority compute streams (cuBLASLt chunks, reduce kernels). */
#ifndef COMMGEMM_P2P_H
#define COMMGEMM_P2P_H

#include "backend/gpu/gpu.h"
#include "device/device.h"
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

typedef struct p2p_plan_entry {
    bool used;
    plan_request req; /* the key */
    plan plan;
    cudaEvent_t *events; /* per step; NULL where no other queue waits on it */
    plan_unit *units;    /* room for plan_units' order (one per step) */
    /* units[0..nunits) is plan_units' order for (units_join, the comm's
     * run order), made at the first call that needs it; -1: not yet. */
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
    void *partial;       /* local fp32 slots */
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
} p2p_state;

/* One flag cell per (sender, kind, chunk + 1) in the receiver's flag area
 * (the first bytes of the workspace); chunk + 1 < flag_chunks. */
static inline size_t p2p_flag_offset(const p2p_state *st, int src_rank,
                                     plan_flag flag) {
    size_t chunk = (size_t)(flag.chunk + 1);
    return (((size_t)src_rank * PLAN_FLAG_COUNT + (size_t)flag.kind) *
                st->flag_chunks + chunk) * sizeof(unsigned long long);
}

/* The cell a SIGNAL of mine to `peer` stores into (peer-mapped), and the
 * cell where I wait for `sender`'s (local). */
static inline unsigned long long *p2p_flag_to(const p2p_state *st, int peer,
                                              plan_flag flag) {
    return (unsigned long long *)((char *)st->ws.peer[peer] +
                                  p2p_flag_offset(st, st->rank, flag));
}
static inline unsigned long long *p2p_flag_from(const p2p_state *st,
                                                int sender, plan_flag flag) {
    return (unsigned long long *)((char *)st->ws.local +
                                  p2p_flag_offset(st, sender, flag));
}

/* The bound of every device wait, in nanoseconds. */
static inline unsigned long long p2p_timeout_ns(const p2p_state *st) {
    return (unsigned long long)st->timeout_ms * 1000000ull;
}

/* The asynchronous error of a p2p comm: CGM_SUCCESS, or the status of a
 * wait that expired on the device (CGM_ERROR_TIMEOUT naming the rank that
 * never came, the flag and the chunk), with the detail set. Never blocks.
 * Signature of the core's backend hook `async_error`. */
cgm_status cgm_p2p_async_error(cgm_comm *comm, void *state);

/* The schedule for `req`, built (with its events) on a cache miss; a miss
 * while capturing is CGM_ERROR_INVALID_USAGE (p2p_plans.c). */
cgm_status p2p_plan_lookup(p2p_state *st, const plan_request *req,
                           bool capturing, p2p_plan_entry **out);
/* Checks once per call signature that all ranks agree (when
 * config.check_agreement), through one exchange in the workspace. */
cgm_status p2p_check_agreement(p2p_state *st, const cgm_call *call,
                               bool capturing);
/* Runs one validated call (p2p_exec.c). */
cgm_status p2p_execute(p2p_state *st, const cgm_call *call);

/* Stores the comm's current epoch into *remote_flag with the copy engine:
 * an 8-byte cudaMemcpyAsync from the device epoch cell, read when the copy
 * runs (so graph replays signal their own epoch). On `stream` after a copy,
 * it starts once that copy is complete, as the flag kernel would, without
 * a switch from the copy engine to the SMs and back. Unlike the kernel it
 * is not skipped once the comm aborted. */
cgm_status p2p_signal_by_copy(const p2p_state *st,
                              unsigned long long *remote_flag,
                              cudaStream_t stream);
/* A signal right behind a copy-engine copy goes by copy after copies of at
 * least this many bytes, else by a flag kernel: the switch from the copy
 * engine to the SMs and back costs more than the 8-byte copy behind large
 * pushes, less behind small ones. */
#define P2P_SIGNAL_COPY_MIN_BYTES ((size_t)8 << 20)
bool p2p_signal_copy_after(size_t copied_bytes);
/* Frees the plan cache's plans and events (p2p_exec.c). */
void p2p_plan_cache_clear(p2p_state *st);
/* The step timeline (COMMGEMM_TIMELINE, p2p_timeline.c): on() reads the
 * variable once; begin() records the op start on the caller's stream,
 * step() an event before/after step i on its queue, end() synchronizes
 * the caller's stream and writes the trace (algo: the file name's, NULL:
 * the plan's). free() on plan cache clear. Fused calls trace pseudo steps
 * (p2p_fused.c). */
bool p2p_timeline_on(p2p_state *st);
cgm_status p2p_timeline_begin(p2p_state *st, int nsteps, cudaStream_t caller);
cgm_status p2p_timeline_step(p2p_state *st, int step, bool after,
                             cudaStream_t stream);
cgm_status p2p_timeline_end(p2p_state *st, const plan *p, const char *algo,
                            cudaStream_t caller);
void p2p_timeline_free(p2p_state *st);

/* The fused algorithm (p2p_fused.c): whether it can run `call`, from what
 * every rank decides alike (else *why, a static string, says why; `why`
 * may be NULL; the call then runs split on every rank), and running a call
 * it applies to, validated and agreed by p2p_execute, with call->splits
 * pieces per shard (0: the default). Freeing its cache. */
bool p2p_fused_applies(const p2p_state *st, const cgm_call *call,
                       const char **why);
/* applies() holds and this rank's operands suit the kernel too: the
 * tuner's test (ranks whose lists differ fall back to the default). */
bool p2p_fused_tunable(const p2p_state *st, const cgm_call *call);
cgm_status p2p_fused_execute(p2p_state *st, const cgm_call *call);
void p2p_fused_cache_clear(p2p_state *st);
/* A failure after an op's fork (p2p_execute, p2p_fused_execute): this rank
 * enqueued part of the op (the epoch is bumped, signals may be out), so it
 * and its peers are out of step. Joins the `nqueues` queues back into the
 * caller's stream as far as CUDA still allows (a capture must not be left
 * forked), says so in front of the detail, marks the comm broken and
 * returns `status`. */
cgm_status p2p_abandon_op(p2p_state *st, cudaStream_t caller, int nqueues,
                          cgm_status status);
/* This rank's comm broke because rank `culprit` failed (this rank itself,
 * or a peer its wait expired on): raises the notice word of every other
 * rank, the culprit too (it may be alive and waiting in turn), through the
 * peer mapping, by the copy engine, so that their waits give up at once
 * and report it (device.h). A culprit whose process freed its workspace or
 * exited still holds it mapped for us (the driver keeps an imported
 * allocation until its importers close it: test_gpu_ops
 * ipc_store_after_exporter_gone, docs/P2P_BACKEND.md). Once per comm;
 * best effort, bounded (a copy that does not finish within 2 s is left);
 * keeps the thread's error detail. */
void p2p_tell_peers(p2p_state *st, int culprit);

/* Workspace bytes of the exchange banks for `nranks`. */
size_t p2p_exchange_bytes(int nranks);
/* All-gather of `bytes` (at most P2P_XCHG_PAYLOAD) per rank into recv
 * (rank major), through the ranks' workspaces by copy engine: collective
 * among the comm's ranks, in the same order on each; eager, never inside
 * capture. Bounded by the comm's timeout: CGM_ERROR_TIMEOUT naming the
 * ranks whose records never came (and the peers are told); a notice from a
 * peer ends it at once with that peer's error (p2p_notice_error). */
cgm_status p2p_exchange_host(p2p_state *st, const void *send, void *recv,
                             size_t bytes, const char *what);
/* The error for a notice `notice` (cgm_dev_notice(teller, culprit)) seen
 * by this rank: CGM_ERROR_PEER_FAILED when the teller failed itself, else
 * CGM_ERROR_TIMEOUT naming the rank the teller's wait expired on. */
cgm_status p2p_notice_error(const p2p_state *st, unsigned int notice);

/* Largest partial / recv slot counts any schedule of `nranks` may need. */
void p2p_slot_needs(int nranks, int64_t max_m, int *partial_slots,
                    int *recv_slots);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_P2P_H */
