/* plan_check: proves the plans of all ranks of one op together.
 *
 * 1. structure: requests agree, every field in range, deps point back;
 * 2. flags: every SIGNAL unique and waited for exactly once, every WAIT
 *    matched (an unmatched WAIT is a certain deadlock);
 * 3. simulation: queues run in order, a step runs once its deps and (for a
 *    WAIT) its SIGNAL have run; its vector clock is the join of its queue's
 *    previous step, its deps and that SIGNAL. plan_check_memory.c checks
 *    every read and write against those clocks;
 * 4. the end: every peer access to a rank's workspace happened-before that
 *    rank's last step, and the op's coverage (each row gathered / computed /
 *    reduced exactly once, outputs final and complete).
 * The first violation is reported. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_check_internal.h"

static const char *flag_name(plan_flag_kind kind) {
    return kind == PLAN_FLAG_READY  ? "ready"
           : kind == PLAN_FLAG_DONE ? "done"
           : kind == PLAN_FLAG_FREE ? "free"
                                    : "invalid";
}

int check_fail(checker *ck, const char *fmt, ...) {
    if (ck->err && ck->err_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ck->err, (size_t)ck->err_len, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int check_fail_step(checker *ck, int g, const char *fmt, ...) {
    if (!ck->err || ck->err_len <= 0) return -1;
    int rank, index;
    const plan_step *s = check_step(ck, g, &rank, &index);
    int n = snprintf(ck->err, (size_t)ck->err_len,
                     "rank %d step %d (%s on queue %d", rank, index,
                     plan_step_kind_name(s->kind), s->queue);
    if (n >= 0 && n < ck->err_len && s->kind != PLAN_SIGNAL &&
        s->kind != PLAN_WAIT)
        n += snprintf(ck->err + n, (size_t)(ck->err_len - n),
                      ", rows %lld+%lld", (long long)s->row0,
                      (long long)s->rows);
    if (n >= 0 && n < ck->err_len)
        n += snprintf(ck->err + n, (size_t)(ck->err_len - n), "): ");
    if (n >= 0 && n < ck->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ck->err + n, (size_t)(ck->err_len - n), fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ------------------------------------------------------------ structure */

static int check_headers(checker *ck) {
    const plan *p0 = &ck->plans[0];
    for (int r = 0; r < ck->P; r++) {
        const plan *p = &ck->plans[r];
        const plan_request *a = &p->req, *b = &p0->req;
        if (a->rank != r)
            return check_fail(ck,
                              "plans[%d] was built for rank %d; pass the "
                              "plans of ranks 0..%d in order",
                              r, a->rank, ck->P - 1);
        const char *field =
            a->op != b->op                   ? "op"
            : a->algo != b->algo             ? "algo"
            : a->nranks != b->nranks         ? "nranks"
            : a->m != b->m                   ? "m"
            : a->splits != b->splits         ? "splits"
            : a->compute_queues != b->compute_queues ? "compute_queues"
            : a->has_gemm != b->has_gemm     ? "has_gemm"
            : a->has_collective != b->has_collective ? "has_collective"
            : p->splits != p0->splits        ? "effective splits"
            : p->partial_slots != p0->partial_slots ? "partial_slots"
            : p->recv_slots != p0->recv_slots ? "recv_slots"
            : p->slot_rows != p0->slot_rows  ? "slot_rows"
            : p->flag_chunks != p0->flag_chunks ? "flag_chunks"
                                              : NULL;
        if (field)
            return check_fail(ck,
                              "plans[%d] differs from plans[0] in %s: all "
                              "ranks must build from the same request",
                              r, field);
        if (p->nsteps < 0 || (p->nsteps > 0 && !p->steps) || p->nrefs < 0 ||
            (p->nrefs > 0 && !p->refs))
            return check_fail(ck, "plans[%d] has no steps array", r);
    }
    if (p0->req.nranks != ck->P)
        return check_fail(ck,
                          "the plans are for %d ranks but %d were passed",
                          p0->req.nranks, ck->P);
    if (p0->req.compute_queues < 1 || p0->req.m < 0 || p0->splits < 1)
        return check_fail(ck, "the plans' request is invalid");
    return 0;
}

static int check_loc(checker *ck, int g, const char *what, plan_loc at,
                     int shard, int64_t row0, int64_t rows) {
    const plan *p0 = &ck->plans[0];
    if (at.rank < 0 || at.rank >= ck->P || at.buf <= PLAN_BUF_NONE ||
        at.buf >= PLAN_BUF_COUNT)
        return check_fail_step(ck, g, "%s names rank %d buffer %d", what,
                               at.rank, (int)at.buf);
    int slots = at.buf == PLAN_BUF_PARTIAL ? p0->partial_slots
                : at.buf == PLAN_BUF_RECV  ? p0->recv_slots
                                           : 1;
    if (at.slot < 0 || at.slot >= slots)
        return check_fail_step(ck, g, "%s uses slot %d of %s (%d slots)", what,
                               at.slot, plan_buffer_name(at.buf), slots);
    int64_t a = check_address(ck, at, shard, row0);
    int64_t cap = plan_buffer_capacity(p0, at.buf, at.rank);
    if (a < 0 || a + rows > cap)
        return check_fail_step(ck, g,
                               "%s addresses %lld..%lld of rank %d's %s, "
                               "outside its %lld rows",
                               what, (long long)a, (long long)(a + rows),
                               at.rank, plan_buffer_name(at.buf),
                               (long long)cap);
    return 0;
}

static int check_fields(checker *ck, int g, int r, int i) {
    const plan *p = &ck->plans[r];
    const plan_step *s = &p->steps[i];
    const plan_request *req = ck->req;
    bool bulk = req->op == PLAN_OP_BULK_AG || req->op == PLAN_OP_BULK_RS;
    if ((unsigned)s->kind > PLAN_REDUCE)
        return check_fail(ck, "rank %d step %d has kind %d", r, i,
                          (int)s->kind);
    if (s->queue < 0 || s->queue > req->compute_queues)
        return check_fail(ck, "rank %d step %d is on queue %d (0..%d)", r, i,
                          s->queue, req->compute_queues);
    if (s->ndeps < 0 || s->ndeps > PLAN_MAX_DEPS)
        return check_fail_step(ck, g, "has %d deps", s->ndeps);
    for (int d = 0; d < s->ndeps; d++)
        if (s->deps[d] < 0 || s->deps[d] >= i)
            return check_fail_step(ck, g,
                                   "dep %d does not point to an earlier step",
                                   s->deps[d]);
    if (s->chunk < -1 || s->chunk >= req->nranks * p->splits)
        return check_fail_step(ck, g, "has chunk %d", s->chunk);
    if (s->final && s->kind != PLAN_GEMM && s->kind != PLAN_REDUCE)
        return check_fail_step(ck, g, "only GEMM and REDUCE may be final");
    if (s->kind == PLAN_SIGNAL || s->kind == PLAN_WAIT) {
        if (s->peer < 0 || s->peer >= ck->P || s->peer == r)
            return check_fail_step(ck, g, "flag peer %d is not another rank",
                                   s->peer);
        if ((unsigned)s->flag.kind >= PLAN_FLAG_COUNT ||
            s->flag.chunk < -1 || s->flag.chunk >= p->flag_chunks)
            return check_fail_step(ck, g, "flag %d/%d is out of range",
                                   (int)s->flag.kind, s->flag.chunk);
        return 0;
    }
    bool whole_gemm = s->kind == PLAN_GEMM && s->src.buf == PLAN_BUF_NONE;
    if (whole_gemm) {
        if (!bulk || s->rows != 0 || s->dst.buf != PLAN_BUF_NONE)
            return check_fail_step(ck, g,
                                   "a GEMM without buffers is only the whole "
                                   "GEMM of a bulk op (rows 0, no dst)");
        return 0;
    }
    if (bulk && s->kind == PLAN_GEMM)
        return check_fail_step(ck, g, "a bulk op's GEMM has no rows");
    if (s->rows <= 0 || s->row0 < 0 || s->row0 + s->rows > req->m)
        return check_fail_step(ck, g, "rows are not within 1..m = %lld",
                               (long long)req->m);
    if (s->shard < -1 || s->shard >= ck->P)
        return check_fail_step(ck, g, "shard %d is out of range", s->shard);
    if (s->shard >= 0) {
        int64_t off = plan_shard_offset(req->m, s->shard, ck->P);
        int64_t n = plan_shard_rows(req->m, s->shard, ck->P);
        if (s->row0 < off || s->row0 + s->rows > off + n)
            return check_fail_step(ck, g, "rows are outside shard %d",
                                   s->shard);
    }
    if (check_loc(ck, g, "dst", s->dst, s->shard, s->row0, s->rows))
        return -1;
    if (s->kind == PLAN_REDUCE) {
        if (s->ref_count < 1 || s->ref_first < 0 ||
            s->ref_first + s->ref_count > p->nrefs)
            return check_fail_step(ck, g, "refs %d+%d are outside 0..%d",
                                   s->ref_first, s->ref_count, p->nrefs);
        for (int j = 0; j < s->ref_count; j++)
            if (check_loc(ck, g, "a REDUCE source", p->refs[s->ref_first + j],
                          s->shard, s->row0, s->rows))
                return -1;
        return 0;
    }
    if (check_loc(ck, g, "src", s->src, s->shard, s->row0, s->rows))
        return -1;
    if (s->kind == PLAN_GEMM && (s->src.rank != r || s->dst.rank != r))
        return check_fail_step(ck, g, "a GEMM reads and writes local buffers");
    if (s->kind == PLAN_GEMM && s->ref_count != 0) {
        if (!s->final || s->ref_count < 0 || s->ref_first < 0 ||
            s->ref_first + s->ref_count > p->nrefs)
            return check_fail_step(ck, g,
                                   "a GEMM with addends (refs %d+%d of %d) "
                                   "must be final",
                                   s->ref_first, s->ref_count, p->nrefs);
        for (int j = 0; j < s->ref_count; j++) {
            plan_loc a = p->refs[s->ref_first + j];
            if (a.rank != r)
                return check_fail_step(ck, g, "a GEMM adds rank %d's buffer, "
                                       "not a local one", a.rank);
            if (check_loc(ck, g, "a GEMM addend", a, s->shard, s->row0,
                          s->rows))
                return -1;
        }
    }
    if (s->kind == PLAN_COPY) {
        if (s->src.rank != r && s->dst.rank != r)
            return check_fail_step(ck, g,
                                   "a COPY between two other ranks (%d -> %d)",
                                   s->src.rank, s->dst.rank);
        int remote = s->src.rank != r ? s->src.rank : s->dst.rank;
        if (s->peer != remote)
            return check_fail_step(ck, g,
                                   "COPY peer is %d but the remote rank is %d",
                                   s->peer, remote);
    }
    return 0;
}

/* ---------------------------------------------------------------- flags */

typedef struct flag_key {
    int from, to, kind, chunk, g;
} flag_key;

static int compare_keys(const void *a, const void *b) {
    const flag_key *x = a, *y = b;
    if (x->from != y->from) return x->from < y->from ? -1 : 1;
    if (x->to != y->to) return x->to < y->to ? -1 : 1;
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    if (x->chunk != y->chunk) return x->chunk < y->chunk ? -1 : 1;
    return (x->g > y->g) - (x->g < y->g);
}

static int match_flags(checker *ck) {
    int n = 0;
    flag_key *keys = malloc(sizeof *keys * (size_t)(ck->total + 1));
    bool *used = calloc((size_t)ck->total + 1, sizeof *used);
    int rc = 0;
    if (!keys || !used) {
        rc = check_fail(ck, "plan_check: out of memory");
        goto done;
    }
    for (int g = 0; g < ck->total; g++) {
        int r;
        const plan_step *s = check_step(ck, g, &r, NULL);
        if (s->kind == PLAN_SIGNAL)
            keys[n++] = (flag_key){r, s->peer, (int)s->flag.kind,
                                   s->flag.chunk, g};
    }
    qsort(keys, (size_t)n, sizeof *keys, compare_keys);
    for (int i = 1; i < n; i++)
        if (compare_keys(&keys[i - 1], &keys[i]) != 0 &&
            keys[i - 1].from == keys[i].from && keys[i - 1].to == keys[i].to &&
            keys[i - 1].kind == keys[i].kind &&
            keys[i - 1].chunk == keys[i].chunk) {
            rc = check_fail_step(ck, keys[i].g,
                                 "signals %s/%d to rank %d a second time in "
                                 "this op (each flag is signalled once)",
                                 flag_name(keys[i].kind), keys[i].chunk,
                                 keys[i].to);
            goto done;
        }
    for (int g = 0; g < ck->total; g++) {
        int r;
        const plan_step *s = check_step(ck, g, &r, NULL);
        if (s->kind != PLAN_WAIT) continue;
        flag_key want = {s->peer, r, (int)s->flag.kind, s->flag.chunk, -1};
        int lo = 0, hi = n;
        while (lo < hi) { /* first key >= want (g = -1 sorts first) */
            int mid = (lo + hi) / 2;
            if (compare_keys(&keys[mid], &want) < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo == n || keys[lo].from != want.from || keys[lo].to != r ||
            keys[lo].kind != want.kind || keys[lo].chunk != want.chunk) {
            rc = check_fail_step(ck, g,
                                 "waits for %s/%d from rank %d, which never "
                                 "signals it: no matching SIGNAL (deadlock)",
                                 flag_name(s->flag.kind), s->flag.chunk,
                                 s->peer);
            goto done;
        }
        if (used[lo]) {
            rc = check_fail_step(ck, g,
                                 "waits a second time for %s/%d from rank %d",
                                 flag_name(s->flag.kind), s->flag.chunk,
                                 s->peer);
            goto done;
        }
        used[lo] = true;
        ck->match[g] = keys[lo].g;
    }
    for (int i = 0; i < n; i++)
        if (!used[i]) {
            rc = check_fail_step(ck, keys[i].g,
                                 "signals %s/%d to rank %d, which never waits "
                                 "for it",
                                 flag_name(keys[i].kind), keys[i].chunk,
                                 keys[i].to);
            goto done;
        }
done:
    free(keys);
    free(used);
    return rc;
}

/* ----------------------------------------------------------- simulation */

static bool runnable(const checker *ck, int g) {
    int r;
    const plan_step *s = check_step(ck, g, &r, NULL);
    for (int d = 0; d < s->ndeps; d++)
        if (!ck->done[ck->first[r] + s->deps[d]]) return false;
    return s->kind != PLAN_WAIT || ck->done[ck->match[g]];
}

static void join(int *into, const int *from, int n) {
    for (int i = 0; i < n; i++)
        if (into[i] < from[i]) into[i] = from[i];
}

static int execute(checker *ck, int g) {
    int r;
    const plan_step *s = check_step(ck, g, &r, NULL);
    int comp = ck->component[g], C = ck->C;
    int *clock = ck->clocks + (size_t)g * C;
    memcpy(clock, ck->current + (size_t)comp * C, sizeof *clock * (size_t)C);
    for (int d = 0; d < s->ndeps; d++)
        join(clock, ck->clocks + (size_t)(ck->first[r] + s->deps[d]) * C, C);
    if (s->kind == PLAN_WAIT)
        join(clock, ck->clocks + (size_t)ck->match[g] * C, C);
    ck->seq[g] = ++ck->count[comp];
    clock[comp] = ck->seq[g];
    memcpy(ck->current + (size_t)comp * C, clock, sizeof *clock * (size_t)C);
    ck->done[g] = true;
    return check_memory_apply(ck, g);
}

static int report_deadlock(checker *ck, int *head) {
    for (int comp = 0; comp < ck->P * ck->Q; comp++) {
        if (head[comp] >= ck->queue_len[comp]) continue;
        int g = ck->queue_steps[ck->queue_first[comp] + head[comp]];
        int r;
        const plan_step *s = check_step(ck, g, &r, NULL);
        for (int d = 0; d < s->ndeps; d++)
            if (!ck->done[ck->first[r] + s->deps[d]])
                return check_fail_step(ck, g,
                                       "deadlock: waits for its dependency, "
                                       "step %d, which never runs",
                                       s->deps[d]);
        int sr, si;
        check_step(ck, ck->match[g], &sr, &si);
        return check_fail_step(ck, g,
                               "deadlock: waits for %s/%d from rank %d, whose "
                               "SIGNAL (step %d) never runs",
                               flag_name(s->flag.kind), s->flag.chunk, sr, si);
    }
    return check_fail(ck, "plan_check: internal error (no stuck queue)");
}

static int simulate(checker *ck) {
    int queues = ck->P * ck->Q, remaining = ck->total, rc = 0;
    int *head = calloc((size_t)queues, sizeof *head);
    if (!head) return check_fail(ck, "plan_check: out of memory");
    while (remaining > 0 && rc == 0) {
        bool progress = false;
        /* One step per queue per round: an interleaving close to queues
         * running side by side, so that races mostly show as hazards
         * rather than as reads of data not written yet. */
        for (int comp = 0; comp < queues && rc == 0; comp++) {
            if (head[comp] >= ck->queue_len[comp]) continue;
            int g = ck->queue_steps[ck->queue_first[comp] + head[comp]];
            if (!runnable(ck, g)) continue;
            rc = execute(ck, g);
            head[comp]++;
            remaining--;
            progress = true;
        }
        if (!progress && rc == 0) rc = report_deadlock(ck, head);
    }
    free(head);
    return rc;
}

/* ------------------------------------------------------------------ end */

/* A peer access that does not happen-before the owner's last step may still
 * run when the owner starts the next op and rewrites the buffer. */
static int check_peer_accesses_end(checker *ck) {
    int C = ck->C;
    int *end = calloc((size_t)C, sizeof *end);
    if (!end) return check_fail(ck, "plan_check: out of memory");
    int rc = 0;
    for (int q = 0; q < ck->P && rc == 0; q++) {
        memset(end, 0, sizeof *end * (size_t)C);
        for (int k = 0; k < ck->Q; k++)
            join(end, ck->current + (size_t)check_component(ck, q, k) * C, C);
        for (int c = 0; c < C && rc == 0; c++) {
            int last = ck->peer_access[q * C + c];
            if (last <= end[c]) continue;
            int g = ck->queue_steps[ck->queue_first[c] + last - 1];
            rc = check_fail_step(ck, g,
                                 "accesses rank %d's workspace, but does not "
                                 "happen-before rank %d's last step, so rank "
                                 "%d could reuse it in the next op while the "
                                 "access runs (missing DONE or READY wait)",
                                 q, q, q);
        }
    }
    free(end);
    return rc;
}

static int64_t cell_of(const checker *ck, int rank, plan_buffer buf,
                       int64_t address) {
    return (int64_t)rank * ck->cells_per_rank +
           ck->mem_first[rank * PLAN_BUF_COUNT + buf] + address;
}

static int check_output(checker *ck, int r) {
    const plan_request *req = ck->req;
    plan_op op = req->op;
    bool shard_out = op == PLAN_OP_GEMM_RS || op == PLAN_OP_BULK_RS;
    int64_t first = shard_out ? plan_shard_offset(req->m, r, ck->P) : 0;
    int64_t count = shard_out ? plan_shard_rows(req->m, r, ck->P) : req->m;
    uint64_t all = ck->P == 64 ? ~0ull : (1ull << ck->P) - 1;
    int64_t block = ck->plans[0].slot_rows;
    for (int64_t a = 0; a < count; a++) {
        int64_t row = first + a, idx = cell_of(ck, r, PLAN_BUF_OUTPUT, a);
        const check_cell *c = &ck->cells[idx];
        if (ck->writes[idx] != 1)
            return check_fail(ck,
                              "rank %d's output row %lld is written %d times "
                              "(expected exactly once)",
                              r, (long long)row, ck->writes[idx]);
        const char *wrong = NULL;
        if (c->global_minus_address + a != row) wrong = "holds another row";
        else if (op == PLAN_OP_AG_GEMM)
            wrong = c->kind != CELL_PRODUCT || !c->final
                        ? "is not a final GEMM result" : NULL;
        else if (op == PLAN_OP_BULK_AG)
            wrong = c->kind != CELL_DATA || c->mask != 1ull << (row / block)
                        ? "is not the owner's send row" : NULL;
        else
            wrong = c->kind != CELL_SUM || !c->final || c->mask != all
                        ? "is not the final sum of every rank's contribution"
                        : NULL;
        if (wrong)
            return check_fail(ck, "rank %d's output row %lld %s", r,
                              (long long)row, wrong);
    }
    return 0;
}

static int check_coverage(checker *ck) {
    const plan_request *req = ck->req;
    bool bulk = req->op == PLAN_OP_BULK_AG || req->op == PLAN_OP_BULK_RS;
    for (int r = 0; r < ck->P; r++) {
        if (bulk) {
            int want = req->has_gemm ? 1 : 0;
            if (ck->bulk_gemms[r] != want)
                return check_fail(ck,
                                  "rank %d runs the bulk op's GEMM %d times "
                                  "(expected %d)",
                                  r, ck->bulk_gemms[r], want);
            if (req->has_collective && check_output(ck, r)) return -1;
            continue;
        }
        for (int64_t row = 0; row < req->m; row++) {
            int n = ck->computed[(size_t)r * (size_t)(req->m + 1) + row];
            if (n != 1)
                return check_fail(ck,
                                  "rank %d computes row %lld %d times "
                                  "(expected exactly once)",
                                  r, (long long)row, n);
        }
        /* AG: every peer's row lands in r's GATHER exactly once; r's own
         * rows may stay in INPUT (pushing schedules never copy them). */
        int64_t own0 = plan_shard_offset(req->m, r, ck->P);
        int64_t own1 = own0 + plan_shard_rows(req->m, r, ck->P);
        if (req->op == PLAN_OP_AG_GEMM)
            for (int64_t row = 0; row < req->m; row++) {
                int n = ck->writes[cell_of(ck, r, PLAN_BUF_GATHER, row)];
                bool own = row >= own0 && row < own1;
                if (n != 1 && !(own && n == 0))
                    return check_fail(ck,
                                      "rank %d gathers row %lld %d times "
                                      "(expected exactly once%s)",
                                      r, (long long)row, n,
                                      own ? ", or never for its own rows" : "");
            }
        if (check_output(ck, r)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------ driver */

static void checker_free(checker *ck) {
    free(ck->first);
    free(ck->clocks);
    free(ck->seq);
    free(ck->rank_of);
    free(ck->component);
    free(ck->done);
    free(ck->match);
    free(ck->queue_steps);
    free(ck->queue_first);
    free(ck->queue_len);
    free(ck->current);
    free(ck->count);
    free(ck->mem_first);
    free(ck->cells);
    free(ck->readers);
    free(ck->writes);
    free(ck->computed);
    free(ck->bulk_gemms);
    free(ck->peer_access);
}

static int index_steps(checker *ck) {
    int P = ck->P, queues = P * ck->Q;
    ck->first = calloc((size_t)P + 1, sizeof(int));
    if (!ck->first) return check_fail(ck, "plan_check: out of memory");
    for (int r = 0; r < P; r++)
        ck->first[r + 1] = ck->first[r] + ck->plans[r].nsteps;
    int total = ck->total = ck->first[P];
    size_t n = (size_t)total + 1, C = (size_t)ck->C;
    ck->clocks = calloc(n * C, sizeof(int));
    ck->seq = calloc(n, sizeof(int));
    ck->rank_of = calloc(n, sizeof(int));
    ck->component = calloc(n, sizeof(int));
    ck->done = calloc(n, sizeof(bool));
    ck->match = calloc(n, sizeof(int));
    ck->queue_steps = calloc(n, sizeof(int));
    ck->queue_first = calloc((size_t)queues + 1, sizeof(int));
    ck->queue_len = calloc((size_t)queues, sizeof(int));
    ck->current = calloc((size_t)queues * C, sizeof(int));
    ck->count = calloc((size_t)queues, sizeof(int));
    ck->bulk_gemms = calloc((size_t)P, sizeof(int));
    ck->peer_access = calloc((size_t)P * C, sizeof(int));
    if (!ck->clocks || !ck->seq || !ck->rank_of || !ck->component ||
        !ck->done || !ck->match || !ck->queue_steps || !ck->queue_first ||
        !ck->queue_len || !ck->current || !ck->count || !ck->bulk_gemms ||
        !ck->peer_access)
        return check_fail(ck, "plan_check: out of memory");
    for (int r = 0; r < P; r++)
        for (int i = 0; i < ck->plans[r].nsteps; i++) {
            int g = ck->first[r] + i, q = ck->plans[r].steps[i].queue;
            ck->rank_of[g] = r;
            if (q < 0 || q >= ck->Q)
                return check_fail(ck, "rank %d step %d is on queue %d (0..%d)",
                                  r, i, q, ck->Q - 1);
            ck->component[g] = check_component(ck, r, q);
            ck->queue_len[ck->component[g]]++;
        }
    for (int c = 0; c < queues; c++)
        ck->queue_first[c + 1] = ck->queue_first[c] + ck->queue_len[c];
    memset(ck->queue_len, 0, sizeof(int) * (size_t)queues);
    for (int g = 0; g < total; g++) {
        int c = ck->component[g];
        ck->queue_steps[ck->queue_first[c] + ck->queue_len[c]++] = g;
    }
    return 0;
}

int plan_check(const plan *plans, int nranks, char *err, int err_len) {
    checker ck;
    memset(&ck, 0, sizeof ck);
    ck.err = err;
    ck.err_len = err_len;
    if (err && err_len > 0) err[0] = '\0';
    if (!plans || nranks < 1 || nranks > PLAN_CHECK_MAX_RANKS)
        return check_fail(&ck,
                          "plan_check: needs the plans of 1..%d ranks, got "
                          "%d%s",
                          PLAN_CHECK_MAX_RANKS, nranks,
                          plans ? "" : " (plans is NULL)");
    ck.plans = plans;
    ck.req = &plans[0].req;
    ck.P = nranks;
    int rc = check_headers(&ck);
    if (rc == 0) {
        ck.Q = ck.req->compute_queues + 1;
        ck.C = ck.P * ck.Q;
        rc = index_steps(&ck);
    }
    for (int g = 0; rc == 0 && g < ck.total; g++) {
        int r = ck.rank_of[g];
        rc = check_fields(&ck, g, r, g - ck.first[r]);
    }
    if (rc == 0) rc = match_flags(&ck);
    if (rc == 0) rc = check_memory_init(&ck);
    if (rc == 0) rc = simulate(&ck);
    if (rc == 0) rc = check_peer_accesses_end(&ck);
    if (rc == 0) rc = check_coverage(&ck);
    checker_free(&ck);
    return rc;
}
