/* The p2p executor: maps a plan_build() schedule onto streams, events,
 * copy-engine copies between peer-mapped pointers, flag kernels, cuBLASLt
 * chunks and reduce kernels. Everything a call needs (plan, events,
 * cuBLASLt descriptors, the agreement check) is made at its first, eager
 * call (p2p_plans.c); later calls, and graph captures, only enqueue. */
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p.h"
#include "device/hopper_gemm.h"

/* ---------------------------------------------------------- buffer views */

/* How one plan buffer maps to memory on this rank (and, for peer-visible
 * workspace buffers, at the same offset on every rank). */
typedef struct view {
    bool present;
    char *base;        /* local address */
    bool in_workspace; /* peer visible: base = ws.local + ws_offset */
    size_t ws_offset;
    size_t es;
    cgm_dtype dtype;
    int64_t ld, width;   /* elements; width = extent of the other dim */
    bool split_cols;     /* NT X: the split dimension is the column */
    int64_t row_base;    /* global row of index 0 (not for slots) */
    int64_t capacity;    /* rows (of the split dim) the buffer holds */
    bool slots;          /* PARTIAL / RECV */
    int nslots;
    size_t slot_stride;  /* bytes */
} view;

typedef struct exec_ctx {
    p2p_state *st;
    const cgm_call *call;
    const plan *p;
    bool dry; /* check every step, enqueue nothing */
    bool search; /* dry pass: cgm_lt_prepare the GEMMs (not capturing) */
    bool timeline; /* COMMGEMM_TIMELINE: events around every step */
    /* The bytes of the copy-engine copy last enqueued on the comm queue,
     * when nothing but signals by copy followed it; else 0. A SIGNAL there
     * goes by copy when p2p_signal_copy_after says so. */
    size_t q0_copy_bytes;
    view views[PLAN_BUF_COUNT];
} exec_ctx;

cgm_status p2p_signal_by_copy(const p2p_state *st,
                              unsigned long long *remote_flag,
                              cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    CGM_CUDA_TRY(cudaMemcpyAsync(remote_flag, &st->dev->epoch,
                                 sizeof *remote_flag, cudaMemcpyDeviceToDevice,
                                 stream));
fail:
    return status;
}

bool p2p_signal_copy_after(size_t copied_bytes) {
    return copied_bytes > 0 && copied_bytes >= P2P_SIGNAL_COPY_MIN_BYTES;
}

static bool signal_by_copy(const exec_ctx *x, const plan_step *s) {
    return s->kind == PLAN_SIGNAL && s->queue == 0 &&
           p2p_signal_copy_after(x->q0_copy_bytes);
}

static cgm_status setup_views(exec_ctx *x, plan_op op) {
    p2p_state *st = x->st;
    const cgm_call *c = x->call;
    const cgm_resolved_config *cfg = &st->comm->config;
    int r = st->rank, P = st->nranks;
    view *in = &x->views[PLAN_BUF_INPUT], *out = &x->views[PLAN_BUF_OUTPUT];
    view *ga = &x->views[PLAN_BUF_GATHER], *pa = &x->views[PLAN_BUF_PARTIAL];
    view *rv = &x->views[PLAN_BUF_RECV];
    memset(x->views, 0, sizeof x->views);
    bool bulk = op == PLAN_OP_BULK_AG || op == PLAN_OP_BULK_RS;
    int64_t m = bulk ? c->coll_m : c->m;
    int64_t off_r = plan_shard_offset(m, r, P), m_r = plan_shard_rows(m, r, P);
    int64_t slot_rows = cgm_ceil_div(m, P);
    const cgm_matrix *src = bulk ? &c->send : &c->x;
    const cgm_matrix *dst = bulk ? &c->recv : &c->y;
    cgm_dtype row_dtype = bulk ? c->coll_dtype : c->in_dtype;
    bool nt = !bulk && c->layout == CGM_LAYOUT_NT;
    int64_t in_width = bulk ? c->coll_cols : c->k;

    *in = (view){.present = true, .base = src->data, .dtype = row_dtype,
                 .es = cgm_dtype_size(row_dtype),
                 .ld = cgm_matrix_ld(src), .width = in_width,
                 .split_cols = nt};
    bool in_shard = op == PLAN_OP_AG_GEMM || op == PLAN_OP_BULK_AG;
    in->row_base = in_shard ? off_r : 0;
    in->capacity = in_shard ? m_r : m;

    cgm_dtype out_dtype = bulk ? c->coll_dtype : c->out_dtype;
    int64_t out_width = bulk ? c->coll_cols : c->n;
    *out = (view){.present = true, .base = dst->data, .dtype = out_dtype,
                  .es = cgm_dtype_size(out_dtype),
                  .ld = cgm_matrix_ld(dst), .width = out_width};
    bool out_shard = op == PLAN_OP_GEMM_RS || op == PLAN_OP_BULK_RS;
    out->row_base = out_shard ? off_r : 0;
    out->capacity = out_shard ? m_r : m;

    /* GATHER: AG X rows (k wide; [k, m] for NT), AR reduced Y rows, bulk-AG
     * send rows; ld = the row width (NT: m) so that it is dense. */
    size_t need = 0;
    if (op == PLAN_OP_AG_GEMM || op == PLAN_OP_BULK_AG) {
        *ga = *in;
        ga->ld = nt ? m : in_width;
    } else if (op == PLAN_OP_GEMM_AR) {
        *ga = *out;
        ga->ld = out_width;
    }
    if (ga->present) {
        ga->row_base = 0;
        ga->capacity = m;
        ga->in_workspace = true;
        ga->ws_offset = st->gather_offset;
        ga->base = (char *)st->ws.local + st->gather_offset;
        need = (size_t)m * (size_t)ga->width * ga->es;
        if (need > st->gather_bytes)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "p2p: the %s needs %zu bytes of gather "
                             "workspace (%lld rows x %lld x %s), expected at "
                             "most %zu (sized from max_m=%lld, max_k=%lld, "
                             "max_n=%lld); raise cgm_config.max_m/max_k/max_n "
                             "(COMMGEMM_MAX_M/_MAX_K/_MAX_N)",
                             plan_op_name(op), need, (long long)m,
                             (long long)ga->width, cgm_dtype_name(ga->dtype),
                             st->gather_bytes, (long long)cfg->max_m,
                             (long long)cfg->max_k, (long long)cfg->max_n);
    }
    /* Slots: partial rows of the output width, in the partial dtype
     * (COMMGEMM_PARTIAL_DTYPE: bf16/fp16 outputs ship bf16/fp16 partials,
     * summed in fp32 by the reduce kernel); bulk-RS: the send dtype. */
    cgm_dtype slot_dtype = c->coll_dtype;
    if (op != PLAN_OP_BULK_RS) {
        cgm_status ps = cgm_partial_dtype(c->out_dtype, &slot_dtype);
        if (ps != CGM_SUCCESS) return ps;
    }
    size_t slot_es = cgm_dtype_size(slot_dtype);
    /* Contiguous (plan.h): slot s starts at row s * slot_rows. */
    size_t stride = (size_t)slot_rows * (size_t)out_width * slot_es;
    view slot = {.present = true, .dtype = slot_dtype, .es = slot_es,
                 .ld = out_width, .width = out_width, .capacity = slot_rows,
                 .slots = true, .slot_stride = stride};
    *pa = slot;
    pa->base = st->partial;
    pa->nslots = x->p->partial_slots;
    *rv = slot;
    rv->nslots = x->p->recv_slots;
    rv->in_workspace = true;
    rv->ws_offset = st->recv_offset;
    rv->base = (char *)st->ws.local + st->recv_offset;
    if ((size_t)x->p->recv_slots * stride > st->recv_bytes ||
        (size_t)x->p->partial_slots * stride > st->partial_bytes) {
        if (out_width > cfg->max_n || m > cfg->max_m)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "p2p: %s with m=%lld rows of %lld columns, "
                             "expected m <= max_m=%lld and columns <= "
                             "max_n=%lld (the workspace is sized from them); "
                             "raise cgm_config.max_m/max_n (COMMGEMM_MAX_M/"
                             "COMMGEMM_MAX_N)",
                             plan_op_name(op), (long long)m,
                             (long long)out_width, (long long)cfg->max_m,
                             (long long)cfg->max_n);
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: the %s schedule needs %d recv and %d partial "
                         "slots of %zu bytes, the workspace holds %zu and "
                         "%zu bytes; please report this",
                         plan_op_name(op), x->p->recv_slots,
                         x->p->partial_slots, stride, st->recv_bytes,
                         st->partial_bytes);
    }
    return CGM_SUCCESS;
}

/* Address of global row `row0` of (loc, shard) for `rows` rows. */
static cgm_status locate(const exec_ctx *x, const plan_loc *loc, int shard,
                         int64_t row0, int64_t rows, int step, char **out,
                         const view **v_out) {
    const p2p_state *st = x->st;
    if (loc->buf <= PLAN_BUF_NONE || loc->buf >= PLAN_BUF_COUNT ||
        !x->views[loc->buf].present)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: step %d names buffer %s, which the %s op does "
                         "not have", step, plan_buffer_name(loc->buf),
                         plan_op_name(x->p->req.op));
    const view *v = &x->views[loc->buf];
    char *base = v->base;
    if (loc->rank != st->rank) {
        if (!v->in_workspace || loc->rank < 0 || loc->rank >= st->nranks)
            return cgm_error(CGM_ERROR_INTERNAL,
                             "p2p: step %d accesses %s of rank %d, expected "
                             "a peer-visible workspace buffer of a valid "
                             "rank", step, plan_buffer_name(loc->buf),
                             loc->rank);
        base = (char *)st->ws.peer[loc->rank] + v->ws_offset;
    }
    int64_t index = row0 - v->row_base, capacity = v->capacity;
    if (v->slots) {
        if (loc->slot < 0 || loc->slot >= v->nslots)
            return cgm_error(CGM_ERROR_INTERNAL,
                             "p2p: step %d uses %s slot %d of %d", step,
                             plan_buffer_name(loc->buf), loc->slot,
                             v->nslots);
        base += (size_t)loc->slot * v->slot_stride;
        /* shard -1: the slots seen as one array of global rows. */
        index = shard < 0 ? row0
                          : row0 - plan_shard_offset(x->p->req.m, shard,
                                                     st->nranks);
        capacity = shard < 0 ? (int64_t)(v->nslots - loc->slot) * v->capacity
                             : v->capacity;
    }
    if (index < 0 || index + rows > capacity)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: step %d addresses rows [%lld, %lld) of %s "
                         "(shard %d, slot %d), outside its %lld rows",
                         step, (long long)row0, (long long)(row0 + rows),
                         plan_buffer_name(loc->buf), shard, loc->slot,
                         (long long)capacity);
    *out = v->split_cols ? base + (size_t)index * v->es
                         : base + (size_t)index * (size_t)v->ld * v->es;
    *v_out = v;
    return CGM_SUCCESS;
}

/* ------------------------------------------------------------------ steps */

/* GEMM+AR with accumulate: each rank must add the reduced rows to ITS OWN
 * Y, so the reduced rows travel through GATHER without anybody's Y in them:
 * the owner's final reduce writes sum + bias into GATHER, and every rank
 * (owner included) then adds GATHER rows into OUTPUT with this kernel. */
static bool ar_accumulate(const exec_ctx *x) {
    return x->p->req.op == PLAN_OP_GEMM_AR && x->call->accumulate;
}

static cgm_status add_gathered_into_output(exec_ctx *x, int shard,
                                           int64_t row0, int64_t rows,
                                           int step, cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const plan_loc gather = {x->st->rank, PLAN_BUF_GATHER, 0};
    const plan_loc output = {x->st->rank, PLAN_BUF_OUTPUT, 0};
    char *src = NULL, *dst = NULL;
    const view *vs = NULL, *vd = NULL;
    cgm_dev_reduce_args a;
    CGM_TRY(locate(x, &gather, shard, row0, rows, step, &src, &vs));
    CGM_TRY(locate(x, &output, shard, row0, rows, step, &dst, &vd));
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

/* Where a COPY step's rows go: a 2D copy of `height` rows of `width`
 * bytes. *skip: nothing to copy (no rows, or AR's reduced rows already in
 * GATHER); *add_after: AR with accumulate lands the rows in GATHER and adds
 * them to OUTPUT after the copy. */
typedef struct copy_geometry {
    char *dst;
    const char *src;
    size_t dst_pitch, src_pitch, width, height;
    bool skip, add_after;
} copy_geometry;

static cgm_status copy_geometry_of(const exec_ctx *x, const plan_step *s,
                                   int i, copy_geometry *g) {
    cgm_status status = CGM_SUCCESS;
    char *src = NULL, *dst = NULL;
    const view *vs = NULL, *vd = NULL;
    plan_loc dst_loc = s->dst;
    memset(g, 0, sizeof *g);
    if (s->rows <= 0 ||
        (ar_accumulate(x) && s->dst.buf == PLAN_BUF_GATHER &&
         s->src.buf == PLAN_BUF_OUTPUT)) { /* the owner's reduce wrote it */
        g->skip = true;
        return CGM_SUCCESS;
    }
    if (ar_accumulate(x) && s->src.buf == PLAN_BUF_GATHER &&
        s->dst.buf == PLAN_BUF_OUTPUT) {
        dst_loc.buf = PLAN_BUF_GATHER; /* land in my GATHER, then add */
        g->add_after = true;
    }
    CGM_TRY(locate(x, &s->src, s->shard, s->row0, s->rows, i, &src, &vs));
    CGM_TRY(locate(x, &dst_loc, s->shard, s->row0, s->rows, i, &dst, &vd));
    if (vs->es != vd->es || vs->width != vd->width ||
        vs->split_cols != vd->split_cols) {
        status = cgm_error(CGM_ERROR_INTERNAL,
                           "p2p: copy step %d from %s to %s: element sizes "
                           "%zu/%zu or widths %lld/%lld differ", i,
                           plan_buffer_name(s->src.buf),
                           plan_buffer_name(s->dst.buf), vs->es, vd->es,
                           (long long)vs->width, (long long)vd->width);
        goto fail;
    }
    g->dst = dst;
    g->src = src;
    g->dst_pitch = (size_t)vd->ld * vd->es;
    g->src_pitch = (size_t)vs->ld * vs->es;
    g->width = vs->split_cols ? (size_t)s->rows * vs->es
                              : (size_t)vs->width * vs->es;
    g->height = vs->split_cols ? (size_t)vs->width : (size_t)s->rows;
fail:
    return status;
}

/* *copied: the bytes the copy engine moved, 0 when a kernel follows. */
static cgm_status run_copy(exec_ctx *x, const plan_step *s, int i,
                           cudaStream_t stream, size_t *copied) {
    cgm_status status = CGM_SUCCESS;
    copy_geometry g;
    *copied = 0;
    CGM_TRY(copy_geometry_of(x, s, i, &g));
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

static cgm_status locate_addends(exec_ctx *x, const plan_step *s, int i,
                                 bool accumulate, const view *vy,
                                 gemm_addends *out) {
    cgm_status status = CGM_SUCCESS;
    const view *va = NULL;
    memset(out, 0, sizeof *out);
    if (s->ref_count > CGM_HGEMM_MAX_ADDENDS || s->ref_first < 0 ||
        s->ref_first + s->ref_count > x->p->nrefs || accumulate)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: GEMM step %d adds %d sources%s; at most %d "
                         "without accumulate; please report this bug",
                         i, s->ref_count, accumulate ? " and accumulates" : "",
                         CGM_HGEMM_MAX_ADDENDS);
    for (int j = 0; j < s->ref_count; j++) {
        CGM_TRY(locate(x, &x->p->refs[s->ref_first + j], s->shard, s->row0,
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
static cgm_status run_gemm_kernel(exec_ctx *x, const plan_step *s, int i,
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

static cgm_status run_gemm(exec_ctx *x, const plan_step *s, int i, int queue,
                           cudaStream_t stream) {
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
        const view *vx = NULL, *vy = NULL;
        if (s->rows <= 0) return CGM_SUCCESS;
        CGM_TRY(locate(x, &s->src, s->shard, s->row0, s->rows, i, &xp, &vx));
        CGM_TRY(locate(x, &s->dst, s->shard, s->row0, s->rows, i, &yp, &vy));
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
             * faster (docs/PERFORMANCE.md 4l); else commgemm's kernel. */
            if (s->ref_count != 1 || ad.dtype != vy->dtype)
                return run_gemm_kernel(x, s, i, &g, &ad, stream);
            g.addend = ad.ptr[0];
            g.ld_addend = ad.ld;
        }
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

static cgm_status run_reduce(exec_ctx *x, const plan_step *s, int i,
                             cudaStream_t stream) {
    cgm_status status = CGM_SUCCESS;
    const cgm_call *c = x->call;
    cgm_dev_reduce_args a;
    char *dst = NULL;
    const view *vd = NULL;
    if (s->rows <= 0) return CGM_SUCCESS;
    if (s->ref_count < 1 || s->ref_count > CGM_DEV_MAX_SOURCES ||
        s->ref_first < 0 || s->ref_first + s->ref_count > x->p->nrefs)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: reduce step %d sums %d sources from ref %d "
                         "(the plan has %d refs, the kernel takes <= %d)",
                         i, s->ref_count, s->ref_first, x->p->nrefs,
                         CGM_DEV_MAX_SOURCES);
    plan_loc dst_loc = s->dst;
    bool add_after = ar_accumulate(x) && s->final &&
                     s->dst.buf == PLAN_BUF_OUTPUT;
    if (add_after) dst_loc.buf = PLAN_BUF_GATHER; /* sum + bias, no Y */
    memset(&a, 0, sizeof a);
    CGM_TRY(locate(x, &dst_loc, s->shard, s->row0, s->rows, i, &dst, &vd));
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
    }
    for (int j = 0; j < s->ref_count; j++) {
        char *src = NULL;
        const view *vs = NULL;
        CGM_TRY(locate(x, &x->p->refs[s->ref_first + j], s->shard, s->row0,
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
    if (x->dry) return CGM_SUCCESS;
    CGM_CUDA_TRY(cgm_dev_reduce(&a, x->st->dev, stream));
    if (add_after)
        CGM_TRY(add_gathered_into_output(x, s->shard, s->row0, s->rows, i,
                                         stream));
fail:
    return status;
}

/* The flag cell of a SIGNAL or WAIT step. */
static unsigned long long *flag_cell(const p2p_state *st, const plan_step *s) {
    return s->kind == PLAN_SIGNAL ? p2p_flag_to(st, s->peer, s->flag)
                                  : p2p_flag_from(st, s->peer, s->flag);
}

static cgm_status run_step(exec_ctx *x, p2p_plan_entry *e, int i) {
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
        if (s->peer < 0 || s->peer >= st->nranks || s->flag.kind < 0 ||
            s->flag.kind >= PLAN_FLAG_COUNT) {
            status = cgm_error(CGM_ERROR_INTERNAL,
                               "p2p: step %d signals/waits peer %d flag %d",
                               i, s->peer, (int)s->flag.kind);
            goto fail;
        }
        if (x->dry) break;
        if (signal_copied)
            CGM_TRY(p2p_signal_by_copy(st, flag_cell(st, s), stream));
        else if (s->kind == PLAN_SIGNAL)
            CGM_CUDA_TRY(cgm_dev_signal(st->dev, flag_cell(st, s), stream));
        else
            CGM_CUDA_TRY(cgm_dev_wait(
                st->dev, flag_cell(st, s), st->abort_dev, st->rank, s->peer,
                (int)s->flag.kind, s->flag.chunk, p2p_timeout_ns(st), stream));
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
_Static_assert(CGM_DEV_PROGRAM_MAX <= PLAN_UNIT_MAX,
               "a plan_units run must fit one program");

static bool programs_on(const exec_ctx *x) { return !x->timeline; }

/* Enqueues the flag steps steps[0, n) as one program, then records their
 * events. */
static cgm_status run_program(exec_ctx *x, p2p_plan_entry *e,
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
static cgm_status enqueue_unit(exec_ctx *x, p2p_plan_entry *e,
                               const plan_unit *u) {
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
static cgm_status copy_gathered(exec_ctx *x, p2p_plan_entry *e) {
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
    const view *ga = &x->views[PLAN_BUF_GATHER];
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

static int auto_splits(plan_op op, int64_t m, int nranks) {
    int64_t shard = cgm_ceil_div(m, nranks);
    if (op == PLAN_OP_BULK_AG || op == PLAN_OP_BULK_RS) return 1;
    /* Pieces of >= 2048 rows keep each cuBLASLt chunk efficient; a few
     * pieces per shard let the first GEMM start early and shorten the tail. */
    int64_t s = shard / 2048;
    if (s > 4) s = 4;
    if (s < 1) s = 1;
    return (int)s;
}

static cgm_status make_request(p2p_state *st, const cgm_call *call,
                               plan_request *req) {
    cgm_status status = CGM_SUCCESS;
    memset(req, 0, sizeof *req);
    req->nranks = st->nranks;
    req->rank = st->rank;
    req->has_gemm = true;
    req->has_collective = true;
    req->compute_queues = 2;
    switch (call->op) {
    case CGM_OP_ALL_GATHER_GEMM:
        req->op = PLAN_OP_AG_GEMM;
        /* One compute queue, or the tuner's two (call->queues). */
        req->compute_queues = call->queues > 0 ? call->queues : 1;
        break;
    case CGM_OP_GEMM_REDUCE_SCATTER:
        /* One compute queue: each push starts when its GEMM ends (on
         * two, the GPU may run a later GEMM beside or before the one
         * whose push is due). */
        req->op = PLAN_OP_GEMM_RS;
        req->compute_queues = 1;
        break;
    case CGM_OP_GEMM_ALL_REDUCE:
        req->op = PLAN_OP_GEMM_AR;
        req->compute_queues = 1;
        break;
    case CGM_OP_BULK:
        req->op = call->collective == CGM_COLLECTIVE_ALL_GATHER
                      ? PLAN_OP_BULK_AG : PLAN_OP_BULK_RS;
        req->has_gemm = call->has_gemm;
        req->has_collective = call->has_collective;
        break;
    default:
        return cgm_error(CGM_ERROR_INTERNAL, "p2p: op %d", (int)call->op);
    }
    bool bulk = call->op == CGM_OP_BULK;
    req->m = bulk ? (call->has_collective ? call->coll_m : 0) : call->m;
    switch (call->algo) {
    case CGM_ALGO_AUTO:
        req->algo = bulk ? PLAN_ALGO_BULK : PLAN_ALGO_SPLIT;
        break;
    case CGM_ALGO_SPLIT_PIPELINED:
    case CGM_ALGO_FUSED: /* calls p2p_fused_applies() refused */
        req->algo = bulk ? PLAN_ALGO_BULK : PLAN_ALGO_SPLIT;
        break;
    case CGM_ALGO_RING: req->algo = bulk ? PLAN_ALGO_BULK : PLAN_ALGO_RING;
        break;
    case CGM_ALGO_BULK:
        if (!bulk)
            return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                             "p2p: algorithm 'bulk' is for cgm_bulk_overlap, "
                             "found it on %s; use split, ring or no_overlap",
                             cgm_op_name(call->op));
        req->algo = PLAN_ALGO_BULK;
        break;
    case CGM_ALGO_NO_OVERLAP: req->algo = PLAN_ALGO_NO_OVERLAP; break;
    default:
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "p2p: algorithm %d",
                         (int)call->algo);
    }
    int splits = call->splits > 0 ? call->splits
                                  : auto_splits(req->op, req->m, st->nranks);
    req->splits = splits > P2P_MAX_SPLITS ? P2P_MAX_SPLITS : splits;
    /* GEMM+RS split's own pieces add the peer's partial in their GEMM
     * where the plan layer's rule says so and an engine can: cuBLASLt's C
     * takes a partial of the output's dtype, commgemm's kernel one of any
     * partial dtype (TN, 16-bit inputs, sm_90: p2p_fused_tunable). Neither
     * beside an accumulate. This rank's choice alone: the writers' side of
     * the plan is the same either way. */
    if (!call->accumulate && call->k > 0 && plan_prefers_own_addends(req)) {
        cgm_dtype pd = call->out_dtype;
        CGM_TRY(cgm_partial_dtype(call->out_dtype, &pd));
        req->own_addends =
            pd == call->out_dtype || p2p_fused_tunable(st, call);
    }
fail:
    return status;
}

cgm_status p2p_abandon_op(p2p_state *st, cudaStream_t caller, int nqueues,
                          cgm_status status) {
    for (int q = 0; q < nqueues; q++)
        if (cudaEventRecord(st->join[q], st->queues[q]) == cudaSuccess)
            (void)cudaStreamWaitEvent(caller, st->join[q], 0);
    cgm_error_context(status, "p2p: rank %d failed after enqueueing part "
                      "of the op, so the ranks are out of step and the comm "
                      "is broken (destroy it and create a new one)", st->rank);
    cgm_comm_mark_broken(st->comm, status);
    /* A capture ran nothing on the peers: there is nothing to tell. */
    if (!cgm_stream_capturing(caller)) p2p_tell_peers(st, st->rank);
    return status;
}

cgm_status p2p_execute(p2p_state *st, const cgm_call *call) {
    cgm_status status = CGM_SUCCESS;
    cudaStream_t caller = (cudaStream_t)call->stream;
    bool capturing = cgm_stream_capturing(caller);
    const cgm_resolved_config *cfg = &st->comm->config;
    plan_request req;
    p2p_plan_entry *e = NULL;
    exec_ctx x;
    int forked = 0; /* queues forked off the caller's stream, not yet joined */

    /* Agreement first: a rank whose call is beyond the maxima while its
     * peers' are not (another shape) makes every rank fail the exchange
     * with CGM_ERROR_MISMATCH, instead of leaving the peers in it. */
    CGM_TRY(p2p_check_agreement(st, call, capturing));
    if (call->has_gemm && (call->k > cfg->max_k || call->n > cfg->max_n))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: %s with n=%lld, k=%lld, expected n <= "
                         "max_n=%lld and k <= max_k=%lld (the workspace is "
                         "sized from them); raise cgm_config.max_n/max_k "
                         "(COMMGEMM_MAX_N/COMMGEMM_MAX_K)",
                         cgm_op_name(call->op), (long long)call->n,
                         (long long)call->k, (long long)cfg->max_n,
                         (long long)cfg->max_k);
    CGM_TRY(make_request(st, call, &req));
    if (req.m > cfg->max_m)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "p2p: %s with m=%lld, expected m <= max_m=%lld (the "
                         "workspace is sized from it); raise cgm_config.max_m "
                         "(COMMGEMM_MAX_M)", cgm_op_name(call->op),
                         (long long)req.m, (long long)cfg->max_m);
    if (call->algo == CGM_ALGO_FUSED) {
        const char *why = NULL;
        if (p2p_fused_applies(st, call, &why))
            return p2p_fused_execute(st, call);
        if (st->fused_fallback_notes < 8) {
            st->fused_fallback_notes++;
            CGM_INFO(CGM_SUB_P2P, "p2p: fused %s m=%lld n=%lld k=%lld runs "
                     "split: %s", cgm_op_name(call->op), (long long)call->m,
                     (long long)call->n, (long long)call->k, why);
        }
    }
    CGM_TRY(p2p_plan_lookup(st, &req, capturing, &e));
    memset(&x, 0, sizeof x);
    x.st = st;
    x.call = call;
    x.p = &e->plan;
    CGM_TRY(setup_views(&x, req.op));
    /* Check every step first: after the fork an error would leave the
     * queues (or a capture) half enqueued. */
    x.dry = true;
    x.search = !capturing;
    for (int i = 0; i < e->plan.nsteps; i++) CGM_TRY(run_step(&x, e, i));
    x.dry = false;

    x.timeline = !capturing && p2p_timeline_on(st);
    if (x.timeline) CGM_TRY(p2p_timeline_begin(st, e->plan.nsteps, caller));
    /* Fork: a fresh epoch, then every queue starts after the caller's work. */
    int nqueues = 1 + req.compute_queues;
    forked = nqueues;
    CGM_CUDA_TRY(cgm_dev_epoch_bump(st->dev, caller));
    CGM_CUDA_TRY(cudaEventRecord(st->fork, caller));
    for (int q = 0; q < nqueues; q++)
        CGM_CUDA_TRY(cudaStreamWaitEvent(st->queues[q], st->fork, 0));
    CGM_TRY(cgm_test_fault_after_fork(&st->fault, st->rank, "p2p"));
    if (programs_on(&x)) {
        /* The order depends on the plan, the comm's run order and whether
         * copies join (accumulate): made once per plan entry and kind. */
        bool join = !ar_accumulate(&x);
        if (e->nunits < 0 || e->units_join != join) {
            e->nunits = plan_units(&e->plan, join, CGM_DEV_PROGRAM_MAX,
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
    /* Join: the caller's stream continues after every queue. */
    for (int q = 0; q < nqueues; q++) {
        CGM_CUDA_TRY(cudaEventRecord(st->join[q], st->queues[q]));
        CGM_CUDA_TRY(cudaStreamWaitEvent(caller, st->join[q], 0));
    }
    forked = 0;
    if (x.timeline) CGM_TRY(p2p_timeline_end(st, &e->plan, NULL, caller));
    return CGM_SUCCESS;
fail:
    return forked ? p2p_abandon_op(st, caller, forked, status) : status;
}
