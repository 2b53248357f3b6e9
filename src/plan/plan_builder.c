/* Step emitters: growable arrays and the defaults of every field. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_builder.h"

static bool reserve(plan_builder *b, void **array, int *cap, int need,
                    size_t elem) {
    if (need <= *cap) return true;
    int n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    void *grown = realloc(*array, (size_t)n * elem);
    if (!grown) {
        b->failed = true;
        b->why = "out of memory";
        return false;
    }
    *array = grown;
    *cap = n;
    return true;
}

static plan_step blank(plan_step_kind kind, int queue) {
    plan_step s;
    memset(&s, 0, sizeof s);
    s.kind = kind;
    s.queue = queue;
    s.peer = -1;
    s.flag.kind = PLAN_FLAG_READY;
    s.flag.chunk = -1;
    s.src = plan_at(-1, PLAN_BUF_NONE, 0);
    s.dst = plan_at(-1, PLAN_BUF_NONE, 0);
    s.shard = -1;
    s.chunk = -1;
    return s;
}

static int emit(plan_builder *b, const plan_step *s) {
    if (b->failed) return -1;
    plan *p = b->p;
    void *steps = p->steps;
    if (!reserve(b, &steps, &b->cap_steps, p->nsteps + 1, sizeof *s))
        return -1;
    p->steps = steps;
    p->steps[p->nsteps] = *s;
    return p->nsteps++;
}

static int next_compute_queue(plan_builder *b) {
    return 1 + (b->next_compute++ % b->cq);
}

int plan_emit_copy(plan_builder *b, plan_loc src, plan_loc dst, int shard,
                   int chunk, int64_t row0, int64_t rows) {
    plan_step s = blank(PLAN_COPY, 0);
    s.src = src;
    s.dst = dst;
    s.peer = src.rank != b->r ? src.rank : dst.rank;
    s.shard = shard;
    s.chunk = chunk;
    s.row0 = row0;
    s.rows = rows;
    return emit(b, &s);
}

static int flag_step(plan_builder *b, plan_step_kind kind, int queue, int peer,
                     plan_flag_kind f, int chunk) {
    plan_step s = blank(kind, queue);
    s.peer = peer;
    s.flag.kind = f;
    s.flag.chunk = chunk;
    return emit(b, &s);
}

int plan_emit_signal(plan_builder *b, int peer, plan_flag_kind f, int chunk) {
    return flag_step(b, PLAN_SIGNAL, 0, peer, f, chunk);
}

int plan_emit_wait(plan_builder *b, int peer, plan_flag_kind f, int chunk) {
    return flag_step(b, PLAN_WAIT, 0, peer, f, chunk);
}

int plan_emit_wait_for_gemm(plan_builder *b, int peer, plan_flag_kind f,
                            int chunk) {
    return flag_step(b, PLAN_WAIT, 1 + (b->next_compute % b->cq), peer, f,
                     chunk);
}

static plan_step gemm_step(plan_builder *b, plan_loc src, plan_loc dst,
                           int shard, int chunk, int64_t row0, int64_t rows,
                           bool final) {
    plan_step s = blank(PLAN_GEMM, next_compute_queue(b));
    s.src = src;
    s.dst = dst;
    s.shard = shard;
    s.chunk = chunk;
    s.row0 = row0;
    s.rows = rows;
    s.final = final;
    return s;
}

int plan_emit_gemm(plan_builder *b, plan_loc src, plan_loc dst, int shard,
                   int chunk, int64_t row0, int64_t rows, bool final) {
    plan_step s = gemm_step(b, src, dst, shard, chunk, row0, rows, final);
    return emit(b, &s);
}

int plan_emit_gemm_add(plan_builder *b, plan_loc src, plan_loc dst, int shard,
                       int chunk, int64_t row0, int64_t rows, int first_ref) {
    plan_step s = gemm_step(b, src, dst, shard, chunk, row0, rows, true);
    s.ref_first = first_ref;
    s.ref_count = b->p->nrefs - first_ref;
    return emit(b, &s);
}

int plan_emit_whole_gemm(plan_builder *b, int queue) {
    plan_step s = blank(PLAN_GEMM, queue);
    return emit(b, &s);
}

int plan_refs_begin(plan_builder *b) { return b->p->nrefs; }

void plan_add_ref(plan_builder *b, plan_loc ref) {
    if (b->failed) return;
    plan *p = b->p;
    void *refs = p->refs;
    if (!reserve(b, &refs, &b->cap_refs, p->nrefs + 1, sizeof ref)) return;
    p->refs = refs;
    p->refs[p->nrefs++] = ref;
}

int plan_emit_reduce(plan_builder *b, int queue, int first_ref, plan_loc dst,
                     int shard, int chunk, int64_t row0, int64_t rows,
                     bool final) {
    plan_step s = blank(PLAN_REDUCE, queue ? queue : next_compute_queue(b));
    s.ref_first = first_ref;
    s.ref_count = b->p->nrefs - first_ref;
    s.dst = dst;
    s.shard = shard;
    s.chunk = chunk;
    s.row0 = row0;
    s.rows = rows;
    s.final = final;
    return emit(b, &s);
}

void plan_add_dep(plan_builder *b, int step, int on) {
    if (b->failed || step < 0 || on < 0) return;
    plan_step *s = &b->p->steps[step];
    if (b->p->steps[on].queue == s->queue) return;
    for (int i = 0; i < s->ndeps; i++)
        if (s->deps[i] == on) return;
    if (s->ndeps == PLAN_MAX_DEPS) {
        b->failed = true;
        b->why = "internal error: a step needs more than PLAN_MAX_DEPS deps";
        return;
    }
    s->deps[s->ndeps++] = on;
}

int plan_last_on_queue(const plan_builder *b, int queue) {
    for (int i = b->p->nsteps - 1; i >= 0; i--)
        if (b->p->steps[i].queue == queue) return i;
    return -1;
}

void plan_publish_own_shard(plan_builder *b, plan_buffer from) {
    int r = b->r, P = b->P;
    if (plan_rows_of(b, r) == 0) return;
    plan_emit_copy(b, plan_at(r, from, 0), plan_at(r, PLAN_BUF_GATHER, 0), r,
                   plan_chunk_of(b, r, 0), plan_offset_of(b, r),
                   plan_rows_of(b, r));
    /* The peer just behind me pulls from me first (its r+1 is me). */
    for (int k = 1; k < P; k++)
        plan_emit_signal(b, plan_mod(r - k, P), PLAN_FLAG_READY, -1);
}

void plan_wait_pullers_done(plan_builder *b) {
    int r = b->r, P = b->P;
    if (plan_rows_of(b, r) == 0) return;
    for (int k = 1; k < P; k++)
        plan_emit_wait(b, plan_mod(r + k, P), PLAN_FLAG_DONE, -1);
}

void plan_signal_free_to_writers(plan_builder *b) {
    int r = b->r, P = b->P;
    if (plan_rows_of(b, r) == 0) return;
    for (int k = 1; k < P; k++)
        plan_emit_signal(b, plan_mod(r - k, P), PLAN_FLAG_FREE, -1);
}
