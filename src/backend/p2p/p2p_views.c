/* How a schedule's buffers map to memory for one chunked call
 * (p2p_views.h): the call's operands, the workspace's gather buffer and
 * slots, a peer's at the same offsets. */
#include <string.h>

#include "backend/p2p/p2p_views.h"

cgm_status p2p_views_setup(p2p_exec_ctx *x, plan_op op) {
    p2p_state *st = x->st;
    const cgm_call *c = x->call;
    const cgm_resolved_config *cfg = &st->comm->config;
    int r = st->rank, P = st->nranks;
    p2p_view *in = &x->views[PLAN_BUF_INPUT];
    p2p_view *out = &x->views[PLAN_BUF_OUTPUT];
    p2p_view *ga = &x->views[PLAN_BUF_GATHER];
    p2p_view *pa = &x->views[PLAN_BUF_PARTIAL];
    p2p_view *rv = &x->views[PLAN_BUF_RECV];
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

    *in = (p2p_view){.present = true, .base = src->data, .dtype = row_dtype,
                 .es = cgm_dtype_size(row_dtype),
                 .ld = cgm_matrix_ld(src), .width = in_width,
                 .split_cols = nt};
    if (x->fp8.on && op == PLAN_OP_AG_GEMM) {
        /* fp8: this rank's rows packed with their scales (p2p_fp8.h),
         * moved as bytes. */
        in->base = x->fp8.packed;
        in->ld = in->width = x->fp8.pw;
    }
    bool in_shard = op == PLAN_OP_AG_GEMM || op == PLAN_OP_BULK_AG;
    in->row_base = in_shard ? off_r : 0;
    in->capacity = in_shard ? m_r : m;

    cgm_dtype out_dtype = bulk ? c->coll_dtype : c->out_dtype;
    int64_t out_width = bulk ? c->coll_cols : c->n;
    *out = (p2p_view){.present = true, .base = dst->data, .dtype = out_dtype,
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
        ga->ld = nt ? m : in->width;
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
    /* Slots: partial rows of the output width, in the call's partial
     * dtype (summed in fp32 by the reduce kernel); bulk-RS: the send dtype. */
    cgm_dtype slot_dtype =
        op == PLAN_OP_BULK_RS ? c->coll_dtype : c->partial_dtype;
    size_t slot_es = cgm_dtype_size(slot_dtype);
    /* Contiguous (plan.h): slot s starts at row s * slot_rows. */
    size_t stride = (size_t)slot_rows * (size_t)out_width * slot_es;
    p2p_view slot = {.present = true, .dtype = slot_dtype, .es = slot_es,
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

cgm_status p2p_locate(const p2p_exec_ctx *x, const plan_loc *loc, int shard,
                      int64_t row0, int64_t rows, int step, char **out,
                      const p2p_view **v_out) {
    const p2p_state *st = x->st;
    if (loc->buf <= PLAN_BUF_NONE || loc->buf >= PLAN_BUF_COUNT ||
        !x->views[loc->buf].present)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "p2p: step %d names buffer %s, which the %s op does "
                         "not have", step, plan_buffer_name(loc->buf),
                         plan_op_name(x->p->req.op));
    const p2p_view *v = &x->views[loc->buf];
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

bool p2p_ar_accumulate(const p2p_exec_ctx *x) {
    return x->p->req.op == PLAN_OP_GEMM_AR && x->call->accumulate;
}

cgm_status p2p_copy_geometry_of(const p2p_exec_ctx *x, const plan_step *s,
                                int i, p2p_copy_geometry *g) {
    cgm_status status = CGM_SUCCESS;
    char *src = NULL, *dst = NULL;
    const p2p_view *vs = NULL, *vd = NULL;
    plan_loc dst_loc = s->dst;
    memset(g, 0, sizeof *g);
    if (s->rows <= 0 ||
        (p2p_ar_accumulate(x) && s->dst.buf == PLAN_BUF_GATHER &&
         s->src.buf == PLAN_BUF_OUTPUT)) { /* the owner's reduce wrote it */
        g->skip = true;
        return CGM_SUCCESS;
    }
    if (p2p_ar_accumulate(x) && s->src.buf == PLAN_BUF_GATHER &&
        s->dst.buf == PLAN_BUF_OUTPUT) {
        dst_loc.buf = PLAN_BUF_GATHER; /* land in my GATHER, then add */
        g->add_after = true;
    }
    CGM_TRY(p2p_locate(x, &s->src, s->shard, s->row0, s->rows, i, &src, &vs));
    CGM_TRY(p2p_locate(x, &dst_loc, s->shard, s->row0, s->rows, i, &dst, &vd));
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
