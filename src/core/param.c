/* Environment parameters: declared once here, read once, cached.
 * docs/env.md is generated from this table (commgemm-env-doc). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static const cgm_param params[] = {
    {"COMMGEMM_BACKEND", CGM_PARAM_STRING, "auto",
     "Backend for every op: auto, host, p2p, nccl or cublasmp (config field `backend`)."},
    {"COMMGEMM_BACKEND_AG_GEMM", CGM_PARAM_STRING, NULL,
     "Backend for AG+GEMM only; overrides COMMGEMM_BACKEND (config `op_backend[CGM_OP_ALL_GATHER_GEMM]`)."},
    {"COMMGEMM_BACKEND_GEMM_RS", CGM_PARAM_STRING, NULL,
     "Backend for GEMM+RS only (config `op_backend[CGM_OP_GEMM_REDUCE_SCATTER]`)."},
    {"COMMGEMM_BACKEND_GEMM_AR", CGM_PARAM_STRING, NULL,
     "Backend for GEMM+AR only (config `op_backend[CGM_OP_GEMM_ALL_REDUCE]`)."},
    {"COMMGEMM_BACKEND_BULK", CGM_PARAM_STRING, NULL,
     "Backend for bulk overlap only (config `op_backend[CGM_OP_BULK]`)."},
    {"COMMGEMM_MAX_M", CGM_PARAM_INT, "16384",
     "Largest m (rows of the gathered/full matrix) of any call; workspaces are sized from it (config `max_m`). "
     "1 to 2^31 - 1, and max_m x max(max_n, max_k) at most 2^46."},
    {"COMMGEMM_MAX_N", CGM_PARAM_INT, "16384", "Largest n of any call (config `max_n`); 1 to 2^31 - 1."},
    {"COMMGEMM_MAX_K", CGM_PARAM_INT, "16384", "Largest k of any call (config `max_k`); 1 to 2^31 - 1."},
    {"COMMGEMM_TIMEOUT_MS", CGM_PARAM_INT, "60000",
     "Bound of every wait in milliseconds; a rank that does not arrive in time is named in a CGM_ERROR_TIMEOUT (config "
     "`timeout_ms`). 1 to 2^31 - 1 (about 24.8 days, the value for no practical bound); larger values are refused: "
     "they would overflow the deadlines in nanoseconds."},
    {"COMMGEMM_ALGO", CGM_PARAM_STRING, "auto",
     "Default algorithm: auto, split, ring, no_overlap, fused (p2p's own Hopper kernel; split elsewhere) (config `algo`; per call: options.algo)."},
    {"COMMGEMM_SPLITS", CGM_PARAM_INT, "0",
     "Default pieces per shard for split/ring algorithms, 0 = auto (config `splits`)."},
    {"COMMGEMM_TUNE", CGM_PARAM_INT, "1",
     "1: choose algorithm and splits of calls that leave both open (algo auto, splits 0 in the call, the config and COMMGEMM_ALGO/COMMGEMM_SPLITS) by a short measured search at the first eager call of each key, agreed by all ranks and cached per comm (docs/TUNING.md). 0: the fixed default rules. Set it alike on every rank."},
    {"COMMGEMM_TUNE_CACHE", CGM_PARAM_STRING, NULL,
     "Tuning cache file: decisions are loaded from it (used when every rank's file has the same one) and new ones appended (text, one line per key, docs/TUNING.md). Unset: memory only. %h in the name becomes the host name."},
    {"COMMGEMM_HOST_THREADS", CGM_PARAM_INT, "1",
     "Compute threads of the host backend (config `host_threads`)."},
    {"COMMGEMM_CHECK_AGREEMENT", CGM_PARAM_INT, "1",
     "1: check that all ranks agree about each call (host: every call; GPU: first call per shape). 0: skip (config `check_agreement`)."},
    {"COMMGEMM_NCCL_MAX_CTAS", CGM_PARAM_INT, "0",
     "nccl backend: most CTAs (channels) its NCCL communicator may use: 0 = NCCL's own choice, 1..64 = a cap that leaves more SMs to the GEMM (ncclConfig_t.maxCTAs)."},
    {"COMMGEMM_NCCL_BLOCKING", CGM_PARAM_INT, "1",
     "nccl backend: 1 = blocking split communicator (a watchdog aborts it past the timeout), 0 = non-blocking (every call polled until accepted)."},
    {"COMMGEMM_CUBLASMP_LIB", CGM_PARAM_STRING, NULL,
     "Path of libcublasmp.so.0 (cuBLASMp 0.7.x) for the cublasmp backend; unset: the loader's search, then pip locations (VIRTUAL_ENV, CONDA_PREFIX, PYTHONPATH, ~/.local, /usr/local/lib/python3*)."},
    {"COMMGEMM_CUBLASMP_ALGO", CGM_PARAM_STRING, NULL,
     "cuBLASMp algorithm when a call asks for auto: split_p2p (default), atomic_p2p or no_overlap. The multicast algorithms are never used."},
    {"COMMGEMM_PARTIAL_DTYPE", CGM_PARAM_STRING, "fp32",
     "Default of config `partial_dtype`, the partials GEMM+RS/AR send (p2p, nccl): fp32 (exact) or output (rounded "
     "once to a bf16/fp16 output: half the bytes, less accurate where partials cancel)."},
    {"COMMGEMM_LT_SEARCH", CGM_PARAM_INT, "8",
     "GPU backends (p2p, nccl): cuBLASLt algorithms timed per GEMM shape on its first use, 1..16. 8 (default): the heuristic's first 8 run in 3 interleaved rounds on a private stream with a scratch output (before the op enqueues anything; never in graph capture), and the fastest is kept when it beats the first by 1 % or more (on H200 the heuristic's first was up to 17 % slower than the best). 1: the heuristic's first, no timing."},
    {"COMMGEMM_GEMM_REDUCTION", CGM_PARAM_STRING, "any",
     "Default of config `gemm_reduction` (p2p, nccl): any (cuBLASLt may round split-k parts to a bf16/fp16 output "
     "before adding them, as cuBLAS does) or fp32 (parts added in fp32)."},
    {"COMMGEMM_TIMELINE", CGM_PARAM_STRING, NULL,
     "p2p backend, diagnostics: path prefix; each eager op records an event around every schedule step (fused calls: every copy, flag, GEMM and kernel launch) and writes a Chrome trace <prefix>.<op>.<algo>.r<rank>.json (last call per op and algorithm) plus an INFO line with the busy time per queue. The op then synchronizes its stream: never for timing runs."},
    {"COMMGEMM_TEST_FAIL", CGM_PARAM_STRING, NULL,
     "Testing only, never in production: RANK:N makes rank RANK's N-th op on each comm's p2p or nccl backend (counted from 1 per backend: every op that gets as far as forking its streams, tuner measurements included) fail on purpose right after the fork, before it enqueues anything, with CGM_ERROR_CUDA (as a CUDA failure there would); RANK:init makes rank RANK's p2p init fail after its device resources are made. Exercises the paths that share a failure with the peers: the failing rank's comm is marked broken; on p2p it tells its peers, which give up at once naming it (CGM_ERROR_PEER_FAILED), on nccl its peers time out; a failed p2p init fails the create on every rank at once (tests/gpu p2p_failure_after_fork_breaks_comm, p2p_init_failure_fails_every_rank, test_gpu_nccl failure_after_fork_breaks_comm)."},
    {"COMMGEMM_DEBUG", CGM_PARAM_STRING, NULL, "Log level: NONE (default), WARN, INFO, TRACE."},
    {"COMMGEMM_DEBUG_SUBSYS", CGM_PARAM_STRING, NULL,
     "Comma-separated subsystems to log: INIT, PLAN, HOST, P2P, NCCL, CUBLASMP, TUNE, CALL, ALL (default ALL)."},
    {"COMMGEMM_DEBUG_FILE", CGM_PARAM_STRING, NULL,
     "Write log lines to this file instead of stderr; %p in the name becomes the pid."},
    {"COMMGEMM_RANK", CGM_PARAM_INT, NULL, "Set by commgemm-run: this process's rank (read by cgm_bootstrap_from_env)."},
    {"COMMGEMM_NRANKS", CGM_PARAM_INT, NULL, "Set by commgemm-run: the number of ranks."},
    {"COMMGEMM_RENDEZVOUS", CGM_PARAM_STRING, NULL,
     "Set by commgemm-run: the rendezvous name the ranks share."},
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
