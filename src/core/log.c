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

static void log_init(void) {
    bool from_env;
    const char *level = cgm_param_string("COMMGEMM_DEBUG", &from_env);
    if (level) {
        if (!strcasecmp(level, "WARN")) log_level = CGM_LOG_WARN;
        else if (!strcasecmp(level, "INFO")) log_level = CGM_LOG_INFO;
        else if (!strcasecmp(level, "TRACE")) log_level = CGM_LOG_TRACE;
        else if (!strcasecmp(level, "NONE")) log_level = CGM_LOG_NONE;
        else {
            fprintf(stderr, "commgemm: COMMGEMM_DEBUG=%s is not one of NONE, WARN, INFO, TRACE; using WARN\n", level);
            log_level = CGM_LOG_WARN;
        }
    }
    const char *subsys = cgm_param_string("COMMGEMM_DEBUG_SUBSYS", &from_env);
    if (subsys) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", subsys);
        log_subsys = 0;
        for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            bool known = false;
            for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
                if (!strcasecmp(tok, subsys_names[i].name)) {
                    log_subsys |= subsys_names[i].bit;
                    known = true;
                }
            if (!known)
                fprintf(stderr, "commgemm: COMMGEMM_DEBUG_SUBSYS: unknown subsystem '%s' (INIT, PLAN, HOST, P2P, NCCL, CUBLASMP, TUNE, CALL, ALL)\n", tok);
        }
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
