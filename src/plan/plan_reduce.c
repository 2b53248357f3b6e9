/* GEMM + RS and GEMM + AR schedules (the reduce-scatter phase, then, for
 * AR, the all-gather of the reduced rows). The final REDUCE writes OUTPUT:
 * shard-addressed for RS, global rows for AR; steps name global rows
 * either way. Contributions are summed in rank order 0..P-1 except in
 * RING, whose order is the ring's. */
#include <string.h>

#include "plan/plan_builder.h"

/* own_final[i]: the step that finalizes piece i of my shard. */
typedef struct rs_result {
    int own_final[PLAN_MAX_SPLITS];
} rs_result;

/* SPLIT: push my partial for each destination d (rotated from r+1) into
 * d's RECV[my rank] after d's FREE, READY per chunk; my own rows' GEMM
 * goes last into my RECV[r]; then per piece wait for every writer and
 * reduce the P slots into OUTPUT. With own_addends, each own piece waits
 * (on its compute queue) for every writer and is then one final GEMM that
 * adds their slots. */
static void build_rs_split(plan_builder *b, rs_result *res) {
    int r = b->r, P = b->P;
    int64_t row0, rows;
    plan_signal_free_to_writers(b);
    /* Two PARTIAL slots: the GEMM for one destination runs while the
     * previous destination's partial is pushed. slot_reader: the last push
     * out of each slot, which its next GEMM must wait for. */
    int slot_reader[2] = {-1, -1};
    int used = 0;
    for (int k = 1; k < P; k++) {
        int d = plan_mod(r + k, P);
        if (plan_rows_of(b, d) == 0) continue;
        int slot = used++ % b->p->partial_slots, last_copy = -1;
        plan_emit_wait(b, d, PLAN_FLAG_FREE, -1);
        PLAN_FOR_PIECES(b, d, i, row0, rows) {
            int chunk = plan_chunk_of(b, d, i);
            plan_loc part = plan_at(r, PLAN_BUF_PARTIAL, slot);
            int g = plan_emit_gemm(b, plan_at(r, PLAN_BUF_INPUT, 0), part, d,
                                   chunk, row0, rows, false);
            plan_add_dep(b, g, slot_reader[slot]);
            last_copy = plan_emit_copy(b, part, plan_at(d, PLAN_BUF_RECV, r),
                                       d, chunk, row0, rows);
            plan_add_dep(b, last_copy, g);
            plan_emit_signal(b, d, PLAN_FLAG_READY, chunk);
        }
        slot_reader[slot] = last_copy;
    }
    if (b->p->req.own_addends && b->p->req.op == PLAN_OP_GEMM_RS) {
        PLAN_FOR_PIECES(b, r, i, row0, rows) {
            /* On the GEMM's own compute queue: a WAIT on the comm queue
             * would come after all my pushes in its order and hold the
             * own GEMMs back until they are done. */
            int chunk = plan_chunk_of(b, r, i);
            for (int k = 1; k < P; k++)
                plan_emit_wait_for_gemm(b, plan_mod(r - k, P),
                                        PLAN_FLAG_READY, chunk);
            int first = plan_refs_begin(b);
            for (int k = 1; k < P; k++)
                plan_add_ref(b, plan_at(r, PLAN_BUF_RECV, plan_mod(r - k, P)));
            res->own_final[i] = plan_emit_gemm_add(
                b, plan_at(r, PLAN_BUF_INPUT, 0),
                plan_at(r, PLAN_BUF_OUTPUT, 0), r, chunk, row0, rows, first);
        }
        return;
    }
    int own_gemm[PLAN_MAX_SPLITS];
    PLAN_FOR_PIECES(b, r, i, row0, rows)
    own_gemm[i] = plan_emit_gemm(b, plan_at(r, PLAN_BUF_INPUT, 0),
                                 plan_at(r, PLAN_BUF_RECV, r), r,
                                 plan_chunk_of(b, r, i), row0, rows, false);
    PLAN_FOR_PIECES(b, r, i, row0, rows) {
        int chunk = plan_chunk_of(b, r, i), w = -1;
        /* Writer r-1 reaches me first (I am its first destination). */
        for (int k = 1; k < P; k++)
            w = plan_emit_wait(b, plan_mod(r - k, P), PLAN_FLAG_READY, chunk);
        int first = plan_refs_begin(b);
        for (int q = 0; q < P; q++)
            plan_add_ref(b, plan_at(r, PLAN_BUF_RECV, q));
        int red = plan_emit_reduce(b, 0, first, plan_at(r, PLAN_BUF_OUTPUT, 0),
                                   r, chunk, row0, rows, true);
        plan_add_dep(b, red, w);
        plan_add_dep(b, red, own_gemm[i]);
        res->own_final[i] = red;
    }
}

/* RING: step t works on shard r-t-1: GEMM it into PARTIAL, add (in place)
 * what L pushed into my RECV[shard] (t >= 1), push the sum into R's
 * RECV[shard] (t < P-1); at t = P-1 the shard is mine and the sum goes to
 * OUTPUT. So r receives every shard but L's and sends every shard but its
 * own. RECV slot = shard (each arrives once); PARTIAL slot = t % 3, so the
 * GEMM of step t+1 never waits for the push of step t-1. */
static void build_rs_ring(plan_builder *b, rs_result *res) {
    int r = b->r, P = b->P, L = plan_mod(r - 1, P), R = plan_mod(r + 1, P);
    int nslots = b->p->partial_slots;
    int64_t row0, rows;
    if (b->m > plan_rows_of(b, L)) plan_emit_signal(b, L, PLAN_FLAG_FREE, -1);
    if (b->m > plan_rows_of(b, r)) plan_emit_wait(b, R, PLAN_FLAG_FREE, -1);
    int slot_reader[3] = {-1, -1, -1};
    int gemm_now[PLAN_MAX_SPLITS], gemm_next[PLAN_MAX_SPLITS];
    memset(gemm_now, 0xff, sizeof gemm_now);
    memset(gemm_next, 0xff, sizeof gemm_next);
    for (int t = 0; t < P; t++) {
        int s = plan_mod(r - t - 1, P), slot = t % nslots;
        plan_loc part = plan_at(r, PLAN_BUF_PARTIAL, slot);
        if (t == 0) {
            PLAN_FOR_PIECES(b, s, i, row0, rows)
            gemm_now[i] = plan_emit_gemm(b, plan_at(r, PLAN_BUF_INPUT, 0),
                                         part, s, plan_chunk_of(b, s, i),
                                         row0, rows, false);
        }
        /* The next step's GEMM is queued before this step's REDUCE, so a
         * compute queue has work while this step's chunk travels. */
        if (t + 1 < P) {
            int s1 = plan_mod(r - t - 2, P), slot1 = (t + 1) % nslots;
            PLAN_FOR_PIECES(b, s1, i, row0, rows) {
                gemm_next[i] = plan_emit_gemm(
                    b, plan_at(r, PLAN_BUF_INPUT, 0),
                    plan_at(r, PLAN_BUF_PARTIAL, slot1), s1,
                    plan_chunk_of(b, s1, i), row0, rows, false);
                plan_add_dep(b, gemm_next[i], slot_reader[slot1]);
            }
        }
        PLAN_FOR_PIECES(b, s, i, row0, rows) {
            int chunk = plan_chunk_of(b, s, i), last = gemm_now[i];
            bool final = t == P - 1;
            if (t > 0) {
                int w = plan_emit_wait(b, L, PLAN_FLAG_READY, chunk);
                int first = plan_refs_begin(b);
                plan_add_ref(b, plan_at(r, PLAN_BUF_RECV, s));
                plan_add_ref(b, part);
                last = plan_emit_reduce(
                    b, 0, first, final ? plan_at(r, PLAN_BUF_OUTPUT, 0) : part,
                    s, chunk, row0, rows, final);
                plan_add_dep(b, last, w);
                plan_add_dep(b, last, gemm_now[i]);
                if (final) res->own_final[i] = last;
            }
            if (!final) {
                int c = plan_emit_copy(b, part, plan_at(R, PLAN_BUF_RECV, s),
                                       s, chunk, row0, rows);
                plan_add_dep(b, c, last);
                plan_emit_signal(b, R, PLAN_FLAG_READY, chunk);
                slot_reader[slot] = c;
            }
        }
        memcpy(gemm_now, gemm_next, sizeof gemm_now);
    }
}

/* NO_OVERLAP: one GEMM of all m rows into PARTIAL seen as one array of
 * global rows (P slots: slot j holds shard j), then the reduce-scatter. */
static void build_rs_no_overlap(plan_builder *b, rs_result *res) {
    int r = b->r, P = b->P;
    plan_signal_free_to_writers(b);
    int g = -1;
    if (b->m > 0)
        g = plan_emit_gemm(b, plan_at(r, PLAN_BUF_INPUT, 0),
                           plan_at(r, PLAN_BUF_PARTIAL, 0), -1, -1, 0, b->m,
                           false);
    for (int k = 1; k < P; k++) {
        int d = plan_mod(r + k, P);
        if (plan_rows_of(b, d) == 0) continue;
        plan_emit_wait(b, d, PLAN_FLAG_FREE, -1);
        int c = plan_emit_copy(b, plan_at(r, PLAN_BUF_PARTIAL, d),
                               plan_at(d, PLAN_BUF_RECV, r), d,
                               plan_chunk_of(b, d, 0), plan_offset_of(b, d),
                               plan_rows_of(b, d));
        plan_add_dep(b, c, g);
        plan_emit_signal(b, d, PLAN_FLAG_READY, plan_chunk_of(b, d, 0));
    }
    if (plan_rows_of(b, r) == 0) return;
    int w = -1;
    for (int k = 1; k < P; k++)
        w = plan_emit_wait(b, plan_mod(r - k, P), PLAN_FLAG_READY,
                           plan_chunk_of(b, r, 0));
    int first = plan_refs_begin(b);
    for (int q = 0; q < P; q++)
        plan_add_ref(b, q == r ? plan_at(r, PLAN_BUF_PARTIAL, r)
                               : plan_at(r, PLAN_BUF_RECV, q));
    int red = plan_emit_reduce(b, 1, first, plan_at(r, PLAN_BUF_OUTPUT, 0), r,
                               plan_chunk_of(b, r, 0), plan_offset_of(b, r),
                               plan_rows_of(b, r), true);
    plan_add_dep(b, red, w);
    res->own_final[0] = red;
}

/* AR's second phase: piece by piece, my reduced rows OUTPUT -> GATHER and
 * READY(P*S + chunk) to every peer; peers pull them into their OUTPUT and
 * signal DONE(-1) once they have all of my shard; I wait for every DONE
 * so that the next op may rewrite my GATHER. */
static void build_ar_gather(plan_builder *b, const rs_result *res) {
    int r = b->r, P = b->P, base = P * b->S;
    int64_t row0, rows;
    PLAN_FOR_PIECES(b, r, i, row0, rows) {
        int chunk = plan_chunk_of(b, r, i);
        int c = plan_emit_copy(b, plan_at(r, PLAN_BUF_OUTPUT, 0),
                               plan_at(r, PLAN_BUF_GATHER, 0), r, chunk, row0,
                               rows);
        plan_add_dep(b, c, res->own_final[i]);
        for (int k = 1; k < P; k++)
            plan_emit_signal(b, plan_mod(r - k, P), PLAN_FLAG_READY,
                             base + chunk);
    }
    for (int k = 1; k < P; k++) {
        int q = plan_mod(r + k, P);
        if (plan_rows_of(b, q) == 0) continue;
        PLAN_FOR_PIECES(b, q, i, row0, rows) {
            int chunk = plan_chunk_of(b, q, i);
            plan_emit_wait(b, q, PLAN_FLAG_READY, base + chunk);
            plan_emit_copy(b, plan_at(q, PLAN_BUF_GATHER, 0),
                           plan_at(r, PLAN_BUF_OUTPUT, 0), q, chunk, row0,
                           rows);
        }
        plan_emit_signal(b, q, PLAN_FLAG_DONE, -1);
    }
    plan_wait_pullers_done(b);
}

void plan_build_reduce_op(plan_builder *b, plan_algo algo, bool all_reduce) {
    int64_t row0, rows;
    if (b->P == 1) { /* nothing to reduce: the GEMM writes OUTPUT */
        PLAN_FOR_PIECES(b, b->r, i, row0, rows)
        plan_emit_gemm(b, plan_at(b->r, PLAN_BUF_INPUT, 0),
                       plan_at(b->r, PLAN_BUF_OUTPUT, 0), b->r,
                       plan_chunk_of(b, b->r, i), row0, rows, true);
        return;
    }
    rs_result res;
    memset(&res, 0xff, sizeof res);
    if (algo == PLAN_ALGO_SPLIT) build_rs_split(b, &res);
    else if (algo == PLAN_ALGO_RING) build_rs_ring(b, &res);
    else build_rs_no_overlap(b, &res);
    if (all_reduce && !b->failed) build_ar_gather(b, &res);
}
