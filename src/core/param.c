/* Environment parameters: declared once here, read once, cached.
 * docs/env.md is generated from this table (commgemm-env-doc). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static const cgm_param params[] = {
    /* Settings: defaults of cgm_config fields and of what has no field. */
    {"COMMGEMM_BACKEND", CGM_PARAM_STRING, "auto", CGM_PARAM_SETTING,
     "Backend: auto, host, p2p, nccl or cublasmp, for every op, and op:backend items for one op, comma-separated "
     "(e.g. p2p,gemm_rs:nccl; ops ag_gemm, gemm_rs, gemm_ar, bulk). Config `backend`, `op_backend`."},
    {"COMMGEMM_MAX_M", CGM_PARAM_INT, "16384", CGM_PARAM_SETTING,
     "Largest m (rows of the gathered or full matrix) of any call; workspaces are sized from it. Config `max_m`; "
     "max_m x max(max_n, max_k) at most 2^46."},
    {"COMMGEMM_MAX_N", CGM_PARAM_INT, "16384", CGM_PARAM_SETTING,
     "Largest n of any call, 1 to 2^31 - 1. Config `max_n`."},
    {"COMMGEMM_MAX_K", CGM_PARAM_INT, "16384", CGM_PARAM_SETTING,
     "Largest k of any call, 1 to 2^31 - 1. Config `max_k`."},
    {"COMMGEMM_TIMEOUT_MS", CGM_PARAM_INT, "60000", CGM_PARAM_SETTING,
     "Bound of every wait, ms (1 to 2^31 - 1); a rank that does not arrive in time is named in a "
     "CGM_ERROR_TIMEOUT. Config `timeout_ms`."},
    {"COMMGEMM_ALGO", CGM_PARAM_STRING, "auto", CGM_PARAM_SETTING,
     "Default algorithm: auto, split, ring, no_overlap or fused (p2p's own Hopper kernel; split elsewhere). "
     "Config `algo`, per call `options.algo`."},
    {"COMMGEMM_SPLITS", CGM_PARAM_INT, "0", CGM_PARAM_SETTING,
     "Default pieces per shard of the split and ring algorithms; 0: auto. Config `splits`, per call "
     "`options.splits`."},
    {"COMMGEMM_TUNE", CGM_PARAM_INT, "1", CGM_PARAM_SETTING,
     "1: calls that leave algorithm and splits open are tuned by a short measured search on their first eager "
     "call (docs/TUNING.md); 0: fixed rules. The same on every rank."},
    {"COMMGEMM_TUNE_CACHE", CGM_PARAM_STRING, NULL, CGM_PARAM_SETTING,
     "Tuning cache file: decisions are loaded from it and new ones appended (docs/TUNING.md); %h becomes the host "
     "name. Unset: memory only."},
    {"COMMGEMM_HOST_THREADS", CGM_PARAM_INT, "1", CGM_PARAM_SETTING,
     "Compute threads of the host backend, 1 to 16. Config `host_threads`."},
    {"COMMGEMM_CHECK_AGREEMENT", CGM_PARAM_INT, "1", CGM_PARAM_SETTING,
     "0 or 1. 1: check that all ranks agree about each call (host: every call; GPU backends: the first call of "
     "each shape); 0: skip. Config `check_agreement`."},
    {"COMMGEMM_PARTIAL_DTYPE", CGM_PARAM_STRING, "fp32", CGM_PARAM_SETTING,
     "Partials GEMM+RS/AR send (p2p, nccl): fp32 (exact) or output (rounded once to a bf16/fp16 output: half the "
     "bytes). Config and per call `partial_dtype`."},
    {"COMMGEMM_GEMM_REDUCTION", CGM_PARAM_STRING, "any", CGM_PARAM_SETTING,
     "Split-k sums of cuBLASLt (p2p, nccl): any (may round parts to a bf16/fp16 output first, as cuBLAS does) or "
     "fp32. Config and per call `gemm_reduction`."},
    {"COMMGEMM_LT_SEARCH", CGM_PARAM_INT, "8", CGM_PARAM_SETTING,
     "p2p and nccl: cuBLASLt algorithms timed per GEMM shape on its first eager use, 1 to 16 (1: the heuristic's "
     "first, untimed; docs/TUNING.md)."},
    {"COMMGEMM_NCCL_MAX_CTAS", CGM_PARAM_INT, "0", CGM_PARAM_SETTING,
     "nccl backend: most CTAs its NCCL communicator may use (ncclConfig_t.maxCTAs), 1 to 64, leaving SMs to the "
     "GEMM; 0: NCCL's choice."},
    {"COMMGEMM_NCCL_BLOCKING", CGM_PARAM_INT, "1", CGM_PARAM_SETTING,
     "nccl backend: 1: a blocking split communicator (a guard aborts a call blocked past the timeout); 0: "
     "non-blocking, every call polled (docs/NCCL_BACKEND.md)."},
    {"COMMGEMM_CUBLASMP_LIB", CGM_PARAM_STRING, NULL, CGM_PARAM_SETTING,
     "Path of libcublasmp.so.0 for the cublasmp backend. Unset: the loader's search, then pip's locations "
     "(docs/CUBLASMP_BACKEND.md)."},
    {"COMMGEMM_CUBLASMP_ALGO", CGM_PARAM_STRING, NULL, CGM_PARAM_SETTING,
     "cuBLASMp's algorithm for calls that leave it open: split_p2p (default), atomic_p2p or no_overlap; never a "
     "multicast one."},
    {"COMMGEMM_TIMELINE", CGM_PARAM_STRING, NULL, CGM_PARAM_SETTING,
     "p2p diagnostics: path prefix of a Chrome trace of each eager op's steps (docs/TUNING.md). The op then "
     "synchronizes its stream: never for timing runs."},
    {"COMMGEMM_DEBUG", CGM_PARAM_STRING, NULL, CGM_PARAM_SETTING,
     "Log level: NONE (default), WARN, INFO (every effective setting and its source) or TRACE, any case; "
     "cgm_comm_create refuses another value."},
    {"COMMGEMM_DEBUG_SUBSYS", CGM_PARAM_STRING, NULL, CGM_PARAM_SETTING,
     "Subsystems to log, comma-separated: INIT, PLAN, HOST, P2P, NCCL, CUBLASMP, TUNE, CALL or ALL (default); "
     "cgm_comm_create refuses another name."},
    {"COMMGEMM_DEBUG_FILE", CGM_PARAM_STRING, NULL, CGM_PARAM_SETTING,
     "Write log lines to this file instead of stderr; %p in the name becomes the pid."},
    /* Set by commgemm-run for cgm_bootstrap_from_env. */
    {"COMMGEMM_RANK", CGM_PARAM_INT, NULL, CGM_PARAM_LAUNCHER, "This process's rank, 0 to NRANKS - 1."},
    {"COMMGEMM_NRANKS", CGM_PARAM_INT, NULL, CGM_PARAM_LAUNCHER, "The number of ranks, 1 to 4096."},
    {"COMMGEMM_RENDEZVOUS", CGM_PARAM_STRING, NULL, CGM_PARAM_LAUNCHER,
     "The rendezvous name the ranks share."},
    /* Tests only. */
    {"COMMGEMM_TEST_FAIL", CGM_PARAM_STRING, NULL, CGM_PARAM_TESTING,
     "RANK:N fails rank RANK's N-th op on a p2p or nccl comm right after its streams fork; RANK:init fails its "
     "p2p init (the peer-failure paths' tests)."},
};

#define PARAM_COUNT ((int)(sizeof params / sizeof params[0]))

static pthread_once_t params_once = PTHREAD_ONCE_INIT;
static const char *param_env[PARAM_COUNT];

static void params_read(void) {
    for (int i = 0; i < PARAM_COUNT; i++) {
        const char *v = getenv(params[i].name);
        param_env[i] = (v && *v) ? strdup(v) : NULL;
    }
}

const cgm_param *cgm_param_table(int *count) {
    if (count) *count = PARAM_COUNT;
    return params;
}

static int param_index(const char *name) {
    pthread_once(&params_once, params_read);
    for (int i = 0; i < PARAM_COUNT; i++)
        if (!strcmp(params[i].name, name)) return i;
    return -1;
}

cgm_status cgm_param_int(const char *name, int64_t *value, bool *from_env) {
    int i = param_index(name);
    if (i < 0 || params[i].type != CGM_PARAM_INT)
        return cgm_error(CGM_ERROR_INTERNAL, "unknown integer parameter %s", name);
    const char *text = param_env[i] ? param_env[i] : params[i].default_value;
    *from_env = param_env[i] != NULL;
    if (!text) {
        *value = CGM_UNSET;
        return CGM_SUCCESS;
    }
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end != '\0')
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "environment variable %s=\"%s\": expected an integer; set it to a number "
                         "or unset it (default %s)",
                         name, text, params[i].default_value ? params[i].default_value : "unset");
    *value = v;
    return CGM_SUCCESS;
}

cgm_status cgm_param_int_range(const char *name, int64_t lo, int64_t hi,
                               const char *meaning, int64_t *value) {
    bool from_env = false;
    int64_t v = 0;
    cgm_status st = cgm_param_int(name, &v, &from_env);
    if (st != CGM_SUCCESS) return st;
    if (v < lo || v > hi) {
        int i = param_index(name);
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "environment variable %s=%lld: expected %lld..%lld "
                         "(%s); set one or unset it (default %s)", name,
                         (long long)v, (long long)lo, (long long)hi, meaning,
                         i >= 0 && params[i].default_value
                             ? params[i].default_value : "unset");
    }
    *value = v;
    return CGM_SUCCESS;
}

const char *cgm_param_string(const char *name, bool *from_env) {
    int i = param_index(name);
    if (i < 0) return NULL;
    if (from_env) *from_env = param_env[i] != NULL;
    return param_env[i] ? param_env[i] : params[i].default_value;
}

cgm_status cgm_param_choice(const char *name, const char *const *choices,
                            int count, int *index) {
    bool from_env = false;
    const char *v = cgm_param_string(name, &from_env);
    const char *dflt = count > 0 ? choices[0] : "";
    if (!v) v = dflt;
    for (int i = 0; i < count; i++)
        if (strcmp(v, choices[i]) == 0) {
            *index = i;
            return CGM_SUCCESS;
        }
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; i < count && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s",
                                 i == 0 ? "" : i + 1 == count ? " or " : ", ",
                                 choices[i]);
    return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                     "environment variable %s=\"%s\": expected %s; set one "
                     "of them or unset it (default %s)", name, v, list, dflt);
}
