/* Internal core: errors, logging, parameters, the comm object, the
 * normalized call and the backend table. Every backend includes this. */
#ifndef COMMGEMM_CORE_H
#define COMMGEMM_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "commgemm.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define CGM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CGM_PRINTF(a, b)
#endif

/* ---------------------------------------------------------------- errors */

/* Records `fmt` as this thread's cgm_last_error() detail, logs it at WARN
 * and returns `status`, so that `return cgm_error(...)` reads naturally.
 * Messages say what was expected, what was found and what to do. */
cgm_status cgm_error(cgm_status status, const char *fmt, ...) CGM_PRINTF(2, 3);
/* Prepends "context: " to the current detail (keeps the status). */
cgm_status cgm_error_context(cgm_status status, const char *fmt, ...)
    CGM_PRINTF(2, 3);
/* CGM_ERROR_UNAVAILABLE for a GPU backend that found no usable GPU, from
 * what the CUDA runtime said (cudaGetDeviceCount's error and its name,
 * cudaDriverGetVersion's 0 when no driver is installed, the runtime's
 * version): no NVIDIA driver, one too old, or no GPU seen. Pure C, so that
 * it is tested in every build (src/core/gpu_absent.c). */
cgm_status cgm_gpu_absent_error(const char *backend, int cuda_error, const char *cuda_error_name,
                                int driver_version, int runtime_version);

/* Checks the struct_size of a versioned public struct (cgm_config,
 * cgm_bootstrap, cgm_op_options) against the sizes it has had, oldest
 * first, sizes[count - 1] being this library's: CGM_SUCCESS for any of
 * them (the caller then reads only `found` bytes and leaves the later
 * fields unset); else CGM_ERROR_INVALID_ARGUMENT saying whether the program
 * was built against a newer header (larger), or did not use init_macro. */
cgm_status cgm_check_struct_size(const char *function, const char *what, size_t found, const size_t *sizes,
                                 int count, const char *init_macro);
/* The sizeof a public struct had before `first_new_field` was added at its
 * end (fields only ever grow at the end, never wider-aligned). */
#define CGM_SIZE_BEFORE(type, first_new_field)                                \
    ((offsetof(type, first_new_field) + _Alignof(type) - 1) / _Alignof(type) * _Alignof(type))

/* ---------------------------------------------------------------- logging */

typedef enum cgm_log_level {
    CGM_LOG_NONE = 0,
    CGM_LOG_WARN = 1,
    CGM_LOG_INFO = 2,
    CGM_LOG_TRACE = 3
} cgm_log_level;

/* Subsystems, selectable with COMMGEMM_DEBUG_SUBSYS=INIT,HOST,... */
enum {
    CGM_SUB_INIT = 1u << 0,
    CGM_SUB_PLAN = 1u << 1,
    CGM_SUB_HOST = 1u << 2,
    CGM_SUB_P2P = 1u << 3,
    CGM_SUB_NCCL = 1u << 4,
    CGM_SUB_CUBLASMP = 1u << 5,
    CGM_SUB_TUNE = 1u << 6,
    CGM_SUB_CALL = 1u << 7,
    CGM_SUB_ALL = 0xffffu
};

bool cgm_log_enabled(cgm_log_level level, unsigned subsys);
void cgm_log_write(cgm_log_level level, unsigned subsys, const char *file,
                   int line, const char *fmt, ...) CGM_PRINTF(5, 6);
/* The rank shown in log prefixes (host:pid:rank). */
void cgm_log_set_rank(int rank);
/* COMMGEMM_DEBUG and COMMGEMM_DEBUG_SUBSYS hold known words: CGM_SUCCESS,
 * else CGM_ERROR_INVALID_ARGUMENT naming the variable, its value and the
 * words it takes (cgm_comm_create refuses such a setting). */
cgm_status cgm_log_check_settings(void);

/* Level checked before any formatting. */
#define CGM_LOG(level, subsys, ...)                                          \
    do {                                                                     \
        if (cgm_log_enabled((level), (subsys)))                              \
            cgm_log_write((level), (subsys), __FILE__, __LINE__,             \
                          __VA_ARGS__);                                      \
    } while (0)
#define CGM_WARN(sub, ...) CGM_LOG(CGM_LOG_WARN, sub, __VA_ARGS__)
#define CGM_INFO(sub, ...) CGM_LOG(CGM_LOG_INFO, sub, __VA_ARGS__)
#define CGM_TRACE(sub, ...) CGM_LOG(CGM_LOG_TRACE, sub, __VA_ARGS__)

/* ------------------------------------------------------------- parameters */

/* Environment parameters are declared once, in the table in param.c
 * (name, type, default, help), read once and cached. docs/env.md is
 * generated from it (commgemm-env-doc). */
typedef enum cgm_param_type {
    CGM_PARAM_INT = 0,
    CGM_PARAM_STRING = 1
} cgm_param_type;

/* Who a parameter is for: docs/env.md lists each kind in its section. */
typedef enum cgm_param_section {
    CGM_PARAM_SETTING = 0,  /* a user's setting */
    CGM_PARAM_LAUNCHER = 1, /* set by commgemm-run for cgm_bootstrap_from_env */
    CGM_PARAM_TESTING = 2   /* tests only */
} cgm_param_section;

typedef struct cgm_param {
    const char *name;
    cgm_param_type type;
    const char *default_value; /* NULL: no default ("unset") */
    cgm_param_section section;
    const char *help; /* at most CGM_PARAM_HELP_MAX characters: two lines of env.md */
} cgm_param;
#define CGM_PARAM_HELP_MAX 200

const cgm_param *cgm_param_table(int *count);

/* Reads an integer parameter. *from_env is set to whether the environment
 * gave it. Returns CGM_ERROR_INVALID_ARGUMENT naming the variable when its
 * value does not parse. Unknown names are CGM_ERROR_INTERNAL. */
cgm_status cgm_param_int(const char *name, int64_t *value, bool *from_env);
/* An integer parameter that must lie in [lo, hi]: *value, or
 * CGM_ERROR_INVALID_ARGUMENT naming the variable, its value, the range,
 * `meaning` (what the range is) and the default (*value untouched). */
cgm_status cgm_param_int_range(const char *name, int64_t lo, int64_t hi,
                               const char *meaning, int64_t *value);
/* String parameter: the env value, else the default (may be NULL);
 * *from_env (when from_env is not NULL) says which. */
const char *cgm_param_string(const char *name, bool *from_env);

/* A string parameter that takes one of `count` words, choices[0] being its
 * default: *index = the position of its value. CGM_ERROR_INVALID_ARGUMENT
 * naming the variable, its value and the choices otherwise (*index
 * untouched). */
cgm_status cgm_param_choice(const char *name, const char *const *choices,
                            int count, int *index);


/* ------------------------------------------------------------------ dtype */

float cgm_bf16_to_float(uint16_t v);
uint16_t cgm_float_to_bf16(float f); /* round to nearest even; NaN kept */
float cgm_fp16_to_float(uint16_t v);
uint16_t cgm_float_to_fp16(float f); /* round to nearest even */
static inline bool cgm_dtype_is_fp8(cgm_dtype d) {
    return d == CGM_DTYPE_FP8_E4M3 || d == CGM_DTYPE_FP8_E5M2;
}
/* fp8 (`dtype` e4m3 or e5m2) codes: exact decoding (NaN, e5m2's inf,
 * subnormals); encoding rounds to nearest even and saturates magnitudes
 * above the largest finite value (and infinities) to it, NaN to NaN
 * (0x7f with the sign). The header's "FP8" has the formats. */
float cgm_fp8_to_float(uint8_t v, cgm_dtype dtype);
uint8_t cgm_float_to_fp8(float f, cgm_dtype dtype);
/* Element i of a buffer of `dtype` as float, and back (fp8: the raw code's
 * value, no scale; stores as above). */
float cgm_load_float(const void *data, cgm_dtype dtype, int64_t i);
void cgm_store_float(void *data, cgm_dtype dtype, int64_t i, float v);

/* ------------------------------------------------------------- the comm */

/* The most compute threads (queues) the host backend runs an op with. */
#define CGM_HOST_THREADS_MAX 16

/* Every field resolved: set in the config, else from env, else default. */
typedef struct cgm_resolved_config {
    cgm_backend backend;                    /* may be AUTO */
    cgm_backend op_backend[CGM_OP_COUNT_];  /* resolved: never DEFAULT/AUTO */
    int64_t max_m, max_n, max_k;
    int64_t timeout_ms;
    cgm_algo algo;
    int splits;
    int host_threads;    /* 1..CGM_HOST_THREADS_MAX */
    int check_agreement; /* 0 or 1 */
    cgm_partial_dtype partial_dtype;   /* never DEFAULT */
    cgm_gemm_reduction gemm_reduction; /* never DEFAULT */
} cgm_resolved_config;

struct cgm_backend_vtable;
struct cgm_tune_state;

#define CGM_COMM_MAGIC 0x636f6d6d67656d6dull /* "commgemm" */

struct cgm_comm {
    uint64_t magic;
    int rank;
    int nranks;
    cgm_bootstrap_kind bootstrap_kind;
    char rendezvous[96]; /* LOCAL bootstrap */
    void *nccl_comm;     /* NCCL bootstrap: the caller's ncclComm_t */
    int cuda_device;     /* NCCL bootstrap: device of the nccl comm; LOCAL:
                            the current device when a GPU backend first
                            initialised (p2p_init), else -1 */
    cgm_resolved_config config;
    /* Backend state, created collectively at comm creation for the backends
     * the ops resolved to, later (inside the first call that overrides the
     * backend) for others. Indexed by cgm_backend. */
    void *backend_state[CGM_BACKEND_COUNT_];
    bool backend_ready[CGM_BACKEND_COUNT_];
    /* Set when a timeout or peer failure broke the comm: every later op
     * returns `broken` with `broken_message`. */
    cgm_status broken;
    char broken_message[512];
    uint64_t calls; /* ops issued, for log lines */
    /* The autotuner's settings and decision cache (src/tune/tune.c). */
    struct cgm_tune_state *tune;
    /* The public function holding the comm (an op, cgm_comm_destroy), NULL
     * when free: cgm_comm_enter. */
    _Atomic(const char *) holder;
};

/* True if `comm` is a live comm (created, not destroyed). Thread safe. */
bool cgm_comm_is_live(const cgm_comm *comm);
/* Returns CGM_SUCCESS or sets the error for a comm that is not live or is
 * broken. */
cgm_status cgm_comm_check_usable(const cgm_comm *comm, const char *function);
/* A comm serves one thread at a time; a second thread's call is caught, at
 * the cost of one compare-exchange: takes `comm` for `function` (a public
 * name, a string literal) as cgm_comm_check_usable checks it, or returns
 * CGM_ERROR_INVALID_USAGE naming `function` and the call that holds it.
 * cgm_comm_leave gives it back. */
cgm_status cgm_comm_enter(cgm_comm *comm, const char *function);
void cgm_comm_leave(cgm_comm *comm);
/* Makes sure backend `id` has its state on this comm (collective the first
 * time: probe + init). */
cgm_status cgm_comm_backend_ready(cgm_comm *comm, cgm_backend id);
/* The largest m, n, k (config max_m/n/k) and matrix rows and cols: every
 * size computed from them fits an int64_t (comm.c, validate.c). */
#define CGM_DIM_MAX ((int64_t)INT32_MAX)
/* Marks the comm broken (timeout, peer failure) with the current detail. */
void cgm_comm_mark_broken(cgm_comm *comm, cgm_status status);
/* The backend that runs `op` on a live comm when the call asks for
 * `requested` (options.backend): the comm's choice for DEFAULT and AUTO
 * (the comm already resolved auto), else `requested`. */
cgm_backend cgm_comm_call_backend(const cgm_comm *comm, cgm_op op, cgm_backend requested);

/* Collective, eager, LOCAL comms only: all-gathers `bytes` of every rank
 * into all (nranks * bytes, rank major) through the host backend's
 * exchange channel (the host backend is made ready on first use), bounded
 * by the comm's timeout: a rank that never comes is a TIMEOUT naming it.
 * How the GPU backends exchange handles without an NCCL communicator. */
cgm_status cgm_comm_local_allgather(cgm_comm *comm, const void *mine,
                                    size_t bytes, void *all);

/* ------------------------------------------------------- normalized call */

/* A validated op call, as backends receive it. Matrices are copied by
 * value; `has_*` says whether an optional operand is present. Shapes are
 * checked against the layout; m is the global row count of the split
 * dimension; k is this rank's contraction length. */
typedef struct cgm_call {
    cgm_op op;
    cgm_collective collective; /* CGM_OP_BULK only */
    cgm_layout layout;
    bool accumulate;
    bool allow_tf32;
    /* GEMM+RS and GEMM+AR: the dtype the GPU backends send partials in,
     * from the resolved cgm_partial_dtype: the output dtype for OUTPUT with
     * a bf16/fp16 output, else fp32 (also for the ops that send none). In
     * the agreement signature: it changes the bytes on the wire. */
    cgm_dtype partial_dtype;
    /* cuBLASLt may only add split-k parts in fp32 (CGM_GEMM_REDUCTION_FP32).
     * Local: ranks may differ, it is not in the signature. */
    bool gemm_reduction_fp32;
    cgm_algo algo; /* the hint: AUTO, or what the caller / config asked for */
    int splits;    /* the hint: 0 = auto */
    /* Compute queues of the schedule, set by the autotuner (p2p AG+GEMM:
     * cgm_tune_candidate.queues); 0 = the backend's default (one). Local
     * scheduling only: ranks may differ, it is not in the signature. */
    int queues;
    cgm_backend backend; /* resolved for this call */
    void *stream;
    /* Set by the autotuner when it already checked, in this call, that
     * every rank makes it (cgm_tune_hooks.agree): a backend that checks
     * every call may skip its own check. */
    bool agreed;

    /* GEMM part (absent only for a collective-only bulk call). */
    bool has_gemm;
    int64_t m, n, k;       /* AG/RS/AR: global m; bulk: the local GEMM's m */
    cgm_dtype in_dtype;    /* X (and W, but for fp8: w_dtype) */
    cgm_dtype w_dtype;     /* W: in_dtype, or the other fp8 flavour */
    cgm_dtype out_dtype;   /* Y (and bias, but for fp8 calls: bias.dtype) */
    /* fp8 calls: the recipe (X's scaling: TENSOR, or BLOCK_1X128 with W
     * BLOCK_128X128), the output's amax (NULL: none) and fast
     * accumulation; NONE, NULL, false otherwise. */
    cgm_scaling scaling;
    float *y_amax;
    bool fp8_fast_accum;
    cgm_matrix x, w, y;    /* AG: x is the shard; RS: y is the shard */
    bool has_bias;
    cgm_matrix bias;
    bool has_x_gathered;
    cgm_matrix x_gathered;
    /* The epilogue (the header's "Epilogues"; NONE for a collective-only
     * bulk call) and its operands: aux (GELU_AUX writes it; DGELU and
     * DGELU_BGRAD read it), shaped like y; bgrad (DGELU_BGRAD: 1 x n;
     * BGRAD: 1 x m), written. Absent ones are zeroed, has_* false. */
    cgm_epilogue epilogue;
    bool has_aux, has_bgrad;
    cgm_matrix aux, bgrad;

    /* Collective part of a bulk call. */
    bool has_collective;
    int64_t coll_m;    /* global rows of the collective */
    int64_t coll_cols; /* columns */
    cgm_dtype coll_dtype;
    cgm_matrix send, recv;
} cgm_call;

/* Signature of a call for cross-rank agreement: fields every rank must
 * agree on (op, layout, dtypes, m, k for AG / n for RS and AR, options,
 * bias presence, RS's and AR's partial dtype, collective shape...).
 * Fields that may legitimately differ (AG's n, RS's k) are left out. */
#define CGM_SIGNATURE_WORDS 16
void cgm_call_signature(const cgm_call *call,
                        int64_t signature[CGM_SIGNATURE_WORDS]);
/* Compares the signatures of all ranks (nranks * CGM_SIGNATURE_WORDS, rank
 * major). CGM_SUCCESS, or CGM_ERROR_MISMATCH naming the first rank that
 * disagrees with rank 0, the field, both values and what to do. Every rank
 * computes the same verdict from the same data. */
cgm_status cgm_signature_compare(const cgm_comm *comm,
                                 const int64_t *all_signatures);

/* memory.c: where an operand's memory is, as the CUDA driver tells when
 * the process has loaded it (UNKNOWN otherwise); *device: the GPU of
 * DEVICE memory, else -1. */
typedef enum cgm_memory {
    CGM_MEMORY_UNKNOWN, /* no driver in the process, or not initialised */
    CGM_MEMORY_HOST,    /* memory the driver does not know: malloc, numpy */
    CGM_MEMORY_PINNED,  /* page-locked host memory (cudaHostAlloc, registered) */
    CGM_MEMORY_DEVICE,
    CGM_MEMORY_MANAGED,
} cgm_memory;
typedef cgm_memory (*cgm_memory_query_fn)(const void *p, int *device);
cgm_memory cgm_memory_of(const void *p, int *device);
/* Tests: answer cgm_memory_of with `fn` (NULL: the driver again). */
void cgm_memory_set_query(cgm_memory_query_fn fn);
/* Refuses (INVALID_ARGUMENT, naming `fn` and `name`) an operand its
 * backend cannot read: GPU memory on the host backend; CPU memory, pinned
 * or not, on a GPU backend, or memory of a GPU other than comm_device (-1:
 * not known yet). Managed memory and UNKNOWN pass. */
cgm_status cgm_check_memory(const char *fn, const char *name, const cgm_matrix *m, cgm_backend backend,
                            int comm_device);
/* The same for one pointer, named `what` in the message ("w.scale"). */
cgm_status cgm_check_pointer(const char *fn, const char *what, const void *p, cgm_backend backend,
                             int comm_device);

/* Validates an op's arguments and fills `call`. Implemented in validate.c;
 * used by the public op entry points. */
cgm_status cgm_validate_op(cgm_comm *comm, cgm_op op, const cgm_matrix *x,
                           const cgm_matrix *w, const cgm_matrix *bias,
                           cgm_matrix *y, cgm_matrix *x_gathered,
                           cgm_collective collective, const cgm_matrix *send,
                           cgm_matrix *recv, const cgm_op_options *options,
                           void *stream, cgm_call *call);

/* -------------------------------------------------------------- autotuning */

/* One choice the autotuner can make for a call (src/tune/tune.h). */
#define CGM_TUNE_MAX_CANDIDATES 14
typedef struct cgm_tune_candidate {
    cgm_algo algo;
    int splits;
    int queues; /* cgm_call.queues: 0 = the backend's default */
} cgm_tune_candidate;

/* What a backend offers the autotuner. Every hook may assume the call left
 * algo and splits open (AUTO, 0) and is not a bulk call. */
typedef struct cgm_tune_hooks {
    /* The candidates for `call`, at most CGM_TUNE_MAX_CANDIDATES, from fields
     * every rank agrees on (op, m, P, dtypes, layout: never AG's n or RS's
     * k), in an order that is the same on every rank. Returns the count;
     * below 2 the call is not tuned (the backend's default rule applies). */
    int (*candidates)(const cgm_comm *comm, const cgm_call *call,
                      cgm_tune_candidate *out);
    /* Optional (NULL: never): is the call's stream capturing a CUDA graph?
     * Nothing is measured or exchanged then. */
    bool (*capturing)(const cgm_call *call);
    /* Runs `call` (algo and splits set) `warmup` times, then `reps` times
     * timed, through this backend's run entry; ns[i] is timed run i in
     * nanoseconds (GPU: events on the call's stream, synchronized with a
     * bounded wait; host: the wall clock around the synchronous op).
     * Collective, like the op itself. */
    cgm_status (*measure)(cgm_comm *comm, void *state, const cgm_call *call,
                          int warmup, int reps, int64_t *ns);
    /* Collective, eager only: checks that every rank makes `call` (its
     * signature, as the backend's own agreement check: CGM_ERROR_MISMATCH
     * on every rank, the comm stays usable) and all-gathers `words` (<= 16)
     * int64 of every rank into all (nranks * words, rank major) in the same
     * exchange, bounded by the comm's timeout. */
    cgm_status (*agree)(cgm_comm *comm, void *state, const cgm_call *call,
                        const int64_t *mine, int words, int64_t *all);
    /* Collective, eager only: the same exchange without a call. */
    cgm_status (*allgather)(cgm_comm *comm, void *state, const int64_t *mine,
                            int words, int64_t *all);
    /* The backend checks agreement on every call (host), not once per
     * signature: the tuner then runs `agree` on every open call while
     * config.check_agreement is on (which also makes a memory hit safe
     * when ranks' caches differ) and marks the call `agreed`. */
    bool agree_every_call;
    /* Names the device the ops run on ("NVIDIA H200", "cpu x86_64"), for
     * the header of the tuning cache file. */
    void (*device_name)(const cgm_comm *comm, void *state, char *buf,
                        size_t len);
} cgm_tune_hooks;

/* How long the GPU autotuner holds the call's stream before its timed runs
 * (gpu_tune.c, cgm_dev_hold): twice the host's enqueue time of `reps` runs,
 * estimated from `warmup` runs that took `warmup_ns` on the host, within
 * [CGM_TUNE_HOLD_MIN_NS, CGM_TUNE_HOLD_MAX_NS] (the minimum without a
 * warm-up to go by). Then the timed runs are all enqueued before the device
 * starts them, and the events time the device, not the host (tune.c). */
#define CGM_TUNE_HOLD_MIN_NS 20000LL
#define CGM_TUNE_HOLD_MAX_NS 20000000LL
int64_t cgm_tune_hold_ns(int64_t warmup_ns, int warmup, int reps);

/* The candidates of the backends that execute plans (host, p2p): split
 * with 1, 2 and 4 pieces per shard, ring with 1 and 2 (P > 2 only: at
 * P = 2 a ring hop is the direct transfer), no_overlap; a piece count only
 * when every piece of a ceil(m / P)-row shard keeps >= min_piece_rows rows
 * (1 piece always). From m and P, which every rank agrees on. Returns
 * the count (<= 6) written to out (tune.c). */
int cgm_tune_plan_candidates(int64_t m, int nranks, int min_piece_rows,
                             cgm_tune_candidate *out);

/* --------------------------------------------------------------- backends */

/* One table per backend (like NCCL's struct ncclTransport). Adding a
 * backend means adding one folder and one entry in backend_registry.c. */
typedef struct cgm_backend_vtable {
    cgm_backend id;
    const char *name;
    /* Can this backend serve `comm` (bootstrap kind, devices, libraries)?
     * Local check only, never communicates. CGM_SUCCESS, or
     * CGM_ERROR_UNAVAILABLE with a message saying how to get it. */
    cgm_status (*probe)(const cgm_comm *comm);
    /* Collective. Creates the backend's state for `comm`. */
    cgm_status (*init)(cgm_comm *comm, void **state);
    /* Optional (NULL: every validated call). Refuses, before the
     * autotuner or any exchange, a validated call this backend does not
     * run (CGM_ERROR_NOT_SUPPORTED saying what to do instead, e.g. fp8 on
     * a GPU backend). Local, never communicates: every rank making the
     * same call decides the same. */
    cgm_status (*check)(const cgm_comm *comm, const cgm_call *call);
    /* Runs one op: `call` is validated and carries the op (call->op); the
     * backend resolves algo and splits, checks cross-rank agreement when
     * config.check_agreement, and runs or enqueues the op. An op the
     * backend does not offer is CGM_ERROR_NOT_SUPPORTED saying which
     * backend to use. A timeout or peer failure must be returned as such
     * (the core then marks the comm broken). */
    cgm_status (*run)(cgm_comm *comm, void *state, const cgm_call *call);
    /* Optional (NULL: nothing to do). The core rejected this rank's call of
     * `op` (bad arguments: `status`, the detail in cgm_last_error()) before
     * the backend saw it, while the peers may be in the op's cross-rank
     * exchange: tell them, so that they fail at once naming this rank.
     * Never blocks; must keep cgm_last_error(). */
    void (*rejected)(cgm_comm *comm, void *state, cgm_op op, cgm_status status);
    /* Optional (NULL: never fails asynchronously). Non-blocking: an error
     * that device work hit after its op returned (e.g. a bounded wait that
     * expired), with the detail set through cgm_error(); else CGM_SUCCESS. */
    cgm_status (*async_error)(cgm_comm *comm, void *state);
    /* Frees the state. Bounded; called on broken comms too. */
    cgm_status (*finalize)(cgm_comm *comm, void *state);
    /* Optional (NULL: this backend's calls are never tuned; its default
     * rules apply). See docs/TUNING.md. */
    const cgm_tune_hooks *tune;
} cgm_backend_vtable;

/* The table for `id`, or NULL when this build does not include it. */
const cgm_backend_vtable *cgm_backend_lookup(cgm_backend id);

/* For NCCL bootstraps: rank, size and CUDA device of an ncclComm_t.
 * CGM_ERROR_UNAVAILABLE in a build without NCCL. */
cgm_status cgm_nccl_comm_query(void *nccl_comm, int *rank, int *nranks,
                               int *cuda_device);

/* ------------------------------------------------------------ utilities */

/* Monotonic clock in nanoseconds. */
int64_t cgm_now_ns(void);

/* Runs run(arg) on a helper thread and waits at most timeout_ms for it:
 * CGM_SUCCESS once it returned (what it made is in arg, the caller's
 * again). CGM_ERROR_TIMEOUT ("<what> did not return within N ms") when it
 * did not: the call stays with its thread, which calls orphan(arg) (if
 * not NULL) when run returns, to release what the late call made and arg
 * itself; the caller must not touch arg again. CGM_ERROR_SYSTEM when no
 * thread could be started (arg untouched). */
cgm_status cgm_bounded_run(void (*run)(void *), void (*orphan)(void *),
                           void *arg, int64_t timeout_ms, const char *what);
/* A matrix's leading dimension (ld = 0 means dense: ld = cols). */
static inline int64_t cgm_matrix_ld(const cgm_matrix *m) {
    return m->ld ? m->ld : m->cols;
}

/* The library's copy of a caller's matrix: `scaling` read only where the
 * dtype is fp8 (a program built before fp8 passes a smaller struct),
 * NONE otherwise. validate_fp8.c. */
cgm_matrix cgm_matrix_take(const cgm_matrix *m);
/* The fp32 scales of an fp8 matrix as a matrix of their own (what the
 * overlap and memory checks look at): TENSOR [1, 1], BLOCK_1X128
 * [rows, ceil(cols / 128)], BLOCK_128X128 [ceil(rows / 128),
 * ceil(cols / 128)], data = scale; a matrix with no elements otherwise. */
cgm_matrix cgm_scale_matrix(const cgm_matrix *m);

/* Do a and b share a byte of memory? Exact for equal row strides (e.g.
 * column slices of one buffer); otherwise true when their byte ranges
 * meet. The validation's in-place check (validate.c). */
bool cgm_matrix_overlap(const cgm_matrix *a, const cgm_matrix *b);
/* ceil(a / b) for a >= 0, b > 0. */
static inline int64_t cgm_ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

#ifdef __cplusplus
}
#endif

#endif /* COMMGEMM_CORE_H */
