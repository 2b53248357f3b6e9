/* Forks the ranks of a multi-rank test and waits for them, bounded; drops
 * root for the cases that must run unprivileged. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

int test_run_ranks(int nranks, test_rank_fn fn, void *arg, int timeout_s,
                   int *codes) {
    static int counter;
    char rendezvous[64];
    snprintf(rendezvous, sizeof rendezvous, "test-%d-%d", (int)getpid(),
             counter++);
    pid_t pids[256];
    if (nranks < 1 || nranks > 256) TEST_FAIL("bad nranks %d", nranks);
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < nranks; r++) {
        pids[r] = fork();
        if (pids[r] < 0) TEST_FAIL("fork: %s", strerror(errno));
        if (pids[r] == 0) {
            int rc = fn(r, nranks, rendezvous, arg);
            fflush(stdout);
            fflush(stderr);
            _exit(rc ? 1 : 0);
        }
    }
    /* Scaled like the case timeouts (TEST_TIMEOUT_SCALE). */
    timeout_s = (int)(timeout_s * test_time_scale() + 0.5);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int remaining = nranks, failed = 0;
    int done[256] = {0};
    while (remaining > 0) {
        int any = 0;
        for (int r = 0; r < nranks; r++) {
            if (done[r]) continue;
            int status;
            pid_t p = waitpid(pids[r], &status, WNOHANG);
            if (p != pids[r]) continue;
            done[r] = 1;
            remaining--;
            any = 1;
            int code = WIFEXITED(status) ? WEXITSTATUS(status)
                                         : -(WIFSIGNALED(status) ? WTERMSIG(status) : 1);
            if (codes) codes[r] = code;
            if (code != 0) {
                failed++;
                fprintf(stderr, "rank %d of %d exited with %d\n", r, nranks, code);
            }
        }
        if (any) continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > timeout_s) {
            for (int r = 0; r < nranks; r++) {
                if (done[r]) continue;
                fprintf(stderr, "rank %d of %d still running after %d s: killed\n",
                        r, nranks, timeout_s);
                kill(pids[r], SIGKILL);
                waitpid(pids[r], NULL, 0);
                if (codes) codes[r] = -SIGKILL;
                failed++;
                done[r] = 1;
            }
            break;
        }
        usleep(2000);
    }
    return failed ? 1 : 0;
}

cgm_bootstrap test_local_bootstrap(const char *prefix, char *name, size_t len) {
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = CGM_BOOTSTRAP_LOCAL;
    b.rank = 0;
    b.nranks = 1;
    snprintf(name, len, "%s-%d", prefix, (int)getpid());
    b.rendezvous = name;
    return b;
}

cgm_comm *test_host_comm(int rank, int nranks, const char *rendezvous,
                         const cgm_config *config) {
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = CGM_BOOTSTRAP_LOCAL;
    b.rank = rank;
    b.nranks = nranks;
    b.rendezvous = rendezvous;
    cgm_comm *comm = NULL;
    CHECK_OK(cgm_comm_create(&b, config, &comm));
    CHECK(comm != NULL);
    return comm;
}

void test_skip_unless_root_can_drop(void) {
    if (geteuid() != 0) return;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) _exit(setgid(65534) == 0 && setuid(65534) == 0 ? 0 : 1);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        TEST_SKIP("running as root, and a child could not become nobody (uid 65534) to "
                  "drop the privilege that lifts the open-files limit on descriptors in "
                  "flight");
}

void test_drop_root(void) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
        TEST_FAIL("becoming nobody (uid 65534) failed: %s", strerror(errno));
}
