/* Internals of the autotuner: the key and the cache file. */
#ifndef COMMGEMM_TUNE_INTERNAL_H
#define COMMGEMM_TUNE_INTERNAL_H

#include <stdio.h>

#include "tune/tune.h"

/* A key: what a decision is valid for. Words: op, backend, input dtype,
 * output dtype, layout, P, m, k, n, bias presence, the partial dtype
 * (cgm_call.partial_dtype: RS/AR move half the bytes with bf16/fp16
 * partials, which may move the best choice). AG's n and RS/AR's k
 * are per rank: in memory a rank looks up its own value; in the file (and
 * in log lines) the key holds the largest over the ranks, so that the
 * file's keys are the same whichever rank wrote them. */
enum {
    TUNE_KEY_OP = 0,
    TUNE_KEY_BACKEND,
    TUNE_KEY_IN,
    TUNE_KEY_OUT,
    TUNE_KEY_LAYOUT,
    TUNE_KEY_P,
    TUNE_KEY_M,
    TUNE_KEY_K,
    TUNE_KEY_N,
    TUNE_KEY_BIAS,
    TUNE_KEY_PARTIAL,
    TUNE_KEY_EPILOGUE,
    TUNE_KEY_WORDS
};

typedef struct tune_key {
    int64_t w[TUNE_KEY_WORDS];
} tune_key;

/* The measurement's constants (docs/TUNING.md): timed runs per candidate,
 * and how close (percent) the runner-up must be to the fastest for a
 * runoff of the two. */
#define TUNE_REPS 4
#define TUNE_RUNOFF_PERCENT 10
/* Tests only: the constants of the comms created after the call (reps
 * clamped to 1..100, the percent to 0..10000); every rank of a comm must
 * use the same values, or the ranks' measurements fall out of step. */
void tune_set_constants_for_tests(int reps, int runoff_percent);

/* The time a key's search may take (docs/TUNING.md, "Cost of the first
 * call of a key"): planned from a pilot run of the first candidate, whose
 * time every rank agrees on, so that all ranks run the same search. And
 * the time above which tuning one key is logged at WARN. */
#define TUNE_BUDGET_NS 1000000000LL
#define TUNE_SLOW_KEY_NS 1000000000LL
/* Tests only, like tune_set_constants_for_tests: the budget and the WARN
 * threshold (ns, >= 0) of the comms created after the call. */
void tune_set_budget_for_tests(int64_t budget_ns, int64_t slow_key_ns);

/* Runs per candidate of a search with `reps` timed runs: one warm-up and
 * the timed runs of each pass (reps + 2; reps = 1: one pass, 2). */
int tune_runs_per_candidate(int reps);
/* The timed runs per candidate (<= reps) of a search whose pilot run took
 * pilot_ns (slowest rank; with its warm-up the pilot cost 2 runs): the
 * most for which 2 runs + ncand x tune_runs_per_candidate(r) runs of
 * pilot_ns fit budget_ns; 0 when not even one (nothing is measured). */
int tune_plan_reps(int64_t pilot_ns, int ncand, int reps, int64_t budget_ns);
/* The runoff's timed runs per candidate: `wanted` lowered until its two
 * candidates' runs (each with a warm-up) of per_ns fit left_ns; 0 when
 * fewer than min_runs fit (no runoff). */
int tune_plan_runoff(int64_t per_ns, int wanted, int min_runs, int64_t left_ns);

/* The word that may differ per rank: AG's n, RS/AR's k. */
int tune_key_local_word(const tune_key *key);
/* "gemm_rs host bf16->bf16 TN P=2 m=512 k=64 n=64 bias=0 partial=bf16" */
void tune_key_describe(const tune_key *key, char *buf, size_t len);
/* "split/2", "ring/1", "no_overlap" */
void tune_candidate_describe(cgm_tune_candidate c, char *buf, size_t len);

/* ---- the cache file (tune_cache.c) ----
 *
 *   # commgemm tune cache v1 library=0.1.0 device=NVIDIA_H200 host=node7
 *   op=ag_gemm backend=p2p in=bf16 out=bf16 layout=TN P=2 m=16384 k=8192 n=2048 bias=0 partial=fp32 algo=split splits=2 queues=0 us=1234.5
 *
 * One decision per line; the last line of a key wins. A line without
 * partial= (written before it was part of the key) has fp32 partials. Entries of a file
 * whose header names another format version, library version or device
 * are not used (and nothing is appended to it). */
#define TUNE_CACHE_VERSION 1

typedef struct tune_disk_entry {
    tune_key key;
    cgm_tune_candidate choice;
    double us;
} tune_disk_entry;

typedef struct tune_disk {
    char path[1024];
    bool loaded;   /* tune_disk_load ran */
    bool usable;   /* entries may be used and lines appended */
    bool has_header;
    tune_disk_entry *entries;
    int count, cap;
    int rejected;  /* lines that did not parse */
    int appended;
    bool warned_write;
} tune_disk;

/* Reads `path` (a missing file is an empty cache). `device` names this
 * rank's device as in the header. Warns once about lines that do not
 * parse and about a header of another version or device. Never fails: a
 * cache that cannot be read is an empty one. */
void tune_disk_load(tune_disk *d, const char *path, const char *device);
void tune_disk_free(tune_disk *d);
/* The last entry for `key`, or NULL. */
const tune_disk_entry *tune_disk_find(const tune_disk *d, const tune_key *key);
/* Appends one decision (creating the file with its header when missing),
 * one write(2) with O_APPEND. Warns once when it cannot. */
void tune_disk_append(tune_disk *d, const char *device, const tune_key *key,
                      cgm_tune_candidate choice, double us);
/* Parses one decision line; false when it does not parse. Exposed for the
 * unit test. */
bool tune_disk_parse_line(const char *line, tune_disk_entry *out);
/* Formats one decision line (with '\n'); returns its length. */
int tune_disk_format_line(const tune_key *key, cgm_tune_candidate choice,
                          double us, char *buf, size_t len);
/* Header check of the first line; true when it matches this library and
 * `device`. */
bool tune_disk_header_matches(const char *line, const char *device);

/* ---- the state of a comm ---- */

#define TUNE_MEMORY_KEYS 256
#define TUNE_MAX_REPS 100

/* One decision in memory. */
typedef struct tune_entry {
    bool used;
    uint64_t hash;
    uint64_t last_use;
    tune_key key; /* as this rank sees it */
    cgm_tune_candidate choice;
    double us;
    cgm_tune_source origin; /* MEASURED, DISK, or DEFAULT: too slow to
                               measure, the default rule (choice unused) */
} tune_entry;

struct cgm_tune_state {
    bool enabled;
    int reps;   /* timed runs per candidate */
    int runoff; /* percent */
    int64_t budget_ns, slow_key_ns;
    char cache_path[1024]; /* "" when no COMMGEMM_TUNE_CACHE */
    char device[128];
    tune_disk disk;
    tune_entry entries[TUNE_MEMORY_KEYS];
    uint64_t clock;
    cgm_tune_decision last;
    cgm_tune_stats stats;
};

/* ---- shared by tune.c and tune_search.c ---- */

/* Sets the call's algo, splits and queues to `choice`, records the
 * decision and counts it by source. */
void tune_apply(struct cgm_tune_state *ts, cgm_call *call,
                cgm_tune_source source, cgm_tune_candidate choice, double us);
/* The backend's default rule for this call (INFO line with why). */
void tune_use_default(struct cgm_tune_state *ts, const tune_key *key,
                      const char *why);
/* Stores a decision for key, in place of `old` if not NULL. */
void tune_remember(struct cgm_tune_state *ts, tune_entry *old,
                   const tune_key *key, uint64_t hash,
                   cgm_tune_candidate choice, double us,
                   cgm_tune_source origin);
/* All-gathers `words` of every rank into *all (malloc'd, nranks x words). */
cgm_status tune_exchange(cgm_comm *comm, const cgm_tune_hooks *h, void *state,
                         const int64_t *mine, int words, int64_t **all);
/* Step 3 of cgm_tune_resolve (tune_search.c): measures the key within the
 * budget and applies the decision to `call`; collective. `hit`: this
 * rank's old entry for the key, or NULL; `writer`: this rank appends the
 * decision to the cache file. */
cgm_status tune_search(cgm_comm *comm, const cgm_backend_vtable *vt,
                       void *state, cgm_call *call, const tune_key *key,
                       uint64_t hash, tune_entry *hit,
                       const tune_key *canonical,
                       const cgm_tune_candidate *cands, int ncand,
                       bool writer);

#endif /* COMMGEMM_TUNE_INTERNAL_H */
