/* The autotuner's decision path: settings, the in-memory cache (bounded,
 * LRU) and the first-use protocol that every rank runs in lockstep (the
 * measured search of step 3 is tune_search.c):
 *
 *   1. exchange: this rank's per-rank key word (AG's n, RS/AR's k), its
 *      candidate list (count and hash), its cache file identity and
 *      whether its file has decisions;
 *   2. only when some rank's file has decisions: exchange each rank's
 *      proposal from its file; used when every rank proposes the same one;
 *   3. else (never for accumulate calls, never inside capture) a pilot run
 *      of the first candidate, its slowest rank's time exchanged, plans
 *      how much of the search fits TUNE_BUDGET_NS (search); then time
 *      every candidate that many times, up to TUNE_REPS (two passes: list
 *      order, then reverse, each after a warm-up) with the call's own
 *      buffers, exchange the medians, take the slowest rank's time per
 *      candidate, pick the fastest (ties: the earlier candidate); when the
 *      runner-up is within TUNE_RUNOFF_PERCENT and the budget allows, time
 *      the two again with more runs and keep the faster (run_off); cache
 *      it, and append it to the cache file (the lowest rank of each
 *      distinct file writes). An op too slow for even one run of each
 *      candidate within the budget keeps the default rule, remembered for
 *      its key like a decision.
 *
 * Each rank takes the same branches from the same exchanged data, so all
 * ranks apply the same candidate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tune/tune_internal.h"

#define TUNE_MAX_RUNOFF 10000 /* percent */

/* In memory, X1_HIT of a key whose decision is the default rule (too slow
 * to measure within the budget); -1 is no decision. */
#define TUNE_HIT_DEFAULT (-2)

/* What comms created from now on use (tune_set_constants_for_tests,
 * tune_set_budget_for_tests). */
static int tune_reps = TUNE_REPS;
static int tune_runoff = TUNE_RUNOFF_PERCENT;
static int64_t tune_budget = TUNE_BUDGET_NS;
static int64_t tune_slow_key = TUNE_SLOW_KEY_NS;

void tune_set_constants_for_tests(int reps, int runoff_percent) {
    tune_reps = reps < 1 ? 1 : reps > TUNE_MAX_REPS ? TUNE_MAX_REPS : reps;
    tune_runoff = runoff_percent < 0 ? 0
                  : runoff_percent > TUNE_MAX_RUNOFF ? TUNE_MAX_RUNOFF
                                                     : runoff_percent;
}

void tune_set_budget_for_tests(int64_t budget_ns, int64_t slow_key_ns) {
    tune_budget = budget_ns < 0 ? 0 : budget_ns;
    tune_slow_key = slow_key_ns < 0 ? 0 : slow_key_ns;
}

const char *cgm_tune_source_name(cgm_tune_source source) {
    static const char *names[] = {"none", "default", "measured", "memory",
                                  "disk"};
    return (unsigned)source <= CGM_TUNE_DISK ? names[source] : "invalid";
}

/* ------------------------------------------------------------ settings */

/* Copies `path` with %h replaced by the host name (a file per node on a
 * shared file system). */
static void expand_path(const char *path, char *out, size_t len) {
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    size_t o = 0;
    for (const char *p = path; *p && o + 1 < len; p++) {
        if (p[0] == '%' && p[1] == 'h') {
            o += (size_t)snprintf(out + o, len - o, "%s", host);
            if (o >= len) o = len - 1;
            p++;
        } else {
            out[o++] = *p;
        }
    }
    out[o] = 0;
}

cgm_status cgm_tune_init(cgm_comm *comm) {
    int64_t enabled = 1;
    bool env_enabled = false, env_cache = false;
    cgm_status st = cgm_param_int("COMMGEMM_TUNE", &enabled, &env_enabled);
    if (st != CGM_SUCCESS) return st;
    if (enabled != 0 && enabled != 1)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "environment variable COMMGEMM_TUNE=%lld: expected 1 "
                         "(measure the open choices, the default) or 0 (the "
                         "fixed default rules); set it to 0 or 1 or unset it",
                         (long long)enabled);
    const char *path = cgm_param_string("COMMGEMM_TUNE_CACHE", &env_cache);
    struct cgm_tune_state *ts = calloc(1, sizeof *ts);
    if (!ts)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "cgm_comm_create: no memory for the tuning state");
    ts->enabled = enabled == 1;
    ts->reps = tune_reps;
    ts->runoff = tune_runoff;
    ts->budget_ns = tune_budget;
    ts->slow_key_ns = tune_slow_key;
    if (path && *path) expand_path(path, ts->cache_path, sizeof ts->cache_path);
    CGM_INFO(CGM_SUB_INIT | CGM_SUB_TUNE, "COMMGEMM_TUNE=%d from %s",
             ts->enabled, env_enabled ? "environment" : "default");
    CGM_INFO(CGM_SUB_INIT | CGM_SUB_TUNE, "COMMGEMM_TUNE_CACHE=%s",
             ts->cache_path[0] ? ts->cache_path : "(unset: memory only)");
    comm->tune = ts;
    return CGM_SUCCESS;
}

void cgm_tune_destroy(cgm_comm *comm) {
    if (!comm || !comm->tune) return;
    tune_disk_free(&comm->tune->disk);
    free(comm->tune);
    comm->tune = NULL;
}

/* ------------------------------------------------------------------ keys */

int tune_key_local_word(const tune_key *key) {
    return key->w[TUNE_KEY_OP] == CGM_OP_ALL_GATHER_GEMM ? TUNE_KEY_N
                                                         : TUNE_KEY_K;
}

static void make_key(const cgm_comm *comm, const cgm_call *c, tune_key *k) {
    memset(k, 0, sizeof *k);
    k->w[TUNE_KEY_OP] = c->op;
    k->w[TUNE_KEY_BACKEND] = c->backend;
    k->w[TUNE_KEY_IN] = c->in_dtype;
    k->w[TUNE_KEY_OUT] = c->out_dtype;
    k->w[TUNE_KEY_LAYOUT] = c->layout;
    k->w[TUNE_KEY_P] = comm->nranks;
    k->w[TUNE_KEY_M] = c->m;
    k->w[TUNE_KEY_K] = c->k;
    k->w[TUNE_KEY_N] = c->n;
    k->w[TUNE_KEY_BIAS] = c->has_bias;
    k->w[TUNE_KEY_PARTIAL] = c->partial_dtype;
    k->w[TUNE_KEY_EPILOGUE] = c->epilogue;
}

static uint64_t hash_words(const int64_t *w, int n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the words */
    for (int i = 0; i < n; i++) {
        uint64_t v = (uint64_t)w[i];
        for (int b = 0; b < 8; b++) {
            h ^= (v >> (8 * b)) & 0xff;
            h *= 1099511628211ull;
        }
    }
    return h;
}

static uint64_t hash_text(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ull;
    }
    return h;
}

void tune_key_describe(const tune_key *k, char *buf, size_t len) {
    cgm_epilogue e = (cgm_epilogue)k->w[TUNE_KEY_EPILOGUE];
    snprintf(buf, len, "%s %s %s->%s %s P=%lld m=%lld k=%lld n=%lld bias=%lld partial=%s%s%s",
             cgm_op_name((cgm_op)k->w[TUNE_KEY_OP]),
             cgm_backend_name((cgm_backend)k->w[TUNE_KEY_BACKEND]),
             cgm_dtype_name((cgm_dtype)k->w[TUNE_KEY_IN]),
             cgm_dtype_name((cgm_dtype)k->w[TUNE_KEY_OUT]),
             cgm_layout_name((cgm_layout)k->w[TUNE_KEY_LAYOUT]),
             (long long)k->w[TUNE_KEY_P], (long long)k->w[TUNE_KEY_M],
             (long long)k->w[TUNE_KEY_K], (long long)k->w[TUNE_KEY_N],
             (long long)k->w[TUNE_KEY_BIAS], cgm_dtype_name((cgm_dtype)k->w[TUNE_KEY_PARTIAL]),
             e == CGM_EPILOGUE_NONE ? "" : " epilogue=", e == CGM_EPILOGUE_NONE ? "" : cgm_epilogue_name(e));
}

void tune_candidate_describe(cgm_tune_candidate c, char *buf, size_t len) {
    if (c.algo == CGM_ALGO_NO_OVERLAP)
        snprintf(buf, len, "no_overlap");
    else if (c.queues > 0)
        snprintf(buf, len, "%s/%d/q%d", cgm_algo_name(c.algo), c.splits,
                 c.queues);
    else
        snprintf(buf, len, "%s/%d", cgm_algo_name(c.algo), c.splits);
}

/* ----------------------------------------------------- in-memory cache */

static tune_entry *memory_find(const struct cgm_tune_state *ts,
                               const tune_key *key, uint64_t hash) {
    for (int i = 0; i < TUNE_MEMORY_KEYS; i++) {
        tune_entry *e = (tune_entry *)&ts->entries[i];
        if (e->used && e->hash == hash && !memcmp(&e->key, key, sizeof *key))
            return e;
    }
    return NULL;
}

/* Every rank inserts the same keys in the same order, so every rank evicts
 * the same entry and the caches stay in step. */
static void memory_insert(struct cgm_tune_state *ts, const tune_key *key,
                          uint64_t hash, cgm_tune_candidate choice, double us,
                          cgm_tune_source origin) {
    tune_entry *victim = &ts->entries[0];
    for (int i = 0; i < TUNE_MEMORY_KEYS; i++) {
        tune_entry *e = &ts->entries[i];
        if (!e->used) {
            victim = e;
            break;
        }
        if (e->last_use < victim->last_use) victim = e;
    }
    if (!victim->used) ts->stats.entries++;
    victim->used = true;
    victim->hash = hash;
    victim->key = *key;
    victim->choice = choice;
    victim->us = us;
    victim->origin = origin;
    victim->last_use = ++ts->clock;
}

/* ------------------------------------------------------------- helpers */

void tune_apply(struct cgm_tune_state *ts, cgm_call *call,
                  cgm_tune_source source, cgm_tune_candidate choice, double us) {
    call->algo = choice.algo;
    call->splits = choice.splits;
    call->queues = choice.queues;
    ts->last.source = source;
    ts->last.choice = choice;
    ts->last.us = us;
    switch (source) {
    case CGM_TUNE_MEASURED: ts->stats.measured++; break;
    case CGM_TUNE_MEMORY: ts->stats.memory++; break;
    default: ts->stats.disk++; break;
    }
}

void tune_use_default(struct cgm_tune_state *ts, const tune_key *key,
                        const char *why) {
    char k[192];
    ts->last.source = CGM_TUNE_DEFAULT;
    ts->stats.defaults++;
    if (!cgm_log_enabled(CGM_LOG_INFO, CGM_SUB_TUNE)) return;
    tune_key_describe(key, k, sizeof k);
    CGM_INFO(CGM_SUB_TUNE, "tune %s: the backend's default rule (source "
             "default): %s", k, why);
}

/* A key whose decision in memory is the default rule (too slow to measure
 * within the budget): the default rule again, logged at TRACE only. */
static void default_again(struct cgm_tune_state *ts, const tune_key *key) {
    ts->last.source = CGM_TUNE_DEFAULT;
    ts->stats.defaults++;
    if (!cgm_log_enabled(CGM_LOG_TRACE, CGM_SUB_TUNE)) return;
    char k[192];
    tune_key_describe(key, k, sizeof k);
    CGM_TRACE(CGM_SUB_TUNE, "tune %s -> the default rule (source memory: too "
              "slow to measure within the budget)", k);
}

cgm_status tune_exchange(cgm_comm *comm, const cgm_tune_hooks *h,
                           void *state, const int64_t *mine, int words,
                           int64_t **all) {
    *all = malloc(sizeof(int64_t) * (size_t)words * (size_t)comm->nranks);
    if (!*all)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "autotuner: no memory for an exchange of %d words",
                         words);
    cgm_status st = h->allgather(comm, state, mine, words, *all);
    if (st != CGM_SUCCESS) {
        free(*all);
        *all = NULL;
        return cgm_error_context(st, "autotuner: exchanging with the other "
                                 "ranks");
    }
    return CGM_SUCCESS;
}

static void ensure_disk(struct cgm_tune_state *ts, const cgm_tune_hooks *h,
                        const cgm_comm *comm, void *state) {
    if (!ts->cache_path[0] || ts->disk.loaded) return;
    char dev[128] = "unknown";
    if (h->device_name) h->device_name(comm, state, dev, sizeof dev);
    /* One token in the header: keep [A-Za-z0-9._-], others become '_'. */
    for (char *p = dev; *p; p++) {
        char ch = *p;
        bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' ||
                    ch == '_';
        if (!keep) *p = '_';
    }
    snprintf(ts->device, sizeof ts->device, "%s", dev[0] ? dev : "unknown");
    tune_disk_load(&ts->disk, ts->cache_path, ts->device);
    ts->stats.disk_entries = ts->disk.count;
    ts->stats.disk_rejected = ts->disk.rejected;
}

/* ---------------------------------------------------------------- resolve */

enum {
    X1_HIT, /* index of this rank's in-memory decision, -1 none */
    X1_LOCAL,
    X1_NCAND,
    X1_CANDS,
    X1_FILE,
    X1_HAS_DISK,
    X1_WORDS
};

static int candidate_index(const cgm_tune_candidate *cands, int ncand,
                           cgm_tune_candidate c) {
    for (int i = 0; i < ncand; i++)
        if (cands[i].algo == c.algo && cands[i].splits == c.splits &&
            cands[i].queues == c.queues)
            return i;
    return -1;
}

/* Stores a new decision, in place of the key's old one if any. */
void tune_remember(struct cgm_tune_state *ts, tune_entry *old,
                     const tune_key *key, uint64_t hash,
                     cgm_tune_candidate choice, double us,
                     cgm_tune_source origin) {
    if (!old) {
        memory_insert(ts, key, hash, choice, us, origin);
        return;
    }
    old->choice = choice;
    old->us = us;
    old->origin = origin;
    old->last_use = ++ts->clock;
}

int64_t cgm_tune_hold_ns(int64_t warmup_ns, int warmup, int reps) {
    if (warmup <= 0 || warmup_ns <= 0 || reps <= 0) return CGM_TUNE_HOLD_MIN_NS;
    int64_t per_run = warmup_ns / warmup;
    /* 2 * per_run * reps, saturating at the maximum. */
    if (per_run >= CGM_TUNE_HOLD_MAX_NS / 2 / reps) return CGM_TUNE_HOLD_MAX_NS;
    int64_t hold = 2 * per_run * reps;
    return hold < CGM_TUNE_HOLD_MIN_NS ? CGM_TUNE_HOLD_MIN_NS : hold;
}

int cgm_tune_plan_candidates(int64_t m, int nranks, int min_piece_rows,
                             cgm_tune_candidate *out) {
    static const int split_counts[] = {1, 2, 4}, ring_counts[] = {1, 2};
    int n = 0;
    int64_t shard = cgm_ceil_div(m > 0 ? m : 1, nranks);
    for (int i = 0; i < 3; i++)
        if (i == 0 || shard >= (int64_t)split_counts[i] * min_piece_rows)
            out[n++] = (cgm_tune_candidate){CGM_ALGO_SPLIT_PIPELINED,
                                            split_counts[i], 0};
    for (int i = 0; i < 2 && nranks > 2; i++)
        if (i == 0 || shard >= (int64_t)ring_counts[i] * min_piece_rows)
            out[n++] = (cgm_tune_candidate){CGM_ALGO_RING, ring_counts[i],
                                            0};
    out[n++] = (cgm_tune_candidate){CGM_ALGO_NO_OVERLAP, 1, 0};
    return n;
}

/* The cache files' decision for `canonical`, applied (*applied) when every
 * rank proposes the same candidate; one exchange. */
static cgm_status from_disk(cgm_comm *comm, const cgm_tune_hooks *h, void *state, cgm_call *call,
                            tune_entry *hit, const tune_key *key, uint64_t hash, const tune_key *canonical,
                            const cgm_tune_candidate *cands, int ncand, bool *applied) {
    struct cgm_tune_state *ts = comm->tune;
    int64_t proposal = -1, *all = NULL;
    const tune_disk_entry *d = tune_disk_find(&ts->disk, canonical);
    if (d) proposal = candidate_index(cands, ncand, d->choice);
    cgm_status st = tune_exchange(comm, h, state, &proposal, 1, &all);
    if (st != CGM_SUCCESS) return st;
    bool agreed = proposal >= 0;
    for (int r = 0; r < comm->nranks; r++) agreed &= all[r] == proposal;
    free(all);
    char k[192], c[32];
    tune_key_describe(canonical, k, sizeof k);
    if (agreed) {
        tune_remember(ts, hit, key, hash, cands[proposal], d->us, CGM_TUNE_DISK);
        tune_apply(ts, call, CGM_TUNE_DISK, cands[proposal], d->us);
        tune_candidate_describe(cands[proposal], c, sizeof c);
        CGM_INFO(CGM_SUB_TUNE, "tune %s -> %s %.1fus (source disk: %s, "
                 "the same on every rank)", k, c, d->us, ts->cache_path);
        *applied = true;
        return CGM_SUCCESS;
    }
    CGM_INFO(CGM_SUB_TUNE, "tune %s: the ranks' cache files %s; %s", k,
             proposal >= 0 ? "disagree (or only some have this key)"
                           : "do not all have this key",
             call->accumulate ? "not measured (accumulate)" : "measuring");
    return CGM_SUCCESS;
}

cgm_status cgm_tune_resolve(cgm_comm *comm, const cgm_backend_vtable *vt,
                            void *state, cgm_call *call) {
    struct cgm_tune_state *ts = comm->tune;
    if (!ts) return CGM_SUCCESS;
    memset(&ts->last, 0, sizeof ts->last);
    const cgm_tune_hooks *h = vt->tune;
    if (!ts->enabled || !h || call->op == CGM_OP_BULK || !call->has_gemm ||
        call->algo != CGM_ALGO_AUTO || call->splits != 0 || comm->nranks < 2)
        return CGM_SUCCESS;
    cgm_tune_candidate cands[CGM_TUNE_MAX_CANDIDATES];
    int ncand = h->candidates(comm, call, cands);
    if (ncand > CGM_TUNE_MAX_CANDIDATES) ncand = CGM_TUNE_MAX_CANDIDATES;
    if (ncand < 2) return CGM_SUCCESS;

    tune_key key;
    make_key(comm, call, &key);
    uint64_t hash = hash_words(key.w, TUNE_KEY_WORDS);
    tune_entry *hit = memory_find(ts, &key, hash);
    /* Backends that check every call (host) get that check here, with the
     * memory decision in the same exchange: a hit is then used only when
     * every rank hit the same one. Others use a hit without exchanging. */
    bool every = h->agree_every_call && comm->config.check_agreement;
    if (hit && !every) {
        hit->last_use = ++ts->clock;
        if (hit->origin == CGM_TUNE_DEFAULT) {
            default_again(ts, &key);
            return CGM_SUCCESS;
        }
        tune_apply(ts, call, CGM_TUNE_MEMORY, hit->choice, hit->us);
        if (cgm_log_enabled(CGM_LOG_TRACE, CGM_SUB_TUNE)) {
            char k[192], c[32];
            tune_key_describe(&key, k, sizeof k);
            tune_candidate_describe(hit->choice, c, sizeof c);
            CGM_TRACE(CGM_SUB_TUNE, "tune %s -> %s (source memory)", k, c);
        }
        return CGM_SUCCESS;
    }
    if (h->capturing && h->capturing(call)) {
        tune_use_default(ts, &key, "the call is inside CUDA graph capture, where "
                    "nothing is measured or exchanged, and no eager call of "
                    "this key was tuned first; make one eager call of this "
                    "shape before capturing to capture the tuned choice");
        return CGM_SUCCESS;
    }

    /* 1: the call's signature and what every rank brings. */
    ensure_disk(ts, h, comm, state);
    int64_t cand_words[3 * CGM_TUNE_MAX_CANDIDATES];
    for (int i = 0; i < ncand; i++) {
        cand_words[3 * i] = cands[i].algo;
        cand_words[3 * i + 1] = cands[i].splits;
        cand_words[3 * i + 2] = cands[i].queues;
    }
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    int64_t mine[X1_WORDS];
    int local = tune_key_local_word(&key);
    mine[X1_HIT] = !hit ? -1
                   : hit->origin == CGM_TUNE_DEFAULT
                       ? TUNE_HIT_DEFAULT
                       : candidate_index(cands, ncand, hit->choice);
    mine[X1_LOCAL] = key.w[local];
    mine[X1_NCAND] = ncand;
    mine[X1_CANDS] = (int64_t)hash_words(cand_words, 3 * ncand);
    mine[X1_FILE] = ts->disk.usable ? (int64_t)(hash_text(host) ^
                                                (hash_text(ts->cache_path) * 31))
                                    : 0;
    mine[X1_HAS_DISK] = ts->disk.count > 0;
    int64_t *all = malloc(sizeof(int64_t) * X1_WORDS * (size_t)comm->nranks);
    if (!all)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "autotuner: no memory for "
                         "an exchange of %d ranks", comm->nranks);
    cgm_status st = h->agree(comm, state, call, mine, X1_WORDS, all);
    if (st != CGM_SUCCESS) {
        free(all);
        return st; /* a MISMATCH names the rank and field already */
    }
    call->agreed = every;
    tune_key canonical = key;
    bool same_candidates = true, any_disk = false, all_hit = true;
    bool writer = mine[X1_FILE] != 0;
    for (int r = 0; r < comm->nranks; r++) {
        const int64_t *a = all + (size_t)r * X1_WORDS;
        if (a[X1_LOCAL] > canonical.w[local]) canonical.w[local] = a[X1_LOCAL];
        same_candidates &= a[X1_NCAND] == ncand && a[X1_CANDS] == mine[X1_CANDS];
        any_disk |= a[X1_HAS_DISK] != 0;
        all_hit &= a[X1_HIT] != -1 && a[X1_HIT] == mine[X1_HIT];
        if (r < comm->rank && a[X1_FILE] == mine[X1_FILE]) writer = false;
    }
    free(all);
    if (!same_candidates) {
        tune_use_default(ts, &canonical, "the ranks' candidate lists differ (a "
                    "rank with another library build?); every rank uses the "
                    "default rule");
        return CGM_SUCCESS;
    }
    if (all_hit) {
        hit->last_use = ++ts->clock;
        if (hit->origin == CGM_TUNE_DEFAULT) default_again(ts, &key);
        else tune_apply(ts, call, CGM_TUNE_MEMORY, hit->choice, hit->us);
        return CGM_SUCCESS;
    }
    if (hit) {
        char k[192];
        tune_key_describe(&canonical, k, sizeof k);
        CGM_INFO(CGM_SUB_TUNE, "tune %s: not every rank has this rank's "
                 "decision in memory (a rank with another history?): "
                 "deciding again", k);
    }

    /* 2: a decision from the cache files, if every rank has the same. */
    if (any_disk) {
        bool applied = false;
        st = from_disk(comm, h, state, call, hit, &key, hash, &canonical, cands, ncand, &applied);
        if (st != CGM_SUCCESS || applied) return st;
    }

    /* Measuring would add into the caller's Y several times. */
    if (call->accumulate) {
        tune_use_default(ts, &canonical, "an accumulate call is never measured "
                    "(each run would add into Y again) and no decision of "
                    "this key is known yet; a call of this key without "
                    "accumulate will tune it");
        return CGM_SUCCESS;
    }

    /* 3: measure, within the budget. */
    return tune_search(comm, vt, state, call, &key, hash, hit, &canonical,
                       cands, ncand, writer);
}

/* ----------------------------------------------------------- diagnostics */

void cgm_tune_last(const cgm_comm *comm, cgm_tune_decision *out) {
    memset(out, 0, sizeof *out);
    if (comm && comm->tune) *out = comm->tune->last;
}

void cgm_tune_get_stats(const cgm_comm *comm, cgm_tune_stats *out) {
    memset(out, 0, sizeof *out);
    if (comm && comm->tune) *out = comm->tune->stats;
}

bool cgm_tune_lookup(const cgm_comm *comm, const cgm_call *call,
                     cgm_tune_decision *out) {
    memset(out, 0, sizeof *out);
    if (!comm || !comm->tune) return false;
    tune_key key;
    make_key(comm, call, &key);
    const tune_entry *e =
        memory_find(comm->tune, &key, hash_words(key.w, TUNE_KEY_WORDS));
    if (!e) return false;
    out->source = e->origin;
    out->choice = e->choice;
    out->us = e->us;
    return true;
}
