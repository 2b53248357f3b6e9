/* Comm lifetime: config resolution, bootstrap, backend state, live set. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "tune/tune.h"

/* ---- the set of live comms, so a destroyed handle is reported, not used */

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static const cgm_comm **live_comms;
static int live_count, live_cap;

static bool live_add(const cgm_comm *comm) {
    bool ok = true;
    pthread_mutex_lock(&live_lock);
    if (live_count == live_cap) {
        int cap = live_cap ? live_cap * 2 : 16;
        const cgm_comm **grown = realloc(live_comms, (size_t)cap * sizeof *grown);
        if (grown) {
            live_comms = grown;
            live_cap = cap;
        } else {
            ok = false;
        }
    }
    if (ok) live_comms[live_count++] = comm;
    pthread_mutex_unlock(&live_lock);
    return ok;
}

static bool live_remove(const cgm_comm *comm) {
    bool found = false;
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < live_count; i++)
        if (live_comms[i] == comm) {
            live_comms[i] = live_comms[--live_count];
            found = true;
            break;
        }
    pthread_mutex_unlock(&live_lock);
    return found;
}

bool cgm_comm_is_live(const cgm_comm *comm) {
    bool found = false;
    if (!comm) return false;
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < live_count && !found; i++) found = live_comms[i] == comm;
    pthread_mutex_unlock(&live_lock);
    return found;
}

cgm_status cgm_comm_check_usable(const cgm_comm *comm, const char *function) {
    if (!comm)
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "%s: comm is NULL; expected a comm from cgm_comm_create", function);
    if (!cgm_comm_is_live(comm))
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "%s: comm %p is not a live communicator (destroyed, or never created by "
                         "cgm_comm_create); create a new comm",
                         function, (const void *)comm);
    if (comm->broken != CGM_SUCCESS)
        return cgm_error(comm->broken, "%s: the comm is broken by an earlier failure (%s); destroy it "
                         "with cgm_comm_destroy and create a new one", function, comm->broken_message);
    return CGM_SUCCESS;
}

/* Under live_lock, so that a comm is never taken while cgm_comm_destroy
 * frees it: destroy takes it the same way first. */
static cgm_status take(cgm_comm *comm, const char *function) {
    const char *holder = NULL;
    if (atomic_compare_exchange_strong(&comm->holder, &holder, function)) return CGM_SUCCESS;
    return cgm_error(CGM_ERROR_INVALID_USAGE,
                     "%s: comm %p is in use by another thread, in %s: a comm serves one thread at a time; "
                     "serialize the calls on it (a lock around them) or give each thread its own comm", function,
                     (void *)comm, holder);
}

cgm_status cgm_comm_enter(cgm_comm *comm, const char *function) {
    if (!comm) return cgm_comm_check_usable(comm, function);
    pthread_mutex_lock(&live_lock);
    bool live = false;
    for (int i = 0; i < live_count && !live; i++) live = live_comms[i] == comm;
    cgm_status st = live ? take(comm, function) : CGM_SUCCESS;
    pthread_mutex_unlock(&live_lock);
    if (!live) return cgm_comm_check_usable(comm, function);
    if (st != CGM_SUCCESS) return st;
    st = cgm_comm_check_usable(comm, function);
    if (st != CGM_SUCCESS) cgm_comm_leave(comm);
    return st;
}

void cgm_comm_leave(cgm_comm *comm) { atomic_store(&comm->holder, NULL); }

void cgm_comm_mark_broken(cgm_comm *comm, cgm_status status) {
    if (comm->broken != CGM_SUCCESS) return;
    comm->broken = status;
    snprintf(comm->broken_message, sizeof comm->broken_message, "%s", cgm_last_error());
}

/* ---- configuration: config field, else environment, else default ---- */

/* The largest max_m, max_n, max_k (CGM_DIM_MAX), and the largest timeout_ms: with them
 * every workspace size (at most max_m x max(max_n, max_k) x 4 bytes, times
 * the rank count) and every deadline in nanoseconds (timeout_ms x 10^6,
 * plus the clock) stays far inside int64_t. 2^31 - 1 ms is 24.8 days. */
#define TIMEOUT_MS_MAX ((int64_t)INT32_MAX)
#define WORKSPACE_ELEMS_MAX ((int64_t)1 << 46) /* 256 TiB of fp32 */

static cgm_status resolve_int(const char *field, int64_t config_value, const char *env,
                              int64_t min, int64_t max, int64_t *out) {
    bool from_env = false;
    const char *source = "config";
    int64_t v = config_value;
    if (v == CGM_UNSET) {
        cgm_status st = cgm_param_int(env, &v, &from_env);
        if (st != CGM_SUCCESS) return st;
        source = from_env ? "environment" : "default";
    }
    if (v < min || v > max)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s = %lld (from %s %s): expected %lld to %lld; fix the value or leave it unset "
                         "(CGM_UNSET)", field, (long long)v, source, from_env ? env : "field", (long long)min,
                         (long long)max);
    CGM_INFO(CGM_SUB_INIT, "%s=%lld from %s", env, (long long)v, source);
    *out = v;
    return CGM_SUCCESS;
}

/* COMMGEMM_BACKEND: comma-separated items, each a backend name (every op)
 * or op:backend (that op only), e.g. "p2p,gemm_rs:nccl". *all and op[]
 * stay CGM_BACKEND_DEFAULT where the variable says nothing. */
static cgm_status env_backends(cgm_backend *all, cgm_backend op[CGM_OP_COUNT_]) {
    static const char *env = "COMMGEMM_BACKEND";
    bool from_env = false;
    const char *text = cgm_param_string(env, &from_env);
    *all = CGM_BACKEND_DEFAULT;
    for (int i = 0; i < CGM_OP_COUNT_; i++) op[i] = CGM_BACKEND_DEFAULT;
    if (!from_env) return CGM_SUCCESS;
    const char *p = text;
    while (*p) {
        size_t len = strcspn(p, ",");
        char item[64];
        if (len >= sizeof item) len = sizeof item - 1;
        memcpy(item, p, len);
        item[len] = '\0';
        p += strcspn(p, ",");
        if (*p == ',') p++;
        char *colon = strchr(item, ':');
        const char *name = colon ? colon + 1 : item;
        cgm_backend *slot = all;
        if (colon) {
            *colon = '\0';
            int which = -1;
            for (int i = 0; i < CGM_OP_COUNT_; i++)
                if (strcmp(item, cgm_op_name((cgm_op)i)) == 0) which = i;
            if (which < 0)
                return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                                 "environment variable %s=\"%s\": unknown op \"%s\"; expected ag_gemm, gemm_rs, "
                                 "gemm_ar or bulk before the ':' (e.g. %s=p2p,gemm_rs:nccl)",
                                 env, text, item, env);
            slot = &op[which];
        }
        cgm_backend b = CGM_BACKEND_DEFAULT;
        if (cgm_backend_from_name(name, &b) != CGM_SUCCESS || b == CGM_BACKEND_DEFAULT)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "environment variable %s=\"%s\": \"%s\" is not a backend; expected auto, host, p2p, "
                             "nccl or cublasmp, each optionally after op: (e.g. %s=p2p,gemm_rs:nccl)",
                             env, text, name, env);
        if (*slot != CGM_BACKEND_DEFAULT)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "environment variable %s=\"%s\": %s%s given twice; give each at most once",
                             env, text, colon ? item : "the backend for every op", colon ? "'s backend" : "");
        *slot = b;
    }
    return CGM_SUCCESS;
}

/* An enum field whose value 0 is DEFAULT (names[0]): the config's value,
 * else the word of environment variable `env` among names[1..count-1]
 * (the table's default, names[1], when it is unset); logged with where it
 * came from. */
static cgm_status resolve_enum(const char *field, int value, const char *const *names, int count,
                               const char *env, int *out) {
    const char *source = "config";
    if (value < 0 || value >= count) {
        char list[160] = "";
        size_t used = 0;
        for (int i = 0; i < count && used < sizeof list; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%d (%s)",
                                     i == 0 ? "" : i + 1 == count ? " or " : ", ", i, names[i]);
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "%s = %d: expected %s; set one of them, or 0 to take %s or its default", field, value,
                         list, env);
    }
    if (value == 0) {
        bool from_env = false;
        (void)cgm_param_string(env, &from_env);
        int which = 0;
        cgm_status st = cgm_param_choice(env, names + 1, count - 1, &which);
        if (st != CGM_SUCCESS) return st;
        value = which + 1;
        source = from_env ? "environment" : "default";
    }
    CGM_INFO(CGM_SUB_INIT, "%s=%s from %s", env, names[value], source);
    *out = value;
    return CGM_SUCCESS;
}

static cgm_status resolve_precision(cgm_resolved_config *c, const cgm_config *in) {
    const char *partial[CGM_PARTIAL_DTYPE_COUNT_], *reduction[CGM_GEMM_REDUCTION_COUNT_];
    for (int i = 0; i < CGM_PARTIAL_DTYPE_COUNT_; i++) partial[i] = cgm_partial_dtype_name((cgm_partial_dtype)i);
    for (int i = 0; i < CGM_GEMM_REDUCTION_COUNT_; i++)
        reduction[i] = cgm_gemm_reduction_name((cgm_gemm_reduction)i);
    int v = 0;
    cgm_status st = resolve_enum("config.partial_dtype", (int)in->partial_dtype, partial, CGM_PARTIAL_DTYPE_COUNT_,
                                 "COMMGEMM_PARTIAL_DTYPE", &v);
    if (st != CGM_SUCCESS) return st;
    c->partial_dtype = (cgm_partial_dtype)v;
    st = resolve_enum("config.gemm_reduction", (int)in->gemm_reduction, reduction, CGM_GEMM_REDUCTION_COUNT_,
                      "COMMGEMM_GEMM_REDUCTION", &v);
    if (st != CGM_SUCCESS) return st;
    c->gemm_reduction = (cgm_gemm_reduction)v;
    return CGM_SUCCESS;
}

/* AUTO: host for a LOCAL bootstrap; p2p inside one NVLink domain, else nccl. */
static cgm_status resolve_auto(const cgm_comm *comm, cgm_backend *out) {
    if (comm->bootstrap_kind == CGM_BOOTSTRAP_LOCAL) {
        *out = CGM_BACKEND_HOST;
        return CGM_SUCCESS;
    }
    const cgm_backend order[] = {CGM_BACKEND_P2P, CGM_BACKEND_NCCL};
    char reasons[1024] = "";
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const cgm_backend_vtable *vt = cgm_backend_lookup(order[i]);
        if (!vt) continue;
        if (vt->probe(comm) == CGM_SUCCESS) {
            CGM_INFO(CGM_SUB_INIT, "backend auto -> %s", vt->name);
            *out = order[i];
            return CGM_SUCCESS;
        }
        size_t len = strlen(reasons);
        snprintf(reasons + len, sizeof reasons - len, " [%s: %s]", vt->name, cgm_last_error());
    }
    return cgm_error(CGM_ERROR_UNAVAILABLE,
                     "backend auto: no GPU backend can serve this NCCL comm:%s",
                     reasons[0] ? reasons : " this build has no GPU backend (rebuild with nvcc and NCCL)");
}

static cgm_status resolve_config(cgm_comm *comm, const cgm_config *in) {
    cgm_resolved_config *c = &comm->config;
    cgm_status st;
    cgm_backend env_all, env_op[CGM_OP_COUNT_];
    if ((st = env_backends(&env_all, env_op))) return st;
    /* Global default: config, env, auto. */
    c->backend = in->backend != CGM_BACKEND_DEFAULT ? in->backend
                 : env_all != CGM_BACKEND_DEFAULT    ? env_all
                                                     : CGM_BACKEND_AUTO;
    if ((unsigned)c->backend >= CGM_BACKEND_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "config.backend = %d: expected a cgm_backend value",
                         (int)c->backend);
    /* Per op, the more specific setting wins: config.op_backend[op], then
     * the variable's op:backend item, then the default above. */
    for (int op = 0; op < CGM_OP_COUNT_; op++) {
        cgm_backend b = in->op_backend[op];
        const char *source = "config.op_backend";
        if ((unsigned)b >= CGM_BACKEND_COUNT_)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "config.op_backend[%s] = %d: expected a cgm_backend value",
                             cgm_op_name((cgm_op)op), (int)b);
        if (b == CGM_BACKEND_DEFAULT) {
            b = env_op[op] != CGM_BACKEND_DEFAULT ? env_op[op] : c->backend;
            source = env_op[op] != CGM_BACKEND_DEFAULT ? "COMMGEMM_BACKEND" : "default backend";
        }
        if (b == CGM_BACKEND_AUTO && (st = resolve_auto(comm, &b))) return st;
        c->op_backend[op] = b;
        CGM_INFO(CGM_SUB_INIT, "%s backend=%s from %s", cgm_op_name((cgm_op)op), cgm_backend_name(b),
                 source);
    }
    if ((st = resolve_int("config.max_m", in->max_m, "COMMGEMM_MAX_M", 1, CGM_DIM_MAX, &c->max_m))) return st;
    if ((st = resolve_int("config.max_n", in->max_n, "COMMGEMM_MAX_N", 1, CGM_DIM_MAX, &c->max_n))) return st;
    if ((st = resolve_int("config.max_k", in->max_k, "COMMGEMM_MAX_K", 1, CGM_DIM_MAX, &c->max_k))) return st;
    int64_t width = c->max_n > c->max_k ? c->max_n : c->max_k;
    if (c->max_m > WORKSPACE_ELEMS_MAX / width)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "max_m = %lld with max(max_n, max_k) = %lld: workspaces of max_m x max(max_n, "
                         "max_k) elements, expected at most 2^46; lower them to the largest m, n and k "
                         "your calls use (config or COMMGEMM_MAX_M/N/K)",
                         (long long)c->max_m, (long long)width);
    if ((st = resolve_int("config.timeout_ms", in->timeout_ms, "COMMGEMM_TIMEOUT_MS", 1, TIMEOUT_MS_MAX,
                          &c->timeout_ms)))
        return st;
    int64_t v;
    if ((st = resolve_int("config.splits", in->splits, "COMMGEMM_SPLITS", 0, INT32_MAX, &v))) return st;
    c->splits = (int)v;
    if ((st = resolve_int("config.host_threads", in->host_threads, "COMMGEMM_HOST_THREADS", 1,
                          CGM_HOST_THREADS_MAX, &v)))
        return st;
    c->host_threads = (int)v;
    if ((st = resolve_int("config.check_agreement", in->check_agreement, "COMMGEMM_CHECK_AGREEMENT", 0, 1, &v)))
        return st;
    c->check_agreement = (int)v;
    if ((st = resolve_precision(c, in))) return st;
    if (in->algo != CGM_UNSET) {
        if ((unsigned)in->algo >= CGM_ALGO_COUNT_)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "config.algo = %d: expected a cgm_algo value",
                             in->algo);
        c->algo = (cgm_algo)in->algo;
    } else {
        bool from_env;
        const char *text = cgm_param_string("COMMGEMM_ALGO", &from_env);
        if (cgm_algo_from_name(text, &c->algo) != CGM_SUCCESS)
            return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                             "environment variable COMMGEMM_ALGO=\"%s\": expected auto, split, ring, "
                             "no_overlap or fused", text);
    }
    return CGM_SUCCESS;
}

/* ---- backend state ---- */

cgm_status cgm_comm_backend_ready(cgm_comm *comm, cgm_backend id) {
    if (comm->backend_ready[id]) return CGM_SUCCESS;
    const cgm_backend_vtable *vt = cgm_backend_lookup(id);
    if (!vt)
        return cgm_error(CGM_ERROR_UNAVAILABLE,
                         "the %s backend is not part of this build of commgemm; rebuild with the CUDA "
                         "toolkit (nvcc) and NCCL installed (cmake -DCOMMGEMM_CUDA=ON), or choose "
                         "another backend", cgm_backend_name(id));
    cgm_status st = vt->probe(comm);
    if (st != CGM_SUCCESS) return st;
    st = vt->init(comm, &comm->backend_state[id]);
    if (st != CGM_SUCCESS) return cgm_error_context(st, "initialising the %s backend", vt->name);
    comm->backend_ready[id] = true;
    return CGM_SUCCESS;
}

cgm_status cgm_comm_local_allgather(cgm_comm *comm, const void *mine,
                                    size_t bytes, void *all) {
    if (comm->bootstrap_kind != CGM_BOOTSTRAP_LOCAL)
        return cgm_error(CGM_ERROR_INTERNAL,
                         "a host-channel exchange on a comm without a LOCAL "
                         "bootstrap; please report this bug");
    if (comm->nranks == 1 || bytes == 0) {
        if (bytes) memcpy(all, mine, bytes);
        return CGM_SUCCESS;
    }
    cgm_status st = cgm_comm_backend_ready(comm, CGM_BACKEND_HOST);
    if (st != CGM_SUCCESS)
        return cgm_error_context(st, "exchanging through the host channel");
    const cgm_tune_hooks *hooks = cgm_backend_lookup(CGM_BACKEND_HOST)->tune;
    /* The channel carries up to 31 words per exchange: go in pieces. */
    enum { PIECE = 31 };
    size_t words = (bytes + 7) / 8, nr = (size_t)comm->nranks;
    int64_t piece[PIECE], *got = malloc(nr * PIECE * sizeof *got);
    if (!got)
        return cgm_error(CGM_ERROR_OUT_OF_MEMORY,
                         "expected memory for an exchange of %d ranks, found "
                         "none free", comm->nranks);
    for (size_t w0 = 0; w0 < words && st == CGM_SUCCESS; w0 += PIECE) {
        size_t n = words - w0 < PIECE ? words - w0 : PIECE;
        size_t off = w0 * 8, len = bytes - off < n * 8 ? bytes - off : n * 8;
        memset(piece, 0, sizeof piece);
        memcpy(piece, (const char *)mine + off, len);
        st = hooks->allgather(comm, comm->backend_state[CGM_BACKEND_HOST],
                              piece, (int)n, got);
        for (size_t r = 0; st == CGM_SUCCESS && r < nr; r++)
            memcpy((char *)all + r * bytes + off, got + r * n, len);
    }
    free(got);
    return st;
}

static cgm_status finalize_backends(cgm_comm *comm) {
    cgm_status first = CGM_SUCCESS;
    for (int id = CGM_BACKEND_COUNT_ - 1; id >= 0; id--) {
        if (!comm->backend_ready[id]) continue;
        cgm_status st = cgm_backend_lookup((cgm_backend)id)->finalize(comm, comm->backend_state[id]);
        if (st != CGM_SUCCESS && first == CGM_SUCCESS) first = st;
        comm->backend_ready[id] = false;
        comm->backend_state[id] = NULL;
    }
    return first;
}

static bool rendezvous_valid(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 80) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '-' || ch == '_' || ch == '.'))
            return false;
    }
    return true;
}

cgm_status cgm_comm_create(const cgm_bootstrap *bootstrap, const cgm_config *config, cgm_comm **out) {
    cgm_status st;
    cgm_comm *comm = NULL;
    if (!out) return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_comm_create: comm (output) is NULL");
    *out = NULL;
    if (!bootstrap)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_comm_create: bootstrap is NULL; fill one with cgm_bootstrap_from_env() or "
                         "CGM_BOOTSTRAP_INIT and its fields");
    static const size_t bootstrap_sizes[] = {sizeof(cgm_bootstrap)};
    static const size_t config_sizes[] = {CGM_SIZE_BEFORE(cgm_config, partial_dtype), sizeof(cgm_config)};
    st = cgm_check_struct_size("cgm_comm_create", "bootstrap", bootstrap->struct_size, bootstrap_sizes, 1,
                               "CGM_BOOTSTRAP_INIT");
    if (st != CGM_SUCCESS) return st;
    cgm_config cfg = CGM_CONFIG_INIT;
    if (config) {
        st = cgm_check_struct_size("cgm_comm_create", "config", config->struct_size, config_sizes, 2,
                                   "CGM_CONFIG_INIT");
        if (st != CGM_SUCCESS) return st;
        /* A program built against an older header: the fields it lacks stay unset. */
        memcpy(&cfg, config, config->struct_size);
        cfg.struct_size = sizeof cfg;
    }
    comm = calloc(1, sizeof *comm);
    if (!comm) return cgm_error(CGM_ERROR_OUT_OF_MEMORY, "cgm_comm_create: no memory for the comm");
    comm->magic = CGM_COMM_MAGIC;
    comm->cuda_device = -1;
    comm->bootstrap_kind = bootstrap->kind;
    if (bootstrap->kind == CGM_BOOTSTRAP_LOCAL) {
        if (bootstrap->nranks < 1 || bootstrap->nranks > 4096) {
            st = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                           "cgm_comm_create: bootstrap.nranks = %d, expected 1..4096", bootstrap->nranks);
            goto fail;
        }
        if (bootstrap->rank < 0 || bootstrap->rank >= bootstrap->nranks) {
            st = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                           "cgm_comm_create: bootstrap.rank = %d, expected 0 <= rank < nranks = %d",
                           bootstrap->rank, bootstrap->nranks);
            goto fail;
        }
        if (!bootstrap->rendezvous || !rendezvous_valid(bootstrap->rendezvous)) {
            st = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                           "cgm_comm_create: bootstrap.rendezvous = \"%s\": expected 1..80 characters of "
                           "letters, digits, '-', '_', '.', shared by all ranks",
                           bootstrap->rendezvous ? bootstrap->rendezvous : "(null)");
            goto fail;
        }
        comm->rank = bootstrap->rank;
        comm->nranks = bootstrap->nranks;
        snprintf(comm->rendezvous, sizeof comm->rendezvous, "%s", bootstrap->rendezvous);
    } else if (bootstrap->kind == CGM_BOOTSTRAP_NCCL) {
        if (!bootstrap->nccl_comm) {
            st = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                           "cgm_comm_create: bootstrap.kind is NCCL but bootstrap.nccl_comm is NULL; pass "
                           "the ncclComm_t your framework created");
            goto fail;
        }
        comm->nccl_comm = bootstrap->nccl_comm;
        st = cgm_nccl_comm_query(comm->nccl_comm, &comm->rank, &comm->nranks, &comm->cuda_device);
        if (st != CGM_SUCCESS) goto fail;
    } else {
        st = cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                       "cgm_comm_create: bootstrap.kind = %d, expected CGM_BOOTSTRAP_LOCAL (1) or "
                       "CGM_BOOTSTRAP_NCCL (2)", (int)bootstrap->kind);
        goto fail;
    }
    cgm_log_set_rank(comm->rank);
    st = cgm_log_check_settings();
    if (st != CGM_SUCCESS) goto fail;
    st = resolve_config(comm, &cfg);
    if (st != CGM_SUCCESS) goto fail;
    st = cgm_tune_init(comm);
    if (st != CGM_SUCCESS) goto fail;
    /* Initialise in backend-id order so that every rank runs the same
     * collective inits in the same order. */
    for (int id = 0; id < CGM_BACKEND_COUNT_; id++) {
        bool used = false;
        for (int op = 0; op < CGM_OP_COUNT_; op++) used |= comm->config.op_backend[op] == (cgm_backend)id;
        if (used && (st = cgm_comm_backend_ready(comm, (cgm_backend)id)) != CGM_SUCCESS) goto fail;
    }
    if (!live_add(comm)) {
        st = cgm_error(CGM_ERROR_OUT_OF_MEMORY, "cgm_comm_create: no memory to register the comm");
        goto fail;
    }
    CGM_INFO(CGM_SUB_INIT, "comm %p created: rank %d of %d", (void *)comm, comm->rank, comm->nranks);
    *out = comm;
    return CGM_SUCCESS;
fail:
    if (comm) {
        finalize_backends(comm);
        cgm_tune_destroy(comm);
        comm->magic = 0;
        free(comm);
    }
    return st;
}

cgm_status cgm_comm_init_nccl(void *nccl_comm, const cgm_config *config, cgm_comm **comm) {
    cgm_bootstrap b = CGM_BOOTSTRAP_INIT;
    b.kind = CGM_BOOTSTRAP_NCCL;
    b.nccl_comm = nccl_comm;
    return cgm_comm_create(&b, config, comm);
}

cgm_status cgm_comm_destroy(cgm_comm *comm) {
    if (!comm) return CGM_SUCCESS;
    bool found = false;
    cgm_status st = CGM_SUCCESS;
    pthread_mutex_lock(&live_lock);
    for (int i = 0; i < live_count && !found; i++) found = live_comms[i] == comm;
    if (found) st = take(comm, "cgm_comm_destroy"); /* not while a call runs on it */
    pthread_mutex_unlock(&live_lock);
    if (st != CGM_SUCCESS) return st;
    if (!found || !live_remove(comm))
        return cgm_error(CGM_ERROR_INVALID_USAGE,
                         "cgm_comm_destroy: comm %p is not a live communicator (already destroyed, or "
                         "never created by cgm_comm_create)", (void *)comm);
    st = finalize_backends(comm);
    cgm_tune_destroy(comm);
    comm->magic = 0;
    free(comm);
    return st;
}

cgm_status cgm_comm_rank(const cgm_comm *comm, int *rank) {
    if (!cgm_comm_is_live(comm)) return cgm_comm_check_usable(comm, "cgm_comm_rank");
    if (!rank) return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_comm_rank: rank (output) is NULL");
    *rank = comm->rank;
    return CGM_SUCCESS;
}

cgm_status cgm_comm_size(const cgm_comm *comm, int *nranks) {
    if (!cgm_comm_is_live(comm)) return cgm_comm_check_usable(comm, "cgm_comm_size");
    if (!nranks) return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_comm_size: nranks (output) is NULL");
    *nranks = comm->nranks;
    return CGM_SUCCESS;
}

cgm_backend cgm_comm_call_backend(const cgm_comm *comm, cgm_op op, cgm_backend requested) {
    return requested == CGM_BACKEND_DEFAULT || requested == CGM_BACKEND_AUTO ? comm->config.op_backend[op]
                                                                             : requested;
}

cgm_status cgm_comm_backend(const cgm_comm *comm, cgm_op op, cgm_backend *backend) {
    if (!cgm_comm_is_live(comm)) return cgm_comm_check_usable(comm, "cgm_comm_backend");
    if (!backend) return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_comm_backend: backend (output) is NULL");
    if ((unsigned)op >= CGM_OP_COUNT_)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_comm_backend: op = %d, expected a cgm_op value",
                         (int)op);
    *backend = comm->config.op_backend[op];
    return CGM_SUCCESS;
}

cgm_status cgm_comm_precision(const cgm_comm *comm, cgm_partial_dtype *partial_dtype,
                              cgm_gemm_reduction *gemm_reduction) {
    if (!cgm_comm_is_live(comm)) return cgm_comm_check_usable(comm, "cgm_comm_precision");
    if (!partial_dtype && !gemm_reduction)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT,
                         "cgm_comm_precision: partial_dtype and gemm_reduction (outputs) are both NULL; pass "
                         "at least one");
    if (partial_dtype) *partial_dtype = comm->config.partial_dtype;
    if (gemm_reduction) *gemm_reduction = comm->config.gemm_reduction;
    return CGM_SUCCESS;
}

cgm_status cgm_comm_get_async_error(cgm_comm *comm, cgm_status *async_error) {
    if (!cgm_comm_is_live(comm)) return cgm_comm_check_usable(comm, "cgm_comm_get_async_error");
    if (!async_error)
        return cgm_error(CGM_ERROR_INVALID_ARGUMENT, "cgm_comm_get_async_error: async_error is NULL");
    if (comm->broken == CGM_SUCCESS) {
        for (int id = 0; id < CGM_BACKEND_COUNT_; id++) {
            const cgm_backend_vtable *vt = comm->backend_ready[id] ? cgm_backend_lookup((cgm_backend)id) : NULL;
            if (!vt || !vt->async_error) continue;
            cgm_status st = vt->async_error(comm, comm->backend_state[id]);
            if (st != CGM_SUCCESS) {
                cgm_comm_mark_broken(comm, st);
                break;
            }
        }
    }
    if (comm->broken != CGM_SUCCESS) cgm_error(comm->broken, "%s", comm->broken_message);
    *async_error = comm->broken;
    return CGM_SUCCESS;
}
