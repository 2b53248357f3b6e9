/* The chunked executor (p2p_chunked.h): maps a plan_build() schedule onto
 * the queues: copy-engine copies between peer-mapped pointers, flag
 * kernels and comm programs, cuBLASLt chunks (or commgemm's kernel where a
 * GEMM adds partials), reduce kernels, events between queues. Everything
 * a call needs (plan, events, cuBLASLt descriptors) is made at its first,
 * eager call; later calls, and graph captures, only enqueue. */
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p_chunked.h"
#include "backend/p2p/p2p_epilogue.h"
#include "backend/p2p/p2p_plans.h"
#include "backend/p2p/p2p_signal.h"
#include "backend/p2p/p2p_timeline.h"
#include "backend/p2p/p2p_views.h"
#include "device/hopper_gemm.h"

/* ------------------------------------------------------------------ steps */

/* A SIGNAL right behind a copy on the comm queue goes by copy when the copy
 * was large (p2p_signal_copy_after). */
static bool signal_by_copy(const p2p_exec_ctx *x, const plan_step *s) {
    return s->kind == PLAN_SIGNAL && s->queue == 0 &&
           p2p_signal_copy_after(x->q0_copy_bytes);
}

static cgm_status add_gathered_into_output(p2p_exec_ctx *x, int shard,
                                           int64_t row0, int64_t rows,
                                           int step, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const plan_loc gather = {x->st->rank, PLAN_BUF_GATHER, 0};
    const plan_loc output = {x->st->rank, PLAN_BUF_OUTPUT, 0};
    char *src = NULL, *dst = NULL;
    const p2p_view *vs = NULL, *vd = NULL;
    cgm_dev_reduce_args a;
    CGM_TRY(p2p_locate(x, &gather, shard, row0, rows, step, &src, &vs));
    CGM_TRY(p2p_locate(x, &output, shard, row0, rows, step, &dst, &vd));
    memset(&a, 0, sizeof a);
    a.nsources = 1;
    a.src[0] = src;
    a.src_ld[0] = vs->ld;
    a.src_dtype = (int)vs->dtype;
    a.dst = dst;
    a.dst_ld = vd->ld;
    a.dst_dtype = (int)vd->dtype;
    a.accumulate = 1;
    a.rows = rows;
    a.cols = vd->width;
    if (x->dry) return CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_dev_reduce(&a, x->st->dev, stream));
fail:
    return status;
}

/* *copied: the bytes the copy engine moved, 0 when a kernel follows. */
static cgm_status run_copy(p2p_exec_ctx *x, const plan_step *s, int i,
                           cudaStream_t stream, size_t *copied) {
    cgm_status status = CGM_SUCCESS;
    p2p_copy_geometry g;
    *copied = 0;
    CGM_TRY(p2p_copy_geometry_of(x, s, i, &g));
    if (g.skip) return CGM_SUCCESS;
    if (g.add_after && x->dry) /* validate the add's addresses */
        CGM_TRY(add_gathered_into_output(x, s->shard, s->row0, s->rows, i,
                                         stream));
    if (x->dry) return CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemcpy2DAsync(g.dst, g.dst_pitch, g.src, g.src_pitch,
                                   g.width, g.height, cudaMemcpyDefault,
                                   stream));
    if (!g.add_after) *copied = g.width * g.height;
    if (g.add_after)
        CGM_TRY(add_gathered_into_output(x, s->shard, s->row0, s->rows, i,
                                         stream));
fail:
    return status;
}

/* The peers' partials that a final GEMM step adds (own_addends):
 * their rows of this piece, one dtype and row stride. */
typedef struct gemm_addends {
    char *ptr[CGM_HGEMM_MAX_ADDENDS];
    cgm_dtype dtype;
    int64_t ld;
} gemm_addends;

static cgm_status locate_addends(p2p_exec_ctx *x, const plan_step *s, int i,
                                 bool accumulate, const p2p_view *vy,
                                 gemm_addends *out) {
    cgm_status status = CGM_SUCCESS;
    const p2p_view *va = NULL;
    memset(out, 0, sizeof *out);
    if (s->ref_count > CGM_HGEMM_MAX_ADDENDS || s->ref_first < 0 ||
        s->ref_first + s->ref_count > x->p->nrefs || accumulate)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: GEMM step %d adds %d sources%s; at most %d "
                         "without accumulate; please report this bug",
                         i, s->ref_count, accumulate ? " and accumulates" : "",
                         CGM_HGEMM_MAX_ADDENDS);
    for (int j = 0; j < s->ref_count; j++) {
        CGM_TRY(p2p_locate(x, &x->p->refs[s->ref_first + j], s->shard, s->row0,
                       s->rows, i, &out->ptr[j], &va));
        if (j == 0) out->dtype = va->dtype, out->ld = va->ld;
        if (va->dtype != out->dtype || va->ld != out->ld ||
            va->width != vy->width) {
            status = cgm_error(CGM_ERROR_INTERNAL,
                               "p2p: GEMM step %d adds %s rows %lld wide "
                               "(ld %lld) to %s rows %lld wide; the addends "
                               "must agree",
                               i, cgm_dtype_name(va->dtype),
                               (long long)va->width, (long long)va->ld,
                               cgm_dtype_name(vy->dtype),
                               (long long)vy->width);
            goto fail;
        }
    }
fail:
    return status;
}

/* The own piece's GEMM through commgemm's kernel, which adds up to
 * CGM_HGEMM_MAX_ADDENDS partials of any dtype in its epilogue (fp32
 * partials with a 16-bit output, or P > 2), where cuBLASLt's C cannot
 * (make_request chose this form only where the kernel applies). `g` holds
 * the piece's operands. */
static cgm_status run_gemm_kernel(p2p_exec_ctx *x, const plan_step *s, int i,
                                  const cgm_lt_gemm_args *g,
                                  const gemm_addends *ad,
                                  cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    p2p_state *st = x->st;
    cgm_hgemm_args a;
    memset(&a, 0, sizeof a);
    a.in_dtype = g->in_dtype;
    a.out_dtype = g->out_dtype;
    a.m = g->m, a.n = g->n, a.k = g->k;
    a.x = g->x, a.ldx = g->ldx;
    a.w = g->w, a.ldw = g->ldw;
    a.y = g->y, a.ldy = g->ldy;
    a.bias = g->bias;
    a.naddends = s->ref_count;
    for (int j = 0; j < s->ref_count; j++) a.addend[j] = ad->ptr[j];
    a.addend_ld = ad->ld;
    a.addend_dtype = ad->dtype;
    /* No flags: the READY waits ran before it on its queue; every SM. */
    const char *why = NULL;
    if (g->layout != CGM_LAYOUT_TN || !cgm_hgemm_supported(&a, &why))
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: GEMM step %d adds %d %s partials, which "
                         "needs commgemm's kernel, and it cannot run it: %s; "
                         "please report this bug",
                         i, s->ref_count, cgm_dtype_name(ad->dtype),
                         g->layout != CGM_LAYOUT_TN ? "not the TN layout"
                                                    : why);
    if (x->dry) return CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_hgemm(&a, stream));
    if (st->own_kernel_notes < 8) {
        st->own_kernel_notes++;
        CGM_INFO(CGM_SUB_P2P, "p2p: GEMM+RS own piece of %lld rows: "
                 "commgemm's kernel adds %d %s partial(s) in its epilogue",
                 (long long)a.m, a.naddends, cgm_dtype_name(ad->dtype));
    }
fail:
    return status;
}

static cgm_status run_gemm(p2p_exec_ctx *x, const plan_step *s, int i,
                           int queue, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    p2p_state *st = x->st;
    cgm_lt_gemm_args g = cgm_lt_args_from_call(c);
    bool bulk = x->p->req.op == PLAN_OP_BULK_AG ||
                x->p->req.op == PLAN_OP_BULK_RS;
    if (bulk) {
        if (!c->has_gemm) return CGM_SUCCESS;
    } else {
        char *xp = NULL, *yp = NULL;
        const p2p_view *vx = NULL, *vy = NULL;
        if (s->rows <= 0) return CGM_SUCCESS;
        CGM_TRY(p2p_locate(x, &s->src, s->shard, s->row0, s->rows, i, &xp, &vx));
        CGM_TRY(p2p_locate(x, &s->dst, s->shard, s->row0, s->rows, i, &yp, &vy));
        g.m = s->rows;
        g.x = xp;
        g.ldx = vx->ld;
        g.y = yp;
        g.ldy = vy->ld;
        g.out_dtype = vy->dtype;
        if (!s->final) { /* a partial: no epilogue */
            g.bias = NULL;
            g.accumulate = false;
        }
        if (s->ref_count > 0) { /* own_addends: the peers' partials */
            gemm_addends ad;
            CGM_TRY(locate_addends(x, s, i, g.accumulate, vy, &ad));
            /* cuBLASLt's C takes one of the output's dtype, and is the
             * faster; else commgemm's kernel. */
            if (s->ref_count != 1 || ad.dtype != vy->dtype)
                return run_gemm_kernel(x, s, i, &g, &ad, stream);
            g.addend = ad.ptr[0];
            g.ld_addend = ad.ld;
        }
    }
    p2p_epi_args(x, s, bulk, &g);
    if (x->fp8.on) { /* p2p_fp8.c (no own_addends: make_request) */
        if (g.addend)
            return cgm_error(CGM_ERROR_INTERNAL, "p2p: fp8 GEMM step %d adds "
                             "partials; please report this bug", i);
        return p2p_fp8_gemm(x, &g, bulk ? 0 : s->row0, queue, stream);
    }
    if (x->dry) /* before the fork: the first sight of a shape may time it */
        return x->search ? cgm_lt_prepare(st->lt, &g, P2P_LT_WORKSPACE,
                                          (cudaStream_t)c->stream,
                                          st->timeout_ms)
                         : CGM_SUCCESS;
    CGM_TRY(cgm_lt_gemm(st->lt, &g, st->lt_workspace[queue], P2P_LT_WORKSPACE,
                        stream));
fail:
    return status;
}

static cgm_status run_reduce(p2p_exec_ctx *x, const plan_step *s, int i,
                             cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    cgm_dev_reduce_args a;
    char *dst = NULL;
    const p2p_view *vd = NULL;
    if (s->rows <= 0) return CGM_SUCCESS;
    if (s->ref_count < 1 || s->ref_count > CGM_DEV_MAX_SOURCES ||
        s->ref_first < 0 || s->ref_first + s->ref_count > x->p->nrefs)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: reduce step %d sums %d sources from ref %d "
                         "(the plan has %d refs, the kernel takes <= %d)",
                         i, s->ref_count, s->ref_first, x->p->nrefs,
                         CGM_DEV_MAX_SOURCES);
    plan_loc dst_loc = s->dst;
    bool add_after = p2p_ar_accumulate(x) && s->final &&
                     s->dst.buf == PLAN_BUF_OUTPUT;
    if (add_after) dst_loc.buf = PLAN_BUF_GATHER; /* sum + bias, no Y */
    memset(&a, 0, sizeof a);
    CGM_TRY(p2p_locate(x, &dst_loc, s->shard, s->row0, s->rows, i, &dst, &vd));
    a.nsources = s->ref_count;
    a.rows = s->rows;
    a.cols = vd->width;
    a.dst = dst;
    a.dst_ld = vd->ld;
    a.dst_dtype = (int)vd->dtype;
    bool bulk = x->p->req.op == PLAN_OP_BULK_AG ||
                x->p->req.op == PLAN_OP_BULK_RS;
    if (s->final && !bulk) {
        a.accumulate = c->accumulate && !add_after;
        a.bias = c->has_bias ? c->bias.data : NULL;
        p2p_epi_reduce(x, s, &a);
    }
    for (int j = 0; j < s->ref_count; j++) {
        char *src = NULL;
        const p2p_view *vs = NULL;
        CGM_TRY(p2p_locate(x, &x->p->refs[s->ref_first + j], s->shard, s->row0,
                       s->rows, i, &src, &vs));
        if (j == 0) a.src_dtype = (int)vs->dtype;
        if ((int)vs->dtype != a.src_dtype || vs->width != vd->width) {
            status = cgm_error(CGM_ERROR_INTERNAL,
                               "p2p: reduce step %d mixes source dtypes or "
                               "widths", i);
            goto fail;
        }
        a.src[j] = src;
        a.src_ld[j] = vs->ld;
    }
    if (add_after && x->dry) /* validate the add's addresses */
        CGM_TRY(add_gathered_into_output(x, s->shard, s->row0, s->rows, i,
                                         stream));
    if (p2p_fp8_reduce_finishes(x, &a)) /* fp8 Y; a bias of another dtype */
        CGM_TRY(p2p_fp8_reduce(x, &a, s->queue, stream));
    else if (!x->dry)
        CGM_CUDA_TRY(cgm_dev_reduce(&a, x->st->dev, stream));
    if (x->dry) return CGM_SUCCESS;
    if (add_after)
        CGM_TRY(add_gathered_into_output(x, s->shard, s->row0, s->rows, i,
                                         stream));
fail:
    return status;
}

/* The flag cell of a SIGNAL (the peer's) or WAIT (mine) step. */
static unsigned long long *flag_cell(const p2p_state *st, const plan_step *s) {
    return s->kind == PLAN_SIGNAL ? p2p_flag_to(st, s->peer, s->flag)
                                  : p2p_flag_from(st, s->peer, s->flag);
}

/* A SIGNAL (by copy when by_copy) or WAIT step. */
static cgm_status run_flag(p2p_exec_ctx *x, const plan_step *s, int i,
                           bool by_copy, cudaStream_t stream) {
    const p2p_state *st = x->st;
    if (s->peer < 0 || s->peer >= st->nranks || s->flag.kind < 0 ||
        s->flag.kind >= PLAN_FLAG_COUNT)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: step %d signals/waits peer %d flag %d", i,
                         s->peer, (int)s->flag.kind);
    if (x->dry) return CGM_SUCCESS;
    if (s->kind == PLAN_WAIT) return p2p_wait(st, s->peer, s->flag, stream);
    return by_copy ? p2p_signal_by_copy(st, flag_cell(st, s), stream)
                   : p2p_signal(st, flag_cell(st, s), stream);
}

static cgm_status run_step(p2p_exec_ctx *x, p2p_plan_entry *e, int i) {
    cgm_status status = CGM_SUCCESS;
    p2p_state *st = x->st;
    const plan_step *s = &e->plan.steps[i];
    cudaStream_t stream = st->queues[s->queue];
    for (int d = 0; d < s->ndeps && !x->dry; d++) {
        int dep = s->deps[d];
        if (e->plan.steps[dep].queue != s->queue)
            CGM_CUDA_TRY(cudaStreamWaitEvent(stream, e->events[dep], 0));
    }
    if (x->timeline && !x->dry) CGM_TRY(p2p_timeline_step(st, i, false, stream));
    size_t copied = 0;
    bool signal_copied = signal_by_copy(x, s);
    switch (s->kind) {
    case PLAN_COPY: CGM_TRY(run_copy(x, s, i, stream, &copied)); break;
    case PLAN_GEMM: CGM_TRY(run_gemm(x, s, i, s->queue, stream)); break;
    case PLAN_REDUCE: CGM_TRY(run_reduce(x, s, i, stream)); break;
    case PLAN_SIGNAL:
    case PLAN_WAIT:
        CGM_TRY(run_flag(x, s, i, signal_copied, stream));
        break;
    default:
        status = cgm_error(CGM_ERROR_INTERNAL, "p2p: step %d has kind %d", i,
                           (int)s->kind);
        goto fail;
    }
    if (x->timeline && !x->dry) CGM_TRY(p2p_timeline_step(st, i, true, stream));
    if (e->events[i] && !x->dry) CGM_CUDA_TRY(cudaEventRecord(e->events[i], stream));
    if (s->queue == 0 && !signal_copied) x->q0_copy_bytes = copied;
fail:
    return status;
}

/* ------------------------------------------------------- comm programs */

/* Runs of consecutive comm-queue steps (signals, waits, and copies between
 * them) come from p2p_units; each stretch of flag steps between two
 * copy-engine copies is enqueued as one program kernel
 * (cgm_dev_program_run): each separate flag kernel costs a few
 * microseconds of launch and dependency latency, and a small op is made of
 * little else. test_p2p_units checks that no wait of another queue is
 * enqueued before the comm steps that precede it (streams may share a
 * hardware queue, and an AG hung so). Not with COMMGEMM_TIMELINE, which
 * times every step. */
_Static_assert(CGM_DEV_PROGRAM_MAX <= P2P_UNIT_MAX,
               "a p2p_units run must fit one program");

static bool programs_on(const p2p_exec_ctx *x) { return !x->timeline; }

/* Enqueues the flag steps steps[0, n) as one program, then records their
 * events. */
static cgm_status run_program(p2p_exec_ctx *x, p2p_plan_entry *e,
                              const int *steps, int n) {
    cgm_status status = CGM_SUCCESS;
    p2p_state *st = x->st;
    cudaStream_t stream = st->queues[0];
    cgm_dev_program prog;
    memset(&prog, 0, sizeof prog);
    prog.rank = st->rank;
    prog.timeout_ns = p2p_timeout_ns(st);
    prog.record = st->abort_dev;
    for (int j = 0; j < n; j++) {
        const plan_step *s = &e->plan.steps[steps[j]];
        cgm_dev_program_op *op = &prog.ops[prog.nops++];
        if (s->kind != PLAN_SIGNAL && s->kind != PLAN_WAIT)
            return cgm_error(CGM_ERROR_INTERNAL, "p2p: step %d (%s) in a "
                             "program of flag steps; please report this bug",
                             steps[j], plan_step_kind_name(s->kind));
        op->kind = s->kind == PLAN_SIGNAL ? CGM_DEV_OP_SIGNAL
                                          : CGM_DEV_OP_WAIT;
        op->flag = flag_cell(st, s);
        op->peer = s->peer;
        op->flag_kind = (int)s->flag.kind;
        op->chunk = s->flag.chunk;
    }
    CGM_CUDA_TRY(cgm_dev_program_run(&prog, st->dev, stream));
    x->q0_copy_bytes = 0;
    for (int j = 0; j < n; j++)
        if (e->events[steps[j]])
            CGM_CUDA_TRY(cudaEventRecord(e->events[steps[j]], stream));
fail:
    return status;
}

/* One unit of p2p_units: a step alone, or a run: its copies on the copy
 * engine, signals right behind a copy by copy where p2p_signal_copy_after
 * says so, and one program per stretch of the other flag steps. */
static cgm_status enqueue_unit(p2p_exec_ctx *x, p2p_plan_entry *e,
                               const p2p_unit *u) {
    cgm_status status = CGM_SUCCESS;
    const int *steps = u->steps;
    int n = u->nsteps;
    if (n == 1) return run_step(x, e, steps[0]);
    const plan_step *head = &e->plan.steps[steps[0]];
    for (int d = 0; d < head->ndeps; d++)
        if (e->plan.steps[head->deps[d]].queue != 0)
            CGM_CUDA_TRY(cudaStreamWaitEvent(x->st->queues[0],
                                             e->events[head->deps[d]], 0));
    /* The head's waits are enqueued above: run_step adds them again, which
     * costs nothing on a stream already past them. */
    for (int j = 0; j < n;) {
        while (j < n && signal_by_copy(x, &e->plan.steps[steps[j]]))
            CGM_TRY(run_step(x, e, steps[j++]));
        int k = j;
        while (k < n && e->plan.steps[steps[k]].kind != PLAN_COPY) k++;
        if (k - j >= 2) CGM_TRY(run_program(x, e, steps + j, k - j));
        else if (k - j == 1) CGM_TRY(run_step(x, e, steps[j]));
        if (k < n) CGM_TRY(run_step(x, e, steps[k]));
        j = k + 1;
    }
fail:
    return status;
}

/* AG's optional gathered input: own rows from INPUT, the others from
 * GATHER, on the comm queue once the copies into GATHER are done. */
static cgm_status copy_gathered(p2p_exec_ctx *x, p2p_plan_entry *e) {
    cgm_status status = CGM_SUCCESS;
    p2p_state *st = x->st;
    const cgm_call *c = x->call;
    cudaStream_t stream = st->queues[0];
    for (int i = 0; i < e->plan.nsteps; i++) {
        const plan_step *s = &e->plan.steps[i];
        if (((s->kind == PLAN_COPY && s->dst.buf == PLAN_BUF_GATHER) ||
             s->kind == PLAN_WAIT) &&
            s->queue != 0)
            CGM_CUDA_TRY(cudaStreamWaitEvent(stream, e->events[i], 0));
    }
    const p2p_view *ga = &x->views[PLAN_BUF_GATHER];
    const cgm_matrix *xg = &c->x_gathered;
    size_t ldg = (size_t)cgm_matrix_ld(xg) * ga->es;
    for (int j = 0; j < st->nranks; j++) {
        int64_t rows = plan_shard_rows(c->m, j, st->nranks);
        int64_t off = plan_shard_offset(c->m, j, st->nranks);
        if (rows == 0) continue;
        const char *src;
        size_t spitch;
        if (j == st->rank) {
            src = x->views[PLAN_BUF_INPUT].base;
            spitch = (size_t)x->views[PLAN_BUF_INPUT].ld * ga->es;
        } else {
            src = ga->base + (ga->split_cols ? (size_t)off * ga->es
                                             : (size_t)off * ga->ld * ga->es);
            spitch = (size_t)ga->ld * ga->es;
        }
        if (x->fp8.on) { /* packed rows: bytes and scales */
            CGM_TRY(p2p_fp8_copy_gathered(x, j, src, off, rows, stream));
            continue;
        }
        char *dst = (char *)xg->data +
                    (ga->split_cols ? (size_t)off * ga->es : (size_t)off * ldg);
        size_t width = ga->split_cols ? (size_t)rows * ga->es
                                      : (size_t)ga->width * ga->es;
        size_t height = ga->split_cols ? (size_t)ga->width : (size_t)rows;
        CGM_CUDA_TRY(cudaMemcpy2DAsync(dst, ldg, src, spitch, width, height,
                                       cudaMemcpyDefault, stream));
    }
fail:
    return status;
}

/* ------------------------------------------------------------------ call */

cgm_status p2p_chunked_execute(p2p_state *st, const cgm_call *call,
                               const plan_request *req) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t caller = (cudaStream_t)call->stream;
    bool capturing = cgm_stream_capturing(caller);
    p2p_plan_entry *e = NULL;
    p2p_exec_ctx x;
    int forked = 0; /* queues forked off the caller's stream, not yet joined */

    CGM_TRY(p2p_plan_lookup(st, req, capturing, &e));
    memset(&x, 0, sizeof x);
    x.st = st;
    x.call = call;
    x.p = &e->plan;
    CGM_TRY(p2p_fp8_setup(&x, capturing));
    CGM_TRY(p2p_epi_setup(&x, capturing));
    CGM_TRY(p2p_views_setup(&x, req->op));
    /* Check every step first: after the fork an error would leave the
     * queues (or a capture) half enqueued. */
    x.dry = true;
    x.search = !capturing;
    for (int i = 0; i < e->plan.nsteps; i++) CGM_TRY(run_step(&x, e, i));
    x.dry = false;

    x.timeline = !capturing && p2p_timeline_on(st);
    if (x.timeline) CGM_TRY(p2p_timeline_begin(st, e->plan.nsteps, caller));
    int nqueues = 1 + req->compute_queues;
    forked = nqueues;
    CGM_TRY(p2p_fork(st, caller, nqueues));
    CGM_TRY(cgm_test_fault_after_fork(&st->fault, st->rank, "p2p"));
    CGM_TRY(p2p_fp8_begin(&x, nqueues));
    if (programs_on(&x)) {
        /* The order depends on the plan and on whether copies join runs
         * (not with AR's accumulate): made once per plan entry and kind. */
        bool join = !p2p_ar_accumulate(&x);
        if (e->nunits < 0 || e->units_join != join) {
            e->nunits = p2p_units(&e->plan, join, CGM_DEV_PROGRAM_MAX,
                                  e->units);
            e->units_join = join;
        }
        for (int u = 0; u < e->nunits; u++)
            CGM_TRY(enqueue_unit(&x, e, &e->units[u]));
    } else {
        for (int i = 0; i < e->plan.nsteps; i++) CGM_TRY(run_step(&x, e, i));
    }
    if (call->op == CGM_OP_ALL_GATHER_GEMM && call->has_x_gathered)
        CGM_TRY(copy_gathered(&x, e));
    CGM_TRY(p2p_join(st, caller, nqueues));
    forked = 0;
    CGM_TRY(p2p_epi_finish(&x, caller));
    if (x.timeline) CGM_TRY(p2p_timeline_end(st, &e->plan, NULL, caller));
    return CGM_SUCCESS;
fail:
    return forked ? p2p_abandon_op(st, caller, forked, status) : status;
}
