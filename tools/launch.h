/* Starts N ranks of a program on this machine (fork + exec) and supervises
 * them: the engine of commgemm-run, also used by commgemm-bench --ranks.
 *
 * Each rank gets COMMGEMM_RANK, COMMGEMM_NRANKS and a COMMGEMM_RENDEZVOUS
 * name fresh for this launch; cgm_bootstrap_from_env() reads them. Every
 * rank runs on this machine: its rank is its local rank. Each rank runs in its own process group (so a Ctrl-C reaches
 * the launcher, which forwards it once) and dies with the launcher
 * (PR_SET_PDEATHSIG). */
#ifndef COMMGEMM_TOOLS_LAUNCH_H
#define COMMGEMM_TOOLS_LAUNCH_H

#include <stdio.h>

#define LAUNCH_MAX_RANKS 1024

/* Exit code of launch_run() when --timeout expired (as timeout(1)). */
#define LAUNCH_EXIT_TIMEOUT 124
/* Exit code when the launcher itself could not start the ranks. */
#define LAUNCH_EXIT_SETUP 125

typedef struct launch_options {
    int nranks;          /* 1 .. LAUNCH_MAX_RANKS */
    double timeout_s;    /* kill everything after this wall time; <= 0: none */
    double grace_s;      /* after a rank fails, wait this long for the others */
    int prefix;          /* prefix every output line with "[rank] " */
    const char *name;    /* for messages: "commgemm-run" */
    char *const *argv;   /* program and arguments, NULL-terminated */
} launch_options;

/* The grace period when none is given. */
#define LAUNCH_DEFAULT_GRACE_S 5.0

/* Runs the ranks to completion. Returns the exit code for the launcher:
 * 0 when every rank exited 0; else the first failing rank's exit code
 * (128 + signal if it was killed by a signal); LAUNCH_EXIT_TIMEOUT when the
 * timeout expired first; 128 + signal when the launcher was interrupted;
 * LAUNCH_EXIT_SETUP when it could not start. What happened is printed to
 * stderr, naming the rank. */
int launch_run(const launch_options *options);

/* Parses a non-negative number of seconds ("5", "0.5"); returns 0 on
 * success, -1 on a malformed value. */
int launch_parse_seconds(const char *text, double *out);

/* ---- -n auto: ranks of the host backend that this machine holds ----
 *
 * A rank of the host backend keeps 1 + host_threads x blas_threads threads
 * busy during an op: its comm thread, and per compute thread
 * (COMMGEMM_HOST_THREADS) the OpenBLAS threads of each GEMM
 * (OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS; unset: OpenBLAS starts one
 * per core). `-n auto` takes min(4, cores / threads per rank), at least 2
 * (fewer than 2 ranks overlap nothing), and when neither BLAS variable is
 * set it sets OPENBLAS_NUM_THREADS=1 for the ranks, so that a rank's
 * threads are its comm thread and its compute threads. */
#define LAUNCH_AUTO_MIN_RANKS 2
#define LAUNCH_AUTO_MAX_RANKS 4

typedef struct launch_cpu_budget {
    int cores;        /* CPUs this process may use (affinity, cgroup quota) */
    int host_threads; /* COMMGEMM_HOST_THREADS, default 1 */
    int blas_threads; /* OPENBLAS_NUM_THREADS / OMP_NUM_THREADS, else cores */
    int blas_set;     /* 1 when one of the two variables is set */
    int threads_per_rank; /* 1 + host_threads * blas_threads */
} launch_cpu_budget;

/* CPUs this process may run on: its affinity mask, lowered to the cgroup's
 * CPU quota (cpu.max) when there is one; at least 1. */
int launch_cores(void);
/* This machine and environment, as the ranks will see them. */
void launch_cpu_budget_read(launch_cpu_budget *out);
/* min(LAUNCH_AUTO_MAX_RANKS, cores / threads_per_rank), at least
 * LAUNCH_AUTO_MIN_RANKS. */
int launch_auto_ranks_rule(int cores, int threads_per_rank);
/* -n auto: the rank count for this machine; sets OPENBLAS_NUM_THREADS=1 in
 * this process's environment (inherited by the ranks) when no BLAS thread
 * variable is set. Writes one line saying what it chose and why into note
 * ("2 ranks: 2 cores / 2 threads per rank (...)"). */
int launch_auto_ranks(char *note, size_t note_size);

/* ---- how a rank ended, in one sentence ---- */

typedef struct launch_rank_end {
    int status;      /* from waitpid */
    int sent_signal; /* first signal the launcher sent the rank, 0: none */
    int sent_kill;   /* 1 when the launcher followed with SIGKILL */
    double kill_after_s; /* seconds between the two */
    const char *why; /* why the launcher signalled: "rank 2 failed" */
} launch_rank_end;

/* "exited with code 7", "was killed by signal 15 (Terminated), sent by
 * commgemm-run because rank 2 failed", "ignored SIGTERM ... and was killed
 * with SIGKILL by commgemm-run", "was killed by signal 9 (Killed), which
 * commgemm-run did not send (...)": exactly one account per rank. */
void launch_describe_end(const char *launcher, const launch_rank_end *end,
                         char *out, size_t size);

#endif
