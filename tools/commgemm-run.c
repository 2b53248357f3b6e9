/* commgemm-run: starts N ranks of a program on this machine.
 *
 *   commgemm-run -n N|auto [--timeout S] [--grace S] [--prefix] PROGRAM [ARGS...]
 *
 * Each rank gets COMMGEMM_RANK, COMMGEMM_NRANKS and a fresh
 * COMMGEMM_RENDEZVOUS, which cgm_bootstrap_from_env() reads. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commgemm.h"
#include "launch.h"

static void usage(FILE *to) {
    fprintf(to,
            "Usage: commgemm-run -n N|auto [options] PROGRAM [ARGS...]\n"
            "Starts N ranks of PROGRAM on this machine, each with COMMGEMM_RANK,\n"
            "COMMGEMM_NRANKS and a shared, fresh COMMGEMM_RENDEZVOUS (read by\n"
            "cgm_bootstrap_from_env()); the rank is also the local rank.\n"
            "\n"
            "  -n, --nranks N     number of ranks (1..%d), or auto: as many ranks\n"
            "                     of the host backend as this machine's cores hold,\n"
            "                     min(%d, cores / threads per rank), at least %d; a\n"
            "                     rank's threads are its comm thread and\n"
            "                     COMMGEMM_HOST_THREADS (1) compute threads x\n"
            "                     OPENBLAS_NUM_THREADS (or OMP_NUM_THREADS); when\n"
            "                     neither is set, auto sets OPENBLAS_NUM_THREADS=1\n"
            "                     for the ranks. The choice is printed on stderr.\n"
            "                     GPU programs: one rank per GPU, give N.\n"
            "  -t, --timeout S    terminate every rank after S seconds (exit 124)\n"
            "  -g, --grace S      after a rank fails, give the others S seconds\n"
            "                     before terminating them (default 5)\n"
            "  -p, --prefix       prefix each output line with \"[rank] \"\n"
            "  -h, --help         this text\n"
            "  -V, --version      print the commgemm version\n"
            "\n"
            "Exit code: 0 if every rank succeeded; else the first failing rank's\n"
            "exit code (128 + signal if it was killed); 124 on --timeout; 125 if\n"
            "the ranks could not be started. SIGINT/SIGTERM/SIGHUP are forwarded.\n"
            "Each rank that fails gets one line saying how it ended: exited with\n"
            "a code, killed by a signal this launcher sent (and why), ignored\n"
            "SIGTERM and was killed with SIGKILL, or killed by a signal this\n"
            "launcher did not send (SIGKILL: often the out-of-memory killer).\n",
            LAUNCH_MAX_RANKS, LAUNCH_AUTO_MAX_RANKS, LAUNCH_AUTO_MIN_RANKS);
}

static int parse_int(const char *text, int lo, int hi, int *out) {
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (!*text || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    static const struct option long_options[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"np", required_argument, NULL, 'n'},
        {"timeout", required_argument, NULL, 't'},
        {"grace", required_argument, NULL, 'g'},
        {"prefix", no_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    launch_options opt;
    memset(&opt, 0, sizeof opt);
    opt.nranks = 0;
    opt.grace_s = LAUNCH_DEFAULT_GRACE_S;
    opt.name = "commgemm-run";
    int c, auto_ranks = 0;
    /* '+': stop at the program name; its options are its own. */
    while ((c = getopt_long(argc, argv, "+n:t:g:phV", long_options, NULL)) != -1) {
        switch (c) {
        case 'n':
            auto_ranks = strcmp(optarg, "auto") == 0;
            if (!auto_ranks && parse_int(optarg, 1, LAUNCH_MAX_RANKS, &opt.nranks)) {
                fprintf(stderr, "commgemm-run: -n: expected a number of ranks "
                        "from 1 to %d or auto, got '%s'\n", LAUNCH_MAX_RANKS, optarg);
                return 2;
            }
            break;
        case 't':
            if (launch_parse_seconds(optarg, &opt.timeout_s) || opt.timeout_s <= 0) {
                fprintf(stderr, "commgemm-run: --timeout: expected a positive "
                        "number of seconds, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'g':
            if (launch_parse_seconds(optarg, &opt.grace_s)) {
                fprintf(stderr, "commgemm-run: --grace: expected a number of "
                        "seconds >= 0, got '%s'\n", optarg);
                return 2;
            }
            break;
        case 'p': opt.prefix = 1; break;
        case 'h': usage(stdout); return 0;
        case 'V':
            printf("commgemm-run (commgemm %d.%d.%d)\n", cgm_version() / 10000,
                   cgm_version() / 100 % 100, cgm_version() % 100);
            return 0;
        default:
            fprintf(stderr, "commgemm-run: see 'commgemm-run --help'\n");
            return 2;
        }
    }
    if (opt.nranks == 0 && !auto_ranks) {
        fprintf(stderr, "commgemm-run: missing -n N (the number of ranks, or "
                "auto for the host backend's ranks this machine holds)\n");
        usage(stderr);
        return 2;
    }
    if (optind >= argc) {
        fprintf(stderr, "commgemm-run: missing the program to run\n");
        usage(stderr);
        return 2;
    }
    if (auto_ranks) {
        char note[256];
        opt.nranks = launch_auto_ranks(note, sizeof note);
        fprintf(stderr, "commgemm-run: -n auto: %s\n", note);
    }
    opt.argv = argv + optind;
    return launch_run(&opt);
}
