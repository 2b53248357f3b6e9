/* A rank for the commgemm-run tests: checks the launcher's environment or
 * misbehaves on purpose.
 *   rank_probe check N          every rank checks its COMMGEMM_* variables
 *   rank_probe fail R CODE      rank R exits CODE; the others hang
 *   rank_probe signal R SIG     rank R raises SIG; the others hang
 *   rank_probe stubborn R CODE  rank R exits CODE; the others ignore SIGTERM
 *   rank_probe hang             every rank hangs
 *   rank_probe print            every rank writes a line to stdout and stderr
 *   rank_probe count            every rank prints its rank, the rank count and
 *                               OPENBLAS_NUM_THREADS */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commgemm.h"

static int env_int(const char *name) {
    const char *v = getenv(name);
    if (!v) {
        fprintf(stderr, "rank_probe: %s is not set\n", name);
        exit(10);
    }
    return atoi(v);
}

static void nap_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void hang(void) {
    for (int i = 0; i < 300; i++) nap_ms(1000);
    exit(20); /* the launcher should have killed us long ago */
}

static int check(int nranks) {
    int rank = env_int("COMMGEMM_RANK");
    const char *rv = getenv("COMMGEMM_RENDEZVOUS");
    if (env_int("COMMGEMM_NRANKS") != nranks || rank < 0 || rank >= nranks) {
        fprintf(stderr, "rank_probe: bad rank %d / nranks %d\n", rank, env_int("COMMGEMM_NRANKS"));
        return 11;
    }
    if (!rv || strncmp(rv, "run-", 4) != 0 || strlen(rv) > 80 ||
        strspn(rv, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != strlen(rv)) {
        fprintf(stderr, "rank_probe: bad rendezvous '%s'\n", rv ? rv : "(null)");
        return 12;
    }
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    cgm_status st = cgm_bootstrap_from_env(&b);
    if (st != CGM_SUCCESS || b.rank != rank || b.nranks != nranks || !b.rendezvous ||
        strcmp(b.rendezvous, rv) != 0) {
        fprintf(stderr, "rank_probe: cgm_bootstrap_from_env: %s (%s): rank %d nranks %d\n",
                cgm_status_string(st), cgm_last_error(), b.rank, b.nranks);
        return 13;
    }
    printf("rank %d of %d ok, rendezvous %s\n", rank, nranks, rv);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    int rank = env_int("COMMGEMM_RANK");
    int target = argc > 2 ? atoi(argv[2]) : 0, value = argc > 3 ? atoi(argv[3]) : 0;
    if (strcmp(mode, "check") == 0) return check(target);
    if (strcmp(mode, "hang") == 0) hang();
    if (strcmp(mode, "count") == 0) {
        const char *blas = getenv("OPENBLAS_NUM_THREADS");
        printf("rank %d of %d, OPENBLAS_NUM_THREADS=%s\n", rank,
               env_int("COMMGEMM_NRANKS"), blas ? blas : "(unset)");
        return 0;
    }
    if (strcmp(mode, "print") == 0) {
        printf("hello from rank %d\n", rank);
        fprintf(stderr, "err from rank %d\n", rank);
        return 0;
    }
    if (strcmp(mode, "fail") == 0 || strcmp(mode, "stubborn") == 0 ||
        strcmp(mode, "signal") == 0) {
        if (rank != target) {
            if (strcmp(mode, "stubborn") == 0) signal(SIGTERM, SIG_IGN);
            hang();
        }
        nap_ms(100);
        if (strcmp(mode, "signal") == 0) {
            signal(value, SIG_DFL);
            raise(value);
        }
        return value;
    }
    fprintf(stderr, "rank_probe: unknown mode '%s'\n", mode);
    return 2;
}
