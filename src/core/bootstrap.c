/* cgm_bootstrap_from_env: ranks launched by commgemm-run, torchrun or mpirun. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static _Thread_local char rendezvous_storage[96];

static bool parse_int(const char *text, int *out) {
    if (!text || !*text) return false;
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (*end != '\0' || v < 0 || v > 1 << 20) return false;
    *out = (int)v;
    return true;
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
    if (parse_int(getenv("COMMGEMM_RANK"), &b.rank) && parse_int(getenv("COMMGEMM_NRANKS"), &b.nranks) &&
        (rv = getenv("COMMGEMM_RENDEZVOUS")) && *rv) {
        b.rendezvous = sanitize("", rv, NULL);
        *out = b;
        return CGM_SUCCESS;
    }
    /* torchrun: RANK, WORLD_SIZE; the run id or the master address names the group. */
    if (parse_int(getenv("RANK"), &b.rank) && parse_int(getenv("WORLD_SIZE"), &b.nranks)) {
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
    if (parse_int(getenv("OMPI_COMM_WORLD_RANK"), &b.rank) &&
        parse_int(getenv("OMPI_COMM_WORLD_SIZE"), &b.nranks)) {
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
