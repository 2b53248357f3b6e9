/* The test runner: fork per case, timeout, skip, list, run by name. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

typedef struct test_entry {
    char name[128];
    test_fn fn;
    const void *param;
    int timeout_s;
} test_entry;

static test_entry *entries;
static int entry_count, entry_cap;
static int current_timeout = 60;

void test_set_timeout(int seconds) { current_timeout = seconds; }

void test_add(const char *name, test_fn fn, const void *param) {
    if (entry_count == entry_cap) {
        entry_cap = entry_cap ? entry_cap * 2 : 64;
        entries = realloc(entries, (size_t)entry_cap * sizeof *entries);
        if (!entries) abort();
    }
    test_entry *e = &entries[entry_count++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->fn = fn;
    e->param = param;
    e->timeout_s = current_timeout;
}

void test_fail_at(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    _exit(1);
}

void test_skip(const char *fmt, ...) {
    va_list ap;
    printf("SKIP: ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    _exit(TEST_SKIP_CODE);
}

double test_time_scale(void) {
    const char *s = getenv("TEST_TIMEOUT_SCALE");
    double v = s ? atof(s) : 1.0;
    return v > 0 ? v : 1.0;
}

int test_parse_selection(const char *value, int index, char *why, size_t len) {
    if (!value || !*value) return 1;
    const char *p = value;
    int selected = 0;
    for (;;) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b;
        if (end == p || errno || a < 0 || a > 1000000) goto bad;
        p = end;
        b = a;
        if (*p == '-') {
            const char *q = p + 1;
            errno = 0;
            b = strtol(q, &end, 10);
            if (end == q || errno || b < a || b > 1000000) goto bad;
            p = end;
        }
        if (index >= a && index <= b) selected = 1;
        if (*p == '\0') return selected;
        if (*p != ',') goto bad;
        p++;
    }
bad:
    snprintf(why, len, "expected indices and ranges a-b (0 <= a <= b <= "
             "1000000) separated by commas, e.g. \"24-27,36\"; found \"%s\" "
             "(bad at offset %d)", value, (int)(p - value));
    return -1;
}

bool test_selected(const char *var, int index) {
    char why[512];
    int r = test_parse_selection(getenv(var), index, why, sizeof why);
    if (r < 0) TEST_FAIL("%s: %s", var, why);
    return r == 1;
}

int64_t test_scaled_ms(int64_t ms) {
    return (int64_t)((double)ms * test_time_scale() + 0.5);
}

/* Runs one case in a child; returns 0 pass, 1 fail, TEST_SKIP_CODE skip. */
static int run_one(const test_entry *e) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        setpgid(0, 0); /* own group: a timeout kills the case's ranks too */
        e->fn(e->param);
        fflush(stdout);
        _exit(0);
    }
    setpgid(pid, pid);
    double limit = e->timeout_s * test_time_scale();
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) {
            perror("waitpid");
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - start.tv_sec) +
                    (double)(now.tv_nsec - start.tv_nsec) * 1e-9;
        if (el > limit) {
            fprintf(stderr, "FAIL %s: timed out after %.0f s\n", e->name, limit);
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return 1;
        }
        usleep(2000);
    }
    /* Reap anything of the case's group left behind. */
    kill(-pid, SIGKILL);
    if (WIFEXITED(status)) {
        int code = WEXITSTATUS(status);
        if (code == 0 || code == TEST_SKIP_CODE) return code;
        fprintf(stderr, "FAIL %s: exit code %d\n", e->name, code);
        return 1;
    }
    fprintf(stderr, "FAIL %s: killed by signal %d\n", e->name,
            WIFSIGNALED(status) ? WTERMSIG(status) : -1);
    return 1;
}

int test_main(int argc, char **argv, void (*register_cases)(void)) {
    register_cases();
    if (argc > 1 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < entry_count; i++)
            printf("%s %d\n", entries[i].name, entries[i].timeout_s);
        return 0;
    }
    for (int a = 1; a < argc; a++) {
        int known = 0;
        for (int i = 0; i < entry_count && !known; i++) known = strcmp(argv[a], entries[i].name) == 0;
        if (!known) {
            fprintf(stderr, "no test case named '%s' (see --list)\n", argv[a]);
            return 2;
        }
    }
    int passed = 0, failed = 0, skipped = 0, matched = 0;
    for (int i = 0; i < entry_count; i++) {
        int named = argc <= 1;
        for (int a = 1; a < argc && !named; a++) named = strcmp(argv[a], entries[i].name) == 0;
        if (!named) continue;
        matched++;
        int r = run_one(&entries[i]);
        if (r == 0) {
            passed++;
            if (argc != 2) printf("ok   %s\n", entries[i].name);
        } else if (r == TEST_SKIP_CODE) {
            skipped++;
            if (argc != 2) printf("skip %s\n", entries[i].name);
        } else {
            failed++;
            printf("FAIL %s\n", entries[i].name);
        }
    }
    if (argc > 1 && matched == skipped) return TEST_SKIP_CODE;
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
