/* Executes one rank's plan: the calling thread is the comm thread (queue 0:
 * copies, signals, waits) and one thread per compute queue runs GEMM and
 * REDUCE steps. Cross-queue deps are per-step completion flags (release /
 * acquire); cross-rank order comes from the flags of host_sync.c. The first
 * failing step records its message and aborts the other queues. */
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/host/host.h"

/* What a write into a buffer adds on the way (see epilogue_for). */
typedef enum epilogue { EPI_PLAIN, EPI_BIAS, EPI_ACC, EPI_BIAS_ACC } epilogue;

/* Where the rows of the caller's INPUT / OUTPUT live. */
typedef struct caller_buffer {
    cgm_matrix m;
    bool shard;      /* rows relative to this rank's shard offset */
    bool transposed; /* stored [width, rows] (NT inputs) */
} caller_buffer;

typedef struct exec_ctx {
    cgm_comm *comm;
    host_state *st;
    host_run *run;
    const cgm_call *call;
    const plan *p;
    int me, nranks;
    bool bulk;
    cgm_dtype dtype[PLAN_BUF_COUNT];
    int64_t width[PLAN_BUF_COUNT];
    caller_buffer input, output;
    bool have_input32;
    cgm_matrix input32; /* fp32 copy of the GEMM's X (bf16/fp16 calls) */
    const float *w32;
    int64_t ld_w;
    /* AG+GEMM with fp8 X: INPUT and GATHER hold packed rows (host_fp8.c). */
    bool packed;
    float y_scale; /* an fp8 output's quantization scale */
    _Atomic uint32_t amax_bits; /* of the fp8 output rows written */
    atomic_int *done; /* per step */
    atomic_int abort;
    pthread_mutex_t lock;
    cgm_status status;
    int blamed;
    char message[768];
} exec_ctx;

typedef struct scratch {
    float *a, *c;
    size_t a_bytes, c_bytes;
} scratch;

static const char *flag_names[PLAN_FLAG_COUNT] = {"READY", "DONE", "FREE"};

/* Records the first failure (later ones are consequences) and aborts. */
static cgm_status CGM_PRINTF(4, 5)
    fail(exec_ctx *x, cgm_status status, int blamed, const char *fmt, ...) {
    pthread_mutex_lock(&x->lock);
    if (x->status == CGM_SUCCESS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(x->message, sizeof x->message, fmt, ap);
        va_end(ap);
        x->status = status;
        x->blamed = blamed;
    }
    pthread_mutex_unlock(&x->lock);
    atomic_store(&x->abort, 1);
    return status;
}

static float *grow(float **buf, size_t *bytes, size_t need) {
    if (need <= *bytes) return *buf;
    float *p = realloc(*buf, need);
    if (!p) return NULL;
    *buf = p;
    *bytes = need;
    return p;
}

static int64_t shard_offset(const exec_ctx *x, int shard) {
    return plan_shard_offset(x->p->req.m, shard, x->nranks);
}

static cgm_status caller_view(exec_ctx *x, const caller_buffer *b,
                              plan_buffer buf, int64_t row0, int64_t rows,
                              host_view *v) {
    int64_t local = row0 - (b->shard ? shard_offset(x, x->me) : 0);
    int64_t have = b->transposed ? b->m.cols : b->m.rows;
    /* data may be NULL where the matrix has no elements (k = 0, n = 0):
     * then the view has none either and nothing reads through it. */
    bool elements = rows > 0 && x->width[buf] > 0;
    if (local < 0 || local + rows > have || (elements && !b->m.data))
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan step reads rows [%lld, %lld) of %s, which holds "
                    "%lld rows from row %lld%s; please report this bug",
                    (long long)row0, (long long)(row0 + rows),
                    plan_buffer_name(buf), (long long)have,
                    (long long)(row0 - local),
                    b->m.data ? "" : " and no data");
    size_t size = cgm_dtype_size(b->m.dtype);
    int64_t ld = cgm_matrix_ld(&b->m);
    v->dtype = b->m.dtype;
    v->rows = rows;
    v->cols = x->width[buf];
    v->ld = ld;
    v->transposed = b->transposed;
    v->data = b->m.data ? (char *)b->m.data +
                              (size_t)(b->transposed ? local : local * ld) * size
                        : NULL;
    return CGM_SUCCESS;
}

/* The rows [row0, row0 + rows) of shard `shard` in buffer `loc`. */
static cgm_status view_of(exec_ctx *x, plan_loc loc, int shard, int64_t row0,
                          int64_t rows, host_view *v) {
    bool remote_ok = loc.buf == PLAN_BUF_GATHER || loc.buf == PLAN_BUF_RECV;
    if (loc.rank < 0 || loc.rank >= x->nranks ||
        (loc.rank != x->me && !remote_ok) || rows < 0)
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan step touches %s of rank %d (this is rank %d); only "
                    "GATHER and RECV are peer visible; please report this bug",
                    plan_buffer_name(loc.buf), loc.rank, x->me);
    if (loc.buf == PLAN_BUF_INPUT)
        return caller_view(x, &x->input, loc.buf, row0, rows, v);
    if (loc.buf == PLAN_BUF_OUTPUT)
        return caller_view(x, &x->output, loc.buf, row0, rows, v);
    int64_t width = x->width[loc.buf];
    size_t size = cgm_dtype_size(x->dtype[loc.buf]);
    int64_t first; /* row index inside the buffer */
    char *base;
    size_t bytes;
    if (loc.buf == PLAN_BUF_GATHER) {
        first = row0;
        base = x->st->peers[loc.rank].base[HOST_SEG_GATHER];
        bytes = x->st->peers[loc.rank].bytes[HOST_SEG_GATHER];
    } else if (loc.buf == PLAN_BUF_PARTIAL || loc.buf == PLAN_BUF_RECV) {
        int slots = loc.buf == PLAN_BUF_PARTIAL ? x->p->partial_slots
                                                : x->p->recv_slots;
        /* shard -1: the slots form one array of global rows. */
        int64_t local = shard < 0 ? row0 : row0 - shard_offset(x, shard);
        int64_t limit = shard < 0 ? (slots - loc.slot) * x->p->slot_rows
                                  : x->p->slot_rows;
        if (loc.slot < 0 || loc.slot >= slots || local < 0 ||
            local + rows > limit)
            return fail(x, CGM_ERROR_INTERNAL, -1,
                        "plan step uses %s slot %d rows [%lld, %lld) of shard "
                        "%d, outside %d slots of %lld rows; please report "
                        "this bug",
                        plan_buffer_name(loc.buf), loc.slot, (long long)row0,
                        (long long)(row0 + rows), shard, slots,
                        (long long)x->p->slot_rows);
        first = (int64_t)loc.slot * x->p->slot_rows + local;
        if (loc.buf == PLAN_BUF_PARTIAL) {
            base = (char *)x->st->partial;
            bytes = x->st->partial_bytes;
        } else {
            base = x->st->peers[loc.rank].base[HOST_SEG_RECV];
            bytes = x->st->peers[loc.rank].bytes[HOST_SEG_RECV];
        }
    } else {
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan step uses buffer %d; please report this bug",
                    (int)loc.buf);
    }
    if (first < 0 || (size_t)((first + rows) * width) * size > bytes)
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan step needs rows [%lld, %lld) x %lld of %s, beyond "
                    "its %zu bytes; please report this bug",
                    (long long)first, (long long)(first + rows),
                    (long long)width, plan_buffer_name(loc.buf), bytes);
    v->data = base + (size_t)(first * width) * size;
    v->dtype = x->dtype[loc.buf];
    v->rows = rows;
    v->cols = width;
    v->ld = width;
    v->transposed = false;
    return CGM_SUCCESS;
}

/* Bias once per output row (on the owner for RS/AR: the reduce that
 * produces the row), accumulate only into the caller's output. */
static epilogue epilogue_for(const exec_ctx *x, plan_step_kind kind,
                             plan_buffer dst) {
    if (x->bulk) return EPI_PLAIN; /* the collective half has no epilogue */
    bool ar = x->run->op == PLAN_OP_GEMM_AR;
    if (dst == PLAN_BUF_OUTPUT) {
        if (kind == PLAN_COPY) return ar ? EPI_ACC : EPI_PLAIN;
        return EPI_BIAS_ACC;
    }
    if (dst == PLAN_BUF_GATHER && ar && kind != PLAN_COPY) return EPI_BIAS;
    return EPI_PLAIN;
}

/* Row i of dst gets v (+ bias, + the old value as `epi` says); y_row >= 0:
 * dst is the caller's output and this is its row y_row, where the call's
 * epilogue applies first (v changes; `slot`: the step's, for sums). */
/* The first row of the caller's output that step s writes, where the
 * call's epilogue applies to it (the output of AG/RS/AR, bulk's c);
 * -1 otherwise. */
static int64_t epilogue_row(const exec_ctx *x, const plan_step *s,
                            plan_buffer dst) {
    if (!x->run->epi.rows) return -1;
    if (s->kind == PLAN_GEMM && s->src.buf == PLAN_BUF_NONE) return 0;
    if (x->bulk || dst != PLAN_BUF_OUTPUT) return -1;
    return s->row0 - (x->output.shard ? shard_offset(x, x->me) : 0);
}

static int step_index(const exec_ctx *x, const plan_step *s) {
    return (int)(s - x->p->steps);
}

static void store_row(exec_ctx *x, const host_view *dst, int64_t i, float *v,
                      epilogue epi, int slot, int64_t y_row) {
    const cgm_call *c = x->call;
    bool bias = (epi == EPI_BIAS || epi == EPI_BIAS_ACC) && c->has_bias;
    bool acc = (epi == EPI_ACC || epi == EPI_BIAS_ACC) && c->accumulate;
    if (y_row >= 0) {
        host_epilogue_row(&x->run->epi, slot, y_row, v, dst->cols,
                          bias ? &c->bias : NULL);
        bias = false;
    }
    if (cgm_dtype_is_fp8(dst->dtype)) { /* an fp8 output: never accumulated */
        uint8_t *row = (uint8_t *)dst->data + i * dst->ld;
        host_fp8_amax_merge(&x->amax_bits, host_fp8_store_row(row, dst->dtype, v, dst->cols,
                                                              bias ? &c->bias : NULL, x->y_scale));
        return;
    }
    if (!dst->transposed) {
        void *row = dst->data + (size_t)(i * dst->ld) *
                                    cgm_dtype_size(dst->dtype);
        host_store_row(row, dst->dtype, v, dst->cols, bias ? &c->bias : NULL,
                       acc);
        return;
    }
    for (int64_t j = 0; j < dst->cols; j++) {
        float s = v[j] + (acc ? host_view_get(dst, i, j) : 0.0f);
        if (bias) s += cgm_load_float(c->bias.data, c->bias.dtype, j);
        host_view_set(dst, i, j, s);
    }
}

static cgm_status do_copy(exec_ctx *x, const plan_step *s, scratch *sc) {
    host_view src, dst;
    if (view_of(x, s->src, s->shard, s->row0, s->rows, &src) ||
        view_of(x, s->dst, s->shard, s->row0, s->rows, &dst))
        return x->status;
    if (src.cols != dst.cols)
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan copies %lld-wide rows of %s into %lld-wide %s; "
                    "please report this bug",
                    (long long)src.cols, plan_buffer_name(s->src.buf),
                    (long long)dst.cols, plan_buffer_name(s->dst.buf));
    /* AR: the final REDUCE already published its rows into GATHER without
     * this rank's accumulate term (see do_reduce). */
    if (x->run->op == PLAN_OP_GEMM_AR && s->src.buf == PLAN_BUF_OUTPUT &&
        s->dst.buf == PLAN_BUF_GATHER && s->dst.rank == x->me)
        return CGM_SUCCESS;
    epilogue epi = epilogue_for(x, PLAN_COPY, s->dst.buf);
    size_t size = cgm_dtype_size(src.dtype);
    /* An accumulate epilogue adds nothing without accumulate: AR's copies
     * of the owners' rows, fp8 ones included, are copied as they are. */
    bool plain = epi == EPI_PLAIN || (epi == EPI_ACC && !x->call->accumulate);
    int64_t y0 = epilogue_row(x, s, s->dst.buf);
    if (plain && y0 < 0 && src.dtype == dst.dtype && !src.transposed &&
        !dst.transposed) {
        for (int64_t i = 0; i < s->rows; i++)
            memcpy(dst.data + (size_t)(i * dst.ld) * size,
                   src.data + (size_t)(i * src.ld) * size,
                   (size_t)src.cols * size);
        return CGM_SUCCESS;
    }
    if (cgm_dtype_is_fp8(src.dtype))
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan copies %s rows of %s with a conversion; please "
                    "report this bug",
                    cgm_dtype_name(src.dtype), plan_buffer_name(s->src.buf));
    float *row = grow(&sc->c, &sc->c_bytes, (size_t)src.cols * sizeof(float));
    if (!row && src.cols)
        return fail(x, CGM_ERROR_OUT_OF_MEMORY, -1,
                    "expected %lld floats of scratch, found none free",
                    (long long)src.cols);
    for (int64_t i = 0; i < s->rows; i++) {
        for (int64_t j = 0; j < src.cols; j++)
            row[j] = host_view_get(&src, i, j);
        store_row(x, &dst, i, row, epi, step_index(x, s), y0 < 0 ? -1 : y0 + i);
    }
    return CGM_SUCCESS;
}

/* Views of step s's sources in plan->refs (a REDUCE's, a GEMM's addends):
 * *out is malloc'd (free it), NULL when there are none. */
static cgm_status ref_views(exec_ctx *x, const plan_step *s,
                            host_view **out) {
    *out = NULL;
    if (s->ref_count < 0 || s->ref_first < 0 ||
        s->ref_first + s->ref_count > x->p->nrefs)
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan %s step names refs [%d, %d) of %d; please report "
                    "this bug",
                    plan_step_kind_name(s->kind), s->ref_first,
                    s->ref_first + s->ref_count, x->p->nrefs);
    if (s->ref_count == 0) return CGM_SUCCESS;
    host_view *views = malloc(sizeof *views * (size_t)s->ref_count);
    if (!views)
        return fail(x, CGM_ERROR_OUT_OF_MEMORY, -1,
                    "expected room for views of %d sources, found none",
                    s->ref_count);
    for (int r = 0; r < s->ref_count; r++)
        if (view_of(x, x->p->refs[s->ref_first + r], s->shard, s->row0,
                    s->rows, &views[r])) {
            free(views);
            return x->status;
        }
    *out = views;
    return CGM_SUCCESS;
}

static cgm_status do_reduce(exec_ctx *x, const plan_step *s, scratch *sc) {
    host_view dst, *refs = NULL;
    if (view_of(x, s->dst, s->shard, s->row0, s->rows, &dst)) return x->status;
    float *acc = grow(&sc->c, &sc->c_bytes, (size_t)dst.cols * sizeof(float));
    if (!acc && dst.cols)
        return fail(x, CGM_ERROR_OUT_OF_MEMORY, -1,
                    "expected scratch for a reduce of %d sources, found none",
                    s->ref_count);
    cgm_status rs = ref_views(x, s, &refs);
    if (rs != CGM_SUCCESS) return rs;
    epilogue epi = epilogue_for(x, PLAN_REDUCE, s->dst.buf);
    int64_t y0 = epilogue_row(x, s, s->dst.buf);
    /* AR publishes the reduced rows (+ bias, once, here on the owner) for
     * the peers from this step rather than from OUTPUT, which may hold
     * this rank's accumulate term; the plan's OUTPUT -> GATHER copy is then
     * skipped. Plan order puts this step before that copy and its READY. */
    host_view publish;
    bool ar_publish = x->run->op == PLAN_OP_GEMM_AR &&
                      s->dst.buf == PLAN_BUF_OUTPUT;
    if (ar_publish && view_of(x, (plan_loc){x->me, PLAN_BUF_GATHER, 0},
                              s->shard, s->row0, s->rows, &publish)) {
        free(refs);
        return x->status;
    }
    for (int64_t i = 0; i < s->rows; i++) {
        memset(acc, 0, (size_t)dst.cols * sizeof(float));
        for (int r = 0; r < s->ref_count; r++) {
            const host_view *v = &refs[r];
            if (v->dtype == CGM_DTYPE_FP32 && !v->transposed) {
                const float *row = (const float *)v->data + i * v->ld;
                for (int64_t j = 0; j < dst.cols; j++) acc[j] += row[j];
            } else {
                for (int64_t j = 0; j < dst.cols; j++)
                    acc[j] += host_view_get(v, i, j);
            }
        }
        if (ar_publish) store_row(x, &publish, i, acc, EPI_BIAS, -1, -1);
        store_row(x, &dst, i, acc, epi, step_index(x, s), y0 < 0 ? -1 : y0 + i);
    }
    free(refs);
    return CGM_SUCCESS;
}

/* x_gathered receives the gathered rows as the GEMM consumes them. */
static void copy_x_gathered(exec_ctx *x, const host_view *src, int64_t row0) {
    const cgm_matrix *g = &x->call->x_gathered;
    if (src->rows == 0 || src->cols == 0) return; /* k = 0: g may be NULL */
    int64_t ld = cgm_matrix_ld(g);
    bool nt = x->call->layout == CGM_LAYOUT_NT;
    size_t size = cgm_dtype_size(g->dtype);
    host_view dst = {(char *)g->data + (size_t)(nt ? row0 : row0 * ld) * size,
                     g->dtype, src->rows, src->cols, ld, nt};
    for (int64_t i = 0; i < src->rows; i++)
        for (int64_t j = 0; j < src->cols; j++)
            host_view_set(&dst, i, j, host_view_get(src, i, j));
}

static cgm_status do_gemm(exec_ctx *x, const plan_step *s, scratch *sc) {
    const cgm_call *c = x->call;
    int64_t n = c->n, k = c->k;
    host_view a, dst;
    plan_buffer dst_buf;
    if (s->src.buf == PLAN_BUF_NONE) { /* bulk: the whole unrelated GEMM */
        if (!c->has_gemm) return CGM_SUCCESS;
        const cgm_matrix *xm = x->have_input32 ? &x->input32 : &c->x;
        bool nt = c->layout == CGM_LAYOUT_NT;
        a = (host_view){xm->data, CGM_DTYPE_FP32, c->m, k,
                        cgm_matrix_ld(xm), nt};
        dst = (host_view){c->y.data, c->y.dtype, c->m, n,
                          cgm_matrix_ld(&c->y), false};
        dst_buf = PLAN_BUF_OUTPUT;
    } else {
        if (view_of(x, s->src, s->shard, s->row0, s->rows, &a) ||
            view_of(x, s->dst, s->shard, s->row0, s->rows, &dst))
            return x->status;
        dst_buf = s->dst.buf;
        if (c->has_x_gathered && x->run->op == PLAN_OP_AG_GEMM) {
            if (x->packed)
                host_fp8_to_gathered(&a, s->row0, &c->x_gathered, c->m,
                                     x->nranks, k);
            else
                copy_x_gathered(x, &a, s->row0);
        }
        if (n == 0) return CGM_SUCCESS; /* no output columns to write */
        if (s->src.buf == PLAN_BUF_INPUT && x->have_input32 && !x->bulk) {
            caller_buffer b = x->input;
            b.m = x->input32;
            if (caller_view(x, &b, PLAN_BUF_INPUT, s->row0, s->rows, &a))
                return x->status;
            a.dtype = CGM_DTYPE_FP32;
            a.cols = k;
        } else if (x->packed || a.dtype != CGM_DTYPE_FP32 || a.transposed) {
            float *buf = grow(&sc->a, &sc->a_bytes,
                              (size_t)(a.rows * k) * sizeof(float));
            if (!buf && a.rows * k != 0)
                return fail(x, CGM_ERROR_OUT_OF_MEMORY, -1,
                            "expected scratch for %lld x %lld fp32, found "
                            "none free",
                            (long long)a.rows, (long long)k);
            if (x->packed) /* gathered fp8 rows with their scales */
                host_fp8_unpack(&a, c->in_dtype, c->scaling, k, buf);
            else
                for (int64_t i = 0; i < a.rows; i++)
                    for (int64_t j = 0; j < k; j++)
                        buf[i * k + j] = host_view_get(&a, i, j);
            a = (host_view){(char *)buf, CGM_DTYPE_FP32, a.rows, k, k, false};
        }
    }
    bool w_trans = c->layout == CGM_LAYOUT_TN;
    /* The GEMM half of a bulk call takes bias and accumulate. */
    epilogue epi = s->src.buf == PLAN_BUF_NONE
                       ? EPI_BIAS_ACC
                       : epilogue_for(x, PLAN_GEMM, dst_buf);
    /* A GEMM with addends (RS split, plan_request.own_addends): the arrived
     * partials are added to the product before the epilogue. */
    host_view *addends = NULL;
    cgm_status rs = ref_views(x, s, &addends);
    if (rs != CGM_SUCCESS) return rs;
    int64_t y0 = epilogue_row(x, s, dst_buf);
    bool direct = !addends && y0 < 0 && dst.dtype == CGM_DTYPE_FP32 && !dst.transposed &&
                  (epi == EPI_PLAIN || (!c->has_bias && epi != EPI_BIAS));
    if (direct) {
        float beta = (epi == EPI_ACC || epi == EPI_BIAS_ACC) && c->accumulate
                         ? 1.0f
                         : 0.0f;
        host_sgemm(&a, x->w32, x->ld_w, w_trans, n, k, (float *)dst.data,
                   dst.ld, beta);
    } else {
        float *out = grow(&sc->c, &sc->c_bytes,
                          (size_t)(a.rows * n) * sizeof(float));
        if (!out && a.rows * n != 0) {
            free(addends);
            return fail(x, CGM_ERROR_OUT_OF_MEMORY, -1,
                        "expected scratch for %lld x %lld fp32, found none",
                        (long long)a.rows, (long long)n);
        }
        host_sgemm(&a, x->w32, x->ld_w, w_trans, n, k, out, n, 0.0f);
        for (int64_t i = 0; i < a.rows; i++) {
            float *row = out + i * n;
            for (int r = 0; addends && r < s->ref_count; r++)
                for (int64_t j = 0; j < n; j++)
                    row[j] += host_view_get(&addends[r], i, j);
            store_row(x, &dst, i, row, epi, step_index(x, s), y0 < 0 ? -1 : y0 + i);
        }
    }
    free(addends);
    return CGM_SUCCESS;
}

static cgm_status do_sync(exec_ctx *x, const plan_step *s, int index) {
    int chunks = x->st->chunks;
    if (s->flag.chunk < -1 || s->flag.chunk >= chunks - 1 || s->peer < 0 ||
        s->peer >= x->nranks || (int)s->flag.kind >= PLAN_FLAG_COUNT)
        return fail(x, CGM_ERROR_INTERNAL, -1,
                    "plan step %d names flag %d chunk %d of rank %d, outside "
                    "%d chunks of %d ranks; please report this bug",
                    index, (int)s->flag.kind, s->flag.chunk, s->peer,
                    chunks - 1, x->nranks);
    uint64_t value = x->run->epoch * HOST_EPOCH_STRIDE +
                     x->run->entry->occurrence[index] + 1;
    if (s->kind == PLAN_SIGNAL) {
        host_flag_signal(x->st, s->peer, s->flag.kind, s->flag.chunk, value);
        return CGM_SUCCESS;
    }
    char what[96], msg[512];
    snprintf(what, sizeof what, "signal %s for chunk %d",
             flag_names[s->flag.kind], s->flag.chunk);
    host_wait w = {what, x->run->epoch, x->run->op_name, &x->abort};
    cgm_status st = host_flag_wait(x->comm, x->st, s->peer, s->flag.kind,
                                   s->flag.chunk, value, &w, msg, sizeof msg);
    if (st != CGM_SUCCESS) return fail(x, st, s->peer, "%s", msg);
    return CGM_SUCCESS;
}

static cgm_status wait_deps(exec_ctx *x, int index) {
    const plan_step *s = &x->p->steps[index];
    for (int d = 0; d < s->ndeps; d++) {
        int dep = s->deps[d];
        if (dep < 0 || dep >= index)
            return fail(x, CGM_ERROR_INTERNAL, -1,
                        "plan step %d depends on step %d; please report "
                        "this bug",
                        index, dep);
        int64_t start = cgm_now_ns();
        /* Local deps finish or fail within the peers' bounded waits. */
        int64_t limit = (2 * x->comm->config.timeout_ms + 5000) * 1000000;
        while (!atomic_load_explicit(&x->done[dep], memory_order_acquire)) {
            if (atomic_load(&x->abort)) return CGM_ERROR_INTERNAL;
            int64_t waited = cgm_now_ns() - start;
            if (waited > limit)
                return fail(x, CGM_ERROR_INTERNAL, -1,
                            "plan step %d waited %lld ms for step %d of this "
                            "rank; please report this bug",
                            index, (long long)(waited / 1000000), dep);
            if (waited < 100000) {
                sched_yield();
            } else {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
        }
    }
    return CGM_SUCCESS;
}

/* Data steps with nothing to move: empty shards (m < P) give row-less
 * steps, and empty operands (n = 0, or a bulk collective with no columns)
 * width-less copies and reduces. A GEMM with k = 0 is not empty: it
 * writes bias (or zeros) into its rows. */
static bool step_is_empty(const exec_ctx *x, const plan_step *s) {
    const cgm_call *c = x->call;
    switch (s->kind) {
    case PLAN_COPY: return s->rows == 0 || x->width[s->src.buf] == 0;
    case PLAN_REDUCE: return s->rows == 0 || x->width[s->dst.buf] == 0;
    case PLAN_GEMM:
        if (s->src.buf == PLAN_BUF_NONE)
            return !c->has_gemm || c->m == 0 || c->n == 0;
        return s->rows == 0;
    default: return false;
    }
}

static void run_queue(exec_ctx *x, int queue) {
    scratch sc = {NULL, NULL, 0, 0};
    for (int i = 0; i < x->p->nsteps; i++) {
        const plan_step *s = &x->p->steps[i];
        if (s->queue != queue) continue;
        if (atomic_load(&x->abort) || wait_deps(x, i) != CGM_SUCCESS) break;
        cgm_status st = CGM_SUCCESS;
        if (step_is_empty(x, s)) {
            atomic_store_explicit(&x->done[i], 1, memory_order_release);
            continue;
        }
        switch (s->kind) {
        case PLAN_COPY: st = do_copy(x, s, &sc); break;
        case PLAN_SIGNAL:
        case PLAN_WAIT: st = do_sync(x, s, i); break;
        case PLAN_GEMM: st = do_gemm(x, s, &sc); break;
        case PLAN_REDUCE: st = do_reduce(x, s, &sc); break;
        default:
            st = fail(x, CGM_ERROR_INTERNAL, -1,
                      "plan step %d has kind %d; please report this bug", i,
                      (int)s->kind);
        }
        if (st != CGM_SUCCESS) break;
        atomic_store_explicit(&x->done[i], 1, memory_order_release);
    }
    free(sc.a);
    free(sc.c);
}

typedef struct queue_arg {
    exec_ctx *x;
    int queue;
} queue_arg;

static void *queue_thread(void *arg) {
    queue_arg *q = arg;
    run_queue(q->x, q->queue);
    return NULL;
}

/* Element type, width and caller matrix of every buffer for this op. */
static void set_geometry(exec_ctx *x) {
    const cgm_call *c = x->call;
    bool nt = c->layout == CGM_LAYOUT_NT;
    switch (x->run->op) {
    case PLAN_OP_AG_GEMM:
        x->input = (caller_buffer){c->x, true, nt};
        x->output = (caller_buffer){c->y, false, false};
        x->dtype[PLAN_BUF_INPUT] = x->dtype[PLAN_BUF_GATHER] = c->in_dtype;
        x->width[PLAN_BUF_INPUT] = x->width[PLAN_BUF_GATHER] = c->k;
        if (cgm_dtype_is_fp8(c->in_dtype)) { /* packed rows of bytes */
            x->packed = true;
            x->dtype[PLAN_BUF_INPUT] = x->dtype[PLAN_BUF_GATHER] =
                CGM_DTYPE_FP8_E4M3;
            x->width[PLAN_BUF_INPUT] = x->width[PLAN_BUF_GATHER] =
                host_fp8_row_bytes(c->k, c->scaling);
        }
        x->dtype[PLAN_BUF_OUTPUT] = c->out_dtype;
        x->width[PLAN_BUF_OUTPUT] = c->n;
        break;
    case PLAN_OP_GEMM_RS:
    case PLAN_OP_GEMM_AR: {
        bool ar = x->run->op == PLAN_OP_GEMM_AR;
        x->input = (caller_buffer){c->x, false, nt};
        x->output = (caller_buffer){c->y, !ar, false};
        x->dtype[PLAN_BUF_INPUT] = c->in_dtype;
        x->width[PLAN_BUF_INPUT] = c->k;
        x->dtype[PLAN_BUF_GATHER] = x->dtype[PLAN_BUF_OUTPUT] = c->out_dtype;
        x->width[PLAN_BUF_GATHER] = x->width[PLAN_BUF_OUTPUT] = c->n;
        x->width[PLAN_BUF_PARTIAL] = x->width[PLAN_BUF_RECV] = c->n;
        /* AR with an epilogue: owners publish r + bias in fp32 and every
         * rank applies the epilogue to every row (its own aux). */
        if (ar && x->run->epi.rows) x->dtype[PLAN_BUF_GATHER] = CGM_DTYPE_FP32;
        break;
    }
    case PLAN_OP_BULK_AG:
    case PLAN_OP_BULK_RS: {
        bool ag = x->run->op == PLAN_OP_BULK_AG;
        x->bulk = true;
        x->input = (caller_buffer){c->send, ag, false};
        x->output = (caller_buffer){c->recv, !ag, false};
        for (int b = PLAN_BUF_INPUT; b <= PLAN_BUF_GATHER; b++) {
            x->dtype[b] = c->coll_dtype;
            x->width[b] = c->coll_cols;
        }
        /* Partial sums stay fp32 whatever the send dtype. */
        x->width[PLAN_BUF_PARTIAL] = x->width[PLAN_BUF_RECV] = c->coll_cols;
        break;
    }
    default: break;
    }
    x->dtype[PLAN_BUF_PARTIAL] = x->dtype[PLAN_BUF_RECV] = CGM_DTYPE_FP32;
}

static cgm_status prepare_operands(exec_ctx *x) {
    const cgm_call *c = x->call;
    host_state *st = x->st;
    if (c->has_gemm) {
        if (c->in_dtype != CGM_DTYPE_FP32) {
            cgm_status s = host_to_fp32(&c->x, &st->x32, &st->x32_bytes);
            if (s != CGM_SUCCESS) return s;
            x->input32 = cgm_matrix_make(st->x32, CGM_DTYPE_FP32, c->x.rows,
                                         c->x.cols);
            x->have_input32 = true;
            s = host_to_fp32(&c->w, &st->w32, &st->w32_bytes);
            if (s != CGM_SUCCESS) return s;
            x->w32 = st->w32;
            x->ld_w = c->w.cols;
        } else {
            x->w32 = c->w.data;
            x->ld_w = cgm_matrix_ld(&c->w);
        }
        if (cgm_dtype_is_fp8(c->out_dtype))
            x->y_scale = c->y.scale ? c->y.scale[0] : 1.0f; /* NULL: no elements */
    }
    if (x->packed) {
        cgm_status s = host_fp8_pack(&c->x, &st->x_packed,
                                     &st->x_packed_bytes, &x->input.m);
        if (s != CGM_SUCCESS) return s;
    }
    size_t need = (size_t)x->p->partial_slots * (size_t)x->p->slot_rows *
                  (size_t)x->width[PLAN_BUF_PARTIAL] * sizeof(float);
    if (!grow(&st->partial, &st->partial_bytes, need) && need)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected %zu bytes for the partial-sum workspace, "
                         "found none free; use a smaller m or n",
                         need);
    need = (size_t)x->p->recv_slots * (size_t)x->p->slot_rows *
           (size_t)x->width[PLAN_BUF_RECV] * sizeof(float);
    if (need > st->peers[x->me].bytes[HOST_SEG_RECV])
        return cgm_error(CGM_ERROR_INTERNAL,
                         "expected the plan's %d receive slots (%zu bytes) to "
                         "fit the %zu-byte RECV workspace; please report this "
                         "bug",
                         x->p->recv_slots, need,
                         st->peers[x->me].bytes[HOST_SEG_RECV]);
    need = (size_t)x->p->req.m * (size_t)x->width[PLAN_BUF_GATHER] *
           cgm_dtype_size(x->dtype[PLAN_BUF_GATHER]);
    if (x->width[PLAN_BUF_GATHER] &&
        need > st->peers[x->me].bytes[HOST_SEG_GATHER])
        return cgm_error(CGM_ERROR_INTERNAL,
                         "expected %zu bytes of gathered rows to fit the "
                         "%zu-byte GATHER workspace; please report this bug",
                         need, st->peers[x->me].bytes[HOST_SEG_GATHER]);
    return CGM_SUCCESS;
}

cgm_status host_execute(cgm_comm *comm, host_state *st, host_run *run) {
    exec_ctx *x = calloc(1, sizeof *x);
    pthread_t *threads = NULL;
    queue_arg *args = NULL;
    int started = 0;
    cgm_status s = CGM_SUCCESS;
    if (!x)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for the executor, found none free");
    x->comm = comm;
    x->st = st;
    x->run = run;
    x->call = run->call;
    x->p = &run->entry->plan;
    x->me = comm->rank;
    x->nranks = comm->nranks;
    x->blamed = -1;
    pthread_mutex_init(&x->lock, NULL);
    set_geometry(x);
    s = prepare_operands(x);
    if (s != CGM_SUCCESS) goto fail;
    int queues = x->p->req.compute_queues + 1;
    x->done = calloc((size_t)(x->p->nsteps ? x->p->nsteps : 1),
                     sizeof *x->done);
    threads = calloc((size_t)queues, sizeof *threads);
    args = calloc((size_t)queues, sizeof *args);
    if (!x->done || !threads || !args) {
        s = cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                      "expected memory for %d steps, found none free",
                      x->p->nsteps);
        goto fail;
    }
    for (int q = 1; q < queues; q++) {
        args[q] = (queue_arg){x, q};
        int rc = pthread_create(&threads[q], NULL, queue_thread, &args[q]);
        if (rc != 0) {
            fail(x, CGM_ERROR_SYSTEM, -1,
                 "expected to start %d compute threads, pthread_create "
                 "failed: %s; lower COMMGEMM_HOST_THREADS",
                 queues - 1, strerror(rc));
            break;
        }
        started = q;
    }
    if (!atomic_load(&x->abort)) run_queue(x, 0);
    for (int q = 1; q <= started; q++) pthread_join(threads[q], NULL);
    if (x->status != CGM_SUCCESS) s = cgm_error(x->status, "%s", x->message);
    run->amax_bits = atomic_load(&x->amax_bits);
fail:
    /* Peers may wait on this rank's part of the op: let them know at once
     * that it gave up rather than after their timeout. */
    if (s != CGM_SUCCESS) host_publish_failure(st, s, x->blamed);
    pthread_mutex_destroy(&x->lock);
    free(x->done);
    free(threads);
    free(args);
    free(x);
    return s;
}
