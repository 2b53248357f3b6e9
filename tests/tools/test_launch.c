/* The launcher's rules without starting ranks: -n auto's rank count from
 * cores and threads per rank, the environment it reads and sets, and the
 * one account of how each rank ended (launch_describe_end). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "launch.h"

static void run_auto_rule(const void *param) {
    (void)param;
    CHECK_INT_EQ(launch_auto_ranks_rule(2, 2), 2);  /* this kind of VM */
    CHECK_INT_EQ(launch_auto_ranks_rule(1, 2), 2);  /* never below 2 */
    CHECK_INT_EQ(launch_auto_ranks_rule(6, 2), 3);
    CHECK_INT_EQ(launch_auto_ranks_rule(7, 2), 3);  /* whole ranks only */
    CHECK_INT_EQ(launch_auto_ranks_rule(16, 2), 4); /* never above 4 */
    CHECK_INT_EQ(launch_auto_ranks_rule(8, 3), 2);
    CHECK_INT_EQ(launch_auto_ranks_rule(3, 1), 3);
    CHECK_INT_EQ(launch_auto_ranks_rule(64, 0), 4);
}

static void run_budget_env(const void *param) {
    (void)param;
    launch_cpu_budget b;
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("COMMGEMM_HOST_THREADS");
    launch_cpu_budget_read(&b);
    CHECK(b.cores >= 1);
    CHECK_INT_EQ(b.host_threads, 1);
    CHECK_INT_EQ(b.blas_set, 0);
    CHECK_INT_EQ(b.blas_threads, b.cores); /* OpenBLAS's own default */
    CHECK_INT_EQ(b.threads_per_rank, 1 + b.cores);
    setenv("OMP_NUM_THREADS", "2", 1);
    setenv("COMMGEMM_HOST_THREADS", "3", 1);
    launch_cpu_budget_read(&b);
    CHECK_INT_EQ(b.blas_set, 1);
    CHECK_INT_EQ(b.threads_per_rank, 1 + 3 * 2);
    setenv("OPENBLAS_NUM_THREADS", "4", 1); /* wins over OMP_NUM_THREADS */
    setenv("COMMGEMM_HOST_THREADS", "zero", 1); /* not a count: the default */
    launch_cpu_budget_read(&b);
    CHECK_INT_EQ(b.threads_per_rank, 1 + 1 * 4);
}

static void run_auto_sets_blas(const void *param) {
    (void)param;
    char note[256];
    unsetenv("OPENBLAS_NUM_THREADS");
    unsetenv("OMP_NUM_THREADS");
    unsetenv("COMMGEMM_HOST_THREADS");
    int ranks = launch_auto_ranks(note, sizeof note);
    CHECK_INT_EQ(ranks, launch_auto_ranks_rule(launch_cores(), 2));
    CHECK(getenv("OPENBLAS_NUM_THREADS") != NULL);
    CHECK_CONTAINS(getenv("OPENBLAS_NUM_THREADS"), "1");
    CHECK_CONTAINS(note, "2 threads per rank (1 comm thread + 1 compute x 1 BLAS)");
    CHECK_CONTAINS(note, "OPENBLAS_NUM_THREADS=1 set for the ranks");
    /* Set by the user: kept, and not claimed as set. */
    setenv("OPENBLAS_NUM_THREADS", "2", 1);
    launch_auto_ranks(note, sizeof note);
    CHECK_CONTAINS(getenv("OPENBLAS_NUM_THREADS"), "2");
    CHECK_NOT_CONTAINS(note, "set for the ranks");
}

/* A real wait status: a child that exits with `code`, or dies of `sig`. */
static int status_of(int code, int sig) {
    pid_t pid = fork();
    if (pid < 0) TEST_FAIL("fork failed");
    if (pid == 0) {
        if (sig) {
            signal(sig, SIG_DFL);
            raise(sig);
        }
        _exit(code);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) TEST_FAIL("waitpid failed");
    return status;
}

static const char *describe(int status, int sent, int kill, const char *why) {
    static char out[400];
    launch_rank_end end = {status, sent, kill, 2.0, why};
    launch_describe_end("commgemm-run", &end, out, sizeof out);
    return out;
}

static void run_describe_end(const void *param) {
    (void)param;
    const char *why = "rank 2 failed";
    /* Its own end. */
    CHECK(strcmp(describe(status_of(7, 0), 0, 0, NULL), "exited with code 7") == 0);
    CHECK_CONTAINS(describe(status_of(0, SIGSEGV), 0, 0, NULL),
                   "was killed by signal 11");
    CHECK_CONTAINS(describe(status_of(0, SIGSEGV), 0, 0, NULL),
                   "which commgemm-run did not send");
    /* SIGKILL nobody in the launch sent: the out-of-memory killer's mark. */
    const char *oom = describe(status_of(0, SIGKILL), 0, 0, NULL);
    CHECK_CONTAINS(oom, "was killed by signal 9");
    CHECK_CONTAINS(oom, "which commgemm-run did not send (the kernel's out-of-memory killer");
    oom = describe(status_of(0, SIGKILL), SIGTERM, 0, why); /* while being stopped */
    CHECK_CONTAINS(oom, "which commgemm-run did not send");
    CHECK_NOT_CONTAINS(oom, "ignored");
    /* Stopped by the launcher. */
    const char *term = describe(status_of(0, SIGTERM), SIGTERM, 0, why);
    CHECK_CONTAINS(term, "was killed by signal 15");
    CHECK_CONTAINS(term, "sent by commgemm-run because rank 2 failed");
    CHECK_NOT_CONTAINS(term, "ignored");
    CHECK_CONTAINS(describe(status_of(1, 0), SIGTERM, 0, why),
                   "exited with code 1 after commgemm-run sent it SIGTERM because rank 2 failed");
    /* Ignored SIGTERM, then SIGKILL: said once, as that. */
    const char *stubborn = describe(status_of(0, SIGKILL), SIGTERM, 1, why);
    CHECK_CONTAINS(stubborn, "ignored SIGTERM (sent by commgemm-run because rank 2 "
                             "failed) for 2.0 s and was killed with SIGKILL by commgemm-run");
    CHECK_NOT_CONTAINS(stubborn, "signal 15");
    /* Died of SIGTERM, but so slowly that the SIGKILL found it exiting: not
     * "ignored SIGTERM", which it did not. */
    const char *slow = describe(status_of(0, SIGTERM), SIGTERM, 1, why);
    CHECK_CONTAINS(slow, "was killed by signal 15");
    CHECK_CONTAINS(slow, "it took more than 2.0 s to exit");
    CHECK_NOT_CONTAINS(slow, "ignored");
    /* A forwarded Ctrl-C. */
    CHECK_CONTAINS(describe(status_of(0, SIGINT), SIGINT, 0, "commgemm-run itself got SIGINT"),
                   "was killed by signal 2 (Interrupt), sent by commgemm-run because "
                   "commgemm-run itself got SIGINT");
}

static void register_cases(void) {
    test_add("auto_rule", run_auto_rule, NULL);
    test_add("cpu_budget_environment", run_budget_env, NULL);
    test_add("auto_sets_blas_threads", run_auto_sets_blas, NULL);
    test_add("describe_end", run_describe_end, NULL);
}

int main(int argc, char **argv) { return test_main(argc, argv, register_cases); }
