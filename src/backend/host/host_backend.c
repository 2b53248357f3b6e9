/* The host backend's table: probe, init/finalize, and the run entry
 * (algorithm and split resolution, workspace capacity, the plan cache, the
 * agreement check, then the executor). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host/host.h"

static const char *host_op_names[PLAN_OP_COUNT] = {
    "ag_gemm", "gemm_rs", "gemm_ar", "bulk_ag", "bulk_rs"};

static cgm_status host_probe(const cgm_comm *comm) {
    /* A comm with a rendezvous name and no NCCL comm is LOCAL even where
     * bootstrap_kind was left 0. */
    bool local = comm->bootstrap_kind == CGM_BOOTSTRAP_LOCAL ||
                 (comm->bootstrap_kind == 0 && comm->rendezvous[0] &&
                  !comm->nccl_comm);
    if (!local)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the host backend needs a comm created with a LOCAL "
                         "bootstrap (commgemm-run, mpirun, torchrun or "
                         "cgm_bootstrap fields rank/nranks/rendezvous), found "
                         "bootstrap kind %d (NCCL); create the comm with "
                         "cgm_bootstrap_from_env() or choose backend p2p or "
                         "nccl",
                         (int)comm->bootstrap_kind);
    return CGM_SUCCESS;
}

static void host_free(host_state *st) {
    if (!st) return;
    host_rendezvous_close(st);
    for (int i = 0; i < HOST_PLAN_CACHE; i++) {
        if (!st->plans[i].used) continue;
        plan_free(&st->plans[i].plan);
        free(st->plans[i].occurrence);
    }
    free(st->peers);
    free(st->x32);
    free(st->w32);
    free(st->partial);
    free(st->x_packed);
    free(st);
}

static cgm_status host_init(cgm_comm *comm, void **state) {
    cgm_status s = CGM_SUCCESS;
    host_state *st = calloc(1, sizeof *st);
    *state = NULL;
    if (!st)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for the host backend state, found "
                         "none free");
    st->rank = comm->rank;
    st->nranks = comm->nranks;
    st->listen_fd = -1;
    for (int g = 0; g < HOST_SEG_COUNT; g++) st->memfd[g] = -1;
    /* Flag chunk ids of a plan lie in [-1, 2 * P * splits). */
    st->chunks = 2 * comm->nranks * HOST_MAX_SPLITS + 1;
    st->width_max = comm->config.max_n > comm->config.max_k
                        ? comm->config.max_n
                        : comm->config.max_k;
    st->peers = calloc((size_t)comm->nranks, sizeof *st->peers);
    if (!st->peers) {
        s = cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                      "expected memory for %d peers, found none free",
                      comm->nranks);
        goto fail;
    }
    for (int r = 0; r < comm->nranks; r++) st->peers[r].fd = -1;
    s = host_rendezvous(comm, st);
    if (s != CGM_SUCCESS) goto fail;
    *state = st;
    return CGM_SUCCESS;
fail:
    host_free(st);
    return s;
}

static cgm_status host_finalize(cgm_comm *comm, void *state) {
    (void)comm;
    host_free(state);
    return CGM_SUCCESS;
}

static cgm_status too_large(const char *what, int64_t found, const char *field,
                            const char *env, int64_t max) {
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "expected %s <= %lld (the comm's %s), found %s = %lld; "
                     "create the comm with a larger config %s (or %s)",
                     what, (long long)max, field, what, (long long)found, field,
                     env);
}

/* The workspaces were sized at creation from max_m, max_n and max_k. */
static cgm_status check_capacity(const cgm_comm *comm, const host_state *st,
                                 const cgm_call *call) {
    const cgm_resolved_config *c = &comm->config;
    if (call->has_gemm) {
        if (call->m > c->max_m)
            return too_large("m", call->m, "max_m", "COMMGEMM_MAX_M",
                             c->max_m);
        if (call->n > c->max_n)
            return too_large("n", call->n, "max_n", "COMMGEMM_MAX_N",
                             c->max_n);
        if (call->k > c->max_k)
            return too_large("k", call->k, "max_k", "COMMGEMM_MAX_K",
                             c->max_k);
    }
    if (call->op == CGM_OP_BULK && call->has_collective) {
        if (call->coll_m > c->max_m)
            return too_large("the collective's rows", call->coll_m, "max_m",
                             "COMMGEMM_MAX_M", c->max_m);
        if (call->coll_cols > st->width_max)
            return too_large("the collective's columns", call->coll_cols,
                             "max(max_n, max_k)",
                             "COMMGEMM_MAX_N or COMMGEMM_MAX_K",
                             st->width_max);
    }
    return CGM_SUCCESS;
}

static cgm_status resolve_algo(const cgm_comm *comm, const cgm_call *call,
                               plan_op op, plan_algo *out) {
    bool bulk = op == PLAN_OP_BULK_AG || op == PLAN_OP_BULK_RS;
    cgm_algo a = call->algo;
    if (a == CGM_ALGO_AUTO) {
        /* The comm's default applies where it makes sense for this op. */
        cgm_algo d = comm->config.algo;
        bool fits = bulk ? d == CGM_ALGO_BULK || d == CGM_ALGO_NO_OVERLAP
                         : d == CGM_ALGO_SPLIT_PIPELINED ||
                               d == CGM_ALGO_RING || d == CGM_ALGO_NO_OVERLAP;
        a = fits ? d : bulk ? CGM_ALGO_BULK : CGM_ALGO_SPLIT_PIPELINED;
    }
    /* Fused is the p2p kernel's; here it means the split schedule. */
    if (a == CGM_ALGO_FUSED) a = bulk ? CGM_ALGO_BULK : CGM_ALGO_SPLIT_PIPELINED;
    switch (a) {
    case CGM_ALGO_SPLIT_PIPELINED: *out = PLAN_ALGO_SPLIT; break;
    case CGM_ALGO_RING: *out = PLAN_ALGO_RING; break;
    case CGM_ALGO_NO_OVERLAP: *out = PLAN_ALGO_NO_OVERLAP; break;
    case CGM_ALGO_BULK: *out = PLAN_ALGO_BULK; break;
    default:
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "expected a cgm_algo, found %d; use CGM_ALGO_AUTO",
                         (int)a);
    }
    if (bulk && (*out == PLAN_ALGO_SPLIT || *out == PLAN_ALGO_RING))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "expected algo bulk, no_overlap or auto for "
                         "cgm_bulk_overlap, found %s; split and ring are for "
                         "ag_gemm, gemm_rs and gemm_ar",
                         cgm_algo_name(a));
    if (!bulk && *out == PLAN_ALGO_BULK)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "expected algo split, ring, no_overlap or auto for "
                         "%s, found bulk; CGM_ALGO_BULK is only for "
                         "cgm_bulk_overlap",
                         host_op_names[op]);
    return CGM_SUCCESS;
}

static int resolve_splits(const cgm_comm *comm, const cgm_call *call,
                          int64_t m) {
    int splits = call->splits > 0 ? call->splits : comm->config.splits;
    if (splits <= 0) {
        /* Pipelining pays once a shard has a few dozen rows. */
        int64_t shard = cgm_ceil_div(m > 0 ? m : 1, comm->nranks);
        splits = shard >= 256 ? 4 : shard >= 64 ? 2 : 1;
    }
    return splits > HOST_MAX_SPLITS ? HOST_MAX_SPLITS : splits;
}

/* Occurrence of each SIGNAL / WAIT among the steps naming the same flag,
 * so that the k-th wait matches the k-th signal of one op. */
static cgm_status number_occurrences(const host_state *st,
                                     host_plan_entry *e) {
    const plan *p = &e->plan;
    size_t per_kind = (size_t)st->nranks * PLAN_FLAG_COUNT * (size_t)st->chunks;
    uint32_t *counts = calloc(2 * per_kind, sizeof *counts);
    e->occurrence = calloc((size_t)(p->nsteps ? p->nsteps : 1),
                           sizeof *e->occurrence);
    if (!counts || !e->occurrence) {
        free(counts);
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for a plan of %d steps, found none",
                         p->nsteps);
    }
    cgm_status s = CGM_SUCCESS;
    for (int i = 0; i < p->nsteps && s == CGM_SUCCESS; i++) {
        const plan_step *step = &p->steps[i];
        if (step->kind != PLAN_SIGNAL && step->kind != PLAN_WAIT) continue;
        if (step->peer < 0 || step->peer >= st->nranks ||
            step->flag.chunk < -1 || step->flag.chunk >= st->chunks - 1 ||
            (int)step->flag.kind < 0 || step->flag.kind >= PLAN_FLAG_COUNT) {
            s = cgm_error(CGM_ERROR_INTERNAL,
                          "plan step %d names rank %d flag %d chunk %d, "
                          "outside %d ranks and %d chunks; please report "
                          "this bug",
                          i, step->peer, (int)step->flag.kind,
                          step->flag.chunk, st->nranks, st->chunks - 1);
            break;
        }
        size_t idx = (step->kind == PLAN_WAIT ? per_kind : 0) +
                     ((size_t)step->peer * PLAN_FLAG_COUNT + step->flag.kind) *
                         (size_t)st->chunks +
                     (size_t)(step->flag.chunk + 1);
        e->occurrence[i] = counts[idx]++;
        if (e->occurrence[i] + 1 >= HOST_EPOCH_STRIDE)
            s = cgm_error(CGM_ERROR_INTERNAL,
                          "plan step %d reuses one flag %u times, more than "
                          "the host backend's %u; please report this bug",
                          i, e->occurrence[i], HOST_EPOCH_STRIDE - 1);
    }
    free(counts);
    return s;
}

static cgm_status get_plan(host_state *st, const plan_request *req,
                           host_plan_entry **out) {
    host_plan_entry *victim = &st->plans[0];
    for (int i = 0; i < HOST_PLAN_CACHE; i++) {
        host_plan_entry *e = &st->plans[i];
        if (e->used && memcmp(&e->req, req, sizeof *req) == 0) {
            e->last_use = ++st->plan_clock;
            *out = e;
            return CGM_SUCCESS;
        }
        if (!e->used || (victim->used && e->last_use < victim->last_use))
            victim = e;
    }
    if (victim->used) {
        plan_free(&victim->plan);
        free(victim->occurrence);
        memset(victim, 0, sizeof *victim);
    }
    char err[256] = "";
    if (plan_build(req, &victim->plan, err, (int)sizeof err) != 0)
        return cgm_error(CGM_ERROR_NOT_SUPPORTED,
                         "expected a schedule for %s with algo %s on %d ranks "
                         "(m=%lld, splits=%d), found none: %s; choose another "
                         "algo",
                         plan_op_name(req->op), plan_algo_name(req->algo),
                         req->nranks, (long long)req->m, req->splits, err);
    victim->used = true;
    victim->req = *req;
    cgm_status s = CGM_SUCCESS;
    if (victim->plan.flag_chunks > st->chunks - 1)
        s = cgm_error(CGM_ERROR_INTERNAL,
                      "expected at most %d flag chunks per op, found a plan "
                      "with %d; please report this bug",
                      st->chunks - 1, victim->plan.flag_chunks);
    if (s == CGM_SUCCESS) s = number_occurrences(st, victim);
    if (s != CGM_SUCCESS) {
        plan_free(&victim->plan);
        free(victim->occurrence);
        memset(victim, 0, sizeof *victim);
        return s;
    }
    victim->last_use = ++st->plan_clock;
    *out = victim;
    return CGM_SUCCESS;
}

/* This rank cannot run the call (its arguments, limits or plan), while
 * its peers are on their way into the call's agreement exchange: they are
 * told (host_announce_rejection) instead of waiting out timeout_ms. */
static cgm_status reject(cgm_comm *comm, host_state *st, const cgm_call *call,
                         plan_op op, cgm_status s) {
    if (comm->config.check_agreement && !call->agreed)
        host_announce_rejection(comm, st, host_op_names[op], s);
    return s;
}

/* options.y_amax: the amax of the fp8 rows this rank wrote; GEMM+AR's
 * owners each wrote their rows, so its amax is the max over ranks. */
static cgm_status write_amax(cgm_comm *comm, host_state *st, const host_run *run) {
    uint32_t bits = run->amax_bits;
    if (run->op == PLAN_OP_GEMM_AR) {
        cgm_status s = host_max_bits(comm, st, &bits, run->op_name);
        if (s != CGM_SUCCESS) return s;
    }
    float amax;
    memcpy(&amax, &bits, sizeof amax);
    *run->call->y_amax = amax;
    return CGM_SUCCESS;
}

static cgm_status host_run_op(cgm_comm *comm, void *state,
                              const cgm_call *call, plan_op op) {
    host_state *st = state;
    if (call->stream)
        return reject(comm, st, call, op,
                      cgm_error(CGM_ERROR_INVALID_USAGE,
                                "the host backend runs ops to completion on "
                                "host memory: expected stream NULL, found %p; "
                                "pass NULL or use a GPU backend",
                                call->stream));
    cgm_status s = check_capacity(comm, st, call);
    if (s != CGM_SUCCESS) return reject(comm, st, call, op, s);
    plan_request req;
    memset(&req, 0, sizeof req); /* compared with memcmp in the cache */
    req.op = op;
    s = resolve_algo(comm, call, op, &req.algo);
    if (s != CGM_SUCCESS) return reject(comm, st, call, op, s);
    bool bulk = op == PLAN_OP_BULK_AG || op == PLAN_OP_BULK_RS;
    req.nranks = comm->nranks;
    req.rank = comm->rank;
    req.m = bulk ? (call->has_collective ? call->coll_m : 0) : call->m;
    req.splits = resolve_splits(comm, call, req.m);
    req.compute_queues = comm->config.host_threads; /* 1..CGM_HOST_THREADS_MAX */
    req.has_gemm = call->has_gemm;
    req.has_collective = bulk ? call->has_collective : true;
    /* The rule the p2p backend applies too, so that this backend runs the
     * schedules p2p runs (no accumulate: p2p's GEMMs take the addend where
     * they would take Y). */
    req.own_addends = !call->accumulate && call->k > 0 &&
                      plan_prefers_own_addends(&req);
    host_plan_entry *entry = NULL;
    s = get_plan(st, &req, &entry);
    if (s != CGM_SUCCESS) return reject(comm, st, call, op, s);

    host_epilogue epi;
    s = host_epilogue_begin(&epi, call, entry->plan.nsteps);
    if (s != CGM_SUCCESS) return reject(comm, st, call, op, s);
    host_run run = {call, op, entry, ++st->epoch, host_op_names[op], 0, epi};
    CGM_TRACE(CGM_SUB_HOST, "op #%llu %s: algo %s, m %lld, splits %d, %d steps",
              (unsigned long long)run.epoch, run.op_name,
              plan_algo_name(req.algo), (long long)req.m, entry->plan.splits,
              entry->plan.nsteps);
    if (comm->config.check_agreement && !call->agreed) {
        int blamed = -1;
        s = host_check_agreement(comm, st, call, run.epoch, run.op_name,
                                 &blamed);
        /* MISMATCH: every rank says so, the comm stays usable */
        if (s != CGM_SUCCESS && s != CGM_ERROR_MISMATCH) host_publish_failure(st, s, blamed);
    }
    if (s == CGM_SUCCESS) s = host_execute(comm, st, &run);
    if (s == CGM_SUCCESS && call->has_bgrad) {
        /* BGRAD sums op(A): its fp32 values, as host_execute left them */
        cgm_matrix a32 = call->in_dtype == CGM_DTYPE_FP32
                             ? call->x
                             : cgm_matrix_make(st->x32, CGM_DTYPE_FP32, call->x.rows, call->x.cols);
        s = host_epilogue_end(comm, st, &run.epi, &run, &a32);
    }
    if (s == CGM_SUCCESS && call->y_amax) s = write_amax(comm, st, &run);
    host_epilogue_free(&run.epi);
    return s;
}

/* The table's run entry: the call's op as the schedule's. */
static cgm_status host_backend_run(cgm_comm *comm, void *state, const cgm_call *call) {
    switch (call->op) {
    case CGM_OP_ALL_GATHER_GEMM: return host_run_op(comm, state, call, PLAN_OP_AG_GEMM);
    case CGM_OP_GEMM_REDUCE_SCATTER: return host_run_op(comm, state, call, PLAN_OP_GEMM_RS);
    case CGM_OP_GEMM_ALL_REDUCE: return host_run_op(comm, state, call, PLAN_OP_GEMM_AR);
    default:
        return host_run_op(comm, state, call,
                           call->collective == CGM_COLLECTIVE_REDUCE_SCATTER ? PLAN_OP_BULK_RS : PLAN_OP_BULK_AG);
    }
}

/* The core rejected this rank's call before it reached host_run_op; with
 * the agreement check the peers are in the call's exchange. */
static void host_rejected(cgm_comm *comm, void *state, cgm_op op,
                          cgm_status status) {
    if (comm->config.check_agreement)
        host_announce_rejection(comm, state, cgm_op_name(op), status);
}

/* ---- autotuner hooks ---- */

/* Pieces below this many rows cost more in per-chunk overhead than the
 * pipelining wins on the host. */
#define HOST_TUNE_MIN_PIECE_ROWS 16

static int host_tune_candidates(const cgm_comm *comm, const cgm_call *call,
                                cgm_tune_candidate *out) {
    return cgm_tune_plan_candidates(call->m, comm->nranks,
                                    HOST_TUNE_MIN_PIECE_ROWS, out);
}

/* Host ops complete before they return: the wall clock around each. */
static cgm_status host_tune_measure(cgm_comm *comm, void *state,
                                    const cgm_call *call, int warmup, int reps,
                                    int64_t *ns) {
    for (int i = 0; i < warmup + reps; i++) {
        int64_t t0 = cgm_now_ns();
        cgm_status s = host_backend_run(comm, state, call);
        if (s != CGM_SUCCESS) return s;
        if (i >= warmup) ns[i - warmup] = cgm_now_ns() - t0;
    }
    return CGM_SUCCESS;
}

static cgm_status host_tune_allgather(cgm_comm *comm, void *state,
                                      const int64_t *mine, int words,
                                      int64_t *all) {
    return host_allgather_words(comm, state, mine, words, all);
}

static cgm_status host_tune_agree(cgm_comm *comm, void *state,
                                  const cgm_call *call, const int64_t *mine,
                                  int words, int64_t *all) {
    return host_tune_agree_words(comm, state, call, mine, words, all);
}

/* "cpu-" and the CPU model (decisions depend on it), else the machine. */
static void host_tune_device_name(const cgm_comm *comm, void *state,
                                  char *buf, size_t len) {
    char line[256];
    snprintf(buf, len, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v += 1 + strspn(v + 1, " \t");
        snprintf(buf, len, "cpu-%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    if (f) fclose(f);
}

static const cgm_tune_hooks host_tune_hooks = {
    .candidates = host_tune_candidates,
    .capturing = NULL, /* host ops take no stream */
    .measure = host_tune_measure,
    .agree = host_tune_agree,
    .allgather = host_tune_allgather,
    .agree_every_call = true,
    .device_name = host_tune_device_name,
};

const cgm_backend_vtable cgm_host_backend = {
    .id = CGM_BACKEND_HOST,
    .name = "host",
    .probe = host_probe,
    .init = host_init,
    .run = host_backend_run,
    .rejected = host_rejected,
    .async_error = NULL, /* ops complete before returning */
    .finalize = host_finalize,
    .tune = &host_tune_hooks,
};
