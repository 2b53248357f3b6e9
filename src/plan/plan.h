/* The plan layer: pure C, no CUDA, no I/O.
 *
 * op + P + r + m + algorithm -> the schedule one rank executes: copy,
 * signal, wait, GEMM-chunk and reduce steps on a comm queue and one or more
 * compute queues. The host backend and the GPU p2p backend execute the same
 * schedules; plan_check() proves them (every chunk gathered or reduced
 * exactly once, no step reads data before the step that produced it has
 * happened-before it, no peer writes into a buffer its owner may still use).
 *
 * Rows: every step names a range of GLOBAL rows [row0, row0 + rows) of the
 * split dimension m, and the shard (owner rank) they belong to. Executors map
 * rows to memory per buffer:
 *   - PLAN_BUF_INPUT:  the caller's input. AG and bulk-AG: the shard only
 *                      (row - shard_offset(r)); RS, AR, bulk-RS: global rows.
 *   - PLAN_BUF_OUTPUT: the caller's output. AG, AR, bulk-AG: global rows;
 *                      RS and bulk-RS: this rank's shard (row - offset(r)).
 *   - PLAN_BUF_GATHER: workspace, peer visible, one row per global row
 *                      (shard j at its global rows). AG: X rows (input dtype,
 *                      k wide); AR: reduced Y rows (output dtype, n wide);
 *                      bulk-AG: send rows.
 *   - PLAN_BUF_PARTIAL, PLAN_BUF_RECV: workspace slots of fp32 rows (bulk-RS:
 *                      the send dtype): slot s holds up to
 *                      ceil(m / P) rows, addressed (row - offset(shard)).
 *                      PARTIAL is local; RECV is peer visible. The slots of
 *                      a buffer are contiguous (slot s starts at row
 *                      s * slot_rows), so a step with shard = -1 addresses
 *                      the buffer as one array of global rows: row g at
 *                      slot * slot_rows + g (with P slots, the same memory
 *                      as "slot j holds shard j").
 * A step's `slot` is only meaningful for PARTIAL and RECV.
 *
 * Flags: a flag is identified by (signalling rank, receiving rank, kind,
 * chunk). In one op each flag is signalled at most once and every signalled
 * flag is waited for exactly once, so an executor may keep, in the receiver's
 * peer-visible flag area, one cell per (sender, kind, chunk + 1) holding the
 * op sequence number: SIGNAL stores the op's number, WAIT waits until the
 * cell reaches it. Chunk ids of flags lie in [-1, plan.flag_chunks).
 *
 * Queues: queue 0 is the comm queue (copy engine on GPUs, the comm thread
 * on host); queues 1..compute_queues run GEMM and REDUCE steps. Steps of a
 * queue run in order; `deps` add waits on earlier steps of other queues of
 * the same rank. A WAIT(peer, flag) on rank r completes after the matching
 * SIGNAL(peer=r, flag) on rank `peer` of the same op, which makes visible
 * everything that happened-before it on `peer`. An op ends when all its
 * queues have drained; the next op's steps start after that (on GPUs: the
 * side streams join the caller's stream). docs/PLAN.md describes every
 * schedule and which flags and slots it uses.
 */
#ifndef COMMGEMM_PLAN_H
#define COMMGEMM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum plan_op {
    PLAN_OP_AG_GEMM = 0, /* gather X rows, GEMM each gathered chunk */
    PLAN_OP_GEMM_RS = 1, /* GEMM partials per owner, reduce on owner */
    PLAN_OP_GEMM_AR = 2, /* GEMM+RS, then all-gather the reduced rows */
    PLAN_OP_BULK_AG = 3, /* all-gather of send rows beside one whole GEMM */
    PLAN_OP_BULK_RS = 4, /* reduce-scatter of send rows beside one GEMM */
    PLAN_OP_COUNT = 5
} plan_op;

typedef enum plan_algo {
    PLAN_ALGO_SPLIT = 0,      /* direct peer pulls (AG) / pushes (RS) */
    PLAN_ALGO_RING = 1,       /* neighbour hops */
    PLAN_ALGO_NO_OVERLAP = 2, /* whole collective, then whole GEMM (AG) or
                                 whole GEMM, then whole collective (RS/AR) */
    PLAN_ALGO_BULK = 3,       /* bulk ops: collective beside the GEMM */
    PLAN_ALGO_COUNT = 4
} plan_algo;

typedef enum plan_step_kind {
    /* Copy rows from (src.rank, src.buf) to (dst.rank, dst.buf). Exactly one
     * of src.rank, dst.rank may differ from this rank: a pull (remote src)
     * or a push (remote dst). Same element type on both sides. */
    PLAN_COPY = 0,
    /* Make `flag` visible to rank `peer`, after every earlier step of this
     * queue (and its deps) has completed. */
    PLAN_SIGNAL = 1,
    /* Block this queue until rank `peer` has signalled `flag` to this rank
     * in this op. Executors bound the wait (timeout naming `peer`). */
    PLAN_WAIT = 2,
    /* GEMM of the rows: dst rows = src rows (as X) . W. final: dst is the
     * caller's OUTPUT (bias / accumulate / dtype conversion apply); else dst
     * is an fp32 PARTIAL slot. For bulk ops, rows = 0 and the step is the
     * whole unrelated GEMM (src/dst PLAN_BUF_NONE). With ref_count > 0 (RS
     * split with own_addends) the product is added to the sum of those
     * sources, as a final REDUCE would: dst is OUTPUT, the step is final. */
    PLAN_GEMM = 3,
    /* dst rows = sum (in fp32) of the sources plan->refs[ref_first ..
     * ref_first + ref_count). final: dst is the caller's OUTPUT (bias /
     * accumulate / conversion apply); else dst is an fp32 workspace slot. */
    PLAN_REDUCE = 4
} plan_step_kind;

typedef enum plan_buffer {
    PLAN_BUF_NONE = 0,
    PLAN_BUF_INPUT = 1,
    PLAN_BUF_OUTPUT = 2,
    PLAN_BUF_GATHER = 3,
    PLAN_BUF_PARTIAL = 4,
    PLAN_BUF_RECV = 5,
    PLAN_BUF_COUNT = 6
} plan_buffer;

typedef enum plan_flag_kind {
    PLAN_FLAG_READY = 0, /* the sender's data for `chunk` is in place */
    PLAN_FLAG_DONE = 1,  /* the sender finished reading/writing my buffers */
    PLAN_FLAG_FREE = 2,  /* my slot is free: you may write into it */
    PLAN_FLAG_COUNT = 3
} plan_flag_kind;

typedef struct plan_flag {
    plan_flag_kind kind;
    int chunk; /* chunk index (see plan_step.chunk), or -1 */
} plan_flag;

typedef struct plan_loc {
    int rank;
    plan_buffer buf;
    int slot; /* PARTIAL / RECV only; else 0 */
} plan_loc;

#define PLAN_MAX_DEPS 4

typedef struct plan_step {
    plan_step_kind kind;
    int queue; /* 0 = comm, 1..compute_queues = compute */
    int peer;  /* COPY: the remote rank (this rank for a local copy);
                  SIGNAL: destination; WAIT: source; else -1 */
    plan_flag flag;      /* SIGNAL / WAIT */
    plan_loc src, dst;   /* COPY, GEMM, REDUCE (dst) */
    int shard;           /* owner rank of the rows */
    int chunk;           /* shard * splits + piece; -1 for whole-op steps */
    int64_t row0, rows;  /* global rows */
    bool final;          /* GEMM / REDUCE writing the caller's output */
    int ref_first, ref_count; /* REDUCE sources (GEMM addends) in refs */
    int deps[PLAN_MAX_DEPS];  /* earlier steps of this rank, other queues */
    int ndeps;
} plan_step;

typedef struct plan_request {
    plan_op op;
    plan_algo algo;
    int nranks;
    int rank;
    int64_t m;          /* global rows of the split dimension (>= 0) */
    int splits;         /* pieces per shard, >= 1 (clamped to shard rows) */
    int compute_queues; /* >= 1 */
    bool has_gemm;      /* bulk ops: false when the call is collective-only */
    bool has_collective; /* bulk ops: false when the call is GEMM-only;
                            both ignored by the other ops */
    bool own_addends;   /* GEMM_RS, SPLIT, nranks >= 2: each piece of my own
                           rows is one final GEMM that adds the peers'
                           partials (RECV slots) once they have arrived
                           (their READY waits on the GEMM's queue, right
                           before it), instead of a GEMM into RECV[me] and a
                           REDUCE; ignored by the other ops and algorithms */
} plan_request;

typedef struct plan {
    plan_request req;
    int splits; /* effective pieces per shard after clamping */
    int nsteps;
    plan_step *steps;
    int nrefs;
    plan_loc *refs;
    /* Slots each workspace needs (executors size per call from these). */
    int partial_slots;
    int recv_slots;
    int64_t slot_rows; /* ceil(m / P) */
    /* Flag chunk ids lie in [-1, flag_chunks): size flag areas from it. */
    int flag_chunks;
} plan;

/* plan_check() tracks contributions in 64-bit masks. */
#define PLAN_CHECK_MAX_RANKS 64

/* Builds the schedule for one rank. On success fills *out (free with
 * plan_free). Returns 0, or -1 with a message in err (err_len bytes) for an
 * invalid request (e.g. RING for a bulk op, nranks < 1, rank out of range,
 * m < 0). */
int plan_build(const plan_request *req, plan *out, char *err, int err_len);
void plan_free(plan *p);

/* The rule the executors share for own_addends: a GEMM+RS split of 2 ranks
 * with 2 or more pieces per shard (with one piece the own GEMM would wait
 * for the whole push, where the reduce form computes beside it). More
 * ranks reduce. An executor takes own_addends where this holds and its
 * engines can add the partials (not beside an accumulate, whose Y the
 * addend replaces). */
bool plan_prefers_own_addends(const plan_request *req);

/* Rows of shard r and its first row (the ceil split of commgemm.h). */
int64_t plan_shard_rows(int64_t m, int rank, int nranks);
int64_t plan_shard_offset(int64_t m, int rank, int nranks);

/* Verifies the plans of all ranks of one op together (plans[r] is rank r's,
 * built from the same request but rank). Simulates every queue of every
 * rank, tracks happens-before with vector clocks, and checks:
 *   - every step's inputs were produced by a step that happened-before it
 *     (INPUT is valid at start on its own rank only);
 *   - AG: every rank gathers every peer's row exactly once (its own rows
 *     at most once: they may stay in INPUT) and computes every
 *     output row exactly once; RS: every owner reduces each of its rows
 *     exactly once from exactly one contribution of every rank; AR: both;
 *     bulk: the collective's rows likewise and the GEMM exactly once;
 *   - every peer write into a rank's workspace happens-after a step of that
 *     rank in this op, and every peer access to a rank's workspace
 *     happens-before that rank's last step (so the next op may reuse it);
 *   - no deadlock: every WAIT has its SIGNAL; deps point backwards.
 * Returns 0, or -1 with the first violation described in err. */
int plan_check(const plan *plans, int nranks, char *err, int err_len);

/* Human-readable dump of a plan (one line per step) into buf. Returns the
 * length written (truncated to buf_len - 1). */
int plan_format(const plan *p, char *buf, int buf_len);

/* The p2p fused algorithm's geometry (docs/PLAN.md "Fused"; plan_fused.c).
 * Rows per piece: ceil(ceil(m / nranks) / splits) rounded up to tile_rows
 * (so a shard has at most `splits` pieces). */
int64_t plan_fused_piece_rows(int64_t m, int nranks, int splits,
                              int tile_rows);
/* The tiles [*t0, *t1) of an m-row matrix (tiles of tile_rows from row 0)
 * that lie wholly in rows [row0, row0 + rows); the last, partial tile
 * counts when the rows end at m. None: *t0 == *t1. */
void plan_fused_inside_tiles(int64_t m, int64_t row0, int64_t rows,
                             int tile_rows, int64_t *t0, int64_t *t1);
/* The own rows that are not in such a tile, which the fused AG copies into
 * its gathered buffer: [row0, *head_end) and [*tail_start, row0 + rows). */
void plan_fused_own_copies(int64_t m, int64_t row0, int64_t rows,
                           int tile_rows, int64_t *head_end,
                           int64_t *tail_start);
/* The fused AG's tile order on `rank`: own shard first, then the shards of
 * rank-1, rank-2, ... (the order their pushes arrive), a tile spanning two
 * shards with the later one, row order within one. Writes ceil(m /
 * tile_rows) tile indices to order; returns how many. */
int64_t plan_fused_tile_order(int64_t m, int nranks, int rank, int tile_rows,
                              int *order);
const char *plan_op_name(plan_op op);
const char *plan_algo_name(plan_algo algo);
const char *plan_step_kind_name(plan_step_kind kind);
const char *plan_buffer_name(plan_buffer buf);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_PLAN_H */
