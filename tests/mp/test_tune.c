/* The autotuner on the host backend: open calls are measured once per key
 * and every rank applies the same candidate; explicit choices, COMMGEMM_TUNE=0
 * and accumulate calls are not measured; the cache file round-trips, its
 * bad lines are skipped with a warning, and ranks whose files differ tune
 * again instead of hanging. Every result is checked. */
#include <errno.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>

#include "core/core.h"
#include "mp_common.h"
#include "tune/tune.h"
#include "tune/tune_internal.h"

enum { N = 6, K = 5 };

typedef enum { AG = 0, RS = 1, AR = 2 } op_kind;

/* Per-case scratch directory, shared by the ranks (forked after it). */
static char dir[256];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/commgemm-tune-test-XXXXXX");
    if (!mkdtemp(dir)) TEST_FAIL("mkdtemp: %s", strerror(errno));
}

static void remove_dir(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void path_in_dir(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", dir, name);
}

/* One op with fp32 data, checked against a reference every rank computes
 * from the seeds. AG: W and n per rank; RS/AR: X, W per rank. */
static void run_op(cgm_comm *comm, int rank, int P, op_kind op, int64_t m,
                   const cgm_op_options *opt, bool accumulate, uint64_t seed) {
    cgm_op_options o = opt ? *opt : (cgm_op_options)CGM_OP_OPTIONS_INIT;
    o.accumulate = accumulate;
    int64_t off = cgm_shard_offset(m, rank, P), mr = cgm_shard_rows(m, rank, P);
    int64_t y_rows = op == RS ? mr : m;
    cgm_matrix x = op == AG ? mp_logical(CGM_DTYPE_FP32, false, mr, K, off, seed, 0)
                            : mp_logical(CGM_DTYPE_FP32, false, m, K, 0,
                                         seed + 1 + (uint64_t)rank, 0);
    cgm_matrix w = mp_logical(CGM_DTYPE_FP32, false, N, K, 0,
                              seed + 100 + (uint64_t)rank, 0);
    cgm_matrix y = test_alloc(CGM_DTYPE_FP32, y_rows, N, 0);
    if (accumulate)
        mp_fill_logical(&y, false, y_rows, N, 0, seed + 300 + (uint64_t)rank);
    cgm_status st;
    if (op == AG)
        st = cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, &o, NULL);
    else if (op == RS)
        st = cgm_gemm_reduce_scatter(comm, &x, &w, NULL, &y, &o, NULL);
    else
        st = cgm_gemm_all_reduce(comm, &x, &w, NULL, &y, &o, NULL);
    MP_CHECK_OK(st);

    double *ref = calloc((size_t)(m * N + 1), sizeof(double));
    double *part = calloc((size_t)(m * N + 1), sizeof(double));
    if (!ref || !part) TEST_FAIL("out of memory");
    for (int q = 0; q < (op == AG ? 1 : P); q++) {
        cgm_matrix xq = op == AG ? mp_logical(CGM_DTYPE_FP32, false, m, K, 0, seed, 0)
                                 : mp_logical(CGM_DTYPE_FP32, false, m, K, 0,
                                              seed + 1 + (uint64_t)q, 0);
        cgm_matrix wq = mp_logical(CGM_DTYPE_FP32, false, N, K, 0,
                                   seed + 100 + (uint64_t)(op == AG ? rank : q), 0);
        test_ref_gemm(CGM_LAYOUT_TN, &xq, &wq, m, N, K, part);
        for (int64_t i = 0; i < m * N; i++) ref[i] += part[i];
        test_free(&xq);
        test_free(&wq);
    }
    double *mine = op == RS ? ref + off * N : ref;
    if (accumulate)
        for (int64_t i = 0; i < y_rows; i++)
            for (int64_t j = 0; j < N; j++)
                mine[i * N + j] += test_value(seed + 300 + (uint64_t)rank, i * N + j);
    int64_t wrong = test_compare(&y, mine, y_rows, N,
                                 test_tolerance(CGM_DTYPE_FP32, CGM_DTYPE_FP32, K * P),
                                 mp_context);
    if (wrong) TEST_FAIL("[%s] %lld elements wrong", mp_context, (long long)wrong);
    free(ref);
    free(part);
    test_free(&x);
    test_free(&w);
    test_free(&y);
}

static cgm_tune_decision last(const cgm_comm *comm) {
    cgm_tune_decision d;
    cgm_tune_last(comm, &d);
    return d;
}

static cgm_tune_stats stats(const cgm_comm *comm) {
    cgm_tune_stats s;
    cgm_tune_get_stats(comm, &s);
    return s;
}

#define CHECK_SOURCE(comm, want)                                             \
    do {                                                                     \
        cgm_tune_decision d_ = last(comm);                                   \
        if (d_.source != (want))                                             \
            TEST_FAIL("[%s] decision source %s, expected %s", mp_context,    \
                      cgm_tune_source_name(d_.source),                       \
                      cgm_tune_source_name(want));                           \
    } while (0)

/* Each rank records its decisions in dir/decisions.<rank>; the case
 * compares the files of all ranks afterwards. */
static void record(const cgm_comm *comm, int rank, const char *what) {
    char path[300];
    snprintf(path, sizeof path, "%s/decisions.%d", dir, rank);
    FILE *f = fopen(path, "a");
    if (!f) TEST_FAIL("fopen %s: %s", path, strerror(errno));
    cgm_tune_decision d = last(comm);
    fprintf(f, "%s %s %s %d\n", what, cgm_tune_source_name(d.source),
            cgm_algo_name(d.choice.algo), d.choice.splits);
    fclose(f);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 16);
    if (buf) buf[fread(buf, 1, (1 << 16) - 1, f)] = 0;
    fclose(f);
    return buf;
}

static void check_same_decisions(int P) {
    char path[300];
    snprintf(path, sizeof path, "%s/decisions.0", dir);
    char *first = slurp(path);
    if (!first || !*first) TEST_FAIL("rank 0 recorded no decisions");
    for (int r = 1; r < P; r++) {
        snprintf(path, sizeof path, "%s/decisions.%d", dir, r);
        char *other = slurp(path);
        if (!other || strcmp(first, other))
            TEST_FAIL("rank %d decided\n%s\nrank 0 decided\n%s", r,
                      other ? other : "(nothing)", first);
        free(other);
    }
    free(first);
}

static cgm_comm *make_comm(int rank, int P, const char *rdv) {
    cgm_config cfg = mp_config(8000);
    return test_host_comm(rank, P, rdv, &cfg);
}

static void set_cache(const char *name) {
    char path[300];
    path_in_dir(path, sizeof path, name);
    setenv("COMMGEMM_TUNE_CACHE", path, 1);
}

/* ---- measured on first use, memory after, the same on every rank ---- */

static int rank_measured(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_comm *comm = make_comm(rank, P, rdv);
    const op_kind ops[] = {AG, RS, AR};
    const int64_t shapes[] = {64, 200, 7};
    for (int o = 0; o < 3; o++)
        for (int s = 0; s < 3; s++) {
            snprintf(mp_context, sizeof mp_context, "rank %d/%d op %d m=%lld",
                     rank, P, o, (long long)shapes[s]);
            run_op(comm, rank, P, ops[o], shapes[s], NULL, false, 10 + o);
            CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
            record(comm, rank, mp_context + 9);
            cgm_tune_decision first = last(comm);
            CHECK(first.us > 0);
            run_op(comm, rank, P, ops[o], shapes[s], NULL, false, 20 + o);
            CHECK_SOURCE(comm, CGM_TUNE_MEMORY);
            CHECK_INT_EQ(last(comm).choice.algo, first.choice.algo);
            CHECK_INT_EQ(last(comm).choice.splits, first.choice.splits);
        }
    cgm_tune_stats s = stats(comm);
    CHECK_INT_EQ(s.measured, 9);
    CHECK_INT_EQ(s.memory, 9);
    CHECK_INT_EQ(s.entries, 9);
    /* Every candidate: one warm-up and 2 timed runs in list order, then one
     * warm-up and 2 timed runs in reverse order (TUNE_REPS 4). */
    uint64_t expected = 0;
    cgm_tune_candidate c[CGM_TUNE_MAX_CANDIDATES];
    for (int s = 0; s < 3; s++)
        expected += 3 * 6 * (uint64_t)cgm_tune_plan_candidates(
                                shapes[s], P, 16 /* host_backend.c's HOST_TUNE_MIN_PIECE_ROWS */, c);
    CHECK_INT_EQ(s.runs, expected);
    /* And one pilot (a warm-up and a timed run) per key; these small
     * shapes fit the budget whole. */
    CHECK_INT_EQ(s.pilot_runs, 9 * 2);
    CHECK_INT_EQ(s.budget_reduced + s.budget_skipped, 0);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_measured(const void *param) {
    int P = *(const int *)param;
    make_dir();
    CHECK_INT_EQ(test_run_ranks(P, rank_measured, NULL, 30, NULL), 0);
    check_same_decisions(P);
    remove_dir();
    mp_check_no_shm_leftovers();
}

/* ---- many tuned calls with empty shards (m < P) ----
 * The real call after a tuned decision skips its own agreement exchange,
 * and an op with empty shards moves nothing, so ranks drift apart between
 * exchanges; the exchange slots must still never be rewritten while a
 * slower rank reads them (they once were: MISMATCH "found it at op #n+2"
 * under load). Three ranks on CI's two cores interleave enough. */

static int rank_empty_shards(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_comm *comm = make_comm(rank, P, rdv);
    for (int i = 0; i < 120; i++) {
        int64_t m = i % P; /* 0 .. P-1 rows: some ranks hold none */
        op_kind op = (op_kind)(i % 3);
        snprintf(mp_context, sizeof mp_context, "rank %d/%d call %d op %d m=%lld",
                 rank, P, i, (int)op, (long long)m);
        run_op(comm, rank, P, op, m, NULL, false, 40 + (uint64_t)i);
    }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_empty_shards(const void *param) {
    (void)param;
    make_dir();
    CHECK_INT_EQ(test_run_ranks(3, rank_empty_shards, NULL, 60, NULL), 0);
    remove_dir();
    mp_check_no_shm_leftovers();
}

/* ---- explicit choices bypass the tuner ---- */

static int rank_explicit(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_comm *comm = make_comm(rank, P, rdv);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    snprintf(mp_context, sizeof mp_context, "rank %d explicit algo", rank);
    o.algo = CGM_ALGO_RING;
    run_op(comm, rank, P, AG, 64, &o, false, 1);
    CHECK_SOURCE(comm, CGM_TUNE_NONE);
    snprintf(mp_context, sizeof mp_context, "rank %d explicit splits", rank);
    o.algo = CGM_ALGO_AUTO;
    o.splits = 2;
    run_op(comm, rank, P, RS, 64, &o, false, 2);
    CHECK_SOURCE(comm, CGM_TUNE_NONE);
    CHECK_INT_EQ(stats(comm).runs, 0);
    MP_CHECK_OK(cgm_comm_destroy(comm));

    /* The comm's config. */
    cgm_config cfg = mp_config(8000);
    cfg.algo = CGM_ALGO_NO_OVERLAP;
    comm = test_host_comm(rank, P, rdv, &cfg);
    snprintf(mp_context, sizeof mp_context, "rank %d config algo", rank);
    run_op(comm, rank, P, AR, 64, NULL, false, 3);
    CHECK_SOURCE(comm, CGM_TUNE_NONE);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    cfg = mp_config(8000);
    cfg.splits = 1;
    comm = test_host_comm(rank, P, rdv, &cfg);
    snprintf(mp_context, sizeof mp_context, "rank %d config splits", rank);
    run_op(comm, rank, P, AG, 64, NULL, false, 4);
    CHECK_SOURCE(comm, CGM_TUNE_NONE);
    CHECK_INT_EQ(stats(comm).runs, 0);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_explicit(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(2, rank_explicit, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- environment: COMMGEMM_ALGO / COMMGEMM_SPLITS / COMMGEMM_TUNE=0 ---- */

static int rank_env_off(int rank, int P, const char *rdv, void *arg) {
    const char *const *env = arg; /* name, value */
    setenv(env[0], env[1], 1);
    cgm_comm *comm = make_comm(rank, P, rdv);
    for (int i = 0; i < 2; i++) {
        snprintf(mp_context, sizeof mp_context, "rank %d %s=%s call %d", rank,
                 env[0], env[1], i);
        run_op(comm, rank, P, i ? RS : AG, 64, NULL, false, 5 + i);
        CHECK_SOURCE(comm, CGM_TUNE_NONE);
    }
    cgm_tune_stats s = stats(comm);
    CHECK_INT_EQ(s.runs, 0);
    CHECK_INT_EQ(s.measured + s.memory + s.disk + s.defaults, 0);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

/* ---- the runoff ---- */

/* arg: NULL (TUNE_RUNOFF_PERCENT), or the percent every rank uses
 * (tune_set_constants_for_tests): 10000 puts every runner-up into a
 * runoff, 0 none. The ranks run the same runoffs in lockstep and decide
 * alike. */
static int rank_runoff(int rank, int P, const char *rdv, void *arg) {
    const int *percent = arg;
    if (percent) tune_set_constants_for_tests(TUNE_REPS, *percent);
    bool on = !percent || *percent > 0;
    cgm_comm *comm = make_comm(rank, P, rdv);
    const op_kind ops[] = {AG, RS, AR};
    for (int o = 0; o < 3; o++) {
        snprintf(mp_context, sizeof mp_context, "rank %d/%d runoff %d%% op %d", rank, P,
                 percent ? *percent : TUNE_RUNOFF_PERCENT, o);
        run_op(comm, rank, P, ops[o], 200, NULL, false, 80 + o);
        CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
        record(comm, rank, mp_context + 9);
        cgm_tune_decision d = last(comm);
        CHECK(d.us > 0);
        /* The memory decision is the runoff's winner, used as is. */
        run_op(comm, rank, P, ops[o], 200, NULL, false, 90 + o);
        CHECK_SOURCE(comm, CGM_TUNE_MEMORY);
        CHECK_INT_EQ(last(comm).choice.algo, d.choice.algo);
        CHECK_INT_EQ(last(comm).choice.splits, d.choice.splits);
    }
    cgm_tune_stats s = stats(comm);
    cgm_tune_candidate c[CGM_TUNE_MAX_CANDIDATES];
    /* The first round is unchanged: 6 runs per candidate (reps 4). */
    CHECK_INT_EQ(s.runs, 3 * 6 * (uint64_t)cgm_tune_plan_candidates(200, P, 16, c));
    if (percent && on) {
        /* 10000 %: every key had a runoff, of 2 candidates x (2 warm-ups +
         * 8..100 timed runs). */
        CHECK_INT_EQ(s.runoffs, 3);
        CHECK(s.runoff_runs >= 3 * 2 * (2 + 8));
        CHECK(s.runoff_runs <= 3 * 2 * (2 + 100));
    } else if (percent) {
        CHECK_INT_EQ(s.runoffs, 0);
        CHECK_INT_EQ(s.runoff_runs, 0);
    } else { /* default 10 %: whatever the times say, but counted alike */
        CHECK(s.runoffs <= 3);
        CHECK(s.runoff_runs <= 3 * 2 * (2 + 100));
        CHECK((s.runoffs == 0) == (s.runoff_runs == 0));
    }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_runoff(const void *param) {
    make_dir();
    CHECK_INT_EQ(test_run_ranks(3, rank_runoff, (void *)param, 60, NULL), 0);
    check_same_decisions(3);
    remove_dir();
    mp_check_no_shm_leftovers();
}

/* ---- the budget per key ---- */

/* The planner alone: how many timed runs per candidate fit a budget after
 * the pilot, and how many a runoff may take. */
static void run_budget_plan(const void *arg) {
    (void)arg;
    const int64_t ms = 1000000, s = 1000 * ms;
    /* Small ops: the whole search (2 pilot runs + 4 x 6 runs of 1 ms). */
    CHECK_INT_EQ(tune_plan_reps(1 * ms, 4, TUNE_REPS, TUNE_BUDGET_NS), TUNE_REPS);
    CHECK_INT_EQ(tune_plan_reps(1000, 14, TUNE_REPS, TUNE_BUDGET_NS), TUNE_REPS);
    /* 40 ms: 2 + 4 x (3 + 2) = 22 runs fit 25; 4 reps (26 runs) do not. */
    CHECK_INT_EQ(tune_plan_reps(40 * ms, 4, TUNE_REPS, s), 3);
    /* 100 ms: one warm-up and one timed run each (2 + 4 x 2 = 10 runs). */
    CHECK_INT_EQ(tune_plan_reps(100 * ms, 4, TUNE_REPS, s), 1);
    /* A 2 s op (the torch example's host GEMMs on a loaded 2-core VM):
     * nothing is measured, where the full search would time 2 + 24 runs
     * (about 50 s). */
    CHECK_INT_EQ(tune_plan_reps(2 * s, 4, TUNE_REPS, s), 0);
    CHECK_INT_EQ(tune_plan_reps(1, 4, TUNE_REPS, 0), 0);
    CHECK_INT_EQ(tune_plan_reps(INT64_MAX / 2, 14, TUNE_REPS, INT64_MAX), 0);
    CHECK_INT_EQ(tune_runs_per_candidate(4), 6);
    CHECK_INT_EQ(tune_runs_per_candidate(1), 2);
    /* The runoff: what it wants when there is room, nothing below its
     * minimum. */
    CHECK_INT_EQ(tune_plan_runoff(1 * ms, 8, 8, s), 8);
    CHECK_INT_EQ(tune_plan_runoff(1000, 100, 8, s), 100);
    CHECK_INT_EQ(tune_plan_runoff(10 * ms, 40, 8, 200 * ms), 9); /* 2 x (9 + 1) runs */
    CHECK_INT_EQ(tune_plan_runoff(100 * ms, 8, 8, 500 * ms), 0);
    CHECK_INT_EQ(tune_plan_runoff(1 * ms, 8, 8, -5), 0);
}

/* A budget no op fits (tune_set_budget_for_tests): each key costs one
 * pilot (a warm-up and a timed run), keeps the default rule, and later
 * calls of it use that from memory without another pilot; results stay
 * right and every rank decides alike. */
static int rank_budget_default(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    tune_set_budget_for_tests(1, TUNE_SLOW_KEY_NS);
    cgm_comm *comm = make_comm(rank, P, rdv);
    const op_kind ops[] = {AG, RS, AR};
    for (int o = 0; o < 3; o++) {
        snprintf(mp_context, sizeof mp_context, "rank %d/%d budget op %d", rank, P, o);
        run_op(comm, rank, P, ops[o], 200, NULL, false, 110 + o);
        CHECK_SOURCE(comm, CGM_TUNE_DEFAULT);
        record(comm, rank, mp_context + 9);
        run_op(comm, rank, P, ops[o], 200, NULL, false, 120 + o);
        CHECK_SOURCE(comm, CGM_TUNE_DEFAULT);
    }
    cgm_tune_stats s = stats(comm);
    CHECK_INT_EQ(s.pilot_runs, 3 * 2);
    CHECK_INT_EQ(s.runs, 0);
    CHECK_INT_EQ(s.runoff_runs, 0);
    CHECK_INT_EQ(s.measured, 0);
    CHECK_INT_EQ(s.budget_skipped, 3);
    CHECK_INT_EQ(s.defaults, 6);
    CHECK_INT_EQ(s.entries, 3);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_budget_default(const void *param) {
    int P = *(const int *)param;
    make_dir();
    CHECK_INT_EQ(test_run_ranks(P, rank_budget_default, NULL, 30, NULL), 0);
    check_same_decisions(P);
    remove_dir();
    mp_check_no_shm_leftovers();
}

/* Tuning a key that takes longer than the threshold (here 0) is logged at
 * WARN on rank 0, naming the key and the time; the other ranks log it at
 * INFO (not shown at WARN). The default budget measures these small
 * shapes in full: every key measured, one pilot each. */
static int rank_slow_key(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    char path[300], want[128];
    snprintf(path, sizeof path, "%s/log.%d", dir, (int)getpid());
    tune_set_budget_for_tests(TUNE_BUDGET_NS, 0);
    setenv("COMMGEMM_DEBUG", "WARN", 1);
    setenv("COMMGEMM_DEBUG_SUBSYS", "TUNE", 1);
    setenv("COMMGEMM_DEBUG_FILE", path, 1);
    cgm_comm *comm = make_comm(rank, P, rdv);
    snprintf(mp_context, sizeof mp_context, "rank %d/%d slow key", rank, P);
    run_op(comm, rank, P, RS, 64, NULL, false, 130);
    CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
    cgm_tune_stats s = stats(comm);
    CHECK_INT_EQ(s.measured, 1);
    CHECK_INT_EQ(s.pilot_runs, 2);
    CHECK_INT_EQ(s.budget_reduced + s.budget_skipped, 0);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    char *log = slurp(path);
    snprintf(want, sizeof want, "tune gemm_rs host fp32->fp32 TN P=%d m=64 k=%d n=%d", P,
             K, N);
    if (rank == 0) {
        if (!log) TEST_FAIL("rank 0 wrote no log to %s", path);
        CHECK_CONTAINS(log, " WARN ");
        CHECK_CONTAINS(log, want);
        CHECK_CONTAINS(log, ": tuning this key took ");
    } else if (log && strstr(log, "tuning this key took")) {
        TEST_FAIL("rank %d logged the slow key at WARN too:\n%s", rank, log);
    }
    free(log);
    return 0;
}

static void run_slow_key(const void *param) {
    (void)param;
    make_dir();
    CHECK_INT_EQ(test_run_ranks(2, rank_slow_key, NULL, 30, NULL), 0);
    remove_dir();
    mp_check_no_shm_leftovers();
}

static const char *env_tune_off[] = {"COMMGEMM_TUNE", "0"};
static const char *env_algo[] = {"COMMGEMM_ALGO", "split"};
static const char *env_splits[] = {"COMMGEMM_SPLITS", "2"};

static void run_env_off(const void *param) {
    CHECK_INT_EQ(test_run_ranks(2, rank_env_off, (void *)param, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* One rank tunes, the other does not: MISMATCH on both, comm usable. */
static int rank_tune_differs(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    if (rank == 1) setenv("COMMGEMM_TUNE", "0", 1);
    cgm_comm *comm = make_comm(rank, P, rdv);
    cgm_matrix x = test_alloc(CGM_DTYPE_FP32, 32, K, 0);
    cgm_matrix w = test_alloc(CGM_DTYPE_FP32, N, K, 0);
    cgm_matrix y = test_alloc(CGM_DTYPE_FP32, 64, N, 0);
    test_fill(&x, 1);
    test_fill(&w, 2);
    CHECK_STATUS(cgm_all_gather_gemm(comm, &x, &w, NULL, &y, NULL, NULL, NULL),
                 CGM_ERROR_MISMATCH);
    CHECK_CONTAINS(cgm_last_error(), "COMMGEMM_TUNE");
    snprintf(mp_context, sizeof mp_context, "rank %d after mismatch", rank);
    cgm_op_options o = CGM_OP_OPTIONS_INIT;
    o.algo = CGM_ALGO_SPLIT_PIPELINED;
    run_op(comm, rank, P, AG, 64, &o, false, 7);
    test_free(&x);
    test_free(&w);
    test_free(&y);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_tune_differs(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(2, rank_tune_differs, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- accumulate: never measured on Y; uses a known decision ---- */

static int rank_accumulate(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    cgm_comm *comm = make_comm(rank, P, rdv);
    const op_kind ops[] = {AG, RS, AR};
    for (int o = 0; o < 3; o++) {
        snprintf(mp_context, sizeof mp_context, "rank %d op %d accumulate "
                 "before tuning", rank, o);
        run_op(comm, rank, P, ops[o], 64, NULL, true, 30 + o);
        CHECK_SOURCE(comm, CGM_TUNE_DEFAULT);
        CHECK_INT_EQ(stats(comm).runs, 0);
    }
    uint64_t runs = 0;
    for (int o = 0; o < 3; o++) {
        snprintf(mp_context, sizeof mp_context, "rank %d op %d plain", rank, o);
        run_op(comm, rank, P, ops[o], 64, NULL, false, 40 + o);
        CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
        CHECK(stats(comm).runs > runs);
        runs = stats(comm).runs;
        snprintf(mp_context, sizeof mp_context, "rank %d op %d accumulate "
                 "after tuning", rank, o);
        run_op(comm, rank, P, ops[o], 64, NULL, true, 50 + o);
        CHECK_SOURCE(comm, CGM_TUNE_MEMORY);
        CHECK_INT_EQ(stats(comm).runs, runs);
    }
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_accumulate(const void *param) {
    (void)param;
    CHECK_INT_EQ(test_run_ranks(2, rank_accumulate, NULL, 30, NULL), 0);
    mp_check_no_shm_leftovers();
}

/* ---- the cache file ---- */

static int count_lines(const char *path, const char *prefix) {
    char *text = slurp(path);
    int n = 0;
    for (char *p = text; p && *p;) {
        if (!strncmp(p, prefix, strlen(prefix))) n++;
        char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    free(text);
    return n;
}

/* Two comms in a row, one file: the second loads, measures nothing. An
 * accumulate call is served from the file too. */
static int rank_round_trip(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    set_cache("cache.txt");
    cgm_comm *comm = make_comm(rank, P, rdv);
    snprintf(mp_context, sizeof mp_context, "rank %d first comm", rank);
    run_op(comm, rank, P, AG, 64, NULL, false, 60);
    CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
    record(comm, rank, "first-ag");
    run_op(comm, rank, P, RS, 200, NULL, false, 61);
    CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
    record(comm, rank, "first-rs");
    /* Same host, same file: only the lowest rank writes. */
    CHECK_INT_EQ(stats(comm).disk_appended, rank == 0 ? 2 : 0);
    MP_CHECK_OK(cgm_comm_destroy(comm));

    comm = make_comm(rank, P, rdv);
    snprintf(mp_context, sizeof mp_context, "rank %d second comm", rank);
    run_op(comm, rank, P, AG, 64, NULL, true, 62);
    CHECK_SOURCE(comm, CGM_TUNE_DISK);
    record(comm, rank, "second-ag");
    run_op(comm, rank, P, RS, 200, NULL, false, 63);
    CHECK_SOURCE(comm, CGM_TUNE_DISK);
    record(comm, rank, "second-rs");
    run_op(comm, rank, P, RS, 200, NULL, false, 64);
    CHECK_SOURCE(comm, CGM_TUNE_MEMORY);
    cgm_tune_stats s = stats(comm);
    CHECK_INT_EQ(s.runs, 0);
    CHECK_INT_EQ(s.disk_entries, 2);
    CHECK_INT_EQ(s.disk, 2);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static void run_round_trip(const void *param) {
    (void)param;
    make_dir();
    CHECK_INT_EQ(test_run_ranks(2, rank_round_trip, NULL, 30, NULL), 0);
    check_same_decisions(2);
    char path[300];
    path_in_dir(path, sizeof path, "cache.txt");
    CHECK_INT_EQ(count_lines(path, "# commgemm tune cache v1 "), 1);
    CHECK_INT_EQ(count_lines(path, "op="), 2);
    CHECK_INT_EQ(count_lines(path, "op=ag_gemm backend=host in=fp32 out=fp32 "
                             "layout=TN P=2 m=64 k=5 n=6 bias=0 partial=fp32 algo="), 1);
    /* The decisions of the second comm are the first comm's. */
    path_in_dir(path, sizeof path, "decisions.0");
    char *text = slurp(path);
    char a[64], b[64];
    CHECK(text != NULL);
    const char *p1 = strstr(text, "first-ag measured "), *p2 = strstr(text, "second-ag disk ");
    CHECK(p1 && p2);
    sscanf(p1 + strlen("first-ag measured "), "%63[^\n]", a);
    sscanf(p2 + strlen("second-ag disk "), "%63[^\n]", b);
    if (strcmp(a, b)) TEST_FAIL("measured %s, loaded %s", a, b);
    free(text);
    remove_dir();
    mp_check_no_shm_leftovers();
}

static void append_text(const char *path, const char *text) {
    FILE *f = fopen(path, "a");
    if (!f) TEST_FAIL("fopen %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

/* Phase 1 writes a cache; the case spoils it; phase 2 loads it: the bad
 * lines are skipped with a warning, the good one is used. */
static int rank_write_cache(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    set_cache("cache.txt");
    cgm_comm *comm = make_comm(rank, P, rdv);
    snprintf(mp_context, sizeof mp_context, "rank %d writing", rank);
    run_op(comm, rank, P, AG, 64, NULL, false, 70);
    CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

static int rank_corrupt(int rank, int P, const char *rdv, void *arg) {
    (void)arg;
    char log[300];
    snprintf(log, sizeof log, "%s/log.%d", dir, rank);
    setenv("COMMGEMM_DEBUG", "WARN", 1);
    setenv("COMMGEMM_DEBUG_FILE", log, 1);
    set_cache("cache.txt");
    cgm_comm *comm = make_comm(rank, P, rdv);
    snprintf(mp_context, sizeof mp_context, "rank %d reading", rank);
    run_op(comm, rank, P, AG, 64, NULL, false, 71);
    CHECK_SOURCE(comm, CGM_TUNE_DISK);
    cgm_tune_stats s = stats(comm);
    CHECK_INT_EQ(s.disk_rejected, 3);
    CHECK_INT_EQ(s.disk_entries, 1);
    CHECK_INT_EQ(s.runs, 0);
    /* A key whose line was spoilt is measured again. */
    run_op(comm, rank, P, RS, 64, NULL, false, 72);
    CHECK_SOURCE(comm, CGM_TUNE_MEASURED);
    MP_CHECK_OK(cgm_comm_destroy(comm));
    char *text = slurp(log);
    CHECK_CONTAINS(text, "ignored 3 lines that do not parse (first: line 3)");
    free(text);
    return 0;
}

static void run_corrupt(const void *param) {
    (void)param;
    make_dir();
    CHECK_INT_EQ(test_run_ranks(2, rank_write_cache, NULL, 30, NULL), 0);
    char path[300];
    path_in_dir(path, sizeof path, "cache.txt");
    append_text(path, "op=gemm_rs backend=host garbage\n"
                      "op=gemm_rs backend=host in=fp32 out=fp32 layout=TN P=2 "
                      "m=64 k=5 n=6 bias=0 algo=warp splits=2 us=1.0\n"
                      "# a comment is fine\n"
                      "op=gemm_rs backend=host in=fp32 out=fp32 layout=TN P=2 "
                      "m=64 k=5 n=6 bias=0 algo=split splits=2\n");
    CHECK_INT_EQ(test_run_ranks(2, rank_corrupt, NULL, 30, NULL), 0);
    remove_dir();
    mp_check_no_shm_leftovers();
}

/* Ranks with different files: when their decisions differ (or one has
 * none) they measure again, all together; equal decisions are used. */
typedef struct files_case {
    const char *file[2]; /* per rank */
    cgm_tune_source expect;
} files_case;

static int rank_files(int rank, int P, const char *rdv, void *arg) {
    const files_case *fc = arg;
    set_cache(fc->file[rank]);
    cgm_comm *comm = make_comm(rank, P, rdv);
    snprintf(mp_context, sizeof mp_context, "rank %d file %s", rank,
             fc->file[rank]);
    run_op(comm, rank, P, AG, 64, NULL, false, 80);
    CHECK_SOURCE(comm, fc->expect);
    record(comm, rank, "files");
    MP_CHECK_OK(cgm_comm_destroy(comm));
    return 0;
}

/* Copies cache.txt to `name`, replacing its decision with `algo splits`. */
static void copy_cache(const char *name, const char *decision) {
    char from[300], to[300];
    path_in_dir(from, sizeof from, "cache.txt");
    path_in_dir(to, sizeof to, name);
    char *text = slurp(from);
    CHECK(text != NULL);
    if (decision) {
        char *algo = strstr(text, "algo=");
        CHECK(algo != NULL);
        char *us = strstr(algo, " us=");
        char rest[128];
        snprintf(rest, sizeof rest, "%s", us);
        sprintf(algo, "%s%s", decision, rest);
    }
    FILE *f = fopen(to, "w");
    if (!f) TEST_FAIL("fopen %s", to);
    fputs(text, f);
    fclose(f);
    free(text);
}

static void run_files(const void *param) {
    (void)param;
    make_dir();
    CHECK_INT_EQ(test_run_ranks(2, rank_write_cache, NULL, 30, NULL), 0);
    char path[300];
    path_in_dir(path, sizeof path, "cache.txt");
    char *text = slurp(path);
    CHECK(text != NULL);
    bool is_no_overlap = strstr(text, "algo=no_overlap") != NULL;
    free(text);
    copy_cache("same.txt", NULL);
    copy_cache("other.txt", is_no_overlap ? "algo=split splits=1"
                                          : "algo=no_overlap splits=1");
    /* The same decision on two compute queues: the host backend does not
     * offer that candidate, so both ranks measure again. */
    copy_cache("queues.txt", is_no_overlap ? "algo=no_overlap splits=1 queues=2"
                                           : "algo=split splits=1 queues=2");
    const files_case cases[] = {
        {{"cache.txt", "same.txt"}, CGM_TUNE_DISK},
        {{"cache.txt", "other.txt"}, CGM_TUNE_MEASURED},
        {{"cache.txt", "missing.txt"}, CGM_TUNE_MEASURED},
        {{"queues.txt", "queues.txt"}, CGM_TUNE_MEASURED},
    };
    for (int i = 0; i < 4; i++) {
        for (int r = 0; r < 2; r++) {
            snprintf(path, sizeof path, "%s/decisions.%d", dir, r);
            unlink(path);
        }
        CHECK_INT_EQ(test_run_ranks(2, rank_files, (void *)&cases[i], 30, NULL), 0);
        check_same_decisions(2);
    }
    remove_dir();
    mp_check_no_shm_leftovers();
}

/* ---- the cache line format (one process) ---- */

static void run_line_format(const void *param) {
    (void)param;
    tune_key k = {{CGM_OP_GEMM_REDUCE_SCATTER, CGM_BACKEND_P2P, CGM_DTYPE_BF16,
                   CGM_DTYPE_BF16, CGM_LAYOUT_NT, 8, 16384, 2048, 8192, 1, CGM_DTYPE_BF16}};
    cgm_tune_candidate c = {CGM_ALGO_RING, 4, 2};
    char line[512];
    tune_disk_format_line(&k, c, 1234.5, line, sizeof line);
    CHECK_CONTAINS(line, "op=gemm_rs backend=p2p in=bf16 out=bf16 layout=NT "
                         "P=8 m=16384 k=2048 n=8192 bias=1 partial=bf16 algo=ring "
                         "splits=4 queues=2 us=1234.5\n");
    tune_disk_entry e;
    CHECK(tune_disk_parse_line(line, &e));
    CHECK(!memcmp(&e.key, &k, sizeof k));
    CHECK_INT_EQ(e.choice.algo, CGM_ALGO_RING);
    CHECK_INT_EQ(e.choice.splits, 4);
    CHECK_INT_EQ(e.choice.queues, 2);
    CHECK_NEAR(e.us, 1234.5, 1e-9);
    /* A line of a file written before queues= and partial= existed: the
     * backend's own queues (0), fp32 partials. */
    CHECK(tune_disk_parse_line("op=gemm_rs backend=p2p in=bf16 out=bf16 "
                               "layout=NT P=8 m=16384 k=2048 n=8192 bias=1 "
                               "algo=split splits=2 us=7", &e));
    CHECK_INT_EQ(e.choice.splits, 2);
    CHECK_INT_EQ(e.choice.queues, 0);
    CHECK_INT_EQ(e.key.w[TUNE_KEY_PARTIAL], CGM_DTYPE_FP32);
    CHECK_INT_EQ(e.key.w[TUNE_KEY_EPILOGUE], CGM_EPILOGUE_NONE);
    /* A call with an epilogue is a key of its own, named in its line. */
    k.w[TUNE_KEY_EPILOGUE] = CGM_EPILOGUE_DGELU_BGRAD;
    tune_disk_format_line(&k, c, 99.0, line, sizeof line);
    CHECK_CONTAINS(line, " partial=bf16 epilogue=dgelu_bgrad algo=ring ");
    CHECK(tune_disk_parse_line(line, &e));
    CHECK(!memcmp(&e.key, &k, sizeof k));
    char described[256];
    tune_key_describe(&k, described, sizeof described);
    CHECK_CONTAINS(described, "partial=bf16 epilogue=dgelu_bgrad");
    CHECK(!tune_disk_parse_line("op=gemm_rs backend=p2p in=bf16 out=bf16 layout=NT P=8 m=16 k=2 n=8 bias=1 "
                                "epilogue=relu algo=ring splits=4 us=1", &e));
    /* How the log names a choice: the queues only when the tuner set them. */
    char name[32];
    tune_candidate_describe((cgm_tune_candidate){CGM_ALGO_SPLIT_PIPELINED, 2, 2},
                            name, sizeof name);
    CHECK(strcmp(name, "split/2/q2") == 0);
    tune_candidate_describe((cgm_tune_candidate){CGM_ALGO_SPLIT_PIPELINED, 2, 0},
                            name, sizeof name);
    CHECK(strcmp(name, "split/2") == 0);
    const char *bad[] = {
        "", "op=gemm_rs", "op=gemm_rs op=gemm_rs",
        "op=gemm_rs backend=p2p in=bf16 out=fp32 layout=NT P=8 m=16384 "
        "k=2048 n=8192 bias=1 algo=auto splits=4 us=1",
        "op=gemm_rs backend=p2p in=bf16 out=fp32 layout=NT P=0 m=16384 "
        "k=2048 n=8192 bias=1 algo=ring splits=4 us=1",
        "op=gemm_rs backend=p2p in=bf16 out=fp32 layout=NT P=8 m=16384 "
        "k=2048 n=8192 bias=1 algo=ring splits=4 us=1 extra=1",
        "op=gemm_rs backend=p2p in=bf16 out=fp32 layout=NT P=8 m=16x "
        "k=2048 n=8192 bias=1 algo=ring splits=4 us=1",
        "op=gemm_rs backend=p2p in=bf16 out=fp32 layout=NT P=8 m=16 "
        "k=2048 n=8192 bias=1 algo=ring splits=4 queues=-1 us=1",
        "op=gemm_rs backend=p2p in=bf16 out=fp32 layout=NT P=8 m=16 "
        "k=2048 n=8192 bias=1 algo=ring splits=4 queues=9 us=1",
        "op=gemm_rs backend=p2p in=bf16 out=fp32 layout=NT P=8 m=16 "
        "k=2048 n=8192 bias=1 algo=ring splits=4 queues=1 queues=1 us=1",
        "op=gemm_rs backend=p2p in=bf16 out=bf16 layout=NT P=8 m=16 "
        "k=2048 n=8192 bias=1 partial=int8 algo=ring splits=4 us=1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        if (tune_disk_parse_line(bad[i], &e))
            TEST_FAIL("parsed a bad line: \"%s\"", bad[i]);
    CHECK(tune_disk_header_matches("# commgemm tune cache v1 library=0.1.0 "
                                   "device=cpu-X host=h\n", "cpu-X"));
    CHECK(!tune_disk_header_matches("# commgemm tune cache v1 library=0.1.0 "
                                    "device=cpu-Y host=h\n", "cpu-X"));
    CHECK(!tune_disk_header_matches("# commgemm tune cache v2 library=0.1.0 "
                                    "device=cpu-X host=h\n", "cpu-X"));
    CHECK(!tune_disk_header_matches("# commgemm tune cache v1 library=9.9.9 "
                                    "device=cpu-X host=h\n", "cpu-X"));
}

/* The GPU tuner's hold before its timed runs (cgm_tune_hold_ns). */
static void run_hold(const void *arg) {
    (void)arg;
    /* Twice the enqueue time of the timed runs: 3 runs of 100 us each. */
    CHECK_INT_EQ(cgm_tune_hold_ns(100000, 1, 3), 600000);
    CHECK_INT_EQ(cgm_tune_hold_ns(500000, 5, 3), 600000); /* per warm-up run */
    /* Within the bounds; the minimum with nothing to go by. */
    CHECK_INT_EQ(cgm_tune_hold_ns(1000, 1, 3), CGM_TUNE_HOLD_MIN_NS);
    CHECK_INT_EQ(cgm_tune_hold_ns(0, 1, 3), CGM_TUNE_HOLD_MIN_NS);
    CHECK_INT_EQ(cgm_tune_hold_ns(100000, 0, 3), CGM_TUNE_HOLD_MIN_NS);
    CHECK_INT_EQ(cgm_tune_hold_ns(100000, 1, 0), CGM_TUNE_HOLD_MIN_NS);
    CHECK_INT_EQ(cgm_tune_hold_ns(-5, 1, 3), CGM_TUNE_HOLD_MIN_NS);
    CHECK_INT_EQ(cgm_tune_hold_ns(4000000, 1, 3), CGM_TUNE_HOLD_MAX_NS);
    /* No overflow on absurd inputs (a warm-up that built a plan for hours). */
    CHECK_INT_EQ(cgm_tune_hold_ns(INT64_MAX, 1, 100), CGM_TUNE_HOLD_MAX_NS);
    CHECK_INT_EQ(cgm_tune_hold_ns(INT64_MAX / 3, 1, 1000000), CGM_TUNE_HOLD_MAX_NS);
}

static const int p2 = 2, p3 = 3;

static void register_cases(void) {
    test_set_timeout(60);
    test_add("measured_p2", run_measured, &p2);
    test_add("measured_p3", run_measured, &p3);
    test_add("empty_shards_many_calls", run_empty_shards, NULL);
    test_add("explicit_bypasses", run_explicit, NULL);
    test_add("env_tune_0_bypasses", run_env_off, env_tune_off);
    test_add("env_algo_bypasses", run_env_off, env_algo);
    test_add("env_splits_bypasses", run_env_off, env_splits);
    test_add("tune_differs_mismatch", run_tune_differs, NULL);
    test_add("accumulate_not_measured", run_accumulate, NULL);
    test_add("cache_round_trip", run_round_trip, NULL);
    test_add("cache_corrupt_lines", run_corrupt, NULL);
    test_add("cache_files_differ", run_files, NULL);
    test_add("cache_line_format", run_line_format, NULL);
    test_add("gpu_hold_bounds", run_hold, NULL);
    test_add("budget_plan", run_budget_plan, NULL);
    test_add("budget_default_p2", run_budget_default, &p2);
    test_add("budget_default_p3", run_budget_default, &p3);
    test_add("slow_key_warns", run_slow_key, NULL);
    static const int every_key = 10000, never = 0;
    test_add("runoff_default", run_runoff, NULL);
    test_add("runoff_every_key", run_runoff, &every_key);
    test_add("runoff_off", run_runoff, &never);
}

int main(int argc, char **argv) {
    openblas_set_num_threads(1);
    return test_main(argc, argv, register_cases);
}
