/* Logging: COMMGEMM_DEBUG=WARN|INFO|TRACE, COMMGEMM_DEBUG_SUBSYS=INIT,HOST,..
 * Lines are prefixed host:pid:rank; the level is checked before formatting. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static cgm_log_level log_level = CGM_LOG_NONE;
static unsigned log_subsys = CGM_SUB_ALL;
static char log_host[64];
static int log_rank = -1;
static FILE *log_file;

static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {
    {"INIT", CGM_SUB_INIT}, {"PLAN", CGM_SUB_PLAN},   {"HOST", CGM_SUB_HOST},
    {"P2P", CGM_SUB_P2P},   {"NCCL", CGM_SUB_NCCL},   {"CUBLASMP", CGM_SUB_CUBLASMP},
    {"TUNE", CGM_SUB_TUNE}, {"CALL", CGM_SUB_CALL},   {"ALL", CGM_SUB_ALL},
};

static const char *const level_names[] = {"NONE", "WARN", "INFO", "TRACE"};
#define SUBSYS_LIST "INIT, PLAN, HOST, P2P, NCCL, CUBLASMP, TUNE, CALL or ALL"

/* COMMGEMM_DEBUG's level (any case), or -1. */
static int parse_level(const char *text) {
    for (int i = 0; i < (int)(sizeof level_names / sizeof level_names[0]); i++)
        if (!strcasecmp(text, level_names[i])) return i;
    return -1;
}

/* COMMGEMM_DEBUG_SUBSYS's bits; the first unknown name (if any) in bad. */
static unsigned parse_subsys(const char *text, char *bad, size_t len) {
    char buf[256];
    unsigned bits = 0;
    snprintf(buf, sizeof buf, "%s", text);
    if (len) bad[0] = '\0';
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        bool known = false;
        for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
            if (!strcasecmp(tok, subsys_names[i].name)) {
                bits |= subsys_names[i].bit;
                known = true;
            }
        if (!known && len && !bad[0]) snprintf(bad, len, "%s", tok);
    }
    return bits;
}

/* A bad value never stops logging (cgm_comm_create refuses it, see
 * cgm_log_check_settings): an unknown level logs warnings, unknown
 * subsystems are left out. */
static void log_init(void) {
    bool from_env;
    const char *level = cgm_param_string("COMMGEMM_DEBUG", &from_env);
    if (level) {
        int l = parse_level(level);
        log_level = l < 0 ? CGM_LOG_WARN : (cgm_log_level)l;
    }
    const char *subsys = cgm_param_string("COMMGEMM_DEBUG_SUBSYS", &from_env);
    if (subsys) {
        char bad[64];
        log_subsys = parse_subsys(subsys, bad, sizeof bad);
    }
    const char *file = cgm_param_string("COMMGEMM_DEBUG_FILE", &from_env);
    if (file) {
        char path[512];
        /* %p in the name becomes the pid, so ranks write separate files. */
        const char *p = strstr(file, "%p");
        if (p)
            snprintf(path, sizeof path, "%.*s%d%s", (int)(p - file), file, (int)getpid(), p + 2);
        else
            snprintf(path, sizeof path, "%s", file);
        log_file = fopen(path, "a");
    }
    if (gethostname(log_host, sizeof log_host) != 0) snprintf(log_host, sizeof log_host, "?");
    log_host[sizeof log_host - 1] = '\0';
}

cgm_status cgm_log_check_settings(void) {
    bool from_env;
    const char *level = cgm_param_string("COMMGEMM_DEBUG", &from_env);
    if (level && parse_level(level) < 0)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "environment variable COMMGEMM_DEBUG=\"%s\": expected NONE, WARN, INFO or TRACE (any "
                         "case); set one of them or unset it (default NONE)", level);
    const char *subsys = cgm_param_string("COMMGEMM_DEBUG_SUBSYS", &from_env);
    char bad[64];
    if (subsys && (parse_subsys(subsys, bad, sizeof bad), bad[0]))
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "environment variable COMMGEMM_DEBUG_SUBSYS=\"%s\": unknown subsystem \"%s\"; expected "
                         "comma-separated names among " SUBSYS_LIST " (any case), or unset it (default ALL)",
                         subsys, bad);
    return CGM_SUCCESS;
}

bool cgm_log_enabled(cgm_log_level level, unsigned subsys) {
    pthread_once(&log_once, log_init);
    return level <= log_level && (subsys & log_subsys);
}

void cgm_log_set_rank(int rank) { log_rank = rank; }

void cgm_log_write(cgm_log_level level, unsigned subsys, const char *file,
                   int line, const char *fmt, ...) {
    static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *base = strrchr(file, '/');
    FILE *out = log_file ? log_file : stderr;
    fprintf(out, "%s:%d:%d commgemm %s %s:%d %s\n", log_host, (int)getpid(),
            log_rank, names[level], base ? base + 1 : file, line, msg);
    fflush(out);
    (void)subsys;
}

int64_t cgm_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
