/* The measured autotuner: where a call leaves the algorithm and the splits
 * open (AUTO and 0 at every level), it picks one of the backend's candidates
 * by a short measured search on the first use of a key, agreed by all
 * ranks, cached in memory per comm and optionally on disk
 * (COMMGEMM_TUNE_CACHE). docs/TUNING.md describes it for users. */
#ifndef COMMGEMM_TUNE_H
#define COMMGEMM_TUNE_H

#include "core/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the choice of a call came from. */
typedef enum cgm_tune_source {
    CGM_TUNE_NONE = 0,     /* not a tuned call: explicit algo or splits,
                              COMMGEMM_TUNE=0, bulk, P = 1, < 2 candidates,
                              or a backend without tuning */
    CGM_TUNE_DEFAULT = 1,  /* open, but the backend's default rule applied:
                              graph capture or accumulate with no decision
                              known, ranks whose candidates differ, or an op
                              too slow to measure within the budget (then
                              also kept in memory for the key) */
    CGM_TUNE_MEASURED = 2, /* measured during this call */
    CGM_TUNE_MEMORY = 3,   /* the comm's in-memory cache */
    CGM_TUNE_DISK = 4      /* the cache file, agreed by every rank */
} cgm_tune_source;

typedef struct cgm_tune_decision {
    cgm_tune_source source;
    cgm_tune_candidate choice; /* MEASURED, MEMORY, DISK */
    double us;                 /* its time in µs (slowest rank), 0 unknown */
} cgm_tune_decision;

typedef struct cgm_tune_stats {
    uint64_t measured, memory, disk, defaults; /* decisions by source */
    uint64_t runs;      /* candidate executions (warm-up and timed) */
    uint64_t runoffs;     /* measured decisions settled by a runoff of two */
    uint64_t runoff_runs; /* candidate executions of the runoffs */
    uint64_t pilot_runs;  /* executions of the pilots (2 per measured key) */
    uint64_t budget_reduced; /* keys measured with fewer runs, or without
                                their runoff, to fit the budget */
    uint64_t budget_skipped; /* keys too slow to measure: default rule */
    int entries;        /* keys in the in-memory cache */
    int disk_entries;   /* decisions loaded from the cache file */
    int disk_rejected;  /* lines of it that did not parse */
    int disk_appended;  /* lines this rank appended to it */
} cgm_tune_stats;

/* Reads COMMGEMM_TUNE and COMMGEMM_TUNE_CACHE (logged at INFO) and creates
 * the comm's tuning state. CGM_ERROR_INVALID_ARGUMENT for a value out of
 * range; CGM_ERROR_OUT_OF_MEMORY. */
cgm_status cgm_tune_init(cgm_comm *comm);
/* Frees it (NULL-safe). */
void cgm_tune_destroy(cgm_comm *comm);

/* Called for every validated call before the backend runs it. When the
 * call leaves algo and splits open and the backend has tune hooks, sets
 * call->algo and call->splits to the decision for the call's key: from
 * memory, else (eager calls) from the cache file if every rank has the same
 * decision there, else measured (not for accumulate calls). Measuring runs
 * the call itself several times; the caller's real run must follow. Never
 * measures or exchanges inside graph capture. Collective on a miss, like
 * the op. Returns the status of a failed measurement or exchange. */
cgm_status cgm_tune_resolve(cgm_comm *comm, const cgm_backend_vtable *vt,
                            void *state, cgm_call *call);

/* ---- diagnostics (tests, tools) ---- */

/* The decision the last cgm_tune_resolve on this comm applied. */
void cgm_tune_last(const cgm_comm *comm, cgm_tune_decision *out);
/* Counters since the comm was created. */
void cgm_tune_get_stats(const cgm_comm *comm, cgm_tune_stats *out);
/* Looks up the in-memory decision for the key of `call` (validated, as the
 * backend receives it). True when one is cached. Does not touch the LRU. */
bool cgm_tune_lookup(const cgm_comm *comm, const cgm_call *call,
                     cgm_tune_decision *out);
const char *cgm_tune_source_name(cgm_tune_source source);

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_TUNE_H */
