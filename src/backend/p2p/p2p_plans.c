/* The p2p backend's per-call preparation: workspace slot sizing, the plan
 * cache (schedules and their events, made at a shape's first eager call)
 * and the cross-rank agreement check (first call of each signature). */
#include <stdlib.h>
#include <string.h>

#include "backend/p2p/p2p_exchange.h"
#include "backend/p2p/p2p_plans.h"

/* ------------------------------------------------------------ slot sizing */

void p2p_slot_needs(int nranks, int64_t max_m, int *partial_slots,
                    int *recv_slots) {
    static const plan_op ops[] = {PLAN_OP_GEMM_RS, PLAN_OP_GEMM_AR,
                                  PLAN_OP_BULK_RS, PLAN_OP_AG_GEMM,
                                  PLAN_OP_BULK_AG};
    static const int splits[] = {1, 2, 4, P2P_MAX_SPLITS};
    char err[256];
    *partial_slots = 0;
    *recv_slots = 0;
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
        for (int a = 0; a < PLAN_ALGO_COUNT; a++)
            for (size_t s = 0; s < sizeof splits / sizeof splits[0]; s++) {
                plan_request req;
                memset(&req, 0, sizeof req);
                req.op = ops[o];
                req.algo = (plan_algo)a;
                req.nranks = nranks;
                req.rank = 0;
                req.m = max_m;
                req.splits = splits[s];
                req.compute_queues = P2P_MAX_QUEUES - 1;
                req.has_gemm = true;
                req.has_collective = true;
                for (int r = 0; r < nranks && r < 2; r++) {
                    req.rank = r == 0 ? 0 : nranks - 1;
                    plan p;
                    memset(&p, 0, sizeof p);
                    if (plan_build(&req, &p, err, (int)sizeof err) != 0)
                        continue;
                    if (p.partial_slots > *partial_slots)
                        *partial_slots = p.partial_slots;
                    if (p.recv_slots > *recv_slots)
                        *recv_slots = p.recv_slots;
                    plan_free(&p);
                }
            }
}

/* ------------------------------------------------------------ plan cache */

static void entry_clear(p2p_plan_entry *e) {
    if (e->events) {
        for (int i = 0; i < e->plan.nsteps; i++)
            if (e->events[i]) cudaEventDestroy(e->events[i]);
        free(e->events);
    }
    free(e->units);
    if (e->used) plan_free(&e->plan);
    memset(e, 0, sizeof *e);
}

void p2p_plan_cache_clear(p2p_state *st) {
    for (int i = 0; i < P2P_PLAN_CACHE; i++) entry_clear(&st->plans[i]);
}

static bool same_request(const plan_request *a, const plan_request *b) {
    return a->op == b->op && a->algo == b->algo && a->nranks == b->nranks &&
           a->rank == b->rank && a->m == b->m && a->splits == b->splits &&
           a->compute_queues == b->compute_queues &&
           a->has_gemm == b->has_gemm &&
           a->has_collective == b->has_collective &&
           a->own_addends == b->own_addends;
}

cgm_status p2p_plan_lookup(p2p_state *st, const plan_request *req,
                              bool capturing, p2p_plan_entry **out) {
    cgm_status status = CGM_SUCCESS;
    p2p_plan_entry *victim = &st->plans[0];
    for (int i = 0; i < P2P_PLAN_CACHE; i++) {
        p2p_plan_entry *e = &st->plans[i];
        if (e->used && same_request(&e->req, req)) {
            e->last_use = ++st->use_clock;
            *out = e;
            return CGM_SUCCESS;
        }
        if (!e->used || (victim->used && e->last_use < victim->last_use))
            victim = e;
    }
    if (capturing)
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "p2p: expected an eager call with these shapes "
                         "(%s, m=%lld, %d splits) before graph capture, "
                         "found none (or it was evicted from the %d-entry "
                         "plan cache); call the op once outside capture first",
                         plan_op_name(req->op), (long long)req->m, req->splits,
                         P2P_PLAN_CACHE);
    entry_clear(victim);
    char err[512];
    if (plan_build(req, &victim->plan, err, (int)sizeof err) != 0)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "p2p: no schedule for %s with algorithm %s, m=%lld, "
                         "%d ranks: %s; choose another algorithm",
                         plan_op_name(req->op), plan_algo_name(req->algo),
                         (long long)req->m, req->nranks, err);
    victim->used = true;
    victim->req = *req;
    const plan *p = &victim->plan;
    if ((size_t)p->flag_chunks + 1 > st->flag_chunks) {
        status = cgm_error(CGM_ERROR_INTERNAL,
                           "p2p: the %s schedule uses %d flag chunks, the "
                           "flag area holds %zu; please report this",
                           plan_op_name(req->op), p->flag_chunks,
                           st->flag_chunks - 1);
        goto fail;
    }
    victim->events = calloc((size_t)(p->nsteps ? p->nsteps : 1),
                            sizeof(cudaEvent_t));
    victim->units = calloc((size_t)(p->nsteps ? p->nsteps : 1),
                           sizeof(p2p_unit));
    if (!victim->events || !victim->units) {
        status = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "events of a plan");
        goto fail;
    }
    victim->nunits = -1;
    /* An event after every step that another queue waits for, and after
     * every copy into GATHER and every WAIT off the comm queue (x_gathered
     * waits on them: a pushed piece is in GATHER once its WAIT passed). */
    for (int i = 0; i < p->nsteps; i++) {
        const plan_step *s = &p->steps[i];
        if (s->queue < 0 || s->queue >= P2P_MAX_QUEUES) {
            status = cgm_error(CGM_ERROR_INTERNAL,
                               "p2p: step %d of the %s schedule uses queue "
                               "%d, expected 0..%d", i, plan_op_name(req->op),
                               s->queue, P2P_MAX_QUEUES - 1);
            goto fail;
        }
        for (int d = 0; d < s->ndeps; d++) {
            int dep = s->deps[d];
            if (dep < 0 || dep >= i) {
                status = cgm_error(CGM_ERROR_INTERNAL,
                                   "p2p: step %d depends on step %d, expected "
                                   "an earlier step", i, dep);
                goto fail;
            }
            if (p->steps[dep].queue != s->queue && !victim->events[dep])
                CGM_CUDA_TRY(cudaEventCreateWithFlags(&victim->events[dep],
                                                      cudaEventDisableTiming));
        }
        if (((s->kind == PLAN_COPY && s->dst.buf == PLAN_BUF_GATHER) ||
             s->kind == PLAN_WAIT) &&
            s->queue != 0 && !victim->events[i])
            CGM_CUDA_TRY(cudaEventCreateWithFlags(&victim->events[i],
                                                  cudaEventDisableTiming));
    }
    victim->last_use = ++st->use_clock;
    *out = victim;
    return CGM_SUCCESS;
fail:
    entry_clear(victim);
    return status;
}

/* -------------------------------------------------- cross-rank agreement */

static uint64_t signature_hash(const int64_t *sig) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < CGM_SIGNATURE_WORDS; i++) {
        h ^= (uint64_t)sig[i];
        h *= 1099511628211ull;
    }
    return h;
}

cgm_status p2p_check_agreement(p2p_state *st, const cgm_call *call,
                                  bool capturing) {
    cgm_status status = CGM_SUCCESS;
    if (!st->comm->config.check_agreement || st->nranks == 1)
        return CGM_SUCCESS;
    int64_t sig[CGM_SIGNATURE_WORDS];
    cgm_call_signature(call, sig);
    uint64_t h = signature_hash(sig);
    for (int i = 0; i < st->nchecked; i++)
        if (st->checked_signatures[i] == h) return CGM_SUCCESS;
    if (capturing) return CGM_SUCCESS; /* the plan lookup reports it */
    int64_t *all = calloc((size_t)st->nranks * CGM_SIGNATURE_WORDS,
                          sizeof(int64_t));
    if (!all) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "signatures");
    CGM_TRY(p2p_exchange_host(st, sig, all, sizeof sig,
                              "the agreement check"));
    CGM_TRY(cgm_signature_compare(st->comm, all));
    if (st->nchecked < P2P_SIGNATURE_CACHE)
        st->checked_signatures[st->nchecked++] = h;
    else
        st->checked_signatures[h % P2P_SIGNATURE_CACHE] = h;
fail:
    free(all);
    return status;
}

