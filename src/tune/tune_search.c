/* The autotuner's measured search (step 3 of cgm_tune_resolve, tune.c): a
 * pilot run of the first candidate, whose slowest rank's time plans how
 * many runs per candidate fit TUNE_BUDGET_NS; every candidate timed in two
 * passes; the slowest rank's medians decide; a runoff of the two fastest
 * when they are close and the budget has room. Every quantity that shapes
 * the search comes from exchanged times, so the ranks run it in lockstep.
 * An op too slow for even one run of each candidate keeps the default
 * rule, remembered for its key. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tune/tune_internal.h"

/* A runoff times each of the two about this long. */
#define TUNE_RUNOFF_NS 2000000

static int compare_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int tune_runs_per_candidate(int reps) {
    return reps >= 2 ? 2 + reps : 1 + reps;
}

int tune_plan_reps(int64_t pilot_ns, int ncand, int reps, int64_t budget_ns) {
    int64_t per = pilot_ns > 0 ? pilot_ns : 1;
    for (int r = reps; r >= 1; r--) {
        /* In runs of the op, against the budget in runs (no overflow). */
        int64_t runs = 2 + (int64_t)ncand * tune_runs_per_candidate(r);
        if (runs <= budget_ns / per) return r;
    }
    return 0;
}

int tune_plan_runoff(int64_t per_ns, int wanted, int min_runs, int64_t left_ns) {
    int64_t per = per_ns > 0 ? per_ns : 1;
    int64_t fit = left_ns > 0 ? left_ns / per / 2 - 1 : 0; /* timed, with a warm-up each */
    int n = wanted < fit ? wanted : (int)fit;
    return n >= min_runs && n >= 1 ? n : 0;
}

/* Measures every candidate; times[i] = this rank's median of candidate i.
 * Two passes, as the bench times a baseline and a candidate: the first in
 * list order with reps / 2 timed runs each, the second in reverse order with
 * the rest (one pass when reps = 1), each run after one warm-up. A candidate
 * measured first, on a device not yet warm, is then also measured last, and
 * a clock that drifts during the search weighs on every candidate alike. */
static cgm_status measure_all(cgm_comm *comm, const cgm_backend_vtable *vt,
                              void *state, const cgm_call *call,
                              const cgm_tune_candidate *cands, int ncand,
                              int reps, int64_t *times, uint64_t *runs) {
    int64_t ns[CGM_TUNE_MAX_CANDIDATES][TUNE_MAX_REPS]; /* 11 KiB */
    int first = reps >= 2 ? reps / 2 : reps;
    cgm_status st = CGM_SUCCESS;
    for (int pass = 0; pass < 2 && st == CGM_SUCCESS; pass++) {
        int n = pass == 0 ? first : reps - first;
        if (n == 0) break;
        for (int j = 0; j < ncand && st == CGM_SUCCESS; j++) {
            int i = pass == 0 ? j : ncand - 1 - j;
            cgm_call trial = *call;
            trial.algo = cands[i].algo;
            trial.splits = cands[i].splits;
            trial.queues = cands[i].queues;
            st = vt->tune->measure(comm, state, &trial, 1, n,
                                   ns[i] + (pass == 0 ? 0 : first));
            *runs += (uint64_t)(1 + n);
            if (st != CGM_SUCCESS) {
                char c[32];
                tune_candidate_describe(cands[i], c, sizeof c);
                st = cgm_error_context(st, "autotuner: measuring candidate "
                                       "%s of %s", c, cgm_op_name(call->op));
            }
        }
    }
    for (int i = 0; i < ncand && st == CGM_SUCCESS; i++) {
        qsort(ns[i], (size_t)reps, sizeof ns[i][0], compare_i64);
        /* The median; of an even count, the mean of the middle two. */
        times[i] = reps % 2 ? ns[i][reps / 2]
                            : (ns[i][reps / 2 - 1] + ns[i][reps / 2]) / 2;
    }
    return st;
}

static void log_measured(const tune_key *canonical,
                         const cgm_tune_candidate *cands, int ncand,
                         const int64_t *slowest, int best, int reps,
                         int64_t elapsed_ns) {
    if (!cgm_log_enabled(CGM_LOG_INFO, CGM_SUB_TUNE)) return;
    char k[192], list[640] = "", c[32];
    tune_key_describe(canonical, k, sizeof k);
    for (int i = 0; i < ncand; i++) {
        size_t len = strlen(list);
        tune_candidate_describe(cands[i], c, sizeof c);
        snprintf(list + len, sizeof list - len, "%s%s %.1fus", i ? ", " : "",
                 c, (double)slowest[i] / 1e3);
    }
    tune_candidate_describe(cands[best], c, sizeof c);
    CGM_INFO(CGM_SUB_TUNE, "tune %s: %s -> %s (source measured: %d "
             "candidates x %d runs, slowest rank's median, %.1f ms)", k, list,
             c, ncand, tune_runs_per_candidate(reps),
             (double)elapsed_ns / 1e6);
}

/* Every rank's times of the ncand candidates exchanged: slowest[i] is the
 * slowest rank's time of candidate i, the same on every rank. */
static cgm_status slowest_times(cgm_comm *comm, const cgm_tune_hooks *h,
                                void *state, const int64_t *times, int ncand,
                                int64_t *slowest) {
    int64_t *all = NULL;
    cgm_status st = tune_exchange(comm, h, state, times, ncand, &all);
    if (st != CGM_SUCCESS) return st;
    for (int i = 0; i < ncand; i++) {
        slowest[i] = 0;
        for (int r = 0; r < comm->nranks; r++)
            if (all[(size_t)r * ncand + i] > slowest[i])
                slowest[i] = all[(size_t)r * ncand + i];
    }
    free(all);
    return CGM_SUCCESS;
}

/* The fastest of t[0..n) other than `skip` (-1: none skipped), the
 * earlier on ties; -1 when there is none. */
static int fastest(const int64_t *t, int n, int skip) {
    int best = -1;
    for (int i = 0; i < n; i++)
        if (i != skip && (best < 0 || t[i] < t[best])) best = i;
    return best;
}

/* The runoff's timed runs per candidate: enough for about TUNE_RUNOFF_NS
 * of the winner (a few runs of a ~50 us op cannot tell candidates some
 * percent apart), at least 2 * reps, at most TUNE_MAX_REPS. */
static int runoff_runs_wanted(int64_t winner_ns, int reps) {
    int64_t per = winner_ns > 0 ? winner_ns : 1;
    int64_t n = (TUNE_RUNOFF_NS + per - 1) / per;
    if (n < 2 * (int64_t)reps) n = 2 * (int64_t)reps;
    return n > TUNE_MAX_REPS ? TUNE_MAX_REPS : (int)n;
}

/* The runoff: the fastest candidate (*best) and the runner-up timed
 * again, alternating (measure_all's two passes), n timed runs each. The
 * run count comes from exchanged times, so every rank runs the same. The
 * faster of the runoff (the first-round winner on a tie) becomes *best,
 * its time *us. */
static cgm_status run_off(cgm_comm *comm, const cgm_backend_vtable *vt,
                          const cgm_tune_hooks *h, void *state,
                          const cgm_call *trial, const tune_key *canonical,
                          const cgm_tune_candidate *cands, int n, int *best,
                          int second, double *us) {
    struct cgm_tune_state *ts = comm->tune;
    cgm_tune_candidate pair[2] = {cands[*best], cands[second]};
    int64_t t0 = cgm_now_ns(), times[2], slow[2];
    cgm_status st = measure_all(comm, vt, state, trial, pair, 2, n, times,
                                &ts->stats.runoff_runs);
    if (st != CGM_SUCCESS) return st;
    st = slowest_times(comm, h, state, times, 2, slow);
    if (st != CGM_SUCCESS) return st;
    int w = slow[1] < slow[0] ? 1 : 0;
    ts->stats.runoffs++;
    if (cgm_log_enabled(CGM_LOG_INFO, CGM_SUB_TUNE)) {
        char k[192], a[32], b[32];
        tune_key_describe(canonical, k, sizeof k);
        tune_candidate_describe(pair[0], a, sizeof a);
        tune_candidate_describe(pair[1], b, sizeof b);
        CGM_INFO(CGM_SUB_TUNE, "tune %s: runoff %s %.1fus vs %s %.1fus (2 "
                 "candidates x %d runs, slowest rank's median, %.1f ms) -> %s",
                 k, a, (double)slow[0] / 1e3, b, (double)slow[1] / 1e3,
                 tune_runs_per_candidate(n),
                 (double)(cgm_now_ns() - t0) / 1e6, w ? b : a);
    }
    if (w) *best = second;
    *us = (double)slow[w] / 1e3;
    return CGM_SUCCESS;
}

/* The pilot: one warm-up and one timed run of the first candidate; *ns is
 * the slowest rank's time, the same on every rank, from which every rank
 * plans the same search. */
static cgm_status pilot(cgm_comm *comm, const cgm_tune_hooks *h, void *state,
                        const cgm_call *trial, cgm_tune_candidate first,
                        int64_t *ns) {
    cgm_call run = *trial;
    int64_t mine = 0;
    run.algo = first.algo;
    run.splits = first.splits;
    run.queues = first.queues;
    cgm_status st = h->measure(comm, state, &run, 1, 1, &mine);
    comm->tune->stats.pilot_runs += 2;
    if (st != CGM_SUCCESS) {
        char c[32];
        tune_candidate_describe(first, c, sizeof c);
        return cgm_error_context(st, "autotuner: the pilot run of candidate %s "
                                 "of %s", c, cgm_op_name(trial->op));
    }
    return slowest_times(comm, h, state, &mine, 1, ns);
}

/* Tuning one key took long: WARN on rank 0 (INFO on the others, whose
 * line would be the same), naming the key and the time. */
static void report_slow_key(const cgm_comm *comm, const tune_key *canonical,
                            int64_t t0, const char *what, bool measured) {
    int64_t took = cgm_now_ns() - t0;
    cgm_log_level level = comm->rank == 0 ? CGM_LOG_WARN : CGM_LOG_INFO;
    if (took <= comm->tune->slow_key_ns || !cgm_log_enabled(level, CGM_SUB_TUNE))
        return;
    char k[192];
    tune_key_describe(canonical, k, sizeof k);
    CGM_LOG(level, CGM_SUB_TUNE, "tune %s: tuning this key took %.2f s (%s); %s"
            "options.algo and options.splits (or COMMGEMM_ALGO/COMMGEMM_SPLITS, "
            "or COMMGEMM_TUNE=0) skip the tuner", k, (double)took / 1e9, what,
            measured ? "COMMGEMM_TUNE_CACHE keeps the decision for the next run; "
                     : "");
}

/* The op is too slow for even one run of each candidate within the
 * budget: the default rule, remembered for the key so that later calls
 * do not pilot again. */
static void too_slow(cgm_comm *comm, const tune_key *key, uint64_t hash,
                     tune_entry *hit, const tune_key *canonical,
                     const cgm_tune_candidate *cands, int ncand, int64_t pilot_ns,
                     int64_t t0) {
    struct cgm_tune_state *ts = comm->tune;
    char why[320], c[32];
    tune_candidate_describe(cands[0], c, sizeof c);
    snprintf(why, sizeof why, "one run of %s takes %.1f ms (slowest rank), so "
             "even a warm-up and a timed run of each of %d candidates would take "
             "about %.1f s, over the budget of %.2f s per key; the key keeps the "
             "default rule in this comm", c,
             (double)pilot_ns / 1e6, ncand,
             (double)pilot_ns * ncand * tune_runs_per_candidate(1) / 1e9,
             (double)ts->budget_ns / 1e9);
    tune_remember(ts, hit, key, hash, cands[0], (double)pilot_ns / 1e3,
             CGM_TUNE_DEFAULT);
    ts->stats.budget_skipped++;
    tune_use_default(ts, canonical, why);
    snprintf(why, sizeof why, "a warm-up and a timed run of %s, the timed one "
             "%.1f ms on the slowest rank, then the default rule: too slow to time "
             "%d candidates within the %.2f s budget", c, (double)pilot_ns / 1e6, ncand,
             (double)ts->budget_ns / 1e9);
    report_slow_key(comm, canonical, t0, why, false);
}

cgm_status tune_search(cgm_comm *comm, const cgm_backend_vtable *vt,
                         void *state, cgm_call *call, const tune_key *key,
                         uint64_t hash, tune_entry *hit,
                         const tune_key *canonical,
                         const cgm_tune_candidate *cands, int ncand,
                         bool writer) {
    struct cgm_tune_state *ts = comm->tune;
    const cgm_tune_hooks *h = vt->tune;
    int64_t t0 = cgm_now_ns(), pilot_ns = 0;
    cgm_call trial = *call;
    trial.agreed = false; /* each candidate's own signature is checked */
    cgm_status st = pilot(comm, h, state, &trial, cands[0], &pilot_ns);
    if (st != CGM_SUCCESS) return st;
    int reps = tune_plan_reps(pilot_ns, ncand, ts->reps, ts->budget_ns);
    if (reps == 0) {
        too_slow(comm, key, hash, hit, canonical, cands, ncand, pilot_ns, t0);
        return CGM_SUCCESS;
    }
    bool reduced = reps < ts->reps;
    int64_t times[CGM_TUNE_MAX_CANDIDATES], slowest[CGM_TUNE_MAX_CANDIDATES];
    st = measure_all(comm, vt, state, &trial, cands, ncand, reps, times,
                     &ts->stats.runs);
    if (st != CGM_SUCCESS) return st;
    st = slowest_times(comm, h, state, times, ncand, slowest);
    if (st != CGM_SUCCESS) return st;
    int best = fastest(slowest, ncand, -1);
    log_measured(canonical, cands, ncand, slowest, best, reps,
                 cgm_now_ns() - t0);
    double us = (double)slowest[best] / 1e3;
    int second = fastest(slowest, ncand, best);
    if (ts->runoff > 0 && second >= 0 &&
        slowest[second] * 100 <= slowest[best] * (int64_t)(100 + ts->runoff)) {
        /* What the search cost so far, in exchanged times. */
        int64_t spent = 2 * pilot_ns;
        for (int i = 0; i < ncand; i++)
            spent += slowest[i] * tune_runs_per_candidate(reps);
        int n = tune_plan_runoff(slowest[second], runoff_runs_wanted(slowest[best], reps),
                                 2 * reps, ts->budget_ns - spent);
        if (n > 0)
            st = run_off(comm, vt, h, state, &trial, canonical, cands, n, &best,
                         second, &us);
        else
            reduced = true;
        if (st != CGM_SUCCESS) return st;
    }
    ts->stats.budget_reduced += reduced;
    tune_remember(ts, hit, key, hash, cands[best], us, CGM_TUNE_MEASURED);
    tune_apply(ts, call, CGM_TUNE_MEASURED, cands[best], us);
    if (writer) {
        tune_disk_append(&ts->disk, ts->device, canonical, cands[best], us);
        ts->stats.disk_appended = ts->disk.appended;
    }
    char what[96];
    snprintf(what, sizeof what, "%d candidates x %d runs%s", ncand,
             tune_runs_per_candidate(reps),
             reduced ? ", cut to fit the budget" : "");
    report_slow_key(comm, canonical, t0, what, true);
    return CGM_SUCCESS;
}

