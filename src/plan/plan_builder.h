/* The step emitters the schedule builders share (plan.c, plan_reduce.c). */
#ifndef COMMGEMM_PLAN_BUILDER_H
#define COMMGEMM_PLAN_BUILDER_H

#include "plan/plan_internal.h"

/* Caps the flag chunk space (P * splits) and keeps pieces worth a launch. */
#define PLAN_MAX_SPLITS 1024

typedef struct plan_builder {
    plan *p;
    int r, P, S, cq;
    int64_t m;
    int cap_steps, cap_refs;
    int next_compute; /* round-robin position over the compute queues */
    bool failed;      /* out of memory or a builder bug; reported once */
    const char *why;
} plan_builder;

static inline int plan_mod(int a, int P) { return ((a % P) + P) % P; }

static inline plan_loc plan_at(int rank, plan_buffer buf, int slot) {
    plan_loc l = {rank, buf, slot};
    return l;
}

static inline int64_t plan_rows_of(const plan_builder *b, int shard) {
    return plan_shard_rows(b->m, shard, b->P);
}

static inline int64_t plan_offset_of(const plan_builder *b, int shard) {
    return plan_shard_offset(b->m, shard, b->P);
}

static inline int plan_chunk_of(const plan_builder *b, int shard, int piece) {
    return shard * b->S + piece;
}

/* Every emitter returns the new step's index, or -1 once the builder has
 * failed (later calls are then no-ops; plan_build reports b->why). */
int plan_emit_copy(plan_builder *b, plan_loc src, plan_loc dst, int shard,
                   int chunk, int64_t row0, int64_t rows);
int plan_emit_signal(plan_builder *b, int peer, plan_flag_kind f, int chunk);
int plan_emit_wait(plan_builder *b, int peer, plan_flag_kind f, int chunk);
/* A WAIT on the compute queue the next plan_emit_gemm() will use, so that
 * the GEMM, not the comm queue, waits for data a peer pushes. */
int plan_emit_wait_for_gemm(plan_builder *b, int peer, plan_flag_kind f,
                            int chunk);
/* On the next compute queue (round robin). */
int plan_emit_gemm(plan_builder *b, plan_loc src, plan_loc dst, int shard,
                   int chunk, int64_t row0, int64_t rows, bool final);
/* A final GEMM into dst that adds the refs added since first_ref (which
 * plan_refs_begin() returned): the reduce folded into the GEMM. */
int plan_emit_gemm_add(plan_builder *b, plan_loc src, plan_loc dst, int shard,
                       int chunk, int64_t row0, int64_t rows, int first_ref);
/* The unrelated GEMM of a bulk op on `queue`: rows 0, no buffers. */
int plan_emit_whole_gemm(plan_builder *b, int queue);
/* REDUCE of the refs added since plan_refs_begin(); queue 0 means the next
 * compute queue. */
int plan_refs_begin(plan_builder *b);
void plan_add_ref(plan_builder *b, plan_loc ref);
int plan_emit_reduce(plan_builder *b, int queue, int first_ref, plan_loc dst,
                     int shard, int chunk, int64_t row0, int64_t rows,
                     bool final);
/* `step` waits for `on` (skipped when either is -1 or both share a queue,
 * where queue order already implies it). */
void plan_add_dep(plan_builder *b, int step, int on);
/* Index of the last step on `queue`, or -1. */
int plan_last_on_queue(const plan_builder *b, int queue);

/* Pieces of a shard: for (int i = 0; ...) with row0/rows set per piece. */
#define PLAN_FOR_PIECES(b, shard, i, row0, rows)                             \
    for (int i = 0, n_##i = plan_piece_count((b)->p, (shard)); i < n_##i;    \
         i++)                                                                \
        for (int once_##i = (plan_piece_range((b)->p, (shard), i, &(row0),   \
                                              &(rows)),                      \
                             1);                                             \
             once_##i; once_##i = 0)

/* Own shard into my GATHER (from `from`), then READY(-1) to every peer that
 * pulls it; and, at the end, DONE(-1) from every such peer. */
void plan_publish_own_shard(plan_builder *b, plan_buffer from);
void plan_wait_pullers_done(plan_builder *b);
/* The owner of a non-empty shard lets every writer into its RECV slots. */
void plan_signal_free_to_writers(plan_builder *b);

/* GEMM + RS (all_reduce: + the all-gather of the reduced rows). */
void plan_build_reduce_op(plan_builder *b, plan_algo algo, bool all_reduce);

#endif
