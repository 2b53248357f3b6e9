/* The nccl backend: internal header.
 *
 * Per comm: its own NCCL communicator split from the caller's (blocking by
 * default, cheap to issue; a host call that blocks longer than the timeout
 * is aborted by the watchdog thread), a comm stream for the NCCL
 * transfers and compute streams for cuBLASLt chunks, workspaces sized from
 * the config's maxima, an event pool for cross-stream dependencies and a
 * watchdog thread that bounds every in-flight op (ncclCommAbort on expiry).
 * docs/NCCL_BACKEND.md describes the schedules. */
#ifndef COMMGEMM_NCCL_BACKEND_H
#define COMMGEMM_NCCL_BACKEND_H

#include <pthread.h>

#include "device/device.h"
#include "gpu/gpu.h"
#include "gpu/lt_fp8_rows.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCLB_COMPUTE_STREAMS 2
#define NCCLB_MAX_SPLITS 8
#define NCCLB_SIGNATURE_CACHE 256
#define NCCLB_WATCH_SLOTS 64
#define NCCLB_LT_WORKSPACE (32u << 20)
/* Auto splits keep every transferred piece at least this large, so that
 * the per-call cost (host launch, NCCL's per-call setup) stays small
 * beside the transfer itself. */
#define NCCLB_MIN_PIECE_BYTES ((size_t)4 << 20)

/* Workspaces, each allocated once (at init for the ops configured to this
 * backend, else at the first eager call that needs it), sized from the
 * config's maxima, never inside graph capture. */
typedef enum ncclb_buffer {
    NCCLB_BUF_GATHER = 0,  /* AG: X pieces; AR/bulk: staging of rows */
    NCCLB_BUF_PARTIAL = 1, /* RS/AR: fp32 partials, m x n */
    NCCLB_BUF_RECV = 2,    /* RS/AR/bulk-RS: P-1 slots of ceil(m/P) rows */
    NCCLB_BUF_EPI = 3,     /* bias gradients: fp32 slots (nccl_epilogue.c) */
    NCCLB_BUF_COUNT = 4
} ncclb_buffer;

/* One op being watched: the op counts as started when `start` is reached
 * and must reach `done` within the timeout. steps[i] is recorded on the comm
 * stream after exchange step i (peers in step_from / step_to), so that an
 * expired op can name the peer it was waiting for. */
#define NCCLB_WATCH_STEPS 16
typedef struct ncclb_watch {
    bool busy;
    bool started;
    int64_t started_ns;
    int64_t issued_ns;
    cudaEvent_t start, done;
    int nsteps;
    cudaEvent_t steps[NCCLB_WATCH_STEPS];
    int step_from[NCCLB_WATCH_STEPS], step_to[NCCLB_WATCH_STEPS];
    char what[96];
} ncclb_watch;

typedef struct ncclb_state {
    cgm_comm *comm;
    int rank, nranks, device;
    int64_t timeout_ms;
    int max_ctas;    /* 0: NCCL's own choice */
    bool blocking;   /* config.blocking of the split comm */
    ncclComm_t nccl; /* the split comm; NULL after an abort */
    /* The same handle for aborting: whoever exchanges it to NULL first
     * (op thread, watchdog, finalize) aborts or destroys the comm, once. */
    ncclComm_t abort_handle;
    /* Blocked-call guard (atomics, read by the watchdog without the
     * lock): when the op thread is inside an NCCL call, since when and
     * which; guard_fired once the watchdog aborted the comm under it. */
    int64_t call_since_ns;
    const char *call_what;
    int guard_fired;
    char guard_message[400];
    int finalizing; /* atomic: the watchdog then runs only the guard */

    cudaStream_t comm_stream;
    cudaStream_t compute[NCCLB_COMPUTE_STREAMS];
    cudaEvent_t fork;
    cudaEvent_t join_comm, join_compute[NCCLB_COMPUTE_STREAMS];
    bool joins_eager; /* the joins were last recorded outside capture */
    cudaEvent_t *events; /* pool, one per received / produced piece */
    int nevents;
    cgm_lt *lt;
    void *lt_workspace[NCCLB_COMPUTE_STREAMS + 1]; /* last: caller stream */
    cgm_dev_state *dev; /* for cgm_dev_reduce; never aborted */

    void *buf[NCCLB_BUF_COUNT];
    size_t buf_bytes[NCCLB_BUF_COUNT];

    int64_t checked[NCCLB_SIGNATURE_CACHE][CGM_SIGNATURE_WORDS];
    int nchecked, next_checked;

    /* Guards the split comm (issuing, polling, aborting) and the watch
     * slots: the op thread and the watchdog thread share them. */
    pthread_mutex_t lock;
    bool lock_ready;
    pthread_t watchdog;
    bool watchdog_running;
    volatile int stop;
    ncclb_watch watch[NCCLB_WATCH_SLOTS];
    int watch_current; /* slot of the op being issued, or -1 */
    cgm_test_fault fault; /* COMMGEMM_TEST_FAIL (testing only) */
    /* fp8 calls' workspace (nccl_fp8.c), grown at eager calls. */
    cgm_fp8_workspace fp8_ws;
    /* Sticky asynchronous error (set under lock). */
    cgm_status async_status;
    char async_message[1024];
} ncclb_state;

/* ---- nccl_watch.c */
/* Relaxes this thread's capture mode around event/stream queries (a
 * global-mode capture would otherwise be invalidated); restore after. */
enum cudaStreamCaptureMode ncclb_relax_capture(void);
void ncclb_restore_capture(enum cudaStreamCaptureMode mode);
void *ncclb_watchdog_main(void *arg);
cgm_status ncclb_async_error(cgm_comm *comm, void *state);
/* Call right before an NCCL call on the split comm (lock held): arms the
 * watchdog's blocked-call guard. Returns an error if the comm is gone. */
cgm_status ncclb_call_enter(ncclb_state *st, const char *what);
/* Right after it: disarms the guard, reports an abort the watchdog did
 * meanwhile, and (non-blocking comm) polls until NCCL accepted the call,
 * bounded; on an NCCL error or expiry aborts the comm. Lock held. */
cgm_status ncclb_settle(ncclb_state *st, ncclResult_t issued, const char *what);
/* Marks the backend broken with `status` and the current detail (the first
 * such error stays), without aborting the split comm: for breaks where
 * ncclCommAbort would wait for stream work that may never end; destroy
 * aborts it. Call with the lock held. */
void ncclb_break_locked(ncclb_state *st, cgm_status status);
/* The same, aborting the split comm. Call with the lock held. */
void ncclb_fail_locked(ncclb_state *st, cgm_status status);
/* Aborts the split comm unless someone already did (any thread). */
void ncclb_abort_comm(ncclb_state *st);

/* ---- nccl_fp8.c: what an fp8 call adds to an op (docs/NCCL_BACKEND.md) */
typedef struct ncclb_fp8 {
    bool on;            /* the call has fp8 inputs */
    bool block;         /* BLOCK_1X128 / 128X128, else TENSOR */
    int64_t kb;         /* ceil(k / 128) */
    cgm_fp8_call f;
    /* TENSOR: 16-byte slots, AG: rank s's scale at x_slots + 4 s; other
     * ops: this rank's at x_slots. */
    float *x_slots;
    float *gathered;    /* AG, BLOCK: X's gathered scales [m][kb] */
    char *scratch[NCCLB_COMPUTE_STREAMS + 1]; /* last: caller stream */
    size_t scratch_bytes;
} ncclb_fp8;

/* ---- nccl_exec.c: shared machinery of the ops */
typedef struct ncclb_op {
    ncclb_state *st;
    const cgm_call *call;
    cudaStream_t caller;
    bool capturing;
    int next_event;
    int next_compute;
    int watch; /* slot, or -1 */
    ncclb_fp8 fp8;
    /* Bias-gradient slots (NCCLB_BUF_EPI) cuBLASLt wrote, summed in slot
     * order by ncclb_epi_end; -1: none to sum. */
    int epi_slots;
} ncclb_op;

cgm_status ncclb_ensure_buffer(ncclb_state *st, ncclb_buffer which,
                               bool capturing);
size_t ncclb_buffer_need(const ncclb_state *st, ncclb_buffer which);
/* A call beyond what the comm was made for (its config's maxima; a
 * reduction over more than CGM_DEV_MAX_SOURCES ranks), refused before
 * anything is enqueued. Reads st->comm->config and st->nranks only. */
cgm_status ncclb_check_limits(const ncclb_state *st, const cgm_call *c);
/* Starts an op: agreement check, limits, fork of the internal streams
 * from the caller's, watch slot. Takes the lock on success. */
cgm_status ncclb_op_begin(ncclb_state *st, const cgm_call *call,
                          ncclb_op *op);
/* Joins the internal streams back into the caller's and releases the
 * lock (also after a failure, with `status` kept). */
cgm_status ncclb_op_end(ncclb_op *op, cgm_status status);
/* The next pool event (grows the pool outside capture). */
cgm_status ncclb_event(ncclb_op *op, cudaEvent_t *out);
cudaStream_t ncclb_next_compute(ncclb_op *op);
/* Records a watch step on the comm stream (no-op inside capture). */
void ncclb_watch_step(ncclb_op *op, int from, int to);
/* A watch step after one call with every peer: names the peer when P = 2. */
void ncclb_watch_group(ncclb_op *op);
/* A GEMM on `stream` with the lt workspace that belongs to it. */
cgm_status ncclb_gemm(ncclb_op *op, const cgm_lt_gemm_args *args,
                      cudaStream_t stream);
/* Pieces of shard `shard`: count and rows/offset (inside the shard) of
 * piece q. The split count is the call's, clamped to the shard's rows. */
int ncclb_pieces(int64_t shard_rows, int splits);
/* Pieces per shard: the call's hint, else auto (row_bytes: bytes one row
 * puts on the wire; identical on every rank for one signature). */
int ncclb_splits(const cgm_call *call, int64_t m, int nranks,
                 size_t row_bytes);

/* One grouped round of point-to-point transfers on the comm stream (bytes;
 * zero-byte halves are skipped), bounded by ncclb_settle. */
typedef struct ncclb_xfer {
    const void *send;
    size_t send_bytes;
    int to;
    void *recv;
    size_t recv_bytes;
    int from;
} ncclb_xfer;
cgm_status ncclb_exchange(ncclb_state *st, const ncclb_xfer *xfers, int count,
                          const char *what);
/* An all-gather of uneven row shards by point-to-point exchange (where
 * ncclAllGather's equal counts do not fit): this rank's shard of the m
 * rows (dense at `mine`) goes to every peer, and every peer's shard lands
 * in its place in `rows` (m x cols, dense, es bytes per element). `x`
 * holds room for nranks - 1 transfers. */
cgm_status ncclb_gather_rows(ncclb_state *st, const void *mine, void *rows,
                             int64_t m, int64_t cols, size_t es,
                             ncclb_xfer *x, const char *what);
/* Rows [row0, row0 + rows) (global) of piece q of shard `shard`. */
typedef struct ncclb_piece {
    int64_t row0, rows;
} ncclb_piece;
ncclb_piece ncclb_piece_of(int64_t m, int nranks, int shard, int splits,
                           int q);

/* ---- nccl_fp8.c */
/* The fp8 workspace of `call` (op_begin, before the lock; grows outside
 * capture, INVALID_USAGE inside when too small). No-op for other calls. */
cgm_status ncclb_fp8_ensure(ncclb_state *st, const cgm_call *call,
                            bool capturing);
/* At the start of an fp8 op (after the fork): W's scales and padding, this
 * rank's X scale slot (AG TENSOR: every rank's, gathered; AG BLOCK: own
 * scale rows into op->fp8.gathered), the amax zeroed, all on the comm
 * stream, which the compute streams then wait for. No-op otherwise. */
cgm_status ncclb_fp8_begin(ncclb_op *op);
/* One fp8 GEMM chunk (cgm_fp8_rows_gemm) on `stream` with the call's y
 * scale and amax; x_scales as cgm_fp8_rows_gemm takes them. */
cgm_status ncclb_fp8_gemm(ncclb_op *op, const cgm_lt_gemm_args *g,
                          const float *x_scales, cudaStream_t stream);
/* X's scales of rows [row0, ..) of this rank's own X (TENSOR: its slot). */
const float *ncclb_fp8_own_scales(const ncclb_op *op, int64_t row0);
/* AG: X's scales of gathered rows from row0 of shard `shard`. */
const float *ncclb_fp8_gathered_scales(const ncclb_op *op, int shard,
                                       int64_t row0);
/* AG, BLOCK: the transfer of the scale rows of the pieces `sp` (sent to
 * `to`) and `rp` (received from `from`), beside their X rows. */
ncclb_xfer ncclb_fp8_scale_xfer(const ncclb_op *op, int send_shard,
                                ncclb_piece sp, int to, ncclb_piece rp,
                                int from);
/* AG: the gathered scales into x_gathered.scale (when not NULL): TENSOR
 * rank s's at [s] for shards with rows, BLOCK [m][kb]; comm stream. */
cgm_status ncclb_fp8_copy_gathered_scales(ncclb_op *op);
/* GEMM+RS/AR with an output cuBLASLt's partial sums cannot give directly
 * (fp8 Y; a bias of another dtype than Y): the reduced rows are summed
 * into fp32 and finished by cgm_dev_fp8_finish. */
bool ncclb_fp8_finishes(const cgm_call *call);
/* cgm_dev_fp8_finish of fp32 rows [rows, n] (ld n) into Y's rows from
 * y_row0, with the call's bias, accumulate, y scale and amax, on `stream`. */
cgm_status ncclb_fp8_finish(ncclb_op *op, const float *src, int64_t y_row0,
                            int64_t rows, cudaStream_t stream);

/* ---- nccl_ops.c */
cgm_status ncclb_all_gather_gemm(ncclb_op *op);
cgm_status ncclb_gemm_reduce_scatter(ncclb_op *op, bool all_reduce);
/* ---- nccl_bulk.c */
cgm_status ncclb_bulk(ncclb_op *op);

/* ---- epilogues (nccl_epilogue.c) ---- */

/* Floats between two bias-gradient slots of NCCLB_BUF_EPI (a multiple of
 * 4: every slot 16-byte aligned), and the slots the buffer holds. */
int64_t ncclb_epi_stride(const ncclb_state *st);
int ncclb_epi_max_slots(const ncclb_state *st);
/* Whether the GEMMs of this call write bias gradients into slots. */
bool ncclb_epi_gemm_grad(const cgm_call *c);
/* The slot of piece (j, q) of S per shard: the number of non-empty pieces
 * before it in (shard, piece) order, the same on every rank; *total (may
 * be NULL): all non-empty pieces. */
int ncclb_epi_slot(int64_t m, int P, int S, int j, int q, int *total);
/* A cuBLASLt GEMM writing Y rows [row0, row0 + g->m) of the call: the
 * call's epilogue, aux at those rows, bias gradient into `slot`. */
void ncclb_epi_args(ncclb_op *op, cgm_lt_gemm_args *g, int64_t row0,
                    int slot);
/* After the op's GEMMs: joins the compute streams into the comm stream and
 * sums op->epi_slots slots into the call's bgrad (nothing when -1). */
cgm_status ncclb_epi_end(ncclb_op *op);
/* DGELU_BGRAD after a reduce with the epilogue (ra): the column sums of
 * ra's rows into slot 0, summed over the ranks with ncclAllReduce when
 * over_ranks, rounded into bgrad; on the comm stream. */
cgm_status ncclb_epi_reduce_grad(ncclb_op *op, const cgm_dev_reduce_args *ra,
                                 bool over_ranks);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_NCCL_BACKEND_H */
