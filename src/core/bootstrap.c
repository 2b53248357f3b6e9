/* cgm_bootstrap_from_env: ranks launched by commgemm-run, torchrun or mpirun. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static _Thread_local char rendezvous_storage[96];

/* The largest group cgm_comm_create takes on a LOCAL bootstrap. */
#define NRANKS_MAX 4096

/* A launcher's rank or size variable: 1 when set to an integer in [lo, hi]
 * (stored in *out), 0 when unset or empty, -1 when set to anything else
 * (the error, naming the variable, its value and `expected`, is recorded). */
static int env_int(const char *name, long lo, long hi, const char *expected, int *out) {
    const char *text = getenv(name);
    if (!text || !*text) return 0;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) {
        cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                  "cgm_bootstrap_from_env: environment variable %s=\"%s\": expected %s; fix what the launcher "
                  "set or unset it", name, text, expected);
        return -1;
    }
    *out = (int)v;
    return 1;
}

/* A launcher's (rank, size) pair: 1 when both are set and valid, 0 when
 * either is unset (not this launcher: `rank_var` alone, like RANK, may
 * mean something else), -1 when a set one is invalid. `strict`: a set
 * variable is checked even when the other is unset (ours, COMMGEMM_*). */
static int env_pair(const char *rank_var, const char *size_var, bool strict, int *rank, int *nranks) {
    bool both = getenv(rank_var) && *getenv(rank_var) && getenv(size_var) && *getenv(size_var);
    if (!both && !strict) return 0;
    char expected[96];
    snprintf(expected, sizeof expected, "the number of ranks, an integer from 1 to %d", NRANKS_MAX);
    int s = env_int(size_var, 1, NRANKS_MAX, expected, nranks);
    if (s < 0) return -1;
    snprintf(expected, sizeof expected, "this process's rank, an integer from 0 to %s - 1", size_var);
    int r = env_int(rank_var, 0, s > 0 ? *nranks - 1 : NRANKS_MAX - 1, expected, rank);
    if (r < 0) return -1;
    return r > 0 && s > 0;
}

/* Keeps letters, digits, '-', '_', '.'; maps the rest to '_'; bounded. */
static const char *sanitize(const char *prefix, const char *a, const char *b) {
    snprintf(rendezvous_storage, 81, "%s%s%s%s", prefix, a, b ? "-" : "", b ? b : "");
    for (char *p = rendezvous_storage; *p; p++) {
        char ch = *p;
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            *p = '_';
    }
    return rendezvous_storage;
}

cgm_status cgm_bootstrap_from_env(cgm_bootstrap *out) {
    if (!out) return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_bootstrap_from_env: out is NULL");
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = CGM_BOOTSTRAP_LOCAL;
    const char *rv;
    /* commgemm-run */
    int found = env_pair("COMMGEMM_RANK", "COMMGEMM_NRANKS", true, &b.rank, &b.nranks);
    if (found < 0) return CGM_ERROR_INVALID_ARGUMENT;
    if (found && (rv = getenv("COMMGEMM_RENDEZVOUS")) && *rv) {
        b.rendezvous = sanitize("", rv, NULL);
        *out = b;
        return CGM_SUCCESS;
    }
    /* torchrun: RANK, WORLD_SIZE; the run id or the master address names the group. */
    if ((found = env_pair("RANK", "WORLD_SIZE", false, &b.rank, &b.nranks)) < 0) return CGM_ERROR_INVALID_ARGUMENT;
    if (found) {
        const char *id = getenv("TORCHELASTIC_RUN_ID");
        if (id && *id && strcmp(id, "none") != 0) {
            b.rendezvous = sanitize("torch-", id, getenv("MASTER_PORT"));
        } else if (getenv("MASTER_ADDR") && getenv("MASTER_PORT")) {
            b.rendezvous = sanitize("torch-", getenv("MASTER_ADDR"), getenv("MASTER_PORT"));
        } else {
            return cgm_error(CGM_ERROR_UNAVAILABLE,
                             "cgm_bootstrap_from_env: RANK and WORLD_SIZE are set (torchrun?) but neither "
                             "TORCHELASTIC_RUN_ID nor MASTER_ADDR/MASTER_PORT names the group; launch with "
                             "torchrun or set COMMGEMM_RENDEZVOUS");
        }
        *out = b;
        return CGM_SUCCESS;
    }
    /* Open MPI's mpirun: the job id names the group. */
    if ((found = env_pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", false, &b.rank, &b.nranks)) < 0)
        return CGM_ERROR_INVALID_ARGUMENT;
    if (found) {
        const char *job = getenv("OMPI_MCA_ess_base_jobid");
        if (!job || !*job) job = getenv("PMIX_NAMESPACE");
        if (!job || !*job) job = getenv("OMPI_MCA_orte_hnp_uri");
        if (!job || !*job)
            return cgm_error(CGM_ERROR_UNAVAILABLE,
                             "cgm_bootstrap_from_env: OMPI_COMM_WORLD_RANK/SIZE are set but no job id "
                             "(OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE) names the group; set "
                             "COMMGEMM_RENDEZVOUS");
        b.rendezvous = sanitize("mpi-", job, NULL);
        *out = b;
        return CGM_SUCCESS;
    }
    return cgm_error(CGM_ERROR_UNAVAILABLE,
                     "cgm_bootstrap_from_env: no launcher environment found: expected COMMGEMM_RANK, "
                     "COMMGEMM_NRANKS and COMMGEMM_RENDEZVOUS (commgemm-run -n N PROGRAM), RANK and "
                     "WORLD_SIZE (torchrun) or OMPI_COMM_WORLD_RANK/SIZE (mpirun); start the program "
                     "through one of them");
}
