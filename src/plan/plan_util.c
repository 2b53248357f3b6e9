/* Names, shard arithmetic, buffer addressing and the human-readable dump. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_internal.h"

int64_t plan_shard_rows(int64_t m, int rank, int nranks) {
    if (m <= 0 || nranks < 1 || rank < 0 || rank >= nranks) return 0;
    int64_t block = (m + nranks - 1) / nranks;
    int64_t left = m - (int64_t)rank * block;
    if (left <= 0) return 0;
    return left < block ? left : block;
}

int64_t plan_shard_offset(int64_t m, int rank, int nranks) {
    if (m <= 0 || nranks < 1 || rank < 0) return 0;
    if (rank >= nranks) return m;
    int64_t block = (m + nranks - 1) / nranks;
    int64_t off = (int64_t)rank * block;
    return off < m ? off : m;
}

int plan_piece_count(const plan *p, int shard) {
    int64_t rows = plan_shard_rows(p->req.m, shard, p->req.nranks);
    return rows < p->splits ? (int)rows : p->splits;
}

void plan_piece_range(const plan *p, int shard, int piece, int64_t *row0,
                      int64_t *rows) {
    int64_t total = plan_shard_rows(p->req.m, shard, p->req.nranks);
    int n = plan_piece_count(p, shard);
    int64_t base = n ? total / n : 0, extra = n ? total % n : 0;
    int64_t before = (int64_t)piece * base + (piece < extra ? piece : extra);
    *row0 = plan_shard_offset(p->req.m, shard, p->req.nranks) + before;
    *rows = base + (piece < extra ? 1 : 0);
}

static bool input_is_shard(plan_op op) {
    return op == PLAN_OP_AG_GEMM || op == PLAN_OP_BULK_AG;
}

static bool output_is_shard(plan_op op) {
    return op == PLAN_OP_GEMM_RS || op == PLAN_OP_BULK_RS;
}

int64_t plan_buffer_base(const plan_request *req, plan_buffer buf, int owner,
                         int shard) {
    switch (buf) {
    case PLAN_BUF_INPUT:
        return input_is_shard(req->op)
                   ? plan_shard_offset(req->m, owner, req->nranks)
                   : 0;
    case PLAN_BUF_OUTPUT:
        return output_is_shard(req->op)
                   ? plan_shard_offset(req->m, owner, req->nranks)
                   : 0;
    case PLAN_BUF_PARTIAL:
    case PLAN_BUF_RECV:
        return shard >= 0 ? plan_shard_offset(req->m, shard, req->nranks) : 0;
    default:
        return 0;
    }
}

int64_t plan_buffer_capacity(const plan *p, plan_buffer buf, int owner) {
    const plan_request *req = &p->req;
    switch (buf) {
    case PLAN_BUF_INPUT:
        return input_is_shard(req->op)
                   ? plan_shard_rows(req->m, owner, req->nranks)
                   : req->m;
    case PLAN_BUF_OUTPUT:
        return output_is_shard(req->op)
                   ? plan_shard_rows(req->m, owner, req->nranks)
                   : req->m;
    case PLAN_BUF_GATHER:
        return req->m;
    case PLAN_BUF_PARTIAL:
        return p->partial_slots * p->slot_rows;
    case PLAN_BUF_RECV:
        return p->recv_slots * p->slot_rows;
    default:
        return 0;
    }
}

int plan_fail(char *err, int err_len, const char *fmt, ...) {
    if (err && err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, (size_t)err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

const char *plan_op_name(plan_op op) {
    static const char *const names[] = {"ag_gemm", "gemm_rs", "gemm_ar",
                                        "bulk_ag", "bulk_rs"};
    return (unsigned)op < PLAN_OP_COUNT ? names[op] : "invalid";
}

const char *plan_algo_name(plan_algo algo) {
    static const char *const names[] = {"split", "ring", "no_overlap",
                                        "bulk"};
    return (unsigned)algo < PLAN_ALGO_COUNT ? names[algo] : "invalid";
}

const char *plan_step_kind_name(plan_step_kind kind) {
    static const char *const names[] = {"copy", "signal", "wait", "gemm",
                                        "reduce"};
    return (unsigned)kind <= PLAN_REDUCE ? names[kind] : "invalid";
}

const char *plan_buffer_name(plan_buffer buf) {
    static const char *const names[] = {"none",    "input",   "output",
                                        "gather",  "partial", "recv"};
    return (unsigned)buf < PLAN_BUF_COUNT ? names[buf] : "invalid";
}

static const char *flag_kind_name(plan_flag_kind kind) {
    static const char *const names[] = {"ready", "done", "free"};
    return (unsigned)kind < PLAN_FLAG_COUNT ? names[kind] : "invalid";
}

/* Appends to buf at *len, keeping the output truncated but terminated. */
static void append(char *buf, int buf_len, int *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *buf, int buf_len, int *len, const char *fmt, ...) {
    if (*len >= buf_len - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, (size_t)(buf_len - *len), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    *len += n;
    if (*len > buf_len - 1) *len = buf_len - 1;
}

static void append_loc(char *buf, int buf_len, int *len, plan_loc loc) {
    append(buf, buf_len, len, "r%d.%s", loc.rank, plan_buffer_name(loc.buf));
    if (plan_buffer_slotted(loc.buf))
        append(buf, buf_len, len, "[%d]", loc.slot);
}

int plan_format(const plan *p, char *buf, int buf_len) {
    if (!buf || buf_len <= 0) return 0;
    if (!p) {
        buf[0] = '\0';
        return 0;
    }
    buf[0] = '\0';
    int len = 0;
    append(buf, buf_len, &len,
           "plan %s/%s rank %d of %d, m %lld, splits %d, compute queues %d,"
           " partial %d, recv %d slots of %lld rows, flag chunks %d\n",
           plan_op_name(p->req.op), plan_algo_name(p->req.algo), p->req.rank,
           p->req.nranks, (long long)p->req.m, p->splits,
           p->req.compute_queues, p->partial_slots, p->recv_slots,
           (long long)p->slot_rows, p->flag_chunks);
    for (int i = 0; i < p->nsteps; i++) {
        const plan_step *s = &p->steps[i];
        append(buf, buf_len, &len, "%4d q%d %-6s", i, s->queue,
               plan_step_kind_name(s->kind));
        switch (s->kind) {
        case PLAN_SIGNAL:
        case PLAN_WAIT:
            append(buf, buf_len, &len, " %s r%d %s/%d",
                   s->kind == PLAN_SIGNAL ? "to" : "from", s->peer,
                   flag_kind_name(s->flag.kind), s->flag.chunk);
            break;
        case PLAN_COPY:
        case PLAN_GEMM:
            if (s->kind == PLAN_GEMM && s->src.buf == PLAN_BUF_NONE) {
                append(buf, buf_len, &len, " whole unrelated gemm");
                break;
            }
            append(buf, buf_len, &len, " ");
            append_loc(buf, buf_len, &len, s->src);
            append(buf, buf_len, &len, " -> ");
            append_loc(buf, buf_len, &len, s->dst);
            break;
        case PLAN_REDUCE:
            append(buf, buf_len, &len, " ");
            for (int j = 0; j < s->ref_count; j++) {
                if (j) append(buf, buf_len, &len, " + ");
                append_loc(buf, buf_len, &len, p->refs[s->ref_first + j]);
            }
            append(buf, buf_len, &len, " -> ");
            append_loc(buf, buf_len, &len, s->dst);
            break;
        }
        if (s->kind != PLAN_SIGNAL && s->kind != PLAN_WAIT && s->rows > 0)
            append(buf, buf_len, &len, " rows %lld+%lld shard %d chunk %d",
                   (long long)s->row0, (long long)s->rows, s->shard,
                   s->chunk);
        if (s->final) append(buf, buf_len, &len, " final");
        if (s->ndeps) {
            append(buf, buf_len, &len, " after");
            for (int j = 0; j < s->ndeps; j++)
                append(buf, buf_len, &len, " %d", s->deps[j]);
        }
        append(buf, buf_len, &len, "\n");
    }
    return len;
}
