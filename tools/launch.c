/* fork + exec of N ranks, output relay, failure and timeout handling. */
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define LINE_BUFFER 4096
/* After SIGTERM, ranks get this long before SIGKILL. */
#define TERM_TO_KILL_S 2.0
/* After the last rank exits, output still buffered in pipes (held open by
 * grandchildren, say) is read for at most this long. */
#define DRAIN_S 1.0

/* The one piece of state a signal handler may touch. */
static volatile sig_atomic_t pending_signal;

static void on_signal(int sig) { pending_signal = sig; }

typedef struct output_stream {
    int fd; /* -1 once closed */
    int at_line_start;
    size_t len;
    char buf[LINE_BUFFER];
} output_stream;

typedef struct rank_proc {
    pid_t pid;
    int alive;
    int code; /* exit code, or 128 + signal */
    int sent_signal;    /* first signal the launcher sent it, 0: none */
    int sent_kill;      /* the launcher followed with SIGKILL */
    double sent_time, kill_time;
    output_stream out[2]; /* stdout, stderr (prefix mode only) */
} rank_proc;

typedef struct launch_state {
    const launch_options *opt;
    rank_proc *ranks;
    int alive;
    int first_failed; /* rank, or -1 */
    int first_code;
    double fail_time;     /* when first_failed failed */
    int launcher_killing; /* 1 once the launcher itself sent signals */
    char stop_why[96];    /* why it did: "rank 2 failed" */
    double kill_deadline; /* SIGKILL stragglers at this time (0: not yet) */
    int timed_out;
    int interrupted; /* signal received by the launcher, or 0 */
    double drain_deadline;
} launch_state;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int launch_parse_seconds(const char *text, double *out) {
    char *end = NULL;
    if (!text || !*text) return -1;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || *end || v < 0 || v != v) return -1;
    *out = v;
    return 0;
}

static int is_launch_var(const char *entry) {
    static const char *const names[] = {"COMMGEMM_RANK=", "COMMGEMM_NRANKS=",
                                        "COMMGEMM_RENDEZVOUS="};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strncmp(entry, names[i], strlen(names[i])) == 0) return 1;
    return 0;
}

/* The environment of one rank: ours without stale launch variables, plus
 * this rank's. Built before fork so the child only calls async-safe code.
 * One allocation: the pointer array, then the text of the three variables.
 * Every rank runs on this machine, so the rank is also the local rank. */
static char **build_env(int rank, int nranks, const char *rendezvous) {
    size_t count = 0, n = 0;
    while (environ[count]) count++;
    size_t array_bytes = (count + 4) * sizeof(char *);
    char **envp = malloc(array_bytes + 3 * 128);
    if (!envp) return NULL;
    char *vars = (char *)envp + array_bytes;
    for (size_t i = 0; i < count; i++)
        if (!is_launch_var(environ[i])) envp[n++] = environ[i];
    snprintf(vars, 128, "COMMGEMM_RANK=%d", rank);
    snprintf(vars + 128, 128, "COMMGEMM_NRANKS=%d", nranks);
    snprintf(vars + 256, 128, "COMMGEMM_RENDEZVOUS=%s", rendezvous);
    for (int i = 0; i < 3; i++) envp[n++] = vars + 128 * i;
    envp[n] = NULL;
    return envp;
}

static void make_rendezvous(char *out, size_t size) {
    uint32_t random_bits = 0;
    if (getrandom(&random_bits, sizeof random_bits, GRND_NONBLOCK) !=
        (ssize_t)sizeof random_bits) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        random_bits = (uint32_t)ts.tv_nsec ^ (uint32_t)ts.tv_sec * 2654435761u;
    }
    snprintf(out, size, "run-%ld-%08x", (long)getpid(), (unsigned)random_bits);
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void exec_rank(const launch_options *opt, int rank, char **envp,
                      int out_fds[2], pid_t parent) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(LAUNCH_EXIT_SETUP);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (out_fds[0] >= 0) {
        dup2(out_fds[0], STDOUT_FILENO);
        dup2(out_fds[1], STDERR_FILENO);
    }
    /* Ranks live in background process groups: reading a terminal would
     * stop them. Only rank 0 keeps a non-terminal stdin (a pipe, a file). */
    if (rank != 0 || isatty(STDIN_FILENO)) {
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    }
    execvpe(opt->argv[0], opt->argv, envp);
    int err = errno;
    const char *parts[] = {opt->name, ": rank ", "", ": cannot run '",
                           opt->argv[0], "': ", strerror(err), "\n"};
    char digits[16];
    int d = (int)sizeof digits - 1;
    digits[d] = '\0';
    int v = rank;
    do digits[--d] = (char)('0' + v % 10), v /= 10; while (v && d > 0);
    parts[2] = digits + d;
    /* One write(): ranks failing together must not interleave mid-line. */
    char line[1024];
    size_t len = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        size_t n = strlen(parts[i]);
        if (n > sizeof line - 1 - len) n = sizeof line - 1 - len;
        memcpy(line + len, parts[i], n);
        len += n;
    }
    if (write(STDERR_FILENO, line, len) < 0) _exit(126);
    _exit(err == ENOENT ? 127 : 126);
}

/* Sends `sig` to every live rank's process group and remembers it, so that
 * each rank's end can be told as what it was: its own, or the launcher's. */
static void signal_ranks(launch_state *st, int sig, double now) {
    for (int r = 0; r < st->opt->nranks; r++) {
        rank_proc *p = &st->ranks[r];
        if (!p->alive) continue;
        kill(-p->pid, sig);
        if (sig == SIGKILL && p->sent_signal && !p->sent_kill) {
            p->sent_kill = 1;
            p->kill_time = now;
        } else if (!p->sent_signal) {
            p->sent_signal = sig;
            p->sent_time = now;
            if (sig == SIGKILL) p->sent_kill = 1, p->kill_time = now;
        }
    }
}

static void terminate_ranks(launch_state *st, double now) {
    if (st->launcher_killing) return;
    st->launcher_killing = 1;
    st->kill_deadline = now + TERM_TO_KILL_S;
    signal_ranks(st, SIGTERM, now);
}

static void emit(launch_state *st, int rank, int stream, const char *data,
                 size_t len) {
    output_stream *os = &st->ranks[rank].out[stream];
    FILE *to = stream == 0 ? stdout : stderr;
    if (os->at_line_start) fprintf(to, "[%d] ", rank);
    fwrite(data, 1, len, to);
    fflush(to);
    os->at_line_start = len > 0 && data[len - 1] == '\n';
}

/* Emits the complete lines buffered for a stream (all of it at EOF or when
 * the buffer is full), so that lines of different ranks never interleave. */
static void relay(launch_state *st, int rank, int stream, int at_eof) {
    output_stream *os = &st->ranks[rank].out[stream];
    size_t start = 0;
    for (size_t i = 0; i < os->len; i++) {
        if (os->buf[i] != '\n') continue;
        emit(st, rank, stream, os->buf + start, i + 1 - start);
        start = i + 1;
    }
    if (start < os->len && (at_eof || (start == 0 && os->len == LINE_BUFFER))) {
        emit(st, rank, stream, os->buf + start, os->len - start);
        start = os->len;
    }
    memmove(os->buf, os->buf + start, os->len - start);
    os->len -= start;
}

static int read_outputs(launch_state *st, int timeout_ms) {
    struct pollfd fds[2 * LAUNCH_MAX_RANKS];
    int owner[2 * LAUNCH_MAX_RANKS], nfds = 0;
    for (int r = 0; r < st->opt->nranks; r++)
        for (int s = 0; s < 2; s++)
            if (st->ranks[r].out[s].fd >= 0) {
                fds[nfds].fd = st->ranks[r].out[s].fd;
                fds[nfds].events = POLLIN;
                owner[nfds++] = 2 * r + s;
            }
    int ready = poll(fds, (nfds_t)nfds, timeout_ms);
    if (ready <= 0) return nfds;
    for (int i = 0; i < nfds; i++) {
        if (!fds[i].revents) continue;
        int r = owner[i] / 2, s = owner[i] % 2;
        output_stream *os = &st->ranks[r].out[s];
        ssize_t got = read(os->fd, os->buf + os->len, LINE_BUFFER - os->len);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) {
            relay(st, r, s, 1);
            close(os->fd);
            os->fd = -1;
            continue;
        }
        os->len += (size_t)got;
        relay(st, r, s, 0);
    }
    return nfds;
}

static const char *signal_name(int sig) {
    switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
    }
}

void launch_describe_end(const char *launcher, const launch_rank_end *e,
                         char *out, size_t size) {
    const char *why = e->why && *e->why ? e->why : "it was told to stop";
    if (WIFEXITED(e->status)) {
        if (!e->sent_signal)
            snprintf(out, size, "exited with code %d", WEXITSTATUS(e->status));
        else
            snprintf(out, size, "exited with code %d after %s sent it %s "
                     "because %s", WEXITSTATUS(e->status), launcher,
                     signal_name(e->sent_signal), why);
        return;
    }
    if (!WIFSIGNALED(e->status)) {
        snprintf(out, size, "ended with wait status 0x%x", (unsigned)e->status);
        return;
    }
    int sig = WTERMSIG(e->status);
    if (sig == SIGKILL && e->sent_kill && e->sent_signal != SIGKILL) {
        snprintf(out, size, "ignored %s (sent by %s because %s) for %.1f s and "
                 "was killed with SIGKILL by %s", signal_name(e->sent_signal),
                 launcher, why, e->kill_after_s, launcher);
    } else if (sig == e->sent_signal || (sig == SIGKILL && e->sent_kill)) {
        int n = snprintf(out, size, "was killed by signal %d (%s), sent by %s "
                         "because %s", sig, strsignal(sig), launcher, why);
        /* It died of the first signal, but so slowly (a process tearing
         * down a large memory, or stuck in the kernel) that the SIGKILL
         * sent after the grace found it still exiting. */
        if (e->sent_kill && sig != SIGKILL && n > 0 && (size_t)n < size)
            snprintf(out + n, size - (size_t)n, "; it took more than %.1f s to "
                     "exit, so the SIGKILL sent then came too late to matter",
                     e->kill_after_s);
    } else {
        snprintf(out, size, "was killed by signal %d (%s), which %s did not "
                 "send%s", sig, strsignal(sig), launcher,
                 sig == SIGKILL ? " (the kernel's out-of-memory killer sends "
                                  "SIGKILL when memory runs out: see dmesg)"
                                : "");
    }
}

static void reap(launch_state *st, double now) {
    for (int r = 0; r < st->opt->nranks; r++) {
        rank_proc *p = &st->ranks[r];
        int status;
        if (!p->alive || waitpid(p->pid, &status, WNOHANG) != p->pid) continue;
        p->alive = 0;
        st->alive--;
        p->code = WIFEXITED(status) ? WEXITSTATUS(status)
                                    : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (p->code == 0) continue;
        char account[320];
        launch_rank_end end = {status, p->sent_signal, p->sent_kill,
                               p->kill_time - p->sent_time, st->stop_why};
        launch_describe_end(st->opt->name, &end, account, sizeof account);
        fprintf(stderr, "%s: rank %d of %d (pid %ld) %s\n", st->opt->name, r,
                st->opt->nranks, (long)p->pid, account);
        if (st->launcher_killing) continue;
        if (st->first_failed < 0) {
            st->first_failed = r;
            st->first_code = p->code;
            st->fail_time = now;
        }
    }
}

static void list_alive(const launch_state *st, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int r = 0; r < st->opt->nranks && used + 12 < size; r++)
        if (st->ranks[r].alive)
            used += (size_t)snprintf(out + used, size - used, " %d", r);
}

/* One pass of supervision: signals, grace period, timeout, escalation. */
static void supervise(launch_state *st, double start, double now) {
    char alive[256];
    int sig = pending_signal;
    if (sig) {
        pending_signal = 0;
        if (st->interrupted) {
            signal_ranks(st, SIGKILL, now); /* second signal: no more patience */
        } else {
            st->interrupted = sig;
            st->launcher_killing = 1;
            st->kill_deadline = now + st->opt->grace_s + TERM_TO_KILL_S;
            snprintf(st->stop_why, sizeof st->stop_why, "%s itself got %s",
                     st->opt->name, signal_name(sig));
            fprintf(stderr, "%s: got signal %d (%s): forwarding it to the ranks\n",
                    st->opt->name, sig, strsignal(sig));
            signal_ranks(st, sig, now);
        }
    }
    if (st->alive && st->first_failed >= 0 && !st->launcher_killing &&
        now - st->fail_time >= st->opt->grace_s) {
        list_alive(st, alive, sizeof alive);
        fprintf(stderr, "%s: rank %d failed; ranks%s still running %.1f s "
                "later: terminating them\n", st->opt->name, st->first_failed,
                alive, st->opt->grace_s);
        snprintf(st->stop_why, sizeof st->stop_why, "rank %d failed",
                 st->first_failed);
        terminate_ranks(st, now);
    }
    if (st->alive && st->opt->timeout_s > 0 && !st->timed_out &&
        now - start >= st->opt->timeout_s) {
        st->timed_out = 1;
        list_alive(st, alive, sizeof alive);
        fprintf(stderr, "%s: timeout of %.1f s expired: terminating ranks%s\n",
                st->opt->name, st->opt->timeout_s, alive);
        snprintf(st->stop_why, sizeof st->stop_why, "its %.1f s timeout expired",
                 st->opt->timeout_s);
        terminate_ranks(st, now);
    }
    if (st->alive && st->kill_deadline > 0 && now >= st->kill_deadline) {
        /* A rank that died since the last pass is not "still running". */
        reap(st, now);
        const rank_proc *first = NULL;
        for (int r = 0; r < st->opt->nranks && !first; r++)
            if (st->ranks[r].alive) first = &st->ranks[r];
        if (first) {
            list_alive(st, alive, sizeof alive);
            fprintf(stderr, "%s: ranks%s still running %.1f s after %s: sending "
                    "SIGKILL\n", st->opt->name, alive, now - first->sent_time,
                    signal_name(first->sent_signal));
            signal_ranks(st, SIGKILL, now);
        }
        st->kill_deadline = now + 3600; /* once */
    }
}

static int start_ranks(launch_state *st, char **envs[]) {
    const launch_options *opt = st->opt;
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < opt->nranks; r++) {
        int pipes[2][2] = {{-1, -1}, {-1, -1}};
        int child_fds[2] = {-1, -1};
        rank_proc *p = &st->ranks[r];
        p->out[0].fd = p->out[1].fd = -1;
        p->out[0].at_line_start = p->out[1].at_line_start = 1;
        if (opt->prefix) {
            if (pipe2(pipes[0], O_CLOEXEC) || pipe2(pipes[1], O_CLOEXEC)) {
                fprintf(stderr, "%s: pipe: %s\n", opt->name, strerror(errno));
                return -1;
            }
            child_fds[0] = pipes[0][1];
            child_fds[1] = pipes[1][1];
        }
        p->pid = fork();
        if (p->pid < 0) {
            fprintf(stderr, "%s: fork of rank %d: %s\n", opt->name, r, strerror(errno));
            for (int s = 0; s < 2; s++)
                if (pipes[s][0] >= 0) close(pipes[s][0]), close(pipes[s][1]);
            return -1;
        }
        if (p->pid == 0) exec_rank(opt, r, envs[r], child_fds, parent);
        setpgid(p->pid, p->pid); /* also done by the child: no race */
        p->alive = 1;
        st->alive++;
        for (int s = 0; s < 2; s++) {
            if (pipes[s][0] < 0) continue;
            close(pipes[s][1]);
            p->out[s].fd = pipes[s][0];
        }
    }
    return 0;
}

int launch_run(const launch_options *opt) {
    int result = LAUNCH_EXIT_SETUP;
    char rendezvous[96];
    char ***envs = NULL;
    launch_state st;
    memset(&st, 0, sizeof st);
    st.opt = opt;
    st.first_failed = -1;
    if (opt->nranks < 1 || opt->nranks > LAUNCH_MAX_RANKS || !opt->argv ||
        !opt->argv[0]) {
        fprintf(stderr, "%s: need 1 to %d ranks and a program to run\n",
                opt->name, LAUNCH_MAX_RANKS);
        return LAUNCH_EXIT_SETUP;
    }
    make_rendezvous(rendezvous, sizeof rendezvous);
    st.ranks = calloc((size_t)opt->nranks, sizeof *st.ranks);
    envs = calloc((size_t)opt->nranks, sizeof *envs);
    if (!st.ranks || !envs) goto done;
    for (int r = 0; r < opt->nranks; r++)
        if (!(envs[r] = build_env(r, opt->nranks, rendezvous))) goto done;

    struct sigaction action, old_actions[4];
    static const int forwarded[4] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    memset(&action, 0, sizeof action);
    sigemptyset(&action.sa_mask);
    pending_signal = 0;
    for (int i = 0; i < 4; i++) {
        action.sa_handler = forwarded[i] == SIGPIPE ? SIG_IGN : on_signal;
        sigaction(forwarded[i], &action, &old_actions[i]);
    }

    double start = now_s();
    if (start_ranks(&st, envs) != 0) {
        st.first_failed = -1;
        snprintf(st.stop_why, sizeof st.stop_why, "not every rank could be started");
        terminate_ranks(&st, start);
    }
    int open_fds = 1;
    while (st.alive > 0 || open_fds > 0) {
        double now = now_s();
        if (opt->prefix) {
            open_fds = read_outputs(&st, 20);
        } else {
            open_fds = 0;
            poll(NULL, 0, 20);
        }
        now = now_s();
        reap(&st, now);
        supervise(&st, start, now);
        if (st.alive == 0 && open_fds > 0) {
            if (st.drain_deadline == 0) st.drain_deadline = now + DRAIN_S;
            if (now >= st.drain_deadline) break;
        }
    }
    for (int r = 0; r < opt->nranks; r++)
        for (int s = 0; s < 2; s++)
            if (st.ranks[r].out[s].fd >= 0) {
                relay(&st, r, s, 1);
                close(st.ranks[r].out[s].fd);
            }
    for (int i = 0; i < 4; i++) sigaction(forwarded[i], &old_actions[i], NULL);

    if (st.first_failed >= 0)
        result = st.first_code;
    else if (st.timed_out)
        result = LAUNCH_EXIT_TIMEOUT;
    else if (st.interrupted)
        result = 128 + st.interrupted;
    else if (st.launcher_killing)
        result = LAUNCH_EXIT_SETUP; /* start_ranks failed */
    else
        result = 0;
    if (st.first_failed >= 0)
        fprintf(stderr, "%s: exit code %d from rank %d, the first to fail\n",
                opt->name, result, st.first_failed);
done:
    if (envs)
        for (int r = 0; r < opt->nranks; r++) free(envs[r]);
    free(envs);
    free(st.ranks);
    return result;
}

/* ------------------------------------------------------------ -n auto */

/* The cgroup v2 CPU quota ("max 100000" or "150000 100000") in whole CPUs,
 * rounded up; 0 when there is none. */
static int cgroup_cpu_quota(void) {
    FILE *f = fopen("/sys/fs/cgroup/cpu.max", "r");
    char quota[32] = "";
    long period = 0;
    int n = f ? fscanf(f, "%31s %ld", quota, &period) : 0;
    if (f) fclose(f);
    if (n != 2 || period <= 0 || strcmp(quota, "max") == 0) return 0;
    long q = strtol(quota, NULL, 10);
    return q > 0 ? (int)((q + period - 1) / period) : 0;
}

int launch_cores(void) {
    cpu_set_t set;
    int cores = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
    if (cores <= 0) cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    int quota = cgroup_cpu_quota();
    if (quota > 0 && quota < cores) cores = quota;
    return cores > 0 ? cores : 1;
}

/* A positive integer variable, else 0. */
static int env_positive(const char *name) {
    const char *text = getenv(name);
    char *end = NULL;
    if (!text || !*text) return 0;
    long v = strtol(text, &end, 10);
    return *end == '\0' && v > 0 && v <= 1 << 20 ? (int)v : 0;
}

void launch_cpu_budget_read(launch_cpu_budget *b) {
    int blas = env_positive("OPENBLAS_NUM_THREADS");
    if (!blas) blas = env_positive("OMP_NUM_THREADS");
    b->cores = launch_cores();
    b->host_threads = env_positive("COMMGEMM_HOST_THREADS");
    if (!b->host_threads) b->host_threads = 1;
    b->blas_set = blas > 0;
    b->blas_threads = blas ? blas : b->cores;
    b->threads_per_rank = 1 + b->host_threads * b->blas_threads;
}

int launch_auto_ranks_rule(int cores, int threads_per_rank) {
    int fit = threads_per_rank > 0 ? cores / threads_per_rank : cores;
    if (fit > LAUNCH_AUTO_MAX_RANKS) fit = LAUNCH_AUTO_MAX_RANKS;
    return fit < LAUNCH_AUTO_MIN_RANKS ? LAUNCH_AUTO_MIN_RANKS : fit;
}

int launch_auto_ranks(char *note, size_t note_size) {
    launch_cpu_budget b;
    launch_cpu_budget_read(&b);
    int blas_was_set = b.blas_set;
    if (!blas_was_set) {
        setenv("OPENBLAS_NUM_THREADS", "1", 1);
        launch_cpu_budget_read(&b);
    }
    int ranks = launch_auto_ranks_rule(b.cores, b.threads_per_rank);
    snprintf(note, note_size, "%d ranks: %d core%s / %d threads per rank (1 comm "
             "thread + %d compute x %d BLAS), at least %d, at most %d%s", ranks,
             b.cores, b.cores == 1 ? "" : "s", b.threads_per_rank, b.host_threads,
             b.blas_threads, LAUNCH_AUTO_MIN_RANKS, LAUNCH_AUTO_MAX_RANKS,
             blas_was_set ? "" : "; OPENBLAS_NUM_THREADS=1 set for the ranks");
    return ranks;
}
