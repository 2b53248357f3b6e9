/* The schedules: op + P + r + m + algorithm -> the steps of one rank.
 * This file: AG + GEMM, the bulk ops and plan_build; plan_reduce.c holds
 * GEMM + RS and GEMM + AR. docs/PLAN.md explains the protocols.
 *
 * Conventions every builder follows:
 * - queue 0 carries copies and flags; GEMM and REDUCE steps go round-robin
 *   over the compute queues so one GEMM's tail overlaps the next one's head;
 * - a rank writes into a peer's workspace only after a WAIT for a flag the
 *   peer signalled in this op, and every peer access to a rank's workspace
 *   is followed by a flag that rank waits for before its op ends (READY
 *   after pushes, DONE after pulls), so consecutive ops may reuse the
 *   workspaces with no other barrier;
 * - steps with no rows are never emitted (empty shards have no pieces);
 * - peers are visited in rank-rotated order (r+1, r+2, ...) so that the
 *   ranks do not all hit one peer at once.
 */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_builder.h"

/* P == 1: the own rows straight from INPUT to OUTPUT (AG also fills GATHER
 * so that every AG plan leaves the gathered X there). */
static void build_local_only(plan_builder *b, bool fill_gather) {
    int r = b->r;
    int64_t row0, rows;
    if (fill_gather && plan_rows_of(b, r) > 0)
        plan_emit_copy(b, plan_at(r, PLAN_BUF_INPUT, 0),
                       plan_at(r, PLAN_BUF_GATHER, 0), r,
                       plan_chunk_of(b, r, 0), plan_offset_of(b, r),
                       plan_rows_of(b, r));
    PLAN_FOR_PIECES(b, r, i, row0, rows)
    plan_emit_gemm(b, plan_at(r, PLAN_BUF_INPUT, 0),
                   plan_at(r, PLAN_BUF_OUTPUT, 0), r, plan_chunk_of(b, r, i),
                   row0, rows, true);
}

static void gemm_own_pieces(plan_builder *b) {
    int r = b->r;
    int64_t row0, rows;
    PLAN_FOR_PIECES(b, r, i, row0, rows)
    plan_emit_gemm(b, plan_at(r, PLAN_BUF_INPUT, 0),
                   plan_at(r, PLAN_BUF_OUTPUT, 0), r, plan_chunk_of(b, r, i),
                   row0, rows, true);
}

/* SPLIT: pushes. Each rank copies its own shard, piece by piece, straight
 * from INPUT into every peer's GATHER (after that peer's FREE) and signals
 * READY per piece, so no staging copy delays the first byte. Its own rows'
 * GEMMs (from INPUT) go first; each received piece's GEMM waits for the
 * piece's READY on its compute queue, so the comm queue only copies.
 * Destinations rotate from r+1, and r-1 (whose first destination is r)
 * is the first writer r expects. Own rows never enter r's GATHER. */
static void build_ag_push(plan_builder *b) {
    int r = b->r, P = b->P;
    int64_t row0, rows;
    if (P == 1) return build_local_only(b, true);
    for (int k = 1; k < P; k++) {
        int q = plan_mod(r - k, P);
        if (plan_rows_of(b, q) > 0) plan_emit_signal(b, q, PLAN_FLAG_FREE, -1);
    }
    gemm_own_pieces(b);
    for (int k = 1; k < P && plan_rows_of(b, r) > 0; k++) {
        int d = plan_mod(r + k, P);
        plan_emit_wait(b, d, PLAN_FLAG_FREE, -1);
        PLAN_FOR_PIECES(b, r, i, row0, rows) {
            int chunk = plan_chunk_of(b, r, i);
            plan_emit_copy(b, plan_at(r, PLAN_BUF_INPUT, 0),
                           plan_at(d, PLAN_BUF_GATHER, 0), r, chunk, row0,
                           rows);
            plan_emit_signal(b, d, PLAN_FLAG_READY, chunk);
        }
    }
    for (int k = 1; k < P; k++) {
        int q = plan_mod(r - k, P);
        PLAN_FOR_PIECES(b, q, i, row0, rows) {
            int chunk = plan_chunk_of(b, q, i);
            plan_emit_wait_for_gemm(b, q, PLAN_FLAG_READY, chunk);
            plan_emit_gemm(b, plan_at(r, PLAN_BUF_GATHER, 0),
                           plan_at(r, PLAN_BUF_OUTPUT, 0), q, chunk, row0,
                           rows, true);
        }
    }
}

/* NO_OVERLAP: publish my shard in my GATHER, pull every peer's whole
 * shard into mine, then one GEMM of all m gathered rows. */
static void build_ag_no_overlap(plan_builder *b) {
    int r = b->r, P = b->P;
    if (P == 1) return build_local_only(b, true);
    plan_publish_own_shard(b, PLAN_BUF_INPUT);
    for (int k = 1; k < P; k++) {
        int q = plan_mod(r + k, P);
        if (plan_rows_of(b, q) == 0) continue;
        plan_emit_wait(b, q, PLAN_FLAG_READY, -1);
        plan_emit_copy(b, plan_at(q, PLAN_BUF_GATHER, 0),
                       plan_at(r, PLAN_BUF_GATHER, 0), q,
                       plan_chunk_of(b, q, 0), plan_offset_of(b, q),
                       plan_rows_of(b, q));
        plan_emit_signal(b, q, PLAN_FLAG_DONE, -1);
    }
    if (b->m > 0) {
        int last_comm = plan_last_on_queue(b, 0);
        int g = plan_emit_gemm(b, plan_at(r, PLAN_BUF_GATHER, 0),
                               plan_at(r, PLAN_BUF_OUTPUT, 0), -1, -1, 0, b->m,
                               true);
        plan_add_dep(b, g, last_comm);
    }
    plan_wait_pullers_done(b);
}

/* RING: every chunk hops r -> r+1 into the neighbour's GATHER, which
 * forwards it on; the receiver first signals FREE to its writer. */
static void build_ag_ring(plan_builder *b) {
    int r = b->r, P = b->P, L = plan_mod(r - 1, P), R = plan_mod(r + 1, P);
    int64_t row0, rows;
    if (P == 1) return build_local_only(b, true);
    /* r receives every shard but its own and sends every shard but R's. */
    bool receives = b->m > plan_rows_of(b, r);
    bool sends = b->m > plan_rows_of(b, R);
    if (receives) plan_emit_signal(b, L, PLAN_FLAG_FREE, -1);
    if (plan_rows_of(b, r) > 0)
        plan_emit_copy(b, plan_at(r, PLAN_BUF_INPUT, 0),
                       plan_at(r, PLAN_BUF_GATHER, 0), r,
                       plan_chunk_of(b, r, 0), plan_offset_of(b, r),
                       plan_rows_of(b, r));
    gemm_own_pieces(b);
    if (sends) plan_emit_wait(b, R, PLAN_FLAG_FREE, -1);
    PLAN_FOR_PIECES(b, r, i, row0, rows) {
        plan_emit_copy(b, plan_at(r, PLAN_BUF_INPUT, 0),
                       plan_at(R, PLAN_BUF_GATHER, 0), r,
                       plan_chunk_of(b, r, i), row0, rows);
        plan_emit_signal(b, R, PLAN_FLAG_READY, plan_chunk_of(b, r, i));
    }
    for (int t = 1; t < P; t++) {
        int s = plan_mod(r - t, P);
        PLAN_FOR_PIECES(b, s, i, row0, rows) {
            int chunk = plan_chunk_of(b, s, i);
            int w = plan_emit_wait(b, L, PLAN_FLAG_READY, chunk);
            int g = plan_emit_gemm(b, plan_at(r, PLAN_BUF_GATHER, 0),
                                   plan_at(r, PLAN_BUF_OUTPUT, 0), s, chunk,
                                   row0, rows, true);
            plan_add_dep(b, g, w);
            if (t < P - 1) { /* at t = P-1 the chunk is R's own shard */
                plan_emit_copy(b, plan_at(r, PLAN_BUF_GATHER, 0),
                               plan_at(R, PLAN_BUF_GATHER, 0), s, chunk, row0,
                               rows);
                plan_emit_signal(b, R, PLAN_FLAG_READY, chunk);
            }
        }
    }
}

/* ------------------------------------------------------------ bulk ops */

/* AG of send rows: own shard INPUT -> GATHER (for the pullers) and ->
 * OUTPUT; pull every peer's GATHER into OUTPUT. */
static void build_bulk_all_gather(plan_builder *b) {
    int r = b->r, P = b->P;
    if (P > 1) plan_publish_own_shard(b, PLAN_BUF_INPUT);
    if (plan_rows_of(b, r) > 0)
        plan_emit_copy(b, plan_at(r, PLAN_BUF_INPUT, 0),
                       plan_at(r, PLAN_BUF_OUTPUT, 0), r, r,
                       plan_offset_of(b, r), plan_rows_of(b, r));
    for (int k = 1; k < P; k++) {
        int q = plan_mod(r + k, P);
        if (plan_rows_of(b, q) == 0) continue;
        plan_emit_wait(b, q, PLAN_FLAG_READY, -1);
        plan_emit_copy(b, plan_at(q, PLAN_BUF_GATHER, 0),
                       plan_at(r, PLAN_BUF_OUTPUT, 0), q, q,
                       plan_offset_of(b, q), plan_rows_of(b, q));
        plan_emit_signal(b, q, PLAN_FLAG_DONE, -1);
    }
    plan_wait_pullers_done(b);
}

/* RS of send rows: push each owner's rows into its RECV[my rank], the
 * owner sums INPUT (its own) and RECV[q] in rank order. Returns the REDUCE
 * step or -1. */
static int build_bulk_reduce_scatter(plan_builder *b, int reduce_queue) {
    int r = b->r, P = b->P;
    plan_signal_free_to_writers(b);
    for (int k = 1; k < P; k++) {
        int d = plan_mod(r + k, P);
        if (plan_rows_of(b, d) == 0) continue;
        plan_emit_wait(b, d, PLAN_FLAG_FREE, -1);
        plan_emit_copy(b, plan_at(r, PLAN_BUF_INPUT, 0),
                       plan_at(d, PLAN_BUF_RECV, r), d, d, plan_offset_of(b, d),
                       plan_rows_of(b, d));
        plan_emit_signal(b, d, PLAN_FLAG_READY, d);
    }
    if (plan_rows_of(b, r) == 0) return -1;
    int w = -1;
    for (int k = 1; k < P; k++)
        w = plan_emit_wait(b, plan_mod(r - k, P), PLAN_FLAG_READY, r);
    int first = plan_refs_begin(b);
    for (int q = 0; q < P; q++)
        plan_add_ref(b, q == r ? plan_at(r, PLAN_BUF_INPUT, 0)
                               : plan_at(r, PLAN_BUF_RECV, q));
    int red = plan_emit_reduce(b, reduce_queue, first,
                               plan_at(r, PLAN_BUF_OUTPUT, 0), r, r,
                               plan_offset_of(b, r), plan_rows_of(b, r), true);
    plan_add_dep(b, red, w);
    return red;
}

static void build_bulk(plan_builder *b, bool overlap) {
    const plan_request *req = &b->p->req;
    int red = -1;
    /* BULK: the GEMM first on queue 1 and the reduce on queue 2 when there
     * is one, so the GEMM never queues behind the collective. */
    if (req->has_gemm && overlap) plan_emit_whole_gemm(b, 1);
    if (req->has_collective) {
        if (req->op == PLAN_OP_BULK_AG)
            build_bulk_all_gather(b);
        else
            red = build_bulk_reduce_scatter(b, overlap && b->cq >= 2 ? 2 : 1);
    }
    if (req->has_gemm && !overlap) {
        int last_comm = plan_last_on_queue(b, 0);
        int g = plan_emit_whole_gemm(b, 1);
        plan_add_dep(b, g, last_comm);
        plan_add_dep(b, g, red);
    }
}

/* ------------------------------------------------------------ plan_build */

static bool is_bulk(plan_op op) {
    return op == PLAN_OP_BULK_AG || op == PLAN_OP_BULK_RS;
}

bool plan_prefers_own_addends(const plan_request *req) {
    if (req->op != PLAN_OP_GEMM_RS || req->algo != PLAN_ALGO_SPLIT ||
        req->nranks != 2 || req->m < 0)
        return false;
    int64_t shard = (req->m + req->nranks - 1) / req->nranks;
    int64_t pieces = req->splits < shard ? req->splits : shard;
    return pieces >= 2;
}

static int check_request(const plan_request *req, char *err, int err_len) {
    if ((unsigned)req->op >= PLAN_OP_COUNT)
        return plan_fail(err, err_len,
                         "plan_build: op %d is not a plan_op (0..%d)",
                         (int)req->op, PLAN_OP_COUNT - 1);
    if ((unsigned)req->algo >= PLAN_ALGO_COUNT)
        return plan_fail(err, err_len,
                         "plan_build: algorithm %d is not a plan_algo (0..%d)",
                         (int)req->algo, PLAN_ALGO_COUNT - 1);
    bool bulk = is_bulk(req->op);
    bool ok = bulk ? req->algo == PLAN_ALGO_BULK ||
                         req->algo == PLAN_ALGO_NO_OVERLAP
                   : req->algo != PLAN_ALGO_BULK;
    if (!ok)
        return plan_fail(err, err_len,
                         "plan_build: algorithm %s does not apply to %s; "
                         "use %s",
                         plan_algo_name(req->algo), plan_op_name(req->op),
                         bulk ? "bulk or no_overlap" : "split, ring or no_overlap");
    if (req->nranks < 1)
        return plan_fail(err, err_len,
                         "plan_build: nranks must be >= 1, got %d",
                         req->nranks);
    if (req->rank < 0 || req->rank >= req->nranks)
        return plan_fail(err, err_len,
                         "plan_build: rank %d is outside 0..%d (nranks %d)",
                         req->rank, req->nranks - 1, req->nranks);
    if (req->m < 0)
        return plan_fail(err, err_len, "plan_build: m must be >= 0, got %lld",
                         (long long)req->m);
    if (req->splits < 1)
        return plan_fail(err, err_len,
                         "plan_build: splits must be >= 1, got %d",
                         req->splits);
    if (req->compute_queues < 1)
        return plan_fail(err, err_len,
                         "plan_build: compute_queues must be >= 1, got %d",
                         req->compute_queues);
    if (bulk && !req->has_gemm && !req->has_collective)
        return plan_fail(err, err_len,
                         "plan_build: a %s call needs a GEMM, a collective or "
                         "both, but has_gemm and has_collective are false",
                         plan_op_name(req->op));
    return 0;
}

/* Effective splits and workspace sizes. */
static int size_plan(plan *out, char *err, int err_len) {
    const plan_request *req = &out->req;
    int P = req->nranks;
    out->slot_rows = req->m > 0 ? (req->m + P - 1) / P : 0;
    int S = req->splits;
    if (req->algo == PLAN_ALGO_NO_OVERLAP || is_bulk(req->op)) S = 1;
    if (S > PLAN_MAX_SPLITS) S = PLAN_MAX_SPLITS;
    if (S > out->slot_rows) S = out->slot_rows > 0 ? (int)out->slot_rows : 1;
    out->splits = S;
    if ((int64_t)P * S * 2 > 0x7fffffff)
        return plan_fail(err, err_len,
                         "plan_build: nranks %d x splits %d overflows the "
                         "chunk ids; ask for fewer splits",
                         P, S);
    bool reduce_op = req->op == PLAN_OP_GEMM_RS || req->op == PLAN_OP_GEMM_AR;
    if (reduce_op && P > 1) {
        out->recv_slots = P;
        /* SPLIT double-buffers its partials, RING triple-buffers them,
         * NO_OVERLAP holds all m rows (one slot per shard). */
        out->partial_slots = req->algo == PLAN_ALGO_SPLIT  ? (P > 2 ? 2 : 1)
                             : req->algo == PLAN_ALGO_RING ? (P < 3 ? P : 3)
                                                           : P;
    }
    if (req->op == PLAN_OP_BULK_RS && req->has_collective && P > 1)
        out->recv_slots = P;
    out->flag_chunks = P * S * (req->op == PLAN_OP_GEMM_AR ? 2 : 1);
    return 0;
}

int plan_build(const plan_request *req, plan *out, char *err, int err_len) {
    if (!out) return plan_fail(err, err_len, "plan_build: out is NULL");
    memset(out, 0, sizeof *out);
    if (!req) return plan_fail(err, err_len, "plan_build: request is NULL");
    if (check_request(req, err, err_len)) return -1;
    out->req = *req;
    if (size_plan(out, err, err_len)) return -1;

    plan_builder b;
    memset(&b, 0, sizeof b);
    b.p = out;
    b.r = req->rank;
    b.P = req->nranks;
    b.S = out->splits;
    b.cq = req->compute_queues;
    b.m = req->m;
    switch (req->op) {
    case PLAN_OP_AG_GEMM:
        if (req->algo == PLAN_ALGO_RING) build_ag_ring(&b);
        else if (req->algo == PLAN_ALGO_SPLIT) build_ag_push(&b);
        else build_ag_no_overlap(&b);
        break;
    case PLAN_OP_GEMM_RS:
    case PLAN_OP_GEMM_AR:
        plan_build_reduce_op(&b, req->algo, req->op == PLAN_OP_GEMM_AR);
        break;
    default:
        build_bulk(&b, req->algo == PLAN_ALGO_BULK);
        break;
    }
    if (b.failed) {
        plan_free(out);
        return plan_fail(err, err_len, "plan_build: %s", b.why);
    }
    return 0;
}

void plan_free(plan *p) {
    if (!p) return;
    free(p->steps);
    free(p->refs);
    p->steps = NULL;
    p->refs = NULL;
    p->nsteps = 0;
    p->nrefs = 0;
}
