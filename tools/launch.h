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

#endif
