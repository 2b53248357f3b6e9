/* Where the time of a p2p op goes (COMMGEMM_TIMELINE=prefix): a timing
 * event before and after every step on its queue, and after the op a
 * Chrome-trace JSON (chrome://tracing, ui.perfetto.dev) with one row per
 * queue, written to <prefix>.<op>.<algo>.r<rank>.json (each eager call
 * rewrites its file, so the file holds the last call), plus one INFO line
 * with the op's span, the busy time of the comm and compute queues and the
 * GEMM time. Diagnostic only: the op then ends with a stream synchronize,
 * and graph captures are not traced. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p_timeline.h"

void p2p_timeline_free(p2p_state *st) {
    p2p_timeline *t = &st->timeline;
    for (int i = 0; i < t->nevents; i++)
        if (t->events[i]) cudaEventDestroy(t->events[i]);
    free(t->events);
    free(t->prefix);
    memset(t, 0, sizeof *t);
}

bool p2p_timeline_on(p2p_state *st) {
    p2p_timeline *t = &st->timeline;
    if (!t->checked) {
        bool from_env = false;
        const char *p = cgm_param_string("COMMGEMM_TIMELINE", &from_env);
        t->checked = true;
        if (p && *p) t->prefix = strdup(p);
    }
    return t->prefix != NULL;
}

/* Events 0 (op start, on the caller's stream) and 1 + 2i, 2 + 2i (before
 * and after step i). */
cgm_status p2p_timeline_begin(p2p_state *st, int nsteps, cudaStream_t caller) {
    cgm_status status = CGM_SUCCESS;
    p2p_timeline *t = &st->timeline;
    int need = 1 + 2 * nsteps;
    if (need > t->nevents) {
        cudaEvent_t *grown = realloc(t->events, (size_t)need * sizeof *grown);
        if (!grown) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "timeline events");
        t->events = grown;
        for (int i = t->nevents; i < need; i++) t->events[i] = NULL;
        for (; t->nevents < need; t->nevents++)
            CGM_CUDA_TRY(cudaEventCreate(&t->events[t->nevents]));
    }
    CGM_CUDA_TRY(cudaEventRecord(t->events[0], caller));
fail:
    return status;
}

cgm_status p2p_timeline_step(p2p_state *st, int step, bool after,
                             cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cudaEventRecord(st->timeline.events[1 + 2 * step + after], stream));
fail:
    return status;
}

static void step_label(const plan_step *s, char *out, size_t len) {
    switch (s->kind) {
    case PLAN_COPY:
        snprintf(out, len, "copy r%d.%s -> r%d.%s shard %d chunk %d rows %lld",
                 s->src.rank, plan_buffer_name(s->src.buf), s->dst.rank,
                 plan_buffer_name(s->dst.buf), s->shard, s->chunk,
                 (long long)s->rows);
        break;
    case PLAN_SIGNAL:
    case PLAN_WAIT:
        snprintf(out, len, "%s %s r%d flag %d/%d",
                 plan_step_kind_name(s->kind),
                 s->kind == PLAN_SIGNAL ? "to" : "from", s->peer,
                 (int)s->flag.kind, s->flag.chunk);
        break;
    default:
        snprintf(out, len, "%s %s -> %s shard %d chunk %d rows %lld",
                 plan_step_kind_name(s->kind), plan_buffer_name(s->src.buf),
                 plan_buffer_name(s->dst.buf), s->shard, s->chunk,
                 (long long)s->rows);
        break;
    }
}

/* After the join: waits for the op, then writes the trace and the line. */
cgm_status p2p_timeline_end(p2p_state *st, const plan *p, const char *algo,
                            cudaStream_t caller) {
    cgm_status status = CGM_SUCCESS;
    p2p_timeline *t = &st->timeline;
    char path[1024], label[160];
    double busy[P2P_MAX_QUEUES] = {0}, gemm = 0, end = 0;
    FILE *f = NULL;
    CGM_CUDA_TRY(cudaStreamSynchronize(caller));
    if (!algo) algo = plan_algo_name(p->req.algo);
    snprintf(path, sizeof path, "%s.%s.%s.r%d.json", t->prefix,
             plan_op_name(p->req.op), algo, st->rank);
    f = fopen(path, "w");
    if (!f) {
        CGM_WARN(CGM_SUB_P2P, "COMMGEMM_TIMELINE: cannot write %s", path);
        return CGM_SUCCESS;
    }
    fprintf(f, "{\"traceEvents\": [");
    for (int i = 0; i < p->nsteps; i++) {
        const plan_step *s = &p->steps[i];
        float a = 0, b = 0;
        CGM_CUDA_TRY(cudaEventElapsedTime(&a, t->events[0], t->events[1 + 2 * i]));
        CGM_CUDA_TRY(cudaEventElapsedTime(&b, t->events[0], t->events[2 + 2 * i]));
        double us0 = a * 1e3, dur = (b - a) * 1e3;
        if (s->queue >= 0 && s->queue < P2P_MAX_QUEUES) busy[s->queue] += dur;
        if (s->kind == PLAN_GEMM) gemm += dur;
        if (b * 1e3 > end) end = b * 1e3;
        step_label(s, label, sizeof label);
        fprintf(f, "%s\n  {\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", "
                "\"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": %d, "
                "\"args\": {\"step\": %d}}",
                i ? "," : "", label, plan_step_kind_name(s->kind), us0, dur,
                st->rank, s->queue, i);
    }
    fprintf(f, "\n]}\n");
    CGM_INFO(CGM_SUB_P2P,
             "timeline %s/%s m=%lld: span %.1f us; busy: comm queue %.1f us, "
             "compute queues %.1f + %.1f + %.1f us; GEMM steps %.1f us (%s)",
             plan_op_name(p->req.op), algo,
             (long long)p->req.m, end, busy[0], busy[1], busy[2], busy[3],
             gemm, path);
fail:
    if (f) fclose(f);
    return status;
}
